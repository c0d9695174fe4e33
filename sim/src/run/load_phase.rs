//! The load phase (P15.2-P15.4): steady loads, balance inside the band, nothing moved back, and
//! lying reporters.

use super::*;

/// How long the leader runs on steady loads after convergence, in budget windows (P15.3's
/// minutes): long enough to balance at a budget of a move or more a minute and then be seen
/// to stay settled for a whole window.
pub(super) const LOAD_PHASE_WINDOWS: u64 = 4;

/// The lease the operator sets for the load phase. The budget (per minute) and the cooldown
/// (minutes) are the leader's own constants, so the phase lasts minutes whatever the lease;
/// a renewal every 5 s (P3.5) still reports each load a dozen times a minute, and costs a
/// fraction of the events of the seeds' sub-second renewals.
pub(super) const LOAD_PHASE_LEASE_MS: u64 = 15_000;

/// The load phase looks at the fleet this often.
pub(super) const LOAD_POLL_US: u64 = 250_000;

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
pub(super) fn load_phase(world: &mut World) -> Result<(), Violation> {
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
pub(super) fn placed_by_reported_loads(world: &mut World) -> Result<bool, Violation> {
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
pub(super) fn note_load_phase(world: &mut World) {
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
pub(super) fn run_load_windows(
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
pub(super) fn never_moved_back(moves: &[BalanceMove]) -> Result<(), Violation> {
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
pub(super) fn none_moved_once_settled(
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
pub(super) fn inside_band_once_quiet(
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
pub(super) enum Margin {
    /// The band narrowed by what the noise can carry: however the leader was told the loads,
    /// it sees everyone inside the band.
    Narrowed,
    /// The band widened by it: what the leader may see inside the band, on the true loads.
    Widened,
}

/// `namespace`'s space in the leader's state and what its shards truly carry.
pub(super) fn space_and_truth<'a>(
    world: &'a World,
    namespace: &str,
) -> Option<(Space<'a>, &'a [f64])> {
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
pub(super) fn inside_band(
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
pub(super) fn lower_bound_allows_the_band(
    world: &World,
    namespace: &str,
    tolerance: f64,
    noise: f64,
) -> bool {
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
pub(super) fn held_count(world: &World, executor_id: &str) -> usize {
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
pub(super) fn liar_checks(
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
