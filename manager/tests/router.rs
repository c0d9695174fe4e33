//! The manager's HTTP API driven in process: one replica started by `server::Replica` (its data
//! directory, Raft and tasks, no listener) and its router called with `tower::ServiceExt::oneshot`
//! (the setup is `common/router.rs`). It checks what the layers decide before a handler runs and
//! what the handlers answer without a cluster:
//! - P13.6: whole-state reads at most four at once, registrations limited per caller;
//! - P18.1: a namespace's default bound;
//! - P17.4: safe-to-stop verdicts and the next plan;
//! - "Versions": a renewal answered in the form its claims came in;
//! - the Host check of a plaintext loopback listener (DNS rebinding), and Raft messages held back
//!   only while rejoining.
//!
//! The matrices are in their own files: roles in `roles.rs` (P13.3), credentials in
//! `credentials.rs` (P13.4), bad input in `bad_input.rs` (I6). The listener's own part
//! (handshakes, connection limits) is `tests/tests/security.rs`'s.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::{header, Method, StatusCode};
use axum::Router;
use common::router::{
    assert_problem, call, config, config_with, executor_count, poll_answer, ready, register,
    request, settled_on,
};
use leasehold_api::wire::{Grant, RenewRequest, ShardEpoch};
use serde_json::{json, Value};
use tower::ServiceExt;

/// P13.6 (issue 55, finding 5): a replica builds and sends at most four answers that grow with
/// the cluster at once, each holding its permit until its reader has taken it; a fifth waits,
/// then is answered `503` with `Retry-After`, and is served once one is taken. Reads that stay
/// small (a key's route, one executor) are not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_6_at_most_four_whole_state_reads_are_answered_at_once() {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path(), None);
    let (replica, router) = ready(&config, None).await;
    let mut untaken = Vec::new();
    for path in ["/v1/state", "/v1/shards", "/v1/executors", "/v1/routing"] {
        let reply = router
            .clone()
            .oneshot(request(Method::GET, path, None, None))
            .await
            .unwrap();
        assert_eq!(reply.status(), StatusCode::OK, "{path}");
        untaken.push(reply);
    }
    let small = call(
        &router,
        request(Method::GET, "/v1/routing?key=user-1", None, None),
    )
    .await;
    assert_eq!(small.0, StatusCode::OK, "a key's route: {}", small.2);
    let refused = router
        .clone()
        .oneshot(request(Method::GET, "/v1/state", None, None))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    // One reader takes its answer: its permit goes to the next.
    let taken = axum::body::to_bytes(untaken.pop().unwrap().into_body(), usize::MAX)
        .await
        .unwrap();
    assert!(!taken.is_empty());
    let served = call(&router, request(Method::GET, "/v1/state", None, None)).await;
    assert_eq!(served.0, StatusCode::OK, "{}", served.2);
    drop(untaken);
    replica.shut_down().await.unwrap();
}

/// P18.1 (issue 55, finding 9): a namespace without a bound of its own holds at most the
/// leader's `--max-executors-per-namespace`; past it a registration is `409` and nothing is
/// registered, and a retry of one it holds is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p18_1_a_namespace_holds_at_most_the_default_bound() {
    let data = tempfile::tempdir().unwrap();
    let config = config_with(data.path(), None, &["--max-executors-per-namespace=1"]);
    let (replica, router) = ready(&config, None).await;
    let register = |incarnation: &str| {
        request(
            Method::POST,
            "/v1/executors",
            Some(&format!(
                r#"{{"incarnation":"{incarnation}","address":"http://127.0.0.1:9"}}"#
            )),
            None,
        )
    };
    let first = call(&router, register("bound-1")).await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.2);
    let second = call(&router, register("bound-2")).await;
    assert_problem(&second, StatusCode::CONFLICT, "conflict");
    assert_eq!(executor_count(&router, None).await, 1, "nothing registered");
    let retry = call(&router, register("bound-1")).await;
    assert_eq!(retry.0, StatusCode::OK, "a retry: {}", retry.2);
    replica.shut_down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_listener_refuses_a_foreign_host() {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path(), None);
    let (replica, router) = ready(&config, None).await;
    let mut rebound = request(Method::GET, "/v1/state", None, None);
    rebound
        .headers_mut()
        .insert(header::HOST, "attacker.example".parse().unwrap());
    let (status, _, body) = call(&router, rebound).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    replica.shut_down().await.unwrap();
}
/// P17.4: safe-to-stop, answered by the leader. An executor holding shards with nobody else to
/// take them is not safe to stop, and is once another live executor registered; the only voter
/// never is; unknown ids are `404` and a malformed node id `400`, each a problem. The next plan
/// is answered with its moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p17_4_safe_to_stop_answers_for_executors_and_members() {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path(), None);
    let (replica, router) = ready(&config, None).await;
    let register = |incarnation: &str| {
        request(
            Method::POST,
            "/v1/executors",
            Some(&format!(
                r#"{{"incarnation":"{incarnation}","address":"http://127.0.0.1:9"}}"#
            )),
            None,
        )
    };
    let (status, _, first) = call(&router, register("safe-to-stop-1")).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let first = first["executor_id"].as_str().unwrap().to_owned();
    poll_answer(
        &router,
        &format!("/v1/executors/{first}"),
        None,
        |executor| {
            executor["shards"]
                .as_array()
                .is_some_and(|shards| shards.len() == 16)
        },
    )
    .await;
    let path = format!("/v1/executors/{first}/safe-to-stop");
    let (status, _, alone) = call(&router, request(Method::GET, &path, None, None)).await;
    assert_eq!(status, StatusCode::OK, "{alone}");
    assert_eq!(alone["safe"], false, "{alone}");
    assert!(
        alone["reason"].as_str().unwrap().contains("16 shards"),
        "{alone}"
    );
    let (status, _, _) = call(&router, register("safe-to-stop-2")).await;
    assert_eq!(status, StatusCode::OK);
    let with_a_taker = poll_answer(&router, &path, None, |verdict| verdict["safe"] == true).await;
    assert!(with_a_taker["reason"].is_string(), "{with_a_taker}");

    let unknown_executor = call(
        &router,
        request(
            Method::GET,
            "/v1/executors/ex-999999/safe-to-stop",
            None,
            None,
        ),
    )
    .await;
    assert_problem(&unknown_executor, StatusCode::NOT_FOUND, "unknown_executor");
    let (status, _, only_voter) = call(
        &router,
        request(Method::GET, "/v1/cluster/nodes/1/safe-to-stop", None, None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{only_voter}");
    assert_eq!(only_voter["safe"], false, "{only_voter}");
    let not_a_member = call(
        &router,
        request(Method::GET, "/v1/cluster/nodes/9/safe-to-stop", None, None),
    )
    .await;
    assert_problem(&not_a_member, StatusCode::NOT_FOUND, "not_found");
    let malformed = call(
        &router,
        request(
            Method::GET,
            "/v1/cluster/nodes/one/safe-to-stop",
            None,
            None,
        ),
    )
    .await;
    assert_problem(&malformed, StatusCode::BAD_REQUEST, "invalid_request");

    // The next plan, not committed: asked twice, the state has not moved for it.
    let (status, _, plan) = call(&router, request(Method::GET, "/v1/plan", None, None)).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert!(
        plan["moves"].is_array() && plan["capped"] == false,
        "{plan}"
    );
    for step in plan["moves"].as_array().unwrap() {
        assert!(
            step["to"].is_string() && step["reason"].is_string(),
            "{step}"
        );
    }
    replica.shut_down().await.unwrap();
}

/// P13.6: registrations are limited per caller where they arrive, before the body is read: past
/// its burst a caller is answered `429 rate_limited` with `Retry-After` and nothing is
/// registered, while another address is not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_6_a_callers_registrations_past_its_burst_are_refused_429() {
    let data = tempfile::tempdir().unwrap();
    let config = config_with(
        data.path(),
        None,
        &["--registration-burst=2", "--registration-rate=1"],
    );
    let (replica, router) = ready(&config, None).await;
    let from = |address: &str, n: usize| {
        let body = format!(r#"{{"incarnation":"limited-{n}","address":"http://127.0.0.1:9"}}"#);
        let mut request = request(Method::POST, "/v1/executors", Some(&body), None);
        let address: std::net::SocketAddr = address.parse().unwrap();
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(address));
        request
    };
    for n in 0..2 {
        let registered = call(&router, from("10.0.0.1:40000", n)).await;
        assert_eq!(registered.0, StatusCode::OK, "{}", registered.2);
    }
    let refused = router
        .clone()
        .oneshot(from("10.0.0.1:40001", 2))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    assert_eq!(executor_count(&router, None).await, 2, "nothing registered");
    let elsewhere = call(&router, from("10.0.0.2:40000", 3)).await;
    assert_eq!(elsewhere.0, StatusCode::OK, "{}", elsewhere.2);
    replica.shut_down().await.unwrap();
}

/// A node that is not rejoining (`--rejoin`) takes Raft messages: a malformed one is refused as
/// malformed (4xx), never held back as a rejoining node's are (`503`, until its old membership
/// is removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_messages_are_held_back_only_while_rejoining() {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path(), None);
    let (replica, router) = ready(&config, None).await;
    for path in ["/raft/append", "/raft/vote", "/raft/snapshot"] {
        let (status, _, body) = call(&router, request(Method::POST, path, Some("{"), None)).await;
        assert!(status.is_client_error(), "{path}: {status} {body}");
    }
    replica.shut_down().await.unwrap();
}

/// "Versions", P4.2: the same renewal in both wire forms is answered with the same set, in the
/// form its claims came in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_a_renewal_is_answered_in_the_form_its_claims_came_in() {
    let data = tempfile::tempdir().unwrap();
    // Long enough that the executor, which renews only here, keeps its shards.
    let config = config_with(data.path(), None, &["--lease-duration=120s"]);
    let (replica, router) = ready(&config, None).await;
    let executor_id = register(
        &router,
        r#"{"incarnation":"t04","address":"http://127.0.0.1:9"}"#,
        None,
    )
    .await;
    let settled = settled_on(&router, &executor_id, None).await;
    renewals_in_both_wire_forms(&router, &executor_id, &settled).await;
    replica.shut_down().await.unwrap();
}

/// The same renewal in both wire forms ("Versions"): the set comes back in the form the claims
/// went in, and it is the same set. "Unchanged": a renewal that takes it and claims exactly its
/// set gets no set back; one claiming another set gets the set (P4.2).
async fn renewals_in_both_wire_forms(router: &Router, executor_id: &str, settled: &Value) {
    let held: Vec<ShardEpoch> = settled["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|shard| ShardEpoch {
            shard: u32::try_from(shard["shard"].as_u64().expect("shard")).unwrap(),
            epoch: shard["epoch"].as_u64().expect("epoch"),
        })
        .collect();
    let renew = format!("/v1/executors/{executor_id}/renew");
    let full = RenewRequest {
        claims: held.clone(),
        claim_runs: None,
        revision: settled["revision"].as_u64().expect("revision"),
        loads: None,
        accept_unchanged: false,
        ready: Vec::new(),
    };
    let as_runs = full.with_claims_as_runs();
    let grant_of = |renewal: &RenewRequest, what: &'static str| {
        let body = json!(renewal).to_string();
        let renew = renew.clone();
        async move {
            let (status, _, grant) =
                call(router, request(Method::POST, &renew, Some(&body), None)).await;
            assert_eq!(status, StatusCode::OK, "{what}: {grant}");
            serde_json::from_value::<Grant>(grant).expect("a grant")
        }
    };
    let compact = grant_of(&as_runs, "a renewal with claim runs").await;
    assert_eq!(compact.shards, vec![], "a set in runs lists no shards");
    assert_eq!(compact.shard_runs, as_runs.claim_runs);
    let listed = grant_of(&full, "a renewal with listed claims").await;
    assert_eq!(
        listed.shard_runs, None,
        "a client that sent a list gets a list"
    );
    assert_eq!(listed.shards, held);
    assert_eq!(compact.expand_shard_runs().expect("runs").shards, held);

    let asking = RenewRequest {
        accept_unchanged: true,
        ..as_runs.clone()
    };
    let unchanged = grant_of(&asking, "a renewal taking unchanged").await;
    assert!(unchanged.unchanged, "its claims are its set: {unchanged:?}");
    assert_eq!(
        (unchanged.shards.as_slice(), &unchanged.shard_runs),
        (&[][..], &None)
    );
    assert_eq!(
        unchanged.expand_unchanged(&asking).expect("claims").shards,
        held
    );
    let mut short = held.clone();
    short.pop();
    let claiming_less = RenewRequest {
        claims: short,
        accept_unchanged: true,
        ..full.clone()
    };
    let corrected = grant_of(
        &claiming_less,
        "a renewal taking unchanged, claiming less than its set",
    )
    .await;
    assert!(!corrected.unchanged, "P4.2: the set corrects the claims");
    assert_eq!(corrected.shards, held);
}
