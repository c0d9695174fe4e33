//! The newest conversion in the chain of schemas: schema 10 (`super::v10`, frozen) and this
//! build's types (schema 11), up (`From`, always) and down (`TryFrom`, when schema 10 can express
//! the value). Older schemas reach this build through schema 10 (`crate::lease::chain` chains
//! them).
//!
//! Schema 10 knows no namespace placement settings (P18.4): up, every namespace follows the
//! managers' flags (its placement is empty); down, a value is expressible only if no namespace
//! and no command sets one.
//!
//! When a schema 12 changes this build's types, schema 11's are frozen in a `v11` module and
//! these conversions move there, between schemas 10 and 11; this file then converts between
//! schema 11 and the new types. Nothing else changes: a frozen module never mentions a newer
//! schema.

use super::schema::{NotExpressible, NAMESPACES_SCHEMA};
use super::v10::{
    AuditRecord, ClusterConfig, Command, Executor, Handoff, LapsedLease, LeaseState,
    MembershipChange, Move, Namespace, OperatorAction, Registration, Renewal, Shard, Tombstone,
    TombstoneReason,
};

/// Refuses placement settings that are not empty (schema 10 has none).
fn no_placement(placement: &super::PlacementOverrides) -> Result<(), NotExpressible> {
    if placement.is_empty() {
        Ok(())
    } else {
        Err(NotExpressible(
            "a namespace's placement settings first appear in schema 11",
        ))
    }
}

// ---- Schema 10 → this build ----

impl From<Command> for super::Command {
    fn from(command: Command) -> Self {
        use super::Command as Now;
        match command {
            Command::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            } => Now::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            },
            Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            } => Now::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            },
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
            } => Now::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
                namespace,
            },
            Command::Renew { now_ms, renewals } => Now::Renew {
                now_ms,
                renewals: renewals.into_iter().map(Into::into).collect(),
            },
            Command::Deregister {
                now_ms,
                executor_id,
            } => Now::Deregister {
                now_ms,
                executor_id,
            },
            Command::Reap {
                now_ms,
                executor_ids,
            } => Now::Reap {
                now_ms,
                executor_ids,
            },
            Command::Rebalance {
                now_ms,
                planned_at,
                namespace,
                moves,
            } => Now::Rebalance {
                now_ms,
                planned_at,
                namespace,
                moves: moves.into_iter().map(Into::into).collect(),
            },
            Command::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            } => Now::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            },
            Command::CompleteHandoffs { now_ms } => Now::CompleteHandoffs { now_ms },
            Command::SetDraining {
                now_ms,
                executor_id,
                draining,
            } => Now::SetDraining {
                now_ms,
                executor_id,
                draining,
            },
            Command::SetClusterVersion {
                now_ms,
                cluster_version,
            } => Now::SetClusterVersion {
                now_ms,
                cluster_version,
            },
            Command::Operator {
                now_ms,
                actor,
                action,
            } => Now::Operator {
                now_ms,
                actor,
                action: action.into(),
            },
            Command::RegisterMany {
                now_ms,
                registrations,
            } => Now::RegisterMany {
                now_ms,
                registrations: registrations.into_iter().map(Into::into).collect(),
            },
            Command::ReserveLeases {
                now_ms,
                executor_ids,
            } => Now::ReserveLeases {
                now_ms,
                executor_ids,
            },
            Command::ReapLapsed { now_ms, leases } => Now::ReapLapsed {
                now_ms,
                leases: leases
                    .into_iter()
                    .map(|lease| super::LapsedLease {
                        executor_id: lease.executor_id,
                        judged_expiry_ms: lease.judged_expiry_ms,
                    })
                    .collect(),
            },
        }
    }
}

impl From<Registration> for super::Registration {
    fn from(r: Registration) -> Self {
        Self {
            incarnation: r.incarnation,
            address: r.address,
            name: r.name,
            credential_sha256: r.credential_sha256,
            capacity: r.capacity,
            app_version: r.app_version,
            labels: r.labels,
            namespace: r.namespace,
        }
    }
}

impl From<OperatorAction> for super::OperatorAction {
    fn from(action: OperatorAction) -> Self {
        use super::OperatorAction as Now;
        match action {
            OperatorAction::SetDraining {
                executor_id,
                draining,
            } => Now::SetDraining {
                executor_id,
                draining,
            },
            OperatorAction::Remove { executor_id } => Now::Remove { executor_id },
            OperatorAction::SetMaintenance { on } => Now::SetMaintenance { on },
            OperatorAction::MoveShard {
                namespace,
                shard,
                to,
            } => Now::MoveShard {
                namespace,
                shard,
                to,
            },
            OperatorAction::Pin {
                namespace,
                shard,
                executor_id,
            } => Now::Pin {
                namespace,
                shard,
                executor_id,
            },
            // Schema 10's namespaces follow the managers' flags.
            OperatorAction::CreateNamespace {
                name,
                shard_count,
                lease_duration_ms,
                max_executors,
            } => Now::CreateNamespace {
                name,
                shard_count,
                lease_duration_ms,
                max_executors,
                placement: super::PlacementOverrides::default(),
            },
            OperatorAction::SetNamespace {
                name,
                lease_duration_ms,
                max_executors,
            } => Now::SetNamespace {
                name,
                lease_duration_ms,
                max_executors,
                placement: super::PlacementOverrides::default(),
            },
            OperatorAction::DeleteNamespace { name } => Now::DeleteNamespace { name },
            OperatorAction::Membership { change } => Now::Membership {
                change: match change {
                    MembershipChange::Added { node_id, address } => {
                        super::MembershipChange::Added { node_id, address }
                    }
                    MembershipChange::Removed { node_id } => {
                        super::MembershipChange::Removed { node_id }
                    }
                },
            },
        }
    }
}

impl From<Namespace> for super::Namespace {
    fn from(namespace: Namespace) -> Self {
        Self {
            config: namespace.config.into(),
            max_executors: namespace.max_executors,
            // Schema 10's namespaces follow the managers' flags.
            placement: super::PlacementOverrides::default(),
            created_revision: namespace.created_revision,
            assignment_revision: namespace.assignment_revision,
            shards: namespace.shards.into_iter().map(Into::into).collect(),
            pins: namespace.pins.into_iter().collect(),
            // Derived, rebuilt by `rebuild_indexes`.
            releasing: Default::default(),
            members: Default::default(),
        }
    }
}

impl From<LeaseState> for super::LeaseState {
    fn from(state: LeaseState) -> Self {
        let mut migrated = super::LeaseState {
            namespaces: state
                .namespaces
                .into_iter()
                .map(|(name, namespace)| (name, super::Namespace::from(namespace)))
                .collect(),
            retired_epochs: state.retired_epochs.into_iter().collect(),
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .into_iter()
                .map(|(id, e)| {
                    let executor = super::Executor {
                        id: e.id,
                        incarnation: e.incarnation,
                        name: e.name,
                        address: e.address,
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
                        lease_reserved_until_ms: e.lease_reserved_until_ms,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards.into_iter().collect(),
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: e.capacity,
                        app_version: e.app_version,
                        labels: e.labels,
                        namespace: e.namespace,
                    };
                    (id, executor)
                })
                .collect(),
            tombstones: state
                .tombstones
                .into_iter()
                .map(|(id, t)| (id, super::Tombstone::from(t)))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            audit: state
                .audit
                .into_iter()
                .map(|record| super::AuditRecord {
                    revision: record.revision,
                    at_ms: record.at_ms,
                    actor: record.actor,
                    action: record.action.into(),
                })
                .collect(),
            next_executor_number: state.next_executor_number,
            by_incarnation: Default::default(),
        };
        migrated.rebuild_indexes();
        migrated
    }
}

impl From<Renewal> for super::Renewal {
    fn from(r: Renewal) -> Self {
        Self {
            executor_id: r.executor_id,
            claims: r.claims,
            revision: r.revision,
        }
    }
}

impl From<Move> for super::Move {
    fn from(m: Move) -> Self {
        Self {
            shard: m.shard,
            to: m.to,
        }
    }
}

impl From<ClusterConfig> for super::ClusterConfig {
    fn from(c: ClusterConfig) -> Self {
        Self {
            shard_count: c.shard_count,
            lease_duration_ms: c.lease_duration_ms,
        }
    }
}

impl From<Shard> for super::Shard {
    fn from(s: Shard) -> Self {
        Self {
            id: s.id,
            owner: s.owner,
            epoch: s.epoch,
            handoff: s.handoff.map(|h| super::Handoff {
                to: h.to,
                revoke_revision: h.revoke_revision,
                from_grant_expiry_ms: h.from_grant_expiry_ms,
            }),
        }
    }
}

impl From<Tombstone> for super::Tombstone {
    fn from(t: Tombstone) -> Self {
        Self {
            executor_id: t.executor_id,
            incarnation: t.incarnation,
            reason: match t.reason {
                TombstoneReason::Deregistered => super::TombstoneReason::Deregistered,
                TombstoneReason::Reaped => super::TombstoneReason::Reaped,
            },
            removed_revision: t.removed_revision,
            removed_at_ms: t.removed_at_ms,
        }
    }
}

// ---- This build → schema 10, when schema 10 can express it ----

impl TryFrom<&super::Command> for Command {
    type Error = NotExpressible;

    fn try_from(command: &super::Command) -> Result<Self, NotExpressible> {
        use super::Command as Now;
        Ok(match command.clone() {
            Now::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            } => Command::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            },
            Now::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            } => Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            },
            Now::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
                namespace,
            } => Command::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
                namespace,
            },
            Now::RegisterMany {
                now_ms,
                registrations,
            } => Command::RegisterMany {
                now_ms,
                registrations: registrations.iter().map(Into::into).collect(),
            },
            Now::ReserveLeases {
                now_ms,
                executor_ids,
            } => Command::ReserveLeases {
                now_ms,
                executor_ids,
            },
            Now::ReapLapsed { now_ms, leases } => Command::ReapLapsed {
                now_ms,
                leases: leases
                    .into_iter()
                    .map(|lease| LapsedLease {
                        executor_id: lease.executor_id,
                        judged_expiry_ms: lease.judged_expiry_ms,
                    })
                    .collect(),
            },
            Now::Renew { now_ms, renewals } => Command::Renew {
                now_ms,
                renewals: renewals.iter().map(Into::into).collect(),
            },
            Now::Deregister {
                now_ms,
                executor_id,
            } => Command::Deregister {
                now_ms,
                executor_id,
            },
            Now::Reap {
                now_ms,
                executor_ids,
            } => Command::Reap {
                now_ms,
                executor_ids,
            },
            Now::Rebalance {
                now_ms,
                planned_at,
                namespace,
                moves,
            } => Command::Rebalance {
                now_ms,
                planned_at,
                namespace,
                moves: moves.iter().map(Into::into).collect(),
            },
            Now::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            } => Command::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            },
            Now::CompleteHandoffs { now_ms } => Command::CompleteHandoffs { now_ms },
            Now::SetDraining {
                now_ms,
                executor_id,
                draining,
            } => Command::SetDraining {
                now_ms,
                executor_id,
                draining,
            },
            Now::Operator {
                now_ms,
                actor,
                action,
            } => Command::Operator {
                now_ms,
                actor,
                action: (&action).try_into()?,
            },
            // A raise past schema 10 is for replicas of that schema only (see
            // `required_schema`).
            Now::SetClusterVersion {
                cluster_version, ..
            } if cluster_version > NAMESPACES_SCHEMA => {
                return Err(NotExpressible(
                    "a raise of the cluster version above 10 is not expressible in schema 10",
                ))
            }
            Now::SetClusterVersion {
                now_ms,
                cluster_version,
            } => Command::SetClusterVersion {
                now_ms,
                cluster_version,
            },
        })
    }
}

impl TryFrom<&super::OperatorAction> for OperatorAction {
    type Error = NotExpressible;

    fn try_from(action: &super::OperatorAction) -> Result<Self, NotExpressible> {
        use super::OperatorAction as Now;
        Ok(match action.clone() {
            Now::SetDraining {
                executor_id,
                draining,
            } => OperatorAction::SetDraining {
                executor_id,
                draining,
            },
            Now::Remove { executor_id } => OperatorAction::Remove { executor_id },
            Now::SetMaintenance { on } => OperatorAction::SetMaintenance { on },
            Now::MoveShard {
                namespace,
                shard,
                to,
            } => OperatorAction::MoveShard {
                namespace,
                shard,
                to,
            },
            Now::Pin {
                namespace,
                shard,
                executor_id,
            } => OperatorAction::Pin {
                namespace,
                shard,
                executor_id,
            },
            Now::CreateNamespace {
                name,
                shard_count,
                lease_duration_ms,
                max_executors,
                placement,
            } => {
                no_placement(&placement)?;
                OperatorAction::CreateNamespace {
                    name,
                    shard_count,
                    lease_duration_ms,
                    max_executors,
                }
            }
            Now::SetNamespace {
                name,
                lease_duration_ms,
                max_executors,
                placement,
            } => {
                no_placement(&placement)?;
                OperatorAction::SetNamespace {
                    name,
                    lease_duration_ms,
                    max_executors,
                }
            }
            Now::DeleteNamespace { name } => OperatorAction::DeleteNamespace { name },
            Now::Membership { change } => OperatorAction::Membership {
                change: match change {
                    super::MembershipChange::Added { node_id, address } => {
                        MembershipChange::Added { node_id, address }
                    }
                    super::MembershipChange::Removed { node_id } => {
                        MembershipChange::Removed { node_id }
                    }
                },
            },
        })
    }
}

impl TryFrom<&super::Namespace> for Namespace {
    type Error = NotExpressible;

    fn try_from(namespace: &super::Namespace) -> Result<Self, NotExpressible> {
        no_placement(&namespace.placement)?;
        Ok(Self {
            config: (&namespace.config).into(),
            max_executors: namespace.max_executors,
            created_revision: namespace.created_revision,
            assignment_revision: namespace.assignment_revision,
            shards: namespace.shards.iter().map(Into::into).collect(),
            pins: namespace
                .pins
                .iter()
                .map(|(shard, executor_id)| (*shard, executor_id.clone()))
                .collect(),
        })
    }
}

impl TryFrom<&super::LeaseState> for LeaseState {
    type Error = NotExpressible;

    fn try_from(state: &super::LeaseState) -> Result<Self, NotExpressible> {
        if state.cluster_version > NAMESPACES_SCHEMA {
            return Err(NotExpressible(
                "a cluster version above 10 is not expressible in schema 10",
            ));
        }
        Ok(LeaseState {
            namespaces: state
                .namespaces
                .iter()
                .map(|(name, namespace)| Ok((name.clone(), namespace.try_into()?)))
                .collect::<Result<_, NotExpressible>>()?,
            retired_epochs: state
                .retired_epochs
                .iter()
                .map(|(name, epoch)| (name.clone(), *epoch))
                .collect(),
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .iter()
                .map(|(id, e)| {
                    let executor = Executor {
                        id: e.id.clone(),
                        incarnation: e.incarnation.clone(),
                        name: e.name.clone(),
                        address: e.address.clone(),
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
                        lease_reserved_until_ms: e.lease_reserved_until_ms,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards.iter().copied().collect(),
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: e.capacity,
                        app_version: e.app_version.clone(),
                        labels: e.labels.clone(),
                        namespace: e.namespace.clone(),
                    };
                    (id.clone(), executor)
                })
                .collect(),
            tombstones: state
                .tombstones
                .iter()
                .map(|(id, t)| (id.clone(), t.into()))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            audit: state
                .audit
                .iter()
                .map(|record| {
                    Ok(AuditRecord {
                        revision: record.revision,
                        at_ms: record.at_ms,
                        actor: record.actor.clone(),
                        action: (&record.action).try_into()?,
                    })
                })
                .collect::<Result<_, NotExpressible>>()?,
            next_executor_number: state.next_executor_number,
        })
    }
}

impl From<&super::Registration> for Registration {
    fn from(r: &super::Registration) -> Self {
        Self {
            incarnation: r.incarnation.clone(),
            address: r.address.clone(),
            name: r.name.clone(),
            credential_sha256: r.credential_sha256,
            capacity: r.capacity,
            app_version: r.app_version.clone(),
            labels: r.labels.clone(),
            namespace: r.namespace.clone(),
        }
    }
}

impl From<&super::Renewal> for Renewal {
    fn from(r: &super::Renewal) -> Self {
        Self {
            executor_id: r.executor_id.clone(),
            claims: r.claims.clone(),
            revision: r.revision,
        }
    }
}

impl From<&super::Move> for Move {
    fn from(m: &super::Move) -> Self {
        Self {
            shard: m.shard,
            to: m.to.clone(),
        }
    }
}

impl From<&super::ClusterConfig> for ClusterConfig {
    fn from(c: &super::ClusterConfig) -> Self {
        Self {
            shard_count: c.shard_count,
            lease_duration_ms: c.lease_duration_ms,
        }
    }
}

impl From<&super::Shard> for Shard {
    fn from(s: &super::Shard) -> Self {
        Self {
            id: s.id,
            owner: s.owner.clone(),
            epoch: s.epoch,
            handoff: s.handoff.as_ref().map(|h| Handoff {
                to: h.to.clone(),
                revoke_revision: h.revoke_revision,
                from_grant_expiry_ms: h.from_grant_expiry_ms,
            }),
        }
    }
}

impl From<&super::Tombstone> for Tombstone {
    fn from(t: &super::Tombstone) -> Self {
        Self {
            executor_id: t.executor_id.clone(),
            incarnation: t.incarnation.clone(),
            reason: match t.reason {
                super::TombstoneReason::Deregistered => TombstoneReason::Deregistered,
                super::TombstoneReason::Reaped => TombstoneReason::Reaped,
            },
            removed_revision: t.removed_revision,
            removed_at_ms: t.removed_at_ms,
        }
    }
}
