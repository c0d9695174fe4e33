use openraft::{AnyError, ErrorSubject, ErrorVerb, NodeId, StorageError, StorageIOError};

/// Everything that can go wrong below openraft: sled I/O, encoding, and records we refuse to
/// interpret.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),

    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        source: bincode::error::EncodeError,
    },

    #[error("decoding {what}: {source}")]
    Decode {
        what: &'static str,
        source: bincode::error::DecodeError,
    },

    #[error("encoding {what}: {source}")]
    EncodeNamed {
        what: &'static str,
        source: rmp_serde::encode::Error,
    },

    #[error("decoding {what}: {source}")]
    DecodeNamed {
        what: &'static str,
        source: rmp_serde::decode::Error,
    },

    #[error("{what} record is {len} bytes, shorter than its header")]
    Truncated { what: &'static str, len: usize },

    #[error(
        "{what} record has format version {found}, this build reads format versions 1 to \
         {supported}: it was written by a different Leasehold version and is refused rather than \
         misread"
    )]
    UnsupportedFormat {
        what: &'static str,
        found: u8,
        supported: u8,
    },

    #[error(
        "{what} record failed its checksum (stored {stored:#010x}, computed {computed:#010x}): \
         the data is corrupt"
    )]
    Corrupt {
        what: &'static str,
        stored: u32,
        computed: u32,
    },

    #[error("{what} record has {trailing} bytes after its value: the data is corrupt")]
    TrailingBytes { what: &'static str, trailing: usize },

    #[error(
        "{what} is of state schema {found}{written_by}, newer than this build reads: this is \
         Leasehold {release}, which reads schemas {reads}. Run a release that \
         reads schema {found} (docs/OPERATIONS.md, \"Upgrades\")",
        written_by = written_by.as_deref().map(|r| format!(" (written by Leasehold {r})")).unwrap_or_default()
    )]
    NewerSchema {
        what: &'static str,
        found: u32,
        written_by: Option<String>,
        release: &'static str,
        reads: String,
    },

    #[error(
        "{what} is of state schema {found}{written_by}, older than this build reads: this is \
         Leasehold {release}, which reads schemas {reads}. Upgrade through an \
         intermediate release first (CHANGELOG.md names the schemas of each)",
        written_by = written_by.as_deref().map(|r| format!(" (written by Leasehold {r})")).unwrap_or_default()
    )]
    OlderSchema {
        what: &'static str,
        found: u32,
        written_by: Option<String>,
        release: &'static str,
        reads: String,
    },

    #[error(
        "{what} is of state schema {found}{written_by}, which only development builds before \
         Leasehold {release} wrote: this build reads schemas {reads}. Open it with the build that \
         wrote it, or start from a backup or data directory of a release"
    , written_by = written_by.as_deref().map(|r| format!(" (written by Leasehold {r})")).unwrap_or_default())]
    RetiredSchema {
        what: &'static str,
        found: u32,
        written_by: Option<String>,
        release: &'static str,
        reads: String,
    },

    #[error("{what}: {detail}")]
    NotExpressible { what: &'static str, detail: String },

    #[error("snapshot covers {payload:?} but was offered as {offered:?}")]
    SnapshotMismatch { payload: String, offered: String },

    #[error("snapshot file {path}: {source}")]
    SnapshotFile {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("the group-commit flusher has stopped")]
    FlusherStopped,

    #[error("the log store needs a running tokio runtime for its group-commit flusher")]
    NoRuntime,
}

impl StoreError {
    /// Wraps this error for openraft, which treats any storage error as fatal for the node.
    pub(crate) fn into_storage<NID: NodeId>(
        self,
        subject: ErrorSubject<NID>,
        verb: ErrorVerb,
    ) -> StorageError<NID> {
        StorageIOError::new(subject, verb, AnyError::new(&self)).into()
    }
}
