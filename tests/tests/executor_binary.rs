//! The real `leasehold-executor` binary against a real three-manager cluster (PROTOCOL §3, §5,
//! §8, §9, §12). Every test ends by checking the executors' admission logs for exclusivity (I1)
//! and fencing epochs (I2) with the shared checker in `leasehold_tests::executor`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use leasehold_tests::executor::{
    admission_logs, check_admission_exclusivity, status_shards, wait_for_even_split, AdmissionEdge,
    ExecutorProcess,
};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};

const SHARDS: u32 = 64;
/// `leasehold_tests::TEST_LEASE`.
const LEASE: Duration = Duration::from_secs(4);
const LEADER_BOUND: Duration = Duration::from_secs(20);
/// Registration, planning, pushes and handoffs on a loaded 2-core machine.
const SPLIT_BOUND: Duration = Duration::from_secs(60);
/// A crashed executor's shards re-home within lease + tick (I4), plus slack for load.
const CRASH_REHOME_BOUND: Duration = Duration::from_secs(30);
const EXIT_BOUND: Duration = Duration::from_secs(15);

async fn cluster() -> Cluster {
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    cluster
}

/// Waits until `executor` alone admits every shard; returns how long that took from `since`.
async fn wait_for_all_shards(
    executor: &ExecutorProcess,
    since: Instant,
    bound: Duration,
) -> Duration {
    poll_until(
        &format!("executor {} to admit all {SHARDS} shards", executor.name),
        bound,
        || async {
            let shards = executor.admitted_shards().await?;
            if shards.len() == SHARDS as usize {
                Ok(since.elapsed())
            } else {
                Err(format!("{} shards admitted", shards.len()))
            }
        },
    )
    .await
}

/// P5.4: two executors end up with 32 shards each, the second joining without waiting for a
/// lease to lapse; the shards it takes from the first are handed over through revokes with no
/// overlap in admission (P5.2, I1) and a new epoch (I2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_4_two_executors_split_the_shards_evenly_without_overlap() {
    let _serial = one_cluster_at_a_time().await;
    let cluster = cluster().await;
    let first = ExecutorProcess::start(&cluster, "a");
    wait_for_all_shards(&first, Instant::now(), SPLIT_BOUND).await;
    let second = ExecutorProcess::start(&cluster, "b");
    poll_until("executor b to register", SPLIT_BOUND, || async {
        let status = second.status().await?;
        if status["executor_id"].is_string() {
            Ok(())
        } else {
            Err(format!("status {status}"))
        }
    })
    .await;
    let registered_at = Instant::now();
    let split = wait_for_even_split(&[&first, &second], SHARDS, SPLIT_BOUND).await;
    let took = registered_at.elapsed();
    eprintln!("even split {took:?} after the second executor registered");
    assert_eq!(split[0].len(), 32);
    assert_eq!(split[1].len(), 32);
    // Handed over on revoke acknowledgements (P5.2), not by waiting for a's grants to expire.
    assert!(took < LEASE, "the split took {took:?}, a lease or more");

    // The demo workload routes by the same split.
    let key = "order-17";
    let (status_a, body_a) = first.work(key).await.unwrap();
    let (status_b, body_b) = second.work(key).await.unwrap();
    let mut statuses = [status_a, status_b];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 421], "a: {body_a}, b: {body_b}");
    let misdirected = if status_a == 421 { &body_a } else { &body_b };
    let owner = if status_a == 200 { &first } else { &second };
    assert_eq!(misdirected["owner_address"], owner.url(), "{misdirected}");

    let report = check_admission_exclusivity(&admission_logs(&[(&first, None), (&second, None)]))
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("admission logs: {report:?}");
    assert_eq!(report.shards, SHARDS as usize);
    assert!(report.handoffs >= 32, "{report:?}");
}

/// P17.2, P3.7: SIGTERM drains the executor with its own credential: it keeps admitting each
/// shard until that shard's handoff to the survivor completes, then deregisters; the shards
/// move at once (well under the lease), each stopped for its revoke rather than for the
/// shutdown, with no overlap in the admission logs (I1, I2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p17_2_sigterm_drains_the_shards_to_the_survivor_then_deregisters() {
    let _serial = one_cluster_at_a_time().await;
    let cluster = cluster().await;
    let mut leaving = ExecutorProcess::start(&cluster, "leaving");
    let staying = ExecutorProcess::start(&cluster, "staying");
    wait_for_even_split(&[&leaving, &staying], SHARDS, SPLIT_BOUND).await;
    let leaving_shards = status_shards(&leaving.status().await.unwrap());

    let terminated_at = Instant::now();
    leaving.signal_terminate();
    let took = wait_for_all_shards(&staying, terminated_at, SPLIT_BOUND).await;
    eprintln!("shards moved {took:?} after SIGTERM");
    assert!(
        took < LEASE,
        "shards moved after {took:?}, not at once (lease {LEASE:?})"
    );
    let exit = leaving.wait_exit(EXIT_BOUND).await;
    assert!(exit.success(), "graceful stop exited with {exit:?}");
    assert!(
        leaving.log().contains("deregistered"),
        "no deregistration in the log:\n{}",
        leaving.log()
    );

    assert!(
        leaving
            .log()
            .contains("drained: every shard was handed over"),
        "no completed self-drain in the log:\n{}",
        leaving.log()
    );

    // Every shard it held was handed over by its revoke (P5.2), none cut off by the shutdown.
    let records = leaving.admission_log().unwrap();
    let stopped_by_revoke: BTreeSet<u32> = records
        .iter()
        .filter(|r| r.event == AdmissionEdge::Stop && r.reason == "revoked")
        .map(|r| r.shard)
        .collect();
    assert!(
        stopped_by_revoke.is_superset(&leaving_shards),
        "held {leaving_shards:?}, handed over by revoke {stopped_by_revoke:?}"
    );
    assert!(
        !records.iter().any(|r| r.reason == "shutdown"),
        "a shard was stopped by the shutdown, not handed over"
    );
    let report =
        check_admission_exclusivity(&admission_logs(&[(&leaving, None), (&staying, None)]))
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.handoffs >= leaving_shards.len(), "{report:?}");
}

/// I4 and P3.2/P3.8: a SIGKILLed executor cannot deregister; its shards move to the survivor
/// only after its lease, and the survivor never admits one while the dead executor could have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i4_sigkill_moves_shards_after_the_lease() {
    let _serial = one_cluster_at_a_time().await;
    let cluster = cluster().await;
    let mut crashing = ExecutorProcess::start(&cluster, "crashing");
    let surviving = ExecutorProcess::start(&cluster, "surviving");
    wait_for_even_split(&[&crashing, &surviving], SHARDS, SPLIT_BOUND).await;

    let killed_at = Instant::now();
    crashing.kill();
    // CLOCK_MONOTONIC after the process was reaped: an upper bound on when it stopped admitting.
    let dead_by_ns = surviving.status().await.unwrap()["monotonic_ns"]
        .as_u64()
        .expect("status carries monotonic_ns");
    let took = wait_for_all_shards(&surviving, killed_at, CRASH_REHOME_BOUND).await;
    eprintln!("shards moved {took:?} after SIGKILL");
    // The dead executor renewed at most a third of its lease before the kill, so at least two
    // thirds remained on the manager's clock; half a lease is a margin for scheduling.
    assert!(
        took >= LEASE / 2,
        "shards moved {took:?} after the kill, before the lease could have lapsed"
    );

    let report = check_admission_exclusivity(&admission_logs(&[
        (&crashing, Some(dead_by_ns)),
        (&surviving, None),
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.handoffs >= (SHARDS / 2) as usize, "{report:?}");
}
