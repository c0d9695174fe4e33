//! The executor's OpenAPI document, `GET /v1/openapi.json`: generated from the push and status
//! handlers and the `leasehold_api` wire types, with the problem responses every operation can
//! give added by [`leasehold_api::openapi::document_problems`].
//!
//! [`document`] lists the routes the library serves itself, and nothing an embedder did not
//! mount. Routes an embedder merges in are documented by passing their paths to
//! [`crate::Executor::start_with_documented_routes`], which serves [`document_with`] them. The
//! `leasehold-executor` binary does that for its demo `GET /v1/work` and `GET /metrics`; its
//! document is checked in as `docs/openapi/executor.json`, and the binary's drift test (in
//! `main.rs`) fails when the file drifts from the code (regenerate with `UPDATE_OPENAPI=1 cargo
//! test --workspace openapi`).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use leasehold_api::openapi::{document_problems, to_pretty_json, ProblemCodes};
use leasehold_api::problem::{ErrorCode, Problem};
use utoipa::OpenApi;

use crate::server;

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
        server::post_prepare,
        server::health,
        server::status,
        get_openapi,
    ),
    components(schemas(Problem, ErrorCode)),
    tags(
        (name = "deliveries", description = "Pushes from the managers' leader: the operations \
every executor must serve, marked `x-leasehold-caller: manager`."),
        (name = "status", description = "Who this executor is and what it holds."),
        (name = "health", description = "This document, and metrics where they are mounted."),
    ),
)]
struct ExecutorApi;

/// The problem codes every route on the executor's listener can answer, the embedder's too:
/// they all pass the same timeout, panic catcher and body limit (`routes.rs`).
const LISTENER_PROBLEMS: ProblemCodes<'static> = ProblemCodes {
    everywhere: &[ErrorCode::Internal, ErrorCode::Timeout],
    with_body: &[
        ErrorCode::InvalidRequest,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
    ],
    by_path: &[],
};

/// The executor library's API document: the routes every executor serves.
pub fn document() -> utoipa::openapi::OpenApi {
    document_with(utoipa::openapi::OpenApi::default())
}

/// [`document`] with `extra` merged in: the paths, tags and schemas of routes an embedder
/// serves on the executor's listener. Their operations get the problem responses of the
/// listener's plumbing too; responses particular to them are theirs to annotate. A path or tag
/// the library already has is kept as the library's.
pub fn document_with(extra: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let mut doc = ExecutorApi::openapi();
    doc.merge(extra);
    document_problems(&mut doc, LISTENER_PROBLEMS);
    mark_called_by_managers(&mut doc);
    doc
}

/// The operations the managers call on every executor (PROTOCOL §4, §5): what an executor in
/// any language must serve. The rest is for operators and the executor's own process.
pub const CALLED_BY_MANAGERS: &[&str] = &["put_assignment", "post_revoke", "post_prepare"];

/// The extension that names who calls an operation, on each of [`CALLED_BY_MANAGERS`].
pub const CALLER_EXTENSION: &str = "x-leasehold-caller";

fn mark_called_by_managers(doc: &mut utoipa::openapi::OpenApi) {
    for item in doc.paths.paths.values_mut() {
        for operation in [item.put.as_mut(), item.post.as_mut()]
            .into_iter()
            .flatten()
        {
            let called = operation
                .operation_id
                .as_deref()
                .is_some_and(|id| CALLED_BY_MANAGERS.contains(&id));
            if called {
                operation
                    .extensions
                    .get_or_insert_with(Default::default)
                    .insert(CALLER_EXTENSION.to_owned(), serde_json::json!("manager"));
            }
        }
    }
}

/// A document rendered once, when the app is built, and served as is.
#[derive(Debug, Clone)]
pub(crate) struct RenderedDocument(Bytes);

impl RenderedDocument {
    pub(crate) fn new(document: &utoipa::openapi::OpenApi) -> Self {
        Self(Bytes::from(to_pretty_json(document)))
    }
}

/// This document.
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "health", operation_id = "get_openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API.", body = Object)),
)]
pub(crate) async fn get_openapi(State(document): State<RenderedDocument>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], document.0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use utoipa::openapi::path::PathItem;

    use super::*;

    /// Every operation of `doc` as `(operation id, "METHOD path")`.
    fn operations(doc: &utoipa::openapi::OpenApi) -> Vec<(Option<String>, String)> {
        let mut found = Vec::new();
        for (path, item) in &doc.paths.paths {
            let PathItem {
                get,
                put,
                post,
                delete,
                options,
                head,
                patch,
                trace,
                ..
            } = item;
            let methods = [
                ("GET", get),
                ("PUT", put),
                ("POST", post),
                ("DELETE", delete),
                ("OPTIONS", options),
                ("HEAD", head),
                ("PATCH", patch),
                ("TRACE", trace),
            ];
            for (method, operation) in methods {
                if let Some(operation) = operation {
                    found.push((operation.operation_id.clone(), format!("{method} {path}")));
                }
            }
        }
        found
    }

    /// Operation ids used more than once (or missing), with the operations that use them:
    /// client generators name methods after them, so each must be unique (OpenAPI 3.1 §4.8.10).
    fn shared_operation_ids(
        operations: impl IntoIterator<Item = (Option<String>, String)>,
    ) -> BTreeMap<String, Vec<String>> {
        let mut by_id: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, operation) in operations {
            let id = id.unwrap_or_else(|| "<none>".to_owned());
            by_id.entry(id).or_default().push(operation);
        }
        by_id.retain(|id, uses| uses.len() > 1 || id == "<none>");
        by_id
    }

    #[test]
    fn openapi_operation_ids_are_unique() {
        let library = document();
        assert_eq!(
            shared_operation_ids(operations(&library)),
            BTreeMap::new(),
            "the library's document"
        );
        let with_metrics = document_with(crate::metrics::document());
        assert_eq!(
            shared_operation_ids(operations(&with_metrics)),
            BTreeMap::new(),
            "the library's document with GET /metrics"
        );
        assert_eq!(
            operations(&with_metrics).len(),
            operations(&library).len() + 1
        );
    }

    /// Embedders get only what the library serves: not the binary's demo workload, nor
    /// `/metrics` unless they document it.
    #[test]
    fn openapi_library_document_lists_only_the_library_routes() {
        let library = document();
        let paths: Vec<&str> = library.paths.paths.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "/v1/assignment",
                "/v1/health",
                "/v1/openapi.json",
                "/v1/prepare",
                "/v1/revoke",
                "/v1/status"
            ]
        );
        let with_metrics = document_with(crate::metrics::document());
        assert!(with_metrics.paths.paths.contains_key("/metrics"));
        // The merged route gets the listener's problem responses too.
        let metrics = with_metrics.paths.paths["/metrics"].get.as_ref().unwrap();
        assert!(metrics.responses.responses.contains_key("504"));
    }

    /// The operations the managers call are marked, and only those: an executor written in
    /// another language learns from the document what it must serve.
    #[test]
    fn the_operations_the_managers_call_are_marked() {
        let doc = serde_json::to_value(document()).unwrap();
        let mut marked = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if operation[CALLER_EXTENSION] == "manager" {
                    marked.push(format!("{} {path}", method.to_uppercase()));
                }
            }
        }
        marked.sort();
        assert_eq!(
            marked,
            ["POST /v1/prepare", "POST /v1/revoke", "PUT /v1/assignment"]
        );
    }
}
