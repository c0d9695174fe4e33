//! `leasehold-loadgen`: drives simulated executors against a three-node Leasehold cluster and the
//! same load shape against a three-member etcd cluster, both on loopback, and prints markdown
//! table rows for docs/BENCHMARKS.md. One subcommand per scenario (B1–B12), plus `smoke`, the
//! short run CI executes. B7 compares Leasehold with itself (placement by load and by count), so
//! it has no etcd half. `transport` starts no system: it measures one Raft RPC exchange on the
//! transports the managers could use (src/transport.rs).
//!
//! The systems run as real processes: `leasehold-manager` from `--bin-dir` (by default
//! `LEASEHOLD_BIN_DIR`, else the directory this binary is in, so
//! `target/release/leasehold-loadgen` runs the release managers) and `etcd` from PATH or
//! `--etcd-bin`. Without etcd, or in a build without the `etcd` feature (src/etcd.rs), the etcd
//! half of a scenario is skipped with a message naming the reason. `--tls` runs both systems
//! with mutual TLS (src/tls.rs).

mod b7;
mod drive;
mod etcd;
mod fleet;
mod procs;
mod report;
mod scenarios;
mod tls;
mod transport;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand, ValueEnum};

use crate::drive::Ramp;
use crate::procs::{default_flags, load_average, EtcdCluster};
use crate::scenarios::{Env, B1, B12, B13, B14, B3, B6, B8};
use crate::tls::{Certs, Security};

#[derive(Debug, Parser)]
#[command(
    name = "leasehold-loadgen",
    version,
    about = "Benchmarks Leasehold against etcd on loopback (docs/BENCHMARKS.md)"
)]
struct Cli {
    /// Directory holding leasehold-manager and leasehold-executor; defaults to LEASEHOLD_BIN_DIR,
    /// else this binary's.
    #[arg(long, global = true)]
    bin_dir: Option<PathBuf>,

    /// The etcd binary; defaults to `etcd` on PATH.
    #[arg(long, global = true)]
    etcd_bin: Option<PathBuf>,

    /// Run the Leasehold half only (e.g. for a profiling run).
    #[arg(long, global = true)]
    skip_etcd: bool,

    /// Keep data directories and process logs here instead of a temporary directory.
    #[arg(long, global = true)]
    work_dir: Option<PathBuf>,

    /// Mutual TLS for both systems, on certificates made in the work directory (`tls/`).
    /// `--tls` (`--tls=on`): every system runs under TLS. `--tls=compare` (B1 and B2): each
    /// system runs in plaintext and then under TLS, and the table gives TLS's cost.
    #[arg(
        long,
        global = true,
        value_enum,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = TlsMode::Off,
        default_missing_value = "on"
    )]
    tls: TlsMode,

    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TlsMode {
    /// Plaintext (loopback only, as the managers allow it).
    Off,
    /// Mutual TLS.
    On,
    /// Plaintext, then mutual TLS, per system (B1 and B2 only).
    Compare,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Highest renewals/s with p99 within a bound: open-loop ramp, Leasehold vs etcd (a) and (b).
    B1(B1Flags),
    /// One executor's renewal latency vs one etcd client's put (and keepalive).
    B2 {
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Leader SIGKILL → first successful renewal, several runs, both systems.
    B3(B3Flags),
    /// Executor SIGKILL → all its shards owned elsewhere, per shard count.
    B4 {
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        shards: Vec<u32>,
    },
    /// Scale: snapshot size, build, install on a joining node, restart, leader RSS.
    B5 {
        #[arg(long, default_value_t = 10_000)]
        executors: usize,
        #[arg(long, default_value_t = 1_000_000)]
        shards: u32,
        /// Manager heartbeat [default: the manager's]. openraft drops an AppendEntries that
        /// takes longer than one heartbeat, and a rebalance of many shards is a large entry.
        #[arg(long)]
        heartbeat: Option<String>,
        /// Manager minimum election timeout (at least 3 heartbeats) [default: the manager's].
        #[arg(long)]
        election_timeout: Option<String>,
    },
    /// Renewals at a fixed rate while the leader builds snapshots of a large state: p99 of the
    /// renewals a build overlaps, beside those none does.
    B8(B8Flags),
    /// A whole fleet starting at once: registration, then every shard delivered and spread
    /// even, per shard count.
    B9 {
        #[arg(long, default_value_t = 10_000)]
        executors: usize,
        #[arg(long, value_delimiter = ',', default_value = "1024,1000000")]
        shards: Vec<u32>,
    },
    /// An idle leader: the fleet renews at the protocol's cadence, nothing changes; CPU of every
    /// manager over a window.
    B10 {
        #[arg(long, default_value_t = 10_000)]
        executors: usize,
        #[arg(long, value_delimiter = ',', default_value = "1000000")]
        shards: Vec<u32>,
        /// After settling, renew this long before measuring.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        quiet: Duration,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
        window: Duration,
    },
    /// A rolling deploy of real executors (maxSurge 1: start the replacement, wait until it
    /// registered, SIGTERM the old one, settle): moves per shard, handoffs onto executors
    /// replaced later, each handoff's no-owner window, I1/I2 over the admission logs.
    B11 {
        #[arg(long, default_value_t = 4)]
        executors: usize,
        #[arg(long, default_value_t = 64)]
        shards: u32,
        #[arg(long, default_value_t = 2)]
        runs: usize,
        /// Every executor's prepare hook (P17.1, `leasehold-executor --prepare-delay`): how long
        /// it warms up for each shard about to arrive; `0s` for none.
        #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
        prepare_delay: Duration,
    },
    /// Namespaces side by side (the namespace half of B12): renewal latency per namespace,
    /// steady and while one namespace registers a storm of executors at once, and how soon a
    /// deregistration's shards are owned again, before and during the storm.
    B12(B12Flags),
    /// Replicas with roles (PROTOCOL §19) over real executors: a drain's primary moves onto
    /// ready secondaries and their no-owner windows, a SIGKILL's promotions, a restart under the
    /// same name within the restore delay, and a rolling deploy with the replicas.
    B13(B13Flags),
    /// Resharding under renewal load: a namespace split to twice its shards and merged back, its
    /// executors renewing throughout (every key owned, renewal latency, the spread, I1/I2 per key).
    B14(B14Flags),
    /// Placement by load against placement by count and the offline optimum's lower bound: two
    /// clusters side by side under the same skewed, shifting load (Zipf rates, hot set
    /// re-permuted every shift).
    B7(B7Flags),
    /// Renewal soak: data directory size over time against the snapshot size.
    B6 {
        #[arg(long, default_value = "60m", value_parser = humantime::parse_duration)]
        duration: Duration,
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        sample_every: Duration,
        #[arg(long, default_value_t = 1000)]
        executors: usize,
        /// Renewals/s over the fleet (the protocol's own cadence for 1000 executors and a 60 s
        /// lease is 50/s; this compresses hours of log into the run).
        #[arg(long, default_value_t = 1000.0)]
        rate: f64,
        #[arg(long, default_value_t = 1024)]
        shards: u32,
    },
    /// One Raft RPC exchange at a time (as openraft 0.9 replicates) over HTTP/1.1 keep-alive,
    /// HTTP/2 and a length-prefixed TCP stream, in this process: latency and CPU per exchange.
    /// Starts no system.
    Transport {
        /// Request body sizes in bytes [default: a heartbeat, a small renewal batch, B2's
        /// `Renew` entry of 1 024 claims, a large batch].
        #[arg(long, value_delimiter = ',', default_value = "128,1024,4096,65536")]
        body_bytes: Vec<usize>,
        #[arg(long, default_value_t = 20_000)]
        exchanges: usize,
        #[arg(long, default_value_t = 2_000)]
        warmup: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The short version CI runs: seconds per system, small N, a short soak.
    Smoke {
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        soak: Duration,
    },
}

/// The flags of `leasehold-loadgen b1`.
#[derive(Debug, clap::Args)]
struct B1Flags {
    #[arg(long, default_value_t = 1000)]
    executors: usize,
    #[arg(long, default_value_t = 1024)]
    shards: u32,
    /// First offered rate (renewals/s over the whole fleet).
    #[arg(long, default_value_t = 100.0)]
    start_rate: f64,
    /// Each step offers this much more than the last.
    #[arg(long, default_value_t = 1.5)]
    factor: f64,
    #[arg(long, default_value_t = 16)]
    max_steps: usize,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    measure: Duration,
    #[arg(long, default_value_t = 25.0)]
    p99_ms: f64,
    /// etcd client connections the fleet shares (each over all three endpoints).
    #[arg(long, default_value_t = 4)]
    etcd_connections: usize,
    /// Also ramp Leasehold with every renewal reporting a load for each shard it holds
    /// (P15.1), after the same ramp without, and give the difference (B7's cost of load
    /// reporting).
    #[arg(long)]
    report_loads: bool,
}

/// The flags of `leasehold-loadgen b3`.
#[derive(Debug, clap::Args)]
struct B3Flags {
    /// Fresh clusters per system.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Leader kills in a row per cluster, the killed member restarted after each and the
    /// next kill as soon as every member names the new leader (as a new user trying failover
    /// would); the table then has a row per kill.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    kills: u64,
    /// Lease holders renewing at the protocol's cadence throughout (checked for eviction).
    #[arg(long, default_value_t = 100)]
    executors: usize,
    /// Leasehold runs, one per minimum election timeout (heartbeat 100 ms as etcd's, the
    /// maximum twice the minimum) [default: 1s,500ms; none with --defaults].
    #[arg(long, value_delimiter = ',')]
    election_timeouts: Option<Vec<String>>,
    /// Both systems at the defaults they ship with, no timing flags for either: Leasehold
    /// without --heartbeat, --election-timeout or --lease-duration (instead of the
    /// --election-timeouts rows, unless those are given too), etcd as always without timing
    /// flags; the holders on the 60 s default lease.
    #[arg(long)]
    defaults: bool,
}

/// The flags of `leasehold-loadgen b13`.
#[derive(Debug, clap::Args)]
struct B13Flags {
    #[arg(long, default_value_t = 4)]
    executors: usize,
    #[arg(long, default_value_t = 64)]
    shards: u32,
    /// Replicas per shard (P19.1): a primary and `replicas - 1` secondaries.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=5))]
    replicas: u32,
    /// The namespace's restore delay (P19.4); the SIGKILLed executor starts again well within
    /// it.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    restore_delay: Duration,
}

/// The flags of `leasehold-loadgen b14`.
#[derive(Debug, clap::Args)]
struct B14Flags {
    #[arg(long, default_value_t = 100)]
    executors: usize,
    /// The namespace's shards before the split (it splits to twice this, then merges back).
    #[arg(long, default_value_t = 1024)]
    shards: u32,
}

/// The flags of `leasehold-loadgen b7`.
#[derive(Debug, clap::Args)]
struct B7Flags {
    /// Length of the measured run, in minutes [default: 30; 2 with --short].
    #[arg(long)]
    minutes: Option<f64>,
    /// The hot set is re-permuted this often [default: 5m; 30s with --short].
    #[arg(long, value_parser = humantime::parse_duration)]
    shift_every: Option<Duration>,
    #[arg(long, default_value_t = 16)]
    executors: usize,
    /// How many executors have --big-capacity; the others have capacity 1.
    #[arg(long, default_value_t = 4)]
    big: usize,
    #[arg(long, default_value_t = 2)]
    big_capacity: u32,
    #[arg(long, default_value_t = 1024)]
    shards: u32,
    /// Zipf exponent of the per-shard request rates (rank k gets k^-s).
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Seeds the hot sets (the permutations of ranks) and the measurement noise.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sample both clusters this often [default: 10s; 2s with --short].
    #[arg(long, value_parser = humantime::parse_duration)]
    sample_every: Option<Duration>,
    /// One time-series row per this much [default: 1m; 10s with --short].
    #[arg(long, value_parser = humantime::parse_duration)]
    row_every: Option<Duration>,
    /// The last this-much of every window is its steady state [default: 2m; 12s with
    /// --short].
    #[arg(long, value_parser = humantime::parse_duration)]
    steady: Option<Duration>,
    /// Multiplicative noise on every reported load: ×(1 ± this), uniform, from the seed.
    #[arg(long, default_value_t = 0.05)]
    noise: f64,
    /// The managers' lease [default: 60s, production's; 6s with --short].
    #[arg(long, value_parser = humantime::parse_duration)]
    lease: Option<Duration>,
    /// A smoke check: 2 minutes, a shift every 30 s, a 6 s lease (renewals and plans every
    /// 2 s), unless the flags above say otherwise.
    #[arg(long)]
    short: bool,
}

/// The flags of `leasehold-loadgen b8`.
#[derive(Debug, clap::Args)]
struct B8Flags {
    #[arg(long, default_value_t = 10_000)]
    executors: usize,
    #[arg(long, default_value_t = 1_000_000)]
    shards: u32,
    /// Offered renewals/s over the fleet [default: half of B1's 12 953/s at 10 000
    /// executors, docs/BENCHMARKS.md].
    #[arg(long, default_value_t = 6_500.0)]
    rate: f64,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    measure: Duration,
    /// Between one forced snapshot's reply and the next request.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    build_gap: Duration,
    #[arg(long, default_value_t = 25.0)]
    p99_ms: f64,
    /// Also measure a second cluster at the shipped snapshot policy, no forced builds.
    #[arg(long)]
    shipped_policy: bool,
}

/// The flags of `leasehold-loadgen b12` [defaults: issue 38's target].
#[derive(Debug, clap::Args)]
struct B12Flags {
    /// Namespaces `ns-000`… (the storm is in `ns-000`).
    #[arg(long, default_value_t = 100)]
    namespaces: usize,
    /// Shards of each namespace.
    #[arg(long, default_value_t = 1024)]
    shards: u32,
    /// Executors registered into each namespace before the storm.
    #[arg(long, default_value_t = 10)]
    executors: usize,
    /// Executors `ns-000` registers at once.
    #[arg(long, default_value_t = 1000)]
    storm: usize,
    /// The steady window: every namespace renewing, nothing else happening.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Deregistrations timed to every shard owned again: this many before the storm, at most
    /// this many during it, each in a namespace of its own.
    #[arg(long, default_value_t = 5)]
    probes: usize,
    /// The namespaces' lease; their executors renew a third into it [default: the managers'
    /// shipped 60 s].
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// The storm's executors renew at times spread over a third of the lease (as executors
    /// started at different times would), not all together a third into the lease their
    /// registration was told (as executors registered at once do).
    #[arg(long)]
    storm_spread: bool,
    #[arg(long, default_value_t = 25.0)]
    p99_ms: f64,
}

impl B12Flags {
    fn args(self) -> Result<B12> {
        let args = B12 {
            namespaces: self.namespaces,
            shards: self.shards,
            executors: self.executors,
            storm: self.storm,
            duration: self.duration,
            probes: self.probes,
            lease: self.lease,
            storm_spread: self.storm_spread,
            p99_bound_ms: self.p99_ms,
        };
        args.check()?;
        Ok(args)
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let comparable = matches!(cli.scenario, Scenario::B1 { .. } | Scenario::B2 { .. });
    if cli.tls == TlsMode::Compare && !comparable {
        bail!("--tls=compare is for b1 and b2; use --tls to run the others under TLS");
    }
    let (bin_dir, etcd_bin) = binaries(&cli)?;
    let temp = tempfile::Builder::new()
        .prefix("leasehold-loadgen-")
        .tempdir()?;
    let work_dir = match &cli.work_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let security = match cli.tls {
        TlsMode::Off => Security::Plaintext,
        TlsMode::On | TlsMode::Compare => {
            Security::Tls(Arc::new(Certs::make(&work_dir.join("tls"))?))
        }
    };
    describe_run(&bin_dir, etcd_bin.as_deref(), &work_dir, cli.tls);
    let env = Env {
        bin_dir,
        etcd_bin,
        work_dir,
        security,
        compare_tls: cli.tls == TlsMode::Compare,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // Stopped by a signal, the scenario is dropped, and with it every process it started.
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            result = run(&env, cli.scenario) => result,
            _ = tokio::signal::ctrl_c() => bail!("interrupted"),
            _ = terminate.recv() => bail!("terminated"),
        }
    })
}

/// The managers' directory and the etcd binary, if etcd is to run (found, not skipped, and
/// this build has its client).
fn binaries(cli: &Cli) -> Result<(PathBuf, Option<PathBuf>)> {
    let bin_dir = match &cli.bin_dir {
        Some(dir) => dir.clone(),
        None => leasehold_harness::bin_dir()?,
    };
    let etcd_bin = EtcdCluster::find_binary(cli.etcd_bin.as_deref());
    if cli.etcd_bin.is_some() && etcd_bin.is_none() {
        bail!("--etcd-bin does not name a file");
    }
    // A build without the etcd client runs the Leasehold half of every scenario (crate::etcd).
    let etcd_bin = etcd_bin.filter(|_| !cli.skip_etcd && etcd::built());
    Ok((bin_dir, etcd_bin))
}

/// Says on stderr what the run uses: the managers, etcd, the work directory and the transport.
fn describe_run(bin_dir: &Path, etcd_bin: Option<&Path>, work_dir: &Path, tls: TlsMode) {
    eprintln!(
        "managers from {}; etcd: {}; work dir {}; {}",
        bin_dir.display(),
        etcd_bin
            .map(|b| format!("{} ({})", b.display(), EtcdCluster::version(b)))
            .unwrap_or_else(|| if etcd::built() {
                "not found".to_owned()
            } else {
                etcd::NOT_BUILT.to_owned()
            }),
        work_dir.display(),
        match tls {
            TlsMode::Off => "plaintext",
            TlsMode::On => "mutual TLS",
            TlsMode::Compare => "plaintext, then mutual TLS",
        }
    );
}

impl B1Flags {
    fn args(self) -> Result<B1> {
        if self.factor <= 1.0 || self.start_rate <= 0.0 {
            bail!("--factor must exceed 1 and --start-rate must be positive");
        }
        Ok(B1 {
            executors: self.executors,
            shards: self.shards,
            ramp: Ramp {
                start_per_s: self.start_rate,
                factor: self.factor,
                max_steps: self.max_steps,
                warmup: self.warmup,
                measure: self.measure,
                p99_bound_ms: self.p99_ms,
            },
            etcd_connections: self.etcd_connections,
            report_loads: self.report_loads,
        })
    }
}

impl B3Flags {
    fn args(self) -> Result<B3> {
        let defaults = self.defaults;
        Ok(B3 {
            runs: self.runs,
            kills: usize::try_from(self.kills)?,
            executors: self.executors,
            election_timeouts: self.election_timeouts.unwrap_or_else(|| {
                if defaults {
                    Vec::new()
                } else {
                    vec!["1s".to_owned(), "500ms".to_owned()]
                }
            }),
            shipped: defaults,
        })
    }
}

impl B7Flags {
    fn args(self) -> Result<b7::B7> {
        let short = self.short;
        let pick = |given: Option<Duration>, long: u64, short_ms: u64| {
            given.unwrap_or(if short {
                Duration::from_millis(short_ms)
            } else {
                Duration::from_secs(long)
            })
        };
        let minutes = self.minutes.unwrap_or(if short { 2.0 } else { 30.0 });
        if !(minutes > 0.0 && minutes.is_finite() && (0.0..1.0).contains(&self.noise)) {
            bail!("--minutes must be positive and --noise in [0, 1)");
        }
        if self.big > self.executors
            || self.big_capacity == 0
            || self.shards == 0
            || self.zipf < 0.0
        {
            bail!("--big at most --executors, --big-capacity and --shards positive, --zipf ≥ 0");
        }
        let args = b7::B7 {
            duration: Duration::from_secs_f64(minutes * 60.0),
            shift_every: pick(self.shift_every, 300, 30_000),
            executors: self.executors,
            big: self.big,
            big_capacity: self.big_capacity,
            shards: self.shards,
            zipf: self.zipf,
            seed: self.seed,
            sample_every: pick(self.sample_every, 10, 2_000),
            row_every: pick(self.row_every, 60, 10_000),
            steady: pick(self.steady, 120, 12_000),
            noise: self.noise,
            lease: pick(self.lease, 60, 6_000),
        };
        if args.sample_every.is_zero() || args.shift_every.is_zero() {
            bail!("--sample-every and --shift-every must be positive");
        }
        Ok(args)
    }
}

impl B8Flags {
    fn args(self) -> Result<B8> {
        if !(self.rate > 0.0 && self.rate.is_finite()) || self.measure.is_zero() {
            bail!("--rate and --measure must be positive");
        }
        Ok(B8 {
            executors: self.executors,
            shards: self.shards,
            rate_per_s: self.rate,
            warmup: self.warmup,
            measure: self.measure,
            build_gap: self.build_gap,
            p99_bound_ms: self.p99_ms,
            shipped_policy: self.shipped_policy,
        })
    }
}

/// B7's run and its three tables, with the machine's load average before and after.
async fn run_b7(env: &Env, args: b7::B7) -> Result<()> {
    let load = load_average();
    let samples = b7::run(env, &args).await?;
    let load = format!("{load} → {}", load_average());
    b7::series_table(&args, &samples).print()?;
    b7::shifts_table(&args, &samples).print()?;
    b7::summary_table(&args, &samples, &load).print()?;
    Ok(())
}

/// One scenario, its tables printed on stdout: one arm per subcommand.
async fn run(env: &Env, scenario: Scenario) -> Result<()> {
    match scenario {
        Scenario::B1(flags) => scenarios::b1(env, &flags.args()?).await?.print()?,
        Scenario::B2 { duration } => scenarios::b2(env, duration).await?.print()?,
        Scenario::B3(flags) => scenarios::b3(env, &flags.args()?).await?.print()?,
        Scenario::B4 { shards } => scenarios::b4(env, &shards).await?.print()?,
        Scenario::B5 {
            executors,
            shards,
            heartbeat,
            election_timeout,
        } => run_b5(env, executors, shards, heartbeat, election_timeout).await?,
        Scenario::B7(flags) => run_b7(env, flags.args()?).await?,
        Scenario::B8(flags) => scenarios::b8(env, &flags.args()?).await?.print()?,
        Scenario::B9 { executors, shards } => {
            scenarios::b9(env, executors, &shards).await?.print()?
        }
        Scenario::B10 {
            executors,
            shards,
            quiet,
            window,
        } => run_b10(env, executors, shards, quiet, window).await?,
        Scenario::B11 {
            executors,
            shards,
            runs,
            prepare_delay,
        } => scenarios::b11(env, executors, shards, runs, prepare_delay)
            .await?
            .print()?,
        Scenario::B12(flags) => print_all(scenarios::b12(env, &flags.args()?).await?)?,
        Scenario::B13(flags) => scenarios::b13(
            env,
            &B13 {
                executors: flags.executors,
                shards: flags.shards,
                replicas: flags.replicas,
                restore_delay: flags.restore_delay,
            },
        )
        .await?
        .print()?,
        Scenario::B14(flags) => scenarios::b14(
            env,
            &B14 {
                executors: flags.executors,
                shards: flags.shards,
            },
        )
        .await?
        .print()?,
        Scenario::B6 {
            duration,
            sample_every,
            executors,
            rate,
            shards,
        } => run_b6(env, duration, sample_every, executors, rate, shards).await?,
        Scenario::Transport {
            body_bytes,
            exchanges,
            warmup,
            rounds,
        } => run_transport(body_bytes, exchanges, warmup, rounds).await?,
        Scenario::Smoke { soak } => print_all(scenarios::smoke(env, soak).await?)?,
    }
    Ok(())
}

/// Prints `tables` in order.
fn print_all(tables: Vec<report::Table>) -> Result<()> {
    for table in tables {
        table.print()?;
    }
    Ok(())
}

/// B5 with the managers' heartbeat and election timeout as given (the managers' own without).
async fn run_b5(
    env: &Env,
    executors: usize,
    shards: u32,
    heartbeat: Option<String>,
    election_timeout: Option<String>,
) -> Result<()> {
    let mut options = default_flags(shards);
    options.heartbeat = heartbeat;
    options.election_timeout = election_timeout;
    scenarios::b5(env, executors, options).await?.print()?;
    Ok(())
}

/// B10 at each of `shard_counts`.
async fn run_b10(
    env: &Env,
    executors: usize,
    shard_counts: Vec<u32>,
    quiet: Duration,
    window: Duration,
) -> Result<()> {
    let options = scenarios::B10Options {
        executors,
        shard_counts,
        quiet,
        window,
    };
    scenarios::b10(env, &options).await?.print()?;
    Ok(())
}

/// B6's soak with the managers' shipped flags, and its two tables.
async fn run_b6(
    env: &Env,
    duration: Duration,
    sample_every: Duration,
    executors: usize,
    rate_per_s: f64,
    shards: u32,
) -> Result<()> {
    let args = B6 {
        duration,
        sample_every,
        executors,
        rate_per_s,
        shards,
        manager_args: Vec::new(),
    };
    let (series, summary) = scenarios::b6(env, &args).await?;
    series.print()?;
    summary.print()?;
    Ok(())
}

/// The transport scenario: one Raft RPC exchange per transport and body size.
async fn run_transport(
    body_sizes: Vec<usize>,
    exchanges: usize,
    warmup: usize,
    rounds: usize,
) -> Result<()> {
    let params = transport::TransportRun {
        body_sizes,
        exchanges,
        warmup,
        rounds,
    };
    // Both ends run in this process, each on a runtime of its own, driven from a thread
    // outside this runtime.
    let table = tokio::task::spawn_blocking(move || transport::run(&params)).await??;
    table.print()?;
    Ok(())
}
