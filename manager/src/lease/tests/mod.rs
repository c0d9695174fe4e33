//! Tests of the lease state machine and planner, named after the rules they pin (PROTOCOL.md).
//!
//! - `rules`: a table test per rule against `apply`, with explicit `now_ms`.
//! - `planner`: the even-spread, fewest-moves planner (P5.4), including a property test against
//!   a brute-force optimum.
//! - `drain`: draining executors (the flag, and how the planner moves their shards).
//! - `encoding`: bincode 2 round trips of the state, every command and every outcome.
//! - `namespaces`: namespaces (P18.1, P18.2): creation, bounds, isolation, deletion, epochs.
//! - `operator`: operator controls (P17.4): maintenance, moves, pins and the audit log.
//! - `placement`: placement by load and capacity (P15.1–P15.4), rule by rule and as properties.
//! - `rollout`: version-aware placement while a fleet's application versions are mixed (P17.3).
//! - `reservations`: lease reservations and reaping by the leader's judgment (P6.6, P6.7).
//! - `schemas`: the conversions between state schemas and the cluster version (P14.1, P14.3).

mod drain;
pub(crate) mod encoding;
mod group_registration;
mod namespaces;
mod operator;
mod placement;
mod planner;
mod replicas;
mod reservations;
mod reshard;
mod rollout;
mod rules;
mod schemas;
mod zones;

use super::{
    Command, Effects, Epoch, ExecutorId, LeaseState, Outcome, RenewResult, Renewal, ShardId,
};

/// The `default` namespace of an initialised state as the planner sees it.
pub(crate) fn space_of(state: &LeaseState) -> super::Space<'_> {
    state
        .space(leasehold_api::wire::DEFAULT_NAMESPACE)
        .expect("an initialised state has the default namespace")
}

/// The `default` namespace of an initialised state, to corrupt or trim in place.
pub(super) fn default_space(state: &mut LeaseState) -> &mut super::Namespace {
    state
        .namespaces
        .get_mut(leasehold_api::wire::DEFAULT_NAMESPACE)
        .expect("an initialised state has the default namespace")
}

/// The default lease (§11), used by most tests.
pub(super) const LEASE_MS: u64 = 60_000;

/// Applies commands at consecutive log indexes, as Raft would, and checks the structural
/// invariants after every one.
#[derive(Debug, Clone)]
pub(super) struct Harness {
    pub(super) state: LeaseState,
    pub(super) next_index: u64,
}

impl Harness {
    /// An uninitialised state; the first command gets log index 1.
    pub(super) fn new() -> Self {
        Self {
            state: LeaseState::default(),
            next_index: 1,
        }
    }

    /// A state initialised at time 0.
    pub(super) fn initialised(shard_count: u32, lease_duration_ms: u64) -> Self {
        let mut harness = Self::new();
        let outcome = harness.apply(Command::Init {
            now_ms: 0,
            shard_count,
            lease_duration_ms,
        });
        assert!(
            matches!(
                outcome,
                Outcome::Initialised {
                    already_initialised: false,
                    ..
                }
            ),
            "{outcome:?}"
        );
        harness
    }

    /// The log index the next command will get.
    pub(super) fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Applies `command` at the next log index.
    pub(super) fn apply(&mut self, command: Command) -> Outcome {
        let index = self.next_index;
        self.next_index += 1;
        let outcome = self.state.apply(index, &command);
        assert_eq!(
            self.state.consistency_violations(),
            Vec::<String>::new(),
            "after {command:?}"
        );
        outcome
    }

    /// Applies `command` and asserts that it changed nothing at all, revision included (P5.1).
    pub(super) fn apply_expecting_no_change(&mut self, command: Command) -> Outcome {
        let before = self.state.clone();
        let outcome = self.apply(command.clone());
        assert_eq!(
            self.state, before,
            "{command:?} changed the state: {outcome:?}"
        );
        outcome
    }

    /// Registers a new incarnation and returns the minted executor id.
    pub(super) fn register(&mut self, now_ms: u64, incarnation: &str) -> ExecutorId {
        match self.apply(register_command(now_ms, incarnation)) {
            Outcome::Registered { grant, .. } => grant.executor_id,
            other => panic!("register {incarnation} failed: {other:?}"),
        }
    }

    /// One renewal in its own entry.
    pub(super) fn renew(
        &mut self,
        now_ms: u64,
        executor_id: &str,
        claims: Vec<(ShardId, Epoch)>,
        revision: u64,
    ) -> (RenewResult, Effects) {
        let outcome = self.apply(Command::Renew {
            now_ms,
            renewals: vec![Renewal {
                executor_id: executor_id.to_owned(),
                claims,
                revision,
                ready: Vec::new(),
            }],
        });
        match outcome {
            Outcome::Renewed {
                mut results,
                effects,
            } if results.len() == 1 => (results.remove(0), effects),
            other => panic!("renew of {executor_id} gave {other:?}"),
        }
    }

    /// A renewal from an executor whose view is exactly the recorded state (every push landed).
    pub(super) fn renew_in_sync(
        &mut self,
        now_ms: u64,
        executor_id: &str,
    ) -> (RenewResult, Effects) {
        let claims = self.state.delivered_set(executor_id);
        let revision = self.state.revision();
        self.renew(now_ms, executor_id, claims, revision)
    }

    /// Plans at `now_ms` and applies the plan; panics if there was nothing to plan.
    pub(super) fn rebalance(&mut self, now_ms: u64) -> Outcome {
        let plan = super::plan_rebalance(&self.state, now_ms)
            .unwrap_or_else(|| panic!("nothing to plan at {now_ms}"));
        self.apply(plan)
    }

    /// The shard's owner (the old owner while releasing).
    pub(super) fn owner(&self, shard: ShardId) -> Option<&str> {
        self.state
            .shard(shard)
            .and_then(|entry| entry.owner.as_deref())
    }

    /// The shard's epoch.
    pub(super) fn epoch(&self, shard: ShardId) -> Epoch {
        self.state.shard(shard).map_or(0, |entry| entry.epoch)
    }

    /// The shards in an executor's delivered set.
    pub(super) fn delivered_shards(&self, executor_id: &str) -> Vec<ShardId> {
        self.state
            .delivered_set(executor_id)
            .into_iter()
            .map(|(shard, _)| shard)
            .collect()
    }
}

/// A state initialised at time 0 at log index 1, for tests outside the lease module (the next
/// command goes at index 2).
pub(crate) fn initialised_state(shard_count: u32, lease_duration_ms: u64) -> LeaseState {
    Harness::initialised(shard_count, lease_duration_ms).state
}

/// The operator the tests' namespace actions are recorded as (P17.4).
pub(crate) const TEST_ADMIN: &str = "admin CN=alice";

/// An operator's `CreateNamespace` (P18.1) at time 0.
pub(crate) fn create_namespace_command(
    name: &str,
    shard_count: u32,
    lease_duration_ms: u64,
    max_executors: Option<u32>,
) -> Command {
    Command::Operator {
        now_ms: 0,
        actor: TEST_ADMIN.to_owned(),
        action: super::OperatorAction::CreateNamespace {
            name: name.to_owned(),
            shard_count,
            lease_duration_ms,
            max_executors,
            placement: super::PlacementOverrides::default(),
            replication: Default::default(),
        },
    }
}

/// An admin's `SetNamespace` of `name` (P18.1, P18.4), every setting given whole.
pub(crate) fn set_namespace_command(
    name: &str,
    lease_duration_ms: u64,
    max_executors: Option<u32>,
    placement: super::PlacementOverrides,
) -> Command {
    Command::Operator {
        now_ms: 0,
        actor: TEST_ADMIN.to_owned(),
        action: super::OperatorAction::SetNamespace {
            name: name.to_owned(),
            lease_duration_ms,
            max_executors,
            placement,
            replication: Default::default(),
        },
    }
}

/// A registration of `incarnation` into `namespace` (P18.1), with a derived address and the
/// default capacity.
pub(crate) fn registration_in(incarnation: &str, namespace: &str) -> super::Registration {
    super::Registration {
        follows_generations: false,
        namespace: namespace.to_owned(),
        incarnation: incarnation.to_owned(),
        address: format!("http://{incarnation}.test"),
        name: None,
        credential_sha256: None,
        capacity: crate::lease::DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    }
}

/// [`register_command`] into `namespace` (P18.1).
pub(crate) fn register_in_command(now_ms: u64, incarnation: &str, namespace: &str) -> Command {
    registration_in(incarnation, namespace).into_command(now_ms)
}

/// A `Register` for `incarnation` with a derived address.
pub(crate) fn register_command(now_ms: u64, incarnation: &str) -> Command {
    register_command_with_capacity(now_ms, incarnation, crate::lease::DEFAULT_CAPACITY)
}

/// A `Register` for `incarnation` with a placement capacity (P15.1).
pub(super) fn register_command_with_capacity(
    now_ms: u64,
    incarnation: &str,
    capacity: u32,
) -> Command {
    super::Registration {
        capacity,
        ..registration_in(incarnation, leasehold_api::wire::DEFAULT_NAMESPACE)
    }
    .into_command(now_ms)
}

/// A `Register` for `incarnation` at `capacity` stating `labels` (P18.3), as `key, value` pairs.
pub(super) fn register_command_with_labels(
    now_ms: u64,
    incarnation: &str,
    capacity: u32,
    labels: &[(&str, &str)],
) -> Command {
    let Command::Register {
        now_ms,
        incarnation,
        address,
        name,
        credential_sha256,
        capacity,
        app_version,
        ..
    } = register_command_with_capacity(now_ms, incarnation, capacity)
    else {
        unreachable!("a registration")
    };
    Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms,
        incarnation,
        address,
        name,
        credential_sha256,
        capacity,
        app_version,
        labels: labels
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
    }
}

/// Plans by count at `now_ms`, applies the plan and answers every revoke it asks for at once, so
/// each handoff completes; returns the plan's moves, each with why (none: nothing to plan).
pub(super) fn plan_and_release(
    harness: &mut Harness,
    now_ms: u64,
) -> Vec<(ShardId, ExecutorId, super::MoveReason)> {
    let Some(plan) = super::plan_placement(
        space_of(&harness.state),
        now_ms,
        &super::PlacementInputs::by_count(),
        super::MAX_MOVES_PER_PLAN,
    ) else {
        return Vec::new();
    };
    let Command::Rebalance { moves, .. } = &plan.command else {
        panic!("{plan:?}");
    };
    let made = moves
        .iter()
        .zip(&plan.reasons)
        .map(|(step, reason)| (step.shard, step.to.clone(), *reason))
        .collect();
    let Outcome::Rebalanced { effects, .. } = harness.apply(plan.command.clone()) else {
        panic!("the plan was refused");
    };
    for revoke in effects.revokes {
        harness.apply(Command::Release {
            now_ms,
            executor_id: revoke.executor_id,
            shards: revoke.shards,
            revoke_revision: revoke.revision,
        });
    }
    made
}
