//! `leasehold-manager`: one manager replica.

use anyhow::Context;
use clap::Parser;
use leasehold_manager::config::{Args, LogFormat, ManagerConfig};
use metrics_exporter_prometheus::PrometheusBuilder;
use tracing_subscriber::EnvFilter;

fn init_tracing(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_tracing(args.log_format);
    let config = ManagerConfig::try_from(args)?;
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .context("installing the metrics recorder")?;
    leasehold_manager::server::run(config, Some(metrics), shutdown_signal())
        .await
        .context("leasehold-manager")
}
