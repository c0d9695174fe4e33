//! The tokio shell around the admission core: shared state, the lease loop (register, renew,
//! back off, re-register), the lapse watcher, start-up (P8.1) and graceful stop (P3.7).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use leasehold_api::client::ClientError;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    AssignmentPush, ExecutorHealth, Grant, RegisterRequest, RenewRequest, RevokePush, ShardEpoch,
};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};
use tracing::{debug, error, info, warn};

use crate::admission::{
    AdmissionChange, AdmissionCore, AdmissionEvent, AdmissionReason, AdmissionState, AdmitError,
    Assignment, ForeignGrant, GrantApplied, Permit, PushApplied, PushError, RevokeApplied,
};
use crate::admission_log::{AdmissionLog, MonotonicReading};
use crate::assignment::SetOutcome;
use crate::config::ExecutorConfig;
use crate::lease::{LeaseClock, RetryBackoff};
use crate::manager::{ManagerApi, ManagerLink};
use crate::server;

/// Capacity of the [`ShardEvent`] broadcast. A lapse of an executor holding every shard of a
/// 1024-shard cluster emits 1024 events at once; a receiver further behind than this gets
/// `Lagged` and should re-read [`ExecutorHandle::assignment`].
pub const EVENT_CHANNEL_CAPACITY: usize = 4096;

/// Bound on the P8.1 self-check: the push listener must answer within this after binding.
const LISTENER_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Bound on draining the push server after deregistration (in-flight pushes and revokes).
const SERVER_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Slack on top of the shutdown grace before a stuck lease task is abandoned.
const SHUTDOWN_MARGIN: Duration = Duration::from_millis(500);

/// Admission started or stopped for a shard: what [`ExecutorHandle::events`] delivers, one per
/// admission log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardEvent {
    /// Work for `shard` is admitted from now on, fenced by `epoch`.
    Gained {
        /// The shard.
        shard: u32,
        /// Its epoch, the fencing token for downstream storage.
        epoch: u64,
        /// Assigned, or resumed after a lapse (P3.6).
        reason: AdmissionReason,
    },
    /// No new work for `shard` is admitted from now on; running work is not interrupted.
    Dropped {
        /// The shard.
        shard: u32,
        /// The epoch it was held at.
        epoch: u64,
        /// Unassigned, revoked, lease lapsed, unknown executor or shutdown.
        reason: AdmissionReason,
    },
}

impl From<&AdmissionEvent> for ShardEvent {
    fn from(event: &AdmissionEvent) -> Self {
        match event.change {
            AdmissionChange::Start => ShardEvent::Gained {
                shard: event.shard,
                epoch: event.epoch,
                reason: event.reason,
            },
            AdmissionChange::Stop => ShardEvent::Dropped {
                shard: event.shard,
                epoch: event.epoch,
                reason: event.reason,
            },
        }
    }
}

/// `GET /v1/status` and [`ExecutorHandle::status`]: the executor's own view (§9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ExecutorStatus {
    /// `None` until registered.
    pub executor_id: Option<String>,
    /// This process's current incarnation (P4.4).
    pub incarnation: String,
    /// Operator label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The advertised push address (P8.1).
    pub address: String,
    /// Admitting or fenced (P3.6).
    pub admission: AdmissionState,
    /// The executor's own lease time left (P3.2), zero once lapsed.
    pub lease_remaining_ms: u64,
    /// Revision of the last delivery applied (P4.1).
    pub revision: u64,
    /// The cluster's shard count, once known.
    pub shard_count: Option<u32>,
    /// Held shards with epochs.
    pub shards: Vec<ShardEpoch>,
    /// A graceful stop has begun (P3.7).
    pub stopping: bool,
    /// CLOCK_MONOTONIC (ns) when this status was read: places it on the admission log's
    /// timeline (§9).
    pub monotonic_ns: u64,
}

/// How the executor's background work ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Registered or trying to.
    Running,
    /// Stopped by [`ExecutorHandle::shutdown`].
    Stopped,
    /// Gave up: the manager refused the registration in a way retrying cannot fix (e.g. an
    /// advertised address it rejects).
    Failed(String),
}

/// Why [`Executor::start`] failed. Nothing keeps running after an error.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A configuration value cannot work.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The manager list cannot be used.
    #[error("manager endpoints: {0}")]
    Managers(#[from] ClientError),
    /// The admission log cannot be opened.
    #[error("cannot open the admission log {path}: {source}")]
    EventLog {
        /// The configured path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The push listener cannot be bound.
    #[error("cannot listen on {listen}: {source}")]
    Bind {
        /// The configured listen address.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// The push listener was bound but does not answer (P8.1: the executor registers only
    /// once it does).
    #[error("the push listener on {address} does not answer: {detail}")]
    ListenerNotServing {
        /// The bound address.
        address: SocketAddr,
        /// Why.
        detail: String,
    },
}

impl StartError {
    /// Whether the configuration itself is at fault (a value that can never work, such as a
    /// malformed URL), rather than the environment (a port in use, a file that cannot be opened).
    pub fn is_config_error(&self) -> bool {
        match self {
            StartError::InvalidConfig(_) => true,
            StartError::Managers(error) => matches!(
                error,
                ClientError::InvalidEndpoint(_) | ClientError::InvalidConfig(_)
            ),
            // `--listen` that is no socket address at all, as opposed to one in use.
            StartError::Bind { source, .. } => source.kind() == std::io::ErrorKind::InvalidInput,
            StartError::EventLog { .. } | StartError::ListenerNotServing { .. } => false,
        }
    }
}

/// State shared by the lease loop, the lapse watcher, the push server and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The core and the log, under one lock: admission decisions and the log lines recording
    /// their changes are serialized, so a `start` line is written before any permit it allows
    /// and a `stop` line after the last permit before it (§9).
    inner: Mutex<Inner>,
    /// Latest [`Assignment`], republished after every change.
    assignment_tx: watch::Sender<Assignment>,
    /// Admission changes for embedders.
    events_tx: broadcast::Sender<ShardEvent>,
    /// The advertised push address (P8.1).
    address: String,
    /// Operator label.
    name: Option<String>,
}

#[derive(Debug)]
struct Inner {
    core: AdmissionCore,
    /// `None` without `--event-log`.
    log: Option<AdmissionLog>,
    /// Random per process start, and again per re-registration after `unknown_executor`: the
    /// registration's idempotency key (P4.4, P7.2).
    incarnation: String,
    /// A register request under `incarnation` may have reached the manager: a graceful stop
    /// must then find and deregister that executor even if the reply never arrived (P7.2).
    register_sent: bool,
}

/// A fresh random incarnation.
fn new_incarnation() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl Shared {
    pub(crate) fn new(address: String, name: Option<String>, log: Option<AdmissionLog>) -> Self {
        let core = AdmissionCore::default();
        let (assignment_tx, _) = watch::channel(core.view(Instant::now()));
        let (events_tx, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        Self {
            inner: Mutex::new(Inner {
                core,
                log,
                incarnation: new_incarnation(),
                register_sent: false,
            }),
            assignment_tx,
            events_tx,
            address,
            name,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves the core consistent before anything can panic (the
        // core's operations do not panic), so a poisoned lock still guards valid state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one core operation at the current instant, records its admission changes (log
    /// first, while still holding the lock; then the broadcast) and republishes the view.
    fn apply<T>(
        &self,
        operation: impl FnOnce(&mut AdmissionCore, Instant) -> (T, Vec<AdmissionEvent>),
    ) -> T {
        let mut inner = self.lock();
        let now = Instant::now();
        let (value, events) = operation(&mut inner.core, now);
        if !events.is_empty() {
            if let Some(log) = inner.log.as_mut() {
                if let Err(error) = log.record(&events) {
                    // The log is an audit trail; admission does not depend on it. Say loudly
                    // that it is now incomplete.
                    error!(%error, path = %log.path().display(), "cannot write the admission log");
                }
            }
            for event in &events {
                // No receivers is fine: embedders subscribe only if they care.
                let _ = self.events_tx.send(ShardEvent::from(event));
            }
            log_transitions(&events);
        }
        let view = inner.core.view(now);
        self.assignment_tx.send_if_modified(|current| {
            if *current == view {
                false
            } else {
                *current = view;
                true
            }
        });
        value
    }

    pub(crate) fn admit(&self, shard: u32) -> Result<Permit, AdmitError> {
        let inner = self.lock();
        inner.core.admit(shard, Instant::now())
    }

    pub(crate) fn admit_key(&self, key: &[u8]) -> Result<Permit, AdmitError> {
        let inner = self.lock();
        inner.core.admit_key(key, Instant::now())
    }

    pub(crate) fn apply_grant(
        &self,
        sent_at: Instant,
        grant: &Grant,
    ) -> Result<GrantApplied, ForeignGrant> {
        self.apply_delivery(
            |core, now| core.apply_grant(sent_at, grant, now),
            |a| &a.events,
        )
    }

    pub(crate) fn apply_push(&self, push: &AssignmentPush) -> Result<PushApplied, PushError> {
        self.apply_delivery(|core, now| core.apply_push(push, now), |a| &a.events)
    }

    pub(crate) fn apply_revoke(&self, revoke: &RevokePush) -> Result<RevokeApplied, PushError> {
        self.apply_delivery(|core, now| core.apply_revoke(revoke, now), |a| &a.events)
    }

    /// [`Shared::apply`] for a delivery that may be refused: a refused one changed nothing and
    /// records no events; an applied one records the events it carries.
    fn apply_delivery<T, E>(
        &self,
        delivery: impl FnOnce(&mut AdmissionCore, Instant) -> Result<T, E>,
        events_of: impl FnOnce(&T) -> &Vec<AdmissionEvent>,
    ) -> Result<T, E> {
        self.apply(|core, now| match delivery(core, now) {
            Ok(applied) => {
                let events = events_of(&applied).clone();
                (Ok(applied), events)
            }
            Err(error) => (Err(error), Vec::new()),
        })
    }

    /// Records a lapse, if one happened (the lapse watcher calls this at the expiry).
    fn settle(&self) {
        self.apply(|core, now| ((), core.settle(now)));
    }

    /// `unknown_executor`: stop admitting everything, forget the registration, and pick a new
    /// incarnation for the next one.
    fn forget_executor(&self) {
        self.apply(|core, now| ((), core.forget_executor(now)));
        let mut inner = self.lock();
        inner.incarnation = new_incarnation();
        inner.register_sent = false;
    }

    /// P3.7, first step.
    fn stop_admission(&self) {
        self.apply(|core, now| ((), core.stop_admission(now)));
    }

    fn lease(&self) -> LeaseClock {
        *self.lock().core.lease()
    }

    fn renewal(&self) -> Option<(String, RenewRequest)> {
        self.lock().core.renewal()
    }

    fn executor_id(&self) -> Option<String> {
        self.lock().core.executor_id().map(str::to_owned)
    }

    /// The register request for the current incarnation; `mark_sent` records that it may reach
    /// the manager.
    fn register_request(&self, mark_sent: bool) -> RegisterRequest {
        let mut inner = self.lock();
        if mark_sent {
            inner.register_sent = true;
        }
        RegisterRequest {
            incarnation: inner.incarnation.clone(),
            address: self.address.clone(),
            name: self.name.clone(),
        }
    }

    fn register_sent(&self) -> bool {
        self.lock().register_sent
    }

    pub(crate) fn health(&self) -> Option<ExecutorHealth> {
        let inner = self.lock();
        Some(ExecutorHealth {
            executor_id: inner.core.executor_id()?.to_owned(),
            incarnation: inner.incarnation.clone(),
        })
    }

    pub(crate) fn status(&self) -> ExecutorStatus {
        let inner = self.lock();
        let now = Instant::now();
        let view = inner.core.view(now);
        let monotonic_ns = MonotonicReading::now()
            .map(|reading| reading.monotonic_ns())
            .unwrap_or(0);
        ExecutorStatus {
            executor_id: view.executor_id.clone(),
            incarnation: inner.incarnation.clone(),
            name: self.name.clone(),
            address: self.address.clone(),
            admission: view.admission,
            lease_remaining_ms: u64::try_from(view.lease_remaining(now).as_millis())
                .unwrap_or(u64::MAX),
            revision: view.revision,
            shard_count: view.shard_count,
            shards: view.shards,
            stopping: view.stopping,
            monotonic_ns,
        }
    }

    pub(crate) fn subscribe_assignment(&self) -> watch::Receiver<Assignment> {
        self.assignment_tx.subscribe()
    }

    pub(crate) fn subscribe_events(&self) -> broadcast::Receiver<ShardEvent> {
        self.events_tx.subscribe()
    }
}

/// Operator-facing logs for admission transitions: one line per operation, not per shard.
fn log_transitions(events: &[AdmissionEvent]) {
    let count = |change: AdmissionChange, reason: AdmissionReason| {
        events
            .iter()
            .filter(|e| e.change == change && e.reason == reason)
            .count()
    };
    let lapsed = count(AdmissionChange::Stop, AdmissionReason::LeaseLapsed);
    if lapsed > 0 {
        metrics::counter!("leasehold_executor_lapses_total").increment(1);
        warn!(
            shards = lapsed,
            "lease lapsed: self-fenced, admitting nothing until a renewal succeeds (P3.6)"
        );
    }
    let resumed = count(AdmissionChange::Start, AdmissionReason::Resumed);
    if resumed > 0 {
        info!(
            shards = resumed,
            "lease renewed after a lapse: admission resumed (P3.6)"
        );
    }
    let started = events
        .iter()
        .filter(|e| e.change == AdmissionChange::Start)
        .count();
    let stopped = events.len() - started;
    metrics::counter!("leasehold_executor_admission_changes_total", "change" => "start")
        .increment(started as u64);
    metrics::counter!("leasehold_executor_admission_changes_total", "change" => "stop")
        .increment(stopped as u64);
    debug!(started, stopped, "admission changed");
}

/// A cancellation signal every loop selects on.
#[derive(Debug, Clone)]
pub(crate) struct ShutdownSignal(watch::Receiver<bool>);

impl ShutdownSignal {
    pub(crate) fn new() -> (watch::Sender<bool>, Self) {
        let (tx, rx) = watch::channel(false);
        (tx, Self(rx))
    }

    /// Resolves once shutdown was asked for (or its sender is gone).
    pub(crate) async fn wait(&mut self) {
        let _ = self.0.wait_for(|&stop| stop).await;
    }
}

/// Whether a refused registration can never succeed by retrying: the request itself is wrong.
fn registration_is_hopeless(error: &ClientError) -> bool {
    match error {
        ClientError::InvalidEndpoint(_)
        | ClientError::InvalidConfig(_)
        | ClientError::InvalidRequest(_) => true,
        other => matches!(
            other.code(),
            Some(
                ErrorCode::InvalidRequest
                    | ErrorCode::PayloadTooLarge
                    | ErrorCode::UnsupportedMediaType
                    | ErrorCode::NotFound
                    | ErrorCode::MethodNotAllowed
            )
        ),
    }
}

/// Applies a grant and logs what it did; `Ok(())` when it moved the lease.
fn take_grant(
    shared: &Shared,
    sent_at: Instant,
    grant: &Grant,
    what: &str,
) -> Result<(), ForeignGrant> {
    let applied = shared.apply_grant(sent_at, grant)?;
    match &applied.set {
        Ok(SetOutcome::Applied { dropped, gained })
            if !dropped.is_empty() || !gained.is_empty() =>
        {
            info!(
                executor_id = %grant.executor_id,
                revision = grant.revision,
                dropped = dropped.len(),
                gained = gained.len(),
                "{what}: set changed (P4.2)"
            );
        }
        Ok(SetOutcome::Stale {
            revision,
            applied_revision,
        }) => debug!(
            revision,
            applied_revision,
            "{what}: set older than the last delivery; lease moved, set kept (P3.3)"
        ),
        Ok(SetOutcome::Applied { .. }) => {}
        Err(error) => warn!(%error, "{what}: malformed set ignored; lease moved"),
    }
    Ok(())
}

/// The lease loop: register, then renew after a third of the remaining lease, back off on
/// failure, re-register after `unknown_executor` (P3.5, P4.4). Ends when `shutdown` fires,
/// after the graceful stop (P3.7), or when registration is hopeless.
pub(crate) async fn run_lease_loop<M: ManagerApi>(
    shared: Arc<Shared>,
    manager: Arc<M>,
    mut shutdown: ShutdownSignal,
    shutdown_grace: Duration,
) -> RunState {
    let state = tokio::select! {
        state = lease_loop(&shared, manager.as_ref()) => state,
        () = shutdown.wait() => RunState::Stopped,
    };
    match state {
        RunState::Stopped | RunState::Running => {
            stop_gracefully(&shared, manager.as_ref(), shutdown_grace).await;
        }
        // No registration stands, so nothing to hand back; just make sure nothing is admitted.
        RunState::Failed(_) => shared.stop_admission(),
    }
    state
}

/// Register and renew forever; returns only when registration is hopeless. Every wait is
/// bounded by the backoff or the renewal schedule, and the whole loop is cancelled by dropping
/// it (the caller selects on shutdown).
async fn lease_loop<M: ManagerApi>(shared: &Shared, manager: &M) -> RunState {
    let mut backoff = RetryBackoff::default();
    let mut next_attempt_at = Instant::now();
    loop {
        sleep_until(next_attempt_at).await;
        match shared.renewal() {
            None => {
                let request = shared.register_request(true);
                // P3.2: read just before the request leaves.
                let sent_at = Instant::now();
                let result = manager.register(&request).await;
                crate::metrics::count_lease_call(
                    "register",
                    if result.is_ok() { "granted" } else { "failed" },
                );
                match result {
                    Ok(grant) => match take_grant(shared, sent_at, &grant, "registered") {
                        Ok(()) => {
                            info!(executor_id = %grant.executor_id, lease_ttl_ms = grant.lease_ttl_ms, shards = grant.shards.len(), "registered");
                            backoff.reset();
                            next_attempt_at = shared.lease().next_renewal_at(Instant::now());
                        }
                        Err(error) => {
                            warn!(%error, "ignoring a registration reply for another executor");
                            next_attempt_at =
                                backoff.next_retry_at(Instant::now(), &shared.lease());
                        }
                    },
                    Err(error) if registration_is_hopeless(&error) => {
                        error!(%error, "the manager refused the registration; giving up");
                        return RunState::Failed(error.to_string());
                    }
                    Err(error) => {
                        next_attempt_at = backoff.next_retry_at(Instant::now(), &shared.lease());
                        warn!(%error, retry_in_ms = millis(next_attempt_at.saturating_duration_since(Instant::now())), "registration failed; retrying");
                    }
                }
            }
            Some((executor_id, request)) => {
                let sent_at = Instant::now();
                let result = manager.renew(&executor_id, &request).await;
                crate::metrics::count_lease_call(
                    "renew",
                    match &result {
                        Ok(_) => "granted",
                        Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => {
                            "unknown_executor"
                        }
                        Err(_) => "failed",
                    },
                );
                match result {
                    Ok(grant) => match take_grant(shared, sent_at, &grant, "renewed") {
                        Ok(()) => {
                            backoff.reset();
                            next_attempt_at = shared.lease().next_renewal_at(Instant::now());
                        }
                        Err(error) => {
                            warn!(%error, "ignoring a renewal reply for another executor");
                            next_attempt_at =
                                backoff.next_retry_at(Instant::now(), &shared.lease());
                        }
                    },
                    Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => {
                        warn!(%executor_id, "the manager no longer knows this executor (reaped or removed): stopping all admission and registering anew");
                        shared.forget_executor();
                        backoff.reset();
                        next_attempt_at = Instant::now();
                    }
                    Err(error) => {
                        let now = Instant::now();
                        let lease = shared.lease();
                        next_attempt_at = backoff.next_retry_at(now, &lease);
                        warn!(%error, %executor_id, lease_remaining_ms = millis(lease.remaining(now)), retry_in_ms = millis(next_attempt_at - now), "renewal failed; retrying before the lease ends (P3.5)");
                    }
                }
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// P3.7: stop admission, then deregister within the grace, so the shards move at once instead
/// of after the lease.
async fn stop_gracefully<M: ManagerApi>(shared: &Shared, manager: &M, grace: Duration) {
    shared.stop_admission();
    let deadline = Instant::now() + grace;
    let deregister = async {
        let executor_id = match shared.executor_id() {
            Some(executor_id) => executor_id,
            // A register whose reply never arrived may have created an executor; the same
            // incarnation finds it (P7.2) so it can be deregistered instead of left to lapse.
            None if shared.register_sent() => {
                manager
                    .register(&shared.register_request(false))
                    .await?
                    .executor_id
            }
            None => return Ok(None),
        };
        match manager.deregister(&executor_id).await {
            Ok(()) => Ok(Some(executor_id)),
            // Already gone (reaped, or an earlier attempt succeeded): nothing left to hand back.
            Err(error)
                if matches!(
                    error.code(),
                    Some(ErrorCode::UnknownExecutor | ErrorCode::NotFound)
                ) =>
            {
                Ok(Some(executor_id))
            }
            Err(error) => Err(error),
        }
    };
    match timeout_at(deadline, deregister).await {
        Ok(Ok(Some(executor_id))) => {
            info!(%executor_id, "deregistered; shards move at once (P3.7)")
        }
        Ok(Ok(None)) => info!("stopped before registering"),
        Ok(Err(error)) => {
            warn!(%error, "deregistration failed; the shards move when the lease lapses")
        }
        Err(_) => warn!(
            grace_ms = millis(grace),
            "deregistration did not finish within the grace; the shards move when the lease lapses"
        ),
    }
}

/// Records each lapse at its expiry, so the log, the assignment watch and the events stream
/// show it even when nothing else happens (the core already refuses work from the expiry on).
pub(crate) async fn watch_lapses(shared: Arc<Shared>, mut shutdown: ShutdownSignal) {
    let mut assignment = shared.subscribe_assignment();
    loop {
        let wake_at = {
            let view = assignment.borrow_and_update();
            match (view.admission, view.lease_expiry) {
                (AdmissionState::Admitting, Some(expiry)) => Some(expiry),
                _ => None,
            }
        };
        tokio::select! {
            () = sleep_until(wake_at.unwrap_or_else(Instant::now)), if wake_at.is_some() => shared.settle(),
            changed = assignment.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = shutdown.wait() => return,
        }
    }
}

/// P8.1: the push listener answers HTTP before the executor makes itself known. One request to
/// `GET /v1/health` on the bound address; any HTTP status line will do.
async fn check_listener_serves(address: SocketAddr) -> Result<(), String> {
    let probe_address = if address.ip().is_unspecified() {
        let loopback = if address.is_ipv4() {
            std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST)
        } else {
            std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
        };
        SocketAddr::new(loopback, address.port())
    } else {
        address
    };
    let probe = async {
        let mut stream = TcpStream::connect(probe_address).await?;
        stream
            .write_all(b"GET /v1/health HTTP/1.1\r\nHost: self-check\r\nConnection: close\r\n\r\n")
            .await?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(head)
    };
    match timeout(LISTENER_CHECK_TIMEOUT, probe).await {
        Ok(Ok(head)) if head.starts_with(b"HTTP/1.") => Ok(()),
        Ok(Ok(head)) => Err(format!(
            "unexpected reply {:?}",
            String::from_utf8_lossy(&head)
        )),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {LISTENER_CHECK_TIMEOUT:?}")),
    }
}

/// The advertised address: `--advertise`, else `http://<bound address>` (P8.1).
fn advertised_address(config: &ExecutorConfig, bound: SocketAddr) -> Result<String, StartError> {
    match &config.advertise {
        Some(url) => {
            let trimmed = url.trim_end_matches('/');
            leasehold_api::wire::validate_base_url(trimmed)
                .map_err(|reason| StartError::InvalidConfig(format!("--advertise: {reason}")))?;
            Ok(trimmed.to_owned())
        }
        None if bound.ip().is_unspecified() => Err(StartError::InvalidConfig(format!(
            "listening on the wildcard address {bound} needs --advertise: managers cannot push to it"
        ))),
        None => Ok(format!("http://{bound}")),
    }
}

/// Background tasks owned by the handle until shutdown.
#[derive(Debug)]
struct Tasks {
    lease: JoinHandle<RunState>,
    lapse_watcher: JoinHandle<()>,
    server: JoinHandle<()>,
}

#[derive(Debug)]
struct Control {
    local_addr: SocketAddr,
    shutdown_grace: Duration,
    /// Stops the lease loop (which then stops admission and deregisters) and the watcher.
    shutdown_tx: watch::Sender<bool>,
    /// Stops the push server, after deregistration.
    server_stop_tx: watch::Sender<bool>,
    /// Taken by the first shutdown.
    tasks: tokio::sync::Mutex<Option<Tasks>>,
    run_state_tx: watch::Sender<RunState>,
    /// For embedders' own manager calls.
    manager: ManagerLink,
}

/// Entry point: starts an executor.
#[derive(Debug)]
pub struct Executor;

impl Executor {
    /// Binds the push listener, starts serving it, and once it answers (P8.1) starts the lease
    /// loop in the background, which registers with a fresh incarnation and keeps the lease.
    /// Returns without waiting for the registration: watch [`ExecutorHandle::assignment`].
    pub async fn start(config: ExecutorConfig) -> Result<ExecutorHandle, StartError> {
        Self::start_with_routes(config, |_| Router::new()).await
    }

    /// [`Executor::start`], serving `routes(handle)` on the same listener as the push
    /// endpoints (the binary's demo workload does this). The routes must not reuse the
    /// executor's paths (`/v1/assignment`, `/v1/revoke`, `/v1/health`, `/v1/status`); axum
    /// panics at start-up on an overlap, a programming error.
    pub async fn start_with_routes(
        config: ExecutorConfig,
        routes: impl FnOnce(&ExecutorHandle) -> Router,
    ) -> Result<ExecutorHandle, StartError> {
        if config.shutdown_grace.is_zero() {
            return Err(StartError::InvalidConfig(
                "the shutdown grace (--shutdown-grace) must be positive".into(),
            ));
        }
        let manager = ManagerLink::new(config.managers.clone(), config.request_timeout)?;
        let log = match &config.event_log {
            Some(path) => {
                Some(
                    AdmissionLog::open(path).map_err(|source| StartError::EventLog {
                        path: path.display().to_string(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        let listener =
            TcpListener::bind(&config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    listen: config.listen.clone(),
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            listen: config.listen.clone(),
            source,
        })?;
        let address = advertised_address(&config, local_addr)?;
        let shared = Arc::new(Shared::new(address, config.name.clone(), log));

        let (shutdown_tx, shutdown) = ShutdownSignal::new();
        let (server_stop_tx, mut server_stop) = ShutdownSignal::new();
        let (run_state_tx, _) = watch::channel(RunState::Running);
        let handle = ExecutorHandle {
            shared: Arc::clone(&shared),
            control: Arc::new(Control {
                local_addr,
                shutdown_grace: config.shutdown_grace,
                shutdown_tx,
                server_stop_tx,
                tasks: tokio::sync::Mutex::new(None),
                run_state_tx,
                manager: manager.clone(),
            }),
        };
        let app = server::app(Arc::clone(&shared), routes(&handle));
        let server = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { server_stop.wait().await })
                .await;
            if let Err(error) = served {
                error!(%error, "push listener failed");
            }
        });
        if let Err(detail) = check_listener_serves(local_addr).await {
            server.abort();
            return Err(StartError::ListenerNotServing {
                address: local_addr,
                detail,
            });
        }
        info!(%local_addr, address = %shared.address, "push listener serving; registering (P8.1)");
        let lease = {
            let run = run_lease_loop(
                Arc::clone(&shared),
                Arc::new(manager),
                shutdown.clone(),
                config.shutdown_grace,
            );
            let control = Arc::clone(&handle.control);
            tokio::spawn(async move {
                let state = run.await;
                // A failure is reported at once; a stop is reported by `shutdown` once the
                // listener has drained too.
                if matches!(state, RunState::Failed(_)) {
                    control.run_state_tx.send_replace(state.clone());
                }
                state
            })
        };
        let lapse_watcher = tokio::spawn(watch_lapses(Arc::clone(&shared), shutdown));
        *handle.control.tasks.lock().await = Some(Tasks {
            lease,
            lapse_watcher,
            server,
        });
        Ok(handle)
    }
}

/// A running executor. Cheap to clone; every clone controls the same executor.
///
/// Dropping the handles does not stop the executor (its tasks run until the runtime ends);
/// call [`ExecutorHandle::shutdown`] for the graceful stop of P3.7.
#[derive(Debug, Clone)]
pub struct ExecutorHandle {
    shared: Arc<Shared>,
    control: Arc<Control>,
}

impl ExecutorHandle {
    /// The executor's view, republished on every change: held shards with epochs, revision,
    /// admitting or fenced. A lapse shows here at the expiry (the lapse watcher); for the
    /// decision itself use [`ExecutorHandle::admit`], which is exact.
    pub fn assignment(&self) -> watch::Receiver<Assignment> {
        self.shared.subscribe_assignment()
    }

    /// May work for `shard` start now? `Permit { shard, epoch }`, or `NotReady` when fenced
    /// (P3.6: answer `503 sharding_not_ready`), or `NotOwner`. A permit is never withdrawn:
    /// running work is not interrupted.
    pub fn admit(&self, shard: u32) -> Result<Permit, AdmitError> {
        self.shared.admit(shard)
    }

    /// [`ExecutorHandle::admit`] for the shard of `key` (`leasehold_api::shard_for_key`).
    pub fn admit_key(&self, key: &[u8]) -> Result<Permit, AdmitError> {
        self.shared.admit_key(key)
    }

    /// Admission changes as they happen (bounded: see [`EVENT_CHANNEL_CAPACITY`]).
    pub fn events(&self) -> broadcast::Receiver<ShardEvent> {
        self.shared.subscribe_events()
    }

    /// The executor's own view, as `GET /v1/status` shows it.
    pub fn status(&self) -> ExecutorStatus {
        self.shared.status()
    }

    /// The registration's id and incarnation, once registered.
    pub fn health(&self) -> Option<ExecutorHealth> {
        self.shared.health()
    }

    /// The bound push listener address.
    pub fn local_addr(&self) -> SocketAddr {
        self.control.local_addr
    }

    /// The address managers push to (P8.1).
    pub fn advertised_address(&self) -> &str {
        &self.shared.address
    }

    /// A manager client with the protocol's patience (P7.1), for the embedder's own lookups.
    pub fn manager_client(&self) -> &leasehold_api::Client {
        self.control.manager.client()
    }

    /// The owner of `key` according to the manager (`GET /v1/routing?key=K`), asked with a
    /// short patience.
    pub async fn route_for_key(
        &self,
        key: &str,
    ) -> Result<leasehold_api::wire::KeyRoute, ClientError> {
        self.control.manager.route_for_key(key).await
    }

    /// Resolves when the executor has ended: stopped by [`ExecutorHandle::shutdown`] (once it
    /// completed), or failed on its own (registration hopeless). The binary exits on the latter.
    pub async fn terminated(&self) -> RunState {
        let mut run_state = self.control.run_state_tx.subscribe();
        let result = run_state
            .wait_for(|state| *state != RunState::Running)
            .await
            .map(|state| state.clone());
        result.unwrap_or(RunState::Stopped)
    }

    /// Graceful stop (P3.7): stop admission, deregister within the grace, then close the push
    /// listener. Bounded by the grace plus a small margin; safe to call more than once and from
    /// several clones (later calls wait for the first).
    pub async fn shutdown(&self) -> RunState {
        self.control.shutdown_tx.send_replace(true);
        let tasks = self.control.tasks.lock().await.take();
        let Some(tasks) = tasks else {
            return self.terminated().await;
        };
        let bound = self.control.shutdown_grace + SHUTDOWN_MARGIN;
        let mut lease = tasks.lease;
        let state = match timeout(bound, &mut lease).await {
            Ok(Ok(state)) => state,
            Ok(Err(error)) => RunState::Failed(format!("lease task ended abnormally: {error}")),
            Err(_) => {
                lease.abort();
                // Admission must end even if the task is stuck.
                self.shared.stop_admission();
                RunState::Failed("the graceful stop overran its grace".into())
            }
        };
        let _ = tasks.lapse_watcher.await;
        self.control.server_stop_tx.send_replace(true);
        let mut server = tasks.server;
        if timeout(SERVER_DRAIN_TIMEOUT, &mut server).await.is_err() {
            server.abort();
        }
        let final_state = match state {
            RunState::Running => RunState::Stopped,
            other => other,
        };
        self.control.run_state_tx.send_replace(final_state.clone());
        final_state
    }
}
