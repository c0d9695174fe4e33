//! Everything a run does, drawn from its seed before it starts: the fleet, the network's
//! behaviour, the loads (PROTOCOL §15) and the faults with their timing. One seed, one run:
//! nothing else is random. A script's run has a fixed, quiet configuration instead
//! ([`Scenario::scripted`]).

mod faults;
mod loads;
mod namespaces;

pub use self::faults::*;
pub use self::loads::*;
use self::namespaces::*;
use leasehold_manager::leader::core::GuardConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Lease durations a run may start with or change to (ms). Short, so a run covers many leases.
pub const LEASE_CHOICES_MS: [u64; 4] = [600, 1_000, 2_000, 3_000];
/// Most executor slots in a run.
pub const MAX_EXECUTORS: usize = 8;
/// Most shards in a run.
pub const MAX_SHARDS: u32 = 64;
/// Managers in the simulated cluster.
pub const MANAGERS: usize = 3;
/// The shortest one-way transit (µs). The clock-rate bound below keeps `rate error × lease`
/// under it, which is what "rate error far below the lease" (P5.2) means at these leases.
pub const MIN_TRANSIT_US: u64 = 1_000;
/// Largest clock-rate error of any executor or leader (parts per million): 100 ppm of the
/// longest lease (3 s) is 0.3 ms, under [`MIN_TRANSIT_US`].
pub const MAX_RATE_ERROR_PPM: i64 = 100;
/// Largest step of a manager's wall clock between two of its terms (NTP slewing or stepping a
/// small offset), on top of its offset ([`MAX_WALL_CLOCK_OFFSET_MS`]).
pub const MAX_CLOCK_OFFSET_MS: i64 = 2_000;
/// Largest offset of a manager's wall clock from the true one, each manager's drawn once per
/// run: hours, either way (a clock never synchronised, a VM restored from a snapshot). Leasehold
/// assumes clock rates, not offsets (P6.4): the liveness checks hold whatever these are.
pub const MAX_WALL_CLOCK_OFFSET_MS: i64 = 2 * 3_600_000;

/// One fault, injected at its drawn instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL: the process is gone; its slot stays empty until a restart.
    Kill { slot: usize },
    /// A new process with a new incarnation at the same address (the old one killed first).
    Restart { slot: usize },
    /// SIGSTOP for `for_ms`, often past its lease; then it carries on where it was.
    Pause { slot: usize, for_ms: u64 },
    /// SIGTERM: stop admitting, deregister within the grace, exit (P3.7).
    GracefulStop { slot: usize },
    /// The link between the managers and one executor fails for `for_ms`, in one direction or
    /// both.
    Partition {
        slot: usize,
        to_managers: bool,
        from_managers: bool,
        for_ms: u64,
    },
    /// The leader loses office; its uncommitted tail is committed by the next leader or lost;
    /// it may go on pushing from its stale state for `deposed_pushes_ms`.
    LeaderChange {
        keep_tail: bool,
        deposed_pushes_ms: u64,
        election_ms: u64,
    },
    /// The leader process stalls for `for_ms` (GC, swap, SIGSTOP) while the followers still hear
    /// from it, so nobody else takes office (P6.3, I5).
    LeaderStall { for_ms: u64 },
    /// A follower restarts from its snapshot (a bincode round trip of its state).
    ManagerRestart,
    /// An operator sets a new lease duration (P3.4).
    SetLease { lease_ms: u64 },
    /// An operator sets a new lease duration for a namespace other than `default` (P18.1,
    /// P3.4): `space` indexes [`Scenario::namespaces`] from 1.
    NamespaceLease { space: usize, lease_ms: u64 },
    /// An operator drains an executor, or undrains it.
    Drain { slot: usize, draining: bool },
    /// The executor in `slot` starts lying about its loads (P15.1), and its slot's processes lie
    /// for the rest of the run (a bug in the binary, or a hostile one). A run has at most one
    /// liar: every such fault names [`LoadScenario::liar`].
    Lie { slot: usize, lie: Lie },
    /// A new process with a new incarnation at the same address that states another capacity
    /// (P15.1), as an operator restarting an executor with `--capacity` changed does.
    RestartWithCapacity { slot: usize, capacity: u32 },
    /// An operator's control (P17.4): maintenance mode, or `shard` pinned to, unpinned from or
    /// moved to the executor in `slot`.
    Operator {
        slot: usize,
        shard: u32,
        control: Control,
    },
    /// An operator asks for a reshard of space `space` (P20.1): twice its shard count at the
    /// time (`split`), or half of it. Refused (and counted) when the state machine refuses it,
    /// and as the HTTP edge answers `400` a merge of an odd count.
    Reshard { space: usize, split: bool },
}

/// What an operator does in an [`Fault::Operator`] (P17.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    MaintenanceOn,
    MaintenanceOff,
    Pin,
    Unpin,
    Move,
}

/// How a lying executor reports the load of every shard it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lie {
    /// Near the largest load the leader accepts ([`MAX_SHARD_LOAD`]), every time.
    Huge,
    /// Huge and zero in turn, one renewal each.
    Flapping,
    /// Zero, whatever it serves.
    Zero,
}

/// Fisher-Yates with the seed's generator.
pub fn shuffle<T>(rng: &mut ChaCha8Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = rng.random_range(0..=i);
        items.swap(i, j);
    }
}

/// A run's whole configuration.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    pub slots: usize,
    pub shards: u32,
    pub lease_ms: u64,
    pub guard: GuardConfig,
    /// `--mass-expiry-guard` as the operator gave it (`None`: the shipped default).
    pub guard_flag: Option<bool>,
    /// Most moves in one plan (production: 8 192).
    pub plan_cap: usize,
    /// Deliveries in flight at once in the leader's delivery shell.
    pub max_deliveries_in_flight: usize,
    /// Per mille of messages lost during the chaos phase.
    pub drop_per_mille: u32,
    /// Per mille of messages delivered twice during the chaos phase.
    pub duplicate_per_mille: u32,
    /// Typical one-way transit beyond the minimum (µs); a tail of up to 30× that is drawn for
    /// one message in twenty, which also reorders.
    pub typical_delay_us: u64,
    /// Commit latency (µs): from the first proposal of a batch to its commit.
    pub commit_latency_us: u64,
    /// Clock-rate error per executor slot (ppm).
    pub executor_rate_ppm: Vec<i64>,
    /// How long faults are injected (ms); then the network heals and the fleet settles.
    pub chaos_ms: u64,
    /// The faults, ascending by instant (ms since the start).
    pub faults: Vec<(u64, Fault)>,
    /// Capacities, loads and placement by load.
    pub load: LoadScenario,
    /// How many zones `default`'s executors are spread over (P18.3): its `n`th slot states
    /// `zone=z{n % zones}` ([`Scenario::zone_of_slot`]); 0, no executor states a zone.
    pub zones: usize,
    /// The namespaces beside `default` (P18.1), each created by an operator before anything
    /// registers, with executors of its own; empty in most seeds. Space `i + 1` is
    /// `namespaces[i]`, space 0 is `default`.
    pub namespaces: Vec<NamespaceScenario>,
    /// The space (0: `default`, `i + 1`: `namespaces[i]`) each slot's executor registers into;
    /// a slot past its end is `default`'s. The world adds the slots its probes add.
    pub slot_spaces: Vec<usize>,
    /// The space the join probe's executor joins (P5.4 in that namespace).
    pub join_space: usize,
    /// The space whose executors the namespace-loss probe kills all at once (P18.1).
    pub lost_space: usize,
}

/// A namespace beside `default` (P18.1): a shard space with its own shard count, lease,
/// executors, zones and loads.
#[derive(Debug, Clone)]
pub struct NamespaceScenario {
    pub name: String,
    pub shards: u32,
    /// The lease it is created with (P18.1: each namespace's own).
    pub lease_ms: u64,
    /// How many zones its executors are spread over (P18.3), as [`Scenario::zones`] for
    /// `default`'s; 0, none states a zone.
    pub zones: usize,
    /// What each of its shards really carries at the start (index = shard).
    pub true_loads: Vec<f64>,
    /// Its replicas per shard (P19.1): 1, or 2 to 3 for half the namespaces of two executors
    /// or more, whose secondaries their executors report ready as soon as they hold them.
    pub replicas: u32,
}

/// The names the namespaces beside `default` take, in order.
pub const NAMESPACE_NAMES: [&str; 2] = ["kv", "orders"];
/// Most shards of a namespace beside `default`.
pub const MAX_NAMESPACE_SHARDS: u32 = 16;
/// Most executors of a namespace beside `default`.
pub const MAX_NAMESPACE_EXECUTORS: usize = 3;

/// Most runs take the guard as the manager ships it; the rest as an operator who turned it off
/// or on explicitly: the guard, and the flag it was drawn from.
fn draw_guard(rng: &mut ChaCha8Rng) -> (GuardConfig, Option<bool>) {
    let guard_flag = match rng.random_range(0..10) {
        0..7 => None,
        7..9 => Some(false),
        _ => Some(true),
    };
    let guard = GuardConfig {
        enabled: shipped_guard_enabled(guard_flag),
        // Shorter than the shipped 60 s so a run settles quickly, and long enough that an
        // executor that was live before a stall renews within it: its retries back off to at
        // most 5 s (P3.5, RETRY_DELAY_MAX).
        grace_ms: rng.random_range(8_000..=20_000),
    };
    (guard, guard_flag)
}

/// Swarm testing: each run turns on a random subset of the fault kinds, with a random weight
/// each, so rare combinations (a lease changed twice around a leader change, a drain during a
/// pause) come up often across seeds instead of almost never.
struct Swarm {
    weights: [u32; FAULT_KINDS],
    /// How many faults of `default`'s slots the run has.
    fault_count: u32,
}

impl Swarm {
    /// The kinds' weights, and no faults at all in a `calm` run or one with every kind off.
    fn draw(rng: &mut ChaCha8Rng, calm: bool) -> Self {
        let weights: [u32; FAULT_KINDS] = std::array::from_fn(|_| {
            if rng.random_bool(0.5) {
                rng.random_range(1..=10)
            } else {
                0
            }
        });
        let fault_count = if calm || weights.iter().all(|w| *w == 0) {
            0
        } else {
            rng.random_range(0..=20)
        };
        Self {
            weights,
            fault_count,
        }
    }

    /// The run's faults, each at a time within the chaos window, in time order.
    fn faults(
        &self,
        rng: &mut ChaCha8Rng,
        chaos_ms: u64,
        slots: usize,
        shards: u32,
        lease_ms: u64,
        load: &LoadScenario,
    ) -> Vec<(u64, Fault)> {
        let mut faults: Vec<(u64, Fault)> = (0..self.fault_count)
            .map(|_| {
                let at = rng.random_range(0..chaos_ms);
                (
                    at,
                    draw_fault(rng, &self.weights, slots, shards, lease_ms, load),
                )
            })
            .collect();
        faults.sort_by_key(|(at, _)| *at);
        faults
    }

    /// Whether a kind that namespaces' slots can have is on.
    fn has_namespace_kinds(&self) -> bool {
        self.weights
            .iter()
            .enumerate()
            .any(|(kind, weight)| *weight > 0 && NAMESPACE_FAULT_KINDS.contains(&kind))
    }
}

/// Zones come from a stream of their own, so every other draw is the same with or without
/// them: half the fleets of two or more executors are spread over two or three.
fn draw_zones(seed: u64, slots: usize) -> usize {
    let mut zone_rng = ChaCha8Rng::seed_from_u64(seed);
    zone_rng.set_stream(4);
    if slots >= 2 && zone_rng.random_bool(0.5) {
        zone_rng.random_range(2..=MAX_ZONES.min(slots))
    } else {
        0
    }
}

/// Seeds in ten that ask for reshards.
const RESHARD_SEEDS_PER_TEN: u32 = 3;
/// Most reshard requests in one run.
pub const MAX_RESHARD_REQUESTS: u32 = 3;

/// Reshards come from a stream of their own, so every other draw is the same with or without
/// them: three seeds in ten ask for one to [`MAX_RESHARD_REQUESTS`] reshards (P20.1) at random
/// moments of the chaos window, each of a random space, the first a split four times in five
/// (a merge needs an even count), the next ones a split or a merge alike.
fn draw_reshards(seed: u64, chaos_ms: u64, spaces: usize) -> Vec<(u64, Fault)> {
    let mut reshard_rng = ChaCha8Rng::seed_from_u64(seed);
    reshard_rng.set_stream(7);
    if reshard_rng.random_range(0..10) >= RESHARD_SEEDS_PER_TEN || chaos_ms == 0 {
        return Vec::new();
    }
    let requests = reshard_rng.random_range(1..=MAX_RESHARD_REQUESTS);
    let mut reshards: Vec<(u64, Fault)> = (0..requests)
        .map(|index| {
            let at = reshard_rng.random_range(0..chaos_ms);
            let space = reshard_rng.random_range(0..spaces);
            let split = if index == 0 {
                reshard_rng.random_bool(0.8)
            } else {
                reshard_rng.random_bool(0.5)
            };
            (at, Fault::Reshard { space, split })
        })
        .collect();
    reshards.sort_by_key(|(at, _)| *at);
    reshards
}

/// The namespaces beside `default` a seed draws, and the spaces its probes pick.
struct Spaces {
    namespaces: Vec<NamespaceScenario>,
    join_space: usize,
    lost_space: usize,
}

/// Draws the namespaces (P18.1), their slots and faults, and the spaces the probes pick.
fn draw_spaces(
    seed: u64,
    calm: bool,
    chaos_ms: u64,
    swarm: &Swarm,
    slots: &mut NamespaceSlots<'_>,
    faults: &mut Vec<(u64, Fault)>,
) -> Spaces {
    // Namespaces come from a stream of their own as well, and add slots after `default`'s, so
    // a seed without them runs exactly as before.
    let mut namespace_rng = ChaCha8Rng::seed_from_u64(seed);
    namespace_rng.set_stream(5);
    let mut namespaces = draw_namespaces(&mut namespace_rng, slots);
    // Replicas come from a stream of their own, so the draws above are as they were.
    let mut replica_rng = ChaCha8Rng::seed_from_u64(seed);
    replica_rng.set_stream(6);
    for (index, namespace) in namespaces.iter_mut().enumerate() {
        let executors = slots
            .slot_spaces
            .iter()
            .filter(|&&space| space == index + 1)
            .count();
        if executors >= 2 && replica_rng.random_bool(0.5) {
            let most = u32::try_from(executors.min(3)).unwrap_or(3);
            namespace.replicas = replica_rng.random_range(2..=most);
        }
    }
    if !namespaces.is_empty() && !calm && swarm.has_namespace_kinds() {
        for _ in 0..namespace_rng.random_range(0..=8) {
            let at = namespace_rng.random_range(0..chaos_ms);
            let fault = draw_namespace_fault(
                &mut namespace_rng,
                &swarm.weights,
                slots.slot_spaces,
                &namespaces,
                slots.load,
            );
            faults.push((at, fault));
        }
        faults.sort_by_key(|(at, _)| *at);
    }
    let spaces = namespaces.len() + 1;
    let join_space = namespace_rng.random_range(0..spaces);
    let lost_space = namespace_rng.random_range(0..spaces);
    Spaces {
        namespaces,
        join_space,
        lost_space,
    }
}

impl Scenario {
    pub fn draw(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let slots = rng.random_range(1..=MAX_EXECUTORS);
        let shards = rng.random_range(1..=MAX_SHARDS);
        let lease_ms = LEASE_CHOICES_MS[rng.random_range(0..LEASE_CHOICES_MS.len())];
        let (guard, guard_flag) = draw_guard(&mut rng);
        let plan_cap = [1, 2, 3, 8_192][rng.random_range(0..4)];
        let max_deliveries_in_flight = [1, 2, 64][rng.random_range(0..3)];
        let calm = rng.random_bool(0.15);
        let drop_per_mille = if calm { 0 } else { rng.random_range(0..=300) };
        let duplicate_per_mille = if calm { 0 } else { rng.random_range(0..=100) };
        let typical_delay_us = rng.random_range(0..=20_000);
        let commit_latency_us = rng.random_range(200..=5_000);
        let executor_rate_ppm = (0..slots)
            .map(|_| rng.random_range(-MAX_RATE_ERROR_PPM..=MAX_RATE_ERROR_PPM))
            .collect();
        let chaos_ms = lease_ms * rng.random_range(8..=20);
        // Capacities and loads come from a stream of their own, so the draws above and the
        // network's keep their order whatever is drawn here.
        let mut load_rng = ChaCha8Rng::seed_from_u64(seed);
        load_rng.set_stream(2);
        let load = LoadScenario::draw(&mut load_rng, slots, shards, chaos_ms);
        let swarm = Swarm::draw(&mut rng, calm);
        let mut faults = swarm.faults(&mut rng, chaos_ms, slots, shards, lease_ms, &load);
        let zones = draw_zones(seed, slots);
        let mut executor_rate_ppm: Vec<i64> = executor_rate_ppm;
        let mut load = load;
        let mut slot_spaces = vec![0; slots];
        let spaces = draw_spaces(
            seed,
            calm,
            chaos_ms,
            &swarm,
            &mut NamespaceSlots {
                slot_spaces: &mut slot_spaces,
                executor_rate_ppm: &mut executor_rate_ppm,
                load: &mut load,
            },
            &mut faults,
        );
        let slots = slot_spaces.len();
        // Added after every other fault, the sort stable: the others keep their order.
        faults.extend(draw_reshards(seed, chaos_ms, spaces.namespaces.len() + 1));
        faults.sort_by_key(|(at, _)| *at);
        Self {
            seed,
            slots,
            shards,
            lease_ms,
            guard,
            guard_flag,
            plan_cap,
            max_deliveries_in_flight,
            drop_per_mille,
            duplicate_per_mille,
            typical_delay_us,
            commit_latency_us,
            executor_rate_ppm,
            chaos_ms,
            faults,
            load,
            zones,
            namespaces: spaces.namespaces,
            slot_spaces,
            join_space: spaces.join_space,
            lost_space: spaces.lost_space,
        }
    }

    /// The space (0: `default`, `i + 1`: `namespaces[i]`) the executor in `slot` registers into.
    pub fn space_of_slot(&self, slot: usize) -> usize {
        self.slot_spaces.get(slot).copied().unwrap_or(0)
    }

    /// The name of space `space`.
    pub fn space_name(&self, space: usize) -> &str {
        match space.checked_sub(1) {
            None => leasehold_api::wire::DEFAULT_NAMESPACE,
            Some(index) => self
                .namespaces
                .get(index)
                .map_or(leasehold_api::wire::DEFAULT_NAMESPACE, |ns| {
                    ns.name.as_str()
                }),
        }
    }

    /// The space of the namespace named `namespace` (0 for `default`, or a name not in the run).
    pub fn space_of_namespace(&self, namespace: &str) -> usize {
        self.namespaces
            .iter()
            .position(|ns| ns.name == namespace)
            .map_or(0, |index| index + 1)
    }

    /// The namespace the executor in `slot` registers into (P18.1).
    pub fn namespace_of_slot(&self, slot: usize) -> &str {
        self.space_name(self.space_of_slot(slot))
    }

    /// The spaces of the run: `default` and every namespace beside it.
    pub fn space_count(&self) -> usize {
        self.namespaces.len() + 1
    }

    /// How many plans may move `shards_moved` shards of one namespace: a step shares its cap
    /// among every namespace (P18.1), and the namespace planned first takes only its share,
    /// `plan_cap` divided by the namespaces (rounded up), before the step plans again.
    pub fn plans_to_move(&self, shards_moved: usize) -> u64 {
        let share = self.plan_cap.max(1).div_ceil(self.space_count());
        shards_moved.div_ceil(share) as u64
    }

    /// How many zones space `space`'s executors are spread over.
    pub fn zones_of_space(&self, space: usize) -> usize {
        match space.checked_sub(1) {
            None => self.zones,
            Some(index) => self.namespaces.get(index).map_or(0, |ns| ns.zones),
        }
    }

    /// The zone the executor in `slot` states (P18.3), if its namespace's fleet is spread over
    /// zones: its namespace's `n`th slot states `z{n % zones}`; a probe's extra slots continue
    /// the round.
    pub fn zone_of_slot(&self, slot: usize) -> Option<String> {
        let space = self.space_of_slot(slot);
        let zones = self.zones_of_space(space);
        if zones == 0 {
            return None;
        }
        let position = (0..slot)
            .filter(|&earlier| self.space_of_slot(earlier) == space)
            .count();
        Some(format!("z{}", position % zones))
    }

    /// A script's cluster with `namespace` beside the rest, its executors spawned by
    /// `crate::script::Step::SpawnIn`.
    pub fn with_namespace(mut self, namespace: NamespaceScenario) -> Self {
        self.namespaces.push(namespace);
        self
    }
}

/// Whether the manager's flags enable the mass-expiry guard (P6.3), with `--mass-expiry-guard`
/// given as `flag` or left at its default.
fn shipped_guard_enabled(flag: Option<bool>) -> bool {
    use clap::Parser;
    let mut argv = vec![
        "leasehold-manager".to_owned(),
        "--id=1".to_owned(),
        "--listen=127.0.0.1:7000".to_owned(),
        "--data-dir=/nonexistent".to_owned(),
    ];
    if let Some(enabled) = flag {
        argv.push(format!("--mass-expiry-guard={enabled}"));
    }
    match leasehold_manager::server::config::Args::try_parse_from(argv) {
        Ok(args) => args.mass_expiry_guard,
        // The flags above are the minimal valid set; a manager that refuses them is a broken
        // build, and the guard off is the unsafe answer that makes the probes say so.
        Err(_) => false,
    }
}
