//! The scenarios of docs/BENCHMARKS.md (B1–B6, B8–B10; B7 is in src/b7.rs) and the short CI run.
//! Each prints a markdown table on stdout; progress goes to stderr.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use leasehold_api::client::ClientConfig;
use leasehold_api::routing::{RouteTable, RoutingClient, RoutingConfig};
use leasehold_api::wire::RoutingTable;
use leasehold_api::wire::{ClusterInfo, ExecutorView};
use leasehold_harness::{
    binary_in, free_port, poll_every, poll_until, ChildProcess, Manager, ManagerCluster,
    ManagerFlags,
};
use tokio::time::Instant;

use crate::drive::{self, Cadence, Ramp, RampResult, StepResult};
use crate::etcd::{EtcdKeepAliveFleet, EtcdPutFleet};
use crate::fleet::{claims_payload, FleetSpec, LeaseholdFleet, Renewer, UniformLoad};
use crate::procs::{
    self, default_flags, dir_bytes, etcd_timing, load_average, log_lines_containing, rss_bytes,
    EtcdCluster, DEFAULT_LEASE_DURATION, POLL_INTERVAL, TERMINATE_BOUND,
};
use crate::report::{fmt_bytes, fmt_ms, fmt_rate, Table};
use crate::tls::{check_refuses_unauthenticated, Security};

/// Where binaries and scratch space are, shared by every scenario.
#[derive(Debug, Clone)]
pub struct Env {
    pub bin_dir: PathBuf,
    /// `None`: etcd is not installed; the etcd half of each scenario is skipped (and says so).
    pub etcd_bin: Option<PathBuf>,
    pub work_dir: PathBuf,
    /// Plaintext, or mutual TLS (`--tls`) for both systems.
    pub security: Security,
    /// `--tls=compare`: B1 and B2 measure each system in plaintext and then under TLS
    /// ([`Env::security`]), one after the other.
    pub compare_tls: bool,
}

impl Env {
    /// The transports B1 and B2 measure each system under, in order.
    fn securities(&self) -> Vec<Security> {
        if self.compare_tls {
            vec![Security::Plaintext, self.security.clone()]
        } else {
            vec![self.security.clone()]
        }
    }

    /// A fresh directory for one cluster. An existing one is refused: managers started on an
    /// earlier run's data would rejoin that run's cluster instead of forming a new one.
    fn dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.work_dir.join(name);
        if dir.exists() {
            bail!(
                "{} exists (from an earlier run?): remove it or choose another --work-dir",
                dir.display()
            );
        }
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    fn etcd_or_skip(&self, scenario: &str) -> Option<&Path> {
        if !crate::etcd::built() {
            eprintln!("{scenario}: etcd skipped: {}", crate::etcd::NOT_BUILT);
        } else if self.etcd_bin.is_none() {
            eprintln!(
                "{scenario}: etcd skipped: --skip-etcd, or no etcd binary on PATH (apt-get install etcd-server, or --etcd-bin)"
            );
        }
        self.etcd_bin.as_deref()
    }
}

/// TTL of the leases etcd shape (a) attaches its puts to. A put does not extend its lease, so
/// the lease must outlive the whole run, or late puts fail with "lease not found".
const PUT_LEASE_TTL_S: i64 = 24 * 3600;

/// Bounds for setting clusters up; generous, since the machine may be loaded.
pub(crate) const FORM_BOUND: Duration = Duration::from_secs(120);
pub(crate) const SETTLE_BOUND: Duration = Duration::from_secs(900);

/// A client configuration for simulated executors: the protocol's patience (P7.1).
pub(crate) fn executor_client() -> ClientConfig {
    ClientConfig::default()
}

/// Three managers, formed; under TLS, each checked to refuse plaintext and clients without a
/// certificate.
pub(crate) async fn leasehold_cluster(
    env: &Env,
    security: &Security,
    name: &str,
    options: ManagerFlags,
) -> Result<ManagerCluster> {
    let mut cluster = procs::start_managers(&env.bin_dir, &env.dir(name)?, options, security)?;
    cluster.wait_for_leader(FORM_BOUND).await?;
    if let Some(certs) = security.certs() {
        for url in cluster.urls() {
            check_refuses_unauthenticated(certs, &url, "/v1/cluster").await?;
        }
    }
    Ok(cluster)
}

/// Three etcd members with `extra_args`, formed; under TLS, each checked as in
/// [`leasehold_cluster`].
async fn etcd_cluster(
    binary: &Path,
    env: &Env,
    security: &Security,
    name: &str,
    extra_args: Vec<String>,
) -> Result<EtcdCluster> {
    let mut cluster = EtcdCluster::start(binary, &env.dir(name)?, security, extra_args)?;
    cluster.wait_for_leader(FORM_BOUND).await?;
    if let Some(certs) = security.certs() {
        for url in cluster.client_urls() {
            check_refuses_unauthenticated(certs, &url, "/version").await?;
        }
    }
    Ok(cluster)
}

/// `count` simulated executors against `cluster`, over `security`.
async fn leasehold_fleet(
    cluster: &ManagerCluster,
    security: &Security,
    count: usize,
    config: ClientConfig,
) -> Result<LeaseholdFleet> {
    leasehold_fleet_spec(cluster, security, FleetSpec::plain(count), config).await
}

/// The simulated executors `spec` describes against `cluster`, over `security`.
async fn leasehold_fleet_spec(
    cluster: &ManagerCluster,
    security: &Security,
    spec: FleetSpec,
    config: ClientConfig,
) -> Result<LeaseholdFleet> {
    LeaseholdFleet::start(cluster.urls(), spec, config, security.executor_tls()).await
}

/// Who keeps the fleet renewing while [`settle`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewing {
    /// The caller already runs a [`Cadence`].
    ByCaller,
    /// Nobody yet: `settle` renews at the protocol's cadence while it waits, as live executors
    /// would. A slow settle (a handoff whose revoke push was lost waits for the old owner's
    /// grant to end, P5.2) must not outlast the fleet's leases.
    WhileSettling,
}

/// Waits until the leader records every executor with every shard delivered and the spread
/// even (P5.4), i.e. the cluster has stopped moving shards; then renews every executor once, as
/// real executors would within a third of a lease, so each adopts its recorded set (P4.2) even
/// where a push arrived out of order and was ignored as stale (P4.1).
async fn settle(
    cluster: &mut ManagerCluster,
    fleet: &Arc<LeaseholdFleet>,
    shard_count: u32,
    bound: Duration,
    renewing: Renewing,
) -> Result<()> {
    let cadence = (renewing == Renewing::WhileSettling)
        .then(|| Cadence::start(fleet.clone(), DEFAULT_LEASE_DURATION));
    let shards = usize::try_from(shard_count)?;
    let executors = fleet.size();
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let started = Instant::now();
    let mut last_report = Instant::now();
    // The full view serialises every executor's set, about 25 bytes per shard (25 MB at a
    // million), which on this machine competes with the cluster it observes. So the leader's
    // gauges, a page of a few kilobytes, are read every `GAUGE_INTERVAL` first, and the full view
    // only once they say every executor is there with every shard owned and none releasing, at
    // most once per `full_interval`.
    let full_interval =
        Duration::from_millis(200).max(Duration::from_micros(u64::from(shard_count)));
    let last_full = std::sync::Mutex::new(None::<Instant>);
    poll_every(
        "every shard delivered, evenly",
        bound,
        GAUGE_INTERVAL,
        || {
            let report = last_report.elapsed() >= Duration::from_secs(10);
            if report {
                last_report = Instant::now();
            }
            let full_due = last_full
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none_or(|at| at.elapsed() >= full_interval);
            let cluster = &*cluster;
            let last_full = &last_full;
            async move {
                let gauges = placement_gauges(cluster, leader).await?;
                let placed = gauges.executors == executors as u64
                    && gauges.owned == shards as u64
                    && gauges.releasing == 0;
                if !(placed && full_due) {
                    let observation = format!(
                        "{} executors, {} of {shards} shards owned, {} releasing",
                        gauges.executors, gauges.owned, gauges.releasing
                    );
                    if report {
                        eprintln!(
                            "  settling for {:.0} s: {observation}",
                            started.elapsed().as_secs_f64()
                        );
                    }
                    return Err(observation);
                }
                *last_full.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
                let view = executors_view(cluster, leader).await?;
                let counts: Vec<usize> = view.iter().map(|e| e.shards.len()).collect();
                let total: usize = counts.iter().sum();
                let fewest = counts.iter().copied().min().unwrap_or(0);
                let most = counts.iter().copied().max().unwrap_or(0);
                if view.len() == executors && total == shards && most - fewest <= 1 {
                    return Ok(());
                }
                let observation = format!(
                    "{} executors, {total} of {shards} shards delivered, spread {fewest}..{most}",
                    view.len()
                );
                if report {
                    eprintln!(
                        "  settling for {:.0} s: {observation}",
                        started.elapsed().as_secs_f64()
                    );
                }
                Err(observation)
            }
        },
    )
    .await?;
    eprintln!(
        "  the leader records every shard delivered, evenly, after {:.1} s of settling",
        started.elapsed().as_secs_f64()
    );
    if let Some(cadence) = cadence {
        let counters = cadence.stop().await;
        let evicted = counters.evictions.load(Ordering::Relaxed);
        if evicted > 0 {
            bail!(
                "{evicted} executors were evicted while settling (first error: {})",
                counters.first_error().unwrap_or_default()
            );
        }
    }
    let renewing_started = Instant::now();
    let failures = fleet.renew_all().await;
    if failures > 0 {
        bail!("{failures} of {executors} executors could not renew after settling");
    }
    eprintln!(
        "  every executor renewed once, adopting its set, in {:.1} s",
        renewing_started.elapsed().as_secs_f64()
    );
    let (total, fewest, most) = fleet.held_spread();
    if total != shards || most - fewest > 1 {
        bail!(
            "after renewing, the fleet holds {total} of {shards} shards, spread {fewest}..{most}"
        );
    }
    Ok(())
}

/// How often [`settle`] reads the leader's gauges.
const GAUGE_INTERVAL: Duration = Duration::from_millis(100);

/// What the leader's `/metrics` page says of placement (read from its applied state at the
/// scrape, from indexes: the same cost at any shard count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct PlacementGauges {
    /// `leasehold_executors`.
    executors: u64,
    /// `leasehold_shards{state="owned"}`: owned and not being released.
    owned: u64,
    /// `leasehold_shards{state="releasing"}`.
    releasing: u64,
}

async fn placement_gauges(cluster: &ManagerCluster, id: u64) -> Result<PlacementGauges, String> {
    let url = cluster.url(id).map_err(|e| e.to_string())?;
    let text = metrics_page(cluster, &url)
        .await
        .map_err(|e| e.to_string())?;
    parse_placement_gauges(&text)
        .ok_or_else(|| "the leader's /metrics lacks the executor and shard gauges".to_owned())
}

/// The three gauges from a Prometheus text page; `None` unless all three are there.
fn parse_placement_gauges(text: &str) -> Option<PlacementGauges> {
    let (mut executors, mut owned, mut releasing) = (None, None, None);
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let slot = match name {
            "leasehold_executors" => &mut executors,
            "leasehold_shards{state=\"owned\"}" => &mut owned,
            "leasehold_shards{state=\"releasing\"}" => &mut releasing,
            _ => continue,
        };
        *slot = value.parse::<f64>().ok().map(|v| v as u64);
    }
    Some(PlacementGauges {
        executors: executors?,
        owned: owned?,
        releasing: releasing?,
    })
}

/// A manager's Prometheus text page (`url` is its base URL).
pub(crate) async fn metrics_page(cluster: &ManagerCluster, url: &str) -> reqwest::Result<String> {
    cluster
        .http
        .get(format!("{url}/metrics"))
        .timeout(Duration::from_secs(5))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await
}

/// Registers `executors` simulated executors and waits, renewing, until they have settled (see
/// [`settle`]).
async fn settled_fleet(
    cluster: &mut ManagerCluster,
    security: &Security,
    executors: usize,
    shard_count: u32,
) -> Result<Arc<LeaseholdFleet>> {
    settled_fleet_spec(cluster, security, FleetSpec::plain(executors), shard_count).await
}

/// [`settled_fleet`] for the executors `spec` describes.
async fn settled_fleet_spec(
    cluster: &mut ManagerCluster,
    security: &Security,
    spec: FleetSpec,
    shard_count: u32,
) -> Result<Arc<LeaseholdFleet>> {
    let fleet = Arc::new(leasehold_fleet_spec(cluster, security, spec, executor_client()).await?);
    settle(
        cluster,
        &fleet,
        shard_count,
        SETTLE_BOUND,
        Renewing::WhileSettling,
    )
    .await?;
    Ok(fleet)
}

/// A fleet that keeps renewing: registers `executors` simulated executors, starts their
/// [`Cadence`] (which the caller stops), and waits until they have settled (see [`settle`]).
/// Returns how long registration took, from the first request. `label` prefixes the progress
/// lines.
async fn renewing_settled_fleet(
    label: &str,
    cluster: &mut ManagerCluster,
    security: &Security,
    executors: usize,
    shards: u32,
    settle_bound: Duration,
) -> Result<(Arc<LeaseholdFleet>, Cadence, Duration)> {
    let started = Instant::now();
    let fleet = Arc::new(leasehold_fleet(cluster, security, executors, executor_client()).await?);
    let registered = started.elapsed();
    let cadence = Cadence::start(fleet.clone(), DEFAULT_LEASE_DURATION);
    eprintln!(
        "{label}: {executors} executors registered after {:.1} s ({shards} shards); settling",
        registered.as_secs_f64()
    );
    settle(cluster, &fleet, shards, settle_bound, Renewing::ByCaller).await?;
    eprintln!(
        "{label}: settled after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok((fleet, cadence, registered))
}

fn per_holder_shards(shard_count: u32, holders: usize) -> u32 {
    let holders = u32::try_from(holders.max(1)).unwrap_or(u32::MAX);
    shard_count.div_ceil(holders)
}

// ---------------------------------------------------------------------------------------------
// B1 and B2: each system under every transport of the run

/// One system's result under one transport, for the B1 and B2 tables.
#[derive(Debug)]
struct Measured<T> {
    system: &'static str,
    security: Security,
    result: T,
    /// The 1-minute load average before → after.
    load: String,
}

impl<T> Measured<T> {
    /// The result of `system` under the transport `tls` says, among `rows`.
    fn of<'a>(rows: &'a [Measured<T>], system: &str, tls: bool) -> Option<&'a T> {
        rows.iter()
            .find(|row| row.system == system && row.security.is_tls() == tls)
            .map(|row| &row.result)
    }

    /// The plaintext result of this row's system, for a TLS row (the TLS cost's baseline).
    fn plaintext_of<'a>(&self, rows: &'a [Measured<T>]) -> Option<&'a T> {
        if self.security.is_tls() {
            Self::of(rows, self.system, false)
        } else {
            None
        }
    }
}

/// `ours ÷ theirs` as `1.23×`, or `-` without both.
fn fmt_ratio(ours: Option<f64>, theirs: Option<f64>) -> String {
    match (ours, theirs) {
        (Some(o), Some(t)) if t > 0.0 => format!("{:.2}×", o / t),
        _ => "-".to_owned(),
    }
}

/// How much a figure moved against its baseline (TLS against plaintext, loads reported against
/// none), as a signed percentage of the baseline.
fn fmt_change(measured: Option<f64>, baseline: Option<f64>) -> String {
    match (measured, baseline) {
        (Some(m), Some(b)) if b > 0.0 => format!("{:+.0} %", (m / b - 1.0) * 100.0),
        _ => "-".to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// B1

#[derive(Debug, Clone)]
pub struct B1 {
    pub executors: usize,
    pub shards: u32,
    pub ramp: Ramp,
    pub etcd_connections: usize,
    /// Leasehold is also measured with every renewal reporting a load for each shard it
    /// holds (P15.1), beside the same ramp without, to price load reporting (B7).
    pub report_loads: bool,
}

const LEASEHOLD_RENEW: &str = "Leasehold renew (group commit)";
const LEASEHOLD_RENEW_LOADS: &str = "Leasehold renew (group commit), loads reported";

/// The load every shard reports in B1 `--report-loads`: one value for all, so equal executors
/// stay balanced and the planner moves nothing, and the ramp measures what carrying, checking
/// and tracking the reports costs. Not round, so it is encoded as a measured rate would be.
const B1_SHARD_LOAD: f64 = 251.37;
const ETCD_PUT: &str = "etcd (a) put with lease";
const ETCD_KEEPALIVE: &str = "etcd (b) keepalive stream";

/// What `system` did under `security`, with the load average around `work`.
async fn measured<T>(
    system: &'static str,
    security: &Security,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<Measured<T>> {
    let load = load_average();
    let result = work.await?;
    Ok(Measured {
        system,
        security: security.clone(),
        result,
        load: format!("{load} → {}", load_average()),
    })
}

/// One B1 ramp against a fresh Leasehold cluster of its own; with `report_loads`, every
/// renewal carries a load for each shard it claims.
async fn b1_leasehold(
    env: &Env,
    security: &Security,
    args: &B1,
    report_loads: bool,
) -> Result<RampResult> {
    let loads = if report_loads { ", loads reported" } else { "" };
    let label = format!("leasehold, {}{loads}", security.label());
    eprintln!(
        "B1 {label}: {} executors, {} shards",
        args.executors, args.shards
    );
    let name = format!(
        "b1-leasehold-{}{}",
        security.scheme(),
        if report_loads { "-loads" } else { "" }
    );
    let mut cluster = leasehold_cluster(env, security, &name, default_flags(args.shards)).await?;
    let mut spec = FleetSpec::plain(args.executors);
    if report_loads {
        spec.loads = Some(Arc::new(UniformLoad(B1_SHARD_LOAD)));
    }
    let fleet = settled_fleet_spec(&mut cluster, security, spec, args.shards).await?;
    Ok(drive::ramp(fleet, args.ramp, &label).await)
}

/// One B1 ramp against a fresh etcd cluster of its own: `fleet` makes the holders from the
/// cluster's clients.
async fn b1_etcd<F, Fut, R>(
    env: &Env,
    etcd: &Path,
    security: &Security,
    args: &B1,
    system: &str,
    cluster_name: &str,
    fleet: F,
) -> Result<RampResult>
where
    F: FnOnce(Vec<crate::etcd::EtcdClient>) -> Fut,
    Fut: std::future::Future<Output = Result<R>>,
    R: Renewer,
{
    let label = format!("{system}, {}", security.label());
    eprintln!("B1 {label}: {} holders", args.executors);
    let name = format!("{cluster_name}-{}", security.scheme());
    let cluster = etcd_cluster(etcd, env, security, &name, Vec::new()).await?;
    let clients = cluster
        .clients(args.etcd_connections, Duration::from_secs(5))
        .await?;
    let holders = Arc::new(fleet(clients).await?);
    Ok(drive::ramp(holders, args.ramp, &label).await)
}

pub async fn b1(env: &Env, args: &B1) -> Result<Table> {
    let n = args.executors;
    let mut rows: Vec<Measured<RampResult>> = Vec::new();
    for security in env.securities() {
        let work = b1_leasehold(env, &security, args, false);
        rows.push(measured(LEASEHOLD_RENEW, &security, work).await?);
        if args.report_loads {
            let work = b1_leasehold(env, &security, args, true);
            rows.push(measured(LEASEHOLD_RENEW_LOADS, &security, work).await?);
        }
    }
    if let Some(etcd) = env.etcd_or_skip("B1") {
        let value = claims_payload(per_holder_shards(args.shards, n));
        for security in env.securities() {
            let put = |clients| EtcdPutFleet::start(clients, n, PUT_LEASE_TTL_S, value.clone());
            let work = b1_etcd(env, etcd, &security, args, ETCD_PUT, "b1-etcd-put", put);
            rows.push(measured(ETCD_PUT, &security, work).await?);
        }
        for security in env.securities() {
            let keepalive = |clients| EtcdKeepAliveFleet::start(clients, n, 60);
            let work = b1_etcd(
                env,
                etcd,
                &security,
                args,
                ETCD_KEEPALIVE,
                "b1-etcd-keepalive",
                keepalive,
            );
            rows.push(measured(ETCD_KEEPALIVE, &security, work).await?);
        }
    }

    let within = |found: &RampResult| found.within_bound.as_ref().map(|s| s.achieved_per_s);
    let kept = |found: &RampResult| found.kept_up.as_ref().map(|s| s.achieved_per_s);
    let at = |step: Option<&StepResult>| match step {
        Some(step) => format!(
            "{} (p50 {}, p99 {})",
            fmt_rate(step.achieved_per_s),
            fmt_ms(step.p50_ms),
            fmt_ms(step.p99_ms)
        ),
        None => format!("< {}", fmt_rate(args.ramp.start_per_s)),
    };
    let bound = format!("renewals/s at p99 ≤ {} ms", args.ramp.p99_bound_ms);
    let mut header = vec![
        "B1",
        "system",
        "transport",
        "executors",
        &bound,
        "Leasehold ÷ this",
        "highest renewals/s kept up",
        "Leasehold ÷ this",
    ];
    if env.compare_tls {
        header.push("TLS vs plaintext (at p99 bound / kept up)");
    }
    if args.report_loads {
        header.push("loads reported vs not (at p99 bound / kept up)");
    }
    header.push("load avg");
    let mut table = Table::new(&header);
    for row in &rows {
        // Leasehold under the same transport as this row.
        let ours = Measured::of(&rows, LEASEHOLD_RENEW, row.security.is_tls());
        let mut cells = vec![
            "B1".into(),
            row.system.to_owned(),
            row.security.label().to_owned(),
            n.to_string(),
            at(row.result.within_bound.as_ref()),
            fmt_ratio(ours.and_then(within), within(&row.result)),
            at(row.result.kept_up.as_ref()),
            fmt_ratio(ours.and_then(kept), kept(&row.result)),
        ];
        if env.compare_tls {
            let plaintext = row.plaintext_of(&rows);
            cells.push(format!(
                "{} / {}",
                fmt_change(within(&row.result), plaintext.and_then(within)),
                fmt_change(kept(&row.result), plaintext.and_then(kept))
            ));
        }
        if args.report_loads {
            // The same transport's ramp without loads is the baseline of a ramp with them.
            let without = (row.system == LEASEHOLD_RENEW_LOADS)
                .then(|| Measured::of(&rows, LEASEHOLD_RENEW, row.security.is_tls()))
                .flatten();
            cells.push(format!(
                "{} / {}",
                fmt_change(
                    without.map(|_| &row.result).and_then(within),
                    without.and_then(within)
                ),
                fmt_change(
                    without.map(|_| &row.result).and_then(kept),
                    without.and_then(kept)
                )
            ));
        }
        cells.push(row.load.clone());
        table.row(cells);
    }
    Ok(table)
}

// ---------------------------------------------------------------------------------------------
// B2

/// p50 and p99 of one closed loop, in milliseconds, and its renewals and errors.
#[derive(Debug, Clone, Copy)]
struct Latency {
    ok: u64,
    errors: u64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Holder 0 of `holders` renews back to back for `warmup` (not counted), then for `duration`.
async fn closed_loop_latency<R: Renewer>(
    holders: &R,
    warmup: Duration,
    duration: Duration,
) -> Latency {
    drive::closed_loop(holders, 0, warmup).await;
    let mut samples = drive::closed_loop(holders, 0, duration).await;
    Latency {
        ok: samples.ok(),
        errors: samples.errors,
        p50_ms: samples.quantile_ms(0.5),
        p99_ms: samples.quantile_ms(0.99),
    }
}

pub async fn b2(env: &Env, duration: Duration) -> Result<Table> {
    let warmup = Duration::from_secs(1);
    let mut rows: Vec<Measured<Latency>> = Vec::new();

    for security in env.securities() {
        let work = async {
            let name = format!("b2-leasehold-{}", security.scheme());
            let mut cluster = leasehold_cluster(env, &security, &name, default_flags(1024)).await?;
            let fleet = settled_fleet(&mut cluster, &security, 1, 1024).await?;
            Ok(closed_loop_latency(fleet.as_ref(), warmup, duration).await)
        };
        rows.push(measured("Leasehold renew", &security, work).await?);
    }

    if let Some(etcd) = env.etcd_or_skip("B2") {
        let mut etcd_rows = Vec::new();
        for security in env.securities() {
            let name = format!("b2-etcd-{}", security.scheme());
            let cluster = etcd_cluster(etcd, env, &security, &name, Vec::new()).await?;
            let clients = cluster.clients(1, Duration::from_secs(5)).await?;
            let work = async {
                let put =
                    EtcdPutFleet::start(clients.clone(), 1, PUT_LEASE_TTL_S, claims_payload(1024))
                        .await?;
                Ok(closed_loop_latency(&put, warmup, duration).await)
            };
            etcd_rows.push(measured(ETCD_PUT, &security, work).await?);
            let work = async {
                let keepalive = EtcdKeepAliveFleet::start(clients, 1, 60).await?;
                Ok(closed_loop_latency(&keepalive, warmup, duration).await)
            };
            etcd_rows.push(measured(ETCD_KEEPALIVE, &security, work).await?);
        }
        // One system's rows together: plaintext, then TLS.
        etcd_rows.sort_by_key(|row| row.system != ETCD_PUT);
        rows.extend(etcd_rows);
    }

    let mut header = vec![
        "B2",
        "system (one executor, one request at a time)",
        "transport",
        "renewals",
        "errors",
        "p50",
        "p99",
        "÷ etcd put (p50 / p99)",
    ];
    if env.compare_tls {
        header.push("TLS vs plaintext (p50 / p99)");
    }
    header.push("load avg");
    let mut table = Table::new(&header);
    for row in &rows {
        let latency = row.result;
        // etcd's put under the same transport as this row.
        let put = Measured::of(&rows, ETCD_PUT, row.security.is_tls());
        let mut cells = vec![
            "B2".into(),
            row.system.to_owned(),
            row.security.label().to_owned(),
            latency.ok.to_string(),
            latency.errors.to_string(),
            fmt_ms(latency.p50_ms),
            fmt_ms(latency.p99_ms),
            format!(
                "{} / {}",
                fmt_ratio(Some(latency.p50_ms), put.map(|p| p.p50_ms)),
                fmt_ratio(Some(latency.p99_ms), put.map(|p| p.p99_ms))
            ),
        ];
        if env.compare_tls {
            let plaintext = row.plaintext_of(&rows);
            cells.push(format!(
                "{} / {}",
                fmt_change(Some(latency.p50_ms), plaintext.map(|p| p.p50_ms)),
                fmt_change(Some(latency.p99_ms), plaintext.map(|p| p.p99_ms))
            ));
        }
        cells.push(row.load.clone());
        table.row(cells);
    }
    Ok(table)
}
// ---------------------------------------------------------------------------------------------
// B3

/// Lease for the failover and re-homing scenarios: the shortest the manager accepts with etcd's
/// timing (3 × the 2 s maximum election timeout), so an eviction would show within the run.
const SHORT_LEASE: &str = "6s";
const SHORT_LEASE_DURATION: Duration = Duration::from_secs(6);
/// How often the failover probes of both systems start an attempt.
const PROBE_RETRY: Duration = Duration::from_millis(20);
/// Longest one probe attempt is waited for. Attempts overlap, so this bounds only how many are
/// in flight, not the figure.
const PROBE_ATTEMPT_BOUND: Duration = Duration::from_secs(2);
/// Longest a failover may take before the scenario gives up.
const FAILOVER_BOUND: Duration = Duration::from_secs(60);
/// Quiet time before each kill, so every holder has renewed under the current leader.
const BEFORE_KILL: Duration = Duration::from_secs(3);

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn fmt_runs(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Seconds from `killed_at` to the first renewal `probe` served. A new attempt starts every
/// [`PROBE_RETRY`] and earlier ones are left running rather than abandoned, so an attempt stuck
/// on a connection to the dead member (etcd's client balances over every member) does not hide a
/// failover that completed meanwhile; each attempt is a single try (no client-side patience).
async fn first_success<R: Renewer>(probe: &Arc<R>, killed_at: Instant, what: &str) -> Result<f64> {
    let mut attempts = tokio::task::JoinSet::new();
    let mut every = tokio::time::interval(PROBE_RETRY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                if killed_at.elapsed() > FAILOVER_BOUND {
                    bail!("{what} served no renewal within {FAILOVER_BOUND:?} of the leader kill");
                }
                let probe = probe.clone();
                attempts.spawn(async move {
                    let attempt = tokio::time::timeout(PROBE_ATTEMPT_BOUND, probe.renew(0)).await;
                    matches!(attempt, Ok(Ok(_))).then(Instant::now)
                });
            }
            Some(done) = attempts.join_next() => {
                if let Ok(Some(served_at)) = done {
                    return Ok(served_at.duration_since(killed_at).as_secs_f64());
                }
            }
        }
    }
}

/// Retries `attempt` every 100 ms for up to 10 s: the "before the kill" probes, which may meet a
/// member restarted a moment ago that is still catching up.
async fn before_kill<F, Fut>(what: &str, mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, crate::fleet::RenewFailure>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match attempt().await {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() > deadline => bail!("{what} before the kill: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// How B3 runs: the systems' timing, and how many leader kills each cluster takes.
#[derive(Debug, Clone)]
pub struct B3 {
    /// Fresh clusters per system.
    pub runs: usize,
    /// Leader kills in a row per cluster, the killed member restarted after each. The first
    /// comes after a quiet [`BEFORE_KILL`]; the next ones as soon as every member, the restarted
    /// one included, names the new leader, as a user repeating the kill would: a restarted member
    /// may not have caught up yet.
    pub kills: usize,
    /// Lease holders renewing at the protocol's cadence throughout (checked for eviction).
    pub executors: usize,
    /// Leasehold's minimum election timeouts, one row each (heartbeat 100 ms, as etcd's); empty
    /// with `shipped`.
    pub election_timeouts: Vec<String>,
    /// Both systems at the defaults they ship with: Leasehold without a lease or Raft timing
    /// flag, etcd without timing flags, holders on the 60 s default lease.
    pub shipped: bool,
}

impl B3 {
    /// The lease the holders renew at the cadence of (etcd: their TTL).
    fn lease(&self) -> Duration {
        if self.shipped {
            DEFAULT_LEASE_DURATION
        } else {
            SHORT_LEASE_DURATION
        }
    }
}

/// One system's B3 figures: `times[run][kill]`, seconds from SIGKILL to the probe's success.
struct Failovers {
    times: Vec<Vec<f64>>,
    evicted: u64,
}

/// B3 for Leasehold with `options`: `args.runs` fresh clusters, each taking `args.kills` leader
/// kills, each timed from SIGKILL to the probe's first successful renewal.
async fn b3_leasehold(
    env: &Env,
    args: &B3,
    options: &ManagerFlags,
    label: &str,
) -> Result<Failovers> {
    let security = &env.security;
    let mut times = Vec::new();
    let mut evicted = 0;
    for run in 0..args.runs {
        let name = format!("b3-leasehold-{label}-{}", run + 1);
        let mut cluster = leasehold_cluster(env, security, &name, options.clone()).await?;
        let fleet =
            Arc::new(leasehold_fleet(&cluster, security, args.executors, executor_client()).await?);
        let cadence = Cadence::start(fleet.clone(), args.lease());
        // One try per attempt (it still moves on at once to the leader a refusal names, or
        // past a member that refuses connections); [`first_success`] starts one every 20 ms
        // instead of the protocol's 250 ms retries, so the figure resolves the failover itself.
        let probe = Arc::new(
            leasehold_fleet(
                &cluster,
                security,
                1,
                ClientConfig {
                    request_timeout: PROBE_ATTEMPT_BOUND,
                    patience: Duration::ZERO,
                    retry_interval: PROBE_RETRY,
                },
            )
            .await?,
        );
        let mut run_times = Vec::new();
        for kill in 0..args.kills {
            let leader = cluster.wait_for_leader(FORM_BOUND).await?;
            if kill == 0 {
                for id in cluster.managers.keys().copied().collect::<Vec<_>>() {
                    cluster.wait_ready(id, FORM_BOUND).await?;
                }
                tokio::time::sleep(BEFORE_KILL).await;
            }
            before_kill("probe", || probe.renew(0)).await?;
            let killed_at = Instant::now();
            cluster.manager(leader)?.kill();
            let took = first_success(&probe, killed_at, "Leasehold").await?;
            eprintln!(
                "B3 leasehold ({label}) run {} kill {}: killed leader {leader}, renewed after {took:.2} s",
                run + 1,
                kill + 1
            );
            run_times.push(took);
            cluster.manager(leader)?.start()?;
            cluster.wait_for_leader(FORM_BOUND).await?;
        }
        times.push(run_times);
        let counters = cadence.stop().await;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let registered = executors_view(&cluster, leader)
            .await
            .map_err(|e| anyhow!(e))?;
        let missing = (args.executors + 1).saturating_sub(registered.len());
        evicted += counters
            .evictions
            .load(Ordering::Relaxed)
            .max(missing as u64);
    }
    Ok(Failovers { times, evicted })
}

/// B3 for etcd at its defaults: as [`b3_leasehold`], the probe a put.
async fn b3_etcd(env: &Env, etcd: &Path, args: &B3) -> Result<Failovers> {
    let mut times = Vec::new();
    let mut evicted = 0;
    for run in 0..args.runs {
        let name = format!("b3-etcd-{}", run + 1);
        let mut cluster = etcd_cluster(etcd, env, &env.security, &name, Vec::new()).await?;
        let clients = cluster.clients(2, Duration::from_secs(2)).await?;
        let ttl_s = i64::try_from(args.lease().as_secs())?;
        let fleet = Arc::new(EtcdKeepAliveFleet::start(clients, args.executors, ttl_s).await?);
        let cadence = Cadence::start(fleet.clone(), args.lease());
        let probe_client = cluster.clients(1, PROBE_ATTEMPT_BOUND).await?;
        let probe = Arc::new(
            EtcdPutFleet::start(probe_client, 1, PUT_LEASE_TTL_S, claims_payload(1)).await?,
        );
        let mut run_times = Vec::new();
        for kill in 0..args.kills {
            let leader = cluster.wait_for_leader(FORM_BOUND).await?;
            if kill == 0 {
                tokio::time::sleep(BEFORE_KILL).await;
            }
            before_kill("etcd probe", || probe.renew(0)).await?;
            let killed_at = Instant::now();
            cluster.kill(leader);
            let took = first_success(&probe, killed_at, "etcd").await?;
            eprintln!(
                "B3 etcd run {} kill {}: killed member {leader}, put after {took:.2} s",
                run + 1,
                kill + 1
            );
            run_times.push(took);
            cluster.restart(leader)?;
            cluster.wait_for_leader(FORM_BOUND).await?;
        }
        times.push(run_times);
        let counters = cadence.stop().await;
        let expired = fleet.expired_leases().await?;
        evicted += counters
            .evictions
            .load(Ordering::Relaxed)
            .max(expired as u64);
    }
    Ok(Failovers { times, evicted })
}

/// One row per kill position when each cluster takes several kills (the third kill meets two
/// survivors that were both restarted), then one over every kill.
fn b3_rows(table: &mut Table, system: &str, failovers: &Failovers, kills: usize, load: String) {
    let mut row = |which: String, mut values: Vec<f64>| {
        table.row(vec![
            "B3".into(),
            system.to_owned(),
            which,
            fmt_runs(&values),
            format!("{:.2} s", median(&mut values)),
            failovers.evicted.to_string(),
            load.clone(),
        ]);
    };
    if kills > 1 {
        for kill in 0..kills {
            let values = failovers
                .times
                .iter()
                .filter_map(|run| run.get(kill).copied())
                .collect();
            row(format!("kill {} of {kills}", kill + 1), values);
        }
    }
    let every = failovers.times.iter().flatten().copied().collect();
    row("every kill".to_owned(), every);
}

pub async fn b3(env: &Env, args: &B3) -> Result<Table> {
    let mut table = Table::new(&[
        "B3",
        "system",
        "kills",
        "leader SIGKILL → first successful renewal (s), run by run",
        "median",
        "holders evicted",
        "load avg",
    ]);
    let mut leasehold = Vec::new();
    if args.shipped {
        leasehold.push((
            ManagerFlags::shipped(64),
            "shipped".to_owned(),
            format!(
                "Leasehold ({} executors, shipped defaults: no lease or timing flag)",
                args.executors
            ),
        ));
    }
    for election_timeout in &args.election_timeouts {
        let mut options = etcd_timing(64, SHORT_LEASE);
        options.election_timeout = Some(election_timeout.clone());
        let min_ms = humantime::parse_duration(election_timeout)?.as_millis();
        leasehold.push((
            options,
            election_timeout.clone(),
            format!(
                "Leasehold ({} executors, heartbeat 100 ms, election timeout {min_ms}–{} ms, lease 6 s)",
                args.executors,
                2 * min_ms
            ),
        ));
    }
    for (options, label, system) in leasehold {
        let load = load_average();
        let failovers = b3_leasehold(env, args, &options, &label).await?;
        let load = format!("{load} → {}", load_average());
        b3_rows(
            &mut table,
            &env.security.tagged(&system),
            &failovers,
            args.kills,
            load,
        );
    }

    if let Some(etcd) = env.etcd_or_skip("B3") {
        let load = load_average();
        let failovers = b3_etcd(env, etcd, args).await?;
        let load = format!("{load} → {}", load_average());
        let system = format!(
            "etcd 3.4 ({} keepalive leases, defaults: heartbeat 100 ms, election 1 s; TTL {} s; probe: put)",
            args.executors,
            args.lease().as_secs()
        );
        b3_rows(
            &mut table,
            &env.security.tagged(&system),
            &failovers,
            args.kills,
            load,
        );
    }
    Ok(table)
}

// ---------------------------------------------------------------------------------------------
// B4

pub(crate) async fn executors_view(
    cluster: &ManagerCluster,
    id: u64,
) -> Result<Vec<ExecutorView>, String> {
    let url = cluster.url(id).map_err(|e| e.to_string())?;
    let reply = cluster
        .http
        .get(format!("{url}/v1/executors"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    reply.json().await.map_err(|e| e.to_string())
}

pub async fn b4(env: &Env, shard_counts: &[u32]) -> Result<Table> {
    let mut table = Table::new(&[
        "B4",
        "shards",
        "shards on the killed executor",
        "executor SIGKILL → all its shards owned elsewhere",
        "target lease + tick + 1 s",
        "load avg",
    ]);
    let executor_bin =
        binary_in(&env.bin_dir, "leasehold-executor").context(procs::BIN_DIR_HINT)?;
    for &shards in shard_counts {
        let load = load_average();
        eprintln!("B4: {shards} shards");
        let security = &env.security;
        let mut cluster = leasehold_cluster(
            env,
            security,
            &format!("b4-{shards}"),
            etcd_timing(shards, SHORT_LEASE),
        )
        .await?;
        let formed = Instant::now();
        let fleet = Arc::new(leasehold_fleet(&cluster, security, 3, executor_client()).await?);
        let cadence = Cadence::start(fleet.clone(), SHORT_LEASE_DURATION);
        let port = free_port()?;
        let address = format!("{}://127.0.0.1:{port}", security.scheme());
        let mut command = Command::new(&executor_bin);
        command
            .arg("--managers")
            .arg(cluster.urls().join(","))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info");
        if let Some(certs) = security.certs() {
            let files = certs.files("executor");
            command
                .arg("--cert-file")
                .arg(&files.cert_file)
                .arg("--key-file")
                .arg(&files.key_file)
                .arg("--trusted-ca-file")
                .arg(&files.trusted_ca_file);
        }
        let mut victim = ChildProcess::spawn(
            &mut command,
            &env.dir(&format!("b4-{shards}-executor"))?
                .join("executor.log"),
        )?;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let (victim_id, victim_shards) = poll_every(
            "four executors holding every shard, evenly",
            SETTLE_BOUND,
            POLL_INTERVAL,
            || async {
                let view = executors_view(&cluster, leader).await?;
                let total: usize = view.iter().map(|e| e.shards.len()).sum();
                let victim = view.iter().find(|e| e.address == address);
                match victim {
                    Some(v)
                        if view.len() == 4
                            && total == shards as usize
                            && v.shards.len() + 1 >= shards as usize / 4 =>
                    {
                        Ok((v.executor_id.clone(), v.shards.len()))
                    }
                    _ => Err(format!(
                        "{} executors, {total} shards delivered",
                        view.len()
                    )),
                }
            },
        )
        .await?;
        // P6.1: a leader reaps nothing in its first lease; start the clock only after it.
        let in_office = SHORT_LEASE_DURATION + Duration::from_secs(1);
        if formed.elapsed() < in_office {
            tokio::time::sleep(in_office - formed.elapsed()).await;
        }
        let killed_at = Instant::now();
        victim.kill();
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        poll_every(
            "the killed executor's shards owned elsewhere",
            SETTLE_BOUND,
            POLL_INTERVAL,
            || async {
                let view = executors_view(&cluster, leader).await?;
                let total: usize = view.iter().map(|e| e.shards.len()).sum();
                if view.iter().all(|e| e.executor_id != victim_id) && total == shards as usize {
                    Ok(())
                } else {
                    Err(format!(
                        "{} executors, {total} shards delivered",
                        view.len()
                    ))
                }
            },
        )
        .await?;
        let took = killed_at.elapsed().as_secs_f64();
        let counters = cadence.stop().await;
        if counters.evictions.load(Ordering::Relaxed) > 0 {
            bail!(
                "a live simulated executor was evicted during B4: {}",
                counters.first_error().unwrap_or_default()
            );
        }
        let target = SHORT_LEASE_DURATION.as_secs_f64() * (1.0 + 1.0 / 3.0) + 1.0;
        table.row(vec![
            "B4".into(),
            shards.to_string(),
            victim_shards.to_string(),
            format!("{took:.2} s"),
            format!("{target:.0} s (lease 6 s, tick 2 s)"),
            format!("{load} → {}", load_average()),
        ]);
        drop(fleet);
        cluster.kill_all();
    }
    Ok(table)
}

// ---------------------------------------------------------------------------------------------
// B5 and B6 helpers

/// Size of the snapshot a stopped manager holds on disk (the `raft_snapshot` tree's `data`
/// record: envelope + bincode state), read from its sled directory.
fn snapshot_bytes(data_dir: &Path) -> Result<u64> {
    let db = sled::open(data_dir).with_context(|| format!("open {}", data_dir.display()))?;
    let tree = db.open_tree("raft_snapshot")?;
    let data = tree
        .get(b"data")?
        .ok_or_else(|| anyhow!("{} holds no snapshot", data_dir.display()))?;
    Ok(data.len() as u64)
}

async fn post_snapshot(cluster: &ManagerCluster, id: u64, purge: bool) -> Result<Duration> {
    let started = Instant::now();
    let reply = cluster
        .http
        .post(format!(
            "{}/v1/cluster/snapshot{}",
            cluster.url(id)?,
            if purge { "?purge=true" } else { "" }
        ))
        .timeout(Duration::from_secs(300))
        .send()
        .await?;
    if !reply.status().is_success() {
        bail!(
            "snapshot on manager {id}: {} {}",
            reply.status(),
            reply.text().await.unwrap_or_default()
        );
    }
    Ok(started.elapsed())
}

/// Takes a snapshot on follower `id`, stops it gracefully and reads its snapshot size; then
/// restarts it and returns (snapshot bytes, restart → ready and caught up).
async fn snapshot_size_and_restart(
    cluster: &mut ManagerCluster,
    id: u64,
) -> Result<(u64, Duration)> {
    post_snapshot(cluster, id, false).await?;
    cluster.manager(id)?.terminate(TERMINATE_BOUND).await?;
    let data_dir = cluster.manager(id)?.data_dir.clone();
    let bytes = tokio::task::spawn_blocking(move || snapshot_bytes(&data_dir)).await??;
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let target = cluster
        .cluster_info(leader)
        .await
        .map_err(|e| anyhow!(e))?
        .committed_index
        .unwrap_or(0);
    let started = Instant::now();
    cluster.manager(id)?.start()?;
    cluster.wait_ready(id, SETTLE_BOUND).await?;
    cluster.wait_applied(id, target, SETTLE_BOUND).await?;
    Ok((bytes, started.elapsed()))
}

// ---------------------------------------------------------------------------------------------
// B5

pub async fn b5(env: &Env, executors: usize, options: ManagerFlags) -> Result<Table> {
    let load = load_average();
    let shards = options.shard_count;
    let heartbeat = options
        .heartbeat
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let security = &env.security;
    let mut cluster = leasehold_cluster(env, security, "b5", options).await?;
    let (_fleet, cadence, _) = renewing_settled_fleet(
        "B5",
        &mut cluster,
        security,
        executors,
        shards,
        Duration::from_secs(1800),
    )
    .await?;
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let leader_rss = cluster
        .managers
        .get(&leader)
        .and_then(Manager::pid)
        .and_then(rss_bytes)
        .unwrap_or(0);
    let build = post_snapshot(&cluster, leader, false).await?;
    let follower = cluster
        .managers
        .keys()
        .copied()
        .find(|&id| id != leader)
        .ok_or_else(|| anyhow!("no follower"))?;
    let (snapshot, restart) = snapshot_size_and_restart(&mut cluster, follower).await?;

    // Join: purge the leader's log behind a fresh snapshot, so the new node must install it.
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    post_snapshot(&cluster, leader, true).await?;
    let target = cluster
        .cluster_info(leader)
        .await
        .map_err(|e| anyhow!(e))?
        .committed_index
        .unwrap_or(0);
    let joined_at = Instant::now();
    let via = cluster.url(leader)?;
    procs::join_new(&mut cluster, 4, &via)?;
    poll_every(
        "node 4 a caught-up voter",
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let info = cluster.cluster_info(4).await?;
            let voter = info.voters.iter().any(|m| m.node_id == 4);
            match info.applied_index {
                Some(applied) if voter && applied >= target => Ok(()),
                other => Err(format!("voter {voter}, applied {other:?} of {target}")),
            }
        },
    )
    .await?;
    let join = joined_at.elapsed();
    let counters = cadence.stop().await;
    let per_shard = snapshot as f64 / f64::from(shards);
    let mut table = Table::new(&[
        "B5",
        "executors",
        "shards",
        "heartbeat",
        "snapshot size",
        "bytes per shard",
        "snapshot build (leader, POST /v1/cluster/snapshot)",
        "join: start → caught-up voter (snapshot install)",
        "follower restart → ready and caught up",
        "leader RSS",
        "renewals ok / failed during the run",
        "load avg",
    ]);
    table.row(vec![
        "B5".into(),
        executors.to_string(),
        shards.to_string(),
        heartbeat,
        fmt_bytes(snapshot),
        format!("{per_shard:.1} B"),
        format!("{:.2} s", build.as_secs_f64()),
        format!("{:.2} s", join.as_secs_f64()),
        format!("{:.2} s", restart.as_secs_f64()),
        fmt_bytes(leader_rss),
        format!(
            "{} / {}",
            counters.ok.load(Ordering::Relaxed),
            counters.errors.load(Ordering::Relaxed)
        ),
        format!("{load} → {}", load_average()),
    ]);
    Ok(table)
}

// ---------------------------------------------------------------------------------------------
// B6

#[derive(Debug, Clone)]
pub struct B6 {
    pub duration: Duration,
    pub sample_every: Duration,
    pub executors: usize,
    pub rate_per_s: f64,
    pub shards: u32,
    /// Extra manager flags (the CI run snapshots more often so a short soak sees compaction).
    pub manager_args: Vec<String>,
}

/// etcd's flags in the soak: revisions compacted every five minutes, as Kubernetes' API server
/// does. Without compaction etcd keeps every put's revision and its database only grows.
const ETCD_SOAK_ARGS: [&str; 4] = [
    "--auto-compaction-mode",
    "periodic",
    "--auto-compaction-retention",
    "5m",
];

/// Both systems side by side for the whole soak: a Leasehold fleet renewing and an etcd (a)
/// fleet putting the same claims at the same rate, on the same two cores at the same time.
pub async fn b6(env: &Env, args: &B6) -> Result<(Table, Table)> {
    let load = load_average();
    let mut options = default_flags(args.shards);
    options.extra_args = args.manager_args.clone();
    let security = &env.security;
    let mut cluster = leasehold_cluster(env, security, "b6", options).await?;
    let fleet = settled_fleet(&mut cluster, security, args.executors, args.shards).await?;
    let etcd = match env.etcd_or_skip("B6") {
        Some(binary) => {
            let soak_args = ETCD_SOAK_ARGS.map(String::from).to_vec();
            let etcd = etcd_cluster(binary, env, security, "b6-etcd", soak_args).await?;
            let clients = etcd.clients(4, Duration::from_secs(5)).await?;
            let value = claims_payload(per_holder_shards(args.shards, args.executors));
            let holders = Arc::new(
                EtcdPutFleet::start(clients, args.executors, PUT_LEASE_TTL_S, value).await?,
            );
            Some((etcd, holders))
        }
        None => None,
    };
    let load_task = tokio::spawn(drive::open_loop(
        fleet.clone(),
        args.rate_per_s,
        Duration::ZERO,
        args.duration,
    ));
    let etcd_task = etcd.as_ref().map(|(_, holders)| {
        tokio::spawn(drive::open_loop(
            holders.clone(),
            args.rate_per_s,
            Duration::ZERO,
            args.duration,
        ))
    });
    let ids: Vec<u64> = cluster.managers.keys().copied().collect();
    let mut series = Table::new(&[
        "B6",
        "elapsed",
        "Leasehold data dir per manager",
        "Leasehold last log index",
        "etcd data dir per member",
        "etcd raft index",
    ]);
    let sizes_of = |dirs: &[PathBuf]| -> Vec<u64> { dirs.iter().map(|d| dir_bytes(d)).collect() };
    let joined = |sizes: &[u64]| {
        sizes
            .iter()
            .map(|&b| fmt_bytes(b))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let started = Instant::now();
    let mut largest = 0u64;
    let mut etcd_largest = 0u64;
    let mut index_at_start = None;
    let mut etcd_index_at_start = None;
    let mut etcd_index = 0;
    loop {
        let elapsed = started.elapsed();
        let dirs: Vec<PathBuf> = ids
            .iter()
            .filter_map(|&id| cluster.managers.get(&id).map(|m| m.data_dir.clone()))
            .collect();
        let sizes = sizes_of(&dirs);
        largest = largest.max(sizes.iter().copied().max().unwrap_or(0));
        let last_log = cluster
            .cluster_info(ids[0])
            .await
            .ok()
            .and_then(|i| i.last_log_index)
            .unwrap_or(0);
        index_at_start.get_or_insert(last_log);
        let (etcd_sizes, etcd_index_cell) = match &etcd {
            Some((etcd, _)) => {
                let sizes = sizes_of(&etcd.data_dirs());
                etcd_largest = etcd_largest.max(sizes.iter().copied().max().unwrap_or(0));
                etcd_index = etcd.raft_index(0).await.unwrap_or(etcd_index);
                etcd_index_at_start.get_or_insert(etcd_index);
                (joined(&sizes), etcd_index.to_string())
            }
            None => ("-".to_owned(), "-".to_owned()),
        };
        series.row(vec![
            "B6".into(),
            format!("{:.0} s", elapsed.as_secs_f64()),
            joined(&sizes),
            last_log.to_string(),
            etcd_sizes,
            etcd_index_cell,
        ]);
        if elapsed >= args.duration {
            break;
        }
        tokio::time::sleep(args.sample_every.min(args.duration.saturating_sub(elapsed))).await;
    }
    let step = load_task.await?;
    let etcd_step = match etcd_task {
        Some(task) => Some(task.await?),
        None => None,
    };
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let follower = ids
        .iter()
        .copied()
        .find(|&id| id != leader)
        .ok_or_else(|| anyhow!("no follower"))?;
    let entries = cluster
        .cluster_info(leader)
        .await
        .ok()
        .and_then(|i| i.last_log_index)
        .unwrap_or(0)
        .saturating_sub(index_at_start.unwrap_or(0));
    let (snapshot, _) = snapshot_size_and_restart(&mut cluster, follower).await?;
    let mut summary = Table::new(&[
        "B6",
        "system",
        "duration",
        "executors",
        "renewals/s offered / done",
        "renewals ok / failed",
        "p50 / p99",
        "log entries written",
        "largest data dir",
        "snapshot size",
        "largest ÷ snapshot",
        "load avg",
    ]);
    let load = format!("{load} → {}", load_average());
    let row = |system: &str, step: &StepResult, entries: u64, largest: u64, snapshot: u64| {
        vec![
            "B6".into(),
            system.to_owned(),
            humantime::format_duration(args.duration).to_string(),
            args.executors.to_string(),
            format!(
                "{} / {}",
                fmt_rate(step.offered_per_s),
                fmt_rate(step.achieved_per_s)
            ),
            format!("{} / {}", step.ok, step.errors),
            format!("{} / {}", fmt_ms(step.p50_ms), fmt_ms(step.p99_ms)),
            entries.to_string(),
            fmt_bytes(largest),
            fmt_bytes(snapshot),
            format!("{:.1}×", largest as f64 / snapshot.max(1) as f64),
            load.clone(),
        ]
    };
    summary.row(row(
        &security.tagged("Leasehold"),
        &step,
        entries,
        largest,
        snapshot,
    ));
    if let (Some((etcd, _)), Some(etcd_step)) = (&etcd, etcd_step) {
        let etcd_snapshot = etcd.snapshot_bytes(0).await?;
        let etcd_entries = etcd_index.saturating_sub(etcd_index_at_start.unwrap_or(etcd_index));
        summary.row(row(
            &security.tagged("etcd (a) put with lease, compacted every 5 min"),
            &etcd_step,
            etcd_entries,
            etcd_largest,
            etcd_snapshot,
        ));
    }
    Ok((series, summary))
}

// ---------------------------------------------------------------------------------------------
// B8

/// B8: renewals at a fixed open-loop rate while the leader builds snapshots of a large state.
#[derive(Debug, Clone)]
pub struct B8 {
    pub executors: usize,
    pub shards: u32,
    /// Offered renewals/s over the whole fleet.
    pub rate_per_s: f64,
    pub warmup: Duration,
    pub measure: Duration,
    /// Between one forced build's reply and the next request, so the window also holds
    /// renewals that no build overlaps: the baseline beside the builds.
    pub build_gap: Duration,
    pub p99_bound_ms: f64,
    /// Also run a second cluster at the shipped snapshot policy with no forced builds.
    pub shipped_policy: bool,
}

/// `--snapshot-every` for B8's forced-build cluster: no snapshot by policy within a run, so
/// every build in the window is one B8 forced and timed, on the leader only.
const B8_NO_POLICY_SNAPSHOTS: &str = "1000000000";

/// How often B8 asks the leader which snapshot it holds, to count the builds of a window.
const B8_SNAPSHOT_POLL: Duration = Duration::from_millis(250);

/// One snapshot build forced on the leader, as `POST /v1/cluster/snapshot` saw it (it replies
/// once the snapshot is encoded, stored and flushed).
#[derive(Debug, Clone, Copy)]
struct Build {
    started: Instant,
    finished: Instant,
}

impl Build {
    fn seconds(&self) -> f64 {
        (self.finished - self.started).as_secs_f64()
    }
}

/// Forces snapshot builds on manager `leader` from `from` until `until`, one at a time with
/// `gap` between a reply and the next request.
async fn forced_builds(
    cluster: &ManagerCluster,
    leader: u64,
    from: Instant,
    until: Instant,
    gap: Duration,
) -> Result<Vec<Build>> {
    tokio::time::sleep_until(from).await;
    let mut builds = Vec::new();
    while Instant::now() < until {
        let started = Instant::now();
        post_snapshot(cluster, leader, false).await?;
        builds.push(Build {
            started,
            finished: Instant::now(),
        });
        tokio::time::sleep_until((Instant::now() + gap).min(until)).await;
    }
    Ok(builds)
}

/// The distinct snapshots manager `leader` reported holding from `from` until `until`, one
/// look every [`B8_SNAPSHOT_POLL`]: how many it built in that time (a build shorter than the
/// poll between two others could be missed, so this is at least the count).
async fn snapshots_seen(
    cluster: &ManagerCluster,
    leader: u64,
    from: Instant,
    until: Instant,
) -> Result<usize> {
    tokio::time::sleep_until(from).await;
    let mut seen = std::collections::HashSet::new();
    while Instant::now() < until {
        let info = cluster.cluster_info(leader).await.map_err(|e| anyhow!(e))?;
        seen.insert(info.snapshot.map(|snapshot| snapshot.snapshot_id));
        tokio::time::sleep(B8_SNAPSHOT_POLL).await;
    }
    // The snapshot held when the window opened was built before it.
    Ok(seen.len().saturating_sub(1))
}

/// `n, p50, p99, max` of `samples`, with its failures when there are any.
fn fmt_latencies(samples: &mut drive::Samples) -> String {
    let failed = if samples.errors > 0 {
        format!(
            ", {} failed (first: {})",
            samples.errors,
            samples.first_error.as_deref().unwrap_or("-")
        )
    } else {
        String::new()
    };
    format!(
        "{}: p50 {}, p99 {}, max {}{failed}",
        samples.ok(),
        fmt_ms(samples.quantile_ms(0.50)),
        fmt_ms(samples.quantile_ms(0.99)),
        fmt_ms(samples.quantile_ms(1.0))
    )
}

/// p50 and largest of the builds' durations.
fn fmt_builds(builds: &[Build]) -> String {
    let mut seconds: Vec<f64> = builds.iter().map(Build::seconds).collect();
    if seconds.is_empty() {
        return "none".to_owned();
    }
    let largest = seconds.iter().copied().fold(0.0, f64::max);
    format!(
        "{}: p50 {:.2} s, max {:.2} s",
        seconds.len(),
        median(&mut seconds),
        largest
    )
}

/// One B8 cluster: settles the fleet, then offers `args.rate_per_s` for the window while the
/// leader builds snapshots, forced back to back (`forced`) or by the shipped policy alone.
/// Returns the table row.
async fn b8_run(env: &Env, args: &B8, forced: bool) -> Result<Vec<String>> {
    let load = load_average();
    let security = &env.security;
    let mut flags = default_flags(args.shards);
    let (name, mode) = if forced {
        flags.extra_args = vec![
            "--snapshot-every".to_owned(),
            B8_NO_POLICY_SNAPSHOTS.to_owned(),
        ];
        (
            "b8-forced",
            "leader builds back to back (no policy snapshots)",
        )
    } else {
        (
            "b8-shipped",
            "shipped policy (every 5 000 entries, each member)",
        )
    };
    eprintln!(
        "B8 {mode}: {} executors, {} shards, {:.0} renewals/s",
        args.executors, args.shards, args.rate_per_s
    );
    let mut cluster = leasehold_cluster(env, security, name, flags).await?;
    let fleet = settled_fleet(&mut cluster, security, args.executors, args.shards).await?;
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    // The open loop's window opens 100 ms after it starts, then the warmup.
    let window_start = Instant::now() + Duration::from_millis(100) + args.warmup;
    let window_end = window_start + args.measure;
    let renewals =
        drive::open_loop_renewals(fleet.clone(), args.rate_per_s, args.warmup, args.measure);
    let (run, builds, seen) = if forced {
        let builds = forced_builds(&cluster, leader, window_start, window_end, args.build_gap);
        let (run, builds) = tokio::join!(renewals, builds);
        let builds = builds?;
        let count = builds.len();
        (run, builds, count)
    } else {
        let seen = snapshots_seen(&cluster, leader, window_start, window_end);
        let (run, seen) = tokio::join!(renewals, seen);
        (run, Vec::new(), seen?)
    };
    let still_leader = cluster.wait_for_leader(FORM_BOUND).await?;
    if still_leader != leader {
        bail!("B8: the leader changed during the window ({leader} → {still_leader})");
    }
    let step = run.step();
    report_slow_slots(&run, window_start, args.p99_bound_ms);
    let during_build = |renewal: &drive::Renewal| {
        builds
            .iter()
            .any(|build| renewal.overlaps(build.started, build.finished))
    };
    let (mut during, mut between) = if forced {
        (
            run.samples(during_build),
            run.samples(|renewal| !during_build(renewal)),
        )
    } else {
        (run.samples(|_| true), drive::Samples::default())
    };
    let within = if forced {
        during.quantile_ms(0.99) <= args.p99_bound_ms && during.errors == 0
    } else {
        step.p99_ms <= args.p99_bound_ms && step.errors == 0
    };
    Ok(vec![
        "B8".into(),
        security.tagged(mode),
        args.executors.to_string(),
        args.shards.to_string(),
        format!(
            "{} / {}",
            fmt_rate(args.rate_per_s),
            fmt_rate(step.achieved_per_s)
        ),
        if forced {
            fmt_builds(&builds)
        } else {
            format!("{seen} (at least)")
        },
        fmt_latencies(&mut during),
        if forced {
            fmt_latencies(&mut between)
        } else {
            "-".to_owned()
        },
        if within { "yes" } else { "**no**" }.to_owned(),
        format!("{load} → {}", load_average()),
    ])
}

/// Where in the window the renewals slower than the bound were scheduled, on stderr: the 100 ms
/// slots holding the most of them, as offsets from the window's start. Periodic work shows as a
/// period between slots.
fn report_slow_slots(run: &drive::OpenLoopRun, window_start: Instant, bound_ms: f64) {
    let bound = Duration::from_secs_f64(bound_ms / 1000.0);
    let mut slots: std::collections::BTreeMap<u128, usize> = std::collections::BTreeMap::new();
    for renewal in &run.renewals {
        if renewal
            .result
            .as_ref()
            .map_or(true, |latency| *latency > bound)
        {
            let offset = renewal.scheduled.saturating_duration_since(window_start);
            *slots.entry(offset.as_millis() / 100).or_default() += 1;
        }
    }
    let mut busiest: Vec<(u128, usize)> = slots.into_iter().collect();
    busiest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    busiest.truncate(20);
    busiest.sort();
    let listed: Vec<String> = busiest
        .iter()
        .map(|(slot, count)| format!("{:.1} s: {count}", *slot as f64 / 10.0))
        .collect();
    eprintln!(
        "  renewals over {bound_ms} ms, by 100 ms slot of their schedule (the 20 busiest): {}",
        listed.join(", ")
    );
}

/// Renewals at a fixed rate (half of B1's) while the leader builds snapshots of a large state:
/// the p99 of the renewals a build overlaps, beside those no build overlaps.
pub async fn b8(env: &Env, args: &B8) -> Result<Table> {
    let bound = format!("p99 ≤ {} ms while building?", args.p99_bound_ms);
    let mut table = Table::new(&[
        "B8",
        "snapshots",
        "executors",
        "shards",
        "renewals/s offered / done",
        "leader's snapshot builds in the window",
        "renewals a build overlaps (all, by policy): n, p50, p99, max",
        "renewals no build overlaps: n, p50, p99, max",
        &bound,
        "load avg",
    ]);
    table.row(b8_run(env, args, true).await?);
    eprint!("{}", table.render());
    if args.shipped_policy {
        table.row(b8_run(env, args, false).await?);
    }
    Ok(table)
}

// ---------------------------------------------------------------------------------------------
// B9

/// `executors` simulated executors start at once (registrations 64 at a time, as fast as the
/// cluster takes them) against a fresh cluster with the production defaults; timed until every
/// shard is delivered and the spread is even. They renew at the protocol's cadence from their
/// registration on, as real executors would. The leader logs say how the handoffs completed: by
/// the old owner's release (the revoke answer or its claims) or on its lease expiry (P5.2).
/// The routing table as the leader has it now (`GET /v1/routing?consistent=true`).
async fn cluster_routing_table(cluster: &ManagerCluster) -> Result<RouteTable> {
    let url = cluster.url(1)?;
    let table: RoutingTable = cluster
        .http
        .get(format!("{url}/v1/routing?consistent=true"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    RouteTable::from_routing(&table).map_err(|e| anyhow!("the cluster's routing table: {e}"))
}

pub async fn b9(env: &Env, executors: usize, shard_counts: &[u32]) -> Result<Table> {
    let mut table = Table::new(&[
        "B9",
        "executors",
        "shards",
        "all registered after",
        "settled after (from the first registration)",
        "revokes acknowledged (log lines)",
        "handoffs completed on expiry (log lines)",
        "routing client current after settling",
        "routing tables adopted / watch replies",
        "load avg",
    ]);
    for &shards in shard_counts {
        let load = load_average();
        let security = &env.security;
        let name = format!("b9-{shards}");
        let mut cluster = leasehold_cluster(env, security, &name, default_flags(shards)).await?;
        // A client routing by key throughout, as a service's callers would: it
        // follows `/v1/watch` while the fleet settles; how long after the cluster settled its
        // table shows the final owners is what a caller waits to reach them.
        let routing = RoutingClient::connect_with_tls(
            cluster.urls(),
            RoutingConfig::default(),
            security.executor_tls(),
        )
        .await
        .context("B9: the routing client")?;
        let started = Instant::now();
        let (fleet, cadence, registered) = renewing_settled_fleet(
            "B9",
            &mut cluster,
            security,
            executors,
            shards,
            SETTLE_BOUND,
        )
        .await?;
        let settled = started.elapsed();
        let final_table = cluster_routing_table(&cluster).await?;
        let routed_at = poll_until(
            "B9: the routing client's table to show the final owners",
            SETTLE_BOUND,
            || {
                let routing = routing.clone();
                let final_table = final_table.clone();
                async move {
                    let table = routing.table();
                    if table.revision() >= final_table.revision()
                        && table.routes().eq(final_table.routes())
                    {
                        Ok(started.elapsed())
                    } else {
                        Err(format!(
                            "client at revision {}, cluster at {}",
                            table.revision(),
                            final_table.revision()
                        ))
                    }
                }
            },
        )
        .await?;
        let routing_stats = routing.stats();
        let counters = cadence.stop().await;
        let evicted = counters.evictions.load(Ordering::Relaxed);
        if evicted > 0 {
            bail!("B9: {evicted} executors were evicted while settling");
        }
        table.row(vec![
            "B9".into(),
            executors.to_string(),
            shards.to_string(),
            format!("{:.1} s", registered.as_secs_f64()),
            format!("{:.1} s", settled.as_secs_f64()),
            log_lines_containing(&cluster, "revoke acknowledged").to_string(),
            log_lines_containing(&cluster, "handoffs completed on the old owner's expiry")
                .to_string(),
            format!("{:.2} s", routed_at.saturating_sub(settled).as_secs_f64()),
            format!(
                "{} / {}",
                routing_stats.tables_adopted, routing_stats.watch_replies
            ),
            format!("{load} → {}", load_average()),
        ]);
        fleet.deregister_all().await?;
    }
    Ok(table)
}

// ---------------------------------------------------------------------------------------------
// B10

/// What B10 measures over its window, per shard count.
pub struct B10Options {
    pub executors: usize,
    pub shard_counts: Vec<u32>,
    /// After settling, how long the fleet renews before the window opens, so the last pushes,
    /// revokes and plans are behind it.
    pub quiet: Duration,
    pub window: Duration,
}

/// CPU used by each of `pids` (and by this process, last) over `window`, as a share of one
/// core, with the window's real length.
async fn cpu_shares(pids: &[u32], window: Duration) -> Result<(Vec<f64>, Duration)> {
    let own_pid = std::process::id();
    let cpu_now = || -> Result<Vec<Duration>> {
        pids.iter()
            .copied()
            .chain([own_pid])
            .map(|pid| procs::cpu_time(pid).with_context(|| format!("B10: /proc/{pid}/stat")))
            .collect()
    };
    let before = cpu_now()?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = cpu_now()?;
    let elapsed = started.elapsed();
    let shares = after
        .iter()
        .zip(&before)
        .map(|(after, before)| after.saturating_sub(*before).as_secs_f64() / elapsed.as_secs_f64())
        .collect();
    Ok((shares, elapsed))
}

fn percent(share: f64) -> String {
    format!("{:.1} %", 100.0 * share)
}

/// The shares of every member but the leader, in member order.
fn followers(shares: &[f64], leader_index: usize) -> String {
    shares
        .iter()
        .enumerate()
        .filter(|&(index, _)| index != leader_index)
        .map(|(_, &share)| percent(share))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An idle leader: the fleet renews at the protocol's cadence and nothing else changes. CPU
/// time of every manager over the window, from /proc, as a share of one core; beside it, etcd
/// with one lease per executor kept alive at the same cadence.
pub async fn b10(env: &Env, options: &B10Options) -> Result<Table> {
    let mut table = Table::new(&[
        "B10",
        "system",
        "executors",
        "shards",
        "window",
        "renewals/s in the window",
        "Raft entries/s",
        "leader CPU (share of one core)",
        "followers' CPU",
        "load generator's CPU",
        "owner changes in the window",
        "leader RSS",
        "load avg",
    ]);
    let executors = options.executors;
    let security = &env.security;
    for &shards in &options.shard_counts {
        let load = load_average();
        let mut cluster = leasehold_cluster(
            env,
            security,
            &format!("b10-{shards}"),
            default_flags(shards),
        )
        .await?;
        let (_fleet, cadence, _) = renewing_settled_fleet(
            "B10",
            &mut cluster,
            security,
            executors,
            shards,
            SETTLE_BOUND,
        )
        .await?;
        eprintln!("B10: quiet for {:?}", options.quiet);
        tokio::time::sleep(options.quiet).await;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let (ids, pids): (Vec<u64>, Vec<u32>) = cluster
            .managers
            .iter()
            .filter_map(|(&id, manager)| manager.pid().map(|pid| (id, pid)))
            .unzip();
        let leader_index = ids
            .iter()
            .position(|&id| id == leader)
            .context("B10: the leader's process")?;
        let routes_before = cluster_routing_table(&cluster).await?;
        let committed = |info: ClusterInfo| info.committed_index.unwrap_or(0);
        let committed_before =
            committed(cluster.cluster_info(leader).await.map_err(|e| anyhow!(e))?);
        let ok_before = cadence.counters.ok.load(Ordering::Relaxed);
        eprintln!("B10: measuring for {:?}", options.window);
        let (shares, elapsed) = cpu_shares(&pids, options.window).await?;
        let ok_after = cadence.counters.ok.load(Ordering::Relaxed);
        let committed_after =
            committed(cluster.cluster_info(leader).await.map_err(|e| anyhow!(e))?);
        let routes_after = cluster_routing_table(&cluster).await?;
        let still_leader = cluster.wait_for_leader(FORM_BOUND).await?;
        if still_leader != leader {
            bail!("B10: the leader changed during the window ({leader} → {still_leader})");
        }
        let leader_rss = rss_bytes(pids[leader_index]).unwrap_or(0);
        let counters = cadence.stop().await;
        let evicted = counters.evictions.load(Ordering::Relaxed);
        if evicted > 0 {
            bail!("B10: {evicted} executors were evicted");
        }
        let per_second = |count: u64| format!("{:.0}", count as f64 / elapsed.as_secs_f64());
        table.row(vec![
            "B10".into(),
            security.tagged("leasehold"),
            executors.to_string(),
            shards.to_string(),
            format!("{:.0} s", elapsed.as_secs_f64()),
            per_second(ok_after - ok_before),
            per_second(committed_after.saturating_sub(committed_before)),
            percent(shares[leader_index]),
            followers(&shares[..pids.len()], leader_index),
            percent(shares[pids.len()]),
            if routes_after.routes().eq(routes_before.routes()) {
                "none".into()
            } else {
                "owners changed".into()
            },
            fmt_bytes(leader_rss),
            format!("{load} → {}", load_average()),
        ]);
        // The cluster is dropped with its managers; deregistering 10 000 executors one by one
        // would only measure something else.
        eprint!("{}", table.render());
    }
    if let Some(etcd) = env.etcd_or_skip("B10") {
        let load = load_average();
        let mut cluster = etcd_cluster(etcd, env, security, "b10-etcd", Vec::new()).await?;
        let clients = cluster
            .clients(ETCD_B10_CONNECTIONS, Duration::from_secs(5))
            .await?;
        let fleet = Arc::new(EtcdKeepAliveFleet::start(clients, executors, 60).await?);
        let cadence = Cadence::start(fleet.clone(), DEFAULT_LEASE_DURATION);
        // A third of the lease, so every lease has been kept alive once at the cadence.
        tokio::time::sleep(DEFAULT_LEASE_DURATION / 3 + options.quiet).await;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let (indexes, pids): (Vec<usize>, Vec<u32>) = cluster.pids().into_iter().unzip();
        let leader_index = indexes
            .iter()
            .position(|&index| index == leader)
            .context("B10: etcd's leader process")?;
        let ok_before = cadence.counters.ok.load(Ordering::Relaxed);
        let (shares, elapsed) = cpu_shares(&pids, options.window).await?;
        let ok_after = cadence.counters.ok.load(Ordering::Relaxed);
        let leader_rss = rss_bytes(pids[leader_index]).unwrap_or(0);
        let counters = cadence.stop().await;
        if let Some(error) = counters.first_error() {
            bail!("B10: an etcd keepalive failed: {error}");
        }
        table.row(vec![
            "B10".into(),
            security.tagged("etcd keepalive"),
            executors.to_string(),
            "–".into(),
            format!("{:.0} s", elapsed.as_secs_f64()),
            format!(
                "{:.0}",
                (ok_after - ok_before) as f64 / elapsed.as_secs_f64()
            ),
            "–".into(),
            percent(shares[leader_index]),
            followers(&shares[..pids.len()], leader_index),
            percent(shares[pids.len()]),
            "–".into(),
            fmt_bytes(leader_rss),
            format!("{load} → {}", load_average()),
        ]);
    }
    Ok(table)
}

/// Connections B10's etcd fleet shares among its keepalive streams (B1's default).
const ETCD_B10_CONNECTIONS: usize = 4;

// ---------------------------------------------------------------------------------------------
// The short CI version

/// A few seconds of each system at a small N and a short soak: checks that the tool runs end to
/// end and reports numbers, asserts nothing about them.
pub async fn smoke(env: &Env, soak: Duration) -> Result<Vec<Table>> {
    let executors = 20;
    let shards = 64;
    let mut steps = Table::new(&[
        "smoke",
        "system",
        "executors",
        "offered/s",
        "achieved/s",
        "ok",
        "errors",
        "p50",
        "p99",
    ]);
    let step_row = |system: &str, step: &StepResult| {
        vec![
            "smoke".to_owned(),
            system.to_owned(),
            executors.to_string(),
            fmt_rate(step.offered_per_s),
            fmt_rate(step.achieved_per_s),
            step.ok.to_string(),
            step.errors.to_string(),
            fmt_ms(step.p50_ms),
            fmt_ms(step.p99_ms),
        ]
    };
    let warmup = Duration::from_millis(500);
    let measure = Duration::from_secs(2);
    let rate = 50.0;
    let security = &env.security;
    {
        let mut cluster =
            leasehold_cluster(env, security, "smoke-leasehold", default_flags(shards)).await?;
        let fleet = settled_fleet(&mut cluster, security, executors, shards).await?;
        // Twenty executors joining one by one move shards between them: pushes and revokes.
        if fleet.pushes_answered() == 0 {
            bail!("no assignment push or revoke reached the fleet's push listener");
        }
        let step = drive::open_loop(fleet.clone(), rate, warmup, measure).await;
        steps.row(step_row(&security.tagged("leasehold"), &step));
        fleet.deregister_all().await?;
    }
    if let Some(etcd) = env.etcd_or_skip("smoke") {
        let cluster = etcd_cluster(etcd, env, security, "smoke-etcd", Vec::new()).await?;
        let clients = cluster.clients(1, Duration::from_secs(5)).await?;
        let put = Arc::new(
            EtcdPutFleet::start(
                clients.clone(),
                executors,
                PUT_LEASE_TTL_S,
                claims_payload(4),
            )
            .await?,
        );
        let step = drive::open_loop(put, rate, warmup, measure).await;
        steps.row(step_row(&security.tagged("etcd-put"), &step));
        let keepalive = Arc::new(EtcdKeepAliveFleet::start(clients, executors, 60).await?);
        let step = drive::open_loop(keepalive, rate, warmup, measure).await;
        steps.row(step_row(&security.tagged("etcd-keepalive"), &step));
    }
    let (series, summary) = b6(
        env,
        &B6 {
            duration: soak,
            sample_every: soak / 4,
            executors,
            rate_per_s: rate,
            shards,
            manager_args: vec![
                "--snapshot-every".into(),
                "100".into(),
                "--snapshot-keep".into(),
                "20".into(),
            ],
        },
    )
    .await?;
    Ok(vec![steps, series, summary])
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# TYPE leasehold_executors gauge\n\
        leasehold_executors 10000\n\
        leasehold_executors_lapsed 0\n\
        leasehold_shards{state=\"owned\"} 999000\n\
        leasehold_shards{state=\"releasing\"} 1000\n\
        leasehold_shards{state=\"unowned\"} 0\n";

    #[test]
    fn placement_gauges_are_read_from_the_metrics_page() {
        assert_eq!(
            parse_placement_gauges(PAGE),
            Some(PlacementGauges {
                executors: 10_000,
                owned: 999_000,
                releasing: 1_000,
            })
        );
    }

    #[test]
    fn a_page_without_one_of_the_gauges_reads_as_none() {
        for missing in [
            "leasehold_executors 10000\n",
            "leasehold_shards{state=\"owned\"} 999000\n",
            "leasehold_shards{state=\"releasing\"} 1000\n",
        ] {
            assert_eq!(parse_placement_gauges(&PAGE.replace(missing, "")), None);
        }
    }
}
