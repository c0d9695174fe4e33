//! State schemas (P14.1) and the cluster version (P14.3): the one conversion between release
//! 0.1.0's types (`lease::schema::release_0_1`) and this build's, which agrees with
//! `Command::required_schema` on every kind of command, the gate in front of proposals, and a
//! property test that a state migrated at any point behaves exactly as the state it came from.

use proptest::prelude::*;

use super::super::schema::{
    check_proposable, release_0_1, FIRST_RELEASE_SCHEMA, NEWEST_SCHEMA, SECOND_RELEASE_SCHEMA,
};
use super::super::{Command, LeaseState, Outcome, Renewal};
use super::encoding::{
    busy_state, every_command, labelled_state, namespaced_state, operated_state, placed_state,
    reserved_state,
};
use super::{register_command, Harness, LEASE_MS};

fn bincode_round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(value, config).expect("encodes");
    let (back, read) = bincode::serde::decode_from_slice(&bytes, config).expect("decodes");
    assert_eq!(read, bytes.len());
    back
}

/// What a restart on a directory of 0.1.0 does: down to its types, through its bytes, and up.
fn migrated(state: &LeaseState) -> LeaseState {
    let old = release_0_1::LeaseState::try_from(state).expect("expressible in 0.1.0");
    bincode_round_trip(&old).into()
}

/// P14.1, P14.3: a command is of schema 2 exactly when 0.1.0's types express it, and then it
/// converts down and back unchanged; every other kind needs this release's schema, and its
/// refusal names what 0.1.0 lacks. One rule answers both questions: what may be proposed at a
/// cluster version, and what a record is written at.
#[test]
fn p14_1_required_schema_and_the_0_1_0_conversion_agree_on_every_command() {
    let (mut old, mut new) = (0, 0);
    for command in every_command() {
        let required = command.required_schema();
        match release_0_1::Command::try_from(&command) {
            Ok(down) => {
                old += 1;
                assert_eq!(required, FIRST_RELEASE_SCHEMA, "{command:?}");
                assert_eq!(command, bincode_round_trip(&down).into(), "{command:?}");
            }
            Err(refusal) => {
                new += 1;
                assert!(required >= SECOND_RELEASE_SCHEMA, "{command:?}");
                assert!(refusal.0.contains("not in 0.1.0"), "{refusal}");
            }
        }
    }
    assert!(old >= 10 && new >= 20, "{old} of 0.1.0, {new} newer");
}

#[test]
fn a_state_below_the_raise_converts_to_0_1_0_and_back_unchanged() {
    for state in [
        LeaseState::default(),
        Harness::initialised(4, LEASE_MS).state,
        busy_state(),
    ] {
        assert_eq!(state.cluster_version(), FIRST_RELEASE_SCHEMA);
        assert_eq!(migrated(&state), state);
        assert_eq!(state.required_schema(), FIRST_RELEASE_SCHEMA);
    }
}

/// P14.1: a state holding anything 0.1.0 lacks is refused by its types, naming it; each of these
/// is at this release's cluster version, so it is written at this release's schema anyway.
#[test]
fn p14_1_a_state_of_this_release_is_not_expressible_in_0_1_0() {
    let mut raised = Harness {
        state: busy_state(),
        next_index: 1_000,
    };
    raised.apply(Command::SetClusterVersion {
        now_ms: 3_000,
        cluster_version: SECOND_RELEASE_SCHEMA,
    });
    let refusal = release_0_1::LeaseState::try_from(&raised.state).unwrap_err();
    assert!(refusal.0.contains("cluster version"), "{refusal}");
    for (state, lacks) in [
        (operated_state(), "operator control"),
        (labelled_state(), "not in 0.1.0"),
        (reserved_state(), "not in 0.1.0"),
        (namespaced_state(), "not in 0.1.0"),
        (placed_state(), "not in 0.1.0"),
    ] {
        assert_eq!(state.required_schema(), SECOND_RELEASE_SCHEMA);
        // Each is refused for what it holds, not only for its cluster version.
        let mut lowered = state.clone();
        lowered.cluster_version = FIRST_RELEASE_SCHEMA;
        let refusal = release_0_1::LeaseState::try_from(&lowered).unwrap_err();
        assert!(refusal.0.contains(lacks), "{lacks}: {refusal}");
    }
}

/// P14.1: each thing 0.1.0's executors lack is refused on its own, even in a state still at
/// cluster version 2 (what a snapshot would then be written at: this release's schema).
#[test]
fn p14_1_each_thing_0_1_0_lacks_is_refused_by_its_types() {
    let mut base = busy_state();
    let id = base.executors().next().expect("an executor").id.clone();
    type Change = fn(&mut crate::lease::Executor);
    let cases: [(&str, Change); 5] = [
        ("credential", |e| e.credential_sha256 = Some([1; 32])),
        ("capacity", |e| e.capacity = 3),
        ("application version", |e| {
            e.app_version = Some("1.0.0".into())
        }),
        ("labels", |e| {
            e.labels.insert("zone".into(), "a".into());
        }),
        ("lease reservation", |e| e.lease_reserved_until_ms = 1),
    ];
    for (lacks, change) in cases {
        let mut state = base.clone();
        change(state.executors.get_mut(&id).expect("present"));
        let refusal = release_0_1::LeaseState::try_from(&state).unwrap_err();
        assert!(refusal.0.contains(lacks), "{lacks}: {refusal}");
    }
    base.executors.get_mut(&id).expect("present").namespace = "kv".into();
    let refusal = release_0_1::LeaseState::try_from(&base).unwrap_err();
    assert!(refusal.0.contains("namespace"), "{refusal}");
}

#[test]
fn the_cluster_version_only_rises_and_may_be_raised_before_init() {
    let mut harness = Harness::new();
    let raise = |cluster_version| Command::SetClusterVersion {
        now_ms: 1,
        cluster_version,
    };
    assert_eq!(
        harness.apply(raise(SECOND_RELEASE_SCHEMA)),
        Outcome::ClusterVersionSet {
            previous: 2,
            cluster_version: SECOND_RELEASE_SCHEMA
        },
        "accepted before Init: it concerns the replicas"
    );
    assert_eq!(harness.state.revision(), 1);
    // A stale or repeated raise changes nothing (P2.4), not even the revision.
    for stale in [SECOND_RELEASE_SCHEMA, 2] {
        let outcome = harness.apply_expecting_no_change(raise(stale));
        assert_eq!(
            outcome,
            Outcome::ClusterVersionSet {
                previous: SECOND_RELEASE_SCHEMA,
                cluster_version: SECOND_RELEASE_SCHEMA
            }
        );
    }
    assert_eq!(harness.state.cluster_version(), SECOND_RELEASE_SCHEMA);
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

/// The 0.1.0 command `step` stands for at `now_ms`, if there is one to make.
fn command_for(state: &LeaseState, step: &Step, now_ms: &mut u64) -> Option<release_0_1::Command> {
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
                        ready: Vec::new(),
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
    Some(release_0_1::Command::try_from(&command).expect("a command of 0.1.0"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// P14.1: any state of 0.1.0, read into this build, applies every command of 0.1.0 to
    /// the same outcome and the same state as the state it came from, at every point of a fleet's
    /// life; and the result is still expressible in schema 2, so a 0.1.0 follower holds the same.
    #[test]
    fn a_migrated_state_applies_every_0_1_0_command_as_the_original(
        shard_count in 1u32..12,
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let mut original = Harness::initialised(shard_count, LEASE_MS);
        let mut now_ms = 0;
        for step in &steps {
            let Some(old) = command_for(&original.state, step, &mut now_ms) else {
                continue;
            };
            let command = Command::from(old);
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
        }
    }
}

/// P18.1, P18.4 with P14.1: a backup and a snapshot carry every namespace and its placement
/// settings: a state holding `kv` beside `default` (its shards, pins, handoffs, executor bound, a
/// retired name, placement) is written at this release's schema and restored whole.
#[test]
fn p18_1_p18_4_a_backup_and_a_snapshot_carry_every_namespace() {
    use leasehold_raft_store::StateMachine;

    use crate::raft::versions::{backup_payload, state_from_backup};

    for state in [namespaced_state(), placed_state()] {
        let (schema, payload) = backup_payload(&state).expect("encodes");
        assert_eq!(schema, SECOND_RELEASE_SCHEMA);
        let restored = state_from_backup(schema, &payload).expect("restores");
        assert_eq!(restored, state);
        assert!(restored.namespace("kv").is_some());
        assert!(restored.consistency_violations().is_empty());

        let (schema, payload) = state.encode_state().expect("encodes");
        assert_eq!(schema, SECOND_RELEASE_SCHEMA);
        assert_eq!(
            LeaseState::decode_state(schema, &payload).expect("decodes"),
            state
        );
    }
}
