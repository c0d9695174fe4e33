//! The Raft log and vote on sled ([`RaftLogStorage`]).
//!
//! Entries live in their own tree keyed by big-endian index so sled's key order is log order.
//! Durability is acknowledged through a completion callback only after a sled flush that covers
//! the entries. With group commit on, `append` only queues its callback for a flusher task: every
//! append that arrives while a flush is in progress shares the next one, so the Raft core never
//! waits for an fsync per entry.
//!
//! A purge makes its point durable and returns; the entries behind it are deleted by a blocking
//! task (one at a time) while the Raft core goes on: deleting a few thousand entries took the
//! core 20–45 ms per snapshot, long enough to show in renewal p99 (docs/BENCHMARKS.md, B1).
//! Reads never return an entry at or below the purge point, deleted yet or not.

use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, StorageError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::codec::{decode, encode};
use crate::durability::{Durability, FlushFaults};
use crate::error::StoreError;
use crate::schema::{decode_entry_record, encode_entry_record, SchemaCodec, SchemaMarker};
use crate::state_machine::ApplyFaults;

/// Tree holding log entries, key = index as big-endian u64.
pub const LOG_TREE: &str = "raft_log";
/// Tree holding the vote, the committed log id and the last purged log id.
pub const META_TREE: &str = "raft_meta";

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// Upper bound on callbacks completed by one flush, so one slow flush cannot grow a batch
/// without limit.
const MAX_CALLBACKS_PER_FLUSH: usize = 4096;

/// Called once the entries of one append are durable, or with the error that made them not so.
pub type OnDurable = Box<dyn FnOnce(io::Result<()>) + Send + 'static>;

/// How the log store makes appends durable.
#[derive(Debug, Clone)]
pub struct LogStoreConfig {
    /// Share one flush among all appends that arrive while a flush is running. Off: every append
    /// flushes before it returns (kept for benchmarks and as a fallback).
    pub group_commit: bool,
    /// Appends whose flush has not started yet; when full, `append` waits (back-pressure on the
    /// Raft core instead of unbounded memory).
    pub flush_queue_capacity: usize,
    /// Injected flush failures (tests only).
    pub flush_faults: FlushFaults,
    /// Injected apply delays (tests only).
    pub apply_faults: ApplyFaults,
}

impl Default for LogStoreConfig {
    fn default() -> Self {
        Self {
            group_commit: true,
            flush_queue_capacity: 1024,
            flush_faults: FlushFaults::default(),
            apply_faults: ApplyFaults::default(),
        }
    }
}

/// Counters for benchmarks and metrics.
#[derive(Debug, Default)]
pub struct LogStoreStats {
    /// sled flushes (fsyncs) performed for appends.
    pub append_flushes: AtomicU64,
    /// Appends acknowledged as durable.
    pub appends_acknowledged: AtomicU64,
}

/// The Raft log and vote of one replica. Cheap to clone: clones share the trees and the flusher,
/// which is how openraft's replication tasks get their readers.
pub struct SledLogStore<C> {
    durability: Durability,
    log: sled::Tree,
    meta: sled::Tree,
    flusher: Option<mpsc::Sender<OnDurable>>,
    stats: Arc<LogStoreStats>,
    /// Lowest index reads may return: one past the last purged index (0 before any purge).
    readable_from: Arc<AtomicU64>,
    /// The deletion behind the last purge, still running or finished; the next purge waits for
    /// it, so at most one runs.
    deletion: Arc<tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// Raised before the first entry of a newer schema is written.
    marker: Arc<SchemaMarker>,
    _config: PhantomData<C>,
}

impl<C> Clone for SledLogStore<C> {
    fn clone(&self) -> Self {
        Self {
            durability: self.durability.clone(),
            log: self.log.clone(),
            meta: self.meta.clone(),
            flusher: self.flusher.clone(),
            stats: self.stats.clone(),
            readable_from: self.readable_from.clone(),
            deletion: self.deletion.clone(),
            marker: self.marker.clone(),
            _config: PhantomData,
        }
    }
}

impl<C> Debug for SledLogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledLogStore")
            .field("entries", &self.log.len())
            .field("group_commit", &self.flusher.is_some())
            .finish()
    }
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn to_io(error: &sled::Error) -> io::Error {
    io::Error::other(error.to_string())
}

impl<C: SchemaCodec> SledLogStore<C> {
    /// Opens the log on `db`. With group commit this spawns the flusher on the current tokio
    /// runtime, so it must be called from within one.
    pub(crate) fn open(
        db: &sled::Db,
        config: LogStoreConfig,
        durability: Durability,
        marker: Arc<SchemaMarker>,
    ) -> Result<Self, StoreError> {
        let log = db.open_tree(LOG_TREE)?;
        let meta = db.open_tree(META_TREE)?;
        let stats = Arc::new(LogStoreStats::default());
        let flusher = if config.group_commit {
            let runtime =
                tokio::runtime::Handle::try_current().map_err(|_| StoreError::NoRuntime)?;
            let (sender, receiver) = mpsc::channel(config.flush_queue_capacity.max(1));
            runtime.spawn(run_flusher(durability.clone(), receiver, stats.clone()));
            Some(sender)
        } else {
            None
        };
        let store = Self {
            durability,
            log,
            meta,
            flusher,
            stats,
            readable_from: Arc::new(AtomicU64::new(0)),
            deletion: Arc::new(tokio::sync::Mutex::new(None)),
            marker,
            _config: PhantomData,
        };
        store.remove_entries_left_by_interrupted_purge()?;
        Ok(store)
    }

    pub fn stats(&self) -> Arc<LogStoreStats> {
        self.stats.clone()
    }

    /// A purge persists the last purged id before it deletes entries; a crash in between leaves
    /// entries at or below it, which nothing may read any more.
    fn remove_entries_left_by_interrupted_purge(&self) -> Result<(), StoreError> {
        if let Some(last_purged) = self.read_meta::<LogId<C::NodeId>>(KEY_LAST_PURGED)? {
            self.readable_from
                .store(last_purged.index.saturating_add(1), Ordering::Release);
            self.remove_range(..=last_purged.index)?;
        }
        Ok(())
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StoreError> {
        self.meta
            .get(key)?
            .map(|bytes| decode(meta_name(key), &bytes))
            .transpose()
    }

    fn write_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StoreError> {
        self.meta.insert(key, encode(meta_name(key), value)?)?;
        Ok(())
    }

    fn remove_range<R: RangeBounds<u64>>(&self, range: R) -> Result<(), StoreError> {
        remove_log_range(&self.log, range)
    }

    fn last_entry_log_id(&self) -> Result<Option<LogId<C::NodeId>>, StoreError> {
        match self.log.last()? {
            Some((_, bytes)) => Ok(Some(decode_entry_record::<C>(&bytes)?.log_id)),
            None => Ok(None),
        }
    }

    /// Reads the entries whose index is in `range`, in order.
    pub fn read_entries<R: RangeBounds<u64>>(&self, range: R) -> Result<Vec<Entry<C>>, StoreError> {
        let readable_from = self.readable_from.load(Ordering::Acquire);
        let start = match range.start_bound() {
            Bound::Included(&index) => Bound::Included(index.max(readable_from)),
            Bound::Excluded(&index) if index >= readable_from => Bound::Excluded(index),
            Bound::Excluded(_) | Bound::Unbounded => Bound::Included(readable_from),
        };
        // A start clamped past the end is a collapsed range, which sled iterates as empty.
        let range = (start, range.end_bound().cloned());
        self.log
            .range(key_range(&range))
            .map(|item| {
                let (_, bytes) = item?;
                decode_entry_record::<C>(&bytes)
            })
            .collect()
    }

    /// Writes `entries` (atomically, as one sled batch, so a crash never leaves a hole inside
    /// one append) and arranges for `on_durable` to run once they are flushed to disk.
    ///
    /// The entries are readable when this returns; `on_durable` may run before or after.
    pub async fn append_with<I>(
        &mut self,
        entries: I,
        on_durable: OnDurable,
    ) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = Entry<C>>,
    {
        let mut batch = sled::Batch::default();
        let mut newest_schema = 0;
        for entry in entries {
            let (schema, record) = encode_entry_record::<C>(&entry)?;
            newest_schema = newest_schema.max(schema);
            batch.insert(&index_key(entry.log_id.index), record);
        }
        self.marker.cover(newest_schema).await?;
        self.log.apply_batch(batch)?;

        match &self.flusher {
            Some(flusher) => {
                if let Err(mpsc::error::SendError(on_durable)) = flusher.send(on_durable).await {
                    on_durable(Err(io::Error::other(
                        StoreError::FlusherStopped.to_string(),
                    )));
                    return Err(StoreError::FlusherStopped);
                }
            }
            None => {
                let flushed = self.durability.flush().await;
                self.stats.append_flushes.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .appends_acknowledged
                    .fetch_add(1, Ordering::Relaxed);
                let result = flushed.as_ref().map(|_| ()).map_err(to_io);
                on_durable(result);
                flushed?;
            }
        }
        Ok(())
    }

    fn io_error(error: StoreError, verb: ErrorVerb) -> StorageError<C::NodeId> {
        error.into_storage(ErrorSubject::Logs, verb)
    }
}

fn meta_name(key: &[u8]) -> &'static str {
    match key {
        KEY_VOTE => "vote",
        KEY_COMMITTED => "committed log id",
        KEY_LAST_PURGED => "last purged log id",
        _ => "log metadata",
    }
}

fn remove_log_range<R: RangeBounds<u64>>(log: &sled::Tree, range: R) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    for key in log.range(key_range(&range)).keys() {
        batch.remove(key?);
    }
    log.apply_batch(batch)?;
    Ok(())
}

/// Deletes the entries up to `upto` one by one. Not as one batch: sled applies a batch under an
/// exclusive lock on the whole database, and thousands of removes in one would hold every append
/// (and so every commit) for hundreds of milliseconds. Nothing needs the deletion atomic: reads
/// clamp to the durable purge point, and what a crash leaves the next purge deletes.
fn delete_purged(log: &sled::Tree, upto: u64) -> Result<(), StoreError> {
    for key in log.range(key_range(&(..=upto))).keys() {
        log.remove(key?)?;
    }
    Ok(())
}

fn key_range<R: RangeBounds<u64>>(range: &R) -> (Bound<[u8; 8]>, Bound<[u8; 8]>) {
    let map = |bound: Bound<&u64>| match bound {
        Bound::Included(index) => Bound::Included(index_key(*index)),
        Bound::Excluded(index) => Bound::Excluded(index_key(*index)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (map(range.start_bound()), map(range.end_bound()))
}

/// Completes queued callbacks in groups: everything queued when a flush starts is covered by it,
/// because each callback is queued only after its entries were written to sled.
async fn run_flusher(
    durability: Durability,
    mut queued: mpsc::Receiver<OnDurable>,
    stats: Arc<LogStoreStats>,
) {
    let mut group = Vec::with_capacity(MAX_CALLBACKS_PER_FLUSH);
    while queued.recv_many(&mut group, MAX_CALLBACKS_PER_FLUSH).await > 0 {
        let flushed = durability.flush().await;
        stats.append_flushes.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = &flushed {
            tracing::error!(%error, appends = group.len(), "log flush failed");
        }
        stats
            .appends_acknowledged
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        for on_durable in group.drain(..) {
            on_durable(flushed.as_ref().map(|_| ()).map_err(to_io));
        }
    }
}

impl<C: SchemaCodec> RaftLogReader<C> for SledLogStore<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        self.read_entries(range)
            .map_err(|e| Self::io_error(e, ErrorVerb::Read))
    }
}

impl<C: SchemaCodec> RaftLogStorage<C> for SledLogStore<C> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let read = || -> Result<LogState<C>, StoreError> {
            let last_purged_log_id = self.read_meta::<LogId<C::NodeId>>(KEY_LAST_PURGED)?;
            let last_log_id = std::cmp::max(self.last_entry_log_id()?, last_purged_log_id.clone());
            Ok(LogState {
                last_purged_log_id,
                last_log_id,
            })
        };
        read().map_err(|e| Self::io_error(e, ErrorVerb::Read))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let result = async {
            self.write_meta(KEY_VOTE, vote)?;
            // A vote must be on disk before it is acted upon (Raft §5.2 safety).
            self.durability.flush().await?;
            Ok::<_, StoreError>(())
        };
        result
            .await
            .map_err(|e| e.into_storage(ErrorSubject::Vote, ErrorVerb::Write))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        self.read_meta(KEY_VOTE)
            .map_err(|e| e.into_storage(ErrorSubject::Vote, ErrorVerb::Read))
    }

    /// Not flushed here: losing the newest committed id in a crash only means re-applying less on
    /// restart, and the next flush (append, vote, purge) carries it anyway.
    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        self.write_meta(KEY_COMMITTED, &committed)
            .map_err(|e| Self::io_error(e, ErrorVerb::Write))
    }

    /// Never reports more than the log holds: openraft re-applies up to this id on start-up.
    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        let read = || -> Result<Option<LogId<C::NodeId>>, StoreError> {
            let committed = self
                .read_meta::<Option<LogId<C::NodeId>>>(KEY_COMMITTED)?
                .flatten();
            let last = std::cmp::max(
                self.last_entry_log_id()?,
                self.read_meta::<LogId<C::NodeId>>(KEY_LAST_PURGED)?,
            );
            Ok(std::cmp::min(committed, last))
        };
        read().map_err(|e| Self::io_error(e, ErrorVerb::Read))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let on_durable: OnDurable = Box::new(move |result| callback.log_io_completed(result));
        self.append_with(entries, on_durable)
            .await
            .map_err(|e| Self::io_error(e, ErrorVerb::Write))
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let result = async {
            self.remove_range(log_id.index..)?;
            // Flushed so a crash cannot resurrect conflicting entries beneath later appends.
            self.durability.flush().await?;
            Ok::<_, StoreError>(())
        };
        result
            .await
            .map_err(|e| Self::io_error(e, ErrorVerb::Delete))
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let result = async {
            // Entries before the purge point are unreadable from now on, and none is deleted
            // before the purge point is durable, so the log never has a hole that the log state
            // does not account for. Both waits happen off the Raft core: a restart before them
            // finds the purge point and the entries as they were, a log state as good.
            self.write_meta(KEY_LAST_PURGED, &log_id)?;
            self.readable_from
                .fetch_max(log_id.index.saturating_add(1), Ordering::AcqRel);
            let mut deletion = self.deletion.lock().await;
            // Normally long finished: purges are a snapshot interval apart.
            let previous = deletion.take();
            let durability = self.durability.clone();
            let log = self.log.clone();
            let upto = log_id.index;
            *deletion = Some(tokio::spawn(async move {
                if let Some(previous) = previous {
                    let _ = previous.await;
                }
                // A failed flush is kept (`durability`): the next append fails with it and the
                // Raft core stops, so nothing is deleted here.
                if let Err(error) = durability.flush().await {
                    tracing::error!(%error, upto, "making the purge point durable");
                    return;
                }
                let deleted = tokio::task::spawn_blocking(move || delete_purged(&log, upto)).await;
                // Left behind on failure: the next purge's range or the next start covers it.
                if let Ok(Err(error)) = deleted {
                    tracing::warn!(%error, upto, "deleting purged log entries");
                }
            }));
            Ok::<_, StoreError>(())
        };
        result
            .await
            .map_err(|e| Self::io_error(e, ErrorVerb::Delete))
    }
}
