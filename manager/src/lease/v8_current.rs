//! The newest conversion in the chain of schemas: schema 8 (`super::v8`, frozen) and this build's
//! types (schema 9), up (`From`, always) and down (`TryFrom`, when schema 8 can express the
//! value). Older schemas reach this build through schema 8 (`crate::lease::chain` chains them).
//!
//! When a schema 10 changes this build's types, schema 9's are frozen in a `v9` module and these
//! conversions move there, between schemas 8 and 9; this file then converts between schema 9 and
//! the new types. Nothing else changes: a frozen module never mentions a newer schema.

use super::schema::{NotExpressible, GROUP_REGISTRATION_SCHEMA};
use super::v8::{
    AuditRecord, ClusterConfig, Command, Executor, Handoff, LeaseState, MembershipChange, Move,
    OperatorAction, Registration, Renewal, Shard, Tombstone, TombstoneReason,
};

// ---- Schema 8 → this build ----

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
            } => Now::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
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
                moves,
            } => Now::Rebalance {
                now_ms,
                planned_at,
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
            OperatorAction::MoveShard { shard, to } => Now::MoveShard { shard, to },
            OperatorAction::Pin { shard, executor_id } => Now::Pin { shard, executor_id },
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

impl From<&super::OperatorAction> for OperatorAction {
    fn from(action: &super::OperatorAction) -> Self {
        use super::OperatorAction as Now;
        match action.clone() {
            Now::SetDraining {
                executor_id,
                draining,
            } => OperatorAction::SetDraining {
                executor_id,
                draining,
            },
            Now::Remove { executor_id } => OperatorAction::Remove { executor_id },
            Now::SetMaintenance { on } => OperatorAction::SetMaintenance { on },
            Now::MoveShard { shard, to } => OperatorAction::MoveShard { shard, to },
            Now::Pin { shard, executor_id } => OperatorAction::Pin { shard, executor_id },
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
        }
    }
}

impl From<LeaseState> for super::LeaseState {
    fn from(state: LeaseState) -> Self {
        let mut migrated = super::LeaseState {
            config: state.config.map(Into::into),
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
                        // Schema 8 reserved no lease time ahead of its grants (P6.6).
                        lease_reserved_until_ms: 0,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards.into_iter().collect(),
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: e.capacity,
                        app_version: e.app_version,
                        labels: e.labels,
                    };
                    (id, executor)
                })
                .collect(),
            shards: state.shards.into_iter().map(Into::into).collect(),
            tombstones: state
                .tombstones
                .into_iter()
                .map(|(id, t)| (id, super::Tombstone::from(t)))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            pins: state.pins.into_iter().collect(),
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
            releasing: Default::default(),
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

// ---- This build → schema 8, when schema 8 can express it ----

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
            } => Command::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
            },
            Now::RegisterMany {
                now_ms,
                registrations,
            } => Command::RegisterMany {
                now_ms,
                registrations: registrations.iter().map(Into::into).collect(),
            },
            Now::ReserveLeases { .. } => {
                return Err(NotExpressible(
                    "lease reservations first appear in schema 9",
                ))
            }
            Now::ReapLapsed { .. } => {
                return Err(NotExpressible(
                    "reaping by the leader's judgment first appears in schema 9",
                ))
            }
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
                moves,
            } => Command::Rebalance {
                now_ms,
                planned_at,
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
                action: (&action).into(),
            },
            // A raise past schema 8 is for replicas of that schema only (see `required_schema`).
            Now::SetClusterVersion {
                cluster_version, ..
            } if cluster_version > GROUP_REGISTRATION_SCHEMA => {
                return Err(NotExpressible(
                    "a raise of the cluster version above 8 is not expressible in schema 8",
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

impl TryFrom<&super::LeaseState> for LeaseState {
    type Error = NotExpressible;

    fn try_from(state: &super::LeaseState) -> Result<Self, NotExpressible> {
        if state.cluster_version > GROUP_REGISTRATION_SCHEMA {
            return Err(NotExpressible(
                "a cluster version above 8 is not expressible in schema 8",
            ));
        }
        if state
            .executors
            .values()
            .any(|e| e.lease_reserved_until_ms != 0)
        {
            return Err(NotExpressible(
                "an executor's lease reservation is not expressible in schema 8",
            ));
        }
        Ok(LeaseState {
            config: state.config.as_ref().map(Into::into),
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
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards.iter().copied().collect(),
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: e.capacity,
                        app_version: e.app_version.clone(),
                        labels: e.labels.clone(),
                    };
                    (id.clone(), executor)
                })
                .collect(),
            shards: state.shards.iter().map(Into::into).collect(),
            tombstones: state
                .tombstones
                .iter()
                .map(|(id, t)| (id.clone(), t.into()))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            pins: state
                .pins
                .iter()
                .map(|(shard, executor_id)| (*shard, executor_id.clone()))
                .collect(),
            audit: state
                .audit
                .iter()
                .map(|record| AuditRecord {
                    revision: record.revision,
                    at_ms: record.at_ms,
                    actor: record.actor.clone(),
                    action: (&record.action).into(),
                })
                .collect(),
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
