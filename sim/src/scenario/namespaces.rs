//! Namespaces a seed draws beside `default` (P18.1), and the faults they may take.

use super::*;

/// The fault kinds a namespace's slots draw (those that act on one executor, and a lease
/// change, which becomes the namespace's own).
pub(super) const NAMESPACE_FAULT_KINDS: [usize; 9] = [0, 1, 2, 3, 4, 8, 9, 11, 12];

/// What drawing the namespaces adds to: the slots, their clocks, capacities and reports.
pub(super) struct NamespaceSlots<'a> {
    pub(super) slot_spaces: &'a mut Vec<usize>,
    pub(super) executor_rate_ppm: &'a mut Vec<i64>,
    pub(super) load: &'a mut LoadScenario,
}

/// Draws the namespaces beside `default` (P18.1): two seeds in five have one or two, each with
/// 4 to [`MAX_NAMESPACE_SHARDS`] shards, a lease of its own, 1 to [`MAX_NAMESPACE_EXECUTORS`]
/// executors (slots after `default`'s, with their clocks and capacities; they report loads when
/// `default`'s whole fleet does), half of those of two or more spread over zones, and loads of
/// their own.
pub(super) fn draw_namespaces(
    rng: &mut ChaCha8Rng,
    slots: &mut NamespaceSlots<'_>,
) -> Vec<NamespaceScenario> {
    let count = match rng.random_range(0..10) {
        0..6 => 0,
        6..9 => 1,
        _ => 2,
    };
    let fleet_reports = slots.load.reports.iter().all(|reports| *reports);
    (0..count)
        .map(|index| {
            let shards = rng.random_range(4..=MAX_NAMESPACE_SHARDS);
            let lease_ms = LEASE_CHOICES_MS[rng.random_range(0..LEASE_CHOICES_MS.len())];
            let executors = rng.random_range(1..=MAX_NAMESPACE_EXECUTORS);
            let zones = if executors >= 2 && rng.random_bool(0.5) {
                rng.random_range(2..=MAX_ZONES.min(executors))
            } else {
                0
            };
            for _ in 0..executors {
                slots.slot_spaces.push(index + 1);
                slots
                    .executor_rate_ppm
                    .push(rng.random_range(-MAX_RATE_ERROR_PPM..=MAX_RATE_ERROR_PPM));
                slots
                    .load
                    .capacities
                    .push(rng.random_range(1..=MAX_SIM_CAPACITY));
                slots.load.reports.push(fleet_reports);
            }
            let true_loads = if rng.random_bool(0.5) {
                let exponent: f64 = rng.random_range(0.3..=1.5);
                let mut ranks: Vec<u32> = (1..=shards).collect();
                shuffle(rng, &mut ranks);
                ranks
                    .into_iter()
                    .map(|rank| 100.0 / f64::from(rank).powf(exponent))
                    .collect()
            } else {
                (0..shards)
                    .map(|_| rng.random_range(50.0..=150.0))
                    .collect()
            };
            NamespaceScenario {
                name: NAMESPACE_NAMES[index].to_owned(),
                shards,
                lease_ms,
                zones,
                true_loads,
                replicas: 1,
            }
        })
        .collect()
}

/// One fault on a namespace's executor, of a kind the seed's swarm weights turned on: as
/// [`draw_fault`] draws it, on a slot of a namespace beside `default` and its shards; a lease
/// change is the namespace's own.
pub(super) fn draw_namespace_fault(
    rng: &mut ChaCha8Rng,
    weights: &[u32; FAULT_KINDS],
    slot_spaces: &[usize],
    namespaces: &[NamespaceScenario],
    load: &LoadScenario,
) -> Fault {
    let namespace_slots: Vec<usize> = (0..slot_spaces.len())
        .filter(|&slot| slot_spaces[slot] > 0)
        .collect();
    let slot = namespace_slots[rng.random_range(0..namespace_slots.len())];
    let space = slot_spaces[slot];
    let shards = namespaces[space - 1].shards;
    let total: u32 = NAMESPACE_FAULT_KINDS
        .iter()
        .map(|&kind| weights[kind])
        .sum();
    let mut pick = rng.random_range(0..total.max(1));
    let kind = NAMESPACE_FAULT_KINDS
        .iter()
        .copied()
        .find(|&kind| {
            if pick < weights[kind] {
                true
            } else {
                pick -= weights[kind];
                false
            }
        })
        .unwrap_or(0);
    match kind {
        8 => Fault::NamespaceLease {
            space,
            lease_ms: LEASE_CHOICES_MS[rng.random_range(0..LEASE_CHOICES_MS.len())],
        },
        _ => draw_fault_of_kind(
            rng,
            kind,
            slot,
            shards,
            namespaces[space - 1].lease_ms,
            load,
        ),
    }
}

impl Scenario {
    /// A script's cluster (`crate::script`): `shards` shards, a lease of `lease_ms`, no
    /// executor until the script spawns one, no fault, no loss, no delay, commits at once, every
    /// plan whole, and plain expiry (P6.3's guard off: the scripts are about what stands
    /// between two owners when a lease does run out, not about deferring it).
    pub fn scripted(shards: u32, lease_ms: u64) -> Self {
        Self {
            seed: 0,
            slots: 0,
            shards,
            lease_ms,
            guard: GuardConfig {
                enabled: false,
                grace_ms: 0,
            },
            guard_flag: Some(false),
            plan_cap: leasehold_manager::lease::MAX_MOVES_PER_PLAN,
            max_deliveries_in_flight: 64,
            drop_per_mille: 0,
            duplicate_per_mille: 0,
            typical_delay_us: 0,
            commit_latency_us: 0,
            executor_rate_ppm: Vec::new(),
            chaos_ms: 0,
            faults: Vec::new(),
            load: LoadScenario::quiet(0, shards),
            zones: 0,
            namespaces: Vec::new(),
            slot_spaces: Vec::new(),
            join_space: 0,
            lost_space: 0,
        }
    }
}
