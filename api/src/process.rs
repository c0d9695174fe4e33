//! Process plumbing shared by the Leasehold binaries (`leasehold-manager`, `leasehold-executor`,
//! and the CLI): the log format flag and the tracing subscriber (feature `cli`), the stop signal,
//! one-line error reports with their exit status, and the process metrics. Libraries never set
//! up a subscriber; only a binary's `main` does.

#[cfg(feature = "cli")]
use std::io::IsTerminal;

use crate::client::error_chain;

#[cfg(feature = "cli")]
use tracing_subscriber::EnvFilter;

/// The manager's log filter unless `RUST_LOG` says otherwise (the test harness sets it too).
///
/// openraft logs at `info` about every message it sends and receives, so only its warnings show.
/// Of those, `openraft::core::raft_core`'s are all one notice: a message from a state the node
/// has since left (a vote it saved, a replication session of an earlier membership or of a
/// removed target) is dropped as stale. That is Raft working as designed, yet it appeared on
/// every member at every boot of a cluster: each node that saves a vote also answers itself,
/// and when it is not a candidate, or no longer one, openraft 0.9 drops that answer with a
/// warning. That module's errors still show; openraft's other warnings (replication and
/// storage failures) are untouched.
pub const MANAGER_LOG_FILTER: &str = "info,openraft=warn,openraft::core::raft_core=error";

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

/// The variable a build sets to the commit it builds, as `scripts/commit-id` prints it (HEAD's
/// hash, `-modified` for a changed tree); `scripts/release`, `scripts/test` and
/// `scripts/dev-cluster` set it.
pub const COMMIT_ENV: &str = "LEASEHOLD_COMMIT";

/// The commit this binary was built from, or `None` when the build did not say
/// ([`COMMIT_ENV`]). A macro so that `option_env!` is read where the binary itself is compiled:
/// a new commit then rebuilds only the three binaries, where a value compiled into this library
/// would rebuild every crate that depends on it.
#[macro_export]
macro_rules! build_commit {
    () => {
        option_env!("LEASEHOLD_COMMIT")
    };
}

/// What every binary's `--version` prints after its name: the release and the commit it was
/// built from, e.g. `0.2.0 (commit a3335f1c0ffe)`.
pub fn version_line(commit: Option<&str>) -> String {
    match commit.filter(|commit| !commit.is_empty()) {
        Some(commit) => format!("{} (commit {commit})", crate::RELEASE),
        None => format!(
            "{} (commit not recorded: built without {COMMIT_ENV})",
            crate::RELEASE
        ),
    }
}

/// Parses the process's arguments as `P::parse()` does, with `--version` printing
/// [`version_line`] of `commit` (the caller's [`build_commit!`]).
#[cfg(feature = "cli")]
pub fn parse_args<P: clap::Parser>(commit: Option<&str>) -> P {
    let mut command = versioned_command::<P>(commit);
    let mut matches = command.get_matches_mut();
    P::from_arg_matches_mut(&mut matches).unwrap_or_else(|error| error.format(&mut command).exit())
}

/// `P`'s command with [`version_line`] of `commit` as its version.
#[cfg(feature = "cli")]
fn versioned_command<P: clap::CommandFactory>(commit: Option<&str>) -> clap::Command {
    P::command().version(version_line(commit))
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

/// `--cert-file`, `--key-file`, `--trusted-ca-file` (PROTOCOL P13.2) and `--insecure` (P13.5):
/// the same flags, with the same environment variables, on every server binary.
#[cfg(feature = "cli")]
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct TlsArgs {
    /// This process's certificate (PEM, from `leaseholdctl certs init` or your CA). With the key
    /// and the CA, every listener speaks only TLS and requires a client certificate of the CA,
    /// and every outgoing call presents this one.
    #[arg(long, env = "LEASEHOLD_CERT_FILE", requires_all = ["key_file", "trusted_ca_file"])]
    pub cert_file: Option<std::path::PathBuf>,
    /// The private key of `--cert-file` (PEM).
    #[arg(long, env = "LEASEHOLD_KEY_FILE", requires_all = ["cert_file", "trusted_ca_file"])]
    pub key_file: Option<std::path::PathBuf>,
    /// The cluster's CA certificate (PEM): the only issuer trusted, for servers and clients.
    #[arg(long, env = "LEASEHOLD_TRUSTED_CA_FILE", requires_all = ["cert_file", "key_file"])]
    pub trusted_ca_file: Option<std::path::PathBuf>,
    /// Serve plaintext on a non-loopback address anyway (P13.5). Anyone who can reach the port
    /// can then act as any role; a warning is logged at start.
    #[arg(long, env = "LEASEHOLD_INSECURE")]
    pub insecure: bool,
}

#[cfg(feature = "cli")]
impl TlsArgs {
    /// The three files, when given (clap has checked they come together).
    pub fn files(&self) -> Option<crate::tls::TlsFiles> {
        Some(crate::tls::TlsFiles {
            cert_file: self.cert_file.clone()?,
            key_file: self.key_file.clone()?,
            trusted_ca_file: self.trusted_ca_file.clone()?,
        })
    }
}

/// P13.5: without TLS a process serves plaintext only on a loopback address, unless the
/// operator said `--insecure`. `Ok(true)`: plaintext on a non-loopback address, allowed by
/// `--insecure` (the caller logs the warning once the subscriber is up).
pub fn check_plaintext_listener(
    listen: std::net::IpAddr,
    tls: bool,
    insecure: bool,
) -> Result<bool, String> {
    if tls || listen.is_loopback() {
        return Ok(false);
    }
    if insecure {
        return Ok(true);
    }
    Err(format!(
        "--listen {listen} is not a loopback address and no TLS is configured: give --cert-file, \
         --key-file and --trusted-ca-file (PROTOCOL P13.2), or --insecure to serve plaintext \
         anyway (P13.5)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p13_5_plaintext_is_loopback_only_unless_insecure() {
        let loopback = "127.0.0.1".parse().unwrap();
        let v6_loopback = "::1".parse().unwrap();
        let public = "10.1.2.3".parse().unwrap();
        let any = "0.0.0.0".parse().unwrap();
        assert_eq!(check_plaintext_listener(loopback, false, false), Ok(false));
        assert_eq!(
            check_plaintext_listener(v6_loopback, false, false),
            Ok(false)
        );
        assert_eq!(check_plaintext_listener(public, true, false), Ok(false));
        assert!(check_plaintext_listener(public, false, false)
            .unwrap_err()
            .contains("--insecure"));
        assert!(check_plaintext_listener(any, false, false).is_err());
        assert_eq!(check_plaintext_listener(public, false, true), Ok(true));
    }

    #[test]
    fn the_version_names_the_commit_or_says_none_was_recorded() {
        assert_eq!(
            version_line(Some("a3335f1a1ab7")),
            format!("{RELEASE} (commit a3335f1a1ab7)", RELEASE = crate::RELEASE)
        );
        // An empty LEASEHOLD_COMMIT (a build outside a checkout) records nothing either.
        for unrecorded in [None, Some("")] {
            assert_eq!(
                version_line(unrecorded),
                format!(
                    "{} (commit not recorded: built without LEASEHOLD_COMMIT)",
                    crate::RELEASE
                )
            );
        }
    }

    /// `--version` prints the line, not the crate's bare version that clap's derive would.
    #[cfg(feature = "cli")]
    #[test]
    fn version_prints_the_version_line() {
        let error = versioned_command::<crate::ctl::Cli>(Some("c0ffee"))
            .try_get_matches_from(["leaseholdctl", "--version"])
            .unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::DisplayVersion);
        assert_eq!(
            error.to_string().trim_end(),
            format!("leaseholdctl {} (commit c0ffee)", crate::RELEASE)
        );
    }
}
