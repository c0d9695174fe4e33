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
//! 12. the leader SIGKILLed, then restarted;
//! 13. the replicated namespace (§19): once the cluster version is 13, the namespace is given two
//!     replicas per shard, and the kit waits until every shard has a primary and a secondary on
//!     the running executors; x0 is drained (its primaries move, P19.3; I1 and I2 judge the
//!     primaries' intervals only); each executor's renewals must say ready (if they say it)
//!     only for secondaries it holds, at the epochs its set shows (P19.3); and no admission log
//!     may show a primary's interval at a shard and epoch the managers gave its executor as a
//!     secondary while another executor was the primary (P19.1, P19.5). An executor that does
//!     not support §19 (an earlier release refuses a push carrying `secondaries`) fails here;
//! 14. resharding (§20): once the cluster version is 14, the namespace is split to twice its
//!     shards while x0 is still drained, x0 undrained so the plans hand children to it, and
//!     merged back; each time the kit waits until the namespace shows the new generation with no
//!     reshard under way, then for the shards to settle. An executor that did not state
//!     `follows_generations` at registration gets the split refused, naming P20.3 (a finding);
//!     one that admits a parent while its child is admitted elsewhere overlaps it per key (I1).
//!     The executors start only once the cluster version is 14, so that their registrations may
//!     state it.
//!
//! Every executor is stopped with SIGTERM at the end, the replies to its calls lagging as in
//! step 2; one that does not stop within 15 s fails the run. A step that judged a rule broken
//! shortens every later wait to 15 s, and a script that then stops early still reports what was
//! found, and the logs are checked.
//!
//! Each executor process runs in its own process group, so a template that starts several
//! processes (a sidecar and its service) is signalled whole.

mod observe;
mod process;
mod replicas;
mod reshard;
mod revoke_replay;
mod stale_grant;
mod steps;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_api::client::{Client, ClientConfig};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::RESHARD_SCHEMA;
use leasehold_harness::{free_port, ClusterConfig, ManagerCluster, ManagerFlags};
use nix::sys::signal::{killpg, Signal};

use self::process::ExecutorProcess;
use nix::unistd::Pid;

use crate::admission_log::{
    admission_intervals, read_admission_log, AdmissionInterval, ExecutorLog,
};
use crate::checker::{check_files_in, monotonic_now_ns, CheckReport, EventLogFile};
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
    /// The kit's namespace's shard count now: [`KIT_SHARDS`], twice that between step 14's split
    /// and merge.
    shard_count: u32,
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
        shard_count: KIT_SHARDS,
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
            log_path,
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

    fn step(name: &str) {
        eprintln!("conformance: step: {name}");
    }

    async fn script(&mut self) -> Result<(), RunError> {
        let all: Vec<usize> = (0..EXECUTORS).collect();
        // Step 14 needs every registration to state `follows_generations`, which executors send
        // only to managers stating the cluster version that takes it (P20.3).
        let started = Instant::now();
        self.wait_for_cluster_version(RESHARD_SCHEMA).await?;
        self.steps.push((
            format!("the cluster version reached {RESHARD_SCHEMA}"),
            started.elapsed(),
        ));
        for slot in 0..EXECUTORS {
            self.start(slot).await?;
        }
        self.settle(&all, "the executors take every shard").await?;
        self.impaired_deliveries_phase(&all).await?;
        self.protocol_steps_phase(&all).await?;
        self.sigkill_phase(&all).await?;
        self.paused_phase(&all).await?;
        self.leader_killed_phase(&all).await?;
        // Late: every step before it keeps the namespace of one replica it was written for.
        self.replicated_phase(&all).await?;
        // Last: every step before it keeps the namespace's first layout.
        self.reshard_phase(&all).await
    }

    /// Drains, undrains and a joiner's start and stop, all under delayed, duplicated and
    /// reordered deliveries.
    async fn impaired_deliveries_phase(&mut self, all: &[usize]) -> Result<(), RunError> {
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
            self.settle(all, &format!("undrain {round} gave x0 shards again"))
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
        self.settle(all, "the joiner's graceful stop handed its shards on")
            .await
    }

    /// The single-rule steps: replays, claims, renewal sets, unknown executors, forged
    /// revisions, stale grants and foreign pushes.
    async fn protocol_steps_phase(&mut self, all: &[usize]) -> Result<(), RunError> {
        Self::step("a push delivered again after a revoke");
        self.revoke_replay_step().await?;

        Self::step("renewals carry the claims");
        self.claims_step().await?;

        Self::step("a set told only by renewals' replies");
        self.renewal_set_step().await?;

        Self::step("renewals answered unknown_executor");
        self.unknown_executor_step().await?;
        self.settle(all, "x0 registered again after unknown_executor")
            .await?;

        Self::step("a push at a revision above the cluster's");
        self.forged_revision_step().await?;
        self.settle(all, "x2 undrained after the forged revision")
            .await?;

        Self::step("a grant made stale by a newer push");
        self.stale_grant_step().await?;
        self.settle(all, "x0 renews again after the stale grant")
            .await?;

        Self::step("a push naming another executor");
        self.foreign_push_step().await?;
        self.settle(all, "after the push naming another executor")
            .await
    }

    /// An executor SIGKILLed, its shards re-homed, then a new process in its place.
    async fn sigkill_phase(&mut self, all: &[usize]) -> Result<(), RunError> {
        Self::step("SIGKILL");
        self.process(1).kill();
        self.settle(&[0, 2], "a killed executor's shards re-homed")
            .await?;
        self.start(1).await?;
        self.settle(all, "a new process in the killed one's place")
            .await
    }

    /// An executor paused past its lease while its replies lag, then resumed.
    async fn paused_phase(&mut self, all: &[usize]) -> Result<(), RunError> {
        Self::step("paused past the lease while replies lag");
        self.process(2).call_proxy.lag_replies(REPLY_LAG);
        tokio::time::sleep(KIT_LEASE).await;
        self.process(2).signal(Signal::SIGSTOP);
        tokio::time::sleep(KIT_LEASE * 2).await;
        self.settle(&[0, 1], "a paused executor's shards re-homed")
            .await?;
        self.process(2).signal(Signal::SIGCONT);
        self.process(2).call_proxy.lag_replies(Duration::ZERO);
        self.settle(all, "the resumed executor takes shards again")
            .await
    }

    /// The Raft leader SIGKILLed and, once another leads, started again.
    async fn leader_killed_phase(&mut self, all: &[usize]) -> Result<(), RunError> {
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
        self.settle(all, "after the leader's death").await?;
        Ok(())
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

    /// A process killed and a new one started in `slot`, after a finding that leaves the old one
    /// unable to take shards again (the run goes on judging the rest).
    async fn replace(&mut self, slot: usize) -> Result<(), RunError> {
        let name = self.process(slot).name.clone();
        eprintln!("conformance: {name} is replaced so that the run goes on");
        self.process(slot).kill();
        self.start(slot).await
    }

    /// I1 and I2 over every log, per key once step 14 changed the layout; an executor that held
    /// shards and wrote no log fails.
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
        check_files_in(&files, Some(KIT_SHARDS)).map_err(|detail| {
            RunError::Executor(format!(
                "an admission log is not in the format of §9: {detail}"
            ))
        })
    }
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
    use super::revoke_replay::ReplayRace;
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
