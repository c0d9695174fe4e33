//! The sidecar's local API (PROTOCOL P16.1), served on `--local-listen` to the one service on
//! the same machine:
//! - `GET /v1/local/permits?applied=R&state=S&wait=D&prepare=true`: the long poll, and the
//!   service's acknowledgement of the answer it applied;
//! - `GET /v1/local/admit?key=K` or `?shard=N`, with `&role=primary|secondary|any` (P19.5): one
//!   permit for one piece of work;
//! - `POST /v1/local/prepared?shard=N&epoch=E`: the service prepared for a shard about to arrive
//!   (P17.1);
//! - `POST /v1/local/ready` with `{"shard": S, "epoch": E, "ready": true}`: the service's
//!   secondary of a shard is (or is no longer) ready to be promoted (P19.3);
//! - `POST /v1/local/stop`: the graceful stop (P3.7), as SIGTERM.
//!
//! Loopback or a unix socket only ([`LocalListen`]): the API has no TLS and no credential. Pages
//! in a browser on the machine are refused on every route (`local_guard`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_api::check_key_length;
use leasehold_api::http::{ApiJson, ApiQuery, BodyLimit, HttpError};
use leasehold_api::origin::HostPolicy;
use leasehold_api::problem::{ErrorCode, Problem, PROBLEM_CONTENT_TYPE};
use leasehold_api::serve::AnyListener;
use leasehold_api::wire::{
    LocalPermit, LocalPermits, LocalState, LOCAL_ADMIT_WINDOW_MS, MAX_LOCAL_PERMITS_WAIT_MS,
};
use serde::Deserialize;
use tokio::time::{sleep_until, Instant};
use tower_http::catch_panic::CatchPanicLayer;
use tracing::{info, warn};

use super::link::ServiceLink;
use super::local_guard::{refuse_pages, LocalGuard};
use super::service_copy::{answered, Ack, Answered, NotAcknowledged};
use crate::admission::{AdmitError, RoleWanted};
use crate::assignment::Layout;
use crate::handle::ExecutorHandle;
use crate::owner::{misdirected, OwnerOf};
use crate::shared::Shared;

/// Where the local API listens: a loopback address or a unix socket (P16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalListen {
    /// `127.0.0.1:PORT` or `[::1]:PORT`.
    Loopback(SocketAddr),
    /// `unix:/path`: the socket file is created at start (a stale socket left by an earlier run
    /// is replaced; any other file there is refused).
    Unix(PathBuf),
}

impl FromStr for LocalListen {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path, e.g. unix:/run/leasehold.sock".into());
            }
            return Ok(LocalListen::Unix(PathBuf::from(path)));
        }
        let address: SocketAddr = text.parse().map_err(|_| {
            format!("{text:?} is neither a loopback HOST:PORT (e.g. 127.0.0.1:7201) nor unix:/path")
        })?;
        if !address.ip().is_loopback() {
            return Err(format!(
                "{address} is not a loopback address: the local API has no TLS and no \
                 credential, so it serves only this machine (PROTOCOL P16.1)"
            ));
        }
        Ok(LocalListen::Loopback(address))
    }
}

/// A bound local listener and what it is called in logs.
#[derive(Debug)]
pub(crate) struct LocalListener {
    pub(crate) listener: AnyListener,
    pub(crate) description: String,
    /// The bound address of a loopback listener (its Host policy).
    pub(crate) tcp: Option<SocketAddr>,
}

/// Binds `listen`.
pub(crate) async fn bind_local(listen: &LocalListen) -> std::io::Result<LocalListener> {
    match listen {
        LocalListen::Loopback(address) => {
            let listener = leasehold_api::serve::bind(*address).await?;
            let bound = listener.local_addr()?;
            Ok(LocalListener {
                listener: listener.into(),
                description: bound.to_string(),
                tcp: Some(bound),
            })
        }
        LocalListen::Unix(path) => {
            remove_stale_socket(path)?;
            let listener = tokio::net::UnixListener::bind(path)?;
            Ok(LocalListener {
                listener: listener.into(),
                description: format!("unix:{}", path.display()),
                tcp: None,
            })
        }
    }
}

/// A socket file left by an earlier run is removed; anything else at the path is an error.
fn remove_stale_socket(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// What the local routes need.
#[derive(Debug, Clone)]
struct Local {
    shared: Arc<Shared>,
    link: Arc<ServiceLink>,
    handle: ExecutorHandle,
    /// Whether a poll acknowledged without a token yet (warned once).
    warned_tokenless: Arc<AtomicBool>,
}

/// Bound on a local request: the longest long poll, and a margin.
const LOCAL_REQUEST_TIMEOUT: Duration = Duration::from_millis(MAX_LOCAL_PERMITS_WAIT_MS + 5_000);

/// The local API's router. Every route refuses pages in a browser on this machine
/// (`local_guard`); `host_policy` is a loopback listener's `Host` rule (P13.6), a unix socket
/// takes none.
pub(crate) fn router(
    shared: Arc<Shared>,
    link: Arc<ServiceLink>,
    handle: ExecutorHandle,
    host_policy: Option<HostPolicy>,
) -> Router {
    let local = Local {
        shared,
        link,
        handle,
        warned_tokenless: Arc::new(AtomicBool::new(false)),
    };
    let routes = Router::new()
        .route("/v1/local/permits", get(permits))
        .route("/v1/local/admit", get(admit))
        .route("/v1/local/prepared", post(prepared))
        .route("/v1/local/ready", post(ready))
        .route("/v1/local/stop", post(stop))
        .with_state(local)
        .route_layer(middleware::from_fn_with_state(
            LOCAL_REQUEST_TIMEOUT,
            leasehold_api::http::request_timeout,
        ))
        // Only `POST /v1/local/ready` takes a body: one small object.
        .route_layer(middleware::from_fn_with_state(
            BodyLimit { max_bytes: 1024 },
            leasehold_api::http::limit_body,
        ))
        .fallback(leasehold_api::http::not_found)
        .method_not_allowed_fallback(leasehold_api::http::method_not_allowed);
    routes
        .layer(middleware::from_fn_with_state(
            LocalGuard::new(host_policy),
            refuse_pages,
        ))
        .layer(CatchPanicLayer::custom(leasehold_api::http::panic_response))
        .layer(middleware::from_fn(leasehold_api::http::request_id))
}

/// `?applied=R&state=S&token=T&wait=D&prepare=true`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PermitsQuery {
    applied: Option<u64>,
    state: Option<LocalState>,
    /// The token of the answer `applied` and `state` name (P16.1).
    token: Option<String>,
    wait: Option<String>,
    /// The service prepares for shards about to arrive (P17.1).
    prepare: Option<bool>,
}

/// A `wait` as the local API takes it: whole milliseconds (`500ms`) or seconds (`5s`, `1.5s`,
/// to the millisecond). `None` for anything else.
fn parse_duration(text: &str) -> Option<Duration> {
    if let Some(millis) = text.strip_suffix("ms") {
        return millis.parse::<u64>().ok().map(Duration::from_millis);
    }
    let seconds = text.strip_suffix('s')?;
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
    if whole.is_empty() || fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let fraction_ms: u64 = format!("{fraction:0<3}").parse().ok()?;
    whole
        .checked_mul(1_000)
        .and_then(|ms| ms.checked_add(fraction_ms))
        .map(Duration::from_millis)
}

/// The `wait` of a poll: a duration such as `500ms` or `5s`, at most the longest long poll.
fn parse_wait(wait: Option<&str>) -> Result<Duration, HttpError> {
    let Some(text) = wait else {
        return Ok(Duration::ZERO);
    };
    let wait = parse_duration(text).ok_or_else(|| {
        HttpError::invalid(format!(
            "wait={text:?} is not a duration such as 500ms, 5s or 1.5s"
        ))
    })?;
    if wait > Duration::from_millis(MAX_LOCAL_PERMITS_WAIT_MS) {
        return Err(HttpError::invalid(format!(
            "wait={text} is longer than the longest long poll, {MAX_LOCAL_PERMITS_WAIT_MS} ms"
        )));
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p16_1_waits_are_milliseconds_or_seconds() {
        let ms = Duration::from_millis;
        for (text, expected) in [
            ("0s", Some(ms(0))),
            ("500ms", Some(ms(500))),
            ("5s", Some(ms(5_000))),
            ("1.5s", Some(ms(1_500))),
            ("0.025s", Some(ms(25))),
            ("60s", Some(ms(60_000))),
            ("1.2345s", None),
            ("s", None),
            (".5s", None),
            ("5", None),
            ("5m", None),
            ("-1s", None),
            ("1.5ms", None),
            ("soon", None),
            ("", None),
        ] {
            assert_eq!(parse_duration(text), expected, "{text:?}");
        }
    }

    /// The tokenless acknowledgement's warning is said on the first such poll only.
    #[test]
    fn p16_1_a_warning_behind_a_flag_is_said_once() {
        let said = AtomicBool::new(false);
        assert!(first_time(&said));
        assert!(!first_time(&said));
        assert!(!first_time(&said));
    }

    /// A token is exactly what answers carry, 32 hex digits; nothing else parses to one.
    #[test]
    fn p16_2_a_token_is_32_hex_digits() {
        let token = "0123456789abcdef0123456789ABCDEF";
        assert_eq!(parse_token(token), Some(0x0123456789abcdef0123456789abcdef));
        for text in [
            &token[1..],
            &format!("{token}0"),
            &format!("+{}", &token[1..]),
            "0123456789abcdef0123456789abcdeg",
            "",
        ] {
            assert_eq!(parse_token(text), None, "{text:?}");
        }
    }

    /// A local request is bounded, and the bound lets the longest long poll be answered.
    #[test]
    fn p16_1_a_local_request_outlives_the_longest_long_poll_and_no_more() {
        let longest_poll = Duration::from_millis(MAX_LOCAL_PERMITS_WAIT_MS);
        assert!(LOCAL_REQUEST_TIMEOUT > longest_poll);
        assert!(LOCAL_REQUEST_TIMEOUT <= longest_poll + Duration::from_secs(10));
    }

    /// P16.1: `unix:/path` replaces a socket an earlier run left, and refuses any other file
    /// there (which it keeps); an absent path is fine, and a path that cannot be looked at is an
    /// error.
    #[test]
    fn p16_1_only_a_stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent.sock");
        remove_stale_socket(&absent).unwrap();

        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        remove_stale_socket(&stale).unwrap();
        assert!(!stale.exists(), "the stale socket is removed");

        let file = dir.path().join("data.txt");
        std::fs::write(&file, "keep me").unwrap();
        let refused = remove_stale_socket(&file).unwrap_err();
        assert_eq!(
            refused.kind(),
            std::io::ErrorKind::AlreadyExists,
            "{refused}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

        let under_a_file = file.join("child.sock");
        let refused = remove_stale_socket(&under_a_file).unwrap_err();
        assert_ne!(refused.kind(), std::io::ErrorKind::NotFound, "{refused}");
    }
}

/// A token as answers carry it: 32 hex digits. `None` for anything else, which no answer
/// carried.
fn parse_token(text: &str) -> Option<u128> {
    if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

/// The long poll (P16.1): answered at once unless the query names the current revision and state
/// (and, when it carries a token, acknowledges with it); then when either changes, when `wait`
/// passed, or when half the time left on the poller's copy passed.
async fn permits(
    State(local): State<Local>,
    ApiQuery(query): ApiQuery<PermitsQuery>,
) -> Result<Json<LocalPermits>, HttpError> {
    let wait = parse_wait(query.wait.as_deref())?;
    let arrived = Instant::now();
    let mut known = query
        .applied
        .zip(query.state)
        .map(|(revision, state)| Answered { revision, state });
    let mut chain = None;
    match (known, query.token.as_deref()) {
        (Some(answered), Some(token)) => {
            let acknowledged = parse_token(token)
                .ok_or(NotAcknowledged::UnknownToken)
                .and_then(|token| local.link.acknowledge(Ack { answered, token }));
            match acknowledged {
                Ok(acknowledged) => chain = Some(acknowledged),
                Err(refused) => {
                    info!(
                        applied = answered.revision,
                        state = answered.state.as_str(),
                        "a poll's acknowledgement did not count ({refused}): answered at once \
                         with a new token (P16.1)"
                    );
                    known = None;
                }
            }
        }
        (Some(answered), None) => {
            if first_time(&local.warned_tokenless) {
                warn!(
                    applied = answered.revision,
                    state = answered.state.as_str(),
                    "a poll acknowledged an answer without its token, which counts for nothing \
                     (P16.1): revokes wait for the copies it was given to run out; echo each \
                     answer's token as token= (said once)"
                );
            }
        }
        (None, Some(_)) => {
            return Err(HttpError::invalid(
                "token= acknowledges an answer: give it with that answer's applied= and state=",
            ))
        }
        (None, None) => {}
    }
    if query.prepare == Some(true) {
        local.link.opt_in_prepares();
    }
    let wait_until = arrived + wait;
    // The poller's copy counts from its poll's send, before the answer: count from the arrival
    // (no earlier than the send), not the answer, or a poll held long leaves the next answer
    // past the copy's end.
    let refresh_at = local
        .link
        .poller_copy_end(chain)
        .map(|end| arrived + end.saturating_duration_since(arrived) / 2);
    let answer_by = refresh_at.map_or(wait_until, |refresh| refresh.min(wait_until));
    let mut views = local.shared.subscribe_assignment();
    let mut asked = local.link.changes();
    loop {
        let now = Instant::now();
        let current = answered(&views.borrow_and_update(), now);
        asked.borrow_and_update();
        if known != Some(current) || now >= answer_by || local.link.prepares_untold() {
            break;
        }
        // A lapse changes the state at the lease's expiry; the lapse watcher republishes the
        // view then, which wakes this.
        tokio::select! {
            changed = views.changed() => if changed.is_err() { break },
            changed = asked.changed() => if changed.is_err() { break },
            () = sleep_until(answer_by) => {}
        }
    }
    Ok(Json(local.link.answer_poll(
        |now| local.shared.view_at(now),
        chain,
        arrived,
    )))
}

/// Whether `said` is set for the first time: a warning behind it is said once a run.
fn first_time(said: &AtomicBool) -> bool {
    !said.swap(true, Ordering::Relaxed)
}

/// `?key=K` or `?shard=N`, and `&role=primary|secondary|any` (P19.5).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmitQuery {
    key: Option<String>,
    shard: Option<u32>,
    /// The generation of the layout `shard` is numbered in (PROTOCOL §20).
    generation: Option<u64>,
    /// Parsed here, not by serde, so a bad value is refused in the words of the others.
    role: Option<String>,
}

/// What a permit is asked for.
#[derive(Debug, Clone, Copy)]
enum Asked<'a> {
    /// A key, mapped by the sidecar's own layout.
    Key(&'a str),
    /// A shard number, in the layout of `generation` (none named: generation 0).
    Shard { shard: u32, generation: Option<u64> },
}

/// One permit (P16.1): the shard's epoch and a window of at most [`LOCAL_ADMIT_WINDOW_MS`] to
/// start the work in; `421` naming the owner; `503` when not admitting. `role=` (P19.5) asks
/// for the primary (the default, as before replicas), a secondary, or either; a secondary's
/// permit says `role: secondary`, and the primary's says no role. Once the namespace resharded
/// (§20), a permit by shard number names the generation its number belongs to: a number of
/// another layout covers other keys, so it is answered `421` with the layout now.
async fn admit(
    State(local): State<Local>,
    ApiQuery(query): ApiQuery<AdmitQuery>,
) -> Result<Json<LocalPermit>, Response> {
    let invalid = |detail: String| HttpError::invalid(detail).into_response();
    let role = match query.role.as_deref() {
        None => RoleWanted::Primary,
        Some(text) => text
            .parse::<RoleWanted>()
            .map_err(|error| invalid(error.to_string()))?,
    };
    let asked = match (&query.key, query.shard, query.generation) {
        (Some(key), None, None) => {
            check_key_length(key).map_err(invalid)?;
            Asked::Key(key)
        }
        (Some(_), None, Some(_)) => {
            return Err(invalid(
                "generation= goes with shard=: a key is mapped by the sidecar's own layout".into(),
            ))
        }
        (None, Some(shard), generation) => Asked::Shard { shard, generation },
        _ => return Err(invalid("give exactly one of key= and shard=".into())),
    };
    let shared = &local.shared;
    // The permit is told under the link's lock, in the same section as the admission decision:
    // a revoke applied after it finds the shard told and waits for the window (P16.2). The
    // layout, the lease and the id are read in the one section of the sidecar's state that
    // admits.
    let granted = local.link.update(|copy, now| {
        let admitted = shared.read_core(|core, admitted_at| {
            let layout = core.layout();
            let permit = match asked {
                Asked::Key(key) => core.admit_key_as(key.as_bytes(), role, admitted_at),
                Asked::Shard { shard, generation } => {
                    in_layout(shard, generation, layout)?;
                    core.admit_as(shard, role, admitted_at)
                }
            };
            let executor_id = core.executor_id().unwrap_or_default().to_owned();
            permit
                .map(|permit| (permit, layout, core.lease().remaining(now), executor_id))
                .map_err(LocalAdmitError::Admit)
        });
        match admitted {
            Ok((permit, layout, lease_remaining, executor_id)) => {
                // Never past the lease: a secondary is admitted only while it is live (P19.1), as
                // the primary is.
                let window = lease_remaining.min(Duration::from_millis(LOCAL_ADMIT_WINDOW_MS));
                let lease_ttl_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
                let events = copy.permit(
                    &executor_id,
                    layout,
                    permit.shard,
                    permit.epoch,
                    permit.role,
                    now + window,
                    now,
                );
                let permit = LocalPermit {
                    shard: permit.shard,
                    epoch: permit.epoch,
                    lease_ttl_ms,
                    role: permit.role,
                };
                (Ok(permit), events)
            }
            Err(error) => (Err(error), Vec::new()),
        }
    });
    let shard = match (granted, asked) {
        (Ok(permit), _) => return Ok(Json(permit)),
        (Err(LocalAdmitError::Admit(AdmitError::NotReady)), _) => return Err(not_admitting()),
        (Err(LocalAdmitError::Layout(refused)), _) => return Err(refused.into_response()),
        (Err(LocalAdmitError::Admit(AdmitError::NotOwner)), Asked::Key(key)) => {
            match shared.view_at(Instant::now()).layout().shard_count {
                0 => return Err(not_admitting()),
                count => leasehold_api::shard_for_key(
                    key.as_bytes(),
                    std::num::NonZeroU32::new(count).unwrap_or(std::num::NonZeroU32::MIN),
                ),
            }
        }
        (Err(LocalAdmitError::Admit(AdmitError::NotOwner)), Asked::Shard { shard, .. }) => shard,
    };
    if role == RoleWanted::Secondary && shared.admit_as(shard, RoleWanted::Primary).is_ok() {
        // The sidecar is the shard's primary: the owner the routing table names is itself.
        return Err(HttpError::new(
            ErrorCode::Conflict,
            format!(
                "this sidecar holds shard {shard} as its primary, not as a secondary: ask with \
                 role=primary or role=any"
            ),
        )
        .into_response());
    }
    let of = match &query.key {
        Some(key) => OwnerOf::Key(key),
        None => OwnerOf::Shard(shard),
    };
    Err(misdirected(&local.handle, of).await)
}

/// Why the sidecar gave no permit.
#[derive(Debug)]
enum LocalAdmitError {
    Admit(AdmitError),
    Layout(LayoutRefusal),
}

/// A shard number asked for outside the sidecar's layout (§20).
#[derive(Debug)]
enum LayoutRefusal {
    /// The namespace resharded and the ask named no generation: the number's keys are unknown.
    GenerationNotNamed { layout: Layout },
    /// Numbered in another layout: it covers other keys than the same number now.
    OtherGeneration { asked: u64, layout: Layout },
    /// Beyond the layout's count.
    OutOfRange { shard: u32, shard_count: u32 },
}

impl From<LayoutRefusal> for LocalAdmitError {
    fn from(refusal: LayoutRefusal) -> Self {
        Self::Layout(refusal)
    }
}

impl IntoResponse for LayoutRefusal {
    fn into_response(self) -> Response {
        let now = |layout: Layout| {
            format!(
                "generation {} of {} shards",
                layout.generation, layout.shard_count
            )
        };
        match self {
            Self::GenerationNotNamed { layout } => HttpError::invalid(format!(
                "the namespace has resharded (now {}): a permit by shard number names the \
                 generation of the permits answer it was mapped with, generation=G, or asks by \
                 key=",
                now(layout)
            ))
            .into_response(),
            Self::OtherGeneration { asked, layout } => {
                let mut problem = Problem::new(
                    ErrorCode::Conflict,
                    format!(
                        "shard numbers of generation {asked} are not this sidecar's layout (now \
                         {}): apply the newest permits answer and map keys by its shard_count",
                        now(layout)
                    ),
                );
                problem.status = StatusCode::MISDIRECTED_REQUEST.as_u16();
                let body = serde_json::to_vec(&problem).unwrap_or_default();
                (
                    StatusCode::MISDIRECTED_REQUEST,
                    [(CONTENT_TYPE, PROBLEM_CONTENT_TYPE)],
                    body,
                )
                    .into_response()
            }
            Self::OutOfRange { shard, shard_count } => HttpError::invalid(format!(
                "shard {shard} is out of range: the cluster has {shard_count} shards"
            ))
            .into_response(),
        }
    }
}

/// Checks that `shard`, asked for in the layout of `generation`, is one of `layout`'s.
fn in_layout(shard: u32, generation: Option<u64>, layout: Layout) -> Result<(), LayoutRefusal> {
    match generation {
        None if layout.generation > 0 => {
            return Err(LayoutRefusal::GenerationNotNamed { layout });
        }
        Some(asked) if asked != layout.generation => {
            return Err(LayoutRefusal::OtherGeneration { asked, layout });
        }
        _ => {}
    }
    if layout.shard_count > 0 && shard >= layout.shard_count {
        return Err(LayoutRefusal::OutOfRange {
            shard,
            shard_count: layout.shard_count,
        });
    }
    Ok(())
}

fn not_admitting() -> Response {
    HttpError::new(
        ErrorCode::ShardingNotReady,
        "the sidecar is not admitting work right now (lease lapsed, not registered, or stopping)",
    )
    .into_response()
}

/// `?shard=N&epoch=E`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreparedQuery {
    shard: u32,
    epoch: u64,
}

/// The service prepared for a shard about to arrive (P17.1): `204`, or `409` when no prepare
/// waits for that shard at that epoch (it finished, gave up, or was never asked).
async fn prepared(
    State(local): State<Local>,
    ApiQuery(query): ApiQuery<PreparedQuery>,
) -> Result<StatusCode, HttpError> {
    local
        .link
        .service_prepared(query.shard, query.epoch)
        .map_err(|_| {
            HttpError::new(
                ErrorCode::Conflict,
                format!(
                    "no prepare waits for shard {} at epoch {}: it finished, its wait ran out,                      or it was never asked",
                    query.shard, query.epoch
                ),
            )
        })?;
    Ok(StatusCode::NO_CONTENT)
}

/// `{"shard": S, "epoch": E, "ready": true}`: the whole body of `POST /v1/local/ready`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadyBody {
    shard: u32,
    /// The epoch the service saw the secondary at (`secondaries` in the permits answers).
    epoch: u64,
    ready: bool,
}

/// The service's secondary of a shard is (or is no longer) ready to be promoted (P19.3): `204`,
/// and the sidecar's renewals say so from the next one on; `409` when `ready` is true and the
/// sidecar does not hold the shard as a secondary at that epoch (it was dropped, promoted, or
/// its epoch moved on: say it again at the epoch the permits answers now show), which changes
/// nothing. Not ready is always taken.
async fn ready(
    State(local): State<Local>,
    ApiJson(body): ApiJson<ReadyBody>,
) -> Result<StatusCode, HttpError> {
    if let Some(count) = local.shared.view_at(Instant::now()).shard_count {
        if body.shard >= count {
            return Err(HttpError::invalid(format!(
                "shard {} is out of range: the cluster has {count} shards",
                body.shard
            )));
        }
    }
    let changed = local
        .shared
        .set_secondary_ready(body.shard, body.epoch, body.ready)
        .map_err(|refused| {
            HttpError::new(
                ErrorCode::Conflict,
                format!("{refused}: nothing changed (PROTOCOL P19.3)"),
            )
        })?;
    // Said once per change: a service may repeat itself.
    if changed {
        info!(
            shard = body.shard,
            epoch = body.epoch,
            "the service says its secondary is {} (P19.3)",
            if body.ready { "ready" } else { "not ready" }
        );
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The service asks for the graceful stop (P3.7); answered at once, the stop runs on.
async fn stop(State(local): State<Local>) -> StatusCode {
    tracing::info!("the service asked for the graceful stop (P3.7)");
    let handle = local.handle.clone();
    tokio::spawn(async move {
        handle.shutdown().await;
    });
    StatusCode::ACCEPTED
}
