//! Placement by load with the real binaries (PROTOCOL §15): skewed `/v1/work` traffic on one
//! executor's shards makes the leader move shards for balance (P15.2), at most the budget a
//! minute (P15.3), each through the P5.2 handoff, and the admission logs show no two executors
//! admitting one shard at once (I1) and fencing epochs that only rise (I2). The leader shows
//! loads, utilisation and hot shards in `/v1/executors` and `/v1/shards`, and counts moves by
//! reason in its metrics.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_tests::executor::{
    admission_logs, check_admission_exclusivity, wait_for_even_split, ExecutorProcess, ExecutorSpec,
};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};
use serde_json::Value;

const SHARDS: u32 = 8;
const LEADER_BOUND: Duration = Duration::from_secs(20);
/// Registration and the first even split on a loaded 2-core machine.
const SPLIT_BOUND: Duration = Duration::from_secs(60);
/// Loads reach the leader within a renewal (a third of the 4 s test lease), and the budget of
/// `MAX_BALANCE_MOVES` a minute moves the two shards the balance needs within a minute; the
/// bound is generous for a loaded machine.
const BALANCE_BOUND: Duration = Duration::from_secs(150);
/// Moves for balance a minute (`--max-balance-moves`).
const MAX_BALANCE_MOVES: &str = "2";
/// Pause between two rounds of work requests (one per busy key to each executor).
const WORK_INTERVAL: Duration = Duration::from_millis(20);

/// A key for each shard, by `leasehold_api::shard_for_key`.
fn key_for(shard: u32) -> String {
    let count = NonZeroU32::new(SHARDS).unwrap();
    (0..)
        .map(|n| format!("key-{n}"))
        .find(|key| leasehold_api::shard_for_key(key.as_bytes(), count) == shard)
        .unwrap()
}

/// `GET {path}?consistent=true` on manager `id`: answered by the leader, who knows the loads.
async fn leader_view(cluster: &Cluster, id: u64, path: &str) -> Result<Value, String> {
    let url = format!("{}{path}?consistent=true", cluster.url(id));
    let reply = cluster
        .http
        .get(&url)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    reply.json().await.map_err(|e| e.to_string())
}

/// The value of `leasehold_shard_moves_by_reason_total{reason=...}` in manager `id`'s metrics.
async fn moves_for(cluster: &Cluster, id: u64, reason: &str) -> Result<u64, String> {
    let url = format!("{}/metrics", cluster.url(id));
    let text = cluster
        .http
        .get(&url)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let prefix = format!("leasehold_shard_moves_by_reason_total{{reason=\"{reason}\"}} ");
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p15_2_skewed_work_moves_shards_for_balance_without_overlap() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        extra_args: vec!["--max-balance-moves".into(), MAX_BALANCE_MOVES.into()],
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let busy_executor =
        ExecutorProcess::start_spec(cluster.dir.path(), ExecutorSpec::local(&cluster, "busy"));
    let idle_executor =
        ExecutorProcess::start_spec(cluster.dir.path(), ExecutorSpec::local(&cluster, "idle"));
    // Without traffic every load is zero: placement goes by count (P15.2, P5.4).
    let split = wait_for_even_split(&[&busy_executor, &idle_executor], SHARDS, SPLIT_BOUND).await;
    let busy_shards: BTreeSet<u32> = split[0].clone();
    let busy_keys: Vec<String> = busy_shards.iter().map(|&shard| key_for(shard)).collect();

    // Work for every shard the first executor holds, sent to both executors: only the owner
    // admits it (the other answers 421), so the load follows the shard wherever it goes.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let urls = [busy_executor.url(), idle_executor.url()];
        let http = reqwest::Client::new();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for key in &busy_keys {
                    for url in &urls {
                        let _ = http.get(format!("{url}/v1/work?key={key}")).send().await;
                    }
                }
                tokio::time::sleep(WORK_INTERVAL).await;
            }
        })
    };

    // P15.2: the leader moves busy shards to the idle executor until both carry about half.
    let balanced = poll_until(
        "both executors to carry load within the band",
        BALANCE_BOUND,
        || async {
            let executors = leader_view(&cluster, leader, "/v1/executors").await?;
            let utilisations: Vec<f64> = executors
                .as_array()
                .ok_or_else(|| format!("{executors}"))?
                .iter()
                .map(|view| view["utilisation"].as_f64().unwrap_or(0.0))
                .collect();
            let mean = utilisations.iter().sum::<f64>() / utilisations.len() as f64;
            match mean > 0.0 && utilisations.iter().all(|u| (u - mean).abs() <= mean * 0.25) {
                true => Ok(executors),
                false => Err(format!("utilisations {utilisations:?}")),
            }
        },
    )
    .await;
    eprintln!("balanced: {balanced}");
    let balance_moves = moves_for(&cluster, leader, "balance").await.unwrap();
    assert!(balance_moves >= 1, "moves for balance were counted");
    let shards = leader_view(&cluster, leader, "/v1/shards").await.unwrap();
    let with_load = shards
        .as_array()
        .unwrap()
        .iter()
        .filter(|view| view["load"].as_f64().is_some_and(|load| load > 0.0))
        .count();
    assert_eq!(
        with_load,
        busy_shards.len(),
        "the leader shows the busy shards' loads: {shards}"
    );

    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();
    // I1, I2: every move was a handoff; no shard was admitted by both at once.
    let report = check_admission_exclusivity(&admission_logs(&[
        (&busy_executor, None),
        (&idle_executor, None),
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.handoffs >= 1, "{report:?}");
    eprintln!("admission logs: {report:?}");
}
