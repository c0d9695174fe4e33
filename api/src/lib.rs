//! The Leasehold API contract, shared by the manager, the executor and `leaseholdctl`.
//!
//! Both sides of every HTTP exchange depend on this crate and never redefine its types, so a
//! field renamed here is a compile error on both sides instead of a silent protocol split.
//!
//! - [`wire`]: JSON bodies of the HTTP surface (PROTOCOL §9). Request types reject unknown
//!   fields (I6).
//! - [`problem`]: RFC 9457 error bodies with a machine-readable [`ErrorCode`], and the header
//!   names the surface uses.
//! - [`client`]: a typed async client for the manager API that follows the leader and retries
//!   with the patience of P7.1.
//! - [`backup`]: the self-describing, checksummed backup file (`GET /v1/backup`,
//!   `leaseholdctl snapshot save|restore`).
//! - [`ctl`]: `leaseholdctl`, the operator CLI (its binary is `src/bin/leaseholdctl.rs`).
//! - [`tls`]: the TLS files, server and client configurations and the role a certificate proves
//!   (PROTOCOL §13).
//! - [`shard_for_key`]: the stable key → shard mapping (PROTOCOL §1).
//!
//! - `http` (feature `axum`): the one HTTP error type and the extractors, fallbacks and
//!   middleware both servers use, so every rejection is problem+json the same way.
//! - `openapi` (feature `utoipa`): schemas of the wire types and the problem responses every
//!   operation documents, for the servers' `/v1/openapi.json`.

use std::num::NonZeroU32;

pub mod backup;
pub mod client;
#[cfg(feature = "axum")]
pub mod connection_budget;
#[cfg(feature = "cli")]
pub mod ctl;
#[cfg(feature = "axum")]
pub mod http;
pub mod metric_catalog;
#[cfg(feature = "utoipa")]
pub mod openapi;
#[cfg(feature = "axum")]
pub mod origin;
pub mod problem;
pub mod process;
pub mod routing;
#[cfg(feature = "axum")]
pub mod serve;
pub mod tls;
pub mod wire;

pub use client::{Client, ClientConfig, ClientError};
pub use problem::{
    ErrorCode, Problem, CLUSTER_VERSION_HEADER, LEADER_HEADER, PROBLEM_CONTENT_TYPE,
    REQUEST_ID_HEADER,
};
pub use routing::{RoutingClient, RoutingConfig, RoutingError, RoutingStats};
pub use tls::{Role, TlsConfig, TlsError, TlsFiles};
pub use wire::{
    AddNodeRequest, AssignmentPush, ClusterInfo, Credential, ExecutorHealth, Grant, Member,
    RegisterRequest, ReleaseRequest, RenewRequest, RevokePush, RevokeReply, SchemaRange,
    ShardEpoch, ShardLoad, SnapshotInfo,
};

/// This build's release: the workspace version, recorded with its commit in CHANGELOG.md. Every
/// binary reports it (`--version`, `GET /v1/cluster`, `leasehold_build_info`).
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// FNV-1a 64-bit offset basis.
pub const FNV1A_64_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime (2^40 + 2^8 + 0xb3).
pub const FNV1A_64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64-bit, of `bytes`:
/// `h = 0xcbf29ce484222325; for each byte b { h ^= b; h = h * 0x100000001b3 mod 2^64 }`.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV1A_64_OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV1A_64_PRIME)
    })
}

/// The shard that owns `key`: `fnv1a_64(key) % shard_count` (see [`fnv1a_64`] for the exact
/// algorithm and constants).
///
/// This mapping is part of the API contract (PROTOCOL §1): routers, executors and clients in any
/// language must compute the same shard for the same key bytes, and it can never change for a
/// running cluster without moving every key. The key is hashed as raw bytes, with no
/// normalisation; callers that route strings pass their UTF-8 bytes.
///
/// `shard_count` is non-zero by type, so there is no division by zero to guard at run time.
///
/// ```
/// use std::num::NonZeroU32;
/// use leasehold_api::shard_for_key;
///
/// let shard_count = NonZeroU32::new(1024).expect("1024 is not zero");
/// // fnv1a_64(b"a") = 0xaf63dc4c8601ec8c, and 0xaf63dc4c8601ec8c % 1024 = 140.
/// assert_eq!(shard_for_key(b"a", shard_count), 140);
/// ```
pub fn shard_for_key(key: &[u8], shard_count: NonZeroU32) -> u32 {
    let shard = fnv1a_64(key) % u64::from(shard_count.get());
    // The remainder is below `shard_count`, itself a u32, so the conversion cannot fail.
    u32::try_from(shard).unwrap_or(0)
}

/// The longest key any route takes to name a shard (bytes): `GET /v1/routing?key=K`, the demo
/// executor's `GET /v1/work?key=K` and a sidecar's `GET /v1/local/admit?key=K`.
pub const MAX_KEY_BYTES: usize = 1024;

/// A key's length checked against [`MAX_KEY_BYTES`]: the refusal to give (a 400) when it is
/// longer.
pub fn check_key_length(key: &str) -> Result<(), String> {
    if key.len() > MAX_KEY_BYTES {
        return Err(format!("key is longer than {MAX_KEY_BYTES} bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_the_longest_length_is_taken_and_one_byte_more_refused() {
        assert!(check_key_length(&"k".repeat(MAX_KEY_BYTES)).is_ok());
        assert!(check_key_length("").is_ok());
        let refused = check_key_length(&"k".repeat(MAX_KEY_BYTES + 1)).unwrap_err();
        assert!(refused.contains("1024"), "{refused}");
    }

    fn count(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    /// Known answers from the FNV reference test vectors; any other implementation of the
    /// contract can check itself against these.
    #[test]
    fn fnv1a_64_known_answers() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn shard_for_key_known_answers() {
        assert_eq!(
            shard_for_key(b"", count(1024)),
            (0xcbf2_9ce4_8422_2325u64 % 1024) as u32
        );
        assert_eq!(
            shard_for_key(b"a", count(1024)),
            (0xaf63_dc4c_8601_ec8cu64 % 1024) as u32
        );
        assert_eq!(shard_for_key(b"a", count(1024)), 140);
        assert_eq!(
            shard_for_key(b"foobar", count(7)),
            (0x8594_4171_f739_67e8u64 % 7) as u32
        );
    }

    #[test]
    fn shard_for_key_stays_in_range() {
        assert_eq!(shard_for_key(b"anything", count(1)), 0);
        let max = count(u32::MAX);
        for key in [&b""[..], b"a", b"key-17", &[0xff; 64]] {
            assert!(shard_for_key(key, max) < u32::MAX);
            for n in [2, 3, 1024, 1000] {
                assert!(shard_for_key(key, count(n)) < n);
            }
        }
    }

    #[test]
    fn shard_for_key_spreads_keys() {
        let shards = count(16);
        let mut seen = [0u32; 16];
        for i in 0..1600 {
            seen[shard_for_key(format!("key-{i}").as_bytes(), shards) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "poor spread: {seen:?}");
    }
}
