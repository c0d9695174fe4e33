//! Read-only views of the lease state (PROTOCOL §9). Served by any replica from its applied
//! state; `?consistent=true` reads through the leader. Lease times are remaining times on the
//! answering node's clock (P3.1).

use std::num::NonZeroU32;

use axum::extract::State;
use axum::Json;
use leasehold_api::wire::{
    ExecutorView, HandoffView, KeyRoute, Route, RoutingAnswer, RoutingRuns, RoutingTable,
    ShardEpoch, ShardView, StateView,
};
use serde::Deserialize;

use super::params::{ExecutorIdPath, ReadQuery};
use super::{ApiQuery, AppState, HttpError};

use std::sync::Arc;

use crate::lease::{Executor, ExecutorId, LeaseState, Shard};
use crate::load_reports::LoadPicture;

/// Longest routing key accepted in a query string.
const MAX_KEY_BYTES: usize = 1024;

/// What the leader knows of loads, if this node is leading (PROTOCOL §15).
fn loads_known(node: &AppState) -> Option<Arc<LoadPicture>> {
    node.published_loads.latest()
}

fn executor_view(
    state: &LeaseState,
    executor: &Executor,
    now_ms: u64,
    loads: Option<&LoadPicture>,
) -> ExecutorView {
    let load = loads.and_then(|picture| picture.summary.executors.get(&executor.id));
    ExecutorView {
        executor_id: executor.id.clone(),
        incarnation: executor.incarnation.clone(),
        name: executor.name.clone(),
        address: executor.address.clone(),
        lease_remaining_ms: executor.lease_remaining_ms(now_ms),
        registered_revision: executor.registered_revision,
        shards: state
            .delivered_set(&executor.id)
            .into_iter()
            .map(|(shard, epoch)| ShardEpoch { shard, epoch })
            .collect(),
        draining: executor.draining,
        capacity: executor.capacity,
        load: load.map(|known| known.load),
        utilisation: load.map(|known| known.utilisation),
    }
}

fn shard_view(shard: &Shard, now_ms: u64, loads: Option<&LoadPicture>) -> ShardView {
    let index = usize::try_from(shard.id).ok();
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
    }
}

/// Whom work for `shard` goes to: its owner, unless it is between owners (releasing), when
/// nobody may be sent work for it yet. `/v1/routing` applies this rule in both forms.
fn routed_owner(shard: &Shard) -> Option<&ExecutorId> {
    shard.owner.as_ref().filter(|_| shard.handoff.is_none())
}

fn route(state: &LeaseState, shard: &Shard) -> Route {
    let owner = routed_owner(shard);
    Route {
        shard: shard.id,
        executor_id: owner.cloned(),
        address: owner
            .and_then(|id| state.executor(id))
            .map(|e| e.address.clone()),
        epoch: shard.epoch,
    }
}

/// The routing table as runs ([`RoutingRuns`]), by [`routed_owner`].
fn routing_runs(state: &LeaseState) -> RoutingRuns {
    let shard_count = state.config().map_or(0, |c| c.shard_count);
    // Consecutive shards mostly have one owner: its address is looked up once per stretch.
    let mut last_owner: Option<(&str, Option<&str>)> = None;
    RoutingRuns::collect(
        state.revision(),
        shard_count,
        state.shards().iter().map(|shard| {
            let owner = routed_owner(shard).and_then(|id| {
                let address = match last_owner {
                    Some((last_id, address)) if last_id == id => address,
                    _ => {
                        let address = state.executor(id).map(|e| e.address.as_str());
                        last_owner = Some((id.as_str(), address));
                        address
                    }
                };
                address.map(|address| (id.as_str(), address))
            });
            (shard.id, shard.epoch, owner)
        }),
    )
}

/// The routing table as runs, kept from one answer to the next while it cannot have changed.
///
/// The table is a function of the shards' owners, epochs and handoffs and the owners' addresses,
/// and every entry that changes any of them moves the state's `assignment_revision` (P2.4). A
/// routing client follows `/v1/watch?view=routing`, which answers on every new revision, and
/// most revisions are renewals: the runs built for the first of them (a pass over every shard,
/// a million at most) serve the rest, with the revision brought up to date.
#[derive(Debug, Default)]
pub struct RoutingRunsCache {
    /// The runs last built, and the `assignment_revision` of the state they were built from.
    last: std::sync::Mutex<Option<(u64, Arc<RoutingRuns>)>>,
}

impl RoutingRunsCache {
    /// The routing table of `state` as runs.
    pub fn of(&self, state: &LeaseState) -> RoutingRuns {
        let assignment_revision = state.assignment_revision();
        let kept = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|(built_at, _)| *built_at == assignment_revision)
            .map(|(_, runs)| runs.clone());
        let mut runs = match kept {
            Some(runs) => RoutingRuns::clone(&runs),
            None => {
                // Built outside the lock: a reader arriving meanwhile builds its own.
                let runs = routing_runs(state);
                *self
                    .last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some((assignment_revision, Arc::new(runs.clone())));
                runs
            }
        };
        runs.revision = state.revision();
        runs
    }
}

/// `executor_id` as this replica's applied state has it now, if registered.
pub(super) fn current_executor_view(node: &AppState, executor_id: &str) -> Option<ExecutorView> {
    let now_ms = node.clock.now_ms();
    let loads = loads_known(node);
    node.state.read(|applied| {
        let state = &applied.state;
        state
            .executor(executor_id)
            .map(|executor| executor_view(state, executor, now_ms, loads.as_deref()))
    })
}

/// The whole state as `GET /v1/state` shows it, lease times on this node's clock at `now_ms`,
/// loads as the leader knows them (`None` off the leader).
pub(super) fn state_view(
    state: &LeaseState,
    now_ms: u64,
    loads: Option<&LoadPicture>,
) -> StateView {
    StateView {
        revision: state.revision(),
        shard_count: state.config().map_or(0, |c| c.shard_count),
        lease_duration_ms: state.config().map_or(0, |c| c.lease_duration_ms),
        executors: state
            .executors()
            .map(|e| executor_view(state, e, now_ms, loads))
            .collect(),
        shards: state
            .shards()
            .iter()
            .map(|s| shard_view(s, now_ms, loads))
            .collect(),
    }
}

/// Everything, read at one revision.
#[utoipa::path(
    get, path = "/v1/state", tag = "inspection", params(ReadQuery),
    responses((status = 200, description = "Revision, configuration, executors and shards.", body = StateView)),
)]
pub async fn state(
    State(node): State<AppState>,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Json<StateView> {
    let now_ms = node.clock.now_ms();
    let loads = loads_known(&node);
    Json(state_view(&node.state.current(), now_ms, loads.as_deref()))
}

/// Every registered executor.
#[utoipa::path(
    get, path = "/v1/executors", tag = "inspection", params(ReadQuery),
    responses((status = 200, description = "Registered executors, ascending by id.", body = Vec<ExecutorView>)),
)]
pub async fn executors(
    State(node): State<AppState>,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Json<Vec<ExecutorView>> {
    let now_ms = node.clock.now_ms();
    let loads = loads_known(&node);
    Json(node.state.read(|applied| {
        let state = &applied.state;
        state
            .executors()
            .map(|e| executor_view(state, e, now_ms, loads.as_deref()))
            .collect()
    }))
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
    get, path = "/v1/shards", tag = "inspection", params(ReadQuery),
    responses((status = 200, description = "Shards, ascending.", body = Vec<ShardView>)),
)]
pub async fn shards(
    State(node): State<AppState>,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Json<Vec<ShardView>> {
    let now_ms = node.clock.now_ms();
    let loads = loads_known(&node);
    Json(
        node.state
            .current()
            .shards()
            .iter()
            .map(|s| shard_view(s, now_ms, loads.as_deref()))
            .collect(),
    )
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
    #[allow(dead_code)] // read by the consistent-read layer
    consistent: bool,
    /// `routes` (the default): a route per shard. `runs`: the table as runs
    /// ([`RoutingRuns`]), far smaller for large tables; not with `key`.
    #[serde(default)]
    #[param(inline)]
    form: RoutingForm,
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
    ),
)]
pub async fn routing(
    State(node): State<AppState>,
    ApiQuery(query): ApiQuery<RoutingQuery>,
) -> Result<Json<RoutingAnswer>, HttpError> {
    if query
        .key
        .as_ref()
        .is_some_and(|key| key.len() > MAX_KEY_BYTES)
    {
        return Err(HttpError::invalid(format!(
            "key is longer than {MAX_KEY_BYTES} bytes"
        )));
    }
    if query.key.is_some() && query.form == RoutingForm::Runs {
        return Err(HttpError::invalid(
            "form=runs is a form of the whole table; a key's route is one route",
        ));
    }
    let state = node.state.current();
    let shard_count = state.config().map_or(0, |c| c.shard_count);
    let Some(key) = &query.key else {
        if query.form == RoutingForm::Runs {
            return Ok(Json(RoutingAnswer::Runs(node.routing_runs.of(&state))));
        }
        return Ok(Json(RoutingAnswer::Table(RoutingTable {
            revision: state.revision(),
            shard_count,
            routes: state.shards().iter().map(|s| route(&state, s)).collect(),
        })));
    };
    let count = NonZeroU32::new(shard_count).ok_or_else(|| {
        HttpError::new(
            leasehold_api::problem::ErrorCode::ShardingNotReady,
            "the cluster's shard configuration is not written yet",
        )
    })?;
    let shard = leasehold_api::shard_for_key(key.as_bytes(), count);
    let found = state
        .shard(shard)
        .ok_or_else(|| HttpError::internal("routing", format!("shard {shard} missing")))?;
    Ok(Json(RoutingAnswer::Key(KeyRoute {
        key: key.clone(),
        revision: state.revision(),
        route: route(&state, found),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{plan_rebalance, Command};

    fn apply(state: &mut LeaseState, command: Command) {
        let log_index = state.revision() + 1;
        let outcome = state.apply(log_index, &command);
        assert!(outcome.refusal().is_none(), "{outcome:?}");
    }

    fn register(state: &mut LeaseState, incarnation: &str) {
        apply(
            state,
            Command::Register {
                now_ms: 0,
                incarnation: incarnation.into(),
                address: format!("http://{incarnation}:1"),
                name: None,
                credential_sha256: None,
                capacity: 1,
            },
        );
    }

    /// The kept runs are the table's own at every revision: reused (the revision brought up to
    /// date) while nothing routed changes, built again when an entry changes owners or members.
    #[test]
    fn kept_routing_runs_answer_as_a_fresh_build_at_every_revision() {
        let cache = RoutingRunsCache::default();
        let mut state = LeaseState::default();
        apply(
            &mut state,
            Command::Init {
                now_ms: 0,
                shard_count: 8,
                lease_duration_ms: 60_000,
            },
        );
        register(&mut state, "a");
        assert_eq!(cache.of(&state), routing_runs(&state));
        let placed = plan_rebalance(&state, 0).expect("shards to place");
        apply(&mut state, placed);
        assert_eq!(cache.of(&state), routing_runs(&state), "owners changed");
        // A change nothing routed depends on: the kept runs, at the new revision.
        apply(
            &mut state,
            Command::SetLeaseDuration {
                now_ms: 1,
                lease_duration_ms: 30_000,
            },
        );
        let reused = cache.of(&state);
        assert_eq!(reused.revision, state.revision());
        assert_eq!(reused, routing_runs(&state));
        register(&mut state, "b");
        let handoffs = plan_rebalance(&state, 1).expect("shards for the joiner");
        apply(&mut state, handoffs);
        assert_eq!(cache.of(&state), routing_runs(&state), "handoffs began");
    }
}
