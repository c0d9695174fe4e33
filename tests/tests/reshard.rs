//! Resharding over the real binaries (PROTOCOL §20): a namespace of 8 shards over three executor
//! processes, under a workload of keyed requests, split to 16 and merged back to 8. Every
//! executor follows a change of layout (the library states it, P20.3); the checker judges I1 and
//! I2 per key over every layout the admission logs show, and at the split no key is left
//! without its holder: each executor's stops of the old layout and starts of the new are one
//! instant.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold_api::client::Client;
use leasehold_api::wire::{
    CreateNamespaceRequest, NamespacePlacement, NamespaceView, ReshardKind, ShardView,
    RESHARD_SCHEMA,
};
use leasehold_conformance::admission_log::AdmissionEdge;
use leasehold_tests::executor::ExecutorSpec;
use leasehold_tests::faults::{
    consistent_shards_in, fault_executor_args, start_fault_cluster_with_namespace, wait_registered,
    Fleet, Workload, FAULT_LEASE, SETTLE_BOUND,
};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster};

const KV: &str = "kv";
const KV_SHARDS: u32 = 8;

fn spec(cluster: &Cluster, label: &str) -> ExecutorSpec {
    let mut spec = ExecutorSpec::local(cluster, label);
    spec.extra_args = fault_executor_args();
    spec.extra_args
        .extend(["--namespace".to_owned(), KV.to_owned()]);
    spec
}

/// Every shard of `count` owned by one of `live`, none in a handoff, each of `live` holding
/// some.
fn steady(shards: &[ShardView], count: u32, live: &BTreeSet<String>) -> Result<(), String> {
    if shards.len() != count as usize {
        return Err(format!("{} shards, not {count}", shards.len()));
    }
    let mut holding: BTreeMap<&str, usize> = BTreeMap::new();
    for shard in shards {
        let owner = shard.owner.as_deref().unwrap_or_default();
        if !live.contains(owner) || shard.handoff.is_some() {
            return Err(format!("shard {} not steady: {shard:?}", shard.shard));
        }
        *holding.entry(owner).or_default() += 1;
    }
    if holding.len() != live.len() {
        return Err(format!("not every executor holds shards: {holding:?}"));
    }
    Ok(())
}

/// The namespace once its reshard to `count` is done, at `generation`.
async fn resharded(client: &Client, count: u32, generation: u64) -> Result<NamespaceView, String> {
    let view = client
        .namespace(KV)
        .await
        .map_err(|error| format!("kv: {error}"))?;
    if view.shard_count != count || view.generation != generation || view.reshard.is_some() {
        return Err(format!("not yet resharded to {count}: {view:?}"));
    }
    Ok(view)
}

/// P20.1-P20.3, I1 and I2 per key: a split and a merge under keyed requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p20_reshard_a_namespace_splits_and_merges_under_load_with_one_holder_per_key() {
    const SCENARIO: &str = "p20_reshard";
    let _serial = one_cluster_at_a_time().await;
    let (cluster, _) = start_fault_cluster_with_namespace(
        RESHARD_SCHEMA,
        &CreateNamespaceRequest {
            name: KV.to_owned(),
            shard_count: KV_SHARDS,
            lease_duration_ms: Some(FAULT_LEASE.as_millis() as u64),
            // Room to spread a split's children at once.
            placement: NamespacePlacement {
                max_balance_moves_per_minute: Some(600),
                ..NamespacePlacement::default()
            },
            ..CreateNamespaceRequest::default()
        },
    )
    .await;
    let client = cluster.client();

    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let indices: Vec<usize> = ["s-0", "s-1", "s-2"]
        .iter()
        .map(|name| fleet.start(spec(&cluster, name)))
        .collect();
    let mut ids = Vec::new();
    for &index in &indices {
        ids.push(wait_registered(fleet.get(index)).await);
    }
    let live: BTreeSet<String> = ids.iter().cloned().collect();
    poll_until(
        "kv spread over its three executors",
        SETTLE_BOUND,
        || async { steady(&consistent_shards_in(&client, KV).await?, KV_SHARDS, &live) },
    )
    .await;
    let urls = indices
        .iter()
        .map(|&index| fleet.get(index).url())
        .collect();
    let workload = Workload::start(&cluster, urls, 20);

    // P20.2: the split, carried out at once (no handoff in flight), then spread.
    let asked = client
        .reshard_namespace(KV, KV_SHARDS * 2)
        .await
        .expect("the split is accepted");
    assert_eq!(
        asked.reshard.map(|r| r.kind),
        Some(ReshardKind::Split),
        "{asked:?}"
    );
    poll_until("kv split to 16", SETTLE_BOUND, || async {
        resharded(&client, KV_SHARDS * 2, 1).await
    })
    .await;
    poll_until("the children spread", SETTLE_BOUND, || async {
        steady(
            &consistent_shards_in(&client, KV).await?,
            KV_SHARDS * 2,
            &live,
        )
    })
    .await;
    // P20.3: work routed under generation 0 is answered 421 naming the key's shard and owner in
    // the new layout, whichever executor it reaches, the owner included.
    let http = leasehold_api::client::http_client_builder(cluster.tls_as("admin").as_ref())
        .timeout(Duration::from_secs(5))
        .build()
        .expect("an http client");
    let route = client
        .route_key_in(KV, "reshard-key", true)
        .await
        .expect("the key's route");
    assert_eq!(
        (route.generation, route.shard_count),
        (1, Some(KV_SHARDS * 2))
    );
    let owner_url = fleet
        .get(
            indices[ids
                .iter()
                .position(|id| Some(id) == route.route.executor_id.as_ref())
                .expect("the owner is one of ours")],
        )
        .url();
    for (generation, status) in [(0, 421), (1, 200)] {
        let reply = http
            .get(format!(
                "{owner_url}/v1/work?key=reshard-key&generation={generation}"
            ))
            .send()
            .await
            .expect("the owner answers");
        assert_eq!(
            reply.status().as_u16(),
            status,
            "routed under generation {generation}"
        );
        let body: serde_json::Value = reply.json().await.expect("a JSON body");
        assert_eq!(body["shard"], route.route.shard, "{body}");
        if status == 421 {
            assert_eq!(body["generation"], 1, "{body}");
            assert_eq!(body["shard_count"], KV_SHARDS * 2, "{body}");
            assert_eq!(
                body["owner_executor_id"],
                route.route.executor_id.clone().unwrap(),
                "{body}"
            );
        }
    }

    // A repeat of a reshard done changes nothing.
    let again = client
        .reshard_namespace(KV, KV_SHARDS * 2)
        .await
        .expect("a repeat is answered");
    assert_eq!((again.generation, again.reshard), (1, None));

    // P20.2: the merge, once each pair is on one executor.
    client
        .reshard_namespace(KV, KV_SHARDS)
        .await
        .expect("the merge is accepted");
    poll_until("kv merged back to 8", SETTLE_BOUND, || async {
        resharded(&client, KV_SHARDS, 2).await
    })
    .await;
    poll_until("spread again after the merge", SETTLE_BOUND, || async {
        steady(&consistent_shards_in(&client, KV).await?, KV_SHARDS, &live)
    })
    .await;
    let counts = workload.stop().await;
    assert!(counts.admitted > 0, "{counts:?}");

    // I1 and I2 per key over the three layouts.
    let report = fleet.check_in(SCENARIO, Some(KV_SHARDS));
    assert_eq!(report.generations, 3, "{report:?}");
    assert_eq!(report.shards, (KV_SHARDS * 2) as usize);

    // The split left no key without its holder: each executor's first start of generation 1 is
    // stamped no later than a stop of generation 0 at the same instant (a start is stamped
    // rounded down, a stop rounded up, §9), so no key waited between them.
    for &index in &indices {
        let records = fleet.get(index).admission_log().expect("its log");
        let at = |generation: u64, edge: AdmissionEdge| -> BTreeSet<u64> {
            records
                .iter()
                .filter(|r| r.generation == generation && r.event == edge)
                .filter(|r| edge == AdmissionEdge::Start || r.reason == "unassigned")
                .map(|r| r.t_ns)
                .collect()
        };
        let stopped = at(0, AdmissionEdge::Stop);
        let started = at(1, AdmissionEdge::Start);
        let switch = started
            .iter()
            .next()
            .copied()
            .expect("it started generation 1");
        let one_instant = Duration::from_millis(1).as_nanos() as u64;
        assert!(
            stopped
                .iter()
                .any(|&stop| stop >= switch && stop - switch < one_instant),
            "executor {index}: no stop of generation 0 ({stopped:?}) at its first start of \
             generation 1 ({switch})"
        );
    }
}
