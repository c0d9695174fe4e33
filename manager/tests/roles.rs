//! Who may say what (PROTOCOL §13, I7), asked of one replica serving as under TLS, in process:
//! the TLS listener's part (it proves the caller's certificate and attaches its role, a
//! `PeerRole`) is played by the test, so every certificate of the cluster's CA made by `certs
//! init` can call every route. Each refusal of P13.3, and of P13.4 under TLS, is a row of one
//! table: the caller's certificate, the request, and what must come back; after every row the
//! replicated state is what it was, revision included.
//!
//! What needs processes stays in `tests/tests/security.rs`: a forwarded role a member of a real
//! cluster never vouched for, forwarding through a follower, and the handshake itself.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::{Method, StatusCode};
use common::router::{
    assert_problem, call, certificates, config, config_with, peer, peer_of_file, ready, register,
    request, revision, settled_on, still_state, with_header, LEADING_BOUND,
};
use leasehold_api::ctl::certs::{self, IssueOptions};
use leasehold_api::serve::PeerRole;
use leasehold_api::tls::Role;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The registered executor's credential (P13.4), and another one.
fn credential() -> String {
    "5a".repeat(32)
}

fn other_credential() -> String {
    "a5".repeat(32)
}

/// One request of the table and what it must get.
struct Row {
    caller: &'static str,
    method: Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Value>,
    status: StatusCode,
    code: &'static str,
    /// What the refusal's detail must name, where the same status has several causes.
    detail: Option<&'static str>,
}

fn row(caller: &'static str, method: Method, path: &str, status: u16) -> Row {
    Row {
        caller,
        method,
        path: path.to_owned(),
        headers: Vec::new(),
        body: None,
        status: StatusCode::from_u16(status).unwrap(),
        code: if status == 401 {
            "unauthenticated"
        } else {
            "forbidden"
        },
        detail: None,
    }
}

/// The certificates of the table's callers: `admin`, `executor`, and managers 1 (this replica),
/// 2 and 4 (of the cluster's CA, never members of this single-node cluster).
struct Callers {
    by_name: Vec<(&'static str, PeerRole)>,
}

impl Callers {
    fn get(&self, name: &str) -> &PeerRole {
        &self
            .by_name
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no caller {name}"))
            .1
    }
}

/// Raft headers claiming to come from `node`.
fn raft_from(node: u64) -> Vec<(&'static str, String)> {
    vec![
        ("x-leasehold-node-id", node.to_string()),
        ("x-leasehold-storage-id", "s".into()),
    ]
}

fn bearer(credential: &str) -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {credential}"))]
}

/// Headers saying manager `by` forwarded this request for a caller of `role`.
fn forwarded(by: u64, role: &str) -> Vec<(&'static str, String)> {
    vec![
        ("x-leasehold-forwarded-by", by.to_string()),
        ("x-leasehold-forwarded-role", role.to_string()),
    ]
}

/// The refusals: each role, each route it is not for.
fn table(executor_id: &str) -> Vec<Row> {
    let executor_path = format!("/v1/executors/{executor_id}");
    let drain = format!("{executor_path}/drain");
    let renew = format!("{executor_path}/renew");
    let release = format!("{executor_path}/release");
    let renewal = json!({"claims": [], "revision": 0});
    let admin_uri = "urn:leasehold:admin";
    let mut table = vec![
        // Without a certificate only health is answered (P13.2).
        row("nobody", Method::GET, "/v1/state", 401),
        // Raft: only managers, only members, and only as themselves.
        Row {
            headers: raft_from(2),
            ..row("executor", Method::POST, "/raft/append", 403)
        },
        Row {
            headers: raft_from(1),
            ..row("executor", Method::POST, "/raft/vote", 403)
        },
        Row {
            headers: raft_from(2),
            ..row("admin", Method::POST, "/raft/vote", 403)
        },
        Row {
            headers: raft_from(3),
            detail: Some("claims to be from node 3"),
            ..row("manager-2", Method::POST, "/raft/vote", 403)
        },
        Row {
            headers: raft_from(2),
            detail: Some("claims to be from node 2"),
            ..row("manager-1", Method::POST, "/raft/vote", 403)
        },
        Row {
            headers: raft_from(2),
            detail: Some("manager 2 is not a member"),
            ..row("manager-2", Method::POST, "/raft/vote", 403)
        },
        // Administration: admin only.
        row("executor", Method::POST, "/v1/cluster/init", 403),
        Row {
            body: Some(json!({"node_id": 9, "address": "https://127.0.0.1:9"})),
            ..row("executor", Method::POST, "/v1/cluster/nodes", 403)
        },
        row("executor", Method::DELETE, "/v1/cluster/nodes/3", 403),
        row("executor", Method::POST, "/v1/cluster/snapshot", 403),
        row("executor", Method::GET, "/v1/backup", 403),
        row("executor", Method::DELETE, &drain, 403),
        // Its own credential does not make an executor an operator: only an operator takes a
        // drain back (P17.2).
        Row {
            headers: bearer(&credential()),
            ..row("executor", Method::DELETE, &drain, 403)
        },
        // An executor drains only itself, with its credential (P17.2): its certificate alone
        // is not enough.
        row("executor", Method::POST, &drain, 401),
        Row {
            headers: bearer(&other_credential()),
            ..row("executor", Method::POST, &drain, 401)
        },
        // A manager's certificate removes only its own node (P13.3, `--rejoin`).
        row("manager-2", Method::DELETE, "/v1/cluster/nodes/3", 403),
        // P17.4: the operator controls and their audit are the admin's.
        Row {
            body: Some(json!({"on": true})),
            ..row("executor", Method::PUT, "/v1/cluster/maintenance", 403)
        },
        Row {
            body: Some(json!({"to": executor_id})),
            ..row("executor", Method::POST, "/v1/shards/0/move", 403)
        },
        Row {
            body: Some(json!({"executor_id": executor_id})),
            ..row("executor", Method::PUT, "/v1/shards/0/pin", 403)
        },
        row("executor", Method::DELETE, "/v1/shards/0/pin", 403),
        row("executor", Method::GET, "/v1/audit", 403),
        // P18.1: namespaces are changed by an operator.
        Row {
            body: Some(json!({"name": "kv", "shard_count": 4})),
            ..row("executor", Method::POST, "/v1/namespaces", 403)
        },
        // Renewals are the executors' own (with their credential, P13.4).
        Row {
            body: Some(renewal.clone()),
            ..row("admin", Method::POST, &renew, 403)
        },
        // Over TLS a registration carries a credential (P13.5).
        Row {
            body: Some(json!({"incarnation": "no-credential", "address": "https://127.0.0.1:9"})),
            ..row("executor", Method::POST, "/v1/executors", 401)
        },
        // Only a manager forwards, and only as itself: a forwarded role from anyone else is
        // refused.
        Row {
            headers: forwarded(2, admin_uri),
            ..row("executor", Method::DELETE, "/v1/cluster/nodes/3", 403)
        },
        Row {
            headers: forwarded(1, "admin"),
            body: Some(json!({
                "incarnation": "claimed",
                "address": "https://127.0.0.1:9",
                "credential": other_credential(),
            })),
            ..row("executor", Method::POST, "/v1/executors", 403)
        },
        Row {
            headers: forwarded(3, admin_uri),
            ..row("manager-2", Method::DELETE, "/v1/cluster/nodes/3", 403)
        },
        // A node never takes a forward said to come from itself.
        Row {
            headers: forwarded(1, admin_uri),
            detail: Some("never forwards to itself"),
            ..row("manager-1", Method::GET, "/v1/backup", 403)
        },
    ];
    // A manager certificate makes no forwarded role true by itself (P13.3): not from a node that
    // is not a member (manager 2 and manager 4 here), with or without a voucher. Each asks for
    // what only an admin may do: remove a voter, read the backup and the audit log, switch
    // maintenance on. (A member's forward it never vouched for needs a second member:
    // `tests/tests/security.rs`.)
    let admin_only = [
        (Method::DELETE, "/v1/cluster/nodes/3", None),
        (Method::GET, "/v1/backup", None),
        (Method::GET, "/v1/audit", None),
        (
            Method::PUT,
            "/v1/cluster/maintenance",
            Some(json!({"on": true})),
        ),
    ];
    let never_issued = "0123456789abcdef0123456789abcdef".to_owned();
    for (method, path, body) in admin_only {
        for (caller, by, voucher) in [
            ("manager-4", 4, None),
            ("manager-4", 4, Some(never_issued.clone())),
            ("manager-2", 2, None),
        ] {
            let mut headers = forwarded(by, admin_uri);
            headers.push(("x-leasehold-forwarded-subject", "CN=chosen".to_owned()));
            if let Some(voucher) = voucher {
                headers.push(("x-leasehold-forwarded-voucher", voucher));
            }
            table.push(Row {
                headers,
                body: body.clone(),
                detail: Some("not a member"),
                ..row(caller, method.clone(), path, 403)
            });
        }
    }
    table.extend([
        // P13.4 under TLS: the executor certificate is every executor's, so which executor is
        // speaking is its credential; without it, or with another, nothing is renewed, released
        // or deregistered.
        Row {
            body: Some(renewal.clone()),
            ..row("executor", Method::POST, &renew, 401)
        },
        Row {
            headers: bearer(&other_credential()),
            body: Some(renewal),
            ..row("executor", Method::POST, &renew, 401)
        },
        Row {
            headers: bearer(&other_credential()),
            body: Some(json!({"shards": [0], "revoke_revision": 1})),
            ..row("executor", Method::POST, &release, 401)
        },
        row("executor", Method::DELETE, &executor_path, 401),
        Row {
            headers: bearer(&other_credential()),
            ..row("executor", Method::DELETE, &executor_path, 401)
        },
        // A replayed registration with another credential.
        Row {
            body: Some(json!({
                "incarnation": "tls-test",
                "address": "https://127.0.0.1:9",
                "credential": other_credential(),
            })),
            code: "conflict",
            ..row("executor", Method::POST, "/v1/executors", 409)
        },
    ]);
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_3_every_role_may_do_only_what_it_is_for() {
    let data = tempfile::tempdir().unwrap();
    let (_tls, tls_dir) = certificates(4);
    // Long enough that nothing lapses while the table runs: every change is the table's.
    let config = config_with(data.path(), Some(&tls_dir), &["--lease-duration=60s"]);
    let callers = Callers {
        by_name: vec![
            ("admin", peer(&tls_dir, Role::Admin)),
            ("executor", peer(&tls_dir, Role::Executor)),
            ("manager-1", peer(&tls_dir, Role::Manager { node_id: 1 })),
            ("manager-2", peer(&tls_dir, Role::Manager { node_id: 2 })),
            ("manager-4", peer(&tls_dir, Role::Manager { node_id: 4 })),
        ],
    };
    let admin = callers.get("admin");
    let (replica, router) = ready(&config, Some(admin)).await;

    // Health is anyone's; `--health-listen` (P13.2) answers health without a certificate, and
    // nothing else at all.
    let (status, _, _) = call(&router, request(Method::GET, "/livez", None, None)).await;
    assert_eq!(status, StatusCode::OK);
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
        let answer = call(&health, request(Method::GET, path, None, Some(admin))).await;
        assert_problem(&answer, StatusCode::NOT_FOUND, "not_found");
    }

    // An executor certificate may register (P13.3), with a credential (P13.5); the planner
    // gives it every shard, and from then on only the table's requests could change anything.
    let registration = json!({
        "incarnation": "tls-test",
        "address": "https://127.0.0.1:9",
        "credential": credential(),
    })
    .to_string();
    let executor_id = register(&router, &registration, Some(callers.get("executor"))).await;
    let settled = settled_on(&router, &executor_id, Some(admin)).await;

    for row in table(&executor_id) {
        let caller = (row.caller != "nobody").then(|| callers.get(row.caller));
        let body = row.body.as_ref().map(Value::to_string);
        let mut sent = request(row.method.clone(), &row.path, body.as_deref(), caller);
        for (name, value) in &row.headers {
            sent = with_header(sent, name, value);
        }
        let answer = call(&router, sent).await;
        let what = format!("{} {} as {}", row.method, row.path, row.caller);
        assert_eq!(
            (answer.0, answer.2["code"].as_str()),
            (row.status, Some(row.code)),
            "P13.3: {what}: {}",
            answer.2
        );
        assert_problem(&answer, row.status, row.code);
        if let Some(reason) = row.detail {
            let detail = answer.2["detail"].as_str().unwrap_or_default();
            assert!(detail.contains(reason), "{what}: {detail}");
        }
        assert_eq!(
            still_state(&router, Some(admin)).await,
            settled,
            "P13.3: the refused {what} changed nothing"
        );
    }

    // Manager 1 as itself passes the layer: its malformed Raft message is refused as malformed.
    let mut vote = request(
        Method::POST,
        "/raft/vote",
        Some("{"),
        Some(callers.get("manager-1")),
    );
    for (name, value) in raft_from(1) {
        vote = with_header(vote, name, &value);
    }
    let (status, _, body) = call(&router, vote).await;
    assert!(
        status.is_client_error() && status != StatusCode::FORBIDDEN,
        "{status} {body}"
    );

    // A HEAD of the backup says its size and revision: admin only too, as its GET.
    for (caller, status) in [
        ("executor", StatusCode::FORBIDDEN),
        ("manager-2", StatusCode::FORBIDDEN),
        ("admin", StatusCode::OK),
    ] {
        let (got, _, _) = call(
            &router,
            request(Method::HEAD, "/v1/backup", None, Some(callers.get(caller))),
        )
        .await;
        assert_eq!(got, status, "P13.3: HEAD /v1/backup as {caller}");
    }
    // Reads are open to every role.
    for caller in ["executor", "admin", "manager-2"] {
        let (status, _, body) = call(
            &router,
            request(Method::GET, "/v1/state", None, Some(callers.get(caller))),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{caller} reads: {body}");
    }
    assert_eq!(still_state(&router, Some(admin)).await, settled);
    replica.shut_down().await.unwrap();
}

/// P17.2, P17.4 under TLS: an executor drains itself with its own credential, which the audit
/// log does not record (it is the executor's lifecycle, not an operator's action); the operator
/// controls (maintenance, pins, moves) are the admin's, each recorded with the certificate's
/// subject, only when it changed something, in order; and the admin's refusals name the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p17_4_operator_controls_are_the_admins_and_audited() {
    let data = tempfile::tempdir().unwrap();
    let (_tls, tls_dir) = certificates(1);
    let config = config(data.path(), Some(&tls_dir));
    let admin = peer(&tls_dir, Role::Admin);
    let executor = peer(&tls_dir, Role::Executor);
    let (replica, router) = ready(&config, Some(&admin)).await;
    let registration = json!({
        "incarnation": "router-test-1",
        "address": "https://127.0.0.1:9",
        "credential": "ab".repeat(32),
    })
    .to_string();
    let id = register(&router, &registration, Some(&executor)).await;

    let drain_path = format!("/v1/executors/{id}/drain");
    let drain = with_header(
        request(Method::POST, &drain_path, None, Some(&executor)),
        "authorization",
        &format!("Bearer {}", "ab".repeat(32)),
    );
    let (status, _, drained) = call(&router, drain).await;
    assert_eq!(status, StatusCode::OK, "{drained}");
    assert_eq!(drained["draining"], true, "{drained}");
    // P17.4 (issue 55, finding 4): the audit log, which callers who are not operators must not
    // fill, does not record the executor's own drain.
    let (status, _, audit) = call(
        &router,
        request(Method::GET, "/v1/audit", None, Some(&admin)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    assert_eq!(audit, json!([]), "the executor's own drain: {audit}");

    let maintenance_on = Some(r#"{"on":true}"#);
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
    assert_eq!(turned_on.2, json!({"on": true, "changed": true}));
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
    for (method, path, body, status, code) in [
        // Draining: it takes no shards.
        (
            Method::POST,
            "/v1/shards/1/move",
            Some(move_body.as_str()),
            StatusCode::CONFLICT,
            "conflict",
        ),
        (
            Method::POST,
            "/v1/shards/x/move",
            Some(move_body.as_str()),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::PUT,
            "/v1/shards/99/pin",
            Some(pin_body.as_str()),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::PUT,
            "/v1/shards/2/pin",
            Some(r#"{"executor_id":"ex-999"}"#),
            StatusCode::NOT_FOUND,
            "unknown_executor",
        ),
        (
            Method::PUT,
            "/v1/shards/2/pin",
            Some(r#"{"executor":"ex-1"}"#),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
    ] {
        let answer = call(&router, request(method.clone(), path, body, Some(&admin))).await;
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
    let limited = peer_of_file(&tls_dir.join("admin-kv.pem"));
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
