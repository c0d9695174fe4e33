//! Schemathesis (property-based API fuzzing from the OpenAPI documents) against a live
//! three-manager cluster and a live executor (I6, PROTOCOL §9, §12).
//!
//! Five runs, each driven by the document the server itself serves at `/v1/openapi.json`:
//!
//! 1. Manager, negative mode (every request violates the schema somewhere): no 5xx, every answer
//!    conforms to the document (status, content type, body schema), every schema-violating
//!    request is refused with a 4xx, and the lease state is unchanged afterwards (executors and
//!    shards, without the fields that move with time and renewals).
//! 2. Executor, negative mode: the same checks; the executor's id, held set and admission log are
//!    unchanged afterwards.
//! 3. Executor, positive and negative: no 5xx and no schema-violating answer. It holds every
//!    shard, so `GET /v1/work` admits every key. Its deliveries run positively after the rest:
//!    in plaintext anyone may push (P13.5), and a valid push addressed to the id schemathesis
//!    learns from `GET /v1/health` replaces the set, after which `GET /v1/work` rightly answers
//!    `503 sharding_not_ready` for a shard no longer held.
//! 4. Manager, positive and negative: the same. Valid requests may change the state here (a
//!    register creates an executor that then takes shards, a deregister of a guessed id may
//!    remove the live one, which then registers anew), so the state is not compared, and it runs
//!    last.
//!
//! Excluded everywhere: `/v1/cluster/nodes` (adding a learner at a fuzzed address, or removing a
//! real member, changes the Raft group itself; those endpoints are covered by cluster and the
//! rejection cases of bad_input) and `/v1/watch` (a valid blocking query holds its request for up
//! to 300 s by design, longer than a fuzzing request may take; its bounds are unit-tested in
//! `manager/src/http/watch.rs` and it is exercised by ctl).
//!
//! Schemathesis comes from PyPI (`.ci/run` installs the pinned version in a venv and points
//! `LEASEHOLD_SCHEMATHESIS` at it). Without it this test says why and passes, unless
//! `LEASEHOLD_REQUIRE_SCHEMATHESIS=1` (set by `.ci/run`) makes a missing tool a failure.
//! `LEASEHOLD_SCHEMATHESIS_EXAMPLES` (default 25 per operation) and `LEASEHOLD_SCHEMATHESIS_SEED`
//! (default fixed, for reproducible CI runs) tune the run.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_tests::executor::ExecutorProcess;
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};
use serde_json::Value;

const SHARDS: u32 = 16;
const LEADER_BOUND: Duration = Duration::from_secs(20);
const SETTLE_BOUND: Duration = Duration::from_secs(60);
/// Bound on one schemathesis run.
const RUN_BOUND: Duration = Duration::from_secs(600);
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_schema_conformance,negative_data_rejection";
const DEFAULT_SEED: &str = "20261130";
const DEFAULT_EXAMPLES: &str = "25";

/// The schemathesis command line tool, if installed.
fn schemathesis() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LEASEHOLD_SCHEMATHESIS") {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("schemathesis"))
            .find(|candidate| candidate.is_file())
    })
}

/// Which operations of the document a run covers.
#[derive(Debug, Clone, Copy)]
enum Paths {
    All,
    Excluding(&'static str),
    Only(&'static str),
}

/// What one run reported.
#[derive(Debug)]
struct RunSummary {
    label: &'static str,
    mode: String,
    /// Schemathesis's own "Test cases:" line, e.g. `602 generated, 602 passed`.
    cases: String,
}

/// Operations of the manager's document left out of every run (see the module comment).
const MANAGER_EXCLUDED_PATHS: &str = "^/v1/(cluster/nodes|watch)";
/// The executor's deliveries: a valid one changes its set (in plaintext any caller may send one,
/// P13.5, and schemathesis learns the executor's id from its answers), so their positive run
/// comes after the one that expects `GET /v1/work` to admit every key.
const EXECUTOR_DELIVERY_PATHS: &str = "^/v1/(assignment|revoke)$";

/// Runs schemathesis in `workdir` (it keeps a cache of found failures in the working directory,
/// which belongs in the test's temporary directory, not in the repository).
async fn run(
    tool: &PathBuf,
    workdir: &Path,
    label: &'static str,
    base: &str,
    mode: &str,
    paths: Paths,
) -> RunSummary {
    let seed = std::env::var("LEASEHOLD_SCHEMATHESIS_SEED").unwrap_or_else(|_| DEFAULT_SEED.into());
    let examples = std::env::var("LEASEHOLD_SCHEMATHESIS_EXAMPLES")
        .unwrap_or_else(|_| DEFAULT_EXAMPLES.into());
    let mut command = tokio::process::Command::new(tool);
    command
        .args(["run", &format!("{base}/v1/openapi.json"), "--url", base])
        .args(["--mode", mode, "--max-examples", &examples, "--seed", &seed])
        .args(["--phases", "examples,coverage,fuzzing", "--checks", CHECKS])
        .args(["--workers", "1", "--request-timeout", "30", "--no-color"])
        .env("NO_COLOR", "1")
        .current_dir(workdir)
        .kill_on_drop(true);
    match paths {
        Paths::All => {}
        Paths::Excluding(regex) => {
            command.args(["--exclude-path-regex", regex]);
        }
        Paths::Only(regex) => {
            command.args(["--include-path-regex", regex]);
        }
    }
    let output = tokio::time::timeout(RUN_BOUND, command.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis {label} did not finish within {RUN_BOUND:?}"))
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let cases = stdout
        .lines()
        .skip_while(|line| !line.starts_with("Test cases:"))
        .nth(1)
        .map(|line| line.trim().to_string())
        .unwrap_or_else(|| "no summary".to_string());
    assert!(
        output.status.success(),
        "schemathesis {label} ({mode}) against {base} found problems ({cases}):\n{stdout}\n{stderr}"
    );
    eprintln!("schemathesis {label} ({mode}): {cases}");
    RunSummary {
        label,
        mode: mode.to_string(),
        cases,
    }
}

/// The manager's state without what moves with time and renewals.
async fn manager_fingerprint(http: &reqwest::Client, base: &str) -> Value {
    let state: Value = http
        .get(format!("{base}/v1/state?consistent=true"))
        .send()
        .await
        .expect("GET /v1/state")
        .json()
        .await
        .expect("state JSON");
    let executors: Vec<Value> = state["executors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            serde_json::json!([
                e["executor_id"],
                e["incarnation"],
                e["address"],
                e["registered_revision"],
                e["shards"]
            ])
        })
        .collect();
    let shards: Vec<Value> = state["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            serde_json::json!([
                s["shard"],
                s["owner"],
                s["epoch"],
                s.get("handoff").map(|h| h["to"].clone())
            ])
        })
        .collect();
    serde_json::json!({"shard_count": state["shard_count"], "executors": executors, "shards": shards})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_errors_schema_violations_or_applied_rejections() {
    let Some(tool) = schemathesis() else {
        let required = std::env::var("LEASEHOLD_REQUIRE_SCHEMATHESIS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "LEASEHOLD_REQUIRE_SCHEMATHESIS=1 but schemathesis is not installed"
        );
        eprintln!(
            "skipping the schemathesis run: schemathesis is not installed (pip install \
             schemathesis==4.32.5, or set LEASEHOLD_SCHEMATHESIS to its path; .ci/run does)"
        );
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        // A lease with slack for a loaded machine: the state comparisons must see the one
        // executor keep its registration through the runs, not lapse and register anew.
        lease: "20s".to_string(),
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = *cluster.managers.keys().find(|id| **id != leader).unwrap();
    let manager = cluster.url(follower);
    let executor = ExecutorProcess::start(&cluster, "fuzzed");
    let settled = poll_until(
        "the executor to admit every shard",
        SETTLE_BOUND,
        || async {
            let status = executor.status().await?;
            if status["admission"] == "admitting"
                && status["shards"].as_array().map_or(0, Vec::len) == SHARDS as usize
            {
                Ok(status)
            } else {
                Err(format!("{status}"))
            }
        },
    )
    .await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("http client");

    let mut summaries = Vec::new();
    let before = manager_fingerprint(&http, &cluster.url(leader)).await;
    let manager_paths = Paths::Excluding(MANAGER_EXCLUDED_PATHS);
    summaries.push(
        run(
            &tool,
            cluster.dir.path(),
            "manager",
            &manager,
            "negative",
            manager_paths,
        )
        .await,
    );
    assert_eq!(
        manager_fingerprint(&http, &cluster.url(leader)).await,
        before,
        "a schema-violating request changed the manager's state"
    );

    let log_before = executor.admission_log().expect("admission log").len();
    summaries.push(
        run(
            &tool,
            cluster.dir.path(),
            "executor",
            &executor.url(),
            "negative",
            Paths::All,
        )
        .await,
    );
    let after = executor.status().await.expect("executor status");
    assert_eq!(after["executor_id"], settled["executor_id"]);
    assert_eq!(
        after["shards"], settled["shards"],
        "a schema-violating push changed the held set"
    );
    assert_eq!(
        executor.admission_log().expect("admission log").len(),
        log_before,
        "a schema-violating request started or stopped admission"
    );

    // The executor before the manager: the manager's positive run registers executors that take
    // shards from the live one, after which `GET /v1/work` rightly answers `503
    // sharding_not_ready` for keys whose shard is between owners.
    summaries.push(
        run(
            &tool,
            cluster.dir.path(),
            "executor",
            &executor.url(),
            "all",
            Paths::Excluding(EXECUTOR_DELIVERY_PATHS),
        )
        .await,
    );
    summaries.push(
        run(
            &tool,
            cluster.dir.path(),
            "executor deliveries",
            &executor.url(),
            "all",
            Paths::Only(EXECUTOR_DELIVERY_PATHS),
        )
        .await,
    );
    summaries.push(
        run(
            &tool,
            cluster.dir.path(),
            "manager",
            &manager,
            "all",
            manager_paths,
        )
        .await,
    );
    for summary in &summaries {
        eprintln!(
            "schemathesis summary: {} ({}): {}",
            summary.label, summary.mode, summary.cases
        );
    }
}
