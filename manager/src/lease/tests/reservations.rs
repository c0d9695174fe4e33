//! Lease reservations and reaping by the leader's judgment (schema 12): a reservation tells
//! nothing but holds the lease for every rule that waits for its copies to end (P6.6), a leader's
//! judgment reaps despite it unless the log recorded a later grant (P6.7), and a new leader's
//! office floor counts only what was told (P6.4).

use super::super::{Command, LapsedLease, Move, Outcome, LEASE_RESERVATION_LEASES};
use super::{Harness, LEASE_MS};
use crate::lease::schema::LEASE_RESERVATION_SCHEMA;

const RESERVED_AT_MS: u64 = 10_000;
const RESERVED_UNTIL_MS: u64 = RESERVED_AT_MS + LEASE_RESERVATION_LEASES * LEASE_MS;

fn reserve(harness: &mut Harness, now_ms: u64, executor_ids: &[&str]) -> Outcome {
    harness.apply(Command::ReserveLeases {
        now_ms,
        executor_ids: executor_ids.iter().map(|id| (*id).to_owned()).collect(),
    })
}

fn reap_lapsed(harness: &mut Harness, now_ms: u64, executor_id: &str, judged_ms: u64) -> Outcome {
    harness.apply(Command::ReapLapsed {
        now_ms,
        leases: vec![LapsedLease {
            executor_id: executor_id.to_owned(),
            judged_expiry_ms: judged_ms,
        }],
    })
}

fn reaped(outcome: &Outcome) -> Vec<String> {
    match outcome {
        Outcome::Reaped { reaped, .. } => reaped.clone(),
        other => panic!("{other:?}"),
    }
}

/// P6.6: a reservation tells nothing (the told expiry, ttl and longest lease stay), never
/// shortens, skips ids that left, and holds the lease against a plain `Reap` until it ends.
#[test]
fn p6_6_a_reservation_tells_nothing_and_holds_the_lease_until_it_ends() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let x = harness.register(0, "x");
    let told_before = harness.state.executor(&x).cloned().expect("x");
    let longest_before = harness.state.longest_lease_told_ms();

    let outcome = reserve(&mut harness, RESERVED_AT_MS, &[&x, "ex-999"]);
    assert_eq!(
        outcome,
        Outcome::LeasesReserved {
            reserved_until_ms: RESERVED_UNTIL_MS,
            reserved: vec![x.clone()],
            skipped: vec!["ex-999".to_owned()],
        }
    );
    let after = harness.state.executor(&x).cloned().expect("x");
    assert_eq!(after.lease_reserved_until_ms, RESERVED_UNTIL_MS);
    assert_eq!(after.lease_expiry_ms, told_before.lease_expiry_ms);
    assert_eq!(after.lease_ttl_told_ms, told_before.lease_ttl_told_ms);
    assert_eq!(harness.state.longest_lease_told_ms(), longest_before);
    assert_eq!(after.lease_bound_ms(), RESERVED_UNTIL_MS);

    // An older reservation never shortens a later one.
    reserve(&mut harness, 1_000, &[&x]);
    assert_eq!(
        harness
            .state
            .executor(&x)
            .map(|e| e.lease_reserved_until_ms),
        Some(RESERVED_UNTIL_MS)
    );

    // Past the told expiry, the reservation still holds the lease.
    let told_expiry_ms = told_before.lease_expiry_ms;
    assert!(!harness
        .state
        .executor(&x)
        .expect("x")
        .lease_lapsed(told_expiry_ms + 1));
    let outcome = harness.apply(Command::Reap {
        now_ms: told_expiry_ms + 1,
        executor_ids: vec![x.clone()],
    });
    assert!(reaped(&outcome).is_empty(), "{outcome:?}");
    let outcome = harness.apply(Command::Reap {
        now_ms: RESERVED_UNTIL_MS + 1,
        executor_ids: vec![x.clone()],
    });
    assert_eq!(reaped(&outcome), vec![x]);
}

/// P6.6, P5.2: a shard marked releasing from an owner with a reservation is bound by the
/// reservation, since the leader may have told the owner copies from memory that end by then:
/// the handoff completes on expiry only once the reservation has ended.
#[test]
fn p6_6_a_handoff_from_a_reserved_owner_completes_on_expiry_only_after_the_reservation() {
    let mut harness = Harness::initialised(2, LEASE_MS);
    let x = harness.register(0, "x");
    harness.rebalance(0);
    assert_eq!(harness.owner(0), Some(x.as_str()));
    reserve(&mut harness, RESERVED_AT_MS, &[&x]);
    let y = harness.register(RESERVED_AT_MS, "y");
    let planned_at = harness.state.revision();
    let outcome = harness.apply(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: RESERVED_AT_MS,
        planned_at,
        moves: vec![Move {
            shard: 0,
            to: y.clone(),
        }],
    });
    assert!(matches!(outcome, Outcome::Rebalanced { .. }), "{outcome:?}");
    let handoff = harness
        .state
        .shard(0)
        .and_then(|shard| shard.handoff.clone())
        .expect("releasing");
    assert_eq!(handoff.from_grant_expiry_ms, RESERVED_UNTIL_MS);

    // The target renews, so it is live when the handoff completes.
    harness.renew_in_sync(RESERVED_UNTIL_MS - 10_000, &y);
    let told_expiry_ms = harness.state.executor(&x).expect("x").lease_expiry_ms;
    harness.apply(Command::CompleteHandoffs {
        now_ms: told_expiry_ms + 1,
    });
    assert_eq!(harness.owner(0), Some(x.as_str()), "still releasing");
    harness.apply(Command::CompleteHandoffs {
        now_ms: RESERVED_UNTIL_MS + 1,
    });
    assert_eq!(harness.owner(0), Some(y.as_str()));
}

/// P6.7: the leader's judgment reaps an executor despite its reservation, once the judged expiry
/// has lapsed; a judgment not yet lapsed, one older than a grant the log recorded since (a
/// renewal through the log), and an id that left reap nothing.
#[test]
fn p6_7_reaping_by_judgment_ignores_the_reservation_but_not_a_later_logged_grant() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let x = harness.register(0, "x");
    reserve(&mut harness, RESERVED_AT_MS, &[&x]);
    let judged_ms = 75_000;

    let outcome = reap_lapsed(&mut harness, judged_ms, &x, judged_ms);
    assert!(
        reaped(&outcome).is_empty(),
        "not lapsed at its own millisecond"
    );
    let outcome = reap_lapsed(&mut harness, judged_ms + 1, "ex-999", judged_ms);
    assert!(reaped(&outcome).is_empty());

    // A renewal through the log after the judgment: its grant ends after the judged expiry.
    let mut renewed = harness.clone();
    renewed.renew_in_sync(judged_ms - 5_000, &x);
    let outcome = reap_lapsed(&mut renewed, judged_ms + 1, &x, judged_ms);
    assert!(reaped(&outcome).is_empty(), "{outcome:?}");
    assert!(renewed.state.executor(&x).is_some());

    let outcome = reap_lapsed(&mut harness, judged_ms + 1, &x, judged_ms);
    assert_eq!(reaped(&outcome), vec![x.clone()]);
    assert!(harness.state.executor(&x).is_none());
}

/// P6.4: a new leader's office floor counts told expiries only; a reservation, a few leases
/// ahead of the instant it was made, would otherwise move the new leader's clock ahead of its
/// predecessor's.
#[test]
fn p6_4_the_office_floor_counts_told_expiries_not_reservations() {
    let mut harness = Harness::initialised(2, LEASE_MS);
    let x = harness.register(0, "x");
    harness.rebalance(0);
    reserve(&mut harness, RESERVED_AT_MS, &[&x]);
    let y = harness.register(RESERVED_AT_MS, "y");
    let planned_at = harness.state.revision();
    harness.apply(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: RESERVED_AT_MS,
        planned_at,
        moves: vec![Move { shard: 0, to: y }],
    });
    assert_eq!(
        harness.state.latest_deadline_ms(),
        Some(RESERVED_AT_MS + LEASE_MS),
        "y's told expiry, not x's reservation nor the handoff it bounds"
    );
}

/// P14.3: the two commands are schema 12's, proposed only once the cluster version reaches it.
#[test]
fn p14_3_reservations_and_judged_reaps_need_schema_9() {
    let commands = [
        Command::ReserveLeases {
            now_ms: 1,
            executor_ids: vec!["ex-1".to_owned()],
        },
        Command::ReapLapsed {
            now_ms: 1,
            leases: Vec::new(),
        },
    ];
    for command in commands {
        assert_eq!(command.required_schema(), LEASE_RESERVATION_SCHEMA);
        let proposable = |cluster_version| {
            crate::lease::schema::check_proposable(&command, cluster_version).is_ok()
        };
        assert!(!proposable(LEASE_RESERVATION_SCHEMA - 1));
        assert!(proposable(LEASE_RESERVATION_SCHEMA));
    }
}
