//! A routing client: which executor serves key K, answered locally from a copy of the managers'
//! routing table, so callers do not ask the managers on every request (the Clerk of Slicer and
//! Dicer, Helix's RoutingTableProvider).
//!
//! - **The table** is loaded with `GET /v1/routing` and, when following
//!   ([`RoutingConfig::follow`]), kept current by `GET /v1/watch`: one blocking query at a time,
//!   each bounded by [`RoutingConfig::watch_wait`]; a failed one is retried after an exponential
//!   backoff capped at [`RoutingConfig::retry_max`]. Tables only move forwards by revision: a
//!   reply older than the table (a lagging replica) is ignored. A shard being handed off (P5.2)
//!   has no owner to send to, exactly as `/v1/routing` shows it.
//! - **One namespace** per client ([`RoutingConfig::namespace`], PROTOCOL P18.1): its table is
//!   that namespace's, so keys route by its shard count to its executors. A namespace other than
//!   `default` needs a cluster at version [`NAMESPACES_SCHEMA`] or later; an earlier one is told
//!   at connect ([`RoutingError::InvalidConfig`]) rather than answered with `default`'s table.
//! - [`RoutingClient::route`] answers from the table: the key's shard
//!   ([`crate::shard_for_key`]), its owner's address and epoch.
//! - [`RoutingClient::send`] sends one request to the key's owner. An executor that does not
//!   hold the shard answers `421 Misdirected Request`: the table was stale. The client then
//!   refreshes once, a linearizable `GET /v1/routing?consistent=true` (the executor acted on a
//!   committed change, which such a read includes), shared by every caller that hit the same
//!   stale table, and retries once; a second refusal goes back to the caller. The same single
//!   refresh and retry covers a shard the table shows without an owner and an owner that refused
//!   the connection (nothing was sent). A request whose outcome is unknown (a timeout or reset
//!   after it was sent) is never retried: only the caller knows whether repeating it is safe.
//! - **Secondaries** (PROTOCOL P19.5): in a namespace of several replicas the table keeps each
//!   shard's ready secondaries on live executors, ready longest first, as `/v1/routing` shows
//!   them. [`RoutingClient::targets`] answers a key's replicas in the order a [`ReadFrom`] tries
//!   them, and [`RoutingClient::send_to`] sends to the first: [`ReadFrom::Primary`] (what
//!   [`RoutingClient::send`] does), [`ReadFrom::PrimaryPreferred`], [`ReadFrom::Secondary`] or
//!   [`ReadFrom::SecondaryPreferred`], MongoDB's read preferences (Lettuce's `ReadFrom`). Send
//!   a secondary only work the service admits from one (reads, as its executor admits them
//!   with the sidecar's `role=secondary` or `any`): the executor decides, and answers `421` to
//!   what it does not admit in the role it holds. A secondary that answers `421`, or refuses
//!   the connection, is handled as the primary is: one refresh, one retry, and the retry goes
//!   to a replica other than the one that failed when the refreshed table offers one, so a
//!   preferred read falls back to the other role (a secondary-preferred read to the primary).
//!   A key without the replicas asked for is refreshed once too, then
//!   [`RoutingError::NoSecondary`] (or [`RoutingError::NoOwner`]).
//! - **Counters**: misrouted requests, refreshes, retries, watch round trips and failures, and the
//!   table's age (since the managers last confirmed it), in [`RoutingStats`]; the same as
//!   `leasehold_routing_*` metrics through the `metrics` facade ([`RoutingClient::record_metrics`]
//!   sets the gauges, for a `/metrics` handler to call before it renders).
//!
//! Every bound is a constant or a [`RoutingConfig`] field: at most [`MAX_ATTEMPTS`] sends and one
//! refresh per call, one watch in flight per client, reply bodies of at most
//! [`MAX_REPLY_BYTES`]. Nothing queues: a caller waiting for a refresh another caller started
//! waits on that one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use crate::client::{error_chain, http_client_builder, Client, ClientConfig, ClientError};
use crate::problem::Problem;
use crate::tls::TlsConfig;
use crate::wire::{
    check_namespace_name, Role, COMPACT_SHARDS_SCHEMA, DEFAULT_NAMESPACE, MAX_SHARD_COUNT,
    MAX_WATCH_WAIT, NAMESPACES_SCHEMA,
};

/// At most this many sends per [`RoutingClient::send`] or [`RoutingClient::send_to`]: the
/// first, and one after a refresh.
pub const MAX_ATTEMPTS: u32 = 2;

/// Largest executor reply read into memory; bounds what a confused peer can make us allocate.
pub const MAX_REPLY_BYTES: usize = 16 << 20;

/// Default bound on one `GET /v1/watch`: long enough that an idle cluster costs a request every
/// half minute, short enough that a replica that silently went away is noticed.
pub const DEFAULT_WATCH_WAIT: Duration = Duration::from_secs(30);

/// The watch request's timeout is its wait plus this: the server answers at the end of the wait,
/// and the reply still has to travel.
const WATCH_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// Bound on connecting to an executor, below the request timeout so a dead owner (packets
/// dropped) costs about a second before the refresh, not the whole timeout.
const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(1);

/// Statuses the client acts on.
const MISDIRECTED: u16 = 421;

/// How a [`RoutingClient`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingConfig {
    /// The namespace whose keys this client routes (PROTOCOL P18.1); `default` unless named.
    pub namespace: String,
    /// The manager client's timing, for the table loads and refreshes (P7.1 patience).
    pub managers: ClientConfig,
    /// Follow `GET /v1/watch` in a background task. Off, the table changes only when a call
    /// refreshes it (a one-shot command line needs no watcher).
    pub follow: bool,
    /// Bound on one `GET /v1/watch` (at most [`MAX_WATCH_WAIT`]).
    pub watch_wait: Duration,
    /// Bound on one request to an executor, from connecting to reading the whole reply.
    pub executor_timeout: Duration,
    /// First pause after a failed watch; doubled after each further failure...
    pub retry_initial: Duration,
    /// ...up to this.
    pub retry_max: Duration,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            managers: ClientConfig::default(),
            follow: true,
            watch_wait: DEFAULT_WATCH_WAIT,
            executor_timeout: Duration::from_secs(5),
            retry_initial: Duration::from_millis(250),
            retry_max: Duration::from_secs(5),
        }
    }
}

impl RoutingConfig {
    fn validate(&self) -> Result<(), RoutingError> {
        let invalid = |why: &str| Err(RoutingError::InvalidConfig(why.to_owned()));
        if let Err(error) = check_namespace_name(&self.namespace) {
            return Err(RoutingError::InvalidConfig(format!("namespace: {error}")));
        }
        if self.watch_wait.is_zero() || self.watch_wait > MAX_WATCH_WAIT {
            return invalid("watch_wait must be positive and at most MAX_WATCH_WAIT (300 s)");
        }
        if self.executor_timeout.is_zero() {
            return invalid("executor_timeout must be positive");
        }
        if self.retry_initial.is_zero() || self.retry_max < self.retry_initial {
            // A zero pause would make a failing watch a busy loop.
            return invalid("retry_initial must be positive and retry_max at least retry_initial");
        }
        Ok(())
    }
}

/// Why a routing call failed.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    /// A [`RoutingConfig`] value cannot work.
    #[error("invalid routing configuration: {0}")]
    InvalidConfig(String),
    /// The request cannot be sent as given (e.g. a path that does not start with '/').
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The managers could not be asked for the table.
    #[error("routing table from the managers: {0}")]
    Managers(#[from] ClientError),
    /// The managers answered with a table this client cannot use.
    #[error("routing table: {0}")]
    Table(#[from] TableError),
    /// The cluster has no shard configuration yet.
    #[error("the cluster has no shards yet")]
    NotReady,
    /// The key's shard has no owner to send to (unowned, or being handed off, P5.2), even after
    /// a refresh; for a preferred read ([`ReadFrom`]), no ready secondary either.
    #[error("shard {shard} has no owner right now (table revision {revision})")]
    NoOwner {
        /// The key's shard.
        shard: u32,
        /// The table's revision.
        revision: u64,
    },
    /// The key's shard has no ready secondary to send a [`ReadFrom::Secondary`] read to
    /// (PROTOCOL P19.5), even after a refresh.
    #[error("shard {shard} has no ready secondary right now (table revision {revision})")]
    NoSecondary {
        /// The key's shard.
        shard: u32,
        /// The table's revision.
        revision: u64,
    },
    /// The executor sent to (the owner, or a secondary, P19.5) refused the request (`421`),
    /// again after the refresh and retry.
    #[error("shard {shard}: {address} answered 421 after a refresh: {detail}")]
    Misdirected {
        /// The key's shard.
        shard: u32,
        /// The executor that refused it last.
        address: String,
        /// The refusal's problem document, if it sent one.
        problem: Option<Box<Problem>>,
        /// The refusal, for humans.
        detail: String,
    },
    /// The executor sent to could not be reached, again after the refresh and retry; nothing
    /// was sent.
    #[error("shard {shard}: {address} unreachable: {detail}")]
    Unreachable {
        /// The key's shard.
        shard: u32,
        /// The executor.
        address: String,
        /// Why.
        detail: String,
    },
    /// The request was sent but no complete reply came (timeout, reset): it may or may not have
    /// been applied.
    #[error("shard {shard}: no complete reply from {address}: {detail}")]
    OutcomeUnknown {
        /// The key's shard.
        shard: u32,
        /// The executor.
        address: String,
        /// Why.
        detail: String,
    },
}

impl RoutingError {
    /// Whether the request certainly had no effect: it was never sent, or an executor refused it
    /// before doing anything. False only for [`RoutingError::OutcomeUnknown`].
    pub fn definitely_not_applied(&self) -> bool {
        !matches!(self, RoutingError::OutcomeUnknown { .. })
    }

    /// Short label for logs and metrics.
    fn label(&self) -> &'static str {
        match self {
            RoutingError::InvalidConfig(_) => "invalid_config",
            RoutingError::InvalidRequest(_) => "invalid_request",
            RoutingError::Managers(_) => "managers",
            RoutingError::Table(_) => "table",
            RoutingError::NotReady => "not_ready",
            RoutingError::NoOwner { .. } => "no_owner",
            RoutingError::NoSecondary { .. } => "no_secondary",
            RoutingError::Misdirected { .. } => "misdirected",
            RoutingError::Unreachable { .. } => "unreachable",
            RoutingError::OutcomeUnknown { .. } => "outcome_unknown",
        }
    }
}

/// Why a table from the managers was not adopted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// A route for a shard outside `0..shard_count`.
    #[error("route for shard {shard} outside 0..{shard_count}")]
    OutOfRange {
        /// The shard.
        shard: u32,
        /// The table's shard count.
        shard_count: u32,
    },
    /// Two routes for one shard.
    #[error("two routes for shard {0}")]
    Duplicate(u32),
    /// No route for a shard.
    #[error("no route for shard {0}")]
    Missing(u32),
    /// A shard count above [`MAX_SHARD_COUNT`].
    #[error("shard count {0} is above the most a cluster can have ({MAX_SHARD_COUNT})")]
    TooManyShards(u32),
    /// A run of no shards.
    #[error("an empty run at shard {0}")]
    EmptyRun(u32),
    /// A run naming an owner the table does not list.
    #[error("the run at shard {shard} names owner {owner}, which the table does not list")]
    UnknownOwner {
        /// The run's first shard.
        shard: u32,
        /// The index it named.
        owner: u32,
    },
    /// The secondaries of a table of runs (PROTOCOL P19.5) are malformed: a list empty, too
    /// long, naming an owner the table does not list or one twice; a stretch empty, past the
    /// shard count, overlapping another or naming a list the table lacks.
    #[error("secondaries: {0}")]
    BadSecondaries(String),
    /// An owner's address is not an `http(s)://host[:port]` URL.
    #[error("shard {shard}: owner address {address:?} is not usable: {reason}")]
    BadAddress {
        /// The shard.
        shard: u32,
        /// The address.
        address: String,
        /// Why.
        reason: String,
    },
}

mod follow;
mod table;

pub use table::{Owner, RouteTable, ShardRoute};

/// Where one request goes: the answer of [`RoutingClient::route`] and
/// [`RoutingClient::targets`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The key's shard.
    pub shard: u32,
    /// The shard's epoch in the table (its primary's, which a secondary's set shows too).
    pub epoch: u64,
    /// The executor: the owner, or a ready secondary.
    pub executor_id: String,
    /// The executor's base URL.
    pub address: String,
    /// The revision of the table that answered.
    pub revision: u64,
    /// The namespace's generation the table is of (PROTOCOL P20.3): what a route to the
    /// executor names as the generation it routed the key under (`?generation=` on the
    /// demo executor's work).
    pub generation: u64,
    /// The replica it holds (PROTOCOL P19.5): the primary (the owner) or a ready secondary.
    pub role: Role,
}

/// Which replicas of a key's shard a request may go to, and in which order (PROTOCOL P19.5):
/// MongoDB's read preferences, Lettuce's `ReadFrom`. Secondaries are tried ready longest
/// first. Only work a secondary may admit (reads the service allows) should go to one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ReadFrom {
    /// The primary only: the owner, which admits every kind of work (the default, and what
    /// [`RoutingClient::send`] does).
    #[default]
    Primary,
    /// The primary, else a ready secondary: while the shard is between owners (P5.2) or its
    /// owner turned the request away.
    PrimaryPreferred,
    /// A ready secondary only, keeping the primary's capacity for its own work.
    Secondary,
    /// A ready secondary, else the primary: a shard without a ready secondary (a namespace of
    /// one replica, a secondary not yet warm) still answers.
    SecondaryPreferred,
}

/// One request to send to a key's owner.
#[derive(Debug, Clone, Copy)]
pub struct RoutedRequest<'a> {
    /// The method.
    pub method: &'a Method,
    /// Path and query on the executor, starting with a single '/'.
    pub path: &'a str,
    /// A JSON body, if any.
    pub body: Option<&'a [u8]>,
}

/// An executor's reply to a [`RoutedRequest`] (any status but `421`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutedReply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
    /// Who answered.
    pub target: Target,
    /// Sends it took: 1, or 2 after a refresh.
    pub attempts: u32,
}

/// What a [`RoutingClient`] has done, since it was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingStats {
    /// The table's revision.
    pub revision: u64,
    /// The table's shard count.
    pub shard_count: u32,
    /// Since the managers last confirmed the table (a load, refresh or watch reply at its
    /// revision or newer); `None` before any. With a watch outstanding, changes arrive as they
    /// commit, so this is how long since the managers last answered, an upper bound on how
    /// stale the routes can be only while they answer.
    pub table_age: Option<Duration>,
    /// Tables adopted (each newer than the one before).
    pub tables_adopted: u64,
    /// `421` answers from executors.
    pub misrouted: u64,
    /// On-demand refreshes (`GET /v1/routing`) after a misroute, a shard without owner or an
    /// unreachable owner.
    pub refreshes: u64,
    /// Second sends after a refresh.
    pub retries: u64,
    /// Watch requests started.
    pub watch_started: u64,
    /// Watch requests answered with a usable state.
    pub watch_replies: u64,
    /// Watch requests that failed (each followed by a backoff pause).
    pub watch_failures: u64,
}

#[derive(Debug, Default)]
struct Counters {
    tables_adopted: AtomicU64,
    misrouted: AtomicU64,
    refreshes: AtomicU64,
    retries: AtomicU64,
    watch_started: AtomicU64,
    watch_replies: AtomicU64,
    watch_failures: AtomicU64,
}

/// The table and when the managers last confirmed it.
#[derive(Debug, Default)]
struct Current {
    table: Arc<RouteTable>,
    confirmed_at: Option<Instant>,
}

/// What the watcher task and the callers share.
#[derive(Debug)]
struct Shared {
    managers: Client,
    /// The namespace routed, `None` for `default`: a client of `default` asks as clients before
    /// namespaces did, so it keeps working against every cluster version.
    namespace: Option<String>,
    current: RwLock<Current>,
    /// One refresh at a time: callers that hit the same stale table wait for the one under way
    /// instead of each asking the managers.
    refresh: tokio::sync::Mutex<()>,
    counters: Counters,
}

impl Shared {
    fn current(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        // Replaced whole under the lock, so a panic elsewhere cannot leave it half-written.
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn table(&self) -> Arc<RouteTable> {
        Arc::clone(&self.current().table)
    }

    /// Adopts `candidate` if it is newer than the table; confirms the table's currency if it is
    /// at least as new. Returns whether it was adopted.
    fn offer(&self, candidate: RouteTable) -> bool {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if candidate.revision() < current.table.revision() {
            debug!(
                offered = candidate.revision(),
                held = current.table.revision(),
                "ignoring an older routing table (a lagging replica)"
            );
            return false;
        }
        current.confirmed_at = Some(Instant::now());
        // One revision is one state, so a table at the revision held is the table held.
        if candidate.revision() == current.table.revision() {
            return false;
        }
        current.table = Arc::new(candidate);
        self.counters.tables_adopted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Loads the table through the leader (`?consistent=true`) and offers it.
    /// Reads the table through the leader: as runs from a cluster that serves them (a route per
    /// shard would not fit [`crate::client`]'s reply bound at a million shards), else as routes.
    async fn load(&self) -> Result<(), RoutingError> {
        if let Some(namespace) = &self.namespace {
            if self.managers.cluster_version() < NAMESPACES_SCHEMA {
                self.managers.cluster_info().await?;
            }
            let cluster_version = self.managers.cluster_version();
            if cluster_version < NAMESPACES_SCHEMA {
                return Err(RoutingError::InvalidConfig(format!(
                    "namespace {namespace:?}: the cluster is at version {cluster_version}, and \
                     namespaces need {NAMESPACES_SCHEMA} (PROTOCOL P18.1)"
                )));
            }
            let runs = self.managers.routing_runs_in(namespace, true).await?;
            self.offer(RouteTable::from_runs(&runs)?);
            return Ok(());
        }
        if !self.compact() {
            // The cluster version comes with every reply: a small one first, so the table is
            // asked for in the form this cluster serves.
            self.managers.cluster_info().await?;
        }
        let table = if self.compact() {
            RouteTable::from_runs(&self.managers.routing_runs(true).await?)?
        } else {
            RouteTable::from_routing(&self.managers.routing(true).await?)?
        };
        self.offer(table);
        Ok(())
    }

    /// Whether the managers serve the table as runs ([`COMPACT_SHARDS_SCHEMA`]).
    fn compact(&self) -> bool {
        self.managers.cluster_version() >= COMPACT_SHARDS_SCHEMA
    }
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    /// One connection pool for every request to every executor.
    http: reqwest::Client,
    /// The watcher, aborted when the last clone of the client is dropped.
    watcher: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(watcher) = &self.watcher {
            watcher.abort();
        }
    }
}

/// The routing client. Cheap to clone; clones share the table, the counters, the connection
/// pool and the watcher, which stops when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct RoutingClient {
    inner: Arc<Inner>,
}

impl RoutingClient {
    /// A client for the managers at `endpoints`: loads the table (waiting with the managers'
    /// patience) and, if [`RoutingConfig::follow`], starts following `GET /v1/watch`. Must be
    /// called inside a tokio runtime.
    pub async fn connect(
        endpoints: Vec<String>,
        config: RoutingConfig,
    ) -> Result<Self, RoutingError> {
        Self::connect_with_tls(endpoints, config, None).await
    }

    /// [`RoutingClient::connect`], presenting the process's certificate to managers and
    /// executors alike when `tls` is given (PROTOCOL P13.2).
    pub async fn connect_with_tls(
        endpoints: Vec<String>,
        config: RoutingConfig,
        tls: Option<&TlsConfig>,
    ) -> Result<Self, RoutingError> {
        config.validate()?;
        let managers = Client::with_tls(endpoints.clone(), config.managers, tls)?;
        // Executors are addressed directly (no proxy hides which one answered) and a redirect
        // is no answer an executor gives: the one client builder does both.
        let http = http_client_builder(tls)
            .timeout(config.executor_timeout)
            .connect_timeout(config.executor_timeout.min(CONNECT_TIMEOUT_MAX))
            .build()
            .map_err(|e| {
                RoutingError::InvalidConfig(format!("http client: {}", error_chain(&e)))
            })?;
        let namespace = (config.namespace != DEFAULT_NAMESPACE).then(|| config.namespace.clone());
        let shared = Arc::new(Shared {
            managers,
            namespace,
            current: RwLock::new(Current::default()),
            refresh: tokio::sync::Mutex::new(()),
            counters: Counters::default(),
        });
        shared.load().await?;
        let watcher = if config.follow {
            let watch_client = Client::with_tls(
                endpoints,
                ClientConfig {
                    request_timeout: config.watch_wait + WATCH_TIMEOUT_MARGIN,
                    ..config.managers
                },
                tls,
            )?;
            Some(tokio::spawn(follow::follow(
                Arc::clone(&shared),
                watch_client,
                config,
            )))
        } else {
            None
        };
        Ok(Self {
            inner: Arc::new(Inner {
                shared,
                http,
                watcher,
            }),
        })
    }

    /// Where work for `key` goes, by the table as it is now (no I/O): its primary.
    pub fn route(&self, key: &[u8]) -> Result<Target, RoutingError> {
        self.inner.shared.table().target(key)
    }

    /// Where work for `key` read from `read_from` may go, by the table as it is now (no I/O),
    /// in the order [`RoutingClient::send_to`] tries them (PROTOCOL P19.5):
    /// `targets(key, ReadFrom::Secondary)` are the key's ready secondaries, ready longest first.
    /// Never empty ([`RouteTable::targets`]).
    pub fn targets(&self, key: &[u8], read_from: ReadFrom) -> Result<Vec<Target>, RoutingError> {
        self.inner.shared.table().targets(key, read_from)
    }

    /// The table as it is now.
    pub fn table(&self) -> Arc<RouteTable> {
        self.inner.shared.table()
    }

    /// The table's revision.
    pub fn revision(&self) -> u64 {
        self.inner.shared.current().table.revision()
    }

    /// Counters and the table's age.
    pub fn stats(&self) -> RoutingStats {
        let (revision, shard_count, confirmed_at) = {
            let current = self.inner.shared.current();
            (
                current.table.revision(),
                current.table.shard_count(),
                current.confirmed_at,
            )
        };
        let counters = &self.inner.shared.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RoutingStats {
            revision,
            shard_count,
            table_age: confirmed_at.map(|at| at.elapsed()),
            tables_adopted: load(&counters.tables_adopted),
            misrouted: load(&counters.misrouted),
            refreshes: load(&counters.refreshes),
            retries: load(&counters.retries),
            watch_started: load(&counters.watch_started),
            watch_replies: load(&counters.watch_replies),
            watch_failures: load(&counters.watch_failures),
        }
    }

    /// Sets the gauges (`leasehold_routing_table_age_seconds`, `leasehold_routing_revision`) on
    /// the installed `metrics` recorder; counters are recorded as they happen.
    pub fn record_metrics(&self) {
        let stats = self.stats();
        metrics::gauge!("leasehold_routing_revision").set(stats.revision as f64);
        if let Some(age) = stats.table_age {
            metrics::gauge!("leasehold_routing_table_age_seconds").set(age.as_secs_f64());
        }
    }

    /// Loads the table now (through the leader), whatever its revision.
    pub async fn refresh(&self) -> Result<(), RoutingError> {
        let _one_at_a_time = self.inner.shared.refresh.lock().await;
        self.count(&self.inner.shared.counters.refreshes, "refreshes");
        self.inner.shared.load().await
    }

    /// Sends `request` to the owner of `key`; on a `421`, a shard without owner or an owner that
    /// refused the connection, refreshes the table once and tries once more (module docs).
    /// Returns the executor's reply, whatever its status, unless it is a second `421`.
    pub async fn send(
        &self,
        key: &[u8],
        request: RoutedRequest<'_>,
    ) -> Result<RoutedReply, RoutingError> {
        self.send_to(key, ReadFrom::Primary, request).await
    }

    /// Sends `request` to the first of `key`'s replicas that `read_from` names (PROTOCOL
    /// P19.5, [`RoutingClient::targets`]); on a `421`, a key without such a replica or one that
    /// refused the connection, refreshes the table once and tries once more, at another replica
    /// of the refreshed table than the one that failed when it names one (module docs). Returns
    /// the executor's reply, whatever its status, unless it is a second `421`; its `target`
    /// says which replica answered.
    pub async fn send_to(
        &self,
        key: &[u8],
        read_from: ReadFrom,
        request: RoutedRequest<'_>,
    ) -> Result<RoutedReply, RoutingError> {
        if !request.path.starts_with('/') || request.path.starts_with("//") {
            return Err(RoutingError::InvalidRequest(format!(
                "{:?} must start with a single '/'",
                request.path
            )));
        }
        let mut refreshed = false;
        let mut sends = 0;
        // The executor the first send failed at: the retry goes elsewhere when it can.
        let mut failed: Option<String> = None;
        let mut last_error = RoutingError::NotReady;
        for attempt in 1..=MAX_ATTEMPTS {
            let seen = self.revision();
            let target = match self.targets(key, read_from) {
                Ok(targets) => table::choose(targets, failed.as_deref())?,
                Err(
                    error @ (RoutingError::NoOwner { .. }
                    | RoutingError::NoSecondary { .. }
                    | RoutingError::NotReady),
                ) => {
                    if refreshed {
                        return Err(error);
                    }
                    refreshed = true;
                    self.refresh_after(seen).await?;
                    last_error = error;
                    continue;
                }
                Err(error) => return Err(error),
            };
            sends += 1;
            let error = match self.attempt(&target, request).await {
                Ok(reply) if reply.status != MISDIRECTED => {
                    return Ok(RoutedReply {
                        status: reply.status,
                        body: reply.body,
                        target,
                        attempts: sends,
                    });
                }
                Ok(reply) => self.misdirected(&target, &reply),
                Err(Attempt::NotSent(detail)) => RoutingError::Unreachable {
                    shard: target.shard,
                    address: target.address.clone(),
                    detail,
                },
                Err(Attempt::Unknown(detail)) => {
                    return Err(RoutingError::OutcomeUnknown {
                        shard: target.shard,
                        address: target.address.clone(),
                        detail,
                    })
                }
            };
            if refreshed || attempt == MAX_ATTEMPTS {
                return Err(error);
            }
            failed = Some(target.executor_id.clone());
            refreshed = true;
            self.refresh_after(target.revision).await?;
            self.count(&self.inner.shared.counters.retries, "retries");
            last_error = error;
        }
        Err(last_error)
    }

    /// Refreshes the table unless it has moved past `seen` since (another caller's refresh, or
    /// the watch, already replaced the table that misrouted us).
    async fn refresh_after(&self, seen: u64) -> Result<(), RoutingError> {
        let _one_at_a_time = self.inner.shared.refresh.lock().await;
        if self.revision() > seen {
            return Ok(());
        }
        self.count(&self.inner.shared.counters.refreshes, "refreshes");
        self.inner.shared.load().await
    }

    /// A `421` from `target`'s executor (the table was stale): counted, and the error it
    /// becomes if the retry fails too.
    fn misdirected(&self, target: &Target, reply: &Reply) -> RoutingError {
        self.count(&self.inner.shared.counters.misrouted, "misrouted");
        let problem: Option<Problem> = serde_json::from_slice(&reply.body).ok();
        let detail = problem.as_ref().map_or_else(
            || {
                String::from_utf8_lossy(&reply.body)
                    .chars()
                    .take(256)
                    .collect()
            },
            |problem| problem.detail.clone(),
        );
        debug!(
            shard = target.shard,
            executor_id = %target.executor_id,
            revision = target.revision,
            %detail,
            "misrouted (421): the routing table was stale"
        );
        RoutingError::Misdirected {
            shard: target.shard,
            address: target.address.clone(),
            problem: problem.map(Box::new),
            detail,
        }
    }

    fn count(&self, counter: &AtomicU64, what: &'static str) {
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("leasehold_routing_events_total", "event" => what).increment(1);
    }

    /// One request to one executor.
    async fn attempt(&self, target: &Target, request: RoutedRequest<'_>) -> Result<Reply, Attempt> {
        let url = format!("{}{}", target.address, request.path);
        let mut builder = self
            .inner
            .http
            .request(request.method.clone(), &url)
            .header(ACCEPT, "application/json, application/problem+json");
        if let Some(body) = request.body {
            builder = builder
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_vec());
        }
        let mut response = builder.send().await.map_err(|error| {
            let detail = error_chain(&error);
            if error.is_connect() {
                // Refused, DNS, connect timeout: no byte of the request left.
                Attempt::NotSent(detail)
            } else {
                Attempt::Unknown(detail)
            }
        })?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| Attempt::Unknown(error_chain(&error)))?
        {
            if body.len() + chunk.len() > MAX_REPLY_BYTES {
                return Err(Attempt::Unknown(format!(
                    "reply body exceeds {MAX_REPLY_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Reply { status, body })
    }
}

/// A complete reply.
#[derive(Debug)]
struct Reply {
    status: u16,
    body: Vec<u8>,
}

/// A failed send, by what it means for a retry.
#[derive(Debug)]
enum Attempt {
    /// Nothing was sent.
    NotSent(String),
    /// Sent; the outcome is unknown.
    Unknown(String),
}

#[cfg(test)]
mod tests;
