//! The executor's Prometheus metrics (docs/OPERATIONS.md, "Metrics reference"). The library
//! records counters through the `metrics` facade (free when no recorder is installed); the
//! `leasehold-executor` binary installs the Prometheus recorder and mounts [`router`], which sets
//! the gauges from the executor's status at scrape time, so they are exact when read, and
//! documents it with [`document`].

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use utoipa::OpenApi;

use crate::admission::AdmissionState;
use crate::handle::ExecutorHandle;
use crate::status::ExecutorStatus;

/// Counts one push or revoke: `Ok(stale)` applied or stale, `Err` refused.
pub(crate) fn count_delivery<E>(kind: &'static str, result: &Result<bool, E>) {
    let outcome = match result {
        Ok(false) => "applied",
        Ok(true) => "stale",
        Err(_) => "refused",
    };
    metrics::counter!("leasehold_executor_deliveries_total", "kind" => kind, "outcome" => outcome)
        .increment(1);
}

/// Counts one register or renew attempt by its result (`granted`, `unknown_executor`, `failed`).
pub(crate) fn count_lease_call(call: &'static str, result: &'static str) {
    metrics::counter!("leasehold_executor_lease_calls_total", "call" => call, "result" => result)
        .increment(1);
}

/// Counts one grant that disowned the set applied before its request was sent, and was adopted
/// instead (P4.1, self-healing): a push that did not come from this cluster had been applied.
pub(crate) fn count_disowned_push() {
    metrics::counter!("leasehold_executor_disowned_pushes_total").increment(1);
}

/// Counts one push or revoke refused because its manager's certificate names a node that is not
/// a member of the cluster, or whose membership could not be checked (P13.3), by `reason`
/// (`not_member`, `unverified`).
pub(crate) fn count_push_refused_membership(reason: &'static str) {
    metrics::counter!("leasehold_executor_pushes_refused_total", "reason" => reason).increment(1);
}

/// Sets the gauges that describe `status`.
pub fn record_status_gauges(status: &ExecutorStatus) {
    let admitting = status.admission == AdmissionState::Admitting;
    metrics::gauge!("leasehold_executor_lease_remaining_seconds")
        .set(status.lease_remaining_ms as f64 / 1000.0);
    metrics::gauge!("leasehold_executor_shards_held").set(status.shards.len() as f64);
    metrics::gauge!("leasehold_executor_shards_admitting").set(if admitting {
        status.shards.len() as f64
    } else {
        0.0
    });
    metrics::gauge!("leasehold_executor_fenced").set(if admitting { 0.0 } else { 1.0 });
    metrics::gauge!("leasehold_executor_revision").set(status.revision as f64);
}

#[derive(Debug, Clone)]
pub(crate) struct Scrape {
    handle: ExecutorHandle,
    prometheus: PrometheusHandle,
}

/// `GET /metrics`, to merge into the executor's listener
/// ([`crate::Executor::start_with_documented_routes`], with [`document`]).
pub fn router(handle: ExecutorHandle, prometheus: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(get_metrics))
        .with_state(Scrape { handle, prometheus })
}

#[derive(OpenApi)]
#[openapi(paths(get_metrics))]
struct MetricsApi;

/// The OpenAPI paths of [`router`]: `GET /metrics`, under the executor document's `health` tag.
pub fn document() -> utoipa::openapi::OpenApi {
    MetricsApi::openapi()
}

/// Prometheus text exposition of the executor's metrics.
#[utoipa::path(
    get, path = "/metrics", tag = "health", operation_id = "get_metrics",
    responses((status = 200, description = "Prometheus text format 0.0.4.", body = String, content_type = "text/plain")),
)]
pub(crate) async fn get_metrics(State(scrape): State<Scrape>) -> impl IntoResponse {
    record_status_gauges(&scrape.handle.status());
    leasehold_api::process::record_process_metrics();
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        scrape.prometheus.render(),
    )
}
