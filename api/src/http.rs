//! The one HTTP error type and the request plumbing the manager and the executor share (feature
//! `axum`): every refusal leaves as `application/problem+json` with a `code` (PROTOCOL §9), and
//! the framework's own rejections (bad JSON, wrong content type, oversized body, bad query, no
//! such route, wrong method, a handler past its deadline, a panic) are mapped here once, so no
//! server answers a bare body (I6).
//!
//! - [`HttpError`]: a [`Problem`] plus `Retry-After` for the P7.1-retryable codes and the leader
//!   header when the problem names one.
//! - [`ApiJson`], [`ApiQuery`]: extractors whose rejections are [`HttpError`]s.
//! - [`not_found`], [`method_not_allowed`]: router fallbacks.
//! - [`limit_body`]: the request body limit, answered `413 payload_too_large` after draining
//!   what the client still sends (bounded), so it reads the answer instead of a reset.
//! - [`request_timeout`]: a deadline on a handler, answered `504 timeout`.
//! - [`request_id`]: one tracing span per request carrying its `X-Request-Id` (taken from the
//!   request when well formed, generated otherwise) and the same id on the response.
//! - [`panic_response`]: the answer when a handler panicked (`500 internal`).

use std::any::Any;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::problem::{ErrorCode, Problem, LEADER_HEADER, PROBLEM_CONTENT_TYPE, REQUEST_ID_HEADER};

/// Seconds a client should wait before retrying a P7.1 refusal: about one election.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Longest `X-Request-Id` accepted from a client; a longer one is replaced.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// An error answer: a problem document (§9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    problem: Problem,
}

impl HttpError {
    /// A problem whose status, title and `retryable` follow from `code`.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            problem: Problem::new(code, detail),
        }
    }

    /// `400 invalid_request`: malformed, unknown-field, wrong-type or out-of-range input (I6).
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, detail)
    }

    /// `404 not_found`.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, detail)
    }

    /// `409 conflict`.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, detail)
    }

    /// `421 not_leader`, naming the leader when known.
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

    /// `503 no_leader`: an election is under way; nothing was applied.
    pub fn no_leader() -> Self {
        Self::new(
            ErrorCode::NoLeader,
            "no leader is known right now (election in progress); retry shortly",
        )
    }

    /// `500 internal`: logs `error` under the request's span and answers with `context` only,
    /// never the internals.
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        Self::new(
            ErrorCode::Internal,
            format!("{context}; see the server log"),
        )
    }

    /// The machine-readable code.
    pub fn code(&self) -> ErrorCode {
        self.problem.code
    }

    /// The problem document this error answers with.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }
}

impl From<Problem> for HttpError {
    fn from(problem: Problem) -> Self {
        Self { problem }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.problem.fmt(f)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        if self.problem.retryable {
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
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

impl From<QueryRejection> for HttpError {
    fn from(rejection: QueryRejection) -> Self {
        Self::invalid(rejection.body_text())
    }
}

/// JSON body extractor whose rejections are problem documents. The body types reject unknown
/// fields themselves (`deny_unknown_fields`, I6).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(request.headers()) {
            // axum's extractor refuses it (415), worded as every other refusal.
            let axum::Json(value) = axum::Json::<T>::from_request(request, state).await?;
            return Ok(Self(value));
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| HttpError::from(JsonRejection::BytesRejection(rejection)))?;
        // Every request body of the API is an object (the OpenAPI documents say so); serde
        // would also take a struct from an array of its fields in order, which no document
        // describes, so a client's `[..]` would be applied as a guess at what it meant (I6).
        if bytes.iter().find(|byte| !byte.is_ascii_whitespace()) != Some(&b'{') {
            return Err(HttpError::invalid("the body is not a JSON object"));
        }
        // serde_json alone first: axum's parser tracks the path of every element for its error
        // message, which was a third of the CPU of a 1 024-claim renewal (docs/BENCHMARKS.md,
        // B2). Only a body that fails is parsed again, by axum, for that message.
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(Self(value)),
            Err(_) => {
                let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes)?;
                Ok(Self(value))
            }
        }
    }
}

/// `application/json` or `application/<anything>+json`, parameters aside: what axum's `Json`
/// accepts.
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", subtype)) => subtype == "json" || subtype.ends_with("+json"),
        _ => false,
    }
}

/// Query-string extractor whose rejections are problem documents.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// Router fallback: `404 not_found`.
pub async fn not_found() -> HttpError {
    HttpError::not_found("no such endpoint")
}

/// Router fallback for a known path with another method: `405 method_not_allowed`.
pub async fn method_not_allowed() -> HttpError {
    HttpError::new(
        ErrorCode::MethodNotAllowed,
        "this endpoint does not take that method",
    )
}

/// A body over the limit is read and discarded up to this many times the limit before the
/// connection is closed (an HTTP/1 server that closes with unread data resets the connection, and
/// the client loses the `413` it was sent).
const DRAIN_FACTOR: usize = 4;
/// Bound on draining an oversized body.
const DRAIN_TIME: Duration = Duration::from_secs(5);
/// Bound on receiving a whole request body (PROTOCOL P13.6): with the listener's header-read
/// bound, a client that trickles its request holds a connection for at most the two. Generous
/// for the largest body (a renewal listing a million shards is about 8 MB).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request body a route group accepts, for [`limit_body`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit {
    /// Bytes.
    pub max_bytes: usize,
}

/// Middleware (`from_fn_with_state(BodyLimit { max_bytes }, limit_body)`): buffers the request
/// body up to the limit and hands it on; a larger one is answered `413 payload_too_large` with
/// `Connection: close`, after reading and discarding what the client still sends, up to
/// [`DRAIN_FACTOR`] times the limit and [`DRAIN_TIME`] (nginx's lingering close), so the client
/// gets the answer rather than a connection reset. A declared `Content-Length` beyond that is
/// answered at once. A body that has not arrived whole within [`BODY_READ_TIMEOUT`] is answered
/// `408 request_timeout` with `Connection: close`.
pub async fn limit_body(State(limit): State<BodyLimit>, request: Request, next: Next) -> Response {
    let (parts, mut body) = request.into_parts();
    let drain_cap = limit.max_bytes.saturating_mul(DRAIN_FACTOR);
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > drain_cap as u64) {
        return payload_too_large(limit);
    }
    let mut kept = Vec::new();
    let mut received = 0usize;
    let drain_deadline = tokio::time::Instant::now() + DRAIN_TIME;
    let read_deadline = tokio::time::Instant::now() + BODY_READ_TIMEOUT;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx));
        let frame = if received > limit.max_bytes {
            match tokio::time::timeout_at(drain_deadline, frame).await {
                Ok(frame) => frame,
                Err(_) => break,
            }
        } else {
            match tokio::time::timeout_at(read_deadline, frame).await {
                Ok(frame) => frame,
                Err(_) => return body_too_slow(),
            }
        };
        let Some(frame) = frame else { break };
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => {
                return HttpError::invalid(format!("reading the request body: {error}"))
                    .into_response()
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        received = received.saturating_add(data.len());
        if received > limit.max_bytes {
            kept = Vec::new();
            if received > drain_cap {
                break;
            }
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if received > limit.max_bytes {
        return payload_too_large(limit);
    }
    next.run(Request::from_parts(parts, Body::from(kept))).await
}

fn body_too_slow() -> Response {
    let mut response = HttpError::new(
        ErrorCode::RequestTimeout,
        format!(
            "the request body did not arrive within {} s",
            BODY_READ_TIMEOUT.as_secs()
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

fn payload_too_large(limit: BodyLimit) -> Response {
    let mut response = HttpError::new(
        ErrorCode::PayloadTooLarge,
        format!("request body is larger than {} bytes", limit.max_bytes),
    )
    .into_response();
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Middleware (`from_fn_with_state(limit, request_timeout)`): a handler still running after
/// `limit` is dropped and answered `504 timeout`. For a write the outcome is then unknown, which
/// is what the code says; clients retry idempotent requests only.
pub async fn request_timeout(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(limit_ms = limit.as_millis() as u64, "request timed out");
            HttpError::new(
                ErrorCode::Timeout,
                format!(
                    "the server gave up after {} ms; the outcome is unknown",
                    limit.as_millis()
                ),
            )
            .into_response()
        }
    }
}

/// `X-Request-Id` as sent, when it is usable: 1 to [`MAX_REQUEST_ID_BYTES`] of
/// `[A-Za-z0-9._:-]`. Anything else (too long, spaces, control bytes) is replaced, so a log line
/// never carries what a client made up beyond that.
pub fn valid_request_id(value: &HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?;
    let well_formed = !text.is_empty()
        && text.len() <= MAX_REQUEST_ID_BYTES
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    well_formed.then_some(text)
}

/// A fresh request id: 128 random bits in hex.
pub fn new_request_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Middleware: runs the request inside an `http_request` span with its `request_id`, method and
/// path as fields, logs its completion at debug with status and latency, and returns the id in
/// `X-Request-Id`. The (possibly replaced) id is written back into the request, so a forward to
/// the leader carries the same one.
pub async fn request_id(mut request: Request, next: Next) -> Response {
    let id = match request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(valid_request_id)
    {
        Some(id) => id.to_owned(),
        None => new_request_id(),
    };
    // The id is ASCII from the allowed set or hex, so it is always a valid header value.
    let header = HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("invalid"));
    request
        .headers_mut()
        .insert(REQUEST_ID_HEADER, header.clone());
    let span = tracing::info_span!(
        "http_request",
        request_id = %id,
        method = %request.method(),
        path = %request.uri().path(),
    );
    let started = Instant::now();
    let mut response = async move {
        let response = next.run(request).await;
        tracing::debug!(
            status = response.status().as_u16(),
            latency_ms = started.elapsed().as_millis() as u64,
            "request done"
        );
        response
    }
    .instrument(span)
    .await;
    response.headers_mut().insert(REQUEST_ID_HEADER, header);
    response
}

/// The answer for a handler that panicked (for `tower_http::catch_panic`): `500 internal`,
/// logged with the panic message.
pub fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("non-string panic payload");
    HttpError::internal("the handler panicked", message).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::extract::DefaultBodyLimit;
    use axum::routing::{get, post};
    use axum::{middleware, Router};
    use serde::Deserialize;
    use tower::ServiceExt;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body1 {
        #[allow(dead_code)]
        n: u32,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Q {
        #[allow(dead_code)]
        consistent: Option<bool>,
    }

    async fn write(ApiJson(_): ApiJson<Body1>) -> StatusCode {
        StatusCode::NO_CONTENT
    }

    async fn read(ApiQuery(_): ApiQuery<Q>) -> &'static str {
        "ok"
    }

    async fn slow() -> &'static str {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        "late"
    }

    fn app() -> Router {
        Router::new()
            .route("/write", post(write))
            .route("/read", get(read))
            .route(
                "/slow",
                get(slow).layer(middleware::from_fn_with_state(
                    Duration::from_secs(5),
                    request_timeout,
                )),
            )
            .route("/upload", post(|_: Bytes| async { "read" }))
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(middleware::from_fn_with_state(
                BodyLimit { max_bytes: 64 },
                limit_body,
            ))
            .layer(DefaultBodyLimit::max(64))
            .layer(middleware::from_fn(request_id))
    }

    async fn call(request: Request<Body>) -> (StatusCode, Response) {
        let response = app().oneshot(request).await.unwrap();
        (response.status(), response)
    }

    async fn problem_of(response: Response) -> Problem {
        assert_eq!(
            response.headers()[CONTENT_TYPE],
            PROBLEM_CONTENT_TYPE,
            "{response:?}"
        );
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn post_json(body: &str) -> Request<Body> {
        Request::post("/write")
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    async fn expect(request: Request<Body>, code: ErrorCode) {
        let (status, response) = call(request).await;
        assert_eq!(status.as_u16(), code.status());
        assert_eq!(problem_of(response).await.code, code);
    }

    #[tokio::test]
    async fn well_formed_requests_pass() {
        assert_eq!(
            call(post_json(r#"{"n": 1}"#)).await.0,
            StatusCode::NO_CONTENT
        );
        let read = Request::get("/read?consistent=true")
            .body(Body::empty())
            .unwrap();
        assert_eq!(call(read).await.0, StatusCode::OK);
    }

    /// I6: a body is an object; serde's reading of a struct from an array of its fields in
    /// order is no form any document describes, so it is refused, not guessed at.
    #[tokio::test]
    async fn i6_a_body_that_is_not_a_json_object_is_refused() {
        for body in [r#"[1]"#, r#"  [1]"#, "1", r#""n""#, "null", ""] {
            expect(post_json(body), ErrorCode::InvalidRequest).await;
        }
        assert_eq!(
            call(post_json(" \n {\"n\": 1}")).await.0,
            StatusCode::NO_CONTENT
        );
    }

    #[tokio::test]
    async fn json_bodies_are_taken_with_any_json_content_type_and_refused_otherwise() {
        let with_type = |content_type: Option<&str>| {
            let mut request = Request::post("/write");
            if let Some(content_type) = content_type {
                request = request.header(CONTENT_TYPE, content_type);
            }
            request.body(Body::from(r#"{"n": 1}"#)).unwrap()
        };
        for accepted in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/problem+json",
        ] {
            assert_eq!(
                call(with_type(Some(accepted))).await.0,
                StatusCode::NO_CONTENT,
                "{accepted}"
            );
        }
        for refused in [
            Some("text/plain"),
            Some("application/jsonl"),
            Some("text/json"),
            None,
        ] {
            expect(with_type(refused), ErrorCode::UnsupportedMediaType).await;
        }
    }

    /// The fast path parses with serde_json alone; a body it refuses is parsed again by axum, so
    /// the detail still names the field at fault.
    #[tokio::test]
    async fn a_refused_body_names_the_field_at_fault() {
        let (_, response) = call(post_json(r#"{"n": "1"}"#)).await;
        let problem = problem_of(response).await;
        assert!(
            problem.detail.contains("n: invalid type"),
            "{}",
            problem.detail
        );
    }

    #[tokio::test]
    async fn every_rejection_class_is_problem_json_with_its_code() {
        expect(
            post_json(r#"{"n": 1, "extra": 2}"#),
            ErrorCode::InvalidRequest,
        )
        .await;
        expect(post_json(r#"{"n": "1"}"#), ErrorCode::InvalidRequest).await;
        expect(post_json(r#"{"n": -1}"#), ErrorCode::InvalidRequest).await;
        expect(post_json(r#"{"n": 1"#), ErrorCode::InvalidRequest).await;
        expect(
            post_json(&format!(r#"{{"n": 1, "pad": "{}"}}"#, "x".repeat(100))),
            ErrorCode::PayloadTooLarge,
        )
        .await;
        expect(
            Request::post("/write")
                .header(CONTENT_TYPE, "text/plain")
                .body(Body::from(r#"{"n": 1}"#))
                .unwrap(),
            ErrorCode::UnsupportedMediaType,
        )
        .await;
        expect(
            Request::get("/read?consistent=maybe")
                .body(Body::empty())
                .unwrap(),
            ErrorCode::InvalidRequest,
        )
        .await;
        expect(
            Request::get("/read?other=1").body(Body::empty()).unwrap(),
            ErrorCode::InvalidRequest,
        )
        .await;
        expect(
            Request::get("/nowhere").body(Body::empty()).unwrap(),
            ErrorCode::NotFound,
        )
        .await;
        expect(
            Request::delete("/write").body(Body::empty()).unwrap(),
            ErrorCode::MethodNotAllowed,
        )
        .await;
    }

    #[tokio::test]
    async fn an_oversized_body_is_drained_and_answered_413_with_connection_close() {
        let (status, response) = call(post_json(&format!(
            r#"{{"n": 1, "pad": "{}"}}"#,
            "x".repeat(200)
        )))
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(response.headers()[CONNECTION], "close");
        // Declared far beyond what is worth draining: answered without reading.
        let declared = Request::post("/write")
            .header(CONTENT_TYPE, "application/json")
            .header(CONTENT_LENGTH, "1000000")
            .body(Body::from("{}"))
            .unwrap();
        expect(declared, ErrorCode::PayloadTooLarge).await;
        // At the limit exactly: handed on whole.
        let at_limit = format!(r#"{{"n": 1{}}}"#, " ".repeat(64 - 8));
        assert_eq!(at_limit.len(), 64);
        assert_eq!(call(post_json(&at_limit)).await.0, StatusCode::NO_CONTENT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_past_its_deadline_is_answered_504_timeout() {
        expect(
            Request::get("/slow").body(Body::empty()).unwrap(),
            ErrorCode::Timeout,
        )
        .await;
    }

    /// P13.6: a client that starts a body and never finishes it is answered `408` at the
    /// body-read bound and the connection closed, instead of holding it forever.
    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_ends_is_cut_at_the_body_read_bound() {
        let never_ends = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let started = tokio::time::Instant::now();
        let (status, response) = call(
            Request::post("/upload")
                .body(Body::from_stream(never_ends))
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(response.headers()[CONNECTION], "close");
        assert_eq!(problem_of(response).await.code, ErrorCode::RequestTimeout);
        assert_eq!(started.elapsed(), BODY_READ_TIMEOUT);
    }

    #[tokio::test]
    async fn request_id_is_returned_and_replaced_when_malformed() {
        let sent = Request::get("/read")
            .header(REQUEST_ID_HEADER, "client-id.42:a_b")
            .body(Body::empty())
            .unwrap();
        let (_, response) = call(sent).await;
        assert_eq!(response.headers()[REQUEST_ID_HEADER], "client-id.42:a_b");

        for bad in [
            "has space",
            "",
            &"x".repeat(MAX_REQUEST_ID_BYTES + 1),
            "ünïcode",
        ] {
            let mut request = Request::get("/nowhere").body(Body::empty()).unwrap();
            if let Ok(value) = HeaderValue::from_str(bad) {
                request.headers_mut().insert(REQUEST_ID_HEADER, value);
            }
            let (_, response) = call(request).await;
            let returned = response.headers()[REQUEST_ID_HEADER].to_str().unwrap();
            assert_ne!(returned, bad);
            assert_eq!(returned.len(), 32, "{returned}");
            assert!(returned.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn retryable_codes_carry_retry_after_and_leader() {
        let response = HttpError::not_leader(Some("http://127.0.0.1:7002".into())).into_response();
        assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST);
        assert_eq!(response.headers()[RETRY_AFTER], "1");
        assert_eq!(response.headers()[LEADER_HEADER], "http://127.0.0.1:7002");
        let response = HttpError::conflict("no").into_response();
        assert!(response.headers().get(RETRY_AFTER).is_none());
    }

    #[test]
    fn panics_answer_500_internal() {
        let response = panic_response(Box::new("boom"));
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()[CONTENT_TYPE], PROBLEM_CONTENT_TYPE);
    }
}
