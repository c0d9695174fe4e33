//! Scripted schedules on the simulator (PROTOCOL §12 I1, I2): each leads the cluster,
//! on the real cores, to a moment where a single guard is all that stands between two processes
//! admitting one shard. The checks are the seeds' own, after every event (I1 from the executors'
//! admission cores, I1 at its source at every commit that takes a shard, I2, the state's
//! consistency), and each run must converge once the script is over. Each test asserts that it
//! reached its moment (the simulator's coverage counts at the end of the script) and names the
//! guard it pins and what removing that guard makes it report.
//!
//! Slots are the executors in the order the script spawns them: A, B, C. The mass-expiry guard
//! (P6.3) is off (plain expiry), every clock runs at the true rate, and `t` is the instant the
//! script's first step runs. See `sim/src/script.rs` for what each step does.
//!
//! `LEASEHOLD_SCRIPT_TRACE=1 cargo test -p leasehold-sim --test scripted -- --nocapture NAME`
//! prints a passing script's event trace; a failing one always prints it.

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;

use leasehold_manager::lease::{LeaseState, Shard};
use leasehold_sim::run::settle;
use leasehold_sim::scenario::{NamespaceScenario, Scenario};
use leasehold_sim::script::{run_script, run_script_in, Fate, Pick, ScriptRun, Step};
use leasehold_sim::world::{LetterKind, Slot, World};

const A: Slot = 0;
const B: Slot = 1;

const SPAWN: Step = Step::Spawn {
    reply: Fate::Delivered,
};

fn run(shards: u32, lease_ms: u64, steps: &[Step]) -> ScriptRun {
    let ran = run_script(shards, lease_ms, steps).unwrap_or_else(|failure| panic!("{failure}"));
    if std::env::var("LEASEHOLD_SCRIPT_TRACE").is_ok_and(|v| v == "1") {
        for line in ran.world.trace_lines() {
            println!("{line}");
        }
    }
    ran
}

/// The executor in `slot` makes its next call (a renewal once registered).
fn renew(slot: Slot, reply: Fate) -> Step {
    Step::Call { slot, reply }
}

/// The oldest held message of `kind` for `slot` arrives; its answer reaches the leader.
fn deliver(slot: Slot, kind: LetterKind) -> Step {
    Step::Deliver {
        slot,
        kind,
        pick: Pick::Oldest,
        answer: Fate::Delivered,
    }
}

fn advance(ms: u64) -> Step {
    Step::Advance { ms }
}

/// A new leader whose clock reads `skew_ms` ahead of the old one's; the old tail is empty.
fn leader_change(skew_ms: i64) -> Step {
    Step::LeaderChange {
        skew_ms,
        keep_tail: false,
    }
}

/// P5.2, the release wait and the handoff's expiry bound: A admits shard 1 and its revoke has not
/// landed, so B must not be granted shard 1, neither by the plan that takes it from A nor by a
/// tick that completes handoffs on expiry. Removing the release wait (the plan grants the shard
/// at once, `tests/mutants/p5_2_no_release_wait.patch`) fails it with `I1: Rebalance took shard 1
/// from ex-2 while its process (slot 0) still admits it`; bounding the handoff by the plan's
/// instant instead of A's grant (`from_grant_expiry_ms: now_ms`) fails it at the tick, `I1:
/// CompleteHandoffs (expiry) took shard 1 from ex-2 while its process (slot 0) still admits it`.
/// The apply-time re-check of `CompleteHandoffs` (P2.4) is out of a schedule's reach: the leader
/// proposes it only when a handoff is due at the instant it stamps it; `lease/tests/rules.rs`
/// p5_2_handoff_completes_when_old_grant_expires pins it.
#[test]
fn i1_revoked_shard_is_not_granted_while_the_old_owner_may_admit() {
    let ran = run(
        2,
        1_000,
        &[
            SPAWN,                        // A registers; the leader plans at once: 0 and 1 to A
            deliver(A, LetterKind::Push), // A admits both
            SPAWN, // B registers: shard 1 releasing from A to B; the revoke waits in the network
            Step::Tick, // nothing is due while A's grant runs
            renew(B, Fate::Delivered), // B's reply carries whatever B was granted
        ],
    );
    assert_eq!(ran.reached.handoffs_started, 1);
}

/// P5.2, the claims' revision check: A was granted shards 0 and 1 but the push is still in
/// flight when shard 1 is moved to B. A renews claiming nothing, at its registration revision,
/// before the revoke: that must not count as an acknowledgement, or B is granted shard 1 and
/// the late push makes A admit it too. Removing the check (`handoff.revoke_revision <=
/// renewal.revision` in `acknowledged_by_claims`) fails it with `I1: shard 1 admitted by slot 0
/// (ex-2, epoch 1) and slot 1 (ex-4, epoch 2)` when the push lands.
#[test]
fn i1_claims_older_than_the_revoke_do_not_acknowledge_it() {
    let ran = run(
        2,
        1_000,
        &[
            // A registers; the plan gives it 0 and 1; the push waits in the network.
            SPAWN,
            SPAWN, // B registers: shard 1 releasing from A to B; the round waits on A's push
            renew(A, Fate::Lost), // A claims {} at its registration revision; the reply is lost
            renew(B, Fate::Delivered), // B's reply carries whatever B was granted
            deliver(A, LetterKind::Push), // A's late push: A admits 0 and 1
        ],
    );
    assert!(ran.reached.claims_mismatches >= 1);
}

/// P2.4, the reap's re-check at apply time: the leader reads A as overdue while A's renewal
/// waits uncommitted ahead of the reap in its tail; the reap must skip A, or A's shards go to B
/// while A, whose renewal was answered, admits them. Removing the re-check (`lapsed` in
/// `apply_reap`) fails it with `I1: shard 0 admitted by slot 0 (ex-2, epoch 1) and slot 1
/// (ex-6, epoch 2)` when B's reply lands.
#[test]
fn i1_stale_reap_of_a_renewed_executor_is_skipped() {
    let ran = run(
        2,
        1_000,
        &[
            SPAWN,                        // A registers at t: lease to t + 1 000; 0 and 1 to A
            deliver(A, LetterKind::Push), // A admits both
            advance(1_001),               // A's lease lapses, on both sides
            Step::HoldCommits,
            renew(A, Fate::Delivered), // A's renewal waits in the leader's tail
            Step::Tick,                // the step reads A as overdue; its reap joins the tail
            Step::Commit,              // the renewal commits (A resumes, P3.6), then the reap
            SPAWN,                     // B registers: shard 1 releasing from A to B
            renew(B, Fate::Delivered), // B's reply carries whatever B was granted
        ],
    );
    assert!(ran.reached.reap_candidates_skipped >= 1);
}

/// P3.4, the renewal's `max`: A holds a deadline at t + 1 500; the lease is cut to 300 ms and A
/// renews, but the reply is lost, so A still holds the long deadline. The manager must not bring
/// its own deadline earlier and reap A (or hand on its shard) under it. Making the renewal set
/// `expiry = now + lease` fails it with `I1: Reap took shard 0 from ex-2 while its process
/// (slot 0) still admits it` at the tick.
#[test]
fn i1_shortened_lease_does_not_shorten_a_held_deadline() {
    let ran = run(
        2,
        1_000,
        &[
            SPAWN,                        // A registers at t; 0 and 1 to A
            deliver(A, LetterKind::Push), // A admits both
            Step::SetLease { ms: 1_500 },
            renew(A, Fate::Delivered), // A and the manager: t + 1 500
            Step::SetLease { ms: 300 },
            advance(100),
            renew(A, Fate::Lost), // the manager: max(t + 1 500, t + 400); A keeps t + 1 500
            SPAWN, // B registers at t + 100: shard 1 releasing from A, bounded by A's expiry
            advance(300),
            renew(B, Fate::Delivered), // B stays live
            Step::Tick,                // t + 400: A is not overdue, shard 1 not due
        ],
    );
    assert_eq!(ran.reached.executors_reaped, 0);
    assert_eq!(ran.world.coverage.executors_reaped, 0);
}

/// P5.2, an acknowledgement names its handoff: A's answer to a first revoke is held up in the
/// network; meanwhile that handoff is cancelled (B leaves, A gets shard 1 back and admits it)
/// and a second handoff to C starts. The late answer must be ignored, or C is granted shard 1
/// while A, whose second revoke has not landed, admits it. Removing the revision check
/// (`handoff.revoke_revision == revoke_revision` in `apply_release`) fails it with `I1: Release
/// took shard 1 from ex-2 while its process (slot 0) still admits it`.
#[test]
fn i1_late_ack_for_a_cancelled_handoff_is_ignored() {
    let ran = run(
        2,
        1_000,
        &[
            SPAWN,                        // A registers; 0 and 1 to A
            deliver(A, LetterKind::Push), // A admits both
            SPAWN,                        // B registers: shard 1 releasing from A to B
            Step::Deliver {
                slot: A,
                kind: LetterKind::Revoke,
                pick: Pick::Oldest,
                answer: Fate::Held,
            }, // A stops admitting shard 1; its answer is held up
            Step::Stop { slot: B },       // B leaves: the plan gives shard 1 back to A (cancelled)
            // Pushes wait behind the held answer; A's reply gives shard 1 back, same epoch.
            renew(A, Fate::Delivered),
            SPAWN, // C registers: shard 1 releasing from A to C, a new revoke (not sent yet)
            deliver(A, LetterKind::Ack), // the first answer finally reaches the leader
        ],
    );
    assert_eq!(ran.reached.handoffs_cancelled, 1);
    assert_eq!(ran.reached.acknowledgements_ignored, 1);
}

/// P6.1, no reaping for a lease after taking office: A's last grant runs to t + 1 500 on the
/// true clock; the new leader's clock reads 2 s ahead, so on it A looks overdue from the moment
/// it takes office. Reaping A then would hand its shards on while A admits them. Removing the
/// new leader's grace (`LeaderCore::step` without its `Deferral::NewLeader` return) fails it
/// with `I1: Reap took shard 0 from ex-2 while its process (slot 0) still admits it` at the new
/// leader's first step.
#[test]
fn i1_new_leader_with_a_clock_ahead_does_not_reap_under_an_old_grant() {
    let ran = run(
        2,
        1_000,
        &[
            SPAWN,                        // A registers at t; 0 and 1 to A
            deliver(A, LetterKind::Push), // A admits both
            advance(500),
            renew(A, Fate::Delivered), // A's copy runs to t + 1 500
            leader_change(2_000),      // the new clock reads t + 2 500: A looks overdue
            SPAWN,                     // B registers: a step, within the new leader's first lease
            Step::Tick,
        ],
    );
    assert!(ran.reached.deferred_reaps_of_admitting_executors >= 1);
    assert_eq!(ran.reached.executors_reaped, 0);
    assert_eq!(ran.world.coverage.executors_reaped, 0);
}

/// P6.1, no handoff completed on expiry for a lease after taking office: shard 1 is releasing
/// from A, bounded by A's grant to t + 1 000, and its revoke has not landed. A renews but the
/// reply is lost, so A still admits shard 1 under that grant. The new leader's clock reads
/// 600 ms ahead: on it the handoff is due at once, though A may admit shard 1 for another
/// 500 ms. Letting a new leader complete expired handoffs within its grace
/// (`complete_expired_handoffs` true with `Deferral::NewLeader`) fails it with `I1:
/// CompleteHandoffs (expiry) took shard 1 from ex-2 while its process (slot 0) still admits
/// it`.
#[test]
fn i1_new_leader_with_a_clock_ahead_does_not_hand_on_under_an_old_grant() {
    let ran = run(
        2,
        1_000,
        &[
            SPAWN,                        // A registers at t: lease to t + 1 000; 0 and 1 to A
            deliver(A, LetterKind::Push), // A admits both
            SPAWN, // B registers: shard 1 releasing from A until t + 1 000; the revoke waits
            advance(500),
            renew(A, Fate::Lost), // the manager: A to t + 1 500; A keeps t + 1 000
            renew(B, Fate::Delivered), // B stays live
            leader_change(600),   // the new clock reads t + 1 100: the handoff looks due
        ],
    );
    assert!(ran.reached.expired_handoffs_deferred_by_new_leader >= 1);
}

/// P6.1 with a lease shortened (P3.4): the old leader told A 1 000 ms, to t + 1 000 on the true
/// clock; the lease is cut to 300 ms and a new leader, its clock 600 ms ahead, renews A. The
/// renewal keeps the deadline (`max`) but re-expresses it on the new clock as 400 ms left, and
/// its reply is lost, so A still holds the old grant. The new leader's grace must still cover
/// it: the longest lease an executor may hold from the old leader is 1 000 ms, not the 300 ms
/// configured nor the 400 ms the state records as told since. Counting only the configured lease
/// in the grace (`LeaderCore::longest_lease_ms` without `longest_lease_told_ms`) fails it with
/// `I1: Reap took shard 0 from ex-2 while its process (slot 0) still admits it`. (A is reaped
/// after the script: its call waits out its patience with the reply lost, so it does not renew
/// before its lease of 400 ms on the new clock runs out; by then its own copy has too.)
#[test]
fn i1_new_leader_grace_covers_an_old_grant_after_a_shortened_lease() {
    let ran = run(
        2,
        1_000,
        &[
            SPAWN,                        // A registers at t: told 1 000, to t + 1 000
            deliver(A, LetterKind::Push), // A admits 0 and 1
            Step::SetLease { ms: 300 },
            leader_change(600),   // the new clock reads t + 600
            renew(A, Fate::Lost), // max(t + 1 000, t + 900): told 400 ms on the new clock; lost
            advance(401),         // the new clock reads t + 1 001, the true one t + 401
            SPAWN,                // B registers: a step
            Step::Tick,           // A admits until t + 1 000 (true): it must not be reaped
        ],
    );
    assert!(ran.reached.deferred_reaps_of_admitting_executors >= 1);
    assert_eq!(ran.reached.executors_reaped, 0);
}

/// P6.4 and P6.1 across two leader changes, with a retried registration (P7.2): A's
/// registration reply is lost, so it knows nothing of the lease the state records (1 000 ms, to
/// t + 1 000). The next leader's wall clock reads 2 s behind. Before P6.4 its clock took office
/// at t - 2 000, and when A registered again with the same incarnation the reply told it
/// 2 000 ms, to t + 3 000 on the true clock, which every later leader's grace then had to cover.
/// Under P6.4 that clock takes office at t (the recorded expiry minus the longest lease), so no
/// grant tells more than the lease: the retry, a second later, finds the recorded lease run out
/// and tells A nothing, and the leader after it reaps A, which the I1 checks after every event
/// accept only because A admits nothing. Taking office on the wall clock alone
/// (`office_floor_ms` returning 0) fails the assertion on the longest lease told. What a retried
/// registration tells is still counted by the state machine
/// (`p6_1_a_retried_registration_counts_what_it_tells`).
#[test]
fn p6_4_a_retried_registration_under_a_clock_behind_tells_no_more_than_the_lease() {
    let ran = run(
        2,
        1_000,
        &[
            // A registers at t: told 1 000; the plan gives it 0 and 1.
            Step::Spawn { reply: Fate::Lost },
            // The new wall clock reads t - 2 000; it takes office at t (P6.4).
            leader_change(-2_000),
            advance(1_000), // A's register call runs out of patience
            // A registers again at t + 1 000: told 0 (before P6.4: 2 000, to t + 3 000).
            renew(A, Fate::Delivered),
            leader_change(2_000), // the next clock reads the true time, t + 1 000
            advance(1_000),       // t + 2 000: one recorded lease in office
            SPAWN,                // B registers: a step
            Step::Tick,           // A, holding no lease, may be reaped
        ],
    );
    assert!(ran.reached.registrations_retried >= 1);
    let longest_told = ran
        .world
        .leader_state()
        .map(|state| state.longest_lease_told_ms());
    assert_eq!(
        longest_told,
        Some(1_000),
        "P6.4: no grant tells more than the lease"
    );
}

/// P5.2 with a stale grant (P3.3, P4.1), one leader, no skew, a lease of 3 s: shard X is
/// releasing from A to B, bounded by A's grant to t + 3 000, and its revoke was lost. A renews
/// at t + 2 000; the reply (its set without X) is held up. Another shard, Y, is then moved from
/// A to C, and its revoke lands before X's, sent again in the same round: A drops Y and raises
/// its applied revision past the reply's. When the reply lands its set is stale and ignored,
/// but it still moves A's lease clock to t + 5 000, over a held set that still contains X. At
/// t + 3 000 the manager hands X to B on the expiry of A's last grant that included it. The
/// executor's stale-grant rule (`drop_taken_by`: the lease does not cover shards already taken
/// at the grant's revision) is all that keeps A from admitting X until t + 5 000. Skipping it
/// (`tests/mutants/p3_3_stale_grant_keeps_taken_shards.patch`) fails it with `I1:
/// CompleteHandoffs (expiry) took shard 2 from ex-2 while its process (slot 0) still admits it`.
#[test]
fn i1_stale_grant_does_not_extend_a_shard_whose_revoke_is_pending() {
    let ran = run(
        3,
        3_000,
        &[
            SPAWN,                        // A registers at t: lease to t + 3 000; 0, 1 and 2 to A
            deliver(A, LetterKind::Push), // A admits all three
            SPAWN, // B registers: X releasing from A to B until t + 3 000; the revoke goes out
            Step::Drop {
                slot: A,
                kind: LetterKind::Revoke,
                pick: Pick::Oldest,
            }, // ... and is lost
            advance(2_000), // the revoke's delivery times out, ending the round
            renew(A, Fate::Held), // the manager: A to t + 5 000; the reply (without X) waits
            renew(B, Fate::Delivered), // B stays live
            SPAWN, // C registers: Y releasing from A to C; the round revokes X and Y
            Step::Deliver {
                slot: A,
                kind: LetterKind::Revoke,
                pick: Pick::Newest,
                answer: Fate::Delivered,
            }, // revoke Y lands first: A drops Y and acknowledges; its revision passes the reply's
            deliver(A, LetterKind::Reply), // the reply lands: set stale, lease to t + 5 000
            advance(1_001),
            Step::Tick, // t + 3 001: X handed to B on the expiry of A's grant that included it
            renew(B, Fate::Delivered), // the round waits on X's revoke; B's reply carries X
        ],
    );
    assert!(ran.reached.handoffs_completed_by_expiry >= 1);
}

// ---- namespaces (P18.1, P18.3) -----------------------------------------------------------------
//
// Two namespaces on one cluster: `default` and `kv`, each with executors of its own. The script
// spawns them and the cluster converges; then a namespace loses executors and the test follows
// the live world (the seeds' rules, no chaos) until they are reaped and it converged again,
// checking that nothing of the other namespace moved.

/// `kv`, a namespace of `shards` shards beside `default`, its executors spread over `zones`
/// zones (0: none states one).
fn kv(shards: u32, zones: usize) -> NamespaceScenario {
    NamespaceScenario {
        name: "kv".to_owned(),
        shards,
        lease_ms: 1_000,
        zones,
        true_loads: vec![0.0; shards as usize],
        replicas: 1,
    }
}

/// A new executor in `kv` (space 1).
const SPAWN_KV: Step = Step::SpawnIn {
    space: 1,
    reply: Fate::Delivered,
};

fn run_with_kv(kv: NamespaceScenario, steps: &[Step]) -> ScriptRun {
    let scenario = Scenario::scripted(8, 1_000).with_namespace(kv);
    run_script_in(scenario, steps).unwrap_or_else(|failure| panic!("{failure}"))
}

/// Every shard of `namespace`: (owner, epoch, releasing).
fn table(state: &LeaseState, namespace: &str) -> Vec<(Option<String>, u64, bool)> {
    state
        .namespace(namespace)
        .map(|ns| {
            ns.shards()
                .iter()
                .map(|shard: &Shard| (shard.owner.clone(), shard.epoch, shard.handoff.is_some()))
                .collect()
        })
        .unwrap_or_default()
}

/// What each slot's process admits now: (shard, epoch).
fn admitted(world: &World) -> BTreeMap<Slot, Vec<(u32, u64)>> {
    (0..world.processes.len())
        .filter_map(|slot| {
            let process = world.processes[slot].as_ref().filter(|p| p.admits())?;
            let now = world.process_now(slot)?;
            let held = process
                .core
                .assignment()
                .held()
                .into_iter()
                .filter(|held| process.core.admit(held.shard, now).is_ok())
                .map(|held| (held.shard, held.epoch))
                .collect();
            Some((slot, held))
        })
        .collect()
}

/// Runs the live world until `done` holds of the leader's state, at most `limit_ms`.
fn run_until_state(world: &mut World, limit_ms: u64, done: impl Fn(&LeaseState) -> bool) {
    let deadline = world.now_us + limit_ms * 1_000;
    while !world.leader_state().is_some_and(&done) {
        assert!(
            world.now_us < deadline,
            "not within {limit_ms} ms:\n{}",
            world.dump()
        );
        let next = world.now_us + 10_000;
        world
            .run_until(next)
            .unwrap_or_else(|violation| panic!("{violation}"));
    }
}

/// P18.1: a namespace that loses every executor moves nothing of another. `default` (8 shards,
/// A and B) and `kv` (6 shards, C and D) converge; C and D are killed at once. Within their
/// lease and a tick they are reaped and kv's shards have no owner (no executor of `default` may
/// take one); every shard of `default` keeps its owner and epoch, and A and B admit exactly
/// what they admitted, then and once the cluster converged again. C and D come back as new
/// executors and take kv's shards at new epochs, `default` still unchanged. A planner that
/// placed a namespace's shards on every executor, or a reap that touched the shard table of
/// another namespace, fails it (as does the state's consistency check after every commit).
#[test]
fn p18_1_a_namespace_that_loses_every_executor_moves_nothing_of_another() {
    const C: Slot = 2;
    const D: Slot = 3;
    let ran = run_with_kv(kv(6, 0), &[SPAWN, SPAWN, SPAWN_KV, SPAWN_KV]);
    let mut world = ran.world;
    let before = world.leader_state().cloned().expect("a leader");
    let default_before = table(&before, "default");
    assert!(
        default_before.iter().all(|(owner, _, _)| owner.is_some()),
        "default's shards all owned: {default_before:?}"
    );
    assert!(table(&before, "kv")
        .iter()
        .all(|(owner, _, _)| owner.is_some()));
    let default_admitted: BTreeMap<Slot, Vec<(u32, u64)>> = admitted(&world)
        .into_iter()
        .filter(|(slot, _)| *slot == A || *slot == B)
        .collect();
    assert!(default_admitted.values().all(|held| !held.is_empty()));

    world.kill(C);
    world.kill(D);
    // A lease and a tick, and the reaps' commits.
    run_until_state(&mut world, 1_500, |state| {
        state.executors_in("kv").next().is_none()
            && table(state, "kv")
                .iter()
                .all(|(owner, _, _)| owner.is_none())
    });
    let after = world.leader_state().cloned().expect("a leader");
    assert_eq!(
        table(&after, "default"),
        default_before,
        "P18.1: default moved"
    );
    let still: BTreeMap<Slot, Vec<(u32, u64)>> = admitted(&world)
        .into_iter()
        .filter(|(slot, _)| *slot == A || *slot == B)
        .collect();
    assert_eq!(
        still, default_admitted,
        "P18.1: A and B admit what they did"
    );

    settle(&mut world, "after kv lost every executor").unwrap_or_else(|v| panic!("{v}"));
    let settled = world.leader_state().cloned().expect("a leader");
    assert_eq!(
        table(&settled, "default"),
        default_before,
        "P18.1: default moved"
    );

    world.restart(C);
    world.restart(D);
    settle(&mut world, "after kv's executors came back").unwrap_or_else(|v| panic!("{v}"));
    let back = world.leader_state().cloned().expect("a leader");
    assert_eq!(
        table(&back, "default"),
        default_before,
        "P18.1: default moved"
    );
    let kv_back = table(&back, "kv");
    let kv_before = table(&before, "kv");
    for ((owner, epoch, _), (_, old_epoch, _)) in kv_back.iter().zip(&kv_before) {
        let owner = owner.as_deref().expect("kv's shards owned again");
        assert_eq!(
            back.executor(owner).map(|e| e.namespace.as_str()),
            Some("kv")
        );
        assert!(epoch > old_epoch, "I2: a new owner, a new epoch");
    }
}

/// P18.3 inside a namespace other than `default`: `kv` (8 shards) has four executors in two
/// zones (C and E state `zone=z0`, D and F `zone=z1`), `default` two with no zone. Zone z1 of
/// kv is killed whole. kv's shards are re-homed within a lease and a tick (and the reaps'
/// commits): every shard C or E held stays theirs at its epoch, every shard D or F held goes
/// to C or E at a new epoch, and nothing of `default` moves (P18.1). Then the cluster converges,
/// still without a move in `default`.
#[test]
fn p18_3_a_zone_lost_inside_a_namespace_re_homes_only_that_zones_shards() {
    const C: Slot = 2;
    const D: Slot = 3;
    const E: Slot = 4;
    const F: Slot = 5;
    let ran = run_with_kv(
        kv(8, 2),
        &[SPAWN, SPAWN, SPAWN_KV, SPAWN_KV, SPAWN_KV, SPAWN_KV],
    );
    let mut world = ran.world;
    let zones: Vec<Option<String>> = (C..=F)
        .map(|slot| world.scenario.zone_of_slot(slot))
        .collect();
    assert_eq!(
        zones,
        ["z0", "z1", "z0", "z1"]
            .map(|z| Some(z.to_owned()))
            .to_vec()
    );
    let before = world.leader_state().cloned().expect("a leader");
    let default_before = table(&before, "default");
    let kv_before = table(&before, "kv");
    let id = |world: &World, slot: Slot| world.executor_id_of(slot).expect("registered");
    let (c, d, e, f) = (id(&world, C), id(&world, D), id(&world, E), id(&world, F));
    let survivors = [c.as_str(), e.as_str()];
    assert!(kv_before.iter().all(|(owner, _, _)| owner.is_some()));
    // Spread by zone: each zone holds half of kv's shards.
    let in_z1 = kv_before
        .iter()
        .filter(|(owner, _, _)| owner.as_deref() == Some(&d) || owner.as_deref() == Some(&f))
        .count();
    assert_eq!(in_z1, 4, "P18.3: zone z1 holds its share: {kv_before:?}");

    world.kill(D);
    world.kill(F);
    run_until_state(&mut world, 1_500, |state| {
        table(state, "kv")
            .iter()
            .all(|(owner, _, _)| owner.as_deref().is_some_and(|o| survivors.contains(&o)))
    });
    let after = world.leader_state().cloned().expect("a leader");
    for ((was_owner, was_epoch, _), (owner, epoch, _)) in kv_before.iter().zip(table(&after, "kv"))
    {
        let was_owner = was_owner.as_deref().expect("owned");
        if survivors.contains(&was_owner) {
            assert_eq!(
                (owner.as_deref(), epoch),
                (Some(was_owner), *was_epoch),
                "P18.3: a survivor's shard moved"
            );
        } else {
            assert!(epoch > *was_epoch, "I2: re-homed at a new epoch");
        }
    }
    assert_eq!(
        table(&after, "default"),
        default_before,
        "P18.1: default moved"
    );
    settle(&mut world, "after kv lost zone z1").unwrap_or_else(|v| panic!("{v}"));
    let settled = world.leader_state().cloned().expect("a leader");
    assert_eq!(
        table(&settled, "default"),
        default_before,
        "P18.1: default moved"
    );
    assert!(table(&settled, "kv")
        .iter()
        .all(|(owner, _, _)| owner.as_deref().is_some_and(|o| survivors.contains(&o))));
}

/// P6.3 with namespaces: "one executor dying while others renew expires after one lease, not
/// after the grace". `default` has a 3 s lease and one executor, A, which renews once a second;
/// `kv` a 600 ms lease and one executor, C. The guard is on, as shipped, with a 20 s grace. C is
/// killed: the leader steps a third of the shortest lease apart (200 ms) and looks for a renewal
/// in the two ticks, of the longest lease among the executors not yet overdue (A's 3 s), before
/// C's expiry, where A's renewals are. Counting ticks of the shortest lease of any namespace instead (200 ms),
/// A's renewal a second apart often fell outside the window, the guard took the silence for its
/// own stall, and C was reaped after the grace (20.8 s) instead of its lease.
#[test]
fn p6_3_one_executor_dying_in_the_shortest_lease_namespace_expires_after_one_lease() {
    const C: Slot = 1;
    let mut scenario = Scenario::scripted(4, 3_000).with_namespace(NamespaceScenario {
        lease_ms: 600,
        ..kv(4, 0)
    });
    scenario.guard.enabled = true;
    scenario.guard.grace_ms = 20_000;
    let ran = run_script_in(scenario, &[SPAWN, SPAWN_KV]).unwrap_or_else(|f| panic!("{f}"));
    let mut world = ran.world;
    for attempt in 0..5 {
        // A lease and a tick of kv's, and a little for the reap's commit and a renewal in flight.
        world.kill(C);
        let killed_at = world.now_us;
        run_until_state(&mut world, 30_000, |state| {
            state.executors_in("kv").next().is_none()
        });
        let took_ms = (world.now_us - killed_at) / 1_000;
        assert!(
            took_ms <= 600 + 200 + 100,
            "attempt {attempt}: kv's executor was reaped {took_ms} ms after it died, its lease is 600 ms"
        );
        world.restart(C);
        settle(&mut world, "after kv's executor came back").unwrap_or_else(|v| panic!("{v}"));
    }
}

/// Issue 56's partition on the production cores: the leader and executor A are cut off from
/// the other managers and executors B and C for 14 s, with a 3 s lease and the mass-expiry guard
/// on as shipped (60 s grace); the others elect a leader after 1.2 s (as measured over real
/// sockets). B and C renew through the new leader and never lapse. The deposed leader fails what
/// it holds once it has heard no quorum for a Raft lease (P8.4) and answers A at once from then
/// on. A fences at its own expiry, and its shards move to B and C within a lease, the new
/// leader's grace (P6.1, the longest lease told) and a tick of the cut (P6.3: B and C renew, so
/// the guard defers nothing), I1 checked after every event.
#[test]
fn p6_3_p8_4_a_leader_cut_off_with_one_executor_re_homes_only_its_shards() {
    const C: Slot = 2;
    const LEASE_MS: u64 = 3_000;
    let mut scenario = Scenario::scripted(12, LEASE_MS);
    scenario.guard.enabled = true;
    scenario.guard.grace_ms = 60_000;
    let ran = run_script_in(scenario, &[SPAWN, SPAWN, SPAWN]).unwrap_or_else(|f| panic!("{f}"));
    let mut world = ran.world;
    world.go_live();
    settle(&mut world, "before the cut").unwrap_or_else(|v| panic!("{v}"));
    let a_id = world
        .leader_state()
        .and_then(|state| state.executors().next().map(|e| e.id.clone()))
        .expect("A registered first");
    let longest_ms = world
        .leader_state()
        .map(leasehold_manager::leader::core::longest_lease_ms)
        .unwrap();
    world.cut_off_leader_with([A].into(), 14_000, 1_200);
    let cut_at = world.now_us;
    let mut rehomed_ms = None;
    while world.now_us < cut_at + 14_000_000 {
        let next = world.now_us + 10_000;
        world
            .run_until(next)
            .unwrap_or_else(|violation| panic!("{violation}"));
        for slot in [B, C] {
            let process = world.processes[slot].as_ref().expect("B and C run");
            let now = world.process_now(slot).unwrap();
            assert!(
                process.core.lease().is_live(now),
                "{} ms after the cut: {slot} reaches the majority but its lease lapsed:\n{}",
                (world.now_us - cut_at) / 1_000,
                world.dump()
            );
        }
        let a_holds = world.leader_state().is_none_or(|state| {
            state
                .shards()
                .iter()
                .any(|shard| shard.owner.as_deref() == Some(a_id.as_str()))
        });
        if !a_holds && rehomed_ms.is_none() {
            rehomed_ms = Some((world.now_us - cut_at) / 1_000);
        }
    }
    let rehomed_ms = rehomed_ms.expect("A's shards were never re-homed during the cut");
    let bound_ms = 1_200 + LEASE_MS + longest_ms + LEASE_MS / 3 + 100;
    println!("A's shards re-homed {rehomed_ms} ms after the cut (longest lease told {longest_ms} ms, bound {bound_ms} ms)");
    assert!(
        rehomed_ms <= bound_ms,
        "A's shards moved {rehomed_ms} ms after the cut; at most {bound_ms} ms"
    );
    settle(&mut world, "after the heal").unwrap_or_else(|v| panic!("{v}"));
}
