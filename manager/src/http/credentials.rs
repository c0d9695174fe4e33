//! Executor credentials (PROTOCOL P13.4): the `Authorization: Bearer` an executor presents on
//! its renew, release and deregister, read from the headers (the admission layer, `admission`,
//! checks it against the SHA-256 the executor registered with). Nothing here logs a
//! credential.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::Credential;

use super::HttpError;

/// The credential a request presents, if any. A malformed `Authorization` header is refused
/// (401) rather than taken as none, so a typo cannot look like an old executor.
#[derive(Debug)]
pub struct Bearer(pub Option<Credential>);

impl<S: Send + Sync> FromRequestParts<S> for Bearer {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, HttpError> {
        let Some(value) = parts.headers.get(AUTHORIZATION) else {
            return Ok(Self(None));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(|| {
                unauthenticated("the Authorization header is not `Bearer <credential>`")
            })?;
        Credential::parse(token)
            .map(|credential| Self(Some(credential)))
            .map_err(|reason| {
                unauthenticated(&format!("the bearer credential is malformed: {reason}"))
            })
    }
}

fn unauthenticated(detail: &str) -> HttpError {
    HttpError::new(ErrorCode::Unauthenticated, detail.to_owned())
}
