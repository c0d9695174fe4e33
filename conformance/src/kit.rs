//! One conformance run (PROTOCOL P16.3): a real three-manager cluster, executors started from the
//! template, each behind fault proxies (one in front of its push listener, one per manager in
//! front of its calls), a script of faults, then I1 and I2 over every admission log the
//! executors wrote.
//!
//! The script, each step followed by a wait until every shard is routed to a running executor
//! and each of them admits one by its own admission log (a wait that runs out fails the run,
//! naming what it waited for):
//! 1. settle: the executors take every shard (each process's first registration was held at its
//!    call proxy while the kit asked its push listener for `GET /v1/health`: P8.1, it registers
//!    only once that answers);
//! 2. deliveries reordered: pushes and revokes delayed up to 3 s (past the managers' 2 s bound,
//!    so a late delivery arrives after a newer one, a revoke overtakes a push and the reverse)
//!    and duplicated, while an executor is drained and undrained twice, and a joiner comes,
//!    admits shards (by its log) and stops gracefully (P3.7) with the replies to its calls
//!    lagging, so that one which deregisters before it stops admitting overlaps the takers;
//! 3. a push delivered again after a revoke: an executor gains shards by a push the proxy keeps,
//!    is then drained (its renewals and later pushes refused), and the kept push is delivered
//!    again once another executor holds its shards (P4.1: it is stale, only by the revoke);
//! 4. claims (P4.2): a renewal of x0 read at its call proxy while the managers' set for x0 stands
//!    still must claim that set;
//! 5. a set told by a renewal's reply (P4.2): x0's pushes and revokes refused, x1 drained: x0
//!    must admit the shards routed to it (from its renewals' replies); x1 undrained;
//! 6. unknown_executor (P4.4): x0's renewals answered `404 unknown_executor` by its call proxy:
//!    x0 must stop every shard at once and register again under a new incarnation and
//!    credential; the kit then deregisters the old executor;
//! 7. disowned sets (P4.1): x1 pushed its own set at a revision far above the cluster's; two
//!    renewals later (whose grants disown it) x2 is drained, and x1 must admit the shards routed
//!    to it; x2 undrained;
//! 8. a grant made stale by a newer push (P4.1, stale grants): x0's revokes are refused, x0 is
//!    drained, the reply to its next renewal (a set without its shards) is held while x0 is
//!    undrained and pushed its set again, then delivered, and x0's renewals are refused until
//!    the lease it held before that grant has run out. x0 must have stopped admitting every
//!    shard it held from before that renewal and the grant does not list: its admission log may
//!    show none of them admitted past the end of that earlier lease;
//! 9. a push naming another executor, sent to x0: it must answer `409` (P4.1) and take nothing;
//! 10. SIGKILL of an executor, then a new process in its place;
//! 11. an executor paused (SIGSTOP) for twice the lease while the replies to its calls lag
//!     1.5 s, then resumed: its lease must be anchored where its requests left (P3.2), and it
//!     must fence itself when its copy lapses (P3.6);
//! 12. the leader SIGKILLed, then restarted.
//!
//! Every executor is stopped with SIGTERM at the end, the replies to its calls lagging as in
//! step 2; one that does not stop within 15 s fails the run. A step that judged a rule broken
//! shortens every later wait to 15 s, and a script that then stops early still reports what was
//! found, and the logs are checked.
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
use leasehold_api::problem::ErrorCode;
use leasehold_harness::{free_port, ClusterConfig, ManagerCluster, ManagerFlags};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::admission_log::{
    admission_intervals, read_admission_log, AdmissionInterval, ExecutorLog,
};
use crate::checker::{check_files, monotonic_now_ns, CheckReport, EventLogFile};
use crate::proxy::{HeldReply, HoldOutcome, Impairment, PathMatch, ProxySet, Refusal};
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
/// The same bound once a step has judged a rule broken: the run fails whatever comes next, and a
/// wait that runs out then (often because of what was found) need not take a minute to say so.
const SETTLE_BOUND_FAILED: Duration = Duration::from_secs(15);
/// Bound on an executor's graceful stop after SIGTERM before it is killed.
const STOP_BOUND: Duration = Duration::from_secs(15);

/// Delivery delays of step 2: past the managers' 2 s bound on a delivery.
const REORDER: Impairment = Impairment {
    delay_ms: (0, 3_000),
    duplicate_percent: 20,
};
/// The reply lag of the pause step.
const REPLY_LAG: Duration = Duration::from_millis(1_500);
/// The reply lag of a graceful stop: an executor that deregisters before it stops admitting
/// still admits this long after the managers gave its shards away.
const STOP_REPLY_LAG: Duration = Duration::from_millis(1_000);
/// Attempts of the stale-grant step at making a grant arrive stale before it gives up.
const STALE_GRANT_ATTEMPTS: u32 = 3;
/// Attempts of the revoke-replay step at delivering its copy while x0's lease is live.
const REVOKE_REPLAY_ATTEMPTS: u32 = 3;
/// How long before the end of the lease x0 earned before its renewals were refused the copy
/// must have been answered: the lease began when the renewal left, a little before the proxy saw
/// it arrive.
const REVOKE_REPLAY_MARGIN: Duration = Duration::from_millis(500);
/// How long the stale-grant step waits for the held renewal, and for the newer push.
const STALE_GRANT_WAIT: Duration = Duration::from_secs(6);
/// Past the end of the lease held before the stale grant, before the step reads the log.
const STALE_GRANT_MARGIN: Duration = Duration::from_millis(300);
/// The pushes the stale-grant step counts.
const STALE_GRANT_PUSH: &str = "PUT /v1/assignment";

/// How long a shard may be routed to an executor before its admission log must show it
/// admitted, in the steps that judge that (P4.1 disowned sets, P4.2): a correct executor admits
/// it at the push, or at its next renewal's reply when pushes do not reach it.
const ROUTED_BOUND: Duration = Duration::from_secs(6);
/// How late after the reply `404 unknown_executor` was written a stop line may be stamped
/// (P4.4: at once, which a loaded machine can stretch past half a second; a copy of the lease
/// left to run out ends about two seconds later, the renewal having left at a third of it).
const FORGET_SLACK: Duration = Duration::from_millis(1_000);
/// How long an executor told `unknown_executor` has to register again (P4.4: at once).
const REREGISTER_BOUND: Duration = Duration::from_secs(4);
/// How far above the cluster's revision the forged push of the disowned-set step is: far out of
/// reach of the run's own revisions, and below 2^53 for executors whose JSON numbers are doubles.
const FORGED_AHEAD: u64 = 1 << 40;
/// Renewals the claims step reads before it judges the claims wrong.
const CLAIMS_ATTEMPTS: u32 = 3;
/// The registration route.
const REGISTER_PATH: &str = "/v1/executors";

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
    /// Rules a step judged broken from what the executor admitted or answered (beside I1 and
    /// I2, which `check` holds).
    pub findings: Vec<String>,
    /// Each step and how long it took, for the operator.
    pub steps: Vec<(String, Duration)>,
    /// Why the script stopped before its end, after a step had judged a rule broken (`None`:
    /// it ran to the end). Such a run fails.
    pub unfinished: Option<RunError>,
}

/// One executor process the kit started.
struct ExecutorProcess {
    name: String,
    event_log: PathBuf,
    /// `host:port` its push listener binds (`{listen}`).
    listen: String,
    advertise: String,
    /// The `incarnation` and `credential` of its first registration, as its call proxy saw it.
    registered_as: Option<Registration>,
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

    /// SIGTERM to the group, the replies to its calls lagging [`STOP_REPLY_LAG`], and a bounded
    /// wait; killed past it (its stop is still judged by the logs) and the run fails.
    async fn stop(&mut self) -> Result<(), RunError> {
        self.call_proxy.lag_replies(STOP_REPLY_LAG);
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + STOP_BOUND;
        while Instant::now() < deadline {
            if !self.is_running() {
                self.child = None;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill();
        Err(RunError::Executor(format!(
            "{} did not stop within {STOP_BOUND:?} of SIGTERM (P3.7: a graceful stop is \
             bounded); killed",
            self.name
        )))
    }

    /// Its admission intervals so far, every one still open left open.
    fn intervals(&self) -> Result<Vec<AdmissionInterval>, String> {
        let records = read_admission_log(&self.event_log)?;
        admission_intervals(&[ExecutorLog {
            records,
            ended_at_ns: None,
        }])
    }

    /// How many shards its admission log shows it admitting now.
    fn admitting_count(&self) -> Result<usize, String> {
        Ok(self
            .intervals()?
            .iter()
            .filter(|interval| interval.end_ns.is_none())
            .count())
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
    findings: Vec<String>,
    /// Where `{local}` sockets go: a short path of its own, since the run's directory may be
    /// too deep for a socket's 108 bytes.
    sockets: tempfile::TempDir,
}

/// What one attempt of a step that needs a race won came to (the stale grant, the push
/// delivered again after a revoke).
enum StepAttempt {
    /// The race was won and the executor judged (by the step, or by the check of the logs).
    Judged,
    /// The kit could not set the race up this time, and why.
    Inconclusive(String),
}

/// A stale grant as x0 got it, for judging x0's admissions.
struct StaleGrant {
    grant: GrantSet,
    /// When the renewal it answers arrived.
    held_arrival_ns: u64,
    /// When it reached x0.
    delivered_at_ns: u64,
    /// When the lease x0 held before it ended at the latest.
    earlier_lease_end_ns: u64,
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
        findings: Vec::new(),
        sockets: tempfile::Builder::new()
            .prefix("lhk-")
            .tempdir()
            .map_err(kit_error)?,
    };
    let outcome = run.script().await;
    let stopped = run.stop_all().await;
    let unfinished = match outcome.and(stopped) {
        Ok(()) => None,
        // Nothing was judged yet: the failure is the verdict.
        Err(error) if run.findings.is_empty() => return Err(error),
        // A rule a step judged broken stands, and the logs are still checked: the failure may
        // follow from it (an executor a step found stranded takes no shards later).
        Err(error) => Some(error),
    };
    let report = run.check()?;
    run.cluster.kill_all();
    Ok(RunReport {
        check: report,
        findings: run.findings,
        steps: run.steps,
        unfinished,
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
        // P8.1: its first registration waits at the proxy while the kit asks its push listener.
        call_proxy.hold_next_request("POST", REGISTER_PATH, PathMatch::Exact);
        let event_log = self.config.dir.join(format!("{name}.events.jsonl"));
        let local = self.sockets.path().join(format!("{name}.sock"));
        // A unix socket's path fits in 108 bytes, its terminating zero included.
        if local.as_os_str().len() > 100 {
            return Err(RunError::Kit(format!(
                "the socket path {} for {{local}} is too long; give TMPDIR a shorter directory",
                local.display()
            )));
        }
        let command = self.config.template.render(&Slot {
            managers: call_proxy.urls(),
            listen: listen.clone(),
            advertise: advertise.clone(),
            name: name.clone(),
            event_log: event_log.display().to_string(),
            local: format!("unix:{}", local.display()),
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
            listen,
            advertise,
            registered_as: None,
            push_proxy,
            call_proxy,
            child: Some(child),
            ended_at_ns: None,
            held_shards: false,
        });
        self.slots.insert(slot, self.processes.len() - 1);
        self.registers_once_bound(slot).await
    }

    /// P8.1: the process's first registration is held at its call proxy, unforwarded, while the
    /// kit asks its push listener (`{listen}`) for `GET /v1/health`; any HTTP answer will do.
    /// An executor that makes itself known before its push endpoint answers is a finding. Then
    /// the registration goes on, and what it registered as is kept (for the `unknown_executor`
    /// step).
    async fn registers_once_bound(&mut self, slot: usize) -> Result<(), RunError> {
        let waited_by = Instant::now() + SETTLE_BOUND;
        let held = loop {
            let process = self.process(slot);
            if let Some(held) = process.call_proxy.held_request() {
                break held;
            }
            if !process.is_running() {
                return Err(RunError::Executor(format!(
                    "{} exited before it registered",
                    process.name
                )));
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "{} did not register within {SETTLE_BOUND:?} of its start",
                    process.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let listen = self.process(slot).listen.clone();
        let answered = health_answer(&listen).await;
        let process = self.process(slot);
        process.call_proxy.release_held_request();
        process.registered_as = Registration::parse(&held.body);
        let name = process.name.clone();
        if let Err(detail) = answered {
            self.findings.push(format!(
                "P8.1 bind before registering: {name} sent its registration while its push \
                 listener at {listen} did not answer GET /v1/health ({detail}); an executor \
                 registers only once its push endpoint answers"
            ));
        }
        Ok(())
    }

    fn process(&mut self, slot: usize) -> &mut ExecutorProcess {
        let index = self.slots[&slot];
        &mut self.processes[index]
    }

    /// Waits until every shard is routed to a running executor of `holders` (slots) and each
    /// of them holds at least one; marks who held shards.
    async fn settle(&mut self, holders: &[usize], what: &str) -> Result<(), RunError> {
        let bound = self.settle_bound();
        let Err(last) = self
            .settle_by(holders, what, Instant::now() + bound)
            .await?
        else {
            return Ok(());
        };
        Err(RunError::Executor(format!(
            "{what}: timed out after {bound:?} waiting for every shard to be routed to one \
             of {} and each of them to admit a shard by its admission log ({last}); see the \
             executors' logs in {}",
            self.names(holders).join(", "),
            self.config.dir.display()
        )))
    }

    /// [`Run::settle`] until `deadline`: `Ok(Err(last))` when it passed unsettled, with what
    /// was last seen.
    async fn settle_by(
        &mut self,
        holders: &[usize],
        what: &str,
        deadline: Instant,
    ) -> Result<Result<(), String>, RunError> {
        let started = Instant::now();
        let addresses: BTreeMap<String, usize> = holders
            .iter()
            .map(|&slot| (self.process(slot).advertise.clone(), self.slots[&slot]))
            .collect();
        let mut last = String::new();
        while Instant::now() < deadline {
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
                    let not_admitting = if owners.len() == holders.len() {
                        self.not_admitting(holders)?
                    } else {
                        Vec::new()
                    };
                    if owners.len() == holders.len() && not_admitting.is_empty() {
                        self.steps.push((what.to_owned(), started.elapsed()));
                        eprintln!(
                            "conformance: {what}: settled in {} ms",
                            started.elapsed().as_millis()
                        );
                        return Ok(Ok(()));
                    }
                    last = if not_admitting.is_empty() {
                        format!(
                            "{} of {} executors are routed shards",
                            owners.len(),
                            holders.len()
                        )
                    } else {
                        format!(
                            "every executor is routed shards, but the admission log of {} shows \
                             none admitted",
                            not_admitting.join(", ")
                        )
                    };
                }
                Err(detail) => last = detail,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Err(last))
    }

    /// [`SETTLE_BOUND`], or [`SETTLE_BOUND_FAILED`] once a step judged a rule broken.
    fn settle_bound(&self) -> Duration {
        if self.findings.is_empty() {
            SETTLE_BOUND
        } else {
            SETTLE_BOUND_FAILED
        }
    }

    fn names(&mut self, slots: &[usize]) -> Vec<String> {
        slots
            .iter()
            .map(|&slot| self.process(slot).name.clone())
            .collect()
    }

    /// The names of the processes of `slots` whose admission log shows no shard admitted now;
    /// a log not in the format of §9 fails the run.
    fn not_admitting(&mut self, slots: &[usize]) -> Result<Vec<String>, RunError> {
        let mut names = Vec::new();
        for &slot in slots {
            let process = self.process(slot);
            let admitting = process.admitting_count().map_err(|detail| {
                RunError::Executor(format!(
                    "an admission log is not in the format of §9: {detail}"
                ))
            })?;
            if admitting == 0 {
                names.push(process.name.clone());
            }
        }
        Ok(names)
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

    /// The executor id the managers know `slot`'s process by (its advertised address); a
    /// process reaped by a step registers anew at its next renewal, so this waits for that.
    async fn executor_id(&mut self, slot: usize) -> Result<String, RunError> {
        let advertise = self.process(slot).advertise.clone();
        let bound = self.settle_bound();
        let waited_by = Instant::now() + bound;
        loop {
            let views = self.admin.executors(false).await.map_err(kit_error)?;
            if let Some(view) = views.into_iter().find(|view| view.address == advertise) {
                return Ok(view.executor_id);
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "no executor registered as {advertise} within {bound:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
        // Settled only once the joiner's own log shows it admitting: the routing table names it
        // as soon as its push is sent, which the delays hold back up to 3 s.
        self.settle(&with_joiner, "a joiner takes shards").await?;
        // The takers hear at once, the joiner its replies late (see `stop`).
        for slot in 0..=EXECUTORS {
            self.process(slot).push_proxy.impair(None);
        }
        self.process(EXECUTORS).stop().await?;
        self.slots.remove(&EXECUTORS);
        self.settle(&all, "the joiner's graceful stop handed its shards on")
            .await?;

        Self::step("a push delivered again after a revoke");
        self.revoke_replay_step().await?;

        Self::step("renewals carry the claims");
        self.claims_step().await?;

        Self::step("a set told only by renewals' replies");
        self.renewal_set_step().await?;

        Self::step("renewals answered unknown_executor");
        self.unknown_executor_step().await?;
        self.settle(&all, "x0 registered again after unknown_executor")
            .await?;

        Self::step("a push at a revision above the cluster's");
        self.forged_revision_step().await?;
        self.settle(&all, "x2 undrained after the forged revision")
            .await?;

        Self::step("a grant made stale by a newer push");
        self.stale_grant_step().await?;
        self.settle(&all, "x0 renews again after the stale grant")
            .await?;

        Self::step("a push naming another executor");
        self.foreign_push_step().await?;
        self.settle(&all, "after the push naming another executor")
            .await?;

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

    /// The revoke-replay step (script step 3), tried until the copy reached x0 while the lease
    /// it held was certainly live.
    async fn revoke_replay_step(&mut self) -> Result<(), RunError> {
        let all: Vec<usize> = (0..EXECUTORS).collect();
        let mut why = String::new();
        for attempt in 1..=REVOKE_REPLAY_ATTEMPTS {
            let (x0, x1) = (self.executor_id(0).await?, self.executor_id(1).await?);
            let outcome = self.revoke_replay_attempt(&x0, &x1).await;
            let x0_process = self.process(0);
            x0_process.push_proxy.stop_capturing();
            x0_process.call_proxy.refuse_requests(
                "POST",
                &format!("/v1/executors/{x0}/renew"),
                PathMatch::Exact,
                false,
            );
            x0_process
                .push_proxy
                .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, false);
            let outcome = outcome?;
            // Long enough for a renewal to follow the stale push.
            tokio::time::sleep(KIT_LEASE / 2).await;
            // x0 may have been reaped while its renewals were refused; it then registers anew,
            // undrained.
            self.undrain_if_registered(&x0).await?;
            self.undrain_if_registered(&x1).await?;
            self.settle(&all, "both undrained").await?;
            match outcome {
                StepAttempt::Judged => return Ok(()),
                StepAttempt::Inconclusive(detail) => {
                    eprintln!("conformance: push delivered again, attempt {attempt}: {detail}");
                    why = detail;
                }
            }
        }
        Err(RunError::Executor(format!(
            "the kit could not deliver a push again to x0 while its lease was live in \
             {REVOKE_REPLAY_ATTEMPTS} attempts, so P4.1's rule that an applied revoke raises the \
             applied revision went unchecked: {why}"
        )))
    }

    /// One attempt: x0 gains some of x1's shards by a push, of which the proxy keeps a copy; x0
    /// is then drained and its shards go to x2; the copy is delivered again. It is stale (P4.1):
    /// applying it admits shards another executor holds, which the check finds (I1).
    ///
    /// x0's renewals are refused from the first push kept until after the copy is delivered
    /// again, so no grant's set is applied in between: only the revoke that drained it makes the
    /// copy stale (P4.1: an applied revoke raises the applied revision). The copy judges nothing
    /// unless it arrives while the lease x0 earned before the refusals is live (an executor
    /// without a lease admits nothing, stale copy or not) and after x0 answered its revoke.
    async fn revoke_replay_attempt(&mut self, x0: &str, x1: &str) -> Result<StepAttempt, RunError> {
        use StepAttempt::Inconclusive;
        let x0_renew = format!("/v1/executors/{x0}/renew");
        let renew_label = format!("POST {x0_renew}");
        let revoke_label = "POST /v1/revoke";
        // Refused before anything is pushed, so that a renewal in flight is answered before
        // the push whose copy is kept rather than after it.
        self.process(0)
            .call_proxy
            .refuse_requests("POST", &x0_renew, PathMatch::Exact, true);
        // The proxy records an arrival and decides on a refusal under one lock: the last
        // renewal that arrived before this was let through, and the lease it earned began no
        // later than its arrival.
        let Some(last_renewal_ns) = self
            .process(0)
            .call_proxy
            .stats()
            .last_arrival_ns
            .get(&renew_label)
            .copied()
        else {
            return Ok(Inconclusive("x0 had not renewed before the step".into()));
        };
        // Everything up to the copy's delivery must be done while that lease certainly holds.
        let lease_left = (nanos(KIT_LEASE) + last_renewal_ns)
            .saturating_sub(monotonic_now_ns() + nanos(REVOKE_REPLAY_MARGIN));
        let deadline = Instant::now() + Duration::from_nanos(lease_left);
        let out_of_lease = |what: &str| {
            Ok(Inconclusive(format!(
                "{what} before the lease x0 earned by its last renewal let through might have \
                 run out"
            )))
        };
        if let Some(what) = self.drain_x1_keeping_a_push(x1, deadline).await? {
            return out_of_lease(&what);
        }
        let revokes_before = self.answered(0, revoke_label);
        if let Some(what) = self.drain_x0_until_x2_admits(x0, deadline).await? {
            return out_of_lease(&what);
        }
        let revoked = self.answered(0, revoke_label) > revokes_before;
        let (copy_revision, last_grant_revision, replayed_ns) =
            self.deliver_the_kept_push_again(&renew_label).await?;
        let race = ReplayRace {
            last_renewal_ns,
            last_grant_revision,
            copy_revision,
            revoked,
            replayed_ns,
        };
        Ok(race.unjudged().map_or(StepAttempt::Judged, Inconclusive))
    }

    /// x1 drained while every push to x0 is kept, until x0 gains shards; then later pushes to
    /// x0 refused, so the copy kept is of the last push before the drain. What did not happen
    /// by `deadline`, if anything.
    async fn drain_x1_keeping_a_push(
        &mut self,
        x1: &str,
        deadline: Instant,
    ) -> Result<Option<String>, RunError> {
        self.process(0)
            .push_proxy
            .capture_each("PUT", "/v1/assignment");
        self.admin.drain(x1).await.map_err(kit_error)?;
        while !self.process(0).push_proxy.has_captured() {
            if Instant::now() >= deadline {
                return Ok(Some("x1 drained: no push reached x0".into()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let gained = self
            .settle_by(&[0, 2], "x1 drained: x0 gains shards", deadline)
            .await?;
        if let Err(last) = gained {
            return Ok(Some(format!("x1 drained: x0 gained no shards ({last})")));
        }
        // Later pushes to x0 are refused until the copy is delivered again: a set applied after
        // the drain would make the copy stale by itself, where only the revoke must (the copy's
        // delivery bypasses refusals).
        self.process(0).push_proxy.stop_capturing();
        self.process(0)
            .push_proxy
            .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, true);
        Ok(None)
    }

    /// x0 drained, until x2 admits every shard by its log, not only once the routing table
    /// names it (a copy applied before x2 admits x0's shards overlaps nothing). What did not
    /// happen by `deadline`, if anything.
    async fn drain_x0_until_x2_admits(
        &mut self,
        x0: &str,
        deadline: Instant,
    ) -> Result<Option<String>, RunError> {
        self.admin.drain(x0).await.map_err(kit_error)?;
        loop {
            let x2_admits = self.process(2).admitting_count().map_err(|detail| {
                RunError::Executor(format!(
                    "an admission log is not in the format of §9: {detail}"
                ))
            })?;
            if x2_admits == KIT_SHARDS as usize {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Ok(Some(format!(
                    "x0 drained too: x2 admitted {x2_admits} of {KIT_SHARDS} shards"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Delivers the kept push to x0 again: its revision, the revision of the last grant x0 was
    /// answered (`renew_label`), and when the copy was answered (applied or refused).
    async fn deliver_the_kept_push_again(
        &mut self,
        renew_label: &str,
    ) -> Result<(u64, Option<u64>, u64), RunError> {
        let copy_revision = self
            .process(0)
            .push_proxy
            .captured_body()
            .as_deref()
            .and_then(body_revision)
            .ok_or_else(|| RunError::Kit("the kept push to x0 has no revision".into()))?;
        let last_grant_revision = self
            .process(0)
            .call_proxy
            .stats()
            .last_reply_body
            .get(renew_label)
            .and_then(|body| body_revision(body));
        let replayed = self
            .process(0)
            .push_proxy
            .replay_captured()
            .await
            .map_err(|detail| RunError::Kit(format!("delivering a push again: {detail}")))?;
        let replayed_ns = monotonic_now_ns();
        if !replayed {
            return Err(RunError::Kit("the kept push to x0 was lost".into()));
        }
        Ok((copy_revision, last_grant_revision, replayed_ns))
    }

    /// Stops every running process; the first that did not stop in time is the error.
    async fn stop_all(&mut self) -> Result<(), RunError> {
        let mut outcome = Ok(());
        for process in &mut self.processes {
            if process.child.is_some() {
                let stopped = process.stop().await;
                if outcome.is_ok() {
                    outcome = stopped;
                }
            }
        }
        outcome
    }

    /// The stale-grant step (script step 8), tried until a grant did arrive stale.
    async fn stale_grant_step(&mut self) -> Result<(), RunError> {
        let mut why = String::new();
        for attempt in 1..=STALE_GRANT_ATTEMPTS {
            // The id the attempt refused renewals under: x0 may be reaped during it (a refused
            // renewal past its lease) and register anew under another.
            let id = self.executor_id(0).await?;
            let outcome = self.stale_grant_attempt(&id).await;
            let x0 = self.process(0);
            x0.push_proxy
                .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, false);
            x0.call_proxy.refuse_requests(
                "POST",
                &format!("/v1/executors/{id}/renew"),
                PathMatch::Exact,
                false,
            );
            x0.call_proxy.release_held_reply();
            match outcome? {
                StepAttempt::Judged => return Ok(()),
                StepAttempt::Inconclusive(detail) => {
                    eprintln!("conformance: stale grant, attempt {attempt}: {detail}");
                    why = detail;
                    // Whatever the attempt left drained or refused settles before the next.
                    self.undrain_if_registered(&id).await?;
                    self.settle(&[0, 1, 2], "x0 back before another attempt")
                        .await?;
                }
            }
        }
        Err(RunError::Executor(format!(
            "the kit could not make a grant arrive stale at x0 in {STALE_GRANT_ATTEMPTS} \
             attempts, so P4.1's stale-grant rule went unchecked: {why}"
        )))
    }

    /// One attempt: x0's revokes refused, x0 drained, the reply to its next renewal held while
    /// it is undrained and pushed its set again, then delivered (stale), x0's renewals refused
    /// until the lease it held before that grant ran out; then its admission log is judged.
    async fn stale_grant_attempt(&mut self, id: &str) -> Result<StepAttempt, RunError> {
        use StepAttempt::Inconclusive;
        let renew_path = format!("/v1/executors/{id}/renew");
        let held = self.hold_renewal_after_drain(id, &renew_path).await?;
        let Some(grant) = held.reply_body.as_deref().and_then(GrantSet::parse) else {
            return Ok(Inconclusive(format!(
                "the held reply to x0's renewal is not a grant ({:?})",
                held.outcome
            )));
        };
        let pushes_before = self.answered(0, STALE_GRANT_PUSH);
        self.undrain_if_registered(id).await?;
        if let Some(why) = self.newer_push_missing(&grant, pushes_before).await {
            return Ok(Inconclusive(why));
        }
        // x0 keeps the lease the stale grant gives it: no renewal gets through until the lease
        // it held before has run out.
        self.process(0)
            .call_proxy
            .refuse_requests("POST", &renew_path, PathMatch::Exact, true);
        self.process(0).call_proxy.release_held_reply();
        let delivered_at_ns = match self.held_reply_delivered().await {
            Ok(at_ns) => at_ns,
            Err(why) => return Ok(Inconclusive(why)),
        };
        let Some(previous_ns) = held.previous_arrival_ns else {
            return Ok(Inconclusive(
                "x0 had not renewed before the held renewal".into(),
            ));
        };
        // The lease x0 held before the stale grant was earned by a request that left no later
        // than the previous renewal arrived, and told at most the managers' lease.
        let earlier_lease_end_ns = previous_ns + nanos(KIT_LEASE);
        let judge_at_ns = earlier_lease_end_ns + nanos(STALE_GRANT_MARGIN);
        let now_ns = monotonic_now_ns();
        if judge_at_ns > now_ns {
            tokio::time::sleep(Duration::from_nanos(judge_at_ns - now_ns)).await;
        }
        let stale = StaleGrant {
            grant,
            held_arrival_ns: held.request_arrival_ns,
            delivered_at_ns,
            earlier_lease_end_ns,
        };
        self.judge_stale_grant(id, &stale)
    }

    /// x0's revokes refused and x0 drained, then the reply to its next renewal held: that reply,
    /// once upstream answered it (or the caller left).
    async fn hold_renewal_after_drain(
        &mut self,
        id: &str,
        renew_path: &str,
    ) -> Result<HeldReply, RunError> {
        self.process(0)
            .push_proxy
            .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, true);
        self.admin.drain(id).await.map_err(kit_error)?;
        // Armed after the drain committed: the renewal it holds is answered at a revision
        // whose set for x0 lists none of the shards x0 still admits.
        self.process(0)
            .call_proxy
            .hold_next_reply("POST", renew_path, PathMatch::Exact);
        let waited_by = Instant::now() + STALE_GRANT_WAIT;
        loop {
            let held = self.process(0).call_proxy.held_reply();
            if let Some(held) = held.filter(|h| h.reply_body.is_some() || h.outcome.is_some()) {
                return Ok(held);
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "timed out after {STALE_GRANT_WAIT:?} waiting for x0 to renew its lease \
                     (P3.5: a renewal once a third of the lease has passed)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until x0 was pushed a set newer than `grant` (more pushes answered than
    /// `pushes_before`); why the attempt cannot go on, if it cannot.
    async fn newer_push_missing(
        &mut self,
        grant: &GrantSet,
        pushes_before: usize,
    ) -> Option<String> {
        let waited_by = Instant::now() + STALE_GRANT_WAIT;
        loop {
            let held = self.process(0).call_proxy.held_reply().unwrap_or_default();
            if let Some(HoldOutcome::CallerLeft { at_ns }) = held.outcome {
                return Some(format!(
                    "x0 closed its renewal {} ms after sending it, before the newer push \
                     reached it: the step needs an executor that waits at least 2 s for a reply",
                    at_ns.saturating_sub(held.request_arrival_ns) / 1_000_000
                ));
            }
            let stats = self.process(0).push_proxy.stats();
            let newer_push = stats.answered.get(STALE_GRANT_PUSH).copied().unwrap_or(0)
                > pushes_before
                && stats
                    .last_answered_body
                    .get(STALE_GRANT_PUSH)
                    .and_then(|body| GrantSet::parse(body))
                    .is_some_and(|push| push.revision > grant.revision);
            if newer_push {
                return None;
            }
            if Instant::now() >= waited_by {
                return Some(format!(
                    "no push above revision {} reached x0 within {STALE_GRANT_WAIT:?} of its \
                     undrain",
                    grant.revision
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// When the released reply reached x0, or why it did not.
    async fn held_reply_delivered(&mut self) -> Result<u64, String> {
        let waited_by = Instant::now() + Duration::from_secs(2);
        loop {
            let held = self.process(0).call_proxy.held_reply().unwrap_or_default();
            match held.outcome {
                Some(HoldOutcome::Delivered { at_ns }) => return Ok(at_ns),
                Some(other) => return Err(format!("the stale grant did not reach x0: {other:?}")),
                None if Instant::now() >= waited_by => {
                    return Err("the held reply was not released".into())
                }
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// x0's admission log against the stale grant: a finding for each shard it admitted from
    /// before the held renewal left until the grant arrived, at an epoch the grant does not
    /// list (gained by a delivery at or below its revision), and kept past the end of the lease
    /// it held before that grant.
    fn judge_stale_grant(&mut self, id: &str, stale: &StaleGrant) -> Result<StepAttempt, RunError> {
        let intervals = self.process(0).intervals().map_err(|detail| {
            RunError::Executor(format!(
                "an admission log is not in the format of §9: {detail}"
            ))
        })?;
        let to_drop: Vec<&AdmissionInterval> = intervals
            .iter()
            .filter(|interval| {
                interval.executor_id == id
                    && interval.start_ns <= stale.held_arrival_ns
                    && interval
                        .end_ns
                        .is_none_or(|end| end > stale.delivered_at_ns)
                    && !stale
                        .grant
                        .shards
                        .contains(&(interval.shard, interval.epoch))
            })
            .collect();
        if to_drop.is_empty() {
            return Ok(StepAttempt::Inconclusive(
                "x0 admitted no shard the stale grant left out when it arrived".into(),
            ));
        }
        let name = self.process(0).name.clone();
        let lease_end_ns = stale.earlier_lease_end_ns;
        for interval in to_drop {
            if interval.end_ns.is_none_or(|end| end > lease_end_ns) {
                let end = interval.end_ns.map_or_else(
                    || {
                        format!(
                            "was still admitting it {} ms after",
                            (monotonic_now_ns() - lease_end_ns) / 1_000_000
                        )
                    },
                    |end| format!("stopped it {} ms after", (end - lease_end_ns) / 1_000_000),
                );
                self.findings.push(format!(
                    "P4.1 stale grant: {name} ({id}) admitted shard {} (epoch {}) since before a \
                     renewal whose grant, at revision {}, did not list it and arrived after a \
                     push of a newer revision; it {end} the end of the lease it held before that \
                     grant (an executor must drop such shards before the stale grant moves its \
                     lease)",
                    interval.shard, interval.epoch, stale.grant.revision
                ));
            }
        }
        Ok(StepAttempt::Judged)
    }

    /// Undrains `id` unless the managers no longer know it (reaped: its process registers
    /// again, undrained).
    async fn undrain_if_registered(&self, id: &str) -> Result<(), RunError> {
        match self.admin.undrain(id).await {
            Ok(_) => Ok(()),
            Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => {
                eprintln!("conformance: {id} was reaped before its undrain");
                Ok(())
            }
            Err(error) => Err(kit_error(error)),
        }
    }

    /// Requests of `label` the push proxy of `slot` delivered and had answered.
    fn answered(&mut self, slot: usize, label: &str) -> usize {
        self.process(slot)
            .push_proxy
            .stats()
            .answered
            .get(label)
            .copied()
            .unwrap_or(0)
    }

    /// Script step 9: a push naming x1, sent to x0 at the current revision with x1's set, must
    /// be refused `409` (P4.1); one taken shows as I1 against x1 too.
    async fn foreign_push_step(&mut self) -> Result<(), RunError> {
        let other = self.executor_id(1).await?;
        let table = self.admin.routing(false).await.map_err(kit_error)?;
        let shards: Vec<serde_json::Value> = table
            .routes
            .iter()
            .filter(|route| route.executor_id.as_deref() == Some(other.as_str()))
            .map(|route| serde_json::json!({"shard": route.shard, "epoch": route.epoch}))
            .collect();
        let body = serde_json::json!({
            "executor_id": other,
            "revision": table.revision,
            "shard_count": table.shard_count,
            "shards": shards,
        });
        let url = format!("{}/v1/assignment", self.process(0).advertise);
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(kit_error)?;
        let name = self.process(0).name.clone();
        let status = match http.put(&url).json(&body).send().await {
            Ok(reply) => reply.status().as_u16().to_string(),
            Err(error) => format!("no answer ({error})"),
        };
        if status != "409" {
            self.findings.push(format!(
                "P4.1 push for another executor: {name} answered {status} to a push naming \
                 {other}, not 409 conflict"
            ));
        }
        // Long enough for a renewal to follow it.
        tokio::time::sleep(KIT_LEASE / 2).await;
        Ok(())
    }

    /// Waits until every shard is routed to one of `holders` (slots), then until `slot`'s
    /// admission log shows every shard routed to it admitted at its epoch. `Ok(Some(detail))`
    /// names the shards it still did not admit [`ROUTED_BOUND`] after they were first seen
    /// routed to it; a routing that never settles fails the run as [`Run::settle`] does.
    async fn admits_what_is_routed(
        &mut self,
        holders: &[usize],
        slot: usize,
        what: &str,
    ) -> Result<Option<String>, RunError> {
        let started = Instant::now();
        let addresses: BTreeMap<String, usize> = holders
            .iter()
            .map(|&holder| (self.process(holder).advertise.clone(), self.slots[&holder]))
            .collect();
        let own = self.process(slot).advertise.clone();
        let mut first_seen: BTreeMap<(u32, u64), Instant> = BTreeMap::new();
        let mut last = String::new();
        let bound = self.settle_bound();
        while started.elapsed() < bound {
            if !self.process(slot).is_running() {
                let name = self.process(slot).name.clone();
                return Err(RunError::Executor(format!(
                    "{name} exited on its own ({what})"
                )));
            }
            let table = self.admin.routing(false).await.map_err(kit_error)?;
            let routed: BTreeSet<(u32, u64)> = table
                .routes
                .iter()
                .filter(|route| route.address.as_deref() == Some(own.as_str()))
                .map(|route| (route.shard, route.epoch))
                .collect();
            for key in &routed {
                first_seen.entry(*key).or_insert_with(Instant::now);
            }
            let admitted: BTreeSet<(u32, u64)> = self
                .process(slot)
                .intervals()
                .map_err(|detail| {
                    RunError::Executor(format!(
                        "an admission log is not in the format of §9: {detail}"
                    ))
                })?
                .iter()
                .filter(|interval| interval.end_ns.is_none())
                .map(|interval| (interval.shard, interval.epoch))
                .collect();
            let missing: BTreeSet<(u32, u64)> = routed.difference(&admitted).copied().collect();
            let overdue: BTreeSet<(u32, u64)> = missing
                .iter()
                .filter(|key| first_seen[*key].elapsed() >= ROUTED_BOUND)
                .copied()
                .collect();
            if !overdue.is_empty() {
                let name = self.process(slot).name.clone();
                return Ok(Some(format!(
                    "{name} was routed {} for {ROUTED_BOUND:?} and more, and its admission log \
                     shows none of them admitted at that epoch (routed to it: {}; admitted: {})",
                    show_set(&overdue),
                    show_set(&routed),
                    show_set(&admitted)
                )));
            }
            match self.routed_to(&addresses).await {
                Ok(owners) if missing.is_empty() => {
                    for index in &owners {
                        self.processes[*index].held_shards = true;
                    }
                    self.steps.push((what.to_owned(), started.elapsed()));
                    return Ok(None);
                }
                Ok(_) => last = format!("{} routed shards not admitted yet", missing.len()),
                Err(detail) => last = detail,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(RunError::Executor(format!(
            "{what}: timed out after {bound:?} waiting for every shard to be routed to one \
             of {} ({last})",
            self.names(holders).join(", ")
        )))
    }

    /// A process killed and a new one started in `slot`, after a finding that leaves the old one
    /// unable to take shards again (the run goes on judging the rest).
    async fn replace(&mut self, slot: usize) -> Result<(), RunError> {
        let name = self.process(slot).name.clone();
        eprintln!("conformance: {name} is replaced so that the run goes on");
        self.process(slot).kill();
        self.start(slot).await
    }

    /// The managers' set for executor `id`, `(shard, epoch)`, read from the leader.
    async fn managers_set(&self, id: &str) -> Result<BTreeSet<(u32, u64)>, RunError> {
        let view = self.admin.executor(id, true).await.map_err(kit_error)?;
        Ok(view
            .shards
            .iter()
            .map(|held| (held.shard, held.epoch))
            .collect())
    }

    /// P4.2, claims: x0's renewals must carry every `(shard, epoch)` it holds. The kit reads
    /// x0's next renewal at its call proxy while the managers' set for x0 stays the same (read
    /// before the renewal and after it) and compares; up to
    /// [`CLAIMS_ATTEMPTS`] renewals, since a push may still be landing when one leaves.
    async fn claims_step(&mut self) -> Result<(), RunError> {
        let id = self.executor_id(0).await?;
        let renew_path = format!("/v1/executors/{id}/renew");
        let mut judged = Vec::new();
        for _ in 0..CLAIMS_ATTEMPTS * 2 {
            let before = self.managers_set(&id).await?;
            self.process(0).call_proxy.capture_next("POST", &renew_path);
            let waited_by = Instant::now() + KIT_LEASE * 2;
            let body = loop {
                if let Some(body) = self.process(0).call_proxy.captured_body() {
                    break body;
                }
                if Instant::now() >= waited_by {
                    return Err(RunError::Executor(format!(
                        "x0 sent no renewal within {:?} (P3.5: a renewal once a third of the \
                         lease has passed)",
                        KIT_LEASE * 2
                    )));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            let expected = self.managers_set(&id).await?;
            if expected != before {
                continue;
            }
            let claims = Claims::parse(&body);
            if claims.as_ref().is_some_and(|c| c.shards == expected) {
                self.process(0).call_proxy.stop_capturing();
                return Ok(());
            }
            judged.push(match claims {
                Some(claims) => format!(
                    "claimed {} at revision {}",
                    show_set(&claims.shards),
                    claims.revision
                ),
                None => format!(
                    "sent a body without claims and a revision: {}",
                    String::from_utf8_lossy(&body)
                ),
            });
            judged.push(format!("the managers' set {}", show_set(&expected)));
            if judged.len() >= 2 * CLAIMS_ATTEMPTS as usize {
                break;
            }
        }
        self.process(0).call_proxy.stop_capturing();
        if judged.is_empty() {
            return Err(RunError::Kit(format!(
                "the claims step found no renewal of x0 sent while the managers' set for it stood \
                 still, in {} renewals",
                CLAIMS_ATTEMPTS * 2
            )));
        }
        let name = self.process(0).name.clone();
        let pairs: Vec<String> = judged
            .chunks(2)
            .map(|pair| format!("{} against {}", pair[0], pair[1]))
            .collect();
        self.findings.push(format!(
            "P4.2 claims: {name} ({id}) renewed with claims other than the set it holds, in \
             each of {} renewals sent while the managers' set for it stood still: {}",
            pairs.len(),
            pairs.join("; ")
        ));
        Ok(())
    }

    /// P4.2, a set told by a renewal's reply: x0's pushes and revokes are refused, so it hears
    /// of its set only from its renewals' replies; x1 is drained. x0 must admit the shards it
    /// is routed (adopting the reply's set); then x1 is undrained, and an x0 that keeps shards
    /// its replies left out overlaps x1 (I1).
    async fn renewal_set_step(&mut self) -> Result<(), RunError> {
        let x1 = self.executor_id(1).await?;
        let x0 = self.process(0);
        x0.push_proxy
            .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, true);
        x0.push_proxy
            .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, true);
        self.admin.drain(&x1).await.map_err(kit_error)?;
        let missed = self
            .admits_what_is_routed(&[0, 2], 0, "x1 drained: x0 hears only its renewals")
            .await?;
        if let Some(detail) = missed {
            self.findings.push(format!(
                "P4.2 a set told by a renewal's reply: with its pushes refused, {detail}; an \
                 executor adopts the set of its renewal's reply"
            ));
        }
        self.admin.undrain(&x1).await.map_err(kit_error)?;
        self.settle(&[0, 1, 2], "x1 undrained: x0 hears only its renewals")
            .await?;
        let x0 = self.process(0);
        x0.push_proxy
            .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, false);
        x0.push_proxy
            .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, false);
        Ok(())
    }

    /// P4.4: x0's renewals are answered `404 unknown_executor` by its call proxy, as managers
    /// that forgot it would answer. x0 must stop admitting every shard at once (its stop lines
    /// stamped no later than [`FORGET_SLACK`] after the reply was written) and register again,
    /// under a new incarnation and a new credential, within [`REREGISTER_BOUND`]. The managers
    /// still know the old executor: the kit deregisters it once its lease ran out.
    async fn unknown_executor_step(&mut self) -> Result<(), RunError> {
        let id = self.executor_id(0).await?;
        let told_at_ns = self.tell_unknown_executor(&id).await?;
        let waited_by = Instant::now() + REREGISTER_BOUND;
        let registered = loop {
            if let Some(body) = self.process(0).call_proxy.captured_body() {
                break Registration::parse(&body);
            }
            if Instant::now() >= waited_by {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Every stop it will stamp for the old executor's shards is written by now.
        let judge_at_ns = told_at_ns + nanos(FORGET_SLACK) + nanos(Duration::from_millis(100));
        let now_ns = monotonic_now_ns();
        if judge_at_ns > now_ns {
            tokio::time::sleep(Duration::from_nanos(judge_at_ns - now_ns)).await;
        }
        self.judge_stops_once_forgotten(&id, told_at_ns)?;
        if self.judge_registration_again(&id, registered.as_ref()) {
            self.replace(0).await?;
        }
        // The managers still hold the old executor until its lease runs out; then it goes.
        let waited_by = Instant::now() + SETTLE_BOUND;
        loop {
            match self.admin.deregister(&id, None).await {
                Ok(()) => return Ok(()),
                Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => return Ok(()),
                Err(error) if Instant::now() >= waited_by => {
                    return Err(RunError::Kit(format!(
                        "the old executor {id} was not removed within {SETTLE_BOUND:?}: {error}"
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// Arms x0's call proxy to answer its renewals `404 unknown_executor` (and to capture its
    /// next registration): when the first such answer was written.
    async fn tell_unknown_executor(&mut self, id: &str) -> Result<u64, RunError> {
        let renew_path = format!("/v1/executors/{id}/renew");
        let label = format!("POST {renew_path}");
        let x0 = self.process(0);
        // Earlier steps refused the same path as unavailable: only what this step tells counts.
        let earlier_refusals = x0.call_proxy.stats().refusals.len();
        x0.call_proxy.capture_next("POST", REGISTER_PATH);
        x0.call_proxy.answer_requests(
            "POST",
            &renew_path,
            PathMatch::Exact,
            ErrorCode::UnknownExecutor,
        );
        let waited_by = Instant::now() + KIT_LEASE * 2;
        loop {
            let told = self
                .process(0)
                .call_proxy
                .stats()
                .refusals
                .iter()
                .skip(earlier_refusals)
                .find_map(|refusal| told_at_ns(refusal, &label, ErrorCode::UnknownExecutor));
            if let Some(at_ns) = told {
                return Ok(at_ns);
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "x0 sent no renewal within {:?} (P3.5)",
                    KIT_LEASE * 2
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A finding for every shard x0 admitted as `id` when it was told `unknown_executor` (at
    /// `told_at_ns`) and did not stop within [`FORGET_SLACK`].
    fn judge_stops_once_forgotten(&mut self, id: &str, told_at_ns: u64) -> Result<(), RunError> {
        let intervals = self.process(0).intervals().map_err(|detail| {
            RunError::Executor(format!(
                "an admission log is not in the format of §9: {detail}"
            ))
        })?;
        let late: Vec<String> = intervals
            .iter()
            .filter(|interval| {
                interval.executor_id == id
                    && interval.start_ns <= told_at_ns
                    && interval
                        .end_ns
                        .is_none_or(|end| end > told_at_ns + nanos(FORGET_SLACK))
            })
            .map(|interval| match interval.end_ns {
                Some(end) => format!(
                    "{}@{} stopped {} ms after",
                    interval.shard,
                    interval.epoch,
                    (end - told_at_ns) / 1_000_000
                ),
                None => format!("{}@{} still admitted", interval.shard, interval.epoch),
            })
            .collect();
        if !late.is_empty() {
            let name = self.process(0).name.clone();
            self.findings.push(format!(
                "P4.4 unknown_executor: {name} ({id}) was answered 404 unknown_executor to a \
                 renewal and did not stop admitting at once: {} (an executor the managers no \
                 longer know stops every shard at once)",
                late.join(", ")
            ));
        }
        Ok(())
    }

    /// Findings for x0's registration after it was forgotten (`registered`, if it came): none,
    /// under its old incarnation, or with its old credential. Whether x0 is stranded (it will
    /// not be known again by itself, so the kit replaces it).
    fn judge_registration_again(&mut self, id: &str, registered: Option<&Registration>) -> bool {
        let name = self.process(0).name.clone();
        let before = self.process(0).registered_as.clone();
        match (registered, &before) {
            (None, _) => {
                self.findings.push(format!(
                    "P4.4 unknown_executor: {name} ({id}) was answered 404 unknown_executor to a \
                     renewal and did not register again within {REREGISTER_BOUND:?}"
                ));
                true
            }
            (Some(now), Some(before)) if now.incarnation == before.incarnation => {
                self.findings.push(format!(
                    "P4.4 unknown_executor: {name} registered again under its old incarnation \
                     {} (a new incarnation is due, or the managers answer with the executor \
                     they forgot)",
                    now.incarnation
                ));
                true
            }
            (Some(now), Some(before))
                if now.credential.is_some() && now.credential == before.credential =>
            {
                self.findings.push(format!(
                    "P4.4 unknown_executor: {name} registered again with its old credential (a \
                     new credential is due with the new incarnation, P13.4)"
                ));
                false
            }
            _ => false,
        }
    }

    /// P4.1, disowned sets: x1 is pushed its own set at a revision [`FORGED_AHEAD`] above the
    /// cluster's, which a correct executor applies (a push at or above its applied revision);
    /// every grant after it is below it, and disowns it: the executor adopts the grant's set
    /// and revision. Two renewals later x2 is drained: x1 must admit the shards it is routed.
    /// One that took the grants as stale refuses every push and grant from then on.
    async fn forged_revision_step(&mut self) -> Result<(), RunError> {
        let id = self.executor_id(1).await?;
        let view = self.admin.executor(&id, true).await.map_err(kit_error)?;
        let table = self.admin.routing(true).await.map_err(kit_error)?;
        let forged = table.revision + FORGED_AHEAD;
        let shards: Vec<serde_json::Value> = view
            .shards
            .iter()
            .map(|held| serde_json::json!({"shard": held.shard, "epoch": held.epoch}))
            .collect();
        let body = serde_json::json!({
            "executor_id": id,
            "revision": forged,
            "shard_count": table.shard_count,
            "shards": shards,
        });
        let renew_label = format!("POST /v1/executors/{id}/renew");
        let renewed = |run: &mut Self| {
            run.process(1)
                .call_proxy
                .stats()
                .answered
                .get(&renew_label)
                .copied()
                .unwrap_or(0)
        };
        let url = format!("{}/v1/assignment", self.process(1).advertise);
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(kit_error)?;
        let status = http
            .put(&url)
            .json(&body)
            .send()
            .await
            .map(|reply| reply.status())
            .map_err(|error| {
                RunError::Executor(format!("x1 did not answer a push of its own set: {error}"))
            })?;
        if !status.is_success() {
            return Err(RunError::Executor(format!(
                "x1 answered {status} to a push of its own set at revision {forged}, above its \
                 applied revision (P4.1: a set at or above it applies)"
            )));
        }
        // The second renewal answered after the push left after it was applied.
        let renewals = renewed(self) + 2;
        let waited_by = Instant::now() + KIT_LEASE * 3;
        while renewed(self) < renewals {
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "x1 had fewer than two renewals answered in {:?} (P3.5)",
                    KIT_LEASE * 3
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let x2 = self.executor_id(2).await?;
        self.admin.drain(&x2).await.map_err(kit_error)?;
        let missed = self
            .admits_what_is_routed(&[0, 1], 1, "x2 drained after a forged revision at x1")
            .await?;
        if let Some(detail) = missed {
            let name = self.process(1).name.clone();
            self.findings.push(format!(
                "P4.1 disowned sets: after a push of its own set at revision {forged}, above the \
                 cluster's {}, and two renewals whose grants disowned it, {detail}; {name} took \
                 the grants as stale where it adopts their set and revision",
                table.revision
            ));
            self.replace(1).await?;
        }
        self.undrain_if_registered(&x2).await?;
        Ok(())
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

/// Whether anything answers HTTP at `listen` (`host:port`): any status will do.
/// What the revoke-replay step saw of x0 around the copy it delivered again.
#[derive(Debug, Clone, Copy)]
struct ReplayRace {
    /// When the last renewal let through before the refusals arrived (CLOCK_MONOTONIC ns).
    last_renewal_ns: u64,
    /// The revision of the last grant a renewal of x0 was answered with, if any.
    last_grant_revision: Option<u64>,
    /// The revision of the push kept and delivered again.
    copy_revision: u64,
    /// Whether x0 answered the revoke of its drain.
    revoked: bool,
    /// When the copy was answered.
    replayed_ns: u64,
}

impl ReplayRace {
    /// Why the copy judges nothing (`None`: it judges). Only the revoke may make it stale:
    /// x0 answered that revoke, and no grant at a newer revision than the copy's reached x0
    /// (its set raises the applied revision by itself). And the lease x0 earned by its last
    /// renewal was still live, by [`REVOKE_REPLAY_MARGIN`], when the copy was answered: an
    /// executor without a lease admits nothing, stale copy or not.
    fn unjudged(&self) -> Option<String> {
        if !self.revoked {
            return Some(
                "x0 answered no revoke for its drain before the copy (its lease ran out at the \
                 managers first)"
                    .into(),
            );
        }
        if let Some(grant) = self.last_grant_revision.filter(|&r| r > self.copy_revision) {
            return Some(format!(
                "x0's last renewal was answered at revision {grant}, above the copy's {}",
                self.copy_revision
            ));
        }
        let lease_live_until_ns = self.last_renewal_ns + nanos(KIT_LEASE);
        if self.replayed_ns + nanos(REVOKE_REPLAY_MARGIN) > lease_live_until_ns {
            return Some(format!(
                "the copy was answered {} ms after x0's last renewal let through, too late \
                 for the lease it earned ({} ms) to be certainly live",
                self.replayed_ns.saturating_sub(self.last_renewal_ns) / 1_000_000,
                KIT_LEASE.as_millis()
            ));
        }
        None
    }
}

/// The `revision` of a push's or a grant's body.
fn body_revision(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("revision")?
        .as_u64()
}

async fn health_answer(listen: &str) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|error| error.to_string())?;
    http.get(format!("http://{listen}/v1/health"))
        .send()
        .await
        .map(|_| ())
        .map_err(|error| {
            if error.is_connect() {
                "nothing accepts connections there".to_string()
            } else if error.is_timeout() {
                "no answer within 2 s".to_string()
            } else {
                error.to_string()
            }
        })
}

/// What an executor registered as: its incarnation and credential (P4.4: both new after
/// `unknown_executor`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registration {
    incarnation: String,
    credential: Option<String>,
}

impl Registration {
    fn parse(body: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        Some(Self {
            incarnation: value.get("incarnation")?.as_str()?.to_owned(),
            credential: value
                .get("credential")
                .and_then(|c| c.as_str())
                .map(str::to_owned),
        })
    }
}

/// The claims and revision of a renewal body (`claims`, or `claim_runs`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claims {
    revision: u64,
    shards: BTreeSet<(u32, u64)>,
}

impl Claims {
    fn parse(body: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let revision = value.get("revision")?.as_u64()?;
        let shards = listed_set(&value, "claims", "claim_runs")?;
        Some(Self { revision, shards })
    }
}

/// The `(shard, epoch)` set a body lists under `list_key` (required, `[{shard, epoch}]`) and
/// `runs_key` (optional, `[[first, count, epoch]]`): the two forms of the wire's sets.
fn listed_set(
    value: &serde_json::Value,
    list_key: &str,
    runs_key: &str,
) -> Option<BTreeSet<(u32, u64)>> {
    let mut shards = BTreeSet::new();
    for entry in value.get(list_key)?.as_array()? {
        let shard = u32::try_from(entry.get("shard")?.as_u64()?).ok()?;
        shards.insert((shard, entry.get("epoch")?.as_u64()?));
    }
    for run in value
        .get(runs_key)
        .and_then(|runs| runs.as_array())
        .into_iter()
        .flatten()
    {
        let run = run.as_array()?;
        let first = u32::try_from(run.first()?.as_u64()?).ok()?;
        let count = u32::try_from(run.get(1)?.as_u64()?).ok()?;
        let epoch = run.get(2)?.as_u64()?;
        for shard in first..first.checked_add(count)? {
            shards.insert((shard, epoch));
        }
    }
    Some(shards)
}

/// `(shard, epoch)` pairs as `3@7, 4@7`, or `none`.
fn show_set(set: &BTreeSet<(u32, u64)>) -> String {
    if set.is_empty() {
        return "none".into();
    }
    set.iter()
        .map(|(shard, epoch)| format!("{shard}@{epoch}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// When the proxy told `label` the problem `code` (`None` for any other refusal: steps refuse
/// one path with different codes).
fn told_at_ns(refusal: &Refusal, label: &str, code: ErrorCode) -> Option<u64> {
    (refusal.label == label && refusal.code == code).then_some(refusal.at_ns)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The revision and set of a grant or a push body (`shards`, or `shard_runs`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct GrantSet {
    revision: u64,
    shards: BTreeSet<(u32, u64)>,
}

impl GrantSet {
    fn parse(body: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        // `unchanged`: the set is the renewal's claims, which the kit did not read.
        if value.get("unchanged") == Some(&serde_json::Value::Bool(true)) {
            return None;
        }
        let revision = value.get("revision")?.as_u64()?;
        let shards = listed_set(&value, "shards", "shard_runs")?;
        Some(Self { revision, shards })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p4_4_the_unknown_executor_step_judges_from_its_own_answer_not_an_earlier_refusal() {
        let label = "POST /v1/executors/ex-4/renew";
        let refusal = |label: &str, code, at_ns| Refusal {
            label: label.to_owned(),
            code,
            at_ns,
        };
        // An earlier step's 503 to the same renewal path is not the 404 this step told.
        let earlier = refusal(label, ErrorCode::Unavailable, 100);
        assert_eq!(
            told_at_ns(&earlier, label, ErrorCode::UnknownExecutor),
            None
        );
        let other = refusal(
            "POST /v1/executors/ex-5/renew",
            ErrorCode::UnknownExecutor,
            200,
        );
        assert_eq!(told_at_ns(&other, label, ErrorCode::UnknownExecutor), None);
        let told = refusal(label, ErrorCode::UnknownExecutor, 300);
        assert_eq!(
            told_at_ns(&told, label, ErrorCode::UnknownExecutor),
            Some(300)
        );
    }

    #[test]
    fn a_grant_set_is_read_from_shards_or_runs_and_an_unchanged_one_is_not_read() {
        let grant = GrantSet::parse(
            br#"{"executor_id":"ex-1","lease_ttl_ms":3000,"revision":76,"shard_count":16,
                "shards":[{"shard":3,"epoch":7}]}"#,
        )
        .unwrap();
        assert_eq!(grant.revision, 76);
        assert_eq!(grant.shards, BTreeSet::from([(3, 7)]));
        let runs =
            GrantSet::parse(br#"{"revision":9,"shards":[],"shard_runs":[[4,2,5]]}"#).unwrap();
        assert_eq!(runs.shards, BTreeSet::from([(4, 5), (5, 5)]));
        // The set is the renewal's claims, which the kit does not know: not a set to judge by.
        assert_eq!(
            GrantSet::parse(br#"{"revision":9,"shards":[],"unchanged":true}"#),
            None
        );
        assert_eq!(
            GrantSet::parse(br#"{"revision":9,"shards":[{"shard":-1}]}"#),
            None
        );
        assert_eq!(
            GrantSet::parse(br#"{"revision":9,"shards":[],"shard_runs":[[4294967295,2,1]]}"#),
            None
        );
        assert_eq!(GrantSet::parse(b"not json"), None);
    }

    #[test]
    fn a_renewals_claims_are_read_from_claims_or_runs() {
        let claims = Claims::parse(br#"{"claims":[{"shard":3,"epoch":7}],"revision":76}"#).unwrap();
        assert_eq!(claims.revision, 76);
        assert_eq!(claims.shards, BTreeSet::from([(3, 7)]));
        let runs =
            Claims::parse(br#"{"claims":[],"claim_runs":[[4,2,5]],"revision":9,"loads":[]}"#)
                .unwrap();
        assert_eq!(runs.shards, BTreeSet::from([(4, 5), (5, 5)]));
        assert_eq!(
            Claims::parse(br#"{"claims":[],"revision":9}"#)
                .unwrap()
                .shards,
            BTreeSet::new()
        );
        // No claims, or no revision: not a renewal the step can judge as claiming anything.
        assert_eq!(Claims::parse(br#"{"revision":9}"#), None);
        assert_eq!(Claims::parse(br#"{"claims":[]}"#), None);
        assert_eq!(show_set(&runs.shards), "4@5, 5@5");
        assert_eq!(show_set(&BTreeSet::new()), "none");
    }

    #[test]
    fn a_copy_delivered_again_judges_only_when_the_revoke_alone_made_it_stale_in_the_lease() {
        let renewal_ns = 1_000_000_000;
        let last_judged_ns = renewal_ns + nanos(KIT_LEASE) - nanos(REVOKE_REPLAY_MARGIN);
        let judged = ReplayRace {
            last_renewal_ns: renewal_ns,
            last_grant_revision: Some(7),
            copy_revision: 7,
            revoked: true,
            replayed_ns: last_judged_ns,
        };
        assert_eq!(judged.unjudged(), None);
        let no_grant = ReplayRace {
            last_grant_revision: None,
            ..judged
        };
        assert_eq!(no_grant.unjudged(), None);
        // A lease that may have run out: an executor admits nothing, stale copy or not.
        let late = ReplayRace {
            replayed_ns: last_judged_ns + 1,
            ..judged
        };
        assert!(late.unjudged().unwrap().contains("certainly live"));
        // No revoke answered: nothing made the copy stale.
        let unrevoked = ReplayRace {
            revoked: false,
            ..judged
        };
        assert!(unrevoked.unjudged().unwrap().contains("no revoke"));
        // A newer grant made the copy stale by itself.
        let overtaken = ReplayRace {
            last_grant_revision: Some(8),
            ..judged
        };
        assert!(overtaken.unjudged().unwrap().contains("above the copy's 7"));
    }

    #[test]
    fn a_registration_is_read_with_or_without_its_credential() {
        assert_eq!(
            Registration::parse(br#"{"incarnation":"a1","address":"http://x","credential":"c"}"#),
            Some(Registration {
                incarnation: "a1".into(),
                credential: Some("c".into())
            })
        );
        assert_eq!(
            Registration::parse(br#"{"incarnation":"a1","address":"http://x"}"#)
                .unwrap()
                .credential,
            None
        );
        assert_eq!(Registration::parse(br#"{"address":"http://x"}"#), None);
    }
}
