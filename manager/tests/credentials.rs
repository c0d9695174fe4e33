//! Executor credentials (PROTOCOL P13.4) asked of one replica in process, on a plaintext
//! listener (P13.5: roles are not checked without TLS, credentials are). An executor that
//! registered with a credential is renewed, released, drained and deregistered only by a request
//! presenting it; every other request is `401 unauthenticated` and changes nothing (revision
//! included), so a forged release can no longer hand a shard on while its owner still admits it
//! (I1). A replayed registration with another credential is `409`. Unknown ids are answered from
//! the state and write nothing; a body is bounded by the cluster's shard count (I6, P13.6).
//!
//! What needs processes stays in `tests/tests/credentials.rs`: the credential forwarded by a
//! follower, and the secret's absence from real processes' logs.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use common::router::{
    assert_problem, call, config_with, raw, ready, register, request, settled_on, still_state,
    with_credential, with_header, LEADING_BOUND, SHARDS,
};
use leasehold_api::wire::{renew_body_bytes, MAX_RENEW_BODY_BYTES};
use serde_json::{json, Value};

const CREDENTIAL: &str = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";
const OTHER: &str = "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef";

fn registration(incarnation: &str, credential: Option<&str>) -> String {
    let mut body = json!({"incarnation": incarnation, "address": "http://127.0.0.1:9"});
    if let Some(credential) = credential {
        body["credential"] = credential.into();
    }
    body.to_string()
}

/// `request` with this `Authorization` header, or none.
fn authorized(
    method: Method,
    path: &str,
    body: Option<&str>,
    authorization: Option<&str>,
) -> Request<Body> {
    let sent = request(method, path, body, None);
    match authorization {
        Some(value) => with_header(sent, "authorization", value),
        None => sent,
    }
}

/// P13.4, P7.2, P17.2: only the holder of an executor's credential renews, releases, drains or
/// deregisters it; a replayed registration with another credential, or none, is `409`, with
/// the same one the same executor; a retried deregistration is told it is done, one of an id
/// never registered is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_4_only_the_holder_of_an_executors_credential_may_renew_release_or_deregister_it() {
    let data = tempfile::tempdir().unwrap();
    // Long enough that nothing lapses while the table runs: every change is the table's.
    let config = config_with(data.path(), None, &["--lease-duration=60s"]);
    let (replica, router) = ready(&config, None).await;
    let (status, _, grant) = call(
        &router,
        request(
            Method::POST,
            "/v1/executors",
            Some(&registration("credential-test", Some(CREDENTIAL))),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let id = grant["executor_id"].as_str().unwrap().to_owned();
    // Every shard placed on it, so a forged release has something to hand on.
    let settled = settled_on(&router, &id, None).await;
    let path = format!("/v1/executors/{id}");
    let renewal = json!({"claims": [], "revision": 0}).to_string();
    let release =
        json!({"shards": (0..SHARDS).collect::<Vec<_>>(), "revoke_revision": grant["revision"]})
            .to_string();

    let bearer_other = format!("Bearer {OTHER}");
    let basic = format!("Basic {CREDENTIAL}");
    for (who, authorization) in [
        ("no credential", None),
        ("another credential", Some(bearer_other.as_str())),
        ("a malformed header", Some(basic.as_str())),
    ] {
        for (what, method, path, body) in [
            (
                "renew",
                Method::POST,
                format!("{path}/renew"),
                Some(renewal.as_str()),
            ),
            (
                "release",
                Method::POST,
                format!("{path}/release"),
                Some(release.as_str()),
            ),
            ("deregister", Method::DELETE, path.clone(), None),
        ] {
            let answer = call(&router, authorized(method, &path, body, authorization)).await;
            assert_problem(&answer, StatusCode::UNAUTHORIZED, "unauthenticated");
            assert_eq!(
                still_state(&router, None).await,
                settled,
                "P13.4: a refused {what} of {id} with {who} changes nothing"
            );
        }
    }
    // A wrong credential is refused even where no credential would be an operator's (P17.2).
    let drained = call(
        &router,
        with_credential(Method::POST, &format!("{path}/drain"), None, OTHER),
    )
    .await;
    assert_problem(&drained, StatusCode::UNAUTHORIZED, "unauthenticated");
    assert_eq!(
        still_state(&router, None).await,
        settled,
        "P17.2: a refused drain changes nothing"
    );

    // A replayed registration: with another credential, or none, 409; with the same, the same
    // executor (P7.2).
    for (who, credential) in [("another credential", Some(OTHER)), ("none", None)] {
        let replayed = call(
            &router,
            request(
                Method::POST,
                "/v1/executors",
                Some(&registration("credential-test", credential)),
                None,
            ),
        )
        .await;
        assert_problem(&replayed, StatusCode::CONFLICT, "conflict");
        assert_eq!(
            still_state(&router, None).await,
            settled,
            "P13.4: a replay with {who} changes nothing"
        );
    }
    let again = register(
        &router,
        &registration("credential-test", Some(CREDENTIAL)),
        None,
    )
    .await;
    assert_eq!(again, id, "P7.2: the holder gets the same answer");

    // The holder itself: renew and deregister work, and a retried deregistration is done.
    let renewed = call(
        &router,
        with_credential(
            Method::POST,
            &format!("{path}/renew"),
            Some(&renewal),
            CREDENTIAL,
        ),
    )
    .await;
    assert_eq!(renewed.0, StatusCode::OK, "{}", renewed.2);
    assert_eq!(renewed.2["executor_id"], id.as_str(), "{}", renewed.2);
    for attempt in ["first", "retried"] {
        let (status, _, body) = call(
            &router,
            with_credential(Method::DELETE, &path, None, CREDENTIAL),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{attempt}: {body}");
    }
    let never = call(
        &router,
        request(Method::DELETE, "/v1/executors/ex-404", None, None),
    )
    .await;
    assert_problem(&never, StatusCode::NOT_FOUND, "unknown_executor");
    replica.shut_down().await.unwrap();
}

/// The leader's last log index, once it has stayed put for a second (nothing else writing).
async fn quiet_last_log_index(router: &Router) -> Value {
    let last = || async {
        let (status, _, cluster) =
            call(router, request(Method::GET, "/v1/cluster", None, None)).await;
        assert_eq!(status, StatusCode::OK, "{cluster}");
        cluster["last_log_index"].clone()
    };
    let deadline = Instant::now() + LEADING_BOUND;
    loop {
        let first = last().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = last().await;
        if first == second && first.is_u64() {
            return second;
        }
        assert!(
            Instant::now() < deadline,
            "the log still moving: {first} then {second}"
        );
    }
}

/// I6, P13.6 (the security review's findings 3 and 12): renew, release and deregister of ids
/// the leader does not know are answered from the state and write nothing to the log; a body is
/// bounded by what the cluster's shard count allows, not by the largest cluster's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_unknown_ids_write_nothing_and_bodies_are_bounded_by_the_cluster() {
    let data = tempfile::tempdir().unwrap();
    let config = config_with(data.path(), None, &["--lease-duration=60s"]);
    let (replica, router) = ready(&config, None).await;
    let id = register(
        &router,
        &registration("bounds-test", Some(CREDENTIAL)),
        None,
    )
    .await;
    // Let the placement of the shards on it settle, so the log is quiet.
    settled_on(&router, &id, None).await;
    let before = quiet_last_log_index(&router).await;

    let unknown = "ex-424242";
    let renewal = json!({"claims": [], "revision": 0}).to_string();
    let release = json!({"shards": [0], "revoke_revision": 1}).to_string();
    for _ in 0..20 {
        for (method, path, body) in [
            (
                Method::POST,
                format!("/v1/executors/{unknown}/renew"),
                Some(renewal.as_str()),
            ),
            (
                Method::POST,
                format!("/v1/executors/{unknown}/release"),
                Some(release.as_str()),
            ),
            (Method::DELETE, format!("/v1/executors/{unknown}"), None),
        ] {
            let answer = call(&router, request(method.clone(), &path, body, None)).await;
            assert_problem(&answer, StatusCode::NOT_FOUND, "unknown_executor");
        }
    }
    let (_, _, cluster) = call(&router, request(Method::GET, "/v1/cluster", None, None)).await;
    assert_eq!(
        cluster["last_log_index"], before,
        "I6: 60 requests for an unknown id wrote nothing to the log"
    );

    // A body past what the cluster's shards allow, with the right credential: refused unread.
    let too_big = renew_body_bytes(SHARDS) + 1;
    assert!(too_big < MAX_RENEW_BODY_BYTES);
    let mut body = b"{\"claims\": [], \"revision\": 0}".to_vec();
    body.resize(too_big, b' ');
    let sent = with_header(
        raw(
            Method::POST,
            &format!("/v1/executors/{id}/renew"),
            Some("application/json"),
            Some(body),
            None,
        ),
        "authorization",
        &format!("Bearer {CREDENTIAL}"),
    );
    let answer = call(&router, sent).await;
    assert_problem(&answer, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    replica.shut_down().await.unwrap();
}
