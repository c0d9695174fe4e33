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
//!    storm's own all at its end, as executors registered at once do. And the same replan
//!    probes as in 2 in yet other namespaces, back to back from just after the storm's start,
//!    until `ns-000` has settled or `--probes` were taken.
//!
//! Against the target: the renewals' p99 (overall and the worst namespace's) within
//! `--p99-ms`, and the replans during the storm not later than those before it by more than one
//! plan interval (the leader's tick, a third of the shortest lease of any namespace).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Mutex;

use leasehold_api::client::Client;
use leasehold_api::tls::TlsConfig;
use leasehold_api::wire::{CreateNamespaceRequest, NAMESPACES_SCHEMA};

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
    /// started at different times would, instead of all together a third into the lease their
    /// registration was told, as executors registered at once do.
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
// The leader's gauges, per namespace

/// What the leader's `/metrics` says of one namespace (PROTOCOL P18.1's `namespace` label).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SpaceGauges {
    executors: u64,
    owned: u64,
    releasing: u64,
    unowned: u64,
}

/// The value of label `key` in a series' labels (`a="x",b="y"}`).
fn label_value<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// `leasehold_executors` and `leasehold_shards` by namespace, from a Prometheus text page.
fn parse_space_gauges(text: &str) -> BTreeMap<String, SpaceGauges> {
    let mut spaces: BTreeMap<String, SpaceGauges> = BTreeMap::new();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        if name != "leasehold_executors" && name != "leasehold_shards" {
            continue;
        }
        let (Some(namespace), Ok(value)) = (label_value(labels, "namespace"), value.parse::<f64>())
        else {
            continue;
        };
        let gauges = spaces.entry(namespace.to_owned()).or_default();
        let slot = match (name, label_value(labels, "state")) {
            ("leasehold_executors", _) => &mut gauges.executors,
            (_, Some("owned")) => &mut gauges.owned,
            (_, Some("releasing")) => &mut gauges.releasing,
            (_, Some("unowned")) => &mut gauges.unowned,
            _ => continue,
        };
        *slot = value as u64;
    }
    spaces
}

async fn space_gauges(
    cluster: &ManagerCluster,
    url: &str,
) -> Result<BTreeMap<String, SpaceGauges>, String> {
    let text = metrics_page(cluster, url)
        .await
        .map_err(|e| e.to_string())?;
    Ok(parse_space_gauges(&text))
}

/// What a namespace should look like once settled: its executors and shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expected {
    executors: u64,
    shards: u64,
}

/// Whether `gauges` show every expected namespace with its executors and every shard owned, none
/// releasing; otherwise what is still missing, for the progress lines.
fn placed(
    gauges: &BTreeMap<String, SpaceGauges>,
    expected: &BTreeMap<String, Expected>,
) -> Result<(), String> {
    let mut waiting = 0;
    let mut example = None;
    for (name, want) in expected {
        let have = gauges.get(name).copied().unwrap_or_default();
        if have.executors != want.executors || have.owned != want.shards || have.releasing != 0 {
            waiting += 1;
            example.get_or_insert_with(|| {
                format!(
                    "{name}: {} of {} executors, {} of {} shards owned, {} releasing",
                    have.executors, want.executors, have.owned, want.shards, have.releasing
                )
            });
        }
    }
    match example {
        None => Ok(()),
        Some(example) => Err(format!(
            "{waiting} of {} namespaces not placed yet (e.g. {example})",
            expected.len()
        )),
    }
}

/// Fewest and most shards per executor, and their total.
fn spread(counts: impl IntoIterator<Item = usize>) -> (usize, usize, usize) {
    let counts: Vec<usize> = counts.into_iter().collect();
    (
        counts.iter().sum(),
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    )
}

/// One namespace's executors as `url` has them.
async fn executors_in(
    cluster: &ManagerCluster,
    url: &str,
    namespace: &str,
) -> Result<Vec<ExecutorView>, String> {
    let reply = cluster
        .http
        .get(format!("{url}/v1/executors?namespace={namespace}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    reply.json().await.map_err(|e| e.to_string())
}

/// Waits until the leader shows every namespace of `expected` with its executors, every shard
/// owned, none releasing and the shards spread evenly over its executors (its gauges every
/// [`GAUGE_INTERVAL`], then each namespace's executors at most every
/// [`SPREAD_CHECK_INTERVAL`]). Returns how long it waited.
async fn settle_namespaces(
    cluster: &ManagerCluster,
    leader: u64,
    expected: &BTreeMap<String, Expected>,
    bound: Duration,
    label: &str,
) -> Result<Duration> {
    let url = cluster.url(leader)?;
    let started = Instant::now();
    let last_report = Mutex::new(Instant::now());
    let last_spread = Mutex::new(None::<Instant>);
    poll_every(
        &format!("{label}: every namespace's shards delivered, evenly"),
        bound,
        GAUGE_INTERVAL,
        || {
            let (url, last_report, last_spread) = (&url, &last_report, &last_spread);
            async move {
                let observed = async {
                    let gauges = space_gauges(cluster, url).await?;
                    placed(&gauges, expected)?;
                    let due = last_spread
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_none_or(|at| at.elapsed() >= SPREAD_CHECK_INTERVAL);
                    if !due {
                        return Err("placed; the spread is read next".to_owned());
                    }
                    *last_spread.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(Instant::now());
                    for (name, want) in expected {
                        let view = executors_in(cluster, url, name).await?;
                        let (total, fewest, most) = spread(view.iter().map(|e| e.shards.len()));
                        if view.len() as u64 != want.executors
                            || total as u64 != want.shards
                            || most - fewest > 1
                        {
                            return Err(format!(
                                "{name}: {} executors, {total} shards delivered, spread {fewest}..{most}",
                                view.len()
                            ));
                        }
                    }
                    Ok(())
                }
                .await;
                if let Err(observation) = &observed {
                    let mut last = last_report.lock().unwrap_or_else(PoisonError::into_inner);
                    if last.elapsed() >= Duration::from_secs(10) {
                        *last = Instant::now();
                        eprintln!(
                            "  {label}: settling for {:.0} s: {observation}",
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
                observed
            }
        },
    )
    .await?;
    Ok(started.elapsed())
}

// ---------------------------------------------------------------------------------------------
// Renewal latency per namespace

/// One recorded window: every renewal that started while it was open, per namespace. Windows
/// may overlap (the storm's own and its renewal round).
#[derive(Debug, Default)]
struct Window {
    open: bool,
    opened: Option<Instant>,
    by_namespace: Vec<Samples>,
    /// Renewals slower than the recorder's `slow` bound, first [`MAX_SLOW_KEPT`] of them.
    slow: Vec<Slow>,
    /// Renewals started in the window and not yet answered.
    in_flight: usize,
    kept: usize,
    /// Renewals past [`MAX_WINDOW_SAMPLES`], not kept.
    dropped: u64,
}

/// A renewal slower than the bound: its namespace, when it was sent (from the window's opening)
/// and how long it took.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slow {
    namespace: usize,
    at: Duration,
    took: Duration,
}

/// Most slow renewals a window keeps the details of.
const MAX_SLOW_KEPT: usize = 32;

/// What [`Recorded::close`] returns: the renewals of every namespace, the slow ones, and how
/// many renewals were not kept.
#[derive(Debug, Default)]
struct Closed {
    by_namespace: Vec<Samples>,
    slow: Vec<Slow>,
    dropped: u64,
}

/// Every window opened so far, at most [`MAX_WINDOWS`].
#[derive(Debug, Default)]
struct Windows {
    all: Vec<Window>,
}

/// A set of windows, one bit each (so [`MAX_WINDOWS`] is at most 32).
type WindowSet = u32;

/// Per executor: whether a probe took it out (its renewals stop) and whether a renewal of it is
/// on the way.
#[derive(Debug, Default)]
struct Slot {
    retired: AtomicBool,
    busy: AtomicBool,
}

/// Clears a slot's `busy` however its renewal ends.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, AtomicOrdering::SeqCst);
    }
}

/// A fleet whose renewals are timed and recorded by namespace while a window is open, and whose
/// executors can be taken out of the renewal schedule for a probe's deregistration.
#[derive(Debug)]
struct Recorded {
    fleet: Arc<LeaseholdFleet>,
    namespace_of: Vec<usize>,
    namespaces: usize,
    slots: Vec<Slot>,
    /// What a retired executor's "renewal" answers, so its [`Cadence`] sleeps a third of it.
    retired_ttl_ms: u64,
    /// Renewals slower than this are kept with when they were sent.
    slow: Duration,
    windows: Mutex<Windows>,
}

impl Recorded {
    fn new(
        fleet: Arc<LeaseholdFleet>,
        namespaces: usize,
        executors: usize,
        lease: Duration,
        slow: Duration,
    ) -> Self {
        let size = fleet.size();
        Self {
            fleet,
            namespace_of: (0..size).map(|i| i / executors.max(1)).collect(),
            namespaces,
            slots: (0..size).map(|_| Slot::default()).collect(),
            retired_ttl_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            slow,
            windows: Mutex::new(Windows::default()),
        }
    }

    fn windows(&self) -> std::sync::MutexGuard<'_, Windows> {
        const _: () = assert!(MAX_WINDOWS <= WindowSet::BITS as usize);
        self.windows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a window; renewals from now on are recorded in it until [`Recorded::close`].
    fn open(&self) -> Result<usize> {
        let mut windows = self.windows();
        if windows.all.len() >= MAX_WINDOWS {
            bail!("B12: more than {MAX_WINDOWS} windows");
        }
        windows.all.push(Window {
            open: true,
            opened: Some(Instant::now()),
            by_namespace: (0..self.namespaces).map(|_| Samples::default()).collect(),
            ..Window::default()
        });
        Ok(windows.all.len() - 1)
    }

    /// Closes window `id` and, once every renewal that started in it is answered (at most
    /// [`STRAGGLERS_BOUND`]), returns its samples by namespace and how many it did not keep.
    async fn close(&self, id: usize) -> Result<Closed> {
        if let Some(window) = self.windows().all.get_mut(id) {
            window.open = false;
        }
        let deadline = Instant::now() + STRAGGLERS_BOUND;
        loop {
            {
                let mut windows = self.windows();
                let window = windows.all.get_mut(id).context("B12: no such window")?;
                if window.in_flight == 0 {
                    return Ok(Closed {
                        by_namespace: std::mem::take(&mut window.by_namespace),
                        slow: std::mem::take(&mut window.slow),
                        dropped: window.dropped,
                    });
                }
                if Instant::now() > deadline {
                    bail!(
                        "B12: {} renewals of the window still unanswered after {STRAGGLERS_BOUND:?}",
                        window.in_flight
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes executor `index` out of the renewal schedule, waiting for a renewal of it on the way
    /// to be answered, so that nothing renews it after its deregistration.
    async fn retire(&self, index: usize) -> Result<()> {
        let slot = self.slots.get(index).context("B12: no such executor")?;
        slot.retired.store(true, AtomicOrdering::SeqCst);
        let deadline = Instant::now() + STRAGGLERS_BOUND;
        while slot.busy.load(AtomicOrdering::SeqCst) {
            if Instant::now() > deadline {
                bail!("B12: executor {index}'s renewal unanswered after {STRAGGLERS_BOUND:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// The open windows, each counting one more renewal in flight.
    fn start_renewal(&self) -> WindowSet {
        let mut windows = self.windows();
        let mut set = 0;
        for (id, window) in windows.all.iter_mut().enumerate() {
            if window.open {
                window.in_flight += 1;
                set |= 1 << id;
            }
        }
        set
    }

    /// Records a renewal of `namespace` sent at `sent` in every window of `set`.
    fn finish_renewal(
        &self,
        set: WindowSet,
        namespace: usize,
        sent: Instant,
        result: Result<Duration, String>,
    ) {
        let mut windows = self.windows();
        for (id, window) in windows.all.iter_mut().enumerate() {
            if set & (1 << id) == 0 {
                continue;
            }
            window.in_flight = window.in_flight.saturating_sub(1);
            if window.kept >= MAX_WINDOW_SAMPLES {
                window.dropped += 1;
                continue;
            }
            if let Some(samples) = window.by_namespace.get_mut(namespace) {
                samples.record(result.clone());
                window.kept += 1;
            }
            if let (Ok(took), Some(opened)) = (&result, window.opened) {
                if *took > self.slow && window.slow.len() < MAX_SLOW_KEPT {
                    window.slow.push(Slow {
                        namespace,
                        at: sent.saturating_duration_since(opened),
                        took: *took,
                    });
                }
            }
        }
    }
}

/// Counts a renewal of the windows `set` as answered (with a failure) if it is dropped
/// unanswered.
struct InWindows<'a> {
    recorded: &'a Recorded,
    set: WindowSet,
    namespace: usize,
    sent: Instant,
    done: bool,
}

impl Drop for InWindows<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.recorded.finish_renewal(
                self.set,
                self.namespace,
                self.sent,
                Err("cancelled".to_owned()),
            );
        }
    }
}

impl Renewer for Recorded {
    fn size(&self) -> usize {
        self.fleet.size()
    }

    async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
        let slot = self
            .slots
            .get(index)
            .ok_or_else(|| RenewFailure::Other(format!("no executor {index}")))?;
        // Busy before reading `retired`, as `retire` sets `retired` before reading busy: one of
        // the two sees the other's write.
        slot.busy.store(true, AtomicOrdering::SeqCst);
        let _busy = Busy(&slot.busy);
        if slot.retired.load(AtomicOrdering::SeqCst) {
            return Ok(self.retired_ttl_ms);
        }
        let namespace = self.namespace_of[index];
        let mut windows = InWindows {
            recorded: self,
            set: self.start_renewal(),
            namespace,
            sent: Instant::now(),
            done: false,
        };
        let sent = windows.sent;
        let result = self.fleet.renew(index).await;
        if windows.set != 0 {
            self.finish_renewal(
                windows.set,
                namespace,
                sent,
                result
                    .as_ref()
                    .map(|_| sent.elapsed())
                    .map_err(ToString::to_string),
            );
        }
        windows.done = true;
        result
    }
}

/// A window's renewals summed over namespaces.
#[derive(Debug, Clone, Default, PartialEq)]
struct Figures {
    renewals: u64,
    errors: u64,
    first_error: Option<String>,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// The namespace with the highest p99, with that p99 and its renewals.
    worst: Option<(usize, f64, u64)>,
    /// Renewals slower than the bound.
    over_bound: u64,
    /// Namespaces whose p99 is above the bound.
    namespaces_over: usize,
    /// The first slow renewals, with when they were sent.
    slow: Vec<Slow>,
}

/// The renewals of every namespace of `closed` but `skip`, together and the worst namespace's
/// (by p99, nearest rank; the lower index among equals), against `bound_ms`.
fn figures(closed: &Closed, skip: Option<usize>, bound_ms: f64) -> Figures {
    let mut all = Samples::default();
    let mut figures = Figures {
        slow: closed
            .slow
            .iter()
            .filter(|slow| Some(slow.namespace) != skip)
            .copied()
            .collect(),
        ..Figures::default()
    };
    let bound_us = bound_ms * 1000.0;
    for (namespace, samples) in closed.by_namespace.iter().enumerate() {
        if Some(namespace) == skip {
            continue;
        }
        all.latencies_us.extend_from_slice(&samples.latencies_us);
        all.errors += samples.errors;
        if all.first_error.is_none() {
            all.first_error.clone_from(&samples.first_error);
        }
        if samples.ok() == 0 {
            continue;
        }
        let p99 = samples.clone().quantile_ms(0.99);
        figures.over_bound += samples
            .latencies_us
            .iter()
            .filter(|&&us| us as f64 > bound_us)
            .count() as u64;
        if p99 > bound_ms {
            figures.namespaces_over += 1;
        }
        if figures.worst.is_none_or(|(_, worst, _)| p99 > worst) {
            figures.worst = Some((namespace, p99, samples.ok()));
        }
    }
    figures.renewals = all.ok();
    figures.errors = all.errors;
    figures.p50_ms = all.quantile_ms(0.50);
    figures.p99_ms = all.quantile_ms(0.99);
    figures.max_ms = all.quantile_ms(1.0);
    figures.first_error = all.first_error;
    figures
}

// ---------------------------------------------------------------------------------------------
// Replan probes

/// Deregisters `victim` (after taking it out of the renewal schedule) and times from the
/// deregistration's reply until the leader's gauges show every shard of its namespace owned
/// again, with `executors_left` executors. Read every [`PROBE_POLL`]; the figure is taken at the
/// reply of the first read that shows it, so it is high by at most a poll and a read.
async fn replan_probe(
    cluster: &ManagerCluster,
    leader: u64,
    recorded: &Recorded,
    victim: Victim,
    executors_left: u64,
    bound: Duration,
) -> Result<Duration> {
    let name = namespace_name(victim.namespace);
    let url = cluster.url(leader)?;
    recorded.retire(victim.index).await?;
    recorded
        .fleet
        .deregister(victim.index)
        .await
        .with_context(|| format!("B12: deregistering an executor of {name}"))?;
    let replied = Instant::now();
    let deadline = replied + bound;
    let mut last = String::from("never read");
    while Instant::now() < deadline {
        match space_gauges(cluster, &url).await {
            Ok(gauges) => {
                let have = gauges.get(&name).copied().unwrap_or_default();
                if have.executors == executors_left && have.unowned == 0 {
                    return Ok(replied.elapsed());
                }
                last = format!(
                    "{} executors, {} shards unowned",
                    have.executors, have.unowned
                );
            }
            Err(error) => last = error,
        }
        tokio::time::sleep(PROBE_POLL).await;
    }
    bail!("B12: {name}'s shards not all owned {bound:?} after a deregistration ({last})")
}

/// One probe's figure, with when it started relative to the storm (`None` before it).
#[derive(Debug, Clone)]
struct Probe {
    namespace: usize,
    /// Deregistration sent, from the storm's start.
    at: Option<Duration>,
    took: Duration,
    /// `ns-000` had not settled yet when it ended.
    in_storm: bool,
}

/// Probes `victims` one after another, [`PROBE_GAP`] apart; during the storm (`storm_start`
/// given) stops once `storm_settled` is set, after at least one probe. `left` counts each
/// namespace's executors.
#[allow(clippy::too_many_arguments)]
async fn probe_all(
    cluster: &ManagerCluster,
    leader: u64,
    recorded: &Recorded,
    victims: &[Victim],
    left: &Mutex<Vec<u64>>,
    bound: Duration,
    storm_start: Option<Instant>,
    storm_settled: &AtomicBool,
) -> Result<Vec<Probe>> {
    let mut probes = Vec::new();
    for &victim in victims {
        if storm_start.is_some() && !probes.is_empty() && storm_settled.load(AtomicOrdering::SeqCst)
        {
            break;
        }
        let executors_left = {
            let mut left = left.lock().unwrap_or_else(PoisonError::into_inner);
            left[victim.namespace] -= 1;
            left[victim.namespace]
        };
        let at = storm_start.map(|start| start.elapsed());
        let took = replan_probe(cluster, leader, recorded, victim, executors_left, bound).await?;
        let in_storm = storm_start.is_some() && !storm_settled.load(AtomicOrdering::SeqCst);
        eprintln!(
            "  B12: {} → every shard owned {:.1} ms after the deregistration{}",
            namespace_name(victim.namespace),
            took.as_secs_f64() * 1000.0,
            match at {
                Some(at) => format!(
                    " (sent {:.2} s into the storm{})",
                    at.as_secs_f64(),
                    if in_storm {
                        ""
                    } else {
                        ", ended after ns-000 settled"
                    }
                ),
                None => " (before the storm)".to_owned(),
            }
        );
        probes.push(Probe {
            namespace: victim.namespace,
            at,
            took,
            in_storm,
        });
        if storm_start.is_some() && !in_storm {
            break;
        }
        tokio::time::sleep(PROBE_GAP).await;
    }
    Ok(probes)
}

// ---------------------------------------------------------------------------------------------
// The run

/// The commit of the tree the load generator was built in, as the run starts, with the top
/// directories holding uncommitted changes (the binaries were built from the tree, which may have
/// changed since).
fn commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "?".to_owned();
    };
    let status = git(&["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    commit_label(head.trim(), &status)
}

/// `head`, and the top directories `git status --porcelain` names, if any.
fn commit_label(head: &str, porcelain: &str) -> String {
    let dirs: std::collections::BTreeSet<&str> = porcelain
        .lines()
        .filter_map(|line| line.get(3..))
        .map(|path| path.rsplit(" -> ").next().unwrap_or(path))
        .map(|path| path.split('/').next().unwrap_or(path))
        .filter(|dir| !dir.is_empty())
        .collect();
    if dirs.is_empty() {
        head.to_owned()
    } else {
        format!(
            "{head} (uncommitted: {})",
            dirs.into_iter().collect::<Vec<_>>().join(", ")
        )
    }
}

/// The admin's client: under TLS, with the admin certificate (namespaces are created by an
/// operator, P18.1).
fn admin_client(cluster: &ManagerCluster, security: &Security) -> Result<Client> {
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

fn fmt_probes(probes: &[Probe]) -> String {
    if probes.is_empty() {
        return "none".to_owned();
    }
    probes
        .iter()
        .map(|p| {
            let took = fmt_ms(p.took.as_secs_f64() * 1000.0);
            match p.at {
                Some(at) if p.in_storm => format!(
                    "{took} ({}, at +{:.1} s)",
                    namespace_name(p.namespace),
                    at.as_secs_f64()
                ),
                Some(at) => format!(
                    "{took} ({}, at +{:.1} s, after the storm settled)",
                    namespace_name(p.namespace),
                    at.as_secs_f64()
                ),
                None => format!("{took} ({})", namespace_name(p.namespace)),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The leader's metrics B12 prints around the storm's renewal burst: how long it took to answer
/// renewals, and how it answered them (PROTOCOL P6.5, P6.8).
const LEADER_RENEWAL_METRICS: &[&str] = &[
    "leasehold_renewal_duration_seconds_bucket",
    "leasehold_renewal_duration_seconds_count",
    "leasehold_renewals_from_memory_total",
    "leasehold_renewals_through_log_total",
    "leasehold_renewal_batch_size_count",
    "leasehold_confirmation_rounds_total",
];

/// How much every series of the metrics `names` grew from the page `before` to the page `after`
/// (series absent before count from 0); those that did not grow are left out. In `after`'s order.
fn metric_deltas(before: &str, after: &str, names: &[&str]) -> Vec<(String, f64)> {
    let series = |page: &str| -> Vec<(String, f64)> {
        page.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(series, _)| {
                let name = series.split_once('{').map_or(*series, |(name, _)| name);
                names.contains(&name)
            })
            .filter_map(|(series, value)| Some((series.to_owned(), value.parse::<f64>().ok()?)))
            .collect()
    };
    let before: BTreeMap<String, f64> = series(before).into_iter().collect();
    series(after)
        .into_iter()
        .map(|(series, value)| {
            let delta = value - before.get(&series).copied().unwrap_or(0.0);
            (series, delta)
        })
        .filter(|&(_, delta)| delta > 0.0)
        .collect()
}

/// The slow renewals of a window, the first few with when they were sent.
fn fmt_slow(figures: &Figures) -> String {
    const SHOWN: usize = 4;
    if figures.over_bound == 0 {
        return "none".to_owned();
    }
    let shown: Vec<String> = figures
        .slow
        .iter()
        .take(SHOWN)
        .map(|slow| {
            format!(
                "{} +{:.1} s {}",
                namespace_name(slow.namespace),
                slow.at.as_secs_f64(),
                fmt_ms(slow.took.as_secs_f64() * 1000.0)
            )
        })
        .collect();
    let more = figures.over_bound.saturating_sub(shown.len() as u64);
    format!(
        "{}: {}{}",
        figures.over_bound,
        shown.join("; "),
        if more > 0 {
            format!("; {more} more")
        } else {
            String::new()
        }
    )
}

fn longest(probes: &[Probe], in_storm_only: bool) -> Option<Duration> {
    probes
        .iter()
        .filter(|p| !in_storm_only || p.in_storm)
        .map(|p| p.took)
        .max()
}

pub async fn b12(env: &Env, args: &B12) -> Result<Vec<Table>> {
    args.check()?;
    let commit = commit();
    let load_before = load_average();
    let security = &env.security;
    let mut cluster =
        leasehold_cluster(env, security, "b12", default_flags(DEFAULT_SPACE_SHARDS)).await?;
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
    let admin = admin_client(&cluster, security)?;
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
            })
            .await
            .with_context(|| format!("B12: creating {}", namespace_name(namespace)))?;
    }
    // The leader steps at least every tick, a third of the shortest lease of any namespace
    // (manager/src/leader/core.rs `tick_ms`), and at once when the membership changed.
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

    // The fleet: executor i in namespace i / executors.
    let total = args.namespaces * args.executors;
    let spec = FleetSpec {
        namespaces: (0..total)
            .map(|i| namespace_name(i / args.executors))
            .collect(),
        ..FleetSpec::plain(total)
    };
    let started = Instant::now();
    let fleet = Arc::new(leasehold_fleet_spec(&cluster, security, spec, executor_client()).await?);
    let registered = started.elapsed();
    let recorded = Arc::new(Recorded::new(
        fleet.clone(),
        args.namespaces,
        args.executors,
        args.lease,
        Duration::from_secs_f64(args.p99_bound_ms / 1000.0),
    ));
    let cadence = Cadence::start(recorded.clone(), args.lease);
    eprintln!(
        "B12: {total} executors registered in {:.1} s; settling",
        registered.as_secs_f64()
    );
    let mut expected: BTreeMap<String, Expected> = (0..args.namespaces)
        .map(|n| {
            (
                namespace_name(n),
                Expected {
                    executors: args.executors as u64,
                    shards: u64::from(args.shards),
                },
            )
        })
        .collect();
    let settled = settle_namespaces(&cluster, leader, &expected, SETTLE_BOUND, "B12").await?;
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

    // 1. Steady.
    let load_steady = load_average();
    let window = recorded.open()?;
    let steady_started = Instant::now();
    tokio::time::sleep(args.duration).await;
    let steady_length = steady_started.elapsed();
    let steady = recorded.close(window).await?;
    let steady_load = format!("{load_steady} → {}", load_average());
    let mut dropped = steady.dropped;
    let steady = figures(&steady, None, args.p99_bound_ms);
    eprintln!("B12: steady: {steady:?}");

    // 2. Replans before the storm.
    let (baseline_victims, storm_victims) =
        probe_victims(args.namespaces, args.executors, args.probes);
    let left = Mutex::new(vec![args.executors as u64; args.namespaces]);
    let probe_bound = tick + PROBE_PATIENCE;
    let never = AtomicBool::new(false);
    let baseline = probe_all(
        &cluster,
        leader,
        &recorded,
        &baseline_victims,
        &left,
        probe_bound,
        None,
        &never,
    )
    .await?;

    // 3. The storm.
    let load_storm = load_average();
    let storm_name = namespace_name(STORM_NAMESPACE);
    expected.retain(|name, _| *name == storm_name);
    if let Some(storm) = expected.get_mut(&storm_name) {
        storm.executors += args.storm as u64;
    }
    let storm_settled = AtomicBool::new(false);
    let window = recorded.open()?;
    let round_window = recorded.open()?;
    let storm_started = Instant::now();
    eprintln!("B12: the storm: {} executors into {storm_name}", args.storm);
    let register = async {
        let fleet = Arc::new(
            leasehold_fleet_spec(
                &cluster,
                security,
                FleetSpec::in_namespace(args.storm, &storm_name),
                executor_client(),
            )
            .await?,
        );
        let registered = storm_started.elapsed();
        eprintln!(
            "  B12: the storm's {} executors registered after {:.2} s",
            args.storm,
            registered.as_secs_f64()
        );
        // Its own renewals are recorded too (all as one namespace), from now to the round's end.
        let recorded = Arc::new(Recorded::new(
            fleet,
            1,
            args.storm,
            args.lease,
            Duration::from_secs_f64(args.p99_bound_ms / 1000.0),
        ));
        let window = recorded.open()?;
        let cadence = if args.storm_spread {
            Cadence::start(recorded.clone(), args.lease)
        } else {
            Cadence::start_together(recorded.clone(), args.lease)
        };
        Ok::<_, anyhow::Error>((recorded, window, cadence, registered))
    };
    let settle = async {
        let settled =
            settle_namespaces(&cluster, leader, &expected, SETTLE_BOUND, "B12 storm").await;
        storm_settled.store(true, AtomicOrdering::SeqCst);
        if let Ok(settled) = &settled {
            eprintln!(
                "  B12: {storm_name} settled {:.2} s after the storm began",
                settled.as_secs_f64()
            );
        }
        settled
    };
    let probes = async {
        tokio::time::sleep(STORM_PROBE_DELAY).await;
        probe_all(
            &cluster,
            leader,
            &recorded,
            &storm_victims,
            &left,
            probe_bound,
            Some(storm_started),
            &storm_settled,
        )
        .await
    };
    let (registered_storm, storm_settle, storm_probes) = tokio::join!(register, settle, probes);
    let (storm_recorded, storm_window, storm_cadence, storm_registered) = registered_storm?;
    let storm_settle = storm_settle?;
    let storm_probes = storm_probes?;
    let storm_length = storm_started.elapsed();
    let storm = recorded.close(window).await?;
    let storm_load = format!("{load_storm} → {}", load_average());
    dropped += storm.dropped;
    let storm = figures(&storm, Some(STORM_NAMESPACE), args.p99_bound_ms);
    eprintln!("B12: storm: {storm:?}");
    let round_ends = storm_started + args.lease / 3 + ROUND_SLACK;
    eprintln!(
        "B12: the storm's renewal round, until {:.1} s after its start",
        round_ends.duration_since(storm_started).as_secs_f64()
    );
    // The leader's own account of the renewals around the storm's renewal burst (its executors
    // renew first a third into their lease): from a second before it to the round's end.
    let leader_url = cluster.url(leader)?;
    let burst_before = storm_started + (args.lease / 3).saturating_sub(Duration::from_secs(1));
    tokio::time::sleep_until(burst_before).await;
    let page_before = metrics_page(&cluster, &leader_url)
        .await
        .unwrap_or_default();
    tokio::time::sleep_until(round_ends).await;
    let round_length = storm_started.elapsed();
    let page_after = metrics_page(&cluster, &leader_url)
        .await
        .unwrap_or_default();
    eprintln!(
        "B12: the leader's renewal metrics from {:.1} s into the storm to the round's end:",
        burst_before.duration_since(storm_started).as_secs_f64()
    );
    for (series, delta) in metric_deltas(&page_before, &page_after, LEADER_RENEWAL_METRICS) {
        eprintln!("  {series} +{delta}");
    }
    let round = recorded.close(round_window).await?;
    let round_load = format!("{load_storm} → {}", load_average());
    dropped += round.dropped;
    let round = figures(&round, Some(STORM_NAMESPACE), args.p99_bound_ms);
    eprintln!("B12: storm round: {round:?}");

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
    let own = storm_recorded.close(storm_window).await?;
    dropped += own.dropped;
    let own = figures(&own, None, args.p99_bound_ms);
    let storm_renewals = format!(
        "{} ({}); p50 {}, p99 {}, max {}",
        count(&storm_counters.ok),
        count(&storm_counters.errors),
        fmt_ms(own.p50_ms),
        fmt_ms(own.p99_ms),
        fmt_ms(own.max_ms)
    );
    if dropped > 0 {
        eprintln!("B12: {dropped} renewals past {MAX_WINDOW_SAMPLES} a window were not kept");
    }

    let size = format!("{} × {} × {}", args.namespaces, args.shards, args.executors);
    let within = |figures: &Figures| {
        let worst = figures.worst.map_or(0.0, |(_, p99, _)| p99);
        if figures.errors == 0 && figures.p99_ms <= args.p99_bound_ms && worst <= args.p99_bound_ms
        {
            "yes".to_owned()
        } else {
            "**no**".to_owned()
        }
    };
    let bound_header = format!("p99 and worst within {}", fmt_ms(args.p99_bound_ms));
    let mut renewals = Table::new(&[
        "B12",
        "namespaces × shards × executors",
        "window",
        "renewals (namespaces)",
        "errors",
        "p50",
        "p99",
        "max",
        "worst namespace: p99 (renewals)",
        "namespaces with p99 over the bound",
        "renewals over the bound: namespace, sent at (from the window's start), took",
        &bound_header,
        "commit (tree at the run's start)",
        "load avg",
    ]);
    for (label, length, figures, namespaces, load) in [
        (
            "steady".to_owned(),
            steady_length,
            &steady,
            args.namespaces,
            &steady_load,
        ),
        (
            format!(
                "storm: {} executors into {storm_name}, until it settled",
                args.storm
            ),
            storm_length,
            &storm,
            args.namespaces - 1,
            &storm_load,
        ),
        (
            "the storm's renewal round (a third of the lease and 5 s)".to_owned(),
            round_length,
            &round,
            args.namespaces - 1,
            &round_load,
        ),
    ] {
        renewals.row(vec![
            "B12".into(),
            size.clone(),
            format!("{label}, {:.1} s", length.as_secs_f64()),
            format!("{} ({namespaces})", figures.renewals),
            match &figures.first_error {
                Some(error) => format!("{} ({error})", figures.errors),
                None => figures.errors.to_string(),
            },
            fmt_ms(figures.p50_ms),
            fmt_ms(figures.p99_ms),
            fmt_ms(figures.max_ms),
            match figures.worst {
                Some((namespace, p99, n)) => {
                    format!("{}: {} ({n})", namespace_name(namespace), fmt_ms(p99))
                }
                None => "-".to_owned(),
            },
            figures.namespaces_over.to_string(),
            fmt_slow(figures),
            within(figures),
            commit.clone(),
            load.clone(),
        ]);
    }
    let mut replans = Table::new(&[
        "B12",
        "storm",
        "registered after",
        "storm namespace settled after",
        "storm executors' renewals (failed); in the round",
        "deregistration → every shard owned: before the storm",
        "during the storm",
        "plan interval (tick)",
        "delayed by more than one interval",
        "commit (tree at the run's start)",
        "load avg",
    ]);
    let delayed = match (longest(&baseline, false), longest(&storm_probes, true)) {
        (_, None) => "no probe ended before the storm settled".to_owned(),
        (None, Some(_)) => "no baseline".to_owned(),
        (Some(before), Some(during)) => {
            let by = during.saturating_sub(before);
            format!(
                "{} (longest during − longest before: {})",
                if by > tick { "**yes**" } else { "no" },
                fmt_ms(by.as_secs_f64() * 1000.0)
            )
        }
    };
    replans.row(vec![
        "B12".into(),
        format!(
            "{} executors into {storm_name}, renewing {}",
            args.storm,
            if args.storm_spread {
                "spread over a third of the lease"
            } else {
                "together"
            }
        ),
        format!("{:.2} s", storm_registered.as_secs_f64()),
        format!("{:.2} s", storm_settle.as_secs_f64()),
        storm_renewals,
        fmt_probes(&baseline),
        fmt_probes(&storm_probes),
        format!(
            "{} (a third of the shortest lease)",
            humantime::format_duration(tick)
        ),
        delayed,
        commit,
        format!("{load_before} → {}", load_average()),
    ]);
    Ok(vec![renewals, replans])
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
