//! Who leads, as this node sees it, and the barrier a leader reads behind: the Raft handle, the
//! proposer (which knows when this node steps down) and the leader clock, with the two facts
//! from start-up the read barrier needs. Cheap to clone: the tasks that act on leadership (the
//! leader loop, the configuration writes, the version probe) each hold one, not the whole node.

use openraft::{BasicNode, RaftMetrics, ServerState, Vote};
use std::sync::Arc;
use std::time::Duration;

use crate::handles::clock::LeaderClock;
use crate::handles::proposer::Proposer;
use crate::raft::failover::LeaderContact;
use crate::raft::{ManagerRaft, NodeId};

/// Who serves writes right now, as far as this node knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leader {
    Local,
    Remote { id: NodeId, address: String },
    Unknown,
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
const RESTARTED_LOG_APPLY_WAIT: Duration = Duration::from_secs(5);

/// This node's view of leadership. Nearly every request handle holds one and a request clones
/// several, so a clone is one reference count.
#[derive(Clone, Debug)]
pub struct Leadership(Arc<LeadershipParts>);

/// What [`Leadership`] shares.
pub struct LeadershipParts {
    pub id: NodeId,
    /// The URL others use to reach this node (P8.1 `--advertise`).
    pub advertise: String,
    pub raft: ManagerRaft,
    /// Commits commands; the handle the writing tasks share.
    pub proposer: Proposer,
    /// The leader's clock (P2.3), shared with the tasks that stamp commands.
    pub clock: Arc<LeaderClock>,
    /// This node's last log index when it started. openraft 0.9 puts a node whose persisted vote
    /// is committed for itself straight back into office in the same term, without a blank entry
    /// of its own, and takes its committed index (not flushed on every commit, so it can be older
    /// than before a crash) as the read-index floor. Entries up to here may have been committed
    /// and acknowledged before the restart, so linearizable reads also wait for them
    /// ([`Self::linearizable_read`]).
    last_log_index_at_start: u64,
    /// The vote this node restored when it started: only a leader still holding it can be the
    /// restored-in-office leader above (a leader elected later commits a blank entry of its own
    /// term, which covers everything committed before).
    vote_at_start: Vote<NodeId>,
    /// When this node last heard from a leader (a follower's side of [`Self::leader`]).
    contact: Arc<LeaderContact>,
    /// openraft's leader lease (`election_timeout_max`): how long a leader goes on serving
    /// without a quorum's acknowledgement, and a follower goes on naming a silent leader (P8.4).
    raft_lease: Duration,
}

/// Who is heard from, for [`Leadership::leader`]: the facts it decides on, read from openraft's
/// metrics and this node's [`LeaderContact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hearing {
    pub state: ServerState,
    /// The leader openraft names (its vote is committed for it), if any.
    pub named_leader: Option<NodeId>,
    pub voters: usize,
    /// On a leader: time since a quorum last acknowledged one of its heartbeats, as openraft
    /// last reported it (`None` before the first acknowledgement of the term).
    pub since_quorum_ack: Option<Duration>,
    /// On a follower: time since it last accepted a message of a leader.
    pub since_leader_heard: Duration,
}

/// P8.4, who this node says leads. A leader that no quorum has acknowledged for a whole lease
/// serves nothing and names nobody (etcd's CheckQuorum): a majority it cannot reach may have
/// elected another already, and every caller it held would wait for commits that cannot come.
/// A follower that has not heard from its leader for a whole lease names nobody and forwards
/// nothing: openraft lets it vote for another leader from then on, and a forward to a silent
/// leader only holds the caller. Alone in the configuration, a leader is its own quorum.
pub(crate) fn leader_heard(me: NodeId, hearing: Hearing, raft_lease: Duration) -> Option<NodeId> {
    let leader = hearing.named_leader?;
    if leader == me {
        let quorum_silent = hearing.voters > 1
            && hearing
                .since_quorum_ack
                .is_some_and(|since| since > raft_lease);
        (hearing.state == ServerState::Leader && !quorum_silent).then_some(me)
    } else {
        (hearing.since_leader_heard <= raft_lease).then_some(leader)
    }
}

impl std::ops::Deref for Leadership {
    type Target = LeadershipParts;

    fn deref(&self) -> &LeadershipParts {
        &self.0
    }
}

impl std::fmt::Debug for LeadershipParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("id", &self.id)
            .field("advertise", &self.advertise)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    pub fn new(
        id: NodeId,
        advertise: String,
        raft: ManagerRaft,
        proposer: Proposer,
        clock: Arc<LeaderClock>,
        (last_log_index_at_start, vote_at_start): (u64, Vote<NodeId>),
        (contact, raft_lease): (Arc<LeaderContact>, Duration),
    ) -> Self {
        Self(Arc::new(LeadershipParts {
            id,
            advertise,
            raft,
            proposer,
            clock,
            last_log_index_at_start,
            vote_at_start,
            contact,
            raft_lease,
        }))
    }

    /// The barrier in front of a linearizable read on the leader: openraft's read index (the
    /// leader's commit, confirmed by a quorum), then everything this node had logged when it
    /// started, which a leader restored in office may not count as committed yet (see
    /// `last_log_index_at_start`). `manager/tests/leadership.rs` fails without the floor (a
    /// restored leader whose stored committed id lost its term's entries served revision 0).
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

    /// Who leads as this node can vouch for it (P8.4, [`leader_heard`]).
    pub fn leader(&self) -> Leader {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        let hearing = Hearing {
            state: metrics.state,
            named_leader: metrics.current_leader,
            voters: membership.voter_ids().count(),
            since_quorum_ack: metrics.millis_since_quorum_ack.map(Duration::from_millis),
            since_leader_heard: self.contact.since(tokio::time::Instant::now()),
        };
        match leader_heard(self.id, hearing, self.raft_lease) {
            Some(id) if id == self.id => {
                if self.is_stepping_down() {
                    Leader::Unknown
                } else {
                    Leader::Local
                }
            }
            Some(id) => match membership.get_node(&id) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(1_000);

    fn hearing(state: ServerState, named_leader: Option<NodeId>) -> Hearing {
        Hearing {
            state,
            named_leader,
            voters: 3,
            since_quorum_ack: Some(Duration::from_millis(100)),
            since_leader_heard: Duration::from_millis(100),
        }
    }

    /// P8.4: a leader no quorum acknowledged for a whole lease names nobody, itself included;
    /// one acknowledged within the lease, one not acknowledged yet in its term, and one alone in
    /// the configuration go on leading.
    #[test]
    fn p8_4_a_leader_without_a_quorum_for_a_lease_leads_nothing() {
        let leading = hearing(ServerState::Leader, Some(1));
        assert_eq!(leader_heard(1, leading, LEASE), Some(1));
        let at_the_lease = Hearing {
            since_quorum_ack: Some(LEASE),
            ..leading
        };
        assert_eq!(leader_heard(1, at_the_lease, LEASE), Some(1));
        let cut_off = Hearing {
            since_quorum_ack: Some(LEASE + Duration::from_millis(1)),
            ..leading
        };
        assert_eq!(leader_heard(1, cut_off, LEASE), None);
        let alone = Hearing {
            voters: 1,
            ..cut_off
        };
        assert_eq!(leader_heard(1, alone, LEASE), Some(1));
        let new_term = Hearing {
            since_quorum_ack: None,
            ..leading
        };
        assert_eq!(leader_heard(1, new_term, LEASE), Some(1));
        let standing = hearing(ServerState::Candidate, Some(1));
        assert_eq!(leader_heard(1, standing, LEASE), None);
    }

    /// P8.4: a follower names (and forwards to) its leader only while it heard from it within
    /// the lease; a silent leader is nobody's.
    #[test]
    fn p8_4_a_follower_names_a_leader_only_while_it_hears_it() {
        let following = hearing(ServerState::Follower, Some(2));
        assert_eq!(leader_heard(1, following, LEASE), Some(2));
        let silent = Hearing {
            since_leader_heard: LEASE + Duration::from_millis(1),
            ..following
        };
        assert_eq!(leader_heard(1, silent, LEASE), None);
        assert_eq!(
            leader_heard(1, hearing(ServerState::Follower, None), LEASE),
            None
        );
    }
}
