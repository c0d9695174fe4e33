//! A rolling upgrade from the previous release, with that release's real binaries (PROTOCOL
//! P14.2, P14.3, I8), and a refused downgrade (P14.1).
//!
//! The previous release (0.1.0, commit 80161b3, CHANGELOG.md) is built into
//! `target/releases/0.1.0/` by `leasehold_harness::release_bin_dir`. A three-manager cluster and
//! three executors start on it; then, under load (in-process fake executors that register at
//! every stage and keep renewing), the managers are replaced one at a time on their own data
//! directories (SIGTERM, this release's binary), followers first, then the executors one at a
//! time. Throughout: no acknowledged registration is lost (I3), nobody is reaped, and the
//! admission logs of every executor that ran, real or fake, keep I1 and I2.
//!
//! The cluster version (P14.3) stays at schema 2 while any voter runs 0.1.0 and is raised to this
//! release's schema (12) by the leader once the last one runs this release. After that a
//! 0.1.0 binary must refuse the data directory rather than misread it; this release's binary then
//! rejoins on it. Just before the raise, with this release's leader and the last 0.1.0 voter
//! stopped, a registration with a capacity, one with an application version, and an operator
//! control (maintenance mode) are refused by the proposal gate (P14.3, P15.1, P17.3, P17.4).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_api::problem::ErrorCode;
use leasehold_api::RegisterRequest;
use leasehold_tests::checker::monotonic_now_ns;
use leasehold_tests::executor::{
    admission_logs, check_admission_exclusivity, AdmissionEdge, AdmissionRecord, ExecutorLog,
    ExecutorProcess, ExecutorSpec,
};
use leasehold_tests::fake_executor::{FakeExecutor, Interval};
use leasehold_tests::http_checks::{scrape, summed};
use leasehold_tests::{
    binary, one_cluster_at_a_time, poll_until, replicated_view, Cluster, ClusterOptions,
};
use serde_json::Value;
use tokio::time::Instant;

/// The previous release and its commit (CHANGELOG.md).
const PREVIOUS: (&str, &str) = ("0.1.0", "80161b3");
/// Enough shards that each of the dozen executors of the last stages still holds two or more.
const SHARDS: u32 = 32;
const MANAGERS: [u64; 3] = [1, 2, 3];
/// State schema of 0.1.0 and of this release (CHANGELOG.md).
const PREVIOUS_SCHEMA: u64 = 2;
/// This build's newest schema.
const THIS_SCHEMA: u64 = leasehold_api::wire::NEWEST_SCHEMA as u64;
/// Generous: a loaded 2-core machine; nothing here asserts how long anything took.
const LEADER_BOUND: Duration = Duration::from_secs(60);
const SETTLE_BOUND: Duration = Duration::from_secs(90);
const STOP_BOUND: Duration = Duration::from_secs(30);
/// The leader raises the cluster version "within a few seconds" of the last voter's upgrade.
const VERSION_BOUND: Duration = Duration::from_secs(60);

/// The cluster, every executor process started (with the CLOCK_MONOTONIC instant it was dead by
/// once stopped, for the checker) and the fake executors that are the load.
struct Upgrade {
    cluster: Cluster,
    executors: Vec<(ExecutorProcess, Option<u64>)>,
    fakes: Vec<FakeExecutor>,
}

impl Upgrade {
    fn start_executor(&mut self, name: &str, binary: Option<PathBuf>) {
        let spec = ExecutorSpec {
            binary,
            ..ExecutorSpec::local(&self.cluster, name)
        };
        let executor = ExecutorProcess::start_spec(self.cluster.dir.path(), spec);
        self.executors.push((executor, None));
    }

    /// SIGTERM: the executor stops admitting and deregisters (P3.7), so its shards move at once.
    async fn stop_executor(&mut self, index: usize) {
        let (executor, dead_by) = &mut self.executors[index];
        executor.signal_terminate();
        let status = executor.wait_exit(STOP_BOUND).await;
        assert!(
            status.success(),
            "P3.7: {} stops cleanly: {status}",
            executor.name
        );
        *dead_by = Some(monotonic_now_ns());
    }

    /// One registration, acknowledged once this returns: a write that must survive (I3).
    async fn register_fake(&mut self, stage: &str) {
        let fake = FakeExecutor::start(self.cluster.urls(), &format!("load-{stage}")).await;
        self.fakes.push(fake);
    }

    /// Waits until the running executors and the fakes together hold every shard once, evenly
    /// (P5.4): the planner counts the fakes like any executor.
    async fn wait_for_split(&self, stage: &str) {
        let running: Vec<&ExecutorProcess> = (self.executors.iter())
            .filter(|(_, dead_by)| dead_by.is_none())
            .map(|(executor, _)| executor)
            .collect();
        let what = format!("{stage}: every shard held once, evenly (P5.4)");
        poll_until(&what, SETTLE_BOUND, || async {
            let mut sets = Vec::new();
            for executor in &running {
                sets.push(executor.admitted_shards().await?);
            }
            sets.extend(self.fakes.iter().map(|f| f.held().into_keys().collect()));
            let sizes: Vec<usize> = sets.iter().map(BTreeSet::len).collect();
            let union: BTreeSet<u32> = sets.into_iter().flatten().collect();
            let spread = sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0);
            let total: usize = sizes.iter().sum();
            if total == SHARDS as usize && union.len() == total && spread <= 1 {
                Ok(())
            } else {
                Err(format!("shards per executor (real, then fake): {sizes:?}"))
            }
        })
        .await;
    }

    /// P14.3, P15.1, P17.3, P17.4, P18.3: with this release's leader and a 0.1.0 voter (stopped,
    /// so the cluster version stays 2), a registration with a capacity other than 1,
    /// one with an application version, one with labels and an operator
    /// control (maintenance mode on) are refused by the proposal gate, `409` and
    /// nothing changed or recorded; the executor library never sends such a registration then.
    async fn newer_commands_are_refused_below_their_schemas(&self, leader: u64) {
        let zone: leasehold_api::wire::Labels = [("zone".to_owned(), "a".to_owned())].into();
        let cases = [
            (
                "capacity-before-the-raise",
                Some(2),
                None,
                Default::default(),
                "P14.3: a capacity before the cluster version reaches 4",
            ),
            (
                "app-version-before-the-raise",
                None,
                Some("1.4.0".to_owned()),
                Default::default(),
                "P14.3: an application version before the cluster version reaches 5",
            ),
            (
                "labels-before-the-raise",
                None,
                None,
                zone,
                "P14.3: labels before the cluster version reaches 7",
            ),
        ];
        for (incarnation, capacity, app_version, labels, expectation) in cases {
            let request = RegisterRequest {
                follows_generations: false,
                namespace: None,
                incarnation: incarnation.into(),
                address: "http://127.0.0.1:9".into(),
                name: None,
                credential: None,
                capacity,
                app_version,
                labels,
            };
            let error = self
                .cluster
                .client()
                .register(&request)
                .await
                .expect_err(expectation);
            assert_eq!(error.code(), Some(ErrorCode::Conflict), "{error}");
            assert!(error.to_string().contains("P14.3"), "{error}");
            let executors = self.get(leader, "/v1/executors").await.unwrap();
            assert!(
                !executors.to_string().contains(incarnation),
                "the refused registration changed nothing: {executors}"
            );
        }

        let error = self
            .cluster
            .client()
            .set_maintenance(true)
            .await
            .expect_err("P14.3: maintenance mode before the cluster version reaches 6");
        assert_eq!(error.code(), Some(ErrorCode::Conflict), "{error}");
        assert!(error.to_string().contains("P14.3"), "{error}");
        let maintenance = self.get(leader, "/v1/cluster/maintenance").await.unwrap();
        assert_eq!(
            maintenance["on"], false,
            "the refused operator control changed nothing: {maintenance}"
        );
        let audit = self.get(leader, "/v1/audit").await.unwrap();
        assert_eq!(
            audit.as_array().map(Vec::len),
            Some(0),
            "and recorded nothing: {audit}"
        );
    }

    /// Renewals answered from memory (P6.8), summed over the running managers (a 0.1.0 manager
    /// has no such counter; a stopped one is skipped).
    async fn renewals_from_memory(&self) -> f64 {
        let mut scrapes = Vec::new();
        for id in MANAGERS {
            if let Ok(scraped) = scrape(&self.cluster.http, &self.cluster.url(id)).await {
                scrapes.push(scraped);
            }
        }
        summed(&scrapes, "leasehold_renewals_from_memory_total")
    }

    async fn get(&self, id: u64, path: &str) -> Result<Value, String> {
        let url = format!("{}{path}", self.cluster.url(id));
        let reply = self.cluster.http.get(&url).send().await;
        let reply = reply.map_err(|e| format!("{url}: {e}"))?;
        reply.json().await.map_err(|e| format!("{url}: {e}"))
    }

    /// Waits for a leader every running manager names, then until manager `id` has applied
    /// what that leader had committed; returns the leader.
    async fn wait_caught_up(&mut self, id: u64) -> u64 {
        let leader = self.cluster.wait_for_leader(LEADER_BOUND).await;
        let info = self.cluster.cluster_info(leader).await;
        let committed = info.unwrap_or_else(|e| panic!("{e}")).committed_index;
        (self.cluster)
            .wait_applied(id, committed.unwrap_or(0), LEADER_BOUND)
            .await;
        leader
    }

    /// The fakes' admission intervals as admission logs on CLOCK_MONOTONIC, the clock the real
    /// executors stamp theirs on, so the checker sees one timeline per shard. std's (and
    /// tokio's) `Instant` is CLOCK_MONOTONIC on Linux; the offset is read between two clock
    /// reads, starts are placed at the earlier and stops at the later, so intervals only widen.
    fn fake_logs(&self) -> Vec<ExecutorLog> {
        let before = monotonic_now_ns();
        let anchor = Instant::now();
        let after = monotonic_now_ns();
        let ns = |at: Instant, base: u64| {
            let ago = u64::try_from(anchor.saturating_duration_since(at).as_nanos()).unwrap();
            let ahead = u64::try_from(at.saturating_duration_since(anchor).as_nanos()).unwrap();
            base - ago + ahead
        };
        let record = |interval: &Interval, event, t_ns| AdmissionRecord {
            generation: 0,
            shard_count: None,
            t_ns,
            executor_id: interval.executor.clone(),
            shard: interval.shard,
            epoch: interval.epoch,
            event,
            reason: "fake executor".to_string(),
            role: leasehold_api::wire::Role::Primary,
        };
        let log = |fake: &FakeExecutor| {
            let mut records = Vec::new();
            for i in fake.intervals() {
                records.push(record(&i, AdmissionEdge::Start, ns(i.start, before)));
                if let Some(end) = i.end {
                    records.push(record(&i, AdmissionEdge::Stop, ns(end, after)));
                }
            }
            // Still running: open intervals last forever.
            ExecutorLog {
                records,
                ended_at_ns: None,
            }
        };
        self.fakes.iter().map(log).collect()
    }

    /// I1, I2 over every executor that ran; nobody evicted; I3 for every fake's registration.
    async fn check_invariants(&mut self, stage: &str) {
        let processes: Vec<(&ExecutorProcess, Option<u64>)> = self
            .executors
            .iter()
            .map(|(e, dead_by)| (e, *dead_by))
            .collect();
        let mut logs = admission_logs(&processes);
        logs.extend(self.fake_logs());
        let report = check_admission_exclusivity(&logs)
            .unwrap_or_else(|e| panic!("{stage}: I1/I2 (P14.2) over every admission log: {e}"));
        eprintln!("{stage}: admission logs: {report:?}");
        assert!(
            report.handoffs > 0,
            "{stage}: shards moved between executors: {report:?}"
        );

        // Through the leader, so every acknowledged write is in what we read (I3).
        let leader = self.cluster.wait_for_leader(LEADER_BOUND).await;
        // The tombstones (P7.2), which `/v1/watch` reports as `departed`: only the 0.1.0
        // executors that were stopped, each deregistered, none reaped (P14.2: evicts nobody).
        let watch = self
            .get(leader, "/v1/watch?revision=0&wait=0s")
            .await
            .unwrap();
        let departed = watch["departed"].as_array().unwrap();
        let stopped = self.executors.iter().filter(|(_, d)| d.is_some()).count();
        assert!(
            departed.iter().all(|t| t["reason"] == "deregistered") && departed.len() == stopped,
            "{stage}: P14.2 evicts no executor; the {stopped} stopped ones deregistered: {departed:?}"
        );
        let state = self.get(leader, "/v1/state?consistent=true").await.unwrap();
        let executors = state["executors"].as_array().unwrap();
        for fake in &self.fakes {
            let record = executors
                .iter()
                .find(|e| e["executor_id"] == *fake.executor_id);
            assert!(
                record.is_some_and(|e| e["address"] == *fake.address),
                "{stage}: I3: acknowledged registration {} ({}) is still registered: {executors:?}",
                fake.executor_id,
                fake.address
            );
        }
        // P18.1: the shard space of the previous release is `default`, and every executor, of
        // either release, stays in it (a view names a namespace only when it is not `default`,
        // and the previous release names none).
        for executor in executors {
            let namespace = &executor["namespace"];
            assert!(
                namespace.is_null() || namespace == "default",
                "{stage}: P18.1: every executor is in `default`: {executor}"
            );
        }
        if stage == "after the upgrade" {
            let namespaces = self.get(leader, "/v1/namespaces").await.unwrap();
            let listed: Vec<(&str, u64)> = namespaces
                .as_array()
                .unwrap()
                .iter()
                .map(|ns| {
                    (
                        ns["name"].as_str().unwrap(),
                        ns["executors"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(
                listed,
                [("default", executors.len() as u64)],
                "{stage}: P18.1: one namespace, holding every executor"
            );
        }
        let running = self.executors.len() - stopped;
        assert_eq!(
            executors.len(),
            self.fakes.len() + running,
            "{stage}: who is registered"
        );
    }
}

/// `/v1/state` as two replicas of one state compare: without the revision and the lease clocks.
fn comparable(state: Value) -> Value {
    let mut state = replicated_view(state);
    state["revision"] = Value::Null;
    state
}

#[tokio::test(flavor = "multi_thread")]
async fn p14_2_rolling_upgrade_from_the_previous_release_under_load_and_a_refused_downgrade() {
    let (release, commit) = PREVIOUS;
    let previous =
        tokio::task::spawn_blocking(move || leasehold_harness::release_bin_dir(release, commit))
            .await
            .expect("build task")
            .unwrap_or_else(|e| panic!("{e}"));
    let this_manager = binary("leasehold-manager");
    let _serial = one_cluster_at_a_time().await;

    // The harness's flags (--id, --listen, --data-dir, --lease-duration, --heartbeat,
    // --election-timeout, --shard-count, --initial-cluster) are all flags 0.1.0 accepts.
    let mut cluster = Cluster::new(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    for manager in cluster.managers.values_mut() {
        manager.set_binary(previous.join("leasehold-manager"));
    }
    cluster.start_all();
    let mut up = Upgrade {
        cluster,
        executors: Vec::new(),
        fakes: Vec::new(),
    };
    up.cluster.wait_for_leader(LEADER_BOUND).await;
    for id in MANAGERS {
        // 0.1.0 did not report its release: this is the previous release running.
        let view = up.get(id, "/v1/cluster").await.unwrap();
        assert!(
            view.get("release").is_none(),
            "manager {id} runs 0.1.0: {view}"
        );
    }
    for n in 1..=3 {
        up.start_executor(
            &format!("previous-{n}"),
            Some(previous.join("leasehold-executor")),
        );
    }
    up.wait_for_split("0.1.0 cluster, 0.1.0 executors").await;
    up.register_fake("before-the-upgrade").await;
    up.wait_for_split("before the upgrade").await;

    // Managers one at a time (P14.2), followers first: the leader's own stop hands leadership
    // over (P8.2) once only one 0.1.0 manager is left.
    let mut upgraded = BTreeSet::new();
    while upgraded.len() < MANAGERS.len() {
        let leader = up.cluster.wait_for_leader(LEADER_BOUND).await;
        let id = (MANAGERS.into_iter())
            .filter(|id| !upgraded.contains(id))
            .min_by_key(|&id| id == leader)
            .unwrap();
        let status = up.cluster.manager(id).terminate(STOP_BOUND).await;
        assert!(
            status.success(),
            "P8.2: manager {id} (0.1.0) stops cleanly: {status}"
        );
        // A write while only two of three voters run, in mixed versions: the restarted manager
        // must catch up on it under its new binary (I3).
        let leader = up.cluster.wait_for_leader(LEADER_BOUND).await;
        up.register_fake(&format!("manager-{id}-down")).await;
        if upgraded.len() + 1 == MANAGERS.len() {
            up.newer_commands_are_refused_below_their_schemas(leader)
                .await;
        }
        up.cluster.manager(id).set_binary(this_manager.clone());
        up.cluster.manager(id).start();
        up.wait_caught_up(id).await;
        upgraded.insert(id);

        if upgraded.len() < MANAGERS.len() {
            for &new in &upgraded {
                let view = up.get(new, "/v1/cluster").await.unwrap();
                assert!(
                    view["release"] == leasehold_api::RELEASE,
                    "manager {new} runs this release: {view}"
                );
                assert!(
                    view["cluster_version"] == PREVIOUS_SCHEMA,
                    "P14.3: manager {new} reports cluster version 2 while a voter runs 0.1.0: \
                     {view}"
                );
                // Nobody may take a 0.1.0 voter for one that can apply a newer schema (the fields
                // are optional: absent until the answering node has learnt them).
                for member in view["voters"].as_array().unwrap() {
                    if upgraded.contains(&member["node_id"].as_u64().unwrap()) {
                        continue;
                    }
                    let newest = member.get("newest_schema").and_then(Value::as_u64);
                    let release = member.get("release").and_then(Value::as_str);
                    assert!(
                        matches!(newest, None | Some(PREVIOUS_SCHEMA))
                            && release.is_none_or(|release| release == PREVIOUS.0),
                        "P14.3: manager {new} shows 0.1.0 voter {member} as 0.1.0"
                    );
                }
            }
        }
        if upgraded.len() == 1 {
            // This release's executor registers while the managers' versions are mixed (P14.3).
            up.start_executor("this-release-mixed", None);
        }
        up.wait_for_split(&format!("manager {id} upgraded")).await;
        if upgraded.len() < MANAGERS.len() {
            // PROTOCOL §14, P6.8: while a voter runs 0.1.0 (which would not confirm leadership
            // before answering), every renewal is a log entry.
            assert_eq!(
                up.renewals_from_memory().await,
                0.0,
                "a renewal was answered from memory while manager versions were mixed"
            );
        }

        if upgraded.len() == 1 {
            // Rolling back before the cluster version rose loses nothing (P14.1,
            // docs/OPERATIONS.md "Upgrades"): everything this release wrote to the directory,
            // a snapshot included, is still what 0.1.0 reads. Then forwards again.
            let snapshot = up
                .cluster
                .http
                .post(format!("{}/v1/cluster/snapshot", up.cluster.url(id)))
                .send()
                .await
                .expect("POST /v1/cluster/snapshot");
            assert!(snapshot.status().is_success(), "{}", snapshot.status());
            for (binary, what) in [
                (previous.join("leasehold-manager"), "rolled back to 0.1.0"),
                (this_manager.clone(), "upgraded again"),
            ] {
                let status = up.cluster.manager(id).terminate(STOP_BOUND).await;
                assert!(status.success(), "manager {id} stops cleanly: {status}");
                up.cluster.wait_for_leader(LEADER_BOUND).await;
                up.register_fake(&format!("manager-{id}-{what}")).await;
                up.cluster.manager(id).set_binary(binary);
                up.cluster.manager(id).start();
                up.wait_caught_up(id).await;
                let view = up.get(id, "/v1/cluster").await.unwrap();
                assert_eq!(
                    view.get("release").is_none(),
                    what.contains("0.1.0"),
                    "manager {id} {what}: {view}"
                );
                up.wait_for_split(&format!("manager {id} {what}")).await;
            }
        }
    }

    // The cluster version rises only now, after the last voter (P14.3), and on its own. Each
    // node learns the members' releases by asking them every few seconds, so a follower may
    // show a just-upgraded member's old release for a moment: the poll waits that out too.
    let what = format!(
        "every manager to show cluster version {THIS_SCHEMA} and every voter at this release (P14.3)"
    );
    poll_until(&what, VERSION_BOUND, || async {
        let mut seen = Vec::new();
        for id in MANAGERS {
            let view = up.get(id, "/v1/cluster").await?;
            let voters = view["voters"].as_array().cloned().unwrap_or_default();
            let current = voters.iter().all(|member| {
                member["release"] == leasehold_api::RELEASE
                    && member["newest_schema"] == THIS_SCHEMA
            });
            let schemas = &view["schemas"];
            if view["cluster_version"] != THIS_SCHEMA
                || !current
                || schemas["oldest"] != PREVIOUS_SCHEMA
                || schemas["newest"] != THIS_SCHEMA
            {
                seen.push(view);
            }
        }
        match seen.is_empty() {
            true => Ok(()),
            false => Err(format!("not yet: {seen:?}")),
        }
    })
    .await;
    up.register_fake("cluster-version-raised").await;
    up.wait_for_split("cluster version raised").await;
    // From the raised cluster version on, renewals in sync are answered from memory (P6.8).
    let up_ref = &up;
    poll_until(
        "a renewal answered from memory after the raise",
        VERSION_BOUND,
        || async move {
            let answered = up_ref.renewals_from_memory().await;
            (answered > 0.0)
                .then_some(())
                .ok_or(format!("{answered} answered from memory"))
        },
    )
    .await;

    // Then the executors, one at a time (P14.2).
    for n in 0..3 {
        up.stop_executor(n).await;
        up.start_executor(&format!("this-release-{}", n + 1), None);
        up.register_fake(&format!("executor-{}-replaced", n + 1))
            .await;
        up.wait_for_split(&format!("0.1.0 executor {} replaced", n + 1))
            .await;
    }
    up.check_invariants("after the upgrade").await;

    // Downgrade past the raised cluster version (I8, P14.1): a 0.1.0 binary on a follower's
    // data directory refuses it, naming both schemas, instead of misreading it.
    let leader = up.cluster.wait_for_leader(LEADER_BOUND).await;
    let id = MANAGERS.into_iter().find(|&id| id != leader).unwrap();
    up.cluster.manager(id).terminate(STOP_BOUND).await;
    up.cluster
        .manager(id)
        .set_binary(previous.join("leasehold-manager"));
    up.cluster.manager(id).start();
    let status = up.cluster.manager(id).wait_exit(STOP_BOUND).await;
    let log = up.cluster.manager(id).log();
    let newest = format!("schema {THIS_SCHEMA}");
    assert!(
        !status.success() && log.contains(&newest) && log.contains("schema 2"),
        "P14.1: 0.1.0 refuses manager {id}'s {newest} data directory, naming both schemas \
         ({status}): {log}"
    );
    // The other two keep serving: a leader, every shard held, and writes commit.
    up.cluster.wait_for_leader(LEADER_BOUND).await;
    up.register_fake("downgrade-refused").await;
    up.wait_for_split("a 0.1.0 manager refused").await;

    // This release's binary rejoins on the same directory and serves the leader's state.
    up.cluster.manager(id).set_binary(this_manager);
    up.cluster.manager(id).start();
    let leader = up.wait_caught_up(id).await;
    let what = format!("manager {id}'s /v1/state to equal leader {leader}'s (I8, P14.1)");
    poll_until(&what, LEADER_BOUND, || async {
        let ours = comparable(up.get(id, "/v1/state").await?);
        let theirs = comparable(up.get(leader, "/v1/state").await?);
        match ours == theirs {
            true => Ok(()),
            false => Err(format!("manager {id}: {ours}\nleader {leader}: {theirs}")),
        }
    })
    .await;
    up.check_invariants("after the refused downgrade").await;
}
