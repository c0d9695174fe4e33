//! The replicated state (P2.1) and its read-only views.

mod executor;
mod namespace;
mod space;

pub use executor::*;
pub use namespace::*;
pub use space::*;

use imbl::{OrdMap, OrdSet, Vector};
use serde::{Deserialize, Serialize};

use leasehold_api::wire::{ReplicaSettings, ReshardKind, DEFAULT_NAMESPACE};

use super::{Epoch, ExecutorId, OperatorAction, ShardId, MAX_TOMBSTONES};

/// The replicated lease state (P2.1). Fields are private: it changes only through
/// [`LeaseState::apply`], which keeps the shard table and the indexes in agreement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredLeaseState")]
pub struct LeaseState {
    /// The namespaces by name (P18.1): empty until the first `Init`, which creates `default`
    /// (every other command is refused before it); at most `MAX_NAMESPACES`.
    pub(super) namespaces: OrdMap<String, Namespace>,
    /// For each deleted namespace's name, the highest epoch its shards reached: a namespace
    /// created again under the name starts its shards there, so no epoch repeats for a name
    /// (P18.1, I2). Removed when the name is created again (its shards then carry it).
    pub(super) retired_epochs: OrdMap<String, Epoch>,
    /// Log index of the last entry that changed the state (the revision, §1).
    pub(super) revision: u64,
    /// Log index of the last entry that changed owners, handoffs or executor membership. A plan
    /// is stale only if this moved past the revision it was planned on (P2.4, P5.1), so renewals,
    /// which only extend leases, do not make every plan stale under load.
    pub(super) assignment_revision: u64,
    /// Registered executors by id.
    pub(super) executors: OrdMap<ExecutorId, Executor>,
    /// Recently removed executors, at most [`MAX_TOMBSTONES`].
    pub(super) tombstones: OrdMap<ExecutorId, Tombstone>,
    /// The longest `lease_ttl_ms` any grant has carried, never decreasing. A new leader must not
    /// reap or hand on before this much time has passed on its own clock (P6.1): a grant from an
    /// earlier leader (clock skewed, lease since shortened, reply lost and retried) can run that
    /// long, and the per-executor "last told" is overwritten by the new leader's own grants.
    pub(super) longest_lease_told_ms: u64,
    /// The committed cluster version (P14.3): the newest schema every voter can apply, raised by
    /// `SetClusterVersion`, never lowered. A cluster formed by 0.1.0 replicas is at schema 2.
    pub(super) cluster_version: u32,
    /// Maintenance mode (P17.4): placement frozen for balance, joiners and drains, in every
    /// namespace.
    pub(super) maintenance: bool,
    /// The operator actions that changed something, oldest first, at most `MAX_AUDIT_RECORDS`
    /// (P17.4).
    pub(super) audit: Vector<AuditRecord>,
    /// Executor numbers below this are taken even where the log index has not reached them: a
    /// [`super::Command::RegisterMany`] numbers its second and later executors past its own
    /// index. 0 while no entry has (every id is then its entry's index, as in release 0.1.0).
    pub(super) next_executor_number: u64,
    /// Each registered executor's id by its incarnation, derived and never stored like
    /// `releasing`: a registration looks its incarnation up here (P4.4) instead of among every
    /// executor, so a fleet registering at once is not quadratic in its size.
    #[serde(skip)]
    pub(super) by_incarnation: OrdMap<String, ExecutorId>,
}

/// [`LeaseState`] as encoded: every field but the derived index, each by its name (PROTOCOL
/// P14.1). Decoding goes through it to rebuild the index.
#[derive(Deserialize)]
struct StoredLeaseState {
    namespaces: OrdMap<String, Namespace>,
    retired_epochs: OrdMap<String, Epoch>,
    revision: u64,
    assignment_revision: u64,
    executors: OrdMap<ExecutorId, Executor>,
    tombstones: OrdMap<ExecutorId, Tombstone>,
    longest_lease_told_ms: u64,
    cluster_version: u32,
    maintenance: bool,
    audit: Vector<AuditRecord>,
    next_executor_number: u64,
}

impl From<StoredLeaseState> for LeaseState {
    fn from(stored: StoredLeaseState) -> Self {
        let mut state = Self {
            namespaces: stored.namespaces,
            retired_epochs: stored.retired_epochs,
            revision: stored.revision,
            assignment_revision: stored.assignment_revision,
            executors: stored.executors,
            tombstones: stored.tombstones,
            longest_lease_told_ms: stored.longest_lease_told_ms,
            cluster_version: stored.cluster_version,
            maintenance: stored.maintenance,
            audit: stored.audit,
            next_executor_number: stored.next_executor_number,
            by_incarnation: OrdMap::new(),
        };
        state.rebuild_indexes();
        state
    }
}

/// The shards of `table` with a handoff: what [`Namespace::releasing`] indexes.
pub(super) fn releasing_in(table: &Vector<Shard>) -> OrdSet<ShardId> {
    table
        .iter()
        .filter(|shard| shard.handoff.is_some())
        .map(|shard| shard.id)
        .collect()
}

/// Each executor's live secondaries in `table`: what [`Namespace::secondaries_of`] indexes.
pub(super) fn secondaries_in(table: &Vector<Shard>) -> OrdMap<ExecutorId, OrdSet<ShardId>> {
    let mut index: OrdMap<ExecutorId, OrdSet<ShardId>> = OrdMap::new();
    for shard in table {
        for secondary in shard.live_secondaries() {
            index
                .entry(secondary.executor.clone())
                .or_default()
                .insert(shard.id);
        }
    }
    index
}

/// The shards of `table` with a lost secondary: what [`Namespace::with_lost_secondaries`]
/// indexes.
pub(super) fn with_lost_in(table: &Vector<Shard>) -> OrdSet<ShardId> {
    table
        .iter()
        .filter(|shard| shard.secondaries.iter().any(|s| s.lost.is_some()))
        .map(|shard| shard.id)
        .collect()
}

impl Default for LeaseState {
    fn default() -> Self {
        Self {
            namespaces: OrdMap::new(),
            retired_epochs: OrdMap::new(),
            revision: 0,
            assignment_revision: 0,
            executors: OrdMap::new(),
            tombstones: OrdMap::new(),
            longest_lease_told_ms: 0,
            cluster_version: super::schema::OLDEST_SCHEMA,
            maintenance: false,
            audit: Vector::new(),
            next_executor_number: 0,
            by_incarnation: OrdMap::new(),
        }
    }
}

/// One operator action in the audit log (P17.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The log index of the entry that did it.
    pub revision: u64,
    /// The leader clock it was stamped with.
    pub at_ms: u64,
    /// Who asked (`Command::Operator`'s actor).
    pub actor: String,
    /// What.
    pub action: OperatorAction,
}

impl LeaseState {
    /// Maintenance mode (see the field).
    pub fn maintenance(&self) -> bool {
        self.maintenance
    }

    /// The executor `shard` of `default` is pinned to, if any.
    pub fn pin(&self, shard: ShardId) -> Option<&str> {
        self.default_namespace()?.pin(shard)
    }

    /// Every pin in `default`, ascending by shard.
    pub fn pins(&self) -> impl Iterator<Item = (ShardId, &str)> {
        self.default_namespace()
            .into_iter()
            .flat_map(Namespace::pins)
    }

    /// One namespace, if it exists (P18.1).
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(name)
    }

    /// Every namespace, ascending by name; empty before `Init`.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &Namespace)> {
        self.namespaces
            .iter()
            .map(|(name, namespace)| (name.as_str(), namespace))
    }

    /// The `default` namespace, `None` before `Init`.
    pub fn default_namespace(&self) -> Option<&Namespace> {
        self.namespaces.get(DEFAULT_NAMESPACE)
    }

    /// The namespace `name` as the planner sees it, if it exists.
    pub fn space<'a>(&'a self, name: &str) -> Option<Space<'a>> {
        let (name, namespace) = self.namespaces.get_key_value(name)?;
        Some(Space {
            state: self,
            name,
            namespace,
            preferred: None,
        })
    }

    /// Every namespace as the planner sees it, ascending by name; none before `Init`.
    pub fn spaces(&self) -> impl Iterator<Item = Space<'_>> {
        self.namespaces.iter().map(move |(name, namespace)| Space {
            state: self,
            name,
            namespace,
            preferred: None,
        })
    }

    /// The namespace `executor` registered into.
    pub fn namespace_of(&self, executor: &Executor) -> Option<&Namespace> {
        self.namespaces.get(&executor.namespace)
    }

    /// The highest epoch a deleted namespace's shards reached, by name (see the field).
    pub fn retired_epochs(&self) -> impl Iterator<Item = (&str, Epoch)> {
        self.retired_epochs
            .iter()
            .map(|(name, epoch)| (name.as_str(), *epoch))
    }

    /// The audit log, oldest first.
    pub fn audit(&self) -> impl Iterator<Item = &AuditRecord> {
        self.audit.iter()
    }

    /// The committed cluster version (see the field).
    pub fn cluster_version(&self) -> u32 {
        self.cluster_version
    }

    /// The longest lease any grant has carried (see the field).
    pub fn longest_lease_told_ms(&self) -> u64 {
        self.longest_lease_told_ms
    }

    /// The `default` namespace's configuration (the cluster's, `Init`), `None` before `Init`.
    pub fn config(&self) -> Option<&ClusterConfig> {
        self.default_namespace().map(|namespace| &namespace.config)
    }

    /// Log index of the last entry that changed anything (§1); what deliveries carry (P4.1).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Log index of the last entry that changed owners, handoffs or membership in any
    /// namespace; a plan made at or after it is still current (P2.4), as is one made at or after
    /// its namespace's ([`Namespace::assignment_revision`]).
    pub fn assignment_revision(&self) -> u64 {
        self.assignment_revision
    }

    /// All executors, ascending by id.
    pub fn executors(&self) -> impl Iterator<Item = &Executor> {
        self.executors.values()
    }

    /// The executors registered in `namespace`, ascending by id (P18.1).
    pub fn executors_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Executor> {
        self.namespaces
            .get(namespace)
            .into_iter()
            .flat_map(|namespace| namespace.members.iter())
            .filter_map(|executor_id| self.executors.get(executor_id))
    }

    /// One executor, if registered and not removed.
    pub fn executor(&self, executor_id: &str) -> Option<&Executor> {
        self.executors.get(executor_id)
    }

    /// The executor registered under `incarnation`, if it is still present (P4.4).
    pub fn executor_by_incarnation(&self, incarnation: &str) -> Option<&Executor> {
        self.by_incarnation
            .get(incarnation)
            .and_then(|id| self.executors.get(id))
    }

    /// `default`'s shard table, index = shard number; empty before `Init`.
    pub fn shards(&self) -> &Vector<Shard> {
        static NONE: std::sync::OnceLock<Vector<Shard>> = std::sync::OnceLock::new();
        match self.default_namespace() {
            Some(namespace) => &namespace.shards,
            None => NONE.get_or_init(Vector::new),
        }
    }

    /// One shard of `default`, if `shard < shard_count`.
    pub fn shard(&self, shard: ShardId) -> Option<&Shard> {
        self.default_namespace()?.shard(shard)
    }

    /// The tombstone of a recently removed executor (P7.2).
    pub fn tombstone(&self, executor_id: &str) -> Option<&Tombstone> {
        self.tombstones.get(executor_id)
    }

    /// All kept tombstones, ascending by executor id.
    pub fn tombstones(&self) -> impl Iterator<Item = &Tombstone> {
        self.tombstones.values()
    }

    /// The shortest lease of any namespace (P18.1): the leader steps a third of it apart (P3.8),
    /// so every namespace's lapsed leases are reaped within its own lease and a tick. `None`
    /// before `Init`.
    pub fn shortest_lease_duration_ms(&self) -> Option<u64> {
        self.config()?;
        self.spaces()
            .filter_map(|space| space.config())
            .map(|config| config.lease_duration_ms)
            .min()
    }

    /// The bound an executor's shard numbers are read against (P18.1, P20.3): its namespace's
    /// shard count, or, once the namespace resharded, the most shards any of its layouts had
    /// (an executor a set behind renews with claims of the layout before). For an executor this
    /// state does not hold (a follower that has not applied its registration yet), the largest
    /// of any namespace, so nothing a real executor may send is refused for its size; the
    /// leader, which knows every executor, reads it again. `None` before `Init`.
    pub fn shard_bound_for_executor(&self, executor_id: &str) -> Option<u32> {
        self.config()?;
        match self.executor(executor_id) {
            Some(executor) => self
                .namespace(&executor.namespace)
                .map(Namespace::shard_number_bound),
            None => self
                .namespaces()
                .map(|(_, namespace)| namespace.shard_number_bound())
                .max(),
        }
    }

    /// The executor's delivered set: shards it owns that are not releasing from it, with epochs,
    /// ascending. Empty for an unknown executor.
    pub fn delivered_set(&self, executor_id: &str) -> Vec<(ShardId, Epoch)> {
        self.delivered(executor_id).collect()
    }

    /// [`LeaseState::delivered_set`], ascending, without collecting it.
    pub fn delivered<'a>(
        &'a self,
        executor_id: &str,
    ) -> impl Iterator<Item = (ShardId, Epoch)> + 'a {
        self.executors
            .get(executor_id)
            .and_then(|executor| Some((executor, self.namespace_of(executor)?)))
            .into_iter()
            .flat_map(|(executor, namespace)| {
                executor
                    .owned_shards
                    .iter()
                    .filter_map(|&shard| namespace.shard(shard))
            })
            .filter(|shard| shard.handoff.is_none())
            .map(|shard| (shard.id, shard.epoch))
    }

    /// Whether the executor's delivered set is not empty.
    pub fn has_delivered(&self, executor_id: &str) -> bool {
        self.delivered(executor_id).next().is_some()
    }

    /// What a register or renew reply to `executor_id` carries at `now_ms` (§9, P3.1, P4.1):
    /// lease remaining, this state's revision and the delivered set. `None` for an unknown
    /// executor or before `Init`.
    pub fn grant_for(&self, executor_id: &str, now_ms: u64) -> Option<Grant> {
        let executor = self.executors.get(executor_id)?;
        self.namespace_of(executor)?;
        Some(self.grant_of(executor, now_ms))
    }

    /// The grant for a present executor (see [`LeaseState::grant_for`]): its namespace's shard
    /// count (P18.1).
    pub(super) fn grant_of(&self, executor: &Executor, now_ms: u64) -> Grant {
        // Every grant reads its namespace's layout: one lookup for both halves of it.
        let (shard_count, generation) = self.namespace_of(executor).map_or((0, 0), |namespace| {
            (namespace.config.shard_count, namespace.generation)
        });
        Grant {
            executor_id: executor.id.clone(),
            lease_ttl_ms: executor.lease_remaining_ms(now_ms),
            revision: self.revision,
            shard_count,
            generation,
            shards: self.delivered_set(&executor.id),
            secondaries: self.secondaries_of(&executor.id),
        }
    }

    /// The shards `executor_id` holds a live secondary of (P19.1), each at the shard's current
    /// epoch, ascending; empty for an unknown executor.
    pub fn secondaries_of(&self, executor_id: &str) -> Vec<(ShardId, Epoch)> {
        let Some(namespace) = self
            .executors
            .get(executor_id)
            .and_then(|executor| self.namespace_of(executor))
        else {
            return Vec::new();
        };
        namespace
            .secondaries_of(executor_id)
            .filter_map(|shard| Some((shard, namespace.shard(shard)?.epoch)))
            .collect()
    }

    /// Executors whose lease has lapsed on the manager clock at `now_ms`, ascending: the
    /// candidates for a `Reap` (P3.8), which re-checks each at apply time (P2.4).
    pub fn overdue_executors(&self, now_ms: u64) -> Vec<ExecutorId> {
        self.executors
            .values()
            .filter(|executor| executor.lease_lapsed(now_ms))
            .map(|executor| executor.id.clone())
            .collect()
    }

    /// Rebuilds the derived indexes from the shard table and the executors (after decoding).
    pub(super) fn rebuild_indexes(&mut self) {
        let names: Vec<String> = self.namespaces.keys().cloned().collect();
        for name in names {
            if let Some(namespace) = self.namespaces.get_mut(&name) {
                namespace.rebuild_shard_indexes();
                namespace.members = OrdSet::new();
            }
        }
        self.by_incarnation = OrdMap::new();
        for executor in self.executors.values() {
            if let Some(namespace) = self.namespaces.get_mut(&executor.namespace) {
                namespace.members.insert(executor.id.clone());
            }
            // Registration keeps incarnations unique; were one repeated, the lowest id answers,
            // as a search in id order would.
            self.by_incarnation
                .entry(executor.incarnation.clone())
                .or_insert_with(|| executor.id.clone());
        }
    }

    /// The shards of `default` releasing from their owners (P5.2), ascending, with their
    /// handoffs.
    pub fn releasing(&self) -> impl Iterator<Item = (&Shard, &Handoff)> {
        self.default_namespace()
            .into_iter()
            .flat_map(Namespace::releasing)
    }

    /// The shards of every namespace releasing from their owners (P5.2), by namespace, then
    /// ascending, with their handoffs.
    pub fn releasing_everywhere(&self) -> impl Iterator<Item = (&str, &Shard, &Handoff)> {
        self.namespaces().flat_map(|(name, namespace)| {
            namespace
                .releasing()
                .map(move |(shard, handoff)| (name, shard, handoff))
        })
    }

    /// Whether some releasing shard's old grant has expired at `now_ms`, in any namespace, so
    /// `CompleteHandoffs` would hand it on (P5.2).
    pub fn handoffs_due(&self, now_ms: u64) -> bool {
        self.releasing_everywhere()
            .any(|(_, _, handoff)| lapsed(handoff.from_grant_expiry_ms, now_ms))
    }

    /// Earliest instant at which a releasing shard may be handed on without an acknowledgement,
    /// so the leader loop can wake for it ([`first_lapsed_ms`]); `None` when nothing is releasing
    /// or no releasing shard's bound ever lapses.
    pub fn next_handoff_due_ms(&self) -> Option<u64> {
        self.releasing_everywhere()
            .filter_map(|(_, _, handoff)| first_lapsed_ms(handoff.from_grant_expiry_ms))
            .min()
    }

    /// The latest instant, on the clock of the leaders that stamped them, at which a lease an
    /// earlier leader told may still run: every executor's told expiry; `None` when there is no
    /// executor. A new leader's clock takes office no lower than this minus the longest lease
    /// (P6.4, `leader::core::office_floor_ms`). Reservations are not told (P6.6), so they do
    /// not count: each ends a few leases after the instant it was made, and raising the floor
    /// to it would move a new leader's clock ahead of its predecessor's. A releasing shard's
    /// bound adds nothing either: it is its old owner's expiry or reservation when the shard was
    /// marked, and that owner still exists while the handoff lasts.
    pub fn latest_deadline_ms(&self) -> Option<u64> {
        self.executors.values().map(|e| e.lease_expiry_ms).max()
    }

    /// Number of shards currently releasing, over every namespace.
    pub fn releasing_count(&self) -> usize {
        self.namespaces
            .values()
            .map(|namespace| namespace.releasing.len())
            .sum()
    }

    /// Number of shards with an owner, releasing ones included.
    pub fn owned_count(&self) -> usize {
        self.executors
            .values()
            .map(|executor| executor.owned_shards.len())
            .sum()
    }

    /// Checks the structural invariants `apply` maintains; empty when they hold. Meant for tests
    /// and for a manager to verify a decoded snapshot before serving from it:
    /// - the shard table has `shard_count` entries, each numbered by its index;
    /// - a shard's owner is a present executor whose `owned_shards` lists it, and every shard an
    ///   executor lists names it as owner;
    /// - a handoff has an owner (the old owner) and a target that is present and not the owner;
    /// - every shard's owner, handoff target and pin is an executor of the shard's namespace, and
    ///   every executor's namespace exists (P18.1);
    /// - an owned shard's epoch is at least 1 (I2: the first owner gets epoch 1);
    /// - revisions are ordered (a namespace's assignment and readiness revisions at most the
    ///   state's) and tombstones bounded and disjoint from live executors.
    pub fn consistency_violations(&self) -> Vec<String> {
        let mut violations = Vec::new();
        for (name, namespace) in &self.namespaces {
            namespace.violations(name, &self.executors, &mut violations);
            if self.retired_epochs.contains_key(name) {
                violations.push(format!("namespace {name} exists and is also retired"));
            }
            if namespace.assignment_revision > self.assignment_revision {
                violations.push(format!(
                    "namespace {name}'s assignment revision {} is ahead of the state's {}",
                    namespace.assignment_revision, self.assignment_revision
                ));
            }
            if namespace.readiness_revision > self.revision {
                violations.push(format!(
                    "namespace {name}'s readiness revision {} is ahead of the state's revision {}",
                    namespace.readiness_revision, self.revision
                ));
            }
        }
        if !self.namespaces.is_empty() && self.default_namespace().is_none() {
            violations.push("namespaces exist but not default".to_owned());
        }
        if self.namespaces.len() > leasehold_api::wire::MAX_NAMESPACES {
            violations.push(format!("{} namespaces", self.namespaces.len()));
        }
        if self.audit.len() > leasehold_api::wire::MAX_AUDIT_RECORDS {
            violations.push(format!("the audit log holds {} records", self.audit.len()));
        }
        if self.by_incarnation.len() != self.executors.len() {
            violations.push(format!(
                "the incarnation index has {} entries for {} executors",
                self.by_incarnation.len(),
                self.executors.len()
            ));
        }
        for executor in self.executors.values() {
            if self.by_incarnation.get(&executor.incarnation) != Some(&executor.id) {
                violations.push(format!(
                    "the incarnation index does not name executor {} for its incarnation",
                    executor.id
                ));
            }
            let Some(namespace) = self.namespace_of(executor) else {
                violations.push(format!(
                    "executor {} is in namespace {}, which does not exist",
                    executor.id, executor.namespace
                ));
                continue;
            };
            for &shard in &executor.owned_shards {
                let owner = namespace
                    .shard(shard)
                    .and_then(|entry| entry.owner.as_ref());
                if owner != Some(&executor.id) {
                    violations.push(format!(
                        "executor {} lists shard {shard}, whose owner is {owner:?}",
                        executor.id
                    ));
                }
            }
            if self.tombstones.contains_key(&executor.id) {
                violations.push(format!("executor {} is also tombstoned", executor.id));
            }
        }
        if self.assignment_revision > self.revision {
            violations.push(format!(
                "assignment revision {} is ahead of revision {}",
                self.assignment_revision, self.revision
            ));
        }
        if self.tombstones.len() > MAX_TOMBSTONES {
            violations.push(format!("{} tombstones kept", self.tombstones.len()));
        }
        violations
    }
}
