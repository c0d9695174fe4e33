//! Executor credentials (PROTOCOL P13.4): the `Authorization: Bearer` an executor presents on
//! its renew, release and deregister, checked against the SHA-256 it registered with, in
//! constant time, on the leader before anything is proposed. Nothing here logs a credential.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::Credential;
use subtle::ConstantTimeEq;

use super::{AppState, HttpError};

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

/// Refuses a request for `executor_id` that does not present the credential it registered
/// with. An executor that registered without one (0.1.0's, in plaintext, P13.5) and an id that
/// is not registered (the command then answers as it always did, P7.2) pass.
pub fn authenticate(
    node: &AppState,
    executor_id: &str,
    presented: &Bearer,
) -> Result<(), HttpError> {
    let stored = node.state.read(|applied| {
        applied
            .state
            .executor(executor_id)
            .and_then(|executor| executor.credential_sha256)
    });
    let Some(stored) = stored else {
        return Ok(());
    };
    match &presented.0 {
        Some(credential) if bool::from(credential.sha256().ct_eq(&stored)) => Ok(()),
        Some(_) => Err(unauthenticated(&format!(
            "the credential is not the one executor {executor_id} registered with"
        ))),
        None => Err(unauthenticated(&format!(
            "executor {executor_id} registered with a credential: present it as \
             `Authorization: Bearer <credential>`"
        ))),
    }
}
