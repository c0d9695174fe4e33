//! Exhaustive model check of the promotion order (P19.3, P19.4) on the real state machine and
//! planners.
//!
//! A [stateright] model of one shard of a namespace with three replicas over three named
//! executors, explored breadth first to a bounded number of steps. The replicated state is the
//! manager's [`LeaseState`], changed only by [`LeaseState::apply`] of the commands the leader
//! would propose: primaries planned by the real [`plan_placement`] by count (every revoke answered
//! at once), secondaries by the real [`plan_secondaries`]. What the model adds is the order of
//! events: any executor may say its secondary is ready or not, leave (its lease lapsed and it was
//! reaped, or it deregistered: the state machine treats both alike), come back under its name, or
//! be drained; the leader may plan at any moment.
//!
//! In every state, and across every step:
//! - the shard has at most one primary, never one of its secondaries, and the state passes its
//!   own consistency checks;
//! - when the primary changes hands, the epoch rises (I2);
//! - when the primary changes hands while a ready secondary on an executor that takes shards
//!   exists, it goes to a ready secondary; when it goes because its holder left, to the one ready
//!   longest (no promotion of a secondary that is not ready while a ready one exists).
//!
//! And it is reachable that a ready secondary is promoted when the primary leaves, that a
//! drained primary goes to its ready secondary, and that an executor back under its name takes
//! back its secondary.

use std::fmt;
use std::hash::{Hash, Hasher};

use stateright::{Model, Property};

use leasehold_api::wire::{ReplicaSettings, DEFAULT_NAMESPACE};
use leasehold_manager::lease::{
    plan_placement, plan_secondaries, Command, LeaseState, OperatorAction, Outcome,
    PlacementInputs, PlacementOverrides, Renewal, Shard, MAX_MOVES_PER_PLAN,
};

/// The executors' names; each registers under its own.
const NAMES: [&str; 3] = ["n1", "n2", "n3"];
/// The namespace's lease; time in the model advances a millisecond a step, so no lease lapses
/// but by a [`Action::Leave`].
const LEASE_MS: u64 = 60_000;
/// The restore delay: long enough that a return within the model is within it.
const RESTORE_DELAY_MS: u64 = 10 * LEASE_MS;

/// What may happen next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The executor named so renews, saying its secondaries ready (`true`) or not.
    Renew { name: usize, ready: bool },
    /// The executor named so leaves: it deregisters, which the state machine treats as a reap.
    Leave { name: usize },
    /// An executor registers again under the name.
    Return { name: usize },
    /// An operator drains the executor named so.
    Drain { name: usize },
    /// The leader plans the primaries and every revoke is answered at once.
    PlanPrimaries,
    /// The leader plans the secondaries.
    PlanSecondaries,
}

/// The model's state: the replicated state, the clock and what is left to explore.
#[derive(Clone)]
pub struct PromotionState {
    lease: LeaseState,
    now_ms: u64,
    steps_left: u8,
    /// Each name's current executor id.
    ids: [Option<String>; 3],
    /// The first broken promotion rule, with the step that broke it.
    fault: Option<String>,
    /// What happened, for the `sometimes` properties.
    seen: Seen,
}

/// Events the `sometimes` properties look for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
struct Seen {
    promoted_on_leave: bool,
    moved_warm_on_drain: bool,
    taken_back_by_name: bool,
}

impl fmt::Debug for PromotionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromotionState")
            .field("now_ms", &self.now_ms)
            .field("ids", &self.ids)
            .field("shard", &self.lease.shard(0))
            .field("fault", &self.fault)
            .finish()
    }
}

impl PromotionState {
    /// What identifies a state for the search: the shard and the executors as the state holds
    /// them, without revisions and times that only count steps.
    fn identity(&self) -> String {
        let shard = self.lease.shard(0).map(|shard| {
            let secondaries: Vec<String> = shard
                .secondaries
                .iter()
                .map(|s| {
                    format!(
                        "{}:{}:{}",
                        self.name_of(&s.executor),
                        s.ready_since_ms.is_some(),
                        s.lost.is_some()
                    )
                })
                .collect();
            (
                shard.owner.as_deref().map(|o| self.name_of(o)),
                shard.epoch,
                shard.handoff.is_some(),
                secondaries,
            )
        });
        let draining: Vec<bool> = self
            .ids
            .iter()
            .map(|id| {
                id.as_deref()
                    .and_then(|id| self.lease.executor(id))
                    .is_some_and(|executor| executor.draining)
            })
            .collect();
        let present: Vec<bool> = self.ids.iter().map(Option::is_some).collect();
        format!(
            "{shard:?} {draining:?} {present:?} {} {:?} {:?}",
            self.steps_left, self.fault, self.seen
        )
    }

    fn name_of(&self, executor_id: &str) -> String {
        self.ids
            .iter()
            .position(|id| id.as_deref() == Some(executor_id))
            .map_or_else(
                || format!("gone:{executor_id}"),
                |name| NAMES[name].to_owned(),
            )
    }
}

impl Hash for PromotionState {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        self.identity().hash(hasher);
    }
}

impl PartialEq for PromotionState {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

/// The model: how many steps it explores from a settled shard.
#[derive(Debug, Clone, Copy)]
pub struct PromotionModel {
    pub steps: u8,
}

impl PromotionModel {
    /// The settled start: three executors, the shard's primary on one and a secondary, not
    /// ready, on each of the others.
    fn initial(&self) -> PromotionState {
        let mut state = PromotionState {
            lease: LeaseState::default(),
            now_ms: 0,
            steps_left: self.steps,
            ids: [None, None, None],
            fault: None,
            seen: Seen::default(),
        };
        state.apply(Command::Init {
            now_ms: 0,
            shard_count: 1,
            lease_duration_ms: LEASE_MS,
        });
        state.apply(Command::Operator {
            now_ms: 0,
            actor: "admin".into(),
            action: OperatorAction::SetNamespace {
                name: DEFAULT_NAMESPACE.into(),
                lease_duration_ms: LEASE_MS,
                max_executors: None,
                placement: PlacementOverrides::default(),
                replication: ReplicaSettings {
                    replicas: 3,
                    replica_restore_delay_ms: Some(RESTORE_DELAY_MS),
                    ..ReplicaSettings::default()
                },
            },
        });
        for name in 0..NAMES.len() {
            state.register(name);
        }
        state.plan_primaries();
        state.plan_secondaries();
        state
    }
}

impl PromotionState {
    fn apply(&mut self, command: Command) -> Outcome {
        let index = self.lease.revision() + 1;
        self.lease.apply(index, &command)
    }

    fn register(&mut self, name: usize) {
        let outcome = self.apply(Command::Register {
            follows_generations: false,
            now_ms: self.now_ms,
            incarnation: format!("{}@{}", NAMES[name], self.now_ms),
            address: format!("http://{}", NAMES[name]),
            name: Some(NAMES[name].to_owned()),
            credential_sha256: None,
            capacity: 1,
            app_version: None,
            labels: Default::default(),
            namespace: DEFAULT_NAMESPACE.into(),
        });
        if let Outcome::Registered { grant, .. } = outcome {
            self.ids[name] = Some(grant.executor_id);
        }
    }

    fn plan_primaries(&mut self) {
        let Some(space) = self.lease.space(DEFAULT_NAMESPACE) else {
            return;
        };
        let Some(plan) = plan_placement(
            space,
            self.now_ms,
            &PlacementInputs::by_count(),
            MAX_MOVES_PER_PLAN,
        ) else {
            return;
        };
        if let Outcome::Rebalanced { effects, .. } = self.apply(plan.command) {
            for revoke in effects.revokes {
                self.apply(Command::Release {
                    now_ms: self.now_ms,
                    executor_id: revoke.executor_id,
                    shards: revoke.shards,
                    revoke_revision: revoke.revision,
                });
            }
        }
    }

    fn plan_secondaries(&mut self) {
        let Some(space) = self.lease.space(DEFAULT_NAMESPACE) else {
            return;
        };
        if let Some(plan) = plan_secondaries(
            space,
            self.now_ms,
            &PlacementInputs::by_count(),
            0,
            MAX_MOVES_PER_PLAN,
        ) {
            self.apply(plan.command);
        }
    }

    fn shard(&self) -> Option<&Shard> {
        self.lease.shard(0)
    }
}

impl Model for PromotionModel {
    type State = PromotionState;
    type Action = Action;

    fn init_states(&self) -> Vec<PromotionState> {
        vec![self.initial()]
    }

    fn actions(&self, state: &PromotionState, actions: &mut Vec<Action>) {
        if state.steps_left == 0 || state.fault.is_some() {
            return;
        }
        for (name, id) in state.ids.iter().enumerate() {
            match id {
                Some(id) => {
                    let holds_secondary = !state.lease.secondaries_of(id).is_empty();
                    if holds_secondary {
                        actions.push(Action::Renew { name, ready: true });
                        actions.push(Action::Renew { name, ready: false });
                    }
                    actions.push(Action::Leave { name });
                    if state.lease.executor(id).is_some_and(|e| !e.draining) {
                        actions.push(Action::Drain { name });
                    }
                }
                None => actions.push(Action::Return { name }),
            }
        }
        let space = state.lease.space(DEFAULT_NAMESPACE);
        if space.is_some_and(|space| {
            plan_placement(
                space,
                state.now_ms,
                &PlacementInputs::by_count(),
                MAX_MOVES_PER_PLAN,
            )
            .is_some()
        }) {
            actions.push(Action::PlanPrimaries);
        }
        if space.is_some_and(|space| {
            plan_secondaries(
                space,
                state.now_ms,
                &PlacementInputs::by_count(),
                0,
                MAX_MOVES_PER_PLAN,
            )
            .is_some()
        }) {
            actions.push(Action::PlanSecondaries);
        }
    }

    fn next_state(&self, last: &PromotionState, action: Action) -> Option<PromotionState> {
        let mut state = last.clone();
        state.steps_left -= 1;
        state.now_ms += 1;
        let before = last.shard().cloned();
        match &action {
            Action::Renew { name, ready } => {
                let id = state.ids[*name].clone()?;
                let ready = if *ready {
                    state.lease.secondaries_of(&id)
                } else {
                    Vec::new()
                };
                state.apply(Command::Renew {
                    now_ms: state.now_ms,
                    renewals: vec![Renewal {
                        claims: state.lease.delivered_set(&id),
                        revision: state.lease.revision(),
                        executor_id: id,
                        ready,
                    }],
                });
            }
            Action::Leave { name } => {
                let id = state.ids[*name].take()?;
                state.apply(Command::Deregister {
                    now_ms: state.now_ms,
                    executor_id: id,
                });
            }
            Action::Return { name } => {
                let lost_before = before
                    .as_ref()
                    .is_some_and(|shard| shard.secondaries.iter().any(|s| s.lost.is_some()));
                state.register(*name);
                let id = state.ids[*name].clone()?;
                if lost_before && !state.lease.secondaries_of(&id).is_empty() {
                    state.seen.taken_back_by_name = true;
                }
            }
            Action::Drain { name } => {
                let id = state.ids[*name].clone()?;
                state.apply(Command::SetDraining {
                    now_ms: state.now_ms,
                    executor_id: id,
                    draining: true,
                });
            }
            Action::PlanPrimaries => state.plan_primaries(),
            Action::PlanSecondaries => state.plan_secondaries(),
        }
        if let Some(fault) = promotion_fault(last, &state, &action) {
            state.fault = Some(format!("{action:?}: {fault}"));
        }
        let owner_changed = |state: &PromotionState| {
            before.as_ref().and_then(|shard| shard.owner.clone())
                != state.shard().and_then(|shard| shard.owner.clone())
        };
        if owner_changed(&state) && state.shard().is_some_and(|s| s.owner.is_some()) {
            match action {
                Action::Leave { .. } => state.seen.promoted_on_leave = true,
                Action::PlanPrimaries => state.seen.moved_warm_on_drain = true,
                _ => {}
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "P19.1: one primary, never one of its secondaries; the state is consistent",
                |_: &PromotionModel, state: &PromotionState| {
                    state.lease.consistency_violations().is_empty()
                },
            ),
            Property::always(
                "I2, P19.3, P19.4: a new primary gets a new epoch and is a ready secondary when \
                 one exists, the one ready longest when its holder left",
                |_: &PromotionModel, state: &PromotionState| state.fault.is_none(),
            ),
            Property::sometimes(
                "P19.4: a ready secondary is promoted when the primary's holder leaves",
                |_: &PromotionModel, state: &PromotionState| state.seen.promoted_on_leave,
            ),
            Property::sometimes(
                "P19.3: a drained primary moves to a ready secondary",
                |_: &PromotionModel, state: &PromotionState| state.seen.moved_warm_on_drain,
            ),
            Property::sometimes(
                "P19.4: an executor back under its name takes back its secondary",
                |_: &PromotionModel, state: &PromotionState| state.seen.taken_back_by_name,
            ),
        ]
    }
}

/// What a step broke of the promotion rules, if anything.
fn promotion_fault(
    last: &PromotionState,
    next: &PromotionState,
    action: &Action,
) -> Option<String> {
    let before = last.shard()?;
    let after = next.shard()?;
    let new_owner = after.owner.as_deref()?;
    if before.owner.as_deref() == Some(new_owner) {
        return None;
    }
    if after.epoch <= before.epoch {
        return Some(format!(
            "the primary went to {new_owner} at epoch {} after {}",
            after.epoch, before.epoch
        ));
    }
    let takes_shards = |id: &str| {
        last.lease
            .executor(id)
            .is_some_and(|executor| !executor.draining)
    };
    let ready: Vec<(u64, usize, &str)> = before
        .live_secondaries()
        .enumerate()
        .filter(|(_, secondary)| takes_shards(&secondary.executor))
        .filter_map(|(order, secondary)| {
            Some((
                secondary.ready_since_ms?,
                order,
                secondary.executor.as_str(),
            ))
        })
        .collect();
    if ready.is_empty() {
        return None;
    }
    if !ready.iter().any(|(_, _, id)| *id == new_owner) {
        return Some(format!(
            "the primary went to {new_owner}, not ready, while {ready:?} were"
        ));
    }
    if matches!(action, Action::Leave { .. }) {
        let longest = ready.iter().min().map(|(_, _, id)| *id);
        if longest != Some(new_owner) {
            return Some(format!(
                "the primary went to {new_owner}, not to {longest:?}, ready longest"
            ));
        }
    }
    None
}
