//! Replicas and roles (PROTOCOL §19) in the state machine and the planner: the settings and
//! their gate, secondaries placed on distinct executors and zones, readiness from renewals,
//! promotion when a primary's holder leaves, lost replicas waiting out the restore delay for an
//! executor of their name, and planned moves onto a ready secondary.

use std::collections::BTreeSet;

use leasehold_api::wire::{ReplicaSettings, DEFAULT_NAMESPACE, MAX_REPLICAS, REPLICAS_SCHEMA};

use super::super::planner::warm_first;
use super::super::schema::SECOND_RELEASE_SCHEMA;
use super::super::{
    plan_placement, plan_secondaries, Command, Epoch, ExecutorId, Loads, Move, MoveReason,
    OperatorAction, Outcome, PlacementInputs, PlacementOverrides, RefusalReason, Renewal,
    SecondaryChange, ShardId, MAX_MOVES_PER_PLAN,
};
use super::{
    plan_and_release, register_command_with_labels, space_of, Harness, LEASE_MS, TEST_ADMIN,
};

/// `default`'s settings with `replication`, as `leaseholdctl namespace set default --replicas`.
fn set_replicas(replication: ReplicaSettings) -> Command {
    Command::Operator {
        now_ms: 0,
        actor: TEST_ADMIN.to_owned(),
        action: OperatorAction::SetNamespace {
            name: DEFAULT_NAMESPACE.to_owned(),
            lease_duration_ms: LEASE_MS,
            max_executors: None,
            placement: PlacementOverrides::default(),
            replication,
        },
    }
}

fn replicas(replicas: u32) -> ReplicaSettings {
    ReplicaSettings {
        replicas,
        ..ReplicaSettings::default()
    }
}

/// Registers `incarnation` named `name` in `zone` at `now_ms`.
fn register_named(harness: &mut Harness, now_ms: u64, name: &str, zone: &str) -> ExecutorId {
    register_versioned(harness, now_ms, name, zone, None)
}

/// [`register_named`] stating application version `version` (P17.3).
fn register_versioned(
    harness: &mut Harness,
    now_ms: u64,
    name: &str,
    zone: &str,
    version: Option<&str>,
) -> ExecutorId {
    let mut command = register_command_with_labels(now_ms, name, 1, &[("zone", zone)]);
    if let Command::Register {
        name: named,
        incarnation,
        app_version,
        ..
    } = &mut command
    {
        *named = Some(name.to_owned());
        *incarnation = format!("{name}@{now_ms}");
        *app_version = version.map(str::to_owned);
    }
    match harness.apply(command) {
        Outcome::Registered { grant, .. } => grant.executor_id,
        other => panic!("register {name}: {other:?}"),
    }
}

/// Plans the primaries and then the secondaries at `now_ms` until neither changes anything,
/// answering every revoke at once.
fn settle(harness: &mut Harness, now_ms: u64) {
    for _ in 0..50 {
        let _ = harness.apply(Command::CompleteHandoffs { now_ms });
        let moved = !plan_and_release(harness, now_ms).is_empty();
        let placed = place_secondaries(harness, now_ms, 0);
        if !moved && !placed {
            return;
        }
    }
    panic!("placement does not settle");
}

/// Plans `default`'s secondaries at `now_ms` with `budget` balance moves and applies the plan;
/// whether there was one.
fn place_secondaries(harness: &mut Harness, now_ms: u64, budget: usize) -> bool {
    let Some(plan) = plan_secondaries(
        space_of(&harness.state),
        now_ms,
        &PlacementInputs::by_count(),
        budget,
        usize::MAX,
    ) else {
        return false;
    };
    let outcome = harness.apply(plan.command.clone());
    assert!(
        matches!(outcome, Outcome::SecondariesPlaced { .. }),
        "{plan:?}: {outcome:?}"
    );
    true
}

/// Moves each shard's (one) secondary to the executor `wanted` names for it, where it is not
/// there already, in one `PlaceSecondaries` at `now_ms`.
fn move_each_secondary(
    harness: &mut Harness,
    now_ms: u64,
    wanted: impl IntoIterator<Item = (ShardId, ExecutorId)>,
) {
    let changes: Vec<SecondaryChange> = wanted
        .into_iter()
        .filter_map(|(shard, target)| {
            let current = secondaries(harness, shard).first()?.clone();
            (current != target).then_some(SecondaryChange {
                shard,
                add: Some(target),
                drop: Some(current),
            })
        })
        .collect();
    let outcome = harness.apply(Command::PlaceSecondaries {
        now_ms,
        planned_at: harness.state.revision(),
        namespace: DEFAULT_NAMESPACE.into(),
        changes,
    });
    assert!(
        matches!(outcome, Outcome::SecondariesPlaced { .. }),
        "{outcome:?}"
    );
}

/// The executors holding each shard's secondaries, live ones only.
fn secondaries(harness: &Harness, shard: ShardId) -> Vec<ExecutorId> {
    harness
        .state
        .shard(shard)
        .map(|entry| {
            entry
                .live_secondaries()
                .map(|secondary| secondary.executor.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// A renewal of `executor_id` in sync with its set, saying every secondary it holds is ready.
fn renew_ready(harness: &mut Harness, now_ms: u64, executor_id: &str) {
    let ready = harness.state.secondaries_of(executor_id);
    renew_saying(harness, now_ms, executor_id, ready);
}

fn renew_saying(
    harness: &mut Harness,
    now_ms: u64,
    executor_id: &str,
    ready: Vec<(ShardId, Epoch)>,
) {
    let outcome = harness.apply(Command::Renew {
        now_ms,
        renewals: vec![Renewal {
            executor_id: executor_id.to_owned(),
            claims: harness.state.delivered_set(executor_id),
            revision: harness.state.revision(),
            ready,
        }],
    });
    assert!(matches!(outcome, Outcome::Renewed { .. }), "{outcome:?}");
}

/// Four executors in two zones holding `shard_count` shards of `default` at R replicas, settled.
fn replicated(shard_count: u32, r: u32) -> (Harness, Vec<ExecutorId>) {
    let mut harness = Harness::initialised(shard_count, LEASE_MS);
    assert!(matches!(
        harness.apply(set_replicas(replicas(r))),
        Outcome::NamespaceSet { changed: true, .. }
    ));
    let executors = ["a1", "a2", "b1", "b2"]
        .iter()
        .map(|name| register_named(&mut harness, 0, name, &name[..1]))
        .collect();
    settle(&mut harness, 0);
    (harness, executors)
}

/// `shard_count` shards of `default` at two replicas over four executors in one zone, settled.
fn four_in_one_zone(shard_count: u32) -> (Harness, Vec<ExecutorId>) {
    let mut harness = Harness::initialised(shard_count, LEASE_MS);
    harness.apply(set_replicas(replicas(2)));
    let executors: Vec<ExecutorId> = ["e1", "e2", "e3", "e4"]
        .iter()
        .map(|name| register_named(&mut harness, 0, name, "a"))
        .collect();
    settle(&mut harness, 0);
    (harness, executors)
}

/// P19.1, P14.3: only what uses replicas needs their schema; a namespace of one replica, its
/// plans and its renewals stay at the schema they had.
#[test]
fn p19_1_only_what_uses_replicas_needs_schema_13() {
    assert_eq!(set_replicas(replicas(2)).required_schema(), REPLICAS_SCHEMA);
    assert_eq!(
        set_replicas(ReplicaSettings::default()).required_schema(),
        SECOND_RELEASE_SCHEMA
    );
    let place = Command::PlaceSecondaries {
        now_ms: 0,
        planned_at: 0,
        namespace: DEFAULT_NAMESPACE.into(),
        changes: Vec::new(),
    };
    assert_eq!(place.required_schema(), REPLICAS_SCHEMA);
    let renew = |ready: Vec<(ShardId, Epoch)>| Command::Renew {
        now_ms: 0,
        renewals: vec![Renewal {
            executor_id: "ex-1".into(),
            claims: Vec::new(),
            revision: 0,
            ready,
        }],
    };
    assert_eq!(renew(vec![(0, 1)]).required_schema(), REPLICAS_SCHEMA);
    assert_eq!(
        renew(Vec::new()).required_schema(),
        super::super::schema::FIRST_RELEASE_SCHEMA
    );
    assert_eq!(
        super::super::schema::check_proposable(&place, SECOND_RELEASE_SCHEMA)
            .unwrap_err()
            .needed,
        REPLICAS_SCHEMA
    );
}

/// P19.1: a state without replicas is recorded exactly as before they existed: no key for the
/// settings, nor for a shard's empty secondaries.
#[test]
fn p19_1_a_namespace_of_one_replica_records_no_replica_field() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let executor = harness.register(0, "one");
    harness.rebalance(0);
    let bytes = leasehold_raft_store::codec::encode_named("state", &harness.state).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    for key in [
        "replication",
        "secondaries",
        "ready_since_ms",
        "placed_revision",
        "readiness_revision",
    ] {
        assert!(!text.contains(key), "{key} recorded for R = 1");
    }
    assert_eq!(harness.state.delivered_set(&executor).len(), 8);
}

/// P19.5: a renewal that changes readiness moves its namespace's `readiness_revision` (what
/// the routing table is kept for beside the assignment revision) and not the assignment
/// revision, so plans stay current; one that changes nothing moves neither; the field is
/// recorded and read back.
#[test]
fn p19_5_readiness_moves_the_readiness_revision_only() {
    let (mut harness, executors) = replicated(8, 2);
    let namespace = |harness: &Harness| {
        let space = harness.state.namespace(DEFAULT_NAMESPACE).expect("default");
        (space.assignment_revision, space.readiness_revision)
    };
    let (assignment_revision, readiness_revision) = namespace(&harness);
    assert_eq!(readiness_revision, 0, "nothing ready yet");
    let index = harness.next_index();
    renew_ready(&mut harness, 1, &executors[0]);
    assert_eq!(namespace(&harness), (assignment_revision, index));
    renew_ready(&mut harness, 2, &executors[0]);
    assert_eq!(
        namespace(&harness),
        (assignment_revision, index),
        "no change"
    );
    let index = harness.next_index();
    renew_saying(&mut harness, 3, &executors[0], Vec::new());
    assert_eq!(namespace(&harness), (assignment_revision, index));

    let bytes = leasehold_raft_store::codec::encode_named("state", &harness.state).unwrap();
    assert!(String::from_utf8_lossy(&bytes).contains("readiness_revision"));
    let decoded: super::super::LeaseState =
        leasehold_raft_store::codec::decode_named("state", &bytes).unwrap();
    assert_eq!(decoded, harness.state);
}

/// P19.1: settings out of range are refused whole by the state machine too.
#[test]
fn p19_1_the_state_machine_refuses_replica_settings_out_of_range() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    for bad in [
        replicas(0),
        replicas(MAX_REPLICAS + 1),
        ReplicaSettings {
            replicas: 2,
            min_active: 3,
            ..ReplicaSettings::default()
        },
    ] {
        let outcome = harness.apply_expecting_no_change(set_replicas(bad));
        assert!(
            matches!(
                outcome,
                Outcome::Refused {
                    reason: RefusalReason::Invalid { .. }
                }
            ),
            "{bad:?}: {outcome:?}"
        );
    }
}

/// P19.2: with R = 3 over four executors in two zones, every shard keeps a primary and two
/// secondaries on three distinct executors spanning both zones, and each executor holds the
/// same number of replicas within one.
#[test]
fn p19_2_secondaries_go_to_distinct_executors_and_zones_evenly() {
    let (harness, executors) = replicated(16, 3);
    let zone = |id: &str| {
        harness
            .state
            .executor(id)
            .and_then(|e| e.labels.get("zone").cloned())
    };
    let mut replicas_per_executor = std::collections::BTreeMap::<String, usize>::new();
    for shard in 0..16 {
        let owner = harness.owner(shard).expect("owned").to_owned();
        let mut holders = secondaries(&harness, shard);
        assert_eq!(holders.len(), 2, "shard {shard}");
        holders.push(owner);
        let distinct: BTreeSet<&String> = holders.iter().collect();
        assert_eq!(distinct.len(), 3, "shard {shard}: {holders:?}");
        let zones: BTreeSet<Option<String>> = holders.iter().map(|h| zone(h)).collect();
        assert_eq!(zones.len(), 2, "shard {shard} in one zone: {holders:?}");
        for holder in holders {
            *replicas_per_executor.entry(holder).or_default() += 1;
        }
    }
    // 48 replicas over 4 executors.
    for executor in &executors {
        let held = replicas_per_executor.get(executor).copied().unwrap_or(0);
        assert!(
            (11..=13).contains(&held),
            "{executor}: {replicas_per_executor:?}"
        );
    }
}

/// P19.2: zones come before balance while they allow: with three executors in zone a and one in
/// zone b, every shard keeps a replica in each zone, so b's executor holds the secondary of every
/// primary in a.
#[test]
fn p19_2_replicas_span_the_zones_while_the_zones_allow() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    harness.apply(set_replicas(replicas(2)));
    for name in ["a1", "a2", "a3", "b1"] {
        register_named(&mut harness, 0, name, &name[..1]);
    }
    settle(&mut harness, 0);
    for shard in 0..8 {
        let mut holders = secondaries(&harness, shard);
        holders.push(harness.owner(shard).unwrap().to_owned());
        let zones: BTreeSet<String> = holders
            .iter()
            .map(|id| harness.state.executor(id).unwrap().labels["zone"].clone())
            .collect();
        assert_eq!(zones.len(), 2, "shard {shard}: {holders:?}");
    }
}

/// P19.2: a plan the state would not keep is refused whole and changes nothing: a secondary on
/// the shard's primary, one twice, a drop of one the shard lacks, a plan made before the
/// assignment changed.
#[test]
fn p19_2_a_malformed_or_stale_secondaries_plan_changes_nothing() {
    let (mut harness, executors) = replicated(4, 2);
    let owner = harness.owner(0).unwrap().to_owned();
    let secondary = secondaries(&harness, 0)[0].clone();
    let revision = harness.state.revision();
    let plan = |changes: Vec<SecondaryChange>, planned_at| Command::PlaceSecondaries {
        now_ms: 0,
        planned_at,
        namespace: DEFAULT_NAMESPACE.into(),
        changes,
    };
    let change = |add: Option<&str>, drop: Option<&str>| SecondaryChange {
        shard: 0,
        add: add.map(str::to_owned),
        drop: drop.map(str::to_owned),
    };
    for bad in [
        vec![change(Some(&owner), None)],
        vec![change(Some(&secondary), None)],
        vec![change(None, Some(&owner))],
        vec![change(None, None)],
        vec![SecondaryChange {
            shard: 4,
            add: Some(executors[0].clone()),
            drop: None,
        }],
    ] {
        let outcome = harness.apply_expecting_no_change(plan(bad.clone(), revision));
        assert!(
            matches!(
                outcome,
                Outcome::Refused {
                    reason: RefusalReason::Invalid { .. }
                }
            ),
            "{bad:?}: {outcome:?}"
        );
    }
    harness.register(0, "late");
    let stale = plan(vec![change(None, Some(&secondary))], revision);
    let outcome = harness.apply_expecting_no_change(stale);
    assert!(
        matches!(
            outcome,
            Outcome::Refused {
                reason: RefusalReason::StalePlan { .. }
            }
        ),
        "{outcome:?}"
    );
}

/// P19.3: a secondary is ready once its executor says so for the shard's current epoch, from a
/// renewal that had seen the set placing it; it stays ready while the executor says so, and is
/// ready no longer once it does not.
#[test]
fn p19_3_readiness_comes_from_renewals_that_saw_the_placement() {
    let (mut harness, _) = replicated(2, 2);
    let holder = secondaries(&harness, 0)[0].clone();
    let epoch = harness.epoch(0);
    let ready_since = |harness: &Harness| {
        harness
            .state
            .shard(0)
            .and_then(|entry| entry.secondary_on(&holder))
            .and_then(|secondary| secondary.ready_since_ms)
    };
    // Sent before the set that placed it: says nothing of this copy.
    let placed = harness
        .state
        .shard(0)
        .and_then(|entry| entry.secondary_on(&holder))
        .map(|secondary| secondary.placed_revision)
        .unwrap();
    let outcome = harness.apply(Command::Renew {
        now_ms: 10,
        renewals: vec![Renewal {
            executor_id: holder.clone(),
            claims: harness.state.delivered_set(&holder),
            revision: placed - 1,
            ready: vec![(0, epoch)],
        }],
    });
    assert!(matches!(outcome, Outcome::Renewed { .. }));
    assert_eq!(ready_since(&harness), None);
    // Another epoch than the shard's: not this primary's.
    renew_saying(&mut harness, 20, &holder, vec![(0, epoch + 1)]);
    assert_eq!(ready_since(&harness), None);
    renew_saying(&mut harness, 30, &holder, vec![(0, epoch)]);
    assert_eq!(ready_since(&harness), Some(30));
    renew_saying(&mut harness, 40, &holder, vec![(0, epoch)]);
    assert_eq!(
        ready_since(&harness),
        Some(30),
        "ready since it first said so"
    );
    renew_saying(&mut harness, 50, &holder, Vec::new());
    assert_eq!(ready_since(&harness), None);
}

/// P19.4: when a primary's holder is reaped, the shard goes at once, at a new epoch, to the
/// secondary ready longest; a shard without a ready secondary is left for the plans.
#[test]
fn p19_4_a_reaped_primary_goes_to_the_secondary_ready_longest() {
    let (mut harness, _) = replicated(8, 3);
    let victim = harness.owner(0).unwrap().to_owned();
    let held: Vec<ShardId> = harness.delivered_shards(&victim);
    // Shard 0's secondaries: the second-placed is ready first, so it is ready longest.
    let [first, second] = <[ExecutorId; 2]>::try_from(secondaries(&harness, 0)).unwrap();
    let epoch = harness.epoch(0);
    let everyone: Vec<ExecutorId> = harness.state.executors().map(|e| e.id.clone()).collect();
    for (at, executor) in [(100, &second), (200, &first)] {
        renew_ready(&mut harness, at, executor);
    }
    for executor in everyone.iter().filter(|e| **e != victim) {
        renew_ready(&mut harness, 300, executor);
    }
    let lapse_ms = 300 + LEASE_MS + 1;
    let others: Vec<ExecutorId> = everyone.into_iter().filter(|e| *e != victim).collect();
    for executor in &others {
        renew_ready(&mut harness, lapse_ms - 1, executor);
    }
    let outcome = harness.apply(Command::Reap {
        now_ms: lapse_ms,
        executor_ids: vec![victim.clone()],
    });
    assert!(matches!(outcome, Outcome::Reaped { .. }), "{outcome:?}");
    assert_eq!(harness.owner(0), Some(second.as_str()));
    assert_eq!(
        harness.epoch(0),
        epoch + 1,
        "I2: a new epoch for a new primary"
    );
    assert!(
        !secondaries(&harness, 0).contains(&second),
        "the promoted secondary is one no longer"
    );
    for shard in held {
        assert!(
            harness.owner(shard).is_some(),
            "shard {shard} was not promoted"
        );
        // The old primary's replica waits, lost, in the promoted one's place: the shard keeps
        // its three replicas and nothing of it is placed elsewhere before the delay.
        let entry = harness.state.shard(shard).unwrap();
        assert!(
            entry
                .secondary_on(&victim)
                .is_some_and(|secondary| secondary.lost.is_some()),
            "shard {shard}: {entry:?}"
        );
        assert_eq!(entry.secondaries.len(), 2, "shard {shard}: {entry:?}");
    }
    settle(&mut harness, lapse_ms + 2 * LEASE_MS - 1);
    let entry = harness.state.shard(0).unwrap();
    assert!(
        entry
            .secondary_on(&victim)
            .is_some_and(|secondary| secondary.lost.is_some()),
        "placed elsewhere before the delay: {entry:?}"
    );
}

/// P19.4: a lost secondary is not placed again before the restore delay, is placed again after
/// it, and at once when fewer than `min_active` replicas are live.
#[test]
fn p19_4_a_lost_secondary_waits_out_the_delay_unless_min_active_is_broken() {
    for min_active in [1, 3] {
        let (mut harness, _) = replicated(4, 3);
        let settings = ReplicaSettings {
            replicas: 3,
            replica_restore_delay_ms: Some(10_000),
            min_active,
            ..ReplicaSettings::default()
        };
        harness.apply(set_replicas(settings));
        let victim = secondaries(&harness, 0)[0].clone();
        let others: Vec<ExecutorId> = harness
            .state
            .executors()
            .map(|e| e.id.clone())
            .filter(|e| *e != victim)
            .collect();
        let gone_ms = LEASE_MS + 1;
        for executor in &others {
            renew_ready(&mut harness, gone_ms - 1, executor);
        }
        harness.apply(Command::Reap {
            now_ms: gone_ms,
            executor_ids: vec![victim.clone()],
        });
        let lost = |harness: &Harness| {
            harness
                .state
                .shard(0)
                .and_then(|entry| entry.secondary_on(&victim))
                .is_some_and(|secondary| secondary.lost.is_some())
        };
        assert!(lost(&harness));
        if min_active == 3 {
            // Two live replicas of three: placed again at once.
            settle(&mut harness, gone_ms);
            assert!(!lost(&harness));
            assert_eq!(secondaries(&harness, 0).len(), 2);
            continue;
        }
        settle(&mut harness, gone_ms + 10_000);
        assert!(lost(&harness), "placed again before the delay");
        settle(&mut harness, gone_ms + 10_001);
        assert!(!lost(&harness), "still waiting after the delay");
        assert_eq!(secondaries(&harness, 0).len(), 2);
    }
}

/// P19.4: an executor registering again under the same name within the delay takes back the
/// secondaries it held (nothing copied, nothing placed elsewhere); after the delay it does not.
#[test]
fn p19_4_an_executor_back_under_its_name_within_the_delay_gets_its_secondaries_back() {
    for back_after_ms in [5_000, 2 * LEASE_MS + 1] {
        let (mut harness, _) = replicated(8, 2);
        let victim = secondaries(&harness, 0)[0].clone();
        let name = harness
            .state
            .executor(&victim)
            .and_then(|e| e.name.clone())
            .unwrap();
        let zone = harness.state.executor(&victim).unwrap().labels["zone"].clone();
        let held: Vec<ShardId> = harness
            .state
            .secondaries_of(&victim)
            .into_iter()
            .map(|(shard, _)| shard)
            .collect();
        assert!(!held.is_empty());
        let outcome = harness.apply(Command::Deregister {
            now_ms: 1_000,
            executor_id: victim.clone(),
        });
        assert!(matches!(outcome, Outcome::Deregistered { .. }));
        let back_ms = 1_000 + back_after_ms;
        let returned = register_named(&mut harness, back_ms, &name, &zone);
        let back: Vec<ShardId> = harness
            .state
            .secondaries_of(&returned)
            .into_iter()
            .map(|(shard, _)| shard)
            .collect();
        if back_after_ms <= 2 * LEASE_MS {
            assert_eq!(back, held, "the secondaries it held, back");
            assert!(
                plan_secondaries(
                    space_of(&harness.state),
                    back_ms,
                    &PlacementInputs::by_count(),
                    0,
                    usize::MAX
                )
                .is_none(),
                "nothing left to place"
            );
        } else {
            assert!(back.is_empty(), "taken back after the delay: {back:?}");
        }
    }
}

/// P19.3: a primary handed off to its secondary leaves the old holder a secondary in its place:
/// the new primary at a new epoch, the replica count kept, nothing placed.
#[test]
fn p19_3_a_primary_moved_to_its_secondary_swaps_roles() {
    let (mut harness, _) = replicated(4, 2);
    let owner = harness.owner(0).unwrap().to_owned();
    let target = secondaries(&harness, 0)[0].clone();
    let epoch = harness.epoch(0);
    let outcome = harness.apply(Command::Operator {
        now_ms: 0,
        actor: TEST_ADMIN.to_owned(),
        action: OperatorAction::MoveShard {
            namespace: DEFAULT_NAMESPACE.into(),
            shard: 0,
            to: target.clone(),
        },
    });
    let Outcome::Rebalanced { effects, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(
        secondaries(&harness, 0),
        vec![target.clone()],
        "a secondary until it is granted the primary"
    );
    for revoke in effects.revokes {
        harness.apply(Command::Release {
            now_ms: 0,
            executor_id: revoke.executor_id,
            shards: revoke.shards,
            revoke_revision: revoke.revision,
        });
    }
    assert_eq!(harness.owner(0), Some(target.as_str()));
    assert_eq!(harness.epoch(0), epoch + 1);
    assert_eq!(secondaries(&harness, 0), vec![owner]);
}

/// P19.1: lowering R drops the surplus, a secondary not ready before a ready one.
#[test]
fn p19_1_fewer_replicas_drop_the_secondaries_not_ready_first() {
    let (mut harness, _) = replicated(4, 3);
    let [first, second] = <[ExecutorId; 2]>::try_from(secondaries(&harness, 0)).unwrap();
    renew_ready(&mut harness, 10, &first);
    harness.apply(set_replicas(replicas(2)));
    let plan = plan_secondaries(
        space_of(&harness.state),
        10,
        &PlacementInputs::by_count(),
        0,
        usize::MAX,
    )
    .expect("a plan");
    assert!(plan
        .reasons
        .iter()
        .all(|reason| *reason == MoveReason::Replica));
    harness.apply(plan.command);
    assert_eq!(secondaries(&harness, 0), vec![first]);
    assert!(harness
        .state
        .secondaries_of(&second)
        .iter()
        .all(|(s, _)| *s != 0));
    harness.apply(set_replicas(replicas(1)));
    settle(&mut harness, 20);
    for shard in 0..4 {
        assert!(secondaries(&harness, shard).is_empty());
    }
}

/// P19.3: a drained executor's primaries go to their ready secondaries: every one that moves
/// lands on an executor already holding it warm, at a new epoch.
#[test]
fn p19_3_a_drained_primary_moves_to_its_ready_secondary() {
    let (mut harness, executors) = four_in_one_zone(64);
    for executor in &executors {
        renew_ready(&mut harness, 10, executor);
    }
    // Whichever executor drains: each one's primaries have their secondaries spread evenly over
    // the others, so each receiver's room matches what it holds warm.
    for drained in &executors {
        let mut harness = harness.clone();
        let held = harness.delivered_shards(drained);
        let warm_before: Vec<(ShardId, ExecutorId)> = held
            .iter()
            .map(|&shard| (shard, secondaries(&harness, shard)[0].clone()))
            .collect();
        harness.apply(Command::SetDraining {
            now_ms: 20,
            executor_id: drained.clone(),
            draining: true,
        });
        let moves = plan_and_release(&mut harness, 20);
        assert_eq!(moves.len(), held.len(), "{moves:?}");
        for (shard, warm) in warm_before {
            assert_eq!(
                harness.owner(shard),
                Some(warm.as_str()),
                "{drained} drained: shard {shard} did not move to its ready secondary"
            );
        }
    }
}

/// P19.3 with P17.3: during a rolling deploy a drained primary goes to the newest version only,
/// and there to its ready secondary when it has one: an executor restarted as the new version
/// under its name took its secondaries back and is warm for them.
#[test]
fn p19_3_p17_3_in_a_rollout_a_moving_primary_goes_to_its_ready_secondary_of_the_new_version() {
    let mut harness = Harness::initialised(24, LEASE_MS);
    harness.apply(set_replicas(replicas(2)));
    let old: Vec<ExecutorId> = ["e1", "e2", "e3"]
        .iter()
        .map(|name| register_versioned(&mut harness, 0, name, "a", Some("1.0.0")))
        .collect();
    settle(&mut harness, 0);
    for executor in &old {
        renew_ready(&mut harness, 10, executor);
    }
    // e1 is replaced by the new version under its name; a new executor of it joins too.
    harness.apply(Command::SetDraining {
        now_ms: 20,
        executor_id: old[0].clone(),
        draining: true,
    });
    plan_and_release(&mut harness, 20);
    harness.apply(Command::Deregister {
        now_ms: 30,
        executor_id: old[0].clone(),
    });
    let e1 = register_versioned(&mut harness, 40, "e1", "a", Some("2.0.0"));
    let e4 = register_versioned(&mut harness, 40, "e4", "a", Some("2.0.0"));
    renew_ready(&mut harness, 50, &e1);
    let warm_on_e1: Vec<ShardId> = harness
        .delivered_shards(&old[1])
        .into_iter()
        .filter(|&shard| {
            harness
                .state
                .shard(shard)
                .and_then(|entry| entry.secondary_on(&e1))
                .is_some_and(|secondary| secondary.ready_since_ms.is_some())
        })
        .collect();
    assert!(
        !warm_on_e1.is_empty(),
        "e1 took back secondaries of e2's primaries"
    );
    harness.apply(Command::SetDraining {
        now_ms: 60,
        executor_id: old[1].clone(),
        draining: true,
    });
    plan_and_release(&mut harness, 60);
    for shard in warm_on_e1 {
        assert_eq!(harness.owner(shard), Some(e1.as_str()), "shard {shard}");
    }
    assert!(
        !harness.delivered_shards(&e4).is_empty(),
        "the cold ones spread over the new version"
    );
}

/// P19.3 with P15.2: placed by load, a drained primary goes to its ready secondary when it fits
/// there inside the band, even where the fewest-shards rule would spread it elsewhere.
#[test]
fn p19_3_p15_2_by_load_a_drained_primary_goes_to_its_ready_secondary() {
    let (mut harness, executors) = four_in_one_zone(48);
    // Every secondary of e1's primaries on e2, so the fewest-shards rule alone would spread them.
    let drained = executors[0].clone();
    let wanted: Vec<(ShardId, ExecutorId)> = harness
        .delivered_shards(&drained)
        .into_iter()
        .map(|shard| (shard, executors[1].clone()))
        .collect();
    move_each_secondary(&mut harness, 5, wanted);
    for executor in &executors {
        renew_ready(&mut harness, 10, executor);
    }
    let warm_before: Vec<(ShardId, ExecutorId)> = harness
        .delivered_shards(&drained)
        .into_iter()
        .map(|shard| (shard, secondaries(&harness, shard)[0].clone()))
        .collect();
    assert!(warm_before.iter().all(|(_, warm)| *warm == executors[1]));
    harness.apply(Command::SetDraining {
        now_ms: 20,
        executor_id: drained,
        draining: true,
    });
    // A band wide enough for e2 to take every one of them.
    let inputs = PlacementInputs {
        loads: Loads::Reported(vec![1.0; 48]),
        tolerance: 1.0,
        ..PlacementInputs::by_count()
    };
    let plan =
        plan_placement(space_of(&harness.state), 20, &inputs, MAX_MOVES_PER_PLAN).expect("a plan");
    let Command::Rebalance { moves, .. } = &plan.command else {
        panic!("{plan:?}");
    };
    for (shard, warm) in warm_before {
        let step = moves
            .iter()
            .find(|step| step.shard == shard)
            .expect("moved");
        assert_eq!(
            step.to, warm,
            "shard {shard} did not go to its ready secondary"
        );
    }
}

/// P19.3: a joiner's share goes to it warm: it first gets secondaries of the shards the plan
/// would give it, and their primaries once it says they are ready; the shards keep their
/// replica count. One that never says so gets its share cold after the restore delay.
#[test]
fn p19_3_a_joiner_is_given_secondaries_first_and_primaries_once_ready() {
    for says_ready in [true, false] {
        let mut harness = Harness::initialised(12, LEASE_MS);
        harness.apply(set_replicas(ReplicaSettings {
            replicas: 2,
            replica_restore_delay_ms: Some(5_000),
            ..ReplicaSettings::default()
        }));
        let executors: Vec<ExecutorId> = ["e1", "e2", "e3"]
            .iter()
            .map(|name| register_named(&mut harness, 0, name, "a"))
            .collect();
        settle(&mut harness, 0);
        for executor in &executors {
            renew_ready(&mut harness, 10, executor);
        }
        let joiner = register_named(&mut harness, 20, "e4", "a");
        assert!(
            plan_and_release(&mut harness, 20).is_empty(),
            "nothing moves cold"
        );
        assert!(place_secondaries(&mut harness, 20, 0));
        let warming: Vec<ShardId> = harness
            .state
            .secondaries_of(&joiner)
            .into_iter()
            .map(|(shard, _)| shard)
            .collect();
        assert_eq!(warming.len(), 3, "its share by count, as secondaries first");
        assert!(harness.delivered_shards(&joiner).is_empty());
        let now_ms = if says_ready {
            renew_ready(&mut harness, 30, &joiner);
            30
        } else {
            assert!(
                plan_and_release(&mut harness, 5_019).is_empty(),
                "not before the delay"
            );
            5_020 + 20
        };
        let moved = plan_and_release(&mut harness, now_ms);
        assert_eq!(moved.len(), 3, "{moved:?}");
        assert_eq!(harness.delivered_shards(&joiner), warming);
        settle(&mut harness, now_ms);
        for shard in 0..12 {
            assert_eq!(secondaries(&harness, shard).len(), 1, "shard {shard}");
        }
    }
}

/// P19.3: within the balance budget, each executor's primaries' secondaries are spread evenly
/// over the other executors, so whichever drains finds room where its primaries are warm.
#[test]
fn p19_3_each_executors_secondaries_are_spread_evenly_within_the_budget() {
    let (mut harness, executors) = four_in_one_zone(24);
    // Executors in pairs, each holding every secondary of its partner's primaries: the weighted
    // loads are even, the spread of each one's secondaries is not.
    let partner = |index: usize| executors[index ^ 1].clone();
    let wanted: Vec<(ShardId, ExecutorId)> = (0..24)
        .filter_map(|shard| {
            let owner = harness.owner(shard)?;
            let index = executors.iter().position(|e| e == owner)?;
            Some((shard, partner(index)))
        })
        .collect();
    move_each_secondary(&mut harness, 5, wanted);
    let spread = |harness: &Harness| -> Vec<usize> {
        executors[1..]
            .iter()
            .map(|other| {
                harness
                    .delivered_shards(&executors[0])
                    .into_iter()
                    .filter(|&shard| secondaries(harness, shard).contains(other))
                    .count()
            })
            .collect()
    };
    // Ready: a secondary still warming up is left where it is.
    for executor in &executors {
        renew_ready(&mut harness, 8, executor);
    }
    assert_eq!(spread(&harness), vec![6, 0, 0]);
    assert!(
        plan_secondaries(
            space_of(&harness.state),
            10,
            &PlacementInputs::by_count(),
            0,
            usize::MAX
        )
        .is_none(),
        "even by weighted load"
    );
    // Budget 0: nothing moves for it.
    assert!(!place_secondaries(&mut harness, 10, 0));
    for _ in 0..20 {
        if !place_secondaries(&mut harness, 10, 2) {
            break;
        }
    }
    let after = spread(&harness);
    assert!(
        after.iter().max().unwrap() - after.iter().min().unwrap() <= 1,
        "{after:?}"
    );
}

/// P19.3, P15.2: while a move waits for a warm copy on its target, a move for balance to the
/// executor it takes a shard from waits too, even onto a ready secondary: the planner gave it
/// that shard counting on its own leaving, so made alone it would hold more than the plan meant.
/// A move to anyone else, and a shard without a live holder, go now.
#[test]
fn p19_3_a_move_to_an_executor_a_waiting_move_takes_from_waits_too() {
    let (mut harness, executors) = replicated(8, 2);
    for executor in &executors {
        renew_ready(&mut harness, 10, executor);
    }
    let cold_shard: ShardId = 0;
    let giver = harness.owner(cold_shard).unwrap().to_owned();
    let cold_target = executors
        .iter()
        .find(|e| **e != giver && !secondaries(&harness, cold_shard).contains(e))
        .unwrap()
        .clone();
    // A shard with a ready secondary on the giver, and one with a ready secondary elsewhere.
    let onto_giver: ShardId = (1..8)
        .find(|&shard| secondaries(&harness, shard).contains(&giver))
        .unwrap();
    let elsewhere: ShardId = (1..8)
        .find(|&shard| {
            shard != onto_giver
                && !secondaries(&harness, shard).contains(&giver)
                && harness.owner(shard) != Some(giver.as_str())
        })
        .unwrap();
    let elsewhere_target = secondaries(&harness, elsewhere)[0].clone();
    let step = |shard: ShardId, to: &str| Move {
        shard,
        to: to.to_owned(),
    };
    let space = space_of(&harness.state);
    let cold = (step(cold_shard, &cold_target), MoveReason::Join);
    let to_giver = (step(onto_giver, &giver), MoveReason::Balance);
    let to_other = (step(elsewhere, &elsewhere_target), MoveReason::Balance);
    let moves = vec![cold.clone(), to_giver.clone(), to_other.clone()];
    let (now, waiting) = warm_first(space, 10, moves);
    assert_eq!(waiting, vec![cold.0.clone()]);
    assert_eq!(
        now,
        vec![to_other.clone()],
        "the move onto the giver waits with the cold join"
    );
    // Once nothing waits, the move onto the giver is made.
    let (now, waiting) = warm_first(space, 10, vec![to_giver.clone(), to_other.clone()]);
    assert!(waiting.is_empty());
    assert_eq!(now, vec![to_giver, to_other]);
}

/// P19.4: an executor back under its name within the delay takes back its replicas, and the
/// joins that give it primaries again wait for those to be ready without a secondary added
/// anywhere else: the shard's own secondary on it swaps roles with the primary.
#[test]
fn p19_4_an_executor_back_under_its_name_gets_no_secondary_placed_beside_its_own() {
    let (mut harness, executors) = replicated(32, 2);
    for executor in &executors {
        renew_ready(&mut harness, 10, executor);
    }
    let victim = harness.owner(0).unwrap().to_owned();
    let name = harness
        .state
        .executor(&victim)
        .and_then(|e| e.name.clone())
        .unwrap();
    let zone = harness.state.executor(&victim).unwrap().labels["zone"].clone();
    let lapse_ms = 10 + LEASE_MS + 1;
    for executor in executors.iter().filter(|e| **e != victim) {
        renew_ready(&mut harness, lapse_ms - 1, executor);
    }
    harness.apply(Command::Reap {
        now_ms: lapse_ms,
        executor_ids: vec![victim.clone()],
    });
    let back_ms = lapse_ms + 1_000;
    let returned = register_named(&mut harness, back_ms, &name, &zone);
    if let Some(plan) = plan_secondaries(
        space_of(&harness.state),
        back_ms,
        &PlacementInputs::by_count(),
        0,
        usize::MAX,
    ) {
        let Command::PlaceSecondaries { changes, .. } = &plan.command else {
            panic!("{plan:?}");
        };
        let elsewhere: Vec<&SecondaryChange> = changes
            .iter()
            .filter(|change| change.add.as_ref().is_some_and(|add| *add != returned))
            .collect();
        assert!(
            elsewhere.is_empty(),
            "secondaries placed beside the returned executor's own: {elsewhere:?}"
        );
    }
}
