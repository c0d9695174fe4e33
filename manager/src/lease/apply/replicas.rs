//! Secondaries (P19): placed and dropped by the leader's plans, marked ready by their executors'
//! renewals, lost with their executor and given back to it when it returns under its name
//! within the delay, and promoted to primary when the primary's holder leaves.

use super::*;

use crate::lease::{LostReplica, Secondary};

impl LeaseState {
    /// `PlaceSecondaries`: applies the plan only if the namespace's assignment has not changed
    /// since it was made (P2.4), and refuses it whole if any change is malformed: a shard out of
    /// range or named twice, a change that adds and drops nothing or the same executor, a drop
    /// of a secondary the shard lacks, an add onto an executor not registered in the namespace,
    /// onto the shard's owner or handoff target, onto one of its secondaries, or past
    /// [`leasehold_api::wire::MAX_REPLICAS`]. Each placed secondary is pushed to its executor
    /// with its set; each dropped one to its executor, if still registered.
    pub(super) fn apply_place_secondaries(
        &mut self,
        at: Entry,
        planned_at: u64,
        namespace: &str,
        changes: &[SecondaryChange],
    ) -> Outcome {
        if planned_at > self.revision {
            return invalid(format!(
                "secondaries plan claims revision {planned_at}, beyond the state's {}",
                self.revision
            ));
        }
        let Some(space) = self.namespaces.get(namespace) else {
            return invalid(format!(
                "secondaries plan is for namespace {namespace}, which does not exist"
            ));
        };
        if planned_at < space.assignment_revision {
            return refused(RefusalReason::StalePlan {
                planned_at,
                assignment_revision: space.assignment_revision,
            });
        }
        if let Err(detail) = self.check_secondary_changes(namespace, space, changes) {
            return invalid(detail);
        }
        let mut effects = EffectsBuilder::default();
        let mut changed = Vec::with_capacity(changes.len());
        if let Some(space) = self.namespaces.get_mut(namespace) {
            for change in changes {
                if let Some(dropped) = &change.drop {
                    space.drop_secondary(change.shard, dropped);
                    effects.assignments.insert(dropped.clone());
                }
                if let Some(added) = &change.add {
                    space.add_secondary(change.shard, added, at);
                    effects.assignments.insert(added.clone());
                }
                changed.push(change.shard);
            }
        }
        if !changes.is_empty() {
            self.touch_assignment(at.index, namespace);
        }
        Outcome::SecondariesPlaced {
            changed,
            effects: effects.finish(self, at.index),
        }
    }

    /// What is wrong with a plan's changes (see [`LeaseState::apply_place_secondaries`]).
    fn check_secondary_changes(
        &self,
        namespace: &str,
        space: &Namespace,
        changes: &[SecondaryChange],
    ) -> Result<(), String> {
        let most = usize::try_from(leasehold_api::wire::MAX_REPLICAS - 1).unwrap_or(usize::MAX);
        let mut seen = BTreeSet::new();
        for change in changes {
            let shard = change.shard;
            let entry = space
                .shard(shard)
                .ok_or_else(|| format!("secondaries plan names shard {shard}, out of range"))?;
            if !seen.insert(shard) {
                return Err(format!("secondaries plan names shard {shard} twice"));
            }
            if change.add.is_none() && change.drop.is_none() || change.add == change.drop {
                return Err(format!("secondaries plan changes nothing of shard {shard}"));
            }
            if let Some(dropped) = &change.drop {
                if entry.secondary_on(dropped).is_none() {
                    return Err(format!(
                        "secondaries plan drops shard {shard} from {dropped}, which holds none"
                    ));
                }
            }
            let Some(added) = &change.add else {
                continue;
            };
            let member = self
                .executors
                .get(added)
                .is_some_and(|executor| executor.namespace == namespace);
            let target = entry
                .handoff
                .as_ref()
                .and_then(|handoff| handoff.to.as_deref());
            if !member
                || entry.owner.as_deref() == Some(added.as_str())
                || target == Some(added.as_str())
                || entry.secondary_on(added).is_some()
            {
                return Err(format!(
                    "secondaries plan places shard {shard} on {added}: not an executor of \
                     {namespace}, or it holds the shard already"
                ));
            }
            let after = entry.secondaries.len() + 1 - usize::from(change.drop.is_some());
            if after > most {
                return Err(format!(
                    "secondaries plan gives shard {shard} {after} secondaries"
                ));
            }
        }
        Ok(())
    }

    /// The readiness a renewal states (P19.3) recorded for its executor's live secondaries
    /// ([`LeaseState::readiness_after`]) by the entry at `log_index`, which becomes the
    /// namespace's `readiness_revision` when anything changed (the routing table's, P19.5).
    /// Whether anything changed.
    pub(super) fn record_readiness(
        &mut self,
        log_index: u64,
        renewal: &Renewal,
        now_ms: u64,
    ) -> bool {
        let changes = self.readiness_after(renewal, now_ms);
        if changes.is_empty() {
            return false;
        }
        let Some(space) = self
            .executors
            .get(&renewal.executor_id)
            .map(|executor| executor.namespace.clone())
            .and_then(|namespace| self.namespaces.get_mut(&namespace))
        else {
            return false;
        };
        for (shard, ready_since_ms) in changes {
            if let Some(secondary) = shard_index(shard)
                .and_then(|index| space.shards.get_mut(index))
                .and_then(|entry| {
                    entry
                        .secondaries
                        .iter_mut()
                        .find(|secondary| secondary.executor == renewal.executor_id)
                })
            {
                secondary.ready_since_ms = ready_since_ms;
            }
        }
        space.readiness_revision = log_index;
        true
    }
}

impl LeaseState {
    /// What `renewal`'s readiness (P19.3) changes at `now_ms`, for each of its executor's live
    /// secondaries whose readiness it changes: one it names becomes ready if the renewal had
    /// applied the set that placed it (its revision reaches the placement, so a renewal sent
    /// before a secondary was dropped and placed again does not vouch for the new copy) and
    /// names the shard's current epoch; one ready already stays ready while it is named, across
    /// a change of primary; one it does not name is ready no longer. Empty when nothing changes,
    /// which is when a leader may answer the renewal from memory (P6.5).
    pub fn readiness_after(&self, renewal: &Renewal, now_ms: u64) -> Vec<(ShardId, Option<u64>)> {
        let Some(namespace) = self
            .executors
            .get(&renewal.executor_id)
            .and_then(|executor| self.namespace_of(executor))
        else {
            return Vec::new();
        };
        let said: BTreeMap<ShardId, Epoch> = renewal.ready.iter().copied().collect();
        namespace
            .secondaries_of(&renewal.executor_id)
            .filter_map(|shard| {
                let entry = namespace.shard(shard)?;
                let secondary = entry.secondary_on(&renewal.executor_id)?;
                let ready = match (said.get(&shard), secondary.ready_since_ms) {
                    (None, _) => None,
                    (Some(_), Some(since_ms)) => Some(since_ms),
                    (Some(&said_epoch), None) => (said_epoch == entry.epoch
                        && renewal.revision >= secondary.placed_revision)
                        .then_some(now_ms),
                };
                (ready != secondary.ready_since_ms).then_some((shard, ready))
            })
            .collect()
    }
}

impl Namespace {
    /// Places a secondary of `shard` on `executor_id` by the entry `at`, not ready.
    pub(super) fn add_secondary(&mut self, shard: ShardId, executor_id: &str, at: Entry) {
        let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index)) else {
            return;
        };
        entry.secondaries.push(Secondary {
            executor: executor_id.to_owned(),
            ready_since_ms: None,
            placed_revision: at.index,
            placed_at_ms: at.now_ms,
            lost: None,
        });
        self.secondaries_of
            .entry(executor_id.to_owned())
            .or_default()
            .insert(shard);
    }

    /// `executor` left by the entry `at` while primary of `shard`, whose primary went to a
    /// secondary (P19.4): its replica waits, lost, in the promoted secondary's place, as its
    /// secondaries do, so the shard keeps its count of replicas, nothing is placed elsewhere
    /// before the restore delay, and an executor of its name back within the delay takes the
    /// replica back as a secondary.
    pub(super) fn lose_primary(&mut self, shard: ShardId, executor: &Executor, at: Entry) {
        let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index)) else {
            return;
        };
        entry.secondaries.push(Secondary {
            executor: executor.id.clone(),
            ready_since_ms: None,
            placed_revision: at.index,
            placed_at_ms: at.now_ms,
            lost: Some(LostReplica {
                since_ms: at.now_ms,
                name: executor.name.clone(),
            }),
        });
        self.with_lost.insert(shard);
    }

    /// Drops `shard`'s secondary on `executor_id`, lost or not; whether there was one.
    pub(super) fn drop_secondary(&mut self, shard: ShardId, executor_id: &str) -> bool {
        let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index)) else {
            return false;
        };
        let Some(position) = entry
            .secondaries
            .iter()
            .position(|secondary| secondary.executor == executor_id)
        else {
            return false;
        };
        let dropped = entry.secondaries.remove(position);
        let still_lost = entry.secondaries.iter().any(|s| s.lost.is_some());
        if dropped.lost.is_none() {
            self.forget_secondary(executor_id, shard);
        } else if !still_lost {
            self.with_lost.remove(&shard);
        }
        true
    }

    /// Removes `shard` from `executor_id`'s live secondaries in the index.
    fn forget_secondary(&mut self, executor_id: &str, shard: ShardId) {
        if let Some(shards) = self.secondaries_of.get_mut(executor_id) {
            shards.remove(&shard);
            if shards.is_empty() {
                self.secondaries_of.remove(executor_id);
            }
        }
    }

    /// The secondaries of `executor`, which left at `now_ms`, are lost (P19.4): each waits out
    /// the restore delay for an executor of its name.
    pub(super) fn lose_secondaries_of(&mut self, executor: &Executor, now_ms: u64) {
        let Some(shards) = self.secondaries_of.remove(&executor.id) else {
            return;
        };
        for shard in shards {
            let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index))
            else {
                continue;
            };
            for secondary in &mut entry.secondaries {
                if secondary.executor == executor.id {
                    secondary.ready_since_ms = None;
                    secondary.lost = Some(LostReplica {
                        since_ms: now_ms,
                        name: executor.name.clone(),
                    });
                }
            }
            self.with_lost.insert(shard);
        }
    }

    /// An executor registered as `executor_id` under `name` at `now_ms`, by the entry at
    /// `log_index`, takes back the secondaries lost by an executor of that name within the
    /// restore delay (P19.4), not ready until it says so. Whether it took any.
    pub(super) fn restore_secondaries(
        &mut self,
        name: &str,
        executor_id: &str,
        now_ms: u64,
        log_index: u64,
    ) -> bool {
        let delay_ms = self
            .replication
            .restore_delay_ms(self.config.lease_duration_ms);
        let candidates: Vec<ShardId> = self.with_lost.iter().copied().collect();
        let mut restored = false;
        for shard in candidates {
            let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index))
            else {
                continue;
            };
            let mut took = false;
            for secondary in &mut entry.secondaries {
                let within = secondary.lost.as_ref().is_some_and(|lost| {
                    lost.name.as_deref() == Some(name)
                        && now_ms <= lost.since_ms.saturating_add(delay_ms)
                });
                if within && !took {
                    secondary.executor = executor_id.to_owned();
                    secondary.lost = None;
                    secondary.ready_since_ms = None;
                    secondary.placed_revision = log_index;
                    secondary.placed_at_ms = now_ms;
                    took = true;
                }
            }
            if took {
                restored = true;
                if !entry.secondaries.iter().any(|s| s.lost.is_some()) {
                    self.with_lost.remove(&shard);
                }
                self.secondaries_of
                    .entry(executor_id.to_owned())
                    .or_default()
                    .insert(shard);
            }
        }
        restored
    }

    /// The secondary of `shard` a primary goes to when its holder leaves (P19.4): the live one
    /// ready longest, one whose executor is not `draining` first (a draining one would hand the
    /// primary on again), the earliest placed among equals; `None` when none is ready.
    pub(super) fn ready_longest(
        &self,
        shard: ShardId,
        draining: impl Fn(&str) -> bool,
    ) -> Option<ExecutorId> {
        let ready = self.shard(shard)?.ready_longest_first();
        ready
            .iter()
            .find(|secondary| !draining(&secondary.executor))
            .or(ready.first())
            .map(|secondary| secondary.executor.clone())
    }
}
