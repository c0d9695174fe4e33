//! The systems under test as real processes on 127.0.0.1: three `leasehold-manager` replicas or
//! three etcd members, each with its own data directory and log file, killed when dropped.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use leasehold_api::wire::ClusterInfo;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How often conditions are polled while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A port that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Polls `check` until it yields a value or `bound` passes; the error names `what` and the last
/// observation.
pub async fn poll_until<T, F, Fut>(what: &str, bound: Duration, check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    poll_every(what, bound, POLL_INTERVAL, check).await
}

/// [`poll_until`] with its own interval, for checks that are expensive to answer.
pub async fn poll_every<T, F, Fut>(
    what: &str,
    bound: Duration,
    interval: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + bound;
    let mut last = String::from("never checked");
    while Instant::now() < deadline {
        match check().await {
            Ok(value) => return Ok(value),
            Err(observation) => last = observation,
        }
        tokio::time::sleep(interval).await;
    }
    bail!("timed out after {bound:?} waiting for {what}; last observation: {last}")
}

/// Total size of the files under `dir`, in bytes (what `du --apparent-size` reports).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Resident set size of a process in bytes, from /proc.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The 1-minute load average, to record the machine's load beside every figure.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// A spawned process: stdout discarded, stderr to a log file, SIGKILLed when dropped.
#[derive(Debug)]
pub struct ChildProc {
    child: Child,
    /// Dropped with SIGTERM first (and up to a minute to exit), so a profiler wrapping the
    /// process can write its output.
    graceful_drop: bool,
}

impl ChildProc {
    pub fn spawn(command: &mut Command, log_path: &Path) -> Result<Self> {
        let log =
            File::create(log_path).with_context(|| format!("create log {}", log_path.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {command:?}"))?;
        Ok(Self {
            child,
            graceful_drop: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, returning once the process is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `bound` for a graceful exit (SIGKILL after that).
    pub async fn terminate(&mut self, bound: Duration) -> Result<()> {
        let pid = i32::try_from(self.child.id()).context("pid out of range")?;
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Ok(());
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        self.kill();
        bail!("process {pid} did not exit within {bound:?} of SIGTERM")
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if self.graceful_drop {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        self.kill();
    }
}

/// Environment variable naming a command to run every manager under, for profiling (e.g.
/// `valgrind --tool=callgrind --callgrind-out-file=/tmp/callgrind.%p`); split on whitespace.
pub const MANAGER_WRAPPER_ENV: &str = "LEASEHOLD_BENCH_MANAGER_WRAPPER";

/// `binary`, or the profiler command of [`MANAGER_WRAPPER_ENV`] with `binary` as its argument.
fn wrapped(binary: &Path) -> Command {
    let wrapper = std::env::var(MANAGER_WRAPPER_ENV).unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(binary);
            command
        }
        None => Command::new(binary),
    }
}

/// The lease of [`LeaseholdOptions::defaults`] (docs/OPERATIONS.md's default).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(60);

/// Manager flags for one benchmark cluster.
#[derive(Debug, Clone)]
pub struct LeaseholdOptions {
    pub shard_count: u32,
    pub lease: String,
    pub heartbeat: String,
    pub election_timeout: String,
    /// More flags for every node (e.g. `--snapshot-every`).
    pub extra_args: Vec<String>,
}

impl LeaseholdOptions {
    /// The production defaults of docs/OPERATIONS.md, except the shard count.
    pub fn defaults(shard_count: u32) -> Self {
        Self {
            shard_count,
            lease: format!("{}s", DEFAULT_LEASE_DURATION.as_secs()),
            heartbeat: "250ms".to_owned(),
            election_timeout: "2s".to_owned(),
            extra_args: Vec::new(),
        }
    }

    /// etcd's default Raft timing (100 ms heartbeat, 1 s election timeout) so failover figures
    /// compare like with like; the lease is the shortest the manager accepts with it.
    pub fn etcd_timing(shard_count: u32, lease: &str) -> Self {
        Self {
            shard_count,
            lease: lease.to_owned(),
            heartbeat: "100ms".to_owned(),
            election_timeout: "1s".to_owned(),
            extra_args: Vec::new(),
        }
    }
}

#[derive(Debug)]
pub struct ManagerProcess {
    pub port: u16,
    pub data_dir: PathBuf,
    process: Option<ChildProc>,
    starts: u32,
}

/// Three (or more, after joins) manager processes on loopback.
#[derive(Debug)]
pub struct LeaseholdCluster {
    binary: PathBuf,
    dir: PathBuf,
    initial_cluster: String,
    options: LeaseholdOptions,
    pub nodes: BTreeMap<u64, ManagerProcess>,
    http: reqwest::Client,
}

impl LeaseholdCluster {
    /// Starts three managers with empty data directories under `dir`.
    pub fn start(bin_dir: &Path, dir: &Path, options: LeaseholdOptions) -> Result<Self> {
        let binary = bin_dir.join("leasehold-manager");
        if !binary.is_file() {
            bail!(
                "{} not found: build it (cargo build --release --bins) or pass --bin-dir",
                binary.display()
            );
        }
        let mut nodes = BTreeMap::new();
        for id in 1..=3u64 {
            let port = free_port()?;
            nodes.insert(
                id,
                ManagerProcess {
                    port,
                    data_dir: dir.join(format!("manager-{id}")),
                    process: None,
                    starts: 0,
                },
            );
        }
        let initial_cluster = nodes
            .iter()
            .map(|(id, node)| format!("{id}=http://127.0.0.1:{}", node.port))
            .collect::<Vec<_>>()
            .join(",");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()?;
        let mut cluster = Self {
            binary,
            dir: dir.to_path_buf(),
            initial_cluster,
            options,
            nodes,
            http,
        };
        for id in 1..=3 {
            cluster.spawn(id, None)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, id: u64, join: Option<&str>) -> Result<()> {
        let options = &self.options;
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no manager {id}"))?;
        let mut command = wrapped(&self.binary);
        command
            .arg("--id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", node.port))
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--shard-count")
            .arg(options.shard_count.to_string())
            .arg("--lease-duration")
            .arg(&options.lease)
            .arg("--heartbeat")
            .arg(&options.heartbeat)
            .arg("--election-timeout")
            .arg(&options.election_timeout)
            .args(&options.extra_args)
            .env("RUST_LOG", "info,openraft=warn");
        match join {
            Some(url) => command.arg("--join").arg(url),
            None => command.arg("--initial-cluster").arg(&self.initial_cluster),
        };
        let log = self.dir.join(format!("manager-{id}-{}.log", node.starts));
        let mut process = ChildProc::spawn(&mut command, &log)?;
        process.graceful_drop = std::env::var_os(MANAGER_WRAPPER_ENV).is_some();
        node.process = Some(process);
        node.starts += 1;
        Ok(())
    }

    pub fn url(&self, id: u64) -> String {
        self.nodes
            .get(&id)
            .map(|node| format!("http://127.0.0.1:{}", node.port))
            .unwrap_or_default()
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.keys().map(|&id| self.url(id)).collect()
    }

    pub fn pid(&self, id: u64) -> Option<u32> {
        self.nodes.get(&id)?.process.as_ref().map(ChildProc::pid)
    }

    pub fn data_dir(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|node| node.data_dir.as_path())
    }

    fn running(&mut self) -> Vec<u64> {
        self.nodes
            .iter_mut()
            .filter_map(|(&id, node)| {
                node.process
                    .as_mut()
                    .is_some_and(ChildProc::is_running)
                    .then_some(id)
            })
            .collect()
    }

    pub async fn cluster_info(&self, id: u64) -> Result<ClusterInfo, String> {
        let reply = self
            .http
            .get(format!("{}/v1/cluster", self.url(id)))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(|e| format!("node {id}: {e}"))?;
        reply.json().await.map_err(|e| format!("node {id}: {e}"))
    }

    /// Waits until every running manager names the same running leader in the same term.
    pub async fn wait_for_leader(&mut self, bound: Duration) -> Result<u64> {
        let running = self.running();
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
                        Ok(leader)
                    }
                    _ => Err(format!("(leader, term) per node: {seen:?}")),
                }
            }
        })
        .await
    }

    /// Waits until manager `id` answers `/readyz` with 200 (leader known, commit applied).
    pub async fn wait_ready(&self, id: u64, bound: Duration) -> Result<()> {
        let url = format!("{}/readyz", self.url(id));
        poll_until(&format!("manager {id} ready"), bound, || async {
            match self
                .http
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
            {
                Ok(reply) if reply.status().is_success() => Ok(()),
                Ok(reply) => Err(format!("status {}", reply.status())),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    /// Waits until manager `id` has applied at least `index`.
    pub async fn wait_applied(&self, id: u64, index: u64, bound: Duration) -> Result<()> {
        poll_until(&format!("manager {id} to apply {index}"), bound, || async {
            let info = self.cluster_info(id).await?;
            match info.applied_index {
                Some(applied) if applied >= index => Ok(()),
                other => Err(format!("applied {other:?}")),
            }
        })
        .await
    }

    /// SIGKILL: no flush, no handover.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut process) = self.nodes.get_mut(&id).and_then(|n| n.process.take()) {
            process.kill();
        }
    }

    /// SIGTERM and wait for the graceful exit (P8.2).
    pub async fn terminate(&mut self, id: u64) -> Result<()> {
        if let Some(mut process) = self.nodes.get_mut(&id).and_then(|n| n.process.take()) {
            process.terminate(Duration::from_secs(30)).await?;
        }
        Ok(())
    }

    /// Starts a stopped member again on its data directory.
    pub fn restart(&mut self, id: u64) -> Result<()> {
        self.spawn(id, None)
    }

    /// Starts a new member on an empty data directory with `--join URL`.
    pub fn join_new(&mut self, id: u64, via: &str) -> Result<()> {
        let port = free_port()?;
        self.nodes.insert(
            id,
            ManagerProcess {
                port,
                data_dir: self.dir.join(format!("manager-{id}")),
                process: None,
                starts: 0,
            },
        );
        self.spawn(id, Some(via))
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Lines containing `needle` in every log any manager of this cluster wrote (every start).
    pub fn log_lines_containing(&self, needle: &str) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        entries
            .filter_map(Result::ok)
            .filter(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                name.starts_with("manager-") && name.ends_with(".log")
            })
            .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
            .map(|text| text.lines().filter(|line| line.contains(needle)).count())
            .sum()
    }
}

#[derive(Debug)]
struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    process: Option<ChildProc>,
    starts: u32,
}

/// Three etcd members on loopback with etcd's default timing (100 ms heartbeat, 1 s election).
#[derive(Debug)]
pub struct EtcdCluster {
    binary: PathBuf,
    dir: PathBuf,
    initial_cluster: String,
    members: Vec<EtcdMember>,
    /// More flags for every member (e.g. auto-compaction for the soak).
    extra_args: Vec<String>,
}

impl EtcdCluster {
    /// The etcd binary: `--etcd-bin`, else `etcd` on PATH; `None` when there is none.
    pub fn find_binary(explicit: Option<&Path>) -> Option<PathBuf> {
        if let Some(path) = explicit {
            return path.is_file().then(|| path.to_path_buf());
        }
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("etcd"))
                .find(|candidate| candidate.is_file())
        })
    }

    pub fn version(binary: &Path) -> String {
        Command::new(binary)
            .arg("--version")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("etcd Version: ").map(str::to_owned))
            })
            .unwrap_or_else(|| "unknown".to_owned())
    }

    pub fn start(binary: &Path, dir: &Path) -> Result<Self> {
        Self::start_with(binary, dir, Vec::new())
    }

    /// [`EtcdCluster::start`] with `extra_args` on every member.
    pub fn start_with(binary: &Path, dir: &Path, extra_args: Vec<String>) -> Result<Self> {
        let mut members = Vec::new();
        for index in 1..=3 {
            members.push(EtcdMember {
                name: format!("m{index}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                data_dir: dir.join(format!("etcd-{index}")),
                process: None,
                starts: 0,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            initial_cluster,
            members,
            extra_args,
        };
        for index in 0..3 {
            cluster.spawn(index)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, index: usize) -> Result<()> {
        let member = self
            .members
            .get_mut(index)
            .ok_or_else(|| anyhow!("no etcd member {index}"))?;
        let client_url = format!("http://127.0.0.1:{}", member.client_port);
        let peer_url = format!("http://127.0.0.1:{}", member.peer_port);
        let mut command = Command::new(&self.binary);
        command
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&member.data_dir)
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg("leasehold-bench")
            .arg("--logger")
            .arg("zap")
            .args(&self.extra_args);
        let log = self
            .dir
            .join(format!("{}-{}.log", member.name, member.starts));
        member.process = Some(ChildProc::spawn(&mut command, &log)?);
        member.starts += 1;
        Ok(())
    }

    pub fn client_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// Every member's data directory, in member order.
    pub fn data_dirs(&self) -> Vec<PathBuf> {
        self.members.iter().map(|m| m.data_dir.clone()).collect()
    }

    pub fn kill(&mut self, index: usize) {
        if let Some(mut process) = self.members.get_mut(index).and_then(|m| m.process.take()) {
            process.kill();
        }
    }

    pub fn restart(&mut self, index: usize) -> Result<()> {
        self.spawn(index)
    }

    fn running(&mut self) -> Vec<usize> {
        self.members
            .iter_mut()
            .enumerate()
            .filter_map(|(index, m)| {
                m.process
                    .as_mut()
                    .is_some_and(ChildProc::is_running)
                    .then_some(index)
            })
            .collect()
    }

    /// Waits until every running member names the same running leader; returns its index.
    pub async fn wait_for_leader(&mut self, bound: Duration) -> Result<usize> {
        let running = self.running();
        let this = &*self;
        poll_until(
            "one etcd leader named by every running member",
            bound,
            || {
                let running = running.clone();
                async move {
                    let mut ids = Vec::new();
                    for &index in &running {
                        ids.push((index, this.status_of(index).await?));
                    }
                    let leader = ids.first().map(|(_, (_, leader))| *leader);
                    let agreed = ids.iter().all(|(_, (_, l))| Some(*l) == leader);
                    match ids.iter().find(|(_, (member, _))| Some(*member) == leader) {
                        Some(&(index, _)) if agreed => Ok(index),
                        _ => Err(format!("(index, (member, leader)): {ids:?}")),
                    }
                }
            },
        )
        .await
    }
}
