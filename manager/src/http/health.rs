//! `/livez` (the process answers and its Raft core runs, P8.3), `/readyz` (this replica can serve: a leader is known, it has
//! applied everything committed, it is not stopping, and the cluster's shard configuration is
//! written) and `/metrics` (Prometheus text).

use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{Liveness, Readiness, ReadinessCheck};
use serde::Deserialize;

use super::{ApiQuery, HttpError};
use crate::handles::leadership::Leadership;
use crate::raft::LeaseStateHandle;
use crate::service::views::Views;
use metrics_exporter_prometheus::PrometheusHandle;

/// What the health routes read: the Raft handle and storage, the applied state and what the
/// leader knows (for `/metrics`'s gauges).
#[derive(Clone)]
pub struct Health {
    pub leadership: Leadership,
    pub state: LeaseStateHandle,
    pub metrics: Option<PrometheusHandle>,
    pub views: Views,
}

/// How long `/readyz` lets the applied index catch up with the committed one it just read.
const APPLY_CATCH_UP_WAIT: Duration = Duration::from_secs(1);

/// The process answers and its storage works. Once its Raft core stopped or its disk was found
/// full (P8.3) this answers 503 until the process exits, so a supervisor restarts it.
#[utoipa::path(
    get, path = "/livez", tag = "health",
    responses(
        (status = 200, description = "Alive.", body = Liveness),
        (status = 503, description = "The storage failed (P8.3): the Raft core stopped or the disk is full; `status` names the cause. The process is exiting.", body = Liveness),
    ),
)]
pub async fn livez(State(health): State<Health>) -> Response {
    match crate::handles::fatal::storage_failure(
        &health.leadership.raft,
        health.leadership.proposer.disk_space(),
    ) {
        None => Json(Liveness {
            status: "ok".to_string(),
        })
        .into_response(),
        Some(cause) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Liveness { status: cause }),
        )
            .into_response(),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadyQuery {
    /// Present (any value, or none): list each check with what it saw.
    verbose: Option<String>,
}

/// Readiness: a leader is known, everything committed is applied, Raft runs and this node is not
/// stepping down, and the shard configuration is written. `?verbose` also lists `disk_space`,
/// the free-space alarm (P8.3), which does not make the replica unready: renewals and reads
/// still work there, and taking every low replica out of service would stop them.
#[utoipa::path(
    get, path = "/readyz", tag = "health", params(ReadyQuery),
    responses(
        (status = 200, description = "Ready.", body = Readiness),
        (status = 503, description = "Not ready: which checks failed, with `?verbose`.", body = Readiness),
    ),
)]
pub async fn readyz(
    State(health): State<Health>,
    ApiQuery(query): ApiQuery<ReadyQuery>,
) -> Response {
    let (status, ready, checks) = readiness(&health).await;
    let checks = query.verbose.is_some().then_some(checks);
    (status, Json(Readiness { ready, checks })).into_response()
}

/// `/readyz` on the plaintext health listener (`--health-listen`, P13.2): ready or not, and
/// nothing more. Who leads, the indexes, the shard count, the lease and the free disk stay behind
/// the API listener's TLS; `?verbose` is ignored here.
pub async fn bare_readyz(State(health): State<Health>) -> Response {
    let (status, ready, _) = readiness(&health).await;
    (
        status,
        Json(Readiness {
            ready,
            checks: None,
        }),
    )
        .into_response()
}

/// `/livez` on the plaintext health listener: alive or not; the cause of a storage failure
/// stays behind TLS (and in the log).
pub async fn bare_livez(State(health): State<Health>) -> Response {
    let failed = crate::handles::fatal::storage_failure(
        &health.leadership.raft,
        health.leadership.proposer.disk_space(),
    )
    .is_some();
    let (status, word) = if failed {
        (StatusCode::SERVICE_UNAVAILABLE, "storage failed")
    } else {
        (StatusCode::OK, "ok")
    };
    (
        status,
        Json(Liveness {
            status: word.to_string(),
        }),
    )
        .into_response()
}

/// Whether this replica is ready, with the status it answers and each check.
async fn readiness(health: &Health) -> (StatusCode, bool, Vec<ReadinessCheck>) {
    let committed = health.leadership.committed_index().await;
    let metrics = metrics_applied_up_to(health, committed).await;
    let applied = metrics.last_applied.map(|log_id| log_id.index);
    let checks = vec![
        check(
            "leader",
            metrics.current_leader.is_some(),
            match metrics.current_leader {
                Some(id) => format!("node {id} leads term {}", metrics.current_term),
                None => "no leader known".to_string(),
            },
        ),
        check(
            "applied",
            applied >= committed,
            applied_detail(applied, committed),
        ),
        check(
            "running",
            metrics.running_state.is_ok() && !health.leadership.is_stepping_down(),
            match (&metrics.running_state, health.leadership.is_stepping_down()) {
                (Err(fatal), _) => format!("raft stopped: {fatal}"),
                (Ok(()), true) => "stepping down".to_string(),
                (Ok(()), false) => "running".to_string(),
            },
        ),
        shard_config_check(health),
        disk_space_check(health.leadership.proposer.disk_space()),
    ];
    let ready = checks
        .iter()
        .all(|check| check.ok || check.name == DISK_SPACE_CHECK);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, ready, checks)
}

/// The `applied` check's detail in plain words: the log indexes, or `nothing` before the first
/// entry is applied (or known committed).
fn applied_detail(applied: Option<u64>, committed: Option<u64>) -> String {
    let index = |index: Option<u64>| index.map_or_else(|| "nothing".to_owned(), |i| i.to_string());
    format!("applied {}, committed {}", index(applied), index(committed))
}

/// One readiness check.
fn check(name: &str, ok: bool, detail: String) -> ReadinessCheck {
    ReadinessCheck {
        name: name.to_string(),
        ok,
        detail,
    }
}

/// Raft's metrics once this replica applied up to `committed`, or as they are if it did not
/// within [`APPLY_CATCH_UP_WAIT`]: applying trails committing by a moment on a busy replica;
/// readiness asks whether it keeps up, so it waits that moment out (bounded) instead of
/// flapping.
async fn metrics_applied_up_to(
    health: &Health,
    committed: Option<u64>,
) -> openraft::RaftMetrics<u64, openraft::BasicNode> {
    match health
        .leadership
        .raft
        .wait(Some(APPLY_CATCH_UP_WAIT))
        .applied_index_at_least(committed, "applied up to the commit")
        .await
    {
        Ok(metrics) => metrics,
        Err(_) => health.leadership.metrics_snapshot(),
    }
}

/// Whether the shard configuration is written (the first `Init` applied).
fn shard_config_check(health: &Health) -> ReadinessCheck {
    let shard_config = health.state.read(|applied| {
        applied
            .state
            .config()
            .map(|c| (c.shard_count, c.lease_duration_ms))
    });
    check(
        "shard_config",
        shard_config.is_some(),
        match shard_config {
            Some((shards, lease_ms)) => format!("{shards} shards, lease {lease_ms} ms"),
            None => "the shard configuration is not written yet".to_string(),
        },
    )
}

/// The name of the advisory check of the free-space alarm.
const DISK_SPACE_CHECK: &str = "disk_space";

fn disk_space_check(space: &crate::handles::disk_space::DiskSpace) -> ReadinessCheck {
    let (ok, detail) = match (space.check_growth(), space.free_bytes()) {
        (Err(low), _) => (false, low.to_string()),
        (Ok(()), Some(free)) => (
            true,
            format!(
                "{free} bytes free, floor {} bytes (--min-free-disk)",
                space.min_free_bytes()
            ),
        ),
        (Ok(()), None) => (true, "not measured yet".to_string()),
    };
    ReadinessCheck {
        name: DISK_SPACE_CHECK.to_string(),
        ok,
        detail,
    }
}

/// Prometheus text exposition: the protocol and Raft metrics (docs/OPERATIONS.md, "Metrics
/// reference").
#[utoipa::path(
    get, path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4.", body = String, content_type = "text/plain"),
        (status = 503, description = "`unavailable`: metrics are not enabled in this process."),
    ),
)]
pub async fn metrics(State(health): State<Health>) -> Response {
    match &health.metrics {
        Some(handle) => {
            let told_from_memory = health.views.leader_knows().told_from_memory;
            crate::handles::metrics::record_state_gauges(
                &health.state,
                health.leadership.clock.now_ms(),
                told_from_memory.as_ref(),
            );
            leasehold_api::process::record_process_metrics();
            (
                StatusCode::OK,
                [(CONTENT_TYPE, "text/plain; version=0.0.4")],
                handle.render(),
            )
                .into_response()
        }
        None => HttpError::new(
            ErrorCode::Unavailable,
            "metrics are not enabled in this process",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handles::disk_space::DiskSpace;

    /// `/readyz?verbose`'s `applied` check reads as numbers, not as Rust's `Some(11)`.
    #[test]
    fn the_applied_check_names_plain_indexes() {
        assert_eq!(
            applied_detail(Some(11), Some(12)),
            "applied 11, committed 12"
        );
        assert_eq!(
            applied_detail(None, Some(3)),
            "applied nothing, committed 3"
        );
        assert_eq!(
            applied_detail(None, None),
            "applied nothing, committed nothing"
        );
    }

    /// P8.3: `/readyz?verbose` says what the free-space check found: nothing before the first
    /// measurement, then the bytes free and the floor, and the alarm with both once it is raised.
    #[test]
    fn p8_3_the_disk_space_check_names_the_bytes_free_and_the_floor() {
        let space = DiskSpace::new(1_000);
        let unmeasured = disk_space_check(&space);
        assert!(unmeasured.ok);
        assert_eq!(unmeasured.detail, "not measured yet");
        space.record(5_000);
        let measured = disk_space_check(&space);
        assert!(measured.ok);
        assert_eq!(
            measured.detail,
            "5000 bytes free, floor 1000 bytes (--min-free-disk)"
        );
        space.record(10);
        let raised = disk_space_check(&space);
        assert!(!raised.ok);
        assert!(
            raised.detail.contains("10 bytes free") && raised.detail.contains("(1000 bytes)"),
            "{}",
            raised.detail
        );
    }
}
