//! Fencing end to end (docs/FENCING.md) with real processes: three managers with the fault
//! suite's timing (3 s lease, 48 shards), `leasehold-kv` processes (the example service,
//! embedding the executor library) sharing one store directory, and clients writing through the
//! routing client (`leasehold_api::routing`).
//!
//! - The classic pause: an owner's admitted write is in flight when it is paused past its lease
//!   (P3.6); the shard moves (P5.2), the new owner raises the stored epoch and serves; when the
//!   old owner resumes, its write reaches the store and is refused by the epoch rule (I2: the
//!   epoch is the fencing token).
//! - Under faults (leader SIGKILL, executor SIGKILL, an executor paused past its lease): every
//!   acknowledged write is readable afterwards, per key linearizable, never overwritten by a
//!   stale owner.
//! - The routing client: its table follows a rebalance within one watch round trip; a stale
//!   table's `421` costs one refresh and the request succeeds.
//!
//! Every scenario also checks the executors' admission logs for I1 and I2
//! (`leasehold_tests::checker`). Bounds are generous and only polled; figures are printed.
//! Needs the binaries: `cargo build --workspace --bins`.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_api::client::{Client, ClientConfig};
use leasehold_api::routing::{RoutingConfig, RoutingStats};
use leasehold_api::shard_for_key;
use leasehold_api::wire::RoutingTable;
use leasehold_example_kv::history::History;
use leasehold_example_kv::store::{ReadOutcome, ShardStore};
use leasehold_example_kv::wire::{KvStats, Refusal};
use leasehold_example_kv::{KvClient, KvError};
use leasehold_tests::executor::{wait_for_even_split, ExecutorProcess, ExecutorSpec};
use leasehold_tests::faults::{
    fault_executor_args, report_figure, start_fault_cluster, wait_registered, FaultSeed, Fleet,
    FAULT_SHARDS, LEADER_BOUND, SETTLE_BOUND,
};
use leasehold_tests::{binary, one_cluster_at_a_time, poll_until, Cluster};
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

/// How long the paused owner's writes are held between the ownership check and the store: long
/// enough to pause the process inside the window on a loaded machine.
const SLOW_WRITE_DELAY: &str = "3s";
const SLOW_PREFIX: &str = "slow-";

/// A `leasehold-kv` process against every manager of `cluster`, on `store_dir`, with the fault
/// suite's executor flags and `extra` ones.
fn kv_spec(cluster: &Cluster, name: &str, store_dir: &Path, extra: &[&str]) -> ExecutorSpec {
    let mut spec = ExecutorSpec::local(cluster, name);
    // Panics with the build instructions when the binary is missing.
    spec.binary = Some(binary("leasehold-kv"));
    spec.extra_args = fault_executor_args();
    spec.extra_args
        .extend(["--store-dir".to_string(), store_dir.display().to_string()]);
    spec.extra_args.extend(extra.iter().map(|s| s.to_string()));
    spec
}

/// A routing client's configuration for these tests: quick manager timeouts, short watches.
fn routing_config(follow: bool, executor_timeout: Duration) -> RoutingConfig {
    RoutingConfig {
        managers: ClientConfig {
            request_timeout: Duration::from_secs(2),
            ..ClientConfig::default()
        },
        follow,
        watch_wait: Duration::from_secs(5),
        executor_timeout,
        ..RoutingConfig::default()
    }
}

async fn kv_client(cluster: &Cluster, config: RoutingConfig) -> KvClient {
    KvClient::connect(cluster.urls(), config)
        .await
        .unwrap_or_else(|e| panic!("routing client: {e}"))
}

/// `GET /stats` of a kv process.
async fn kv_stats(executor: &ExecutorProcess) -> Result<KvStats, String> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let reply = http
        .get(format!("{}/stats", executor.url()))
        .send()
        .await
        .map_err(|e| format!("{}: {e}", executor.name))?;
    reply
        .json()
        .await
        .map_err(|e| format!("{}: {e}", executor.name))
}

fn shard_of(key: &str) -> u32 {
    shard_for_key(key.as_bytes(), NonZeroU32::new(FAULT_SHARDS).unwrap())
}

/// Keys `prefix0`, `prefix1`, ... whose shards are in `shards`, one per shard, `count` of them.
fn keys_in(shards: &BTreeSet<u32>, prefix: &str, count: usize) -> Vec<String> {
    let mut seen = BTreeSet::new();
    (0..100_000)
        .map(|i| format!("{prefix}{i}"))
        .filter(|key| shards.contains(&shard_of(key)) && seen.insert(shard_of(key)))
        .take(count)
        .collect()
}

/// Waits until the client's table routes every shard to `executor_id`.
async fn wait_table_routes_all_to(client: &KvClient, executor_id: &str) {
    poll_until(
        &format!("the routing client's table to route every shard to {executor_id}"),
        SETTLE_BOUND,
        || async {
            let table = client.routing().table();
            let elsewhere = table
                .routes()
                .filter(|route| {
                    route.owner.as_ref().map(|o| o.executor_id.as_str()) != Some(executor_id)
                })
                .count();
            if table.shard_count() == FAULT_SHARDS && elsewhere == 0 {
                Ok(())
            } else {
                Err(format!(
                    "revision {}: {elsewhere} shards elsewhere or unowned",
                    table.revision()
                ))
            }
        },
    )
    .await;
}

/// Reads every key through the client until each read succeeds, recording them: the "readable
/// afterwards" half of the history.
async fn read_back(client: &KvClient, history: &History, keys: &[String]) {
    for key in keys {
        poll_until(&format!("a read of {key:?}"), SETTLE_BOUND, || async {
            let invoked = history.now();
            let result = client.get(key).await;
            history.read(key, invoked, &result);
            result.map(|_| ()).map_err(|e| e.to_string())
        })
        .await;
    }
}

/// P3.6, P5.2, I2: the classic pause. Owner A has two writes admitted and held in flight (the
/// test delay), for shards S1 and S2, when it is SIGSTOPped past its lease. Both shards move to B.
/// B serves a write to S1's key and only a read of S2's key. A is SIGCONTed: its two in-flight
/// writes reach the store and both are refused by the epoch check (S2's only because B raised
/// the stored epoch on arrival, before serving). The history over every acknowledged write
/// shows no write lost or overwritten by the stale owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owners_in_flight_writes_are_refused_by_the_store() {
    const SCENARIO: &str = "a_paused_owners_in_flight_writes_are_refused_by_the_store";
    let _serial = one_cluster_at_a_time().await;
    let cluster = start_fault_cluster().await;
    let store_dir = cluster.dir.path().join("store");
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let a = fleet.start(kv_spec(
        &cluster,
        "a",
        &store_dir,
        &[
            "--test-write-delay",
            SLOW_WRITE_DELAY,
            "--test-write-delay-prefix",
            SLOW_PREFIX,
        ],
    ));
    let b = fleet.start(kv_spec(&cluster, "b", &store_dir, &[]));
    let split = wait_for_even_split(&fleet.refs(&[a, b]), FAULT_SHARDS, SETTLE_BOUND).await;
    let a_id = wait_registered(fleet.get(a)).await;
    let b_id = wait_registered(fleet.get(b)).await;
    let client = Arc::new(kv_client(&cluster, routing_config(true, Duration::from_secs(60))).await);
    let history = Arc::new(History::new());

    // Acknowledged writes before the pause, on both owners' shards.
    let all: BTreeSet<u32> = (0..FAULT_SHARDS).collect();
    let plain = keys_in(&all, "plain-", 8);
    for key in &plain {
        poll_until(
            &format!("the first write of {key:?}"),
            SETTLE_BOUND,
            || async {
                let invoked = history.now();
                let value = format!("{key}-before-{invoked}");
                let result = client.put(key, &value).await;
                history.write(key, &value, invoked, &result);
                result.map(|_| ()).map_err(|e| e.to_string())
            },
        )
        .await;
    }

    // Two writes admitted by A and held before the store, on two of A's shards.
    let slow = keys_in(&split[0], SLOW_PREFIX, 2);
    let (s1, s2) = (shard_of(&slow[0]), shard_of(&slow[1]));
    let a_epochs: BTreeMap<u32, u64> = fleet.get(a).status().await.unwrap()["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["shard"].as_u64().unwrap() as u32,
                s["epoch"].as_u64().unwrap(),
            )
        })
        .collect();
    // A is paused holding no store lock: every raise on arrival of its shards has committed
    // (a process paused inside a transaction keeps its file locked, which stalls the new owner
    // for the store's busy timeout: availability, not safety, and not this test's subject).
    let store = ShardStore::open(&store_dir).unwrap();
    poll_until("A's raises on arrival to commit", SETTLE_BOUND, || async {
        let behind: Vec<u32> = a_epochs
            .iter()
            .filter(|&(&shard, &epoch)| store.fence_epoch(shard).ok() != Some(epoch))
            .map(|(&shard, _)| shard)
            .collect();
        if behind.is_empty() {
            Ok(())
        } else {
            Err(format!("not raised yet: {behind:?}"))
        }
    })
    .await;
    let in_flight: Vec<JoinHandle<Result<(), KvError>>> = slow
        .iter()
        .map(|key| {
            let (client, history, key) = (Arc::clone(&client), Arc::clone(&history), key.clone());
            tokio::spawn(async move {
                let value = format!("{key}-stale-owner");
                let invoked = history.now();
                let result = client.put(&key, &value).await;
                history.write(&key, &value, invoked, &result);
                result.map(|_| ())
            })
        })
        .collect();
    poll_until("A to hold both writes in flight", SETTLE_BOUND, || async {
        let stats = kv_stats(fleet.get(a)).await?;
        if stats.writes_in_flight == 2 {
            Ok(())
        } else {
            Err(format!("{stats:?}"))
        }
    })
    .await;
    let paused_at = Instant::now();
    fleet.signal(a, Signal::SIGSTOP);

    // The shards move to B once A's lease lapses; the client's table follows.
    wait_table_routes_all_to(&client, &b_id).await;
    report_figure(
        SCENARIO,
        "paused -> client routes every shard to B",
        paused_at.elapsed(),
    );
    let b_epochs: BTreeMap<u32, u64> = client
        .routing()
        .table()
        .routes()
        .map(|route| (route.shard, route.epoch))
        .collect();
    for shard in [s1, s2] {
        assert!(
            b_epochs[&shard] > a_epochs[&shard],
            "{SCENARIO}: I2: shard {shard} moved from epoch {} to {}",
            a_epochs[&shard],
            b_epochs[&shard]
        );
    }
    // B writes S1's key; of S2's key it only serves a read.
    let new_value = format!("{}-new-owner", slow[0]);
    let invoked = history.now();
    let written = client.put(&slow[0], &new_value).await;
    history.write(&slow[0], &new_value, invoked, &written);
    let written = written.unwrap_or_else(|e| panic!("{SCENARIO}: B's write: {e}"));
    assert_eq!(written.epoch, b_epochs[&s1]);
    let invoked = history.now();
    let read = client.get(&slow[1]).await;
    history.read(&slow[1], invoked, &read);
    assert_eq!(read.unwrap_or_else(|e| panic!("B's read: {e}")), None);
    for key in &plain {
        let value = format!("{key}-during-pause");
        let invoked = history.now();
        let result = client.put(key, &value).await;
        history.write(key, &value, invoked, &result);
        result.unwrap_or_else(|e| panic!("{SCENARIO}: write of {key} at B: {e}"));
    }

    // A wakes: its held writes go to the store, which refuses both.
    let resumed_at = Instant::now();
    fleet.signal(a, Signal::SIGCONT);
    report_figure(SCENARIO, "A paused for", resumed_at - paused_at);
    for (key, task) in slow.iter().zip(in_flight) {
        let outcome = tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .unwrap_or_else(|_| panic!("{SCENARIO}: the in-flight write of {key} never ended"))
            .unwrap();
        match outcome {
            Err(KvError::Refused {
                reason: Refusal::StaleEpoch,
                problem,
            }) => {
                assert_eq!(problem.problem.status, 409);
                assert!(problem.store_epoch > problem.epoch, "{problem:?}");
            }
            // The executor's request timeout (10 s) can answer first on a slow machine; the
            // write still went to the store (counted below).
            Err(KvError::Failed { status: 504, .. }) => {
                eprintln!("[fencing] {SCENARIO}: the in-flight write of {key} timed out (504)")
            }
            other => panic!(
                "{SCENARIO}: the paused owner's in-flight write of {key} was not refused: {other:?}"
            ),
        }
    }
    let a_stats = poll_until("A's store to refuse both writes", SETTLE_BOUND, || async {
        let stats = kv_stats(fleet.get(a)).await?;
        if stats.writes_in_flight == 0 && stats.stale_writes_refused >= 2 {
            Ok(stats)
        } else {
            Err(format!("{stats:?}"))
        }
    })
    .await;
    report_figure(
        SCENARIO,
        "resumed -> both stale writes refused",
        resumed_at.elapsed(),
    );
    assert_eq!(
        a_stats.stale_writes_refused, 2,
        "{SCENARIO}: exactly the two in-flight writes were stale: {a_stats:?}"
    );
    let b_stats = kv_stats(fleet.get(b)).await.unwrap();
    eprintln!(
        "[fencing] {SCENARIO}: the store refused {} stale writes; A {a_stats:?}; B {b_stats:?}",
        a_stats.stale_writes_refused
    );
    assert!(
        b_stats.epoch_raises >= 2,
        "{SCENARIO}: B raised no epochs: {b_stats:?}"
    );

    // The store itself: S1 holds B's value at B's epoch, S2 nothing.
    let fence = store.fence_epoch(s1).unwrap();
    assert!(
        fence >= b_epochs[&s1],
        "{SCENARIO}: shard {s1} fenced at {fence}"
    );
    match store.get(s1, fence, &slow[0]).unwrap() {
        ReadOutcome::Found(stored) => assert_eq!(
            (stored.value.as_str(), stored.written_epoch),
            (new_value.as_str(), b_epochs[&s1]),
            "{SCENARIO}: the stale owner overwrote the new owner's write"
        ),
        other => panic!("{SCENARIO}: {}: {other:?}", slow[0]),
    }
    let fence = store.fence_epoch(s2).unwrap();
    assert_eq!(
        store.get(s2, fence, &slow[1]).unwrap(),
        ReadOutcome::Missing,
        "{SCENARIO}: the stale owner's write reached shard {s2} after the new owner served it"
    );

    // A registers anew and gets a share back; every key reads back; the history holds.
    let keys: Vec<String> = plain.iter().chain(&slow).cloned().collect();
    read_back(&client, &history, &keys).await;
    let report = history
        .check()
        .into_result()
        .unwrap_or_else(|violations| panic!("{SCENARIO}: history:\n{violations}"));
    eprintln!(
        "[fencing] {SCENARIO}: history: {} keys, {} acknowledged, {} refused, {} unknown, {} reads",
        report.keys, report.acknowledged, report.refused, report.unknown, report.reads
    );
    wait_for_even_split(&fleet.refs(&[a, b]), FAULT_SHARDS, SETTLE_BOUND).await;
    assert_ne!(
        wait_registered(fleet.get(a)).await,
        a_id,
        "A was reaped while paused"
    );
    fleet.check(SCENARIO);
}

/// Clients writing and reading a few keys through the routing client, recording a history.
struct Clients {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

const CLIENT_KEYS: usize = 6;

impl Clients {
    fn start(client: &KvClient, history: &Arc<History>, count: usize, seed: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..count)
            .map(|number| {
                let (client, history, stop) =
                    (client.clone(), Arc::clone(history), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(number as u64));
                    let mut sequence = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("key-{}", rng.random_range(0..CLIENT_KEYS));
                        let invoked = history.now();
                        let failed = if rng.random_bool(0.7) {
                            sequence += 1;
                            let value = format!("client{number}-{sequence}");
                            let result = client.put(&key, &value).await;
                            history.write(&key, &value, invoked, &result);
                            result.is_err()
                        } else {
                            let result = client.get(&key).await;
                            history.read(&key, invoked, &result);
                            result.is_err()
                        };
                        // Bounded load: a pause per operation, longer after a failure.
                        let pause = if failed { 100 } else { 20 };
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                    }
                })
            })
            .collect();
        Self { stop, tasks }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

/// I3 for the service's data, P5.2, I2: clients write and read through the routing client
/// while the leader is SIGKILLed (twice), an executor is SIGKILLed and replaced, and another is
/// paused past its lease with writes in flight (every write held 300 ms before the store). Every
/// acknowledged write is readable afterwards: the history is per-key linearizable, and no read
/// sees a value of an epoch below a write acknowledged before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_leader_and_executor_faults() {
    const SCENARIO: &str = "acknowledged_writes_survive_leader_and_executor_faults";
    let _serial = one_cluster_at_a_time().await;
    let mut seed = FaultSeed::from_env(SCENARIO);
    let mut cluster = start_fault_cluster().await;
    let store_dir = cluster.dir.path().join("store");
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let held = ["--test-write-delay", "300ms"];
    let a = fleet.start(kv_spec(&cluster, "a", &store_dir, &held));
    let b = fleet.start(kv_spec(&cluster, "b", &store_dir, &held));
    let c = fleet.start(kv_spec(&cluster, "c", &store_dir, &held));
    wait_for_even_split(&fleet.refs(&[a, b, c]), FAULT_SHARDS, SETTLE_BOUND).await;
    let client = kv_client(&cluster, routing_config(true, Duration::from_secs(3))).await;
    let history = Arc::new(History::new());
    let clients = Clients::start(&client, &history, 4, seed.derive());
    let pause =
        |seed: &mut FaultSeed| seed.jitter(Duration::from_millis(800), Duration::from_millis(2000));

    tokio::time::sleep(pause(&mut seed)).await;
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    cluster.manager(leader).kill();
    let new_leader = cluster.wait_for_leader(LEADER_BOUND).await;
    eprintln!("[fencing] {SCENARIO}: killed leader {leader}, new leader {new_leader}");
    cluster.manager(leader).start();

    tokio::time::sleep(pause(&mut seed)).await;
    fleet.kill(a);
    let d = fleet.start(kv_spec(&cluster, "d", &store_dir, &held));
    wait_for_even_split(&fleet.refs(&[b, c, d]), FAULT_SHARDS, SETTLE_BOUND).await;
    eprintln!("[fencing] {SCENARIO}: killed executor a, d took its place");

    tokio::time::sleep(pause(&mut seed)).await;
    let paused_at = Instant::now();
    fleet.signal(b, Signal::SIGSTOP);
    wait_for_even_split(&fleet.refs(&[c, d]), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        SCENARIO,
        "executor paused -> shards re-homed",
        paused_at.elapsed(),
    );
    fleet.signal(b, Signal::SIGCONT);

    tokio::time::sleep(pause(&mut seed)).await;
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    cluster.manager(leader).kill();
    cluster.wait_for_leader(LEADER_BOUND).await;
    cluster.manager(leader).start();
    wait_for_even_split(&fleet.refs(&[b, c, d]), FAULT_SHARDS, SETTLE_BOUND).await;
    tokio::time::sleep(pause(&mut seed)).await;
    clients.stop().await;

    let keys: Vec<String> = (0..CLIENT_KEYS).map(|i| format!("key-{i}")).collect();
    read_back(&client, &history, &keys).await;
    let report = history
        .check()
        .into_result()
        .unwrap_or_else(|violations| panic!("{SCENARIO}: history:\n{violations}"));
    let mut refused_by_store = 0;
    for index in [b, c, d] {
        let stats = kv_stats(fleet.get(index)).await.unwrap();
        eprintln!("[fencing] {SCENARIO}: {}: {stats:?}", fleet.get(index).name);
        refused_by_store += stats.stale_writes_refused;
    }
    eprintln!(
        "[fencing] {SCENARIO}: history: {} keys, {} acknowledged, {} refused, {} unknown, {} \
         reads; the store refused {refused_by_store} stale writes; routing {:?}",
        report.keys,
        report.acknowledged,
        report.refused,
        report.unknown,
        report.reads,
        client.routing().stats()
    );
    assert!(
        report.acknowledged >= 20,
        "{SCENARIO}: only {} writes were acknowledged",
        report.acknowledged
    );
    fleet.check(SCENARIO);
}

/// The managers' routing table (read through the leader) once it is settled over `owners`
/// executors: every shard owned, none being handed off, counts within one (P5.4).
async fn settled_routing(managers: &Client, owners: usize) -> Result<RoutingTable, String> {
    let table = managers.routing(true).await.map_err(|e| e.to_string())?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for route in &table.routes {
        match &route.executor_id {
            Some(owner) => *counts.entry(owner).or_default() += 1,
            None => return Err(format!("shard {} has no owner", route.shard)),
        }
    }
    let spread = counts.values().max().unwrap_or(&0) - counts.values().min().unwrap_or(&0);
    if counts.len() == owners && spread <= 1 {
        Ok(table)
    } else {
        Err(format!("revision {}: {counts:?}", table.revision))
    }
}

fn watches_ended(stats: &RoutingStats) -> u64 {
    stats.watch_replies + stats.watch_failures
}

/// The routing client (§9 `/v1/watch`, P5.4): a following client's table reaches a rebalance
/// within one watch round trip (the first watch started after the rebalance settled brings
/// it), and a client whose table is stale (not following) gets a 421 from the shard's old
/// owner, refreshes once, retries once and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_client_follows_a_rebalance_and_recovers_from_a_421() {
    const SCENARIO: &str = "routing_client_follows_a_rebalance_and_recovers_from_a_421";
    let _serial = one_cluster_at_a_time().await;
    let cluster = start_fault_cluster().await;
    let store_dir = cluster.dir.path().join("store");
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let a = fleet.start(kv_spec(&cluster, "a", &store_dir, &[]));
    let b = fleet.start(kv_spec(&cluster, "b", &store_dir, &[]));
    wait_for_even_split(&fleet.refs(&[a, b]), FAULT_SHARDS, SETTLE_BOUND).await;
    let managers = cluster.client();
    poll_until(
        "the two-way split in the routing table",
        SETTLE_BOUND,
        || settled_routing(&managers, 2),
    )
    .await;
    let following = kv_client(&cluster, routing_config(true, Duration::from_secs(5))).await;
    let stale = kv_client(&cluster, routing_config(false, Duration::from_secs(5))).await;
    let before = stale.routing().table();

    let c = fleet.start(kv_spec(&cluster, "c", &store_dir, &[]));
    let settled = poll_until(
        "the three-way split in the routing table",
        SETTLE_BOUND,
        || settled_routing(&managers, 3),
    )
    .await;
    let settled_at = Instant::now();
    let started = following.routing().stats().watch_started;
    let stats = poll_until(
        "the first watch started after the rebalance settled to end",
        SETTLE_BOUND,
        || async {
            let stats = following.routing().stats();
            if watches_ended(&stats) > started {
                Ok(stats)
            } else {
                Err(format!("{stats:?}"))
            }
        },
    )
    .await;
    report_figure(
        SCENARIO,
        "rebalance settled -> following table current",
        settled_at.elapsed(),
    );
    let table = following.routing().table();
    assert!(
        table.revision() >= settled.revision,
        "{SCENARIO}: one watch round trip after the rebalance settled at revision {}, the table \
         is at {} ({stats:?})",
        settled.revision,
        table.revision()
    );
    for (ours, theirs) in table.routes().zip(&settled.routes) {
        assert_eq!(
            (ours.owner.as_ref().map(|o| &o.executor_id), ours.epoch),
            (theirs.executor_id.as_ref(), theirs.epoch),
            "{SCENARIO}: shard {}",
            ours.shard
        );
    }
    assert_eq!(
        stats.refreshes, 0,
        "{SCENARIO}: the watch alone kept it current"
    );

    // The stale client: a key whose shard moved to c goes to its old owner first.
    let c_id = wait_registered(fleet.get(c)).await;
    let moved: BTreeSet<u32> = settled
        .routes
        .iter()
        .filter(|route| route.executor_id.as_deref() == Some(c_id.as_str()))
        .map(|route| route.shard)
        .collect();
    let key = keys_in(&moved, "moved-", 1).remove(0);
    let old_owner = before.target(key.as_bytes()).unwrap();
    assert_ne!(old_owner.executor_id, c_id);
    let reply = stale
        .put(&key, "after-421")
        .await
        .unwrap_or_else(|e| panic!("{SCENARIO}: the write through the stale table: {e}"));
    assert_eq!(reply.shard, shard_of(&key));
    let stats = stale.routing().stats();
    eprintln!("[fencing] {SCENARIO}: stale client after the 421: {stats:?}");
    assert_eq!(
        (stats.misrouted, stats.refreshes, stats.retries),
        (1, 1, 1),
        "{SCENARIO}: one 421, one refresh, one retry"
    );
    assert!(stats.revision >= settled.revision);
    let read = stale.get(&key).await.unwrap().unwrap();
    assert_eq!(read.value, "after-421");
    assert_eq!(
        stale.routing().stats().misrouted,
        1,
        "the refreshed table routes directly"
    );
    fleet.check(SCENARIO);
}
