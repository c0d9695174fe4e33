//! Resharding (PROTOCOL §20) in the state machine and the planner: a reshard asked for and its
//! refusals, a split given whole to each parent's owner once no handoff is in flight, a merge
//! that first brings each pair to one executor, and every key held by at most one executor at
//! epochs that only rise across layouts (I1, I2 per key).

use leasehold_api::wire::{ReshardKind, DEFAULT_NAMESPACE, MAX_TOTAL_SHARDS, RESHARD_SCHEMA};

use super::super::{
    plan_placement, Command, Epoch, ExecutorId, MoveReason, OperatorAction, Outcome,
    PlacementInputs, RefusalReason, ShardId, MAX_MOVES_PER_PLAN,
};
use super::{plan_and_release, register_command, space_of, Harness, LEASE_MS, TEST_ADMIN};

fn reshard(shard_count: u32) -> Command {
    reshard_of(DEFAULT_NAMESPACE, shard_count)
}

fn reshard_of(name: &str, shard_count: u32) -> Command {
    Command::Operator {
        now_ms: 0,
        actor: TEST_ADMIN.to_owned(),
        action: OperatorAction::Reshard {
            name: name.to_owned(),
            shard_count,
        },
    }
}

fn carry_out(now_ms: u64) -> Command {
    Command::Reshard {
        now_ms,
        namespace: DEFAULT_NAMESPACE.to_owned(),
    }
}

fn pin(shard: ShardId, executor_id: Option<&str>) -> Command {
    Command::Operator {
        now_ms: 0,
        actor: TEST_ADMIN.to_owned(),
        action: OperatorAction::Pin {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            shard,
            executor_id: executor_id.map(str::to_owned),
        },
    }
}

/// Registers `incarnation` as an executor that follows a change of layout (P20.3).
fn register_following(harness: &mut Harness, now_ms: u64, incarnation: &str) -> ExecutorId {
    let mut command = register_command(now_ms, incarnation);
    if let Command::Register {
        follows_generations,
        ..
    } = &mut command
    {
        *follows_generations = true;
    }
    match harness.apply(command) {
        Outcome::Registered { grant, .. } => grant.executor_id,
        other => panic!("register {incarnation}: {other:?}"),
    }
}

/// `default` of `shard_count` shards spread by count over `executors` executors that follow a
/// change of layout, every handoff answered.
fn spread(shard_count: u32, executors: usize) -> (Harness, Vec<ExecutorId>) {
    let mut harness = Harness::initialised(shard_count, LEASE_MS);
    let ids = (0..executors)
        .map(|n| register_following(&mut harness, 0, &format!("e{n}")))
        .collect();
    settle(&mut harness, 0);
    (harness, ids)
}

/// Plans and answers every revoke until nothing moves.
fn settle(harness: &mut Harness, now_ms: u64) {
    for _ in 0..20 {
        if plan_and_release(harness, now_ms).is_empty() {
            return;
        }
    }
    panic!("placement does not settle");
}

/// Who holds each key, by the key's hash modulo `finest` (a multiple of every shard count the
/// namespace has had): the shard it falls in under the current count, its owner and epoch.
fn holders(harness: &Harness, finest: u32) -> Vec<(Option<ExecutorId>, Epoch)> {
    let namespace = harness.state.namespace(DEFAULT_NAMESPACE).unwrap();
    let count = namespace.config.shard_count;
    assert_eq!(finest % count, 0, "{finest} is not a multiple of {count}");
    (0..finest)
        .map(|residue| {
            let shard = namespace.shard(residue % count).unwrap();
            (shard.owner.clone(), shard.epoch)
        })
        .collect()
}

/// Carries out the reshard under way, checking that no key changed owner and every owned key's
/// epoch rose (P20.2, I1 and I2 per key, over the classes of `finest`); what it did.
fn carry_out_keeping_every_key(
    harness: &mut Harness,
    finest: u32,
) -> (ReshardKind, u32, u64, super::super::Effects) {
    let before = holders(harness, finest);
    let Outcome::Resharded {
        kind,
        shard_count,
        generation,
        effects,
        ..
    } = harness.apply(carry_out(0))
    else {
        panic!("the reshard was refused");
    };
    let after = holders(harness, finest);
    for (class, ((owner_before, epoch_before), (owner_after, epoch_after))) in
        before.iter().zip(&after).enumerate()
    {
        assert_eq!(owner_before, owner_after, "key class {class} changed owner");
        if owner_after.is_some() {
            assert!(
                epoch_after > epoch_before,
                "key class {class}: {epoch_before} -> {epoch_after}"
            );
        }
    }
    (kind, shard_count, generation, effects)
}

fn refusal(outcome: Outcome) -> RefusalReason {
    match outcome {
        Outcome::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// P20.1: a reshard doubles or halves the count and nothing else; it is refused while another
/// is under way; a repeat of the one under way, or of one done, changes nothing; each refusal
/// changes nothing.
#[test]
fn p20_1_a_reshard_doubles_or_halves_and_a_repeat_changes_nothing() {
    let (mut harness, _) = spread(4, 2);
    for wanted in [0, 3, 5, 6, 16, 1] {
        let reason = refusal(harness.apply_expecting_no_change(reshard(wanted)));
        assert!(
            matches!(&reason, RefusalReason::Invalid { detail } if detail.contains("P20.1")),
            "{wanted}: {reason:?}"
        );
    }
    // The current count, with none under way: done already.
    assert!(matches!(
        harness.apply_expecting_no_change(reshard(4)),
        Outcome::ReshardRequested { changed: false, .. }
    ));
    assert!(matches!(
        harness.apply(reshard(8)),
        Outcome::ReshardRequested { changed: true, .. }
    ));
    let pending = harness
        .state
        .namespace(DEFAULT_NAMESPACE)
        .unwrap()
        .reshard
        .unwrap();
    assert_eq!((pending.kind, pending.shard_count), (ReshardKind::Split, 8));
    assert!(matches!(
        harness.apply_expecting_no_change(reshard(8)),
        Outcome::ReshardRequested { changed: false, .. }
    ));
    let reason = refusal(harness.apply_expecting_no_change(reshard(2)));
    assert!(
        matches!(&reason, RefusalReason::Conflict { detail } if detail.contains("already resharding")),
        "{reason:?}"
    );
    let reason = refusal(harness.apply_expecting_no_change(reshard_of("nope", 2)));
    assert!(matches!(reason, RefusalReason::UnknownNamespace { .. }));
}

/// P20.3: a namespace reshards only while every executor in it follows a change of layout (an
/// executor mapping keys by the old count would admit keys another holds, I1), and once it has
/// resharded, or while it is resharding, it takes only such executors.
#[test]
fn p20_3_only_executors_that_follow_a_change_of_layout_take_part() {
    let (mut harness, _) = spread(4, 1);
    harness.register(0, "old");
    let reason = refusal(harness.apply_expecting_no_change(reshard(8)));
    assert!(
        matches!(&reason, RefusalReason::Conflict { detail } if detail.contains("P20.3")),
        "{reason:?}"
    );
    let (mut harness, _) = spread(4, 1);
    harness.apply(reshard(8));
    let reason = refusal(harness.apply_expecting_no_change(register_command(0, "old")));
    assert!(
        matches!(&reason, RefusalReason::Conflict { detail } if detail.contains("follows_generations")),
        "{reason:?}"
    );
    harness.apply(carry_out(0));
    assert_eq!(
        harness
            .state
            .namespace(DEFAULT_NAMESPACE)
            .unwrap()
            .generation,
        1
    );
    harness.apply_expecting_no_change(register_command(0, "old"));
    register_following(&mut harness, 0, "new");
}

/// P20.2, I1 and I2 per key: a split is one entry giving shard `s` and `s + N` both to `s`'s
/// owner at an epoch above the parent's (unowned parents' children stay unowned at its epoch),
/// so no key changes owner and every key's epoch rises; pins go to both children; every
/// executor of the namespace is sent its set in the new layout.
#[test]
fn p20_2_a_split_gives_both_children_to_the_parents_owner_at_a_higher_epoch() {
    let (mut harness, ids) = spread(4, 2);
    harness.apply(pin(1, Some(&ids[0])));
    settle(&mut harness, 0);
    harness.apply(reshard(8));
    let (kind, shard_count, generation, effects) = carry_out_keeping_every_key(&mut harness, 8);
    assert_eq!((kind, shard_count, generation), (ReshardKind::Split, 8, 1));
    let namespace = harness.state.namespace(DEFAULT_NAMESPACE).unwrap();
    assert_eq!(
        (namespace.pin(1), namespace.pin(5)),
        (Some(ids[0].as_str()), Some(ids[0].as_str()))
    );
    assert_eq!(namespace.widest_shard_count, 8);
    assert!(namespace.reshard.is_none());
    let mut pushed = effects.assignments.clone();
    pushed.sort();
    let mut members = ids.clone();
    members.sort();
    assert_eq!(pushed, members);
    // The grants carry the new layout.
    let grant = harness
        .state
        .grant_of(harness.state.executor(&ids[0]).unwrap(), 0);
    assert_eq!((grant.shard_count, grant.generation), (8, 1));
    // The plans spread the children with ordinary moves once it is done.
    register_following(&mut harness, 0, "joiner");
    assert!(!plan_and_release(&mut harness, 0).is_empty());
}

/// P20.2: a split waits for the namespace's handoffs in flight, and the plans start none while
/// it waits (a joiner is given nothing until the split is done); the leader's entry is refused,
/// changing nothing, until then.
#[test]
fn p20_2_a_split_waits_for_the_handoffs_in_flight_and_starts_none() {
    let (mut harness, ids) = spread(4, 1);
    let joiner = register_following(&mut harness, 0, "joiner");
    let plan = plan_placement(
        space_of(&harness.state),
        0,
        &PlacementInputs::by_count(),
        MAX_MOVES_PER_PLAN,
    )
    .expect("the joiner gets shards");
    let Command::Rebalance { moves, .. } = &plan.command else {
        panic!("{plan:?}");
    };
    let mut coming: Vec<ShardId> = moves.iter().map(|step| step.shard).collect();
    let Outcome::Rebalanced { effects, .. } = harness.apply(plan.command) else {
        panic!("the plan was refused");
    };
    harness.apply(reshard(8));
    let waiting = harness
        .state
        .namespace(DEFAULT_NAMESPACE)
        .unwrap()
        .reshard_waiting_on();
    assert_eq!(waiting, 2, "two shards releasing to the joiner");
    let reason = refusal(harness.apply_expecting_no_change(carry_out(0)));
    assert!(
        matches!(reason, RefusalReason::Conflict { .. }),
        "{reason:?}"
    );
    // A second joiner: nothing is planned for it while the split waits.
    register_following(&mut harness, 0, "second");
    let plan = plan_placement(
        space_of(&harness.state),
        0,
        &PlacementInputs::by_count(),
        MAX_MOVES_PER_PLAN,
    );
    assert!(plan.is_none(), "{plan:?}");
    for revoke in effects.revokes {
        assert_eq!(revoke.executor_id, ids[0]);
        harness.apply(Command::Release {
            now_ms: 0,
            executor_id: revoke.executor_id,
            shards: revoke.shards,
            revoke_revision: revoke.revision,
        });
    }
    carry_out_keeping_every_key(&mut harness, 8);
    // Each shard the joiner was given, it holds as both children.
    let children: Vec<ShardId> = coming.iter().map(|shard| shard + 4).collect();
    coming.extend(children);
    coming.sort_unstable();
    assert_eq!(harness.delivered_shards(&joiner), coming);
}

/// P20.2, I1 and I2 per key: a merge first brings each pair (`s`, `s + N/2`) to one executor
/// with ordinary handoffs (reason `reshard`, nothing else moving), then one entry makes each
/// pair one shard with the pair's executor at an epoch above both; no key is ever held by two
/// executors, and every key's epoch rises.
#[test]
fn p20_2_a_merge_brings_each_pair_together_then_joins_it_at_a_higher_epoch() {
    let (mut harness, _) = spread(8, 2);
    harness.apply(reshard(4));
    let namespace = harness.state.namespace(DEFAULT_NAMESPACE).unwrap();
    let apart = namespace.reshard_waiting_on();
    assert!(apart > 0, "a spread by count parts some pairs");
    let reason = refusal(harness.apply_expecting_no_change(carry_out(0)));
    assert!(
        matches!(reason, RefusalReason::Conflict { .. }),
        "{reason:?}"
    );
    let mut finest_epochs = holders(&harness, 8);
    let moves = plan_and_release(&mut harness, 0);
    assert!(!moves.is_empty());
    assert!(
        moves
            .iter()
            .all(|(_, _, reason)| *reason == MoveReason::Reshard),
        "{moves:?}"
    );
    assert_eq!(
        harness
            .state
            .namespace(DEFAULT_NAMESPACE)
            .unwrap()
            .reshard_waiting_on(),
        0
    );
    // Every key's epoch rose or stayed through the handoffs.
    for (residue, (_, epoch)) in holders(&harness, 8).into_iter().enumerate() {
        assert!(epoch >= finest_epochs[residue].1);
        finest_epochs[residue].1 = epoch;
    }
    let (kind, shard_count, generation, _) = carry_out_keeping_every_key(&mut harness, 8);
    assert_eq!((kind, shard_count, generation), (ReshardKind::Merge, 4, 1));
    let namespace = harness.state.namespace(DEFAULT_NAMESPACE).unwrap();
    assert_eq!(namespace.widest_shard_count, 8);
    assert_eq!(namespace.shard_number_bound(), 8);
}

/// P20.2: a merge of two shards pinned to different executors is refused (no plan could bring
/// them together), and so is a pin that would part a pair of a merge under way.
#[test]
fn p20_2_shards_pinned_apart_do_not_merge() {
    let (mut harness, ids) = spread(4, 2);
    harness.apply(pin(0, Some(&ids[0])));
    harness.apply(pin(2, Some(&ids[1])));
    let reason = refusal(harness.apply_expecting_no_change(reshard(2)));
    assert!(
        matches!(&reason, RefusalReason::Conflict { detail } if detail.contains("pinned")),
        "{reason:?}"
    );
    harness.apply(pin(2, None));
    assert!(matches!(
        harness.apply(reshard(2)),
        Outcome::ReshardRequested { changed: true, .. }
    ));
    let reason = refusal(harness.apply_expecting_no_change(pin(2, Some(&ids[1]))));
    assert!(
        matches!(&reason, RefusalReason::Conflict { detail } if detail.contains("P20.2")),
        "{reason:?}"
    );
    // Pinning it beside its partner is fine, and the pair goes to the pin.
    harness.apply(pin(2, Some(&ids[0])));
    settle(&mut harness, 0);
    assert!(matches!(
        harness.apply(carry_out(0)),
        Outcome::Resharded { .. }
    ));
    assert_eq!(harness.owner(0), Some(ids[0].as_str()));
    assert_eq!(
        harness.state.namespace(DEFAULT_NAMESPACE).unwrap().pin(0),
        Some(ids[0].as_str())
    );
}

/// P20.1: a split is refused past the cluster's shard quota, counting the splits under way, and
/// a namespace created while one is under way counts it too.
#[test]
fn p20_1_splits_count_against_the_cluster_quota() {
    let half = u32::try_from(MAX_TOTAL_SHARDS / 2).unwrap();
    let (mut harness, _) = spread(half / 2, 0);
    assert!(matches!(
        harness.apply(reshard(half)),
        Outcome::ReshardRequested { changed: true, .. }
    ));
    let create = super::create_namespace_command("kv", half + 1, LEASE_MS, None);
    let reason = refusal(harness.apply_expecting_no_change(create));
    assert!(
        matches!(reason, RefusalReason::Conflict { .. }),
        "{reason:?}"
    );
    harness.apply(carry_out(0));
    let create = super::create_namespace_command("kv", half, LEASE_MS, None);
    assert!(matches!(
        harness.apply(create),
        Outcome::NamespaceCreated { .. }
    ));
    let reason = refusal(harness.apply_expecting_no_change(reshard(half * 2)));
    assert!(
        matches!(&reason, RefusalReason::Conflict { detail } if detail.contains("P20.1")),
        "{reason:?}"
    );
}

/// I2 per key over a split, its spread, a merge and a split again: at every revision each key
/// class has at most one owner (the state holds one per shard), and its epoch never goes back.
#[test]
fn i2_per_key_epochs_only_rise_across_layouts() {
    let (mut harness, _) = spread(2, 3);
    let finest = 8;
    let mut last: Vec<Epoch> = holders(&harness, finest)
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    let mut check = |harness: &Harness| {
        for (residue, (_, epoch)) in holders(harness, finest).into_iter().enumerate() {
            assert!(
                epoch >= last[residue],
                "key class {residue}: {} -> {epoch}",
                last[residue]
            );
            last[residue] = epoch;
        }
    };
    for wanted in [4, 8, 4, 2, 4] {
        harness.apply(reshard(wanted));
        for _ in 0..20 {
            if harness
                .state
                .namespace(DEFAULT_NAMESPACE)
                .unwrap()
                .reshard_waiting_on()
                == 0
            {
                break;
            }
            plan_and_release(&mut harness, 0);
            check(&harness);
        }
        assert!(matches!(
            harness.apply(carry_out(0)),
            Outcome::Resharded { .. }
        ));
        check(&harness);
        settle(&mut harness, 0);
        check(&harness);
    }
    let namespace = harness.state.namespace(DEFAULT_NAMESPACE).unwrap();
    assert_eq!((namespace.config.shard_count, namespace.generation), (4, 5));
}

/// P14.3: the reshard's commands and an executor that follows a change of layout need the
/// schema that brought them; nothing else does.
#[test]
fn p14_3_resharding_needs_its_schema() {
    assert_eq!(reshard(8).required_schema(), RESHARD_SCHEMA);
    assert_eq!(carry_out(0).required_schema(), RESHARD_SCHEMA);
    let mut register = register_command(0, "e");
    assert!(register.required_schema() < RESHARD_SCHEMA);
    if let Command::Register {
        follows_generations,
        ..
    } = &mut register
    {
        *follows_generations = true;
    }
    assert_eq!(register.required_schema(), RESHARD_SCHEMA);
}

/// P20.2: a pair whose executors take no shards (draining) moves whole to the executor holding
/// fewest shards for its capacity, and the merge completes there.
#[test]
fn p20_2_a_pair_on_draining_executors_moves_whole_to_the_least_full() {
    let (mut harness, ids) = spread(4, 2);
    let joiner = register_following(&mut harness, 0, "joiner");
    harness.apply(reshard(2));
    for id in &ids {
        harness.apply(Command::SetDraining {
            now_ms: 0,
            executor_id: id.clone(),
            draining: true,
        });
    }
    settle(&mut harness, 0);
    assert_eq!(
        harness
            .state
            .namespace(DEFAULT_NAMESPACE)
            .unwrap()
            .reshard_waiting_on(),
        0
    );
    assert!(matches!(
        harness.apply(carry_out(0)),
        Outcome::Resharded { .. }
    ));
    assert_eq!(harness.delivered_shards(&joiner), [0, 1]);
}
