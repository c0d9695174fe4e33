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
//! - **Counters**: misrouted requests, refreshes, retries, watch round trips and failures, and the
//!   table's age (since the managers last confirmed it), in [`RoutingStats`]; the same as
//!   `leasehold_routing_*` metrics through the `metrics` facade ([`RoutingClient::record_metrics`]
//!   sets the gauges, for a `/metrics` handler to call before it renders).
//!
//! Every bound is a constant or a [`RoutingConfig`] field: at most [`MAX_ATTEMPTS`] sends and one
//! refresh per call, one watch in flight per client, reply bodies of at most
//! [`MAX_REPLY_BYTES`]. Nothing queues: a caller waiting for a refresh another caller started
//! waits on that one.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::client::{error_chain, http_client_builder, Client, ClientConfig, ClientError};
use crate::problem::Problem;
use crate::shard_for_key;
use crate::tls::TlsConfig;
use crate::wire::{
    RoutingRuns, RoutingTable, StateView, COMPACT_SHARDS_SCHEMA, MAX_SHARD_COUNT, MAX_WATCH_WAIT,
};

/// At most this many sends per [`RoutingClient::send`]: the first, and one after a refresh.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingConfig {
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
    /// a refresh.
    #[error("shard {shard} has no owner right now (table revision {revision})")]
    NoOwner {
        /// The key's shard.
        shard: u32,
        /// The table's revision.
        revision: u64,
    },
    /// The owner refused the request (`421`), again after the refresh and retry.
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
    /// The owner could not be reached, again after the refresh and retry; nothing was sent.
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

/// The executor a shard's work goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its id (`ex-<log index>`).
    pub executor_id: String,
    /// Its base URL, without a trailing slash.
    pub address: String,
}

/// One shard's row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRoute {
    /// The shard.
    pub shard: u32,
    /// Its epoch: the owner's fencing token.
    pub epoch: u64,
    /// `None` while unowned or being handed off (P5.2).
    pub owner: Option<Owner>,
}

/// A routing table at one revision: the pure part of the client, with no I/O.
///
/// Kept as runs, as the managers send it: a settled million-shard table is about one run per
/// executor, so adopting a table costs its runs, not a route per shard, and a lookup is a binary
/// search over the runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTable {
    revision: u64,
    shard_count: u32,
    /// Maximal stretches of consecutive shards with one owner and one epoch, ascending, covering
    /// `0..shard_count` once (maximal, so two tables routing alike are equal).
    runs: Vec<TableRun>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct TableRun {
    first: u32,
    count: u32,
    epoch: u64,
    owner: Option<Arc<Owner>>,
}

impl TableRun {
    /// One past its last shard.
    fn end(&self) -> u64 {
        u64::from(self.first) + u64::from(self.count)
    }
}

impl RouteTable {
    /// The table `GET /v1/routing` answered, checked: one route per shard in `0..shard_count`,
    /// usable addresses.
    pub fn from_routing(table: &RoutingTable) -> Result<Self, TableError> {
        let rows = table.routes.iter().map(|route| {
            let owner = match (&route.executor_id, &route.address) {
                (Some(id), Some(address)) => Some((id.clone(), address.clone())),
                _ => None,
            };
            (route.shard, route.epoch, owner)
        });
        Self::build(table.revision, table.shard_count, rows)
    }

    /// The table a `GET /v1/watch` state implies, by the rule `/v1/routing` uses: a shard's owner
    /// is routed to unless the shard is being handed off.
    pub fn from_state(state: &StateView) -> Result<Self, TableError> {
        let addresses: BTreeMap<&str, &str> = state
            .executors
            .iter()
            .map(|executor| (executor.executor_id.as_str(), executor.address.as_str()))
            .collect();
        let rows = state.shards.iter().map(|shard| {
            let owner = shard
                .owner
                .as_deref()
                .filter(|_| shard.handoff.is_none())
                .and_then(|id| {
                    addresses
                        .get(id)
                        .map(|address| (id.to_owned(), (*address).to_owned()))
                });
            (shard.shard, shard.epoch, owner)
        });
        Self::build(state.revision, state.shard_count, rows)
    }

    /// The table `GET /v1/routing?form=runs` (or a routing watch) answered, checked as
    /// [`RouteTable::from_routing`] checks a table of routes (every shard once, inside the
    /// count, usable addresses), and every run non-empty and naming an owner the table lists.
    /// Each owner's address is checked once, and no route per shard is made.
    pub fn from_runs(table: &RoutingRuns) -> Result<Self, TableError> {
        if table.shard_count > MAX_SHARD_COUNT {
            return Err(TableError::TooManyShards(table.shard_count));
        }
        let mut owners: Vec<Option<Arc<Owner>>> = vec![None; table.owners.len()];
        let mut runs = Vec::with_capacity(table.runs.len());
        for run in &table.runs {
            if run.count == 0 {
                return Err(TableError::EmptyRun(run.first));
            }
            let owner = match run.owner {
                None => None,
                Some(index) => {
                    let unknown = TableError::UnknownOwner {
                        shard: run.first,
                        owner: index,
                    };
                    let position = usize::try_from(index).map_err(|_| unknown.clone())?;
                    let (slot, listed) = owners
                        .get_mut(position)
                        .zip(table.owners.get(position))
                        .ok_or(unknown)?;
                    if slot.is_none() {
                        *slot = Some(Arc::new(Owner {
                            executor_id: listed.executor_id.clone(),
                            address: normalize_address(run.first, &listed.address)?,
                        }));
                    }
                    slot.clone()
                }
            };
            runs.push(TableRun {
                first: run.first,
                count: run.count,
                epoch: run.epoch,
                owner,
            });
        }
        runs.sort_by_key(|run| run.first);
        let shard_count = u64::from(table.shard_count);
        // Every shard once and inside the count. A gap is reported only when nothing worse is
        // found after it, as a table of routes reports a missing shard last.
        let mut covered_to = 0u64;
        let mut first_missing = None;
        for run in &runs {
            let first = u64::from(run.first);
            if first < covered_to {
                return Err(TableError::Duplicate(run.first));
            }
            if first > covered_to && first_missing.is_none() {
                first_missing = Some(covered_to);
            }
            if run.end() > shard_count {
                return Err(TableError::OutOfRange {
                    shard: u32::try_from(first.max(shard_count)).unwrap_or(u32::MAX),
                    shard_count: table.shard_count,
                });
            }
            covered_to = run.end();
        }
        if covered_to < shard_count && first_missing.is_none() {
            first_missing = Some(covered_to);
        }
        if let Some(missing) = first_missing {
            return Err(TableError::Missing(
                u32::try_from(missing).unwrap_or(u32::MAX),
            ));
        }
        Ok(Self {
            revision: table.revision,
            shard_count: table.shard_count,
            runs: merged(runs),
        })
    }

    fn build(
        revision: u64,
        shard_count: u32,
        rows: impl Iterator<Item = (u32, u64, Option<(String, String)>)>,
    ) -> Result<Self, TableError> {
        if shard_count > MAX_SHARD_COUNT {
            return Err(TableError::TooManyShards(shard_count));
        }
        let mut slots: Vec<Option<(u64, Option<Owner>)>> = vec![None; shard_count as usize];
        for (shard, epoch, owner) in rows {
            let owner = match owner {
                Some((executor_id, address)) => Some(Owner {
                    executor_id,
                    address: normalize_address(shard, &address)?,
                }),
                None => None,
            };
            let slot = slots
                .get_mut(shard as usize)
                .ok_or(TableError::OutOfRange { shard, shard_count })?;
            if slot.is_some() {
                return Err(TableError::Duplicate(shard));
            }
            *slot = Some((epoch, owner));
        }
        let mut runs: Vec<TableRun> = Vec::new();
        for (shard, slot) in (0..shard_count).zip(slots) {
            let (epoch, owner) = slot.ok_or(TableError::Missing(shard))?;
            match runs.last_mut() {
                Some(run) if run.epoch == epoch && run.owner.as_deref() == owner.as_ref() => {
                    run.count += 1;
                }
                _ => runs.push(TableRun {
                    first: shard,
                    count: 1,
                    epoch,
                    owner: owner.map(Arc::new),
                }),
            }
        }
        Ok(Self {
            revision,
            shard_count,
            runs,
        })
    }

    /// The revision (Raft log index) of the state the table was read from.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The cluster's shard count (0 before it is configured).
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// Every shard's row, ascending (made as it is read: the table keeps runs).
    pub fn routes(&self) -> impl Iterator<Item = ShardRoute> + '_ {
        self.runs.iter().flat_map(|run| {
            (run.first..=run.first.saturating_add(run.count - 1)).map(move |shard| ShardRoute {
                shard,
                epoch: run.epoch,
                owner: run.owner.as_deref().cloned(),
            })
        })
    }

    /// The row of `shard`, if it is inside the table.
    pub fn route(&self, shard: u32) -> Option<ShardRoute> {
        let run = self.run_of(shard)?;
        Some(ShardRoute {
            shard,
            epoch: run.epoch,
            owner: run.owner.as_deref().cloned(),
        })
    }

    fn run_of(&self, shard: u32) -> Option<&TableRun> {
        let after = self.runs.partition_point(|run| run.first <= shard);
        let run = self.runs.get(after.checked_sub(1)?)?;
        (u64::from(shard) < run.end()).then_some(run)
    }

    /// The shard of `key`, once the shard count is known.
    pub fn shard_of(&self, key: &[u8]) -> Option<u32> {
        NonZeroU32::new(self.shard_count()).map(|count| shard_for_key(key, count))
    }

    /// Where work for `key` goes, by this table.
    pub fn target(&self, key: &[u8]) -> Result<Target, RoutingError> {
        let shard = self.shard_of(key).ok_or(RoutingError::NotReady)?;
        let run = self.run_of(shard).ok_or(RoutingError::NotReady)?;
        let owner = run.owner.as_ref().ok_or(RoutingError::NoOwner {
            shard,
            revision: self.revision,
        })?;
        Ok(Target {
            shard,
            epoch: run.epoch,
            executor_id: owner.executor_id.clone(),
            address: owner.address.clone(),
            revision: self.revision,
        })
    }
}

/// `runs` (ascending, each shard once) with neighbours of one owner and one epoch joined.
fn merged(runs: Vec<TableRun>) -> Vec<TableRun> {
    let mut joined: Vec<TableRun> = Vec::with_capacity(runs.len());
    for run in runs {
        match joined.last_mut() {
            Some(last) if last.epoch == run.epoch && last.owner == run.owner => {
                last.count += run.count;
            }
            _ => joined.push(run),
        }
    }
    joined
}

/// Where one request goes: the answer of [`RoutingClient::route`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The key's shard.
    pub shard: u32,
    /// The shard's epoch in the table.
    pub epoch: u64,
    /// The owner.
    pub executor_id: String,
    /// The owner's base URL.
    pub address: String,
    /// The revision of the table that answered.
    pub revision: u64,
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
        if candidate.revision < current.table.revision {
            debug!(
                offered = candidate.revision,
                held = current.table.revision,
                "ignoring an older routing table (a lagging replica)"
            );
            return false;
        }
        current.confirmed_at = Some(Instant::now());
        // One revision is one state, so a table at the revision held is the table held.
        if candidate.revision == current.table.revision {
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
        let shared = Arc::new(Shared {
            managers,
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
            Some(tokio::spawn(follow(
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

    /// Where work for `key` goes, by the table as it is now (no I/O).
    pub fn route(&self, key: &[u8]) -> Result<Target, RoutingError> {
        self.inner.shared.table().target(key)
    }

    /// The table as it is now.
    pub fn table(&self) -> Arc<RouteTable> {
        self.inner.shared.table()
    }

    /// The table's revision.
    pub fn revision(&self) -> u64 {
        self.inner.shared.current().table.revision
    }

    /// Counters and the table's age.
    pub fn stats(&self) -> RoutingStats {
        let (revision, shard_count, confirmed_at) = {
            let current = self.inner.shared.current();
            (
                current.table.revision,
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
        if !request.path.starts_with('/') || request.path.starts_with("//") {
            return Err(RoutingError::InvalidRequest(format!(
                "{:?} must start with a single '/'",
                request.path
            )));
        }
        let mut refreshed = false;
        let mut sends = 0;
        let mut last_error = RoutingError::NotReady;
        for attempt in 1..=MAX_ATTEMPTS {
            let seen = self.revision();
            let target = match self.route(key) {
                Ok(target) => target,
                Err(error @ (RoutingError::NoOwner { .. } | RoutingError::NotReady)) => {
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
                Ok(reply) => {
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

/// The watcher: one `GET /v1/watch` at a time, from the table's revision; a failure pauses by
/// [`Backoff`]. Runs until the client is dropped (the task is aborted).
async fn follow(shared: Arc<Shared>, watch: Client, config: RoutingConfig) {
    let mut backoff = Backoff::new(config.retry_initial, config.retry_max);
    loop {
        let revision = shared.current().table.revision;
        shared
            .counters
            .watch_started
            .fetch_add(1, Ordering::Relaxed);
        // The routing view is far smaller than the state; clusters that serve it say so.
        let cluster_version = watch
            .cluster_version()
            .max(shared.managers.cluster_version());
        let followed = if cluster_version >= COMPACT_SHARDS_SCHEMA {
            watch
                .watch_routing(revision, config.watch_wait)
                .await
                .map(|runs| RouteTable::from_runs(&runs))
        } else {
            watch
                .watch(revision, config.watch_wait)
                .await
                .map(|reply| RouteTable::from_state(&reply.state))
        };
        let failure = match followed {
            Ok(table) => match table {
                Ok(table) => {
                    shared
                        .counters
                        .watch_replies
                        .fetch_add(1, Ordering::Relaxed);
                    let adopted_revision = table.revision;
                    if shared.offer(table) {
                        debug!(
                            revision = adopted_revision,
                            "routing table followed a change"
                        );
                    }
                    backoff.reset();
                    None
                }
                // A malformed state would come back at once on the next request: back off.
                Err(error) => Some(RoutingError::Table(error)),
            },
            Err(error) => Some(RoutingError::Managers(error)),
        };
        if let Some(error) = failure {
            shared
                .counters
                .watch_failures
                .fetch_add(1, Ordering::Relaxed);
            metrics::counter!("leasehold_routing_events_total", "event" => "watch_failures")
                .increment(1);
            let pause = jittered(backoff.next(), entropy());
            warn!(
                revision,
                code = error.label(),
                %error,
                pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                "routing watch failed; retrying after a pause"
            );
            tokio::time::sleep(pause).await;
        }
    }
}

/// Exponential backoff: `initial`, doubled per failure, capped at `max`; reset on success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
        }
    }

    fn next(&mut self) -> Duration {
        let pause = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        pause
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// `pause` scaled into `[pause/2, pause)` by `entropy`, so clients that failed together (a
/// manager outage) do not retry in lockstep.
fn jittered(pause: Duration, entropy: u32) -> Duration {
    let half = pause / 2;
    let spread = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    if spread == 0 {
        return pause;
    }
    half + Duration::from_nanos(u64::from(entropy) % spread)
}

/// Entropy for [`jittered`] without a random source: the clock's nanoseconds differ between
/// processes and between calls.
fn entropy() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.subsec_nanos())
        .unwrap_or(0)
}

/// An owner's address by the base-URL rule ([`crate::wire::normalize_base_url`]; the manager
/// accepted it at registration by `wire::validate_base_url`), without a trailing slash.
fn normalize_address(shard: u32, raw: &str) -> Result<String, TableError> {
    crate::wire::normalize_base_url(raw).map_err(|reason| TableError::BadAddress {
        shard,
        address: raw.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use axum::extract::{Query, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, put};
    use axum::{Json, Router};

    use super::*;
    use crate::problem::{ErrorCode, CLUSTER_VERSION_HEADER};
    use crate::wire::{
        ExecutorView, HandoffView, Route, RouteOwner, RouteRun, RoutingAnswer, ShardView,
        WatchReply,
    };

    const SHARDS: u32 = 8;

    fn executor(id: &str, address: &str) -> ExecutorView {
        ExecutorView {
            executor_id: id.into(),
            incarnation: format!("inc-{id}"),
            name: None,
            address: address.into(),
            lease_remaining_ms: 3000,
            registered_revision: 1,
            shards: Vec::new(),
            draining: false,
            capacity: crate::wire::DEFAULT_CAPACITY,
            load: None,
            utilisation: None,
        }
    }

    /// A state at `revision` where shard `s` is owned by `owners[s]` (an index into
    /// `executors`, or none), with no handoffs.
    fn state(revision: u64, executors: &[(&str, &str)], owners: &[Option<usize>]) -> StateView {
        StateView {
            revision,
            shard_count: u32::try_from(owners.len()).unwrap(),
            lease_duration_ms: 3000,
            executors: executors
                .iter()
                .map(|(id, address)| executor(id, address))
                .collect(),
            shards: owners
                .iter()
                .enumerate()
                .map(|(shard, owner)| ShardView {
                    shard: u32::try_from(shard).unwrap(),
                    owner: owner.map(|index| executors[index].0.to_owned()),
                    epoch: 1 + u64::from(owner.is_some()),
                    handoff: None,
                    load: None,
                    hot: false,
                })
                .collect(),
        }
    }

    /// What `/v1/routing` answers for `state` (written out, not through `from_state`).
    fn routing_of(state: &StateView) -> RoutingTable {
        RoutingTable {
            revision: state.revision,
            shard_count: state.shard_count,
            routes: state
                .shards
                .iter()
                .map(|shard| {
                    let owner = shard.owner.clone().filter(|_| shard.handoff.is_none());
                    let address = owner.as_ref().and_then(|id| {
                        state
                            .executors
                            .iter()
                            .find(|e| &e.executor_id == id)
                            .map(|e| e.address.clone())
                    });
                    Route {
                        shard: shard.shard,
                        executor_id: owner,
                        address,
                        epoch: shard.epoch,
                    }
                })
                .collect(),
        }
    }

    #[test]
    fn routing_table_from_state_routes_owners_but_not_shards_being_handed_off() {
        let mut view = state(
            7,
            &[
                ("ex-1", "http://127.0.0.1:1/"),
                ("ex-2", "http://127.0.0.1:2"),
            ],
            &[Some(0), Some(1), None, Some(1)],
        );
        view.shards[3].handoff = Some(HandoffView {
            to: Some("ex-1".into()),
            revoke_revision: 6,
            completes_by_expiry_in_ms: 100,
        });
        let table = RouteTable::from_state(&view).unwrap();
        assert_eq!(table.revision(), 7);
        assert_eq!(table.shard_count(), 4);
        let owners: Vec<Option<String>> = table
            .routes()
            .map(|route| route.owner.map(|o| o.address))
            .collect();
        assert_eq!(
            owners,
            [
                Some("http://127.0.0.1:1".to_owned()),
                Some("http://127.0.0.1:2".to_owned()),
                None,
                None
            ]
        );
        // The same rule as `/v1/routing`.
        assert_eq!(RouteTable::from_routing(&routing_of(&view)).unwrap(), table);
    }

    #[test]
    fn routing_table_needs_one_route_per_shard_and_usable_addresses() {
        let view = state(3, &[("ex-1", "http://127.0.0.1:1")], &[Some(0), Some(0)]);
        let good = routing_of(&view);
        let mut missing = good.clone();
        missing.routes.pop();
        assert_eq!(
            RouteTable::from_routing(&missing),
            Err(TableError::Missing(1))
        );
        let mut duplicate = good.clone();
        duplicate.routes[1].shard = 0;
        assert_eq!(
            RouteTable::from_routing(&duplicate),
            Err(TableError::Duplicate(0))
        );
        let mut beyond = good.clone();
        beyond.routes[1].shard = 2;
        assert_eq!(
            RouteTable::from_routing(&beyond),
            Err(TableError::OutOfRange {
                shard: 2,
                shard_count: 2
            })
        );
        let mut bad = good;
        bad.routes[0].address = Some("ftp://h:1".into());
        assert!(matches!(
            RouteTable::from_routing(&bad),
            Err(TableError::BadAddress { shard: 0, .. })
        ));
    }

    #[test]
    fn a_table_is_kept_as_maximal_runs_whatever_pieces_and_order_it_arrives_in() {
        let owners = vec![
            RouteOwner {
                executor_id: "ex-1".into(),
                address: "http://a:1/".into(),
            },
            RouteOwner {
                executor_id: "ex-2".into(),
                address: "http://b:2".into(),
            },
        ];
        let table = |runs: &[(u32, u32, Option<u32>, u64)]| RoutingRuns {
            revision: 5,
            shard_count: 10,
            owners: owners.clone(),
            runs: runs.iter().copied().map(RouteRun::from).collect(),
        };
        let whole = RouteTable::from_runs(&table(&[
            (0, 4, Some(0), 2),
            (4, 1, None, 1),
            (5, 5, Some(1), 3),
        ]))
        .unwrap();
        // The same table in pieces, out of order: one table.
        let pieces = RouteTable::from_runs(&table(&[
            (7, 3, Some(1), 3),
            (2, 2, Some(0), 2),
            (4, 1, None, 1),
            (0, 2, Some(0), 2),
            (5, 2, Some(1), 3),
        ]))
        .unwrap();
        assert_eq!(pieces, whole);
        assert_eq!(
            pieces.runs.len(),
            3,
            "neighbours of one owner and epoch are joined"
        );
        // A route per shard, looked up across every run boundary.
        let routes: Vec<ShardRoute> = whole.routes().collect();
        assert_eq!(routes.len(), 10);
        for (shard, route) in (0u32..).zip(&routes) {
            assert_eq!(route.shard, shard);
            assert_eq!(whole.route(shard).as_ref(), Some(route), "shard {shard}");
            let (epoch, owner) = match shard {
                0..=3 => (2, Some("http://a:1")),
                4 => (1, None),
                _ => (3, Some("http://b:2")),
            };
            assert_eq!(route.epoch, epoch, "shard {shard}");
            assert_eq!(
                route.owner.as_ref().map(|o| o.address.as_str()),
                owner,
                "shard {shard}"
            );
        }
        assert_eq!(whole.route(10), None);
        for key in ["a", "b", "c", "d", "e", "f"] {
            let shard = whole.shard_of(key.as_bytes()).unwrap();
            match (whole.target(key.as_bytes()), &routes[shard as usize].owner) {
                (Ok(target), Some(owner)) => {
                    assert_eq!((target.shard, &target.address), (shard, &owner.address));
                }
                (Err(RoutingError::NoOwner { shard: at, .. }), None) => assert_eq!(at, shard),
                (other, owner) => panic!("key {key}: {other:?} against {owner:?}"),
            }
        }
        // A gap is reported after what is worse beyond it, as a table of routes reports it.
        assert_eq!(
            RouteTable::from_runs(&table(&[(0, 2, None, 0), (3, 8, None, 0)])),
            Err(TableError::OutOfRange {
                shard: 10,
                shard_count: 10
            })
        );
        assert_eq!(
            RouteTable::from_runs(&table(&[(0, 2, None, 0), (3, 7, None, 0)])),
            Err(TableError::Missing(2))
        );
    }

    #[test]
    fn routing_runs_stand_for_the_same_table_and_malformed_runs_are_refused() {
        // Two blocks of two owners, an unowned shard, a shard being handed off, one epoch apart.
        let owners = [Some(0), Some(0), Some(0), None, Some(1), Some(1), Some(0)];
        let mut view = state(
            9,
            &[("ex-1", "http://a:1"), ("ex-2", "http://b:2")],
            &owners,
        );
        view.shards[5].handoff = Some(HandoffView {
            to: Some("ex-1".into()),
            revoke_revision: 8,
            completes_by_expiry_in_ms: 100,
        });
        view.shards[1].epoch = 7;
        let runs = runs_of(&view);
        assert_eq!(
            runs.runs,
            vec![
                RouteRun::from((0, 1, Some(0), 2)),
                RouteRun::from((1, 1, Some(0), 7)),
                RouteRun::from((2, 1, Some(0), 2)),
                RouteRun::from((3, 1, None, 1)),
                RouteRun::from((4, 1, Some(1), 2)),
                RouteRun::from((5, 1, None, 2)),
                RouteRun::from((6, 1, Some(0), 2)),
            ]
        );
        assert_eq!(runs.owners.len(), 2, "each owner is listed once");
        assert_eq!(
            RouteTable::from_runs(&runs),
            RouteTable::from_routing(&routing_of(&view))
        );
        // A block of one owner at one epoch is one run, however many shards it spans.
        let block = runs_of(&all_on(3, &[("ex-1", "http://a:1")], 0));
        assert_eq!(block.runs, vec![RouteRun::from((0, SHARDS, Some(0), 2))]);
        assert_eq!(
            serde_json::to_string(&block.runs).unwrap(),
            format!("[[0,{SHARDS},0,2]]")
        );

        let owner = || {
            vec![RouteOwner {
                executor_id: "ex-1".into(),
                address: "http://a:1".into(),
            }]
        };
        let table = |shard_count: u32, runs: &[(u32, u32, Option<u32>, u64)]| RoutingRuns {
            revision: 3,
            shard_count,
            owners: owner(),
            runs: runs.iter().copied().map(RouteRun::from).collect(),
        };
        let cases = [
            (table(4, &[(0, 2, Some(0), 1), (2, 2, None, 0)]), None),
            (
                table(4, &[(0, 2, Some(0), 1)]),
                Some(TableError::Missing(2)),
            ),
            (
                table(4, &[(0, 3, Some(0), 1), (2, 2, None, 0)]),
                Some(TableError::Duplicate(2)),
            ),
            (
                table(4, &[(0, u32::MAX, Some(0), 1)]),
                Some(TableError::OutOfRange {
                    shard: 4,
                    shard_count: 4,
                }),
            ),
            (
                table(4, &[(0, 0, Some(0), 1), (0, 4, None, 0)]),
                Some(TableError::EmptyRun(0)),
            ),
            (
                table(4, &[(0, 4, Some(1), 1)]),
                Some(TableError::UnknownOwner { shard: 0, owner: 1 }),
            ),
            (
                table(MAX_SHARD_COUNT + 1, &[(0, 4, None, 0)]),
                Some(TableError::TooManyShards(MAX_SHARD_COUNT + 1)),
            ),
        ];
        for (runs, refused) in cases {
            let result = RouteTable::from_runs(&runs);
            match refused {
                None => assert!(result.is_ok(), "{runs:?}: {result:?}"),
                Some(error) => assert_eq!(result, Err(error), "{runs:?}"),
            }
        }
        let mut bad_address = table(4, &[(0, 4, Some(0), 1)]);
        bad_address.owners[0].address = "ftp://a:1".into();
        assert!(matches!(
            RouteTable::from_runs(&bad_address),
            Err(TableError::BadAddress { shard: 0, .. })
        ));
    }

    #[test]
    fn routing_targets_follow_shard_for_key() {
        let owners: Vec<Option<usize>> = (0..SHARDS as usize)
            .map(|s| if s == 5 { None } else { Some(s % 2) })
            .collect();
        let table = RouteTable::from_state(&state(
            9,
            &[("ex-1", "http://a:1"), ("ex-2", "http://b:2")],
            &owners,
        ))
        .unwrap();
        let count = NonZeroU32::new(SHARDS).unwrap();
        for i in 0..64 {
            let key = format!("key-{i}");
            let shard = shard_for_key(key.as_bytes(), count);
            match table.target(key.as_bytes()) {
                Ok(target) => {
                    assert_eq!(target.shard, shard);
                    assert_eq!(target.revision, 9);
                    assert_eq!(target.epoch, 2);
                    let expected = ["http://a:1", "http://b:2"][owners[shard as usize].unwrap()];
                    assert_eq!(target.address, expected, "{key}");
                }
                Err(RoutingError::NoOwner {
                    shard: 5,
                    revision: 9,
                }) => assert_eq!(shard, 5),
                Err(other) => panic!("{key}: {other}"),
            }
        }
        assert!(matches!(
            RouteTable::default().target(b"k"),
            Err(RoutingError::NotReady)
        ));
    }

    fn shared() -> Shared {
        Shared {
            managers: Client::new(vec!["http://127.0.0.1:1".into()]).unwrap(),
            current: RwLock::new(Current::default()),
            refresh: tokio::sync::Mutex::new(()),
            counters: Counters::default(),
        }
    }

    #[test]
    fn routing_tables_move_only_forwards_and_an_older_reply_confirms_nothing() {
        let shared = shared();
        let executors = [("ex-1", "http://a:1"), ("ex-2", "http://b:2")];
        let at = |revision, owner| {
            RouteTable::from_state(&state(revision, &executors, &[Some(owner)])).unwrap()
        };
        assert!(shared.offer(at(5, 0)));
        let confirmed = shared.current().confirmed_at;
        assert!(confirmed.is_some());
        assert!(!shared.offer(at(4, 1)), "an older table is ignored");
        assert_eq!(shared.current().confirmed_at, confirmed);
        assert_eq!(shared.table().revision(), 5);
        assert!(
            !shared.offer(at(5, 0)),
            "the same revision is the same table"
        );
        assert!(shared.offer(at(6, 1)));
        assert_eq!(
            shared.table().route(0).unwrap().owner.unwrap().executor_id,
            "ex-2"
        );
        assert_eq!(shared.counters.tables_adopted.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn routing_watch_backoff_doubles_to_its_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(700));
        let pauses: Vec<u128> = (0..6).map(|_| backoff.next().as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 700, 700, 700]);
        backoff.reset();
        assert_eq!(backoff.next(), Duration::from_millis(100));
        let mut huge = Backoff::new(Duration::from_secs(1), Duration::MAX);
        for _ in 0..80 {
            huge.next();
        }
        for entropy in [0, 1, 999_999_999, u32::MAX] {
            let pause = jittered(Duration::from_millis(400), entropy);
            assert!(
                pause >= Duration::from_millis(200) && pause < Duration::from_millis(400),
                "{pause:?}"
            );
        }
        assert_eq!(jittered(Duration::ZERO, 7), Duration::ZERO);
    }

    #[test]
    fn routing_config_refuses_unbounded_or_busy_settings() {
        let base = RoutingConfig::default();
        assert!(base.validate().is_ok());
        for bad in [
            RoutingConfig {
                watch_wait: Duration::ZERO,
                ..base
            },
            RoutingConfig {
                watch_wait: MAX_WATCH_WAIT + Duration::from_secs(1),
                ..base
            },
            RoutingConfig {
                retry_initial: Duration::ZERO,
                ..base
            },
            RoutingConfig {
                retry_max: Duration::from_millis(1),
                ..base
            },
            RoutingConfig {
                executor_timeout: Duration::ZERO,
                ..base
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(RoutingError::InvalidConfig(_))),
                "{bad:?}"
            );
        }
    }

    // ---- Against in-process HTTP servers: a fake manager and fake executors ----

    /// A manager that serves `/v1/cluster`, `/v1/routing` and `/v1/watch` from one state the
    /// test replaces. At cluster version `Some(v)` it states `v` on every reply and serves the
    /// forms as runs; at `None` it is a manager of 0.1.0 (no version stated, no runs).
    #[derive(Clone)]
    struct FakeManager {
        state: Arc<Mutex<StateView>>,
        changed: Arc<tokio::sync::watch::Sender<u64>>,
        routing_calls: Arc<AtomicU64>,
        cluster_version: Option<u32>,
        /// Requests for the table or a watch in the state's form, and in runs.
        listed_replies: Arc<AtomicU64>,
        run_replies: Arc<AtomicU64>,
    }

    impl FakeManager {
        fn set(&self, state: StateView) {
            let revision = state.revision;
            *self.state.lock().unwrap() = state;
            self.changed.send_replace(revision);
        }

        fn routing_calls(&self) -> u64 {
            self.routing_calls.load(Ordering::Relaxed)
        }
    }

    fn runs_of(state: &StateView) -> RoutingRuns {
        let table = routing_of(state);
        RoutingRuns::collect(
            table.revision,
            table.shard_count,
            table.routes.iter().map(|route| {
                let owner = match (&route.executor_id, &route.address) {
                    (Some(id), Some(address)) => Some((id.as_str(), address.as_str())),
                    _ => None,
                };
                (route.shard, route.epoch, owner)
            }),
        )
    }

    async fn fake_routing(
        State(manager): State<FakeManager>,
        Query(query): Query<HashMap<String, String>>,
    ) -> Response {
        manager.routing_calls.fetch_add(1, Ordering::Relaxed);
        let state = manager.state.lock().unwrap().clone();
        let reply = match query.get("form").map(String::as_str) {
            None => {
                manager.listed_replies.fetch_add(1, Ordering::Relaxed);
                Json(routing_of(&state)).into_response()
            }
            Some("runs") if manager.cluster_version.is_some() => {
                manager.run_replies.fetch_add(1, Ordering::Relaxed);
                Json(RoutingAnswer::Runs(runs_of(&state))).into_response()
            }
            Some(_) => StatusCode::BAD_REQUEST.into_response(),
        };
        manager.stating_version(reply)
    }

    async fn fake_cluster(State(manager): State<FakeManager>) -> Response {
        let info = serde_json::json!({"node_id": 1, "term": 1, "voters": [], "learners": []});
        manager.stating_version(Json(info).into_response())
    }

    impl FakeManager {
        fn stating_version(&self, mut reply: Response) -> Response {
            if let Some(version) = self.cluster_version {
                reply
                    .headers_mut()
                    .insert(CLUSTER_VERSION_HEADER, version.to_string().parse().unwrap());
            }
            reply
        }
    }

    async fn fake_watch(
        State(manager): State<FakeManager>,
        Query(query): Query<HashMap<String, String>>,
    ) -> Response {
        let after: u64 = query["revision"].parse().unwrap();
        let wait_ms: u64 = query["wait"].strip_suffix("ms").unwrap().parse().unwrap();
        let mut changed = manager.changed.subscribe();
        let _ = tokio::time::timeout(
            Duration::from_millis(wait_ms),
            changed.wait_for(|&revision| revision > after),
        )
        .await;
        let state = manager.state.lock().unwrap().clone();
        let reply = match query.get("view").map(String::as_str) {
            None => {
                manager.listed_replies.fetch_add(1, Ordering::Relaxed);
                Json(WatchReply {
                    state,
                    departed: Vec::new(),
                })
                .into_response()
            }
            Some("routing") if manager.cluster_version.is_some() => {
                manager.run_replies.fetch_add(1, Ordering::Relaxed);
                Json(runs_of(&state)).into_response()
            }
            Some(_) => StatusCode::BAD_REQUEST.into_response(),
        };
        manager.stating_version(reply)
    }

    async fn serve(router: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        format!("http://{address}")
    }

    /// A manager of this release (cluster version [`COMPACT_SHARDS_SCHEMA`]).
    async fn fake_manager(initial: StateView) -> (FakeManager, String) {
        fake_manager_at(initial, Some(COMPACT_SHARDS_SCHEMA)).await
    }

    async fn fake_manager_at(
        initial: StateView,
        cluster_version: Option<u32>,
    ) -> (FakeManager, String) {
        let (changed, _) = tokio::sync::watch::channel(initial.revision);
        let manager = FakeManager {
            state: Arc::new(Mutex::new(initial)),
            changed: Arc::new(changed),
            routing_calls: Arc::new(AtomicU64::new(0)),
            cluster_version,
            listed_replies: Arc::new(AtomicU64::new(0)),
            run_replies: Arc::new(AtomicU64::new(0)),
        };
        let url = serve(
            Router::new()
                .route("/v1/cluster", get(fake_cluster))
                .route("/v1/routing", get(fake_routing))
                .route("/v1/watch", get(fake_watch))
                .with_state(manager.clone()),
        )
        .await;
        (manager, url)
    }

    /// An executor that answers `PUT /work` with `status`, counting requests.
    async fn fake_executor(status: StatusCode) -> (Arc<AtomicU64>, String) {
        let hits = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&hits);
        let url = serve(Router::new().route(
            "/work",
            put(move || {
                let counted = Arc::clone(&counted);
                async move {
                    counted.fetch_add(1, Ordering::Relaxed);
                    let mut problem = Problem::new(ErrorCode::Conflict, "not the owner");
                    problem.status = status.as_u16();
                    (status, Json(problem)).into_response()
                }
            }),
        ))
        .await;
        (hits, url)
    }

    fn test_config(follow: bool) -> RoutingConfig {
        RoutingConfig {
            follow,
            watch_wait: Duration::from_secs(5),
            executor_timeout: Duration::from_secs(2),
            managers: ClientConfig {
                request_timeout: Duration::from_secs(2),
                patience: Duration::from_secs(2),
                retry_interval: Duration::from_millis(50),
            },
            ..RoutingConfig::default()
        }
    }

    const WORK: RoutedRequest<'static> = RoutedRequest {
        method: &Method::PUT,
        path: "/work",
        body: Some(b"{}"),
    };

    /// Every shard on one executor.
    fn all_on(revision: u64, executors: &[(&str, &str)], owner: usize) -> StateView {
        state(revision, executors, &vec![Some(owner); SHARDS as usize])
    }

    #[tokio::test]
    async fn routing_a_421_refreshes_once_and_retries_at_the_new_owner() {
        let (old_hits, old) = fake_executor(StatusCode::MISDIRECTED_REQUEST).await;
        let (new_hits, new) = fake_executor(StatusCode::OK).await;
        let executors = [("ex-1", old.as_str()), ("ex-2", new.as_str())];
        let (manager, url) = fake_manager(all_on(10, &executors, 0)).await;
        let client = RoutingClient::connect(vec![url], test_config(false))
            .await
            .unwrap();
        assert_eq!(manager.routing_calls(), 1, "the initial load");
        // The shards move; the client does not follow, so its table is stale.
        manager.set(all_on(12, &executors, 1));

        let reply = client.send(b"k", WORK).await.unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.attempts, 2);
        assert_eq!(reply.target.executor_id, "ex-2");
        assert_eq!(reply.target.revision, 12);
        assert_eq!(old_hits.load(Ordering::Relaxed), 1);
        assert_eq!(new_hits.load(Ordering::Relaxed), 1);
        assert_eq!(manager.routing_calls(), 2, "exactly one refresh");
        let stats = client.stats();
        assert_eq!(
            (
                stats.misrouted,
                stats.refreshes,
                stats.retries,
                stats.revision
            ),
            (1, 1, 1, 12)
        );

        // The refreshed table now routes straight to the owner.
        let reply = client.send(b"k", WORK).await.unwrap();
        assert_eq!(reply.attempts, 1);
        assert_eq!(client.stats().misrouted, 1);
    }

    #[tokio::test]
    async fn routing_a_second_421_goes_back_to_the_caller_after_one_refresh() {
        let (hits, refusing) = fake_executor(StatusCode::MISDIRECTED_REQUEST).await;
        let (manager, url) = fake_manager(all_on(10, &[("ex-1", refusing.as_str())], 0)).await;
        let client = RoutingClient::connect(vec![url], test_config(false))
            .await
            .unwrap();
        let error = client.send(b"k", WORK).await.unwrap_err();
        assert!(
            matches!(&error, RoutingError::Misdirected { problem: Some(p), .. } if p.detail == "not the owner"),
            "{error}"
        );
        assert!(error.definitely_not_applied());
        assert_eq!(hits.load(Ordering::Relaxed), 2, "two sends, no more");
        assert_eq!(manager.routing_calls(), 2, "one load, one refresh");
        let stats = client.stats();
        assert_eq!((stats.misrouted, stats.refreshes, stats.retries), (2, 1, 1));
    }

    #[tokio::test]
    async fn routing_a_shard_without_owner_and_an_unreachable_owner_are_refreshed_once() {
        let (hits, live) = fake_executor(StatusCode::OK).await;
        // A port nobody listens on: connections are refused, nothing is sent.
        let dead = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let executors = [("ex-1", dead.as_str()), ("ex-2", live.as_str())];
        let (manager, url) =
            fake_manager(state(10, &executors, &vec![None; SHARDS as usize])).await;
        let client = RoutingClient::connect(vec![url], test_config(false))
            .await
            .unwrap();
        manager.set(all_on(11, &executors, 1));
        let reply = client.send(b"k", WORK).await.unwrap();
        assert_eq!((reply.status, reply.attempts), (200, 1));
        assert_eq!(manager.routing_calls(), 2);

        manager.set(all_on(12, &executors, 0));
        client.refresh().await.unwrap();
        manager.set(all_on(13, &executors, 1));
        let reply = client.send(b"k", WORK).await.unwrap();
        assert_eq!((reply.status, reply.attempts), (200, 2));
        assert_eq!(hits.load(Ordering::Relaxed), 2);
        assert_eq!(
            client.stats().misrouted,
            0,
            "refused connections are no misroutes"
        );
    }

    #[tokio::test]
    async fn routing_an_outcome_unknown_is_not_retried() {
        let hits = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&hits);
        let slow = serve(Router::new().route(
            "/work",
            put(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    StatusCode::OK
                }
            }),
        ))
        .await;
        let (manager, url) = fake_manager(all_on(10, &[("ex-1", slow.as_str())], 0)).await;
        let config = RoutingConfig {
            executor_timeout: Duration::from_millis(300),
            ..test_config(false)
        };
        let client = RoutingClient::connect(vec![url], config).await.unwrap();
        let error = client.send(b"k", WORK).await.unwrap_err();
        assert!(
            matches!(error, RoutingError::OutcomeUnknown { .. }),
            "{error}"
        );
        assert!(!error.definitely_not_applied());
        assert_eq!(hits.load(Ordering::Relaxed), 1);
        assert_eq!(manager.routing_calls(), 1, "no refresh");
    }

    #[tokio::test]
    async fn routing_follows_the_watch_to_each_new_table() {
        let (_, a) = fake_executor(StatusCode::OK).await;
        let (_, b) = fake_executor(StatusCode::OK).await;
        let executors = [("ex-1", a.as_str()), ("ex-2", b.as_str())];
        let (manager, url) = fake_manager(all_on(10, &executors, 0)).await;
        let client = RoutingClient::connect(vec![url], test_config(true))
            .await
            .unwrap();
        for (revision, owner) in [(11, 1), (14, 0), (15, 1)] {
            let started = client.stats().watch_started;
            manager.set(all_on(revision, &executors, owner));
            let deadline = Instant::now() + Duration::from_secs(10);
            while client.revision() < revision {
                assert!(
                    Instant::now() < deadline,
                    "the table did not follow {revision}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let target = client.route(b"k").unwrap();
            assert_eq!(target.executor_id, executors[owner].0);
            // The watch outstanding when the change came, or the next one, brought it.
            assert!(client.stats().watch_replies <= started + 1);
        }
        let stats = client.stats();
        assert_eq!(stats.watch_failures, 0);
        assert_eq!(stats.refreshes, 0, "the watch alone kept the table current");
        assert_eq!(manager.routing_calls(), 1);
        assert!(stats.table_age.is_some());
    }

    /// The table is read and followed as runs from managers that serve them, and as routes and
    /// states from managers of 0.1.0, which do not (docs/PROTOCOL.md, "Versions").
    #[tokio::test]
    async fn routing_reads_runs_from_clusters_that_serve_them_and_routes_from_older_ones() {
        let (_, a) = fake_executor(StatusCode::OK).await;
        let (_, b) = fake_executor(StatusCode::OK).await;
        let executors = [("ex-1", a.as_str()), ("ex-2", b.as_str())];
        for cluster_version in [None, Some(COMPACT_SHARDS_SCHEMA)] {
            let (manager, url) = fake_manager_at(all_on(10, &executors, 0), cluster_version).await;
            let client = RoutingClient::connect(vec![url], test_config(true))
                .await
                .unwrap();
            manager.set(all_on(11, &executors, 1));
            let deadline = Instant::now() + Duration::from_secs(10);
            while client.revision() < 11 {
                assert!(
                    Instant::now() < deadline,
                    "{cluster_version:?}: not followed"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(client.route(b"k").unwrap().executor_id, "ex-2");
            let listed = manager.listed_replies.load(Ordering::Relaxed);
            let runs = manager.run_replies.load(Ordering::Relaxed);
            match cluster_version {
                None => assert_eq!((listed >= 2, runs), (true, 0), "0.1.0"),
                Some(_) => assert_eq!((listed, runs >= 2), (0, true), "this release"),
            }
            assert_eq!(client.stats().watch_failures, 0);
        }
    }
}
