//! Which application schemas a replica reads and writes (PROTOCOL P14.1), and the data
//! directory's record of the newest schema ever written into it.
//!
//! Every record is written at the oldest schema that can express it: while a cluster still runs
//! the previous release's commands only, nothing it writes needs the new schema, so the previous
//! release can still open the directory (a rollback before the cluster version rose loses
//! nothing). The first record that needs a newer schema raises the directory's marker before it is
//! written, and a binary that cannot read the marker's schema refuses the directory at open.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use openraft::{Entry, RaftTypeConfig};
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::durability::Durability;
use crate::error::StoreError;

/// Tree holding the data directory's format marker.
pub const FORMAT_TREE: &str = "leasehold_format";
const KEY_FORMAT: &[u8] = b"format";
/// The release that last raised the marker, so a binary that refuses it can say which to run.
const KEY_WRITTEN_BY: &[u8] = b"written_by";

/// How an application's log entries are versioned; implemented by its Raft type configuration.
///
/// A schema is a number for the shape of the commands and of the state. A build reads every
/// schema from [`SchemaCodec::OLDEST_SCHEMA`] to [`SchemaCodec::NEWEST_SCHEMA`] but the
/// [`SchemaCodec::RETIRED_SCHEMAS`], and refuses anything else with an error naming both.
pub trait SchemaCodec: RaftTypeConfig<Entry = Entry<Self>> {
    /// The schema of records written without a schema number (envelope format 1): every record
    /// of release 0.1.0, and any record of this schema written since, so 0.1.0 can read it.
    const UNTAGGED_SCHEMA: u32;
    /// The oldest schema this build reads.
    const OLDEST_SCHEMA: u32;
    /// The newest schema this build reads and writes.
    const NEWEST_SCHEMA: u32;
    /// Schemas between the two that no release wrote (development builds'), refused by name;
    /// none by default.
    const RETIRED_SCHEMAS: RangeInclusive<u32> = RangeInclusive::new(1, 0);
    /// This build's release, for errors and the marker.
    const RELEASE: &'static str;
    /// The oldest schema whose snapshots are stored in a file of their own
    /// (`crate::snapshot_file`). A snapshot of an older schema is stored in sled, where the
    /// releases that wrote that schema look for it, so a directory holding nothing newer can still
    /// be opened by them (P14.1); a newer one raises the directory's marker first, so they refuse
    /// it rather than find no snapshot.
    const SNAPSHOT_FILE_SCHEMA: u32;

    /// Encodes `entry` at the oldest schema that can express it: `(schema, bincode payload)`.
    fn encode_entry(entry: &Entry<Self>) -> Result<(u32, Vec<u8>), StoreError>;

    /// Decodes an entry written at `schema` (already checked to be one this build reads) and
    /// converts it to this build's types.
    fn decode_entry(schema: u32, payload: &[u8]) -> Result<Entry<Self>, StoreError>;
}

/// The schemas a build reads, for errors: "2 and 12", "1 to 2", "2 to 4 and 9 to 12".
pub fn readable_schemas<C: SchemaCodec>() -> String {
    let span = |from: u32, to: u32| match to - from {
        0 => from.to_string(),
        _ => format!("{from} to {to}"),
    };
    let retired = C::RETIRED_SCHEMAS;
    if retired.is_empty() {
        return span(C::OLDEST_SCHEMA, C::NEWEST_SCHEMA);
    }
    format!(
        "{} and {}",
        span(C::OLDEST_SCHEMA, retired.start() - 1),
        span(retired.end() + 1, C::NEWEST_SCHEMA)
    )
}

/// Refuses a schema this build does not read, naming both.
pub fn check_readable<C: SchemaCodec>(
    what: &'static str,
    found: u32,
    written_by: Option<String>,
) -> Result<(), StoreError> {
    let release = C::RELEASE;
    let reads = readable_schemas::<C>();
    if found > C::NEWEST_SCHEMA {
        return Err(StoreError::NewerSchema {
            what,
            found,
            written_by,
            release,
            reads,
        });
    }
    if found < C::OLDEST_SCHEMA {
        return Err(StoreError::OlderSchema {
            what,
            found,
            written_by,
            release,
            reads,
        });
    }
    if C::RETIRED_SCHEMAS.contains(&found) {
        return Err(StoreError::RetiredSchema {
            what,
            found,
            written_by,
            release,
            reads,
        });
    }
    Ok(())
}

/// The envelope tag for a record of `schema`: none for the untagged schema.
pub fn tag_for<C: SchemaCodec>(schema: u32) -> Option<u32> {
    (schema != C::UNTAGGED_SCHEMA).then_some(schema)
}

/// Seals `payload`, written at `schema`, in the envelope that schema is stored in.
pub fn seal_at<C: SchemaCodec>(schema: u32, payload: &[u8]) -> Vec<u8> {
    codec::seal(tag_for::<C>(schema), payload)
}

/// Opens a record that may name a schema: the schema it is of (checked readable) and its payload.
pub fn open_versioned<'a, C: SchemaCodec>(
    what: &'static str,
    record: &'a [u8],
) -> Result<(u32, &'a [u8]), StoreError> {
    let opened = codec::open(what, record)?;
    let schema = opened.schema.unwrap_or(C::UNTAGGED_SCHEMA);
    check_readable::<C>(what, schema, None)?;
    Ok((schema, opened.payload))
}

/// A log entry as a record: the schema it was written at and the sealed bytes.
pub fn encode_entry_record<C: SchemaCodec>(entry: &Entry<C>) -> Result<(u32, Vec<u8>), StoreError> {
    let (schema, payload) = C::encode_entry(entry)?;
    Ok((schema, seal_at::<C>(schema, &payload)))
}

/// A log entry from its record, whatever readable schema it was written at.
pub fn decode_entry_record<C: SchemaCodec>(record: &[u8]) -> Result<Entry<C>, StoreError> {
    let (schema, payload) = open_versioned::<C>("log entry", record)?;
    C::decode_entry(schema, payload)
}

/// What a data directory was written with: the envelope format and the newest state schema of
/// any record in it. Release 0.1.0 stored the same two fields and refuses any other schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FormatMarker {
    envelope: u8,
    schema: u32,
}

/// The data directory's marker, shared by the log store and the state machine.
#[derive(Debug)]
pub(crate) struct SchemaMarker {
    durability: Durability,
    tree: sled::Tree,
    newest_written: AtomicU32,
    release: &'static str,
    raise: tokio::sync::Mutex<()>,
}

impl SchemaMarker {
    /// Checks that this build reads the directory (stamping a fresh one with the oldest schema).
    pub(crate) fn open<C: SchemaCodec>(
        db: &sled::Db,
        durability: Durability,
    ) -> Result<Arc<Self>, StoreError> {
        let tree = db.open_tree(FORMAT_TREE)?;
        let newest_written = match tree.get(KEY_FORMAT)? {
            Some(bytes) => {
                let found: FormatMarker = codec::decode("format marker", &bytes)?;
                let written_by = tree
                    .get(KEY_WRITTEN_BY)?
                    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
                check_readable::<C>("the data directory", found.schema, written_by)?;
                found.schema
            }
            None => {
                let fresh = FormatMarker {
                    envelope: codec::FORMAT_VERSION,
                    schema: C::OLDEST_SCHEMA,
                };
                tree.insert(KEY_FORMAT, codec::encode("format marker", &fresh)?)?;
                tree.insert(KEY_WRITTEN_BY, C::RELEASE.as_bytes())?;
                db.flush()?;
                fresh.schema
            }
        };
        Ok(Arc::new(Self {
            durability,
            tree,
            newest_written: AtomicU32::new(newest_written),
            release: C::RELEASE,
            raise: tokio::sync::Mutex::new(()),
        }))
    }

    /// The newest schema any record in the directory may be of.
    pub(crate) fn newest_written(&self) -> u32 {
        self.newest_written.load(Ordering::Acquire)
    }

    /// Makes the marker cover `schema` before a record of it is written: durable first, so a
    /// crash can never leave a record newer than the marker says.
    pub(crate) async fn cover(&self, schema: u32) -> Result<(), StoreError> {
        if schema <= self.newest_written() {
            return Ok(());
        }
        let _raising = self.raise.lock().await;
        if schema <= self.newest_written() {
            return Ok(());
        }
        let marker = FormatMarker {
            envelope: codec::FORMAT_VERSION,
            schema,
        };
        self.tree
            .insert(KEY_FORMAT, codec::encode("format marker", &marker)?)?;
        self.tree.insert(KEY_WRITTEN_BY, self.release.as_bytes())?;
        self.durability.flush().await?;
        self.newest_written.store(schema, Ordering::Release);
        tracing::info!(
            schema,
            release = self.release,
            "data directory raised to a newer state schema; earlier releases refuse it from now on"
        );
        Ok(())
    }
}
