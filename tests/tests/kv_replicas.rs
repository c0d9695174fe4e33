//! The example service with replicas (PROTOCOL §19, examples/kv/README.md "Replicas") over the
//! real binaries: a namespace of two replicas per shard served by two `leasehold-kv` processes on
//! one store directory. Each process copies the shards it holds as a secondary from the store and
//! says them ready only once copied (P19.3); reads sent to a secondary are served from that copy
//! (P19.5); a drain of one process moves each of its primaries to its ready secondary on the
//! other, at a higher epoch, while writes and primary reads go on, and no acknowledged write is
//! lost (the history checker). I1 and I2 are checked on the admission logs.
//! Needs the binaries: `cargo build --workspace --bins`.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_api::client::ClientConfig;
use leasehold_api::routing::{ReadFrom, RoutingConfig};
use leasehold_api::shard_for_key;
use leasehold_api::wire::{CreateNamespaceRequest, Role, ShardView, REPLICAS_SCHEMA};
use leasehold_example_kv::history::History;
use leasehold_example_kv::wire::KvStats;
use leasehold_example_kv::KvClient;
use leasehold_tests::executor::{ExecutorProcess, ExecutorSpec};
use leasehold_tests::faults::{
    consistent_shards_in, fault_executor_args, report_figure, start_fault_cluster_with_namespace,
    wait_registered, Fleet, FAULT_LEASE, SETTLE_BOUND,
};
use leasehold_tests::{binary, one_cluster_at_a_time, poll_until, Cluster};
use tokio::task::JoinHandle;

const KV: &str = "kv";
const KV_SHARDS: u32 = 12;
/// Each copy fetches what changed this often: a secondary read is about this stale.
const SECONDARY_REFRESH: &str = "100ms";

/// A `leasehold-kv` process of namespace `kv` on `store_dir`, saying its secondaries ready
/// itself (no `--secondaries-ready-when-held`: only once it has copied them).
fn kv_spec(cluster: &Cluster, name: &str, store_dir: &Path) -> ExecutorSpec {
    let mut spec = ExecutorSpec::local(cluster, name);
    // Panics with the build instructions when the binary is missing.
    spec.binary = Some(binary("leasehold-kv"));
    spec.extra_args = fault_executor_args();
    spec.extra_args.extend([
        "--namespace".to_owned(),
        KV.to_owned(),
        "--store-dir".to_owned(),
        store_dir.display().to_string(),
        "--secondary-refresh".to_owned(),
        SECONDARY_REFRESH.to_owned(),
    ]);
    spec
}

async fn kv_client(cluster: &Cluster) -> KvClient {
    let config = RoutingConfig {
        namespace: KV.to_owned(),
        managers: ClientConfig {
            request_timeout: Duration::from_secs(2),
            ..ClientConfig::default()
        },
        follow: true,
        watch_wait: Duration::from_secs(5),
        executor_timeout: Duration::from_secs(30),
        ..RoutingConfig::default()
    };
    KvClient::connect(cluster.urls(), config)
        .await
        .unwrap_or_else(|e| panic!("routing client: {e}"))
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// `GET /stats` of a kv process.
async fn kv_stats(executor: &ExecutorProcess) -> Result<KvStats, String> {
    let reply = http()
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
    shard_for_key(key.as_bytes(), NonZeroU32::new(KV_SHARDS).unwrap())
}

/// One key per shard, `prefix0`, `prefix1`, ... .
fn key_per_shard(prefix: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    (0..100_000)
        .map(|i| format!("{prefix}{i}"))
        .filter(|key| seen.insert(shard_of(key)))
        .take(KV_SHARDS as usize)
        .collect()
}

/// Every shard with its primary on one of `both`, half on each (the second's share moved to it
/// once it was warm, P19.3), not in a handoff, and one ready secondary on the other: each process
/// has copied every shard it holds as a secondary.
fn settled(shards: &[ShardView], both: &[String; 2]) -> Result<(), String> {
    if shards.len() != KV_SHARDS as usize {
        return Err(format!("{} shards", shards.len()));
    }
    let first = shards
        .iter()
        .filter(|shard| shard.owner.as_ref() == Some(&both[0]))
        .count();
    if first != KV_SHARDS as usize / 2 {
        return Err(format!("{first} of {KV_SHARDS} primaries on {}", both[0]));
    }
    for shard in shards {
        let owner = shard.owner.as_deref().unwrap_or_default();
        let Some(other) = both.iter().find(|id| id.as_str() != owner) else {
            return Err(format!("shard {}: owner {owner:?}", shard.shard));
        };
        let ready = shard
            .secondaries
            .iter()
            .any(|s| &s.executor_id == other && s.ready && s.lost_for_ms.is_none());
        if !both.iter().any(|id| id == owner)
            || shard.handoff.is_some()
            || shard.secondaries.len() != 1
            || !ready
        {
            return Err(format!("shard {} not settled: {shard:?}", shard.shard));
        }
    }
    Ok(())
}

/// Writes `prefix-tryN` to `key` through the primary until one is acknowledged, recording every
/// try; answers the value and the epoch it was stored at.
async fn put_until_acknowledged(
    client: &KvClient,
    history: &History,
    key: &str,
    prefix: &str,
) -> (String, u64) {
    let mut attempt = 0u32;
    poll_until(&format!("a write of {key:?}"), SETTLE_BOUND, || {
        attempt += 1;
        // Each try writes a value of its own: the history needs every written value unique.
        let value = format!("{prefix}-try{attempt}");
        async move {
            let invoked = history.now();
            let result = client.put(key, &value).await;
            history.write(key, &value, invoked, &result);
            result
                .map(|reply| (value, reply.epoch))
                .map_err(|e| e.to_string())
        }
    })
    .await
}

/// Clients writing every key round robin through the routing client, and reading one back from
/// the primary after each write, recording a history.
struct Writers {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Writers {
    fn start(client: &KvClient, history: &Arc<History>, keys: &[String], count: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let tasks = (0..count)
            .map(|number| {
                let (client, history, stop, acknowledged) = (
                    client.clone(),
                    Arc::clone(history),
                    Arc::clone(&stop),
                    Arc::clone(&acknowledged),
                );
                let keys = keys.to_vec();
                tokio::spawn(async move {
                    let mut sequence = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = &keys[(sequence as usize + number) % keys.len()];
                        let value = format!("{key}-writer{number}-{sequence}");
                        sequence += 1;
                        let invoked = history.now();
                        let result = client.put(key, &value).await;
                        history.write(key, &value, invoked, &result);
                        if result.is_ok() {
                            acknowledged.fetch_add(1, Ordering::Relaxed);
                        }
                        let invoked = history.now();
                        let read = client.get(key).await;
                        history.read(key, invoked, &read);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Self {
            stop,
            acknowledged,
            tasks,
        }
    }

    fn acknowledged(&self) -> u64 {
        self.acknowledged.load(Ordering::Relaxed)
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(90), task)
                .await
                .expect("a writer ends within its request bound")
                .unwrap();
        }
    }
}

/// Polls a read of every key from a secondary until each returns `expected[key]`, served by a
/// secondary from a complete copy; returns the replies.
async fn read_from_secondaries(
    client: &KvClient,
    expected: &BTreeMap<String, String>,
    read_from: ReadFrom,
) -> BTreeMap<String, leasehold_example_kv::wire::GetReply> {
    let mut replies = BTreeMap::new();
    for (key, value) in expected {
        let reply = poll_until(
            &format!("{key:?} read from a secondary ({read_from:?}) as {value:?}"),
            SETTLE_BOUND,
            || async {
                let reply = client
                    .get_from(key, read_from)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "not in the secondary's copy yet".to_owned())?;
                if reply.role != Role::Secondary || &reply.value != value || reply.copy.is_none() {
                    return Err(format!("{reply:?}"));
                }
                Ok(reply)
            },
        )
        .await;
        replies.insert(key.clone(), reply);
    }
    replies
}

/// P19.1, P19.3, P19.5, I1, I2: kv with two replicas. Keys written through the primary are read
/// back from the other process's warm copy; each process said its secondaries ready only once
/// copied; a drain of one process promotes each of its primaries to its ready secondary at a
/// higher epoch, the promoted process raising the stored epoch before it serves; writes and
/// primary reads go on through it, the drained process serves the moved shards only as a
/// secondary from then on, and every acknowledged write reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p19_3_p19_5_kv_reads_from_warm_secondaries_and_a_drain_promotes_them() {
    const SCENARIO: &str = "p19_kv_replicas";
    let _serial = one_cluster_at_a_time().await;
    let (cluster, created) = start_fault_cluster_with_namespace(
        REPLICAS_SCHEMA,
        &CreateNamespaceRequest {
            name: KV.to_owned(),
            shard_count: KV_SHARDS,
            lease_duration_ms: Some(FAULT_LEASE.as_millis() as u64),
            replicas: Some(2),
            ..CreateNamespaceRequest::default()
        },
    )
    .await;
    let client = cluster.client();
    assert_eq!(created.replicas, Some(2));

    let store_dir = cluster.dir.path().join("store");
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let a = fleet.start(kv_spec(&cluster, "kv-a", &store_dir));
    let b = fleet.start(kv_spec(&cluster, "kv-b", &store_dir));
    let ids = [
        wait_registered(fleet.get(a)).await,
        wait_registered(fleet.get(b)).await,
    ];
    let started = Instant::now();
    poll_until(
        "every shard with a primary and a ready secondary on the other process",
        SETTLE_BOUND,
        || async { settled(&consistent_shards_in(&client, KV).await?, &ids) },
    )
    .await;
    report_figure(
        SCENARIO,
        "registered -> every secondary copied and ready",
        started.elapsed(),
    );

    // P19.5: keys written through the primary are read back from the secondaries' copies.
    let kv = kv_client(&cluster).await;
    let history = Arc::new(History::new());
    let keys = key_per_shard("key-");
    let mut expected = BTreeMap::new();
    for key in &keys {
        let (value, _) = put_until_acknowledged(&kv, &history, key, &format!("{key}-first")).await;
        expected.insert(key.clone(), value);
    }
    let written_at = Instant::now();
    let replies = read_from_secondaries(&kv, &expected, ReadFrom::Secondary).await;
    report_figure(
        SCENARIO,
        "writes -> every key read from a secondary",
        written_at.elapsed(),
    );
    let shards = consistent_shards_in(&client, KV).await.unwrap();
    for (key, reply) in &replies {
        let view = &shards[shard_of(key) as usize];
        assert_eq!(
            reply.epoch, view.epoch,
            "a secondary's reply carries the primary's epoch: {reply:?} {view:?}"
        );
        let copy = reply.copy.unwrap();
        assert!(copy.position >= 1 && copy.applied_epoch >= 1, "{reply:?}");
    }
    read_from_secondaries(&kv, &expected, ReadFrom::SecondaryPreferred).await;
    let stats = [
        kv_stats(fleet.get(a)).await.unwrap(),
        kv_stats(fleet.get(b)).await.unwrap(),
    ];
    for (id, stats) in ids.iter().zip(&stats) {
        assert!(
            stats.secondary_reads > 0 && stats.secondaries_said_ready > 0,
            "{id} served secondary reads and said its secondaries ready: {stats:?}"
        );
    }

    // P19.3: A's primaries, each with a ready secondary on B.
    let a_primaries: BTreeMap<u32, u64> = shards
        .iter()
        .filter(|shard| shard.owner.as_deref() == Some(ids[0].as_str()))
        .map(|shard| {
            assert!(
                shard
                    .secondaries
                    .iter()
                    .any(|s| s.executor_id == ids[1] && s.ready),
                "shard {} has a ready secondary on B before the drain: {shard:?}",
                shard.shard
            );
            (shard.shard, shard.epoch)
        })
        .collect();
    assert_eq!(a_primaries.len(), KV_SHARDS as usize / 2, "{shards:?}");

    // Writes and primary reads go on through the drain.
    let writers = Writers::start(&kv, &history, &keys, 2);
    poll_until("the writers under way", SETTLE_BOUND, || async {
        if writers.acknowledged() >= 10 {
            Ok(())
        } else {
            Err(format!("{} acknowledged", writers.acknowledged()))
        }
    })
    .await;
    let drained_at = Instant::now();
    client.drain(&ids[0]).await.expect("A drains");
    poll_until(
        "every primary of A on B, its ready secondary, at a higher epoch",
        SETTLE_BOUND,
        || async {
            let shards = consistent_shards_in(&client, KV).await?;
            for (shard, epoch) in &a_primaries {
                let view = &shards[*shard as usize];
                if view.owner.as_deref() != Some(ids[1].as_str()) || view.epoch <= *epoch {
                    return Err(format!("shard {shard} (epoch {epoch} on A): {view:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
    report_figure(
        SCENARIO,
        "drain -> every primary of A promoted on B",
        drained_at.elapsed(),
    );
    let before = writers.acknowledged();
    poll_until(
        "writes acknowledged after the promotion",
        SETTLE_BOUND,
        || async {
            if writers.acknowledged() >= before + 2 * KV_SHARDS as u64 {
                Ok(())
            } else {
                Err(format!(
                    "{} acknowledged since",
                    writers.acknowledged() - before
                ))
            }
        },
    )
    .await;
    writers.stop().await;

    // B serves every moved shard as the primary at its new epoch, having raised the store.
    for key in &keys {
        let shard = shard_of(key);
        let (_, epoch) = put_until_acknowledged(&kv, &history, key, &format!("{key}-last")).await;
        if let Some(before) = a_primaries.get(&shard) {
            assert!(
                epoch > *before,
                "{key}: written at {epoch} after the drain, A held shard {shard} at {before}"
            );
        }
    }
    let b_stats = kv_stats(fleet.get(b)).await.unwrap();
    assert!(
        b_stats.epoch_raises >= a_primaries.len() as u64,
        "B raised the stored epoch of each promoted shard: {b_stats:?}"
    );

    // A deposed primary never serves as one: A answers the moved shards' primary reads 421, and
    // holds them as a secondary (P19.3: in its place), said ready once copied again.
    poll_until(
        "A a ready secondary of every shard",
        SETTLE_BOUND,
        || async {
            let shards = consistent_shards_in(&client, KV).await?;
            for shard in &shards {
                if shard.owner.as_deref() != Some(ids[1].as_str())
                    || !shard
                        .secondaries
                        .iter()
                        .any(|s| s.executor_id == ids[0] && s.ready)
                {
                    return Err(format!("{shard:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
    for key in keys
        .iter()
        .filter(|key| a_primaries.contains_key(&shard_of(key)))
    {
        let reply = http()
            .get(format!("{}/kv/{key}", fleet.get(a).url()))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 421, "A's primary read of {key}");
    }

    // No acknowledged write lost: every key reads back from the primary, the history holds, and
    // A's copies (now secondaries) reach the last values too.
    let mut last = BTreeMap::new();
    for key in &keys {
        let invoked = history.now();
        let read = kv.get(key).await;
        history.read(key, invoked, &read);
        let reply = read
            .unwrap_or_else(|e| panic!("{key}: {e}"))
            .unwrap_or_else(|| panic!("{key}: no value"));
        last.insert(key.clone(), reply.value);
    }
    let report = history
        .check()
        .into_result()
        .unwrap_or_else(|violations| panic!("{SCENARIO}: history:\n{violations}"));
    eprintln!(
        "[kv_replicas] {SCENARIO}: history: {} keys, {} acknowledged, {} refused, {} unknown, {} reads",
        report.keys, report.acknowledged, report.refused, report.unknown, report.reads
    );
    assert!(report.acknowledged > 3 * KV_SHARDS as usize, "{report:?}");
    read_from_secondaries(&kv, &last, ReadFrom::Secondary).await;
    let a_stats = kv_stats(fleet.get(a)).await.unwrap();
    eprintln!("[kv_replicas] {SCENARIO}: A {a_stats:?}; B {b_stats:?}");
    assert_eq!(
        a_stats.copy_changes_refused + b_stats.copy_changes_refused,
        0,
        "the store's deltas never go back in epoch"
    );

    let report = fleet.check(SCENARIO);
    assert!(report.intervals > 0, "{report:?}");
    assert!(
        report.secondary_intervals > 0,
        "the secondaries' lines carry their role: {report:?}"
    );
}
