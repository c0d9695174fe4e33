//! Initialising, lease durations, renewals (P3), reservations (P6.6), deregistration and reaping
//! (P7), and removing an executor with its tombstone.

use super::*;

impl LeaseState {
    /// `Init`: exactly one initialisation, safe to repeat (§10).
    pub(super) fn apply_init(
        &mut self,
        log_index: u64,
        shard_count: u32,
        lease_duration_ms: u64,
    ) -> Outcome {
        if let Some(&existing) = self.config() {
            if existing.shard_count == shard_count
                && existing.lease_duration_ms == lease_duration_ms
            {
                return Outcome::Initialised {
                    config: existing,
                    already_initialised: true,
                };
            }
            return refused(RefusalReason::ConfigConflict { existing });
        }
        if shard_count == 0 || shard_count > MAX_SHARD_COUNT {
            return invalid(format!(
                "shard count {shard_count} is outside 1..={MAX_SHARD_COUNT}"
            ));
        }
        if lease_duration_ms == 0 {
            return invalid("lease duration must be positive");
        }
        let config = ClusterConfig {
            shard_count,
            lease_duration_ms,
        };
        self.namespaces.insert(
            DEFAULT_NAMESPACE.to_owned(),
            Namespace::new(
                config,
                None,
                PlacementOverrides::default(),
                ReplicaSettings::default(),
                0,
                0,
            ),
        );
        self.touch_assignment(log_index, DEFAULT_NAMESPACE);
        Outcome::Initialised {
            config,
            already_initialised: false,
        }
    }

    /// `SetLeaseDuration`: affects grants from now on; existing expiries are kept, since an
    /// executor may already hold them (P3.4).
    pub(super) fn apply_set_lease_duration(
        &mut self,
        log_index: u64,
        config: ClusterConfig,
        lease_duration_ms: u64,
    ) -> Outcome {
        if lease_duration_ms == 0 {
            return invalid("lease duration must be positive");
        }
        let previous_lease_duration_ms = config.lease_duration_ms;
        if previous_lease_duration_ms != lease_duration_ms {
            if let Some(space) = self.namespaces.get_mut(DEFAULT_NAMESPACE) {
                space.config.lease_duration_ms = lease_duration_ms;
            }
            self.touch(log_index);
        }
        Outcome::LeaseDurationSet {
            previous_lease_duration_ms,
            lease_duration_ms,
        }
    }

    /// `Renew`: group-committed renewals. For each known executor: `expiry = max(expiry, now +
    /// lease_duration)` (P3.4: a shorter lease configured since can never shorten a deadline the
    /// executor may already hold); the ttl it is told is recorded (P2.1); and its claims
    /// acknowledge revokes (P5.2). A releasing shard counts as acknowledged only if the claims
    /// omit it AND the renewal's revision is at or after the handoff's revoke revision: claims
    /// read before the executor saw the revoke may predate an assign push still in flight, which
    /// could yet make it admit the shard. A revision beyond this state's is impossible for an
    /// honest executor and acknowledges nothing.
    pub(super) fn apply_renew(
        &mut self,
        log_index: u64,
        now_ms: u64,
        renewals: &[Renewal],
    ) -> Outcome {
        let prior_revision = self.revision;
        // Mismatch is judged against the set recorded before this entry (P4.2), i.e. against
        // what the pushes so far should have delivered.
        let mismatches: Vec<bool> = renewals
            .iter()
            .map(|renewal| {
                !claims_are_exactly(
                    renewal.claims.iter().copied(),
                    self.delivered(&renewal.executor_id),
                )
            })
            .collect();
        let mut effects = EffectsBuilder::default();
        let mut acknowledged_per_renewal: Vec<Vec<ShardId>> = Vec::with_capacity(renewals.len());
        let mut any_known = false;
        let mut acknowledged_in = BTreeSet::new();
        let mut readiness_changed = false;
        for renewal in renewals {
            let renewed = self.renew_one(log_index, renewal, now_ms, prior_revision, &mut effects);
            readiness_changed |= self.record_readiness(log_index, renewal, now_ms);
            let acknowledged = match renewed {
                Some((namespace, acknowledged, completed_any)) => {
                    any_known = true;
                    if completed_any {
                        acknowledged_in.insert(namespace);
                    }
                    acknowledged
                }
                None => Vec::new(),
            };
            acknowledged_per_renewal.push(acknowledged);
        }
        if any_known || readiness_changed {
            self.touch(log_index);
        }
        for namespace in &acknowledged_in {
            self.touch_assignment(log_index, namespace);
        }
        let results = renewals
            .iter()
            .zip(mismatches)
            .zip(acknowledged_per_renewal)
            .map(|((renewal, claims_mismatch), acknowledged)| {
                match self.executors.get(&renewal.executor_id) {
                    Some(executor) => RenewResult::Renewed {
                        grant: self.grant_of(executor, now_ms),
                        claims_mismatch,
                        acknowledged,
                    },
                    None => RenewResult::UnknownExecutor {
                        executor_id: renewal.executor_id.clone(),
                    },
                }
            })
            .collect();
        Outcome::Renewed {
            results,
            effects: effects.finish(self, log_index),
        }
    }

    /// One renewal of a `Renew`: the lease extended as a max (P3.4), the ttl told recorded (P2.1,
    /// P6.1), and the handoffs its claims acknowledge completed (P5.2). `None` for an executor
    /// the state does not know; else its namespace, the shards acknowledged and whether any
    /// handoff completed.
    fn renew_one(
        &mut self,
        log_index: u64,
        renewal: &Renewal,
        now_ms: u64,
        prior_revision: u64,
        effects: &mut EffectsBuilder,
    ) -> Option<(String, Vec<ShardId>, bool)> {
        let executor = self.executors.get_mut(&renewal.executor_id)?;
        // Its namespace's lease (P18.1); the namespace exists while it has executors.
        let lease_duration_ms = self
            .namespaces
            .get(&executor.namespace)
            .map_or(0, |space| space.config.lease_duration_ms);
        let renewed_expiry_ms = now_ms.saturating_add(lease_duration_ms);
        executor.lease_expiry_ms = executor.lease_expiry_ms.max(renewed_expiry_ms);
        executor.lease_ttl_told_ms = executor.lease_remaining_ms(now_ms);
        self.longest_lease_told_ms = self.longest_lease_told_ms.max(executor.lease_ttl_told_ms);
        let namespace = executor.namespace.clone();
        let acknowledged = self.acknowledged_by_claims(renewal, prior_revision);
        let mut completed_any = false;
        for &shard in &acknowledged {
            let at = Entry {
                index: log_index,
                now_ms,
            };
            completed_any |= self.complete_handoff(at, &namespace, shard, effects);
        }
        Some((namespace, acknowledged, completed_any))
    }

    /// Releasing shards of the renewing executor that its claims acknowledge (P5.2), ascending.
    pub(super) fn acknowledged_by_claims(
        &self,
        renewal: &Renewal,
        prior_revision: u64,
    ) -> Vec<ShardId> {
        if renewal.revision > prior_revision {
            return Vec::new();
        }
        let Some(executor) = self.executors.get(&renewal.executor_id) else {
            return Vec::new();
        };
        let Some(space) = self.namespace_of(executor) else {
            return Vec::new();
        };
        // Releasing shards are few and found by index; the claims are searched only for them.
        if space.releasing.is_empty() {
            return Vec::new();
        }
        let releasing: Vec<ShardId> = executor
            .owned_shards
            .iter()
            .copied()
            .filter(|shard| space.releasing.contains(shard))
            .filter(|&shard| {
                space
                    .shard(shard)
                    .and_then(|entry| entry.handoff.as_ref())
                    .is_some_and(|handoff| handoff.revoke_revision <= renewal.revision)
            })
            .collect();
        if releasing.is_empty() {
            return releasing;
        }
        let mut claimed: Vec<ShardId> = renewal.claims.iter().map(|&(shard, _)| shard).collect();
        claimed.sort_unstable();
        releasing
            .into_iter()
            .filter(|shard| claimed.binary_search(shard).is_err())
            .collect()
    }

    /// `Deregister`: a graceful stop (P3.7). The executor stopped admitting before asking, so its
    /// shards become unowned at once and handoffs from it complete at once. A retry finds the
    /// tombstone and succeeds without change; an id never seen is not found (P7.2).
    pub(super) fn apply_deregister(
        &mut self,
        log_index: u64,
        now_ms: u64,
        executor_id: &str,
    ) -> Outcome {
        if let Some(executor) = self.executors.get(executor_id) {
            let namespace = executor.namespace.clone();
            let mut effects = EffectsBuilder::default();
            let freed = self.remove_executor(
                executor_id,
                TombstoneReason::Deregistered,
                log_index,
                now_ms,
                &mut effects,
            );
            self.touch_assignment(log_index, &namespace);
            return Outcome::Deregistered {
                already_gone: false,
                freed,
                effects: effects.finish(self, log_index),
            };
        }
        if self.tombstones.contains_key(executor_id) {
            return Outcome::Deregistered {
                already_gone: true,
                freed: Vec::new(),
                effects: Effects::default(),
            };
        }
        Outcome::NotFound
    }

    /// `Reap`: removes the candidates whose lease has lapsed at the command's `now_ms`, re-checked
    /// here rather than trusted from the proposal (P2.4): one that renewed since is skipped. A
    /// reaped executor's grants have all expired, so its shards become unowned and handoffs from
    /// it complete (P3.8).
    pub(super) fn apply_reap(
        &mut self,
        log_index: u64,
        now_ms: u64,
        executor_ids: &[ExecutorId],
    ) -> Outcome {
        self.reap_where(log_index, now_ms, executor_ids, |_, executor| {
            executor.lease_lapsed(now_ms)
        })
    }

    /// Removes each candidate (in order, each once) that is registered and `lapsed` says has
    /// lapsed, as a reap does (P3.8); the rest are skipped.
    pub(super) fn reap_where(
        &mut self,
        log_index: u64,
        now_ms: u64,
        executor_ids: &[ExecutorId],
        lapsed: impl Fn(usize, &Executor) -> bool,
    ) -> Outcome {
        let mut effects = EffectsBuilder::default();
        let mut reaped = BTreeSet::new();
        let mut reaped_in = BTreeSet::new();
        let mut skipped = Vec::new();
        for (candidate, executor_id) in executor_ids.iter().enumerate() {
            if reaped.contains(executor_id) {
                continue;
            }
            let lapsed_in = self
                .executors
                .get(executor_id)
                .filter(|executor| lapsed(candidate, executor))
                .map(|executor| executor.namespace.clone());
            if let Some(namespace) = lapsed_in {
                reaped_in.insert(namespace);
                self.remove_executor(
                    executor_id,
                    TombstoneReason::Reaped,
                    log_index,
                    now_ms,
                    &mut effects,
                );
                reaped.insert(executor_id.clone());
            } else {
                skipped.push(executor_id.clone());
            }
        }
        for namespace in &reaped_in {
            self.touch_assignment(log_index, namespace);
        }
        Outcome::Reaped {
            reaped: reaped.into_iter().collect(),
            skipped,
            effects: effects.finish(self, log_index),
        }
    }

    /// `ReserveLeases` (P6.6): reserves `LEASE_RESERVATION_LEASES` leases from `now_ms` for each
    /// known executor, never shortening a reservation; tells nothing, so neither the told ttl
    /// nor the longest lease told moves. Unknown ids are skipped (the executor left since).
    pub(super) fn apply_reserve_leases(
        &mut self,
        log_index: u64,
        now_ms: u64,
        executor_ids: &[ExecutorId],
    ) -> Outcome {
        let mut latest_reserved_until_ms = now_ms;
        let mut reserved = Vec::new();
        let mut skipped = Vec::new();
        for executor_id in executor_ids {
            match self.executors.get_mut(executor_id) {
                Some(executor) => {
                    // Leases of its namespace (P18.1).
                    let lease_duration_ms = self
                        .namespaces
                        .get(&executor.namespace)
                        .map_or(0, |space| space.config.lease_duration_ms);
                    let reserved_until_ms = now_ms.saturating_add(
                        lease_duration_ms.saturating_mul(crate::lease::LEASE_RESERVATION_LEASES),
                    );
                    latest_reserved_until_ms = latest_reserved_until_ms.max(reserved_until_ms);
                    executor.lease_reserved_until_ms =
                        executor.lease_reserved_until_ms.max(reserved_until_ms);
                    reserved.push(executor_id.clone());
                }
                None => skipped.push(executor_id.clone()),
            }
        }
        if !reserved.is_empty() {
            self.touch(log_index);
        }
        Outcome::LeasesReserved {
            reserved_until_ms: latest_reserved_until_ms,
            reserved,
            skipped,
        }
    }

    /// `ReapLapsed` (P6.7): removes each candidate whose judged expiry has lapsed at `now_ms` and
    /// is at or after the expiry the log recorded for it. The leader told every copy of its
    /// lease from memory and judged them all ended, so its reservation does not hold it; a grant
    /// the log recorded after the judgment (a renewal through the log, ordered before this entry)
    /// ends after the judged expiry, so it keeps the executor. Otherwise as `Reap` (P3.8).
    pub(super) fn apply_reap_lapsed(
        &mut self,
        log_index: u64,
        now_ms: u64,
        leases: &[LapsedLease],
    ) -> Outcome {
        let executor_ids: Vec<ExecutorId> = leases
            .iter()
            .map(|lease| lease.executor_id.clone())
            .collect();
        self.reap_where(log_index, now_ms, &executor_ids, |candidate, executor| {
            leases.get(candidate).is_some_and(|lease| {
                lease.judged_expiry_ms >= executor.lease_expiry_ms
                    && crate::lease::lapsed(lease.judged_expiry_ms, now_ms)
            })
        })
    }

    /// Removes an executor (deregistered or reaped): shards it owned become unowned, or go to
    /// their secondary ready longest (P19.4), handoffs from it complete (it no longer admits
    /// anything), handoffs to it lose their target, its secondaries are lost (P19.4), and a
    /// tombstone remembers it (P2.1, P7.2). Returns the shards left unowned.
    pub(super) fn remove_executor(
        &mut self,
        executor_id: &str,
        reason: TombstoneReason,
        log_index: u64,
        now_ms: u64,
        effects: &mut EffectsBuilder,
    ) -> Vec<ShardId> {
        let Some(executor) = self.executors.remove(executor_id) else {
            return Vec::new();
        };
        self.by_incarnation.remove(&executor.incarnation);
        let namespace = executor.namespace.as_str();
        let Some(space) = self.namespaces.get_mut(namespace) else {
            // A corrupt state; the tombstone below still remembers it.
            return Vec::new();
        };
        space.members.remove(executor_id);
        space.unpin_from(executor_id);
        space.lose_secondaries_of(&executor, now_ms);
        let (freed, retarget) = space.free_shards_of(&executor);
        space.untarget_handoffs_to(executor_id);
        // A shard left without its primary goes to its secondary ready longest (P19.4): the
        // executor left, or its lease lapsed, so it admits nothing of the shard any more (I1).
        let executors = &self.executors;
        let draining = |id: &str| executors.get(id).is_some_and(|executor| executor.draining);
        let promoted: Vec<(ShardId, ExecutorId)> = freed
            .iter()
            .filter_map(|&shard| Some((shard, space.ready_longest(shard, draining)?)))
            .collect();
        let promoted_shards: BTreeSet<ShardId> = promoted.iter().map(|(shard, _)| *shard).collect();
        let freed: Vec<ShardId> = freed
            .into_iter()
            .filter(|shard| !promoted_shards.contains(shard))
            .collect();
        for (shard, target) in retarget.into_iter().chain(promoted) {
            self.give_to(namespace, shard, &target, effects);
        }
        if let Some(space) = self.namespaces.get_mut(namespace) {
            let at = Entry {
                index: log_index,
                now_ms,
            };
            for &shard in &promoted_shards {
                space.lose_primary(shard, &executor, at);
            }
        }
        self.tombstones.insert(
            executor.id.clone(),
            Tombstone {
                executor_id: executor.id,
                incarnation: executor.incarnation,
                reason,
                removed_revision: log_index,
                removed_at_ms: now_ms,
            },
        );
        self.prune_tombstones();
        freed
    }

    /// Drops the oldest tombstones (by removing entry, then id) beyond [`MAX_TOMBSTONES`].
    pub(super) fn prune_tombstones(&mut self) {
        while self.tombstones.len() > MAX_TOMBSTONES {
            let oldest = self
                .tombstones
                .values()
                .min_by(|a, b| {
                    (a.removed_revision, &a.executor_id).cmp(&(b.removed_revision, &b.executor_id))
                })
                .map(|tombstone| tombstone.executor_id.clone());
            match oldest {
                Some(executor_id) => {
                    self.tombstones.remove(&executor_id);
                }
                None => break,
            }
        }
    }
}

impl Namespace {
    /// A pin goes with its executor: a pin is to one registration.
    fn unpin_from(&mut self, executor_id: &str) {
        let pinned: Vec<ShardId> = self
            .pins
            .iter()
            .filter(|(_, pinned_to)| pinned_to.as_str() == executor_id)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in pinned {
            self.pins.remove(&shard);
        }
    }

    /// Unowns every shard `executor` held: the shards nobody was taking (freed), and those a
    /// handoff was taking to a target, with the target (to be granted to it now).
    fn free_shards_of(
        &mut self,
        executor: &Executor,
    ) -> (Vec<ShardId>, Vec<(ShardId, ExecutorId)>) {
        let mut freed = Vec::new();
        let mut retarget = Vec::new();
        for &shard in &executor.owned_shards {
            let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index))
            else {
                continue;
            };
            entry.owner = None;
            self.releasing.remove(&shard);
            match entry.handoff.take() {
                Some(Handoff {
                    to: Some(target), ..
                }) => retarget.push((shard, target)),
                _ => freed.push(shard),
            }
        }
        (freed, retarget)
    }

    /// Handoffs to `executor_id` lose their target. Found first and then changed one by one: the
    /// shard table shares its structure with earlier copies (a snapshot being written), so
    /// touching every entry would copy it all.
    fn untarget_handoffs_to(&mut self, executor_id: &str) {
        let targeted: Vec<ShardId> = self
            .releasing()
            .filter(|(_, handoff)| handoff.to.as_deref() == Some(executor_id))
            .map(|(entry, _)| entry.id)
            .collect();
        for shard in targeted {
            if let Some(handoff) = shard_index(shard)
                .and_then(|index| self.shards.get_mut(index))
                .and_then(|entry| entry.handoff.as_mut())
            {
                handoff.to = None;
            }
        }
    }
}
