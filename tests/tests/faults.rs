//! Fault scenarios over the real binaries on 127.0.0.1 (PROTOCOL §12). Each runs three
//! managers with a 3 s lease and 0.5–1 s elections, executors with admission logs, and ends by
//! checking every admission log together for I1 (no overlapping admission) and I2 (epochs) with
//! `leasehold_tests::checker`. Randomness comes from `LEASEHOLD_FAULT_SEED` (printed; see
//! docs/TESTING.md). Partition scenarios, which need root, are in `partitions.rs`.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_api::wire::ClusterInfo;
use leasehold_tests::executor::{
    status_shards, wait_for_even_split, AdmissionEdge, AdmissionRecord, ExecutorSpec,
};
use leasehold_tests::faults::{
    assert_none_evicted, consistent_state, fault_client, fault_executor_args, ownership,
    report_figure, start_executors, start_fault_cluster, verify_probes, wait_admitting_as,
    wait_registered, FaultSeed, Fleet, ProbeWriter, Workload, EXIT_BOUND, FAULT_LEASE,
    FAULT_SHARDS, FAULT_TICK, LEADER_BOUND, SETTLE_BOUND,
};
use leasehold_tests::proxy::{Impairment, PathMatch, ProxySet};
use leasehold_tests::{free_port, one_cluster_at_a_time, poll_until, Cluster};
use nix::sys::signal::Signal;
use tokio::sync::MutexGuard;

/// Every running manager's `/v1/cluster` (for failure reports).
async fn cluster_infos(cluster: &Cluster) -> Vec<Result<ClusterInfo, String>> {
    let mut infos = Vec::new();
    for &id in cluster.managers.keys() {
        infos.push(cluster.cluster_info(id).await);
    }
    infos
}

fn executor_urls(fleet: &Fleet, indices: &[usize]) -> Vec<String> {
    indices.iter().map(|&i| fleet.get(i).url()).collect()
}

/// What a scenario starts with, besides its fault: the cluster, the executors it names, and
/// optionally the work load on them and the probe writer.
struct Setup {
    /// Executors started and waited for (an even split, registered); none for a scenario that
    /// starts its own behind proxies.
    executors: &'static [&'static str],
    workload: bool,
    /// The probe writer's pause between writes, when the scenario checks acknowledged writes.
    probes: Option<Duration>,
}

/// The scenario's world once [`Setup`] stands, held whole until the scenario ends. Fields drop
/// in their order here: the load first, the executors' processes before the managers', the seed
/// (which prints itself on a failure) and the lock last.
struct Scenario {
    probes: Option<ProbeWriter>,
    workload: Option<Workload>,
    executors: Vec<usize>,
    ids: Vec<String>,
    fleet: Fleet,
    cluster: Cluster,
    seed: FaultSeed,
    _serial: MutexGuard<'static, ()>,
}

impl Scenario {
    /// A client of every manager, with the fault suite's patience.
    fn client(&self) -> leasehold_api::client::Client {
        fault_client(&self.cluster, self.cluster.urls())
    }

    /// The end every scenario that keeps its executors shares: each admits again as itself,
    /// none was evicted, and the admission logs hold I1 and I2 together.
    async fn ends_with_none_evicted(&self, scenario: &str) {
        wait_admitting_as(&self.fleet, &self.executors, &self.ids, SETTLE_BOUND).await;
        assert_none_evicted(&self.fleet, &self.executors, scenario);
        self.fleet.check(scenario);
    }

    /// The work load its setup started.
    fn take_workload(&mut self) -> Workload {
        self.workload
            .take()
            .expect("this scenario's setup starts the work load")
    }

    /// The probe writer its setup started.
    fn probes(&self) -> &ProbeWriter {
        self.probes
            .as_ref()
            .expect("this scenario's setup starts the probe writer")
    }

    fn take_probes(&mut self) -> ProbeWriter {
        self.probes
            .take()
            .expect("this scenario's setup starts the probe writer")
    }
}

/// The one setup of every scenario: one cluster at a time, the seed from the environment, a
/// fault cluster with its leader, the executors, the work load, the probes, in that order (the
/// seed's draws are the same as when each scenario did it itself).
async fn set_up(scenario: &str, setup: Setup) -> Scenario {
    let serial = one_cluster_at_a_time().await;
    let mut seed = FaultSeed::from_env(scenario);
    let cluster = start_fault_cluster().await;
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let (executors, ids) = if setup.executors.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        start_executors(&cluster, &mut fleet, setup.executors).await
    };
    let workload = setup
        .workload
        .then(|| Workload::start(&cluster, executor_urls(&fleet, &executors), seed.derive()));
    let probes = setup
        .probes
        .map(|pause| ProbeWriter::start(fault_client(&cluster, cluster.urls()), pause));
    Scenario {
        probes,
        workload,
        executors,
        ids,
        fleet,
        cluster,
        seed,
        _serial: serial,
    }
}

const ABC: &[&str] = &["a", "b", "c"];

/// Three executors serving the work load, and the probe writer checking acknowledged writes.
const LOADED_AND_PROBED: Setup = Setup {
    executors: ABC,
    workload: true,
    probes: Some(Duration::from_millis(200)),
};

/// As [`LOADED_AND_PROBED`], the probes written twice as often.
const LOADED_AND_PROBED_OFTEN: Setup = Setup {
    executors: ABC,
    workload: true,
    probes: Some(Duration::from_millis(100)),
};

/// Three executors serving the work load.
const LOADED: Setup = Setup {
    executors: ABC,
    workload: true,
    probes: None,
};

/// Three executors, no load.
const IDLE: Setup = Setup {
    executors: ABC,
    workload: false,
    probes: None,
};

/// The scenarios that start their executors themselves, behind fault proxies.
const BEHIND_PROXIES: Setup = Setup {
    executors: &[],
    workload: false,
    probes: None,
};

/// I4, I3: SIGKILL the leader three times while executors serve work and a writer registers and
/// deregisters probes; each time a new leader commits writes within a few election timeouts, no
/// executor is evicted, every acknowledged write survives, and admission stays exclusive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_repeatedly_under_executor_load() {
    const SCENARIO: &str = "leader_sigkill_repeatedly_under_executor_load";
    let mut scenario = set_up(SCENARIO, LOADED_AND_PROBED).await;

    for round in 1..=3 {
        tokio::time::sleep(
            scenario
                .seed
                .jitter(Duration::from_millis(300), Duration::from_millis(1500)),
        )
        .await;
        let leader = scenario.cluster.wait_for_leader(LEADER_BOUND).await;
        let killed_at = Instant::now();
        scenario.cluster.manager(leader).kill();
        let new_leader = scenario.cluster.wait_for_leader(LEADER_BOUND).await;
        let elected = killed_at.elapsed();
        let committed = scenario
            .probes()
            .first_ack_after(killed_at, LEADER_BOUND)
            .await;
        eprintln!(
            "[fault] {SCENARIO}: round {round}: killed leader {leader}, new leader {new_leader}"
        );
        report_figure(
            SCENARIO,
            "leader killed -> new leader named by all",
            elected,
        );
        report_figure(
            SCENARIO,
            "leader killed -> first write committed",
            committed,
        );
        scenario.cluster.manager(leader).start();
    }
    scenario.cluster.wait_for_leader(LEADER_BOUND).await;
    let probe_ledger = scenario.take_probes().stop().await;
    let counts = scenario.take_workload().stop().await;
    eprintln!("[fault] {SCENARIO}: workload {counts:?}, probes {} registered / {} deregistered / {} unacknowledged",
        probe_ledger.registered.len(), probe_ledger.deregistered.len(), probe_ledger.unacknowledged);
    assert!(counts.admitted > 0, "{counts:?}");

    let client = scenario.client();
    let checked = verify_probes(&client, &probe_ledger, SCENARIO).await;
    assert!(
        checked >= 3,
        "the writer got only {checked} registrations through"
    );
    scenario.ends_with_none_evicted(SCENARIO).await;
}

/// I3, I4: every manager is stopped gracefully (SIGTERM, P8.2) and restarted in turn, in a seeded
/// order, under load; nothing acknowledged is lost, nobody is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_of_every_manager() {
    const SCENARIO: &str = "rolling_restart_of_every_manager";
    let mut scenario = set_up(SCENARIO, LOADED_AND_PROBED).await;

    let mut order = vec![1u64, 2, 3];
    scenario.seed.shuffle(&mut order);
    for id in order {
        let stopped_at = Instant::now();
        scenario.cluster.manager(id).terminate(EXIT_BOUND).await;
        report_figure(
            SCENARIO,
            "manager graceful stop (P8.2)",
            stopped_at.elapsed(),
        );
        scenario.cluster.manager(id).start();
        let leader = scenario.cluster.wait_for_leader(LEADER_BOUND).await;
        // Caught up: it has applied what the leader had committed when it came back.
        let committed = scenario
            .cluster
            .cluster_info(leader)
            .await
            .unwrap()
            .committed_index
            .unwrap_or(0);
        scenario
            .cluster
            .wait_applied(id, committed, SETTLE_BOUND)
            .await;
        report_figure(
            SCENARIO,
            "manager stopped -> back and caught up",
            stopped_at.elapsed(),
        );
        tokio::time::sleep(
            scenario
                .seed
                .jitter(Duration::ZERO, Duration::from_millis(1000)),
        )
        .await;
    }
    let probe_ledger = scenario.take_probes().stop().await;
    let counts = scenario.take_workload().stop().await;
    eprintln!("[fault] {SCENARIO}: workload {counts:?}, probes {} registered / {} deregistered / {} unacknowledged",
        probe_ledger.registered.len(), probe_ledger.deregistered.len(), probe_ledger.unacknowledged);
    let client = scenario.client();
    verify_probes(&client, &probe_ledger, SCENARIO).await;
    scenario.ends_with_none_evicted(SCENARIO).await;
}

/// I3: the whole control plane is stopped (SIGKILL or SIGTERM per manager, seeded) for up to
/// one and a half leases under load and started again: every acknowledged registration and
/// deregistration is there (a probe's, and every executor's), the executors admit again, and
/// admission stayed exclusive throughout.
///
/// Whether an executor keeps its registration across the restart (P6.1) depends on it renewing
/// within the new leader's first lease; the count of executors evicted is printed, not asserted
/// (docs/TESTING.md, "Findings": the executor's retry backoff after a lapse grows to 5 s, longer
/// than this 3 s lease). I5's no-eviction promise is asserted by
/// `all_managers_sigstop_twice_the_lease`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_cluster_stop_and_start() {
    const SCENARIO: &str = "full_cluster_stop_and_start";
    let mut scenario = set_up(SCENARIO, LOADED_AND_PROBED_OFTEN).await;
    scenario
        .probes()
        .first_ack_after(Instant::now(), LEADER_BOUND)
        .await;
    tokio::time::sleep(
        scenario
            .seed
            .jitter(Duration::from_millis(200), Duration::from_millis(1000)),
    )
    .await;

    let client = scenario.client();
    let before = consistent_state(&client).await.unwrap();
    let infos_before = cluster_infos(&scenario.cluster).await;
    let stopped_at = Instant::now();
    for id in [1, 2, 3] {
        if scenario.seed.pick(0..=1) == 0 {
            scenario.cluster.manager(id).kill();
        } else {
            scenario.cluster.manager(id).terminate(EXIT_BOUND).await;
        }
    }
    // Outage length: a setup step, not an assertion.
    let outage = scenario
        .seed
        .jitter(Duration::from_millis(500), FAULT_LEASE + FAULT_LEASE / 2);
    tokio::time::sleep(outage).await;
    let probe_ledger = scenario.take_probes().stop().await;
    for id in [1, 2, 3] {
        scenario.cluster.manager(id).start();
    }
    scenario.cluster.wait_for_leader(LEADER_BOUND).await;
    eprintln!("[fault] {SCENARIO}: outage {} ms", outage.as_millis());
    report_figure(SCENARIO, "stop -> leader back", stopped_at.elapsed());
    let after = consistent_state(&client).await.unwrap();
    assert!(
        after.revision >= before.revision,
        "{SCENARIO}: I3/§9: a consistent read after the restart shows revision {}, older than \
         the {} a consistent read showed before the stop\nreplicas before the stop: \
         {infos_before:#?}\nafter the restart: {:#?}\nstate before: {before:?}\nstate after: \
         {after:?}",
        after.revision,
        before.revision,
        cluster_infos(&scenario.cluster).await
    );
    wait_for_even_split(
        &scenario.fleet.refs(&scenario.executors),
        FAULT_SHARDS,
        SETTLE_BOUND,
    )
    .await;
    report_figure(
        SCENARIO,
        "stop -> executors admitting all shards",
        stopped_at.elapsed(),
    );
    let counts = scenario.take_workload().stop().await;
    let evicted: Vec<&str> = scenario
        .executors
        .iter()
        .filter(|&&i| scenario.fleet.reasons(i).contains_key("unknown_executor"))
        .map(|&i| scenario.fleet.get(i).name.as_str())
        .collect();
    eprintln!(
        "[fault] {SCENARIO}: workload {counts:?}; probes {} registered / {} deregistered / {} \
         unacknowledged; executors evicted by the restart: {evicted:?}",
        probe_ledger.registered.len(),
        probe_ledger.deregistered.len(),
        probe_ledger.unacknowledged
    );
    scenario.fleet.check(SCENARIO);

    // I3: every acknowledged write is remembered: the scenario.probes()', and each executor's first
    // registration (still live, or reaped after the restart and answered by its tombstone;
    // a lost registration would be `404 unknown_executor`).
    verify_probes(&client, &probe_ledger, SCENARIO).await;
    // The scenario.executors registered with credentials of their own (P13.4), so their registrations
    // are looked up rather than deregistered: present, or departed with a tombstone.
    let departed = client
        .watch(0, Duration::from_millis(1))
        .await
        .unwrap_or_else(|e| panic!("{SCENARIO}: reading the tombstones: {e}"))
        .departed;
    for id in &scenario.ids {
        let present = client.executor(id, true).await.is_ok();
        assert!(
            present || departed.iter().any(|d| &d.executor_id == id),
            "{SCENARIO}: I3: registration {id} lost: neither registered nor departed"
        );
    }
}

/// I4: a SIGKILLed executor's shards are re-homed within lease + tick (generous bound asserted,
/// the time printed), never while it could still have admitted (I1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_sigkill() {
    const SCENARIO: &str = "executor_sigkill";
    let mut scenario = set_up(SCENARIO, LOADED).await;
    tokio::time::sleep(scenario.seed.jitter(Duration::ZERO, FAULT_LEASE)).await;

    let victim = scenario.executors[scenario.seed.index(scenario.executors.len())];
    let survivors: Vec<usize> = scenario
        .executors
        .iter()
        .copied()
        .filter(|&i| i != victim)
        .collect();
    let killed_at = Instant::now();
    scenario.fleet.kill(victim);
    wait_for_even_split(&scenario.fleet.refs(&survivors), FAULT_SHARDS, SETTLE_BOUND).await;
    let rehomed = killed_at.elapsed();
    report_figure(SCENARIO, "re-homed after SIGKILL", rehomed);
    assert!(
        rehomed < FAULT_LEASE + FAULT_TICK + Duration::from_secs(20),
        "I4: re-homing took {rehomed:?}"
    );
    let counts = scenario.take_workload().stop().await;
    eprintln!("[fault] {SCENARIO}: workload {counts:?}");
    let report = scenario.fleet.check(SCENARIO);
    assert!(report.handoffs >= (FAULT_SHARDS / 3) as usize, "{report:?}");
}

/// P3.6, I1: an executor paused (SIGSTOP) for longer than its lease fences itself at its own
/// expiry: when it wakes it logs its stops at that expiry, before any shard started elsewhere;
/// then it finds itself reaped, registers anew and gets an even share back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_sigstop_longer_than_its_lease() {
    const SCENARIO: &str = "executor_sigstop_longer_than_its_lease";
    let mut scenario = set_up(SCENARIO, IDLE).await;
    tokio::time::sleep(scenario.seed.jitter(Duration::ZERO, FAULT_LEASE)).await;

    let slot = scenario.seed.index(scenario.executors.len());
    let paused = scenario.executors[slot];
    let others: Vec<usize> = scenario
        .executors
        .iter()
        .copied()
        .filter(|&i| i != paused)
        .collect();
    let held = status_shards(&scenario.fleet.get(paused).status().await.unwrap());
    let stopped_at_ns = leasehold_tests::checker::monotonic_now_ns();
    let stopped_at = Instant::now();
    scenario.fleet.signal(paused, Signal::SIGSTOP);
    // The others take its shards once the manager reaps it (after its lease).
    wait_for_even_split(&scenario.fleet.refs(&others), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        SCENARIO,
        "shards re-homed while paused",
        stopped_at.elapsed(),
    );
    let extra = scenario.seed.jitter(Duration::ZERO, FAULT_LEASE);
    tokio::time::sleep(extra).await;
    let resumed_at_ns = leasehold_tests::checker::monotonic_now_ns();
    scenario.fleet.signal(paused, Signal::SIGCONT);

    // It registers anew (its old id was reaped) and gets a share back.
    poll_until(
        "the paused executor to register anew",
        SETTLE_BOUND,
        || async {
            let status = scenario.fleet.get(paused).status().await?;
            match status["executor_id"].as_str() {
                Some(id) if id != scenario.ids[slot] => Ok(()),
                other => Err(format!("executor id {other:?}")),
            }
        },
    )
    .await;
    wait_for_even_split(
        &scenario.fleet.refs(&scenario.executors),
        FAULT_SHARDS,
        SETTLE_BOUND,
    )
    .await;
    scenario.fleet.check(SCENARIO);

    // It was admitting when paused, so its last stop of each held shard is the lapse, stamped at
    // its expiry: after the pause began, before it woke (not when it noticed).
    let mut last_stop: BTreeMap<u32, AdmissionRecord> = BTreeMap::new();
    for record in scenario.fleet.get(paused).admission_log().unwrap() {
        if record.executor_id == scenario.ids[slot] && record.event == AdmissionEdge::Stop {
            last_stop.insert(record.shard, record);
        }
    }
    for shard in &held {
        let stop = last_stop
            .get(shard)
            .unwrap_or_else(|| panic!("{SCENARIO}: shard {shard} was never stopped"));
        assert_eq!(stop.reason, "lease_lapsed", "{SCENARIO}: {stop:?}");
        assert!(
            stop.t_ns > stopped_at_ns && stop.t_ns < resumed_at_ns,
            "{SCENARIO}: the lapse of shard {shard} is stamped {} outside the pause \
             ({stopped_at_ns}..{resumed_at_ns})",
            stop.t_ns
        );
    }
}

/// I5 (seed 004): all three managers paused (SIGSTOP) for twice the lease, then resumed: no
/// executor is evicted and no shard moves. Executors fence themselves meanwhile (their own lease
/// lapses) and resume at the same epochs without re-acquiring (P3.6).
///
/// On resume the followers' election timers have long expired, so a new term begins and the new
/// leader's grace (P6.1) is what keeps the overdue leases (the leader and term before and after
/// are printed); the mass-expiry guard (P6.3) covers a leader that keeps its office through a
/// stall, which signals cannot produce here, and is pinned by `manager/src/leader/core_tests.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_managers_sigstop_twice_the_lease() {
    const SCENARIO: &str = "all_managers_sigstop_twice_the_lease";
    let mut scenario = set_up(SCENARIO, IDLE).await;
    let client = scenario.client();
    let before = ownership(&consistent_state(&client).await.unwrap());

    let leader_before = scenario.cluster.wait_for_leader(LEADER_BOUND).await;
    let term_before = scenario
        .cluster
        .cluster_info(leader_before)
        .await
        .unwrap()
        .term;
    let mut order = vec![1u64, 2, 3];
    scenario.seed.shuffle(&mut order);
    for &id in &order {
        scenario.cluster.manager(id).signal(Signal::SIGSTOP);
    }
    let paused_at = Instant::now();
    // The pause: a setup step.
    tokio::time::sleep(
        2 * FAULT_LEASE
            + scenario
                .seed
                .jitter(Duration::ZERO, Duration::from_millis(500)),
    )
    .await;
    scenario.seed.shuffle(&mut order);
    for &id in &order {
        scenario.cluster.manager(id).signal(Signal::SIGCONT);
    }
    let leader_after = scenario.cluster.wait_for_leader(LEADER_BOUND).await;
    let term_after = scenario
        .cluster
        .cluster_info(leader_after)
        .await
        .unwrap()
        .term;
    eprintln!(
        "[fault] {SCENARIO}: leader {leader_before} (term {term_before}) before the pause, \
         {leader_after} (term {term_after}) after"
    );
    wait_admitting_as(
        &scenario.fleet,
        &scenario.executors,
        &scenario.ids,
        SETTLE_BOUND,
    )
    .await;
    report_figure(
        SCENARIO,
        "executors admitting again after the pause",
        paused_at.elapsed(),
    );
    // Past any new leader's grace (P6.1) and a few ticks: a reap would have happened by now.
    tokio::time::sleep(FAULT_LEASE + 3 * FAULT_TICK).await;
    let after = ownership(&consistent_state(&client).await.unwrap());
    let moved: Vec<u32> = before
        .iter()
        .filter(|(shard, owner)| after.get(shard) != Some(owner))
        .map(|(shard, _)| *shard)
        .collect();
    assert!(moved.is_empty(), "{SCENARIO}: I5: shards moved: {moved:?}");
    wait_admitting_as(
        &scenario.fleet,
        &scenario.executors,
        &scenario.ids,
        SETTLE_BOUND,
    )
    .await;
    assert_none_evicted(&scenario.fleet, &scenario.executors, SCENARIO);
    let resumed: usize = scenario
        .executors
        .iter()
        .map(|&i| {
            scenario
                .fleet
                .reasons(i)
                .get("resumed")
                .copied()
                .unwrap_or(0)
        })
        .sum();
    eprintln!("[fault] {SCENARIO}: {resumed} shard admissions resumed after lapses (P3.6)");
    scenario.fleet.check(SCENARIO);
}

/// P7.2, P4.4: the reply to a register, and later to a deregister, is dropped once after the
/// manager applied it; the executor retries with the same idempotency key: exactly one executor
/// is registered (the same id), and after the stop it is gone and the executor saw success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_register_and_deregister_replies_are_retried() {
    const SCENARIO: &str = "lost_register_and_deregister_replies_are_retried";
    let mut scenario = set_up(SCENARIO, BEHIND_PROXIES).await;
    let proxies = ProxySet::start(
        &scenario.cluster.urls(),
        scenario.seed.derive(),
        leasehold_tests::proxy_tls(&scenario.cluster),
    )
    .await
    .expect("start the fault proxies");
    proxies.drop_reply_once("POST", "/v1/executors", PathMatch::Exact);
    let mut spec = ExecutorSpec::local(&scenario.cluster, "behind-proxy");
    spec.managers = proxies.urls();
    spec.extra_args = fault_executor_args();
    let index = scenario.fleet.start(spec);
    wait_for_even_split(&scenario.fleet.refs(&[index]), FAULT_SHARDS, SETTLE_BOUND).await;
    let id = wait_registered(scenario.fleet.get(index)).await;

    let stats = proxies.stats();
    assert_eq!(stats.dropped_replies, ["POST /v1/executors"], "{stats:?}");
    let registers = stats
        .requests
        .iter()
        .filter(|r| *r == "POST /v1/executors")
        .count();
    assert!(
        registers >= 2,
        "{SCENARIO}: the register was not retried: {stats:?}"
    );
    let client = scenario.client();
    let state = consistent_state(&client).await.unwrap();
    let registered: Vec<&str> = state
        .executors
        .iter()
        .map(|e| e.executor_id.as_str())
        .collect();
    assert_eq!(
        registered,
        [id.as_str()],
        "{SCENARIO}: exactly one executor, the one it was told"
    );

    proxies.drop_reply_once("DELETE", "/v1/executors/", PathMatch::Prefix);
    scenario.fleet.get(index).signal_terminate();
    let exit = scenario.fleet.executors[index].wait_exit(EXIT_BOUND).await;
    assert!(exit.success(), "{exit:?}");
    let log = scenario.fleet.get(index).log();
    assert!(
        log.contains("deregistered"),
        "{SCENARIO}: no deregistration:\n{log}"
    );
    assert!(!log.contains("deregistration failed"), "{log}");
    let stats = proxies.stats();
    let deletes = stats
        .requests
        .iter()
        .filter(|r| r.starts_with("DELETE "))
        .count();
    assert_eq!(stats.dropped_replies.len(), 2, "{stats:?}");
    assert!(
        deletes >= 2,
        "{SCENARIO}: the deregister was not retried: {stats:?}"
    );
    let state = consistent_state(&client).await.unwrap();
    assert!(
        state.executors.is_empty(),
        "{SCENARIO}: the executor is still registered: {state:?}"
    );
    scenario.fleet.check(SCENARIO);
}

/// P2.4, P4.1, P3.2: every message between executors and managers (both ways: requests and
/// pushes) is delayed by 0–150 ms each way, reordering them, and a quarter are delivered twice,
/// while executors join, crash and leave: exclusivity holds and the shards end evenly spread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_reordered_and_duplicated_messages() {
    const SCENARIO: &str = "delayed_reordered_and_duplicated_messages";
    let mut scenario = set_up(SCENARIO, BEHIND_PROXIES).await;
    let impairment = Some(Impairment {
        delay_ms: (0, 150),
        duplicate_percent: 25,
    });
    let to_managers = ProxySet::start(
        &scenario.cluster.urls(),
        scenario.seed.derive(),
        leasehold_tests::proxy_tls(&scenario.cluster),
    )
    .await
    .expect("start the fault proxies");
    to_managers.impair(impairment);
    let names = ["a", "b", "c", "d"];
    let ports: Vec<u16> = names.iter().map(|_| free_port()).collect();
    let upstreams: Vec<String> = ports
        .iter()
        .map(|p| format!("{}://127.0.0.1:{p}", scenario.cluster.scheme()))
        .collect();
    let to_executors = ProxySet::start(
        &upstreams,
        scenario.seed.derive(),
        leasehold_tests::proxy_tls(&scenario.cluster),
    )
    .await
    .expect("start the fault proxies");
    to_executors.impair(impairment);
    let start = |fleet: &mut Fleet, slot: usize| {
        let mut spec = ExecutorSpec::local(&scenario.cluster, names[slot]);
        spec.port = ports[slot];
        spec.managers = to_managers.urls();
        spec.advertise = Some(to_executors.urls()[slot].clone());
        spec.extra_args = fault_executor_args();
        fleet.start(spec)
    };
    let a = start(&mut scenario.fleet, 0);
    let b = start(&mut scenario.fleet, 1);
    wait_for_even_split(&scenario.fleet.refs(&[a, b]), FAULT_SHARDS, SETTLE_BOUND).await;
    let c = start(&mut scenario.fleet, 2);
    let settled_at = Instant::now();
    wait_for_even_split(&scenario.fleet.refs(&[a, b, c]), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        SCENARIO,
        "third executor joined and spread",
        settled_at.elapsed(),
    );
    // One of them crashes, another leaves gracefully, a fourth joins.
    let mut trio = [a, b, c];
    scenario.seed.shuffle(&mut trio);
    let (crashed, leaving, staying) = (trio[0], trio[1], trio[2]);
    scenario.fleet.kill(crashed);
    scenario.fleet.get(leaving).signal_terminate();
    let d = start(&mut scenario.fleet, 3);
    scenario.fleet.executors[leaving]
        .wait_exit(EXIT_BOUND)
        .await;
    let changed_at = Instant::now();
    wait_for_even_split(
        &scenario.fleet.refs(&[staying, d]),
        FAULT_SHARDS,
        SETTLE_BOUND,
    )
    .await;
    report_figure(
        SCENARIO,
        "crash + leave + join settled",
        changed_at.elapsed(),
    );

    let stats = (to_managers.stats(), to_executors.stats());
    eprintln!(
        "[fault] {SCENARIO}: {} requests to managers ({} duplicated), {} pushes ({} duplicated)",
        stats.0.requests.len(),
        stats.0.duplicated,
        stats.1.requests.len(),
        stats.1.duplicated
    );
    assert!(
        stats.0.duplicated + stats.1.duplicated > 0,
        "{SCENARIO}: the proxies duplicated nothing"
    );
    let client = scenario.client();
    let state = consistent_state(&client).await.unwrap();
    assert_eq!(
        state.executors.len(),
        2,
        "{SCENARIO}: duplicated registers made extra executors: {:?}",
        state.executors
    );
    scenario.fleet.check(SCENARIO);
}
