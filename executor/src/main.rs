//! `leasehold-executor`: a Leasehold executor process with a demo workload (PROTOCOL §10).
//!
//! Serves the push endpoints and `GET /v1/work?key=K` on `--listen`, registers with the managers
//! once the listener answers (P8.1), and on SIGTERM or Ctrl-C stops admitting and deregisters
//! within `--shutdown-grace` (P3.7).
//!
//! Exit status: 0 after a clean stop, 2 when the configuration is refused (one line on stderr
//! naming the flag), 1 when it fails.
//!
//! The binary is the library plus the routes below ([`extra_routes`], documented by
//! [`extra_paths`]); its own modules are under `main/`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use clap::Parser;
use leasehold_api::process::{
    config_error, init_tracing, run_error, shutdown_signal, LogFormat, TlsArgs,
};
use leasehold_executor::{metrics, Executor, ExecutorConfig, ExecutorHandle, RunState};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

#[cfg(test)]
#[path = "main/end_to_end.rs"]
mod end_to_end;
#[path = "main/workload.rs"]
mod workload;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "leasehold-executor",
    version,
    about = "A Leasehold executor with a demo workload"
)]
struct Args {
    /// Manager base URLs, comma-separated; the executor follows the leader among them.
    #[arg(
        long,
        env = "LEASEHOLD_MANAGERS",
        value_delimiter = ',',
        required = true
    )]
    managers: Vec<String>,

    /// HOST:PORT to bind the push listener and the workload to.
    #[arg(long, env = "LEASEHOLD_LISTEN")]
    listen: String,

    /// URL managers push to; defaults to http(s)://<bound address>.
    #[arg(long, env = "LEASEHOLD_ADVERTISE")]
    advertise: Option<String>,

    /// A label for operators.
    #[arg(long, env = "LEASEHOLD_NAME")]
    name: Option<String>,

    /// Append the admission log (JSON lines, CLOCK_MONOTONIC stamps) to this file.
    #[arg(long, env = "LEASEHOLD_EVENT_LOG")]
    event_log: Option<PathBuf>,

    /// Bound on deregistering after a stop signal, e.g. `5s`.
    #[arg(long, env = "LEASEHOLD_SHUTDOWN_GRACE", default_value = "5s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,

    /// Bound on one HTTP attempt to a manager, e.g. `5s`.
    #[arg(long, env = "LEASEHOLD_REQUEST_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,

    /// Log output format.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(flatten)]
    tls: TlsArgs,
}

const PROGRAM: &str = "leasehold-executor";

/// What the binary serves beside the library's routes: the demo `GET /v1/work` and `GET
/// /metrics`.
fn extra_routes(handle: &ExecutorHandle, prometheus: PrometheusHandle) -> Router {
    workload::router(handle.clone()).merge(metrics::router(handle.clone(), prometheus))
}

/// The OpenAPI paths of [`extra_routes`]. With the library's, they make the document the
/// binary serves at `GET /v1/openapi.json`, checked in as `docs/openapi/executor.json`.
fn extra_paths() -> utoipa::openapi::OpenApi {
    let mut paths = workload::document();
    paths.merge(metrics::document());
    paths
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    init_tracing(args.log_format, "info");
    let config = ExecutorConfig {
        managers: args.managers,
        listen: args.listen,
        advertise: args.advertise,
        name: args.name,
        event_log: args.event_log,
        shutdown_grace: args.shutdown_grace,
        request_timeout: args.request_timeout,
        tls: args.tls.files(),
        insecure: args.tls.insecure,
    };
    let prometheus = match PrometheusBuilder::new().install_recorder() {
        Ok(prometheus) => prometheus,
        Err(error) => return run_error(PROGRAM, &error),
    };
    let started = Executor::start_with_documented_routes(config, extra_paths(), |handle| {
        extra_routes(handle, prometheus)
    })
    .await;
    let executor = match started {
        Ok(executor) => executor,
        Err(error) if error.is_config_error() => return config_error(PROGRAM, &error),
        Err(error) => return run_error(PROGRAM, &error),
    };
    let outcome = tokio::select! {
        () = shutdown_signal() => {
            tracing::info!("stop signal: stopping admission, then deregistering (P3.7)");
            executor.shutdown().await
        }
        state = executor.terminated() => {
            executor.shutdown().await;
            state
        }
    };
    match outcome {
        RunState::Stopped | RunState::Running => ExitCode::SUCCESS,
        RunState::Failed(reason) => {
            tracing::error!(%reason, "executor failed");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use leasehold_api::openapi::{check_or_update, to_pretty_json};
    use leasehold_executor::config::{DEFAULT_REQUEST_TIMEOUT, DEFAULT_SHUTDOWN_GRACE};
    use leasehold_executor::openapi;

    use super::*;

    /// What the binary serves at `GET /v1/openapi.json`.
    fn document() -> utoipa::openapi::OpenApi {
        openapi::document_with(extra_paths())
    }

    /// The checked-in document is what the binary serves.
    #[test]
    fn openapi_document_matches_the_checked_in_file() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/executor.json");
        if let Err(message) = check_or_update(&to_pretty_json(&document()), &path) {
            panic!("{message}");
        }
    }

    /// The binary documents the library's routes, the workload and `/metrics`, each operation
    /// under its own id (client generators name methods after them).
    #[test]
    fn openapi_binary_document_has_every_route_and_unique_operation_ids() {
        let doc = document();
        let paths: Vec<&str> = doc.paths.paths.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "/metrics",
                "/v1/assignment",
                "/v1/health",
                "/v1/openapi.json",
                "/v1/revoke",
                "/v1/status",
                "/v1/work"
            ]
        );
        let ids: Vec<String> = doc
            .paths
            .paths
            .values()
            .flat_map(|item| [&item.get, &item.put, &item.post, &item.delete])
            .flatten()
            .map(|operation| operation.operation_id.clone().unwrap_or_default())
            .collect();
        assert_eq!(ids.len(), paths.len(), "one operation per path: {ids:?}");
        let unique: BTreeSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "shared operation ids: {ids:?}");
        assert!(
            !unique.contains(&String::new()),
            "an operation without an id"
        );
    }

    #[test]
    fn flag_defaults_match_the_library_defaults() {
        let args = Args::try_parse_from([
            "leasehold-executor",
            "--managers",
            "http://127.0.0.1:1,http://127.0.0.1:2",
            "--listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        assert_eq!(args.shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
        assert_eq!(args.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(args.managers.len(), 2);
        assert_eq!(args.log_format, LogFormat::Text);
    }

    #[test]
    fn managers_are_required() {
        assert!(Args::try_parse_from(["leasehold-executor", "--listen", "127.0.0.1:0"]).is_err());
    }
}
