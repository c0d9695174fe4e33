//! `leasehold-executor`: a Leasehold executor process with a demo workload (PROTOCOL §10).
//!
//! Serves the push endpoints and `GET /v1/work?key=K` on `--listen`, registers with the managers
//! once the listener answers (P8.1), and on SIGTERM or Ctrl-C stops admitting and deregisters
//! within `--shutdown-grace` (P3.7).
//!
//! Exit status: 0 after a clean stop, 2 when the configuration is refused (one line on stderr
//! naming the flag), 1 when it fails.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use leasehold_api::process::{config_error, init_tracing, run_error, shutdown_signal, LogFormat};
use leasehold_executor::{metrics, workload, Executor, ExecutorConfig, RunState};
use metrics_exporter_prometheus::PrometheusBuilder;

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

    /// URL managers push to; defaults to http://<bound address>.
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
}

const PROGRAM: &str = "leasehold-executor";

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
    };
    let prometheus = match PrometheusBuilder::new().install_recorder() {
        Ok(prometheus) => prometheus,
        Err(error) => return run_error(PROGRAM, &error),
    };
    let started = Executor::start_with_routes(config, |handle| {
        workload::router(handle.clone()).merge(metrics::router(handle.clone(), prometheus))
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
    use leasehold_executor::config::{DEFAULT_REQUEST_TIMEOUT, DEFAULT_SHUTDOWN_GRACE};

    use super::*;

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
