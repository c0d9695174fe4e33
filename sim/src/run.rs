//! One seed's run: chaos, then a healed network until the fleet converges, then the leader on
//! steady loads (P15.2-P15.4), then with loads off the liveness probes (I4 re-homing time, P5.4
//! fewest moves on a join, I5 no eviction after a stall). With namespaces beside `default`
//! (P18.1) every convergence and placement check is per namespace, each probe acts in one
//! namespace and checks that it moved nothing of another, and one probe loses a namespace's
//! executors all at once.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_manager::leader::core::{longest_lease_ms, tick_ms};

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
/// the previous step's write, the reap, one plan per `plan_cap` shards moved; the pushes to
/// every receiver, `max_deliveries_in_flight` at a time, behind a round already under way, each
/// a round trip at the longest transit; and one poll of [`settle`].
fn delivery_slack_us(scenario: &Scenario, shards_moved: usize, receivers: usize) -> u64 {
    let plans = shards_moved.div_ceil(scenario.plan_cap.max(1)) as u64;
    let push_rounds = receivers.div_ceil(scenario.max_deliveries_in_flight.max(1)) as u64 + 1;
    let round_trip_us = 2 * (crate::scenario::MIN_TRANSIT_US + scenario.typical_delay_us);
    (2 + plans) * scenario.commit_latency_us + push_rounds * round_trip_us + POLL_US
}

/// I4: a crashed executor's shards are re-homed within lease + tick.
fn i4_rehoming_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: i4_rehoming_probe".to_owned());
    world.coverage.i4_probes += 1;
    let slot = world.processes.len() - 1;
    let namespace = world.scenario.namespace_of_slot(slot).to_owned();
    let lease_ms = current_lease_ms(world, &namespace);
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    let shards_moved = world.processes[slot]
        .as_ref()
        .map_or(0, |p| p.core.assignment().held().len());
    world.kill(slot);
    let took = settle(world, "after the I4 kill")?;
    let bound = (lease_ms + tick_ms(lease_ms)) * 1_000
        + delivery_slack_us(&world.scenario, shards_moved, world.processes.len() - 1);
    if took > bound {
        return Err(Violation {
            invariant: "I4",
            detail: format!(
                "a killed executor's shards were re-homed after {:.1} ms, bound lease + tick + slack = {:.1} ms",
                took as f64 / 1_000.0,
                bound as f64 / 1_000.0
            ),
            at_us: world.now_us,
        });
    }
    unchanged_elsewhere(world, &before, &namespace, "an executor killed")?;
    // The slot comes back for the next probe.
    world.restart(slot);
    settle(world, "after the I4 restart")?;
    Ok(())
}

/// P18.1 after a probe acted in `namespace` only: every other namespace's shards have the
/// owners and epochs they had in `before`, and none is releasing. Counted when there was another
/// namespace to check.
fn unchanged_elsewhere(
    world: &mut World,
    before: &LeaseState,
    namespace: &str,
    what: &str,
) -> Result<(), Violation> {
    let Some(after) = world.leader_state() else {
        return Ok(());
    };
    let mut checked = false;
    for space in before.spaces().filter(|space| space.name() != namespace) {
        checked = true;
        let name = space.name();
        let now = after.space(name);
        let moved = space.shards().iter().find(|was| {
            let is = now.and_then(|now| now.shard(was.id));
            is.is_none_or(|is| {
                is.owner != was.owner || is.epoch != was.epoch || is.handoff.is_some()
            })
        });
        if let Some(was) = moved {
            let is = now.and_then(|now| now.shard(was.id));
            return Err(Violation {
                invariant: "P18.1",
                detail: format!(
                    "{what} in {namespace} moved {}: {:?} at epoch {} before, {:?} after",
                    shard_name(name, was.id),
                    was.owner,
                    was.epoch,
                    is.map(|is| (&is.owner, is.epoch, &is.handoff))
                ),
                at_us: world.now_us,
            });
        }
    }
    if checked {
        world.coverage.isolation_checks += 1;
    }
    Ok(())
}

/// The last slot whose executor states a zone (P18.3), if any does: the zone crash probe kills
/// its zone in its namespace.
fn last_zoned_slot(world: &World) -> Option<Slot> {
    (0..world.processes.len())
        .rev()
        .find(|&slot| world.scenario.zone_of_slot(slot).is_some())
}

/// The slots of `namespace` in `zone` whose executors run (admit), to be killed together.
fn live_slots_of_zone(world: &World, namespace: &str, zone: &str) -> Vec<Slot> {
    world
        .slots_in(namespace)
        .into_iter()
        .filter(|&slot| world.scenario.zone_of_slot(slot).as_deref() == Some(zone))
        .filter(|&slot| world.processes[slot].as_ref().is_some_and(|p| p.admits()))
        .collect()
}

/// P18.3 and I4 for a whole zone: every executor of one zone (`slot`'s, in `slot`'s namespace:
/// placement spreads each namespace over its own executors' zones) is killed at once.
///
/// I4 is timed on the leader's state: every shard has a survivor for its owner (a handoff
/// between survivors is balance, not re-homing) within lease + tick of the kill, plus a renewal
/// in flight at the kill (stamped up to a transit and a commit later, and the lease runs from
/// that stamp) and the writes: a reap per crashed executor (their leases lapse one by one, each
/// from its own last renewal) and the plans for every shard moved, one commit each. A shard of
/// the first one reaped may be placed on a zone-mate that is dead but not yet lapsed and move
/// again when that one is reaped, so the plans are counted from the epochs minted. Then the
/// fleet must settle (deliveries and all).
///
/// P18.3 exactly, when the zone's executors were reaped in one entry (lost at once): every shard
/// a survivor held stays with it at its epoch (only the zone's shards move). Always: the settled
/// fleet is spread by zone over the survivors, and no other namespace's shard moved (P18.1).
fn zone_crash_probe(world: &mut World, slot: Slot) -> Result<(), Violation> {
    let Some(zone) = world.scenario.zone_of_slot(slot) else {
        return Ok(());
    };
    let namespace = world.scenario.namespace_of_slot(slot).to_owned();
    world.note(|| format!("probe: zone_crash_probe, zone {zone} of {namespace}"));
    world.coverage.zone_crashes += 1;
    world.coverage.namespace_zone_crashes += u64::from(!is_default_namespace(&namespace));
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    let crash = ZoneCrash {
        lease_ms: current_lease_ms(world, &namespace),
        crashed: live_slots_of_zone(world, &namespace, &zone),
        zone,
        namespace,
    };
    let crashed_ids: BTreeSet<String> = crash
        .crashed
        .iter()
        .filter_map(|&slot| world.executor_id_of(slot))
        .collect();
    let killed_at_us = world.now_us;
    for &slot in &crash.crashed {
        world.kill(slot);
    }
    if !rehomed_within_i4(world, &crash, &before, &crashed_ids, killed_at_us)? {
        return Ok(());
    }
    settle(world, "after a whole zone was killed")?;
    let now_us = world.now_us;
    let Some(after) = world.leader_state() else {
        return Ok(());
    };
    if survivors_kept_theirs(after, &crash, &before, &crashed_ids, now_us)? {
        world.coverage.zone_crashes_staggered += 1;
    }
    unchanged_elsewhere(world, &before, &crash.namespace, "losing a whole zone")?;
    for slot in crash.crashed {
        world.restart(slot);
    }
    settle(world, "after the zone came back")?;
    Ok(())
}

/// A zone killed at once by [`zone_crash_probe`].
struct ZoneCrash {
    zone: String,
    namespace: String,
    lease_ms: u64,
    /// Its live slots, killed.
    crashed: Vec<Slot>,
}

/// I4: runs until every shard of the namespace has a live owner (a handoff between survivors
/// is balance, not re-homing), which must come within the bound of [`zone_crash_probe`]; false
/// when the leader is gone at the end.
fn rehomed_within_i4(
    world: &mut World,
    crash: &ZoneCrash,
    before: &LeaseState,
    crashed_ids: &BTreeSet<String>,
    killed_at_us: u64,
) -> Result<bool, Violation> {
    let (zone, namespace) = (&crash.zone, &crash.namespace);
    let rehomed = |state: &LeaseState| {
        state.space(namespace).is_some_and(|space| {
            space.shards().iter().all(|shard| {
                shard
                    .owner
                    .as_ref()
                    .is_some_and(|owner| !crashed_ids.contains(owner))
            })
        })
    };
    while !world.leader_state().is_some_and(rehomed) {
        if world.now_us - killed_at_us > SETTLE_LIMIT_US {
            return Err(Violation {
                invariant: "liveness",
                detail: format!(
                    "zone {zone}'s shards{} were not re-homed within {} s",
                    of_namespace(namespace),
                    SETTLE_LIMIT_US / 1_000_000
                ),
                at_us: world.now_us,
            });
        }
        let next = world.now_us + POLL_US;
        world.run_until(next)?;
    }
    let took = world.now_us - killed_at_us;
    let Some(rehomed_state) = world.leader_state() else {
        return Ok(false);
    };
    let moved = epochs_minted(before, rehomed_state, namespace);
    let scenario = &world.scenario;
    let renewal_in_flight_us =
        crate::scenario::MIN_TRANSIT_US + scenario.typical_delay_us + scenario.commit_latency_us;
    let writes =
        crash.crashed.len() as u64 + (moved as usize).div_ceil(scenario.plan_cap.max(1)) as u64;
    let lease_ms = crash.lease_ms;
    let bound = (lease_ms + tick_ms(lease_ms)) * 1_000
        + renewal_in_flight_us
        + writes * scenario.commit_latency_us
        + POLL_US;
    if took > bound {
        return Err(Violation {
            invariant: "I4",
            detail: format!(
                "zone {zone}'s shards{} were re-homed after {:.1} ms, bound lease + tick + a renewal in flight + {writes} writes = {:.1} ms",
                of_namespace(namespace),
                took as f64 / 1_000.0,
                bound as f64 / 1_000.0
            ),
            at_us: world.now_us,
        });
    }
    Ok(true)
}

/// P18.3: a zone lost at once keeps every survivor's shard in place. When its leases lapse at
/// different steps, the plans between see the zone still partly there, and the split of the
/// whole lost zone may then take back a shard those plans gave a survivor (still the fewest
/// moves at each step, P5.4). Reaped in one entry, the zone is lost at once. Whether the zone
/// was reaped in steps (and nothing was judged).
fn survivors_kept_theirs(
    after: &LeaseState,
    crash: &ZoneCrash,
    before: &LeaseState,
    crashed_ids: &BTreeSet<String>,
    now_us: u64,
) -> Result<bool, Violation> {
    let (zone, namespace) = (&crash.zone, &crash.namespace);
    let reaped_by: BTreeSet<Option<u64>> = crashed_ids
        .iter()
        .map(|id| after.tombstone(id).map(|t| t.removed_revision))
        .collect();
    if reaped_by.len() > 1 {
        return Ok(true);
    }
    if let Some((was, now)) = shards_of(before, namespace)
        .zip(shards_of(after, namespace))
        .find(|(was, now)| {
            was.owner
                .as_ref()
                .is_some_and(|owner| !crashed_ids.contains(owner))
                && (now.owner != was.owner || now.epoch != was.epoch)
        })
    {
        return Err(Violation {
            invariant: "P18.3",
            detail: format!(
                "losing zone {zone} moved {} of a survivor: {:?} at epoch {} before, {:?} at epoch {} after",
                shard_name(namespace, was.id),
                was.owner,
                was.epoch,
                now.owner,
                now.epoch
            ),
            at_us: now_us,
        });
    }
    Ok(false)
}

/// P18.4: `slot`'s namespace prefers `slot`'s zone. Once settled, every one of its shards is with
/// an executor of that zone, spread over them by capacity (`settle` checks the spread over the
/// preferred executors, [`owners_of`]). The zone is then killed whole: the namespace settles with
/// every shard owned in the other zones (a preference is not a requirement; the zone crash probe
/// times re-homing); once the zone is back they all return to it; without the preference the
/// namespace is spread over every zone again. No other namespace's shard moves (P18.1).
fn preference_probe(world: &mut World, slot: Slot) -> Result<(), Violation> {
    let Some(zone) = world.scenario.zone_of_slot(slot) else {
        return Ok(());
    };
    let namespace = world.scenario.namespace_of_slot(slot).to_owned();
    world.note(|| format!("probe: preference_probe, zone {zone} of {namespace}"));
    world.coverage.preference_probes += 1;
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    world.set_preference(&namespace, Some(("zone".to_owned(), zone.clone())));
    settle(world, "after a zone was preferred")?;
    let outside_the_zone = |world: &World| -> Option<String> {
        let state = world.leader_state()?;
        shards_of(state, &namespace).find_map(|shard| {
            let owner = state.executor(shard.owner.as_deref()?)?;
            (zone_of(&owner.labels) != Some(zone.as_str())).then(|| {
                format!(
                    "{} is with {} of zone {:?} though {namespace} prefers zone {zone}",
                    shard_name(&namespace, shard.id),
                    owner.id,
                    zone_of(&owner.labels)
                )
            })
        })
    };
    if let Some(detail) = outside_the_zone(world) {
        return Err(Violation {
            invariant: "P18.4",
            detail,
            at_us: world.now_us,
        });
    }
    let crashed = live_slots_of_zone(world, &namespace, &zone);
    let others_live = world.slots_in(&namespace).len() > crashed.len();
    for &slot in &crashed {
        world.kill(slot);
    }
    settle(world, "after the preferred zone was lost")?;
    if others_live {
        let homeless = world.leader_state().and_then(|state| {
            shards_of(state, &namespace)
                .find(|shard| shard.owner.is_none())
                .map(|shard| shard_name(&namespace, shard.id))
        });
        if let Some(shard) = homeless {
            return Err(Violation {
                invariant: "P18.4",
                detail: format!(
                    "{shard} has no owner after zone {zone} was lost, though {namespace} has                      executors in other zones: a preference is not a requirement"
                ),
                at_us: world.now_us,
            });
        }
    }
    for slot in crashed {
        world.restart(slot);
    }
    settle(world, "after the preferred zone came back")?;
    if let Some(detail) = outside_the_zone(world) {
        return Err(Violation {
            invariant: "P18.4",
            detail: format!("once zone {zone} was back: {detail}"),
            at_us: world.now_us,
        });
    }
    world.set_preference(&namespace, None);
    settle(world, "after the preference was removed")?;
    unchanged_elsewhere(world, &before, &namespace, "a preferred zone lost and back")
}

/// P18.1: a namespace lost whole moves nothing of another. Every executor of one namespace
/// (the scenario's `lost_space`: `default` or another) is killed at once. Within its lease and a
/// tick, a renewal in flight at the kill and one commit per reap, they are all reaped and none of
/// its shards has an owner (no other namespace's executor may take one); every other
/// namespace's shards keep their owners and epochs, then and once the fleet settled. Then they
/// come back and the fleet settles.
fn namespace_loss_probe(world: &mut World) -> Result<(), Violation> {
    let namespace = world
        .scenario
        .space_name(world.scenario.lost_space)
        .to_owned();
    world.note(|| format!("probe: namespace_loss_probe, {namespace}"));
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    let lease_ms = current_lease_ms(world, &namespace);
    let crashed: Vec<Slot> = world
        .slots_in(&namespace)
        .into_iter()
        .filter(|&slot| world.processes[slot].as_ref().is_some_and(|p| p.admits()))
        .collect();
    if crashed.is_empty() {
        return Ok(());
    }
    world.coverage.namespace_losses += 1;
    let killed_at_us = world.now_us;
    for &slot in &crashed {
        world.kill(slot);
    }
    let gone = |state: &LeaseState| {
        state.space(&namespace).is_some_and(|space| {
            space.executors().next().is_none()
                && space.shards().iter().all(|shard| shard.owner.is_none())
        })
    };
    while !world.leader_state().is_some_and(gone) {
        if world.now_us - killed_at_us > SETTLE_LIMIT_US {
            return Err(Violation {
                invariant: "liveness",
                detail: format!(
                    "{namespace}'s executors, all killed, were not reaped within {} s",
                    SETTLE_LIMIT_US / 1_000_000
                ),
                at_us: world.now_us,
            });
        }
        let next = world.now_us + POLL_US;
        world.run_until(next)?;
    }
    let took = world.now_us - killed_at_us;
    let scenario = &world.scenario;
    let renewal_in_flight_us =
        crate::scenario::MIN_TRANSIT_US + scenario.typical_delay_us + scenario.commit_latency_us;
    let bound = (lease_ms + tick_ms(lease_ms)) * 1_000
        + renewal_in_flight_us
        + crashed.len() as u64 * scenario.commit_latency_us
        + POLL_US;
    if took > bound {
        return Err(Violation {
            invariant: "I4",
            detail: format!(
                "{namespace}'s executors, all killed, were reaped after {:.1} ms, bound lease + \
                 tick + a renewal in flight + {} reaps = {:.1} ms",
                took as f64 / 1_000.0,
                crashed.len(),
                bound as f64 / 1_000.0
            ),
            at_us: world.now_us,
        });
    }
    unchanged_elsewhere(world, &before, &namespace, "losing every executor")?;
    settle(world, "after a namespace lost every executor")?;
    unchanged_elsewhere(world, &before, &namespace, "losing every executor")?;
    for slot in crashed {
        world.restart(slot);
    }
    settle(world, "after the lost namespace's executors came back")?;
    Ok(())
}

/// An hour, the wall-clock offset between the leaders of [`i4_across_leader_changes_probe`].
const HOUR_MS: i64 = 3_600_000;
/// How long the probe's elections take.
const PROBE_ELECTION_MS: u64 = 50;

/// I4 across leader changes, whatever the offsets between the managers' wall clocks (P6.4):
/// leadership passes to a manager whose wall clock reads an hour behind the outgoing leader's
/// (before P6.4 every expiry the outgoing leader stored looked an hour away to it), then to one
/// an hour ahead; each time an executor is killed as the new leader takes office, and its shards
/// are re-homed within the election, the new leader's grace (the longest lease, P6.1), a lease
/// and a tick.
fn i4_across_leader_changes_probe(world: &mut World) -> Result<(), Violation> {
    for hours in [-1, 1] {
        world.note(|| format!("probe: i4_across_leader_changes_probe, {hours:+} h"));
        world.coverage.i4_probes += 1;
        let slot = world.processes.len() - 1;
        let namespace = world.scenario.namespace_of_slot(slot).to_owned();
        let lease_ms = current_lease_ms(world, &namespace);
        let Some(state) = world.leader_state() else {
            return Ok(());
        };
        let grace_ms = longest_lease_ms(state);
        let offset_ms = world.leader_offset_ms().unwrap_or(0) + hours * HOUR_MS;
        let shards_moved = world.processes[slot]
            .as_ref()
            .map_or(0, |p| p.core.assignment().held().len());
        world.change_leader(true, 0, PROBE_ELECTION_MS, Some(offset_ms));
        world.kill(slot);
        let took = settle(world, "after the I4 kill across a leader change")?;
        let bound = (PROBE_ELECTION_MS + grace_ms + lease_ms + tick_ms(lease_ms)) * 1_000
            + delivery_slack_us(&world.scenario, shards_moved, world.processes.len() - 1);
        if took > bound {
            return Err(Violation {
                invariant: "I4",
                detail: format!(
                    "after a leader change to a clock {hours:+} h off, a killed executor's shards \
                     were re-homed after {:.1} ms, bound election + grace + lease + tick + slack \
                     = {:.1} ms (P6.4)",
                    took as f64 / 1_000.0,
                    bound as f64 / 1_000.0
                ),
                at_us: world.now_us,
            });
        }
        world.restart(slot);
        settle(world, "after the I4 restart across a leader change")?;
    }
    Ok(())
}

/// An executor that takes shards (P5.4), as placement by count weighs it: its capacity (P15.1)
/// and its zone (P18.3; those stating none are one zone of their own).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    id: String,
    capacity: u64,
    zone: Option<String>,
}

impl Owner {
    fn of(executor: &Executor) -> Self {
        Self {
            id: executor.id.clone(),
            capacity: capacity_of(executor),
            zone: zone_of(&executor.labels).map(str::to_owned),
        }
    }
}

/// The executors of `space` that take shards (not draining), with their capacities and zones:
/// while one carrying the namespace's preferred label does, only those (P18.4).
fn owners_of(space: Space<'_>) -> Vec<Owner> {
    let takers: Vec<&Executor> = space.executors().filter(|e| !e.draining).collect();
    let carries = |executor: &Executor, (key, value): &(String, String)| {
        executor.labels.get(key) == Some(value)
    };
    let preferred = space
        .namespace()
        .placement
        .prefer
        .as_ref()
        .filter(|prefer| takers.iter().any(|e| carries(e, prefer)));
    takers
        .into_iter()
        .filter(|e| preferred.is_none_or(|prefer| carries(e, prefer)))
        .map(Owner::of)
        .collect()
}

/// `namespace`'s shards in `state`, ascending (none if it has none).
fn shards_of<'a>(
    state: &'a LeaseState,
    namespace: &str,
) -> impl Iterator<Item = &'a leasehold_manager::lease::Shard> + 'a {
    state
        .namespace(namespace)
        .into_iter()
        .flat_map(|ns| ns.shards().iter())
}

/// `owners` grouped by zone; one group when they state at most one zone (P18.3).
fn zones_of(owners: &[Owner]) -> Vec<Vec<&Owner>> {
    let mut zones: BTreeMap<Option<&str>, Vec<&Owner>> = BTreeMap::new();
    for owner in owners {
        zones.entry(owner.zone.as_deref()).or_default().push(owner);
    }
    zones.into_values().collect()
}

/// The floor and the ceiling of a share `total × capacity ÷ of_capacity` (P15.2).
fn share(total: u64, capacity: u64, of_capacity: u64) -> (u64, u64) {
    let weighted = total * capacity;
    let floor = weighted / of_capacity.max(1);
    (
        floor,
        floor + u64::from(!weighted.is_multiple_of(of_capacity.max(1))),
    )
}

/// Why the holdings (`held` of each owner) of `shards` are off the spread by capacity, if they
/// are: each owner holds the floor or the ceiling of its share (P15.2; with equal capacities
/// `shards ÷ owners` rounded down or up, P5.4). With zones (P18.3) each zone holds the floor or
/// the ceiling of its share of the shards by its capacity, and each owner the floor or the
/// ceiling of its share of what its zone holds.
fn off_the_spread(shards: u64, owners: &[Owner], held: impl Fn(&str) -> u64) -> Option<String> {
    let total_capacity: u64 = owners.iter().map(|o| o.capacity).sum();
    let zones = zones_of(owners);
    for members in &zones {
        let zone_capacity: u64 = members.iter().map(|o| o.capacity).sum();
        let zone_held: u64 = members.iter().map(|o| held(&o.id)).sum();
        let zone_total = if zones.len() > 1 {
            let (floor, ceiling) = share(shards, zone_capacity, total_capacity);
            if zone_held < floor || zone_held > ceiling {
                return Some(format!(
                    "zone {:?} holds {zone_held} shards, its share by capacity is {floor}..={ceiling}",
                    members.first().and_then(|o| o.zone.as_deref())
                ));
            }
            zone_held
        } else {
            shards
        };
        for owner in members {
            let held = held(&owner.id);
            let (floor, ceiling) = share(zone_total, owner.capacity, zone_capacity);
            if held < floor || held > ceiling {
                return Some(format!(
                    "{} holds {held} shards, its share by capacity is {floor}..={ceiling}",
                    owner.id
                ));
            }
        }
    }
    None
}

/// The most shards placement by count may give `id` of `shards` over `owners`: the ceiling of
/// its share (P15.2); with zones (P18.3) the ceiling of its share of its zone's quota when that
/// quota is at its ceiling.
fn count_ceiling(shards: u64, owners: &[Owner], id: &str) -> u64 {
    let total_capacity: u64 = owners.iter().map(|o| o.capacity).sum();
    let zones = zones_of(owners);
    let Some(members) = zones
        .iter()
        .find(|members| members.iter().any(|o| o.id == id))
    else {
        return 0;
    };
    let Some(owner) = members.iter().find(|o| o.id == id) else {
        return 0;
    };
    if zones.len() <= 1 {
        return share(shards, owner.capacity, total_capacity).1;
    }
    let zone_capacity: u64 = members.iter().map(|o| o.capacity).sum();
    let (_, zone_ceiling) = share(shards, zone_capacity, total_capacity);
    share(zone_ceiling, owner.capacity, zone_capacity).1
}

/// The most of `held` (by owner) that a quota of `total` shards split over `members` keeps in
/// place: each keeps what it holds up to its quota, the floor or the ceiling of its share; the
/// ceilings the floors leave over keep one more shard only for a member holding more than its
/// floor.
fn most_kept(total: u64, members: &[&Owner], held: &impl Fn(&str) -> u64) -> u64 {
    let capacity: u64 = members.iter().map(|o| o.capacity).sum();
    let shares: Vec<(u64, u64, u64)> = members
        .iter()
        .map(|o| {
            let (floor, ceiling) = share(total, o.capacity, capacity);
            (held(&o.id), floor, ceiling)
        })
        .collect();
    let floors: u64 = shares.iter().map(|(_, floor, _)| floor).sum();
    let ceilings = total.saturating_sub(floors);
    let kept_by_floors: u64 = shares.iter().map(|(held, floor, _)| *held.min(floor)).sum();
    let kept_by_a_ceiling = shares
        .iter()
        .filter(|(held, floor, ceiling)| ceiling > floor && held > floor)
        .count() as u64;
    kept_by_floors + ceilings.min(kept_by_a_ceiling)
}

/// The fewest shards that must move from `before` (every shard owned, none releasing: a settled
/// fleet) to a spread by capacity over `owners` (P15.2, P5.4): every shard not kept in place
/// moves once. Without zones the one split of all the shards; with zones (P18.3) every way of
/// giving each zone the floor or the ceiling of its share is tried (at most 2^[`crate::scenario::MAX_ZONES`]),
/// each zone's quota split over its members as above, and the one keeping most counts.
fn fewest_moves(before: &LeaseState, namespace: &str, owners: &[Owner]) -> u64 {
    if owners.is_empty() {
        return 0;
    }
    let shards = shards_of(before, namespace).count() as u64;
    let held = |id: &str| {
        before
            .executor(id)
            .map_or(0, |e| e.owned_shards.len() as u64)
    };
    let zones = zones_of(owners);
    let total_capacity: u64 = owners.iter().map(|o| o.capacity).sum();
    let zone_shares: Vec<(u64, u64)> = zones
        .iter()
        .map(|members| {
            share(
                shards,
                members.iter().map(|o| o.capacity).sum(),
                total_capacity,
            )
        })
        .collect();
    let mut kept = 0;
    for ceilings in 0u32..1 << zones.len() {
        let quotas: Vec<u64> = zone_shares
            .iter()
            .enumerate()
            .map(|(zone, (floor, ceiling))| {
                if ceilings & (1 << zone) != 0 {
                    *ceiling
                } else {
                    *floor
                }
            })
            .collect();
        if quotas.iter().sum::<u64>() != shards {
            continue;
        }
        let kept_here: u64 = zones
            .iter()
            .zip(&quotas)
            .map(|(members, quota)| most_kept(*quota, members, &held))
            .sum();
        kept = kept.max(kept_here);
    }
    shards - kept
}

/// New epochs minted between two states of `namespace`'s shard table: one per shard that
/// changed hands.
fn epochs_minted(before: &LeaseState, after: &LeaseState, namespace: &str) -> u64 {
    shards_of(after, namespace)
        .zip(shards_of(before, namespace))
        .map(|(a, b)| a.epoch - b.epoch)
        .sum()
}

/// The executors of `namespace` that own shards at the end, with their capacities and zones.
fn owners_at_the_end(world: &World, namespace: &str) -> Vec<Owner> {
    world
        .leader_state()
        .and_then(|state| state.space(namespace))
        .map_or_else(Vec::new, owners_of)
}

/// P5.4 in `namespace`: `what` minted `expected` epochs there, the fewest; and P18.1, it moved
/// nothing of another namespace.
fn check_moves(
    world: &mut World,
    before: &LeaseState,
    namespace: &str,
    expected: u64,
    what: &str,
) -> Result<(), Violation> {
    let Some(after) = world.leader_state() else {
        return Ok(());
    };
    let moved = epochs_minted(before, after, namespace);
    if moved != expected {
        return Err(Violation {
            invariant: "P5.4",
            detail: format!(
                "{what} moved {moved} shards{} (new epochs), the fewest that reach a spread by capacity is {expected}",
                of_namespace(namespace)
            ),
            at_us: world.now_us,
        });
    }
    unchanged_elsewhere(world, before, namespace, what)
}

/// P5.4: a joining executor gets shards at once, and the rebalance moves the fewest shards
/// that reach an even spread.
///
/// The joiner joins the scenario's `join_space` (P18.1: only that namespace's shards move).
fn join_probe(world: &mut World) -> Result<(), Violation> {
    let space = world.scenario.join_space;
    let namespace = world.scenario.space_name(space).to_owned();
    world.note(|| format!("probe: join_probe, into {namespace}"));
    world.coverage.join_probes += 1;
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    world.add_slot_in(space);
    settle(world, "after a join")?;
    let expected = fewest_moves(&before, &namespace, &owners_at_the_end(world, &namespace));
    check_moves(world, &before, &namespace, expected, "a join")
}

/// The slot whose process holds the most shards, if any holds one.
fn fullest_slot(world: &World) -> Option<Slot> {
    (0..world.processes.len())
        .filter_map(|slot| {
            let held = world.processes[slot]
                .as_ref()?
                .core
                .assignment()
                .held()
                .len();
            (held > 0).then_some((held, slot))
        })
        .max()
        .map(|(_, slot)| slot)
}

/// An owner drained while it cannot answer: the fullest slot paused for [`paused_ms`], then
/// drained, and 30 ms for the plans to commit. Its handoffs stay pending until it resumes.
struct PausedDrain {
    slot: Slot,
    resumes_at_us: u64,
}

fn drain_while_paused(world: &mut World) -> Result<Option<PausedDrain>, Violation> {
    let Some(slot) = fullest_slot(world) else {
        return Ok(None);
    };
    let namespace = world.scenario.namespace_of_slot(slot).to_owned();
    let paused = paused_ms(current_lease_ms(world, &namespace));
    world.pause(slot, paused);
    let resumes_at_us = world.now_us + paused * 1_000;
    world.set_draining(slot, true);
    let plans_committed = world.now_us + 30_000;
    world.run_until(plans_committed)?;
    Ok(Some(PausedDrain {
        slot,
        resumes_at_us,
    }))
}

/// P5.4 with handoffs under way: an owner drained while it cannot answer (paused, shorter than
/// its lease), then an executor joins before the handoffs complete. The plan retargets the
/// pending handoffs rather than revoking more, so the total moved is still the fewest.
fn drain_join_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: drain_join_probe".to_owned());
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    let Some(PausedDrain { slot: drained, .. }) = drain_while_paused(world)? else {
        return Ok(());
    };
    let space = world.scenario.space_of_slot(drained);
    let namespace = world.scenario.space_name(space).to_owned();
    // The premise: the drain's plan moves only the drained owner's shards, whose handoffs wait
    // while it is paused, so the joiner's plan can retarget them. A plan that also moved another
    // owner's shard (a share that reaches a whole shard once the drained executor's capacity is
    // gone) completes that move before the joiner arrives, and no plan can take it back: then
    // the fewest from before to the end is out of reach and the probe is moot, not failed.
    let only_the_drained_owner_moved = only_the_drained_owner_moved(world, &before, drained);
    // The joiner joins the drained owner's namespace.
    world.add_slot_in(space);
    settle_with(world, "after a drain and a join", false)?;
    if only_the_drained_owner_moved {
        let expected = fewest_moves(&before, &namespace, &owners_at_the_end(world, &namespace));
        check_moves(world, &before, &namespace, expected, "a drain and a join")?;
    }
    world.set_draining(drained, false);
    settle(world, "after the undrain")?;
    Ok(())
}

/// Whether, from `before` to the leader's state now, every shard of the drained slot's namespace
/// either stayed as it was or was the drained slot's executor's: the drain's plan moved nothing
/// else.
fn only_the_drained_owner_moved(world: &World, before: &LeaseState, drained: usize) -> bool {
    let namespace = world.scenario.namespace_of_slot(drained).to_owned();
    let drained_id = world.executor_id_of(drained);
    world.leader_state().is_some_and(|now| {
        shards_of(now, &namespace)
            .zip(shards_of(before, &namespace))
            .all(|(now, was)| {
                let unchanged =
                    now.epoch == was.epoch && now.owner == was.owner && now.handoff.is_none();
                unchanged || (was.owner.is_some() && was.owner == drained_id)
            })
    })
}

/// P5.4: a drain undone while its handoffs are pending (the owner paused, shorter than its
/// lease, so it has not acknowledged) gives every shard back to its owner: nothing moves.
fn drain_cancel_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: drain_cancel_probe".to_owned());
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    let Some(PausedDrain {
        slot: drained,
        resumes_at_us: resumes_at,
    }) = drain_while_paused(world)?
    else {
        return Ok(());
    };
    // The premise, as for `drain_join_probe`: the drain's plan moved only the drained owner's
    // shards. A fleet not yet at its spread (a joiner still waiting for the balance budget) may
    // get a move of another owner's shard in the same plan, which completes at once and which
    // no undrain takes back: then nothing-moves is out of reach and the probe is moot.
    let only_the_drained_owner_moved = only_the_drained_owner_moved(world, &before, drained);
    world.set_draining(drained, false);
    let namespace = world.scenario.namespace_of_slot(drained).to_owned();
    // The premise: the undrain is planned through while the owner is still paused. With capped
    // plans and long commits it may not be, and then the probe is moot, not failed.
    let quiet = run_until_quiet(world, resumes_at)?;
    settle(world, "after a drain undone")?;
    if !quiet || !only_the_drained_owner_moved {
        return Ok(());
    }
    check_moves(
        world,
        &before,
        &namespace,
        0,
        "a drain undone before its handoffs completed",
    )
}

/// Runs until the leader has nothing in flight and nothing left to plan, or `deadline_us`;
/// says whether it got there.
fn run_until_quiet(world: &mut World, deadline_us: u64) -> Result<bool, Violation> {
    loop {
        let quiet = !world.leader_is_busy()
            && world.leader_state().is_some()
            && world
                .leader_namespaces()
                .iter()
                .all(|namespace| world.leader_plan_in(namespace).is_none());
        if quiet {
            return Ok(true);
        }
        if world.now_us >= deadline_us {
            return Ok(false);
        }
        let next = (world.now_us + 1_000).min(deadline_us);
        world.run_until(next)?;
    }
}

/// `namespace`'s lease now (P18.1: each namespace's own).
fn current_lease_ms(world: &World, namespace: &str) -> u64 {
    world
        .leader_state()
        .and_then(|s| s.space(namespace))
        .and_then(|s| s.config())
        .map_or(world.scenario.lease_ms, |c| c.lease_duration_ms)
}

/// P5.4 with a drain undone after another executor left: the drained owner (paused, so its
/// handoffs are pending) keeps its shards by cancelling them, however the deficits the leaver
/// opened are filled; counted from the state the undrain is planned on.
fn drain_undone_while_one_leaves_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: drain_undone_while_one_leaves_probe".to_owned());
    let Some(drained) = fullest_slot(world) else {
        return Ok(());
    };
    // The leaver is of the drained owner's namespace, where its departure opens deficits.
    let namespace = world.scenario.namespace_of_slot(drained).to_owned();
    let Some(leaver) = world
        .slots_in(&namespace)
        .into_iter()
        .filter(|&slot| slot != drained)
        .find(|&slot| {
            world.processes[slot]
                .as_ref()
                .is_some_and(|p| !p.core.assignment().held().is_empty())
        })
    else {
        return Ok(());
    };
    let Some(PausedDrain {
        resumes_at_us: resumes_at,
        ..
    }) = drain_while_paused(world)?
    else {
        return Ok(());
    };
    world.stop_gracefully(leaver);
    // Counted from the state the undrain is planned on, once the leader has planned everything
    // the departure asked for: what it granted while the drain stood had to move then. The
    // premise needs the drained owner still paused; a slow fleet (capped plans, long commits)
    // that cannot get there first makes the probe moot, not failed.
    if !run_until_quiet(world, resumes_at)? {
        world.set_draining(drained, false);
        world.restart(leaver);
        settle(world, "after a drain undone while one left (moot)")?;
        return Ok(());
    }
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    world.set_draining(drained, false);
    let quiet = run_until_quiet(world, resumes_at)?;
    settle(world, "after a drain undone while one left")?;
    if quiet {
        let expected = fewest_moves(&before, &namespace, &owners_at_the_end(world, &namespace));
        check_moves(
            world,
            &before,
            &namespace,
            expected,
            "a drain undone while another executor left",
        )?;
    }
    world.restart(leaver);
    settle(world, "after the leaver came back")?;
    Ok(())
}

/// P6.1 with a lease lengthened, renewed under, then shortened: a new leader whose clock runs
/// ahead of the old one's must still wait out the longest lease any executor was told, or it
/// reaps an executor (paused, so it cannot renew) whose grant still runs. The I1-at-source
/// check at the reap commit catches it. The lease changed is the paused executor's namespace's
/// (P18.1), whose grants count in the longest lease told as `default`'s do.
fn p6_1_shortened_lease_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: p6_1_shortened_lease_probe".to_owned());
    let Some(paused) = fullest_slot(world) else {
        return Ok(());
    };
    let namespace = world.scenario.namespace_of_slot(paused).to_owned();
    let small_ms = current_lease_ms(world, &namespace);
    let Some(state) = world.leader_state() else {
        return Ok(());
    };
    let long_ms = 2 * state.longest_lease_told_ms().max(small_ms) + 1_000;
    world.set_lease_in(&namespace, long_ms);
    // Wait for the executor to renew under the long lease.
    let Some(executor_id) = world.executor_id_of(paused) else {
        return Ok(());
    };
    let deadline = world.now_us + 3 * small_ms * 1_000;
    while world.now_us < deadline {
        let told = world
            .leader_state()
            .and_then(|s| s.executor(&executor_id))
            .map_or(0, |e| e.lease_ttl_told_ms);
        if told + tick_ms(small_ms) >= long_ms {
            break;
        }
        let next = world.now_us + POLL_US;
        world.run_until(next)?;
    }
    world.set_lease_in(&namespace, small_ms);
    let committed = world.now_us + 30_000;
    world.run_until(committed)?;
    world.pause(paused, long_ms);
    let ahead = world.leader_offset_ms().unwrap_or(0) + crate::scenario::MAX_CLOCK_OFFSET_MS;
    world.change_leader(true, 0, 50, Some(ahead));
    let past_the_grant = world.now_us + (long_ms + 2_000) * 1_000;
    world.run_until(past_the_grant)?;
    settle(world, "after the shortened-lease leader change")?;
    Ok(())
}

/// I5: the leader stalls for longer than the lease, then resumes: nobody that renews within
/// the grace is evicted.
fn i5_stall_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: i5_stall_probe".to_owned());
    // Longer than every namespace's lease (P18.1: each has its own).
    let lease_ms = world
        .leader_state()
        .and_then(|s| {
            s.spaces()
                .filter_map(|space| space.config())
                .map(|c| c.lease_duration_ms)
                .max()
        })
        .unwrap_or(world.scenario.lease_ms);
    let before: Vec<String> = world
        .leader_state()
        .map(|s| s.executors().map(|e| e.id.clone()).collect())
        .unwrap_or_default();
    world.stall_leader(2 * lease_ms + lease_ms / 2);
    settle(world, "after a leader stall")?;
    let after: Vec<String> = world
        .leader_state()
        .map(|s| s.executors().map(|e| e.id.clone()).collect())
        .unwrap_or_default();
    if before != after {
        return Err(Violation {
            invariant: "I5",
            detail: format!(
                "a leader stall of {} ms evicted live executors: before {before:?}, after {after:?}",
                2 * lease_ms + lease_ms / 2
            ),
            at_us: world.now_us,
        });
    }
    Ok(())
}

/// How long the leader runs on steady loads after convergence, in budget windows (P15.3's
/// minutes): long enough to balance at a budget of a move or more a minute and then be seen
/// to stay settled for a whole window.
const LOAD_PHASE_WINDOWS: u64 = 4;

/// The lease the operator sets for the load phase. The budget (per minute) and the cooldown
/// (minutes) are the leader's own constants, so the phase lasts minutes whatever the lease;
/// a renewal every 5 s (P3.5) still reports each load a dozen times a minute, and costs a
/// fraction of the events of the seeds' sub-second renewals.
const LOAD_PHASE_LEASE_MS: u64 = 15_000;

/// The load phase looks at the fleet this often.
const LOAD_POLL_US: u64 = 250_000;

/// The leader on steady true loads, once the fleet converged, in a seed whose leader places by
/// reported loads: it runs [`LOAD_PHASE_WINDOWS`] minutes with nothing else happening. Every plan
/// and commit is checked as always (the budget and the cooldown per term, the band trigger and
/// the count ceiling per plan, the tracker per renewal, `crate::checks`); over the phase:
///
/// - P15.4: no shard moves for balance back to an executor it left;
/// - P15.3: once settled, nothing moves for balance. Settled: a minute without a balance move,
///   and every executor's true utilisation inside the band by more than the report noise can
///   carry, so that whatever the leader was told, it sees everyone inside the band;
/// - P15.2: when the lower bound allows it (every shard, as the leader may have been told it,
///   fits in the band's width on the smallest executor) and the leader has stopped moving for a
///   minute, every executor's true utilisation is inside the band, widened by the noise;
/// - with a liar: no honest executor that has a share is starved while the liar holds more than
///   its share, and the liar never ends above four times its share by count.
fn load_phase(world: &mut World) -> Result<(), Violation> {
    if !world.load.fleet_reports() {
        // Some executor does not report: placement goes by count (P15.2), checked above.
        return Ok(());
    }
    let namespaces = world.leader_namespaces();
    for namespace in &namespaces {
        world.set_lease_in(namespace, LOAD_PHASE_LEASE_MS);
    }
    world.turn_loads_off(false);
    if !placed_by_reported_loads(world)? {
        return Ok(());
    }
    settle(world, "with loads on again")?;
    let Some(term) = world.leader_term() else {
        return Ok(());
    };
    note_load_phase(world);
    let first_move = world.balance_moves.len();
    let liar = world.liar();
    let liar_count_at_start = liar.as_ref().map_or(0, |(_, id, _)| held_count(world, id));
    // The liar lies of its own namespace's shards only (P18.1): the others are judged as
    // without one.
    let liar_namespace = liar.as_ref().and_then(|(slot, _, _)| {
        world
            .processes
            .get(*slot)
            .and_then(|p| p.as_ref())
            .map(|p| p.namespace.clone())
    });
    let honest = |namespace: &str| liar.is_none() || liar_namespace.as_deref() != Some(namespace);
    let Some(settled_at_us) = run_load_windows(world, term, &namespaces, first_move, &honest)?
    else {
        return Ok(());
    };
    // Whatever the leader does outside the budget (filling an executor left with nothing) is
    // done before the fleet is judged.
    settle(world, "at the end of the load phase")?;
    if world.leader_term() != Some(term) {
        return Ok(());
    }
    let moves = world.balance_moves[first_move..].to_vec();
    never_moved_back(&moves)?;
    let noise = world.load.noise();
    none_moved_once_settled(&moves, &settled_at_us, noise)?;
    for namespace in &namespaces {
        if honest(namespace) {
            inside_band_once_quiet(world, namespace, &moves)?;
        }
    }
    if let Some((_, liar_id, lie)) = liar {
        world.coverage.liar_checks += 1;
        liar_checks(world, &liar_id, lie, liar_count_at_start)?;
    }
    Ok(())
}

/// Runs until every executor renews with its loads and the leader places by them (within a
/// lease): whether it did (it does not when every load is zero).
fn placed_by_reported_loads(world: &mut World) -> Result<bool, Violation> {
    let deadline_us = world.now_us + LOAD_PHASE_LEASE_MS * 1_000;
    loop {
        let next = world.now_us + POLL_US;
        world.run_until(next)?;
        if matches!(
            world.leader_inputs().map(|inputs| inputs.loads),
            Some(Loads::Reported(_))
        ) {
            return Ok(true);
        }
        if world.now_us > deadline_us {
            return Ok(false);
        }
    }
}

/// The load phase's start in the run's notes: the true loads and who holds what.
fn note_load_phase(world: &mut World) {
    let fleet = world.leader_state().map_or_else(String::new, |state| {
        state
            .executors()
            .map(|e| format!("{} (capacity {}) {:?}", e.id, e.capacity, e.owned_shards))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let truth = world.load.true_loads().to_vec();
    world.note(|| {
        format!("load phase: the leader runs on steady loads; true loads {truth:.1?}; {fleet}")
    });
    world.coverage.load_phases += 1;
}

/// The phase's windows on steady loads, under leader `term`: when each honest namespace
/// settled (a minute without a balance move since `first_move`, and every executor inside the
/// band, narrowed by the noise). Each namespace is placed by its own loads and budget, and
/// settles on its own. `None` when the leader changed (nothing in this phase changes it; should
/// one, the phase says nothing).
fn run_load_windows(
    world: &mut World,
    term: u64,
    namespaces: &[String],
    first_move: usize,
    honest: &dyn Fn(&str) -> bool,
) -> Result<Option<BTreeMap<String, u64>>, Violation> {
    let start_us = world.now_us;
    let end_us = start_us + LOAD_PHASE_WINDOWS * MINUTE_MS * 1_000;
    let noise = world.load.noise();
    let tolerance = world.scenario.load.tolerance;
    let mut settled_at_us: BTreeMap<String, u64> = BTreeMap::new();
    while world.now_us < end_us {
        let next = (world.now_us + LOAD_POLL_US).min(end_us);
        world.run_until(next)?;
        if world.leader_term() != Some(term) {
            return Ok(None);
        }
        for namespace in namespaces {
            if settled_at_us.contains_key(namespace.as_str()) || !honest(namespace) {
                continue;
            }
            let last_move_us = world.balance_moves[first_move..]
                .iter()
                .rev()
                .find(|m| m.namespace == *namespace)
                .map_or(start_us, |m| m.at_us);
            let quiet = world.now_us >= last_move_us + MINUTE_MS * 1_000;
            if quiet && inside_band(world, namespace, tolerance, noise, Margin::Narrowed) == Ok(())
            {
                settled_at_us.insert(namespace.clone(), world.now_us);
            }
        }
    }
    Ok(Some(settled_at_us))
}

/// P15.4: no shard moved for balance back to an executor it left during the phase.
fn never_moved_back(moves: &[BalanceMove]) -> Result<(), Violation> {
    let mut left: BTreeMap<(&str, u32), BTreeSet<&str>> = BTreeMap::new();
    for step in moves {
        let earlier = left
            .entry((step.namespace.as_str(), step.shard))
            .or_default();
        if earlier.contains(step.to.as_str()) {
            return Err(Violation {
                invariant: "P15.4",
                detail: format!(
                    "{} moved for balance back to {}, which it left earlier on steady loads: {moves:?}",
                    shard_name(&step.namespace, step.shard),
                    step.to
                ),
                at_us: step.at_us,
            });
        }
        earlier.insert(step.from.as_str());
    }
    Ok(())
}

/// P15.3: nothing moved for balance in a namespace after it settled.
fn none_moved_once_settled(
    moves: &[BalanceMove],
    settled_at_us: &BTreeMap<String, u64>,
    noise: f64,
) -> Result<(), Violation> {
    for (namespace, settled_at_us) in settled_at_us {
        if let Some(late) = moves
            .iter()
            .find(|m| m.namespace == *namespace && m.at_us > *settled_at_us)
        {
            return Err(Violation {
                invariant: "P15.3",
                detail: format!(
                    "{} moved for balance from {} to {} after the fleet{} settled at {:.3} ms \
                     (every executor's true utilisation inside the band by more than the noise \
                     of {noise:.3})",
                    shard_name(namespace, late.shard),
                    late.from,
                    late.to,
                    of_namespace(namespace),
                    *settled_at_us as f64 / 1_000.0
                ),
                at_us: late.at_us,
            });
        }
    }
    Ok(())
}

/// P15.2: a namespace whose leader has stopped moving for balance for a minute has every
/// executor inside the band, widened by the noise, when the lower bound allows it.
fn inside_band_once_quiet(
    world: &mut World,
    namespace: &str,
    moves: &[BalanceMove],
) -> Result<(), Violation> {
    let (noise, tolerance) = (world.load.noise(), world.scenario.load.tolerance);
    let quiet_at_the_end = moves
        .iter()
        .rev()
        .find(|m| m.namespace == *namespace)
        .is_none_or(|m| m.at_us + MINUTE_MS * 1_000 <= world.now_us);
    if !quiet_at_the_end || !lower_bound_allows_the_band(world, namespace, tolerance, noise) {
        return Ok(());
    }
    world.coverage.band_checks += 1;
    inside_band(world, namespace, tolerance, noise, Margin::Widened).map_err(|detail| Violation {
        invariant: "P15.2",
        detail: format!(
            "the leader stopped moving for balance{} with an executor outside the band ({:.0} % \
             widened by the noise of {noise:.3}) though every shard fits in it: {detail}",
            of_namespace(namespace),
            tolerance * 100.0
        ),
        at_us: world.now_us,
    })
}

/// How [`inside_band`] allows for the noise of the reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Margin {
    /// The band narrowed by what the noise can carry: however the leader was told the loads,
    /// it sees everyone inside the band.
    Narrowed,
    /// The band widened by it: what the leader may see inside the band, on the true loads.
    Widened,
}

/// `namespace`'s space in the leader's state and what its shards truly carry.
fn space_and_truth<'a>(world: &'a World, namespace: &str) -> Option<(Space<'a>, &'a [f64])> {
    let space = world.leader_state()?.space(namespace)?;
    let truth = world
        .load
        .true_loads_of(world.scenario.space_of_namespace(namespace));
    Some((space, truth))
}

/// Whether every executor of `namespace` has its true utilisation inside the band around the
/// namespace's true mean, narrowed or widened by the noise: an honest report is the truth times
/// `1 ± noise`, so the leader's estimate of every shard's load, a mean of reports, is too, and
/// so are its estimates of each executor's load and of the mean.
fn inside_band(
    world: &World,
    namespace: &str,
    tolerance: f64,
    noise: f64,
    margin: Margin,
) -> Result<(), String> {
    let (Some((space, truth)), Some(now_ms)) =
        (space_and_truth(world, namespace), world.leader_now_ms())
    else {
        return Ok(());
    };
    let load_of = |shard: u32| truth.get(shard as usize).copied().unwrap_or(0.0);
    let Some((utilisations, mean)) = utilisations(space, now_ms, load_of) else {
        return Ok(());
    };
    let spread = (1.0 + noise) / (1.0 - noise);
    let (low, high) = match margin {
        Margin::Narrowed => ((1.0 - tolerance) * spread, (1.0 + tolerance) / spread),
        Margin::Widened => ((1.0 - tolerance) / spread, (1.0 + tolerance) * spread),
    };
    let slack = 1e-9 * mean;
    match utilisations
        .iter()
        .find(|(_, u)| **u < low * mean - slack || **u > high * mean + slack)
    {
        Some((id, u)) => Err(format!(
            "{id} at {u:.3}, band {:.3}..={:.3} around the mean {mean:.3}: {utilisations:?}",
            low * mean,
            high * mean
        )),
        None => Ok(()),
    }
}

/// Whether the band can be met in `namespace` on any loads the leader may have been told
/// (P15.2's "when that is possible"): every shard's load, as high as the noise can report it,
/// fits within the band's width on its smallest executor at the lowest the mean can be reported.
fn lower_bound_allows_the_band(world: &World, namespace: &str, tolerance: f64, noise: f64) -> bool {
    let (Some((space, truth)), Some(now_ms)) =
        (space_and_truth(world, namespace), world.leader_now_ms())
    else {
        return false;
    };
    let load_of = |shard: u32| truth.get(shard as usize).copied().unwrap_or(0.0);
    let Some((_, mean)) = utilisations(space, now_ms, load_of) else {
        return false;
    };
    let smallest = space
        .executors()
        .filter(|e| !e.lease_lapsed(now_ms) && !e.draining)
        .map(capacity_of)
        .min()
        .unwrap_or(1) as f64;
    mean > 0.0
        && truth
            .iter()
            .all(|load| load * (1.0 + noise) <= tolerance * mean * (1.0 - noise) * smallest)
}

/// Shards `executor_id` holds or is receiving (of its namespace).
fn held_count(world: &World, executor_id: &str) -> usize {
    let Some(state) = world.leader_state() else {
        return 0;
    };
    let Some(space) = state
        .executor(executor_id)
        .and_then(|executor| state.space(&executor.namespace))
    else {
        return 0;
    };
    space
        .shards()
        .iter()
        .filter(|shard| {
            let holder = match &shard.handoff {
                Some(handoff) => handoff.to.as_deref(),
                None => shard.owner.as_deref(),
            };
            holder == Some(executor_id)
        })
        .count()
}

/// With a liar at the end of the load phase: no honest executor whose share by count is at
/// least a shard holds none while the liar holds more than the ceiling of its share, and the
/// liar holds no more than four times its share (or what it held when the phase began).
fn liar_checks(
    world: &World,
    liar_id: &str,
    lie: crate::scenario::Lie,
    liar_count_at_start: usize,
) -> Result<(), Violation> {
    let (Some(state), Some(now_ms)) = (world.leader_state(), world.leader_now_ms()) else {
        return Ok(());
    };
    // The liar's namespace: its executors and shards (P18.1).
    let Some(space) = state
        .executor(liar_id)
        .and_then(|executor| state.space(&executor.namespace))
    else {
        return Ok(());
    };
    let owners: Vec<Owner> = space
        .executors()
        .filter(|e| !e.lease_lapsed(now_ms) && !e.draining)
        .map(Owner::of)
        .collect();
    let shards = space.shards().len() as u64;
    let total: u64 = owners.iter().map(|o| o.capacity).sum();
    let Some(liar_capacity) = owners.iter().find(|o| o.id == liar_id).map(|o| o.capacity) else {
        return Ok(());
    };
    let liar_share = (shards * liar_capacity) as f64 / total.max(1) as f64;
    let liar_count = held_count(world, liar_id);
    let counts: BTreeMap<&str, usize> = owners
        .iter()
        .map(|o| (o.id.as_str(), held_count(world, &o.id)))
        .collect();
    // What placement by count may give the liar: the ceiling of its share, or with zones of its
    // share of its zone's quota at the ceiling (P18.3), which the load phase starts from.
    if liar_count as u64 > count_ceiling(shards, &owners, liar_id) {
        for Owner { id, capacity, .. } in &owners {
            let share = (shards * capacity) as f64 / total.max(1) as f64;
            if id != liar_id && share >= 1.0 && counts.get(id.as_str()) == Some(&0) {
                return Err(Violation {
                    invariant: "P15.2",
                    detail: format!(
                        "{id} (share {share:.2}) holds nothing while the liar {liar_id} ({lie:?}) \
                         holds {liar_count}, above its share of {liar_share:.2}: {counts:?}"
                    ),
                    at_us: world.now_us,
                });
            }
        }
    }
    let ceiling = (COUNT_CEILING_OF_SHARE * liar_share).max(liar_count_at_start as f64);
    if liar_count as f64 > ceiling + 1e-9 {
        return Err(Violation {
            invariant: "count ceiling",
            detail: format!(
                "the liar {liar_id} ({lie:?}) holds {liar_count} shards, more than \
                 {COUNT_CEILING_OF_SHARE} times its share of {liar_share:.2} (it held \
                 {liar_count_at_start} when the phase began): {counts:?}"
            ),
            at_us: world.now_us,
        });
    }
    Ok(())
}
