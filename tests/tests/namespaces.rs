//! Namespaces over the real binaries (PROTOCOL P18.1, P18.2): one cluster, two shard spaces,
//! `default` and `orders`, each with executor processes of its own (`--namespace`). Each
//! namespace's shards are split among its own executors only, read per namespace
//! (`?namespace=`), routed per namespace, and a drained namespace is the only kind deleted; an
//! executor killed in one namespace moves no shard of the other. I1 and I2 are checked on each
//! namespace's admission logs.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_api::client::{http_client_builder, ClientConfig, ClientError};
use leasehold_api::problem::ErrorCode;
use leasehold_api::routing::{RoutedRequest, RoutingClient, RoutingConfig};
use leasehold_api::wire::{
    CreateNamespaceRequest, ExecutorView, NamespaceView, ShardView, DEFAULT_NAMESPACE,
};
use leasehold_example_kv::KvClient;
use leasehold_executor::{Executor, ExecutorConfig};
use leasehold_tests::ctl::leaseholdctl;
use leasehold_tests::executor::{wait_for_even_split, ExecutorProcess, ExecutorSpec};
use leasehold_tests::faults::{
    fault_cluster_options, fault_executor_args, use_fault_timing, wait_registered, Fleet,
    FAULT_SHARDS, LEADER_BOUND, SETTLE_BOUND,
};
use leasehold_tests::http_checks::scrape;
use leasehold_tests::{
    binary, one_cluster_at_a_time, poll_until, wait_for_cluster_version, Cluster,
};
use reqwest::Method;
use serde_json::{json, Value};

/// The cluster version that takes namespaces (`leasehold_api::wire::NAMESPACES_SCHEMA`).
const NAMESPACES_SCHEMA: u32 = 10;
/// The leader raises the cluster version within a probe round or two of formation (2 s each).
const VERSION_BOUND: Duration = Duration::from_secs(30);
/// How long a routed request to a service's executor may take.
const EXECUTOR_REQUEST_BOUND: Duration = Duration::from_secs(30);
const ORDERS: &str = "orders";
const ORDERS_SHARDS: u32 = 12;

fn start_in(fleet: &mut Fleet, cluster: &Cluster, name: &str, namespace: &str) -> usize {
    let mut spec = ExecutorSpec::local(cluster, name);
    spec.extra_args = fault_executor_args();
    spec.extra_args
        .extend(["--namespace".to_owned(), namespace.to_owned()]);
    fleet.start(spec)
}

fn is_code(error: &ClientError, code: ErrorCode) -> bool {
    error.code() == Some(code)
}

/// P18.1, P18.2, I1, I2: two namespaces of one cluster, each placed on its own executors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p18_1_two_namespaces_share_a_cluster_and_never_each_other_s_executors() {
    const SCENARIO: &str = "p18_1_two_namespaces_share_a_cluster";
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::new(fault_cluster_options());
    use_fault_timing(&mut cluster);
    cluster.start_all();
    wait_for_cluster_version(&mut cluster, NAMESPACES_SCHEMA, VERSION_BOUND).await;
    let client = cluster.client();
    let lease_duration_ms = client
        .state(true)
        .await
        .expect("the state")
        .lease_duration_ms;
    let created = client
        .create_namespace(&CreateNamespaceRequest {
            name: ORDERS.to_owned(),
            shard_count: ORDERS_SHARDS,
            lease_duration_ms: Some(lease_duration_ms),
            max_executors: Some(4),
            placement: Default::default(),
            ..CreateNamespaceRequest::default()
        })
        .await
        .expect("orders is created");
    assert_eq!(
        (created.shard_count, created.executors, created.owned_shards),
        (ORDERS_SHARDS, 0, 0)
    );

    let mut defaults = Fleet::new(cluster.dir.path().to_path_buf());
    let mut orders = Fleet::new(cluster.dir.path().to_path_buf());
    let default_executors = [
        start_in(&mut defaults, &cluster, "d-0", "default"),
        start_in(&mut defaults, &cluster, "d-1", "default"),
    ];
    let order_executors = [
        start_in(&mut orders, &cluster, "o-0", ORDERS),
        start_in(&mut orders, &cluster, "o-1", ORDERS),
    ];
    let default_sets = wait_for_even_split(
        &defaults.refs(&default_executors),
        FAULT_SHARDS,
        SETTLE_BOUND,
    )
    .await;
    wait_for_even_split(&orders.refs(&order_executors), ORDERS_SHARDS, SETTLE_BOUND).await;

    // P18.2: each namespace's shards are its own executors', read per namespace.
    let mut order_ids = BTreeSet::new();
    for &index in &order_executors {
        order_ids.insert(wait_registered(orders.get(index)).await);
    }
    let mut default_ids = BTreeSet::new();
    for &index in &default_executors {
        default_ids.insert(wait_registered(defaults.get(index)).await);
    }
    let order_shards = client.shards_in(ORDERS, true).await.unwrap();
    assert_eq!(order_shards.len(), ORDERS_SHARDS as usize);
    assert!(
        order_shards
            .iter()
            .all(|shard| shard.owner.as_ref().is_some_and(|o| order_ids.contains(o))),
        "orders' shards are held by orders' executors: {order_shards:?}"
    );
    let default_shards = client.shards(true).await.unwrap();
    assert_eq!(default_shards.len(), FAULT_SHARDS as usize);
    assert!(default_shards.iter().all(|shard| shard
        .owner
        .as_ref()
        .is_some_and(|o| default_ids.contains(o))));
    let listed: BTreeSet<String> = client
        .executors_in(ORDERS, true)
        .await
        .unwrap()
        .into_iter()
        .map(|executor| {
            assert_eq!(executor.namespace, ORDERS);
            executor.executor_id
        })
        .collect();
    assert_eq!(listed, order_ids);
    let route = client.route_key_in(ORDERS, "order-17", true).await.unwrap();
    assert!(route
        .route
        .executor_id
        .as_ref()
        .is_some_and(|id| order_ids.contains(id)));
    let namespaces = client.namespaces().await.unwrap();
    let names: Vec<(&str, u64, u64)> = namespaces
        .iter()
        .map(|ns| (ns.name.as_str(), ns.executors, ns.owned_shards))
        .collect();
    assert_eq!(
        names,
        [
            ("default", 2, u64::from(FAULT_SHARDS)),
            (ORDERS, 2, u64::from(ORDERS_SHARDS))
        ]
    );

    // Each namespace settled: its next plan moves nothing.
    let plan = client.plan_in(ORDERS).await.unwrap();
    assert!(plan.moves.is_empty(), "{plan:?}");

    // The state gauges carry the namespace (P18.1): each namespace's executors and shards.
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let metrics = scrape(&cluster.http, &cluster.url(leader)).await.unwrap();
    for (series, expected) in [
        (r#"leasehold_executors{namespace="orders"}"#, 2),
        (r#"leasehold_executors{namespace="default"}"#, 2),
        (
            r#"leasehold_shards{namespace="orders",state="owned"}"#,
            ORDERS_SHARDS,
        ),
        (r#"leasehold_shards{namespace="orders",state="unowned"}"#, 0),
        (
            r#"leasehold_shards{namespace="default",state="owned"}"#,
            FAULT_SHARDS,
        ),
    ] {
        assert_eq!(metrics.get(series), Some(&f64::from(expected)), "{series}");
    }
    // So do the leader's placement gauges, each namespace's own.
    for gauge in [
        "leasehold_placement_by_load",
        "leasehold_load_imbalance_ratio",
        "leasehold_hot_shards",
        "leasehold_balance_moves_available",
    ] {
        for namespace in [ORDERS, "default"] {
            let series = format!("{gauge}{{namespace=\"{namespace}\"}}");
            assert!(metrics.contains_key(&series), "{series} is not exported");
        }
    }

    // The CLI reads the same, per namespace.
    let urls = cluster.urls();
    let listed: Vec<NamespaceView> = leaseholdctl(&urls, &["-o", "json", "namespace", "list"])
        .await
        .ok()
        .json();
    assert_eq!(listed, namespaces);
    let (table, summary) = leaseholdctl(&urls, &["-n", ORDERS, "shard", "list"])
        .await
        .ok()
        .split_summary();
    assert!(
        summary.starts_with(&format!("total: {ORDERS_SHARDS} shards; ")),
        "the namespace's own shards: {summary}"
    );
    let rows = table.rows();
    assert_eq!(
        rows.len(),
        1 + ORDERS_SHARDS as usize,
        "a header and a row a shard"
    );
    assert!(rows[1..]
        .iter()
        .all(|row| row.iter().any(|cell| order_ids.contains(cell))));

    // Reads of a namespace that does not exist are 404; a malformed name 400.
    let missing = client.shards_in("nowhere", true).await.unwrap_err();
    assert!(is_code(&missing, ErrorCode::NotFound), "{missing:?}");
    let malformed = client.shards_in("Not_A_Name", true).await.unwrap_err();
    assert!(
        is_code(&malformed, ErrorCode::InvalidRequest),
        "{malformed:?}"
    );
    // A namespace with owned shards is not deleted (drain it first).
    let refused = client.delete_namespace(ORDERS).await.unwrap_err();
    assert!(is_code(&refused, ErrorCode::Conflict), "{refused:?}");

    // An orders executor killed: its shards go to the other orders executor only, and default's
    // executors keep exactly what they held.
    orders.kill(order_executors[1]);
    let survivor = wait_for_even_split(
        &orders.refs(&order_executors[..1]),
        ORDERS_SHARDS,
        SETTLE_BOUND,
    )
    .await;
    assert_eq!(survivor[0].len(), ORDERS_SHARDS as usize);
    let default_after = wait_for_even_split(
        &defaults.refs(&default_executors),
        FAULT_SHARDS,
        SETTLE_BOUND,
    )
    .await;
    assert_eq!(
        default_after, default_sets,
        "P18.1: default moved nothing for orders' loss"
    );

    defaults.check(&format!("{SCENARIO} (default)"));
    orders.check(&format!("{SCENARIO} (orders)"));
}

/// An executor of `namespace` presenting the certificate limited to it (`executor-<namespace>`).
fn spec_in(cluster: &Cluster, name: &str, namespace: &str) -> ExecutorSpec {
    let mut spec = ExecutorSpec::local(cluster, name);
    spec.extra_args = fault_executor_args();
    spec.extra_args
        .extend(["--namespace".to_owned(), namespace.to_owned()]);
    spec.tls_identity = format!("executor-{namespace}");
    spec
}

/// A client presenting `identity`'s certificate of the cluster's directory (`admin`,
/// `executor-kv`, ...).
fn https_as(cluster: &Cluster, identity: &str) -> reqwest::Client {
    let tls = cluster.tls_as(identity).expect("a TLS cluster");
    http_client_builder(Some(&tls))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// `method path` with `body` at `url` as `client`: its status and body.
async fn ask(
    client: &reqwest::Client,
    url: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let mut request = client.request(method, format!("{url}{path}"));
    if !body.is_null() {
        request = request.json(&body);
    }
    let reply = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let status = reply.status().as_u16();
    let body = reply.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// P18.1, P18.2, I1, I2: two services in two namespaces of one TLS cluster, the kv example
/// (`leasehold-kv --namespace kv`) and the demo executor (`--namespace orders`), each executor
/// presenting a certificate limited to its namespace (`leaseholdctl certs issue`). Each
/// service's keys reach its own executors only, through a routing client of its namespace; a
/// certificate of one namespace cannot register into, renew in, release, drain or change the
/// other, nor anything of the whole cluster, and every refusal changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p18_2_two_services_in_two_namespaces_cannot_touch_each_other() {
    const SCENARIO: &str = "p18_2_two_services_in_two_namespaces";
    const KV: &str = "kv";
    // More shards than `default`'s, so renewals past `default`'s body bound must pass (P18.1).
    const KV_SHARDS: u32 = 256;
    let _serial = one_cluster_at_a_time().await;
    let mut options = fault_cluster_options();
    options.make_certificates = true;
    let mut cluster = Cluster::new(options);
    use_fault_timing(&mut cluster);
    cluster.start_all();
    wait_for_cluster_version(&mut cluster, NAMESPACES_SCHEMA, VERSION_BOUND).await;
    let tls_dir = cluster.options.tls_dir.clone().expect("certificates");
    let tls_dir_arg = tls_dir.display().to_string();
    for (role, namespace) in [("executor", KV), ("executor", ORDERS), ("admin", KV)] {
        leaseholdctl(
            &[],
            &[
                "certs",
                "issue",
                role,
                "--namespace",
                namespace,
                "--dir",
                &tls_dir_arg,
            ],
        )
        .await
        .ok();
    }
    let client = cluster.client();
    let lease_duration_ms = client.state(true).await.unwrap().lease_duration_ms;
    for (name, shard_count) in [(KV, KV_SHARDS), (ORDERS, ORDERS_SHARDS)] {
        client
            .create_namespace(&CreateNamespaceRequest {
                name: name.to_owned(),
                shard_count,
                lease_duration_ms: Some(lease_duration_ms),
                max_executors: None,
                placement: Default::default(),
                ..CreateNamespaceRequest::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{name} is created: {e}"));
    }

    // The kv service: two leasehold-kv processes on one store; the other: two demo executors.
    let store = tempfile::tempdir().unwrap();
    let mut kv = Fleet::new(cluster.dir.path().to_path_buf());
    let mut orders = Fleet::new(cluster.dir.path().to_path_buf());
    let kv_executors: Vec<usize> = ["kv-0", "kv-1"]
        .into_iter()
        .map(|name| {
            let mut spec = spec_in(&cluster, name, KV);
            spec.binary = Some(binary("leasehold-kv"));
            spec.extra_args
                .extend(["--store-dir".to_owned(), store.path().display().to_string()]);
            kv.start(spec)
        })
        .collect();
    let order_executors: Vec<usize> = ["o-0", "o-1"]
        .into_iter()
        .map(|name| orders.start(spec_in(&cluster, name, ORDERS)))
        .collect();
    wait_for_even_split(&kv.refs(&kv_executors), KV_SHARDS, SETTLE_BOUND).await;
    wait_for_even_split(&orders.refs(&order_executors), ORDERS_SHARDS, SETTLE_BOUND).await;
    let mut kv_ids = BTreeSet::new();
    for &index in &kv_executors {
        kv_ids.insert(wait_registered(kv.get(index)).await);
    }
    let mut order_ids = BTreeSet::new();
    for &index in &order_executors {
        order_ids.insert(wait_registered(orders.get(index)).await);
    }

    // Each service's traffic reaches its own executors, routed in its namespace.
    let admin_tls = cluster.tls_as("admin").unwrap();
    let routing_in = |namespace: &str| RoutingConfig {
        namespace: namespace.to_owned(),
        managers: ClientConfig {
            request_timeout: Duration::from_secs(2),
            ..ClientConfig::default()
        },
        watch_wait: Duration::from_secs(5),
        // What is judged is where a request goes, not how fast: the first request to a
        // debug-built kv process on a loaded CI machine took longer than the default 5 s.
        executor_timeout: EXECUTOR_REQUEST_BOUND,
        ..RoutingConfig::default()
    };
    let kv_client = KvClient::new(
        RoutingClient::connect_with_tls(cluster.urls(), routing_in(KV), Some(&admin_tls))
            .await
            .unwrap(),
    );
    assert_eq!(kv_client.routing().stats().shard_count, KV_SHARDS);
    for i in 0..32 {
        let key = format!("user-{i}");
        let put = kv_client
            .put(&key, &format!("v{i}"))
            .await
            .unwrap_or_else(|e| panic!("put {key}: {e}"));
        let got = kv_client.get(&key).await.unwrap().expect("the value");
        assert_eq!(got.value, format!("v{i}"));
        assert_eq!(put.shard, got.shard);
    }
    let orders_client =
        RoutingClient::connect_with_tls(cluster.urls(), routing_in(ORDERS), Some(&admin_tls))
            .await
            .unwrap();
    for i in 0..16 {
        let key = format!("order-{i}");
        let path = format!("/v1/work?key={key}");
        let reply = orders_client
            .send(
                key.as_bytes(),
                RoutedRequest {
                    method: &Method::GET,
                    path: &path,
                    body: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("work for {key}: {e}"));
        assert_eq!(reply.status, 200, "{key}");
        assert!(order_ids.contains(&reply.target.executor_id), "{reply:?}");
        assert!(reply.target.shard < ORDERS_SHARDS);
    }
    for route in kv_client.routing().table().routes() {
        let owner = route.owner.expect("every kv shard owned");
        assert!(kv_ids.contains(&owner.executor_id), "{owner:?}");
    }

    // P18.2: the kv certificates cannot touch orders, nor the whole cluster; reads are open.
    let kv_executor = https_as(&cluster, "executor-kv");
    let kv_admin = https_as(&cluster, "admin-kv");
    let order_id = order_ids.first().unwrap().clone();
    // Asked of a follower, so what the leader decides comes with the caller's limit forwarded.
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = cluster.url(if leader == 1 { 2 } else { 1 });
    let before = client.state(true).await.unwrap();
    let before_orders = client.executors_in(ORDERS, true).await.unwrap();
    let register = json!({
        "incarnation": "f".repeat(32),
        "address": "https://127.0.0.1:9",
        "credential": "c".repeat(64),
        "namespace": ORDERS,
    });
    let refused = [
        (
            &kv_executor,
            Method::POST,
            "/v1/executors".to_owned(),
            register,
        ),
        (
            &kv_executor,
            Method::POST,
            format!("/v1/executors/{order_id}/renew"),
            json!({}),
        ),
        (
            &kv_executor,
            Method::POST,
            format!("/v1/executors/{order_id}/release"),
            json!({"shards": [0]}),
        ),
        (
            &kv_executor,
            Method::POST,
            format!("/v1/executors/{order_id}/drain"),
            json!({}),
        ),
        (
            &kv_admin,
            Method::DELETE,
            format!("/v1/executors/{order_id}"),
            Value::Null,
        ),
        (
            &kv_admin,
            Method::PATCH,
            format!("/v1/namespaces/{ORDERS}"),
            json!({"max_executors": 1}),
        ),
        (
            &kv_admin,
            Method::DELETE,
            format!("/v1/namespaces/{ORDERS}"),
            Value::Null,
        ),
        (
            &kv_admin,
            Method::POST,
            "/v1/shards/0/move".to_owned(),
            json!({"to": order_id}),
        ),
        (
            &kv_admin,
            Method::PUT,
            "/v1/cluster/maintenance".to_owned(),
            json!({"on": true}),
        ),
        (
            &kv_admin,
            Method::POST,
            "/v1/cluster/snapshot".to_owned(),
            json!({}),
        ),
        (&kv_admin, Method::GET, "/v1/audit".to_owned(), Value::Null),
    ];
    for (caller, method, path, body) in refused {
        let (status, problem) = ask(caller, &follower, method.clone(), &path, body).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (403, Some("forbidden")),
            "P18.2: {method} {path}: {problem}"
        );
    }
    let after = client.state(true).await.unwrap();
    assert_eq!(
        after.revision, before.revision,
        "the refusals changed nothing"
    );
    assert_eq!(
        client.executors_in(ORDERS, true).await.unwrap().len(),
        before_orders.len()
    );
    // Reads are any certificate's; changes in its own namespace are the limited admin's.
    let (status, _) = ask(
        &kv_executor,
        &follower,
        Method::GET,
        &format!("/v1/shards?namespace={ORDERS}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    let (status, view) = ask(
        &kv_admin,
        &follower,
        Method::PATCH,
        &format!("/v1/namespaces/{KV}"),
        json!({"max_executors": 8}),
    )
    .await;
    assert_eq!((status, &view["max_executors"]), (200, &json!(8)), "{view}");
    // Its quotas are the cluster's (issue 55, finding 6): it may lower its executor bound, not
    // raise or remove it, and it creates no namespace, its own name re-created included (with
    // every shard the cluster has left, it would leave none to anyone else).
    let quotas = [
        (
            Method::PATCH,
            format!("/v1/namespaces/{KV}"),
            json!({"max_executors": 9}),
        ),
        (
            Method::PATCH,
            format!("/v1/namespaces/{KV}"),
            json!({"max_executors": null}),
        ),
        (
            Method::POST,
            "/v1/namespaces".to_owned(),
            json!({"name": KV, "shard_count": 1_047_536}),
        ),
    ];
    for (method, path, body) in quotas {
        let (status, problem) = ask(&kv_admin, &follower, method.clone(), &path, body).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (403, Some("forbidden")),
            "P18.2: a limited admin's {method} {path}: {problem}"
        );
    }
    let (status, view) = ask(
        &kv_admin,
        &follower,
        Method::PATCH,
        &format!("/v1/namespaces/{KV}"),
        json!({"max_executors": 6}),
    )
    .await;
    assert_eq!((status, &view["max_executors"]), (200, &json!(6)), "{view}");
    // The audit log tells the kv admin from an admin of the whole cluster (issue 55, finding 7).
    let audit = client.audit().await.unwrap();
    let last = audit.last().expect("the lowering is recorded");
    assert_eq!(last.action, "namespace_set", "{last:?}");
    assert!(
        last.actor.starts_with("admin of namespaces kv "),
        "P17.4: the actor names the certificate's limit: {last:?}"
    );

    // An executor whose certificate is limited to another namespace is refused at its start.
    let mut misfit = ExecutorProcess::start_spec(cluster.dir.path(), {
        let mut spec = spec_in(&cluster, "misfit", ORDERS);
        spec.tls_identity = "executor-kv".to_owned();
        spec
    });
    let status = misfit.wait_exit(SETTLE_BOUND).await;
    assert_eq!(status.code(), Some(2), "{}", misfit.log());

    // The services kept what they held.
    wait_for_even_split(&kv.refs(&kv_executors), KV_SHARDS, SETTLE_BOUND).await;
    wait_for_even_split(&orders.refs(&order_executors), ORDERS_SHARDS, SETTLE_BOUND).await;
    kv.check(&format!("{SCENARIO} (kv)"));
    orders.check(&format!("{SCENARIO} (orders)"));
}

/// P18.1 (issue 38: "one process may run several library instances"): one process runs an
/// executor of the library in `default` and one in `orders`. Each is its own registration: its
/// own id, incarnation and lease, its namespace's shard count and every shard of it, with its own
/// epochs (shard 0 is admitted by both, each under its namespace's epoch); a graceful stop of
/// each deregisters that one only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p18_1_one_process_runs_an_executor_in_each_namespace() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::new(fault_cluster_options());
    use_fault_timing(&mut cluster);
    cluster.start_all();
    wait_for_cluster_version(&mut cluster, NAMESPACES_SCHEMA, VERSION_BOUND).await;
    let client = cluster.client();
    client
        .create_namespace(&CreateNamespaceRequest {
            name: ORDERS.to_owned(),
            shard_count: ORDERS_SHARDS,
            lease_duration_ms: None,
            max_executors: None,
            placement: Default::default(),
            ..CreateNamespaceRequest::default()
        })
        .await
        .expect("orders is created");
    let start = |namespace: &str| {
        let mut config = ExecutorConfig::new(cluster.urls(), "127.0.0.1:0");
        config.namespace = namespace.to_owned();
        config.name = Some(format!("in-{namespace}"));
        Executor::start(config)
    };
    let in_default = start(DEFAULT_NAMESPACE).await.expect("default's executor");
    let in_orders = start(ORDERS).await.expect("orders' executor");
    for (handle, shards) in [(&in_default, FAULT_SHARDS), (&in_orders, ORDERS_SHARDS)] {
        poll_until(
            "each executor to hold its namespace",
            SETTLE_BOUND,
            || async {
                let status = handle.status();
                match (status.shard_count, status.shards.len()) {
                    (Some(count), held) if count == shards && held == shards as usize => Ok(()),
                    other => Err(format!("shard count and held: {other:?}")),
                }
            },
        )
        .await;
    }
    let (default_status, orders_status) = (in_default.status(), in_orders.status());
    assert_ne!(default_status.executor_id, orders_status.executor_id);
    assert_ne!(default_status.incarnation, orders_status.incarnation);
    assert!(default_status.lease_remaining_ms > 0 && orders_status.lease_remaining_ms > 0);
    let default_permit = in_default.admit(0).expect("default's shard 0");
    let orders_permit = in_orders.admit(0).expect("orders' shard 0");
    let epoch_of = |shards: &[ShardView], id: u32| {
        shards
            .iter()
            .find(|shard| shard.shard == id)
            .map(|shard| shard.epoch)
    };
    assert_eq!(
        Some(default_permit.epoch),
        epoch_of(&client.shards(true).await.unwrap(), 0)
    );
    assert_eq!(
        Some(orders_permit.epoch),
        epoch_of(&client.shards_in(ORDERS, true).await.unwrap(), 0)
    );
    assert!(
        in_orders.admit(ORDERS_SHARDS).is_err(),
        "beyond orders' shards"
    );
    let listed = |executors: Vec<ExecutorView>| -> Vec<Option<String>> {
        executors.into_iter().map(|e| Some(e.executor_id)).collect()
    };
    assert_eq!(
        listed(client.executors_in(ORDERS, true).await.unwrap()),
        [orders_status.executor_id]
    );

    // Each stops on its own: orders' executor deregisters, default's keeps every shard.
    in_orders.shutdown().await;
    assert!(client.executors_in(ORDERS, true).await.unwrap().is_empty());
    assert_eq!(
        listed(client.executors(true).await.unwrap()),
        [default_status.executor_id]
    );
    assert!(in_default.admit(0).is_ok());
    in_default.shutdown().await;
}
