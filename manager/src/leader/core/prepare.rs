//! Warm handoffs (PROTOCOL P17.1): before the leader commits a plan, every executor about to
//! receive a shard from a live holder is asked to prepare for it (`POST /v1/prepare`, the shard
//! with the epoch it will be granted at), and the plan waits for the answers, at most
//! `--prepare-timeout`. Only then is the holder revoked, so the receiver warms up while the
//! holder still serves, and the shard's no-owner window stays the handoff's own.
//!
//! What does not wait: a shard nobody holds (or whose holder lapsed) is placed at once, since
//! nobody serves it meanwhile; a handoff already under way is not prepared again. A receiver is
//! asked once per shard and epoch in a term, answered or not: a plan refused as stale and made
//! again does not wait twice. An executor of an earlier release answers `404` and is not waited
//! for. The lease bounds safety whatever the hooks do (P5.2 is unchanged): preparing admits
//! nothing.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use leasehold_api::wire::{PreparePush, ShardEpoch};

use crate::lease::{Command, Epoch, ExecutorId, LeaseState, ShardId};

/// Most (shard, epoch, receiver) a term remembers having asked; past it the memory starts
/// again, which at worst asks some receivers twice.
const MAX_REMEMBERED: usize = 1 << 20;

/// What this term has asked to prepare.
#[derive(Debug, Default)]
pub struct Prepared {
    asked: HashSet<(ShardId, Epoch, ExecutorId)>,
}

/// One receiver's prepare request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRequest {
    pub address: String,
    pub push: PreparePush,
}

impl Prepared {
    /// The prepare requests `plan` needs on `state` at `now_ms`, one per receiver: each move of
    /// a delivered shard (no handoff) from a holder whose lease is live, not yet asked this term.
    pub fn needed(
        &self,
        state: &LeaseState,
        plan: &Command,
        now_ms: u64,
        wait: Duration,
    ) -> Vec<PrepareRequest> {
        let Command::Rebalance {
            moves,
            planned_at,
            namespace,
            ..
        } = plan
        else {
            return Vec::new();
        };
        let Some(space) = state.space(namespace) else {
            return Vec::new();
        };
        let mut by_receiver: BTreeMap<&str, Vec<ShardEpoch>> = BTreeMap::new();
        for step in moves {
            let Some(entry) = space.shard(step.shard) else {
                continue;
            };
            let held_live = entry.handoff.is_none()
                && entry.owner.as_deref().is_some_and(|owner| {
                    owner != step.to
                        && state
                            .executor(owner)
                            .is_some_and(|holder| !holder.lease_lapsed(now_ms))
                });
            let epoch = entry.epoch.saturating_add(1);
            if held_live && !self.asked.contains(&(step.shard, epoch, step.to.clone())) {
                by_receiver
                    .entry(step.to.as_str())
                    .or_default()
                    .push(ShardEpoch {
                        shard: step.shard,
                        epoch,
                    });
            }
        }
        by_receiver
            .into_iter()
            .filter_map(|(receiver, shards)| {
                let address = state.executor(receiver)?.address.clone();
                Some(PrepareRequest {
                    address,
                    push: PreparePush {
                        executor_id: receiver.to_owned(),
                        revision: *planned_at,
                        shards,
                        wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    },
                })
            })
            .collect()
    }

    /// Remembers `requests` as asked, whatever their answers.
    pub fn asked(&mut self, requests: &[PrepareRequest]) {
        if self.asked.len() > MAX_REMEMBERED {
            self.asked.clear();
        }
        for request in requests {
            for shard in &request.push.shards {
                self.asked
                    .insert((shard.shard, shard.epoch, request.push.executor_id.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{Move, Outcome};

    fn state() -> (LeaseState, String, String) {
        let mut state = LeaseState::default();
        let mut index = 0;
        let mut apply = |state: &mut LeaseState, command: &Command| {
            index += 1;
            state.apply(index, command)
        };
        apply(
            &mut state,
            &Command::Init {
                now_ms: 0,
                shard_count: 4,
                lease_duration_ms: 3_000,
            },
        );
        let mut ids = Vec::new();
        for name in ["a", "b"] {
            let Outcome::Registered { grant, .. } = apply(
                &mut state,
                &Command::Register {
                    follows_generations: false,
                    namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                    now_ms: 0,
                    incarnation: name.into(),
                    address: format!("http://{name}.test"),
                    name: None,
                    credential_sha256: None,
                    capacity: 1,
                    app_version: None,
                    labels: Default::default(),
                },
            ) else {
                panic!("registered");
            };
            ids.push(grant.executor_id);
            if ids.len() == 1 {
                let plan = crate::lease::plan_rebalance(&state, 0).unwrap();
                apply(&mut state, &plan);
            }
        }
        (state, ids[0].clone(), ids[1].clone())
    }

    fn plan(state: &LeaseState, moves: &[(u32, &str)]) -> Command {
        Command::Rebalance {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms: 0,
            planned_at: state.revision(),
            moves: moves
                .iter()
                .map(|&(shard, to)| Move {
                    shard,
                    to: to.to_owned(),
                })
                .collect(),
        }
    }

    /// P17.1: a move off a live holder asks its receiver to prepare, for the epoch it will be
    /// granted at, once per term; off a lapsed holder nothing waits.
    #[test]
    fn p17_1_only_handoffs_from_live_holders_wait_and_each_is_asked_once() {
        let (state, a, b) = state();
        let mut prepared = Prepared::default();
        let wait = Duration::from_secs(5);
        let requests = prepared.needed(&state, &plan(&state, &[(0, &b), (1, &b)]), 0, wait);
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].address, "http://b.test");
        assert_eq!(requests[0].push.executor_id, b);
        assert_eq!(
            requests[0].push.shards,
            vec![
                ShardEpoch { shard: 0, epoch: 2 },
                ShardEpoch { shard: 1, epoch: 2 }
            ]
        );
        assert_eq!(requests[0].push.wait_ms, 5_000);
        prepared.asked(&requests);
        assert!(
            prepared
                .needed(&state, &plan(&state, &[(0, &b)]), 0, wait)
                .is_empty(),
            "asked already this term"
        );
        assert!(
            prepared
                .needed(&state, &plan(&state, &[(2, &b)]), 3_002, wait)
                .is_empty(),
            "its holder lapsed: nobody serves it, nothing waits"
        );
        assert!(
            prepared
                .needed(&state, &plan(&state, &[(2, &a)]), 0, wait)
                .is_empty(),
            "a move to its own holder prepares nothing"
        );
        assert!(prepared
            .needed(&state, &Command::CompleteHandoffs { now_ms: 0 }, 0, wait)
            .is_empty());
    }
}
