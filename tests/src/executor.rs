//! Harness for `leasehold-executor` processes, and the admission-log checker the exclusivity
//! tests (PROTOCOL §12: I1, I2) share.
//!
//! Each executor runs with `--event-log` in the cluster's temporary directory. The logs of all
//! executors on this machine are stamped on one clock, CLOCK_MONOTONIC, so
//! [`check_admission_exclusivity`] can compare them directly: per shard, no two admission
//! intervals overlap (I1), and successive holders have strictly increasing epochs with no epoch
//! handed to two executors (I2).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use leasehold_harness::ChildProcess;

use crate::{binary, command_in, free_port, must, print_log_tail, Cluster};

pub use leasehold_conformance::admission_log::{
    admission_intervals, parse_admission_log, read_admission_log, AdmissionEdge, AdmissionInterval,
    AdmissionRecord, ExecutorLog,
};
pub use leasehold_conformance::checker::{check_admission_exclusivity, ExclusivityReport};

/// Graceful-stop bound passed to executors (P3.7).
pub const EXECUTOR_SHUTDOWN_GRACE: &str = "5s";

/// How to start one executor: its label, where it listens and runs, and which managers it uses.
#[derive(Debug, Clone)]
pub struct ExecutorSpec {
    /// Operator label (`--name`), also used in file names: unique per process started.
    pub name: String,
    /// Manager base URLs (`--managers`).
    pub managers: Vec<String>,
    /// Host to listen on.
    pub host: String,
    pub port: u16,
    /// `--advertise`; `None`: the listen address.
    pub advertise: Option<String>,
    /// Network namespace to run in; `None`: the test's own.
    pub netns: Option<String>,
    /// Further flags, e.g. `--request-timeout 1s`.
    pub extra_args: Vec<String>,
    /// The executor binary; `None`: this release's (an earlier release's comes from
    /// `leasehold_harness::release_bin_dir`).
    pub binary: Option<PathBuf>,
    /// A `leaseholdctl certs init` directory: the executor serves and calls with TLS, presenting
    /// its `executor` certificate, and the test talks to it with the `admin` one.
    pub tls_dir: Option<PathBuf>,
    /// Which certificate of `tls_dir` the executor presents: `executor`, or one that
    /// `leaseholdctl certs issue` made (`executor-orders`, limited to a namespace, P18.2).
    pub tls_identity: String,
    /// The `--name` it registers under when not `name`: a process restarted under the name of
    /// one that ran before (P19.4), with files of its own.
    pub registered_name: Option<String>,
}

impl ExecutorSpec {
    /// On 127.0.0.1, against every manager of `cluster`.
    pub fn local(cluster: &Cluster, name: &str) -> Self {
        Self {
            name: name.to_string(),
            managers: cluster.urls(),
            host: "127.0.0.1".to_string(),
            port: free_port(),
            advertise: None,
            netns: None,
            extra_args: Vec::new(),
            binary: None,
            tls_dir: cluster.options.tls_dir.clone(),
            tls_identity: "executor".to_string(),
            registered_name: None,
        }
    }
}

/// One `leasehold-executor` process.
#[derive(Debug)]
pub struct ExecutorProcess {
    /// Operator label (`--name`), also used in file names.
    pub name: String,
    /// Where the push listener / workload listens.
    pub host: String,
    pub port: u16,
    /// The admission log (`--event-log`).
    pub event_log: PathBuf,
    /// stderr of the process.
    log_path: PathBuf,
    process: ChildProcess,
    http: reqwest::Client,
    /// `https` under TLS.
    scheme: &'static str,
}

impl ExecutorProcess {
    /// Starts an executor against every manager of `cluster`, with its admission log and
    /// process log in the cluster's temporary directory.
    pub fn start(cluster: &Cluster, name: &str) -> Self {
        Self::start_spec(cluster.dir.path(), ExecutorSpec::local(cluster, name))
    }

    /// Starts an executor as `spec` says, with its admission log and process log in `dir`.
    pub fn start_spec(dir: &Path, spec: ExecutorSpec) -> Self {
        let ExecutorSpec {
            name,
            managers,
            host,
            port,
            advertise,
            netns,
            extra_args,
            binary: executor_binary,
            tls_dir,
            tls_identity,
            registered_name,
        } = spec;
        let mut tls_args = Vec::new();
        match &tls_dir {
            Some(dir) => {
                let files = crate::tls_files(dir, &tls_identity);
                for (flag, path) in [
                    ("--cert-file", files.cert_file),
                    ("--key-file", files.key_file),
                    ("--trusted-ca-file", files.trusted_ca_file),
                ] {
                    tls_args.push(flag.to_string());
                    tls_args.push(path.display().to_string());
                }
            }
            // Plaintext off loopback (network-namespace hosts) needs saying so (P13.5).
            None if !leasehold_harness::is_loopback(&host) => {
                tls_args.push("--insecure".to_string());
            }
            None => {}
        }
        let event_log = dir.join(format!("executor-{name}.events.jsonl"));
        let log_path = dir.join(format!("executor-{name}.log"));
        let executor_binary = executor_binary.unwrap_or_else(|| binary("leasehold-executor"));
        let mut command = command_in(netns.as_deref(), &executor_binary);
        command
            .args([
                "--managers",
                &managers.join(","),
                "--listen",
                &format!("{host}:{port}"),
                "--name",
                registered_name.as_deref().unwrap_or(&name),
                "--event-log",
                &event_log.display().to_string(),
                "--shutdown-grace",
                EXECUTOR_SHUTDOWN_GRACE,
            ])
            .args(
                advertise
                    .iter()
                    .flat_map(|url| ["--advertise", url.as_str()]),
            )
            .args(&tls_args)
            .args(&extra_args)
            .env("RUST_LOG", "info");
        let process = must(ChildProcess::spawn(&mut command, &log_path));
        Self {
            name,
            host,
            port,
            event_log,
            log_path,
            process,
            http: leasehold_api::client::http_client_builder(
                tls_dir
                    .as_ref()
                    .map(|dir| {
                        leasehold_api::tls::TlsConfig::load(&crate::tls_files(dir, "admin"))
                            .expect("TLS files")
                    })
                    .as_ref(),
            )
            .timeout(Duration::from_secs(5))
            .build()
            .expect("http client"),
            scheme: if tls_dir.is_some() { "https" } else { "http" },
        }
    }

    /// Base URL of the executor's listener.
    pub fn url(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }

    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> Result<Value, String> {
        let reply = self
            .http
            .get(format!("{}/v1/status", self.url()))
            .send()
            .await
            .map_err(|e| format!("executor {}: {e}", self.name))?;
        reply
            .json()
            .await
            .map_err(|e| format!("executor {}: {e}", self.name))
    }

    /// The shards (ascending) this executor admits work for right now, per its status; an
    /// error while it is not registered, fenced or unreachable.
    pub async fn admitted_shards(&self) -> Result<BTreeSet<u32>, String> {
        let status = self.status().await?;
        if status["admission"] != "admitting" {
            return Err(format!("executor {} is {}", self.name, status["admission"]));
        }
        Ok(status_shards(&status))
    }

    /// `GET /v1/work?key=K` on this executor: status and JSON body. `key` is sent as is, so
    /// it must be URL-safe.
    pub async fn work(&self, key: &str) -> Result<(u16, Value), String> {
        let reply = self
            .http
            .get(format!("{}/v1/work?key={key}", self.url()))
            .send()
            .await
            .map_err(|e| format!("executor {}: {e}", self.name))?;
        let status = reply.status().as_u16();
        let body = reply.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// Sends SIGTERM (graceful stop, P3.7) without waiting.
    pub fn signal_terminate(&self) {
        self.process.signal(Signal::SIGTERM);
    }

    /// Sends `signal` (e.g. SIGSTOP / SIGCONT) without waiting.
    pub fn signal(&self, signal: Signal) {
        self.process.signal(signal);
    }

    /// Waits for the process to exit (after [`ExecutorProcess::signal_terminate`]); SIGKILL and
    /// panic after `bound`.
    pub async fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        let what = format!("executor {}", self.name);
        must(self.process.wait_exit(&what, bound).await)
    }

    /// SIGKILL: no chance to stop admission or deregister. Returns once the process is gone.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// The process's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The admission log so far.
    pub fn admission_log(&self) -> Result<Vec<AdmissionRecord>, String> {
        read_admission_log(&self.event_log)
    }
}

impl Drop for ExecutorProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            print_log_tail(&format!("executor {}", self.name), &self.log_path);
        }
    }
}

/// The `shards` of an executor status as a set of shard numbers.
pub fn status_shards(status: &Value) -> BTreeSet<u32> {
    status["shards"]
        .as_array()
        .map(|shards| {
            shards
                .iter()
                .filter_map(|s| s["shard"].as_u64())
                .filter_map(|s| u32::try_from(s).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Each executor's admission log, for [`check_admission_exclusivity`]: with the instant it was
/// dead by (an upper bound on when it stopped admitting), or `None` while it still runs.
pub fn admission_logs(executors: &[(&ExecutorProcess, Option<u64>)]) -> Vec<ExecutorLog> {
    executors
        .iter()
        .map(|(executor, ended_at_ns)| ExecutorLog {
            records: executor
                .admission_log()
                .unwrap_or_else(|e| panic!("admission log of {}: {e}", executor.name)),
            ended_at_ns: *ended_at_ns,
        })
        .collect()
}

/// Waits until `executors` together admit every shard in `0..shard_count`, each exactly once,
/// with shard counts differing by at most one (P5.4); returns each executor's shards.
pub async fn wait_for_even_split(
    executors: &[&ExecutorProcess],
    shard_count: u32,
    bound: Duration,
) -> Vec<BTreeSet<u32>> {
    crate::poll_until(
        &format!(
            "{} executors to admit all {shard_count} shards evenly",
            executors.len()
        ),
        bound,
        || async {
            let mut sets = Vec::new();
            for executor in executors {
                sets.push(executor.admitted_shards().await?);
            }
            let total: usize = sets.iter().map(BTreeSet::len).sum();
            let union: BTreeSet<u32> = sets.iter().flatten().copied().collect();
            let sizes: Vec<usize> = sets.iter().map(BTreeSet::len).collect();
            let spread = sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0);
            if total == shard_count as usize && union.len() == total && spread <= 1 {
                Ok(sets)
            } else {
                Err(format!("shards per executor: {sizes:?}"))
            }
        },
    )
    .await
}
