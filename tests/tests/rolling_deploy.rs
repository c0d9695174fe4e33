//! A rolling deploy over the real binaries (PROTOCOL P17.2, P17.3; docs/BENCHMARKS.md B11), as a
//! Kubernetes Deployment with `maxSurge: 1` does it: executors of application version 1.0 are
//! replaced one at a time by executors of 1.1. For each, the replacement starts and registers,
//! the old one gets SIGTERM and drains itself onto the newest version, and the fleet settles.
//! The new executors take 200 ms to prepare for each shard (`--prepare-delay`, P17.1), which the
//! leader waits for before it revokes the shard from its holder. Read from every admission log:
//! each shard changed hands once, no shard was handed to an executor the deploy replaced later,
//! and I1/I2 hold.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use leasehold_conformance::admission_log::{admission_intervals, ExecutorLog};
use leasehold_conformance::checker::monotonic_now_ns;
use leasehold_conformance::deploy::{deploy_figures, percentile};
use leasehold_tests::executor::{wait_for_even_split, ExecutorSpec};
use leasehold_tests::faults::{
    fault_cluster_options, fault_executor_args, report_figure, use_fault_timing, wait_registered,
    Fleet, FAULT_SHARDS, SETTLE_BOUND,
};
use leasehold_tests::{one_cluster_at_a_time, wait_for_cluster_version, Cluster};
use nix::sys::signal::Signal;

/// The cluster version that takes application versions (`leasehold_api::wire::APP_VERSION_SCHEMA`).
const APP_VERSION_SCHEMA: u32 = 5;
/// The leader raises the cluster version within a probe round or two of formation (2 s each).
const VERSION_BOUND: Duration = Duration::from_secs(30);
/// Executors in the fleet the deploy replaces.
const FLEET: usize = 3;

/// The new executors' warm-up (P17.1): each prepares for a shard this long before it arrives.
const PREPARE_DELAY: &str = "200ms";

fn start_versioned(
    fleet: &mut Fleet,
    cluster: &Cluster,
    name: &str,
    version: &str,
    prepare_delay: Option<&str>,
) -> usize {
    let mut spec = ExecutorSpec::local(cluster, name);
    spec.extra_args = fault_executor_args();
    spec.extra_args
        .extend(["--app-version".to_owned(), version.to_owned()]);
    if let Some(delay) = prepare_delay {
        spec.extra_args
            .extend(["--prepare-delay".to_owned(), delay.to_owned()]);
    }
    fleet.start(spec)
}

/// P17.2, P17.3, I1, I2: the B11 targets over real processes: moves per shard at most 1.05 on
/// average and 2 at most, no handoff onto an executor of the older version, every old executor's
/// shards stopped by their revokes (it drained itself), and no admission overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p17_3_a_rolling_deploy_moves_each_shard_once_onto_the_newest_version() {
    const SCENARIO: &str = "p17_3_a_rolling_deploy_moves_each_shard_once_onto_the_newest_version";
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::new(fault_cluster_options());
    use_fault_timing(&mut cluster);
    cluster.start_all();
    wait_for_cluster_version(&mut cluster, APP_VERSION_SCHEMA, VERSION_BOUND).await;

    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let old: Vec<usize> = (0..FLEET)
        .map(|i| start_versioned(&mut fleet, &cluster, &format!("old-{i}"), "1.0", None))
        .collect();
    wait_for_even_split(&fleet.refs(&old), FAULT_SHARDS, SETTLE_BOUND).await;

    let started_ns = monotonic_now_ns();
    let deploy_started = Instant::now();
    let mut running = old.clone();
    let mut replaced = Vec::new();
    for (i, &leaving) in old.iter().enumerate() {
        let replacement = start_versioned(
            &mut fleet,
            &cluster,
            &format!("new-{i}"),
            "1.1",
            Some(PREPARE_DELAY),
        );
        wait_registered(fleet.get(replacement)).await;
        running.push(replacement);
        fleet.signal(leaving, Signal::SIGTERM);
        let stopped = fleet.executors[leaving].wait_exit(SETTLE_BOUND).await;
        assert!(stopped.success(), "old-{i} stopped cleanly: {stopped:?}");
        running.retain(|&index| index != leaving);
        replaced.push(format!("old-{i}"));
        wait_for_even_split(&fleet.refs(&running), FAULT_SHARDS, SETTLE_BOUND).await;
    }
    let ended_ns = monotonic_now_ns();
    report_figure(SCENARIO, "the whole deploy", deploy_started.elapsed());

    let report = fleet.check(SCENARIO);
    // P17.1: each new executor prepared for the shards it took before their holders were revoked.
    for index in &running {
        let executor = fleet.get(*index);
        assert!(
            executor
                .log()
                .contains("prepared for shards about to arrive"),
            "P17.1: {} was asked to prepare",
            executor.name
        );
    }
    for &index in &old {
        let reasons = fleet.reasons(index);
        assert!(
            !reasons.contains_key("shutdown"),
            "P17.2: {} handed every shard over before it stopped: {reasons:?}",
            fleet.get(index).name
        );
    }
    let by_process: Vec<_> = fleet
        .executors
        .iter()
        .map(|executor| {
            let log = ExecutorLog {
                records: executor.admission_log().unwrap(),
                ended_at_ns: None,
            };
            (
                executor.name.clone(),
                admission_intervals(std::slice::from_ref(&log)).unwrap(),
            )
        })
        .collect();
    let figures = deploy_figures(&by_process, (started_ns, ended_ns), &replaced, FAULT_SHARDS);
    let mut windows = figures.no_owner_ms.clone();
    windows.sort_by(f64::total_cmp);
    eprintln!(
        "[fault] {SCENARIO}: moves per shard {:.2} mean, {} max; {} handoffs ({} onto executors \
         replaced later); no-owner window p50 {:.1} ms, p99 {:.1} ms; {} intervals checked",
        figures.moves_mean,
        figures.moves_max,
        figures.handoffs,
        figures.onto_replaced_later,
        percentile(&windows, 0.5),
        percentile(&windows, 0.99),
        report.intervals,
    );
    assert!(
        figures.moves_mean <= 1.05 && figures.moves_max <= 2,
        "P17.3: each shard moves once per deploy: {figures:?}"
    );
    assert_eq!(
        figures.onto_replaced_later, 0,
        "P17.3: no shard handed to an executor of the older version: {figures:?}"
    );
    assert_eq!(
        figures.handoffs, FAULT_SHARDS as usize,
        "every shard moved to the new version: {figures:?}"
    );
}
