//! Whether stopping an executor or a manager now is safe (PROTOCOL P17.4), as pure verdicts: the
//! HTTP shell (`http/safe_to_stop.rs`) answers them on the leader, from its applied state and
//! from what it knows of the voters (which answer, and how far each is replicated).

use std::collections::BTreeSet;

use leasehold_api::wire::{possible_takers, ExecutorView, SafeToStop};

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

/// Stopping executor `executor_id` is safe when it holds no shards, or when another executor
/// (live, not draining) can take them; `None` for an executor not in `executors`.
pub fn executor_verdict(executor_id: &str, executors: &[ExecutorView]) -> Option<SafeToStop> {
    let executor = executors
        .iter()
        .find(|executor| executor.executor_id == executor_id)?;
    let held = executor.shards.len();
    let takers = possible_takers(executor_id, executors).count();
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
    use leasehold_api::wire::ShardEpoch;

    fn executor(id: &str, shards: u32, draining: bool, lease_remaining_ms: u64) -> ExecutorView {
        ExecutorView {
            executor_id: id.into(),
            incarnation: format!("inc-{id}"),
            name: None,
            address: "http://127.0.0.1:9".into(),
            lease_remaining_ms,
            registered_revision: 1,
            shards: (0..shards)
                .map(|shard| ShardEpoch { shard, epoch: 1 })
                .collect(),
            draining,
            capacity: 1,
            load: None,
            utilisation: None,
            app_version: None,
        }
    }

    fn ids(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    /// P17.4, P5.4: an executor is safe to stop when it holds nothing or another live executor
    /// that is not draining can take its shards; otherwise not, with the reason.
    #[test]
    fn p17_4_an_executor_is_safe_to_stop_only_if_its_shards_have_somewhere_to_go() {
        let alone = [executor("ex-1", 4, false, 9_000)];
        let verdict = executor_verdict("ex-1", &alone).unwrap();
        assert!(!verdict.safe, "{verdict:?}");
        assert!(verdict.reason.contains("4 shards"), "{verdict:?}");
        let unfit_peers = [
            executor("ex-1", 4, false, 9_000),
            executor("ex-2", 0, true, 9_000),
            executor("ex-3", 0, false, 0),
        ];
        assert!(!executor_verdict("ex-1", &unfit_peers).unwrap().safe);
        let with_a_taker = [
            executor("ex-1", 4, false, 9_000),
            executor("ex-2", 4, false, 9_000),
        ];
        assert!(executor_verdict("ex-1", &with_a_taker).unwrap().safe);
        let empty = [executor("ex-1", 0, false, 9_000)];
        assert!(executor_verdict("ex-1", &empty).unwrap().safe);
        assert_eq!(executor_verdict("ex-9", &with_a_taker), None);
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
