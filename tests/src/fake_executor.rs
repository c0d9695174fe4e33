//! A minimal executor that speaks the manager's HTTP API, for testing the manager's lease
//! protocol without the real executor's process: registers, renews at a third of its lease with
//! its claims and last applied revision (or never, for tests of pushes and revokes alone), and
//! records when it admitted each shard on the test process's monotonic clock, so the intervals of
//! several fake executors can be checked for overlap (I1). The delivery rules are the executor
//! library's own [`AssignmentState`] (revision order P4.1, revoke answers P5.2, stale grants) and
//! its renewal cadence the library's `LeaseSchedule` (P3.5), not copies of them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::routing::{post, put};
use axum::{Json, Router};
use leasehold_api::client::{Client, ClientConfig};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    AssignmentPush, Grant, RegisterRequest, RenewRequest, RevokePush, RevokeReply, ShardEpoch,
};
use leasehold_executor::assignment::{AssignmentState, RevokeOutcome, SetOutcome};
use leasehold_executor::lease::{CallOutcome, LeaseClock, LeaseSchedule, NextCall};
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
    assignment: AssignmentState,
    /// The lease as P3.2 allows (send instant of the granting request + ttl), on the library's
    /// own clock.
    lease: LeaseClock,
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
        let end = self.lease.expiry().map_or(now, |expiry| now.min(expiry));
        if let Some(open) = self
            .intervals
            .iter_mut()
            .rev()
            .find(|i| i.shard == shard && i.end.is_none())
        {
            open.end = Some(end.max(open.start));
        }
    }

    /// The one receipt path for a delivered set (P4.3): a push, or a grant's set.
    fn adopt(&mut self, revision: u64, shard_count: u32, shards: &[ShardEpoch], now: Instant) {
        // A malformed set changes nothing (I6); the manager never sends one.
        // It holds no secondaries (PROTOCOL §19): its namespaces keep one replica.
        if let Ok(SetOutcome::Applied {
            dropped, gained, ..
        }) = self
            .assignment
            .apply_set(revision, shard_count, shards, &[])
        {
            for shard in dropped {
                self.close(shard.shard, now);
            }
            for shard in gained {
                self.open(shard.shard, shard.epoch, now);
            }
        }
    }

    /// A grant: its lease always counts (P3.3), its set only in revision order; a stale one
    /// still stops shards the manager had taken by its revision, as the library does (I1).
    fn adopt_grant(&mut self, grant: &Grant, sent_at: Instant, now: Instant) {
        self.lease.apply_grant(sent_at, grant.lease_ttl_ms);
        if grant.revision < self.assignment.revision() {
            for shard in self.assignment.drop_taken_by(grant.revision, &grant.shards) {
                self.close(shard.shard, now);
            }
        }
        self.adopt(grant.revision, grant.shard_count, &grant.shards, now);
    }

    fn revoke(&mut self, push: &RevokePush, now: Instant) -> Option<RevokeReply> {
        let outcome = self
            .assignment
            .apply_revoke(push.revision, &push.shards)
            .ok()?;
        if let RevokeOutcome::Applied { dropped, .. } = &outcome {
            for shard in dropped {
                self.close(shard.shard, now);
            }
        }
        Some(outcome.reply(push.revision))
    }

    /// Stops admitting everything, stamped `at`.
    fn stop_all(&mut self, at: Instant) {
        for shard in self.assignment.clear() {
            self.close(shard.shard, at);
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
    view.adopt(
        push.revision,
        push.shard_count,
        &push.shards,
        Instant::now(),
    );
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
    view.revoke(&push, Instant::now())
        .map(Json)
        .ok_or(axum::http::StatusCode::BAD_REQUEST)
}

/// How a fake executor behaves.
#[derive(Debug, Clone, Copy)]
pub struct FakeOptions {
    /// Renew on the executor's schedule (P3.5); without it only pushes and revokes move shards.
    pub renew: bool,
}

impl Default for FakeOptions {
    fn default() -> Self {
        Self { renew: true }
    }
}

impl FakeExecutor {
    /// Binds its push endpoint, then registers (P8.1), then renews until stopped.
    pub async fn start(managers: Vec<String>, name: &str) -> Self {
        Self::start_with(managers, name, FakeOptions::default()).await
    }

    /// [`FakeExecutor::start`] with `options`.
    pub async fn start_with(managers: Vec<String>, name: &str, options: FakeOptions) -> Self {
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
                follows_generations: false,
                namespace: None,
                incarnation: format!("{name}-{}", rand_suffix()),
                address: address.clone(),
                name: Some(name.to_string()),
                credential: None,
                capacity: None,
                app_version: None,
                labels: Default::default(),
            })
            .await
            .expect("register");
        let mut view = View {
            executor_id: grant.executor_id.clone(),
            assignment: AssignmentState::default(),
            lease: LeaseClock::default(),
            intervals: Vec::new(),
            refuse_revokes: false,
        };
        view.adopt_grant(&grant, sent_at, Instant::now());
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
        let mut tasks = vec![server];
        if options.renew {
            tasks.push(tokio::spawn(renew_loop(client, view.clone(), stopped)));
        }
        Self {
            executor_id: view
                .lock()
                .map(|v| v.executor_id.clone())
                .unwrap_or_default(),
            address,
            view,
            stop,
            tasks,
        }
    }

    pub fn held(&self) -> BTreeMap<u32, u64> {
        lock(&self.view)
            .assignment
            .held()
            .into_iter()
            .map(|s| (s.shard, s.epoch))
            .collect()
    }

    /// The revision of the last delivery applied (P4.1).
    pub fn revision(&self) -> u64 {
        lock(&self.view).assignment.revision()
    }

    pub fn intervals(&self) -> Vec<Interval> {
        lock(&self.view).intervals.clone()
    }

    pub fn lease_expiry(&self) -> Instant {
        let view = lock(&self.view);
        view.lease.expiry().unwrap_or_else(Instant::now)
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
        let expiry = view.lease.expiry().unwrap_or_else(Instant::now);
        view.stop_all(expiry);
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

/// Renews on the executor's own schedule (P3.5, `LeaseSchedule`: first between a sixth and a
/// third into the lease its registration was told, then a third into what is left of each, backing
/// off while failing so a retry lands before the expiry) until stopped or forgotten.
async fn renew_loop(client: Client, view: Shared, mut stopped: watch::Receiver<bool>) {
    let mut schedule = LeaseSchedule::default();
    let (lease, executor_id) = {
        let view = lock(&view);
        (view.lease, view.executor_id.clone())
    };
    let mut next = schedule.after(
        CallOutcome::Registered { executor_id },
        &lease,
        Instant::now(),
    );
    loop {
        let NextCall::CallAt(at) = next else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = stopped.changed() => return,
        }
        let (executor_id, request) = {
            let view = lock(&view);
            (
                view.executor_id.clone(),
                RenewRequest {
                    claims: view.assignment.held(),
                    claim_runs: None,
                    revision: view.assignment.revision(),
                    loads: None,
                    accept_unchanged: false,
                    ready: Vec::new(),
                },
            )
        };
        let sent_at = Instant::now();
        let outcome = match client.renew(&executor_id, None, &request).await {
            Ok(grant) => {
                lock(&view).adopt_grant(&grant, sent_at, Instant::now());
                CallOutcome::Granted
            }
            Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => {
                lock(&view).stop_all(Instant::now());
                return;
            }
            Err(_) => CallOutcome::Failed,
        };
        let lease = lock(&view).lease;
        next = schedule.after(outcome, &lease, Instant::now());
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
