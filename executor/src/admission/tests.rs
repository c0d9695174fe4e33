//! The admission core: deliveries in every order, lapses and resumes, against an injected clock.

use std::time::Duration;

use super::*;
use AdmissionChange::{Start, Stop};
use AdmissionReason::*;

const EXECUTOR: &str = "ex-7";
const SHARD_COUNT: u32 = 16;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn set(pairs: &[(u32, u64)]) -> Vec<ShardEpoch> {
    pairs
        .iter()
        .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
        .collect()
}

fn grant(lease_ttl_ms: u64, revision: u64, shards: &[(u32, u64)]) -> Grant {
    Grant {
        generation: 0,
        shard_runs: None,
        executor_id: EXECUTOR.into(),
        lease_ttl_ms,
        revision,
        shard_count: SHARD_COUNT,
        shards: set(shards),
        unchanged: false,
        secondaries: Vec::new(),
    }
}

fn push(revision: u64, shards: &[(u32, u64)]) -> AssignmentPush {
    AssignmentPush {
        generation: 0,
        executor_id: EXECUTOR.into(),
        revision,
        shard_count: SHARD_COUNT,
        shards: set(shards),
        secondaries: Vec::new(),
    }
}

fn revoke(revision: u64, shards: &[u32]) -> RevokePush {
    RevokePush {
        executor_id: EXECUTOR.into(),
        revision,
        shards: shards.to_vec(),
        generation: 0,
    }
}

/// (shard, epoch, change, at, reason) without the executor id, for exact comparisons.
fn summary(
    events: &[AdmissionEvent],
) -> Vec<(u32, u64, AdmissionChange, Instant, AdmissionReason)> {
    events
        .iter()
        .map(|e| {
            assert_eq!(e.executor_id, EXECUTOR);
            (e.shard, e.epoch, e.change, e.at, e.reason)
        })
        .collect()
}

/// A registered core holding `shards` under a lease of `ttl_ms` granted at `t0`.
fn registered(t0: Instant, ttl_ms: u64, revision: u64, shards: &[(u32, u64)]) -> AdmissionCore {
    let mut core = AdmissionCore::default();
    core.apply_grant(t0, &grant(ttl_ms, revision, shards), t0)
        .unwrap();
    core
}

/// Seed 000's example through the whole core: the manager's expiry is t=60, the renewal
/// leaves at t=20 and is answered with 40 s left, the reply lands at t=25. Admission ends at
/// t=60, and the log's stop is stamped t=60 even though the lapse is noticed at t=70.
#[test]
fn p3_2_delayed_grant_never_extends_past_send_plus_ttl() {
    let t0 = Instant::now();
    let mut core = registered(t0, 60_000, 1, &[(3, 1)]);
    let applied = core
        .apply_grant(t0 + secs(20), &grant(40_000, 2, &[(3, 1)]), t0 + secs(25))
        .unwrap();
    assert_eq!(applied.lease_expiry, t0 + secs(60));
    assert!(applied.events.is_empty(), "{:?}", applied.events);
    assert_eq!(
        core.admit(3, t0 + secs(60) - Duration::from_millis(1)),
        Ok(Permit::primary(3, 1))
    );
    assert_eq!(core.admit(3, t0 + secs(60)), Err(AdmitError::NotReady));
    assert_eq!(
        summary(&core.record_lapse(t0 + secs(70))),
        [(3, 1, Stop, t0 + secs(60), LeaseLapsed)]
    );
}

/// I1: a process that reuses a dead executor's address must not take that executor's
/// shards from a push (or drop its own on a revoke) meant for the dead one.
#[test]
fn i1_deliveries_addressed_to_another_executor_are_refused_and_change_nothing() {
    let t0 = Instant::now();
    let mut core = registered(t0, 60_000, 5, &[(1, 1)]);
    let mut foreign_push = push(9, &[(1, 1), (2, 4)]);
    foreign_push.executor_id = "ex-3".into();
    assert!(matches!(
        core.apply_push(&foreign_push, t0 + secs(1)),
        Err(PushError::WrongExecutor { .. })
    ));
    let mut foreign_revoke = revoke(9, &[1]);
    foreign_revoke.executor_id = "ex-3".into();
    assert!(matches!(
        core.apply_revoke(&foreign_revoke, t0 + secs(1)),
        Err(PushError::WrongExecutor { .. })
    ));
    assert_eq!(core.admit(1, t0 + secs(2)), Ok(Permit::primary(1, 1)));
    assert_eq!(core.admit(2, t0 + secs(2)), Err(AdmitError::NotOwner));
    // The same push addressed to this executor applies.
    core.apply_push(&push(9, &[(1, 1), (2, 4)]), t0 + secs(3))
        .unwrap();
    assert_eq!(core.admit(2, t0 + secs(4)), Ok(Permit::primary(2, 4)));
}

#[test]
fn p3_3_push_and_revoke_do_not_move_the_lease_clock() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
    let expiry = core.lease().expiry();
    core.apply_push(&push(6, &[(1, 1), (2, 1), (4, 2)]), t0 + secs(10))
        .unwrap();
    core.apply_revoke(&revoke(7, &[2]), t0 + secs(11)).unwrap();
    assert_eq!(core.lease().expiry(), expiry);
    assert_eq!(core.admit(4, t0 + secs(29)), Ok(Permit::primary(4, 2)));
    assert_eq!(core.admit(4, t0 + secs(30)), Err(AdmitError::NotReady));
}

#[test]
fn p3_3_stale_grant_moves_the_clock_but_keeps_the_newer_pushed_set() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 5, &[(1, 1)]);
    // The renewal leaves at t=10 and is read at revision 6; a push read at 8 overtakes it.
    core.apply_push(&push(8, &[(1, 1), (9, 3)]), t0 + secs(11))
        .unwrap();
    let applied = core
        .apply_grant(t0 + secs(10), &grant(30_000, 6, &[(1, 1)]), t0 + secs(12))
        .unwrap();
    assert_eq!(
        applied.set,
        Ok(SetOutcome::Stale {
            revision: 6,
            applied_revision: 8
        })
    );
    assert_eq!(applied.lease_expiry, t0 + secs(40), "the clock moved");
    assert_eq!(core.assignment().held(), set(&[(1, 1), (9, 3)]));
    assert_eq!(core.admit(9, t0 + secs(39)), Ok(Permit::primary(9, 3)));
}

/// A stale grant's lease covers only what the manager recorded at its revision (I1): a held
/// shard missing from its set and gained no later than it stops at once, as unassigned; a
/// shard gained by a newer delivery stays.
#[test]
fn i1_a_stale_grant_stops_the_shards_taken_by_its_revision() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 1, &[(1, 1), (2, 1)]);
    core.apply_push(&push(5, &[(1, 1), (2, 1), (3, 1)]), t0 + secs(1))
        .unwrap();
    // Read at revision 3, after shard 2 was marked releasing and before shard 3 was given.
    let applied = core
        .apply_grant(t0 + secs(2), &grant(30_000, 3, &[(1, 1)]), t0 + secs(3))
        .unwrap();
    assert_eq!(
        summary(&applied.events),
        [(2, 1, Stop, t0 + secs(3), Unassigned)]
    );
    assert_eq!(core.assignment().held(), set(&[(1, 1), (3, 1)]));
    assert_eq!(core.admit(2, t0 + secs(3)), Err(AdmitError::NotOwner));
}

/// A grant at the revision already applied is not stale: its set is applied as a delivery,
/// after the lease it carries. When that lease has already run out on arrival, everything
/// held stops as lapsed (P3.6), the shard its set leaves out included.
#[test]
fn p3_6_a_current_grant_already_lapsed_stops_everything_as_lapsed() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 4, &[(1, 1), (2, 1)]);
    let applied = core
        .apply_grant(t0 + secs(1), &grant(1_000, 4, &[(1, 1)]), t0 + secs(3))
        .unwrap();
    assert_eq!(
        summary(&applied.events),
        [
            (1, 1, Stop, t0 + secs(3), LeaseLapsed),
            (2, 1, Stop, t0 + secs(3), LeaseLapsed)
        ]
    );
    assert_eq!(core.assignment().held(), set(&[(1, 1)]));
}

/// P3.6, I6: a malformed revoke arriving after the lease lapsed changes nothing, and loses
/// nothing: the lapse's stop lines come with the next operation that records it, so the log
/// never shows a start without its stop.
#[test]
fn p3_6_a_refused_revoke_after_a_lapse_keeps_the_lapse_for_the_log() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 3, &[(1, 1), (2, 1)]);
    assert!(core
        .apply_revoke(&revoke(4, &[1, 1]), t0 + secs(11))
        .is_err());
    assert_eq!(
        summary(&core.record_lapse(t0 + secs(12))),
        [
            (1, 1, Stop, t0 + secs(10), LeaseLapsed),
            (2, 1, Stop, t0 + secs(10), LeaseLapsed)
        ]
    );
}

/// P4.1, self-healing (the security review's finding 6): a push at u64::MAX (or a revoke
/// at it) from outside the cluster made every later grant stale, and the executor served
/// nothing for good. A grant answering a request sent after it carries a lower revision,
/// which no grant of this cluster can: its set and revision are adopted, admission starts
/// for its shards, and the deliveries after it apply again.
#[test]
fn p4_1_a_grant_below_the_revision_applied_at_its_send_disowns_a_forged_push() {
    let t0 = Instant::now();
    for forged in ["push", "revoke"] {
        let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
        if forged == "push" {
            core.apply_push(&push(u64::MAX, &[]), t0 + secs(1)).unwrap();
        } else {
            core.apply_revoke(&revoke(u64::MAX, &[1, 2]), t0 + secs(1))
                .unwrap();
        }
        assert_eq!(core.admit(1, t0 + secs(1)), Err(AdmitError::NotOwner));
        // The renewal leaves at 10, after the forgery was applied.
        let sent = core.applied_mark();
        assert_eq!(sent.revision(), u64::MAX, "{forged}");
        let applied = core
            .apply_grant_after(
                t0 + secs(10),
                sent,
                &grant(30_000, 7, &[(1, 1), (2, 1), (3, 1)]),
                t0 + secs(11),
            )
            .unwrap();
        assert_eq!(
            applied.disowned,
            Some(Disowned {
                sent_revision: u64::MAX,
                grant_revision: 7
            }),
            "{forged}"
        );
        assert_eq!(
            summary(&applied.events),
            [
                (1, 1, Start, t0 + secs(11), Assigned),
                (2, 1, Start, t0 + secs(11), Assigned),
                (3, 1, Start, t0 + secs(11), Assigned),
            ],
            "{forged}"
        );
        assert_eq!(core.assignment().revision(), 7, "{forged}");
        assert_eq!(core.renewal().unwrap().1.revision, 7, "{forged}");
        assert_eq!(core.admit(3, t0 + secs(11)), Ok(Permit::primary(3, 1)));
        // The cluster's next push applies again.
        let pushed = core
            .apply_push(&push(8, &[(1, 1), (3, 1)]), t0 + secs(12))
            .unwrap();
        assert!(matches!(pushed.set, SetOutcome::Applied { .. }), "{forged}");
        assert_eq!(core.admit(2, t0 + secs(12)), Err(AdmitError::NotOwner));
    }
}

/// P4.1, P3.3: the comparison is with the revision applied when the request was sent, not
/// when its grant arrives. A push of the cluster's that lands while the renewal is in flight
/// leaves the renewal's lower grant merely stale: nothing is adopted wholesale, the shard the
/// push gave stays, and the shard missing from the grant and gained no later than it goes
/// (I1).
#[test]
fn p4_1_a_push_arriving_while_the_renewal_is_in_flight_leaves_its_lower_grant_stale() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
    let sent = core.applied_mark();
    core.apply_push(&push(8, &[(1, 1), (2, 1), (9, 3)]), t0 + secs(11))
        .unwrap();
    // Read at 6, after shard 2 was taken and before shard 9 was given.
    let applied = core
        .apply_grant_after(
            t0 + secs(10),
            sent,
            &grant(30_000, 6, &[(1, 1)]),
            t0 + secs(12),
        )
        .unwrap();
    assert_eq!(applied.disowned, None);
    assert_eq!(
        applied.set,
        Ok(SetOutcome::Stale {
            revision: 6,
            applied_revision: 8
        })
    );
    assert_eq!(
        summary(&applied.events),
        [(2, 1, Stop, t0 + secs(12), Unassigned)]
    );
    assert_eq!(core.assignment().held(), set(&[(1, 1), (9, 3)]));
    assert_eq!(core.assignment().revision(), 8);
}

/// I1 with a forged push: a revoke of the cluster's answered while the renewal is in flight
/// released a shard the forged set did not hold, and the managers may hand it on. The
/// renewal's grant, read before that revoke, still lists it: it is not adopted (the shard
/// stays out), and the next renewal, sent with nothing in flight, adopts.
#[test]
fn i1_a_delivery_in_flight_defers_the_adoption_to_the_next_renewal() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
    core.apply_push(&push(u64::MAX, &[(1, 1)]), t0 + secs(1))
        .unwrap();
    let sent = core.applied_mark();
    let revoked = core.apply_revoke(&revoke(12, &[2]), t0 + secs(11)).unwrap();
    assert_eq!(revoked.reply.released, vec![2]);
    let applied = core
        .apply_grant_after(
            t0 + secs(10),
            sent,
            &grant(30_000, 11, &[(1, 1), (2, 1)]),
            t0 + secs(12),
        )
        .unwrap();
    assert_eq!(applied.disowned, None);
    assert_eq!(core.admit(2, t0 + secs(12)), Err(AdmitError::NotOwner));
    let sent = core.applied_mark();
    let applied = core
        .apply_grant_after(
            t0 + secs(20),
            sent,
            &grant(30_000, 13, &[(1, 1)]),
            t0 + secs(21),
        )
        .unwrap();
    assert_eq!(
        applied.disowned,
        Some(Disowned {
            sent_revision: u64::MAX,
            grant_revision: 13
        })
    );
    assert_eq!(core.assignment().revision(), 13);
    assert_eq!(core.assignment().held(), set(&[(1, 1)]));
}

/// Without the mark of its request (`apply_grant`), a grant never disowns: a lower one is
/// stale, as before.
#[test]
fn p4_1_a_grant_without_its_requests_mark_is_only_ever_stale() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 5, &[(1, 1)]);
    core.apply_push(&push(u64::MAX, &[]), t0 + secs(1)).unwrap();
    let applied = core
        .apply_grant(t0 + secs(10), &grant(30_000, 7, &[(1, 1)]), t0 + secs(11))
        .unwrap();
    assert_eq!(applied.disowned, None);
    assert!(matches!(applied.set, Ok(SetOutcome::Stale { .. })));
}

#[test]
fn p4_1_stale_push_is_ignored() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 10, &[(1, 1)]);
    let applied = core.apply_push(&push(9, &[(2, 1)]), t0 + secs(1)).unwrap();
    assert!(matches!(applied.set, SetOutcome::Stale { .. }));
    assert!(applied.events.is_empty());
    assert_eq!(core.admit(1, t0 + secs(2)), Ok(Permit::primary(1, 1)));
    assert_eq!(core.admit(2, t0 + secs(2)), Err(AdmitError::NotOwner));
}

#[test]
fn p5_2_stale_revoke_is_ignored_and_answered_ignored() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 10, &[(1, 1)]);
    // The shard was revoked at 8 and came back at 10; the revoke arrives late.
    let applied = core.apply_revoke(&revoke(8, &[1]), t0 + secs(1)).unwrap();
    assert_eq!(
        applied.reply,
        RevokeReply {
            revision: 8,
            released: vec![],
            ignored: true
        }
    );
    assert!(applied.events.is_empty());
    assert_eq!(core.admit(1, t0 + secs(2)), Ok(Permit::primary(1, 1)));
}

#[test]
fn p5_2_revoke_stops_admission_before_it_is_answered_released() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 10, &[(1, 1), (2, 4)]);
    let applied = core.apply_revoke(&revoke(12, &[2]), t0 + secs(3)).unwrap();
    assert_eq!(
        applied.reply,
        RevokeReply {
            revision: 12,
            released: vec![2],
            ignored: false
        }
    );
    assert_eq!(
        summary(&applied.events),
        [(2, 4, Stop, t0 + secs(3), Revoked)]
    );
    assert_eq!(core.admit(2, t0 + secs(3)), Err(AdmitError::NotOwner));
    assert_eq!(
        core.renewal().unwrap().1.revision,
        12,
        "renewals report the revoke"
    );
}

/// The lease state machine's safety relies on this: after answering a revoke released, an
/// assign push read before the revoke must not bring the shard back.
#[test]
fn p4_1_revoke_raises_the_applied_revision_so_an_older_assign_push_is_ignored() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 10, &[(1, 1)]);
    // Rebalance at 11 gives shard 2 (push delayed), revoke at 12 takes it again.
    let applied = core.apply_revoke(&revoke(12, &[2]), t0 + secs(1)).unwrap();
    assert_eq!(applied.reply.released, vec![2]);
    let late = core
        .apply_push(&push(11, &[(1, 1), (2, 5)]), t0 + secs(2))
        .unwrap();
    assert!(matches!(late.set, SetOutcome::Stale { .. }));
    assert!(late.events.is_empty());
    assert_eq!(core.admit(2, t0 + secs(3)), Err(AdmitError::NotOwner));
}

#[test]
fn p4_2_renew_reply_with_a_different_set_is_adopted_like_a_push() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 10, &[(1, 1), (2, 1)]);
    // The push that moved shard 2 away and gave shard 3 never landed.
    let applied = core
        .apply_grant(
            t0 + secs(10),
            &grant(30_000, 14, &[(1, 1), (3, 2)]),
            t0 + secs(10),
        )
        .unwrap();
    assert_eq!(
        summary(&applied.events),
        [
            (2, 1, Stop, t0 + secs(10), Unassigned),
            (3, 2, Start, t0 + secs(10), Assigned)
        ]
    );
    assert_eq!(core.assignment().revision(), 14);
}

/// P4.3: stop dropped shards first, then start gained ones, each in shard order.
#[test]
fn p4_3_delivery_stops_dropped_shards_before_starting_gained_ones() {
    let t0 = Instant::now();
    let mut core = registered(t0, 30_000, 1, &[(5, 1), (6, 1), (7, 1)]);
    let applied = core
        .apply_push(&push(2, &[(0, 2), (6, 1), (7, 2)]), t0 + secs(1))
        .unwrap();
    let at = t0 + secs(1);
    assert_eq!(
        summary(&applied.events),
        [
            (5, 1, Stop, at, Unassigned),
            (7, 1, Stop, at, Unassigned),
            (0, 2, Start, at, Assigned),
            (7, 2, Start, at, Assigned),
        ]
    );
}

#[test]
fn p3_6_lapse_fences_and_a_later_grant_resumes_without_reacquire() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 3, &[(1, 1), (2, 1)]);
    assert_eq!(core.admit(1, t0 + secs(11)), Err(AdmitError::NotReady));
    assert_eq!(core.view(t0 + secs(11)).admission, AdmissionState::Fenced);
    // A push while fenced changes the set but admits nothing (it carries no lease).
    let pushed = core
        .apply_push(&push(4, &[(1, 1), (2, 1), (3, 1)]), t0 + secs(12))
        .unwrap();
    assert_eq!(
        summary(&pushed.events),
        [
            (1, 1, Stop, t0 + secs(10), LeaseLapsed),
            (2, 1, Stop, t0 + secs(10), LeaseLapsed)
        ]
    );
    assert_eq!(core.admit(3, t0 + secs(12)), Err(AdmitError::NotReady));
    // A renewal sent at 13 succeeds for the same shards and epochs.
    let resumed = core
        .apply_grant(
            t0 + secs(13),
            &grant(10_000, 5, &[(1, 1), (2, 1), (3, 1), (4, 1)]),
            t0 + secs(14),
        )
        .unwrap();
    let at = t0 + secs(14);
    assert_eq!(
        summary(&resumed.events),
        [
            (1, 1, Start, at, Resumed),
            (2, 1, Start, at, Resumed),
            // Pushed while fenced: held before the grant, so it resumes with the rest.
            (3, 1, Start, at, Resumed),
            // New in the grant itself.
            (4, 1, Start, at, Assigned),
        ]
    );
    assert_eq!(core.admit(1, at), Ok(Permit::primary(1, 1)));
    assert_eq!(core.view(at).admission, AdmissionState::Admitting);
}

#[test]
fn p3_6_grant_already_lapsed_on_arrival_admits_nothing() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
    // Sent at 5 with 2 s left, applied at 8: lapsed since 7. Admission, on under the
    // earlier expiry (10) until now, stops now.
    let applied = core
        .apply_grant(t0 + secs(5), &grant(2_000, 2, &[(1, 1)]), t0 + secs(8))
        .unwrap();
    assert_eq!(
        summary(&applied.events),
        [(1, 1, Stop, t0 + secs(8), LeaseLapsed)]
    );
    assert_eq!(core.admit(1, t0 + secs(8)), Err(AdmitError::NotReady));
}

#[test]
fn p3_6_not_registered_admits_nothing_and_refuses_pushes() {
    let t0 = Instant::now();
    let mut core = AdmissionCore::default();
    assert_eq!(core.admit(0, t0), Err(AdmitError::NotReady));
    assert_eq!(core.admit_key(b"k", t0), Err(AdmitError::NotReady));
    assert_eq!(
        core.apply_push(&push(1, &[(0, 1)]), t0).unwrap_err(),
        PushError::NotRegistered
    );
    assert!(core.renewal().is_none());
}

/// A reason displays as the name the admission log writes for it (§9), so what an
/// embedder prints from an event matches the log line.
#[test]
fn a_reason_displays_as_its_admission_log_name() {
    let names = [
        (Assigned, "assigned"),
        (Resumed, "resumed"),
        (Unassigned, "unassigned"),
        (Revoked, "revoked"),
        (LeaseLapsed, "lease_lapsed"),
        (UnknownExecutor, "unknown_executor"),
        (Shutdown, "shutdown"),
    ];
    for (reason, name) in names {
        assert_eq!(reason.to_string(), name);
        assert_eq!(reason.as_str(), name);
        assert_eq!(serde_json::to_value(reason).unwrap(), name);
    }
}

#[test]
fn admit_key_maps_keys_with_the_api_hash() {
    let t0 = Instant::now();
    let count = NonZeroU32::new(SHARD_COUNT).unwrap();
    let shard = shard_for_key(b"order-17", count);
    let core = registered(t0, 10_000, 1, &[(shard, 4)]);
    assert_eq!(
        core.admit_key(b"order-17", t0),
        Ok(Permit::primary(shard, 4))
    );
}

#[test]
fn unknown_executor_stops_everything_and_forgets_the_registration() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 9, &[(1, 1)]);
    let events = core.forget_executor(t0 + secs(2));
    assert_eq!(
        summary(&events),
        [(1, 1, Stop, t0 + secs(2), UnknownExecutor)]
    );
    assert_eq!(core.executor_id(), None);
    assert_eq!(core.admit(1, t0 + secs(2)), Err(AdmitError::NotReady));
    assert!(core.assignment().held().is_empty());
    assert_eq!(
        core.assignment().revision(),
        9,
        "the revision order survives"
    );
    // A new registration is accepted under its new id.
    let other = Grant {
        executor_id: "ex-20".into(),
        ..grant(10_000, 20, &[(2, 3)])
    };
    core.apply_grant(t0 + secs(3), &other, t0 + secs(3))
        .unwrap();
    assert_eq!(core.admit(2, t0 + secs(3)), Ok(Permit::primary(2, 3)));
}

#[test]
fn a_grant_for_another_executor_is_refused_whole() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
    let foreign = Grant {
        executor_id: "ex-99".into(),
        ..grant(60_000, 50, &[])
    };
    assert!(core.apply_grant(t0, &foreign, t0).is_err());
    assert_eq!(core.lease().expiry(), Some(t0 + secs(10)));
    assert!(core.assignment().holds(1, 1));
}

#[test]
fn p3_7_stop_admission_is_for_good() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
    assert!(!core.is_stopping());
    assert_eq!(
        summary(&core.stop_admission(t0 + secs(1))),
        [(1, 1, Stop, t0 + secs(1), Shutdown)]
    );
    assert!(core.is_stopping());
    let applied = core
        .apply_grant(t0 + secs(2), &grant(10_000, 2, &[(1, 1)]), t0 + secs(2))
        .unwrap();
    assert!(applied.events.is_empty());
    assert_eq!(core.admit(1, t0 + secs(2)), Err(AdmitError::NotReady));
    // A revoke while stopping is still answered released: nothing is admitted.
    assert_eq!(
        core.apply_revoke(&revoke(3, &[1]), t0 + secs(3))
            .unwrap()
            .reply
            .released,
        vec![1]
    );
}

#[test]
fn malformed_grant_set_still_moves_the_lease() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
    let applied = core
        .apply_grant(t0 + secs(5), &grant(10_000, 2, &[(99, 1)]), t0 + secs(5))
        .unwrap();
    assert!(applied.set.is_err());
    assert_eq!(applied.lease_expiry, t0 + secs(15));
    assert!(core.assignment().holds(1, 1));
}

/// A grant of `shards` and `secondaries` (PROTOCOL §19).
fn grant_with_secondaries(
    lease_ttl_ms: u64,
    revision: u64,
    shards: &[(u32, u64)],
    secondaries: &[(u32, u64)],
) -> Grant {
    Grant {
        secondaries: set(secondaries),
        ..grant(lease_ttl_ms, revision, shards)
    }
}

/// (shard, epoch, role, change, reason): [`summary`] with the role.
fn with_roles(
    events: &[AdmissionEvent],
) -> Vec<(u32, u64, Role, AdmissionChange, AdmissionReason)> {
    events
        .iter()
        .map(|e| (e.shard, e.epoch, e.role, e.change, e.reason))
        .collect()
}

const PRIMARY: Role = Role::Primary;
const SECONDARY: Role = Role::Secondary;

fn secondary_permit(shard: u32, epoch: u64) -> Permit {
    Permit {
        shard,
        epoch,
        role: Role::Secondary,
    }
}

/// P19.1, P19.5: a shard held as a secondary is never admitted as the primary, by `admit`,
/// `admit_key` or `admit_as(.., Primary)`; it is admitted as a secondary when asked for one (or
/// for either), and a primary is never admitted as a secondary.
#[test]
fn p19_1_a_secondary_is_never_admitted_as_the_primary() {
    let t0 = Instant::now();
    let count = NonZeroU32::new(SHARD_COUNT).unwrap();
    let key_of_secondary = (0..)
        .map(|n: u32| format!("key-{n}"))
        .find(|key| shard_for_key(key.as_bytes(), count) == 5)
        .unwrap();
    let mut core = AdmissionCore::default();
    core.apply_grant(
        t0,
        &grant_with_secondaries(10_000, 1, &[(1, 1)], &[(5, 3)]),
        t0,
    )
    .unwrap();
    let at = t0 + secs(1);
    assert_eq!(core.admit(5, at), Err(AdmitError::NotOwner));
    assert_eq!(
        core.admit_key(key_of_secondary.as_bytes(), at),
        Err(AdmitError::NotOwner)
    );
    assert_eq!(
        core.admit_as(5, RoleWanted::Primary, at),
        Err(AdmitError::NotOwner)
    );
    assert_eq!(
        core.admit_as(5, Role::Secondary, at),
        Ok(secondary_permit(5, 3))
    );
    assert_eq!(
        core.admit_as(5, RoleWanted::Any, at),
        Ok(secondary_permit(5, 3))
    );
    assert_eq!(
        core.admit_key_as(key_of_secondary.as_bytes(), RoleWanted::Secondary, at),
        Ok(secondary_permit(5, 3))
    );
    // The primary: admitted as before, and as the primary when either will do.
    assert_eq!(core.admit(1, at), Ok(Permit::primary(1, 1)));
    assert_eq!(
        core.admit_as(1, RoleWanted::Any, at),
        Ok(Permit::primary(1, 1))
    );
    assert_eq!(
        core.admit_as(1, RoleWanted::Secondary, at),
        Err(AdmitError::NotOwner)
    );
    assert_eq!(
        core.admit_as(2, RoleWanted::Any, at),
        Err(AdmitError::NotOwner)
    );
}

/// P19.1 (P3.6 for every role): a secondary is admitted only while the lease is live; its
/// admission stops at the expiry with the primary's, and resumes with the next grant.
#[test]
fn p19_1_a_secondary_is_admitted_only_while_the_lease_is_live() {
    let t0 = Instant::now();
    let mut core = AdmissionCore::default();
    let applied = core
        .apply_grant(
            t0,
            &grant_with_secondaries(10_000, 1, &[(1, 1)], &[(5, 3)]),
            t0,
        )
        .unwrap();
    assert_eq!(
        with_roles(&applied.events),
        [
            (1, 1, PRIMARY, Start, Assigned),
            (5, 3, SECONDARY, Start, Assigned)
        ]
    );
    let expiry = t0 + secs(10);
    assert_eq!(
        core.admit_as(5, RoleWanted::Secondary, expiry - Duration::from_millis(1)),
        Ok(secondary_permit(5, 3))
    );
    assert_eq!(
        core.admit_as(5, RoleWanted::Secondary, expiry),
        Err(AdmitError::NotReady)
    );
    assert_eq!(
        with_roles(&core.record_lapse(t0 + secs(11))),
        [
            (1, 1, PRIMARY, Stop, LeaseLapsed),
            (5, 3, SECONDARY, Stop, LeaseLapsed)
        ]
    );
    let resumed = core
        .apply_grant(
            t0 + secs(12),
            &grant_with_secondaries(10_000, 2, &[(1, 1)], &[(5, 3)]),
            t0 + secs(12),
        )
        .unwrap();
    assert_eq!(
        with_roles(&resumed.events),
        [
            (1, 1, PRIMARY, Start, Resumed),
            (5, 3, SECONDARY, Start, Resumed)
        ]
    );
    // A graceful stop ends every role's admission, for good.
    assert_eq!(
        with_roles(&core.stop_admission(t0 + secs(13))),
        [
            (1, 1, PRIMARY, Stop, Shutdown),
            (5, 3, SECONDARY, Stop, Shutdown)
        ]
    );
    assert_eq!(
        core.admit_as(5, RoleWanted::Secondary, t0 + secs(13)),
        Err(AdmitError::NotReady)
    );
}

/// P19.3, P4.3: a push that promotes a secondary stops it as a secondary before it starts as
/// the primary at its new epoch; a revoke leaves the secondaries alone; a stale push (P4.1)
/// changes no secondary.
#[test]
fn p19_3_a_promotion_stops_the_secondary_then_starts_the_primary() {
    let t0 = Instant::now();
    let mut core = AdmissionCore::default();
    core.apply_grant(
        t0,
        &grant_with_secondaries(60_000, 5, &[(1, 1)], &[(5, 3), (6, 2)]),
        t0,
    )
    .unwrap();
    let at = t0 + secs(1);
    let promoted = AssignmentPush {
        secondaries: set(&[(6, 2)]),
        ..push(7, &[(1, 1), (5, 4)])
    };
    let applied = core.apply_push(&promoted, at).unwrap();
    assert_eq!(
        with_roles(&applied.events),
        [
            (5, 3, SECONDARY, Stop, Unassigned),
            (5, 4, PRIMARY, Start, Assigned)
        ]
    );
    assert_eq!(core.admit(5, at), Ok(Permit::primary(5, 4)));
    let revoked = core.apply_revoke(&revoke(8, &[1]), at).unwrap();
    assert_eq!(
        with_roles(&revoked.events),
        [(1, 1, PRIMARY, Stop, Revoked)]
    );
    assert_eq!(
        core.admit_as(6, Role::Secondary, at),
        Ok(secondary_permit(6, 2))
    );
    // Read before the revoke: stale, whatever secondaries it lists.
    let stale = AssignmentPush {
        secondaries: set(&[(6, 2), (7, 1)]),
        ..push(6, &[(1, 1), (5, 4)])
    };
    let applied = core.apply_push(&stale, at).unwrap();
    assert!(
        matches!(applied.set, SetOutcome::Stale { .. }),
        "{applied:?}"
    );
    assert!(applied.events.is_empty());
    assert_eq!(
        core.admit_as(7, Role::Secondary, at),
        Err(AdmitError::NotOwner)
    );
    assert_eq!(core.view(at).secondaries.len(), 1);
}

/// I6, P19.1: a push naming a shard as both the primary and a secondary is refused whole; a
/// grant's such set is refused while its lease still moves.
#[test]
fn p19_1_a_set_naming_a_shard_in_both_roles_is_refused_whole() {
    let t0 = Instant::now();
    let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
    let both = AssignmentPush {
        secondaries: set(&[(1, 1)]),
        ..push(2, &[(1, 1), (2, 1)])
    };
    assert_eq!(
        core.apply_push(&both, t0).unwrap_err(),
        PushError::Invalid(DeliveryError::PrimaryAndSecondary { shard: 1 })
    );
    let applied = core
        .apply_grant(
            t0 + secs(5),
            &grant_with_secondaries(10_000, 3, &[(1, 1)], &[(1, 1)]),
            t0 + secs(5),
        )
        .unwrap();
    assert!(applied.set.is_err());
    assert_eq!(applied.lease_expiry, t0 + secs(15));
    assert_eq!(core.assignment().revision(), 1);
    assert!(core.assignment().secondaries().is_empty());
    assert_eq!(core.admit(2, t0 + secs(5)), Err(AdmitError::NotOwner));
}

/// P19.3: every renewal lists the whole list of ready secondaries, at the epochs the set shows;
/// one said not ready is left out. A core that reports secondaries ready when held lists them
/// all.
#[test]
fn p19_3_renewals_list_the_whole_ready_list() {
    let t0 = Instant::now();
    let mut core = AdmissionCore::default();
    core.apply_grant(
        t0,
        &grant_with_secondaries(10_000, 1, &[(1, 1)], &[(4, 2), (6, 3)]),
        t0,
    )
    .unwrap();
    let ready = |core: &AdmissionCore| core.renewal().unwrap().1.ready;
    assert!(ready(&core).is_empty(), "none said ready yet");
    assert_eq!(core.set_secondary_ready(6, 3, true), Ok(true));
    assert_eq!(ready(&core), set(&[(6, 3)]));
    assert_eq!(core.set_secondary_ready(4, 2, true), Ok(true));
    assert_eq!(ready(&core), set(&[(4, 2), (6, 3)]));
    assert_eq!(core.set_secondary_ready(6, 3, false), Ok(true));
    assert_eq!(ready(&core), set(&[(4, 2)]));
    assert!(core.set_secondary_ready(1, 1, true).is_err(), "a primary");
    assert_eq!(
        core.view(t0)
            .secondaries
            .iter()
            .map(|s| s.ready)
            .collect::<Vec<_>>(),
        [true, false]
    );
    let mut warm = AdmissionCore::default().with_secondaries_ready_when_held(true);
    warm.apply_grant(
        t0,
        &grant_with_secondaries(10_000, 1, &[(1, 1)], &[(4, 2), (6, 3)]),
        t0,
    )
    .unwrap();
    assert_eq!(ready(&warm), set(&[(4, 2), (6, 3)]));
}

/// A push of `revision` in the layout of `generation` with `shard_count` shards (P20.3).
fn push_in(
    revision: u64,
    shard_count: u32,
    generation: u64,
    shards: &[(u32, u64)],
) -> AssignmentPush {
    AssignmentPush {
        generation,
        shard_count,
        ..push(revision, shards)
    }
}

/// P20.3, I1 per key: a set of a newer generation switches the layout in its one receipt: every
/// shard of the old layout stops in it (its lines say the old layout) at the instant every
/// shard of the new one starts (their lines say the new), and keys map by the new count from
/// then on. An older generation's set is stale or refused.
#[test]
fn p20_3_a_set_of_a_newer_generation_switches_admission_in_one_receipt() {
    let t0 = Instant::now();
    let mut core = registered(t0, 60_000, 10, &[(3, 1)]);
    let key = (0..)
        .map(|n: u32| format!("key-{n}"))
        .find(|key| {
            shard_for_key(key.as_bytes(), NonZeroU32::new(SHARD_COUNT).unwrap()) == 3
                && shard_for_key(key.as_bytes(), NonZeroU32::new(SHARD_COUNT * 2).unwrap())
                    == 3 + SHARD_COUNT
        })
        .unwrap();
    assert_eq!(core.admit_key(key.as_bytes(), t0).unwrap().shard, 3);
    let at = t0 + secs(1);
    let split = push_in(12, SHARD_COUNT * 2, 1, &[(3, 2), (3 + SHARD_COUNT, 2)]);
    let applied = core.apply_push(&split, at).unwrap();
    assert_eq!(
        summary(&applied.events),
        [
            (3, 1, Stop, at, Unassigned),
            (3, 2, Start, at, Assigned),
            (3 + SHARD_COUNT, 2, Start, at, Assigned),
        ]
    );
    let layouts: Vec<(u32, u64)> = applied
        .events
        .iter()
        .map(|event| (event.layout.shard_count, event.layout.generation))
        .collect();
    assert_eq!(
        layouts,
        [(SHARD_COUNT, 0), (SHARD_COUNT * 2, 1), (SHARD_COUNT * 2, 1)]
    );
    let permit = core.admit_key(key.as_bytes(), at).unwrap();
    assert_eq!((permit.shard, permit.epoch), (3 + SHARD_COUNT, 2));
    // Older generations: stale by revision, refused otherwise.
    assert!(matches!(
        core.apply_push(&push_in(11, SHARD_COUNT, 0, &[(3, 1)]), at),
        Ok(PushApplied {
            set: SetOutcome::Stale { .. },
            ..
        })
    ));
    assert!(core
        .apply_push(&push_in(13, SHARD_COUNT, 0, &[(3, 1)]), at)
        .is_err());
    // Within a generation the count is fixed.
    assert!(core
        .apply_push(&push_in(13, SHARD_COUNT, 1, &[(3, 2)]), at)
        .is_err());
    assert_eq!(
        core.admit_key(key.as_bytes(), at).unwrap().shard,
        3 + SHARD_COUNT
    );
}

/// P20.3: a revoke overtaken by a set of a newer layout may name shards of the older one; it is
/// answered as overtaken, not refused for their range.
#[test]
fn p20_3_an_overtaken_revoke_of_an_older_layout_is_answered() {
    let t0 = Instant::now();
    let mut core = registered(t0, 60_000, 10, &[(3, 1), (9, 1)]);
    let merge = push_in(12, SHARD_COUNT / 2, 1, &[(1, 2)]);
    core.apply_push(&merge, t0).unwrap();
    let reply = core.apply_revoke(&revoke(11, &[9]), t0).unwrap().reply;
    assert_eq!(reply.released, [9]);
    assert!(core.apply_revoke(&revoke(13, &[9]), t0).is_err());
}

/// P20.3, I1 per key: a revoke made after a reshard, in the new layout, that reaches an executor
/// whose newest set is still of the old layout is refused and changes nothing: after a merge of
/// 16 shards to 8 a revoke of new shard 0 would otherwise stop old shard 0 and leave old shard 8,
/// the other half of new shard 0, admitted while the managers hand new shard 0 on. Once the new
/// layout's set is applied, the revoke sent again applies in it.
#[test]
fn p20_3_a_revoke_in_a_layout_not_yet_applied_is_refused() {
    let t0 = Instant::now();
    let mut core = registered(t0, 60_000, 10, &[(0, 1), (SHARD_COUNT / 2, 1)]);
    let in_new_layout = RevokePush {
        generation: 1,
        ..revoke(13, &[0])
    };
    assert!(core.apply_revoke(&in_new_layout, t0).is_err());
    assert_eq!(core.admit(SHARD_COUNT / 2, t0).unwrap().epoch, 1);
    assert_eq!(core.admit(0, t0).unwrap().epoch, 1);
    let merge = push_in(12, SHARD_COUNT / 2, 1, &[(0, 2)]);
    core.apply_push(&merge, t0).unwrap();
    let reply = core.apply_revoke(&in_new_layout, t0).unwrap().reply;
    assert_eq!(reply.released, [0]);
    assert!(core.admit(0, t0).is_err());
}
