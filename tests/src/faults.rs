//! The fault-scenario harness (PROTOCOL §12): seeded randomness, a fleet of executor
//! processes whose admission logs are checked together at the end, a workload driving them, a
//! probe writer whose acknowledged registers and deregisters must survive recovery (I3), and
//! the timing figures (I4) each scenario prints.
//!
//! Every scenario takes its randomness (which node to kill, timing jitter) from one seed:
//! `LEASEHOLD_FAULT_SEED` if set, else a fresh one. The seed is printed at the start and again
//! if the scenario fails, with the command that reproduces it (`scripts/soak` sets a different
//! seed per run).
//!
//! With `LEASEHOLD_FAULT_TLS=1` every scenario runs under mutual TLS (PROTOCOL §13): the cluster
//! makes its certificates, executors, clients and the workload present theirs, executors
//! register with credentials, and the fault proxies terminate TLS and call on as the same role.
//! CI runs the whole suite once so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold_api::client::{Client, ClientConfig, ClientError};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    CreateNamespaceRequest, Credential, NamespaceView, RegisterRequest, StateView,
};
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use crate::checker::{check_files_in, monotonic_now_ns, CheckReport, EventLogFile};
use crate::executor::{wait_for_even_split, ExecutorProcess, ExecutorSpec};
use crate::{poll_until, Cluster, ClusterOptions};

/// Lease for fault scenarios: short, so expiries and re-homing happen within seconds.
pub const FAULT_LEASE: Duration = Duration::from_secs(3);
/// The leader's tick (P3.8).
pub const FAULT_TICK: Duration = Duration::from_secs(1);
/// Raft timing: elections in 0.5–1 s; the lease is 3 × the longest election timeout, the
/// manager's minimum.
pub const FAULT_HEARTBEAT: &str = "100ms";
pub const FAULT_ELECTION_TIMEOUT: &str = "500ms";
/// Executors' bound on one request to a manager: a sixth of the lease, so a renewal sent to a
/// dead or partitioned manager leaves time to try the others within the grant patience and
/// before expiry (the 5 s default is longer than this whole lease).
pub const FAULT_EXECUTOR_REQUEST_TIMEOUT: &str = "500ms";
pub const FAULT_SHARDS: u32 = 48;

/// Generous liveness bounds for a loaded 2-core machine (asserted; the measured figures are
/// printed).
pub const LEADER_BOUND: Duration = Duration::from_secs(30);
pub const SETTLE_BOUND: Duration = Duration::from_secs(60);
pub const EXIT_BOUND: Duration = Duration::from_secs(20);

/// The scenario's seed and random source. Prints the seed when created and, with the command
/// that reproduces the run, when dropped during a panic.
#[derive(Debug)]
pub struct FaultSeed {
    pub seed: u64,
    pub scenario: String,
    /// The `cargo test` arguments that select the scenario's test file(s), for the reproduce
    /// command.
    test_files: String,
    rng: StdRng,
}

impl FaultSeed {
    /// `LEASEHOLD_FAULT_SEED` if set (decimal), else derived from the clock and pid; for a
    /// scenario of `faults.rs` or `partitions.rs`.
    pub fn from_env(scenario: &str) -> Self {
        Self::from_env_in(&["faults", "partitions"], scenario)
    }

    /// [`FaultSeed::from_env`] for a scenario of another test file (`tests/tests/<name>.rs` for
    /// each of `test_files`), which the reproduce command names.
    pub fn from_env_in(test_files: &[&str], scenario: &str) -> Self {
        let seed = match std::env::var("LEASEHOLD_FAULT_SEED") {
            Ok(text) => text
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("LEASEHOLD_FAULT_SEED={text:?} is not a u64")),
            Err(_) => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                nanos ^ u64::from(std::process::id()).rotate_left(32)
            }
        };
        eprintln!(
            "[fault] scenario {scenario}: LEASEHOLD_FAULT_SEED={seed}{}",
            if fault_tls() {
                " LEASEHOLD_FAULT_TLS=1"
            } else {
                ""
            }
        );
        Self {
            seed,
            scenario: scenario.to_string(),
            test_files: test_files
                .iter()
                .map(|file| format!("--test {file}"))
                .collect::<Vec<_>>()
                .join(" "),
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// A uniform pick in `range`.
    pub fn pick(&mut self, range: std::ops::RangeInclusive<u64>) -> u64 {
        self.rng.random_range(range)
    }

    /// A uniform duration in `low..=high`.
    pub fn jitter(&mut self, low: Duration, high: Duration) -> Duration {
        let ms = self.pick(low.as_millis() as u64..=high.as_millis() as u64);
        Duration::from_millis(ms)
    }

    /// A uniform index below `len`.
    pub fn index(&mut self, len: usize) -> usize {
        self.rng.random_range(0..len)
    }

    /// A seed for a sub-component (e.g. a proxy's impairment).
    pub fn derive(&mut self) -> u64 {
        self.rng.random()
    }

    /// `items` in a seeded random order.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        use rand::seq::SliceRandom;
        items.shuffle(&mut self.rng);
    }
}

impl Drop for FaultSeed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "[fault] scenario {} FAILED with LEASEHOLD_FAULT_SEED={}; reproduce with:\n  \
                 LEASEHOLD_FAULT_SEED={} cargo test -p leasehold-tests {} -- --exact {}",
                self.scenario, self.seed, self.seed, self.test_files, self.scenario
            );
        }
    }
}

/// Set to `1` to run the fault scenarios under mutual TLS.
pub const FAULT_TLS_ENV: &str = "LEASEHOLD_FAULT_TLS";

/// Whether the scenarios run under TLS ([`FAULT_TLS_ENV`]).
pub fn fault_tls() -> bool {
    match std::env::var(FAULT_TLS_ENV) {
        Ok(value) => match value.trim() {
            "1" => true,
            "" | "0" => false,
            other => panic!("{FAULT_TLS_ENV}={other:?}: expected 1 or 0"),
        },
        Err(_) => false,
    }
}

/// A cluster with the fault scenarios' timing (and TLS under [`FAULT_TLS_ENV`]), not started.
///
/// Its leader places by count (`--load-placement=false`, PROTOCOL P15.2): a scenario judges
/// re-homing after its fault by P5.4's even split, and its traffic, light and uneven, is there to
/// be admitted, not balanced; placed by load, the executors settle inside the load band with
/// uneven counts. Placement by load under faults is the simulator's (every seed) and
/// `tests/tests/placement.rs`'s.
pub fn fault_cluster_options() -> ClusterOptions {
    ClusterOptions {
        lease: format!("{}ms", FAULT_LEASE.as_millis()),
        shard_count: FAULT_SHARDS,
        make_certificates: fault_tls(),
        extra_args: vec!["--load-placement=false".to_string()],
        ..ClusterOptions::default()
    }
}

/// Applies the fault scenarios' Raft timing to every manager of a cluster not yet started.
pub fn use_fault_timing(cluster: &mut Cluster) {
    for manager in cluster.managers.values_mut() {
        manager.set_flag("--heartbeat", FAULT_HEARTBEAT);
        manager.set_flag("--election-timeout", FAULT_ELECTION_TIMEOUT);
    }
}

/// A three-manager cluster on 127.0.0.1 with fault timing (and TLS under [`FAULT_TLS_ENV`]),
/// not started: a scenario may still change a manager's flags or environment.
pub fn fault_cluster() -> Cluster {
    let mut cluster = Cluster::new(fault_cluster_options());
    use_fault_timing(&mut cluster);
    cluster
}

/// Starts a three-manager cluster on 127.0.0.1 with fault timing and waits for its leader.
pub async fn start_fault_cluster() -> Cluster {
    let mut cluster = fault_cluster();
    cluster.start_all();
    cluster.wait_for_leader(LEADER_BOUND).await;
    cluster
}

/// How long a new cluster takes to raise its cluster version: the leader probes its members
/// every 2 s, and raises it within a round or two of formation.
pub const CLUSTER_VERSION_BOUND: Duration = Duration::from_secs(30);

/// A cluster on the fault suite's timing, started and at cluster version `version` or later,
/// with the namespace `namespace` created in it; returns the cluster and the namespace as
/// created.
pub async fn start_fault_cluster_with_namespace(
    version: u32,
    namespace: &CreateNamespaceRequest,
) -> (Cluster, NamespaceView) {
    let mut cluster = fault_cluster();
    cluster.start_all();
    crate::wait_for_cluster_version(&mut cluster, version, CLUSTER_VERSION_BOUND).await;
    let created = cluster
        .client()
        .create_namespace(namespace)
        .await
        .unwrap_or_else(|error| panic!("namespace {} is created: {error}", namespace.name));
    (cluster, created)
}

/// Namespace `namespace`'s shards as the leader has them (`?consistent=true`), for a poll.
pub async fn consistent_shards_in(
    client: &Client,
    namespace: &str,
) -> Result<Vec<leasehold_api::wire::ShardView>, String> {
    client
        .shards_in(namespace, true)
        .await
        .map_err(|error| format!("{namespace}'s shards: {error}"))
}

/// One leader change made by [`kill_leaders_until`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Takeover {
    /// The leader SIGKILLed.
    pub killed: u64,
    /// The leader every running manager named after it.
    pub elected: u64,
    /// From the kill until then.
    pub after: Duration,
}

/// Makes manager `wanted` the leader: until it leads, SIGKILL the leader, wait for the next one
/// and start the killed manager again on its data (so a majority still runs at the next kill),
/// at most `max_kills` times; panics if `wanted` still does not lead. Returns the changes made,
/// none if `wanted` already led.
///
/// Which survivor wins an election is not the test's to choose, but after a leader's death the
/// voter with the most complete log and, among equals, the lowest id stands first
/// (manager/src/raft/failover.rs), so a few kills reach any manager: killing the leader just
/// below `wanted` in id order hands it on most often.
pub async fn kill_leaders_until(
    cluster: &mut Cluster,
    wanted: u64,
    max_kills: usize,
) -> Vec<Takeover> {
    let mut takeovers = Vec::new();
    loop {
        let leader = cluster.wait_for_leader(LEADER_BOUND).await;
        if leader == wanted {
            return takeovers;
        }
        assert!(
            takeovers.len() < max_kills,
            "manager {wanted} did not lead after {max_kills} leaders were killed: {takeovers:?}"
        );
        let killed_at = Instant::now();
        cluster.manager(leader).kill();
        let elected = cluster.wait_for_leader(LEADER_BOUND).await;
        takeovers.push(Takeover {
            killed: leader,
            elected,
            after: killed_at.elapsed(),
        });
        cluster.manager(leader).start();
    }
}

/// The executor flags every fault scenario uses.
pub fn fault_executor_args() -> Vec<String> {
    vec![
        "--request-timeout".to_string(),
        FAULT_EXECUTOR_REQUEST_TIMEOUT.to_string(),
    ]
}

/// Every executor process a scenario started, with what the checker needs about each: its
/// admission log and, if it was SIGKILLed, when it was known dead.
#[derive(Debug)]
pub struct Fleet {
    dir: PathBuf,
    pub executors: Vec<ExecutorProcess>,
    ended_at_ns: BTreeMap<String, u64>,
}

impl Fleet {
    /// A fleet whose logs live in `dir` (the cluster's temporary directory).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            executors: Vec::new(),
            ended_at_ns: BTreeMap::new(),
        }
    }

    /// Starts an executor; returns its index.
    pub fn start(&mut self, spec: ExecutorSpec) -> usize {
        assert!(
            self.executors.iter().all(|e| e.name != spec.name),
            "executor names are unique per process: {}",
            spec.name
        );
        self.executors
            .push(ExecutorProcess::start_spec(&self.dir, spec));
        self.executors.len() - 1
    }

    /// Starts a local executor against `cluster` with the fault flags.
    pub fn start_local(&mut self, cluster: &Cluster, name: &str) -> usize {
        let mut spec = ExecutorSpec::local(cluster, name);
        spec.extra_args = fault_executor_args();
        self.start(spec)
    }

    pub fn get(&self, index: usize) -> &ExecutorProcess {
        &self.executors[index]
    }

    /// SIGKILL; its open admission intervals end when it was reaped.
    pub fn kill(&mut self, index: usize) {
        let executor = &mut self.executors[index];
        executor.kill();
        self.ended_at_ns
            .insert(executor.name.clone(), monotonic_now_ns());
    }

    /// SIGKILL a sidecar (PROTOCOL §16): the service beside it may admit on the copy it was last
    /// given until `copy_end_ns` at the latest (the sidecar's lease expiry), not only until the
    /// sidecar's death.
    pub fn kill_sidecar(&mut self, index: usize, copy_end_ns: u64) {
        let executor = &mut self.executors[index];
        executor.kill();
        self.ended_at_ns
            .insert(executor.name.clone(), copy_end_ns.max(monotonic_now_ns()));
    }

    pub fn signal(&self, index: usize, signal: Signal) {
        self.executors[index].signal(signal);
    }

    /// The executors of `indices`, for [`crate::executor::wait_for_even_split`].
    pub fn refs(&self, indices: &[usize]) -> Vec<&ExecutorProcess> {
        indices.iter().map(|&i| &self.executors[i]).collect()
    }

    /// The checker over every admission log the fleet wrote; panics listing every violation.
    pub fn check(&self, scenario: &str) -> CheckReport {
        self.check_in(scenario, None)
    }

    /// [`Fleet::check`] per key for a namespace of `first_shard_count` shards at generation 0
    /// that may have resharded since (PROTOCOL §20).
    pub fn check_in(&self, scenario: &str, first_shard_count: Option<u32>) -> CheckReport {
        let files: Vec<EventLogFile> = self
            .executors
            .iter()
            .map(|executor| EventLogFile {
                path: executor.event_log.clone(),
                ended_at_ns: self.ended_at_ns.get(&executor.name).copied(),
            })
            .collect();
        let report = check_files_in(&files, first_shard_count)
            .unwrap_or_else(|e| panic!("{scenario}: malformed admission log: {e}"));
        eprintln!(
            "[fault] {scenario}: checker: {} intervals over {} shards, {} handoffs, {} violations",
            report.intervals,
            report.shards,
            report.handoffs,
            report.violations.len()
        );
        match report.clone().into_result() {
            Ok(report) => report,
            Err(violations) => panic!("{scenario}: invariant violations:\n{violations}"),
        }
    }

    /// The reasons in executor `index`'s admission log, counted.
    pub fn reasons(&self, index: usize) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for record in self.executors[index]
            .admission_log()
            .unwrap_or_else(|e| panic!("{e}"))
        {
            *counts.entry(record.reason).or_default() += 1;
        }
        counts
    }

    /// The executor ids that appear in executor `index`'s admission log: one unless it was
    /// evicted and registered again.
    pub fn logged_ids(&self, index: usize) -> BTreeSet<String> {
        self.executors[index]
            .admission_log()
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|record| record.executor_id)
            .collect()
    }
}

/// No executor of `indices` was evicted: its admission log names only its first id, and it
/// never stopped for `unknown_executor`.
pub fn assert_none_evicted(fleet: &Fleet, indices: &[usize], scenario: &str) {
    for &index in indices {
        let ids = fleet.logged_ids(index);
        assert!(
            ids.len() <= 1,
            "{scenario}: {} was evicted and registered again: {ids:?}",
            fleet.get(index).name
        );
        let reasons = fleet.reasons(index);
        assert!(
            !reasons.contains_key("unknown_executor"),
            "{scenario}: {} was reaped: {reasons:?}",
            fleet.get(index).name
        );
    }
}

/// Starts local executors named `names` with the fault flags and waits for them to admit every
/// shard in an even split; returns their indices and ids.
pub async fn start_executors(
    cluster: &Cluster,
    fleet: &mut Fleet,
    names: &[&str],
) -> (Vec<usize>, Vec<String>) {
    let indices: Vec<usize> = names
        .iter()
        .map(|name| fleet.start_local(cluster, name))
        .collect();
    wait_for_even_split(&fleet.refs(&indices), FAULT_SHARDS, SETTLE_BOUND).await;
    let mut ids = Vec::new();
    for &index in &indices {
        ids.push(wait_registered(fleet.get(index)).await);
    }
    (indices, ids)
}

/// The registered executor id of `executor`, once it has one.
pub async fn wait_registered(executor: &ExecutorProcess) -> String {
    poll_until(
        &format!("executor {} to register", executor.name),
        SETTLE_BOUND,
        || async {
            let status = executor.status().await?;
            status["executor_id"]
                .as_str()
                .map(str::to_string)
                .ok_or(format!("status {status}"))
        },
    )
    .await
}

/// `GET /v1/state?consistent=true` through the cluster's client.
pub async fn consistent_state(client: &Client) -> Result<StateView, String> {
    client
        .get_json("/v1/state?consistent=true")
        .await
        .map_err(|e| e.to_string())
        .and_then(|value| serde_json::from_value(value).map_err(|e| e.to_string()))
}

/// Shard → (owner, epoch) of a state, for "no shard moved" comparisons (I5).
pub fn ownership(state: &StateView) -> BTreeMap<u32, (Option<String>, u64)> {
    state
        .shards
        .iter()
        .map(|shard| (shard.shard, (shard.owner.clone(), shard.epoch)))
        .collect()
}

/// A client over `urls` (managers of `cluster`, or proxies in front of them) with short request
/// timeouts (a partitioned manager costs a second, not five) and the protocol's patience.
pub fn fault_client(cluster: &Cluster, urls: Vec<String>) -> Client {
    cluster.client_over(
        urls,
        ClientConfig {
            request_timeout: Duration::from_secs(2),
            ..ClientConfig::default()
        },
    )
}

/// Counts of what the workload's requests got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadCounts {
    /// 200: admitted.
    pub admitted: u64,
    /// 421: another executor owns the shard.
    pub misdirected: u64,
    /// 503: fenced or between owners.
    pub not_ready: u64,
    /// Anything else, or no answer (a killed, paused or partitioned executor).
    pub failed: u64,
}

/// Executor load: a task sending `GET /v1/work?key=K` with random keys to the executors, as
/// fast as a small pool allows, until stopped.
#[derive(Debug)]
pub struct Workload {
    stop: Arc<AtomicBool>,
    counts: Arc<Mutex<WorkloadCounts>>,
    task: JoinHandle<()>,
}

impl Workload {
    /// Load on `executor_urls`, executors of `cluster` (under TLS the workload presents the
    /// `admin` certificate).
    pub fn start(cluster: &Cluster, executor_urls: Vec<String>, seed: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Mutex::new(WorkloadCounts::default()));
        let http = leasehold_api::client::http_client_builder(cluster.tls_as("admin").as_ref())
            .timeout(Duration::from_millis(500))
            .build()
            .expect("http client");
        let task = {
            let stop = Arc::clone(&stop);
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                while !stop.load(Ordering::Relaxed) {
                    let url = &executor_urls[rng.random_range(0..executor_urls.len())];
                    let key: u32 = rng.random();
                    let status = http
                        .get(format!("{url}/v1/work?key=k{key}"))
                        .send()
                        .await
                        .map(|reply| reply.status().as_u16());
                    {
                        let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
                        match status {
                            Ok(200) => counts.admitted += 1,
                            Ok(421) => counts.misdirected += 1,
                            Ok(503) => counts.not_ready += 1,
                            _ => counts.failed += 1,
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        Self { stop, counts, task }
    }

    /// Stops and returns the counts.
    pub async fn stop(self) -> WorkloadCounts {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the probe writer was told: acknowledged registrations and deregistrations (I3).
#[derive(Debug, Clone, Default)]
pub struct ProbeLedger {
    /// Acknowledged registrations: executor id per incarnation.
    pub registered: BTreeMap<String, String>,
    /// Executor ids whose deregistration was acknowledged.
    pub deregistered: BTreeSet<String>,
    /// Requests that failed (no acknowledgement; their outcome is unknown).
    pub unacknowledged: u64,
    /// When each acknowledgement arrived (for failover figures).
    pub acked_at: Vec<Instant>,
}

/// Control-plane writes during faults (I3): registers a probe executor, then deregisters it,
/// over and over, through a client over every manager, recording every acknowledgement.
///
/// A probe's address answers nothing, so while registered it may be given shards and their
/// pushes fail: the real executors see rebalances and handoffs throughout, which is load too.
#[derive(Debug)]
pub struct ProbeWriter {
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<ProbeLedger>>,
    task: JoinHandle<()>,
}

/// An address nobody answers on (TCP discard port on loopback: refused at once).
pub const PROBE_ADDRESS: &str = "http://127.0.0.1:9";

/// Every probe's credential (PROTOCOL P13.4): under TLS a registration needs one, and a probe's
/// deregistration, checked after recovery too, presents it.
pub fn probe_credential() -> Credential {
    Credential::from_random([0x9e; 32])
}

static PROBE_SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl ProbeWriter {
    pub fn start(client: Client, pause: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger = Arc::new(Mutex::new(ProbeLedger::default()));
        let task = {
            let stop = Arc::clone(&stop);
            let ledger = Arc::clone(&ledger);
            tokio::spawn(async move {
                let record = |f: &dyn Fn(&mut ProbeLedger)| {
                    f(&mut ledger.lock().unwrap_or_else(PoisonError::into_inner));
                };
                while !stop.load(Ordering::Relaxed) {
                    match register_probe(&client).await {
                        Ok((incarnation, id)) => {
                            record(&|l| {
                                l.registered.insert(incarnation.clone(), id.clone());
                                l.acked_at.push(Instant::now());
                            });
                            match client.deregister(&id, Some(&probe_credential())).await {
                                Ok(()) => record(&|l| {
                                    l.deregistered.insert(id.clone());
                                    l.acked_at.push(Instant::now());
                                }),
                                Err(_) => record(&|l| l.unacknowledged += 1),
                            }
                        }
                        Err(_) => record(&|l| l.unacknowledged += 1),
                    }
                    tokio::time::sleep(pause).await;
                }
            })
        };
        Self { stop, ledger, task }
    }

    /// Acknowledgements so far.
    pub fn ledger(&self) -> ProbeLedger {
        self.ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits for the first acknowledgement after `since`; returns how long after `since` it
    /// came (a write committed by a working leader: the failover time, I4).
    pub async fn first_ack_after(&self, since: Instant, bound: Duration) -> Duration {
        poll_until(
            "a control-plane write to be acknowledged",
            bound,
            || async {
                self.ledger()
                    .acked_at
                    .iter()
                    .find(|&&at| at > since)
                    .map(|&at| at - since)
                    .ok_or("no acknowledgement yet".to_string())
            },
        )
        .await
    }

    /// Stops (after the write in progress) and returns the ledger.
    pub async fn stop(self) -> ProbeLedger {
        self.stop.store(true, Ordering::Relaxed);
        let ledger = Arc::clone(&self.ledger);
        let _ = self.task.await;
        let ledger = ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        ledger
    }
}

/// I3 after recovery: every acknowledged deregistration left its executor absent, and every
/// acknowledged registration is remembered: a deregister of it now succeeds (still registered,
/// or its tombstone answers for it, P7.2), where a lost one would be `404 unknown_executor`.
/// Returns how many probes were checked.
pub async fn verify_probes(client: &Client, ledger: &ProbeLedger, scenario: &str) -> usize {
    let state = consistent_state(client)
        .await
        .unwrap_or_else(|e| panic!("{scenario}: state after recovery: {e}"));
    let present: BTreeSet<&str> = state
        .executors
        .iter()
        .map(|e| e.executor_id.as_str())
        .collect();
    for id in &ledger.deregistered {
        assert!(
            !present.contains(id.as_str()),
            "{scenario}: I3: {id} was deregistered (acknowledged) but is registered after recovery"
        );
    }
    for (incarnation, id) in &ledger.registered {
        match client.deregister(id, Some(&probe_credential())).await {
            Ok(()) => {}
            Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => panic!(
                "{scenario}: I3: the acknowledged registration of {incarnation} as {id} was lost"
            ),
            Err(error) => panic!("{scenario}: deregister {id} after recovery: {error}"),
        }
    }
    ledger.registered.len()
}

/// Registers one probe executor through `client`; returns its incarnation and id.
pub async fn register_probe(client: &Client) -> Result<(String, String), ClientError> {
    let number = PROBE_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let incarnation = format!("probe-{}-{number}", std::process::id());
    let grant = client
        .register(&RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: incarnation.clone(),
            address: PROBE_ADDRESS.to_string(),
            name: Some(format!("probe-{number}")),
            credential: Some(probe_credential()),
            capacity: None,
            app_version: None,
            labels: Default::default(),
        })
        .await?;
    Ok((incarnation, grant.executor_id))
}

/// One acknowledged register and deregister of a probe through `client`, recorded in `ledger`
/// for [`verify_probes`].
pub async fn probe_write(client: &Client, ledger: &mut ProbeLedger) -> Result<(), ClientError> {
    let (incarnation, id) = register_probe(client).await?;
    ledger.registered.insert(incarnation, id.clone());
    ledger.acked_at.push(Instant::now());
    client.deregister(&id, Some(&probe_credential())).await?;
    ledger.deregistered.insert(id);
    ledger.acked_at.push(Instant::now());
    Ok(())
}

/// Prints one measured figure in a form `scripts/soak` collects.
pub fn report_figure(scenario: &str, what: &str, value: Duration) {
    eprintln!(
        "[fault] {scenario}: figure {what} = {} ms",
        value.as_millis()
    );
}

/// Waits until every executor of `indices` is registered, admitting, with the same id as in
/// `ids` (none evicted): the condition after a control-plane fault heals.
pub async fn wait_admitting_as(fleet: &Fleet, indices: &[usize], ids: &[String], bound: Duration) {
    poll_until(
        "every executor admitting again as itself",
        bound,
        || async {
            for (&index, id) in indices.iter().zip(ids) {
                let executor = fleet.get(index);
                let status = executor.status().await?;
                if status["executor_id"].as_str() != Some(id.as_str()) {
                    return Err(format!(
                        "{} is {} (was {id})",
                        executor.name, status["executor_id"]
                    ));
                }
                if status["admission"] != "admitting" {
                    return Err(format!("{} is {}", executor.name, status["admission"]));
                }
            }
            Ok(())
        },
    )
    .await
}
