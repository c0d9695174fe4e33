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

use leasehold_api::client::ClientError;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{CreateNamespaceRequest, NamespaceView};
use leasehold_tests::ctl::leaseholdctl;
use leasehold_tests::executor::{wait_for_even_split, ExecutorSpec};
use leasehold_tests::faults::{
    fault_cluster_options, fault_executor_args, use_fault_timing, wait_registered, Fleet,
    FAULT_SHARDS, LEADER_BOUND, SETTLE_BOUND,
};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster};

/// The cluster version that takes namespaces (`leasehold_api::wire::NAMESPACES_SCHEMA`).
const NAMESPACES_SCHEMA: u32 = 10;
/// The leader raises the cluster version within a probe round or two of formation (2 s each).
const VERSION_BOUND: Duration = Duration::from_secs(30);
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
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    poll_until("the cluster version to reach 10", VERSION_BOUND, || async {
        let info = cluster.cluster_info(leader).await?;
        match info.cluster_version {
            Some(version) if version >= NAMESPACES_SCHEMA => Ok(()),
            other => Err(format!("cluster version {other:?}")),
        }
    })
    .await;
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

    // The CLI reads the same, per namespace.
    let urls = cluster.urls();
    let listed: Vec<NamespaceView> = leaseholdctl(&urls, &["-o", "json", "namespace", "list"])
        .await
        .ok()
        .json();
    assert_eq!(listed, namespaces);
    let rows = leaseholdctl(&urls, &["-n", ORDERS, "shard", "list"])
        .await
        .ok()
        .rows();
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
