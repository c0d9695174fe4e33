//! The one HTTP error type is [`leasehold_api::http::HttpError`]: every error leaves as
//! `application/problem+json` (RFC 9457) with a `code` and `retryable` (PROTOCOL §9), mapped the
//! same way in the manager and the executor. Internal details are logged, never sent. This module
//! adds only what is the manager's own: how a refused Raft write is answered.

pub use leasehold_api::http::HttpError;

use leasehold_api::problem::ErrorCode;

use crate::proposer::ProposeError;

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
