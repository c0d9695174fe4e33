//! One manager replica: the Raft handle, the applied lease state and what handlers need around
//! them (leader resolution, proposing, cluster inspection).

use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_api::backup::BackupKey;
use leasehold_api::tls::TlsConfig;
use leasehold_api::wire::{ClusterInfo, Member, SchemaRange, SnapshotInfo};
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::{BasicNode, RaftMetrics, ServerState, Vote};

use crate::clock::LeaderClock;
use crate::disk_space::DiskSpace;
use crate::lease::schema::{NEWEST_SCHEMA, OLDEST_SCHEMA};
use crate::load_reports::{LoadReports, PublishedLoads};
use crate::member_versions::MemberVersions;
use crate::proposer::Proposer;
use crate::raft::failover::LeaderContact;
use crate::raft::identity::Identity;
use crate::raft::{LeaseStateHandle, ManagerRaft, NodeId, RaftTimings};
use crate::renewals::RenewalQueue;
use crate::signals::LeaderSignals;

/// Cluster-wide settings this node was started with.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `--initial-cluster`: node id → advertised URL (empty when started with `--join`).
    pub initial_cluster: BTreeMap<NodeId, String>,
    pub shard_count: u32,
    pub lease_duration_ms: u64,
    pub timings: RaftTimings,
    /// With it, listeners speak TLS, callers are checked for their roles and every outgoing call
    /// presents this manager's certificate (P13.2, P13.3).
    pub tls: Option<TlsConfig>,
    /// Seals backups and is required of restored ones (P13.6).
    pub backup_key: Option<BackupKey>,
}

/// Who serves writes right now, as far as this node knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leader {
    Local,
    Remote { id: NodeId, address: String },
    Unknown,
}

pub struct ManagerNode {
    pub id: NodeId,
    /// The URL others use to reach this node (P8.1 `--advertise`).
    pub advertise: String,
    pub raft: ManagerRaft,
    pub state: LeaseStateHandle,
    pub identity: Arc<Identity>,
    /// Shared client for forwarding and peer probes (one pool per process).
    pub http: reqwest::Client,
    /// The leader's clock (P2.3), shared with the tasks that stamp commands.
    pub clock: Arc<LeaderClock>,
    pub settings: ClusterSettings,
    pub metrics: Option<PrometheusHandle>,
    /// What committed writes tell the leader loop.
    pub signals: Arc<LeaderSignals>,
    /// Commits commands; the handle the writing tasks share.
    pub proposer: Proposer,
    /// Renewals waiting to be group-committed (see `renewals`).
    pub renewals: RenewalQueue,
    /// The loads executors reported in their renewals (P15.1), soft state for the leader: the
    /// renew handler records them, the leader reads them.
    pub load_reports: LoadReports,
    /// What the leader concluded from them at its last step (empty off the leader).
    pub published_loads: PublishedLoads,
    /// The routing table as runs, built once per change of owners or members.
    pub routing_runs: crate::routing::RoutingRunsCache,
    /// Each member's release and newest schema, as the last probe round heard them (P14.3).
    pub member_versions: Arc<MemberVersions>,
    /// When this node last accepted a message from a leader ([`crate::raft::failover`]).
    pub leader_contact: LeaderContact,
    /// This node's last log index when it started. openraft 0.9 puts a node whose persisted vote
    /// is committed for itself straight back into office in the same term, without a blank entry
    /// of its own, and takes its committed index (not flushed on every commit, so it can be older
    /// than before a crash) as the read-index floor. Entries up to here may have been committed
    /// and acknowledged before the restart, so linearizable reads also wait for them
    /// ([`Self::linearizable_read`]).
    last_log_index_at_start: u64,
    /// Set while this node rejoins (`--rejoin`): until the cluster has removed its old membership
    /// it takes no Raft message but `/raft/identity` (`http::authorize`). A leader still
    /// replicating to the old member would otherwise bring the new, empty data directory up as
    /// that member (a snapshot naming it a voter), and it would then neither join nor vote
    /// rightly. Set before the listener serves, cleared once the removal is seen.
    rejoining: std::sync::atomic::AtomicBool,
    /// The vote this node restored when it started: only a leader still holding it can be the
    /// restored-in-office leader above (a leader elected later commits a blank entry of its own
    /// term, which covers everything committed before).
    vote_at_start: Vote<NodeId>,
}

/// Why a linearizable read could not be served here.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadBarrierError {
    #[error("not the leader: {0}")]
    NotLeader(String),
    #[error("entries up to index {index} from before this node restarted are not applied yet")]
    RestartedLogNotApplied { index: u64 },
}

/// Longest a linearizable read waits for the entries a restarted leader had before it started.
const RESTARTED_LOG_APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl std::fmt::Debug for ManagerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerNode")
            .field("id", &self.id)
            .field("advertise", &self.advertise)
            .finish_non_exhaustive()
    }
}

impl ManagerNode {
    #[allow(clippy::too_many_arguments)] // one constructor, called once from `server::run`
    pub fn new(
        id: NodeId,
        advertise: String,
        raft: ManagerRaft,
        state: LeaseStateHandle,
        identity: Arc<Identity>,
        http: reqwest::Client,
        settings: ClusterSettings,
        metrics: Option<PrometheusHandle>,
        renewals: RenewalQueue,
        (last_log_index_at_start, vote_at_start): (u64, Vote<NodeId>),
        disk_space: DiskSpace,
    ) -> Self {
        let signals = Arc::new(LeaderSignals::default());
        let clock = Arc::new(LeaderClock::new());
        let proposer = Proposer::new(
            raft.clone(),
            signals.clone(),
            state.clone(),
            clock.clone(),
            disk_space,
        );
        Self {
            id,
            advertise,
            raft,
            state,
            identity,
            http,
            clock,
            settings,
            metrics,
            renewals,
            load_reports: LoadReports::default(),
            published_loads: PublishedLoads::default(),
            routing_runs: Default::default(),
            member_versions: Arc::new(MemberVersions::default()),
            leader_contact: LeaderContact::default(),
            signals,
            proposer,
            last_log_index_at_start,
            vote_at_start,
            rejoining: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Refuses Raft messages until the rejoin removed the old membership (`--rejoin`).
    pub fn hold_raft_while_rejoining(&self) {
        self.rejoining
            .store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn release_raft_after_rejoin(&self) {
        self.rejoining
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Whether this node rejoins and still refuses Raft messages.
    pub fn is_rejoining(&self) -> bool {
        self.rejoining.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The barrier in front of a linearizable read on the leader: openraft's read index (the
    /// leader's commit, confirmed by a quorum), then everything this node had logged when it
    /// started, which a leader restored in office may not count as committed yet (see
    /// `last_log_index_at_start`); `faults::full_cluster_stop_and_start` pins it.
    pub async fn linearizable_read(&self) -> Result<(), ReadBarrierError> {
        self.raft
            .ensure_linearizable()
            .await
            .map_err(|e| ReadBarrierError::NotLeader(e.to_string()))?;
        let index = self.last_log_index_at_start;
        let metrics = self.metrics_snapshot();
        if metrics.vote != self.vote_at_start
            || metrics.last_applied.map_or(0, |id| id.index) >= index
        {
            return Ok(());
        }
        self.raft
            .wait(Some(RESTARTED_LOG_APPLY_WAIT))
            .applied_index_at_least(Some(index), "entries logged before the restart")
            .await
            .map(|_| ())
            .map_err(|_| ReadBarrierError::RestartedLogNotApplied { index })
    }

    pub fn metrics_snapshot(&self) -> RaftMetrics<NodeId, BasicNode> {
        self.raft.metrics().borrow().clone()
    }

    pub fn leader(&self) -> Leader {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        match metrics.current_leader {
            Some(id) if id == self.id => {
                if self.is_stepping_down() || metrics.state != ServerState::Leader {
                    Leader::Unknown
                } else {
                    Leader::Local
                }
            }
            Some(id) => match metrics.membership_config.membership().get_node(&id) {
                Some(node) => Leader::Remote {
                    id,
                    address: node.addr.clone(),
                },
                None => Leader::Unknown,
            },
            None => Leader::Unknown,
        }
    }

    /// Whether this node leads and took office (P6.4): its clock is anchored for the Raft term
    /// it leads, so every entry of earlier terms is applied.
    pub fn in_office(&self) -> bool {
        self.leader() == Leader::Local
            && self.clock.term() == self.raft.metrics().borrow().current_term
    }

    /// The leader's advertised URL for the `X-Leasehold-Leader` header.
    pub fn leader_address(&self) -> Option<String> {
        match self.leader() {
            Leader::Local => Some(self.advertise.clone()),
            Leader::Remote { address, .. } => Some(address),
            Leader::Unknown => None,
        }
    }

    pub fn is_stepping_down(&self) -> bool {
        self.proposer.is_stepping_down()
    }

    pub fn begin_step_down(&self) {
        self.proposer.begin_step_down();
    }

    pub async fn committed_index(&self) -> Option<u64> {
        self.raft
            .with_raft_state(|state| state.committed.map(|log_id| log_id.index))
            .await
            .ok()
            .flatten()
    }

    pub async fn cluster_info(&self) -> ClusterInfo {
        let metrics = self.metrics_snapshot();
        let membership = metrics.membership_config.membership();
        let member = |(id, node): (&NodeId, &BasicNode)| {
            let version = self.member_versions.get(*id);
            Member {
                node_id: *id,
                address: node.addr.clone(),
                release: version.as_ref().map(|v| v.release.clone()),
                newest_schema: version.map(|v| v.newest_schema),
            }
        };
        let voter_ids: Vec<NodeId> = membership.voter_ids().collect();
        let (voters, learners): (Vec<Member>, Vec<Member>) = membership
            .nodes()
            .map(member)
            .partition(|m| voter_ids.contains(&m.node_id));
        // From `leader()`, not the metrics' `current_leader`: a node whose Raft core stopped
        // keeps its last metrics, naming itself, but leads nothing (P8.3).
        let leader_id = match self.leader() {
            Leader::Local => Some(self.id),
            Leader::Remote { id, .. } => Some(id),
            Leader::Unknown => None,
        };
        ClusterInfo {
            node_id: self.id,
            leader_id,
            leader_address: self.leader_address(),
            term: metrics.current_term,
            voters,
            learners,
            last_log_index: metrics.last_log_index,
            committed_index: self.committed_index().await,
            applied_index: metrics.last_applied.map(|log_id| log_id.index),
            snapshot: metrics.snapshot.map(|log_id| SnapshotInfo {
                last_log_index: Some(log_id.index),
                snapshot_id: log_id.to_string(),
            }),
            release: Some(leasehold_api::RELEASE.to_owned()),
            cluster_version: Some(self.state.read(|applied| applied.state.cluster_version())),
            schemas: Some(SchemaRange {
                oldest: OLDEST_SCHEMA,
                newest: NEWEST_SCHEMA,
            }),
        }
    }
}
