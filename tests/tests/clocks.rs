//! P6.4 over the real binaries: one manager's wall clock an hour ahead of the others'.
//!
//! Three managers with the fault scenarios' timing (3 s lease, 1 s tick, 0.5–1 s elections,
//! `leasehold_tests::faults`), four executors on 48 shards. Manager 2 runs under libfaketime
//! with `CLOCK_REALTIME` an hour ahead and the monotonic clock true
//! (`leasehold_tests::faketime`), which its log lines show: they are stamped an hour after the
//! kernel wrote them. A leader stamps lease deadlines as absolute milliseconds on its clock
//! (P2.3), so a change of leader between clocks an hour apart is where they could be misread:
//!
//! 1. manager 2 leads while the executors renew, then dies and a manager with a true clock
//!    takes over. Before P6.4 the new leader read the deadlines manager 2 stored as an hour
//!    away: a dead executor kept its shards for the hour (I4), and every renewal's `max` (P3.4)
//!    told the living executors a lease of about 3596 s;
//! 2. the reverse: a manager with a true clock leads, dies, and manager 2 takes over, reading
//!    every stored deadline as an hour past: its grace (P6.1) must keep the living executors.
//!
//! Each checks, after the new leader's grace, that no executor is told more than one lease
//! (P3.2, P6.4); that a SIGKILLed executor's shards are re-homed within lease + tick + 20 s,
//! the bound `faults::executor_sigkill` asserts (I4); that nobody alive was evicted (P6.1); and
//! ends with the fault suite's checker over every admission log (I1, I2). Figures are printed as
//! the fault scenarios print theirs. Without libfaketime each test says why and passes, unless
//! `LEASEHOLD_REQUIRE_FAKETIME=1`. Under `LEASEHOLD_FAULT_TLS=1` they run under mutual TLS (the
//! certificates are valid from when they were made, so an hour ahead they still are).

use std::time::{Duration, Instant};

use leasehold_tests::executor::wait_for_even_split;
use leasehold_tests::faketime::{log_clock_offset_ms, Faketime};
use leasehold_tests::faults::{
    assert_none_evicted, fault_cluster, kill_leaders_until, report_figure, start_executors,
    wait_admitting_as, FaultSeed, Fleet, Takeover, Workload, FAULT_LEASE, FAULT_SHARDS, FAULT_TICK,
    LEADER_BOUND, SETTLE_BOUND,
};
use leasehold_tests::{one_cluster_at_a_time, Cluster};

/// The manager whose wall clock is off, and by how much.
const AHEAD_MANAGER: u64 = 2;
const AHEAD: Duration = Duration::from_secs(3_600);
/// How far a manager's log stamps may stray from the offset it runs with: they are read against
/// the time the kernel wrote the last line, milliseconds apart, so this only absorbs a
/// scheduling stall between stamping a line and writing it.
const CLOCK_TOLERANCE_MS: i64 = 10_000;
/// What an executor may report beyond the lease: its time left is the granted lease less the
/// request's transit, so none is needed; this absorbs rounding. An hour is what it guards against.
const LEASE_SLACK: Duration = Duration::from_millis(500);
/// Kills of the leader allowed to bring the wanted manager into office (a few are usual).
const MAX_LEADER_KILLS: usize = 8;
const EXECUTORS: [&str; 4] = ["a", "b", "c", "d"];

/// I4's bound, as `faults::executor_sigkill` asserts it: lease + tick, plus 20 s for the commits,
/// pushes and status reads on a loaded 2-core machine.
fn rehoming_bound() -> Duration {
    FAULT_LEASE + FAULT_TICK + Duration::from_secs(20)
}

/// Three managers with fault timing, [`AHEAD_MANAGER`] running [`AHEAD`] of the true time, a
/// leader elected; panics unless every manager's log shows the clock it should (manager 2's an
/// hour ahead, the others' true), so the scenario tests what it says.
async fn start_cluster_with_a_clock_ahead(faketime: &Faketime, scenario: &str) -> Cluster {
    let mut cluster = fault_cluster();
    faketime.run_ahead(&mut cluster.manager(AHEAD_MANAGER), AHEAD);
    cluster.start_all();
    cluster.wait_for_leader(LEADER_BOUND).await;
    for (&id, manager) in &cluster.managers {
        let offset_ms = log_clock_offset_ms(manager.log_path())
            .unwrap_or_else(|e| panic!("{scenario}: manager {id}'s clock: {e}"));
        let expected_ms = if id == AHEAD_MANAGER {
            AHEAD.as_millis() as i64
        } else {
            0
        };
        eprintln!(
            "[fault] {scenario}: manager {id} stamps its log {offset_ms} ms ahead of the true time"
        );
        assert!(
            (offset_ms - expected_ms).abs() <= CLOCK_TOLERANCE_MS,
            "{scenario}: manager {id} should run {expected_ms} ms ahead of the true time, but \
             its log is stamped {offset_ms} ms ahead (is {} preloaded?)",
            faketime.library.display()
        );
    }
    cluster
}

/// Prints each leader change [`kill_leaders_until`] made, the time to the next leader as a figure.
fn report_takeovers(scenario: &str, takeovers: &[Takeover]) {
    for takeover in takeovers {
        eprintln!(
            "[fault] {scenario}: killed leader {}, manager {} elected",
            takeover.killed, takeover.elected
        );
        report_figure(
            scenario,
            "leader killed -> new leader named by all",
            takeover.after,
        );
    }
}

/// The term manager `id` leads in; panics if it does not lead (the scenario's premise).
async fn leading_term(cluster: &Cluster, id: u64, scenario: &str) -> u64 {
    let info = cluster
        .cluster_info(id)
        .await
        .unwrap_or_else(|e| panic!("{scenario}: {e}"));
    assert_eq!(
        info.leader_id,
        Some(id),
        "{scenario}: manager {id} was to lead throughout, but leadership moved: {info:?}"
    );
    info.term
}

/// How much the leader's log says it raised its clock above its wall clock when it took office
/// (P6.4); `None` when it did not say so.
fn clock_raised_ms(log: &str) -> Option<u64> {
    log.lines()
        .filter(|line| line.contains("leading on a clock raised"))
        .find_map(|line| {
            let value = line.split("raised_ms=").nth(1)?;
            value.split_whitespace().next()?.parse().ok()
        })
}

/// P3.2, P6.4 as the executors see them: each executor of `indices`, admitting as itself (`ids`),
/// reports no more of its lease left than one lease. Returns the most any reported.
async fn largest_lease_remaining(
    fleet: &Fleet,
    indices: &[usize],
    ids: &[String],
    scenario: &str,
) -> Duration {
    wait_admitting_as(fleet, indices, ids, SETTLE_BOUND).await;
    let mut largest = Duration::ZERO;
    for &index in indices {
        let executor = fleet.get(index);
        let status = executor
            .status()
            .await
            .unwrap_or_else(|e| panic!("{scenario}: {e}"));
        let remaining = status["lease_remaining_ms"]
            .as_u64()
            .map(Duration::from_millis)
            .unwrap_or_else(|| panic!("{scenario}: no lease_remaining_ms in {status}"));
        assert!(
            remaining <= FAULT_LEASE + LEASE_SLACK,
            "{scenario}: P6.4: executor {} reports {remaining:?} of its lease left, more than \
             the {FAULT_LEASE:?} lease: a deadline stamped on a clock ahead was taken as far \
             off",
            executor.name
        );
        largest = largest.max(remaining);
    }
    largest
}

/// I4: SIGKILLs a seeded pick of `executors`; the others admit every shard in an even split
/// (P5.4) within [`rehoming_bound`] of the kill. Returns the survivors.
async fn kill_one_and_rehome(
    seed: &mut FaultSeed,
    fleet: &mut Fleet,
    executors: &[usize],
    scenario: &str,
) -> Vec<usize> {
    let victim = executors[seed.index(executors.len())];
    let survivors: Vec<usize> = executors.iter().copied().filter(|&i| i != victim).collect();
    eprintln!(
        "[fault] {scenario}: SIGKILL executor {}",
        fleet.get(victim).name
    );
    let killed_at = Instant::now();
    fleet.kill(victim);
    let holders = fleet.refs(&survivors);
    let split = wait_for_even_split(&holders, FAULT_SHARDS, SETTLE_BOUND);
    if tokio::time::timeout(rehoming_bound(), split).await.is_err() {
        let mut admitted = Vec::new();
        for &index in &survivors {
            let executor = fleet.get(index);
            let shards = executor.admitted_shards().await.map(|shards| shards.len());
            admitted.push(format!("{}: {shards:?}", executor.name));
        }
        panic!(
            "{scenario}: I4: executor {}'s shards were not re-homed within {:?} of its SIGKILL; \
             shards each survivor admits: {admitted:?}",
            fleet.get(victim).name,
            rehoming_bound()
        );
    }
    report_figure(scenario, "re-homed after SIGKILL", killed_at.elapsed());
    survivors
}

/// P6.4, I4, I1: manager 2, its wall clock an hour ahead, leads while four executors renew for
/// two leases; then it is SIGKILLed and a manager with a true clock takes over. Past the new
/// leader's grace no executor is told more than one lease, a SIGKILLed executor's shards are
/// re-homed within lease + tick + 20 s, and admission stayed exclusive. Before P6.4 the new
/// leader took manager 2's deadlines for an hour away: the executors reported about 3596 s left
/// and the dead one's shards stayed stranded for the hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_4_a_leader_whose_clock_ran_an_hour_ahead_strands_no_shards() {
    const SCENARIO: &str = "p6_4_a_leader_whose_clock_ran_an_hour_ahead_strands_no_shards";
    let Some(faketime) = Faketime::or_skip() else {
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let mut seed = FaultSeed::from_env_in(&["clocks"], SCENARIO);
    let mut cluster = start_cluster_with_a_clock_ahead(&faketime, SCENARIO).await;
    // Manager 1 forms the cluster and usually leads; killing it hands office to manager 2.
    let takeovers = kill_leaders_until(&mut cluster, AHEAD_MANAGER, MAX_LEADER_KILLS).await;
    report_takeovers(SCENARIO, &takeovers);
    let term = leading_term(&cluster, AHEAD_MANAGER, SCENARIO).await;

    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let (executors, ids) = start_executors(&cluster, &mut fleet, &EXECUTORS).await;
    let urls = executors.iter().map(|&i| fleet.get(i).url()).collect();
    let workload = Workload::start(&cluster, urls, seed.derive());
    // Two leases of renewals under manager 2: every deadline the state holds is on its clock.
    tokio::time::sleep(2 * FAULT_LEASE + seed.jitter(Duration::ZERO, FAULT_LEASE)).await;
    let under_manager_2 = largest_lease_remaining(&fleet, &executors, &ids, SCENARIO).await;
    report_figure(
        SCENARIO,
        "largest lease remaining under manager 2",
        under_manager_2,
    );
    assert_eq!(
        leading_term(&cluster, AHEAD_MANAGER, SCENARIO).await,
        term,
        "{SCENARIO}: manager 2 lost office and regained it while the executors renewed"
    );

    let killed_at = Instant::now();
    cluster.manager(AHEAD_MANAGER).kill();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    report_figure(
        SCENARIO,
        "manager 2 killed -> new leader named by all",
        killed_at.elapsed(),
    );
    // What P6.4 did, printed only: the log line is the manager's to word.
    match clock_raised_ms(&cluster.managers[&leader].log()) {
        Some(raised_ms) => eprintln!(
            "[fault] {SCENARIO}: manager {leader} leads, its clock raised {raised_ms} ms above \
             its wall clock on taking office (P6.4)"
        ),
        None => eprintln!(
            "[fault] {SCENARIO}: manager {leader} leads; its log says no raise of its clock"
        ),
    }
    // Past the new leader's grace (P6.1: one lease from taking office) and two ticks: every
    // executor has renewed with it several times.
    tokio::time::sleep(FAULT_LEASE + 2 * FAULT_TICK).await;
    let after_grace = largest_lease_remaining(&fleet, &executors, &ids, SCENARIO).await;
    report_figure(
        SCENARIO,
        "largest lease remaining after the new leader's grace",
        after_grace,
    );

    let survivors = kill_one_and_rehome(&mut seed, &mut fleet, &executors, SCENARIO).await;
    finish(workload, &fleet, &survivors, SCENARIO).await;
}

/// P6.4, P6.1, I4, I1: the reverse. A manager with a true clock leads while four executors
/// renew for two leases; it is SIGKILLed and manager 2, its wall clock an hour ahead, takes over,
/// reading every stored deadline as an hour past. Its grace (P6.1) keeps every executor (none is
/// evicted), no executor is told more than one lease, and past the grace a SIGKILLed executor's
/// shards are re-homed within lease + tick + 20 s by manager 2; admission stayed exclusive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_4_a_leader_whose_clock_runs_an_hour_ahead_takes_over_from_a_correct_one() {
    const SCENARIO: &str =
        "p6_4_a_leader_whose_clock_runs_an_hour_ahead_takes_over_from_a_correct_one";
    let Some(faketime) = Faketime::or_skip() else {
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let mut seed = FaultSeed::from_env_in(&["clocks"], SCENARIO);
    let mut cluster = start_cluster_with_a_clock_ahead(&faketime, SCENARIO).await;
    // Manager 1 first (it forms the cluster and usually leads already): when it dies, manager 2
    // is next in line (a lower id than manager 3's).
    let takeovers = kill_leaders_until(&mut cluster, 1, MAX_LEADER_KILLS).await;
    report_takeovers(SCENARIO, &takeovers);
    leading_term(&cluster, 1, SCENARIO).await;

    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let (executors, ids) = start_executors(&cluster, &mut fleet, &EXECUTORS).await;
    let urls = executors.iter().map(|&i| fleet.get(i).url()).collect();
    let workload = Workload::start(&cluster, urls, seed.derive());
    // Two leases of renewals under a true clock: every deadline the state holds is on it.
    tokio::time::sleep(2 * FAULT_LEASE + seed.jitter(Duration::ZERO, FAULT_LEASE)).await;

    // Every leader killed here has a true clock; it takes one kill, or a few when manager 3
    // wins an election first.
    let takeovers = kill_leaders_until(&mut cluster, AHEAD_MANAGER, MAX_LEADER_KILLS).await;
    assert!(!takeovers.is_empty(), "{SCENARIO}: manager 2 led already");
    report_takeovers(SCENARIO, &takeovers);
    let term = leading_term(&cluster, AHEAD_MANAGER, SCENARIO).await;
    // Past manager 2's grace (P6.1: one lease from taking office) and two ticks: a reap of an
    // executor it read as an hour overdue would have happened by now.
    tokio::time::sleep(FAULT_LEASE + 2 * FAULT_TICK).await;
    let after_grace = largest_lease_remaining(&fleet, &executors, &ids, SCENARIO).await;
    report_figure(
        SCENARIO,
        "largest lease remaining after manager 2's grace",
        after_grace,
    );

    kill_one_and_rehome(&mut seed, &mut fleet, &executors, SCENARIO).await;
    assert_eq!(
        leading_term(&cluster, AHEAD_MANAGER, SCENARIO).await,
        term,
        "{SCENARIO}: the re-homing was to be manager 2's"
    );
    finish(workload, &fleet, &executors, SCENARIO).await;
}

/// Ends a scenario: the workload stopped, none of `kept` evicted, I1 and I2 over every
/// admission log, and the killed executor's shards handed on.
async fn finish(workload: Workload, fleet: &Fleet, kept: &[usize], scenario: &str) {
    let counts = workload.stop().await;
    eprintln!("[fault] {scenario}: workload {counts:?}");
    assert_none_evicted(fleet, kept, scenario);
    let report = fleet.check(scenario);
    assert!(
        report.handoffs >= (FAULT_SHARDS as usize) / EXECUTORS.len(),
        "{scenario}: the killed executor's shards changed hands fewer times than it held: \
         {report:?}"
    );
}
