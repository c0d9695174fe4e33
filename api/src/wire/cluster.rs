//! The cluster's members and positions (`GET /v1/cluster`) and membership requests.

use serde::{Deserialize, Serialize};

/// A Raft voter or learner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Member {
    /// Raft node id.
    pub node_id: u64,
    /// Advertised base URL of that manager.
    pub address: String,
    /// The member's release, as the answering replica last heard it (`0.1.0` for a member of
    /// 0.1.0, which does not report it); absent while it has not answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The newest state schema the member can apply (PROTOCOL P14.3); absent while it has not
    /// answered. The cluster version rises only when every member's is at least the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_schema: Option<u32>,
}

/// The state schemas a replica reads (PROTOCOL P14.1): it opens data directories, snapshots and
/// backups of every schema from `oldest` to `newest`, and can apply commands of `newest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SchemaRange {
    pub oldest: u32,
    pub newest: u32,
}

/// Latest snapshot a replica holds (P2.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SnapshotInfo {
    /// Last log index the snapshot covers; `None` for a snapshot of an empty log.
    pub last_log_index: Option<u64>,
    /// Opaque id of the log position the snapshot covers (two snapshots built at one position,
    /// e.g. forced twice with nothing applied between, share it).
    pub snapshot_id: String,
}

/// `GET /v1/cluster`: one replica's view of the Raft group, for operators and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ClusterInfo {
    /// The replica that answered.
    pub node_id: u64,
    /// `None` while an election is under way.
    pub leader_id: Option<u64>,
    /// Where clients should send writes.
    pub leader_address: Option<String>,
    /// Current Raft term.
    pub term: u64,
    /// Members that vote.
    pub voters: Vec<Member>,
    /// Members that replicate but do not vote yet.
    pub learners: Vec<Member>,
    /// `None` on an empty log.
    pub last_log_index: Option<u64>,
    /// `None` before anything committed.
    pub committed_index: Option<u64>,
    /// `None` before anything applied.
    pub applied_index: Option<u64>,
    /// `None` before the first snapshot.
    pub snapshot: Option<SnapshotInfo>,
    /// The answering replica's release ([`crate::RELEASE`]); absent from managers of 0.1.0,
    /// which did not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The committed cluster version (PROTOCOL P14.3): the state schema every voter can apply,
    /// raised by the leader when the last voter is upgraded. Commands and request fields of a
    /// newer schema are used only once it is reached. Absent from managers of 0.1.0 (schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_version: Option<u32>,
    /// The schemas the answering replica reads; absent from managers of 0.1.0 (2 to 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemas: Option<SchemaRange>,
}

/// The only release whose managers report neither their release nor their schemas: a reply
/// without them is from it.
pub const FIRST_RELEASE: &str = "0.1.0";
/// Release 0.1.0's state schema (it had no cluster version: its clusters are at this one).
pub const FIRST_RELEASE_SCHEMA: u32 = 2;
/// Release 0.2.0's state schema. Schemas 3 to 11 were written only by development builds before
/// 0.2.0 and are refused by name ([`DEVELOPMENT_SCHEMAS`]); no number is ever given twice.
pub const SECOND_RELEASE_SCHEMA: u32 = 12;
/// This build's newest state schema, the cluster version a cluster of its managers reaches:
/// resharding's (PROTOCOL §20). The managers apply it and the tests expect it; a new schema
/// raises it here once.
pub const NEWEST_SCHEMA: u32 = super::reshard::RESHARD_SCHEMA;
/// The schemas development builds wrote before release 0.2.0 folded them into one: no release
/// reads them (PROTOCOL P14.1).
pub const DEVELOPMENT_SCHEMAS: std::ops::RangeInclusive<u32> = 3..=11;

impl ClusterInfo {
    /// The answering replica's release; [`FIRST_RELEASE`] for a replica that does not say.
    pub fn reported_release(&self) -> &str {
        self.release.as_deref().unwrap_or(FIRST_RELEASE)
    }

    /// The schemas the answering replica reads; 0.1.0's for a replica that does not say.
    pub fn reported_schemas(&self) -> SchemaRange {
        self.schemas.unwrap_or(SchemaRange {
            oldest: FIRST_RELEASE_SCHEMA,
            newest: FIRST_RELEASE_SCHEMA,
        })
    }

    /// The committed cluster version; 0.1.0's schema for a replica that does not say.
    pub fn reported_cluster_version(&self) -> u32 {
        self.cluster_version.unwrap_or(FIRST_RELEASE_SCHEMA)
    }
}

/// `POST /v1/cluster/nodes`: add a manager as learner, then promote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AddNodeRequest {
    /// Raft node id of the new manager.
    pub node_id: u64,
    /// Its advertised base URL (see [`validate_base_url`]).
    #[cfg_attr(
        feature = "utoipa",
        schema(min_length = 1, max_length = 1024, pattern = r"^https?://[^/?#@]+/?$")
    )]
    pub address: String,
}
