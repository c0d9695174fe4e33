//! One manager replica: what `server` opened and started, held together, and what its tasks,
//! its service layer and its router are cut from (each takes only the handles it uses, from
//! `handles`).

use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_api::backup::BackupKey;
use leasehold_api::tls::TlsConfig;
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::Vote;

use crate::handles::clock::LeaderClock;
use crate::handles::disk_space::DiskSpace;
use crate::handles::leadership::Leadership;
use crate::handles::load_reports::{LoadReports, PublishedLoads};
use crate::handles::member_versions::MemberVersions;
use crate::handles::proposer::Proposer;
use crate::handles::registrations::RegistrationQueue;
use crate::handles::signals::LeaderSignals;
use crate::raft::failover::LeaderContact;
use crate::raft::identity::Identity;
use crate::raft::{LeaseStateHandle, ManagerRaft, NodeId, RaftTimings};
use crate::renewals::from_memory::MemoryRenewals;
use crate::renewals::RenewalQueue;

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
    pub settings: Arc<ClusterSettings>,
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
    pub routing_runs: Arc<crate::handles::routing::RoutingRunsCache>,
    /// Each member's release and newest schema, as the last probe round heard them (P14.3).
    pub member_versions: Arc<MemberVersions>,
    /// When this node last accepted a message from a leader ([`crate::raft::failover`]).
    pub leader_contact: Arc<LeaderContact>,
    /// Set while this node rejoins (`--rejoin`): until the cluster has removed its old membership
    /// it takes no Raft message but `/raft/identity` (`http::authorize`). A leader still
    /// replicating to the old member would otherwise bring the new, empty data directory up as
    /// that member (a snapshot naming it a voter), and it would then neither join nor vote
    /// rightly. Set before the listener serves, cleared once the removal is seen.
    rejoining: Arc<RejoinHold>,
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
            settings: Arc::new(parts.settings),
            metrics: parts.metrics,
            renewals: parts.renewals,
            memory_renewals: parts.memory_renewals,
            registrations: parts.registrations,
            load_reports: LoadReports::default(),
            published_loads: PublishedLoads::default(),
            routing_runs: Default::default(),
            member_versions: Arc::new(MemberVersions::default()),
            leader_contact,
            signals,
            rejoining: Arc::default(),
        }
    }

    /// Refuses Raft messages until the rejoin removed the old membership (`--rejoin`).
    pub fn hold_raft_while_rejoining(&self) {
        self.rejoining.hold();
    }

    pub fn release_raft_after_rejoin(&self) {
        self.rejoining.release();
    }

    /// The flag the authorization layer reads.
    pub fn rejoin_hold(&self) -> Arc<RejoinHold> {
        self.rejoining.clone()
    }
}

/// Whether this node rejoins (`--rejoin`) and still refuses every Raft message but
/// `/raft/identity`.
#[derive(Debug, Default)]
pub struct RejoinHold(std::sync::atomic::AtomicBool);

impl RejoinHold {
    fn hold(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    fn release(&self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }

    pub fn is_held(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}
