//! Deliveries at fleet scale (P5.2, P5.3). 150 executors that never renew join a three-manager
//! cluster at once (1 024 shards, a 60 s lease), so only pushes and revokes can move shards: no
//! renewal claim acknowledges a revoke and no renewal reply repairs a lost push, and a handoff
//! that waits for an expiry waits a whole lease. Every shard must reach its owner, and every
//! handoff complete by release, far inside the lease. Two rules are pinned:
//!
//! - a delivery round sends everything it planned, at most a bounded number at once: with the
//!   first 64 taken and the rest dropped, the executors past 64 never learn their sets;
//! - a revoke overtaken by a newer push is answered released for the shards that push already
//!   took away (the push at the newer revision often arrives first: they are sent concurrently);
//!   answered "ignored", the handoff would wait for the old owner's expiry.
//!
//! The executors answer pushes and revokes with the executor library's own rules
//! (`leasehold_executor::assignment`), through the fake executor.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_api::wire::ShardView;
use leasehold_tests::fake_executor::{overlaps, FakeExecutor, FakeOptions};
use leasehold_tests::{one_cluster_at_a_time, Cluster, ClusterOptions};
use tokio::task::JoinSet;
use tokio::time::Instant;

const EXECUTORS: usize = 150;
const SHARDS: u32 = 1024;
const LEASE: &str = "60s";
const LEADER_BOUND: Duration = Duration::from_secs(30);
/// A third of the lease: anything that waited for an expiry (or would need a renewal, at 20 s)
/// cannot settle within it; what is delivered by push and release settles in a few seconds.
const SETTLE_BOUND: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

/// What is still unsettled, or None: every shard owned, no handoff in flight, counts even, and
/// each executor holding exactly what the manager records for it.
fn unsettled(shards: &[ShardView], fleet: &[FakeExecutor]) -> Option<String> {
    let in_handoff = shards.iter().filter(|s| s.handoff.is_some()).count();
    let unowned = shards.iter().filter(|s| s.owner.is_none()).count();
    if in_handoff + unowned > 0 {
        let examples: Vec<String> = shards
            .iter()
            .filter_map(|s| Some((s, s.handoff.as_ref()?)))
            .take(3)
            .map(|(shard, handoff)| {
                let owner = shard.owner.as_deref().unwrap_or("-");
                let held = fleet
                    .iter()
                    .find(|e| e.executor_id == owner)
                    .map(|e| (e.held().contains_key(&shard.shard), e.revision()));
                format!(
                    "shard {} from {owner} to {:?} revoked at {} (owner holds it, at revision: {held:?})",
                    shard.shard, handoff.to, handoff.revoke_revision
                )
            })
            .collect();
        return Some(format!(
            "{in_handoff} shards in handoff, {unowned} unowned; e.g. {}",
            examples.join("; ")
        ));
    }
    let mut recorded: BTreeMap<&str, BTreeMap<u32, u64>> = BTreeMap::new();
    for shard in shards {
        if let Some(owner) = &shard.owner {
            recorded
                .entry(owner.as_str())
                .or_default()
                .insert(shard.shard, shard.epoch);
        }
    }
    let counts: Vec<usize> = fleet
        .iter()
        .map(|e| {
            recorded
                .get(e.executor_id.as_str())
                .map_or(0, BTreeMap::len)
        })
        .collect();
    let (min, max) = (counts.iter().min()?, counts.iter().max()?);
    if max - min > 1 {
        return Some(format!("uneven: {min}..{max} shards per executor"));
    }
    let undelivered = fleet
        .iter()
        .filter(|e| {
            let expected = recorded
                .get(e.executor_id.as_str())
                .cloned()
                .unwrap_or_default();
            e.held() != expected
        })
        .count();
    (undelivered > 0).then(|| format!("{undelivered} executors do not hold their recorded set"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_2_a_fleet_joining_at_once_settles_by_push_and_release_alone() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        lease: LEASE.to_string(),
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;

    let mut joining = JoinSet::new();
    for index in 0..EXECUTORS {
        let managers = cluster.urls();
        joining.spawn(async move {
            let name = format!("fleet-{index}");
            FakeExecutor::start_with(managers, &name, FakeOptions { renew: false }).await
        });
    }
    let mut fleet = Vec::new();
    while let Some(joined) = joining.join_next().await {
        fleet.push(joined.expect("an executor registered"));
    }
    let joined_at = Instant::now();

    let client = cluster.client();
    let mut last;
    let settled_after = loop {
        match client.shards(true).await {
            Ok(shards) => match unsettled(&shards, &fleet) {
                None => break joined_at.elapsed(),
                Some(why) => last = why,
            },
            Err(error) => last = error.to_string(),
        }
        assert!(
            joined_at.elapsed() < SETTLE_BOUND,
            "{EXECUTORS} executors that never renew did not settle within {SETTLE_BOUND:?} \
             of joining (a handoff or a push waited for a renewal or an expiry): {last}"
        );
        tokio::time::sleep(POLL).await;
    };
    eprintln!(
        "{EXECUTORS} executors, {SHARDS} shards: settled {:.2} s after the last joined",
        settled_after.as_secs_f64()
    );

    let intervals: Vec<_> = fleet.iter().flat_map(FakeExecutor::intervals).collect();
    assert_eq!(overlaps(&intervals), Vec::<String>::new(), "I1/I2");
    let log = cluster.manager(leader).log();
    assert!(
        !log.contains("handoffs completed on the old owner's expiry"),
        "a handoff completed on expiry instead of release"
    );
    assert!(
        !log.contains("revoke answered ignored for a handoff still in progress"),
        "an executor answered a current handoff's revoke as ignored"
    );
}
