//! The backup file format, shared by the manager (which writes it at `GET /v1/backup` and imports
//! it on first start) and `leaseholdctl snapshot save|restore`.
//!
//! Layout, self-describing so `head -2 file` tells an operator what it holds:
//!
//! ```text
//! LEASEHOLD-BACKUP\n                      magic line
//! {"format_version":1,...}\n              one JSON line: BackupHeader
//! <payload_length bytes>                  the lease state, JSON
//! ```
//!
//! The payload is the manager's replicated lease state as JSON; only the manager decodes it in
//! full (it knows each schema's shape and decodes the payload at `state_schema_version`). Everyone else
//! checks the envelope: magic, container format, declared length, SHA-256, and that the payload
//! is a JSON object whose `revision` is the header's.

use std::fmt::Write as _;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// First line of every backup file.
pub const BACKUP_MAGIC: &[u8] = b"LEASEHOLD-BACKUP\n";

/// Version of this container format (magic, header line, payload). Bump when it changes.
pub const BACKUP_FORMAT_VERSION: u32 = 1;

/// Longest header line accepted; a real one is about 250 bytes.
pub const MAX_HEADER_BYTES: usize = 4096;

/// Name of the prepared backup inside a manager's data directory after `leaseholdctl snapshot
/// restore`; the manager imports it on its first start (docs/OPERATIONS.md, "Backup and restore").
pub const RESTORE_FILE_NAME: &str = "leasehold-restore.backup";

/// What the file was renamed to once imported, kept for the operator's records.
pub const RESTORED_FILE_NAME: &str = "leasehold-restore.imported";

/// The header line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupHeader {
    /// [`BACKUP_FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The lease state schema the payload is written at (the oldest that expresses it); a
    /// manager imports every schema it reads (PROTOCOL P14.1).
    pub state_schema_version: u32,
    /// The state's revision (log index of its last change) when it was read.
    pub revision: u64,
    /// The cluster's shard count (0 if the cluster was not initialised yet).
    pub shard_count: u32,
    /// Wall-clock time the backup was taken, milliseconds since the Unix epoch (informational).
    pub created_at_unix_ms: u64,
    /// Id of the manager that served it (informational).
    pub source_node_id: u64,
    /// Exact byte length of the payload after the header line.
    pub payload_length: u64,
    /// Lower-case hex SHA-256 of the payload.
    pub payload_sha256: String,
    /// `hmac-sha256:<hex>` of the header line without this field and the payload, by the
    /// manager's `--backup-key-file` (PROTOCOL P13.6); absent from an unsealed backup. A
    /// manager with a key restores only a backup its key sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

/// Why a backup file was refused. Nothing is touched before a file passes every check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackupError {
    #[error("not a Leasehold backup (the file does not start with the LEASEHOLD-BACKUP line)")]
    BadMagic,
    #[error("the header line is missing, unterminated or longer than {MAX_HEADER_BYTES} bytes")]
    HeaderMissing,
    #[error("the header line is not valid: {0}")]
    InvalidHeader(String),
    #[error(
        "backup format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedFormat { found: u64, supported: u32 },
    #[error("the payload is {actual} bytes but the header says {declared}: the file is truncated or padded")]
    LengthMismatch { declared: u64, actual: u64 },
    #[error("payload checksum mismatch: header says sha256 {declared}, the payload hashes to {actual}: the file is corrupt")]
    ChecksumMismatch { declared: String, actual: String },
    #[error("the payload does not decode: {0}")]
    InvalidPayload(String),
    #[error("the backup is not sealed, and this manager restores only backups its --backup-key-file sealed (P13.6)")]
    Unsealed,
    #[error("the backup's seal is not this manager's --backup-key-file's: it was altered, or sealed with another key (P13.6)")]
    BadSeal,
}

/// The key of `--backup-key-file` (PROTOCOL P13.6): a backup it seals carries an HMAC-SHA-256
/// of its header and payload, and a manager holding it restores nothing else. `Debug` never
/// shows it.
#[derive(Clone)]
pub struct BackupKey(Hmac<Sha256>);

/// Shortest key accepted: 32 bytes, SHA-256's own size.
pub const MIN_BACKUP_KEY_BYTES: usize = 32;

const SEAL_PREFIX: &str = "hmac-sha256:";

impl std::fmt::Debug for BackupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackupKey(<redacted>)")
    }
}

impl BackupKey {
    /// The key is the file's bytes, with trailing line breaks removed (an editor adds one).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let end = bytes
            .iter()
            .rposition(|b| !matches!(b, b'\n' | b'\r'))
            .map_or(0, |last| last + 1);
        let key = &bytes[..end];
        if key.len() < MIN_BACKUP_KEY_BYTES {
            return Err(format!(
                "a backup key is at least {MIN_BACKUP_KEY_BYTES} bytes, this one is {}",
                key.len()
            ));
        }
        <Hmac<Sha256> as Mac>::new_from_slice(key)
            .map(Self)
            .map_err(|e| format!("not a usable HMAC key: {e}"))
    }

    fn mac(&self, header: &BackupHeader, payload: &[u8]) -> Hmac<Sha256> {
        let unsealed = BackupHeader {
            seal: None,
            ..header.clone()
        };
        // The header always serialises.
        let mut mac = self.0.clone();
        mac.update(&serde_json::to_vec(&unsealed).unwrap_or_default());
        mac.update(b"\n");
        mac.update(payload);
        mac
    }

    fn seal(&self, header: &BackupHeader, payload: &[u8]) -> String {
        let tag = self.mac(header, payload).finalize().into_bytes();
        format!("{SEAL_PREFIX}{}", hex(&tag))
    }

    /// Whether `header`'s seal is this key's over `header` and `payload` (constant time).
    pub fn check(&self, header: &BackupHeader, payload: &[u8]) -> Result<(), BackupError> {
        let seal = header.seal.as_deref().ok_or(BackupError::Unsealed)?;
        let tag = seal
            .strip_prefix(SEAL_PREFIX)
            .and_then(unhex)
            .ok_or(BackupError::BadSeal)?;
        self.mac(header, payload)
            .verify_slice(&tag)
            .map_err(|_| BackupError::BadSeal)
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// Everything about a backup except the payload, which [`encode_backup`] measures and hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupSource {
    pub state_schema_version: u32,
    pub revision: u64,
    pub shard_count: u32,
    pub created_at_unix_ms: u64,
    pub source_node_id: u64,
}

/// The complete file for `payload`, sealed when `key` is given.
pub fn encode_backup(source: BackupSource, payload: &[u8], key: Option<&BackupKey>) -> Vec<u8> {
    let header = BackupHeader {
        format_version: BACKUP_FORMAT_VERSION,
        state_schema_version: source.state_schema_version,
        revision: source.revision,
        shard_count: source.shard_count,
        created_at_unix_ms: source.created_at_unix_ms,
        source_node_id: source.source_node_id,
        payload_length: payload.len() as u64,
        payload_sha256: sha256_hex(payload),
        seal: None,
    };
    let header = match key {
        Some(key) => BackupHeader {
            seal: Some(key.seal(&header, payload)),
            ..header
        },
        None => header,
    };
    // A struct of integers and strings always serialises.
    let header_line = serde_json::to_vec(&header).unwrap_or_default();
    let mut file = Vec::with_capacity(BACKUP_MAGIC.len() + header_line.len() + 1 + payload.len());
    file.extend_from_slice(BACKUP_MAGIC);
    file.extend_from_slice(&header_line);
    file.push(b'\n');
    file.extend_from_slice(payload);
    file
}

/// Checks a backup file's envelope and returns its header and payload: magic, container format,
/// declared length, SHA-256, and that the payload is a JSON object carrying the header's
/// revision. The caller that imports it decodes the payload in full.
pub fn parse_backup(file: &[u8]) -> Result<(BackupHeader, &[u8]), BackupError> {
    let rest = file
        .strip_prefix(BACKUP_MAGIC)
        .ok_or(BackupError::BadMagic)?;
    let header_end = rest
        .iter()
        .take(MAX_HEADER_BYTES + 1)
        .position(|&b| b == b'\n')
        .ok_or(BackupError::HeaderMissing)?;
    let (header_line, payload) = (&rest[..header_end], &rest[header_end + 1..]);
    // The version first, so a future format is reported as such and not as a bad field.
    let loose: serde_json::Value = serde_json::from_slice(header_line)
        .map_err(|e| BackupError::InvalidHeader(e.to_string()))?;
    let found = loose
        .get("format_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| BackupError::InvalidHeader("no format_version".to_string()))?;
    if found != u64::from(BACKUP_FORMAT_VERSION) {
        return Err(BackupError::UnsupportedFormat {
            found,
            supported: BACKUP_FORMAT_VERSION,
        });
    }
    let header: BackupHeader =
        serde_json::from_value(loose).map_err(|e| BackupError::InvalidHeader(e.to_string()))?;
    let actual_length = payload.len() as u64;
    if actual_length != header.payload_length {
        return Err(BackupError::LengthMismatch {
            declared: header.payload_length,
            actual: actual_length,
        });
    }
    let actual = sha256_hex(payload);
    if actual != header.payload_sha256 {
        return Err(BackupError::ChecksumMismatch {
            declared: header.payload_sha256.clone(),
            actual,
        });
    }
    #[derive(Deserialize)]
    struct PayloadRevision {
        revision: u64,
    }
    let decoded: PayloadRevision =
        serde_json::from_slice(payload).map_err(|e| BackupError::InvalidPayload(e.to_string()))?;
    if decoded.revision != header.revision {
        return Err(BackupError::InvalidPayload(format!(
            "the payload is at revision {}, the header says {}",
            decoded.revision, header.revision
        )));
    }
    Ok((header, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> BackupSource {
        BackupSource {
            state_schema_version: 2,
            revision: 42,
            shard_count: 8,
            created_at_unix_ms: 1_700_000_000_000,
            source_node_id: 1,
        }
    }

    const PAYLOAD: &[u8] = br#"{"revision":42,"shards":[]}"#;

    #[test]
    fn sha256_matches_the_standard_test_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_backup_round_trips_and_is_self_describing() {
        let file = encode_backup(source(), PAYLOAD, None);
        assert!(file.starts_with(b"LEASEHOLD-BACKUP\n{\"format_version\":1,"));
        let (header, payload) = parse_backup(&file).unwrap();
        assert_eq!(payload, PAYLOAD);
        assert_eq!(header.revision, 42);
        assert_eq!(header.shard_count, 8);
        assert_eq!(header.state_schema_version, 2);
        assert_eq!(header.payload_length, PAYLOAD.len() as u64);
        assert_eq!(header.payload_sha256, sha256_hex(PAYLOAD));
    }

    #[test]
    fn every_single_bit_flip_in_the_payload_is_refused() {
        let file = encode_backup(source(), PAYLOAD, None);
        let payload_start = file.len() - PAYLOAD.len();
        for byte in payload_start..file.len() {
            for bit in 0..8 {
                let mut damaged = file.clone();
                damaged[byte] ^= 1 << bit;
                assert!(
                    matches!(
                        parse_backup(&damaged),
                        Err(BackupError::ChecksumMismatch { .. })
                    ),
                    "flip at byte {byte} bit {bit} accepted"
                );
            }
        }
    }

    #[test]
    fn damaged_envelopes_are_refused_with_the_reason() {
        let file = encode_backup(source(), PAYLOAD, None);
        assert_eq!(parse_backup(b"hello"), Err(BackupError::BadMagic));
        assert_eq!(
            parse_backup(b"LEASEHOLD-BACKUP\n{\"format_version\":1"),
            Err(BackupError::HeaderMissing)
        );
        assert!(matches!(
            parse_backup(&file[..file.len() - 1]),
            Err(BackupError::LengthMismatch { .. })
        ));
        let mut padded = file.clone();
        padded.push(b' ');
        assert!(matches!(
            parse_backup(&padded),
            Err(BackupError::LengthMismatch { .. })
        ));
        let future = String::from_utf8(file.clone()).unwrap().replacen(
            "\"format_version\":1",
            "\"format_version\":9",
            1,
        );
        assert_eq!(
            parse_backup(future.as_bytes()),
            Err(BackupError::UnsupportedFormat {
                found: 9,
                supported: 1
            })
        );
        let unknown_field = String::from_utf8(file).unwrap().replacen(
            "\"revision\":42,",
            "\"revision\":42,\"x\":1,",
            1,
        );
        assert!(matches!(
            parse_backup(unknown_field.as_bytes()),
            Err(BackupError::InvalidHeader(_))
        ));
    }

    #[test]
    fn a_payload_that_is_not_the_headers_state_is_refused() {
        let wrong_revision = encode_backup(source(), br#"{"revision":41}"#, None);
        assert!(matches!(
            parse_backup(&wrong_revision),
            Err(BackupError::InvalidPayload(_))
        ));
        let not_json = encode_backup(source(), b"\x00\x01binary", None);
        assert!(matches!(
            parse_backup(&not_json),
            Err(BackupError::InvalidPayload(_))
        ));
    }

    /// P13.6: a sealed backup is accepted by its key only; altering any byte of the header or
    /// the payload, or another key, or no seal at all, is refused.
    #[test]
    fn a_sealed_backup_opens_with_its_key_only() {
        let key = BackupKey::from_bytes(&[7u8; 40]).unwrap();
        let other = BackupKey::from_bytes(&[8u8; 40]).unwrap();
        let file = encode_backup(source(), PAYLOAD, Some(&key));
        let (header, payload) = parse_backup(&file).unwrap();
        assert!(header.seal.as_deref().unwrap().starts_with("hmac-sha256:"));
        assert_eq!(key.check(&header, payload), Ok(()));
        assert_eq!(other.check(&header, payload), Err(BackupError::BadSeal));
        let altered = BackupHeader {
            created_at_unix_ms: header.created_at_unix_ms + 1,
            ..header.clone()
        };
        assert_eq!(key.check(&altered, payload), Err(BackupError::BadSeal));
        let mut tampered = payload.to_vec();
        tampered[0] ^= 1;
        assert_eq!(key.check(&header, &tampered), Err(BackupError::BadSeal));
        let unsealed = encode_backup(source(), PAYLOAD, None);
        let (header, payload) = parse_backup(&unsealed).unwrap();
        assert_eq!(key.check(&header, payload), Err(BackupError::Unsealed));
        assert!(BackupKey::from_bytes(b"short\n").is_err());
        assert!(!format!("{key:?}").contains('7'), "the key never shows");
    }
}
