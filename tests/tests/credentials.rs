//! Executor credentials (PROTOCOL P13.4) where it takes real processes, against real managers in
//! plaintext (P13.5: roles are not checked without TLS, credentials are): a follower forwards
//! the credential with the request and refuses a wrong one from the headers; the secret never
//! appears in a log (`--log-format json`), a reply, `/v1/state`, `/metrics` or a backup, neither
//! the test's nor the one a real executor made for itself. Which requests the credential admits,
//! and that every other one is `401` and changes nothing, is `manager/tests/credentials.rs`, in
//! process.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use leasehold_api::wire::{Credential, RegisterRequest};
use leasehold_tests::executor::{wait_for_even_split, ExecutorProcess, ExecutorSpec};
use leasehold_tests::proxy::ProxySet;
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};
use serde_json::{json, Value};

const LEADER_BOUND: Duration = Duration::from_secs(60);
const SETTLE_BOUND: Duration = Duration::from_secs(90);
const SHARDS: u32 = 8;

/// P13.4: a credential, the test's and the one a real executor made for itself, travels with
/// the requests a follower forwards and is checked by the leader, and appears in no reply,
/// state, metric, backup or log over the executor's whole life.
/// Needs processes: a follower's forward, and the logs of real manager and executor processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_4_a_credential_travels_through_a_follower_and_appears_in_no_log() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        extra_args: json_logs(),
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    // A real executor registers with a credential of its own and renews with it, through a
    // proxy that shows the test that credential.
    let proxies = ProxySet::start(&cluster.urls(), 1, None)
        .await
        .expect("start the fault proxies");
    let mut spec = ExecutorSpec::local(&cluster, "holder");
    spec.managers = proxies.urls();
    spec.extra_args = json_logs();
    let mut holder = ExecutorProcess::start_spec(cluster.dir.path(), spec);
    wait_for_even_split(&[&holder], SHARDS, SETTLE_BOUND).await;
    let holders_own = poll_until(
        "the holder to renew with its credential",
        SETTLE_BOUND,
        || {
            let seen = proxies.stats().bearer_credentials;
            async move {
                (!seen.is_empty())
                    .then_some(seen)
                    .ok_or("no renewal with a credential yet".to_string())
            }
        },
    )
    .await;

    let client = cluster.client();
    let secret = Credential::from_random(rand::random());
    let grant = client
        .register(&RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: "credential-test".into(),
            address: "http://127.0.0.1:9".into(),
            name: None,
            credential: Some(secret.clone()),
            capacity: None,
            app_version: None,
            labels: Default::default(),
        })
        .await
        .expect("a registration with a credential (cluster version 12)");
    let id = grant.executor_id.clone();
    // The holder renews with it (the table of requests without it is in process).
    let renewed = client
        .renew(
            &id,
            Some(&secret),
            &leasehold_api::RenewRequest {
                claim_runs: None,
                claims: Vec::new(),
                revision: 0,
                loads: None,
                accept_unchanged: false,
                ready: Vec::new(),
            },
        )
        .await
        .expect("the holder renews");
    assert_eq!(renewed.executor_id, id);

    // A follower forwards the credential with the request it forwards: the leader checks it.
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = [1, 2, 3].into_iter().find(|&m| m != leader).unwrap();
    let forwarded = cluster
        .http
        .post(format!("{}/v1/executors/{id}/renew", cluster.url(follower)))
        .bearer_auth(secret.expose())
        .json(&json!({"claims": [], "revision": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        forwarded.status(),
        200,
        "P13.4: a renewal with its credential through follower {follower}: {:?}",
        forwarded.text().await
    );

    // The secret is nowhere: replies, state, metrics, a backup, any manager's log.
    let mut seen = Vec::new();
    for path in [
        "/v1/state",
        "/v1/executors",
        "/metrics",
        "/v1/backup",
        "/v1/cluster",
    ] {
        let body = cluster
            .http
            .get(format!("{}{path}", cluster.url(1)))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        seen.push((path.to_string(), body));
    }
    client
        .deregister(&id, Some(&secret))
        .await
        .expect("the holder deregisters");
    // The real executor deregisters too (SIGTERM), so its log covers the whole life of its
    // credential.
    holder.signal_terminate();
    let exit = holder.wait_exit(SETTLE_BOUND).await;
    assert!(exit.success(), "the holder stopped with {exit:?}");
    let mut logs = Vec::new();
    for manager in [1, 2, 3] {
        logs.push((
            format!("manager {manager}'s log"),
            cluster.manager(manager).log(),
        ));
    }
    logs.push(("the executor's log".into(), holder.log()));
    for (where_, text) in &logs {
        // What is scanned is the JSON output operators ship to their log stores.
        let lines: Vec<&str> = text.lines().filter(|line| line.starts_with('{')).collect();
        // A follower may log only a few lines in the test's life; one is enough to scan, and
        // the executor's and the leader's logs carry the credential's whole life.
        assert!(
            !lines.is_empty(),
            "{where_} has JSON log lines to scan:\n{text}"
        );
        for line in &lines {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|e| panic!("{where_}: not a JSON log line ({e}): {line}"));
        }
    }
    seen.extend(logs);
    let mut secrets = vec![secret.expose().to_owned()];
    secrets.extend(holders_own);
    for (where_, text) in &seen {
        for (n, credential) in secrets.iter().enumerate() {
            assert!(
                !text.contains(credential.as_str()),
                "P13.4: credential {n} appears in {where_}"
            );
        }
    }
}

/// `--log-format json` for managers and executors: the secret scan reads that output.
fn json_logs() -> Vec<String> {
    vec!["--log-format".to_string(), "json".to_string()]
}

/// P13.4, P13.6 (the security review's finding 4): a wrong credential is refused on a follower
/// too, from its headers, before its body is read: a body past what the cluster's shard count
/// allows, which the leader refuses unread with the right credential (`413`, in process), is
/// `401` with a wrong one. (Unknown ids and the body bound on the leader are in process.)
/// Needs processes: a follower, which checks what it can before it forwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_4_a_follower_refuses_a_wrong_credential_from_its_headers() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let client = cluster.client();
    let secret = Credential::from_random(rand::random());
    let grant = client
        .register(&RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: "bounds-test".into(),
            address: "http://127.0.0.1:9".into(),
            name: None,
            credential: Some(secret.clone()),
            capacity: None,
            app_version: None,
            labels: Default::default(),
        })
        .await
        .expect("registered");
    let id = grant.executor_id;

    let too_big = leasehold_api::wire::renew_body_bytes(SHARDS) + 1;
    let mut body = b"{\"claims\": [], \"revision\": 0}".to_vec();
    body.resize(too_big, b' ');
    let follower = [1, 2, 3].into_iter().find(|&m| m != leader).unwrap();
    // The follower decides from the credential it has applied: it must know the executor.
    poll_until(
        "the follower to know the executor",
        SETTLE_BOUND,
        || async {
            let url = format!("{}/v1/executors/{id}", cluster.url(follower));
            match cluster.http.get(url).send().await {
                Ok(reply) if reply.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let wrong = Credential::from_random(rand::random());
    let reply = cluster
        .http
        .post(format!("{}/v1/executors/{id}/renew", cluster.url(follower)))
        .header("authorization", format!("Bearer {}", wrong.expose()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the follower answers");
    let status = reply.status().as_u16();
    let problem: Value = reply.json().await.unwrap_or(Value::Null);
    assert_eq!(
        (status, problem["code"].as_str()),
        (401, Some("unauthenticated")),
        "P13.4: refused on follower {follower}: {problem}"
    );
}
