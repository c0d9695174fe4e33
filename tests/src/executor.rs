//! Harness for `leasehold-executor` processes, and the admission-log checker the exclusivity
//! tests (PROTOCOL §12: I1, I2) share.
//!
//! Each executor runs with `--event-log` in the cluster's temporary directory. The logs of all
//! executors on this machine are stamped on one clock, CLOCK_MONOTONIC, so
//! [`check_admission_exclusivity`] can compare them directly: per shard, no two admission
//! intervals overlap (I1), and successive holders have strictly increasing epochs with no epoch
//! handed to two executors (I2).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use leasehold_harness::ChildProcess;

use crate::{binary, command_in, free_port, must, print_log_tail, Cluster};

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
        } = spec;
        let mut tls_args = Vec::new();
        match &tls_dir {
            Some(dir) => {
                let files = crate::tls_files(dir, "executor");
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
                &name,
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

/// Start or stop of admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionEdge {
    Start,
    Stop,
}

/// One admission log line (§9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionRecord {
    /// CLOCK_MONOTONIC nanoseconds.
    pub t_ns: u64,
    pub executor_id: String,
    pub shard: u32,
    pub epoch: u64,
    pub event: AdmissionEdge,
    pub reason: String,
}

/// Parses admission log text (JSON lines). A torn last line (a process killed mid-write) is an
/// error: the executor writes each line in one call, so it would be a bug.
pub fn parse_admission_log(text: &str) -> Result<Vec<AdmissionRecord>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            let value: Value = serde_json::from_str(line)
                .map_err(|e| format!("line {}: {e}: {line}", number + 1))?;
            let field = |name: &str| {
                value
                    .get(name)
                    .ok_or_else(|| format!("line {}: no {name}: {line}", number + 1))
            };
            let number_field = |name: &str| {
                field(name)?
                    .as_u64()
                    .ok_or_else(|| format!("line {}: {name} is not a u64: {line}", number + 1))
            };
            let text_field = |name: &str| {
                field(name)?
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("line {}: {name} is not a string: {line}", number + 1))
            };
            let event = match text_field("event")?.as_str() {
                "start" => AdmissionEdge::Start,
                "stop" => AdmissionEdge::Stop,
                other => return Err(format!("line {}: unknown event {other:?}", number + 1)),
            };
            Ok(AdmissionRecord {
                t_ns: number_field("t_ns")?,
                executor_id: text_field("executor_id")?,
                shard: u32::try_from(number_field("shard")?)
                    .map_err(|_| format!("line {}: shard out of range", number + 1))?,
                epoch: number_field("epoch")?,
                event,
                reason: text_field("reason")?,
            })
        })
        .collect()
}

/// Reads an admission log file; a missing file is an empty log (the executor never admitted).
pub fn read_admission_log(path: &Path) -> Result<Vec<AdmissionRecord>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_admission_log(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(format!("{}: {error}", path.display())),
    }
}

/// One executor process's admission log, and when the process is known to have stopped
/// admitting if it did not log it (SIGKILL): an upper bound on its death, e.g. the
/// `monotonic_ns` of another executor's `/v1/status` read after the killed process was reaped.
#[derive(Debug, Clone, Default)]
pub struct ExecutorLog {
    pub records: Vec<AdmissionRecord>,
    /// Open intervals end here; `None` means still running (open intervals last forever).
    pub ended_at_ns: Option<u64>,
}

/// A span during which one executor admitted work for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionInterval {
    pub executor_id: String,
    pub shard: u32,
    pub epoch: u64,
    pub start_ns: u64,
    /// `None`: still admitting.
    pub end_ns: Option<u64>,
}

/// Pairs starts and stops into intervals. A stop without a start, a second start without a
/// stop, or a stop at another epoch than its start is malformed.
pub fn admission_intervals(logs: &[ExecutorLog]) -> Result<Vec<AdmissionInterval>, String> {
    let mut intervals = Vec::new();
    for log in logs {
        let mut open: BTreeMap<(String, u32), AdmissionInterval> = BTreeMap::new();
        for record in &log.records {
            let key = (record.executor_id.clone(), record.shard);
            match record.event {
                AdmissionEdge::Start => {
                    if let Some(previous) = open.get(&key) {
                        return Err(format!(
                            "{} started shard {} again at {} without stopping the start at {}",
                            record.executor_id, record.shard, record.t_ns, previous.start_ns
                        ));
                    }
                    open.insert(
                        key,
                        AdmissionInterval {
                            executor_id: record.executor_id.clone(),
                            shard: record.shard,
                            epoch: record.epoch,
                            start_ns: record.t_ns,
                            end_ns: None,
                        },
                    );
                }
                AdmissionEdge::Stop => {
                    let Some(mut interval) = open.remove(&key) else {
                        return Err(format!(
                            "{} stopped shard {} at {} without a start",
                            record.executor_id, record.shard, record.t_ns
                        ));
                    };
                    if interval.epoch != record.epoch {
                        return Err(format!(
                            "{} stopped shard {} at epoch {} but started it at epoch {}",
                            record.executor_id, record.shard, record.epoch, interval.epoch
                        ));
                    }
                    if record.t_ns < interval.start_ns {
                        return Err(format!(
                            "{} stopped shard {} at {} before its start at {}",
                            record.executor_id, record.shard, record.t_ns, interval.start_ns
                        ));
                    }
                    interval.end_ns = Some(record.t_ns);
                    intervals.push(interval);
                }
            }
        }
        for (_, mut interval) in open {
            interval.end_ns = log.ended_at_ns.map(|end| end.max(interval.start_ns));
            intervals.push(interval);
        }
    }
    Ok(intervals)
}

/// What [`check_admission_exclusivity`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExclusivityReport {
    pub intervals: usize,
    pub shards: usize,
    /// Successive intervals of one shard held by different executors.
    pub handoffs: usize,
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

/// I1 and I2 over the admission logs of every executor that ran (the rules are in
/// [`crate::checker`]): `Err` lists every violation.
pub fn check_admission_exclusivity(logs: &[ExecutorLog]) -> Result<ExclusivityReport, String> {
    let report = crate::checker::check(logs)?.into_result()?;
    Ok(ExclusivityReport {
        intervals: report.intervals,
        shards: report.shards,
        handoffs: report.handoffs,
    })
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

/// Builders for synthetic admission logs, shared by this module's and the checker's unit tests.
#[cfg(test)]
pub(crate) mod synthetic {
    use super::{AdmissionEdge, AdmissionRecord, ExecutorLog};

    pub(crate) fn record(
        executor: &str,
        shard: u32,
        epoch: u64,
        event: AdmissionEdge,
        t_ns: u64,
    ) -> AdmissionRecord {
        AdmissionRecord {
            t_ns,
            executor_id: executor.to_string(),
            shard,
            epoch,
            event,
            reason: "test".to_string(),
        }
    }

    pub(crate) fn log(records: Vec<AdmissionRecord>, ended_at_ns: Option<u64>) -> ExecutorLog {
        ExecutorLog {
            records,
            ended_at_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::synthetic::{log, record};
    use super::*;

    use AdmissionEdge::{Start, Stop};

    #[test]
    fn parses_the_documented_line_shape() {
        let text = concat!(
            r#"{"t_ns":10,"executor_id":"ex-1","shard":7,"epoch":3,"event":"start","reason":"assigned"}"#,
            "\n",
            r#"{"t_ns":20,"executor_id":"ex-1","shard":7,"epoch":3,"event":"stop","reason":"revoked"}"#,
            "\n"
        );
        let records = parse_admission_log(text).unwrap();
        assert_eq!(
            records[0],
            AdmissionRecord {
                reason: "assigned".into(),
                ..record("ex-1", 7, 3, Start, 10)
            }
        );
        assert_eq!(records[1].event, Stop);
        assert!(parse_admission_log(
            r#"{"t_ns":1,"executor_id":"e","shard":1,"epoch":1,"event":"pause","reason":"x"}"#
        )
        .is_err());
        assert!(parse_admission_log(r#"{"t_ns":1,"executor_id":"e","shard":1"#).is_err());
    }

    #[test]
    fn i1_handoff_without_overlap_passes() {
        let a = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Stop, 20),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 20)], None);
        let report = check_admission_exclusivity(&[a, b]).unwrap();
        assert_eq!(
            report,
            ExclusivityReport {
                intervals: 2,
                shards: 1,
                handoffs: 1
            }
        );
    }

    #[test]
    fn i1_overlap_is_caught() {
        let a = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Stop, 21),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 20)], None);
        let error = check_admission_exclusivity(&[a, b]).unwrap_err();
        assert!(error.starts_with("I1"), "{error}");
    }

    #[test]
    fn i1_open_interval_of_a_running_executor_overlaps_everything_after() {
        let a = log(vec![record("ex-1", 1, 1, Start, 10)], None);
        let b = log(
            vec![
                record("ex-2", 1, 2, Start, 50),
                record("ex-2", 1, 2, Stop, 60),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[a.clone(), b.clone()]).is_err());
        // Killed at 40: its open interval ends there.
        let killed = ExecutorLog {
            ended_at_ns: Some(40),
            ..a
        };
        assert!(check_admission_exclusivity(&[killed, b]).is_ok());
    }

    #[test]
    fn i1_start_inside_an_earlier_interval_is_caught() {
        // ex-1 holds 10..100; ex-3 starts at 50, inside it.
        let a = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Stop, 100),
            ],
            None,
        );
        let c = log(vec![record("ex-3", 1, 3, Start, 50)], None);
        assert!(check_admission_exclusivity(&[a, c]).is_err());
    }

    #[test]
    fn i2_epochs_must_increase_between_holders() {
        let a = log(
            vec![
                record("ex-1", 1, 2, Start, 10),
                record("ex-1", 1, 2, Stop, 20),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 30)], None);
        let error = check_admission_exclusivity(&[a, b]).unwrap_err();
        assert!(error.starts_with("I2"), "{error}");
        let a = log(
            vec![
                record("ex-1", 1, 3, Start, 10),
                record("ex-1", 1, 3, Stop, 20),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 30)], None);
        assert!(check_admission_exclusivity(&[a, b]).is_err());
    }

    #[test]
    fn i2_one_holder_resuming_after_a_lapse_keeps_its_epoch() {
        let a = log(
            vec![
                record("ex-1", 1, 4, Start, 10),
                record("ex-1", 1, 4, Stop, 20),
                record("ex-1", 1, 4, Start, 30),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[a]).is_ok());
    }

    #[test]
    fn malformed_logs_are_errors() {
        let double_start = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Start, 20),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[double_start]).is_err());
        let orphan_stop = log(vec![record("ex-1", 1, 1, Stop, 10)], None);
        assert!(check_admission_exclusivity(&[orphan_stop]).is_err());
        let epoch_mismatch = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 2, Stop, 20),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[epoch_mismatch]).is_err());
    }
}
