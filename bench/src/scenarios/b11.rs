//! B11: a rolling deploy of real executors, as a Kubernetes Deployment with `maxSurge: 1` does
//! it (docs/BENCHMARKS.md): executors of application version 1.0.0 are replaced by executors of
//! 1.1.0 (`--app-version`, P17.3); for each in turn, start its replacement, wait until the
//! replacement registered, SIGTERM the old one (which drains itself, P17.2), and wait until the
//! shards are spread evenly again. Read from the admission logs afterwards: how often each shard moved, how many handoffs
//! gave a shard to an executor that was itself replaced later in the deploy, and each handoff's
//! no-owner window (the old owner's stop to the new owner's start); I1 and I2 over every log.
//! Every executor takes `--prepare-delay` (200 ms by default) to prepare for each shard about to
//! arrive (P17.1), which the leader waits for before revoking the shard from its holder.

use std::collections::BTreeSet;

use leasehold_conformance::admission_log::{admission_intervals, read_admission_log, ExecutorLog};
use leasehold_conformance::checker::{check_admission_exclusivity, monotonic_now_ns};
use leasehold_conformance::deploy::{deploy_figures, percentile, DeployFigures};

use super::replicas::{replicate, wait_warm, Warmth};
use super::*;

/// The application versions the deploy replaces and rolls out (`--app-version`, P17.3).
const OLD_VERSION: &str = "1.0.0";
const NEW_VERSION: &str = "1.1.0";

/// One executor process of the deploy, with its admission log.
pub(super) struct DeployedExecutor {
    pub(super) name: String,
    pub(super) address: String,
    pub(super) event_log: PathBuf,
    pub(super) process: ChildProcess,
}

impl DeployedExecutor {
    /// Its admission log; `killed_at_ns` when it was SIGKILLed (its open intervals end there).
    pub(super) fn log_file(&self, killed_at_ns: Option<u64>) -> AdmissionLogFile {
        AdmissionLogFile {
            name: self.name.clone(),
            path: self.event_log.clone(),
            killed_at_ns,
        }
    }
}

/// One executor process's admission log on disk.
#[derive(Debug, Clone)]
pub(super) struct AdmissionLogFile {
    pub(super) name: String,
    pub(super) path: PathBuf,
    /// When it was SIGKILLed, on CLOCK_MONOTONIC; `None` while it runs or after it stopped
    /// gracefully (it logged its stops).
    pub(super) killed_at_ns: Option<u64>,
}

/// Every log of `files` checked for I1/I2 (over the primaries: `clean (N intervals)` or
/// `VIOLATED: …`) and read for the moves made over `window_ns` by executors replaced in the
/// order `replaced_in_order` ([`deploy_figures`]).
pub(super) fn admission_figures(
    files: &[AdmissionLogFile],
    window_ns: (u64, u64),
    replaced_in_order: &[String],
    shards: u32,
) -> Result<(DeployFigures, String)> {
    let mut logs = Vec::new();
    let mut by_process = Vec::new();
    for file in files {
        let log = ExecutorLog {
            records: read_admission_log(&file.path).map_err(|e| anyhow!(e))?,
            ended_at_ns: file.killed_at_ns,
        };
        let mut intervals =
            admission_intervals(std::slice::from_ref(&log)).map_err(|e| anyhow!(e))?;
        if let Some(killed_at_ns) = file.killed_at_ns {
            for interval in &mut intervals {
                interval.end_ns.get_or_insert(killed_at_ns);
            }
        }
        by_process.push((file.name.clone(), intervals));
        logs.push(log);
    }
    let checked = match check_admission_exclusivity(&logs) {
        Ok(report) => format!("clean ({} intervals)", report.intervals),
        Err(violations) => format!("VIOLATED: {violations}"),
    };
    let figures = deploy_figures(&by_process, window_ns, replaced_in_order, shards);
    Ok((figures, checked))
}

/// A real executor registered as `name` (its admission log and process log in `dir`), of
/// `app_version`, taking `prepare_delay` to prepare each shard; with `replicas` above one it says
/// each secondary is ready as soon as it holds it (`--secondaries-ready-when-held`, P19.3).
pub(super) fn start_executor(
    env: &Env,
    cluster: &ManagerCluster,
    dir: &Path,
    name: &str,
    app_version: &str,
    prepare_delay: Duration,
    replicas: u32,
) -> Result<DeployedExecutor> {
    let executor_bin =
        binary_in(&env.bin_dir, "leasehold-executor").context(procs::BIN_DIR_HINT)?;
    let event_log = dir.join(format!("{name}.events.jsonl"));
    let (mut command, address) =
        executor_command(&executor_bin, cluster, &env.security, free_port()?);
    command
        .arg("--name")
        .arg(name)
        .arg("--event-log")
        .arg(&event_log)
        .arg("--app-version")
        .arg(app_version)
        .arg("--prepare-delay")
        .arg(humantime::format_duration(prepare_delay).to_string());
    if replicas > 1 {
        command.arg("--secondaries-ready-when-held");
    }
    let process = ChildProcess::spawn(&mut command, &dir.join(format!("{name}.log")))?;
    Ok(DeployedExecutor {
        name: name.to_owned(),
        address,
        event_log,
        process,
    })
}

/// Waits until exactly the executors at `addresses` are registered and hold every shard, spread
/// within one of each other (P5.4).
pub(super) async fn wait_spread(
    cluster: &ManagerCluster,
    leader: u64,
    addresses: &BTreeSet<String>,
    shards: u32,
) -> Result<()> {
    poll_every(
        "the shards spread evenly over the running executors",
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let view = executors_view(cluster, leader).await?;
            let registered: BTreeSet<String> = view.iter().map(|e| e.address.clone()).collect();
            let held: Vec<usize> = view.iter().map(|e| e.shards.len()).collect();
            let total: usize = held.iter().sum();
            let (fewest, most) = (
                held.iter().min().copied().unwrap_or(0),
                held.iter().max().copied().unwrap_or(0),
            );
            if &registered == addresses && total == shards as usize && most - fewest <= 1 {
                Ok(())
            } else {
                Err(format!("registered {registered:?}, held {held:?}"))
            }
        },
    )
    .await?;
    Ok(())
}

/// The addresses of `running`, as the leader should list them.
fn addresses(running: &[DeployedExecutor]) -> BTreeSet<String> {
    running.iter().map(|e| e.address.clone()).collect()
}

/// One run's deploy: its settings, its cluster and the executors it started.
pub(super) struct Deploy<'a> {
    env: &'a Env,
    executors: usize,
    shards: u32,
    prepare_delay: Duration,
    /// Replicas per shard (P19.1): above one, every step also waits until each shard has its
    /// ready secondaries again.
    replicas: u32,
    admin: Client,
    leader: u64,
    /// Where the executors' logs and admission logs are.
    dir: PathBuf,
    running: Vec<DeployedExecutor>,
    /// The replaced executors, stopped, with their admission logs.
    stopped: Vec<DeployedExecutor>,
    /// The old executors' names in the order they were replaced.
    replaced_in_order: Vec<String>,
    /// Last, so that it is dropped after the executors.
    cluster: ManagerCluster,
}

pub async fn b11(
    env: &Env,
    executors: usize,
    shards: u32,
    runs: usize,
    prepare_delay: Duration,
) -> Result<Table> {
    let mut table = Table::new(&[
        "B11",
        "run",
        "executors × shards",
        "prepare hook",
        "moves per shard (mean / max)",
        "handoffs (onto executors replaced later)",
        "no-owner window p50 / p99 / max",
        "I1/I2",
        "load avg",
    ]);
    for run in 1..=runs {
        let load = load_average();
        eprintln!("B11: run {run}: {executors} executors, {shards} shards");
        let mut deploy = Deploy::start(env, run, executors, shards, prepare_delay, 1).await?;
        let window_ns = deploy.roll().await?;
        table.row(deploy.row(run, window_ns, load)?);
        deploy.stop().await;
    }
    Ok(table)
}

impl<'a> Deploy<'a> {
    /// Set-up: run `run`'s cluster and its `executors` old executors, the shards spread evenly
    /// over them, each with `replicas` replicas.
    pub(super) async fn start(
        env: &'a Env,
        run: usize,
        executors: usize,
        shards: u32,
        prepare_delay: Duration,
        replicas: u32,
    ) -> Result<Self> {
        let name = if replicas > 1 {
            format!("b11-r{replicas}-{run}")
        } else {
            format!("b11-{run}")
        };
        let mut cluster =
            leasehold_cluster(env, &env.security, &name, default_flags(shards)).await?;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let admin = admin_client(&cluster, &env.security)?;
        if replicas > 1 {
            replicate(&admin, replicas, None).await?;
        }
        let dir = env.dir(&format!("{name}-executors"))?;
        let running: Vec<DeployedExecutor> = (0..executors)
            .map(|i| {
                start_executor(
                    env,
                    &cluster,
                    &dir,
                    &format!("old-{i}"),
                    OLD_VERSION,
                    prepare_delay,
                    replicas,
                )
            })
            .collect::<Result<_>>()?;
        wait_spread(&cluster, leader, &addresses(&running), shards).await?;
        if replicas > 1 {
            wait_warm(
                &cluster,
                leader,
                &admin,
                &addresses(&running),
                replicas,
                Warmth::Complete,
            )
            .await?;
        }
        Ok(Self {
            env,
            executors,
            shards,
            prepare_delay,
            replicas,
            admin,
            leader,
            dir,
            running,
            stopped: Vec::new(),
            replaced_in_order: Vec::new(),
            cluster,
        })
    }

    /// The load: the rolling deploy, every old executor replaced in turn. Returns when it began
    /// and ended on the admission logs' clock.
    pub(super) async fn roll(&mut self) -> Result<(u64, u64)> {
        let started_ns = monotonic_now_ns();
        for i in 0..self.executors {
            self.replace(i).await?;
        }
        let ended_ns = monotonic_now_ns();
        Ok((started_ns, ended_ns))
    }

    /// Replaces `old-{i}` as `maxSurge: 1` does: starts `new-{i}`, waits until it registered,
    /// SIGTERMs the old one and waits until the shards are spread evenly again.
    async fn replace(&mut self, i: usize) -> Result<()> {
        let replacement = start_executor(
            self.env,
            &self.cluster,
            &self.dir,
            &format!("new-{i}"),
            NEW_VERSION,
            self.prepare_delay,
            self.replicas,
        )?;
        let address = replacement.address.clone();
        poll_every(
            "the replacement to register",
            SETTLE_BOUND,
            POLL_INTERVAL,
            || async {
                let view = executors_view(&self.cluster, self.leader).await?;
                if view.iter().any(|e| e.address == address) {
                    Ok(())
                } else {
                    Err("not registered yet".to_owned())
                }
            },
        )
        .await?;
        self.running.push(replacement);
        let position = self
            .running
            .iter()
            .position(|e| e.name == format!("old-{i}"))
            .ok_or_else(|| anyhow!("old-{i} is not running"))?;
        let mut old = self.running.remove(position);
        old.process
            .terminate(&old.name, TERMINATE_BOUND)
            .await
            .with_context(|| format!("{} did not stop gracefully", old.name))?;
        self.replaced_in_order.push(old.name.clone());
        self.stopped.push(old);
        wait_spread(
            &self.cluster,
            self.leader,
            &addresses(&self.running),
            self.shards,
        )
        .await?;
        if self.replicas > 1 {
            wait_warm(
                &self.cluster,
                self.leader,
                &self.admin,
                &addresses(&self.running),
                self.replicas,
                // The replaced executor's secondaries wait out the restore delay for a name no
                // executor of the deploy takes again (P19.4).
                Warmth::NoneWarming,
            )
            .await?;
        }
        Ok(())
    }

    /// Measurement: every executor's admission log, checked for I1/I2 (over the primaries) and
    /// read for the deploy's figures over `window_ns`.
    pub(super) fn figures(&self, window_ns: (u64, u64)) -> Result<(DeployFigures, String)> {
        let logs: Vec<AdmissionLogFile> = self
            .stopped
            .iter()
            .chain(&self.running)
            .map(|executor| executor.log_file(None))
            .collect();
        admission_figures(&logs, window_ns, &self.replaced_in_order, self.shards)
    }

    /// Run `run`'s row from its [`Self::figures`]; `load` is the load average at its start.
    fn row(&self, run: usize, window_ns: (u64, u64), load: String) -> Result<Vec<String>> {
        let (executors, shards) = (self.executors, self.shards);
        let (figures, checked) = self.figures(window_ns)?;
        let mut windows = figures.no_owner_ms.clone();
        windows.sort_by(f64::total_cmp);
        Ok(vec![
            "B11".to_owned(),
            run.to_string(),
            format!("{executors} × {shards}"),
            humantime::format_duration(self.prepare_delay).to_string(),
            format!("{:.2} / {}", figures.moves_mean, figures.moves_max),
            format!("{} ({})", figures.handoffs, figures.onto_replaced_later),
            format!(
                "{:.1} / {:.1} / {:.1} ms",
                percentile(&windows, 0.5),
                percentile(&windows, 0.99),
                windows.last().copied().unwrap_or(f64::NAN)
            ),
            checked,
            load,
        ])
    }

    /// Tear-down: the executors still running stopped (best effort), then the cluster.
    pub(super) async fn stop(mut self) {
        for mut executor in std::mem::take(&mut self.running) {
            let _ = executor
                .process
                .terminate(&executor.name, TERMINATE_BOUND)
                .await;
        }
        self.cluster.kill_all();
    }
}
