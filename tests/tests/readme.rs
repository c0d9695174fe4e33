//! The README's two commands, run in a checkout holding exactly this repository's HEAD.
//!
//! 1. `./scripts/dev-cluster` (live status off): the three managers and three executors come up,
//!    leaseholdctl sees them, and Ctrl-C (SIGINT to the script's process group, as a terminal
//!    sends it) stops every process and removes the temporary data.
//! 2. `./scripts/test`, run non-recursively as `./scripts/test -- --list`: it builds every binary
//!    and every test of the checkout and lists the suite without running it. Running the whole suite
//!    from inside one of its own tests would run this test again (recursion) and double the
//!    suite's time on a 2-core machine; `--list` still proves the command works on HEAD:
//!    the build is `--locked` and every test target compiles.
//!
//! 3. While the dev cluster runs: every command of the README's short tour, as written
//!    ([`run_the_tour`]), each checked for what its comment promises.
//!
//! Both commands run in a checkout holding exactly HEAD's files: this one when its tree is clean
//! (nothing modified, nothing untracked; CI's checkout is a fresh clone, and scripts/fresh-machine-
//! check has already built it from scratch), else a fresh clone at HEAD. `CARGO_TARGET_DIR` points
//! at this test's own target directory so the registry dependencies are reused; a clone's sources
//! are at other paths, so its workspace crates are rebuilt from the clone, not reused.
//!
//! Also read, not run: the examples' READMEs (`examples/kv/`, `examples/python/`) and
//! docs/QUICKSTART.md (which tests/quickstart.rs runs) keep ports and
//! data directories apart from each other's and `scripts/dev-cluster`'s, and say how to stop and
//! clean up; the example deployment sets only settings the binaries accept.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold_api::wire::ExecutorView;
use leasehold_tests::ctl::leaseholdctl;
use leasehold_tests::{bin_dir, one_cluster_at_a_time, poll_until};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// The clone builds its workspace crates from scratch (registry crates are shared).
const BUILD_BOUND: Duration = Duration::from_secs(1_800);
const CLUSTER_BOUND: Duration = Duration::from_secs(120);
const STOP_BOUND: Duration = Duration::from_secs(90);
const DEV_SHARDS: usize = 1024;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

fn git(args: &[&str], dir: &Path) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A checkout holding exactly HEAD's files: `root` itself when its tree is clean (a fresh clone
/// would hold the same files, and rebuilding them at another path would prove nothing more), else
/// a fresh clone of HEAD made in `temp`.
fn checkout_of_head(root: &Path, temp: &Path) -> PathBuf {
    let changes = git(&["status", "--porcelain", "--untracked-files=all"], root);
    if changes.is_empty() {
        eprintln!("the checkout is a clean tree at HEAD: the README's commands run in it");
        return root.to_path_buf();
    }
    eprintln!("the checkout has changes: the README's commands run in a fresh clone of HEAD");
    let head = git(&["rev-parse", "HEAD"], root);
    let clone = temp.join("leasehold");
    git(
        &[
            "clone",
            "--quiet",
            &root.display().to_string(),
            &clone.display().to_string(),
        ],
        temp,
    );
    git(&["checkout", "--quiet", &head], &clone);
    clone
}

/// The commands of the README's first code block, in order.
fn readme_commands(readme: &str) -> Vec<String> {
    let block = readme
        .split("```sh")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README starts with a sh code block");
    block
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// A port base whose manager and executor ports are free now.
fn free_port_base() -> u16 {
    (0..200)
        .map(|n| 20_000 + 500 * (n % 80) + (std::process::id() % 400) as u16)
        .find(|&base| {
            [1, 2, 3, 101, 102, 103]
                .iter()
                .all(|offset| std::net::TcpListener::bind(("127.0.0.1", base + offset)).is_ok())
        })
        .expect("a free port range")
}

fn port_closed(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_commands_work_from_a_fresh_clone() {
    let _serial = one_cluster_at_a_time().await;
    let root = repo_root();
    let commands = readme_commands(&std::fs::read_to_string(root.join("README.md")).unwrap());
    assert_eq!(
        commands,
        ["./scripts/dev-cluster", "./scripts/test"],
        "the README's two commands"
    );

    let temp = tempfile::tempdir().unwrap();
    let checkout = checkout_of_head(&root, temp.path());
    // target/debug → target
    let target_dir = bin_dir().parent().expect("target dir").to_path_buf();

    // 1. The dev cluster.
    let base = free_port_base();
    let mut script = Command::new(&commands[0]);
    script
        .current_dir(&checkout)
        .env("CARGO_TARGET_DIR", &target_dir);
    let mut dev_cluster = DevCluster::start(script, temp.path(), base, BUILD_BOUND).await;
    let printed = dev_cluster.printed.clone();
    let data_dir = printed
        .split("data and logs in ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .map(PathBuf::from)
        .expect("the script names its data directory");
    assert!(data_dir.is_dir());
    assert!(
        printed.contains("leaseholdctl cluster status"),
        "example commands: {printed}"
    );
    let managers: Vec<String> = (1..=3)
        .map(|i| format!("http://127.0.0.1:{}", base + i))
        .collect();
    assert!(printed.contains(&managers.join(",")), "{printed}");

    // Inspect it with leaseholdctl until all three executors hold shards.
    let executors: Vec<ExecutorView> = poll_until(
        "three executors sharing every shard",
        CLUSTER_BOUND,
        || async {
            let run = leaseholdctl(
                &managers,
                &["--consistent", "-o", "json", "executor", "list"],
            )
            .await;
            if run.code != Some(0) {
                return Err(format!("{run:?}"));
            }
            let executors: Vec<ExecutorView> = run.json();
            let owned: usize = executors.iter().map(|e| e.shards.len()).sum();
            if executors.len() == 3
                && owned == DEV_SHARDS
                && executors.iter().all(|e| !e.shards.is_empty())
            {
                Ok(executors)
            } else {
                Err(format!(
                    "{} executors, {owned} shards owned",
                    executors.len()
                ))
            }
        },
    )
    .await;
    let names: Vec<_> = executors.iter().filter_map(|e| e.name.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, ["executor-1", "executor-2", "executor-3"]);
    let status = leaseholdctl(&managers, &["cluster", "status"]).await.ok();
    assert_eq!(status.rows().len(), 4, "{}", status.stdout);
    assert_eq!(
        status.rows()[1..]
            .iter()
            .filter(|row| row[3] == "leader")
            .count(),
        1,
        "{}",
        status.stdout
    );

    run_the_tour(&Tour {
        readme: std::fs::read_to_string(checkout.join("README.md")).unwrap(),
        leaseholdctl: target_dir.join("debug/leaseholdctl"),
        dir: temp.path().join("tour"),
        base,
        managers: managers.clone(),
        executors,
    })
    .await;

    dev_cluster.interrupt().await;
    assert!(
        !data_dir.exists(),
        "the temporary data directory is removed"
    );
    for offset in [1, 2, 3, 101, 102, 103] {
        let port = base + offset;
        poll_until(
            &format!("port {port} to close"),
            STOP_BOUND,
            || async move {
                if port_closed(port) {
                    Ok(())
                } else {
                    Err("still accepting".to_string())
                }
            },
        )
        .await;
    }

    // 2. The test suite, listed (see the module docs for why not run).
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&commands[1])
            .args(["--", "--list"])
            .current_dir(&checkout)
            .env("CARGO_TARGET_DIR", &target_dir)
            .stdin(Stdio::null())
            .output()
    })
    .await
    .unwrap()
    .expect("run scripts/test");
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "scripts/test -- --list failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for test in [
        "readme_commands_work_from_a_fresh_clone: test",
        "ctl_commands_print_pinned_tables_and_the_wire_types_as_json: test",
    ] {
        assert!(listed.contains(test), "the suite lists {test}");
    }
}

/// What the README's tour runs against: the dev cluster on ports from `base`, and the
/// `leaseholdctl` its script built.
struct Tour {
    readme: String,
    leaseholdctl: PathBuf,
    /// The directory the tour's commands run in (made here).
    dir: PathBuf,
    base: u16,
    managers: Vec<String>,
    /// The dev cluster's executors as `executor list` showed them.
    executors: Vec<ExecutorView>,
}

/// The dev cluster's default port base, which the README's commands name.
const README_PORT_BASE: u16 = 7000;
/// How long one tour command may take; the blocking watch waits at most its own `wait`.
const TOUR_COMMAND_BOUND: Duration = Duration::from_secs(60);
/// The README's blocking query waits this long at most (`wait=30s`).
const README_WATCH_WAIT: Duration = Duration::from_secs(30);
const TOUR_SHARDS: usize = DEV_SHARDS;

/// The command lines of the code blocks of the README's section "A short tour", in order, each
/// as written (comment included).
fn tour_lines(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## A short tour")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README has a section \"A short tour\"");
    section
        .split("```sh")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .flat_map(str::lines)
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The line's command without its trailing comment.
fn command_of(line: &str) -> &str {
    line.split_once("  # ")
        .map_or(line, |(command, _)| command)
        .trim_end()
}

/// A line that only sets something up for the lines after it (an alias, a shell variable), as
/// typed into the same terminal: it runs again before each later line.
fn is_setup(command: &str) -> bool {
    command.starts_with("alias ")
        || command.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
}

/// The line with the dev cluster's ports in place of the README's (the test's dev cluster runs
/// on free ports; `localhost:7001` is its first manager's `base + 1`).
fn on_test_ports(line: &str, base: u16) -> String {
    let mut line = line.to_owned();
    for offset in [1, 2, 3, 101, 102, 103] {
        line = line.replace(
            &format!("localhost:{}", README_PORT_BASE + offset),
            &format!("localhost:{}", base + offset),
        );
    }
    line
}

/// One tour line run by bash in the tour's directory, after the setup lines before it.
fn tour_command(tour: &Tour, setup: &[String], line: &str) -> tokio::process::Command {
    let mut script: String = setup.iter().map(|s| format!("{s}\n")).collect();
    script.push_str(line);
    let script = on_test_ports(&script, tour.base);
    let mut command = tokio::process::Command::new("bash");
    command
        .args(["-O", "expand_aliases", "-c", &script])
        .current_dir(&tour.dir)
        // leaseholdctl's default endpoints are the dev cluster's on the README's ports.
        .env("LEASEHOLD_ENDPOINTS", tour.managers.join(","))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn run_to_end(mut command: tokio::process::Command, line: String) -> (String, Duration) {
    let started = std::time::Instant::now();
    let output = tokio::time::timeout(TOUR_COMMAND_BOUND, command.output())
        .await
        .unwrap_or_else(|_| panic!("{line}: still running after {TOUR_COMMAND_BOUND:?}"))
        .unwrap_or_else(|e| panic!("{line}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the README's {line:?} failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    (stdout, started.elapsed())
}

fn json_of(line: &str, stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("the README's {line:?} printed no JSON ({e}): {stdout}"))
}

/// The README's tour, every command as written, against the dev cluster: each must succeed and
/// print what its comment says. A line that runs until Ctrl-C (`watch`) runs beside the later
/// ones and gets SIGINT at the end; it must have seen the tour's drain. The blocking query is
/// started, then the drain is cancelled (a change it must return on). A command this test has
/// no check for fails it, so the tour and its test change together.
async fn run_the_tour(tour: &Tour) {
    if leasehold_tests::python::python_or_skip("the README's tour").is_none() {
        return;
    }
    let curl = Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|output| output.status.success()),
        "the README's tour needs curl"
    );
    let lines = tour_lines(&tour.readme);
    assert!(lines.len() >= 10, "the tour's commands: {lines:?}");
    for line in &lines {
        // The ids are the managers' to mint (ex-4, ex-5, ex-6 in practice), so a tour naming one
        // fails as soon as the log's indexes move.
        let names_an_id = line
            .match_indices("ex-")
            .any(|(at, _)| line[at + 3..].starts_with(|c: char| c.is_ascii_digit()));
        assert!(!names_an_id, "the tour names an executor id: {line}");
    }
    std::fs::create_dir_all(&tour.dir).unwrap();
    let by_name = |name: &str| {
        tour.executors
            .iter()
            .find(|e| e.name.as_deref() == Some(name) || e.executor_id == name)
            .unwrap_or_else(|| {
                panic!("the tour names executor {name}, which the dev cluster does not have")
            })
            .clone()
    };

    let mut setup: Vec<String> = Vec::new();
    let mut until_ctrl_c: Vec<(String, ProcessGroup, PathBuf, PathBuf)> = Vec::new();
    let mut drained: Vec<ExecutorView> = Vec::new();
    let mut checked = 0;
    for line in &lines {
        let command = command_of(line);
        if is_setup(command) {
            if let Some(alias) = command.strip_prefix("alias leaseholdctl=") {
                // The alias names the build's path relative to the checkout: the same path here
                // leads to the binary the dev-cluster script built.
                let path = tour.dir.join(alias);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::os::unix::fs::symlink(&tour.leaseholdctl, &path).unwrap();
            }
            setup.push(line.clone());
            continue;
        }
        let words: Vec<&str> = command.split_whitespace().collect();
        if line.contains("Ctrl-C") {
            let (stdout, stderr) = (
                tour.dir.join(format!("background-{checked}.out")),
                tour.dir.join(format!("background-{checked}.err")),
            );
            let mut background = tour_command(tour, &setup, line).into_std();
            background
                .stdout(std::fs::File::create(&stdout).unwrap())
                .stderr(std::fs::File::create(&stderr).unwrap())
                .process_group(0);
            let group = ProcessGroup(Some(background.spawn().unwrap()));
            assert_eq!(
                words,
                ["leaseholdctl", "watch"],
                "a long-running line: {line}"
            );
            // Its first state read before the next line changes anything.
            poll_until("watch to start", TOUR_COMMAND_BOUND, || async {
                let said = std::fs::read_to_string(&stderr).unwrap_or_default();
                if said.contains("watching from revision") {
                    Ok(())
                } else {
                    Err(said)
                }
            })
            .await;
            until_ctrl_c.push((line.clone(), group, stdout, stderr));
            checked += 1;
            continue;
        }
        if command.contains("/v1/watch?") {
            assert!(
                !command.contains("revision=0"),
                "revision 0 is always behind: the query would answer at once: {line}"
            );
            let before = state_revision(&tour.managers).await;
            let watch = tokio::spawn(run_to_end(tour_command(tour, &setup, line), line.clone()));
            // The change it returns on: the tour's drain cancelled.
            tokio::time::sleep(Duration::from_secs(2)).await;
            for executor in drained.drain(..) {
                leaseholdctl(
                    &tour.managers,
                    &["executor", "undrain", &executor.executor_id],
                )
                .await
                .ok();
            }
            let (stdout, elapsed) = watch.await.unwrap();
            let reply = json_of(line, &stdout);
            let revision = reply["state"]["revision"]
                .as_u64()
                .unwrap_or_else(|| panic!("{line}: no state revision: {stdout}"));
            assert!(
                revision > before || elapsed >= README_WATCH_WAIT - Duration::from_secs(1),
                "{line}: answered at once ({elapsed:?}) with revision {revision}, not past \
                 {before}: it did not block"
            );
            checked += 1;
            continue;
        }
        let (stdout, _) = run_to_end(tour_command(tour, &setup, line), line.clone()).await;
        let rows: Vec<Vec<String>> = stdout.lines().map(leasehold_tests::ctl::cells).collect();
        match words.as_slice() {
            ["leaseholdctl", "cluster", "status"] => {
                assert_eq!(rows.len(), 4, "{stdout}");
                assert_eq!(
                    rows.iter().filter(|row| row[3] == "leader").count(),
                    1,
                    "{stdout}"
                );
            }
            ["leaseholdctl", "executor", "list"] => {
                assert_eq!(rows.len(), 1 + tour.executors.len(), "{stdout}");
                for executor in &tour.executors {
                    assert!(stdout.contains(&executor.executor_id), "{stdout}");
                    assert!(
                        stdout.contains(executor.name.as_deref().unwrap()),
                        "{stdout}"
                    );
                }
            }
            ["leaseholdctl", "shard", "list"] => {
                assert_eq!(rows.len(), 1 + TOUR_SHARDS + 1, "a table and a summary");
                let summary = stdout.lines().last().unwrap();
                assert!(
                    summary.starts_with(&format!("total: {TOUR_SHARDS} shards; per owner: ")),
                    "{summary}"
                );
            }
            ["leaseholdctl", "route", key] => {
                assert_eq!(rows.len(), 2, "{stdout}");
                assert_eq!(rows[1][0], *key, "{stdout}");
            }
            ["leaseholdctl", "executor", "drain", executor] => {
                let executor = by_name(executor);
                let fields = leasehold_tests::ctl::field_pairs(&stdout);
                let field = |name: &str| {
                    fields
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, value)| value.as_str())
                };
                assert_eq!(
                    field("executor"),
                    Some(executor.executor_id.as_str()),
                    "{stdout}"
                );
                assert_eq!(field("draining"), Some("yes"), "{stdout}");
                drained.push(executor);
            }
            ["leaseholdctl", "snapshot", "save", file] => {
                assert!(stdout.contains(file), "{stdout}");
                let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
                assert!(size > 0, "{line}: no backup written to {file}");
                let _ = std::fs::remove_file(file);
            }
            ["curl", "-s", url] if url.ends_with("/v1/cluster") => {
                let cluster = json_of(line, &stdout);
                assert!(cluster["leader_id"].is_u64(), "a leader: {stdout}");
            }
            ["curl", "-s", url] if url.ends_with("/v1/state") => {
                let state = json_of(line, &stdout);
                assert_eq!(state["shards"].as_array().map(Vec::len), Some(TOUR_SHARDS));
                assert_eq!(
                    state["executors"].as_array().map(Vec::len),
                    Some(tour.executors.len())
                );
            }
            ["curl", "-s", url] if url.contains("/v1/routing?key=") => {
                let route = json_of(line, &stdout);
                assert!(
                    route["shard"].is_u64() && route["executor_id"].is_string(),
                    "{stdout}"
                );
            }
            ["curl", "-s", url] if url.contains("/v1/work?key=") => {
                // 200 here, 421 naming the owner elsewhere: either way a JSON answer.
                json_of(line, &stdout);
            }
            ["curl", "-s", url] if url.ends_with("/v1/status") => {
                let status = json_of(line, &stdout);
                assert!(status.is_object(), "{stdout}");
            }
            ["curl", "-s", url] if url.contains("/readyz?verbose") => {
                let readiness = json_of(line, &stdout);
                assert_eq!(readiness["ready"], true, "{stdout}");
                let checks = readiness["checks"]
                    .as_array()
                    .expect("checks with ?verbose");
                assert!(!checks.is_empty(), "{stdout}");
                for check in checks {
                    let detail = check["detail"].as_str().unwrap();
                    assert!(
                        !detail.contains("Some(") && !detail.contains("None"),
                        "plain words, not Rust's Debug: {detail}"
                    );
                }
            }
            _ => panic!("the README's tour line {line:?} has no check here: add one"),
        }
        checked += 1;
    }
    for (line, mut group, stdout, stderr) in until_ctrl_c {
        group.signal(Signal::SIGINT);
        group.wait_exit(TOUR_COMMAND_BOUND).await;
        let printed = std::fs::read_to_string(&stdout).unwrap();
        let drain_seen = tour
            .executors
            .iter()
            .any(|e| printed.contains(&format!("executor {} draining", e.executor_id)));
        assert!(
            drain_seen,
            "{line}: the tour's drain as it happened: {printed}{}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
    }
    eprintln!("the README's tour: {checked} commands checked");
}

/// The state's revision as the first manager has applied it.
async fn state_revision(managers: &[String]) -> u64 {
    let state: leasehold_api::wire::StateView =
        leaseholdctl(&managers[..1], &["-o", "json", "state"])
            .await
            .ok()
            .json();
    state.revision
}

/// `scripts/dev-cluster`'s live status line (scripts/dev-cluster-status.py) says who leads and
/// what is applied in words and numbers: `no leader yet` and `applied nothing` while the cluster
/// forms, where it printed Python's `None`.
#[tokio::test]
async fn dev_cluster_status_line_names_the_leader_in_words() {
    let Some(python) = leasehold_tests::python::python_or_skip("the dev cluster's status line")
    else {
        return;
    };
    let status_line = |cluster: serde_json::Value| {
        let python = python.clone();
        async move {
            let state = serde_json::json!({
                "revision": 7,
                "executors": [{"executor_id": "ex-4", "name": "executor-1",
                               "shards": [{"shard": 0, "epoch": 1}], "lease_remaining_ms": 14_500},
                              {"executor_id": "ex-5", "shards": [], "lease_remaining_ms": 900}],
                "shards": [{"shard": 0, "owner": "ex-4", "epoch": 1},
                           {"shard": 1, "epoch": 0}],
            });
            let router = axum::Router::new()
                .route(
                    "/v1/cluster",
                    axum::routing::get(move || async move { axum::Json(cluster) }),
                )
                .route(
                    "/v1/state",
                    axum::routing::get(move || async move { axum::Json(state) }),
                );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let server = tokio::spawn(async move { axum::serve(listener, router).await });
            let output = tokio::process::Command::new(python)
                .arg(repo_root().join("scripts/dev-cluster-status.py"))
                .arg(&url)
                .output()
                .await
                .unwrap();
            server.abort();
            assert!(output.status.success(), "{output:?}");
            String::from_utf8(output.stdout).unwrap()
        }
    };
    let forming = status_line(serde_json::json!({
        "node_id": 1, "leader_id": null, "term": 1, "applied_index": null,
    }))
    .await;
    assert_eq!(
        forming,
        "no leader yet, term 1, applied nothing | rev 7 | executor-1: 1 shards, lease 14s | \
         ex-5: 0 shards, lease 0s | releasing 0, unowned 1\n"
    );
    let formed = status_line(serde_json::json!({
        "node_id": 1, "leader_id": 2, "term": 3, "applied_index": 11,
    }))
    .await;
    assert!(
        formed.starts_with("leader 2, term 3, applied 11 | rev 7 | "),
        "{formed}"
    );
}

/// `scripts/dev-cluster --tls` (PROTOCOL §13, the README tour's next step): it makes
/// certificates, serves only mutual TLS, and what it prints to paste (`export ...`) is enough
/// for leaseholdctl to see every executor and shard; Ctrl-C removes the data and the keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_cluster_tls_serves_mutual_tls_with_what_it_prints() {
    let _serial = one_cluster_at_a_time().await;
    let root = repo_root();
    let temp = tempfile::tempdir().unwrap();
    let base = free_port_base();
    let mut script = Command::new(root.join("scripts/dev-cluster"));
    script
        .arg("--tls")
        .current_dir(&root)
        .env("LEASEHOLD_BIN_DIR", bin_dir());
    let mut dev_cluster = DevCluster::start(script, temp.path(), base, CLUSTER_BOUND).await;
    let printed = dev_cluster.printed.clone();
    let managers: Vec<String> = (1..=3)
        .map(|i| format!("https://127.0.0.1:{}", base + i))
        .collect();
    assert!(printed.contains(&managers.join(",")), "{printed}");
    assert!(
        printed.contains(&format!("Web console: {}/ui/", managers[0])),
        "{printed}"
    );
    // The line to paste: `export NAME=value ...`.
    let exports: Vec<(String, String)> = printed
        .lines()
        .find_map(|line| line.trim().strip_prefix("export "))
        .expect("an export line for leaseholdctl")
        .split_whitespace()
        .map(|pair| {
            let (name, value) = pair.split_once('=').expect("NAME=value");
            (name.to_owned(), value.to_owned())
        })
        .collect();
    let names: Vec<&str> = exports.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "LEASEHOLD_ENDPOINTS",
            "LEASEHOLD_CACERT",
            "LEASEHOLD_CERT",
            "LEASEHOLD_KEY"
        ]
    );
    let ctl = |args: &'static [&'static str]| {
        let exports = exports.clone();
        async move {
            let output = tokio::process::Command::new(leasehold_tests::binary("leaseholdctl"))
                .args(args)
                .envs(exports)
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .output()
                .await
                .expect("run leaseholdctl");
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
    };
    poll_until(
        "three executors sharing every shard over TLS",
        CLUSTER_BOUND,
        || async {
            let (code, stdout, stderr) =
                ctl(&["--consistent", "-o", "json", "executor", "list"]).await;
            if code != Some(0) {
                return Err(format!("{code:?}: {stderr}"));
            }
            let executors: Vec<ExecutorView> =
                serde_json::from_str(&stdout).map_err(|e| e.to_string())?;
            let owned: usize = executors.iter().map(|e| e.shards.len()).sum();
            if executors.len() == 3 && owned == DEV_SHARDS {
                Ok(())
            } else {
                Err(format!("{} executors, {owned} shards", executors.len()))
            }
        },
    )
    .await;
    // Plaintext gets no answer from any of its ports (P13.2).
    for offset in [1, 101] {
        let plaintext = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{}/v1/state", base + offset))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        assert!(
            plaintext
                .as_ref()
                .map_or(true, |r| !r.status().is_success()),
            "P13.2: port {} answered plaintext: {plaintext:?}",
            base + offset
        );
    }

    dev_cluster.interrupt().await;
    let certs = &exports[1].1;
    assert!(
        !Path::new(certs).exists(),
        "the certificates and keys are removed with the data: {certs}"
    );
}

/// `scripts/dev-cluster` with its live status off, started by [`DevCluster::start`], and what
/// it printed once it was up.
struct DevCluster {
    group: ProcessGroup,
    stdout_path: PathBuf,
    printed: String,
}

impl DevCluster {
    /// Runs `script` (the script with its arguments, directory and environment) on the ports
    /// from `base`, its output in `dir`, in its own process group like a shell job, and waits up
    /// to `bound` for it to print its endpoints.
    async fn start(mut script: Command, dir: &Path, base: u16, bound: Duration) -> Self {
        let stdout_path = dir.join("dev-cluster.out");
        let log_path = dir.join("dev-cluster.err");
        let child = script
            .env("LEASEHOLD_DEV_STATUS", "0")
            .env("LEASEHOLD_DEV_PORT_BASE", base.to_string())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&log_path).unwrap())
            // Its own process group, like a shell job: Ctrl-C goes to the whole group.
            .process_group(0)
            .spawn()
            .expect("start scripts/dev-cluster");
        let group = ProcessGroup(Some(child));
        let printed = poll_until("the dev cluster to print its endpoints", bound, || async {
            let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
            if out.contains("Ctrl-C stops everything.") {
                Ok(out)
            } else {
                Err(format!(
                    "{out}\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ))
            }
        })
        .await;
        Self {
            group,
            stdout_path,
            printed,
        }
    }

    /// Ctrl-C: the script stops everything and says it removed the data.
    async fn interrupt(&mut self) {
        self.group.signal(Signal::SIGINT);
        let exit = self.group.wait_exit(STOP_BOUND).await;
        let out = std::fs::read_to_string(&self.stdout_path).unwrap_or_default();
        assert!(
            out.contains("stopped; data removed"),
            "exit {exit:?}: {out}"
        );
    }
}

/// The dev-cluster script, leader of its own process group; the whole group is killed if the
/// test ends without a clean stop, so no manager or executor outlives a failed test.
struct ProcessGroup(Option<std::process::Child>);

impl ProcessGroup {
    fn signal(&self, signal: Signal) {
        if let Some(child) = &self.0 {
            let _ = killpg(Pid::from_raw(child.id() as i32), signal);
        }
    }

    async fn wait_exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + bound;
        let child = self.0.as_mut().expect("dev-cluster running");
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.0 = None;
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("dev-cluster did not stop within {bound:?} of Ctrl-C");
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// The example deployment (deploy/: systemd units, env files, compose file) only sets variables
/// the binaries read: each `LEASEHOLD_*` name it uses is one `--help` lists for that binary, and
/// each flag on an `ExecStart`/`command` line is one the binary accepts. (`systemd-analyze verify`
/// and `docker compose config` need tools CI does not have; docs/OPERATIONS.md records running
/// them.)
#[test]
fn deploy_files_use_only_settings_the_binaries_accept() {
    let deploy = repo_root().join("deploy");
    let help = |binary_name: &str| {
        let output = Command::new(leasehold_tests::binary(binary_name))
            .arg("--help")
            .output()
            .expect("run --help");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let manager_help = help("leasehold-manager");
    let executor_help = help("leasehold-executor");
    let env_names = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .filter(|word| word.starts_with("LEASEHOLD_") && word.len() > "LEASEHOLD_".len())
            .map(str::to_owned)
            .collect()
    };
    let flags = |text: &str| -> Vec<String> {
        text.split(|c: char| c.is_whitespace() || matches!(c, '"' | ',' | '[' | ']'))
            // `---` separates YAML documents.
            .filter(|word| {
                word.strip_prefix("--")
                    .is_some_and(|name| name.starts_with(|c: char| c.is_ascii_alphabetic()))
            })
            .map(str::to_owned)
            .collect()
    };
    let check = |file: &str, text: &str, help: &str| {
        let text: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .map(|line| format!("{line}\n"))
            .collect();
        let text = text.as_str();
        for name in env_names(text) {
            assert!(
                help.contains(&format!("[env: {name}=")),
                "{file}: {name} is not a setting of this binary"
            );
        }
        for flag in flags(text) {
            assert!(
                help.contains(&flag),
                "{file}: {flag} is not a flag of this binary"
            );
        }
    };
    let read = |name: &str| {
        std::fs::read_to_string(deploy.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    for file in [
        "systemd/manager-1.env",
        "systemd/manager-2.env",
        "systemd/manager-3.env",
        "systemd/leasehold-manager.service",
    ] {
        check(file, &read(file), &manager_help);
    }
    for file in ["systemd/executor.env", "systemd/leasehold-executor.service"] {
        check(file, &read(file), &executor_help);
    }
    let compose = read("docker-compose.yml");
    let (managers, executors) = compose
        .split_once("x-executor:")
        .expect("the compose file defines managers, then executors");
    let (executor_anchor, services) = executors.split_once("services:").expect("services");
    let (manager_services, executor_services) = services
        .split_once("executor-1:")
        .expect("executor services");
    check(
        "docker-compose.yml (managers)",
        &format!("{managers}{manager_services}"),
        &manager_help,
    );
    check(
        "docker-compose.yml (executors)",
        &format!("{executor_anchor}{executor_services}"),
        &executor_help,
    );
    // The Kubernetes kit: the managers' StatefulSets; the executor sidecar of the Deployment, and
    // the example service beside it, whose flags are those of examples/python/kv.py.
    check(
        "kubernetes/base/manager.yaml",
        &read("kubernetes/base/manager.yaml"),
        &manager_help,
    );
    let deployment = read("kubernetes/base/executor.yaml");
    let (sidecar, service) = deployment
        .split_once("\n      containers:\n")
        .expect("the executor Deployment's sidecar comes before its service");
    check(
        "kubernetes/base/executor.yaml (sidecar)",
        sidecar,
        &executor_help,
    );
    let example = std::fs::read_to_string(repo_root().join("examples/python/kv.py"))
        .expect("examples/python/kv.py");
    let example_flags: String = example
        .lines()
        .filter(|line| line.contains("add_argument(\"--"))
        .map(|line| format!("{line}\n"))
        .collect();
    check(
        "kubernetes/base/executor.yaml (service)",
        service,
        &example_flags,
    );
    assert!(
        sidecar.contains("LEASEHOLD_APP_VERSION") && sidecar.contains("restartPolicy: Always"),
        "P17.3, P17.2: the sidecar states the pod template's version and outlives the service"
    );
    for id in 1..=3 {
        let env = read(&format!("systemd/manager-{id}.env"));
        assert!(
            env.contains(&format!("LEASEHOLD_ID={id}\n")),
            "manager-{id}.env"
        );
    }
}

/// What one set of commands binds and writes, as bash would run them.
#[derive(Debug, Default)]
struct Footprint {
    /// Every `--listen` and `--local-listen` TCP port.
    ports: Vec<u16>,
    /// Every `--data-dir`, `--store-dir` and `--event-log`.
    paths: Vec<String>,
    /// What the cleanup removes (`rm -rf`).
    removed: Vec<String>,
    /// Whether the commands say how to stop what they started.
    stops: bool,
}

/// The `sh` code blocks of a Markdown page, in order.
fn sh_blocks(markdown: &str) -> Vec<&str> {
    markdown
        .split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect()
}

/// Shell lines with continuations joined, comments dropped, and `for VAR in A B C; do … done`
/// unrolled with `$VAR` replaced, as bash runs them.
fn shell_lines(script: &str) -> Vec<String> {
    let joined = script.replace("\\\n", " ");
    let mut lines = Vec::new();
    let mut pending = joined
        .lines()
        .map(|line| match line.find(" #") {
            Some(comment) if !line.trim_start().starts_with('#') => &line[..comment],
            _ if line.trim_start().starts_with('#') => "",
            _ => line,
        })
        .map(str::trim)
        .filter(|line| !line.is_empty());
    while let Some(line) = pending.next() {
        let Some(header) = line
            .strip_prefix("for ")
            .and_then(|rest| rest.strip_suffix("; do"))
        else {
            lines.push(line.to_owned());
            continue;
        };
        let (variable, values) = header.split_once(" in ").expect("for VAR in VALUES; do");
        let body: Vec<&str> = pending
            .by_ref()
            .take_while(|line| *line != "done")
            .collect();
        for value in values.split_whitespace() {
            for line in &body {
                lines.push(
                    line.replace(&format!("${{{variable}}}"), value)
                        .replace(&format!("${variable}"), value),
                );
            }
        }
    }
    lines
}

/// The values given to `flag` (`--flag VALUE` or `--flag=VALUE`), quotes removed.
fn flag_values(line: &str, flag: &str) -> Vec<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut values = Vec::new();
    for (at, word) in words.iter().enumerate() {
        if *word == flag {
            if let Some(value) = words.get(at + 1) {
                values.push(value.trim_matches('"').to_owned());
            }
        } else if let Some(value) = word.strip_prefix(&format!("{flag}=")) {
            values.push(value.trim_matches('"').to_owned());
        }
    }
    values
}

fn footprint(lines: &[String]) -> Footprint {
    let mut found = Footprint::default();
    for line in lines {
        for flag in ["--listen", "--local-listen"] {
            for address in flag_values(line, flag) {
                if address.starts_with("unix:") {
                    continue;
                }
                let (_, port) = address
                    .rsplit_once(':')
                    .unwrap_or_else(|| panic!("{flag} {address}: no port"));
                found.ports.push(
                    port.parse()
                        .unwrap_or_else(|_| panic!("{flag} {address}: the port is not a number")),
                );
            }
        }
        for flag in ["--data-dir", "--store-dir", "--event-log"] {
            found.paths.extend(flag_values(line, flag));
        }
        if let Some(removed) = line.strip_prefix("rm -rf ") {
            found
                .removed
                .extend(removed.split_whitespace().map(str::to_owned));
        }
        found.stops |= line.starts_with("kill ");
    }
    found
}

/// The ports and the temporary directory `scripts/dev-cluster` uses by default, read from the
/// script: `base=${LEASEHOLD_DEV_PORT_BASE:-N}`, each `--listen "127.0.0.1:$((base + … i))"` in
/// its `for i in …` loop, and its `mktemp -d -t PREFIX.XXXXXX`.
fn dev_cluster_footprint(script: &str) -> (Vec<u16>, String) {
    let base: u16 = script
        .split_once("LEASEHOLD_DEV_PORT_BASE:-")
        .and_then(|(_, rest)| rest.split('}').next())
        .and_then(|number| number.parse().ok())
        .expect("dev-cluster's default port base");
    let mut ports = Vec::new();
    let mut loop_values: Vec<u16> = Vec::new();
    for line in script.lines().map(str::trim) {
        if let Some(values) = line
            .strip_prefix("for i in ")
            .and_then(|rest| rest.strip_suffix("; do"))
        {
            loop_values = values
                .split_whitespace()
                .map(|value| value.parse().expect("a numeric loop"))
                .collect();
        }
        // The address is quoted and has spaces: up to the closing quote.
        let addresses = line
            .split("--listen \"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next());
        for address in addresses {
            let expression = address
                .strip_prefix("127.0.0.1:$((")
                .and_then(|rest| rest.strip_suffix("))"))
                .unwrap_or_else(|| panic!("dev-cluster listens on {address}: not base + offset"));
            for &i in &loop_values {
                let port = expression
                    .split('+')
                    .map(str::trim)
                    .map(|term| match term {
                        "base" => base,
                        "i" => i,
                        number => number.parse().expect("a numeric offset"),
                    })
                    .sum();
                ports.push(port);
            }
        }
    }
    let template = script
        .split_once("mktemp -d -t ")
        .and_then(|(_, rest)| rest.split(')').next())
        .expect("dev-cluster's mktemp");
    (ports, template.trim_end_matches('X').to_owned())
}

/// The two examples' commands, as their READMEs give them, and the quickstart's
/// (docs/QUICKSTART.md) can run beside each other and beside `scripts/dev-cluster`: no TCP port
/// and no data directory in common (a shared manager data directory silently resumes the other
/// cluster). Each page also says how to stop what it started and removes everything it wrote.
#[test]
fn examples_use_ports_and_directories_of_their_own() {
    let root = repo_root();
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let (dev_ports, dev_dir_prefix) = dev_cluster_footprint(&read("scripts/dev-cluster"));
    assert_eq!(
        dev_ports.len(),
        6,
        "dev-cluster: three managers, three executors"
    );
    let dev_dir_prefix = format!("/tmp/{dev_dir_prefix}");
    let examples: Vec<(&str, Footprint)> = [
        "examples/kv/README.md",
        "examples/python/README.md",
        "docs/QUICKSTART.md",
    ]
    .into_iter()
    .map(|readme| {
        let lines: Vec<String> = sh_blocks(&read(readme))
            .into_iter()
            .flat_map(shell_lines)
            .collect();
        (readme, footprint(&lines))
    })
    .collect();
    for (readme, example) in &examples {
        assert!(
            example.ports.len() >= 5 && !example.paths.is_empty(),
            "{readme}: its commands start managers and services: {example:?}"
        );
        let mut ports = example.ports.clone();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(
            ports.len(),
            example.ports.len(),
            "{readme}: a port bound twice"
        );
        for port in &example.ports {
            assert!(
                !dev_ports.contains(port),
                "{readme}: port {port} is scripts/dev-cluster's ({dev_ports:?})"
            );
        }
        for path in &example.paths {
            assert!(
                !path.starts_with(&dev_dir_prefix),
                "{readme}: {path} is where scripts/dev-cluster keeps its data"
            );
            assert!(
                example
                    .removed
                    .iter()
                    .any(|removed| path == removed || path.starts_with(&format!("{removed}/"))),
                "{readme}: the cleanup ({:?}) leaves {path} behind",
                example.removed
            );
        }
        assert!(example.stops, "{readme}: says how to stop its processes");
    }
    let nested = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
    for (at, (page_a, a)) in examples.iter().enumerate() {
        for (page_b, b) in &examples[at + 1..] {
            for port in &a.ports {
                assert!(
                    !b.ports.contains(port),
                    "{page_a} and {page_b} both listen on {port}"
                );
            }
            for path_a in a.paths.iter().chain(&a.removed) {
                for path_b in b.paths.iter().chain(&b.removed) {
                    assert!(
                        !nested(path_a, path_b) && !nested(path_b, path_a),
                        "{page_a} and {page_b} share the directory {path_a} / {path_b}"
                    );
                }
            }
        }
    }
}
