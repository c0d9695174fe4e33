//! Error bodies: RFC 9457 `application/problem+json` with a machine-readable `code` (§9).
//!
//! Clients branch on `code`, never on `title` or `detail`, which are for humans. This module has
//! no web-framework dependency; the manager and executor turn a [`Problem`] into a response
//! themselves.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Media type of every error body (§9).
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Response header naming the serving leader's address, so a client can go direct next time
/// (§9). Present on successes and errors alike.
pub const LEADER_HEADER: &str = "x-leasehold-leader";
/// On every manager reply: the committed cluster version as the answering manager has applied it
/// (PROTOCOL P14.3). A client sends a request field introduced with schema N only to a manager
/// whose reply said N or more; a reply without it is from 0.1.0 (schema 2).
pub const CLUSTER_VERSION_HEADER: &str = "x-leasehold-cluster-version";

/// Correlates a client call (all of its retries) with server logs.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Prefix of [`Problem::type_`]; the code is appended.
const PROBLEM_TYPE_BASE: &str = "https://leasehold.dev/problems/";

/// Machine-readable reason a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// This replica is not the leader and could not forward; nothing was applied.
    NotLeader,
    /// No leader is known (election under way); nothing was applied.
    NoLeader,
    /// The executor id is not (or no longer) registered, e.g. it was reaped.
    UnknownExecutor,
    /// Malformed, unknown-field, wrong-type or out-of-range input (I6).
    InvalidRequest,
    /// Body larger than the server accepts.
    PayloadTooLarge,
    /// Not admitting work right now (lapsed lease, P3.6, or cluster not initialised); nothing
    /// was applied.
    ShardingNotReady,
    /// The request contradicts the current state.
    Conflict,
    /// No such resource (a deregister of an id that never existed, P7.2).
    NotFound,
    /// Body was not `application/json`.
    UnsupportedMediaType,
    /// Path exists but not with this method.
    MethodNotAllowed,
    /// The server gave up waiting (e.g. for a commit); the outcome is unknown.
    Timeout,
    /// A bug or an unexpected failure on the server.
    Internal,
    /// The server cannot serve now (shutting down, storage unavailable).
    Unavailable,
    /// No credential, or not the one the executor registered with (PROTOCOL P13.4); nothing
    /// was applied.
    Unauthenticated,
    /// The client certificate's role may not do this (PROTOCOL P13.3); nothing was applied.
    Forbidden,
    /// The request's body did not arrive within the server's body-read bound (PROTOCOL P13.6);
    /// nothing was applied.
    RequestTimeout,
    /// Too many requests of this kind from this caller (a registration rate limit, PROTOCOL
    /// P13.6); nothing was applied. `Retry-After` says when to try again.
    RateLimited,
    /// The manager's disk is below its free-space floor (`--min-free-disk`), so it refuses
    /// writes that grow the state; nothing was applied. Renewals and reads still work.
    InsufficientStorage,
}

impl ErrorCode {
    /// Every code, for exhaustive tests and documentation generators.
    pub const ALL: [ErrorCode; 18] = [
        ErrorCode::NotLeader,
        ErrorCode::NoLeader,
        ErrorCode::UnknownExecutor,
        ErrorCode::InvalidRequest,
        ErrorCode::PayloadTooLarge,
        ErrorCode::ShardingNotReady,
        ErrorCode::Conflict,
        ErrorCode::NotFound,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Timeout,
        ErrorCode::Internal,
        ErrorCode::Unavailable,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::RequestTimeout,
        ErrorCode::RateLimited,
        ErrorCode::InsufficientStorage,
    ];

    /// The refusals of P7.1: the server applied nothing, so any request, idempotent or not, may
    /// be retried (with patience, against a re-resolved leader).
    pub fn retryable_without_side_effects(self) -> bool {
        matches!(
            self,
            ErrorCode::NotLeader
                | ErrorCode::NoLeader
                | ErrorCode::ShardingNotReady
                | ErrorCode::RateLimited
        )
    }

    /// HTTP status that goes with the code.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::UnknownExecutor | ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::Conflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::RateLimited => 429,
            // 421 Misdirected Request: this replica cannot answer, another one can.
            ErrorCode::NotLeader => 421,
            ErrorCode::Internal => 500,
            ErrorCode::NoLeader | ErrorCode::ShardingNotReady | ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::InsufficientStorage => 507,
        }
    }

    /// The snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NotLeader => "not_leader",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::UnknownExecutor => "unknown_executor",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::ShardingNotReady => "sharding_not_ready",
            ErrorCode::Conflict => "conflict",
            ErrorCode::NotFound => "not_found",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Internal => "internal",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::InsufficientStorage => "insufficient_storage",
        }
    }

    /// Short human summary, constant per code as RFC 9457 asks of `title`.
    pub fn title(self) -> &'static str {
        match self {
            ErrorCode::NotLeader => "Not the leader",
            ErrorCode::NoLeader => "No leader",
            ErrorCode::UnknownExecutor => "Unknown executor",
            ErrorCode::InvalidRequest => "Invalid request",
            ErrorCode::PayloadTooLarge => "Payload too large",
            ErrorCode::ShardingNotReady => "Sharding not ready",
            ErrorCode::Conflict => "Conflict",
            ErrorCode::NotFound => "Not found",
            ErrorCode::UnsupportedMediaType => "Unsupported media type",
            ErrorCode::MethodNotAllowed => "Method not allowed",
            ErrorCode::Timeout => "Timeout",
            ErrorCode::Internal => "Internal error",
            ErrorCode::Unavailable => "Unavailable",
            ErrorCode::Unauthenticated => "Unauthenticated",
            ErrorCode::Forbidden => "Forbidden",
            ErrorCode::RequestTimeout => "Request timeout",
            ErrorCode::RateLimited => "Rate limited",
            ErrorCode::InsufficientStorage => "Insufficient storage",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An RFC 9457 problem document with Leasehold's extension members.
///
/// Unknown members are accepted on decode: RFC 9457 lets servers add extensions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Problem {
    /// URI identifying the problem type; derived from `code`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Constant per code.
    pub title: String,
    /// Same as the HTTP status, so the body stands alone when logged.
    pub status: u16,
    /// What went wrong with this request, for humans. Never internals: those are logged on
    /// the server, not leaked.
    pub detail: String,
    /// What clients branch on.
    pub code: ErrorCode,
    /// Whether retrying unchanged can succeed without side effects (P7.1).
    pub retryable: bool,
    /// Serving leader's address when known, duplicated from [`LEADER_HEADER`] for clients that
    /// only keep the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}

impl Problem {
    /// A problem whose `type`, `title`, `status` and `retryable` all follow from `code`, so no
    /// two sites can describe one code differently.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Problem {
            type_: format!("{PROBLEM_TYPE_BASE}{}", code.as_str()),
            title: code.title().to_owned(),
            status: code.status(),
            detail: detail.into(),
            code,
            retryable: code.retryable_without_side_effects(),
            leader: None,
        }
    }

    /// Attach the serving leader's address.
    pub fn with_leader(mut self, leader: impl Into<String>) -> Self {
        self.leader = Some(leader.into());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.status, self.detail)
    }
}

impl std::error::Error for Problem {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codes_serialize_as_snake_case_and_match_as_str() {
        for code in ErrorCode::ALL {
            let value = serde_json::to_value(code).unwrap();
            assert_eq!(value, json!(code.as_str()));
            assert_eq!(serde_json::from_value::<ErrorCode>(value).unwrap(), code);
        }
        assert_eq!(
            serde_json::to_value(ErrorCode::ShardingNotReady).unwrap(),
            json!("sharding_not_ready")
        );
    }

    #[test]
    fn only_p7_1_refusals_are_retryable_without_side_effects() {
        let retryable: Vec<ErrorCode> = ErrorCode::ALL
            .into_iter()
            .filter(|c| c.retryable_without_side_effects())
            .collect();
        assert_eq!(
            retryable,
            vec![
                ErrorCode::NotLeader,
                ErrorCode::NoLeader,
                ErrorCode::ShardingNotReady,
                ErrorCode::RateLimited,
            ]
        );
    }

    #[test]
    fn statuses_are_errors() {
        for code in ErrorCode::ALL {
            assert!((400..600).contains(&code.status()), "{code}");
        }
        assert_eq!(ErrorCode::NoLeader.status(), 503);
        assert_eq!(ErrorCode::UnknownExecutor.status(), 404);
        assert_eq!(ErrorCode::InvalidRequest.status(), 400);
    }

    #[test]
    fn new_fills_fields_from_the_code() {
        let p = Problem::new(ErrorCode::NoLeader, "election in progress");
        assert_eq!(p.type_, "https://leasehold.dev/problems/no_leader");
        assert_eq!(p.title, "No leader");
        assert_eq!(p.status, 503);
        assert_eq!(p.detail, "election in progress");
        assert!(p.retryable);
        assert_eq!(p.leader, None);
        assert!(!Problem::new(ErrorCode::Conflict, "x").retryable);
    }

    #[test]
    fn problem_json_uses_type_key_and_round_trips() {
        let p = Problem::new(ErrorCode::NotLeader, "ask the leader")
            .with_leader("http://127.0.0.1:7002");
        let value = serde_json::to_value(&p).unwrap();
        assert_eq!(
            value,
            json!({
                "type": "https://leasehold.dev/problems/not_leader",
                "title": "Not the leader",
                "status": 421,
                "detail": "ask the leader",
                "code": "not_leader",
                "retryable": true,
                "leader": "http://127.0.0.1:7002",
            })
        );
        assert_eq!(serde_json::from_value::<Problem>(value).unwrap(), p);

        let plain = Problem::new(ErrorCode::InvalidRequest, "bad");
        let value = serde_json::to_value(&plain).unwrap();
        assert!(value.get("leader").is_none(), "absent leader is omitted");
        assert!(value.get("type_").is_none());
        assert_eq!(serde_json::from_value::<Problem>(value).unwrap(), plain);
    }

    #[test]
    fn problem_accepts_extension_members() {
        let p: Problem = serde_json::from_value(json!({
            "type": "https://leasehold.dev/problems/conflict", "title": "Conflict",
            "status": 409, "detail": "d", "code": "conflict", "retryable": false,
            "instance": "/v1/executors/x",
        }))
        .unwrap();
        assert_eq!(p.code, ErrorCode::Conflict);
    }
}
