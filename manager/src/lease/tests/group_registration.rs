//! Registrations group-committed into one entry (`Command::RegisterMany`, schema 12): each is
//! answered as a `Register` of it alone would be (P4.4, P7.2, P13.4), ids are never minted twice
//! (§1), and the numbers minted past an entry's index are state 0.1.0 cannot hold (P14.1).

use super::super::schema::release_0_1;
use super::super::{Command, ExecutorId, Outcome, RefusalReason, RegisterResult};
use super::{Harness, LEASE_MS};
use crate::lease::Registration;

fn registration(incarnation: &str) -> Registration {
    super::registration_in(incarnation, leasehold_api::wire::DEFAULT_NAMESPACE)
}

fn register_many(
    harness: &mut Harness,
    now_ms: u64,
    registrations: Vec<Registration>,
) -> Vec<RegisterResult> {
    match harness.apply(Command::RegisterMany {
        now_ms,
        registrations,
    }) {
        Outcome::RegisteredMany { results } => results,
        other => panic!("{other:?}"),
    }
}

fn new_id(result: &RegisterResult) -> ExecutorId {
    match result {
        RegisterResult::Registered {
            grant,
            already_registered: false,
        } => grant.executor_id.clone(),
        other => panic!("not a new registration: {other:?}"),
    }
}

/// §1, P4.4: an entry registering three executors numbers them from its own index on; the
/// entries after it, whose indexes it took, mint past them; once the log's index passes the
/// numbers taken, ids are log indexes again and the state forgets the numbers.
#[test]
fn p4_4_registrations_in_one_entry_mint_one_id_each_and_none_twice() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let batch_index = harness.next_index();
    let results = register_many(
        &mut harness,
        1_000,
        ["a", "b", "c"].map(registration).to_vec(),
    );
    let ids: Vec<ExecutorId> = results.iter().map(new_id).collect();
    let expected: Vec<ExecutorId> = (0..3).map(|n| format!("ex-{}", batch_index + n)).collect();
    assert_eq!(ids, expected);
    for (id, result) in ids.iter().zip(&results) {
        let RegisterResult::Registered { grant, .. } = result else {
            unreachable!("checked by new_id")
        };
        assert_eq!(
            (grant.revision, grant.lease_ttl_ms),
            (batch_index, LEASE_MS)
        );
        let executor = harness.state.executor(id).expect("registered");
        assert_eq!(executor.lease_expiry_ms, 1_000 + LEASE_MS);
        assert_eq!(executor.registered_revision, batch_index);
    }
    assert_eq!(harness.state.next_executor_number, batch_index + 3);

    // The next two entries' indexes are taken: their registrations mint past them.
    let mut minted = ids.clone();
    let Outcome::Registered { grant, .. } = harness.apply(super::register_command(1_001, "d"))
    else {
        panic!("d refused");
    };
    minted.push(grant.executor_id);
    minted.push(new_id(
        &register_many(&mut harness, 1_002, vec![registration("e")])[0],
    ));
    assert_eq!(
        minted[3..],
        [
            format!("ex-{}", batch_index + 3),
            format!("ex-{}", batch_index + 4)
        ]
    );
    assert_eq!(harness.state.next_executor_number, batch_index + 5);

    // Past the numbers taken, the entry's own index again, and nothing more to remember.
    while harness.next_index() < batch_index + 5 {
        harness.apply(Command::CompleteHandoffs { now_ms: 1_003 });
    }
    let index = harness.next_index();
    minted.push(new_id(
        &register_many(&mut harness, 1_004, vec![registration("f")])[0],
    ));
    assert_eq!(minted[5], format!("ex-{index}"));
    assert_eq!(harness.state.next_executor_number, 0);
    let mut unique = minted.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), minted.len(), "{minted:?}");
}

/// P4.4, P7.2, P13.4, I6: each registration of an entry is answered on its own: a repeat of an
/// incarnation (in the same entry or a later one) is the same executor, a malformed one and one
/// presenting another credential are refused and mint nothing, and the others are registered.
#[test]
fn p4_4_each_registration_of_an_entry_is_answered_on_its_own() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    let first = harness.next_index();
    let held = Registration {
        credential_sha256: Some([7; 32]),
        ..registration("held")
    };
    let x = new_id(&register_many(&mut harness, 10, vec![held.clone()])[0]);
    assert_eq!(x, format!("ex-{first}"));
    assert_eq!(
        harness.state.next_executor_number, 0,
        "one per entry: the log's own numbers"
    );

    let index = harness.next_index();
    let results = register_many(
        &mut harness,
        20,
        vec![
            registration("y"),
            Registration {
                address: String::new(),
                ..registration("malformed")
            },
            registration("y"),
            Registration {
                credential_sha256: Some([8; 32]),
                ..held.clone()
            },
            held,
            registration("z"),
        ],
    );
    let y = new_id(&results[0]);
    assert_eq!(y, format!("ex-{index}"));
    assert!(
        matches!(&results[1], RegisterResult::Refused { reason: RefusalReason::Invalid { detail } } if detail.contains("address")),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(&results[2], RegisterResult::Registered { grant, already_registered: true } if grant.executor_id == y),
        "{:?}",
        results[2]
    );
    assert_eq!(
        results[3],
        RegisterResult::Refused {
            reason: RefusalReason::CredentialMismatch {
                executor_id: x.clone()
            }
        }
    );
    assert!(
        matches!(&results[4], RegisterResult::Registered { grant, already_registered: true } if grant.executor_id == x),
        "{:?}",
        results[4]
    );
    assert_eq!(
        new_id(&results[5]),
        format!("ex-{}", index + 1),
        "the refused minted nothing"
    );
    assert!(harness.state.executor_by_incarnation("malformed").is_none());
    assert_eq!(harness.state.executors().count(), 3);

    // An entry of refusals only changes nothing, not even the revision (P5.1).
    let outcome = harness.apply_expecting_no_change(Command::RegisterMany {
        now_ms: 30,
        registrations: vec![Registration {
            incarnation: String::new(),
            ..registration("")
        }],
    });
    assert!(
        matches!(outcome, Outcome::RegisteredMany { results } if matches!(results[..], [RegisterResult::Refused { .. }]))
    );
}

/// P14.1: a state holding numbers an entry minted past its own index is not one 0.1.0 can
/// express, and the refusal says why. Registrations one per entry leave nothing to remember, so
/// such a state goes down to 0.1.0's types and back unchanged.
#[test]
fn p14_1_numbers_minted_past_the_log_are_not_in_0_1_0() {
    let mut harness = Harness::initialised(8, LEASE_MS);
    for incarnation in ["a", "b"] {
        register_many(&mut harness, 5, vec![registration(incarnation)]);
    }
    harness.apply(super::register_command(6, "c"));
    let one_each = harness.state.clone();
    let down = release_0_1::LeaseState::try_from(&one_each).expect("one per entry is 0.1.0's");
    assert_eq!(crate::lease::LeaseState::from(down), one_each);

    register_many(&mut harness, 7, ["d", "e"].map(registration).to_vec());
    let refused = release_0_1::LeaseState::try_from(&harness.state).unwrap_err();
    assert!(refused.0.contains("one entry"), "{refused}");
}

mod property {
    use proptest::prelude::*;

    use super::*;

    /// An entry of a fleet's life: a batch of incarnations, one registration, a deregistration,
    /// or an entry that registers nothing.
    #[derive(Debug, Clone)]
    enum Entry {
        Batch(Vec<u8>),
        One(u8),
        Deregister(u8),
        Other,
    }

    fn entry() -> impl Strategy<Value = Entry> {
        prop_oneof![
            3 => prop::collection::vec(0u8..12, 0..6).prop_map(Entry::Batch),
            2 => (0u8..12).prop_map(Entry::One),
            1 => (0u8..12).prop_map(Entry::Deregister),
            2 => Just(Entry::Other),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// §1, P4.4: whatever mix of batches, single registrations, departures and other entries,
        /// no executor id is ever minted twice, and a registered incarnation keeps its id.
        #[test]
        fn no_executor_id_is_minted_twice(entries in prop::collection::vec(entry(), 1..60)) {
            let mut harness = Harness::initialised(4, LEASE_MS);
            let mut minted: Vec<ExecutorId> = Vec::new();
            let mut now_ms = 0;
            for entry in entries {
                now_ms += 1;
                let answered: Vec<(String, RegisterResult)> = match entry {
                    Entry::Batch(incarnations) => {
                        let names: Vec<String> =
                            incarnations.iter().map(|n| format!("inc-{n}")).collect();
                        let results = register_many(
                            &mut harness,
                            now_ms,
                            names.iter().map(|name| registration(name)).collect(),
                        );
                        names.into_iter().zip(results).collect()
                    }
                    Entry::One(n) => {
                        let name = format!("inc-{n}");
                        let result = match harness.apply(super::super::register_command(now_ms, &name)) {
                            Outcome::Registered { grant, already_registered } => {
                                RegisterResult::Registered { grant, already_registered }
                            }
                            other => panic!("{other:?}"),
                        };
                        vec![(name, result)]
                    }
                    Entry::Deregister(n) => {
                        if let Some(executor) = harness.state.executor_by_incarnation(&format!("inc-{n}")) {
                            let executor_id = executor.id.clone();
                            harness.apply(Command::Deregister { now_ms, executor_id });
                        } else {
                            harness.apply(Command::CompleteHandoffs { now_ms });
                        }
                        vec![]
                    }
                    Entry::Other => {
                        harness.apply(Command::CompleteHandoffs { now_ms });
                        vec![]
                    }
                };
                for (name, result) in answered {
                    let RegisterResult::Registered { grant, already_registered } = result else {
                        panic!("{name} refused: {result:?}");
                    };
                    let holder = harness.state.executor_by_incarnation(&name).expect("registered");
                    prop_assert_eq!(&holder.id, &grant.executor_id);
                    if !already_registered {
                        prop_assert!(!minted.contains(&grant.executor_id), "{} minted twice", grant.executor_id);
                        minted.push(grant.executor_id);
                    }
                }
            }
        }
    }
}
