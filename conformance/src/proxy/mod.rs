//! A small HTTP/1.1 fault proxy for the fault tests and the conformance kit: placed between executors and managers (as
//! an executor's `--managers` entry, or as its `--advertise` address so pushes pass through
//! it), it forwards each request to its upstream and can
//!
//! - drop the reply to a matching request once, after the upstream answered it: the write
//!   happened, the client never hears of it and must retry with the same idempotency key (P7.2);
//! - delay requests and replies by a random time (seeded), which reorders concurrent messages;
//! - duplicate requests: the upstream receives the same request twice (P2.4, P4.1: every command
//!   and every push must be harmless to apply again);
//! - refuse matching requests itself (`503`, never forwarded), e.g. every revoke to one executor,
//!   or answer them with another problem of its own (a renewal told `404 unknown_executor`);
//! - hold one reply after the upstream answered it until told to deliver it, so that newer
//!   messages reach the caller first (a grant made stale by a push sent after it, P4.1);
//! - hold one request before forwarding it until told to, so that the caller's state can be
//!   looked at while it waits (a registration sent before the push listener answers, P8.1).
//!
//! It serves one request per connection (every reply says `Connection: close`) and rewrites the
//! `X-Leasehold-Leader` header from upstream URLs to the matching proxy URLs, so a client that
//! follows the leader keeps going through the proxies. These kernels may lack `sch_netem`; the
//! proxy gives delay and duplication without it, and without root.
//!
//! Under TLS ([`ProxyTls`]) it terminates the caller's TLS and calls its upstream over TLS as
//! the same role (an executor's request goes on with the executor certificate, manager 2's push
//! with manager 2's), so what the upstream authorizes is what it would without the proxy, and
//! every fault above works on the requests themselves.

mod connection;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use self::connection::*;
use leasehold_api::problem::{ErrorCode, Problem, LEADER_HEADER};
use leasehold_api::tls::{Role, TlsConfig};

/// Bound on each read, write and upstream exchange.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a held reply is kept before it is delivered anyway.
const HOLD_BOUND: Duration = Duration::from_secs(10);

/// The proxy's own answer to a refused request: the problem (RFC 9457) a manager or executor
/// answers with `code`, in the same form (§9), so that a caller reads it as it would theirs.
fn refused_reply(code: ErrorCode) -> Vec<u8> {
    let problem = Problem::new(code, "answered by the fault proxy");
    let body = serde_json::to_string(&problem).unwrap_or_default();
    format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/problem+json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        problem.status,
        problem.title,
        body.len()
    )
    .into_bytes()
}

/// Largest request or reply head, and largest body, the proxy accepts.
const MAX_HEAD_BYTES: usize = 64 << 10;
const MAX_BODY_BYTES: usize = 16 << 20;

/// Random delay and duplication, from a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Impairment {
    /// Each request waits a uniform delay in this range (ms) before it is forwarded, and its
    /// reply another before it is returned.
    pub delay_ms: (u64, u64),
    /// Percentage of requests sent upstream twice (the second reply is discarded).
    pub duplicate_percent: u32,
}

/// What went through a proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// `METHOD path` of every request received, in order.
    pub requests: Vec<String>,
    /// Requests whose reply was dropped after the upstream answered.
    pub dropped_replies: Vec<String>,
    /// Requests sent upstream twice.
    pub duplicated: usize,
    /// Requests the upstream could not be reached for (the client saw its connection closed).
    pub upstream_failures: usize,
    /// When each `METHOD path` last arrived, in CLOCK_MONOTONIC ns (the admission logs' clock):
    /// the instant an executor's last renewal left it is no later than its arrival here.
    pub last_arrival_ns: BTreeMap<String, u64>,
    /// Every `Authorization: Bearer` credential seen (PROTOCOL P13.4), so a test can look for
    /// an executor's own secret where it must not be.
    pub bearer_credentials: std::collections::BTreeSet<String>,
    /// How many requests of each `METHOD path` the upstream answered and the caller was sent
    /// the answer of (a held reply counts once delivered).
    pub answered: BTreeMap<String, usize>,
    /// The body of the last such request of each `METHOD path` (e.g. the last push delivered).
    pub last_answered_body: BTreeMap<String, Vec<u8>>,
    /// The body of the reply to that request (e.g. the grant of the last renewal answered).
    pub last_reply_body: BTreeMap<String, Vec<u8>>,
    /// Requests the proxy refused itself ([`ProxySet::refuse_requests`]).
    pub refused: usize,
    /// Each request the proxy answered itself, in order.
    pub refusals: Vec<Refusal>,
}

/// A request the proxy answered itself ([`ProxySet::answer_requests`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Its `METHOD path`.
    pub label: String,
    /// The problem it was answered with: one path is refused with different codes in different
    /// steps, and a step judges only what it told.
    pub code: ErrorCode,
    /// When the answer was written to the caller (CLOCK_MONOTONIC ns).
    pub at_ns: u64,
}

/// Where a held request stands ([`ProxySet::hold_next_request`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldRequest {
    /// When it arrived, CLOCK_MONOTONIC ns.
    pub arrival_ns: u64,
    /// Its body.
    pub body: Vec<u8>,
    /// Whether it was forwarded (released, or held past [`HOLD_BOUND`]).
    pub forwarded: bool,
}

/// Where a held reply stands ([`ProxySet::hold_next_reply`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldReply {
    /// When the held request arrived, CLOCK_MONOTONIC ns.
    pub request_arrival_ns: u64,
    /// When the request of the same `METHOD path` before it arrived, if one did.
    pub previous_arrival_ns: Option<u64>,
    /// The upstream's reply body, once it answered.
    pub reply_body: Option<Vec<u8>>,
    /// Set once the hold ended.
    pub outcome: Option<HoldOutcome>,
}

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The reply was written to the caller, which was still waiting, at this CLOCK_MONOTONIC ns.
    Delivered { at_ns: u64 },
    /// The caller closed its connection while the reply was held: it never saw it.
    CallerLeft { at_ns: u64 },
    /// The upstream could not be reached: there was no reply to hold.
    NoReply,
}

#[derive(Debug)]
struct DropReply {
    method: String,
    path: String,
    matching: PathMatch,
}

impl DropReply {
    fn matches(&self, method: &str, path: &str) -> bool {
        self.method == method
            && match self.matching {
                PathMatch::Exact => path == self.path,
                PathMatch::Prefix => path.starts_with(&self.path),
            }
    }
}

/// One hold of the proxy's (a request's, or a reply's): the next request matching `wanted`
/// waits until `release` is sent (or dropped), and `status` says where it stands.
#[derive(Debug)]
struct Hold<T> {
    wanted: Option<DropReply>,
    status: Option<T>,
    release: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<T> Default for Hold<T> {
    fn default() -> Self {
        Self {
            wanted: None,
            status: None,
            release: None,
        }
    }
}

impl<T> Hold<T> {
    /// Holds the next request matching `wanted`; whatever an earlier hold keeps goes on now.
    fn arm(&mut self, wanted: DropReply) {
        self.release_now();
        self.wanted = Some(wanted);
        self.status = None;
    }

    /// Lets what is held go on; a hold not yet matched is cancelled.
    fn cancel(&mut self) {
        self.wanted = None;
        self.release_now();
    }

    fn release_now(&mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
    }

    /// When this request (`method`, `path`) is the one wanted: it is held, `status` says where
    /// it stands, and the receiver fires on its release.
    fn catch(
        &mut self,
        method: &str,
        path: &str,
        status: impl FnOnce() -> T,
    ) -> Option<tokio::sync::oneshot::Receiver<()>> {
        if !self
            .wanted
            .as_ref()
            .is_some_and(|wanted| wanted.matches(method, path))
        {
            return None;
        }
        let (release, released) = tokio::sync::oneshot::channel();
        self.wanted = None;
        self.release = Some(release);
        self.status = Some(status());
        Some(released)
    }
}

#[derive(Debug)]
struct ProxyState {
    drop_replies: Vec<DropReply>,
    impairment: Option<Impairment>,
    /// Added to every reply's delay: the upstream answered, the caller hears of it this late.
    reply_lag: Duration,
    /// Requests of a method whose path starts with a prefix wait this much longer before they
    /// are forwarded.
    request_lags: Vec<(String, String, Duration)>,
    /// The next request of this method and path is kept (and forwarded as usual) ...
    capture: Option<(String, String)>,
    /// ... or each one, the latest replacing the one before ...
    /// ... here, to be delivered again on demand ([`ProxySet::replay_captured`]).
    captured: Option<Captured>,
    capture_each: bool,
    /// Requests of a method whose path matches are answered by the proxy with the problem of
    /// this code (`503 unavailable` for [`ProxySet::refuse_requests`]).
    refusals: Vec<(DropReply, ErrorCode)>,
    /// The next request matching waits before it is forwarded.
    request_hold: Hold<HeldRequest>,
    /// The next request matching has its reply held.
    reply_hold: Hold<HeldReply>,
    rng: StdRng,
    /// Upstream URL → proxy URL, for the leader header.
    rewrites: BTreeMap<String, String>,
    stats: ProxyStats,
}

/// A request kept to be delivered again: where it went, and its bytes.
#[derive(Clone)]
struct Captured {
    upstream: Upstream,
    connector: Option<TlsConnector>,
    request: Vec<u8>,
}

impl fmt::Debug for Captured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Captured")
            .field("upstream", &self.upstream)
            .field("bytes", &self.request.len())
            .finish()
    }
}

/// What to do with one request, decided under the lock.
#[derive(Debug, Default)]
struct Plan {
    /// The proxy's own answer: its problem's code.
    refuse: Option<ErrorCode>,
    /// The release signal of a held request.
    hold_request: Option<tokio::sync::oneshot::Receiver<()>>,
    /// The release signal of a held reply.
    hold: Option<tokio::sync::oneshot::Receiver<()>>,
    drop_reply: bool,
    duplicate: bool,
    request_delay: Duration,
    reply_delay: Duration,
}

/// TLS for a [`ProxySet`]: the identity it accepts with, and one to call upstream with per role.
#[derive(Clone)]
pub struct ProxyTls {
    acceptor: TlsAcceptor,
    /// The caller's role → the identity the proxy calls its upstream with.
    upstream_identities: Vec<(Role, TlsConnector)>,
}

impl fmt::Debug for ProxyTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roles: Vec<Role> = self.upstream_identities.iter().map(|(r, _)| *r).collect();
        f.debug_struct("ProxyTls").field("roles", &roles).finish()
    }
}

impl ProxyTls {
    /// Every identity of a `leaseholdctl certs init` directory (`admin`, `executor`,
    /// `manager-<id>`): the proxy accepts with the `admin` one (clients check only the CA and
    /// the address) and calls on as whichever role called it.
    pub fn from_dir(dir: &Path) -> Result<Self, String> {
        let load = |name: &str| {
            TlsConfig::load(&leasehold_harness::tls_files(dir, name))
                .map_err(|e| format!("proxy TLS identity {name}: {e}"))
        };
        let mut names = vec!["admin".to_string(), "executor".to_string()];
        names.extend(
            (1..)
                .map(|id| format!("manager-{id}"))
                .take_while(|name| dir.join(format!("{name}.pem")).exists()),
        );
        let identities: Vec<TlsConfig> = names
            .iter()
            .map(|name| load(name))
            .collect::<Result<_, _>>()?;
        // `admin` is first.
        let acceptor = TlsAcceptor::from(identities[0].server_config());
        let upstream_identities = identities
            .iter()
            .map(|identity| {
                (
                    identity.role(),
                    TlsConnector::from(Arc::new(identity.client_config())),
                )
            })
            .collect();
        Ok(Self {
            acceptor,
            upstream_identities,
        })
    }

    fn connector_for(&self, role: Role) -> Option<TlsConnector> {
        self.upstream_identities
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, connector)| connector.clone())
    }
}

/// Where one proxy forwards to.
#[derive(Debug, Clone)]
struct Upstream {
    /// `host:port`.
    authority: String,
    /// The host, for the TLS server name.
    host: String,
}

/// How a dropped reply's request path is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathMatch {
    Exact,
    Prefix,
}

/// Proxies in front of a set of upstreams (e.g. one per manager), sharing one fault plan: a
/// reply dropped "once" is dropped once across the set, whichever proxy the client used. The
/// leader header is rewritten from each upstream to its proxy. Stops when dropped.
#[derive(Debug)]
pub struct ProxySet {
    proxies: Vec<(SocketAddr, String)>,
    /// `http`, or `https` under TLS.
    scheme: &'static str,
    state: Arc<Mutex<ProxyState>>,
    tasks: Vec<JoinHandle<()>>,
}

impl ProxySet {
    /// One proxy on 127.0.0.1 (a free port) per upstream (`http://host:port`, or
    /// `https://host:port` with `tls`); `seed` drives the impairment's randomness.
    pub async fn start(
        upstreams: &[String],
        seed: u64,
        tls: Option<ProxyTls>,
    ) -> std::io::Result<Self> {
        let state = Arc::new(Mutex::new(ProxyState {
            drop_replies: Vec::new(),
            impairment: None,
            reply_lag: Duration::ZERO,
            request_lags: Vec::new(),
            capture: None,
            captured: None,
            capture_each: false,
            refusals: Vec::new(),
            request_hold: Hold::default(),
            reply_hold: Hold::default(),
            rng: StdRng::seed_from_u64(seed),
            rewrites: BTreeMap::new(),
            stats: ProxyStats::default(),
        }));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let tls = tls.map(Arc::new);
        let mut proxies = Vec::new();
        let mut tasks = Vec::new();
        for upstream_url in upstreams {
            let upstream_url = upstream_url.trim_end_matches('/').to_string();
            let authority = upstream_url
                .strip_prefix(&format!("{scheme}://"))
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("proxy upstream {upstream_url:?} must be {scheme}://host:port"),
                    )
                })?
                .to_string();
            let host = authority
                .rsplit_once(':')
                .map_or(authority.as_str(), |(host, _)| host)
                .to_string();
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let address = listener.local_addr()?;
            tasks.push(tokio::spawn(accept_loop(
                listener,
                Upstream { authority, host },
                Arc::clone(&state),
                tls.clone(),
            )));
            proxies.push((address, upstream_url));
        }
        let set = Self {
            proxies,
            scheme,
            state,
            tasks,
        };
        set.lock().rewrites = set
            .proxies
            .iter()
            .map(|(address, upstream)| (upstream.clone(), format!("{scheme}://{address}")))
            .collect();
        Ok(set)
    }

    /// The proxies' base URLs, in the order of the upstreams.
    pub fn urls(&self) -> Vec<String> {
        self.proxies
            .iter()
            .map(|(address, _)| format!("{}://{address}", self.scheme))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, ProxyState> {
        lock(&self.state)
    }

    /// The next request (through any proxy of the set) with this method and a path matching
    /// `path` is forwarded and answered upstream, but its reply is dropped: the client's
    /// connection closes unanswered.
    pub fn drop_reply_once(&self, method: &str, path: &str, matching: PathMatch) {
        self.lock().drop_replies.push(DropReply {
            method: method.to_string(),
            path: path.to_string(),
            matching,
        });
    }

    /// Delay and duplicate from now on (`None`: forward faithfully).
    pub fn impair(&self, impairment: Option<Impairment>) {
        self.lock().impairment = impairment;
    }

    /// Every reply from now on reaches its caller `lag` after the upstream answered it, on top
    /// of any impairment: a caller that anchors a lease at the reply's receipt instead of its
    /// request's sending (against P3.2) then believes in a lease longer than the managers'.
    pub fn lag_replies(&self, lag: Duration) {
        self.lock().reply_lag = lag;
    }

    /// Requests with `method` whose path starts with `path_prefix` are forwarded `lag` late from
    /// now on (replacing an earlier lag for the same pair; `Duration::ZERO` removes it): e.g.
    /// pushes held past the managers' delivery bound, so a revoke sent after them arrives first.
    pub fn lag_requests(&self, method: &str, path_prefix: &str, lag: Duration) {
        let mut state = self.lock();
        state
            .request_lags
            .retain(|(m, p, _)| !(m == method && p == path_prefix));
        if !lag.is_zero() {
            state
                .request_lags
                .push((method.to_owned(), path_prefix.to_owned(), lag));
        }
    }

    /// Keeps a copy of the next request (through any proxy of the set) with `method` and
    /// exactly `path`; it is forwarded as usual. Replaces a copy kept before.
    pub fn capture_next(&self, method: &str, path: &str) {
        let mut state = self.lock();
        state.capture = Some((method.to_owned(), path.to_owned()));
        state.captured = None;
        state.capture_each = false;
    }

    /// Keeps a copy of each request with `method` and exactly `path` from now on, the latest
    /// replacing the one before, until [`ProxySet::stop_capturing`]; each is forwarded as usual.
    pub fn capture_each(&self, method: &str, path: &str) {
        self.capture_next(method, path);
        self.lock().capture_each = true;
    }

    /// Keeps no further copies; the one kept stays.
    pub fn stop_capturing(&self) {
        self.lock().capture = None;
    }

    /// Whether a copy is kept.
    pub fn has_captured(&self) -> bool {
        self.lock().captured.is_some()
    }

    /// Delivers the kept copy to its upstream again, now: a delayed duplicate, which arrives
    /// after everything sent since. `Ok(false)` when nothing was kept; the upstream's answer is
    /// discarded.
    pub async fn replay_captured(&self) -> Result<bool, String> {
        let captured = self.lock().captured.take();
        let Some(captured) = captured else {
            return Ok(false);
        };
        exchange(
            &captured.upstream,
            captured.connector.as_ref(),
            &captured.request,
        )
        .await?;
        Ok(true)
    }

    /// From now on (`refuse`) or no longer, requests with `method` and a path matching `path`
    /// are answered `503 unavailable` by the proxy and never reach the upstream: e.g. every
    /// revoke to an executor, which the managers send again later.
    pub fn refuse_requests(&self, method: &str, path: &str, matching: PathMatch, refuse: bool) {
        if refuse {
            self.answer_requests(method, path, matching, ErrorCode::Unavailable);
        } else {
            self.lock()
                .refusals
                .retain(|(r, _)| !(r.method == method && r.path == path && r.matching == matching));
        }
    }

    /// From now on, requests with `method` and a path matching `path` are answered by the
    /// proxy with the problem of `code` and never reach the upstream (e.g. a renewal told
    /// `404 unknown_executor`, as managers that forgot the executor answer it), until
    /// [`ProxySet::refuse_requests`] with `refuse: false`.
    pub fn answer_requests(&self, method: &str, path: &str, matching: PathMatch, code: ErrorCode) {
        let mut state = self.lock();
        state
            .refusals
            .retain(|(r, _)| !(r.method == method && r.path == path && r.matching == matching));
        state.refusals.push((
            DropReply {
                method: method.to_owned(),
                path: path.to_owned(),
                matching,
            },
            code,
        ));
    }

    /// The next request (through any proxy of the set) with `method` and a path matching `path`
    /// waits, unforwarded, until [`ProxySet::release_held_request`] (at most 10 s), so that the
    /// caller can be looked at while it waits for the answer. Replaces an earlier hold; a
    /// request already held is forwarded.
    pub fn hold_next_request(&self, method: &str, path: &str, matching: PathMatch) {
        self.lock().request_hold.arm(DropReply {
            method: method.to_owned(),
            path: path.to_owned(),
            matching,
        });
    }

    /// Where the held request stands; `None` until a request matched.
    pub fn held_request(&self) -> Option<HeldRequest> {
        self.lock().request_hold.status.clone()
    }

    /// Forwards the held request now; a hold not yet matched is cancelled.
    pub fn release_held_request(&self) {
        self.lock().request_hold.cancel();
    }

    /// The body of the request kept by [`ProxySet::capture_next`], if one was.
    pub fn captured_body(&self) -> Option<Vec<u8>> {
        let state = self.lock();
        let request = &state.captured.as_ref()?.request;
        let at = request.windows(4).position(|w| w == b"\r\n\r\n")?;
        Some(request[at + 4..].to_vec())
    }

    /// The next request (through any proxy of the set) with `method` and a path matching `path`
    /// is forwarded as usual, but its reply is held until [`ProxySet::release_held_reply`] (at
    /// most 10 s), so whatever reaches the caller meanwhile arrives before it. Replaces an
    /// earlier hold; a reply already held is delivered.
    pub fn hold_next_reply(&self, method: &str, path: &str, matching: PathMatch) {
        self.lock().reply_hold.arm(DropReply {
            method: method.to_owned(),
            path: path.to_owned(),
            matching,
        });
    }

    /// Where the held reply stands; `None` until a request matched.
    pub fn held_reply(&self) -> Option<HeldReply> {
        self.lock().reply_hold.status.clone()
    }

    /// Delivers the held reply now (its outcome then shows in [`ProxySet::held_reply`]); a hold
    /// not yet matched is cancelled.
    pub fn release_held_reply(&self) {
        self.lock().reply_hold.cancel();
    }

    pub fn stats(&self) -> ProxyStats {
        self.lock().stats.clone()
    }
}

impl Drop for ProxySet {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-shot upstream that answers every request with `reply` and counts requests.
    async fn upstream(reply: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen_by_task = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let seen = Arc::clone(&seen_by_task);
                tokio::spawn(async move {
                    let request = read_message(&mut stream, false).await.unwrap();
                    seen.lock().unwrap().push(format!(
                        "{} {}",
                        request.head.lines().next().unwrap(),
                        String::from_utf8_lossy(&request.body)
                    ));
                    stream.write_all(reply.as_bytes()).await.unwrap();
                    stream.shutdown().await.unwrap();
                });
            }
        });
        (url, seen)
    }

    const REPLY: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Leasehold-Leader: http://10.0.0.1:1\r\nConnection: close\r\n\r\nok";

    fn client() -> reqwest::Client {
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    #[tokio::test]
    async fn forwards_and_rewrites_the_leader_header() {
        let (upstream_url, seen) = upstream(REPLY).await;
        // The upstream names 10.0.0.1:1 as leader; a second proxy fronts that one.
        let proxy = ProxySet::start(&[upstream_url.clone(), "http://10.0.0.1:1".into()], 1, None)
            .await
            .unwrap();
        let reply = client()
            .post(format!("{}/v1/executors", proxy.urls()[0]))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(reply.headers()[LEADER_HEADER], proxy.urls()[1].as_str());
        assert_eq!(reply.text().await.unwrap(), "ok");
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            ["POST /v1/executors HTTP/1.1 {}"]
        );
        assert_eq!(proxy.stats().requests, ["POST /v1/executors"]);
    }

    #[tokio::test]
    async fn drops_one_reply_after_the_upstream_answered() {
        let (upstream_url, seen) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url.clone(), upstream_url], 1, None)
            .await
            .unwrap();
        proxy.drop_reply_once("DELETE", "/v1/executors/", PathMatch::Prefix);
        proxy.drop_reply_once("POST", "/v1/executors", PathMatch::Exact);
        // Not the register path: answered.
        let renew = client()
            .post(format!("{}/v1/executors/ex-3/renew", proxy.urls()[1]))
            .send()
            .await
            .unwrap();
        assert_eq!(renew.status(), 200);
        let url = format!("{}/v1/executors/ex-3", proxy.urls()[1]);
        let first = client().delete(&url).send().await;
        assert!(first.is_err(), "the first reply is dropped: {first:?}");
        // Once across the set: the other proxy answers the retry.
        let retry = format!("{}/v1/executors/ex-3", proxy.urls()[0]);
        let second = client().delete(&retry).send().await.unwrap();
        assert_eq!(second.status(), 200);
        assert_eq!(
            seen.lock().unwrap().len(),
            3,
            "every request reached the upstream"
        );
        assert_eq!(proxy.stats().dropped_replies, ["DELETE /v1/executors/ex-3"]);
    }

    #[tokio::test]
    async fn refused_requests_are_answered_503_and_never_reach_the_upstream() {
        let (upstream_url, seen) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url], 1, None).await.unwrap();
        proxy.refuse_requests("POST", "/v1/revoke", PathMatch::Exact, true);
        let url = format!("{}/v1/revoke", proxy.urls()[0]);
        let refused = client().post(&url).body("{}").send().await.unwrap();
        assert_eq!(refused.status(), 503);
        assert!(refused.text().await.unwrap().contains("unavailable"));
        // Another path goes through.
        let push = format!("{}/v1/assignment", proxy.urls()[0]);
        assert_eq!(client().put(&push).send().await.unwrap().status(), 200);
        assert_eq!(seen.lock().unwrap().len(), 1, "only the push reached it");
        assert_eq!(proxy.stats().refused, 1);
        assert!(
            !proxy
                .stats()
                .last_reply_body
                .contains_key("POST /v1/revoke"),
            "a refused request leaves no reply behind"
        );
        proxy.refuse_requests("POST", "/v1/revoke", PathMatch::Exact, false);
        assert_eq!(client().post(&url).send().await.unwrap().status(), 200);
        assert_eq!(seen.lock().unwrap().len(), 2);
        let stats = proxy.stats();
        assert_eq!(stats.answered["POST /v1/revoke"], 1);
        assert_eq!(stats.last_reply_body["POST /v1/revoke"], b"ok");
    }

    #[tokio::test]
    async fn a_held_reply_reaches_its_caller_only_once_released() {
        let (upstream_url, seen) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url], 1, None).await.unwrap();
        let url = format!("{}/v1/executors/ex-1/renew", proxy.urls()[0]);
        // A first renewal, so the held one has one before it.
        client().post(&url).send().await.unwrap();
        proxy.hold_next_reply("POST", "/v1/executors/ex-1/renew", PathMatch::Exact);
        let call = tokio::spawn({
            let url = url.clone();
            async move { client().post(&url).body("{}").send().await }
        });
        let held = leasehold_harness::poll_until(
            "the upstream's reply to be held",
            Duration::from_secs(5),
            || async {
                proxy
                    .held_reply()
                    .filter(|held| held.reply_body.is_some())
                    .ok_or("not yet".to_string())
            },
        )
        .await
        .unwrap();
        assert_eq!(held.reply_body.as_deref(), Some(&b"ok"[..]));
        assert!(held.previous_arrival_ns.unwrap() < held.request_arrival_ns);
        assert_eq!(seen.lock().unwrap().len(), 2, "forwarded as usual");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !call.is_finished(),
            "the caller has no answer while it is held"
        );
        let before_release_ns = crate::checker::monotonic_now_ns();
        proxy.release_held_reply();
        let reply = call.await.unwrap().unwrap();
        assert_eq!(reply.text().await.unwrap(), "ok");
        match proxy.held_reply().unwrap().outcome {
            Some(HoldOutcome::Delivered { at_ns }) => assert!(at_ns >= before_release_ns),
            other => panic!("{other:?}"),
        }
        assert_eq!(proxy.stats().answered["POST /v1/executors/ex-1/renew"], 2);
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_on_a_held_reply_is_told_apart() {
        let (upstream_url, _) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url], 1, None).await.unwrap();
        proxy.hold_next_reply("POST", "/v1/executors/", PathMatch::Prefix);
        let impatient = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let url = format!("{}/v1/executors/ex-1/renew", proxy.urls()[0]);
        assert!(impatient.post(&url).send().await.is_err());
        let outcome = leasehold_harness::poll_until(
            "the hold to see the caller leave",
            Duration::from_secs(5),
            || async {
                proxy
                    .held_reply()
                    .and_then(|held| held.outcome)
                    .ok_or("not yet".to_string())
            },
        )
        .await
        .unwrap();
        assert!(
            matches!(outcome, HoldOutcome::CallerLeft { .. }),
            "{outcome:?}"
        );
        assert!(!proxy
            .stats()
            .answered
            .contains_key("POST /v1/executors/ex-1/renew"));
    }

    #[tokio::test]
    async fn answered_requests_get_the_proxys_problem_and_never_reach_the_upstream() {
        let (upstream_url, seen) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url], 1, None).await.unwrap();
        let path = "/v1/executors/ex-1/renew";
        proxy.answer_requests("POST", path, PathMatch::Exact, ErrorCode::UnknownExecutor);
        let url = format!("{}{path}", proxy.urls()[0]);
        let before_ns = crate::checker::monotonic_now_ns();
        let told = client().post(&url).body("{}").send().await.unwrap();
        assert_eq!(told.status(), 404);
        // The problem a manager answers, in its form: a client reads it as the manager's.
        let body: Problem = told.json().await.unwrap();
        assert_eq!(body.code, ErrorCode::UnknownExecutor);
        assert_eq!(body.status, 404);
        assert!(!body.retryable);
        assert!(seen.lock().unwrap().is_empty(), "never forwarded");
        let stats = proxy.stats();
        assert_eq!(stats.refused, 1);
        assert_eq!(stats.refusals.len(), 1);
        assert_eq!(stats.refusals[0].label, format!("POST {path}"));
        assert_eq!(stats.refusals[0].code, ErrorCode::UnknownExecutor);
        assert!(stats.refusals[0].at_ns >= before_ns);
        // The same path refused as unavailable is told apart from it.
        proxy.refuse_requests("POST", path, PathMatch::Exact, true);
        assert_eq!(client().post(&url).send().await.unwrap().status(), 503);
        let stats = proxy.stats();
        assert_eq!(stats.refusals.len(), 2);
        assert_eq!(stats.refusals[1].code, ErrorCode::Unavailable);
        // Stopped like a refusal.
        proxy.refuse_requests("POST", path, PathMatch::Exact, false);
        assert_eq!(client().post(&url).send().await.unwrap().status(), 200);
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_held_request_reaches_the_upstream_only_once_released() {
        let (upstream_url, seen) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url], 1, None).await.unwrap();
        proxy.hold_next_request("POST", "/v1/executors", PathMatch::Exact);
        // Not the held path: forwarded at once.
        let renew = format!("{}/v1/executors/ex-1/renew", proxy.urls()[0]);
        assert_eq!(client().post(&renew).send().await.unwrap().status(), 200);
        let url = format!("{}/v1/executors", proxy.urls()[0]);
        let call = tokio::spawn(async move { client().post(&url).body("{\"a\":1}").send().await });
        let held = leasehold_harness::poll_until(
            "the request to be held",
            Duration::from_secs(5),
            || async { proxy.held_request().ok_or("not yet".to_string()) },
        )
        .await
        .unwrap();
        assert_eq!(held.body, b"{\"a\":1}");
        assert!(!held.forwarded);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "held: only the renewal arrived"
        );
        assert!(!call.is_finished());
        proxy.release_held_request();
        assert_eq!(call.await.unwrap().unwrap().status(), 200);
        assert_eq!(seen.lock().unwrap().len(), 2);
        assert!(proxy.held_request().unwrap().forwarded);
        // One request only: the next one is forwarded at once.
        let again = format!("{}/v1/executors", proxy.urls()[0]);
        assert_eq!(client().post(&again).send().await.unwrap().status(), 200);
    }

    #[tokio::test]
    async fn a_captured_requests_body_is_read_back() {
        let (upstream_url, _) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url], 1, None).await.unwrap();
        assert_eq!(proxy.captured_body(), None);
        proxy.capture_next("POST", "/v1/executors/ex-1/renew");
        let url = format!("{}/v1/executors/ex-1/renew", proxy.urls()[0]);
        client()
            .post(&url)
            .body("{\"claims\":[]}")
            .send()
            .await
            .unwrap();
        assert_eq!(proxy.captured_body().unwrap(), b"{\"claims\":[]}");
    }

    #[tokio::test]
    async fn duplicates_requests_upstream() {
        let (upstream_url, seen) = upstream(REPLY).await;
        let proxy = ProxySet::start(&[upstream_url], 7, None).await.unwrap();
        proxy.impair(Some(Impairment {
            delay_ms: (0, 5),
            duplicate_percent: 100,
        }));
        let reply = client()
            .put(format!("{}/v1/assignment", proxy.urls()[0]))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
        leasehold_harness::poll_until(
            "the duplicate to arrive",
            Duration::from_secs(5),
            || async {
                let count = seen.lock().unwrap().len();
                (count == 2)
                    .then_some(())
                    .ok_or(format!("{count} requests"))
            },
        )
        .await
        .unwrap();
        assert_eq!(proxy.stats().duplicated, 1);
    }
}
