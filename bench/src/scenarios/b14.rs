//! B14: resharding a namespace under renewal load (docs/BENCHMARKS.md, PROTOCOL §20). The default
//! namespace of `shards` shards and `executors` simulated executors renewing at the protocol's
//! cadence (a third of the lease, [`LEASE`] here so that every few seconds carry a renewal of
//! each), each keeping its admission log; it is split to twice the shards, then merged back, at
//! the default churn budget, with [`AROUND`] of renewals before the split and after the merge.
//! Measured:
//! - every key owned throughout: the leader's shards read every [`OWNERSHIP_POLL`] from the
//!   settled namespace before the split until the merge settled, the most unowned shards any
//!   reading showed (the target is none);
//! - each reshard's time from the request to its entry, and to a settled namespace (no handoff, every
//!   executor within the balance tolerance of the mean), with the handoffs it took;
//! - the renewals' p50 and p99 as the executors see them, over the whole run and around each
//!   reshard;
//! - I1 and I2 per key over the executors' admission logs, across the three layouts.

use std::collections::BTreeMap;

use leasehold_api::wire::{ShardView, DEFAULT_NAMESPACE};
use leasehold_conformance::checker::check_in;
use tokio::sync::watch;

use super::*;
use crate::drive::{Renewal, Samples};

/// The settings of a B14 run.
#[derive(Debug, Clone)]
pub struct B14 {
    pub executors: usize,
    pub shards: u32,
}

/// How long a settled namespace must keep its owners (no plan moved anything meanwhile).
const SETTLED_FOR: Duration = Duration::from_secs(2);
/// How often the leader's shards are read for owners.
const OWNERSHIP_POLL: Duration = Duration::from_millis(50);
/// The planner's balance tolerance (P15.3), which the namespace keeps by default: an executor is
/// spread evenly when it holds within this share of the mean.
const BALANCE_TOLERANCE: f64 = 0.10;
/// Renewals around a reshard: from this long before its request to this long after it settled;
/// the run renews this long before the split and after the merge too.
const AROUND: Duration = Duration::from_secs(10);
/// The managers' lease: the executors renew every third of it.
const LEASE: &str = "10s";

pub async fn b14(env: &Env, args: &B14) -> Result<Table> {
    let mut table = Table::new(&["B14", "part", "measured", "target", "load avg"]);
    eprintln!(
        "B14: {} executors, {} shards, split to {} and merged back",
        args.executors,
        args.shards,
        args.shards * 2
    );
    let cluster = leasehold_cluster(
        env,
        &env.security,
        "b14",
        ManagerFlags {
            lease: Some(LEASE.to_owned()),
            ..ManagerFlags::shipped(args.shards)
        },
    )
    .await?;
    let admin = admin_client(&cluster, &env.security)?;
    let spec = FleetSpec {
        record_admission: true,
        ..FleetSpec::plain(args.executors)
    };
    let fleet =
        Arc::new(leasehold_fleet_spec(&cluster, &env.security, spec, executor_client()).await?);
    let (stop, stopped) = watch::channel(false);
    let renewing = tokio::spawn(renew_at_cadence(fleet.clone(), stopped.clone()));
    let result = async {
        settle(&admin, args.executors, args.shards).await?;
        // From a settled namespace on: every shard owned, until the merge settled.
        let owners = tokio::spawn(watch_owners(admin.clone(), stopped));
        tokio::time::sleep(AROUND).await;
        let split = reshard(&admin, args.executors, args.shards * 2, 1).await?;
        let merge = reshard(&admin, args.executors, args.shards, 2).await?;
        tokio::time::sleep(AROUND).await;
        Ok::<_, anyhow::Error>((split, merge, owners))
    }
    .await;
    let _ = stop.send(true);
    let renewals = renewing.await.map_err(|e| anyhow!(e))?;
    let (split, merge, owners) = result?;
    let ownership = owners.await.map_err(|e| anyhow!(e))?;
    let load = load_average();
    let mut row = |part: &str, measured: String, target: &str| {
        table.row(vec![
            "B14".to_owned(),
            part.to_owned(),
            measured,
            target.to_owned(),
            load.clone(),
        ])
    };
    row(
        "keys without an owner",
        format!(
            "{} shards at most, in {} readings every {} ms{}",
            ownership.most_unowned,
            ownership.readings,
            OWNERSHIP_POLL.as_millis(),
            ownership
                .first_error
                .map(|e| format!(" ({} failed readings: {e})", ownership.failed))
                .unwrap_or_default()
        ),
        "none (0 ms)",
    );
    for (what, reshard) in [("split", &split), ("merge", &merge)] {
        row(
            &format!("{what} to {}", reshard.shard_count),
            format!(
                "entry {:.2} s after the request; settled {:.1} s after it, {} handoffs, {} to {} \
                 shards per executor",
                reshard.committed.as_secs_f64(),
                reshard.settled.as_secs_f64(),
                reshard.handoffs,
                reshard.fewest,
                reshard.most
            ),
            "children spread within the balance tolerance in 2 min",
        );
    }
    let mut all = Samples::of(&renewals, |_| true);
    row(
        "renewals, whole run",
        format!(
            "p50 {} p99 {} max {}, {} ok, {} failed",
            fmt_ms(all.quantile_ms(0.50)),
            fmt_ms(all.quantile_ms(0.99)),
            fmt_ms(all.quantile_ms(1.0)),
            all.ok(),
            all.errors
        ),
        "p99 ≤ 25 ms",
    );
    for (what, reshard) in [("split", &split), ("merge", &merge)] {
        let (from, to) = (reshard.requested - AROUND, reshard.settled_at + AROUND);
        let mut around = Samples::of(&renewals, |renewal| renewal.overlaps(from, to));
        row(
            &format!("renewals around the {what}"),
            format!(
                "p50 {} p99 {}, {} ok, {} failed",
                fmt_ms(around.quantile_ms(0.50)),
                fmt_ms(around.quantile_ms(0.99)),
                around.ok(),
                around.errors
            ),
            "p99 ≤ 25 ms",
        );
    }
    let logs = fleet.admission_logs();
    let checked = match check_in(&logs, Some(args.shards)) {
        Ok(report) if all.errors == 0 => format!(
            "{} violations over {} intervals, {} key classes, {} layouts",
            report.violations.len(),
            report.intervals,
            report.shards,
            report.generations
        ),
        Ok(report) => format!(
            "{} violations over {} intervals; inconclusive: {} renewals failed, and the simulated \
             executors do not fence on a lapse",
            report.violations.len(),
            report.intervals,
            all.errors
        ),
        Err(error) => format!("the logs did not parse: {error}"),
    };
    row("I1/I2 per key", checked, "clean");
    fleet.deregister_all().await?;
    Ok(table)
}

/// What one reshard took.
struct Resharded {
    shard_count: u32,
    requested: Instant,
    /// Request → the namespace at the new generation, no reshard under way.
    committed: Duration,
    /// Request → settled.
    settled: Duration,
    settled_at: Instant,
    /// Shards of the finer layout whose keys changed executor between the request and the
    /// settled namespace.
    handoffs: usize,
    fewest: usize,
    most: usize,
}

/// Asks for `shard_count`, waits for the entry (the namespace at `generation` with no reshard
/// under way), then for a settled namespace.
async fn reshard(
    admin: &Client,
    executors: usize,
    shard_count: u32,
    generation: u64,
) -> Result<Resharded> {
    let before = owners_of(&admin.shards(true).await?);
    let requested = Instant::now();
    admin
        .reshard_namespace(DEFAULT_NAMESPACE, shard_count)
        .await
        .context("the reshard request")?;
    poll_every(
        &format!("the namespace at generation {generation}"),
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let view = admin
                .namespace(DEFAULT_NAMESPACE)
                .await
                .map_err(|e| e.to_string())?;
            if view.generation >= generation && view.reshard.is_none() {
                Ok(())
            } else {
                Err(format!(
                    "generation {}, reshard {:?}",
                    view.generation, view.reshard
                ))
            }
        },
    )
    .await?;
    let committed = requested.elapsed();
    let spread = settle(admin, executors, shard_count).await?;
    let settled_at = Instant::now();
    // Each shard of the finer layout whose keys are now with another executor than before the
    // request moved once: a split's children spread, or one shard of a merge's pair.
    let (old, new) = (before.len(), spread.owners.len());
    let handoffs = (0..old.max(new))
        .filter(|&class| before[class % old.max(1)] != spread.owners[class % new.max(1)])
        .count();
    Ok(Resharded {
        shard_count,
        requested,
        committed,
        settled: settled_at - requested,
        settled_at,
        handoffs,
        fewest: spread.fewest,
        most: spread.most,
    })
}

/// A settled namespace: every shard's owner, and the fewest and most shards an executor holds.
struct Spread {
    owners: Vec<Option<String>>,
    fewest: usize,
    most: usize,
}

fn owners_of(shards: &[ShardView]) -> Vec<Option<String>> {
    shards.iter().map(|shard| shard.owner.clone()).collect()
}

/// Waits until the leader shows `shard_count` shards, each owned with no handoff, over
/// `executors` executors each within the balance tolerance of the mean, and the same owners a
/// [`SETTLED_FOR`] later: a plan the leader commits just after a reshard's entry shows by then.
async fn settle(admin: &Client, executors: usize, shard_count: u32) -> Result<Spread> {
    loop {
        let first = spread_once(admin, executors, shard_count).await?;
        tokio::time::sleep(SETTLED_FOR).await;
        let again = spread_once(admin, executors, shard_count).await?;
        if again.owners == first.owners {
            return Ok(again);
        }
    }
}

/// [`settle`]'s one reading: waits until the spread holds once.
async fn spread_once(admin: &Client, executors: usize, shard_count: u32) -> Result<Spread> {
    let mean = f64::from(shard_count) / executors as f64;
    let (low, high) = (
        (mean * (1.0 - BALANCE_TOLERANCE)).floor() as usize,
        (mean * (1.0 + BALANCE_TOLERANCE)).ceil() as usize,
    );
    let spread = poll_every(
        &format!("{shard_count} shards spread, {low} to {high} per executor"),
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let shards = admin.shards(true).await.map_err(|e| e.to_string())?;
            if shards.len() != shard_count as usize {
                return Err(format!("{} shards", shards.len()));
            }
            if let Some(moving) = shards
                .iter()
                .find(|s| s.owner.is_none() || s.handoff.is_some())
            {
                return Err(format!("shard {} unowned or in handoff", moving.shard));
            }
            let mut per_executor: BTreeMap<&str, usize> = BTreeMap::new();
            for shard in &shards {
                *per_executor
                    .entry(shard.owner.as_deref().unwrap_or_default())
                    .or_default() += 1;
            }
            let fewest = if per_executor.len() < executors {
                0
            } else {
                per_executor.values().copied().min().unwrap_or(0)
            };
            let most = per_executor.values().copied().max().unwrap_or(0);
            if fewest < low || most > high {
                return Err(format!("{fewest} to {most} shards per executor"));
            }
            Ok(Spread {
                owners: owners_of(&shards),
                fewest,
                most,
            })
        },
    )
    .await?;
    Ok(spread)
}

/// What the ownership readings showed.
#[derive(Debug, Default)]
struct Ownership {
    readings: u64,
    most_unowned: usize,
    failed: u64,
    first_error: Option<String>,
}

/// Reads the leader's shards every [`OWNERSHIP_POLL`] until `stopped`, counting the unowned.
async fn watch_owners(admin: Client, mut stopped: watch::Receiver<bool>) -> Ownership {
    let mut ownership = Ownership::default();
    let mut tick = tokio::time::interval(OWNERSHIP_POLL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.changed() => return ownership,
        }
        // Read at the leader: a follower a few entries behind would show the layout before.
        match admin.shards(true).await {
            Ok(shards) => {
                ownership.readings += 1;
                let unowned = shards.iter().filter(|shard| shard.owner.is_none()).count();
                ownership.most_unowned = ownership.most_unowned.max(unowned);
            }
            Err(error) => {
                ownership.failed += 1;
                ownership
                    .first_error
                    .get_or_insert_with(|| error.to_string());
            }
        }
    }
}

/// Every executor renews every third of the lease its last grant gave, phases spread over the
/// first period, until `stopped`; each renewal with its scheduled instant and result.
async fn renew_at_cadence(
    fleet: Arc<LeaseholdFleet>,
    stopped: watch::Receiver<bool>,
) -> Vec<Renewal> {
    let holders = fleet.size();
    let first_period = humantime::parse_duration(LEASE).unwrap_or(DEFAULT_LEASE_DURATION) / 3;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..holders {
        let fleet = fleet.clone();
        let mut stopped = stopped.clone();
        let phase = first_period.mul_f64(index as f64 / holders.max(1) as f64);
        tasks.spawn(async move {
            let mut renewals = Vec::new();
            let mut scheduled = start + phase;
            let mut period = first_period;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(scheduled) => {}
                    _ = stopped.changed() => return renewals,
                }
                let result = match fleet.renew(index).await {
                    Ok(lease_ttl_ms) => {
                        period = Duration::from_millis(lease_ttl_ms / 3).max(OWNERSHIP_POLL);
                        Ok(Instant::now() - scheduled)
                    }
                    Err(failure) => Err(failure.to_string()),
                };
                renewals.push(Renewal { scheduled, result });
                scheduled += period;
            }
        });
    }
    let mut all = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Ok(renewals) = joined {
            all.extend(renewals);
        }
    }
    all
}
