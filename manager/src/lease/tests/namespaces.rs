//! Namespaces in the state machine (P18.1, P18.2): each a shard space of its own, whose shards,
//! epochs, handoffs, leases and plans are its own, and whose executors can never touch another's.

use leasehold_api::wire::{DEFAULT_NAMESPACE, MAX_NAMESPACES, MAX_TOTAL_SHARDS};

use super::super::{
    Command, Move, Namespace, OperatorAction, Outcome, PlacementOverrides, RefusalReason,
    RegisterResult, RenewResult, Renewal, ShardId,
};
use super::{
    create_namespace_command, register_in_command, set_namespace_command, Harness, LEASE_MS,
    TEST_ADMIN,
};

fn operator(now_ms: u64, action: OperatorAction) -> Command {
    Command::Operator {
        now_ms,
        actor: TEST_ADMIN.to_owned(),
        action,
    }
}

fn create(name: &str, shard_count: u32, lease_duration_ms: u64) -> Command {
    create_namespace_command(name, shard_count, lease_duration_ms, None)
}

fn delete(now_ms: u64, name: &str) -> Command {
    operator(
        now_ms,
        OperatorAction::DeleteNamespace {
            name: name.to_owned(),
        },
    )
}

fn rebalance(harness: &Harness, namespace: &str, moves: &[(ShardId, &str)]) -> Command {
    Command::Rebalance {
        now_ms: 0,
        planned_at: harness.state.revision(),
        namespace: namespace.to_owned(),
        moves: moves
            .iter()
            .map(|&(shard, to)| Move {
                shard,
                to: to.to_owned(),
            })
            .collect(),
    }
}

impl Harness {
    fn register_in(&mut self, now_ms: u64, incarnation: &str, namespace: &str) -> String {
        match self.apply(register_in_command(now_ms, incarnation, namespace)) {
            Outcome::Registered { grant, .. } => grant.executor_id,
            other => panic!("register {incarnation} into {namespace} failed: {other:?}"),
        }
    }

    fn namespace(&self, name: &str) -> &Namespace {
        self.state
            .namespace(name)
            .unwrap_or_else(|| panic!("no namespace {name}"))
    }

    fn owner_in(&self, namespace: &str, shard: ShardId) -> Option<&str> {
        self.namespace(namespace)
            .shard(shard)
            .and_then(|entry| entry.owner.as_deref())
    }

    fn epoch_in(&self, namespace: &str, shard: ShardId) -> u64 {
        self.namespace(namespace)
            .shard(shard)
            .map_or(0, |entry| entry.epoch)
    }
}

/// Default with 4 shards, `kv` with 2 and a 10 s lease, one executor in each holding shard 0 of
/// its own namespace.
fn two_spaces() -> (Harness, String, String) {
    let mut harness = Harness::initialised(4, LEASE_MS);
    assert!(matches!(
        harness.apply(create("kv", 2, 10_000)),
        Outcome::NamespaceCreated {
            already_exists: false,
            ..
        }
    ));
    let d = harness.register(0, "d");
    let k = harness.register_in(0, "k", "kv");
    let plan = rebalance(&harness, DEFAULT_NAMESPACE, &[(0, &d)]);
    assert!(matches!(harness.apply(plan), Outcome::Rebalanced { .. }));
    let plan = rebalance(&harness, "kv", &[(0, &k)]);
    assert!(matches!(harness.apply(plan), Outcome::Rebalanced { .. }));
    (harness, d, k)
}

/// P18.1: `Init` makes `default`; a namespace is created with its own shard count and lease, its
/// shards unowned at epoch 0; a repeat with the same settings changes nothing, other settings
/// are a conflict, and a malformed request changes nothing.
#[test]
fn p18_1_a_namespace_is_created_once_with_its_own_shards_and_lease() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    assert_eq!(
        harness
            .state
            .namespaces()
            .map(|(name, _)| name)
            .collect::<Vec<_>>(),
        [DEFAULT_NAMESPACE]
    );
    harness.apply(create("kv", 3, 10_000));
    let kv = harness.namespace("kv");
    assert_eq!(
        (kv.config.shard_count, kv.config.lease_duration_ms),
        (3, 10_000)
    );
    assert!(kv
        .shards()
        .iter()
        .all(|shard| shard.owner.is_none() && shard.epoch == 0));
    assert_eq!(harness.state.shards().len(), 4, "default is untouched");

    let repeat = harness.apply_expecting_no_change(create("kv", 3, 10_000));
    assert!(matches!(
        repeat,
        Outcome::NamespaceCreated {
            already_exists: true,
            ..
        }
    ));
    for (command, what) in [
        (create("kv", 4, 10_000), "other settings"),
        (create("Kv", 1, 10_000), "a name not DNS-label shaped"),
        (create("x", 0, 10_000), "no shards"),
        (create("x", 1, 0), "no lease"),
        (
            create("x", 1, 24 * 60 * 60 * 1000 + 1),
            "a lease beyond a day",
        ),
        (
            create_namespace_command("x", 1, 10_000, Some(0)),
            "a bound of 0",
        ),
    ] {
        let outcome = harness.apply_expecting_no_change(command);
        assert!(
            matches!(
                outcome,
                Outcome::Refused {
                    reason: RefusalReason::Conflict { .. } | RefusalReason::Invalid { .. }
                }
            ),
            "{what}: {outcome:?}"
        );
    }
}

/// P18.1: the cluster's bounds on namespaces and on shards over all of them refuse a creation
/// past them, and change nothing.
#[test]
fn p18_1_the_cluster_bounds_namespaces_and_total_shards() {
    let mut harness = Harness::initialised(1, LEASE_MS);
    let total = u32::try_from(MAX_TOTAL_SHARDS).expect("fits");
    let refused = harness.apply_expecting_no_change(create("big", total, 10_000));
    assert!(
        matches!(
            &refused,
            Outcome::Refused {
                reason: RefusalReason::Conflict { detail }
            } if detail.contains("shards")
        ),
        "{refused:?}"
    );
    harness.apply(create("big", total - 1, 10_000));

    let mut harness = Harness::initialised(1, LEASE_MS);
    for n in 1..MAX_NAMESPACES {
        harness.apply(create(&format!("n{n}"), 1, 10_000));
    }
    let refused = harness.apply_expecting_no_change(create("one-more", 1, 10_000));
    assert!(
        matches!(
            &refused,
            Outcome::Refused {
                reason: RefusalReason::Conflict { detail }
            } if detail.contains("most namespaces")
        ),
        "{refused:?}"
    );
}

/// P18.1: an executor registers into a namespace that exists; into any other it is refused and
/// nothing changes. Its grant carries its namespace's shard count, and its lease is its
/// namespace's.
#[test]
fn p18_1_an_executor_registers_into_one_namespace_and_gets_its_lease() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let refused = harness.apply_expecting_no_change(register_in_command(0, "k", "kv"));
    assert!(
        matches!(
            &refused,
            Outcome::Refused {
                reason: RefusalReason::UnknownNamespace { namespace }
            } if namespace == "kv"
        ),
        "{refused:?}"
    );
    harness.apply(create("kv", 2, 10_000));
    match harness.apply(register_in_command(0, "k", "kv")) {
        Outcome::Registered { grant, .. } => {
            assert_eq!(grant.shard_count, 2);
            assert_eq!(grant.lease_ttl_ms, 10_000);
        }
        other => panic!("{other:?}"),
    }
    let d = harness.register(0, "d");
    let k = harness
        .state
        .executor_by_incarnation("k")
        .expect("registered")
        .id
        .clone();
    assert_eq!(
        harness.state.executor(&k).map(|e| e.namespace.as_str()),
        Some("kv")
    );
    let outcome = harness.apply(Command::Renew {
        now_ms: 5_000,
        renewals: [&k, &d]
            .into_iter()
            .map(|executor_id| Renewal {
                executor_id: executor_id.clone(),
                claims: Vec::new(),
                revision: 0,
                ready: Vec::new(),
            })
            .collect(),
    });
    let Outcome::Renewed { results, .. } = outcome else {
        panic!("{outcome:?}")
    };
    let ttls: Vec<u64> = results
        .iter()
        .map(|result| match result {
            RenewResult::Renewed { grant, .. } => grant.lease_ttl_ms,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ttls, [10_000, LEASE_MS], "each lease is its namespace's");
}

/// P18.1: the same incarnation in another namespace is a conflict, not a retry, and changes
/// nothing.
#[test]
fn p18_1_an_incarnation_belongs_to_one_namespace() {
    let (mut harness, _, _) = two_spaces();
    let outcome = harness.apply_expecting_no_change(register_in_command(0, "d", "kv"));
    assert!(
        matches!(
            &outcome,
            Outcome::Refused {
                reason: RefusalReason::Conflict { detail }
            } if detail.contains("namespace default")
        ),
        "{outcome:?}"
    );
}

/// P18.2, I1 per namespace: shard 0 of `default` and shard 0 of `kv` are two shards, each with
/// its own owner and epoch; a plan for one namespace naming an executor of another is refused
/// whole, and nothing changes.
#[test]
fn p18_2_a_plan_never_gives_one_namespace_s_shard_to_another_s_executor() {
    let (mut harness, d, k) = two_spaces();
    assert_eq!(harness.owner_in(DEFAULT_NAMESPACE, 0), Some(d.as_str()));
    assert_eq!(harness.owner_in("kv", 0), Some(k.as_str()));
    assert_eq!(
        (
            harness.epoch_in(DEFAULT_NAMESPACE, 0),
            harness.epoch_in("kv", 0)
        ),
        (1, 1)
    );
    assert_eq!(harness.state.delivered_set(&k), [(0, 1)]);

    for (namespace, moves) in [
        ("kv", vec![(1, d.as_str())]),
        (DEFAULT_NAMESPACE, vec![(1, k.as_str())]),
        ("kv", vec![(1, k.as_str()), (0, d.as_str())]),
    ] {
        let plan = rebalance(&harness, namespace, &moves);
        let outcome = harness.apply_expecting_no_change(plan);
        assert!(
            matches!(
                &outcome,
                Outcome::Refused {
                    reason: RefusalReason::Invalid { detail }
                } if detail.contains("of namespace")
            ),
            "{namespace} {moves:?}: {outcome:?}"
        );
    }
    let plan = rebalance(&harness, "nowhere", &[(1, &k)]);
    assert!(matches!(
        harness.apply_expecting_no_change(plan),
        Outcome::Refused {
            reason: RefusalReason::Invalid { .. }
        }
    ));
}

/// P18.2: an operator's move or pin names a namespace, and its executor must be of it.
#[test]
fn p18_2_an_operator_cannot_move_or_pin_a_shard_to_another_namespace_s_executor() {
    let (mut harness, d, k) = two_spaces();
    for action in [
        OperatorAction::MoveShard {
            namespace: "kv".to_owned(),
            shard: 1,
            to: d.clone(),
        },
        OperatorAction::Pin {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            shard: 1,
            executor_id: Some(k.clone()),
        },
    ] {
        let outcome = harness.apply_expecting_no_change(operator(1, action.clone()));
        assert!(
            matches!(
                outcome,
                Outcome::Refused {
                    reason: RefusalReason::Conflict { .. }
                }
            ),
            "{action:?}: {outcome:?}"
        );
    }
    let moved = harness.apply(operator(
        1,
        OperatorAction::MoveShard {
            namespace: "kv".to_owned(),
            shard: 1,
            to: k.clone(),
        },
    ));
    assert!(matches!(moved, Outcome::Rebalanced { .. }), "{moved:?}");
    assert_eq!(harness.owner_in("kv", 1), Some(k.as_str()));
    assert_eq!(harness.owner(1), None, "default's shard 1 is another shard");
    let pinned = harness.apply(operator(
        1,
        OperatorAction::Pin {
            namespace: "kv".to_owned(),
            shard: 1,
            executor_id: Some(k.clone()),
        },
    ));
    assert!(matches!(pinned, Outcome::PinSet { changed: true, .. }));
    assert_eq!(harness.namespace("kv").pin(1), Some(k.as_str()));
    assert_eq!(harness.state.pin(1), None);
}

/// P18.2: a release names shards of the releasing executor's own namespace; the same numbers in
/// another namespace are untouched.
#[test]
fn p18_2_a_release_acts_in_the_releasing_executor_s_namespace_only() {
    let (mut harness, d, k) = two_spaces();
    let d2 = harness.register(0, "d2");
    let plan = rebalance(&harness, DEFAULT_NAMESPACE, &[(0, &d2)]);
    harness.apply(plan);
    let revoke_revision = harness.next_index() - 1;
    // kv's executor names shard 0 with default's revoke: kv's shard 0 is not releasing.
    let outcome = harness.apply(Command::Release {
        now_ms: 1,
        executor_id: k.clone(),
        shards: vec![0],
        revoke_revision,
    });
    assert!(
        matches!(&outcome, Outcome::Released { completed, .. } if completed.is_empty()),
        "{outcome:?}"
    );
    assert_eq!(harness.owner_in("kv", 0), Some(k.as_str()));
    assert_eq!(harness.owner(0), Some(d.as_str()), "still releasing from d");
    let outcome = harness.apply(Command::Release {
        now_ms: 1,
        executor_id: d.clone(),
        shards: vec![0],
        revoke_revision,
    });
    assert!(
        matches!(&outcome, Outcome::Released { completed, .. } if completed == &[0]),
        "{outcome:?}"
    );
    assert_eq!(harness.owner(0), Some(d2.as_str()));
    assert_eq!(harness.epoch(0), 2);
    assert_eq!(harness.epoch_in("kv", 0), 1);
}

/// P18.1, fairness: a plan is stale only when its own namespace's assignment changed, so a storm
/// of registrations in one namespace never makes another's plans stale.
#[test]
fn p18_1_one_namespace_s_churn_does_not_make_another_s_plans_stale() {
    let (mut harness, d, k) = two_spaces();
    let default_plan = rebalance(&harness, DEFAULT_NAMESPACE, &[(1, &d)]);
    let kv_plan = rebalance(&harness, "kv", &[(1, &k)]);
    for n in 0..20 {
        harness.register_in(1, &format!("storm-{n}"), "kv");
    }
    assert!(
        matches!(harness.apply(default_plan), Outcome::Rebalanced { .. }),
        "default's plan stands"
    );
    let stale = harness.apply_expecting_no_change(kv_plan);
    assert!(
        matches!(
            stale,
            Outcome::Refused {
                reason: RefusalReason::StalePlan { .. }
            }
        ),
        "kv's own churn makes its plan stale: {stale:?}"
    );
}

/// P17.4 across namespaces: maintenance concerns every namespace, so it makes every
/// namespace's earlier plans stale.
#[test]
fn p18_1_maintenance_makes_every_namespace_s_plans_stale() {
    let (mut harness, _, k) = two_spaces();
    let kv_plan = rebalance(&harness, "kv", &[(1, &k)]);
    harness.apply(operator(1, OperatorAction::SetMaintenance { on: true }));
    assert!(matches!(
        harness.apply_expecting_no_change(kv_plan),
        Outcome::Refused {
            reason: RefusalReason::StalePlan { .. }
        }
    ));
}

/// P18.1: a namespace's executor bound refuses registrations past it (nothing changes) and a
/// retry of one already registered still gets its grant.
#[test]
fn p18_1_a_namespace_s_executor_bound_refuses_newcomers_only() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.apply(create_namespace_command("kv", 2, 10_000, Some(2)));
    harness.register_in(0, "k1", "kv");
    harness.register_in(0, "k2", "kv");
    let refused = harness.apply_expecting_no_change(register_in_command(0, "k3", "kv"));
    assert!(
        matches!(
            &refused,
            Outcome::Refused {
                reason: RefusalReason::Conflict { detail }
            } if detail.contains("most executors")
        ),
        "{refused:?}"
    );
    assert!(matches!(
        harness.apply(register_in_command(0, "k2", "kv")),
        Outcome::Registered {
            already_registered: true,
            ..
        }
    ));
    harness.register(0, "d-is-elsewhere");
    // The same bound in a batch: the first fits once one left, the second does not.
    let k1 = harness
        .state
        .executor_by_incarnation("k1")
        .expect("k1")
        .id
        .clone();
    harness.apply(Command::Deregister {
        now_ms: 1,
        executor_id: k1,
    });
    let batch = Command::RegisterMany {
        now_ms: 1,
        registrations: ["k4", "k5"]
            .into_iter()
            .map(|incarnation| super::registration_in(incarnation, "kv"))
            .collect(),
    };
    let Outcome::RegisteredMany { results } = harness.apply(batch) else {
        panic!("a batch")
    };
    assert!(matches!(results[0], RegisterResult::Registered { .. }));
    assert!(matches!(results[1], RegisterResult::Refused { .. }));
    assert_eq!(harness.namespace("kv").executor_count(), 2);
}

/// P18.1: a namespace's lease changes for grants from now on; `default`'s is the managers'
/// flag, so only its bound changes here.
#[test]
fn p18_1_a_namespace_s_settings_change_in_place() {
    let (mut harness, _, _) = two_spaces();
    let set = |name: &str, lease_duration_ms: u64, max_executors: Option<u32>| {
        set_namespace_command(
            name,
            lease_duration_ms,
            max_executors,
            PlacementOverrides::default(),
        )
    };
    assert!(matches!(
        harness.apply(set("kv", 20_000, Some(5))),
        Outcome::NamespaceSet { changed: true, .. }
    ));
    assert_eq!(harness.namespace("kv").config.lease_duration_ms, 20_000);
    assert_eq!(harness.namespace("kv").config.shard_count, 2);
    assert!(matches!(
        harness.apply_expecting_no_change(set("kv", 20_000, Some(5))),
        Outcome::NamespaceSet { changed: false, .. }
    ));
    assert!(matches!(
        harness.apply(set(DEFAULT_NAMESPACE, LEASE_MS, Some(100))),
        Outcome::NamespaceSet { changed: true, .. }
    ));
    for (command, what) in [
        (set(DEFAULT_NAMESPACE, 5_000, None), "default's lease"),
        (set("nowhere", 5_000, None), "an unknown namespace"),
        (set("kv", 0, None), "no lease"),
    ] {
        let outcome = harness.apply_expecting_no_change(command);
        assert!(
            matches!(outcome, Outcome::Refused { .. }),
            "{what}: {outcome:?}"
        );
    }
}

/// P18.4: a namespace's placement settings are kept with it from its creation, changed in place
/// (a plan made before is stale, so the next goes by the new ones) and checked as the edge checks
/// them: a setting out of range or a preference that is not one label is refused and changes
/// nothing; creating the name again with other settings is a conflict.
#[test]
fn p18_4_a_namespace_s_placement_settings_are_kept_changed_and_checked() {
    let (mut harness, _, _) = two_spaces();
    let placement = PlacementOverrides {
        load_placement: Some(false),
        balance_tolerance_percent: Some(25),
        max_balance_moves_per_minute: Some(3),
        prefer: Some(("zone".into(), "a".into())),
    };
    let created = |placement: PlacementOverrides| {
        operator(
            1,
            OperatorAction::CreateNamespace {
                name: "placed".into(),
                shard_count: 4,
                lease_duration_ms: LEASE_MS,
                max_executors: None,
                placement,
                replication: Default::default(),
            },
        )
    };
    assert!(matches!(
        harness.apply(created(placement.clone())),
        Outcome::NamespaceCreated {
            already_exists: false,
            ..
        }
    ));
    assert_eq!(harness.namespace("placed").placement, placement);
    assert!(matches!(
        harness.apply_expecting_no_change(created(placement.clone())),
        Outcome::NamespaceCreated {
            already_exists: true,
            ..
        }
    ));
    assert!(matches!(
        harness.apply_expecting_no_change(created(PlacementOverrides::default())),
        Outcome::Refused {
            reason: RefusalReason::Conflict { .. }
        }
    ));

    let set = |placement| set_namespace_command("placed", LEASE_MS, None, placement);
    let revision_before = harness.namespace("placed").assignment_revision;
    let by_count_only = PlacementOverrides {
        load_placement: Some(false),
        ..PlacementOverrides::default()
    };
    assert!(matches!(
        harness.apply(set(by_count_only.clone())),
        Outcome::NamespaceSet { changed: true, .. }
    ));
    assert_eq!(harness.namespace("placed").placement, by_count_only);
    assert!(
        harness.namespace("placed").assignment_revision > revision_before,
        "a plan made under the old settings is stale"
    );
    assert!(matches!(
        harness.apply_expecting_no_change(set(by_count_only)),
        Outcome::NamespaceSet { changed: false, .. }
    ));

    let bad = [
        (
            "no tolerance",
            PlacementOverrides {
                balance_tolerance_percent: Some(0),
                ..Default::default()
            },
        ),
        (
            "over 100 %",
            PlacementOverrides {
                balance_tolerance_percent: Some(101),
                ..Default::default()
            },
        ),
        (
            "no moves",
            PlacementOverrides {
                max_balance_moves_per_minute: Some(0),
                ..Default::default()
            },
        ),
        (
            "a bad key",
            PlacementOverrides {
                prefer: Some(("Zone".into(), "a".into())),
                ..Default::default()
            },
        ),
        (
            "a bad value",
            PlacementOverrides {
                prefer: Some(("zone".into(), "a=b".into())),
                ..Default::default()
            },
        ),
    ];
    for (what, placement) in bad {
        for command in [set(placement.clone()), {
            let mut create = created(placement);
            if let Command::Operator {
                action: OperatorAction::CreateNamespace { name, .. },
                ..
            } = &mut create
            {
                *name = "other".into();
            }
            create
        }] {
            let outcome = harness.apply_expecting_no_change(command);
            assert!(
                matches!(
                    outcome,
                    Outcome::Refused {
                        reason: RefusalReason::Invalid { .. }
                    }
                ),
                "{what}: {outcome:?}"
            );
        }
    }
}

/// P18.1, I2: a namespace with an owned shard cannot be deleted; once drained it can, taking the
/// executors still in it (tombstoned, so they are told they are gone); a namespace created again
/// under the name starts its shards at the epoch they reached, so no epoch repeats for a name.
#[test]
fn p18_1_a_drained_namespace_is_deleted_and_its_name_never_repeats_an_epoch() {
    let (mut harness, _, k) = two_spaces();
    let k2 = harness.register_in(0, "k2", "kv");
    let plan = rebalance(&harness, "kv", &[(0, &k2)]);
    harness.apply(plan);
    harness.apply(Command::Release {
        now_ms: 1,
        executor_id: k.clone(),
        shards: vec![0],
        revoke_revision: harness.next_index() - 1,
    });
    assert_eq!(harness.epoch_in("kv", 0), 2);

    for (command, what) in [
        (delete(2, "kv"), "a namespace with an owned shard"),
        (delete(2, DEFAULT_NAMESPACE), "default"),
    ] {
        let outcome = harness.apply_expecting_no_change(command);
        assert!(
            matches!(
                outcome,
                Outcome::Refused {
                    reason: RefusalReason::Conflict { .. }
                }
            ),
            "{what}: {outcome:?}"
        );
    }
    assert!(matches!(
        harness.apply_expecting_no_change(delete(2, "nowhere")),
        Outcome::Refused {
            reason: RefusalReason::UnknownNamespace { .. }
        }
    ));
    harness.apply(Command::Deregister {
        now_ms: 2,
        executor_id: k2.clone(),
    });
    let outcome = harness.apply(delete(3, "kv"));
    assert_eq!(
        outcome,
        Outcome::NamespaceDeleted {
            name: "kv".to_owned(),
            already_gone: false,
            removed: vec![k.clone()],
        }
    );
    assert!(harness.state.namespace("kv").is_none());
    assert!(harness.state.executor(&k).is_none());
    assert!(harness.state.tombstone(&k).is_some());
    assert_eq!(
        harness.state.retired_epochs().collect::<Vec<_>>(),
        [("kv", 2)]
    );
    assert!(matches!(
        harness.apply_expecting_no_change(delete(4, "kv")),
        Outcome::NamespaceDeleted {
            already_gone: true,
            ..
        }
    ));
    assert!(matches!(
        harness.apply_expecting_no_change(register_in_command(4, "k3", "kv")),
        Outcome::Refused {
            reason: RefusalReason::UnknownNamespace { .. }
        }
    ));

    harness.apply(create("kv", 3, 10_000));
    assert_eq!(harness.state.retired_epochs().count(), 0);
    let k3 = harness.register_in(4, "k3", "kv");
    let plan = rebalance(&harness, "kv", &[(0, &k3), (2, &k3)]);
    harness.apply(plan);
    assert_eq!(
        harness.state.delivered_set(&k3),
        [(0, 3), (2, 3)],
        "the new kv's first owner is past every epoch the old kv's shards had"
    );
}

/// The consistency check knows namespaces: an owner of another namespace, an executor of a
/// namespace that does not exist, a namespace listing an executor not its own and a retired name in use are all
/// violations.
#[test]
fn p18_1_the_consistency_check_keeps_namespaces_apart() {
    let (base, d, k) = two_spaces();
    let state = base.state;
    let mut owned_across = state.clone();
    if let Some(kv) = owned_across.namespaces.get_mut("kv") {
        kv.shards[1].owner = Some(d.clone());
        kv.shards[1].epoch = 1;
    }
    if let Some(executor) = owned_across.executors.get_mut(&d) {
        executor.owned_shards.insert(1);
    }
    let mut orphaned = state.clone();
    if let Some(executor) = orphaned.executors.get_mut(&k) {
        executor.namespace = "gone".to_owned();
    }
    let mut miscounted = state.clone();
    if let Some(kv) = miscounted.namespaces.get_mut("kv") {
        kv.members.insert("ex-stranger".to_owned());
    }
    let mut retired_in_use = state.clone();
    retired_in_use.retired_epochs.insert("kv".to_owned(), 3);
    let mut no_default = state.clone();
    no_default.namespaces.remove(DEFAULT_NAMESPACE);
    for (what, corrupt, expected) in [
        (
            "an owner of another namespace",
            owned_across,
            "who is not registered in kv",
        ),
        (
            "an executor of no namespace",
            orphaned,
            "which does not exist",
        ),
        (
            "a miscounted namespace",
            miscounted,
            "kv lists 2 executors as its own, 1 are",
        ),
        ("a retired name in use", retired_in_use, "is also retired"),
        ("no default", no_default, "not default"),
    ] {
        let violations = corrupt.consistency_violations();
        assert!(
            violations
                .iter()
                .any(|violation| violation.contains(expected)),
            "{what}: expected {expected:?} in {violations:?}"
        );
    }
}

/// P18.1: an executor's requests are read against its namespace's shard count; one the state
/// does not hold, against the largest of any namespace; nothing before `Init`.
#[test]
fn p18_1_an_executor_s_shard_count_is_its_namespace_s() {
    let (harness, d, k) = two_spaces();
    assert_eq!(harness.state.shard_bound_for_executor(&d), Some(4));
    assert_eq!(harness.state.shard_bound_for_executor(&k), Some(2));
    assert_eq!(
        harness.state.shard_bound_for_executor("ex-unknown"),
        Some(4)
    );
    assert_eq!(
        crate::lease::LeaseState::default().shard_bound_for_executor(&d),
        None
    );
}

/// P18.1 with P3.8: the leader steps a third of the shortest lease of any namespace apart, so a
/// namespace with a shorter lease than `default`'s has its lapsed leases reaped within its own
/// lease and a tick.
#[test]
fn p18_1_the_shortest_lease_of_any_namespace_paces_the_leader() {
    let (mut harness, _, _) = two_spaces();
    assert_eq!(
        harness.state.shortest_lease_duration_ms(),
        Some(LEASE_MS.min(10_000))
    );
    assert!(matches!(
        harness.apply(create("short", 2, 300)),
        Outcome::NamespaceCreated { .. }
    ));
    assert_eq!(harness.state.shortest_lease_duration_ms(), Some(300));
    assert_eq!(
        crate::lease::LeaseState::default().shortest_lease_duration_ms(),
        None
    );
}
