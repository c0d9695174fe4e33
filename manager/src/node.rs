//! One manager replica: the Raft handle, the applied lease state and what handlers need around
//! them (leader resolution, proposing, cluster inspection).

use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_api::backup::BackupKey;
use leasehold_api::tls::TlsConfig;
use leasehold_api::wire::{ClusterInfo, Member, SchemaRange, SnapshotInfo};
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::{BasicNode, Vote};

use crate::clock::LeaderClock;
use crate::disk_space::DiskSpace;
use crate::leadership::{Leader, Leadership};
use crate::lease::schema::{NEWEST_SCHEMA, OLDEST_SCHEMA};
use crate::load_reports::{LoadReports, PublishedLoads};
use crate::member_versions::MemberVersions;
use crate::proposer::Proposer;
use crate::raft::failover::LeaderContact;
use crate::raft::identity::Identity;
use crate::raft::{LeaseStateHandle, ManagerRaft, NodeId, RaftTimings};
use crate::registrations::RegistrationQueue;
use crate::renewals::from_memory::MemoryRenewals;
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

/// One manager replica: the handles its tasks and handlers are cut from.
pub struct ManagerNode {
    /// Who leads, the Raft handle, the proposer and the leader clock.
    pub leadership: Leadership,
    pub state: LeaseStateHandle,
    pub identity: Arc<Identity>,
    /// Shared client for forwarding and peer probes (one pool per process).
    pub http: reqwest::Client,
    pub settings: ClusterSettings,
    pub metrics: Option<PrometheusHandle>,
    /// What committed writes tell the leader loop.
    pub signals: Arc<LeaderSignals>,
    /// Renewals waiting to be group-committed (see `renewals`).
    pub renewals: RenewalQueue,
    /// Renewals answered from the leader's memory (P6.5 to P6.7), and what they told.
    pub memory_renewals: MemoryRenewals,
    /// Registrations waiting to be group-committed (see `registrations`), from cluster version
    /// 8 on.
    pub registrations: RegistrationQueue,
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
    pub leader_contact: Arc<LeaderContact>,
    /// The forwards this node has in flight, each vouched for until answered (P13.3,
    /// [`crate::http::vouch`]).
    pub vouchers: crate::http::vouch::Vouchers,
    /// Set while this node rejoins (`--rejoin`): until the cluster has removed its old membership
    /// it takes no Raft message but `/raft/identity` (`http::authorize`). A leader still
    /// replicating to the old member would otherwise bring the new, empty data directory up as
    /// that member (a snapshot naming it a voter), and it would then neither join nor vote
    /// rightly. Set before the listener serves, cleared once the removal is seen.
    rejoining: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ManagerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerNode")
            .field("leadership", &self.leadership)
            .finish_non_exhaustive()
    }
}

/// What a replica is built from: what `server` opened and started.
pub struct NodeParts {
    pub id: NodeId,
    /// The URL others use to reach this node (P8.1 `--advertise`).
    pub advertise: String,
    pub raft: ManagerRaft,
    pub state: LeaseStateHandle,
    pub identity: Arc<Identity>,
    /// The one HTTP client of the process (forwarding, probes, deliveries).
    pub http: reqwest::Client,
    pub settings: ClusterSettings,
    pub metrics: Option<PrometheusHandle>,
    pub renewals: RenewalQueue,
    pub memory_renewals: MemoryRenewals,
    pub registrations: RegistrationQueue,
    /// The last log index and the vote the log store held at start-up (the read barrier's
    /// floor, [`Leadership::linearizable_read`]).
    pub log_at_start: (u64, Vote<NodeId>),
    pub disk_space: DiskSpace,
}

impl std::fmt::Debug for NodeParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeParts")
            .field("id", &self.id)
            .field("advertise", &self.advertise)
            .finish_non_exhaustive()
    }
}

impl ManagerNode {
    pub fn new(parts: NodeParts) -> Self {
        let signals = Arc::new(LeaderSignals::default());
        let clock = Arc::new(LeaderClock::new());
        let proposer = Proposer::new(
            parts.raft.clone(),
            signals.clone(),
            parts.state.clone(),
            clock.clone(),
            parts.disk_space,
        );
        let leader_contact = Arc::new(LeaderContact::default());
        let raft_lease =
            std::time::Duration::from_millis(parts.settings.timings.election_timeout_max_ms);
        Self {
            leadership: Leadership::new(
                parts.id,
                parts.advertise,
                parts.raft,
                proposer,
                clock,
                parts.log_at_start,
                (leader_contact.clone(), raft_lease),
            ),
            state: parts.state,
            identity: parts.identity,
            http: parts.http,
            settings: parts.settings,
            metrics: parts.metrics,
            renewals: parts.renewals,
            memory_renewals: parts.memory_renewals,
            registrations: parts.registrations,
            load_reports: LoadReports::default(),
            published_loads: PublishedLoads::default(),
            routing_runs: Default::default(),
            member_versions: Arc::new(MemberVersions::default()),
            leader_contact,
            vouchers: Default::default(),
            signals,
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

    pub async fn cluster_info(&self) -> ClusterInfo {
        let metrics = self.leadership.metrics_snapshot();
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
        let leader_id = match self.leadership.leader() {
            Leader::Local => Some(self.leadership.id),
            Leader::Remote { id, .. } => Some(id),
            Leader::Unknown => None,
        };
        ClusterInfo {
            node_id: self.leadership.id,
            leader_id,
            leader_address: self.leadership.leader_address(),
            term: metrics.current_term,
            voters,
            learners,
            last_log_index: metrics.last_log_index,
            committed_index: self.leadership.committed_index().await,
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
