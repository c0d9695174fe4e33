//! The service: `PUT`/`GET /kv/{key}` and `GET /stats`, served beside the executor library's
//! routes on its listener, for the shards this process holds.
//!
//! A request goes through three gates, in order (docs/FENCING.md walks through them):
//!
//! 1. **Admission** ([`Ownership::admit_key`], the executor library): a permit `{shard, epoch}`
//!    if this process holds the key's shard and its lease is live (P3.6). Otherwise `421`
//!    (`not_owner`, `not_admitting`): the caller's routing table is stale.
//! 2. **The raise on arrival** ([`KvService::open`]): before the first request for a shard at a
//!    new epoch is served, the store's epoch for it is raised to that epoch in a transaction
//!    ([`ShardStore::raise_epoch`]); the [`KvService::raise_on_arrival`] task does it as soon as
//!    the shard arrives, requests do it if they come first. If the store already holds a newer
//!    epoch, another process owns the shard now: `421 fenced`.
//! 3. **The epoch rule** ([`ShardStore::put`]): the write carries the permit's epoch and the
//!    store refuses it, in the transaction of the write, if its stored epoch is higher: `409
//!    stale_epoch`, counted. This is the gate that stops a write admitted before its owner was
//!    deposed (a pause past the lease) from overwriting the next owner's writes.
//!
//! **Reads from a secondary** (PROTOCOL §19, [`crate::copies`]): `GET /kv/{key}?read=secondary`
//! is admitted only where this process holds the key's shard as a secondary
//! ([`Ownership::admit_key_as`]) and is served from its warm copy, never from the store, with the
//! copy's freshness; `?read=any` is served in whichever role the shard is held. Gates 2 and 3 are
//! the primary's: a secondary holds no epoch of its own to fence with, raises nothing and writes
//! nothing. A primary read (the default) is served exactly as before, through all three gates.
//!
//! A write that passed gates 1 and 2 is carried to the store by a task of its own, so its
//! outcome does not depend on whether the client or the request timeout gives up first: that
//! late write is exactly the one gate 3 exists for. A test-only [`WriteDelay`] holds writes
//! between gates 2 and 3 to make that window wide enough to pause a process inside.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use leasehold_api::http::{ApiJson, HttpError};
use leasehold_api::problem::{ErrorCode, Problem, PROBLEM_CONTENT_TYPE};
use leasehold_api::wire::Role;
use leasehold_executor::{
    AdmissionState, AdmitError, Assignment, ExecutorHandle, NotSecondary, Permit, RoleWanted,
    MAX_KEY_BYTES,
};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::copies::{Copies, CopyRead};
use crate::store::{Raise, ReadOutcome, ShardStore, StoreError, WriteOutcome};
use crate::wire::{
    GetReply, KvProblem, KvStats, PutReply, PutRequest, ReadQuery, Refusal, MAX_VALUE_BYTES,
};

/// Store transactions running at once, per process. They run on tokio's blocking pool (512
/// threads by default); a burst beyond this waits here instead of parking hundreds of threads on
/// SQLite's file locks. The executor's request timeout bounds the wait.
pub const MAX_STORE_OPERATIONS: usize = 32;

/// Who holds which shard: the executor library's admission, behind a seam so the service can be
/// tested without a cluster.
pub trait Ownership: Clone + Send + Sync + 'static {
    /// A permit for `shard`, or why not (P3.6).
    fn admit(&self, shard: u32) -> Result<Permit, AdmitError>;
    /// A permit for the shard of `key`, or why not (P3.6).
    fn admit_key(&self, key: &[u8]) -> Result<Permit, AdmitError>;
    /// A permit for the shard of `key` in `role` (P19.5): a secondary's only where the shard is
    /// held as a secondary.
    fn admit_key_as(&self, key: &[u8], role: RoleWanted) -> Result<Permit, AdmitError>;
    /// Says this process's secondary of `shard` at `epoch` is (or is not) ready to be promoted
    /// (P19.3).
    fn set_secondary_ready(&self, shard: u32, epoch: u64, ready: bool) -> Result<(), NotSecondary>;
    /// The held set and admission state, republished on every change.
    fn assignment(&self) -> watch::Receiver<Assignment>;
}

impl Ownership for ExecutorHandle {
    fn admit(&self, shard: u32) -> Result<Permit, AdmitError> {
        ExecutorHandle::admit(self, shard)
    }

    fn admit_key(&self, key: &[u8]) -> Result<Permit, AdmitError> {
        ExecutorHandle::admit_key(self, key)
    }

    fn admit_key_as(&self, key: &[u8], role: RoleWanted) -> Result<Permit, AdmitError> {
        ExecutorHandle::admit_key_as(self, key, role)
    }

    fn set_secondary_ready(&self, shard: u32, epoch: u64, ready: bool) -> Result<(), NotSecondary> {
        ExecutorHandle::set_secondary_ready(self, shard, epoch, ready)
    }

    fn assignment(&self) -> watch::Receiver<Assignment> {
        ExecutorHandle::assignment(self)
    }
}

/// Test only: hold writes whose key starts with `prefix` for `delay` after the ownership check
/// and before the store transaction (`--test-write-delay`), so a test can pause the process
/// with such a write in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteDelay {
    /// Keys this applies to; empty: every key.
    pub prefix: String,
    /// How long.
    pub delay: Duration,
}

/// The service, cheap to clone: every clone serves the same store and counters.
#[derive(Debug)]
pub struct KvService<O> {
    inner: Arc<Inner<O>>,
}

impl<O> Clone for KvService<O> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Inner<O> {
    ownership: O,
    store: Arc<ShardStore>,
    /// Shard → the epoch this process raised the store to (gate 2). A shard served at an epoch
    /// not in here is raised first. At most one entry per shard.
    opened: Mutex<BTreeMap<u32, u64>>,
    store_slots: Semaphore,
    write_delay: Option<WriteDelay>,
    /// The warm copies of the shards held as secondaries ([`crate::copies`]).
    copies: Copies,
    counters: Counters,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    writes_accepted: AtomicU64,
    stale_writes_refused: AtomicU64,
    reads: AtomicU64,
    misdirected: AtomicU64,
    fenced_by_store: AtomicU64,
    epoch_raises: AtomicU64,
    writes_in_flight: AtomicU64,
    secondary_reads: AtomicU64,
    pub(crate) secondaries_said_ready: AtomicU64,
    pub(crate) copy_changes_applied: AtomicU64,
    pub(crate) copy_changes_refused: AtomicU64,
    pub(crate) copy_refresh_failures: AtomicU64,
}

/// Why a request could not be served.
#[derive(Debug)]
enum Refused {
    /// `421` or `409` with a reason (boxed: a problem document is large for an `Err`).
    Kv(Box<KvProblem>),
    /// Any other problem.
    Http(HttpError),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Http(error) => error.into_response(),
            Refused::Kv(problem) => {
                let status = StatusCode::from_u16(problem.problem.status)
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = serde_json::to_vec(&problem).unwrap_or_default();
                let mut response = (status, body).into_response();
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
                response
            }
        }
    }
}

impl From<HttpError> for Refused {
    fn from(error: HttpError) -> Self {
        Refused::Http(error)
    }
}

/// Why gate 2 did not open a shard.
#[derive(Debug)]
enum OpenError {
    /// The store holds a newer owner's epoch.
    Superseded { store_epoch: u64 },
    /// The store failed.
    Store(HttpError),
}

/// The refusal `reason` at `status`, with `code: conflict` (the demo workload's convention for a
/// misdirected request, executor/src/main/workload.rs).
fn refusal(status: StatusCode, reason: Refusal, detail: String) -> KvProblem {
    let mut problem = Problem::new(ErrorCode::Conflict, detail);
    problem.status = status.as_u16();
    KvProblem {
        problem,
        reason,
        shard: None,
        epoch: None,
        store_epoch: None,
    }
}

/// Counts a write from when it passed the ownership check until its store transaction ended.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn start(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<O: Ownership> KvService<O> {
    /// A service over `store` for the shards `ownership` admits.
    pub fn new(ownership: O, store: Arc<ShardStore>, write_delay: Option<WriteDelay>) -> Self {
        Self {
            inner: Arc::new(Inner {
                ownership,
                store,
                opened: Mutex::new(BTreeMap::new()),
                store_slots: Semaphore::new(MAX_STORE_OPERATIONS),
                write_delay,
                copies: Copies::default(),
                counters: Counters::default(),
            }),
        }
    }

    /// `PUT`/`GET /kv/{key}` and `GET /stats`, to merge into the executor's listener.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/kv/{key}", get(get_value::<O>).put(put_value::<O>))
            .route("/stats", get(stats::<O>))
            .with_state(self.clone())
    }

    /// What the service has done so far.
    pub fn stats(&self) -> KvStats {
        let counters = &self.inner.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        KvStats {
            writes_accepted: load(&counters.writes_accepted),
            stale_writes_refused: load(&counters.stale_writes_refused),
            reads: load(&counters.reads),
            misdirected: load(&counters.misdirected),
            fenced_by_store: load(&counters.fenced_by_store),
            epoch_raises: load(&counters.epoch_raises),
            writes_in_flight: load(&counters.writes_in_flight),
            secondary_reads: load(&counters.secondary_reads),
            secondary_copies: self.inner.copies.len() as u64,
            secondaries_said_ready: load(&counters.secondaries_said_ready),
            copy_changes_applied: load(&counters.copy_changes_applied),
            copy_changes_refused: load(&counters.copy_changes_refused),
            copy_refresh_failures: load(&counters.copy_refresh_failures),
        }
    }

    pub(crate) fn ownership(&self) -> &O {
        &self.inner.ownership
    }

    pub(crate) fn store(&self) -> &ShardStore {
        &self.inner.store
    }

    pub(crate) fn copies(&self) -> &Copies {
        &self.inner.copies
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// Gate 2 as shards arrive: on every change of the held set, raises the store's epoch of
    /// each shard gained (or re-gained at a new epoch) while admitting, before any request for it
    /// needs to, and forgets the shards that left. Runs until the executor is gone; spawn it
    /// once. A watch channel keeps only the newest set, so nothing queues up behind a slow store.
    pub async fn raise_on_arrival(self) {
        let mut assignment = self.inner.ownership.assignment();
        loop {
            let view = assignment.borrow_and_update().clone();
            self.follow_assignment(&view).await;
            if assignment.changed().await.is_err() {
                return;
            }
        }
    }

    async fn follow_assignment(&self, view: &Assignment) {
        let held: BTreeSet<u32> = view.shards.iter().map(|held| held.shard).collect();
        let gone: Vec<u32> = {
            let mut opened = self.opened();
            let gone: Vec<u32> = opened
                .keys()
                .filter(|shard| !held.contains(shard))
                .copied()
                .collect();
            for shard in &gone {
                opened.remove(shard);
            }
            gone
        };
        for shard in gone {
            self.inner.store.forget(shard);
        }
        if view.admission != AdmissionState::Admitting {
            // Fenced (P3.6): nothing is served, so nothing needs raising now; a grant that
            // revives the same epochs finds them opened already.
            return;
        }
        // Each shard on its own task (the store slots bound how many run at once), so a shard
        // whose file another process holds locked (a process paused inside a transaction) does
        // not hold up the others for the busy timeout.
        let mut opening = JoinSet::new();
        for held in &view.shards {
            let permit = Permit::primary(held.shard, held.epoch);
            if self.opened().get(&permit.shard) != Some(&permit.epoch) {
                let service = self.clone();
                opening.spawn(async move {
                    // The view may be old by now (a revoke right behind the grant): raise only a
                    // shard still held at this epoch. A raise that loses the race anyway finds
                    // the newer epoch and changes nothing.
                    if service.inner.ownership.admit(permit.shard) != Ok(permit) {
                        return (permit, Ok(()));
                    }
                    (permit, service.open(permit).await)
                });
            }
        }
        while let Some(joined) = opening.join_next().await {
            match joined {
                Ok((_, Ok(()))) => {}
                Ok((permit, Err(error))) => debug!(
                    shard = permit.shard,
                    epoch = permit.epoch,
                    ?error,
                    "shard not opened on arrival; requests will try again"
                ),
                Err(error) => warn!(%error, "raise-on-arrival task failed"),
            }
        }
    }

    fn opened(&self) -> MutexGuard<'_, BTreeMap<u32, u64>> {
        // A map of facts each written in one insert; a panic elsewhere cannot leave it wrong.
        self.inner
            .opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Gate 2: makes sure the store's epoch for `permit.shard` has been raised to `permit.epoch`
    /// by this process before the shard is served at it.
    async fn open(&self, permit: Permit) -> Result<(), OpenError> {
        if self.opened().get(&permit.shard) == Some(&permit.epoch) {
            return Ok(());
        }
        let Permit { shard, epoch, .. } = permit;
        match self
            .blocking(move |store| store.raise_epoch(shard, epoch))
            .await
            .map_err(OpenError::Store)?
        {
            Raise::Raised { from } => {
                self.inner
                    .counters
                    .epoch_raises
                    .fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_kv_epoch_raises_total").increment(1);
                info!(
                    shard,
                    epoch, from, "raised the shard's stored epoch before serving it"
                );
            }
            Raise::AlreadyCurrent => {}
            Raise::Superseded { store_epoch } => {
                return Err(OpenError::Superseded { store_epoch });
            }
        }
        self.opened().insert(shard, epoch);
        Ok(())
    }

    /// Gate 2 for a request: [`KvService::open`], its refusal as an answer.
    async fn open_for_request(&self, permit: Permit) -> Result<(), Refused> {
        self.open(permit).await.map_err(|error| match error {
            OpenError::Store(error) => Refused::Http(error),
            OpenError::Superseded { store_epoch } => self.fenced(permit, store_epoch),
        })
    }

    /// `421 fenced`, counted: the store holds a newer epoch than `permit`'s.
    fn fenced(&self, permit: Permit, store_epoch: u64) -> Refused {
        let Permit { shard, epoch, .. } = permit;
        self.inner
            .counters
            .fenced_by_store
            .fetch_add(1, Ordering::Relaxed);
        warn!(
            shard,
            epoch, store_epoch, "the store holds a newer owner's epoch: not serving the shard"
        );
        self.misdirected(
            Refusal::Fenced,
            Some(permit),
            Some(store_epoch),
            format!(
                "shard {shard}: the store has accepted epoch {store_epoch}, newer than this \
                 process's {epoch}; another executor owns it now"
            ),
        )
    }

    /// Gate 1: the primary's permit for `key`, or `421`.
    fn admit(&self, key: &str) -> Result<Permit, Refused> {
        self.admit_as(key, RoleWanted::Primary)
    }

    /// Gate 1 for work wanting `role`: the permit for `key`, or `421`. Only the primary is ever
    /// admitted through [`Ownership::admit_key`], so a primary's path is exactly what it was.
    fn admit_as(&self, key: &str, role: RoleWanted) -> Result<Permit, Refused> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(
                HttpError::invalid(format!("a key is 1 to {MAX_KEY_BYTES} bytes long")).into(),
            );
        }
        let ownership = &self.inner.ownership;
        let admitted = match role {
            RoleWanted::Primary => ownership.admit_key(key.as_bytes()),
            RoleWanted::Secondary | RoleWanted::Any => ownership.admit_key_as(key.as_bytes(), role),
        };
        admitted.map_err(|error| match error {
            AdmitError::NotOwner => self.misdirected(
                Refusal::NotOwner,
                None,
                None,
                format!(
                    "this executor does not hold the key's shard as {}; refresh the routing \
                         table",
                    match role {
                        RoleWanted::Primary => "its primary",
                        RoleWanted::Secondary => "a secondary",
                        RoleWanted::Any => "a replica",
                    }
                ),
            ),
            AdmitError::NotReady => self.misdirected(
                Refusal::NotAdmitting,
                None,
                None,
                "this executor is not admitting work (lease lapsed, not registered, or \
                     stopping); refresh the routing table"
                    .into(),
            ),
        })
    }

    fn misdirected(
        &self,
        reason: Refusal,
        permit: Option<Permit>,
        store_epoch: Option<u64>,
        detail: String,
    ) -> Refused {
        self.inner
            .counters
            .misdirected
            .fetch_add(1, Ordering::Relaxed);
        metrics::counter!("leasehold_kv_misdirected_total", "reason" => reason.as_str())
            .increment(1);
        let mut problem = refusal(StatusCode::MISDIRECTED_REQUEST, reason, detail);
        problem.shard = permit.map(|permit| permit.shard);
        problem.epoch = permit.map(|permit| permit.epoch);
        problem.store_epoch = store_epoch;
        Refused::Kv(Box::new(problem))
    }

    /// Runs `operation` on the blocking pool, at most [`MAX_STORE_OPERATIONS`] at once.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        operation: impl FnOnce(&ShardStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, HttpError> {
        let _slot = self
            .inner
            .store_slots
            .acquire()
            .await
            .map_err(|error| HttpError::internal("store slots", error))?;
        let store = Arc::clone(&self.inner.store);
        match tokio::task::spawn_blocking(move || operation(&store)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) if error.is_busy() => {
                warn!(%error, "store busy");
                Err(HttpError::new(
                    ErrorCode::Unavailable,
                    "the shard's store is locked by another process; nothing was written, retry",
                ))
            }
            Ok(Err(error)) => Err(HttpError::internal("store", error)),
            Err(error) => Err(HttpError::internal("store task", error)),
        }
    }

    fn delay_for(&self, key: &str) -> Option<Duration> {
        self.inner
            .write_delay
            .as_ref()
            .filter(|delay| key.starts_with(&delay.prefix))
            .map(|delay| delay.delay)
    }

    /// Gate 3, in a task of its own (module docs): the optional test delay, then the conditional
    /// write.
    async fn write(
        &self,
        permit: Permit,
        key: String,
        value: String,
    ) -> Result<WriteOutcome, HttpError> {
        let service = self.clone();
        let task = tokio::spawn(async move {
            let _in_flight = InFlight::start(&service.inner.counters.writes_in_flight);
            if let Some(delay) = service.delay_for(&key) {
                info!(shard = permit.shard, epoch = permit.epoch, %key, delay_ms = delay.as_millis() as u64, "test delay: holding an admitted write before the store");
                tokio::time::sleep(delay).await;
            }
            let Permit { shard, epoch, .. } = permit;
            let logged_key = key.clone();
            let outcome = service
                .blocking(move |store| store.put(shard, epoch, &key, &value))
                .await;
            // Counted here, not by the handler: the handler may be gone (request timeout) by
            // the time a late write reaches the store, and that write must be counted too.
            service.count_write(permit, &logged_key, &outcome);
            outcome
        });
        task.await
            .map_err(|error| HttpError::internal("write task", error))?
    }

    fn count_write(&self, permit: Permit, key: &str, outcome: &Result<WriteOutcome, HttpError>) {
        let counters = &self.inner.counters;
        match outcome {
            Ok(WriteOutcome::Written) => {
                counters.writes_accepted.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_kv_writes_total", "outcome" => "accepted")
                    .increment(1);
            }
            Ok(WriteOutcome::StaleEpoch { store_epoch }) => {
                counters
                    .stale_writes_refused
                    .fetch_add(1, Ordering::Relaxed);
                metrics::counter!("leasehold_kv_writes_total", "outcome" => "stale_epoch")
                    .increment(1);
                warn!(shard = permit.shard, epoch = permit.epoch, store_epoch, %key, "write refused by the store's epoch check: a newer owner holds the shard");
            }
            Err(_) => {
                metrics::counter!("leasehold_kv_writes_total", "outcome" => "failed").increment(1);
            }
        }
    }
}

fn key_of(path: Result<Path<String>, PathRejection>) -> Result<String, HttpError> {
    path.map(|Path(key)| key)
        .map_err(|rejection| HttpError::invalid(rejection.body_text()))
}

/// `PUT /kv/{key}` `{"value": ...}`: a write fenced by the shard's epoch.
async fn put_value<O: Ownership>(
    State(service): State<KvService<O>>,
    path: Result<Path<String>, PathRejection>,
    ApiJson(request): ApiJson<PutRequest>,
) -> Result<Json<PutReply>, Refused> {
    let key = key_of(path)?;
    if request.value.len() > MAX_VALUE_BYTES {
        return Err(
            HttpError::invalid(format!("a value is at most {MAX_VALUE_BYTES} bytes long")).into(),
        );
    }
    let permit = service.admit(&key)?;
    service.open_for_request(permit).await?;
    match service.write(permit, key.clone(), request.value).await? {
        WriteOutcome::Written => Ok(Json(PutReply {
            key,
            shard: permit.shard,
            epoch: permit.epoch,
        })),
        WriteOutcome::StaleEpoch { store_epoch } => {
            let mut problem = refusal(
                StatusCode::CONFLICT,
                Refusal::StaleEpoch,
                format!(
                    "the store refused the write: it carries epoch {} of shard {}, and the store \
                     has accepted epoch {store_epoch} from a newer owner; nothing was written",
                    permit.epoch, permit.shard
                ),
            );
            problem.shard = Some(permit.shard);
            problem.epoch = Some(permit.epoch);
            problem.store_epoch = Some(store_epoch);
            Err(Refused::Kv(Box::new(problem)))
        }
    }
}

/// `GET /kv/{key}[?read=primary|secondary|any]`: by default (and for `any` where this process
/// is the primary) a read fenced the same way as a write (a deposed owner serves nothing);
/// `secondary` (and `any` where this process holds a secondary) from the warm copy.
async fn get_value<O: Ownership>(
    State(service): State<KvService<O>>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<GetReply>, Refused> {
    let key = key_of(path)?;
    let Query(ReadQuery { read }) =
        query.map_err(|rejection| HttpError::invalid(rejection.body_text()))?;
    let permit = service.admit_as(&key, read)?;
    match permit.role {
        Role::Primary => read_primary(&service, key, permit).await,
        Role::Secondary => read_secondary(&service, key, permit),
    }
}

/// A primary's read: gates 2 and 3, from the store.
async fn read_primary<O: Ownership>(
    service: &KvService<O>,
    key: String,
    permit: Permit,
) -> Result<Json<GetReply>, Refused> {
    service.open_for_request(permit).await?;
    let Permit { shard, epoch, .. } = permit;
    let lookup = key.clone();
    let outcome = service
        .blocking(move |store| store.get(shard, epoch, &lookup))
        .await?;
    match outcome {
        ReadOutcome::Found(stored) => {
            service.inner.counters.reads.fetch_add(1, Ordering::Relaxed);
            Ok(Json(GetReply {
                key,
                value: stored.value,
                shard,
                epoch,
                written_epoch: stored.written_epoch,
                role: Role::Primary,
                copy: None,
            }))
        }
        ReadOutcome::Missing => {
            service.inner.counters.reads.fetch_add(1, Ordering::Relaxed);
            Err(HttpError::not_found(format!("no value for key {key:?}")).into())
        }
        ReadOutcome::StaleEpoch { store_epoch } => {
            // Forget the open: the next request raises again and learns it is superseded.
            service.opened().remove(&shard);
            Err(service.fenced(permit, store_epoch))
        }
    }
}

/// A secondary's read: from the copy, saying how fresh it is; `421 warming` while the copy is
/// not complete. Nothing here touches the store or its fence.
fn read_secondary<O: Ownership>(
    service: &KvService<O>,
    key: String,
    permit: Permit,
) -> Result<Json<GetReply>, Refused> {
    let Permit { shard, epoch, .. } = permit;
    let counters = &service.inner.counters;
    let found = match service
        .inner
        .copies
        .read(shard, &key, std::time::Instant::now())
    {
        CopyRead::Warming => {
            return Err(service.misdirected(
                Refusal::Warming,
                Some(permit),
                None,
                format!(
                    "shard {shard}: this executor's copy as a secondary is not complete yet; \
                     refresh the routing table"
                ),
            ))
        }
        CopyRead::Found(stored, freshness) => Some((stored, freshness)),
        CopyRead::Missing(_) => None,
    };
    counters.reads.fetch_add(1, Ordering::Relaxed);
    counters.secondary_reads.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("leasehold_kv_secondary_reads_total").increment(1);
    match found {
        Some((stored, freshness)) => Ok(Json(GetReply {
            key,
            value: stored.value,
            shard,
            epoch,
            written_epoch: stored.written_epoch,
            role: Role::Secondary,
            copy: Some(freshness),
        })),
        None => Err(HttpError::not_found(format!(
            "no value for key {key:?} in this secondary's copy"
        ))
        .into()),
    }
}

/// `GET /stats`.
async fn stats<O: Ownership>(State(service): State<KvService<O>>) -> Json<KvStats> {
    Json(service.stats())
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use axum::body::Body;
    use axum::http::{Method, Request};
    use leasehold_api::shard_for_key;
    use leasehold_api::wire::ShardEpoch;
    use leasehold_executor::Secondary;
    use tower::ServiceExt;

    use super::*;
    use crate::copies::CopyConfig;

    const SHARDS: u32 = 4;

    /// Ownership the test sets: shard → epoch held as the primary and as a secondary, and
    /// whether admitting; what the service said ready is recorded.
    #[derive(Clone)]
    struct FakeOwnership {
        view: Arc<watch::Sender<Assignment>>,
        said_ready: Arc<Mutex<Vec<(u32, u64, bool)>>>,
    }

    impl FakeOwnership {
        fn new() -> Self {
            let (view, _) = watch::channel(assignment(&[], AdmissionState::Fenced));
            Self {
                view: Arc::new(view),
                said_ready: Arc::default(),
            }
        }

        fn hold(&self, held: &[(u32, u64)]) {
            self.view
                .send_replace(assignment(held, AdmissionState::Admitting));
        }

        /// Holds `primaries`, and `secondaries` as secondaries not ready.
        fn hold_both(&self, primaries: &[(u32, u64)], secondaries: &[(u32, u64)]) {
            let mut view = assignment(primaries, AdmissionState::Admitting);
            view.secondaries = secondaries
                .iter()
                .map(|&(shard, epoch)| Secondary {
                    shard,
                    epoch,
                    ready: false,
                })
                .collect();
            self.view.send_replace(view);
        }

        fn fence(&self) {
            self.view
                .send_modify(|view| view.admission = AdmissionState::Fenced);
        }

        fn said_ready(&self) -> Vec<(u32, u64, bool)> {
            self.said_ready.lock().unwrap().clone()
        }
    }

    fn assignment(held: &[(u32, u64)], admission: AdmissionState) -> Assignment {
        Assignment {
            generation: 0,
            executor_id: Some("ex-1".into()),
            shard_count: Some(SHARDS),
            revision: 1,
            shards: held
                .iter()
                .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
                .collect(),
            secondaries: Vec::new(),
            admission,
            lease_expiry: None,
            stopping: false,
        }
    }

    impl Ownership for FakeOwnership {
        fn admit_key(&self, key: &[u8]) -> Result<Permit, AdmitError> {
            self.admit(shard_of(key))
        }

        fn admit(&self, shard: u32) -> Result<Permit, AdmitError> {
            let view = self.view.borrow();
            if view.admission != AdmissionState::Admitting {
                return Err(AdmitError::NotReady);
            }
            view.shards
                .iter()
                .find(|held| held.shard == shard)
                .map(|held| Permit::primary(shard, held.epoch))
                .ok_or(AdmitError::NotOwner)
        }

        /// As the executor's admission core: a secondary's permit only where held as one.
        fn admit_key_as(&self, key: &[u8], role: RoleWanted) -> Result<Permit, AdmitError> {
            let shard = shard_of(key);
            let as_secondary = || {
                let view = self.view.borrow();
                if view.admission != AdmissionState::Admitting {
                    return Err(AdmitError::NotReady);
                }
                view.secondaries
                    .iter()
                    .find(|held| held.shard == shard)
                    .map(|held| Permit {
                        shard,
                        epoch: held.epoch,
                        role: Role::Secondary,
                    })
                    .ok_or(AdmitError::NotOwner)
            };
            match role {
                RoleWanted::Primary => self.admit(shard),
                RoleWanted::Secondary => as_secondary(),
                RoleWanted::Any => match self.admit(shard) {
                    Err(AdmitError::NotOwner) => as_secondary(),
                    other => other,
                },
            }
        }

        fn set_secondary_ready(
            &self,
            shard: u32,
            epoch: u64,
            ready: bool,
        ) -> Result<(), NotSecondary> {
            let mut refused = None;
            self.view.send_modify(|view| {
                match view.secondaries.iter_mut().find(|s| s.shard == shard) {
                    Some(held) if held.epoch == epoch || !ready => held.ready = ready,
                    held => {
                        refused = Some(NotSecondary {
                            shard,
                            epoch,
                            held_at: held.map(|held| held.epoch),
                        })
                    }
                }
            });
            match refused {
                Some(error) => Err(error),
                None => {
                    self.said_ready.lock().unwrap().push((shard, epoch, ready));
                    Ok(())
                }
            }
        }

        fn assignment(&self) -> watch::Receiver<Assignment> {
            self.view.subscribe()
        }
    }

    fn shard_of(key: &[u8]) -> u32 {
        shard_for_key(key, NonZeroU32::new(SHARDS).unwrap())
    }

    /// A key of `shard`.
    fn key_in(shard: u32, prefix: &str) -> String {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|key| shard_of(key.as_bytes()) == shard)
            .unwrap()
    }

    struct Setup {
        _dir: tempfile::TempDir,
        store: Arc<ShardStore>,
        ownership: FakeOwnership,
        service: KvService<FakeOwnership>,
    }

    fn setup(delay: Option<WriteDelay>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ShardStore::open(dir.path()).unwrap());
        let ownership = FakeOwnership::new();
        let service = KvService::new(ownership.clone(), Arc::clone(&store), delay);
        Setup {
            _dir: dir,
            store,
            ownership,
            service,
        }
    }

    async fn call(
        service: &KvService<FakeOwnership>,
        method: Method,
        key: &str,
        value: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        call_at(service, method, &format!("/kv/{key}"), value).await
    }

    async fn call_at(
        service: &KvService<FakeOwnership>,
        method: Method,
        uri: &str,
        value: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        let body = value.map_or_else(Body::empty, |value| {
            Body::from(
                serde_json::to_vec(&PutRequest {
                    value: value.into(),
                })
                .unwrap(),
            )
        });
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap();
        let response = service.router().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or_default())
    }

    #[tokio::test]
    async fn the_owner_writes_and_reads_at_its_epoch() {
        let s = setup(None);
        s.ownership.hold(&[(1, 3)]);
        let key = key_in(1, "k");
        let (status, body) = call(&s.service, Method::PUT, &key, Some("v1")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["epoch"], 3);
        let (status, body) = call(&s.service, Method::GET, &key, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["value"], "v1");
        assert_eq!(body["written_epoch"], 3);
        let (status, body) = call(&s.service, Method::GET, &key_in(1, "missing"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["code"], "not_found");
        let stats = s.service.stats();
        assert_eq!(
            (stats.writes_accepted, stats.reads, stats.epoch_raises),
            (1, 2, 1)
        );
    }

    #[tokio::test]
    async fn a_shard_not_held_or_a_fenced_process_answers_421_problem_json() {
        let s = setup(None);
        s.ownership.hold(&[(1, 3)]);
        let (status, body) = call(&s.service, Method::PUT, &key_in(2, "k"), Some("v")).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "not_owner");
        assert_eq!(body["status"], 421);
        assert_eq!(body["code"], "conflict");
        s.ownership.fence();
        let (status, body) = call(&s.service, Method::GET, &key_in(1, "k"), None).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "not_admitting");
        assert_eq!(s.service.stats().misdirected, 2);
        assert_eq!(
            s.store.fence_epoch(2).unwrap(),
            0,
            "nothing touched the store"
        );
    }

    /// The epoch check (gate 3): this process opened the shard at epoch 4, then a newer owner
    /// raised the store to 5; the write is refused with 409 and counted, and the newer owner's
    /// value stays. Fails if `ShardStore::put` stops comparing epochs.
    #[tokio::test]
    async fn a_write_below_the_stored_epoch_is_refused_409_and_counted() {
        let s = setup(None);
        s.ownership.hold(&[(0, 4)]);
        let key = key_in(0, "k");
        let (status, _) = call(&s.service, Method::GET, &key, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        // The newer owner, in another process on the same files.
        let other = ShardStore::open(s.store.dir()).unwrap();
        assert_eq!(other.raise_epoch(0, 5).unwrap(), Raise::Raised { from: 4 });
        assert_eq!(
            other.put(0, 5, &key, "newer").unwrap(),
            WriteOutcome::Written
        );

        let (status, body) = call(&s.service, Method::PUT, &key, Some("stale")).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(body["reason"], "stale_epoch");
        assert_eq!(body["code"], "conflict");
        assert_eq!(
            (body["epoch"].as_u64(), body["store_epoch"].as_u64()),
            (Some(4), Some(5))
        );
        assert_eq!(s.service.stats().stale_writes_refused, 1);
        assert_eq!(
            other.get(0, 5, &key).unwrap(),
            ReadOutcome::Found(crate::store::Stored {
                value: "newer".into(),
                written_epoch: 5
            })
        );
        // And it no longer serves reads of the shard.
        let (status, body) = call(&s.service, Method::GET, &key, None).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "fenced");
    }

    /// The raise on arrival (gate 2): the new owner serves only a read, never writes, and the
    /// previous owner's late write is refused all the same. Fails if `KvService::open` stops
    /// raising the stored epoch.
    #[tokio::test]
    async fn the_new_owner_raises_the_stored_epoch_before_it_serves_a_read() {
        let s = setup(None);
        let key = key_in(3, "k");
        // The previous owner (another process) wrote at epoch 1.
        let previous = ShardStore::open(s.store.dir()).unwrap();
        assert_eq!(
            previous.put(3, 1, &key, "old").unwrap(),
            WriteOutcome::Written
        );

        s.ownership.hold(&[(3, 2)]);
        let (status, body) = call(&s.service, Method::GET, &key, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["value"], "old");

        assert_eq!(
            previous.put(3, 1, &key, "late").unwrap(),
            WriteOutcome::StaleEpoch { store_epoch: 2 },
            "the previous owner's write after the new owner served must be refused"
        );
    }

    /// Gate 2 on arrival, with no request at all: the task raises the store as soon as the
    /// shard is held and admitting, and forgets shards that leave.
    #[tokio::test]
    async fn shards_are_raised_as_they_arrive_without_a_request() {
        let s = setup(None);
        let task = tokio::spawn(s.service.clone().raise_on_arrival());
        s.ownership.hold(&[(0, 2), (2, 7)]);
        // Done when the service has recorded both raises, not when the store shows them: the
        // store is written on a blocking thread, before the task that records the raise runs on.
        for _ in 0..500 {
            let opened = s.service.opened().clone();
            if opened.get(&0) == Some(&2) && opened.get(&2) == Some(&7) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(s.store.fence_epoch(0).unwrap(), 2);
        assert_eq!(s.store.fence_epoch(2).unwrap(), 7);
        s.ownership.hold(&[(2, 7)]);
        for _ in 0..500 {
            if !s.service.opened().contains_key(&0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!s.service.opened().contains_key(&0));
        assert_eq!(s.service.stats().epoch_raises, 2);
        task.abort();
    }

    /// A write that passed the ownership check reaches the store even when the request is
    /// dropped (client gone, request timeout): its outcome must not depend on who gave up first.
    #[tokio::test]
    async fn an_admitted_write_reaches_the_store_even_if_its_request_is_dropped() {
        let s = setup(Some(WriteDelay {
            prefix: "slow-".into(),
            delay: Duration::from_millis(300),
        }));
        s.ownership.hold(&[(1, 1)]);
        let key = key_in(1, "slow-");
        let request = {
            let (service, key) = (s.service.clone(), key.clone());
            tokio::spawn(async move { call(&service, Method::PUT, &key, Some("v")).await })
        };
        wait_for(|| s.service.stats().writes_in_flight == 1).await;
        // The client goes away while the write is held between the check and the store.
        request.abort();
        assert!(request.await.unwrap_err().is_cancelled());
        wait_for(|| s.store.get(1, 1, &key).unwrap() != ReadOutcome::Missing).await;
        wait_for(|| s.service.stats().writes_in_flight == 0).await;
        assert_eq!(s.service.stats().writes_accepted, 1);
    }

    /// Polls `condition` every 10 ms for up to 10 s.
    async fn wait_for(mut condition: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if condition() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not met within 10 s");
    }

    /// One page of one change per refresh, so a copy of a few keys takes several refreshes.
    const SMALL_PAGES: CopyConfig = CopyConfig {
        refresh: Duration::from_millis(10),
        page_rows: 1,
        pages_per_refresh: 1,
    };

    /// P19.3: a secondary is said ready, at the epoch its set shows, only once its copy has
    /// caught up with the store, not while it is still copying; and only once. Fails if
    /// `refresh_secondaries` says a secondary ready before its copy is complete.
    #[tokio::test]
    async fn p19_3_a_secondary_is_said_ready_only_once_its_copy_is_complete() {
        let s = setup(None);
        // The primary (another process) wrote three keys at epoch 4.
        let primary = ShardStore::open(s.store.dir()).unwrap();
        let keys: Vec<String> = (0..3).map(|i| key_in(2, &format!("k{i}-"))).collect();
        for key in &keys {
            assert_eq!(primary.put(2, 4, key, "v").unwrap(), WriteOutcome::Written);
        }
        s.ownership.hold_both(&[], &[(2, 4)]);
        for round in 1..=2 {
            let view = s.ownership.view.borrow().clone();
            s.service.refresh_secondaries(&view, &SMALL_PAGES).await;
            assert!(
                s.ownership.said_ready().is_empty(),
                "said ready after {round} of 3 changes"
            );
            let (status, body) = call_at(
                &s.service,
                Method::GET,
                &format!("/kv/{}?read=secondary", keys[0]),
                None,
            )
            .await;
            assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
            assert_eq!(body["reason"], "warming", "a warming copy serves nothing");
        }
        let view = s.ownership.view.borrow().clone();
        s.service.refresh_secondaries(&view, &SMALL_PAGES).await;
        assert_eq!(s.ownership.said_ready(), vec![(2, 4, true)]);
        // Ready already: not said again, however many refreshes follow.
        for _ in 0..3 {
            let view = s.ownership.view.borrow().clone();
            s.service.refresh_secondaries(&view, &SMALL_PAGES).await;
        }
        assert_eq!(s.ownership.said_ready().len(), 1);
        let stats = s.service.stats();
        assert_eq!(
            (
                stats.secondaries_said_ready,
                stats.copy_changes_applied,
                stats.secondary_copies
            ),
            (1, 3, 1)
        );
    }

    /// P19.5: `?read=secondary` is admitted only where the key's shard is held as a secondary
    /// and is served from the copy, saying so and how fresh the copy is; the primary's reads
    /// (no query) and every write are refused `421` there; a shard held as the primary is not
    /// read as a secondary. The copy follows the store's later writes and is dropped with the
    /// secondary. Fails if the secondary read is admitted in another role (`admit_key_as(..,
    /// Secondary)`), or served from the store rather than the copy.
    #[tokio::test]
    async fn p19_5_a_secondary_read_is_admitted_only_as_a_secondary_and_served_from_the_copy() {
        let s = setup(None);
        let primary = ShardStore::open(s.store.dir()).unwrap();
        let key = key_in(1, "k");
        assert_eq!(
            primary.put(1, 3, &key, "v1").unwrap(),
            WriteOutcome::Written
        );
        // Shard 1 held as a secondary at the primary's epoch 3; shard 0 as the primary.
        s.ownership.hold_both(&[(0, 5)], &[(1, 3)]);
        let view = s.ownership.view.borrow().clone();
        s.service
            .refresh_secondaries(&view, &CopyConfig::default())
            .await;

        let secondary_read = format!("/kv/{key}?read=secondary");
        let (status, body) = call_at(&s.service, Method::GET, &secondary_read, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            (
                &body["value"],
                &body["role"],
                &body["epoch"],
                &body["written_epoch"]
            ),
            (&"v1".into(), &"secondary".into(), &3.into(), &3.into())
        );
        assert_eq!(body["copy"]["applied_epoch"], 3);
        assert_eq!(body["copy"]["position"], 1);
        assert!(body["copy"]["age_ms"].as_u64().is_some(), "{body}");
        let (status, body) = call_at(
            &s.service,
            Method::GET,
            &format!("/kv/{key}?read=any"),
            None,
        )
        .await;
        assert_eq!(
            (status, &body["role"]),
            (StatusCode::OK, &"secondary".into())
        );

        // Not the primary: a primary read and a write of the key are refused.
        let (status, body) = call(&s.service, Method::GET, &key, None).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "not_owner");
        let (status, body) = call(&s.service, Method::PUT, &key, Some("v2")).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "not_owner");

        // A shard held as the primary is not a secondary here; `any` reads it as the primary.
        let own = key_in(0, "own");
        let (status, body) = call(&s.service, Method::PUT, &own, Some("mine")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = call_at(
            &s.service,
            Method::GET,
            &format!("/kv/{own}?read=secondary"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "not_owner");
        let (status, body) = call_at(
            &s.service,
            Method::GET,
            &format!("/kv/{own}?read=any"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            (body.get("role"), body.get("copy")),
            (None, None),
            "a primary read's body is unchanged: {body}"
        );

        // Served from the copy: a write the copy has not fetched yet is not seen, then is.
        assert_eq!(
            primary.put(1, 3, &key, "v2").unwrap(),
            WriteOutcome::Written
        );
        let (_, body) = call_at(&s.service, Method::GET, &secondary_read, None).await;
        assert_eq!(body["value"], "v1", "read from the copy, not the store");
        let view = s.ownership.view.borrow().clone();
        s.service
            .refresh_secondaries(&view, &CopyConfig::default())
            .await;
        let (_, body) = call_at(&s.service, Method::GET, &secondary_read, None).await;
        assert_eq!(
            (&body["value"], &body["copy"]["position"]),
            (&"v2".into(), &2.into())
        );
        let (status, _) = call_at(
            &s.service,
            Method::GET,
            &format!("/kv/{}?read=secondary", key_in(1, "never")),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, body) = call_at(
            &s.service,
            Method::GET,
            &format!("/kv/{key}?read=nearest"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

        // Fenced: a secondary serves nothing either (P19.1).
        s.ownership.fence();
        let (status, body) = call_at(&s.service, Method::GET, &secondary_read, None).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "not_admitting");

        // The secondary dropped: its copy goes, and its reads are refused.
        s.ownership.hold_both(&[(0, 5)], &[]);
        let view = s.ownership.view.borrow().clone();
        s.service
            .refresh_secondaries(&view, &CopyConfig::default())
            .await;
        assert_eq!(s.service.stats().secondary_copies, 0);
        let (status, body) = call_at(&s.service, Method::GET, &secondary_read, None).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert_eq!(body["reason"], "not_owner");
        assert_eq!(s.service.stats().secondary_reads, 5);
    }

    /// The copy task on its own: a shard placed here as a secondary is copied and said ready
    /// without a request, and the copy follows the store on the refresh interval.
    #[tokio::test]
    async fn secondaries_are_copied_and_said_ready_as_they_arrive() {
        let s = setup(None);
        let primary = ShardStore::open(s.store.dir()).unwrap();
        let key = key_in(3, "k");
        assert_eq!(
            primary.put(3, 2, &key, "v1").unwrap(),
            WriteOutcome::Written
        );
        let task = tokio::spawn(s.service.clone().keep_secondaries(CopyConfig {
            refresh: Duration::from_millis(20),
            ..CopyConfig::default()
        }));
        s.ownership.hold_both(&[], &[(3, 2)]);
        wait_for(|| s.ownership.said_ready() == vec![(3, 2, true)]).await;
        assert_eq!(
            primary.put(3, 2, &key, "v2").unwrap(),
            WriteOutcome::Written
        );
        wait_for(|| {
            matches!(
                s.service.copies().read(3, &key, std::time::Instant::now()),
                CopyRead::Found(stored, _) if stored.value == "v2"
            )
        })
        .await;
        task.abort();
    }

    #[tokio::test]
    async fn bad_input_is_a_400_problem() {
        let s = setup(None);
        s.ownership.hold(&[(0, 1), (1, 1), (2, 1), (3, 1)]);
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        let (status, body) = call(&s.service, Method::GET, &long, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let big = "v".repeat(MAX_VALUE_BYTES + 1);
        let (status, body) = call(&s.service, Method::PUT, "k", Some(&big)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let request = Request::builder()
            .method(Method::PUT)
            .uri("/kv/k")
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"value":"v","extra":1}"#))
            .unwrap();
        let response = s.service.router().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers()[CONTENT_TYPE],
            PROBLEM_CONTENT_TYPE,
            "problem+json"
        );
    }
}
