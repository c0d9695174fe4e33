//! One conformance run (PROTOCOL P16.3): a real three-manager cluster, executors started from the
//! template, each behind fault proxies (one in front of its push listener, one per manager in
//! front of its calls), a script of faults, then I1 and I2 over every admission log the
//! executors wrote.
//!
//! The script, each step followed by a wait until every shard is routed to a running executor
//! and each of them holds one:
//! 1. settle: the executors take every shard;
//! 2. deliveries reordered: pushes and revokes delayed up to 3 s (past the managers' 2 s bound,
//!    so a late delivery arrives after a newer one, a revoke overtakes a push and the reverse)
//!    and duplicated, while an executor is drained and undrained twice, and a joiner comes and
//!    stops gracefully (P3.7);
//! 3. a push delivered again after a revoke: an executor gains shards by a push the proxy keeps,
//!    is then drained, and the kept push is delivered again once another executor holds its
//!    shards (P4.1: it is stale);
//! 4. SIGKILL of an executor, then a new process in its place;
//! 5. an executor paused (SIGSTOP) for twice the lease while the replies to its calls lag 1.5 s,
//!    then resumed: its lease must be anchored where its requests left (P3.2);
//! 6. the leader SIGKILLed, then restarted.
//!
//! Each executor process runs in its own process group, so a template that starts several
//! processes (a sidecar and its service) is signalled whole.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_api::client::{Client, ClientConfig};
use leasehold_harness::{free_port, ClusterConfig, ManagerCluster, ManagerFlags};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::checker::{check_files, monotonic_now_ns, CheckReport, EventLogFile};
use crate::proxy::{Impairment, ProxySet};
use crate::template::{Slot, Template};

/// The cluster every run uses: short leases so faults resolve in seconds.
pub const KIT_SHARDS: u32 = 16;
pub const KIT_LEASE: Duration = Duration::from_secs(3);
const KIT_HEARTBEAT: &str = "100ms";
const KIT_ELECTION_TIMEOUT: &str = "500ms";

/// Executors started for a run (a joiner comes and goes beside them).
const EXECUTORS: usize = 3;

/// Bound on each wait for the shards to settle, and on starting the cluster.
const SETTLE_BOUND: Duration = Duration::from_secs(60);
/// Bound on an executor's graceful stop after SIGTERM before it is killed.
const STOP_BOUND: Duration = Duration::from_secs(15);

/// Delivery delays of step 2: past the managers' 2 s bound on a delivery.
const REORDER: Impairment = Impairment {
    delay_ms: (0, 3_000),
    duplicate_percent: 20,
};
/// The reply lag of step 5.
const REPLY_LAG: Duration = Duration::from_millis(1_500);

/// What a run is given.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub template: Template,
    pub manager_binary: PathBuf,
    /// The run's own directory: managers' data, executors' logs and admission logs.
    pub dir: PathBuf,
    pub seed: u64,
}

/// Why a run could not judge the executor, or judged it failing before the logs were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The kit itself could not do its part (the managers did not start).
    Kit(String),
    /// The executor did not do its part: it never took the shards it was routed, never
    /// registered, or wrote no admission log while holding shards.
    Executor(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Kit(detail) => write!(f, "the kit failed: {detail}"),
            RunError::Executor(detail) => write!(f, "the executor failed: {detail}"),
        }
    }
}

/// What a run saw.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub check: CheckReport,
    /// Each step and how long it took, for the operator.
    pub steps: Vec<(String, Duration)>,
}

/// One executor process the kit started.
struct ExecutorProcess {
    name: String,
    event_log: PathBuf,
    advertise: String,
    push_proxy: ProxySet,
    call_proxy: ProxySet,
    child: Option<Child>,
    /// An upper bound on when it stopped admitting, when it was killed (its stops unlogged).
    ended_at_ns: Option<u64>,
    /// The managers routed shards to it: it must have logged them.
    held_shards: bool,
}

impl ExecutorProcess {
    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok()) {
            let _ = killpg(Pid::from_raw(pid), signal);
        }
    }

    fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
            self.ended_at_ns = Some(monotonic_now_ns());
        }
    }

    /// SIGTERM to the group and a bounded wait; killed past it (the stop is still judged by
    /// the logs).
    async fn stop(&mut self) {
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + STOP_BOUND;
        while Instant::now() < deadline {
            if !self.is_running() {
                self.child = None;
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "conformance: {} did not stop within {STOP_BOUND:?} of SIGTERM; killed",
            self.name
        );
        self.kill();
    }
}

impl Drop for ExecutorProcess {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.kill();
        }
    }
}

/// A run in progress.
struct Run<'a> {
    config: &'a RunConfig,
    cluster: ManagerCluster,
    admin: Client,
    /// Every process started, in order; the running ones are `slots`.
    processes: Vec<ExecutorProcess>,
    /// Slot → index in `processes` of its current process.
    slots: BTreeMap<usize, usize>,
    generation: u32,
    seed: u64,
    steps: Vec<(String, Duration)>,
}

fn kit_error(error: impl std::fmt::Display) -> RunError {
    RunError::Kit(error.to_string())
}

/// One run: the script above, then the check.
pub async fn run(config: &RunConfig) -> Result<RunReport, RunError> {
    std::fs::create_dir_all(&config.dir).map_err(kit_error)?;
    let mut flags = ManagerFlags::new(
        KIT_SHARDS,
        &format!("{}ms", KIT_LEASE.as_millis()),
        KIT_HEARTBEAT,
        KIT_ELECTION_TIMEOUT,
    );
    // Placement by count: the script judges settling by who holds shards, not by load.
    flags.extra_args.push("--load-placement=false".into());
    let cluster_config = ClusterConfig::new(config.manager_binary.clone(), &config.dir, flags);
    let mut cluster = ManagerCluster::local(cluster_config, 3).map_err(kit_error)?;
    cluster.start_all().map_err(kit_error)?;
    cluster
        .wait_for_leader(SETTLE_BOUND)
        .await
        .map_err(kit_error)?;
    let admin = Client::with_config(cluster.urls(), ClientConfig::default()).map_err(kit_error)?;
    let mut run = Run {
        config,
        cluster,
        admin,
        processes: Vec::new(),
        slots: BTreeMap::new(),
        generation: 0,
        seed: config.seed,
        steps: Vec::new(),
    };
    let outcome = run.script().await;
    run.stop_all().await;
    outcome?;
    let report = run.check()?;
    run.cluster.kill_all();
    Ok(RunReport {
        check: report,
        steps: run.steps,
    })
}

impl Run<'_> {
    fn next_seed(&mut self) -> u64 {
        self.seed = self
            .seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        self.seed
    }

    /// Starts a process for `slot` (a new one replaces the old, which must be gone).
    async fn start(&mut self, slot: usize) -> Result<(), RunError> {
        self.generation += 1;
        let name = format!("x{slot}-{}", self.generation);
        let port = free_port().map_err(kit_error)?;
        let listen = format!("127.0.0.1:{port}");
        let push_proxy = ProxySet::start(&[format!("http://{listen}")], self.next_seed(), None)
            .await
            .map_err(kit_error)?;
        let call_proxy = ProxySet::start(&self.cluster.urls(), self.next_seed(), None)
            .await
            .map_err(kit_error)?;
        let advertise = push_proxy.urls()[0].clone();
        let event_log = self.config.dir.join(format!("{name}.events.jsonl"));
        let command = self.config.template.render(&Slot {
            managers: call_proxy.urls(),
            listen,
            advertise: advertise.clone(),
            name: name.clone(),
            event_log: event_log.display().to_string(),
        });
        let log_path = self.config.dir.join(format!("{name}.log"));
        let log = File::create(&log_path).map_err(kit_error)?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(kit_error)?)
            .stderr(log)
            .spawn()
            .map_err(|e| RunError::Kit(format!("sh -c {command:?}: {e}")))?;
        eprintln!("conformance: started {name}: {command}");
        self.processes.push(ExecutorProcess {
            name,
            event_log,
            advertise,
            push_proxy,
            call_proxy,
            child: Some(child),
            ended_at_ns: None,
            held_shards: false,
        });
        self.slots.insert(slot, self.processes.len() - 1);
        Ok(())
    }

    fn process(&mut self, slot: usize) -> &mut ExecutorProcess {
        let index = self.slots[&slot];
        &mut self.processes[index]
    }

    /// Waits until every shard is routed to a running executor of `holders` (slots) and each
    /// of them holds at least one; marks who held shards.
    async fn settle(&mut self, holders: &[usize], what: &str) -> Result<(), RunError> {
        let started = Instant::now();
        let addresses: BTreeMap<String, usize> = holders
            .iter()
            .map(|&slot| (self.process(slot).advertise.clone(), self.slots[&slot]))
            .collect();
        let mut last = String::new();
        while started.elapsed() < SETTLE_BOUND {
            for &slot in holders {
                if !self.process(slot).is_running() {
                    let name = self.process(slot).name.clone();
                    return Err(RunError::Executor(format!(
                        "{name} exited on its own ({what})"
                    )));
                }
            }
            match self.routed_to(&addresses).await {
                Ok(owners) => {
                    for index in &owners {
                        self.processes[*index].held_shards = true;
                    }
                    if owners.len() == holders.len() {
                        self.steps.push((what.to_owned(), started.elapsed()));
                        eprintln!(
                            "conformance: {what}: settled in {} ms",
                            started.elapsed().as_millis()
                        );
                        return Ok(());
                    }
                    last = format!(
                        "{} of {} executors hold shards",
                        owners.len(),
                        holders.len()
                    );
                }
                Err(detail) => last = detail,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(RunError::Executor(format!(
            "{what}: the shards did not settle on the running executors within {SETTLE_BOUND:?} \
             ({last}); see the executors' logs in {}",
            self.config.dir.display()
        )))
    }

    /// The processes (indices) the routing table sends shards to, if every shard is routed to
    /// one of `addresses`.
    async fn routed_to(
        &self,
        addresses: &BTreeMap<String, usize>,
    ) -> Result<BTreeSet<usize>, String> {
        let table = self.admin.routing(false).await.map_err(|e| e.to_string())?;
        let mut owners = BTreeSet::new();
        for route in &table.routes {
            let address = route
                .address
                .as_ref()
                .ok_or(format!("shard {} is between owners", route.shard))?;
            let index = addresses.get(address).ok_or(format!(
                "shard {} is routed to {address}, not a running executor",
                route.shard
            ))?;
            owners.insert(*index);
        }
        if table.routes.len() != KIT_SHARDS as usize {
            return Err(format!("{} routes", table.routes.len()));
        }
        Ok(owners)
    }

    /// The executor id the managers know `slot`'s process by (its advertised address).
    async fn executor_id(&mut self, slot: usize) -> Result<String, RunError> {
        let advertise = self.process(slot).advertise.clone();
        let views = self.admin.executors(false).await.map_err(kit_error)?;
        views
            .into_iter()
            .find(|view| view.address == advertise)
            .map(|view| view.executor_id)
            .ok_or_else(|| RunError::Executor(format!("no executor registered as {advertise}")))
    }

    fn step(name: &str) {
        eprintln!("conformance: step: {name}");
    }

    async fn script(&mut self) -> Result<(), RunError> {
        let all: Vec<usize> = (0..EXECUTORS).collect();
        for slot in 0..EXECUTORS {
            self.start(slot).await?;
        }
        self.settle(&all, "the executors take every shard").await?;

        Self::step("deliveries delayed past the managers' bound, duplicated and reordered");
        for slot in 0..EXECUTORS {
            self.process(slot).push_proxy.impair(Some(REORDER));
        }
        for round in 0..2 {
            let id = self.executor_id(0).await?;
            self.admin.drain(&id).await.map_err(kit_error)?;
            self.settle(&[1, 2], &format!("drain {round} moved x0's shards"))
                .await?;
            self.admin.undrain(&id).await.map_err(kit_error)?;
            self.settle(&all, &format!("undrain {round} gave x0 shards again"))
                .await?;
        }
        self.start(EXECUTORS).await?;
        self.process(EXECUTORS).push_proxy.impair(Some(REORDER));
        let with_joiner: Vec<usize> = (0..=EXECUTORS).collect();
        self.settle(&with_joiner, "a joiner takes shards").await?;
        self.process(EXECUTORS).stop().await;
        self.slots.remove(&EXECUTORS);
        self.settle(&all, "the joiner's graceful stop handed its shards on")
            .await?;
        for slot in 0..EXECUTORS {
            self.process(slot).push_proxy.impair(None);
        }

        Self::step("a push delivered again after a revoke");
        // x0 gains some of x1's shards by a push, of which the proxy keeps a copy; x0 is then
        // drained and its shards go to x2; the copy is delivered again. It is stale (P4.1):
        // applying it admits shards another executor holds.
        let (x0, x1) = (self.executor_id(0).await?, self.executor_id(1).await?);
        self.process(0)
            .push_proxy
            .capture_next("PUT", "/v1/assignment");
        self.admin.drain(&x1).await.map_err(kit_error)?;
        self.settle(&[0, 2], "x1 drained: x0 gains shards").await?;
        let pushed_by = Instant::now() + SETTLE_BOUND;
        while !self.process(0).push_proxy.has_captured() {
            if Instant::now() >= pushed_by {
                return Err(RunError::Executor(format!(
                    "x0 was routed shards but the managers pushed it nothing within \
                     {SETTLE_BOUND:?}: did it answer its pushes?"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.admin.drain(&x0).await.map_err(kit_error)?;
        self.settle(&[2], "x0 drained too: one executor holds every shard")
            .await?;
        let replayed = self
            .process(0)
            .push_proxy
            .replay_captured()
            .await
            .map_err(|detail| RunError::Kit(format!("delivering a push again: {detail}")))?;
        if !replayed {
            return Err(RunError::Kit("the kept push to x0 was lost".into()));
        }
        // Long enough for a renewal to follow the stale push.
        tokio::time::sleep(KIT_LEASE / 2).await;
        self.admin.undrain(&x0).await.map_err(kit_error)?;
        self.admin.undrain(&x1).await.map_err(kit_error)?;
        self.settle(&all, "both undrained").await?;

        Self::step("SIGKILL");
        self.process(1).kill();
        self.settle(&[0, 2], "a killed executor's shards re-homed")
            .await?;
        self.start(1).await?;
        self.settle(&all, "a new process in the killed one's place")
            .await?;

        Self::step("paused past the lease while replies lag");
        self.process(2).call_proxy.lag_replies(REPLY_LAG);
        tokio::time::sleep(KIT_LEASE).await;
        self.process(2).signal(Signal::SIGSTOP);
        tokio::time::sleep(KIT_LEASE * 2).await;
        self.settle(&[0, 1], "a paused executor's shards re-homed")
            .await?;
        self.process(2).signal(Signal::SIGCONT);
        self.process(2).call_proxy.lag_replies(Duration::ZERO);
        self.settle(&all, "the resumed executor takes shards again")
            .await?;

        Self::step("leader SIGKILLed");
        let leader = self
            .cluster
            .wait_for_leader(SETTLE_BOUND)
            .await
            .map_err(kit_error)?;
        self.cluster.manager(leader).map_err(kit_error)?.kill();
        self.cluster
            .wait_for_leader(SETTLE_BOUND)
            .await
            .map_err(kit_error)?;
        self.cluster
            .manager(leader)
            .map_err(kit_error)?
            .start()
            .map_err(kit_error)?;
        self.settle(&all, "after the leader's death").await?;
        Ok(())
    }

    async fn stop_all(&mut self) {
        for process in &mut self.processes {
            if process.child.is_some() {
                process.stop().await;
            }
        }
    }

    /// I1 and I2 over every log; an executor that held shards and wrote no log fails.
    fn check(&self) -> Result<CheckReport, RunError> {
        let mut files = Vec::new();
        for process in &self.processes {
            if !process.event_log.exists() {
                if process.held_shards {
                    return Err(RunError::Executor(format!(
                        "{} held shards but wrote no admission log at {}",
                        process.name,
                        process.event_log.display()
                    )));
                }
                continue;
            }
            files.push(EventLogFile {
                path: process.event_log.clone(),
                ended_at_ns: process.ended_at_ns,
            });
        }
        check_files(&files).map_err(|detail| {
            RunError::Executor(format!(
                "an admission log is not in the format of §9: {detail}"
            ))
        })
    }
}

/// The manager binary beside this one, or `leasehold-manager` on `PATH`.
pub fn default_manager_binary() -> PathBuf {
    leasehold_harness::binary("leasehold-manager")
        .unwrap_or_else(|_| PathBuf::from("leasehold-manager"))
}

/// Whether `path` can be run (for a clear error before a run starts).
pub fn runnable(path: &Path) -> bool {
    Command::new(path)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
