//! P8.3 without root: a leader whose fsync fails (the storage's fault-injection seam) stops
//! naming itself leader, answers `/livez` 503, and `server::run` ends with the cause, within the
//! stated bound; below `--min-free-disk` registrations are refused with 507 while the replica
//! stays ready. (`tests/tests/disk_full.rs` fills real disks, as root.)

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::free_port;
use leasehold_manager::handles::fatal::{DRAIN_AFTER_FATAL, LINGER_AFTER_FATAL};
use leasehold_manager::server::config::ManagerConfig;
use leasehold_manager::server::{self, ServerError};
use leasehold_raft_store::FlushFaults;
use serde_json::{json, Value};

/// The flush that fails: late enough that the node has formed its cluster and leads (about a
/// dozen flushes), early enough that a few registrations reach it.
const FAILING_FLUSH: u64 = 40;

fn single_node_config(data_dir: &std::path::Path, port: u16, min_free_disk: &str) -> ManagerConfig {
    let min_free_disk = format!("--min-free-disk={min_free_disk}");
    common::member_config(
        data_dir,
        1,
        &[port],
        &["--lease-duration=3s", &min_free_disk],
    )
}

fn http_client() -> reqwest::Client {
    common::http_client(Duration::from_secs(2))
}

async fn await_leading<T>(
    http: &reqwest::Client,
    base: &str,
    running: &tokio::task::JoinHandle<T>,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(!running.is_finished(), "the manager ended before it led");
        let cluster: Option<Value> = match http.get(format!("{base}/v1/cluster")).send().await {
            Ok(reply) => reply.json().await.ok(),
            Err(_) => None,
        };
        if cluster.is_some_and(|c| c["leader_id"] == json!(1)) {
            return;
        }
        assert!(Instant::now() < deadline, "no leader within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p8_3_a_leader_whose_fsync_fails_stops_leading_answers_livez_503_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut config = single_node_config(dir.path(), port, "0");
    config.log_store.flush_faults = FlushFaults {
        fail_nth_flush: Some(FAILING_FLUSH),
    };
    let mut running = tokio::spawn(server::run(config, None, std::future::pending()));
    let base = format!("http://127.0.0.1:{port}");
    let http = http_client();
    // It forms its cluster and leads before the failing flush.
    await_leading(&http, &base, &running).await;

    // Writes until a flush fails; meanwhile watch what the node says of itself.
    let writer = {
        let http = http.clone();
        let base = base.clone();
        tokio::spawn(async move {
            for n in 0..10_000u32 {
                let _ = http
                    .post(format!("{base}/v1/executors"))
                    .json(&json!({
                        "incarnation": format!("incarnation-{n}"),
                        "address": "http://127.0.0.1:9",
                    }))
                    .send()
                    .await;
            }
        })
    };
    let mut livez_failed_at = None;
    let mut leader_named_while_failed = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    let outcome = loop {
        assert!(
            Instant::now() < deadline,
            "the manager did not end within 60 s of the writes starting"
        );
        tokio::select! {
            outcome = &mut running => break outcome.unwrap(),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        let Ok(livez) = http.get(format!("{base}/livez")).send().await else {
            continue;
        };
        if livez.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
            let body: Value = livez.json().await.unwrap();
            assert!(
                body["status"]
                    .as_str()
                    .is_some_and(|s| s.contains("injected fsync failure")),
                "{body}"
            );
            livez_failed_at.get_or_insert_with(Instant::now);
            if let Ok(reply) = http.get(format!("{base}/v1/cluster")).send().await {
                let cluster: Value = reply.json().await.unwrap();
                leader_named_while_failed |= !cluster["leader_id"].is_null();
            }
        } else {
            assert!(livez_failed_at.is_none(), "/livez recovered after failing");
        }
    };
    writer.abort();
    let ended_at = Instant::now();

    match outcome {
        Err(ServerError::StorageFailed { cause }) => {
            assert!(cause.contains("injected fsync failure"), "{cause}")
        }
        other => panic!("expected the Raft core to stop, got {other:?}"),
    }
    let livez_failed_at = livez_failed_at.expect("/livez answered 503 before the end");
    assert!(
        !leader_named_while_failed,
        "the node named a leader after its core stopped"
    );
    let bound = LINGER_AFTER_FATAL + DRAIN_AFTER_FATAL + Duration::from_millis(500);
    assert!(
        ended_at - livez_failed_at <= bound,
        "ended {:?} after /livez failed, bound {bound:?}",
        ended_at - livez_failed_at
    );
}

/// P8.3: below `--min-free-disk` a registration is refused with 507 and writes nothing, and the
/// replica stays ready, saying why in `/readyz?verbose`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p8_3_below_the_free_space_floor_registrations_are_refused_with_507() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // No disk has this much free, so the first measurement raises the alarm.
    let config = single_node_config(dir.path(), port, "1000000TiB");
    let running = tokio::spawn(server::run(config, None, std::future::pending()));
    let base = format!("http://127.0.0.1:{port}");
    let http = http_client();
    await_leading(&http, &base, &running).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    let readiness = loop {
        let reply = http
            .get(format!("{base}/readyz?verbose"))
            .send()
            .await
            .unwrap();
        let status = reply.status();
        let readiness: Value = reply.json().await.unwrap();
        let disk = readiness["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|check| check["name"] == "disk_space")
            .cloned()
            .expect("a disk_space check");
        if disk["ok"] == json!(false) && status.is_success() {
            break readiness;
        }
        assert!(
            Instant::now() < deadline,
            "no alarm within 30 s: {readiness}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(readiness["ready"], json!(true), "{readiness}");

    let refused = http
        .post(format!("{base}/v1/executors"))
        .json(&json!({"incarnation": "i-1", "address": "http://127.0.0.1:9"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 507);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["code"], "insufficient_storage", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("--min-free-disk"),
        "{problem}"
    );
    let executors: Value = http
        .get(format!("{base}/v1/executors"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(executors, json!([]), "{executors}");
    running.abort();
}
