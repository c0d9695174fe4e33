//! State schemas (P14.1) and the cluster version (P14.3): every conversion between schema 2
//! (release 0.1.0, `lease::v2`), schema 3 (`lease::v3`), schema 4 (`lease::v4`), schema 5
//! (`lease::v5`), schema 6 (`lease::v6`), schema 7 (`lease::v7`), schema 8 (`lease::v8`), schema
//! 9 (`lease::v9`), schema 10 (`lease::v10`) and this build's types, the gate in front of
//! proposals, and a property test that a state migrated at any point behaves exactly as the state
//! it came from.

use proptest::prelude::*;

use super::super::schema::{
    check_proposable, APP_VERSION_SCHEMA, CAPACITY_SCHEMA, CREDENTIALS_SCHEMA,
    FIRST_RELEASE_SCHEMA, GROUP_REGISTRATION_SCHEMA, LABELS_SCHEMA, LEASE_RESERVATION_SCHEMA,
    NAMESPACES_SCHEMA, NAMESPACE_PLACEMENT_SCHEMA, NEWEST_SCHEMA, OPERATOR_CONTROLS_SCHEMA,
};
use super::super::{
    chain, v2, Command, LeaseState, MembershipChange, OperatorAction, Outcome, PlacementOverrides,
    Renewal, DEFAULT_CAPACITY,
};
use super::encoding::{
    busy_state, every_command, every_placement_setting, labelled_state, namespaced_state,
    operated_state, placed_state, reserved_state, GROUP_REGISTRATION_COMMANDS, LABELS_COMMANDS,
    LEASE_RESERVATION_COMMANDS, NAMESPACE_COMMANDS, NAMESPACE_PLACEMENT_COMMANDS,
    OPERATOR_COMMANDS,
};
use super::{default_space, register_command, Harness, LEASE_MS};

fn bincode_round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(value, config).expect("encodes");
    let (back, read) = bincode::serde::decode_from_slice(&bytes, config).expect("decodes");
    assert_eq!(read, bytes.len());
    back
}

/// What a restart on a directory of schema 2 does: down to schema 2's types, through its bytes,
/// and up again.
fn migrated(state: &LeaseState) -> LeaseState {
    let old = chain::state_to_v2(state).expect("expressible in schema 2");
    chain::state_from_v2(bincode_round_trip(&old))
}

/// The same through schema 3's types.
fn migrated_through_schema_3(state: &LeaseState) -> LeaseState {
    let old = chain::state_to_v3(state).expect("expressible in schema 3");
    chain::state_from_v3(bincode_round_trip(&old))
}

/// The same through schema 4's types.
fn migrated_through_schema_4(state: &LeaseState) -> LeaseState {
    let old = chain::state_to_v4(state).expect("expressible in schema 4");
    chain::state_from_v4(bincode_round_trip(&old))
}

/// The same through schema 5's types.
fn migrated_through_schema_5(state: &LeaseState) -> LeaseState {
    let old = chain::state_to_v5(state).expect("expressible in schema 5");
    chain::state_from_v5(bincode_round_trip(&old))
}

#[test]
fn every_schema_2_command_converts_up_and_back_unchanged() {
    for command in every_command() {
        match chain::command_to_v2(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v2(old),
                    command,
                    "schema 2 keeps {command:?}"
                );
                assert_eq!(command.required_schema(), FIRST_RELEASE_SCHEMA);
            }
            Err(_) => assert!(
                command.required_schema() > FIRST_RELEASE_SCHEMA,
                "only commands of later schemas are refused by schema 2: {command:?}"
            ),
        }
    }
}

/// P14.1: every command schema 3 can express converts to it and back unchanged, and only
/// those that need schema 4 or later are refused.
#[test]
fn every_schema_3_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v3(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v3(old),
                    command,
                    "schema 3 keeps {command:?}"
                );
                assert!(command.required_schema() <= CREDENTIALS_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert!(
                    command.required_schema() >= CAPACITY_SCHEMA,
                    "only commands of schema 4 or later are refused by schema 3: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused,
        5 + OPERATOR_COMMANDS
            + LABELS_COMMANDS
            + GROUP_REGISTRATION_COMMANDS
            + LEASE_RESERVATION_COMMANDS
            + NAMESPACE_COMMANDS
            + NAMESPACE_PLACEMENT_COMMANDS,
        "a capacity, a raise to 4, an application version, a raise to 5, the operator's \
         commands, a raise to 6, labels, a raise to 7, registrations in one entry, a raise to 8, \
         lease reservations, reaps by the leader's judgment, a raise to 9, the namespace commands and the placement commands"
    );
}

/// P14.1, P17.3: every command schema 4 can express converts to it and back unchanged, and
/// only those that need schema 5 are refused.
#[test]
fn p14_1_p17_3_every_schema_4_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v4(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v4(old),
                    command,
                    "schema 4 keeps {command:?}"
                );
                assert!(command.required_schema() <= CAPACITY_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert!(
                    command.required_schema() >= APP_VERSION_SCHEMA,
                    "only commands of schema 5 or later are refused by schema 4: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused,
        3 + OPERATOR_COMMANDS
            + LABELS_COMMANDS
            + GROUP_REGISTRATION_COMMANDS
            + LEASE_RESERVATION_COMMANDS
            + NAMESPACE_COMMANDS
            + NAMESPACE_PLACEMENT_COMMANDS,
        "an application version, a raise to 5, the operator's commands, a raise to 6, labels, a \
         raise to 7, registrations in one entry, a raise to 8, lease reservations, reaps by the \
         leader's judgment, a raise to 9, the namespace commands and the placement commands"
    );
}

/// P14.1, P17.4: every command schema 5 can express converts to it and back unchanged, and
/// only those that need schema 6 (every operator's command, a raise to 6) are refused.
#[test]
fn p14_1_p17_4_every_schema_5_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v5(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v5(old),
                    command,
                    "schema 5 keeps {command:?}"
                );
                assert!(command.required_schema() <= APP_VERSION_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert!(
                    command.required_schema() >= OPERATOR_CONTROLS_SCHEMA,
                    "only commands of schema 6 or later are refused by schema 5: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused,
        1 + OPERATOR_COMMANDS
            + LABELS_COMMANDS
            + GROUP_REGISTRATION_COMMANDS
            + LEASE_RESERVATION_COMMANDS
            + NAMESPACE_COMMANDS
            + NAMESPACE_PLACEMENT_COMMANDS,
        "the operator's commands, a raise to 6, labels, a raise to 7, registrations in one entry, \
         a raise to 8, lease reservations, reaps by the leader's judgment, a raise to 9, the namespace commands and the placement commands"
    );
}

/// P14.1, P18.3: every command schema 6 can express converts to it and back unchanged (the
/// operator's commands included), and only those that need schema 7 (labels, a raise to 7) are
/// refused.
#[test]
fn p14_1_p18_3_every_schema_6_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v6(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v6(old),
                    command,
                    "schema 6 keeps {command:?}"
                );
                assert!(command.required_schema() <= OPERATOR_CONTROLS_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert!(
                    command.required_schema() >= LABELS_SCHEMA,
                    "only commands of schema 7 or later are refused by schema 6: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused,
        LABELS_COMMANDS
            + GROUP_REGISTRATION_COMMANDS
            + LEASE_RESERVATION_COMMANDS
            + NAMESPACE_COMMANDS
            + NAMESPACE_PLACEMENT_COMMANDS,
        "labels, a raise to 7, registrations in one entry, a raise to 8, lease reservations, \
         reaps by the leader's judgment, a raise to 9, the namespace commands and the placement commands"
    );
}

/// P14.1: every command schema 7 can express converts to it and back unchanged (labels
/// included), and only those that need schema 8 (registrations in one entry, a raise to 8) or
/// later are refused.
#[test]
fn p14_1_every_schema_7_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v7(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v7(old),
                    command,
                    "schema 7 keeps {command:?}"
                );
                assert!(command.required_schema() <= LABELS_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert!(
                    command.required_schema() >= GROUP_REGISTRATION_SCHEMA,
                    "only commands of schema 8 or later are refused by schema 7: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused,
        GROUP_REGISTRATION_COMMANDS
            + LEASE_RESERVATION_COMMANDS
            + NAMESPACE_COMMANDS
            + NAMESPACE_PLACEMENT_COMMANDS,
        "registrations in one entry, a raise to 8, lease reservations, reaps by the leader's \
         judgment, a raise to 9, the namespace commands and the placement commands"
    );
}

/// P14.1: every command schema 8 can express converts to it and back unchanged (registrations
/// in one entry included), and only those that need schema 9 (lease reservations, reaps by the
/// leader's judgment, a raise to 9) are refused.
#[test]
fn p14_1_every_schema_8_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v8(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v8(old),
                    command,
                    "schema 8 keeps {command:?}"
                );
                assert!(command.required_schema() <= GROUP_REGISTRATION_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert!(
                    command.required_schema() >= LEASE_RESERVATION_SCHEMA,
                    "only commands of schema 9 or later are refused by schema 8: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused,
        LEASE_RESERVATION_COMMANDS + NAMESPACE_COMMANDS + NAMESPACE_PLACEMENT_COMMANDS,
        "lease reservations, reaps by the leader's judgment, a raise to 9, the namespace \
         commands and the placement commands"
    );
}

/// P6.6, P6.7 through P14.3 and P14.1: a lease reservation and a reap by the leader's judgment
/// are schema 9, refused by every older schema's types with the same reason, naming schema 9, and
/// proposed only once the cluster version is 9; a state holding a reservation is not expressible
/// in schema 8 whatever its cluster version says, and without one, lowered to 8, reads back from
/// schema 8's types unchanged (numbers a batch minted past its entry's index included).
#[test]
fn p6_6_p6_7_reservations_need_schema_9_everywhere() {
    let newest: Vec<Command> = every_command()
        .into_iter()
        .filter(|command| {
            matches!(
                command,
                Command::ReserveLeases { .. } | Command::ReapLapsed { .. }
            )
        })
        .collect();
    assert_eq!(
        newest.len(),
        LEASE_RESERVATION_COMMANDS - 1,
        "all but the raise"
    );
    let schema_9 = format!("schema {LEASE_RESERVATION_SCHEMA}");
    for command in newest {
        assert_eq!(
            command.required_schema(),
            LEASE_RESERVATION_SCHEMA,
            "{command:?}"
        );
        let refused = chain::command_to_v8(&command).unwrap_err();
        let names = if matches!(command, Command::ReserveLeases { .. }) {
            "reservation"
        } else {
            "judgment"
        };
        assert!(
            refused.0.contains(names) && refused.0.contains(&schema_9),
            "{refused}"
        );
        assert_eq!(chain::command_to_v7(&command), Err(refused));
        assert_eq!(chain::command_to_v5(&command), Err(refused));
        assert_eq!(chain::command_to_v2(&command), Err(refused));
        for below in [
            FIRST_RELEASE_SCHEMA,
            LABELS_SCHEMA,
            GROUP_REGISTRATION_SCHEMA,
        ] {
            let refused = check_proposable(&command, below).unwrap_err();
            assert_eq!(
                (refused.needed, refused.cluster_version),
                (LEASE_RESERVATION_SCHEMA, below),
                "{command:?}"
            );
        }
        assert!(check_proposable(&command, LEASE_RESERVATION_SCHEMA).is_ok());
    }

    let state = reserved_state();
    assert_eq!(state.required_schema(), LEASE_RESERVATION_SCHEMA);
    assert!(chain::state_to_v8(&state)
        .unwrap_err()
        .0
        .contains("above 8"));
    let mut lowered = state.clone();
    lowered.cluster_version = GROUP_REGISTRATION_SCHEMA;
    let refused = chain::state_to_v8(&lowered).unwrap_err();
    assert!(
        refused.0.contains("reservation") && refused.0.contains("schema 8"),
        "{refused}"
    );
    assert_eq!(chain::state_to_v7(&lowered), Err(refused));

    let reserved: Vec<String> = lowered
        .executors()
        .filter(|e| e.lease_reserved_until_ms != 0)
        .map(|e| e.id.clone())
        .collect();
    for id in reserved {
        if let Some(executor) = lowered.executors.get_mut(&id) {
            executor.lease_reserved_until_ms = 0;
        }
    }
    assert_ne!(lowered.next_executor_number, 0);
    let old = chain::state_to_v8(&lowered).expect("expressible in schema 8");
    assert_eq!(chain::state_from_v8(bincode_round_trip(&old)), lowered);
    assert!(
        chain::state_to_v7(&lowered).is_err(),
        "numbers minted past an entry's index"
    );
}

/// P14.1, P6.6: a state of schema 8 migrated to this build has no lease reserved, and a
/// reservation applies to it once the cluster version is raised to 9.
#[test]
fn p14_1_p6_6_a_schema_8_state_reads_with_no_reservations() {
    let mut schema_8 = reserved_state();
    schema_8.cluster_version = GROUP_REGISTRATION_SCHEMA;
    let ids: Vec<String> = schema_8.executors().map(|e| e.id.clone()).collect();
    for id in &ids {
        if let Some(executor) = schema_8.executors.get_mut(id) {
            executor.lease_reserved_until_ms = 0;
        }
    }
    let read = chain::state_from_v8(bincode_round_trip(
        &chain::state_to_v8(&schema_8).expect("expressible in schema 8"),
    ));
    assert!(read.executors().all(|e| e.lease_reserved_until_ms == 0));
    let mut harness = Harness {
        state: read,
        next_index: 10_000,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 5_000,
        cluster_version: LEASE_RESERVATION_SCHEMA,
    });
    let outcome = harness.apply(Command::ReserveLeases {
        now_ms: 5_000,
        executor_ids: ids.clone(),
    });
    let Outcome::LeasesReserved { reserved, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(reserved, ids);
    assert!(harness
        .state
        .executors()
        .all(|e| e.lease_reserved_until_ms > 5_000));
    assert!(chain::state_to_v8(&harness.state).is_err());
}

/// P18.3 through P14.3 and P14.1: a registration with labels is schema 7, refused by every
/// older schema's types with the same reason and proposed only once the cluster version is 7; a
/// state holding a labelled executor is not expressible in schema 6 whatever its cluster version
/// says, and without labels, lowered to 6, reads back from schema 6's types unchanged (its
/// operator controls included).
#[test]
fn p18_3_labels_need_schema_7_everywhere() {
    let labelled = every_command()
        .into_iter()
        .find(|command| matches!(command, Command::Register { labels, .. } if !labels.is_empty()))
        .expect("a labelled registration");
    assert_eq!(labelled.required_schema(), LABELS_SCHEMA);
    let refused = chain::command_to_v6(&labelled).unwrap_err();
    assert!(
        refused.0.contains("labels") && refused.0.contains("schema 7"),
        "{refused}"
    );
    assert_eq!(chain::command_to_v5(&labelled), Err(refused));
    assert_eq!(chain::command_to_v2(&labelled), Err(refused));
    for below in [APP_VERSION_SCHEMA, OPERATOR_CONTROLS_SCHEMA] {
        let refused = check_proposable(&labelled, below).unwrap_err();
        assert_eq!(
            (refused.needed, refused.cluster_version),
            (LABELS_SCHEMA, below)
        );
    }
    assert!(check_proposable(&labelled, LABELS_SCHEMA).is_ok());

    let state = labelled_state();
    assert_eq!(state.required_schema(), LABELS_SCHEMA);
    assert!(chain::state_to_v6(&state)
        .unwrap_err()
        .0
        .contains("above 6"));
    let mut lowered = state.clone();
    lowered.cluster_version = OPERATOR_CONTROLS_SCHEMA;
    let refused = chain::state_to_v6(&lowered).unwrap_err();
    assert!(
        refused.0.contains("labels") && refused.0.contains("schema 6"),
        "{refused}"
    );
    let bare = operated_state();
    assert!(bare.maintenance() && bare.audit().count() > 0);
    let old = chain::state_to_v6(&bare).expect("expressible in schema 6");
    assert_eq!(chain::state_from_v6(bincode_round_trip(&old)), bare);
}

/// P14.1, P18.3: a state of schema 6 migrated to this build has executors without labels, and a
/// labelled registration applies to it once the cluster version is raised to 7.
#[test]
fn p14_1_p18_3_a_schema_6_state_reads_with_no_labels() {
    let read = chain::state_from_v6(bincode_round_trip(
        &chain::state_to_v6(&operated_state()).expect("expressible in schema 6"),
    ));
    assert!(read.executors().all(|executor| executor.labels.is_empty()));
    let mut harness = Harness {
        state: read,
        next_index: 5_000,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: LABELS_SCHEMA,
    });
    let outcome = harness.apply(super::register_command_with_labels(
        0,
        "zoned",
        DEFAULT_CAPACITY,
        &[("zone", "b")],
    ));
    let Outcome::Registered { grant, .. } = outcome else {
        panic!("{outcome:?}");
    };
    let executor = harness
        .state
        .executor(&grant.executor_id)
        .expect("registered");
    assert_eq!(leasehold_api::wire::zone_of(&executor.labels), Some("b"));
}

#[test]
fn a_state_below_the_raise_converts_to_schema_2_and_back_unchanged() {
    for state in [
        LeaseState::default(),
        Harness::initialised(4, LEASE_MS).state,
        busy_state(),
    ] {
        assert_eq!(state.cluster_version(), FIRST_RELEASE_SCHEMA);
        assert_eq!(migrated(&state), state);
        assert_eq!(migrated_through_schema_3(&state), state);
        assert_eq!(migrated_through_schema_4(&state), state);
        assert_eq!(migrated_through_schema_5(&state), state);
        assert_eq!(state.required_schema(), FIRST_RELEASE_SCHEMA);
    }
}

#[test]
fn a_state_after_the_raise_is_not_expressible_in_schema_2() {
    let mut harness = Harness {
        state: busy_state(),
        next_index: 1_000,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 3_000,
        cluster_version: 3,
    });
    assert_eq!(harness.state.required_schema(), 3);
    assert!(chain::state_to_v2(&harness.state).is_err());
    assert_eq!(
        migrated_through_schema_3(&harness.state),
        harness.state,
        "a state of schema 3 reads back from schema 3's types unchanged, capacities 1"
    );
    assert_eq!(
        migrated_through_schema_4(&harness.state),
        harness.state,
        "and from schema 4's, no application versions"
    );
    assert_eq!(
        migrated_through_schema_5(&harness.state),
        harness.state,
        "and from schema 5's, no operator controls"
    );
}

#[test]
fn the_cluster_version_only_rises_and_may_be_raised_before_init() {
    let mut harness = Harness::new();
    let raise = |cluster_version| Command::SetClusterVersion {
        now_ms: 1,
        cluster_version,
    };
    assert_eq!(
        harness.apply(raise(3)),
        Outcome::ClusterVersionSet {
            previous: 2,
            cluster_version: 3
        },
        "accepted before Init: it concerns the replicas"
    );
    assert_eq!(harness.state.revision(), 1);
    // A stale or repeated raise changes nothing (P2.4), not even the revision.
    for stale in [3, 2] {
        let outcome = harness.apply_expecting_no_change(raise(stale));
        assert_eq!(
            outcome,
            Outcome::ClusterVersionSet {
                previous: 3,
                cluster_version: 3
            }
        );
    }
    assert_eq!(harness.state.cluster_version(), 3);
}

/// P13.4 through P14.3: a registration with a credential is schema 3, refused by schema 2's
/// types, and proposed only once the cluster version is 3; the state holding one is schema 3.
#[test]
fn a_credential_needs_schema_3_everywhere() {
    let mut with_credential = register_command(0, "a");
    if let Command::Register {
        credential_sha256, ..
    } = &mut with_credential
    {
        *credential_sha256 = Some([9; 32]);
    }
    assert_eq!(with_credential.required_schema(), 3);
    assert!(chain::command_to_v2(&with_credential).is_err());
    let refused = check_proposable(&with_credential, FIRST_RELEASE_SCHEMA).unwrap_err();
    assert_eq!((refused.needed, refused.cluster_version), (3, 2));
    assert!(check_proposable(&with_credential, 3).is_ok());

    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: 3,
    });
    harness.apply(with_credential);
    let mut lowered = harness.state.clone();
    lowered.cluster_version = FIRST_RELEASE_SCHEMA;
    assert!(
        chain::state_to_v2(&lowered).is_err(),
        "a credential is not expressible in schema 2 whatever the cluster version says"
    );
}

/// P15.1 through P14.3: a registration with a capacity other than 1 is schema 4, refused by
/// schema 2's and 3's types, and proposed only once the cluster version is 4; a state holding
/// one is not expressible in either, whatever its cluster version says. Capacity 1 (what every
/// earlier executor has) needs nothing new.
#[test]
fn p15_1_a_capacity_needs_schema_4_everywhere() {
    let with_capacity = |capacity| {
        let mut command = register_command(0, "a");
        if let Command::Register {
            capacity: field, ..
        } = &mut command
        {
            *field = capacity;
        }
        command
    };
    assert_eq!(
        with_capacity(DEFAULT_CAPACITY).required_schema(),
        FIRST_RELEASE_SCHEMA
    );
    let heavy = with_capacity(2);
    assert_eq!(heavy.required_schema(), CAPACITY_SCHEMA);
    assert!(chain::command_to_v2(&heavy).is_err());
    assert!(chain::command_to_v3(&heavy).is_err());
    for below in [FIRST_RELEASE_SCHEMA, CREDENTIALS_SCHEMA] {
        let refused = check_proposable(&heavy, below).unwrap_err();
        assert_eq!(
            (refused.needed, refused.cluster_version),
            (CAPACITY_SCHEMA, below)
        );
    }
    assert!(check_proposable(&heavy, CAPACITY_SCHEMA).is_ok());

    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: CAPACITY_SCHEMA,
    });
    assert!(
        chain::state_to_v3(&harness.state).is_err(),
        "cluster version 4"
    );
    harness.apply(heavy);
    assert_eq!(
        migrated_through_schema_4(&harness.state),
        harness.state,
        "schema 4 keeps the capacity"
    );
    assert_eq!(
        migrated_through_schema_5(&harness.state),
        harness.state,
        "and schema 5"
    );
    let mut lowered = harness.state.clone();
    lowered.cluster_version = CREDENTIALS_SCHEMA;
    assert!(
        chain::state_to_v3(&lowered).is_err(),
        "a capacity is not expressible in schema 3 whatever the cluster version says"
    );
    lowered.cluster_version = FIRST_RELEASE_SCHEMA;
    assert!(chain::state_to_v2(&lowered).is_err());
}

/// A raise is written at the schema it raises to (`required_schema`), and only a build that
/// applies that schema proposes it.
#[test]
fn a_raise_needs_the_schema_it_raises_to() {
    let raise = |cluster_version| Command::SetClusterVersion {
        now_ms: 0,
        cluster_version,
    };
    assert_eq!(
        raise(CREDENTIALS_SCHEMA).required_schema(),
        CREDENTIALS_SCHEMA
    );
    assert_eq!(raise(CAPACITY_SCHEMA).required_schema(), CAPACITY_SCHEMA);
    assert_eq!(
        raise(APP_VERSION_SCHEMA).required_schema(),
        APP_VERSION_SCHEMA
    );
    assert!(chain::command_to_v3(&raise(CREDENTIALS_SCHEMA)).is_ok());
    assert!(chain::command_to_v3(&raise(CAPACITY_SCHEMA)).is_err());
    assert!(chain::command_to_v4(&raise(CAPACITY_SCHEMA)).is_ok());
    assert!(chain::command_to_v4(&raise(APP_VERSION_SCHEMA)).is_err());
    assert_eq!(
        raise(OPERATOR_CONTROLS_SCHEMA).required_schema(),
        OPERATOR_CONTROLS_SCHEMA
    );
    assert!(chain::command_to_v5(&raise(APP_VERSION_SCHEMA)).is_ok());
    assert!(chain::command_to_v5(&raise(OPERATOR_CONTROLS_SCHEMA)).is_err());
    assert_eq!(
        raise(LEASE_RESERVATION_SCHEMA).required_schema(),
        LEASE_RESERVATION_SCHEMA
    );
    assert!(chain::command_to_v8(&raise(GROUP_REGISTRATION_SCHEMA)).is_ok());
    assert!(chain::command_to_v8(&raise(LEASE_RESERVATION_SCHEMA)).is_err());
}

/// A `Register` for `incarnation` stating `app_version`, with `capacity`.
fn register_versioned(incarnation: &str, capacity: u32, app_version: &str) -> Command {
    let mut command = register_command(0, incarnation);
    if let Command::Register {
        capacity: capacity_field,
        app_version: version_field,
        ..
    } = &mut command
    {
        *capacity_field = capacity;
        *version_field = Some(app_version.to_owned());
    }
    command
}

/// P17.3 through P14.3: a registration stating an application version is schema 5 whatever
/// else it states (no credential and capacity 1 included), refused by schema 2's, 3's and 4's
/// types, and proposed only once the cluster version is 5; a state holding one is not
/// expressible in schema 4, whatever its cluster version says. Stating none needs nothing new.
#[test]
fn p17_3_an_app_version_needs_schema_5_everywhere() {
    for versioned in [
        register_versioned("a", DEFAULT_CAPACITY, "1.4.0"),
        register_versioned("a", 2, "1.4.0"),
    ] {
        assert_eq!(
            versioned.required_schema(),
            APP_VERSION_SCHEMA,
            "{versioned:?}"
        );
        let refused = chain::command_to_v4(&versioned).unwrap_err();
        assert!(
            refused.0.contains("application version") && refused.0.contains("schema 5"),
            "{refused}"
        );
        assert_eq!(chain::command_to_v3(&versioned), Err(refused));
        assert_eq!(chain::command_to_v2(&versioned), Err(refused));
        for below in [FIRST_RELEASE_SCHEMA, CREDENTIALS_SCHEMA, CAPACITY_SCHEMA] {
            let refused = check_proposable(&versioned, below).unwrap_err();
            assert_eq!(
                (refused.needed, refused.cluster_version),
                (APP_VERSION_SCHEMA, below)
            );
        }
        assert!(check_proposable(&versioned, APP_VERSION_SCHEMA).is_ok());
    }
    assert_eq!(
        register_command(0, "a").required_schema(),
        FIRST_RELEASE_SCHEMA,
        "no application version, no credential, capacity 1"
    );

    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: APP_VERSION_SCHEMA,
    });
    let refused = chain::state_to_v4(&harness.state).unwrap_err();
    assert!(
        refused.0.contains("above 4"),
        "cluster version 5: {refused}"
    );
    harness.apply(register_versioned("a", DEFAULT_CAPACITY, "1.4.0"));
    let mut lowered = harness.state.clone();
    lowered.cluster_version = CAPACITY_SCHEMA;
    let refused = chain::state_to_v4(&lowered).unwrap_err();
    assert!(
        refused.0.contains("application version"),
        "an application version is not expressible in schema 4 whatever the cluster version \
         says: {refused}"
    );
    lowered.cluster_version = FIRST_RELEASE_SCHEMA;
    assert!(chain::state_to_v3(&lowered).is_err());
    assert!(chain::state_to_v2(&lowered).is_err());
    lowered.cluster_version = APP_VERSION_SCHEMA;
    assert_eq!(
        migrated_through_schema_5(&lowered),
        lowered,
        "schema 5 keeps the application version"
    );
}

/// An operator's command (P17.4) doing `action`.
fn operator(action: OperatorAction) -> Command {
    Command::Operator {
        now_ms: 0,
        actor: "admin CN=alice".into(),
        action,
    }
}

/// P17.4 through P14.3: every operator's command is schema 6, whatever its action (one that
/// does what `SetDraining` or `Deregister` do included), refused by every older schema's types
/// with the same reason, and proposed only once the cluster version is 6. (Those acting on
/// namespaces are schema 10: `p18_1_namespaces_need_schema_10_everywhere`, or 11 when they set
/// placement: `p18_4_placement_needs_schema_11_everywhere`.)
#[test]
fn p17_4_an_operator_command_needs_schema_6_everywhere() {
    let commands: Vec<Command> = every_command()
        .into_iter()
        .filter(|command| {
            matches!(command, Command::Operator { .. })
                && command.required_schema() < NAMESPACES_SCHEMA
        })
        .collect();
    assert_eq!(commands.len(), OPERATOR_COMMANDS);
    for command in commands {
        assert_eq!(
            command.required_schema(),
            OPERATOR_CONTROLS_SCHEMA,
            "{command:?}"
        );
        let refused = chain::command_to_v5(&command).unwrap_err();
        assert!(
            refused.0.contains("operator controls") && refused.0.contains("schema 6"),
            "{refused}"
        );
        assert_eq!(chain::command_to_v4(&command), Err(refused));
        assert_eq!(chain::command_to_v3(&command), Err(refused));
        assert_eq!(chain::command_to_v2(&command), Err(refused));
        for below in [
            FIRST_RELEASE_SCHEMA,
            CREDENTIALS_SCHEMA,
            CAPACITY_SCHEMA,
            APP_VERSION_SCHEMA,
        ] {
            let refused = check_proposable(&command, below).unwrap_err();
            assert_eq!(
                (refused.needed, refused.cluster_version),
                (OPERATOR_CONTROLS_SCHEMA, below),
                "{command:?}"
            );
        }
        assert!(check_proposable(&command, OPERATOR_CONTROLS_SCHEMA).is_ok());
    }
}

/// P17.4 through P14.1: a state at cluster version 6 is not expressible in schema 5; nor is one
/// holding maintenance mode, a pin or an audit record, each alone, whatever its cluster version
/// says. Without them, lowered to 5, it reads back from schema 5's types unchanged.
#[test]
fn p17_4_operator_controls_in_the_state_need_schema_6_everywhere() {
    let operated = operated_state();
    assert_eq!(operated.required_schema(), OPERATOR_CONTROLS_SCHEMA);
    let refused = chain::state_to_v5(&operated).unwrap_err();
    assert!(
        refused.0.contains("above 5"),
        "cluster version 6: {refused}"
    );

    let mut bare = operated.clone();
    bare.cluster_version = APP_VERSION_SCHEMA;
    bare.maintenance = false;
    default_space(&mut bare).pins.clear();
    bare.audit.clear();
    assert_eq!(
        migrated_through_schema_5(&bare),
        bare,
        "no operator controls: schema 5 keeps it"
    );

    let mut with_maintenance = bare.clone();
    with_maintenance.maintenance = true;
    let mut with_pin = bare.clone();
    let (shard, executor) = operated.pins().next().expect("a pin");
    default_space(&mut with_pin)
        .pins
        .insert(shard, executor.to_owned());
    let mut with_record = bare.clone();
    let record = operated.audit().next().cloned().expect("a record");
    with_record.audit.push_back(record);
    let cases = [
        ("maintenance mode", with_maintenance, "maintenance"),
        ("a pin", with_pin, "pinned"),
        ("an audit record", with_record, "audit"),
    ];
    for (what, mut lowered, reason) in cases {
        let refused = chain::state_to_v5(&lowered).unwrap_err();
        assert!(
            refused.0.contains(reason) && refused.0.contains("schema 5"),
            "{what} is not expressible in schema 5 whatever the cluster version says: {refused}"
        );
        assert_eq!(chain::state_to_v4(&lowered), Err(refused), "{what}");
        lowered.cluster_version = FIRST_RELEASE_SCHEMA;
        assert!(chain::state_to_v3(&lowered).is_err(), "{what}");
        assert!(chain::state_to_v2(&lowered).is_err(), "{what}");
    }
}

/// P14.1, P17.4: a state of schema 5 (cluster version 5, application versions) migrated to this
/// build has maintenance off, no pins and an empty audit log, and an operator's command applies
/// to it once the cluster version is raised to 6.
#[test]
fn p14_1_p17_4_a_schema_5_state_reads_with_no_operator_controls() {
    let mut harness = Harness::initialised(4, LEASE_MS);
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: APP_VERSION_SCHEMA,
    });
    harness.apply(register_versioned("a", 2, "1.4.0"));
    let old = chain::state_to_v5(&harness.state).expect("expressible in schema 5");
    let read = chain::state_from_v5(bincode_round_trip(&old));
    assert_eq!(read, harness.state);
    assert!(!read.maintenance());
    assert_eq!(read.pins().count(), 0);
    assert_eq!(read.audit().count(), 0);

    harness.state = read;
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: OPERATOR_CONTROLS_SCHEMA,
    });
    harness.apply(operator(OperatorAction::SetMaintenance { on: true }));
    assert!(harness.state.maintenance());
    assert_eq!(harness.state.audit().count(), 1);
    assert!(chain::state_to_v5(&harness.state).is_err());
}

/// P14.1: each step down the chain refuses what its schema lacks, naming it; a value older
/// schemas cannot express either is refused at the newest step that cannot.
#[test]
fn p14_1_a_down_conversion_refusal_names_what_the_older_schema_lacks() {
    let raise = |cluster_version| Command::SetClusterVersion {
        now_ms: 0,
        cluster_version,
    };
    let mut credentialed = register_command(0, "a");
    if let Command::Register {
        credential_sha256, ..
    } = &mut credentialed
    {
        *credential_sha256 = Some([9; 32]);
    }
    let heavy = super::register_command_with_capacity(0, "a", 2);
    let versioned = register_versioned("a", DEFAULT_CAPACITY, "1.4.0");
    let maintenance = operator(OperatorAction::SetMaintenance { on: true });
    let member = operator(OperatorAction::Membership {
        change: MembershipChange::Removed { node_id: 2 },
    });
    let cases: [(&str, Command, u32, &str); 9] = [
        (
            "a credential",
            credentialed,
            FIRST_RELEASE_SCHEMA,
            "credential",
        ),
        (
            "a raise to 3",
            raise(CREDENTIALS_SCHEMA),
            FIRST_RELEASE_SCHEMA,
            "SetClusterVersion",
        ),
        ("a capacity", heavy, CREDENTIALS_SCHEMA, "capacity"),
        (
            "a raise to 4",
            raise(CAPACITY_SCHEMA),
            CREDENTIALS_SCHEMA,
            "above 3",
        ),
        (
            "an application version",
            versioned,
            CAPACITY_SCHEMA,
            "application version",
        ),
        (
            "a raise to 5",
            raise(APP_VERSION_SCHEMA),
            CAPACITY_SCHEMA,
            "above 4",
        ),
        (
            "an operator control",
            maintenance,
            APP_VERSION_SCHEMA,
            "operator controls",
        ),
        (
            "a membership change for the audit log",
            member,
            APP_VERSION_SCHEMA,
            "operator controls",
        ),
        (
            "a raise to 6",
            raise(OPERATOR_CONTROLS_SCHEMA),
            APP_VERSION_SCHEMA,
            "above 5",
        ),
    ];
    for (what, command, newest_refusing, reason) in cases {
        let refusals = [
            (FIRST_RELEASE_SCHEMA, chain::command_to_v2(&command).err()),
            (CREDENTIALS_SCHEMA, chain::command_to_v3(&command).err()),
            (CAPACITY_SCHEMA, chain::command_to_v4(&command).err()),
            (APP_VERSION_SCHEMA, chain::command_to_v5(&command).err()),
        ];
        for (schema, refusal) in refusals {
            match refusal {
                Some(refusal) => {
                    assert!(schema <= newest_refusing, "{what}: schema {schema} refuses");
                    assert!(
                        refusal.0.contains(reason),
                        "{what} at schema {schema}: {refusal}"
                    );
                }
                None => assert!(schema > newest_refusing, "{what}: schema {schema} keeps it"),
            }
        }
    }
}

#[test]
fn a_command_is_proposed_only_once_the_cluster_version_reaches_its_schema() {
    let register = register_command(0, "a");
    assert!(check_proposable(&register, FIRST_RELEASE_SCHEMA).is_ok());
    let refused = check_proposable(&register, FIRST_RELEASE_SCHEMA - 1).unwrap_err();
    assert_eq!(refused.needed, FIRST_RELEASE_SCHEMA);
    assert!(refused.to_string().contains("P14.3"), "{refused}");
    // The raise is checked against what this build can apply, whatever the cluster is at now.
    let raise = |cluster_version| Command::SetClusterVersion {
        now_ms: 0,
        cluster_version,
    };
    assert!(check_proposable(&raise(NEWEST_SCHEMA), FIRST_RELEASE_SCHEMA).is_ok());
    assert!(check_proposable(&raise(NEWEST_SCHEMA + 1), FIRST_RELEASE_SCHEMA).is_err());
}

/// A step of a fleet's life, interpreted against the current state.
#[derive(Debug, Clone)]
enum Step {
    Register(u8),
    RenewAll { after_ms: u64 },
    Rebalance { after_ms: u64 },
    Deregister(u8),
    Reap { after_ms: u64 },
    Drain(u8, bool),
    ReleaseAll(u8),
    CompleteHandoffs { after_ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..6).prop_map(Step::Register),
        3 => (0u64..30_000).prop_map(|after_ms| Step::RenewAll { after_ms }),
        3 => (0u64..5_000).prop_map(|after_ms| Step::Rebalance { after_ms }),
        1 => (0u8..6).prop_map(Step::Deregister),
        1 => (0u64..90_000).prop_map(|after_ms| Step::Reap { after_ms }),
        1 => ((0u8..6), any::<bool>()).prop_map(|(e, d)| Step::Drain(e, d)),
        2 => (0u8..6).prop_map(Step::ReleaseAll),
        1 => (0u64..90_000).prop_map(|after_ms| Step::CompleteHandoffs { after_ms }),
    ]
}

/// The schema 2 command `step` stands for at `now_ms`, if there is one to make.
fn command_for(state: &LeaseState, step: &Step, now_ms: &mut u64) -> Option<v2::Command> {
    let executor = |index: u8| {
        let ids: Vec<String> = state.executors().map(|e| e.id.clone()).collect();
        (!ids.is_empty()).then(|| ids[usize::from(index) % ids.len()].clone())
    };
    let command = match step {
        Step::Register(n) => register_command(*now_ms, &format!("inc-{n}")),
        Step::RenewAll { after_ms } => {
            *now_ms += after_ms;
            Command::Renew {
                now_ms: *now_ms,
                renewals: state
                    .executors()
                    .map(|e| Renewal {
                        executor_id: e.id.clone(),
                        claims: state.delivered_set(&e.id),
                        revision: state.revision(),
                    })
                    .collect(),
            }
        }
        Step::Rebalance { after_ms } => {
            *now_ms += after_ms;
            super::super::plan_rebalance(state, *now_ms)?
        }
        Step::Deregister(index) => Command::Deregister {
            now_ms: *now_ms,
            executor_id: executor(*index)?,
        },
        Step::Reap { after_ms } => {
            *now_ms += after_ms;
            Command::Reap {
                now_ms: *now_ms,
                executor_ids: state.executors().map(|e| e.id.clone()).collect(),
            }
        }
        Step::Drain(index, draining) => Command::SetDraining {
            now_ms: *now_ms,
            executor_id: executor(*index)?,
            draining: *draining,
        },
        Step::ReleaseAll(index) => {
            let executor_id = executor(*index)?;
            let releasing: Vec<_> = state
                .shards()
                .iter()
                .filter(|s| s.owner.as_deref() == Some(executor_id.as_str()))
                .filter_map(|s| s.handoff.as_ref().map(|h| (s.id, h.revoke_revision)))
                .collect();
            let revoke_revision = releasing.first()?.1;
            Command::Release {
                now_ms: *now_ms,
                executor_id,
                shards: releasing
                    .iter()
                    .filter(|(_, r)| *r == revoke_revision)
                    .map(|(s, _)| *s)
                    .collect(),
                revoke_revision,
            }
        }
        Step::CompleteHandoffs { after_ms } => {
            *now_ms += after_ms;
            Command::CompleteHandoffs { now_ms: *now_ms }
        }
    };
    Some(chain::command_to_v2(&command).expect("a schema 2 command"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// P14.1: any state of schema 2, converted to schema 3, applies every command of schema 2 to
    /// the same outcome and the same state as the state it came from, at every point of a fleet's
    /// life; and the result is still expressible in schema 2, so a 0.1.0 follower holds the same.
    #[test]
    fn a_migrated_state_applies_every_schema_2_command_as_the_original(
        shard_count in 1u32..12,
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let mut original = Harness::initialised(shard_count, LEASE_MS);
        let mut now_ms = 0;
        for step in &steps {
            let Some(old) = command_for(&original.state, step, &mut now_ms) else {
                continue;
            };
            let command = chain::command_from_v2(old);
            let mut migrated_harness = Harness {
                state: migrated(&original.state),
                next_index: original.next_index(),
            };
            prop_assert_eq!(&migrated_harness.state, &original.state);
            let expected = original.apply(command.clone());
            let outcome = migrated_harness.apply(command);
            prop_assert_eq!(outcome, expected);
            prop_assert_eq!(&migrated_harness.state, &original.state);
            prop_assert_eq!(migrated(&original.state), original.state.clone());
            prop_assert_eq!(
                migrated_through_schema_3(&original.state),
                original.state.clone()
            );
            prop_assert_eq!(
                migrated_through_schema_4(&original.state),
                original.state.clone()
            );
            prop_assert_eq!(
                migrated_through_schema_5(&original.state),
                original.state.clone()
            );
        }
    }
}

/// P14.1: every command schema 9 can express converts to it and back unchanged (lease
/// reservations included), and only those that need schema 10 (a namespace named or changed, a
/// raise to 10) or later are refused.
#[test]
fn p14_1_p18_1_every_schema_9_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v9(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v9(old),
                    command,
                    "schema 9 keeps {command:?}"
                );
                assert!(command.required_schema() <= LEASE_RESERVATION_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert!(
                    command.required_schema() >= NAMESPACES_SCHEMA,
                    "only commands of schema 10 or later are refused by schema 9: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused,
        NAMESPACE_COMMANDS + NAMESPACE_PLACEMENT_COMMANDS,
        "the namespace commands and the placement commands"
    );
}

/// P18.1 through P14.3 and P14.1: a command naming a namespace other than `default`, or changing
/// namespaces, is schema 10, refused by every older schema's types with the same reason and
/// proposed only once the cluster version is 10; the same command in `default` is the schema
/// it always was.
#[test]
fn p18_1_namespaces_need_schema_10_everywhere() {
    let newest: Vec<Command> = every_command()
        .into_iter()
        .filter(|command| {
            !matches!(
                command,
                Command::SetClusterVersion {
                    cluster_version: NAMESPACES_SCHEMA,
                    ..
                }
            ) && command.required_schema() == NAMESPACES_SCHEMA
        })
        .collect();
    assert_eq!(newest.len(), NAMESPACE_COMMANDS - 1, "all but the raise");
    for command in newest {
        let refused = chain::command_to_v9(&command).unwrap_err();
        assert!(
            refused.0.contains("namespace") && refused.0.contains("schema 10"),
            "{refused}"
        );
        assert_eq!(chain::command_to_v8(&command), Err(refused));
        assert_eq!(chain::command_to_v2(&command), Err(refused));
        for below in [FIRST_RELEASE_SCHEMA, LEASE_RESERVATION_SCHEMA] {
            let refused = check_proposable(&command, below).unwrap_err();
            assert_eq!(
                (refused.needed, refused.cluster_version),
                (NAMESPACES_SCHEMA, below)
            );
        }
        assert!(check_proposable(&command, NAMESPACES_SCHEMA).is_ok());
    }
    let mut in_default = register_command(1, "d");
    assert_eq!(in_default.required_schema(), FIRST_RELEASE_SCHEMA);
    if let Command::Register { namespace, .. } = &mut in_default {
        *namespace = "kv".into();
    }
    assert_eq!(in_default.required_schema(), NAMESPACES_SCHEMA);
}

/// P18.1 through P14.1: a state with a namespace beside `default` (or a retired one, an executor
/// bound on `default`, or an executor of another namespace) is not expressible in schema 9
/// whatever its cluster version says; a state of `default` alone, lowered to 9, reads back
/// from schema 9's types unchanged, and a schema 9 state reads as `default` alone.
#[test]
fn p18_1_namespaces_in_the_state_need_schema_10_everywhere() {
    let state = namespaced_state();
    assert_eq!(state.required_schema(), NAMESPACES_SCHEMA);
    assert!(chain::state_to_v9(&state)
        .unwrap_err()
        .0
        .contains("above 9"));
    let mut lowered = state.clone();
    lowered.cluster_version = LEASE_RESERVATION_SCHEMA;
    let refused = chain::state_to_v9(&lowered).unwrap_err();
    assert!(refused.0.contains("schema 10"), "{refused}");
    assert_eq!(chain::state_to_v8(&lowered), Err(refused));

    let mut only_default = reserved_state();
    assert!(only_default.cluster_version <= LEASE_RESERVATION_SCHEMA);
    let old = chain::state_to_v9(&only_default).expect("expressible in schema 9");
    let read = chain::state_from_v9(bincode_round_trip(&old));
    assert_eq!(read, only_default);
    assert_eq!(
        read.namespaces().map(|(name, _)| name).collect::<Vec<_>>(),
        [leasehold_api::wire::DEFAULT_NAMESPACE]
    );
    assert!(read
        .executors()
        .all(|e| e.namespace == leasehold_api::wire::DEFAULT_NAMESPACE));

    let mut bounded = only_default.clone();
    default_space(&mut bounded).max_executors = Some(3);
    let mut retired = only_default.clone();
    retired.retired_epochs.insert("gone".into(), 4);
    let mut stranger = only_default.clone();
    let id = stranger.executors().next().expect("an executor").id.clone();
    if let Some(executor) = stranger.executors.get_mut(&id) {
        executor.namespace = "kv".into();
    }
    for (what, state) in [
        ("a bound on default", bounded),
        ("a retired name", retired),
        ("an executor of another namespace", stranger),
    ] {
        let refused = chain::state_to_v9(&state).unwrap_err();
        assert!(refused.0.contains("schema 10"), "{what}: {refused}");
    }
    only_default.cluster_version = NAMESPACES_SCHEMA;
    assert!(chain::state_to_v9(&only_default).is_err());
}

/// Records a build of schema 9 wrote (commit 7a368bf, the build before namespaces), one per
/// line: `entry INDEX SCHEMA HEX` for every command of [`every_command`] it had, as a log entry
/// at that index; `state NAME SCHEMA HEX` and `backup NAME SCHEMA HEX` for four states.
const SCHEMA_9_RECORDS: &str = include_str!("schema_9_records.txt");

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).expect("hex"))
        .collect()
}

/// Records a build of schema 10 wrote (commit 63436a1, the build before namespaces had placement
/// settings), as [`SCHEMA_9_RECORDS`] are: every command of [`every_command`] it had, and five
/// states (those of schema 9's records and [`namespaced_state`]).
const SCHEMA_10_RECORDS: &str = include_str!("schema_10_records.txt");

/// Reads every record of `records` (as [`SCHEMA_9_RECORDS`] lays them out) into this build,
/// checks each is the value this build makes of the same command or state, and that this build
/// writes that value back byte for byte, at the same schema. How many entries, states and
/// backups it read.
fn read_back_records(records: &str) -> (usize, usize, usize) {
    use leasehold_raft_store::schema::{decode_entry_record, encode_entry_record};
    use leasehold_raft_store::StateMachine;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

    use crate::raft::versions::{backup_payload, state_from_backup};
    use crate::raft::TypeConfig;

    let commands = every_command();
    let mut read = (0, 0, 0);
    for line in records.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [kind, name, schema, hex] = fields[..] else {
            panic!("malformed line {line:?}");
        };
        let schema: u32 = schema.parse().expect("a schema");
        let bytes = unhex(hex);
        match kind {
            "entry" => {
                let index: u64 = name.parse().expect("an index");
                let command = commands[usize::try_from(index).expect("small") - 1].clone();
                let expected: Entry<TypeConfig> = Entry {
                    log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
                    payload: EntryPayload::Normal(command),
                };
                let decoded = decode_entry_record::<TypeConfig>(&bytes).expect("decodes");
                assert_eq!(decoded, expected, "entry {index}");
                assert_eq!(
                    encode_entry_record::<TypeConfig>(&decoded).expect("encodes"),
                    (schema, bytes),
                    "entry {index} is written back as it was"
                );
                read.0 += 1;
            }
            "state" | "backup" => {
                let expected = match name {
                    "busy" => busy_state(),
                    "operated" => operated_state(),
                    "labelled" => labelled_state(),
                    "reserved" => reserved_state(),
                    "namespaced" => namespaced_state(),
                    other => panic!("no state {other}"),
                };
                if kind == "state" {
                    let decoded = LeaseState::decode_state(schema, &bytes).expect("decodes");
                    assert_eq!(decoded, expected, "state {name}");
                    assert_eq!(
                        expected.encode_state().expect("encodes"),
                        (schema, bytes),
                        "state {name} is written back as it was"
                    );
                    read.1 += 1;
                } else {
                    let restored = state_from_backup(schema, &bytes).expect("restores");
                    assert_eq!(restored, expected, "backup {name}");
                    assert_eq!(
                        backup_payload(&expected).expect("encodes"),
                        (schema, bytes),
                        "backup {name} is written back as it was"
                    );
                    read.2 += 1;
                }
            }
            other => panic!("no record kind {other}"),
        }
    }
    read
}

/// P14.1: every record the build of schema 9 wrote (log entries of every command it had,
/// snapshots' states and backups, at the schemas it wrote them, 2 to 9) reads into this build as
/// the value this build makes of the same command or state, and this build writes that value
/// back byte for byte: schema 9 frozen in `lease::v9` is the schema 9 that was written.
#[test]
fn p14_1_what_the_schema_9_build_wrote_reads_unchanged_and_is_written_back_the_same() {
    assert_eq!(
        read_back_records(SCHEMA_9_RECORDS),
        (
            every_command().len() - NAMESPACE_COMMANDS - NAMESPACE_PLACEMENT_COMMANDS,
            4,
            4
        )
    );
}

/// P14.1: every record the build of schema 10 wrote (log entries of every command it had,
/// namespace commands included, snapshots' states and backups, at the schemas it wrote them, 2
/// to 10) reads into this build as the value this build makes of the same command or state
/// (every namespace without placement settings), and this build writes that value back byte for
/// byte: schema 10 frozen in `lease::v10` is the schema 10 that was written.
#[test]
fn p14_1_what_the_schema_10_build_wrote_reads_unchanged_and_is_written_back_the_same() {
    assert_eq!(
        read_back_records(SCHEMA_10_RECORDS),
        (every_command().len() - NAMESPACE_PLACEMENT_COMMANDS, 5, 5)
    );
    assert!(
        SCHEMA_10_RECORDS
            .lines()
            .any(|line| line.starts_with(&format!("state namespaced {NAMESPACES_SCHEMA} "))),
        "a state the build of schema 10 wrote at 10"
    );
}

/// P18.1 with P14.1: a backup carries every namespace: a state holding `kv` beside `default` (its
/// shards, pins, handoffs, executor bound and a retired name) is written at schema 10 and
/// restored whole.
#[test]
fn p18_1_a_backup_carries_every_namespace() {
    use crate::raft::versions::{backup_payload, state_from_backup};

    let state = namespaced_state();
    let (schema, payload) = backup_payload(&state).expect("encodes");
    assert_eq!(schema, NAMESPACES_SCHEMA);
    let restored = state_from_backup(schema, &payload).expect("restores");
    assert_eq!(restored, state);
    let names: Vec<&str> = restored.namespaces().map(|(name, _)| name).collect();
    assert_eq!(names, [leasehold_api::wire::DEFAULT_NAMESPACE, "kv"]);
    assert!(restored.consistency_violations().is_empty());
}

/// P14.1: every command schema 10 can express converts to it and back unchanged (namespace
/// commands included, their placement empty), and only those that need schema 11 (placement
/// settings, a raise to 11) are refused.
#[test]
fn p14_1_p18_4_every_schema_10_command_converts_up_and_back_unchanged() {
    let mut refused = 0;
    for command in every_command() {
        match chain::command_to_v10(&command) {
            Ok(old) => {
                let old = bincode_round_trip(&old);
                assert_eq!(
                    chain::command_from_v10(old),
                    command,
                    "schema 10 keeps {command:?}"
                );
                assert!(command.required_schema() <= NAMESPACES_SCHEMA);
            }
            Err(_) => {
                refused += 1;
                assert_eq!(
                    command.required_schema(),
                    NAMESPACE_PLACEMENT_SCHEMA,
                    "only commands of schema 11 are refused by schema 10: {command:?}"
                );
            }
        }
    }
    assert_eq!(
        refused, NAMESPACE_PLACEMENT_COMMANDS,
        "the placement commands"
    );
}

/// An operator's `CreateNamespace` of `kv` with `placement`.
fn create_placed(placement: PlacementOverrides) -> Command {
    operator(OperatorAction::CreateNamespace {
        name: "kv".into(),
        shard_count: 4,
        lease_duration_ms: LEASE_MS,
        max_executors: None,
        placement,
    })
}

/// An operator's `SetNamespace` of `kv` to `placement`.
fn set_placed(placement: PlacementOverrides) -> Command {
    operator(OperatorAction::SetNamespace {
        name: "kv".into(),
        lease_duration_ms: LEASE_MS,
        max_executors: Some(3),
        placement,
    })
}

/// Each placement setting alone (P18.4).
fn each_placement_setting() -> [PlacementOverrides; 4] {
    let every = every_placement_setting();
    let none = PlacementOverrides::default;
    [
        PlacementOverrides {
            load_placement: Some(false),
            ..none()
        },
        PlacementOverrides {
            balance_tolerance_percent: every.balance_tolerance_percent,
            ..none()
        },
        PlacementOverrides {
            max_balance_moves_per_minute: every.max_balance_moves_per_minute,
            ..none()
        },
        PlacementOverrides {
            prefer: every.prefer,
            ..none()
        },
    ]
}

/// P18.4 through P14.3 and P14.1: a namespace created or set with any placement setting is
/// schema 11, refused by every older schema's types with the same reason, naming schema 11, and
/// proposed only once the cluster version is 11; the same command with none is schema 10's
/// (written and read there unchanged), and a raise to 11 is written at 11.
#[test]
fn p18_4_placement_needs_schema_11_everywhere() {
    let mut placed: Vec<Command> = every_command()
        .into_iter()
        .filter(|command| {
            !matches!(command, Command::SetClusterVersion { .. })
                && command.required_schema() == NAMESPACE_PLACEMENT_SCHEMA
        })
        .collect();
    assert_eq!(
        placed.len(),
        NAMESPACE_PLACEMENT_COMMANDS - 1,
        "all but the raise"
    );
    for placement in each_placement_setting() {
        placed.push(create_placed(placement.clone()));
        placed.push(set_placed(placement));
    }
    placed.push(create_placed(every_placement_setting()));
    for command in placed {
        assert_eq!(
            command.required_schema(),
            NAMESPACE_PLACEMENT_SCHEMA,
            "{command:?}"
        );
        let refused = chain::command_to_v10(&command).unwrap_err();
        assert!(
            refused.0.contains("placement") && refused.0.contains("schema 11"),
            "{refused}"
        );
        assert_eq!(chain::command_to_v9(&command), Err(refused));
        assert_eq!(chain::command_to_v6(&command), Err(refused));
        assert_eq!(chain::command_to_v2(&command), Err(refused));
        for below in [
            FIRST_RELEASE_SCHEMA,
            OPERATOR_CONTROLS_SCHEMA,
            LEASE_RESERVATION_SCHEMA,
            NAMESPACES_SCHEMA,
        ] {
            let refused = check_proposable(&command, below).unwrap_err();
            assert_eq!(
                (refused.needed, refused.cluster_version),
                (NAMESPACE_PLACEMENT_SCHEMA, below),
                "{command:?}"
            );
        }
        assert!(check_proposable(&command, NAMESPACE_PLACEMENT_SCHEMA).is_ok());
    }

    for command in [
        create_placed(PlacementOverrides::default()),
        set_placed(PlacementOverrides::default()),
    ] {
        assert_eq!(command.required_schema(), NAMESPACES_SCHEMA, "{command:?}");
        let old = chain::command_to_v10(&command).expect("expressible in schema 10");
        assert_eq!(chain::command_from_v10(bincode_round_trip(&old)), command);
        assert!(check_proposable(&command, NAMESPACES_SCHEMA).is_ok());
        assert!(check_proposable(&command, LEASE_RESERVATION_SCHEMA).is_err());
    }

    let raise = Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: NAMESPACE_PLACEMENT_SCHEMA,
    };
    assert_eq!(raise.required_schema(), NAMESPACE_PLACEMENT_SCHEMA);
    let refused = chain::command_to_v10(&raise).unwrap_err();
    assert!(refused.0.contains("above 10"), "{refused}");
    assert!(check_proposable(&raise, NAMESPACES_SCHEMA).is_ok());
}

/// Whether an audit record's action sets placement (P18.4).
fn sets_placement(action: &OperatorAction) -> bool {
    matches!(
        action,
        OperatorAction::CreateNamespace { placement, .. }
            | OperatorAction::SetNamespace { placement, .. }
            if !placement.is_empty()
    )
}

/// P18.4 through P14.1: a state at cluster version 11 is not expressible in schema 10; nor is one
/// holding a namespace's placement setting, or an audit record of an action setting one, each
/// alone, whatever its cluster version says, and every older schema refuses it for the same
/// reason. Without them, lowered to 10, it reads back from schema 10's types unchanged, its
/// other namespaces, pins, handoffs and retired names included.
#[test]
fn p18_4_placement_in_the_state_needs_schema_11_everywhere() {
    let state = placed_state();
    assert_eq!(state.required_schema(), NAMESPACE_PLACEMENT_SCHEMA);
    let refused = chain::state_to_v10(&state).unwrap_err();
    assert!(refused.0.contains("above 10"), "{refused}");
    assert_eq!(chain::state_to_v9(&state), Err(refused));

    let mut lowered = state.clone();
    lowered.cluster_version = NAMESPACES_SCHEMA;
    let mut bare = lowered.clone();
    let names: Vec<String> = bare.namespaces().map(|(name, _)| name.to_owned()).collect();
    for name in &names {
        if let Some(namespace) = bare.namespaces.get_mut(name) {
            namespace.placement = PlacementOverrides::default();
        }
    }
    bare.audit = bare
        .audit
        .iter()
        .filter(|record| !sets_placement(&record.action))
        .cloned()
        .collect();
    assert!(bare.audit().count() > 0, "records of schema 10 stay");
    assert!(bare.namespace("placed").is_some());

    let mut in_a_namespace = bare.clone();
    if let Some(kv) = in_a_namespace.namespaces.get_mut("kv") {
        kv.placement = every_placement_setting();
    }
    let mut in_the_audit = bare.clone();
    let record = state
        .audit()
        .find(|record| sets_placement(&record.action))
        .cloned()
        .expect("an audit record setting placement");
    in_the_audit.audit.push_back(record);
    let mut cases = vec![
        ("the placed state", lowered),
        ("a namespace's settings", in_a_namespace),
        ("an audit record", in_the_audit),
    ];
    for placement in each_placement_setting() {
        let mut one = bare.clone();
        if let Some(placed) = one.namespaces.get_mut("placed") {
            placed.placement = placement;
        }
        cases.push(("one setting", one));
    }
    for (what, mut case) in cases {
        let refused = chain::state_to_v10(&case).unwrap_err();
        assert!(
            refused.0.contains("placement") && refused.0.contains("schema 11"),
            "{what} is not expressible in schema 10 whatever the cluster version says: {refused}"
        );
        assert_eq!(chain::state_to_v9(&case), Err(refused), "{what}");
        case.cluster_version = LEASE_RESERVATION_SCHEMA;
        assert!(chain::state_to_v9(&case).is_err(), "{what}");
    }

    for state in [bare, namespaced_state()] {
        let old = chain::state_to_v10(&state).expect("expressible in schema 10");
        let read = chain::state_from_v10(bincode_round_trip(&old));
        assert_eq!(read, state);
        assert!(read.consistency_violations().is_empty());
        assert!(read
            .namespaces()
            .all(|(_, namespace)| namespace.placement.is_empty()));
        assert_eq!(
            chain::state_from_v10(
                serde_json::from_slice(&serde_json::to_vec(&old).expect("encodes"))
                    .expect("decodes")
            ),
            state,
            "and through schema 10's JSON, as a backup"
        );
    }
}

/// P14.1, P18.4: a state of schema 10 migrated to this build has no namespace with placement
/// settings, and a namespace's settings apply to it once the cluster version is raised to 11,
/// after which it is not expressible in schema 10.
#[test]
fn p14_1_p18_4_a_schema_10_state_reads_with_no_placement() {
    let read = chain::state_from_v10(bincode_round_trip(
        &chain::state_to_v10(&namespaced_state()).expect("expressible in schema 10"),
    ));
    assert!(read
        .namespaces()
        .all(|(_, namespace)| namespace.placement.is_empty()));
    let mut harness = Harness {
        state: read,
        next_index: 10_000,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: NAMESPACE_PLACEMENT_SCHEMA,
    });
    assert!(
        chain::state_to_v10(&harness.state).is_err(),
        "cluster version 11"
    );
    let outcome = harness.apply(operator(OperatorAction::SetNamespace {
        name: "kv".into(),
        lease_duration_ms: 10_000,
        max_executors: Some(2),
        placement: every_placement_setting(),
    }));
    assert!(
        matches!(outcome, Outcome::NamespaceSet { changed: true, .. }),
        "{outcome:?}"
    );
    assert_eq!(
        harness.state.namespace("kv").map(|kv| &kv.placement),
        Some(&every_placement_setting())
    );
    let mut lowered = harness.state.clone();
    lowered.cluster_version = NAMESPACES_SCHEMA;
    assert!(chain::state_to_v10(&lowered).is_err());
}

/// P18.4 with P14.1: a backup carries every namespace's placement settings: a state holding them
/// is written at schema 11, on disk and in a backup, and restored whole.
#[test]
fn p18_4_a_backup_carries_placement() {
    use leasehold_raft_store::StateMachine;

    use crate::raft::versions::{backup_payload, state_from_backup};

    let state = placed_state();
    let (schema, payload) = backup_payload(&state).expect("encodes");
    assert_eq!(schema, NAMESPACE_PLACEMENT_SCHEMA);
    let restored = state_from_backup(schema, &payload).expect("restores");
    assert_eq!(restored, state);
    assert_eq!(
        restored.namespace("kv").map(|kv| &kv.placement),
        Some(&every_placement_setting())
    );
    assert!(restored.consistency_violations().is_empty());

    let (schema, payload) = state.encode_state().expect("encodes");
    assert_eq!(schema, NAMESPACE_PLACEMENT_SCHEMA);
    assert_eq!(
        LeaseState::decode_state(schema, &payload).expect("decodes"),
        state
    );
}
