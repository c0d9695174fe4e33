//! Operator controls (P17.4): maintenance mode, shard moves and pins, and the audit log that
//! records who did each, in the state machine and the planner.

use leasehold_api::wire::MAX_AUDIT_RECORDS;

use super::super::{
    plan_rebalance, Command, MembershipChange, MoveReason, OperatorAction, Outcome, RefusalReason,
};
use super::{plan_and_release, Harness, LEASE_MS};

const ADMIN: &str = "admin CN=alice";

fn operator(now_ms: u64, action: OperatorAction) -> Command {
    Command::Operator {
        now_ms,
        actor: ADMIN.to_owned(),
        action,
    }
}

fn maintenance(now_ms: u64, on: bool) -> Command {
    operator(now_ms, OperatorAction::SetMaintenance { on })
}

fn pin(now_ms: u64, shard: u32, executor_id: Option<&str>) -> Command {
    operator(
        now_ms,
        OperatorAction::Pin {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            shard,
            executor_id: executor_id.map(str::to_owned),
        },
    )
}

fn move_shard(now_ms: u64, shard: u32, to: &str) -> Command {
    operator(
        now_ms,
        OperatorAction::MoveShard {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            shard,
            to: to.to_owned(),
        },
    )
}

/// Two live executors splitting 8 shards 4/4, every grant at time 0.
fn balanced_pair() -> (Harness, String, String) {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    harness.rebalance(0);
    (harness, a, b)
}

/// P17.4: in maintenance mode a joiner gets nothing and a drain moves nothing, but a departed
/// executor's shards are placed; turned off, the usual planner runs again.
#[test]
fn p17_4_maintenance_freezes_joins_and_drains_but_places_shards_nobody_holds() {
    let (mut harness, a, b) = balanced_pair();
    assert_eq!(
        harness.apply(maintenance(10, true)),
        Outcome::MaintenanceSet {
            on: true,
            changed: true
        }
    );
    let c = harness.register(10, "c");
    assert_eq!(plan_rebalance(&harness.state, 10), None, "the joiner waits");
    harness.apply(Command::SetDraining {
        now_ms: 10,
        executor_id: a.clone(),
        draining: true,
    });
    assert_eq!(plan_rebalance(&harness.state, 10), None, "the drain waits");
    // B leaves: its shards have nobody, so they are placed, on C (A drains).
    harness.apply(Command::Deregister {
        now_ms: 20,
        executor_id: b.clone(),
    });
    let moves = plan_and_release(&mut harness, 20);
    assert_eq!(moves.len(), 4, "{moves:?}");
    assert!(moves.iter().all(|(_, to, _)| to == &c), "{moves:?}");
    assert_eq!(harness.delivered_shards(&a).len(), 4, "A keeps its shards");
    assert_eq!(plan_rebalance(&harness.state, 20), None);
    harness.apply(maintenance(30, false));
    let moves = plan_and_release(&mut harness, 30);
    assert_eq!(moves.len(), 4, "A's drain goes on: {moves:?}");
    assert!(harness.delivered_shards(&a).is_empty());
}

/// P17.4, P2.4: maintenance makes a plan made before it stale, and a repeat changes nothing and
/// records nothing.
#[test]
fn p17_4_maintenance_is_idempotent_and_stales_older_plans() {
    let (mut harness, _a, _b) = balanced_pair();
    harness.register(5, "c");
    let plan = plan_rebalance(&harness.state, 5).expect("a plan for the joiner");
    harness.apply(maintenance(6, true));
    let stale = harness.apply(plan);
    assert!(
        matches!(
            stale,
            Outcome::Refused {
                reason: RefusalReason::StalePlan { .. }
            }
        ),
        "{stale:?}"
    );
    let outcome = harness.apply_expecting_no_change(maintenance(7, true));
    assert_eq!(
        outcome,
        Outcome::MaintenanceSet {
            on: true,
            changed: false
        }
    );
    assert_eq!(
        harness.state.audit().count(),
        1,
        "only the change is recorded"
    );
}

/// P17.4: a pinned shard goes to its executor and stays there; unpinned, balance may move it
/// again. A pin to an executor that drains is ignored, and a pin goes with its executor.
#[test]
fn p17_4_the_planner_honours_pins() {
    let (mut harness, a, b) = balanced_pair();
    let a_shard = harness.delivered_shards(&a)[0];
    harness.apply(pin(10, a_shard, Some(&b)));
    assert_eq!(harness.state.pin(a_shard), Some(b.as_str()));
    let moves = plan_and_release(&mut harness, 10);
    assert!(
        moves.contains(&(a_shard, b.clone(), MoveReason::Pin)),
        "{moves:?}"
    );
    assert!(harness.delivered_shards(&b).contains(&a_shard));
    // The balance that follows never takes it back.
    for now_ms in [11, 12, 13] {
        plan_and_release(&mut harness, now_ms);
        assert!(harness.delivered_shards(&b).contains(&a_shard));
    }
    // A joiner by count: the pinned shard stays.
    let c = harness.register(20, "c");
    plan_and_release(&mut harness, 20);
    assert!(harness.delivered_shards(&b).contains(&a_shard));
    assert!(!harness.delivered_shards(&c).is_empty());
    // A draining pin target: ignored, the shard leaves with the drain.
    harness.apply(Command::SetDraining {
        now_ms: 30,
        executor_id: b.clone(),
        draining: true,
    });
    plan_and_release(&mut harness, 30);
    assert!(harness.delivered_shards(&b).is_empty());
    // B leaves: its pin goes with it.
    harness.apply(Command::Deregister {
        now_ms: 40,
        executor_id: b.clone(),
    });
    assert_eq!(harness.state.pin(a_shard), None);
    harness.apply(pin(41, a_shard, Some(&a)));
    let unpinned = harness.apply(pin(42, a_shard, None));
    assert!(
        matches!(
            unpinned,
            Outcome::PinSet {
                changed: true,
                executor_id: None,
                ..
            }
        ),
        "{unpinned:?}"
    );
}

/// P17.4, I6: a pin or a move names a shard in range and a registered executor, and changes
/// nothing otherwise.
#[test]
fn p17_4_a_pin_or_move_of_an_unknown_shard_or_executor_is_not_found_and_changes_nothing() {
    let (mut harness, a, _b) = balanced_pair();
    for command in [
        pin(10, 99, Some(&a)),
        pin(10, 1, Some("ex-999")),
        move_shard(10, 99, &a),
        move_shard(10, 1, "ex-999"),
    ] {
        assert_eq!(
            harness.apply_expecting_no_change(command),
            Outcome::NotFound
        );
    }
    assert_eq!(harness.state.audit().count(), 0);
}

/// P17.4, P5.2: an operator's move is a handoff now, recorded; refused (409, nothing changed)
/// onto an executor that takes no shards, onto the shard's holder, or away from a pin.
#[test]
fn p17_4_a_move_is_a_handoff_and_is_refused_where_it_cannot_go() {
    let (mut harness, a, b) = balanced_pair();
    let shard = harness.delivered_shards(&a)[0];
    let outcome = harness.apply(move_shard(10, shard, &b));
    let Outcome::Rebalanced {
        releasing, effects, ..
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(releasing, vec![shard]);
    assert_eq!(effects.revokes[0].executor_id, a, "a revoke first (P5.2)");
    let again = harness.apply_expecting_no_change(move_shard(11, shard, &b));
    assert!(
        matches!(
            again,
            Outcome::Refused {
                reason: RefusalReason::Conflict { .. }
            }
        ),
        "{again:?}"
    );
    // Pinned to A: a move to B is refused until it is unpinned.
    let other = harness.delivered_shards(&a)[0];
    harness.apply(pin(12, other, Some(&a)));
    let refused = harness.apply_expecting_no_change(move_shard(13, other, &b));
    assert!(
        matches!(&refused, Outcome::Refused { reason: RefusalReason::Conflict { detail } } if detail.contains("pinned")),
        "{refused:?}"
    );
    harness.apply(Command::SetDraining {
        now_ms: 14,
        executor_id: b.clone(),
        draining: true,
    });
    let third = harness.delivered_shards(&a)[1];
    let refused = harness.apply_expecting_no_change(move_shard(15, third, &b));
    assert!(
        matches!(&refused, Outcome::Refused { reason: RefusalReason::Conflict { detail } } if detail.contains("draining")),
        "{refused:?}"
    );
    let lapsed = harness.apply_expecting_no_change(move_shard(LEASE_MS + 10, third, &a));
    assert!(matches!(lapsed, Outcome::Refused { .. }), "{lapsed:?}");
}

/// P17.4: every action that changed something is recorded with its actor, time and revision,
/// in order; membership changes too; the log keeps the newest `MAX_AUDIT_RECORDS`.
#[test]
fn p17_4_the_audit_log_records_who_did_what_and_keeps_the_newest() {
    let (mut harness, a, b) = balanced_pair();
    let first = harness.next_index();
    harness.apply(operator(
        100,
        OperatorAction::SetDraining {
            executor_id: a.clone(),
            draining: true,
        },
    ));
    harness.apply(operator(
        101,
        OperatorAction::Membership {
            change: MembershipChange::Added {
                node_id: 4,
                address: "https://m4:7000".into(),
            },
        },
    ));
    let records: Vec<_> = harness.state.audit().cloned().collect();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].revision, first);
    assert_eq!(records[0].at_ms, 100);
    assert_eq!(records[0].actor, ADMIN);
    assert_eq!(
        records[0].action,
        OperatorAction::SetDraining {
            executor_id: a.clone(),
            draining: true
        }
    );
    // An operator's removal of an executor holding nothing is recorded as one.
    harness.apply(Command::Deregister {
        now_ms: 102,
        executor_id: a.clone(),
    });
    let removed = harness.apply(operator(
        103,
        OperatorAction::Remove {
            executor_id: b.clone(),
        },
    ));
    assert!(matches!(
        removed,
        Outcome::Deregistered {
            already_gone: false,
            ..
        }
    ));
    harness.apply_expecting_no_change(operator(104, OperatorAction::Remove { executor_id: b }));
    assert_eq!(
        harness.state.audit().count(),
        3,
        "the repeat is not recorded"
    );
    for now_ms in 0..MAX_AUDIT_RECORDS as u64 {
        harness.apply(maintenance(200 + now_ms, now_ms % 2 == 0));
    }
    let records: Vec<_> = harness.state.audit().collect();
    assert_eq!(records.len(), MAX_AUDIT_RECORDS);
    assert_eq!(
        records.last().map(|r| r.at_ms),
        Some(200 + MAX_AUDIT_RECORDS as u64 - 1)
    );
    assert!(records
        .windows(2)
        .all(|pair| pair[0].revision < pair[1].revision));
}

/// P17.4 (issue 55, finding 4): callers who are not operators of the whole cluster cannot push
/// their records out. Past the bound the oldest record of anyone else goes first; only when
/// every record is a cluster operator's does the oldest of all go.
#[test]
fn p17_4_a_namespace_admin_cannot_push_the_cluster_operators_records_out() {
    let (mut harness, _a, _b) = balanced_pair();
    let kv_admin = |now_ms: u64, on: bool| Command::Operator {
        now_ms,
        actor: "admin of namespaces kv CN=kv-ops".to_owned(),
        action: OperatorAction::SetMaintenance { on },
    };
    harness.apply(maintenance(1, true));
    harness.apply(maintenance(2, false));
    let cluster_records: Vec<u64> = harness.state.audit().map(|r| r.revision).collect();
    for now_ms in 0..2 * MAX_AUDIT_RECORDS as u64 {
        harness.apply(kv_admin(10 + now_ms, now_ms % 2 == 0));
    }
    let records: Vec<_> = harness.state.audit().collect();
    assert_eq!(records.len(), MAX_AUDIT_RECORDS);
    let kept: Vec<u64> = records
        .iter()
        .filter(|r| r.actor == ADMIN)
        .map(|r| r.revision)
        .collect();
    assert_eq!(kept, cluster_records, "the cluster operator's records stay");
    assert_eq!(
        records.last().map(|r| r.at_ms),
        Some(10 + 2 * MAX_AUDIT_RECORDS as u64 - 1),
        "the newest of the others are kept"
    );
    // Every record a cluster operator's: the oldest goes.
    for now_ms in 0..MAX_AUDIT_RECORDS as u64 {
        harness.apply(maintenance(10_000 + now_ms, now_ms % 2 == 0));
    }
    let records: Vec<_> = harness.state.audit().collect();
    assert_eq!(records.len(), MAX_AUDIT_RECORDS);
    assert!(records.iter().all(|r| r.actor == ADMIN));
    assert_eq!(records.first().map(|r| r.at_ms), Some(10_000));
    assert!(records
        .windows(2)
        .all(|pair| pair[0].revision < pair[1].revision));
}

/// I6: an actor beyond its bound is refused before anything changes.
#[test]
fn p17_4_i6_an_oversized_actor_is_refused() {
    let (mut harness, _a, _b) = balanced_pair();
    let outcome = harness.apply_expecting_no_change(Command::Operator {
        now_ms: 1,
        actor: "x".repeat(leasehold_api::wire::MAX_ACTOR_BYTES + 1),
        action: OperatorAction::SetMaintenance { on: true },
    });
    assert!(matches!(
        outcome,
        Outcome::Refused {
            reason: RefusalReason::Invalid { .. }
        }
    ));
}
