//! The key-value service's JSON bodies, shared by the server ([`crate::service`]) and the client
//! ([`crate::client`]), so a field renamed here is a compile error on both sides.

use leasehold_api::problem::Problem;
use serde::{Deserialize, Serialize};

/// Largest value accepted, in bytes: an example's bound, far above what the tests write.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// `PUT /kv/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutRequest {
    /// The value to store (at most [`MAX_VALUE_BYTES`]).
    pub value: String,
}

/// `200` to `PUT /kv/{key}`: the write is committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutReply {
    /// The key.
    pub key: String,
    /// Its shard.
    pub shard: u32,
    /// The epoch the write was fenced with and stored at.
    pub epoch: u64,
}

/// `200` to `GET /kv/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetReply {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// Its shard.
    pub shard: u32,
    /// The epoch of the owner that served the read.
    pub epoch: u64,
    /// The epoch of the owner that wrote the value.
    pub written_epoch: u64,
}

/// Why the service refused a request, beside the problem's `code` (RFC 9457 extension member
/// `reason`): the codes are Leasehold's shared set, this tells the service's own cases apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// `421`: this process does not hold the key's shard; refresh the routing table.
    NotOwner,
    /// `421`: this process is fenced (its lease lapsed, P3.6, or it is not registered or is
    /// stopping): it serves no shard now.
    NotAdmitting,
    /// `421`: the store has accepted a newer owner's epoch for the shard than the one this
    /// process holds it at: another process owns it now.
    Fenced,
    /// `409`: the store refused the write by the epoch rule (a newer owner raised the stored
    /// epoch while this write was in flight). Nothing was written.
    StaleEpoch,
}

impl Refusal {
    /// The snake_case name on the wire and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotOwner => "not_owner",
            Refusal::NotAdmitting => "not_admitting",
            Refusal::Fenced => "fenced",
            Refusal::StaleEpoch => "stale_epoch",
        }
    }
}

/// A refusal: the problem document (code `conflict`, status `421` or `409`) with the service's
/// extension members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvProblem {
    /// The RFC 9457 members and Leasehold's `code` and `retryable`.
    #[serde(flatten)]
    pub problem: Problem,
    /// Which refusal.
    pub reason: Refusal,
    /// The key's shard, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The epoch this process holds the shard at, when it holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The newer epoch the store has accepted (`fenced`, `stale_epoch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_epoch: Option<u64>,
}

/// `GET /stats`: what this process's service has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvStats {
    /// Writes committed.
    pub writes_accepted: u64,
    /// Writes the store refused by the epoch rule (`409 stale_epoch`).
    pub stale_writes_refused: u64,
    /// Reads served (found or not).
    pub reads: u64,
    /// Requests answered `421` (`not_owner`, `not_admitting`, `fenced`).
    pub misdirected: u64,
    /// Requests refused `421 fenced`: the store had accepted a newer epoch for the shard than
    /// the one this process holds it at (its view is behind the managers').
    pub fenced_by_store: u64,
    /// Raises of a shard's stored epoch on its arrival here.
    pub epoch_raises: u64,
    /// Writes past the ownership check whose store transaction has not finished.
    pub writes_in_flight: u64,
}
