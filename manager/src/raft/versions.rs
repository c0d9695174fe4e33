//! How the lease state machine's records are written and read at each schema (PROTOCOL P14.1):
//! log entries on disk and in AppendEntries, snapshots, backups.
//!
//! Each record is written at the oldest schema that can express it. Until the cluster version
//! rises past schema 2 nothing needs more, so every byte this build writes (and sends) is what
//! release 0.1.0 wrote: 0.1.0 followers decode this build's appends, and a data directory can go
//! back to 0.1.0 binaries. A record of schema 3 or later names its schema (`codec` format 2).

use leasehold_raft_store::codec::{decode_payload, encode_payload};
use leasehold_raft_store::schema::{check_readable, open_versioned, seal_at};
use leasehold_raft_store::{SchemaCodec, StateMachine, StoreError};
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Entry, EntryPayload};

use super::TypeConfig;
use crate::lease::schema::{NotExpressible, NEWEST_SCHEMA, OLDEST_SCHEMA, SCHEMA_0_1_0};
use crate::lease::{v2, Command, LeaseState, Outcome};

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

impl SchemaCodec for TypeConfig {
    const UNTAGGED_SCHEMA: u32 = SCHEMA_0_1_0;
    const OLDEST_SCHEMA: u32 = OLDEST_SCHEMA;
    const NEWEST_SCHEMA: u32 = NEWEST_SCHEMA;
    const RELEASE: &'static str = leasehold_api::RELEASE;

    fn encode_entry(entry: &Entry<TypeConfig>) -> Result<(u32, Vec<u8>), StoreError> {
        match entry_to_v2(entry) {
            Ok(old) => Ok((SCHEMA_0_1_0, encode_payload("log entry", &old)?)),
            Err(_) => Ok((NEWEST_SCHEMA, encode_payload("log entry", entry)?)),
        }
    }

    fn decode_entry(schema: u32, payload: &[u8]) -> Result<Entry<TypeConfig>, StoreError> {
        match schema {
            SCHEMA_0_1_0 => Ok(entry_from_v2(decode_payload::<Entry<V2Config>>(
                "log entry",
                payload,
            )?)),
            NEWEST_SCHEMA => decode_payload("log entry", payload),
            other => Err(no_decoder("log entry", other)),
        }
    }
}

impl StateMachine<TypeConfig> for LeaseState {
    fn apply(&mut self, log_index: u64, command: &Command) -> Outcome {
        LeaseState::apply(self, log_index, command)
    }

    fn encode_state(&self) -> Result<(u32, Vec<u8>), StoreError> {
        match v2::LeaseState::try_from(self) {
            Ok(old) => Ok((SCHEMA_0_1_0, encode_payload("lease state", &old)?)),
            Err(_) => Ok((NEWEST_SCHEMA, encode_payload("lease state", self)?)),
        }
    }

    fn decode_state(schema: u32, payload: &[u8]) -> Result<Self, StoreError> {
        match schema {
            SCHEMA_0_1_0 => Ok(decode_payload::<v2::LeaseState>("lease state", payload)?.into()),
            NEWEST_SCHEMA => decode_payload("lease state", payload),
            other => Err(no_decoder("lease state", other)),
        }
    }
}

/// The error for a schema in the readable range without a decoder here: a build whose
/// `OLDEST_SCHEMA..=NEWEST_SCHEMA` names a schema this module forgot.
fn no_decoder(what: &'static str, schema: u32) -> StoreError {
    check_readable::<TypeConfig>(what, schema, None)
        .err()
        .unwrap_or_else(|| StoreError::NotExpressible {
            what,
            detail: format!("schema {schema} is in the readable range but has no decoder"),
        })
}

fn payload_to_v2(
    payload: &EntryPayload<TypeConfig>,
) -> Result<EntryPayload<V2Config>, NotExpressible> {
    Ok(match payload {
        EntryPayload::Blank => EntryPayload::Blank,
        EntryPayload::Normal(command) => EntryPayload::Normal(v2::Command::try_from(command)?),
        EntryPayload::Membership(membership) => EntryPayload::Membership(membership.clone()),
    })
}

/// `entry` in schema 2's types, if schema 2 can express it.
pub fn entry_to_v2(entry: &Entry<TypeConfig>) -> Result<Entry<V2Config>, NotExpressible> {
    Ok(Entry {
        log_id: entry.log_id,
        payload: payload_to_v2(&entry.payload)?,
    })
}

/// A schema 2 entry in this build's types.
pub fn entry_from_v2(entry: Entry<V2Config>) -> Entry<TypeConfig> {
    Entry {
        log_id: entry.log_id,
        payload: match entry.payload {
            EntryPayload::Blank => EntryPayload::Blank,
            EntryPayload::Normal(command) => EntryPayload::Normal(command.into()),
            EntryPayload::Membership(membership) => EntryPayload::Membership(membership),
        },
    }
}

const APPEND: &str = "raft append request";

/// An AppendEntries body: schema 2 (exactly what a 0.1.0 leader sends) when every entry in it
/// is expressible there, else tagged with this build's schema, which only a follower of this
/// build or newer decodes. The cluster version keeps the second kind from being proposed while
/// any voter runs 0.1.0 (P14.3).
pub fn encode_append(request: &AppendEntriesRequest<TypeConfig>) -> Result<Vec<u8>, StoreError> {
    let old_entries: Result<Vec<_>, _> = request.entries.iter().map(entry_to_v2).collect();
    match old_entries {
        Ok(entries) => {
            let old = AppendEntriesRequest::<V2Config> {
                vote: request.vote,
                prev_log_id: request.prev_log_id,
                entries,
                leader_commit: request.leader_commit,
            };
            Ok(seal_at::<TypeConfig>(
                SCHEMA_0_1_0,
                &encode_payload(APPEND, &old)?,
            ))
        }
        Err(_) => Ok(seal_at::<TypeConfig>(
            NEWEST_SCHEMA,
            &encode_payload(APPEND, request)?,
        )),
    }
}

/// Decodes an AppendEntries body of any schema this build reads.
pub fn decode_append(body: &[u8]) -> Result<AppendEntriesRequest<TypeConfig>, StoreError> {
    let (schema, payload) = open_versioned::<TypeConfig>(APPEND, body)?;
    match schema {
        SCHEMA_0_1_0 => {
            let old: AppendEntriesRequest<V2Config> = decode_payload(APPEND, payload)?;
            Ok(AppendEntriesRequest {
                vote: old.vote,
                prev_log_id: old.prev_log_id,
                entries: old.entries.into_iter().map(entry_from_v2).collect(),
                leader_commit: old.leader_commit,
            })
        }
        NEWEST_SCHEMA => decode_payload(APPEND, payload),
        other => Err(no_decoder(APPEND, other)),
    }
}

/// A backup's payload: the state as JSON at the oldest schema that can express it, and that
/// schema (the header's `state_schema_version`), so a backup taken before the cluster version
/// rose restores on 0.1.0 too.
pub fn backup_payload(state: &LeaseState) -> Result<(u32, Vec<u8>), serde_json::Error> {
    match v2::LeaseState::try_from(state) {
        Ok(old) => Ok((SCHEMA_0_1_0, serde_json::to_vec(&old)?)),
        Err(_) => Ok((NEWEST_SCHEMA, serde_json::to_vec(state)?)),
    }
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
    let decode_error = |source| BackupSchemaError::Decode { schema, source };
    match schema {
        SCHEMA_0_1_0 => Ok(serde_json::from_slice::<v2::LeaseState>(payload)
            .map_err(decode_error)?
            .into()),
        NEWEST_SCHEMA => serde_json::from_slice(payload).map_err(decode_error),
        other => Err(BackupSchemaError::Unreadable(no_decoder(
            "the backup",
            other,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use leasehold_raft_store::codec::{self, TAGGED_FORMAT_VERSION};
    use leasehold_raft_store::schema::{decode_entry_record, encode_entry_record};
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;
    use crate::lease::schema::SCHEMA_CLUSTER_VERSION;

    fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(command),
        }
    }

    fn register() -> Command {
        Command::Register {
            now_ms: 5,
            incarnation: "inc".into(),
            address: "http://127.0.0.1:1".into(),
            name: None,
            credential_sha256: None,
        }
    }

    fn raise() -> Command {
        Command::SetClusterVersion {
            now_ms: 6,
            cluster_version: SCHEMA_CLUSTER_VERSION,
        }
    }

    /// P14.1: an entry of 0.1.0's commands is written exactly as 0.1.0 wrote it (untagged, its
    /// types), so a 0.1.0 replica reads it; only an entry that needs schema 3 is tagged.
    #[test]
    fn an_entry_is_written_at_the_oldest_schema_that_expresses_it() {
        let old = entry(1, register());
        let (schema, record) = encode_entry_record::<TypeConfig>(&old).unwrap();
        assert_eq!(schema, SCHEMA_0_1_0);
        let as_0_1_0 = codec::encode("log entry", &entry_to_v2(&old).unwrap()).unwrap();
        assert_eq!(record, as_0_1_0, "byte for byte what 0.1.0 writes");
        assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), old);

        let new = entry(2, raise());
        let (schema, record) = encode_entry_record::<TypeConfig>(&new).unwrap();
        assert_eq!(schema, SCHEMA_CLUSTER_VERSION);
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
        assert_eq!(schema, SCHEMA_0_1_0);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, SCHEMA_0_1_0);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);

        let _ = state.apply(1, &raise());
        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, SCHEMA_CLUSTER_VERSION);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        assert!(
            LeaseState::decode_state(SCHEMA_0_1_0, &payload).is_err(),
            "schema 3 bytes are not a schema 2 state"
        );
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, SCHEMA_CLUSTER_VERSION);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);
        assert!(matches!(
            state_from_backup(NEWEST_SCHEMA + 1, &json),
            Err(BackupSchemaError::Unreadable(
                StoreError::NewerSchema { .. }
            ))
        ));
    }
}
