//! Zone probes (P18.3, P18.4): a zone lost whole, a preferred zone lost, and a namespace's
//! executors lost at once (P18.1).

use super::*;

/// The last slot whose executor states a zone (P18.3), if any does: the zone crash probe kills
/// its zone in its namespace.
pub(super) fn last_zoned_slot(world: &World) -> Option<Slot> {
    (0..world.processes.len())
        .rev()
        .find(|&slot| world.scenario.zone_of_slot(slot).is_some())
}

/// The slots of `namespace` in `zone` whose executors run (admit), to be killed together.
pub(super) fn live_slots_of_zone(world: &World, namespace: &str, zone: &str) -> Vec<Slot> {
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
pub(super) fn zone_crash_probe(world: &mut World, slot: Slot) -> Result<(), Violation> {
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
pub(super) struct ZoneCrash {
    pub(super) zone: String,
    pub(super) namespace: String,
    pub(super) lease_ms: u64,
    /// Its live slots, killed.
    pub(super) crashed: Vec<Slot>,
}

/// I4: runs until every shard of the namespace has a live owner (a handoff between survivors
/// is balance, not re-homing), which must come within the bound of [`zone_crash_probe`]; false
/// when the leader is gone at the end.
pub(super) fn rehomed_within_i4(
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
    let writes = crash.crashed.len() as u64 + scenario.plans_to_move(moved as usize);
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
pub(super) fn survivors_kept_theirs(
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
pub(super) fn preference_probe(world: &mut World, slot: Slot) -> Result<(), Violation> {
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
pub(super) fn namespace_loss_probe(world: &mut World) -> Result<(), Violation> {
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
    wait_until_namespace_gone(world, &namespace, killed_at_us)?;
    check_namespace_reaped_in_time(world, &namespace, lease_ms, crashed.len(), killed_at_us)?;
    unchanged_elsewhere(world, &before, &namespace, "losing every executor")?;
    settle(world, "after a namespace lost every executor")?;
    unchanged_elsewhere(world, &before, &namespace, "losing every executor")?;
    for slot in crashed {
        world.restart(slot);
    }
    settle(world, "after the lost namespace's executors came back")?;
    Ok(())
}

/// Runs until `namespace` has no executor and its shards no owner, killed at `killed_at_us`.
fn wait_until_namespace_gone(
    world: &mut World,
    namespace: &str,
    killed_at_us: u64,
) -> Result<(), Violation> {
    let gone = |state: &LeaseState| {
        state.space(namespace).is_some_and(|space| {
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
    Ok(())
}

/// I4: `crashed` executors of `namespace`, killed at `killed_at_us`, were all reaped within their
/// lease and a tick, a renewal in flight and one commit per reap.
fn check_namespace_reaped_in_time(
    world: &World,
    namespace: &str,
    lease_ms: u64,
    crashed: usize,
    killed_at_us: u64,
) -> Result<(), Violation> {
    let took = world.now_us - killed_at_us;
    let scenario = &world.scenario;
    let renewal_in_flight_us =
        crate::scenario::MIN_TRANSIT_US + scenario.typical_delay_us + scenario.commit_latency_us;
    let bound = (lease_ms + tick_ms(lease_ms)) * 1_000
        + renewal_in_flight_us
        + crashed as u64 * scenario.commit_latency_us
        + POLL_US;
    if took > bound {
        return Err(Violation {
            invariant: "I4",
            detail: format!(
                "{namespace}'s executors, all killed, were reaped after {:.1} ms, bound lease + \
                 tick + a renewal in flight + {} reaps = {:.1} ms",
                took as f64 / 1_000.0,
                crashed,
                bound as f64 / 1_000.0
            ),
            at_us: world.now_us,
        });
    }
    Ok(())
}
