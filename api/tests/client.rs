//! The client against in-process fake managers on 127.0.0.1: leader following, P7.1 patience,
//! P7.2 retries of idempotent calls, and the replies each typed call expects.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Path;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use leasehold_api::wire::{AuditRecordView, MaintenanceRequest, MaintenanceView, ShardView};
use leasehold_api::{
    AddNodeRequest, Client, ClientConfig, ClientError, ClusterInfo, ErrorCode, Grant, Problem,
    RegisterRequest, ReleaseRequest, RenewRequest, ShardEpoch, LEADER_HEADER, PROBLEM_CONTENT_TYPE,
    REQUEST_ID_HEADER,
};

/// Short timings so failure paths finish quickly; the protocol defaults are tested elsewhere.
fn fast_config() -> ClientConfig {
    ClientConfig {
        request_timeout: Duration::from_millis(500),
        patience: Duration::from_secs(5),
        retry_interval: Duration::from_millis(50),
    }
}

fn client(endpoints: &[&str], config: ClientConfig) -> Client {
    Client::with_config(endpoints.iter().map(|e| e.to_string()).collect(), config).unwrap()
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// A base URL where nothing listens: bind, note the port, close.
/// An endpoint that refuses every connection: a port bound but never listened on, held for as
/// long as the value lives. A port freed instead could be taken by any other test's server on
/// the machine (one answered `404` here once), which would make it not dead at all.
struct DeadEndpoint {
    url: String,
    _held: tokio::net::TcpSocket,
}

impl DeadEndpoint {
    fn url(&self) -> &str {
        &self.url
    }
}

async fn dead_endpoint() -> DeadEndpoint {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    DeadEndpoint {
        url: format!("http://{addr}"),
        _held: socket,
    }
}

fn problem(code: ErrorCode, leader: Option<&str>) -> Response {
    let mut problem = Problem::new(code, format!("fake manager says {code}"));
    if let Some(leader) = leader {
        problem = problem.with_leader(leader);
    }
    let status = StatusCode::from_u16(problem.status).unwrap();
    let body = serde_json::to_string(&problem).unwrap();
    (status, [(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)], body).into_response()
}

fn grant(executor_id: &str) -> Grant {
    Grant {
        generation: 0,
        shard_runs: None,
        executor_id: executor_id.to_owned(),
        lease_ttl_ms: 60_000,
        revision: 7,
        shard_count: 4,
        shards: vec![ShardEpoch { shard: 1, epoch: 3 }],
        unchanged: false,
        secondaries: Vec::new(),
    }
}

fn register_request() -> RegisterRequest {
    RegisterRequest {
        follows_generations: false,
        namespace: None,
        incarnation: "inc-1".into(),
        address: "http://127.0.0.1:9000".into(),
        name: None,
        credential: None,
        capacity: None,
        app_version: None,
        labels: Default::default(),
    }
}

fn renew_request() -> RenewRequest {
    RenewRequest {
        claim_runs: None,
        claims: vec![ShardEpoch { shard: 1, epoch: 3 }],
        revision: 7,
        loads: None,
        accept_unchanged: false,
        ready: Vec::new(),
    }
}

fn cluster_info(node_id: u64) -> ClusterInfo {
    ClusterInfo {
        node_id,
        leader_id: Some(2),
        leader_address: None,
        term: 1,
        voters: vec![],
        learners: vec![],
        last_log_index: None,
        committed_index: None,
        applied_index: None,
        snapshot: None,
        release: None,
        cluster_version: None,
        schemas: None,
    }
}

/// A counter shared between a fake handler and the test.
#[derive(Clone, Default)]
struct Hits(Arc<AtomicUsize>);

impl Hits {
    /// Count a request and return its 1-based number.
    fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A fake manager whose register endpoint answers with `respond(n)` for the n-th request.
async fn register_server(
    respond: impl Fn(usize) -> Response + Clone + Send + Sync + 'static,
) -> (String, Hits) {
    let hits = Hits::default();
    let counter = hits.clone();
    let router = Router::new().route(
        "/v1/executors",
        post(move |Json(_): Json<RegisterRequest>| {
            let respond = respond.clone();
            let n = counter.bump();
            async move { respond(n) }
        }),
    );
    (serve(router).await, hits)
}

#[tokio::test]
async fn leader_header_is_followed_on_the_next_request() {
    let leader_hits = Hits::default();
    let counter = leader_hits.clone();
    let leader = serve(Router::new().route(
        "/v1/cluster",
        get(move || {
            counter.bump();
            async { Json(cluster_info(2)) }
        }),
    ))
    .await;

    let follower_hits = Hits::default();
    let counter = follower_hits.clone();
    let leader_url = leader.clone();
    let follower = serve(Router::new().route(
        "/v1/cluster",
        get(move || {
            counter.bump();
            let leader_url = leader_url.clone();
            async move { ([(LEADER_HEADER, leader_url)], Json(cluster_info(1))) }
        }),
    ))
    .await;

    let client = client(&[&follower], fast_config());
    assert_eq!(client.cluster_info().await.unwrap().node_id, 1);
    assert_eq!(client.leader_hint().as_deref(), Some(leader.as_str()));
    assert_eq!(client.cluster_info().await.unwrap().node_id, 2);
    assert_eq!((follower_hits.get(), leader_hits.get()), (1, 1));
}

#[tokio::test]
async fn not_leader_refusal_is_retried_on_another_endpoint() {
    let (refusing, refusing_hits) = register_server(|_| problem(ErrorCode::NotLeader, None)).await;
    let (serving, serving_hits) = register_server(|_| Json(grant("ex-1")).into_response()).await;

    let client = client(&[&refusing, &serving], fast_config());
    let got = client.register(&register_request()).await.unwrap();
    assert_eq!(got, grant("ex-1"));
    assert_eq!((refusing_hits.get(), serving_hits.get()), (1, 1));
}

#[tokio::test]
async fn not_leader_naming_the_leader_in_the_body_is_followed() {
    let (leader, leader_hits) = register_server(|_| Json(grant("ex-1")).into_response()).await;
    let named = leader.clone();
    let (refusing, refusing_hits) =
        register_server(move |_| problem(ErrorCode::NotLeader, Some(&named))).await;

    // The leader is not among the configured endpoints: only the refusal names it.
    let client = client(&[&refusing], fast_config());
    assert_eq!(
        client.register(&register_request()).await.unwrap(),
        grant("ex-1")
    );
    assert_eq!((refusing_hits.get(), leader_hits.get()), (1, 1));
}

#[tokio::test]
async fn no_leader_is_retried_until_a_leader_answers() {
    let (server, hits) = register_server(|n| {
        if n <= 3 {
            problem(ErrorCode::NoLeader, None)
        } else {
            Json(grant("ex-1")).into_response()
        }
    })
    .await;

    let client = client(&[&server], fast_config());
    assert_eq!(
        client.register(&register_request()).await.unwrap(),
        grant("ex-1")
    );
    assert_eq!(hits.get(), 4);
}

#[tokio::test]
async fn patience_exhausted_returns_the_last_refusal() {
    let (server, hits) = register_server(|_| problem(ErrorCode::NoLeader, None)).await;
    let config = ClientConfig {
        patience: Duration::from_millis(600),
        retry_interval: Duration::from_millis(50),
        ..fast_config()
    };
    let client = client(&[&server], config);

    let error = client.register(&register_request()).await.unwrap_err();
    match &error {
        ClientError::PatienceExhausted { last } => {
            assert!(matches!(**last, ClientError::Problem(ref p) if p.code == ErrorCode::NoLeader));
        }
        other => panic!("expected PatienceExhausted, got {other:?}"),
    }
    assert_eq!(error.code(), Some(ErrorCode::NoLeader));
    assert!(hits.get() > 1, "gave up after {} attempt(s)", hits.get());
}

#[tokio::test]
async fn non_retryable_problem_is_returned_after_one_attempt() {
    let (server, hits) = register_server(|_| problem(ErrorCode::InvalidRequest, None)).await;
    let client = client(&[&server], fast_config());

    let error = client.register(&register_request()).await.unwrap_err();
    let ClientError::Problem(problem) = &error else {
        panic!("expected a problem, got {error:?}");
    };
    assert_eq!(problem.code, ErrorCode::InvalidRequest);
    assert_eq!(problem.status, 400);
    assert_eq!(
        problem.type_,
        "https://leasehold.dev/problems/invalid_request"
    );
    assert_eq!(hits.get(), 1);
}

#[tokio::test]
async fn unreachable_endpoint_is_skipped_for_a_live_one() {
    let dead = dead_endpoint().await;
    let (live, hits) = register_server(|_| Json(grant("ex-1")).into_response()).await;

    let client = client(&[dead.url(), &live], fast_config());
    assert_eq!(
        client.register(&register_request()).await.unwrap(),
        grant("ex-1")
    );
    assert_eq!(hits.get(), 1);
}

/// A refused connection sent nothing, so even a non-idempotent call may go elsewhere.
#[tokio::test]
async fn unreachable_endpoint_is_skipped_even_for_non_idempotent_calls() {
    let dead = dead_endpoint().await;
    let hits = Hits::default();
    let counter = hits.clone();
    let live = serve(Router::new().route(
        "/v1/cluster/nodes",
        post(move |Json(body): Json<AddNodeRequest>| {
            counter.bump();
            async move {
                Json(serde_json::json!({
                    "node_id": 1, "leader_id": 1, "leader_address": null, "term": 2,
                    "voters": [{"node_id": body.node_id, "address": body.address}],
                    "learners": [], "last_log_index": null, "committed_index": null,
                    "applied_index": null, "snapshot": null
                }))
            }
        }),
    ))
    .await;

    let client = client(&[dead.url(), &live], fast_config());
    let request = AddNodeRequest {
        node_id: 4,
        address: "http://127.0.0.1:7004".into(),
    };
    let membership = client.add_node(&request).await.unwrap();
    assert_eq!(membership.voters.len(), 1);
    assert_eq!(
        membership.voters[0].node_id, 4,
        "the reply is the one that answered"
    );
    assert_eq!(hits.get(), 1);
}

#[tokio::test]
async fn all_endpoints_unreachable_exhausts_patience() {
    let config = ClientConfig {
        patience: Duration::from_millis(300),
        ..fast_config()
    };
    let (first, second) = (dead_endpoint().await, dead_endpoint().await);
    let client = client(&[first.url(), second.url()], config);
    let error = client.cluster_info().await.unwrap_err();
    let ClientError::PatienceExhausted { last } = error else {
        panic!("expected PatienceExhausted, got {error:?}");
    };
    assert!(matches!(*last, ClientError::Transport(_)), "{last:?}");
}

/// P7.2: a renewal whose outcome is unknown (server timed out) is repeated; an add-node is not.
#[tokio::test]
async fn unknown_outcome_is_retried_only_for_idempotent_calls() {
    let renew_hits = Hits::default();
    let add_hits = Hits::default();
    let (renew_counter, add_counter) = (renew_hits.clone(), add_hits.clone());
    let server = serve(
        Router::new()
            .route(
                "/v1/executors/{id}/renew",
                post(move |Path(id): Path<String>, Json(_): Json<RenewRequest>| {
                    let n = renew_counter.bump();
                    async move {
                        if n == 1 {
                            problem(ErrorCode::Timeout, None)
                        } else {
                            Json(grant(&id)).into_response()
                        }
                    }
                }),
            )
            .route(
                "/v1/cluster/nodes",
                post(move || {
                    add_counter.bump();
                    async { problem(ErrorCode::Timeout, None) }
                }),
            ),
    )
    .await;

    let client = client(&[&server], fast_config());
    assert_eq!(
        client.renew("ex-1", None, &renew_request()).await.unwrap(),
        grant("ex-1")
    );
    assert_eq!(renew_hits.get(), 2);

    let request = AddNodeRequest {
        node_id: 4,
        address: "http://127.0.0.1:7004".into(),
    };
    let error = client.add_node(&request).await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::Timeout));
    assert_eq!(add_hits.get(), 1);
}

/// A client-side timeout after sending: repeated for renew (P7.2), returned for a snapshot.
#[tokio::test]
async fn request_timeout_after_sending_is_retried_only_for_idempotent_calls() {
    let renew_hits = Hits::default();
    let snapshot_hits = Hits::default();
    let (renew_counter, snapshot_counter) = (renew_hits.clone(), snapshot_hits.clone());
    let server = serve(
        Router::new()
            .route(
                "/v1/executors/{id}/renew",
                post(move |Path(id): Path<String>| {
                    let n = renew_counter.bump();
                    async move {
                        if n == 1 {
                            tokio::time::sleep(Duration::from_millis(800)).await;
                        }
                        Json(grant(&id))
                    }
                }),
            )
            .route(
                "/v1/cluster/snapshot",
                post(move || {
                    snapshot_counter.bump();
                    async {
                        tokio::time::sleep(Duration::from_millis(800)).await;
                        StatusCode::OK
                    }
                }),
            ),
    )
    .await;

    let config = ClientConfig {
        request_timeout: Duration::from_millis(200),
        ..fast_config()
    };
    let client = client(&[&server], config);
    assert_eq!(
        client.renew("ex-1", None, &renew_request()).await.unwrap(),
        grant("ex-1")
    );
    assert_eq!(renew_hits.get(), 2);

    let error = client.trigger_snapshot().await.unwrap_err();
    assert!(matches!(error, ClientError::Transport(_)), "{error:?}");
    assert_eq!(snapshot_hits.get(), 1);
}

#[tokio::test]
async fn sharding_not_ready_is_retried() {
    let (server, hits) = register_server(|n| {
        if n == 1 {
            problem(ErrorCode::ShardingNotReady, None)
        } else {
            Json(grant("ex-1")).into_response()
        }
    })
    .await;
    let client = client(&[&server], fast_config());
    assert_eq!(
        client.register(&register_request()).await.unwrap(),
        grant("ex-1")
    );
    assert_eq!(hits.get(), 2);
}

#[tokio::test]
async fn deregister_expects_204() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = seen.clone();
    let server = serve(Router::new().route(
        "/v1/executors/{id}",
        delete(move |Path(id): Path<String>| {
            recorder.lock().unwrap().push(id.clone());
            async move {
                match id.as_str() {
                    "wrong-status" => StatusCode::OK.into_response(),
                    "never-existed" => problem(ErrorCode::NotFound, None),
                    _ => StatusCode::NO_CONTENT.into_response(),
                }
            }
        }),
    ))
    .await;
    let client = client(&[&server], fast_config());

    client.deregister("ex-1", None).await.unwrap();
    let error = client.deregister("wrong-status", None).await.unwrap_err();
    assert!(
        matches!(error, ClientError::Unexpected { status: 200, .. }),
        "{error:?}"
    );
    let error = client.deregister("never-existed", None).await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound));
    assert_eq!(
        *seen.lock().unwrap(),
        ["ex-1", "wrong-status", "never-existed"]
    );
}

#[tokio::test]
async fn executor_ids_are_percent_encoded_and_bad_ones_refused_locally() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = seen.clone();
    let server = serve(Router::new().route(
        "/v1/executors/{id}/release",
        post(
            move |Path(id): Path<String>, Json(body): Json<ReleaseRequest>| {
                recorder.lock().unwrap().push((id, body));
                async { StatusCode::NO_CONTENT }
            },
        ),
    ))
    .await;
    let client = client(&[&server], fast_config());
    let release = ReleaseRequest {
        shards: vec![1, 2],
        revoke_revision: 9,
    };

    client.release("ex:1%?", None, &release).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [("ex:1%?".to_owned(), release.clone())]
    );

    for bad in ["a/b", "a b", ""] {
        let error = client.release(bad, None, &release).await.unwrap_err();
        assert!(
            matches!(error, ClientError::InvalidRequest(_)),
            "{bad:?}: {error:?}"
        );
        assert_eq!(error.code(), Some(ErrorCode::InvalidRequest));
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "refused ids never reach the server"
    );
}

/// Retries of one call carry one request id, and bodies go out as JSON.
#[tokio::test]
async fn retries_reuse_the_request_id_and_send_json() {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let recorder = ids.clone();
    let server = serve(Router::new().route(
        "/v1/executors",
        post(
            move |headers: HeaderMap, Json(body): Json<RegisterRequest>| {
                let mut ids = recorder.lock().unwrap();
                assert_eq!(headers[header::CONTENT_TYPE], "application/json");
                assert_eq!(body, register_request());
                ids.push(headers[REQUEST_ID_HEADER].to_str().unwrap().to_owned());
                let first = ids.len() == 1;
                async move {
                    if first {
                        problem(ErrorCode::NoLeader, None)
                    } else {
                        Json(grant("ex-1")).into_response()
                    }
                }
            },
        ),
    ))
    .await;
    let client = client(&[&server], fast_config());
    client.register(&register_request()).await.unwrap();
    client.register(&register_request()).await.unwrap();

    let ids = ids.lock().unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], ids[1], "a retry keeps its call's id");
    assert_ne!(ids[1], ids[2], "a new call gets a new id");
}

#[tokio::test]
async fn non_problem_error_is_unexpected() {
    let (server, hits) =
        register_server(|_| (StatusCode::IM_A_TEAPOT, "short and stout").into_response()).await;
    let client = client(&[&server], fast_config());
    let error = client.register(&register_request()).await.unwrap_err();
    assert_eq!(
        error,
        ClientError::Unexpected {
            status: 418,
            body: "short and stout".into()
        }
    );
    assert_eq!(error.code(), None);
    assert_eq!(hits.get(), 1);
}

#[tokio::test]
async fn malformed_success_body_is_a_decode_error() {
    let (server, _) =
        register_server(|_| Json(serde_json::json!({"executor_id": 5})).into_response()).await;
    let client = client(&[&server], fast_config());
    let error = client.register(&register_request()).await.unwrap_err();
    assert!(matches!(error, ClientError::Decode(_)), "{error:?}");
}

#[tokio::test]
async fn cluster_info_from_asks_exactly_one_node() {
    let (down, up) = (
        dead_endpoint().await,
        serve(Router::new().route("/v1/cluster", get(|| async { Json(cluster_info(3)) }))).await,
    );
    let client = client(&[&up], fast_config());
    assert_eq!(client.cluster_info_from(&up).await.unwrap().node_id, 3);
    let error = client.cluster_info_from(down.url()).await.unwrap_err();
    assert!(matches!(error, ClientError::Transport(_)), "{error:?}");
    assert!(matches!(
        client.cluster_info_from("not a url").await,
        Err(ClientError::InvalidEndpoint(_))
    ));
}

#[tokio::test]
async fn get_json_reads_inspection_paths() {
    let server = serve(Router::new().route(
        "/v1/routing",
        get(
            |axum::extract::RawQuery(query): axum::extract::RawQuery| async move {
                Json(serde_json::json!({"query": query}))
            },
        ),
    ))
    .await;
    let client = client(&[&server], fast_config());
    assert_eq!(
        client.get_json("/v1/routing?key=k1").await.unwrap(),
        serde_json::json!({"query": "key=k1"})
    );
    assert!(matches!(
        client.get_json("v1/routing").await,
        Err(ClientError::InvalidRequest(_))
    ));
}

/// P14.3: the client knows the cluster version the last manager stated, so a caller can hold back
/// a request field of a newer schema; a manager that states none is of 0.1.0 (schema 2).
#[tokio::test]
async fn the_client_reports_the_cluster_version_the_last_reply_stated() {
    let new = serve(Router::new().route(
        "/v1/cluster",
        get(|| async {
            (
                [(leasehold_api::CLUSTER_VERSION_HEADER, "12")],
                Json(cluster_info(1)),
            )
        }),
    ))
    .await;
    let old =
        serve(Router::new().route("/v1/cluster", get(|| async { Json(cluster_info(2)) }))).await;
    let client = client(&[&new], fast_config());
    assert_eq!(client.cluster_version(), 2, "nothing heard yet: 0.1.0's");
    client.cluster_info().await.unwrap();
    assert_eq!(client.cluster_version(), 12);
    client.cluster_info_from(&old).await.unwrap();
    assert_eq!(
        client.cluster_version(),
        2,
        "a manager of 0.1.0 answered: its cluster is at schema 2"
    );
}

/// "Versions": the client sends a renewal's claims as runs only to a manager that stated cluster
/// version 12 or later (a manager before it refuses the field), and hands on the grant with its
/// set listed, whichever form it came back in.
#[tokio::test]
async fn renewal_claims_go_as_runs_once_the_cluster_version_allows() {
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let hits = Hits::default();
    let (seen, counter) = (bodies.clone(), hits.clone());
    let held: Vec<ShardEpoch> = (0..3).map(|shard| ShardEpoch { shard, epoch: 5 }).collect();
    let set = held.clone();
    let router = Router::new().route(
        "/v1/executors/{id}/renew",
        post(move |Json(body): Json<serde_json::Value>| {
            let n = counter.bump();
            seen.lock().unwrap().push(body.clone());
            let mut grant = grant("ex-1");
            grant.shards = set.clone();
            if body.get("claim_runs").is_some() {
                grant = grant.into_shard_runs();
            }
            // The first reply states 2 (0.1.0's cluster version), every later one 12 (0.2.0's).
            let stated = if n == 1 { "2" } else { "12" };
            async move {
                (
                    [(leasehold_api::CLUSTER_VERSION_HEADER, stated)],
                    Json(grant),
                )
            }
        }),
    );
    let base = serve(router).await;
    let client = client(&[&base], fast_config());
    let request = RenewRequest {
        claims: held.clone(),
        ..renew_request()
    };
    for _ in 0..3 {
        let grant = client.renew("ex-1", None, &request).await.unwrap();
        assert_eq!(grant.shards, held, "the grant lists its set");
        assert_eq!(grant.shard_runs, None);
    }
    let bodies = bodies.lock().unwrap().clone();
    let full = serde_json::json!({
        "claims": [{"shard": 0, "epoch": 5}, {"shard": 1, "epoch": 5}, {"shard": 2, "epoch": 5}],
        "revision": 7,
    });
    assert_eq!(bodies[0], full, "nothing heard yet: the form 0.1.0 reads");
    assert_eq!(bodies[1], full, "cluster version 2 does not read runs");
    assert_eq!(
        bodies[2],
        serde_json::json!({
            "claims": [],
            "claim_runs": [[0, 3, 5]],
            "revision": 7,
            "accept_unchanged": true,
        }),
        "cluster version 12: runs (and \"unchanged\" taken for an answer, of the same release)"
    );
    assert_eq!(hits.get(), 3);
}

fn grant_with_shard_count_8() -> Grant {
    Grant {
        shard_count: 8,
        ..grant("ex-1")
    }
}

/// "Versions": the client asks for "unchanged" only of a manager that stated cluster version 12
/// or later (one before it refuses the field), and hands on an unchanged grant with the claims it
/// sent as its set; an unchanged grant that lists a set too is refused, not guessed at.
#[tokio::test]
async fn an_unchanged_grant_is_handed_on_with_the_claims_as_its_set() {
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let hits = Hits::default();
    let (seen, counter) = (bodies.clone(), hits.clone());
    let held: Vec<ShardEpoch> = [(4, 2), (0, 5), (1, 5)]
        .into_iter()
        .map(|(shard, epoch)| ShardEpoch { shard, epoch })
        .collect();
    let router = Router::new().route(
        "/v1/executors/{id}/renew",
        post(move |Json(body): Json<serde_json::Value>| {
            let n = counter.bump();
            seen.lock().unwrap().push(body.clone());
            let mut grant = grant_with_shard_count_8();
            if body["accept_unchanged"] == true {
                grant = grant.into_unchanged();
            }
            if n == 5 {
                // Unchanged and a set: the two could disagree.
                grant.shards = vec![ShardEpoch { shard: 0, epoch: 5 }];
            }
            // The first reply states 2 (0.1.0's cluster version), every later one 12 (0.2.0's).
            let stated = if n == 1 { "2" } else { "12" };
            async move {
                (
                    [(leasehold_api::CLUSTER_VERSION_HEADER, stated)],
                    Json(grant),
                )
            }
        }),
    );
    let base = serve(router).await;
    let client = client(&[&base], fast_config());
    let request = RenewRequest {
        claims: held.clone(),
        ..renew_request()
    };
    for _ in 0..2 {
        let full = client.renew("ex-1", None, &request).await.unwrap();
        assert_eq!(
            full,
            grant_with_shard_count_8(),
            "a full grant is handed on as it came"
        );
    }
    let mut ascending = held.clone();
    ascending.sort_by_key(|claim| claim.shard);
    for _ in 0..2 {
        let grant = client.renew("ex-1", None, &request).await.unwrap();
        assert!(!grant.unchanged, "handed on expanded");
        assert_eq!(grant.shards, ascending, "the claims are the set");
        assert_eq!(grant.shard_runs, None);
    }
    let error = client.renew("ex-1", None, &request).await.unwrap_err();
    assert!(
        error.to_string().contains("unchanged"),
        "an unchanged grant listing a set is refused: {error}"
    );
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies[0].get("accept_unchanged"), None, "nothing heard yet");
    assert_eq!(
        bodies[1].get("accept_unchanged"),
        None,
        "cluster version 2 does not read it"
    );
    assert_eq!(
        bodies[2]["accept_unchanged"], true,
        "cluster version 12 does"
    );
    assert_eq!(
        bodies[2]["claim_runs"],
        serde_json::json!([[0, 2, 5], [4, 1, 2]])
    );
    assert_eq!(hits.get(), 5);
}

/// P13.6: a `429 rate_limited` is retried on the same replica after the `Retry-After` it names,
/// not at the client's own retry interval.
#[tokio::test]
async fn rate_limited_waits_as_long_as_retry_after_asks() {
    let (server, hits) = register_server(|n| {
        if n == 1 {
            let mut refused = problem(ErrorCode::RateLimited, None);
            refused
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            refused
        } else {
            Json(grant("ex-1")).into_response()
        }
    })
    .await;
    let client = client(&[&server], fast_config());

    let started = std::time::Instant::now();
    assert_eq!(
        client.register(&register_request()).await.unwrap(),
        grant("ex-1")
    );
    assert_eq!(hits.get(), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retried after {:?}, before the Retry-After of 1 s",
        started.elapsed()
    );
}

// ---- operator controls (PROTOCOL P17.4) ------------------------------------------------------

/// One request as the fake leader saw it: method, path, body.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

fn shard_view(owner: &str, pinned_to: Option<&str>) -> ShardView {
    ShardView {
        shard: 3,
        owner: Some(owner.into()),
        epoch: 4,
        handoff: None,
        load: None,
        hot: false,
        pinned_to: pinned_to.map(str::to_owned),
        secondaries: Vec::new(),
    }
}

/// A leader that records every request and answers each operator route as the manager does;
/// anything else is `404 not_found`.
async fn operator_leader(seen: Seen) -> String {
    let router = Router::new().fallback(
        move |method: axum::http::Method, uri: axum::http::Uri, body: axum::body::Bytes| {
            let seen = Arc::clone(&seen);
            async move {
                let path = uri.path().to_owned();
                let body = String::from_utf8(body.to_vec()).unwrap();
                seen.lock()
                    .unwrap()
                    .push((method.to_string(), path.clone(), body.clone()));
                match (method.as_str(), path.as_str()) {
                    ("GET", "/v1/cluster/maintenance") => Json(MaintenanceView {
                        on: true,
                        changed: false,
                    })
                    .into_response(),
                    ("PUT", "/v1/cluster/maintenance") => {
                        let request: MaintenanceRequest = serde_json::from_str(&body).unwrap();
                        Json(MaintenanceView {
                            on: request.on,
                            changed: true,
                        })
                        .into_response()
                    }
                    ("POST", "/v1/shards/3/move") => Json(shard_view("ex-2", None)).into_response(),
                    ("PUT", "/v1/shards/3/pin") => {
                        Json(shard_view("ex-1", Some("ex-2"))).into_response()
                    }
                    ("DELETE", "/v1/shards/3/pin") => {
                        Json(shard_view("ex-1", None)).into_response()
                    }
                    ("GET", "/v1/audit") => Json(vec![AuditRecordView {
                        shard_count: None,
                        namespace: None,
                        revision: 9,
                        at_ms: 1_700_000_000_123,
                        actor: "admin CN=alice".into(),
                        action: "pin".into(),
                        executor_id: Some("ex-2".into()),
                        shard: Some(3),
                        node_id: None,
                        address: None,
                    }])
                    .into_response(),
                    _ => problem(ErrorCode::NotFound, None),
                }
            }
        },
    );
    serve(router).await
}

/// P17.4: each operator call sends its method, path and body to the leader a follower names,
/// and reads the manager's answer.
#[tokio::test]
async fn p17_4_operator_calls_follow_the_leader_and_send_their_requests() {
    let seen = Seen::default();
    let leader = operator_leader(Arc::clone(&seen)).await;
    let follower_hits = Hits::default();
    let counter = follower_hits.clone();
    let named = leader.clone();
    let follower = serve(Router::new().fallback(move || {
        counter.bump();
        let leader = named.clone();
        async move { problem(ErrorCode::NotLeader, Some(&leader)) }
    }))
    .await;
    let client = client(&[&follower], fast_config());

    assert_eq!(
        client.maintenance().await.unwrap(),
        MaintenanceView {
            on: true,
            changed: false
        }
    );
    assert_eq!(client.leader_hint().as_deref(), Some(leader.as_str()));
    assert_eq!(follower_hits.get(), 1, "the leader is followed once");
    assert!(client.set_maintenance(true).await.unwrap().on);
    assert!(!client.set_maintenance(false).await.unwrap().on);
    let moved = client.move_shard(3, "ex-2").await.unwrap();
    assert_eq!(moved.owner.as_deref(), Some("ex-2"));
    let pinned = client.pin_shard(3, "ex-2").await.unwrap();
    assert_eq!(pinned.pinned_to.as_deref(), Some("ex-2"));
    assert_eq!(client.unpin_shard(3).await.unwrap().pinned_to, None);
    let audit = client.audit().await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].action, "pin");
    assert_eq!(follower_hits.get(), 1);

    let seen = seen.lock().unwrap().clone();
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
    let requests: Vec<(&str, &str)> = seen
        .iter()
        .map(|(method, path, _)| (method.as_str(), path.as_str()))
        .collect();
    assert_eq!(
        requests,
        [
            ("GET", "/v1/cluster/maintenance"),
            ("PUT", "/v1/cluster/maintenance"),
            ("PUT", "/v1/cluster/maintenance"),
            ("POST", "/v1/shards/3/move"),
            ("PUT", "/v1/shards/3/pin"),
            ("DELETE", "/v1/shards/3/pin"),
            ("GET", "/v1/audit"),
        ]
    );
    assert_eq!(seen[0].2, "");
    assert_eq!(json(&seen[1].2), serde_json::json!({"on": true}));
    assert_eq!(json(&seen[2].2), serde_json::json!({"on": false}));
    assert_eq!(json(&seen[3].2), serde_json::json!({"to": "ex-2"}));
    assert_eq!(json(&seen[4].2), serde_json::json!({"executor_id": "ex-2"}));
    assert_eq!(seen[5].2, "");
}

/// P17.4: a refusal comes back as the manager's problem (an unknown shard is `404 not_found`,
/// which `leaseholdctl` exits 4 on).
#[tokio::test]
async fn p17_4_a_refused_move_is_the_managers_problem() {
    let leader = operator_leader(Seen::default()).await;
    let client = client(&[&leader], fast_config());
    let error = client.move_shard(9, "ex-2").await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound), "{error}");
}

/// P17.4, P7.2: a move whose outcome is unknown (`unavailable`: it may still commit) is not sent
/// again; a pin, which is idempotent, is.
#[tokio::test]
async fn p17_4_a_move_is_not_repeated_when_its_outcome_is_unknown() {
    let hits = Hits::default();
    let counter = hits.clone();
    let server = serve(Router::new().fallback(move || {
        counter.bump();
        async { problem(ErrorCode::Unavailable, None) }
    }))
    .await;
    let config = ClientConfig {
        patience: Duration::from_millis(500),
        ..fast_config()
    };
    let client = client(&[&server], config);
    let error = client.move_shard(3, "ex-2").await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::Unavailable), "{error}");
    assert_eq!(hits.get(), 1, "a move is sent once");
    client.pin_shard(3, "ex-2").await.unwrap_err();
    assert!(hits.get() > 2, "a pin is repeated within the patience");
}

/// P7.3: one replica holds every renewal (cut off from its quorum, or from the client) while a
/// follower still names it leader. Each attempt is bounded by the caller's attempt timeout, not
/// the request timeout, and the silent replica is passed over, its name in another's refusal
/// included, so the renewal reaches the replica that grants it within a patience that the
/// request timeout alone would use up; the next call does not go back to the silent one.
#[tokio::test]
async fn p7_3_a_silent_replica_is_passed_over_even_when_named_leader() {
    let silent_hits = Hits::default();
    let counter = silent_hits.clone();
    let silent = serve(Router::new().route(
        "/v1/executors/{id}/renew",
        post(move |Path(id): Path<String>| {
            counter.bump();
            async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Json(grant(&id))
            }
        }),
    ))
    .await;
    let named = silent.clone();
    let follower = serve(Router::new().route(
        "/v1/executors/{id}/renew",
        post(move || {
            let named = named.clone();
            async move { problem(ErrorCode::NotLeader, Some(&named)) }
        }),
    ))
    .await;
    let granting = serve(Router::new().route(
        "/v1/executors/{id}/renew",
        post(|Path(id): Path<String>| async move { Json(grant(&id)) }),
    ))
    .await;
    let config = ClientConfig {
        request_timeout: Duration::from_secs(5),
        patience: Duration::from_secs(1),
        retry_interval: Duration::from_millis(50),
    };
    let client = client(&[&silent, &follower, &granting], config);
    let bound = Some(Duration::from_millis(200));
    for call in 1..=2 {
        let granted = client
            .renew_within("ex-1", None, &renew_request(), bound)
            .await
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
        assert_eq!(granted, grant("ex-1"), "call {call}");
    }
    assert_eq!(silent_hits.get(), 1, "the silent replica was asked again");
}
