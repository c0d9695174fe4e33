//! Hosts a deterministic [`StateMachine`] for openraft ([`RaftStateMachine`]) and keeps its
//! snapshot in a file of its own beside sled (`crate::snapshot_file`), or in sled for a schema
//! whose releases look for it there ([`SchemaCodec::SNAPSHOT_FILE_SCHEMA`]).
//!
//! The state lives in memory; only snapshots are persisted (PROTOCOL P2.5: snapshots replace
//! compaction). On start-up the state is restored from the latest snapshot and openraft re-applies
//! the committed log after it, so `apply` never waits for disk.

use std::fmt::Debug;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder,
    RaftTypeConfig, SnapshotMeta, StorageError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::background::Background;
use crate::codec::{self, decode, encode};
use crate::descriptors;
use crate::durability::Durability;
use crate::error::StoreError;
use crate::schema::{check_readable, SchemaCodec, SchemaMarker};
use crate::snapshot_file;

/// Tree holding the current snapshot of a schema below [`SchemaCodec::SNAPSHOT_FILE_SCHEMA`]: its
/// metadata and its data, written together.
pub const SNAPSHOT_TREE: &str = "raft_snapshot";
const KEY_SNAPSHOT_META: &[u8] = b"meta";
const KEY_SNAPSHOT_DATA: &[u8] = b"data";

/// The application logic a replica runs: the lease state machine in the manager, a key-value map
/// in this crate's tests.
///
/// Implementations must be deterministic (PROTOCOL P2.2): the same commands in the same order
/// give the same state and responses on every replica, so `apply` must not read a clock, a
/// random source or the network. Time arrives inside the command.
pub trait StateMachine<C: SchemaCodec>: Clone + Default + Send + Sync + 'static {
    /// Applies one committed command; `log_index` is the index of the entry carrying it.
    fn apply(&mut self, log_index: u64, command: &C::D) -> C::R;

    /// Encodes the state at the oldest schema that can express it: `(schema, bincode payload)`.
    fn encode_state(&self) -> Result<(u32, Vec<u8>), StoreError>;

    /// Decodes a state written at `schema` (already checked to be one this build reads) and
    /// converts it to this build's types. The payload must be consumed whole.
    fn decode_state(schema: u32, payload: &[u8]) -> Result<Self, StoreError>;
}

/// The applied state and the Raft bookkeeping that goes with it.
#[derive(Debug, Clone, Default)]
pub struct Applied<C: RaftTypeConfig, S> {
    pub last_applied: Option<LogId<C::NodeId>>,
    pub last_membership: StoredMembership<C::NodeId, C::Node>,
    pub state: S,
}

/// Shared read access to the applied state, for inspection endpoints and the leader loop.
///
/// A read holds the lock for as long as its closure runs, and `apply` waits for it. The closure
/// cannot await (it is a plain `FnOnce`), so a read is a computation over the applied state and
/// nothing else: no I/O, no waiting on other tasks. Its cost is bounded by the state's size; a
/// read that scans all of it (a rebalance plan, a full state view, the routing table) takes
/// [`StateHandle::current`] instead, which holds the lock only to clone, so at a million shards
/// `apply` is not kept waiting; keep new reads to copying out what they need, and make those
/// scans proportional to what changed
/// (indexes in the state) rather than to its size when they show up in a profile.
pub struct StateHandle<C: RaftTypeConfig, S> {
    applied: Arc<RwLock<Applied<C, S>>>,
}

impl<C: RaftTypeConfig, S> Clone for StateHandle<C, S> {
    fn clone(&self) -> Self {
        Self {
            applied: self.applied.clone(),
        }
    }
}

impl<C: RaftTypeConfig, S> Debug for StateHandle<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateHandle").finish_non_exhaustive()
    }
}

impl<C: RaftTypeConfig, S> StateHandle<C, S> {
    /// Runs `read` against the applied state.
    pub fn read<R>(&self, read: impl FnOnce(&Applied<C, S>) -> R) -> R {
        read(&self.read_guard())
    }

    /// The applied state as it is now, to read without holding the lock.
    ///
    /// For a state built on persistent collections (the lease state is) the clone shares every
    /// node and costs a few reference counts; `apply` copies what it changes while the clone is
    /// alive.
    pub fn current(&self) -> S
    where
        S: Clone,
    {
        self.read_guard().state.clone()
    }

    fn read_guard(&self) -> RwLockReadGuard<'_, Applied<C, S>> {
        // A panic while applying would already have taken the replica down; the data behind a
        // poisoned lock is still the last consistent state we have.
        self.applied
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_guard(&self) -> RwLockWriteGuard<'_, Applied<C, S>> {
        self.applied
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The start of a snapshot's data: its schema and the Raft bookkeeping, followed by the state
/// encoded at that schema. Self-contained, so it can be verified and restored without anything
/// else. Byte for byte the layout of release 0.1.0, whose snapshot was this header and the state
/// encoded as one struct.
#[derive(Serialize, Deserialize)]
struct SnapshotHeader<C: RaftTypeConfig> {
    schema_version: u32,
    last_applied: Option<LogId<C::NodeId>>,
    last_membership: StoredMembership<C::NodeId, C::Node>,
}

/// Encodes `applied` as snapshot data in the format [`SledStateMachine`] builds and installs, so a
/// state restored from a backup can be installed as a replica's first snapshot (through
/// `RaftStateMachine::install_snapshot`, which checks it like any other).
pub fn encode_snapshot_data<C, S>(applied: &Applied<C, S>) -> Result<Vec<u8>, StoreError>
where
    C: SchemaCodec,
    S: StateMachine<C>,
{
    Ok(encode_snapshot::<C, S>(applied)?.1)
}

/// The snapshot data and the schema its state was written at.
fn encode_snapshot<C, S>(applied: &Applied<C, S>) -> Result<(u32, Vec<u8>), StoreError>
where
    C: SchemaCodec,
    S: StateMachine<C>,
{
    let (schema, state) = applied.state.encode_state()?;
    let header = codec::encode_payload(
        "snapshot",
        &SnapshotHeader::<C> {
            schema_version: schema,
            last_applied: applied.last_applied.clone(),
            last_membership: applied.last_membership.clone(),
        },
    )?;
    Ok((schema, codec::seal_parts(None, &[&header, &state])))
}

/// Decodes and checks snapshot data of any schema this build reads; returns the schema too.
pub fn decode_snapshot_data<C, S>(data: &[u8]) -> Result<(u32, Applied<C, S>), StoreError>
where
    C: SchemaCodec,
    S: StateMachine<C>,
{
    let opened = codec::open("snapshot", data)?;
    if opened.schema.is_some() {
        // Snapshots name their schema inside; their envelope is always format 1.
        return Err(StoreError::UnsupportedFormat {
            what: "snapshot",
            found: codec::TAGGED_FORMAT_VERSION,
            supported: codec::FORMAT_VERSION,
        });
    }
    let (header, read): (SnapshotHeader<C>, usize) =
        codec::decode_prefix("snapshot", opened.payload)?;
    check_readable::<C>("snapshot", header.schema_version, None)?;
    let state = S::decode_state(header.schema_version, &opened.payload[read..])?;
    Ok((
        header.schema_version,
        Applied {
            last_applied: header.last_applied,
            last_membership: header.last_membership,
            state,
        },
    ))
}

type MetaOf<C> = SnapshotMeta<<C as RaftTypeConfig>::NodeId, <C as RaftTypeConfig>::Node>;

/// A snapshot as stored: its metadata and its encoded data.
struct StoredSnapshot<C: RaftTypeConfig> {
    meta: MetaOf<C>,
    data: Vec<u8>,
}

/// Where a snapshot is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A file of its own beside sled's (`crate::snapshot_file`).
    File,
    /// sled's [`SNAPSHOT_TREE`], where releases before the file look.
    Tree,
}

impl Place {
    fn for_schema<C: SchemaCodec>(schema: u32) -> Self {
        if schema >= C::SNAPSHOT_FILE_SCHEMA {
            Place::File
        } else {
            Place::Tree
        }
    }
}

/// Writes snapshots only forwards: a slow build of an older state must never replace a newer
/// snapshot that was installed meanwhile.
///
/// Both places may hold a snapshot for a moment (a crash between storing one and removing the
/// other leaves both); the newer of the two is the current one. A store writes the new place
/// durably before it removes the old one, so a reader that finds neither looks again.
struct SnapshotStore {
    durability: Durability,
    /// Encodes snapshots at a low CPU priority (crate::background).
    encoder: Background,
    tree: sled::Tree,
    /// The data directory, which holds the snapshot file beside sled's own.
    dir: PathBuf,
    write_lock: Mutex<()>,
    marker: Arc<SchemaMarker>,
}

/// How often a read looks again when it found the snapshot in neither place while a store
/// moved it.
const READ_ATTEMPTS: usize = 3;

impl SnapshotStore {
    fn tree_meta<C: RaftTypeConfig>(&self) -> Result<Option<MetaOf<C>>, StoreError> {
        self.tree
            .get(KEY_SNAPSHOT_META)?
            .map(|bytes| decode("snapshot meta", &bytes))
            .transpose()
    }

    fn file_meta<C: RaftTypeConfig>(&self) -> Result<Option<MetaOf<C>>, StoreError> {
        snapshot_file::read_meta_record(&self.dir)?
            .map(|record| decode("snapshot meta", &record))
            .transpose()
    }

    /// The current snapshot's metadata: the newer of the two places'.
    fn current_meta<C: RaftTypeConfig>(&self) -> Result<Option<MetaOf<C>>, StoreError> {
        Ok(match (self.file_meta::<C>()?, self.tree_meta::<C>()?) {
            (Some(file), Some(tree)) if tree.last_log_id > file.last_log_id => Some(tree),
            (Some(file), _) => Some(file),
            (None, tree) => tree,
        })
    }

    /// The current snapshot. Blocking: the file is read whole.
    fn read<C: RaftTypeConfig>(&self) -> Result<Option<StoredSnapshot<C>>, StoreError> {
        for _ in 0..READ_ATTEMPTS {
            let file = match snapshot_file::read(&self.dir)? {
                Some(stored) => Some(StoredSnapshot {
                    meta: decode("snapshot meta", &stored.meta_record)?,
                    data: stored.data,
                }),
                None => None,
            };
            let tree = self.read_tree::<C>()?;
            // The file's on a tie: it is written before the tree's copy goes.
            let current = match (file, tree) {
                (Some(file), Some(tree)) if tree.meta.last_log_id > file.meta.last_log_id => {
                    Some(tree)
                }
                (Some(file), _) => Some(file),
                (None, tree) => tree,
            };
            if current.is_some() || !self.moved_meanwhile::<C>()? {
                return Ok(current);
            }
        }
        Ok(None)
    }

    /// Whether a snapshot appeared in either place: a store moved it while a read looked.
    fn moved_meanwhile<C: RaftTypeConfig>(&self) -> Result<bool, StoreError> {
        Ok(self.current_meta::<C>()?.is_some())
    }

    fn read_tree<C: RaftTypeConfig>(&self) -> Result<Option<StoredSnapshot<C>>, StoreError> {
        let Some(meta) = self.tree_meta::<C>()? else {
            return Ok(None);
        };
        let data = self
            .tree
            .get(KEY_SNAPSHOT_DATA)?
            .ok_or(StoreError::Truncated {
                what: "snapshot",
                len: 0,
            })?;
        Ok(Some(StoredSnapshot {
            meta,
            data: data.to_vec(),
        }))
    }

    /// Stores the snapshot unless a newer one is already stored; returns whether it stored it,
    /// and `data` back. Writing megabytes is blocking work, so it runs off the async workers, as
    /// the flush does; in its own file it never passes through the log's flushes.
    async fn store_if_newer<C: SchemaCodec>(
        self: &Arc<Self>,
        meta: &SnapshotMeta<C::NodeId, C::Node>,
        schema: u32,
        data: Vec<u8>,
    ) -> Result<(bool, Vec<u8>), StoreError> {
        // Raised before the first snapshot of a newer schema, in either place: a release that
        // reads neither the schema nor the file refuses the directory instead.
        self.marker.cover(schema).await?;
        let place = Place::for_schema::<C>(schema);
        let encoded_meta = encode("snapshot meta", meta)?;
        let started = tokio::time::Instant::now();
        let mut data = data;
        let written = loop {
            // A write started without a descriptor to open its file fails with EMFILE, which is
            // no disk fault (`descriptors`). One bound for the waits and the retries together.
            let left = descriptors::MAX_WAIT.saturating_sub(started.elapsed());
            descriptors::wait_for_headroom("snapshot", left, descriptors::headroom).await;
            let (attempt, returned) = self
                .write_if_newer::<C>(meta, &encoded_meta, data, place)
                .await;
            match attempt {
                Err(error)
                    if descriptors::is_shortage(&error)
                        && started.elapsed() < descriptors::MAX_WAIT =>
                {
                    tracing::error!(
                        %error,
                        "writing the snapshot: out of file descriptors; trying again once some \
                         are free (not a disk fault; P8.3)"
                    );
                    data = returned;
                    tokio::time::sleep(descriptors::RECHECK).await;
                }
                attempt => break (attempt?, returned),
            }
        };
        if written.0 && place == Place::Tree {
            // Durable before openraft is told, because it purges the log behind the snapshot
            // next; and before an older file goes.
            self.durability.flush().await?;
            let store = Arc::clone(self);
            blocking(move || snapshot_file::remove(&store.dir)).await?;
        }
        Ok(written)
    }

    /// One attempt at storing the snapshot unless a newer one is stored: whether it stored it,
    /// and `data` back whatever happened.
    async fn write_if_newer<C: RaftTypeConfig>(
        self: &Arc<Self>,
        meta: &SnapshotMeta<C::NodeId, C::Node>,
        encoded_meta: &[u8],
        data: Vec<u8>,
        place: Place,
    ) -> (Result<bool, StoreError>, Vec<u8>) {
        let store = Arc::clone(self);
        let encoded_meta = encoded_meta.to_vec();
        let last_log_id = meta.last_log_id.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let attempt = (|| {
                let _serialised = store.write_lock.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(current) = store.current_meta::<C>()? {
                    if current.last_log_id > last_log_id {
                        return Ok(false);
                    }
                }
                match place {
                    Place::File => {
                        // Synced and renamed into place before it returns (durable before
                        // openraft is told and purges the log behind it).
                        snapshot_file::write(&store.dir, &encoded_meta, &data)?;
                        // The tree's copy is older now; at open the newer of the two is
                        // restored, so its removal needs no flush of its own.
                        if store.tree_meta::<C>()?.is_some() {
                            let mut batch = sled::Batch::default();
                            batch.remove(KEY_SNAPSHOT_META);
                            batch.remove(KEY_SNAPSHOT_DATA);
                            store.tree.apply_batch(batch)?;
                        }
                    }
                    Place::Tree => {
                        // One batch: metadata and data can never disagree after a crash.
                        let mut batch = sled::Batch::default();
                        batch.insert(KEY_SNAPSHOT_META, encoded_meta);
                        batch.insert(KEY_SNAPSHOT_DATA, data.as_slice());
                        store.tree.apply_batch(batch)?;
                    }
                }
                Ok::<_, StoreError>(true)
            })();
            (attempt, data)
        })
        .await;
        match joined {
            Ok(done) => done,
            Err(join) => (
                Err(sled::Error::Io(std::io::Error::other(join.to_string())).into()),
                Vec::new(),
            ),
        }
    }
}

/// Runs blocking file work off the async workers.
async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| sled::Error::Io(std::io::Error::other(join.to_string())))?
}

/// The state machine side of a replica's storage.
pub struct SledStateMachine<C: RaftTypeConfig, S> {
    handle: StateHandle<C, S>,
    snapshots: Arc<SnapshotStore>,
    faults: ApplyFaults,
}

/// A fault-injection seam for tests: every batch of entries is applied only after this delay,
/// as on a replica whose apply lags its log (a long replay after a restart, a slow disk).
/// `None` in production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyFaults {
    pub delay_each_batch: Option<std::time::Duration>,
}

impl<C: RaftTypeConfig, S> Debug for SledStateMachine<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStateMachine").finish_non_exhaustive()
    }
}

impl<C, S> SledStateMachine<C, S>
where
    C: SchemaCodec<SnapshotData = Cursor<Vec<u8>>>,
    S: StateMachine<C>,
{
    /// Opens the state machine on `db`, restoring the latest snapshot if there is one.
    pub(crate) fn open(
        db: &sled::Db,
        dir: &Path,
        durability: Durability,
        marker: Arc<SchemaMarker>,
        faults: ApplyFaults,
    ) -> Result<Self, StoreError> {
        let snapshots = SnapshotStore {
            durability,
            encoder: Background::start().map_err(sled::Error::Io)?,
            tree: db.open_tree(SNAPSHOT_TREE)?,
            dir: dir.to_path_buf(),
            write_lock: Mutex::new(()),
            marker,
        };
        snapshot_file::remove_partial(dir)?;
        let applied = match snapshots.read::<C>()? {
            Some(StoredSnapshot { meta, data }) => {
                let (_, applied) = decode_snapshot_data::<C, S>(&data)?;
                if applied.last_applied != meta.last_log_id {
                    return Err(StoreError::SnapshotMismatch {
                        payload: format!("{:?}", applied.last_applied),
                        offered: format!("{:?}", meta.last_log_id),
                    });
                }
                applied
            }
            None => Applied::default(),
        };
        Ok(Self {
            handle: StateHandle {
                applied: Arc::new(RwLock::new(applied)),
            },
            snapshots: Arc::new(snapshots),
            faults,
        })
    }

    /// A read handle on the applied state that stays valid across snapshot installs.
    pub fn handle(&self) -> StateHandle<C, S> {
        self.handle.clone()
    }
}

fn snapshot_error<C: RaftTypeConfig>(
    error: StoreError,
    meta: Option<&SnapshotMeta<C::NodeId, C::Node>>,
    verb: ErrorVerb,
) -> StorageError<C::NodeId> {
    let subject = match meta {
        Some(meta) => ErrorSubject::Snapshot(Some(meta.signature())),
        None => ErrorSubject::Snapshot(None),
    };
    error.into_storage(subject, verb)
}

impl<C, S> RaftStateMachine<C> for SledStateMachine<C, S>
where
    C: SchemaCodec<SnapshotData = Cursor<Vec<u8>>>,
    C::R: Default,
    S: StateMachine<C>,
{
    type SnapshotBuilder = SnapshotBuilder<C, S>;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<C::NodeId>>,
            StoredMembership<C::NodeId, C::Node>,
        ),
        StorageError<C::NodeId>,
    > {
        Ok(self.handle.read(|applied| {
            (
                applied.last_applied.clone(),
                applied.last_membership.clone(),
            )
        }))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<C::R>, StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        if let Some(delay) = self.faults.delay_each_batch {
            tokio::time::sleep(delay).await;
        }
        let mut applied = self.handle.write_guard();
        let responses = entries
            .into_iter()
            .map(|entry| {
                let log_index = entry.log_id.index;
                applied.last_applied = Some(entry.log_id.clone());
                match entry.payload {
                    EntryPayload::Blank => C::R::default(),
                    EntryPayload::Normal(command) => applied.state.apply(log_index, &command),
                    EntryPayload::Membership(membership) => {
                        applied.last_membership =
                            StoredMembership::new(Some(entry.log_id), membership);
                        C::R::default()
                    }
                }
            })
            .collect();
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            applied: self.handle.read(Applied::clone),
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<C::SnapshotData>, StorageError<C::NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<C::NodeId, C::Node>,
        snapshot: Box<C::SnapshotData>,
    ) -> Result<(), StorageError<C::NodeId>> {
        let data = snapshot.into_inner();
        let install = async {
            let (schema, applied) = decode_snapshot_data::<C, S>(&data)?;
            if applied.last_applied != meta.last_log_id {
                return Err(StoreError::SnapshotMismatch {
                    payload: format!("{:?}", applied.last_applied),
                    offered: format!("{:?}", meta.last_log_id),
                });
            }
            self.snapshots
                .store_if_newer::<C>(meta, schema, data)
                .await?;
            // Swapped in whole under the write lock: readers see the old state or the new one.
            *self.handle.write_guard() = applied;
            Ok(())
        };
        install
            .await
            .map_err(|e| snapshot_error::<C>(e, Some(meta), ErrorVerb::Write))
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<C>>, StorageError<C::NodeId>> {
        let snapshots = Arc::clone(&self.snapshots);
        let current = blocking(move || snapshots.read::<C>())
            .await
            .map_err(|e| snapshot_error::<C>(e, None, ErrorVerb::Read))?;
        Ok(current.map(|StoredSnapshot { meta, data }| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

/// Builds a snapshot from a copy of the state taken when openraft asked for the builder, so
/// applying goes on while the copy is encoded and written.
pub struct SnapshotBuilder<C: RaftTypeConfig, S> {
    applied: Applied<C, S>,
    snapshots: Arc<SnapshotStore>,
}

impl<C: RaftTypeConfig, S> Debug for SnapshotBuilder<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBuilder")
            .field("last_applied", &self.applied.last_applied)
            .finish_non_exhaustive()
    }
}

impl<C, S> RaftSnapshotBuilder<C> for SnapshotBuilder<C, S>
where
    C: SchemaCodec<SnapshotData = Cursor<Vec<u8>>>,
    S: StateMachine<C>,
{
    async fn build_snapshot(&mut self) -> Result<Snapshot<C>, StorageError<C::NodeId>> {
        let applied = std::mem::take(&mut self.applied);
        let meta = SnapshotMeta {
            last_log_id: applied.last_applied.clone(),
            last_membership: applied.last_membership.clone(),
            snapshot_id: snapshot_id::<C>(applied.last_applied.as_ref()),
        };
        // Encoding a large state is CPU-bound and nothing waits on it: off the async workers,
        // at a low priority (crate::background).
        let encoded = self
            .snapshots
            .encoder
            .run(move || encode_snapshot::<C, S>(&applied))
            .await
            .map_err(|stopped| StoreError::Encode {
                what: "snapshot",
                source: bincode::error::EncodeError::OtherString(stopped.to_string()),
            });
        let build = async {
            let (schema, data) = encoded??;
            let (_, data) = self
                .snapshots
                .store_if_newer::<C>(&meta, schema, data)
                .await?;
            Ok::<_, StoreError>(data)
        };
        let data = build
            .await
            .map_err(|e| snapshot_error::<C>(e, Some(&meta), ErrorVerb::Write))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

/// Unique per build: two builds at the same log id (e.g. forced twice) still get distinct ids.
fn snapshot_id<C: RaftTypeConfig>(last_applied: Option<&LogId<C::NodeId>>) -> String {
    let built_at_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    match last_applied {
        Some(log_id) => format!("{}-{}-{built_at_ns}", log_id.leader_id, log_id.index),
        None => format!("empty-{built_at_ns}"),
    }
}

/// The size of the snapshot data kept in `dir` (opened as `db`): the file's, or, for a directory
/// whose snapshot is still in sled, the tree's. For benchmarks and inspection of a stopped
/// replica.
pub fn stored_snapshot_len(db: &sled::Db, dir: &Path) -> Result<Option<u64>, StoreError> {
    if let Some(len) = snapshot_file::data_len(dir)? {
        return Ok(Some(len));
    }
    Ok(db
        .open_tree(SNAPSHOT_TREE)?
        .get(KEY_SNAPSHOT_DATA)?
        .map(|data| data.len() as u64))
}
