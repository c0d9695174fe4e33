//! B7 (§15): placement by load against placement by count and the offline optimum's lower
//! bound, on one skewed, shifting load.
//!
//! Two three-manager Leasehold clusters run at once, on the same binary: one with the defaults
//! (placement by load, PROTOCOL §15) and one with `--load-placement=false` (placement by count,
//! in proportion to capacity). Each has its own simulated fleet of the same shape (some
//! executors of a larger capacity), renewing at the protocol's cadence and keeping its sets by
//! the leader's pushes. Both fleets report the same truth ([`HotSets`]): per-shard request rates
//! by Zipf rank, the ranks permuted by the seed and re-permuted at every shift, times a small
//! multiplicative measurement noise drawn from the seed.
//!
//! Every sample reads each executor's set from its own fleet (what it holds, so what it would
//! serve) and computes its *true* utilisation (the true rates of its shards ÷ its capacity),
//! so the figures judge the placement, not the leader's estimate of it. The lower bound of any
//! placement's highest utilisation is the larger of the hottest shard on the largest executor
//! and the mean: `max(hottest ÷ largest capacity, total ÷ total capacity)`.

mod tables;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use leasehold_api::wire::{ShardEpoch, ShardLoad};
use leasehold_harness::{poll_every, ManagerCluster, ManagerFlags};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use self::tables::*;
use crate::drive::Cadence;
use crate::fleet::{FleetSpec, LeaseholdFleet, LoadReports};
use crate::procs::{default_flags, load_average};
use crate::report::Table;
use crate::scenarios::{
    executor_client, executors_view, leasehold_cluster, metrics_page, Env, FORM_BOUND, SETTLE_BOUND,
};

/// Requests per second over all shards. The unit is arbitrary (placement balances ratios); a
/// round total makes the per-shard figures in the CSV readable.
const TOTAL_RATE: f64 = 100_000.0;

/// The recovery criterion's bound on max ÷ mean (the "back under 1.2").
const RECOVERED_BELOW: f64 = 1.2;

/// When the lower bound is above [`RECOVERED_BELOW`], recovered means within this fraction of it.
const RECOVERED_NEAR_BOUND: f64 = 0.05;

/// What a B7 run does.
#[derive(Debug, Clone)]
pub struct B7 {
    pub duration: Duration,
    pub shift_every: Duration,
    pub executors: usize,
    /// How many of the executors have `big_capacity`; the rest have capacity 1.
    pub big: usize,
    pub big_capacity: u32,
    pub shards: u32,
    /// The Zipf exponent `s`: the shard of rank `k` gets a rate proportional to `k^-s`.
    pub zipf: f64,
    pub seed: u64,
    pub sample_every: Duration,
    /// One time-series row per this much.
    pub row_every: Duration,
    /// The last this-much of each window is its steady state.
    pub steady: Duration,
    /// Half-width of the multiplicative noise on every reported load (0.05: ×0.95..×1.05).
    pub noise: f64,
    /// The managers' lease (renewals every third of it, and the leader plans every third).
    pub lease: Duration,
}

impl B7 {
    /// Capacity of each executor: the big ones first.
    fn capacities(&self) -> Vec<u32> {
        (0..self.executors)
            .map(|index| {
                if index < self.big {
                    self.big_capacity
                } else {
                    1
                }
            })
            .collect()
    }

    /// The managers' flags: the shipped defaults with this run's lease (every lease `--short`
    /// or the default gives is above the shortest the default Raft timing accepts).
    fn manager_flags(&self, by_load: bool) -> ManagerFlags {
        let mut flags = default_flags(self.shards);
        flags.lease = Some(format!("{}s", self.lease.as_secs()));
        if !by_load {
            flags.extra_args.push("--load-placement=false".into());
        }
        flags
    }
}

// ---------------------------------------------------------------------------------------------
// The truth: rates per shard over time

/// The normalised Zipf weights of ranks `1..=n`: `k^-s ÷ Σ j^-s`.
pub fn zipf_shares(n: usize, s: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
    let sum: f64 = weights.iter().sum();
    weights.into_iter().map(|w| w / sum).collect()
}

/// A multiplicative noise factor in `1 ± amplitude`, a pure function of the seed and what is
/// reported (executor, its renewal number, shard), so both fleets draw the same noise for the
/// same report and a run repeats exactly.
pub fn noise_factor(seed: u64, executor: usize, renewal: u64, shard: u32, amplitude: f64) -> f64 {
    let mut key = splitmix64(seed);
    for part in [executor as u64, renewal, u64::from(shard)] {
        key = splitmix64(key ^ part);
    }
    // The top 53 bits as a fraction in [0, 1).
    let unit = (key >> 11) as f64 / (1u64 << 53) as f64;
    1.0 + amplitude * (2.0 * unit - 1.0)
}

fn splitmix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The true request rate of every shard in every window of the run (a window is the time
/// between two shifts of the hot set), and the clock the fleets read them by.
#[derive(Debug)]
pub struct HotSets {
    shift_every: Duration,
    /// `rates[window][shard]`: the shard of Zipf rank `k` in that window has
    /// `TOTAL_RATE × share(k)`; window `w`'s ranks are the `w`-th shuffle of one seeded stream.
    rates: Vec<Vec<f64>>,
    seed: u64,
    noise: f64,
    /// When the measured run started; until then, and from then for `shift_every`, window 0.
    started: OnceLock<Instant>,
}

impl HotSets {
    pub fn new(shards: u32, zipf: f64, seed: u64, windows: usize, shift_every: Duration) -> Self {
        let n = shards as usize;
        let shares = zipf_shares(n, zipf);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut order: Vec<usize> = (0..n).collect();
        let rates = (0..windows.max(1))
            .map(|_| {
                order.shuffle(&mut rng);
                let mut rates = vec![0.0; n];
                // `order[k]` is the shard of rank k + 1.
                for (&shard, share) in order.iter().zip(&shares) {
                    rates[shard] = TOTAL_RATE * share;
                }
                rates
            })
            .collect();
        Self {
            shift_every,
            rates,
            seed,
            noise: 0.0,
            started: OnceLock::new(),
        }
    }

    /// Reports carry `1 ± amplitude` times the true rate.
    pub fn with_noise(mut self, amplitude: f64) -> Self {
        self.noise = amplitude;
        self
    }

    /// Starts the run's clock (once; later calls change nothing).
    fn start(&self, at: Instant) {
        let _ = self.started.set(at);
    }

    /// The window `elapsed` into the run falls in.
    pub fn window_after(&self, elapsed: Duration) -> usize {
        let window = elapsed.as_nanos() / self.shift_every.as_nanos().max(1);
        usize::try_from(window)
            .unwrap_or(usize::MAX)
            .min(self.rates.len() - 1)
    }

    fn window_now(&self) -> usize {
        match self.started.get() {
            Some(started) => self.window_after(started.elapsed()),
            None => 0,
        }
    }

    /// True rates per shard in `window`.
    pub fn rates(&self, window: usize) -> &[f64] {
        &self.rates[window.min(self.rates.len() - 1)]
    }

    /// The lower bound of any placement's highest utilisation in `window`, ÷ the mean: the
    /// hottest shard must sit somewhere (at best on the largest executor), and someone is at
    /// least at the mean.
    pub fn lower_bound(&self, window: usize, capacities: &[u32]) -> f64 {
        let rates = self.rates(window);
        let total: f64 = rates.iter().sum();
        let total_capacity: f64 = capacities.iter().map(|&c| f64::from(c)).sum();
        let largest = capacities.iter().copied().max().map_or(1.0, f64::from);
        let hottest = rates.iter().copied().fold(0.0, f64::max);
        let mean = total / total_capacity;
        (hottest / largest).max(mean) / mean
    }
}

impl LoadReports for HotSets {
    /// The true rate of each held shard now, with the report's noise: an executor that measures
    /// its rates without lag (a real one would average over its renewal interval, which delays
    /// a shift by up to one renewal more).
    fn loads(&self, index: usize, renewal: u64, held: &[ShardEpoch]) -> Vec<ShardLoad> {
        let rates = self.rates(self.window_now());
        held.iter()
            .map(|claim| {
                let rate = rates.get(claim.shard as usize).copied().unwrap_or(0.0);
                let noise = noise_factor(self.seed, index, renewal, claim.shard, self.noise);
                ShardLoad {
                    shard: claim.shard,
                    load: rate * noise,
                }
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// What one sample sees

/// Each executor's true utilisation ÷ the mean (total rate ÷ total capacity), in executor order.
/// A shard in the middle of a handoff is held by nobody and counts for nobody.
pub fn relative_utilisations(held: &[Vec<u32>], capacities: &[u32], rates: &[f64]) -> Vec<f64> {
    let total: f64 = rates.iter().sum();
    let total_capacity: f64 = capacities.iter().map(|&c| f64::from(c)).sum();
    let mean = total / total_capacity;
    held.iter()
        .zip(capacities)
        .map(|(shards, &capacity)| {
            let load: f64 = shards
                .iter()
                .map(|&shard| rates.get(shard as usize).copied().unwrap_or(0.0))
                .sum();
            load / f64::from(capacity) / mean
        })
        .collect()
}

/// Who held each shard when last seen held, updated from `held`; returns how many shards are
/// now held by someone other than their last holder. A shard between owners (released, not yet
/// granted) keeps its last holder, so a handoff counts once however many samples it spans.
pub fn count_moves(last_holder: &mut [Option<usize>], held: &[Vec<u32>]) -> usize {
    let mut moves = 0;
    for (executor, shards) in held.iter().enumerate() {
        for &shard in shards {
            let Some(slot) = last_holder.get_mut(shard as usize) else {
                continue;
            };
            if slot.is_some_and(|last| last != executor) {
                moves += 1;
            }
            *slot = Some(executor);
        }
    }
    moves
}

/// `max ÷ mean` a placement has to come back under after a shift, and how the table says it.
pub fn recovery_criterion(lower_bound: f64) -> (f64, String) {
    let near_bound = lower_bound * (1.0 + RECOVERED_NEAR_BOUND);
    if near_bound > RECOVERED_BELOW {
        (
            near_bound,
            format!(
                "≤ {near_bound:.2} (lower bound + {:.0} %)",
                RECOVERED_NEAR_BOUND * 100.0
            ),
        )
    } else {
        (RECOVERED_BELOW, format!("≤ {RECOVERED_BELOW:.2}"))
    }
}

/// One cluster at one sample.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// True utilisation ÷ mean, per executor.
    pub utilisations: Vec<f64>,
    pub max_over_mean: f64,
    /// Shards that changed hands since the last sample, by the fleet's own view.
    pub moves: usize,
    /// `leasehold_shard_moves_by_reason_total` summed over the managers (each counts the
    /// moves it made as leader), cumulative.
    pub reasons: BTreeMap<String, u64>,
    /// The current leader's `leasehold_load_imbalance_ratio`: its own estimate of max ÷ mean
    /// (`None` while no manager says it leads).
    pub leader_imbalance: Option<f64>,
}

/// Both clusters at one instant.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Duration,
    pub window: usize,
    pub lower_bound: f64,
    pub load_average: String,
    /// By load, then by count.
    pub clusters: [Observation; 2],
}

// ---------------------------------------------------------------------------------------------
// The run

const PLACEMENTS: [&str; 2] = ["by load", "by count (--load-placement=false)"];

/// One cluster, its fleet and what the sampler remembers of it.
struct Side {
    cluster: ManagerCluster,
    fleet: Arc<LeaseholdFleet>,
    cadence: Option<Cadence>,
    last_holder: Vec<Option<usize>>,
}

impl Side {
    async fn start(env: &Env, args: &B7, hot: &Arc<HotSets>, by_load: bool) -> Result<Self> {
        let name = if by_load { "b7-by-load" } else { "b7-by-count" };
        let security = &env.security;
        let mut cluster =
            leasehold_cluster(env, security, name, args.manager_flags(by_load)).await?;
        let loads: Arc<dyn LoadReports> = hot.clone();
        let spec = FleetSpec {
            count: args.executors,
            capacities: args.capacities(),
            loads: Some(loads),
            namespaces: Vec::new(),
            record_admission: false,
        };
        let fleet = Arc::new(
            LeaseholdFleet::start(
                cluster.urls(),
                spec,
                executor_client(),
                security.executor_tls(),
            )
            .await?,
        );
        let cadence = Cadence::start(fleet.clone(), args.lease);
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let shards = args.shards as usize;
        let executors = args.executors;
        poll_every(
            &format!("B7 {name}: every shard delivered"),
            SETTLE_BOUND,
            Duration::from_millis(200),
            || async {
                let view = executors_view(&cluster, leader).await?;
                let delivered: usize = view.iter().map(|e| e.shards.len()).sum();
                let (held, _, _) = fleet.held_spread();
                if view.len() == executors && delivered == shards && held == shards {
                    Ok(())
                } else {
                    Err(format!(
                        "{} executors, {delivered} of {shards} delivered, {held} held",
                        view.len()
                    ))
                }
            },
        )
        .await?;
        Ok(Self {
            cluster,
            fleet,
            cadence: Some(cadence),
            last_holder: vec![None; shards],
        })
    }

    async fn observe(&mut self, rates: &[f64], capacities: &[u32]) -> Observation {
        let held = self.fleet.held_sets();
        let utilisations = relative_utilisations(&held, capacities, rates);
        let max_over_mean = utilisations.iter().copied().fold(0.0, f64::max);
        let moves = count_moves(&mut self.last_holder, &held);
        // Every manager's page: each counts the moves it made as leader, so the cluster's moves
        // are the sum (a deposed leader keeps its counts and still answers), and the estimate
        // is the current leader's.
        let mut reasons = BTreeMap::new();
        let mut leader_imbalance = None;
        for (id, url) in self.cluster.urls().into_iter().enumerate() {
            let text = match metrics_page(&self.cluster, &url).await {
                Ok(text) => text,
                Err(error) => {
                    eprintln!("B7: manager {}'s metrics: {error}", id + 1);
                    continue;
                }
            };
            let page = parse_metrics(&text);
            for (reason, count) in page.reasons {
                *reasons.entry(reason).or_insert(0) += count;
            }
            if page.is_leader {
                leader_imbalance = page.imbalance;
            }
        }
        Observation {
            utilisations,
            max_over_mean,
            moves,
            reasons,
            leader_imbalance,
        }
    }

    /// Stops renewing; fails if any executor was evicted on the way (the figures would then
    /// include expiry moves nobody asked for).
    async fn stop(&mut self) -> Result<()> {
        if let Some(cadence) = self.cadence.take() {
            let counters = cadence.stop().await;
            let evicted = counters
                .evictions
                .load(std::sync::atomic::Ordering::Relaxed);
            if evicted > 0 {
                bail!(
                    "B7: {evicted} renewals found their executor evicted (first error: {})",
                    counters.first_error().unwrap_or_default()
                );
            }
        }
        Ok(())
    }
}

/// What B7 reads from one manager's Prometheus text page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsPage {
    /// `leasehold_shard_moves_by_reason_total`: the moves this manager made as leader.
    pub reasons: BTreeMap<String, u64>,
    /// `leasehold_load_imbalance_ratio`, meaningful on the leader only.
    pub imbalance: Option<f64>,
    /// `leasehold_raft_is_leader` is 1.
    pub is_leader: bool,
}

/// The moves-by-reason counters, the imbalance gauge and whether the manager leads, from its
/// Prometheus text page.
pub fn parse_metrics(text: &str) -> MetricsPage {
    let mut page = MetricsPage::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("leasehold_shard_moves_by_reason_total{reason=\"") {
            if let Some((reason, value)) = rest.split_once("\"} ") {
                if let Ok(value) = value.trim().parse::<f64>() {
                    page.reasons.insert(reason.to_owned(), value as u64);
                }
            }
        } else if let Some(value) =
            line.strip_prefix("leasehold_load_imbalance_ratio{namespace=\"default\"} ")
        {
            // B7 places `default`'s shards (P18.1: each namespace has its own series).
            page.imbalance = value.trim().parse().ok();
        } else if let Some(value) = line.strip_prefix("leasehold_raft_is_leader ") {
            page.is_leader = value.trim().parse::<f64>().is_ok_and(|v| v == 1.0);
        }
    }
    page
}

/// Runs B7 and returns its samples (for the tables) after writing them to
/// `<work dir>/b7-samples.csv`.
pub async fn run(env: &Env, args: &B7) -> Result<Vec<Sample>> {
    let windows =
        usize::try_from(args.duration.as_nanos() / args.shift_every.as_nanos().max(1) + 1)?;
    let hot = Arc::new(
        HotSets::new(args.shards, args.zipf, args.seed, windows, args.shift_every)
            .with_noise(args.noise),
    );
    let capacities = args.capacities();
    eprintln!(
        "B7: {} executors ({} of capacity {}), {} shards, Zipf s = {}, seed {}, hottest shard {:.1} % of the load, lower bound of max ÷ mean {:.3}",
        args.executors,
        args.big,
        args.big_capacity,
        args.shards,
        args.zipf,
        args.seed,
        100.0 * hot.rates(0).iter().copied().fold(0.0, f64::max) / TOTAL_RATE,
        hot.lower_bound(0, &capacities)
    );
    let mut sides = [
        Side::start(env, args, &hot, true).await?,
        Side::start(env, args, &hot, false).await?,
    ];
    let started = Instant::now();
    hot.start(started);
    eprintln!("B7: both clusters settled; the run starts");
    let mut samples = Vec::new();
    let mut tick = 0u32;
    loop {
        let due = args.sample_every * tick;
        if due >= args.duration {
            break;
        }
        let now = started.elapsed();
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        let at = started.elapsed();
        let window = hot.window_after(at);
        let rates = hot.rates(window);
        let mut clusters: [Observation; 2] = Default::default();
        for (side, observation) in sides.iter_mut().zip(clusters.iter_mut()) {
            *observation = side.observe(rates, &capacities).await;
        }
        let sample = Sample {
            at,
            window,
            lower_bound: hot.lower_bound(window, &capacities),
            load_average: load_average(),
            clusters,
        };
        eprintln!("{}", progress_line(&sample));
        samples.push(sample);
        tick += 1;
    }
    for side in &mut sides {
        side.stop().await?;
    }
    let csv = env.work_dir.join("b7-samples.csv");
    std::fs::write(&csv, samples_csv(&samples))?;
    eprintln!("B7: samples in {}", csv.display());
    Ok(samples)
}

fn progress_line(sample: &Sample) -> String {
    let [by_load, by_count] = &sample.clusters;
    format!(
        "  B7 {:>6.0} s window {} bound {:.3} | by load {:.3} moves {} leader sees {} | by count {:.3} moves {} | load {}",
        sample.at.as_secs_f64(),
        sample.window,
        sample.lower_bound,
        by_load.max_over_mean,
        by_load.moves,
        by_load
            .leader_imbalance
            .map_or("-".to_owned(), |v| format!("{v:.3}")),
        by_count.max_over_mean,
        by_count.moves,
        sample.load_average
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_shares_sum_to_one_and_the_hottest_of_1024_at_1_1_is_about_18_percent() {
        let shares = zipf_shares(1024, 1.1);
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(shares.windows(2).all(|pair| pair[0] > pair[1]));
        assert!((0.17..0.19).contains(&shares[0]), "{}", shares[0]);
    }

    #[test]
    fn hot_sets_repeat_for_a_seed_and_shift_between_windows() {
        let shift = Duration::from_secs(300);
        let a = HotSets::new(64, 1.1, 7, 3, shift);
        let b = HotSets::new(64, 1.1, 7, 3, shift);
        let other = HotSets::new(64, 1.1, 8, 3, shift);
        assert_eq!(a.rates(1), b.rates(1));
        assert_ne!(a.rates(0), a.rates(1), "the hot set shifts");
        assert_ne!(a.rates(0), other.rates(0), "another seed, another hot set");
        for window in 0..3 {
            let total: f64 = a.rates(window).iter().sum();
            assert!((total - TOTAL_RATE).abs() < 1e-6);
            // Every window is the same Zipf shares, permuted.
            let mut sorted = a.rates(window).to_vec();
            sorted.sort_by(|x, y| y.total_cmp(x));
            let mut first = a.rates(0).to_vec();
            first.sort_by(|x, y| y.total_cmp(x));
            assert_eq!(sorted, first);
        }
        assert_eq!(a.window_after(Duration::from_secs(299)), 0);
        assert_eq!(a.window_after(shift), 1);
        assert_eq!(
            a.window_after(Duration::from_secs(10_000)),
            2,
            "the last one lasts"
        );
    }

    #[test]
    fn the_lower_bound_is_the_hottest_shard_on_the_largest_executor_or_the_mean() {
        // 16 executors, four of capacity 2: total capacity 20.
        let capacities: Vec<u32> = (0..16).map(|i| if i < 4 { 2 } else { 1 }).collect();
        let skewed = HotSets::new(1024, 1.1, 1, 1, Duration::from_secs(300));
        let hottest = zipf_shares(1024, 1.1)[0];
        let expected = (hottest / 2.0) / (1.0 / 20.0);
        assert!((skewed.lower_bound(0, &capacities) - expected).abs() < 1e-9);
        assert!(expected > 1.7, "{expected}");
        // At s = 0.8 the hottest shard is about 6 % of the load: half of it is under the mean.
        let mild = HotSets::new(1024, 0.8, 1, 1, Duration::from_secs(300));
        assert_eq!(mild.lower_bound(0, &capacities), 1.0);
    }

    #[test]
    fn noise_stays_within_its_amplitude_and_repeats() {
        let factors: Vec<f64> = (0..1000)
            .map(|renewal| noise_factor(3, 5, renewal, 17, 0.05))
            .collect();
        assert!(factors.iter().all(|f| (0.95..=1.05).contains(f)));
        let mean = factors.iter().sum::<f64>() / factors.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        assert_eq!(noise_factor(3, 5, 9, 17, 0.05), factors[9]);
        assert_ne!(noise_factor(4, 5, 9, 17, 0.05), factors[9]);
        assert_eq!(noise_factor(3, 5, 9, 17, 0.0), 1.0);
    }

    #[test]
    fn utilisation_is_relative_to_total_over_total_capacity() {
        let rates = [6.0, 2.0, 1.0, 1.0];
        // Capacities 2 and 1 and 1: mean 10 ÷ 4 = 2.5.
        let held = vec![vec![0], vec![1, 2], vec![]];
        let relative = relative_utilisations(&held, &[2, 1, 1], &rates);
        assert_eq!(relative, vec![3.0 / 2.5, 3.0 / 2.5, 0.0]);
    }

    #[test]
    fn a_handoff_counts_as_one_move_whatever_the_samples_see_between() {
        let mut last = vec![None; 3];
        assert_eq!(count_moves(&mut last, &[vec![0, 1], vec![2]]), 0);
        // Shard 1 released by 0, not yet granted to 1.
        assert_eq!(count_moves(&mut last, &[vec![0], vec![2]]), 0);
        assert_eq!(count_moves(&mut last, &[vec![0], vec![1, 2]]), 1);
        assert_eq!(count_moves(&mut last, &[vec![0], vec![1, 2]]), 0);
    }

    #[test]
    fn recovery_goes_by_the_bound_when_the_bound_is_above_1_2() {
        assert_eq!(recovery_criterion(1.0).0, 1.2);
        assert_eq!(recovery_criterion(1.1).0, 1.2);
        let (threshold, said) = recovery_criterion(1.8);
        assert!((threshold - 1.89).abs() < 1e-9);
        assert!(said.contains("lower bound"), "{said}");
    }

    #[test]
    fn metrics_give_reasons_and_the_imbalance() {
        let text = "# TYPE leasehold_shard_moves_by_reason_total counter\n\
            leasehold_shard_moves_by_reason_total{reason=\"balance\"} 12\n\
            leasehold_shard_moves_by_reason_total{reason=\"join\"} 3\n\
            leasehold_load_imbalance_ratio{namespace=\"default\"} 1.25\n\
            leasehold_load_imbalance_ratio{namespace=\"kv\"} 3\n\
            leasehold_load_imbalance_ratio_other 9\n\
            leasehold_raft_is_leader 1\n";
        let page = parse_metrics(text);
        assert_eq!(page.reasons.get("balance"), Some(&12));
        assert_eq!(page.reasons.get("join"), Some(&3));
        assert_eq!(page.imbalance, Some(1.25));
        assert!(page.is_leader);
        let follower = parse_metrics(
            "leasehold_raft_is_leader 0\nleasehold_load_imbalance_ratio{namespace=\"default\"} 2\n",
        );
        assert!(!follower.is_leader);
        assert!(follower.reasons.is_empty());
    }

    fn sample(at_s: u64, by_load: f64, moves: usize) -> Sample {
        Sample {
            at: Duration::from_secs(at_s),
            window: 0,
            lower_bound: 1.0,
            load_average: "0.5".into(),
            clusters: [
                Observation {
                    max_over_mean: by_load,
                    moves,
                    ..Observation::default()
                },
                Observation {
                    max_over_mean: 3.0,
                    ..Observation::default()
                },
            ],
        }
    }

    #[test]
    fn recovery_is_timed_from_the_window_start_to_the_first_sample_under_the_criterion() {
        let samples = vec![
            sample(300, 2.0, 5),
            sample(310, 1.3, 4),
            sample(320, 1.19, 1),
            sample(330, 1.25, 0),
        ];
        let window = (Duration::from_secs(300), Duration::from_secs(600));
        assert_eq!(recovery(&samples, 0, window), Some(Duration::from_secs(20)));
        assert_eq!(recovery(&samples, 1, window), None);
    }
}
