//! `leaseholdctl`: the Leasehold operator CLI (see `leasehold_api::ctl` and docs/OPERATIONS.md).

use std::io::Write;
use std::process::ExitCode;

use leasehold_api::ctl::{self, Cli, Noun};
use leasehold_api::process::{init_tracing, LogFormat};

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = leasehold_api::process::parse_args(leasehold_api::build_commit!());
    // Quiet unless asked (RUST_LOG=debug shows the client's retries).
    init_tracing(LogFormat::Text, "warn");
    let watching = matches!(cli.command, Noun::Watch { .. });
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = tokio::select! {
        result = ctl::run(cli, &mut out) => result,
        _ = tokio::signal::ctrl_c() => {
            let _ = out.flush();
            // Ctrl-C is how `watch` ends; anything else was interrupted (128 + SIGINT).
            return if watching { ExitCode::SUCCESS } else { ExitCode::from(130) };
        }
    };
    let _ = out.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", error.message_line());
            ExitCode::from(error.exit_code())
        }
    }
}
