//! A small key-value state machine and helpers shared by the raft-store tests and benchmark.

// Test support: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)] // each test crate uses a different subset

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::{Path, PathBuf};

use leasehold_raft_store::codec::{decode_payload, encode_payload};
use leasehold_raft_store::{
    LogStoreConfig, SchemaCodec, SledLogStore, SledStateMachine, StateMachine, StoreError,
};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvCommand {
    Set { key: String, value: String },
    Delete { key: String },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvResponse {
    pub previous: Option<String>,
}

openraft::declare_raft_types!(
    pub KvConfig:
        D = KvCommand,
        R = KvResponse,
);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvState {
    pub entries: BTreeMap<String, String>,
    /// The index of the last command applied, to check that re-application is exact.
    pub last_command_index: u64,
    /// Deletes applied: a state with one requires schema 2 of [`KvNextConfig`].
    pub deletes: u64,
}

/// One schema: every record untagged, as release 0.1.0 wrote them.
impl SchemaCodec for KvConfig {
    const UNTAGGED_SCHEMA: u32 = 1;
    const OLDEST_SCHEMA: u32 = 1;
    const NEWEST_SCHEMA: u32 = 1;
    const RELEASE: &'static str = "kv-1";
    const SNAPSHOT_FILE_SCHEMA: u32 = 1;

    fn encode_entry(entry: &Entry<Self>) -> Result<(u32, Vec<u8>), StoreError> {
        Ok((1, encode_payload("log entry", entry)?))
    }

    fn decode_entry(_schema: u32, payload: &[u8]) -> Result<Entry<Self>, StoreError> {
        decode_payload("log entry", payload)
    }
}

impl KvState {
    pub fn apply_command(&mut self, log_index: u64, command: &KvCommand) -> KvResponse {
        self.last_command_index = log_index;
        let previous = match command {
            KvCommand::Set { key, value } => self.entries.insert(key.clone(), value.clone()),
            KvCommand::Delete { key } => {
                self.deletes += 1;
                self.entries.remove(key)
            }
        };
        KvResponse { previous }
    }
}

impl StateMachine<KvConfig> for KvState {
    fn apply(&mut self, log_index: u64, command: &KvCommand) -> KvResponse {
        self.apply_command(log_index, command)
    }

    fn encode_state(&self) -> Result<(u32, Vec<u8>), StoreError> {
        Ok((1, encode_payload("state", self)?))
    }

    fn decode_state(_schema: u32, payload: &[u8]) -> Result<Self, StoreError> {
        decode_payload("state", payload)
    }
}

openraft::declare_raft_types!(
    /// The next "release" of the key-value machine: it reads schema 1 and introduces schema 2, in
    /// which `Delete` first appears (so an entry of it is the first record that needs schema 2).
    pub KvNextConfig:
        D = KvCommand,
        R = KvResponse,
);

impl SchemaCodec for KvNextConfig {
    const UNTAGGED_SCHEMA: u32 = 1;
    const OLDEST_SCHEMA: u32 = 1;
    const NEWEST_SCHEMA: u32 = 2;
    const RELEASE: &'static str = "kv-2";
    /// Schema 1's snapshots stay in sled, where a release before the file would look for them.
    const SNAPSHOT_FILE_SCHEMA: u32 = 2;

    fn encode_entry(entry: &Entry<Self>) -> Result<(u32, Vec<u8>), StoreError> {
        let schema = match &entry.payload {
            EntryPayload::Normal(KvCommand::Delete { .. }) => 2,
            _ => 1,
        };
        Ok((schema, encode_payload("log entry", entry)?))
    }

    fn decode_entry(_schema: u32, payload: &[u8]) -> Result<Entry<Self>, StoreError> {
        decode_payload("log entry", payload)
    }
}

impl StateMachine<KvNextConfig> for KvState {
    fn apply(&mut self, log_index: u64, command: &KvCommand) -> KvResponse {
        self.apply_command(log_index, command)
    }

    /// A state that applied a delete requires schema 2, as the command did.
    fn encode_state(&self) -> Result<(u32, Vec<u8>), StoreError> {
        let schema = if self.deletes > 0 { 2 } else { 1 };
        Ok((schema, encode_payload("state", self)?))
    }

    fn decode_state(_schema: u32, payload: &[u8]) -> Result<Self, StoreError> {
        decode_payload("state", payload)
    }
}

pub type LogStore = SledLogStore<KvConfig>;
pub type Machine = SledStateMachine<KvConfig, KvState>;

pub fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// The value written at `index`: deterministic, of varying length, so a reader can check it.
pub fn value_for(index: u64) -> String {
    format!("value-{index}-{}", "x".repeat((index % 97) as usize))
}

pub fn set_entry(term: u64, index: u64) -> Entry<KvConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(KvCommand::Set {
            key: format!("key-{}", index % 13),
            value: value_for(index),
        }),
    }
}

pub fn membership_entry(term: u64, index: u64, voters: &[u64]) -> Entry<KvConfig> {
    let voters: BTreeSet<u64> = voters.iter().copied().collect();
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(vec![voters], None)),
    }
}

/// Opens the database of a test's next "process lifetime". sled's background flusher thread
/// can still hold the directory lock for a moment after the previous lifetime dropped its last
/// handle (a real restart is a new process, so this wait exists only in tests); other errors
/// fail at once.
pub fn open_db(dir: &Path) -> DataDir {
    const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
    const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(10);
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match sled::open(dir) {
            Ok(db) => {
                return DataDir {
                    db,
                    path: dir.to_path_buf(),
                }
            }
            Err(sled::Error::Io(error))
                if error.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(LOCK_RETRY)
            }
            Err(error) => panic!("open sled: {error:?}"),
        }
    }
}

/// A data directory opened for one "process lifetime": sled's handle on it, and its path, where
/// the snapshot file is kept.
pub struct DataDir {
    pub db: sled::Db,
    pub path: PathBuf,
}

impl std::ops::Deref for DataDir {
    type Target = sled::Db;

    fn deref(&self) -> &sled::Db {
        &self.db
    }
}

impl DataDir {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The next "release"'s stores on `dir`, at the default configuration.
pub fn open_next_stores(
    dir: &DataDir,
) -> (
    SledLogStore<KvNextConfig>,
    SledStateMachine<KvNextConfig, KvState>,
) {
    leasehold_raft_store::open::<KvNextConfig, KvState>(dir, dir.path(), LogStoreConfig::default())
        .expect("open stores")
}

pub fn open_stores(dir: &DataDir, config: LogStoreConfig) -> (LogStore, Machine) {
    leasehold_raft_store::open::<KvConfig, KvState>(dir, dir.path(), config).expect("open stores")
}

/// Builds a snapshot of what `machine` has applied, as openraft asks for one.
pub async fn build_snapshot<C, M>(machine: &mut M) -> openraft::storage::Snapshot<C>
where
    C: openraft::RaftTypeConfig,
    M: openraft::storage::RaftStateMachine<C>,
{
    use openraft::RaftSnapshotBuilder;
    machine
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build a snapshot")
}

/// Appends and waits until the store reports the entries durable.
pub async fn append_durably<C: SchemaCodec>(store: &mut SledLogStore<C>, entries: Vec<Entry<C>>) {
    let (durable_tx, durable_rx) = oneshot::channel();
    store
        .append_with(
            entries,
            Box::new(move |result| {
                let _ = durable_tx.send(result);
            }),
        )
        .await
        .expect("append");
    durable_rx
        .await
        .expect("callback dropped")
        .expect("flush failed");
}
