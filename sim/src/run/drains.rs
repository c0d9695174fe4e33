//! Join, drain and stall probes (P5.4, P17.4, P6.1, I5).

use super::*;

/// P5.4: a joining executor gets shards at once, and the rebalance moves the fewest shards
/// that reach an even spread.
///
/// The joiner joins the scenario's `join_space` (P18.1: only that namespace's shards move).
pub(super) fn join_probe(world: &mut World) -> Result<(), Violation> {
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
pub(super) fn fullest_slot(world: &World) -> Option<Slot> {
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
pub(super) struct PausedDrain {
    pub(super) slot: Slot,
    pub(super) resumes_at_us: u64,
}

pub(super) fn drain_while_paused(world: &mut World) -> Result<Option<PausedDrain>, Violation> {
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
pub(super) fn drain_join_probe(world: &mut World) -> Result<(), Violation> {
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
pub(super) fn only_the_drained_owner_moved(
    world: &World,
    before: &LeaseState,
    drained: usize,
) -> bool {
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
pub(super) fn drain_cancel_probe(world: &mut World) -> Result<(), Violation> {
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
pub(super) fn run_until_quiet(world: &mut World, deadline_us: u64) -> Result<bool, Violation> {
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
pub(super) fn current_lease_ms(world: &World, namespace: &str) -> u64 {
    world
        .leader_state()
        .and_then(|s| s.space(namespace))
        .and_then(|s| s.config())
        .map_or(world.scenario.lease_ms, |c| c.lease_duration_ms)
}

/// P5.4 with a drain undone after another executor left: the drained owner (paused, so its
/// handoffs are pending) keeps its shards by cancelling them, however the deficits the leaver
/// opened are filled; counted from the state the undrain is planned on.
pub(super) fn drain_undone_while_one_leaves_probe(world: &mut World) -> Result<(), Violation> {
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
pub(super) fn p6_1_shortened_lease_probe(world: &mut World) -> Result<(), Violation> {
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
pub(super) fn i5_stall_probe(world: &mut World) -> Result<(), Violation> {
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
