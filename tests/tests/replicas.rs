//! Replicas over the real binaries (PROTOCOL §19): a namespace of two replicas per shard over
//! three executor processes that say their secondaries are ready as soon as they hold them
//! (`--secondaries-ready-when-held`). Every shard keeps a primary and a ready secondary on
//! another executor; a drained executor's primaries move to their ready secondaries (P19.3);
//! a SIGKILLed executor's primaries are promoted to their secondaries (P19.4) and its own
//! secondaries wait, lost, for an executor of its name, which takes them back when it starts
//! again within the restore delay. I1 and I2 are checked on the admission logs over the
//! primaries' intervals.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use leasehold_api::wire::{
    CreateNamespaceRequest, NamespacePlacement, NamespacePlacementChange, SetNamespaceRequest,
    ShardView, REPLICAS_SCHEMA,
};
use leasehold_tests::executor::ExecutorSpec;
use leasehold_tests::faults::{
    consistent_shards_in, fault_executor_args, report_figure, start_fault_cluster_with_namespace,
    wait_registered, Fleet, FAULT_LEASE, SETTLE_BOUND,
};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster};

const KV: &str = "kv";
const KV_SHARDS: u32 = 12;
/// Long enough for an executor to be started again under its name well within it.
const RESTORE_DELAY: Duration = Duration::from_secs(60);

/// An executor of `kv` reporting its secondaries ready as soon as it holds them, registered
/// under `registered_name` (its process label `label`).
fn spec(cluster: &Cluster, label: &str, registered_name: &str) -> ExecutorSpec {
    let mut spec = ExecutorSpec::local(cluster, label);
    spec.extra_args = fault_executor_args();
    spec.extra_args.extend([
        "--namespace".to_owned(),
        KV.to_owned(),
        "--secondaries-ready-when-held".to_owned(),
    ]);
    spec.registered_name = Some(registered_name.to_owned());
    spec
}

/// Every shard with a primary on one of `live`, not in a handoff, and one ready secondary on
/// another of `live`.
fn settled(shards: &[ShardView], live: &BTreeSet<String>) -> Result<(), String> {
    for shard in shards {
        let owner = shard.owner.as_deref().unwrap_or_default();
        let ready: Vec<&str> = shard
            .secondaries
            .iter()
            .filter(|s| s.ready && s.lost_for_ms.is_none() && live.contains(&s.executor_id))
            .map(|s| s.executor_id.as_str())
            .collect();
        if !live.contains(owner)
            || shard.handoff.is_some()
            || shard.secondaries.len() != 1
            || ready.len() != 1
            || ready[0] == owner
        {
            return Err(format!("shard {} not settled: {shard:?}", shard.shard));
        }
    }
    Ok(())
}

/// Every shard [`settled`], and each executor's primaries' secondaries spread over the other
/// live executors within one (P19.3): a drain then finds room where its primaries are warm.
fn declustered(shards: &[ShardView], live: &BTreeSet<String>) -> Result<(), String> {
    settled(shards, live)?;
    for owner in live {
        let counts: Vec<usize> = live
            .iter()
            .filter(|other| *other != owner)
            .map(|other| {
                shards
                    .iter()
                    .filter(|s| s.owner.as_ref() == Some(owner))
                    .filter(|s| s.secondaries.iter().any(|x| &x.executor_id == other))
                    .count()
            })
            .collect();
        let (most, fewest) = (counts.iter().max(), counts.iter().min());
        if most
            .zip(fewest)
            .is_some_and(|(most, fewest)| most - fewest > 1)
        {
            return Err(format!("{owner}'s secondaries spread {counts:?}"));
        }
    }
    Ok(())
}

/// Each primary `executor_id` holds, with its ready secondary and epoch.
fn primaries_of(shards: &[ShardView], executor_id: &str) -> BTreeMap<u32, (String, u64)> {
    shards
        .iter()
        .filter(|shard| shard.owner.as_deref() == Some(executor_id))
        .map(|shard| {
            let secondary = shard.secondaries[0].executor_id.clone();
            (shard.shard, (secondary, shard.epoch))
        })
        .collect()
}

/// Every shard in `moved` owned by the secondary it had, at a later epoch.
fn promoted(shards: &[ShardView], moved: &BTreeMap<u32, (String, u64)>) -> Result<(), String> {
    for (shard, (secondary, epoch)) in moved {
        let view = &shards[*shard as usize];
        if view.owner.as_deref() != Some(secondary.as_str()) || view.epoch <= *epoch {
            return Err(format!(
                "shard {shard} not yet on its secondary {secondary} at an epoch above {epoch}: \
                 {view:?}"
            ));
        }
    }
    Ok(())
}

/// P19.1-P19.4, I1, I2: a namespace of two replicas per shard through a drain, a SIGKILL and a
/// restart under the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p19_replicas_keep_a_warm_secondary_through_drains_crashes_and_restarts() {
    const SCENARIO: &str = "p19_replicas";
    let _serial = one_cluster_at_a_time().await;
    let (cluster, created) = start_fault_cluster_with_namespace(
        REPLICAS_SCHEMA,
        &CreateNamespaceRequest {
            name: KV.to_owned(),
            shard_count: KV_SHARDS,
            lease_duration_ms: Some(FAULT_LEASE.as_millis() as u64),
            replicas: Some(2),
            replica_restore_delay_ms: Some(RESTORE_DELAY.as_millis() as u64),
            // Budget for spreading each executor's secondaries soon after the start (P19.3).
            placement: NamespacePlacement {
                max_balance_moves_per_minute: Some(600),
                ..NamespacePlacement::default()
            },
            ..CreateNamespaceRequest::default()
        },
    )
    .await;
    let client = cluster.client();
    assert_eq!(created.replicas, Some(2));

    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let names = ["r-0", "r-1", "r-2"];
    let indices: Vec<usize> = names
        .iter()
        .map(|name| fleet.start(spec(&cluster, name, name)))
        .collect();
    let mut ids = Vec::new();
    for &index in &indices {
        ids.push(wait_registered(fleet.get(index)).await);
    }
    let mut live: BTreeSet<String> = ids.iter().cloned().collect();
    let shards = poll_until(
        "every shard with a primary and a ready secondary, spread evenly",
        SETTLE_BOUND,
        || async {
            let shards = consistent_shards_in(&client, KV).await?;
            declustered(&shards, &live).map(|()| shards)
        },
    )
    .await;

    // Back to the default budget (a move a minute, which the spreading has spent): what follows
    // is what drains, crashes and restarts do, not balance.
    client
        .set_namespace(
            KV,
            &SetNamespaceRequest {
                placement: NamespacePlacementChange {
                    max_balance_moves_per_minute: Some(None),
                    ..NamespacePlacementChange::default()
                },
                ..SetNamespaceRequest::default()
            },
        )
        .await
        .expect("kv's budget back to the default");

    // P19.3: r-1 drained: its primaries go to their ready secondaries, at new epochs.
    let drained = primaries_of(&shards, &ids[1]);
    assert!(!drained.is_empty(), "r-1 holds primaries: {shards:?}");
    client.drain(&ids[1]).await.expect("r-1 drains");
    poll_until(
        "r-1's primaries on their secondaries",
        SETTLE_BOUND,
        || async { promoted(&consistent_shards_in(&client, KV).await?, &drained) },
    )
    .await;
    client
        .undrain(&ids[1])
        .await
        .expect("r-1 takes shards again");
    let shards = poll_until("settled again after the drain", SETTLE_BOUND, || async {
        let shards = consistent_shards_in(&client, KV).await?;
        settled(&shards, &live).map(|()| shards)
    })
    .await;

    // P19.4: r-0 SIGKILLed: its primaries are promoted to their secondaries once its lease is
    // reaped; its own secondaries are lost, not placed elsewhere before the delay.
    let crashed = primaries_of(&shards, &ids[0]);
    let held_as_secondary: BTreeSet<u32> = shards
        .iter()
        .filter(|shard| shard.secondaries.iter().any(|s| s.executor_id == ids[0]))
        .map(|shard| shard.shard)
        .collect();
    assert!(
        !crashed.is_empty() && !held_as_secondary.is_empty(),
        "{shards:?}"
    );
    let killed_at = Instant::now();
    fleet.kill(indices[0]);
    live.remove(&ids[0]);
    poll_until(
        "r-0's primaries promoted to their secondaries",
        SETTLE_BOUND,
        || async { promoted(&consistent_shards_in(&client, KV).await?, &crashed) },
    )
    .await;
    report_figure(
        SCENARIO,
        "SIGKILL to every primary promoted",
        killed_at.elapsed(),
    );
    let shards = consistent_shards_in(&client, KV)
        .await
        .expect("kv's shards");
    for shard in &held_as_secondary {
        let view = &shards[*shard as usize];
        assert!(
            view.secondaries
                .iter()
                .any(|s| s.executor_id == ids[0] && s.lost_for_ms.is_some()),
            "shard {shard}'s secondary on r-0 waits, lost, for the delay: {view:?}"
        );
    }

    // P19.4: r-0 again, under its name, within the delay: it takes back what it held.
    let again = fleet.start(spec(&cluster, "r-0-again", "r-0"));
    let returned = wait_registered(fleet.get(again)).await;
    live.insert(returned.clone());
    // Taken back in the entry that registered it: nothing to copy, nothing placed elsewhere.
    let shards = consistent_shards_in(&client, KV)
        .await
        .expect("kv's shards");
    let taken_back: BTreeSet<u32> = shards
        .iter()
        .filter(|shard| {
            shard.owner.as_ref() == Some(&returned)
                || shard.secondaries.iter().any(|s| s.executor_id == returned)
        })
        .map(|shard| shard.shard)
        .collect();
    assert!(
        held_as_secondary.is_subset(&taken_back),
        "r-0 took back {taken_back:?} of {held_as_secondary:?}"
    );
    let still_lost: Vec<u32> = shards
        .iter()
        .filter(|shard| shard.secondaries.iter().any(|s| s.lost_for_ms.is_some()))
        .map(|shard| shard.shard)
        .collect();
    assert!(
        still_lost.is_empty(),
        "every lost secondary taken back by r-0, none left waiting: {still_lost:?}"
    );
    // Back as secondaries, or as primaries: the returning executor's share by count goes first
    // to the shards it is warm for (P19.3), each primary promoted from its secondary there.
    poll_until("r-0 back with its secondaries", SETTLE_BOUND, || async {
        let shards = consistent_shards_in(&client, KV).await?;
        let back: BTreeSet<u32> = shards
            .iter()
            .filter(|shard| {
                shard.owner.as_ref() == Some(&returned)
                    || shard
                        .secondaries
                        .iter()
                        .any(|s| s.executor_id == returned && s.ready)
            })
            .map(|shard| shard.shard)
            .collect();
        if !held_as_secondary.is_subset(&back) {
            return Err(format!("back {back:?}, held {held_as_secondary:?}"));
        }
        settled(&shards, &live)
    })
    .await;

    let report = fleet.check(SCENARIO);
    assert!(report.intervals > 0, "{report:?}");
    assert!(
        report.secondary_intervals > 0,
        "the secondaries' lines carry their role: {report:?}"
    );
}
