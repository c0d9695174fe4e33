//! Any language (PROTOCOL §16): the Python example service (examples/python/kv.py, standard
//! library only) beside `leasehold-executor --local-listen` sidecars, on one SQLite store
//! directory, against three managers with the fault suite's timing (3 s lease, 48 shards).
//!
//! One cluster, faults in turn, then I1 and I2 over the sidecars' admission logs, which record
//! what each *service* was told it may admit (P16.2), and every acknowledged write read back:
//! - a revoke while the service is slow to acknowledge (P16.2: the handoff waits for it);
//! - the service paused past its lease with a write in flight (P3.6 through the service): the
//!   revoke is held until its copy ran out, the new owner raises the epoch, and the resumed
//!   write is refused by the store (I2, docs/FENCING.md);
//! - a sidecar joining: its service prepares for the shards about to arrive (P17.1);
//! - the sidecar SIGKILLed while the service runs: the service stops when its copy runs out, the
//!   shards move after the lease, and a new sidecar on the same local address serves it again;
//! - the graceful stop asked by the service (SIGTERM → `POST /v1/local/stop`, P3.7).
//!
//! Needs the binaries (`cargo build --workspace --bins`) and `python3`; without `python3` it
//! says so and skips, unless `LEASEHOLD_REQUIRE_PYTHON=1` (set by `.ci/run`).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_api::client::Client;
use leasehold_tests::executor::{
    wait_for_even_split, AdmissionEdge, ExecutorProcess, ExecutorSpec,
};
use leasehold_tests::faults::{
    fault_executor_args, report_figure, start_fault_cluster, wait_registered, Fleet, FAULT_LEASE,
    FAULT_SHARDS, SETTLE_BOUND,
};
use leasehold_tests::proxy::ProxySet;
use leasehold_tests::python::{python_or_skip, PythonService};
use leasehold_tests::{free_port, one_cluster_at_a_time, poll_until, Cluster};
use nix::sys::signal::Signal;

/// How long the paused service's slow write is held between its admission check and the store.
const SLOW_WRITE_DELAY: &str = "3s";
/// How long the slow service waits before it applies (and acknowledges) a new answer.
const SLOW_ACK_DELAY: &str = "2s";

/// A service and the sidecar beside it.
struct Pair {
    /// The sidecar's index in the fleet.
    sidecar: usize,
    /// The sidecar's advertised URL, which the routing table names.
    sidecar_url: String,
    /// The local API's address, kept when the sidecar is replaced.
    local: String,
    /// In front of the managers for the sidecar's calls: when its last renewal left.
    calls: ProxySet,
    service: PythonService,
}

/// The services by the URL of the sidecar beside each: how a client reaches the service that
/// holds a key (the routing table names executors).
struct Services {
    python: std::path::PathBuf,
    store: std::path::PathBuf,
    pairs: BTreeMap<String, Pair>,
}

impl Services {
    /// Starts a sidecar whose calls to the managers pass through `calls`.
    fn start_sidecar(
        fleet: &mut Fleet,
        cluster: &Cluster,
        name: &str,
        local: &str,
        calls: &ProxySet,
    ) -> usize {
        let mut spec = ExecutorSpec::local(cluster, name);
        spec.managers = calls.urls();
        spec.extra_args = fault_executor_args();
        // The service prepares (P17.1), so even the first prepare after the sidecar registers,
        // before the service's first poll, waits for it.
        spec.extra_args.extend([
            "--local-listen".to_owned(),
            local.to_owned(),
            "--local-prepare".to_owned(),
        ]);
        fleet.start(spec)
    }

    /// Starts a sidecar and the service beside it.
    async fn start(
        &mut self,
        fleet: &mut Fleet,
        cluster: &Cluster,
        name: &str,
        service_flags: &[&str],
    ) {
        let local = format!("127.0.0.1:{}", free_port());
        let calls = ProxySet::start(&cluster.urls(), 1, None)
            .await
            .expect("start the call proxies");
        let sidecar =
            Self::start_sidecar(fleet, cluster, &format!("{name}-sidecar"), &local, &calls);
        let sidecar_url = fleet.get(sidecar).url();
        let service = PythonService::start(
            &self.python,
            cluster.dir.path(),
            name,
            &format!("http://{local}"),
            &self.store,
            service_flags,
        );
        wait_registered(fleet.get(sidecar)).await;
        self.pairs.insert(
            name.to_owned(),
            Pair {
                sidecar,
                sidecar_url,
                local,
                calls,
                service,
            },
        );
    }

    fn pair(&self, name: &str) -> &Pair {
        &self.pairs[name]
    }

    /// The pair whose sidecar the managers route `key` to now, if any.
    async fn owner_of(&self, client: &Client, key: &str) -> Result<&Pair, String> {
        let route = client
            .route_key(key, false)
            .await
            .map_err(|e| e.to_string())?;
        let address = route.route.address.ok_or(format!("{key}: no owner now"))?;
        self.pairs
            .values()
            .find(|pair| pair.sidecar_url == address)
            .ok_or(format!("{key}: routed to {address}, no service beside it"))
    }

    /// Writes through the routing table until the owner's service commits it; its epoch.
    async fn put(&self, client: &Client, key: &str, value: &str) -> u64 {
        poll_until(&format!("PUT {key} to commit"), SETTLE_BOUND, || async {
            let pair = self.owner_of(client, key).await?;
            let (status, body) = pair.service.put(key, value).await?;
            if status == 200 {
                body["epoch"].as_u64().ok_or(format!("{body}"))
            } else {
                Err(format!("{} answered {status} {body}", pair.service.name))
            }
        })
        .await
    }

    /// Reads through the routing table until the owner's service serves it.
    async fn get(&self, client: &Client, key: &str) -> String {
        poll_until(&format!("GET {key}"), SETTLE_BOUND, || async {
            let pair = self.owner_of(client, key).await?;
            let (status, body) = pair.service.get(key).await?;
            if status == 200 {
                body["value"]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or(format!("{body}"))
            } else {
                Err(format!("{} answered {status} {body}", pair.service.name))
            }
        })
        .await
    }

    /// A key the managers route to `name`'s sidecar now, starting with `prefix`.
    async fn key_held_by(&self, client: &Client, name: &str, prefix: &str) -> String {
        for n in 0..10_000 {
            let key = format!("{prefix}{n}");
            if let Ok(pair) = self.owner_of(client, &key).await {
                if pair.service.name == name {
                    return key;
                }
            }
        }
        panic!("no key routed to {name}");
    }
}

/// P16.2: the sidecar's log ends each shard of a paused service's copy no earlier than the copy
/// ran out on the service's own clock (`held`, its `GET /permits` before the pause), so the
/// handoff the log orders before the new owner's start (I1, `Fleet::check`) waited for it.
fn services_copy_outlived_by_its_log(held: &serde_json::Value, sidecar: &ExecutorProcess) {
    assert_eq!(
        held["state"], "admitting",
        "the service before its pause: {held}"
    );
    let copy_end_ns = held["expires_monotonic_ns"].as_u64().expect("a copy end");
    let executor_id = held["executor_id"].as_str().expect("an executor id");
    let log = sidecar.admission_log().unwrap();
    let shards = held["shards"].as_array().expect("shards");
    assert!(
        !shards.is_empty(),
        "the paused service held no shard: {held}"
    );
    for shard in shards {
        let (number, epoch) = (shard["shard"].as_u64(), shard["epoch"].as_u64());
        let stopped_ns = log
            .iter()
            .filter(|record| {
                record.event == AdmissionEdge::Stop
                    && record.executor_id == executor_id
                    && Some(u64::from(record.shard)) == number
                    && Some(record.epoch) == epoch
            })
            .map(|record| record.t_ns)
            .max()
            .unwrap_or_else(|| panic!("no stop for {shard} in the paused service's log"));
        assert!(
            stopped_ns >= copy_end_ns,
            "P16.2: the sidecar ended the paused service's {shard} {} ms before the copy it held \
             ran out",
            (copy_end_ns - stopped_ns) / 1_000_000
        );
    }
}

async fn drain(client: &Client, fleet: &Fleet, sidecar: usize) {
    let id = wait_registered(fleet.get(sidecar)).await;
    client.drain(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p16_python_kv_on_sidecars_keeps_i1_and_its_fence_under_faults() {
    let Some(python) =
        python_or_skip("p16_python_kv_on_sidecars_keeps_i1_and_its_fence_under_faults")
    else {
        return;
    };
    let _one = one_cluster_at_a_time().await;
    let cluster = start_fault_cluster().await;
    let client = cluster.client();
    let store = cluster.dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let mut services = Services {
        python,
        store,
        pairs: BTreeMap::new(),
    };
    services
        .start(
            &mut fleet,
            &cluster,
            "a",
            &["--test-write-delay", SLOW_WRITE_DELAY],
        )
        .await;
    services.start(&mut fleet, &cluster, "b", &[]).await;
    services
        .start(
            &mut fleet,
            &cluster,
            "c",
            &["--test-ack-delay", SLOW_ACK_DELAY],
        )
        .await;
    let sidecars: Vec<usize> = ["a", "b", "c"]
        .iter()
        .map(|name| services.pair(name).sidecar)
        .collect();
    wait_for_even_split(&fleet.refs(&sidecars), FAULT_SHARDS, SETTLE_BOUND).await;
    let mut written = BTreeMap::new();
    for n in 0..48 {
        let key = format!("key-{n}");
        services.put(&client, &key, &format!("v1-{n}")).await;
        written.insert(key, format!("v1-{n}"));
    }

    // A revoke while the service is slow to acknowledge: the handoff waits for it (P16.2).
    let started = Instant::now();
    drain(&client, &fleet, services.pair("c").sidecar).await;
    let moved = [services.pair("a").sidecar, services.pair("b").sidecar];
    wait_for_even_split(&fleet.refs(&moved), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        "python sidecar",
        "drain of a service slow to acknowledge (2 s)",
        started.elapsed(),
    );

    // The service paused past its lease with a write in flight.
    let slow_key = services.key_held_by(&client, "a", "slow-").await;
    let stale_write = {
        let url = services.pair("a").service.url();
        let key = slow_key.clone();
        tokio::spawn(async move {
            let reply = reqwest::Client::new()
                .put(format!("{url}/kv/{key}"))
                .json(&serde_json::json!({"value": "from the paused owner"}))
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .unwrap();
            let status = reply.status().as_u16();
            (status, reply.json::<serde_json::Value>().await.unwrap())
        })
    };
    // The write is past its admission check and held before the store.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Read before the pause: until the drain, a newer answer can only extend the copy.
    let held = services.pair("a").service.permits().await.unwrap();
    services.pair("a").service.signal(Signal::SIGSTOP);
    let paused = Instant::now();
    drain(&client, &fleet, services.pair("a").sidecar).await;
    let b = services.pair("b").sidecar;
    wait_for_even_split(&fleet.refs(&[b]), FAULT_SHARDS, SETTLE_BOUND).await;
    let handed_over = paused.elapsed();
    report_figure(
        "python sidecar",
        "shards of a paused service handed over after",
        handed_over,
    );
    services_copy_outlived_by_its_log(&held, fleet.get(services.pair("a").sidecar));
    let new_epoch = services.put(&client, &slow_key, "from the new owner").await;
    written.insert(slow_key.clone(), "from the new owner".to_owned());
    services.pair("a").service.signal(Signal::SIGCONT);
    let (status, body) = stale_write.await.unwrap();
    assert_eq!(
        status, 409,
        "I2: the paused owner's write must be refused by the epoch fence: {body}"
    );
    assert_eq!(body["reason"], "stale_epoch", "{body}");
    assert!(body["store_epoch"].as_u64().unwrap() >= new_epoch, "{body}");
    assert_eq!(services.get(&client, &slow_key).await, "from the new owner");

    // The sidecar SIGKILLed while its service runs; a new one on the same local address.
    services.start(&mut fleet, &cluster, "d", &[]).await;
    let d = services.pair("d").sidecar;
    wait_for_even_split(&fleet.refs(&[b, d]), FAULT_SHARDS, SETTLE_BOUND).await;
    // The shards d took came from a live holder: d's service was asked to prepare for them first,
    // through the local API, and the leader waited for it (P17.1).
    let log = services.pair("d").service.log();
    assert!(
        log.contains("prepared for its arrival"),
        "P17.1: the service beside the joining sidecar prepared for nothing:\n{log}"
    );
    let killed = Instant::now();
    // The service may admit on its copy until the sidecar's lease ends: at most the lease after
    // its last renewal left it, which is no later than that renewal reached the proxy.
    let last_renewal_ns = services
        .pair("b")
        .calls
        .stats()
        .last_arrival_ns
        .iter()
        .filter(|(call, _)| call.ends_with("/renew") || call.as_str() == "POST /v1/executors")
        .map(|(_, &at_ns)| at_ns)
        .max()
        .expect("the sidecar renewed");
    let lease_ns = u64::try_from(FAULT_LEASE.as_nanos()).unwrap();
    fleet.kill_sidecar(b, last_renewal_ns + lease_ns);
    wait_for_even_split(&fleet.refs(&[d]), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        "python sidecar",
        "shards of a killed sidecar re-homed after",
        killed.elapsed(),
    );
    let local = services.pair("b").local.clone();
    let calls = ProxySet::start(&cluster.urls(), 2, None)
        .await
        .expect("start the call proxies");
    let replacement = Services::start_sidecar(&mut fleet, &cluster, "b2-sidecar", &local, &calls);
    wait_registered(fleet.get(replacement)).await;
    {
        let pair = services.pairs.get_mut("b").unwrap();
        pair.sidecar = replacement;
        pair.sidecar_url = fleet.get(replacement).url();
        pair.calls = calls;
    }
    wait_for_even_split(&fleet.refs(&[replacement, d]), FAULT_SHARDS, SETTLE_BOUND).await;
    for n in 0..48 {
        let key = format!("key-{n}");
        services.put(&client, &key, &format!("v2-{n}")).await;
        written.insert(key, format!("v2-{n}"));
    }

    // The graceful stop asked by the service.
    let stopping = Instant::now();
    services.pair("b").service.signal(Signal::SIGTERM);
    let status = services
        .pairs
        .get_mut("b")
        .unwrap()
        .service
        .wait_exit(SETTLE_BOUND)
        .await;
    assert!(status.success(), "the service's stop: {status:?}");
    let sidecar_status = fleet.executors[replacement].wait_exit(SETTLE_BOUND).await;
    assert!(
        sidecar_status.success(),
        "the sidecar's stop: {sidecar_status:?}"
    );
    wait_for_even_split(&fleet.refs(&[d]), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        "python sidecar",
        "graceful stop asked by the service, shards moved in",
        stopping.elapsed(),
    );

    for (key, value) in &written {
        assert_eq!(&services.get(&client, key).await, value, "{key}");
    }
    let report = fleet.check("python kv on sidecars");
    assert!(report.handoffs > 0, "the scenario moved shards");
}
