//! B13: replicas with roles over real executors (docs/BENCHMARKS.md, PROTOCOL §19). Executors
//! that say each secondary is ready as soon as they hold it (`--secondaries-ready-when-held`),
//! with no prepare hook, in a namespace of `--replicas` replicas per shard:
//! (a) one drained: each primary move's no-owner window (the old primary's stop to the new one's
//!     start, from the admission logs) and how many moves landed on a ready secondary;
//! (b) one SIGKILLed: how soon every primary it held was promoted, against lease + tick + 1 s, and
//!     how many of its replicas were placed elsewhere before the restore delay;
//! (c) it restarted under its name within the delay: how many of its replicas it took back and
//!     how many were placed elsewhere;
//! (d) a rolling deploy (B11's, with the replicas): moves per shard and moves onto executors
//!     replaced later.
//! I1 and I2 over every admission log, the primaries' intervals.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::{NamespacePlacementChange, SetNamespaceRequest, ShardView};
use leasehold_conformance::checker::monotonic_now_ns;
use leasehold_conformance::deploy::percentile;

use super::b11::{
    admission_figures, start_executor, wait_spread, AdmissionLogFile, Deploy, DeployedExecutor,
};
use super::replicas::{ids_at, replicate, shard_views, wait_warm, Warmth};
use super::*;

/// The settings of a B13 run.
#[derive(Debug, Clone)]
pub struct B13 {
    pub executors: usize,
    pub shards: u32,
    pub replicas: u32,
    /// The namespace's restore delay (P19.4): long enough for (c)'s restart to come within it.
    pub restore_delay: Duration,
}

/// The application version every executor of (a)–(c) states.
const VERSION: &str = "1.0.0";
/// How often (b) reads the shards while it waits for the promotions.
const PROMOTION_POLL: Duration = Duration::from_millis(50);
/// After a drain's last move shows in the state, how long (a) waits for the pushes to land
/// before it reads the admission logs.
const PUSHES_LAND: Duration = Duration::from_secs(2);
/// Balance moves a minute while the replicas first spread (P15.3), then the default again:
/// what (a)–(c) measure is drains, crashes and restarts, not balance.
const SPREADING_BUDGET: u32 = 600;

pub async fn b13(env: &Env, args: &B13) -> Result<Table> {
    let mut table = Table::new(&["B13", "part", "measured", "target", "I1/I2", "load avg"]);
    let load = load_average();
    let mut run = Replicated::start(env, args).await?;
    let drain = run.drain().await;
    let crash = match &drain {
        Ok(_) => run.crash_and_return().await,
        Err(_) => Err(anyhow!("not run: the drain failed")),
    };
    let checked = run.checked();
    run.stop().await;
    let (drain, crash, checked) = (drain?, crash?, checked?);
    for (part, measured, target) in drain.into_iter().chain(crash) {
        table.row(vec![
            "B13".to_owned(),
            part,
            measured,
            target,
            checked.clone(),
            load.clone(),
        ]);
    }
    let load = load_average();
    let (measured, checked) = rolling_deploy(env, args).await?;
    table.row(vec![
        "B13".to_owned(),
        "(d) rolling deploy, maxSurge 1".to_owned(),
        measured,
        "each primary moves ≤ once, none onto an executor replaced later".to_owned(),
        checked,
        load,
    ]);
    Ok(table)
}

/// One row's part, what was measured and the target.
type Row = (String, String, String);

/// (a)–(c)'s cluster: short leases (B3's), `executors` executors named `e-0`, `e-1`, …
struct Replicated<'a> {
    env: &'a Env,
    args: &'a B13,
    admin: Client,
    leader: u64,
    dir: PathBuf,
    running: Vec<DeployedExecutor>,
    /// The admission logs of the executors no longer running.
    stopped_logs: Vec<AdmissionLogFile>,
    /// Last, so that it is dropped after the executors.
    cluster: ManagerCluster,
}

impl<'a> Replicated<'a> {
    /// Set-up: the cluster, the namespace's replicas and the executors, settled with every
    /// secondary ready and spread.
    async fn start(env: &'a Env, args: &'a B13) -> Result<Self> {
        eprintln!(
            "B13: {} executors, {} shards, {} replicas",
            args.executors, args.shards, args.replicas
        );
        let mut cluster = leasehold_cluster(
            env,
            &env.security,
            "b13",
            etcd_timing(args.shards, SHORT_LEASE),
        )
        .await?;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let admin = admin_client(&cluster, &env.security)?;
        let restore_delay_ms = u64::try_from(args.restore_delay.as_millis())?;
        replicate(&admin, args.replicas, Some(restore_delay_ms)).await?;
        set_budget(&admin, Some(SPREADING_BUDGET)).await?;
        let dir = env.dir("b13-executors")?;
        let running: Vec<DeployedExecutor> = (0..args.executors)
            .map(|i| {
                start_executor(
                    env,
                    &cluster,
                    &dir,
                    &format!("e-{i}"),
                    VERSION,
                    Duration::ZERO,
                    args.replicas,
                )
            })
            .collect::<Result<_>>()?;
        let run = Self {
            env,
            args,
            admin,
            leader,
            dir,
            running,
            stopped_logs: Vec::new(),
            cluster,
        };
        run.settle(Warmth::Complete).await?;
        set_budget(&run.admin, None).await?;
        Ok(run)
    }

    fn addresses(&self) -> BTreeSet<String> {
        self.running.iter().map(|e| e.address.clone()).collect()
    }

    /// Waits until the shards are spread evenly over the running executors and each has its
    /// secondaries as `warmth` asks.
    async fn settle(&self, warmth: Warmth) -> Result<()> {
        let addresses = self.addresses();
        wait_spread(&self.cluster, self.leader, &addresses, self.args.shards).await?;
        wait_warm(
            &self.cluster,
            self.leader,
            &self.admin,
            &addresses,
            self.args.replicas,
            warmth,
        )
        .await
    }

    /// The id of the running executor `position`.
    async fn id_of(&self, position: usize) -> Result<String> {
        let address = &self.running[position].address;
        ids_at(
            &self.cluster,
            self.leader,
            &BTreeSet::from([address.clone()]),
        )
        .await
        .map_err(|e| anyhow!(e))?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} is not registered", self.running[position].name))
    }

    /// (a): `e-1` drained, every primary it held moved; then it takes shards again.
    async fn drain(&mut self) -> Result<Vec<Row>> {
        let drained = self.id_of(1).await?;
        let before = shard_views(&self.admin).await.map_err(|e| anyhow!(e))?;
        let moving = ready_secondaries_of_primaries(&before, &drained);
        let started_ns = monotonic_now_ns();
        self.admin.drain(&drained).await?;
        poll_every(
            "the drained executor's primaries moved",
            SETTLE_BOUND,
            POLL_INTERVAL,
            || async {
                let shards = shard_views(&self.admin).await?;
                let left = moving
                    .keys()
                    .filter(|&&shard| {
                        let view = &shards[shard as usize];
                        view.owner.as_deref() == Some(drained.as_str()) || view.handoff.is_some()
                    })
                    .count();
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} still on the drained executor"))
                }
            },
        )
        .await?;
        let after = shard_views(&self.admin).await.map_err(|e| anyhow!(e))?;
        tokio::time::sleep(PUSHES_LAND).await;
        let window_ns = (started_ns, monotonic_now_ns());
        let onto_ready = landed_on_ready(&moving, &after);
        let (figures, _) = admission_figures(&self.log_files(), window_ns, &[], self.args.shards)?;
        let mut windows = figures.no_owner_ms.clone();
        windows.sort_by(f64::total_cmp);
        self.admin.undrain(&drained).await?;
        self.settle(Warmth::Complete).await?;
        let moves = moving.len();
        Ok(vec![
            (
                "(a) drain: no-owner window per primary move".to_owned(),
                format!(
                    "p50 {:.1} / p99 {:.1} / max {:.1} ms over {} moves",
                    percentile(&windows, 0.5),
                    percentile(&windows, 0.99),
                    windows.last().copied().unwrap_or(f64::NAN),
                    windows.len()
                ),
                "p99 ≤ 10 ms (no prepare hook)".to_owned(),
            ),
            (
                "(a) drain: primary moves onto a ready secondary".to_owned(),
                format!(
                    "{onto_ready} of {moves} ({:.1} %)",
                    100.0 * onto_ready as f64 / moves.max(1) as f64
                ),
                "≥ 95 %".to_owned(),
            ),
        ])
    }

    /// (b) and (c): `e-0` SIGKILLed until each primary it held is promoted, then started again
    /// under its name within the restore delay.
    async fn crash_and_return(&mut self) -> Result<Vec<Row>> {
        let victim = self.id_of(0).await?;
        let before = shard_views(&self.admin).await.map_err(|e| anyhow!(e))?;
        let crashed = ready_secondaries_of_primaries(&before, &victim);
        let replicas_held: BTreeSet<u32> = before
            .iter()
            .filter(|shard| {
                shard.owner.as_deref() == Some(victim.as_str())
                    || shard.secondaries.iter().any(|s| s.executor_id == victim)
            })
            .map(|shard| shard.shard)
            .collect();
        let killed_at = Instant::now();
        let killed_at_ns = monotonic_now_ns();
        let mut killed = self.running.remove(0);
        killed.process.kill();
        self.stopped_logs.push(killed.log_file(Some(killed_at_ns)));
        let after = poll_every(
            "the killed executor's primaries promoted",
            SETTLE_BOUND,
            PROMOTION_POLL,
            || async {
                let shards = shard_views(&self.admin).await?;
                let left = crashed
                    .keys()
                    .filter(|&&shard| {
                        let view = &shards[shard as usize];
                        view.owner.is_none() || view.owner.as_deref() == Some(victim.as_str())
                    })
                    .count();
                if left == 0 {
                    Ok(shards)
                } else {
                    Err(format!("{left} not promoted yet"))
                }
            },
        )
        .await?;
        let took = killed_at.elapsed();
        let onto_ready = landed_on_ready(&crashed, &after);
        let placed_before_restart = placed_elsewhere(&before, &after, &replicas_held, &victim);
        // P19.4: back under its name within the delay, in a directory of its own (its logs
        // are the killed process's no longer).
        let again_dir = self.dir.join("again");
        std::fs::create_dir_all(&again_dir)?;
        let came_back = format!(
            "{:.1} s after the SIGKILL, delay {}",
            killed_at.elapsed().as_secs_f64(),
            humantime::format_duration(self.args.restore_delay)
        );
        let returned = start_executor(
            self.env,
            &self.cluster,
            &again_dir,
            &killed.name,
            VERSION,
            Duration::ZERO,
            self.args.replicas,
        )?;
        self.running.insert(0, returned);
        let returned_id = poll_every(
            "the restarted executor to register",
            SETTLE_BOUND,
            POLL_INTERVAL,
            || async {
                match self.id_of(0).await {
                    Ok(id) => Ok(id),
                    Err(error) => Err(error.to_string()),
                }
            },
        )
        .await?;
        let back = shard_views(&self.admin).await.map_err(|e| anyhow!(e))?;
        let taken_back = replicas_held
            .iter()
            .filter(|&&shard| {
                let view = &back[shard as usize];
                view.owner.as_deref() == Some(returned_id.as_str())
                    || view
                        .secondaries
                        .iter()
                        .any(|s| s.executor_id == returned_id && s.lost_for_ms.is_none())
            })
            .count();
        let placed_elsewhere = placed_elsewhere(&before, &back, &replicas_held, &returned_id);
        self.settle(Warmth::Complete).await?;
        let lease = SHORT_LEASE_DURATION;
        let target = lease + lease / 3 + Duration::from_secs(1);
        Ok(vec![
            (
                "(b) SIGKILL → every primary it held promoted".to_owned(),
                format!(
                    "{} ({} primaries, {onto_ready} onto a ready secondary); {} replicas placed \
                     elsewhere by then",
                    fmt_ms(took.as_secs_f64() * 1000.0),
                    crashed.len(),
                    placed_before_restart
                ),
                format!(
                    "≤ lease + tick + 1 s = {}; none placed elsewhere before the delay",
                    fmt_ms(target.as_secs_f64() * 1000.0)
                ),
            ),
            (
                format!("(c) restarted under its name ({came_back})"),
                format!(
                    "{taken_back} of its {} replicas back; {placed_elsewhere} placed elsewhere",
                    replicas_held.len()
                ),
                "all back, 0 placed elsewhere".to_owned(),
            ),
        ])
    }

    /// Every admission log of (a)–(c) so far.
    fn log_files(&self) -> Vec<AdmissionLogFile> {
        self.stopped_logs
            .iter()
            .cloned()
            .chain(self.running.iter().map(|executor| executor.log_file(None)))
            .collect()
    }

    /// I1 and I2 over every admission log of (a)–(c).
    fn checked(&self) -> Result<String> {
        let (_, checked) = admission_figures(&self.log_files(), (0, 0), &[], self.args.shards)?;
        Ok(checked)
    }

    /// Tear-down: the executors still running stopped (best effort), then the cluster.
    async fn stop(mut self) {
        for mut executor in std::mem::take(&mut self.running) {
            let _ = executor
                .process
                .terminate(&executor.name, TERMINATE_BOUND)
                .await;
        }
        self.cluster.kill_all();
    }
}

/// The namespace's balance budget: `Some(moves a minute)`, or `None` for the default.
async fn set_budget(admin: &Client, moves_per_minute: Option<u32>) -> Result<()> {
    admin
        .set_namespace(
            leasehold_api::wire::DEFAULT_NAMESPACE,
            &SetNamespaceRequest {
                placement: NamespacePlacementChange {
                    max_balance_moves_per_minute: Some(moves_per_minute),
                    ..NamespacePlacementChange::default()
                },
                ..SetNamespaceRequest::default()
            },
        )
        .await?;
    Ok(())
}

/// Each shard whose primary `executor_id` holds in `shards`, with its ready secondaries.
fn ready_secondaries_of_primaries(
    shards: &[ShardView],
    executor_id: &str,
) -> BTreeMap<u32, BTreeSet<String>> {
    shards
        .iter()
        .filter(|shard| shard.owner.as_deref() == Some(executor_id))
        .map(|shard| {
            let ready = shard
                .secondaries
                .iter()
                .filter(|s| s.ready && s.lost_for_ms.is_none())
                .map(|s| s.executor_id.clone())
                .collect();
            (shard.shard, ready)
        })
        .collect()
}

/// How many of `moved` are owned in `after` by one of the ready secondaries they had.
fn landed_on_ready(moved: &BTreeMap<u32, BTreeSet<String>>, after: &[ShardView]) -> usize {
    moved
        .iter()
        .filter(|(shard, ready)| {
            after
                .get(**shard as usize)
                .and_then(|view| view.owner.as_ref())
                .is_some_and(|owner| ready.contains(owner))
        })
        .count()
}

/// How many replicas of the shards in `lost` (those the killed executor held a replica of)
/// `after` holds on executors that held none of their shard in `before`, other than
/// `returned`: its replicas placed elsewhere (P19.4 allows none before the delay).
fn placed_elsewhere(
    before: &[ShardView],
    after: &[ShardView],
    lost: &BTreeSet<u32>,
    returned: &str,
) -> usize {
    let holders = |view: &ShardView| -> BTreeSet<String> {
        view.owner
            .iter()
            .cloned()
            .chain(view.secondaries.iter().map(|s| s.executor_id.clone()))
            .collect()
    };
    before
        .iter()
        .zip(after)
        .filter(|(was, _)| lost.contains(&was.shard))
        .map(|(was, now)| {
            let had = holders(was);
            let new: Vec<String> = holders(now)
                .into_iter()
                .filter(|holder| holder != returned && !had.contains(holder))
                .collect();
            if !new.is_empty() {
                eprintln!(
                    "B13: shard {} placed on {new:?}: was {was:?}, now {now:?}",
                    was.shard
                );
            }
            new.len()
        })
        .sum()
}

/// (d): B11's rolling deploy with the replicas, no prepare hook.
async fn rolling_deploy(env: &Env, args: &B13) -> Result<(String, String)> {
    let mut deploy = Deploy::start(
        env,
        1,
        args.executors,
        args.shards,
        Duration::ZERO,
        args.replicas,
    )
    .await?;
    let rolled = deploy.roll().await;
    let figures = rolled.and_then(|window_ns| deploy.figures(window_ns));
    deploy.stop().await;
    let (figures, checked) = figures?;
    Ok((
        format!(
            "moves per shard {:.2} mean / {} max; {} handoffs, {} onto executors replaced later",
            figures.moves_mean, figures.moves_max, figures.handoffs, figures.onto_replaced_later
        ),
        checked,
    ))
}

#[cfg(test)]
mod tests {
    use leasehold_api::wire::SecondaryView;

    use super::*;

    fn view(shard: u32, owner: &str, secondaries: &[(&str, bool)]) -> ShardView {
        ShardView {
            shard,
            owner: Some(owner.to_owned()),
            epoch: 1,
            handoff: None,
            load: None,
            hot: false,
            pinned_to: None,
            secondaries: secondaries
                .iter()
                .map(|(executor, ready)| SecondaryView {
                    executor_id: (*executor).to_owned(),
                    ready: *ready,
                    lost_for_ms: None,
                })
                .collect(),
        }
    }

    /// (a) and (b)'s figures: a move counts as warm when its new primary was a ready
    /// secondary; a replica of a lost shard on an executor that held none of it is placed
    /// elsewhere, unless it is the executor that came back.
    #[test]
    fn moves_onto_ready_secondaries_and_replicas_placed_elsewhere() {
        let before = vec![view(0, "a", &[("b", true)]), view(1, "a", &[("c", false)])];
        let moving = ready_secondaries_of_primaries(&before, "a");
        assert_eq!(moving.len(), 2);
        let after = vec![view(0, "b", &[]), view(1, "d", &[("c", true)])];
        assert_eq!(landed_on_ready(&moving, &after), 1);
        let both = BTreeSet::from([0, 1]);
        assert_eq!(
            placed_elsewhere(&before, &after, &both, "x"),
            1,
            "d held none of shard 1"
        );
        assert_eq!(
            placed_elsewhere(&before, &after, &both, "d"),
            0,
            "d came back"
        );
        let first = BTreeSet::from([0]);
        assert_eq!(
            placed_elsewhere(&before, &after, &first, "x"),
            0,
            "shard 1 held no replica of the lost executor"
        );
    }
}
