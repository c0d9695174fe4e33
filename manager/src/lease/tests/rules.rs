//! One test (or table) per rule, against `apply` with explicit `now_ms`.

use super::super::{
    ClusterConfig, Command, Effects, Epoch, ExecutorId, Handoff, LeaseState, Move, Outcome,
    RefusalReason, RenewResult, Renewal, Revoke, ShardId, Tombstone, TombstoneReason,
    MAX_SHARD_COUNT, MAX_TEXT_FIELD_BYTES, MAX_TOMBSTONES,
};
use super::{default_space, register_command, Harness, LEASE_MS};
use leasehold_api::wire::{MAX_APP_VERSION_BYTES, MAX_CAPACITY};

/// Four shards; A registered at 0 and given all four (epoch 1); B registered at 1 000 and a plan
/// at 1 000 marks shards 2 and 3 releasing from A to B. Returns the revoke revision.
struct HandoffScenario {
    harness: Harness,
    a: ExecutorId,
    b: ExecutorId,
    revoke_revision: u64,
}

fn handoff_scenario() -> HandoffScenario {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "incarnation-a");
    harness.rebalance(0);
    let b = harness.register(1_000, "incarnation-b");
    let revoke_revision = harness.next_index();
    let outcome = harness.rebalance(1_000);
    assert_eq!(
        outcome,
        Outcome::Rebalanced {
            granted: vec![],
            releasing: vec![2, 3],
            cancelled: vec![],
            effects: Effects {
                revokes: vec![Revoke {
                    executor_id: a.clone(),
                    shards: vec![2, 3],
                    revision: revoke_revision,
                }],
                assignments: vec![],
            },
        }
    );
    HandoffScenario {
        harness,
        a,
        b,
        revoke_revision,
    }
}

fn release(executor_id: &str, shards: Vec<u32>, revoke_revision: u64) -> Command {
    Command::Release {
        now_ms: 2_000,
        executor_id: executor_id.to_owned(),
        shards,
        revoke_revision,
    }
}

fn acknowledged(result: &RenewResult) -> Vec<u32> {
    match result {
        RenewResult::Renewed { acknowledged, .. } => acknowledged.clone(),
        RenewResult::UnknownExecutor { .. } => panic!("unknown executor"),
    }
}

// ---------------------------------------------------------------------------------------------
// Initialisation (§10, §11)

#[test]
fn init_sets_config_and_every_shard_unowned_at_epoch_zero() {
    let harness = Harness::initialised(8, LEASE_MS);
    assert_eq!(
        harness.state.config(),
        Some(&ClusterConfig {
            shard_count: 8,
            lease_duration_ms: LEASE_MS
        })
    );
    assert_eq!(harness.state.shards().len(), 8);
    for (index, shard) in harness.state.shards().iter().enumerate() {
        assert_eq!(usize::try_from(shard.id).ok(), Some(index));
        assert_eq!(
            (shard.owner.as_deref(), shard.epoch, &shard.handoff),
            (None, 0, &None)
        );
    }
    assert_eq!(harness.state.revision(), 1);
}

#[test]
fn init_repeated_with_identical_values_succeeds_and_changes_nothing() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let outcome = harness.apply_expecting_no_change(Command::Init {
        now_ms: 5,
        shard_count: 8,
        lease_duration_ms: LEASE_MS,
    });
    assert!(matches!(
        outcome,
        Outcome::Initialised {
            already_initialised: true,
            ..
        }
    ));
}

#[test]
fn init_with_different_values_is_refused_as_conflict_and_changes_nothing() {
    let existing = ClusterConfig {
        shard_count: 8,
        lease_duration_ms: LEASE_MS,
    };
    for (shard_count, lease_duration_ms) in [(16, LEASE_MS), (8, 30_000), (0, 0)] {
        let mut harness = Harness::initialised(8, LEASE_MS);
        let outcome = harness.apply_expecting_no_change(Command::Init {
            now_ms: 5,
            shard_count,
            lease_duration_ms,
        });
        assert_eq!(
            outcome.refusal(),
            Some(&RefusalReason::ConfigConflict { existing })
        );
    }
}

#[test]
fn i6_init_with_zero_or_oversized_values_is_refused() {
    for (shard_count, lease_duration_ms) in [
        (0, LEASE_MS),
        (8, 0),
        (MAX_SHARD_COUNT + 1, LEASE_MS),
        (u32::MAX, LEASE_MS),
    ] {
        let mut harness = Harness::new();
        let outcome = harness.apply_expecting_no_change(Command::Init {
            now_ms: 0,
            shard_count,
            lease_duration_ms,
        });
        assert!(
            matches!(outcome.refusal(), Some(RefusalReason::Invalid { .. })),
            "{shard_count} {lease_duration_ms}: {outcome:?}"
        );
    }
}

/// The largest accepted table (B5 in docs/BENCHMARKS.md runs one million shards) is allocated in
/// full and every shard starts unowned at epoch 0.
#[test]
fn init_accepts_the_largest_shard_count() {
    let mut state = LeaseState::default();
    let outcome = state.apply(
        1,
        &Command::Init {
            now_ms: 0,
            shard_count: MAX_SHARD_COUNT,
            lease_duration_ms: LEASE_MS,
        },
    );
    assert!(
        matches!(outcome, Outcome::Initialised { .. }),
        "{outcome:?}"
    );
    const { assert!(MAX_SHARD_COUNT >= 1_000_000) };
    assert_eq!(state.shards().len(), MAX_SHARD_COUNT as usize);
    assert!(state.consistency_violations().is_empty());
}

#[test]
fn commands_before_init_are_refused_as_not_initialised_and_change_nothing() {
    let commands = vec![
        Command::SetLeaseDuration {
            now_ms: 0,
            lease_duration_ms: 1_000,
        },
        register_command(0, "early"),
        Command::Renew {
            now_ms: 0,
            renewals: vec![Renewal {
                executor_id: "ex-1".into(),
                claims: vec![],
                revision: 0,
                ready: Vec::new(),
            }],
        },
        Command::Deregister {
            now_ms: 0,
            executor_id: "ex-1".into(),
        },
        Command::Reap {
            now_ms: 0,
            executor_ids: vec!["ex-1".into()],
        },
        Command::Rebalance {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 0,
            planned_at: 0,
            moves: vec![Move {
                shard: 0,
                to: "ex-1".into(),
            }],
        },
        release("ex-1", vec![0], 0),
        Command::CompleteHandoffs { now_ms: 0 },
    ];
    for command in commands {
        let mut harness = Harness::new();
        let outcome = harness.apply_expecting_no_change(command.clone());
        assert_eq!(
            outcome.refusal(),
            Some(&RefusalReason::NotInitialised),
            "{command:?}"
        );
    }
}

#[test]
fn set_lease_duration_changes_future_grants_only() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let outcome = harness.apply(Command::SetLeaseDuration {
        now_ms: 10,
        lease_duration_ms: 10_000,
    });
    assert_eq!(
        outcome,
        Outcome::LeaseDurationSet {
            previous_lease_duration_ms: LEASE_MS,
            lease_duration_ms: 10_000
        }
    );
    assert_eq!(
        harness.state.executor(&a).map(|e| e.lease_expiry_ms),
        Some(LEASE_MS)
    );
    let b = harness.register(100, "b");
    assert_eq!(
        harness.state.executor(&b).map(|e| e.lease_expiry_ms),
        Some(10_100)
    );
    // The same value again changes nothing.
    harness.apply_expecting_no_change(Command::SetLeaseDuration {
        now_ms: 200,
        lease_duration_ms: 10_000,
    });
    // The shard count never changes.
    assert_eq!(harness.state.config().map(|c| c.shard_count), Some(4));
}

// ---------------------------------------------------------------------------------------------
// P2.2 determinism, P2.4 replay protection

#[test]
fn p2_2_same_commands_give_same_state_and_outcomes_on_every_replica() {
    let run = || {
        let mut harness = Harness::initialised(6, LEASE_MS);
        let a = harness.register(0, "a");
        harness.rebalance(0);
        let b = harness.register(10, "b");
        let plan = harness.rebalance(10);
        let renewed = harness.renew_in_sync(20, &a);
        let deregistered = harness.apply(Command::Deregister {
            now_ms: 30,
            executor_id: b,
        });
        (harness.state, plan, renewed, deregistered)
    };
    assert_eq!(run(), run());
}

#[test]
fn p2_4_entry_at_or_before_the_revision_is_refused_as_already_applied() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.register(0, "a");
    let revision = harness.state.revision();
    for log_index in [0, 1, revision] {
        let before = harness.state.clone();
        let outcome = harness.state.apply(log_index, &register_command(5, "b"));
        assert_eq!(
            outcome.refusal(),
            Some(&RefusalReason::LogIndexNotAfterRevision {
                log_index,
                revision
            })
        );
        assert_eq!(harness.state, before);
    }
}

// ---------------------------------------------------------------------------------------------
// P3.1, P3.4 leases

#[test]
fn p3_1_grant_carries_time_remaining_not_an_absolute_time() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(1_000, "a");
    let cases = [
        (1_000, LEASE_MS),
        (31_000, 30_000),
        (61_000, 0),
        (u64::MAX, 0),
    ];
    for (now_ms, expected_ttl_ms) in cases {
        let grant = harness.state.grant_for(&a, now_ms).expect("registered");
        assert_eq!(grant.lease_ttl_ms, expected_ttl_ms, "at {now_ms}");
    }
    assert_eq!(harness.state.grant_for("ex-999", 0), None);
}

#[test]
fn p3_4_renewal_extends_to_now_plus_lease_duration() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let (result, _) = harness.renew_in_sync(20_000, &a);
    let RenewResult::Renewed { grant, .. } = result else {
        panic!("{result:?}");
    };
    assert_eq!(grant.lease_ttl_ms, LEASE_MS);
    let executor = harness.state.executor(&a).expect("present");
    assert_eq!(executor.lease_expiry_ms, 80_000);
    assert_eq!(executor.lease_ttl_told_ms, LEASE_MS);
}

#[test]
fn p3_4_renewal_never_shortens_deadline() {
    // Seed 000's review case: an executor holds a deadline of 60 s; the lease is shortened to
    // 30 s across a restart; a renewal at 20 s must not bring the manager's deadline to 50 s, or
    // the manager could reclaim the shards while the executor (whose reply was lost) still admits.
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    harness.apply(Command::SetLeaseDuration {
        now_ms: 15_000,
        lease_duration_ms: 30_000,
    });
    // (renewal instant, expected expiry after it, expected ttl told)
    let table = [
        (20_000, 60_000, 40_000),
        (25_000, 60_000, 35_000),
        (30_000, 60_000, 30_000),
        (40_000, 70_000, 30_000),
        // A renewal replayed with an older instant (a duplicated proposal) is harmless.
        (10_000, 70_000, 60_000),
    ];
    for (now_ms, expected_expiry_ms, expected_ttl_ms) in table {
        let (result, _) = harness.renew_in_sync(now_ms, &a);
        let executor = harness.state.executor(&a).expect("present");
        assert_eq!(
            executor.lease_expiry_ms, expected_expiry_ms,
            "renewal at {now_ms}"
        );
        assert_eq!(
            executor.lease_ttl_told_ms, expected_ttl_ms,
            "renewal at {now_ms}"
        );
        assert!(matches!(
            result,
            RenewResult::Renewed { grant, .. } if grant.lease_ttl_ms == expected_ttl_ms
        ));
    }
    assert!(harness.state.overdue_executors(69_999).is_empty());
}

// ---------------------------------------------------------------------------------------------
// P4.4, P7.2 registration and deregistration

#[test]
fn p4_4_register_mints_an_executor_with_a_lease_from_now_and_no_shards() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let index = harness.next_index();
    let outcome = harness.apply(Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 5_000,
        incarnation: "inc-1".into(),
        address: "http://127.0.0.1:7001".into(),
        name: Some("worker-1".into()),
        credential_sha256: None,
        capacity: crate::lease::DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    });
    let Outcome::Registered {
        grant,
        already_registered: false,
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(grant.executor_id, format!("ex-{index}"));
    assert_eq!(
        (
            grant.lease_ttl_ms,
            grant.revision,
            grant.shard_count,
            grant.shards.len()
        ),
        (LEASE_MS, index, 4, 0)
    );
    let executor = harness.state.executor(&grant.executor_id).expect("present");
    assert_eq!(executor.lease_expiry_ms, 65_000);
    assert_eq!(executor.name.as_deref(), Some("worker-1"));
    assert_eq!(harness.state.assignment_revision(), index);
}

/// P13.4: a retried registration gets the same answer only with the credential the executor
/// registered with; another one, or none, is refused and changes nothing.
#[test]
fn p13_4_a_retried_registration_needs_the_same_credential() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let with = |credential_sha256| Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 1_000,
        incarnation: "inc-1".into(),
        address: "http://127.0.0.1:7001".into(),
        name: None,
        credential_sha256,
        capacity: crate::lease::DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    };
    let Outcome::Registered { grant, .. } = harness.apply(with(Some([1; 32]))) else {
        panic!("registered");
    };
    let executor = harness.state.executor(&grant.executor_id).unwrap();
    assert_eq!(executor.credential_sha256, Some([1; 32]));
    assert!(matches!(
        harness.apply(with(Some([1; 32]))),
        Outcome::Registered {
            already_registered: true,
            ..
        }
    ));
    for other in [Some([2; 32]), None] {
        let outcome = harness.apply_expecting_no_change(with(other));
        assert_eq!(
            outcome.refusal(),
            Some(&RefusalReason::CredentialMismatch {
                executor_id: grant.executor_id.clone()
            }),
            "{other:?}"
        );
    }
}

/// P6.1: what a retried registration tells counts toward the longest lease told, which sizes
/// every later leader's grace. A retry stamped on a clock behind the first registration's tells
/// more than the lease; since P6.4 raises a new leader's clock to the stored deadlines that no
/// longer happens in a cluster, but the state machine still counts whatever a grant tells.
#[test]
fn p6_1_a_retried_registration_counts_what_it_tells() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.apply(register_command(5_000, "inc-1"));
    assert_eq!(harness.state.longest_lease_told_ms(), LEASE_MS);
    let Outcome::Registered {
        grant,
        already_registered: true,
    } = harness.apply(register_command(4_000, "inc-1"))
    else {
        panic!("a retried registration");
    };
    assert_eq!(grant.lease_ttl_ms, LEASE_MS + 1_000);
    assert_eq!(harness.state.longest_lease_told_ms(), LEASE_MS + 1_000);
}

/// A `Register` for `incarnation` with `capacity`.
fn register_with_capacity(now_ms: u64, incarnation: &str, capacity: u32) -> Command {
    let mut command = register_command(now_ms, incarnation);
    if let Command::Register {
        capacity: field, ..
    } = &mut command
    {
        *field = capacity;
    }
    command
}

/// P15.1: an executor keeps the capacity it registered with; a retried registration (same
/// incarnation, P4.4) gets the same answer and keeps the first capacity, whatever it says.
#[test]
fn p15_1_an_executor_keeps_the_capacity_of_its_first_registration() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let Outcome::Registered { grant, .. } =
        harness.apply(register_with_capacity(1_000, "inc-1", 3))
    else {
        panic!("registered");
    };
    let capacity = |harness: &Harness| harness.state.executor(&grant.executor_id).unwrap().capacity;
    assert_eq!(capacity(&harness), 3);
    for retried in [3, 1, 7, MAX_CAPACITY] {
        let outcome =
            harness.apply_expecting_no_change(register_with_capacity(2_000, "inc-1", retried));
        assert!(
            matches!(
                &outcome,
                Outcome::Registered {
                    grant: again,
                    already_registered: true,
                } if again.executor_id == grant.executor_id
            ),
            "retried with {retried}: {outcome:?}"
        );
        assert_eq!(capacity(&harness), 3, "retried with {retried}");
    }
    let other = harness.register(2_000, "inc-2");
    assert_eq!(
        harness.state.executor(&other).unwrap().capacity,
        crate::lease::DEFAULT_CAPACITY
    );
}

/// P15.1, I6: the state machine refuses a capacity of 0 or above `MAX_CAPACITY` (the edge
/// refuses first; this is the second line), for a new incarnation and for a retried one, and
/// nothing changes.
#[test]
fn p15_1_i6_a_capacity_outside_one_to_the_maximum_is_refused_and_changes_nothing() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.register(0, "existing");
    for (incarnation, capacity) in [
        ("new", 0),
        ("new", MAX_CAPACITY + 1),
        ("new", u32::MAX),
        ("existing", 0),
        ("existing", MAX_CAPACITY + 1),
    ] {
        let outcome =
            harness.apply_expecting_no_change(register_with_capacity(1_000, incarnation, capacity));
        assert!(
            matches!(
                outcome.refusal(),
                Some(RefusalReason::Invalid { detail }) if detail.contains("capacity")
            ),
            "{incarnation} with capacity {capacity}: {outcome:?}"
        );
    }
    assert!(matches!(
        harness.apply(register_with_capacity(1_000, "new", MAX_CAPACITY)),
        Outcome::Registered { .. }
    ));
}

/// A `Register` for `incarnation` stating `app_version`.
fn register_with_app_version(now_ms: u64, incarnation: &str, app_version: Option<&str>) -> Command {
    let mut command = register_command(now_ms, incarnation);
    if let Command::Register {
        app_version: field, ..
    } = &mut command
    {
        *field = app_version.map(str::to_owned);
    }
    command
}

/// P17.3: an executor keeps the application version it registered with; a retried
/// registration (same incarnation, P4.4) gets the same answer and keeps the first version,
/// whatever it states (a newer version is a new incarnation). One that states none has none.
#[test]
fn p17_3_an_executor_keeps_the_app_version_of_its_first_registration() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let Outcome::Registered { grant, .. } =
        harness.apply(register_with_app_version(1_000, "inc-1", Some("1.4.0")))
    else {
        panic!("registered");
    };
    let version = |harness: &Harness| {
        harness
            .state
            .executor(&grant.executor_id)
            .unwrap()
            .app_version
            .clone()
    };
    assert_eq!(version(&harness).as_deref(), Some("1.4.0"));
    for retried in [Some("1.4.0"), Some("2.0.0"), None] {
        let outcome =
            harness.apply_expecting_no_change(register_with_app_version(2_000, "inc-1", retried));
        assert!(
            matches!(
                &outcome,
                Outcome::Registered {
                    grant: again,
                    already_registered: true,
                } if again.executor_id == grant.executor_id
            ),
            "retried with {retried:?}: {outcome:?}"
        );
        assert_eq!(
            version(&harness).as_deref(),
            Some("1.4.0"),
            "retried with {retried:?}"
        );
    }
    let other = harness.register(2_000, "inc-2");
    assert_eq!(harness.state.executor(&other).unwrap().app_version, None);
}

/// P17.3, I6: the state machine refuses an application version outside the wire's alphabet or
/// length (the edge refuses first; this is the second line), for a new incarnation and for a
/// retried one, and nothing changes.
#[test]
fn p17_3_i6_an_app_version_the_check_refuses_is_refused_and_changes_nothing() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.register(0, "existing");
    let long = "9".repeat(MAX_APP_VERSION_BYTES + 1);
    for (incarnation, app_version) in [
        ("new", ""),
        ("new", "1 2"),
        ("new", "1/2"),
        ("new", long.as_str()),
        ("existing", ""),
        ("existing", long.as_str()),
    ] {
        let outcome = harness.apply_expecting_no_change(register_with_app_version(
            1_000,
            incarnation,
            Some(app_version),
        ));
        assert!(
            matches!(
                outcome.refusal(),
                Some(RefusalReason::Invalid { detail }) if detail.contains("P17.3")
            ),
            "{incarnation} with app version {app_version:?}: {outcome:?}"
        );
    }
    let longest = "9".repeat(MAX_APP_VERSION_BYTES);
    assert!(matches!(
        harness.apply(register_with_app_version(1_000, "new", Some(&longest))),
        Outcome::Registered { .. }
    ));
}

/// P18.3, I6: the state machine refuses labels the wire's check refuses (the edge refuses
/// first; this is the second line), for a new incarnation and for a retried one, and nothing
/// changes; a retried registration keeps the labels of the first.
#[test]
fn p18_3_i6_labels_the_check_refuses_are_refused_and_change_nothing() {
    let labelled = |incarnation: &str, pairs: &[(&str, &str)]| {
        super::register_command_with_labels(
            1_000,
            incarnation,
            crate::lease::DEFAULT_CAPACITY,
            pairs,
        )
    };
    let mut harness = Harness::initialised(4, LEASE_MS);
    let existing = match harness.apply(labelled("existing", &[("zone", "a")])) {
        Outcome::Registered { grant, .. } => grant.executor_id,
        other => panic!("{other:?}"),
    };
    let too_many: Vec<(String, String)> = (0..=leasehold_api::wire::MAX_LABELS)
        .map(|n| (format!("k{n}"), "v".to_owned()))
        .collect();
    let too_many: Vec<(&str, &str)> = too_many
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    for (incarnation, pairs) in [
        ("new", &[("Zone", "a")][..]),
        ("new", &[("zone", "")]),
        ("new", &[("zone", "a b")]),
        ("new", too_many.as_slice()),
        ("existing", &[("zone", "-a")]),
    ] {
        let outcome = harness.apply_expecting_no_change(labelled(incarnation, pairs));
        assert!(
            matches!(
                outcome.refusal(),
                Some(RefusalReason::Invalid { detail }) if detail.contains("P18.3")
            ),
            "{incarnation} with {pairs:?}: {outcome:?}"
        );
    }
    harness.apply(labelled("existing", &[("zone", "b")]));
    let kept = &harness.state.executor(&existing).unwrap().labels;
    assert_eq!(
        leasehold_api::wire::zone_of(kept),
        Some("a"),
        "the first's labels"
    );
}

#[test]
fn p4_4_register_is_idempotent_per_incarnation() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "inc-a");
    harness.rebalance(0);
    // The retry after a lost reply: same id, current set, and nothing changes (not the lease
    // either: a retry is not a renewal).
    let outcome = harness.apply_expecting_no_change(register_command(30_000, "inc-a"));
    let Outcome::Registered {
        grant,
        already_registered: true,
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(grant.executor_id, a);
    assert_eq!(grant.lease_ttl_ms, 30_000);
    assert_eq!(grant.revision, harness.state.revision());
    assert_eq!(grant.shards, vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
    // A different incarnation is a different executor.
    assert_ne!(harness.register(30_000, "inc-b"), a);
}

#[test]
fn p4_4_register_after_the_executor_was_removed_mints_a_new_executor() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "inc-a");
    harness.apply(Command::Reap {
        now_ms: LEASE_MS + 1,
        executor_ids: vec![a.clone()],
    });
    let again = harness.register(LEASE_MS + 1, "inc-a");
    assert_ne!(again, a);
    assert!(harness.state.executor(&again).is_some());
    assert!(harness.state.tombstone(&a).is_some());
}

#[test]
fn p7_2_deregister_twice_reports_success_and_unknown_is_not_found() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let first = harness.apply(Command::Deregister {
        now_ms: 10,
        executor_id: a.clone(),
    });
    assert_eq!(
        first,
        Outcome::Deregistered {
            already_gone: false,
            freed: Vec::new(),
            effects: Effects::default()
        }
    );
    let tombstone = harness.state.tombstone(&a).expect("tombstoned");
    assert_eq!(tombstone.reason, TombstoneReason::Deregistered);
    let table = [
        (
            a.clone(),
            Outcome::Deregistered {
                already_gone: true,
                freed: Vec::new(),
                effects: Effects::default(),
            },
        ),
        ("ex-404".to_owned(), Outcome::NotFound),
        (String::new(), Outcome::NotFound),
    ];
    for (executor_id, expected) in table {
        let outcome = harness.apply_expecting_no_change(Command::Deregister {
            now_ms: 20,
            executor_id: executor_id.clone(),
        });
        assert_eq!(outcome, expected, "{executor_id}");
    }
}

#[test]
fn p3_7_deregister_frees_shards_at_once_and_completes_handoffs_from_it() {
    let HandoffScenario {
        mut harness, a, b, ..
    } = handoff_scenario();
    let outcome = harness.apply(Command::Deregister {
        now_ms: 2_000,
        executor_id: a.clone(),
    });
    assert_eq!(
        outcome,
        Outcome::Deregistered {
            already_gone: false,
            freed: vec![0, 1],
            effects: Effects {
                revokes: vec![],
                assignments: vec![b.clone()],
            },
        }
    );
    // Delivered shards become unowned (epoch kept until the next owner); releasing ones go to
    // their target at a new epoch.
    assert_eq!((harness.owner(0), harness.epoch(0)), (None, 1));
    assert_eq!((harness.owner(1), harness.epoch(1)), (None, 1));
    assert_eq!((harness.owner(2), harness.epoch(2)), (Some(b.as_str()), 2));
    assert_eq!((harness.owner(3), harness.epoch(3)), (Some(b.as_str()), 2));
    assert_eq!(harness.delivered_shards(&b), vec![2, 3]);
}

#[test]
fn p3_7_deregistered_target_leaves_its_handoffs_without_a_target() {
    let HandoffScenario {
        mut harness,
        a,
        b,
        revoke_revision,
    } = handoff_scenario();
    harness.apply(Command::Deregister {
        now_ms: 2_000,
        executor_id: b,
    });
    for shard in [2, 3] {
        let handoff = harness.state.shard(shard).and_then(|s| s.handoff.clone());
        assert_eq!(
            handoff,
            Some(Handoff {
                to: None,
                revoke_revision,
                from_grant_expiry_ms: LEASE_MS
            })
        );
    }
    // The acknowledgement still ends the handoff, leaving the shard unowned at its old epoch.
    let outcome = harness.apply(release(&a, vec![2, 3], revoke_revision));
    assert_eq!(
        outcome,
        Outcome::Released {
            completed: vec![2, 3],
            ignored: vec![],
            effects: Effects::default()
        }
    );
    assert_eq!((harness.owner(2), harness.epoch(2)), (None, 1));
}

#[test]
fn p2_1_tombstones_are_bounded_and_pruned_oldest_first() {
    let mut harness = Harness::initialised(1, LEASE_MS);
    let mut removed = Vec::new();
    for n in 0..MAX_TOMBSTONES + 2 {
        let id = harness.register(0, &format!("inc-{n}"));
        harness.apply(Command::Deregister {
            now_ms: 0,
            executor_id: id.clone(),
        });
        removed.push(id);
    }
    assert_eq!(harness.state.tombstones().count(), MAX_TOMBSTONES);
    assert!(harness.state.tombstone(&removed[0]).is_none());
    assert!(harness.state.tombstone(&removed[1]).is_none());
    assert!(harness.state.tombstone(&removed[2]).is_some());
    // The answer for a pruned id degrades to "not found" (documented at MAX_TOMBSTONES).
    let outcome = harness.apply_expecting_no_change(Command::Deregister {
        now_ms: 0,
        executor_id: removed[0].clone(),
    });
    assert_eq!(outcome, Outcome::NotFound);
}

// ---------------------------------------------------------------------------------------------
// P2.4, P3.8 reaping

#[test]
fn p2_4_reap_rechecks_expiry_at_apply() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    // The expiry's own millisecond still counts as live: the grant was stamped with the leader's
    // clock truncated to the millisecond, possibly before the executor's anchor (P3.2).
    assert!(harness.state.overdue_executors(LEASE_MS).is_empty());
    let candidates = harness.state.overdue_executors(LEASE_MS + 1);
    assert_eq!(candidates, vec![a.clone(), b.clone()]);
    // B renews between the leader listing candidates and the reap being applied.
    harness.renew_in_sync(LEASE_MS, &b);
    let outcome = harness.apply(Command::Reap {
        now_ms: LEASE_MS + 1,
        executor_ids: candidates,
    });
    assert_eq!(
        outcome,
        Outcome::Reaped {
            reaped: vec![a.clone()],
            skipped: vec![b.clone()],
            effects: Effects::default()
        }
    );
    assert!(harness.state.executor(&b).is_some());
    assert_eq!(
        harness.state.tombstone(&a).map(|t| t.reason),
        Some(TombstoneReason::Reaped)
    );
    // A reap of live, unknown, duplicate or already-reaped candidates changes nothing.
    let outcome = harness.apply_expecting_no_change(Command::Reap {
        now_ms: LEASE_MS + 1,
        executor_ids: vec![b.clone(), "ex-404".into(), a.clone(), b.clone()],
    });
    assert!(matches!(outcome, Outcome::Reaped { reaped, .. } if reaped.is_empty()));
}

#[test]
fn p3_8_reaped_owner_frees_its_shards_and_completes_handoffs_from_it() {
    let HandoffScenario {
        mut harness, a, b, ..
    } = handoff_scenario();
    harness.renew_in_sync(50_000, &b);
    let outcome = harness.apply(Command::Reap {
        now_ms: LEASE_MS + 1,
        executor_ids: vec![a.clone()],
    });
    assert_eq!(
        outcome,
        Outcome::Reaped {
            reaped: vec![a.clone()],
            skipped: vec![],
            effects: Effects {
                revokes: vec![],
                assignments: vec![b.clone()]
            },
        }
    );
    assert_eq!(harness.owner(0), None);
    assert_eq!((harness.owner(2), harness.epoch(2)), (Some(b.as_str()), 2));
    // The reaped executor's renewal is answered as unknown (404), and changes nothing.
    let outcome = harness.apply_expecting_no_change(Command::Renew {
        now_ms: LEASE_MS + 1,
        renewals: vec![Renewal {
            executor_id: a.clone(),
            claims: vec![],
            revision: 0,
            ready: Vec::new(),
        }],
    });
    assert_eq!(
        outcome,
        Outcome::Renewed {
            results: vec![RenewResult::UnknownExecutor { executor_id: a }],
            effects: Effects::default()
        }
    );
}

#[test]
fn p3_8_reaped_target_leaves_its_handoffs_without_a_target() {
    let HandoffScenario {
        mut harness,
        a,
        b,
        revoke_revision,
    } = handoff_scenario();
    // A renews still claiming the releasing shards (the revoke has not reached it).
    harness.renew(
        50_000,
        &a,
        vec![(0, 1), (1, 1), (2, 1), (3, 1)],
        revoke_revision,
    );
    // B registered at 1 000, so its lease lapses once 61 000 has passed.
    harness.apply(Command::Reap {
        now_ms: 61_001,
        executor_ids: vec![b],
    });
    for shard in [2, 3] {
        let entry = harness.state.shard(shard).expect("in range");
        assert_eq!(entry.owner.as_deref(), Some(a.as_str()));
        assert_eq!(entry.handoff.as_ref().map(|h| h.to.clone()), Some(None));
    }
}

// ---------------------------------------------------------------------------------------------
// P2.4, P5.1 conditional rebalance

#[test]
fn p2_4_rebalance_planned_on_stale_revision_is_refused_whole_and_changes_nothing() {
    // Each case changes the assignment between planning and applying.
    type Change = fn(&mut Harness, &str);
    let changes: [(&str, Change); 4] = [
        ("an executor joined", |harness, _| {
            harness.register(2_000, "late");
        }),
        ("an executor left", |harness, a| {
            harness.apply(Command::Deregister {
                now_ms: 2_000,
                executor_id: a.to_owned(),
            });
        }),
        ("another plan applied", |harness, _| {
            harness.rebalance(2_000);
        }),
        ("an executor was reaped", |harness, a| {
            harness.apply(Command::Reap {
                now_ms: LEASE_MS + 1,
                executor_ids: vec![a.to_owned()],
            });
        }),
    ];
    for (description, change) in changes {
        let mut harness = Harness::initialised(4, LEASE_MS);
        let a = harness.register(0, "a");
        harness.register(1_000, "b");
        let plan = super::super::plan_rebalance(&harness.state, 1_000).expect("something to plan");
        let Command::Rebalance { planned_at, .. } = plan else {
            panic!("{plan:?}");
        };
        change(&mut harness, &a);
        let outcome = harness.apply_expecting_no_change(plan.clone());
        assert_eq!(
            outcome.refusal(),
            Some(&RefusalReason::StalePlan {
                planned_at,
                assignment_revision: harness.state.assignment_revision()
            }),
            "{description}"
        );
    }
}

#[test]
fn p2_4_renewals_alone_do_not_make_a_plan_stale() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    let plan = super::super::plan_rebalance(&harness.state, 10).expect("something to plan");
    harness.renew_in_sync(20, &a);
    harness.renew_in_sync(20, &b);
    let outcome = harness.apply(plan.clone());
    assert!(matches!(outcome, Outcome::Rebalanced { ref granted, .. } if granted.len() == 4));
    // The same plan again (a duplicated proposal) is now stale.
    let outcome = harness.apply_expecting_no_change(plan);
    assert!(matches!(
        outcome.refusal(),
        Some(RefusalReason::StalePlan { .. })
    ));
}

#[test]
fn p5_1_malformed_plan_is_refused_whole_and_changes_nothing() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    harness.apply(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 0,
        planned_at: harness.state.revision(),
        moves: vec![Move {
            shard: 0,
            to: a.clone(),
        }],
    });
    let valid = Move {
        shard: 1,
        to: b.clone(),
    };
    let planned_at = harness.state.revision();
    let bad_plans: Vec<(&str, u64, Vec<Move>)> = vec![
        (
            "shard out of range",
            planned_at,
            vec![
                valid.clone(),
                Move {
                    shard: 4,
                    to: b.clone(),
                },
            ],
        ),
        (
            "shard u32::MAX",
            planned_at,
            vec![Move {
                shard: u32::MAX,
                to: b.clone(),
            }],
        ),
        (
            "same shard twice",
            planned_at,
            vec![
                valid.clone(),
                Move {
                    shard: 1,
                    to: a.clone(),
                },
            ],
        ),
        (
            "unknown target",
            planned_at,
            vec![
                valid.clone(),
                Move {
                    shard: 2,
                    to: "ex-404".into(),
                },
            ],
        ),
        (
            "move to current owner",
            planned_at,
            vec![
                valid.clone(),
                Move {
                    shard: 0,
                    to: a.clone(),
                },
            ],
        ),
        ("planned in the future", planned_at + 1, vec![valid.clone()]),
    ];
    for (description, planned_at, moves) in bad_plans {
        let outcome = harness.apply_expecting_no_change(Command::Rebalance {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 10,
            planned_at,
            moves,
        });
        assert!(
            matches!(outcome.refusal(), Some(RefusalReason::Invalid { .. })),
            "{description}: {outcome:?}"
        );
    }
    // An empty plan is accepted as a no-op.
    let outcome = harness.apply_expecting_no_change(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 10,
        planned_at,
        moves: vec![],
    });
    assert!(matches!(outcome, Outcome::Rebalanced { .. }));
}

// ---------------------------------------------------------------------------------------------
// P5.2 handoffs

#[test]
fn p5_2_shard_from_live_owner_is_released_before_granted() {
    let HandoffScenario {
        mut harness,
        a,
        b,
        revoke_revision,
    } = handoff_scenario();
    // Releasing: still A's (for the handoff), out of A's delivered set, invisible to B.
    for shard in [2, 3] {
        let entry = harness.state.shard(shard).expect("in range");
        assert_eq!(entry.owner.as_deref(), Some(a.as_str()));
        assert_eq!(entry.epoch, 1);
        assert_eq!(
            entry.handoff,
            Some(Handoff {
                to: Some(b.clone()),
                revoke_revision,
                from_grant_expiry_ms: LEASE_MS
            })
        );
    }
    assert_eq!(harness.state.delivered_set(&a), vec![(0, 1), (1, 1)]);
    assert_eq!(harness.state.delivered_set(&b), vec![]);
    assert_eq!(
        harness.state.grant_for(&b, 1_000).map(|g| g.shards),
        Some(vec![])
    );
    // Nothing has expired, so nothing completes without the acknowledgement.
    assert!(!harness.state.handoffs_due(2_000));
    harness.apply_expecting_no_change(Command::CompleteHandoffs { now_ms: 2_000 });
    // The acknowledgement hands the shards on at a new epoch.
    let outcome = harness.apply(release(&a, vec![2, 3], revoke_revision));
    assert_eq!(
        outcome,
        Outcome::Released {
            completed: vec![2, 3],
            ignored: vec![],
            effects: Effects {
                revokes: vec![],
                assignments: vec![b.clone()]
            },
        }
    );
    assert_eq!(harness.state.delivered_set(&b), vec![(2, 2), (3, 2)]);
    assert_eq!(harness.state.delivered_set(&a), vec![(0, 1), (1, 1)]);
    assert_eq!(harness.state.releasing_count(), 0);
}

#[test]
fn p5_2_unowned_shard_is_granted_at_once() {
    let mut harness = Harness::initialised(2, LEASE_MS);
    let a = harness.register(0, "a");
    let outcome = harness.rebalance(0);
    assert_eq!(
        outcome,
        Outcome::Rebalanced {
            granted: vec![0, 1],
            releasing: vec![],
            cancelled: vec![],
            effects: Effects {
                revokes: vec![],
                assignments: vec![a.clone()]
            },
        }
    );
    assert_eq!(harness.state.delivered_set(&a), vec![(0, 1), (1, 1)]);
}

#[test]
fn p5_2_ack_for_a_handoff_no_longer_current_is_ignored() {
    // Acknowledgements that do not name the current handoff (shard, old owner, revoke revision).
    /// (what is wrong with the acknowledgement, how to make it)
    type Case = (&'static str, fn(&HandoffScenario) -> Command);
    let cases: [Case; 6] = [
        ("older revoke revision", |s| {
            release(&s.a, vec![2], s.revoke_revision - 1)
        }),
        ("newer revoke revision", |s| {
            release(&s.a, vec![2], s.revoke_revision + 1)
        }),
        ("not the old owner", |s| {
            release(&s.b, vec![2], s.revoke_revision)
        }),
        ("shard not releasing", |s| {
            release(&s.a, vec![0], s.revoke_revision)
        }),
        ("shard out of range", |s| {
            release(&s.a, vec![4, u32::MAX], s.revoke_revision)
        }),
        ("no shards", |s| release(&s.a, vec![], s.revoke_revision)),
    ];
    for (description, make) in cases {
        let mut scenario = handoff_scenario();
        let command = make(&scenario);
        let outcome = scenario.harness.apply_expecting_no_change(command);
        assert!(
            matches!(outcome, Outcome::Released { ref completed, .. } if completed.is_empty()),
            "{description}: {outcome:?}"
        );
    }

    // A handoff cancelled and started again has a new revoke revision: the first revoke's
    // acknowledgement, arriving late, must not hand the shard on while A admits it again.
    let HandoffScenario {
        mut harness,
        a,
        b,
        revoke_revision,
    } = handoff_scenario();
    let planned_at = harness.state.revision();
    harness.apply(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 1_500,
        planned_at,
        moves: vec![Move {
            shard: 2,
            to: a.clone(),
        }],
    });
    let second_revoke = harness.next_index();
    let planned_at = harness.state.revision();
    harness.apply(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 1_600,
        planned_at,
        moves: vec![Move {
            shard: 2,
            to: b.clone(),
        }],
    });
    let outcome = harness.apply(release(&a, vec![2, 3], revoke_revision));
    assert_eq!(
        outcome,
        Outcome::Released {
            completed: vec![3],
            ignored: vec![2],
            effects: Effects {
                revokes: vec![],
                assignments: vec![b.clone()]
            },
        }
    );
    assert_eq!(harness.owner(2), Some(a.as_str()));
    // A duplicate of an acknowledgement already applied is ignored too.
    harness.apply_expecting_no_change(release(&a, vec![3], revoke_revision));
    // The current one is accepted.
    let outcome = harness.apply(release(&a, vec![2], second_revoke));
    assert!(matches!(outcome, Outcome::Released { completed, .. } if completed == vec![2]));
    // An executor that is gone is not found.
    let outcome = harness.apply_expecting_no_change(release("ex-404", vec![2], second_revoke));
    assert_eq!(outcome, Outcome::NotFound);
}

#[test]
fn p5_2_renewal_claims_ack_only_at_or_after_revoke_revision() {
    /// (description, claims, revision offset from the revoke revision, shards acknowledged)
    type Case = (&'static str, Vec<(ShardId, Epoch)>, i64, Vec<ShardId>);
    let table: [Case; 7] = [
        (
            "claims predate the revoke",
            vec![(0, 1), (1, 1)],
            -1,
            vec![],
        ),
        ("claims predate the revoke by far", vec![], -3, vec![]),
        ("claims at the revoke", vec![(0, 1), (1, 1)], 0, vec![2, 3]),
        (
            "one shard still claimed",
            vec![(0, 1), (1, 1), (2, 1)],
            0,
            vec![3],
        ),
        ("claimed at another epoch", vec![(2, 9), (3, 1)], 0, vec![]),
        ("revision beyond the state", vec![], 1, vec![]),
        (
            "out-of-range claims only",
            vec![(4, 1), (u32::MAX, 1)],
            0,
            vec![2, 3],
        ),
    ];
    for (description, claims, offset, expected) in table {
        let HandoffScenario {
            mut harness,
            a,
            b,
            revoke_revision,
        } = handoff_scenario();
        let revision = revoke_revision.saturating_add_signed(offset);
        let (result, effects) = harness.renew(5_000, &a, claims, revision);
        assert_eq!(acknowledged(&result), expected, "{description}");
        let expected_assignments = if expected.is_empty() {
            vec![]
        } else {
            vec![b.clone()]
        };
        assert_eq!(effects.assignments, expected_assignments, "{description}");
        for shard in [2, 3] {
            let handed_on = expected.contains(&shard);
            let expected_owner = if handed_on { &b } else { &a };
            assert_eq!(
                harness.owner(shard),
                Some(expected_owner.as_str()),
                "{description}"
            );
            assert_eq!(
                harness.epoch(shard),
                if handed_on { 2 } else { 1 },
                "{description}"
            );
        }
    }
}

/// The delivery task is woken by a commit whose effects are not empty (`CommitSignal::of`): a
/// revoke alone, as a plan that only marks shards releasing makes, or a push alone is work
/// (P5.2, P4.3).
#[test]
fn p5_2_a_revoke_alone_or_a_push_alone_is_something_to_deliver() {
    let revoke_only = Effects {
        revokes: vec![Revoke {
            executor_id: "ex-1".into(),
            shards: vec![0],
            revision: 3,
        }],
        assignments: vec![],
    };
    let push_only = Effects {
        revokes: vec![],
        assignments: vec!["ex-2".into()],
    };
    assert!(!revoke_only.is_empty());
    assert!(!push_only.is_empty());
    assert!(Effects::default().is_empty());
}

#[test]
fn p5_2_handoff_completes_when_old_grant_expires() {
    let HandoffScenario {
        mut harness, a, b, ..
    } = handoff_scenario();
    // A renews with claims that predate the revoke: no acknowledgement, and its newer lease does
    // not extend the bound, since that grant's set no longer includes the releasing shards.
    let (result, _) = harness.renew(20_000, &a, vec![(0, 1), (1, 1), (2, 1), (3, 1)], 2);
    assert_eq!(acknowledged(&result), Vec::<u32>::new());
    assert_eq!(
        harness.state.executor(&a).map(|e| e.lease_expiry_ms),
        Some(80_000)
    );
    assert_eq!(harness.state.next_handoff_due_ms(), Some(LEASE_MS + 1));
    // (instant, shards handed on): not in the expiry's own millisecond, only after it.
    let table: [(u64, Vec<u32>); 3] = [(0, vec![]), (LEASE_MS, vec![]), (LEASE_MS + 1, vec![2, 3])];
    for (now_ms, expected) in table {
        assert_eq!(harness.state.handoffs_due(now_ms), !expected.is_empty());
        let outcome = harness.apply(Command::CompleteHandoffs { now_ms });
        let expected_effects = Effects {
            revokes: vec![],
            assignments: if expected.is_empty() {
                vec![]
            } else {
                vec![b.clone()]
            },
        };
        assert_eq!(
            outcome,
            Outcome::HandoffsCompleted {
                completed: expected,
                effects: expected_effects
            },
            "at {now_ms}"
        );
    }
    assert_eq!(harness.state.delivered_set(&b), vec![(2, 2), (3, 2)]);
    assert_eq!(harness.state.next_handoff_due_ms(), None);
}

#[test]
fn p5_2_releasing_shard_moved_back_to_its_old_owner_keeps_its_epoch() {
    let HandoffScenario {
        mut harness, a, b, ..
    } = handoff_scenario();
    // B leaves before the acknowledgement; the next plan gives 2 and 3 back to A, cancelling the
    // handoffs: no one else held them, so no new epoch (I2).
    harness.apply(Command::Deregister {
        now_ms: 1_500,
        executor_id: b,
    });
    let outcome = harness.rebalance(1_600);
    assert_eq!(
        outcome,
        Outcome::Rebalanced {
            granted: vec![],
            releasing: vec![],
            cancelled: vec![2, 3],
            effects: Effects {
                revokes: vec![],
                assignments: vec![a.clone()]
            },
        }
    );
    assert_eq!(
        harness.state.delivered_set(&a),
        vec![(0, 1), (1, 1), (2, 1), (3, 1)]
    );
}

#[test]
fn p5_2_retargeted_handoff_keeps_its_revoke_revision() {
    let HandoffScenario {
        mut harness,
        a,
        b,
        revoke_revision,
    } = handoff_scenario();
    let c = harness.register(1_500, "incarnation-c");
    let outcome = harness.rebalance(1_500);
    // Loads: A 2 delivered, B 2 incoming, C 0 → quotas 2, 1, 1: shard 3 is retargeted to C.
    assert_eq!(
        outcome,
        Outcome::Rebalanced {
            granted: vec![],
            releasing: vec![3],
            cancelled: vec![],
            effects: Effects::default(),
        }
    );
    let handoff = harness.state.shard(3).and_then(|s| s.handoff.clone());
    assert_eq!(
        handoff,
        Some(Handoff {
            to: Some(c.clone()),
            revoke_revision,
            from_grant_expiry_ms: LEASE_MS
        })
    );
    harness.apply(release(&a, vec![2, 3], revoke_revision));
    assert_eq!(harness.state.delivered_set(&b), vec![(2, 2)]);
    assert_eq!(harness.state.delivered_set(&c), vec![(3, 2)]);
}

// ---------------------------------------------------------------------------------------------
// P4.2 claims and group commit

#[test]
fn p4_2_renewal_reports_claims_mismatch_and_replies_with_the_recorded_set() {
    let mut harness = Harness::initialised(2, LEASE_MS);
    let a = harness.register(0, "a");
    harness.rebalance(0);
    let revision = harness.state.revision();
    // (claims, mismatch)
    // Ascending claims are compared as they are; others are sorted and deduplicated first.
    let table: [(Vec<(u32, u64)>, bool); 9] = [
        (vec![(0, 1), (1, 1)], false),
        (vec![(1, 1), (0, 1)], false),
        (vec![(1, 1), (0, 1), (0, 1)], false),
        (vec![(0, 1), (0, 1), (1, 1)], false),
        (vec![], true),
        (vec![(0, 1)], true),
        (vec![(0, 1), (1, 2)], true),
        (vec![(1, 1), (0, 2)], true),
        (vec![(0, 1), (1, 1), (7, 1)], true),
    ];
    for (claims, expected_mismatch) in table {
        let (result, _) = harness.renew(1_000, &a, claims.clone(), revision);
        let RenewResult::Renewed {
            grant,
            claims_mismatch,
            ..
        } = result
        else {
            panic!("{result:?}");
        };
        assert_eq!(claims_mismatch, expected_mismatch, "{claims:?}");
        assert_eq!(grant.shards, vec![(0, 1), (1, 1)]);
    }
}

/// A claim repeated is one claim (P4.2 compares sets): an executor holding one shard that lists
/// it twice is in sync.
#[test]
fn p4_2_a_repeated_claim_of_the_one_shard_held_is_no_mismatch() {
    let mut harness = Harness::initialised(1, LEASE_MS);
    let a = harness.register(0, "a");
    harness.rebalance(0);
    let revision = harness.state.revision();
    let (result, _) = harness.renew(1_000, &a, vec![(0, 1), (0, 1)], revision);
    let RenewResult::Renewed {
        claims_mismatch, ..
    } = result
    else {
        panic!("{result:?}");
    };
    assert!(!claims_mismatch);
}

/// A renewal whose claims acknowledge a revoke completes the handoff, which changes owners: it
/// moves the assignment revision, so a plan made before it is stale (P2.4, P5.2).
#[test]
fn p2_4_a_renewal_that_acknowledges_a_revoke_makes_earlier_plans_stale() {
    let HandoffScenario {
        mut harness,
        a,
        b,
        revoke_revision,
    } = handoff_scenario();
    let planned_at = harness.state.revision();
    let index = harness.next_index();
    let (result, _) = harness.renew(5_000, &a, vec![(0, 1), (1, 1)], revoke_revision);
    assert_eq!(acknowledged(&result), vec![2, 3]);
    assert_eq!(harness.state.assignment_revision(), index);
    let outcome = harness.apply_expecting_no_change(Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 5_000,
        planned_at,
        moves: vec![Move { shard: 0, to: b }],
    });
    assert_eq!(
        outcome.refusal(),
        Some(&RefusalReason::StalePlan {
            planned_at,
            assignment_revision: index,
        })
    );
}

#[test]
fn p4_2_group_commit_answers_each_renewal_in_order() {
    let mut harness = Harness::initialised(2, LEASE_MS);
    let a = harness.register(0, "a");
    let b = harness.register(0, "b");
    let index = harness.next_index();
    let outcome = harness.apply(Command::Renew {
        now_ms: 1_000,
        renewals: [a.as_str(), "ex-404", b.as_str()]
            .into_iter()
            .map(|executor_id| Renewal {
                executor_id: executor_id.into(),
                claims: vec![],
                revision: 0,
                ready: Vec::new(),
            })
            .collect(),
    });
    let Outcome::Renewed { results, effects } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(effects, Effects::default());
    let summary: Vec<(Option<ExecutorId>, u64)> = results
        .iter()
        .map(|result| match result {
            RenewResult::Renewed { grant, .. } => (Some(grant.executor_id.clone()), grant.revision),
            RenewResult::UnknownExecutor { .. } => (None, 0),
        })
        .collect();
    assert_eq!(summary, vec![(Some(a), index), (None, 0), (Some(b), index)]);
    // Renewals change leases only: the assignment revision stays put.
    assert_eq!(harness.state.revision(), index);
    assert!(harness.state.assignment_revision() < index);
}

// ---------------------------------------------------------------------------------------------
// I2 epochs

#[test]
fn i2_epoch_advances_only_on_owner_change() {
    let mut harness = Harness::initialised(2, LEASE_MS);
    let a = harness.register(0, "a");
    assert_eq!(harness.epoch(0), 0);
    // (step, expected epochs of shards 0 and 1 after it)
    harness.rebalance(0);
    assert_eq!((harness.epoch(0), harness.epoch(1)), (1, 1), "first owner");
    harness.renew_in_sync(1_000, &a);
    harness.renew_in_sync(2_000, &a);
    harness.apply_expecting_no_change(register_command(2_500, "a"));
    assert_eq!(
        (harness.epoch(0), harness.epoch(1)),
        (1, 1),
        "renewals and retries"
    );
    let b = harness.register(3_000, "b");
    harness.rebalance(3_000);
    assert_eq!(
        (harness.epoch(0), harness.epoch(1)),
        (1, 1),
        "releasing is not a new owner"
    );
    harness.renew_in_sync(4_000, &a);
    assert_eq!(harness.owner(1), Some(b.as_str()));
    assert_eq!((harness.epoch(0), harness.epoch(1)), (1, 2), "handed on");
    harness.apply(Command::Deregister {
        now_ms: 5_000,
        executor_id: b.clone(),
    });
    assert_eq!(
        (harness.epoch(0), harness.epoch(1)),
        (1, 2),
        "unowned keeps its epoch"
    );
    harness.rebalance(5_000);
    assert_eq!(harness.owner(1), Some(a.as_str()));
    assert_eq!((harness.epoch(0), harness.epoch(1)), (1, 3), "next owner");
}

// ---------------------------------------------------------------------------------------------
// I6 bad input

#[test]
fn i6_bad_input_is_refused_or_ignored_without_panic_and_without_change() {
    let long = "x".repeat(MAX_TEXT_FIELD_BYTES + 1);
    let HandoffScenario {
        harness,
        a,
        revoke_revision,
        ..
    } = handoff_scenario();
    let register = |incarnation: &str, address: &str, name: Option<&str>| Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 3_000,
        incarnation: incarnation.into(),
        address: address.into(),
        name: name.map(str::to_owned),
        credential_sha256: None,
        capacity: crate::lease::DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    };
    let planned_at = harness.state.revision();
    let cases: Vec<(&str, Command)> = vec![
        ("empty incarnation", register("", "http://x", None)),
        ("empty address", register("inc", "", None)),
        ("long incarnation", register(&long, "http://x", None)),
        ("long address", register("inc", &long, None)),
        ("long name", register("inc", "http://x", Some(&long))),
        (
            "zero lease",
            Command::SetLeaseDuration {
                now_ms: 3_000,
                lease_duration_ms: 0,
            },
        ),
        (
            "init with zero lease",
            Command::Init {
                now_ms: 3_000,
                shard_count: 4,
                lease_duration_ms: 0,
            },
        ),
        (
            "release out of range",
            release(&a, vec![4, 99, u32::MAX], revoke_revision),
        ),
        (
            "move out of range",
            Command::Rebalance {
                namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                now_ms: 3_000,
                planned_at,
                moves: vec![Move {
                    shard: 99,
                    to: a.clone(),
                }],
            },
        ),
        (
            "deregister empty id",
            Command::Deregister {
                now_ms: 3_000,
                executor_id: String::new(),
            },
        ),
        (
            "reap unknown",
            Command::Reap {
                now_ms: u64::MAX,
                executor_ids: vec!["nobody".into(), String::new()],
            },
        ),
        (
            "renew unknown",
            Command::Renew {
                now_ms: 3_000,
                renewals: vec![Renewal {
                    executor_id: "nobody".into(),
                    claims: vec![(u32::MAX, u64::MAX)],
                    revision: u64::MAX,
                    ready: Vec::new(),
                }],
            },
        ),
        (
            "renew nobody",
            Command::Renew {
                now_ms: 3_000,
                renewals: vec![],
            },
        ),
    ];
    for (description, command) in cases {
        let mut copy = harness.clone();
        let outcome = copy.apply_expecting_no_change(command);
        assert!(
            !matches!(
                outcome,
                Outcome::Registered { .. } | Outcome::Initialised { .. }
            ),
            "{description}: {outcome:?}"
        );
    }
}

/// The bound is inclusive: the wire accepts a text field of exactly `MAX_TEXT_FIELD_BYTES`, so
/// the state machine must too, or a request the HTTP layer let through would be committed only
/// to be refused.
#[test]
fn i6_text_fields_of_exactly_the_largest_size_are_accepted() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let longest = "x".repeat(MAX_TEXT_FIELD_BYTES);
    let outcome = harness.apply(Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 0,
        incarnation: longest.clone(),
        address: longest.clone(),
        name: Some(longest),
        credential_sha256: None,
        capacity: crate::lease::DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    });
    assert!(
        matches!(
            outcome,
            Outcome::Registered {
                already_registered: false,
                ..
            }
        ),
        "{outcome:?}"
    );
}

#[test]
fn i6_out_of_range_claims_are_flagged_and_acknowledge_nothing_extra() {
    let HandoffScenario {
        harness,
        a,
        revoke_revision,
        ..
    } = handoff_scenario();
    let clean_claims = vec![(0, 1), (1, 1), (2, 1), (3, 1)];
    let mut dirty_claims = clean_claims.clone();
    dirty_claims.extend([(4, 1), (u32::MAX, u64::MAX)]);
    let mut clean = harness.clone();
    let mut dirty = harness;
    let (clean_result, _) = clean.renew(5_000, &a, clean_claims, revoke_revision);
    let (dirty_result, _) = dirty.renew(5_000, &a, dirty_claims, revoke_revision);
    assert_eq!(clean.state, dirty.state);
    assert_eq!(acknowledged(&dirty_result), Vec::<u32>::new());
    assert!(matches!(
        dirty_result,
        RenewResult::Renewed {
            claims_mismatch: true,
            ..
        }
    ));
    assert!(matches!(
        clean_result,
        RenewResult::Renewed {
            claims_mismatch: true,
            ..
        }
    ));
}

#[test]
fn i6_extreme_times_saturate_without_panic() {
    let mut harness = Harness::initialised(2, u64::MAX);
    let a = harness.register(u64::MAX - 5, "a");
    assert_eq!(
        harness.state.executor(&a).map(|e| e.lease_expiry_ms),
        Some(u64::MAX)
    );
    harness.rebalance(0);
    harness.renew_in_sync(u64::MAX, &a);
    assert_eq!(
        harness
            .state
            .grant_for(&a, u64::MAX)
            .map(|g| g.lease_ttl_ms),
        Some(0)
    );
    let b = harness.register(0, "b");
    // A handoff whose bound is the end of time never completes by expiry, only by acknowledgement,
    // and a lease ending at the end of time never lapses (only after its millisecond passed).
    harness.rebalance(0);
    assert!(!harness.state.handoffs_due(u64::MAX - 1));
    assert!(!harness.state.handoffs_due(u64::MAX));
    harness.apply(Command::Reap {
        now_ms: u64::MAX,
        executor_ids: vec![a, b],
    });
    assert_eq!(
        harness.state.executors().count(),
        2,
        "leases ending at the end of time never lapse"
    );
}

#[test]
fn state_views_before_init_are_empty() {
    let state = LeaseState::default();
    assert_eq!(state.config(), None);
    assert_eq!(state.revision(), 0);
    assert!(state.shards().is_empty());
    assert_eq!(state.grant_for("ex-1", 0), None);
    assert!(state.overdue_executors(u64::MAX).is_empty());
    assert!(!state.handoffs_due(u64::MAX));
    assert_eq!(super::super::plan_rebalance(&state, 0), None);
    assert!(state.consistency_violations().is_empty());
}

// ---------------------------------------------------------------------------------------------
// P2.1 structural invariants: what `consistency_violations` reports (a restored snapshot that
// breaks one is refused, manager/src/server/restore.rs)

/// A state no command can produce, one corruption at a time, each reported by name. The base is
/// the handoff scenario (A owns 0 and 1, and 2 and 3 are releasing from A to B).
#[test]
fn p2_1_each_broken_structural_invariant_is_reported() {
    let HandoffScenario { harness, a, b, .. } = handoff_scenario();
    let base = harness.state;
    assert_eq!(base.consistency_violations(), Vec::<String>::new());
    let tombstone = |executor_id: &str, removed_revision: u64| Tombstone {
        executor_id: executor_id.to_owned(),
        incarnation: format!("incarnation-of-{executor_id}"),
        reason: TombstoneReason::Deregistered,
        removed_revision,
        removed_at_ms: 0,
    };
    type Corruption = Box<dyn Fn(&mut LeaseState)>;
    let (a2, b2, a3, a4) = (a.clone(), b.clone(), a.clone(), a.clone());
    let cases: Vec<(&str, Corruption, &str)> = vec![
        (
            "a shard missing from the table",
            Box::new(|state| {
                default_space(state).shards.pop_back();
            }),
            "namespace default's shard table has 3 entries, its config says 4",
        ),
        (
            "a shard numbered off its index",
            Box::new(|state| default_space(state).shards[1].id = 7),
            "shard 7 of default is at index 1",
        ),
        (
            "an owner whose set lacks the shard",
            Box::new(move |state| {
                if let Some(executor) = state.executors.get_mut(&a2) {
                    executor.owned_shards.remove(&0);
                }
            }),
            "shard 0 of default names owner",
        ),
        (
            "an owner not registered",
            Box::new(|state| default_space(state).shards[0].owner = Some("ex-404".to_owned())),
            "shard 0 of default names owner ex-404, who is not registered in default",
        ),
        (
            "an owned shard at epoch 0",
            Box::new(|state| default_space(state).shards[1].epoch = 0),
            "shard 1 of default is owned at epoch 0",
        ),
        (
            "a releasing shard without an owner",
            Box::new(move |state| {
                default_space(state).shards[2].owner = None;
                if let Some(executor) = state.executors.get_mut(&a3) {
                    executor.owned_shards.remove(&2);
                }
            }),
            "shard 2 of default is releasing but unowned",
        ),
        (
            "a handoff to an executor not registered",
            Box::new(|state| {
                if let Some(handoff) = default_space(state).shards[3].handoff.as_mut() {
                    handoff.to = Some("ex-404".to_owned());
                }
            }),
            "shard 3 of default is releasing to ex-404, who is not registered in default",
        ),
        (
            "a handoff to its own owner",
            Box::new(move |state| {
                if let Some(handoff) = default_space(state).shards[3].handoff.as_mut() {
                    handoff.to = Some(a4.clone());
                }
            }),
            "shard 3 of default is releasing to its own owner",
        ),
        (
            "an executor listing a shard it does not own",
            Box::new(move |state| {
                if let Some(executor) = state.executors.get_mut(&b2) {
                    executor.owned_shards.insert(0);
                }
            }),
            "lists shard 0, whose owner is",
        ),
        (
            "the releasing index out of step with the shard table",
            Box::new(|state| {
                default_space(state).releasing.remove(&2);
            }),
            "default's releasing index lists",
        ),
        (
            "an executor also tombstoned",
            Box::new(move |state| {
                state.tombstones.insert(b.clone(), tombstone(&b, 1));
            }),
            "is also tombstoned",
        ),
        (
            "the assignment revision ahead of the revision",
            Box::new(|state| state.assignment_revision = state.revision + 1),
            "assignment revision",
        ),
        (
            "more tombstones than kept",
            Box::new(move |state| {
                for n in 0..=MAX_TOMBSTONES {
                    let id = format!("ex-gone-{n}");
                    state.tombstones.insert(id.clone(), tombstone(&id, 1));
                }
            }),
            "tombstones kept",
        ),
    ];
    for (description, corrupt, expected) in cases {
        let mut state = base.clone();
        corrupt(&mut state);
        let violations = state.consistency_violations();
        assert!(
            violations
                .iter()
                .any(|violation| violation.contains(expected)),
            "{description}: expected a violation containing {expected:?}, got {violations:?}"
        );
    }
    let mut at_the_bound = base;
    for n in 0..MAX_TOMBSTONES {
        let id = format!("ex-gone-{n}");
        at_the_bound
            .tombstones
            .insert(id.clone(), tombstone(&id, 1));
    }
    assert_eq!(
        at_the_bound.consistency_violations(),
        Vec::<String>::new(),
        "exactly MAX_TOMBSTONES tombstones are within the bound"
    );
}
