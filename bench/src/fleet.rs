//! Simulated executors: many lease holders in one process, each renewing on its own.
//!
//! - [`LeaseholdFleet`]: executors that speak the real JSON API through `leasehold_api`'s
//!   [`Client`] (register, renew with claims and revision, deregister), following the leader as a
//!   real executor does. One client, hence one connection pool and one leader hint, serves the
//!   whole fleet. Each executor keeps its set in the executor crate's own [`AssignmentState`]
//!   (P4.1 ordering), and one push server answers the manager's assignment pushes and revokes for
//!   all of them, dispatching on the `executor_id` the pushes carry.
//! - [`EtcdPutFleet`]: the same executors against etcd, shape (a): a lease per executor and each
//!   renewal a put of the executor's claims attached to it, a replicated write.
//! - [`EtcdKeepAliveFleet`]: shape (b): each renewal one keepalive on the executor's long-lived
//!   keepalive stream; etcd answers these from the leader's memory without a log write.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{post, put};
use axum::{Json, Router};
use etcd_client::{LeaseKeepAliveStream, LeaseKeeper, PutOptions};
use leasehold_api::client::{Client, ClientConfig, ClientError};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    AssignmentPush, RegisterRequest, RenewRequest, RevokePush, RevokeReply, ShardEpoch,
};
use leasehold_executor::assignment::{AssignmentState, RevokeOutcome, SetOutcome};
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
}

/// Runs `make(i)` for `0..count` with at most [`SETUP_CONCURRENCY`] in flight; results in order.
async fn setup_all<T, F, Fut>(count: usize, make: F) -> Result<Vec<T>>
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

/// The claims a renewal of an executor holding `shards` shards carries, JSON-encoded: what etcd
/// shape (a) writes, so both systems move the same bytes per renewal.
pub fn claims_payload(shards: u32) -> Vec<u8> {
    let request = RenewRequest {
        claims: (0..shards)
            .map(|shard| ShardEpoch { shard, epoch: 1 })
            .collect(),
        revision: 1_000_000,
    };
    serde_json::to_vec(&request).unwrap_or_default()
}

#[derive(Debug)]
struct SimExecutor {
    executor_id: String,
    assignment: Mutex<AssignmentState>,
}

impl SimExecutor {
    fn assignment(&self) -> std::sync::MutexGuard<'_, AssignmentState> {
        self.assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Executors by id, for the push server.
#[derive(Debug, Default)]
struct Registry {
    by_id: RwLock<HashMap<String, Arc<SimExecutor>>>,
}

impl Registry {
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
    Json(push): Json<AssignmentPush>,
) -> Result<Json<serde_json::Value>, StatusCode> {
    // Not registered here yet (its register reply is still on the way): 409, and the manager
    // repairs forwards (P5.3).
    let executor = registry
        .get(&push.executor_id)
        .ok_or(StatusCode::CONFLICT)?;
    executor
        .assignment()
        .apply_set(push.revision, push.shard_count, &push.shards)
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    Ok(Json(serde_json::json!({})))
}

/// `POST /v1/revoke`: answered after the shards left the set; a stale revoke is answered as
/// ignored, never as done (P5.2).
async fn revoke_push(
    State(registry): State<Arc<Registry>>,
    Json(push): Json<RevokePush>,
) -> Result<Json<RevokeReply>, StatusCode> {
    let executor = registry
        .get(&push.executor_id)
        .ok_or(StatusCode::SERVICE_UNAVAILABLE)?;
    let outcome = executor
        .assignment()
        .apply_revoke(push.revision, &push.shards)
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    Ok(Json(match outcome {
        RevokeOutcome::Applied { released, .. } => RevokeReply {
            revision: push.revision,
            released,
            ignored: false,
        },
        RevokeOutcome::Ignored { .. } => RevokeReply {
            revision: push.revision,
            released: Vec::new(),
            ignored: true,
        },
    }))
}

/// Simulated Leasehold executors.
#[derive(Debug)]
pub struct LeaseholdFleet {
    client: Client,
    executors: Vec<Arc<SimExecutor>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for LeaseholdFleet {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl LeaseholdFleet {
    /// Binds the push endpoint (P8.1), then registers `count` executors.
    pub async fn start(managers: Vec<String>, count: usize, config: ClientConfig) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = format!("http://{}", listener.local_addr()?);
        let registry = Arc::new(Registry::default());
        let app = Router::new()
            .route("/v1/assignment", put(assignment_push))
            .route("/v1/revoke", post(revoke_push))
            // A push during a large cluster's first rebalances can name many shards.
            .layer(DefaultBodyLimit::disable())
            .with_state(registry.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let client = Client::with_config(managers, config)?;
        // Incarnations are idempotency keys (P4.4): unique per process and fleet, or a second
        // fleet would be handed the first one's executors.
        static FLEETS: AtomicU64 = AtomicU64::new(0);
        let run = format!(
            "{}-{}",
            std::process::id(),
            FLEETS.fetch_add(1, Ordering::Relaxed)
        );
        let executors = setup_all(count, |index| {
            let client = client.clone();
            let registry = registry.clone();
            let address = address.clone();
            let incarnation = format!("bench-{run}-{index}");
            async move {
                let grant = client
                    .register(&RegisterRequest {
                        incarnation,
                        address,
                        name: None,
                    })
                    .await?;
                let mut assignment = AssignmentState::default();
                assignment
                    .apply_set(grant.revision, grant.shard_count, &grant.shards)
                    .map_err(|e| anyhow!("register reply: {e}"))?;
                let executor = Arc::new(SimExecutor {
                    executor_id: grant.executor_id,
                    assignment: Mutex::new(assignment),
                });
                registry.insert(executor.clone());
                Ok(executor)
            }
        })
        .await?;
        Ok(Self {
            client,
            executors,
            server,
        })
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

    /// Deregisters every executor (P3.7).
    pub async fn deregister_all(&self) -> Result<()> {
        let client = self.client.clone();
        let ids: Vec<String> = self
            .executors
            .iter()
            .map(|e| e.executor_id.clone())
            .collect();
        setup_all(ids.len(), |index| {
            let client = client.clone();
            let id = ids[index].clone();
            async move { Ok(client.deregister(&id).await?) }
        })
        .await?;
        Ok(())
    }
}

impl Renewer for LeaseholdFleet {
    fn size(&self) -> usize {
        self.executors.len()
    }

    async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
        let executor = self
            .executors
            .get(index)
            .ok_or_else(|| RenewFailure::Other(format!("no executor {index}")))?;
        let request = {
            let assignment = executor.assignment();
            RenewRequest {
                claims: assignment.held(),
                revision: assignment.revision(),
            }
        };
        let grant = self
            .client
            .renew(&executor.executor_id, &request)
            .await
            .map_err(|error| match error.code() {
                Some(ErrorCode::UnknownExecutor) => RenewFailure::Evicted,
                _ => RenewFailure::Other(short_error(&error)),
            })?;
        let mut assignment = executor.assignment();
        match assignment.apply_set(grant.revision, grant.shard_count, &grant.shards) {
            Ok(SetOutcome::Stale { .. }) => {
                // P3.3: the stale grant's lease still counts, minus what it no longer covers.
                assignment.drop_taken_by(grant.revision, &grant.shards);
            }
            Ok(SetOutcome::Applied { .. }) => {}
            Err(error) => return Err(RenewFailure::Other(format!("grant: {error}"))),
        }
        Ok(grant.lease_ttl_ms)
    }
}

fn short_error(error: &ClientError) -> String {
    match error.code() {
        Some(code) => code.as_str().to_owned(),
        None => error.to_string().chars().take(160).collect(),
    }
}

/// Connects `connections` etcd clients, each over every endpoint (its own HTTP/2 connections).
pub async fn etcd_clients(
    endpoints: &[String],
    connections: usize,
    request_timeout: Duration,
) -> Result<Vec<etcd_client::Client>> {
    let mut clients = Vec::new();
    for _ in 0..connections.max(1) {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(request_timeout);
        clients.push(etcd_client::Client::connect(endpoints, Some(options)).await?);
    }
    Ok(clients)
}

/// Grants one lease of `ttl_s` seconds per holder.
async fn grant_leases(
    clients: &[etcd_client::Client],
    count: usize,
    ttl_s: i64,
) -> Result<Vec<i64>> {
    setup_all(count, |index| {
        let mut client = clients[index % clients.len()].clone();
        async move { Ok(client.lease_grant(ttl_s, None).await?.id()) }
    })
    .await
}

fn etcd_failure(error: &etcd_client::Error) -> RenewFailure {
    let text = error.to_string();
    // A put or keepalive naming an expired lease: etcd's "requested lease not found".
    if text.contains("lease not found") {
        RenewFailure::Evicted
    } else {
        RenewFailure::Other(text.chars().take(160).collect())
    }
}

/// Bound on retries of one lease query after a member restart, and the pause between them.
const LEASE_QUERY_ATTEMPTS: u32 = 20;
const LEASE_QUERY_RETRY: Duration = Duration::from_millis(250);

/// etcd shape (a): one lease per executor, each renewal a put of its claims attached to it.
pub struct EtcdPutFleet {
    clients: Vec<etcd_client::Client>,
    leases: Vec<i64>,
    value: Vec<u8>,
}

impl EtcdPutFleet {
    pub async fn start(
        clients: Vec<etcd_client::Client>,
        count: usize,
        ttl_s: i64,
        value: Vec<u8>,
    ) -> Result<Self> {
        let leases = grant_leases(&clients, count, ttl_s).await?;
        Ok(Self {
            clients,
            leases,
            value,
        })
    }

    pub fn lease(&self, index: usize) -> Option<i64> {
        self.leases.get(index).copied()
    }
}

impl Renewer for EtcdPutFleet {
    fn size(&self) -> usize {
        self.leases.len()
    }

    async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
        let lease = self
            .lease(index)
            .ok_or_else(|| RenewFailure::Other(format!("no holder {index}")))?;
        let mut client = self.clients[index % self.clients.len()].clone();
        client
            .put(
                format!("/leasehold-bench/executors/{index}"),
                self.value.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(|e| etcd_failure(&e))?;
        Ok(0)
    }
}

#[derive(Debug)]
struct KeepAliveStream {
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

/// etcd shape (b): one lease per executor kept alive on its own long-lived stream.
pub struct EtcdKeepAliveFleet {
    clients: Vec<etcd_client::Client>,
    leases: Vec<i64>,
    streams: Vec<tokio::sync::Mutex<Option<KeepAliveStream>>>,
}

impl EtcdKeepAliveFleet {
    pub async fn start(
        clients: Vec<etcd_client::Client>,
        count: usize,
        ttl_s: i64,
    ) -> Result<Self> {
        let leases = grant_leases(&clients, count, ttl_s).await?;
        let opened = setup_all(count, |index| {
            let mut client = clients[index % clients.len()].clone();
            let lease = leases[index];
            async move {
                let (keeper, stream) = client.lease_keep_alive(lease).await?;
                Ok(KeepAliveStream { keeper, stream })
            }
        })
        .await?;
        Ok(Self {
            clients,
            leases,
            streams: opened
                .into_iter()
                .map(|s| tokio::sync::Mutex::new(Some(s)))
                .collect(),
        })
    }

    /// Number of leases whose time to live is over (expired or revoked).
    pub async fn expired_leases(&self) -> Result<usize> {
        let mut client = self.clients[0].clone();
        let mut expired = 0;
        for &lease in &self.leases {
            let mut attempts = 0;
            let ttl = loop {
                match client.lease_time_to_live(lease, None).await {
                    Ok(response) => break response.ttl(),
                    // A member restarted a moment ago may still refuse on one of the channel's
                    // endpoints until it is reconnected.
                    Err(_) if attempts < LEASE_QUERY_ATTEMPTS => {
                        attempts += 1;
                        tokio::time::sleep(LEASE_QUERY_RETRY).await;
                    }
                    Err(error) => return Err(error.into()),
                }
            };
            if ttl <= 0 {
                expired += 1;
            }
        }
        Ok(expired)
    }
}

impl Renewer for EtcdKeepAliveFleet {
    fn size(&self) -> usize {
        self.leases.len()
    }

    async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
        let slot = self
            .streams
            .get(index)
            .ok_or_else(|| RenewFailure::Other(format!("no holder {index}")))?;
        let mut slot = slot.lock().await;
        // Taken out while in use: a renewal cancelled half-way (timeout) leaves no stream with an
        // unread reply behind, and the next renewal opens a fresh one.
        let mut open = match slot.take() {
            Some(open) => open,
            None => {
                // The stream broke (its member died): open another, as etcd's own clients do.
                let mut client = self.clients[index % self.clients.len()].clone();
                let (keeper, stream) = client
                    .lease_keep_alive(self.leases[index])
                    .await
                    .map_err(|e| etcd_failure(&e))?;
                KeepAliveStream { keeper, stream }
            }
        };
        let answer = async {
            open.keeper.keep_alive().await?;
            open.stream.message().await
        }
        .await;
        match answer {
            Ok(Some(reply)) if reply.ttl() > 0 => {
                *slot = Some(open);
                Ok(u64::try_from(reply.ttl()).unwrap_or(0) * 1000)
            }
            Ok(Some(_)) => Err(RenewFailure::Evicted),
            Ok(None) => Err(RenewFailure::Other("keepalive stream ended".to_owned())),
            Err(error) => Err(etcd_failure(&error)),
        }
    }
}
