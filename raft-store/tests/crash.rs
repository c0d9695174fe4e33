//! A process SIGKILLed in the middle of a stream of appends loses nothing whose durability
//! callback had fired.
//!
//! The test binary re-runs itself as the child (`child_appends_until_killed`, which does nothing
//! unless `CHILD_DIR_ENV` is set). The child appends as fast as it can with group commit on and
//! prints `ack N` when entry N's callback reports it durable; the parent kills it at a random
//! point and then checks every acknowledged entry on disk.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use common::*;
use leasehold_raft_store::LogStoreConfig;
use rand::Rng;
use tempfile::TempDir;

const CHILD_DIR_ENV: &str = "LEASEHOLD_RAFT_STORE_CRASH_CHILD_DIR";
const CHILD_TEST_NAME: &str = "child_appends_until_killed";
const RUNS: usize = 20;
/// Upper bound on entries one child appends, so a child the parent failed to kill still stops.
const CHILD_MAX_ENTRIES: u64 = 2_000_000;

#[test]
fn child_appends_until_killed() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return; // Run directly by the harness: nothing to do.
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let db = open_db(std::path::Path::new(&dir));
        let (mut log, _) = open_stores(&db, LogStoreConfig::default());
        for index in 1..=CHILD_MAX_ENTRIES {
            // Several entries per append now and then, like a leader batching proposals.
            let entries = vec![set_entry(1, index)];
            log.append_with(
                entries,
                Box::new(move |result| {
                    if result.is_ok() {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "ack {index}");
                        let _ = out.flush();
                    }
                }),
            )
            .await
            .unwrap();
        }
    });
}

#[test]
fn sigkill_during_appends_loses_no_acknowledged_entry() {
    let test_binary = std::env::current_exe().unwrap();
    let mut rng = rand::rng();
    let mut acknowledged_per_run = Vec::new();
    for run in 0..RUNS {
        let dir = TempDir::new().unwrap();
        let mut child = Command::new(&test_binary)
            .args([
                CHILD_TEST_NAME,
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let kill_after_acks: u64 = rng.random_range(1..5_000);
        let mut last_acknowledged = 0u64;
        for line in lines.by_ref() {
            if let Some(index) = parse_ack(&line.unwrap()) {
                assert_eq!(index, last_acknowledged + 1, "acks arrive in order");
                last_acknowledged = index;
                if index >= kill_after_acks {
                    break;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL
                               // Acknowledgements already written before the kill count too.
        for line in lines {
            if let Some(index) = parse_ack(&line.unwrap()) {
                last_acknowledged = last_acknowledged.max(index);
            }
        }
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "run {run}: the child must die by SIGKILL mid-stream, not exit ({status})"
        );
        assert!(
            last_acknowledged >= kill_after_acks,
            "run {run}: child stopped acknowledging early"
        );

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let db = open_db(dir.path());
            let (log, _) = open_stores(&db, LogStoreConfig::default());
            let entries = log.read_entries(1..).unwrap();
            assert!(
                entries.len() as u64 >= last_acknowledged,
                "run {run}: {} entries on disk, {last_acknowledged} were acknowledged",
                entries.len()
            );
            for (position, entry) in entries.iter().enumerate() {
                let index = position as u64 + 1;
                assert_eq!(
                    entry,
                    &set_entry(1, index),
                    "run {run}: entry {index} (no holes, no damage)"
                );
            }
        });
        acknowledged_per_run.push(last_acknowledged);
    }
    eprintln!("acknowledged entries per run before SIGKILL: {acknowledged_per_run:?}");
}

/// libtest prints `test <name> ... ` without a newline before the child's first line, so the
/// marker is looked for anywhere in the line.
fn parse_ack(line: &str) -> Option<u64> {
    let start = line.rfind("ack ")? + "ack ".len();
    line[start..].trim().parse().ok()
}
