//! How the services answer what the state machine refused, an executor id it does not know and a
//! write Raft did not take: as the problems of PROTOCOL §9 (`sharding_not_ready`,
//! `invalid_request`, `conflict`, `unknown_executor`, a namespace that does not exist,
//! `not_leader`, `insufficient_storage`), the same from every service.

use leasehold_api::http::HttpError;
use leasehold_api::problem::ErrorCode;

use crate::handles::proposer::ProposeError;
use crate::lease::{ExecutorAnswer, RefusalReason};

impl From<ProposeError> for HttpError {
    fn from(error: ProposeError) -> Self {
        match error {
            ProposeError::NotLeader { leader_address } => HttpError::not_leader(leader_address),
            ProposeError::SteppingDown | ProposeError::StaleStamp(_) => HttpError::no_leader(),
            ProposeError::Raft(message) => HttpError::internal("raft write failed", message),
            ProposeError::RaftStopped(_) => HttpError::new(
                ErrorCode::Unavailable,
                "this replica's storage failed and it is stopping; ask another replica",
            ),
            ProposeError::InsufficientStorage(low) => {
                HttpError::new(ErrorCode::InsufficientStorage, low.to_string())
            }
            ProposeError::NotYetEnabled(error) => HttpError::conflict(error.to_string()),
            ProposeError::Mismatch(mismatch) => {
                HttpError::internal("unexpected state machine outcome", mismatch.to_string())
            }
        }
    }
}

pub fn refusal(reason: RefusalReason) -> HttpError {
    match reason {
        RefusalReason::NotInitialised => HttpError::new(
            ErrorCode::ShardingNotReady,
            "the cluster's shard configuration is not written yet; retry shortly",
        ),
        RefusalReason::Invalid { detail } => HttpError::invalid(detail),
        RefusalReason::CredentialMismatch { executor_id } => HttpError::conflict(format!(
            "this incarnation is registered as {executor_id} with another credential (P13.4)"
        )),
        RefusalReason::Conflict { detail } => HttpError::conflict(detail),
        RefusalReason::UnknownNamespace { namespace } => unknown_namespace(&namespace),
        other => HttpError::conflict(format!("refused: {other:?}")),
    }
}

pub fn unknown_namespace(name: &str) -> HttpError {
    HttpError::new(
        ErrorCode::NotFound,
        format!("namespace {name} does not exist (P18.1)"),
    )
}

pub fn unknown_executor(executor_id: &str) -> HttpError {
    HttpError::new(
        ErrorCode::UnknownExecutor,
        format!(
            "executor {executor_id} is not registered (never was, or was reaped or deregistered)"
        ),
    )
}

/// A command's result when it was done; otherwise the caller's error: `unknown` for an executor
/// the state does not know, the refusal's own for a refusal.
pub fn done_or_refused<T>(
    answer: ExecutorAnswer<T>,
    unknown: impl FnOnce() -> HttpError,
) -> Result<T, HttpError> {
    match answer {
        ExecutorAnswer::Done(value) => Ok(value),
        ExecutorAnswer::UnknownExecutor => Err(unknown()),
        ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
    }
}
