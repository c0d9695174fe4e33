//! Process plumbing shared by the Leasehold binaries (`leasehold-manager`, `leasehold-executor`,
//! and the CLI): the log format flag and the tracing subscriber (feature `cli`), the stop signal,
//! one-line error reports with their exit status, and the process metrics. Libraries never set
//! up a subscriber; only a binary's `main` does.

#[cfg(feature = "cli")]
use std::io::IsTerminal;

use crate::client::error_chain;

#[cfg(feature = "cli")]
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[cfg(feature = "cli")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global tracing subscriber on stderr. `RUST_LOG` overrides `default_filter`.
#[cfg(feature = "cli")]
pub fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a terminal, not for log files and collectors.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut sigterm) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = sigterm.recv() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; stopping on Ctrl-C only");
            let _ = ctrl_c.await;
        }
    }
}

/// Sets the standard process metrics every Prometheus exporter has (`process_cpu_seconds_total`,
/// `process_resident_memory_bytes`, `process_open_fds`, `process_start_time_seconds`, ...) and
/// `leasehold_build_info{release}` (always 1) on the installed `metrics` recorder. Called by
/// each `/metrics` handler just before it renders, so the figures are read at scrape time;
/// without a recorder it does nothing.
pub fn record_process_metrics() {
    metrics::gauge!("leasehold_build_info", "release" => crate::RELEASE).set(1.0);
    static COLLECTOR: std::sync::OnceLock<metrics_process::Collector> = std::sync::OnceLock::new();
    COLLECTOR
        .get_or_init(|| {
            let collector = metrics_process::Collector::default();
            collector.describe();
            collector
        })
        .collect();
}

/// Exit status of a binary refused its configuration: the same as clap's for a usage error, so
/// scripts tell "fix the flags" from "it failed while running" (1).
pub const EXIT_CONFIG_ERROR: u8 = 2;

/// Reports a configuration error as one line on stderr (`program: error: cause: ...`) and
/// returns [`EXIT_CONFIG_ERROR`]. Never a backtrace: `RUST_BACKTRACE=1` is set on many machines,
/// and a wrong flag is the operator's to fix, not a program fault.
pub fn config_error(
    program: &str,
    error: &(dyn std::error::Error + 'static),
) -> std::process::ExitCode {
    eprintln!("{program}: {}", error_chain(error));
    std::process::ExitCode::from(EXIT_CONFIG_ERROR)
}

/// Reports a failure while running as one line on stderr, with every cause, and returns exit
/// status 1. For a binary's `main` in place of returning the error, which would print a
/// backtrace under `RUST_BACKTRACE=1`.
pub fn run_error(
    program: &str,
    error: &(dyn std::error::Error + 'static),
) -> std::process::ExitCode {
    eprintln!("{program}: {}", error_chain(error));
    std::process::ExitCode::FAILURE
}
