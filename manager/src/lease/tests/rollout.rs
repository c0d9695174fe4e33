//! Version-aware placement (P17.3): while the executors that take shards run more than one
//! application version, shards move only to the newest, and only those that must.

use super::super::planner::rollout_target;
use super::super::{plan_rebalance, Command, MoveReason, Outcome, DEFAULT_CAPACITY};
use super::{plan_and_release, Harness, LEASE_MS};
use crate::lease::tests::space_of;
use crate::lease::{plan_placement, Loads, PlacementInputs};

fn register_version(
    harness: &mut Harness,
    now_ms: u64,
    incarnation: &str,
    version: &str,
) -> String {
    let outcome = harness.apply(Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms,
        incarnation: incarnation.to_owned(),
        address: format!("http://{incarnation}.test"),
        name: None,
        credential_sha256: None,
        capacity: DEFAULT_CAPACITY,
        app_version: Some(version.to_owned()),
        labels: Default::default(),
    });
    match outcome {
        Outcome::Registered { grant, .. } => grant.executor_id,
        other => panic!("register {incarnation} failed: {other:?}"),
    }
}

fn versions_of(harness: &Harness, moves: &[(u32, String, MoveReason)]) -> Vec<Option<String>> {
    moves
        .iter()
        .map(|(_, to, _)| {
            harness
                .state
                .executor(to)
                .and_then(|executor| executor.app_version.clone())
        })
        .collect()
}

/// P17.3, the B11 deploy in the pure planner: four executors of 1.0 over 64 shards are replaced
/// one at a time by executors of 2.0 (start the new one, drain the old one, it leaves). Joiners
/// get nothing while the versions are mixed, each drained shard goes to an executor of 2.0, every
/// shard changes hands exactly once, and the fleet ends balanced with nothing left to move.
#[test]
fn p17_3_a_rolling_deploy_moves_each_shard_once_and_only_onto_the_newest_version() {
    let mut harness = Harness::initialised(64, LEASE_MS);
    let old: Vec<String> = (0..4)
        .map(|i| register_version(&mut harness, 0, &format!("old-{i}"), "1.0"))
        .collect();
    plan_and_release(&mut harness, 0);
    for executor in &old {
        assert_eq!(harness.delivered_shards(executor).len(), 16);
    }
    let epochs_before: Vec<u64> = (0..64).map(|shard| harness.epoch(shard)).collect();

    for (step, leaving) in old.iter().enumerate() {
        let now_ms = 1_000 * (step as u64 + 1);
        let joined = register_version(&mut harness, now_ms, &format!("new-{step}"), "2.0");
        assert_eq!(
            rollout_target(space_of(&harness.state), now_ms),
            Some("2.0")
        );
        assert_eq!(
            plan_placement(
                space_of(&harness.state),
                now_ms,
                &PlacementInputs::by_count(),
                10_000
            ),
            None,
            "step {step}: a joiner waits while the versions are mixed"
        );
        harness.apply(Command::SetDraining {
            now_ms,
            executor_id: leaving.clone(),
            draining: true,
        });
        let moves = plan_and_release(&mut harness, now_ms);
        assert_eq!(
            moves.len(),
            16,
            "step {step}: the drained executor's shards, no more"
        );
        assert!(
            versions_of(&harness, &moves)
                .iter()
                .all(|version| version.as_deref() == Some("2.0")),
            "step {step}: {moves:?}"
        );
        assert!(moves
            .iter()
            .all(|(_, _, reason)| *reason == MoveReason::Drain));
        assert_eq!(harness.delivered_shards(&joined).len(), 16, "step {step}");
        harness.apply(Command::Deregister {
            now_ms,
            executor_id: leaving.clone(),
        });
    }
    assert_eq!(
        rollout_target(space_of(&harness.state), 10_000),
        None,
        "one version left"
    );
    assert_eq!(
        plan_rebalance(&harness.state, 10_000),
        None,
        "balanced already"
    );
    for shard in 0..64 {
        assert_eq!(
            harness.epoch(shard),
            epochs_before[shard as usize] + 1,
            "shard {shard} changed hands exactly once"
        );
    }
}

/// P17.3: the versions are compared by their order, not their spelling, and draining executors
/// take no part; an executor that states no version is older than one that does.
#[test]
fn p17_3_a_rollout_is_mixed_versions_among_the_executors_that_take_shards() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let a = register_version(&mut harness, 0, "a", "1.4");
    register_version(&mut harness, 0, "b", "1.4.0+build7");
    assert_eq!(
        rollout_target(space_of(&harness.state), 0),
        None,
        "one version, two spellings"
    );
    let c = register_version(&mut harness, 0, "c", "1.10");
    assert_eq!(rollout_target(space_of(&harness.state), 0), Some("1.10"));
    harness.apply(Command::SetDraining {
        now_ms: 0,
        executor_id: c,
        draining: true,
    });
    assert_eq!(
        rollout_target(space_of(&harness.state), 0),
        None,
        "a draining 1.10 takes nothing"
    );
    harness.register(0, "no-version");
    assert_eq!(rollout_target(space_of(&harness.state), 0), Some("1.4"));
    // Lapsed executors take no part either.
    assert_eq!(
        rollout_target(space_of(&harness.state), LEASE_MS + 1),
        None,
        "every lease lapsed"
    );
    assert!(harness.state.executor(&a).is_some());
}

/// P17.3: with mixed versions and loads reported, balance moves wait too, whatever the spread.
#[test]
fn p17_3_balance_waits_while_the_versions_are_mixed() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let a = register_version(&mut harness, 0, "a", "1");
    plan_and_release(&mut harness, 0);
    assert_eq!(harness.delivered_shards(&a).len(), 8);
    register_version(&mut harness, 0, "b", "1");
    register_version(&mut harness, 0, "c", "2");
    let inputs = PlacementInputs {
        loads: Loads::Reported(vec![1.0; 8]),
        balance_moves_allowed: 8,
        ..PlacementInputs::by_count()
    };
    assert_eq!(
        plan_placement(space_of(&harness.state), 0, &inputs, 100),
        None
    );
    assert_eq!(
        plan_placement(
            space_of(&harness.state),
            0,
            &PlacementInputs::by_count(),
            100
        ),
        None
    );
}

/// P17.3: a handoff under way to an executor of an older version is cancelled when a newer one
/// joins (its owner keeps the shard: nothing changes hands); a shard that must move goes to the
/// newest.
#[test]
fn p17_3_a_handoff_to_an_older_version_is_cancelled_when_a_newer_one_joins() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let a = register_version(&mut harness, 0, "a", "1");
    plan_and_release(&mut harness, 0);
    let b = register_version(&mut harness, 0, "b", "1");
    // The spread to B starts: four of A's shards are releasing to B.
    harness.rebalance(0);
    let releasing: Vec<u32> = (0..8)
        .filter(|&shard| {
            harness
                .state
                .shard(shard)
                .is_some_and(|entry| entry.handoff.is_some())
        })
        .collect();
    assert_eq!(releasing.len(), 4);
    register_version(&mut harness, 1, "c", "2");
    let moves = plan_and_release(&mut harness, 1);
    assert_eq!(moves.len(), 4, "{moves:?}");
    for (shard, to, reason) in &moves {
        assert!(releasing.contains(shard));
        assert_eq!(to, &a, "back to its owner");
        assert_eq!(*reason, MoveReason::Cancel);
    }
    assert_eq!(harness.delivered_shards(&a).len(), 8);
    assert!(harness.delivered_shards(&b).is_empty());
}

/// P17.3: shards that must move are spread over the newest version's executors by capacity,
/// and an unowned shard is placed there too.
#[test]
fn p17_3_must_move_shards_spread_over_the_newest_version_by_count() {
    let mut harness = Harness::initialised(12, LEASE_MS);
    let old = register_version(&mut harness, 0, "old", "1");
    plan_and_release(&mut harness, 0);
    let new_a = register_version(&mut harness, 0, "new-a", "2");
    let new_b = register_version(&mut harness, 0, "new-b", "2");
    harness.apply(Command::SetDraining {
        now_ms: 0,
        executor_id: old.clone(),
        draining: true,
    });
    // A second old executor keeps the versions mixed.
    let other_old = register_version(&mut harness, 0, "other-old", "1");
    let moves = plan_and_release(&mut harness, 0);
    assert_eq!(moves.len(), 12);
    assert_eq!(harness.delivered_shards(&new_a).len(), 6);
    assert_eq!(harness.delivered_shards(&new_b).len(), 6);
    assert!(harness.delivered_shards(&other_old).is_empty());
}
