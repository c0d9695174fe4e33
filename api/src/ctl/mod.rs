//! `leaseholdctl`: inspect and operate a Leasehold cluster, in the manner of `etcdctl`.
//!
//! Every command talks to the managers through the typed [`Client`] (leader following, P7.1
//! patience). `-o table` (the default) prints aligned columns in a stable order; `-o json` prints
//! the wire types as they come from the API (one JSON document, or one JSON line per event for
//! `watch`). Failures map to distinct exit codes ([`exit::code`]).

pub mod certs;
pub mod exit;
mod placement;
mod remove;
pub mod snapshot;
pub mod table;
pub mod watch;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

pub use self::exit::{CtlError, EXIT_CODES_HELP};
use self::table::{fields, human_load, human_ms, opt, printable, shard_ranges, Table, NONE};
use crate::client::{Client, ClientConfig};
use crate::tls::{TlsConfig, TlsFiles};
use crate::wire::{
    check_namespace_name, check_namespace_settings, is_default_namespace, rollout_among,
    AddNodeRequest, AuditRecordView, ClusterInfo, CreateNamespaceRequest, ExecutorView,
    MaintenanceView, NamespaceDeleted, NamespaceNameError, NamespaceView, PlanPreview, SafeToStop,
    SchemaRange, SetNamespaceRequest, ShardView, StateView, DEFAULT_NAMESPACE, MAX_AUDIT_RECORDS,
    MAX_LEASE_DURATION_MS, MAX_SHARD_COUNT, MAX_WATCH_WAIT,
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

#[derive(Debug, Parser)]
#[command(
    name = "leaseholdctl",
    version,
    about = "Inspect and operate a Leasehold cluster",
    after_help = EXIT_CODES_HELP
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

#[derive(Debug, Subcommand)]
pub enum Noun {
    /// The Raft group, and maintenance mode.
    Cluster {
        #[command(subcommand)]
        verb: ClusterVerb,
    },
    /// Manager membership.
    Member {
        #[command(subcommand)]
        verb: MemberVerb,
    },
    /// Executors: list, show, drain.
    Executor {
        #[command(subcommand)]
        verb: ExecutorVerb,
    },
    /// Shards: owners, epochs, handoffs, pins; move and pin one.
    Shard {
        #[command(subcommand)]
        verb: ShardVerb,
    },
    /// Namespaces (PROTOCOL P18.1): shard spaces of their own in one cluster, each with its own
    /// shard count, lease and executor bound; `default` is the one every cluster has.
    Namespace {
        #[command(subcommand)]
        verb: NamespaceVerb,
    },
    /// The whole state at one revision: a summary, or with `-o json` everything (`/v1/state`).
    State,
    /// The plan the leader would commit next, without committing it (PROTOCOL P17.4): each
    /// move's shard, owner now, new owner and reason.
    Plan,
    /// Where to send work for a key (shard = FNV-1a 64 of the key mod the shard count).
    Route {
        /// The key, as UTF-8 bytes.
        key: String,
    },
    /// The operator actions the cluster recorded (PROTOCOL P17.4), oldest first: revision, time
    /// (UTC), who, what and on which executor, shard or manager. Needs the admin role under TLS.
    Audit,
    /// Executor leases.
    Lease {
        #[command(subcommand)]
        verb: LeaseVerb,
    },
    /// Print changes as they happen (executors joining and leaving, drains, shard moves) until
    /// Ctrl-C.
    Watch {
        /// Longest wait of one blocking query before it is renewed.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        wait: Duration,
    },
    /// Backups: save from a live cluster, restore into a new one.
    Snapshot {
        #[command(subcommand)]
        verb: SnapshotVerb,
    },
    /// Certificates for TLS and roles (PROTOCOL §13).
    Certs {
        #[command(subcommand)]
        verb: CertsVerb,
    },
    /// Print a shell completion script (e.g. `leaseholdctl completion bash > /etc/bash_completion.d/leaseholdctl`).
    Completion { shell: clap_complete::Shell },
}

#[derive(Debug, Subcommand)]
pub enum CertsVerb {
    /// Write a new CA and one certificate per role into DIR.
    ///
    /// The files: `ca.pem`, `ca-key.pem`, `manager-<id>.pem` and `manager-<id>-key.pem` for ids
    /// 1..N, `executor.pem`, `executor-key.pem`, `admin.pem`, `admin-key.pem`. Each certificate
    /// is valid for 127.0.0.1, localhost and each --host. Existing files are not replaced without
    /// --force.
    Init {
        /// Where to write the files (created, mode 0700, if absent).
        #[arg(long)]
        dir: PathBuf,
        /// Issue manager certificates for node ids 1..=N.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=certs::MAX_MANAGERS))]
        managers: u64,
        /// Another name (IP address or DNS name) every certificate is valid for; repeatable.
        #[arg(long = "host", value_name = "NAME")]
        hosts: Vec<String>,
        /// Replace existing files instead of refusing.
        #[arg(long)]
        force: bool,
    },
    /// Issue one executor or admin certificate, signed by the CA in DIR, optionally limited to
    /// namespaces (PROTOCOL P18.2).
    ///
    /// Reads `ca.pem` and `ca-key.pem` (written by `certs init`) and writes `<STEM>.pem` and
    /// `<STEM>-key.pem` into DIR: by default `executor` or `admin`, or for a limited certificate
    /// `executor-<first namespace>` (`admin-<...>`). With -n/--namespace the certificate carries
    /// one role URI `urn:leasehold:<role>:<namespace>` per namespace and acts in those only;
    /// without, it acts in every namespace. The certificate has the shape of `certs init`'s: valid
    /// for 127.0.0.1, localhost and each --host, for a year (no longer than the CA). Existing
    /// files are not replaced without --force.
    Issue(certs::IssueOptions),
}

#[derive(Debug, Subcommand)]
pub enum ClusterVerb {
    /// Every member's own view: role, leader, term, log positions and lag behind the leader.
    /// Exits 5 if any member did not answer (the others are still printed).
    Status,
    /// Show maintenance mode, or turn it on or off (PROTOCOL P17.4). While it is on, placement is
    /// frozen: no balancing, no shards for joiners, drains wait; shards nobody holds are still
    /// placed and expired leases still reaped. Turning it needs the admin role under TLS and
    /// cluster version 12.
    Maintenance {
        /// `on` or `off`; without it, show whether it is on.
        #[arg(value_enum)]
        switch: Option<Switch>,
    },
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// A namespace name checked as the managers check it (P18.1), so a typo is a usage error here
/// instead of a round trip and a `400`.
fn namespace_name(name: &str) -> Result<String, NamespaceNameError> {
    check_namespace_name(name).map(|()| name.to_owned())
}

/// A namespace's lease in whole milliseconds, what the wire carries: a finer duration would be
/// cut without a word, and one outside 1ms..=24h is refused by the managers anyway.
fn lease_ms(text: &str) -> Result<u64, String> {
    let lease = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    let whole_ms = lease.subsec_nanos() % 1_000_000 == 0;
    match u64::try_from(lease.as_millis()) {
        Ok(ms) if whole_ms && check_namespace_settings(ms, None).is_ok() => Ok(ms),
        _ => Err(format!(
            "a lease is whole milliseconds from 1ms to {} (PROTOCOL P18.1)",
            humantime::format_duration(Duration::from_millis(MAX_LEASE_DURATION_MS))
        )),
    }
}

#[derive(Debug, Subcommand)]
pub enum MemberVerb {
    /// Voters and learners.
    List,
    /// Add a manager (started with `--join`, or not yet started): it is added as a learner,
    /// caught up, then promoted to voter.
    Add {
        /// Its Raft node id.
        node_id: u64,
        /// Its advertised URL.
        address: String,
    },
    /// Remove a manager from the Raft group.
    Remove { node_id: u64 },
    /// Whether stopping this manager now leaves the other voters a caught-up majority
    /// (PROTOCOL P17.4): prints the verdict and its reason; exits 7 when it is not safe.
    SafeToStop { node_id: u64 },
}

#[derive(Debug, Subcommand)]
pub enum ExecutorVerb {
    /// All registered executors.
    List,
    /// One executor.
    Show { executor_id: String },
    /// Move an executor's shards to the others (through the normal release handoff) and give it
    /// no new ones; `--cancel` (or `undrain`) reverses it.
    Drain {
        executor_id: String,
        /// Cancel a drain instead.
        #[arg(long)]
        cancel: bool,
    },
    /// Cancel a drain.
    Undrain { executor_id: String },
    /// Whether stopping this executor now leaves its shards a place to go (PROTOCOL P17.4):
    /// prints the verdict and its reason; exits 7 when it is not safe.
    SafeToStop { executor_id: String },
    /// Deregister an executor as an operator (PROTOCOL P5.5): one that still holds shards is
    /// drained first, and removed once its shards have moved by handoff; until then it is shown
    /// draining. Needs the admin role under TLS.
    Remove {
        executor_id: String,
        /// Ask again until it is removed (each handoff ends with its answer or its lease).
        #[arg(long)]
        wait: bool,
        /// With `--wait`: give up after this long (exit code 6; the removal goes on).
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        wait_timeout: Duration,
    },
}

#[derive(Debug, Subcommand)]
pub enum ShardVerb {
    /// Every shard's owner, epoch, handoff and pin.
    List,
    /// One shard, with its route.
    Show { shard: u32 },
    /// Hand a shard to an executor now, through the normal handoff (PROTOCOL P17.4, P5.2); the
    /// executor must be live and not draining. Prints the shard once the move is committed.
    /// Needs the admin role under TLS and cluster version 12.
    Move {
        /// The shard number.
        shard: u32,
        /// The executor to hand it to.
        #[arg(long, value_name = "EXECUTOR_ID")]
        to: String,
    },
    /// Pin a shard to an executor (PROTOCOL P17.4): the planner keeps it there, or moves it
    /// there, while that executor is live and not draining. Needs the admin role under TLS.
    Pin {
        /// The shard number.
        shard: u32,
        /// The executor to keep it on.
        executor_id: String,
    },
    /// Remove a shard's pin: the planner places it freely again. Needs the admin role under TLS.
    Unpin {
        /// The shard number.
        shard: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum NamespaceVerb {
    /// Create a namespace, its shards unowned until executors register into it. A repeat with
    /// the same settings succeeds and changes nothing; other settings for a name in use are a
    /// conflict. Needs the admin role under TLS and cluster version 12.
    Create {
        /// Its name: 1 to 63 of lowercase letters, digits and `-`, starting and ending with a
        /// letter or digit.
        #[arg(value_parser = namespace_name)]
        name: String,
        /// Its shard count, which never changes: its shards are 0..N.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SHARD_COUNT)))]
        shards: u32,
        /// The lease its executors' grants carry (e.g. `60s`; 1ms to 24h); absent: the managers'
        /// `--lease-duration`.
        #[arg(long = "lease", value_name = "DURATION", value_parser = lease_ms)]
        lease_ms: Option<u64>,
        /// Most executors registered in it at once; absent: no bound but the cluster's.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_executors: Option<u32>,
        #[command(flatten)]
        placement: placement::PlacementArgs,
    },
    /// Every namespace, `default` included: shard count, lease, executors, owned shards, bound.
    List,
    /// One namespace.
    Show {
        /// The namespace's name.
        #[arg(value_parser = namespace_name)]
        name: String,
    },
    /// Change a namespace's lease (for grants from now on), executor bound (for registrations
    /// from now on: a lower bound removes no one) or placement settings (for plans from now on,
    /// cluster version 12); its shard count never changes. Needs the admin role under TLS.
    #[command(group(
        clap::ArgGroup::new("change")
            .required(true)
            .multiple(true)
            .args([
                "lease_ms",
                "max_executors",
                "no_max_executors",
                "load_placement",
                "balance_tolerance",
                "max_balance_moves",
                "prefer",
            ])
    ))]
    Set {
        /// The namespace's name.
        #[arg(value_parser = namespace_name)]
        name: String,
        /// The new lease (e.g. `60s`; 1ms to 24h). Not for `default`, whose lease is the
        /// managers' `--lease-duration`.
        #[arg(long = "lease", value_name = "DURATION", value_parser = lease_ms)]
        lease_ms: Option<u64>,
        /// A new bound on the executors registered in it at once.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "no_max_executors")]
        max_executors: Option<u32>,
        /// Remove its executor bound.
        #[arg(long)]
        no_max_executors: bool,
        #[command(flatten)]
        placement: placement::PlacementArgs,
    },
    /// Delete a namespace. Refused while any of its shards has an owner: drain its executors
    /// first; those still registered then hold nothing and are removed with it. Deleting it
    /// again succeeds. Needs the admin role under TLS.
    Delete {
        /// The namespace's name.
        #[arg(value_parser = namespace_name)]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum LeaseVerb {
    /// Every executor's lease: time remaining on the answering manager's clock.
    List,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotVerb {
    /// Save the leader's current state to FILE (checksummed; written atomically).
    Save { file: PathBuf },
    /// Check FILE and print its header.
    Inspect { file: PathBuf },
    /// Check FILE and prepare the empty DATA_DIR so that a manager started on it comes up with
    /// the backed-up state. Restore the same file into every member's data directory of a new
    /// cluster, then start the members with their usual flags (docs/OPERATIONS.md).
    Restore {
        file: PathBuf,
        /// The new manager's data directory (absent or empty).
        #[arg(long)]
        data_dir: PathBuf,
    },
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
        Noun::Completion { shell } => {
            let mut command = Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut command, "leaseholdctl", &mut script);
            out.writer
                .write_all(&script)
                .map_err(|e| CtlError::io("writing", "standard output", e))
        }
        Noun::Certs {
            verb:
                CertsVerb::Init {
                    dir,
                    managers,
                    hosts,
                    force,
                },
        } => {
            let report = certs::init(&certs::InitOptions {
                dir: dir.clone(),
                managers: *managers,
                hosts: hosts.clone(),
                force: *force,
            })?;
            out.show(&report, certs::render)
        }
        Noun::Certs {
            verb: CertsVerb::Issue(options),
        } => {
            let report = certs::issue(options)?;
            out.show(&report, certs::render_issue)
        }
        Noun::Snapshot { verb } => run_snapshot(&cli, verb, out).await,
        Noun::Cluster {
            verb: ClusterVerb::Status,
        } => run_cluster_status(&cli, out).await,
        Noun::Cluster {
            verb: ClusterVerb::Maintenance { switch },
        } => {
            let client = cli.client(cli.request_timeout)?;
            let view = match switch {
                None => client.maintenance().await?,
                Some(switch) => client.set_maintenance(*switch == Switch::On).await?,
            };
            out.show(&view, |view| render_maintenance(view, *switch))
        }
        Noun::Member { verb } => run_member(&cli, verb, out).await,
        Noun::Executor { verb } => run_executor(&cli, verb, out).await,
        Noun::Shard { verb } => run_shard(&cli, verb, out).await,
        Noun::Namespace { verb } => run_namespace(&cli, verb, out).await,
        Noun::State => {
            let client = cli.client(cli.request_timeout)?;
            let state = match cli.namespace_named() {
                None => client.state(cli.consistent).await?,
                Some(namespace) => client.state_in(namespace, cli.consistent).await?,
            };
            out.show(&state, render_state_summary)
        }
        Noun::Route { key } => run_route(&cli, key, out).await,
        Noun::Plan => {
            let client = cli.client(cli.request_timeout)?;
            let plan = match cli.namespace_named() {
                None => client.plan().await?,
                Some(namespace) => client.plan_in(namespace).await?,
            };
            out.show(&plan, render_plan)
        }
        Noun::Audit => {
            let records = cli.client(cli.request_timeout)?.audit().await?;
            out.show(&records, |records| render_audit(records))
        }
        Noun::Lease {
            verb: LeaseVerb::List,
        } => run_lease_list(&cli, out).await,
        Noun::Watch { wait } => {
            if wait.is_zero() || *wait > MAX_WATCH_WAIT {
                return Err(CtlError::BadInput(format!(
                    "--wait must be between 1ms and {}s",
                    MAX_WATCH_WAIT.as_secs()
                )));
            }
            // A blocking query may take the whole wait: the request bound must exceed it.
            let client = cli.client(*wait + cli.request_timeout)?;
            run_watch(&client, cli.namespace_named(), *wait, out).await
        }
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

/// The body of `namespace create`. `default` is refused here: it always exists (P18.1), and
/// the managers' answer to creating it would read as a conflict, not a mistake.
fn create_request(
    name: &str,
    shard_count: u32,
    lease_duration_ms: Option<u64>,
    max_executors: Option<u32>,
    placement: &placement::PlacementArgs,
) -> Result<CreateNamespaceRequest, CtlError> {
    if is_default_namespace(name) {
        return Err(CtlError::BadInput(format!(
            "namespace {DEFAULT_NAMESPACE} always exists; create one by another name"
        )));
    }
    Ok(CreateNamespaceRequest {
        name: name.to_owned(),
        shard_count,
        lease_duration_ms,
        max_executors,
        placement: placement.settings(),
    })
}

/// The body of `namespace set`. An empty change is refused rather than sent: it would succeed
/// and change nothing, which hides a forgotten flag. `default`'s lease is the managers'
/// `--lease-duration` (P18.1), so it is refused here too.
fn set_request(
    name: &str,
    lease_duration_ms: Option<u64>,
    max_executors: Option<u32>,
    no_max_executors: bool,
    placement: &placement::PlacementArgs,
) -> Result<SetNamespaceRequest, CtlError> {
    let max_executors = match (max_executors, no_max_executors) {
        (Some(_), true) => {
            return Err(CtlError::BadInput(
                "--max-executors and --no-max-executors contradict each other".to_owned(),
            ))
        }
        (Some(bound), false) => Some(Some(bound)),
        (None, true) => Some(None),
        (None, false) => None,
    };
    let placement = placement.change();
    if lease_duration_ms.is_none() && max_executors.is_none() && placement.is_empty() {
        return Err(CtlError::BadInput(format!(
            "namespace set {name}: nothing to change: give --lease, --max-executors, \
             --no-max-executors, --load-placement, --balance-tolerance, --max-balance-moves or \
             --prefer"
        )));
    }
    if lease_duration_ms.is_some() && is_default_namespace(name) {
        return Err(CtlError::BadInput(format!(
            "namespace {DEFAULT_NAMESPACE}'s lease is the managers' --lease-duration; it is not \
             set here"
        )));
    }
    Ok(SetNamespaceRequest {
        lease_duration_ms,
        max_executors,
        placement,
    })
}

async fn run_namespace(cli: &Cli, verb: &NamespaceVerb, out: &mut Out<'_>) -> Result<(), CtlError> {
    // Requests are built before the client, so bad input never waits on the cluster.
    let view = match verb {
        NamespaceVerb::Create {
            name,
            shards,
            lease_ms,
            max_executors,
            placement,
        } => {
            let request = create_request(name, *shards, *lease_ms, *max_executors, placement)?;
            let client = cli.client(cli.request_timeout)?;
            client.create_namespace(&request).await?
        }
        NamespaceVerb::List => {
            let client = cli.client(cli.request_timeout)?;
            let namespaces = client.namespaces().await?;
            return out.show(&namespaces, |n| render_namespaces(n));
        }
        NamespaceVerb::Show { name } => {
            let client = cli.client(cli.request_timeout)?;
            client.namespace(name).await?
        }
        NamespaceVerb::Set {
            name,
            lease_ms,
            max_executors,
            no_max_executors,
            placement,
        } => {
            let request = set_request(
                name,
                *lease_ms,
                *max_executors,
                *no_max_executors,
                placement,
            )?;
            let client = cli.client(cli.request_timeout)?;
            client.set_namespace(name, &request).await?
        }
        NamespaceVerb::Delete { name } => {
            if is_default_namespace(name) {
                return Err(CtlError::BadInput(format!(
                    "namespace {DEFAULT_NAMESPACE} cannot be deleted (PROTOCOL P18.1)"
                )));
            }
            let client = cli.client(cli.request_timeout)?;
            let deleted = client.delete_namespace(name).await?;
            return out.show(&deleted, render_namespace_deleted);
        }
    };
    out.show(&view, render_namespace)
}

async fn run_snapshot(cli: &Cli, verb: &SnapshotVerb, out: &mut Out<'_>) -> Result<(), CtlError> {
    match verb {
        SnapshotVerb::Inspect { file } => {
            let (header, _) = snapshot::read_verified(file)?;
            out.show(&header, |h| render_backup_header(h, None))
        }
        SnapshotVerb::Restore { file, data_dir } => {
            let prepared = snapshot::prepare_restore(file, data_dir)?;
            out.show(&prepared, |p| {
                let mut text = render_backup_header(&p.header, None);
                text.push_str(&format!(
                    "\nPrepared {}. Restore the same file into every member's empty data \
                     directory, then start the members with their usual flags (the same \
                     --initial-cluster and --shard-count {}); each imports it on first start.\n",
                    printable(&p.prepared_file.display().to_string()),
                    p.header.shard_count
                ));
                text
            })
        }
        SnapshotVerb::Save { file } => {
            let client = cli.client(cli.request_timeout)?;
            let bytes = client.backup().await?;
            let header = snapshot::verify(file, &bytes)?;
            snapshot::write_atomically(file, &bytes)?;
            out.show(&header, |h| render_backup_header(h, Some(file)))
        }
    }
}

/// Every member's status; members that did not answer make it a partial failure.
async fn run_cluster_status(cli: &Cli, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let statuses = cluster_status(&client).await?;
    out.show(&statuses, |s| render_cluster_status(s))?;
    let silent: Vec<String> = statuses
        .iter()
        .filter(|s| s.info.is_none())
        .map(|s| s.node_id.to_string())
        .collect();
    if silent.is_empty() {
        Ok(())
    } else {
        Err(CtlError::PartlyUnreachable(format!(
            "members {} did not answer",
            silent.join(", ")
        )))
    }
}

async fn run_member(cli: &Cli, verb: &MemberVerb, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let info: ClusterInfo = match verb {
        MemberVerb::SafeToStop { node_id } => {
            let verdict = client.member_safe_to_stop(*node_id).await?;
            return show_verdict(&format!("manager {node_id}"), &verdict, out);
        }
        MemberVerb::List => client.cluster_info().await?,
        MemberVerb::Add { node_id, address } => {
            client
                .add_node(&AddNodeRequest {
                    node_id: *node_id,
                    address: address.clone(),
                })
                .await?
        }
        MemberVerb::Remove { node_id } => client.remove_node(*node_id).await?,
    };
    out.show(&info, render_members)
}

/// Prints a `safe-to-stop` verdict (P17.4); a verdict of not safe is exit code 7.
fn show_verdict(subject: &str, verdict: &SafeToStop, out: &mut Out<'_>) -> Result<(), CtlError> {
    out.show(verdict, |verdict| render_verdict(subject, verdict))?;
    if verdict.safe {
        Ok(())
    } else {
        Err(CtlError::NotSafe(format!("{subject} is not safe to stop")))
    }
}

fn render_verdict(subject: &str, verdict: &SafeToStop) -> String {
    let verdict_text = if verdict.safe {
        "safe to stop"
    } else {
        "not safe to stop"
    };
    format!(
        "{}: {verdict_text}: {}\n",
        printable(subject),
        printable(&verdict.reason)
    )
}

/// `executor safe-to-stop`'s line about a rollout under way in the executor's namespace (P17.3),
/// from `executor` and the namespace's executors: a joiner of the newest version waits, by
/// design, until an executor of an older one stops or drains, so a deploy that waits for it to
/// hold shards before stopping the old one waits for nothing. `None` without a rollout.
fn rollout_line(executor: &ExecutorView, namespace: &[ExecutorView]) -> Option<String> {
    let newest = rollout_among(namespace)?;
    let version = printable(newest);
    let older =
        crate::wire::compare_stated_app_versions(executor.app_version.as_deref(), Some(newest))
            .is_lt();
    Some(if older {
        format!(
            "rollout to application version {version} under way (P17.3): the executors of \
             {version} take shards only as executors of older versions, like this one, stop or \
             drain; stopping it hands its shards to them. They hold none before that, by \
             design: do not wait for them to.\n"
        )
    } else {
        format!(
            "rollout to application version {version} under way (P17.3): this executor, of \
             {version}, takes shards only as executors of older versions stop or drain, and \
             holds none before that, by design: stop or drain an old one to move its shards \
             here.\n"
        )
    })
}

async fn run_executor(cli: &Cli, verb: &ExecutorVerb, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    match verb {
        ExecutorVerb::List => {
            let executors = match cli.namespace_named() {
                None => client.executors(cli.consistent).await?,
                Some(namespace) => client.executors_in(namespace, cli.consistent).await?,
            };
            out.show(&executors, |e| render_executors(e))
        }
        ExecutorVerb::Show { executor_id } => {
            let executor = client.executor(executor_id, cli.consistent).await?;
            out.show(&executor, render_executor)
        }
        ExecutorVerb::Drain {
            executor_id,
            cancel: false,
        } => {
            let executor = client.drain(executor_id).await?;
            out.show(&executor, render_executor)
        }
        ExecutorVerb::Drain {
            executor_id,
            cancel: true,
        }
        | ExecutorVerb::Undrain { executor_id } => {
            let executor = client.undrain(executor_id).await?;
            out.show(&executor, render_executor)
        }
        ExecutorVerb::Remove {
            executor_id,
            wait,
            wait_timeout,
        } => {
            let wait = wait.then_some(*wait_timeout);
            remove::remove_executor(&client, executor_id, wait, out).await
        }
        ExecutorVerb::SafeToStop { executor_id } => {
            // Its namespace: the one -n names must be it, and its executors say whether a
            // rollout is under way there.
            let executor = client.executor(executor_id, cli.consistent).await?;
            if let Some(asked) = cli.namespace.as_deref() {
                let same = asked == executor.namespace
                    || (is_default_namespace(asked) && is_default_namespace(&executor.namespace));
                if !same {
                    return Err(CtlError::NotFound(format!(
                        "executor {} is not in namespace {} (it is in namespace {})",
                        printable(executor_id),
                        printable(asked),
                        printable(&executor.namespace)
                    )));
                }
            }
            let verdict = client.executor_safe_to_stop(executor_id).await?;
            let namespace = if is_default_namespace(&executor.namespace) {
                client.executors(cli.consistent).await?
            } else {
                client
                    .executors_in(&executor.namespace, cli.consistent)
                    .await?
            };
            let subject = format!("executor {executor_id}");
            out.show(&verdict, |verdict| {
                let mut text = render_verdict(&subject, verdict);
                text.extend(rollout_line(&executor, &namespace));
                text
            })?;
            if verdict.safe {
                Ok(())
            } else {
                Err(CtlError::NotSafe(format!("{subject} is not safe to stop")))
            }
        }
    }
}

async fn run_shard(cli: &Cli, verb: &ShardVerb, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    match verb {
        ShardVerb::List => {
            let shards = match cli.namespace_named() {
                None => client.shards(cli.consistent).await?,
                Some(namespace) => client.shards_in(namespace, cli.consistent).await?,
            };
            out.show(&shards, |s| render_shards(s))
        }
        ShardVerb::Show { shard } => {
            let Some(namespace) = cli.namespace_named() else {
                let state = client.state(cli.consistent).await?;
                let view = state
                    .shards
                    .iter()
                    .find(|s| s.shard == *shard)
                    .cloned()
                    .ok_or_else(|| {
                        CtlError::NotFound(format!(
                            "shard {shard} does not exist (shard count {})",
                            state.shard_count
                        ))
                    })?;
                return out.show(&view, |v| render_shard(v, Some(&state.executors)));
            };
            // No one read of a namespace holds both its shards and its executors: the route is
            // the owner's address as the second read found it.
            let shards = client.shards_in(namespace, cli.consistent).await?;
            let view = shards
                .iter()
                .find(|s| s.shard == *shard)
                .cloned()
                .ok_or_else(|| {
                    CtlError::NotFound(format!(
                        "shard {shard} does not exist in namespace {namespace} (shard count {})",
                        shards.len()
                    ))
                })?;
            let executors = client.executors_in(namespace, cli.consistent).await?;
            out.show(&view, |v| render_shard(v, Some(&executors)))
        }
        ShardVerb::Move { shard, to } => {
            let view = client.move_shard(*shard, to).await?;
            out.show(&view, |v| render_shard(v, None))
        }
        ShardVerb::Pin { shard, executor_id } => {
            let view = client.pin_shard(*shard, executor_id).await?;
            out.show(&view, |v| render_shard(v, None))
        }
        ShardVerb::Unpin { shard } => {
            let view = client.unpin_shard(*shard).await?;
            out.show(&view, |v| render_shard(v, None))
        }
    }
}

async fn run_route(cli: &Cli, key: &str, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let route = match cli.namespace_named() {
        None => client.route_key(key, cli.consistent).await?,
        Some(namespace) => client.route_key_in(namespace, key, cli.consistent).await?,
    };
    out.show(&route, |r| {
        let mut table = Table::new(&["KEY", "SHARD", "EXECUTOR", "ADDRESS", "EPOCH", "REVISION"]);
        table.push(vec![
            r.key.clone(),
            r.route.shard.to_string(),
            opt(r.route.executor_id.as_deref()),
            opt(r.route.address.as_deref()),
            r.route.epoch.to_string(),
            r.revision.to_string(),
        ]);
        table.render()
    })
}

async fn run_lease_list(cli: &Cli, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let state = client.state(cli.consistent).await?;
    out.show(&state.executors, |_| render_leases(&state))
}

/// `lease list`: each executor's lease as the answering manager knows it, and what the figure
/// is when a follower answered (the bound the log records, P6.6, not the lease).
fn render_leases(state: &StateView) -> String {
    let mut table = Table::new(&[
        "EXECUTOR",
        "NAME",
        "REMAINING",
        "DURATION",
        "SHARDS",
        "DRAINING",
    ]);
    for e in &state.executors {
        table.push(vec![
            e.executor_id.clone(),
            opt(e.name.as_deref()),
            human_ms(e.lease_remaining_ms),
            human_ms(state.lease_duration_ms),
            e.shards.len().to_string(),
            yes_no(e.draining),
        ]);
    }
    let mut text = table.render();
    if state.lease_remaining_is_bound {
        text.push_str(
            "REMAINING is what a follower knows: the longest each lease may run as the log \
             records it, which with renewals answered from the leader's memory is the lease \
             reservation (P6.6, up to three leases ahead), not the lease itself. The leader's \
             answer (--consistent) is exact.\n",
        );
    }
    text
}

async fn run_watch(
    client: &Client,
    namespace: Option<&str>,
    wait: Duration,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let watch = |revision: u64, wait: Duration| async move {
        match namespace {
            None => client.watch(revision, wait).await,
            Some(namespace) => client.watch_in(namespace, revision, wait).await,
        }
    };
    let mut current: StateView = watch(0, Duration::from_millis(1)).await?.state;
    // On stderr, so stdout carries only events (and stays valid JSON lines).
    eprintln!(
        "watching from revision {} (Ctrl-C to stop)",
        current.revision
    );
    loop {
        let reply = watch(current.revision, wait).await?;
        if reply.state.revision <= current.revision {
            continue;
        }
        for event in watch::diff(&current, &reply.state, &reply.departed) {
            match out.format {
                OutputFormat::Json => out.json(&event, false)?,
                OutputFormat::Table => {
                    let mut line = event.to_line();
                    line.push('\n');
                    out.text(&line)?;
                }
            }
        }
        current = reply.state;
    }
}

/// Asks every member (voters and learners, as the cluster knows them) for its own view.
async fn cluster_status(client: &Client) -> Result<Vec<MemberStatus>, CtlError> {
    let view = client.cluster_info().await?;
    let members = view
        .voters
        .iter()
        .map(|m| (m, true))
        .chain(view.learners.iter().map(|m| (m, false)));
    let mut statuses = Vec::new();
    for (member, voter) in members {
        let (info, error) = match client.cluster_info_from(&member.address).await {
            Ok(info) => (Some(info), None),
            Err(error) => (None, Some(error.to_string())),
        };
        statuses.push(MemberStatus {
            node_id: member.node_id,
            address: member.address.clone(),
            voter,
            info,
            lag: None,
            error,
        });
    }
    Ok(MemberStatus::sorted_with_lag(statuses))
}

fn yes_no(flag: bool) -> String {
    if flag { "yes" } else { "no" }.to_owned()
}

fn render_cluster_status(statuses: &[MemberStatus]) -> String {
    let mut table = Table::new(&[
        "ID",
        "ADDRESS",
        "ROLE",
        "STATE",
        "LEADER",
        "TERM",
        "LAST_LOG",
        "COMMITTED",
        "APPLIED",
        "LAG",
        "RELEASE",
        "SCHEMAS",
        "CLUSTER_VERSION",
    ]);
    for status in statuses {
        let role = if status.voter { "voter" } else { "learner" };
        let row = match &status.info {
            Some(info) => {
                let state = match info.leader_id {
                    Some(leader) if leader == info.node_id => "leader",
                    Some(_) => "follower",
                    None => "candidate",
                };
                vec![
                    status.node_id.to_string(),
                    status.address.clone(),
                    role.to_owned(),
                    state.to_owned(),
                    opt(info.leader_id),
                    info.term.to_string(),
                    opt(info.last_log_index),
                    opt(info.committed_index),
                    opt(info.applied_index),
                    opt(status.lag),
                    info.reported_release().to_owned(),
                    match info.reported_schemas() {
                        SchemaRange { oldest, newest } if oldest == newest => oldest.to_string(),
                        SchemaRange { oldest, newest } => format!("{oldest}-{newest}"),
                    },
                    // As this member applied it (P14.3): a lagging member shows the raise late.
                    info.reported_cluster_version().to_string(),
                ]
            }
            None => vec![
                status.node_id.to_string(),
                status.address.clone(),
                role.to_owned(),
                "unreachable".to_owned(),
            ],
        };
        table.push(row);
    }
    table.render()
}

fn render_members(info: &ClusterInfo) -> String {
    let mut table = Table::new(&["ID", "ADDRESS", "ROLE", "LEADER"]);
    let mut members: Vec<(&crate::wire::Member, &str)> = info
        .voters
        .iter()
        .map(|m| (m, "voter"))
        .chain(info.learners.iter().map(|m| (m, "learner")))
        .collect();
    members.sort_by_key(|(m, _)| m.node_id);
    for (member, role) in members {
        table.push(vec![
            member.node_id.to_string(),
            member.address.clone(),
            role.to_owned(),
            yes_no(info.leader_id == Some(member.node_id)),
        ]);
    }
    table.render()
}

fn render_plan(plan: &PlanPreview) -> String {
    let rollout = match &plan.rollout_to {
        Some(version) => format!(
            "rollout to application version {version} under way: only shards that must move do, \
             onto it; balance and joiners wait (P17.3)\n"
        ),
        None => String::new(),
    };
    if plan.moves.is_empty() {
        return format!("{rollout}nothing would move (revision {})\n", plan.revision);
    }
    let mut table = Table::new(&["SHARD", "FROM", "TO", "REASON"]);
    for step in &plan.moves {
        table.push(vec![
            step.shard.to_string(),
            opt(step.from.as_deref()),
            step.to.clone(),
            step.reason.clone(),
        ]);
    }
    let more = if plan.capped {
        ", cut at the cap: more follow in the next plans"
    } else {
        ""
    };
    format!(
        "{}{rollout}{} moves planned on revision {}{more}\n",
        table.render(),
        plan.moves.len(),
        plan.revision
    )
}

/// `cluster maintenance`: whether it is on, and for `on`/`off` whether that changed anything.
fn render_maintenance(view: &MaintenanceView, asked: Option<Switch>) -> String {
    let state = if view.on { "on" } else { "off" };
    let note = match asked {
        Some(_) if view.changed => format!(" (turned {state} now)"),
        Some(_) => format!(" (unchanged: it was {state} already)"),
        None if view.on => " (placement frozen: no balancing, no shards for joiners, drains \
                             wait; shards nobody holds are still placed)"
            .to_owned(),
        None => String::new(),
    };
    format!("maintenance: {state}{note}\n")
}

/// `audit`: one row per operator action, oldest first, as the log keeps them.
fn render_audit(records: &[AuditRecordView]) -> String {
    if records.is_empty() {
        return "no operator actions recorded\n".to_owned();
    }
    let mut table = Table::new(&["REVISION", "TIME", "ACTOR", "ACTION", "SUBJECT"]);
    for record in records {
        table.push(vec![
            record.revision.to_string(),
            utc_millis(record.at_ms),
            record.actor.clone(),
            record.action.clone(),
            audit_subject(record),
        ]);
    }
    let mut text = table.render();
    if records.len() >= MAX_AUDIT_RECORDS {
        text.push_str(&format!(
            "{} records, the most the log keeps: older ones are gone\n",
            records.len()
        ));
    }
    text
}

/// What an audit record names: its shard, executor and manager (with its address), whichever
/// it has; [`NONE`] for an action on the whole cluster (maintenance).
fn audit_subject(record: &AuditRecordView) -> String {
    let mut parts = Vec::new();
    if let Some(shard) = record.shard {
        parts.push(format!("shard {shard}"));
    }
    if let Some(executor_id) = &record.executor_id {
        parts.push(format!("executor {executor_id}"));
    }
    if let Some(node_id) = record.node_id {
        parts.push(match &record.address {
            Some(address) => format!("manager {node_id} ({address})"),
            None => format!("manager {node_id}"),
        });
    }
    if parts.is_empty() {
        NONE.to_owned()
    } else {
        parts.join(", ")
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC to the millisecond
/// (`2023-11-14T22:13:20.123Z`). A time past what RFC 3339 can write (the year 9999) is shown
/// as the number it is.
fn utc_millis(at_ms: u64) -> String {
    /// 10000-01-01T00:00:00Z: humantime refuses to format from here on.
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    match UNIX_EPOCH.checked_add(Duration::from_millis(at_ms)) {
        Some(at) if at_ms < YEAR_10000_MS => humantime::format_rfc3339_millis(at).to_string(),
        _ => format!("{at_ms} ms after the epoch"),
    }
}

fn render_executors(executors: &[ExecutorView]) -> String {
    let mut table = Table::new(&[
        "EXECUTOR",
        "NAME",
        "ADDRESS",
        "LEASE",
        "SHARDS",
        "CAPACITY",
        "VERSION",
        "ZONE",
        "LOAD",
        "UTILISATION",
        "DRAINING",
        "REGISTERED",
    ]);
    for e in executors {
        table.push(vec![
            e.executor_id.clone(),
            opt(e.name.as_deref()),
            e.address.clone(),
            human_ms(e.lease_remaining_ms),
            e.shards.len().to_string(),
            e.capacity.to_string(),
            opt(e.app_version.as_deref()),
            opt(crate::wire::zone_of(&e.labels)),
            human_load(e.load),
            human_load(e.utilisation),
            yes_no(e.draining),
            e.registered_revision.to_string(),
        ]);
    }
    let mut text = table.render();
    if let Some(newest) = rollout_among(executors) {
        let version = printable(newest);
        let waiting: Vec<&str> = executors
            .iter()
            .filter(|e| {
                e.shards.is_empty()
                    && !e.draining
                    && e.lease_remaining_ms > 0
                    && crate::wire::compare_stated_app_versions(
                        e.app_version.as_deref(),
                        Some(newest),
                    )
                    .is_eq()
            })
            .map(|e| e.executor_id.as_str())
            .collect();
        text.push_str(&format!(
            "rollout to application version {version} under way (P17.3): executors of {version} \
             take shards only as executors of older versions stop or drain, and balance and \
             joiners wait until every executor taking shards runs {version}.\n"
        ));
        if !waiting.is_empty() {
            text.push_str(&format!(
                "{} of {version} hold no shards, by design, until an older executor stops or \
                 drains: a deploy should not wait for them to.\n",
                printable(&waiting.join(", "))
            ));
        }
    }
    text
}

/// One executor as `field: value` lines. Its namespace is named only outside `default`, as the
/// wire does, so the lines an executor of `default` shows are those it showed before namespaces.
pub(crate) fn render_executor(e: &ExecutorView) -> String {
    let mut pairs = vec![
        ("executor", e.executor_id.clone()),
        ("name", opt(e.name.as_deref())),
    ];
    if !is_default_namespace(&e.namespace) {
        pairs.push(("namespace", e.namespace.clone()));
    }
    pairs.extend([
        ("address", e.address.clone()),
        ("incarnation", e.incarnation.clone()),
        ("lease remaining", human_ms(e.lease_remaining_ms)),
        ("draining", yes_no(e.draining)),
        ("capacity", e.capacity.to_string()),
        ("app version", opt(e.app_version.as_deref())),
        ("labels", render_labels(&e.labels)),
        ("load", human_load(e.load)),
        ("utilisation", human_load(e.utilisation)),
        ("registered", format!("revision {}", e.registered_revision)),
        ("shard count", e.shards.len().to_string()),
        ("shards", shard_ranges(e.shards.iter().map(|s| s.shard))),
    ]);
    fields(&pairs)
}

fn render_namespaces(namespaces: &[NamespaceView]) -> String {
    let mut table = Table::new(&["NAME", "SHARDS", "LEASE", "EXECUTORS", "OWNED", "MAX"]);
    for n in namespaces {
        table.push(vec![
            n.name.clone(),
            n.shard_count.to_string(),
            human_ms(n.lease_duration_ms),
            n.executors.to_string(),
            n.owned_shards.to_string(),
            opt(n.max_executors),
        ]);
    }
    table.render()
}

fn render_namespace(n: &NamespaceView) -> String {
    let created = if n.created_revision == 0 {
        "with the cluster".to_owned()
    } else {
        format!("revision {}", n.created_revision)
    };
    fields(&[
        ("namespace", n.name.clone()),
        ("shard count", n.shard_count.to_string()),
        ("lease duration", human_ms(n.lease_duration_ms)),
        ("max executors", opt(n.max_executors)),
        ("executors", n.executors.to_string()),
        ("owned shards", n.owned_shards.to_string()),
        ("created", created),
        ("placement", placement::render_placement(&n.placement)),
    ])
}

fn render_namespace_deleted(deleted: &NamespaceDeleted) -> String {
    let name = printable(&deleted.name);
    let mut text = if deleted.already_gone {
        format!("namespace {name} was deleted already\n")
    } else {
        format!("namespace {name} deleted\n")
    };
    if !deleted.removed_executors.is_empty() {
        let removed: Vec<_> = deleted
            .removed_executors
            .iter()
            .map(|id| printable(id))
            .collect();
        text.push_str(&format!(
            "removed with it, holding nothing: {}\n",
            removed.join(", ")
        ));
    }
    text
}

/// `key=value` pairs, comma-separated, `-` for none (P18.3).
fn render_labels(labels: &crate::wire::Labels) -> String {
    if labels.is_empty() {
        return "-".to_owned();
    }
    labels
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn shard_state(view: &ShardView) -> &'static str {
    match (&view.owner, &view.handoff) {
        (None, _) => "unowned",
        (Some(_), None) => "serving",
        (Some(_), Some(_)) => "releasing",
    }
}

fn render_shards(shards: &[ShardView]) -> String {
    let mut table = Table::new(&[
        "SHARD",
        "OWNER",
        "EPOCH",
        "STATE",
        "HANDOFF_TO",
        "LOAD",
        "HOT",
        "PINNED",
    ]);
    for s in shards {
        table.push(vec![
            s.shard.to_string(),
            opt(s.owner.as_deref()),
            s.epoch.to_string(),
            shard_state(s).to_owned(),
            s.handoff
                .as_ref()
                .map_or_else(|| NONE.to_owned(), |h| opt(h.to.as_deref())),
            human_load(s.load),
            yes_no(s.hot),
            opt(s.pinned_to.as_deref()),
        ]);
    }
    table.render()
}

/// One shard as `field: value` lines; with the executors read beside it, its route too (a
/// move's or pin's answer is the shard alone).
fn render_shard(view: &ShardView, executors: Option<&[ExecutorView]>) -> String {
    let mut pairs = vec![
        ("shard", view.shard.to_string()),
        ("owner", opt(view.owner.as_deref())),
        ("epoch", view.epoch.to_string()),
        ("state", shard_state(view).to_owned()),
    ];
    if let Some(executors) = executors {
        let address = view
            .owner
            .as_ref()
            .filter(|_| view.handoff.is_none())
            .and_then(|owner| executors.iter().find(|e| &e.executor_id == owner))
            .map(|e| e.address.clone());
        pairs.push(("route", opt(address)));
    }
    pairs.extend([
        ("load", human_load(view.load)),
        ("hot", yes_no(view.hot)),
        ("pinned to", opt(view.pinned_to.as_deref())),
    ]);
    if let Some(handoff) = &view.handoff {
        pairs.push(("handoff to", opt(handoff.to.as_deref())));
        pairs.push(("revoke revision", handoff.revoke_revision.to_string()));
        pairs.push((
            "completes by expiry in",
            human_ms(handoff.completes_by_expiry_in_ms),
        ));
    }
    fields(&pairs)
}

fn render_state_summary(state: &StateView) -> String {
    let count = |wanted: &str| {
        state
            .shards
            .iter()
            .filter(|s| shard_state(s) == wanted)
            .count()
            .to_string()
    };
    fields(&[
        ("revision", state.revision.to_string()),
        ("shard count", state.shard_count.to_string()),
        ("lease duration", human_ms(state.lease_duration_ms)),
        ("executors", state.executors.len().to_string()),
        (
            "draining",
            state
                .executors
                .iter()
                .filter(|e| e.draining)
                .count()
                .to_string(),
        ),
        ("shards serving", count("serving")),
        ("shards releasing", count("releasing")),
        ("shards unowned", count("unowned")),
    ])
}

fn render_backup_header(
    header: &crate::backup::BackupHeader,
    saved_to: Option<&PathBuf>,
) -> String {
    let mut pairs = Vec::new();
    if let Some(path) = saved_to {
        pairs.push(("saved", path.display().to_string()));
    }
    pairs.extend([
        ("revision", header.revision.to_string()),
        ("shard count", header.shard_count.to_string()),
        ("state schema", header.state_schema_version.to_string()),
        ("format", header.format_version.to_string()),
        (
            "created at (unix ms)",
            header.created_at_unix_ms.to_string(),
        ),
        ("source node", header.source_node_id.to_string()),
        ("payload bytes", header.payload_length.to_string()),
        ("sha256", header.payload_sha256.clone()),
    ]);
    fields(&pairs)
}

#[cfg(test)]
mod tests;
