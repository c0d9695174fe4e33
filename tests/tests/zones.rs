//! Zones over the real binaries (PROTOCOL P18.3): four executors in two zones (`--label
//! zone=...`), the labels shown by the managers, each zone's share in proportion to its capacity,
//! and a whole zone SIGKILLed: only its shards move, the survivors keep what they held, and the
//! admission logs show I1 and I2. A namespace preferring a zone (P18.4) has every shard there,
//! and spread over every zone again once the preference is gone.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use leasehold_tests::ctl::leaseholdctl;
use leasehold_tests::executor::{wait_for_even_split, ExecutorSpec};
use leasehold_tests::faults::{
    fault_cluster_options, fault_executor_args, report_figure, use_fault_timing, wait_registered,
    Fleet, FAULT_SHARDS, SETTLE_BOUND,
};
use leasehold_tests::{one_cluster_at_a_time, wait_for_cluster_version, Cluster};

/// The cluster version that takes labels (`leasehold_api::wire::LABELS_SCHEMA`).
const LABELS_SCHEMA: u32 = 7;
/// The cluster version that takes a namespace's placement settings
/// (`leasehold_api::wire::NAMESPACE_PLACEMENT_SCHEMA`).
const NAMESPACE_PLACEMENT_SCHEMA: u32 = 11;
/// The leader raises the cluster version within a probe round or two of formation (2 s each).
const VERSION_BOUND: Duration = Duration::from_secs(30);

fn start_in_zone(fleet: &mut Fleet, cluster: &Cluster, name: &str, zone: &str) -> usize {
    let mut spec = ExecutorSpec::local(cluster, name);
    spec.extra_args = fault_executor_args();
    spec.extra_args.extend([
        "--label".to_owned(),
        format!("zone={zone}"),
        "--label".to_owned(),
        "tier=test".to_owned(),
    ]);
    fleet.start(spec)
}

/// A cluster with the fault suite's timing at cluster version `version` or later, and two
/// executors in each of zones a and b (their fleet indexes).
async fn two_zones_of_two(version: u32) -> (Cluster, Fleet, [usize; 2], [usize; 2]) {
    let mut cluster = Cluster::new(fault_cluster_options());
    use_fault_timing(&mut cluster);
    cluster.start_all();
    wait_for_cluster_version(&mut cluster, version, VERSION_BOUND).await;
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let zone_a = [
        start_in_zone(&mut fleet, &cluster, "a-0", "a"),
        start_in_zone(&mut fleet, &cluster, "a-1", "a"),
    ];
    let zone_b = [
        start_in_zone(&mut fleet, &cluster, "b-0", "b"),
        start_in_zone(&mut fleet, &cluster, "b-1", "b"),
    ];
    (cluster, fleet, zone_a, zone_b)
}

/// P18.3, I1, I2: labels reach the managers; the zones split the shards evenly; losing a zone
/// re-homes only its shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p18_3_losing_a_zone_moves_only_its_shards() {
    const SCENARIO: &str = "p18_3_losing_a_zone_moves_only_its_shards";
    let _serial = one_cluster_at_a_time().await;
    let (cluster, mut fleet, zone_a, zone_b) = two_zones_of_two(LABELS_SCHEMA).await;
    let everyone: Vec<usize> = zone_a.iter().chain(&zone_b).copied().collect();
    let sets = wait_for_even_split(&fleet.refs(&everyone), FAULT_SHARDS, SETTLE_BOUND).await;
    let per_zone: Vec<usize> = sets
        .chunks(2)
        .map(|zone| zone.iter().map(BTreeSet::len).sum())
        .collect();
    assert_eq!(per_zone, [24, 24], "each zone half the shards");

    // The managers keep and show the labels (P18.3).
    let id = wait_registered(fleet.get(zone_b[0])).await;
    let executors = cluster.client().executors(true).await.unwrap();
    let b0 = executors
        .iter()
        .find(|executor| executor.executor_id == id)
        .expect("b-0 is listed");
    assert_eq!(
        b0.labels.iter().collect::<Vec<_>>(),
        [
            (&"tier".to_owned(), &"test".to_owned()),
            (&"zone".to_owned(), &"b".to_owned())
        ]
    );

    // Zone b is lost at once.
    let kept: Vec<BTreeSet<u32>> = sets[..2].to_vec();
    let lost = Instant::now();
    for &index in &zone_b {
        fleet.kill(index);
    }
    let survivors = wait_for_even_split(&fleet.refs(&zone_a), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        SCENARIO,
        "a zone's shards re-homed after its loss",
        lost.elapsed(),
    );
    for (before, after) in kept.iter().zip(&survivors) {
        assert!(
            before.is_subset(after),
            "P18.3: a survivor kept every shard it held: {before:?} -> {after:?}"
        );
    }
    fleet.check(SCENARIO);
}

/// P18.4, I1, I2: `leaseholdctl namespace set default --prefer zone=a` gives every shard to zone
/// a's two executors, split evenly, and `--prefer default` spreads them over both zones again;
/// `namespace show` shows the setting while it is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p18_4_a_preferred_zone_takes_every_shard_until_the_preference_goes() {
    const SCENARIO: &str = "p18_4_a_preferred_zone_takes_every_shard_until_the_preference_goes";
    let _serial = one_cluster_at_a_time().await;
    let (cluster, fleet, zone_a, zone_b) = two_zones_of_two(NAMESPACE_PLACEMENT_SCHEMA).await;
    let everyone: Vec<usize> = zone_a.iter().chain(&zone_b).copied().collect();
    wait_for_even_split(&fleet.refs(&everyone), FAULT_SHARDS, SETTLE_BOUND).await;

    let endpoints = cluster.urls();
    leaseholdctl(
        &endpoints,
        &["namespace", "set", "default", "--prefer", "zone=a"],
    )
    .await
    .ok();
    let shown = leaseholdctl(&endpoints, &["namespace", "show", "default"])
        .await
        .ok();
    assert!(
        shown.stdout.contains("prefer zone=a"),
        "namespace show: {}",
        shown.stdout
    );
    wait_for_even_split(&fleet.refs(&zone_a), FAULT_SHARDS, SETTLE_BOUND).await;

    leaseholdctl(
        &endpoints,
        &["namespace", "set", "default", "--prefer", "default"],
    )
    .await
    .ok();
    let sets = wait_for_even_split(&fleet.refs(&everyone), FAULT_SHARDS, SETTLE_BOUND).await;
    let per_zone: Vec<usize> = sets
        .chunks(2)
        .map(|zone| zone.iter().map(BTreeSet::len).sum())
        .collect();
    assert_eq!(per_zone, [24, 24], "each zone half the shards again");
    fleet.check(SCENARIO);
}
