//! Plans, moves, drains and the release-then-grant handoff (P5).

use super::*;

/// What one move of a plan did to its shard.
pub(super) enum Applied {
    /// Unowned, now its target's.
    Granted,
    /// Releasing to its target: a handoff started, or one under way retargeted.
    Releasing,
    /// Releasing no more: the handoff cancelled, the owner keeps it.
    Cancelled,
}

impl LeaseState {
    /// `Rebalance`: applies a plan only if the assignment has not changed since the revision it
    /// was planned on, and refuses it whole otherwise (P2.4, P5.1); a malformed plan is refused
    /// whole too. Epochs are minted in this same write (P5.1). Per move:
    /// - an unowned shard is granted at once, epoch + 1 (I2);
    /// - an owned shard is marked releasing (P5.2): it leaves the owner's delivered set now, a
    ///   revoke is pushed, and the target gets it only on acknowledgement or when the owner's
    ///   current grant (its expiry at this instant) has run out (at once if it already has: the
    ///   planner never moves a lapsed owner's shards, but a plan may commit just after a lapse);
    /// - a releasing shard moved to another target is retargeted (the revoke already sent still
    ///   stands, and the target has not seen the shard);
    /// - a releasing shard moved back to its old owner cancels the handoff: the owner keeps the
    ///   shard at the same epoch, since no one else held it in between.
    ///
    /// A plan is for one namespace's shards and executors (P18.1): stale only if that namespace's
    /// assignment changed since, and refused whole if it names an executor of another.
    pub(super) fn apply_rebalance(
        &mut self,
        log_index: u64,
        now_ms: u64,
        planned_at: u64,
        namespace: &str,
        moves: &[Move],
    ) -> Outcome {
        if planned_at > self.revision {
            return invalid(format!(
                "plan claims revision {planned_at}, beyond the state's {}",
                self.revision
            ));
        }
        let Some(space) = self.namespaces.get(namespace) else {
            return invalid(format!(
                "plan is for namespace {namespace}, which does not exist"
            ));
        };
        if planned_at < space.assignment_revision {
            return refused(RefusalReason::StalePlan {
                planned_at,
                assignment_revision: space.assignment_revision,
            });
        }
        if let Err(refusal) = self.check_moves(namespace, space, moves) {
            return refusal;
        }
        let mut effects = EffectsBuilder::default();
        let mut granted = BTreeSet::new();
        let mut releasing = BTreeSet::new();
        let mut cancelled = BTreeSet::new();
        for step in moves {
            let shards = match self.apply_move(log_index, now_ms, namespace, step, &mut effects) {
                Some(Applied::Granted) => &mut granted,
                Some(Applied::Releasing) => &mut releasing,
                Some(Applied::Cancelled) => &mut cancelled,
                None => continue,
            };
            shards.insert(step.shard);
        }
        if !moves.is_empty() {
            self.touch_assignment(log_index, namespace);
        }
        Outcome::Rebalanced {
            granted: granted.into_iter().collect(),
            releasing: releasing.into_iter().collect(),
            cancelled: cancelled.into_iter().collect(),
            effects: effects.finish(self, log_index),
        }
    }

    /// One checked move of a plan: an unowned shard is granted at once; an owned one starts its
    /// handoff, bounded by the owner's lease (P5.2); a releasing one goes back to its owner
    /// (the handoff cancelled) or on to another target. `None` for a shard not in the table.
    pub(super) fn apply_move(
        &mut self,
        log_index: u64,
        now_ms: u64,
        namespace: &str,
        step: &Move,
        effects: &mut EffectsBuilder,
    ) -> Option<Applied> {
        let index = shard_index(step.shard)?;
        let entry = self
            .namespaces
            .get(namespace)
            .and_then(|space| space.shards.get(index))?;
        let applied = match (entry.owner.clone(), entry.handoff.is_some()) {
            (None, _) => {
                self.give_to(namespace, step.shard, &step.to, effects);
                Applied::Granted
            }
            (Some(owner), false) => {
                // The owner's lease bound (its expiry, or its reservation for copies told from
                // memory, P6.6) bounds every copy it was told that included the shard; an owner
                // missing would be a corrupt state, and then nothing bounds a grant beyond now.
                let from_grant_expiry_ms = self
                    .executors
                    .get(&owner)
                    .map_or(now_ms, Executor::lease_bound_ms);
                if let Some(space) = self.namespaces.get_mut(namespace) {
                    if let Some(entry) = space.shards.get_mut(index) {
                        entry.handoff = Some(Handoff {
                            to: Some(step.to.clone()),
                            revoke_revision: log_index,
                            from_grant_expiry_ms,
                        });
                        space.releasing.insert(step.shard);
                    }
                }
                effects.revokes.entry(owner).or_default().insert(step.shard);
                Applied::Releasing
            }
            (Some(owner), true) if owner == step.to => {
                if let Some(space) = self.namespaces.get_mut(namespace) {
                    if let Some(entry) = space.shards.get_mut(index) {
                        entry.handoff = None;
                        space.releasing.remove(&step.shard);
                    }
                }
                effects.assignments.insert(owner);
                Applied::Cancelled
            }
            (Some(_), true) => {
                if let Some(handoff) = self
                    .namespaces
                    .get_mut(namespace)
                    .and_then(|space| space.shards.get_mut(index))
                    .and_then(|entry| entry.handoff.as_mut())
                {
                    handoff.to = Some(step.to.clone());
                }
                Applied::Releasing
            }
        };
        Some(applied)
    }

    /// `SetDraining`: flips an executor's draining flag. A change counts as an assignment change,
    /// so a plan computed before it (which may target the executor) is refused as stale (P2.4).
    /// Nothing moves here: the leader's next plan moves the shards (P5.4, P5.2). An unknown id is
    /// not found.
    pub(super) fn apply_set_draining(
        &mut self,
        log_index: u64,
        executor_id: &str,
        draining: bool,
    ) -> Outcome {
        let Some(executor) = self.executors.get_mut(executor_id) else {
            return Outcome::NotFound;
        };
        let changed = executor.draining != draining;
        if changed {
            executor.draining = draining;
            let namespace = executor.namespace.clone();
            self.touch_assignment(log_index, &namespace);
        }
        Outcome::DrainingSet {
            executor_id: executor_id.to_owned(),
            draining,
            changed,
        }
    }

    /// Refuses a plan that names a shard out of range or twice, an unknown target, a target of
    /// another namespace (P18.2), or a move that would change nothing (the planner never makes
    /// one; it signals a plan for another state).
    pub(super) fn check_moves(
        &self,
        namespace: &str,
        space: &Namespace,
        moves: &[Move],
    ) -> Result<(), Outcome> {
        let mut seen = BTreeSet::new();
        for step in moves {
            let Some(entry) = space.shard(step.shard) else {
                return Err(invalid(format!(
                    "plan moves shard {}, which is out of range",
                    step.shard
                )));
            };
            if !seen.insert(step.shard) {
                return Err(invalid(format!("plan moves shard {} twice", step.shard)));
            }
            match self.executors.get(&step.to) {
                None => {
                    return Err(invalid(format!(
                        "plan moves shard {} to unknown executor {}",
                        step.shard, step.to
                    )))
                }
                // One namespace's shards go to its own executors only (P18.2): I1 and the
                // epochs hold per namespace, so a shard of one is nothing to another.
                Some(target) if target.namespace != namespace => {
                    return Err(invalid(format!(
                        "plan moves shard {} of {namespace} to executor {} of namespace {}",
                        step.shard, step.to, target.namespace
                    )))
                }
                // The planner never targets a draining executor; a plan that does was made for
                // another state.
                Some(target) if target.draining => {
                    return Err(invalid(format!(
                        "plan moves shard {} to draining executor {}",
                        step.shard, step.to
                    )))
                }
                Some(_) => {}
            }
            let already_there = match (&entry.owner, &entry.handoff) {
                (Some(owner), None) => *owner == step.to,
                (_, Some(handoff)) => handoff.to.as_ref() == Some(&step.to),
                (None, None) => false,
            };
            if already_there {
                return Err(invalid(format!(
                    "plan moves shard {} to {}, which already has or receives it",
                    step.shard, step.to
                )));
            }
        }
        Ok(())
    }

    /// `Release`: an acknowledgement of a revoke. It counts only for shards whose current handoff
    /// is exactly the one it names (this shard, this old owner, this revoke revision); anything
    /// else answers a handoff that is no longer current and is ignored (P5.2). A valid one hands
    /// the shard to its target at epoch + 1, or leaves it unowned if the target has left.
    pub(super) fn apply_release(
        &mut self,
        at: Entry,
        executor_id: &str,
        shards: &[ShardId],
        revoke_revision: u64,
    ) -> Outcome {
        let Some(executor) = self.executors.get(executor_id) else {
            return Outcome::NotFound;
        };
        // The shards it names are its own namespace's (P18.2).
        let namespace = executor.namespace.clone();
        let named: BTreeSet<ShardId> = shards.iter().copied().collect();
        let mut effects = EffectsBuilder::default();
        let mut completed = Vec::new();
        let mut ignored = Vec::new();
        for shard in named {
            let current = self
                .namespaces
                .get(&namespace)
                .and_then(|space| space.shard(shard))
                .is_some_and(|entry| {
                    entry.owner.as_deref() == Some(executor_id)
                        && entry
                            .handoff
                            .as_ref()
                            .is_some_and(|handoff| handoff.revoke_revision == revoke_revision)
                });
            if current && self.complete_handoff(at, &namespace, shard, &mut effects) {
                completed.push(shard);
            } else {
                ignored.push(shard);
            }
        }
        if !completed.is_empty() {
            self.touch_assignment(at.index, &namespace);
        }
        Outcome::Released {
            completed,
            ignored,
            effects: effects.finish(self, at.index),
        }
    }

    /// `CompleteHandoffs`: hands on every releasing shard, in every namespace, whose old
    /// owner's last grant including it has expired at the command's `now_ms` (P5.2), re-checked
    /// here (P2.4). The outcome lists `default`'s shards; every namespace's completions push.
    pub(super) fn apply_complete_handoffs(&mut self, log_index: u64, now_ms: u64) -> Outcome {
        let due: Vec<(String, ShardId)> = self
            .releasing_everywhere()
            .filter(|(_, _, handoff)| crate::lease::lapsed(handoff.from_grant_expiry_ms, now_ms))
            .map(|(namespace, entry, _)| (namespace.to_owned(), entry.id))
            .collect();
        let mut effects = EffectsBuilder::default();
        let mut completed = Vec::new();
        let mut completed_in = BTreeSet::new();
        for (namespace, shard) in due {
            let at = Entry {
                index: log_index,
                now_ms,
            };
            if self.complete_handoff(at, &namespace, shard, &mut effects) {
                if namespace == DEFAULT_NAMESPACE {
                    completed.push(shard);
                }
                completed_in.insert(namespace);
            }
        }
        for namespace in &completed_in {
            self.touch_assignment(log_index, namespace);
        }
        Outcome::HandoffsCompleted {
            completed,
            effects: effects.finish(self, log_index),
        }
    }

    /// Ends a handoff: the shard leaves its old owner and goes to the target (epoch + 1), or is
    /// left unowned if the target has gone. Returns false if the shard was not releasing.
    pub(super) fn complete_handoff(
        &mut self,
        at: Entry,
        namespace: &str,
        shard: ShardId,
        effects: &mut EffectsBuilder,
    ) -> bool {
        let Some(space) = self.namespaces.get_mut(namespace) else {
            return false;
        };
        let Some(entry) = shard_index(shard).and_then(|index| space.shards.get_mut(index)) else {
            return false;
        };
        let Some(handoff) = entry.handoff.take() else {
            return false;
        };
        let old_owner = entry.owner.take();
        let promoted = handoff
            .to
            .as_deref()
            .is_some_and(|target| entry.secondary_on(target).is_some());
        space.releasing.remove(&shard);
        if let Some(old_owner) = &old_owner {
            if let Some(executor) = self.executors.get_mut(old_owner) {
                executor.owned_shards.remove(&shard);
            }
        }
        if let Some(target) = handoff.to {
            self.give_to(namespace, shard, &target, effects);
        }
        // A primary handed to a secondary leaves its old holder a secondary in its place, so
        // the shard keeps its replicas and nothing is copied (P19.3); the plans move it on if
        // it should not stay.
        if let (true, Some(old_owner)) = (promoted, old_owner) {
            let registered = self
                .executors
                .get(&old_owner)
                .is_some_and(|executor| executor.namespace == namespace);
            if let Some(space) = self.namespaces.get_mut(namespace).filter(|_| registered) {
                space.add_secondary(shard, &old_owner, at);
                effects.assignments.insert(old_owner);
            }
        }
        true
    }

    /// Gives an unowned shard to `new_owner` with a new epoch (I2: the epoch advances when and
    /// only when the shard gets a new owner) and queues a push of the owner's set. Leaves the
    /// shard unowned if `new_owner` is not registered in the shard's namespace.
    pub(super) fn give_to(
        &mut self,
        namespace: &str,
        shard: ShardId,
        new_owner: &ExecutorId,
        effects: &mut EffectsBuilder,
    ) {
        let Some(space) = self.namespaces.get_mut(namespace) else {
            return;
        };
        let Some(entry) = shard_index(shard).and_then(|index| space.shards.get_mut(index)) else {
            return;
        };
        let Some(executor) = self
            .executors
            .get_mut(new_owner)
            .filter(|executor| executor.namespace == namespace)
        else {
            return;
        };
        executor.owned_shards.insert(shard);
        entry.owner = Some(new_owner.clone());
        entry.epoch = entry.epoch.saturating_add(1);
        entry.handoff = None;
        space.releasing.remove(&shard);
        // A secondary granted the primary is promoted (P19.3, P19.4): it is no longer one.
        space.drop_secondary(shard, new_owner);
        effects.assignments.insert(new_owner.clone());
    }
}
