//! `GET /v1/watch?revision=N&wait=30s`: a blocking query, like Consul's. The reply comes as soon
//! as this replica's applied state has a revision above `N` (or at once if it already has), or
//! with the unchanged state when `wait` runs out. Served by any replica from its applied state;
//! a watcher follows changes by sending the revision it last saw.
//!
//! The wake-up comes from openraft's metrics channel, which moves whenever an entry is applied;
//! the state handle is updated before openraft reports the entry applied.

use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::Json;
use leasehold_api::wire::{DepartedExecutor, DepartureReason, WatchAnswer, WatchReply};
use tokio::time::Instant;

use super::inspect::state_view;
use super::{AppState, HttpError};
use crate::lease::{LeaseState, TombstoneReason};

use leasehold_api::wire::MAX_WATCH_WAIT;
/// Used when the query names no wait.
const DEFAULT_WATCH_WAIT: Duration = Duration::from_secs(30);
/// How often a waiting query checks whether this replica is stopping, so a stop (P8.2) is not
/// held up by watchers for a whole wait.
const STOP_CHECK_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Debug, PartialEq, Eq)]
struct WatchQuery {
    revision: u64,
    wait: Duration,
    view: WatchView,
}

/// What a watch answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchView {
    /// The whole state and the executors departed ([`WatchReply`]).
    State,
    /// `view=routing`: only the routing table, as runs ([`RoutingRuns`]), which is what a
    /// routing client follows and far smaller than the state for large tables.
    Routing,
}

fn parse_query(raw: Option<&str>) -> Result<WatchQuery, HttpError> {
    let mut query = WatchQuery {
        revision: 0,
        wait: DEFAULT_WATCH_WAIT,
        view: WatchView::State,
    };
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "revision" => {
                query.revision = value.parse().map_err(|_| {
                    HttpError::invalid(format!("revision {value:?} is not a non-negative integer"))
                })?
            }
            "wait" => {
                query.wait = humantime::parse_duration(value).map_err(|e| {
                    HttpError::invalid(format!("wait {value:?} is not a duration like 30s: {e}"))
                })?;
                if query.wait > MAX_WATCH_WAIT {
                    return Err(HttpError::invalid(format!(
                        "wait {value} is longer than the maximum {}s",
                        MAX_WATCH_WAIT.as_secs()
                    )));
                }
            }
            "view" => {
                query.view = match value {
                    "state" => WatchView::State,
                    "routing" => WatchView::Routing,
                    other => {
                        return Err(HttpError::invalid(format!(
                            "view {other:?} is neither state nor routing"
                        )))
                    }
                }
            }
            other => {
                return Err(HttpError::invalid(format!(
                    "unknown query parameter {other:?} (expected revision, wait, view)"
                )))
            }
        }
    }
    Ok(query)
}

fn departed_since(state: &LeaseState, revision: u64) -> Vec<DepartedExecutor> {
    state
        .tombstones()
        .filter(|t| t.removed_revision > revision)
        .map(|t| DepartedExecutor {
            executor_id: t.executor_id.clone(),
            incarnation: t.incarnation.clone(),
            reason: match t.reason {
                TombstoneReason::Deregistered => DepartureReason::Deregistered,
                TombstoneReason::Reaped => DepartureReason::Reaped,
            },
            removed_revision: t.removed_revision,
        })
        .collect()
}

/// A blocking query: answers once the revision passes `revision`, or when `wait` runs out.
#[utoipa::path(
    get, path = "/v1/watch", tag = "inspection",
    params(
        ("revision" = Option<u64>, Query, description = "Answer once the state's revision is above this (default 0: at once)."),
        ("wait" = Option<String>, Query, description = "Longest wait, a duration like `30s` or `1500ms` (default 30s, at most 300s)."),
        ("view" = Option<String>, Query, description = "`state` (default): the whole state and the executors removed since `revision`. `routing`: the routing table as runs, as `GET /v1/routing?form=runs` answers it."),
    ),
    responses((status = 200, description = "The state at its current revision and the executors removed since `revision`; with `view=routing`, the routing table as runs.", body = WatchAnswer)),
)]
pub async fn watch(
    State(node): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<WatchAnswer>, HttpError> {
    let query = parse_query(raw.as_deref())?;
    let deadline = Instant::now() + query.wait;
    // Subscribe before the first check, so an apply between the check and the wait still wakes us.
    let mut applied = node.raft.metrics();
    loop {
        applied.borrow_and_update();
        let current = node.state.read(|a| a.state.revision());
        if current > query.revision || Instant::now() >= deadline || node.is_stepping_down() {
            break;
        }
        let stop_check = (Instant::now() + STOP_CHECK_INTERVAL).min(deadline);
        tokio::select! {
            changed = applied.changed() => {
                if changed.is_err() {
                    // Raft has shut down: answer with what we have.
                    break;
                }
            }
            _ = tokio::time::sleep_until(stop_check) => {}
        }
    }
    if query.view == WatchView::Routing {
        return Ok(Json(WatchAnswer::Routing(
            node.routing_runs.of(&node.state.current()),
        )));
    }
    let now_ms = node.clock.now_ms();
    let loads = node.published_loads.latest();
    let state = node.state.current();
    Ok(Json(WatchAnswer::State(WatchReply {
        state: state_view(&state, now_ms, loads.as_deref()),
        departed: departed_since(&state, query.revision),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_with_defaults_and_bounds() {
        assert_eq!(
            parse_query(None).unwrap(),
            WatchQuery {
                revision: 0,
                wait: DEFAULT_WATCH_WAIT,
                view: WatchView::State,
            }
        );
        assert_eq!(
            parse_query(Some("revision=42&wait=1500ms")).unwrap(),
            WatchQuery {
                revision: 42,
                wait: Duration::from_millis(1_500),
                view: WatchView::State,
            }
        );
        assert_eq!(
            parse_query(Some("revision=7&view=routing")).unwrap().view,
            WatchView::Routing
        );
        for bad in [
            "revision=-1",
            "revision=x",
            "wait=forever",
            "wait=301s",
            "since=3",
            "consistent=true",
            "view=runs",
            "view=",
        ] {
            let error = parse_query(Some(bad)).unwrap_err();
            assert_eq!(
                error.code(),
                leasehold_api::problem::ErrorCode::InvalidRequest,
                "{bad}"
            );
        }
        assert!(parse_query(Some("wait=300s")).is_ok());
    }
}
