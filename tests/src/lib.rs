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
//!
//! The process handling itself (child processes, ports, binaries, manager clusters) is the
//! `leasehold-harness` crate, shared with the load generator; this crate adds what only the
//! tests need (network namespaces, panics with the harness's message, log tails of a failed
//! test, one cluster at a time).

// Test support, used only by tests: a failed expectation here is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
/// The invariant checker and the fault proxy are the conformance kit's, shared with the tests.
pub use leasehold_conformance::{checker, proxy};
pub mod ctl;
pub mod executor;
pub mod fake_executor;
pub mod faketime;
pub mod faults;
pub mod http_checks;
pub mod netns;
pub mod python;

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use leasehold_api::client::{Client, ClientConfig};
use leasehold_harness::{
    ClusterConfig, HarnessError, Launcher, ManagerCluster, ManagerFlags, Placement,
};
use tempfile::TempDir;

/// The fault proxy's TLS for `cluster`'s certificates; `None` for a plaintext cluster.
pub fn proxy_tls(cluster: &Cluster) -> Option<proxy::ProxyTls> {
    cluster
        .options
        .tls_dir
        .as_deref()
        .map(|dir| proxy::ProxyTls::from_dir(dir).expect("the cluster's TLS identities"))
}

/// The TLS files of a `certs init` directory, as the harness names them.
pub use leasehold_harness::tls_files;

/// Raft timing for tests: fast failover, still tolerant of a loaded 2-core machine.
pub const TEST_HEARTBEAT: &str = "100ms";
pub const TEST_ELECTION_TIMEOUT: &str = "600ms";
/// At least 3 × the maximum election timeout (1.2 s), as the manager requires.
pub const TEST_LEASE: &str = "4s";

/// Manager ids beyond a cluster's size that [`ClusterOptions::make_certificates`] issues
/// certificates for, so a test can add members.
const SPARE_MANAGER_CERTIFICATES: u64 = 2;

/// A harness result in a test: the value, or a panic with the harness's message.
#[track_caller]
pub fn must<T>(result: Result<T, HarnessError>) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{error}"),
    }
}

/// Where the workspace's binaries are ([`leasehold_harness::bin_dir`]).
pub fn bin_dir() -> PathBuf {
    must(leasehold_harness::bin_dir())
}

/// The workspace binary `name`; panics with instructions when it was not built.
pub fn binary(name: &str) -> PathBuf {
    must(leasehold_harness::binary(name))
}

/// A port below the ephemeral range that was free a moment ago, not handed out before by this
/// process ([`leasehold_harness::free_port`]).
pub fn free_port() -> u16 {
    must(leasehold_harness::free_port())
}

/// What runs a program inside network namespace `netns` when one is given: `ip netns exec`,
/// which execs the program, so the child's pid is the program's and signals reach it directly.
pub fn in_netns(netns: Option<&str>) -> Launcher {
    match netns {
        Some(netns) => Launcher::prefixed(["ip", "netns", "exec", netns]),
        None => Launcher::direct(),
    }
}

/// A command for `program`, run inside network namespace `netns` when one is given
/// ([`in_netns`]).
pub fn command_in(netns: Option<&str>, program: &Path) -> Command {
    in_netns(netns).command(program)
}

/// A `/v1/state` document as every member holds it: without the fields that move with the clock
/// alone (each lease's time remaining, each handoff's time to its owner's expiry) and without the
/// leader's soft state (loads, utilisation and hot shards, PROTOCOL P15.1: only the leader shows
/// them), so two reads of an unchanged state compare equal whichever member answered.
pub fn replicated_view(mut state: serde_json::Value) -> serde_json::Value {
    // Whether the lease figures are a follower's bounds (P6.6) says who answered, not the state.
    if let Some(fields) = state.as_object_mut() {
        fields.remove("lease_remaining_is_bound");
    }
    for executor in state["executors"].as_array_mut().into_iter().flatten() {
        executor["lease_remaining_ms"] = serde_json::Value::Null;
        if let Some(fields) = executor.as_object_mut() {
            fields.remove("load");
            fields.remove("utilisation");
        }
    }
    for shard in state["shards"].as_array_mut().into_iter().flatten() {
        if let Some(handoff) = shard.get_mut("handoff").filter(|h| h.is_object()) {
            handoff["completes_by_expiry_in_ms"] = serde_json::Value::Null;
        }
        if let Some(fields) = shard.as_object_mut() {
            fields.remove("load");
            fields.remove("hot");
        }
    }
    state
}

/// Polls `check` every 100 ms until it yields a value or `bound` passes, then panics with
/// `what` and the last observation ([`leasehold_harness::poll_until`]).
pub async fn poll_until<T, F, Fut>(what: &str, bound: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    must(leasehold_harness::poll_until(what, bound, check).await)
}

/// Reads the state with `read` until two reads a second apart are equal, within `bound`, and
/// returns the last: writes that follow a registration a moment later (its lease reservation,
/// PROTOCOL P6.8) are in it before a test compares the state against it.
pub async fn until_still<T, F, Fut>(what: &str, bound: Duration, mut read: F) -> T
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    poll_until(what, bound, || {
        let first = read();
        let second = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let read_again = read();
        async move {
            let before = first.await;
            second.await;
            let after = read_again.await;
            if before == after {
                Ok(after)
            } else {
                Err(format!("{before:?} then {after:?}"))
            }
        }
    })
    .await
}

/// Waits for a leader, then until it states cluster version `version` or later (PROTOCOL
/// P14.3: the leader raises it within a probe round or two of every member running a release
/// that applies it), within `bound`.
pub async fn wait_for_cluster_version(cluster: &mut Cluster, version: u32, bound: Duration) {
    let leader = cluster.wait_for_leader(bound).await;
    let cluster: &Cluster = cluster;
    poll_until(
        &format!("the cluster version to reach {version}"),
        bound,
        || async {
            match cluster.cluster_info(leader).await?.cluster_version {
                Some(stated) if stated >= version => Ok(()),
                other => Err(format!("cluster version {other:?}")),
            }
        },
    )
    .await;
}

/// Prints the last lines of a process log to stderr (for a failing test's output).
pub fn print_log_tail(label: &str, log_path: &Path) {
    eprint!("{}", log_tail(label, log_path, 40));
}

/// The last `lines` lines of a process log under a heading naming `label` (a missing log reads
/// as empty).
pub fn log_tail(label: &str, log_path: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    let all: Vec<&str> = log.lines().collect();
    let tail = &all[all.len().saturating_sub(lines)..];
    let mut text = format!("----- {label} log (last {} lines) -----\n", tail.len());
    for line in tail {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Runs `leaseholdctl certs init` into a new directory (PROTOCOL P13.1) for a cluster of
/// `managers` managers on 127.0.0.1.
pub fn tls_certificates(managers: u64) -> TempDir {
    tls_certificates_for(managers, &[])
}

/// [`tls_certificates`], valid for `hosts` (e.g. network-namespace addresses) as well as
/// 127.0.0.1 and localhost.
pub fn tls_certificates_for(managers: u64, hosts: &[String]) -> TempDir {
    let dir = TempDir::new().expect("temp dir");
    let output = Command::new(binary("leaseholdctl"))
        .args(["certs", "init", "--dir"])
        .arg(dir.path())
        .args(["--managers", &managers.to_string()])
        .args(hosts.iter().flat_map(|host| ["--host", host.as_str()]))
        .output()
        .expect("run leaseholdctl certs init");
    assert!(
        output.status.success(),
        "leaseholdctl certs init: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// Options for a test cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub size: u64,
    pub lease: String,
    pub shard_count: u32,
    pub extra_args: Vec<String>,
    /// Certificates from `leaseholdctl certs init` ([`tls_certificates`]): the managers serve
    /// TLS (PROTOCOL P13.2) and the test's clients present the `admin` certificate.
    pub tls_dir: Option<PathBuf>,
    /// Without `tls_dir`: make a certificate directory for this cluster (valid for every
    /// manager's host, with spare manager ids for joiners), kept as long as the cluster, and
    /// serve TLS with it.
    pub make_certificates: bool,
    /// More hosts the certificates of `make_certificates` are valid for, besides the managers'
    /// (e.g. executors' addresses in network namespaces).
    pub certificate_hosts: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            size: 3,
            lease: TEST_LEASE.to_string(),
            shard_count: 64,
            extra_args: Vec::new(),
            tls_dir: None,
            make_certificates: false,
            certificate_hosts: Vec::new(),
        }
    }
}

impl ClusterOptions {
    /// Every manager's flags: these options with the tests' Raft timing.
    fn flags(&self) -> ManagerFlags {
        ManagerFlags {
            extra_args: self.extra_args.clone(),
            ..ManagerFlags::new(
                self.shard_count,
                &self.lease,
                TEST_HEARTBEAT,
                TEST_ELECTION_TIMEOUT,
            )
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

    fn into_placement(self) -> Placement {
        Placement {
            launcher: in_netns(self.netns.as_deref()),
            host: self.host,
            port: self.port,
        }
    }
}

/// A local cluster of manager processes in a temporary directory, killed on drop. When a test
/// panics, the tail of every manager's log is printed.
///
/// It dereferences to the harness's [`ManagerCluster`] (`managers`, `http`, `urls`,
/// `cluster_info`, ...); the lookups and waits defined here panic where the harness returns an
/// error.
#[derive(Debug)]
pub struct Cluster {
    inner: ManagerCluster,
    pub options: ClusterOptions,
    /// Holds the managers' data directories and logs; removed after they are killed.
    pub dir: TempDir,
    /// The certificates of [`ClusterOptions::make_certificates`], removed with the cluster.
    _certificates: Option<TempDir>,
}

impl Deref for Cluster {
    type Target = ManagerCluster;

    fn deref(&self) -> &ManagerCluster {
        &self.inner
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut ManagerCluster {
        &mut self.inner
    }
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
        mut options: ClusterOptions,
        placements: BTreeMap<u64, ManagerPlacement>,
    ) -> Self {
        let dir = TempDir::new().expect("temp dir");
        let certificates = (options.make_certificates && options.tls_dir.is_none()).then(|| {
            let hosts: Vec<String> = placements
                .values()
                .map(|placement| placement.host.clone())
                .chain(options.certificate_hosts.iter().cloned())
                .filter(|host| !leasehold_harness::is_loopback(host))
                .collect();
            tls_certificates_for(options.size + SPARE_MANAGER_CERTIFICATES, &hosts)
        });
        if let Some(certificates) = &certificates {
            options.tls_dir = Some(certificates.path().to_owned());
        }
        let config = ClusterConfig {
            tls_dir: options.tls_dir.clone(),
            ..ClusterConfig::new(binary("leasehold-manager"), dir.path(), options.flags())
        };
        let placements = placements
            .into_iter()
            .map(|(id, placement)| (id, placement.into_placement()))
            .collect();
        Self {
            inner: must(ManagerCluster::new(config, placements)),
            options,
            dir,
            _certificates: certificates,
        }
    }

    /// Creates and starts every manager at the same moment.
    pub fn start(options: ClusterOptions) -> Self {
        let mut cluster = Self::new(options);
        cluster.start_all();
        cluster
    }

    /// Starts every manager.
    pub fn start_all(&mut self) {
        must(self.inner.start_all());
    }

    /// Adds a manager that is not part of the initial cluster; start it with `--join`.
    pub fn add_joiner(&mut self, id: u64) -> ManagerMut<'_> {
        let placement = ManagerPlacement::local().into_placement();
        ManagerMut(self.inner.add_joiner(id, placement))
    }

    pub fn manager(&mut self, id: u64) -> ManagerMut<'_> {
        ManagerMut(must(self.inner.manager(id)))
    }

    pub fn url(&self, id: u64) -> String {
        must(self.inner.url(id))
    }

    /// A typed client over every manager, with the protocol's default patience.
    /// A typed client of the managers; under TLS it presents the `admin` certificate.
    pub fn client(&self) -> Client {
        self.client_as("admin")
    }

    /// A typed client presenting the certificate `name` of the cluster's TLS directory
    /// (`admin`, `executor`, `manager-1`); plaintext without TLS.
    pub fn client_as(&self, name: &str) -> Client {
        Client::with_tls(
            self.urls(),
            ClientConfig::default(),
            self.tls_as(name).as_ref(),
        )
        .expect("client")
    }

    /// A typed client of `urls` (the managers, or proxies in front of them) with `config`,
    /// presenting the `admin` certificate under TLS.
    pub fn client_over(&self, urls: Vec<String>, config: ClientConfig) -> Client {
        Client::with_tls(urls, config, self.tls_as("admin").as_ref()).expect("client")
    }

    /// The TLS identity `name` (`admin`, `executor`, `manager-1`) of the cluster's certificate
    /// directory; `None` in plaintext.
    pub fn tls_as(&self, name: &str) -> Option<leasehold_api::tls::TlsConfig> {
        self.options.tls_dir.as_ref().map(|dir| {
            leasehold_api::tls::TlsConfig::load(&tls_files(dir, name)).expect("TLS files")
        })
    }

    /// `https` under TLS, else `http`: the scheme of every URL of this cluster and its executors.
    pub fn scheme(&self) -> &'static str {
        if self.options.tls_dir.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// [`ManagerCluster::wait_for_leader`]: every running manager names the same running and
    /// ready leader; returns it.
    pub async fn wait_for_leader(&mut self, bound: Duration) -> u64 {
        must(self.inner.wait_for_leader(bound).await)
    }

    /// Waits until manager `id` has applied at least `index`.
    pub async fn wait_applied(&self, id: u64, index: u64, bound: Duration) {
        must(self.inner.wait_applied(id, index, bound).await)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for manager in self.inner.managers.values_mut() {
            manager.kill();
            if panicking {
                print_log_tail(&format!("manager {}", manager.id), manager.log_path());
            }
        }
    }
}

/// One manager of a [`Cluster`] ([`leasehold_harness::Manager`], which it dereferences to):
/// starting and stopping it panics here with the harness's message instead of returning it.
#[derive(Debug)]
pub struct ManagerMut<'a>(&'a mut leasehold_harness::Manager);

impl Deref for ManagerMut<'_> {
    type Target = leasehold_harness::Manager;

    fn deref(&self) -> &leasehold_harness::Manager {
        self.0
    }
}

impl DerefMut for ManagerMut<'_> {
    fn deref_mut(&mut self) -> &mut leasehold_harness::Manager {
        self.0
    }
}

impl ManagerMut<'_> {
    pub fn start(&mut self) {
        must(self.0.start());
    }

    /// Starts with extra flags (e.g. `--join URL` after the data directory was replaced).
    pub fn start_with(&mut self, extra_args: &[&str]) {
        must(self.0.start_with(extra_args));
    }

    /// Starts with `--join URL` instead of `--initial-cluster` (a new member, or a member whose
    /// data directory was replaced after it was removed).
    pub fn start_joining(&mut self, url: &str) {
        must(self.0.start_joining(url));
    }

    /// SIGTERM and wait for a graceful exit (SIGKILL and panic after `bound`).
    pub async fn terminate(&mut self, bound: Duration) -> ExitStatus {
        must(self.0.terminate(bound).await)
    }

    /// Waits for the process to exit on its own (e.g. a refused start), bounded.
    pub async fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        must(self.0.wait_exit(bound).await)
    }

    pub fn wipe_data_dir(&mut self) {
        must(self.0.wipe_data_dir());
    }
}

/// A test needs something this machine lacks (`why` says what, and how to install it): when
/// the environment variable `require_env` is `1` (`.ci/run` sets such a variable wherever it
/// installs the tool) that fails the test; otherwise this prints `SKIPPED: <why>` and the test
/// returns early, passing.
#[track_caller]
pub fn skip_unless_required(require_env: &str, why: &str) {
    let required = std::env::var(require_env).is_ok_and(|v| v == "1");
    assert!(!required, "{require_env}=1 but {why}");
    eprintln!("SKIPPED: {why}");
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
