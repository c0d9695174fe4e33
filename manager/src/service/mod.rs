//! The service layer: what the manager's HTTP handlers call, one place per kind of action, so no
//! handler calls another. A handler checks the request (its role and scope, its body, its path)
//! and shapes the reply; a service decides, commits and reads:
//! - [`executors::Executors`]: registration (batched or one entry, by cluster version), renewal
//!   (answered from the leader's memory or through the log, P6.5), release, deregistration, drains
//!   and the operator's removal (drain, then remove, P5.5);
//! - [`operator::Operator`]: the operator actions recorded in the audit log (P17.4);
//! - [`views::Views`]: reads of the applied state as the wire shows them.
//!
//! Each service holds only the handles it uses, cut from the node once when the router is built.
//! Services answer a refusal as the problem the protocol names for it (`refusals`), so every
//! handler answers the same refusal alike.

pub mod bootstrap;
pub mod executors;
pub mod members;
pub mod operator;
pub mod refusals;
pub mod safe_to_stop;
pub mod views;

use std::sync::Arc;

use crate::handles::clock::LeaderClock;
use crate::handles::proposer::{ProposeError, Proposer};
use crate::lease::{Command, CommandAnswer};
use crate::node::ManagerNode;

/// The services of one node, each cut from it with the handles it uses.
#[derive(Clone)]
pub struct Services {
    pub executors: executors::Executors,
    pub operator: operator::Operator,
    pub views: views::Views,
    pub members: members::Members,
}

impl Services {
    pub fn of(node: &ManagerNode) -> Self {
        let writer = Writer::new(
            node.leadership.proposer.clone(),
            node.leadership.clock.clone(),
        );
        let operator = operator::Operator::new(writer.clone(), node.state.clone());
        let views = views::Views::new(
            node.state.clone(),
            node.leadership.clone(),
            node.published_loads.clone(),
            node.memory_renewals.clone(),
            node.routing_runs.clone(),
        );
        let executors = executors::Executors {
            writer,
            operator: operator.clone(),
            views: views.clone(),
            leadership: node.leadership.clone(),
            state: node.state.clone(),
            registrations: node.registrations.clone(),
            renewals: node.renewals.clone(),
            memory_renewals: node.memory_renewals.clone(),
            load_reports: node.load_reports.clone(),
        };
        Self {
            executors,
            operator,
            views,
            members: members::Members::of(node),
        }
    }
}

/// What a write needs: the proposer and the leader clock that stamps its command (P2.3).
#[derive(Clone)]
pub struct Writer {
    proposer: Proposer,
    clock: Arc<LeaderClock>,
}

impl Writer {
    pub fn new(proposer: Proposer, clock: Arc<LeaderClock>) -> Self {
        Self { proposer, clock }
    }

    /// The stamp of a command proposed now.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The leader's term the clock is anchored for.
    pub fn term(&self) -> u64 {
        self.clock.term()
    }

    /// Commits `command` and answers its outcome typed as `T` (`Proposer::propose_as`).
    pub async fn propose_as<T: CommandAnswer>(
        &self,
        command: Command,
    ) -> Result<(u64, T::Answer), ProposeError> {
        self.proposer.propose_as::<T>(command).await
    }
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}
