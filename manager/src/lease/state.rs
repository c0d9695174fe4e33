//! The replicated state (P2.1) and its read-only views.

use imbl::{OrdMap, OrdSet, Vector};
use serde::{Deserialize, Serialize};

use leasehold_api::wire::DEFAULT_NAMESPACE;

use super::{Epoch, ExecutorId, OperatorAction, ShardId, MAX_TOMBSTONES};

/// Fixed at initialisation (`Init`); only the lease duration may change later
/// (`SetLeaseDuration`), the shard count never does (§11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Shards are `0..shard_count`.
    pub shard_count: u32,
    /// Length of a lease granted or renewed from now on (P3.4).
    pub lease_duration_ms: u64,
}

/// One registered executor (P2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executor {
    /// Minted by the state machine at registration.
    pub id: ExecutorId,
    /// The idempotency key of its registration (P4.4).
    pub incarnation: String,
    /// Operator label, no protocol meaning.
    pub name: Option<String>,
    /// Advertised base URL pushes go to (P8.1).
    pub address: String,
    /// Absolute expiry on the leader clock (P2.3). Only ever moves forwards (P3.4).
    pub lease_expiry_ms: u64,
    /// The lease remaining it was told in its last grant (P2.1).
    pub lease_ttl_told_ms: u64,
    /// Lease time reserved ahead of its grants (`ReserveLeases`, P6.6), on the leader clock; 0
    /// when none was (and for every executor of release 0.1.0). A leader may answer its
    /// renewals from memory with copies that end by then, so every rule that waits for its
    /// copies to end waits for the later of this and `lease_expiry_ms` ([`Executor::lease_bound_ms`]).
    pub lease_reserved_until_ms: u64,
    /// Log index of the entry that registered it.
    pub registered_revision: u64,
    /// Every shard whose `owner` is this executor, including shards releasing from it. The shard
    /// table is the authority; this index is kept equal to it so an executor's set is read
    /// without scanning every shard ([`LeaseState::consistency_violations`] checks the two agree).
    pub owned_shards: OrdSet<ShardId>,
    /// Set by an operator (`SetDraining`): the planner gives it nothing and moves its shards to
    /// others through the normal handoff; it keeps its lease and renews as usual.
    pub draining: bool,
    /// SHA-256 of the credential it registered with (P13.4); its renew, release and deregister
    /// must present the credential. `None`: it registered without one (schema 2, P13.5).
    pub credential_sha256: Option<[u8; 32]>,
    /// Its capacity (P15.1), a positive weight: the planner gives it a share of the shards, or
    /// of the load, in proportion. Set at registration, never changed (a retried registration
    /// keeps the first); [`super::DEFAULT_CAPACITY`] for one registered without (and every executor of 0.1.0).
    pub capacity: u32,
    /// The application version it registered with (P17.3), checked by
    /// `leasehold_api::wire::check_app_version`; `None` when it stated none (and for every
    /// executor of 0.1.0). Set at registration, never changed: an executor that restarts
    /// as a newer version registers anew (a new incarnation), so it is a newcomer.
    pub app_version: Option<String>,
    /// Its labels (P18.3), checked by `leasehold_api::wire::check_labels`; empty when it stated
    /// none (and for every executor of 0.1.0). `zone` is the failure domain the planner
    /// spreads shards over. Set at registration, never changed.
    pub labels: leasehold_api::wire::Labels,
    /// The namespace it registered into (P18.1): its shards, epochs, lease duration and plans
    /// are that namespace's, and every shard number in its requests is one of that namespace's.
    /// `default` for every executor of 0.1.0. Set at registration, never changed.
    pub namespace: String,
}

impl Executor {
    /// Lease time left at `now_ms`, zero once lapsed; what a grant carries (P3.1).
    pub fn lease_remaining_ms(&self, now_ms: u64) -> u64 {
        self.lease_expiry_ms.saturating_sub(now_ms)
    }

    /// Whether every copy of the lease has lapsed on the manager clock
    /// ([`Executor::lease_bound_ms`]): only once the bound's millisecond has passed. The leader stamps a grant with its clock truncated to the millisecond, which
    /// can be up to a millisecond before the instant the executor sent the request and anchored
    /// its copy at (P3.2), so the executor's copy may end up to a millisecond after the expiry
    /// recorded here; lapsing a whole millisecond later keeps the manager's copy the later one.
    pub fn lease_lapsed(&self, now_ms: u64) -> bool {
        lapsed(self.lease_bound_ms(), now_ms)
    }

    /// Its lease as a leader judges it (P6.7): the later of the expiry the log recorded and the
    /// end of the copies that leader's term told it from memory, `told_from_memory_until_ms`.
    pub fn judged_expiry_ms(&self, told_from_memory_until_ms: Option<u64>) -> u64 {
        told_from_memory_until_ms
            .map_or(self.lease_expiry_ms, |told| told.max(self.lease_expiry_ms))
    }

    /// When its lease ends as a replica can tell: on the leader, which passes what its term told
    /// from memory, its judgment (P6.7); on a follower (`None`), which does not see those
    /// renewals, the latest the lease may run (P6.6). What the views and gauges show.
    pub fn lease_ends_ms(&self, told_from_memory: Option<&ToldFromMemory>) -> u64 {
        match told_from_memory {
            Some(told) => self.judged_expiry_ms(told.get(&self.id).copied()),
            None => self.lease_bound_ms(),
        }
    }

    /// The latest instant any copy of its lease may end (P6.6): the expiry of its grants the log
    /// recorded, or its reservation, for copies a leader told from memory, whichever is later.
    pub fn lease_bound_ms(&self) -> u64 {
        self.lease_expiry_ms.max(self.lease_reserved_until_ms)
    }
}

/// Whether a lease copy ending at `expiry_ms` on the manager clock has surely ended on the
/// holder's at `now_ms`: only once the expiry's millisecond has passed (see
/// [`Executor::lease_lapsed`]). Every expiry the manager acts on (reaps, handoffs completed on
/// expiry) goes through this one rule.
pub fn lapsed(expiry_ms: u64, now_ms: u64) -> bool {
    first_lapsed_ms(expiry_ms).is_some_and(|at_ms| at_ms <= now_ms)
}

/// The first manager-clock millisecond at which a copy ending at `expiry_ms` counts as lapsed
/// ([`lapsed`]): the one after it; `None` for a copy ending at the end of time, which never does.
pub fn first_lapsed_ms(expiry_ms: u64) -> Option<u64> {
    expiry_ms.checked_add(1)
}

/// What a leader's term told each executor from memory (P6.8): the latest end, on the leader
/// clock, of the copies of its lease it told without a log entry. The leader judges leases by it
/// (P6.7); it is the leader's soft state, never replicated.
pub type ToldFromMemory = std::collections::BTreeMap<ExecutorId, u64>;

/// A shard being taken from a live owner (P5.2). The old owner is the shard's `owner` for as
/// long as the handoff lasts (so the two can never disagree); it no longer sees the shard in its
/// delivered set, and the target does not see it until it is granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// Who receives the shard once released; `None` when the target left before that (the shard
    /// then becomes unowned on release, or is retargeted by the next plan).
    pub to: Option<ExecutorId>,
    /// Log index of the entry that marked the shard releasing, which is the revision the revoke
    /// push carries; an acknowledgement must name it (P5.2).
    pub revoke_revision: u64,
    /// The old owner's lease expiry when the shard was marked releasing: every grant that
    /// included the shard ends by then, so after it the shard may be handed on without an
    /// acknowledgement (P5.2). Later renewals do not move it, since their sets exclude the shard.
    pub from_grant_expiry_ms: u64,
}

/// One shard's ownership (P2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// Its number; equal to its index in [`LeaseState::shards`].
    pub id: ShardId,
    /// Current owner; during a handoff, the old owner.
    pub owner: Option<ExecutorId>,
    /// Epoch of the current (or, when unowned, the last) owner; 0 for never owned (I2).
    pub epoch: Epoch,
    /// Set while the shard is releasing from `owner` (P5.2).
    pub handoff: Option<Handoff>,
}

/// A namespace's own placement settings (P18.4): each one set overrides the leading
/// manager's flag for the namespace's plans; an unset one follows the flag. Checked at the edge
/// and again by the state machine with `leasehold_api::wire::check_namespace_placement`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementOverrides {
    /// Place by reported loads (P15.2) or by count alone: `--load-placement`.
    pub load_placement: Option<bool>,
    /// The band around the mean utilisation inside which nothing moves for balance, in percent
    /// (1 to 100): `--balance-tolerance`.
    pub balance_tolerance_percent: Option<u32>,
    /// Moves for balance per minute (P15.3): `--max-balance-moves`.
    pub max_balance_moves_per_minute: Option<u32>,
    /// The label `(key, value)` whose executors take the namespace's shards while any of them
    /// takes shards; the others take them only while none does.
    pub prefer: Option<(String, String)>,
}

impl PlacementOverrides {
    /// Whether every setting follows the leader's flags.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// As the wire shows it (`prefer` as `key=value`).
    pub fn to_wire(&self) -> leasehold_api::wire::NamespacePlacement {
        leasehold_api::wire::NamespacePlacement {
            load_placement: self.load_placement,
            balance_tolerance_percent: self.balance_tolerance_percent,
            max_balance_moves_per_minute: self.max_balance_moves_per_minute,
            prefer: self
                .prefer
                .as_ref()
                .map(|(key, value)| format!("{key}={value}")),
        }
    }

    /// From the wire, checked (I6).
    pub fn from_wire(
        placement: &leasehold_api::wire::NamespacePlacement,
    ) -> Result<Self, leasehold_api::wire::NamespacePlacementError> {
        leasehold_api::wire::check_namespace_placement(placement)?;
        Ok(Self {
            load_placement: placement.load_placement,
            balance_tolerance_percent: placement.balance_tolerance_percent,
            max_balance_moves_per_minute: placement.max_balance_moves_per_minute,
            prefer: placement
                .prefer
                .as_deref()
                .map(leasehold_api::wire::parse_preference)
                .transpose()?,
        })
    }

    /// Checks the settings as the edge does (I6): the state machine refuses what the edge
    /// would have.
    pub fn check(&self) -> Result<(), leasehold_api::wire::NamespacePlacementError> {
        leasehold_api::wire::check_namespace_placement(&self.to_wire())
    }
}

/// One namespace (P18.1): a shard space with its own configuration, shard table, pins and
/// assignment revision. Shard numbers, epochs and handoffs are this namespace's alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Namespace {
    /// Its shard count (fixed at creation) and the lease its executors' grants carry (P3.4).
    pub config: ClusterConfig,
    /// Most executors it may hold registered at once; `None` for no bound but the cluster's.
    pub max_executors: Option<u32>,
    /// Its own placement settings (P18.4), each overriding the leader's flag for its plans.
    pub placement: PlacementOverrides,
    /// Log index of the entry that created it; 0 for `default`, which exists from the
    /// cluster's start.
    pub created_revision: u64,
    /// Log index of the last entry that changed owners, handoffs, pins or membership in it (or
    /// maintenance, which concerns every namespace): a plan for it made at or after it is still
    /// current (P2.4), whatever other namespaces did since, so one namespace's churn never makes
    /// another's plans stale.
    pub assignment_revision: u64,
    /// `shard_count` entries, index = shard number.
    pub(super) shards: Vector<Shard>,
    /// Shards an operator pinned, and to whom (P17.4). A pin goes when its executor does.
    pub(super) pins: OrdMap<ShardId, ExecutorId>,
    /// The shards with a handoff, ascending. Derived from the shard table and never stored (a
    /// decoded state rebuilds it). Delivery rounds, leader steps and removals read it, so their
    /// work is proportional to the handoffs in flight, not to the shard count.
    #[serde(skip)]
    pub(super) releasing: OrdSet<ShardId>,
    /// The executors registered in it; derived from the executors and never stored, so a
    /// registration checks `max_executors` without counting, and a read of one namespace's
    /// executors (each leader step reads every namespace's) costs its own executors, not all.
    #[serde(skip)]
    pub(super) members: OrdSet<ExecutorId>,
}

impl Namespace {
    /// A new namespace of `config`, created by the entry at `created_revision`, its shards
    /// unowned at `epoch` (0, or the epoch its name's shards last reached).
    pub(super) fn new(
        config: ClusterConfig,
        max_executors: Option<u32>,
        placement: PlacementOverrides,
        created_revision: u64,
        epoch: Epoch,
    ) -> Self {
        Self {
            config,
            max_executors,
            placement,
            created_revision,
            assignment_revision: created_revision,
            shards: (0..config.shard_count)
                .map(|id| Shard {
                    id,
                    owner: None,
                    epoch,
                    handoff: None,
                })
                .collect(),
            pins: OrdMap::new(),
            releasing: OrdSet::new(),
            members: OrdSet::new(),
        }
    }

    /// The shard table, index = shard number.
    pub fn shards(&self) -> &Vector<Shard> {
        &self.shards
    }

    /// One shard, if `shard < shard_count`.
    pub fn shard(&self, shard: ShardId) -> Option<&Shard> {
        usize::try_from(shard)
            .ok()
            .and_then(|index| self.shards.get(index))
    }

    /// The executor `shard` is pinned to, if any.
    pub fn pin(&self, shard: ShardId) -> Option<&str> {
        self.pins.get(&shard).map(String::as_str)
    }

    /// Every pin, ascending by shard.
    pub fn pins(&self) -> impl Iterator<Item = (ShardId, &str)> {
        self.pins
            .iter()
            .map(|(shard, executor)| (*shard, executor.as_str()))
    }

    /// The shards releasing from their owners (P5.2), ascending, with their handoffs.
    pub fn releasing(&self) -> impl Iterator<Item = (&Shard, &Handoff)> {
        self.releasing.iter().filter_map(|&id| {
            let shard = self.shard(id)?;
            Some((shard, shard.handoff.as_ref()?))
        })
    }

    /// How many of its shards are releasing from their owners (P5.2).
    pub fn releasing_count(&self) -> usize {
        self.releasing.len()
    }

    /// How many executors are registered in it.
    pub fn executor_count(&self) -> usize {
        self.members.len()
    }

    /// The structural violations of [`LeaseState::consistency_violations`] within this
    /// namespace, `name`, whose executors are among `executors`.
    fn violations(
        &self,
        name: &str,
        executors: &OrdMap<ExecutorId, Executor>,
        violations: &mut Vec<String>,
    ) {
        let expected_shards = usize::try_from(self.config.shard_count).unwrap_or(usize::MAX);
        if self.shards.len() != expected_shards {
            violations.push(format!(
                "namespace {name}'s shard table has {} entries, its config says {expected_shards}",
                self.shards.len()
            ));
        }
        let member = |executor_id: &str| {
            executors
                .get(executor_id)
                .filter(|executor| executor.namespace == name)
        };
        for (index, shard) in self.shards.iter().enumerate() {
            let at = format!("shard {} of {name}", shard.id);
            if usize::try_from(shard.id).ok() != Some(index) {
                violations.push(format!("{at} is at index {index}"));
            }
            match &shard.owner {
                Some(owner) => {
                    match member(owner) {
                        Some(executor) if executor.owned_shards.contains(&shard.id) => {}
                        Some(_) => {
                            violations.push(format!("{at} names owner {owner}, whose set lacks it"))
                        }
                        None => violations.push(format!(
                            "{at} names owner {owner}, who is not registered in {name}"
                        )),
                    }
                    if shard.epoch == 0 {
                        violations.push(format!("{at} is owned at epoch 0"));
                    }
                }
                None if shard.handoff.is_some() => {
                    violations.push(format!("{at} is releasing but unowned"));
                }
                None => {}
            }
            if let Some(Handoff {
                to: Some(target), ..
            }) = &shard.handoff
            {
                if member(target).is_none() {
                    violations.push(format!(
                        "{at} is releasing to {target}, who is not registered in {name}"
                    ));
                }
                if shard.owner.as_ref() == Some(target) {
                    violations.push(format!("{at} is releasing to its own owner {target}"));
                }
            }
        }
        for (shard, executor) in &self.pins {
            if self.shard(*shard).is_none() || member(executor).is_none() {
                violations.push(format!(
                    "shard {shard} of {name} is pinned to {executor}, who is not registered in \
                     {name} or the shard is out of range"
                ));
            }
        }
        let releasing = releasing_in(&self.shards);
        if releasing != self.releasing {
            violations.push(format!(
                "{name}'s releasing index lists {:?}, its shard table {:?}",
                self.releasing.iter().take(8).collect::<Vec<_>>(),
                releasing.iter().take(8).collect::<Vec<_>>()
            ));
        }
        let members: OrdSet<ExecutorId> = executors
            .values()
            .filter(|executor| executor.namespace == name)
            .map(|executor| executor.id.clone())
            .collect();
        if members != self.members {
            violations.push(format!(
                "{name} lists {} executors as its own, {} are registered in it",
                self.members.len(),
                members.len()
            ));
        }
        if self.assignment_revision < self.created_revision {
            violations.push(format!(
                "{name}'s assignment revision is before its creation"
            ));
        }
    }

    /// The highest epoch any of its shards reached: what a namespace created again under its
    /// name starts from.
    pub(super) fn highest_epoch(&self) -> Epoch {
        self.shards
            .iter()
            .map(|shard| shard.epoch)
            .max()
            .unwrap_or(0)
    }
}

/// One namespace as the planner sees it (P18.1): its shards, pins and handoffs, and only its
/// executors, with the state-wide revision and maintenance mode. Cheap to copy; every read goes
/// to the state it borrows.
#[derive(Debug, Clone, Copy)]
pub struct Space<'a> {
    state: &'a LeaseState,
    name: &'a str,
    namespace: &'a Namespace,
    /// The label its executors must carry to take shards, once [`Space::placing_at`] found
    /// its preference in force (P18.4); `None` otherwise.
    preferred: Option<(&'a str, &'a str)>,
}

impl<'a> Space<'a> {
    /// This namespace as a plan at `now_ms` sees it (P18.4): with its preference (`prefer
    /// key=value`) in force while an executor carrying that label takes shards (live, not
    /// draining), so only such executors take its shards and every other one hands its shards
    /// on as a draining one does; with no such executor, as if it had no preference.
    pub fn placing_at(self, now_ms: u64) -> Self {
        let preferred = self
            .namespace
            .placement
            .prefer
            .as_ref()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .filter(|&label| {
                self.executors().any(|executor| {
                    super::takes_shards(executor, now_ms) && carries(executor, label)
                })
            });
        Self { preferred, ..self }
    }

    /// Whether `executor` is passed over for the executors its preference names, in force
    /// ([`Space::placing_at`]).
    pub fn passed_over(&self, executor: &Executor) -> bool {
        self.preferred
            .is_some_and(|label| !carries(executor, label))
    }

    /// Whether `executor` takes part in this plan's placement: live and not draining
    /// ([`super::takes_shards`]), and not passed over (P18.4).
    pub fn takes_shards(&self, executor: &Executor, now_ms: u64) -> bool {
        super::takes_shards(executor, now_ms) && !self.passed_over(executor)
    }

    /// Whether a live `executor` hands its shards on: it is draining, or passed over (P18.4).
    pub fn hands_on(&self, executor: &Executor, now_ms: u64) -> bool {
        !executor.lease_lapsed(now_ms) && (executor.draining || self.passed_over(executor))
    }

    /// Its name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The namespace itself.
    pub fn namespace(&self) -> &'a Namespace {
        self.namespace
    }

    /// Its configuration (shard count, lease).
    pub fn config(&self) -> Option<&'a ClusterConfig> {
        Some(&self.namespace.config)
    }

    /// Log index of the last entry that changed anything in the state (§1).
    pub fn revision(&self) -> u64 {
        self.state.revision
    }

    /// Maintenance mode, which concerns every namespace (P17.4).
    pub fn maintenance(&self) -> bool {
        self.state.maintenance
    }

    /// Its executors, ascending by id.
    pub fn executors(&self) -> impl Iterator<Item = &'a Executor> + 'a {
        self.state.executors_in(self.name)
    }

    /// One of its executors; `None` for an executor of another namespace.
    pub fn executor(&self, executor_id: &str) -> Option<&'a Executor> {
        self.state
            .executors
            .get(executor_id)
            .filter(|executor| executor.namespace == self.name)
    }

    /// Its shard table, index = shard number.
    pub fn shards(&self) -> &'a Vector<Shard> {
        &self.namespace.shards
    }

    /// One of its shards, if `shard < shard_count`.
    pub fn shard(&self, shard: ShardId) -> Option<&'a Shard> {
        self.namespace.shard(shard)
    }

    /// The executor its `shard` is pinned to, if any.
    pub fn pin(&self, shard: ShardId) -> Option<&'a str> {
        self.namespace.pin(shard)
    }

    /// Its pins, ascending by shard.
    pub fn pins(&self) -> impl Iterator<Item = (ShardId, &'a str)> + 'a {
        self.namespace.pins()
    }

    /// Its shards releasing from their owners (P5.2), ascending, with their handoffs.
    pub fn releasing(&self) -> impl Iterator<Item = (&'a Shard, &'a Handoff)> + 'a {
        self.namespace.releasing()
    }

    /// Whether its executor `executor_id` holds a shard not releasing from it
    /// ([`LeaseState::has_delivered`]); false for an executor of another namespace.
    pub fn has_delivered(&self, executor_id: &str) -> bool {
        self.executor(executor_id).is_some() && self.state.has_delivered(executor_id)
    }
}

/// Whether `executor` states the label `(key, value)` (P18.3).
fn carries(executor: &Executor, (key, value): (&str, &str)) -> bool {
    executor.labels.get(key).map(String::as_str) == Some(value)
}

/// Why an executor left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TombstoneReason {
    /// It deregistered (P3.7).
    Deregistered,
    /// Its lease lapsed and the leader reaped it (P3.8).
    Reaped,
}

/// Record of a recently removed executor, so a retried request can be told "already done"
/// (P2.1, P2.4, P7.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The removed executor.
    pub executor_id: ExecutorId,
    /// Its incarnation, for operators tracing a process.
    pub incarnation: String,
    /// Why it left.
    pub reason: TombstoneReason,
    /// Log index of the entry that removed it; tombstones are pruned oldest first by it.
    pub removed_revision: u64,
    /// Leader clock when it was removed.
    pub removed_at_ms: u64,
}

/// What a register or renew reply carries (§9): the only message that moves an executor's lease
/// clock (P3.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The executor the grant is for.
    pub executor_id: ExecutorId,
    /// Lease remaining, never an absolute time (P3.1); anchored by the executor at its send
    /// instant (P3.2).
    pub lease_ttl_ms: u64,
    /// The revision the set was read from (P4.1).
    pub revision: u64,
    /// Needed to map keys to shards.
    pub shard_count: u32,
    /// The executor's delivered set: shards it owns that are not releasing from it, ascending.
    pub shards: Vec<(ShardId, Epoch)>,
}

impl From<Grant> for leasehold_api::wire::Grant {
    fn from(grant: Grant) -> Self {
        Self {
            executor_id: grant.executor_id,
            lease_ttl_ms: grant.lease_ttl_ms,
            revision: grant.revision,
            shard_count: grant.shard_count,
            shards: grant
                .shards
                .into_iter()
                .map(|(shard, epoch)| leasehold_api::wire::ShardEpoch { shard, epoch })
                .collect(),
            shard_runs: None,
            unchanged: false,
        }
    }
}

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

/// [`LeaseState`] as encoded: every field but the derived index, in the same order (bincode
/// encodes a struct as its fields in sequence). Decoding goes through it to rebuild the index.
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

    /// The shard count an executor's requests are read against (P18.1): its namespace's. For an
    /// executor this state does not hold (a follower that has not applied its registration
    /// yet), the largest of any namespace, so nothing a real executor may send is refused for
    /// its size; the leader, which knows every executor, reads it again. `None` before `Init`.
    pub fn shard_count_for_executor(&self, executor_id: &str) -> Option<u32> {
        self.config()?;
        match self.executor(executor_id) {
            Some(executor) => self
                .space(&executor.namespace)
                .and_then(|space| space.config())
                .map(|config| config.shard_count),
            None => self
                .spaces()
                .filter_map(|space| space.config())
                .map(|config| config.shard_count)
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
        Grant {
            executor_id: executor.id.clone(),
            lease_ttl_ms: executor.lease_remaining_ms(now_ms),
            revision: self.revision,
            shard_count: self
                .namespace_of(executor)
                .map_or(0, |namespace| namespace.config.shard_count),
            shards: self.delivered_set(&executor.id),
        }
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
                namespace.releasing = releasing_in(&namespace.shards);
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
    /// - revisions are ordered and tombstones bounded and disjoint from live executors.
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
