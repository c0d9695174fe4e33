//! Append throughput of the sled log store: 1 and 64 concurrent appenders, group commit on and
//! off. Each appender waits for its entry's durability callback before appending again, the way
//! a Raft leader's clients wait for their write to be durable.
//!
//! Run: `cargo bench -p leasehold-raft-store --bench append` (LEASEHOLD_BENCH_SECONDS sets the
//! time per configuration, default 5). Figures are recorded in docs/BENCHMARKS.md.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout)] // the report is the benchmark's output

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{open_db, open_stores, set_entry};
use leasehold_raft_store::LogStoreConfig;
use tokio::sync::{oneshot, Mutex};

struct Outcome {
    appends: u64,
    flushes: u64,
    latencies_us: Vec<u64>,
    elapsed: Duration,
}

async fn run(group_commit: bool, appenders: usize, duration: Duration) -> Outcome {
    let dir = tempfile::TempDir::new().unwrap();
    let db = open_db(dir.path());
    let config = LogStoreConfig {
        group_commit,
        ..LogStoreConfig::default()
    };
    let (log, _) = open_stores(&db, config);
    let stats = log.stats();
    // The index counter and the store are locked together: Raft appends are serial and gapless.
    let shared = Arc::new(Mutex::new((log, 1u64)));
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for _ in 0..appenders {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies_us = Vec::new();
            while Instant::now() < deadline {
                let (durable_tx, durable_rx) = oneshot::channel();
                let sent_at = Instant::now();
                {
                    let mut guard = shared.lock().await;
                    let (log, next_index) = &mut *guard;
                    let index = *next_index;
                    *next_index += 1;
                    log.append_with(
                        vec![set_entry(1, index)],
                        Box::new(move |r| drop(durable_tx.send(r))),
                    )
                    .await
                    .unwrap();
                }
                durable_rx.await.unwrap().unwrap();
                latencies_us.push(sent_at.elapsed().as_micros() as u64);
            }
            latencies_us
        }));
    }
    let mut latencies_us = Vec::new();
    for task in tasks {
        latencies_us.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies_us.sort_unstable();
    Outcome {
        appends: latencies_us.len() as u64,
        flushes: stats.append_flushes.load(Ordering::Relaxed),
        latencies_us,
        elapsed,
    }
}

fn percentile(sorted: &[u64], fraction: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}

/// The floor under any log store on sled: insert `per_flush` entries, flush, repeat, on one
/// thread with no Raft types, channels or tasks involved.
fn raw_sled_flush_cost(per_flush: u64, rounds: u64) -> (Duration, f64) {
    let dir = tempfile::TempDir::new().unwrap();
    let db = open_db(dir.path());
    let tree = db.open_tree("raw").unwrap();
    let record = vec![7u8; 150];
    let started = Instant::now();
    let mut index = 0u64;
    for _ in 0..rounds {
        for _ in 0..per_flush {
            index += 1;
            tree.insert(index.to_be_bytes(), record.as_slice()).unwrap();
        }
        db.flush().unwrap();
    }
    let elapsed = started.elapsed();
    (
        elapsed / rounds as u32,
        index as f64 / elapsed.as_secs_f64(),
    )
}

fn main() {
    let seconds: u64 = std::env::var("LEASEHOLD_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("| group commit | appenders | appends/s | flushes/s | appends per flush | p50 ack | p99 ack |");
    println!("|---|---|---|---|---|---|---|");
    for group_commit in [false, true] {
        for appenders in [1usize, 64] {
            let outcome =
                runtime.block_on(run(group_commit, appenders, Duration::from_secs(seconds)));
            let secs = outcome.elapsed.as_secs_f64();
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.1} | {:.2} ms | {:.2} ms |",
                if group_commit { "on" } else { "off" },
                appenders,
                outcome.appends as f64 / secs,
                outcome.flushes as f64 / secs,
                outcome.appends as f64 / outcome.flushes.max(1) as f64,
                percentile(&outcome.latencies_us, 0.50) as f64 / 1000.0,
                percentile(&outcome.latencies_us, 0.99) as f64 / 1000.0,
            );
        }
    }
    println!();
    println!("| raw sled: entries per flush | time per flush | entries/s |");
    println!("|---|---|---|");
    for per_flush in [1u64, 4, 25, 100] {
        let (per_flush_time, entries_per_second) = raw_sled_flush_cost(per_flush, 500);
        println!(
            "| {per_flush} | {:.2} ms | {entries_per_second:.0} |",
            per_flush_time.as_secs_f64() * 1000.0
        );
    }
}
