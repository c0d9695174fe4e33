//! Simulated executors: many lease holders in one process, each renewing on its own.
//!
//! - [`LeaseholdFleet`]: executors that speak the real JSON API through `leasehold_api`'s
//!   [`Client`] (register, renew with claims and revision, deregister), following the leader as a
//!   real executor does. One client, hence one connection pool and one leader hint, serves the
//!   whole fleet. Each executor keeps its set in the executor crate's own [`AssignmentState`]
//!   (P4.1 ordering), and one push server answers the manager's assignment pushes and revokes for
//!   all of them, dispatching on the `executor_id` the pushes carry. Each registers with its own
//!   credential and presents it on every renewal (P13.4), as the executor library does. Under
//!   TLS the client presents the executor certificate and the push server speaks TLS only, taking
//!   pushes from manager certificates only (P13.2, P13.3). A [`FleetSpec`] can give executors
//!   capacities and have their renewals report loads for the shards they hold (P15.1).
//!
//! The same load against etcd lives in [`crate::etcd`].

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use anyhow::{anyhow, Context, Result};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{post, put};
use axum::{Extension, Json, Router};
use leasehold_api::client::{Client, ClientConfig, ClientError};
use leasehold_api::problem::ErrorCode;
use leasehold_api::serve::{ListenerLimits, PeerRole};
use leasehold_api::tls::{Role, TlsConfig};
use leasehold_api::wire::{
    AssignmentPush, Credential, Grant, RegisterRequest, RenewRequest, RevokePush, RevokeReply,
    ShardEpoch, ShardLoad,
};
use leasehold_conformance::admission_log::{AdmissionEdge, AdmissionRecord, ExecutorLog};
use leasehold_conformance::checker::monotonic_now_ns;
use leasehold_executor::assignment::{AssignmentState, Layout, SetOutcome};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Registrations, lease grants and stream openings in flight at once while a fleet starts.
const SETUP_CONCURRENCY: usize = 64;

/// Why one renewal failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewFailure {
    /// The system no longer knows the executor (reaped, or its etcd lease expired): an eviction.
    Evicted,
    /// Anything else (timeout, no leader, transport).
    Other(String),
}

impl std::fmt::Display for RenewFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenewFailure::Evicted => f.write_str("evicted"),
            RenewFailure::Other(message) => f.write_str(message),
        }
    }
}

/// Something with `size()` lease holders that can renew holder `index`.
pub trait Renewer: Send + Sync + 'static {
    /// Number of lease holders.
    fn size(&self) -> usize;
    /// Renews holder `index`; on success, the lease time left in milliseconds.
    fn renew(&self, index: usize) -> impl Future<Output = Result<u64, RenewFailure>> + Send;
    /// The executor id holder `index` registered as, for a system that has them: its first
    /// renewal after registering comes when the executor library's would (P3.5).
    fn executor_id(&self, _index: usize) -> Option<&str> {
        None
    }
}

/// Runs `make(i)` for `0..count` with at most [`SETUP_CONCURRENCY`] in flight; results in order.
pub(crate) async fn setup_all<T, F, Fut>(count: usize, make: F) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for index in 0..count {
        let permit = permits.clone().acquire_owned().await?;
        let work = make(index);
        tasks.spawn(async move {
            let result = work.await;
            drop(permit);
            (index, result)
        });
    }
    let mut results: Vec<Option<T>> = (0..count).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        let (index, result) = joined?;
        results[index] = Some(result.with_context(|| format!("holder {index}"))?);
    }
    Ok(results.into_iter().flatten().collect())
}

/// The body of a renewal of an executor holding `shards` shards, as the client sends it to a
/// cluster at the newest cluster version (claims as runs): what etcd shape (a) writes, so both
/// systems move the same bytes per renewal.
pub fn claims_payload(shards: u32) -> Vec<u8> {
    let request = RenewRequest {
        claim_runs: None,
        claims: (0..shards)
            .map(|shard| ShardEpoch { shard, epoch: 1 })
            .collect(),
        revision: 1_000_000,
        loads: None,
        accept_unchanged: false,
        ready: Vec::new(),
    };
    serde_json::to_vec(&request.with_claims_as_runs()).unwrap_or_default()
}

/// The loads a fleet's executors report in their renewals (P15.1).
pub trait LoadReports: std::fmt::Debug + Send + Sync + 'static {
    /// What executor `index` reports on its `renewal`-th renewal (counted from 0) for the
    /// shards it holds, `held`.
    fn loads(&self, index: usize, renewal: u64, held: &[ShardEpoch]) -> Vec<ShardLoad>;
}

/// Every held shard reports the same load: the cost of carrying load reports (B1
/// `--report-loads`) without giving the planner anything to move, since equal loads on equal
/// executors are already balanced.
#[derive(Debug, Clone, Copy)]
pub struct UniformLoad(pub f64);

impl LoadReports for UniformLoad {
    fn loads(&self, _index: usize, _renewal: u64, held: &[ShardEpoch]) -> Vec<ShardLoad> {
        held.iter()
            .map(|claim| ShardLoad {
                shard: claim.shard,
                load: self.0,
            })
            .collect()
    }
}

/// Who a fleet's executors are: how many, the capacity each registers with and the loads each
/// reports.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub count: usize,
    /// Capacity of executor `i` (P15.1), sent when present. Executors past its end, and every
    /// executor when it is empty, send none and count as capacity 1, as executors of earlier
    /// releases do.
    pub capacities: Vec<u32>,
    /// `None`: renewals carry no `loads`, so the leader places by count.
    pub loads: Option<Arc<dyn LoadReports>>,
    /// Namespace executor `i` registers into (P18.1), which must exist. Executors past its end,
    /// and every executor when it is empty, name none and register into `default`, as executors
    /// of earlier releases do.
    pub namespaces: Vec<String>,
    /// Keep each executor's admission log (§9) in memory: a start when a set gives it a shard at
    /// an epoch, a stop when a set or revoke takes it, at the instant it was applied, in the
    /// layout of that set ([`LeaseholdFleet::admission_logs`]).
    pub record_admission: bool,
}

impl FleetSpec {
    /// `count` executors that state no capacity and report no loads.
    pub fn plain(count: usize) -> Self {
        Self {
            count,
            capacities: Vec::new(),
            loads: None,
            namespaces: Vec::new(),
            record_admission: false,
        }
    }

    /// `count` executors in `namespace` that state no capacity and report no loads.
    pub fn in_namespace(count: usize, namespace: &str) -> Self {
        Self {
            namespaces: vec![namespace.to_owned(); count],
            ..Self::plain(count)
        }
    }
}

#[derive(Debug)]
struct SimExecutor {
    executor_id: String,
    /// Registered with, and presented on every renewal and deregistration (P13.4).
    credential: Credential,
    /// Renewals sent so far: the report number [`LoadReports`] is given.
    renewals: AtomicU64,
    assignment: Mutex<AssignmentState>,
    /// Its admission log, when the fleet keeps them ([`FleetSpec::record_admission`]).
    admission: Option<Mutex<Vec<AdmissionRecord>>>,
}

impl SimExecutor {
    fn assignment(&self) -> std::sync::MutexGuard<'_, AssignmentState> {
        self.assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `change` on the executor's set and, when it keeps an admission log, logs what the
    /// change stopped and started, at one instant under the set's lock (as the executor library
    /// writes its lines before it answers).
    fn change<T>(&self, change: impl FnOnce(&mut AssignmentState) -> T) -> T {
        let mut assignment = self.assignment();
        let Some(log) = &self.admission else {
            return change(&mut assignment);
        };
        let before = admitted(&assignment);
        let result = change(&mut assignment);
        let after = admitted(&assignment);
        if before != after {
            let t_ns = monotonic_now_ns();
            let line = |(generation, shard, epoch): (u64, u32, u64),
                        shard_count: u32,
                        event: AdmissionEdge| AdmissionRecord {
                t_ns,
                executor_id: self.executor_id.clone(),
                shard,
                epoch,
                reason: match event {
                    AdmissionEdge::Start => "assigned".to_owned(),
                    AdmissionEdge::Stop => "unassigned".to_owned(),
                },
                event,
                role: leasehold_api::wire::Role::Primary,
                generation,
                shard_count: Some(shard_count),
            };
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            let stops = before.1.difference(&after.1).copied();
            log.extend(stops.map(|held| line(held, before.0, AdmissionEdge::Stop)));
            let starts = after.1.difference(&before.1).copied();
            log.extend(starts.map(|held| line(held, after.0, AdmissionEdge::Start)));
        }
        result
    }
}

/// What an executor admits: its layout's shard count, and each held shard as (generation,
/// shard, epoch).
fn admitted(assignment: &AssignmentState) -> (u32, BTreeSet<(u64, u32, u64)>) {
    let layout = assignment.layout();
    let held = assignment
        .held()
        .into_iter()
        .map(|held| (layout.generation, held.shard, held.epoch))
        .collect();
    (layout.shard_count, held)
}

/// Executors by id, for the push server.
#[derive(Debug, Default)]
struct Registry {
    by_id: RwLock<HashMap<String, Arc<SimExecutor>>>,
    /// Under TLS only managers may push (P13.3).
    tls: bool,
    /// Pushes and revokes answered.
    pushes: AtomicU64,
}

impl Registry {
    /// Who may push (P13.3): anyone in plaintext; under TLS, a manager's certificate only.
    fn admit(&self, peer: Option<&PeerRole>) -> Result<(), StatusCode> {
        if !self.tls {
            return Ok(());
        }
        match peer.map(PeerRole::role) {
            Some(Ok(Role::Manager { .. })) => Ok(()),
            Some(_) => Err(StatusCode::FORBIDDEN),
            None => Err(StatusCode::UNAUTHORIZED),
        }
    }

    fn get(&self, executor_id: &str) -> Option<Arc<SimExecutor>> {
        self.by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(executor_id)
            .cloned()
    }

    fn insert(&self, executor: Arc<SimExecutor>) {
        self.by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(executor.executor_id.clone(), executor);
    }
}

/// `PUT /v1/assignment` for every simulated executor (P4.1, P4.3).
async fn assignment_push(
    State(registry): State<Arc<Registry>>,
    peer: Option<Extension<PeerRole>>,
    Json(push): Json<AssignmentPush>,
) -> Result<Json<serde_json::Value>, StatusCode> {
    registry.admit(peer.as_deref())?;
    // Not registered here yet (its register reply is still on the way): 409, and the manager
    // repairs forwards (P5.3).
    let executor = registry
        .get(&push.executor_id)
        .ok_or(StatusCode::CONFLICT)?;
    let layout = Layout {
        shard_count: push.shard_count,
        generation: push.generation,
    };
    executor
        .change(|assignment| {
            assignment.apply_set_in(push.revision, layout, &push.shards, &push.secondaries)
        })
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    registry.pushes.fetch_add(1, Ordering::Relaxed);
    Ok(Json(serde_json::json!({})))
}

/// `POST /v1/revoke`: answered as the executor library answers it (`RevokeOutcome::reply`, P5.2).
async fn revoke_push(
    State(registry): State<Arc<Registry>>,
    peer: Option<Extension<PeerRole>>,
    Json(push): Json<RevokePush>,
) -> Result<Json<RevokeReply>, StatusCode> {
    registry.admit(peer.as_deref())?;
    let executor = registry
        .get(&push.executor_id)
        .ok_or(StatusCode::SERVICE_UNAVAILABLE)?;
    // A revoke numbered in a layout this executor's set is not in yet is refused, as the
    // library refuses it (P20.3): the managers send it again once the set has arrived.
    let outcome = executor
        .change(|assignment| {
            assignment.validate_revoke_in(push.revision, push.generation, &push.shards)?;
            assignment.apply_revoke(push.revision, &push.shards)
        })
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    registry.pushes.fetch_add(1, Ordering::Relaxed);
    Ok(Json(outcome.reply(push.revision)))
}

/// The fleet's push endpoint on a free loopback port, over TLS with `tls`: its advertised
/// address, the registry it answers for, and its task.
async fn serve_pushes(
    tls: Option<&TlsConfig>,
) -> Result<(String, Arc<Registry>, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let address = format!("{scheme}://{}", listener.local_addr()?);
    let registry = Arc::new(Registry {
        tls: tls.is_some(),
        ..Registry::default()
    });
    let app = Router::new()
        .route("/v1/assignment", put(assignment_push))
        .route("/v1/revoke", post(revoke_push))
        // A push during a large cluster's first rebalances can name many shards.
        .layer(DefaultBodyLimit::disable())
        .with_state(registry.clone());
    // The executor library's own server builder, so plaintext and TLS pushes are served the
    // same way (and as a real executor serves them).
    let server_tls = tls.map(TlsConfig::server_config);
    let server = tokio::spawn(async move {
        let _ = leasehold_api::serve::serve(
            listener,
            app,
            server_tls,
            ListenerLimits::default(),
            std::future::pending(),
        )
        .await;
    });
    Ok((address, registry, server))
}

/// Registers one simulated executor with `request` (which presents `credential`), takes the
/// set its reply grants, and adds it to `registry` for the pushes. With `record_admission` it
/// keeps its admission log from that set on.
async fn register_executor(
    client: Client,
    registry: Arc<Registry>,
    request: RegisterRequest,
    credential: Credential,
    record_admission: bool,
) -> Result<Arc<SimExecutor>> {
    let grant = client.register(&request).await?;
    let executor = Arc::new(SimExecutor {
        executor_id: grant.executor_id.clone(),
        credential,
        renewals: AtomicU64::new(0),
        assignment: Mutex::new(AssignmentState::default()),
        admission: record_admission.then(|| Mutex::new(Vec::new())),
    });
    executor
        .change(|assignment| {
            assignment.apply_set_in(
                grant.revision,
                layout_of(&grant),
                &grant.shards,
                &grant.secondaries,
            )
        })
        .map_err(|e| anyhow!("register reply: {e}"))?;
    registry.insert(executor.clone());
    Ok(executor)
}

/// Simulated Leasehold executors.
#[derive(Debug)]
pub struct LeaseholdFleet {
    client: Client,
    executors: Vec<Arc<SimExecutor>>,
    loads: Option<Arc<dyn LoadReports>>,
    registry: Arc<Registry>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for LeaseholdFleet {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl LeaseholdFleet {
    /// Binds the push endpoint (P8.1), then registers the executors `spec` describes. With
    /// `tls` (an executor certificate) the push endpoint speaks TLS, advertised as `https://`,
    /// and the client presents the certificate. The managers are fresh clusters at the newest
    /// cluster version, so capacities and loads are sent as they are (the executor library
    /// leaves them out for clusters before version 4).
    pub async fn start(
        managers: Vec<String>,
        spec: FleetSpec,
        config: ClientConfig,
        tls: Option<&TlsConfig>,
    ) -> Result<Self> {
        let (address, registry, server) = serve_pushes(tls).await?;
        let client = Client::with_tls(managers, config, tls)?;
        // Incarnations are idempotency keys (P4.4): unique per process and fleet, or a second
        // fleet would be handed the first one's executors.
        static FLEETS: AtomicU64 = AtomicU64::new(0);
        let run = format!(
            "{}-{}",
            std::process::id(),
            FLEETS.fetch_add(1, Ordering::Relaxed)
        );
        let executors = setup_all(spec.count, |index| {
            let credential = Credential::from_random(rand::random());
            let request = RegisterRequest {
                // The fleet's executors keep their sets in the library's `AssignmentState`,
                // which follows a change of layout (P20.3); the clusters are at the newest
                // cluster version.
                follows_generations: true,
                namespace: spec.namespaces.get(index).cloned(),
                incarnation: format!("bench-{run}-{index}"),
                address: address.clone(),
                name: None,
                credential: Some(credential.clone()),
                capacity: spec.capacities.get(index).copied(),
                app_version: None,
                labels: Default::default(),
            };
            register_executor(
                client.clone(),
                registry.clone(),
                request,
                credential,
                spec.record_admission,
            )
        })
        .await?;
        Ok(Self {
            client,
            executors,
            loads: spec.loads,
            registry,
            server,
        })
    }

    /// The shards each executor holds now, by its own view (what it would serve), in executor
    /// order.
    pub fn held_sets(&self) -> Vec<Vec<u32>> {
        self.executors
            .iter()
            .map(|e| e.assignment().held().iter().map(|c| c.shard).collect())
            .collect()
    }

    /// Each executor's admission log ([`FleetSpec::record_admission`]; empty without it), its open
    /// intervals ending now. The fleet does not fence on a lapse: the logs say what executors
    /// of the library would admit only while no lease lapsed (every renewal within its TTL).
    pub fn admission_logs(&self) -> Vec<ExecutorLog> {
        let now_ns = monotonic_now_ns();
        self.executors
            .iter()
            .filter_map(|executor| executor.admission.as_ref())
            .map(|log| ExecutorLog {
                records: log.lock().unwrap_or_else(PoisonError::into_inner).clone(),
                ended_at_ns: Some(now_ns),
            })
            .collect()
    }

    /// Assignment pushes and revokes the push endpoint has answered.
    pub fn pushes_answered(&self) -> u64 {
        self.registry.pushes.load(Ordering::Relaxed)
    }

    /// (total, fewest, most) shards held across the fleet.
    pub fn held_spread(&self) -> (usize, usize, usize) {
        let counts: Vec<usize> = self
            .executors
            .iter()
            .map(|e| e.assignment().held().len())
            .collect();
        (
            counts.iter().sum(),
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
        )
    }

    /// Renews every executor once (at most [`SETUP_CONCURRENCY`] at a time); returns how many
    /// failed.
    pub async fn renew_all(self: &Arc<Self>) -> usize {
        let renewed = setup_all(self.executors.len(), |index| {
            let fleet = self.clone();
            async move { Ok(fleet.renew(index).await.is_err()) }
        })
        .await;
        match renewed {
            Ok(failed) => failed.into_iter().filter(|&f| f).count(),
            Err(_) => self.executors.len(),
        }
    }

    /// Deregisters executor `index` (P3.7): the manager frees its shards at once. Its renewals
    /// must have stopped (a renewal after this is refused as from an unknown executor).
    pub async fn deregister(&self, index: usize) -> Result<()> {
        let executor = self
            .executors
            .get(index)
            .ok_or_else(|| anyhow!("no executor {index}"))?;
        self.client
            .deregister(&executor.executor_id, Some(&executor.credential))
            .await?;
        Ok(())
    }

    /// Deregisters every executor (P3.7).
    pub async fn deregister_all(&self) -> Result<()> {
        let client = self.client.clone();
        setup_all(self.executors.len(), |index| {
            let client = client.clone();
            let executor = self.executors[index].clone();
            async move {
                Ok(client
                    .deregister(&executor.executor_id, Some(&executor.credential))
                    .await?)
            }
        })
        .await?;
        Ok(())
    }
}

impl Renewer for LeaseholdFleet {
    fn size(&self) -> usize {
        self.executors.len()
    }

    fn executor_id(&self, index: usize) -> Option<&str> {
        self.executors
            .get(index)
            .map(|executor| executor.executor_id.as_str())
    }

    async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
        let executor = self
            .executors
            .get(index)
            .ok_or_else(|| RenewFailure::Other(format!("no executor {index}")))?;
        let request = {
            let assignment = executor.assignment();
            let claims = assignment.held();
            let renewal = executor.renewals.fetch_add(1, Ordering::Relaxed);
            RenewRequest {
                claim_runs: None,
                loads: self
                    .loads
                    .as_ref()
                    .map(|loads| loads.loads(index, renewal, &claims)),
                claims,
                revision: assignment.revision(),
                accept_unchanged: false,
                ready: Vec::new(),
            }
        };
        let grant = self
            .client
            .renew(&executor.executor_id, Some(&executor.credential), &request)
            .await
            .map_err(|error| match error.code() {
                Some(ErrorCode::UnknownExecutor) => RenewFailure::Evicted,
                _ => RenewFailure::Other(short_error(&error)),
            })?;
        executor.change(|assignment| {
            match assignment.apply_set_in(
                grant.revision,
                layout_of(&grant),
                &grant.shards,
                &grant.secondaries,
            ) {
                Ok(SetOutcome::Stale { .. }) => {
                    // P3.3: the stale grant's lease still counts, minus what it no longer covers.
                    assignment.drop_taken_by(grant.revision, &grant.shards);
                    Ok(())
                }
                Ok(SetOutcome::Applied { .. }) => Ok(()),
                Err(error) => Err(RenewFailure::Other(format!("grant: {error}"))),
            }
        })?;
        Ok(grant.lease_ttl_ms)
    }
}

/// The layout a grant is of (PROTOCOL §20): the fleet follows a change of layout as the
/// executor library does, switching every held shard in the one receipt of the set.
fn layout_of(grant: &Grant) -> Layout {
    Layout {
        shard_count: grant.shard_count,
        generation: grant.generation,
    }
}

fn short_error(error: &ClientError) -> String {
    match error.code() {
        Some(code) => code.as_str().to_owned(),
        None => error.to_string().chars().take(160).collect(),
    }
}
