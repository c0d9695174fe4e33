//! Storage for a Leasehold manager replica: openraft 0.9's `storage-v2` traits on one `sled::Db`.
//!
//! - [`SledLogStore`] holds the Raft log, the vote and the committed id. Appends are made durable
//!   by group commit: one flush completes every append that arrived while the previous flush ran.
//! - [`SledStateMachine`] hosts any deterministic [`StateMachine`] (the manager's lease state
//!   machine) in memory and keeps its latest snapshot in sled. Snapshots replace compaction
//!   (PROTOCOL P2.5).
//! - Every record is a versioned, checksummed bincode 2 envelope ([`codec`]), so a future format
//!   or a corrupt record is reported and never misread.
//!
//! [`open`] is the one way in: it checks the data directory's format marker and opens both halves
//! on the process's single `sled::Db`.

pub mod codec;
mod error;
mod log_store;
mod state_machine;

use std::io::Cursor;

use openraft::{Entry, RaftTypeConfig};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use error::StoreError;
pub use log_store::{LogStoreConfig, LogStoreStats, OnDurable, SledLogStore, LOG_TREE, META_TREE};
pub use state_machine::{
    encode_snapshot_data, Applied, SledStateMachine, SnapshotBuilder, StateHandle, StateMachine,
    SNAPSHOT_TREE,
};

/// Tree holding the data directory's format marker.
pub const FORMAT_TREE: &str = "leasehold_format";
const KEY_FORMAT: &[u8] = b"format";

/// What a data directory was written with: the envelope format and the state machine schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FormatMarker {
    envelope: u8,
    schema: u32,
}

/// Opens a replica's log store and state machine on `db`, after checking that the directory was
/// written with this build's formats (a fresh directory is stamped with them).
///
/// Must be called inside a tokio runtime when group commit is on.
pub fn open<C, S>(
    db: &sled::Db,
    config: LogStoreConfig,
) -> Result<(SledLogStore<C>, SledStateMachine<C, S>), StoreError>
where
    C: RaftTypeConfig<Entry = Entry<C>, SnapshotData = Cursor<Vec<u8>>>,
    Entry<C>: Serialize + DeserializeOwned,
    S: StateMachine<C>,
{
    check_format_marker(db, S::SCHEMA_VERSION)?;
    let log_store = SledLogStore::open(db, config)?;
    let state_machine = SledStateMachine::open(db)?;
    Ok((log_store, state_machine))
}

fn check_format_marker(db: &sled::Db, schema: u32) -> Result<(), StoreError> {
    let tree = db.open_tree(FORMAT_TREE)?;
    let ours = FormatMarker {
        envelope: codec::FORMAT_VERSION,
        schema,
    };
    match tree.get(KEY_FORMAT)? {
        Some(bytes) => {
            let found: FormatMarker = codec::decode("format marker", &bytes)?;
            if found.schema != ours.schema {
                return Err(StoreError::SchemaMismatch {
                    found: found.schema,
                    expected: ours.schema,
                });
            }
        }
        None => {
            tree.insert(KEY_FORMAT, codec::encode("format marker", &ours)?)?;
            db.flush()?;
        }
    }
    Ok(())
}
