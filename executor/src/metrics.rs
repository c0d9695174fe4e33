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
use leasehold_api::metric_catalog::{AtStart, MetricKind, MetricSpec};
use metrics_exporter_prometheus::PrometheusHandle;
use utoipa::OpenApi;

use crate::admission::AdmissionState;
use crate::handle::ExecutorHandle;
use crate::status::ExecutorStatus;

/// Every metric an executor exports: docs/OPERATIONS.md's "Metrics reference" documents each,
/// and the tests below hold the list to the sources and to that table. A process that installs
/// a recorder exports them all from start-up with
/// `leasehold_api::metric_catalog::export_from_start(METRICS)`, as the binary does.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: "leasehold_executor_lease_remaining_seconds",
        kind: MetricKind::Gauge,
        help: "The executor's own lease time left, 0 once lapsed.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_shards_held",
        kind: MetricKind::Gauge,
        help: "Shards in the held set.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_shards_admitting",
        kind: MetricKind::Gauge,
        help: "Shards admitting work now.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_fenced",
        kind: MetricKind::Gauge,
        help: "1 while self-fenced (not registered, lease lapsed, stopping), else 0.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_revision",
        kind: MetricKind::Gauge,
        help: "Revision of the last set applied.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_lease_calls_total",
        kind: MetricKind::Counter,
        help: "Register and renew attempts by outcome.",
        labels: &[
            ("call", &["register", "renew"]),
            ("result", &["granted", "unknown_executor", "failed"]),
        ],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_self_drains_total",
        kind: MetricKind::Counter,
        help: "Self-drains at a graceful stop (P17.2), by how each ended.",
        labels: &[(
            "outcome",
            &[
                "handed_over",
                "no_taker",
                "refused",
                "stalled",
                "timed_out",
                "forgotten",
                "shut_down",
            ],
        )],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_lapses_total",
        kind: MetricKind::Counter,
        help: "Lease lapses that fenced admission.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_deliveries_total",
        kind: MetricKind::Counter,
        help: "Pushes and revokes received, by outcome.",
        labels: &[
            ("kind", &["assignment", "revoke"]),
            ("outcome", &["applied", "stale", "refused"]),
        ],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_admission_changes_total",
        kind: MetricKind::Counter,
        help: "Admission starts and stops, one per admission log line.",
        labels: &[("change", &["start", "stop"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_pushes_refused_total",
        kind: MetricKind::Counter,
        help: "Pushes and revokes refused before their body was read, by why.",
        labels: &[("reason", &["not_member", "unverified"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executor_disowned_pushes_total",
        kind: MetricKind::Counter,
        help: "Grants below the revision applied when their request was sent.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_build_info",
        kind: MetricKind::Gauge,
        help: "This binary's release; always 1.",
        labels: &[("release", &[leasehold_api::RELEASE])],
        at_start: AtStart::Zero,
    },
];

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

/// Counts one self-drain at a graceful stop (P17.2) by how it ended: `handed_over` (every
/// shard's handoff completed), `no_taker` (no other executor could take them), `refused` (the
/// managers did not drain it), `stalled` (no shard left for a while: nobody took them),
/// `timed_out` (the grace ran short), `forgotten` (its registration went during the drain: reaped
/// after a lapse), `shut_down` (the executor stopped under the drain).
pub(crate) fn count_self_drain(outcome: &'static str) {
    metrics::counter!("leasehold_executor_self_drains_total", "outcome" => outcome).increment(1);
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use leasehold_api::metric_catalog::{
        documented_metrics, export_from_start, metric_names_in_source,
    };
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;

    /// Written by `leasehold_api::process` and documented in the manager's table ("the executor
    /// exports it too").
    const SHARED_WITH_THE_MANAGER: &[&str] = &["leasehold_build_info"];

    fn sources(dir: &Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.extend(metric_names_in_source(
                    &std::fs::read_to_string(&path).unwrap(),
                ));
            }
        }
    }

    /// Every metric the executor's sources write is listed, and nothing else is.
    #[test]
    fn the_list_is_what_the_sources_write() {
        let mut written = BTreeSet::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut written,
        );
        written.extend(
            SHARED_WITH_THE_MANAGER
                .iter()
                .map(|name| (*name).to_owned()),
        );
        let listed: BTreeSet<String> = METRICS.iter().map(|m| m.name.to_owned()).collect();
        assert_eq!(listed, written);
    }

    /// docs/OPERATIONS.md's table documents each metric of the list with its kind, its labels
    /// and their values.
    #[test]
    fn the_list_is_the_metrics_reference() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/OPERATIONS.md");
        let documented = documented_metrics(
            &std::fs::read_to_string(path).unwrap(),
            "### Executor (`leasehold-executor`)",
        );
        let mut documented_names: BTreeSet<&str> =
            documented.iter().map(|d| d.name.as_str()).collect();
        documented_names.extend(SHARED_WITH_THE_MANAGER);
        let listed_names: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
        assert_eq!(documented_names, listed_names);
        for doc in &documented {
            let spec = METRICS.iter().find(|m| m.name == doc.name).unwrap();
            assert_eq!(doc.kind, spec.kind.as_str(), "{}", doc.name);
            let labels: Vec<&str> = spec.labels.iter().map(|(label, _)| *label).collect();
            let documented_labels: Vec<&str> = doc.labels.iter().map(|(l, _)| l.as_str()).collect();
            assert_eq!(documented_labels, labels, "{}", doc.name);
            for ((_, values), (label, spec_values)) in doc.labels.iter().zip(spec.labels) {
                assert_eq!(values, spec_values, "{} {label}", doc.name);
            }
        }
    }

    /// From start-up, a scrape shows every series of the list at zero.
    #[test]
    fn every_metric_is_exported_from_start_up() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || export_from_start(METRICS));
        let scrape = handle.render();
        for spec in METRICS {
            for series in spec.series() {
                let labels: Vec<String> = series
                    .iter()
                    .map(|(label, value)| format!("{label}=\"{value}\""))
                    .collect();
                let line = if labels.is_empty() {
                    format!("{} 0", spec.name)
                } else {
                    format!("{}{{{}}} 0", spec.name, labels.join(","))
                };
                assert!(
                    scrape.lines().any(|l| l == line),
                    "{line} missing from:\n{scrape}"
                );
            }
        }
    }
}
