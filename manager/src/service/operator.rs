//! Operator actions (PROTOCOL P17.4): each is one `Command::Operator` naming who asked, recorded
//! in the audit log in the same entry once it changed something. Maintenance, moves, pins,
//! namespaces, drains, removals and membership changes are all proposed here. They need cluster
//! version 12 (below it the proposal gate answers `409`); drains and removals below it go as
//! the plain commands of 0.1.0, unrecorded ([`Operator::recorded`]).

use leasehold_api::http::HttpError;
use leasehold_api::wire::{MAX_AUDIT_RECORDS, OPERATOR_CONTROLS_SCHEMA};

use super::Writer;
use crate::handles::proposer::ProposeError;
use crate::lease::answer::OperatorDone;
use crate::lease::{Command, ExecutorAnswer, MembershipChange, OperatorAction};
use crate::raft::LeaseStateHandle;

/// Who asked, as the audit log records it (P17.4): `<role> <subject>` under TLS
/// (`admin CN=alice`), [`Actor::ANONYMOUS`] on a plaintext listener, where nobody is proved.
/// The authorization layer attaches one to every request it passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor(pub String);

impl Actor {
    pub const ANONYMOUS: &'static str = leasehold_api::wire::ANONYMOUS_ACTOR;
}

/// What the audit log's actor of a removal's first step ends with: the drain it records is the
/// removal's (P5.5), and the audit view names it `remove_drain` (P17.4).
pub const REMOVAL_MARK: &str = " (removal: drained first, P5.5)";

/// Proposes operator actions: the writer and the applied state (the cluster version decides
/// whether an action is recorded, the audit log whether recording one dropped another).
#[derive(Clone)]
pub struct Operator {
    writer: Writer,
    state: LeaseStateHandle,
}

impl Operator {
    pub fn new(writer: Writer, state: LeaseStateHandle) -> Self {
        Self { writer, state }
    }

    /// Proposes `action` as `actor`'s and answers what it did.
    pub async fn propose(
        &self,
        actor: &Actor,
        action: OperatorAction,
    ) -> Result<ExecutorAnswer<OperatorDone>, ProposeError> {
        let command = Command::Operator {
            now_ms: self.writer.now_ms(),
            actor: actor.0.clone(),
            action,
        };
        let (index, answer) = self.writer.propose_as::<OperatorDone>(command).await?;
        self.say_when_a_record_was_dropped(index);
        Ok(answer)
    }

    /// Proposes `action` as `actor`'s and answers with the part of it `pick` takes: what the
    /// earlier command for the same action (`SetDraining`, `Deregister`) answers. An outcome
    /// `pick` does not take is the state machine's mistake.
    pub async fn propose_expecting<T>(
        &self,
        actor: &Actor,
        action: OperatorAction,
        pick: impl FnOnce(OperatorDone) -> Result<T, OperatorDone>,
    ) -> Result<ExecutorAnswer<T>, HttpError> {
        Ok(match self.propose(actor, action).await? {
            ExecutorAnswer::Done(done) => {
                ExecutorAnswer::Done(pick(done).map_err(|other| mismatch(&other))?)
            }
            ExecutorAnswer::UnknownExecutor => ExecutorAnswer::UnknownExecutor,
            ExecutorAnswer::Refused(reason) => ExecutorAnswer::Refused(reason),
        })
    }

    /// Whether the operator commands can be proposed: the committed cluster version takes them.
    /// Below it, drains and removals go as the commands of 0.1.0, unrecorded.
    pub fn recorded(&self) -> bool {
        self.state.current().cluster_version() >= OPERATOR_CONTROLS_SCHEMA
    }

    /// Records a membership change that committed. The change is Raft's own entry, so its record
    /// follows it; a leader lost in between loses the record, not the change, and says so in its
    /// log.
    pub async fn record_membership(&self, actor: &Actor, change: MembershipChange) {
        if !self.recorded() {
            return;
        }
        let action = OperatorAction::Membership {
            change: change.clone(),
        };
        if let Err(error) = self.propose(actor, action).await {
            tracing::warn!(?change, %error, "the membership change committed; its audit record did not");
        }
    }

    /// The audit log keeps at most `MAX_AUDIT_RECORDS`: when the record of the entry at `index`
    /// is there and the log is full, making room for it dropped one (P17.4), which is counted and
    /// said.
    fn say_when_a_record_was_dropped(&self, index: u64) {
        let (full, recorded) = self.state.read(|applied| {
            let state = &applied.state;
            (
                state.audit().count() == MAX_AUDIT_RECORDS,
                state
                    .audit()
                    .last()
                    .is_some_and(|last| last.revision == index),
            )
        });
        if full && recorded {
            metrics::counter!("leasehold_audit_records_dropped_total").increment(1);
            tracing::warn!(
                revision = index,
                max_records = MAX_AUDIT_RECORDS,
                "the audit log is full: recording this action dropped its oldest record not of \
                 an operator of the whole cluster (or the oldest, when every record is theirs; \
                 P17.4)"
            );
        }
    }
}

/// An outcome the state machine should not have answered this action with.
pub fn mismatch(done: &OperatorDone) -> HttpError {
    HttpError::internal("unexpected state machine outcome", format!("{done:?}"))
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").finish_non_exhaustive()
    }
}
