//! The newest conversion in the chain of schemas: schema 9 (`super::v9`, frozen) and this build's
//! types (schema 10), up (`From`, always) and down (`TryFrom`, when schema 9 can express the
//! value). Older schemas reach this build through schema 9 (`crate::lease::chain` chains them).
//!
//! Schema 9 knows one shard space: up, it becomes the `default` namespace and every executor
//! and command is of it; down, a value is expressible only if it is all of `default` (P18.1).
//!
//! When a schema 11 changes this build's types, schema 10's are frozen in a `v10` module and
//! these conversions move there, between schemas 9 and 10; this file then converts between
//! schema 10 and the new types. Nothing else changes: a frozen module never mentions a newer
//! schema.

use leasehold_api::wire::DEFAULT_NAMESPACE;

use super::schema::{NotExpressible, LEASE_RESERVATION_SCHEMA};
use super::v9::{
    AuditRecord, ClusterConfig, Command, Executor, Handoff, LapsedLease, LeaseState,
    MembershipChange, Move, OperatorAction, Registration, Renewal, Shard, Tombstone,
    TombstoneReason,
};

/// Refuses a namespace other than `default` (schema 9 has no other).
fn of_default(namespace: &str, what: &'static str) -> Result<(), NotExpressible> {
    if namespace == DEFAULT_NAMESPACE {
        Ok(())
    } else {
        Err(NotExpressible(what))
    }
}

// ---- Schema 9 → this build ----

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
                namespace: DEFAULT_NAMESPACE.to_owned(),
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
                namespace: DEFAULT_NAMESPACE.to_owned(),
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
            namespace: DEFAULT_NAMESPACE.to_owned(),
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
            OperatorAction::MoveShard { shard, to } => Now::MoveShard {
                namespace: DEFAULT_NAMESPACE.to_owned(),
                shard,
                to,
            },
            OperatorAction::Pin { shard, executor_id } => Now::Pin {
                namespace: DEFAULT_NAMESPACE.to_owned(),
                shard,
                executor_id,
            },
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
            } => {
                of_default(
                    &namespace,
                    "a move in a namespace first appears in schema 10",
                )?;
                OperatorAction::MoveShard { shard, to }
            }
            Now::Pin {
                namespace,
                shard,
                executor_id,
            } => {
                of_default(
                    &namespace,
                    "a pin in a namespace first appears in schema 10",
                )?;
                OperatorAction::Pin { shard, executor_id }
            }
            Now::CreateNamespace { .. }
            | Now::SetNamespace { .. }
            | Now::DeleteNamespace { .. } => {
                return Err(NotExpressible("namespaces first appear in schema 10"))
            }
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

impl From<LeaseState> for super::LeaseState {
    fn from(state: LeaseState) -> Self {
        // Schema 9's one shard space is `default`, its plans made against the state's one
        // assignment revision.
        let namespaces = state
            .config
            .map(|config| {
                let default = super::Namespace {
                    config: config.into(),
                    max_executors: None,
                    created_revision: 0,
                    assignment_revision: state.assignment_revision,
                    shards: state.shards.into_iter().map(Into::into).collect(),
                    pins: state.pins.into_iter().collect(),
                    releasing: Default::default(),
                    members: Default::default(),
                };
                (DEFAULT_NAMESPACE.to_owned(), default)
            })
            .into_iter()
            .collect();
        let mut migrated = super::LeaseState {
            namespaces,
            retired_epochs: Default::default(),
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
                        namespace: DEFAULT_NAMESPACE.to_owned(),
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

// ---- This build → schema 9, when schema 9 can express it ----

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
            } => {
                of_default(
                    &namespace,
                    "a registration into a namespace first appears in schema 10",
                )?;
                Command::Register {
                    now_ms,
                    incarnation,
                    address,
                    name,
                    credential_sha256,
                    capacity,
                    app_version,
                    labels,
                }
            }
            Now::RegisterMany {
                now_ms,
                registrations,
            } => Command::RegisterMany {
                now_ms,
                registrations: registrations
                    .iter()
                    .map(TryInto::try_into)
                    .collect::<Result<_, _>>()?,
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
            } => {
                of_default(
                    &namespace,
                    "a plan for a namespace first appears in schema 10",
                )?;
                Command::Rebalance {
                    now_ms,
                    planned_at,
                    moves: moves.iter().map(Into::into).collect(),
                }
            }
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
            // A raise past schema 9 is for replicas of that schema only (see `required_schema`).
            Now::SetClusterVersion {
                cluster_version, ..
            } if cluster_version > LEASE_RESERVATION_SCHEMA => {
                return Err(NotExpressible(
                    "a raise of the cluster version above 9 is not expressible in schema 9",
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
        if state.cluster_version > LEASE_RESERVATION_SCHEMA {
            return Err(NotExpressible(
                "a cluster version above 9 is not expressible in schema 9",
            ));
        }
        if state
            .namespaces
            .keys()
            .any(|name| name != DEFAULT_NAMESPACE)
            || !state.retired_epochs.is_empty()
        {
            return Err(NotExpressible("namespaces first appear in schema 10"));
        }
        let default = state.namespaces.get(DEFAULT_NAMESPACE);
        if default.is_some_and(|default| default.max_executors.is_some()) {
            return Err(NotExpressible(
                "a namespace's executor bound first appears in schema 10",
            ));
        }
        if state
            .executors
            .values()
            .any(|e| e.namespace != DEFAULT_NAMESPACE)
        {
            return Err(NotExpressible(
                "an executor of a namespace first appears in schema 10",
            ));
        }
        Ok(LeaseState {
            config: default.map(|default| (&default.config).into()),
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
                    };
                    (id.clone(), executor)
                })
                .collect(),
            shards: default
                .map(|default| default.shards.iter().map(Into::into).collect())
                .unwrap_or_default(),
            tombstones: state
                .tombstones
                .iter()
                .map(|(id, t)| (id.clone(), t.into()))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            pins: default
                .map(|default| {
                    default
                        .pins
                        .iter()
                        .map(|(shard, executor_id)| (*shard, executor_id.clone()))
                        .collect()
                })
                .unwrap_or_default(),
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

impl TryFrom<&super::Registration> for Registration {
    type Error = NotExpressible;

    fn try_from(r: &super::Registration) -> Result<Self, NotExpressible> {
        of_default(
            &r.namespace,
            "a registration into a namespace first appears in schema 10",
        )?;
        Ok(Self {
            incarnation: r.incarnation.clone(),
            address: r.address.clone(),
            name: r.name.clone(),
            credential_sha256: r.credential_sha256,
            capacity: r.capacity,
            app_version: r.app_version.clone(),
            labels: r.labels.clone(),
        })
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
