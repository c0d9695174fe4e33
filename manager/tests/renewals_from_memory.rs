//! The shell of renewals answered from memory (`manager/src/renewals/from_memory.rs`, PROTOCOL
//! P6.5 to P6.8), three managers in this process: the pure core (`renewals/memory.rs`,
//! `renewals/confirmation.rs`) is the simulator's; what is pinned here is the wiring around it.
//!
//! - P6.5, P6.6: once the leader has reserved an executor's lease, its renewals are answered from
//!   memory after a confirmation round (`leasehold_renewals_from_memory_total` and the confirmed
//!   rounds count them), and the reservations task writes the reservation they need;
//! - P6.7: the leader's step judges leases by what it told from memory, so an executor renewed
//!   only from memory for several leases is never reaped, and the leader's view shows the lease
//!   it told (not the reservation, which runs further ahead);
//! - P6.5: a leader whose followers are gone answers no renewal: a confirmation round it cannot
//!   complete confirms nothing.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{await_leader, get, register, start_with_metrics, Layout};
use serde_json::{json, Value};

const MEMBERS: usize = 3;
const LEASE: Duration = Duration::from_secs(3);
const RENEW_EVERY: Duration = Duration::from_millis(300);
/// Long enough that a lease written at registration would have lapsed twice over.
const RENEWING_FOR: Duration = Duration::from_secs(9);
/// How long the cut-off leader is asked to renew: past its Raft lease (1 s at the default
/// election timeout), after which it names no leader at all (P8.4).
const CUT_OFF_FOR: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_5_p6_7_renewals_are_answered_from_memory_keep_the_lease_and_stop_with_the_quorum() {
    // One recorder for the process; only the leader answers from memory, so its counters are the
    // leader's.
    let metrics = leasehold_manager::handles::metrics::prometheus_builder()
        .unwrap()
        .install_recorder()
        .unwrap();
    let layout = Layout::new(MEMBERS);
    let bases = &layout.bases;
    let lease_flag = format!("--lease-duration={}ms", LEASE.as_millis());
    let mut members: Vec<_> = (1..=MEMBERS)
        .map(|id| {
            let config = layout.config(id, &[&lease_flag]);
            Some(start_with_metrics(config, Some(metrics.clone())))
        })
        .collect();
    let http = common::http_client(Duration::from_secs(5));
    let leader = await_leader(&http, bases).await;
    let executor_id = register(&http, &leader, 1).await;

    // P6.7: renewed for three leases, every answer a grant of the whole lease; a step that did
    // not see what memory told would reap the executor once its registration's lease ran out.
    let renewing_until = Instant::now() + RENEWING_FOR;
    let mut renewals = 0u64;
    let mut held = Held::default();
    while Instant::now() < renewing_until {
        let (status, body) = held.renew(&http, &leader, &executor_id).await;
        assert_eq!(
            status, 200,
            "P6.7: renewal {renewals} of an executor renewing every {RENEW_EVERY:?}: {body}"
        );
        assert_eq!(body["lease_ttl_ms"], json!(LEASE.as_millis()), "{body}");
        renewals += 1;
        tokio::time::sleep(RENEW_EVERY).await;
    }
    let counters = metrics.render();
    let from_memory = counter(&counters, "leasehold_renewals_from_memory_total");
    assert!(
        from_memory * 2 >= renewals,
        "P6.5: {from_memory} of {renewals} renewals answered from memory once reserved:\n{counters}"
    );
    assert!(
        counter(
            &counters,
            "leasehold_confirmation_rounds_total{result=\"confirmed\"}"
        ) >= 1,
        "{counters}"
    );
    // The leader's view shows the lease it told from memory, not the one the log last wrote.
    let view = get(&http, &format!("{leader}/v1/executors/{executor_id}"))
        .await
        .unwrap();
    let remaining_ms = view["lease_remaining_ms"].as_u64().unwrap();
    let renewed_within = u64::try_from((RENEW_EVERY * 4).as_millis()).unwrap();
    let lease_ms = u64::try_from(LEASE.as_millis()).unwrap();
    // Not the reservation either, which runs further ahead: that bound is a follower's view.
    assert!(
        remaining_ms + renewed_within >= lease_ms && remaining_ms <= lease_ms,
        "P6.7: the leader's view of a lease renewed {RENEW_EVERY:?} ago: {view}"
    );

    // P6.5: the followers stop; the leader can confirm no round, so no renewal is granted.
    let leader_index = bases.iter().position(|base| *base == leader).unwrap();
    for (index, member) in members.iter_mut().enumerate() {
        if index != leader_index {
            member.take().unwrap().stop().await;
        }
    }
    let answered_before = counter(&metrics.render(), "leasehold_renewals_from_memory_total");
    let cut_off_until = Instant::now() + CUT_OFF_FOR;
    let mut statuses = Vec::new();
    while Instant::now() < cut_off_until {
        let (status, body) = held.renew(&http, &leader, &executor_id).await;
        assert_ne!(
            status, 200,
            "P6.5: a leader without a quorum granted a renewal: {body} (after {statuses:?})"
        );
        statuses.push(status);
        tokio::time::sleep(RENEW_EVERY).await;
    }
    assert_eq!(
        counter(&metrics.render(), "leasehold_renewals_from_memory_total"),
        answered_before,
        "P6.5: a leader without a quorum answered from memory"
    );
    members[leader_index].take().unwrap().stop().await;
}

/// What the executor holds: the set and revision of its last grant, claimed by its next renewal
/// (a renewal claiming another set goes through the log, P4.2).
#[derive(Default)]
struct Held {
    shards: Vec<Value>,
    revision: u64,
}

impl Held {
    /// One renewal of `executor_id` at `base`: its status (0 when no answer came) and body; a
    /// grant becomes what is held.
    async fn renew(
        &mut self,
        http: &reqwest::Client,
        base: &str,
        executor_id: &str,
    ) -> (u16, Value) {
        let reply = http
            .post(format!("{base}/v1/executors/{executor_id}/renew"))
            .json(&json!({"claims": self.shards, "revision": self.revision}))
            .send()
            .await;
        let Ok(reply) = reply else {
            return (0, Value::Null);
        };
        let status = reply.status().as_u16();
        let body: Value = reply.json().await.unwrap_or(Value::Null);
        if status == 200 {
            self.shards = body["shards"].as_array().unwrap().clone();
            self.revision = body["revision"].as_u64().unwrap();
        }
        (status, body)
    }
}

/// The value of the counter `series` (its name and labels as rendered) in Prometheus text; 0 when
/// absent.
fn counter(rendered: &str, series: &str) -> u64 {
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |value| value.trim().parse::<f64>().unwrap() as u64)
}
