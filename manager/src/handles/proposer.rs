//! The one way a command is committed: through Raft, refused while this node hands leadership
//! over (P8.2) or while its clock is not yet anchored for the term it leads (P6.4: a stamp read
//! before the term's anchor could lie below the deadlines the state holds), and told to the
//! leader's signals once applied, so the leader loop and the commit metrics see every outcome
//! exactly once. While the free-space alarm is raised it refuses the commands that grow the
//! state (P8.3).
//!
//! A narrow handle: the renewal batcher, the leader loop, the delivery task and the handlers
//! each hold a clone and nothing else of the node to write with.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};

use crate::handles::clock::{LeaderClock, StaleStamp};
use crate::handles::disk_space::{DiskSpace, LowDisk};
use crate::handles::signals::LeaderSignals;
use crate::lease::schema::{check_proposable, NotYetEnabled};
use crate::lease::{answer, Command, CommandAnswer, Mismatch, Outcome};
use crate::raft::{LeaseStateHandle, ManagerRaft};

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error("not the leader")]
    NotLeader { leader_address: Option<String> },
    #[error("this node is stepping down")]
    SteppingDown,
    /// The command's stamp is not of the term this node leads (P6.4): retried, it is stamped
    /// anew once the term's clock is anchored.
    #[error(transparent)]
    StaleStamp(#[from] StaleStamp),
    #[error("raft: {0}")]
    Raft(String),
    /// This replica's Raft core stopped (P8.3); the process is ending.
    #[error("this replica's Raft core stopped: {0}")]
    RaftStopped(String),
    /// The free-space alarm is raised and the command grows the state (P8.3).
    #[error(transparent)]
    InsufficientStorage(#[from] LowDisk),
    /// The state machine answered a command with an outcome it cannot produce: a bug.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    /// The command needs a newer schema than the cluster version (P14.3): some voter could not
    /// apply it yet.
    #[error(transparent)]
    NotYetEnabled(#[from] NotYetEnabled),
}

#[derive(Clone)]
pub struct Proposer {
    raft: ManagerRaft,
    signals: Arc<LeaderSignals>,
    /// Read for the cluster version a command must not be newer than.
    state: LeaseStateHandle,
    /// Every stamp is checked against the term this clock is anchored for (P6.4).
    clock: Arc<LeaderClock>,
    /// The free-space alarm (P8.3).
    disk_space: DiskSpace,
    /// Set on SIGTERM: this node no longer takes writes as leader while it hands over (P8.2).
    stepping_down: Arc<AtomicBool>,
}

impl std::fmt::Debug for Proposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposer")
            .field("stepping_down", &self.is_stepping_down())
            .finish_non_exhaustive()
    }
}

impl Proposer {
    pub fn new(
        raft: ManagerRaft,
        signals: Arc<LeaderSignals>,
        state: LeaseStateHandle,
        clock: Arc<LeaderClock>,
        disk_space: DiskSpace,
    ) -> Self {
        Self {
            raft,
            signals,
            state,
            clock,
            disk_space,
            stepping_down: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn is_stepping_down(&self) -> bool {
        self.stepping_down.load(Ordering::Acquire)
    }

    pub fn begin_step_down(&self) {
        self.stepping_down.store(true, Ordering::Release);
    }

    /// The free-space alarm this proposer obeys.
    pub fn disk_space(&self) -> &DiskSpace {
        &self.disk_space
    }

    /// Commits `command` and returns the log index it was applied at with its outcome. Nothing is
    /// acknowledged before it is committed.
    pub async fn propose(&self, command: Command) -> Result<(u64, Outcome), ProposeError> {
        if self.is_stepping_down() {
            return Err(ProposeError::SteppingDown);
        }
        if command.grows_state() {
            self.disk_space.check_growth()?;
        }
        let cluster_version = self.state.read(|applied| applied.state.cluster_version());
        check_proposable(&command, cluster_version)?;
        let now_ms = command.now_ms();
        // The term read after the stamp: were this node to lead a newer term by the time the
        // entry is appended, the stamp was still read before that term took office.
        let term = self.raft.metrics().borrow().current_term;
        self.clock.check_stamp(term, now_ms)?;
        match self.raft.client_write(command).await {
            Ok(response) => {
                self.signals.after_commit(now_ms, &response.data);
                Ok((response.log_id.index, response.data))
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Err(ProposeError::NotLeader {
                    leader_address: forward.leader_node.map(|node| node.addr),
                })
            }
            Err(RaftError::Fatal(fatal)) => Err(ProposeError::RaftStopped(fatal.to_string())),
            Err(other) => Err(ProposeError::Raft(other.to_string())),
        }
    }

    /// [`Proposer::propose`], with the outcome typed for the command: `T` is the answer type of
    /// `command`'s kind (e.g. [`crate::lease::answer::Registered`] for `Register`).
    pub async fn propose_as<T: CommandAnswer>(
        &self,
        command: Command,
    ) -> Result<(u64, T::Answer), ProposeError> {
        let (index, outcome) = self.propose(command).await?;
        Ok((index, answer::<T>(outcome)?))
    }
}
