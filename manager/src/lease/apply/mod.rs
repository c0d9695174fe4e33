//! Applying committed commands (P2.2, P2.4, P3, P4.4, P5, P7.2).
//!
//! Each handler either refuses without touching anything, or changes the state and stamps the
//! entry's log index as the revision (and as the assignment revision when owners, handoffs or
//! membership changed). Times are saturating: no input can overflow or panic.

mod handoffs;
mod leases;
mod namespaces;
mod operator;
mod registration;
mod replicas;
mod reshard;

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::{
    check_app_version, check_capacity, check_labels, check_namespace_name,
    check_namespace_settings, check_replica_settings, is_cluster_operator, Labels, ReplicaSettings,
    DEFAULT_NAMESPACE, MAX_ACTOR_BYTES, MAX_AUDIT_RECORDS, MAX_NAMESPACES, MAX_TOTAL_SHARDS,
};

use super::{
    AuditRecord, ClusterConfig, Command, Effects, Epoch, Executor, ExecutorId, Grant, Handoff,
    LapsedLease, LeaseState, Move, Namespace, OperatorAction, Outcome, PlacementOverrides,
    RefusalReason, RegisterResult, Registration, RenewResult, Renewal, Revoke, SecondaryChange,
    ShardId, Tombstone, TombstoneReason, MAX_SHARD_COUNT, MAX_TEXT_FIELD_BYTES, MAX_TOMBSTONES,
};

/// The entry a command applies in: its log index and the leader's stamp.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) index: u64,
    pub(super) now_ms: u64,
}

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
    follows_generations: bool,
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
            follows_generations: registration.follows_generations,
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
                follows_generations,
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
                    follows_generations: *follows_generations,
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
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            } => self.apply_release(
                Entry {
                    index: log_index,
                    now_ms: *now_ms,
                },
                executor_id,
                shards,
                *revoke_revision,
            ),
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
            Command::PlaceSecondaries {
                now_ms,
                planned_at,
                namespace,
                changes,
            } => self.apply_place_secondaries(
                Entry {
                    index: log_index,
                    now_ms: *now_ms,
                },
                *planned_at,
                namespace,
                changes,
            ),
            Command::Reshard { now_ms, namespace } => self.apply_reshard(
                Entry {
                    index: log_index,
                    now_ms: *now_ms,
                },
                namespace,
            ),
        }
    }

    /// Records that the entry at `log_index` changed the state.
    pub(super) fn touch(&mut self, log_index: u64) {
        self.revision = log_index;
    }

    /// Records that the entry at `log_index` changed owners, handoffs, pins or membership in
    /// `namespace`, which makes plans for it computed before it stale (P2.4).
    pub(super) fn touch_assignment(&mut self, log_index: u64, namespace: &str) {
        self.revision = log_index;
        self.assignment_revision = log_index;
        if let Some(space) = self.namespaces.get_mut(namespace) {
            space.assignment_revision = log_index;
        }
    }
}
