//! What a snapshot costs the state machine: the copy of the applied state taken under its lock
//! when openraft asks for a snapshot builder, the first writes after it (which copy what they
//! touch of the shared structure), and encoding the copy (off the apply path). At 10 000
//! executors and 1 000 000 shards by default, the size of B8 in docs/BENCHMARKS.md.
//!
//! Run: `cargo bench -p leasehold-manager --bench state_copy` (LEASEHOLD_BENCH_EXECUTORS and
//! LEASEHOLD_BENCH_SHARDS set the size). It prints its figures as a markdown table and no doc
//! records them: docs/BENCHMARKS.md's B8 measures what a snapshot costs renewals end to end, over
//! the release binaries, and this isolates the state machine's share of it.

// A benchmark: a failed expectation is a failed run, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout)] // the report is the benchmark's output

use std::time::{Duration, Instant};

use leasehold_manager::lease::{Command, LeaseState, Move, Renewal, DEFAULT_CAPACITY};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// A state of `executors` executors holding `shards` shards between them, built through
/// `apply` as Raft would (one registration per entry, the shards granted in plans of at most
/// 8 192 moves).
fn fleet(executors: usize, shards: u32) -> (LeaseState, u64) {
    let mut state = LeaseState::default();
    let mut index = 1;
    let mut commands = vec![Command::Init {
        now_ms: 0,
        shard_count: shards,
        lease_duration_ms: 60_000,
    }];
    // An executor's id is `ex-{the log index of its registration}`: entries 2, 3, ...
    let ids: Vec<String> = (0..executors).map(|n| format!("ex-{}", n + 2)).collect();
    commands.extend((0..executors).map(|n| Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 0,
        incarnation: format!("inc-{n}"),
        address: format!("http://10.0.{}.{}:7000", n / 256, n % 256),
        name: None,
        credential_sha256: None,
        capacity: DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    }));
    for command in commands {
        let outcome = state.apply(index, &command);
        assert!(outcome.refusal().is_none(), "{outcome:?}");
        index += 1;
    }
    let moves: Vec<Move> = (0..shards)
        .map(|shard| Move {
            shard,
            to: ids[shard as usize % executors].clone(),
        })
        .collect();
    for chunk in moves.chunks(8_192) {
        let planned_at = state.revision();
        let plan = Command::Rebalance {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 0,
            planned_at,
            moves: chunk.to_vec(),
        };
        let outcome = state.apply(index, &plan);
        assert!(outcome.refusal().is_none(), "{outcome:?}");
        index += 1;
    }
    assert!(
        state.executors().all(|e| !e.owned_shards.is_empty()),
        "every executor holds shards"
    );
    (state, index)
}

fn time<T>(what: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = what();
    (value, started.elapsed())
}

fn main() {
    let executors = env_or("LEASEHOLD_BENCH_EXECUTORS", 10_000);
    let shards = u32::try_from(env_or("LEASEHOLD_BENCH_SHARDS", 1_000_000)).unwrap_or(u32::MAX);
    let ((mut state, mut index), built) = time(|| fleet(executors, shards));
    println!("state of {executors} executors and {shards} shards built in {built:.2?}");

    // The copy a snapshot builder takes, under the state machine's lock.
    let (copy, copied) = time(|| state.clone());
    // The first renewal batch after it: every executor renews once (group commit of 2 048).
    let ids: Vec<String> = state.executors().map(|e| e.id.clone()).collect();
    let (_, first_renewals) = time(|| {
        for batch in ids.chunks(2_048) {
            let renewals = batch
                .iter()
                .map(|id| Renewal {
                    executor_id: id.clone(),
                    claims: state.delivered_set(id),
                    revision: state.revision(),
                    ready: Vec::new(),
                })
                .collect();
            let outcome = state.apply(
                index,
                &Command::Renew {
                    now_ms: 1_000,
                    renewals,
                },
            );
            assert!(outcome.refusal().is_none(), "{outcome:?}");
            index += 1;
        }
    });
    // Encoding the copy, which the builder does off the apply path.
    let (bytes, encoded) = time(|| {
        bincode::serde::encode_to_vec(&copy, bincode::config::standard()).expect("encodes")
    });
    println!("| copy under the lock | first renewal of every executor after it | encode the copy | encoded size |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| {copied:.2?} | {first_renewals:.2?} | {encoded:.2?} | {:.1} MiB |",
        bytes.len() as f64 / (1024.0 * 1024.0)
    );
}
