//! The executor's OpenAPI document, `GET /v1/openapi.json`: generated from the push, status and
//! workload handlers and the `leasehold_api` wire types, with the problem responses every
//! operation can give added by [`leasehold_api::openapi::document_problems`]. It describes the
//! `leasehold-executor` binary, so it includes the demo `GET /v1/work` and `GET /metrics`, which
//! an embedder serves only if it mounts them.
//!
//! Checked in as `docs/openapi/executor.json`; the test below fails when it drifts from the code
//! (regenerate with `UPDATE_OPENAPI=1 cargo test --workspace openapi`).

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use leasehold_api::openapi::{document_problems, to_pretty_json, ProblemCodes};
use leasehold_api::problem::{ErrorCode, Problem};
use utoipa::OpenApi;

use crate::{metrics, server, workload};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Leasehold executor API",
        description = "An executor's push target and status (PROTOCOL §9, executor side). Every \
error is `application/problem+json` with a machine-readable `code`.",
    ),
    paths(
        server::put_assignment,
        server::post_revoke,
        server::health,
        server::status,
        workload::work,
        metrics::serve,
        serve,
    ),
    components(schemas(Problem, ErrorCode)),
    tags(
        (name = "deliveries", description = "Pushes from the manager leader."),
        (name = "status", description = "Who this executor is and what it holds."),
        (name = "workload", description = "The binary's demo workload."),
        (name = "health", description = "Metrics and this document."),
    ),
)]
struct ExecutorApi;

/// The executor's API document.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ExecutorApi::openapi();
    document_problems(
        &mut doc,
        ProblemCodes {
            everywhere: &[ErrorCode::Internal, ErrorCode::Timeout],
            with_body: &[
                ErrorCode::InvalidRequest,
                ErrorCode::PayloadTooLarge,
                ErrorCode::UnsupportedMediaType,
            ],
            by_path: &[(|path| path == "/v1/work", &[ErrorCode::InvalidRequest])],
        },
    );
    doc
}

/// This document.
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API.", body = Object)),
)]
pub(crate) async fn serve() -> impl IntoResponse {
    static JSON: OnceLock<String> = OnceLock::new();
    let body = JSON.get_or_init(|| to_pretty_json(&document()));
    ([(CONTENT_TYPE, "application/json")], body.as_str())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The checked-in document is what the code generates.
    #[test]
    fn openapi_document_matches_the_checked_in_file() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/executor.json");
        if let Err(message) =
            leasehold_api::openapi::check_or_update(&to_pretty_json(&document()), &path)
        {
            panic!("{message}");
        }
    }
}
