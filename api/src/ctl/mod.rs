//! `leaseholdctl`: inspect and operate a Leasehold cluster, in the manner of `etcdctl`.
//!
//! Every command talks to the managers through the typed [`Client`] (leader following, P7.1
//! patience). `-o table` (the default) prints aligned columns in a stable order; `-o json` prints
//! the wire types as they come from the API (one JSON document, or one JSON line per event for
//! `watch`). Failures map to distinct exit codes ([`exit::code`]).

mod args;
pub mod certs;
mod commands;
pub mod exit;
mod placement;
mod remove;
mod render;
mod replicas;
pub mod snapshot;
pub mod table;
pub mod watch;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

pub use self::args::*;
use self::commands::*;
pub use self::exit::{CtlError, EXIT_CODES_HELP};
use self::render::*;
use self::table::{fields, human_load, human_ms, opt, printable, shard_ranges, Table, NONE};
use crate::client::{Client, ClientConfig};
use crate::tls::{TlsConfig, TlsFiles};
use crate::wire::{
    check_namespace_name, check_namespace_settings, is_default_namespace, rollout_among,
    AddNodeRequest, AuditRecordView, ClusterInfo, CreateNamespaceRequest, ExecutorView, KeyRoute,
    MaintenanceView, NamespaceDeleted, NamespaceNameError, NamespaceView, PlanPreview, ReshardKind,
    ReshardProgress, ReshardReply, Role, SafeToStop, SchemaRange, SetNamespaceRequest, ShardView,
    StateView, DEFAULT_NAMESPACE, MAX_AUDIT_RECORDS, MAX_LEASE_DURATION_MS, MAX_NAME_BYTES,
    MAX_SHARD_COUNT, MAX_WATCH_WAIT, NAMESPACES_SCHEMA,
};

/// The dev cluster's managers (`scripts/dev-cluster`), so the CLI works there with no flags.
pub const DEFAULT_ENDPOINTS: &str =
    "http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// The API's JSON, for scripts (JSON lines for `watch`).
    Json,
}

/// The `--help` heading of the options every command takes.
pub const GLOBAL_OPTIONS_HEADING: &str = "Global options";

#[derive(Debug, Parser)]
#[command(
    name = "leaseholdctl",
    version,
    about = "Inspect and operate a Leasehold cluster",
    after_help = EXIT_CODES_HELP,
    // Every command takes these; under a heading of their own they follow the command's own
    // flags in its `--help` instead of burying them.
    next_help_heading = GLOBAL_OPTIONS_HEADING
)]
pub struct Cli {
    /// Manager URLs, comma-separated; any member will do (the CLI follows the leader).
    #[arg(long, env = "LEASEHOLD_ENDPOINTS", value_delimiter = ',', default_value = DEFAULT_ENDPOINTS, global = true)]
    pub endpoints: Vec<String>,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,

    /// Bound on one HTTP request (e.g. `5s`, `500ms`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, global = true)]
    pub request_timeout: Duration,

    /// How long to keep retrying while no leader is known or a manager is unreachable (P7.1).
    #[arg(long, default_value = "8s", value_parser = humantime::parse_duration, global = true)]
    pub patience: Duration,

    /// Read through the leader (linearizable) instead of from whichever manager answers.
    #[arg(long, global = true)]
    pub consistent: bool,

    /// The cluster's CA certificate (PEM); with --cert and --key, every call is TLS with that
    /// client certificate (PROTOCOL P13.2) and the endpoints are https://.
    #[arg(long, env = "LEASEHOLD_CACERT", global = true, requires_all = ["cert", "tls_key"])]
    pub cacert: Option<PathBuf>,

    /// This client's certificate (PEM), e.g. `admin.pem` from `leaseholdctl certs init`.
    #[arg(long, env = "LEASEHOLD_CERT", global = true, requires_all = ["cacert", "tls_key"])]
    pub cert: Option<PathBuf>,

    /// The private key of --cert (PEM).
    #[arg(long = "key", env = "LEASEHOLD_KEY", global = true, requires_all = ["cacert", "cert"])]
    pub tls_key: Option<PathBuf>,

    /// The namespace (PROTOCOL P18.1) that `shard list`, `shard show`, `route`, `executor list`,
    /// `plan`, `state` and `watch` read; absent: `default`. `certs issue` limits its certificate to it (and takes
    /// it repeated). Every other command refuses a namespace but `default`.
    #[arg(short = 'n', long, value_name = "NAME", global = true, value_parser = namespace_name)]
    pub namespace: Option<String>,

    #[command(subcommand)]
    pub command: Noun,
}

/// One member in `cluster status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub node_id: u64,
    pub address: String,
    pub voter: bool,
    /// That member's own `/v1/cluster`; absent when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<ClusterInfo>,
    /// Entries it has still to apply compared with the leader's last log index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl MemberStatus {
    /// Sorts by node id and sets each answering member's lag: entries the leader has logged
    /// that it has not applied yet (the leader is the member that names itself leader). Also the
    /// web console's members table.
    pub fn sorted_with_lag(mut statuses: Vec<MemberStatus>) -> Vec<MemberStatus> {
        statuses.sort_by_key(|s| s.node_id);
        let leader_last_log = statuses
            .iter()
            .filter_map(|s| s.info.as_ref())
            .find(|info| info.leader_id == Some(info.node_id))
            .and_then(|info| info.last_log_index);
        for status in &mut statuses {
            status.lag = match (leader_last_log, status.info.as_ref()) {
                (Some(last), Some(info)) => {
                    Some(last.saturating_sub(info.applied_index.unwrap_or(0)))
                }
                _ => None,
            };
        }
        statuses
    }
}

/// Where output goes and in which form.
pub(crate) struct Out<'a> {
    format: OutputFormat,
    writer: &'a mut dyn Write,
}

impl Out<'_> {
    pub(crate) fn text(&mut self, text: &str) -> Result<(), CtlError> {
        self.writer
            .write_all(text.as_bytes())
            .and_then(|()| self.writer.flush())
            .map_err(|e| CtlError::io("writing", "standard output", e))
    }

    fn json<T: Serialize>(&mut self, value: &T, pretty: bool) -> Result<(), CtlError> {
        let mut text = if pretty {
            serde_json::to_string_pretty(value)
        } else {
            serde_json::to_string(value)
        }
        .map_err(|e| CtlError::BadInput(format!("cannot encode output: {e}")))?;
        text.push('\n');
        self.text(&text)
    }

    /// A line of progress, shown in table form only: JSON output is the final value alone.
    pub(crate) fn progress(&mut self, line: &str) -> Result<(), CtlError> {
        match self.format {
            OutputFormat::Json => Ok(()),
            OutputFormat::Table => self.text(line),
        }
    }

    /// JSON of `value`, or the table `render` makes of it.
    pub(crate) fn show<T: Serialize>(
        &mut self,
        value: &T,
        render: impl FnOnce(&T) -> String,
    ) -> Result<(), CtlError> {
        match self.format {
            OutputFormat::Json => self.json(value, true),
            OutputFormat::Table => {
                let text = render(value);
                self.text(&text)
            }
        }
    }
}

impl Cli {
    /// The namespace `-n` names unless it is `default`: `-n default` then sends exactly the
    /// requests no `-n` does, which every manager, including those before namespaces, answers.
    fn namespace_named(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .filter(|namespace| !is_default_namespace(namespace))
    }

    fn client(&self, request_timeout: Duration) -> Result<Client, CtlError> {
        let config = ClientConfig {
            request_timeout,
            patience: self.patience,
            ..ClientConfig::default()
        };
        let tls = match (&self.cacert, &self.cert, &self.tls_key) {
            (Some(cacert), Some(cert), Some(key)) => Some(
                TlsConfig::load(&TlsFiles {
                    cert_file: cert.clone(),
                    key_file: key.clone(),
                    trusted_ca_file: cacert.clone(),
                })
                .map_err(|e| CtlError::BadInput(e.to_string()))?,
            ),
            _ => None,
        };
        Ok(Client::with_tls(
            self.endpoints.clone(),
            config,
            tls.as_ref(),
        )?)
    }
}

/// Runs one command, writing its output to `writer`. `watch` runs until its future is dropped.
pub async fn run(cli: Cli, writer: &mut dyn Write) -> Result<(), CtlError> {
    let mut out = Out {
        format: cli.output,
        writer,
    };
    let out = &mut out;
    if let Some(namespace) = cli.namespace_named() {
        if let Some(command) = without_namespaces(&cli.command) {
            return Err(namespace_refused(namespace, command));
        }
    }
    match &cli.command {
        Noun::Completion { shell } => run_completion(*shell, out),
        Noun::Certs { verb } => run_certs(verb, out),
        Noun::Snapshot { verb } => run_snapshot(&cli, verb, out).await,
        Noun::Cluster {
            verb: ClusterVerb::Status,
        } => run_cluster_status(&cli, out).await,
        Noun::Cluster {
            verb: ClusterVerb::Maintenance { switch },
        } => run_maintenance(&cli, *switch, out).await,
        Noun::Member { verb } => run_member(&cli, verb, out).await,
        Noun::Executor { verb } => run_executor(&cli, verb, out).await,
        Noun::Shard { verb } => run_shard(&cli, verb, out).await,
        Noun::Namespace { verb } => run_namespace(&cli, verb, out).await,
        Noun::State => run_state(&cli, out).await,
        Noun::Route { key } => run_route(&cli, key, out).await,
        Noun::Plan => run_plan(&cli, out).await,
        Noun::Audit => {
            let records = cli.client(cli.request_timeout)?.audit().await?;
            out.show(&records, |records| render_audit(records))
        }
        Noun::Lease {
            verb: LeaseVerb::List,
        } => run_lease_list(&cli, out).await,
        Noun::Watch { wait } => run_watch_for(&cli, *wait, out).await,
    }
}

/// The command's name when it reads no namespace but `default` (or none at all), so that `-n`
/// naming another is refused there instead of silently answered from `default`. Every command
/// is listed, so a new one has to be placed on one side or the other.
fn without_namespaces(command: &Noun) -> Option<&'static str> {
    match command {
        Noun::Shard { verb } => match verb {
            ShardVerb::List | ShardVerb::Show { .. } => None,
            ShardVerb::Move { .. } => Some("shard move"),
            ShardVerb::Pin { .. } => Some("shard pin"),
            ShardVerb::Unpin { .. } => Some("shard unpin"),
        },
        Noun::Executor { verb } => match verb {
            ExecutorVerb::List => None,
            ExecutorVerb::Show { .. } => Some("executor show"),
            ExecutorVerb::Drain { .. } => Some("executor drain"),
            ExecutorVerb::Undrain { .. } => Some("executor undrain"),
            // -n is checked against the executor's namespace.
            ExecutorVerb::SafeToStop { .. } => None,
            ExecutorVerb::Remove { .. } => Some("executor remove"),
        },
        Noun::Route { .. } => None,
        Noun::Namespace { verb } => Some(match verb {
            NamespaceVerb::Create { .. } => "namespace create",
            NamespaceVerb::List => "namespace list",
            NamespaceVerb::Show { .. } => "namespace show",
            NamespaceVerb::Set { .. } => "namespace set",
            NamespaceVerb::Reshard { .. } => "namespace reshard",
            NamespaceVerb::Delete { .. } => "namespace delete",
        }),
        Noun::Cluster { verb } => Some(match verb {
            ClusterVerb::Status => "cluster status",
            ClusterVerb::Maintenance { .. } => "cluster maintenance",
        }),
        Noun::Member { verb } => Some(match verb {
            MemberVerb::List => "member list",
            MemberVerb::Add { .. } => "member add",
            MemberVerb::Remove { .. } => "member remove",
            MemberVerb::SafeToStop { .. } => "member safe-to-stop",
        }),
        Noun::Lease {
            verb: LeaseVerb::List,
        } => Some("lease list"),
        Noun::Snapshot { verb } => Some(match verb {
            SnapshotVerb::Save { .. } => "snapshot save",
            SnapshotVerb::Inspect { .. } => "snapshot inspect",
            SnapshotVerb::Restore { .. } => "snapshot restore",
        }),
        Noun::Certs { verb } => match verb {
            CertsVerb::Init { .. } => Some("certs init"),
            // -n/--namespace is its own: the namespaces the certificate is limited to.
            CertsVerb::Issue(_) => None,
        },
        Noun::State => None,
        Noun::Plan => None,
        Noun::Audit => Some("audit"),
        Noun::Watch { .. } => None,
        Noun::Completion { .. } => Some("completion"),
    }
}

fn namespace_refused(namespace: &str, command: &str) -> CtlError {
    let hint = if command.starts_with("namespace ") {
        "name the namespace as its argument instead"
    } else {
        "only `shard list`, `shard show`, `route`, `executor list`, `executor safe-to-stop`, \
         `plan`, `state` and `watch` read one namespace"
    };
    CtlError::BadInput(format!(
        "`{command}` does not take -n/--namespace {namespace}: {hint}"
    ))
}

#[cfg(test)]
mod tests;
