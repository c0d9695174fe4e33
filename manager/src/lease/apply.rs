//! Applying committed commands (P2.2, P2.4, P3, P4.4, P5, P7.2).
//!
//! Each handler either refuses without touching anything, or changes the state and stamps the
//! entry's log index as the revision (and as the assignment revision when owners, handoffs or
//! membership changed). Times are saturating: no input can overflow or panic.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::{
    check_app_version, check_capacity, check_labels, Labels, MAX_ACTOR_BYTES, MAX_AUDIT_RECORDS,
};

use super::{
    AuditRecord, ClusterConfig, Command, Effects, Epoch, Executor, ExecutorId, Grant, Handoff,
    LapsedLease, LeaseState, Move, OperatorAction, Outcome, RefusalReason, RegisterResult,
    Registration, RenewResult, Renewal, Revoke, Shard, ShardId, Tombstone, TombstoneReason,
    MAX_SHARD_COUNT, MAX_TEXT_FIELD_BYTES, MAX_TOMBSTONES,
};

/// Pushes collected while one command applies, turned into [`Effects`] at the end.
#[derive(Debug, Default)]
struct EffectsBuilder {
    revokes: BTreeMap<ExecutorId, BTreeSet<ShardId>>,
    assignments: BTreeSet<ExecutorId>,
}

impl EffectsBuilder {
    /// Keeps only executors still present when the command finished applying (one removed later
    /// in the same command needs no push), and stamps revokes with the entry's log index.
    fn finish(self, state: &LeaseState, log_index: u64) -> Effects {
        let revokes = self
            .revokes
            .into_iter()
            .filter(|(executor_id, shards)| {
                !shards.is_empty() && state.executors.contains_key(executor_id)
            })
            .map(|(executor_id, shards)| Revoke {
                executor_id,
                shards: shards.into_iter().collect(),
                revision: log_index,
            })
            .collect();
        let assignments = self
            .assignments
            .into_iter()
            .filter(|executor_id| state.executors.contains_key(executor_id))
            .collect();
        Effects {
            revokes,
            assignments,
        }
    }
}

fn refused(reason: RefusalReason) -> Outcome {
    Outcome::Refused { reason }
}

fn invalid(detail: impl Into<String>) -> Outcome {
    refused(invalid_reason(detail))
}

fn shard_index(shard: ShardId) -> Option<usize> {
    usize::try_from(shard).ok()
}

fn invalid_reason(detail: impl Into<String>) -> RefusalReason {
    RefusalReason::Invalid {
        detail: detail.into(),
    }
}

/// Whether `claims` are exactly `set` (ascending, as the state records it), with set semantics.
/// Claims from our executor are ascending too and are compared as they are, with no copy; claims
/// in another order or repeated are sorted and deduplicated first.
pub fn claims_are_exactly<C>(claims: C, set: impl IntoIterator<Item = (ShardId, Epoch)>) -> bool
where
    C: IntoIterator<Item = (ShardId, Epoch)>,
    C::IntoIter: Clone,
{
    let claims = claims.into_iter();
    if claims.clone().is_sorted_by(|a, b| a < b) {
        claims.eq(set)
    } else {
        let mut claimed: Vec<(ShardId, Epoch)> = claims.collect();
        claimed.sort_unstable();
        claimed.dedup();
        claimed.into_iter().eq(set)
    }
}

/// Checks a `Register` text field: present when required, and bounded (I6).
fn check_text_field(field: &str, value: &str, required: bool) -> Result<(), RefusalReason> {
    if required && value.is_empty() {
        return Err(invalid_reason(format!("{field} must not be empty")));
    }
    if value.len() > MAX_TEXT_FIELD_BYTES {
        return Err(invalid_reason(format!(
            "{field} is {} bytes, at most {MAX_TEXT_FIELD_BYTES} allowed",
            value.len()
        )));
    }
    Ok(())
}

/// What a `Register`, or one registration of a `RegisterMany`, asks for.
struct RegistrationFields<'a> {
    incarnation: &'a str,
    address: &'a str,
    name: Option<&'a str>,
    credential_sha256: Option<[u8; 32]>,
    capacity: u32,
    app_version: Option<&'a str>,
    labels: &'a Labels,
}

impl<'a> From<&'a Registration> for RegistrationFields<'a> {
    fn from(registration: &'a Registration) -> Self {
        Self {
            incarnation: &registration.incarnation,
            address: &registration.address,
            name: registration.name.as_deref(),
            credential_sha256: registration.credential_sha256,
            capacity: registration.capacity,
            app_version: registration.app_version.as_deref(),
            labels: &registration.labels,
        }
    }
}

impl LeaseState {
    /// Applies one committed command. `log_index` is the Raft index of the entry (the revision,
    /// §1). Deterministic (P2.2): the result depends only on the state, the index and the command.
    ///
    /// An entry whose index is not after the current revision has already been applied and is
    /// refused, so a replay can never mint an executor id twice.
    #[must_use = "the outcome carries the reply and the pushes to fan out"]
    pub fn apply(&mut self, log_index: u64, command: &Command) -> Outcome {
        if log_index <= self.revision {
            return refused(RefusalReason::LogIndexNotAfterRevision {
                log_index,
                revision: self.revision,
            });
        }
        if let Command::SetClusterVersion {
            cluster_version, ..
        } = command
        {
            return self.apply_set_cluster_version(log_index, *cluster_version);
        }
        let Some(config) = self.config else {
            return match command {
                Command::Init {
                    shard_count,
                    lease_duration_ms,
                    ..
                } => self.apply_init(log_index, *shard_count, *lease_duration_ms),
                _ => refused(RefusalReason::NotInitialised),
            };
        };
        match command {
            // Initialised already: a repeat is a no-op, other values a conflict.
            Command::Init {
                shard_count,
                lease_duration_ms,
                ..
            } => self.apply_init(log_index, *shard_count, *lease_duration_ms),
            Command::SetLeaseDuration {
                lease_duration_ms, ..
            } => self.apply_set_lease_duration(log_index, config, *lease_duration_ms),
            Command::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
            } => {
                let numbered_before = self.next_executor_number;
                let result = self.apply_register(
                    log_index,
                    config,
                    *now_ms,
                    RegistrationFields {
                        incarnation,
                        address,
                        name: name.as_deref(),
                        credential_sha256: *credential_sha256,
                        capacity: *capacity,
                        app_version: app_version.as_deref(),
                        labels,
                    },
                );
                self.forget_numbers_the_log_covers(log_index, numbered_before);
                match result {
                    RegisterResult::Registered {
                        grant,
                        already_registered,
                    } => Outcome::Registered {
                        grant,
                        already_registered,
                    },
                    RegisterResult::Refused { reason } => refused(reason),
                }
            }
            Command::RegisterMany {
                now_ms,
                registrations,
            } => {
                let numbered_before = self.next_executor_number;
                let results = registrations
                    .iter()
                    .map(|registration| {
                        self.apply_register(log_index, config, *now_ms, registration.into())
                    })
                    .collect();
                self.forget_numbers_the_log_covers(log_index, numbered_before);
                Outcome::RegisteredMany { results }
            }
            Command::Renew { now_ms, renewals } => {
                self.apply_renew(log_index, config, *now_ms, renewals)
            }
            Command::Deregister {
                now_ms,
                executor_id,
            } => self.apply_deregister(log_index, *now_ms, executor_id),
            Command::Reap {
                now_ms,
                executor_ids,
            } => self.apply_reap(log_index, *now_ms, executor_ids),
            Command::ReserveLeases {
                now_ms,
                executor_ids,
            } => self.apply_reserve_leases(log_index, config, *now_ms, executor_ids),
            Command::ReapLapsed { now_ms, leases } => {
                self.apply_reap_lapsed(log_index, *now_ms, leases)
            }
            Command::Rebalance {
                now_ms,
                planned_at,
                moves,
            } => self.apply_rebalance(log_index, *now_ms, *planned_at, moves),
            Command::Release {
                executor_id,
                shards,
                revoke_revision,
                ..
            } => self.apply_release(log_index, executor_id, shards, *revoke_revision),
            Command::CompleteHandoffs { now_ms } => {
                self.apply_complete_handoffs(log_index, *now_ms)
            }
            Command::SetDraining {
                executor_id,
                draining,
                ..
            } => self.apply_set_draining(log_index, executor_id, *draining),
            Command::SetClusterVersion {
                cluster_version, ..
            } => self.apply_set_cluster_version(log_index, *cluster_version),
            Command::Operator {
                now_ms,
                actor,
                action,
            } => self.apply_operator(log_index, *now_ms, actor, action),
        }
    }

    /// `Operator` (P17.4): the action, then, if it changed anything, its audit record in the
    /// same write, so the log has every effective operator action and nothing else.
    fn apply_operator(
        &mut self,
        log_index: u64,
        now_ms: u64,
        actor: &str,
        action: &OperatorAction,
    ) -> Outcome {
        if actor.len() > MAX_ACTOR_BYTES {
            return invalid(format!("the actor is longer than {MAX_ACTOR_BYTES} bytes"));
        }
        let outcome = match action {
            OperatorAction::SetDraining {
                executor_id,
                draining,
            } => self.apply_set_draining(log_index, executor_id, *draining),
            OperatorAction::Remove { executor_id } => {
                self.apply_deregister(log_index, now_ms, executor_id)
            }
            OperatorAction::SetMaintenance { on } => {
                let changed = self.maintenance != *on;
                if changed {
                    self.maintenance = *on;
                    // Plans made before it would do what maintenance forbids (P2.4).
                    self.touch_assignment(log_index);
                }
                Outcome::MaintenanceSet { on: *on, changed }
            }
            OperatorAction::MoveShard { shard, to } => {
                self.apply_operator_move(log_index, now_ms, *shard, to)
            }
            OperatorAction::Pin { shard, executor_id } => {
                self.apply_pin(log_index, *shard, executor_id.as_ref())
            }
            OperatorAction::Membership { .. } => {
                self.touch(log_index);
                Outcome::Recorded
            }
        };
        let changed = match &outcome {
            Outcome::DrainingSet { changed, .. }
            | Outcome::MaintenanceSet { changed, .. }
            | Outcome::PinSet { changed, .. } => *changed,
            Outcome::Deregistered { already_gone, .. } => !already_gone,
            Outcome::Rebalanced { .. } | Outcome::Recorded => true,
            _ => false,
        };
        if changed {
            self.audit.push_back(AuditRecord {
                revision: log_index,
                at_ms: now_ms,
                actor: actor.to_owned(),
                action: action.clone(),
            });
            while self.audit.len() > MAX_AUDIT_RECORDS {
                self.audit.pop_front();
            }
        }
        outcome
    }

    /// An operator's move (P17.4): a one-move plan made on the current state, so never stale,
    /// refused with the reason unless the target takes shards (live at `now_ms`, not draining),
    /// does not hold it already, and the shard is not pinned to another executor.
    fn apply_operator_move(
        &mut self,
        log_index: u64,
        now_ms: u64,
        shard: ShardId,
        to: &str,
    ) -> Outcome {
        let Some(entry) = self.shard(shard) else {
            return Outcome::NotFound;
        };
        let Some(target) = self.executors.get(to) else {
            return Outcome::NotFound;
        };
        let conflict = |detail: String| refused(RefusalReason::Conflict { detail });
        if target.lease_lapsed(now_ms) || target.draining {
            return conflict(format!(
                "executor {to} is {}: it takes no shards",
                if target.draining {
                    "draining"
                } else {
                    "not live"
                }
            ));
        }
        let releasing_to = entry.handoff.as_ref().and_then(|h| h.to.as_deref());
        if entry.owner.as_deref() == Some(to) && entry.handoff.is_none() || releasing_to == Some(to)
        {
            return conflict(format!("shard {shard} is with {to} already"));
        }
        if let Some(pinned) = self.pins.get(&shard).filter(|pinned| pinned.as_str() != to) {
            return conflict(format!(
                "shard {shard} is pinned to {pinned}: unpin it first, or pin it to {to}"
            ));
        }
        let planned_at = self.assignment_revision;
        self.apply_rebalance(
            log_index,
            now_ms,
            planned_at,
            &[Move {
                shard,
                to: to.to_owned(),
            }],
        )
    }

    /// A pin (P17.4): to a registered executor, or none. A change makes plans made before it
    /// stale, since they may move the shard elsewhere (P2.4).
    fn apply_pin(
        &mut self,
        log_index: u64,
        shard: ShardId,
        executor_id: Option<&String>,
    ) -> Outcome {
        if self.shard(shard).is_none() {
            return Outcome::NotFound;
        }
        if let Some(executor_id) = executor_id {
            if !self.executors.contains_key(executor_id) {
                return Outcome::NotFound;
            }
        }
        let changed = self.pins.get(&shard) != executor_id;
        if changed {
            match executor_id {
                Some(executor_id) => {
                    self.pins.insert(shard, executor_id.clone());
                }
                None => {
                    self.pins.remove(&shard);
                }
            }
            self.touch_assignment(log_index);
        }
        Outcome::PinSet {
            shard,
            executor_id: executor_id.cloned(),
            changed,
        }
    }

    /// `SetClusterVersion`: raises, never lowers (P14.3), so replays and stale raises are no-ops.
    fn apply_set_cluster_version(&mut self, log_index: u64, cluster_version: u32) -> Outcome {
        let previous = self.cluster_version;
        if cluster_version > previous {
            self.cluster_version = cluster_version;
            self.touch(log_index);
        }
        Outcome::ClusterVersionSet {
            previous,
            cluster_version: self.cluster_version,
        }
    }

    /// Records that the entry at `log_index` changed the state.
    fn touch(&mut self, log_index: u64) {
        self.revision = log_index;
    }

    /// Records that the entry at `log_index` changed owners, handoffs or membership, which makes
    /// plans computed before it stale (P2.4).
    fn touch_assignment(&mut self, log_index: u64) {
        self.revision = log_index;
        self.assignment_revision = log_index;
    }

    /// `Init`: exactly one initialisation, safe to repeat (§10).
    fn apply_init(&mut self, log_index: u64, shard_count: u32, lease_duration_ms: u64) -> Outcome {
        if let Some(existing) = self.config {
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
        self.config = Some(config);
        self.shards = (0..shard_count)
            .map(|id| Shard {
                id,
                owner: None,
                epoch: 0,
                handoff: None,
            })
            .collect();
        self.releasing.clear();
        self.touch_assignment(log_index);
        Outcome::Initialised {
            config,
            already_initialised: false,
        }
    }

    /// `SetLeaseDuration`: affects grants from now on; existing expiries are kept, since an
    /// executor may already hold them (P3.4).
    fn apply_set_lease_duration(
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
            self.config = Some(ClusterConfig {
                lease_duration_ms,
                ..config
            });
            self.touch(log_index);
        }
        Outcome::LeaseDurationSet {
            previous_lease_duration_ms,
            lease_duration_ms,
        }
    }

    /// `Register`: idempotent per incarnation (P4.4, P7.2). The same incarnation while its
    /// executor is present gets the same id and its current grant, and nothing changes (not the
    /// lease: a retry is not a renewal, so a lapsed executor's retry gets a zero ttl and must
    /// renew; nor the address, name or capacity of the retry). Otherwise a new executor is minted
    /// with an empty set;
    /// the leader's next plan gives it shards (P5.4). An incarnation whose executor was removed
    /// gets a new executor: the old one's shards have moved on and its id answers 404.
    fn apply_register(
        &mut self,
        log_index: u64,
        config: ClusterConfig,
        now_ms: u64,
        registration: RegistrationFields<'_>,
    ) -> RegisterResult {
        let RegistrationFields {
            incarnation,
            address,
            name,
            credential_sha256,
            capacity,
            app_version,
            labels,
        } = registration;
        let checks = check_text_field("incarnation", incarnation, true)
            .and_then(|()| check_text_field("address", address, true))
            .and_then(|()| check_text_field("name", name.unwrap_or_default(), false))
            .and_then(|()| {
                check_capacity(capacity).map_err(|error| invalid_reason(error.to_string()))
            })
            .and_then(|()| {
                app_version.map_or(Ok(()), |version| {
                    check_app_version(version).map_err(|error| invalid_reason(error.to_string()))
                })
            })
            .and_then(|()| check_labels(labels).map_err(|error| invalid_reason(error.to_string())));
        if let Err(reason) = checks {
            return RegisterResult::Refused { reason };
        }
        if let Some(existing) = self.executor_by_incarnation(incarnation) {
            // P13.4: only the holder of the credential gets the grant again. Hashes, so equal
            // length; the values are public to every replica, so no timing to protect here.
            if existing.credential_sha256 != credential_sha256 {
                return RegisterResult::Refused {
                    reason: RefusalReason::CredentialMismatch {
                        executor_id: existing.id.clone(),
                    },
                };
            }
            let grant = self.grant_of(existing, config.shard_count, now_ms);
            // A retried register changes nothing else, but what it tells counts (P6.1).
            self.longest_lease_told_ms = self.longest_lease_told_ms.max(grant.lease_ttl_ms);
            return RegisterResult::Registered {
                grant,
                already_registered: true,
            };
        }
        let executor_id = self.mint_executor_id(log_index);
        let lease_expiry_ms = now_ms.saturating_add(config.lease_duration_ms);
        let executor = Executor {
            id: executor_id.clone(),
            incarnation: incarnation.to_owned(),
            name: name.map(str::to_owned),
            address: address.to_owned(),
            lease_expiry_ms,
            lease_ttl_told_ms: lease_expiry_ms.saturating_sub(now_ms),
            lease_reserved_until_ms: 0,
            registered_revision: log_index,
            owned_shards: imbl::OrdSet::new(),
            draining: false,
            credential_sha256,
            capacity,
            app_version: app_version.map(str::to_owned),
            labels: labels.clone(),
        };
        let grant = Grant {
            executor_id: executor_id.clone(),
            lease_ttl_ms: executor.lease_ttl_told_ms,
            revision: log_index,
            shard_count: config.shard_count,
            shards: Vec::new(),
        };
        self.longest_lease_told_ms = self.longest_lease_told_ms.max(grant.lease_ttl_ms);
        self.by_incarnation
            .insert(executor.incarnation.clone(), executor_id.clone());
        self.executors.insert(executor_id, executor);
        self.touch_assignment(log_index);
        RegisterResult::Registered {
            grant,
            already_registered: false,
        }
    }

    /// A new executor's id: the entry's index for its first, the numbers after it for the next
    /// ones of the same entry, and never a number minted before (the next entry's index may be
    /// one an earlier `RegisterMany` took).
    fn mint_executor_id(&mut self, log_index: u64) -> ExecutorId {
        let number = self.next_executor_number.max(log_index);
        self.next_executor_number = number.saturating_add(1);
        format!("ex-{number}")
    }

    /// After an entry that minted (`next_executor_number` moved from `numbered_before`): numbers
    /// up to the next entry's index are the log's own to mint, so the state remembers only
    /// numbers minted past it (0 otherwise, as in schema 7). An entry that minted nothing leaves
    /// it alone, so one whose registrations were all refused changes nothing (P5.1).
    fn forget_numbers_the_log_covers(&mut self, log_index: u64, numbered_before: u64) {
        if self.next_executor_number != numbered_before
            && self.next_executor_number <= log_index.saturating_add(1)
        {
            self.next_executor_number = 0;
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
    fn apply_renew(
        &mut self,
        log_index: u64,
        config: ClusterConfig,
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
        let mut any_acknowledged = false;
        let renewed_expiry_ms = now_ms.saturating_add(config.lease_duration_ms);
        for renewal in renewals {
            let Some(executor) = self.executors.get_mut(&renewal.executor_id) else {
                acknowledged_per_renewal.push(Vec::new());
                continue;
            };
            any_known = true;
            executor.lease_expiry_ms = executor.lease_expiry_ms.max(renewed_expiry_ms);
            executor.lease_ttl_told_ms = executor.lease_remaining_ms(now_ms);
            self.longest_lease_told_ms = self.longest_lease_told_ms.max(executor.lease_ttl_told_ms);
            let acknowledged = self.acknowledged_by_claims(renewal, prior_revision);
            for &shard in &acknowledged {
                any_acknowledged |= self.complete_handoff(shard, &mut effects);
            }
            acknowledged_per_renewal.push(acknowledged);
        }
        if any_acknowledged {
            self.touch_assignment(log_index);
        } else if any_known {
            self.touch(log_index);
        }
        let results = renewals
            .iter()
            .zip(mismatches)
            .zip(acknowledged_per_renewal)
            .map(|((renewal, claims_mismatch), acknowledged)| {
                match self.executors.get(&renewal.executor_id) {
                    Some(executor) => RenewResult::Renewed {
                        grant: self.grant_of(executor, config.shard_count, now_ms),
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

    /// Releasing shards of the renewing executor that its claims acknowledge (P5.2), ascending.
    fn acknowledged_by_claims(&self, renewal: &Renewal, prior_revision: u64) -> Vec<ShardId> {
        if renewal.revision > prior_revision {
            return Vec::new();
        }
        let Some(executor) = self.executors.get(&renewal.executor_id) else {
            return Vec::new();
        };
        // Releasing shards are few and found by index; the claims are searched only for them.
        if self.releasing.is_empty() {
            return Vec::new();
        }
        let releasing: Vec<ShardId> = executor
            .owned_shards
            .iter()
            .copied()
            .filter(|shard| self.releasing.contains(shard))
            .filter(|&shard| {
                self.shard(shard)
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
    fn apply_deregister(&mut self, log_index: u64, now_ms: u64, executor_id: &str) -> Outcome {
        if self.executors.contains_key(executor_id) {
            let mut effects = EffectsBuilder::default();
            let freed = self.remove_executor(
                executor_id,
                TombstoneReason::Deregistered,
                log_index,
                now_ms,
                &mut effects,
            );
            self.touch_assignment(log_index);
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
    fn apply_reap(&mut self, log_index: u64, now_ms: u64, executor_ids: &[ExecutorId]) -> Outcome {
        self.reap_where(log_index, now_ms, executor_ids, |_, executor| {
            executor.lease_lapsed(now_ms)
        })
    }

    /// Removes each candidate (in order, each once) that is registered and `lapsed` says has
    /// lapsed, as a reap does (P3.8); the rest are skipped.
    fn reap_where(
        &mut self,
        log_index: u64,
        now_ms: u64,
        executor_ids: &[ExecutorId],
        lapsed: impl Fn(usize, &Executor) -> bool,
    ) -> Outcome {
        let mut effects = EffectsBuilder::default();
        let mut reaped = BTreeSet::new();
        let mut skipped = Vec::new();
        for (candidate, executor_id) in executor_ids.iter().enumerate() {
            if reaped.contains(executor_id) {
                continue;
            }
            let lapsed = self
                .executors
                .get(executor_id)
                .is_some_and(|executor| lapsed(candidate, executor));
            if lapsed {
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
        if !reaped.is_empty() {
            self.touch_assignment(log_index);
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
    fn apply_reserve_leases(
        &mut self,
        log_index: u64,
        config: ClusterConfig,
        now_ms: u64,
        executor_ids: &[ExecutorId],
    ) -> Outcome {
        let reserved_until_ms = now_ms.saturating_add(
            config
                .lease_duration_ms
                .saturating_mul(super::LEASE_RESERVATION_LEASES),
        );
        let mut reserved = Vec::new();
        let mut skipped = Vec::new();
        for executor_id in executor_ids {
            match self.executors.get_mut(executor_id) {
                Some(executor) => {
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
            reserved_until_ms,
            reserved,
            skipped,
        }
    }

    /// `ReapLapsed` (P6.7): removes each candidate whose judged expiry has lapsed at `now_ms` and
    /// is at or after the expiry the log recorded for it. The leader told every copy of its
    /// lease from memory and judged them all ended, so its reservation does not hold it; a grant
    /// the log recorded after the judgment (a renewal through the log, ordered before this entry)
    /// ends after the judged expiry, so it keeps the executor. Otherwise as `Reap` (P3.8).
    fn apply_reap_lapsed(
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
                    && super::state::lapsed(lease.judged_expiry_ms, now_ms)
            })
        })
    }

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
    fn apply_rebalance(
        &mut self,
        log_index: u64,
        now_ms: u64,
        planned_at: u64,
        moves: &[Move],
    ) -> Outcome {
        if planned_at > self.revision {
            return invalid(format!(
                "plan claims revision {planned_at}, beyond the state's {}",
                self.revision
            ));
        }
        if planned_at < self.assignment_revision {
            return refused(RefusalReason::StalePlan {
                planned_at,
                assignment_revision: self.assignment_revision,
            });
        }
        if let Err(refusal) = self.check_moves(moves) {
            return refusal;
        }
        let mut effects = EffectsBuilder::default();
        let mut granted = BTreeSet::new();
        let mut releasing = BTreeSet::new();
        let mut cancelled = BTreeSet::new();
        for step in moves {
            let Some(index) = shard_index(step.shard) else {
                continue;
            };
            let Some(entry) = self.shards.get(index) else {
                continue;
            };
            match (entry.owner.clone(), entry.handoff.is_some()) {
                (None, _) => {
                    self.give_to(step.shard, &step.to, &mut effects);
                    granted.insert(step.shard);
                }
                (Some(owner), false) => {
                    // The owner's lease bound (its expiry, or its reservation for copies told
                    // from memory, P6.6) bounds every copy it was told that included the shard;
                    // an owner missing would be a corrupt state, and then nothing bounds a grant
                    // beyond now.
                    let from_grant_expiry_ms = self
                        .executors
                        .get(&owner)
                        .map_or(now_ms, Executor::lease_bound_ms);
                    if let Some(entry) = self.shards.get_mut(index) {
                        entry.handoff = Some(Handoff {
                            to: Some(step.to.clone()),
                            revoke_revision: log_index,
                            from_grant_expiry_ms,
                        });
                        self.releasing.insert(step.shard);
                    }
                    effects.revokes.entry(owner).or_default().insert(step.shard);
                    releasing.insert(step.shard);
                }
                (Some(owner), true) if owner == step.to => {
                    if let Some(entry) = self.shards.get_mut(index) {
                        entry.handoff = None;
                        self.releasing.remove(&step.shard);
                    }
                    effects.assignments.insert(owner);
                    cancelled.insert(step.shard);
                }
                (Some(_), true) => {
                    if let Some(handoff) = self
                        .shards
                        .get_mut(index)
                        .and_then(|entry| entry.handoff.as_mut())
                    {
                        handoff.to = Some(step.to.clone());
                    }
                    releasing.insert(step.shard);
                }
            }
        }
        if !moves.is_empty() {
            self.touch_assignment(log_index);
        }
        Outcome::Rebalanced {
            granted: granted.into_iter().collect(),
            releasing: releasing.into_iter().collect(),
            cancelled: cancelled.into_iter().collect(),
            effects: effects.finish(self, log_index),
        }
    }

    /// `SetDraining`: flips an executor's draining flag. A change counts as an assignment change,
    /// so a plan computed before it (which may target the executor) is refused as stale (P2.4).
    /// Nothing moves here: the leader's next plan moves the shards (P5.4, P5.2). An unknown id is
    /// not found.
    fn apply_set_draining(&mut self, log_index: u64, executor_id: &str, draining: bool) -> Outcome {
        let Some(executor) = self.executors.get_mut(executor_id) else {
            return Outcome::NotFound;
        };
        let changed = executor.draining != draining;
        if changed {
            executor.draining = draining;
            self.touch_assignment(log_index);
        }
        Outcome::DrainingSet {
            executor_id: executor_id.to_owned(),
            draining,
            changed,
        }
    }

    /// Refuses a plan that names a shard out of range or twice, an unknown target, or a move that
    /// would change nothing (the planner never makes one; it signals a plan for another state).
    fn check_moves(&self, moves: &[Move]) -> Result<(), Outcome> {
        let mut seen = BTreeSet::new();
        for step in moves {
            let Some(entry) = self.shard(step.shard) else {
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
    fn apply_release(
        &mut self,
        log_index: u64,
        executor_id: &str,
        shards: &[ShardId],
        revoke_revision: u64,
    ) -> Outcome {
        if !self.executors.contains_key(executor_id) {
            return Outcome::NotFound;
        }
        let named: BTreeSet<ShardId> = shards.iter().copied().collect();
        let mut effects = EffectsBuilder::default();
        let mut completed = Vec::new();
        let mut ignored = Vec::new();
        for shard in named {
            let current = self.shard(shard).is_some_and(|entry| {
                entry.owner.as_deref() == Some(executor_id)
                    && entry
                        .handoff
                        .as_ref()
                        .is_some_and(|handoff| handoff.revoke_revision == revoke_revision)
            });
            if current && self.complete_handoff(shard, &mut effects) {
                completed.push(shard);
            } else {
                ignored.push(shard);
            }
        }
        if !completed.is_empty() {
            self.touch_assignment(log_index);
        }
        Outcome::Released {
            completed,
            ignored,
            effects: effects.finish(self, log_index),
        }
    }

    /// `CompleteHandoffs`: hands on every releasing shard whose old owner's last grant including
    /// it has expired at the command's `now_ms` (P5.2), re-checked here (P2.4).
    fn apply_complete_handoffs(&mut self, log_index: u64, now_ms: u64) -> Outcome {
        let due: Vec<ShardId> = self
            .releasing()
            .filter(|(_, handoff)| super::state::lapsed(handoff.from_grant_expiry_ms, now_ms))
            .map(|(entry, _)| entry.id)
            .collect();
        let mut effects = EffectsBuilder::default();
        let mut completed = Vec::new();
        for shard in due {
            if self.complete_handoff(shard, &mut effects) {
                completed.push(shard);
            }
        }
        if !completed.is_empty() {
            self.touch_assignment(log_index);
        }
        Outcome::HandoffsCompleted {
            completed,
            effects: effects.finish(self, log_index),
        }
    }

    /// Ends a handoff: the shard leaves its old owner and goes to the target (epoch + 1), or is
    /// left unowned if the target has gone. Returns false if the shard was not releasing.
    fn complete_handoff(&mut self, shard: ShardId, effects: &mut EffectsBuilder) -> bool {
        let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index)) else {
            return false;
        };
        let Some(handoff) = entry.handoff.take() else {
            return false;
        };
        self.releasing.remove(&shard);
        if let Some(old_owner) = entry.owner.take() {
            if let Some(executor) = self.executors.get_mut(&old_owner) {
                executor.owned_shards.remove(&shard);
            }
        }
        if let Some(target) = handoff.to {
            self.give_to(shard, &target, effects);
        }
        true
    }

    /// Gives an unowned shard to `new_owner` with a new epoch (I2: the epoch advances when and
    /// only when the shard gets a new owner) and queues a push of the owner's set. Leaves the
    /// shard unowned if `new_owner` is not registered.
    fn give_to(&mut self, shard: ShardId, new_owner: &ExecutorId, effects: &mut EffectsBuilder) {
        let Some(entry) = shard_index(shard).and_then(|index| self.shards.get_mut(index)) else {
            return;
        };
        let Some(executor) = self.executors.get_mut(new_owner) else {
            return;
        };
        executor.owned_shards.insert(shard);
        entry.owner = Some(new_owner.clone());
        entry.epoch = entry.epoch.saturating_add(1);
        entry.handoff = None;
        self.releasing.remove(&shard);
        effects.assignments.insert(new_owner.clone());
    }

    /// Removes an executor (deregistered or reaped): shards it owned become unowned, handoffs from
    /// it complete (it no longer admits anything), handoffs to it lose their target, and a
    /// tombstone remembers it (P2.1, P7.2).
    fn remove_executor(
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
        // A pin goes with its executor: a pin is to one registration.
        let pinned: Vec<ShardId> = self
            .pins
            .iter()
            .filter(|(_, pinned_to)| pinned_to.as_str() == executor_id)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in pinned {
            self.pins.remove(&shard);
        }
        let mut freed = Vec::new();
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
                }) => self.give_to(shard, &target, effects),
                _ => freed.push(shard),
            }
        }
        // Found first and then changed one by one: the shard table shares its structure with
        // earlier copies (a snapshot being written), so touching every entry would copy it all.
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
    fn prune_tombstones(&mut self) {
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
