//! How the lease state machine's records are written and read (PROTOCOL P14.1): log entries on
//! disk and in AppendEntries, snapshots, backups.
//!
//! Two schemas (`lease::schema`):
//! - schema 2, release 0.1.0's: positional bincode of `lease::schema::release_0_1`'s frozen
//!   types, in an envelope without a schema number (format 1). A record whose value 0.1.0 can
//!   express is written so (`required_schema` is 2 for it), so until the cluster version rises
//!   every byte this build writes and sends is what 0.1.0 wrote: 0.1.0 followers decode this
//!   build's appends, and a data directory can go back to 0.1.0 binaries.
//! - schema 12 and later, this release's: this build's own types with their fields by name
//!   (`codec::encode_named`), in an envelope that names the schema the record requires
//!   (format 2). A record stamped with a schema this build reads decodes whatever fields it
//!   lacks or adds; one stamped newer is refused, as is one of the development schemas 3 to 11.

use leasehold_raft_store::codec::{decode_named, decode_payload, encode_named, encode_payload};
use leasehold_raft_store::schema::{check_readable, open_versioned, seal_at};
use leasehold_raft_store::{SchemaCodec, StateMachine, StoreError};
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Entry, EntryPayload};

use super::TypeConfig;
use crate::lease::schema::{
    release_0_1, DEVELOPMENT_SCHEMAS, FIRST_RELEASE_SCHEMA, NEWEST_SCHEMA, OLDEST_SCHEMA,
    REPLICAS_SCHEMA, SECOND_RELEASE_SCHEMA,
};
use crate::lease::{Command, LeaseState, Outcome};

openraft::declare_raft_types!(
    /// Release 0.1.0's type configuration: the same Raft types around its commands. Only ever
    /// encoded and decoded, never run.
    pub FirstReleaseConfig:
        D = release_0_1::Command,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<FirstReleaseConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

const ENTRY: &str = "log entry";
const STATE: &str = "lease state";
const APPEND: &str = "raft append request";

/// The schema an entry requires: its command's, or 0.1.0's for a blank or membership entry.
fn entry_schema(entry: &Entry<TypeConfig>) -> u32 {
    match &entry.payload {
        EntryPayload::Normal(command) => command.required_schema(),
        EntryPayload::Blank | EntryPayload::Membership(_) => FIRST_RELEASE_SCHEMA,
    }
}

/// `entry` in 0.1.0's types, if it can express it.
fn entry_to_first_release(entry: &Entry<TypeConfig>) -> Option<Entry<FirstReleaseConfig>> {
    Some(Entry {
        log_id: entry.log_id,
        payload: match &entry.payload {
            EntryPayload::Blank => EntryPayload::Blank,
            EntryPayload::Normal(command) => {
                EntryPayload::Normal(release_0_1::Command::try_from(command).ok()?)
            }
            EntryPayload::Membership(membership) => EntryPayload::Membership(membership.clone()),
        },
    })
}

/// An entry of 0.1.0 in this build's types.
fn entry_from_first_release(entry: Entry<FirstReleaseConfig>) -> Entry<TypeConfig> {
    Entry {
        log_id: entry.log_id,
        payload: match entry.payload {
            EntryPayload::Blank => EntryPayload::Blank,
            EntryPayload::Normal(command) => EntryPayload::Normal(command.into()),
            EntryPayload::Membership(membership) => EntryPayload::Membership(membership),
        },
    }
}

/// The schema a record of `required` is stamped with and encoded at: 0.1.0's when it requires
/// no more and `first_release` expresses it (in its positional encoding), else the schema it
/// requires, never below this release's (by field name).
fn write_at<T, E>(
    required: u32,
    value: &T,
    first_release: impl FnOnce() -> Option<Result<Vec<u8>, E>>,
    named: impl FnOnce(&T) -> Result<Vec<u8>, E>,
) -> Result<(u32, Vec<u8>), E> {
    if required <= FIRST_RELEASE_SCHEMA {
        if let Some(written) = first_release() {
            return written.map(|bytes| (FIRST_RELEASE_SCHEMA, bytes));
        }
    }
    named(value).map(|bytes| (required.max(SECOND_RELEASE_SCHEMA), bytes))
}

impl SchemaCodec for TypeConfig {
    const UNTAGGED_SCHEMA: u32 = FIRST_RELEASE_SCHEMA;
    const OLDEST_SCHEMA: u32 = OLDEST_SCHEMA;
    const NEWEST_SCHEMA: u32 = NEWEST_SCHEMA;
    const RETIRED_SCHEMAS: std::ops::RangeInclusive<u32> = DEVELOPMENT_SCHEMAS;
    const RELEASE: &'static str = leasehold_api::RELEASE;
    /// The first schema release 0.2.0 does not read: it refuses a directory holding one anyway,
    /// so nothing it could open loses its snapshot to the file.
    const SNAPSHOT_FILE_SCHEMA: u32 = REPLICAS_SCHEMA;

    fn encode_entry(entry: &Entry<TypeConfig>) -> Result<(u32, Vec<u8>), StoreError> {
        write_at(
            entry_schema(entry),
            entry,
            || entry_to_first_release(entry).map(|old| encode_payload(ENTRY, &old)),
            |entry| encode_named(ENTRY, entry),
        )
    }

    fn decode_entry(schema: u32, payload: &[u8]) -> Result<Entry<TypeConfig>, StoreError> {
        if schema == FIRST_RELEASE_SCHEMA {
            return Ok(entry_from_first_release(decode_payload(ENTRY, payload)?));
        }
        decode_named(ENTRY, payload)
    }
}

impl StateMachine<TypeConfig> for LeaseState {
    fn apply(&mut self, log_index: u64, command: &Command) -> Outcome {
        LeaseState::apply(self, log_index, command)
    }

    fn encode_state(&self) -> Result<(u32, Vec<u8>), StoreError> {
        write_at(
            self.required_schema(),
            self,
            || {
                let old = release_0_1::LeaseState::try_from(self).ok()?;
                Some(encode_payload(STATE, &old))
            },
            |state| encode_named(STATE, state),
        )
    }

    fn decode_state(schema: u32, payload: &[u8]) -> Result<Self, StoreError> {
        if schema == FIRST_RELEASE_SCHEMA {
            let old: release_0_1::LeaseState = decode_payload(STATE, payload)?;
            return Ok(old.into());
        }
        decode_named(STATE, payload)
    }
}

/// An AppendEntries body at the oldest schema that expresses every entry in it: 0.1.0's (exactly
/// what a 0.1.0 leader sends), else the newest any entry requires, which only a follower of that
/// schema or newer decodes. The cluster version keeps a newer kind from being proposed while any
/// voter runs an older schema (P14.3).
pub fn encode_append(request: &AppendEntriesRequest<TypeConfig>) -> Result<Vec<u8>, StoreError> {
    let required = request
        .entries
        .iter()
        .map(entry_schema)
        .max()
        .unwrap_or(FIRST_RELEASE_SCHEMA);
    let first_release = || {
        let old = AppendEntriesRequest::<FirstReleaseConfig> {
            vote: request.vote,
            prev_log_id: request.prev_log_id,
            entries: request
                .entries
                .iter()
                .map(entry_to_first_release)
                .collect::<Option<_>>()?,
            leader_commit: request.leader_commit,
        };
        Some(encode_payload(APPEND, &old))
    };
    let (schema, payload) = write_at(required, request, first_release, |request| {
        encode_named(APPEND, request)
    })?;
    Ok(seal_at::<TypeConfig>(schema, &payload))
}

/// Decodes an AppendEntries body of any schema this build reads.
pub fn decode_append(body: &[u8]) -> Result<AppendEntriesRequest<TypeConfig>, StoreError> {
    let (schema, payload) = open_versioned::<TypeConfig>(APPEND, body)?;
    if schema != FIRST_RELEASE_SCHEMA {
        return decode_named(APPEND, payload);
    }
    let old: AppendEntriesRequest<FirstReleaseConfig> = decode_payload(APPEND, payload)?;
    Ok(AppendEntriesRequest {
        vote: old.vote,
        prev_log_id: old.prev_log_id,
        entries: old
            .entries
            .into_iter()
            .map(entry_from_first_release)
            .collect(),
        leader_commit: old.leader_commit,
    })
}

/// A backup's payload: the state as JSON at the oldest schema that can express it, and that
/// schema (the header's `state_schema_version`), so a backup taken before the cluster version
/// rose restores on 0.1.0 too.
pub fn backup_payload(state: &LeaseState) -> Result<(u32, Vec<u8>), serde_json::Error> {
    write_at(
        state.required_schema(),
        state,
        || {
            let old = release_0_1::LeaseState::try_from(state).ok()?;
            Some(serde_json::to_vec(&old))
        },
        serde_json::to_vec,
    )
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
    check_readable::<TypeConfig>("the backup", schema, None)
        .map_err(BackupSchemaError::Unreadable)?;
    let decode = |source| BackupSchemaError::Decode { schema, source };
    if schema == FIRST_RELEASE_SCHEMA {
        let old: release_0_1::LeaseState = serde_json::from_slice(payload).map_err(decode)?;
        return Ok(old.into());
    }
    serde_json::from_slice(payload).map_err(decode)
}

#[cfg(test)]
mod tests {
    use leasehold_raft_store::codec::{self, FORMAT_VERSION, TAGGED_FORMAT_VERSION};
    use leasehold_raft_store::schema::{decode_entry_record, encode_entry_record};
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;
    use crate::lease::tests::encoding::{busy_state, every_command, placed_state};
    use crate::lease::tests::register_command;

    fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(command),
        }
    }

    fn raise() -> Command {
        Command::SetClusterVersion {
            now_ms: 6,
            cluster_version: SECOND_RELEASE_SCHEMA,
        }
    }

    /// P14.1: an entry whose command 0.1.0 can express is written exactly as 0.1.0 wrote it
    /// (untagged, its types), so a 0.1.0 replica reads it; every other entry is stamped with the
    /// schema it requires and refused by 0.1.0 instead of misread. Each reads back unchanged.
    #[test]
    fn p14_1_an_entry_is_written_as_0_1_0_wrote_it_until_it_needs_more() {
        let (mut old, mut new) = (0, 0);
        for (index, command) in every_command().into_iter().enumerate() {
            let written = entry(index as u64 + 1, command);
            let (schema, record) = encode_entry_record::<TypeConfig>(&written).unwrap();
            let as_0_1_0 = codec::decode::<Entry<FirstReleaseConfig>>(ENTRY, &record);
            if entry_schema(&written) == FIRST_RELEASE_SCHEMA {
                old += 1;
                assert_eq!(schema, FIRST_RELEASE_SCHEMA);
                let expected = entry_to_first_release(&written).expect("0.1.0's");
                let bytes = codec::encode(ENTRY, &expected).unwrap();
                assert_eq!(record, bytes, "byte for byte what 0.1.0 writes");
                assert!(as_0_1_0.is_ok());
            } else {
                new += 1;
                assert_eq!(schema, entry_schema(&written).max(SECOND_RELEASE_SCHEMA));
                assert_eq!(record[0], TAGGED_FORMAT_VERSION);
                assert!(as_0_1_0.is_err(), "0.1.0 refuses it: {written:?}");
            }
            assert_eq!(decode_entry_record::<TypeConfig>(&record).unwrap(), written);
        }
        assert!(old > 0 && new > 0);
    }

    #[test]
    fn an_entry_of_a_newer_schema_is_refused_naming_both() {
        let payload = encode_named(ENTRY, &entry(1, register_command(5, "a"))).unwrap();
        let record = codec::seal(Some(NEWEST_SCHEMA + 1), &payload);
        let error = decode_entry_record::<TypeConfig>(&record).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, StoreError::NewerSchema { .. }), "{message}");
        assert!(
            message.contains(&format!("schema {}", NEWEST_SCHEMA + 1))
                && message.contains(leasehold_api::RELEASE)
                && message.contains("reads schemas 2 and 12"),
            "{message}"
        );
    }

    /// P14.1: the schemas development builds wrote before 0.2.0 are refused by name in every
    /// kind of record (their payloads were positional, so reading one as this release's would
    /// misread it).
    #[test]
    fn p14_1_records_of_development_schemas_are_refused_by_name() {
        let development = |error: StoreError| {
            let message = error.to_string();
            assert!(
                matches!(error, StoreError::RetiredSchema { .. }),
                "{message}"
            );
            assert!(message.contains("development builds"), "{message}");
        };
        for schema in DEVELOPMENT_SCHEMAS {
            let payload = encode_payload(ENTRY, &entry(1, register_command(5, "a"))).unwrap();
            let record = codec::seal(Some(schema), &payload);
            development(decode_entry_record::<TypeConfig>(&record).unwrap_err());
            development(decode_append(&record).unwrap_err());
            match state_from_backup(schema, b"{}") {
                Err(BackupSchemaError::Unreadable(error)) => development(error),
                other => panic!("schema {schema}: {other:?}"),
            }
        }
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
    /// 0.1.0's schema, which the cluster version guarantees while any voter runs 0.1.0 (P14.3).
    #[test]
    fn an_append_is_what_0_1_0_sends_until_an_entry_needs_more() {
        let old = append(vec![entry(4, register_command(5, "a"))]);
        let body = encode_append(&old).unwrap();
        assert_eq!(body[0], FORMAT_VERSION);
        let as_0_1_0: AppendEntriesRequest<FirstReleaseConfig> =
            codec::decode("raft request", &body).expect("a 0.1.0 follower decodes it");
        assert_eq!(as_0_1_0.entries.len(), 1);
        assert_eq!(decode_append(&body).unwrap().entries, old.entries);

        let new = append(vec![entry(4, register_command(5, "a")), entry(5, raise())]);
        let body = encode_append(&new).unwrap();
        assert_eq!(body[0], TAGGED_FORMAT_VERSION);
        assert!(
            codec::decode::<AppendEntriesRequest<FirstReleaseConfig>>("raft request", &body)
                .is_err()
        );
        assert_eq!(decode_append(&body).unwrap().entries, new.entries);
    }

    #[test]
    fn the_state_and_its_backup_are_written_at_schema_2_until_the_raise() {
        let mut state = busy_state();
        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, FIRST_RELEASE_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, FIRST_RELEASE_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);

        let _ = state.apply(1_000, &raise());
        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, SECOND_RELEASE_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
        assert!(
            LeaseState::decode_state(FIRST_RELEASE_SCHEMA, &payload).is_err(),
            "this release's bytes are not a 0.1.0 state"
        );
        let (schema, json) = backup_payload(&state).unwrap();
        assert_eq!(schema, SECOND_RELEASE_SCHEMA);
        assert_eq!(state_from_backup(schema, &json).unwrap(), state);
        assert!(matches!(
            state_from_backup(NEWEST_SCHEMA + 1, &json),
            Err(BackupSchemaError::Unreadable(
                StoreError::NewerSchema { .. }
            ))
        ));
    }

    /// P14.1: a state 0.1.0 cannot express though the cluster version is still 2 (none should
    /// exist: nothing newer is proposed below the raise) is written at this release's schema
    /// rather than lost; a snapshot is never refused.
    #[test]
    fn a_state_0_1_0_cannot_express_is_written_at_this_releases_schema() {
        let state = placed_state();
        let (schema, payload) = state.encode_state().unwrap();
        assert_eq!(schema, SECOND_RELEASE_SCHEMA);
        assert_eq!(LeaseState::decode_state(schema, &payload).unwrap(), state);
    }

    /// P14.1: a record of this release's schema written by a build with a field this one lacks
    /// (a newer release writing at the schema its cluster is at) reads with the field ignored.
    #[test]
    fn p14_1_a_field_this_build_lacks_is_ignored() {
        let register = entry(7, {
            let mut command = register_command(5, "a");
            if let Command::Register { capacity, .. } = &mut command {
                *capacity = 3;
            }
            command
        });
        let payload = encode_named(ENTRY, &register).unwrap();
        let mut newer: serde_json::Value = rmp_serde::from_slice(&payload).unwrap();
        newer["payload"]["Normal"]["Register"]["warm_secondaries"] = 2.into();
        newer["log_id"]["a_newer_field"] = "x".into();
        let payload = rmp_serde::to_vec_named(&newer).unwrap();
        let record = codec::seal(Some(SECOND_RELEASE_SCHEMA), &payload);
        assert_eq!(
            decode_entry_record::<TypeConfig>(&record).unwrap(),
            register
        );
    }
}
