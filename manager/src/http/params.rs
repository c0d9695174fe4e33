//! Request parameters shared by several handlers, each extracted, checked and documented in
//! one place: the inspection query, the `{executor_id}` path parameter and advertised addresses.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::Deserialize;

use super::HttpError;

/// The query every inspection read takes; anything else in the query string is refused (I6).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    /// Read through the leader's read index (linearizable) instead of this replica's applied
    /// state: the replica forwards the read to the leader, which answers once it has applied
    /// everything committed when the read arrived.
    #[serde(default)]
    #[allow(dead_code)]
    consistent: bool,
}

/// The query of the reads of one namespace's state, executors and shards: [`ReadQuery`]'s, and
/// the namespace (PROTOCOL P18.1); anything else in the query string is refused (I6).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct NamespaceReadQuery {
    /// As for every read: through the leader's read index.
    #[serde(default)]
    #[allow(dead_code)] // acted on by the layer: `consistent_read_requested`
    consistent: bool,
    /// The namespace read (PROTOCOL P18.1); absent: `default`.
    #[param(
        min_length = 1,
        max_length = 63,
        pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
    )]
    namespace: Option<String>,
}

impl NamespaceReadQuery {
    /// The namespace asked for, checked: `default` when none is named.
    pub(super) fn namespace(&self) -> Result<&str, HttpError> {
        namespace_named(self.namespace.as_deref())
    }
}

/// The namespace a read's `namespace` parameter names (`default` when absent), checked (I6).
pub(super) fn namespace_named(namespace: Option<&str>) -> Result<&str, HttpError> {
    let name = namespace.unwrap_or(leasehold_api::wire::DEFAULT_NAMESPACE);
    leasehold_api::wire::check_namespace_name(name)
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    Ok(name)
}

/// Whether a request's query asks for a consistent read (`consistent=true`), read by the same
/// rule as the `consistent` field of every read's query: serde's, through axum's `Query`. A
/// malformed value is not a request for one; the handler's own query then refuses it (`400`).
pub(super) fn consistent_read_requested(uri: &axum::http::Uri) -> bool {
    #[derive(Deserialize)]
    struct Consistency {
        #[serde(default)]
        consistent: bool,
    }
    axum::extract::Query::<Consistency>::try_from_uri(uri).is_ok_and(|query| query.consistent)
}

/// The `{executor_id}` path parameter, extracted, checked and documented in one place.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct ExecutorIdPath {
    /// The executor id, `ex-<number>`.
    #[param(pattern = r"^ex-[0-9]{1,20}$", max_length = 23)]
    pub executor_id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for ExecutorIdPath {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, HttpError> {
        let Path(executor_id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| HttpError::invalid(rejection.body_text()))?;
        validate_executor_id(&executor_id)?;
        Ok(Self { executor_id })
    }
}

/// Executor ids are minted as `ex-<log index>`; anything else is malformed, not unknown.
fn validate_executor_id(executor_id: &str) -> Result<(), HttpError> {
    let well_formed = executor_id.strip_prefix("ex-").is_some_and(|digits| {
        !digits.is_empty() && digits.len() <= 20 && digits.bytes().all(|b| b.is_ascii_digit())
    });
    if well_formed {
        Ok(())
    } else {
        Err(HttpError::invalid(format!(
            "{executor_id:?} is not an executor id (ex-<number>)"
        )))
    }
}

/// An advertised base URL in a request body (register, add-node): the wire's one check.
pub(crate) fn validate_node_address(address: &str) -> Result<(), HttpError> {
    leasehold_api::wire::validate_base_url(address).map_err(HttpError::invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One rule for `consistent`: the layer asks it as the typed queries parse it.
    #[test]
    fn a_consistent_read_is_asked_as_the_queries_parse_it() {
        let asks = |query: &str| consistent_read_requested(&query.parse().unwrap());
        assert!(asks("/v1/state?consistent=true"));
        assert!(asks("/v1/routing?form=runs&consistent=true"));
        assert!(!asks("/v1/state"));
        assert!(!asks("/v1/state?consistent=false"));
        // Malformed: not a consistent read here; the handler's query refuses it with 400.
        assert!(!asks("/v1/state?consistent=yes"));
        assert!(serde_urlencoded_like_refusal("consistent=yes"));
    }

    fn serde_urlencoded_like_refusal(query: &str) -> bool {
        let uri: axum::http::Uri = format!("/v1/state?{query}").parse().unwrap();
        axum::extract::Query::<ReadQuery>::try_from_uri(&uri).is_err()
    }
}
