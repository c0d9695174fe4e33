//! The load a seed puts on its fleet (P15.2-P15.4): shapes, hot sets and lying reporters.

use super::*;

/// The most a report may say of one shard's load: the leader clamps every value to it (P15.1).
/// `leasehold_api::wire::MAX_SHARD_LOAD` once loads are on the wire (the `load-inputs` branch);
/// the simulator carries loads beside the request until then.
pub const MAX_SHARD_LOAD: f64 = 1e12;

/// Most capacity a simulated executor states (P15.1): small weights, so shares by count stay
/// whole numbers of shards often enough for count placement to be exact.
pub const MAX_SIM_CAPACITY: u32 = 4;

/// How the true loads of the shards were drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadShape {
    /// Rank r (shuffled over the shards) carries `100 ÷ r^exponent`: a few hot shards.
    Zipf { exponent: f64 },
    /// Every shard carries between 50 and 150.
    Uniform,
}

/// Capacities and loads (PROTOCOL §15): what each executor states and reports, what the shards
/// really carry, and how the leader is configured to place them.
#[derive(Debug, Clone)]
pub struct LoadScenario {
    /// The capacity each slot's executor states when it registers (1..=[`MAX_SIM_CAPACITY`]).
    pub capacities: Vec<u32>,
    /// The capacity of an executor a probe adds.
    pub joiner_capacity: u32,
    /// Whether each slot's executor reports loads in its renewals (P15.1). Some seeds all
    /// report, some none, some a mix (and then placement goes by count, P15.2).
    pub reports: Vec<bool>,
    /// What each shard really carries at the start (index = shard); a few may carry nothing.
    pub true_loads: Vec<f64>,
    pub shape: LoadShape,
    /// Each report is the true load times a factor drawn from `1 ± noise` (a rate measured over
    /// one renewal interval).
    pub noise: f64,
    /// When the hot set shifts during the chaos (ms): the true loads are re-permuted over the
    /// shards.
    pub shifts: Vec<u64>,
    /// `--balance-tolerance` (P15.2).
    pub tolerance: f64,
    /// `--max-balance-moves` (P15.3); `None`: the default, 1 % of the shards, at least 1.
    pub max_balance_moves_per_minute: Option<usize>,
    /// The slot that lies once a [`Fault::Lie`] fires, and how.
    pub liar: (usize, Lie),
}

impl LoadScenario {
    /// A fleet that states no capacity, reports no loads and carries nothing (the scripts').
    pub fn quiet(slots: usize, shards: u32) -> Self {
        Self {
            capacities: vec![leasehold_manager::lease::DEFAULT_CAPACITY; slots],
            joiner_capacity: leasehold_manager::lease::DEFAULT_CAPACITY,
            reports: vec![false; slots],
            true_loads: vec![0.0; shards as usize],
            shape: LoadShape::Uniform,
            noise: 0.0,
            shifts: Vec::new(),
            tolerance: leasehold_manager::lease::DEFAULT_BALANCE_TOLERANCE,
            max_balance_moves_per_minute: None,
            liar: (0, Lie::Zero),
        }
    }

    /// The churn budget the operator set, or P15.3's default: 1 % of the shards, at least 1.
    pub fn budget_per_minute(&self, shards: u32) -> usize {
        self.max_balance_moves_per_minute
            .unwrap_or_else(|| (shards as usize / 100).max(1))
    }

    /// Draws capacities, reporting, true loads and the placement flags from `rng`.
    pub(super) fn draw(rng: &mut ChaCha8Rng, slots: usize, shards: u32, chaos_ms: u64) -> Self {
        let capacity = |rng: &mut ChaCha8Rng| rng.random_range(1..=MAX_SIM_CAPACITY);
        let capacities = if rng.random_bool(0.3) {
            vec![capacity(rng); slots]
        } else {
            (0..slots).map(|_| capacity(rng)).collect()
        };
        let joiner_capacity = capacity(rng);
        let reports = match rng.random_range(0..10) {
            0..5 => vec![true; slots],
            5..7 => vec![false; slots],
            _ => (0..slots).map(|_| rng.random_bool(0.5)).collect(),
        };
        let (shape, mut true_loads): (LoadShape, Vec<f64>) = if rng.random_bool(0.6) {
            let exponent: f64 = rng.random_range(0.3..=1.5);
            let mut ranks: Vec<u32> = (1..=shards).collect();
            shuffle(rng, &mut ranks);
            let loads = ranks
                .into_iter()
                .map(|rank| 100.0 / f64::from(rank).powf(exponent))
                .collect();
            (LoadShape::Zipf { exponent }, loads)
        } else {
            let loads = (0..shards)
                .map(|_| rng.random_range(50.0..=150.0))
                .collect();
            (LoadShape::Uniform, loads)
        };
        if rng.random_bool(0.4) {
            for _ in 0..rng.random_range(1..=(shards / 10).max(1)) {
                let shard = rng.random_range(0..shards) as usize;
                true_loads[shard] = 0.0;
            }
        }
        let noise = if rng.random_bool(0.3) {
            0.0
        } else {
            rng.random_range(0.0..=0.3)
        };
        let shifts = if rng.random_bool(0.3) {
            let mut shifts: Vec<u64> = (0..rng.random_range(1..=3))
                .map(|_| rng.random_range(0..chaos_ms))
                .collect();
            shifts.sort_unstable();
            shifts
        } else {
            Vec::new()
        };
        let tolerance = if rng.random_bool(0.3) {
            leasehold_manager::lease::DEFAULT_BALANCE_TOLERANCE
        } else {
            rng.random_range(0.05..=0.5)
        };
        let max_balance_moves_per_minute = rng.random_bool(0.7).then(|| rng.random_range(1..=6));
        let lie = [Lie::Huge, Lie::Flapping, Lie::Zero][rng.random_range(0..3)];
        let liar = (rng.random_range(0..slots), lie);
        Self {
            capacities,
            joiner_capacity,
            reports,
            true_loads,
            shape,
            noise,
            shifts,
            tolerance,
            max_balance_moves_per_minute,
            liar,
        }
    }
}
