//! Typed HTTP client for the manager API: leader following and P7.1 patience.
//!
//! Every call goes through one retry loop (the private `Client::send`). It decides from the
//! shape of each failure whether retrying is safe:
//!
//! | failure | any call | idempotent call (P7.2) |
//! |---|---|---|
//! | connection never made (refused, DNS, connect timeout) | retry, next endpoint | retry |
//! | `not_leader`, `no_leader`, `sharding_not_ready` (P7.1) | retry | retry |
//! | outcome unknown (timeout or reset after sending, `timeout`/`unavailable`, bare 502–504) | return | retry |
//! | anything else | return | return |
//!
//! Retries stop once [`ClientConfig::patience`] is spent; the last error is then wrapped in
//! [`ClientError::PatienceExhausted`]. No attempt starts after the deadline, so a call takes at
//! most `patience + request_timeout`. Dropping the future cancels the call.
//!
//! A replica that did not answer (its connection failed, or the request got no reply in time) is
//! passed over for [`SILENT_REPLICA_REST`]: neither the endpoint order nor a leader another
//! replica names sends the next attempts there while another replica is left to ask (P7.3). A
//! replica cut off from the client may still be named leader by followers that have not noticed
//! yet, and every attempt it holds costs the caller a whole attempt's bound.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;
use tracing::debug;

use crate::problem::{
    ErrorCode, Problem, CLUSTER_VERSION_HEADER, LEADER_HEADER, REQUEST_ID_HEADER,
};
use crate::tls::TlsConfig;
use crate::wire::{
    AddNodeRequest, AuditRecordView, ClusterInfo, CreateNamespaceRequest, Credential, ExecutorView,
    Grant, InitReply, KeyRoute, MaintenanceRequest, MaintenanceView, MoveShardRequest,
    NamespaceDeleted, NamespaceView, PinShardRequest, PlanPreview, RegisterRequest, ReleaseRequest,
    RenewRequest, ReshardReply, ReshardRequest, RoutingAnswer, RoutingRuns, RoutingTable,
    SafeToStop, SetNamespaceRequest, ShardView, SnapshotReply, StateView, WatchReply,
    COMPACT_SHARDS_SCHEMA, FIRST_RELEASE_SCHEMA, UNCHANGED_SET_SCHEMA,
};

mod admin_calls;
mod error;
mod lease_calls;
mod read_calls;

pub use error::{error_chain, ClientError};

/// Upper bound on establishing a TCP connection. Kept well below the request timeout so a
/// partitioned replica (packets dropped, no RST) costs about a second of the patience budget
/// before the next endpoint is tried, not the whole request timeout.
const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(1);

/// How long a replica that did not answer is passed over while another is left to ask (P7.3).
pub const SILENT_REPLICA_REST: Duration = Duration::from_secs(2);

/// Largest reply body read into memory; bounds what a confused or hostile peer can make us
/// allocate. Far above the biggest legitimate reply (`/v1/state` of a large cluster).
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// How much of an unexpected body is kept in [`ClientError::Unexpected`]; enough to recognise
/// a proxy's error page, short enough to log.
const MAX_ERROR_BODY_CHARS: usize = 1024;

/// What the client accepts back: JSON on success, problem+json on error (§9).
/// Longest `Retry-After` followed: a replica cannot park a caller for longer than this.
const MAX_RETRY_AFTER_SECS: u64 = 60;

const ACCEPT_VALUE: &str = "application/json, application/problem+json";

/// What an operator's removal of an executor did ([`Client::remove_executor`], P5.5).
#[derive(Debug, Clone, PartialEq)]
pub enum Removal {
    /// Deregistered, now or before.
    Removed,
    /// It still held shards: it is draining, and they move by handoff (P5.2); the executor as
    /// it is.
    Draining(Box<ExecutorView>),
}

/// Timing knobs. The defaults are PROTOCOL §11's client patience.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// Bound on one attempt, from connecting to reading the whole reply.
    pub request_timeout: Duration,
    /// Total time spent retrying refusals and re-resolving the leader before giving up (P7.1).
    pub patience: Duration,
    /// Pause between retries that cannot be served elsewhere at once (P7.1: 250 ms).
    pub retry_interval: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            request_timeout: Duration::from_secs(5),
            patience: Duration::from_secs(8),
            retry_interval: Duration::from_millis(250),
        }
    }
}

/// Whether repeating a request whose outcome is unknown is harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idempotency {
    /// Reads, and writes carrying their own idempotency key (register by incarnation, renew,
    /// release, deregister: P7.2).
    Safe,
    /// A repeat could act twice; only P7.1 refusals and unsent requests are retried.
    Unsafe,
}

/// One failed attempt, classified by what a retry could do.
#[derive(Debug)]
enum Failure {
    /// Nothing reached the server; any request may go elsewhere at once.
    NotSent(ClientError),
    /// A P7.1 refusal: nothing was applied.
    Refused(ErrorCode, ClientError),
    /// `429 rate_limited`: nothing was applied; the same replica takes it after `retry_after`.
    RateLimited {
        error: ClientError,
        retry_after: Duration,
    },
    /// The server may have applied the request; only idempotent requests may repeat it.
    Unknown(ClientError),
    /// Repeating cannot help.
    Final(ClientError),
}

/// A failed attempt the retry loop goes on from.
#[derive(Debug)]
struct Retry {
    error: ClientError,
    /// Moving to another replica: may be tried at once (within the quick attempts' bound).
    quick: bool,
    /// The pause a rate-limiting replica asked for; the usual interval otherwise.
    asked_pause: Option<Duration>,
}

impl Failure {
    fn into_error(self) -> ClientError {
        match self {
            Failure::NotSent(e)
            | Failure::Refused(_, e)
            | Failure::RateLimited { error: e, .. }
            | Failure::Unknown(e)
            | Failure::Final(e) => e,
        }
    }
}

/// A 2xx reply.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    body: Vec<u8>,
}

/// Where the next request goes.
#[derive(Debug, Default)]
struct Route {
    /// Last leader named by a server (§9 header or problem body); tried first.
    leader: Option<String>,
    /// Index into the configured endpoints of the one to try when no leader is known.
    cursor: usize,
    /// Replicas that did not answer their last attempt, and until when each is passed over;
    /// at most one entry per endpoint and one for a named leader outside them.
    silent: Vec<(String, Instant)>,
}

impl Route {
    fn is_resting(&self, base: &str, now: Instant) -> bool {
        self.silent
            .iter()
            .any(|(silent, until)| silent == base && now < *until)
    }

    /// `base` did not answer at `now`: pass it over until `now + SILENT_REPLICA_REST`.
    fn went_silent(&mut self, base: &str, now: Instant, most: usize) {
        self.silent
            .retain(|(silent, until)| silent != base && now < *until);
        if self.silent.len() >= most {
            // The one passed over longest is the first let back.
            self.silent.remove(0);
        }
        self.silent
            .push((base.to_owned(), now + SILENT_REPLICA_REST));
    }

    fn answered(&mut self, base: &str) {
        self.silent.retain(|(silent, _)| silent != base);
    }
}

#[derive(Debug)]
struct Inner {
    /// One connection pool for every call and clone (STYLE: no client per RPC).
    http: reqwest::Client,
    /// Normalised base URLs, no trailing slash.
    endpoints: Vec<String>,
    config: ClientConfig,
    /// Shared by clones so one discovered leader serves every caller.
    route: Mutex<Route>,
    /// Per-client random-ish prefix so request ids from two processes do not collide in logs.
    request_id_prefix: String,
    next_request_id: AtomicU64,
    /// The cluster version the last reply stated ([`CLUSTER_VERSION_HEADER`]).
    cluster_version: AtomicU32,
}

/// The one HTTP client builder of every Leasehold process: no proxy (managers and executors
/// talk directly: a proxy would turn "connection refused", safe to retry anywhere, into an opaque
/// 502 and hide which replica answered), no redirects followed (P13.6), and with `tls` the
/// process's certificate and only the cluster's CA trusted (P13.2). Timeouts are the caller's.
pub fn http_client_builder(tls: Option<&TlsConfig>) -> reqwest::ClientBuilder {
    let builder = match tls {
        // The peer's certificate on every response, so a caller can check who answered.
        Some(tls) => tls.reqwest_builder().tls_info(true),
        None => reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()),
    };
    builder.no_proxy()
}

/// Async client for the manager API. Cloning is cheap and clones share the connection pool and
/// the leader hint.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

impl Client {
    /// A client with the default [`ClientConfig`].
    pub fn new(endpoints: Vec<String>) -> Result<Self, ClientError> {
        Self::with_config(endpoints, ClientConfig::default())
    }

    /// A client for the given manager base URLs (`http(s)://host:port`).
    pub fn with_config(endpoints: Vec<String>, config: ClientConfig) -> Result<Self, ClientError> {
        Self::with_tls(endpoints, config, None)
    }

    /// A client that, with `tls`, presents the process's certificate and trusts only the
    /// cluster's CA (P13.2); every endpoint must then be `https://`.
    pub fn with_tls(
        endpoints: Vec<String>,
        config: ClientConfig,
        tls: Option<&TlsConfig>,
    ) -> Result<Self, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::InvalidEndpoint(
                "no endpoints given".to_owned(),
            ));
        }
        let endpoints = endpoints
            .iter()
            .map(|raw| normalize_endpoint(raw))
            .collect::<Result<Vec<_>, _>>()?;
        if config.request_timeout.is_zero() {
            return Err(ClientError::InvalidConfig(
                "request_timeout must be positive".to_owned(),
            ));
        }
        if config.retry_interval.is_zero() {
            // A zero pause would turn the retry loop into a busy loop for the whole patience.
            return Err(ClientError::InvalidConfig(
                "retry_interval must be positive".to_owned(),
            ));
        }
        if tls.is_some() {
            if let Some(plain) = endpoints.iter().find(|e| !e.starts_with("https://")) {
                return Err(ClientError::InvalidEndpoint(format!(
                    "{plain}: with TLS every endpoint is https:// (P13.2)"
                )));
            }
        }
        let http = http_client_builder(tls)
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout.min(CONNECT_TIMEOUT_MAX))
            .build()
            .map_err(|e| ClientError::InvalidConfig(format!("http client: {}", error_chain(&e))))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                endpoints,
                config,
                route: Mutex::new(Route::default()),
                cluster_version: AtomicU32::new(FIRST_RELEASE_SCHEMA),
                request_id_prefix: request_id_prefix(),
                next_request_id: AtomicU64::new(1),
            }),
        })
    }

    /// The configured endpoints, normalised.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The configuration in force.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The leader address the next request will try first, if one is known.
    pub fn leader_hint(&self) -> Option<String> {
        self.route().leader.clone()
    }

    async fn get_typed<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.send_decoded(Method::GET, path, None, Idempotency::Safe)
            .await
    }

    /// [`Client::send`], the reply's body read as a `T`.
    async fn send_decoded<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency: Idempotency,
    ) -> Result<T, ClientError> {
        let reply = self.send(method, path, body, idempotency).await?;
        decode(&reply)
    }

    /// The retry loop every call goes through (see the module docs for the policy).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency: Idempotency,
    ) -> Result<Reply, ClientError> {
        self.send_as(method, path, body, idempotency, None).await
    }

    /// [`Client::send`], presenting `credential` as `Authorization: Bearer` (P13.4).
    async fn send_as(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency: Idempotency,
        credential: Option<&Credential>,
    ) -> Result<Reply, ClientError> {
        self.send_bounded(method, path, body, idempotency, credential, None)
            .await
    }

    /// [`Client::send_as`] with each attempt bounded by `attempt_timeout` (else the request
    /// timeout).
    async fn send_bounded(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency: Idempotency,
        credential: Option<&Credential>,
        attempt_timeout: Option<Duration>,
    ) -> Result<Reply, ClientError> {
        let config = self.inner.config;
        let deadline = Instant::now() + config.patience;
        // The same id on every retry, so server logs show one call, not several.
        let request_id = self.next_request_id();
        // Back-to-back attempts (no pause) are allowed only while moving to another replica,
        // and at most once per endpoint between pauses, so a cluster that refuses every
        // connection is still polled at `retry_interval`, not in a busy loop.
        let max_quick_attempts = self.inner.endpoints.len();
        let mut quick_attempts = 0;
        let mut attempt: u32 = 0;
        loop {
            attempt = attempt.saturating_add(1);
            let target = self.target();
            let failure = match self
                .attempt(
                    &target,
                    &method,
                    path,
                    body.as_deref(),
                    &request_id,
                    credential,
                    attempt_timeout,
                )
                .await
            {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let Retry {
                error,
                quick,
                asked_pause,
            } = self.retry_after_failure(failure, &target, idempotency)?;
            let pause = if quick && quick_attempts < max_quick_attempts {
                quick_attempts += 1;
                Duration::ZERO
            } else {
                quick_attempts = 0;
                asked_pause.unwrap_or(config.retry_interval)
            };
            if Instant::now() + pause > deadline {
                debug!(attempt, endpoint = %target, code = error.label(), "giving up: patience spent");
                return Err(ClientError::PatienceExhausted {
                    last: Box::new(error),
                });
            }
            debug!(
                attempt,
                endpoint = %target,
                code = error.label(),
                pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                "retrying request"
            );
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// Whether and how a failed attempt on `target` is retried: `Err` when it is not (a final
    /// answer, or an unsafe request whose outcome is unknown); a replica that failed is passed
    /// over next time.
    fn retry_after_failure(
        &self,
        failure: Failure,
        target: &str,
        idempotency: Idempotency,
    ) -> Result<Retry, ClientError> {
        let retry = |error, quick| Retry {
            error,
            quick,
            asked_pause: None,
        };
        Ok(match failure {
            Failure::Final(error) => return Err(error),
            // Not a routing problem either: this caller is limited here, so it waits as long as
            // the replica asked rather than hammering it (P13.6).
            Failure::RateLimited { error, retry_after } => Retry {
                error,
                quick: false,
                asked_pause: Some(retry_after.max(self.inner.config.retry_interval)),
            },
            Failure::Unknown(error) if idempotency == Idempotency::Unsafe => return Err(error),
            Failure::Unknown(error) => {
                self.mark_failed(target);
                retry(error, false)
            }
            Failure::NotSent(error) => {
                self.mark_failed(target);
                retry(error, true)
            }
            // Not a routing problem: the same replica will be ready first.
            Failure::Refused(ErrorCode::ShardingNotReady, error) => retry(error, false),
            Failure::Refused(_, error) => {
                let redirected = self.target() != target;
                if !redirected {
                    self.mark_failed(target);
                }
                // Following a named leader is immediate; "no leader anywhere" waits.
                retry(error, redirected)
            }
        })
    }

    /// One request to one replica, classified, bounded by `attempt_timeout` when given (else the
    /// request timeout). Records any leader the reply names, and whether the replica answered.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        base: &str,
        method: &Method,
        path: &str,
        body: Option<&[u8]>,
        request_id: &str,
        credential: Option<&Credential>,
        attempt_timeout: Option<Duration>,
    ) -> Result<Reply, Failure> {
        let url = format!("{base}{path}");
        let mut request = self
            .inner
            .http
            .request(method.clone(), &url)
            .header(ACCEPT, ACCEPT_VALUE)
            .header(REQUEST_ID_HEADER, request_id);
        if let Some(credential) = credential {
            request = request.bearer_auth(credential.expose());
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.to_vec());
        }
        if let Some(bound) = attempt_timeout {
            request = request.timeout(bound);
        }
        let mut response = match request.send().await {
            Ok(response) => {
                self.route().answered(base);
                response
            }
            Err(error) => {
                let most = self.inner.endpoints.len() + 1;
                self.route().went_silent(base, Instant::now(), most);
                return Err(classify_send_error(&url, &error));
            }
        };

        let named_leader = self.note_reply_headers(response.headers());
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(|seconds| Duration::from_secs(seconds.min(MAX_RETRY_AFTER_SECS)));
        let body = read_body(&mut response).await?;
        if status.is_success() {
            return Ok(Reply { status, body });
        }
        Err(self.failure_of(status, &body, named_leader, retry_after))
    }

    /// Records what a reply's headers say of the cluster: the leader it names (and says whether
    /// one is named) and the cluster version (absent from a manager of 0.1.0, whose cluster is at
    /// 0.1.0's schema).
    fn note_reply_headers(&self, headers: &HeaderMap) -> bool {
        let leader = headers
            .get(LEADER_HEADER)
            .and_then(|value| value.to_str().ok());
        if let Some(leader) = leader {
            self.record_leader(leader);
        }
        let cluster_version = headers
            .get(CLUSTER_VERSION_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse().ok())
            .unwrap_or(FIRST_RELEASE_SCHEMA);
        self.inner
            .cluster_version
            .store(cluster_version, Ordering::Relaxed);
        leader.is_some()
    }

    /// What an unsuccessful reply means for the retry loop: a problem's code says whether it may
    /// be retried, elsewhere or later; a body that is not a problem came from something between
    /// us and the replica. A leader the problem names is recorded unless the headers named one.
    fn failure_of(
        &self,
        status: StatusCode,
        body: &[u8],
        named_leader: bool,
        retry_after: Option<Duration>,
    ) -> Failure {
        let Ok(problem) = serde_json::from_slice::<Problem>(body) else {
            let error = unexpected(status, body);
            return match status {
                // A gateway or load balancer between us and the replica; outcome unknown.
                StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT => Failure::Unknown(error),
                _ => Failure::Final(error),
            };
        };
        if !named_leader {
            if let Some(leader) = &problem.leader {
                self.record_leader(leader);
            }
        }
        let code = problem.code;
        let error = ClientError::Problem(problem);
        if code == ErrorCode::RateLimited {
            Failure::RateLimited {
                error,
                retry_after: retry_after.unwrap_or(Duration::ZERO),
            }
        } else if code.retryable_without_side_effects() {
            Failure::Refused(code, error)
        } else if matches!(code, ErrorCode::Timeout | ErrorCode::Unavailable) {
            // The server stopped waiting, not necessarily working: the write may still commit.
            Failure::Unknown(error)
        } else {
            Failure::Final(error)
        }
    }

    fn route(&self) -> std::sync::MutexGuard<'_, Route> {
        // The route is a hint; a panic elsewhere while holding it cannot leave it harmful.
        self.inner
            .route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The known leader, else the current endpoint; a replica resting after it did not answer
    /// only when every other one rests too (P7.3).
    fn target(&self) -> String {
        let now = Instant::now();
        let route = self.route();
        let endpoints = &self.inner.endpoints;
        if let Some(leader) = route.leader.as_ref().filter(|l| !route.is_resting(l, now)) {
            return leader.clone();
        }
        let cursor = route.cursor % endpoints.len();
        let answering = (0..endpoints.len())
            .map(|step| &endpoints[(cursor + step) % endpoints.len()])
            .find(|endpoint| !route.is_resting(endpoint, now));
        answering
            .or(route.leader.as_ref())
            .unwrap_or(&endpoints[cursor])
            .clone()
    }

    /// `target` failed: forget it as leader and move past it. Compares before changing so
    /// concurrent calls failing on the same replica advance the cursor once, not once each.
    fn mark_failed(&self, target: &str) {
        let endpoint_count = self.inner.endpoints.len();
        let mut route = self.route();
        if route.leader.as_deref() == Some(target) {
            route.leader = None;
        }
        if self.inner.endpoints[route.cursor % endpoint_count] == target {
            route.cursor = (route.cursor + 1) % endpoint_count;
        }
    }

    /// Remember a leader named by a server; ignore values that are not usable base URLs.
    /// The committed cluster version as the last manager to answer stated it (0.1.0's schema
    /// before any reply, or after one from a 0.1.0 manager). A caller sends a request field of a
    /// newer schema only when this is at least that schema (docs/PROTOCOL.md, "Versions").
    pub fn cluster_version(&self) -> u32 {
        self.inner.cluster_version.load(Ordering::Relaxed)
    }

    fn record_leader(&self, raw: &str) {
        match normalize_endpoint(raw) {
            Ok(leader) => self.route().leader = Some(leader),
            Err(error) => debug!(leader = raw, %error, "ignoring unusable leader hint"),
        }
    }

    fn next_request_id(&self) -> String {
        let n = self.inner.next_request_id.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.inner.request_id_prefix)
    }
}

/// Prefix for request ids: time and pid, enough to tell processes apart in logs (not a
/// security token, so no random source is needed).
fn request_id_prefix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("lh{:x}{:08x}", std::process::id(), nanos)
}

/// An endpoint by the base-URL rule ([`crate::wire::normalize_base_url`]): `http(s)://host[:port][/prefix]`,
/// without the trailing slash, so endpoints and leader hints compare equal when they name the
/// same replica.
fn normalize_endpoint(raw: &str) -> Result<String, ClientError> {
    crate::wire::normalize_base_url(raw)
        .map_err(|why| ClientError::InvalidEndpoint(format!("{raw:?}: {why}")))
}

/// Percent-encode one path segment. Ids are manager-minted and opaque, but an id containing
/// '/' or whitespace can only be a caller bug, and '.'/'..' would be collapsed by URL
/// normalisation into another path, so those are refused instead of encoded.
fn path_segment(id: &str) -> Result<String, ClientError> {
    if id.is_empty()
        || id == "."
        || id == ".."
        || id
            .chars()
            .any(|c| c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err(ClientError::InvalidRequest(format!(
            "{id:?} is not a valid path segment (empty, '.', '..', or contains '/', whitespace or control characters)"
        )));
    }
    Ok(percent_encode(id))
}

/// `path` of one namespace: `?namespace=NAME` (the first query parameter).
fn in_namespace(path: &str, namespace: &str) -> String {
    format!("{path}?namespace={}", percent_encode(namespace))
}

fn with_consistency(path: &str, consistent: bool) -> String {
    match (consistent, path.contains('?')) {
        (false, _) => path.to_owned(),
        (true, false) => format!("{path}?consistent=true"),
        (true, true) => format!("{path}&consistent=true"),
    }
}

/// Percent-encodes a path segment or query value: RFC 3986 unreserved characters pass as they
/// are, every other byte becomes `%XX`. The one encoder of every Leasehold client.
pub fn percent_encode(value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push('%');
            encoded.push(char::from(HEX[usize::from(byte >> 4)]));
            encoded.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
    encoded
}

/// A caller-supplied path for [`Client::get_json`] must stay on the replica it is sent to.
fn validate_path(path: &str) -> Result<(), ClientError> {
    if !path.starts_with('/')
        || path.starts_with("//")
        || path.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ClientError::InvalidRequest(format!(
            "{path:?} must start with a single '/' and contain no whitespace"
        )));
    }
    Ok(())
}

fn classify_send_error(url: &str, error: &reqwest::Error) -> Failure {
    let message = format!("{url}: {}", error_chain(error));
    if error.is_builder() {
        Failure::Final(ClientError::InvalidRequest(message))
    } else if error.is_connect() {
        // Covers refused, DNS failure and connect timeout: no byte of the request was sent.
        Failure::NotSent(ClientError::Transport(message))
    } else {
        // Timeout or reset after the request may have been written.
        Failure::Unknown(ClientError::Transport(message))
    }
}

async fn read_body(response: &mut reqwest::Response) -> Result<Vec<u8>, Failure> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Failure::Unknown(ClientError::Transport(error_chain(&e))))?
    {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(Failure::Final(ClientError::Decode(format!(
                "reply body exceeds {MAX_RESPONSE_BYTES} bytes"
            ))));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn unexpected(status: StatusCode, body: &[u8]) -> ClientError {
    let text = String::from_utf8_lossy(body);
    ClientError::Unexpected {
        status: status.as_u16(),
        body: text.chars().take(MAX_ERROR_BODY_CHARS).collect(),
    }
}

fn expect_status(reply: &Reply, expected: StatusCode) -> Result<(), ClientError> {
    if reply.status == expected {
        Ok(())
    } else {
        Err(unexpected(reply.status, &reply.body))
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, ClientError> {
    serde_json::to_vec(value)
        .map_err(|e| ClientError::InvalidRequest(format!("cannot encode body: {e}")))
}

fn decode<T: DeserializeOwned>(reply: &Reply) -> Result<T, ClientError> {
    serde_json::from_slice(&reply.body).map_err(|e| {
        let start: String = String::from_utf8_lossy(&reply.body)
            .chars()
            .take(MAX_ERROR_BODY_CHARS)
            .collect();
        ClientError::Decode(format!("{e} in {start:?}"))
    })
}

/// Administrative replies are not pinned by the protocol; an empty body reads as `null`.
fn decode_optional_json(reply: &Reply) -> Result<serde_json::Value, ClientError> {
    if reply.body.iter().all(u8::is_ascii_whitespace) {
        Ok(serde_json::Value::Null)
    } else {
        decode(reply)
    }
}

#[cfg(test)]
mod tests;
