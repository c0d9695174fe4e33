//! `Executor::start` over real sockets against an in-process fake manager (P8.1, P3.7, §9, the
//! demo workload). A test of the binary because the demo workload is the binary's; everything
//! else it uses is the library's public API, as an embedder sees it.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use leasehold_api::shard_for_key;
use leasehold_api::wire::{Grant, KeyRoute, RegisterRequest, RenewRequest, Route, ShardEpoch};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use leasehold_executor::{AdmissionState, Executor, ExecutorConfig, RunState};

use crate::workload;

const SHARD_COUNT: u32 = 8;
const LEASE_TTL_MS: u64 = 30_000;

#[derive(Debug, Default)]
struct FakeState {
    /// For each register: did the executor's push listener answer HTTP at that moment (P8.1)?
    listener_served_at_register: Vec<bool>,
    /// The set the fake records for ex-1 (what renew replies carry).
    shards: Vec<ShardEpoch>,
    revision: u64,
    deregistered: Vec<String>,
}

type Fake = Arc<Mutex<FakeState>>;

/// How long the executor's listener may take to answer while it registers: it must already
/// be serving (P8.1), so this only absorbs scheduling on a loaded machine.
const LISTENER_ANSWER_BOUND: Duration = Duration::from_secs(1);

/// Whether `address` (`http://host:port`) answers an HTTP request now.
async fn serves_http(address: &str) -> bool {
    tokio::time::timeout(LISTENER_ANSWER_BOUND, answers_http(address))
        .await
        .unwrap_or(false)
}

async fn answers_http(address: &str) -> bool {
    let Some(host_port) = address.strip_prefix("http://") else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect(host_port).await else {
        return false;
    };
    let request =
        format!("GET /v1/status HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.is_ok() && head.starts_with(b"HTTP/1.1 200")
}

fn grant(state: &FakeState) -> Grant {
    Grant {
        generation: 0,
        shard_runs: None,
        executor_id: "ex-1".into(),
        lease_ttl_ms: LEASE_TTL_MS,
        revision: state.revision,
        shard_count: SHARD_COUNT,
        shards: state.shards.clone(),
        unchanged: false,
        secondaries: Vec::new(),
    }
}

async fn register(State(fake): State<Fake>, Json(request): Json<RegisterRequest>) -> Json<Grant> {
    let served = serves_http(&request.address).await;
    let mut state = fake.lock().unwrap();
    state.listener_served_at_register.push(served);
    Json(grant(&state))
}

async fn renew(
    State(fake): State<Fake>,
    Path(_executor_id): Path<String>,
    Json(_request): Json<RenewRequest>,
) -> Json<Grant> {
    Json(grant(&fake.lock().unwrap()))
}

async fn deregister(State(fake): State<Fake>, Path(executor_id): Path<String>) -> StatusCode {
    fake.lock().unwrap().deregistered.push(executor_id);
    StatusCode::NO_CONTENT
}

#[derive(Debug, Deserialize)]
struct KeyQuery {
    key: String,
}

/// Every shard the executor does not hold belongs to ex-9.
async fn routing(Query(query): Query<KeyQuery>) -> Json<KeyRoute> {
    let count = NonZeroU32::new(SHARD_COUNT).unwrap();
    Json(KeyRoute {
        generation: 0,
        shard_count: None,
        key: query.key.clone(),
        revision: 7,
        route: Route {
            shard: shard_for_key(query.key.as_bytes(), count),
            executor_id: Some("ex-9".into()),
            address: Some("http://127.0.0.1:1".into()),
            epoch: 4,
            secondaries: Vec::new(),
        },
    })
}

async fn start_fake_manager() -> (String, Fake) {
    let fake: Fake = Arc::new(Mutex::new(FakeState {
        revision: 5,
        ..FakeState::default()
    }));
    let app = Router::new()
        .route("/v1/executors", post(register))
        .route("/v1/executors/{executor_id}/renew", post(renew))
        .route("/v1/executors/{executor_id}", delete(deregister))
        .route("/v1/routing", get(routing))
        .with_state(Arc::clone(&fake));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (address, fake)
}

/// A key whose shard is not `not`.
fn key_for_another_shard(not: u32) -> String {
    let count = NonZeroU32::new(SHARD_COUNT).unwrap();
    (0..)
        .map(|i| format!("key-{i}"))
        .find(|key| shard_for_key(key.as_bytes(), count) != not)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p8_1_registers_once_serving_then_admits_pushed_shards_and_p3_7_deregisters_on_shutdown() {
    let (manager, fake) = start_fake_manager().await;
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("events.jsonl");
    let config = ExecutorConfig {
        event_log: Some(log_path.clone()),
        name: Some("e2e".into()),
        ..ExecutorConfig::new(vec![manager], "127.0.0.1:0")
    };
    let executor = Executor::start_with_routes(config, |handle| workload::router(handle.clone()))
        .await
        .unwrap();
    let base = format!("http://{}", executor.local_addr());
    assert_eq!(executor.advertised_address(), base);

    let mut assignment = executor.assignment();
    tokio::time::timeout(
        Duration::from_secs(20),
        assignment.wait_for(|view| view.executor_id.is_some()),
    )
    .await
    .expect("registered within 20 s")
    .unwrap();
    assert_eq!(
        fake.lock().unwrap().listener_served_at_register,
        [true],
        "P8.1: the push listener answered before the registration"
    );

    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let count = NonZeroU32::new(SHARD_COUNT).unwrap();
    let mine = shard_for_key(b"mine", count);
    {
        let mut state = fake.lock().unwrap();
        state.shards = vec![ShardEpoch {
            shard: mine,
            epoch: 2,
        }];
        state.revision = 6;
    }
    let pushed = http
        .put(format!("{base}/v1/assignment"))
        .json(&json!({"executor_id": "ex-1", "revision": 6, "shard_count": SHARD_COUNT, "shards": [{"shard": mine, "epoch": 2}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(pushed.status(), 204);
    assert_eq!(
        executor.assignment().borrow().admission,
        AdmissionState::Admitting
    );

    // The demo workload: admitted, misdirected, bad input.
    let work = http
        .get(format!("{base}/v1/work?key=mine"))
        .send()
        .await
        .unwrap();
    assert_eq!(work.status(), 200);
    assert_eq!(
        work.json::<Value>().await.unwrap(),
        json!({"shard": mine, "epoch": 2})
    );
    let elsewhere = key_for_another_shard(mine);
    let work = http
        .get(format!("{base}/v1/work?key={elsewhere}"))
        .send()
        .await
        .unwrap();
    assert_eq!(work.status(), 421);
    let body: Value = work.json().await.unwrap();
    assert_eq!(body["owner_address"], "http://127.0.0.1:1");
    assert_eq!(body["owner_executor_id"], "ex-9");
    assert_eq!(body["epoch"], 4);
    assert_eq!(body["status"], 421);
    let work = http.get(format!("{base}/v1/work")).send().await.unwrap();
    assert_eq!(work.status(), 400);
    let work = http
        .get(format!("{base}/v1/work?key=a&other=b"))
        .send()
        .await
        .unwrap();
    assert_eq!(work.status(), 400);

    assert_eq!(executor.shutdown().await, RunState::Stopped);
    assert_eq!(executor.terminated().await, RunState::Stopped);
    assert_eq!(fake.lock().unwrap().deregistered, ["ex-1"]);
    assert!(
        TcpStream::connect(executor.local_addr()).await.is_err(),
        "the push listener is closed after shutdown"
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(lines[0]["event"], "start");
    assert_eq!(lines[1]["event"], "stop");
    assert_eq!(lines[1]["reason"], "shutdown");
    assert!(lines[0]["t_ns"].as_u64() < lines[1]["t_ns"].as_u64());
    // A second shutdown is harmless.
    assert_eq!(executor.shutdown().await, RunState::Stopped);
}
