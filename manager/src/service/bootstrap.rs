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
//!   wait until it has caught up, then promote it to voter. Under TLS the request carries this
//!   manager's own certificate, which may add only itself (P13.3, `http::authorize`).
//! - **`--join URL --rejoin`** on a new data directory, for a member whose data directory was
//!   lost: check that the voters left would keep a quorum, ask the cluster to remove this node's
//!   old membership (its own certificate may remove only itself), wait until the members have
//!   seen the removal (and dropped the old storage pin), then join as above.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold_api::client::{Client, ClientConfig, ClientError};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{AddNodeRequest, ClusterInfo};
use openraft::error::{InitializeError, RaftError};
use openraft::BasicNode;
use tokio::sync::watch;

use crate::handles::leadership::Leadership;
use crate::node::ManagerNode;
use crate::raft::identity_probe::{identify, NotIdentified, PEER_PROBE_TIMEOUT};
use crate::raft::NodeId;
use crate::service::members::Members;

/// Pause between formation probes while peers come up.
const FORMATION_PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// A join waits for the learner to catch up, which may include a snapshot install.
const JOIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
const JOIN_PATIENCE: Duration = Duration::from_secs(60);
/// Bound on one question to one member while rejoining (who it is, what membership it sees).
const REJOIN_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on waiting for every member to see this node's old membership removed.
const REMOVAL_SEEN_PATIENCE: Duration = Duration::from_secs(30);
/// Pause between two looks at a member that does not see the removal yet.
const REMOVAL_SEEN_INTERVAL: Duration = Duration::from_millis(250);
/// After every member saw the removal: time for each to drop its pin of the old storage, which
/// it does when it next looks at the membership (every 100 ms, `observe::follow_raft`).
const PIN_DROP_MARGIN: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(
        "this node's data directory is new, but node {peer} knows node {node} with storage id \
         {pinned}: the old data was lost. Start it with --join URL --rejoin (or remove node \
         {node}, DELETE /v1/cluster/nodes/{node}, and start it again with --join)"
    )]
    KnownWithOtherStorage {
        node: NodeId,
        peer: NodeId,
        pinned: String,
    },
    #[error(
        "--rejoin is only for a lost data directory, and this one is not new: it already holds \
         node {node}'s storage. Start without --rejoin (if an earlier --rejoin was interrupted, \
         --join alone finishes it)"
    )]
    RejoinNotNew { node: NodeId },
    #[error("rejoining through {url}: {reason}")]
    Rejoin { url: String, reason: String },
    #[error("joining through {url}: {reason}")]
    Join {
        url: String,
        reason: String,
        /// The cluster's membership of this node is what it was before the join was asked:
        /// nothing outside this node knows its storage.
        membership_unchanged: bool,
    },
    #[error("raft: {0}")]
    Raft(String),
    #[error("stopped before the node became part of a cluster")]
    Stopped,
}

impl BootstrapError {
    /// Whether the cluster was left knowing nothing of this node's storage: a refusal before it
    /// became part of the cluster, after which a start on the same directory begins afresh. Its
    /// data directory, if this start created the storage, can then be left as it was found
    /// (`server::run`), so that the command the refusal names works on it. A rejoin that removed
    /// the old membership and then failed counts: the removal concerns the old storage only.
    pub fn cluster_knows_nothing_of_this_storage(&self) -> bool {
        match self {
            BootstrapError::KnownWithOtherStorage { .. }
            | BootstrapError::RejoinNotNew { .. }
            | BootstrapError::Rejoin { .. } => true,
            BootstrapError::Join {
                membership_unchanged,
                ..
            } => *membership_unchanged,
            BootstrapError::Raft(_) | BootstrapError::Stopped => false,
        }
    }
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
pub(crate) fn is_initialized(leadership: &Leadership) -> bool {
    leadership
        .metrics_snapshot()
        .membership_config
        .membership()
        .voter_ids()
        .next()
        .is_some()
}

/// What was heard from a voter before a manager's removal of itself (`--rejoin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoterAnswer {
    /// It answered as that node with the storage the cluster pinned for it (or none was pinned):
    /// it is up with its data.
    WithItsData,
    /// It answered as that node with another storage id: its data directory was replaced.
    WithOtherData,
    /// It did not answer in time, or another node answered.
    Silent,
}

/// Whether voter `removed` may remove itself to rejoin with a lost data directory: not while it
/// still answers with the data the cluster knows (its directory was not lost), and only if the
/// voters left can commit. Removing a voter goes through a joint configuration, which needs a
/// majority of the old voters and of the new ones; the removed node counts as down, so enough of
/// the others must answer with their data for the larger of the two majorities. Removing one of
/// three voters needs both others up, one of five three of the other four; the only voter is
/// never removed. Removing a learner changes no quorum.
pub fn self_removal_check(
    voters: &BTreeSet<NodeId>,
    removed: NodeId,
    answers: &BTreeMap<NodeId, VoterAnswer>,
) -> Result<(), String> {
    if !voters.contains(&removed) {
        return Ok(());
    }
    let answer = |id: &NodeId| answers.get(id).copied().unwrap_or(VoterAnswer::Silent);
    if answer(&removed) == VoterAnswer::WithItsData {
        return Err(format!(
            "node {removed} still answers at its address with the data directory the cluster \
             knows: its data was not lost, so it may not remove itself (--rejoin is for a lost \
             data directory; an admin can remove a member)"
        ));
    }
    let remaining: BTreeSet<NodeId> = voters.iter().copied().filter(|&id| id != removed).collect();
    if remaining.is_empty() {
        return Err(format!(
            "node {removed} is the only voter: it cannot be removed"
        ));
    }
    let up: BTreeSet<NodeId> = remaining
        .iter()
        .copied()
        .filter(|id| answer(id) == VoterAnswer::WithItsData)
        .collect();
    let needed = (voters.len() / 2 + 1).max(remaining.len() / 2 + 1);
    if up.len() < needed {
        return Err(format!(
            "removing node {removed} would leave voters {remaining:?}, of which only {up:?} \
             answer with their data: {needed} are needed to commit the change, so the cluster \
             would be left without a quorum. Bring the other voters back first"
        ));
    }
    Ok(())
}

/// One formation step; also what `POST /v1/cluster/init` runs.
pub async fn try_form(cluster: &Members) -> Result<Formation, BootstrapError> {
    if is_initialized(&cluster.leadership) {
        return Ok(Formation::AlreadyFormed);
    }
    let members = &cluster.settings.initial_cluster;
    if members.is_empty() {
        return Ok(Formation::Waiting("no --initial-cluster given".to_string()));
    }
    let peers = hear_founding_peers(cluster).await?;
    if peers.formed_elsewhere {
        return Ok(Formation::AlreadyFormed);
    }
    if !peers.silent.is_empty() {
        return Ok(Formation::Waiting(format!(
            "waiting for peers {:?} to answer",
            peers.silent
        )));
    }
    let initialiser = members
        .keys()
        .next()
        .copied()
        .unwrap_or(cluster.leadership.id);
    if initialiser != cluster.leadership.id {
        return Ok(Formation::Waiting(format!(
            "node {initialiser} initialises the cluster"
        )));
    }
    let nodes: BTreeMap<NodeId, BasicNode> = members
        .iter()
        .map(|(&id, address)| (id, BasicNode::new(address)))
        .collect();
    match cluster.leadership.raft.initialize(nodes).await {
        Ok(()) => {
            tracing::info!(members = ?members.keys().collect::<Vec<_>>(), "initialised the cluster");
            Ok(Formation::Formed)
        }
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(Formation::AlreadyFormed),
        Err(error) => Err(BootstrapError::Raft(error.to_string())),
    }
}

/// What the founding peers said when asked who they are.
struct FoundingPeers {
    /// Peers that did not answer as themselves.
    silent: Vec<NodeId>,
    /// Whether one of them is in a formed cluster already.
    formed_elsewhere: bool,
}

/// Asks every other founding member who it is. A peer that pinned another storage for this node
/// means this node's data directory was replaced: refused (`--rejoin` is the way back).
async fn hear_founding_peers(cluster: &Members) -> Result<FoundingPeers, BootstrapError> {
    let mut peers = FoundingPeers {
        silent: Vec::new(),
        formed_elsewhere: false,
    };
    for (&peer, address) in cluster
        .settings
        .initial_cluster
        .iter()
        .filter(|(&id, _)| id != cluster.leadership.id)
    {
        let report = match identify(&cluster.http, peer, address, PEER_PROBE_TIMEOUT).await {
            Ok(identified) => identified.report,
            Err(NotIdentified::Silent) => {
                peers.silent.push(peer);
                continue;
            }
            Err(NotIdentified::AnsweredAs(answered_as)) => {
                // The address reaches another manager: node `peer` has not answered.
                tracing::warn!(
                    peer,
                    address,
                    answered_as,
                    "the address of a peer answers as another node; check --initial-cluster"
                );
                peers.silent.push(peer);
                continue;
            }
        };
        if let Some(pinned) = report.pins.get(&cluster.leadership.id) {
            if pinned != cluster.identity.storage_id() {
                return Err(BootstrapError::KnownWithOtherStorage {
                    node: cluster.leadership.id,
                    peer,
                    pinned: pinned.clone(),
                });
            }
        }
        peers.formed_elsewhere |= report.initialized;
    }
    Ok(peers)
}

/// Runs until this node is part of a formed cluster (or will be replicated into one).
pub async fn form_or_await(
    node: &ManagerNode,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), BootstrapError> {
    // A node with any Raft log (even purged) is restarting: openraft recovers it.
    if node.leadership.metrics_snapshot().last_log_index.is_some() {
        return Ok(());
    }
    let mut last_reason = String::new();
    loop {
        match try_form(&Members::of(node)).await? {
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

/// A client of the cluster for joining: the leader first when known, so that the request that
/// waits for this node to catch up is not cut short by a follower's forwarding bound.
fn join_client(
    node: &ManagerNode,
    endpoints: Vec<String>,
    request_timeout: Duration,
) -> Result<Client, ClientError> {
    let config = ClientConfig {
        request_timeout,
        patience: JOIN_PATIENCE,
        ..ClientConfig::default()
    };
    Client::with_tls(endpoints, config, node.settings.tls.as_ref())
}

/// The endpoints to send a membership change to: the leader `info` names, then `url`.
fn leader_first(info: &ClusterInfo, url: &str) -> Vec<String> {
    let mut endpoints: Vec<String> = info.leader_address.iter().cloned().collect();
    if !endpoints
        .iter()
        .any(|e| e.trim_end_matches('/') == url.trim_end_matches('/'))
    {
        endpoints.push(url.to_string());
    }
    endpoints
}

/// Asks the cluster at `url` to add this node (learner, catch up, promote). Under TLS this
/// manager's own certificate asks, which may add only this node, at its advertised address
/// (P13.3); asking again when already a member at that address changes nothing.
pub async fn join(node: &ManagerNode, url: &str) -> Result<(), BootstrapError> {
    let already_voter = node
        .leadership
        .metrics_snapshot()
        .membership_config
        .membership()
        .voter_ids()
        .any(|id| id == node.leadership.id);
    if already_voter {
        return Ok(());
    }
    let join_error = |reason: String| BootstrapError::Join {
        url: url.to_string(),
        reason,
        membership_unchanged: true,
    };
    let asked = join_client(node, vec![url.to_string()], REJOIN_PROBE_TIMEOUT)
        .map_err(|e| join_error(e.to_string()))?;
    let info = asked
        .cluster_info()
        .await
        .map_err(|e| join_error(e.to_string()))?;
    let client = join_client(node, leader_first(&info, url), JOIN_REQUEST_TIMEOUT)
        .map_err(|e| join_error(e.to_string()))?;
    let request = AddNodeRequest {
        node_id: node.leadership.id,
        address: node.leadership.advertise.clone(),
    };
    tracing::info!(%url, leader = ?info.leader_address, "asking to join as a learner");
    if let Err(error) = client.add_node(&request).await {
        // Refused, or no answer: whether the cluster added this node (and so learned its
        // storage) is what the membership says now, asked of the leader first (a membership
        // change is in its configuration as soon as it is appended there). No answer: unknown.
        let before = membership_of(&info, node.leadership.id);
        let membership_unchanged =
            match join_client(node, leader_first(&info, url), REJOIN_PROBE_TIMEOUT) {
                Ok(ask) => ask
                    .cluster_info()
                    .await
                    .is_ok_and(|now| membership_of(&now, node.leadership.id) == before),
                Err(_) => false,
            };
        return Err(BootstrapError::Join {
            url: url.to_string(),
            reason: error.to_string(),
            membership_unchanged,
        });
    }
    tracing::info!(%url, "joined the cluster as a voter");
    Ok(())
}

/// Node `id`'s place in the membership `info` shows: voter or learner, at which address.
fn membership_of(info: &ClusterInfo, id: NodeId) -> Option<(bool, String)> {
    info.voters
        .iter()
        .map(|member| (member, true))
        .chain(info.learners.iter().map(|member| (member, false)))
        .find(|(member, _)| member.node_id == id)
        .map(|(member, voter)| (voter, member.address.clone()))
}

/// `--join URL --rejoin`: for a member whose data directory was lost. Refused unless the data
/// directory is new. Asks the cluster to remove this node's old membership (only while the
/// voters left keep a quorum), waits until every member has seen the removal, then joins
/// afresh as a learner, brought up by snapshot install. Logged at warn, never silent.
pub async fn rejoin(node: &ManagerNode, url: &str) -> Result<(), BootstrapError> {
    if !node.identity.is_fresh() || node.leadership.metrics_snapshot().last_log_index.is_some() {
        return Err(BootstrapError::RejoinNotNew {
            node: node.leadership.id,
        });
    }
    let rejoin_error = |reason: String| BootstrapError::Rejoin {
        url: url.to_string(),
        reason,
    };
    let asked = join_client(node, vec![url.to_string()], REJOIN_PROBE_TIMEOUT)
        .map_err(|e| rejoin_error(e.to_string()))?;
    let info = asked
        .cluster_info()
        .await
        .map_err(|e| rejoin_error(e.to_string()))?;
    let old = info
        .voters
        .iter()
        .chain(&info.learners)
        .find(|member| member.node_id == node.leadership.id);
    let Some(old) = old else {
        node.release_raft_after_rejoin();
        tracing::warn!(
            node_id = node.leadership.id,
            "--rejoin: node {} is not a member of the cluster; joining afresh as a learner",
            node.leadership.id
        );
        return join(node, url).await;
    };
    tracing::warn!(
        node_id = node.leadership.id,
        old_address = %old.address,
        address = %node.leadership.advertise,
        "--rejoin: this node's data directory was lost; asking the cluster to remove its old \
         membership, then joining afresh as a learner"
    );
    let voters: BTreeSet<NodeId> = info.voters.iter().map(|member| member.node_id).collect();
    if voters.contains(&node.leadership.id) {
        let answers = ask_voters(node, &info).await;
        self_removal_check(&voters, node.leadership.id, &answers).map_err(rejoin_error)?;
    }
    let client = join_client(node, leader_first(&info, url), JOIN_REQUEST_TIMEOUT)
        .map_err(|e| rejoin_error(e.to_string()))?;
    match client.remove_node(node.leadership.id).await {
        Ok(_) => {}
        // Removed already (an earlier attempt, or an admin).
        Err(error) if error.code() == Some(ErrorCode::NotFound) => {}
        Err(error) => {
            return Err(rejoin_error(format!(
                "removing node {}: {error}",
                node.leadership.id
            )))
        }
    }
    tracing::warn!(node_id = node.leadership.id, old_address = %old.address, "--rejoin: the old membership is removed");
    await_removal_seen(node, &info).await;
    node.release_raft_after_rejoin();
    join(node, url).await
}

/// Asks every voter of `info` who it is and which storage the others pinned for it
/// (`GET /raft/identity`; this node is still a member, so it may ask).
async fn ask_voters(node: &ManagerNode, info: &ClusterInfo) -> BTreeMap<NodeId, VoterAnswer> {
    let mut reports = BTreeMap::new();
    for voter in &info.voters {
        let report = identify(
            &node.http,
            voter.node_id,
            &voter.address,
            REJOIN_PROBE_TIMEOUT,
        )
        .await;
        reports.insert(
            voter.node_id,
            report.ok().map(|identified| identified.report),
        );
    }
    let answers: BTreeMap<NodeId, VoterAnswer> = reports
        .iter()
        .map(|(&voter, report)| {
            let answer = match report {
                None => VoterAnswer::Silent,
                Some(report) => {
                    let replaced = reports.values().flatten().any(|other| {
                        other
                            .pins
                            .get(&voter)
                            .is_some_and(|pinned| *pinned != report.storage_id)
                    });
                    if replaced {
                        VoterAnswer::WithOtherData
                    } else {
                        VoterAnswer::WithItsData
                    }
                }
            };
            (voter, answer)
        })
        .collect();
    tracing::info!(
        ?answers,
        "voters asked before removing this node's old membership"
    );
    answers
}

/// Waits (bounded) until every other member of `info` sees a membership without this node, then
/// a moment more, so each has dropped its pin of the old storage before the new one is added.
/// A member that does not answer is left to catch up later (logged).
async fn await_removal_seen(node: &ManagerNode, info: &ClusterInfo) {
    let Ok(client) = join_client(
        node,
        info.voters.iter().map(|m| m.address.clone()).collect(),
        REJOIN_PROBE_TIMEOUT,
    ) else {
        return;
    };
    let deadline = tokio::time::Instant::now() + REMOVAL_SEEN_PATIENCE;
    let others = info
        .voters
        .iter()
        .chain(&info.learners)
        .filter(|member| member.node_id != node.leadership.id);
    for member in others {
        loop {
            let seen = client
                .cluster_info_from(&member.address)
                .await
                .is_ok_and(|view| {
                    !view
                        .voters
                        .iter()
                        .chain(&view.learners)
                        .any(|m| m.node_id == node.leadership.id)
                });
            if seen {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    member = member.node_id,
                    "--rejoin: this member has not seen the removal yet; joining anyway"
                );
                break;
            }
            tokio::time::sleep(REMOVAL_SEEN_INTERVAL).await;
        }
    }
    tokio::time::sleep(PIN_DROP_MARGIN).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use VoterAnswer::{Silent, WithItsData, WithOtherData};

    fn answers(pairs: &[(NodeId, VoterAnswer)]) -> BTreeMap<NodeId, VoterAnswer> {
        pairs.iter().copied().collect()
    }

    /// `--rejoin`: a manager removes itself only with its data lost, and only while the voters
    /// left can commit (the joint configuration needs a majority of the old voters, the removed
    /// one counted as down, and of the new).
    #[test]
    fn p13_3_a_manager_removes_itself_only_when_lost_and_the_rest_keep_a_quorum() {
        let three = BTreeSet::from([1, 2, 3]);
        let five = BTreeSet::from([1, 2, 3, 4, 5]);
        /// What, the voters, the node removing itself, what was heard, whether it may.
        type Case<'a> = (
            &'a str,
            &'a BTreeSet<NodeId>,
            NodeId,
            BTreeMap<NodeId, VoterAnswer>,
            bool,
        );
        let cases: [Case; 10] = [
            (
                "one of three, lost, both others up",
                &three,
                3,
                answers(&[(1, WithItsData), (2, WithItsData), (3, WithOtherData)]),
                true,
            ),
            (
                "one of three, silent, both others up",
                &three,
                3,
                answers(&[(1, WithItsData), (2, WithItsData), (3, Silent)]),
                true,
            ),
            (
                "one of three, lost, another down: the last two could not commit",
                &three,
                3,
                answers(&[(1, WithItsData), (2, Silent), (3, WithOtherData)]),
                false,
            ),
            (
                "one of three, lost, another wiped too",
                &three,
                3,
                answers(&[(1, WithItsData), (2, WithOtherData), (3, WithOtherData)]),
                false,
            ),
            (
                "one of three still up with its data: not lost",
                &three,
                3,
                answers(&[(1, WithItsData), (2, WithItsData), (3, WithItsData)]),
                false,
            ),
            (
                "one of five, lost, three of the other four up",
                &five,
                5,
                answers(&[
                    (1, WithItsData),
                    (2, WithItsData),
                    (3, WithItsData),
                    (5, Silent),
                ]),
                true,
            ),
            (
                "one of five, lost, two of the other four up",
                &five,
                5,
                answers(&[(1, WithItsData), (2, WithItsData), (5, Silent)]),
                false,
            ),
            (
                "one of two, lost: the other alone is no majority of the two",
                &BTreeSet::from([1, 2]),
                2,
                answers(&[(1, WithItsData), (2, Silent)]),
                false,
            ),
            (
                "the only voter",
                &BTreeSet::from([1]),
                1,
                answers(&[(1, WithOtherData)]),
                false,
            ),
            (
                "a learner: no voter changes",
                &three,
                4,
                answers(&[(1, WithItsData)]),
                true,
            ),
        ];
        for (what, voters, removed, answers, allowed) in cases {
            assert_eq!(
                self_removal_check(voters, removed, &answers).is_ok(),
                allowed,
                "{what}: {:?}",
                self_removal_check(voters, removed, &answers)
            );
        }
    }
}
