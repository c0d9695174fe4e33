//! A minimal executor that speaks the manager's HTTP API, for testing the manager's lease
//! protocol without the real executor: registers, renews at a third of its lease with its claims
//! and last applied revision, applies deliveries in revision order (P4.1; a revoke raises the
//! applied revision), answers revokes after it stopped admitting, and records when it admitted
//! each shard on the test process's monotonic clock, so the intervals of several fake executors
//! can be checked for overlap (I1).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::routing::{post, put};
use axum::{Json, Router};
use leasehold_api::client::{Client, ClientConfig, ClientError};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    AssignmentPush, Grant, RegisterRequest, RenewRequest, RevokePush, RevokeReply, ShardEpoch,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One admission interval of one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub executor: String,
    pub shard: u32,
    pub epoch: u64,
    pub start: Instant,
    /// None while still admitting.
    pub end: Option<Instant>,
}

#[derive(Debug)]
struct View {
    executor_id: String,
    applied_revision: u64,
    held: BTreeMap<u32, u64>,
    /// The lease as P3.2 allows: send instant of the granting request + ttl.
    lease_expiry: Instant,
    intervals: Vec<Interval>,
    /// Set for tests of delayed acknowledgement: revokes answered 503.
    refuse_revokes: bool,
}

impl View {
    fn open(&mut self, shard: u32, epoch: u64, now: Instant) {
        self.intervals.push(Interval {
            executor: self.executor_id.clone(),
            shard,
            epoch,
            start: now,
            end: None,
        });
    }

    fn close(&mut self, shard: u32, now: Instant) {
        // Admission ended at the earlier of now and the lease expiry (a lapse ends it too).
        let end = now.min(self.lease_expiry);
        if let Some(open) = self
            .intervals
            .iter_mut()
            .rev()
            .find(|i| i.shard == shard && i.end.is_none())
        {
            open.end = Some(end.max(open.start));
        }
    }

    /// The one receipt path for a delivered set (P4.3).
    fn adopt(&mut self, revision: u64, shards: &[ShardEpoch], now: Instant) {
        if revision < self.applied_revision {
            return;
        }
        self.applied_revision = revision;
        let next: BTreeMap<u32, u64> = shards.iter().map(|s| (s.shard, s.epoch)).collect();
        let dropped: Vec<u32> = self
            .held
            .iter()
            .filter(|(shard, epoch)| next.get(shard) != Some(epoch))
            .map(|(shard, _)| *shard)
            .collect();
        for shard in dropped {
            self.held.remove(&shard);
            self.close(shard, now);
        }
        for (shard, epoch) in next {
            if self.held.insert(shard, epoch).is_none() {
                self.open(shard, epoch, now);
            }
        }
    }
}

/// A running fake executor; stops (like a crash) when dropped or killed.
#[derive(Debug)]
pub struct FakeExecutor {
    pub executor_id: String,
    pub address: String,
    view: Arc<Mutex<View>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

type Shared = Arc<Mutex<View>>;

fn lock(view: &Shared) -> std::sync::MutexGuard<'_, View> {
    view.lock().unwrap_or_else(|p| p.into_inner())
}

async fn assignment(
    State(view): State<Shared>,
    Json(push): Json<AssignmentPush>,
) -> Result<Json<serde_json::Value>, axum::http::StatusCode> {
    let mut view = lock(&view);
    if push.executor_id != view.executor_id {
        return Err(axum::http::StatusCode::CONFLICT);
    }
    view.adopt(push.revision, &push.shards, Instant::now());
    Ok(Json(serde_json::json!({})))
}

async fn revoke(
    State(view): State<Shared>,
    Json(push): Json<RevokePush>,
) -> Result<Json<RevokeReply>, axum::http::StatusCode> {
    let mut view = lock(&view);
    if view.refuse_revokes || push.executor_id != view.executor_id {
        return Err(axum::http::StatusCode::SERVICE_UNAVAILABLE);
    }
    if push.revision < view.applied_revision {
        return Ok(Json(RevokeReply {
            revision: push.revision,
            released: Vec::new(),
            ignored: true,
        }));
    }
    view.applied_revision = push.revision;
    let now = Instant::now();
    for shard in &push.shards {
        if view.held.remove(shard).is_some() {
            view.close(*shard, now);
        }
    }
    Ok(Json(RevokeReply {
        revision: push.revision,
        released: push.shards,
        ignored: false,
    }))
}

impl FakeExecutor {
    /// Binds its push endpoint, then registers (P8.1), then renews until stopped.
    pub async fn start(managers: Vec<String>, name: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = format!("http://{}", listener.local_addr().expect("addr"));
        let client = Client::with_config(
            managers,
            ClientConfig {
                request_timeout: Duration::from_secs(2),
                ..ClientConfig::default()
            },
        )
        .expect("client");
        let sent_at = Instant::now();
        let grant = client
            .register(&RegisterRequest {
                incarnation: format!("{name}-{}", rand_suffix()),
                address: address.clone(),
                name: Some(name.to_string()),
            })
            .await
            .expect("register");
        let mut view = View {
            executor_id: grant.executor_id.clone(),
            applied_revision: 0,
            held: BTreeMap::new(),
            lease_expiry: sent_at + Duration::from_millis(grant.lease_ttl_ms),
            intervals: Vec::new(),
            refuse_revokes: false,
        };
        view.adopt(grant.revision, &grant.shards, Instant::now());
        let view = Arc::new(Mutex::new(view));
        let (stop, stopped) = watch::channel(false);
        let app = Router::new()
            .route("/v1/assignment", put(assignment))
            .route("/v1/revoke", post(revoke))
            .with_state(view.clone());
        let mut server_stopped = stopped.clone();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = server_stopped.changed().await;
                })
                .await;
        });
        let renewer = tokio::spawn(renew_loop(client, view.clone(), grant, stopped));
        Self {
            executor_id: view
                .lock()
                .map(|v| v.executor_id.clone())
                .unwrap_or_default(),
            address,
            view,
            stop,
            tasks: vec![server, renewer],
        }
    }

    pub fn held(&self) -> BTreeMap<u32, u64> {
        lock(&self.view).held.clone()
    }

    pub fn intervals(&self) -> Vec<Interval> {
        lock(&self.view).intervals.clone()
    }

    pub fn lease_expiry(&self) -> Instant {
        lock(&self.view).lease_expiry
    }

    /// Revokes are answered 503 from now on: only renewal claims can acknowledge them.
    pub fn refuse_revokes(&self, refuse: bool) {
        lock(&self.view).refuse_revokes = refuse;
    }

    /// Stops everything at once, as a crash would: no deregistration, no more renewals. Open
    /// intervals end at the lease expiry (the executor fences itself then, P3.6).
    pub fn crash(&mut self) {
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            task.abort();
        }
        let mut view = lock(&self.view);
        let expiry = view.lease_expiry;
        let held: Vec<u32> = view.held.keys().copied().collect();
        for shard in held {
            view.close(shard, expiry);
        }
        view.held.clear();
    }
}

impl Drop for FakeExecutor {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
}

/// Renews a third of the way into the lease (P3.5), every 250 ms while failing, until stopped.
async fn renew_loop(
    client: Client,
    view: Shared,
    first: Grant,
    mut stopped: watch::Receiver<bool>,
) {
    let mut wait = Duration::from_millis(first.lease_ttl_ms / 3);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => return,
        }
        let (executor_id, request) = {
            let view = lock(&view);
            let claims = view
                .held
                .iter()
                .map(|(&shard, &epoch)| ShardEpoch { shard, epoch })
                .collect();
            (
                view.executor_id.clone(),
                RenewRequest {
                    claims,
                    revision: view.applied_revision,
                },
            )
        };
        let sent_at = Instant::now();
        match client.renew(&executor_id, &request).await {
            Ok(grant) => {
                let mut view = lock(&view);
                view.lease_expiry = sent_at + Duration::from_millis(grant.lease_ttl_ms);
                view.adopt(grant.revision, &grant.shards, Instant::now());
                wait = Duration::from_millis(grant.lease_ttl_ms / 3);
            }
            Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => {
                let mut view = lock(&view);
                let now = Instant::now();
                let held: Vec<u32> = view.held.keys().copied().collect();
                for shard in held {
                    view.close(shard, now);
                }
                view.held.clear();
                return;
            }
            Err(ClientError::PatienceExhausted { .. }) | Err(_) => {
                wait = Duration::from_millis(250)
            }
        }
    }
}

/// I1 over fake executors: per shard, no two admission intervals overlap. Returns the violations.
pub fn overlaps(intervals: &[Interval]) -> Vec<String> {
    let mut by_shard: BTreeMap<u32, Vec<&Interval>> = BTreeMap::new();
    for interval in intervals {
        by_shard.entry(interval.shard).or_default().push(interval);
    }
    let mut violations = Vec::new();
    for (shard, mut list) in by_shard {
        list.sort_by_key(|i| i.start);
        for pair in list.windows(2) {
            let (earlier, later) = (pair[0], pair[1]);
            let earlier_end = earlier.end.unwrap_or_else(Instant::now);
            if later.start < earlier_end && earlier.executor != later.executor {
                violations.push(format!(
                    "shard {shard}: {} (epoch {}) admitted until {:?} after {} (epoch {}) started",
                    earlier.executor,
                    earlier.epoch,
                    earlier_end - later.start,
                    later.executor,
                    later.epoch
                ));
            }
            if later.epoch <= earlier.epoch && earlier.executor != later.executor {
                violations.push(format!(
                    "shard {shard}: epoch {} after {} (I2)",
                    later.epoch, earlier.epoch
                ));
            }
        }
    }
    violations
}
