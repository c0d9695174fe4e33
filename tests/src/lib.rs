//! Harness for multi-process tests: starts the real `leasehold-manager` and `leasehold-executor`
//! binaries (on 127.0.0.1, or each in its own network namespace, [`netns`]), drives them over
//! HTTP, kills, pauses and restarts them. The fault suite's harness is [`faults`], its invariant
//! checker [`checker`] (docs/TESTING.md).
//!
//! The binaries are built by `cargo build --workspace --bins` (the first step of
//! `scripts/test`); the harness finds them next to the test executable, or in
//! `LEASEHOLD_BIN_DIR`, and fails with instructions when they are missing.
//!
//! Timing: tests poll for conditions with generous bounds ([`poll_until`]); nothing sleeps for a
//! fixed time and then asserts.

// Test support, used only by tests: a failed expectation here is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
pub mod checker;
pub mod ctl;
pub mod executor;
pub mod fake_executor;
pub mod faults;
pub mod http_checks;
pub mod netns;
pub mod proxy;

use std::collections::BTreeMap;
use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use leasehold_api::client::{Client, ClientConfig};
use leasehold_api::wire::ClusterInfo;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

/// Raft timing for tests: fast failover, still tolerant of a loaded 2-core machine.
pub const TEST_HEARTBEAT: &str = "100ms";
pub const TEST_ELECTION_TIMEOUT: &str = "600ms";
/// At least 3 × the maximum election timeout (1.2 s), as the manager requires.
pub const TEST_LEASE: &str = "4s";

/// Where the workspace's binaries are.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LEASEHOLD_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // target/<profile>/deps/<test binary> → target/<profile>
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} not found. Multi-process tests run the real binaries: build them first with \
         `cargo build --workspace --bins` (scripts/test does), or point LEASEHOLD_BIN_DIR at them",
        path.display()
    );
    path
}

/// Ports handed to the processes a test starts come from below Linux's ephemeral range
/// (32768-60999), so a port the OS picks later for an outgoing connection or a `:0` listener
/// (the fault proxy) can never be one a manager is about to bind (a soak run lost a manager that
/// way, seed 9008006).
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port below the ephemeral range that was free a moment ago, not handed out before by this
/// process.
pub fn free_port() -> u16 {
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..10_000 {
        let port = rand::random_range(TEST_PORTS);
        if handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port in {TEST_PORTS:?} after 10 000 tries");
}

/// A command for `program`, run inside network namespace `netns` when one is given (through
/// `ip netns exec`, which execs the program: the child's pid is the program's, so signals reach
/// it directly).
pub fn command_in(netns: Option<&str>, program: &Path) -> Command {
    match netns {
        Some(netns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", netns]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// A `/v1/state` document without the fields that move with the clock alone (each lease's time
/// remaining, each handoff's time to its owner's expiry), so two reads of an unchanged state
/// compare equal.
pub fn without_lease_clocks(mut state: serde_json::Value) -> serde_json::Value {
    for executor in state["executors"].as_array_mut().into_iter().flatten() {
        executor["lease_remaining_ms"] = serde_json::Value::Null;
    }
    for shard in state["shards"].as_array_mut().into_iter().flatten() {
        if let Some(handoff) = shard.get_mut("handoff").filter(|h| h.is_object()) {
            handoff["completes_by_expiry_in_ms"] = serde_json::Value::Null;
        }
    }
    state
}

/// Polls `check` every 100 ms until it yields a value or `bound` passes, then panics with
/// `what` and the last observation.
pub async fn poll_until<T, F, Fut>(what: &str, bound: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + bound;
    let mut last = String::from("never checked");
    while Instant::now() < deadline {
        match check().await {
            Ok(value) => return value,
            Err(observation) => last = observation,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {bound:?} waiting for {what}; last observation: {last}");
}

/// A spawned test process: stdout discarded, stderr to a log file; signalled, waited for within a
/// bound, and killed when dropped.
#[derive(Debug, Default)]
pub struct ChildProcess {
    child: Option<Child>,
}

impl ChildProcess {
    pub fn spawn(command: &mut Command, log_path: &Path) -> Self {
        let log = File::create(log_path).expect("create process log");
        let child = command
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        Self { child: Some(child) }
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => child
                .try_wait()
                .map(|status| status.is_none())
                .unwrap_or(false),
            None => false,
        }
    }

    pub fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child {
            let _ = kill(Pid::from_raw(child.id() as i32), signal);
        }
    }

    /// Waits for the process to exit on its own; kills it and panics naming `what` after `bound`.
    pub async fn wait_exit(&mut self, what: &str, bound: Duration) -> ExitStatus {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("{what} was not started"));
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what} did not exit within {bound:?}");
    }

    /// SIGKILL; returns once the process is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Prints the last lines of a process log to stderr (for a failing test's output).
pub fn print_log_tail(label: &str, log_path: &Path) {
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let tail = &lines[lines.len().saturating_sub(40)..];
    eprintln!("----- {label} log (last {} lines) -----", tail.len());
    for line in tail {
        eprintln!("{line}");
    }
}

/// One manager process and everything needed to restart it.
#[derive(Debug)]
pub struct Manager {
    pub id: u64,
    /// Where it listens: `127.0.0.1` unless placed elsewhere ([`ManagerPlacement`]).
    pub host: String,
    pub port: u16,
    /// The network namespace it runs in; `None`: the test's own.
    pub netns: Option<String>,
    pub data_dir: PathBuf,
    log_path: PathBuf,
    args: Vec<String>,
    process: ChildProcess,
    restarts: u32,
}

impl Manager {
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Sends `signal` (e.g. SIGSTOP / SIGCONT to pause and resume it) without waiting.
    pub fn signal(&self, signal: Signal) {
        self.process.signal(signal);
    }

    fn spawn(&mut self, extra_args: &[String]) {
        let log_name = format!("manager-{}-{}.log", self.id, self.restarts);
        self.log_path = self.log_path.with_file_name(log_name);
        self.process = ChildProcess::spawn(
            command_in(self.netns.as_deref(), &binary("leasehold-manager"))
                .args(&self.args)
                .args(extra_args)
                .env("RUST_LOG", "info,openraft=warn"),
            &self.log_path,
        );
        self.restarts += 1;
    }

    pub fn start(&mut self) {
        assert!(!self.is_running(), "manager {} already running", self.id);
        self.spawn(&[]);
    }

    /// Starts with extra flags (e.g. `--join URL` after the data directory was replaced).
    pub fn start_with(&mut self, extra_args: &[&str]) {
        assert!(!self.is_running(), "manager {} already running", self.id);
        let extra: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        self.spawn(&extra);
    }

    /// Changes a flag for the next start (e.g. a lease duration changed across a restart).
    pub fn set_flag(&mut self, flag: &str, value: &str) {
        match self.args.iter().position(|arg| arg == flag) {
            Some(at) => self.args[at + 1] = value.to_string(),
            None => self.args.extend([flag.to_string(), value.to_string()]),
        }
    }

    /// Starts with `--join URL` instead of `--initial-cluster` (a new member, or a member whose
    /// data directory was replaced after it was removed).
    pub fn start_joining(&mut self, url: &str) {
        assert!(!self.is_running(), "manager {} already running", self.id);
        let mut args = Vec::new();
        let mut skip_value = false;
        for arg in &self.args {
            if skip_value {
                skip_value = false;
            } else if arg == "--initial-cluster" {
                skip_value = true;
            } else {
                args.push(arg.clone());
            }
        }
        let saved = std::mem::replace(&mut self.args, args);
        self.spawn(&["--join".to_string(), url.to_string()]);
        self.args = saved;
    }

    /// SIGKILL: no chance to flush or hand over.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGTERM and wait for a graceful exit (SIGKILL and panic after `bound`).
    pub async fn terminate(&mut self, bound: Duration) -> ExitStatus {
        self.process.signal(Signal::SIGTERM);
        self.wait_exit(bound).await
    }

    /// Waits for the process to exit on its own (e.g. a refused start), bounded.
    pub async fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        let what = format!("manager {}", self.id);
        self.process.wait_exit(&what, bound).await
    }

    pub fn wipe_data_dir(&mut self) {
        assert!(
            !self.is_running(),
            "stop manager {} before wiping its data",
            self.id
        );
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// Options for a test cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub size: u64,
    pub lease: String,
    pub shard_count: u32,
    pub extra_args: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            size: 3,
            lease: TEST_LEASE.to_string(),
            shard_count: 64,
            extra_args: Vec::new(),
        }
    }
}

/// Where one manager listens and runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerPlacement {
    pub host: String,
    pub port: u16,
    pub netns: Option<String>,
}

impl ManagerPlacement {
    /// On 127.0.0.1 in the test's own namespace, on a port that was free a moment ago.
    pub fn local() -> Self {
        Self {
            host: "127.0.0.1".to_string(),
            port: free_port(),
            netns: None,
        }
    }
}

/// A local cluster of manager processes in a temporary directory, killed on drop. When a test
/// panics, the tail of every manager's log is printed.
#[derive(Debug)]
pub struct Cluster {
    pub managers: BTreeMap<u64, Manager>,
    pub options: ClusterOptions,
    pub dir: TempDir,
    pub http: reqwest::Client,
}

impl Cluster {
    /// Creates the cluster's processes without starting them.
    pub fn new(options: ClusterOptions) -> Self {
        let placements = (1..=options.size)
            .map(|id| (id, ManagerPlacement::local()))
            .collect();
        Self::new_placed(options, placements)
    }

    /// [`Cluster::new`] with each manager's address and namespace chosen by the caller (e.g.
    /// one network namespace per manager, for partitions).
    pub fn new_placed(
        options: ClusterOptions,
        placements: BTreeMap<u64, ManagerPlacement>,
    ) -> Self {
        let dir = TempDir::new().expect("temp dir");
        let initial_cluster = placements
            .iter()
            .map(|(id, at)| format!("{id}=http://{}:{}", at.host, at.port))
            .collect::<Vec<_>>()
            .join(",");
        let managers = placements
            .into_iter()
            .map(|(id, placement)| {
                let mut args = vec!["--initial-cluster".to_string(), initial_cluster.clone()];
                args.extend(options.extra_args.iter().cloned());
                (id, Self::new_manager(&dir, &options, id, placement, args))
            })
            .collect();
        Self {
            managers,
            options,
            dir,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("http client"),
        }
    }

    fn new_manager(
        dir: &TempDir,
        options: &ClusterOptions,
        id: u64,
        placement: ManagerPlacement,
        extra: Vec<String>,
    ) -> Manager {
        let data_dir = dir.path().join(format!("manager-{id}"));
        let ManagerPlacement { host, port, netns } = placement;
        let mut args = vec![
            "--id".to_string(),
            id.to_string(),
            "--listen".to_string(),
            format!("{host}:{port}"),
            "--data-dir".to_string(),
            data_dir.display().to_string(),
            "--lease-duration".to_string(),
            options.lease.clone(),
            "--heartbeat".to_string(),
            TEST_HEARTBEAT.to_string(),
            "--election-timeout".to_string(),
            TEST_ELECTION_TIMEOUT.to_string(),
            "--shard-count".to_string(),
            options.shard_count.to_string(),
        ];
        args.extend(extra);
        Manager {
            id,
            host,
            port,
            netns,
            data_dir,
            log_path: dir.path().join(format!("manager-{id}-0.log")),
            args,
            process: ChildProcess::default(),
            restarts: 0,
        }
    }

    /// Creates and starts every manager at the same moment.
    pub fn start(options: ClusterOptions) -> Self {
        let mut cluster = Self::new(options);
        for manager in cluster.managers.values_mut() {
            manager.start();
        }
        cluster
    }

    /// Adds a manager that is not part of the initial cluster; start it with `--join`.
    pub fn add_joiner(&mut self, id: u64) -> &mut Manager {
        let manager = Self::new_manager(
            &self.dir,
            &self.options,
            id,
            ManagerPlacement::local(),
            Vec::new(),
        );
        self.managers.insert(id, manager);
        self.managers.get_mut(&id).expect("just inserted")
    }

    pub fn manager(&mut self, id: u64) -> &mut Manager {
        self.managers.get_mut(&id).expect("no such manager")
    }

    pub fn url(&self, id: u64) -> String {
        self.managers[&id].url()
    }

    pub fn urls(&self) -> Vec<String> {
        self.managers.values().map(Manager::url).collect()
    }

    /// A typed client over every manager, with the protocol's default patience.
    pub fn client(&self) -> Client {
        Client::with_config(self.urls(), ClientConfig::default()).expect("client")
    }

    pub async fn cluster_info(&self, id: u64) -> Result<ClusterInfo, String> {
        let reply = self
            .http
            .get(format!("{}/v1/cluster", self.url(id)))
            .send()
            .await
            .map_err(|e| format!("node {id}: {e}"))?;
        reply.json().await.map_err(|e| format!("node {id}: {e}"))
    }

    async fn leader_ready(&self, id: u64) -> Result<(), String> {
        let reply = self
            .http
            .get(format!("{}/readyz?verbose", self.url(id)))
            .send()
            .await
            .map_err(|e| format!("node {id}: {e}"))?;
        if reply.status().is_success() {
            return Ok(());
        }
        let status = reply.status();
        let body = reply.text().await.unwrap_or_default();
        Err(format!("leader {id} not ready ({status}): {body}"))
    }

    /// Waits until every running manager names the same running leader in the same term (a
    /// killed leader stays named until the survivors' election timeout), and that leader is
    /// ready to serve writes (`/readyz`: the shard configuration is written); returns it.
    pub async fn wait_for_leader(&mut self, bound: Duration) -> u64 {
        let running: Vec<u64> = self
            .managers
            .iter_mut()
            .filter_map(|(id, manager)| manager.is_running().then_some(*id))
            .collect();
        let this = &*self;
        poll_until("one leader named by every running manager", bound, || {
            let running = running.clone();
            async move {
                let mut seen = Vec::new();
                for &id in &running {
                    let info = this.cluster_info(id).await?;
                    seen.push((info.leader_id, info.term));
                }
                match seen.first() {
                    Some(&(Some(leader), term))
                        if running.contains(&leader)
                            && seen.iter().all(|s| *s == (Some(leader), term)) =>
                    {
                        this.leader_ready(leader).await?;
                        Ok(leader)
                    }
                    _ => Err(format!("(leader, term) per node: {seen:?}")),
                }
            }
        })
        .await
    }

    /// Waits until manager `id` has applied at least `index`.
    pub async fn wait_applied(&self, id: u64, index: u64, bound: Duration) {
        poll_until(
            &format!("node {id} to apply index {index}"),
            bound,
            || async move {
                let info = self.cluster_info(id).await?;
                match info.applied_index {
                    Some(applied) if applied >= index => Ok(()),
                    other => Err(format!("applied {other:?}")),
                }
            },
        )
        .await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for manager in self.managers.values_mut() {
            manager.kill();
            if panicking {
                print_log_tail(&format!("manager {}", manager.id), &manager.log_path);
            }
        }
    }
}

/// Multi-process tests take this lock so that only one cluster runs at a time on a 2-core machine.
pub async fn one_cluster_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// Reads the lines of a process log that match `pattern`.
pub fn log_lines_matching(log: &str, pattern: &str) -> Vec<String> {
    BufReader::new(log.as_bytes())
        .lines()
        .map_while(Result::ok)
        .filter(|line| line.contains(pattern))
        .collect()
}
