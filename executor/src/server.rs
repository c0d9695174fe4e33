//! The executor's HTTP surface (PROTOCOL §9, executor side): the manager's push target and the
//! executor's status.
//!
//! - `PUT /v1/assignment` ([`AssignmentPush`]): full replace of the held set, no lease (P3.3,
//!   P4.3). `204` once applied or found stale (P4.1); `503 sharding_not_ready` while no
//!   registration stands (the next grant carries the set, P5.3).
//! - `POST /v1/revoke` ([`RevokePush`] → [`RevokeReply`]): answered only after admission for the
//!   shards stopped; a stale revoke is answered `ignored: true`, never as done (P5.2).
//! - `GET /v1/health` ([`ExecutorHealth`]): which executor and incarnation this address is.
//! - `GET /v1/status` ([`crate::ExecutorStatus`]): lease remaining, revision, shards with
//!   epochs, admitting or fenced.
//!
//! Every error is `application/problem+json` with a `code` (§9); bad input (unknown fields,
//! wrong types, `shard >= shard_count`, duplicates) is a 4xx and changes nothing (I6).

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use leasehold_api::problem::{ErrorCode, Problem, PROBLEM_CONTENT_TYPE};
use leasehold_api::wire::{AssignmentPush, ExecutorHealth, RevokePush, RevokeReply};
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use crate::admission::PushError;
use crate::assignment::SetOutcome;
use crate::runtime::{ExecutorStatus, Shared};

/// Largest request body: a full set of the manager's maximum 65 536 shards is about 2 MiB of
/// JSON.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// Seconds a refused (P7.1-retryable) caller should wait.
const RETRY_AFTER_SECS: u64 = 1;

/// An error answer: a problem document (§9).
#[derive(Debug)]
pub struct HttpError(pub Problem);

impl HttpError {
    /// A problem whose status follows from `code`.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self(Problem::new(code, detail))
    }

    /// `400 invalid_request`.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, detail)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.0).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        if self.0.retryable {
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

impl From<JsonRejection> for HttpError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => Self::new(
                ErrorCode::UnsupportedMediaType,
                "expected Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(bytes)
                if bytes.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Self::new(ErrorCode::PayloadTooLarge, "request body is too large")
            }
            other => Self::invalid(other.body_text()),
        }
    }
}

/// JSON body extractor whose rejections are problem documents.
#[derive(Debug)]
pub struct ProblemJson<T>(pub T);

impl<T, S> FromRequest<S> for ProblemJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(value) = Json::<T>::from_request(request, state).await?;
        Ok(Self(value))
    }
}

/// The executor's routes, without fallback (so embedders' routes can be merged in).
pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/assignment", put(put_assignment))
        .route("/v1/revoke", post(post_revoke))
        .route("/v1/health", get(health))
        .route("/v1/status", get(status))
        .with_state(shared)
}

/// The whole app: the executor's routes, `extra` routes, problem+json fallbacks, body limit.
pub(crate) fn app(shared: Arc<Shared>, extra: Router) -> Router {
    routes(shared)
        .merge(extra)
        .fallback(|| async { HttpError::new(ErrorCode::NotFound, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            HttpError::new(
                ErrorCode::MethodNotAllowed,
                "this endpoint does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

async fn put_assignment(
    State(shared): State<Arc<Shared>>,
    ProblemJson(push): ProblemJson<AssignmentPush>,
) -> Result<StatusCode, HttpError> {
    match shared.apply_push(&push) {
        Ok(applied) => {
            match applied.set {
                SetOutcome::Applied { dropped, gained } => info!(
                    revision = push.revision,
                    dropped = dropped.len(),
                    gained = gained.len(),
                    "assignment push applied"
                ),
                SetOutcome::Stale {
                    revision,
                    applied_revision,
                } => debug!(
                    revision,
                    applied_revision, "stale assignment push ignored (P4.1)"
                ),
            }
            Ok(StatusCode::NO_CONTENT)
        }
        Err(PushError::NotRegistered) => Err(HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not registered yet; the next grant carries its set",
        )),
        Err(error) => Err(push_refusal(error, "assignment push")),
    }
}

/// Maps a refused delivery to its answer; the manager retries (or repairs forwards, P5.3).
fn push_refusal(error: PushError, what: &str) -> HttpError {
    match error {
        PushError::NotRegistered => HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not registered yet; the next grant carries its set",
        ),
        PushError::WrongExecutor { .. } => {
            warn!(%error, "refused a {what} meant for another executor");
            HttpError::new(ErrorCode::Conflict, error.to_string())
        }
        PushError::Invalid(error) => {
            warn!(%error, "refused a malformed {what}");
            HttpError::invalid(error.to_string())
        }
    }
}

async fn post_revoke(
    State(shared): State<Arc<Shared>>,
    ProblemJson(revoke): ProblemJson<RevokePush>,
) -> Result<Json<RevokeReply>, HttpError> {
    match shared.apply_revoke(&revoke) {
        // The stops are recorded (log and state) before `apply_revoke` returned: only now may
        // the manager hand the shards on (P5.2).
        Ok(applied) => {
            if applied.reply.ignored {
                info!(
                    revision = revoke.revision,
                    "stale revoke answered ignored (P4.1, P5.2)"
                );
            } else {
                info!(revision = revoke.revision, released = ?applied.reply.released, "revoke applied");
            }
            Ok(Json(applied.reply))
        }
        Err(error) => Err(push_refusal(error, "revoke")),
    }
}

async fn health(State(shared): State<Arc<Shared>>) -> Result<Json<ExecutorHealth>, HttpError> {
    shared.health().map(Json).ok_or_else(|| {
        HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not registered yet",
        )
    })
}

async fn status(State(shared): State<Arc<Shared>>) -> Json<ExecutorStatus> {
    Json(shared.status())
}
