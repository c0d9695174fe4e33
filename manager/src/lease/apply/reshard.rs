//! Resharding (P20): an operator asks for a namespace's shard count to double or halve, and the
//! leader carries it out in one entry once the namespace is ready for it. Every key keeps at
//! most one owner throughout (I1 per key): a split gives both children to their parent's owner,
//! a merge joins two shards only once they are on one executor, and both raise the epoch of
//! every owned shard they touch above every epoch its keys were held at (I2 per key).

use leasehold_api::wire::{check_reshard, ReshardKind};

use super::*;
use crate::lease::state::PendingReshard;
use crate::lease::{Secondary, Shard};

impl LeaseState {
    /// An operator's reshard (P20.1): records it as under way, for the leader to carry out. A
    /// repeat of the one under way, or of one done (the namespace already has `shard_count`
    /// shards and none is under way), changes nothing. Refused (nothing changes) for a count
    /// other than twice or half the current one, while another is under way, while an executor
    /// in the namespace does not follow a change of layout (it would go on mapping keys by the
    /// old count, I1), for a split past the cluster's shard quota (counting the splits under
    /// way), and for a merge of two shards pinned to different executors (no plan could bring
    /// them together).
    pub(super) fn apply_request_reshard(
        &mut self,
        log_index: u64,
        name: &str,
        shard_count: u32,
    ) -> Outcome {
        let Some(space) = self.namespaces.get(name) else {
            return refused(RefusalReason::UnknownNamespace {
                namespace: name.to_owned(),
            });
        };
        let current = space.config.shard_count;
        match space.reshard {
            Some(pending) if pending.shard_count == shard_count => {
                return Outcome::ReshardRequested {
                    name: name.to_owned(),
                    changed: false,
                };
            }
            Some(pending) => {
                return refused(RefusalReason::Conflict {
                    detail: format!(
                        "namespace {name} is already resharding from {current} to {} shards: \
                         wait until it is done (P20.1)",
                        pending.shard_count
                    ),
                });
            }
            None if shard_count == current => {
                return Outcome::ReshardRequested {
                    name: name.to_owned(),
                    changed: false,
                };
            }
            None => {}
        }
        let kind = match check_reshard(current, shard_count) {
            Ok(kind) => kind,
            Err(error) => return invalid(error.to_string()),
        };
        if let Some(detail) = self.executors_not_following(name) {
            return refused(RefusalReason::Conflict { detail });
        }
        if kind == ReshardKind::Split {
            let reserved: u64 = self
                .namespaces
                .values()
                .map(Namespace::reserved_shard_count)
                .sum();
            let more = u64::from(current);
            if reserved.saturating_add(more) > MAX_TOTAL_SHARDS {
                return refused(RefusalReason::Conflict {
                    detail: format!(
                        "the namespaces hold {reserved} shards; a split of {name} adds {more}, \
                         past the cluster's {MAX_TOTAL_SHARDS} (P20.1)"
                    ),
                });
            }
        }
        if kind == ReshardKind::Merge {
            if let Some((shard, partner)) = space.pairs_pinned_apart(shard_count) {
                return refused(RefusalReason::Conflict {
                    detail: format!(
                        "shards {shard} and {partner} of {name} are pinned to different \
                         executors and would merge into one: unpin one first (P20.2)"
                    ),
                });
            }
        }
        if let Some(space) = self.namespaces.get_mut(name) {
            space.reshard = Some(PendingReshard {
                kind,
                shard_count,
                requested_revision: log_index,
            });
        }
        // Plans made before it would start handoffs a split waits for, or part pairs a merge
        // brings together (P2.4).
        self.touch_assignment(log_index, name);
        Outcome::ReshardRequested {
            name: name.to_owned(),
            changed: true,
        }
    }

    /// Why the executors of `name` cannot follow a reshard: the first few that did not say they
    /// follow a change of layout (P20.3); `None` when all do.
    fn executors_not_following(&self, name: &str) -> Option<String> {
        let not_following: Vec<&str> = self
            .executors_in(name)
            .filter(|executor| !executor.follows_generations)
            .map(|executor| executor.id.as_str())
            .collect();
        if not_following.is_empty() {
            return None;
        }
        let shown: Vec<&str> = not_following.iter().take(5).copied().collect();
        Some(format!(
            "{} executor(s) of namespace {name} do not follow a change of layout ({}{}): upgrade \
             them, or remove them, before resharding (P20.3)",
            not_following.len(),
            shown.join(", "),
            if not_following.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        ))
    }

    /// `Reshard` (P20.2): carries out the namespace's reshard under way, re-checking at apply
    /// time that it is ready ([`Namespace::reshard_waiting_on`] is 0) and that every executor
    /// in it follows a change of layout; refused, changing nothing, otherwise. Every executor of
    /// the namespace is sent its set in the new layout.
    pub(super) fn apply_reshard(&mut self, at: Entry, name: &str) -> Outcome {
        let Some(space) = self.namespaces.get(name) else {
            return refused(RefusalReason::UnknownNamespace {
                namespace: name.to_owned(),
            });
        };
        let Some(pending) = space.reshard else {
            return refused(RefusalReason::Conflict {
                detail: format!("namespace {name} has no reshard under way"),
            });
        };
        let waiting_on = space.reshard_waiting_on();
        if waiting_on > 0 {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "namespace {name}'s reshard still waits on {waiting_on} shard(s) (P20.2)"
                ),
            });
        }
        if let Some(detail) = self.executors_not_following(name) {
            return refused(RefusalReason::Conflict { detail });
        }
        let moved = match pending.kind {
            ReshardKind::Split => self.split(at, name),
            ReshardKind::Merge => self.merge(at, name),
        };
        let mut effects = EffectsBuilder::default();
        let members: Vec<ExecutorId> = self
            .executors_in(name)
            .map(|executor| executor.id.clone())
            .collect();
        for (executor_id, shards) in moved {
            if let Some(executor) = self.executors.get_mut(&executor_id) {
                executor.owned_shards = shards;
            }
        }
        effects.assignments.extend(members);
        let Some(space) = self.namespaces.get_mut(name) else {
            return Outcome::Nothing;
        };
        space.generation = space.generation.saturating_add(1);
        space.widest_shard_count =
            space
                .widest_shard_count
                .max(pending.shard_count)
                .max(match pending.kind {
                    ReshardKind::Split => pending.shard_count / 2,
                    ReshardKind::Merge => pending.shard_count * 2,
                });
        space.reshard = None;
        space.rebuild_shard_indexes();
        let (shard_count, generation) = (space.config.shard_count, space.generation);
        self.touch_assignment(at.index, name);
        Outcome::Resharded {
            name: name.to_owned(),
            kind: pending.kind,
            shard_count,
            generation,
            effects: effects.finish(self, at.index),
        }
    }

    /// A split of `name` (P20.2): shard `s` of `N` becomes `s` and `s + N`, both with the
    /// parent's owner at its epoch + 1 (an unowned parent's children stay unowned at its epoch,
    /// the next owner's being above it), its pin, and its secondaries placed again by this
    /// entry, not ready until their executors say so of the children. Returns each owner's set
    /// in the new layout.
    fn split(&mut self, at: Entry, name: &str) -> BTreeMap<ExecutorId, imbl::OrdSet<ShardId>> {
        let mut owned: BTreeMap<ExecutorId, imbl::OrdSet<ShardId>> = BTreeMap::new();
        let Some(space) = self.namespaces.get_mut(name) else {
            return owned;
        };
        let count = space.config.shard_count;
        let mut children = Vec::with_capacity(space.shards.len() * 2);
        for half in [0, count] {
            for parent in &space.shards {
                let shard = parent.id + half;
                let epoch = parent.epoch + u64::from(parent.owner.is_some());
                if let Some(owner) = &parent.owner {
                    owned.entry(owner.clone()).or_default().insert(shard);
                }
                children.push(Shard {
                    id: shard,
                    owner: parent.owner.clone(),
                    epoch,
                    handoff: None,
                    secondaries: placed_again(&parent.secondaries, at),
                });
            }
        }
        space.shards = children.into_iter().collect();
        let pins: Vec<(ShardId, ExecutorId)> = space
            .pins
            .iter()
            .map(|(shard, executor)| (shard + count, executor.clone()))
            .collect();
        space.pins.extend(pins);
        space.config.shard_count = count * 2;
        owned
    }

    /// A merge of `name` (P20.2): shards `s` and `s + N / 2` of `N` become shard `s`, with their
    /// common owner at an epoch above both of theirs (unowned pairs stay unowned at the higher
    /// of their epochs), either's pin (they agree, or only one has one), and the secondaries of
    /// `s` placed again by this entry, not ready until their executors say so of the merged
    /// shard. Returns each owner's set in the new layout.
    fn merge(&mut self, at: Entry, name: &str) -> BTreeMap<ExecutorId, imbl::OrdSet<ShardId>> {
        let mut owned: BTreeMap<ExecutorId, imbl::OrdSet<ShardId>> = BTreeMap::new();
        let Some(space) = self.namespaces.get_mut(name) else {
            return owned;
        };
        let half = space.config.shard_count / 2;
        let mut merged = Vec::with_capacity(space.shards.len() / 2);
        for (low, high) in space
            .shards
            .iter()
            .zip(space.shards.iter().skip(half as usize))
        {
            let epoch = low.epoch.max(high.epoch) + u64::from(low.owner.is_some());
            if let Some(owner) = &low.owner {
                owned.entry(owner.clone()).or_default().insert(low.id);
            }
            merged.push(Shard {
                id: low.id,
                owner: low.owner.clone(),
                epoch,
                handoff: None,
                secondaries: placed_again(&low.secondaries, at),
            });
        }
        space.shards = merged.into_iter().collect();
        let high_pins: Vec<(ShardId, ExecutorId)> = space
            .pins
            .iter()
            .filter(|(shard, _)| **shard >= half)
            .map(|(shard, executor)| (*shard, executor.clone()))
            .collect();
        for (shard, executor) in high_pins {
            space.pins.remove(&shard);
            space.pins.entry(shard - half).or_insert(executor);
        }
        space.config.shard_count = half;
        owned
    }
}

/// `secondaries` of a parent (or of the lower shard of a merged pair), placed again on the same
/// executors by the entry `at`: a warm copy of the old layout's shard is not a ready copy of
/// the new one until its executor says so, at the new epoch, having applied a set of the new
/// layout (P19.3). Lost ones stay lost, with their delay running.
fn placed_again(secondaries: &[Secondary], at: Entry) -> Vec<Secondary> {
    secondaries
        .iter()
        .map(|secondary| Secondary {
            ready_since_ms: None,
            placed_revision: at.index,
            placed_at_ms: at.now_ms,
            ..secondary.clone()
        })
        .collect()
}
