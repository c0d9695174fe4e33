//! A web page against a sidecar's local API (issue 55, finding 3; PROTOCOL P16.1, I1), over the
//! binaries: the Python example (examples/python/kv.py) beside a `leasehold-executor
//! --local-listen` sidecar, slow to acknowledge (2 s), against three managers with the fault
//! suite's timing, while its shards move to a second executor (one joins, then the sidecar is
//! drained).
//!
//! Meanwhile a page's requests go to the local API as a browser sends them: image-style GETs of
//! the permits poll (`Sec-Fetch-Site: cross-site`, no `Origin`) naming every revision from the
//! current one to 300 past it, the same with a foreign `Origin`, admits of the shards the service
//! holds, and the graceful stop. Each is refused `403`, the moves complete, and the sidecar keeps
//! running. The service's own view (`GET /permits` on the service, with its copy's end on
//! CLOCK_MONOTONIC) is sampled throughout: the new owner starts no shard before the last instant
//! the service was seen admitting it (I1 through the service, which the sidecar's own admission
//! log cannot show if an acknowledgement it counted was not the service's), and I1 holds over
//! the admission logs.
//!
//! Needs the binaries (`cargo build --workspace --bins`) and `python3`; without `python3` it
//! says so and skips, unless `LEASEHOLD_REQUIRE_PYTHON=1` (set by `.ci/run`).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_tests::checker::monotonic_now_ns;
use leasehold_tests::executor::{wait_for_even_split, AdmissionEdge, ExecutorSpec};
use leasehold_tests::faults::{
    fault_cluster_options, fault_executor_args, report_figure, use_fault_timing, wait_registered,
    Fleet, FAULT_SHARDS, SETTLE_BOUND,
};
use leasehold_tests::python::{python_or_skip, PythonService};
use leasehold_tests::{free_port, one_cluster_at_a_time, Cluster, ClusterOptions};
use serde_json::Value;

/// How long the service waits before it applies (and acknowledges) a new answer: long enough
/// that an acknowledgement counted for it early would let the new owner start well before it
/// stopped.
const ACK_DELAY: &str = "2s";

const LEADER_BOUND: Duration = Duration::from_secs(60);

/// What the page's requests got, by status.
type Statuses = Arc<Mutex<BTreeMap<u16, usize>>>;

/// One request of the page: its method, URL and headers.
type Request<'a> = (reqwest::Method, String, &'a [(&'a str, &'a str)]);

/// What one of the page's loops sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The permits poll, and acknowledgements of every revision from the current one to 300
    /// past it.
    Acknowledge,
    /// Admits of every shard the service holds, and the graceful stop.
    Admit,
}

/// The page: the review's requests of `part`, in a loop until `stop`, against the local API at
/// `local`.
async fn page(
    part: Part,
    local: String,
    service: String,
    stop: Arc<AtomicBool>,
    statuses: Statuses,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let image = [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-dest", "image"),
    ];
    let fetch = [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let same_site = [
        ("origin", "http://localhost:8080"),
        ("sec-fetch-site", "same-site"),
    ];
    while !stop.load(Ordering::Relaxed) {
        // The revision the page found by timing; here read off the service's own view.
        let view: Value = match http.get(format!("{service}/permits")).send().await {
            Ok(reply) => reply.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let current = view["revision"].as_u64().unwrap_or(0);
        let held: Vec<u64> = view["shards"]
            .as_array()
            .map(|shards| shards.iter().filter_map(|s| s["shard"].as_u64()).collect())
            .unwrap_or_default();
        let mut requests: Vec<Request<'_>> = Vec::new();
        for headers in [&image[..], &fetch[..], &same_site[..]] {
            if part == Part::Admit {
                for shard in &held {
                    for _ in 0..5 {
                        requests.push((
                            reqwest::Method::GET,
                            format!("{local}/v1/local/admit?shard={shard}"),
                            headers,
                        ));
                    }
                }
                // A page's POST always carries its Origin.
                if headers.iter().any(|(name, _)| *name == "origin") {
                    requests.push((
                        reqwest::Method::POST,
                        format!("{local}/v1/local/stop"),
                        headers,
                    ));
                }
                continue;
            }
            requests.push((
                reqwest::Method::GET,
                format!("{local}/v1/local/permits"),
                headers,
            ));
            for applied in current..=current + 300 {
                requests.push((
                    reqwest::Method::GET,
                    format!("{local}/v1/local/permits?applied={applied}&state=admitting"),
                    headers,
                ));
            }
        }
        for (method, url, headers) in requests {
            let mut request = http.request(method, &url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let status = match request.send().await {
                Ok(reply) => reply.status().as_u16(),
                Err(_) => 0,
            };
            *statuses.lock().unwrap().entry(status).or_default() += 1;
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }
}

/// One sample of the service's own view: sent at `sent_ns` on CLOCK_MONOTONIC, the shards it
/// admitted then (its copy live and `admitting`).
#[derive(Debug, Clone)]
struct Seen {
    sent_ns: u64,
    shards: Vec<u32>,
}

/// Samples the service's view every 20 ms until `stop`.
async fn watch_service(service: String, stop: Arc<AtomicBool>, seen: Arc<Mutex<Vec<Seen>>>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    while !stop.load(Ordering::Relaxed) {
        let sent_ns = monotonic_now_ns();
        if let Ok(reply) = http.get(format!("{service}/permits")).send().await {
            if let Ok(view) = reply.json::<Value>().await {
                let live = view["state"] == "admitting"
                    && view["expires_monotonic_ns"]
                        .as_u64()
                        .is_some_and(|end| end > sent_ns);
                let shards = view["shards"]
                    .as_array()
                    .filter(|_| live)
                    .map(|shards| {
                        shards
                            .iter()
                            .filter_map(|s| s["shard"].as_u64())
                            .map(|s| u32::try_from(s).unwrap())
                            .collect()
                    })
                    .unwrap_or_default();
                seen.lock().unwrap().push(Seen { sent_ns, shards });
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p16_1_a_pages_requests_neither_acknowledge_nor_stall_a_sidecars_handoffs() {
    let test = "p16_1_a_pages_requests_neither_acknowledge_nor_stall_a_sidecars_handoffs";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let _one = one_cluster_at_a_time().await;
    // Under mutual TLS, as a production cluster runs: the page's way in is the sidecar's
    // plaintext loopback API, which no certificate guards.
    let mut cluster = Cluster::new(ClusterOptions {
        make_certificates: true,
        ..fault_cluster_options()
    });
    use_fault_timing(&mut cluster);
    cluster.start_all();
    cluster.wait_for_leader(LEADER_BOUND).await;
    assert!(cluster.url(1).starts_with("https://"));
    let client = cluster.client();
    let store = cluster.dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());

    let local = format!("127.0.0.1:{}", free_port());
    let mut spec = ExecutorSpec::local(&cluster, "a-sidecar");
    spec.extra_args = fault_executor_args();
    spec.extra_args
        .extend(["--local-listen".to_owned(), local.clone()]);
    let a = fleet.start(spec);
    let service = PythonService::start(
        &python,
        cluster.dir.path(),
        "a",
        &format!("http://{local}"),
        &store,
        &["--test-ack-delay", ACK_DELAY],
    );
    let a_id = wait_registered(fleet.get(a)).await;
    wait_for_even_split(&fleet.refs(&[a]), FAULT_SHARDS, SETTLE_BOUND).await;

    let stop = Arc::new(AtomicBool::new(false));
    let statuses: Statuses = Arc::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watching = tokio::spawn(watch_service(
        service.url(),
        Arc::clone(&stop),
        Arc::clone(&seen),
    ));
    let attacking: Vec<_> = [Part::Acknowledge, Part::Admit]
        .into_iter()
        .map(|part| {
            tokio::spawn(page(
                part,
                format!("http://{local}"),
                service.url(),
                Arc::clone(&stop),
                Arc::clone(&statuses),
            ))
        })
        .collect();
    // The page starts before the moves do.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A second executor joins: half the shards move off the sidecar; then it is drained.
    let started = Instant::now();
    let mut b_spec = ExecutorSpec::local(&cluster, "b");
    b_spec.extra_args = fault_executor_args();
    let b = fleet.start(b_spec);
    wait_for_even_split(&fleet.refs(&[a, b]), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        "page against a sidecar",
        "half the shards moved off a service slow to acknowledge (2 s)",
        started.elapsed(),
    );
    let started = Instant::now();
    client.drain(&a_id).await.unwrap();
    wait_for_even_split(&fleet.refs(&[b]), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        "page against a sidecar",
        "the rest moved off it by a drain",
        started.elapsed(),
    );
    // Until the service applied the drain's answer, it may still be seen admitting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for part in attacking {
        part.await.unwrap();
    }
    watching.await.unwrap();

    // I1 through the service: the new owner starts no shard before the last instant the service
    // was seen admitting it.
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.len() > 100,
        "only {} samples of the service",
        seen.len()
    );
    let mut last_seen: BTreeMap<u32, u64> = BTreeMap::new();
    for sample in &seen {
        for &shard in &sample.shards {
            let last = last_seen.entry(shard).or_default();
            *last = (*last).max(sample.sent_ns);
        }
    }
    assert_eq!(
        last_seen.len(),
        FAULT_SHARDS as usize,
        "the service was seen admitting every shard"
    );
    let started_at: Vec<(u32, u64)> = fleet
        .get(b)
        .admission_log()
        .unwrap()
        .into_iter()
        .filter(|record| record.event == AdmissionEdge::Start)
        .map(|record| (record.shard, record.t_ns))
        .collect();
    assert_eq!(started_at.len(), FAULT_SHARDS as usize, "{started_at:?}");
    let mut closest = u64::MAX;
    for (shard, start_ns) in started_at {
        let last_ns = last_seen[&shard];
        assert!(
            start_ns > last_ns,
            "I1: the new owner started shard {shard} {} ms before the service was last seen \
             admitting it",
            (last_ns - start_ns) / 1_000_000
        );
        closest = closest.min(start_ns - last_ns);
    }
    report_figure(
        "page against a sidecar",
        "closest new owner's start after the service last admitted the shard",
        Duration::from_nanos(closest),
    );
    let report = fleet.check("page against a sidecar");
    assert!(report.handoffs > 0, "the scenario moved shards");

    let statuses = statuses.lock().unwrap().clone();
    let sent: usize = statuses.values().sum();
    eprintln!("[page] {sent} requests to the local API, by status: {statuses:?}");
    assert!(sent > 1_000, "the page sent only {sent} requests");
    assert_eq!(
        statuses.keys().copied().collect::<Vec<u16>>(),
        [403],
        "every request of the page is refused 403, before anything is read or recorded: \
         {statuses:?}"
    );
    assert!(
        fleet.executors[a].is_running(),
        "the page's POST /v1/local/stop stopped the sidecar"
    );
    drop(service);
}
