//! `leasehold-manager` flags (PROTOCOL §10), each also a `LEASEHOLD_*` environment variable.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use leasehold_api::backup::BackupKey;
use leasehold_api::process::{check_plaintext_listener, LogFormat, TlsArgs};
use leasehold_api::tls::{Role, TlsConfig, TlsFiles};
use leasehold_api::wire::validate_base_url;

use crate::http::registration_limit::{
    RateLimits, RegistrationSettings, DEFAULT_MAX_CAPACITY, DEFAULT_MAX_EXECUTORS_PER_NAMESPACE,
    DEFAULT_REGISTRATION_BURST, DEFAULT_REGISTRATION_RATE, MAX_REGISTRATION_LIMIT,
};
use crate::leader::core::placement::PlacementSettings;
use crate::leader::core::GuardConfig;
use crate::raft::{NodeId, RaftTimings, SnapshotSettings};

use crate::lease::MAX_SHARD_COUNT;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "leasehold-manager",
    version,
    about = "A Leasehold manager replica"
)]
pub struct Args {
    /// This node's Raft id (unique in the cluster, fixed for the life of its data directory).
    #[arg(long, env = "LEASEHOLD_ID")]
    pub id: NodeId,

    /// Address to bind the HTTP listener to (public API and Raft RPC).
    #[arg(long, env = "LEASEHOLD_LISTEN")]
    pub listen: SocketAddr,

    /// URL other nodes and clients use to reach this node; defaults to http://<listen>.
    #[arg(long, env = "LEASEHOLD_ADVERTISE")]
    pub advertise: Option<String>,

    /// Also serve /livez and /readyz, and nothing else, in plaintext on this address: for
    /// probes that present no client certificate (Kubernetes' kubelet) while --listen requires
    /// one. They say only whether this replica lives and can serve.
    #[arg(long, env = "LEASEHOLD_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,

    /// Directory for the Raft log, snapshots and identity (one sled database).
    #[arg(long, env = "LEASEHOLD_DATA_DIR")]
    pub data_dir: PathBuf,

    /// The founding members: `1=http://10.0.0.1:7000,2=...`. Used on first start only.
    #[arg(long, env = "LEASEHOLD_INITIAL_CLUSTER", value_parser = parse_initial_cluster)]
    pub initial_cluster: Option<InitialCluster>,

    /// Join a running cluster through this member's URL (instead of --initial-cluster).
    #[arg(long, env = "LEASEHOLD_JOIN", conflicts_with = "initial_cluster")]
    pub join: Option<String>,

    /// With --join, for a member whose data directory was lost: ask the cluster to remove this
    /// node's old membership, then join afresh as a learner (docs/OPERATIONS.md "Replacing a
    /// manager"). Refused unless the data directory is new; for one start only.
    #[arg(long, env = "LEASEHOLD_REJOIN")]
    pub rejoin: bool,

    /// Number of shards of `default` when the cluster is initialised; later only a reshard
    /// changes it (`leaseholdctl namespace reshard default --shards N`).
    #[arg(long, env = "LEASEHOLD_SHARD_COUNT", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SHARD_COUNT)))]
    pub shard_count: u32,

    /// Lease duration, e.g. `60s`; at least 3 × the maximum election timeout.
    #[arg(long, env = "LEASEHOLD_LEASE_DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,

    /// Raft heartbeat interval.
    #[arg(long, env = "LEASEHOLD_HEARTBEAT", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub heartbeat: Duration,

    /// Minimum Raft election timeout; the maximum, which is also the leader lease during which
    /// a voter refuses other candidates, is twice this (docs/OPERATIONS.md "Raft timing").
    #[arg(long, env = "LEASEHOLD_ELECTION_TIMEOUT", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub election_timeout: Duration,

    /// Take a snapshot every this many log entries.
    #[arg(long, env = "LEASEHOLD_SNAPSHOT_EVERY", default_value_t = 5_000)]
    pub snapshot_every: u64,

    /// Log entries kept behind a snapshot (for followers slightly behind).
    #[arg(long, env = "LEASEHOLD_SNAPSHOT_KEEP", default_value_t = 1_000)]
    pub snapshot_keep: u64,

    /// Defer reaping while the leader cannot rule out its own stall (P6.3); `=false` restores
    /// plain expiry.
    #[arg(long, env = "LEASEHOLD_MASS_EXPIRY_GUARD", default_value_t = true, action = clap::ArgAction::Set)]
    pub mass_expiry_guard: bool,

    /// Longest deferral of the mass-expiry guard.
    #[arg(long, env = "LEASEHOLD_MASS_EXPIRY_GRACE", default_value = "60s", value_parser = humantime::parse_duration)]
    pub mass_expiry_grace: Duration,

    /// From cluster version 12 the leader answers a renewal that changes nothing but the lease from
    /// its memory, once a quorum confirmed its leadership after the renewal arrived (PROTOCOL
    /// P6.5 to P6.7), rather than through a Raft entry; `=false` sends every renewal through the log.
    #[arg(long, env = "LEASEHOLD_RENEWALS_FROM_MEMORY", default_value_t = true, action = clap::ArgAction::Set)]
    pub renewals_from_memory: bool,

    /// Place shards by the loads executors report (PROTOCOL §15); `=false` spreads shard counts
    /// in proportion to capacity only.
    #[arg(long, env = "LEASEHOLD_LOAD_PLACEMENT", default_value_t = true, action = clap::ArgAction::Set)]
    pub load_placement: bool,

    /// How far an executor's load ÷ capacity may stray from the cluster's mean before shards
    /// move for balance (P15.2): a fraction (`0.1`) or a percentage (`10%`).
    #[arg(long, env = "LEASEHOLD_BALANCE_TOLERANCE", default_value = "10%", value_parser = parse_tolerance)]
    pub balance_tolerance: f64,

    /// How long the leader waits, before it revokes a shard from a live holder, for the executor
    /// receiving it to prepare (PROTOCOL P17.1: `POST /v1/prepare`); the handoff goes on when
    /// it answers or this passes. `0s`: no prepare step. At most 60 s.
    #[arg(long, env = "LEASEHOLD_PREPARE_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub prepare_timeout: Duration,

    /// Most shards moved for balance per minute (P15.3); expiry, drain and deregistration are
    /// not limited. Default: 1 % of the shard count, at least 1.
    #[arg(long, env = "LEASEHOLD_MAX_BALANCE_MOVES",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SHARD_COUNT)))]
    pub max_balance_moves: Option<u32>,

    /// Largest capacity a registration may ask for (P15.1), 1 to 1 000 000; above it the
    /// registration is refused `400`. A capacity is a weight relative to the other executors'
    /// (2 carries twice the share of 1), so the default of 1 000 allows any real spread of
    /// machine sizes while one registration cannot claim nearly every shard. Executors already
    /// registered keep theirs.
    #[arg(long, env = "LEASEHOLD_MAX_CAPACITY", default_value_t = DEFAULT_MAX_CAPACITY,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(leasehold_api::wire::MAX_CAPACITY)))]
    pub max_capacity: u32,

    /// Registrations per second one caller (a TLS certificate from one address, or an address)
    /// may make once its burst is spent (P13.6); past it, `429 rate_limited` with `Retry-After`.
    #[arg(long, env = "LEASEHOLD_REGISTRATION_RATE", default_value_t = DEFAULT_REGISTRATION_RATE,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REGISTRATION_LIMIT)))]
    pub registration_rate: u32,

    /// Registrations one caller may make at once (P13.6): enough for a host's whole fleet of
    /// executors starting together.
    #[arg(long, env = "LEASEHOLD_REGISTRATION_BURST", default_value_t = DEFAULT_REGISTRATION_BURST,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REGISTRATION_LIMIT)))]
    pub registration_burst: u32,

    /// The most executors a namespace that sets no bound of its own may hold (P18.1); a
    /// registration past it is refused `409` at the leader. A namespace's own bound (`namespace
    /// create|set --max-executors`, an admin of the whole cluster's) replaces it.
    #[arg(long, env = "LEASEHOLD_MAX_EXECUTORS_PER_NAMESPACE",
          default_value_t = DEFAULT_MAX_EXECUTORS_PER_NAMESPACE,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_executors_per_namespace: u32,

    /// Connections one source address (an IPv6 host by its /64) may hold open at once, across
    /// every listener of this manager (P13.6); past it a new connection is closed as soon as it
    /// is accepted. Default: half the connection budget (half the descriptor limit, at most
    /// 16 384), so one host never shuts out the rest.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS_PER_ADDRESS",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: Option<u32>,

    /// Log output format.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub tls: TlsArgs,

    /// Seal every backup (`GET /v1/backup`) with an HMAC-SHA-256 by this key, a file of at least
    /// 32 bytes, and restore only backups it sealed (PROTOCOL P13.6).
    #[arg(long, env = "LEASEHOLD_BACKUP_KEY_FILE")]
    pub backup_key_file: Option<PathBuf>,

    /// Free space the data directory's file system keeps (e.g. `256MiB`, `1GB`, or bytes; `0`
    /// turns the alarm off). Below it, writes that grow the state (registrations, plans) are
    /// refused with 507 while renewals and reads go on, until space returns (PROTOCOL P8.3).
    #[arg(long, env = "LEASEHOLD_MIN_FREE_DISK", default_value = "256MiB", value_parser = parse_byte_size)]
    pub min_free_disk: u64,
}

/// Parses a size: bytes, or a number with a unit (`KiB`, `MiB`, `GiB`, `KB`, `MB`, `GB`).
fn parse_byte_size(value: &str) -> Result<u64, String> {
    byte_unit::Byte::parse_str(value, true)
        .map(|bytes| bytes.as_u64())
        .map_err(|e| format!("{value:?} is not a size such as 256MiB: {e}"))
}

/// Longest `--lease-duration` and `--mass-expiry-grace`: a lease is a failure detector, and a day
/// without one is no lease. Also keeps every millisecond count far inside u64.
pub const MAX_LEASE_DURATION: Duration =
    Duration::from_millis(leasehold_api::wire::MAX_LEASE_DURATION_MS);
/// Longest `--heartbeat` and `--election-timeout`.
pub const MAX_RAFT_TIMING: Duration = Duration::from_secs(60);

/// Parses `--balance-tolerance`: a fraction in `(0, 1]` or a percentage in `(0 %, 100 %]`.
fn parse_tolerance(value: &str) -> Result<f64, String> {
    let trimmed = value.trim();
    let (number, scale) = match trimmed.strip_suffix('%') {
        Some(percent) => (percent.trim(), 100.0),
        None => (trimmed, 1.0),
    };
    let parsed: f64 = number
        .parse()
        .map_err(|_| format!("{value:?} is not a number or a percentage"))?;
    let tolerance = parsed / scale;
    if !(tolerance > 0.0 && tolerance <= 1.0) {
        return Err(format!(
            "{value:?} is outside (0, 1] (or (0 %, 100 %]): a band of zero moves shards forever"
        ));
    }
    Ok(tolerance)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialCluster(pub BTreeMap<NodeId, String>);

fn parse_initial_cluster(value: &str) -> Result<InitialCluster, String> {
    let mut members = BTreeMap::new();
    for member in value.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let (id, url) = member
            .split_once('=')
            .ok_or_else(|| format!("{member:?} is not ID=URL"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|_| format!("{id:?} is not a node id"))?;
        validate_base_url(url.trim())?;
        if members
            .insert(id, url.trim().trim_end_matches('/').to_string())
            .is_some()
        {
            return Err(format!("node {id} is listed twice"));
        }
    }
    if members.is_empty() {
        return Err("the initial cluster lists no members".to_string());
    }
    Ok(InitialCluster(members))
}

/// Longest `--prepare-timeout` (P17.1): every plan with a handoff from a live holder may wait
/// this long for a receiver that does not answer.
pub const MAX_PREPARE_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything the server needs, validated.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub id: NodeId,
    pub listen: SocketAddr,
    /// `--health-listen`: a plaintext listener serving `/livez` and `/readyz` only.
    pub health_listen: Option<SocketAddr>,
    pub advertise: String,
    pub data_dir: PathBuf,
    pub initial_cluster: BTreeMap<NodeId, String>,
    pub join: Option<String>,
    /// `--rejoin`: remove this node's old membership before joining (a lost data directory).
    pub rejoin: bool,
    pub shard_count: u32,
    pub lease_duration_ms: u64,
    pub timings: RaftTimings,
    pub snapshots: SnapshotSettings,
    pub guard: GuardConfig,
    /// `--renewals-from-memory` (P6.5 to P6.7).
    pub renewals_from_memory: bool,
    /// Placement by load (`--load-placement`, `--balance-tolerance`, `--max-balance-moves`).
    pub placement: PlacementSettings,
    /// `--prepare-timeout` (P17.1).
    pub prepare_timeout: Duration,
    /// `--max-capacity`, `--registration-rate`, `--registration-burst` (P13.6, P15.1).
    pub registration: RegistrationSettings,
    /// `--max-connections-per-address` (P13.6); `None`: half the connection budget.
    pub max_connections_per_address: Option<usize>,
    /// The process's TLS identity (P13.2), loaded and checked at start; `None` serves plaintext.
    pub tls: Option<TlsConfig>,
    /// Plaintext on a non-loopback address, allowed by `--insecure` (P13.5): warned about at start.
    pub insecure_plaintext: bool,
    /// `--backup-key-file`, read at start (P13.6).
    pub backup_key: Option<BackupKey>,
    /// `--min-free-disk` in bytes (P8.3).
    pub min_free_disk_bytes: u64,
    /// How the Raft log is made durable; tests inject flush failures here (P8.3).
    pub log_store: leasehold_raft_store::LogStoreConfig,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

/// Loads the TLS files and checks the certificate is this manager's own (P13.1): a peer checks
/// that a Raft message's sender is the manager its certificate names.
fn load_manager_tls(files: &TlsFiles, id: NodeId) -> Result<TlsConfig, ConfigError> {
    let tls = TlsConfig::load(files).map_err(|e| ConfigError(e.to_string()))?;
    match tls.role() {
        Role::Manager { node_id } if node_id == id => Ok(tls),
        role => Err(ConfigError(format!(
            "--cert-file {}: the certificate is {role}'s, not manager {id}'s",
            files.cert_file.display()
        ))),
    }
}

impl TryFrom<Args> for ManagerConfig {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, ConfigError> {
        let tls = match args.tls.files() {
            Some(files) => Some(load_manager_tls(&files, args.id)?),
            None => None,
        };
        let insecure_plaintext =
            check_plaintext_listener(args.listen.ip(), tls.is_some(), args.tls.insecure)
                .map_err(ConfigError)?;
        check_health_listen(&args)?;
        let backup_key = args
            .backup_key_file
            .as_deref()
            .map(backup_key)
            .transpose()?;
        let (advertise, initial_cluster) = addresses(&args, tls.is_some())?;
        let (timings, lease_duration_ms) = timing(&args)?;
        if args.snapshot_every == 0 {
            return Err(ConfigError("--snapshot-every must be positive".to_string()));
        }
        Ok(Self {
            id: args.id,
            listen: args.listen,
            health_listen: args.health_listen,
            advertise,
            data_dir: args.data_dir,
            initial_cluster,
            join: args.join,
            rejoin: args.rejoin,
            shard_count: args.shard_count,
            lease_duration_ms,
            timings,
            snapshots: SnapshotSettings {
                every_entries: args.snapshot_every,
                keep_entries: args.snapshot_keep,
            },
            guard: GuardConfig {
                enabled: args.mass_expiry_guard,
                grace_ms: args.mass_expiry_grace.as_millis() as u64,
            },
            prepare_timeout: args.prepare_timeout,
            renewals_from_memory: args.renewals_from_memory,
            placement: PlacementSettings {
                by_load: args.load_placement,
                tolerance: args.balance_tolerance,
                max_balance_moves_per_minute: args
                    .max_balance_moves
                    .and_then(|moves| usize::try_from(moves).ok()),
            },
            registration: RegistrationSettings {
                max_capacity: args.max_capacity,
                limits: RateLimits {
                    per_second: args.registration_rate,
                    burst: args.registration_burst,
                },
                max_executors_per_namespace: args.max_executors_per_namespace,
            },
            max_connections_per_address: args
                .max_connections_per_address
                .and_then(|cap| usize::try_from(cap).ok()),
            tls,
            insecure_plaintext,
            backup_key,
            min_free_disk_bytes: args.min_free_disk,
            log_store: leasehold_raft_store::LogStoreConfig::default(),
        })
    }
}

/// `--health-listen` needs a port of its own.
fn check_health_listen(args: &Args) -> Result<(), ConfigError> {
    match args.health_listen {
        Some(health) if health.port() == args.listen.port() => Err(ConfigError(format!(
            "--health-listen {health} needs a port of its own: --listen is on port {}",
            args.listen.port()
        ))),
        _ => Ok(()),
    }
}

/// The key of `--backup-key-file` (P13.6).
fn backup_key(path: &std::path::Path) -> Result<BackupKey, ConfigError> {
    let unreadable = |e: &dyn std::fmt::Display| {
        ConfigError(format!("--backup-key-file {}: {e}", path.display()))
    };
    let bytes = std::fs::read(path).map_err(|e| unreadable(&e))?;
    BackupKey::from_bytes(&bytes).map_err(|e| unreadable(&e))
}

/// The address others reach this node at and the initial members, checked: every manager URL
/// has the scheme the listener serves (P13.2), `--rejoin` only with `--join` and a lost data
/// directory, and the initial members list this node unless it joins.
fn addresses(args: &Args, tls: bool) -> Result<(String, BTreeMap<u64, String>), ConfigError> {
    let scheme = if tls { "https" } else { "http" };
    let advertise = match &args.advertise {
        Some(url) => url.trim_end_matches('/').to_string(),
        None if args.listen.ip().is_unspecified() => {
            return Err(ConfigError(format!(
                "--listen {} binds every interface; say which address others use with --advertise",
                args.listen
            )))
        }
        None => format!("{scheme}://{}", args.listen),
    };
    validate_base_url(&advertise).map_err(|e| ConfigError(format!("--advertise: {e}")))?;
    if let Some(join) = &args.join {
        validate_base_url(join).map_err(|e| ConfigError(format!("--join: {e}")))?;
    }
    if args.rejoin && args.join.is_none() {
        return Err(ConfigError(
            "--rejoin needs --join URL (a member of the cluster to rejoin)".to_string(),
        ));
    }
    // Only a lost (new) data directory rejoins; the server checks its storage again.
    if args.rejoin && std::fs::read_dir(&args.data_dir).is_ok_and(|mut e| e.next().is_some()) {
        return Err(ConfigError(format!(
            "--rejoin is only for a lost data directory, and {} is not empty: start without \
             --rejoin (if an earlier --rejoin was interrupted, --join alone finishes it)",
            args.data_dir.display()
        )));
    }
    let initial_cluster = args
        .initial_cluster
        .as_ref()
        .map(|c| c.0.clone())
        .unwrap_or_default();
    // Under TLS every peer is reached over TLS, and without it none can be (P13.2).
    let urls = std::iter::once(("--advertise", advertise.as_str()))
        .chain(args.join.as_deref().map(|join| ("--join", join)))
        .chain(
            initial_cluster
                .values()
                .map(|url| ("--initial-cluster", url.as_str())),
        );
    for (flag, url) in urls {
        if !url.starts_with(&format!("{scheme}://")) {
            return Err(ConfigError(format!(
                "{flag} {url}: {}",
                if tls {
                    "with TLS every manager URL is https:// (PROTOCOL P13.2)"
                } else {
                    "https:// needs --cert-file, --key-file and --trusted-ca-file (P13.2)"
                }
            )));
        }
    }
    if args.join.is_none() && !initial_cluster.contains_key(&args.id) {
        return Err(ConfigError(format!(
            "--initial-cluster must list this node ({}) unless --join is given",
            args.id
        )));
    }
    Ok((advertise, initial_cluster))
}

/// The Raft timings and the lease, checked against their bounds and each other: a heartbeat at
/// most a third of the election timeout, a lease at least three of the longest election
/// timeouts, so a leader change fits well inside one lease.
fn timing(args: &Args) -> Result<(RaftTimings, u64), ConfigError> {
    for (flag, value, max) in [
        ("--lease-duration", args.lease_duration, MAX_LEASE_DURATION),
        ("--heartbeat", args.heartbeat, MAX_RAFT_TIMING),
        ("--election-timeout", args.election_timeout, MAX_RAFT_TIMING),
        (
            "--mass-expiry-grace",
            args.mass_expiry_grace,
            MAX_LEASE_DURATION,
        ),
    ] {
        if value > max {
            return Err(ConfigError(format!(
                "{flag} ({}) is longer than the {} this manager accepts",
                humantime::format_duration(value),
                humantime::format_duration(max)
            )));
        }
    }
    let timings = RaftTimings::with_election_timeout(
        args.heartbeat.as_millis() as u64,
        args.election_timeout.as_millis() as u64,
    );
    if timings.heartbeat_ms == 0 || timings.heartbeat_ms * 3 > timings.election_timeout_min_ms {
        return Err(ConfigError(format!(
            "--heartbeat ({} ms) must be positive and at most a third of --election-timeout ({} ms)",
            timings.heartbeat_ms, timings.election_timeout_min_ms
        )));
    }
    let lease_duration_ms = args.lease_duration.as_millis() as u64;
    if lease_duration_ms < 3 * timings.election_timeout_max_ms {
        return Err(ConfigError(format!(
            "--lease-duration ({lease_duration_ms} ms) must be at least 3 × the maximum election \
             timeout ({} ms), so a leader change fits well inside one lease",
            timings.election_timeout_max_ms
        )));
    }
    if args.prepare_timeout > MAX_PREPARE_TIMEOUT {
        return Err(ConfigError(format!(
            "--prepare-timeout {} is above {} s: a plan would wait that long for a slow executor",
            humantime::format_duration(args.prepare_timeout),
            MAX_PREPARE_TIMEOUT.as_secs()
        )));
    }
    Ok((timings, lease_duration_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<ManagerConfig, String> {
        let mut argv = vec![
            "leasehold-manager",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:7001",
            "--data-dir",
            "/tmp/x",
        ];
        argv.extend_from_slice(extra);
        let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
        ManagerConfig::try_from(args).map_err(|e| e.to_string())
    }

    /// P17.1: the prepare wait defaults to 2 s, may be off, and is refused above 60 s.
    #[test]
    fn p17_1_the_prepare_wait_is_bounded() {
        let cluster = ["--initial-cluster", "1=http://127.0.0.1:7001"];
        let with = |wait: &str| {
            let mut extra = cluster.to_vec();
            extra.extend(["--prepare-timeout", wait]);
            args(&extra)
        };
        assert_eq!(
            args(&cluster).unwrap().prepare_timeout,
            Duration::from_secs(2)
        );
        assert_eq!(with("0s").unwrap().prepare_timeout, Duration::ZERO);
        assert_eq!(with("60s").unwrap().prepare_timeout, MAX_PREPARE_TIMEOUT);
        let refused = with("61s").unwrap_err();
        assert!(refused.contains("--prepare-timeout"), "{refused}");
    }

    /// P13.2: the health listener takes a port of its own; absent, there is none.
    #[test]
    fn the_health_listener_needs_a_port_of_its_own() {
        let cluster = ["--initial-cluster", "1=http://127.0.0.1:7001"];
        let with = |health: &str| {
            let mut extra = cluster.to_vec();
            extra.extend(["--health-listen", health]);
            args(&extra)
        };
        let refused = with("0.0.0.0:7001").unwrap_err();
        assert!(refused.contains("--health-listen"), "{refused}");
        let config = with("0.0.0.0:7011").unwrap();
        assert_eq!(config.health_listen, Some("0.0.0.0:7011".parse().unwrap()));
        assert_eq!(args(&cluster).unwrap().health_listen, None);
    }

    #[test]
    fn a_valid_initial_cluster_parses_and_defaults_follow_protocol_section_11() {
        let config = args(&[
            "--initial-cluster",
            "1=http://127.0.0.1:7001,2=http://127.0.0.1:7002/",
        ])
        .unwrap();
        assert_eq!(config.initial_cluster.len(), 2);
        assert_eq!(config.initial_cluster[&2], "http://127.0.0.1:7002");
        assert_eq!(config.advertise, "http://127.0.0.1:7001");
        assert_eq!(config.shard_count, 1024);
        assert_eq!(config.lease_duration_ms, 60_000);
        assert_eq!(config.snapshots, SnapshotSettings::default());
        assert_eq!(
            config.timings,
            RaftTimings {
                heartbeat_ms: 100,
                election_timeout_min_ms: 500,
                election_timeout_max_ms: 1_000,
            }
        );
        assert_eq!(config.placement, PlacementSettings::default());
        assert_eq!(config.registration, RegistrationSettings::default());
    }

    /// P13.6, P15.1: the registration limits parse, and each refuses 0 and values past its
    /// bound naming itself.
    #[test]
    fn p13_6_registration_limit_flags_parse_and_are_bounded() {
        let config = args(&[
            "--initial-cluster",
            "1=http://127.0.0.1:7001",
            "--max-capacity",
            "16",
            "--registration-rate",
            "2",
            "--registration-burst",
            "5",
            "--max-executors-per-namespace",
            "100",
        ])
        .unwrap();
        assert_eq!(
            config.registration,
            RegistrationSettings {
                max_capacity: 16,
                limits: RateLimits {
                    per_second: 2,
                    burst: 5
                },
                max_executors_per_namespace: 100,
            }
        );
        for (flag, bad) in [
            ("--max-capacity", "0"),
            ("--max-capacity", "1000001"),
            ("--registration-rate", "0"),
            ("--registration-rate", "1000001"),
            ("--registration-burst", "0"),
            ("--registration-burst", "ten"),
            ("--max-executors-per-namespace", "0"),
        ] {
            let err = args(&["--initial-cluster", "1=http://a:1", flag, bad]).unwrap_err();
            assert!(err.contains(flag), "{flag} {bad}: {err}");
        }
    }

    #[test]
    fn the_shortest_lease_is_three_longest_election_timeouts() {
        let config = args(&[
            "--initial-cluster",
            "1=http://a:1",
            "--lease-duration",
            "3s",
        ])
        .unwrap();
        assert_eq!(config.lease_duration_ms, 3_000);
        let config = args(&[
            "--initial-cluster",
            "1=http://a:1",
            "--election-timeout",
            "2s",
            "--lease-duration",
            "12s",
        ])
        .unwrap();
        assert_eq!(config.timings.election_timeout_max_ms, 4_000);
        for refused in [
            vec!["--lease-duration", "2999ms"],
            vec!["--election-timeout", "2s", "--lease-duration", "11999ms"],
        ] {
            let mut flags = vec!["--initial-cluster", "1=http://a:1"];
            flags.extend(refused.iter().copied());
            let err = args(&flags).unwrap_err();
            assert!(err.contains("at least 3"), "{flags:?}: {err}");
        }
    }

    #[test]
    fn p15_placement_flags_parse() {
        let config = args(&[
            "--initial-cluster",
            "1=http://127.0.0.1:7001",
            "--load-placement=false",
            "--balance-tolerance",
            "25%",
            "--max-balance-moves",
            "7",
        ])
        .unwrap();
        assert_eq!(
            config.placement,
            PlacementSettings {
                by_load: false,
                tolerance: 0.25,
                max_balance_moves_per_minute: Some(7),
            }
        );
        let fraction = args(&[
            "--initial-cluster",
            "1=http://127.0.0.1:7001",
            "--balance-tolerance",
            "0.05",
        ])
        .unwrap();
        assert_eq!(fraction.placement.tolerance, 0.05);
    }

    /// `--rejoin` needs `--join`, and a data directory that is new (absent or empty).
    #[test]
    fn rejoin_needs_join_and_a_new_data_directory() {
        let err = args(&["--initial-cluster", "1=http://a:1", "--rejoin"]).unwrap_err();
        assert!(err.contains("--join"), "{err}");
        let dir = tempfile::TempDir::new().unwrap();
        let data_dir = dir.path().join("m1");
        let data_dir = data_dir.to_str().unwrap();
        let rejoin = |data_dir: &str| {
            let argv = [
                "leasehold-manager",
                "--id",
                "1",
                "--listen",
                "127.0.0.1:7001",
                "--data-dir",
                data_dir,
                "--join",
                "http://127.0.0.1:7002",
                "--rejoin",
            ];
            let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
            ManagerConfig::try_from(args).map_err(|e| e.to_string())
        };
        assert!(
            rejoin(data_dir).unwrap().rejoin,
            "an absent directory is new"
        );
        std::fs::create_dir(data_dir).unwrap();
        assert!(rejoin(data_dir).is_ok(), "an empty directory is new");
        std::fs::write(dir.path().join("m1/db"), b"x").unwrap();
        let err = rejoin(data_dir).unwrap_err();
        assert!(
            err.contains("--rejoin is only for a lost data directory"),
            "{err}"
        );
    }

    #[test]
    fn a_million_shards_are_accepted() {
        let config = args(&[
            "--initial-cluster",
            "1=http://127.0.0.1:7001",
            "--shard-count",
            "1000000",
        ])
        .unwrap();
        assert_eq!(config.shard_count, 1_000_000);
    }

    #[test]
    fn bad_flags_are_refused_with_a_reason() {
        for (flags, expect) in [
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--lease-duration",
                    "100years",
                ],
                "--lease-duration",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--election-timeout",
                    "2h",
                ],
                "--election-timeout",
            ),
            (
                vec!["--initial-cluster", "1=http://a:1", "--heartbeat", "0s"],
                "--heartbeat",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--mass-expiry-grace",
                    "400days",
                ],
                "--mass-expiry-grace",
            ),
            (
                vec!["--initial-cluster", "1=http://a:1", "--lease-duration=-5s"],
                "lease-duration",
            ),
            (
                vec!["--initial-cluster", "2=http://127.0.0.1:7002"],
                "must list this node",
            ),
            (
                vec!["--initial-cluster", "1=ftp://x"],
                "must be http or https",
            ),
            (
                vec!["--initial-cluster", "1=http://a:1,1=http://b:2"],
                "twice",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--lease-duration",
                    "2s",
                ],
                "at least 3",
            ),
            (
                vec!["--initial-cluster", "1=http://a:1", "--shard-count", "0"],
                "0",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--shard-count",
                    "1048577",
                ],
                "1048577",
            ),
            (
                vec!["--initial-cluster", "1=http://a:1", "--heartbeat", "1s"],
                "third",
            ),
            (
                vec!["--initial-cluster", "1=http://a:1", "--join", "http://a:1"],
                "cannot be used with",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--balance-tolerance",
                    "0",
                ],
                "outside (0, 1]",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--balance-tolerance",
                    "150%",
                ],
                "outside (0, 1]",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--balance-tolerance",
                    "NaN",
                ],
                "outside (0, 1]",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--balance-tolerance",
                    "ten",
                ],
                "not a number",
            ),
            (
                vec![
                    "--initial-cluster",
                    "1=http://a:1",
                    "--max-balance-moves",
                    "0",
                ],
                "max-balance-moves",
            ),
        ] {
            let err = args(&flags).unwrap_err();
            assert!(err.contains(expect), "{flags:?}: {err}");
        }
    }
}
