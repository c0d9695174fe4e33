//! B11: a rolling deploy of real executors, as a Kubernetes Deployment with `maxSurge: 1` does
//! it (docs/BENCHMARKS.md): for each executor in turn, start its replacement, wait until the
//! replacement registered, SIGTERM the old one, and wait until the shards are spread evenly
//! again. Read from the admission logs afterwards: how often each shard moved, how many handoffs
//! gave a shard to an executor that was itself replaced later in the deploy, and each handoff's
//! no-owner window (the old owner's stop to the new owner's start); I1 and I2 over every log.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_conformance::admission_log::{
    admission_intervals, read_admission_log, AdmissionInterval, ExecutorLog,
};
use leasehold_conformance::checker::{check_admission_exclusivity, monotonic_now_ns};

use super::*;

/// One executor process of the deploy, with its admission log.
struct DeployedExecutor {
    name: String,
    address: String,
    event_log: PathBuf,
    process: ChildProcess,
}

fn start_executor(
    env: &Env,
    cluster: &ManagerCluster,
    dir: &Path,
    name: &str,
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
        .arg(&event_log);
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
async fn wait_spread(
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

/// What one deploy did to the shards, from the admission logs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeployFigures {
    /// Times each shard changed owner during the deploy, over every shard.
    pub moves_mean: f64,
    pub moves_max: usize,
    /// Handoffs during the deploy.
    pub handoffs: usize,
    /// Handoffs whose new owner was itself replaced later in the deploy.
    pub onto_replaced_later: usize,
    /// Each handoff's window with no owner admitting: the old owner's stop to the new owner's
    /// start, in milliseconds (negative would be an overlap, which I1 forbids).
    pub no_owner_ms: Vec<f64>,
}

/// The figures of a deploy from each process's admission intervals (`by_process`: its name and
/// intervals), the deploy's window on CLOCK_MONOTONIC, and the names of the executors it
/// replaced, in the order it replaced them.
pub(crate) fn deploy_figures(
    by_process: &[(String, Vec<AdmissionInterval>)],
    window_ns: (u64, u64),
    replaced_in_order: &[String],
    shards: u32,
) -> DeployFigures {
    let mut per_shard: BTreeMap<u32, Vec<(&str, &AdmissionInterval)>> = BTreeMap::new();
    for (name, intervals) in by_process {
        for interval in intervals {
            per_shard
                .entry(interval.shard)
                .or_default()
                .push((name.as_str(), interval));
        }
    }
    let replaced_at: BTreeMap<&str, usize> = replaced_in_order
        .iter()
        .enumerate()
        .map(|(turn, name)| (name.as_str(), turn))
        .collect();
    let mut moves = vec![0usize; shards as usize];
    let mut handoffs = 0;
    let mut onto_replaced_later = 0;
    let mut no_owner_ms = Vec::new();
    for (shard, mut held) in per_shard {
        held.sort_by_key(|(_, interval)| interval.start_ns);
        for pair in held.windows(2) {
            let ((from, before), (to, after)) = (pair[0], pair[1]);
            let in_window = after.start_ns >= window_ns.0 && after.start_ns <= window_ns.1;
            if !in_window || from == to {
                continue;
            }
            handoffs += 1;
            if let Some(slot) = moves.get_mut(shard as usize) {
                *slot += 1;
            }
            // The receiver is replaced later if its turn comes after the giver's (or the giver
            // is not one the deploy replaced, and the receiver is).
            let giver_turn = replaced_at.get(from).copied();
            if let Some(receiver_turn) = replaced_at.get(to) {
                if giver_turn.is_none_or(|giver| *receiver_turn > giver) {
                    onto_replaced_later += 1;
                }
            }
            if let Some(stopped_ns) = before.end_ns {
                no_owner_ms.push((after.start_ns as f64 - stopped_ns as f64) / 1e6);
            }
        }
    }
    let moves_max = moves.iter().copied().max().unwrap_or(0);
    let moves_mean = if moves.is_empty() {
        0.0
    } else {
        moves.iter().sum::<usize>() as f64 / moves.len() as f64
    };
    DeployFigures {
        moves_mean,
        moves_max,
        handoffs,
        onto_replaced_later,
        no_owner_ms,
    }
}

fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub async fn b11(env: &Env, executors: usize, shards: u32, runs: usize) -> Result<Table> {
    let mut table = Table::new(&[
        "B11",
        "run",
        "executors × shards",
        "moves per shard (mean / max)",
        "handoffs (onto executors replaced later)",
        "no-owner window p50 / p99 / max",
        "I1/I2",
        "load avg",
    ]);
    for run in 1..=runs {
        let load = load_average();
        eprintln!("B11: run {run}: {executors} executors, {shards} shards");
        let name = format!("b11-{run}");
        let mut cluster =
            leasehold_cluster(env, &env.security, &name, default_flags(shards)).await?;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let dir = env.dir(&format!("{name}-executors"))?;
        let mut running: Vec<DeployedExecutor> = (0..executors)
            .map(|i| start_executor(env, &cluster, &dir, &format!("old-{i}")))
            .collect::<Result<_>>()?;
        let addresses = |running: &[DeployedExecutor]| -> BTreeSet<String> {
            running.iter().map(|e| e.address.clone()).collect()
        };
        wait_spread(&cluster, leader, &addresses(&running), shards).await?;

        let started_ns = monotonic_now_ns();
        let mut stopped: Vec<DeployedExecutor> = Vec::new();
        let mut replaced_in_order = Vec::new();
        for i in 0..executors {
            let replacement = start_executor(env, &cluster, &dir, &format!("new-{i}"))?;
            let address = replacement.address.clone();
            poll_every(
                "the replacement to register",
                SETTLE_BOUND,
                POLL_INTERVAL,
                || async {
                    let view = executors_view(&cluster, leader).await?;
                    if view.iter().any(|e| e.address == address) {
                        Ok(())
                    } else {
                        Err("not registered yet".to_owned())
                    }
                },
            )
            .await?;
            running.push(replacement);
            let position = running
                .iter()
                .position(|e| e.name == format!("old-{i}"))
                .ok_or_else(|| anyhow!("old-{i} is not running"))?;
            let mut old = running.remove(position);
            old.process
                .terminate(&old.name, TERMINATE_BOUND)
                .await
                .with_context(|| format!("{} did not stop gracefully", old.name))?;
            replaced_in_order.push(old.name.clone());
            stopped.push(old);
            wait_spread(&cluster, leader, &addresses(&running), shards).await?;
        }
        let ended_ns = monotonic_now_ns();

        let mut logs = Vec::new();
        let mut by_process = Vec::new();
        for executor in stopped.iter().chain(&running) {
            let log = ExecutorLog {
                records: read_admission_log(&executor.event_log).map_err(|e| anyhow!(e))?,
                ended_at_ns: None,
            };
            by_process.push((
                executor.name.clone(),
                admission_intervals(std::slice::from_ref(&log)).map_err(|e| anyhow!(e))?,
            ));
            logs.push(log);
        }
        let checked = match check_admission_exclusivity(&logs) {
            Ok(report) => format!("clean ({} intervals)", report.intervals),
            Err(violations) => format!("VIOLATED: {violations}"),
        };
        let figures = deploy_figures(
            &by_process,
            (started_ns, ended_ns),
            &replaced_in_order,
            shards,
        );
        let mut windows = figures.no_owner_ms.clone();
        windows.sort_by(f64::total_cmp);
        table.row(vec![
            "B11".to_owned(),
            run.to_string(),
            format!("{executors} × {shards}"),
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
        ]);
        for mut executor in running {
            let _ = executor
                .process
                .terminate(&executor.name, TERMINATE_BOUND)
                .await;
        }
        cluster.kill_all();
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(executor: &str, shard: u32, start_ns: u64, end_ns: Option<u64>) -> AdmissionInterval {
        AdmissionInterval {
            executor_id: executor.to_owned(),
            shard,
            epoch: 1,
            start_ns,
            end_ns,
        }
    }

    /// B11's figures: a shard that goes old-0 → old-1 → new-0 during the deploy moved twice,
    /// once onto an executor replaced later; a shard that stayed put moved never; the windows
    /// are each new owner's start less the old owner's stop.
    #[test]
    fn deploy_figures_count_moves_handoffs_and_windows() {
        let by_process = vec![
            (
                "old-0".to_owned(),
                vec![held("a", 0, 10, Some(1_000_000)), held("a", 1, 10, None)],
            ),
            (
                "old-1".to_owned(),
                vec![held("b", 0, 3_000_000, Some(5_000_000))],
            ),
            ("new-0".to_owned(), vec![held("c", 0, 7_000_000, None)]),
        ];
        let replaced = ["old-0".to_owned(), "old-1".to_owned()];
        let figures = deploy_figures(&by_process, (100, 10_000_000), &replaced, 2);
        assert_eq!(figures.handoffs, 2);
        assert_eq!(figures.moves_max, 2);
        assert!((figures.moves_mean - 1.0).abs() < 1e-9, "{figures:?}");
        assert_eq!(figures.onto_replaced_later, 1, "old-0 → old-1");
        assert_eq!(figures.no_owner_ms, vec![2.0, 2.0]);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
    }
}
