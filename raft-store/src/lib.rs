//! Storage for a Leasehold manager replica: openraft 0.9's `storage-v2` traits on one `sled::Db`.
//!
//! - [`SledLogStore`] holds the Raft log, the vote and the committed id. Appends are made durable
//!   by group commit: one flush completes every append that arrived while the previous flush ran.
//! - [`SledStateMachine`] hosts any deterministic [`StateMachine`] (the manager's lease state
//!   machine) in memory and keeps its latest snapshot in a file of its own beside sled's
//!   ([`SNAPSHOT_FILE`]), so a large snapshot never rides on a log flush. Snapshots replace
//!   compaction (PROTOCOL P2.5).
//! - Every record is a versioned, checksummed bincode 2 envelope ([`codec`]), so a future format
//!   or a corrupt record is reported and never misread. Log entries and snapshots name the
//!   application schema they were written at and are read through the application's per-schema
//!   types ([`SchemaCodec`], [`StateMachine`]); each is written at the oldest schema that can
//!   express it ([`schema`]).
//!
//! [`open`] is the one way in: it checks the data directory's format marker and opens both halves
//! on the process's single `sled::Db` and its directory.

mod background;
pub mod codec;
mod descriptors;
mod durability;
mod error;
mod log_store;
pub mod schema;
mod snapshot_file;
mod state_machine;

use std::io::Cursor;

pub use durability::FlushFaults;
pub use error::StoreError;
pub use log_store::{LogStoreConfig, LogStoreStats, OnDurable, SledLogStore, LOG_TREE, META_TREE};
pub use schema::{SchemaCodec, FORMAT_TREE};
pub use snapshot_file::SNAPSHOT_FILE;
pub use state_machine::{
    decode_snapshot_data, encode_snapshot_data, stored_snapshot_len, Applied, ApplyFaults,
    SledStateMachine, SnapshotBuilder, StateHandle, StateMachine, SNAPSHOT_TREE,
};

/// Opens a replica's log store and state machine on `db`, after checking that this build reads
/// the schema the directory was written with (a fresh directory is stamped with the oldest).
///
/// `dir` is the directory `db` was opened on; the snapshot file is kept there.
///
/// Must be called inside a tokio runtime when group commit is on.
pub fn open<C, S>(
    db: &sled::Db,
    dir: &std::path::Path,
    config: LogStoreConfig,
) -> Result<(SledLogStore<C>, SledStateMachine<C, S>), StoreError>
where
    C: SchemaCodec<SnapshotData = Cursor<Vec<u8>>>,
    S: StateMachine<C>,
{
    let durability = durability::Durability::new(db, config.flush_faults);
    let apply_faults = config.apply_faults;
    let marker = schema::SchemaMarker::open::<C>(db, durability.clone())?;
    let log_store = SledLogStore::open(db, config, durability.clone(), marker.clone())?;
    let state_machine = SledStateMachine::open(db, dir, durability, marker, apply_faults)?;
    Ok((log_store, state_machine))
}
