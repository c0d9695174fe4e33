//! I6 against the real binaries, where it takes processes: bad input gets a 4xx problem+json
//! answer with its `code`, and changes nothing (PROTOCOL §9, §12). Also: the served OpenAPI
//! documents are the checked-in ones, and `X-Request-Id` round-trips and names the request in
//! JSON logs. Every class of bad input to the manager is a row of `manager/tests/bad_input.rs`,
//! asked of one replica in process.
//!
//! The manager cases here are each kind of refusal a follower makes or relays (it forwards
//! writes, §9), against a cluster with a long lease and one registered executor that never
//! renews, so the state's revision moves only if a request is applied: each case asserts the
//! revision (and at the end the whole state) is unchanged. The executor cases run against the
//! real `leasehold-executor`, asserting its held set, its id and its admission log are unchanged.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{renew_body_bytes, shard_list_body_bytes};
use leasehold_tests::executor::ExecutorProcess;
use leasehold_tests::http_checks::{send, RawRequest};
use leasehold_tests::{
    free_port, one_cluster_at_a_time, poll_until, replicated_view, until_still, Cluster,
    ClusterOptions,
};
use reqwest::Method;
use serde_json::{json, Value};

const SHARDS: u32 = 8;
const LEADER_BOUND: Duration = Duration::from_secs(20);
const SETTLE_BOUND: Duration = Duration::from_secs(60);

/// One bad request and what it must get.
struct Case {
    class: &'static str,
    request: RawRequest,
    code: ErrorCode,
}

fn case(class: &'static str, request: RawRequest, code: ErrorCode) -> Case {
    Case {
        class,
        request,
        code,
    }
}

fn post(path: &str, body: Value) -> RawRequest {
    RawRequest::new(Method::POST, path).json(body.to_string())
}

/// `body` followed by whitespace up to `length` bytes: a body that lists shards is read up to
/// the bound the cluster's shard count gives it (`wire::renew_body_bytes`,
/// `wire::shard_list_body_bytes`), and refused past it (P13.6).
fn padded(body: Value, length: usize) -> Vec<u8> {
    let mut bytes = body.to_string().into_bytes();
    bytes.resize(length, b' ');
    bytes
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("http client")
}

/// The leader's state read through the read index, without the fields that move with time.
async fn state_without_clock(http: &reqwest::Client, base: &str) -> Value {
    let state: Value = http
        .get(format!("{base}/v1/state?consistent=true"))
        .send()
        .await
        .expect("GET /v1/state")
        .json()
        .await
        .expect("state JSON");
    replicated_view(state)
}

/// One bad request of each kind a follower answers: those it makes itself (its routes, its
/// body limits, the bound its own state gives a renewal, an id in a path, a query) and those of
/// the leader it relays (fields, content types, namespaces, conflicts). Every class of bad input
/// is a row of `manager/tests/bad_input.rs`, asked of the leader in process.
fn follower_cases(executor_id: &str) -> Vec<Case> {
    let renew = format!("/v1/executors/{executor_id}/renew");
    let release = format!("/v1/executors/{executor_id}/release");
    let register = |body: Value| post("/v1/executors", body);
    let good_address = "http://127.0.0.1:9";
    // Above the manager's 1 MiB limit and below axum's default 2 MiB, so it is this server's
    // limit that refuses it.
    let oversized = vec![b' '; 3 << 19];
    use ErrorCode::*;
    vec![
        case(
            "unknown field",
            register(json!({"incarnation": "x", "address": good_address, "extra": 1})),
            InvalidRequest,
        ),
        case(
            "malformed JSON",
            RawRequest::new(Method::POST, "/v1/executors").json("{\"incarnation\": "),
            InvalidRequest,
        ),
        case(
            "text/plain body",
            RawRequest::new(Method::POST, "/v1/executors").body(
                Some("text/plain"),
                br#"{"incarnation":"x","address":"http://127.0.0.1:9"}"#.to_vec(),
            ),
            UnsupportedMediaType,
        ),
        case(
            "oversized body",
            RawRequest::new(Method::POST, "/v1/executors")
                .body(Some("application/json"), oversized),
            PayloadTooLarge,
        ),
        case(
            "renew body past the cluster's bound",
            RawRequest::new(Method::POST, &renew).body(
                Some("application/json"),
                padded(
                    json!({"claims": [], "revision": 1}),
                    renew_body_bytes(SHARDS) + 1,
                ),
            ),
            PayloadTooLarge,
        ),
        case(
            "release shard = shard count, in a body at the cluster's bound",
            RawRequest::new(Method::POST, &release).body(
                Some("application/json"),
                padded(
                    json!({"shards": [SHARDS], "revoke_revision": 1}),
                    shard_list_body_bytes(SHARDS),
                ),
            ),
            InvalidRequest,
        ),
        case(
            "a registration into a namespace that does not exist",
            register(json!({"incarnation": "x", "address": good_address, "namespace": "nowhere"})),
            NotFound,
        ),
        case(
            "the default namespace deleted",
            RawRequest::new(Method::DELETE, "/v1/namespaces/default"),
            Conflict,
        ),
        case(
            "executor id with letters",
            post(
                "/v1/executors/ex-abc/renew",
                json!({"claims": [], "revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "consistent not a bool",
            RawRequest::new(Method::GET, "/v1/state?consistent=maybe"),
            InvalidRequest,
        ),
        case(
            "unknown route",
            RawRequest::new(Method::GET, "/v1/nothing-here"),
            NotFound,
        ),
        case(
            "wrong method on renew",
            RawRequest::new(Method::GET, &renew),
            MethodNotAllowed,
        ),
    ]
}

/// I6 through a follower: each kind of refusal it makes or relays is a problem+json answer
/// with its code, and changes nothing.
/// Needs processes: a follower, which forwards writes to the leader (§9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_a_followers_refusals_are_problem_json_and_change_nothing() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        // Long enough that nothing expires while the cases run: the revision is then still.
        lease: "120s".to_string(),
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = *cluster.managers.keys().find(|id| **id != leader).unwrap();
    let (leader_url, follower_url) = (cluster.url(leader), cluster.url(follower));
    let http = http();

    // One executor that never renews (nothing listens at its address, so pushes fail and are
    // retried without changing the state).
    let address = format!("http://127.0.0.1:{}", free_port());
    let executor_id = poll_until("registration", SETTLE_BOUND, || {
        let (http, leader_url, address) = (&http, &leader_url, &address);
        async move {
            let reply = send(
                http,
                leader_url,
                &post(
                    "/v1/executors",
                    json!({"incarnation": "t04", "address": address}),
                ),
            )
            .await;
            match reply.status {
                200 => Ok(reply.json()?["executor_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()),
                status => Err(format!(
                    "{status}: {}",
                    String::from_utf8_lossy(&reply.body)
                )),
            }
        }
    })
    .await;
    poll_until(
        "every shard owned by the executor",
        SETTLE_BOUND,
        || async {
            let state = state_without_clock(&http, &leader_url).await;
            let shards = state["shards"].as_array().cloned().unwrap_or_default();
            let owned = shards
                .iter()
                .filter(|s| s["owner"] == executor_id.as_str() && s.get("handoff").is_none())
                .count();
            if owned == SHARDS as usize {
                Ok(state)
            } else {
                Err(format!("{owned} of {SHARDS} owned"))
            }
        },
    )
    .await;
    // The registration's lease reservation (P6.8) is written a moment after it, whenever the
    // plan was: the cases start once the state has been still for a second.
    let settled = until_still("the state still for a second", SETTLE_BOUND, || {
        state_without_clock(&http, &leader_url)
    })
    .await;
    let revision = settled["revision"].as_u64().expect("revision");

    for case in follower_cases(&executor_id) {
        let what = format!("{} (to the follower)", case.class);
        send(&http, &follower_url, &case.request)
            .await
            .expect_problem(&what, case.code);
        let now = state_without_clock(&http, &leader_url).await;
        assert_eq!(
            now["revision"].as_u64(),
            Some(revision),
            "{what}: the revision moved"
        );
    }
    assert_eq!(
        state_without_clock(&http, &leader_url).await,
        settled,
        "a rejected request changed the state"
    );
}

/// I6 on the executor: bad pushes and revokes are refused and change nothing it holds or admits.
/// Needs processes: the executor binary, its listener and its admission log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_executor_rejections_are_problem_json_and_change_nothing() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let executor = ExecutorProcess::start(&cluster, "a");
    let status = poll_until(
        "the executor to admit every shard",
        SETTLE_BOUND,
        || async {
            let status = executor.status().await?;
            let admitting = status["admission"] == "admitting";
            let held = status["shards"].as_array().map_or(0, Vec::len);
            if admitting && held == SHARDS as usize {
                Ok(status)
            } else {
                Err(format!("{status}"))
            }
        },
    )
    .await;
    let executor_id = status["executor_id"]
        .as_str()
        .expect("registered")
        .to_string();
    let held_before = status["shards"].clone();
    let log_before = executor.admission_log().expect("admission log").len();
    let http = http();
    let push = |body: Value| RawRequest::new(Method::PUT, "/v1/assignment").json(body.to_string());
    let revoke = |body: Value| post("/v1/revoke", body);
    use ErrorCode::*;
    let cases = vec![
        case(
            "unknown field",
            push(
                json!({"executor_id": executor_id, "revision": 1, "shard_count": SHARDS, "shards": [], "lease_ttl_ms": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "unknown nested field",
            push(
                json!({"executor_id": executor_id, "revision": 1, "shard_count": SHARDS, "shards": [{"shard": 0, "epoch": 1, "x": 1}]}),
            ),
            InvalidRequest,
        ),
        case(
            "wrong type",
            revoke(json!({"executor_id": executor_id, "revision": "9", "shards": [0]})),
            InvalidRequest,
        ),
        case(
            "missing field",
            revoke(json!({"executor_id": executor_id, "shards": [0]})),
            InvalidRequest,
        ),
        case(
            "malformed JSON",
            RawRequest::new(Method::POST, "/v1/revoke").json("{"),
            InvalidRequest,
        ),
        case(
            "text/plain body",
            RawRequest::new(Method::POST, "/v1/revoke").body(Some("text/plain"), b"{}".to_vec()),
            UnsupportedMediaType,
        ),
        case(
            "oversized body",
            RawRequest::new(Method::PUT, "/v1/assignment").body(
                Some("application/json"),
                vec![b' '; leasehold_api::wire::MAX_SHARD_LIST_BODY_BYTES + 1],
            ),
            PayloadTooLarge,
        ),
        case(
            "shard = shard count",
            push(
                json!({"executor_id": executor_id, "revision": u64::MAX, "shard_count": SHARDS, "shards": [{"shard": SHARDS, "epoch": 1}]}),
            ),
            InvalidRequest,
        ),
        case(
            "revoke shard = shard count",
            revoke(json!({"executor_id": executor_id, "revision": u64::MAX, "shards": [SHARDS]})),
            InvalidRequest,
        ),
        case(
            "shard listed twice",
            revoke(json!({"executor_id": executor_id, "revision": u64::MAX, "shards": [0, 0]})),
            InvalidRequest,
        ),
        case(
            "zero shard count",
            push(
                json!({"executor_id": executor_id, "revision": u64::MAX, "shard_count": 0, "shards": []}),
            ),
            InvalidRequest,
        ),
        case(
            "another shard count",
            push(
                json!({"executor_id": executor_id, "revision": u64::MAX, "shard_count": SHARDS + 1, "shards": []}),
            ),
            InvalidRequest,
        ),
        case(
            "push for another executor",
            push(
                json!({"executor_id": "ex-999999", "revision": u64::MAX, "shard_count": SHARDS, "shards": []}),
            ),
            Conflict,
        ),
        case(
            "revoke for another executor",
            revoke(json!({"executor_id": "ex-999999", "revision": u64::MAX, "shards": [0]})),
            Conflict,
        ),
        case(
            "work without a key",
            RawRequest::new(Method::GET, "/v1/work"),
            InvalidRequest,
        ),
        case(
            "oversized work key",
            RawRequest::new(Method::GET, format!("/v1/work?key={}", "k".repeat(1025))),
            InvalidRequest,
        ),
        case(
            "unknown route",
            RawRequest::new(Method::GET, "/v1/nothing-here"),
            NotFound,
        ),
        case(
            "wrong method",
            RawRequest::new(Method::GET, "/v1/revoke"),
            MethodNotAllowed,
        ),
    ];
    // A push larger than axum's default limit (a full set of the largest cluster is tens of MiB)
    // is within the executor's limit: this one is stale (revision 0), so it is accepted and
    // ignored (P4.1), changing nothing.
    let mut large =
        json!({"executor_id": executor_id, "revision": 0, "shard_count": SHARDS, "shards": []})
            .to_string()
            .into_bytes();
    large.extend(std::iter::repeat_n(b' ', 3 << 20));
    let reply = send(
        &http,
        &executor.url(),
        &RawRequest::new(Method::PUT, "/v1/assignment").body(Some("application/json"), large),
    )
    .await;
    assert_eq!(
        reply.status,
        204,
        "a 3 MiB push: {}",
        String::from_utf8_lossy(&reply.body)
    );
    for case in cases {
        send(&http, &executor.url(), &case.request)
            .await
            .expect_problem(case.class, case.code);
        let now = executor.status().await.expect("status");
        assert_eq!(
            now["executor_id"].as_str(),
            Some(executor_id.as_str()),
            "{}",
            case.class
        );
        assert_eq!(
            now["shards"], held_before,
            "{}: the held set changed",
            case.class
        );
        assert_eq!(now["admission"], "admitting", "{}", case.class);
        let log_now = executor.admission_log().expect("admission log").len();
        assert_eq!(
            log_now, log_before,
            "{}: admission started or stopped",
            case.class
        );
    }
}

/// The documents served at `/v1/openapi.json` are the checked-in ones; `X-Request-Id` comes
/// back as sent (or replaced when malformed), and with `--log-format json` the leader's log line
/// for a forwarded register carries the id in its request span.
/// Needs processes: a follower's forward, the executor binary, and a real leader's JSON log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_is_served_and_request_ids_name_requests_in_json_logs() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        extra_args: vec!["--log-format".to_string(), "json".to_string()],
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = *cluster.managers.keys().find(|id| **id != leader).unwrap();
    let executor = ExecutorProcess::start(&cluster, "a");
    poll_until("the executor to answer", SETTLE_BOUND, || executor.status()).await;
    let http = http();
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi");
    for (base, file) in [
        (cluster.url(follower), "manager.json"),
        (executor.url(), "executor.json"),
    ] {
        let reply = send(
            &http,
            &base,
            &RawRequest::new(Method::GET, "/v1/openapi.json"),
        )
        .await;
        assert_eq!(reply.status, 200);
        let checked_in: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{docs}/{file}")).unwrap())
                .unwrap();
        assert_eq!(
            reply.json().unwrap(),
            checked_in,
            "{base} serves another {file}"
        );
    }

    // Round trip on both servers, on successes and errors.
    for (base, path) in [
        (cluster.url(follower), "/v1/cluster"),
        (cluster.url(leader), "/v1/nothing"),
        (executor.url(), "/v1/status"),
        (executor.url(), "/v1/nothing"),
    ] {
        let mut request = RawRequest::new(Method::GET, path);
        request.request_id = Some("t04-round-trip.1:a_b".to_string());
        let reply = send(&http, &base, &request).await;
        assert_eq!(
            reply.request_id.as_deref(),
            Some("t04-round-trip.1:a_b"),
            "{base}{path}"
        );
        request.request_id = Some("has spaces and {braces}".to_string());
        let replaced = send(&http, &base, &request)
            .await
            .request_id
            .unwrap_or_default();
        assert!(
            replaced.len() == 32 && replaced.bytes().all(|b| b.is_ascii_hexdigit()),
            "{base}{path}: malformed id not replaced: {replaced:?}"
        );
    }

    // A register sent to a follower is forwarded; the leader logs "registered" inside the span.
    let mut register = post(
        "/v1/executors",
        json!({"incarnation": "t04-json-log", "address": format!("http://127.0.0.1:{}", free_port())}),
    );
    register.request_id = Some("t04-register-42".to_string());
    let reply = poll_until("a register through the follower", SETTLE_BOUND, || {
        let (http, base, register) = (&http, cluster.url(follower), &register);
        async move {
            let reply = send(http, &base, register).await;
            if reply.status == 200 {
                Ok(reply)
            } else {
                Err(format!("{}", reply.status))
            }
        }
    })
    .await;
    assert_eq!(reply.request_id.as_deref(), Some("t04-register-42"));
    let line = poll_until("the leader's JSON log line", SETTLE_BOUND, || async {
        cluster.managers[&leader]
            .log()
            .lines()
            .find(|line| line.contains("t04-register-42") && line.contains("\"registered\""))
            .map(str::to_string)
            .ok_or_else(|| "not logged yet".to_string())
    })
    .await;
    let entry: Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(entry["span"]["name"], "http_request", "{entry}");
    assert_eq!(entry["span"]["request_id"], "t04-register-42", "{entry}");
    assert_eq!(entry["span"]["path"], "/v1/executors", "{entry}");
}

/// One raw HTTP/1.1 exchange with `authority`, the `Host` and `Origin` chosen by the caller
/// (an HTTP client library sets `Host` itself): the status and the problem's `code`.
async fn raw_exchange(
    authority: &str,
    request_line: &str,
    host: &str,
    origin: Option<&str>,
) -> (u16, Option<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .unwrap_or_else(|e| panic!("connect {authority}: {e}"));
    let mut head =
        format!("{request_line}\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n");
    if let Some(origin) = origin {
        head.push_str(&format!("Origin: {origin}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("request sent");
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let code = text
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str::<Value>(body).ok())
        .and_then(|problem| problem["code"].as_str().map(str::to_owned));
    (status, code)
}

/// P13.5, P13.6 (the security review's finding 8): a page the operator opens in a browser can
/// neither read a loopback listener through a rebound DNS name (its `Host` is refused) nor make
/// it change anything with a cross-site request, a body-less `POST` included (its `Origin` is
/// refused); the same requests from a client that is not a browser succeed, and nothing
/// changed before they did.
/// Needs processes: raw exchanges with a real listener, `Host` and `Origin` as a browser sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_6_a_page_in_the_operators_browser_changes_nothing() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        lease: "120s".to_string(),
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let leader_url = cluster.url(leader);
    let authority = leader_url.trim_start_matches("http://").to_owned();
    let http = http();
    let registered = send(
        &http,
        &leader_url,
        &post(
            "/v1/executors",
            json!({"incarnation": "origin-test", "address": format!("http://127.0.0.1:{}", free_port())}),
        ),
    )
    .await;
    assert_eq!(registered.status, 200);
    let executor_id = registered.json().unwrap()["executor_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The executor's shards placed, the state stands still (its lease runs two minutes).
    let before = poll_until("the shards placed", SETTLE_BOUND, || async {
        let state = state_without_clock(&http, &leader_url).await;
        let placed = state["shards"]
            .as_array()
            .is_some_and(|shards| shards.iter().all(|shard| shard["owner"].is_string()));
        if placed {
            Ok(state)
        } else {
            Err(format!("{state}"))
        }
    })
    .await;

    let drain = format!("POST /v1/executors/{executor_id}/drain HTTP/1.1");
    for (what, line, host, origin) in [
        (
            "a cross-site drain",
            drain.as_str(),
            authority.as_str(),
            Some("http://evil.example"),
        ),
        (
            "a drain from a sandboxed page",
            drain.as_str(),
            authority.as_str(),
            Some("null"),
        ),
        (
            "a cross-site snapshot",
            "POST /v1/cluster/snapshot HTTP/1.1",
            authority.as_str(),
            Some("http://evil.example:8080"),
        ),
        (
            "a rebound read",
            "GET /v1/state HTTP/1.1",
            "evil.example",
            None,
        ),
        (
            "a rebound drain",
            drain.as_str(),
            "evil.example",
            Some("http://evil.example"),
        ),
    ] {
        let answer = raw_exchange(&authority, line, host, origin).await;
        assert_eq!(answer, (403, Some("forbidden".to_owned())), "{what}");
        assert_eq!(
            state_without_clock(&http, &leader_url).await,
            before,
            "{what} changed nothing"
        );
    }
    // The same from the console's own origin, and from a client that sends no Origin.
    let same_origin = format!("http://{authority}");
    let (status, _) = raw_exchange(&authority, &drain, &authority, Some(&same_origin)).await;
    assert_eq!(status, 200, "the same origin drains");
    let (status, _) = raw_exchange(&authority, "GET /v1/state HTTP/1.1", "localhost", None).await;
    assert_eq!(status, 200, "localhost reads");
}
