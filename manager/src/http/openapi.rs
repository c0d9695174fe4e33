//! The manager's OpenAPI document, `GET /v1/openapi.json`: generated from the handlers'
//! `#[utoipa::path]` annotations and the `leasehold_api` wire types, with the problem responses
//! every operation can give added by [`leasehold_api::openapi::document_problems`]. The Raft RPC
//! under `/raft/` is internal and not part of it.
//!
//! The document is checked in as `docs/openapi/manager.json`; the test below fails when the code
//! and that file drift apart (regenerate with `UPDATE_OPENAPI=1 cargo test --workspace openapi`).

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use leasehold_api::openapi::{document_problems, to_pretty_json, ProblemCodes};
use leasehold_api::problem::{ErrorCode, Problem};
use utoipa::OpenApi;

use super::{
    backup, cluster, drain, executors, health, inspect, namespaces, operator, plan, safe_to_stop,
    watch,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Leasehold manager API",
        description = "Shard and lease manager (PROTOCOL §9). Writes go to the leader; a follower \
forwards them in one hop. Every reply names the leader in `X-Leasehold-Leader`; every error is \
`application/problem+json` with a machine-readable `code`.",
    ),
    paths(
        executors::register,
        executors::renew,
        executors::release,
        executors::deregister,
        drain::drain,
        drain::undrain,
        safe_to_stop::executor,
        plan::preview,
        operator::maintenance,
        operator::set_maintenance,
        operator::move_shard,
        operator::pin,
        operator::unpin,
        operator::audit,
        namespaces::list,
        namespaces::show,
        namespaces::create,
        namespaces::set,
        namespaces::delete,
        namespaces::reshard,
        safe_to_stop::member,
        inspect::state,
        inspect::executors,
        inspect::executor,
        inspect::shards,
        inspect::routing,
        watch::watch,
        backup::backup,
        cluster::info,
        cluster::init,
        cluster::add_node,
        cluster::remove_node,
        cluster::snapshot,
        health::livez,
        health::readyz,
        health::metrics,
        serve,
    ),
    components(schemas(Problem, ErrorCode)),
    tags(
        (name = "executors", description = "Executor-facing writes, served by the leader."),
        (name = "inspection", description = "Reads of the lease state, from any replica."),
        (name = "cluster", description = "The Raft group: inspection and administration."),
        (name = "operator", description = "Operator controls (P17.4): maintenance mode, shard moves and pins, the audit log."),
        (name = "namespaces", description = "Namespaces (P18.1): shard spaces of one cluster, each with its own shards, lease and executors."),
        (name = "health", description = "Liveness, readiness, metrics and this document."),
    ),
)]
struct ManagerApi;

/// Under `/v1/` every route is served by the leader (writes) or may read through it
/// (`?consistent=true`), so it can be refused as misdirected or leaderless.
fn leader_routed(path: &str) -> bool {
    path.starts_with("/v1/") && path != "/v1/openapi.json"
}

/// The manager's public API document.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ManagerApi::openapi();
    document_problems(
        &mut doc,
        ProblemCodes {
            everywhere: &[ErrorCode::Internal, ErrorCode::Timeout],
            with_body: &[
                ErrorCode::InvalidRequest,
                ErrorCode::PayloadTooLarge,
                ErrorCode::UnsupportedMediaType,
            ],
            by_path: &[(
                leader_routed,
                &[
                    ErrorCode::InvalidRequest,
                    ErrorCode::NotLeader,
                    ErrorCode::NoLeader,
                ],
            )],
        },
    );
    doc
}

/// This document.
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API.", body = Object)),
)]
pub async fn serve() -> impl IntoResponse {
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
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/manager.json");
        if let Err(message) =
            leasehold_api::openapi::check_or_update(&to_pretty_json(&document()), &path)
        {
            panic!("{message}");
        }
    }

    /// The published document speaks to readers in any language: no Rust link in a description,
    /// no integer format only utoipa knows.
    #[test]
    fn openapi_document_has_no_rust_artefacts() {
        assert_eq!(
            leasehold_api::openapi::rust_artefact(&to_pretty_json(&document())),
            None
        );
    }

    /// Every operation has its own id (client generators and the spec require it; a handler's
    /// name is the id unless it says otherwise).
    #[test]
    fn operation_ids_are_unique() {
        let doc = serde_json::to_value(document()).unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for (path, operations) in doc["paths"].as_object().unwrap() {
            for (method, operation) in operations.as_object().unwrap() {
                let Some(id) = operation["operationId"].as_str() else {
                    continue;
                };
                if let Some(other) = seen.insert(id.to_owned(), format!("{method} {path}")) {
                    panic!("operation id {id} is both {other} and {method} {path}");
                }
            }
        }
    }

    /// The document's bounds are written as literals (utoipa takes no constants): they must be
    /// the limits `api::wire` defines, which the handlers and the state machine enforce (P15.1).
    #[test]
    fn documented_bounds_are_the_wire_limits() {
        let doc = serde_json::to_value(document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let capacity = &schemas["RegisterRequest"]["properties"]["capacity"];
        assert_eq!(
            capacity["maximum"].as_f64(),
            Some(f64::from(leasehold_api::wire::MAX_CAPACITY))
        );
        assert_eq!(capacity["minimum"].as_f64(), Some(1.0));
        let load = &schemas["ShardLoad"]["properties"]["load"];
        assert_eq!(
            load["maximum"].as_f64(),
            Some(leasehold_api::wire::MAX_SHARD_LOAD)
        );
        assert_eq!(load["minimum"].as_f64(), Some(0.0));
    }

    /// Every `$ref` names a schema the document defines: utoipa writes a reference for a type
    /// that derives `ToSchema` but adds the schema only when it is listed or reached through a
    /// body, so a parameter's enum can point nowhere (schemathesis refuses such a document).
    #[test]
    fn every_reference_resolves() {
        fn references<'a>(value: &'a serde_json::Value, found: &mut Vec<&'a str>) {
            match value {
                serde_json::Value::Object(map) => {
                    if let Some(target) = map.get("$ref").and_then(|r| r.as_str()) {
                        found.push(target);
                    }
                    map.values().for_each(|v| references(v, found));
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| references(v, found)),
                _ => {}
            }
        }
        let doc = serde_json::to_value(document()).unwrap();
        let mut found = Vec::new();
        references(&doc, &mut found);
        assert!(!found.is_empty());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for target in found {
            let name = target
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{target} is not a schema reference"));
            assert!(schemas.contains_key(name), "{target} is not defined");
        }
    }

    #[test]
    fn raft_rpc_is_not_documented_and_every_error_is_problem_json() {
        let doc = serde_json::to_value(document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.keys().all(|path| !path.starts_with("/raft")));
        assert!(paths.contains_key("/v1/executors/{executor_id}/renew"));
        for (path, item) in paths {
            for (method, operation) in item.as_object().unwrap() {
                let responses = operation["responses"].as_object().unwrap();
                assert!(responses.contains_key("500"), "{method} {path}");
                for (status, response) in responses {
                    if status.starts_with('4') || status.starts_with('5') {
                        let content = response["content"].as_object();
                        // The health probes answer their own body on failure, as on success.
                        let is_health_probe = path == "/readyz" || path == "/livez";
                        assert!(
                            is_health_probe
                                || content
                                    .is_some_and(|c| c.contains_key("application/problem+json")),
                            "{method} {path} {status}: {response}"
                        );
                    }
                }
            }
        }
    }
}
