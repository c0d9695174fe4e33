//! `leaseholdctl` against real clusters: each command's table and JSON output pinned (volatile
//! values such as lease times, terms, log indexes and ports are checked for shape, not value),
//! the exit codes for no leader / not found / unreachable / bad input, drain and watch, and
//! backup → restore into a fresh cluster (same `/v1/state` apart from revision and lease times),
//! with corrupt backups refused before anything is touched.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use leasehold_api::backup::{RESTORED_FILE_NAME, RESTORE_FILE_NAME};
use leasehold_api::ctl::MemberStatus;
use leasehold_api::wire::{
    AuditRecordView, ClusterInfo, ExecutorView, KeyRoute, MaintenanceView, ShardView, StateView,
};
use leasehold_tests::ctl::{cells, field_pairs, leaseholdctl, CtlRun};
use leasehold_tests::executor::{wait_for_even_split, ExecutorProcess};
use leasehold_tests::{
    binary, free_port, one_cluster_at_a_time, poll_until, replicated_view, Cluster, ClusterOptions,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const SHARDS: u32 = 8;
const LEADER_BOUND: Duration = Duration::from_secs(20);
/// Registration, planning, pushes and handoffs on a loaded 2-core machine.
const SETTLE_BOUND: Duration = Duration::from_secs(60);
const EXIT_BOUND: Duration = Duration::from_secs(20);

/// Every line of a table has its cells starting at the header's column offsets.
fn assert_aligned(run: &CtlRun) {
    let mut lines = run.stdout.lines();
    let header = lines.next().expect("a header line");
    let offsets: Vec<usize> = header
        .match_indices(|c: char| c.is_ascii_uppercase())
        .filter(|(at, _)| *at == 0 || header.as_bytes()[at - 1] == b' ')
        .map(|(at, _)| at)
        .collect();
    for line in lines {
        for &offset in &offsets[1..] {
            let bytes = line.as_bytes();
            assert!(
                offset < bytes.len() && bytes[offset] != b' ' && bytes[offset - 1] == b' ',
                "column at {offset} not aligned in {line:?}\n{}",
                run.stdout
            );
        }
        assert_eq!(line.trim_end(), line, "trailing spaces in {line:?}");
    }
}

fn is_number(cell: &str) -> bool {
    !cell.is_empty() && cell.bytes().all(|b| b.is_ascii_digit())
}

/// A lease time as `human_ms` prints it (`950ms`, `3.2s`, `1m05s`).
fn is_duration(cell: &str) -> bool {
    cell.ends_with("ms") || cell.ends_with('s')
}

/// `/v1/state` without what moves on its own: the revision (renewals) and lease times.
fn without_time(state: Value) -> Value {
    let mut state = replicated_view(state);
    state["revision"] = Value::Null;
    state
}

async fn get_json(cluster: &Cluster, id: u64, path: &str) -> Result<Value, String> {
    let reply = cluster
        .http
        .get(format!("{}{path}", cluster.url(id)))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    reply.json().await.map_err(|e| e.to_string())
}

/// Waits until the state has no handoff pending and `counts_ok` accepts the executors' shard
/// counts (ascending by executor id).
async fn wait_settled(urls: &[String], counts_ok: impl Fn(&[usize]) -> bool) -> StateView {
    poll_until("the assignment to settle", SETTLE_BOUND, || async {
        let run = leaseholdctl(urls, &["--consistent", "-o", "json", "state"]).await;
        if run.code != Some(0) {
            return Err(format!("{run:?}"));
        }
        let state: StateView = run.json();
        let seen: Vec<usize> = state.executors.iter().map(|e| e.shards.len()).collect();
        let releasing = state.shards.iter().filter(|s| s.handoff.is_some()).count();
        if counts_ok(&seen) && releasing == 0 {
            Ok(state)
        } else {
            Err(format!(
                "shards per executor {seen:?}, releasing {releasing}"
            ))
        }
    })
    .await
}

/// A `leaseholdctl watch` child whose output goes to a file.
struct Watcher {
    child: tokio::process::Child,
    output: std::path::PathBuf,
    errors: std::path::PathBuf,
}

impl Watcher {
    fn start(urls: &[String], dir: &Path, json: bool) -> Self {
        let output = dir.join(if json { "watch.jsonl" } else { "watch.txt" });
        let errors = output.with_extension("stderr");
        let file = std::fs::File::create(&output).expect("watch output file");
        let error_file = std::fs::File::create(&errors).expect("watch stderr file");
        let mut command = tokio::process::Command::new(binary("leaseholdctl"));
        command
            .args(["--endpoints", &urls.join(","), "watch", "--wait", "5s"])
            .args(if json { &["-o", "json"][..] } else { &[][..] })
            .stdout(file)
            .stderr(error_file)
            .kill_on_drop(true);
        Self {
            child: command.spawn().expect("spawn leaseholdctl watch"),
            output,
            errors,
        }
    }

    /// Waits until the watch has read its starting state (it says so on stderr), so later
    /// changes are events for it.
    async fn wait_started(&self) {
        poll_until("watch to start", SETTLE_BOUND, || async {
            let errors = std::fs::read_to_string(&self.errors).unwrap_or_default();
            if errors.contains("watching from revision") {
                Ok(())
            } else {
                Err(errors)
            }
        })
        .await
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Ctrl-C ends a watch normally: exit 0.
    async fn interrupt(mut self) {
        let pid = self.child.id().expect("watch running") as i32;
        kill(Pid::from_raw(pid), Signal::SIGINT).expect("SIGINT");
        let status = tokio::time::timeout(EXIT_BOUND, self.child.wait())
            .await
            .expect("watch stops on SIGINT")
            .expect("wait");
        assert_eq!(status.code(), Some(0), "watch ends with 0 on Ctrl-C");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_commands_print_pinned_tables_and_the_wire_types_as_json() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let urls = cluster.urls();
    let a = ExecutorProcess::start(&cluster, "a");
    let b = ExecutorProcess::start(&cluster, "b");
    wait_for_even_split(&[&a, &b], SHARDS, SETTLE_BOUND).await;
    let settled = wait_settled(&urls, |counts| counts == [4, 4]).await;
    let ids: Vec<String> = settled
        .executors
        .iter()
        .map(|e| e.executor_id.clone())
        .collect();

    // cluster status: one row per member, that member's own view.
    let run = leaseholdctl(&urls, &["cluster", "status"]).await.ok();
    assert_aligned(&run);
    let rows = run.rows();
    assert_eq!(
        rows[0],
        [
            "ID",
            "ADDRESS",
            "ROLE",
            "STATE",
            "LEADER",
            "TERM",
            "LAST_LOG",
            "COMMITTED",
            "APPLIED",
            "LAG",
            "RELEASE",
            "SCHEMAS",
            "CLUSTER_VERSION"
        ]
    );
    assert_eq!(rows.len(), 4, "{}", run.stdout);
    for (row, id) in rows[1..].iter().zip(1u64..) {
        let state = if id == leader { "leader" } else { "follower" };
        assert_eq!(
            row[..5],
            [
                id.to_string(),
                cluster.url(id),
                "voter".into(),
                state.into(),
                leader.to_string()
            ]
        );
        assert!(row[5..10].iter().all(|cell| is_number(cell)), "{row:?}");
        // P14.3: every member runs this release, reads schemas 2 to its newest, and the cluster
        // is at that one.
        let newest = leasehold_api::wire::NEWEST_SCHEMA.to_string();
        assert_eq!(
            row[10..],
            [
                leasehold_api::RELEASE.to_owned(),
                format!("2-{newest}"),
                newest.clone()
            ],
            "{row:?}"
        );
    }
    let json: Vec<MemberStatus> = leaseholdctl(&urls, &["-o", "json", "cluster", "status"])
        .await
        .ok()
        .json();
    assert_eq!(
        json.iter().map(|m| m.node_id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(json
        .iter()
        .all(|m| m.voter && m.error.is_none() && m.lag.is_some()));
    assert!(json
        .iter()
        .all(|m| m.info.as_ref().is_some_and(|i| i.leader_id == Some(leader))));

    // member list
    let run = leaseholdctl(&urls, &["member", "list"]).await.ok();
    assert_aligned(&run);
    let expected: Vec<Vec<String>> = std::iter::once(
        vec!["ID", "ADDRESS", "ROLE", "LEADER"]
            .into_iter()
            .map(String::from)
            .collect(),
    )
    .chain((1u64..=3).map(|id| {
        vec![
            id.to_string(),
            cluster.url(id),
            "voter".to_string(),
            if id == leader { "yes" } else { "no" }.to_string(),
        ]
    }))
    .collect();
    assert_eq!(run.rows(), expected);
    let info: ClusterInfo = leaseholdctl(&urls, &["-o", "json", "member", "list"])
        .await
        .ok()
        .json();
    assert_eq!(info.voters.len(), 3);
    assert_eq!(info.leader_id, Some(leader));

    // P17.4: with every voter up and caught up, any one of them is safe to stop; the answer
    // names the voters left.
    let follower = (1u64..=3).find(|&id| id != leader).expect("a follower");
    let run = leaseholdctl(&urls, &["member", "safe-to-stop", &follower.to_string()])
        .await
        .ok();
    assert!(
        run.stdout.starts_with(&format!(
            "manager {follower}: safe to stop: without it, voters"
        )),
        "{run:?}"
    );
    // One whole line: without its newline the shell's prompt followed the verdict.
    assert!(
        run.stdout.ends_with('\n') && run.stdout.lines().count() == 1,
        "{run:?}"
    );
    assert_eq!(
        leaseholdctl(&urls, &["member", "safe-to-stop", "9"])
            .await
            .code,
        Some(4),
        "not a member"
    );
    // P17.4: the next plan, not committed, names the revision it was planned on.
    let run = leaseholdctl(&urls, &["plan"]).await.ok();
    assert!(run.stdout.contains("revision"), "{run:?}");

    // member add and remove, by hand (etcd's flow): a fourth manager started with the full
    // member list waits to be added; `member add` makes it a learner, catches it up, promotes it.
    let joiner_url = cluster.add_joiner(4).url();
    let members = format!(
        "{},4={joiner_url}",
        (1u64..=3)
            .map(|id| format!("{id}={}", cluster.url(id)))
            .collect::<Vec<_>>()
            .join(",")
    );
    cluster
        .manager(4)
        .start_with(&["--initial-cluster", &members]);
    let run = leaseholdctl(&urls, &["member", "add", "4", &joiner_url])
        .await
        .ok();
    assert_aligned(&run);
    assert_eq!(run.rows().len(), 5, "{}", run.stdout);
    assert_eq!(
        run.rows()[4][..3],
        ["4".to_string(), joiner_url.clone(), "voter".to_string()]
    );
    assert_eq!(
        leaseholdctl(&urls, &["member", "add", "4", &joiner_url])
            .await
            .code,
        Some(1),
        "adding a voter twice is a conflict"
    );
    let run = leaseholdctl(&urls, &["member", "remove", "4"]).await.ok();
    assert_eq!(run.rows().len(), 4, "{}", run.stdout);
    assert!(run.rows().iter().all(|row| row[0] != "4"));
    cluster.manager(4).kill();

    // executor list
    let run = leaseholdctl(&urls, &["executor", "list"]).await.ok();
    assert_aligned(&run);
    let rows = run.rows();
    assert_eq!(
        rows[0],
        [
            "EXECUTOR",
            "NAME",
            "ADDRESS",
            "LEASE",
            "SHARDS",
            "CAPACITY",
            "VERSION",
            "ZONE",
            "LOAD",
            "UTILISATION",
            "DRAINING",
            "REGISTERED"
        ]
    );
    assert_eq!(rows.len(), 3);
    let mut names = BTreeSet::new();
    for row in &rows[1..] {
        let executor = if row[1] == "a" { &a } else { &b };
        names.insert(row[1].clone());
        assert_eq!(row[2], executor.url());
        assert!(row[0].starts_with("ex-") && is_duration(&row[3]), "{row:?}");
        assert_eq!(
            row[4..8],
            ["4", "1", "-", "-"],
            "no application version nor zone stated"
        );
        // Loads come from the leader only (P15.1): a follower shows `-`.
        for figure in &row[8..10] {
            assert!(figure == "-" || is_number(figure), "{row:?}");
        }
        assert_eq!(row[10], "no");
        assert_eq!(
            row[11],
            row[0].trim_start_matches("ex-"),
            "registered at the id's index"
        );
    }
    assert_eq!(names, BTreeSet::from(["a".to_string(), "b".to_string()]));
    assert!(
        rows[1][0] < rows[2][0] || rows[1][0].len() < rows[2][0].len(),
        "ascending ids"
    );
    let listed: Vec<ExecutorView> = leaseholdctl(&urls, &["-o", "json", "executor", "list"])
        .await
        .ok()
        .json();
    let api: Value = get_json(&cluster, leader, "/v1/executors").await.unwrap();
    let mut listed_value = serde_json::to_value(&listed).unwrap();
    for (l, r) in listed_value
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip(api.as_array().unwrap())
    {
        l["lease_remaining_ms"] = r["lease_remaining_ms"].clone();
    }
    assert_eq!(
        replicated_view(serde_json::json!({ "executors": listed_value })),
        replicated_view(serde_json::json!({ "executors": api })),
        "-o json is the API's wire type"
    );
    // Through the leader, the loads: the executors report, and nobody sent them work.
    let run = leaseholdctl(&urls, &["--consistent", "executor", "list"])
        .await
        .ok();
    for row in &run.rows()[1..] {
        assert_eq!(row[8..10], ["0", "0"], "{row:?}");
    }

    // executor show
    let run = leaseholdctl(&urls, &["executor", "show", &ids[0]])
        .await
        .ok();
    let pairs = field_pairs(&run.stdout);
    let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "executor",
            "name",
            "address",
            "incarnation",
            "lease remaining",
            "draining",
            "capacity",
            "app version",
            "labels",
            "load",
            "utilisation",
            "registered",
            "shard count",
            "shards"
        ]
    );
    assert_eq!(pairs[0].1, ids[0]);
    assert_eq!(pairs[1].1, settled.executors[0].name.clone().unwrap());
    assert_eq!(pairs[5].1, "no");
    assert_eq!(pairs[6].1, "1");
    assert_eq!(pairs[7].1, "-");
    assert_eq!(pairs[8].1, "-", "no labels stated");
    assert_eq!(pairs[12].1, "4");
    let shown: ExecutorView = leaseholdctl(&urls, &["-o", "json", "executor", "show", &ids[0]])
        .await
        .ok()
        .json();
    assert_eq!(shown.executor_id, ids[0]);

    // shard list and show: the table, then one summary line
    let (run, summary) = leaseholdctl(&urls, &["shard", "list"])
        .await
        .ok()
        .split_summary();
    let mut sorted_ids = ids.clone();
    sorted_ids.sort_by_key(|id| (id.len(), id.clone()));
    let per_owner: Vec<String> = sorted_ids
        .iter()
        .map(|id| {
            let owned = settled
                .shards
                .iter()
                .filter(|s| s.owner.as_ref() == Some(id))
                .count();
            format!("{id} {owned}")
        })
        .collect();
    assert_eq!(
        summary,
        format!(
            "total: {SHARDS} shards; per owner: {}; unowned: 0; in handoff: 0",
            per_owner.join(", ")
        )
    );
    assert_aligned(&run);
    let rows = run.rows();
    assert_eq!(
        rows[0],
        [
            "SHARD",
            "OWNER",
            "EPOCH",
            "STATE",
            "HANDOFF_TO",
            "LOAD",
            "HOT",
            "PINNED"
        ]
    );
    assert_eq!(rows.len(), SHARDS as usize + 1);
    for (row, shard) in rows[1..].iter().zip(0u32..) {
        assert_eq!(row[0], shard.to_string());
        assert!(ids.contains(&row[1]) && is_number(&row[2]), "{row:?}");
        assert_eq!(row[3..5], ["serving", "-"]);
        assert!(row[5] == "-" || row[5] == "0", "{row:?}");
        assert_eq!(row[6..8], ["no", "-"], "nothing is pinned (P17.4)");
    }
    let shards: Vec<ShardView> = leaseholdctl(&urls, &["-o", "json", "shard", "list"])
        .await
        .ok()
        .json();
    assert_eq!(shards.len(), SHARDS as usize);
    let run = leaseholdctl(&urls, &["shard", "show", "3"]).await.ok();
    let pairs = field_pairs(&run.stdout);
    assert_eq!(
        pairs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        [
            "shard",
            "owner",
            "epoch",
            "state",
            "route",
            "load",
            "hot",
            "pinned to"
        ]
    );
    assert_eq!(pairs[7].1, "-", "not pinned (P17.4)");
    let owner = &pairs[1].1;
    let owner_url = settled
        .executors
        .iter()
        .find(|e| &e.executor_id == owner)
        .map(|e| e.address.clone())
        .unwrap();
    assert_eq!(pairs[4].1, owner_url);

    // route
    let run = leaseholdctl(&urls, &["route", "user-42"]).await.ok();
    assert_aligned(&run);
    let rows = run.rows();
    assert_eq!(
        rows[0],
        ["KEY", "SHARD", "EXECUTOR", "ADDRESS", "EPOCH", "REVISION"]
    );
    let shard =
        leasehold_api::shard_for_key(b"user-42", std::num::NonZeroU32::new(SHARDS).unwrap());
    assert_eq!(rows[1][..2], ["user-42".to_string(), shard.to_string()]);
    let route: KeyRoute = leaseholdctl(&urls, &["-o", "json", "route", "user-42"])
        .await
        .ok()
        .json();
    assert_eq!(route.route.shard, shard);
    assert_eq!(route.key, "user-42");
    assert_eq!(rows[1][2], route.route.executor_id.clone().unwrap());

    // state
    let run = leaseholdctl(&urls, &["state"]).await.ok();
    let pairs = field_pairs(&run.stdout);
    assert_eq!(
        pairs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        [
            "revision",
            "shard count",
            "lease duration",
            "executors",
            "draining",
            "shards serving",
            "shards releasing",
            "shards unowned"
        ]
    );
    assert_eq!(
        pairs[1..]
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>(),
        ["8", "4.0s", "2", "0", "8", "0", "0"]
    );
    let state: StateView = leaseholdctl(&urls, &["-o", "json", "state"])
        .await
        .ok()
        .json();
    assert_eq!(state.shard_count, SHARDS);
    assert_eq!(state.executors.len(), 2);

    // lease list
    let run = leaseholdctl(&urls, &["lease", "list"]).await.ok();
    assert_aligned(&run);
    let rows = run.rows();
    assert_eq!(
        rows[0],
        [
            "EXECUTOR",
            "NAME",
            "REMAINING",
            "DURATION",
            "SHARDS",
            "DRAINING"
        ]
    );
    assert_eq!(rows[1][0], ids[0]);
    assert!(is_duration(&rows[1][2]));
    assert_eq!(rows[1][3..], ["4.0s", "4", "no"]);

    // completion
    let run = leaseholdctl(&urls, &["completion", "bash"]).await.ok();
    assert!(
        run.stdout.contains("_leaseholdctl()"),
        "{}",
        &run.stdout[..200.min(run.stdout.len())]
    );
    let run = leaseholdctl(&urls, &["completion", "zsh"]).await.ok();
    assert!(run.stdout.starts_with("#compdef leaseholdctl"));

    // not found and bad input against a live cluster
    assert_eq!(
        leaseholdctl(&urls, &["executor", "show", "ex-999999"])
            .await
            .code,
        Some(4)
    );
    assert_eq!(
        leaseholdctl(&urls, &["executor", "drain", "ex-999999"])
            .await
            .code,
        Some(4)
    );
    assert_eq!(
        leaseholdctl(&urls, &["shard", "show", "99"]).await.code,
        Some(4)
    );
    assert_eq!(
        leaseholdctl(&urls, &["member", "remove", "42"]).await.code,
        Some(4)
    );
    // Not an id is a name: one no executor has is not found, and says which there are.
    for name in ["not-an-id", "a/b"] {
        let run = leaseholdctl(&urls, &["executor", "show", name]).await;
        assert_eq!(run.code, Some(4), "{run:?}");
        assert!(
            run.stderr.contains(&format!("no executor is named {name}"))
                && ids.iter().all(|id| run.stderr.contains(id.as_str())),
            "{run:?}"
        );
    }
    // What can be neither: an id too long for the managers, a name too long for any executor.
    for neither in [format!("ex-{}", "9".repeat(21)), "x".repeat(257)] {
        assert_eq!(
            leaseholdctl(&urls, &["executor", "show", &neither])
                .await
                .code,
            Some(2),
            "{neither}"
        );
    }
    assert_eq!(
        leaseholdctl(&urls, &["-o", "yaml", "shard", "list"])
            .await
            .code,
        Some(2)
    );
    assert_eq!(
        leaseholdctl(&urls, &["watch", "--wait", "10m"]).await.code,
        Some(2)
    );
    assert_eq!(
        leaseholdctl(&urls, &["shard", "show", "minus-one"])
            .await
            .code,
        Some(2)
    );
}

/// Drain moves an executor's shards to the other through the release handoff, and `watch` shows
/// it as it happens (JSON lines and text); cancelling the drain brings the spread back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_moves_shards_away_and_watch_prints_each_change() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let urls = cluster.urls();
    let a = ExecutorProcess::start(&cluster, "a");
    let b = ExecutorProcess::start(&cluster, "b");
    wait_for_even_split(&[&a, &b], SHARDS, SETTLE_BOUND).await;
    let settled = wait_settled(&urls, |counts| counts == [4, 4]).await;
    // ex_a is the executor with the lower id, whichever process that is.
    let (ex_a, ex_b) = (
        settled.executors[0].executor_id.clone(),
        settled.executors[1].executor_id.clone(),
    );
    let stays = if settled.executors[1].address == a.url() {
        &a
    } else {
        &b
    };
    let a_shards: BTreeSet<u32> = settled.executors[0]
        .shards
        .iter()
        .map(|s| s.shard)
        .collect();

    let json_watch = Watcher::start(&urls, cluster.dir.path(), true);
    let text_watch = Watcher::start(&urls, cluster.dir.path(), false);
    json_watch.wait_started().await;
    text_watch.wait_started().await;
    let drained: ExecutorView = leaseholdctl(&urls, &["-o", "json", "executor", "drain", &ex_a])
        .await
        .ok()
        .json();
    assert!(drained.draining);
    let run = leaseholdctl(&urls, &["executor", "drain", &ex_a])
        .await
        .ok();
    assert!(
        run.stdout.contains("draining:         yes"),
        "a repeat is harmless: {}",
        run.stdout
    );
    wait_settled(&urls, |counts| counts == [0, 8]).await;
    // The drained executor really stopped admitting, and the other admits every shard.
    wait_for_even_split(&[stays], SHARDS, SETTLE_BOUND).await;

    let undrained: ExecutorView =
        leaseholdctl(&urls, &["-o", "json", "executor", "undrain", &ex_a])
            .await
            .ok()
            .json();
    assert!(!undrained.draining);
    wait_settled(&urls, |counts| counts == [4, 4]).await;

    let events: Vec<Value> = poll_until(
        "watch to report the drain and its moves",
        SETTLE_BOUND,
        || async {
            let events: Vec<Value> = json_watch
                .text()
                .lines()
                .map(|line| serde_json::from_str(line).map_err(|e| format!("{e}: {line}")))
                .collect::<Result<_, _>>()?;
            let drains = events
                .iter()
                .filter(|e| e["event"] == "drain_changed")
                .count();
            if drains >= 2 {
                Ok(events)
            } else {
                Err(format!("{} events, {drains} drain changes", events.len()))
            }
        },
    )
    .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let first_drain = kinds.iter().position(|k| *k == "drain_changed").unwrap();
    assert_eq!(events[first_drain]["executor_id"], ex_a.as_str());
    assert_eq!(events[first_drain]["draining"], true);
    let started: BTreeSet<u64> = events
        .iter()
        .filter(|e| {
            e["event"] == "handoff_started"
                && e["from"] == ex_a.as_str()
                && e["to"] == ex_b.as_str()
        })
        .filter_map(|e| e["shard"].as_u64())
        .collect();
    let moved: BTreeSet<u64> = events
        .iter()
        .filter(|e| {
            e["event"] == "shard_moved" && e["from"] == ex_a.as_str() && e["to"] == ex_b.as_str()
        })
        .filter_map(|e| e["shard"].as_u64())
        .collect();
    let expected: BTreeSet<u64> = a_shards.iter().map(|&s| u64::from(s)).collect();
    assert_eq!(
        started, expected,
        "each of a's shards was released first (P5.2): {events:#?}"
    );
    assert_eq!(
        moved, expected,
        "then granted to b at a new epoch: {events:#?}"
    );
    assert!(events.iter().all(|e| e["revision"].as_u64().is_some()));
    let last_drain = events
        .iter()
        .rposition(|e| e["event"] == "drain_changed")
        .unwrap();
    assert_eq!(events[last_drain]["draining"], false);

    let text = poll_until("the text watch to show the same", SETTLE_BOUND, || async {
        let text = text_watch.text();
        if text.contains("drain cancelled") {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    assert!(text.lines().all(|line| line.starts_with("rev ")), "{text}");
    assert!(
        text.contains(&format!("executor {ex_a} draining")),
        "{text}"
    );
    assert!(
        text.contains(&format!("releasing {ex_a} -> {ex_b}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("moved {ex_a} -> {ex_b} (epoch 2)")),
        "{text}"
    );

    json_watch.interrupt().await;
    text_watch.interrupt().await;
}

/// P17.4: maintenance mode shown and turned, a shard pinned, unpinned and moved, each shown
/// as the other commands show a shard, unknown shards and executors exit 4, and `audit` lists
/// what changed (a repeat that changed nothing is not recorded), oldest first, with its time
/// in UTC to the millisecond.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p17_4_operator_commands_maintain_pin_move_and_audit() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let urls = cluster.urls();
    let a = ExecutorProcess::start(&cluster, "a");
    let b = ExecutorProcess::start(&cluster, "b");
    wait_for_even_split(&[&a, &b], SHARDS, SETTLE_BOUND).await;
    let settled = wait_settled(&urls, |counts| counts == [4, 4]).await;
    let (ex_a, ex_b) = (
        settled.executors[0].executor_id.clone(),
        settled.executors[1].executor_id.clone(),
    );
    let mut a_shards = settled.executors[0].shards.iter().map(|s| s.shard);
    let (pinned, moved) = (a_shards.next().unwrap(), a_shards.next().unwrap());
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;

    // Maintenance: shown, turned on (once: the repeat changes nothing), seen in the state.
    let run = leaseholdctl(&urls, &["cluster", "maintenance"]).await.ok();
    assert_eq!(run.stdout, "maintenance: off\n");
    let run = leaseholdctl(&urls, &["cluster", "maintenance", "on"])
        .await
        .ok();
    assert_eq!(run.stdout, "maintenance: on (turned on now)\n");
    let run = leaseholdctl(&urls, &["cluster", "maintenance", "on"])
        .await
        .ok();
    assert_eq!(
        run.stdout,
        "maintenance: on (unchanged: it was on already)\n"
    );
    let view: MaintenanceView = leaseholdctl(&urls, &["-o", "json", "cluster", "maintenance"])
        .await
        .ok()
        .json();
    assert!(view.on);
    let state: StateView = leaseholdctl(&urls, &["--consistent", "-o", "json", "state"])
        .await
        .ok()
        .json();
    assert!(state.maintenance);
    let run = leaseholdctl(&urls, &["cluster", "maintenance", "off"])
        .await
        .ok();
    assert_eq!(run.stdout, "maintenance: off (turned off now)\n");

    // Pin and unpin: the shard as `shard show` shows it, without the route.
    let shard = pinned.to_string();
    let run = leaseholdctl(&urls, &["shard", "pin", &shard, &ex_b])
        .await
        .ok();
    let pairs = field_pairs(&run.stdout);
    assert_eq!(
        pairs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>()[..3],
        ["shard", "owner", "epoch"],
        "{}",
        run.stdout
    );
    assert!(
        pairs.contains(&("pinned to".into(), ex_b.clone())),
        "{pairs:?}"
    );
    let (run, summary) = leaseholdctl(&urls, &["--consistent", "shard", "list"])
        .await
        .ok()
        .split_summary();
    assert!(summary.starts_with("total: "), "{summary}");
    assert_aligned(&run);
    let row = run.rows().into_iter().find(|row| row[0] == shard).unwrap();
    assert_eq!(row[7], ex_b, "the PINNED column: {row:?}");
    let view: ShardView = leaseholdctl(&urls, &["-o", "json", "shard", "unpin", &shard])
        .await
        .ok()
        .json();
    assert_eq!((view.shard, view.pinned_to), (pinned, None));

    // Move: committed, then the shard as it stands (handed off, or handed over already).
    let shard = moved.to_string();
    let run = leaseholdctl(&urls, &["shard", "move", &shard, "--to", &ex_b])
        .await
        .ok();
    let pairs = field_pairs(&run.stdout);
    assert_eq!(pairs[0], ("shard".into(), shard.clone()), "{}", run.stdout);
    assert!(
        pairs[1] == ("owner".into(), ex_a.clone()) || pairs[1] == ("owner".into(), ex_b.clone()),
        "handed off from {ex_a}, or over to {ex_b}: {}",
        run.stdout
    );

    // Unknown shard or executor: exit 4.
    for args in [
        &["shard", "move", "99", "--to", ex_b.as_str()][..],
        &["shard", "pin", "99", ex_b.as_str()],
        &["shard", "pin", "0", "ex-nobody"],
        &["shard", "move", "0", "--to", "ex-nobody"],
    ] {
        let run = leaseholdctl(&urls, args).await;
        assert_eq!(run.code, Some(4), "{args:?}: {run:?}");
    }

    // The audit log: what changed, oldest first.
    let records: Vec<AuditRecordView> = leaseholdctl(&urls, &["-o", "json", "audit"])
        .await
        .ok()
        .json();
    let ours: Vec<(&str, Option<u32>, Option<&str>)> = records
        .iter()
        .filter(|r| r.at_ms >= started_ms)
        .map(|r| (r.action.as_str(), r.shard, r.executor_id.as_deref()))
        .collect();
    assert_eq!(
        ours,
        [
            ("maintenance_on", None, None),
            ("maintenance_off", None, None),
            ("pin", Some(pinned), Some(ex_b.as_str())),
            ("unpin", Some(pinned), None),
            ("move", Some(moved), Some(ex_b.as_str())),
        ],
        "{records:?}"
    );
    assert!(records.windows(2).all(|w| w[0].revision < w[1].revision));
    assert!(
        records.iter().all(|r| r.actor == "anonymous (plaintext)"),
        "{records:?}"
    );
    let run = leaseholdctl(&urls, &["audit"]).await.ok();
    assert_aligned(&run);
    let rows = run.rows();
    assert_eq!(rows[0], ["REVISION", "TIME", "ACTOR", "ACTION", "SUBJECT"]);
    assert_eq!(rows.len(), records.len() + 1, "{}", run.stdout);
    let last = rows.last().unwrap();
    assert_eq!(last[0], records.last().unwrap().revision.to_string());
    // 2026-01-02T03:04:05.678Z
    let time = last[1].as_bytes();
    assert!(
        time.len() == 24
            && time[4] == b'-'
            && time[10] == b'T'
            && time[19] == b'.'
            && time[23] == b'Z',
        "{last:?}"
    );
    assert_eq!(
        last[2..],
        [
            "anonymous (plaintext)".to_owned(),
            "move".to_owned(),
            format!("shard {moved}, executor {ex_b}")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_distinguish_unreachable_no_leader_and_bad_input() {
    let _serial = one_cluster_at_a_time().await;
    // Unreachable: nothing listens there.
    let nobody = vec![format!("http://127.0.0.1:{}", free_port())];
    let run = leaseholdctl(&nobody, &["--patience", "1s", "executor", "list"]).await;
    assert_eq!(run.code, Some(5), "{run:?}");
    assert!(run.stderr.contains("leaseholdctl:"), "{run:?}");
    assert_eq!(
        leaseholdctl(&nobody, &["--patience", "1s", "cluster", "status"])
            .await
            .code,
        Some(5)
    );
    // Bad input, before anything is sent.
    assert_eq!(
        leaseholdctl(&["not a url".to_string()], &["executor", "list"])
            .await
            .code,
        Some(2)
    );
    assert_eq!(leaseholdctl(&nobody, &["executor"]).await.code, Some(2));
    assert_eq!(leaseholdctl(&nobody, &["no-such-noun"]).await.code, Some(2));
    let help = leaseholdctl(&nobody, &["--help"]).await.ok();
    for line in [
        "3  no leader",
        "4  not found",
        "5  unreachable",
        "2  bad input",
    ] {
        assert!(
            help.stdout.contains(line),
            "--help documents exit code {line}"
        );
    }

    // No leader: one member of a three-member cluster cannot elect one.
    let mut cluster = Cluster::new(ClusterOptions {
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    cluster.manager(1).start();
    let lonely = vec![cluster.url(1)];
    poll_until("manager 1 to answer", LEADER_BOUND, || async {
        cluster.cluster_info(1).await.map(|_| ())
    })
    .await;
    let run = leaseholdctl(&lonely, &["--patience", "2s", "executor", "drain", "ex-1"]).await;
    assert_eq!(run.code, Some(3), "{run:?}");
    assert!(run.stderr.contains("no_leader"), "{run:?}");
    let run = leaseholdctl(
        &lonely,
        &[
            "--patience",
            "2s",
            "member",
            "add",
            "4",
            "http://127.0.0.1:1",
        ],
    )
    .await;
    assert_eq!(run.code, Some(3), "{run:?}");
    // Reads are served locally, leader or not.
    assert_eq!(
        leaseholdctl(&lonely, &["executor", "list"]).await.code,
        Some(0)
    );
}

/// A live cluster with executors (one of them draining) is backed up, the backup restored into
/// every data directory of a fresh three-manager cluster, and the fresh cluster comes up with the
/// same state: same executors (ids, incarnations, addresses, drain flags), same owners, epochs and
/// handoffs. Only the revision and the lease times differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_of_a_live_cluster_restores_into_a_fresh_cluster_with_the_same_state() {
    let _serial = one_cluster_at_a_time().await;
    // A longer lease than usual: the restored leases are compared before the new leader's first
    // lease in office (P6.1) is over.
    let options = ClusterOptions {
        shard_count: SHARDS,
        lease: "20s".to_string(),
        ..ClusterOptions::default()
    };
    let mut old = Cluster::start(options.clone());
    let leader = old.wait_for_leader(LEADER_BOUND).await;
    let urls = old.urls();
    let mut a = ExecutorProcess::start(&old, "a");
    let mut b = ExecutorProcess::start(&old, "b");
    let mut c = ExecutorProcess::start(&old, "c");
    wait_for_even_split(&[&a, &b, &c], SHARDS, SETTLE_BOUND).await;
    let settled = wait_settled(&urls, |counts| {
        let mut sorted = counts.to_vec();
        sorted.sort_unstable();
        sorted == [2, 3, 3]
    })
    .await;
    leaseholdctl(
        &urls,
        &["executor", "drain", &settled.executors[2].executor_id],
    )
    .await
    .ok();
    wait_settled(&urls, |counts| counts == [4, 4, 0]).await;

    // Outside the old cluster's directory, which goes away with it.
    let backups = tempfile::tempdir().unwrap();
    let backup = backups.path().join("cluster.backup");
    let backup_arg = backup.display().to_string();
    let (before, saved) = poll_until(
        "a backup taken between two equal states",
        SETTLE_BOUND,
        || async {
            let before = get_json(&old, leader, "/v1/state").await?;
            let saved = leaseholdctl(&urls, &["-o", "json", "snapshot", "save", &backup_arg]).await;
            let after = get_json(&old, leader, "/v1/state").await?;
            if saved.code == Some(0) && without_time(before.clone()) == without_time(after) {
                Ok((before, saved))
            } else {
                Err(format!(
                    "state moved during the backup or save failed: {saved:?}"
                ))
            }
        },
    )
    .await;
    let header: Value = saved.json();
    assert_eq!(header["shard_count"], SHARDS);
    assert_eq!(header["format_version"], 1);
    assert!(header["payload_sha256"]
        .as_str()
        .is_some_and(|h| h.len() == 64));
    let inspect = leaseholdctl(&urls, &["snapshot", "inspect", &backup_arg])
        .await
        .ok();
    let names: Vec<String> = field_pairs(&inspect.stdout)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "revision",
            "shard count",
            "state schema",
            "format",
            "created at",
            "source node",
            "payload bytes",
            "sha256"
        ]
    );
    // The time for people, in UTC; the JSON keeps the number.
    let created_at = field_pairs(&inspect.stdout)
        .into_iter()
        .find_map(|(name, value)| (name == "created at").then_some(value))
        .expect("created at");
    let created_at_unix_ms = header["created_at_unix_ms"].as_u64().expect("a number");
    assert_eq!(
        humantime::parse_rfc3339(&created_at).ok(),
        std::time::UNIX_EPOCH.checked_add(Duration::from_millis(created_at_unix_ms)),
        "{created_at} is {created_at_unix_ms} ms after the epoch, in RFC 3339"
    );
    assert!(
        !std::fs::read_dir(old.dir.path()).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp-")),
        "no temporary file left behind"
    );

    // The old cluster and its executors go away entirely.
    for executor in [&mut a, &mut b, &mut c] {
        executor.kill();
    }
    drop(old);

    let mut fresh = Cluster::new(options);
    for manager in fresh.managers.values() {
        let data_dir = manager.data_dir.display().to_string();
        let run = leaseholdctl(
            &[],
            &["snapshot", "restore", &backup_arg, "--data-dir", &data_dir],
        )
        .await;
        let run = run.ok();
        assert!(run.stdout.contains("Prepared"), "{}", run.stdout);
        assert!(manager.data_dir.join(RESTORE_FILE_NAME).is_file());
    }
    fresh.start_all();
    let new_leader = fresh.wait_for_leader(LEADER_BOUND).await;
    let restored = poll_until(
        "every member to serve the restored state",
        LEADER_BOUND,
        || async {
            let mut states = Vec::new();
            for id in 1..=3 {
                states.push(without_time(get_json(&fresh, id, "/v1/state").await?));
            }
            if states.iter().all(|s| *s == states[0]) && states[0]["shard_count"] == SHARDS {
                Ok(states.remove(0))
            } else {
                Err(format!("states differ: {states:?}"))
            }
        },
    )
    .await;
    assert_eq!(
        restored,
        without_time(before),
        "the restored cluster has the backed-up state"
    );
    for manager in fresh.managers.values() {
        assert!(manager.data_dir.join(RESTORED_FILE_NAME).is_file());
        assert!(!manager.data_dir.join(RESTORE_FILE_NAME).exists());
    }
    // It is a working cluster: writes commit, and the restored executors keep their leases for
    // now (P6.1: the new leader reaps nothing during its first lease in office).
    let drain = leaseholdctl(
        &fresh.urls(),
        &[
            "-o",
            "json",
            "executor",
            "undrain",
            &settled.executors[2].executor_id,
        ],
    )
    .await
    .ok();
    assert!(!drain.json::<ExecutorView>().draining);
    let executors: Vec<ExecutorView> =
        leaseholdctl(&fresh.urls(), &["-o", "json", "executor", "list"])
            .await
            .ok()
            .json();
    assert_eq!(executors.len(), 3);
    assert!(fresh.manager(new_leader).is_running());
}

/// Corrupt, truncated and foreign files, and a used data directory, are refused by
/// `snapshot restore` with exit code 2 before anything is created; a prepared file damaged after
/// the restore is refused again by the manager, which does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_backups_are_refused_before_anything_is_touched() {
    let _serial = one_cluster_at_a_time().await;
    let options = ClusterOptions {
        size: 1,
        shard_count: SHARDS,
        ..ClusterOptions::default()
    };
    let mut source = Cluster::start(options.clone());
    source.wait_for_leader(LEADER_BOUND).await;
    let urls = source.urls();
    poll_until(
        "the shard configuration to be written",
        LEADER_BOUND,
        || async {
            let state = get_json(&source, 1, "/v1/state").await?;
            if state["shard_count"] == SHARDS {
                Ok(())
            } else {
                Err(state.to_string())
            }
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.backup");
    leaseholdctl(&urls, &["snapshot", "save", &good.display().to_string()])
        .await
        .ok();
    let bytes = std::fs::read(&good).unwrap();

    // Silent damage: a lease of 4000 ms becomes 5000 ms. Still valid JSON and a consistent state;
    // only the checksum tells.
    let marker = b"\"lease_duration_ms\":4";
    let at = bytes
        .windows(marker.len())
        .rposition(|w| w == marker)
        .expect("the payload carries the lease duration")
        + marker.len()
        - 1;
    let mut silent = bytes.clone();
    silent[at] = b'5';
    let variants: [(&str, Vec<u8>, &str); 3] = [
        ("silent.backup", silent.clone(), "checksum"),
        (
            "truncated.backup",
            bytes[..bytes.len() - 10].to_vec(),
            "truncated",
        ),
        (
            "foreign.backup",
            b"not a backup at all\n".to_vec(),
            "not a Leasehold backup",
        ),
    ];
    for (name, content, reason) in variants {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let target = dir.path().join(format!("data-{name}"));
        let run = leaseholdctl(
            &[],
            &[
                "snapshot",
                "restore",
                &path.display().to_string(),
                "--data-dir",
                &target.display().to_string(),
            ],
        )
        .await;
        assert_eq!(run.code, Some(2), "{name}: {run:?}");
        assert!(run.stderr.contains(reason), "{name}: {run:?}");
        assert!(
            !target.exists(),
            "{name}: nothing is created for a refused file"
        );
        let run = leaseholdctl(&[], &["snapshot", "inspect", &path.display().to_string()]).await;
        assert_eq!(run.code, Some(2), "{name}: {run:?}");
    }
    // A used data directory is refused and left as it was.
    let used = dir.path().join("used");
    std::fs::create_dir(&used).unwrap();
    std::fs::write(used.join("db"), b"existing").unwrap();
    let run = leaseholdctl(
        &[],
        &[
            "snapshot",
            "restore",
            &good.display().to_string(),
            "--data-dir",
            &used.display().to_string(),
        ],
    )
    .await;
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("not empty"), "{run:?}");
    assert_eq!(std::fs::read_dir(&used).unwrap().count(), 1);
    drop(source);

    // The manager checks again: a prepared file damaged afterwards stops it at start-up, and it
    // is not imported.
    let mut target = Cluster::new(options.clone());
    let data_dir = target.manager(1).data_dir.clone();
    leaseholdctl(
        &[],
        &[
            "snapshot",
            "restore",
            &good.display().to_string(),
            "--data-dir",
            &data_dir.display().to_string(),
        ],
    )
    .await
    .ok();
    std::fs::write(data_dir.join(RESTORE_FILE_NAME), &silent).unwrap();
    target.manager(1).start();
    let status = target.manager(1).wait_exit(EXIT_BOUND).await;
    assert!(!status.success());
    let log = target.manager(1).log();
    assert!(log.contains("checksum mismatch"), "{log}");
    assert!(data_dir.join(RESTORE_FILE_NAME).is_file(), "not imported");
    assert!(!data_dir.join(RESTORED_FILE_NAME).exists());

    // And a restore into a cluster started with another shard count is refused with the fix.
    let mut other = Cluster::new(ClusterOptions {
        shard_count: SHARDS * 2,
        ..options
    });
    let data_dir = other.manager(1).data_dir.clone();
    leaseholdctl(
        &[],
        &[
            "snapshot",
            "restore",
            &good.display().to_string(),
            "--data-dir",
            &data_dir.display().to_string(),
        ],
    )
    .await
    .ok();
    other.manager(1).start();
    let status = other.manager(1).wait_exit(EXIT_BOUND).await;
    assert!(!status.success());
    let log = other.manager(1).log();
    assert!(
        log.contains(&format!(
            "start the restored cluster with --shard-count {SHARDS}"
        )),
        "{log}"
    );
}

#[test]
fn table_cells_split_on_column_gaps() {
    assert_eq!(cells("ID  ADDRESS      ROLE"), ["ID", "ADDRESS", "ROLE"]);
    assert_eq!(cells("1   http://h:1   -"), ["1", "http://h:1", "-"]);
}

/// `GET /v1/watch` is a blocking query: with nothing changing it waits out `wait` and answers
/// with the same revision; a write wakes it well before its wait ends; a wait over the maximum
/// or an unknown parameter is a 400 problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_blocks_until_the_state_moves_past_the_revision() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        size: 1,
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let client = leasehold_api::Client::with_config(
        cluster.urls(),
        leasehold_api::ClientConfig {
            request_timeout: Duration::from_secs(120),
            ..leasehold_api::ClientConfig::default()
        },
    )
    .unwrap();
    let state = poll_until("the shard configuration", LEADER_BOUND, || async {
        let state = client.state(false).await.map_err(|e| e.to_string())?;
        if state.shard_count == SHARDS {
            Ok(state)
        } else {
            Err(format!("{state:?}"))
        }
    })
    .await;

    // Nothing changes (no executors): the query waits out its wait.
    let started = std::time::Instant::now();
    let reply = client
        .watch(state.revision, Duration::from_millis(1_500))
        .await
        .unwrap();
    assert_eq!(reply.state.revision, state.revision);
    assert!(
        started.elapsed() >= Duration::from_millis(1_400),
        "returned after {:?}",
        started.elapsed()
    );

    // A write wakes a query that would otherwise wait a minute.
    let waiting = {
        let client = client.clone();
        let revision = state.revision;
        tokio::spawn(async move { client.watch(revision, Duration::from_secs(60)).await })
    };
    let grant = client
        .register(&leasehold_api::RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: "watch-test".into(),
            address: "http://127.0.0.1:9".into(),
            name: None,
            credential: None,
            capacity: None,
            app_version: None,
            labels: Default::default(),
        })
        .await
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the write wakes the watch long before its 60 s wait")
        .unwrap()
        .unwrap();
    assert!(reply.state.revision > state.revision);
    assert!(reply
        .state
        .executors
        .iter()
        .any(|e| e.executor_id == grant.executor_id));

    // Bounded, and strict about its parameters.
    for query in ["revision=1&wait=301s", "revision=x", "since=1"] {
        let response = cluster
            .http
            .get(format!("{}/v1/watch?{query}", cluster.url(1)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{query}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "invalid_request", "{query}");
    }
    cluster.manager(1).kill();
}
