//! The state one executor's tasks share: the admission core and the admission log under one
//! lock, and the channels that publish its changes. The lease loop, the lapse watcher, the push
//! handlers and every [`crate::ExecutorHandle`] hold an `Arc<Shared>`; nothing else holds the
//! core.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold_api::wire::{
    AssignmentPush, Credential, ExecutorHealth, Grant, RegisterRequest, RenewRequest, RevokePush,
    CAPACITY_SCHEMA, DEFAULT_CAPACITY, REPLICAS_SCHEMA,
};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::admission::{
    AdmissionChange, AdmissionCore, AdmissionEvent, AdmissionReason, AdmitError, AppliedMark,
    Assignment, ForeignGrant, GrantApplied, Permit, PushApplied, PushError, RevokeApplied,
    RoleWanted,
};
use crate::admission_log::{AdmissionLog, MonotonicReading};
use crate::assignment::NotSecondary;
use crate::hooks::{HookRunner, Hooks};
use crate::lease::LeaseClock;
use crate::load_meter::{LoadMeter, PendingReport};
use crate::sidecar::link::ServiceLink;
use crate::status::{ExecutorStatus, ShardEvent};

/// Capacity of the [`ShardEvent`] broadcast. A lapse of an executor holding every shard of a
/// 1024-shard cluster emits 1024 events at once; a receiver further behind than this gets
/// `Lagged` and should re-read [`crate::ExecutorHandle::assignment`].
pub const EVENT_CHANNEL_CAPACITY: usize = 4096;

/// State shared by the lease loop, the lapse watcher, the push server and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The core and the log, under one lock: admission decisions and the log lines recording
    /// their changes are serialized, so a `start` line is written before any permit it allows
    /// and a `stop` line after the last permit before it (§9).
    ///
    /// A `std::sync::Mutex`, not a tokio one: no section holding it awaits (nothing in this
    /// file is `async`), and every section is short: a core operation in memory, then, when
    /// admission changed, one `write` per change to the admission log (page cache, no fsync)
    /// and a channel send. The log write has to stay inside the lock for the ordering above, and
    /// a tokio mutex would not make it any less blocking; it only pays off for locks held across
    /// `.await`.
    inner: Mutex<Inner>,
    /// Latest [`Assignment`], republished after every change: the lapse watcher sleeps on it,
    /// embedders watch it.
    assignment_tx: watch::Sender<Assignment>,
    /// Admission changes for embedders.
    events_tx: broadcast::Sender<ShardEvent>,
    /// The advertised push address (P8.1): sent in every register request.
    address: String,
    /// Operator label: sent in every register request.
    name: Option<String>,
    /// Capacity and load reporting (P15.1).
    load: LoadSettings,
    /// The application version (P17.3): sent in every register request to clusters that take
    /// it.
    app_version: Option<String>,
    /// Its labels (P18.3): sent in every register request to clusters that take them.
    labels: leasehold_api::wire::Labels,
    /// The namespace it registers into (P18.1); `None` for `default`, which every release
    /// understands.
    namespace: Option<String>,
    /// Warm handoffs (P17.1): the embedder's prepare and release hooks, and those running.
    hooks: Option<HookRunner>,
    /// What the embedder measures; each renewal takes a report from it.
    meter: LoadMeter,
    /// As a sidecar (PROTOCOL §16): what the service beside it was told, which revokes and the
    /// graceful stop wait on (P16.2).
    service: Option<Arc<ServiceLink>>,
}

/// What an executor says about its capacity and its load (PROTOCOL P15.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoadSettings {
    /// Sent in every register request to clusters that take it.
    pub(crate) capacity: u32,
    /// Renewals carry the meter's loads (to clusters that take them).
    pub(crate) report_loads: bool,
}

impl Default for LoadSettings {
    fn default() -> Self {
        Self {
            capacity: DEFAULT_CAPACITY,
            report_loads: false,
        }
    }
}

/// A renewal to send: for whom, with which credential (P13.4), the request, and the load report
/// it was made with, to take in once granted.
#[derive(Debug, Clone)]
pub(crate) struct DueRenewal {
    pub(crate) executor_id: String,
    pub(crate) credential: Credential,
    pub(crate) request: RenewRequest,
    pub(crate) report: PendingReport,
}

#[derive(Debug)]
struct Inner {
    core: AdmissionCore,
    /// `None` without `--event-log`.
    log: Option<AdmissionLog>,
    /// Random per process start, and again per re-registration after `unknown_executor`: the
    /// registration's idempotency key (P4.4, P7.2).
    incarnation: String,
    /// This incarnation's secret (P13.4): sent with its registration when the managers take
    /// one, and on every renew and deregister. New with every incarnation.
    credential: Credential,
    /// A register request under `incarnation` may have reached the manager: a graceful stop
    /// must then find and deregister that executor even if the reply never arrived (P7.2).
    register_sent: bool,
}

/// A fresh random incarnation.
fn new_incarnation() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A fresh credential: 256 random bits.
fn new_credential() -> Credential {
    Credential::from_random(rand::random())
}

impl Shared {
    pub(crate) fn new(
        address: String,
        name: Option<String>,
        log: Option<AdmissionLog>,
        load: LoadSettings,
    ) -> Self {
        let core = AdmissionCore::default();
        let (assignment_tx, assignment) = watch::channel(core.view(Instant::now()));
        let (events_tx, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        Self {
            load,
            app_version: None,
            labels: leasehold_api::wire::Labels::new(),
            namespace: None,
            hooks: None,
            meter: LoadMeter::new(assignment),
            inner: Mutex::new(Inner {
                core,
                log,
                incarnation: new_incarnation(),
                credential: new_credential(),
                register_sent: false,
            }),
            assignment_tx,
            events_tx,
            address,
            name,
            service: None,
        }
    }

    /// The same state, as the sidecar of the service `link` tracks (P16.2).
    pub(crate) fn serving(mut self, link: Arc<ServiceLink>) -> Self {
        self.service = Some(link);
        self
    }

    /// Registers with `labels` (P18.3).
    pub(crate) fn with_labels(mut self, labels: leasehold_api::wire::Labels) -> Self {
        self.labels = labels;
        self
    }

    /// Registers into `namespace` (P18.1); `default` is sent as no namespace at all, so a
    /// cluster of an earlier release takes the registration as it always did.
    pub(crate) fn with_namespace(mut self, namespace: &str) -> Self {
        self.namespace =
            (!leasehold_api::wire::is_default_namespace(namespace)).then(|| namespace.to_owned());
        self
    }

    /// Registers as running `app_version` (P17.3).
    pub(crate) fn with_app_version(mut self, app_version: Option<String>) -> Self {
        self.app_version = app_version;
        self
    }

    /// Reports every secondary ready as soon as it is held (P19.3) when `ready_when_held`.
    pub(crate) fn with_secondaries_ready_when_held(mut self, ready_when_held: bool) -> Self {
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        inner.core =
            std::mem::take(&mut inner.core).with_secondaries_ready_when_held(ready_when_held);
        self
    }

    /// Runs `hooks` at warm handoffs (P17.1).
    pub(crate) fn with_hooks(mut self, hooks: Option<Hooks>) -> Self {
        self.hooks = hooks.map(HookRunner::new);
        self
    }

    /// The embedder's handoff hooks, if any (P17.1).
    pub(crate) fn hooks(&self) -> Option<&HookRunner> {
        self.hooks.as_ref()
    }

    /// As a sidecar: what the service beside it was told.
    pub(crate) fn service(&self) -> Option<&Arc<ServiceLink>> {
        self.service.as_ref()
    }

    /// Reads the core at the current instant under its lock: for answers that must see one
    /// state (a sidecar's permit and the layout its shard is numbered in).
    pub(crate) fn read_core<T>(&self, read: impl FnOnce(&AdmissionCore, Instant) -> T) -> T {
        let inner = self.lock();
        read(&inner.core, Instant::now())
    }

    /// The view at `now`, fresh from the core (the published one may lag a lapse).
    pub(crate) fn view_at(&self, now: Instant) -> Assignment {
        self.lock().core.view(now)
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

    pub(crate) fn admit_as(&self, shard: u32, role: RoleWanted) -> Result<Permit, AdmitError> {
        let inner = self.lock();
        inner.core.admit_as(shard, role, Instant::now())
    }

    pub(crate) fn admit_key_as(&self, key: &[u8], role: RoleWanted) -> Result<Permit, AdmitError> {
        let inner = self.lock();
        inner.core.admit_key_as(key, role, Instant::now())
    }

    /// The service says its secondary of `shard` at `epoch` is (or is no longer) ready (P19.3);
    /// the view is republished with it. Answers whether anything changed.
    pub(crate) fn set_secondary_ready(
        &self,
        shard: u32,
        epoch: u64,
        ready: bool,
    ) -> Result<bool, NotSecondary> {
        self.apply(|core, _| (core.set_secondary_ready(shard, epoch, ready), Vec::new()))
    }

    /// A grant applied without the mark of its request (tests that set up a registration).
    #[cfg(test)]
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

    /// A grant answering a request sent at `sent_at` when `sent` was applied (P3.2, P4.1).
    pub(crate) fn apply_grant_after(
        &self,
        sent_at: Instant,
        sent: AppliedMark,
        grant: &Grant,
    ) -> Result<GrantApplied, ForeignGrant> {
        self.apply_delivery(
            |core, now| core.apply_grant_after(sent_at, sent, grant, now),
            |a| &a.events,
        )
    }

    /// What is applied now: taken just before a register request is sent.
    pub(crate) fn applied_mark(&self) -> AppliedMark {
        self.lock().core.applied_mark()
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
    pub(crate) fn record_lapse(&self) {
        self.apply(|core, now| ((), core.record_lapse(now)));
    }

    /// `unknown_executor`: stop admitting everything, forget the registration, and pick a new
    /// incarnation for the next one.
    pub(crate) fn forget_executor(&self) {
        self.apply(|core, now| ((), core.forget_executor(now)));
        let mut inner = self.lock();
        inner.incarnation = new_incarnation();
        inner.credential = new_credential();
        inner.register_sent = false;
    }

    /// P3.7, first step.
    pub(crate) fn stop_admission(&self) {
        self.apply(|core, now| ((), core.stop_admission(now)));
    }

    pub(crate) fn lease(&self) -> LeaseClock {
        *self.lock().core.lease()
    }

    /// The renewal due, with the credential of the incarnation it renews (P13.4), for managers
    /// stating `cluster_version` (docs/PROTOCOL.md "Versions"). It carries the meter's loads for
    /// the held shards when reporting is on and the cluster takes them (`CAPACITY_SCHEMA` or
    /// later); the report is made either way, so the interval of the next one starts at this
    /// renewal. It carries the ready secondaries (P19.3) only to a cluster at `REPLICAS_SCHEMA`
    /// or later: an older manager refuses the field, and only such a cluster places secondaries.
    pub(crate) fn renewal(&self, cluster_version: u32) -> Option<DueRenewal> {
        let (executor_id, mut request, credential, layout) = {
            let inner = self.lock();
            let (executor_id, request) = inner.core.renewal()?;
            let layout = inner.core.layout();
            (executor_id, request, inner.credential.clone(), layout)
        };
        // Outside the lock above: the service link is taken before this state's lock, never
        // after it. The claims are numbered in the layout read with them (§20).
        if let Some(service) = &self.service {
            service.claim_told(&mut request.claims, layout);
        }
        let report = self.meter.report(
            request.claims.iter().map(|claim| claim.shard),
            Instant::now(),
        );
        if self.load.report_loads && cluster_version >= CAPACITY_SCHEMA {
            request.loads = Some(report.loads.clone());
        }
        if cluster_version < REPLICAS_SCHEMA {
            request.ready.clear();
        }
        Some(DueRenewal {
            executor_id,
            credential,
            request,
            report,
        })
    }

    /// Takes in the load report of a granted renewal (P15.1).
    pub(crate) fn renewal_granted(&self, renewal: &DueRenewal) {
        self.meter
            .commit(&renewal.report, renewal.request.loads.is_some());
    }

    /// The load meter embedders record into.
    pub(crate) fn load_meter(&self) -> &LoadMeter {
        &self.meter
    }

    pub(crate) fn executor_id(&self) -> Option<String> {
        self.lock().core.executor_id().map(str::to_owned)
    }

    /// The register request for the current incarnation; `mark_sent` records that it may reach
    /// the manager.
    pub(crate) fn register_request(&self, mark_sent: bool) -> RegisterRequest {
        let mut inner = self.lock();
        if mark_sent {
            inner.register_sent = true;
        }
        RegisterRequest {
            namespace: self.namespace.clone(),
            incarnation: inner.incarnation.clone(),
            address: self.address.clone(),
            name: self.name.clone(),
            credential: Some(inner.credential.clone()),
            // Absent means the default (P15.1), which every release understands.
            capacity: (self.load.capacity != DEFAULT_CAPACITY).then_some(self.load.capacity),
            app_version: self.app_version.clone(),
            labels: self.labels.clone(),
            // PROTOCOL P20.3. This library maps keys by the newest set's layout and switches
            // admission in the set's one receipt. A sidecar keeps the promise for the service
            // beside it: the service maps keys by the answer it applied, so the sidecar holds
            // each shard in the layout it was told in, and claims, and releases to a revoke,
            // by the keys the service may still admit in any layout (P16.2).
            follows_generations: true,
        }
    }

    /// The current incarnation's credential, presented on renew and deregister (P13.4).
    pub(crate) fn credential(&self) -> Credential {
        self.lock().credential.clone()
    }

    pub(crate) fn register_sent(&self) -> bool {
        self.lock().register_sent
    }

    /// The advertised push address (P8.1).
    pub(crate) fn address(&self) -> &str {
        &self.address
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
            secondaries: view.secondaries,
            stopping: view.stopping,
            monotonic_ns,
            capacity: self.load.capacity,
            reported_loads: self.meter.last_reported(),
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
