//! One seed's run: chaos, then a healed network until the fleet converges, then the leader on
//! steady loads (P15.2-P15.4), then with loads off the liveness probes (I4 re-homing time, P5.4
//! fewest moves on a join, I5 no eviction after a stall). With namespaces beside `default`
//! (P18.1) every convergence and placement check is per namespace, each probe acts in one
//! namespace and checks that it moved nothing of another, and one probe loses a namespace's
//! executors all at once. A namespace resharded during the chaos (§20) first finishes its
//! reshard and is brought back to its first count.

mod drains;
mod leader_changes;
mod load_phase;
mod rehoming;
mod reshards;
mod spread;
mod zones;

use std::collections::{BTreeMap, BTreeSet};

use leasehold_manager::leader::core::{longest_lease_ms, tick_ms};

use self::drains::*;
use self::leader_changes::*;
use self::load_phase::*;
use self::rehoming::*;
use self::reshards::*;
use self::spread::*;
use self::zones::*;
use crate::checks::{shard_name, utilisations, Violation, COUNT_CEILING_OF_SHARE, MINUTE_MS};
use crate::scenario::{Scenario, LEASE_CHOICES_MS};
use crate::world::{BalanceMove, Coverage, Life, Slot, World};
use leasehold_api::wire::{is_default_namespace, zone_of};
use leasehold_manager::lease::{capacity_of, Executor, LeaseState, Loads, MoveReason, Space};

/// How long the healed fleet may take to converge: the longest mass-expiry grace, a new
/// leader's grace of the longest lease, the longest retry backoff and a few leases more.
const SETTLE_LIMIT_US: u64 = 60_000_000;
/// Settling is checked this often.
const POLL_US: u64 = 20_000;
/// A converged fleet's leases have at least this many tenths left.
const FRESH_LEASE_TENTHS: u64 = 6;

/// How long the drain probes pause an owner: short of its lease by the fresh margin and more,
/// so it comes back, renews and is not reaped.
fn paused_ms(lease_ms: u64) -> u64 {
    lease_ms * 2 / 5
}

/// The operator retries undoing drains this often while the fleet settles.
const UNDRAIN_EVERY_US: u64 = 500_000;

/// What one seed's run found.
#[derive(Debug)]
pub struct RunReport {
    pub seed: u64,
    pub result: Result<(), Violation>,
    pub coverage: Coverage,
    pub trace: Vec<String>,
    pub final_dump: String,
}

/// Runs one seed; with `trace`, every event is recorded.
pub fn simulate(seed: u64, trace: bool) -> RunReport {
    let scenario = Scenario::draw(seed);
    let mut world = World::new(scenario, trace);
    let result = drive(&mut world);
    RunReport {
        seed,
        result,
        coverage: world.coverage,
        trace: world.trace_lines().to_vec(),
        final_dump: world.dump(),
    }
}

fn drive(world: &mut World) -> Result<(), Violation> {
    let chaos_end_us = world.scenario.chaos_ms * 1_000;
    world.run_until(chaos_end_us)?;
    reshards_complete(world)?;
    settle(world, "after the chaos")?;
    // The probes below count moves against P5.4, which is about counts: placement by load
    // moves what balance needs, so they run with loads off (P15.2: placement by count).
    world.turn_loads_off(true);
    settle(world, "with loads off")?;
    // Let any new leader's grace (P6.1) and guard episode (P6.3), and the delivery backoff of a
    // push refused while the fleet settled, run out before timing things.
    let longest_lease_us = LEASE_CHOICES_MS[LEASE_CHOICES_MS.len() - 1] * 1_000;
    let quiet_until = world.now_us + 2 * longest_lease_us;
    world.run_until(quiet_until)?;
    settle(world, "before the probes")?;
    if world.processes.len() >= 2 {
        i4_rehoming_probe(world)?;
        i4_across_leader_changes_probe(world)?;
    }
    if let Some(slot) = last_zoned_slot(world) {
        zone_crash_probe(world, slot)?;
        preference_probe(world, slot)?;
    }
    if world.has_namespaces() {
        namespace_loss_probe(world)?;
    }
    join_probe(world)?;
    drain_join_probe(world)?;
    drain_cancel_probe(world)?;
    if world.processes.len() >= 2 {
        drain_undone_while_one_leaves_probe(world)?;
    }
    p6_1_shortened_lease_probe(world)?;
    // I5 is promised unless the operator turned the guard off (P6.3): a build that ships it
    // off fails here.
    if world.scenario.guard_flag != Some(false) {
        i5_stall_probe(world)?;
    }
    load_phase(world)
}

/// Runs until the fleet converged: a leader leads, knows the loads it places by, and has nothing
/// to move but for balance (P15.3 spreads those over minutes); every slot's process is
/// registered and renewing, the state knows exactly those executors, every shard is owned (in a
/// namespace that has an executor, P18.1) and none releasing, when placing by count each
/// executor holds the floor or the ceiling of its share by capacity of its namespace (P15.2;
/// within one when capacities are equal, P5.4), and each process admits exactly its recorded
/// set. Returns how long it took (µs).
pub fn settle(world: &mut World, when: &str) -> Result<u64, Violation> {
    settle_with(world, when, true)
}

/// [`settle`]; with `undrain`, the operator keeps undoing drains meanwhile.
fn settle_with(world: &mut World, when: &str, undrain: bool) -> Result<u64, Violation> {
    let start = world.now_us;
    loop {
        if let Some(why_not) = not_converged(world, undrain) {
            if world.now_us - start > SETTLE_LIMIT_US {
                return Err(Violation {
                    invariant: "liveness",
                    detail: format!(
                        "did not converge {when} within {} s: {why_not}\n{}",
                        SETTLE_LIMIT_US / 1_000_000,
                        world.dump()
                    ),
                    at_us: world.now_us,
                });
            }
            if undrain && world.now_us % UNDRAIN_EVERY_US < POLL_US {
                world.undrain_all();
            }
            let next = world.now_us + POLL_US;
            world.run_until(next)?;
        } else {
            return Ok(world.now_us - start);
        }
    }
}

/// Why the fleet has not converged yet, if it has not; with `undrained`, a draining executor
/// counts as not converged (the operator is undoing it). Every namespace's placement is its own
/// (P18.1): each must be learned, planned through and spread.
fn not_converged(world: &World, undrained: bool) -> Option<String> {
    why_not_converged(world, undrained).err()
}

/// [`not_converged`]'s checks in order, the first that fails saying why.
fn why_not_converged(world: &World, undrained: bool) -> Result<(), String> {
    if world.leader_is_stalled() {
        return Err("the leader is stalled".into());
    }
    let state = world.leader_state().ok_or("no leader")?;
    if world.leader_is_busy() {
        return Err("the leader has writes in flight".into());
    }
    let by_count = placement_settled(world, state)?;
    if let Some(slot) = (0..world.processes.len()).find(|&slot| {
        world.processes[slot]
            .as_ref()
            .is_some_and(|p| matches!(p.life, Life::Paused { .. }))
    }) {
        return Err(format!("slot {slot} is paused"));
    }
    let live = live_and_known(world, state)?;
    let pinned = state.spaces().any(|space| space.pins().next().is_some());
    if undrained && (state.maintenance() || pinned) {
        return Err("maintenance mode or a pin is still on (the operator is undoing them)".into());
    }
    shards_owned_and_drains_done(state, undrained)?;
    for space in by_count {
        let owners = owners_of(space);
        let held = |id: &str| {
            space
                .executor(id)
                .map_or(0, |e| e.owned_shards.len() as u64)
        };
        if let Some(off) = off_the_spread(space.shards().len() as u64, &owners, held) {
            return Err(format!("{off}{}", of_namespace(space.name())));
        }
    }
    leases_fresh_and_sets_admitted(world, state, &live)
}

/// Every namespace's placement learned and planned through (no move due but for balance), and
/// no loads used once they are off: the namespaces placed by count, to be judged by their
/// spread.
fn placement_settled<'a>(world: &World, state: &'a LeaseState) -> Result<Vec<Space<'a>>, String> {
    let mut by_count = Vec::new();
    for space in state.spaces() {
        let namespace = space.name();
        let of = of_namespace(namespace);
        let inputs = world.leader_inputs_in(namespace).ok_or("no leader")?;
        if inputs.loads == Loads::Learning {
            return Err(format!("the leader is still learning the loads{of}"));
        }
        // A namespace without executors keeps what its tracker heard before they left, and
        // places nothing by it.
        let placed = space.executors().next().is_some();
        if placed && world.load.off() && matches!(inputs.loads, Loads::Reported(_)) {
            return Err(format!(
                "loads are off, and the leader still places{of} by those it was told"
            ));
        }
        if let Some(plan) = world.leader_plan_in(namespace) {
            let mut due = plan.counts_by_reason();
            due.remove(&MoveReason::Balance);
            if !due.is_empty() {
                return Err(format!("a rebalance{of} is due: {due:?}"));
            }
        }
        if inputs.loads == Loads::Counts {
            by_count.push(space);
        }
    }
    Ok(by_count)
}

/// Each live process registered, and the state knowing exactly those: executor id → slot.
fn live_and_known(world: &World, state: &LeaseState) -> Result<BTreeMap<String, usize>, String> {
    let mut live = BTreeMap::new();
    for (slot, process) in world.processes.iter().enumerate() {
        let Some(process) = process.as_ref().filter(|p| p.admits()) else {
            continue;
        };
        let Some(executor_id) = process.core.executor_id() else {
            return Err(format!("slot {slot} is not registered"));
        };
        live.insert(executor_id.to_owned(), slot);
    }
    let known: Vec<&str> = state.executors().map(|e| e.id.as_str()).collect();
    if known.len() != live.len() || known.iter().any(|id| !live.contains_key(*id)) {
        return Err(format!(
            "the state knows {known:?}, the live processes are {live:?}"
        ));
    }
    Ok(live)
}

/// Every shard owned and none releasing, and no drain left (with `undrained`, no executor
/// draining at all).
fn shards_owned_and_drains_done(state: &LeaseState, undrained: bool) -> Result<(), String> {
    for space in state.spaces() {
        // A namespace whose executors are all gone has nobody to own its shards (P18.1: no
        // other namespace's executor may take them).
        let takers = space.executors().any(|e| !e.draining);
        if let Some(shard) = space
            .shards()
            .iter()
            .find(|s| (takers && s.owner.is_none()) || s.handoff.is_some())
        {
            return Err(format!(
                "{} is unowned or releasing",
                shard_name(space.name(), shard.id)
            ));
        }
    }
    if let Some(drained) = state
        .executors()
        .find(|e| e.draining && (undrained || !e.owned_shards.is_empty()))
    {
        return Err(format!("{} is still draining", drained.id));
    }
    Ok(())
}

/// Every live executor's lease fresh and what it admits exactly what the state delivered it.
fn leases_fresh_and_sets_admitted(
    world: &World,
    state: &LeaseState,
    live: &BTreeMap<String, usize>,
) -> Result<(), String> {
    for (executor_id, slot) in live {
        let Some(now) = world.process_now(*slot) else {
            continue;
        };
        let Some(process) = world.processes[*slot].as_ref() else {
            continue;
        };
        // Every lease fresh, as renewing executors keep it (P3.5: at least two thirds left,
        // less a round trip), so a probe that pauses one starts from a known margin. Each
        // executor's lease is its namespace's (P18.1).
        let lease_ms = lease_of(state, &process.namespace);
        let remaining_ms = process.core.lease().remaining(now).as_millis() as u64;
        if remaining_ms * 10 < lease_ms * FRESH_LEASE_TENTHS {
            return Err(format!(
                "slot {slot}'s lease has {remaining_ms} ms of {lease_ms} ms left"
            ));
        }
        let expected = state.delivered_set(executor_id);
        let admitted: Vec<(u32, u64)> = process
            .core
            .assignment()
            .held()
            .into_iter()
            .filter(|held| process.core.admit(held.shard, now).is_ok())
            .map(|held| (held.shard, held.epoch))
            .collect();
        if admitted != expected {
            return Err(format!(
                "slot {slot} ({executor_id}) admits {admitted:?}, recorded {expected:?}"
            ));
        }
    }
    Ok(())
}

/// ` of NAME` for a namespace other than `default`, for messages.
fn of_namespace(namespace: &str) -> String {
    if is_default_namespace(namespace) {
        String::new()
    } else {
        format!(" of {namespace}")
    }
}

/// `namespace`'s lease in `state` (P18.1: each namespace's own).
fn lease_of(state: &LeaseState, namespace: &str) -> u64 {
    state
        .space(namespace)
        .and_then(|space| space.config())
        .map_or(0, |c| c.lease_duration_ms)
}

/// The slack on top of lease + tick for the writes and the pushes to land on a healed network:
/// the previous step's write, the reap, the plans that move them (`Scenario::plans_to_move`); the pushes to
/// every receiver, `max_deliveries_in_flight` at a time, behind a round already under way, each
/// a round trip at the longest transit; and one poll of [`settle`].
fn delivery_slack_us(scenario: &Scenario, shards_moved: usize, receivers: usize) -> u64 {
    let plans = scenario.plans_to_move(shards_moved);
    let push_rounds = receivers.div_ceil(scenario.max_deliveries_in_flight.max(1)) as u64 + 1;
    let round_trip_us = 2 * (crate::scenario::MIN_TRANSIT_US + scenario.typical_delay_us);
    (2 + plans) * scenario.commit_latency_us + push_rounds * round_trip_us + POLL_US
}
