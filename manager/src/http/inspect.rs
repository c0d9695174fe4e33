//! Read-only views of the lease state (PROTOCOL §9). Served by any replica from its applied
//! state; `?consistent=true` reads through the leader. Lease times are remaining times on the
//! answering node's clock (P3.1).

use std::num::NonZeroU32;

use axum::extract::State;
use axum::Json;
use std::sync::Arc;

use leasehold_api::wire::{
    ExecutorView, HandoffView, KeyRoute, RoutingAnswer, RoutingTable, ShardEpoch, ShardView,
    StateView,
};
use serde::Deserialize;

use super::params::{namespace_named, space_named, ExecutorIdPath, NamespaceReadQuery, ReadQuery};
use super::{ApiQuery, AppState, HttpError};

use crate::lease::{Executor, LeaseState, Shard, Space, ToldFromMemory};
use crate::load_reports::LoadPicture;
use crate::routing::route;

/// What only the leader knows, if this node is leading: the loads (PROTOCOL §15) and the leases
/// it told from memory (P6.8), which the log does not carry.
#[derive(Debug, Default)]
pub(super) struct LeaderKnows {
    pub(super) loads: Option<Arc<LoadPicture>>,
    /// `None` off the leader.
    pub(super) told_from_memory: Option<ToldFromMemory>,
}

pub(super) fn leader_knows(node: &AppState) -> LeaderKnows {
    LeaderKnows {
        loads: node.published_loads.latest(),
        told_from_memory: node.memory_renewals.told_if_leading(&node.leadership),
    }
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
pub(super) fn shard_view(
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
    }
}

/// `executor_id` as this replica's applied state has it now, if registered.
pub(super) fn current_executor_view(node: &AppState, executor_id: &str) -> Option<ExecutorView> {
    let now_ms = node.leadership.clock.now_ms();
    let known = leader_knows(node);
    node.state.read(|applied| {
        let state = &applied.state;
        state
            .executor(executor_id)
            .map(|executor| executor_view(state, executor, now_ms, &known))
    })
}

/// One namespace of the state as `GET /v1/state` shows it (`default` before `Init`: nothing),
/// lease times on this node's clock at `now_ms`, loads and leases as the leader knows them
/// (nothing more off the leader).
pub(super) fn state_view(
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

/// Everything, read at one revision.
#[utoipa::path(
    get, path = "/v1/state", tag = "inspection", params(NamespaceReadQuery),
    responses(
        (status = 200, description = "Revision, configuration, executors and shards (of one namespace).", body = StateView),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn state(
    State(node): State<AppState>,
    ApiQuery(query): ApiQuery<NamespaceReadQuery>,
) -> Result<Json<StateView>, HttpError> {
    let name = query.namespace()?;
    let now_ms = node.leadership.clock.now_ms();
    let known = leader_knows(&node);
    let state = node.state.current();
    let space = space_named(&state, name)?;
    Ok(Json(state_view(&state, space, now_ms, &known)))
}

/// Every registered executor.
#[utoipa::path(
    get, path = "/v1/executors", tag = "inspection", params(NamespaceReadQuery),
    responses(
        (status = 200, description = "Registered executors (of one namespace), ascending by id.", body = Vec<ExecutorView>),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn executors(
    State(node): State<AppState>,
    ApiQuery(query): ApiQuery<NamespaceReadQuery>,
) -> Result<Json<Vec<ExecutorView>>, HttpError> {
    executor_views_in(&node, query.namespace()?).map(Json)
}

/// Every executor registered in `namespace`, lease times on this node's clock.
pub(super) fn executor_views_in(
    node: &AppState,
    namespace: &str,
) -> Result<Vec<ExecutorView>, HttpError> {
    let now_ms = node.leadership.clock.now_ms();
    let known = leader_knows(node);
    node.state.read(|applied| {
        let state = &applied.state;
        let space = space_named(state, namespace)?;
        Ok(space
            .into_iter()
            .flat_map(|space| space.executors())
            .map(|e| executor_view(state, e, now_ms, &known))
            .collect())
    })
}

/// One registered executor.
#[utoipa::path(
    get, path = "/v1/executors/{executor_id}", tag = "inspection",
    params(ExecutorIdPath, ReadQuery),
    responses(
        (status = 200, description = "The executor.", body = ExecutorView),
        (status = 404, description = "`unknown_executor`: not registered."),
    ),
)]
pub async fn executor(
    State(node): State<AppState>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Result<Json<ExecutorView>, HttpError> {
    current_executor_view(&node, &executor_id)
        .map(Json)
        .ok_or_else(|| {
            HttpError::new(
                leasehold_api::problem::ErrorCode::UnknownExecutor,
                format!("executor {executor_id} is not registered"),
            )
        })
}

/// Every shard with its owner, epoch and handoff.
#[utoipa::path(
    get, path = "/v1/shards", tag = "inspection", params(NamespaceReadQuery),
    responses(
        (status = 200, description = "Shards (of one namespace), ascending.", body = Vec<ShardView>),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn shards(
    State(node): State<AppState>,
    ApiQuery(query): ApiQuery<NamespaceReadQuery>,
) -> Result<Json<Vec<ShardView>>, HttpError> {
    let name = query.namespace()?;
    let now_ms = node.leadership.clock.now_ms();
    let loads = node.published_loads.latest();
    let loads = loads.as_deref();
    let current = node.state.current();
    let space = space_named(&current, name)?;
    Ok(Json(shard_views(space, now_ms, loads)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RoutingQuery {
    /// Answer the route of this key only (its UTF-8 bytes hashed, `shard_for_key`).
    #[param(max_length = 1024)]
    key: Option<String>,
    /// As for every read: through the leader's read index.
    #[serde(default)]
    #[allow(dead_code)] // acted on by the layer: `params::consistent_read_requested`
    consistent: bool,
    /// `routes` (the default): a route per shard. `runs`: the table as runs
    /// ([`RoutingRuns`]), far smaller for large tables; not with `key`.
    #[serde(default)]
    #[param(inline)]
    form: RoutingForm,
    /// The namespace routed (PROTOCOL P18.1): its shards, and its keys hashed over its shard
    /// count; absent: `default`.
    #[param(
        min_length = 1,
        max_length = 63,
        pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
    )]
    namespace: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RoutingForm {
    #[default]
    Routes,
    Runs,
}

/// The routing table, or the route for one key (shard = `leasehold_api::shard_for_key`).
#[utoipa::path(
    get, path = "/v1/routing", tag = "inspection", params(RoutingQuery),
    responses(
        (status = 200, description = "The whole table, or with `key` that key's route.", body = RoutingAnswer),
        (status = 503, description = "`sharding_not_ready`: a key was asked before the shard configuration was written; `no_leader`."),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn routing(
    State(node): State<AppState>,
    ApiQuery(query): ApiQuery<RoutingQuery>,
) -> Result<Json<RoutingAnswer>, HttpError> {
    if let Some(key) = &query.key {
        leasehold_api::check_key_length(key).map_err(HttpError::invalid)?;
    }
    if query.key.is_some() && query.form == RoutingForm::Runs {
        return Err(HttpError::invalid(
            "form=runs is a form of the whole table; a key's route is one route",
        ));
    }
    let name = namespace_named(query.namespace.as_deref())?;
    let state = node.state.current();
    let space = space_named(&state, name)?;
    let shard_count = space
        .and_then(|space| space.config())
        .map_or(0, |c| c.shard_count);
    let Some(key) = &query.key else {
        if query.form == RoutingForm::Runs {
            return Ok(Json(RoutingAnswer::Runs(
                node.routing_runs.of(&state, space),
            )));
        }
        return Ok(Json(RoutingAnswer::Table(RoutingTable {
            revision: state.revision(),
            shard_count,
            routes: space
                .into_iter()
                .flat_map(|space| space.shards().iter())
                .map(|s| route(&state, s))
                .collect(),
        })));
    };
    let count = NonZeroU32::new(shard_count).ok_or_else(|| {
        HttpError::new(
            leasehold_api::problem::ErrorCode::ShardingNotReady,
            "the cluster's shard configuration is not written yet",
        )
    })?;
    let shard = leasehold_api::shard_for_key(key.as_bytes(), count);
    let found = space
        .and_then(|space| space.shard(shard))
        .ok_or_else(|| HttpError::internal("routing", format!("shard {shard} missing")))?;
    Ok(Json(RoutingAnswer::Key(KeyRoute {
        key: key.clone(),
        revision: state.revision(),
        route: route(&state, found),
    })))
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
