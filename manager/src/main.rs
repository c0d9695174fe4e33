//! `leasehold-manager`: one manager replica.
//!
//! Exit status: 0 after a clean stop, 2 when the configuration is refused (one line on stderr
//! naming the flag), 74 when its storage failed (its Raft core stopped or its disk is full,
//! PROTOCOL P8.3; one line naming the cause), 1 when the manager fails otherwise while running.

use std::process::ExitCode;

use anyhow::Context;
use leasehold_api::process::{
    config_error, init_tracing, run_error, shutdown_signal, MANAGER_LOG_FILTER,
};
use leasehold_manager::handles::fatal::EXIT_RAFT_STOPPED;
use leasehold_manager::server::config::{Args, ManagerConfig};
use leasehold_manager::server::ServerError;

const PROGRAM: &str = "leasehold-manager";

/// Renewals allocate many small, short-lived buffers beside a large, long-lived state; glibc's
/// malloc took about a sixth of an idle leader's CPU at a million shards, and mimalloc less of
/// both CPU and memory (B10 in docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Args = leasehold_api::process::parse_args(leasehold_api::build_commit!());
    init_tracing(args.log_format, MANAGER_LOG_FILTER);
    leasehold_api::serve::raise_open_files_limit();
    let config = match ManagerConfig::try_from(args) {
        Ok(config) => config,
        Err(error) => return config_error(PROGRAM, &error),
    };
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let Some(stopped @ ServerError::StorageFailed { .. }) = error.downcast_ref() {
                // Out now, not through the runtime's shutdown, which would wait for blocking
                // threads: one may be stuck in an fsync of the failed disk.
                eprintln!("{PROGRAM}: {stopped}");
                std::process::exit(i32::from(EXIT_RAFT_STOPPED));
            }
            run_error(PROGRAM, error.as_ref())
        }
    }
}

async fn run(config: ManagerConfig) -> anyhow::Result<()> {
    let metrics = leasehold_manager::handles::metrics::prometheus_builder()
        .context("configuring the metrics exporter")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    leasehold_api::metric_catalog::export_from_start(leasehold_manager::handles::metrics::METRICS);
    leasehold_manager::server::run(config, Some(metrics), shutdown_signal()).await?;
    Ok(())
}
