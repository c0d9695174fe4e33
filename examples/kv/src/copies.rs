//! The secondaries' warm copies (PROTOCOL §19): a copy, in this process's memory, of each shard it
//! holds as a secondary, filled from the shared store and kept current by fetching only what
//! changed since the position it has applied ([`ShardStore::changes_since`]).
//!
//! **Why a copy at all, with a shared store.** The store is the one durable copy and the only
//! fence (docs/FENCING.md: "where the store itself is the shared copy, the store's
//! compare-and-set is the whole fence and the secondaries only read"). A secondary's copy is a
//! read cache that spares the store's files the reads a service sends to secondaries, and it is
//! the work a secondary must finish before it says it is ready to be promoted (P19.3): a copy is
//! ready once it has caught up with the store's high-water mark once.
//!
//! **Why in memory, not a local file.** The copy is a cache of a store that outlives it: a
//! process that restarts copies again (a returning executor's secondaries are not ready until it
//! says so anyway, P19.4), so a file would buy nothing but a second place to fence and clean up.
//! Memory is that of the shards held as secondaries, as large as their files' rows.
//!
//! **The fence of a copy** (docs/FENCING.md, "A copy that secondaries keep from the primary is
//! fenced by the same epoch"): a change is applied only if its epoch is at least the highest the
//! copy has applied. The store gives positions in commit order and refuses writes below its
//! fence, so its deltas never go back in epoch; the check is what keeps a copy from taking a
//! deposed owner's write if they did (a store restored from an older backup, a file replaced),
//! and a store whose high-water mark went below the copy's position has been replaced: the copy
//! starts over.
//!
//! Every bound is a [`CopyConfig`] field or a constant: one refresh at a time, at most
//! [`CopyConfig::pages_per_refresh`] pages of [`CopyConfig::page_rows`] changes per shard per
//! refresh, at most [`MAX_COPY_FETCHES`] shards fetched at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use leasehold_executor::{Assignment, Secondary};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use crate::service::{KvService, Ownership};
use crate::store::{ChangePage, ShardStore, Stored};
use crate::wire::CopyFreshness;

/// Shards whose deltas are fetched at once: the store's slots are shared with requests, and a
/// refresh must not take them all.
pub const MAX_COPY_FETCHES: usize = 4;

/// How the copies are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyConfig {
    /// How often each copy fetches what changed (`--secondary-refresh`): the staleness of a
    /// secondary read is about this plus one store read.
    pub refresh: Duration,
    /// Changes read per store transaction: bounds a transaction's length (another process's
    /// write waits for it) and the memory of one page.
    pub page_rows: usize,
    /// Pages per shard per refresh: a shard with a long backlog (its first copy) catches up over
    /// several refreshes instead of holding up the others.
    pub pages_per_refresh: usize,
}

impl Default for CopyConfig {
    fn default() -> Self {
        Self {
            refresh: Duration::from_millis(200),
            page_rows: 512,
            pages_per_refresh: 8,
        }
    }
}

/// What applying one page did ([`ShardCopy::apply`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Changes applied.
    pub applied: usize,
    /// Changes not applied: their epoch is below one the copy applied.
    pub refused: usize,
    /// The copy has every change up to the page's high-water mark.
    pub caught_up: bool,
    /// The store's high-water mark is below the copy's position: the store is not the one the
    /// copy followed, and the copy was emptied to start over.
    pub diverged: bool,
}

/// One shard's copy.
#[derive(Debug, Clone, Default)]
pub struct ShardCopy {
    rows: BTreeMap<String, Stored>,
    /// The highest position applied (or passed over, for a refused change).
    position: u64,
    /// The highest epoch of a change applied: the copy's fence.
    applied_epoch: u64,
    /// When the copy last held everything the store had given (`None`: never yet, so it is
    /// still warming and serves nothing).
    caught_up_at: Option<Instant>,
}

impl ShardCopy {
    /// The position applied: the next delta is read after it.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The highest epoch applied.
    pub fn applied_epoch(&self) -> u64 {
        self.applied_epoch
    }

    /// Whether the copy has caught up with the store at least once: only then may it serve
    /// reads or be said ready.
    pub fn is_complete(&self) -> bool {
        self.caught_up_at.is_some()
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The value of `key`, as of the copy.
    pub fn get(&self, key: &str) -> Option<&Stored> {
        self.rows.get(key)
    }

    /// The epoch and position applied and the time since the copy last caught up, at `now`;
    /// `None` while warming.
    pub fn freshness(&self, now: Instant) -> Option<CopyFreshness> {
        self.caught_up_at.map(|at| CopyFreshness {
            applied_epoch: self.applied_epoch,
            position: self.position,
            age_ms: u64::try_from(now.saturating_duration_since(at).as_millis())
                .unwrap_or(u64::MAX),
        })
    }

    /// Applies one page of changes read at `now`, in position order: a change at or below the
    /// position applied is already here; one whose epoch is below the highest applied is
    /// refused (the copy's fence) and only passed over. Caught up once the position reaches the
    /// page's high-water mark.
    pub fn apply(&mut self, page: &ChangePage, now: Instant) -> Applied {
        let mut outcome = Applied::default();
        if page.high_water < self.position {
            *self = ShardCopy::default();
            outcome.diverged = true;
            return outcome;
        }
        for change in &page.changes {
            if change.seq <= self.position {
                continue;
            }
            self.position = change.seq;
            if change.epoch < self.applied_epoch {
                outcome.refused += 1;
                continue;
            }
            self.applied_epoch = change.epoch;
            self.rows.insert(
                change.key.clone(),
                Stored {
                    value: change.value.clone(),
                    written_epoch: change.epoch,
                },
            );
            outcome.applied += 1;
        }
        if self.position >= page.high_water {
            self.caught_up_at = Some(now);
            outcome.caught_up = true;
        }
        outcome
    }
}

/// What a read of a copy found ([`Copies::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyRead {
    /// The key's value, and how fresh the copy is.
    Found(Stored, CopyFreshness),
    /// The key is not in the copy.
    Missing(CopyFreshness),
    /// No complete copy of the shard here (not held as a secondary, or still warming).
    Warming,
}

/// Every copy this process keeps, one per shard held as a secondary.
#[derive(Debug, Default)]
pub struct Copies {
    copies: Mutex<BTreeMap<u32, ShardCopy>>,
}

impl Copies {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u32, ShardCopy>> {
        // Each copy is changed by whole pages under the lock; a panic between two leaves a copy
        // that applied fewer changes, which the next delta completes.
        self.copies.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the copies of shards not in `wanted`, answering which; starts an empty copy of each
    /// shard of `wanted` without one.
    pub fn follow(&self, wanted: &BTreeSet<u32>) -> Vec<u32> {
        let mut copies = self.lock();
        let dropped: Vec<u32> = copies
            .keys()
            .filter(|shard| !wanted.contains(shard))
            .copied()
            .collect();
        for shard in &dropped {
            copies.remove(shard);
        }
        for &shard in wanted {
            copies.entry(shard).or_default();
        }
        dropped
    }

    /// The position `shard`'s copy has applied, if it has a copy.
    pub fn position(&self, shard: u32) -> Option<u64> {
        self.lock().get(&shard).map(ShardCopy::position)
    }

    /// Applies `page` to `shard`'s copy, if it still has one.
    pub fn apply(&self, shard: u32, page: &ChangePage, now: Instant) -> Option<Applied> {
        self.lock()
            .get_mut(&shard)
            .map(|copy| copy.apply(page, now))
    }

    /// Whether `shard` has a complete copy.
    pub fn is_complete(&self, shard: u32) -> bool {
        self.lock().get(&shard).is_some_and(ShardCopy::is_complete)
    }

    /// Copies held (complete or not).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no copy is held.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// `key` of `shard` from its copy, at `now`.
    pub fn read(&self, shard: u32, key: &str, now: Instant) -> CopyRead {
        let copies = self.lock();
        let Some(copy) = copies.get(&shard) else {
            return CopyRead::Warming;
        };
        let Some(freshness) = copy.freshness(now) else {
            return CopyRead::Warming;
        };
        match copy.get(key) {
            Some(stored) => CopyRead::Found(stored.clone(), freshness),
            None => CopyRead::Missing(freshness),
        }
    }
}

impl<O: Ownership> KvService<O> {
    /// Keeps a warm copy of every shard this process holds as a secondary, every
    /// `config.refresh` and on every change of the held set (a watch channel: only the newest
    /// set, nothing queues), until the executor is gone. Spawn it once.
    pub async fn keep_secondaries(self, config: CopyConfig) {
        let mut assignment = self.ownership().assignment();
        let mut ticks = tokio::time::interval(config.refresh);
        // A refresh longer than the interval is followed by one at once, not by a burst.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let view = assignment.borrow_and_update().clone();
            self.refresh_secondaries(&view, &config).await;
            tokio::select! {
                _ = ticks.tick() => {}
                changed = assignment.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// One refresh: drops the copies of shards no longer held as a secondary, brings every other
    /// one up to the store (as far as the page bounds allow), and says ready each secondary whose
    /// copy is complete and that the executor does not show ready yet (P19.3), at the epoch its
    /// set shows.
    pub async fn refresh_secondaries(&self, view: &Assignment, config: &CopyConfig) {
        let wanted: BTreeSet<u32> = view.secondaries.iter().map(|s| s.shard).collect();
        let primaries: BTreeSet<u32> = view.shards.iter().map(|held| held.shard).collect();
        for shard in self.copies().follow(&wanted) {
            // A shard promoted here keeps its connection: its primary serves from it now.
            if !primaries.contains(&shard) {
                self.store().forget(shard);
            }
            debug!(
                shard,
                "dropped the copy of a shard no longer held as a secondary"
            );
        }
        self.record_copies();
        let fetches = Arc::new(Semaphore::new(MAX_COPY_FETCHES));
        let mut catching_up = JoinSet::new();
        for &shard in &wanted {
            let (service, fetches, config) = (self.clone(), Arc::clone(&fetches), *config);
            catching_up.spawn(async move {
                // Closed never: the semaphore lives until the last task ends.
                let Ok(_fetch) = fetches.acquire().await else {
                    return;
                };
                service.catch_up(shard, &config).await;
            });
        }
        while let Some(joined) = catching_up.join_next().await {
            if let Err(error) = joined {
                warn!(%error, "copy refresh task failed");
            }
        }
        // The newest view, not the one this refresh started from: a secondary said ready since
        // is not said again, one dropped since is not said at all.
        let latest = self.ownership().assignment().borrow().clone();
        let unready: Vec<Secondary> = latest
            .secondaries
            .iter()
            .filter(|secondary| !secondary.ready && self.copies().is_complete(secondary.shard))
            .cloned()
            .collect();
        for Secondary { shard, epoch, .. } in unready {
            match self.ownership().set_secondary_ready(shard, epoch, true) {
                Ok(()) => {
                    self.counters()
                        .secondaries_said_ready
                        .fetch_add(1, Ordering::Relaxed);
                    info!(
                        shard,
                        epoch, "the secondary's copy is complete: said ready to be promoted"
                    );
                }
                // The set moved on (dropped or promoted): the next refresh sees the new one.
                Err(error) => debug!(shard, epoch, %error, "secondary not said ready"),
            }
        }
    }

    /// Brings `shard`'s copy up to the store, at most `config.pages_per_refresh` pages.
    async fn catch_up(&self, shard: u32, config: &CopyConfig) {
        for _ in 0..config.pages_per_refresh {
            let Some(after) = self.copies().position(shard) else {
                return;
            };
            let limit = config.page_rows;
            let page = match self
                .blocking(move |store: &ShardStore| store.changes_since(shard, after, limit))
                .await
            {
                Ok(page) => page,
                Err(error) => {
                    self.counters()
                        .copy_refresh_failures
                        .fetch_add(1, Ordering::Relaxed);
                    debug!(
                        shard,
                        ?error,
                        "copy not refreshed; the next refresh tries again"
                    );
                    return;
                }
            };
            let Some(applied) = self.copies().apply(shard, &page, Instant::now()) else {
                return;
            };
            self.count_applied(shard, &applied);
            if applied.diverged {
                // Said not ready until the copy is complete again; refused only if the shard is
                // no longer a secondary here, which takes readiness away anyway.
                let _ = self.ownership().set_secondary_ready(shard, 0, false);
                warn!(
                    shard,
                    high_water = page.high_water,
                    "the store's position is below the copy's: copying the shard again"
                );
                return;
            }
            if applied.caught_up {
                return;
            }
        }
    }

    fn count_applied(&self, shard: u32, applied: &Applied) {
        let counters = self.counters();
        let (done, refused) = (applied.applied as u64, applied.refused as u64);
        counters
            .copy_changes_applied
            .fetch_add(done, Ordering::Relaxed);
        counters
            .copy_changes_refused
            .fetch_add(refused, Ordering::Relaxed);
        metrics::counter!("leasehold_kv_copy_changes_total", "outcome" => "applied")
            .increment(done);
        if refused > 0 {
            metrics::counter!("leasehold_kv_copy_changes_total", "outcome" => "refused")
                .increment(refused);
            warn!(
                shard,
                refused, "changes below the copy's epoch were not applied"
            );
        }
    }

    fn record_copies(&self) {
        metrics::gauge!("leasehold_kv_secondary_copies").set(self.copies().len() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Change;

    fn change(key: &str, value: &str, epoch: u64, seq: u64) -> Change {
        Change {
            key: key.into(),
            value: value.into(),
            epoch,
            seq,
        }
    }

    fn page(store_epoch: u64, high_water: u64, changes: Vec<Change>) -> ChangePage {
        ChangePage {
            store_epoch,
            high_water,
            changes,
        }
    }

    fn stored(value: &str, written_epoch: u64) -> Stored {
        Stored {
            value: value.into(),
            written_epoch,
        }
    }

    /// A delta is applied in position order and the copy is complete once it reaches the
    /// store's high-water mark, not before.
    #[test]
    fn a_copy_is_complete_once_it_reaches_the_high_water_mark() {
        let now = Instant::now();
        let mut copy = ShardCopy::default();
        assert_eq!(copy.freshness(now), None);
        let first = copy.apply(&page(2, 3, vec![change("a", "a1", 1, 1)]), now);
        assert_eq!(
            first,
            Applied {
                applied: 1,
                ..Applied::default()
            }
        );
        assert!(!copy.is_complete(), "two changes are still to come");
        let rest = copy.apply(
            &page(2, 3, vec![change("b", "b1", 2, 2), change("a", "a2", 2, 3)]),
            now,
        );
        assert!(rest.caught_up && copy.is_complete());
        assert_eq!(copy.get("a"), Some(&stored("a2", 2)));
        assert_eq!(copy.get("b"), Some(&stored("b1", 2)));
        let later = now + Duration::from_millis(150);
        assert_eq!(
            copy.freshness(later),
            Some(CopyFreshness {
                applied_epoch: 2,
                position: 3,
                age_ms: 150
            })
        );
        // A delta already applied (a page read twice) changes nothing.
        let again = copy.apply(&page(2, 3, vec![change("a", "stale", 2, 3)]), later);
        assert_eq!(again.applied, 0);
        assert_eq!(copy.get("a"), Some(&stored("a2", 2)));
    }

    /// The copy's fence (docs/FENCING.md): a change at an epoch below one the copy applied is
    /// not applied, even at a newer position, and the position passes it so it is not read
    /// again. Fails if `ShardCopy::apply` stops comparing epochs.
    #[test]
    fn a_change_below_the_epoch_the_copy_applied_is_not_applied() {
        let now = Instant::now();
        let mut copy = ShardCopy::default();
        copy.apply(&page(3, 1, vec![change("k", "new owner", 3, 1)]), now);
        let late = copy.apply(
            &page(
                3,
                3,
                vec![
                    change("k", "deposed owner", 2, 2),
                    change("other", "deposed owner", 2, 3),
                ],
            ),
            now,
        );
        assert_eq!(
            late,
            Applied {
                refused: 2,
                caught_up: true,
                ..Applied::default()
            }
        );
        assert_eq!(copy.get("k"), Some(&stored("new owner", 3)));
        assert_eq!(copy.get("other"), None);
        assert_eq!((copy.position(), copy.applied_epoch()), (3, 3));
        let same_epoch = copy.apply(&page(3, 4, vec![change("k", "same owner", 3, 4)]), now);
        assert_eq!(same_epoch.applied, 1, "an equal epoch is the same owner's");
    }

    /// A store whose high-water mark is below the copy's position is not the one the copy
    /// followed: the copy starts over rather than mixing two histories.
    #[test]
    fn a_store_behind_the_copy_empties_it() {
        let now = Instant::now();
        let mut copy = ShardCopy::default();
        copy.apply(
            &page(1, 2, vec![change("a", "1", 1, 1), change("b", "2", 1, 2)]),
            now,
        );
        let replaced = copy.apply(&page(1, 1, vec![]), now);
        assert!(replaced.diverged);
        assert!(copy.is_empty() && !copy.is_complete() && copy.position() == 0);
    }

    #[test]
    fn copies_follow_the_secondaries_held() {
        let copies = Copies::default();
        let now = Instant::now();
        assert!(copies.follow(&BTreeSet::from([1, 2])).is_empty());
        assert_eq!(copies.read(1, "k", now), CopyRead::Warming);
        copies.apply(1, &page(1, 1, vec![change("k", "v", 1, 1)]), now);
        assert!(matches!(copies.read(1, "k", now), CopyRead::Found(..)));
        assert!(matches!(copies.read(1, "x", now), CopyRead::Missing(..)));
        assert_eq!(copies.follow(&BTreeSet::from([2, 3])), vec![1]);
        assert_eq!(copies.read(1, "k", now), CopyRead::Warming);
        assert_eq!(copies.apply(1, &page(1, 1, vec![]), now), None);
        assert_eq!(copies.len(), 2);
    }
}
