//! The sidecar's long poll over real processes (PROTOCOL P16.1, issue 56 §2): "a service that
//! polls again at once never lets a live copy lapse", at the fault suite's 3 s lease.
//!
//! Three managers with the fault suite's timing, one `leasehold-executor --local-listen` sidecar
//! holding all 48 shards, and a service played by the test itself: it long-polls
//! `/v1/local/permits` continuously (one poll outstanding, the next sent at once after each
//! answer, acknowledging it with its `applied`, `state` and `token`, `wait=60s`), and anchors each
//! answer's copy, `lease_ttl_ms`, at the instant it *sent* the poll, as P16.1 tells a service to.
//! The sidecar renews every second, which changes no answer, so each poll is held until half the
//! time left on the copy the service holds.
//!
//! For each answer, its margin is the end of the copy the service held when it arrived (the
//! previous answer's) less its arrival, on the test's monotonic clock. Every margin must be
//! positive: an answer that came after the copy ended left the service a gap in which it may
//! admit nothing (it fences itself). Counted from the sidecar's answer instead of the poll's
//! arrival (before 04f51af), 9 answers in 21 came 130–255 ms after the copy ended, and a service
//! fenced itself about 16 times in 50 s.
//!
//! Needs the binaries (`cargo build --workspace --bins`).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use leasehold_tests::executor::ExecutorSpec;
use leasehold_tests::faults::{
    fault_executor_args, report_figure, start_fault_cluster, Fleet, FAULT_LEASE, FAULT_SHARDS,
    SETTLE_BOUND,
};
use leasehold_tests::{free_port, one_cluster_at_a_time};
use serde_json::Value;

/// How long the service's polls are judged, once the sidecar holds every shard.
const POLL_FOR: Duration = Duration::from_secs(24);

/// The bound on one poll: the sidecar answers within half the copy (at most 1.5 s here).
const POLL_TIMEOUT: Duration = Duration::from_secs(10);

const SCENARIO: &str = "sidecar long poll";

/// One answer the service received.
#[derive(Debug, Clone)]
struct Received {
    /// When the service sent the poll: where it anchors the answer's copy.
    sent: Instant,
    /// When the answer arrived.
    arrived: Instant,
    answer: Value,
}

impl Received {
    /// The end of the copy this answer gave the service: its send plus `lease_ttl_ms` (none
    /// unless `admitting`).
    fn copy_end(&self) -> Option<Instant> {
        let ttl_ms = self.answer["lease_ttl_ms"].as_u64().unwrap_or(0);
        (self.answer["state"] == "admitting" && ttl_ms > 0)
            .then(|| self.sent + Duration::from_millis(ttl_ms))
    }

    fn shards(&self) -> usize {
        self.answer["shards"].as_array().map_or(0, Vec::len)
    }
}

/// The service: polls the local API at `local` continuously, each poll acknowledging the
/// previous answer.
struct Service {
    http: reqwest::Client,
    local: String,
    last: Option<Received>,
}

impl Service {
    fn new(local: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(POLL_TIMEOUT)
                .build()
                .unwrap(),
            local: format!("http://{local}"),
            last: None,
        }
    }

    /// Sends the next poll at once and returns its answer; a refused connection (the sidecar
    /// not listening yet) is `None` only before the first answer.
    async fn poll(&mut self) -> Option<Received> {
        let url = match &self.last {
            None => format!("{}/v1/local/permits", self.local),
            Some(last) => format!(
                "{}/v1/local/permits?applied={}&state={}&token={}&wait=60s",
                self.local,
                last.answer["revision"],
                last.answer["state"].as_str().unwrap(),
                last.answer["token"].as_str().unwrap(),
            ),
        };
        let sent = Instant::now();
        let reply = match self.http.get(&url).send().await {
            Ok(reply) => reply,
            Err(error) if self.last.is_none() && error.is_connect() => return None,
            Err(error) => panic!("poll {url}: {error}"),
        };
        let status = reply.status();
        let answer: Value = reply.json().await.unwrap();
        let arrived = Instant::now();
        assert!(status.is_success(), "poll {url}: {status} {answer}");
        let received = Received {
            sent,
            arrived,
            answer,
        };
        self.last = Some(received.clone());
        Some(received)
    }
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap()
}

/// `later - earlier` in signed milliseconds.
fn signed_ms(later: Instant, earlier: Instant) -> i64 {
    ms(later.saturating_duration_since(earlier)) - ms(earlier.saturating_duration_since(later))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p16_1_a_service_polling_at_once_never_lets_a_live_copy_lapse_at_a_3s_lease() {
    let _one = one_cluster_at_a_time().await;
    let began = Instant::now();
    let cluster = start_fault_cluster().await;
    assert_eq!(FAULT_LEASE, Duration::from_secs(3));
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let local = format!("127.0.0.1:{}", free_port());
    let mut spec = ExecutorSpec::local(&cluster, "sidecar");
    spec.extra_args = fault_executor_args();
    spec.extra_args
        .extend(["--local-listen".to_owned(), local.clone()]);
    let sidecar = fleet.start(spec);

    // The service polls from the start; its answers are judged once the sidecar holds every
    // shard and the service has been told so (registration and placement are not the promise).
    let mut service = Service::new(&local);
    let registering_until = Instant::now() + SETTLE_BOUND;
    let first = loop {
        assert!(
            Instant::now() < registering_until,
            "the service was not told all {FAULT_SHARDS} shards within {SETTLE_BOUND:?}"
        );
        match service.poll().await {
            Some(received)
                if received.answer["state"] == "admitting"
                    && received.shards() == FAULT_SHARDS as usize =>
            {
                break received
            }
            Some(_) => {}
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };

    // Each answer against the copy the service held when it arrived.
    let mut previous = first;
    let mut margins_ms = Vec::new();
    let mut holds_ms = Vec::new();
    let mut late = Vec::new();
    let judged_from = Instant::now();
    while judged_from.elapsed() < POLL_FOR {
        let received = service.poll().await.unwrap();
        let copy_end = previous.copy_end().unwrap_or_else(|| {
            panic!(
                "the answer before this one gave the service no copy: {}",
                previous.answer
            )
        });
        let margin = signed_ms(copy_end, received.arrived);
        if margin <= 0 {
            late.push(format!(
                "answer {} (revision {}, {} ms held) came {} ms after the copy ended",
                margins_ms.len() + 1,
                received.answer["revision"],
                ms(received.arrived - received.sent),
                -margin
            ));
        }
        margins_ms.push(margin);
        holds_ms.push(ms(received.arrived - received.sent));
        assert_eq!(
            received.answer["state"], "admitting",
            "the sidecar stopped admitting in a healthy cluster: {}",
            received.answer
        );
        previous = received;
    }
    assert!(fleet.executors[sidecar].is_running(), "the sidecar exited");

    let count = margins_ms.len();
    let mut sorted = margins_ms.clone();
    sorted.sort_unstable();
    let least = sorted[0];
    let median = sorted[count / 2];
    let mut holds = holds_ms.clone();
    holds.sort_unstable();
    eprintln!(
        "[{SCENARIO}] {count} answers in {:?}: margin before the service's copy ended: least \
         {least} ms, median {median} ms, greatest {} ms; {} after it ended; poll held: least {} \
         ms, median {} ms, greatest {} ms; whole test {:?}",
        POLL_FOR,
        sorted[count - 1],
        late.len(),
        holds[0],
        holds[count / 2],
        holds[count - 1],
        began.elapsed(),
    );
    eprintln!("[{SCENARIO}] margins in ms, in order: {margins_ms:?}");
    report_figure(
        SCENARIO,
        "least margin of an answer before the service's copy ended",
        Duration::from_millis(u64::try_from(least.max(0)).unwrap()),
    );
    // Held, not answered at once: the polls are the long polls the promise is about (about
    // one answer every 1.5 s).
    assert!(
        count >= 10 && holds[count / 2] >= 300,
        "{count} answers in {POLL_FOR:?}, held {holds:?} ms: the polls were not long polls"
    );
    assert!(
        late.is_empty(),
        "P16.1: {} of {count} answers came after the service's copy had ended (a service \
         polling at once lets no live copy lapse):\n{}\nmargins in ms: {margins_ms:?}",
        late.len(),
        late.join("\n")
    );
}
