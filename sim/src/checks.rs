//! The invariants, checked after every event and every commit (PROTOCOL §12).
//!
//! - I1 from the executors' own admission decisions: at no instant do two live processes'
//!   admission cores admit one shard, each judged on its own clock at the current true instant.
//!   Admission only starts at an event (a grant, a push), so checking after every event sees
//!   every overlap.
//! - I1 at its source: at the commit that takes a shard from an owner (handoff completed by
//!   release, claims or expiry; a reap; a deregistration), that owner's process no longer admits
//!   it, however the leader's clock is skewed.
//! - I2: every admitted (shard, epoch) was minted for that process's executor; a new holder of a
//!   shard always has a larger epoch; no epoch is minted for two executors.
//! - The state's own consistency check after every commit.

use std::collections::BTreeMap;

use leasehold_manager::lease::{Command, LeaseState, Outcome, ShardId};
use tokio::time::Instant;

use crate::scenario::Scenario;
use leasehold_executor::admission::AdmissionCore;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
    pub at_us: u64,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {:.3} ms: {}",
            self.invariant,
            self.at_us as f64 / 1_000.0,
            self.detail
        )
    }
}

/// What the checks read of one live executor process: its admission core and the instant its
/// own clock reads now. A slot without a live process has none.
#[derive(Debug, Clone, Copy)]
pub struct ProcessView<'a> {
    pub core: &'a AdmissionCore,
    pub now: Instant,
}

#[derive(Debug, Default)]
pub struct Checker {
    /// Who each (shard, epoch) was minted for (I2).
    minted: BTreeMap<(ShardId, u64), String>,
    /// The first violation found inside a commit or a fault, reported after the event.
    pending: Option<Violation>,
    /// Scratch for [`Checker::after_event`]: the slot and epoch admitting each shard.
    admitted_by: Vec<Option<(usize, u64)>>,
}

impl Checker {
    pub fn new(_scenario: &Scenario) -> Self {
        Self::default()
    }

    fn report(&mut self, invariant: &'static str, detail: String, at_us: u64) {
        if self.pending.is_none() {
            self.pending = Some(Violation {
                invariant,
                detail,
                at_us,
            });
        }
    }

    /// A check of the simulator's own (replica agreement, snapshot round trip) failed.
    pub fn fail(&mut self, detail: String) {
        self.report("replicas", detail, 0);
    }

    pub fn after_event(
        &mut self,
        processes: &[Option<ProcessView<'_>>],
        now_us: u64,
    ) -> Result<(), Violation> {
        if let Some(mut violation) = self.pending.take() {
            if violation.at_us == 0 {
                violation.at_us = now_us;
            }
            return Err(violation);
        }
        // Who admits each shard (slot, epoch), by shard: reused from event to event, since this
        // runs after every one.
        let admitted_by = &mut self.admitted_by;
        admitted_by.iter_mut().for_each(|entry| *entry = None);
        for (slot, process) in processes.iter().enumerate() {
            let Some(ProcessView { core, now }) = *process else {
                continue;
            };
            let Some(executor_id) = core.executor_id() else {
                continue;
            };
            for held in core.assignment().held() {
                let Ok(permit) = core.admit(held.shard, now) else {
                    continue;
                };
                match self.minted.get(&(permit.shard, permit.epoch)) {
                    Some(owner) if owner == executor_id => {}
                    minted_for => {
                        return Err(Violation {
                            invariant: "I2",
                            detail: format!(
                                "slot {slot} ({executor_id}) admits shard {} at epoch {}, minted for {minted_for:?}",
                                permit.shard, permit.epoch
                            ),
                            at_us: now_us,
                        })
                    }
                }
                let index = permit.shard as usize;
                if admitted_by.len() <= index {
                    admitted_by.resize(index + 1, None);
                }
                if let Some((other_slot, other_epoch)) =
                    admitted_by[index].replace((slot, permit.epoch))
                {
                    let other_id = processes[other_slot]
                        .and_then(|view| view.core.executor_id())
                        .unwrap_or_default();
                    return Err(Violation {
                        invariant: "I1",
                        detail: format!(
                            "shard {} admitted by slot {other_slot} ({other_id}, epoch {other_epoch}) and slot {slot} ({executor_id}, epoch {})",
                            permit.shard, permit.epoch
                        ),
                        at_us: now_us,
                    });
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn after_commit(
        &mut self,
        before: &LeaseState,
        after: &LeaseState,
        command: &Command,
        _outcome: &Outcome,
        processes: &[Option<ProcessView<'_>>],
        now_us: u64,
    ) {
        let violations = after.consistency_violations();
        if !violations.is_empty() {
            self.report(
                "state consistency",
                format!("after {command:?}: {violations:?}"),
                now_us,
            );
        }
        for shard in after.shards() {
            let old = before.shard(shard.id);
            let old_owner = old.and_then(|s| s.owner.clone());
            let old_epoch = old.map_or(0, |s| s.epoch);
            if shard.epoch < old_epoch {
                self.report(
                    "I2",
                    format!(
                        "shard {} epoch went back from {old_epoch} to {}",
                        shard.id, shard.epoch
                    ),
                    now_us,
                );
            }
            if let Some(owner) = &shard.owner {
                if old_owner.as_ref() != Some(owner) && shard.epoch <= old_epoch {
                    self.report(
                        "I2",
                        format!(
                            "shard {} went to {owner} without a new epoch ({old_epoch} -> {})",
                            shard.id, shard.epoch
                        ),
                        now_us,
                    );
                }
                let minted = self
                    .minted
                    .entry((shard.id, shard.epoch))
                    .or_insert_with(|| owner.clone());
                if minted != owner {
                    let first = minted.clone();
                    self.report(
                        "I2",
                        format!(
                            "shard {} epoch {} minted for {first} and for {owner}",
                            shard.id, shard.epoch
                        ),
                        now_us,
                    );
                }
            }
            // I1 at its source: the old owner no longer admits a shard taken from it.
            if let Some(old_owner) = old_owner.filter(|o| shard.owner.as_ref() != Some(o)) {
                if let Some(slot) = admitting_slot(processes, &old_owner, shard.id) {
                    self.report(
                        "I1",
                        format!(
                            "{command_kind} took shard {} from {old_owner} while its process (slot {slot}) still admits it",
                            shard.id,
                            command_kind = command_kind(command)
                        ),
                        now_us,
                    );
                }
            }
        }
    }
}

fn admitting_slot(
    processes: &[Option<ProcessView<'_>>],
    executor_id: &str,
    shard: ShardId,
) -> Option<usize> {
    processes.iter().enumerate().find_map(|(slot, process)| {
        let ProcessView { core, now } = (*process)?;
        (core.executor_id() == Some(executor_id) && core.admit(shard, now).is_ok()).then_some(slot)
    })
}

fn command_kind(command: &Command) -> &'static str {
    match command {
        Command::Init { .. } => "Init",
        Command::SetLeaseDuration { .. } => "SetLeaseDuration",
        Command::Register { .. } => "Register",
        Command::Renew { .. } => "Renew (claims)",
        Command::Deregister { .. } => "Deregister",
        Command::Reap { .. } => "Reap",
        Command::Rebalance { .. } => "Rebalance",
        Command::Release { .. } => "Release",
        Command::CompleteHandoffs { .. } => "CompleteHandoffs (expiry)",
        Command::SetDraining { .. } => "SetDraining",
        Command::SetClusterVersion { .. } => "SetClusterVersion",
    }
}
