//! The envelope every record on disk (and every snapshot on the wire) is wrapped in.
//!
//! Two layouts, told apart by their first byte:
//! - format 1: `[1][crc32 of payload: u32 LE][payload]`, a record without a schema number. Every
//!   record of release 0.1.0 is one, and a record of the application's untagged schema
//!   ([`crate::SchemaCodec::UNTAGGED_SCHEMA`]) is still written this way, so the previous
//!   release reads it.
//! - format 2: `[2][crc32 of schema and payload: u32 LE][schema: u32 LE][payload]`, a record that
//!   names the application schema it was written at (PROTOCOL P14.1).
//!
//! A format 1 payload is bincode 2, standard configuration (positional: a field added is a new
//! type). A format 2 payload is the application's: for Leasehold's current schema, MessagePack
//! with each struct's fields by name ([`encode_named`]), so a field added with a default reads in
//! both directions. The version byte lets a future format be
//! detected and refused instead of misread; the checksum turns a torn or bit-flipped record into
//! an error instead of a plausible wrong value (bincode would happily decode many corruptions
//! into *some* value).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;

/// The envelope of a record without a schema number. Bump (and keep reading the old one) only
/// when the envelope itself changes; a change of an encoded type is a new application schema.
pub const FORMAT_VERSION: u8 = 1;
/// The envelope of a record that names its schema.
pub const TAGGED_FORMAT_VERSION: u8 = 2;

const VERSION_LEN: usize = 1;
const CHECKSUM_LEN: usize = 4;
const SCHEMA_LEN: usize = 4;
/// Bytes before the payload of a format 1 record.
pub const HEADER_LEN: usize = VERSION_LEN + CHECKSUM_LEN;

fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes `value` into a format 1 record (no schema number).
pub fn encode<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    Ok(seal(None, &encode_payload(what, value)?))
}

/// Decodes a format 1 record written by [`encode`], refusing other formats, failed checksums
/// and trailing bytes.
pub fn decode<T: DeserializeOwned>(what: &'static str, record: &[u8]) -> Result<T, StoreError> {
    let opened = open(what, record)?;
    if opened.schema.is_some() {
        return Err(StoreError::UnsupportedFormat {
            what,
            found: TAGGED_FORMAT_VERSION,
            supported: FORMAT_VERSION,
        });
    }
    decode_payload(what, opened.payload)
}

/// The bincode payload of a record, without its envelope.
pub fn encode_payload<T: Serialize + ?Sized>(
    what: &'static str,
    value: &T,
) -> Result<Vec<u8>, StoreError> {
    bincode::serde::encode_to_vec(value, bincode_config())
        .map_err(|source| StoreError::Encode { what, source })
}

/// A payload with every struct field by name (MessagePack): a field the reader lacks is ignored
/// and one the writer lacked takes the reader's `#[serde(default)]`.
pub fn encode_named<T: Serialize + ?Sized>(
    what: &'static str,
    value: &T,
) -> Result<Vec<u8>, StoreError> {
    rmp_serde::to_vec_named(value).map_err(|source| StoreError::EncodeNamed { what, source })
}

/// Decodes a whole payload written by [`encode_named`]: bytes left over mean it is not a `T`.
pub fn decode_named<T: DeserializeOwned>(
    what: &'static str,
    payload: &[u8],
) -> Result<T, StoreError> {
    let mut deserializer = rmp_serde::Deserializer::new(payload);
    let value = serde::Deserialize::deserialize(&mut deserializer)
        .map_err(|source| StoreError::DecodeNamed { what, source })?;
    let trailing = deserializer.get_ref().len();
    if trailing != 0 {
        return Err(StoreError::TrailingBytes { what, trailing });
    }
    Ok(value)
}

/// Decodes a whole payload: bytes left over mean the payload is not a `T`.
pub fn decode_payload<T: DeserializeOwned>(
    what: &'static str,
    payload: &[u8],
) -> Result<T, StoreError> {
    let (value, read) = decode_prefix(what, payload)?;
    if read != payload.len() {
        return Err(StoreError::TrailingBytes {
            what,
            trailing: payload.len() - read,
        });
    }
    Ok(value)
}

/// Decodes a `T` from the start of `payload`; returns it and the bytes it took.
pub fn decode_prefix<T: DeserializeOwned>(
    what: &'static str,
    payload: &[u8],
) -> Result<(T, usize), StoreError> {
    bincode::serde::decode_from_slice(payload, bincode_config())
        .map_err(|source| StoreError::Decode { what, source })
}

/// Wraps an encoded payload: format 1 without a schema, format 2 naming `schema`.
pub fn seal(schema: Option<u32>, payload: &[u8]) -> Vec<u8> {
    seal_parts(schema, &[payload])
}

/// Wraps a payload given in parts, copying each once: a large payload assembled from a header
/// and a body is never joined first and then copied again into its envelope.
pub fn seal_parts(schema: Option<u32>, parts: &[&[u8]]) -> Vec<u8> {
    let payload_len: usize = parts.iter().map(|part| part.len()).sum();
    let mut hasher = crc32fast::Hasher::new();
    let mut record = Vec::with_capacity(HEADER_LEN + SCHEMA_LEN + payload_len);
    match schema {
        None => record.push(FORMAT_VERSION),
        Some(schema) => {
            record.push(TAGGED_FORMAT_VERSION);
            hasher.update(&schema.to_le_bytes());
        }
    }
    let checksum_at = record.len();
    record.extend_from_slice(&[0; CHECKSUM_LEN]);
    if let Some(schema) = schema {
        record.extend_from_slice(&schema.to_le_bytes());
    }
    for part in parts {
        hasher.update(part);
        record.extend_from_slice(part);
    }
    record[checksum_at..checksum_at + CHECKSUM_LEN]
        .copy_from_slice(&hasher.finalize().to_le_bytes());
    record
}

/// A checked record: the schema it names (`None` for format 1) and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened<'a> {
    pub schema: Option<u32>,
    pub payload: &'a [u8],
}

/// Checks a record's envelope and checksum; the payload is not decoded.
pub fn open<'a>(what: &'static str, record: &'a [u8]) -> Result<Opened<'a>, StoreError> {
    let truncated = || StoreError::Truncated {
        what,
        len: record.len(),
    };
    let Some((&format, rest)) = record.split_first() else {
        return Err(truncated());
    };
    if format != FORMAT_VERSION && format != TAGGED_FORMAT_VERSION {
        return Err(StoreError::UnsupportedFormat {
            what,
            found: format,
            supported: TAGGED_FORMAT_VERSION,
        });
    }
    if rest.len() < CHECKSUM_LEN {
        return Err(truncated());
    }
    let (checksum, covered) = rest.split_at(CHECKSUM_LEN);
    let stored = u32::from_le_bytes([checksum[0], checksum[1], checksum[2], checksum[3]]);
    let computed = crc32fast::hash(covered);
    if format == TAGGED_FORMAT_VERSION && covered.len() < SCHEMA_LEN {
        return Err(truncated());
    }
    if stored != computed {
        return Err(StoreError::Corrupt {
            what,
            stored,
            computed,
        });
    }
    if format == FORMAT_VERSION {
        return Ok(Opened {
            schema: None,
            payload: covered,
        });
    }
    let (schema, payload) = covered.split_at(SCHEMA_LEN);
    Ok(Opened {
        schema: Some(u32::from_le_bytes([
            schema[0], schema[1], schema[2], schema[3],
        ])),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let record = encode("test", &(7u64, "seven".to_string())).unwrap();
        assert_eq!(record[0], FORMAT_VERSION);
        let back: (u64, String) = decode("test", &record).unwrap();
        assert_eq!(back, (7, "seven".to_string()));
    }

    /// The envelopes' bytes, spelled out: 0.1.0 reads format 1 and 0.2.0 format 2 exactly so.
    #[test]
    fn a_payload_sealed_in_parts_is_the_envelope_of_the_joined_payload() {
        let joined = b"header-and-body";
        for schema in [None, Some(12)] {
            let whole = seal(schema, joined);
            let parts = seal_parts(schema, &[b"header", b"-and-", b"body"]);
            assert_eq!(parts, whole, "schema {schema:?}");
        }
        let mut format_1 = vec![FORMAT_VERSION];
        format_1.extend_from_slice(&crc32fast::hash(joined).to_le_bytes());
        format_1.extend_from_slice(joined);
        assert_eq!(seal(None, joined), format_1);
        let mut covered = 12u32.to_le_bytes().to_vec();
        covered.extend_from_slice(joined);
        let mut format_2 = vec![TAGGED_FORMAT_VERSION];
        format_2.extend_from_slice(&crc32fast::hash(&covered).to_le_bytes());
        format_2.extend_from_slice(&covered);
        assert_eq!(seal(Some(12), joined), format_2);
    }

    #[test]
    fn every_single_bit_flip_in_the_payload_is_reported() {
        let record = encode("test", &(u64::MAX, vec![1u32, 2, 3], "payload")).unwrap();
        for byte in HEADER_LEN..record.len() {
            for bit in 0..8 {
                let mut damaged = record.clone();
                damaged[byte] ^= 1 << bit;
                let err = decode::<(u64, Vec<u32>, String)>("test", &damaged).unwrap_err();
                assert!(
                    matches!(err, StoreError::Corrupt { .. }),
                    "flip at byte {byte} bit {bit}: {err}"
                );
            }
        }
    }

    #[test]
    fn a_future_version_is_refused_not_misread() {
        let mut record = encode("test", &42u64).unwrap();
        record[0] = TAGGED_FORMAT_VERSION + 1;
        let err = decode::<u64>("test", &record).unwrap_err();
        assert!(matches!(
            err,
            StoreError::UnsupportedFormat { found, supported, .. }
                if found == TAGGED_FORMAT_VERSION + 1 && supported == TAGGED_FORMAT_VERSION
        ));
        assert!(err.to_string().contains("format version 3"), "{err}");
    }

    #[test]
    fn a_tagged_record_names_its_schema_and_its_checksum_covers_it() {
        let payload = encode_payload("test", &(9u64, "nine")).unwrap();
        let record = seal(Some(7), &payload);
        assert_eq!(record[0], TAGGED_FORMAT_VERSION);
        let opened = open("test", &record).unwrap();
        assert_eq!(opened.schema, Some(7));
        let back: (u64, String) = decode_payload("test", opened.payload).unwrap();
        assert_eq!(back, (9, "nine".to_string()));
        // A flipped bit in the schema number is corruption, never another schema.
        for byte in HEADER_LEN..HEADER_LEN + SCHEMA_LEN {
            let mut damaged = record.clone();
            damaged[byte] ^= 1;
            assert!(matches!(
                open("test", &damaged),
                Err(StoreError::Corrupt { .. })
            ));
        }
        // `decode` reads untagged records only: a tagged one needs its schema looked at.
        assert!(matches!(
            decode::<(u64, String)>("test", &record),
            Err(StoreError::UnsupportedFormat { .. })
        ));
        assert!(matches!(
            open("test", &record[..HEADER_LEN + 2]),
            Err(StoreError::Truncated { .. })
        ));
    }

    #[test]
    fn an_untagged_record_is_what_release_0_1_0_wrote() {
        // 0.1.0's layout, byte for byte: version 1, crc32 of the payload, the payload.
        let payload = encode_payload("test", &42u64).unwrap();
        let mut expected = vec![1u8];
        expected.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        expected.extend_from_slice(&payload);
        assert_eq!(seal(None, &payload), expected);
        assert_eq!(encode("test", &42u64).unwrap(), expected);
    }

    #[test]
    fn short_and_padded_records_are_refused() {
        assert!(matches!(
            decode::<u64>("test", &[FORMAT_VERSION, 0, 0]),
            Err(StoreError::Truncated { len: 3, .. })
        ));
        // A record whose checksum covers extra bytes the type does not consume.
        let payload = [5u8, 9, 9];
        let mut record = vec![FORMAT_VERSION];
        record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        assert!(matches!(
            decode::<u8>("test", &record),
            Err(StoreError::TrailingBytes { trailing: 2, .. })
        ));
    }
}
