//! `GET /v1/watch?revision=N&wait=30s`: a blocking query, like Consul's. The reply comes as soon
//! as this replica's applied state has a revision above `N` (or at once if it already has), or
//! with the unchanged state when `wait` runs out. Served by any replica from its applied state;
//! a watcher follows changes by sending the revision it last saw.
//!
//! The wake-up comes from openraft's metrics channel, which moves whenever an entry is applied;
//! the state handle is updated before openraft reports the entry applied.
//!
//! Bounded (P13.6): one replica holds at most [`MAX_WATCH_WAITERS`] queries at once (past that,
//! `503 unavailable`, which clients retry), and the waiters that wake at one revision with one
//! query, as the followers of one stream do, share one serialized answer ([`WatchHub`]) instead
//! of serializing the state once each.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bytes::Bytes;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{DepartedExecutor, DepartureReason, WatchAnswer, WatchReply};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::HttpError;
use crate::lease::{LeaseState, TombstoneReason};
use crate::service::views::{space_named, state_view, Views};

/// Most blocking queries one replica holds at once: each holds a connection and a task, and
/// each wake-up answers each of them.
pub const MAX_WATCH_WAITERS: usize = 1_024;
/// How long one serialized answer serves the waiters that ask for it: the state view carries
/// lease times, which it must not show older than this.
const SHARED_ANSWER_AGE: Duration = Duration::from_secs(1);

/// The watch's bounds: the waiters' slots and the answer they last shared.
#[derive(Debug)]
pub struct WatchHub {
    waiters: Arc<Semaphore>,
    last: Mutex<Option<SharedAnswer>>,
}

#[derive(Debug)]
struct SharedAnswer {
    key: AnswerKey,
    built: Instant,
    body: Bytes,
}

/// What makes two waiters' answers the same: the view, the namespace, the state's revision and
/// the revision they asked after (which decides the executors departed since).
#[derive(Debug, Clone, PartialEq, Eq)]
struct AnswerKey {
    view: WatchView,
    namespace: String,
    revision: u64,
    since: u64,
}

impl Default for WatchHub {
    fn default() -> Self {
        Self::new(MAX_WATCH_WAITERS)
    }
}

impl WatchHub {
    pub fn new(max_waiters: usize) -> Self {
        Self {
            waiters: Arc::new(Semaphore::new(max_waiters)),
            last: Mutex::new(None),
        }
    }

    /// A waiter's slot, held until its answer is sent; `503 unavailable` when all are taken.
    fn admit(&self) -> Result<OwnedSemaphorePermit, HttpError> {
        self.waiters.clone().try_acquire_owned().map_err(|_| {
            HttpError::new(
                ErrorCode::Unavailable,
                "this replica holds as many watches as it serves; retry, or ask another replica",
            )
        })
    }

    /// The answer for `key`: the one last built if it is for the same key and fresh, else
    /// `build`'s, kept for the next waiter.
    async fn answer(
        &self,
        key: AnswerKey,
        build: impl FnOnce() -> Result<Bytes, HttpError>,
    ) -> Result<Bytes, HttpError> {
        let mut last = self.last.lock().await;
        if let Some(shared) = last.as_ref() {
            if shared.key == key && shared.built.elapsed() < SHARED_ANSWER_AGE {
                return Ok(shared.body.clone());
            }
        }
        let body = crate::handles::cpu_bound::run(build)?;
        *last = Some(SharedAnswer {
            key,
            built: Instant::now(),
            body: body.clone(),
        });
        Ok(body)
    }
}

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
    /// The namespace watched (P18.1), `default` unless named.
    namespace: String,
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
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.to_owned(),
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
            "namespace" => {
                // Names are DNS labels: nothing in one is percent-encoded.
                leasehold_api::wire::check_namespace_name(value)
                    .map_err(|error| HttpError::invalid(error.to_string()))?;
                value.clone_into(&mut query.namespace);
            }
            other => {
                return Err(HttpError::invalid(format!(
                    "unknown query parameter {other:?} (expected revision, wait, view, namespace)"
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
        ("namespace" = Option<String>, Query, description = "The namespace watched (P18.1): its state or routing table; default `default`.", pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", max_length = 63, min_length = 1),
    ),
    responses(
        (status = 200, description = "The state at its current revision and the executors removed since `revision`; with `view=routing`, the routing table as runs.", body = WatchAnswer),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn watch(
    State(views): State<Views>,
    Extension(hub): Extension<Arc<WatchHub>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HttpError> {
    let query = parse_query(raw.as_deref())?;
    // A namespace that does not exist is refused before the wait, not after it.
    views
        .state()
        .read(|applied| space_named(&applied.state, &query.namespace).map(drop))?;
    let _slot = hub.admit()?;
    let deadline = Instant::now() + query.wait;
    // Subscribe before the first check, so an apply between the check and the wait still wakes us.
    let mut applied = views.applied_changes();
    loop {
        applied.borrow_and_update();
        let current = views.state().read(|a| a.state.revision());
        if current > query.revision || Instant::now() >= deadline || views.is_stepping_down() {
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
    let state = views.state().current();
    let space = space_named(&state, &query.namespace)?;
    let key = AnswerKey {
        view: query.view,
        namespace: query.namespace.clone(),
        revision: state.revision(),
        since: query.revision,
    };
    let body = hub
        .answer(key, || {
            let answer = match query.view {
                WatchView::Routing => WatchAnswer::Routing(views.routing_runs_of(&state, space)),
                WatchView::State => {
                    let known = views.leader_knows();
                    WatchAnswer::State(WatchReply {
                        state: state_view(&state, space, views.now_ms(), &known),
                        departed: departed_since(&state, query.revision),
                    })
                }
            };
            serde_json::to_vec(&answer)
                .map(Bytes::from)
                .map_err(|error| HttpError::internal("encoding a watch answer", error))
        })
        .await?;
    Ok(([(CONTENT_TYPE, "application/json")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(revision: u64) -> AnswerKey {
        AnswerKey {
            view: WatchView::State,
            namespace: "default".into(),
            revision,
            since: 3,
        }
    }

    /// P13.6: the waiters that wake at one revision with one query share one serialization;
    /// another revision builds anew.
    #[tokio::test]
    async fn p13_6_waiters_at_one_revision_share_one_answer() {
        let hub = WatchHub::new(4);
        let builds = std::sync::atomic::AtomicUsize::new(0);
        let build = || {
            builds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Bytes::from_static(b"{}"))
        };
        for _ in 0..3 {
            hub.answer(key(7), build).await.unwrap();
        }
        assert_eq!(builds.load(std::sync::atomic::Ordering::Relaxed), 1);
        hub.answer(key(8), build).await.unwrap();
        assert_eq!(builds.load(std::sync::atomic::Ordering::Relaxed), 2);
        // P18.1: another namespace's watchers are answered with their own namespace.
        let other = AnswerKey {
            namespace: "orders".into(),
            ..key(8)
        };
        hub.answer(other, build).await.unwrap();
        assert_eq!(builds.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    /// P13.6: past the bound a watch is refused (503, retried), and a slot frees when its
    /// waiter is answered.
    #[test]
    fn p13_6_watch_waiters_are_bounded() {
        let hub = WatchHub::new(2);
        let first = hub.admit().unwrap();
        let _second = hub.admit().unwrap();
        let refused = hub.admit().unwrap_err();
        assert_eq!(refused.code(), ErrorCode::Unavailable);
        drop(first);
        assert!(hub.admit().is_ok());
    }

    #[test]
    fn queries_parse_with_defaults_and_bounds() {
        assert_eq!(
            parse_query(None).unwrap(),
            WatchQuery {
                revision: 0,
                wait: DEFAULT_WATCH_WAIT,
                view: WatchView::State,
                namespace: "default".into(),
            }
        );
        assert_eq!(
            parse_query(Some("revision=42&wait=1500ms")).unwrap(),
            WatchQuery {
                revision: 42,
                wait: Duration::from_millis(1_500),
                view: WatchView::State,
                namespace: "default".into(),
            }
        );
        assert_eq!(
            parse_query(Some("view=routing&namespace=orders"))
                .unwrap()
                .namespace,
            "orders"
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
            "namespace=",
            "namespace=Orders",
            "namespace=a%20b",
        ] {
            let error = parse_query(Some(bad)).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidRequest, "{bad}");
        }
        assert!(parse_query(Some("wait=300s")).is_ok());
    }
}
