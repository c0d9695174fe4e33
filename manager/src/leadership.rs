//! Who leads, as this node sees it, and the barrier a leader reads behind: the Raft handle, the
//! proposer (which knows when this node steps down) and the leader clock, with the two facts
//! from start-up the read barrier needs. Cheap to clone: the tasks that act on leadership (the
//! leader loop, the configuration writes, the version probe) each hold one, not the whole node.

use openraft::{BasicNode, RaftMetrics, ServerState, Vote};
use std::sync::Arc;

use crate::clock::LeaderClock;
use crate::proposer::Proposer;
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
const RESTARTED_LOG_APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// This node's view of leadership.
#[derive(Clone)]
pub struct Leadership {
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
}

impl std::fmt::Debug for Leadership {
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
    ) -> Self {
        Self {
            id,
            advertise,
            raft,
            proposer,
            clock,
            last_log_index_at_start,
            vote_at_start,
        }
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
}
