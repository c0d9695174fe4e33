//! Applying committed commands (P2.2, P2.4, P3, P4.4, P5, P7.2).
//!
//! Each handler either refuses without touching anything, or changes the state and stamps the
//! entry's log index as the revision (and as the assignment revision when owners, handoffs or
//! membership changed). Times are saturating: no input can overflow or panic.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::{
    check_app_version, check_capacity, check_labels, check_namespace_name,
    check_namespace_settings, is_cluster_operator, Labels, DEFAULT_NAMESPACE, MAX_ACTOR_BYTES,
    MAX_AUDIT_RECORDS, MAX_NAMESPACES, MAX_TOTAL_SHARDS,
};

use super::{
    AuditRecord, ClusterConfig, Command, Effects, Epoch, Executor, ExecutorId, Grant, Handoff,
    LapsedLease, LeaseState, Move, Namespace, OperatorAction, Outcome, PlacementOverrides,
    RefusalReason, RegisterResult, Registration, RenewResult, Renewal, Revoke, ShardId, Tombstone,
    TombstoneReason, MAX_SHARD_COUNT, MAX_TEXT_FIELD_BYTES, MAX_TOMBSTONES,
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
    namespace: &'a str,
}

/// What one move of a plan did to its shard.
enum Applied {
    /// Unowned, now its target's.
    Granted,
    /// Releasing to its target: a handoff started, or one under way retargeted.
    Releasing,
    /// Releasing no more: the handoff cancelled, the owner keeps it.
    Cancelled,
}

/// Whether an operator action's outcome changed the state, so the audit log records it (P17.4).
fn changed_anything(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::DrainingSet { changed, .. }
        | Outcome::MaintenanceSet { changed, .. }
        | Outcome::PinSet { changed, .. }
        | Outcome::NamespaceSet { changed, .. } => *changed,
        Outcome::NamespaceCreated { already_exists, .. } => !already_exists,
        Outcome::NamespaceDeleted { already_gone, .. } => !already_gone,
        Outcome::Deregistered { already_gone, .. } => !already_gone,
        Outcome::Rebalanced { .. } | Outcome::Recorded => true,
        _ => false,
    }
}

/// The registration's fields checked one by one, the first failure refused (a 4xx to the
/// caller, nothing applied).
fn check_registration(registration: &RegistrationFields<'_>) -> Result<(), RefusalReason> {
    let invalid = |error: &dyn std::fmt::Display| invalid_reason(error.to_string());
    check_text_field("incarnation", registration.incarnation, true)?;
    check_text_field("address", registration.address, true)?;
    check_text_field("name", registration.name.unwrap_or_default(), false)?;
    check_capacity(registration.capacity).map_err(|error| invalid(&error))?;
    if let Some(version) = registration.app_version {
        check_app_version(version).map_err(|error| invalid(&error))?;
    }
    check_labels(registration.labels).map_err(|error| invalid(&error))?;
    check_namespace_name(registration.namespace).map_err(|error| invalid(&error))
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
            namespace: &registration.namespace,
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
        let Some(config) = self.config().copied() else {
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
                namespace,
            } => self.apply_register_one(
                log_index,
                *now_ms,
                RegistrationFields {
                    incarnation,
                    address,
                    name: name.as_deref(),
                    credential_sha256: *credential_sha256,
                    capacity: *capacity,
                    app_version: app_version.as_deref(),
                    labels,
                    namespace,
                },
            ),
            Command::RegisterMany {
                now_ms,
                registrations,
            } => self.apply_register_many(log_index, *now_ms, registrations),
            Command::Renew { now_ms, renewals } => self.apply_renew(log_index, *now_ms, renewals),
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
            } => self.apply_reserve_leases(log_index, *now_ms, executor_ids),
            Command::ReapLapsed { now_ms, leases } => {
                self.apply_reap_lapsed(log_index, *now_ms, leases)
            }
            Command::Rebalance {
                now_ms,
                planned_at,
                namespace,
                moves,
            } => self.apply_rebalance(log_index, *now_ms, *planned_at, namespace, moves),
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

    /// `Register`: the registration, then the numbers the log covers forgotten
    /// ([`Self::forget_numbers_the_log_covers`]).
    fn apply_register_one(
        &mut self,
        log_index: u64,
        now_ms: u64,
        fields: RegistrationFields<'_>,
    ) -> Outcome {
        let numbered_before = self.next_executor_number;
        let result = self.apply_register(log_index, now_ms, fields);
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

    /// `RegisterMany`: each registration in order under the one entry, then the numbers the
    /// log covers forgotten.
    fn apply_register_many(
        &mut self,
        log_index: u64,
        now_ms: u64,
        registrations: &[Registration],
    ) -> Outcome {
        let numbered_before = self.next_executor_number;
        let results = registrations
            .iter()
            .map(|registration| self.apply_register(log_index, now_ms, registration.into()))
            .collect();
        self.forget_numbers_the_log_covers(log_index, numbered_before);
        Outcome::RegisteredMany { results }
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
        let outcome = self.apply_operator_action(log_index, now_ms, action);
        if changed_anything(&outcome) {
            self.record_audit(AuditRecord {
                revision: log_index,
                at_ms: now_ms,
                actor: actor.to_owned(),
                action: action.clone(),
            });
        }
        outcome
    }

    /// The operator's action itself, applied as the same change any other caller's would be.
    fn apply_operator_action(
        &mut self,
        log_index: u64,
        now_ms: u64,
        action: &OperatorAction,
    ) -> Outcome {
        match action {
            OperatorAction::SetDraining {
                executor_id,
                draining,
            } => self.apply_set_draining(log_index, executor_id, *draining),
            OperatorAction::Remove { executor_id } => {
                self.apply_deregister(log_index, now_ms, executor_id)
            }
            OperatorAction::SetMaintenance { on } => self.apply_set_maintenance(log_index, *on),
            OperatorAction::MoveShard {
                namespace,
                shard,
                to,
            } => self.apply_operator_move(log_index, now_ms, namespace, *shard, to),
            OperatorAction::Pin {
                namespace,
                shard,
                executor_id,
            } => self.apply_pin(log_index, namespace, *shard, executor_id.as_ref()),
            OperatorAction::CreateNamespace {
                name,
                shard_count,
                lease_duration_ms,
                max_executors,
                placement,
            } => self.apply_create_namespace(
                log_index,
                name,
                ClusterConfig {
                    shard_count: *shard_count,
                    lease_duration_ms: *lease_duration_ms,
                },
                *max_executors,
                placement,
            ),
            OperatorAction::SetNamespace {
                name,
                lease_duration_ms,
                max_executors,
                placement,
            } => self.apply_set_namespace(
                log_index,
                name,
                *lease_duration_ms,
                *max_executors,
                placement,
            ),
            OperatorAction::DeleteNamespace { name } => {
                self.apply_delete_namespace(log_index, now_ms, name)
            }
            OperatorAction::Membership { .. } => {
                self.touch(log_index);
                Outcome::Recorded
            }
        }
    }

    fn apply_set_maintenance(&mut self, log_index: u64, on: bool) -> Outcome {
        let changed = self.maintenance != on;
        if changed {
            self.maintenance = on;
            // Plans made before it, in every namespace, would do what maintenance forbids (P2.4).
            let names: Vec<String> = self.namespaces.keys().cloned().collect();
            for name in names {
                self.touch_assignment(log_index, &name);
            }
        }
        Outcome::MaintenanceSet { on, changed }
    }

    /// Appends an operator's record, pushing out the oldest past [`MAX_AUDIT_RECORDS`]: the
    /// oldest of a caller who is not an operator of the whole cluster first, so such callers
    /// cannot push the cluster operators' records out (P17.4).
    fn record_audit(&mut self, record: AuditRecord) {
        self.audit.push_back(record);
        while self.audit.len() > MAX_AUDIT_RECORDS {
            let oldest_other = self
                .audit
                .iter()
                .position(|record| !is_cluster_operator(&record.actor))
                .unwrap_or(0);
            self.audit.remove(oldest_other);
        }
    }

    /// An operator's move (P17.4): a one-move plan made on the current state, so never stale,
    /// refused with the reason unless the target is of the shard's namespace (P18.2) and takes
    /// shards (live at `now_ms`, not draining), does not hold it already, and the shard is not
    /// pinned to another executor.
    fn apply_operator_move(
        &mut self,
        log_index: u64,
        now_ms: u64,
        namespace: &str,
        shard: ShardId,
        to: &str,
    ) -> Outcome {
        let Some(space) = self.namespaces.get(namespace) else {
            return Outcome::NotFound;
        };
        let Some(entry) = space.shard(shard) else {
            return Outcome::NotFound;
        };
        let Some(target) = self.executors.get(to) else {
            return Outcome::NotFound;
        };
        let conflict = |detail: String| refused(RefusalReason::Conflict { detail });
        if target.namespace != namespace {
            return conflict(format!(
                "executor {to} is of namespace {}, not {namespace} (P18.2)",
                target.namespace
            ));
        }
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
        if let Some(pinned) = space.pin(shard).filter(|pinned| *pinned != to) {
            return conflict(format!(
                "shard {shard} is pinned to {pinned}: unpin it first, or pin it to {to}"
            ));
        }
        let planned_at = self.assignment_revision;
        self.apply_rebalance(
            log_index,
            now_ms,
            planned_at,
            namespace,
            &[Move {
                shard,
                to: to.to_owned(),
            }],
        )
    }

    /// A pin (P17.4): to a registered executor of the shard's namespace (P18.2), or none. A
    /// change makes plans made before it stale, since they may move the shard elsewhere (P2.4).
    fn apply_pin(
        &mut self,
        log_index: u64,
        namespace: &str,
        shard: ShardId,
        executor_id: Option<&String>,
    ) -> Outcome {
        let Some(space) = self.namespaces.get(namespace) else {
            return Outcome::NotFound;
        };
        if space.shard(shard).is_none() {
            return Outcome::NotFound;
        }
        if let Some(executor_id) = executor_id {
            match self.executors.get(executor_id) {
                None => return Outcome::NotFound,
                Some(executor) if executor.namespace != namespace => {
                    return refused(RefusalReason::Conflict {
                        detail: format!(
                            "executor {executor_id} is of namespace {}, not {namespace} (P18.2)",
                            executor.namespace
                        ),
                    })
                }
                Some(_) => {}
            }
        }
        let changed = space.pins.get(&shard) != executor_id;
        if changed {
            if let Some(space) = self.namespaces.get_mut(namespace) {
                match executor_id {
                    Some(executor_id) => {
                        space.pins.insert(shard, executor_id.clone());
                    }
                    None => {
                        space.pins.remove(&shard);
                    }
                }
            }
            self.touch_assignment(log_index, namespace);
        }
        Outcome::PinSet {
            shard,
            executor_id: executor_id.cloned(),
            changed,
        }
    }

    /// Creates a namespace (P18.1): a repeat with the same settings succeeds and changes nothing
    /// (a retried request), other settings for a name in use are a conflict. Its shards start at
    /// the epoch its name's shards last reached, so no epoch repeats for a name (I2).
    fn apply_create_namespace(
        &mut self,
        log_index: u64,
        name: &str,
        config: ClusterConfig,
        max_executors: Option<u32>,
        placement: &PlacementOverrides,
    ) -> Outcome {
        if let Err(error) = check_namespace_name(name) {
            return invalid(error.to_string());
        }
        if let Err(error) = check_namespace_settings(config.lease_duration_ms, max_executors) {
            return invalid(error.to_string());
        }
        if let Err(error) = placement.check() {
            return invalid(error.to_string());
        }
        if let Some(existing) = self.namespaces.get(name) {
            if existing.config == config
                && existing.max_executors == max_executors
                && existing.placement == *placement
            {
                return Outcome::NamespaceCreated {
                    name: name.to_owned(),
                    already_exists: true,
                };
            }
            return refused(RefusalReason::Conflict {
                detail: format!("namespace {name} exists with other settings"),
            });
        }
        if config.shard_count == 0 || config.shard_count > MAX_SHARD_COUNT {
            return invalid(format!(
                "shard count {} is outside 1..={MAX_SHARD_COUNT}",
                config.shard_count
            ));
        }
        if self.namespaces.len() >= MAX_NAMESPACES {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "the cluster holds its most namespaces ({MAX_NAMESPACES}): delete one first"
                ),
            });
        }
        let total_shards: u64 = self
            .namespaces
            .values()
            .map(|space| u64::from(space.config.shard_count))
            .sum();
        if total_shards.saturating_add(u64::from(config.shard_count)) > MAX_TOTAL_SHARDS {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "the namespaces hold {total_shards} shards; {} more would pass the cluster's \
                     {MAX_TOTAL_SHARDS}",
                    config.shard_count
                ),
            });
        }
        let epoch = self.retired_epochs.remove(name).unwrap_or(0);
        self.namespaces.insert(
            name.to_owned(),
            Namespace::new(config, max_executors, placement.clone(), log_index, epoch),
        );
        self.touch_assignment(log_index, name);
        Outcome::NamespaceCreated {
            name: name.to_owned(),
            already_exists: false,
        }
    }

    /// Changes a namespace's lease duration (grants from now on; expiries already told stand,
    /// P3.4), executor bound (a lower bound refuses registrations and removes no one) and
    /// placement settings (P18.4: a plan made under the old ones is stale, so the next is made
    /// under the new). `default`'s lease is the managers' `--lease-duration`, so it cannot
    /// change here.
    fn apply_set_namespace(
        &mut self,
        log_index: u64,
        name: &str,
        lease_duration_ms: u64,
        max_executors: Option<u32>,
        placement: &PlacementOverrides,
    ) -> Outcome {
        if let Err(error) = check_namespace_settings(lease_duration_ms, max_executors) {
            return invalid(error.to_string());
        }
        if let Err(error) = placement.check() {
            return invalid(error.to_string());
        }
        let Some(space) = self.namespaces.get(name) else {
            return refused(RefusalReason::UnknownNamespace {
                namespace: name.to_owned(),
            });
        };
        if name == DEFAULT_NAMESPACE && space.config.lease_duration_ms != lease_duration_ms {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "the {DEFAULT_NAMESPACE} namespace's lease is the managers' --lease-duration"
                ),
            });
        }
        let placement_changed = space.placement != *placement;
        let changed = space.config.lease_duration_ms != lease_duration_ms
            || space.max_executors != max_executors
            || placement_changed;
        if changed {
            if let Some(space) = self.namespaces.get_mut(name) {
                space.config.lease_duration_ms = lease_duration_ms;
                space.max_executors = max_executors;
                space.placement = placement.clone();
            }
            if placement_changed {
                self.touch_assignment(log_index, name);
            } else {
                self.touch(log_index);
            }
        }
        Outcome::NamespaceSet {
            name: name.to_owned(),
            changed,
        }
    }

    /// Deletes a namespace (P18.1): refused for `default` and while any of its shards has an
    /// owner (its executors are drained first, so no executor admits anything of it). Executors
    /// still registered in it hold nothing; they are removed with it (tombstoned as
    /// deregistered, so their next renewal is told they are gone). The highest epoch its shards
    /// reached is kept for its name (I2). A repeat finds the name retired and succeeds.
    fn apply_delete_namespace(&mut self, log_index: u64, now_ms: u64, name: &str) -> Outcome {
        let Some(space) = self.namespaces.get(name) else {
            if self.retired_epochs.contains_key(name) {
                return Outcome::NamespaceDeleted {
                    name: name.to_owned(),
                    already_gone: true,
                    removed: Vec::new(),
                };
            }
            return refused(RefusalReason::UnknownNamespace {
                namespace: name.to_owned(),
            });
        };
        if name == DEFAULT_NAMESPACE {
            return refused(RefusalReason::Conflict {
                detail: format!("the {DEFAULT_NAMESPACE} namespace cannot be deleted"),
            });
        }
        let owned = space
            .shards
            .iter()
            .filter(|shard| shard.owner.is_some())
            .count();
        if owned > 0 {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "namespace {name} has {owned} shards with an owner: drain its executors \
                     first (P18.1)"
                ),
            });
        }
        let highest_epoch = space.highest_epoch();
        let members: Vec<ExecutorId> = self
            .executors
            .values()
            .filter(|executor| executor.namespace == name)
            .map(|executor| executor.id.clone())
            .collect();
        let mut effects = EffectsBuilder::default();
        for executor_id in &members {
            self.remove_executor(
                executor_id,
                TombstoneReason::Deregistered,
                log_index,
                now_ms,
                &mut effects,
            );
        }
        self.touch_assignment(log_index, name);
        self.namespaces.remove(name);
        self.retired_epochs.insert(name.to_owned(), highest_epoch);
        Outcome::NamespaceDeleted {
            name: name.to_owned(),
            already_gone: false,
            removed: members,
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

    /// Records that the entry at `log_index` changed owners, handoffs, pins or membership in
    /// `namespace`, which makes plans for it computed before it stale (P2.4).
    fn touch_assignment(&mut self, log_index: u64, namespace: &str) {
        self.revision = log_index;
        self.assignment_revision = log_index;
        if let Some(space) = self.namespaces.get_mut(namespace) {
            space.assignment_revision = log_index;
        }
    }

    /// `Init`: exactly one initialisation, safe to repeat (§10).
    fn apply_init(&mut self, log_index: u64, shard_count: u32, lease_duration_ms: u64) -> Outcome {
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
            Namespace::new(config, None, PlacementOverrides::default(), 0, 0),
        );
        self.touch_assignment(log_index, DEFAULT_NAMESPACE);
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

    /// `Register`: idempotent per incarnation (P4.4, P7.2). The same incarnation while its
    /// executor is present gets the same id and its current grant, and nothing changes (not the
    /// lease: a retry is not a renewal, so a lapsed executor's retry gets a zero ttl and must
    /// renew; nor the address, name or capacity of the retry). Otherwise a new executor is minted
    /// with an empty set;
    /// the leader's next plan gives it shards (P5.4). An incarnation whose executor was removed
    /// gets a new executor: the old one's shards have moved on and its id answers 404.
    ///
    /// The executor joins `namespace` (P18.1), which must exist and have room below its
    /// `max_executors`; the same incarnation in another namespace is a conflict, not a retry.
    fn apply_register(
        &mut self,
        log_index: u64,
        now_ms: u64,
        registration: RegistrationFields<'_>,
    ) -> RegisterResult {
        if let Err(reason) = check_registration(&registration) {
            return RegisterResult::Refused { reason };
        }
        let namespace = registration.namespace;
        let Some(space) = self.namespaces.get(namespace) else {
            return RegisterResult::Refused {
                reason: RefusalReason::UnknownNamespace {
                    namespace: namespace.to_owned(),
                },
            };
        };
        let config = space.config;
        let executor_count = space.executor_count();
        let room = space
            .max_executors
            .is_none_or(|max| executor_count < max as usize);
        if let Some(existing) = self.executor_by_incarnation(registration.incarnation) {
            let grant = match self.grant_again(existing, &registration, now_ms) {
                Ok(grant) => grant,
                Err(reason) => return RegisterResult::Refused { reason },
            };
            // A retried register changes nothing else, but what it tells counts (P6.1).
            self.longest_lease_told_ms = self.longest_lease_told_ms.max(grant.lease_ttl_ms);
            return RegisterResult::Registered {
                grant,
                already_registered: true,
            };
        }
        if !room {
            return RegisterResult::Refused {
                reason: RefusalReason::Conflict {
                    detail: format!(
                        "namespace {namespace} holds its most executors ({executor_count}): \
                         deregister one, or raise its bound (P18.1)"
                    ),
                },
            };
        }
        let grant = self.register_new(log_index, now_ms, &registration, config);
        RegisterResult::Registered {
            grant,
            already_registered: false,
        }
    }

    /// A registration retried by the executor already registered with its incarnation: the
    /// same grant again, to the holder of its credential in its namespace only.
    fn grant_again(
        &self,
        existing: &Executor,
        registration: &RegistrationFields<'_>,
        now_ms: u64,
    ) -> Result<Grant, RefusalReason> {
        let RegistrationFields {
            incarnation,
            namespace,
            credential_sha256,
            ..
        } = *registration;
        if existing.namespace != namespace {
            return Err(RefusalReason::Conflict {
                detail: format!(
                    "incarnation {incarnation} is registered in namespace {}, not \
                     {namespace}: a new registration needs a new incarnation (P18.1)",
                    existing.namespace
                ),
            });
        }
        // P13.4: only the holder of the credential gets the grant again. Hashes, so equal
        // length; the values are public to every replica, so no timing to protect here.
        if existing.credential_sha256 != credential_sha256 {
            return Err(RefusalReason::CredentialMismatch {
                executor_id: existing.id.clone(),
            });
        }
        Ok(self.grant_of(existing, now_ms))
    }

    /// A new executor in the registration's namespace, whose `config` it takes, with a lease
    /// from `now_ms` and no shards yet.
    fn register_new(
        &mut self,
        log_index: u64,
        now_ms: u64,
        registration: &RegistrationFields<'_>,
        config: ClusterConfig,
    ) -> Grant {
        let namespace = registration.namespace;
        let executor_id = self.mint_executor_id(log_index);
        let lease_expiry_ms = now_ms.saturating_add(config.lease_duration_ms);
        let executor = Executor {
            id: executor_id.clone(),
            incarnation: registration.incarnation.to_owned(),
            name: registration.name.map(str::to_owned),
            address: registration.address.to_owned(),
            lease_expiry_ms,
            lease_ttl_told_ms: lease_expiry_ms.saturating_sub(now_ms),
            lease_reserved_until_ms: 0,
            registered_revision: log_index,
            owned_shards: imbl::OrdSet::new(),
            draining: false,
            credential_sha256: registration.credential_sha256,
            capacity: registration.capacity,
            app_version: registration.app_version.map(str::to_owned),
            labels: registration.labels.clone(),
            namespace: namespace.to_owned(),
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
        if let Some(space) = self.namespaces.get_mut(namespace) {
            space.members.insert(executor_id.clone());
        }
        self.executors.insert(executor_id, executor);
        self.touch_assignment(log_index, namespace);
        grant
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
    /// numbers minted past it (0 otherwise, as in 0.1.0). An entry that minted nothing leaves
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
    fn apply_renew(&mut self, log_index: u64, now_ms: u64, renewals: &[Renewal]) -> Outcome {
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
        for renewal in renewals {
            let Some(executor) = self.executors.get_mut(&renewal.executor_id) else {
                acknowledged_per_renewal.push(Vec::new());
                continue;
            };
            any_known = true;
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
            for &shard in &acknowledged {
                if self.complete_handoff(&namespace, shard, &mut effects) {
                    acknowledged_in.insert(namespace.clone());
                }
            }
            acknowledged_per_renewal.push(acknowledged);
        }
        if any_known {
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

    /// Releasing shards of the renewing executor that its claims acknowledge (P5.2), ascending.
    fn acknowledged_by_claims(&self, renewal: &Renewal, prior_revision: u64) -> Vec<ShardId> {
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
    fn apply_deregister(&mut self, log_index: u64, now_ms: u64, executor_id: &str) -> Outcome {
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
    fn apply_reserve_leases(
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
                        lease_duration_ms.saturating_mul(super::LEASE_RESERVATION_LEASES),
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
    ///
    /// A plan is for one namespace's shards and executors (P18.1): stale only if that namespace's
    /// assignment changed since, and refused whole if it names an executor of another.
    fn apply_rebalance(
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
    fn apply_move(
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
    fn apply_set_draining(&mut self, log_index: u64, executor_id: &str, draining: bool) -> Outcome {
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
    fn check_moves(
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
    fn apply_release(
        &mut self,
        log_index: u64,
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
            if current && self.complete_handoff(&namespace, shard, &mut effects) {
                completed.push(shard);
            } else {
                ignored.push(shard);
            }
        }
        if !completed.is_empty() {
            self.touch_assignment(log_index, &namespace);
        }
        Outcome::Released {
            completed,
            ignored,
            effects: effects.finish(self, log_index),
        }
    }

    /// `CompleteHandoffs`: hands on every releasing shard, in every namespace, whose old
    /// owner's last grant including it has expired at the command's `now_ms` (P5.2), re-checked
    /// here (P2.4). The outcome lists `default`'s shards; every namespace's completions push.
    fn apply_complete_handoffs(&mut self, log_index: u64, now_ms: u64) -> Outcome {
        let due: Vec<(String, ShardId)> = self
            .releasing_everywhere()
            .filter(|(_, _, handoff)| super::state::lapsed(handoff.from_grant_expiry_ms, now_ms))
            .map(|(namespace, entry, _)| (namespace.to_owned(), entry.id))
            .collect();
        let mut effects = EffectsBuilder::default();
        let mut completed = Vec::new();
        let mut completed_in = BTreeSet::new();
        for (namespace, shard) in due {
            if self.complete_handoff(&namespace, shard, &mut effects) {
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
    fn complete_handoff(
        &mut self,
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
        space.releasing.remove(&shard);
        if let Some(old_owner) = old_owner {
            if let Some(executor) = self.executors.get_mut(&old_owner) {
                executor.owned_shards.remove(&shard);
            }
        }
        if let Some(target) = handoff.to {
            self.give_to(namespace, shard, &target, effects);
        }
        true
    }

    /// Gives an unowned shard to `new_owner` with a new epoch (I2: the epoch advances when and
    /// only when the shard gets a new owner) and queues a push of the owner's set. Leaves the
    /// shard unowned if `new_owner` is not registered in the shard's namespace.
    fn give_to(
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
        let namespace = executor.namespace.as_str();
        let Some(space) = self.namespaces.get_mut(namespace) else {
            // A corrupt state; the tombstone below still remembers it.
            return Vec::new();
        };
        space.members.remove(executor_id);
        // A pin goes with its executor: a pin is to one registration.
        let pinned: Vec<ShardId> = space
            .pins
            .iter()
            .filter(|(_, pinned_to)| pinned_to.as_str() == executor_id)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in pinned {
            space.pins.remove(&shard);
        }
        let mut freed = Vec::new();
        let mut retarget = Vec::new();
        for &shard in &executor.owned_shards {
            let Some(entry) = shard_index(shard).and_then(|index| space.shards.get_mut(index))
            else {
                continue;
            };
            entry.owner = None;
            space.releasing.remove(&shard);
            match entry.handoff.take() {
                Some(Handoff {
                    to: Some(target), ..
                }) => retarget.push((shard, target)),
                _ => freed.push(shard),
            }
        }
        // Found first and then changed one by one: the shard table shares its structure with
        // earlier copies (a snapshot being written), so touching every entry would copy it all.
        let targeted: Vec<ShardId> = space
            .releasing()
            .filter(|(_, handoff)| handoff.to.as_deref() == Some(executor_id))
            .map(|(entry, _)| entry.id)
            .collect();
        for shard in targeted {
            if let Some(handoff) = shard_index(shard)
                .and_then(|index| space.shards.get_mut(index))
                .and_then(|entry| entry.handoff.as_mut())
            {
                handoff.to = None;
            }
        }
        for (shard, target) in retarget {
            self.give_to(namespace, shard, &target, effects);
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
