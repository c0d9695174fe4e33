//! Registration limits against real managers (PROTOCOL P13.6, P15.1; the security review's
//! finding 2: one registration with capacity 1 000 000 took 1 023 of 1 024 shards, and 200
//! registrations were accepted in 2.1 s).
//!
//! - A caller past `--registration-burst` is refused `429 rate_limited` with `Retry-After`, and
//!   nothing is registered for it; another caller (another source address) has its own bucket;
//!   the refused caller gets in once its bucket refilled.
//! - A capacity above `--max-capacity` is refused `400 invalid_request` naming the flag, and
//!   nothing is registered, sent to the leader or to a follower (which forwards it: the leader's
//!   value decides).
//! - A fleet registering at once is group-committed (cluster version 12): every registration goes
//!   through a `RegisterMany` entry, each new incarnation gets an id of its own and a repeated one
//!   the same id.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::time::{Duration, Instant};

use leasehold_tests::{free_port, one_cluster_at_a_time, Cluster, ClusterOptions};
use serde_json::{json, Value};

const LEADER_BOUND: Duration = Duration::from_secs(60);
const BURST: usize = 3;

fn cluster(extra: &[&str]) -> Cluster {
    Cluster::start(ClusterOptions {
        shard_count: 8,
        lease: "120s".to_string(),
        extra_args: extra.iter().map(|flag| flag.to_string()).collect(),
        ..ClusterOptions::default()
    })
}

/// A plaintext client whose connections come from `source` (any 127.0.0.0/8 address is this
/// host's loopback): another caller as the manager counts them.
fn client_from(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(IpAddr::from(source))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("http client")
}

struct Reply {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

async fn register(
    http: &reqwest::Client,
    base: &str,
    incarnation: &str,
    capacity: Option<u32>,
) -> Reply {
    let mut body = json!({
        "incarnation": incarnation,
        "address": format!("http://127.0.0.1:{}", free_port()),
    });
    if let Some(capacity) = capacity {
        body["capacity"] = json!(capacity);
    }
    let reply = http
        .post(format!("{base}/v1/executors"))
        .json(&body)
        .send()
        .await
        .expect("the manager answers");
    Reply {
        status: reply.status().as_u16(),
        retry_after: reply
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        body: reply.json().await.unwrap_or(Value::Null),
    }
}

/// The incarnations the leader has registered (read through its read index).
async fn incarnations(http: &reqwest::Client, base: &str) -> Vec<String> {
    let executors: Value = http
        .get(format!("{base}/v1/executors?consistent=true"))
        .send()
        .await
        .expect("GET /v1/executors")
        .json()
        .await
        .expect("executors JSON");
    let list = executors
        .as_array()
        .or_else(|| executors["executors"].as_array())
        .cloned()
        .unwrap_or_default();
    let mut incarnations: Vec<String> = list
        .iter()
        .map(|executor| executor["incarnation"].as_str().unwrap_or("").to_owned())
        .collect();
    incarnations.sort();
    incarnations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_6_registrations_are_rate_limited_per_caller() {
    let _serial = one_cluster_at_a_time().await;
    let burst = BURST.to_string();
    let mut cluster = cluster(&["--registration-burst", &burst, "--registration-rate", "1"]);
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let leader_url = cluster.url(leader);
    let caller = client_from([127, 0, 0, 1]);

    // The burst at once, then refusals: a token comes back every second, so past the burst at
    // most one more is accepted for each second the registrations took.
    let started = Instant::now();
    let mut accepted = Vec::new();
    let refused = loop {
        let incarnation = format!("burst-{}", accepted.len());
        let reply = register(&caller, &leader_url, &incarnation, None).await;
        match reply.status {
            200 => accepted.push(incarnation),
            429 => break (incarnation, reply),
            status => panic!("{incarnation}: {status} {}", reply.body),
        }
        assert!(
            accepted.len() <= BURST + 1 + started.elapsed().as_secs() as usize,
            "{} registrations accepted in {:?} with a burst of {BURST} at 1/s: not limited",
            accepted.len(),
            started.elapsed()
        );
    };
    assert!(
        accepted.len() >= BURST,
        "the burst is allowed: {accepted:?}"
    );
    let (refused_incarnation, reply) = refused;
    assert_eq!(reply.body["code"], "rate_limited", "{}", reply.body);
    assert_eq!(reply.body["retryable"], true, "{}", reply.body);
    assert_eq!(reply.body["status"], 429, "{}", reply.body);
    let retry_after: u64 = reply
        .retry_after
        .as_deref()
        .expect("Retry-After on a 429")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!(
        (1..=2).contains(&retry_after),
        "a token every second: Retry-After {retry_after}"
    );
    // Refused again at once: still nothing registered for it.
    assert_eq!(
        register(&caller, &leader_url, &refused_incarnation, None)
            .await
            .status,
        429
    );
    let mut expected = accepted.clone();
    expected.sort();
    assert_eq!(
        incarnations(&caller, &leader_url).await,
        expected,
        "only the accepted registrations were written"
    );

    // Another caller (another source address) has a bucket of its own.
    let other = client_from([127, 0, 0, 2]);
    let reply = register(&other, &leader_url, "other-caller", None).await;
    assert_eq!(reply.status, 200, "another caller: {}", reply.body);

    // The refused caller is let in once its bucket has a token again (retry later, P7.1).
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let reply = register(&caller, &leader_url, &refused_incarnation, None).await;
    assert_eq!(reply.status, 200, "after Retry-After: {}", reply.body);

    // Counted.
    let metrics = caller
        .get(format!("{leader_url}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    assert!(
        metrics
            .lines()
            .any(|line| line
                .starts_with("leasehold_registrations_rate_limited_total{reason=\"rate\"}")),
        "the refusals are counted: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p15_1_a_capacity_above_max_capacity_is_refused_and_writes_nothing() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = cluster(&["--max-capacity", "4"]);
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = *cluster.managers.keys().find(|id| **id != leader).unwrap();
    let (leader_url, follower_url) = (cluster.url(leader), cluster.url(follower));
    let http = client_from([127, 0, 0, 1]);

    for (to, base) in [("leader", &leader_url), ("follower", &follower_url)] {
        let reply = register(&http, base, &format!("big-{to}"), Some(5)).await;
        assert_eq!(reply.status, 400, "to the {to}: {}", reply.body);
        assert_eq!(reply.body["code"], "invalid_request", "{}", reply.body);
        let detail = reply.body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("--max-capacity") && detail.contains('4'),
            "the detail names the limit and the flag: {detail}"
        );
    }
    assert_eq!(
        incarnations(&http, &leader_url).await,
        Vec::<String>::new(),
        "nothing was registered"
    );
    let reply = register(&http, &follower_url, "at-the-limit", Some(4)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        incarnations(&http, &leader_url).await,
        vec!["at-the-limit".to_owned()]
    );
}

/// The value of a metric line `name value` (no labels) on the leader's `/metrics`.
fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// §1, P4.4, P7.2: registrations arriving together are committed together (cluster version 12),
/// and each is answered as if it were alone: new incarnations get distinct ids, a repeat the id of
/// the first. How many entries they took depends on timing, so only the total is asserted here;
/// the batching itself is measured in docs/BENCHMARKS.md (B9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_4_registrations_arriving_together_are_committed_together() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = cluster(&[
        "--registration-burst",
        "1000",
        "--registration-rate",
        "1000",
    ]);
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let leader_url = cluster.url(leader);
    let http = client_from([127, 0, 0, 1]);
    leasehold_tests::poll_until("cluster version 12", LEADER_BOUND, || async {
        let info: Value = http
            .get(format!("{leader_url}/v1/cluster"))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if info["cluster_version"].as_u64() >= Some(8) {
            Ok(())
        } else {
            Err(format!("{info}"))
        }
    })
    .await;

    const NEW: usize = 48;
    const REPEATED: usize = 8;
    let sent: Vec<String> = (0..NEW)
        .map(|n| format!("together-{n}"))
        .chain((0..REPEATED).map(|n| format!("together-{n}")))
        .collect();
    let replies = futures_util::future::join_all(sent.iter().map(|incarnation| {
        let (http, leader_url) = (&http, &leader_url);
        async move { register(http, leader_url, incarnation, None).await }
    }))
    .await;
    let mut id_of: std::collections::BTreeMap<&str, String> = std::collections::BTreeMap::new();
    for (incarnation, reply) in sent.iter().zip(&replies) {
        assert_eq!(reply.status, 200, "{incarnation}: {}", reply.body);
        let id = reply.body["executor_id"]
            .as_str()
            .expect("an id")
            .to_owned();
        if let Some(first) = id_of.get(incarnation.as_str()) {
            assert_eq!(
                &id, first,
                "P4.4: a repeated incarnation is the same executor"
            );
        }
        id_of.insert(incarnation, id);
    }
    let mut ids: Vec<&String> = id_of.values().collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        NEW,
        "§1: one id per incarnation, none minted twice: {id_of:?}"
    );
    let mut expected: Vec<String> = (0..NEW).map(|n| format!("together-{n}")).collect();
    expected.sort();
    assert_eq!(incarnations(&http, &leader_url).await, expected);

    let metrics = http
        .get(format!("{leader_url}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    let carried = metric(&metrics, "leasehold_registration_batch_size_sum");
    let entries = metric(&metrics, "leasehold_registration_batch_size_count").unwrap_or(0.0);
    assert_eq!(
        carried,
        Some((NEW + REPEATED) as f64),
        "every registration went through a RegisterMany entry"
    );
    assert!(
        (1.0..=(NEW + REPEATED) as f64).contains(&entries),
        "{entries} entries"
    );
    eprintln!(
        "[registrations] {} registrations arriving together took {entries} entries",
        NEW + REPEATED
    );
}
