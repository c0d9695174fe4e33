//! The delivery planner alone, on explicit leader-clock times (P5.2, P5.3).

use leasehold_api::wire::RevokeReply;

use super::World;
use crate::leader::core::delivery_plan::*;
use crate::lease::{plan_rebalance, Command};

/// Every shard planned onto the executors registered so far.
fn plan(world: &mut World) {
    let plan = plan_rebalance(&world.state, 2).expect("a plan");
    world.apply(plan);
}

fn world() -> World {
    World::new(4, 30_000)
}

fn revokes(round: &Round) -> Vec<(String, u64, Vec<u32>)> {
    round
        .deliveries
        .iter()
        .filter_map(|d| match d {
            Delivery::Revoke {
                executor_id, body, ..
            } => Some((executor_id.clone(), body.revision, body.shards.clone())),
            Delivery::Push { .. } => None,
        })
        .collect()
}

#[test]
fn p5_3_a_queued_push_carries_the_recorded_set_at_the_state_revision() {
    let mut world = world();
    let a = world.register("a", 1);
    plan(&mut world);
    let mut planner = DeliveryPlanner::default();
    let round = planner.plan_round(&world.state, [a.clone(), "ex-gone".to_string()], 10);
    assert!(round.deferred_pushes.is_empty());
    match &round.deliveries[..] {
        [Delivery::Push {
            executor_id, body, ..
        }] => {
            assert_eq!(*executor_id, a);
            assert_eq!(body.revision, world.state.revision());
            assert_eq!(body.shards.len(), 4, "the whole recorded set, not a diff");
        }
        other => panic!("one push for the executor that exists: {other:?}"),
    }
}

#[test]
fn p5_3_failed_pushes_back_off_exponentially_up_to_the_cap() {
    let mut world = world();
    let a = world.register("a", 1);
    let mut planner = DeliveryPlanner::default();
    let mut now = 0;
    let mut delays = Vec::new();
    for _ in 0..8 {
        let PushRecord::Failed { retry_in_ms } = planner.push_outcome(&a, false, now) else {
            panic!("a failure is a failure");
        };
        delays.push(retry_in_ms);
        // Still backing off just before the retry is due: deferred, not dropped.
        let early = planner.plan_round(&world.state, [a.clone()], now + retry_in_ms - 1);
        assert_eq!(early.deferred_pushes, vec![a.clone()]);
        assert!(early.deliveries.is_empty());
        now += retry_in_ms;
        let due = planner.plan_round(&world.state, [a.clone()], now);
        assert_eq!(due.deliveries.len(), 1, "due at {now}");
    }
    assert_eq!(delays, [250, 500, 1_000, 2_000, 4_000, 5_000, 5_000, 5_000]);
    assert_eq!(planner.push_outcome(&a, true, now), PushRecord::Repaired);
    assert_eq!(planner.push_outcome(&a, true, now), PushRecord::Delivered);
}

#[test]
fn p5_2_a_revoke_is_resent_each_interval_until_the_handoff_completes() {
    let mut world = world();
    let a = world.register("a", 1);
    plan(&mut world);
    world.register("b", 1);
    plan(&mut world);
    let mut planner = DeliveryPlanner::default();
    let first = revokes(&planner.plan_round(&world.state, [], 100));
    assert_eq!(first.len(), 1, "{first:?}");
    let (owner, revision, shards) = first[0].clone();
    assert_eq!(owner, a);
    assert_eq!(shards.len(), 2);
    assert!(
        revokes(&planner.plan_round(&world.state, [], 100 + REVOKE_RESEND_INTERVAL_MS - 1))
            .is_empty()
    );
    assert_eq!(
        revokes(&planner.plan_round(&world.state, [], 100 + REVOKE_RESEND_INTERVAL_MS)),
        first
    );
    // The reply acknowledges only what was asked for and released.
    let reply = RevokeReply {
        revision,
        released: vec![shards[0], shards[1], 99],
        ignored: false,
    };
    let ack = acknowledgement(&a, &shards, revision, &reply, 5_000).expect("an ack");
    assert_eq!(
        ack,
        Command::Release {
            now_ms: 5_000,
            executor_id: a.clone(),
            shards: shards.clone(),
            revoke_revision: revision,
        }
    );
    assert_eq!(still_releasing(&world.state, &a, &shards, revision), 2);
    world.apply(ack);
    assert_eq!(still_releasing(&world.state, &a, &shards, revision), 0);
    assert!(revokes(&planner.plan_round(&world.state, [], 10_000)).is_empty());
}

#[test]
fn p5_2_an_ignored_or_empty_revoke_reply_is_no_acknowledgement() {
    let shards = [1, 2];
    let ignored = RevokeReply {
        revision: 7,
        released: vec![1],
        ignored: true,
    };
    assert_eq!(
        acknowledgement(&"ex-1".into(), &shards, 7, &ignored, 1),
        None
    );
    let nothing = RevokeReply {
        revision: 7,
        released: vec![3],
        ignored: false,
    };
    assert_eq!(
        acknowledgement(&"ex-1".into(), &shards, 7, &nothing, 1),
        None
    );
}

/// P18.1: an executor of another namespace is pushed its namespace's shard count and set, and
/// revoked its namespace's shards while they are handed off, which `still_releasing` reads in
/// that namespace.
#[test]
fn p18_1_deliveries_are_in_the_executor_s_namespace() {
    let mut world = world();
    world.create_namespace("kv", 6);
    let a = world.register_in("a", "kv", 1);
    world.move_in("kv", 0..6, &a, 1);
    let mut planner = DeliveryPlanner::default();
    let round = planner.plan_round(&world.state, [a.clone()], 10);
    match &round.deliveries[..] {
        [Delivery::Push { body, .. }] => {
            assert_eq!(body.shard_count, 6, "kv's shard count, not default's 4");
            assert_eq!(body.shards.len(), 6);
        }
        other => panic!("one push: {other:?}"),
    }
    // A second kv executor: a plan moving three of a's shards to it revokes them from a.
    let b = world.register_in("b", "kv", 2);
    world.move_in("kv", 3..6, &b, 2);
    let revoked = revokes(&planner.plan_round(&world.state, [], 100));
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    let (owner, revision, shards) = revoked[0].clone();
    assert_eq!(
        (owner.as_str(), shards.clone()),
        (a.as_str(), vec![3, 4, 5])
    );
    assert_eq!(still_releasing(&world.state, &a, &shards, revision), 3);
}
