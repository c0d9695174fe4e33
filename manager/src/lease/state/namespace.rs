//! Namespaces (P18.1): a configuration, a shard table with its handoffs, pins and placement
//! settings (P18.4).

use super::*;

/// Fixed at initialisation (`Init`); only the lease duration may change later
/// (`SetLeaseDuration`), the shard count never does (§11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Shards are `0..shard_count`.
    pub shard_count: u32,
    /// Length of a lease granted or renewed from now on (P3.4).
    pub lease_duration_ms: u64,
}

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
    /// Its secondaries (P19.1), in the order they were placed, each on an executor other than
    /// the owner's; empty in a namespace of one replica (and left out of every record then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<Secondary>,
}

impl Shard {
    /// Its secondary on `executor_id`, lost or not.
    pub fn secondary_on(&self, executor_id: &str) -> Option<&Secondary> {
        self.secondaries
            .iter()
            .find(|secondary| secondary.executor == executor_id)
    }

    /// Its secondaries whose executor is registered (not lost, P19.4).
    pub fn live_secondaries(&self) -> impl Iterator<Item = &Secondary> {
        self.secondaries
            .iter()
            .filter(|secondary| secondary.lost.is_none())
    }

    /// Its live secondaries that are ready, ready longest first and in placement order among
    /// equals (P19.3, P19.4, P19.5): the order a moving or promoted primary and a read from a
    /// secondary try them in. Nothing is allocated for a shard without secondaries.
    pub fn ready_longest_first(&self) -> Vec<&Secondary> {
        let mut ready: Vec<&Secondary> = self
            .live_secondaries()
            .filter(|secondary| secondary.ready_since_ms.is_some())
            .collect();
        // Stable: placement order stays among equals.
        ready.sort_by_key(|secondary| secondary.ready_since_ms);
        ready
    }
}

/// One secondary of a shard (P19.1): a warm copy on an executor other than the primary's, which
/// admits only secondary work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secondary {
    /// The executor holding it; once lost, the one that held it.
    pub executor: ExecutorId,
    /// When its executor said it is ready (P19.3), on the leader clock; `None` until then. A
    /// primary goes to the secondary that has been ready longest (P19.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_since_ms: Option<u64>,
    /// Log index of the entry that placed it on `executor`: readiness counts only from a renewal
    /// whose executor had applied a set at or after it (P19.3).
    #[serde(default)]
    pub placed_revision: u64,
    /// When it was placed on `executor`, on the leader clock: a secondary placed ahead of a
    /// primary's move that has not said it is ready within the restore delay no longer holds
    /// the move back (P19.3).
    #[serde(default)]
    pub placed_at_ms: u64,
    /// Set once its executor left (lapsed, deregistered, removed): the replica waits out the
    /// namespace's restore delay for an executor of the same name (P19.4) before it is placed
    /// elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<LostReplica>,
}

/// A secondary whose executor left (P19.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostReplica {
    /// When its executor left, on the leader clock.
    pub since_ms: u64,
    /// The executor's `--name`: an executor registering under it within the delay takes the
    /// replica back. `None` for an executor without a name, whose replica only waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A reshard under way in a namespace (P20.2): asked for by an operator's entry, applied by the
/// leader's `Reshard` entry once the namespace is ready for it. A split waits only for the
/// namespace's handoffs in flight to finish (the plans start none meanwhile); a merge first
/// brings each pair of shards to one executor with ordinary handoffs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReshard {
    pub kind: ReshardKind,
    /// The shard count it goes to: twice or half the count when it was asked for.
    pub shard_count: u32,
    /// Log index of the entry that asked for it.
    pub requested_revision: u64,
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
    /// Its replicas per shard and how they are placed and restored (P19.1, P19.2, P19.4); one
    /// replica, and left out of every record, unless set.
    #[serde(default, skip_serializing_if = "ReplicaSettings::is_default")]
    pub replication: ReplicaSettings,
    /// Log index of the entry that created it; 0 for `default`, which exists from the
    /// cluster's start.
    pub created_revision: u64,
    /// Log index of the last entry that changed owners, handoffs, pins or membership in it (or
    /// maintenance, which concerns every namespace): a plan for it made at or after it is still
    /// current (P2.4), whatever other namespaces did since, so one namespace's churn never makes
    /// another's plans stale.
    pub assignment_revision: u64,
    /// Log index of the last entry that changed which of its secondaries are ready, or since
    /// when (a renewal's readiness, P19.3), without moving `assignment_revision` (plans do not
    /// go stale by it). With `assignment_revision`, what its routing table (P19.5) is a
    /// function of: the routing runs are kept for the pair. 0 until a renewal changes
    /// readiness, and left out of every record then, so a namespace of one replica records
    /// what it always did.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub readiness_revision: u64,
    /// Raised by each split or merge (P20.1); 0 for a namespace never resharded, and left out
    /// of every record then.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
    /// The most shards any of its layouts had (P20.3): an executor a set behind still renews
    /// with claims of an older layout, so its shard numbers are read against this, not the
    /// count. 0 until it reshards (the count is then the bound), and left out of every record
    /// then.
    #[serde(default, skip_serializing_if = "is_zero_count")]
    pub widest_shard_count: u32,
    /// A reshard an operator asked for that is not done yet (P20.2); `None` when none is under
    /// way, and left out of every record then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reshard: Option<PendingReshard>,
    /// `shard_count` entries, index = shard number.
    pub(in crate::lease) shards: Vector<Shard>,
    /// Shards an operator pinned, and to whom (P17.4). A pin goes when its executor does.
    pub(in crate::lease) pins: OrdMap<ShardId, ExecutorId>,
    /// The shards with a handoff, ascending. Derived from the shard table and never stored (a
    /// decoded state rebuilds it). Delivery rounds, leader steps and removals read it, so their
    /// work is proportional to the handoffs in flight, not to the shard count.
    #[serde(skip)]
    pub(in crate::lease) releasing: OrdSet<ShardId>,
    /// The executors registered in it; derived from the executors and never stored, so a
    /// registration checks `max_executors` without counting, and a read of one namespace's
    /// executors (each leader step reads every namespace's) costs its own executors, not all.
    #[serde(skip)]
    pub(in crate::lease) members: OrdSet<ExecutorId>,
    /// Each executor's live secondaries (P19.1), derived from the shard table and never stored,
    /// so an executor's set is read without scanning every shard.
    #[serde(skip)]
    pub(in crate::lease) secondaries_of: OrdMap<ExecutorId, OrdSet<ShardId>>,
    /// The shards with a lost secondary (P19.4), derived and never stored: what a returning
    /// executor and the plans look through, instead of every shard.
    #[serde(skip)]
    pub(in crate::lease) with_lost: OrdSet<ShardId>,
}

impl Namespace {
    /// A new namespace of `config`, created by the entry at `created_revision`, its shards
    /// unowned at `epoch` (0, or the epoch its name's shards last reached).
    pub(in crate::lease) fn new(
        config: ClusterConfig,
        max_executors: Option<u32>,
        placement: PlacementOverrides,
        replication: ReplicaSettings,
        created_revision: u64,
        epoch: Epoch,
    ) -> Self {
        Self {
            config,
            max_executors,
            placement,
            replication,
            created_revision,
            assignment_revision: created_revision,
            readiness_revision: 0,
            generation: 0,
            widest_shard_count: 0,
            reshard: None,
            shards: (0..config.shard_count)
                .map(|id| Shard {
                    id,
                    owner: None,
                    epoch,
                    handoff: None,
                    secondaries: Vec::new(),
                })
                .collect(),
            pins: OrdMap::new(),
            releasing: OrdSet::new(),
            members: OrdSet::new(),
            secondaries_of: OrdMap::new(),
            with_lost: OrdSet::new(),
        }
    }

    /// Rebuilds the indexes derived from the shard table alone (after decoding, or after a
    /// reshard replaced the table).
    pub(in crate::lease) fn rebuild_shard_indexes(&mut self) {
        self.releasing = releasing_in(&self.shards);
        self.secondaries_of = secondaries_in(&self.shards);
        self.with_lost = with_lost_in(&self.shards);
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

    /// The shards `executor_id` holds a live secondary of (P19.1), ascending.
    pub fn secondaries_of(&self, executor_id: &str) -> impl Iterator<Item = ShardId> + '_ {
        self.secondaries_of
            .get(executor_id)
            .into_iter()
            .flat_map(|shards| shards.iter().copied())
    }

    /// Its shards with a lost secondary (P19.4), ascending.
    pub fn with_lost_secondaries(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.with_lost.iter().copied()
    }

    /// How many executors are registered in it.
    pub fn executor_count(&self) -> usize {
        self.members.len()
    }

    /// The structural violations of [`LeaseState::consistency_violations`] within this
    /// namespace, `name`, whose executors are among `executors`.
    pub(super) fn violations(
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
            shard_violations(name, index, shard, &member, violations);
        }
        for (shard, executor) in &self.pins {
            if self.shard(*shard).is_none() || member(executor).is_none() {
                violations.push(format!(
                    "shard {shard} of {name} is pinned to {executor}, who is not registered in \
                     {name} or the shard is out of range"
                ));
            }
        }
        self.index_violations(name, executors, violations);
    }

    /// Whether the indexes derived from the shard table and the executors (never stored) agree
    /// with them, and the assignment revision with the creation.
    fn index_violations(
        &self,
        name: &str,
        executors: &OrdMap<ExecutorId, Executor>,
        violations: &mut Vec<String>,
    ) {
        let secondaries = secondaries_in(&self.shards);
        if secondaries != self.secondaries_of {
            violations.push(format!(
                "{name}'s secondaries index holds {} executors, its shard table {}",
                self.secondaries_of.len(),
                secondaries.len()
            ));
        }
        let with_lost = with_lost_in(&self.shards);
        if with_lost != self.with_lost {
            violations.push(format!(
                "{name}'s index of shards with a lost secondary lists {}, its shard table {}",
                self.with_lost.len(),
                with_lost.len()
            ));
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

    /// The bound the shard numbers its executors send are read against (P20.3): its count, or
    /// the most shards any of its layouts had, whichever is more.
    pub fn shard_number_bound(&self) -> u32 {
        self.config.shard_count.max(self.widest_shard_count)
    }

    /// The shards it holds against the cluster's quota: its count, or the count a split under
    /// way goes to (P20.1).
    pub fn reserved_shard_count(&self) -> u64 {
        let count = self.config.shard_count;
        u64::from(match self.reshard {
            Some(pending) => count.max(pending.shard_count),
            None => count,
        })
    }

    /// A pair of shards a merge to `shard_count` would join that are pinned to different
    /// executors (P20.2), if any, as `(shard, partner)`.
    pub fn pairs_pinned_apart(&self, shard_count: u32) -> Option<(ShardId, ShardId)> {
        self.pins.iter().find_map(|(&shard, executor)| {
            let partner = shard.checked_add(shard_count)?;
            let pinned = self.pins.get(&partner)?;
            (shard < shard_count && pinned != executor).then_some((shard, partner))
        })
    }

    /// The pairs a merge under way joins, as `(shard, partner)`: shard `s` and `s + N / 2` of
    /// `N` (P20.1). Empty unless a merge is under way.
    pub fn merge_pairs(&self) -> impl Iterator<Item = (&Shard, &Shard)> {
        let half = match self.reshard {
            Some(PendingReshard {
                kind: ReshardKind::Merge,
                ..
            }) => self.shards.len() / 2,
            _ => 0,
        };
        self.shards
            .iter()
            .take(half)
            .zip(self.shards.iter().skip(half))
    }

    /// The shard `shard` merges with in the merge under way (P20.2), if one is.
    pub fn merge_partner(&self, shard: ShardId) -> Option<ShardId> {
        let Some(PendingReshard {
            kind: ReshardKind::Merge,
            shard_count,
            ..
        }) = self.reshard
        else {
            return None;
        };
        if shard >= shard_count.checked_mul(2)? {
            return None;
        }
        Some(if shard < shard_count {
            shard + shard_count
        } else {
            shard - shard_count
        })
    }

    /// What the reshard under way waits for before the leader's entry carries it out (P20.2):
    /// for a split, the handoffs in flight in the namespace (the plans start none meanwhile);
    /// for a merge, the pairs not yet on one executor, or on none, with no handoff. 0 when it is
    /// ready, or when none is under way.
    pub fn reshard_waiting_on(&self) -> u64 {
        let waiting = match self.reshard {
            None => 0,
            Some(PendingReshard {
                kind: ReshardKind::Split,
                ..
            }) => self.releasing.len(),
            Some(PendingReshard {
                kind: ReshardKind::Merge,
                ..
            }) => self
                .merge_pairs()
                .filter(|(low, high)| !together(low, high))
                .count(),
        };
        u64::try_from(waiting).unwrap_or(u64::MAX)
    }

    /// The highest epoch any of its shards reached: what a namespace created again under its
    /// name starts from.
    pub(in crate::lease) fn highest_epoch(&self) -> Epoch {
        self.shards
            .iter()
            .map(|shard| shard.epoch)
            .max()
            .unwrap_or(0)
    }
}

/// What is wrong with one entry of `name`'s shard table, at `index`: its place, its owner (one
/// of `name`'s executors, holding it in its set, at a minted epoch) and its handoff's target.
fn shard_violations<'a>(
    name: &str,
    index: usize,
    shard: &Shard,
    member: &dyn Fn(&str) -> Option<&'a Executor>,
    violations: &mut Vec<String>,
) {
    let at = format!("shard {} of {name}", shard.id);
    if usize::try_from(shard.id).ok() != Some(index) {
        violations.push(format!("{at} is at index {index}"));
    }
    match &shard.owner {
        Some(owner) => {
            match member(owner) {
                Some(executor) if executor.owned_shards.contains(&shard.id) => {}
                Some(_) => violations.push(format!("{at} names owner {owner}, whose set lacks it")),
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
    secondary_violations(&at, name, shard, member, violations);
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

/// What is wrong with a shard's secondaries (P19.1): each on an executor of the namespace (or
/// lost), none on the owner, none twice, at most [`MAX_REPLICAS`] − 1 of them.
fn secondary_violations<'a>(
    at: &str,
    name: &str,
    shard: &Shard,
    member: &dyn Fn(&str) -> Option<&'a Executor>,
    violations: &mut Vec<String>,
) {
    let most = usize::try_from(leasehold_api::wire::MAX_REPLICAS - 1).unwrap_or(usize::MAX);
    if shard.secondaries.len() > most {
        violations.push(format!("{at} has {} secondaries", shard.secondaries.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for secondary in &shard.secondaries {
        let executor = secondary.executor.as_str();
        if !seen.insert(executor) {
            violations.push(format!("{at} has two secondaries on {executor}"));
        }
        if secondary.lost.is_none() && member(executor).is_none() {
            violations.push(format!(
                "{at} has a secondary on {executor}, who is not registered in {name}"
            ));
        }
        if shard.owner.as_deref() == Some(executor) {
            violations.push(format!("{at} has a secondary on its owner {executor}"));
        }
    }
}

/// Whether a merge may join `low` and `high` (P20.2): one owner, or none, and no handoff.
pub fn together(low: &Shard, high: &Shard) -> bool {
    low.owner == high.owner && low.handoff.is_none() && high.handoff.is_none()
}

/// Serde's test for a shard count that was never set.
fn is_zero_count(count: &u32) -> bool {
    *count == 0
}

/// Serde's test for a revision that was never set.
fn is_zero(revision: &u64) -> bool {
    *revision == 0
}
