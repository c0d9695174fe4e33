//! `/livez` (the process answers), `/readyz` (this replica can serve: a leader is known and it
//! has applied everything committed) and `/metrics` (Prometheus text).

use axum::extract::{Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::AppState;

pub async fn livez() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

#[derive(Debug, Deserialize)]
pub struct ReadyQuery {
    verbose: Option<String>,
}

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

pub async fn readyz(State(node): State<AppState>, Query(query): Query<ReadyQuery>) -> Response {
    let metrics = node.metrics_snapshot();
    let committed = node.committed_index().await;
    let applied = metrics.last_applied.map(|log_id| log_id.index);
    let checks = [
        Check {
            name: "leader",
            ok: metrics.current_leader.is_some(),
            detail: match metrics.current_leader {
                Some(id) => format!("node {id} leads term {}", metrics.current_term),
                None => "no leader known".to_string(),
            },
        },
        Check {
            name: "applied",
            ok: applied >= committed,
            detail: format!("applied {applied:?}, committed {committed:?}"),
        },
        Check {
            name: "running",
            ok: metrics.running_state.is_ok() && !node.is_stepping_down(),
            detail: match (&metrics.running_state, node.is_stepping_down()) {
                (Err(fatal), _) => format!("raft stopped: {fatal}"),
                (Ok(()), true) => "stepping down".to_string(),
                (Ok(()), false) => "running".to_string(),
            },
        },
    ];
    let ready = checks.iter().all(|check| check.ok);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if query.verbose.is_some() {
        (
            status,
            Json(serde_json::json!({ "ready": ready, "checks": checks })),
        )
            .into_response()
    } else {
        (status, Json(serde_json::json!({ "ready": ready }))).into_response()
    }
}

pub async fn metrics(State(node): State<AppState>) -> Response {
    match &node.metrics {
        Some(handle) => (
            StatusCode::OK,
            [(CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => super::ApiError::new(
            leasehold_api::problem::ErrorCode::Unavailable,
            "metrics are not enabled in this process",
        )
        .into_response(),
    }
}
