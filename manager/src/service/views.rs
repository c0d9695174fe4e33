//! Reads of the lease state as the wire shows it (PROTOCOL §9): what `GET /v1/state`, the
//! executor and shard lists, the routing table, the watch and the operator controls answer with.
//! Served by any replica from its applied state; lease times are remaining times on this node's
//! clock (P3.1), and what only the leader knows (loads, leases told from memory) is added when
//! this node leads.

use std::num::NonZeroU32;
use std::sync::Arc;

use leasehold_api::http::HttpError;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    AuditRecordView, ExecutorView, HandoffView, KeyRoute, NamespaceView, RoutingRuns, RoutingTable,
    SecondaryView, ShardEpoch, ShardView, StateView, DEFAULT_NAMESPACE,
};

use super::operator::REMOVAL_MARK;
use super::refusals::unknown_namespace;
use crate::handles::leadership::Leadership;
use crate::handles::load_reports::{LoadPicture, PublishedLoads};
use crate::handles::routing::{route, RoutingRunsCache};
use crate::lease::{
    AuditRecord, Executor, LeaseState, MembershipChange, Namespace, OperatorAction,
    PlacementInputs, Shard, ShardId, Space, ToldFromMemory,
};
use crate::raft::{LeaseStateHandle, NodeId};
use crate::renewals::from_memory::MemoryRenewals;
use openraft::{BasicNode, RaftMetrics};

/// The handles the reads use: the applied state, the leader clock and what the leader knows.
#[derive(Clone)]
pub struct Views {
    state: LeaseStateHandle,
    leadership: Leadership,
    published_loads: PublishedLoads,
    memory_renewals: MemoryRenewals,
    routing_runs: Arc<RoutingRunsCache>,
}

impl Views {
    pub fn new(
        state: LeaseStateHandle,
        leadership: Leadership,
        published_loads: PublishedLoads,
        memory_renewals: MemoryRenewals,
        routing_runs: Arc<RoutingRunsCache>,
    ) -> Self {
        Self {
            state,
            leadership,
            published_loads,
            memory_renewals,
            routing_runs,
        }
    }

    /// The applied state, for reads that project it themselves.
    pub fn state(&self) -> &LeaseStateHandle {
        &self.state
    }

    /// This node's clock as the leader clock reads it (P2.3).
    pub fn now_ms(&self) -> u64 {
        self.leadership.clock.now_ms()
    }

    /// What only the leader knows, empty off the leader.
    pub fn leader_knows(&self) -> LeaderKnows {
        LeaderKnows {
            loads: self.published_loads.latest(),
            told_from_memory: self.memory_renewals.told_if_leading(&self.leadership),
        }
    }

    /// `executor_id` as this replica's applied state has it now, if registered.
    pub fn executor(&self, executor_id: &str) -> Option<ExecutorView> {
        let now_ms = self.now_ms();
        let known = self.leader_knows();
        self.state.read(|applied| {
            let state = &applied.state;
            state
                .executor(executor_id)
                .map(|executor| executor_view(state, executor, now_ms, &known))
        })
    }

    /// Every executor registered in `namespace`, ascending by id.
    pub fn executors_in(&self, namespace: &str) -> Result<Vec<ExecutorView>, HttpError> {
        let now_ms = self.now_ms();
        let known = self.leader_knows();
        self.state.read(|applied| {
            let state = &applied.state;
            let space = space_named(state, namespace)?;
            Ok(space
                .into_iter()
                .flat_map(|space| space.executors())
                .map(|e| executor_view(state, e, now_ms, &known))
                .collect())
        })
    }

    /// One namespace of the state, read at one revision.
    pub fn state_of(&self, namespace: &str) -> Result<StateView, HttpError> {
        let now_ms = self.now_ms();
        let known = self.leader_knows();
        let state = self.state.current();
        let space = space_named(&state, namespace)?;
        Ok(state_view(&state, space, now_ms, &known))
    }

    /// Every shard of `namespace`, ascending.
    pub fn shards_in(&self, namespace: &str) -> Result<Vec<ShardView>, HttpError> {
        let now_ms = self.now_ms();
        let loads = self.published_loads.latest();
        let state = self.state.current();
        let space = space_named(&state, namespace)?;
        Ok(shard_views(space, now_ms, loads.as_deref()))
    }

    /// A shard of `default` as this replica applied it (the leader, after a commit).
    pub fn shard(&self, shard: ShardId) -> Result<ShardView, HttpError> {
        let state = self.state.current();
        let space = state
            .space(DEFAULT_NAMESPACE)
            .ok_or_else(|| unknown_shard(shard))?;
        let entry = space.shard(shard).ok_or_else(|| unknown_shard(shard))?;
        Ok(shard_view(space, entry, self.now_ms(), None))
    }

    /// The routing table of `namespace`: a route per shard.
    pub fn routing_table(&self, namespace: &str) -> Result<RoutingTable, HttpError> {
        let state = self.state.current();
        let space = space_named(&state, namespace)?;
        Ok(RoutingTable {
            revision: state.revision(),
            shard_count: shard_count_of(space),
            generation: generation_of(space),
            routes: space
                .into_iter()
                .flat_map(|space| space.shards().iter())
                .map(|s| route(&state, s))
                .collect(),
        })
    }

    /// The routing table of `namespace` as runs, built once per change of owners or members.
    pub fn routing_runs(&self, namespace: &str) -> Result<RoutingRuns, HttpError> {
        let state = self.state.current();
        let space = space_named(&state, namespace)?;
        Ok(self.routing_runs.of(&state, space))
    }

    /// The routing table of `space` in `state` as runs (a state the caller read already).
    pub fn routing_runs_of(&self, state: &LeaseState, space: Option<Space<'_>>) -> RoutingRuns {
        self.routing_runs.of(state, space)
    }

    /// The route of `key` in `namespace` (its shard by `leasehold_api::shard_for_key`).
    pub fn key_route(&self, namespace: &str, key: &str) -> Result<KeyRoute, HttpError> {
        let state = self.state.current();
        let space = space_named(&state, namespace)?;
        let count = NonZeroU32::new(shard_count_of(space)).ok_or_else(|| {
            HttpError::new(
                ErrorCode::ShardingNotReady,
                "the cluster's shard configuration is not written yet",
            )
        })?;
        let shard = leasehold_api::shard_for_key(key.as_bytes(), count);
        let found = space
            .and_then(|space| space.shard(shard))
            .ok_or_else(|| HttpError::internal("routing", format!("shard {shard} missing")))?;
        let generation = generation_of(space);
        Ok(KeyRoute {
            key: key.to_owned(),
            revision: state.revision(),
            generation,
            // The count the key was mapped with, once a reshard made it one of several (P20.3).
            shard_count: (generation > 0).then_some(count.get()),
            route: route(&state, found),
        })
    }

    /// What the leader's last step placed `namespace` by: its loads, budget and cooling shards
    /// (§15, P18.1); by count before its first step and off the leader.
    pub fn placement_inputs(&self, namespace: &str) -> Arc<PlacementInputs> {
        self.published_loads
            .latest()
            .and_then(|picture| {
                picture
                    .space(namespace)
                    .map(|space| Arc::clone(&space.placement_inputs))
            })
            .unwrap_or_else(|| Arc::new(PlacementInputs::by_count()))
    }

    /// Moves whenever an entry is applied: what a blocking query waits on (the state handle is
    /// updated before openraft reports the entry applied).
    pub fn applied_changes(&self) -> tokio::sync::watch::Receiver<RaftMetrics<NodeId, BasicNode>> {
        self.leadership.raft.metrics()
    }

    /// Whether this node is stepping down: a blocking query answers at once then.
    pub fn is_stepping_down(&self) -> bool {
        self.leadership.is_stepping_down()
    }

    /// The audit log, oldest first (P17.4).
    pub fn audit(&self) -> Vec<AuditRecordView> {
        self.state.current().audit().map(audit_view).collect()
    }

    /// Whether maintenance mode is on (P17.4).
    pub fn maintenance(&self) -> bool {
        self.state.current().maintenance()
    }

    /// Every namespace, ascending by name.
    pub fn namespaces(&self) -> Vec<NamespaceView> {
        let state = self.state.current();
        state
            .namespaces()
            .map(|(name, namespace)| namespace_view(name, namespace, &state))
            .collect()
    }

    /// The namespace `name` as this replica applied it (the leader, after a commit).
    pub fn namespace(&self, name: &str) -> Result<NamespaceView, HttpError> {
        let state = self.state.current();
        let namespace = state
            .namespace(name)
            .ok_or_else(|| unknown_namespace(name))?;
        Ok(namespace_view(name, namespace, &state))
    }
}

/// The namespace's generation (P20.1); 0 for none (`default` before `Init`).
fn generation_of(space: Option<Space<'_>>) -> u64 {
    space.map_or(0, |space| space.namespace().generation)
}

fn shard_count_of(space: Option<Space<'_>>) -> u32 {
    space
        .and_then(|space| space.config())
        .map_or(0, |c| c.shard_count)
}

fn unknown_shard(shard: ShardId) -> HttpError {
    HttpError::new(
        ErrorCode::NotFound,
        format!("shard {shard} is out of range"),
    )
}

/// The namespace `name` of `state` as the views read it: `None` for `default` before `Init`
/// (every list is then empty, as before namespaces), `404` for a namespace that does not exist.
pub fn space_named<'a>(state: &'a LeaseState, name: &str) -> Result<Option<Space<'a>>, HttpError> {
    match state.space(name) {
        Some(space) => Ok(Some(space)),
        None if name == DEFAULT_NAMESPACE => Ok(None),
        None => Err(unknown_namespace(name)),
    }
}

/// What only the leader knows, if this node is leading: the loads (PROTOCOL §15) and the leases
/// it told from memory (P6.8), which the log does not carry.
#[derive(Debug, Default)]
pub struct LeaderKnows {
    pub loads: Option<Arc<LoadPicture>>,
    /// `None` off the leader.
    pub told_from_memory: Option<ToldFromMemory>,
}

fn executor_view(
    state: &LeaseState,
    executor: &Executor,
    now_ms: u64,
    known: &LeaderKnows,
) -> ExecutorView {
    let load = known
        .loads
        .as_deref()
        .and_then(|picture| picture.space(&executor.namespace))
        .and_then(|space| space.summary.executors.get(&executor.id));
    ExecutorView {
        executor_id: executor.id.clone(),
        incarnation: executor.incarnation.clone(),
        name: executor.name.clone(),
        address: executor.address.clone(),
        lease_remaining_ms: executor
            .lease_ends_ms(known.told_from_memory.as_ref())
            .saturating_sub(now_ms),
        registered_revision: executor.registered_revision,
        shards: state
            .delivered_set(&executor.id)
            .into_iter()
            .map(|(shard, epoch)| ShardEpoch { shard, epoch })
            .collect(),
        draining: executor.draining,
        capacity: executor.capacity,
        app_version: executor.app_version.clone(),
        labels: executor.labels.clone(),
        load: load.map(|known| known.load),
        utilisation: load.map(|known| known.utilisation),
        namespace: executor.namespace.clone(),
    }
}

/// A shard's view, with its load as the leader knows it in its namespace.
pub fn shard_view(
    space: Space<'_>,
    shard: &Shard,
    now_ms: u64,
    loads: Option<&LoadPicture>,
) -> ShardView {
    let index = usize::try_from(shard.id).ok();
    let loads = loads.and_then(|picture| picture.space(space.name()));
    ShardView {
        shard: shard.id,
        owner: shard.owner.clone(),
        epoch: shard.epoch,
        handoff: shard.handoff.as_ref().map(|handoff| HandoffView {
            to: handoff.to.clone(),
            revoke_revision: handoff.revoke_revision,
            completes_by_expiry_in_ms: handoff.from_grant_expiry_ms.saturating_sub(now_ms),
        }),
        load: loads
            .zip(index)
            .and_then(|(picture, index)| picture.shard_loads.get(index).copied()),
        hot: loads.is_some_and(|picture| picture.summary.hot.contains(&shard.id)),
        pinned_to: space.pin(shard.id).map(str::to_owned),
        secondaries: shard
            .secondaries
            .iter()
            .map(|secondary| SecondaryView {
                executor_id: secondary.executor.clone(),
                ready: secondary.ready_since_ms.is_some(),
                lost_for_ms: secondary
                    .lost
                    .as_ref()
                    .map(|lost| now_ms.saturating_sub(lost.since_ms)),
            })
            .collect(),
    }
}

/// One namespace of the state as `GET /v1/state` shows it (`default` before `Init`: nothing),
/// lease times on this node's clock at `now_ms`, loads and leases as the leader knows them
/// (nothing more off the leader).
pub fn state_view(
    state: &LeaseState,
    space: Option<Space<'_>>,
    now_ms: u64,
    known: &LeaderKnows,
) -> StateView {
    let loads = known.loads.as_deref();
    StateView {
        revision: state.revision(),
        shard_count: space
            .and_then(|space| space.config())
            .map_or(0, |c| c.shard_count),
        generation: generation_of(space),
        lease_duration_ms: space
            .and_then(|space| space.config())
            .map_or(0, |c| c.lease_duration_ms),
        executors: space
            .into_iter()
            .flat_map(|space| space.executors())
            .map(|e| executor_view(state, e, now_ms, known))
            .collect(),
        shards: shard_views(space, now_ms, loads),
        maintenance: state.maintenance(),
        // Off the leader each figure is the bound the log records (P6.6), not the lease.
        lease_remaining_is_bound: known.told_from_memory.is_none(),
    }
}

/// Every shard of the namespace `space` (none for `default` before `Init`), ascending.
fn shard_views(
    space: Option<Space<'_>>,
    now_ms: u64,
    loads: Option<&LoadPicture>,
) -> Vec<ShardView> {
    space
        .into_iter()
        .flat_map(|space| {
            space
                .shards()
                .iter()
                .map(move |s| shard_view(space, s, now_ms, loads))
        })
        .collect()
}

/// A namespace as the wire shows it, with what it holds now.
fn namespace_view(name: &str, namespace: &Namespace, state: &LeaseState) -> NamespaceView {
    NamespaceView {
        name: name.to_owned(),
        shard_count: namespace.config.shard_count,
        lease_duration_ms: namespace.config.lease_duration_ms,
        max_executors: namespace.max_executors,
        executors: namespace.executor_count() as u64,
        owned_shards: state
            .executors_in(name)
            .map(|executor| executor.owned_shards.len() as u64)
            .sum(),
        created_revision: namespace.created_revision,
        placement: namespace.placement.to_wire(),
        generation: namespace.generation,
        reshard: namespace
            .reshard
            .map(|pending| leasehold_api::wire::ReshardProgress {
                kind: pending.kind,
                shard_count: pending.shard_count,
                requested_revision: pending.requested_revision,
                waiting_on: namespace.reshard_waiting_on(),
            }),
        ..NamespaceView::default()
    }
    .with_replica_fields(namespace.replication.as_request())
}

/// A move's or pin's namespace as the audit view shows it: only when it is not `default`, so
/// the records of a cluster without namespaces read as they always did.
fn named_namespace(namespace: &str) -> Option<String> {
    (namespace != DEFAULT_NAMESPACE).then(|| namespace.to_owned())
}

/// A record as the API shows it.
pub fn audit_view(record: &AuditRecord) -> AuditRecordView {
    let mut view = AuditRecordView {
        revision: record.revision,
        at_ms: record.at_ms,
        actor: record.actor.clone(),
        action: String::new(),
        namespace: None,
        executor_id: None,
        shard: None,
        node_id: None,
        address: None,
        shard_count: None,
    };
    let action = match &record.action {
        OperatorAction::SetDraining {
            executor_id,
            draining,
        } => {
            view.executor_id = Some(executor_id.clone());
            if *draining && record.actor.ends_with(REMOVAL_MARK) {
                "remove_drain"
            } else if *draining {
                "drain"
            } else {
                "undrain"
            }
        }
        OperatorAction::Remove { executor_id } => {
            view.executor_id = Some(executor_id.clone());
            "remove"
        }
        OperatorAction::SetMaintenance { on } => {
            if *on {
                "maintenance_on"
            } else {
                "maintenance_off"
            }
        }
        OperatorAction::MoveShard {
            namespace,
            shard,
            to,
        } => {
            view.namespace = named_namespace(namespace);
            view.shard = Some(*shard);
            view.executor_id = Some(to.clone());
            "move"
        }
        OperatorAction::Pin {
            namespace,
            shard,
            executor_id,
        } => {
            view.namespace = named_namespace(namespace);
            view.shard = Some(*shard);
            view.executor_id.clone_from(executor_id);
            if executor_id.is_some() {
                "pin"
            } else {
                "unpin"
            }
        }
        OperatorAction::CreateNamespace { name, .. } => {
            view.namespace = Some(name.clone());
            "namespace_create"
        }
        OperatorAction::SetNamespace { name, .. } => {
            view.namespace = Some(name.clone());
            "namespace_set"
        }
        OperatorAction::DeleteNamespace { name } => {
            view.namespace = Some(name.clone());
            "namespace_delete"
        }
        OperatorAction::Reshard { name, shard_count } => {
            view.namespace = Some(name.clone());
            view.shard_count = Some(*shard_count);
            "namespace_reshard"
        }
        OperatorAction::Membership { change } => match change {
            MembershipChange::Added { node_id, address } => {
                view.node_id = Some(*node_id);
                view.address = Some(address.clone());
                "member_add"
            }
            MembershipChange::Removed { node_id } => {
                view.node_id = Some(*node_id);
                "member_remove"
            }
        },
    };
    view.action = action.to_owned();
    view
}

impl std::fmt::Debug for Views {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Views").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    // A test module: a failed expectation is a failed test.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::{state_view, LeaderKnows};
    use crate::lease::tests::{initialised_state, register_command, space_of};
    use crate::lease::{Command, Outcome, ToldFromMemory};

    /// P6.6, P6.7: a follower's `/v1/state` shows each lease's bound, the reservation (three
    /// leases ahead when made), and says so; the leader's shows the lease as it judges it, and
    /// says nothing.
    #[test]
    fn p6_6_a_follower_s_state_says_its_lease_figures_are_bounds() {
        let lease_ms = 10_000;
        let mut state = initialised_state(4, lease_ms);
        let Outcome::Registered { grant, .. } = state.apply(2, &register_command(0, "a")) else {
            panic!("registered");
        };
        let _ = state.apply(
            3,
            &Command::ReserveLeases {
                now_ms: 0,
                executor_ids: vec![grant.executor_id.clone()],
            },
        );
        let follower = state_view(&state, Some(space_of(&state)), 0, &LeaderKnows::default());
        assert!(follower.lease_remaining_is_bound);
        assert_eq!(follower.executors[0].lease_remaining_ms, 3 * lease_ms);
        let leader = state_view(
            &state,
            Some(space_of(&state)),
            0,
            &LeaderKnows {
                loads: None,
                told_from_memory: Some(ToldFromMemory::new()),
            },
        );
        assert!(!leader.lease_remaining_is_bound);
        assert_eq!(leader.executors[0].lease_remaining_ms, lease_ms);
    }
}
