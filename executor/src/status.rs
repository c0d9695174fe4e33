//! What a running executor tells about itself: its own view ([`ExecutorStatus`], `GET
//! /v1/status`), its admission changes as they happen ([`ShardEvent`]), and how its background
//! work ended ([`RunState`]). Plain values: built by the shared state, the lease loop and the
//! handle, read by embedders, the status endpoint and the metrics.

use leasehold_api::wire::{Role, ShardEpoch, ShardLoad};
use serde::Serialize;

use crate::admission::{AdmissionChange, AdmissionEvent, AdmissionReason, AdmissionState};
use crate::assignment::Secondary;

/// Admission started or stopped for a shard: what [`crate::ExecutorHandle::events`] delivers,
/// one per admission log line.
///
/// A secondary's (PROTOCOL §19) are variants of their own, so an embedder that knows nothing of
/// roles, and matches `Gained` to start serving a shard, never takes a secondary for the
/// primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardEvent {
    /// Work for `shard` is admitted from now on, fenced by `epoch`.
    Gained {
        /// The shard.
        shard: u32,
        /// Its epoch, the fencing token for downstream storage.
        epoch: u64,
        /// Assigned, or resumed after a lapse (P3.6).
        reason: AdmissionReason,
    },
    /// No new work for `shard` is admitted from now on; running work is not interrupted.
    Dropped {
        /// The shard.
        shard: u32,
        /// The epoch it was held at.
        epoch: u64,
        /// Unassigned, revoked, lease lapsed, unknown executor or shutdown.
        reason: AdmissionReason,
    },
    /// `shard` is held as a secondary (P19.1) from now on, admitting secondary work
    /// ([`crate::ExecutorHandle::admit_as`]): keep a warm copy, and say when it is ready
    /// ([`crate::ExecutorHandle::set_secondary_ready`]). A secondary whose epoch changed (its
    /// primary moved elsewhere) is dropped and gained again, and keeps its readiness.
    SecondaryGained {
        /// The shard.
        shard: u32,
        /// The shard's epoch, as this executor's set shows it.
        epoch: u64,
        /// Assigned, or resumed after a lapse (P3.6).
        reason: AdmissionReason,
    },
    /// No new secondary work for `shard` is admitted from now on.
    SecondaryDropped {
        /// The shard.
        shard: u32,
        /// The epoch it was held at.
        epoch: u64,
        /// Unassigned (dropped, promoted to the primary, or at a new epoch), lease lapsed,
        /// unknown executor or shutdown.
        reason: AdmissionReason,
    },
}

impl ShardEvent {
    /// The role the event is about.
    pub fn role(&self) -> Role {
        match self {
            ShardEvent::Gained { .. } | ShardEvent::Dropped { .. } => Role::Primary,
            ShardEvent::SecondaryGained { .. } | ShardEvent::SecondaryDropped { .. } => {
                Role::Secondary
            }
        }
    }
}

impl From<&AdmissionEvent> for ShardEvent {
    fn from(event: &AdmissionEvent) -> Self {
        let (shard, epoch, reason) = (event.shard, event.epoch, event.reason);
        match (event.role, event.change) {
            (Role::Primary, AdmissionChange::Start) => ShardEvent::Gained {
                shard,
                epoch,
                reason,
            },
            (Role::Primary, AdmissionChange::Stop) => ShardEvent::Dropped {
                shard,
                epoch,
                reason,
            },
            (Role::Secondary, AdmissionChange::Start) => ShardEvent::SecondaryGained {
                shard,
                epoch,
                reason,
            },
            (Role::Secondary, AdmissionChange::Stop) => ShardEvent::SecondaryDropped {
                shard,
                epoch,
                reason,
            },
        }
    }
}

// No doc link in the doc comment: it is also the schema's description in the OpenAPI document.
/// `GET /v1/status` and `ExecutorHandle::status`: the executor's own view (§9).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ExecutorStatus {
    /// `None` until registered.
    pub executor_id: Option<String>,
    /// This process's current incarnation (P4.4).
    pub incarnation: String,
    /// Operator label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The advertised push address (P8.1).
    pub address: String,
    /// Admitting or fenced (P3.6).
    pub admission: AdmissionState,
    /// The executor's own lease time left (P3.2), zero once lapsed.
    pub lease_remaining_ms: u64,
    /// Revision of the last delivery applied (P4.1).
    pub revision: u64,
    /// The cluster's shard count, once known.
    pub shard_count: Option<u32>,
    /// Held shards with epochs: the primaries.
    pub shards: Vec<ShardEpoch>,
    /// The secondaries it holds (PROTOCOL P19.1), each at the shard's epoch and whether its
    /// renewals say it is ready to be promoted (P19.3); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<Secondary>,
    /// A graceful stop has begun (P3.7).
    pub stopping: bool,
    /// CLOCK_MONOTONIC (ns) when this status was read: places it on the admission log's
    /// timeline (§9).
    pub monotonic_ns: u64,
    /// The capacity it registers with (P15.1); a cluster below cluster version 12 records 1.
    pub capacity: u32,
    /// The loads (P15.1) its last granted renewal carried; absent until one carried loads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_loads: Option<Vec<ShardLoad>>,
}

/// How the executor's background work ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Registered or trying to.
    Running,
    /// Stopped by [`crate::ExecutorHandle::shutdown`].
    Stopped,
    /// Gave up: the manager refused the registration in a way retrying cannot fix (e.g. an
    /// advertised address it rejects).
    Failed(String),
}
