//! The sidecar's local API (PROTOCOL §16): what `leasehold-executor --local-listen` tells the
//! service beside it. Replies only: the queries, and the one small body a service sends
//! (`POST /v1/local/ready`, P19.3), are parsed where they are served.

use serde::{Deserialize, Serialize};

use super::{Role, ShardEpoch};

/// Longest long poll `GET /v1/local/permits` holds (P16.1): a larger `wait` is refused.
pub const MAX_LOCAL_PERMITS_WAIT_MS: u64 = 60_000;

/// Longest window a `GET /v1/local/admit` permit gives the service to start its work (P16.1).
pub const LOCAL_ADMIT_WINDOW_MS: u64 = 1_000;

/// What the sidecar is doing, as the service is told (P16.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LocalState {
    /// Registered with a live lease: the listed shards may be admitted.
    Admitting,
    /// The lease lapsed (P3.6): nothing may be admitted until a renewal succeeds.
    Fenced,
    /// Not registered yet, or registering anew after `unknown_executor`.
    Registering,
    /// A graceful stop began (P3.7): nothing will be admitted again.
    Stopping,
}

impl LocalState {
    /// The snake_case name on the wire and in queries.
    pub fn as_str(self) -> &'static str {
        match self {
            LocalState::Admitting => "admitting",
            LocalState::Fenced => "fenced",
            LocalState::Registering => "registering",
            LocalState::Stopping => "stopping",
        }
    }
}

/// `GET /v1/local/permits`: what the service may admit, and for how long from the instant it
/// sent the request (P16.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct LocalPermits {
    /// The revision of the last delivery the sidecar applied (P4.1). With `state`, what the
    /// service's next poll acknowledges (`applied=`, `state=`).
    pub revision: u64,
    /// Admitting, fenced, registering or stopping.
    pub state: LocalState,
    /// How long the service may admit `shards`, counted from the instant it sent this request on
    /// its own monotonic clock (P3.2). 0 unless admitting.
    pub lease_ttl_ms: u64,
    /// The same end as a deadline on this machine's CLOCK_MONOTONIC, in nanoseconds: the copy
    /// ends no later than this whichever way the service anchors it. A service that did not send
    /// the request (`--app-url`) must use it. Null unless admitting.
    pub lease_expires_monotonic_ns: Option<u64>,
    /// The cluster's shard count, for the service's key-to-shard mapping; null until known.
    pub shard_count: Option<u32>,
    /// The generation of the namespace's layout `shard_count` and `shards` belong to (PROTOCOL
    /// §20); absent while 0. Once the namespace reshards, a service maps keys by the count of the
    /// answer it applied last, and a permit asked for by shard number names this generation.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    /// The sidecar's executor id; null until registered.
    pub executor_id: Option<String>,
    /// The shards the service may admit, with the epochs that fence their work. Empty unless
    /// admitting.
    pub shards: Vec<ShardEpoch>,
    /// Warm handoffs (P17.1): shards about to be handed to this sidecar, with the epochs they
    /// will arrive at, that the service has not yet said it prepared for. Only for a service
    /// that prepares (`prepare=true` on its polls, or pushed to with `--app-url`); absent when
    /// empty. Nothing may be admitted because of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preparing: Vec<ShardEpoch>,
    /// The shards the sidecar holds a secondary of (PROTOCOL P19.1), each at the epoch its set
    /// shows and whether its renewals say it is ready to be promoted (P19.3): the warm copies the
    /// service keeps, and says ready with `POST /v1/local/ready`. Listed in every state but
    /// `stopping`; absent when empty, so a namespace of one replica sees the body it always did.
    /// Nothing may be admitted because of it: secondary work is admitted one piece at a time
    /// (`GET /v1/local/admit?role=secondary`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<LocalSecondary>,
    /// This answer's acknowledgement token (P16.1): 128 random bits in hex, given to the poller
    /// that received this answer only. Its next poll echoes it as `token=` beside `applied=` and
    /// `state=`; an acknowledgement without it counts for nothing. Absent from pushes
    /// (`--app-url`), whose `2xx` is the acknowledgement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// `200` to `GET /v1/local/admit`: the service may start this one piece of work within
/// `lease_ttl_ms` of the instant it sent the request (P16.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct LocalPermit {
    /// The shard the work belongs to.
    pub shard: u32,
    /// The epoch fencing the work (I2). For a secondary's permit, the epoch its set shows: the
    /// primary's, which secondary work never writes under (P19.1).
    pub epoch: u64,
    /// The window to start the work in, from the request's send instant.
    pub lease_ttl_ms: u64,
    /// The role the work is admitted in (PROTOCOL P19.5): `secondary` for a permit asked with
    /// `role=secondary` (or `any`) that the sidecar gave as a secondary; absent for the primary.
    #[serde(default, skip_serializing_if = "Role::is_primary")]
    pub role: Role,
}

/// A secondary the sidecar holds, as `GET /v1/local/permits` lists it (PROTOCOL P19.1, P19.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct LocalSecondary {
    /// The shard.
    pub shard: u32,
    /// The shard's current epoch, as the sidecar's set shows it: the one to say ready at.
    pub epoch: u64,
    /// The sidecar's renewals say it is ready to be promoted; absent when not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
}
