//! Re-homing probes (I4): a crash re-homed within lease + tick, across leader changes too,
//! and nothing else moved.

use super::*;

/// I4: a crashed executor's shards are re-homed within lease + tick.
pub(super) fn i4_rehoming_probe(world: &mut World) -> Result<(), Violation> {
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
    // The managers move the shards within lease + tick (I4); their new owner admits them once it
    // has the set: pushed at once, or, when pushes to it are backed off after failures during the
    // chaos (P5.3), with the answer to its next renewal, at most a renewal period (a tick) later
    // (seed 24326291695160265: the push deferred, the set came with a renewal 150 ms on).
    let bound = (lease_ms + 2 * tick_ms(lease_ms)) * 1_000
        + delivery_slack_us(&world.scenario, shards_moved, world.processes.len() - 1);
    if took > bound {
        return Err(Violation {
            invariant: "I4",
            detail: format!(
                "a killed executor's shards were re-homed after {:.1} ms, bound lease + tick + a renewal period + slack = {:.1} ms",
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
pub(super) fn unchanged_elsewhere(
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
