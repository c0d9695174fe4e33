//! State schema 2: the replicated types exactly as release 0.1.0 encoded them (positional
//! bincode), frozen, and the one conversion between them and this build's: up (`From`, always)
//! and down (`TryFrom`, when 0.1.0 can express the value).
//!
//! Never change a type here: 0.1.0's records are what they are. A value 0.1.0 cannot express is
//! one that uses something it lacks (`Command::required_schema` names the same set), and is
//! refused with what.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use imbl::OrdMap;
use leasehold_api::wire::{is_default_namespace, DEFAULT_NAMESPACE};

use super::{NotExpressible, FIRST_RELEASE_SCHEMA};
use crate::lease::{self as current, Epoch, ExecutorId, ShardId, DEFAULT_CAPACITY};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewal {
    pub executor_id: ExecutorId,
    pub claims: Vec<(ShardId, Epoch)>,
    pub revision: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub shard: ShardId,
    pub to: ExecutorId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Init {
        now_ms: u64,
        shard_count: u32,
        lease_duration_ms: u64,
    },
    SetLeaseDuration {
        now_ms: u64,
        lease_duration_ms: u64,
    },
    Register {
        now_ms: u64,
        incarnation: String,
        address: String,
        name: Option<String>,
    },
    Renew {
        now_ms: u64,
        renewals: Vec<Renewal>,
    },
    Deregister {
        now_ms: u64,
        executor_id: ExecutorId,
    },
    Reap {
        now_ms: u64,
        executor_ids: Vec<ExecutorId>,
    },
    Rebalance {
        now_ms: u64,
        planned_at: u64,
        moves: Vec<Move>,
    },
    Release {
        now_ms: u64,
        executor_id: ExecutorId,
        shards: Vec<ShardId>,
        revoke_revision: u64,
    },
    CompleteHandoffs {
        now_ms: u64,
    },
    SetDraining {
        now_ms: u64,
        executor_id: ExecutorId,
        draining: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    pub shard_count: u32,
    pub lease_duration_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executor {
    pub id: ExecutorId,
    pub incarnation: String,
    pub name: Option<String>,
    pub address: String,
    pub lease_expiry_ms: u64,
    pub lease_ttl_told_ms: u64,
    pub registered_revision: u64,
    pub owned_shards: BTreeSet<ShardId>,
    pub draining: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub to: Option<ExecutorId>,
    pub revoke_revision: u64,
    pub from_grant_expiry_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub id: ShardId,
    pub owner: Option<ExecutorId>,
    pub epoch: Epoch,
    pub handoff: Option<Handoff>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TombstoneReason {
    Deregistered,
    Reaped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub executor_id: ExecutorId,
    pub incarnation: String,
    pub reason: TombstoneReason,
    pub removed_revision: u64,
    pub removed_at_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseState {
    pub config: Option<ClusterConfig>,
    pub revision: u64,
    pub assignment_revision: u64,
    pub executors: BTreeMap<ExecutorId, Executor>,
    pub shards: Vec<Shard>,
    pub tombstones: BTreeMap<ExecutorId, Tombstone>,
    pub longest_lease_told_ms: u64,
}

// ---- 0.1.0 → this build ----

/// A match that converts the commands whose fields 0.1.0 and this build share one for one, field
/// by field, listed once for both directions; `$arms` handle the rest.
macro_rules! convert_command {
    ($command:expr, $from:ident => $to:ident, { $($arms:tt)* }) => {
        match $command {
            $from::Init { now_ms, shard_count, lease_duration_ms } =>
                $to::Init { now_ms, shard_count, lease_duration_ms },
            $from::SetLeaseDuration { now_ms, lease_duration_ms } =>
                $to::SetLeaseDuration { now_ms, lease_duration_ms },
            $from::Deregister { now_ms, executor_id } => $to::Deregister { now_ms, executor_id },
            $from::Reap { now_ms, executor_ids } => $to::Reap { now_ms, executor_ids },
            $from::Release { now_ms, executor_id, shards, revoke_revision } =>
                $to::Release { now_ms, executor_id, shards, revoke_revision },
            $from::CompleteHandoffs { now_ms } => $to::CompleteHandoffs { now_ms },
            $from::SetDraining { now_ms, executor_id, draining } =>
                $to::SetDraining { now_ms, executor_id, draining },
            $($arms)*
        }
    };
}

impl From<Command> for current::Command {
    fn from(command: Command) -> Self {
        use current::Command as New;
        convert_command!(command, Command => New, {
            // 0.1.0's executors registered with nothing newer: no credential (P13.5), capacity
            // 1, no application version, no labels, into `default`.
            Command::Register { now_ms, incarnation, address, name } => New::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256: None,
                capacity: DEFAULT_CAPACITY,
                app_version: None,
                labels: Default::default(),
                namespace: DEFAULT_NAMESPACE.to_owned(),
                follows_generations: false,
            },
            Command::Renew { now_ms, renewals } => New::Renew {
                now_ms,
                renewals: renewals.into_iter().map(Into::into).collect(),
            },
            Command::Rebalance { now_ms, planned_at, moves } => New::Rebalance {
                now_ms,
                planned_at,
                namespace: DEFAULT_NAMESPACE.to_owned(),
                moves: moves.into_iter().map(Into::into).collect(),
            },
        })
    }
}

impl From<Renewal> for current::Renewal {
    fn from(r: Renewal) -> Self {
        Self {
            executor_id: r.executor_id,
            claims: r.claims,
            revision: r.revision,
            ready: Vec::new(),
        }
    }
}

impl From<Move> for current::Move {
    fn from(m: Move) -> Self {
        Self {
            shard: m.shard,
            to: m.to,
        }
    }
}

impl From<ClusterConfig> for current::ClusterConfig {
    fn from(c: ClusterConfig) -> Self {
        Self {
            shard_count: c.shard_count,
            lease_duration_ms: c.lease_duration_ms,
        }
    }
}

impl From<Shard> for current::Shard {
    fn from(s: Shard) -> Self {
        Self {
            id: s.id,
            owner: s.owner,
            epoch: s.epoch,
            handoff: s.handoff.map(|h| current::Handoff {
                to: h.to,
                revoke_revision: h.revoke_revision,
                from_grant_expiry_ms: h.from_grant_expiry_ms,
            }),
            secondaries: Vec::new(),
        }
    }
}

impl From<Tombstone> for current::Tombstone {
    fn from(t: Tombstone) -> Self {
        Self {
            executor_id: t.executor_id,
            incarnation: t.incarnation,
            reason: match t.reason {
                TombstoneReason::Deregistered => current::TombstoneReason::Deregistered,
                TombstoneReason::Reaped => current::TombstoneReason::Reaped,
            },
            removed_revision: t.removed_revision,
            removed_at_ms: t.removed_at_ms,
        }
    }
}

impl From<Executor> for current::Executor {
    fn from(e: Executor) -> Self {
        Self {
            id: e.id,
            incarnation: e.incarnation,
            name: e.name,
            address: e.address,
            lease_expiry_ms: e.lease_expiry_ms,
            lease_ttl_told_ms: e.lease_ttl_told_ms,
            lease_reserved_until_ms: 0,
            registered_revision: e.registered_revision,
            owned_shards: e.owned_shards.into_iter().collect(),
            draining: e.draining,
            credential_sha256: None,
            capacity: DEFAULT_CAPACITY,
            app_version: None,
            labels: Default::default(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            follows_generations: false,
        }
    }
}

impl From<LeaseState> for current::LeaseState {
    fn from(state: LeaseState) -> Self {
        // 0.1.0's one shard space is `default`, its plans made against the state's one
        // assignment revision; it had no cluster version, so its clusters are at schema 2.
        let namespaces = state
            .config
            .map(|config| {
                let default = current::Namespace {
                    config: config.into(),
                    max_executors: None,
                    placement: Default::default(),
                    replication: Default::default(),
                    created_revision: 0,
                    assignment_revision: state.assignment_revision,
                    readiness_revision: 0,
                    generation: 0,
                    widest_shard_count: 0,
                    reshard: None,
                    shards: state.shards.into_iter().map(Into::into).collect(),
                    pins: OrdMap::new(),
                    releasing: Default::default(),
                    members: Default::default(),
                    secondaries_of: Default::default(),
                    with_lost: Default::default(),
                };
                (DEFAULT_NAMESPACE.to_owned(), default)
            })
            .into_iter()
            .collect();
        let mut migrated = current::LeaseState {
            namespaces,
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .into_iter()
                .map(|(id, e)| (id, current::Executor::from(e)))
                .collect(),
            tombstones: state
                .tombstones
                .into_iter()
                .map(|(id, t)| (id, current::Tombstone::from(t)))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: FIRST_RELEASE_SCHEMA,
            ..current::LeaseState::default()
        };
        migrated.rebuild_indexes();
        migrated
    }
}

// ---- This build → 0.1.0, when it can express the value ----

fn only_default(namespace: &str, what: &'static str) -> Result<(), NotExpressible> {
    if is_default_namespace(namespace) {
        Ok(())
    } else {
        Err(NotExpressible(what))
    }
}

impl TryFrom<&current::Command> for Command {
    type Error = NotExpressible;

    fn try_from(command: &current::Command) -> Result<Self, NotExpressible> {
        use current::Command as New;
        Ok(convert_command!(command.clone(), New => Command, {
            New::Register {
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
            } => {
                if follows_generations {
                    return Err(NotExpressible(
                        "an executor that follows a change of layout is not in 0.1.0",
                    ));
                }
                registered_as_0_1_0_could(
                    credential_sha256.is_some(),
                    capacity,
                    app_version.is_some(),
                    labels.is_empty(),
                )?;
                only_default(&namespace, "a registration into a namespace is not in 0.1.0")?;
                Command::Register { now_ms, incarnation, address, name }
            }
            New::Renew { now_ms, renewals } => {
                if renewals.iter().any(|renewal| !renewal.ready.is_empty()) {
                    return Err(NotExpressible("ready secondaries (replicas) are not in 0.1.0"));
                }
                Command::Renew {
                    now_ms,
                    renewals: renewals.into_iter().map(Into::into).collect(),
                }
            }
            New::Rebalance { now_ms, planned_at, namespace, moves } => {
                only_default(&namespace, "a plan for a namespace is not in 0.1.0")?;
                Command::Rebalance {
                    now_ms,
                    planned_at,
                    moves: moves.into_iter().map(Into::into).collect(),
                }
            }
            New::SetClusterVersion { .. } => {
                return Err(NotExpressible("the cluster version is not in 0.1.0"))
            }
            New::PlaceSecondaries { .. } => {
                return Err(NotExpressible("secondaries (replicas) are not in 0.1.0"))
            }
            New::Reshard { .. } => return Err(NotExpressible("resharding is not in 0.1.0")),
            New::Operator { .. } => {
                return Err(NotExpressible("operator controls are not in 0.1.0"))
            }
            New::RegisterMany { .. } => {
                return Err(NotExpressible(
                    "registrations committed in one entry are not in 0.1.0",
                ))
            }
            New::ReserveLeases { .. } | New::ReapLapsed { .. } => {
                return Err(NotExpressible(
                    "lease reservations and reaping by the leader's judgment are not in 0.1.0",
                ))
            }
        }))
    }
}

impl From<current::Renewal> for Renewal {
    fn from(r: current::Renewal) -> Self {
        Self {
            executor_id: r.executor_id,
            claims: r.claims,
            revision: r.revision,
        }
    }
}

impl From<current::Move> for Move {
    fn from(m: current::Move) -> Self {
        Self {
            shard: m.shard,
            to: m.to,
        }
    }
}

/// Refuses an executor's registration of anything 0.1.0 lacks, naming it.
fn registered_as_0_1_0_could(
    has_credential: bool,
    capacity: u32,
    has_app_version: bool,
    no_labels: bool,
) -> Result<(), NotExpressible> {
    if has_credential {
        return Err(NotExpressible("an executor credential is not in 0.1.0"));
    }
    if capacity != DEFAULT_CAPACITY {
        return Err(NotExpressible(
            "an executor capacity other than 1 is not in 0.1.0",
        ));
    }
    if has_app_version {
        return Err(NotExpressible("an application version is not in 0.1.0"));
    }
    if !no_labels {
        return Err(NotExpressible("executor labels are not in 0.1.0"));
    }
    Ok(())
}

impl TryFrom<&current::Executor> for Executor {
    type Error = NotExpressible;

    fn try_from(e: &current::Executor) -> Result<Self, NotExpressible> {
        registered_as_0_1_0_could(
            e.credential_sha256.is_some(),
            e.capacity,
            e.app_version.is_some(),
            e.labels.is_empty(),
        )?;
        only_default(&e.namespace, "an executor of a namespace is not in 0.1.0")?;
        if e.lease_reserved_until_ms != 0 {
            return Err(NotExpressible("a lease reservation is not in 0.1.0"));
        }
        if e.follows_generations {
            return Err(NotExpressible(
                "an executor that follows a change of layout is not in 0.1.0",
            ));
        }
        Ok(Executor {
            id: e.id.clone(),
            incarnation: e.incarnation.clone(),
            name: e.name.clone(),
            address: e.address.clone(),
            lease_expiry_ms: e.lease_expiry_ms,
            lease_ttl_told_ms: e.lease_ttl_told_ms,
            registered_revision: e.registered_revision,
            owned_shards: e.owned_shards.iter().copied().collect(),
            draining: e.draining,
        })
    }
}

impl From<&current::Shard> for Shard {
    fn from(s: &current::Shard) -> Self {
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

impl From<&current::Tombstone> for Tombstone {
    fn from(t: &current::Tombstone) -> Self {
        Self {
            executor_id: t.executor_id.clone(),
            incarnation: t.incarnation.clone(),
            reason: match t.reason {
                current::TombstoneReason::Deregistered => TombstoneReason::Deregistered,
                current::TombstoneReason::Reaped => TombstoneReason::Reaped,
            },
            removed_revision: t.removed_revision,
            removed_at_ms: t.removed_at_ms,
        }
    }
}

impl TryFrom<&current::LeaseState> for LeaseState {
    type Error = NotExpressible;

    fn try_from(state: &current::LeaseState) -> Result<Self, NotExpressible> {
        if state.cluster_version > FIRST_RELEASE_SCHEMA {
            return Err(NotExpressible("a cluster version above 2 is not in 0.1.0"));
        }
        if state.maintenance || !state.audit.is_empty() {
            return Err(NotExpressible(
                "maintenance mode and the audit log (operator controls) are not in 0.1.0",
            ));
        }
        if state.next_executor_number != 0 {
            return Err(NotExpressible(
                "executor ids minted past their entry's index (registrations in one entry) are \
                 not in 0.1.0",
            ));
        }
        if !state.retired_epochs.is_empty()
            || state
                .namespaces
                .keys()
                .any(|name| !is_default_namespace(name))
        {
            return Err(NotExpressible("namespaces are not in 0.1.0"));
        }
        let (config, shards) = match state.namespaces.get(DEFAULT_NAMESPACE) {
            Some(default) => {
                if !default.replication.is_default()
                    || default
                        .shards
                        .iter()
                        .any(|shard| !shard.secondaries.is_empty())
                {
                    return Err(NotExpressible("replicas are not in 0.1.0"));
                }
                if default.generation != 0
                    || default.widest_shard_count != 0
                    || default.reshard.is_some()
                {
                    return Err(NotExpressible("resharding is not in 0.1.0"));
                }
                if default.max_executors.is_some() || !default.placement.is_empty() {
                    return Err(NotExpressible(
                        "a namespace's executor bound and placement settings are not in 0.1.0",
                    ));
                }
                if !default.pins.is_empty() {
                    return Err(NotExpressible(
                        "a pinned shard (an operator control) is not in 0.1.0",
                    ));
                }
                let config = ClusterConfig {
                    shard_count: default.config.shard_count,
                    lease_duration_ms: default.config.lease_duration_ms,
                };
                (
                    Some(config),
                    default.shards.iter().map(Into::into).collect(),
                )
            }
            None => (None, Vec::new()),
        };
        Ok(LeaseState {
            config,
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .iter()
                .map(|(id, e)| Ok((id.clone(), e.try_into()?)))
                .collect::<Result<_, NotExpressible>>()?,
            shards,
            tombstones: state
                .tombstones
                .iter()
                .map(|(id, t)| (id.clone(), t.into()))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
        })
    }
}
