//! Scripted runs: a schedule of steps, written by hand, that leads the simulated cluster to one
//! moment where a single guard is all that stands between two processes admitting one shard.
//!
//! A script runs on the same [`World`] as a seed, so on the same production cores
//! (`LeaseState::apply` on every replica, the leader's `TermSteps`, `DeliveryPlanner` and
//! `CommitSignal`, `AdmissionCore` and the lease loop's `LeaseCalls`) and with the same checks after every
//! event (I1, I2, I1 at its source, the state's consistency). What the script decides instead of
//! a seed:
//!
//! - When the loops' timers fire: the leader's tick ([`Step::Tick`]) and each executor's next
//!   call ([`Step::Call`]). What a loop does at once in reaction to a commit (a step after a
//!   membership change, a delivery round when pushes are owed) happens as in production.
//! - The network. Executors' calls reach the leader at once. Everything the managers send waits
//!   in the network until a step delivers or drops it, except replies to calls, whose fate the
//!   step that made the call names. Executors' answers to pushes and revokes reach the leader at
//!   once unless the step that delivered the push or revoke holds them.
//! - Time. Every clock runs at the true rate and time passes only in [`Step::Advance`], where
//!   the timeouts fire (a call's patience, a delivery's); a leader change names the new leader's
//!   clock against the old one's.
//! - Raft: a proposal commits at once unless the script holds commits ([`Step::HoldCommits`]).
//!
//! The first leader took office when the cluster was initialised, and the script starts
//! [`START_MS`] later, longer than any lease a script tells, so P6.1 holds nothing back in that
//! term. After the last step the world goes live (the held messages arrive, the loops run on
//! their own timers) and must converge as a seed's run does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::checks::Violation;
use crate::run::settle;
use crate::scenario::Scenario;
use crate::world::{Coverage, LetterKind, Slot, Timer, World};

/// When the script's first step runs, after the cluster was initialised and its first leader
/// took office.
pub const START_MS: u64 = 10_000;

/// What becomes of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// It arrives at once.
    Delivered,
    /// It waits in the network until a [`Step::Deliver`] (or the end of the script).
    Held,
    /// It never arrives; its sender finds out by its own timeout.
    Lost,
}

/// Which of the held messages of one kind a step takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    Oldest,
    Newest,
}

/// One step of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A new executor process starts in the next slot (0, 1, ...) and its lease loop registers.
    Spawn { reply: Fate },
    /// As [`Step::Spawn`], into space `space` of the script's scenario (0: `default`, `i + 1`:
    /// its `namespaces[i]`, P18.1), stating that namespace's zone for the slot (P18.3).
    SpawnIn { space: usize, reply: Fate },
    /// The lease loop of the executor in `slot` makes its next call: a renewal with its claims
    /// (P4.2), or a registration with the same incarnation when none stands (P7.2). The call
    /// must be possible (no call in flight).
    Call { slot: Slot, reply: Fate },
    /// A held message of `kind` to or from `slot` arrives; the executor's answer to a push or a
    /// revoke then has the fate `answer`.
    Deliver {
        slot: Slot,
        kind: LetterKind,
        pick: Pick,
        answer: Fate,
    },
    /// A held message of `kind` to or from `slot` is lost.
    Drop {
        slot: Slot,
        kind: LetterKind,
        pick: Pick,
    },
    /// The leader loop's tick (P3.8): a step of its core, then the step's writes (reap,
    /// complete expired handoffs, plan).
    Tick,
    /// Time passes; timeouts due meanwhile fire.
    Advance { ms: u64 },
    /// Raft replication stalls: the leader's proposals wait in its uncommitted tail, and what
    /// it reads is the applied state.
    HoldCommits,
    /// The tail commits, in order, and proposals commit at once again.
    Commit,
    /// The leader loses office (its uncommitted tail committed by the next one, or lost) and
    /// another manager takes office at once, its clock `skew_ms` ahead of the old leader's
    /// (behind if negative). It steps and pushes every executor its set at once (P6.2).
    LeaderChange { skew_ms: i64, keep_tail: bool },
    /// An operator sets the lease duration (P3.4).
    SetLease { ms: u64 },
    /// SIGTERM to the executor in `slot`: it stops admitting, then deregisters (P3.7).
    Stop { slot: Slot },
}

/// A script that ran to its end and converged.
#[derive(Debug)]
pub struct ScriptRun {
    /// What the script reached when its last step was done, before the world went live.
    pub reached: Coverage,
    /// The world after it converged; its coverage counts the whole run.
    pub world: World,
}

/// A violated invariant, a premise of the script that did not hold, or no convergence.
#[derive(Debug)]
pub struct ScriptFailure {
    pub violation: Violation,
    pub trace: Vec<String>,
}

impl fmt::Display for ScriptFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.violation)?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// Runs `steps` on a cluster of `shards` shards with a lease of `lease_ms`, then lets it
/// converge.
pub fn run_script(shards: u32, lease_ms: u64, steps: &[Step]) -> Result<ScriptRun, ScriptFailure> {
    run_script_in(Scenario::scripted(shards, lease_ms), steps)
}

/// Runs `steps` on the cluster `scenario` describes (a [`Scenario::scripted`], with namespaces
/// beside `default` if it has them: created before the script starts), then lets it converge.
pub fn run_script_in(scenario: Scenario, steps: &[Step]) -> Result<ScriptRun, ScriptFailure> {
    let mut runner = Runner {
        world: World::scripted(scenario, true),
        reply_fates: BTreeMap::new(),
        answer_fates: BTreeMap::new(),
        held: BTreeSet::new(),
    };
    match runner.run(steps) {
        Ok(reached) => Ok(ScriptRun {
            reached,
            world: runner.world,
        }),
        Err(violation) => Err(ScriptFailure {
            violation,
            trace: runner.world.trace_lines().to_vec(),
        }),
    }
}

struct Runner {
    world: World,
    /// The fate of the next reply to each slot's call.
    reply_fates: BTreeMap<Slot, Fate>,
    /// The fate of the answer to the push or revoke a step is delivering.
    answer_fates: BTreeMap<Slot, Fate>,
    /// Messages held in the network.
    held: BTreeSet<u64>,
}

impl Runner {
    fn run(&mut self, steps: &[Step]) -> Result<Coverage, Violation> {
        self.quiesce()?;
        self.advance(START_MS)?;
        for (index, step) in steps.iter().enumerate() {
            self.world
                .note(|| format!("script step {}: {step:?}", index + 1));
            self.step(step)
                .map_err(|violation| premise(index, step, violation))?;
            self.world.check()?;
        }
        if let Some((slot, fate)) = self.reply_fates.first_key_value() {
            return Err(self.script_error(format!(
                "slot {slot}'s call got no reply to be {fate:?} by the end of the script"
            )));
        }
        let reached = self.world.coverage;
        self.world.go_live();
        settle(&mut self.world, "after the script")?;
        Ok(reached)
    }

    fn step(&mut self, step: &Step) -> Result<(), Violation> {
        match *step {
            Step::Spawn { reply } => {
                let slot = self.world.add_slot();
                self.call(slot, reply)?;
            }
            Step::SpawnIn { space, reply } => {
                let slot = self.world.add_slot_in(space);
                self.call(slot, reply)?;
            }
            Step::Call { slot, reply } => self.call(slot, reply)?,
            Step::Deliver {
                slot,
                kind,
                pick,
                answer,
            } => {
                let id = self.held_letter(slot, kind, pick)?;
                self.held.remove(&id);
                self.answer_fates.insert(slot, answer);
                self.world.deliver_letter(id);
                self.quiesce()?;
                // Answers go out as the message is handled: a fate not taken had no answer.
                self.answer_fates.remove(&slot);
            }
            Step::Drop { slot, kind, pick } => {
                let id = self.held_letter(slot, kind, pick)?;
                self.held.remove(&id);
                self.world.drop_letter(id);
            }
            Step::Tick => {
                self.world.fire(Timer::LeaderStep);
                self.quiesce()?;
            }
            Step::Advance { ms } => self.advance(ms)?,
            Step::HoldCommits => self.world.hold_commits(true),
            Step::Commit => {
                self.world.hold_commits(false);
                self.quiesce()?;
            }
            Step::LeaderChange { skew_ms, keep_tail } => {
                let offset_ms = self.world.leader_offset_ms().unwrap_or(0) + skew_ms;
                self.world.change_leader(keep_tail, 0, 0, Some(offset_ms));
                self.quiesce()?;
            }
            Step::SetLease { ms } => {
                self.world.set_lease(ms);
                self.quiesce()?;
            }
            Step::Stop { slot } => {
                self.world.stop_gracefully(slot);
                self.quiesce()?;
            }
        }
        Ok(())
    }

    /// Wakes the slot's lease loop for a call whose reply has the fate `reply`.
    fn call(&mut self, slot: Slot, reply: Fate) -> Result<(), Violation> {
        if self.reply_fates.contains_key(&slot) {
            return Err(self.script_error(format!("slot {slot} is still waiting for a reply")));
        }
        self.reply_fates.insert(slot, reply);
        self.world.fire(Timer::ExecutorCall(slot));
        self.quiesce()?;
        // With commits held, the reply comes when the tail commits.
        if self.reply_fates.contains_key(&slot) && !self.world.commits_held() {
            return Err(self.script_error(format!(
                "slot {slot} made no call (one is in flight, or its process is gone)"
            )));
        }
        Ok(())
    }

    /// The held message of `kind` to or from `slot` that `pick` names.
    fn held_letter(&self, slot: Slot, kind: LetterKind, pick: Pick) -> Result<u64, Violation> {
        let mut candidates = self
            .world
            .letters()
            .iter()
            .filter(|letter| letter.slot == slot && letter.kind == kind)
            .map(|letter| letter.id);
        let id = match pick {
            Pick::Oldest => candidates.next(),
            Pick::Newest => candidates.next_back(),
        };
        id.ok_or_else(|| self.script_error(format!("no {kind:?} held for slot {slot}")))
    }

    /// Runs everything due now, routing each message the managers or executors send as the
    /// script says, until nothing more happens at this instant.
    fn quiesce(&mut self) -> Result<(), Violation> {
        loop {
            self.world.run_until(self.world.now_us)?;
            let next = self
                .world
                .letters()
                .iter()
                .find(|letter| !self.held.contains(&letter.id))
                .map(|letter| (letter.id, letter.slot, letter.kind));
            let Some((id, slot, kind)) = next else {
                return Ok(());
            };
            let fate = match kind {
                LetterKind::Push | LetterKind::Revoke => Fate::Held,
                LetterKind::Call => Fate::Delivered,
                LetterKind::Reply => self.reply_fates.remove(&slot).unwrap_or(Fate::Delivered),
                LetterKind::Ack => self.answer_fates.remove(&slot).unwrap_or(Fate::Delivered),
            };
            match fate {
                Fate::Delivered => self.world.deliver_letter(id),
                Fate::Held => {
                    self.held.insert(id);
                }
                Fate::Lost => self.world.drop_letter(id),
            }
        }
    }

    /// Lets `ms` pass, handling each instant something is due at as [`Runner::quiesce`] does.
    fn advance(&mut self, ms: u64) -> Result<(), Violation> {
        let until_us = self.world.now_us + ms * 1_000;
        while let Some(at_us) = self.world.next_event_at().filter(|&at| at <= until_us) {
            self.world.run_until(at_us)?;
            self.quiesce()?;
        }
        self.world.run_until(until_us)
    }

    fn script_error(&self, detail: String) -> Violation {
        Violation {
            invariant: "script",
            detail,
            at_us: self.world.now_us,
        }
    }
}

/// Names the step a script's own premise failed at; an invariant's violation stays as it is.
fn premise(index: usize, step: &Step, violation: Violation) -> Violation {
    if violation.invariant != "script" {
        return violation;
    }
    Violation {
        detail: format!("step {} ({step:?}): {}", index + 1, violation.detail),
        ..violation
    }
}
