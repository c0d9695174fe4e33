//! How the lease state machine's records are written and read at each schema (PROTOCOL P14.1):
//! log entries on disk and in AppendEntries, snapshots, backups.
//!
//! [`SCHEMAS`] lists every schema this build reads, oldest first, each with its codecs; a record
//! is written at the first that can express it and read by the one its schema names. Schema 2
//! is release 0.1.0's types, untagged; schema 3 `lease::v3`, tagged; schema 4 `lease::v4`,
//! tagged; schema 5 `lease::v5`, tagged; schema 6 `lease::v6`, tagged; schema 7 `lease::v7`,
//! tagged; schema 8 `lease::v8`, tagged; schema 9 `lease::v9`, tagged; schema 10 `lease::v10`,
//! tagged; then this build's. Until the cluster version rises past schema 2 nothing needs more,
//! so every byte this build writes (and sends) is what release 0.1.0 wrote: 0.1.0 followers
//! decode this build's appends, and a data directory can go back to 0.1.0 binaries. Until it
//! rises past 3, nothing needs more than 3, so a replica of schema 3
//! decodes everything; until it rises past 4, a replica of schema 4 does; until it rises past
//! 5, a replica of schema 5 does; until it rises past 6, a replica of schema 6 does; until it
//! rises past 7, a replica of schema 7 does; until it rises past 8, a replica of schema 8
//! does; until it rises past 9, a replica of schema 9 does; and until it rises past 10, a
//! replica of schema 10 does. A record of schema 3 or later names its schema (`codec` format 2).
//! A frozen schema's values convert to and from this build's through the chain of
//! `lease::chain`.

use leasehold_raft_store::codec::{decode_payload, encode_payload};
use leasehold_raft_store::schema::{check_readable, open_versioned, seal_at};
use leasehold_raft_store::{SchemaCodec, StateMachine, StoreError};
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Entry, EntryPayload, RaftTypeConfig};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::TypeConfig;
use crate::lease::schema::{
    NotExpressible, APP_VERSION_SCHEMA, CAPACITY_SCHEMA, CREDENTIALS_SCHEMA, FIRST_RELEASE_SCHEMA,
    GROUP_REGISTRATION_SCHEMA, LABELS_SCHEMA, LEASE_RESERVATION_SCHEMA, NAMESPACES_SCHEMA,
    NEWEST_SCHEMA, OLDEST_SCHEMA, OPERATOR_CONTROLS_SCHEMA,
};
use crate::lease::{chain, v10, v2, v3, v4, v5, v6, v7, v8, v9, Command, LeaseState, Outcome};

openraft::declare_raft_types!(
    /// Release 0.1.0's type configuration: the same Raft types around schema 2's commands. Only
    /// ever encoded and decoded, never run.
    pub V2Config:
        D = v2::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V2Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 3's type configuration: the same Raft types around schema 3's commands. Only ever
    /// encoded and decoded, never run.
    pub V3Config:
        D = v3::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V3Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 4's type configuration: the same Raft types around schema 4's commands. Only ever
    /// encoded and decoded, never run.
    pub V4Config:
        D = v4::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V4Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 5's type configuration: the same Raft types around schema 5's commands. Only ever
    /// encoded and decoded, never run.
    pub V5Config:
        D = v5::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V5Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 6's type configuration: the same Raft types around schema 6's commands. Only ever
    /// encoded and decoded, never run.
    pub V6Config:
        D = v6::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V6Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 7's type configuration: the same Raft types around schema 7's commands. Only ever
    /// encoded and decoded, never run.
    pub V7Config:
        D = v7::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V7Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 8's type configuration: the same Raft types around schema 8's commands. Only ever
    /// encoded and decoded, never run.
    pub V8Config:
        D = v8::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V8Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 9's type configuration: the same Raft types around schema 9's commands. Only ever
    /// encoded and decoded, never run.
    pub V9Config:
        D = v9::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V9Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

openraft::declare_raft_types!(
    /// Schema 10's type configuration: the same Raft types around schema 10's commands. Only
    /// ever encoded and decoded, never run.
    pub V10Config:
        D = v10::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<V10Config>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A frozen schema: its number, its Raft type configuration and state type, and how its values
/// convert to and from this build's (the chain of `lease::chain`).
trait FrozenSchema: RaftTypeConfig<NodeId = u64, Node = BasicNode, Entry = Entry<Self>> {
    const SCHEMA: u32;
    type State: Serialize + DeserializeOwned;
    /// This build's command in the schema's types, if the schema can express it.
    fn command_down(command: &Command) -> Result<Self::D, NotExpressible>;
    /// The schema's command in this build's types.
    fn command_up(command: Self::D) -> Command;
    /// This build's state in the schema's types, if the schema can express it.
    fn state_down(state: &LeaseState) -> Result<Self::State, NotExpressible>;
    /// The schema's state in this build's types.
    fn state_up(state: Self::State) -> LeaseState;
}

impl FrozenSchema for V2Config {
    const SCHEMA: u32 = FIRST_RELEASE_SCHEMA;
    type State = v2::LeaseState;
    fn command_down(command: &Command) -> Result<v2::Command, NotExpressible> {
        chain::command_to_v2(command)
    }
    fn command_up(command: v2::Command) -> Command {
        chain::command_from_v2(command)
    }
    fn state_down(state: &LeaseState) -> Result<v2::LeaseState, NotExpressible> {
        chain::state_to_v2(state)
    }
    fn state_up(state: v2::LeaseState) -> LeaseState {
        chain::state_from_v2(state)
    }
}

impl FrozenSchema for V3Config {
    const SCHEMA: u32 = CREDENTIALS_SCHEMA;
    type State = v3::LeaseState;
    fn command_down(command: &Command) -> Result<v3::Command, NotExpressible> {
        chain::command_to_v3(command)
    }
    fn command_up(command: v3::Command) -> Command {
        chain::command_from_v3(command)
    }
    fn state_down(state: &LeaseState) -> Result<v3::LeaseState, NotExpressible> {
        chain::state_to_v3(state)
    }
    fn state_up(state: v3::LeaseState) -> LeaseState {
        chain::state_from_v3(state)
    }
}

impl FrozenSchema for V4Config {
    const SCHEMA: u32 = CAPACITY_SCHEMA;
    type State = v4::LeaseState;
    fn command_down(command: &Command) -> Result<v4::Command, NotExpressible> {
        chain::command_to_v4(command)
    }
    fn command_up(command: v4::Command) -> Command {
        chain::command_from_v4(command)
    }
    fn state_down(state: &LeaseState) -> Result<v4::LeaseState, NotExpressible> {
        chain::state_to_v4(state)
    }
    fn state_up(state: v4::LeaseState) -> LeaseState {
        chain::state_from_v4(state)
    }
}

impl FrozenSchema for V5Config {
    const SCHEMA: u32 = APP_VERSION_SCHEMA;
    type State = v5::LeaseState;
    fn command_down(command: &Command) -> Result<v5::Command, NotExpressible> {
        chain::command_to_v5(command)
    }
    fn command_up(command: v5::Command) -> Command {
        chain::command_from_v5(command)
    }
    fn state_down(state: &LeaseState) -> Result<v5::LeaseState, NotExpressible> {
        chain::state_to_v5(state)
    }
    fn state_up(state: v5::LeaseState) -> LeaseState {
        chain::state_from_v5(state)
    }
}

impl FrozenSchema for V6Config {
    const SCHEMA: u32 = OPERATOR_CONTROLS_SCHEMA;
    type State = v6::LeaseState;
    fn command_down(command: &Command) -> Result<v6::Command, NotExpressible> {
        chain::command_to_v6(command)
    }
    fn command_up(command: v6::Command) -> Command {
        chain::command_from_v6(command)
    }
    fn state_down(state: &LeaseState) -> Result<v6::LeaseState, NotExpressible> {
        chain::state_to_v6(state)
    }
    fn state_up(state: v6::LeaseState) -> LeaseState {
        chain::state_from_v6(state)
    }
}

impl FrozenSchema for V7Config {
    const SCHEMA: u32 = LABELS_SCHEMA;
    type State = v7::LeaseState;
    fn command_down(command: &Command) -> Result<v7::Command, NotExpressible> {
        chain::command_to_v7(command)
    }
    fn command_up(command: v7::Command) -> Command {
        chain::command_from_v7(command)
    }
    fn state_down(state: &LeaseState) -> Result<v7::LeaseState, NotExpressible> {
        chain::state_to_v7(state)
    }
    fn state_up(state: v7::LeaseState) -> LeaseState {
        chain::state_from_v7(state)
    }
}

impl FrozenSchema for V8Config {
    const SCHEMA: u32 = GROUP_REGISTRATION_SCHEMA;
    type State = v8::LeaseState;
    fn command_down(command: &Command) -> Result<v8::Command, NotExpressible> {
        chain::command_to_v8(command)
    }
    fn command_up(command: v8::Command) -> Command {
        chain::command_from_v8(command)
    }
    fn state_down(state: &LeaseState) -> Result<v8::LeaseState, NotExpressible> {
        chain::state_to_v8(state)
    }
    fn state_up(state: v8::LeaseState) -> LeaseState {
        chain::state_from_v8(state)
    }
}

impl FrozenSchema for V9Config {
    const SCHEMA: u32 = LEASE_RESERVATION_SCHEMA;
    type State = v9::LeaseState;
    fn command_down(command: &Command) -> Result<v9::Command, NotExpressible> {
        chain::command_to_v9(command)
    }
    fn command_up(command: v9::Command) -> Command {
        chain::command_from_v9(command)
    }
    fn state_down(state: &LeaseState) -> Result<v9::LeaseState, NotExpressible> {
        chain::state_to_v9(state)
    }
    fn state_up(state: v9::LeaseState) -> LeaseState {
        chain::state_from_v9(state)
    }
}

impl FrozenSchema for V10Config {
    const SCHEMA: u32 = NAMESPACES_SCHEMA;
    type State = v10::LeaseState;
    fn command_down(command: &Command) -> Result<v10::Command, NotExpressible> {
        chain::command_to_v10(command)
    }
    fn command_up(command: v10::Command) -> Command {
        chain::command_from_v10(command)
    }
    fn state_down(state: &LeaseState) -> Result<v10::LeaseState, NotExpressible> {
        chain::state_to_v10(state)
    }
    fn state_up(state: v10::LeaseState) -> LeaseState {
        chain::state_from_v10(state)
    }
}

/// Encoded bytes, or `None` when the schema cannot express the value.
type Written<E> = Option<Result<Vec<u8>, E>>;

/// How one schema's records are written and read.
struct SchemaCodecs {
    schema: u32,
    encode_entry: fn(&Entry<TypeConfig>) -> Written<StoreError>,
    decode_entry: fn(&[u8]) -> Result<Entry<TypeConfig>, StoreError>,
    encode_state: fn(&LeaseState) -> Written<StoreError>,
    decode_state: fn(&[u8]) -> Result<LeaseState, StoreError>,
    encode_append: fn(&AppendEntriesRequest<TypeConfig>) -> Written<StoreError>,
    decode_append: fn(&[u8]) -> Result<AppendEntriesRequest<TypeConfig>, StoreError>,
    backup_state: fn(&LeaseState) -> Written<serde_json::Error>,
    restore_state: fn(&[u8]) -> Result<LeaseState, serde_json::Error>,
}

/// Every schema this build reads and writes, oldest first (`OLDEST_SCHEMA..=NEWEST_SCHEMA`).
const SCHEMAS: [SchemaCodecs; 10] = [
    SchemaCodecs::frozen::<V2Config>(),
    SchemaCodecs::frozen::<V3Config>(),
    SchemaCodecs::frozen::<V4Config>(),
    SchemaCodecs::frozen::<V5Config>(),
    SchemaCodecs::frozen::<V6Config>(),
    SchemaCodecs::frozen::<V7Config>(),
    SchemaCodecs::frozen::<V8Config>(),
    SchemaCodecs::frozen::<V9Config>(),
    SchemaCodecs::frozen::<V10Config>(),
    SchemaCodecs::NEWEST,
];

const ENTRY: &str = "log entry";
const STATE: &str = "lease state";
const APPEND: &str = "raft append request";

impl SchemaCodecs {
    const fn frozen<F: FrozenSchema>() -> Self {
        SchemaCodecs {
            schema: F::SCHEMA,
            encode_entry: |entry| {
                let old = entry_down::<F>(entry).ok()?;
                Some(encode_payload(ENTRY, &old))
            },
            decode_entry: |payload| Ok(entry_up::<F>(decode_payload(ENTRY, payload)?)),
            encode_state: |state| {
                let old = F::state_down(state).ok()?;
                Some(encode_payload(STATE, &old))
            },
            decode_state: |payload| Ok(F::state_up(decode_payload(STATE, payload)?)),
            encode_append: |request| {
                let old = append_down::<F>(request).ok()?;
                Some(encode_payload(APPEND, &old))
            },
            decode_append: |payload| Ok(append_up::<F>(decode_payload(APPEND, payload)?)),
            backup_state: |state| {
                let old = F::state_down(state).ok()?;
                Some(serde_json::to_vec(&old))
            },
            restore_state: |payload| Ok(F::state_up(serde_json::from_slice(payload)?)),
        }
    }

    /// This build's own schema: every value is expressible, and written as it is.
    const NEWEST: SchemaCodecs = SchemaCodecs {
        schema: NEWEST_SCHEMA,
        encode_entry: |entry| Some(encode_payload(ENTRY, entry)),
        decode_entry: |payload| decode_payload(ENTRY, payload),
        encode_state: |state| Some(encode_payload(STATE, state)),
        decode_state: |payload| decode_payload(STATE, payload),
        encode_append: |request| Some(encode_payload(APPEND, request)),
        decode_append: |payload| decode_payload(APPEND, payload),
        backup_state: |state| Some(serde_json::to_vec(state)),
        restore_state: |payload| serde_json::from_slice(payload),
    };
}

/// The first schema, oldest first, at which `write` expresses a value, and the bytes.
fn write_oldest<E>(write: impl Fn(&SchemaCodecs) -> Written<E>) -> Result<(u32, Vec<u8>), E> {
    for codecs in &SCHEMAS {
        if let Some(written) = write(codecs) {
            return written.map(|bytes| (codecs.schema, bytes));
        }
    }
    unreachable!("the newest schema expresses every value")
}

/// The codecs of `schema`, or the error naming a schema this build cannot read.
fn codecs_of(what: &'static str, schema: u32) -> Result<&'static SchemaCodecs, StoreError> {
    SCHEMAS
        .iter()
        .find(|codecs| codecs.schema == schema)
        .ok_or_else(|| no_decoder(what, schema))
}

/// `entry` in a frozen schema's types, if that schema can express it.
fn entry_down<F: FrozenSchema>(entry: &Entry<TypeConfig>) -> Result<Entry<F>, NotExpressible> {
    Ok(Entry {
        log_id: entry.log_id,
        payload: match &entry.payload {
            EntryPayload::Blank => EntryPayload::Blank,
            EntryPayload::Normal(command) => EntryPayload::Normal(F::command_down(command)?),
            EntryPayload::Membership(membership) => EntryPayload::Membership(membership.clone()),
        },
    })
}

/// An entry of a frozen schema in this build's types.
fn entry_up<F: FrozenSchema>(entry: Entry<F>) -> Entry<TypeConfig> {
    Entry {
        log_id: entry.log_id,
        payload: match entry.payload {
            EntryPayload::Blank => EntryPayload::Blank,
            EntryPayload::Normal(command) => EntryPayload::Normal(F::command_up(command)),
            EntryPayload::Membership(membership) => EntryPayload::Membership(membership),
        },
    }
}

impl SchemaCodec for TypeConfig {
    const UNTAGGED_SCHEMA: u32 = FIRST_RELEASE_SCHEMA;
    const OLDEST_SCHEMA: u32 = OLDEST_SCHEMA;
    const NEWEST_SCHEMA: u32 = NEWEST_SCHEMA;
    const RELEASE: &'static str = leasehold_api::RELEASE;

    fn encode_entry(entry: &Entry<TypeConfig>) -> Result<(u32, Vec<u8>), StoreError> {
        write_oldest(|codecs| (codecs.encode_entry)(entry))
    }

    fn decode_entry(schema: u32, payload: &[u8]) -> Result<Entry<TypeConfig>, StoreError> {
        (codecs_of(ENTRY, schema)?.decode_entry)(payload)
    }
}

impl StateMachine<TypeConfig> for LeaseState {
    fn apply(&mut self, log_index: u64, command: &Command) -> Outcome {
        LeaseState::apply(self, log_index, command)
    }

    fn encode_state(&self) -> Result<(u32, Vec<u8>), StoreError> {
        write_oldest(|codecs| (codecs.encode_state)(self))
    }

    fn decode_state(schema: u32, payload: &[u8]) -> Result<Self, StoreError> {
        (codecs_of(STATE, schema)?.decode_state)(payload)
    }
}

/// The error for a schema this build has no codecs for: outside the readable range (older or
/// newer than it reads), or a build whose `OLDEST_SCHEMA..=NEWEST_SCHEMA` names a schema
/// [`SCHEMAS`] forgot.
fn no_decoder(what: &'static str, schema: u32) -> StoreError {
    check_readable::<TypeConfig>(what, schema, None)
        .err()
        .unwrap_or_else(|| StoreError::NotExpressible {
            what,
            detail: format!("schema {schema} is in the readable range but has no decoder"),
        })
}

/// `request` with its entries in a frozen schema's types, if that schema expresses every one.
fn append_down<F: FrozenSchema>(
    request: &AppendEntriesRequest<TypeConfig>,
) -> Result<AppendEntriesRequest<F>, NotExpressible> {
    Ok(AppendEntriesRequest {
        vote: request.vote,
        prev_log_id: request.prev_log_id,
        entries: request
            .entries
            .iter()
            .map(entry_down::<F>)
            .collect::<Result<_, _>>()?,
        leader_commit: request.leader_commit,
    })
}

/// A request of a frozen schema in this build's types.
fn append_up<F: FrozenSchema>(
    request: AppendEntriesRequest<F>,
) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: request.vote,
        prev_log_id: request.prev_log_id,
        entries: request.entries.into_iter().map(entry_up::<F>).collect(),
        leader_commit: request.leader_commit,
    }
}

/// An AppendEntries body at the oldest schema that expresses every entry in it: schema 2 (exactly
/// what a 0.1.0 leader sends), else schema 3, else schema 4, else schema 5, else this build's,
/// which only a follower of this build or newer decodes. The cluster version keeps a newer kind
/// from being proposed while any voter runs an older schema (P14.3).
pub fn encode_append(request: &AppendEntriesRequest<TypeConfig>) -> Result<Vec<u8>, StoreError> {
    let (schema, payload) = write_oldest(|codecs| (codecs.encode_append)(request))?;
    Ok(seal_at::<TypeConfig>(schema, &payload))
}

/// Decodes an AppendEntries body of any schema this build reads.
pub fn decode_append(body: &[u8]) -> Result<AppendEntriesRequest<TypeConfig>, StoreError> {
    let (schema, payload) = open_versioned::<TypeConfig>(APPEND, body)?;
    (codecs_of(APPEND, schema)?.decode_append)(payload)
}

/// A backup's payload: the state as JSON at the oldest schema that can express it, and that
/// schema (the header's `state_schema_version`), so a backup taken before the cluster version
/// rose restores on 0.1.0 too, one taken before it rose past 3 on a build of schema 3, one
/// taken before it rose past 4 on a build of schema 4, and one taken before it rose past 5 on a
/// build of schema 5.
pub fn backup_payload(state: &LeaseState) -> Result<(u32, Vec<u8>), serde_json::Error> {
    write_oldest(|codecs| (codecs.backup_state)(state))
}

/// Why a backup's payload is not a state this build can restore.
#[derive(Debug, thiserror::Error)]
pub enum BackupSchemaError {
    #[error(transparent)]
    Unreadable(StoreError),
    #[error("the payload does not decode as a schema {schema} state: {source}")]
    Decode {
        schema: u32,
        source: serde_json::Error,
    },
}

/// A backup's payload, written at `schema`, in this build's types.
pub fn state_from_backup(schema: u32, payload: &[u8]) -> Result<LeaseState, BackupSchemaError> {
    let codecs = codecs_of("the backup", schema).map_err(BackupSchemaError::Unreadable)?;
    (codecs.restore_state)(payload).map_err(|source| BackupSchemaError::Decode { schema, source })
}

#[cfg(test)]
mod tests {
    use leasehold_raft_store::codec::{self, TAGGED_FORMAT_VERSION};
    use leasehold_raft_store::schema::{decode_entry_record, encode_entry_record};
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;
    use crate::lease::schema::{
        GROUP_REGISTRATION_SCHEMA, LABELS_SCHEMA, LEASE_RESERVATION_SCHEMA, NAMESPACES_SCHEMA,
        NAMESPACE_PLACEMENT_SCHEMA, OPERATOR_CONTROLS_SCHEMA,
    };
    use crate::lease::{
        LapsedLease, MembershipChange, OperatorAction, PlacementOverrides, DEFAULT_CAPACITY,
    };
    use leasehold_api::wire::DEFAULT_NAMESPACE;

    fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(command),
        }
    }

    fn register() -> Command {
        Command::Register {
            namespace: DEFAULT_NAMESPACE.into(),
            now_ms: 5,
            incarnation: "inc".into(),
            address: "http://127.0.0.1:1".into(),
            name: None,
            credential_sha256: None,
            capacity: DEFAULT_CAPACITY,
            app_version: None,
            labels: Default::default(),
        }
    }

    /// A registration of schema 3 (a credential), with `capacity`.
    fn register_with(capacity: u32) -> Command {
        Command::Register {
            namespace: DEFAULT_NAMESPACE.into(),
            now_ms: 5,
            incarnation: "inc-3".into(),
            address: "http://127.0.0.1:3".into(),
            name: Some("three".into()),
            credential_sha256: Some([3; 32]),
            capacity,
            app_version: None,
            labels: Default::default(),
        }
    }

    /// A registration of schema 4 (a credential and a capacity), stating `app_version`.
    fn register_versioned(incarnation: &str, app_version: Option<&str>) -> Command {
        Command::Register {
            namespace: DEFAULT_NAMESPACE.into(),
            now_ms: 7,
            incarnation: incarnation.into(),
            address: "http://127.0.0.1:4".into(),
            name: Some("four".into()),
            credential_sha256: Some([4; 32]),
            capacity: 3,
            app_version: app_version.map(str::to_owned),
            labels: Default::default(),
        }
    }

    fn raise() -> Command {
        Command::SetClusterVersion {
            now_ms: 6,
            cluster_version: CREDENTIALS_SCHEMA,
        }
    }

    /// P14.1: an entry of 0.1.0's commands is written exactly as 0.1.0 wrote it (untagged, its
    /// types), so a 0.1.0 replica reads it; only an entry that needs schema 3 is tagged.
    #[test]
    fn an_entry_is_written_at_the_oldest_schema_that_expresses_it() {
        let old = entry(1, register());
        let (schema, record) = encode_entry_record::<TypeConfig>(&old).unwrap();
        assert_eq!(schema, FIRST_RELEASE_SCHEMA);
        let as_0_1_0 = codec::encode("log entry", &entry_down::<V2Config>(&old).unwrap()).unwrap();
        assert_eq!(record, as_0_1_0, "byte for byte what 0.1.0 writes");
        assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), old);

        let new = entry(2, raise());
        let (schema, record) = encode_entry_record::<TypeConfig>(&new).unwrap();
        assert_eq!(schema, CREDENTIALS_SCHEMA);
        assert_eq!(record[0], TAGGED_FORMAT_VERSION);
        assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), new);
        // 0.1.0 reads untagged records only: it refuses this one instead of misreading it.
        assert!(codec::decode::<Entry<V2Config>>("log entry", &record).is_err());
    }

    #[test]
    fn an_entry_of_a_newer_schema_is_refused_naming_both() {
        let payload = encode_payload("log entry", &entry(1, register())).unwrap();
        let record = codec::seal(Some(NEWEST_SCHEMA + 1), &payload);
        let error = decode_entry_record::<TypeConfig>(&record).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&format!("schema {}", NEWEST_SCHEMA + 1))
                && message.contains(leasehold_api::RELEASE),
            "{message}"
        );
    }

    fn append(entries: Vec<Entry<TypeConfig>>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), 3)),
            entries,
            leader_commit: Some(LogId::new(CommittedLeaderId::new(1, 1), 2)),
        }
    }

    /// A 0.1.0 follower decodes a body of this build's leader as long as every entry in it is of
    /// schema 2, which the cluster version guarantees while any voter runs 0.1.0 (P14.3).
    #[test]
    fn an_append_is_what_0_1_0_sends_until_an_entry_needs_more() {
        let old = append(vec![entry(4, register())]);
        let body = encode_append(&old).unwrap();
        let as_0_1_0: AppendEntriesRequest<V2Config> =
            codec::decode("raft request", &body).expect("a 0.1.0 follower decodes it");
        assert_eq!(as_0_1_0.entries.len(), 1);
        assert_eq!(decode_append(&body).unwrap().entries, old.entries);

        let new = append(vec![entry(4, register()), entry(5, raise())]);
        let body = encode_append(&new).unwrap();
        assert!(codec::decode::<AppendEntriesRequest<V2Config>>("raft request", &body).is_err());
        assert_eq!(decode_append(&body).unwrap().entries, new.entries);
    }

    #[test]
    fn the_state_and_its_backup_are_written_at_schema_2_until_the_raise() {
        let mut state = LeaseState::default();
        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, FIRST_RELEASE_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, FIRST_RELEASE_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);

        let _ = state.apply(1, &raise());
        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, CREDENTIALS_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        assert!(
            LeaseState::decode_state(FIRST_RELEASE_SCHEMA, &payload).is_err(),
            "schema 3 bytes are not a schema 2 state"
        );
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, CREDENTIALS_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);
        assert!(matches!(
            state_from_backup(NEWEST_SCHEMA + 1, &json),
            Err(BackupSchemaError::Unreadable(
                StoreError::NewerSchema { .. }
            ))
        ));
    }

    /// A state at cluster version 3 holding a credentialed executor: what a build of schema 3
    /// snapshots and backs up.
    fn schema_3_state() -> LeaseState {
        let mut state = LeaseState::default();
        for (index, command) in [
            raise(),
            Command::Init {
                now_ms: 1,
                shard_count: 4,
                lease_duration_ms: 10_000,
            },
            register_with(DEFAULT_CAPACITY),
        ]
        .iter()
        .enumerate()
        {
            let _ = state.apply(index as u64 + 1, command);
        }
        assert_eq!(state.executors().count(), 1);
        state
    }

    /// P14.1, P15.1: a log entry a build of schema 3 wrote (through the frozen `v3` types, tagged
    /// 3) decodes into this build with the default capacity; this build writes a registration of
    /// capacity 1 at schema 3 still, so such a build reads it, and one of another capacity at 4.
    #[test]
    fn p14_1_a_schema_3_entry_reads_with_capacity_1_and_a_capacity_needs_schema_4() {
        let written_by_schema_3 = Entry::<V3Config> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 7),
            payload: EntryPayload::Normal(v3::Command::Register {
                now_ms: 5,
                incarnation: "inc-3".into(),
                address: "http://127.0.0.1:3".into(),
                name: Some("three".into()),
                credential_sha256: Some([3; 32]),
            }),
        };
        let record = codec::seal(
            Some(CREDENTIALS_SCHEMA),
            &encode_payload("log entry", &written_by_schema_3).unwrap(),
        );
        let read = decode_entry_record::<TypeConfig>(&record).unwrap();
        assert_eq!(read, entry(7, register_with(DEFAULT_CAPACITY)));
        // And this build writes that entry back exactly so.
        assert_eq!(
            encode_entry_record::<TypeConfig>(&read).unwrap(),
            (CREDENTIALS_SCHEMA, record)
        );

        let with_capacity = entry(8, register_with(2));
        let (schema, record) = encode_entry_record::<TypeConfig>(&with_capacity).unwrap();
        assert_eq!(schema, CAPACITY_SCHEMA);
        assert_eq!(
            decode_entry_record::<TypeConfig>(&record).unwrap(),
            with_capacity
        );
        assert!(entry_down::<V3Config>(&with_capacity).is_err());
        assert!(entry_down::<V2Config>(&with_capacity).is_err());
        // A build of schema 3 decodes tagged records of its own schema only.
        let opened = codec::open("log entry", &record).unwrap();
        assert_eq!(opened.schema, Some(CAPACITY_SCHEMA));
        assert!(decode_payload::<Entry<V3Config>>("log entry", opened.payload).is_err());
    }

    /// P14.3: the raise to 4 is itself written at 4, so the data directory is marked 4 from the
    /// raise on and a build of schema 3 refuses it then, not at some later record.
    #[test]
    fn p14_3_the_raise_to_schema_4_is_written_at_schema_4() {
        let raise_to_4 = entry(
            9,
            Command::SetClusterVersion {
                now_ms: 6,
                cluster_version: CAPACITY_SCHEMA,
            },
        );
        let (schema, _) = encode_entry_record::<TypeConfig>(&raise_to_4).unwrap();
        assert_eq!(schema, CAPACITY_SCHEMA);
        assert!(entry_down::<V3Config>(&raise_to_4).is_err());
        let (schema, _) = encode_entry_record::<TypeConfig>(&entry(9, raise())).unwrap();
        assert_eq!(schema, CREDENTIALS_SCHEMA);
    }

    /// P14.1, P15.1: a snapshot's state and a backup a build of schema 3 wrote decode into this
    /// build with every executor at capacity 1; this build writes such a state at schema 3.
    #[test]
    fn p14_1_a_schema_3_state_and_backup_read_with_capacity_1() {
        let state = schema_3_state();
        let as_schema_3 = chain::state_to_v3(&state).expect("expressible in schema 3");
        let payload = encode_payload("lease state", &as_schema_3).unwrap();
        let read = LeaseState::decode_state(CREDENTIALS_SCHEMA, &payload).unwrap();
        assert_eq!(read, state);
        assert!(read
            .executors()
            .all(|e| e.capacity == DEFAULT_CAPACITY && e.credential_sha256 == Some([3; 32])));
        assert_eq!(state.encode_state().unwrap(), (CREDENTIALS_SCHEMA, payload));

        let json = serde_json::to_vec(&as_schema_3).unwrap();
        let restored = state_from_backup(CREDENTIALS_SCHEMA, &json).unwrap();
        assert_eq!(restored, state);
        assert_eq!(backup_payload(&state).unwrap(), (CREDENTIALS_SCHEMA, json));
    }

    /// P14.1, P15.1: a state holding a capacity other than 1 is written at schema 4 (its bytes
    /// are no schema 3 state), on disk and in a backup, whose header then says 4.
    #[test]
    fn a_state_with_a_capacity_is_written_at_schema_4() {
        let mut state = schema_3_state();
        let _ = state.apply(
            4,
            &Command::SetClusterVersion {
                now_ms: 6,
                cluster_version: CAPACITY_SCHEMA,
            },
        );
        let mut heavy = register_with(5);
        if let Command::Register { incarnation, .. } = &mut heavy {
            *incarnation = "heavy".into();
        }
        let _ = state.apply(5, &heavy);
        assert!(state.executors().any(|e| e.capacity == 5));

        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, CAPACITY_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        assert!(LeaseState::decode_state(CREDENTIALS_SCHEMA, &payload).is_err());
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, CAPACITY_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);
    }

    /// An append is written at schema 3 while its entries are all expressible there (a follower
    /// of schema 3 decodes it), and at 4 as soon as one needs a capacity.
    #[test]
    fn an_append_is_written_at_schema_3_until_an_entry_needs_a_capacity() {
        let three = append(vec![
            entry(4, register_with(DEFAULT_CAPACITY)),
            entry(5, raise()),
        ]);
        let body = encode_append(&three).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(CREDENTIALS_SCHEMA));
        let as_schema_3: AppendEntriesRequest<V3Config> =
            decode_payload("raft request", opened.payload).expect("a schema 3 follower decodes it");
        assert_eq!(as_schema_3.entries.len(), 2);
        assert_eq!(decode_append(&body).unwrap().entries, three.entries);

        let four = append(vec![
            entry(4, register_with(DEFAULT_CAPACITY)),
            entry(5, register_with(3)),
        ]);
        let body = encode_append(&four).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(CAPACITY_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V3Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, four.entries);
    }

    fn raise_to(cluster_version: u32) -> Command {
        Command::SetClusterVersion {
            now_ms: 6,
            cluster_version,
        }
    }

    /// A state at cluster version 4 holding an executor of capacity 3: what a build of schema 4
    /// snapshots and backs up.
    fn schema_4_state() -> LeaseState {
        let mut state = LeaseState::default();
        for (index, command) in [
            raise_to(CAPACITY_SCHEMA),
            Command::Init {
                now_ms: 1,
                shard_count: 4,
                lease_duration_ms: 10_000,
            },
            register_versioned("inc-4", None),
        ]
        .iter()
        .enumerate()
        {
            let _ = state.apply(index as u64 + 1, command);
        }
        assert_eq!(state.executors().count(), 1);
        state
    }

    /// P14.1, P17.3: a log entry a build of schema 4 wrote (through the frozen `v4` types, tagged
    /// 4) decodes into this build with no application version; this build writes a registration
    /// without one at schema 4 still, so such a build reads it, and one with a version at 5.
    #[test]
    fn p14_1_p17_3_a_schema_4_entry_reads_with_no_app_version_and_an_app_version_needs_schema_5() {
        let written_by_schema_4 = Entry::<V4Config> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 7),
            payload: EntryPayload::Normal(v4::Command::Register {
                now_ms: 7,
                incarnation: "inc-4".into(),
                address: "http://127.0.0.1:4".into(),
                name: Some("four".into()),
                credential_sha256: Some([4; 32]),
                capacity: 3,
            }),
        };
        let record = codec::seal(
            Some(CAPACITY_SCHEMA),
            &encode_payload("log entry", &written_by_schema_4).unwrap(),
        );
        let read = decode_entry_record::<TypeConfig>(&record).unwrap();
        assert_eq!(read, entry(7, register_versioned("inc-4", None)));
        // And this build writes that entry back exactly so.
        assert_eq!(
            encode_entry_record::<TypeConfig>(&read).unwrap(),
            (CAPACITY_SCHEMA, record)
        );

        let versioned = entry(8, register_versioned("inc-5", Some("1.4.0-rc.1+build.7")));
        let (schema, record) = encode_entry_record::<TypeConfig>(&versioned).unwrap();
        assert_eq!(schema, APP_VERSION_SCHEMA);
        assert_eq!(
            decode_entry_record::<TypeConfig>(&record).unwrap(),
            versioned
        );
        assert!(entry_down::<V4Config>(&versioned).is_err());
        assert!(entry_down::<V3Config>(&versioned).is_err());
        assert!(entry_down::<V2Config>(&versioned).is_err());
        // A build of schema 4 decodes tagged records of its own schema only.
        let opened = codec::open("log entry", &record).unwrap();
        assert_eq!(opened.schema, Some(APP_VERSION_SCHEMA));
        assert!(decode_payload::<Entry<V4Config>>("log entry", opened.payload).is_err());
    }

    /// P14.3: the raise to 5 is itself written at 5, so the data directory is marked 5 from the
    /// raise on and a build of schema 4 refuses it then, not at some later record.
    #[test]
    fn p14_3_the_raise_to_schema_5_is_written_at_schema_5() {
        let raise_to_5 = entry(9, raise_to(APP_VERSION_SCHEMA));
        let (schema, _) = encode_entry_record::<TypeConfig>(&raise_to_5).unwrap();
        assert_eq!(schema, APP_VERSION_SCHEMA);
        assert!(entry_down::<V4Config>(&raise_to_5).is_err());
        let (schema, _) =
            encode_entry_record::<TypeConfig>(&entry(9, raise_to(CAPACITY_SCHEMA))).unwrap();
        assert_eq!(schema, CAPACITY_SCHEMA);
    }

    /// P14.1, P17.3: a snapshot's state and a backup a build of schema 4 wrote decode into this
    /// build with no executor stating an application version (capacities kept); this build
    /// writes such a state at schema 4.
    #[test]
    fn p14_1_p17_3_a_schema_4_state_and_backup_read_with_no_app_version() {
        let state = schema_4_state();
        let as_schema_4 = chain::state_to_v4(&state).expect("expressible in schema 4");
        assert!(chain::state_to_v3(&state).is_err(), "cluster version 4");
        let payload = encode_payload("lease state", &as_schema_4).unwrap();
        let read = LeaseState::decode_state(CAPACITY_SCHEMA, &payload).unwrap();
        assert_eq!(read, state);
        assert!(read
            .executors()
            .all(|e| e.app_version.is_none() && e.capacity == 3));
        assert_eq!(state.encode_state().unwrap(), (CAPACITY_SCHEMA, payload));

        let json = serde_json::to_vec(&as_schema_4).unwrap();
        let restored = state_from_backup(CAPACITY_SCHEMA, &json).unwrap();
        assert_eq!(restored, state);
        assert_eq!(backup_payload(&state).unwrap(), (CAPACITY_SCHEMA, json));
    }

    /// P14.1, P17.3: a state holding an application version is written at schema 5 (its bytes
    /// are no schema 4 state), on disk and in a backup, whose header then says 5.
    #[test]
    fn p17_3_a_state_with_an_app_version_is_written_at_schema_5() {
        let mut state = schema_4_state();
        let _ = state.apply(4, &raise_to(APP_VERSION_SCHEMA));
        let _ = state.apply(5, &register_versioned("inc-5", Some("2.0.0")));
        assert!(state
            .executors()
            .any(|e| e.app_version.as_deref() == Some("2.0.0")));

        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, APP_VERSION_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        assert!(LeaseState::decode_state(CAPACITY_SCHEMA, &payload).is_err());
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, APP_VERSION_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);
    }

    /// P14.1, P17.3: an append is written at schema 4 while its entries are all expressible there
    /// (a follower of schema 4 decodes it), and at 5 as soon as one states an application
    /// version.
    #[test]
    fn p17_3_an_append_is_written_at_schema_4_until_an_entry_needs_an_app_version() {
        let four = append(vec![
            entry(4, register_versioned("inc-4", None)),
            entry(5, raise_to(CAPACITY_SCHEMA)),
        ]);
        let body = encode_append(&four).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(CAPACITY_SCHEMA));
        let as_schema_4: AppendEntriesRequest<V4Config> =
            decode_payload("raft request", opened.payload).expect("a schema 4 follower decodes it");
        assert_eq!(as_schema_4.entries.len(), 2);
        assert_eq!(decode_append(&body).unwrap().entries, four.entries);

        let five = append(vec![
            entry(4, register_versioned("inc-4", None)),
            entry(5, register_versioned("inc-5", Some("2.0.0"))),
        ]);
        let body = encode_append(&five).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(APP_VERSION_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V4Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, five.entries);
    }

    /// An operator's action (P17.4), schema 6.
    fn operator(action: OperatorAction) -> Command {
        Command::Operator {
            now_ms: 8,
            actor: "admin CN=alice".into(),
            action,
        }
    }

    /// A state at cluster version 5 holding an executor with an application version: what a
    /// build of schema 5 snapshots and backs up.
    fn schema_5_state() -> LeaseState {
        let mut state = LeaseState::default();
        for (index, command) in [
            raise_to(APP_VERSION_SCHEMA),
            Command::Init {
                now_ms: 1,
                shard_count: 4,
                lease_duration_ms: 10_000,
            },
            register_versioned("inc-5", Some("2.0.0")),
        ]
        .iter()
        .enumerate()
        {
            let _ = state.apply(index as u64 + 1, command);
        }
        assert_eq!(state.executors().count(), 1);
        state
    }

    /// P14.1, P17.4: a log entry a build of schema 5 wrote (through the frozen `v5` types, tagged
    /// 5) decodes into this build unchanged; this build writes it back at schema 5, so such a
    /// build reads it, and an operator's command at 6, which no older build decodes.
    #[test]
    fn p14_1_p17_4_a_schema_5_entry_reads_unchanged_and_an_operator_command_needs_schema_6() {
        let written_by_schema_5 = Entry::<V5Config> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 7),
            payload: EntryPayload::Normal(v5::Command::Register {
                now_ms: 7,
                incarnation: "inc-5".into(),
                address: "http://127.0.0.1:4".into(),
                name: Some("four".into()),
                credential_sha256: Some([4; 32]),
                capacity: 3,
                app_version: Some("2.0.0".into()),
            }),
        };
        let record = codec::seal(
            Some(APP_VERSION_SCHEMA),
            &encode_payload("log entry", &written_by_schema_5).unwrap(),
        );
        let read = decode_entry_record::<TypeConfig>(&record).unwrap();
        assert_eq!(read, entry(7, register_versioned("inc-5", Some("2.0.0"))));
        // And this build writes that entry back exactly so.
        assert_eq!(
            encode_entry_record::<TypeConfig>(&read).unwrap(),
            (APP_VERSION_SCHEMA, record)
        );

        for action in [
            OperatorAction::SetMaintenance { on: true },
            OperatorAction::SetDraining {
                executor_id: "ex-3".into(),
                draining: true,
            },
            OperatorAction::Pin {
                namespace: DEFAULT_NAMESPACE.into(),
                shard: 1,
                executor_id: None,
            },
            OperatorAction::Membership {
                change: MembershipChange::Removed { node_id: 3 },
            },
        ] {
            let controlled = entry(8, operator(action));
            let (schema, record) = encode_entry_record::<TypeConfig>(&controlled).unwrap();
            assert_eq!(schema, OPERATOR_CONTROLS_SCHEMA, "{controlled:?}");
            assert_eq!(
                decode_entry_record::<TypeConfig>(&record).unwrap(),
                controlled
            );
            assert!(entry_down::<V5Config>(&controlled).is_err());
            assert!(entry_down::<V4Config>(&controlled).is_err());
            assert!(entry_down::<V3Config>(&controlled).is_err());
            assert!(entry_down::<V2Config>(&controlled).is_err());
            // A build of schema 5 decodes tagged records of its own schema only.
            let opened = codec::open("log entry", &record).unwrap();
            assert_eq!(opened.schema, Some(OPERATOR_CONTROLS_SCHEMA));
            assert!(decode_payload::<Entry<V5Config>>("log entry", opened.payload).is_err());
        }
    }

    /// P14.3: the raise to 6 is itself written at 6, so the data directory is marked 6 from the
    /// raise on and a build of schema 5 refuses it then, not at some later record.
    #[test]
    fn p14_3_the_raise_to_schema_6_is_written_at_schema_6() {
        let raise_to_6 = entry(9, raise_to(OPERATOR_CONTROLS_SCHEMA));
        let (schema, _) = encode_entry_record::<TypeConfig>(&raise_to_6).unwrap();
        assert_eq!(schema, OPERATOR_CONTROLS_SCHEMA);
        assert!(entry_down::<V5Config>(&raise_to_6).is_err());
        let (schema, _) =
            encode_entry_record::<TypeConfig>(&entry(9, raise_to(APP_VERSION_SCHEMA))).unwrap();
        assert_eq!(schema, APP_VERSION_SCHEMA);
    }

    /// P14.1, P17.4: a snapshot's state and a backup a build of schema 5 wrote decode into this
    /// build with maintenance off, no pins and an empty audit log (application versions kept);
    /// this build writes such a state at schema 5.
    #[test]
    fn p14_1_p17_4_a_schema_5_state_and_backup_read_with_no_maintenance_pins_or_audit() {
        let state = schema_5_state();
        let as_schema_5 = chain::state_to_v5(&state).expect("expressible in schema 5");
        assert!(chain::state_to_v4(&state).is_err(), "cluster version 5");
        let payload = encode_payload("lease state", &as_schema_5).unwrap();
        let read = LeaseState::decode_state(APP_VERSION_SCHEMA, &payload).unwrap();
        assert_eq!(read, state);
        assert!(!read.maintenance());
        assert_eq!(read.pins().count(), 0);
        assert_eq!(read.audit().count(), 0);
        assert!(read
            .executors()
            .all(|e| e.app_version.as_deref() == Some("2.0.0") && e.capacity == 3));
        assert_eq!(state.encode_state().unwrap(), (APP_VERSION_SCHEMA, payload));

        let json = serde_json::to_vec(&as_schema_5).unwrap();
        let restored = state_from_backup(APP_VERSION_SCHEMA, &json).unwrap();
        assert_eq!(restored, state);
        assert!(!restored.maintenance() && restored.audit().count() == 0);
        assert_eq!(backup_payload(&state).unwrap(), (APP_VERSION_SCHEMA, json));
    }

    /// P14.1, P17.4: a state holding maintenance mode, a pin or an audit record is written at
    /// schema 6 (its bytes are no schema 5 state), on disk and in a backup, whose header then
    /// says 6.
    #[test]
    fn p17_4_a_state_with_operator_controls_is_written_at_schema_6() {
        let base = {
            let mut state = schema_5_state();
            let _ = state.apply(4, &raise_to(OPERATOR_CONTROLS_SCHEMA));
            state
        };
        let executor_id = base.executors().next().unwrap().id.clone();
        let cases = [
            ("maintenance", OperatorAction::SetMaintenance { on: true }),
            (
                "a pin",
                OperatorAction::Pin {
                    namespace: DEFAULT_NAMESPACE.into(),
                    shard: 2,
                    executor_id: Some(executor_id),
                },
            ),
            (
                "an audit record alone",
                OperatorAction::Membership {
                    change: MembershipChange::Added {
                        node_id: 4,
                        address: "https://10.0.0.4:7400".into(),
                    },
                },
            ),
        ];
        for (what, action) in cases {
            let mut state = base.clone();
            let _ = state.apply(5, &operator(action));
            assert_eq!(state.audit().count(), 1, "{what}: recorded");

            let (schema, payload) = state.encode_state().unwrap();
            assert_eq!(schema, OPERATOR_CONTROLS_SCHEMA, "{what}");
            assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
            assert!(
                LeaseState::decode_state(APP_VERSION_SCHEMA, &payload).is_err(),
                "{what}"
            );
            let (schema, json) = backup_payload(&state).unwrap();
            assert_eq!(schema, OPERATOR_CONTROLS_SCHEMA, "{what}");
            assert_eq!(state_from_backup(schema, &json).unwrap(), state);
        }
    }

    /// P14.1, P17.4: an append is written at schema 5 while its entries are all expressible there
    /// (a follower of schema 5 decodes it), and at 6 as soon as one is an operator's action.
    #[test]
    fn p17_4_an_append_is_written_at_schema_5_until_an_entry_needs_operator_controls() {
        let five = append(vec![
            entry(4, register_versioned("inc-5", Some("2.0.0"))),
            entry(5, raise_to(APP_VERSION_SCHEMA)),
        ]);
        let body = encode_append(&five).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(APP_VERSION_SCHEMA));
        let as_schema_5: AppendEntriesRequest<V5Config> =
            decode_payload("raft request", opened.payload).expect("a schema 5 follower decodes it");
        assert_eq!(as_schema_5.entries.len(), 2);
        assert_eq!(decode_append(&body).unwrap().entries, five.entries);

        let six = append(vec![
            entry(4, register_versioned("inc-5", Some("2.0.0"))),
            entry(5, operator(OperatorAction::SetMaintenance { on: true })),
        ]);
        let body = encode_append(&six).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(OPERATOR_CONTROLS_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V5Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, six.entries);
    }

    /// A registration stating `zone` (P18.3).
    fn register_in_zone(incarnation: &str, zone: &str) -> Command {
        let Command::Register {
            now_ms,
            incarnation,
            address,
            name,
            credential_sha256,
            capacity,
            app_version,
            ..
        } = register_versioned(incarnation, Some("2.0.0"))
        else {
            unreachable!("register_versioned registers")
        };
        Command::Register {
            namespace: DEFAULT_NAMESPACE.into(),
            now_ms,
            incarnation,
            address,
            name,
            credential_sha256,
            capacity,
            app_version,
            labels: [("zone".to_owned(), zone.to_owned())].into(),
        }
    }

    /// A state at cluster version 6 holding an executor and maintenance mode: what a build of
    /// schema 6 snapshots and backs up.
    fn schema_6_state() -> LeaseState {
        let mut state = schema_5_state();
        let _ = state.apply(4, &raise_to(OPERATOR_CONTROLS_SCHEMA));
        let _ = state.apply(5, &operator(OperatorAction::SetMaintenance { on: true }));
        assert!(state.maintenance());
        state
    }

    /// P14.1, P18.3: a log entry a build of schema 6 wrote (through the frozen `v6` types, tagged
    /// 6) decodes into this build unchanged and is written back at 6; a registration with labels
    /// and the raise to 7 are written at 7, which no older build decodes.
    #[test]
    fn p14_1_p18_3_a_schema_6_entry_reads_unchanged_and_labels_need_schema_7() {
        let written_by_schema_6 = Entry::<V6Config> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 7),
            payload: EntryPayload::Normal(v6::Command::Operator {
                now_ms: 7,
                actor: "admin CN=alice".into(),
                action: v6::OperatorAction::SetMaintenance { on: true },
            }),
        };
        let record = codec::seal(
            Some(OPERATOR_CONTROLS_SCHEMA),
            &encode_payload("log entry", &written_by_schema_6).unwrap(),
        );
        let read = decode_entry_record::<TypeConfig>(&record).unwrap();
        let expected = Command::Operator {
            now_ms: 7,
            actor: "admin CN=alice".into(),
            action: OperatorAction::SetMaintenance { on: true },
        };
        assert_eq!(read, entry(7, expected));
        assert_eq!(
            encode_entry_record::<TypeConfig>(&read).unwrap(),
            (OPERATOR_CONTROLS_SCHEMA, record)
        );

        for command in [register_in_zone("inc-7", "eu-1a"), raise_to(LABELS_SCHEMA)] {
            let newer = entry(8, command);
            let (schema, record) = encode_entry_record::<TypeConfig>(&newer).unwrap();
            assert_eq!(schema, LABELS_SCHEMA, "{newer:?}");
            assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), newer);
            assert!(entry_down::<V6Config>(&newer).is_err());
            assert!(entry_down::<V5Config>(&newer).is_err());
            // The envelope says 7, which a build of schema 6 refuses; a labelled registration's
            // payload is no schema 6 entry either (a raise's is, hence the tag).
            let opened = codec::open("log entry", &record).unwrap();
            assert_eq!(opened.schema, Some(LABELS_SCHEMA));
            if matches!(
                newer.payload,
                EntryPayload::Normal(Command::Register { .. })
            ) {
                assert!(decode_payload::<Entry<V6Config>>("log entry", opened.payload).is_err());
            }
        }
    }

    /// P14.1, P18.3: a snapshot's state and a backup a build of schema 6 wrote decode into this
    /// build with no labels (operator controls kept) and are written back at 6; a state holding
    /// a labelled executor is written at 7, on disk and in a backup.
    #[test]
    fn p14_1_p18_3_a_schema_6_state_reads_with_no_labels_and_labels_are_written_at_7() {
        let state = schema_6_state();
        let as_schema_6 = chain::state_to_v6(&state).expect("expressible in schema 6");
        let payload = encode_payload("lease state", &as_schema_6).unwrap();
        let read = LeaseState::decode_state(OPERATOR_CONTROLS_SCHEMA, &payload).unwrap();
        assert_eq!(read, state);
        assert!(read.maintenance() && read.audit().count() == 1);
        assert!(read.executors().all(|e| e.labels.is_empty()));
        assert_eq!(
            state.encode_state().unwrap(),
            (OPERATOR_CONTROLS_SCHEMA, payload)
        );
        let json = serde_json::to_vec(&as_schema_6).unwrap();
        assert_eq!(
            state_from_backup(OPERATOR_CONTROLS_SCHEMA, &json).unwrap(),
            state
        );
        assert_eq!(
            backup_payload(&state).unwrap(),
            (OPERATOR_CONTROLS_SCHEMA, json)
        );

        let mut labelled = state.clone();
        let _ = labelled.apply(6, &raise_to(LABELS_SCHEMA));
        let _ = labelled.apply(7, &register_in_zone("inc-7", "eu-1b"));
        assert!(labelled.executors().any(|e| !e.labels.is_empty()));
        let (schema, payload) = labelled.encode_state().unwrap();
        assert_eq!(schema, LABELS_SCHEMA);
        assert_eq!(
            LeaseState::decode_state(schema, &payload).unwrap(),
            labelled
        );
        assert!(LeaseState::decode_state(OPERATOR_CONTROLS_SCHEMA, &payload).is_err());
        let (schema, json) = backup_payload(&labelled).unwrap();
        assert_eq!(schema, LABELS_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), labelled);
    }

    /// P14.1, P18.3: an append is written at schema 6 while its entries are all expressible there
    /// (a follower of schema 6 decodes it), and at 7 as soon as one registers labels.
    #[test]
    fn p18_3_an_append_is_written_at_schema_6_until_an_entry_needs_labels() {
        let six = append(vec![
            entry(4, register_versioned("inc-6", Some("2.0.0"))),
            entry(5, operator(OperatorAction::SetMaintenance { on: true })),
        ]);
        let body = encode_append(&six).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(OPERATOR_CONTROLS_SCHEMA));
        let as_schema_6: AppendEntriesRequest<V6Config> =
            decode_payload("raft request", opened.payload).expect("a schema 6 follower decodes it");
        assert_eq!(as_schema_6.entries.len(), 2);

        let seven = append(vec![
            entry(4, register_versioned("inc-6", Some("2.0.0"))),
            entry(5, register_in_zone("inc-7", "eu-1a")),
        ]);
        let body = encode_append(&seven).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(LABELS_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V6Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, seven.entries);
    }

    /// Two registrations in one entry (schema 8).
    fn register_many(incarnations: &[&str]) -> Command {
        Command::RegisterMany {
            now_ms: 8,
            registrations: incarnations
                .iter()
                .map(|incarnation| crate::lease::Registration {
                    namespace: DEFAULT_NAMESPACE.into(),
                    incarnation: (*incarnation).to_owned(),
                    address: format!("http://{incarnation}:1"),
                    name: None,
                    credential_sha256: None,
                    capacity: 1,
                    app_version: None,
                    labels: Default::default(),
                })
                .collect(),
        }
    }

    /// P14.1: a log entry a build of schema 7 wrote (through the frozen `v7` types, tagged 7)
    /// decodes into this build unchanged, labels included, and is written back at 7; registrations
    /// in one entry and the raise to 8 are written at 8, which no older build decodes.
    #[test]
    fn p14_1_a_schema_7_entry_reads_unchanged_and_batches_need_schema_8() {
        let written_by_schema_7 = Entry::<V7Config> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 7),
            payload: EntryPayload::Normal(v7::Command::Register {
                now_ms: 7,
                incarnation: "inc-7".into(),
                address: "http://inc-7:1".into(),
                name: None,
                credential_sha256: None,
                capacity: 1,
                app_version: None,
                labels: [("zone".to_owned(), "eu-1a".to_owned())].into(),
            }),
        };
        let record = codec::seal(
            Some(LABELS_SCHEMA),
            &encode_payload("log entry", &written_by_schema_7).unwrap(),
        );
        let read = decode_entry_record::<TypeConfig>(&record).unwrap();
        let expected = Command::Register {
            namespace: DEFAULT_NAMESPACE.into(),
            now_ms: 7,
            incarnation: "inc-7".into(),
            address: "http://inc-7:1".into(),
            name: None,
            credential_sha256: None,
            capacity: 1,
            app_version: None,
            labels: [("zone".to_owned(), "eu-1a".to_owned())].into(),
        };
        assert_eq!(read, entry(7, expected));
        assert_eq!(
            encode_entry_record::<TypeConfig>(&read).unwrap(),
            (LABELS_SCHEMA, record)
        );

        for command in [
            register_many(&["a", "b"]),
            raise_to(GROUP_REGISTRATION_SCHEMA),
        ] {
            let newer = entry(8, command);
            let (schema, record) = encode_entry_record::<TypeConfig>(&newer).unwrap();
            assert_eq!(schema, GROUP_REGISTRATION_SCHEMA, "{newer:?}");
            assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), newer);
            assert!(entry_down::<V7Config>(&newer).is_err());
            assert!(entry_down::<V6Config>(&newer).is_err());
            let opened = codec::open("log entry", &record).unwrap();
            assert_eq!(opened.schema, Some(GROUP_REGISTRATION_SCHEMA));
            if matches!(
                newer.payload,
                EntryPayload::Normal(Command::RegisterMany { .. })
            ) {
                assert!(decode_payload::<Entry<V7Config>>("log entry", opened.payload).is_err());
            }
        }
    }

    /// P14.1: a snapshot's state and a backup a build of schema 7 wrote decode into this build
    /// unchanged and are written back at 7; a state holding numbers a batch minted past its
    /// entry's index is written at 8, on disk and in a backup.
    #[test]
    fn p14_1_a_schema_7_state_reads_unchanged_and_batches_are_written_at_8() {
        let mut state = schema_6_state();
        let _ = state.apply(6, &raise_to(LABELS_SCHEMA));
        let _ = state.apply(7, &register_in_zone("inc-7", "eu-1b"));
        let as_schema_7 = chain::state_to_v7(&state).expect("expressible in schema 7");
        let payload = encode_payload("lease state", &as_schema_7).unwrap();
        assert_eq!(
            LeaseState::decode_state(LABELS_SCHEMA, &payload).unwrap(),
            state
        );
        assert_eq!(state.encode_state().unwrap(), (LABELS_SCHEMA, payload));
        let json = serde_json::to_vec(&as_schema_7).unwrap();
        assert_eq!(state_from_backup(LABELS_SCHEMA, &json).unwrap(), state);
        assert_eq!(backup_payload(&state).unwrap(), (LABELS_SCHEMA, json));

        let mut batched = state.clone();
        let _ = batched.apply(8, &raise_to(GROUP_REGISTRATION_SCHEMA));
        let _ = batched.apply(9, &register_many(&["a", "b", "c"]));
        assert!(
            batched.executor("ex-11").is_some(),
            "numbered past the entry's index"
        );
        let (schema, payload) = batched.encode_state().unwrap();
        assert_eq!(schema, GROUP_REGISTRATION_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), batched);
        assert!(LeaseState::decode_state(LABELS_SCHEMA, &payload).is_err());
        let (schema, json) = backup_payload(&batched).unwrap();
        assert_eq!(schema, GROUP_REGISTRATION_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), batched);
    }

    /// P14.1: an append is written at schema 7 while its entries are all expressible there (a
    /// follower of schema 7 decodes it), and at 8 as soon as one carries registrations together.
    #[test]
    fn p14_1_an_append_is_written_at_schema_7_until_an_entry_batches_registrations() {
        let seven = append(vec![entry(4, register_in_zone("inc-7", "eu-1a"))]);
        let body = encode_append(&seven).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(LABELS_SCHEMA));
        let as_schema_7: AppendEntriesRequest<V7Config> =
            decode_payload("raft request", opened.payload).expect("a schema 7 follower decodes it");
        assert_eq!(as_schema_7.entries.len(), 1);

        let eight = append(vec![
            entry(4, register_in_zone("inc-7", "eu-1a")),
            entry(5, register_many(&["a", "b"])),
        ]);
        let body = encode_append(&eight).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(GROUP_REGISTRATION_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V7Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, eight.entries);
    }

    /// Lease time reserved for `executor_ids` (schema 9).
    fn reserve(executor_ids: &[&str]) -> Command {
        Command::ReserveLeases {
            now_ms: 9,
            executor_ids: executor_ids.iter().map(|id| (*id).to_owned()).collect(),
        }
    }

    /// A reap by the leader's judgment of `executor_id`'s lease (schema 9).
    fn reap_lapsed(executor_id: &str) -> Command {
        Command::ReapLapsed {
            now_ms: 9,
            leases: vec![LapsedLease {
                executor_id: executor_id.to_owned(),
                judged_expiry_ms: 8,
            }],
        }
    }

    /// P14.1: a log entry a build of schema 8 wrote (through the frozen `v8` types, tagged 8)
    /// decodes into this build unchanged, its registrations in one entry included, and is written
    /// back at 8; lease reservations, reaps by the leader's judgment and the raise to 9 are
    /// written at 9, which no older build decodes.
    #[test]
    fn p14_1_a_schema_8_entry_reads_unchanged_and_reservations_need_schema_9() {
        let written_by_schema_8 = Entry::<V8Config> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 8),
            payload: EntryPayload::Normal(v8::Command::RegisterMany {
                now_ms: 8,
                registrations: ["a", "b"]
                    .map(|incarnation| v8::Registration {
                        incarnation: incarnation.to_owned(),
                        address: format!("http://{incarnation}:1"),
                        name: None,
                        credential_sha256: None,
                        capacity: 1,
                        app_version: None,
                        labels: Default::default(),
                    })
                    .into(),
            }),
        };
        let record = codec::seal(
            Some(GROUP_REGISTRATION_SCHEMA),
            &encode_payload("log entry", &written_by_schema_8).unwrap(),
        );
        let read = decode_entry_record::<TypeConfig>(&record).unwrap();
        assert_eq!(read, entry(8, register_many(&["a", "b"])));
        assert_eq!(
            encode_entry_record::<TypeConfig>(&read).unwrap(),
            (GROUP_REGISTRATION_SCHEMA, record)
        );

        for command in [
            reserve(&["ex-1", "ex-2"]),
            reap_lapsed("ex-1"),
            raise_to(LEASE_RESERVATION_SCHEMA),
        ] {
            let newer = entry(9, command);
            let (schema, record) = encode_entry_record::<TypeConfig>(&newer).unwrap();
            assert_eq!(schema, LEASE_RESERVATION_SCHEMA, "{newer:?}");
            assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), newer);
            assert!(entry_down::<V8Config>(&newer).is_err());
            assert!(entry_down::<V7Config>(&newer).is_err());
            // The envelope says 9, which a build of schema 8 refuses; a reservation's or a
            // judged reap's payload is no schema 8 entry either (a raise's is, hence the tag).
            let opened = codec::open("log entry", &record).unwrap();
            assert_eq!(opened.schema, Some(LEASE_RESERVATION_SCHEMA));
            if matches!(
                newer.payload,
                EntryPayload::Normal(Command::ReserveLeases { .. } | Command::ReapLapsed { .. })
            ) {
                assert!(decode_payload::<Entry<V8Config>>("log entry", opened.payload).is_err());
            }
        }
    }

    /// P14.1: a snapshot's state and a backup a build of schema 8 wrote decode into this build
    /// unchanged, numbers minted past an entry's index included, with no lease reserved, and are
    /// written back at 8; a state holding a reservation is written at 9, on disk and in a backup.
    #[test]
    fn p14_1_a_schema_8_state_reads_unchanged_and_reservations_are_written_at_9() {
        let mut state = schema_6_state();
        let _ = state.apply(6, &raise_to(LABELS_SCHEMA));
        let _ = state.apply(7, &raise_to(GROUP_REGISTRATION_SCHEMA));
        let _ = state.apply(8, &register_many(&["a", "b", "c"]));
        assert!(
            state.executor("ex-10").is_some(),
            "numbered past the entry's index"
        );
        let as_schema_8 = chain::state_to_v8(&state).expect("expressible in schema 8");
        assert!(chain::state_to_v7(&state).is_err(), "cluster version 8");
        let payload = encode_payload("lease state", &as_schema_8).unwrap();
        let read = LeaseState::decode_state(GROUP_REGISTRATION_SCHEMA, &payload).unwrap();
        assert_eq!(read, state);
        assert!(read.executors().all(|e| e.lease_reserved_until_ms == 0));
        assert_eq!(
            state.encode_state().unwrap(),
            (GROUP_REGISTRATION_SCHEMA, payload)
        );
        let json = serde_json::to_vec(&as_schema_8).unwrap();
        assert_eq!(
            state_from_backup(GROUP_REGISTRATION_SCHEMA, &json).unwrap(),
            state
        );
        assert_eq!(
            backup_payload(&state).unwrap(),
            (GROUP_REGISTRATION_SCHEMA, json)
        );

        let mut reserved = state.clone();
        let _ = reserved.apply(9, &raise_to(LEASE_RESERVATION_SCHEMA));
        let _ = reserved.apply(10, &reserve(&["ex-10"]));
        assert!(reserved
            .executor("ex-10")
            .is_some_and(|e| e.lease_reserved_until_ms != 0));
        let (schema, payload) = reserved.encode_state().unwrap();
        assert_eq!(schema, LEASE_RESERVATION_SCHEMA);
        assert_eq!(
            LeaseState::decode_state(schema, &payload).unwrap(),
            reserved
        );
        assert!(LeaseState::decode_state(GROUP_REGISTRATION_SCHEMA, &payload).is_err());
        let (schema, json) = backup_payload(&reserved).unwrap();
        assert_eq!(schema, LEASE_RESERVATION_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), reserved);
    }

    /// P14.1: an append is written at schema 8 while its entries are all expressible there (a
    /// follower of schema 8 decodes it), and at 9 as soon as one reserves lease time.
    #[test]
    fn p14_1_an_append_is_written_at_schema_8_until_an_entry_reserves_leases() {
        let eight = append(vec![
            entry(4, register_in_zone("inc-7", "eu-1a")),
            entry(5, register_many(&["a", "b"])),
        ]);
        let body = encode_append(&eight).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(GROUP_REGISTRATION_SCHEMA));
        let as_schema_8: AppendEntriesRequest<V8Config> =
            decode_payload("raft request", opened.payload).expect("a schema 8 follower decodes it");
        assert_eq!(as_schema_8.entries.len(), 2);

        let nine = append(vec![
            entry(4, register_many(&["a", "b"])),
            entry(5, reserve(&["ex-4", "ex-5"])),
        ]);
        let body = encode_append(&nine).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(LEASE_RESERVATION_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V8Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, nine.entries);
    }

    fn create_namespace(name: &str) -> Command {
        Command::Operator {
            now_ms: 10,
            actor: "admin CN=alice".into(),
            action: OperatorAction::CreateNamespace {
                name: name.into(),
                shard_count: 2,
                lease_duration_ms: 10_000,
                max_executors: None,
                placement: PlacementOverrides::default(),
            },
        }
    }

    fn register_into(namespace: &str) -> Command {
        let mut command = register();
        if let Command::Register {
            namespace: into, ..
        } = &mut command
        {
            *into = namespace.into();
        }
        command
    }

    /// P14.1, P18.1: a command that creates a namespace or names one other than `default` is
    /// written at 10, which no older build decodes; the same command in `default` is written
    /// at the schema it always was.
    #[test]
    fn p18_1_a_namespace_in_an_entry_is_written_at_10() {
        for command in [
            create_namespace("kv"),
            register_into("kv"),
            raise_to(NAMESPACES_SCHEMA),
        ] {
            let newer = entry(10, command);
            let (schema, record) = encode_entry_record::<TypeConfig>(&newer).unwrap();
            assert_eq!(schema, NAMESPACES_SCHEMA, "{newer:?}");
            assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), newer);
            assert!(entry_down::<V9Config>(&newer).is_err());
            assert!(entry_down::<V2Config>(&newer).is_err());
        }
        let (schema, _) =
            encode_entry_record::<TypeConfig>(&entry(10, register_into(DEFAULT_NAMESPACE)))
                .unwrap();
        assert_eq!(schema, FIRST_RELEASE_SCHEMA);
    }

    /// P14.1, P18.1: a state holding a namespace beside `default` is written at 10, on disk and
    /// in a backup, and reads back unchanged; an append carrying such an entry is written at 10.
    #[test]
    fn p18_1_a_state_with_namespaces_and_its_appends_are_written_at_10() {
        let mut state = LeaseState::default();
        let _ = state.apply(1, &raise_to(NAMESPACES_SCHEMA));
        let _ = state.apply(
            2,
            &Command::Init {
                now_ms: 0,
                shard_count: 4,
                lease_duration_ms: 60_000,
            },
        );
        let _ = state.apply(3, &create_namespace("kv"));
        let _ = state.apply(4, &register_into("kv"));
        assert!(state
            .namespace("kv")
            .is_some_and(|kv| kv.executor_count() == 1));
        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, NAMESPACES_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        assert!(LeaseState::decode_state(LEASE_RESERVATION_SCHEMA, &payload).is_err());
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, NAMESPACES_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);

        let ten = append(vec![entry(4, register()), entry(5, register_into("kv"))]);
        let body = encode_append(&ten).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(NAMESPACES_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V9Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, ten.entries);
    }

    /// Placement settings (P18.4, schema 11) for a namespace: a preference and a budget.
    fn placement() -> PlacementOverrides {
        PlacementOverrides {
            load_placement: None,
            balance_tolerance_percent: None,
            max_balance_moves_per_minute: Some(30),
            prefer: Some(("zone".into(), "eu-1a".into())),
        }
    }

    /// `kv` set to `placement` (P18.4).
    fn set_namespace(placement: PlacementOverrides) -> Command {
        Command::Operator {
            now_ms: 11,
            actor: "admin CN=alice".into(),
            action: OperatorAction::SetNamespace {
                name: "kv".into(),
                lease_duration_ms: 10_000,
                max_executors: None,
                placement,
            },
        }
    }

    /// P14.1: a log entry a build of schema 10 wrote (through the frozen `v10` types, tagged 10)
    /// decodes into this build unchanged, the namespace it creates without placement settings,
    /// and is written back at 10; a namespace created or set with placement settings, and the
    /// raise to 11, are written at 11, which no older build decodes.
    #[test]
    fn p14_1_a_schema_10_entry_reads_unchanged_and_placement_needs_schema_11() {
        let written_by_schema_10 = Entry::<V10Config> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 10),
            payload: EntryPayload::Normal(v10::Command::Operator {
                now_ms: 10,
                actor: "admin CN=alice".into(),
                action: v10::OperatorAction::CreateNamespace {
                    name: "kv".into(),
                    shard_count: 2,
                    lease_duration_ms: 10_000,
                    max_executors: None,
                },
            }),
        };
        let record = codec::seal(
            Some(NAMESPACES_SCHEMA),
            &encode_payload("log entry", &written_by_schema_10).unwrap(),
        );
        let read = decode_entry_record::<TypeConfig>(&record).unwrap();
        assert_eq!(read, entry(10, create_namespace("kv")));
        assert_eq!(
            encode_entry_record::<TypeConfig>(&read).unwrap(),
            (NAMESPACES_SCHEMA, record)
        );
        let (schema, _) =
            encode_entry_record::<TypeConfig>(&entry(11, set_namespace(Default::default())))
                .unwrap();
        assert_eq!(schema, NAMESPACES_SCHEMA, "no placement settings");

        let mut placed_creation = create_namespace("kv");
        if let Command::Operator {
            action: OperatorAction::CreateNamespace { placement: p, .. },
            ..
        } = &mut placed_creation
        {
            *p = placement();
        }
        for command in [
            placed_creation,
            set_namespace(placement()),
            raise_to(NAMESPACE_PLACEMENT_SCHEMA),
        ] {
            let newer = entry(11, command);
            let (schema, record) = encode_entry_record::<TypeConfig>(&newer).unwrap();
            assert_eq!(schema, NAMESPACE_PLACEMENT_SCHEMA, "{newer:?}");
            assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), newer);
            assert!(entry_down::<V10Config>(&newer).is_err());
            assert!(entry_down::<V9Config>(&newer).is_err());
            assert!(entry_down::<V2Config>(&newer).is_err());
            let opened = codec::open("log entry", &record).unwrap();
            assert_eq!(opened.schema, Some(NAMESPACE_PLACEMENT_SCHEMA));
        }
    }

    /// A state at cluster version 10 holding `kv` beside `default`, an executor registered in it:
    /// what a build of schema 10 snapshots and backs up.
    fn schema_10_state() -> LeaseState {
        let mut state = LeaseState::default();
        for (index, command) in [
            raise_to(NAMESPACES_SCHEMA),
            Command::Init {
                now_ms: 0,
                shard_count: 4,
                lease_duration_ms: 60_000,
            },
            create_namespace("kv"),
            register_into("kv"),
        ]
        .iter()
        .enumerate()
        {
            let _ = state.apply(index as u64 + 1, command);
        }
        assert!(state
            .namespace("kv")
            .is_some_and(|kv| kv.executor_count() == 1));
        state
    }

    /// P14.1, P18.4: a snapshot's state and a backup a build of schema 10 wrote decode into this
    /// build unchanged, with no placement settings, and are written back at 10; a state holding
    /// a namespace's placement settings is written at 11, on disk and in a backup.
    #[test]
    fn p14_1_a_schema_10_state_reads_unchanged_and_placement_is_written_at_11() {
        let state = schema_10_state();
        let as_schema_10 = chain::state_to_v10(&state).expect("expressible in schema 10");
        assert!(chain::state_to_v9(&state).is_err(), "cluster version 10");
        let payload = encode_payload("lease state", &as_schema_10).unwrap();
        let read = LeaseState::decode_state(NAMESPACES_SCHEMA, &payload).unwrap();
        assert_eq!(read, state);
        assert!(read
            .namespaces()
            .all(|(_, namespace)| namespace.placement.is_empty()));
        assert_eq!(state.encode_state().unwrap(), (NAMESPACES_SCHEMA, payload));
        let json = serde_json::to_vec(&as_schema_10).unwrap();
        assert_eq!(state_from_backup(NAMESPACES_SCHEMA, &json).unwrap(), state);
        assert_eq!(backup_payload(&state).unwrap(), (NAMESPACES_SCHEMA, json));

        let mut placed = state.clone();
        let _ = placed.apply(5, &raise_to(NAMESPACE_PLACEMENT_SCHEMA));
        let _ = placed.apply(6, &set_namespace(placement()));
        assert_eq!(
            placed.namespace("kv").map(|kv| &kv.placement),
            Some(&placement())
        );
        let (schema, payload) = placed.encode_state().unwrap();
        assert_eq!(schema, NAMESPACE_PLACEMENT_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), placed);
        assert!(LeaseState::decode_state(NAMESPACES_SCHEMA, &payload).is_err());
        let (schema, json) = backup_payload(&placed).unwrap();
        assert_eq!(schema, NAMESPACE_PLACEMENT_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), placed);
    }

    /// P14.1, P18.4: an append is written at schema 10 while its entries are all expressible
    /// there (a follower of schema 10 decodes it), and at 11 as soon as one sets placement.
    #[test]
    fn p14_1_an_append_is_written_at_schema_10_until_an_entry_sets_placement() {
        let ten = append(vec![
            entry(4, register_into("kv")),
            entry(5, set_namespace(Default::default())),
        ]);
        let body = encode_append(&ten).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(NAMESPACES_SCHEMA));
        let as_schema_10: AppendEntriesRequest<V10Config> =
            decode_payload("raft request", opened.payload)
                .expect("a schema 10 follower decodes it");
        assert_eq!(as_schema_10.entries.len(), 2);
        assert_eq!(decode_append(&body).unwrap().entries, ten.entries);

        let eleven = append(vec![
            entry(4, register_into("kv")),
            entry(5, set_namespace(placement())),
        ]);
        let body = encode_append(&eleven).unwrap();
        let opened = codec::open("raft request", &body).unwrap();
        assert_eq!(opened.schema, Some(NAMESPACE_PLACEMENT_SCHEMA));
        assert!(
            decode_payload::<AppendEntriesRequest<V10Config>>("raft request", opened.payload)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, eleven.entries);
    }
}
