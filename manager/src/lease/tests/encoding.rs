//! The state and commands travel in Raft log entries and snapshots with their fields by name
//! (`codec::encode_named`, P14.1), and outcomes and 0.1.0's records as bincode 2, which is not
//! self-describing: these round trips catch a serde attribute a value's format does not support
//! (P2.5), such as a field left out when empty, which only the named form reads back.

use leasehold_raft_store::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::super::schema::OPERATOR_CONTROLS_SCHEMA;
use super::super::{
    Command, Effects, Grant, LapsedLease, LeaseState, MembershipChange, Move, OperatorAction,
    Outcome, PlacementOverrides, RefusalReason, Registration, RenewResult, Renewal, Revoke,
};
use super::{register_command, Harness, LEASE_MS};

/// By field name, the one encoding of the state and of commands (P14.1): a field left out when
/// it holds its default (`skip_serializing_if`) reads back with its default.
fn round_trip_named<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let named = codec::encode_named("test", value).expect("encodes");
    let decoded: T = codec::decode_named("test", &named).expect("decodes");
    assert_eq!(&decoded, value);
}

/// By field name and by position (bincode 2), as outcomes travel.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    round_trip_named(value);
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(value, config).expect("encodes");
    let (decoded, read): (T, usize) =
        bincode::serde::decode_from_slice(&bytes, config).expect("decodes");
    assert_eq!(read, bytes.len(), "trailing bytes for {value:?}");
    assert_eq!(&decoded, value);
}

/// A state with every kind of entry: delivered, releasing (with and without a target), unowned
/// shards, tombstones of both kinds, a named executor.
pub(crate) fn busy_state() -> LeaseState {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let a = harness.register(0, "a");
    harness.apply(Command::Register {
        follows_generations: false,
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 0,
        incarnation: "named".into(),
        address: "http://named.test".into(),
        name: Some("worker".into()),
        credential_sha256: None,
        capacity: crate::lease::DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    });
    harness.rebalance(0);
    let c = harness.register(1_000, "c");
    let d = harness.register(1_000, "d");
    harness.rebalance(1_000);
    harness.apply(Command::Deregister {
        now_ms: 1_500,
        executor_id: d,
    });
    harness.renew_in_sync(2_000, &a);
    harness.renew_in_sync(2_000, &c);
    let gone = harness.register(2_000, "gone");
    harness.apply(Command::Reap {
        now_ms: 2_000 + LEASE_MS + 1,
        executor_ids: vec![gone],
    });
    harness.apply(Command::SetDraining {
        now_ms: 2_500,
        executor_id: c,
        draining: true,
    });
    let state = harness.state;
    assert!(state.executors().any(|e| e.draining));
    assert!(state.releasing_count() > 0);
    assert!(state.tombstones().count() == 2);
    state
}

/// [`busy_state`] at cluster version 12 with every operator control in it (P17.4): maintenance
/// on, pins, and an audit log of the actions that changed something.
pub(super) fn operated_state() -> LeaseState {
    let mut harness = Harness {
        state: busy_state(),
        next_index: 1_000,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 3_000,
        cluster_version: OPERATOR_CONTROLS_SCHEMA,
    });
    let holder = harness
        .state
        .executors()
        .find(|e| !e.draining)
        .map(|e| e.id.clone())
        .expect("an executor that is not draining");
    for action in [
        OperatorAction::Pin {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            shard: 0,
            executor_id: Some(holder.clone()),
        },
        OperatorAction::Pin {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            shard: 7,
            executor_id: Some(holder),
        },
        OperatorAction::SetMaintenance { on: true },
        OperatorAction::Membership {
            change: MembershipChange::Added {
                node_id: 4,
                address: "https://m4.test:7400".into(),
            },
        },
    ] {
        harness.apply(Command::Operator {
            now_ms: 3_000,
            actor: "admin CN=alice".into(),
            action,
        });
    }
    let state = harness.state;
    assert!(state.maintenance());
    assert_eq!(state.pins().count(), 2);
    assert_eq!(state.audit().count(), 4);
    state
}

/// [`operated_state`] with executors that stated labels (P18.3).
pub(super) fn labelled_state() -> LeaseState {
    let mut harness = Harness {
        state: operated_state(),
        next_index: 2_000,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 3_000,
        cluster_version: crate::lease::schema::LABELS_SCHEMA,
    });
    for (incarnation, zone) in [("zoned-a", "eu-1a"), ("zoned-b", "eu-1b")] {
        harness.apply(super::register_command_with_labels(
            3_000,
            incarnation,
            crate::lease::DEFAULT_CAPACITY,
            &[("zone", zone), ("rack", "r7")],
        ));
    }
    let state = harness.state;
    assert_eq!(
        state.executors().filter(|e| !e.labels.is_empty()).count(),
        2
    );
    state
}

/// [`labelled_state`] with lease time reserved for two executors (P6.6), and executors a
/// registration batch numbered past its entry's index.
pub(super) fn reserved_state() -> LeaseState {
    let mut harness = Harness {
        state: labelled_state(),
        next_index: 3_000,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 4_000,
        cluster_version: crate::lease::schema::GROUP_REGISTRATION_SCHEMA,
    });
    harness.apply(Command::RegisterMany {
        now_ms: 4_000,
        registrations: ["batched-1", "batched-2"]
            .map(|incarnation| {
                super::registration_in(incarnation, leasehold_api::wire::DEFAULT_NAMESPACE)
            })
            .into(),
    });
    harness.apply(Command::SetClusterVersion {
        now_ms: 4_000,
        cluster_version: crate::lease::schema::LEASE_RESERVATION_SCHEMA,
    });
    let reserving: Vec<String> = harness
        .state
        .executors()
        .take(2)
        .map(|e| e.id.clone())
        .collect();
    harness.apply(Command::ReserveLeases {
        now_ms: 4_000,
        executor_ids: reserving,
    });
    let state = harness.state;
    assert_eq!(
        state
            .executors()
            .filter(|e| e.lease_reserved_until_ms != 0)
            .count(),
        2
    );
    assert!(state.next_executor_number != 0);
    state
}

/// A state with namespaces (P18.1): `kv` beside `default`, with an owned, a releasing and a pinned
/// shard and an executor at its bound, and a retired name.
pub(super) fn namespaced_state() -> LeaseState {
    let mut harness = Harness::initialised(4, LEASE_MS);
    let operator = |now_ms, action| Command::Operator {
        now_ms,
        actor: "admin CN=alice".into(),
        action,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: leasehold_api::wire::NAMESPACES_SCHEMA,
    });
    for name in ["kv", "gone"] {
        harness.apply(operator(
            0,
            OperatorAction::CreateNamespace {
                name: name.into(),
                shard_count: 3,
                lease_duration_ms: 10_000,
                max_executors: Some(2),
                placement: PlacementOverrides::default(),
                replication: Default::default(),
            },
        ));
    }
    harness.apply(operator(
        0,
        OperatorAction::DeleteNamespace {
            name: "gone".into(),
        },
    ));
    let in_kv = |incarnation: &str| {
        let mut command = register_command(0, incarnation);
        if let Command::Register { namespace, .. } = &mut command {
            *namespace = "kv".into();
        }
        command
    };
    let ids: Vec<String> = ["k1", "k2"]
        .into_iter()
        .map(|incarnation| match harness.apply(in_kv(incarnation)) {
            Outcome::Registered { grant, .. } => grant.executor_id,
            other => panic!("{other:?}"),
        })
        .collect();
    harness.register(0, "d");
    let plan = |harness: &Harness, moves: Vec<Move>| Command::Rebalance {
        now_ms: 0,
        planned_at: harness.state.revision(),
        namespace: "kv".into(),
        moves,
    };
    let to = |shard, id: &String| Move {
        shard,
        to: id.clone(),
    };
    let first = plan(&harness, vec![to(0, &ids[0]), to(1, &ids[0])]);
    harness.apply(first);
    let second = plan(&harness, vec![to(1, &ids[1])]);
    harness.apply(second);
    harness.apply(operator(
        0,
        OperatorAction::Pin {
            namespace: "kv".into(),
            shard: 2,
            executor_id: Some(ids[1].clone()),
        },
    ));
    let state = harness.state;
    let kv = state.namespace("kv").expect("kv");
    assert_eq!(kv.releasing().count(), 1);
    assert_eq!(state.retired_epochs().count(), 1);
    state
}

/// Placement settings of every kind (P18.4): load placement, tolerance, budget and a preference.
pub(super) fn every_placement_setting() -> PlacementOverrides {
    PlacementOverrides {
        load_placement: Some(true),
        balance_tolerance_percent: Some(25),
        max_balance_moves_per_minute: Some(60),
        prefer: Some(("zone".into(), "eu-1a".into())),
    }
}

/// A state with placement settings (P18.4): [`namespaced_state`] with `kv` given every
/// placement setting and `placed` created with one, both audited.
pub(crate) fn placed_state() -> LeaseState {
    let mut harness = Harness {
        state: namespaced_state(),
        next_index: 5_000,
    };
    let operator = |action| Command::Operator {
        now_ms: 0,
        actor: "admin CN=alice".into(),
        action,
    };
    harness.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: leasehold_api::wire::NAMESPACE_PLACEMENT_SCHEMA,
    });
    let set = harness.apply(operator(OperatorAction::SetNamespace {
        name: "kv".into(),
        lease_duration_ms: 10_000,
        max_executors: Some(2),
        placement: every_placement_setting(),
        replication: Default::default(),
    }));
    assert!(
        matches!(set, Outcome::NamespaceSet { changed: true, .. }),
        "{set:?}"
    );
    let created = harness.apply(operator(OperatorAction::CreateNamespace {
        name: "placed".into(),
        shard_count: 2,
        lease_duration_ms: 10_000,
        max_executors: None,
        placement: PlacementOverrides {
            load_placement: Some(false),
            ..PlacementOverrides::default()
        },
        replication: Default::default(),
    }));
    assert!(
        matches!(
            created,
            Outcome::NamespaceCreated {
                already_exists: false,
                ..
            }
        ),
        "{created:?}"
    );
    let state = harness.state;
    assert_eq!(
        state.namespace("kv").map(|kv| &kv.placement),
        Some(&every_placement_setting())
    );
    assert!(state
        .namespace("placed")
        .is_some_and(|placed| !placed.placement.is_empty()));
    state
}

#[test]
fn the_state_round_trips() {
    round_trip_named(&LeaseState::default());
    round_trip_named(&Harness::initialised(4, LEASE_MS).state);
    round_trip_named(&busy_state());
    round_trip_named(&operated_state());
    round_trip_named(&labelled_state());
    round_trip_named(&reserved_state());
    round_trip_named(&namespaced_state());
    round_trip_named(&placed_state());
}

/// The state as std collections hold it, field for field: what every release before the state
/// moved to persistent collections encoded.
mod std_collections {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::{Deserialize, Serialize};

    use super::super::super::{
        AuditRecord, ClusterConfig, ExecutorId, PlacementOverrides, Shard, ShardId, Tombstone,
    };

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    pub(super) struct Executor {
        pub id: ExecutorId,
        pub incarnation: String,
        pub name: Option<String>,
        pub address: String,
        pub lease_expiry_ms: u64,
        pub lease_ttl_told_ms: u64,
        pub lease_reserved_until_ms: u64,
        pub registered_revision: u64,
        pub owned_shards: BTreeSet<ShardId>,
        pub draining: bool,
        pub credential_sha256: Option<[u8; 32]>,
        pub capacity: u32,
        pub app_version: Option<String>,
        pub labels: BTreeMap<String, String>,
        pub namespace: String,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    pub(super) struct Namespace {
        pub config: ClusterConfig,
        pub max_executors: Option<u32>,
        pub placement: PlacementOverrides,
        pub created_revision: u64,
        pub assignment_revision: u64,
        pub shards: Vec<Shard>,
        pub pins: BTreeMap<ShardId, ExecutorId>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    pub(super) struct LeaseState {
        pub namespaces: BTreeMap<String, Namespace>,
        pub retired_epochs: BTreeMap<String, u64>,
        pub revision: u64,
        pub assignment_revision: u64,
        pub executors: BTreeMap<ExecutorId, Executor>,
        pub tombstones: BTreeMap<ExecutorId, Tombstone>,
        pub longest_lease_told_ms: u64,
        pub cluster_version: u32,
        pub maintenance: bool,
        pub audit: Vec<AuditRecord>,
        pub next_executor_number: u64,
    }

    pub(super) fn of(state: &super::LeaseState) -> LeaseState {
        LeaseState {
            namespaces: state
                .namespaces
                .iter()
                .map(|(name, namespace)| {
                    let mirror = Namespace {
                        config: namespace.config,
                        max_executors: namespace.max_executors,
                        placement: namespace.placement.clone(),
                        created_revision: namespace.created_revision,
                        assignment_revision: namespace.assignment_revision,
                        shards: namespace.shards.iter().cloned().collect(),
                        pins: namespace
                            .pins
                            .iter()
                            .map(|(shard, executor)| (*shard, executor.clone()))
                            .collect(),
                    };
                    (name.clone(), mirror)
                })
                .collect(),
            retired_epochs: state
                .retired_epochs
                .iter()
                .map(|(name, epoch)| (name.clone(), *epoch))
                .collect(),
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .iter()
                .map(|(id, e)| {
                    let executor = Executor {
                        id: e.id.clone(),
                        incarnation: e.incarnation.clone(),
                        name: e.name.clone(),
                        address: e.address.clone(),
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
                        lease_reserved_until_ms: e.lease_reserved_until_ms,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards.iter().copied().collect(),
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: e.capacity,
                        app_version: e.app_version.clone(),
                        labels: e.labels.clone(),
                        namespace: e.namespace.clone(),
                    };
                    (id.clone(), executor)
                })
                .collect(),
            tombstones: state
                .tombstones
                .iter()
                .map(|(id, t)| (id.clone(), t.clone()))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            audit: state.audit.iter().cloned().collect(),
            next_executor_number: state.next_executor_number,
        }
    }
}

/// The state's persistent collections (shared structure, so a snapshot's copy is O(1)) encode
/// byte for byte as the std collections did, and those bytes decode into them: the collections
/// are not part of the schema (P14.1).
#[test]
fn p14_1_persistent_collections_encode_as_std_collections_do() {
    for state in [
        LeaseState::default(),
        busy_state(),
        operated_state(),
        labelled_state(),
        reserved_state(),
        namespaced_state(),
        placed_state(),
    ] {
        let mirror = std_collections::of(&state);
        let ours = codec::encode_named("state", &state).expect("encodes");
        let theirs = codec::encode_named("state", &mirror).expect("encodes");
        assert_eq!(ours, theirs);
        let decoded: LeaseState = codec::decode_named("state", &theirs).expect("decodes");
        assert_eq!(decoded, state);
    }
}

/// One of every command variant, with edge values.
pub(crate) fn every_command() -> Vec<Command> {
    vec![
        Command::Init {
            now_ms: 1,
            shard_count: 1024,
            lease_duration_ms: LEASE_MS,
        },
        Command::SetLeaseDuration {
            now_ms: 2,
            lease_duration_ms: 30_000,
        },
        register_command(3, "inc"),
        Command::Register {
            follows_generations: false,
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 3,
            incarnation: "inc".into(),
            address: "http://x".into(),
            name: Some("n".into()),
            credential_sha256: None,
            capacity: crate::lease::DEFAULT_CAPACITY,
            app_version: None,
            labels: Default::default(),
        },
        Command::Renew {
            now_ms: 4,
            renewals: vec![
                Renewal {
                    executor_id: "ex-1".into(),
                    claims: vec![(0, 1), (5, u64::MAX)],
                    revision: 9,
                    ready: Vec::new(),
                },
                Renewal {
                    executor_id: "ex-2".into(),
                    claims: vec![],
                    revision: 0,
                    ready: Vec::new(),
                },
            ],
        },
        Command::Deregister {
            now_ms: 5,
            executor_id: "ex-1".into(),
        },
        Command::Reap {
            now_ms: u64::MAX,
            executor_ids: vec!["ex-1".into(), "ex-2".into()],
        },
        Command::Rebalance {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 7,
            planned_at: 6,
            moves: vec![Move {
                shard: u32::MAX,
                to: "ex-1".into(),
            }],
        },
        Command::Release {
            now_ms: 8,
            executor_id: "ex-1".into(),
            shards: vec![1, 2],
            revoke_revision: 7,
        },
        Command::CompleteHandoffs { now_ms: 9 },
        Command::SetDraining {
            now_ms: 10,
            executor_id: "ex-1".into(),
            draining: true,
        },
        Command::SetClusterVersion {
            now_ms: 11,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
        Command::Register {
            follows_generations: false,
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 12,
            incarnation: "credentialed".into(),
            address: "http://y".into(),
            name: None,
            credential_sha256: Some([0xff; 32]),
            capacity: crate::lease::DEFAULT_CAPACITY,
            app_version: None,
            labels: Default::default(),
        },
        Command::Register {
            follows_generations: false,
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 13,
            incarnation: "weighty".into(),
            address: "http://z".into(),
            name: None,
            credential_sha256: Some([1; 32]),
            capacity: leasehold_api::wire::MAX_CAPACITY,
            app_version: None,
            labels: Default::default(),
        },
        Command::SetClusterVersion {
            now_ms: 14,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
        Command::Register {
            follows_generations: false,
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 15,
            incarnation: "versioned".into(),
            address: "http://v".into(),
            name: Some("v".into()),
            credential_sha256: Some([2; 32]),
            capacity: 2,
            app_version: Some("1.4.0-rc.1+build.7".into()),
            labels: Default::default(),
        },
        Command::SetClusterVersion {
            now_ms: 16,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
    ]
    .into_iter()
    .chain(every_operator_command())
    .chain([
        Command::SetClusterVersion {
            now_ms: 26,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
        Command::Register {
            follows_generations: false,
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 27,
            incarnation: "labelled".into(),
            address: "http://l".into(),
            name: None,
            credential_sha256: Some([3; 32]),
            capacity: 3,
            app_version: Some("2.0".into()),
            labels: (0..leasehold_api::wire::MAX_LABELS)
                .map(|n| {
                    (
                        format!("k{n}"),
                        "v".repeat(leasehold_api::wire::MAX_LABEL_BYTES),
                    )
                })
                .chain([("zone".to_owned(), "eu-1a".to_owned())])
                .skip(1)
                .collect(),
        },
        Command::SetClusterVersion {
            now_ms: 28,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
        Command::RegisterMany {
            now_ms: 29,
            registrations: vec![
                Registration {
                    follows_generations: false,
                    namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                    incarnation: "batched-1".into(),
                    address: "http://b1".into(),
                    name: Some("b1".into()),
                    credential_sha256: Some([4; 32]),
                    capacity: 1,
                    app_version: None,
                    labels: Default::default(),
                },
                Registration {
                    follows_generations: false,
                    namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                    incarnation: "batched-2".into(),
                    address: "http://b2".into(),
                    name: None,
                    credential_sha256: None,
                    capacity: leasehold_api::wire::MAX_CAPACITY,
                    app_version: Some("3.1".into()),
                    labels: [("zone".to_owned(), "eu-1b".to_owned())].into(),
                },
            ],
        },
        Command::RegisterMany {
            now_ms: 30,
            registrations: vec![],
        },
        Command::SetClusterVersion {
            now_ms: 31,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
        Command::ReserveLeases {
            now_ms: u64::MAX,
            executor_ids: vec!["ex-1".into(), "ex-2".into()],
        },
        Command::ReserveLeases {
            now_ms: 32,
            executor_ids: vec![],
        },
        Command::ReapLapsed {
            now_ms: 33,
            leases: vec![
                LapsedLease {
                    executor_id: "ex-1".into(),
                    judged_expiry_ms: u64::MAX,
                },
                LapsedLease {
                    executor_id: "ex-2".into(),
                    judged_expiry_ms: 0,
                },
            ],
        },
        Command::ReapLapsed {
            now_ms: 34,
            leases: vec![],
        },
        Command::SetClusterVersion {
            now_ms: 35,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
    ])
    .chain(every_namespace_command())
    .chain(every_namespace_placement_command())
    .chain(every_reshard_command())
    .collect()
}

/// The commands of [`every_command`] that reshard (P20.1, P20.2), its last: a registration that
/// follows a change of layout alone and in a batch, a reshard asked for at the largest count,
/// and the leader's entry carrying one out.
pub(super) const RESHARD_COMMANDS: usize = 4;

fn every_reshard_command() -> Vec<Command> {
    let mut register = register_command(44, "following");
    if let Command::Register {
        follows_generations,
        ..
    } = &mut register
    {
        *follows_generations = true;
    }
    let commands = vec![
        register,
        Command::RegisterMany {
            now_ms: 45,
            registrations: vec![Registration {
                follows_generations: true,
                namespace: "kv".into(),
                incarnation: "batched-following".into(),
                address: "http://bf".into(),
                name: None,
                credential_sha256: None,
                capacity: 1,
                app_version: None,
                labels: Default::default(),
            }],
        },
        Command::Operator {
            now_ms: 46,
            actor: "admin of namespaces kv CN=kv-ops".into(),
            action: OperatorAction::Reshard {
                name: "kv".into(),
                shard_count: leasehold_api::wire::MAX_SHARD_COUNT,
            },
        },
        Command::Reshard {
            now_ms: 47,
            namespace: "kv".into(),
        },
    ];
    assert_eq!(commands.len(), RESHARD_COMMANDS);
    commands
}

/// The commands of [`every_command`] that concern namespaces (P18.1), before
/// [`NAMESPACE_PLACEMENT_COMMANDS`]: a registration
/// into a namespace alone and in a batch, a plan for one, a move and a pin in one, the three
/// namespace changes, and a raise to 10.
pub(super) const NAMESPACE_COMMANDS: usize = 9;

fn every_namespace_command() -> Vec<Command> {
    let in_kv = |action| Command::Operator {
        now_ms: 40,
        actor: "admin CN=alice".into(),
        action,
    };
    let mut register = register_command(36, "in-kv");
    if let Command::Register { namespace, .. } = &mut register {
        *namespace = "kv".into();
    }
    let commands = vec![
        register,
        Command::RegisterMany {
            now_ms: 37,
            registrations: vec![Registration {
                follows_generations: false,
                namespace: "kv".into(),
                incarnation: "batched-kv".into(),
                address: "http://bkv".into(),
                name: None,
                credential_sha256: None,
                capacity: 1,
                app_version: None,
                labels: Default::default(),
            }],
        },
        Command::Rebalance {
            now_ms: 38,
            planned_at: 7,
            namespace: "kv".into(),
            moves: vec![Move {
                shard: 0,
                to: "ex-1".into(),
            }],
        },
        in_kv(OperatorAction::CreateNamespace {
            name: "kv".into(),
            shard_count: leasehold_api::wire::MAX_SHARD_COUNT,
            lease_duration_ms: u64::MAX,
            max_executors: Some(u32::MAX),
            placement: PlacementOverrides::default(),
            replication: Default::default(),
        }),
        in_kv(OperatorAction::SetNamespace {
            name: "kv".into(),
            lease_duration_ms: 1,
            max_executors: None,
            placement: PlacementOverrides::default(),
            replication: Default::default(),
        }),
        in_kv(OperatorAction::DeleteNamespace { name: "kv".into() }),
        in_kv(OperatorAction::MoveShard {
            namespace: "kv".into(),
            shard: 1,
            to: "ex-2".into(),
        }),
        in_kv(OperatorAction::Pin {
            namespace: "kv".into(),
            shard: 1,
            executor_id: None,
        }),
        Command::SetClusterVersion {
            now_ms: 41,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
    ];
    assert_eq!(commands.len(), NAMESPACE_COMMANDS);
    commands
}

/// The commands of [`every_command`] that set placement (P18.4), its last: a namespace created
/// with every placement setting at its edge values, one set to a single setting, and a raise
/// to 11.
pub(super) const NAMESPACE_PLACEMENT_COMMANDS: usize = 3;

fn every_namespace_placement_command() -> Vec<Command> {
    let in_kv = |action| Command::Operator {
        now_ms: 42,
        actor: "admin CN=alice".into(),
        action,
    };
    let commands = vec![
        in_kv(OperatorAction::CreateNamespace {
            name: "placed".into(),
            shard_count: 1,
            lease_duration_ms: u64::MAX,
            max_executors: Some(u32::MAX),
            placement: PlacementOverrides {
                load_placement: Some(false),
                balance_tolerance_percent: Some(u32::MAX),
                max_balance_moves_per_minute: Some(leasehold_api::wire::MAX_SHARD_COUNT),
                prefer: Some(("k".repeat(leasehold_api::wire::MAX_LABEL_BYTES), "é".into())),
            },
            replication: Default::default(),
        }),
        in_kv(OperatorAction::SetNamespace {
            name: "placed".into(),
            lease_duration_ms: 1,
            max_executors: None,
            placement: PlacementOverrides {
                balance_tolerance_percent: Some(1),
                ..PlacementOverrides::default()
            },
            replication: Default::default(),
        }),
        Command::SetClusterVersion {
            now_ms: 43,
            cluster_version: crate::lease::schema::SECOND_RELEASE_SCHEMA,
        },
    ];
    assert_eq!(commands.len(), NAMESPACE_PLACEMENT_COMMANDS);
    commands
}

/// An operator's command (P17.4) of every action, with edge values: how many
/// [`every_command`] holds.
pub(super) const OPERATOR_COMMANDS: usize = 9;

fn every_operator_command() -> Vec<Command> {
    let actions = [
        OperatorAction::SetDraining {
            executor_id: "ex-1".into(),
            draining: true,
        },
        OperatorAction::SetDraining {
            executor_id: "ex-1".into(),
            draining: false,
        },
        OperatorAction::Remove {
            executor_id: "ex-2".into(),
        },
        OperatorAction::SetMaintenance { on: true },
        OperatorAction::MoveShard {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            shard: u32::MAX,
            to: "ex-1".into(),
        },
        OperatorAction::Pin {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            shard: 3,
            executor_id: Some("ex-1".into()),
        },
        OperatorAction::Pin {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            shard: 3,
            executor_id: None,
        },
        OperatorAction::Membership {
            change: MembershipChange::Added {
                node_id: u64::MAX,
                address: "https://m4.test:7400".into(),
            },
        },
        OperatorAction::Membership {
            change: MembershipChange::Removed { node_id: 2 },
        },
    ];
    let commands: Vec<Command> = actions
        .into_iter()
        .zip(17..)
        .map(|(action, now_ms)| Command::Operator {
            now_ms,
            actor: if now_ms == 17 {
                String::new()
            } else {
                "admin CN=alice, O=ops é".into()
            },
            action,
        })
        .collect();
    assert_eq!(commands.len(), OPERATOR_COMMANDS);
    commands
}

#[test]
fn every_command_variant_round_trips() {
    for command in &every_command() {
        round_trip_named(command);
    }
}

#[test]
fn every_outcome_variant_round_trips() {
    let grant = Grant {
        generation: 0,
        executor_id: "ex-1".into(),
        lease_ttl_ms: LEASE_MS,
        revision: 3,
        shard_count: 4,
        shards: vec![(0, 1), (3, 2)],
        secondaries: Vec::new(),
    };
    let effects = Effects {
        revokes: vec![Revoke {
            executor_id: "ex-1".into(),
            shards: vec![2],
            revision: 5,
        }],
        assignments: vec!["ex-2".into()],
    };
    let mut outcomes = vec![
        Outcome::Nothing,
        Outcome::Initialised {
            config: super::super::ClusterConfig {
                shard_count: 4,
                lease_duration_ms: LEASE_MS,
            },
            already_initialised: true,
        },
        Outcome::LeaseDurationSet {
            previous_lease_duration_ms: 1,
            lease_duration_ms: 2,
        },
        Outcome::Registered {
            grant: grant.clone(),
            already_registered: false,
        },
        Outcome::Renewed {
            results: vec![
                RenewResult::Renewed {
                    grant,
                    claims_mismatch: true,
                    acknowledged: vec![2],
                },
                RenewResult::UnknownExecutor {
                    executor_id: "ex-9".into(),
                },
            ],
            effects: effects.clone(),
        },
        Outcome::Deregistered {
            already_gone: false,
            freed: vec![1, 4],
            effects: effects.clone(),
        },
        Outcome::NotFound,
        Outcome::Reaped {
            reaped: vec!["ex-1".into()],
            skipped: vec!["ex-2".into()],
            effects: effects.clone(),
        },
        Outcome::LeasesReserved {
            reserved_until_ms: u64::MAX,
            reserved: vec!["ex-1".into()],
            skipped: vec!["ex-2".into()],
        },
        Outcome::Rebalanced {
            granted: vec![0],
            releasing: vec![1],
            cancelled: vec![2],
            effects: effects.clone(),
        },
        Outcome::Released {
            completed: vec![1],
            ignored: vec![2],
            effects: effects.clone(),
        },
        Outcome::HandoffsCompleted {
            completed: vec![1],
            effects,
        },
        Outcome::DrainingSet {
            executor_id: "ex-1".into(),
            draining: true,
            changed: false,
        },
        Outcome::ClusterVersionSet {
            previous: 2,
            cluster_version: 12,
        },
        Outcome::MaintenanceSet {
            on: true,
            changed: true,
        },
        Outcome::PinSet {
            shard: 3,
            executor_id: Some("ex-1".into()),
            changed: false,
        },
        Outcome::PinSet {
            shard: 3,
            executor_id: None,
            changed: true,
        },
        Outcome::Recorded,
        Outcome::NamespaceCreated {
            name: "kv".into(),
            already_exists: true,
        },
        Outcome::NamespaceSet {
            name: "kv".into(),
            changed: false,
        },
        Outcome::NamespaceDeleted {
            name: "kv".into(),
            already_gone: false,
            removed: vec!["ex-1".into()],
        },
    ];
    let reasons = [
        RefusalReason::NotInitialised,
        RefusalReason::ConfigConflict {
            existing: super::super::ClusterConfig {
                shard_count: 4,
                lease_duration_ms: 1,
            },
        },
        RefusalReason::Invalid {
            detail: "why".into(),
        },
        RefusalReason::StalePlan {
            planned_at: 1,
            assignment_revision: 2,
        },
        RefusalReason::LogIndexNotAfterRevision {
            log_index: 1,
            revision: 2,
        },
        RefusalReason::Conflict {
            detail: "pinned elsewhere".into(),
        },
        RefusalReason::UnknownNamespace {
            namespace: "kv".into(),
        },
    ];
    outcomes.extend(reasons.map(|reason| Outcome::Refused { reason }));
    for outcome in &outcomes {
        round_trip(outcome);
    }
    assert_eq!(Outcome::default(), Outcome::Nothing);
}
