//! `leasehold-manager`: one manager replica.

use anyhow::Context;
use clap::Parser;
use leasehold_api::process::{init_tracing, shutdown_signal};
use leasehold_manager::config::{Args, ManagerConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_tracing(args.log_format, "info,openraft=warn");
    let config = ManagerConfig::try_from(args)?;
    let metrics = leasehold_manager::metrics::prometheus_builder()
        .context("configuring the metrics exporter")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    leasehold_manager::server::run(config, Some(metrics), shutdown_signal())
        .await
        .context("leasehold-manager")
}
