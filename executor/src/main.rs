//! `leasehold-executor`: a Leasehold executor process with a demo workload (PROTOCOL §10).
//!
//! Serves the push endpoints and `GET /v1/work?key=K` on `--listen`, registers with the managers
//! once the listener answers (P8.1), reports the rate of work it admits per shard in its renewals
//! (P15.1), and on SIGTERM or Ctrl-C stops admitting and deregisters within `--shutdown-grace`
//! (P3.7).
//!
//! Exit status: 0 after a clean stop, 2 when the configuration is refused (one line on stderr
//! naming the flag), 1 when it fails.
//!
//! The binary is the library plus the routes below ([`extra_routes`], documented by
//! [`extra_paths`]); its own modules are under `main/`.

use std::process::ExitCode;

use axum::Router;
use clap::Parser;
use leasehold_api::process::{config_error, init_tracing, run_error, shutdown_signal};
use leasehold_executor::{
    metrics, Executor, ExecutorArgs, ExecutorConfig, ExecutorHandle, RunState, StartError,
};
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
    about = "A Leasehold executor: holds a lease and shards with their epochs",
    long_about = "A Leasehold executor: registers with the managers, holds a lease and the \
shards it is given with their epochs, serves the managers' pushes and revokes, stops admitting \
when its lease lapses and, on SIGTERM, drains itself: each shard is served until its handoff to \
another executor completes, then it deregisters (PROTOCOL P17.2). Beside the protocol it serves \
GET /v1/status, GET /metrics and a demo workload, GET /v1/work?key=K, which admits a key's \
work only while this executor holds its shard. With --local-listen it is the sidecar of a \
service in any language on this machine, which asks it what it may admit (PROTOCOL §16)."
)]
struct Args {
    #[command(flatten)]
    executor: ExecutorArgs,
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

/// The library's configuration from the flags, with the binary's own choice: the demo workload
/// records every request it admits (`workload.rs`), so its renewals report its request rate per
/// shard (P15.1), unless it is a sidecar.
fn binary_config(args: &ExecutorArgs) -> Result<ExecutorConfig, StartError> {
    let mut config = args.config()?;
    // A sidecar does not see its service's work, and reporting zeros is not the same as not
    // reporting.
    config.report_loads = config.local_listen.is_none() && config.app_url.is_none();
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = leasehold_api::process::parse_args::<Args>(leasehold_api::build_commit!()).executor;
    init_tracing(args.log_format, "info");
    leasehold_api::serve::raise_open_files_limit();
    let config = match binary_config(&args) {
        Ok(config) => config,
        Err(error) => return config_error(PROGRAM, &error),
    };
    let prometheus = match PrometheusBuilder::new().install_recorder() {
        Ok(prometheus) => prometheus,
        Err(error) => return run_error(PROGRAM, &error),
    };
    leasehold_api::metric_catalog::export_from_start(metrics::METRICS);
    let started = Executor::start_with_documented_routes(config, extra_paths(), |handle| {
        extra_routes(handle, prometheus)
    })
    .await;
    let executor = match started {
        Ok(executor) => executor,
        Err(error) if error.is_config_error() => return config_error(PROGRAM, &error),
        Err(error) => return run_error(PROGRAM, &error),
    };
    let outcome = executor.run_until(shutdown_signal()).await;
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

    /// The published document speaks to readers in any language: no Rust link in a description,
    /// no integer format only utoipa knows.
    #[test]
    fn openapi_document_has_no_rust_artefacts() {
        assert_eq!(
            leasehold_api::openapi::rust_artefact(&to_pretty_json(&document())),
            None
        );
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
                "/v1/prepare",
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
        assert_eq!(args.executor.shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
        let config = binary_config(&args.executor).unwrap();
        assert_eq!(
            config.capacity,
            ExecutorConfig::new(vec![], "127.0.0.1:0").capacity
        );
        assert!(
            config.report_loads,
            "P15.1: the binary reports its request rate"
        );
        assert_eq!(args.executor.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(args.executor.managers.len(), 2);
        assert_eq!(
            args.executor.log_format,
            leasehold_api::process::LogFormat::Text
        );
    }

    #[test]
    fn the_capacity_flag_sets_the_capacity() {
        let args = Args::try_parse_from([
            "leasehold-executor",
            "--managers",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--capacity",
            "3",
        ])
        .unwrap();
        assert_eq!(binary_config(&args.executor).unwrap().capacity, 3);
    }

    #[test]
    fn p17_3_the_app_version_flag_sets_the_app_version() {
        let args = Args::try_parse_from([
            "leasehold-executor",
            "--managers",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--app-version",
            "2.4.1",
        ])
        .unwrap();
        assert_eq!(
            binary_config(&args.executor)
                .unwrap()
                .app_version
                .as_deref(),
            Some("2.4.1")
        );
    }

    #[test]
    fn p18_1_the_namespace_flag_names_the_namespace_and_a_bad_one_is_refused() {
        let parse = |namespace: Option<&str>| {
            let mut argv = vec![
                "leasehold-executor",
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
            ];
            if let Some(namespace) = namespace {
                argv.extend(["--namespace", namespace]);
            }
            binary_config(&Args::try_parse_from(argv).unwrap().executor)
        };
        assert_eq!(parse(None).unwrap().namespace, "default");
        assert_eq!(parse(Some("orders")).unwrap().namespace, "orders");
        for bad in ["Orders", "", "x-", "a_b"] {
            let error = parse(Some(bad)).unwrap_err();
            assert!(
                error.to_string().contains("--namespace"),
                "{bad:?}: {error}"
            );
        }
    }

    #[test]
    fn p18_3_label_flags_set_the_labels_and_bad_ones_are_refused() {
        let parse = |labels: &[&str]| {
            let mut argv = vec![
                "leasehold-executor",
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
            ];
            for label in labels {
                argv.extend(["--label", label]);
            }
            binary_config(&Args::try_parse_from(argv).unwrap().executor)
        };
        let config = parse(&["zone=a", "rack=r1,tier=gold"]).unwrap();
        assert_eq!(
            config.labels.into_iter().collect::<Vec<_>>(),
            [("rack", "r1"), ("tier", "gold"), ("zone", "a")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        for bad in [
            &["zone"][..],
            &["Zone=a"],
            &["zone=a", "zone=b"],
            &["zone=a b"],
        ] {
            let error = parse(bad).unwrap_err();
            assert!(error.to_string().contains("--label"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn p16_1_the_sidecar_flag_takes_loopback_or_a_unix_socket_and_reports_no_loads() {
        let parse = |local: &str| {
            Args::try_parse_from([
                "leasehold-executor",
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--local-listen",
                local,
            ])
        };
        let args = parse("127.0.0.1:7201").unwrap();
        let config = binary_config(&args.executor).unwrap();
        assert!(config.local_listen.is_some());
        assert!(
            !config.report_loads,
            "a sidecar does not see its service's work"
        );
        assert!(parse("unix:/tmp/leasehold.sock").is_ok());
        let refused = binary_config(&parse("0.0.0.0:7201").unwrap().executor)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("not a loopback address"), "{refused}");
    }

    #[test]
    fn managers_are_required() {
        assert!(Args::try_parse_from(["leasehold-executor", "--listen", "127.0.0.1:0"]).is_err());
    }
}
