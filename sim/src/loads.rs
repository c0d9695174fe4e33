//! What the simulated shards really carry and what executors say of it (PROTOCOL P15.1).
//!
//! The world keeps the truth: one load per shard, steady except when the seed shifts the hot
//! set (the loads re-permuted over the shards). An executor's renewal reports, for each shard it
//! claims, the true load times a noise factor, unless its slot does not report loads (`None`, as
//! an executor without `report_loads`), or lies, or loads are off for the whole fleet (the count
//! probes). What a leader makes of the reports is the real `LoadTracker`'s business; the checks
//! judge placement on the truth kept here.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use leasehold_manager::lease::ShardId;

use crate::scenario::{shuffle, Lie, Scenario, MAX_SHARD_LOAD};

/// What one renewal says of loads: `(shard, load)` per claimed shard, or `None` for an executor
/// that does not report; it travels as the request's `RenewRequest::loads`.
pub type Report = Option<Vec<(ShardId, f64)>>;

/// The truth about loads, and each slot's way of reporting it.
#[derive(Debug)]
pub struct LoadModel {
    /// What each shard of each space carries now (by space: 0 `default`, then the namespaces
    /// beside it, P18.1; index = shard).
    true_loads: Vec<Vec<f64>>,
    /// Per slot: the space its executor registers into.
    slot_spaces: Vec<usize>,
    noise: f64,
    /// The noise and the shifts, from a stream of the seed's own, so they do not disturb the
    /// network's draws.
    rng: ChaCha8Rng,
    /// Per slot: whether its executor reports loads.
    reports: Vec<bool>,
    /// Per slot: the capacity its next process states (P15.1).
    capacities: Vec<u32>,
    joiner_capacity: u32,
    /// The lying slot, once its lie started.
    liar: Option<(usize, Lie)>,
    /// The flapping liar's next report is the huge one.
    flap_huge: bool,
    /// Nobody reports: the count probes run with loads off.
    off: bool,
}

impl LoadModel {
    pub fn new(whole: &Scenario) -> Self {
        let scenario = &whole.load;
        let mut rng = ChaCha8Rng::seed_from_u64(whole.seed);
        rng.set_stream(3);
        let true_loads = std::iter::once(scenario.true_loads.clone())
            .chain(whole.namespaces.iter().map(|ns| ns.true_loads.clone()))
            .collect();
        Self {
            true_loads,
            slot_spaces: whole.slot_spaces.clone(),
            noise: scenario.noise,
            rng,
            reports: scenario.reports.clone(),
            capacities: scenario.capacities.clone(),
            joiner_capacity: scenario.joiner_capacity,
            liar: None,
            flap_huge: true,
            off: false,
        }
    }

    /// What each shard of `default` carries now (index = shard).
    pub fn true_loads(&self) -> &[f64] {
        self.true_loads_of(0)
    }

    /// What each shard of space `space` (0: `default`) carries now (index = shard).
    pub fn true_loads_of(&self, space: usize) -> &[f64] {
        self.true_loads.get(space).map_or(&[], Vec::as_slice)
    }

    /// The relative noise of an honest report.
    pub fn noise(&self) -> f64 {
        self.noise
    }

    /// The capacity the next process in `slot` states.
    pub fn capacity(&self, slot: usize) -> u32 {
        self.capacities
            .get(slot)
            .copied()
            .unwrap_or(self.joiner_capacity)
    }

    /// The slot's next process states `capacity`.
    pub fn set_capacity(&mut self, slot: usize, capacity: u32) {
        if let Some(slot_capacity) = self.capacities.get_mut(slot) {
            *slot_capacity = capacity;
        }
    }

    /// A slot added by a probe in space `space`: it states the joiner capacity, and reports
    /// loads when the whole fleet does.
    pub fn add_slot(&mut self, space: usize) {
        while self.slot_spaces.len() < self.capacities.len() {
            self.slot_spaces.push(0);
        }
        self.slot_spaces.push(space);
        self.capacities.push(self.joiner_capacity);
        let fleet_reports = self.reports.iter().all(|reports| *reports);
        self.reports.push(fleet_reports);
    }

    /// The slot's executor lies from now on (one liar per run).
    pub fn start_lying(&mut self, slot: usize, lie: Lie) {
        if self.liar.is_none() {
            self.liar = Some((slot, lie));
        }
    }

    /// The lying slot, if its lie started.
    pub fn liar(&self) -> Option<(usize, Lie)> {
        self.liar
    }

    /// Nobody reports any more (the count probes), or they report again.
    pub fn set_off(&mut self, off: bool) {
        self.off = off;
    }

    /// Whether loads are off for the whole fleet.
    pub fn off(&self) -> bool {
        self.off
    }

    /// Whether every slot's executor reports loads when loads are on (a liar always does).
    pub fn fleet_reports(&self) -> bool {
        (0..self.reports.len()).all(|slot| self.slot_reports(slot))
    }

    /// The hot set shifts: the true loads re-permuted over the shards, in every namespace.
    pub fn shift(&mut self) {
        for loads in &mut self.true_loads {
            shuffle(&mut self.rng, loads);
        }
    }

    /// Whether an honest executor in `slot` reports loads (a liar always reports).
    pub fn reports(&self, slot: usize) -> bool {
        !self.off && self.slot_reports(slot)
    }

    fn slot_reports(&self, slot: usize) -> bool {
        self.reports.get(slot).copied().unwrap_or(false)
            || self.liar.is_some_and(|(liar, _)| liar == slot)
    }

    /// What a renewal from `slot` claiming `claims` reports.
    pub fn report(&mut self, slot: usize, claims: &[ShardId]) -> Report {
        if !self.reports(slot) {
            return None;
        }
        let lie = self
            .liar
            .filter(|(liar, _)| *liar == slot)
            .map(|(_, lie)| lie);
        let huge = self.flap_huge;
        if lie == Some(Lie::Flapping) {
            self.flap_huge = !huge;
        }
        let loads = claims
            .iter()
            .map(|&shard| {
                let load = match lie {
                    Some(Lie::Huge) => MAX_SHARD_LOAD * self.rng.random_range(0.9..=1.0),
                    Some(Lie::Flapping) if huge => {
                        MAX_SHARD_LOAD * self.rng.random_range(0.9..=1.0)
                    }
                    Some(Lie::Flapping | Lie::Zero) => 0.0,
                    None => {
                        let space = self.slot_spaces.get(slot).copied().unwrap_or(0);
                        let truth = self
                            .true_loads
                            .get(space)
                            .and_then(|loads| loads.get(shard as usize))
                            .copied()
                            .unwrap_or(0.0);
                        let factor = if self.noise > 0.0 {
                            self.rng.random_range(1.0 - self.noise..=1.0 + self.noise)
                        } else {
                            1.0
                        };
                        truth * factor
                    }
                };
                (shard, load)
            })
            .collect();
        Some(loads)
    }
}
