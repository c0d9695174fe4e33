//! Executor credentials (PROTOCOL P13.4), against real managers in plaintext (P13.5: roles are
//! not checked without TLS, credentials are). An executor that registered with a credential is
//! renewed, released and deregistered only by a request presenting it; every other request is
//! `401 unauthenticated` and changes nothing, so a forged release can no longer hand a shard on
//! while its owner still admits it (I1). A replayed registration with another credential is
//! `409`. The secret never appears in a log (`--log-format json`), a reply, `/v1/state`,
//! `/metrics` or a backup, neither the test's nor the one a real executor made for itself.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use leasehold_api::wire::{Credential, RegisterRequest};
use leasehold_tests::executor::{wait_for_even_split, ExecutorProcess, ExecutorSpec};
use leasehold_tests::proxy::ProxySet;
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};
use reqwest::Method;
use serde_json::{json, Value};

const LEADER_BOUND: Duration = Duration::from_secs(60);
const SETTLE_BOUND: Duration = Duration::from_secs(90);
const SHARDS: u32 = 8;

/// One request of the table: what it is, and how it presents itself.
struct Forged {
    what: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    authorization: Option<String>,
}

async fn send(cluster: &Cluster, request: &Forged) -> (u16, Value) {
    let mut builder = cluster.http.request(
        request.method.clone(),
        format!("{}{}", cluster.url(1), request.path),
    );
    if let Some(body) = &request.body {
        builder = builder.json(body);
    }
    if let Some(authorization) = &request.authorization {
        builder = builder.header("authorization", authorization);
    }
    let reply = builder.send().await.expect("the manager answers");
    let status = reply.status().as_u16();
    (status, reply.json().await.unwrap_or(Value::Null))
}

/// The parts of `/v1/state` a refused request must leave as they were: the executors (ids,
/// incarnations, sets) and the shards (owners, epochs, handoffs). Lease clocks tick and the
/// real executor keeps renewing, so neither they nor the revision are compared.
async fn assignment(cluster: &Cluster) -> Value {
    let state: Value = cluster
        .http
        .get(format!("{}/v1/state?consistent=true", cluster.url(1)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut executors = state["executors"].as_array().cloned().unwrap_or_default();
    for executor in &mut executors {
        executor
            .as_object_mut()
            .unwrap()
            .remove("lease_remaining_ms");
    }
    let mut shards = state["shards"].as_array().cloned().unwrap_or_default();
    for shard in &mut shards {
        if let Some(handoff) = shard.get_mut("handoff").and_then(Value::as_object_mut) {
            handoff.remove("completes_by_expiry_in_ms");
        }
    }
    json!({"executors": executors, "shards": shards})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_4_only_the_holder_of_an_executors_credential_may_renew_release_or_deregister_it() {
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
    let other = Credential::from_random(rand::random());
    let grant = client
        .register(&RegisterRequest {
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
    // Shards move to it (pushes to its address fail, which does not matter here), so a forged
    // release has something to hand on.
    let mine = poll_until("the test executor to hold shards", SETTLE_BOUND, || async {
        let state = assignment(&cluster).await;
        let held: Vec<u64> = state["shards"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["owner"] == id.as_str() && s.get("handoff").is_none())
            .map(|s| s["shard"].as_u64().unwrap())
            .collect();
        if held.is_empty() {
            Err(format!("{state}"))
        } else {
            Ok(held)
        }
    })
    .await;

    let bearer = |credential: &Credential| Some(format!("Bearer {}", credential.expose()));
    let renew = json!({"claims": [], "revision": 0});
    let release = json!({"shards": mine, "revoke_revision": grant.revision});
    let mut table = Vec::new();
    for (who, authorization) in [
        ("no credential", None),
        ("another credential", bearer(&other)),
        (
            "a malformed header",
            Some(format!("Basic {}", secret.expose())),
        ),
    ] {
        table.push(Forged {
            what: "renew",
            method: Method::POST,
            path: format!("/v1/executors/{id}/renew"),
            body: Some(renew.clone()),
            authorization: authorization.clone(),
        });
        table.push(Forged {
            what: "release",
            method: Method::POST,
            path: format!("/v1/executors/{id}/release"),
            body: Some(release.clone()),
            authorization: authorization.clone(),
        });
        table.push(Forged {
            what: "deregister",
            method: Method::DELETE,
            path: format!("/v1/executors/{id}"),
            body: None,
            authorization,
        });
        let before = assignment(&cluster).await;
        for request in table.drain(..) {
            let (status, problem) = send(&cluster, &request).await;
            assert_eq!(
                (status, problem["code"].as_str()),
                (401, Some("unauthenticated")),
                "P13.4: {} of {id} with {who}: {problem}",
                request.what
            );
            let after = assignment(&cluster).await;
            assert_eq!(
                after, before,
                "P13.4: a refused {} with {who} changes nothing",
                request.what
            );
        }
    }

    // A replayed registration: with another credential 409, with the same the same executor.
    let replay = |credential: Option<Credential>| RegisterRequest {
        namespace: None,
        incarnation: "credential-test".into(),
        address: "http://127.0.0.1:9".into(),
        name: None,
        credential,
        capacity: None,
        app_version: None,
        labels: Default::default(),
    };
    let error = client
        .register(&replay(Some(other.clone())))
        .await
        .unwrap_err();
    assert_eq!(
        error.code(),
        Some(leasehold_api::ErrorCode::Conflict),
        "P13.4: {error}"
    );
    let error = client.register(&replay(None)).await.unwrap_err();
    assert_eq!(
        error.code(),
        Some(leasehold_api::ErrorCode::Conflict),
        "{error}"
    );
    let again = client
        .register(&replay(Some(secret.clone())))
        .await
        .unwrap();
    assert_eq!(
        again.executor_id, id,
        "P7.2: the holder gets the same answer"
    );

    // The holder itself: renew and deregister work.
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

/// The leader's last log index, once it has stayed put for a second (nothing else writing).
async fn quiet_last_log_index(cluster: &mut Cluster) -> (u64, u64) {
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let cluster = &*cluster;
    poll_until("the log to stay put", SETTLE_BOUND, || async {
        let first = cluster.cluster_info(leader).await?.last_log_index;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = cluster.cluster_info(leader).await?.last_log_index;
        match (first, second) {
            (Some(first), Some(second)) if first == second => Ok((leader, second)),
            other => Err(format!("still moving: {other:?}")),
        }
    })
    .await
}

/// I6, P13.4, P13.6 (the security review's findings 3, 4 and 12): renew, release and deregister
/// of ids the leader does not know are answered from the state and write nothing to the log; a
/// wrong credential is refused on a follower too, from the headers, before its body is read; a
/// body is bounded by what the cluster's shard count allows, not by the largest cluster's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_unknown_ids_write_nothing_and_bodies_are_bounded_by_the_cluster() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let client = cluster.client();
    let secret = Credential::from_random(rand::random());
    let grant = client
        .register(&RegisterRequest {
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
    // Let the placement of the shards on it settle, so the log is quiet.
    let (leader, before) = quiet_last_log_index(&mut cluster).await;

    let unknown = "ex-424242";
    for _ in 0..20 {
        for (method, path, body) in [
            (
                Method::POST,
                format!("/v1/executors/{unknown}/renew"),
                Some(json!({"claims": [], "revision": 0})),
            ),
            (
                Method::POST,
                format!("/v1/executors/{unknown}/release"),
                Some(json!({"shards": [0], "revoke_revision": 1})),
            ),
            (Method::DELETE, format!("/v1/executors/{unknown}"), None),
        ] {
            let mut request = cluster
                .http
                .request(method.clone(), format!("{}{path}", cluster.url(leader)));
            if let Some(body) = body {
                request = request.json(&body);
            }
            let reply = request.send().await.expect("the leader answers");
            let status = reply.status().as_u16();
            let problem: Value = reply.json().await.unwrap_or(Value::Null);
            assert_eq!(
                (status, problem["code"].as_str()),
                (404, Some("unknown_executor")),
                "{method} {path}: {problem}"
            );
        }
    }
    let after = cluster
        .cluster_info(leader)
        .await
        .expect("cluster info")
        .last_log_index;
    assert_eq!(
        after,
        Some(before),
        "I6: 60 requests for an unknown id wrote nothing to the log"
    );

    // A body past what 8 shards allow, with the right credential: refused unread (413).
    let too_big = leasehold_api::wire::renew_body_bytes(SHARDS) + 1;
    assert!(too_big < leasehold_api::wire::MAX_RENEW_BODY_BYTES);
    let mut body = b"{\"claims\": [], \"revision\": 0}".to_vec();
    body.resize(too_big, b' ');
    let reply = cluster
        .http
        .post(format!("{}/v1/executors/{id}/renew", cluster.url(leader)))
        .header("authorization", format!("Bearer {}", secret.expose()))
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .expect("the leader answers");
    assert_eq!(
        reply.status().as_u16(),
        413,
        "P13.6: bounded by the cluster"
    );

    // A wrong credential on a follower: 401 from its headers, whatever the body.
    let follower = [1, 2, 3].into_iter().find(|&m| m != leader).unwrap();
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
