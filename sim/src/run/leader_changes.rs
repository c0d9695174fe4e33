//! I4 across leader changes: a clock stepped by an hour on the next leader.

use super::*;

/// An hour, the wall-clock offset between the leaders of [`i4_across_leader_changes_probe`].
pub(super) const HOUR_MS: i64 = 3_600_000;
/// How long the probe's elections take.
pub(super) const PROBE_ELECTION_MS: u64 = 50;

/// I4 across leader changes, whatever the offsets between the managers' wall clocks (P6.4):
/// leadership passes to a manager whose wall clock reads an hour behind the outgoing leader's
/// (before P6.4 every expiry the outgoing leader stored looked an hour away to it), then to one
/// an hour ahead; each time an executor is killed as the new leader takes office, and its shards
/// are re-homed within the election, the new leader's grace (the longest lease, P6.1), a lease
/// and a tick.
pub(super) fn i4_across_leader_changes_probe(world: &mut World) -> Result<(), Violation> {
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
