//! Rule tests for the leader core, on explicit leader-clock times.

use super::World;
use crate::leader::core::*;
use crate::lease::{Command, LeaseState};

const LEASE_MS: u64 = 30_000;
const TICK_MS: u64 = LEASE_MS / 3;
const GRACE_MS: u64 = 60_000;

fn guard() -> GuardConfig {
    GuardConfig {
        enabled: true,
        grace_ms: GRACE_MS,
    }
}

#[test]
fn p3_8_tick_is_a_third_of_the_lease() {
    assert_eq!(tick_ms(60_000), 20_000);
    assert_eq!(tick_ms(0), 1);
}

#[test]
fn p6_1_new_leader_reaps_nothing_and_completes_no_expired_handoff_for_one_lease() {
    let mut world = World::new(8, LEASE_MS);
    let dead = world.register("dead", 0);
    // Office taken long after the executor lapsed (at 30 s).
    let took_office = 100_000;
    let mut core = LeaderCore::new(took_office, guard());
    for now in [
        took_office,
        took_office + TICK_MS,
        took_office + LEASE_MS - 1,
    ] {
        let decision = core.step(now, &world.state, None);
        assert!(decision.reap.is_empty(), "at {now}");
        assert!(!decision.complete_expired_handoffs, "at {now}");
        assert!(matches!(
            decision.deferral,
            Some(Deferral::NewLeader { .. })
        ));
    }
    let decision = core.step(took_office + LEASE_MS, &world.state, None);
    assert_eq!(decision.reap, vec![dead]);
    assert!(decision.complete_expired_handoffs);
}

#[test]
fn p6_1_grace_covers_the_longest_lease_told_not_only_the_configured_one() {
    let mut world = World::new(8, LEASE_MS);
    world.register("long", 0);
    world.apply(Command::SetLeaseDuration {
        now_ms: 1,
        lease_duration_ms: 10_000,
    });
    let mut core = LeaderCore::new(0, guard());
    let decision = core.step(10_000, &world.state, None);
    assert!(
        matches!(
            decision.deferral,
            Some(Deferral::NewLeader {
                remaining_ms: 20_000
            })
        ),
        "an executor told 30 s may hold its grant that long: {decision:?}"
    );
}

#[test]
fn p6_3_one_executor_dying_while_others_renew_is_reaped_after_one_lease() {
    let mut world = World::new(8, LEASE_MS);
    let dead = world.register("dead", 0);
    let alive = world.register("alive", 0);
    let mut core = LeaderCore::new(0, guard());
    let mut last_renewal = None;
    let mut reaped_at = None;
    // Steps every tick; `alive` renews every tick, `dead` never does.
    for step in 1..=12 {
        let now = step * TICK_MS;
        world.renew(&alive, now - 100);
        last_renewal = Some(now - 100);
        let decision = core.step(now, &world.state, last_renewal);
        if !decision.reap.is_empty() {
            assert_eq!(decision.reap, vec![dead.clone()]);
            reaped_at = Some(now);
            break;
        }
    }
    let reaped_at = reaped_at.expect("the dead executor is reaped");
    assert!(
        reaped_at <= LEASE_MS + TICK_MS,
        "reaped at {reaped_at}, lease + tick = {}",
        LEASE_MS + TICK_MS
    );
    let _ = last_renewal;
}

/// P6.3 with P18.1: executors renew every third of their own namespace's lease, so the
/// no-renewal window counts ticks of the live executors' leases, not of the shortest lease of
/// any namespace. One executor dying in a namespace with a 3 s lease, while `default`'s executor
/// (30 s lease) renews, is reaped after its lease and a tick of it, not after the guard's grace.
#[test]
fn p6_3_one_executor_dying_in_the_shortest_lease_namespace_is_reaped_after_its_lease() {
    const SHORT_MS: u64 = 3_000;
    let mut world = World::new(8, LEASE_MS);
    world.apply(crate::lease::tests::create_namespace_command(
        "kv", 4, SHORT_MS, None,
    ));
    // Past the new leader's wait for the longest lease (P6.1).
    let start = 2 * LEASE_MS;
    let dead = world.register_in("dead", "kv", start);
    let alive = world.register("alive", start);
    world.renew(&alive, start + 100);
    let mut core = LeaderCore::new(0, guard());
    let mut reaped_at = None;
    // The leader steps a third of the shortest lease apart; `alive` renewed once, 100 ms in,
    // and is not due again for 10 s.
    for step in 1..=20 {
        let now = start + step * tick_ms(SHORT_MS);
        let decision = core.step(now, &world.state, Some(start + 100));
        assert!(decision.deferral.is_none(), "at {now}: {decision:?}");
        if !decision.reap.is_empty() {
            assert_eq!(decision.reap, vec![dead.clone()]);
            reaped_at = Some(now);
            break;
        }
    }
    let reaped_at = reaped_at.expect("the dead executor is reaped");
    assert!(
        reaped_at <= start + SHORT_MS + tick_ms(SHORT_MS),
        "reaped at {reaped_at}"
    );
}

#[test]
fn p6_3_a_late_step_defers_reaping_until_the_overdue_renew() {
    let mut world = World::new(8, LEASE_MS);
    let a = world.register("a", 0);
    let b = world.register("b", 0);
    let mut core = LeaderCore::new(0, guard());
    assert!(core.step(TICK_MS, &world.state, None).reap.is_empty());
    // The leader stalls for two leases: both executors look overdue.
    let resumed = TICK_MS + 2 * LEASE_MS;
    let decision = core.step(resumed, &world.state, None);
    assert!(decision.reap.is_empty(), "{decision:?}");
    assert!(matches!(
        decision.events.as_slice(),
        [GuardEvent::EpisodeStarted {
            reason: GuardReason::LateStep { .. },
            overdue: 2
        }]
    ));
    // `a` renews soon after; `b` a little later, still within the grace: nobody is reaped,
    // even though the steps in between are on time and renewals are flowing again.
    world.renew(&a, resumed + 500);
    let decision = core.step(resumed + TICK_MS, &world.state, Some(resumed + 500));
    assert!(
        decision.reap.is_empty(),
        "b renews within the grace: {decision:?}"
    );
    world.renew(&b, resumed + TICK_MS + 500);
    let decision = core.step(
        resumed + 2 * TICK_MS,
        &world.state,
        Some(resumed + TICK_MS + 500),
    );
    assert!(decision.reap.is_empty());
    assert_eq!(decision.events, vec![GuardEvent::EpisodeEnded]);
}

/// A step is late only when it comes more than a tick after the step a tick was due (P6.3):
/// two ticks after the previous step is on the bound and reaps; a millisecond more is a stall.
#[test]
fn p6_3_a_step_two_ticks_after_the_last_is_not_late_and_one_later_is() {
    for (gap, late) in [(2 * TICK_MS, false), (2 * TICK_MS + 1, true)] {
        let mut world = World::new(8, LEASE_MS);
        let dead = world.register("dead", 0);
        let alive = world.register("alive", 0);
        let mut core = LeaderCore::new(0, guard());
        let first = 2 * TICK_MS;
        core.step(first, &world.state, None);
        // `alive` renews in the window where live executors must have, so only lateness can
        // hold the reap back.
        world.renew(&alive, LEASE_MS + 5_000);
        let decision = core.step(first + gap, &world.state, Some(LEASE_MS + 5_000));
        if late {
            assert!(decision.reap.is_empty(), "gap {gap}: {decision:?}");
            assert!(
                matches!(
                    decision.deferral,
                    Some(Deferral::MassExpiryGuard {
                        reason: GuardReason::LateStep { late_by_ms: 10_001 },
                        ..
                    })
                ),
                "gap {gap}: {decision:?}"
            );
        } else {
            assert_eq!(decision.reap, vec![dead], "gap {gap}: {decision:?}");
            assert_eq!(decision.deferral, None, "gap {gap}");
        }
    }
}

/// The no-renewal window reaches back two ticks before the newest overdue expiry (P6.3): a live
/// executor renews every tick, so one renewal at the window's very start shows the leader is not
/// the one stalled, and the overdue executor is reaped; the last renewal a millisecond before it
/// shows nothing, and the guard holds the reap back.
#[test]
fn p6_3_the_no_renewal_window_starts_two_ticks_before_the_newest_overdue_expiry() {
    let window_start = LEASE_MS - 2 * TICK_MS;
    for (renewed_at, counts) in [(window_start, true), (window_start - 1, false)] {
        let mut world = World::new(8, LEASE_MS);
        let dead = world.register("dead", 0);
        let alive = world.register("alive", 0);
        world.renew(&alive, renewed_at);
        let mut core = LeaderCore::new(0, guard());
        let decision = core.step(LEASE_MS + TICK_MS / 2, &world.state, Some(renewed_at));
        if counts {
            assert_eq!(decision.reap, vec![dead], "{decision:?}");
            assert_eq!(decision.deferral, None);
        } else {
            assert!(decision.reap.is_empty(), "{decision:?}");
            assert_eq!(
                decision.deferral,
                Some(Deferral::MassExpiryGuard {
                    reason: GuardReason::NoRenewals {
                        window_start_ms: window_start
                    },
                    episode_age_ms: 0,
                })
            );
        }
    }
}

#[test]
fn p6_3_no_renewals_from_anyone_defers_then_the_grace_runs_out() {
    let mut world = World::new(8, LEASE_MS);
    let a = world.register("a", 0);
    let b = world.register("b", 0);
    let mut core = LeaderCore::new(0, guard());
    let mut now = 0;
    let mut first_deferral = None;
    while now <= LEASE_MS + GRACE_MS + 2 * TICK_MS {
        now += TICK_MS;
        let decision = core.step(now, &world.state, None);
        let guard_deferral = matches!(decision.deferral, Some(Deferral::MassExpiryGuard { .. }));
        if guard_deferral && first_deferral.is_none() {
            first_deferral = Some(now);
            assert!(matches!(
                decision.events.as_slice(),
                [GuardEvent::EpisodeStarted {
                    reason: GuardReason::NoRenewals { .. },
                    ..
                }]
            ));
        }
        if !decision.reap.is_empty() {
            let started = first_deferral.expect("deferred before reaping");
            assert!(
                now - started >= GRACE_MS,
                "reaped {} ms into the grace",
                now - started
            );
            assert!(matches!(
                decision.events.as_slice(),
                [GuardEvent::GraceExhausted { overdue: 2, .. }]
            ));
            let mut expected = vec![a, b];
            expected.sort();
            assert_eq!(decision.reap, expected);
            return;
        }
    }
    panic!("never reaped after the grace");
}

#[test]
fn p6_3_guard_off_restores_plain_expiry() {
    let mut world = World::new(8, LEASE_MS);
    let a = world.register("a", 0);
    world.register("b", 0);
    let mut core = LeaderCore::new(
        0,
        GuardConfig {
            enabled: false,
            grace_ms: GRACE_MS,
        },
    );
    core.step(TICK_MS, &world.state, None);
    let decision = core.step(TICK_MS + 2 * LEASE_MS, &world.state, None);
    assert_eq!(
        decision.reap.len(),
        2,
        "late step and no renewals, yet the guard is off"
    );
    assert!(decision.reap.contains(&a));
}

#[test]
fn p6_3_a_single_tracked_executor_is_not_held_by_the_no_renewal_rule() {
    let mut world = World::new(8, LEASE_MS);
    let only = world.register("only", 0);
    let mut core = LeaderCore::new(0, guard());
    let mut now = 0;
    loop {
        now += TICK_MS;
        let decision = core.step(now, &world.state, None);
        if !decision.reap.is_empty() {
            assert_eq!(decision.reap, vec![only]);
            assert!(now <= LEASE_MS + TICK_MS);
            return;
        }
        assert!(now < 10 * LEASE_MS, "never reaped");
    }
}

#[test]
fn uninitialised_state_decides_nothing() {
    let mut core = LeaderCore::new(0, guard());
    assert_eq!(
        core.step(1_000_000, &LeaseState::default(), None),
        StepDecision::default()
    );
}

/// P3.8: a step's first write is the reap, on its own; the rebalance is planned on the state
/// the reap left (the dead executor's shards go to the live one), and nothing is written twice.
#[test]
fn p3_8_a_step_reaps_first_then_plans_on_what_the_reap_left() {
    let mut world = World::new(8, LEASE_MS);
    let dead = world.register("dead", 0);
    let live = world.register("live", 0);
    // Both own shards: give them the initial plan.
    let plan = crate::lease::plan_rebalance(&world.state, 1).expect("initial plan");
    world.apply(plan);
    world.renew(&live, LEASE_MS - 1);
    let now = LEASE_MS + 1;
    let mut core = LeaderCore::new(0, guard());
    let decision = core.step(now, &world.state, Some(LEASE_MS - 1));
    assert_eq!(decision.reap, vec![dead.clone()]);
    let mut writes = StepWrites::new(decision);
    let (first, reap) = writes.next_command(&world.state, now).expect("a reap");
    assert_eq!(first, StepWrite::Reap);
    assert!(
        matches!(&reap, Command::Reap { executor_ids, .. } if *executor_ids == vec![dead.clone()])
    );
    world.apply(reap);
    let (second, plan) = writes.next_command(&world.state, now).expect("a plan");
    assert_eq!(second, StepWrite::Rebalance, "no handoff is due");
    match &plan {
        Command::Rebalance { moves, .. } => {
            assert!(!moves.is_empty());
            assert!(moves.iter().all(|m| m.to == live), "{moves:?}");
        }
        other => panic!("expected a plan: {other:?}"),
    }
    world.apply(plan);
    assert!(writes.next_command(&world.state, now).is_none());
}

#[test]
fn an_abandoned_step_writes_nothing_more() {
    let mut world = World::new(8, LEASE_MS);
    world.register("only", 0);
    let mut core = LeaderCore::new(0, guard());
    let mut writes = StepWrites::new(core.step(1, &world.state, None));
    writes.abandon();
    assert!(writes.next_command(&world.state, 1).is_none());
}

/// A plan cut at the cap is continued at once rather than a tick later, so a joiner does not wait
/// ticks for the rest of its shards (P5.4); a plan under the cap is whole and waits for the next
/// step.
#[test]
fn p5_4_only_a_plan_cut_at_the_cap_is_continued_at_once() {
    let writes = StepWrites::with_plan_cap(StepDecision::default(), 2);
    let plan = |moves: usize| Command::Rebalance {
        namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
        now_ms: 0,
        planned_at: 0,
        moves: (0..moves)
            .map(|shard| crate::lease::Move {
                shard: u32::try_from(shard).unwrap_or(u32::MAX),
                to: "ex-1".to_owned(),
            })
            .collect(),
    };
    assert!(!writes.plan_was_capped(&plan(1)));
    assert!(writes.plan_was_capped(&plan(2)));
    assert!(!writes.plan_was_capped(&Command::CompleteHandoffs { now_ms: 0 }));
}

/// The shell logs and counts a step's guard events and deferrals from the decision the step
/// keeps (P6.3: warn when an episode starts, error when the grace runs out, counted in metrics).
#[test]
fn p6_3_a_step_keeps_its_decision_for_the_logs_and_metrics() {
    let reason = GuardReason::LateStep { late_by_ms: 1 };
    let decision = StepDecision {
        reap: Vec::new(),
        complete_expired_handoffs: true,
        deferral: Some(Deferral::MassExpiryGuard {
            reason,
            episode_age_ms: 0,
        }),
        events: vec![GuardEvent::EpisodeStarted { reason, overdue: 2 }],
        ..StepDecision::default()
    };
    assert_eq!(StepWrites::new(decision.clone()).decision(), &decision);
}

/// An hour: the wall-clock offset of the leader whose clock ran ahead.
const HOUR_MS: u64 = 3_600_000;
/// The new leader's wall clock when it takes office: correct, so an hour behind the old one's.
const CORRECT_WALL_MS: u64 = 1_000_000;

/// A state an earlier leader stamped on a clock an hour ahead: `dead` registered, `live` renewed
/// at `HOUR_MS + 1_000`.
fn stamped_an_hour_ahead() -> (World, String, String) {
    let mut world = World::new(8, LEASE_MS);
    let dead = world.register("dead", HOUR_MS);
    let live = world.register("live", HOUR_MS);
    world.renew(&live, HOUR_MS + 1_000);
    (world, dead, live)
}

/// Steps a core taking office at `took_office` every tick for three leases; when was `dead`
/// reaped?
fn reaped_at(world: &World, took_office: u64, dead: &str) -> Option<u64> {
    let mut core = LeaderCore::new(took_office, guard());
    (0..=9)
        .map(|tick| took_office + tick * TICK_MS)
        .find(|&now| core.step(now, &world.state, Some(now)).reap == vec![dead.to_owned()])
}

#[test]
fn p6_4_a_lease_stored_on_a_clock_hours_ahead_ends_within_the_new_leaders_grace() {
    let (world, dead, _) = stamped_an_hour_ahead();
    let took_office = took_office_ms(CORRECT_WALL_MS, &world.state);
    assert_eq!(
        took_office,
        HOUR_MS + 1_000,
        "raised to the latest deadline minus the longest lease"
    );
    let reaped = reaped_at(&world, took_office, &dead).expect("the dead executor is reaped");
    assert!(
        reaped <= took_office + LEASE_MS + TICK_MS,
        "I4: reaped {} ms after taking office, bound grace + tick",
        reaped - took_office
    );
    // On the wall clock alone the dead executor's shards would be stranded for the hour.
    assert_eq!(reaped_at(&world, CORRECT_WALL_MS, &dead), None);
}

#[test]
fn p6_4_no_grant_under_the_new_leader_tells_more_than_the_longest_lease() {
    let (mut world, _, live) = stamped_an_hour_ahead();
    let took_office = took_office_ms(CORRECT_WALL_MS, &world.state);
    world.renew(&live, took_office + 5);
    let grant = world
        .state
        .grant_for(&live, took_office + 5)
        .expect("live is registered");
    assert_eq!(grant.lease_ttl_ms, LEASE_MS);
    assert_eq!(world.state.longest_lease_told_ms(), LEASE_MS);
    // Renewed on the wall clock alone, it would be told most of the hour, and every later
    // leader's grace would grow to match.
    let (mut on_the_wall_clock, _, live) = stamped_an_hour_ahead();
    on_the_wall_clock.renew(&live, CORRECT_WALL_MS + 5);
    let told = on_the_wall_clock
        .state
        .grant_for(&live, CORRECT_WALL_MS + 5)
        .expect("live")
        .lease_ttl_ms;
    assert!(told > HOUR_MS - CORRECT_WALL_MS, "told {told} ms");
    assert_eq!(on_the_wall_clock.state.longest_lease_told_ms(), told);
}

#[test]
fn p6_4_a_clock_behind_the_state_is_not_raised_and_one_ahead_of_it_is_kept() {
    // Stored by a leader whose clock read an hour less than this one's.
    let mut world = World::new(8, LEASE_MS);
    let dead = world.register("dead", CORRECT_WALL_MS);
    let wall_an_hour_later = CORRECT_WALL_MS + HOUR_MS;
    assert_eq!(office_floor_ms(&world.state), CORRECT_WALL_MS);
    assert_eq!(
        took_office_ms(wall_an_hour_later, &world.state),
        wall_an_hour_later
    );
    // The stored expiry looks past: P6.1's grace, not the clock, holds the reap back.
    let reaped = reaped_at(&world, wall_an_hour_later, &dead).expect("reaped");
    assert_eq!(reaped, wall_an_hour_later + LEASE_MS);
    // Nothing stored: the wall clock as it is.
    assert_eq!(took_office_ms(7, &LeaseState::default()), 7);
}

#[test]
fn p6_4_a_handoff_bound_stored_hours_ahead_is_due_within_the_new_leaders_grace() {
    let mut world = World::new(8, LEASE_MS);
    let old_owner = world.register("old-owner", HOUR_MS);
    let placed = crate::lease::plan_rebalance(&world.state, HOUR_MS).expect("first plan");
    world.apply(placed);
    world.renew(&old_owner, HOUR_MS + 1_000);
    world.register("joiner", HOUR_MS + 2_000);
    let handoffs = crate::lease::plan_rebalance(&world.state, HOUR_MS + 2_000).expect("plan");
    world.apply(handoffs);
    assert!(world.state.releasing_count() > 0, "shards releasing");
    let bound = world
        .state
        .releasing()
        .map(|(_, handoff)| handoff.from_grant_expiry_ms)
        .max()
        .expect("a bound");
    assert_eq!(bound, HOUR_MS + 1_000 + LEASE_MS);

    let took_office = took_office_ms(CORRECT_WALL_MS, &world.state);
    let mut core = LeaderCore::new(took_office, guard());
    let after_grace = took_office + LEASE_MS + 1;
    let decision = core.step(after_grace, &world.state, Some(after_grace));
    assert!(decision.complete_expired_handoffs);
    assert!(
        world.state.handoffs_due(after_grace),
        "P5.2: the old owner's grants have run out by the end of the grace"
    );
    assert!(!world.state.handoffs_due(CORRECT_WALL_MS + LEASE_MS + 1));
}

/// P6.7: with reservations, a lease is judged by the copies this term told (from memory and
/// through the log), not by the reservation: an executor answered from memory is kept while its
/// copies run and reaped once they end, by a `ReapLapsed` carrying the judged expiry, which the
/// state machine applies despite the reservation; one with no copy from memory is judged by its
/// told expiry. Without reservations the reap stays a plain `Reap`.
#[test]
fn p6_7_leases_are_judged_by_the_copies_told_not_the_reservation() {
    let mut world = World::new(8, LEASE_MS);
    let answered = world.register("answered", 0);
    let silent = world.register("silent", 0);
    world.apply(Command::SetClusterVersion {
        now_ms: 0,
        cluster_version: leasehold_api::wire::LEASE_RESERVATION_SCHEMA,
    });
    world.apply(Command::ReserveLeases {
        now_ms: 0,
        executor_ids: vec![answered.clone(), silent.clone()],
    });
    let told_from_memory: ToldFromMemory = [(answered.clone(), 50_000)].into_iter().collect();
    let mut core = LeaderCore::new(0, guard());
    core.step_judging(LEASE_MS - 1, &world.state, None, &told_from_memory);
    let now = LEASE_MS + 1;
    let decision = core.step_judging(now, &world.state, Some(now - 1), &told_from_memory);
    assert_eq!(decision.reap, vec![silent.clone()], "{decision:?}");
    let mut writes = StepWrites::new(decision);
    let Some((StepWrite::Reap, command)) = writes.next_command(&world.state, now) else {
        panic!("a reap");
    };
    assert_eq!(
        command,
        Command::ReapLapsed {
            now_ms: now,
            leases: vec![crate::lease::LapsedLease {
                executor_id: silent.clone(),
                judged_expiry_ms: LEASE_MS,
            }],
        }
    );
    world.apply(command);
    assert!(
        world.state.executor(&silent).is_none(),
        "reaped despite its reservation"
    );

    let decision = core.step_judging(50_000, &world.state, Some(49_000), &told_from_memory);
    assert!(decision.reap.is_empty(), "its copy runs to 50 000");
    let decision = core.step_judging(50_001, &world.state, Some(49_000), &told_from_memory);
    assert_eq!(decision.reap, vec![answered.clone()]);
    assert_eq!(decision.judged_expiry_ms.get(&answered), Some(&50_000));
}

/// P3.8: without reservations a lapsed lease is reaped by a plain `Reap`, which a replica of any
/// schema applies.
#[test]
fn p3_8_without_reservations_the_reap_is_a_plain_reap() {
    let mut world = World::new(8, LEASE_MS);
    let dead = world.register("dead", 0);
    let mut core = LeaderCore::new(0, guard());
    core.step(LEASE_MS - 1, &world.state, None);
    let decision = core.step(LEASE_MS + 1, &world.state, None);
    let mut writes = StepWrites::new(decision);
    assert_eq!(
        writes.next_command(&world.state, LEASE_MS + 1),
        Some((
            StepWrite::Reap,
            Command::Reap {
                now_ms: LEASE_MS + 1,
                executor_ids: vec![dead],
            }
        ))
    );
}

/// The namespace and the moves of a step's plan.
fn plan_of(command: &Command) -> (String, Vec<(u32, String)>) {
    match command {
        Command::Rebalance {
            namespace, moves, ..
        } => (
            namespace.clone(),
            moves.iter().map(|m| (m.shard, m.to.clone())).collect(),
        ),
        other => panic!("expected a plan: {other:?}"),
    }
}

/// P18.1: one step plans every namespace, each in its own `Rebalance`, each giving its shards
/// only to its own executors (P18.2).
#[test]
fn p18_1_a_step_plans_every_namespace_with_its_own_executors() {
    let mut world = World::new(4, LEASE_MS);
    world.create_namespace("kv", 6);
    let d = world.register("d", 0);
    let k = world.register_in("k", "kv", 0);
    let mut writes = StepWrites::new(StepDecision::default());
    let mut planned = Vec::new();
    while let Some((write, command)) = writes.next_command(&world.state, 1) {
        assert_eq!(write, StepWrite::Rebalance);
        planned.push(plan_of(&command));
        world.apply(command);
    }
    planned.sort();
    assert_eq!(planned.len(), 2, "{planned:?}");
    assert_eq!(planned[0].0, "default");
    assert!(planned[0].1.iter().all(|(_, to)| *to == d));
    assert_eq!(planned[0].1.len(), 4);
    assert_eq!(planned[1].0, "kv");
    assert!(planned[1].1.iter().all(|(_, to)| *to == k));
    assert_eq!(planned[1].1.len(), 6);
    assert_eq!(world.state.delivered_set(&k).len(), 6);
    assert_eq!(world.state.delivered_set(&d).len(), 4);
}

/// P18.1, fairness: the step's move cap is shared; a namespace needing many moves takes at most
/// its share while others need theirs, so a namespace with a little to place is placed in the
/// same step whichever goes first.
#[test]
fn p18_1_a_namespace_s_storm_takes_only_its_share_of_a_step() {
    let mut planned_first = std::collections::BTreeSet::new();
    for extra_entries in 0..4 {
        let mut world = World::new(2, LEASE_MS);
        world.create_namespace("storm", 64);
        world.create_namespace("small", 2);
        world.register("d", 0);
        for n in 0..8 {
            world.register_in(&format!("s{n}"), "storm", 0);
        }
        let small = world.register_in("m", "small", 0);
        // Move the revision, and with it which namespace the step plans first.
        for _ in 0..extra_entries {
            world.renew(&small, 1);
        }
        let mut writes = StepWrites::with_plan_cap(StepDecision::default(), 12);
        let mut moves_by_namespace = std::collections::BTreeMap::new();
        while let Some((_, command)) = writes.next_command(&world.state, 1) {
            let (namespace, moves) = plan_of(&command);
            if moves_by_namespace.is_empty() {
                planned_first.insert(namespace.clone());
            }
            let capped = writes.plan_was_capped(&command);
            moves_by_namespace.insert(namespace.clone(), (moves.len(), capped));
            world.apply(command);
        }
        let total: usize = moves_by_namespace.values().map(|(moves, _)| moves).sum();
        assert!(total <= 12, "{moves_by_namespace:?}");
        assert_eq!(
            moves_by_namespace.get("small").map(|(moves, _)| *moves),
            Some(2),
            "small is placed in the same step: {moves_by_namespace:?}"
        );
        assert_eq!(
            moves_by_namespace.get("default").map(|(moves, _)| *moves),
            Some(2)
        );
        let (storm_moves, storm_capped) = moves_by_namespace["storm"];
        assert!(storm_capped, "the storm's plan is cut at its share");
        assert!((4..=8).contains(&storm_moves), "{moves_by_namespace:?}");
    }
    assert_eq!(
        planned_first.len(),
        3,
        "no namespace is always planned first: {planned_first:?}"
    );
}

/// P6.3: an episode the silence of everyone started (the leader's own partition, say) ends once
/// renewals have been applied again for two ticks: an executor still overdue then is silent on
/// its own (cut off, dead) and is reaped, not kept for the rest of the grace.
#[test]
fn p6_3_an_episode_ends_once_renewals_flow_again_for_two_ticks() {
    let mut world = World::new(8, LEASE_MS);
    let cut_off = world.register("cut-off", 0);
    let renewing = world.register("renewing", 0);
    let mut core = LeaderCore::new(0, guard());
    // Nobody renews past the first lease: an episode starts.
    let started = LEASE_MS + TICK_MS;
    let decision = core.step(started, &world.state, None);
    assert!(matches!(
        decision.events.as_slice(),
        [GuardEvent::EpisodeStarted {
            reason: GuardReason::NoRenewals { .. },
            overdue: 2
        }]
    ));
    // One executor comes back and renews every tick; the other stays silent.
    let back = started + 500;
    world.renew(&renewing, back);
    let decision = core.step(started + TICK_MS, &world.state, Some(back));
    assert!(decision.reap.is_empty(), "{decision:?}");
    world.renew(&renewing, back + TICK_MS);
    let decision = core.step(started + 2 * TICK_MS, &world.state, Some(back + TICK_MS));
    assert!(
        decision.reap.is_empty(),
        "renewals flowed for less than two ticks: {decision:?}"
    );
    world.renew(&renewing, back + 2 * TICK_MS);
    let decision = core.step(back + 2 * TICK_MS, &world.state, Some(back + 2 * TICK_MS));
    assert_eq!(decision.reap, vec![cut_off], "{decision:?}");
    assert_eq!(
        decision.events,
        vec![GuardEvent::RenewalsResumed {
            overdue: 1,
            renewing_since_ms: back
        }]
    );
    assert!(
        back + 2 * TICK_MS - started < GRACE_MS,
        "reaped within the grace"
    );
}

/// P19.2 and I4: a step whose primary moves were cut at its cap places no secondaries: the
/// primaries still homeless are placed in the steps that follow at once, each behind no write of
/// warm copies, and the secondaries once every primary has its owner.
#[test]
fn p19_2_secondaries_wait_until_every_primary_move_is_made() {
    let mut world = World::new(8, LEASE_MS);
    let outcome = world.apply(Command::Operator {
        now_ms: 0,
        actor: crate::lease::tests::TEST_ADMIN.to_owned(),
        action: crate::lease::OperatorAction::SetNamespace {
            name: leasehold_api::wire::DEFAULT_NAMESPACE.to_owned(),
            lease_duration_ms: LEASE_MS,
            max_executors: None,
            placement: Default::default(),
            replication: leasehold_api::wire::ReplicaSettings {
                replicas: 2,
                ..Default::default()
            },
        },
    });
    assert!(
        matches!(
            outcome,
            crate::lease::Outcome::NamespaceSet { changed: true, .. }
        ),
        "{outcome:?}"
    );
    // A second namespace shares each step's cap (P18.1): when `default` is planned first its
    // share is cut below the moves the step has left.
    world.create_namespace("kv", 1);
    world.register_in("k", "kv", 0);
    world.register("a", 0);
    world.register("b", 0);
    let mut steps = Vec::new();
    for _ in 0..10 {
        let mut writes = StepWrites::with_plan_cap(StepDecision::default(), 3);
        let mut step = Vec::new();
        while let Some((write, command)) = writes.next_command(&world.state, 1) {
            if write == StepWrite::PlaceSecondaries {
                let homeless: Vec<u32> = world
                    .state
                    .shards()
                    .iter()
                    .filter(|shard| shard.owner.is_none())
                    .map(|shard| shard.id)
                    .collect();
                assert!(
                    homeless.is_empty(),
                    "secondaries placed while {homeless:?} wait for a primary, after {steps:?}"
                );
            }
            step.push(write);
            world.apply(command);
        }
        if step.is_empty() {
            break;
        }
        steps.push(step);
    }
    assert!(
        steps
            .iter()
            .any(|step| step.contains(&StepWrite::PlaceSecondaries)),
        "the secondaries are placed once the primaries are: {steps:?}"
    );
    assert!(
        world
            .state
            .shards()
            .iter()
            .all(|shard| shard.owner.is_some() && shard.secondaries.len() == 1),
        "{steps:?}"
    );
}

/// Registers an executor into `namespace` that follows a change of layout (P20.3).
pub(super) fn register_following(world: &mut World, name: &str, namespace: &str) -> String {
    let command = crate::lease::Registration {
        follows_generations: true,
        ..crate::lease::tests::registration_in(name, namespace)
    }
    .into_command(0);
    match world.apply(command) {
        crate::lease::Outcome::Registered { grant, .. } => grant.executor_id,
        other => panic!("register {name}: {other:?}"),
    }
}

/// Runs one step at `now_ms`, committing every write and answering every revoke it asks for at
/// once; returns the writes it made.
fn one_step(world: &mut World, now_ms: u64) -> Vec<StepWrite> {
    let mut writes = StepWrites::new(StepDecision::default());
    let mut made = Vec::new();
    while let Some((write, command)) = writes.next_command(&world.state, now_ms) {
        made.push(write);
        let outcome = world.apply(command);
        assert!(outcome.refusal().is_none(), "{write:?}: {outcome:?}");
        if let Some(effects) = outcome.effects() {
            for revoke in effects.revokes.clone() {
                world.apply(Command::Release {
                    now_ms,
                    executor_id: revoke.executor_id,
                    shards: revoke.shards,
                    revoke_revision: revoke.revision,
                });
            }
        }
    }
    made
}

/// P20.2: a step carries out a reshard under way once its namespace is ready, before it plans,
/// so the plans are made in the new layout: a split at once when no handoff is in flight; a
/// merge only in the step after the one whose plan brought its pairs together.
#[test]
fn p20_2_a_step_carries_out_a_reshard_once_ready_and_before_it_plans() {
    let mut world = World::new(4, LEASE_MS);
    world.create_namespace("kv", 4);
    register_following(&mut world, "a", "kv");
    register_following(&mut world, "b", "kv");
    assert_eq!(one_step(&mut world, 1), [StepWrite::Rebalance]);
    let reshard = |shard_count| Command::Operator {
        now_ms: 1,
        actor: crate::lease::tests::TEST_ADMIN.to_owned(),
        action: crate::lease::OperatorAction::Reshard {
            name: "kv".to_owned(),
            shard_count,
        },
    };
    // Shards 0 and 1 on one executor, 2 and 3 on the other: the pairs (0, 2), (1, 3) apart.
    world.apply(reshard(2));
    let first = one_step(&mut world, 2);
    assert_eq!(
        first,
        [StepWrite::Rebalance],
        "the pairs are brought together first"
    );
    assert_eq!(world.state.namespace("kv").unwrap().reshard_waiting_on(), 0);
    assert_eq!(one_step(&mut world, 3)[0], StepWrite::Reshard);
    let kv = world.state.namespace("kv").unwrap();
    assert_eq!((kv.config.shard_count, kv.generation), (2, 1));
    assert!(kv.reshard.is_none());
    world.apply(reshard(4));
    assert_eq!(one_step(&mut world, 4)[0], StepWrite::Reshard);
    let kv = world.state.namespace("kv").unwrap();
    assert_eq!((kv.config.shard_count, kv.generation), (4, 2));
}

/// P20.2, P15.3: the loads, budget and cooling shards a step read of a namespace are of the
/// layout before a reshard it carries out; its plans of that namespace after the reshard move
/// nothing for balance and place as while learning, so a merge that halves the budget is not
/// planned on the budget of the count before it (the simulator found four balance moves in a
/// minute against a budget of two).
#[test]
fn p20_2_p15_3_a_step_that_reshards_plans_the_namespace_without_its_old_layouts_inputs() {
    let mut world = World::new(4, LEASE_MS);
    world.create_namespace("kv", 4);
    register_following(&mut world, "a", "kv");
    register_following(&mut world, "b", "kv");
    assert_eq!(one_step(&mut world, 1), [StepWrite::Rebalance]);
    world.apply(Command::Operator {
        now_ms: 1,
        actor: crate::lease::tests::TEST_ADMIN.to_owned(),
        action: crate::lease::OperatorAction::Reshard {
            name: "kv".to_owned(),
            shard_count: 8,
        },
    });
    let by_load = crate::lease::PlacementInputs {
        loads: crate::lease::Loads::Reported(vec![1.0; 4]),
        tolerance: 0.1,
        balance_moves_allowed: 3,
        cooling: [2].into(),
    };
    let mut writes = StepWrites::with_placement(
        StepDecision::default(),
        crate::lease::MAX_MOVES_PER_PLAN,
        [("kv".to_owned(), by_load)].into(),
    );
    let (write, command) = writes.next_command(&world.state, 2).unwrap();
    assert_eq!(write, StepWrite::Reshard);
    world.apply(command);
    let inputs = writes.placement_inputs("kv");
    assert_eq!(inputs.loads, crate::lease::Loads::Learning);
    assert_eq!(inputs.balance_moves_allowed, 0);
    assert!(inputs.cooling.is_empty());
}
