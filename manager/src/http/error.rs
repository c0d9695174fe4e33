//! The one HTTP error type: every error leaves as `application/problem+json` (RFC 9457) with a
//! `code` and `retryable` (PROTOCOL §9). Internal details are logged, never sent.

use axum::extract::rejection::JsonRejection;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use leasehold_api::problem::{ErrorCode, Problem, LEADER_HEADER, PROBLEM_CONTENT_TYPE};

use crate::node::ProposeError;

/// Seconds a client should wait before retrying when no leader is known: about one election.
const NO_LEADER_RETRY_AFTER_SECS: u64 = 1;

#[derive(Debug)]
pub struct ApiError {
    problem: Problem,
    retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        let retry_after_secs = code
            .retryable_without_side_effects()
            .then_some(NO_LEADER_RETRY_AFTER_SECS);
        Self {
            problem: Problem::new(code, detail),
            retry_after_secs,
        }
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, detail)
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, detail)
    }

    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, detail)
    }

    pub fn not_leader(leader_address: Option<String>) -> Self {
        let mut error = Self::new(
            ErrorCode::NotLeader,
            "this node is not the leader; send the request to the leader",
        );
        if let Some(address) = leader_address {
            error.problem = error.problem.with_leader(address);
        }
        error
    }

    pub fn no_leader() -> Self {
        Self::new(
            ErrorCode::NoLeader,
            "no leader is known right now (election in progress); retry shortly",
        )
    }

    /// Logs `error` under the request's span and answers with a generic message.
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        Self::new(
            ErrorCode::Internal,
            format!("{context}; see the server log"),
        )
    }

    pub fn code(&self) -> ErrorCode {
        self.problem.code
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        if let Some(seconds) = self.retry_after_secs {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(leader) = self
            .problem
            .leader
            .as_deref()
            .and_then(|l| HeaderValue::from_str(l).ok())
        {
            headers.insert(LEADER_HEADER, leader);
        }
        response
    }
}

impl From<ProposeError> for ApiError {
    fn from(error: ProposeError) -> Self {
        match error {
            ProposeError::NotLeader { leader_address } => ApiError::not_leader(leader_address),
            ProposeError::SteppingDown => ApiError::no_leader(),
            ProposeError::Raft(message) => ApiError::internal("raft write failed", message),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "expected Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(bytes)
                if bytes.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large")
            }
            other => ApiError::invalid(other.body_text()),
        }
    }
}
