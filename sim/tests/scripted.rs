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

use leasehold_sim::script::{run_script, Fate, Pick, ScriptRun, Step};
use leasehold_sim::world::{LetterKind, Slot};

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
