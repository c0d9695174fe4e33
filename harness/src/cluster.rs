//! A cluster of `leasehold-manager` processes: started, killed, terminated and restarted one by
//! one, probed over HTTP (`/v1/cluster`, `/readyz`), waited for.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

// Every manager's `RUST_LOG`: the manager's own default, set so that the test runner's
// `RUST_LOG` does not reach it.
use leasehold_api::process::MANAGER_LOG_FILTER;
use leasehold_api::wire::ClusterInfo;
use nix::sys::signal::Signal;

use crate::{free_port, poll_every, ChildProcess, HarnessError, Launcher, POLL_INTERVAL};

/// The flags every manager of a cluster starts with, besides its own (`--id`, `--listen`,
/// `--data-dir`) and the membership ones (`--initial-cluster`, `--join`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerFlags {
    /// `--shard-count`
    pub shard_count: u32,
    /// `--lease-duration`; `None`: no flag, the manager's default.
    pub lease: Option<String>,
    /// `--heartbeat`; `None`: no flag, the manager's default.
    pub heartbeat: Option<String>,
    /// `--election-timeout`; `None`: no flag, the manager's default.
    pub election_timeout: Option<String>,
    /// More flags, after the others (e.g. `--snapshot-every 100`, `--log-format json`).
    pub extra_args: Vec<String>,
}

impl ManagerFlags {
    pub fn new(shard_count: u32, lease: &str, heartbeat: &str, election_timeout: &str) -> Self {
        Self {
            shard_count,
            lease: Some(lease.to_string()),
            heartbeat: Some(heartbeat.to_string()),
            election_timeout: Some(election_timeout.to_string()),
            extra_args: Vec::new(),
        }
    }

    /// No lease or Raft timing flag: the managers run at the defaults they ship with, as a user
    /// who passes none would (the failover benchmark measures those, docs/BENCHMARKS.md B3).
    pub fn shipped(shard_count: u32) -> Self {
        Self {
            shard_count,
            lease: None,
            heartbeat: None,
            election_timeout: None,
            extra_args: Vec::new(),
        }
    }
}

/// Where one manager listens, and what it is run under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub host: String,
    pub port: u16,
    pub launcher: Launcher,
}

impl Placement {
    /// On 127.0.0.1, on a [`free_port`], run directly.
    pub fn local() -> Result<Self, HarnessError> {
        Ok(Self {
            host: "127.0.0.1".to_string(),
            port: free_port()?,
            launcher: Launcher::direct(),
        })
    }
}

/// How a [`ManagerCluster`] runs and probes its managers.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The `leasehold-manager` binary ([`crate::binary`]).
    pub binary: PathBuf,
    /// Holds each manager's data directory (`manager-<id>`) and logs (`manager-<id>-<n>.log`
    /// for its n-th start).
    pub dir: PathBuf,
    pub flags: ManagerFlags,
    /// Timeout of [`ManagerCluster::http`]'s requests (10 s by default).
    pub http_timeout: Duration,
    /// Timeout of each probe ([`ManagerCluster::cluster_info`], [`ManagerCluster::readiness`]);
    /// a probe that times out is one failed observation (10 s by default).
    pub probe_timeout: Duration,
    /// How often the cluster's waits probe (by default [`POLL_INTERVAL`]).
    pub poll_interval: Duration,
    /// [`ChildProcess::set_drop_grace`] of every manager process (none by default).
    pub drop_grace: Option<Duration>,
    /// A directory written by `leaseholdctl certs init` (PROTOCOL P13.1): every manager then
    /// serves TLS with its `manager-<id>` certificate, URLs are `https://`, and
    /// [`ManagerCluster::http`] presents the `admin` certificate. `None`: plaintext.
    pub tls_dir: Option<PathBuf>,
}

impl ClusterConfig {
    pub fn new(binary: PathBuf, dir: &Path, flags: ManagerFlags) -> Self {
        Self {
            binary,
            dir: dir.to_path_buf(),
            flags,
            http_timeout: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(10),
            poll_interval: POLL_INTERVAL,
            drop_grace: None,
            tls_dir: None,
        }
    }

    /// `https` with [`ClusterConfig::tls_dir`], else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls_dir.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The TLS files of `name` (`manager-1`, `admin`, `executor`) in [`ClusterConfig::tls_dir`].
    pub fn tls_files(&self, name: &str) -> Option<leasehold_api::tls::TlsFiles> {
        self.tls_dir.as_deref().map(|dir| tls_files(dir, name))
    }
}

/// The TLS files of `name` (`manager-1`, `executor`, `admin`) in a `leaseholdctl certs init`
/// directory.
pub fn tls_files(dir: &Path, name: &str) -> leasehold_api::tls::TlsFiles {
    leasehold_api::tls::TlsFiles {
        cert_file: dir.join(format!("{name}.pem")),
        key_file: dir.join(format!("{name}-key.pem")),
        trusted_ca_file: dir.join("ca.pem"),
    }
}

/// Whether `host` (an IP address or `localhost`) is a loopback address: plaintext anywhere else
/// needs `--insecure` (P13.5).
pub fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One manager process and everything needed to start it again.
#[derive(Debug)]
pub struct Manager {
    pub id: u64,
    /// Where it listens.
    pub host: String,
    pub port: u16,
    pub data_dir: PathBuf,
    /// `http` or `https` ([`ClusterConfig::scheme`]).
    scheme: &'static str,
    binary: PathBuf,
    launcher: Launcher,
    /// The flags of every start ([`Manager::set_flag`] changes them).
    args: Vec<String>,
    /// Environment variables of every start besides `RUST_LOG` ([`Manager::set_env`]), in the
    /// order they were first set.
    env: Vec<(String, String)>,
    /// Where its logs go; `log_path` is the current start's.
    log_dir: PathBuf,
    log_path: PathBuf,
    process: ChildProcess,
    starts: u32,
    drop_grace: Option<Duration>,
}

impl Manager {
    fn new(
        config: &ClusterConfig,
        id: u64,
        placement: Placement,
        initial_cluster: Option<&str>,
    ) -> Self {
        let Placement {
            host,
            port,
            launcher,
        } = placement;
        let data_dir = config.dir.join(format!("manager-{id}"));
        let flags = &config.flags;
        let mut args = vec![
            "--id".to_string(),
            id.to_string(),
            "--listen".to_string(),
            format!("{host}:{port}"),
            "--data-dir".to_string(),
            data_dir.display().to_string(),
        ];
        for (flag, value) in [
            ("--lease-duration", &flags.lease),
            ("--heartbeat", &flags.heartbeat),
            ("--election-timeout", &flags.election_timeout),
        ] {
            if let Some(value) = value {
                args.extend([flag.to_string(), value.clone()]);
            }
        }
        args.extend(["--shard-count".to_string(), flags.shard_count.to_string()]);
        if let Some(members) = initial_cluster {
            args.extend(["--initial-cluster".to_string(), members.to_string()]);
        }
        match config.tls_files(&format!("manager-{id}")) {
            Some(files) => args.extend([
                "--cert-file".to_string(),
                files.cert_file.display().to_string(),
                "--key-file".to_string(),
                files.key_file.display().to_string(),
                "--trusted-ca-file".to_string(),
                files.trusted_ca_file.display().to_string(),
            ]),
            // Plaintext off loopback (network-namespace hosts) needs saying so (P13.5).
            None if !is_loopback(&host) => args.push("--insecure".to_string()),
            None => {}
        }
        args.extend(flags.extra_args.iter().cloned());
        Self {
            id,
            host,
            port,
            data_dir,
            scheme: config.scheme(),
            binary: config.binary.clone(),
            launcher,
            args,
            env: Vec::new(),
            log_dir: config.dir.clone(),
            log_path: config.dir.join(format!("manager-{id}-0.log")),
            process: ChildProcess::default(),
            starts: 0,
            drop_grace: config.drop_grace,
        }
    }

    /// `manager <id>`, for messages.
    fn name(&self) -> String {
        format!("manager {}", self.id)
    }

    pub fn url(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }

    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// The process id while it runs (or until it is waited for).
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Sends `signal` (e.g. SIGSTOP / SIGCONT to pause and resume it) without waiting.
    pub fn signal(&self, signal: Signal) {
        self.process.signal(signal);
    }

    fn spawn(&mut self, args: &[String], extra_args: &[String]) -> Result<(), HarnessError> {
        if self.is_running() {
            return Err(HarnessError::AlreadyRunning { what: self.name() });
        }
        self.log_path = self
            .log_dir
            .join(format!("manager-{}-{}.log", self.id, self.starts));
        let mut command = self.launcher.command(&self.binary);
        command
            .args(args)
            .args(extra_args)
            .env("RUST_LOG", MANAGER_LOG_FILTER)
            .envs(self.env.iter().map(|(key, value)| (key, value)));
        self.process = ChildProcess::spawn(&mut command, &self.log_path)?;
        self.process.set_drop_grace(self.drop_grace);
        self.starts += 1;
        Ok(())
    }

    /// Starts it (again, on its data directory) with its flags.
    pub fn start(&mut self) -> Result<(), HarnessError> {
        self.start_with(&[])
    }

    /// Starts with extra flags (e.g. `--initial-cluster` naming a member not in the original).
    pub fn start_with(&mut self, extra_args: &[&str]) -> Result<(), HarnessError> {
        let extra: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let args = self.args.clone();
        self.spawn(&args, &extra)
    }

    /// Starts with `--join URL` instead of `--initial-cluster` (a new member, or a member whose
    /// data directory was replaced after it was removed).
    pub fn start_joining(&mut self, url: &str) -> Result<(), HarnessError> {
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
        self.spawn(&args, &["--join".to_string(), url.to_string()])
    }

    /// Runs it under `launcher` from its next start on (e.g. `prlimit` to give it fewer
    /// descriptors).
    pub fn set_launcher(&mut self, launcher: Launcher) {
        self.launcher = launcher;
    }

    /// Changes a flag for the next start (e.g. a lease duration changed across a restart).
    pub fn set_flag(&mut self, flag: &str, value: &str) {
        match self.args.iter().position(|arg| arg == flag) {
            Some(at) if at + 1 < self.args.len() => self.args[at + 1] = value.to_string(),
            _ => self.args.extend([flag.to_string(), value.to_string()]),
        }
    }

    /// Sets an environment variable for this manager's next start and every one after (e.g.
    /// `LD_PRELOAD` of a library that fakes its wall clock); setting `key` again replaces its
    /// value. It is set for what the manager is run under too (its [`Launcher`]'s program, which
    /// passes its environment on), and after `RUST_LOG`, so it may override that.
    pub fn set_env(&mut self, key: &str, value: &str) {
        match self.env.iter_mut().find(|(set, _)| set == key) {
            Some((_, old)) => *old = value.to_string(),
            None => self.env.push((key.to_string(), value.to_string())),
        }
    }

    /// Changes the binary for the next start (e.g. another release's, for an upgrade on the
    /// same data directory).
    pub fn set_binary(&mut self, binary: PathBuf) {
        self.binary = binary;
    }

    /// The binary of the next (or current) start.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// SIGKILL: no chance to flush or hand over. Returns once the process is gone.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGTERM and wait for a graceful exit (SIGKILL and an error after `bound`).
    pub async fn terminate(&mut self, bound: Duration) -> Result<ExitStatus, HarnessError> {
        let what = self.name();
        self.process.terminate(&what, bound).await
    }

    /// Waits for the process to exit on its own (e.g. a refused start), bounded.
    pub async fn wait_exit(&mut self, bound: Duration) -> Result<ExitStatus, HarnessError> {
        let what = self.name();
        self.process.wait_exit(&what, bound).await
    }

    /// Removes its data directory (it must be stopped).
    pub fn wipe_data_dir(&mut self) -> Result<(), HarnessError> {
        if self.is_running() {
            return Err(HarnessError::StillRunning { what: self.name() });
        }
        match std::fs::remove_dir_all(&self.data_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(HarnessError::Io {
                what: "remove data directory",
                path: self.data_dir.clone(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// The current (or last) start's log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The current (or last) start's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// Manager processes, each with its data directory and logs under one directory; killed when
/// dropped (with their drop grace, [`ClusterConfig::drop_grace`]).
#[derive(Debug)]
pub struct ManagerCluster {
    pub managers: BTreeMap<u64, Manager>,
    /// A client for requests to the managers ([`ClusterConfig::http_timeout`]).
    pub http: reqwest::Client,
    config: ClusterConfig,
}

impl ManagerCluster {
    /// Creates one manager per placement, none started; each names every placement in its
    /// `--initial-cluster`.
    pub fn new(
        config: ClusterConfig,
        placements: BTreeMap<u64, Placement>,
    ) -> Result<Self, HarnessError> {
        let initial_cluster = placements
            .iter()
            .map(|(id, at)| format!("{id}={}://{}:{}", config.scheme(), at.host, at.port))
            .collect::<Vec<_>>()
            .join(",");
        let managers = placements
            .into_iter()
            .map(|(id, placement)| {
                let manager = Manager::new(&config, id, placement, Some(&initial_cluster));
                (id, manager)
            })
            .collect();
        let tls = match config.tls_files("admin") {
            Some(files) => Some(
                leasehold_api::tls::TlsConfig::load(&files)
                    .map_err(|e| HarnessError::Tls(e.to_string()))?,
            ),
            None => None,
        };
        let http = leasehold_api::client::http_client_builder(tls.as_ref())
            .timeout(config.http_timeout)
            .build()?;
        Ok(Self {
            managers,
            http,
            config,
        })
    }

    /// [`ManagerCluster::new`] with managers `1..=size`, each at a [`Placement::local`].
    pub fn local(config: ClusterConfig, size: u64) -> Result<Self, HarnessError> {
        let placements = (1..=size)
            .map(|id| Ok((id, Placement::local()?)))
            .collect::<Result<_, HarnessError>>()?;
        Self::new(config, placements)
    }

    /// Starts every manager.
    pub fn start_all(&mut self) -> Result<(), HarnessError> {
        self.managers.values_mut().try_for_each(Manager::start)
    }

    /// Adds a manager that is not part of the initial cluster (no `--initial-cluster`); start
    /// it with [`Manager::start_joining`], or [`Manager::start_with`] an `--initial-cluster`.
    pub fn add_joiner(&mut self, id: u64, placement: Placement) -> &mut Manager {
        let manager = Manager::new(&self.config, id, placement, None);
        match self.managers.entry(id) {
            Entry::Occupied(mut entry) => {
                entry.insert(manager);
                entry.into_mut()
            }
            Entry::Vacant(entry) => entry.insert(manager),
        }
    }

    pub fn manager(&mut self, id: u64) -> Result<&mut Manager, HarnessError> {
        self.managers
            .get_mut(&id)
            .ok_or(HarnessError::NoSuchManager(id))
    }

    /// The base URL of manager `id`.
    pub fn url(&self, id: u64) -> Result<String, HarnessError> {
        self.managers
            .get(&id)
            .map(Manager::url)
            .ok_or(HarnessError::NoSuchManager(id))
    }

    /// Every manager's base URL, in id order.
    pub fn urls(&self) -> Vec<String> {
        self.managers.values().map(Manager::url).collect()
    }

    /// The directory holding the data directories and logs.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// The ids of the managers whose process runs.
    pub fn running(&mut self) -> Vec<u64> {
        self.managers
            .iter_mut()
            .filter_map(|(&id, manager)| manager.is_running().then_some(id))
            .collect()
    }

    /// SIGKILLs every manager.
    pub fn kill_all(&mut self) {
        self.managers.values_mut().for_each(Manager::kill);
    }

    /// `GET path` of manager `id`, within [`ClusterConfig::probe_timeout`]; the error names the
    /// node.
    async fn probe(&self, id: u64, path: &str) -> Result<reqwest::Response, String> {
        let url = self.url(id).map_err(|e| e.to_string())?;
        self.http
            .get(format!("{url}{path}"))
            .timeout(self.config.probe_timeout)
            .send()
            .await
            .map_err(|e| format!("node {id}: {e}"))
    }

    /// `GET /v1/cluster` of manager `id`; the error is an observation naming the node.
    pub async fn cluster_info(&self, id: u64) -> Result<ClusterInfo, String> {
        let reply = self.probe(id, "/v1/cluster").await?;
        reply.json().await.map_err(|e| format!("node {id}: {e}"))
    }

    /// `GET /readyz?verbose` of manager `id` answers 200 (a leader known, the commit applied,
    /// the shard configuration written); the error names the failing checks.
    pub async fn readiness(&self, id: u64) -> Result<(), String> {
        let reply = self.probe(id, "/readyz?verbose").await?;
        if reply.status().is_success() {
            return Ok(());
        }
        let status = reply.status();
        let body = reply.text().await.unwrap_or_default();
        Err(format!("node {id} not ready ({status}): {body}"))
    }

    /// Waits until manager `id` is ready ([`ManagerCluster::readiness`]).
    pub async fn wait_ready(&self, id: u64, bound: Duration) -> Result<(), HarnessError> {
        poll_every(
            &format!("manager {id} ready"),
            bound,
            self.config.poll_interval,
            || self.readiness(id),
        )
        .await
    }

    /// Waits until every running manager names the same running leader in the same term (a
    /// killed leader stays named until the survivors' election timeout), and that leader is
    /// ready to serve writes (`/readyz`: the shard configuration is written); returns it.
    pub async fn wait_for_leader(&mut self, bound: Duration) -> Result<u64, HarnessError> {
        let running = self.running();
        let this = &*self;
        let what = "one leader named by every running manager";
        poll_every(what, bound, self.config.poll_interval, || {
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
                        this.readiness(leader).await?;
                        Ok(leader)
                    }
                    _ => Err(format!("(leader, term) per node: {seen:?}")),
                }
            }
        })
        .await
    }

    /// Waits until manager `id` has applied at least `index`.
    pub async fn wait_applied(
        &self,
        id: u64,
        index: u64,
        bound: Duration,
    ) -> Result<(), HarnessError> {
        let what = format!("node {id} to apply index {index}");
        poll_every(&what, bound, self.config.poll_interval, || async move {
            let info = self.cluster_info(id).await?;
            match info.applied_index {
                Some(applied) if applied >= index => Ok(()),
                other => Err(format!("applied {other:?}")),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> ClusterConfig {
        let mut flags = ManagerFlags::new(8, "4s", "100ms", "600ms");
        flags.extra_args = vec!["--log-format".to_string(), "json".to_string()];
        ClusterConfig::new(PathBuf::from("/bin/leasehold-manager"), dir, flags)
    }

    fn placement(port: u16) -> Placement {
        Placement {
            host: "127.0.0.1".to_string(),
            port,
            launcher: Launcher::direct(),
        }
    }

    #[test]
    fn managers_name_every_member_and_joiners_none() {
        let dir = tempfile::tempdir().unwrap();
        let placements = [(1, placement(21001)), (2, placement(21002))].into();
        let mut cluster = ManagerCluster::new(config(dir.path()), placements).unwrap();
        let one = &cluster.managers[&1];
        assert_eq!(one.url(), "http://127.0.0.1:21001");
        assert_eq!(one.data_dir, dir.path().join("manager-1"));
        let args = one.args.join(" ");
        assert!(
            args.starts_with("--id 1 --listen 127.0.0.1:21001 --data-dir "),
            "{args}"
        );
        assert!(
            args.ends_with(
                "--shard-count 8 --initial-cluster \
                 1=http://127.0.0.1:21001,2=http://127.0.0.1:21002 --log-format json"
            ),
            "{args}"
        );
        assert_eq!(
            cluster.urls(),
            ["http://127.0.0.1:21001", "http://127.0.0.1:21002"]
        );

        let joiner = cluster.add_joiner(3, placement(21003));
        assert!(!joiner.args.contains(&"--initial-cluster".to_string()));
        assert!(joiner
            .args
            .ends_with(&["--log-format".into(), "json".into()]));
        joiner.set_flag("--heartbeat", "50ms");
        joiner.set_flag("--snapshot-every", "10");
        let args = joiner.args.join(" ");
        assert!(args.contains("--heartbeat 50ms"), "{args}");
        assert!(args.ends_with("--snapshot-every 10"), "{args}");
        assert!(matches!(
            cluster.manager(4),
            Err(HarnessError::NoSuchManager(4))
        ));
    }

    #[test]
    fn shipped_flags_leave_lease_and_raft_timing_to_the_manager() {
        let dir = tempfile::tempdir().unwrap();
        let shipped = ClusterConfig::new(
            PathBuf::from("/bin/leasehold-manager"),
            dir.path(),
            ManagerFlags::shipped(8),
        );
        let cluster = ManagerCluster::new(shipped, [(1, placement(21001))].into()).unwrap();
        let args = cluster.managers[&1].args.join(" ");
        for flag in ["--lease-duration", "--heartbeat", "--election-timeout"] {
            assert!(!args.contains(flag), "{args}");
        }
        assert!(args.contains("--shard-count 8"), "{args}");

        let timed =
            ManagerCluster::new(config(dir.path()), [(1, placement(21001))].into()).unwrap();
        let args = timed.managers[&1].args.join(" ");
        assert!(
            args.contains("--lease-duration 4s --heartbeat 100ms --election-timeout 600ms"),
            "{args}"
        );
    }

    #[tokio::test]
    async fn environment_set_for_a_manager_reaches_every_start() {
        let dir = tempfile::tempdir().unwrap();
        // A stand-in for the manager that prints what it was given, run by `sh` (a script that
        // is not executed itself cannot be busy being written when it starts).
        let script = dir.path().join("print-env.sh");
        std::fs::write(
            &script,
            "echo \"clock=$LEASEHOLD_TEST_CLOCK log=$RUST_LOG\" >&2\n",
        )
        .unwrap();
        let mut config = config(dir.path());
        config.binary = script;
        let placement = Placement {
            launcher: Launcher::prefixed(["sh"]),
            ..placement(21001)
        };
        let mut cluster = ManagerCluster::new(config, [(1, placement)].into()).unwrap();
        let manager = cluster.manager(1).unwrap();
        manager.set_env("LEASEHOLD_TEST_CLOCK", "+1h");
        manager.set_env("LEASEHOLD_TEST_CLOCK", "+2h");
        for _ in 0..2 {
            manager.start().unwrap();
            let status = manager.wait_exit(Duration::from_secs(10)).await.unwrap();
            assert!(status.success(), "{status:?}");
            assert_eq!(
                manager.log(),
                format!("clock=+2h log={MANAGER_LOG_FILTER}\n")
            );
        }
        assert_eq!(
            manager.log_path().file_name().unwrap(),
            "manager-1-1.log",
            "the second start has a log of its own"
        );
    }

    #[tokio::test]
    async fn a_manager_that_cannot_start_or_never_ran_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        config.binary = dir.path().join("no-such-manager");
        let mut cluster = ManagerCluster::local(config, 1).unwrap();
        let manager = cluster.manager(1).unwrap();
        let error = manager.start().unwrap_err().to_string();
        assert!(error.starts_with("spawn "), "{error}");
        let error = manager
            .terminate(Duration::from_secs(1))
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(error, "manager 1 was not started");
        manager.wipe_data_dir().unwrap();
        assert!(cluster.running().is_empty());
        let error = cluster
            .wait_for_leader(Duration::from_millis(300))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(
                "timed out after 300ms waiting for one leader named by every running manager"
            ),
            "{error}"
        );
    }
}
