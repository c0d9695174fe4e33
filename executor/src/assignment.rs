//! The set of shards the executor holds and the order deliveries apply in (PROTOCOL §4). Pure:
//! no clock, no I/O; it says which shards a delivery drops and gains, and the admission core
//! ([`crate::admission`]) turns that into admission starts and stops.
//!
//! Ordering (P4.1): every delivered set (register reply, renew reply, assign push) carries the
//! revision it was read from and applies only if that revision is at least the last one
//! applied. A revoke carries the revision it was committed at and applies unless a set read
//! after it was applied; applying it raises the last applied revision to at least its own: an
//! assign push read before the revoke (hence with a lower revision) that arrives after it can
//! then no longer bring the shard back. The handoff's exclusivity (P5.2) rests on this, because
//! the revoke reply tells the manager the shard may go to its next owner. A revoke overtaken by
//! a newer set is answered released for the shards that set no longer lists (they are not
//! admitted) and ignored for the ones it lists again.
//!
//! Self-healing (P4.1): a grant answering a request sent after revision R was applied carries at
//! least R in a real cluster, so one below R disowns the set applied at R (a forged push, up to
//! `u64::MAX`, would otherwise make every later set stale). [`AssignmentState::adopt`] replaces
//! the set with the grant's whatever the revision; when to call it is decided in
//! [`crate::admission::AdmissionCore::disowns`].
//!
//! Secondaries (PROTOCOL §19): a set also lists the shards this executor holds a secondary of,
//! whole, whatever form its primaries take. They are replaced with every set applied, in the
//! same revision order (a stale set changes neither list), and checked as the primaries are (in
//! range, once, and never a primary of the same set: the replicas of a shard are on distinct
//! executors, P19.1). Revokes are the primaries' handoffs (P5.2) and leave secondaries alone.
//! Readiness (P19.3), what the embedding service says of each secondary, is kept here too,
//! since it lives exactly as long as the secondary it is about.
//!
//! Layouts (PROTOCOL §20): a set also says the namespace's `shard_count` and `generation`. Within
//! a generation the count never changes, and a set of the same generation with another count is
//! refused as meant for another cluster. A set of a newer generation brings its count, and its
//! shards are those of the new layout: every shard held in the old one changed epoch at the
//! reshard, so the one receipt of that set stops each at its old epoch and starts the new ones
//! (P4.3), and keys map by the new count from that instant. A set of an older generation is
//! stale by its revision, or refused: generations rise with revisions.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;

use leasehold_api::wire::{check_shard_list, RevokeReply, ShardEpoch, ShardListError};

/// Why a delivery was refused as malformed (I6). A refused delivery changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// A shard count of zero cannot map any key.
    #[error("shard_count must be positive")]
    ZeroShardCount,
    /// Within a generation the shard count is fixed (§20); another value means the delivery is
    /// meant for another cluster.
    #[error("shard_count {got} does not match this executor's {expected}")]
    ShardCountMismatch {
        /// What this executor learned first.
        expected: u32,
        /// What the delivery says.
        got: u32,
    },
    /// `shard >= shard_count`.
    #[error("shard {shard} is out of range (shard count {shard_count})")]
    ShardOutOfRange {
        /// The offending shard.
        shard: u32,
        /// The cluster's shard count.
        shard_count: u32,
    },
    /// A set or revoke naming one shard twice is ambiguous (two epochs for one shard).
    #[error("shard {shard} is listed twice")]
    DuplicateShard {
        /// The shard listed twice.
        shard: u32,
    },
    /// A set of an older generation than the one applied, not stale by its revision: a real
    /// cluster raises generations with revisions, so it is meant for another (§20).
    #[error("generation {got} is older than this executor's {applied}, at a revision not older")]
    GenerationWentBack {
        /// The generation applied.
        applied: u64,
        /// What the delivery says.
        got: u64,
    },
    /// A revoke not older than the last set applied, numbered in another generation's layout
    /// (§20): the set of that generation has not arrived yet, and the revoke's shard numbers
    /// would name other shards here. The manager sends it again; once the set is applied it
    /// applies in the right layout.
    #[error(
        "a revoke in generation {got}'s layout, and this executor's set is of generation {applied}"
    )]
    RevokeInAnotherLayout {
        /// The generation of the last set applied.
        applied: u64,
        /// What the revoke says.
        got: u64,
    },
    /// A set listing a shard both among its primaries and among its secondaries (P19.1: a
    /// shard's replicas are on distinct executors), which no manager sends: which role would
    /// its work be admitted in?
    #[error("shard {shard} is listed both as a primary and as a secondary")]
    PrimaryAndSecondary {
        /// The shard listed in both roles.
        shard: u32,
    },
}

/// A secondary's readiness was refused (P19.3): it changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "shard {shard} is not held as a secondary at epoch {epoch}{}",
    match held_at {
        Some(held) => format!(" (it is, at epoch {held})"),
        None => String::new(),
    }
)]
pub struct NotSecondary {
    /// The shard said ready.
    pub shard: u32,
    /// The epoch it was said ready at.
    pub epoch: u64,
    /// The epoch the set holds it at as a secondary, if it holds it as one.
    pub held_at: Option<u64>,
}

/// A secondary this executor holds (PROTOCOL P19.1), with its readiness (P19.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
pub struct Secondary {
    /// The shard.
    pub shard: u32,
    /// The shard's current epoch, as the set shows it (the primary's: a secondary fences
    /// nothing with it).
    pub epoch: u64,
    /// Renewals say it is ready to be promoted.
    pub ready: bool,
}

/// What a set delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    /// Applied (P4.3): `dropped` shards left the set, then `gained` ones joined it. A shard whose
    /// epoch changed is in both: it left under its old epoch and came back under the new one.
    /// The same for the secondaries (P19.1); a shard promoted from a secondary to the primary is
    /// in `secondaries_dropped` and `gained`.
    Applied {
        /// Shards (with the epochs they were held at) that left the set, ascending.
        dropped: Vec<ShardEpoch>,
        /// Shards (with their new epochs) that joined the set, ascending.
        gained: Vec<ShardEpoch>,
        /// Secondaries (with the epochs they were held at) that left the set, ascending.
        secondaries_dropped: Vec<ShardEpoch>,
        /// Secondaries (with their new epochs) that joined the set, ascending.
        secondaries_gained: Vec<ShardEpoch>,
    },
    /// Older than the last delivery applied (P4.1): nothing changed.
    Stale {
        /// The delivery's revision.
        revision: u64,
        /// The last revision applied, which the delivery is older than.
        applied_revision: u64,
    },
}

/// What a revoke did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeOutcome {
    /// Applied: none of the revoked shards is held any more.
    Applied {
        /// Shards (with epochs) that were held and left the set, ascending.
        dropped: Vec<ShardEpoch>,
        /// Every shard the revoke named, ascending: none of them is held now, whether it was
        /// before or not, so all may be handed on (the revoke reply's `released`).
        released: Vec<u32>,
    },
    /// Older than the last set applied (P4.1): a set read after it overtook it, and the state
    /// is unchanged. The revoke's shards that the set no longer holds are not admitted, so they
    /// are reported `released` (P5.2): the newer delivery already did what the revoke asks. The
    /// ones it holds again came back in that newer delivery; they stay, and are not released.
    Overtaken {
        /// The revoke's revision.
        revision: u64,
        /// The revision of the last set applied, which the revoke is older than.
        applied_revision: u64,
        /// The revoke's shards not held, ascending: none of them is admitted.
        released: Vec<u32>,
        /// The revoke's shards held again, ascending.
        still_held: Vec<u32>,
    },
}

impl RevokeOutcome {
    /// The answer to the revoke at `revision` (§9). An overtaken revoke that released nothing
    /// (every shard came back) is answered ignored, never as done (P5.2).
    pub fn reply(&self, revision: u64) -> RevokeReply {
        let released = match self {
            RevokeOutcome::Applied { released, .. } | RevokeOutcome::Overtaken { released, .. } => {
                released.clone()
            }
        };
        RevokeReply {
            revision,
            ignored: released.is_empty() && matches!(self, RevokeOutcome::Overtaken { .. }),
            released,
        }
    }
}

fn sorted(mut shards: Vec<u32>) -> Vec<u32> {
    shards.sort_unstable();
    shards
}

/// What left and what joined when `before` became `after` (P4.3), each ascending: a shard whose
/// epoch changed is in both.
fn changes(
    before: &BTreeMap<u32, u64>,
    after: &BTreeMap<u32, u64>,
) -> (Vec<ShardEpoch>, Vec<ShardEpoch>) {
    let left = |from: &BTreeMap<u32, u64>, to: &BTreeMap<u32, u64>| {
        from.iter()
            .filter(|&(shard, epoch)| to.get(shard) != Some(epoch))
            .map(|(&shard, &epoch)| ShardEpoch { shard, epoch })
            .collect()
    };
    (left(before, after), left(after, before))
}

/// Whether `held` is exactly `listed` (as sets list shards, ascending): one pass, no allocation.
fn same_as(held: &BTreeMap<u32, u64>, listed: &[ShardEpoch]) -> bool {
    held.len() == listed.len()
        && held
            .iter()
            .zip(listed)
            .all(|((&shard, &epoch), delivered)| {
                delivered.shard == shard && delivered.epoch == epoch
            })
}

/// A namespace's layout as a set states it (PROTOCOL §20): its shard count and the generation
/// that count belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Layout {
    pub shard_count: u32,
    /// 0 until the namespace first reshards.
    pub generation: u64,
}

impl Layout {
    /// The shards of this layout that hold some key of shard `shard` of layout `of`, ascending.
    /// A key's shard is its hash modulo the count (§1), so shard `r` of `a` shards and shard `t`
    /// of `b` share a key exactly when `r` and `t` agree modulo the greatest common divisor of
    /// `a` and `b`: under a split, a parent's children; under a merge, the pair's shard. None
    /// while this layout's count is unknown (0); `of` with no count is taken as this layout.
    pub fn shards_sharing_keys_with(self, shard: u32, of: Layout) -> impl Iterator<Item = u32> {
        let count = self.shard_count;
        let of_count = if of.shard_count == 0 {
            count
        } else {
            of.shard_count
        };
        let step = greatest_common_divisor(count, of_count).max(1);
        (shard % step..count).step_by(step as usize)
    }
}

fn greatest_common_divisor(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The held set and the revision order of deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignmentState {
    /// Learned from the first delivery; fixed within a generation (§20).
    shard_count: Option<NonZeroU32>,
    /// The generation of the last set applied (§20): 0 until a reshard.
    generation: u64,
    /// Shard → epoch of every shard the last applied delivery gave this executor.
    held: BTreeMap<u32, u64>,
    /// Shard → revision of the delivery that gave it at its current epoch: tells a shard the
    /// manager had already taken away at an older grant's revision from one gained after it.
    gained_at: BTreeMap<u32, u64>,
    /// Shard → epoch of every secondary the last applied set gave this executor (P19.1).
    secondaries: BTreeMap<u32, u64>,
    /// The secondaries the embedding service said are ready (P19.3), by shard. Kept while the
    /// shard stays a secondary, across a change of its epoch (its primary moved elsewhere: the
    /// warm copy is the same one, and the managers keep it ready too); dropped with it.
    ready: BTreeSet<u32>,
    /// Revision of the last delivery applied, raised by applied revokes too (P4.1). Kept
    /// across re-registration: log indices only grow, so every delivery meant for the new
    /// executor is newer than anything meant for the old one.
    revision: u64,
    /// Revision of the last set applied (revokes leave it alone). Revokes are ordered against
    /// sets only: a revoke older than a newer revoke of other shards still applies to its own,
    /// and only a set read after it (which would list a shard that came back) overtakes it.
    set_revision: u64,
}

impl AssignmentState {
    /// The cluster's shard count, once a delivery has told it.
    pub fn shard_count(&self) -> Option<NonZeroU32> {
        self.shard_count
    }

    /// The layout of the last set applied (§20): its shard count (0 before any) and generation.
    pub fn layout(&self) -> Layout {
        Layout {
            shard_count: self.shard_count.map_or(0, NonZeroU32::get),
            generation: self.generation,
        }
    }

    /// Revision of the last delivery applied (what renewals report, P4.1/P5.2).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The epoch `shard` is held at, if held.
    pub fn epoch_of(&self, shard: u32) -> Option<u64> {
        self.held.get(&shard).copied()
    }

    /// The held set, ascending: the executor's renewal claims (P4.2).
    pub fn held(&self) -> Vec<ShardEpoch> {
        self.held
            .iter()
            .map(|(&shard, &epoch)| ShardEpoch { shard, epoch })
            .collect()
    }

    /// Whether `(shard, epoch)` is held.
    pub fn holds(&self, shard: u32, epoch: u64) -> bool {
        self.held.get(&shard) == Some(&epoch)
    }

    /// The epoch `shard` is held at as a secondary, if it is one (P19.1).
    pub fn secondary_epoch_of(&self, shard: u32) -> Option<u64> {
        self.secondaries.get(&shard).copied()
    }

    /// The secondaries, ascending (P19.1).
    pub fn secondaries(&self) -> Vec<ShardEpoch> {
        self.secondaries
            .iter()
            .map(|(&shard, &epoch)| ShardEpoch { shard, epoch })
            .collect()
    }

    /// The secondaries with their readiness, ascending: every one ready when `all_ready` (an
    /// executor whose secondaries need no warm-up, P19.3).
    pub fn secondaries_with_readiness(&self, all_ready: bool) -> Vec<Secondary> {
        self.secondaries
            .iter()
            .map(|(&shard, &epoch)| Secondary {
                shard,
                epoch,
                ready: all_ready || self.ready.contains(&shard),
            })
            .collect()
    }

    /// What a renewal says is ready (P19.3): the whole list, each at the epoch the set shows,
    /// ascending; every secondary when `all_ready`.
    pub fn ready_secondaries(&self, all_ready: bool) -> Vec<ShardEpoch> {
        self.secondaries
            .iter()
            .filter(|(shard, _)| all_ready || self.ready.contains(shard))
            .map(|(&shard, &epoch)| ShardEpoch { shard, epoch })
            .collect()
    }

    /// Checks that `ready` may be said of `shard` at `epoch`: saying a secondary ready needs it
    /// held as one at that very epoch (the service vouches for the copy it saw); saying it not
    /// ready is always taken, whatever the epoch, since it only makes a promotion less likely.
    pub fn check_readiness(&self, shard: u32, epoch: u64, ready: bool) -> Result<(), NotSecondary> {
        let held_at = self.secondary_epoch_of(shard);
        if ready && held_at != Some(epoch) {
            return Err(NotSecondary {
                shard,
                epoch,
                held_at,
            });
        }
        Ok(())
    }

    /// Records that the service says `shard` is (or is no longer) ready at `epoch` (P19.3), as
    /// [`Self::check_readiness`] allows. Answers whether anything changed.
    pub fn set_ready(&mut self, shard: u32, epoch: u64, ready: bool) -> Result<bool, NotSecondary> {
        self.check_readiness(shard, epoch, ready)?;
        Ok(if ready {
            self.ready.insert(shard)
        } else {
            self.ready.remove(&shard)
        })
    }

    /// Checks a set's layout against the one applied (§20), for a set read at `revision`: the
    /// same generation keeps the count, a newer one brings its own, and an older one must be
    /// stale by its revision.
    fn check_layout(&self, revision: u64, layout: Layout) -> Result<NonZeroU32, DeliveryError> {
        let count = NonZeroU32::new(layout.shard_count).ok_or(DeliveryError::ZeroShardCount)?;
        let Some(known) = self.shard_count else {
            return Ok(count);
        };
        if layout.generation == self.generation && known != count {
            return Err(DeliveryError::ShardCountMismatch {
                expected: known.get(),
                got: layout.shard_count,
            });
        }
        if layout.generation < self.generation && revision >= self.revision {
            return Err(DeliveryError::GenerationWentBack {
                applied: self.generation,
                got: layout.generation,
            });
        }
        Ok(count)
    }

    /// Checks that every shard is in range and listed once.
    fn check_shards<I>(shard_count: NonZeroU32, shards: I) -> Result<(), DeliveryError>
    where
        I: IntoIterator<Item = u32>,
        I::IntoIter: Clone,
    {
        check_shard_list(shards, shard_count.get()).map_err(|error| match error {
            ShardListError::OutOfRange { shard, shard_count } => {
                DeliveryError::ShardOutOfRange { shard, shard_count }
            }
            ShardListError::Duplicate { shard } => DeliveryError::DuplicateShard { shard },
        })
    }

    /// Validates a set delivery read at `revision` in `layout` (its primaries `shards` and its
    /// `secondaries`) without applying it.
    pub fn validate_set(
        &self,
        revision: u64,
        layout: Layout,
        shards: &[ShardEpoch],
        secondaries: &[ShardEpoch],
    ) -> Result<(), DeliveryError> {
        self.checked_layout(revision, layout, shards, secondaries)
            .map(drop)
    }

    /// [`Self::validate_set`], answering with the checked shard count that applying the set
    /// records.
    fn checked_layout(
        &self,
        revision: u64,
        layout: Layout,
        shards: &[ShardEpoch],
        secondaries: &[ShardEpoch],
    ) -> Result<NonZeroU32, DeliveryError> {
        let count = self.check_layout(revision, layout)?;
        Self::check_set_shards(count, shards, secondaries)?;
        Ok(count)
    }

    /// Checks a set's primaries and secondaries against its shard count: each in range and
    /// listed once, and no shard in both roles (P19.1).
    fn check_set_shards(
        count: NonZeroU32,
        shards: &[ShardEpoch],
        secondaries: &[ShardEpoch],
    ) -> Result<(), DeliveryError> {
        Self::check_shards(count, shards.iter().map(|s| s.shard))?;
        if !secondaries.is_empty() {
            Self::check_shards(count, secondaries.iter().map(|s| s.shard))?;
            let primaries: BTreeSet<u32> = shards.iter().map(|s| s.shard).collect();
            if let Some(both) = secondaries.iter().find(|s| primaries.contains(&s.shard)) {
                return Err(DeliveryError::PrimaryAndSecondary { shard: both.shard });
            }
        }
        Ok(())
    }

    /// Applies a full set (register reply, renew reply or assign push) of the generation
    /// applied, its primaries `shards` and its `secondaries`: [`Self::apply_set_in`] at that
    /// generation, with `shard_count`.
    pub fn apply_set(
        &mut self,
        revision: u64,
        shard_count: u32,
        shards: &[ShardEpoch],
        secondaries: &[ShardEpoch],
    ) -> Result<SetOutcome, DeliveryError> {
        let layout = Layout {
            shard_count,
            generation: self.generation,
        };
        self.apply_set_in(revision, layout, shards, secondaries)
    }

    /// Applies a full set read at `revision` in `layout`, its primaries `shards` and its
    /// `secondaries`, if its revision is at least the last applied (P4.1). Malformed input is
    /// refused whole, stale or not; a stale set changes neither list. A set of a newer
    /// generation switches the layout (§20).
    pub fn apply_set_in(
        &mut self,
        revision: u64,
        layout: Layout,
        shards: &[ShardEpoch],
        secondaries: &[ShardEpoch],
    ) -> Result<SetOutcome, DeliveryError> {
        let count = self.checked_layout(revision, layout, shards, secondaries)?;
        if revision < self.revision {
            return Ok(SetOutcome::Stale {
                revision,
                applied_revision: self.revision,
            });
        }
        Ok(self.replace(revision, (count, layout.generation), shards, secondaries))
    }

    /// Adopts a grant's set whatever the revision applied (P4.1, self-healing): the set and the
    /// revision become the grant's, also when that revision is lower. Only for a grant that
    /// disowns what was applied before its request was sent (see
    /// [`crate::admission::AdmissionCore::apply_grant_sent`]): that set cannot have come from
    /// this cluster. Malformed input is refused whole.
    ///
    /// A shard kept keeps when it was gained only if that was no later than the grant; a later
    /// one came from the disowned set and is stamped with the grant's revision, so a stale grant
    /// after this one still drops it when it no longer lists it (I1).
    pub fn adopt(
        &mut self,
        revision: u64,
        layout: Layout,
        shards: &[ShardEpoch],
        secondaries: &[ShardEpoch],
    ) -> Result<SetOutcome, DeliveryError> {
        // The set it replaces may have been a forgery's, of any generation: a grant of another
        // generation is taken with its own count; within one, the count still must match.
        let count = NonZeroU32::new(layout.shard_count).ok_or(DeliveryError::ZeroShardCount)?;
        if layout.generation == self.generation {
            self.check_layout(revision, layout)?;
        }
        Self::check_set_shards(count, shards, secondaries)?;
        for gained_at in self.gained_at.values_mut() {
            *gained_at = (*gained_at).min(revision);
        }
        Ok(self.replace(revision, (count, layout.generation), shards, secondaries))
    }

    /// Replaces the held set with `shards` and the secondaries with `secondaries` (both already
    /// validated) read at `revision`.
    fn replace(
        &mut self,
        revision: u64,
        (count, generation): (NonZeroU32, u64),
        shards: &[ShardEpoch],
        secondaries: &[ShardEpoch],
    ) -> SetOutcome {
        self.shard_count = Some(count);
        self.generation = generation;
        self.revision = revision;
        self.set_revision = revision;
        let (secondaries_dropped, secondaries_gained) = self.replace_secondaries(secondaries);
        // Most deliveries (every renewal's grant) repeat the held set: only the revision moves.
        // Held shards are iterated ascending, as sets are listed, so one pass tells.
        if same_as(&self.held, shards) {
            return SetOutcome::Applied {
                dropped: Vec::new(),
                gained: Vec::new(),
                secondaries_dropped,
                secondaries_gained,
            };
        }
        let next: BTreeMap<u32, u64> = shards.iter().map(|s| (s.shard, s.epoch)).collect();
        let (dropped, gained) = changes(&self.held, &next);
        self.gained_at.retain(|shard, _| next.contains_key(shard));
        for gained in &gained {
            self.gained_at.insert(gained.shard, revision);
        }
        self.held = next;
        SetOutcome::Applied {
            dropped,
            gained,
            secondaries_dropped,
            secondaries_gained,
        }
    }

    /// Replaces the secondaries (P19.1); readiness stays only for shards still secondaries
    /// (P19.3). Answers those that left and those that joined.
    fn replace_secondaries(
        &mut self,
        secondaries: &[ShardEpoch],
    ) -> (Vec<ShardEpoch>, Vec<ShardEpoch>) {
        if same_as(&self.secondaries, secondaries) {
            return (Vec::new(), Vec::new());
        }
        let next: BTreeMap<u32, u64> = secondaries.iter().map(|s| (s.shard, s.epoch)).collect();
        let changed = changes(&self.secondaries, &next);
        self.ready.retain(|shard| next.contains_key(shard));
        self.secondaries = next;
        changed
    }

    /// Checks a revoke read at `revision` as [`Self::apply_revoke`] does, changing nothing:
    /// every shard in range and none twice (I6). The range is known once a set was applied, and
    /// only for a revoke at or after that set: an older revoke is overtaken and may name shards
    /// of an older layout (§20), so only duplicates are refused then.
    pub fn validate_revoke(&self, revision: u64, shards: &[u32]) -> Result<(), DeliveryError> {
        self.validate_revoke_in(revision, self.generation, shards)
    }

    /// [`Self::validate_revoke`] of a revoke numbered in generation `generation`'s layout: a
    /// revoke not older than the last set applied must be in that set's layout (§20); an older
    /// one is overtaken by that set, whatever its layout.
    pub fn validate_revoke_in(
        &self,
        revision: u64,
        generation: u64,
        shards: &[u32],
    ) -> Result<(), DeliveryError> {
        if revision >= self.set_revision && generation != self.generation {
            return Err(DeliveryError::RevokeInAnotherLayout {
                applied: self.generation,
                got: generation,
            });
        }
        match self.shard_count {
            Some(count) if revision >= self.set_revision => {
                Self::check_shards(count, shards.iter().copied())
            }
            _ => Self::check_shards(NonZeroU32::MAX, shards.iter().copied()),
        }
    }

    /// Applies a revoke unless a set read after it was applied (P4.1), and raises the last
    /// applied revision to at least the revoke's so an older assign push arriving later is
    /// stale.
    ///
    /// Revokes of one executor's handoffs are sent concurrently, so a newer one often lands
    /// first; it names other shards and says nothing about the older one's, which still applies.
    /// A set read after the revoke does overtake it: the shards that set no longer lists are not
    /// admitted (reported released), and the ones it lists came back and stay (P5.2).
    pub fn apply_revoke(
        &mut self,
        revision: u64,
        shards: &[u32],
    ) -> Result<RevokeOutcome, DeliveryError> {
        self.validate_revoke(revision, shards)?;
        if revision < self.set_revision {
            // A shard the set does not hold is one this executor does not admit, whatever
            // delivery took it away: acknowledging it cannot let two owners admit at once. The
            // manager accepts the acknowledgement only while the handoff it names is current.
            let (still_held, released): (Vec<u32>, Vec<u32>) = shards
                .iter()
                .partition(|shard| self.held.contains_key(shard));
            return Ok(RevokeOutcome::Overtaken {
                revision,
                applied_revision: self.set_revision,
                released: sorted(released),
                still_held: sorted(still_held),
            });
        }
        let released = sorted(shards.to_vec());
        let dropped = released
            .iter()
            .filter_map(|&shard| {
                self.gained_at.remove(&shard);
                self.held
                    .remove(&shard)
                    .map(|epoch| ShardEpoch { shard, epoch })
            })
            .collect();
        self.revision = self.revision.max(revision);
        Ok(RevokeOutcome::Applied { dropped, released })
    }

    /// Drops the whole set, secondaries and their readiness included: the manager no longer
    /// knows this executor (`unknown_executor`), so it holds nothing. The revision is kept (see
    /// the field).
    pub fn clear(&mut self) -> Vec<ShardEpoch> {
        let dropped = self.held();
        self.held.clear();
        self.gained_at.clear();
        self.secondaries.clear();
        self.ready.clear();
        dropped
    }

    /// For a grant older than the last applied delivery (its set is stale, P4.1, but its lease
    /// still counts, P3.3): drops the held shards that the manager had already taken from this
    /// executor at the grant's revision, i.e. missing from the grant's set and gained no later
    /// than it. Their handoff deadline was fixed before this grant, so the grant's lease must not
    /// cover them (I1). Shards gained by newer deliveries are kept. Returns what was dropped.
    pub fn drop_taken_by(
        &mut self,
        grant_revision: u64,
        grant_shards: &[ShardEpoch],
    ) -> Vec<ShardEpoch> {
        let taken: Vec<u32> = self
            .held
            .keys()
            .copied()
            .filter(|shard| !grant_shards.iter().any(|s| s.shard == *shard))
            .filter(|shard| {
                self.gained_at
                    .get(shard)
                    .is_none_or(|&at| at <= grant_revision)
            })
            .collect();
        taken
            .into_iter()
            .filter_map(|shard| {
                self.gained_at.remove(&shard);
                self.held
                    .remove(&shard)
                    .map(|epoch| ShardEpoch { shard, epoch })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of generation 0 with `shard_count` shards.
    fn layout(shard_count: u32) -> Layout {
        Layout {
            shard_count,
            generation: 0,
        }
    }

    fn set(pairs: &[(u32, u64)]) -> Vec<ShardEpoch> {
        pairs
            .iter()
            .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
            .collect()
    }

    fn applied(dropped: &[(u32, u64)], gained: &[(u32, u64)]) -> SetOutcome {
        SetOutcome::Applied {
            dropped: set(dropped),
            gained: set(gained),
            secondaries_dropped: Vec::new(),
            secondaries_gained: Vec::new(),
        }
    }

    /// §20: a key's shard is its hash modulo the count, so a parent shares keys with its two
    /// children, a merged shard with its pair, and a layout with itself shard for shard.
    #[test]
    fn p20_3_shards_share_keys_across_layouts_by_their_residue() {
        let sharing = |of_shard, of_count, count| {
            layout(count)
                .shards_sharing_keys_with(of_shard, layout(of_count))
                .collect::<Vec<u32>>()
        };
        assert_eq!(sharing(3, 8, 16), [3, 11], "a parent's children");
        assert_eq!(sharing(3, 8, 32), [3, 11, 19, 27], "two splits on");
        assert_eq!(sharing(11, 16, 8), [3], "a child's merged shard");
        assert_eq!(sharing(5, 8, 8), [5], "the same layout");
        assert_eq!(sharing(5, 8, 0), Vec::<u32>::new(), "no layout known yet");
        // Every key of the shard lands in one of them, and only there.
        for hash in 0..256u32 {
            let shard_of = |count: u32| hash % count;
            let children = sharing(shard_of(8), 8, 32);
            assert!(children.contains(&shard_of(32)));
        }
    }

    #[test]
    fn p4_1_set_applies_at_equal_or_newer_revision_only() {
        let mut state = AssignmentState::default();
        assert_eq!(
            state.apply_set(10, 8, &set(&[(1, 1), (2, 1)]), &[]),
            Ok(applied(&[], &[(1, 1), (2, 1)]))
        );
        assert_eq!(
            state.apply_set(9, 8, &set(&[]), &[]),
            Ok(SetOutcome::Stale {
                revision: 9,
                applied_revision: 10
            })
        );
        assert_eq!(state.held(), set(&[(1, 1), (2, 1)]));
        assert_eq!(
            state.apply_set(10, 8, &set(&[(2, 1), (3, 4)]), &[]),
            Ok(applied(&[(1, 1)], &[(3, 4)]))
        );
        assert_eq!(state.revision(), 10);
    }

    /// I1 with a stale grant (P3.3, P4.1): X was taken at revision 12 (the revoke is still in
    /// flight), Y's revoke at 14 landed first. A grant read at 13 (without X) arrives last: its
    /// lease counts, so X, already taken at 13, must go; Z, gained at 15, stays.
    #[test]
    fn i1_a_stale_grant_drops_shards_already_taken_at_its_revision_and_keeps_newer_ones() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &set(&[(1, 1), (2, 1)]), &[])
            .unwrap(); // X = 1, Y = 2
        state.apply_revoke(14, &[2]).unwrap();
        state
            .apply_set(15, 8, &set(&[(1, 1), (3, 4)]), &[])
            .unwrap(); // a push adds Z = 3
        let dropped = state.drop_taken_by(13, &set(&[(2, 1)]));
        assert_eq!(dropped, set(&[(1, 1)]));
        assert_eq!(state.held(), set(&[(3, 4)]));
    }

    /// A renewal's grant usually repeats the held set: it applies as a change of revision only,
    /// in whatever order it lists the shards, and keeps when each shard was gained, which a
    /// later stale grant still needs (I1).
    #[test]
    fn p4_1_a_repeated_set_moves_only_the_revision_and_keeps_when_shards_were_gained() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &set(&[(1, 1), (2, 1)]), &[])
            .unwrap();
        state
            .apply_set(15, 8, &set(&[(1, 1), (2, 1), (3, 4)]), &[])
            .unwrap();
        for (revision, repeated) in [
            (16, set(&[(1, 1), (2, 1), (3, 4)])),
            (17, set(&[(3, 4), (1, 1), (2, 1)])),
        ] {
            assert_eq!(
                state.apply_set(revision, 8, &repeated, &[]),
                Ok(applied(&[], &[]))
            );
            assert_eq!(state.revision(), revision);
            assert_eq!(state.held(), set(&[(1, 1), (2, 1), (3, 4)]));
        }
        assert_eq!(
            state.apply_set(16, 8, &set(&[(1, 1), (2, 1), (3, 4)]), &[]),
            Ok(SetOutcome::Stale {
                revision: 16,
                applied_revision: 17
            })
        );
        assert_eq!(
            state.apply_set(18, 16, &set(&[(1, 1), (2, 1), (3, 4)]), &[]),
            Err(DeliveryError::ShardCountMismatch {
                expected: 8,
                got: 16
            })
        );
        // A grant read at 13 without shard 1: shard 1 (gained at 10) was taken by then, shard 3
        // (gained at 15) was not.
        assert_eq!(state.drop_taken_by(13, &set(&[(2, 1)])), set(&[(1, 1)]));
        assert_eq!(state.held(), set(&[(2, 1), (3, 4)]));
    }

    /// P4.1, I1: adopting a grant's set (a disowned one replaced) applies whatever the revision
    /// applied, and leaves no shard stamped as gained after the grant: a later stale grant
    /// without it still drops it.
    #[test]
    fn i1_an_adopted_set_keeps_no_gain_stamp_from_the_disowned_future() {
        let mut state = AssignmentState::default();
        state.apply_set(10, 8, &set(&[(1, 1)]), &[]).unwrap();
        state
            .apply_set(u64::MAX, 8, &set(&[(1, 1), (2, 1)]), &[])
            .unwrap();
        assert_eq!(
            state.apply_set(12, 8, &set(&[(1, 1), (2, 1)]), &[]),
            Ok(SetOutcome::Stale {
                revision: 12,
                applied_revision: u64::MAX
            })
        );
        assert_eq!(
            state.adopt(12, layout(8), &set(&[(1, 1), (2, 1)]), &[]),
            Ok(applied(&[], &[]))
        );
        assert_eq!(state.revision(), 12);
        assert_eq!(state.drop_taken_by(12, &set(&[(1, 1)])), set(&[(2, 1)]));
        assert_eq!(
            state.adopt(11, layout(8), &set(&[(3, 1)]), &[]),
            Ok(applied(&[(1, 1)], &[(3, 1)]))
        );
        assert_eq!(
            state.adopt(13, layout(16), &set(&[]), &[]),
            Err(DeliveryError::ShardCountMismatch {
                expected: 8,
                got: 16
            })
        );
        assert_eq!(state.held(), set(&[(3, 1)]));
        assert_eq!(state.revision(), 11);
    }

    #[test]
    fn p4_3_epoch_change_is_a_drop_then_a_gain() {
        let mut state = AssignmentState::default();
        state.apply_set(1, 8, &set(&[(5, 1)]), &[]).unwrap();
        assert_eq!(
            state.apply_set(2, 8, &set(&[(5, 3)]), &[]),
            Ok(applied(&[(5, 1)], &[(5, 3)]))
        );
    }

    #[test]
    fn p4_1_stale_revoke_of_a_shard_that_came_back_keeps_it_and_is_answered_ignored() {
        let mut state = AssignmentState::default();
        state.apply_set(20, 8, &set(&[(1, 2)]), &[]).unwrap();
        let before = state.clone();
        let outcome = state.apply_revoke(19, &[1]).unwrap();
        assert_eq!(
            outcome,
            RevokeOutcome::Overtaken {
                revision: 19,
                applied_revision: 20,
                released: vec![],
                still_held: vec![1],
            }
        );
        assert_eq!(state, before, "a stale revoke changes nothing");
        assert_eq!(
            outcome.reply(19),
            RevokeReply {
                revision: 19,
                released: vec![],
                ignored: true
            },
            "never answered as done (P5.2)"
        );
    }

    /// P4.1: only a set read *after* a revoke overtakes it. A set at the revoke's own revision
    /// (read from the same entry) does not: the revoke applies and its shards stop. The manager
    /// never sends such a set with the revoked shard in it (the entry that marks a shard
    /// releasing also takes it out of its owner's delivered set), so the simulator cannot tell
    /// `<` from `<=` here; this test can (tests/mutants/p4_1_revoke_at_set_revision_overtaken.patch).
    #[test]
    fn p4_1_a_revoke_at_the_revision_of_the_last_set_applies() {
        let mut state = AssignmentState::default();
        state
            .apply_set(12, 8, &set(&[(1, 1), (2, 1)]), &[])
            .unwrap();
        let outcome = state.apply_revoke(12, &[2]).unwrap();
        assert_eq!(
            outcome,
            RevokeOutcome::Applied {
                dropped: set(&[(2, 1)]),
                released: vec![2],
            }
        );
        assert_eq!(state.held(), set(&[(1, 1)]));
    }

    /// The push at 14 (the next plan) overtook the revoke at 12: it no longer lists shard 2, so
    /// the executor stopped admitting 2 when it applied it. The late revoke is answered
    /// released for 2, naming its own revision, and changes nothing (P5.2).
    #[test]
    fn p5_2_a_revoke_overtaken_by_a_set_without_the_shard_is_answered_released() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &set(&[(1, 1), (2, 1)]), &[])
            .unwrap();
        state.apply_set(14, 8, &set(&[(1, 1)]), &[]).unwrap();
        let before = state.clone();
        let outcome = state.apply_revoke(12, &[2]).unwrap();
        assert_eq!(
            outcome.reply(12),
            RevokeReply {
                revision: 12,
                released: vec![2],
                ignored: false
            }
        );
        assert_eq!(state, before, "a stale revoke changes nothing");
    }

    /// Only shards the set does not hold are released: one that a newer delivery gave back is
    /// admitted again and must not be reported released.
    #[test]
    fn p5_2_an_overtaken_revoke_releases_only_the_shards_not_held() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &set(&[(1, 1), (2, 1), (3, 1)]), &[])
            .unwrap();
        // At 14 shard 2 has gone and shard 3 is back at a new epoch.
        state
            .apply_set(14, 8, &set(&[(1, 1), (3, 2)]), &[])
            .unwrap();
        let outcome = state.apply_revoke(12, &[3, 2]).unwrap();
        assert_eq!(
            outcome,
            RevokeOutcome::Overtaken {
                revision: 12,
                applied_revision: 14,
                released: vec![2],
                still_held: vec![3],
            }
        );
        assert_eq!(outcome.reply(12).released, vec![2]);
        assert!(!outcome.reply(12).ignored);
        assert!(state.holds(3, 2));
    }

    /// Revokes of two handoffs, sent together, land newest first. The older one still names a
    /// shard no set has given back since it was committed, so it applies: the shard stops and
    /// is released, and the revision stays at the newer revoke's.
    #[test]
    fn p5_2_an_older_revoke_landing_after_a_newer_one_still_applies_to_its_shards() {
        let mut state = AssignmentState::default();
        state
            .apply_set(3, 8, &set(&[(1, 1), (2, 1), (3, 1)]), &[])
            .unwrap();
        state.apply_revoke(8, &[2]).unwrap();
        assert_eq!(
            state.apply_revoke(6, &[1]),
            Ok(RevokeOutcome::Applied {
                dropped: set(&[(1, 1)]),
                released: vec![1],
            })
        );
        assert_eq!(state.held(), set(&[(3, 1)]));
        assert_eq!(state.revision(), 8, "never lowered");
        // A push read at 7, before the revoke at 8, stays stale.
        assert!(matches!(
            state.apply_set(7, 8, &set(&[(1, 1), (2, 1), (3, 1)]), &[]),
            Ok(SetOutcome::Stale { .. })
        ));
    }

    #[test]
    fn p4_1_revoke_raises_the_applied_revision_so_an_older_push_is_stale() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &set(&[(1, 1), (2, 1)]), &[])
            .unwrap();
        assert_eq!(
            state.apply_revoke(15, &[2, 7]),
            Ok(RevokeOutcome::Applied {
                dropped: set(&[(2, 1)]),
                released: vec![2, 7],
            })
        );
        assert_eq!(state.revision(), 15);
        // An assign push read at 12 (before the revoke) that still carries shard 2.
        assert_eq!(
            state.apply_set(12, 8, &set(&[(1, 1), (2, 1)]), &[]),
            Ok(SetOutcome::Stale {
                revision: 12,
                applied_revision: 15
            })
        );
        assert!(!state.holds(2, 1));
    }

    #[test]
    fn i6_malformed_deliveries_are_refused_whole() {
        let mut state = AssignmentState::default();
        assert_eq!(
            state.apply_set(1, 0, &[], &[]),
            Err(DeliveryError::ZeroShardCount)
        );
        assert_eq!(
            state.apply_set(1, 8, &set(&[(8, 1)]), &[]),
            Err(DeliveryError::ShardOutOfRange {
                shard: 8,
                shard_count: 8
            })
        );
        assert_eq!(
            state.apply_set(1, 8, &set(&[(3, 1), (3, 2)]), &[]),
            Err(DeliveryError::DuplicateShard { shard: 3 })
        );
        state.apply_set(1, 8, &set(&[(3, 1)]), &[]).unwrap();
        assert_eq!(
            state.apply_set(2, 16, &set(&[]), &[]),
            Err(DeliveryError::ShardCountMismatch {
                expected: 8,
                got: 16
            })
        );
        assert_eq!(
            state.apply_revoke(3, &[9]),
            Err(DeliveryError::ShardOutOfRange {
                shard: 9,
                shard_count: 8
            })
        );
        assert_eq!(
            state.apply_revoke(3, &[1, 1]),
            Err(DeliveryError::DuplicateShard { shard: 1 })
        );
        assert_eq!(state.revision(), 1, "refusals change nothing");
        assert_eq!(state.held(), set(&[(3, 1)]));
    }

    #[test]
    fn clear_keeps_the_revision() {
        let mut state = AssignmentState::default();
        state.apply_set(7, 8, &set(&[(0, 1)]), &[]).unwrap();
        assert_eq!(state.clear(), set(&[(0, 1)]));
        assert_eq!(state.revision(), 7);
        assert!(state.held().is_empty());
    }

    /// P19.1, P4.1: the secondaries are replaced with every set applied, in the primaries'
    /// revision order: a stale set changes neither list.
    #[test]
    fn p19_1_a_stale_set_changes_neither_the_primaries_nor_the_secondaries() {
        let mut state = AssignmentState::default();
        assert_eq!(
            state.apply_set(10, 8, &set(&[(1, 1)]), &set(&[(2, 3), (5, 1)])),
            Ok(SetOutcome::Applied {
                dropped: set(&[]),
                gained: set(&[(1, 1)]),
                secondaries_dropped: set(&[]),
                secondaries_gained: set(&[(2, 3), (5, 1)]),
            })
        );
        let before = state.clone();
        assert_eq!(
            state.apply_set(9, 8, &set(&[(1, 1)]), &set(&[(6, 1)])),
            Ok(SetOutcome::Stale {
                revision: 9,
                applied_revision: 10
            })
        );
        assert_eq!(state, before, "a stale set changes nothing");
        assert_eq!(state.secondaries(), set(&[(2, 3), (5, 1)]));
        assert_eq!(
            state.apply_set(11, 8, &set(&[(1, 1)]), &set(&[(5, 1), (6, 1)])),
            Ok(SetOutcome::Applied {
                dropped: set(&[]),
                gained: set(&[]),
                secondaries_dropped: set(&[(2, 3)]),
                secondaries_gained: set(&[(6, 1)]),
            })
        );
        assert_eq!(state.secondary_epoch_of(6), Some(1));
        assert_eq!(state.secondary_epoch_of(2), None);
        assert_eq!(
            state.epoch_of(5),
            None,
            "a secondary is not held as a primary"
        );
    }

    /// P19.3 (a planned move onto a ready secondary): the set that promotes it lists the shard
    /// among the primaries at a new epoch and no longer among the secondaries.
    #[test]
    fn p19_3_a_promotion_is_a_secondary_dropped_and_a_primary_gained() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &set(&[(1, 1)]), &set(&[(4, 2)]))
            .unwrap();
        assert_eq!(
            state.apply_set(12, 8, &set(&[(1, 1), (4, 3)]), &[]),
            Ok(SetOutcome::Applied {
                dropped: set(&[]),
                gained: set(&[(4, 3)]),
                secondaries_dropped: set(&[(4, 2)]),
                secondaries_gained: set(&[]),
            })
        );
        assert!(state.holds(4, 3));
        assert!(state.secondaries().is_empty());
    }

    /// I6, P19.1: a secondary out of range, listed twice, or listed among the primaries too is
    /// refused whole, as the primaries are.
    #[test]
    fn p19_1_malformed_secondaries_are_refused_whole() {
        let mut state = AssignmentState::default();
        state
            .apply_set(1, 8, &set(&[(3, 1)]), &set(&[(4, 1)]))
            .unwrap();
        let before = state.clone();
        for (secondaries, error) in [
            (
                set(&[(8, 1)]),
                DeliveryError::ShardOutOfRange {
                    shard: 8,
                    shard_count: 8,
                },
            ),
            (
                set(&[(5, 1), (5, 2)]),
                DeliveryError::DuplicateShard { shard: 5 },
            ),
            (
                set(&[(2, 1), (3, 1)]),
                DeliveryError::PrimaryAndSecondary { shard: 3 },
            ),
        ] {
            assert_eq!(
                state.apply_set(2, 8, &set(&[(3, 1)]), &secondaries),
                Err(error.clone())
            );
            assert_eq!(
                state.adopt(2, layout(8), &set(&[(3, 1)]), &secondaries),
                Err(error.clone())
            );
            // Refused whether the set would apply or not.
            assert_eq!(
                state.apply_set(0, 8, &set(&[(3, 1)]), &secondaries),
                Err(error)
            );
        }
        assert_eq!(state, before, "refusals change nothing");
    }

    /// P5.2, P19.1: a revoke is a primary's handoff; it leaves the secondaries alone, a
    /// secondary of a shard it names included.
    #[test]
    fn p19_1_revokes_leave_the_secondaries_alone() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &set(&[(1, 1)]), &set(&[(2, 1)]))
            .unwrap();
        assert_eq!(
            state.apply_revoke(11, &[1, 2]),
            Ok(RevokeOutcome::Applied {
                dropped: set(&[(1, 1)]),
                released: vec![1, 2],
            })
        );
        assert_eq!(state.secondaries(), set(&[(2, 1)]));
        assert!(state.held().is_empty());
    }

    /// P19.3: readiness is said of a secondary held at that epoch, kept while the shard stays a
    /// secondary (across a change of its epoch: its primary moved), and dropped with it; a
    /// secondary placed again starts not ready. Saying not ready is always taken.
    #[test]
    fn p19_3_readiness_lives_as_long_as_the_secondary() {
        let mut state = AssignmentState::default();
        state
            .apply_set(10, 8, &[], &set(&[(2, 3), (5, 1)]))
            .unwrap();
        assert_eq!(
            state.set_ready(2, 4, true),
            Err(NotSecondary {
                shard: 2,
                epoch: 4,
                held_at: Some(3)
            })
        );
        assert_eq!(
            state.set_ready(6, 1, true),
            Err(NotSecondary {
                shard: 6,
                epoch: 1,
                held_at: None
            })
        );
        assert_eq!(state.set_ready(2, 3, true), Ok(true));
        assert_eq!(state.set_ready(2, 3, true), Ok(false), "said already");
        assert_eq!(state.ready_secondaries(false), set(&[(2, 3)]));
        assert_eq!(state.ready_secondaries(true), set(&[(2, 3), (5, 1)]));
        // Shard 2's primary moved: its epoch rose, and it is still ready, at the new epoch.
        state
            .apply_set(11, 8, &[], &set(&[(2, 4), (5, 1)]))
            .unwrap();
        assert_eq!(state.ready_secondaries(false), set(&[(2, 4)]));
        assert_eq!(
            state.secondaries_with_readiness(false),
            [
                Secondary {
                    shard: 2,
                    epoch: 4,
                    ready: true
                },
                Secondary {
                    shard: 5,
                    epoch: 1,
                    ready: false
                }
            ]
        );
        // Dropped, then placed again: a new copy, not ready until said so.
        state.apply_set(12, 8, &[], &set(&[(5, 1)])).unwrap();
        state
            .apply_set(13, 8, &[], &set(&[(2, 4), (5, 1)]))
            .unwrap();
        assert!(state.ready_secondaries(false).is_empty());
        state.set_ready(5, 1, true).unwrap();
        // Not ready any more, said at an epoch the service saw earlier: taken.
        assert_eq!(state.set_ready(5, 0, false), Ok(true));
        assert!(state.ready_secondaries(false).is_empty());
        state.set_ready(2, 4, true).unwrap();
        state.clear();
        assert!(state.secondaries().is_empty());
        state.apply_set(14, 8, &[], &set(&[(2, 4)])).unwrap();
        assert!(
            state.ready_secondaries(false).is_empty(),
            "a forgotten executor's readiness goes with its set"
        );
    }
}
