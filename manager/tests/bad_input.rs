//! I6 asked of one replica in process: every class of bad input to the manager's API gets a 4xx
//! problem+json answer with its `code`, and changes nothing (PROTOCOL §9, §12). The replica has a
//! long lease and one registered executor that never renews, so the state's revision moves only
//! if a request is applied: each case asserts the revision (and at the end the whole state) is
//! unchanged.
//! What needs processes stays in `tests/tests/bad_input.rs`: bad input sent to a follower (its
//! own bounds, and the leader's refusals relayed), the executor binary's own matrix, request ids
//! in real processes' logs, raw exchanges with a listener.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::Method;
use common::router::{
    call_whole, config_with, raw, ready, register, settled_on, still_state, SHARDS,
};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{renew_body_bytes, shard_list_body_bytes};
use serde_json::{json, Value};

/// One bad request: its method, path, content type and body.
#[derive(Debug, Clone)]
struct RawRequest {
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: Option<Vec<u8>>,
}

impl RawRequest {
    fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            content_type: None,
            body: None,
        }
    }

    fn json(self, body: impl Into<String>) -> Self {
        self.body(Some("application/json"), body.into().into_bytes())
    }

    fn body(mut self, content_type: Option<&'static str>, body: Vec<u8>) -> Self {
        self.content_type = content_type;
        self.body = Some(body);
        self
    }

    fn to_request(&self) -> axum::http::Request<axum::body::Body> {
        raw(
            self.method.clone(),
            &self.path,
            self.content_type,
            self.body.clone(),
            None,
        )
    }
}

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

/// A renewal (claiming nothing) whose `loads` are `loads`.
fn renew_with_loads(loads: Value) -> Value {
    json!({"claims": [], "revision": 1, "loads": loads})
}

fn manager_cases(executor_id: &str) -> Vec<Case> {
    let renew = format!("/v1/executors/{executor_id}/renew");
    let release = format!("/v1/executors/{executor_id}/release");
    let register = |body: Value| post("/v1/executors", body);
    let good_address = "http://127.0.0.1:9";
    // Above the manager's 1 MiB limit and below axum's default 2 MiB, so it is this server's
    // limit that refuses it.
    let oversized = vec![b' '; 3 << 19];
    use ErrorCode::*;
    vec![
        // Unknown fields (I6): top level and nested.
        case(
            "unknown field",
            register(json!({"incarnation": "x", "address": good_address, "extra": 1})),
            InvalidRequest,
        ),
        case(
            "unknown nested field",
            post(
                &renew,
                json!({"claims": [{"shard": 1, "epoch": 1, "owner": "x"}], "revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "unknown field in add-node",
            post(
                "/v1/cluster/nodes",
                json!({"node_id": 9, "address": good_address, "voter": true}),
            ),
            InvalidRequest,
        ),
        // Wrong types, missing fields, malformed JSON.
        case(
            "wrong type",
            post(&renew, json!({"claims": [], "revision": "7"})),
            InvalidRequest,
        ),
        case(
            "negative number",
            post(&renew, json!({"claims": [], "revision": -1})),
            InvalidRequest,
        ),
        case(
            "fraction",
            post(&release, json!({"shards": [1.5], "revoke_revision": 1})),
            InvalidRequest,
        ),
        case(
            "missing field",
            register(json!({"incarnation": "x"})),
            InvalidRequest,
        ),
        case(
            "malformed JSON",
            RawRequest::new(Method::POST, "/v1/executors").json("{\"incarnation\": "),
            InvalidRequest,
        ),
        case(
            "empty body",
            RawRequest::new(Method::POST, &renew).json(""),
            InvalidRequest,
        ),
        case(
            "JSON array for an object",
            RawRequest::new(Method::POST, "/v1/executors").json("[]"),
            InvalidRequest,
        ),
        // Content type and size.
        case(
            "text/plain body",
            RawRequest::new(Method::POST, "/v1/executors").body(
                Some("text/plain"),
                br#"{"incarnation":"x","address":"http://127.0.0.1:9"}"#.to_vec(),
            ),
            UnsupportedMediaType,
        ),
        case(
            "no content type",
            RawRequest::new(Method::POST, &renew)
                .body(None, br#"{"claims":[],"revision":1}"#.to_vec()),
            UnsupportedMediaType,
        ),
        case(
            "oversized body",
            RawRequest::new(Method::POST, "/v1/executors")
                .body(Some("application/json"), oversized),
            PayloadTooLarge,
        ),
        // Out-of-range values.
        case(
            "claim shard = shard count",
            post(
                &renew,
                json!({"claims": [{"shard": SHARDS, "epoch": 1}], "revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "claim shard = shard count, in a body at the cluster's bound (read: claims may list every shard)",
            RawRequest::new(Method::POST, &renew).body(
                Some("application/json"),
                padded(
                    json!({"claims": [{"shard": SHARDS, "epoch": 1}], "revision": 1}),
                    renew_body_bytes(SHARDS),
                ),
            ),
            InvalidRequest,
        ),
        case(
            "renew body past the cluster's bound",
            RawRequest::new(Method::POST, &renew).body(
                Some("application/json"),
                padded(json!({"claims": [], "revision": 1}), renew_body_bytes(SHARDS) + 1),
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
            "release body past the cluster's bound",
            RawRequest::new(Method::POST, &release).body(
                Some("application/json"),
                padded(
                    json!({"shards": [0], "revoke_revision": 1}),
                    shard_list_body_bytes(SHARDS) + 1,
                ),
            ),
            PayloadTooLarge,
        ),
        case(
            "release shard = shard count",
            post(&release, json!({"shards": [SHARDS], "revoke_revision": 1})),
            InvalidRequest,
        ),
        case(
            "shard beyond u32",
            post(
                &release,
                json!({"shards": [4_294_967_296u64], "revoke_revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "revision beyond u64",
            RawRequest::new(Method::POST, &renew)
                .json(r#"{"claims": [], "revision": 18446744073709551616}"#),
            InvalidRequest,
        ),
        case(
            "shard listed twice",
            post(&release, json!({"shards": [1, 1], "revoke_revision": 1})),
            InvalidRequest,
        ),
        case(
            "empty incarnation",
            register(json!({"incarnation": "", "address": good_address})),
            InvalidRequest,
        ),
        case(
            "oversized incarnation",
            register(json!({"incarnation": "i".repeat(129), "address": good_address})),
            InvalidRequest,
        ),
        case(
            "oversized name",
            register(json!({"incarnation": "x", "address": good_address, "name": "n".repeat(257)})),
            InvalidRequest,
        ),
        // Capacities (P15.1): a positive weight up to `MAX_CAPACITY`.
        case(
            "capacity 0",
            register(json!({"incarnation": "x", "address": good_address, "capacity": 0})),
            InvalidRequest,
        ),
        case(
            "capacity above the maximum",
            register(json!({
                "incarnation": "x",
                "address": good_address,
                "capacity": leasehold_api::wire::MAX_CAPACITY + 1,
            })),
            InvalidRequest,
        ),
        case(
            "capacity beyond u32",
            register(
                json!({"incarnation": "x", "address": good_address, "capacity": 4_294_967_296u64}),
            ),
            InvalidRequest,
        ),
        case(
            "capacity of the wrong type",
            register(json!({"incarnation": "x", "address": good_address, "capacity": "2"})),
            InvalidRequest,
        ),
        case(
            "negative capacity",
            register(json!({"incarnation": "x", "address": good_address, "capacity": -1})),
            InvalidRequest,
        ),
        // Labels (P18.3): at most 16, Kubernetes label-shaped keys and values.
        case(
            "a label key with capitals",
            register(json!({"incarnation": "x", "address": good_address, "labels": {"Zone": "a"}})),
            InvalidRequest,
        ),
        case(
            "an empty label value",
            register(json!({"incarnation": "x", "address": good_address, "labels": {"zone": ""}})),
            InvalidRequest,
        ),
        case(
            "a label value that is no string",
            register(json!({"incarnation": "x", "address": good_address, "labels": {"zone": 1}})),
            InvalidRequest,
        ),
        case(
            "labels that are no object",
            register(json!({"incarnation": "x", "address": good_address, "labels": ["zone=a"]})),
            InvalidRequest,
        ),
        case(
            "seventeen labels",
            register(json!({
                "incarnation": "x",
                "address": good_address,
                "labels": (0..17)
                    .map(|n| (format!("k{n}"), json!("v")))
                    .collect::<serde_json::Map<String, Value>>(),
            })),
            InvalidRequest,
        ),
        // Namespaces (P18.1): DNS-label shaped, and existing.
        case(
            "a namespace not DNS-label shaped",
            register(json!({"incarnation": "x", "address": good_address, "namespace": "Orders"})),
            InvalidRequest,
        ),
        case(
            "a namespace that is no string",
            register(json!({"incarnation": "x", "address": good_address, "namespace": 7})),
            InvalidRequest,
        ),
        case(
            "a registration into a namespace that does not exist",
            register(json!({"incarnation": "x", "address": good_address, "namespace": "nowhere"})),
            NotFound,
        ),
        case(
            "a namespace created with no shards",
            post("/v1/namespaces", json!({"name": "kv", "shard_count": 0})),
            InvalidRequest,
        ),
        case(
            "a namespace created with a malformed name",
            post("/v1/namespaces", json!({"name": "k_v", "shard_count": 4})),
            InvalidRequest,
        ),
        case(
            "a namespace created with a lease past a day",
            post(
                "/v1/namespaces",
                json!({"name": "kv", "shard_count": 4, "lease_duration_ms": 86_400_001u64}),
            ),
            InvalidRequest,
        ),
        case(
            "a namespace created with an unknown field",
            post("/v1/namespaces", json!({"name": "kv", "shard_count": 4, "owner": "me"})),
            InvalidRequest,
        ),
        // P18.4: a namespace's placement settings, at creation and changed in place.
        case(
            "a namespace created with a tolerance of 0 %",
            post(
                "/v1/namespaces",
                json!({"name": "kv", "shard_count": 4, "placement": {"balance_tolerance_percent": 0}}),
            ),
            InvalidRequest,
        ),
        case(
            "a namespace created preferring no label",
            post(
                "/v1/namespaces",
                json!({"name": "kv", "shard_count": 4, "placement": {"prefer": "zone"}}),
            ),
            InvalidRequest,
        ),
        case(
            "a namespace created with an unknown placement setting",
            post(
                "/v1/namespaces",
                json!({"name": "kv", "shard_count": 4, "placement": {"spread": true}}),
            ),
            InvalidRequest,
        ),
        case(
            "a namespace changed to no balance moves",
            RawRequest::new(Method::PATCH, "/v1/namespaces/default")
                .json(json!({"placement": {"max_balance_moves_per_minute": 0}}).to_string()),
            InvalidRequest,
        ),
        case(
            "a namespace changed to prefer two labels",
            RawRequest::new(Method::PATCH, "/v1/namespaces/default")
                .json(json!({"placement": {"prefer": "zone=a,rack=b"}}).to_string()),
            InvalidRequest,
        ),
        case(
            "the default namespace deleted",
            RawRequest::new(Method::DELETE, "/v1/namespaces/default"),
            Conflict,
        ),
        case(
            "a namespace that does not exist deleted",
            RawRequest::new(Method::DELETE, "/v1/namespaces/nowhere"),
            NotFound,
        ),
        // P20.1: a reshard doubles or halves the count, of a namespace that exists, whose
        // executors all follow a change of layout (this one's does not, P20.3).
        case(
            "a namespace resharded to a count neither twice nor half its own",
            post("/v1/namespaces/default/reshard", json!({"shard_count": 3})),
            InvalidRequest,
        ),
        case(
            "a namespace resharded to no shards",
            post("/v1/namespaces/default/reshard", json!({"shard_count": 0})),
            InvalidRequest,
        ),
        case(
            "a reshard with an unknown field",
            post(
                "/v1/namespaces/default/reshard",
                json!({"shard_count": 32, "online": true}),
            ),
            InvalidRequest,
        ),
        case(
            "a namespace that does not exist resharded",
            post("/v1/namespaces/nowhere/reshard", json!({"shard_count": 2})),
            NotFound,
        ),
        case(
            "a namespace resharded under an executor that does not follow a change of layout",
            post("/v1/namespaces/default/reshard", json!({"shard_count": 32})),
            Conflict,
        ),
        case(
            "a namespace read with a malformed name",
            RawRequest::new(Method::GET, "/v1/shards?namespace=Not_A_Name"),
            InvalidRequest,
        ),
        case(
            "a namespace read that does not exist",
            RawRequest::new(Method::GET, "/v1/executors?namespace=nowhere"),
            NotFound,
        ),
        case(
            "the plan of a namespace that does not exist",
            RawRequest::new(Method::GET, "/v1/plan?namespace=nowhere"),
            NotFound,
        ),
        case(
            "the watch of a malformed namespace",
            RawRequest::new(Method::GET, "/v1/watch?namespace=No"),
            InvalidRequest,
        ),
        // Application versions (P17.3): 1 to 64 of [A-Za-z0-9._+-].
        case(
            "empty app version",
            register(json!({"incarnation": "x", "address": good_address, "app_version": ""})),
            InvalidRequest,
        ),
        case(
            "app version with a space",
            register(json!({"incarnation": "x", "address": good_address, "app_version": "1 2"})),
            InvalidRequest,
        ),
        case(
            "oversized app version",
            register(json!({
                "incarnation": "x",
                "address": good_address,
                "app_version": "9".repeat(65),
            })),
            InvalidRequest,
        ),
        case(
            "app version of the wrong type",
            register(json!({"incarnation": "x", "address": good_address, "app_version": 2})),
            InvalidRequest,
        ),
        // Claims as runs ("Versions"): refused whole, like a bad list.
        case(
            "claims both as a list and as runs",
            post(
                &renew,
                json!({"claims": [{"shard": 1, "epoch": 1}], "claim_runs": [[1, 1, 1]], "revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "an empty claim run",
            post(
                &renew,
                json!({"claims": [], "claim_runs": [[1, 0, 1]], "revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "overlapping claim runs",
            post(
                &renew,
                json!({"claims": [], "claim_runs": [[0, 3, 1], [2, 1, 1]], "revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "a claim run past the shard count",
            post(
                &renew,
                json!({"claims": [], "claim_runs": [[SHARDS - 1, 2, 1]], "revision": 1}),
            ),
            InvalidRequest,
        ),
        case(
            "a claim run of the wrong shape",
            post(
                &renew,
                json!({"claims": [], "claim_runs": [[1, 1]], "revision": 1}),
            ),
            InvalidRequest,
        ),
        // Loads (P15.1): the renewal is refused whole, so its lease does not move either.
        case(
            "negative load",
            post(
                &renew,
                renew_with_loads(json!([{"shard": 1, "load": -1.0}])),
            ),
            InvalidRequest,
        ),
        case(
            "load NaN, as a string (JSON has no NaN)",
            post(
                &renew,
                renew_with_loads(json!([{"shard": 1, "load": "NaN"}])),
            ),
            InvalidRequest,
        ),
        case(
            "load above the maximum",
            post(
                &renew,
                renew_with_loads(
                    json!([{"shard": 1, "load": leasehold_api::wire::MAX_SHARD_LOAD * 10.0}]),
                ),
            ),
            InvalidRequest,
        ),
        case(
            "load beyond f64",
            RawRequest::new(Method::POST, &renew)
                .json(r#"{"claims": [], "revision": 1, "loads": [{"shard": 1, "load": 1e400}]}"#),
            InvalidRequest,
        ),
        case(
            "load's shard listed twice",
            post(
                &renew,
                renew_with_loads(json!([{"shard": 1, "load": 1.0}, {"shard": 1, "load": 2.0}])),
            ),
            InvalidRequest,
        ),
        case(
            "load's shard = shard count",
            post(
                &renew,
                renew_with_loads(json!([{"shard": SHARDS, "load": 1.0}])),
            ),
            InvalidRequest,
        ),
        case(
            "more loads than shards",
            post(
                &renew,
                renew_with_loads(Value::Array(
                    (0..=SHARDS)
                        .map(|shard| json!({"shard": shard % SHARDS, "load": 1.0}))
                        .collect(),
                )),
            ),
            InvalidRequest,
        ),
        case(
            "unknown field in a load",
            post(
                &renew,
                renew_with_loads(json!([{"shard": 1, "load": 1.0, "unit": "rps"}])),
            ),
            InvalidRequest,
        ),
        case(
            "loads not a list",
            post(&renew, renew_with_loads(json!({"1": 1.0}))),
            InvalidRequest,
        ),
        // Malformed URLs (the register address is pushed to, §9).
        case(
            "address not a URL",
            register(json!({"incarnation": "x", "address": "not a url"})),
            InvalidRequest,
        ),
        case(
            "address without scheme",
            register(json!({"incarnation": "x", "address": "127.0.0.1:9"})),
            InvalidRequest,
        ),
        case(
            "address with another scheme",
            register(json!({"incarnation": "x", "address": "ftp://127.0.0.1:9"})),
            InvalidRequest,
        ),
        case(
            "address with a path",
            register(json!({"incarnation": "x", "address": "http://127.0.0.1:9/push"})),
            InvalidRequest,
        ),
        case(
            "address with a query",
            register(json!({"incarnation": "x", "address": "http://127.0.0.1:9/?a=b"})),
            InvalidRequest,
        ),
        case(
            "address with credentials",
            register(json!({"incarnation": "x", "address": "http://u:p@127.0.0.1:9"})),
            InvalidRequest,
        ),
        case(
            "oversized address",
            register(
                json!({"incarnation": "x", "address": format!("http://{}.example", "a".repeat(2100))}),
            ),
            InvalidRequest,
        ),
        case(
            "add-node address not a URL",
            post(
                "/v1/cluster/nodes",
                json!({"node_id": 9, "address": "nope"}),
            ),
            InvalidRequest,
        ),
        // Malformed ids.
        case(
            "executor id without prefix",
            RawRequest::new(Method::DELETE, "/v1/executors/42"),
            InvalidRequest,
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
            "executor id too long",
            RawRequest::new(Method::GET, "/v1/executors/ex-123456789012345678901"),
            InvalidRequest,
        ),
        case(
            "node id not a number",
            RawRequest::new(Method::DELETE, "/v1/cluster/nodes/one"),
            InvalidRequest,
        ),
        // Queries.
        case(
            "consistent not a bool",
            RawRequest::new(Method::GET, "/v1/state?consistent=maybe"),
            InvalidRequest,
        ),
        case(
            "unknown query parameter",
            RawRequest::new(Method::GET, "/v1/routing?shard=3"),
            InvalidRequest,
        ),
        case(
            "oversized routing key",
            RawRequest::new(Method::GET, format!("/v1/routing?key={}", "k".repeat(1025))),
            InvalidRequest,
        ),
        case(
            "unknown routing form",
            RawRequest::new(Method::GET, "/v1/routing?form=ranges"),
            InvalidRequest,
        ),
        case(
            "a key's route asked as runs",
            RawRequest::new(Method::GET, "/v1/routing?key=k&form=runs"),
            InvalidRequest,
        ),
        case(
            "unknown watch view",
            RawRequest::new(Method::GET, "/v1/watch?revision=0&view=routes"),
            InvalidRequest,
        ),
        case(
            "purge not a bool",
            RawRequest::new(Method::POST, "/v1/cluster/snapshot?purge=yes"),
            InvalidRequest,
        ),
        case(
            "an executor that does not exist",
            RawRequest::new(Method::GET, "/v1/executors/ex-999999"),
            UnknownExecutor,
        ),
        // Unknown routes and wrong methods.
        case(
            "unknown route",
            RawRequest::new(Method::GET, "/v1/nothing-here"),
            NotFound,
        ),
        case(
            "unknown version",
            post("/v2/executors", json!({})),
            NotFound,
        ),
        case(
            "wrong method on a collection",
            RawRequest::new(Method::PUT, "/v1/executors").json("{}"),
            MethodNotAllowed,
        ),
        case(
            "wrong method on renew",
            RawRequest::new(Method::GET, &renew),
            MethodNotAllowed,
        ),
        case(
            "wrong method on state",
            RawRequest::new(Method::DELETE, "/v1/state"),
            MethodNotAllowed,
        ),
    ]
}

/// I6 on the manager: each class of bad input, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_manager_rejections_are_problem_json_and_change_nothing() {
    let data = tempfile::tempdir().unwrap();
    // Long enough that nothing expires while the cases run: the revision is then still.
    let config = config_with(data.path(), None, &["--lease-duration=120s"]);
    let (replica, router) = ready(&config, None).await;
    // One executor that never renews (nothing listens at its address, so pushes fail and are
    // retried without changing the state).
    let executor_id = register(
        &router,
        r#"{"incarnation":"t04","address":"http://127.0.0.1:9"}"#,
        None,
    )
    .await;
    let settled = settled_on(&router, &executor_id, None).await;
    let revision = settled["revision"].as_u64().expect("revision");

    for case in manager_cases(&executor_id) {
        call_whole(&router, case.request.to_request())
            .await
            .expect_problem(case.class, case.code);
        let now = still_state(&router, None).await;
        assert_eq!(
            now["revision"].as_u64(),
            Some(revision),
            "{}: the revision moved",
            case.class
        );
    }
    assert_eq!(
        still_state(&router, None).await,
        settled,
        "a rejected request changed the state"
    );
    replica.shut_down().await.unwrap();
}
