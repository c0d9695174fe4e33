//! B12, the namespace half: many namespaces side by side on one cluster, and a storm of
//! registrations in one of them (docs/BENCHMARKS.md, issue 38).
//!
//! Three managers at the shipped defaults; once the cluster version takes namespaces (10,
//! PROTOCOL P18.1), `--namespaces` namespaces `ns-000`… of `--shards` shards each, and
//! `--executors` simulated executors registered into each (one fleet, one client, one push
//! listener), renewing at the protocol's cadence from their registration to the end. Then:
//!
//! 1. Steady: every renewal of every namespace for `--duration`, latency per namespace.
//! 2. Replans before the storm: one executor of a namespace deregisters (which frees its shards
//!    at once and steps the leader at once); timed from the deregistration's reply until the
//!    leader's gauges show every shard of that namespace owned again. `--probes` times, each in
//!    another namespace.
//! 3. The storm: `ns-000` registers `--storm` more executors at once (a second fleet, its
//!    registrations as many at a time as any fleet's), while every other namespace keeps
//!    renewing. Renewal latency of the other namespaces from the storm's start until `ns-000`
//!    has settled (every shard owned and spread evenly over its executors), and over the storm's
//!    renewal round: a third of the lease (and 5 s), in which every executor renews once, the
//!    storm's own in its second half, as executors registered at once do (P3.5: first between a
//!    sixth and a third of the lease, by executor id). And the same replan
//!    probes as in 2 in yet other namespaces, back to back from just after the storm's start,
//!    until `ns-000` has settled or `--probes` were taken.
//!
//! Against the target: the renewals' p99 (overall and the worst namespace's) within
//! `--p99-ms`, and the replans during the storm not later than those before it by more than one
//! plan interval (the leader's tick, a third of the shortest lease of any namespace).

mod probes;
mod report;
mod spaces;
mod windows;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Mutex;

use leasehold_api::wire::{CreateNamespaceRequest, NAMESPACES_SCHEMA};

use self::probes::*;
use self::report::*;
use self::spaces::*;
use self::windows::*;
use super::*;
use crate::drive::Samples;
use crate::fleet::RenewFailure;

/// What `leasehold-loadgen b12` runs.
#[derive(Debug, Clone)]
pub struct B12 {
    /// Namespaces `ns-000`…, each with `shards` shards and `executors` executors.
    pub namespaces: usize,
    pub shards: u32,
    pub executors: usize,
    /// Executors `ns-000` registers at once in the storm.
    pub storm: usize,
    /// The steady window.
    pub duration: Duration,
    /// Replan probes before the storm, and at most as many during it.
    pub probes: usize,
    /// The namespaces' lease (their executors renew a third into it).
    pub lease: Duration,
    /// The storm's executors renew at times spread over a third of the lease, as executors
    /// started at different times would, instead of when executors registered at once do:
    /// first between a sixth and a third into the lease their registration was told (P3.5).
    pub storm_spread: bool,
    pub p99_bound_ms: f64,
}

/// Shards of `default`, where no executor registers: the shipped default.
const DEFAULT_SPACE_SHARDS: u32 = 1024;
/// How long the cluster may take to reach cluster version 12 after it formed (the leader raises
/// it within a version probe round or two, 2 s each).
const VERSION_BOUND: Duration = Duration::from_secs(60);
/// How often a replan probe reads the leader's gauges.
const PROBE_POLL: Duration = Duration::from_millis(10);
/// Between one replan probe's end and the next one's deregistration.
const PROBE_GAP: Duration = Duration::from_millis(100);
/// The storm's first probe deregisters this long after the storm's registrations began, so it
/// meets them in flight (1 000 registrations took under 0.2 s at 67b44aa).
const STORM_PROBE_DELAY: Duration = Duration::from_millis(20);
/// The storm's renewal round lasts a third of the lease (every executor renews once in it, the
/// storm's own all together at its end, as executors registered at once do) and this much more,
/// for the storm's renewals to be answered.
const ROUND_SLACK: Duration = Duration::from_secs(5);
/// Beyond the leader's tick, how long a replan probe waits before it gives up.
const PROBE_PATIENCE: Duration = Duration::from_secs(60);
/// How long a closed window waits for the renewals it saw start (a renewal's client gives up
/// within its patience, 8 s, plus one attempt).
const STRAGGLERS_BOUND: Duration = Duration::from_secs(30);
/// Most renewals kept per window (a million is an hour of 10 000 executors at a 60 s lease);
/// those past it are counted, not kept.
const MAX_WINDOW_SAMPLES: usize = 1_000_000;
/// Most windows one recorder opens (steady, the storm and its round).
const MAX_WINDOWS: usize = 4;
/// Between two reads of every namespace's executors while settling, once the gauges agree.
const SPREAD_CHECK_INTERVAL: Duration = Duration::from_millis(500);

impl B12 {
    /// Whether the sizes fit one cluster (PROTOCOL P18.1) and leave every probed namespace an
    /// executor.
    pub fn check(&self) -> Result<()> {
        let max_namespaces = leasehold_api::wire::MAX_NAMESPACES - 1;
        if self.namespaces == 0 || self.namespaces > max_namespaces {
            bail!("--namespaces must be 1..={max_namespaces} (default is one of the cluster's)");
        }
        if self.shards == 0 || self.executors == 0 || self.storm == 0 {
            bail!("--shards, --executors and --storm must be positive");
        }
        let total =
            u64::from(DEFAULT_SPACE_SHARDS) + self.namespaces as u64 * u64::from(self.shards);
        if total > leasehold_api::wire::MAX_TOTAL_SHARDS {
            bail!(
                "{} namespaces of {} shards and default's {DEFAULT_SPACE_SHARDS} are {total} shards, past the cluster's {}",
                self.namespaces,
                self.shards,
                leasehold_api::wire::MAX_TOTAL_SHARDS
            );
        }
        if self.duration.is_zero() || self.lease < Duration::from_millis(300) {
            bail!("--duration must be positive and --lease at least 300ms");
        }
        if !(self.p99_bound_ms > 0.0 && self.p99_bound_ms.is_finite()) {
            bail!("--p99-ms must be positive");
        }
        Ok(())
    }
}

/// The name of namespace `index`: `ns-000`, `ns-001`, …
pub(crate) fn namespace_name(index: usize) -> String {
    format!("ns-{index:03}")
}

/// The storm's namespace.
const STORM_NAMESPACE: usize = 0;

/// One executor a replan probe deregisters: its namespace and its index in the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Victim {
    namespace: usize,
    index: usize,
}

/// The executors the replan probes deregister: `probes` before the storm, then `probes` during
/// it, each in a namespace of its own while there are namespaces enough, starting halfway
/// through them and never in the storm's namespace; executor `e` of namespace `n` is fleet index
/// `n × executors + e`. A namespace gives at most all but one of its executors, so none is left
/// without; when there are too few, both lists are shorter (and may be empty).
fn probe_victims(namespaces: usize, executors: usize, probes: usize) -> (Vec<Victim>, Vec<Victim>) {
    let order: Vec<usize> = (namespaces / 2..namespaces)
        .chain(0..namespaces / 2)
        .filter(|&n| n != STORM_NAMESPACE)
        .collect();
    let mut victims = Vec::new();
    'slots: for slot in 0..executors.saturating_sub(1) {
        for &namespace in &order {
            if victims.len() == 2 * probes {
                break 'slots;
            }
            victims.push(Victim {
                namespace,
                index: namespace * executors + slot,
            });
        }
    }
    let storm = victims.split_off(victims.len().div_ceil(2));
    (victims, storm)
}

// ---------------------------------------------------------------------------------------------
// The run: set-up, the steady window, the probes before the storm, the storm, its renewal round

pub async fn b12(env: &Env, args: &B12) -> Result<Vec<Table>> {
    args.check()?;
    let commit = commit();
    let load_before = load_average();
    let (run, cadence) = B12Run::set_up(env, args).await?;

    // 1. Steady.
    let steady = run.steady().await?;

    // 2. Replans before the storm.
    let (baseline_victims, storm_victims) =
        probe_victims(args.namespaces, args.executors, args.probes);
    let never = AtomicBool::new(false);
    let baseline = run.replan_probes(&baseline_victims, None, &never).await?;

    // 3. The storm.
    let (storm, storm_cadence) = run.storm(&storm_victims).await?;
    let round = run.storm_round(&storm).await?;
    let (storm_renewals, own_dropped) = run
        .stop_renewals(cadence, storm_cadence, &storm.own)
        .await?;
    let dropped = steady.dropped + storm.others.dropped + round.dropped + own_dropped;
    if dropped > 0 {
        eprintln!("B12: {dropped} renewals past {MAX_WINDOW_SAMPLES} a window were not kept");
    }

    let renewals = renewals_table(args, [&steady, &storm.others, &round], &commit);
    let replans = replans_table(
        &run,
        &storm,
        &baseline,
        storm_renewals,
        commit,
        &load_before,
    );
    Ok(vec![renewals, replans])
}

/// What every phase of a run shares: the cluster and its leader, the first fleet's recorder, the
/// executors the probes have left, and the settings.
struct B12Run<'a> {
    args: &'a B12,
    security: &'a Security,
    leader: u64,
    /// The leader's plan interval: a third of the shortest lease of any namespace.
    tick: Duration,
    /// The fleet of every namespace, `--executors` each, recorded per namespace.
    recorded: Arc<Recorded>,
    /// Each namespace's executors, less those the probes deregistered so far.
    left: Mutex<Vec<u64>>,
    /// Last, so that it is dropped (its managers stopped) after the fleets.
    cluster: ManagerCluster,
}

/// One closed window as the renewals table shows it.
struct WindowFigures {
    length: Duration,
    figures: Figures,
    /// The 1-minute load average at the window's opening → at its close.
    load: String,
    /// Renewals past [`MAX_WINDOW_SAMPLES`], not kept.
    dropped: u64,
}

/// The storm's own executors: their recorder (all as one namespace) and its window, open until
/// the round's end.
struct StormFleet {
    recorded: Arc<Recorded>,
    window: usize,
    /// From the storm's start until every registration was answered.
    registered: Duration,
}

/// What the storm left for its renewal round and for the tables.
struct Storm {
    started: Instant,
    /// The 1-minute load average at the storm's start.
    load_at_start: String,
    own: StormFleet,
    /// From the storm's start until its namespace settled.
    settled: Duration,
    probes: Vec<Probe>,
    /// The other namespaces' renewals until the storm's namespace settled.
    others: WindowFigures,
    /// The round's window, opened with the storm's and still open.
    round_window: usize,
}

impl B12 {
    /// Renewals slower than `--p99-ms` are kept with when they were sent.
    fn slow_renewal_bound(&self) -> Duration {
        Duration::from_secs_f64(self.p99_bound_ms / 1000.0)
    }
}

/// Every namespace with its `--executors` executors and `--shards` shards, as settled.
fn expected_namespaces(args: &B12) -> BTreeMap<String, Expected> {
    (0..args.namespaces)
        .map(|n| {
            (
                namespace_name(n),
                Expected {
                    executors: args.executors as u64,
                    shards: u64::from(args.shards),
                },
            )
        })
        .collect()
}

/// Set-up: three managers at the shipped defaults, formed and at a cluster version that takes
/// namespaces; returns the cluster and its leader.
async fn form_cluster(env: &Env) -> Result<(ManagerCluster, u64)> {
    let mut cluster = leasehold_cluster(
        env,
        &env.security,
        "b12",
        default_flags(DEFAULT_SPACE_SHARDS),
    )
    .await?;
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    poll_until("B12: cluster version 12", VERSION_BOUND, || {
        let cluster = &cluster;
        async move {
            let info = cluster.cluster_info(leader).await?;
            match info.cluster_version {
                Some(version) if version >= NAMESPACES_SCHEMA => Ok(()),
                other => Err(format!("cluster version {other:?}")),
            }
        }
    })
    .await?;
    Ok((cluster, leader))
}

/// Set-up: creates the namespaces as the admin; returns the leader's tick.
async fn create_namespaces(
    cluster: &ManagerCluster,
    security: &Security,
    args: &B12,
) -> Result<Duration> {
    let admin = admin_client(cluster, security)?;
    let lease_ms = u64::try_from(args.lease.as_millis())?;
    let created = Instant::now();
    for namespace in 0..args.namespaces {
        admin
            .create_namespace(&CreateNamespaceRequest {
                name: namespace_name(namespace),
                shard_count: args.shards,
                lease_duration_ms: Some(lease_ms),
                max_executors: None,
                placement: Default::default(),
                ..CreateNamespaceRequest::default()
            })
            .await
            .with_context(|| format!("B12: creating {}", namespace_name(namespace)))?;
    }
    // The leader steps at least every tick, a third of the shortest lease of any namespace
    // (manager/src/leader/core/mod.rs `tick_ms`), and at once when the membership changed.
    let shortest_lease_ms = admin
        .namespaces()
        .await?
        .iter()
        .map(|namespace| namespace.lease_duration_ms)
        .min()
        .unwrap_or(lease_ms);
    let tick = Duration::from_millis((shortest_lease_ms / 3).max(1));
    eprintln!(
        "B12: {} namespaces of {} shards created in {:.1} s; the leader's tick is {:?}",
        args.namespaces,
        args.shards,
        created.elapsed().as_secs_f64(),
        tick
    );
    Ok(tick)
}

/// Set-up: registers the fleet, executor i in namespace i / executors, and starts it renewing,
/// recorded per namespace.
async fn register_fleet(
    cluster: &ManagerCluster,
    security: &Security,
    args: &B12,
) -> Result<(Arc<Recorded>, Cadence)> {
    let total = args.namespaces * args.executors;
    let spec = FleetSpec {
        namespaces: (0..total)
            .map(|i| namespace_name(i / args.executors))
            .collect(),
        ..FleetSpec::plain(total)
    };
    let started = Instant::now();
    let fleet = Arc::new(leasehold_fleet_spec(cluster, security, spec, executor_client()).await?);
    let registered = started.elapsed();
    let recorded = Arc::new(Recorded::new(
        fleet,
        args.namespaces,
        args.executors,
        args.lease,
        args.slow_renewal_bound(),
    ));
    let cadence = Cadence::start(recorded.clone(), args.lease);
    eprintln!(
        "B12: {total} executors registered in {:.1} s; settling",
        registered.as_secs_f64()
    );
    Ok((recorded, cadence))
}

/// Set-up: waits until every namespace has settled, then renews every executor once and checks
/// that each namespace's shards are all held, evenly.
async fn settle_fleet(
    cluster: &ManagerCluster,
    leader: u64,
    recorded: &Recorded,
    args: &B12,
) -> Result<()> {
    let total = args.namespaces * args.executors;
    let expected = expected_namespaces(args);
    let settled = settle_namespaces(cluster, leader, &expected, SETTLE_BOUND, "B12").await?;
    let fleet = &recorded.fleet;
    let failures = fleet.renew_all().await;
    if failures > 0 {
        bail!("B12: {failures} of {total} executors could not renew after settling");
    }
    for (namespace, sets) in fleet.held_sets().chunks(args.executors).enumerate() {
        let (held, fewest, most) = spread(sets.iter().map(Vec::len));
        if held != args.shards as usize || most - fewest > 1 {
            bail!(
                "B12: after renewing, {}'s executors hold {held} of {} shards, spread {fewest}..{most}",
                namespace_name(namespace),
                args.shards
            );
        }
    }
    eprintln!(
        "B12: settled {:.1} s after the last registration; steady window of {:?}",
        settled.as_secs_f64(),
        args.duration
    );
    Ok(())
}

impl<'a> B12Run<'a> {
    /// Set-up: the cluster, its namespaces and their executors, settled and renewing (the
    /// returned cadence, which the run stops at its end).
    async fn set_up(env: &'a Env, args: &'a B12) -> Result<(Self, Cadence)> {
        let security = &env.security;
        let (cluster, leader) = form_cluster(env).await?;
        let tick = create_namespaces(&cluster, security, args).await?;
        let (recorded, cadence) = register_fleet(&cluster, security, args).await?;
        settle_fleet(&cluster, leader, &recorded, args).await?;
        let run = Self {
            args,
            security,
            leader,
            tick,
            recorded,
            left: Mutex::new(vec![args.executors as u64; args.namespaces]),
            cluster,
        };
        Ok((run, cadence))
    }

    /// Phase 1: every namespace's renewals for `--duration`, nothing else happening.
    async fn steady(&self) -> Result<WindowFigures> {
        let load_steady = load_average();
        let window = self.recorded.open()?;
        let steady_started = Instant::now();
        tokio::time::sleep(self.args.duration).await;
        let length = steady_started.elapsed();
        let closed = self.recorded.close(window).await?;
        let load = format!("{load_steady} → {}", load_average());
        let figures = figures(&closed, None, self.args.p99_bound_ms);
        eprintln!("B12: steady: {figures:?}");
        Ok(WindowFigures {
            length,
            figures,
            load,
            dropped: closed.dropped,
        })
    }

    /// Phases 2 and 3: replan probes of `victims` (see [`probe_all`]), each waiting at most the
    /// leader's tick and [`PROBE_PATIENCE`].
    async fn replan_probes(
        &self,
        victims: &[Victim],
        storm_start: Option<Instant>,
        storm_settled: &AtomicBool,
    ) -> Result<Vec<Probe>> {
        probe_all(
            &self.cluster,
            self.leader,
            &self.recorded,
            victims,
            &self.left,
            self.tick + PROBE_PATIENCE,
            storm_start,
            storm_settled,
        )
        .await
    }

    /// Phase 3: the storm's registrations, its namespace settling and the probes of `victims`,
    /// side by side, with the other namespaces' renewals until the storm's namespace settled.
    /// Returns the storm's executors' cadence beside the rest, for the run to stop at its end.
    async fn storm(&self, victims: &[Victim]) -> Result<(Storm, Cadence)> {
        let args = self.args;
        let load_storm = load_average();
        let storm_name = namespace_name(STORM_NAMESPACE);
        let mut expected = expected_namespaces(args);
        expected.retain(|name, _| *name == storm_name);
        if let Some(storm) = expected.get_mut(&storm_name) {
            storm.executors += args.storm as u64;
        }
        let storm_settled = AtomicBool::new(false);
        let window = self.recorded.open()?;
        let round_window = self.recorded.open()?;
        let started = Instant::now();
        eprintln!("B12: the storm: {} executors into {storm_name}", args.storm);
        let probes = async {
            tokio::time::sleep(STORM_PROBE_DELAY).await;
            self.replan_probes(victims, Some(started), &storm_settled)
                .await
        };
        let (registered, settled, probes) = tokio::join!(
            self.register_storm(started),
            self.settle_storm(&expected, &storm_settled),
            probes
        );
        let (own, own_cadence) = registered?;
        let settled = settled?;
        let probes = probes?;
        let length = started.elapsed();
        let closed = self.recorded.close(window).await?;
        let load = format!("{load_storm} → {}", load_average());
        let figures = figures(&closed, Some(STORM_NAMESPACE), args.p99_bound_ms);
        eprintln!("B12: storm: {figures:?}");
        let storm = Storm {
            started,
            load_at_start: load_storm,
            own,
            settled,
            probes,
            others: WindowFigures {
                length,
                figures,
                load,
                dropped: closed.dropped,
            },
            round_window,
        };
        Ok((storm, own_cadence))
    }

    /// The storm's registrations, then its executors renewing (together, or spread with
    /// `--storm-spread`), their renewals recorded from then to the round's end.
    async fn register_storm(&self, started: Instant) -> Result<(StormFleet, Cadence)> {
        let args = self.args;
        let fleet = Arc::new(
            leasehold_fleet_spec(
                &self.cluster,
                self.security,
                FleetSpec::in_namespace(args.storm, &namespace_name(STORM_NAMESPACE)),
                executor_client(),
            )
            .await?,
        );
        let registered = started.elapsed();
        eprintln!(
            "  B12: the storm's {} executors registered after {:.2} s",
            args.storm,
            registered.as_secs_f64()
        );
        let recorded = Arc::new(Recorded::new(
            fleet,
            1,
            args.storm,
            args.lease,
            args.slow_renewal_bound(),
        ));
        let window = recorded.open()?;
        let cadence = if args.storm_spread {
            Cadence::start(recorded.clone(), args.lease)
        } else {
            Cadence::start_together(recorded.clone(), args.lease)
        };
        let fleet = StormFleet {
            recorded,
            window,
            registered,
        };
        Ok((fleet, cadence))
    }

    /// Waits until the storm's namespace is `expected`, then sets `storm_settled` (whether it
    /// settled or not) for the probes to stop.
    async fn settle_storm(
        &self,
        expected: &BTreeMap<String, Expected>,
        storm_settled: &AtomicBool,
    ) -> Result<Duration> {
        let settled = settle_namespaces(
            &self.cluster,
            self.leader,
            expected,
            SETTLE_BOUND,
            "B12 storm",
        )
        .await;
        storm_settled.store(true, AtomicOrdering::SeqCst);
        if let Ok(settled) = &settled {
            eprintln!(
                "  B12: {} settled {:.2} s after the storm began",
                namespace_name(STORM_NAMESPACE),
                settled.as_secs_f64()
            );
        }
        settled
    }

    /// The storm's renewal round: the other namespaces' renewals until a third of the lease and
    /// [`ROUND_SLACK`] after the storm's start, and the leader's account of its renewals around
    /// the storm's renewal burst.
    async fn storm_round(&self, storm: &Storm) -> Result<WindowFigures> {
        let args = self.args;
        let round_ends = storm.started + args.lease / 3 + ROUND_SLACK;
        eprintln!(
            "B12: the storm's renewal round, until {:.1} s after its start",
            round_ends.duration_since(storm.started).as_secs_f64()
        );
        // The leader's own account of the renewals around the storm's renewal burst (its executors
        // renew first a third into their lease): from a second before it to the round's end.
        let leader_url = self.cluster.url(self.leader)?;
        let burst_before = storm.started + (args.lease / 3).saturating_sub(Duration::from_secs(1));
        tokio::time::sleep_until(burst_before).await;
        let page_before = metrics_page(&self.cluster, &leader_url)
            .await
            .unwrap_or_default();
        tokio::time::sleep_until(round_ends).await;
        let length = storm.started.elapsed();
        let page_after = metrics_page(&self.cluster, &leader_url)
            .await
            .unwrap_or_default();
        eprintln!(
            "B12: the leader's renewal metrics from {:.1} s into the storm to the round's end:",
            burst_before.duration_since(storm.started).as_secs_f64()
        );
        for (series, delta) in metric_deltas(&page_before, &page_after, LEADER_RENEWAL_METRICS) {
            eprintln!("  {series} +{delta}");
        }
        let closed = self.recorded.close(storm.round_window).await?;
        let load = format!("{} → {}", storm.load_at_start, load_average());
        let figures = figures(&closed, Some(STORM_NAMESPACE), args.p99_bound_ms);
        eprintln!("B12: storm round: {figures:?}");
        Ok(WindowFigures {
            length,
            figures,
            load,
            dropped: closed.dropped,
        })
    }

    /// Stops both fleets' renewals and says if any failed over the whole run; returns the storm's
    /// own renewals as the replans table shows them, and how many of them were not kept.
    async fn stop_renewals(
        &self,
        cadence: Cadence,
        storm_cadence: Cadence,
        storm_fleet: &StormFleet,
    ) -> Result<(String, u64)> {
        let main_counters = cadence.stop().await;
        let storm_counters = storm_cadence.stop().await;
        let count = |counter: &std::sync::atomic::AtomicU64| counter.load(AtomicOrdering::Relaxed);
        let failed = count(&main_counters.errors) + count(&storm_counters.errors);
        if failed > 0 {
            eprintln!(
                "B12: {failed} renewals failed over the whole run, {} of them refused as from unknown executors (first error: {})",
                count(&main_counters.evictions) + count(&storm_counters.evictions),
                main_counters
                    .first_error()
                    .or_else(|| storm_counters.first_error())
                    .unwrap_or_default()
            );
        }
        let own = storm_fleet.recorded.close(storm_fleet.window).await?;
        let dropped = own.dropped;
        let own = figures(&own, None, self.args.p99_bound_ms);
        let storm_renewals = format!(
            "{} ({}); p50 {}, p99 {}, max {}",
            count(&storm_counters.ok),
            count(&storm_counters.errors),
            fmt_ms(own.p50_ms),
            fmt_ms(own.p99_ms),
            fmt_ms(own.max_ms)
        );
        Ok((storm_renewals, dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> B12 {
        B12 {
            namespaces: 100,
            shards: 1024,
            executors: 10,
            storm: 1000,
            duration: Duration::from_secs(60),
            probes: 3,
            lease: Duration::from_secs(60),
            storm_spread: false,
            p99_bound_ms: 25.0,
        }
    }

    #[test]
    fn the_target_s_sizes_fit_one_cluster_and_oversized_ones_are_refused() {
        assert!(args().check().is_ok());
        // 1 023 namespaces of 1 024 and default's 1 024 are exactly 2^20 shards.
        assert!(B12 {
            namespaces: 1023,
            shards: 1024,
            ..args()
        }
        .check()
        .is_ok());
        for wrong in [
            B12 {
                namespaces: 0,
                ..args()
            },
            B12 {
                namespaces: 1024,
                shards: 1,
                ..args()
            },
            B12 {
                namespaces: 1023,
                shards: 1025,
                ..args()
            },
            B12 {
                executors: 0,
                ..args()
            },
            B12 { storm: 0, ..args() },
            B12 {
                duration: Duration::ZERO,
                ..args()
            },
            B12 {
                p99_bound_ms: f64::NAN,
                ..args()
            },
        ] {
            assert!(wrong.check().is_err(), "{wrong:?}");
        }
    }

    #[test]
    fn namespaces_are_named_in_order() {
        assert_eq!(namespace_name(0), "ns-000");
        assert_eq!(namespace_name(50), "ns-050");
        assert_eq!(namespace_name(1000), "ns-1000");
    }

    #[test]
    fn probes_take_one_executor_of_a_namespace_each_and_never_the_storm_s() {
        let (before, during) = probe_victims(100, 10, 3);
        let namespaces =
            |victims: &[Victim]| victims.iter().map(|v| v.namespace).collect::<Vec<_>>();
        assert_eq!(namespaces(&before), [50, 51, 52]);
        assert_eq!(namespaces(&during), [53, 54, 55]);
        assert_eq!(before[0].index, 500);
        assert_eq!(during[2].index, 550);
        // Past the end the namespaces wrap round, skipping ns-000.
        let (before, during) = probe_victims(4, 10, 2);
        assert_eq!(namespaces(&before), [2, 3]);
        assert_eq!(namespaces(&during), [1, 2]);
        assert_eq!(during[1].index, 2 * 10 + 1, "the second executor of ns-002");
        // Each namespace keeps one executor: two namespaces of two give two probes.
        let (before, during) = probe_victims(3, 2, 5);
        assert_eq!((before.len(), during.len()), (1, 1));
        assert!(probe_victims(1, 10, 3).0.is_empty());
        assert!(probe_victims(100, 1, 3).1.is_empty());
    }

    const PAGE: &str = "# TYPE leasehold_executors gauge\n\
        leasehold_executors{namespace=\"default\"} 0\n\
        leasehold_executors{namespace=\"ns-000\"} 1010\n\
        leasehold_executors{namespace=\"ns-001\"} 10\n\
        leasehold_executors_lapsed{namespace=\"ns-001\"} 3\n\
        leasehold_shards{namespace=\"ns-000\",state=\"owned\"} 1000\n\
        leasehold_shards{namespace=\"ns-000\",state=\"releasing\"} 20\n\
        leasehold_shards{namespace=\"ns-000\",state=\"unowned\"} 4\n\
        leasehold_shards{state=\"owned\",namespace=\"ns-001\"} 1024\n\
        leasehold_shards{namespace=\"ns-001\",state=\"releasing\"} 0\n\
        leasehold_shards{namespace=\"ns-001\",state=\"unowned\"} 0\n\
        leasehold_other{namespace=\"ns-001\"} 7\n";

    #[test]
    fn gauges_are_read_per_namespace() {
        let gauges = parse_space_gauges(PAGE);
        assert_eq!(gauges.len(), 3);
        assert_eq!(
            gauges["ns-000"],
            SpaceGauges {
                executors: 1010,
                owned: 1000,
                releasing: 20,
                unowned: 4,
            }
        );
        assert_eq!(
            gauges["ns-001"],
            SpaceGauges {
                executors: 10,
                owned: 1024,
                releasing: 0,
                unowned: 0,
            }
        );
        assert_eq!(gauges["default"], SpaceGauges::default());
    }

    #[test]
    fn a_namespace_is_placed_once_its_executors_are_in_and_every_shard_owned() {
        let gauges = parse_space_gauges(PAGE);
        let want = |name: &str, executors: u64| {
            BTreeMap::from([(
                name.to_owned(),
                Expected {
                    executors,
                    shards: 1024,
                },
            )])
        };
        assert_eq!(placed(&gauges, &want("ns-001", 10)), Ok(()));
        assert!(placed(&gauges, &want("ns-001", 11)).is_err());
        let waiting = placed(&gauges, &want("ns-000", 1010)).unwrap_err();
        assert!(waiting.contains("20 releasing"), "{waiting}");
        assert!(placed(&gauges, &want("ns-404", 1)).is_err());
    }

    fn samples(latencies_ms: &[u64], errors: u64) -> Samples {
        let mut samples = Samples::default();
        for &ms in latencies_ms {
            samples.record(Ok(Duration::from_millis(ms)));
        }
        for _ in 0..errors {
            samples.record(Err("timeout".to_owned()));
        }
        samples
    }

    #[test]
    fn figures_sum_the_namespaces_and_name_the_worst() {
        // ns-000: 100 renewals of 1..=100 ms; ns-001: 1 ms each but one failure; ns-002: none;
        // ns-003: a 40 ms p99 on few renewals.
        let slow = |namespace, took_ms| Slow {
            namespace,
            at: Duration::from_secs(1),
            took: Duration::from_millis(took_ms),
        };
        let closed = Closed {
            by_namespace: vec![
                samples(&(1..=100).collect::<Vec<_>>(), 0),
                samples(&[1; 50], 1),
                Samples::default(),
                samples(&[2, 40], 0),
            ],
            slow: vec![slow(0, 26), slow(3, 40), slow(0, 27)],
            dropped: 0,
        };
        let all = figures(&closed, None, 25.0);
        assert_eq!((all.renewals, all.errors), (152, 1));
        assert_eq!(all.first_error.as_deref(), Some("timeout"));
        assert_eq!(all.max_ms, 100.0);
        assert_eq!(all.worst, Some((0, 99.0, 100)));
        // 26..=100 ms in ns-000, 40 ms in ns-003.
        assert_eq!((all.over_bound, all.namespaces_over), (76, 2));
        assert_eq!(all.slow.len(), 3);
        // Without the storm's namespace, the worst is ns-003, whose p99 is its maximum.
        let others = figures(&closed, Some(0), 25.0);
        assert_eq!((others.renewals, others.errors), (52, 1));
        assert_eq!(others.worst, Some((3, 40.0, 2)));
        assert_eq!(others.p50_ms, 1.0);
        assert_eq!(others.max_ms, 40.0);
        assert_eq!((others.over_bound, others.namespaces_over), (1, 1));
        assert_eq!(others.slow, [slow(3, 40)]);
        assert_eq!(
            fmt_slow(&others),
            "1: ns-003 +1.0 s 40.0 ms",
            "the slow renewals as the table shows them"
        );
        assert_eq!(figures(&Closed::default(), None, 25.0), Figures::default());
        assert_eq!(fmt_slow(&Figures::default()), "none");
    }

    #[test]
    fn the_commit_names_the_directories_with_uncommitted_changes() {
        assert_eq!(commit_label("67b44aa", ""), "67b44aa");
        assert_eq!(
            commit_label(
                "67b44aa",
                " M bench/src/main.rs\n M sim/src/checks.rs\nM  bench/src/fleet.rs\nR  a.rs -> docs/b.md\n"
            ),
            "67b44aa (uncommitted: bench, docs, sim)"
        );
    }

    #[test]
    fn metric_deltas_are_what_grew_of_the_named_series() {
        let before = "# TYPE leasehold_renewals_from_memory_total counter\n\
            leasehold_renewals_from_memory_total 100\n\
            leasehold_renewal_duration_seconds_bucket{le=\"0.001\"} 90\n\
            leasehold_renewal_duration_seconds_bucket{le=\"0.1\"} 100\n\
            leasehold_renewals_total{result=\"renewed\"} 100\n";
        let after = "leasehold_renewals_from_memory_total 1100\n\
            leasehold_renewal_duration_seconds_bucket{le=\"0.001\"} 90\n\
            leasehold_renewal_duration_seconds_bucket{le=\"0.1\"} 1100\n\
            leasehold_renewals_through_log_total{reason=\"unconfirmed\"} 3\n\
            leasehold_renewals_total{result=\"renewed\"} 1100\n";
        assert_eq!(
            metric_deltas(before, after, LEADER_RENEWAL_METRICS),
            [
                ("leasehold_renewals_from_memory_total".to_owned(), 1000.0),
                (
                    "leasehold_renewal_duration_seconds_bucket{le=\"0.1\"}".to_owned(),
                    1000.0
                ),
                (
                    "leasehold_renewals_through_log_total{reason=\"unconfirmed\"}".to_owned(),
                    3.0
                ),
            ]
        );
    }

    #[test]
    fn spreads_are_fewest_and_most() {
        assert_eq!(spread([3, 5, 4]), (12, 3, 5));
        assert_eq!(spread(Vec::<usize>::new()), (0, 0, 0));
    }
}
