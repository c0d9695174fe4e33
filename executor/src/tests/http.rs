//! The push endpoints, health and status over the router, without a socket (§9, I6, P5.2).

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use leasehold_api::problem::PROBLEM_CONTENT_TYPE;
use leasehold_api::wire::Grant;
use serde_json::{json, Value};
use tokio::time::Instant;
use tower::ServiceExt;

use super::set;
use crate::admission::{AdmitError, Permit, RoleWanted};
use crate::members::{MemberSource, Members, MembersFuture};
use crate::routes::PushCheck;
use crate::shared::{LoadSettings, Shared};
use crate::{openapi, routes, server};
use leasehold_api::wire::Role;

const SHARD_COUNT: u32 = 8;

/// An executor registered as ex-1 at revision 10, holding shards 1 and 2 at epoch 1.
fn registered() -> Arc<Shared> {
    let shared = Arc::new(Shared::new(
        "http://127.0.0.1:9".into(),
        None,
        None,
        LoadSettings::default(),
    ));
    shared
        .apply_grant(
            Instant::now(),
            &Grant {
                generation: 0,
                shard_runs: None,
                executor_id: "ex-1".into(),
                lease_ttl_ms: 60_000,
                revision: 10,
                shard_count: SHARD_COUNT,
                shards: set(&[(1, 1), (2, 1)]),
                unchanged: false,
                secondaries: Vec::new(),
            },
        )
        .unwrap();
    shared
}

/// The library's app, as [`crate::Executor::start`] serves it.
pub(super) fn app(shared: &Arc<Shared>) -> Router {
    routes::app(
        Arc::clone(shared),
        &openapi::document(),
        Router::new(),
        PushCheck::Plaintext,
        leasehold_api::origin::HostPolicy::loopback("http://127.0.0.1:7101"),
    )
}

pub(super) async fn call(
    app: Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Option<String>, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    let body = match body {
        Some(value) => {
            request = request.header("content-type", "application/json");
            Body::from(value.to_string())
        }
        None => Body::empty(),
    };
    let response = app.oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, content_type, value)
}

pub(super) fn assert_problem(reply: &(StatusCode, Option<String>, Value), status: u16, code: &str) {
    assert_eq!(reply.0.as_u16(), status, "{reply:?}");
    assert_eq!(reply.1.as_deref(), Some(PROBLEM_CONTENT_TYPE), "{reply:?}");
    assert_eq!(reply.2["code"], code, "{reply:?}");
    assert_eq!(reply.2["status"], status, "{reply:?}");
}

#[tokio::test]
async fn p4_3_assignment_push_replaces_the_set() {
    let shared = registered();
    let reply = call(
        app(&shared),
        "PUT",
        "/v1/assignment",
        Some(json!({"executor_id": "ex-1", "revision": 11, "shard_count": SHARD_COUNT, "shards": [{"shard": 2, "epoch": 1}, {"shard": 5, "epoch": 3}]})),
    )
    .await;
    assert_eq!(reply.0, StatusCode::NO_CONTENT, "{reply:?}");
    assert_eq!(shared.admit(1), Err(AdmitError::NotOwner));
    assert_eq!(shared.admit(5), Ok(Permit::primary(5, 3)));
}

#[tokio::test]
async fn p4_1_stale_push_is_accepted_and_ignored() {
    let shared = registered();
    let reply = call(
        app(&shared),
        "PUT",
        "/v1/assignment",
        Some(
            json!({"executor_id": "ex-1", "revision": 9, "shard_count": SHARD_COUNT, "shards": []}),
        ),
    )
    .await;
    assert_eq!(reply.0, StatusCode::NO_CONTENT);
    assert_eq!(shared.admit(1), Ok(Permit::primary(1, 1)));
}

#[tokio::test]
async fn p5_2_revoke_is_answered_released_after_admission_stopped() {
    let shared = registered();
    let reply = call(
        app(&shared),
        "POST",
        "/v1/revoke",
        Some(json!({"executor_id": "ex-1", "revision": 12, "shards": [2]})),
    )
    .await;
    assert_eq!(reply.0, StatusCode::OK);
    assert_eq!(
        reply.2,
        json!({"revision": 12, "released": [2], "ignored": false})
    );
    assert_eq!(shared.admit(2), Err(AdmitError::NotOwner));
}

#[tokio::test]
async fn p5_2_stale_revoke_is_answered_ignored_never_as_done() {
    let shared = registered();
    let reply = call(
        app(&shared),
        "POST",
        "/v1/revoke",
        Some(json!({"executor_id": "ex-1", "revision": 9, "shards": [2]})),
    )
    .await;
    assert_eq!(reply.0, StatusCode::OK);
    assert_eq!(
        reply.2,
        json!({"revision": 9, "released": [], "ignored": true})
    );
    assert_eq!(shared.admit(2), Ok(Permit::primary(2, 1)));
}

#[tokio::test]
async fn i6_bad_pushes_are_4xx_problems_and_change_nothing() {
    let shared = registered();
    let cases = [
        (
            json!({"executor_id": "ex-1", "revision": 11, "shard_count": SHARD_COUNT, "shards": [], "lease_ttl_ms": 5}),
            "invalid_request",
        ),
        (
            json!({"executor_id": "ex-1", "revision": 11, "shard_count": SHARD_COUNT, "shards": [{"shard": 8, "epoch": 1}]}),
            "invalid_request",
        ),
        (
            json!({"executor_id": "ex-1", "revision": 11, "shard_count": SHARD_COUNT, "shards": [{"shard": 1, "epoch": 1}, {"shard": 1, "epoch": 2}]}),
            "invalid_request",
        ),
        (
            json!({"executor_id": "ex-1", "revision": 11, "shard_count": 16, "shards": []}),
            "invalid_request",
        ),
        (
            json!({"executor_id": "ex-1", "revision": 11, "shard_count": 0, "shards": []}),
            "invalid_request",
        ),
        (
            json!({"executor_id": "ex-1", "revision": -1, "shard_count": SHARD_COUNT, "shards": []}),
            "invalid_request",
        ),
        (
            json!({"executor_id": "ex-1", "revision": "11", "shard_count": SHARD_COUNT, "shards": []}),
            "invalid_request",
        ),
        (
            json!({"shard_count": SHARD_COUNT, "shards": []}),
            "invalid_request",
        ),
        (
            json!({"executor_id": "ex-1", "revision": 11, "shard_count": SHARD_COUNT, "shards": [{"shard": 1, "epoch": 1, "owner": "x"}]}),
            "invalid_request",
        ),
    ];
    for (body, code) in cases {
        let reply = call(app(&shared), "PUT", "/v1/assignment", Some(body.clone())).await;
        assert_problem(&reply, 400, code);
    }
    let revokes = [
        json!({"executor_id": "ex-1", "revision": 11, "shards": [8]}),
        json!({"executor_id": "ex-1", "revision": 11, "shards": [1, 1]}),
        json!({"executor_id": "ex-1", "revision": 11, "shards": [1], "epoch": 3}),
        json!({"executor_id": "ex-1", "revision": 11, "shards": [4294967296u64]}),
    ];
    for body in revokes {
        let reply = call(app(&shared), "POST", "/v1/revoke", Some(body)).await;
        assert_problem(&reply, 400, "invalid_request");
    }
    let status = shared.status();
    assert_eq!(status.revision, 10, "nothing changed");
    assert_eq!(status.shards, set(&[(1, 1), (2, 1)]));
}

#[tokio::test]
async fn i6_transport_level_errors_are_problems() {
    let shared = registered();
    // Not JSON.
    let response = app(&shared)
        .oneshot(
            Request::builder()
                .method("PUT")
                .uri("/v1/assignment")
                .header("content-type", "application/json")
                .body(Body::from("{not json"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    // Wrong media type.
    let response = app(&shared)
        .oneshot(
            Request::builder()
                .method("POST")
                .uri("/v1/revoke")
                .header("content-type", "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Too large.
    let huge = format!(
        "{{\"revision\": 1, \"shards\": [{}]}}",
        "1,".repeat(server::MAX_BODY_BYTES / 2) + "1"
    );
    let response = app(&shared)
        .oneshot(
            Request::builder()
                .method("POST")
                .uri("/v1/revoke")
                .header("content-type", "application/json")
                .body(Body::from(huge))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_problem(
        &call(app(&shared), "GET", "/v1/nowhere", None).await,
        404,
        "not_found",
    );
    assert_problem(
        &call(app(&shared), "GET", "/v1/assignment", None).await,
        405,
        "method_not_allowed",
    );
}

#[tokio::test]
async fn push_before_registration_is_refused_as_not_ready() {
    let shared = Arc::new(Shared::new(
        "http://127.0.0.1:9".into(),
        None,
        None,
        LoadSettings::default(),
    ));
    let reply = call(
        app(&shared),
        "PUT",
        "/v1/assignment",
        Some(json!({"executor_id": "ex-1", "revision": 11, "shard_count": SHARD_COUNT, "shards": [{"shard": 1, "epoch": 1}]})),
    )
    .await;
    assert_problem(&reply, 503, "sharding_not_ready");
    assert!(shared.status().shards.is_empty());
    assert_problem(
        &call(app(&shared), "GET", "/v1/health", None).await,
        503,
        "sharding_not_ready",
    );
}

#[tokio::test]
async fn health_and_status_describe_the_executor() {
    let shared = registered();
    let (status, _, health) = call(app(&shared), "GET", "/v1/health", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["executor_id"], "ex-1");
    assert_eq!(health["incarnation"].as_str().unwrap().len(), 32);
    let (status, _, view) = call(app(&shared), "GET", "/v1/status", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(view["executor_id"], "ex-1");
    assert_eq!(view["admission"], "admitting");
    assert_eq!(view["revision"], 10);
    assert_eq!(view["shard_count"], SHARD_COUNT);
    assert_eq!(
        view["shards"],
        json!([{"shard": 1, "epoch": 1}, {"shard": 2, "epoch": 1}])
    );
    assert_eq!(view["address"], "http://127.0.0.1:9");
    assert_eq!(view["stopping"], false);
    let remaining = view["lease_remaining_ms"].as_u64().unwrap();
    assert!(remaining > 59_000 && remaining <= 60_000, "{remaining}");
    assert!(view["monotonic_ns"].as_u64().unwrap() > 0);
    assert!(view.get("secondaries").is_none(), "absent without any");
}

/// P19.1, P19.5 over the push route: a push's secondaries are held (admitted only as
/// secondaries, shown by `/v1/status` with their readiness); a push naming a shard as both
/// the primary and a secondary is a `400` that changes nothing (I6).
#[tokio::test]
async fn p19_1_a_pushs_secondaries_are_held_and_shown_by_the_status() {
    let shared = registered();
    let push = |revision: u64, shards: Value, secondaries: Value| {
        call(
            app(&shared),
            "PUT",
            "/v1/assignment",
            Some(
                json!({"executor_id": "ex-1", "revision": revision, "shard_count": SHARD_COUNT,
                "shards": shards, "secondaries": secondaries}),
            ),
        )
    };
    let reply = push(
        11,
        json!([{"shard": 1, "epoch": 1}]),
        json!([{"shard": 2, "epoch": 2}, {"shard": 6, "epoch": 4}]),
    )
    .await;
    assert_eq!(reply.0, StatusCode::NO_CONTENT, "{reply:?}");
    assert_eq!(shared.admit(2), Err(AdmitError::NotOwner));
    assert_eq!(
        shared
            .admit_as(2, RoleWanted::Secondary)
            .map(|permit| permit.role),
        Ok(Role::Secondary)
    );
    shared.set_secondary_ready(6, 4, true).unwrap();
    let (_, _, view) = call(app(&shared), "GET", "/v1/status", None).await;
    assert_eq!(view["shards"], json!([{"shard": 1, "epoch": 1}]));
    assert_eq!(
        view["secondaries"],
        json!([{"shard": 2, "epoch": 2, "ready": false}, {"shard": 6, "epoch": 4, "ready": true}])
    );
    let reply = push(
        12,
        json!([{"shard": 1, "epoch": 1}]),
        json!([{"shard": 1, "epoch": 1}]),
    )
    .await;
    assert_problem(&reply, 400, "invalid_request");
    assert_eq!(shared.status().revision, 11, "nothing changed");
}

/// The library's app serves every route its document lists, and nothing of the binary's: an
/// embedder's listener has no `/v1/work` (nor `/metrics` unless it mounts it), and its
/// `GET /v1/openapi.json` says so.
#[tokio::test]
async fn the_library_serves_what_its_document_lists_and_not_the_workload() {
    let shared = registered();
    let document = openapi::document();
    for (path, item) in &document.paths.paths {
        let methods = [
            ("GET", item.get.is_some()),
            ("PUT", item.put.is_some()),
            ("POST", item.post.is_some()),
        ];
        for (method, _) in methods.into_iter().filter(|(_, present)| *present) {
            let reply = call(app(&shared), method, path, Some(json!({}))).await;
            assert_ne!(reply.0, StatusCode::NOT_FOUND, "{method} {path}: {reply:?}");
            assert_ne!(
                reply.0,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}: {reply:?}"
            );
        }
    }
    for path in ["/v1/work?key=a", "/metrics"] {
        assert_problem(
            &call(app(&shared), "GET", path, None).await,
            404,
            "not_found",
        );
    }
    let (status, _, served) = call(app(&shared), "GET", "/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    let published: Value =
        serde_json::from_str(&leasehold_api::openapi::to_pretty_json(&document)).unwrap();
    assert_eq!(served, published);
    assert!(served["paths"].get("/v1/work").is_none());
}

/// P13.3, P13.6 (the security review's finding 5): under TLS a push from anyone but a manager is
/// refused before its body is read: one announcing a body larger than any bound gets the
/// refusal (401 without a certificate), not the body limit's 413.
#[tokio::test]
async fn p13_3_a_push_is_refused_before_its_body_is_read() {
    let shared = registered();
    let app = routes::app(
        Arc::clone(&shared),
        &openapi::document(),
        Router::new(),
        PushCheck::Tls(Arc::new(Members::new(Arc::new(StaticVoters(vec![1]))))),
        leasehold_api::origin::HostPolicy::any(),
    );
    for (method, uri) in [("PUT", "/v1/assignment"), ("POST", "/v1/revoke")] {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .header(
                "content-length",
                (server::MAX_BODY_BYTES as u64 * 1_000).to_string(),
            )
            .body(Body::empty())
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {uri}"
        );
    }
}

/// A cluster whose voters are these node ids, as `GET /v1/cluster` would tell them.
#[derive(Debug)]
struct StaticVoters(Vec<u64>);

impl MemberSource for StaticVoters {
    fn voters(&self) -> MembersFuture<'_> {
        let voters = self.0.iter().copied().collect();
        Box::pin(async move { Ok(voters) })
    }
}

/// P13.3 (the security review's finding 6): under TLS a push is taken only from a manager
/// certificate whose node id is a member of the cluster as the managers report it. Node 3 holds
/// a valid manager certificate of the cluster's CA but is not a member (removed, or never
/// joined): its push at revision u64::MAX and its revoke of every shard are refused 403 before
/// anything changes; the same push from member node 1 applies.
///
/// Over a real TLS listener: the peer's role reaches the router only as the `PeerRole` the
/// listener derives from the verified certificate, which nothing else can mint.
#[tokio::test]
async fn p13_3_a_push_from_a_node_that_is_not_a_member_is_refused() {
    use leasehold_api::client::http_client_builder;
    use leasehold_api::ctl::certs::{self, cert_file_name, key_file_name, InitOptions};
    use leasehold_api::serve::ListenerLimits;
    use leasehold_api::tls::{Role, TlsConfig, TlsFiles};

    let dir = tempfile::tempdir().unwrap();
    certs::init(&InitOptions {
        dir: dir.path().to_owned(),
        managers: 3,
        hosts: vec![],
        force: false,
    })
    .unwrap();
    let tls = |role: Role| {
        TlsConfig::load(&TlsFiles {
            cert_file: dir.path().join(cert_file_name(role)),
            key_file: dir.path().join(key_file_name(role)),
            trusted_ca_file: dir.path().join(certs::CA_CERT_FILE),
        })
        .unwrap()
    };
    let shared = registered();
    let members = Arc::new(Members::new(Arc::new(StaticVoters(vec![1, 2]))));
    let app = routes::app(
        Arc::clone(&shared),
        &openapi::document(),
        Router::new(),
        PushCheck::Tls(members),
        leasehold_api::origin::HostPolicy::any(),
    );
    let listener = leasehold_api::serve::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(leasehold_api::serve::serve(
        listener,
        app,
        Some(tls(Role::Executor).server_config()),
        ListenerLimits::for_this_process(),
        async move {
            let _ = stopped.await;
        },
    ));
    let manager = |node_id| {
        http_client_builder(Some(&tls(Role::Manager { node_id })))
            .build()
            .unwrap()
    };
    let forged_push = json!({"executor_id": "ex-1", "revision": u64::MAX, "shard_count": SHARD_COUNT, "shards": []});
    let forged_revoke = json!({"executor_id": "ex-1", "revision": u64::MAX, "shards": [1, 2]});

    let stranger = manager(3);
    for (method, path, body) in [
        (reqwest::Method::PUT, "/v1/assignment", &forged_push),
        (reqwest::Method::POST, "/v1/revoke", &forged_revoke),
    ] {
        let reply = stranger
            .request(
                method,
                format!("https://127.0.0.1:{}{path}", address.port()),
            )
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 403, "{path}");
        let problem: Value = serde_json::from_slice(&reply.bytes().await.unwrap()).unwrap();
        assert_eq!(problem["code"], "forbidden", "{path}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("node 3 is not a member"),
            "{path}: {detail}"
        );
    }
    let status = shared.status();
    assert_eq!(status.revision, 10, "nothing changed");
    assert_eq!(status.shards, set(&[(1, 1), (2, 1)]));
    assert_eq!(shared.admit(1), Ok(Permit::primary(1, 1)));

    let member = manager(1);
    let reply = member
        .put(format!("https://127.0.0.1:{}/v1/assignment", address.port()))
        .json(&json!({"executor_id": "ex-1", "revision": 11, "shard_count": SHARD_COUNT, "shards": [{"shard": 2, "epoch": 1}, {"shard": 5, "epoch": 3}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status().as_u16(), 204);
    assert_eq!(shared.status().revision, 11);
    assert_eq!(shared.admit(5), Ok(Permit::primary(5, 3)));
    assert_eq!(shared.admit(1), Err(AdmitError::NotOwner));

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

/// Hooks that record what they were asked and take `delay` each.
#[derive(Debug, Default)]
struct RecordingHooks {
    delay: std::time::Duration,
    prepared: std::sync::Mutex<Vec<(u32, u64)>>,
    released: std::sync::Mutex<Vec<u32>>,
}

impl crate::HandoffHooks for RecordingHooks {
    fn prepare(&self, shard: u32, epoch: u64) -> crate::HookFuture {
        self.prepared.lock().unwrap().push((shard, epoch));
        Box::pin(tokio::time::sleep(self.delay))
    }

    fn release(&self, shard: u32) -> crate::HookFuture {
        self.released.lock().unwrap().push(shard);
        Box::pin(tokio::time::sleep(self.delay))
    }
}

fn with_hooks(hooks: &Arc<RecordingHooks>) -> Arc<Shared> {
    let shared = Arc::try_unwrap(registered()).unwrap();
    let hooks: Arc<dyn crate::HandoffHooks> = Arc::clone(hooks) as Arc<dyn crate::HandoffHooks>;
    Arc::new(shared.with_hooks(Some(crate::Hooks(hooks))))
}

/// P17.1: a prepare runs the hook of each shard with the epoch it will arrive at, admits
/// nothing, and answers once they are done; a prepare for another executor is refused.
#[tokio::test(start_paused = true)]
async fn p17_1_a_prepare_runs_the_hooks_and_admits_nothing() {
    let hooks = Arc::new(RecordingHooks {
        delay: std::time::Duration::from_millis(200),
        ..RecordingHooks::default()
    });
    let shared = with_hooks(&hooks);
    let asked = Instant::now();
    let body = json!({
        "executor_id": "ex-1",
        "revision": 11,
        "shards": [{"shard": 5, "epoch": 3}, {"shard": 6, "epoch": 1}],
        "wait_ms": 5000
    });
    let (status, _, reply) = call(app(&shared), "POST", "/v1/prepare", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply, json!({"prepared": [5, 6]}));
    assert_eq!(asked.elapsed(), std::time::Duration::from_millis(200));
    assert_eq!(*hooks.prepared.lock().unwrap(), vec![(5, 3), (6, 1)]);
    assert!(shared.admit(5).is_err(), "preparing admits nothing");
    // Past the wait: answered with what is done.
    let short = json!({
        "executor_id": "ex-1", "revision": 11, "shards": [{"shard": 7, "epoch": 1}], "wait_ms": 50
    });
    let (status, _, reply) = call(app(&shared), "POST", "/v1/prepare", Some(short)).await;
    assert_eq!((status, reply), (StatusCode::OK, json!({"prepared": []})));
    let other = json!({"executor_id": "ex-9", "revision": 11, "shards": [], "wait_ms": 1});
    let (status, _, _) = call(app(&shared), "POST", "/v1/prepare", Some(other)).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

/// P17.1, P5.2: a revoke stops admission at once, runs the release hooks and is answered once
/// they are done, within 1.5 s whatever they take.
#[tokio::test(start_paused = true)]
async fn p17_1_a_revoke_waits_for_the_release_hooks_within_its_bound() {
    for (delay_ms, answered_after_ms) in [(300, 300), (10_000, 1_500)] {
        let hooks = Arc::new(RecordingHooks {
            delay: std::time::Duration::from_millis(delay_ms),
            ..RecordingHooks::default()
        });
        let shared = with_hooks(&hooks);
        let asked = Instant::now();
        let revoke = json!({"executor_id": "ex-1", "revision": 11, "shards": [1]});
        let (status, _, reply) = call(app(&shared), "POST", "/v1/revoke", Some(revoke)).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert_eq!(reply["released"], json!([1]));
        assert_eq!(
            asked.elapsed(),
            std::time::Duration::from_millis(answered_after_ms),
            "hook of {delay_ms} ms"
        );
        assert_eq!(*hooks.released.lock().unwrap(), vec![1]);
        assert!(shared.admit(1).is_err());
        assert!(shared.admit(2).is_ok(), "shard 2 was not revoked");
    }
}

/// P17.1: the leader asks a new receiver to prepare as soon as its registration commits, which
/// can be before the registration's answer reaches it: a prepare waits for that answer (within
/// its wait) instead of being refused, since it is not asked again. Without a registration in
/// flight, or with none answered in time, it is refused as not ready.
#[tokio::test(start_paused = true)]
async fn p17_1_a_prepare_overtaking_the_registration_answer_waits_for_it() {
    let hooks = Arc::new(RecordingHooks::default());
    let unregistered = || {
        let shared = Shared::new(
            "http://127.0.0.1:9".into(),
            None,
            None,
            LoadSettings::default(),
        );
        let hooks: Arc<dyn crate::HandoffHooks> =
            Arc::clone(&hooks) as Arc<dyn crate::HandoffHooks>;
        Arc::new(shared.with_hooks(Some(crate::Hooks(hooks))))
    };
    let body = json!({
        "executor_id": "ex-1", "revision": 11, "shards": [{"shard": 5, "epoch": 3}], "wait_ms": 2000
    });

    let idle = unregistered();
    let asked = Instant::now();
    let reply = call(app(&idle), "POST", "/v1/prepare", Some(body.clone())).await;
    assert_problem(&reply, 503, "sharding_not_ready");
    assert_eq!(
        asked.elapsed(),
        std::time::Duration::ZERO,
        "nothing to wait for"
    );

    let registering = unregistered();
    registering.register_request(true);
    let prepare = tokio::spawn(call(
        app(&registering),
        "POST",
        "/v1/prepare",
        Some(body.clone()),
    ));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !prepare.is_finished(),
        "the prepare waits for the registration's answer"
    );
    registering
        .apply_grant(
            Instant::now(),
            &Grant {
                generation: 0,
                shard_runs: None,
                executor_id: "ex-1".into(),
                lease_ttl_ms: 60_000,
                revision: 10,
                shard_count: SHARD_COUNT,
                shards: set(&[]),
                unchanged: false,
                secondaries: Vec::new(),
            },
        )
        .unwrap();
    let (status, _, reply) = prepare.await.unwrap();
    assert_eq!((status, reply), (StatusCode::OK, json!({"prepared": [5]})));
    assert_eq!(*hooks.prepared.lock().unwrap(), vec![(5, 3)]);

    let unanswered = unregistered();
    unanswered.register_request(true);
    let asked = Instant::now();
    let reply = call(app(&unanswered), "POST", "/v1/prepare", Some(body)).await;
    assert_problem(&reply, 503, "sharding_not_ready");
    assert_eq!(
        asked.elapsed(),
        std::time::Duration::from_secs(2),
        "refused at the wait's end"
    );
}
