//! One replica driven in process through its router (`server::Replica` started without a
//! listener, the router called with `tower::ServiceExt::oneshot`), and what the router tests
//! share: its configuration, waiting until it leads, requests as a loopback client or a TLS
//! listener's caller would send them, and the checks of a problem answer and of a still state.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use leasehold_api::ctl::certs::{self, InitOptions};
use leasehold_api::problem::{ErrorCode, PROBLEM_CONTENT_TYPE, REQUEST_ID_HEADER};
use leasehold_api::serve::PeerRole;
use leasehold_api::tls::Role;
use leasehold_manager::server::config::ManagerConfig;
use leasehold_manager::server::Replica;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde_json::Value;
use tower::ServiceExt;

/// The address the configuration names; nothing listens on it (the router is called directly).
pub const LISTEN: &str = "127.0.0.1:1";
/// The single replica's shard count (`member_args`).
pub const SHARDS: u32 = 16;
pub const LEADING_BOUND: Duration = Duration::from_secs(30);
/// The lease unless a test names its own: short, so a test that waits for a reap is quick.
const DEFAULT_LEASE: &str = "--lease-duration=3s";

pub fn config(data_dir: &Path, tls_dir: Option<&Path>) -> ManagerConfig {
    config_with(data_dir, tls_dir, &[])
}

/// [`config`] with more flags; a `--lease-duration` among them replaces the default.
pub fn config_with(data_dir: &Path, tls_dir: Option<&Path>, extra: &[&str]) -> ManagerConfig {
    let scheme = if tls_dir.is_some() { "https" } else { "http" };
    let mut args = super::member_args(1, &[LISTEN.to_owned()], scheme, data_dir);
    if !extra
        .iter()
        .any(|flag| flag.starts_with("--lease-duration"))
    {
        args.push(DEFAULT_LEASE.to_owned());
    }
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
    super::config_of(args)
}

/// A single-node cluster's replica and its router, once it leads and its shard configuration is
/// applied (before that, executor writes answer `503 sharding_not_ready`). `peer` reads the state
/// under TLS.
pub async fn ready(config: &ManagerConfig, peer: Option<&PeerRole>) -> (Replica, Router) {
    let (replica, _bootstrap_failed) = Replica::start(config, None).await.unwrap();
    let router = replica.router(config);
    let deadline = Instant::now() + LEADING_BOUND;
    loop {
        let (status, _, state) = call(&router, request(Method::GET, "/v1/state", None, peer)).await;
        if replica.node.leadership.raft.current_leader().await == Some(1)
            && status == StatusCode::OK
            && state["shard_count"] == SHARDS
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
pub fn request(
    method: Method,
    path: &str,
    body: Option<&str>,
    peer: Option<&PeerRole>,
) -> Request<Body> {
    raw(
        method,
        path,
        body.map(|_| "application/json"),
        body.map(|b| b.as_bytes().to_vec()),
        peer,
    )
}

/// A request with any content type (or none) and any body bytes.
pub fn raw(
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: Option<Vec<u8>>,
    peer: Option<&PeerRole>,
) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, LISTEN);
    if let Some(content_type) = content_type {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    if let Some(body) = &body {
        builder = builder.header(header::CONTENT_LENGTH, body.len());
    }
    let mut request = builder
        .body(body.map_or_else(Body::empty, Body::from))
        .unwrap();
    if let Some(peer) = peer {
        request.extensions_mut().insert(peer.clone());
    }
    request
}

/// `request` with `Authorization: Bearer <credential>`.
pub fn with_credential(
    method: Method,
    path: &str,
    body: Option<&str>,
    credential: &str,
) -> Request<Body> {
    with_header(
        request(method, path, body, None),
        "authorization",
        &format!("Bearer {credential}"),
    )
}

/// `request` with one more header.
pub fn with_header(mut request: Request<Body>, name: &'static str, value: &str) -> Request<Body> {
    request.headers_mut().insert(name, value.parse().unwrap());
    request
}

/// The status, the content type and the body (JSON, or `Null` when it is not JSON).
pub type Answer = (StatusCode, String, Value);

pub async fn call(router: &Router, request: Request<Body>) -> Answer {
    let reply = call_whole(router, request).await;
    let kind = reply
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (reply.status, kind, reply.json)
}

/// An answer with its headers.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
}

pub async fn call_whole(router: &Router, request: Request<Body>) -> Reply {
    let reply = router.clone().oneshot(request).await.unwrap();
    let status = reply.status();
    let headers = reply.headers().clone();
    let bytes = axum::body::to_bytes(reply.into_body(), 1 << 20)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

impl Reply {
    /// I6: a problem+json document with `code`, the status that goes with it, a detail and the
    /// request's id; past a body limit the connection is closed after the answer (`limit_body`
    /// drains what the client sends), so a client reads the answer rather than a reset.
    pub fn expect_problem(&self, what: &str, code: ErrorCode) {
        let body = &self.json;
        assert_eq!(self.status.as_u16(), code.status(), "{what}: {body}");
        assert_eq!(
            self.headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some(PROBLEM_CONTENT_TYPE),
            "{what}: content type"
        );
        assert_eq!(body["code"], code.as_str(), "{what}: code in {body}");
        assert_eq!(body["status"], code.status(), "{what}: status member");
        assert!(body["detail"].is_string(), "{what}: detail in {body}");
        assert!(
            self.headers
                .get(REQUEST_ID_HEADER)
                .is_some_and(|id| !id.is_empty()),
            "{what}: X-Request-Id missing"
        );
        if code == ErrorCode::PayloadTooLarge {
            assert_eq!(
                self.headers
                    .get(header::CONNECTION)
                    .and_then(|v| v.to_str().ok()),
                Some("close"),
                "{what}: Connection"
            );
        }
    }
}

pub fn assert_problem(answer: &Answer, status: StatusCode, code: &str) {
    let (got, kind, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(kind, PROBLEM_CONTENT_TYPE, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
}

pub async fn executor_count(router: &Router, peer: Option<&PeerRole>) -> usize {
    let (status, _, body) = call(router, request(Method::GET, "/v1/executors", None, peer)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().unwrap().len()
}

/// Registers with `body` (as `peer` under TLS) and returns the executor's id.
pub async fn register(router: &Router, body: &str, peer: Option<&PeerRole>) -> String {
    let (status, _, grant) = call(
        router,
        request(Method::POST, "/v1/executors", Some(body), peer),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    grant["executor_id"].as_str().unwrap().to_owned()
}

/// Polls `path` until `accept` takes its answer, within [`LEADING_BOUND`].
pub async fn poll_answer(
    router: &Router,
    path: &str,
    peer: Option<&PeerRole>,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + LEADING_BOUND;
    loop {
        let (status, _, body) = call(router, request(Method::GET, path, None, peer)).await;
        if status == StatusCode::OK && accept(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path}: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The replicated state, through the read index, without what moves with the clock (lease
/// figures, handoff deadlines, loads): a refused request must leave it exactly as it was,
/// revision included.
pub async fn still_state(router: &Router, peer: Option<&PeerRole>) -> Value {
    let (status, _, mut state) = call(
        router,
        request(Method::GET, "/v1/state?consistent=true", None, peer),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{state}");
    if let Some(fields) = state.as_object_mut() {
        fields.remove("lease_remaining_is_bound");
    }
    for executor in state["executors"].as_array_mut().into_iter().flatten() {
        if let Some(fields) = executor.as_object_mut() {
            for moving in ["lease_remaining_ms", "load", "utilisation"] {
                fields.remove(moving);
            }
        }
    }
    for shard in state["shards"].as_array_mut().into_iter().flatten() {
        if let Some(handoff) = shard.get_mut("handoff").and_then(Value::as_object_mut) {
            handoff.remove("completes_by_expiry_in_ms");
        }
        if let Some(fields) = shard.as_object_mut() {
            fields.remove("load");
            fields.remove("hot");
        }
    }
    state
}

/// Waits until `executor_id` holds every shard and the state has then stayed the same for a
/// second (its lease reservation, P6.8, is written a moment after the registration), and returns
/// that state: from then on only the test's requests could change anything.
pub async fn settled_on(router: &Router, executor_id: &str, peer: Option<&PeerRole>) -> Value {
    poll_answer(router, "/v1/state", peer, |state| {
        state["shards"].as_array().is_some_and(|shards| {
            shards
                .iter()
                .filter(|s| s["owner"] == executor_id && s.get("handoff").is_none())
                .count()
                == SHARDS as usize
        })
    })
    .await;
    let deadline = Instant::now() + LEADING_BOUND;
    loop {
        let before = still_state(router, peer).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = still_state(router, peer).await;
        if before == after {
            return after;
        }
        assert!(
            Instant::now() < deadline,
            "the state still for a second within {LEADING_BOUND:?}: {before} then {after}"
        );
    }
}

/// The state's revision, read as `peer`.
pub async fn revision(router: &Router, peer: &PeerRole) -> Value {
    let (_, _, state) = call(router, request(Method::GET, "/v1/state", None, Some(peer))).await;
    state["revision"].clone()
}

/// A cluster CA with `managers` managers' certificates, an admin's and an executor's, in a
/// directory that lives as long as the first value.
pub fn certificates(managers: u64) -> (tempfile::TempDir, PathBuf) {
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

/// What the TLS listener attaches for a caller presenting `role`'s certificate from `dir`.
pub fn peer(dir: &Path, role: Role) -> PeerRole {
    peer_of_file(&dir.join(certs::cert_file_name(role)))
}

pub fn peer_of_file(certificate: &Path) -> PeerRole {
    let leaf = CertificateDer::from_pem_file(certificate).unwrap();
    PeerRole::of(&leaf)
}
