//! The inputs of placement by load and capacity (PROTOCOL P15.1) with the real binaries: an
//! executor's `--capacity` is registered once the cluster version takes it (P14.3) and shown in
//! `GET /v1/executors`, and the binary's renewals report the rate of `/v1/work` requests it
//! admits per shard, which the managers accept (its status shows the loads of its last granted
//! renewal). The planner that uses them is not part of these tests.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use leasehold_tests::executor::{ExecutorProcess, ExecutorSpec};
use leasehold_tests::{
    one_cluster_at_a_time, poll_until, wait_for_cluster_version, Cluster, ClusterOptions,
};
use serde_json::Value;

const SHARDS: u32 = 16;
const LEADER_BOUND: Duration = Duration::from_secs(20);
/// The leader raises the cluster version within a probe round or two of formation (2 s each).
const VERSION_BOUND: Duration = Duration::from_secs(30);
/// Registration, planning and a few renewals (a third of the 4 s test lease apart) on a loaded
/// 2-core machine.
const SETTLE_BOUND: Duration = Duration::from_secs(60);
/// The cluster version that takes capacities and loads (`leasehold_api::wire::CAPACITY_SCHEMA`).
const CAPACITY_SCHEMA: u32 = 4;
/// Requests sent to the executor's demo workload for one key.
const REQUESTS: usize = 40;

/// `GET /v1/executors` on manager `id`.
async fn executors(cluster: &Cluster, id: u64) -> Result<Vec<Value>, String> {
    let url = format!("{}/v1/executors", cluster.url(id));
    let reply = cluster
        .http
        .get(&url)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let body: Value = reply.json().await.map_err(|e| e.to_string())?;
    body.as_array()
        .cloned()
        .ok_or_else(|| format!("not a list: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p15_1_an_executors_capacity_is_registered_and_its_renewals_report_its_request_rate() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    wait_for_cluster_version(&mut cluster, CAPACITY_SCHEMA, VERSION_BOUND).await;
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;

    let executor = ExecutorProcess::start_spec(
        cluster.dir.path(),
        ExecutorSpec {
            extra_args: vec!["--capacity".into(), "2".into()],
            ..ExecutorSpec::local(&cluster, "heavy")
        },
    );
    let status = poll_until(
        "the executor to admit every shard",
        SETTLE_BOUND,
        || async {
            let status = executor.status().await?;
            let held = status["shards"].as_array().map_or(0, Vec::len);
            match status["admission"] == "admitting" && held == SHARDS as usize {
                true => Ok(status),
                false => Err(format!("{status}")),
            }
        },
    )
    .await;
    assert_eq!(status["capacity"], 2, "{status}");
    let executor_id = status["executor_id"].clone();
    let registered = executors(&cluster, leader).await.unwrap();
    let view = registered
        .iter()
        .find(|view| view["executor_id"] == executor_id)
        .unwrap_or_else(|| panic!("{registered:?}"));
    assert_eq!(
        view["capacity"], 2,
        "P15.1: registered with its capacity: {view}"
    );

    // Work for one key; the renewals after it report that key's shard busy.
    let mut shard = None;
    for _ in 0..REQUESTS {
        let (code, body) = executor.work("placement-key").await.unwrap();
        assert_eq!(code, 200, "{body}");
        shard = body["shard"].as_u64();
    }
    let shard = shard.expect("the key's shard");
    let reported = poll_until(
        "a granted renewal to carry the request rate of the key's shard",
        SETTLE_BOUND,
        || async {
            let status = executor.status().await?;
            let loads = status["reported_loads"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let busy = loads.iter().any(|entry| {
                entry["shard"].as_u64() == Some(shard) && entry["load"].as_f64() > Some(0.0)
            });
            match busy {
                true => Ok(loads),
                false => Err(format!("{status}")),
            }
        },
    )
    .await;
    // One load per held shard; only the worked shard's is above zero.
    assert_eq!(reported.len(), SHARDS as usize, "{reported:?}");
    for entry in &reported {
        let load = entry["load"].as_f64().unwrap();
        if entry["shard"].as_u64() == Some(shard) {
            assert!(load > 0.0, "{entry}");
        } else {
            assert_eq!(load, 0.0, "{entry}");
        }
    }
    // The renewals carrying loads were accepted: the executor keeps its registration.
    let registered = executors(&cluster, leader).await.unwrap();
    assert!(
        registered
            .iter()
            .any(|view| view["executor_id"] == executor_id),
        "{registered:?}"
    );
}
