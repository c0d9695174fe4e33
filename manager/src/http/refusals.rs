//! How the executor-facing writes answer what the state machine refused, and an executor id it
//! does not know (PROTOCOL §9: `sharding_not_ready`, `invalid_request`, `conflict`,
//! `unknown_executor`, and a namespace that does not exist), the same from every handler.

use leasehold_api::problem::ErrorCode;

use super::HttpError;
use crate::lease::{ExecutorAnswer, RefusalReason};

pub(super) fn refusal(reason: RefusalReason) -> HttpError {
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

pub(super) fn unknown_namespace(name: &str) -> HttpError {
    HttpError::new(
        ErrorCode::NotFound,
        format!("namespace {name} does not exist (P18.1)"),
    )
}

pub(super) fn unknown_executor(executor_id: &str) -> HttpError {
    HttpError::new(
        ErrorCode::UnknownExecutor,
        format!(
            "executor {executor_id} is not registered (never was, or was reaped or deregistered)"
        ),
    )
}

/// A command's result when it was done; otherwise the caller's error: `unknown` for an executor
/// the state does not know, the refusal's own for a refusal.
pub(super) fn done_or_refused<T>(
    answer: ExecutorAnswer<T>,
    unknown: impl FnOnce() -> HttpError,
) -> Result<T, HttpError> {
    match answer {
        ExecutorAnswer::Done(value) => Ok(value),
        ExecutorAnswer::UnknownExecutor => Err(unknown()),
        ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
    }
}
