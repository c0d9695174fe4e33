//! Draining (`Command::SetDraining`): an operator takes an executor out of the spread. A table
//! test per rule: the flag itself (P2.4 idempotent, stale plans refused), and the planner's
//! treatment of draining executors (P5.4: no new shards; their shards leave through the normal
//! handoff, P5.2, never by a grant that skips the release).

use super::super::planner::plan_moves;
use super::super::{plan_rebalance, Command, Effects, Handoff, Move, Outcome, RefusalReason};
use super::{Harness, LEASE_MS};
use crate::lease::tests::space_of;

fn set_draining(now_ms: u64, executor_id: &str, draining: bool) -> Command {
    Command::SetDraining {
        now_ms,
        executor_id: executor_id.to_owned(),
        draining,
    }
}

/// Two live executors splitting 8 shards 4/4, every grant at time 0.
fn balanced_pair() -> (Harness, String, String) {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    harness.rebalance(0);
    assert_eq!(harness.delivered_shards(&a).len(), 4);
    assert_eq!(harness.delivered_shards(&b).len(), 4);
    (harness, a, b)
}

#[test]
fn p2_4_drain_sets_the_flag_once_and_a_repeat_changes_nothing() {
    let (mut harness, a, _b) = balanced_pair();
    let index = harness.next_index();
    let outcome = harness.apply(set_draining(10, &a, true));
    assert_eq!(
        outcome,
        Outcome::DrainingSet {
            executor_id: a.clone(),
            draining: true,
            changed: true
        }
    );
    assert!(harness.state.executor(&a).is_some_and(|e| e.draining));
    assert_eq!(harness.state.revision(), index);
    assert_eq!(
        harness.state.assignment_revision(),
        index,
        "a drain changes who may receive shards"
    );
    // Nothing moves in the drain itself: the plan does that.
    assert_eq!(harness.delivered_shards(&a).len(), 4);

    let outcome = harness.apply_expecting_no_change(set_draining(11, &a, true));
    assert!(matches!(
        outcome,
        Outcome::DrainingSet {
            draining: true,
            changed: false,
            ..
        }
    ));

    let outcome = harness.apply(set_draining(12, &a, false));
    assert!(matches!(
        outcome,
        Outcome::DrainingSet {
            draining: false,
            changed: true,
            ..
        }
    ));
    assert!(harness.state.executor(&a).is_some_and(|e| !e.draining));
}

#[test]
fn drain_of_an_unknown_executor_is_not_found_and_changes_nothing() {
    let (mut harness, _a, _b) = balanced_pair();
    let outcome = harness.apply_expecting_no_change(set_draining(10, "ex-999", true));
    assert_eq!(outcome, Outcome::NotFound);
}

#[test]
fn drain_before_init_is_refused() {
    let mut harness = Harness::new();
    let outcome = harness.apply_expecting_no_change(set_draining(0, "ex-1", true));
    assert_eq!(outcome.refusal(), Some(&RefusalReason::NotInitialised));
}

#[test]
fn p5_2_draining_executors_shards_leave_through_a_handoff() {
    let (mut harness, a, b) = balanced_pair();
    let a_shards = harness.delivered_shards(&a);
    harness.apply(set_draining(1_000, &a, true));
    let outcome = harness.rebalance(1_000);
    let Outcome::Rebalanced {
        granted,
        releasing,
        cancelled,
        effects,
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(
        granted,
        Vec::<u32>::new(),
        "nothing is granted past a release"
    );
    assert_eq!(releasing, a_shards);
    assert_eq!(cancelled, Vec::<u32>::new());
    assert_eq!(effects.revokes.len(), 1);
    assert_eq!(effects.revokes[0].executor_id, a);
    assert_eq!(effects.revokes[0].shards, a_shards);
    let revoke_revision = effects.revokes[0].revision;
    for &shard in &a_shards {
        let entry = harness.state.shard(shard).expect("in range");
        assert_eq!(
            entry.owner.as_deref(),
            Some(a.as_str()),
            "still A's until released"
        );
        assert_eq!(
            entry.handoff,
            Some(Handoff {
                to: Some(b.clone()),
                revoke_revision,
                from_grant_expiry_ms: LEASE_MS,
            })
        );
    }
    // The release hands them on at a new epoch; A ends with nothing, B with everything.
    let outcome = harness.apply(Command::Release {
        now_ms: 1_100,
        executor_id: a.clone(),
        shards: a_shards.clone(),
        revoke_revision,
    });
    assert_eq!(
        outcome,
        Outcome::Released {
            completed: a_shards.clone(),
            ignored: vec![],
            effects: Effects {
                revokes: vec![],
                assignments: vec![b.clone()],
            },
        }
    );
    assert!(harness.delivered_shards(&a).is_empty());
    assert_eq!(harness.delivered_shards(&b).len(), 8);
    for &shard in &a_shards {
        assert_eq!(harness.epoch(shard), 2);
    }
    assert_eq!(plan_rebalance(&harness.state, 1_100), None, "settled");
    // A stays registered and renews as usual.
    assert!(harness.state.executor(&a).is_some());
}

#[test]
fn p5_4_a_draining_executor_is_given_no_new_shards() {
    let mut harness = Harness::initialised(6, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    harness.apply(set_draining(0, &a, true));
    harness.rebalance(0);
    assert!(harness.delivered_shards(&a).is_empty());
    assert_eq!(harness.delivered_shards(&b).len(), 6);
    // A joiner is served; the draining executor still is not.
    let c = harness.register(10, "c");
    let moves = plan_moves(space_of(&harness.state), 10);
    assert!(moves.iter().all(|step| step.to == c), "{moves:?}");
    assert_eq!(moves.len(), 3);
}

#[test]
fn p5_4_a_handoff_to_an_executor_that_starts_draining_is_retargeted() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    harness.rebalance(0);
    let b = harness.register(0, "b");
    let c = harness.register(0, "c");
    harness.rebalance(0);
    let to_b: Vec<u32> = harness
        .state
        .shards()
        .iter()
        .filter(|s| s.handoff.as_ref().and_then(|h| h.to.as_deref()) == Some(b.as_str()))
        .map(|s| s.id)
        .collect();
    assert!(!to_b.is_empty(), "B receives something");
    harness.apply(set_draining(10, &b, true));
    let moves = plan_moves(space_of(&harness.state), 10);
    for shard in &to_b {
        let step = moves
            .iter()
            .find(|step| step.shard == *shard)
            .unwrap_or_else(|| panic!("shard {shard} left releasing to draining B: {moves:?}"));
        assert_ne!(step.to, b);
        assert!(step.to == a || step.to == c);
    }
    assert!(moves.iter().all(|step| step.to != b));
}

#[test]
fn p5_4_undrain_brings_the_executor_back_into_the_spread() {
    let mut harness = Harness::initialised(6, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    harness.apply(set_draining(0, &a, true));
    harness.rebalance(0);
    assert!(harness.delivered_shards(&a).is_empty());
    harness.apply(set_draining(10, &a, false));
    let moves = plan_moves(space_of(&harness.state), 10);
    assert_eq!(moves.len(), 3);
    assert!(moves.iter().all(|step| step.to == a), "{moves:?}");
    assert_eq!(harness.delivered_shards(&b).len(), 6);
}

#[test]
fn p5_4_when_every_executor_drains_the_shards_stay_where_they_are() {
    let (mut harness, a, b) = balanced_pair();
    harness.apply(set_draining(10, &a, true));
    harness.apply(set_draining(10, &b, true));
    assert_eq!(plan_rebalance(&harness.state, 10), None);
}

#[test]
fn p3_8_a_lapsed_draining_owner_keeps_its_shards_until_reaped() {
    let (mut harness, a, b) = balanced_pair();
    harness.apply(set_draining(10, &a, true));
    // Only B renews; by `later` A has lapsed, so its shards wait for the reap.
    harness.renew_in_sync(50_000, &b);
    let later = LEASE_MS + 1_000;
    assert!(plan_moves(space_of(&harness.state), later).is_empty());
}

#[test]
fn p2_4_a_plan_made_before_a_drain_is_refused_as_stale() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let stale = plan_rebalance(&harness.state, 0).expect("shards to give");
    harness.apply(set_draining(0, &a, true));
    let outcome = harness.apply_expecting_no_change(stale);
    assert!(
        matches!(outcome.refusal(), Some(RefusalReason::StalePlan { .. })),
        "{outcome:?}"
    );
}

#[test]
fn p5_1_a_plan_moving_a_shard_to_a_draining_executor_is_refused_whole() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    harness.apply(set_draining(0, &b, true));
    let outcome = harness.apply_expecting_no_change(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 0,
        planned_at: harness.state.revision(),
        moves: vec![
            Move {
                shard: 0,
                to: a.clone(),
            },
            Move { shard: 1, to: b },
        ],
    });
    assert!(
        matches!(&outcome.refusal(), Some(RefusalReason::Invalid { detail }) if detail.contains("draining")),
        "{outcome:?}"
    );
}
