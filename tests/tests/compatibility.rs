//! Nothing is lost across versions (PROTOCOL P14.1, I8): a data directory and a backup written by
//! an earlier release (tests/fixtures/<release>/, made by `scripts/make-compat-fixtures` with
//! that release's binaries) open with this release and serve the same `/v1/state`: the same
//! executors (ids, incarnations, names, addresses, drain flags, sets) and the same shards
//! (owners, epochs, handoffs). Only the revision and the lease clocks may differ.
//!
//! And executors of the previous release keep working against this release's managers, beside
//! this release's executors (P14.3): the previous release's binaries are built from its commit
//! (CHANGELOG.md) by `leasehold_harness::release_bin_dir`, cached under `target/releases/`.
//!
//! The fixture is a one-manager cluster of 16 shards with three executors, one of them
//! draining, stopped cleanly with the executors still registered. Its manager ran on a fixed
//! port, which its data directory records as its address, so the test runs it on the same port.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use leasehold_tests::ctl::leaseholdctl;
use leasehold_tests::executor::{
    admission_logs, check_admission_exclusivity, wait_for_even_split, ExecutorProcess, ExecutorSpec,
};
use leasehold_tests::{
    one_cluster_at_a_time, poll_until, replicated_view, Cluster, ClusterOptions, ManagerPlacement,
};
use serde_json::Value;

const LEADER_BOUND: Duration = Duration::from_secs(60);
/// Releases whose fixtures are checked in; every one must keep opening.
const RELEASES: [&str; 1] = ["0.1.0"];
/// The previous release and its commit (CHANGELOG.md).
const PREVIOUS: (&str, &str) = ("0.1.0", "80161b3");
/// The previous release's first build takes minutes on a loaded 2-core machine.
const SETTLE_BOUND: Duration = Duration::from_secs(90);
/// This release's newest state schema, the cluster version a cluster of its managers reaches.
const THIS_SCHEMA: u64 = leasehold_api::wire::NEWEST_SCHEMA as u64;
/// Three leases of `leasehold_tests::TEST_LEASE` (4 s): an executor whose renewals were refused
/// would have been reaped by then.
const THREE_TEST_LEASES: Duration = Duration::from_secs(12);

fn fixture_dir(release: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(release)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (scripts/make-compat-fixtures writes it)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The state as this test compares it: without the revision and the lease clocks.
fn comparable(state: Value) -> Value {
    let mut state = replicated_view(state);
    state["revision"] = Value::Null;
    state
}

/// A state an earlier release served, as this release shows the same state: replies gain fields
/// (docs/PROTOCOL.md, "Versions"), and a field this release adds to an executor is shown at the
/// value an executor of that release is read with, so the comparison checks it too. Every
/// executor of schemas 2 and 3 has capacity 1 (P15.1).
fn shown_by_this_release(mut state: Value) -> Value {
    for executor in state["executors"].as_array_mut().into_iter().flatten() {
        if let Some(fields) = executor.as_object_mut() {
            fields.entry("capacity").or_insert(Value::from(1));
        }
    }
    state
}

/// One release's fixture and a one-manager cluster for it, not started, on the fixture's port.
struct Fixture {
    release: &'static str,
    dir: PathBuf,
    /// The fixture's state, as [`comparable`] has it.
    expected: Value,
    cluster: Cluster,
    id: u64,
}

impl Fixture {
    fn load(release: &'static str) -> Self {
        let dir = fixture_dir(release);
        let meta = read_json(&dir.join("meta.json"));
        let expected = shown_by_this_release(comparable(read_json(&dir.join("state.json"))));
        let placement = ManagerPlacement {
            host: "127.0.0.1".to_string(),
            port: u16::try_from(meta["port"].as_u64().unwrap()).unwrap(),
            netns: None,
        };
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", placement.port)).is_ok(),
            "port {} (the fixture's manager address) is in use",
            placement.port
        );
        let id = meta["node_id"].as_u64().unwrap();
        let cluster = Cluster::new_placed(
            ClusterOptions {
                size: 1,
                lease: meta["lease_duration"].as_str().unwrap().to_string(),
                shard_count: u32::try_from(meta["shard_count"].as_u64().unwrap()).unwrap(),
                ..ClusterOptions::default()
            },
            BTreeMap::from([(id, placement)]),
        );
        Self {
            release,
            dir,
            expected,
            cluster,
            id,
        }
    }

    fn data_dir(&mut self) -> PathBuf {
        self.cluster.manager(self.id).data_dir.clone()
    }

    /// Starts the manager and checks it serves the fixture's state; `what` names the source.
    async fn assert_serves_the_fixtures_state(mut self, what: &str) -> Self {
        self.cluster.start_all();
        self.assert_same_state(what).await;
        self
    }

    async fn assert_same_state(&mut self, what: &str) {
        self.cluster.wait_for_leader(LEADER_BOUND).await;
        let state = served_state(&self.cluster, self.id).await;
        assert_eq!(
            comparable(state),
            self.expected,
            "release {}'s {what} opens with the state it had",
            self.release
        );
    }

    async fn cluster_info(&self) -> Value {
        let reply = self
            .cluster
            .http
            .get(format!("{}/v1/cluster", self.cluster.url(self.id)))
            .send()
            .await
            .expect("GET /v1/cluster");
        reply.json().await.expect("cluster info")
    }
}

async fn served_state(cluster: &Cluster, id: u64) -> Value {
    poll_until("the manager to serve its state", LEADER_BOUND, || async {
        let reply = cluster
            .http
            .get(format!("{}/v1/state", cluster.url(id)))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        reply.json::<Value>().await.map_err(|e| e.to_string())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p14_1_data_directories_of_earlier_releases_open_with_the_same_state() {
    let _serial = one_cluster_at_a_time().await;
    for release in RELEASES {
        let mut fixture = Fixture::load(release);
        let data_dir = fixture.data_dir();
        let parent = data_dir.parent().unwrap();
        let untar = Command::new("tar")
            .arg("-xzf")
            .arg(fixture.dir.join("data-dir.tgz"))
            .arg("-C")
            .arg(parent)
            .status()
            .expect("run tar");
        assert!(untar.success(), "tar -xzf {}", fixture.dir.display());
        std::fs::rename(parent.join(format!("manager-{}", fixture.id)), &data_dir).ok();
        assert!(data_dir.is_dir(), "{} from the fixture", data_dir.display());
        let mut fixture = fixture
            .assert_serves_the_fixtures_state("data directory")
            .await;
        // The state came from the fixture's snapshot (and the log after it, the drain).
        let info = fixture.cluster_info().await;
        assert!(
            info["snapshot"].is_object(),
            "the fixture holds a snapshot of {release}: {info}"
        );

        // Its only member runs this release, so the cluster version rises (P14.3) and the
        // directory is written at the new schema from then on: a snapshot of it, then a restart
        // on it, still serve the same state.
        let raised = poll_until("the cluster version to rise", LEADER_BOUND, || async {
            let info = fixture.cluster_info().await;
            match info["cluster_version"].as_u64() {
                Some(THIS_SCHEMA) => Ok(THIS_SCHEMA),
                _ => Err(format!("{info}")),
            }
        })
        .await;
        let snapshot = fixture
            .cluster
            .http
            .post(format!(
                "{}/v1/cluster/snapshot",
                fixture.cluster.url(fixture.id)
            ))
            .send()
            .await
            .expect("POST /v1/cluster/snapshot");
        assert!(snapshot.status().is_success(), "{}", snapshot.status());
        let id = fixture.id;
        let stopped = fixture.cluster.manager(id).terminate(LEADER_BOUND).await;
        assert!(stopped.success(), "clean stop: {stopped:?}");
        fixture.cluster.manager(id).start();
        fixture
            .assert_same_state("data directory, migrated to the new schema and reopened,")
            .await;
        assert_eq!(
            fixture.cluster_info().await["cluster_version"].as_u64(),
            Some(raised),
            "the raised cluster version survives a restart"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p14_1_backups_of_earlier_releases_restore_with_the_same_state() {
    let _serial = one_cluster_at_a_time().await;
    for release in RELEASES {
        let mut fixture = Fixture::load(release);
        let data_dir = fixture.data_dir().display().to_string();
        let backup = fixture.dir.join("backup").display().to_string();
        let run = leaseholdctl(
            &[],
            &["snapshot", "restore", &backup, "--data-dir", &data_dir],
        )
        .await
        .ok();
        assert!(run.stdout.contains("Prepared"), "{}", run.stdout);
        fixture.assert_serves_the_fixtures_state("backup").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p14_3_an_executor_of_the_previous_release_works_beside_this_releases() {
    let (release, commit) = PREVIOUS;
    let previous =
        tokio::task::spawn_blocking(move || leasehold_harness::release_bin_dir(release, commit))
            .await
            .expect("build task")
            .unwrap_or_else(|e| panic!("{e}"));
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: 16,
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let mut old = ExecutorProcess::start_spec(
        cluster.dir.path(),
        ExecutorSpec {
            binary: Some(previous.join("leasehold-executor")),
            ..ExecutorSpec::local(&cluster, "previous-release")
        },
    );
    let new = ExecutorProcess::start(&cluster, "this-release");
    wait_for_even_split(&[&old, &new], 16, SETTLE_BOUND).await;

    // It registered without a capacity and renews without loads, neither of which it knows
    // (P15.1): it counts as capacity 1, and keeps its registration and its shards for several
    // leases, which only renewals this release accepted can do.
    let previous_id = old.status().await.unwrap()["executor_id"].clone();
    let registered = |executors: &Value| {
        executors.as_array().and_then(|all| {
            all.iter()
                .find(|e| e["executor_id"] == previous_id)
                .cloned()
        })
    };
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let executors_url = format!("{}/v1/executors", cluster.url(leader));
    let executors: Value = cluster
        .http
        .get(&executors_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let view = registered(&executors).unwrap_or_else(|| panic!("{executors}"));
    assert_eq!(view["capacity"], 1, "{view}");
    assert_eq!(cluster.options.lease, leasehold_tests::TEST_LEASE);
    tokio::time::sleep(THREE_TEST_LEASES).await;
    let executors: Value = cluster
        .http
        .get(&executors_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let view = registered(&executors).unwrap_or_else(|| {
        panic!("P3.4: the 0.1.0 executor renewed for three leases: {executors}")
    });
    assert!(
        view["lease_remaining_ms"].as_u64() > Some(0)
            && !view["shards"].as_array().unwrap().is_empty(),
        "{view}"
    );
    wait_for_even_split(&[&old, &new], 16, SETTLE_BOUND).await;

    // The previous release's executor dies: its shards move to this release's (P3.8).
    old.kill();
    // CLOCK_MONOTONIC after the process was reaped: an upper bound on when it stopped admitting.
    let dead_by_ns = leasehold_tests::checker::monotonic_now_ns();
    wait_for_even_split(&[&new], 16, SETTLE_BOUND).await;
    let logs = admission_logs(&[(&old, Some(dead_by_ns)), (&new, None)]);
    let report = check_admission_exclusivity(&logs).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.handoffs > 0,
        "shards moved between the releases: {report:?}"
    );
}
