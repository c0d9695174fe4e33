//! The protocol metrics move as the protocol does: a scripted scenario against a real cluster and
//! real executors, with `/metrics` scraped between the steps (docs/OPERATIONS.md, "Metrics
//! reference").
//!
//! Counters are counted by the manager that led when the event happened, so they are summed over
//! the three managers: the totals are then exact whatever the leader was. The scenario, on 16
//! shards: A registers and gets all 16 (16 grants); B joins and takes 8 from A (8 handoffs, P5.2,
//! P5.4); B stops gracefully (it drains itself, P17.2: 8 handoffs back to A, then a
//! deregistration holding nothing, P3.7); C joins and takes 8 (8 handoffs); C is killed and
//! expires (one reap, P3.8; 8 grants back to A); A stops. The moves are counted by reason too
//! (§15): join, drain, expiry.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_tests::executor::{wait_for_even_split, AdmissionEdge, ExecutorProcess};
use leasehold_tests::http_checks::{self, summed};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};

const SHARDS: u32 = 16;
const HALF: f64 = (SHARDS / 2) as f64;
const LEADER_BOUND: Duration = Duration::from_secs(20);
/// Registration, planning, pushes, handoffs and expiry on a loaded machine.
const STEP_BOUND: Duration = Duration::from_secs(90);
const EXIT_BOUND: Duration = Duration::from_secs(20);

async fn scrape(http: &reqwest::Client, base: &str) -> BTreeMap<String, f64> {
    http_checks::scrape(http, base)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn scrape_managers(cluster: &Cluster, http: &reqwest::Client) -> Vec<BTreeMap<String, f64>> {
    let mut scrapes = Vec::new();
    for url in cluster.urls() {
        scrapes.push(scrape(http, &url).await);
    }
    scrapes
}

async fn wait_for_all(executor: &ExecutorProcess) {
    poll_until(
        &format!("executor {} to admit all {SHARDS} shards", executor.name),
        STEP_BOUND,
        || async {
            let held = executor.admitted_shards().await?.len();
            if held == SHARDS as usize {
                Ok(())
            } else {
                Err(format!("{held} admitted"))
            }
        },
    )
    .await;
}

/// Waits until the managers' summed `series` reaches `want` (counters may be bumped a moment
/// after the state they describe is visible), then checks it did not overshoot.
async fn expect_total(cluster: &Cluster, http: &reqwest::Client, series: &str, want: f64) {
    let got = poll_until(&format!("{series} to reach {want}"), STEP_BOUND, || async {
        let got = summed(&scrape_managers(cluster, http).await, series);
        if got >= want {
            Ok(got)
        } else {
            Err(format!("{series} = {got}"))
        }
    })
    .await;
    assert_eq!(got, want, "{series}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_metrics_count_the_scripted_scenario() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        lease: "6s".to_string(),
        ..ClusterOptions::default()
    });
    let first_leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client");

    // Every metric is exported from start-up, before its first event (docs/OPERATIONS.md,
    // "Metrics reference"): counters of things that have not happened read 0 on every manager.
    for metrics in scrape_managers(&cluster, &http).await {
        for series in [
            "leasehold_reaped_total",
            r#"leasehold_delivery_failures_total{kind="revoke"}"#,
            r#"leasehold_handoffs_completed_total{via="expiry"}"#,
            "leasehold_raft_dead_leader_elections_total",
        ] {
            assert_eq!(metrics.get(series), Some(&0.0), "{series}");
        }
    }

    // A registers and is granted every shard.
    let mut a = ExecutorProcess::start(&cluster, "a");
    wait_for_all(&a).await;
    let at_start = scrape(&http, &a.url()).await;
    for series in [
        "leasehold_executor_lapses_total",
        "leasehold_executor_disowned_pushes_total",
        r#"leasehold_executor_pushes_refused_total{reason="not_member"}"#,
    ] {
        assert_eq!(at_start.get(series), Some(&0.0), "{series}");
    }
    expect_total(&cluster, &http, "leasehold_registrations_total", 1.0).await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_total{kind="grant"}"#,
        SHARDS as f64,
    )
    .await;
    // By reason (PROTOCOL §15): never-owned shards placed for the first time count as a join.
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_by_reason_total{reason="join"}"#,
        SHARDS as f64,
    )
    .await;
    // State gauges describe the answering replica's applied state; the leader has applied it.
    let leader = scrape(&http, &cluster.url(first_leader)).await;
    assert_eq!(
        leader.get(r#"leasehold_executors{namespace="default"}"#),
        Some(&1.0)
    );
    assert_eq!(
        leader.get(r#"leasehold_shards{namespace="default",state="owned"}"#),
        Some(&(SHARDS as f64))
    );
    assert_eq!(
        leader.get(r#"leasehold_shards{namespace="default",state="unowned"}"#),
        Some(&0.0)
    );
    assert_eq!(
        leader.get(r#"leasehold_shards{namespace="default",state="releasing"}"#),
        Some(&0.0)
    );
    assert!(
        leader.get("leasehold_raft_is_leader") == Some(&1.0),
        "scraped the leader"
    );
    // The process metrics every Prometheus exporter has.
    for series in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "process_threads",
    ] {
        assert!(
            leader.get(series).is_some_and(|value| *value > 0.0),
            "{series} missing or zero: {:?}",
            leader.get(series)
        );
    }
    assert!(leader.contains_key("process_cpu_seconds_total"));
    let build_info = format!(
        r#"leasehold_build_info{{release="{}"}}"#,
        leasehold_api::RELEASE
    );
    assert_eq!(leader.get(&build_info), Some(&1.0), "{build_info}");
    let info = cluster
        .cluster_info(first_leader)
        .await
        .expect("cluster info");
    assert_eq!(info.release.as_deref(), Some(leasehold_api::RELEASE));

    // B joins: half the shards are handed over, each handoff completed once.
    let mut b = ExecutorProcess::start(&cluster, "b");
    wait_for_even_split(&[&a, &b], SHARDS, STEP_BOUND).await;
    expect_total(&cluster, &http, "leasehold_registrations_total", 2.0).await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_total{kind="handoff"}"#,
        HALF,
    )
    .await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_by_reason_total{reason="join"}"#,
        SHARDS as f64 + HALF,
    )
    .await;
    let scrapes = scrape_managers(&cluster, &http).await;
    let completed = summed(
        &scrapes,
        r#"leasehold_handoffs_completed_total{via="acknowledged"}"#,
    ) + summed(
        &scrapes,
        r#"leasehold_handoffs_completed_total{via="expiry"}"#,
    );
    assert_eq!(completed, HALF, "every handoff completed exactly once");
    let timed = summed(
        &scrapes,
        r#"leasehold_handoff_duration_seconds_count{via="acknowledged"}"#,
    ) + summed(
        &scrapes,
        r#"leasehold_handoff_duration_seconds_count{via="expiry"}"#,
    );
    assert!(
        timed <= completed,
        "durations recorded {timed}, completed {completed}"
    );
    if cluster.wait_for_leader(LEADER_BOUND).await == first_leader {
        assert_eq!(
            timed, completed,
            "one duration per handoff begun under this leader"
        );
    }
    let b_metrics = scrape(&http, &b.url()).await;
    assert!(
        b_metrics
            .get(r#"leasehold_executor_deliveries_total{kind="assignment",outcome="applied"}"#)
            .is_some_and(|n| *n >= 1.0),
        "B was pushed its set: {b_metrics:?}"
    );

    // B stops gracefully: it drains itself (P17.2), so its shards are handed back to A one
    // handoff each, and it deregisters holding nothing.
    b.signal_terminate();
    b.wait_exit(EXIT_BOUND).await;
    wait_for_all(&a).await;
    expect_total(&cluster, &http, "leasehold_deregistrations_total", 1.0).await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_total{kind="handoff"}"#,
        2.0 * HALF,
    )
    .await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_by_reason_total{reason="drain"}"#,
        HALF,
    )
    .await;
    let scrapes = scrape_managers(&cluster, &http).await;
    for (series, want) in [
        (
            r#"leasehold_shard_moves_total{kind="grant"}"#,
            SHARDS as f64,
        ),
        (
            r#"leasehold_shard_moves_by_reason_total{reason="deregister"}"#,
            0.0,
        ),
    ] {
        assert_eq!(summed(&scrapes, series), want, "{series}");
    }

    // C joins, takes half, and is killed: it expires and is reaped; its shards go back to A.
    let mut c = ExecutorProcess::start(&cluster, "c");
    wait_for_even_split(&[&a, &c], SHARDS, STEP_BOUND).await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_total{kind="handoff"}"#,
        3.0 * HALF,
    )
    .await;
    c.kill();
    wait_for_all(&a).await;
    expect_total(&cluster, &http, "leasehold_reaped_total", 1.0).await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_total{kind="grant"}"#,
        SHARDS as f64 + HALF,
    )
    .await;
    expect_total(
        &cluster,
        &http,
        r#"leasehold_shard_moves_by_reason_total{reason="expiry"}"#,
        HALF,
    )
    .await;
    expect_total(&cluster, &http, "leasehold_registrations_total", 3.0).await;

    // A's own metrics agree with its admission log, and its gauges with its status.
    let a_metrics = scrape(&http, &a.url()).await;
    let log = a.admission_log().expect("admission log");
    let starts = log
        .iter()
        .filter(|r| r.event == AdmissionEdge::Start)
        .count() as f64;
    let stops = log.len() as f64 - starts;
    assert_eq!(
        a_metrics.get(r#"leasehold_executor_admission_changes_total{change="start"}"#),
        Some(&starts)
    );
    assert_eq!(
        a_metrics.get(r#"leasehold_executor_admission_changes_total{change="stop"}"#),
        Some(&stops)
    );
    assert_eq!(
        a_metrics.get("leasehold_executor_shards_admitting"),
        Some(&(SHARDS as f64))
    );
    assert_eq!(
        a_metrics.get("leasehold_executor_shards_held"),
        Some(&(SHARDS as f64))
    );
    assert_eq!(a_metrics.get("leasehold_executor_fenced"), Some(&0.0));
    let remaining = a_metrics["leasehold_executor_lease_remaining_seconds"];
    assert!(
        remaining > 0.0 && remaining <= 6.0,
        "lease remaining {remaining}"
    );
    assert_eq!(
        a_metrics.get(r#"leasehold_executor_lease_calls_total{call="register",result="granted"}"#),
        Some(&1.0)
    );
    assert!(
        a_metrics[r#"leasehold_executor_lease_calls_total{call="renew",result="granted"}"#] >= 1.0
    );
    assert!(
        a_metrics[r#"leasehold_executor_deliveries_total{kind="revoke",outcome="applied"}"#] >= 1.0
    );

    // A stops: no renewal is in flight after its deregistration, so the renewal counts settle.
    a.signal_terminate();
    a.wait_exit(EXIT_BOUND).await;
    expect_total(&cluster, &http, "leasehold_deregistrations_total", 2.0).await;
    let scrapes = scrape_managers(&cluster, &http).await;
    let renewals: f64 = ["renewed", "unknown_executor", "refused", "failed"]
        .iter()
        .map(|result| {
            summed(
                &scrapes,
                &format!("leasehold_renewals_total{{result=\"{result}\"}}"),
            )
        })
        .sum();
    assert!(summed(&scrapes, r#"leasehold_renewals_total{result="renewed"}"#) >= 3.0);
    assert_eq!(
        summed(&scrapes, "leasehold_renewal_duration_seconds_count"),
        renewals,
        "one latency observation per renewal"
    );
    // P6.8: every renewal was answered from memory or went through exactly one batch.
    assert_eq!(
        summed(&scrapes, "leasehold_renewal_batch_size_sum")
            + summed(&scrapes, "leasehold_renewals_from_memory_total"),
        renewals,
        "every renewal answered once, from memory or by one batch"
    );
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let leader_metrics = scrape(&http, &cluster.url(leader)).await;
    assert_eq!(
        leader_metrics.get(r#"leasehold_executors{namespace="default"}"#),
        Some(&0.0)
    );
    assert_eq!(
        leader_metrics.get(r#"leasehold_shards{namespace="default",state="unowned"}"#),
        Some(&(SHARDS as f64))
    );
    assert!(leader_metrics["leasehold_raft_term"] >= 1.0);
}
