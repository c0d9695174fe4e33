//! The manager's Raft node: the openraft type configuration, the lease state machine hosted on
//! `leasehold-raft-store`, the HTTP transport between replicas and storage identity pinning.

pub mod failover;
pub mod identity;
pub mod identity_probe;
pub mod network;
pub mod versions;

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use leasehold_raft_store::{SledLogStore, SledStateMachine, StateHandle};
use openraft::{BasicNode, SnapshotPolicy};

use crate::lease::{Command, LeaseState, Outcome};

openraft::declare_raft_types!(
    /// Commands are lease commands; responses are their outcomes; nodes are addressed by the
    /// base URL they advertise.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type ManagerRaft = openraft::Raft<TypeConfig>;
pub type LogStore = SledLogStore<TypeConfig>;
pub type StateMachineStore = SledStateMachine<TypeConfig, LeaseState>;
pub type LeaseStateHandle = StateHandle<TypeConfig, LeaseState>;

/// Raft timing. openraft 0.9 makes a follower wait its leader lease (`election_timeout_max`) plus
/// its own random draw from `[min, max)` without a message from the leader before it stands, so
/// the defaults (heartbeat 100 ms, election timeout 0.5–1 s) take 1.5–2 s of silence to start an
/// election: ten heartbeats or more, enough for the scheduling and flush stalls of a loaded
/// 2-core machine. A leader whose process is gone is replaced sooner, once the 1 s lease is over
/// ([`failover`]). docs/OPERATIONS.md "Raft timing" has the reasoning and the measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTimings {
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
}

impl Default for RaftTimings {
    fn default() -> Self {
        Self::with_election_timeout(100, 500)
    }
}

impl RaftTimings {
    /// The election timeout range is `[min, 2 × min)`, the usual Raft randomisation.
    pub fn with_election_timeout(heartbeat_ms: u64, election_timeout_min_ms: u64) -> Self {
        Self {
            heartbeat_ms,
            election_timeout_min_ms,
            election_timeout_max_ms: election_timeout_min_ms.saturating_mul(2),
        }
    }
}

/// When snapshots are taken and how much log is kept behind one (PROTOCOL §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotSettings {
    pub every_entries: u64,
    pub keep_entries: u64,
}

impl Default for SnapshotSettings {
    fn default() -> Self {
        Self {
            every_entries: 5_000,
            keep_entries: 1_000,
        }
    }
}

/// Time allowed for one snapshot chunk to be sent and installed. openraft's 200 ms default is far
/// too short for a multi-megabyte chunk on a loaded machine (a 50 MB snapshot is 13 chunks).
pub const SNAPSHOT_CHUNK_TIMEOUT: Duration = Duration::from_secs(20);
const SNAPSHOT_CHUNK_BYTES: u64 = 4 << 20;

/// openraft's configuration from ours; refuses inconsistent timings.
pub fn openraft_config(
    timings: RaftTimings,
    snapshots: SnapshotSettings,
) -> Result<Arc<openraft::Config>, Box<openraft::ConfigError>> {
    let config = openraft::Config {
        cluster_name: "leasehold".to_string(),
        heartbeat_interval: timings.heartbeat_ms,
        election_timeout_min: timings.election_timeout_min_ms,
        election_timeout_max: timings.election_timeout_max_ms,
        install_snapshot_timeout: SNAPSHOT_CHUNK_TIMEOUT.as_millis() as u64,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshots.every_entries),
        max_in_snapshot_log_to_keep: snapshots.keep_entries,
        ..Default::default()
    };
    Ok(Arc::new(config.validate().map_err(Box::new)?))
}
