//! The manager's HTTP API driven in process: one replica started by `server::Replica` (its data
//! directory, Raft and tasks, no listener) and its router called with `tower::ServiceExt::oneshot`.
//! It checks what the layers decide before a handler runs and what a refusal looks like:
//! - I6: bad input gets a `problem+json` answer with its code, and changes nothing;
//! - P13.3: under TLS each route admits only the roles its requirement names (401 without a
//!   certificate, 403 with the wrong role), and an executor cannot claim a forwarded role;
//! - the Host check of a plaintext loopback listener (DNS rebinding).
//!
//! The listener's own part (handshakes, connection limits) is `tests/tests/security.rs`'s.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use leasehold_api::ctl::certs::{self, InitOptions, IssueOptions};
use leasehold_api::serve::PeerRole;
use leasehold_api::tls::Role;
use leasehold_manager::server::config::ManagerConfig;
use leasehold_manager::server::Replica;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde_json::Value;
use tower::ServiceExt;

/// The address the configuration names; nothing listens on it (the router is called directly).
const LISTEN: &str = "127.0.0.1:1";
/// A registration under TLS carries its credential (P13.4).
const REGISTRATION_OVER_TLS: &str = r#"{"incarnation":"router-test-1","address":"https://127.0.0.1:9","credential":"abababababababababababababababababababababababababababababababab"}"#;
const LEADING_BOUND: Duration = Duration::from_secs(30);

fn config(data_dir: &Path, tls_dir: Option<&Path>) -> ManagerConfig {
    config_with(data_dir, tls_dir, &[])
}

/// [`config`] with more flags.
fn config_with(data_dir: &Path, tls_dir: Option<&Path>, extra: &[&str]) -> ManagerConfig {
    let scheme = if tls_dir.is_some() { "https" } else { "http" };
    let mut args = common::member_args(1, &[LISTEN.to_owned()], scheme, data_dir);
    args.push("--lease-duration=3s".to_owned());
    if let Some(dir) = tls_dir {
        let manager = Role::Manager { node_id: 1 };
        args.extend([
            format!(
                "--cert-file={}",
                dir.join(certs::cert_file_name(manager)).display()
            ),
            format!(
                "--key-file={}",
                dir.join(certs::key_file_name(manager)).display()
            ),
            format!(
                "--trusted-ca-file={}",
                dir.join(certs::CA_CERT_FILE).display()
            ),
        ]);
    }
    args.extend(extra.iter().map(|flag| (*flag).to_owned()));
    common::config_of(args)
}

/// A single-node cluster's replica and its router, once it leads and its shard configuration is
/// applied (before that, executor writes answer `503 sharding_not_ready`). `peer` reads the state
/// under TLS.
async fn ready(config: &ManagerConfig, peer: Option<&PeerRole>) -> (Replica, Router) {
    let (replica, _bootstrap_failed) = Replica::start(config, None).await.unwrap();
    let router = replica.router(config);
    let deadline = Instant::now() + LEADING_BOUND;
    loop {
        let (status, _, state) = call(&router, request(Method::GET, "/v1/state", None, peer)).await;
        if replica.node.leadership.raft.current_leader().await == Some(1)
            && status == StatusCode::OK
            && state["shard_count"] == 16
        {
            return (replica, router);
        }
        assert!(
            Instant::now() < deadline,
            "not leading with its shards configured within {LEADING_BOUND:?}: {status} {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A request as a loopback client sends it; `peer` as the TLS listener would attach it.
fn request(
    method: Method,
    path: &str,
    body: Option<&str>,
    peer: Option<&PeerRole>,
) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, LISTEN);
    if body.is_some() {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    let mut request = builder
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
        .unwrap();
    if let Some(peer) = peer {
        request.extensions_mut().insert(peer.clone());
    }
    request
}

/// The status, the content type and the body (JSON, or `Null` when it is not JSON).
async fn call(router: &Router, request: Request<Body>) -> (StatusCode, String, Value) {
    let reply = router.clone().oneshot(request).await.unwrap();
    let status = reply.status();
    let kind = reply
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = axum::body::to_bytes(reply.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        kind,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn assert_problem(answer: &(StatusCode, String, Value), status: StatusCode, code: &str) {
    let (got, kind, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(kind, "application/problem+json", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
}

async fn executor_count(router: &Router, peer: Option<&PeerRole>) -> usize {
    let (status, _, body) = call(router, request(Method::GET, "/v1/executors", None, peer)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_bad_input_gets_a_problem_and_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path(), None);
    let (replica, router) = ready(&config, None).await;

    let malformed = call(
        &router,
        request(Method::POST, "/v1/executors", Some("{\"address\":"), None),
    )
    .await;
    assert_problem(&malformed, StatusCode::BAD_REQUEST, "invalid_request");
    let wrong_type = {
        let mut request = request(Method::POST, "/v1/executors", Some("{}"), None);
        request
            .headers_mut()
            .insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        call(&router, request).await
    };
    assert_eq!(
        wrong_type.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        wrong_type.2
    );
    let unknown = call(
        &router,
        request(Method::GET, "/v1/executors/ex-999999", None, None),
    )
    .await;
    assert_problem(&unknown, StatusCode::NOT_FOUND, "unknown_executor");
    assert_eq!(executor_count(&router, None).await, 0, "nothing registered");

    // A well-formed registration goes through the same layers and is committed.
    let registered = call(
        &router,
        request(
            Method::POST,
            "/v1/executors",
            Some(r#"{"incarnation":"router-test-1","address":"http://127.0.0.1:9"}"#),
            None,
        ),
    )
    .await;
    assert_eq!(registered.0, StatusCode::OK, "{}", registered.2);
    assert_eq!(executor_count(&router, None).await, 1);
    replica.shut_down().await.unwrap();
}

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

/// A cluster CA with `managers` managers' certificates, an admin's and an executor's, in a
/// directory that lives as long as the first value.
fn certificates(managers: u64) -> (tempfile::TempDir, PathBuf) {
    let tls = tempfile::tempdir().unwrap();
    let tls_dir = tls.path().join("certs");
    certs::init(&InitOptions {
        dir: tls_dir.clone(),
        managers,
        hosts: vec!["127.0.0.1".to_owned()],
        force: false,
    })
    .unwrap();
    (tls, tls_dir)
}

fn peer(dir: &Path, role: Role) -> PeerRole {
    let leaf = CertificateDer::from_pem_file(dir.join(certs::cert_file_name(role))).unwrap();
    PeerRole::of(&leaf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_3_each_route_admits_only_its_roles() {
    let data = tempfile::tempdir().unwrap();
    let (_tls, tls_dir) = certificates(1);
    let config = config(data.path(), Some(&tls_dir));
    let admin = peer(&tls_dir, Role::Admin);
    let executor = peer(&tls_dir, Role::Executor);
    let (replica, router) = ready(&config, Some(&admin)).await;

    // Health is anyone's; everything else needs a certificate of the cluster's CA.
    let (status, _, _) = call(&router, request(Method::GET, "/livez", None, None)).await;
    assert_eq!(status, StatusCode::OK);
    // `--health-listen` (P13.2): health without a certificate, and nothing else at all.
    let health = replica.health_router();
    for path in ["/livez", "/readyz"] {
        let (status, _, body) = call(&health, request(Method::GET, path, None, None)).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    for path in [
        "/v1/state",
        "/metrics",
        "/v1/openapi.json",
        "/raft/identity",
        "/ui",
    ] {
        let answer = call(&health, request(Method::GET, path, None, Some(&admin))).await;
        assert_problem(&answer, StatusCode::NOT_FOUND, "not_found");
    }
    let anonymous = call(&router, request(Method::GET, "/v1/state", None, None)).await;
    assert_problem(&anonymous, StatusCode::UNAUTHORIZED, "unauthenticated");
    for role in [&admin, &executor] {
        let (status, _, body) =
            call(&router, request(Method::GET, "/v1/state", None, Some(role))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    // A backup and a drain are an admin's; an executor is refused before the handler runs.
    let backup = call(
        &router,
        request(Method::GET, "/v1/backup", None, Some(&executor)),
    )
    .await;
    assert_problem(&backup, StatusCode::FORBIDDEN, "forbidden");
    let (status, _, _) = call(
        &router,
        request(Method::GET, "/v1/backup", None, Some(&admin)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // Registration is an executor's or an admin's; an executor may not claim a role a manager
    // forwarded for someone else.
    let mut claimed = request(
        Method::POST,
        "/v1/executors",
        Some(REGISTRATION_OVER_TLS),
        Some(&executor),
    );
    claimed
        .headers_mut()
        .insert("x-leasehold-forwarded-role", "admin".parse().unwrap());
    claimed
        .headers_mut()
        .insert("x-leasehold-forwarded-by", "1".parse().unwrap());
    let claimed = call(&router, claimed).await;
    assert_problem(&claimed, StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(executor_count(&router, Some(&admin)).await, 0);
    let registered = call(
        &router,
        request(
            Method::POST,
            "/v1/executors",
            Some(REGISTRATION_OVER_TLS),
            Some(&executor),
        ),
    )
    .await;
    assert_eq!(registered.0, StatusCode::OK, "{}", registered.2);
    let id = registered.2["executor_id"].as_str().unwrap().to_owned();
    // P17.2: an executor drains itself with its own credential, never with its certificate
    // alone or another's credential; taking a drain back stays an operator's.
    let drain_path = format!("/v1/executors/{id}/drain");
    let with_bearer = |method: Method, credential: &str| {
        let mut drain = request(method, &drain_path, None, Some(&executor));
        drain.headers_mut().insert(
            header::AUTHORIZATION,
            format!("Bearer {credential}").parse().unwrap(),
        );
        drain
    };
    let certificate_alone = call(
        &router,
        request(Method::POST, &drain_path, None, Some(&executor)),
    )
    .await;
    assert_problem(
        &certificate_alone,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    );
    let another_credential = call(&router, with_bearer(Method::POST, &"cd".repeat(32))).await;
    assert_problem(
        &another_credential,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    );
    let undrain = call(&router, with_bearer(Method::DELETE, &"ab".repeat(32))).await;
    assert_problem(&undrain, StatusCode::FORBIDDEN, "forbidden");
    let (status, _, view) = call(
        &router,
        request(
            Method::GET,
            &format!("/v1/executors/{id}"),
            None,
            Some(&admin),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["draining"], false, "a refused drain changed nothing");
    let (status, _, drained) = call(&router, with_bearer(Method::POST, &"ab".repeat(32))).await;
    assert_eq!(status, StatusCode::OK, "{drained}");
    assert_eq!(drained["draining"], true, "{drained}");
    // P17.4 (issue 55, finding 4): the executor's own drain is its lifecycle, as its
    // deregistration is, not an operator's action: the audit log, which callers who are not
    // operators must not fill, does not record it.
    let (status, _, audit) = call(
        &router,
        request(Method::GET, "/v1/audit", None, Some(&admin)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    assert_eq!(
        audit,
        serde_json::json!([]),
        "the executor's own drain: {audit}"
    );

    // P17.4: the operator controls are the admin's, each recorded with the certificate's subject.
    let maintenance_on = Some(r#"{"on":true}"#);
    let by_executor = call(
        &router,
        request(
            Method::PUT,
            "/v1/cluster/maintenance",
            maintenance_on,
            Some(&executor),
        ),
    )
    .await;
    assert_problem(&by_executor, StatusCode::FORBIDDEN, "forbidden");
    let deadline = Instant::now() + LEADING_BOUND;
    let turned_on = loop {
        // The cluster version reaches 6 shortly after the leader took office (P14.3).
        let answer = call(
            &router,
            request(
                Method::PUT,
                "/v1/cluster/maintenance",
                maintenance_on,
                Some(&admin),
            ),
        )
        .await;
        if answer.0 != StatusCode::CONFLICT || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(turned_on.0, StatusCode::OK, "{}", turned_on.2);
    assert_eq!(
        turned_on.2,
        serde_json::json!({"on": true, "changed": true})
    );
    let pin_body = format!(r#"{{"executor_id":"{id}"}}"#);
    let (status, _, pinned) = call(
        &router,
        request(
            Method::PUT,
            "/v1/shards/0/pin",
            Some(&pin_body),
            Some(&admin),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pinned}");
    assert_eq!(pinned["pinned_to"], id.as_str());
    let move_body = format!(r#"{{"to":"{id}"}}"#);
    for (method, path, body, peer, status, code) in [
        (
            Method::POST,
            "/v1/shards/0/move",
            Some(move_body.as_str()),
            &executor,
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            Method::DELETE,
            "/v1/shards/0/pin",
            None,
            &executor,
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            Method::GET,
            "/v1/audit",
            None,
            &executor,
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        // Draining: it takes no shards.
        (
            Method::POST,
            "/v1/shards/1/move",
            Some(move_body.as_str()),
            &admin,
            StatusCode::CONFLICT,
            "conflict",
        ),
        (
            Method::POST,
            "/v1/shards/x/move",
            Some(move_body.as_str()),
            &admin,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::PUT,
            "/v1/shards/99/pin",
            Some(pin_body.as_str()),
            &admin,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::PUT,
            "/v1/shards/2/pin",
            Some(r#"{"executor_id":"ex-999"}"#),
            &admin,
            StatusCode::NOT_FOUND,
            "unknown_executor",
        ),
        (
            Method::PUT,
            "/v1/shards/2/pin",
            Some(r#"{"executor":"ex-1"}"#),
            &admin,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
    ] {
        let answer = call(&router, request(method.clone(), path, body, Some(peer))).await;
        assert_problem(&answer, status, code);
    }
    let (status, _, unpinned) = call(
        &router,
        request(Method::DELETE, "/v1/shards/0/pin", None, Some(&admin)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{unpinned}");
    assert!(unpinned.get("pinned_to").is_none(), "{unpinned}");
    let (status, _, audit) = call(
        &router,
        request(Method::GET, "/v1/audit", None, Some(&admin)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let records = audit.as_array().unwrap();
    let actions: Vec<&str> = records
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert!(
        actions.ends_with(&["maintenance_on", "pin", "unpin"]),
        "only what changed something, in order: {audit}"
    );
    // Who: the admin certificate's role and its subject, whatever `certs init` named it.
    let admin_actor = format!("admin {}", admin.subject());
    for record in &records[records.len() - 3..] {
        assert_eq!(record["actor"], admin_actor.as_str(), "{record}");
    }
    assert_eq!(records[records.len() - 2]["shard"], 0);
    assert_eq!(records[records.len() - 2]["executor_id"], id.as_str());
    replica.shut_down().await.unwrap();
}

/// Polls `path` until `accept` takes its answer, within [`LEADING_BOUND`].
async fn poll_answer(router: &Router, path: &str, accept: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LEADING_BOUND;
    loop {
        let (status, _, body) = call(router, request(Method::GET, path, None, None)).await;
        if status == StatusCode::OK && accept(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path}: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    poll_answer(&router, &format!("/v1/executors/{first}"), |executor| {
        executor["shards"]
            .as_array()
            .is_some_and(|shards| shards.len() == 16)
    })
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
    let with_a_taker = poll_answer(&router, &path, |verdict| verdict["safe"] == true).await;
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

/// `request` with `Authorization: Bearer <credential>`.
fn with_credential(
    method: Method,
    path: &str,
    body: Option<&str>,
    credential: &str,
) -> Request<Body> {
    let mut request = request(method, path, body, None);
    request.headers_mut().insert(
        header::AUTHORIZATION,
        format!("Bearer {credential}").parse().unwrap(),
    );
    request
}

/// P13.4, P7.2, P13.5 on a plaintext listener (roles unchecked): an executor's writes are
/// admitted by its credential, a renewal's body up to its bound; a drain without a credential is
/// an operator's, but one with a wrong credential is refused, not taken for an operator's; a
/// retried deregistration is told it is done, one of an id never registered is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_4_executor_writes_are_admitted_by_their_credential() {
    const CREDENTIAL: &str = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";
    const WRONG: &str = "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef";
    let data = tempfile::tempdir().unwrap();
    let config = config(data.path(), None);
    let (replica, router) = ready(&config, None).await;
    let registration = format!(
        r#"{{"incarnation":"router-test-2","address":"http://127.0.0.1:9","credential":"{CREDENTIAL}"}}"#
    );
    let registered = call(
        &router,
        request(Method::POST, "/v1/executors", Some(&registration), None),
    )
    .await;
    assert_eq!(registered.0, StatusCode::OK, "{}", registered.2);
    let id = registered.2["executor_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/executors/{id}");

    let renewal = r#"{"claims":[],"revision":0}"#;
    let renewed = call(
        &router,
        with_credential(
            Method::POST,
            &format!("{path}/renew"),
            Some(renewal),
            CREDENTIAL,
        ),
    )
    .await;
    assert_eq!(renewed.0, StatusCode::OK, "{}", renewed.2);
    assert_eq!(renewed.2["executor_id"], id.as_str(), "{}", renewed.2);
    let wrongly = call(
        &router,
        with_credential(Method::POST, &format!("{path}/renew"), Some(renewal), WRONG),
    )
    .await;
    assert_problem(&wrongly, StatusCode::UNAUTHORIZED, "unauthenticated");

    // A wrong credential is refused even where no credential would be an operator's.
    let drained = call(
        &router,
        with_credential(Method::POST, &format!("{path}/drain"), None, WRONG),
    )
    .await;
    assert_problem(&drained, StatusCode::UNAUTHORIZED, "unauthenticated");
    let (_, _, view) = call(&router, request(Method::GET, &path, None, None)).await;
    assert_eq!(view["draining"], false, "{view}");

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

/// P18.2: an admin certificate limited to namespace `kv` changes `kv` (within the cluster's
/// quotas) and nothing else: not another namespace, nor anything of the whole cluster; every
/// refusal is `403` and changes nothing. An unlimited admin's same changes are taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p18_2_a_certificate_limited_to_a_namespace_changes_only_that_namespace() {
    let data = tempfile::tempdir().unwrap();
    let (_tls, tls_dir) = certificates(1);
    let issued = certs::issue(&IssueOptions {
        role: Role::Admin,
        namespaces: vec!["kv".to_owned()],
        dir: tls_dir.clone(),
        hosts: Vec::new(),
        name: None,
        force: false,
    })
    .unwrap();
    assert_eq!(issued.namespaces, Some(vec!["kv".to_owned()]));
    let config = config(data.path(), Some(&tls_dir));
    let admin = peer(&tls_dir, Role::Admin);
    let limited = {
        let leaf = CertificateDer::from_pem_file(tls_dir.join("admin-kv.pem")).unwrap();
        PeerRole::of(&leaf)
    };
    let (replica, router) = ready(&config, Some(&admin)).await;
    for name in ["kv", "orders"] {
        let body = format!(r#"{{"name":"{name}","shard_count":4,"max_executors":10}}"#);
        let (status, _, view) = call(
            &router,
            request(Method::POST, "/v1/namespaces", Some(&body), Some(&admin)),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{name}: {view}");
    }
    let before = revision(&router, &admin).await;
    let refused = [
        (
            Method::PATCH,
            "/v1/namespaces/orders",
            r#"{"max_executors":8}"#,
        ),
        (Method::DELETE, "/v1/namespaces/orders", ""),
        (Method::POST, "/v1/cluster/maintenance", r#"{"on":true}"#),
    ];
    for (method, path, body) in &refused {
        let body = (!body.is_empty()).then_some(*body);
        let answer = call(&router, request(method.clone(), path, body, Some(&limited))).await;
        assert_problem(&answer, StatusCode::FORBIDDEN, "forbidden");
    }
    assert_eq!(
        revision(&router, &admin).await,
        before,
        "the refusals changed nothing"
    );
    let (status, _, view) = call(
        &router,
        request(
            Method::PATCH,
            "/v1/namespaces/kv",
            Some(r#"{"max_executors":8}"#),
            Some(&limited),
        ),
    )
    .await;
    assert_eq!(
        (status, &view["max_executors"]),
        (StatusCode::OK, &Value::from(8)),
        "{view}"
    );
    let (status, _, view) = call(
        &router,
        request(
            Method::PATCH,
            "/v1/namespaces/orders",
            Some(r#"{"max_executors":8}"#),
            Some(&admin),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "the unlimited admin's: {view}");
    replica.shut_down().await.unwrap();
}

/// The state's revision, read as `peer`.
async fn revision(router: &Router, peer: &PeerRole) -> Value {
    let (_, _, state) = call(router, request(Method::GET, "/v1/state", None, Some(peer))).await;
    state["revision"].clone()
}

/// P13.3: Raft messages, and roles forwarded for another caller, come only from a manager of
/// the cluster under its own name. An executor's certificate sends no Raft message; a manager's
/// does not claim another node's id; a manager that is not a member sends none and forwards
/// nothing; and a node never takes a forward said to come from itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_3_only_a_member_manager_sends_raft_messages_or_forwards_a_role() {
    let data = tempfile::tempdir().unwrap();
    let (_tls, tls_dir) = certificates(2);
    let config = config(data.path(), Some(&tls_dir));
    let admin = peer(&tls_dir, Role::Admin);
    let executor = peer(&tls_dir, Role::Executor);
    let manager_1 = peer(&tls_dir, Role::Manager { node_id: 1 });
    let manager_2 = peer(&tls_dir, Role::Manager { node_id: 2 });
    let (replica, router) = ready(&config, Some(&admin)).await;

    let raft = |peer: &PeerRole, claimed: &str| {
        let mut vote = request(Method::POST, "/raft/vote", Some("{"), Some(peer));
        vote.headers_mut()
            .insert("x-leasehold-node-id", claimed.parse().unwrap());
        vote
    };
    for (caller, peer, claimed) in [
        ("the executor", &executor, "1"),
        ("manager 1 claiming node 2", &manager_1, "2"),
        ("manager 2, not a member", &manager_2, "2"),
    ] {
        let answer = call(&router, raft(peer, claimed)).await;
        assert_eq!(answer.0, StatusCode::FORBIDDEN, "{caller}: {}", answer.2);
    }
    // Manager 1 as itself passes the layer: its malformed message is refused as malformed.
    let (status, _, body) = call(&router, raft(&manager_1, "1")).await;
    assert!(
        status.is_client_error() && status != StatusCode::FORBIDDEN,
        "{status} {body}"
    );

    let forwarded = |peer: &PeerRole, by: &str| {
        let mut backup = request(Method::GET, "/v1/backup", None, Some(peer));
        let headers = backup.headers_mut();
        headers.insert("x-leasehold-forwarded-by", by.parse().unwrap());
        headers.insert(
            "x-leasehold-forwarded-role",
            "urn:leasehold:admin".parse().unwrap(),
        );
        backup
    };
    for (caller, peer, by, reason) in [
        ("manager 2", &manager_2, "2", "not a member"),
        ("manager 1", &manager_1, "1", "never forwards to itself"),
    ] {
        let answer = call(&router, forwarded(peer, by)).await;
        assert_problem(&answer, StatusCode::FORBIDDEN, "forbidden");
        let detail = answer.2["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(reason), "{caller}: {detail}");
    }
    replica.shut_down().await.unwrap();
}
