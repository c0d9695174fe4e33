//! The systems under test as real processes on 127.0.0.1: three `leasehold-manager` replicas
//! (a `leasehold-harness` [`ManagerCluster`]) or three etcd members, each with its own data
//! directory and log file, killed when dropped; plaintext or mutual TLS ([`Security`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use leasehold_harness::{
    binary_in, free_port, poll_every, ChildProcess, ClusterConfig, Launcher, ManagerCluster,
    ManagerFlags, Placement,
};

use crate::tls::Security;

/// What a missing binary's error adds for the load generator.
pub const BIN_DIR_HINT: &str = "the binaries to benchmark (choose their directory with --bin-dir)";

/// How often conditions are polled while waiting (finer than the tests' 100 ms: several
/// figures are timed to the end of a wait).
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

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

/// CPU time a process has used so far (user + system), from /proc; `None` once it is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    // utime and stime are fields 14 and 15, so the 12th and 13th after the name.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|ticks| u64::try_from(ticks).ok())
        .filter(|&ticks| ticks > 0)?;
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks_per_second as f64,
    ))
}

/// The 1-minute load average, to record the machine's load beside every figure.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// Environment variable naming a command to run every manager under, for profiling (e.g.
/// `valgrind --tool=callgrind --callgrind-out-file=/tmp/callgrind.%p`); split on whitespace.
pub const MANAGER_WRAPPER_ENV: &str = "LEASEHOLD_BENCH_MANAGER_WRAPPER";

/// How long a manager under [`MANAGER_WRAPPER_ENV`] gets to exit after SIGTERM when its cluster
/// is dropped, so the profiler can write its output.
const WRAPPED_DROP_GRACE: Duration = Duration::from_secs(60);

/// How long [`ManagerCluster`]'s probes (`/v1/cluster`, `/readyz`) wait for a loaded manager.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a manager gets to stop gracefully (P8.2).
pub const TERMINATE_BOUND: Duration = Duration::from_secs(30);

/// The profiler command of [`MANAGER_WRAPPER_ENV`], if any.
fn wrapper() -> Option<Launcher> {
    let wrapper = std::env::var(MANAGER_WRAPPER_ENV).ok()?;
    let words: Vec<&str> = wrapper.split_whitespace().collect();
    (!words.is_empty()).then(|| Launcher::prefixed(words))
}

/// On 127.0.0.1, on a free port, under [`MANAGER_WRAPPER_ENV`]'s profiler when one is set.
pub fn manager_placement() -> Result<Placement> {
    Ok(Placement {
        launcher: wrapper().unwrap_or_default(),
        ..Placement::local()?
    })
}

/// The lease of [`default_flags`]: the manager's default (docs/OPERATIONS.md).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(60);

/// The defaults the managers ship with (docs/OPERATIONS.md), except the shard count: no lease
/// or Raft timing flag, so the benchmarks follow the defaults when they change.
pub fn default_flags(shard_count: u32) -> ManagerFlags {
    ManagerFlags::shipped(shard_count)
}

/// etcd's default Raft timing (100 ms heartbeat, 1 s election timeout) so failover figures
/// compare like with like; the lease is the shortest the manager accepts with it.
pub fn etcd_timing(shard_count: u32, lease: &str) -> ManagerFlags {
    ManagerFlags::new(shard_count, lease, "100ms", "1s")
}

/// The load generator's one address may hold the whole connection budget (it plays every host).
const FLEET_CONNECTIONS_PER_ADDRESS: &str = "16384";

/// The registration rate and burst of a benchmark cluster: the manager's ceiling.
const FLEET_REGISTRATION_LIMIT: &str = "1000000";

/// Starts three managers with `flags` and empty data directories under `dir`; under TLS each
/// serves its `manager-<id>` certificate and the cluster's own client presents `admin`'s.
pub fn start_managers(
    bin_dir: &Path,
    dir: &Path,
    mut flags: ManagerFlags,
    security: &Security,
) -> Result<ManagerCluster> {
    let binary = binary_in(bin_dir, "leasehold-manager").context(BIN_DIR_HINT)?;
    // One load generator stands in for a fleet of hosts, each of which would be a caller of its
    // own to the registration limit and the per-address connection share (P13.6): both are
    // lifted for the one address.
    flags.extra_args.extend(
        [
            "--registration-rate",
            FLEET_REGISTRATION_LIMIT,
            "--registration-burst",
            FLEET_REGISTRATION_LIMIT,
            "--max-connections-per-address",
            FLEET_CONNECTIONS_PER_ADDRESS,
        ]
        .map(String::from),
    );
    let config = ClusterConfig {
        // The scenarios' own requests set their timeouts; a minute is the backstop.
        http_timeout: Duration::from_secs(60),
        probe_timeout: PROBE_TIMEOUT,
        poll_interval: POLL_INTERVAL,
        drop_grace: wrapper().map(|_| WRAPPED_DROP_GRACE),
        tls_dir: security.certs().map(|certs| certs.dir().to_path_buf()),
        ..ClusterConfig::new(binary, dir, flags)
    };
    let placements = (1..=3)
        .map(|id| Ok((id, manager_placement()?)))
        .collect::<Result<_>>()?;
    let mut cluster = ManagerCluster::new(config, placements)?;
    cluster.start_all()?;
    Ok(cluster)
}

/// Starts a new member `id` on an empty data directory with `--join URL`.
pub fn join_new(cluster: &mut ManagerCluster, id: u64, via: &str) -> Result<()> {
    let placement = manager_placement()?;
    cluster.add_joiner(id, placement).start_joining(via)?;
    Ok(())
}

/// Lines containing `needle` in every log any manager of `cluster` wrote (every start).
pub fn log_lines_containing(cluster: &ManagerCluster, needle: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(cluster.dir()) else {
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

#[derive(Debug)]
struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    process: ChildProcess,
    starts: u32,
}

/// Three etcd members on loopback with etcd's default timing (100 ms heartbeat, 1 s election).
/// Under TLS, member `i` serves `manager-<i>`'s certificate on its client and peer listeners,
/// and both require a client certificate of the CA.
#[derive(Debug)]
pub struct EtcdCluster {
    binary: PathBuf,
    dir: PathBuf,
    initial_cluster: String,
    members: Vec<EtcdMember>,
    /// More flags for every member (e.g. auto-compaction for the soak).
    extra_args: Vec<String>,
    security: Security,
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

    /// Starts three members with empty data directories under `dir` and `extra_args` (e.g.
    /// auto-compaction for the soak) on each.
    pub fn start(
        binary: &Path,
        dir: &Path,
        security: &Security,
        extra_args: Vec<String>,
    ) -> Result<Self> {
        let scheme = security.scheme();
        let mut members = Vec::new();
        for index in 1..=3 {
            members.push(EtcdMember {
                name: format!("m{index}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                data_dir: dir.join(format!("etcd-{index}")),
                process: ChildProcess::default(),
                starts: 0,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={scheme}://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            initial_cluster,
            members,
            extra_args,
            security: security.clone(),
        };
        for index in 0..3 {
            cluster.spawn(index)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, index: usize) -> Result<()> {
        let scheme = self.security.scheme();
        let member = self
            .members
            .get_mut(index)
            .ok_or_else(|| anyhow!("no etcd member {index}"))?;
        let client_url = format!("{scheme}://127.0.0.1:{}", member.client_port);
        let peer_url = format!("{scheme}://127.0.0.1:{}", member.peer_port);
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
        if let Some(certs) = self.security.certs() {
            let own = certs.files(&format!("manager-{}", index + 1));
            for prefix in ["--", "--peer-"] {
                command
                    .arg(format!("{prefix}cert-file"))
                    .arg(&own.cert_file)
                    .arg(format!("{prefix}key-file"))
                    .arg(&own.key_file)
                    .arg(format!("{prefix}trusted-ca-file"))
                    .arg(&own.trusted_ca_file)
                    .arg(format!("{prefix}client-cert-auth"));
            }
        }
        let log = self
            .dir
            .join(format!("{}-{}.log", member.name, member.starts));
        member.process = ChildProcess::spawn(&mut command, &log)?;
        member.starts += 1;
        Ok(())
    }

    pub fn client_urls(&self) -> Vec<String> {
        let scheme = self.security.scheme();
        self.members
            .iter()
            .map(|m| format!("{scheme}://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// Plaintext, or the certificates its members serve and its clients present (read by the
    /// etcd client, src/etcd.rs).
    #[cfg(feature = "etcd")]
    pub fn security(&self) -> &Security {
        &self.security
    }

    /// Every member's data directory, in member order.
    pub fn data_dirs(&self) -> Vec<PathBuf> {
        self.members.iter().map(|m| m.data_dir.clone()).collect()
    }

    /// The process id of each running member, by index.
    pub fn pids(&self) -> Vec<(usize, u32)> {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(index, member)| member.process.pid().map(|pid| (index, pid)))
            .collect()
    }

    pub fn kill(&mut self, index: usize) {
        if let Some(member) = self.members.get_mut(index) {
            member.process.kill();
        }
    }

    pub fn restart(&mut self, index: usize) -> Result<()> {
        self.spawn(index)
    }

    fn running(&mut self) -> Vec<usize> {
        self.members
            .iter_mut()
            .enumerate()
            .filter_map(|(index, m)| m.process.is_running().then_some(index))
            .collect()
    }

    /// Waits until every running member names the same running leader; returns its index.
    pub async fn wait_for_leader(&mut self, bound: Duration) -> Result<usize> {
        let running = self.running();
        let this = &*self;
        let leader = poll_every(
            "one etcd leader named by every running member",
            bound,
            POLL_INTERVAL,
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
        .await?;
        Ok(leader)
    }
}
