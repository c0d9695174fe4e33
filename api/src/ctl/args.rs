//! The command line: nouns, verbs and their flags (clap).

use super::*;

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
pub(super) fn namespace_name(name: &str) -> Result<String, NamespaceNameError> {
    check_namespace_name(name).map(|()| name.to_owned())
}

/// A namespace's lease in whole milliseconds, what the wire carries: a finer duration would be
/// cut without a word, and one outside 1ms..=24h is refused by the managers anyway.
pub(super) fn lease_ms(text: &str) -> Result<u64, String> {
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

/// Each verb takes an executor's id or its unique name, as `executor list` shows them: the ids
/// are minted by the managers (`ex-<log index>`), the names given by whoever started it.
#[derive(Debug, Subcommand)]
pub enum ExecutorVerb {
    /// All registered executors.
    List,
    /// One executor.
    Show {
        /// Its id (`ex-N`), or its name when exactly one registered executor has that name.
        #[arg(value_name = "EXECUTOR")]
        executor_id: String,
    },
    /// Move an executor's shards to the others (through the normal release handoff) and give it
    /// no new ones; `--cancel` (or `undrain`) reverses it.
    Drain {
        /// Its id (`ex-N`), or its name when exactly one registered executor has that name.
        #[arg(value_name = "EXECUTOR")]
        executor_id: String,
        /// Cancel a drain instead.
        #[arg(long)]
        cancel: bool,
    },
    /// Cancel a drain.
    Undrain {
        /// Its id (`ex-N`), or its name when exactly one registered executor has that name.
        #[arg(value_name = "EXECUTOR")]
        executor_id: String,
    },
    /// Whether stopping this executor now leaves its shards a place to go (PROTOCOL P17.4):
    /// prints the verdict and its reason; exits 7 when it is not safe.
    SafeToStop {
        /// Its id (`ex-N`), or its name when exactly one registered executor has that name.
        #[arg(value_name = "EXECUTOR")]
        executor_id: String,
    },
    /// Deregister an executor as an operator (PROTOCOL P5.5): one that still holds shards is
    /// drained first, and removed once its shards have moved by handoff; until then it is shown
    /// draining. Needs the admin role under TLS.
    Remove {
        /// Its id (`ex-N`), or its name when exactly one registered executor has that name.
        #[arg(value_name = "EXECUTOR")]
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
        /// Its shard count: its shards are 0..N. `namespace reshard` doubles or halves it later.
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
        #[command(flatten)]
        replicas: replicas::ReplicaArgs,
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
    /// from now on: a lower bound removes no one), placement settings (for plans from now on,
    /// cluster version 12) or replicas (cluster version 13); `namespace reshard` changes its
    /// shard count. Needs the admin role under TLS.
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
                "replicas",
                "secondary_weight",
                "replica_restore_delay",
                "min_active",
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
        #[command(flatten)]
        replicas: replicas::ReplicaArgs,
    },
    /// Change a namespace's shard count online: twice the count splits each shard in two, half
    /// of it merges pairs (shard s of N takes the keys of s and s + N/2). Every key keeps at most
    /// one executor throughout. A split is carried out once the namespace's handoffs in flight
    /// are done; a merge first brings each pair to one executor. Refused while another reshard
    /// is under way or an executor in it does not follow a change of layout. Needs the admin
    /// role of the namespace under TLS, and cluster version 14.
    Reshard {
        /// The namespace's name.
        #[arg(value_parser = namespace_name)]
        name: String,
        /// The shard count wanted: twice or half the current one.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SHARD_COUNT)))]
        shards: u32,
        /// Wait until the reshard is done, printing what it waits on as that changes.
        #[arg(long)]
        wait: bool,
        /// With `--wait`: give up after this long (exit code 6; the reshard goes on).
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        wait_timeout: Duration,
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
