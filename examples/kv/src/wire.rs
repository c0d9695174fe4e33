//! The key-value service's JSON bodies, shared by the server ([`crate::service`]) and the client
//! ([`crate::client`]), so a field renamed here is a compile error on both sides.

use leasehold_api::problem::Problem;
use leasehold_api::wire::Role;
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

/// `GET /kv/{key}?read=...`: which replica may serve the read (PROTOCOL P19.5). A write is the
/// primary's only, whatever it asks. Other parameters are ignored, as they were before replicas,
/// so a primary read that carried one is served as it always was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadQuery {
    /// `primary` (the default: the owner, fenced by the store), `secondary` (a warm copy only)
    /// or `any` (whichever role this process holds the key's shard in).
    #[serde(default)]
    pub read: leasehold_executor::RoleWanted,
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
    /// The shard's epoch where the read was served: the epoch this process owns it at, or, from
    /// a secondary, the primary's epoch as its set shows it.
    pub epoch: u64,
    /// The epoch of the owner that wrote the value.
    pub written_epoch: u64,
    /// Which replica served the read: absent for the primary, so a primary read's body is what
    /// it was before replicas.
    #[serde(default, skip_serializing_if = "Role::is_primary")]
    pub role: Role,
    /// From a secondary: how fresh its copy was when it served the read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<CopyFreshness>,
}

/// How fresh a secondary's copy is: what a secondary read may have missed is the writes after
/// `position`, and at most those of the last `age_ms` (plus the read's own time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyFreshness {
    /// The highest epoch of a change the copy has applied.
    pub applied_epoch: u64,
    /// The store's change position the copy has applied up to.
    pub position: u64,
    /// Milliseconds since the copy last held everything the store had.
    pub age_ms: u64,
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
    /// `421`: this process holds the shard as a secondary but its copy is not complete yet (it
    /// says the secondary ready only once it is, so a current routing table does not send here).
    Warming,
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
            Refusal::Warming => "warming",
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
    /// Reads served from a secondary's copy (found or not; also counted in `reads`).
    pub secondary_reads: u64,
    /// Copies held now, one per shard held as a secondary (complete or warming).
    pub secondary_copies: u64,
    /// Secondaries said ready to be promoted once their copy was complete (P19.3).
    pub secondaries_said_ready: u64,
    /// Changes applied to copies.
    pub copy_changes_applied: u64,
    /// Changes not applied to a copy: their epoch was below one it had applied.
    pub copy_changes_refused: u64,
    /// Copy refreshes that failed to read the store (retried at the next refresh).
    pub copy_refresh_failures: u64,
}
