//! Whether stopping an executor or a manager now is safe (PROTOCOL P17.4), as pure verdicts: the
//! HTTP shell (`http/safe_to_stop.rs`) answers them on the leader, from its applied state and
//! from what it knows of the voters (which answer, and how far each is replicated).

use std::collections::BTreeSet;

use leasehold_api::wire::SafeToStop;

use crate::lease::{takes_shards, LeaseState};

use crate::raft::NodeId;

/// A voter is caught up when its log matches the leader's to within this many entries of what
/// the leader applied: renewals stream in steadily, so a healthy follower is always a few
/// appends behind, while one that stopped falls further back with every renewal.
pub const CAUGHT_UP_LAG_ENTRIES: u64 = 100;

/// Whether a voter whose log the leader has matched up to `matched` is caught up with a leader
/// that applied up to `leader_applied`.
pub fn caught_up(matched: Option<u64>, leader_applied: Option<u64>) -> bool {
    match (matched, leader_applied) {
        (_, None) => true,
        (None, Some(applied)) => applied < CAUGHT_UP_LAG_ENTRIES,
        (Some(matched), Some(applied)) => matched.saturating_add(CAUGHT_UP_LAG_ENTRIES) >= applied,
    }
}

/// Stopping executor `executor_id` is safe when it holds no shards, or when another executor of
/// its namespace (live, not draining: one that takes shards, P5.4; only its namespace's may hold
/// them, P18.1) can take them; `None` for an executor not
/// registered in `state`. Read from the state's indexes: the executor's owned set (releasing
/// shards included: it serves each until its revoke) and the executors, not the shard table.
pub fn executor_verdict(state: &LeaseState, executor_id: &str, now_ms: u64) -> Option<SafeToStop> {
    let executor = state.executor(executor_id)?;
    let held = executor.owned_shards.len();
    let takers = state
        .executors_in(&executor.namespace)
        .filter(|other| other.id != executor_id && takes_shards(other, now_ms))
        .count();
    Some(if held == 0 {
        SafeToStop {
            safe: true,
            reason: format!("executor {executor_id} holds no shards"),
        }
    } else if takers > 0 {
        SafeToStop {
            safe: true,
            reason: format!(
                "its {held} shards can move to {takers} other live executors that are not \
                 draining (a SIGTERM hands each over before it stops, P17.2)"
            ),
        }
    } else {
        SafeToStop {
            safe: false,
            reason: format!(
                "no other live executor that is not draining can take its {held} shards: they \
                 would go unserved until it, or another executor, comes back"
            ),
        }
    })
}

/// Stopping manager `node_id` is safe when the voters left up and caught up (`healthy`, which
/// may include it) are still a majority of every voter, so the group goes on committing and a
/// new leader can be elected from them; a learner changes no quorum. `None` for a node that is
/// not a member.
pub fn member_verdict(
    voters: &BTreeSet<NodeId>,
    learners: &BTreeSet<NodeId>,
    node_id: NodeId,
    healthy: &BTreeSet<NodeId>,
) -> Option<SafeToStop> {
    if learners.contains(&node_id) && !voters.contains(&node_id) {
        return Some(SafeToStop {
            safe: true,
            reason: format!("node {node_id} is a learner: no quorum depends on it"),
        });
    }
    if !voters.contains(&node_id) {
        return None;
    }
    let majority = voters.len() / 2 + 1;
    let left: BTreeSet<NodeId> = healthy
        .iter()
        .copied()
        .filter(|&id| id != node_id && voters.contains(&id))
        .collect();
    Some(if voters.len() == 1 {
        SafeToStop {
            safe: false,
            reason: format!("node {node_id} is the only voter: stopping it stops the cluster"),
        }
    } else if left.len() >= majority {
        SafeToStop {
            safe: true,
            reason: format!(
                "without it, voters {left:?} are up and caught up: {} of {}, a majority is {majority}",
                left.len(),
                voters.len()
            ),
        }
    } else {
        SafeToStop {
            safe: false,
            reason: format!(
                "without it only voters {left:?} would be up and caught up: {} of {}, and {majority} \
                 are needed to commit or elect; bring the others back first",
                left.len(),
                voters.len()
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{plan_rebalance, Command, Outcome};

    /// A state of 8 shards: `placed` executors hold them all (the first registered holds the
    /// first share), then `idle` executors that hold nothing, every lease granted at time 0.
    fn state_with(placed: usize, idle: usize) -> (LeaseState, Vec<String>) {
        let mut state = LeaseState::default();
        let mut index = 1;
        let _ = state.apply(
            index,
            &Command::Init {
                now_ms: 0,
                shard_count: 8,
                lease_duration_ms: 10_000,
            },
        );
        let mut ids = Vec::new();
        let names = (0..placed)
            .map(|i| format!("placed-{i}"))
            .chain((0..idle).map(|i| format!("idle-{i}")));
        for (position, name) in names.enumerate() {
            if position == placed {
                if let Some(plan) = plan_rebalance(&state, 0) {
                    index += 1;
                    let _ = state.apply(index, &plan);
                }
            }
            index += 1;
            let outcome = state.apply(
                index,
                &Command::Register {
                    follows_generations: false,
                    namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                    now_ms: 0,
                    address: format!("http://{name}.test"),
                    incarnation: name,
                    name: None,
                    credential_sha256: None,
                    capacity: 1,
                    app_version: None,
                    labels: Default::default(),
                },
            );
            match outcome {
                Outcome::Registered { grant, .. } => ids.push(grant.executor_id),
                other => panic!("{other:?}"),
            }
        }
        if idle == 0 {
            if let Some(plan) = plan_rebalance(&state, 0) {
                index += 1;
                let _ = state.apply(index, &plan);
            }
        }
        (state, ids)
    }

    fn ids(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    /// P17.4, P5.4: an executor is safe to stop when it holds nothing or another live executor
    /// that is not draining can take its shards; otherwise not, with the reason.
    #[test]
    fn p17_4_an_executor_is_safe_to_stop_only_if_its_shards_have_somewhere_to_go() {
        let (alone, ids) = state_with(1, 0);
        let verdict = executor_verdict(&alone, &ids[0], 0).unwrap();
        assert!(!verdict.safe, "{verdict:?}");
        assert!(verdict.reason.contains("8 shards"), "{verdict:?}");
        let (mut unfit_peers, ids) = state_with(1, 2);
        let _ = unfit_peers.apply(
            100,
            &Command::SetDraining {
                now_ms: 0,
                executor_id: ids[1].clone(),
                draining: true,
            },
        );
        assert!(
            executor_verdict(&unfit_peers, &ids[0], 0).unwrap().safe,
            "ids[2] takes"
        );
        // Past every lease: nobody is live to take them.
        assert!(
            !executor_verdict(&unfit_peers, &ids[0], 10_002)
                .unwrap()
                .safe
        );
        let (with_a_taker, ids) = state_with(2, 0);
        assert!(executor_verdict(&with_a_taker, &ids[0], 0).unwrap().safe);
        let (idle, ids) = state_with(1, 1);
        let verdict = executor_verdict(&idle, &ids[1], 0).unwrap();
        assert!(
            verdict.safe && verdict.reason.contains("holds no shards"),
            "{verdict:?}"
        );
        assert_eq!(executor_verdict(&with_a_taker, "ex-999", 0), None);
    }

    /// P17.4 with P18.1: only an executor of its own namespace can take an executor's shards, so
    /// a live executor of another namespace makes stopping it no safer.
    #[test]
    fn p18_1_only_an_executor_of_its_namespace_takes_its_shards() {
        use crate::lease::tests::{create_namespace_command, register_in_command};
        use crate::lease::Move;

        let (mut state, _) = state_with(1, 0);
        let mut index = state.revision();
        let mut apply = |state: &mut LeaseState, command: Command| {
            index += 1;
            state.apply(index, &command)
        };
        apply(&mut state, create_namespace_command("kv", 2, 10_000, None));
        let Outcome::Registered { grant, .. } =
            apply(&mut state, register_in_command(0, "k", "kv"))
        else {
            panic!("registered into kv");
        };
        let k = grant.executor_id;
        let planned_at = state.revision();
        apply(
            &mut state,
            Command::Rebalance {
                now_ms: 0,
                planned_at,
                namespace: "kv".into(),
                moves: vec![
                    Move {
                        shard: 0,
                        to: k.clone(),
                    },
                    Move {
                        shard: 1,
                        to: k.clone(),
                    },
                ],
            },
        );
        // `default`'s executor is live, but it cannot take kv's shards.
        let verdict = executor_verdict(&state, &k, 0).unwrap();
        assert!(!verdict.safe, "{verdict:?}");
    }

    /// P17.4: a manager is safe to stop when the other voters that are up and caught up are a
    /// majority of all voters; a learner always is; the only voter never is.
    #[test]
    fn p17_4_a_manager_is_safe_to_stop_only_with_a_caught_up_majority_left() {
        let three = ids(&[1, 2, 3]);
        let none = BTreeSet::new();
        assert!(
            member_verdict(&three, &none, 1, &ids(&[1, 2, 3]))
                .unwrap()
                .safe
        );
        assert!(
            member_verdict(&three, &none, 1, &ids(&[2, 3]))
                .unwrap()
                .safe
        );
        let one_behind = member_verdict(&three, &none, 1, &ids(&[1, 2])).unwrap();
        assert!(!one_behind.safe, "{one_behind:?}");
        assert!(one_behind.reason.contains("2 are needed"), "{one_behind:?}");
        let five = ids(&[1, 2, 3, 4, 5]);
        assert!(
            member_verdict(&five, &none, 5, &ids(&[1, 2, 3]))
                .unwrap()
                .safe
        );
        assert!(
            !member_verdict(&five, &none, 3, &ids(&[1, 2, 3]))
                .unwrap()
                .safe
        );
        assert!(
            member_verdict(&three, &ids(&[4]), 4, &ids(&[1]))
                .unwrap()
                .safe
        );
        assert!(
            !member_verdict(&ids(&[1]), &none, 1, &ids(&[1]))
                .unwrap()
                .safe
        );
        assert_eq!(member_verdict(&three, &none, 7, &three), None);
    }

    #[test]
    fn p17_4_a_voter_is_caught_up_within_the_lag_bound() {
        assert!(caught_up(None, None));
        assert!(caught_up(Some(900), Some(1_000)));
        assert!(!caught_up(Some(899), Some(1_000)));
        assert!(!caught_up(None, Some(1_000)));
        assert!(caught_up(None, Some(5)));
    }
}
