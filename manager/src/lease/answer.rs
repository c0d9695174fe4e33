//! Each command's outcome, typed for the command that produced it.
//!
//! [`Outcome`] is one enum because it is the Raft response of every entry (and part of the
//! replicated schema). A caller of one command needs only what that command can answer: what it
//! did, a refusal, and for commands that name an executor, that the executor is unknown. The
//! types here give it exactly that; an outcome its command cannot produce is a programming error
//! reported once, by [`answer`], instead of an "unexpected" arm at every caller.

use super::outcome::{Effects, Outcome, RefusalReason, RegisterResult, RenewResult};
use super::{ExecutorId, Grant, ShardId};

/// What a command that names no executor answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    Done(T),
    Refused(RefusalReason),
}

/// What a command that names an executor answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorAnswer<T> {
    Done(T),
    /// The executor never existed, or its tombstone was pruned (P7.2).
    UnknownExecutor,
    Refused(RefusalReason),
}

/// An outcome the command cannot produce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {command} command answered {outcome}")]
pub struct Mismatch {
    pub command: &'static str,
    /// The outcome, as `Debug` prints it.
    pub outcome: String,
}

/// A command's typed answer: [`Answer`] or [`ExecutorAnswer`] of one of the types below.
pub trait CommandAnswer: Sized {
    /// The answer the caller matches on.
    type Answer;
    /// The command's name, for [`Mismatch`].
    const COMMAND: &'static str;
    /// The answer for `outcome`; the outcome back when the command cannot produce it.
    fn answer(outcome: Outcome) -> Result<Self::Answer, Outcome>;
}

/// The typed answer of `T`'s command for `outcome`.
pub fn answer<T: CommandAnswer>(outcome: Outcome) -> Result<T::Answer, Mismatch> {
    T::answer(outcome).map_err(|outcome| Mismatch {
        command: T::COMMAND,
        outcome: format!("{outcome:?}"),
    })
}

/// `Register`: the register reply (§9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub grant: Grant,
    /// The incarnation was already registered and nothing changed (P4.4).
    pub already_registered: bool,
}

/// `RegisterMany`: `results[i]` answers the batch's `registrations[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredMany {
    pub results: Vec<RegisterResult>,
}

/// `ReserveLeases` (P6.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasesReserved {
    pub reserved_until_ms: u64,
    pub reserved: Vec<ExecutorId>,
    pub skipped: Vec<ExecutorId>,
}

/// `Renew`: `results[i]` answers the batch's `renewals[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewed {
    pub results: Vec<RenewResult>,
    pub effects: Effects,
}

/// `Deregister`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deregistered {
    /// The executor had already gone (a retry, P7.2); nothing changed.
    pub already_gone: bool,
    pub effects: Effects,
}

/// `Release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub completed: Vec<ShardId>,
    pub ignored: Vec<ShardId>,
    pub effects: Effects,
}

/// `SetDraining`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainingSet {
    pub executor_id: ExecutorId,
    pub draining: bool,
    pub changed: bool,
}

/// `Reap`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub reaped: Vec<ExecutorId>,
    pub skipped: Vec<ExecutorId>,
    pub effects: Effects,
}

/// `Rebalance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebalanced {
    pub granted: Vec<ShardId>,
    pub releasing: Vec<ShardId>,
    pub cancelled: Vec<ShardId>,
    pub effects: Effects,
}

/// `PlaceSecondaries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondariesPlaced {
    pub changed: Vec<ShardId>,
    pub effects: Effects,
}

/// `Reshard` (P20.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resharded {
    pub name: String,
    pub kind: leasehold_api::wire::ReshardKind,
    pub shard_count: u32,
    pub generation: u64,
    pub effects: Effects,
}

/// `CompleteHandoffs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffsCompleted {
    pub completed: Vec<ShardId>,
    pub effects: Effects,
}

impl CommandAnswer for Registered {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "Register";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::Registered {
                grant,
                already_registered,
            } => Ok(Answer::Done(Self {
                grant,
                already_registered,
            })),
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for RegisteredMany {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "RegisterMany";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::RegisteredMany { results } => Ok(Answer::Done(Self { results })),
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for LeasesReserved {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "ReserveLeases";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::LeasesReserved {
                reserved_until_ms,
                reserved,
                skipped,
            } => Ok(Answer::Done(Self {
                reserved_until_ms,
                reserved,
                skipped,
            })),
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for Renewed {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "Renew";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::Renewed { results, effects } => Ok(Answer::Done(Self { results, effects })),
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for Deregistered {
    type Answer = ExecutorAnswer<Self>;
    const COMMAND: &'static str = "Deregister";
    fn answer(outcome: Outcome) -> Result<ExecutorAnswer<Self>, Outcome> {
        match outcome {
            Outcome::Deregistered {
                already_gone,
                effects,
                ..
            } => Ok(ExecutorAnswer::Done(Self {
                already_gone,
                effects,
            })),
            Outcome::NotFound => Ok(ExecutorAnswer::UnknownExecutor),
            Outcome::Refused { reason } => Ok(ExecutorAnswer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for Released {
    type Answer = ExecutorAnswer<Self>;
    const COMMAND: &'static str = "Release";
    fn answer(outcome: Outcome) -> Result<ExecutorAnswer<Self>, Outcome> {
        match outcome {
            Outcome::Released {
                completed,
                ignored,
                effects,
            } => Ok(ExecutorAnswer::Done(Self {
                completed,
                ignored,
                effects,
            })),
            Outcome::NotFound => Ok(ExecutorAnswer::UnknownExecutor),
            Outcome::Refused { reason } => Ok(ExecutorAnswer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for DrainingSet {
    type Answer = ExecutorAnswer<Self>;
    const COMMAND: &'static str = "SetDraining";
    fn answer(outcome: Outcome) -> Result<ExecutorAnswer<Self>, Outcome> {
        match outcome {
            Outcome::DrainingSet {
                executor_id,
                draining,
                changed,
            } => Ok(ExecutorAnswer::Done(Self {
                executor_id,
                draining,
                changed,
            })),
            Outcome::NotFound => Ok(ExecutorAnswer::UnknownExecutor),
            Outcome::Refused { reason } => Ok(ExecutorAnswer::Refused(reason)),
            other => Err(other),
        }
    }
}

/// `Operator` (P17.4): what its action did. An unknown executor or shard is
/// [`ExecutorAnswer::UnknownExecutor`]; the caller knows which it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorDone {
    Draining(DrainingSet),
    Removed(Deregistered),
    Maintenance {
        on: bool,
        changed: bool,
    },
    Moved(Rebalanced),
    Pinned {
        shard: ShardId,
        executor_id: Option<ExecutorId>,
        changed: bool,
    },
    Recorded,
    /// A namespace created (P18.1); `already_exists` for a repeat with the same settings.
    NamespaceCreated {
        already_exists: bool,
    },
    /// A namespace's settings set; `changed` false for a repeat.
    NamespaceSet {
        changed: bool,
    },
    /// A namespace deleted; `already_gone` for a repeat.
    NamespaceDeleted {
        already_gone: bool,
        removed: Vec<ExecutorId>,
    },
    /// A reshard asked for (P20.1); `changed` false for a repeat.
    ReshardRequested {
        changed: bool,
    },
}

impl CommandAnswer for OperatorDone {
    type Answer = ExecutorAnswer<Self>;
    const COMMAND: &'static str = "Operator";
    fn answer(outcome: Outcome) -> Result<ExecutorAnswer<Self>, Outcome> {
        let done = match outcome {
            Outcome::DrainingSet {
                executor_id,
                draining,
                changed,
            } => Self::Draining(DrainingSet {
                executor_id,
                draining,
                changed,
            }),
            Outcome::Deregistered {
                already_gone,
                effects,
                ..
            } => Self::Removed(Deregistered {
                already_gone,
                effects,
            }),
            Outcome::MaintenanceSet { on, changed } => Self::Maintenance { on, changed },
            Outcome::Rebalanced {
                granted,
                releasing,
                cancelled,
                effects,
            } => Self::Moved(Rebalanced {
                granted,
                releasing,
                cancelled,
                effects,
            }),
            Outcome::PinSet {
                shard,
                executor_id,
                changed,
            } => Self::Pinned {
                shard,
                executor_id,
                changed,
            },
            Outcome::Recorded => Self::Recorded,
            Outcome::NamespaceCreated { already_exists, .. } => {
                Self::NamespaceCreated { already_exists }
            }
            Outcome::NamespaceSet { changed, .. } => Self::NamespaceSet { changed },
            Outcome::NamespaceDeleted {
                already_gone,
                removed,
                ..
            } => Self::NamespaceDeleted {
                already_gone,
                removed,
            },
            Outcome::ReshardRequested { changed, .. } => Self::ReshardRequested { changed },
            Outcome::NotFound => return Ok(ExecutorAnswer::UnknownExecutor),
            Outcome::Refused { reason } => return Ok(ExecutorAnswer::Refused(reason)),
            other => return Err(other),
        };
        Ok(ExecutorAnswer::Done(done))
    }
}

impl CommandAnswer for Reaped {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "Reap";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::Reaped {
                reaped,
                skipped,
                effects,
            } => Ok(Answer::Done(Self {
                reaped,
                skipped,
                effects,
            })),
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for Rebalanced {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "Rebalance";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::Rebalanced {
                granted,
                releasing,
                cancelled,
                effects,
            } => Ok(Answer::Done(Self {
                granted,
                releasing,
                cancelled,
                effects,
            })),
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for SecondariesPlaced {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "PlaceSecondaries";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::SecondariesPlaced { changed, effects } => {
                Ok(Answer::Done(Self { changed, effects }))
            }
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for Resharded {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "Reshard";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::Resharded {
                name,
                kind,
                shard_count,
                generation,
                effects,
            } => Ok(Answer::Done(Self {
                name,
                kind,
                shard_count,
                generation,
                effects,
            })),
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

impl CommandAnswer for HandoffsCompleted {
    type Answer = Answer<Self>;
    const COMMAND: &'static str = "CompleteHandoffs";
    fn answer(outcome: Outcome) -> Result<Answer<Self>, Outcome> {
        match outcome {
            Outcome::HandoffsCompleted { completed, effects } => {
                Ok(Answer::Done(Self { completed, effects }))
            }
            Outcome::Refused { reason } => Ok(Answer::Refused(reason)),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commands_own_outcome_and_refusals_are_answers_and_anything_else_a_mismatch() {
        let refused = Outcome::Refused {
            reason: RefusalReason::NotInitialised,
        };
        assert_eq!(
            answer::<Reaped>(refused.clone()),
            Ok(Answer::Refused(RefusalReason::NotInitialised))
        );
        assert_eq!(
            answer::<Deregistered>(Outcome::NotFound),
            Ok(ExecutorAnswer::UnknownExecutor)
        );
        assert_eq!(
            answer::<Registered>(Outcome::NotFound),
            Err(Mismatch {
                command: "Register",
                outcome: "NotFound".to_owned()
            }),
            "Register never answers not-found"
        );
        assert_eq!(
            answer::<HandoffsCompleted>(Outcome::Nothing),
            Err(Mismatch {
                command: "CompleteHandoffs",
                outcome: "Nothing".to_owned()
            })
        );
    }
}
