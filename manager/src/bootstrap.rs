//! How a replica becomes part of a cluster (PROTOCOL §10).
//!
//! - **Restart** on an existing data directory: nothing to do; openraft recovers vote, log,
//!   committed id and snapshot.
//! - **First start** with `--initial-cluster` on a fresh data directory: once every listed peer
//!   answers and none has formed a cluster yet, the node with the lowest id initialises Raft with
//!   the full membership; the others wait to be replicated to. Exactly one initialisation, and
//!   starting all nodes at the same moment is safe. If a peer has pinned this node's id (it knew
//!   this node with other storage), the data directory was wiped: refuse to start rather than take
//!   part as the old member (see `raft::identity`).
//! - **`--join URL`** on a fresh data directory: ask the cluster to add this node as a learner,
//!   wait until it has caught up, then promote it to voter.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_api::client::{Client, ClientConfig};
use leasehold_api::wire::AddNodeRequest;
use openraft::error::{InitializeError, RaftError};
use openraft::BasicNode;
use tokio::sync::watch;

use crate::node::ManagerNode;
use crate::raft::identity::IdentityReport;
use crate::raft::NodeId;

/// Pause between formation probes while peers come up.
const FORMATION_PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// Bound on one peer probe; a peer that does not answer in time counts as not yet up.
const PEER_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// A join waits for the learner to catch up, which may include a snapshot install.
const JOIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
const JOIN_PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(
        "this node's data directory is new, but node {peer} knows node {node} with storage id \
         {pinned}: the old data was lost. Remove node {node} (DELETE /v1/cluster/nodes/{node}) \
         and start it again with --join"
    )]
    KnownWithOtherStorage {
        node: NodeId,
        peer: NodeId,
        pinned: String,
    },
    #[error("joining through {url}: {reason}")]
    Join { url: String, reason: String },
    #[error("raft: {0}")]
    Raft(String),
    #[error("stopped before the node became part of a cluster")]
    Stopped,
}

/// What a formation attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Formation {
    /// This node initialised the cluster just now.
    Formed,
    /// The cluster exists (here or at a peer); nothing to do.
    AlreadyFormed,
    /// Not every peer answered yet, or this node is not the one to initialise.
    Waiting(String),
}

/// Whether this node's Raft state holds a membership (the cluster was formed).
pub(crate) fn is_initialized(node: &ManagerNode) -> bool {
    node.metrics_snapshot()
        .membership_config
        .membership()
        .voter_ids()
        .next()
        .is_some()
}

/// Asks the node at `address` who it is (`GET /raft/identity`); None if it does not answer in time.
pub(crate) async fn probe_peer(node: &ManagerNode, address: &str) -> Option<IdentityReport> {
    probe_peer_within(node, address, PEER_PROBE_TIMEOUT).await
}

/// [`probe_peer`] with its own bound (the dead-leader check cannot wait a second per peer).
pub(crate) async fn probe_peer_within(
    node: &ManagerNode,
    address: &str,
    timeout: Duration,
) -> Option<IdentityReport> {
    let url = format!("{}/raft/identity", address.trim_end_matches('/'));
    let reply = node.http.get(url).timeout(timeout).send().await.ok()?;
    reply.error_for_status().ok()?.json().await.ok()
}

/// One formation step; also what `POST /v1/cluster/init` runs.
pub async fn try_form(node: &ManagerNode) -> Result<Formation, BootstrapError> {
    if is_initialized(node) {
        return Ok(Formation::AlreadyFormed);
    }
    let members = &node.settings.initial_cluster;
    if members.is_empty() {
        return Ok(Formation::Waiting("no --initial-cluster given".to_string()));
    }
    let mut silent = Vec::new();
    let mut formed_elsewhere = false;
    for (&peer, address) in members.iter().filter(|(&id, _)| id != node.id) {
        let Some(report) = probe_peer(node, address).await else {
            silent.push(peer);
            continue;
        };
        if report.node_id != peer {
            // The address reaches another manager: node `peer` has not answered.
            tracing::warn!(
                peer,
                address,
                answered_as = report.node_id,
                "the address of a peer answers as another node; check --initial-cluster"
            );
            silent.push(peer);
            continue;
        }
        if let Some(pinned) = report.pins.get(&node.id) {
            if pinned != node.identity.storage_id() {
                return Err(BootstrapError::KnownWithOtherStorage {
                    node: node.id,
                    peer,
                    pinned: pinned.clone(),
                });
            }
        }
        formed_elsewhere |= report.initialized;
    }
    if formed_elsewhere {
        return Ok(Formation::AlreadyFormed);
    }
    if !silent.is_empty() {
        return Ok(Formation::Waiting(format!(
            "waiting for peers {silent:?} to answer"
        )));
    }
    let initialiser = members.keys().next().copied().unwrap_or(node.id);
    if initialiser != node.id {
        return Ok(Formation::Waiting(format!(
            "node {initialiser} initialises the cluster"
        )));
    }
    let nodes: BTreeMap<NodeId, BasicNode> = members
        .iter()
        .map(|(&id, address)| (id, BasicNode::new(address)))
        .collect();
    match node.raft.initialize(nodes).await {
        Ok(()) => {
            tracing::info!(members = ?members.keys().collect::<Vec<_>>(), "initialised the cluster");
            Ok(Formation::Formed)
        }
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(Formation::AlreadyFormed),
        Err(error) => Err(BootstrapError::Raft(error.to_string())),
    }
}

/// Runs until this node is part of a formed cluster (or will be replicated into one).
pub async fn form_or_await(
    node: &ManagerNode,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), BootstrapError> {
    // A node with any Raft log (even purged) is restarting: openraft recovers it.
    if node.metrics_snapshot().last_log_index.is_some() {
        return Ok(());
    }
    let mut last_reason = String::new();
    loop {
        match try_form(node).await? {
            Formation::Formed | Formation::AlreadyFormed => return Ok(()),
            Formation::Waiting(reason) => {
                if reason != last_reason {
                    tracing::info!(%reason, "cluster not formed yet");
                    last_reason = reason;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(FORMATION_PROBE_INTERVAL) => {}
            _ = shutdown.changed() => return Err(BootstrapError::Stopped),
        }
    }
}

/// Asks the cluster at `url` to add this node (learner, catch up, promote).
pub async fn join(node: &ManagerNode, url: &str) -> Result<(), BootstrapError> {
    let already_voter = node
        .metrics_snapshot()
        .membership_config
        .membership()
        .voter_ids()
        .any(|id| id == node.id);
    if already_voter {
        return Ok(());
    }
    let config = ClientConfig {
        request_timeout: JOIN_REQUEST_TIMEOUT,
        patience: JOIN_PATIENCE,
        ..ClientConfig::default()
    };
    let join_error = |reason: String| BootstrapError::Join {
        url: url.to_string(),
        reason,
    };
    let client = Client::with_tls(vec![url.to_string()], config, node.settings.tls.as_ref())
        .map_err(|e| join_error(e.to_string()))?;
    let request = AddNodeRequest {
        node_id: node.id,
        address: node.advertise.clone(),
    };
    client
        .add_node(&request)
        .await
        .map_err(|e| join_error(e.to_string()))?;
    tracing::info!(%url, "joined the cluster as a voter");
    Ok(())
}
