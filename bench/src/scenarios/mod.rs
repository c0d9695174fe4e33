//! The scenarios of docs/BENCHMARKS.md (B1–B6, B8–B12, one file each; B7 is in src/b7.rs) and the
//! short CI run, and what they share: the clusters and fleets they set up, and how they wait for a
//! fleet to settle. Each prints a markdown table on stdout; progress goes to stderr.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use leasehold_api::client::{Client, ClientConfig};
use leasehold_api::routing::{RouteTable, RoutingClient, RoutingConfig};
use leasehold_api::tls::TlsConfig;
use leasehold_api::wire::ExecutorView;
use leasehold_api::wire::RoutingTable;
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

mod b1;
mod b10;
mod b11;
mod b12;
mod b13;
mod b14;
mod b2;
mod b3;
mod b4;
mod b5;
mod b6;
mod b8;
mod b9;
mod replicas;
mod smoke;

pub use b1::{b1, B1};
pub use b10::{b10, B10Options};
pub use b11::b11;
pub use b12::{b12, B12};
pub use b13::{b13, B13};
pub use b14::{b14, B14};
pub use b2::b2;
pub use b3::{b3, B3};
pub use b4::b4;
pub use b5::b5;
pub use b6::{b6, B6};
pub use b8::{b8, B8};
pub use b9::b9;
pub use smoke::smoke;

// Shared by two scenarios, defined beside the one that owns them.
use b3::{median, SHORT_LEASE, SHORT_LEASE_DURATION};
pub(crate) use b4::executors_view;
use b9::cluster_routing_table;

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

/// A real `leasehold-executor` on 127.0.0.1:`port` against `cluster`, with the executor
/// certificate under TLS; returns the command and the address it advertises.
pub(crate) fn executor_command(
    executor_bin: &Path,
    cluster: &ManagerCluster,
    security: &Security,
    port: u16,
) -> (Command, String) {
    let address = format!("{}://127.0.0.1:{port}", security.scheme());
    let mut command = Command::new(executor_bin);
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
    (command, address)
}

/// The admin's client: under TLS, with the admin certificate (namespaces and drains are an
/// operator's, P18.1, P17.2).
pub(crate) fn admin_client(cluster: &ManagerCluster, security: &Security) -> Result<Client> {
    let tls = match security.certs() {
        Some(certs) => Some(TlsConfig::load(&certs.files("admin"))?),
        None => None,
    };
    Ok(Client::with_tls(
        cluster.urls(),
        ClientConfig::default(),
        tls.as_ref(),
    )?)
}

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
    let delivery = Delivery {
        cluster,
        leader,
        executors,
        shards,
        started: Instant::now(),
    };
    delivery.wait(shard_count, bound).await?;
    eprintln!(
        "  the leader records every shard delivered, evenly, after {:.1} s of settling",
        delivery.started.elapsed().as_secs_f64()
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
    adopt_recorded_sets(fleet, shards).await
}

/// What [`settle`] waits for: the leader recording `executors` executors holding `shards`
/// shards, evenly; `started` is when it began waiting, for the progress lines.
struct Delivery<'a> {
    cluster: &'a ManagerCluster,
    leader: u64,
    executors: usize,
    shards: usize,
    started: Instant,
}

impl Delivery<'_> {
    /// Polls until every shard is delivered, evenly, at most `bound`; progress every 10 s.
    async fn wait(&self, shard_count: u32, bound: Duration) -> Result<()> {
        let mut last_report = Instant::now();
        // The full view serialises every executor's set, about 25 bytes per shard (25 MB at a
        // million), which on this machine competes with the cluster it observes. So the leader's
        // gauges, a page of a few kilobytes, are read every `GAUGE_INTERVAL` first, and the full
        // view only once they say every executor is there with every shard owned and none
        // releasing, at most once per `full_interval`.
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
                let last_full = &last_full;
                async move { self.check(report, full_due, last_full).await }
            },
        )
        .await?;
        Ok(())
    }

    /// One poll: the leader's gauges, and the full view when `full_due` and the gauges say every
    /// shard is owned; what is still missing is the error, said on stderr if `report`.
    async fn check(
        &self,
        report: bool,
        full_due: bool,
        last_full: &std::sync::Mutex<Option<Instant>>,
    ) -> Result<(), String> {
        let (executors, shards) = (self.executors, self.shards);
        let gauges = placement_gauges(self.cluster, self.leader).await?;
        let placed = gauges.executors == executors as u64
            && gauges.owned == shards as u64
            && gauges.releasing == 0;
        if !(placed && full_due) {
            let observation = format!(
                "{} executors, {} of {shards} shards owned, {} releasing",
                gauges.executors, gauges.owned, gauges.releasing
            );
            return self.waiting(observation, report);
        }
        *last_full.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let view = executors_view(self.cluster, self.leader).await?;
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
        self.waiting(observation, report)
    }

    /// `observation` as the poll's error, said on stderr first if `report`.
    fn waiting(&self, observation: String, report: bool) -> Result<(), String> {
        if report {
            eprintln!(
                "  settling for {:.0} s: {observation}",
                self.started.elapsed().as_secs_f64()
            );
        }
        Err(observation)
    }
}

/// Renews every executor of `fleet` once, so each adopts the set the leader recorded for it,
/// and checks that together they hold all `shards`, evenly.
async fn adopt_recorded_sets(fleet: &Arc<LeaseholdFleet>, shards: usize) -> Result<()> {
    let executors = fleet.size();
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
    /// `leasehold_executors`, over every namespace.
    executors: u64,
    /// `leasehold_shards{state="owned"}`, over every namespace: owned and not being released.
    owned: u64,
    /// `leasehold_shards{state="releasing"}`, over every namespace.
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

/// The three gauges from a Prometheus text page, each summed over its namespaces (one series
/// each, PROTOCOL P18.1); `None` unless all three are there.
fn parse_placement_gauges(text: &str) -> Option<PlacementGauges> {
    let (mut executors, mut owned, mut releasing) = (None, None, None);
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let slot = match name {
            "leasehold_executors" => &mut executors,
            "leasehold_shards" if labels.contains("state=\"owned\"") => &mut owned,
            "leasehold_shards" if labels.contains("state=\"releasing\"") => &mut releasing,
            _ => continue,
        };
        if let Ok(value) = value.parse::<f64>() {
            *slot = Some(slot.unwrap_or(0) + value as u64);
        }
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

// ---------------------------------------------------------------------------------------------
// B5 and B6 helpers

/// Size of the snapshot data a stopped manager holds on disk (envelope and encoded state), read
/// from its data directory.
fn snapshot_bytes(data_dir: &Path) -> Result<u64> {
    let db = sled::open(data_dir).with_context(|| format!("open {}", data_dir.display()))?;
    leasehold_raft_store::stored_snapshot_len(&db, data_dir)?
        .ok_or_else(|| anyhow!("{} holds no snapshot", data_dir.display()))
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
    let target = committed_index(cluster, leader).await?;
    let started = Instant::now();
    cluster.manager(id)?.start()?;
    cluster.wait_ready(id, SETTLE_BOUND).await?;
    cluster.wait_applied(id, target, SETTLE_BOUND).await?;
    Ok((bytes, started.elapsed()))
}

/// The index manager `id` reports committed; 0 before its first commit.
async fn committed_index(cluster: &ManagerCluster, id: u64) -> Result<u64> {
    let info = cluster.cluster_info(id).await.map_err(|e| anyhow!(e))?;
    Ok(info.committed_index.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# TYPE leasehold_executors gauge\n\
        leasehold_executors{namespace=\"default\"} 9990\n\
        leasehold_executors{namespace=\"orders\"} 10\n\
        leasehold_executors_lapsed{namespace=\"default\"} 0\n\
        leasehold_shards{namespace=\"default\",state=\"owned\"} 998000\n\
        leasehold_shards{namespace=\"default\",state=\"releasing\"} 1000\n\
        leasehold_shards{namespace=\"default\",state=\"unowned\"} 0\n\
        leasehold_shards{namespace=\"orders\",state=\"owned\"} 1000\n\
        leasehold_shards{namespace=\"orders\",state=\"releasing\"} 0\n";

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
        let without = |gauge: &str| {
            PAGE.lines()
                .filter(|line| !line.starts_with(gauge))
                .map(|line| format!("{line}\n"))
                .collect::<String>()
        };
        for missing in [
            "leasehold_executors{",
            "leasehold_shards{namespace=\"default\",state=\"owned\"}",
            "leasehold_shards{namespace=\"default\",state=\"releasing\"}",
        ] {
            let page = without(missing);
            let page = page.replace("leasehold_shards{namespace=\"orders\"", "other{");
            assert_eq!(parse_placement_gauges(&page), None, "{missing}");
        }
    }
}
