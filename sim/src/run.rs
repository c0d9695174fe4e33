//! One seed's run: chaos, then a healed network until the fleet converges, then the leader on
//! steady loads (P15.2-P15.4), then with loads off the liveness probes (I4 re-homing time, P5.4
//! fewest moves on a join, I5 no eviction after a stall).

use std::collections::{BTreeMap, BTreeSet};

use leasehold_manager::leader::core::{longest_lease_ms, tick_ms};

use crate::checks::{utilisations, Violation, COUNT_CEILING_OF_SHARE, MINUTE_MS};
use crate::scenario::{Scenario, LEASE_CHOICES_MS};
use crate::world::{Coverage, Life, Slot, World};
use leasehold_api::wire::zone_of;
use leasehold_manager::lease::{capacity_of, Executor, LeaseState, Loads, MoveReason};

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
    if world.scenario.zones > 1 {
        zone_crash_probe(world)?;
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
/// registered and renewing, the state knows exactly those executors, every shard is owned and
/// none releasing, when placing by count each executor holds the floor or the ceiling of its
/// share by capacity (P15.2; within one when capacities are equal, P5.4), and each process
/// admits exactly its recorded set.
pub(crate) fn settle(world: &mut World, when: &str) -> Result<u64, Violation> {
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
/// counts as not converged (the operator is undoing it).
fn not_converged(world: &World, undrained: bool) -> Option<String> {
    if world.leader_is_stalled() {
        return Some("the leader is stalled".into());
    }
    let Some(state) = world.leader_state() else {
        return Some("no leader".into());
    };
    if world.leader_is_busy() {
        return Some("the leader has writes in flight".into());
    }
    let Some(inputs) = world.leader_inputs() else {
        return Some("no leader".into());
    };
    if inputs.loads == Loads::Learning {
        return Some("the leader is still learning the loads".into());
    }
    if world.load.off() && matches!(inputs.loads, Loads::Reported(_)) {
        return Some("loads are off, and the leader still places by those it was told".into());
    }
    if let Some(plan) = world.leader_plan() {
        let mut due = plan.counts_by_reason();
        due.remove(&MoveReason::Balance);
        if !due.is_empty() {
            return Some(format!("a rebalance is due: {due:?}"));
        }
    }
    if let Some(slot) = (0..world.processes.len()).find(|&slot| {
        world.processes[slot]
            .as_ref()
            .is_some_and(|p| matches!(p.life, Life::Paused { .. }))
    }) {
        return Some(format!("slot {slot} is paused"));
    }
    let mut live = BTreeMap::new();
    for (slot, process) in world.processes.iter().enumerate() {
        let Some(process) = process.as_ref().filter(|p| p.admits()) else {
            continue;
        };
        let Some(executor_id) = process.core.executor_id() else {
            return Some(format!("slot {slot} is not registered"));
        };
        live.insert(executor_id.to_owned(), slot);
    }
    let known: Vec<&str> = state.executors().map(|e| e.id.as_str()).collect();
    if known.len() != live.len() || known.iter().any(|id| !live.contains_key(*id)) {
        return Some(format!(
            "the state knows {known:?}, the live processes are {live:?}"
        ));
    }
    if undrained && (state.maintenance() || state.pins().next().is_some()) {
        return Some("maintenance mode or a pin is still on (the operator is undoing them)".into());
    }
    if let Some(shard) = state
        .shards()
        .iter()
        .find(|s| s.owner.is_none() || s.handoff.is_some())
    {
        return Some(format!("shard {} is unowned or releasing", shard.id));
    }
    if let Some(drained) = state
        .executors()
        .find(|e| e.draining && (undrained || !e.owned_shards.is_empty()))
    {
        return Some(format!("{} is still draining", drained.id));
    }
    if inputs.loads == Loads::Counts {
        let owners = owners_of(state);
        let held = |id: &str| {
            state
                .executor(id)
                .map_or(0, |e| e.owned_shards.len() as u64)
        };
        if let Some(off) = off_the_spread(state.shards().len() as u64, &owners, held) {
            return Some(off);
        }
    }
    for (executor_id, slot) in &live {
        let Some(now) = world.process_now(*slot) else {
            continue;
        };
        let Some(process) = world.processes[*slot].as_ref() else {
            continue;
        };
        // Every lease fresh, as renewing executors keep it (P3.5: at least two thirds left,
        // less a round trip), so a probe that pauses one starts from a known margin.
        let lease_ms = state.config().map_or(0, |c| c.lease_duration_ms);
        let remaining_ms = process.core.lease().remaining(now).as_millis() as u64;
        if remaining_ms * 10 < lease_ms * FRESH_LEASE_TENTHS {
            return Some(format!(
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
            return Some(format!(
                "slot {slot} ({executor_id}) admits {admitted:?}, recorded {expected:?}"
            ));
        }
    }
    None
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
    let lease_ms = world
        .leader_state()
        .and_then(|s| s.config())
        .map_or(world.scenario.lease_ms, |c| c.lease_duration_ms);
    let slot = world.processes.len() - 1;
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
    // The slot comes back for the next probe.
    world.restart(slot);
    settle(world, "after the I4 restart")?;
    Ok(())
}

/// P18.3 and I4 for a whole zone: every executor of one zone (the last slot's) is killed at once.
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
/// fleet is spread by zone over the survivors.
fn zone_crash_probe(world: &mut World) -> Result<(), Violation> {
    let last = world.processes.len() - 1;
    let Some(zone) = world.scenario.zone_of_slot(last) else {
        return Ok(());
    };
    world.note(|| format!("probe: zone_crash_probe, zone {zone}"));
    world.coverage.zone_crashes += 1;
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    let lease_ms = current_lease_ms(world);
    let crashed: Vec<Slot> = (0..world.processes.len())
        .filter(|&slot| world.scenario.zone_of_slot(slot).as_deref() == Some(zone.as_str()))
        .filter(|&slot| world.processes[slot].as_ref().is_some_and(|p| p.admits()))
        .collect();
    let crashed_ids: BTreeSet<String> = crashed
        .iter()
        .filter_map(|&slot| world.executor_id_of(slot))
        .collect();
    let killed_at_us = world.now_us;
    for &slot in &crashed {
        world.kill(slot);
    }
    // Re-homed: every shard has a live owner (a handoff between survivors is balance, not
    // re-homing).
    let rehomed = |state: &LeaseState| {
        state.shards().iter().all(|shard| {
            shard
                .owner
                .as_ref()
                .is_some_and(|owner| !crashed_ids.contains(owner))
        })
    };
    while !world.leader_state().is_some_and(rehomed) {
        if world.now_us - killed_at_us > SETTLE_LIMIT_US {
            return Err(Violation {
                invariant: "liveness",
                detail: format!(
                    "zone {zone}'s shards were not re-homed within {} s",
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
        return Ok(());
    };
    let moved = epochs_minted(&before, rehomed_state);
    let scenario = &world.scenario;
    let renewal_in_flight_us =
        crate::scenario::MIN_TRANSIT_US + scenario.typical_delay_us + scenario.commit_latency_us;
    let writes = crashed.len() as u64 + (moved as usize).div_ceil(scenario.plan_cap.max(1)) as u64;
    let bound = (lease_ms + tick_ms(lease_ms)) * 1_000
        + renewal_in_flight_us
        + writes * scenario.commit_latency_us
        + POLL_US;
    if took > bound {
        return Err(Violation {
            invariant: "I4",
            detail: format!(
                "zone {zone}'s shards were re-homed after {:.1} ms, bound lease + tick + a renewal in flight + {writes} writes = {:.1} ms",
                took as f64 / 1_000.0,
                bound as f64 / 1_000.0
            ),
            at_us: world.now_us,
        });
    }
    settle(world, "after a whole zone was killed")?;
    let Some(after) = world.leader_state() else {
        return Ok(());
    };
    // Only a zone lost at once keeps every survivor's shard in place: when its leases lapse at
    // different steps, the plans between see the zone still partly there, and the split of the
    // whole lost zone may then take back a shard those plans gave a survivor (still the fewest
    // moves at each step, P5.4). Reaped in one entry, the zone is lost at once.
    let reaped_by: BTreeSet<Option<u64>> = crashed_ids
        .iter()
        .map(|id| after.tombstone(id).map(|t| t.removed_revision))
        .collect();
    if reaped_by.len() > 1 {
        world.coverage.zone_crashes_staggered += 1;
    } else if let Some((was, now)) =
        before
            .shards()
            .iter()
            .zip(after.shards())
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
                "losing zone {zone} moved shard {} of a survivor: {:?} at epoch {} before, {:?} at epoch {} after",
                was.id, was.owner, was.epoch, now.owner, now.epoch
            ),
            at_us: world.now_us,
        });
    }
    for slot in crashed {
        world.restart(slot);
    }
    settle(world, "after the zone came back")?;
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
        let Some(state) = world.leader_state() else {
            return Ok(());
        };
        let lease_ms = state
            .config()
            .map_or(world.scenario.lease_ms, |c| c.lease_duration_ms);
        let grace_ms = longest_lease_ms(state);
        let offset_ms = world.leader_offset_ms().unwrap_or(0) + hours * HOUR_MS;
        let slot = world.processes.len() - 1;
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

/// The executors of `state` that take shards (not draining), with their capacities and zones.
fn owners_of(state: &LeaseState) -> Vec<Owner> {
    state
        .executors()
        .filter(|e| !e.draining)
        .map(Owner::of)
        .collect()
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
fn fewest_moves(before: &LeaseState, owners: &[Owner]) -> u64 {
    if owners.is_empty() {
        return 0;
    }
    let shards = before.shards().len() as u64;
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

/// New epochs minted between two states of the shard table: one per shard that changed hands.
fn epochs_minted(before: &LeaseState, after: &LeaseState) -> u64 {
    after
        .shards()
        .iter()
        .zip(before.shards())
        .map(|(a, b)| a.epoch - b.epoch)
        .sum()
}

/// The executors that own shards at the end, with their capacities and zones.
fn owners_at_the_end(world: &World) -> Vec<Owner> {
    world.leader_state().map_or_else(Vec::new, owners_of)
}

fn check_moves(
    world: &World,
    before: &LeaseState,
    expected: u64,
    what: &str,
) -> Result<(), Violation> {
    let Some(after) = world.leader_state() else {
        return Ok(());
    };
    let moved = epochs_minted(before, after);
    if moved != expected {
        return Err(Violation {
            invariant: "P5.4",
            detail: format!(
                "{what} moved {moved} shards (new epochs), the fewest that reach a spread by capacity is {expected}"
            ),
            at_us: world.now_us,
        });
    }
    Ok(())
}

/// P5.4: a joining executor gets shards at once, and the rebalance moves the fewest shards
/// that reach an even spread.
fn join_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: join_probe".to_owned());
    world.coverage.join_probes += 1;
    let Some(before) = world.leader_state().cloned() else {
        return Ok(());
    };
    world.add_slot();
    settle(world, "after a join")?;
    let expected = fewest_moves(&before, &owners_at_the_end(world));
    check_moves(world, &before, expected, "a join")
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
    let paused = paused_ms(current_lease_ms(world));
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
    // The premise: the drain's plan moves only the drained owner's shards, whose handoffs wait
    // while it is paused, so the joiner's plan can retarget them. A plan that also moved another
    // owner's shard (a share that reaches a whole shard once the drained executor's capacity is
    // gone) completes that move before the joiner arrives, and no plan can take it back: then
    // the fewest from before to the end is out of reach and the probe is moot, not failed.
    let drained_id = world.executor_id_of(drained);
    let only_the_drained_owner_moved = world.leader_state().is_some_and(|now| {
        now.shards().iter().zip(before.shards()).all(|(now, was)| {
            let unchanged =
                now.epoch == was.epoch && now.owner == was.owner && now.handoff.is_none();
            unchanged || (was.owner.is_some() && was.owner == drained_id)
        })
    });
    world.add_slot();
    settle_with(world, "after a drain and a join", false)?;
    if only_the_drained_owner_moved {
        let expected = fewest_moves(&before, &owners_at_the_end(world));
        check_moves(world, &before, expected, "a drain and a join")?;
    }
    world.set_draining(drained, false);
    settle(world, "after the undrain")?;
    Ok(())
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
    world.set_draining(drained, false);
    // The premise: the undrain is planned through while the owner is still paused. With capped
    // plans and long commits it may not be, and then the probe is moot, not failed.
    let quiet = run_until_quiet(world, resumes_at)?;
    settle(world, "after a drain undone")?;
    if !quiet {
        return Ok(());
    }
    check_moves(
        world,
        &before,
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
            && world.leader_plan().is_none();
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

fn current_lease_ms(world: &World) -> u64 {
    world
        .leader_state()
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
    let Some(leaver) = (0..world.processes.len())
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
        let expected = fewest_moves(&before, &owners_at_the_end(world));
        check_moves(
            world,
            &before,
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
/// check at the reap commit catches it.
fn p6_1_shortened_lease_probe(world: &mut World) -> Result<(), Violation> {
    world.note(|| "probe: p6_1_shortened_lease_probe".to_owned());
    let Some(paused) = fullest_slot(world) else {
        return Ok(());
    };
    let Some(state) = world.leader_state() else {
        return Ok(());
    };
    let small_ms = current_lease_ms(world);
    let long_ms = 2 * state.longest_lease_told_ms().max(small_ms) + 1_000;
    world.set_lease(long_ms);
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
    world.set_lease(small_ms);
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
    let lease_ms = world
        .leader_state()
        .and_then(|s| s.config())
        .map_or(world.scenario.lease_ms, |c| c.lease_duration_ms);
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
    world.set_lease(LOAD_PHASE_LEASE_MS);
    world.turn_loads_off(false);
    // Every executor renews with its loads within a third of a lease, and the leader then
    // places by them, unless every load is zero.
    let deadline_us = world.now_us + LOAD_PHASE_LEASE_MS * 1_000;
    loop {
        let next = world.now_us + POLL_US;
        world.run_until(next)?;
        if matches!(
            world.leader_inputs().map(|inputs| inputs.loads),
            Some(Loads::Reported(_))
        ) {
            break;
        }
        if world.now_us > deadline_us {
            return Ok(());
        }
    }
    settle(world, "with loads on again")?;
    let Some(term) = world.leader_term() else {
        return Ok(());
    };
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
    let start_us = world.now_us;
    let end_us = start_us + LOAD_PHASE_WINDOWS * MINUTE_MS * 1_000;
    let first_move = world.balance_moves.len();
    let liar = world.liar();
    let liar_count_at_start = liar.as_ref().map_or(0, |(_, id, _)| held_count(world, id));
    let noise = world.load.noise();
    let tolerance = world.scenario.load.tolerance;
    let mut settled_at_us: Option<u64> = None;
    while world.now_us < end_us {
        let next = (world.now_us + LOAD_POLL_US).min(end_us);
        world.run_until(next)?;
        if world.leader_term() != Some(term) {
            // Nothing in this phase changes the leader; should one, the phase says nothing.
            return Ok(());
        }
        if settled_at_us.is_none() && liar.is_none() {
            let last_move_us = world.balance_moves[first_move..]
                .last()
                .map_or(start_us, |m| m.at_us);
            let quiet = world.now_us >= last_move_us + MINUTE_MS * 1_000;
            if quiet && inside_band(world, tolerance, noise, Margin::Narrowed) == Ok(()) {
                settled_at_us = Some(world.now_us);
            }
        }
    }
    // Whatever the leader does outside the budget (filling an executor left with nothing) is
    // done before the fleet is judged.
    settle(world, "at the end of the load phase")?;
    if world.leader_term() != Some(term) {
        return Ok(());
    }
    let moves = world.balance_moves[first_move..].to_vec();
    let mut left: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
    for step in &moves {
        let earlier = left.entry(step.shard).or_default();
        if earlier.contains(step.to.as_str()) {
            return Err(Violation {
                invariant: "P15.4",
                detail: format!(
                    "shard {} moved for balance back to {}, which it left earlier on steady loads: {moves:?}",
                    step.shard, step.to
                ),
                at_us: step.at_us,
            });
        }
        earlier.insert(step.from.as_str());
    }
    if let Some(settled_at_us) = settled_at_us {
        if let Some(late) = moves.iter().find(|m| m.at_us > settled_at_us) {
            return Err(Violation {
                invariant: "P15.3",
                detail: format!(
                    "shard {} moved for balance from {} to {} after the fleet settled at {:.3} ms \
                     (every executor's true utilisation inside the band by more than the noise \
                     of {noise:.3})",
                    late.shard,
                    late.from,
                    late.to,
                    settled_at_us as f64 / 1_000.0
                ),
                at_us: late.at_us,
            });
        }
    }
    let quiet_at_the_end = moves
        .last()
        .is_none_or(|m| m.at_us + MINUTE_MS * 1_000 <= world.now_us);
    if liar.is_none() && quiet_at_the_end && lower_bound_allows_the_band(world, tolerance, noise) {
        world.coverage.band_checks += 1;
        if let Err(detail) = inside_band(world, tolerance, noise, Margin::Widened) {
            return Err(Violation {
                invariant: "P15.2",
                detail: format!(
                    "the leader stopped moving for balance with an executor outside the band \
                     ({:.0} % widened by the noise of {noise:.3}) though every shard fits in it: \
                     {detail}",
                    tolerance * 100.0
                ),
                at_us: world.now_us,
            });
        }
    }
    if let Some((_, liar_id, lie)) = liar {
        world.coverage.liar_checks += 1;
        liar_checks(world, &liar_id, lie, liar_count_at_start)?;
    }
    Ok(())
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

/// Whether every executor's true utilisation is inside the band around the true mean, narrowed
/// or widened by the noise: an honest report is the truth times `1 ± noise`, so the leader's
/// estimate of every shard's load, a mean of reports, is too, and so are its estimates of each
/// executor's load and of the mean.
fn inside_band(world: &World, tolerance: f64, noise: f64, margin: Margin) -> Result<(), String> {
    let (Some(state), Some(now_ms)) = (world.leader_state(), world.leader_now_ms()) else {
        return Ok(());
    };
    let truth = world.load.true_loads();
    let load_of = |shard: u32| truth.get(shard as usize).copied().unwrap_or(0.0);
    let Some((utilisations, mean)) = utilisations(state, now_ms, load_of) else {
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

/// Whether the band can be met on any loads the leader may have been told (P15.2's "when that
/// is possible"): every shard's load, as high as the noise can report it, fits within the
/// band's width on the smallest executor at the lowest the mean can be reported.
fn lower_bound_allows_the_band(world: &World, tolerance: f64, noise: f64) -> bool {
    let (Some(state), Some(now_ms)) = (world.leader_state(), world.leader_now_ms()) else {
        return false;
    };
    let truth = world.load.true_loads();
    let load_of = |shard: u32| truth.get(shard as usize).copied().unwrap_or(0.0);
    let Some((_, mean)) = utilisations(state, now_ms, load_of) else {
        return false;
    };
    let smallest = state
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

/// Shards `executor_id` holds or is receiving.
fn held_count(world: &World, executor_id: &str) -> usize {
    world.leader_state().map_or(0, |state| {
        state
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
    })
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
    let owners: Vec<Owner> = state
        .executors()
        .filter(|e| !e.lease_lapsed(now_ms) && !e.draining)
        .map(Owner::of)
        .collect();
    let shards = state.shards().len() as u64;
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
