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
//! - Placement (PROTOCOL §15), on every plan and commit of a leader's term: the churn budget
//!   (P15.3) and the cooldown (P15.4) over the balance moves it committed; on a plan made on a
//!   steady state (every shard delivered to an executor that takes shards) with reported loads,
//!   no balance move while every executor is inside the band (P15.3) and nobody given shards
//!   beyond four times its share by count; and after every renewal the leader records, its
//!   estimate of each shard within what the shard's current holder said of it (P15.1: a lie
//!   is forgotten once the shard leaves the liar).
//! - Namespaces (P18.1): every check above is per namespace, a shard being `(namespace, shard)`
//!   (shard 3 of `kv` and shard 3 of `default` are two shards, with epochs of their own); a plan
//!   gives a namespace's shards to that namespace's executors only, and a process admits only
//!   shards of its own namespace's shard space.
//! - Resharding (§20): I1 and I2 are judged per key across layouts. Shard `s` of a layout of `c`
//!   shards covers the keys whose hash modulo `c` is `s`, so it overlaps shard `t` of `d` shards
//!   exactly when `s` and `t` agree modulo gcd(`c`, `d`). Each process admits in the layout of
//!   the newest set it applied: two processes may not admit overlapping shards whatever their
//!   layouts; a commit that takes any key from an owner requires that owner's process admit no
//!   key of the shard it lost in any layout; and a key's epoch never goes back, and rises when
//!   its holder changes, across the commit that changes the layout too.

use std::collections::BTreeMap;

use leasehold_api::wire::is_default_namespace;
use leasehold_manager::leader::core::placement::{LoadTracker, BALANCE_COOLDOWN_MS};
use leasehold_manager::lease::{
    capacity_of, Command, LeaseState, Loads, Move, MoveReason, Outcome, Plan, Shard, ShardId, Space,
};
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
    /// The namespace it registered into (P18.1): every shard it admits is that namespace's.
    pub namespace: &'a str,
}

/// How a check names `shard` of `namespace`: `shard 3` in `default` (as before namespaces),
/// `shard 3 of kv` in another.
pub fn shard_name(namespace: &str, shard: ShardId) -> String {
    if is_default_namespace(namespace) {
        format!("shard {shard}")
    } else {
        format!("shard {shard} of {namespace}")
    }
}

/// P15.3's budget is per minute.
pub const MINUTE_MS: u64 = 60_000;

/// Nobody is given shards for balance (or as a joiner) beyond this many times its share by count
/// (the load planner's rule, `planner/load.rs`), so a liar claiming zero cannot take the fleet.
pub const COUNT_CEILING_OF_SHARE: f64 = 4.0;

#[derive(Debug, Default)]
pub struct Checker {
    /// The namespaces seen so far, in the order first seen: a namespace's index here is its
    /// number in the keys below.
    namespaces: Vec<String>,
    /// Each seen namespace's widest layout so far (§20): the most shards any commit left it
    /// with. Every layout's count divides it (each is the first count doubled or halved).
    widest_counts: Vec<u32>,
    /// Who each (namespace, layout's shard count, shard, epoch) was minted for (I2).
    minted: BTreeMap<(usize, u32, ShardId, u64), String>,
    /// The first violation found inside a commit or a fault, reported after the event.
    pending: Option<Violation>,
    /// The current leader term's placement history.
    placement: TermHistory,
    /// Scratch for [`Checker::after_event`]: per namespace, by key class (hash modulo its
    /// widest count), the slot admitting it and what it admits it as.
    admitted_by: Vec<Vec<Option<Admitted>>>,
}

/// What one leader term did for placement, for the checks that span its plans.
#[derive(Debug, Default)]
struct TermHistory {
    /// Balance moves committed this term: (namespace, leader ms, shard), oldest first.
    balance: Vec<(usize, u64, ShardId)>,
    /// Per (namespace, shard): the executor that last reported it and the range of what that
    /// executor said of it since it began reporting it.
    heard: BTreeMap<(usize, ShardId), Heard>,
}

/// What a slot admits a key class as: its shard and epoch in the process's layout.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    slot: usize,
    shard: ShardId,
    shard_count: u32,
    epoch: u64,
}

#[derive(Debug)]
struct Heard {
    executor_id: String,
    low: f64,
    high: f64,
}

impl Checker {
    pub fn new(_scenario: &Scenario) -> Self {
        Self::default()
    }

    /// The number of `namespace` in the checker's keys, given one when first seen.
    fn namespace_index(&mut self, namespace: &str) -> usize {
        match self.namespaces.iter().position(|seen| seen == namespace) {
            Some(index) => index,
            None => {
                self.namespaces.push(namespace.to_owned());
                self.widest_counts.push(0);
                self.admitted_by.push(Vec::new());
                self.namespaces.len() - 1
            }
        }
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

    /// A new leader took office: its placement soft state starts empty (P15.1), and so does what
    /// the term checks count.
    pub fn new_term(&mut self) {
        self.placement = TermHistory::default();
    }

    /// The leader recorded a renewal of `executor_id` holding `held` that said `loads` (`None`:
    /// it does not report). Its estimate of every shard it holds must lie within what this
    /// executor said of it since it began reporting it (P15.1: a new holder starts the shard
    /// afresh, so what an earlier holder said, a lie included, is forgotten). A held shard
    /// missing from the report was said to carry nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn after_record(
        &mut self,
        namespace: &str,
        executor_id: &str,
        held: &[ShardId],
        loads: Option<&[(ShardId, f64)]>,
        tracker: &LoadTracker,
        max_shard_load: f64,
        now_us: u64,
    ) {
        let Some(loads) = loads else {
            return;
        };
        let said: BTreeMap<ShardId, f64> = loads.iter().copied().collect();
        let space = self.namespace_index(namespace);
        for &shard in held {
            let value = said
                .get(&shard)
                .copied()
                .filter(|load| !load.is_nan())
                .unwrap_or(0.0)
                .clamp(0.0, max_shard_load);
            let heard = self
                .placement
                .heard
                .entry((space, shard))
                .and_modify(|heard| {
                    if heard.executor_id == executor_id {
                        heard.low = heard.low.min(value);
                        heard.high = heard.high.max(value);
                    } else {
                        *heard = Heard {
                            executor_id: executor_id.to_owned(),
                            low: value,
                            high: value,
                        };
                    }
                })
                .or_insert_with(|| Heard {
                    executor_id: executor_id.to_owned(),
                    low: value,
                    high: value,
                });
            let Some(estimate) = tracker.shard_load(shard) else {
                continue;
            };
            // A smoothed value is a mean of what was said, so it lies in their range; the
            // tracker rounds a negligible load down to zero.
            let slack = 1e-9 * heard.high.max(1.0);
            if estimate < heard.low - slack || estimate > heard.high + slack {
                let detail = format!(
                    "the leader estimates {} at {estimate}, but its holder {executor_id} only ever \
                     said {} to {} of it",
                    shard_name(namespace, shard),
                    heard.low,
                    heard.high
                );
                self.report("P15.1", detail, now_us);
            }
        }
    }

    /// A leader made `plan` on `state` at `now_ms` knowing `loads` of its namespace, with
    /// `tolerance` as its band. Always: the plan gives its namespace's shards to that
    /// namespace's executors only (P18.1, which the state machine would refuse whole, P18.2).
    /// On a steady namespace with reported loads: no balance move while every executor is
    /// inside the band (P15.3), and nobody given shards for balance or as a joiner beyond
    /// [`COUNT_CEILING_OF_SHARE`] times its share by count.
    pub fn after_plan(
        &mut self,
        state: &LeaseState,
        now_ms: u64,
        plan: &Plan,
        loads: &Loads,
        tolerance: f64,
        now_us: u64,
    ) {
        let Command::Rebalance {
            namespace, moves, ..
        } = &plan.command
        else {
            return;
        };
        let Some(space) = state.space(namespace) else {
            self.report(
                "P18.1",
                format!("a plan of {namespace}, which does not exist"),
                now_us,
            );
            return;
        };
        if let Some(detail) = given_outside_its_namespace(state, space, namespace, moves) {
            self.report("P18.1", detail, now_us);
            return;
        }
        let Loads::Reported(loads) = loads else {
            return;
        };
        if !steady(space, now_ms) {
            return;
        }
        let load_of = |shard: ShardId| loads.get(shard as usize).copied().unwrap_or(0.0);
        let Some((utilisations, mean)) = utilisations(space, now_ms, load_of) else {
            return;
        };
        if let Some(detail) =
            balanced_inside_the_band(plan, namespace, &utilisations, mean, tolerance)
        {
            self.report("P15.3", detail, now_us);
            return;
        }
        if let Some(detail) = past_the_count_ceiling(space, plan, moves, &utilisations) {
            self.report("count ceiling", detail, now_us);
        }
    }

    /// The leader committed, at `at_ms` on its clock, a plan of `namespace` whose balance moves
    /// are `shards`: no more than `budget` balance moves of that namespace in any minute of its
    /// term (P15.3: each namespace's budget is its own, P18.1), and no shard moved for balance
    /// again within the cooldown (P15.4).
    pub fn after_balance_commit(
        &mut self,
        namespace: &str,
        at_ms: u64,
        shards: &[ShardId],
        budget: usize,
        now_us: u64,
    ) {
        let space = self.namespace_index(namespace);
        for &shard in shards {
            if let Some(&(_, earlier_ms, _)) = self
                .placement
                .balance
                .iter()
                .rev()
                .find(|(moved_in, _, moved)| *moved_in == space && *moved == shard)
            {
                if at_ms - earlier_ms < BALANCE_COOLDOWN_MS {
                    let detail = format!(
                        "{} moved for balance at {earlier_ms} and again at {at_ms} (leader ms), \
                         within the {BALANCE_COOLDOWN_MS} ms cooldown",
                        shard_name(namespace, shard)
                    );
                    self.report("P15.4", detail, now_us);
                }
            }
            self.placement.balance.push((space, at_ms, shard));
        }
        let window_start = at_ms.saturating_sub(MINUTE_MS);
        let in_window = self
            .placement
            .balance
            .iter()
            .filter(|(moved_in, moved_ms, _)| *moved_in == space && *moved_ms > window_start)
            .count();
        if in_window > budget {
            let of = if is_default_namespace(namespace) {
                String::new()
            } else {
                format!(" of {namespace}")
            };
            let detail = format!(
                "{in_window} balance moves{of} in the minute to {at_ms} (leader ms), budget {budget}"
            );
            self.report("P15.3", detail, now_us);
        }
    }

    /// The first violation found inside a commit or a fault since the last event, if any.
    pub fn pending_violation(&mut self, now_us: u64) -> Result<(), Violation> {
        match self.pending.take() {
            Some(mut violation) => {
                if violation.at_us == 0 {
                    violation.at_us = now_us;
                }
                Err(violation)
            }
            None => Ok(()),
        }
    }

    /// After an event: a violation found inside it, then I1 and I2 over every live process's
    /// admission core.
    pub fn after_event(
        &mut self,
        processes: &[Option<ProcessView<'_>>],
        now_us: u64,
    ) -> Result<(), Violation> {
        self.pending_violation(now_us)?;
        // Who admits each shard (slot, epoch), by namespace and shard: reused from event to
        // event, since this runs after every one.
        for admitted in &mut self.admitted_by {
            admitted.iter_mut().for_each(|entry| *entry = None);
        }
        for (slot, process) in processes.iter().enumerate() {
            if let Some(view) = *process {
                self.check_admits(processes, slot, view, now_us)?;
            }
        }
        Ok(())
    }

    /// P18.1, I2 and I1 over every shard the process in `slot` admits now.
    fn check_admits(
        &mut self,
        processes: &[Option<ProcessView<'_>>],
        slot: usize,
        view: ProcessView<'_>,
        now_us: u64,
    ) -> Result<(), Violation> {
        let ProcessView {
            core,
            now,
            namespace,
        } = view;
        let Some(executor_id) = core.executor_id() else {
            return Ok(());
        };
        let space = self.namespace_index(namespace);
        let widest = self.widest_counts[space];
        // The layout the process admits in: its newest set's (§20).
        let shard_count = core.assignment().layout().shard_count;
        for held in core.assignment().held() {
            let Ok(permit) = core.admit(held.shard, now) else {
                continue;
            };
            // P18.1: a process admits only shards of its own namespace's shard space, in one of
            // its layouts (each count divides the widest).
            if permit.shard >= shard_count || !widest.is_multiple_of(shard_count) {
                return Err(Violation {
                    invariant: "P18.1",
                    detail: format!(
                        "slot {slot} ({executor_id}, of {namespace}) admits shard {} of a layout \
                         of {shard_count}, but {namespace}'s widest layout has {widest} shards",
                        permit.shard
                    ),
                    at_us: now_us,
                });
            }
            match self
                .minted
                .get(&(space, shard_count, permit.shard, permit.epoch))
            {
                Some(owner) if owner == executor_id => {}
                minted_for => {
                    return Err(Violation {
                        invariant: "I2",
                        detail: format!(
                            "slot {slot} ({executor_id}) admits {} at epoch {}, minted for {minted_for:?}",
                            shard_name(namespace, permit.shard),
                            permit.epoch
                        ),
                        at_us: now_us,
                    })
                }
            }
            let admitted = Admitted {
                slot,
                shard: permit.shard,
                shard_count,
                epoch: permit.epoch,
            };
            if let Some(other) = self.note_admitted(space, widest, admitted) {
                let other_id = processes[other.slot]
                    .and_then(|view| view.core.executor_id())
                    .unwrap_or_default();
                return Err(Violation {
                    invariant: "I1",
                    detail: format!(
                        "keys of {} admitted by slot {} ({other_id}, as shard {} of {} at epoch \
                         {}) and slot {slot} ({executor_id}, as shard {} of {shard_count} at \
                         epoch {})",
                        shard_name(namespace, permit.shard),
                        other.slot,
                        other.shard,
                        other.shard_count,
                        other.epoch,
                        permit.shard,
                        permit.epoch
                    ),
                    at_us: now_us,
                });
            }
        }
        Ok(())
    }

    /// Notes that `admitted.slot` admits every key class (hash modulo `widest`) of its shard in
    /// `space`; another slot that admitted one of them before it since the event, if any.
    fn note_admitted(&mut self, space: usize, widest: u32, admitted: Admitted) -> Option<Admitted> {
        let admitted_by = &mut self.admitted_by[space];
        if admitted_by.len() < widest as usize {
            admitted_by.resize(widest as usize, None);
        }
        let step = admitted.shard_count.max(1) as usize;
        let mut other = None;
        for class in (admitted.shard as usize..widest as usize).step_by(step) {
            if let Some(before) = admitted_by[class].replace(admitted) {
                if before.slot != admitted.slot {
                    other = other.or(Some(before));
                }
            }
        }
        other
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
        // Shards, epochs and handoffs are per (namespace, shard) (P18.1): each namespace's
        // table against its own before the commit.
        // A commit that changes a namespace's layout (§20) is judged per key: each shard
        // against every shard of the layout before it that covers some of its keys.
        for (namespace, table) in after.namespaces() {
            let space = self.namespace_index(namespace);
            let shard_count = table.config.shard_count;
            self.widest_counts[space] = self.widest_counts[space].max(shard_count);
            let old_table = before.namespace(namespace);
            let old_count = old_table.map_or(shard_count, |old| old.config.shard_count);
            for shard in table.shards() {
                let covering: Vec<&Shard> = old_table
                    .map(|old| {
                        overlapping(shard.id, shard_count, old_count)
                            .filter_map(|id| old.shard(id))
                            .collect()
                    })
                    .unwrap_or_default();
                let layout = (shard_count, old_count);
                if covering.is_empty() {
                    self.after_commit_of_shard(
                        namespace, space, layout, shard, None, command, processes, now_us,
                    );
                }
                for old in covering {
                    self.after_commit_of_shard(
                        namespace,
                        space,
                        layout,
                        shard,
                        Some(old),
                        command,
                        processes,
                        now_us,
                    );
                }
            }
        }
    }

    /// I2 and I1 at its source for one shard of `namespace` (numbered `space` here) in a layout
    /// of `shard_count` shards, against `old`, a shard of the layout of `old_count` shards
    /// before the commit of `command` that covers some of its keys (the same shard when the
    /// layout did not change).
    #[allow(clippy::too_many_arguments)]
    fn after_commit_of_shard(
        &mut self,
        namespace: &str,
        space: usize,
        (shard_count, old_count): (u32, u32),
        shard: &Shard,
        old: Option<&Shard>,
        command: &Command,
        processes: &[Option<ProcessView<'_>>],
        now_us: u64,
    ) {
        let name = || {
            if shard_count == old_count {
                shard_name(namespace, shard.id)
            } else {
                let old_id = old.map_or(shard.id, |s| s.id);
                format!(
                    "keys of {} ({} of {old_count} before)",
                    shard_name(namespace, shard.id),
                    old_id
                )
            }
        };
        let old_owner = old.and_then(|s| s.owner.as_ref());
        let old_epoch = old.map_or(0, |s| s.epoch);
        if shard.epoch < old_epoch {
            self.report(
                "I2",
                format!(
                    "{} epoch went back from {old_epoch} to {}",
                    name(),
                    shard.epoch
                ),
                now_us,
            );
        }
        if let Some(owner) = &shard.owner {
            if old_owner != Some(owner) && shard.epoch <= old_epoch {
                self.report(
                    "I2",
                    format!(
                        "{} went to {owner} without a new epoch ({old_epoch} -> {})",
                        name(),
                        shard.epoch
                    ),
                    now_us,
                );
            }
            let minted = self
                .minted
                .entry((space, shard_count, shard.id, shard.epoch))
                .or_insert_with(|| owner.clone());
            if minted != owner {
                let first = minted.clone();
                self.report(
                    "I2",
                    format!(
                        "{} epoch {} minted for {first} and for {owner}",
                        name(),
                        shard.epoch
                    ),
                    now_us,
                );
            }
        }
        // I1 at its source: the old owner admits no key of a shard taken from it, in any layout.
        if let Some(old_owner) = old_owner.filter(|o| shard.owner.as_ref() != Some(*o)) {
            if let Some(slot) = admitting_slot(processes, old_owner, shard.id, shard_count) {
                self.report(
                    "I1",
                    format!(
                        "{command_kind} took {} from {old_owner} while its process (slot {slot}) still admits it",
                        name(),
                        command_kind = command_kind(command)
                    ),
                    now_us,
                );
            }
        }
    }
}

/// The slot of `executor_id`'s process if it admits any key of `shard` of a layout of
/// `shard_count` shards, in whatever layout it admits in (§20).
fn admitting_slot(
    processes: &[Option<ProcessView<'_>>],
    executor_id: &str,
    shard: ShardId,
    shard_count: u32,
) -> Option<usize> {
    processes.iter().enumerate().find_map(|(slot, process)| {
        let ProcessView { core, now, .. } = (*process)?;
        if core.executor_id() != Some(executor_id) {
            return None;
        }
        let its_count = core.assignment().layout().shard_count;
        core.assignment()
            .held()
            .iter()
            .any(|held| {
                shards_overlap((held.shard, its_count), (shard, shard_count))
                    && core.admit(held.shard, now).is_ok()
            })
            .then_some(slot)
    })
}

/// Whether shard `s` of `c` shards and shard `t` of `d` shards cover a key in common: some hash
/// `h` has `h mod c = s` and `h mod d = t`, which is when `s` and `t` agree modulo gcd(c, d).
pub fn shards_overlap((s, c): (ShardId, u32), (t, d): (ShardId, u32)) -> bool {
    let g = gcd(c, d).max(1);
    s % g == t % g
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The shards of a layout of `old_count` shards that cover some key of shard `shard` of a layout
/// of `shard_count`: itself when the count is the same, its parent after a split, the pair after
/// a merge.
fn overlapping(shard: ShardId, shard_count: u32, old_count: u32) -> impl Iterator<Item = ShardId> {
    let g = gcd(shard_count, old_count).max(1);
    (shard % g..old_count).step_by(g as usize)
}

fn command_kind(command: &Command) -> &'static str {
    match command {
        Command::Init { .. } => "Init",
        Command::SetLeaseDuration { .. } => "SetLeaseDuration",
        Command::Register { .. } => "Register",
        Command::RegisterMany { .. } => "RegisterMany",
        Command::Renew { .. } => "Renew (claims)",
        Command::Deregister { .. } => "Deregister",
        Command::Reap { .. } => "Reap",
        Command::ReserveLeases { .. } => "ReserveLeases",
        Command::ReapLapsed { .. } => "ReapLapsed",
        Command::Rebalance { .. } => "Rebalance",
        Command::Release { .. } => "Release",
        Command::CompleteHandoffs { .. } => "CompleteHandoffs (expiry)",
        Command::SetDraining { .. } => "SetDraining",
        Command::SetClusterVersion { .. } => "SetClusterVersion",
        Command::Operator { .. } => "Operator",
        Command::PlaceSecondaries { .. } => "PlaceSecondaries",
        Command::Reshard { .. } => "Reshard",
    }
}

/// Whether every shard of `space` is delivered (owned, no handoff) to an executor that takes
/// shards at `now_ms` (lease live, not draining): nothing is on its way anywhere in it.
pub fn steady(space: Space<'_>, now_ms: u64) -> bool {
    space.shards().iter().all(|shard| {
        shard.handoff.is_none()
            && shard
                .owner
                .as_deref()
                .and_then(|owner| space.executor(owner))
                .is_some_and(|owner| !owner.lease_lapsed(now_ms) && !owner.draining)
    })
}

/// The utilisation (load ÷ capacity, P15.2) of every executor of `space` that takes shards at
/// `now_ms`, on `load_of`, counting what it holds once the handoffs under way complete; and the
/// mean, all load over all their capacity. `None` without such an executor.
pub fn utilisations(
    space: Space<'_>,
    now_ms: u64,
    load_of: impl Fn(ShardId) -> f64,
) -> Option<(BTreeMap<String, f64>, f64)> {
    let mut loads: BTreeMap<&str, f64> = space
        .executors()
        .filter(|executor| !executor.lease_lapsed(now_ms) && !executor.draining)
        .map(|executor| (executor.id.as_str(), 0.0))
        .collect();
    if loads.is_empty() {
        return None;
    }
    let mut total = 0.0;
    for shard in space.shards() {
        let load = load_of(shard.id);
        total += load;
        let holder = match &shard.handoff {
            Some(handoff) => handoff.to.as_deref(),
            None => shard.owner.as_deref(),
        };
        if let Some(sum) = holder.and_then(|holder| loads.get_mut(holder)) {
            *sum += load;
        }
    }
    let mut total_capacity = 0.0;
    let utilisations = loads
        .into_iter()
        .filter_map(|(id, load)| {
            let capacity = capacity_of(space.executor(id)?) as f64;
            total_capacity += capacity;
            Some((id.to_owned(), load / capacity))
        })
        .collect();
    Some((utilisations, total / total_capacity))
}

/// P18.1: the first move of a plan of `namespace` that gives a shard it does not have, or gives
/// one to another namespace's executor.
fn given_outside_its_namespace(
    state: &LeaseState,
    space: Space<'_>,
    namespace: &str,
    moves: &[Move],
) -> Option<String> {
    moves.iter().find_map(|step| {
        let elsewhere = state
            .executor(&step.to)
            .filter(|executor| executor.namespace != *namespace)
            .map(|executor| executor.namespace.as_str());
        (space.shard(step.shard).is_none() || elsewhere.is_some()).then(|| {
            format!(
                "a plan of {namespace} gives {} to {} (of {})",
                shard_name(namespace, step.shard),
                step.to,
                elsewhere.unwrap_or(namespace)
            )
        })
    })
}

/// P15.3: a plan that moves shards for balance while every executor's utilisation is inside
/// the band around `mean`.
fn balanced_inside_the_band(
    plan: &Plan,
    namespace: &str,
    utilisations: &BTreeMap<String, f64>,
    mean: f64,
    tolerance: f64,
) -> Option<String> {
    let balance = plan.balance_shards();
    // The planner's band and this one may round differently at the very edge.
    let slack = 1e-9 * mean;
    let inside = !utilisations
        .values()
        .any(|u| *u > mean * (1.0 + tolerance) + slack || *u < mean * (1.0 - tolerance) - slack);
    if balance.is_empty() || !inside {
        return None;
    }
    let of = if is_default_namespace(namespace) {
        String::new()
    } else {
        format!(" of {namespace}")
    };
    Some(format!(
        "a plan{of} moves {balance:?} for balance while every executor is inside the band \
         ({:.0} % around the mean {mean:.3}): {utilisations:?}",
        tolerance * 100.0
    ))
}

/// The first executor a plan gives shards for balance or as a joiner beyond
/// [`COUNT_CEILING_OF_SHARE`] times its share by count (by capacity, over the executors with a
/// utilisation).
fn past_the_count_ceiling(
    space: Space<'_>,
    plan: &Plan,
    moves: &[Move],
    utilisations: &BTreeMap<String, f64>,
) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = space
        .executors()
        .map(|executor| (executor.id.as_str(), executor.owned_shards.len()))
        .collect();
    for step in moves {
        if let Some(owner) = space.shard(step.shard).and_then(|s| s.owner.as_deref()) {
            if let Some(count) = counts.get_mut(owner) {
                *count = count.saturating_sub(1);
            }
        }
        *counts.entry(step.to.as_str()).or_insert(0) += 1;
    }
    let total_capacity: u64 = utilisations
        .keys()
        .filter_map(|id| space.executor(id))
        .map(capacity_of)
        .sum();
    let shards = space.shards().len() as f64;
    moves.iter().zip(&plan.reasons).find_map(|(step, reason)| {
        if !matches!(reason, MoveReason::Balance | MoveReason::Join) {
            return None;
        }
        let receiver = space.executor(&step.to)?;
        let share = shards * capacity_of(receiver) as f64 / total_capacity.max(1) as f64;
        let count = counts.get(step.to.as_str()).copied().unwrap_or(0);
        (count as f64 > COUNT_CEILING_OF_SHARE * share + 1e-9).then(|| {
            format!(
                "a plan gives {} {} ({reason:?}) and so {count} shards, more than \
                 {COUNT_CEILING_OF_SHARE} times its share of {share:.2}",
                step.to,
                shard_name(space.name(), step.shard)
            )
        })
    })
}
