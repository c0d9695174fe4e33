//! Renewals answered from the leader's memory (PROTOCOL P6.5 to P6.7) on a real three-manager
//! cluster at cluster version 12, with in-process executors speaking the HTTP API: renewals stop
//! writing Raft entries, a crashed executor is still reaped within a lease and a tick although
//! its lease is reserved three leases ahead, and `--renewals-from-memory=false` sends every
//! renewal through the log. Each test checks I1 and I2 over the executors' admission intervals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_tests::fake_executor::{overlaps, FakeExecutor};
use leasehold_tests::http_checks::{scrape, summed};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};

const SHARDS: u32 = 64;
const LEASE_MS: u64 = 4_000;
const TICK_MS: u64 = LEASE_MS / 3;
const LEASE_RESERVATION_SCHEMA: u64 = 9;
const LEADER_BOUND: Duration = Duration::from_secs(20);
const SETTLE_BOUND: Duration = Duration::from_secs(30);
const FROM_MEMORY: &str = "leasehold_renewals_from_memory_total";
const UNRESERVED: &str = "leasehold_renewals_through_log_total{reason=\"unreserved\"}";

fn options(extra_args: &[&str]) -> ClusterOptions {
    ClusterOptions {
        lease: format!("{LEASE_MS}ms"),
        shard_count: SHARDS,
        extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
        ..ClusterOptions::default()
    }
}

async fn cluster_view(cluster: &Cluster) -> Result<serde_json::Value, String> {
    cluster
        .client()
        .get_json("/v1/cluster")
        .await
        .map_err(|e| e.to_string())
}

/// Waits for the cluster version that enables answering from memory (P14.3).
async fn wait_for_cluster_version_9(cluster: &Cluster) {
    poll_until("cluster version 12", LEADER_BOUND, || async {
        let view = cluster_view(cluster).await?;
        (view["cluster_version"].as_u64() >= Some(LEASE_RESERVATION_SCHEMA))
            .then_some(())
            .ok_or(format!("cluster version {}", view["cluster_version"]))
    })
    .await;
}

/// The leader's last log index, as the leader reports it.
async fn last_log_index(cluster: &Cluster) -> u64 {
    let view = cluster_view(cluster).await.expect("GET /v1/cluster");
    view["last_log_index"].as_u64().expect("last_log_index")
}

/// A counter summed over the managers (whichever led counted it).
async fn counted(cluster: &Cluster, series: &str) -> f64 {
    let mut scrapes = Vec::new();
    for url in cluster.urls() {
        scrapes.push(
            scrape(&cluster.http, &url)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    summed(&scrapes, series)
}

async fn wait_for_every_shard(executors: &[&FakeExecutor]) {
    poll_until("every shard held", SETTLE_BOUND, || async {
        let held: usize = executors.iter().map(|e| e.held().len()).sum();
        let each = executors.iter().all(|e| !e.held().is_empty());
        (held == SHARDS as usize && each)
            .then_some(())
            .ok_or(format!("{held} held"))
    })
    .await;
}

fn assert_exclusive(executors: &[&FakeExecutor]) {
    let intervals: Vec<_> = executors.iter().flat_map(|e| e.intervals()).collect();
    let violations = overlaps(&intervals);
    assert!(violations.is_empty(), "I1/I2 violations: {violations:#?}");
}

/// P6.5, P6.6: once every executor has a reservation, its renewals are answered from memory and
/// the Raft log grows by the reservations only (about one entry per lease for the fleet). P6.8:
/// a registration asks for its executor's reservation, so not even the first renewal goes
/// through the log for want of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_5_renewals_in_sync_are_answered_from_memory_without_log_entries() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(options(&[]));
    cluster.wait_for_leader(LEADER_BOUND).await;
    wait_for_cluster_version_9(&cluster).await;
    let first = FakeExecutor::start(cluster.urls(), "first").await;
    let second = FakeExecutor::start(cluster.urls(), "second").await;
    wait_for_every_shard(&[&first, &second]).await;
    poll_until("renewals answered from memory", SETTLE_BOUND, || async {
        let answered = counted(&cluster, FROM_MEMORY).await;
        (answered >= 2.0)
            .then_some(())
            .ok_or(format!("{answered} answered from memory"))
    })
    .await;
    let answered_before = counted(&cluster, FROM_MEMORY).await;
    let index_before = last_log_index(&cluster).await;
    tokio::time::sleep(Duration::from_millis(4 * LEASE_MS)).await;
    let answered = counted(&cluster, FROM_MEMORY).await - answered_before;
    let entries = last_log_index(&cluster).await - index_before;
    // Two executors renewing every third of a lease for four leases: about 24 renewals.
    assert!(answered >= 12.0, "{answered} renewals answered from memory");
    assert!(
        (entries as f64) <= answered / 2.0,
        "{entries} log entries for {answered} renewals answered from memory"
    );
    assert_eq!(
        counted(&cluster, UNRESERVED).await,
        0.0,
        "renewals through the log for want of a reservation (P6.8)"
    );
    let held_before: BTreeMap<u32, u64> = first.held().into_iter().chain(second.held()).collect();
    assert_eq!(held_before.len(), SHARDS as usize, "every shard still held");
    assert_exclusive(&[&first, &second]);
}

/// P6.7: an executor answered from memory and then crashed is reaped once the copies it was told
/// end, within a lease and a tick of its expiry, although its reservation runs three leases
/// ahead: the reap carries the leader's judged expiry (`ReapLapsed`). The shards it held go to
/// the survivor at the next epoch (I2), never while it could still admit them (I1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_7_a_crashed_executor_answered_from_memory_is_reaped_within_lease_plus_tick() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(options(&[]));
    cluster.wait_for_leader(LEADER_BOUND).await;
    wait_for_cluster_version_9(&cluster).await;
    let mut victim = FakeExecutor::start(cluster.urls(), "victim").await;
    let survivor = FakeExecutor::start(cluster.urls(), "survivor").await;
    wait_for_every_shard(&[&victim, &survivor]).await;
    poll_until("renewals answered from memory", SETTLE_BOUND, || async {
        let answered = counted(&cluster, FROM_MEMORY).await;
        (answered >= 4.0)
            .then_some(())
            .ok_or(format!("{answered} answered from memory"))
    })
    .await;
    let lost = victim.held();
    victim.crash();
    let expiry = victim.lease_expiry();
    poll_until("the survivor to hold every shard", SETTLE_BOUND, || async {
        let held = survivor.held().len();
        (held == SHARDS as usize)
            .then_some(())
            .ok_or(format!("survivor holds {held}"))
    })
    .await;
    let held = survivor.held();
    for (shard, epoch) in &lost {
        assert_eq!(held[shard], epoch + 1, "shard {shard}: I2");
    }
    let rehomed_at = survivor
        .intervals()
        .iter()
        .filter(|i| lost.contains_key(&i.shard))
        .map(|i| i.start)
        .max()
        .expect("re-homed intervals");
    let after_expiry = rehomed_at.saturating_duration_since(expiry);
    assert!(
        after_expiry <= Duration::from_millis(TICK_MS + 3_000),
        "re-homed {after_expiry:?} after the lease expired (tick {TICK_MS} ms; the reservation \
         would hold it {} ms more)",
        2 * LEASE_MS
    );
    assert_exclusive(&[&victim, &survivor]);
}

/// `--renewals-from-memory=false`: every renewal is a Raft entry, as before cluster version 12.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_from_memory_off_sends_every_renewal_through_the_log() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(options(&["--renewals-from-memory=false"]));
    cluster.wait_for_leader(LEADER_BOUND).await;
    wait_for_cluster_version_9(&cluster).await;
    let only = FakeExecutor::start(cluster.urls(), "only").await;
    wait_for_every_shard(&[&only]).await;
    tokio::time::sleep(Duration::from_millis(2 * LEASE_MS)).await;
    assert_eq!(counted(&cluster, FROM_MEMORY).await, 0.0);
    assert!(
        counted(&cluster, "leasehold_renewals_total{result=\"renewed\"}").await >= 3.0,
        "the executor renewed"
    );
    assert_exclusive(&[&only]);
}
