//! The envelope every record on disk (and every snapshot on the wire) is wrapped in.
//!
//! Layout: `[format version: u8][crc32 of payload: u32 LE][payload: bincode 2, standard config]`.
//! The version byte lets a future format be detected and refused instead of misread; the
//! checksum turns a torn or bit-flipped record into an error instead of a plausible wrong value
//! (bincode would happily decode many corruptions into *some* value).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;

/// Bump when the shape of any encoded type changes, and teach `decode` the old shape if it must
/// still be read.
pub const FORMAT_VERSION: u8 = 1;

const VERSION_LEN: usize = 1;
const CHECKSUM_LEN: usize = 4;
/// Bytes before the payload.
pub const HEADER_LEN: usize = VERSION_LEN + CHECKSUM_LEN;

fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes `value` into a versioned, checksummed record.
pub fn encode<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    let payload = bincode::serde::encode_to_vec(value, bincode_config())
        .map_err(|source| StoreError::Encode { what, source })?;
    let mut record = Vec::with_capacity(HEADER_LEN + payload.len());
    record.push(FORMAT_VERSION);
    record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    Ok(record)
}

/// Decodes a record written by [`encode`], refusing unknown versions, failed checksums and
/// trailing bytes.
pub fn decode<T: DeserializeOwned>(what: &'static str, record: &[u8]) -> Result<T, StoreError> {
    if record.len() < HEADER_LEN {
        return Err(StoreError::Truncated {
            what,
            len: record.len(),
        });
    }
    let (header, payload) = record.split_at(HEADER_LEN);
    let found = header[0];
    if found != FORMAT_VERSION {
        return Err(StoreError::UnsupportedFormat {
            what,
            found,
            supported: FORMAT_VERSION,
        });
    }
    let stored = u32::from_le_bytes([header[1], header[2], header[3], header[4]]);
    let computed = crc32fast::hash(payload);
    if stored != computed {
        return Err(StoreError::Corrupt {
            what,
            stored,
            computed,
        });
    }
    let (value, read) = bincode::serde::decode_from_slice(payload, bincode_config())
        .map_err(|source| StoreError::Decode { what, source })?;
    if read != payload.len() {
        return Err(StoreError::TrailingBytes {
            what,
            trailing: payload.len() - read,
        });
    }
    Ok(value)
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
        record[0] = FORMAT_VERSION + 1;
        let err = decode::<u64>("test", &record).unwrap_err();
        assert!(matches!(
            err,
            StoreError::UnsupportedFormat { found, supported, .. }
                if found == FORMAT_VERSION + 1 && supported == FORMAT_VERSION
        ));
        assert!(err.to_string().contains("format version 2"), "{err}");
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
