//! docs/QUICKSTART.md, run as a reader would: every `sh` block in order, in one bash session (the
//! page's commands share variables and background jobs), with its `python` block saved where the
//! page says, on ports and in a directory of this test's own. Each step is checked for what the
//! page says it shows:
//!
//! - the managers elect a leader (`cluster status`);
//! - the first sidecar holds all eight shards, then the two split them evenly (`executor list`,
//!   `shard list`), and each copy of the service answers a key 200 when its sidecar owns the key's
//!   shard at the epoch the managers route it at, else names the owner;
//! - after `kill -9` of a sidecar, its shards move to the survivor at higher epochs, and the
//!   orphaned copy of the service serves nothing;
//! - the cleanup stops every process, frees every port and removes the directory.
//!
//! A block this test has no check for fails it, so the page and its test change together.
//!
//! The build block (`cargo build --workspace --bins`) is the one command not run: the suite's
//! binaries are already built by that same command (scripts/test), and running it again from
//! inside a test would rebuild `leasehold-bench` without the `etcd` feature scripts/test may have
//! turned on, swapping the benchmark binary under the benchmark test in the other lane. The test
//! checks the line is exactly that build and runs the binaries it produced
//! (tests/tests/readme.rs builds from a clean checkout).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold_api::wire::{ExecutorView, StateView};
use leasehold_tests::ctl::{cells, leaseholdctl};
use leasehold_tests::{bin_dir, one_cluster_at_a_time};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The page's ports are `127.0.0.1:76NN`; the test's are `127.0.0.1:PPNN` for a free `PP`.
const PAGE_PORT_PREFIX: &str = "127.0.0.1:76";
/// Two-digit prefixes this test may use instead: ports 1100-1999, above the privileged ports and
/// below the harness's range (harness/src/lib.rs `PORTS`), so no test of the other lane has them.
const TEST_PORT_PREFIXES: std::ops::RangeInclusive<u16> = 11..=19;
const PAGE_DIR: &str = "/tmp/lh-quickstart";
const PAGE_BUILD: &str = "cargo build --workspace --bins";
const PAGE_SHARDS: usize = 8;
/// One block run to its end (the cleanup waits for graceful stops, a few seconds each).
const BLOCK_BOUND: Duration = Duration::from_secs(60);
/// What a look line shows, eventually: a leader, a split, or a dead sidecar's shards moved (its
/// 10 s lease, a tick of a third of it, then the handoffs).
const SETTLE_BOUND: Duration = Duration::from_secs(45);
const DONE_MARKER: &str = "__quickstart_block_done";

/// The page's code blocks, in order: each `sh` block, and the service's source.
struct Page {
    sh_blocks: Vec<String>,
    service_source: String,
}

fn read_page(markdown: &str) -> Page {
    let mut sh_blocks = Vec::new();
    let mut python = Vec::new();
    // Between two fences is a code block: its first line is the fence's info string.
    for block in markdown.split("```").skip(1).step_by(2) {
        let (language, body) = block.split_once('\n').unwrap_or((block, ""));
        match language.trim() {
            "sh" => sh_blocks.push(body.to_owned()),
            "python" => python.push(body.to_owned()),
            // What the commands print, for the reader to compare; the checks here say it.
            "" => {}
            other => panic!("QUICKSTART.md has a code block in {other:?}: run it here"),
        }
    }
    assert_eq!(python.len(), 1, "one service, in one python block");
    Page {
        sh_blocks,
        service_source: python.remove(0),
    }
}

/// A block's commands: continuation lines joined, comments and blank lines dropped.
fn commands(block: &str) -> Vec<String> {
    block
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// A line that only shows something: run on its own, again until it shows what it should.
fn is_look(command: &str) -> bool {
    command.starts_with("target/debug/leaseholdctl ") || command.starts_with("curl ")
}

/// The page's text with this test's ports and directory in place of the page's.
fn on_test_setup(text: &str, port_prefix: u16, dir: &Path) -> String {
    let moved = text
        .replace(PAGE_PORT_PREFIX, &format!("127.0.0.1:{port_prefix}"))
        .replace(PAGE_DIR, &dir.display().to_string());
    assert!(
        !moved.contains(":76"),
        "a port the test cannot move (write it as {PAGE_PORT_PREFIX}NN): {moved}"
    );
    moved
}

/// A prefix whose hundred ports are all free on 127.0.0.1 now.
fn free_port_prefix() -> u16 {
    TEST_PORT_PREFIXES
        .into_iter()
        .find(|prefix| {
            (0..100).all(|n| std::net::TcpListener::bind(("127.0.0.1", prefix * 100 + n)).is_ok())
        })
        .expect("a free block of a hundred ports in 1100-1999")
}

/// The values given to `flag` (`--flag VALUE`) on a command line.
fn flag_value(command: &str, flag: &str) -> Option<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    words
        .iter()
        .position(|word| *word == flag)
        .and_then(|at| words.get(at + 1))
        .map(|value| (*value).to_owned())
}

fn port_of(address: &str) -> u16 {
    address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("{address}: no port"))
}

/// One bash reading the page's blocks, as the reader's terminal. Its background jobs share its
/// process group, which is killed when the test ends however it ends.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    dir: PathBuf,
    blocks_run: usize,
}

impl Shell {
    fn start(dir: &Path) -> Self {
        let mut child = tokio::process::Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(dir)
            .env_remove("LEASEHOLD_ENDPOINTS")
            .env_remove("LEASEHOLD_MANAGERS")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("shell.err")).unwrap())
            .process_group(0)
            .spawn()
            .expect("bash");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            stdin,
            stdout,
            dir: dir.to_path_buf(),
            blocks_run: 0,
        }
    }

    /// Runs `script` in the session and returns what it printed and its exit status. The script
    /// is sourced from a file with stdin from /dev/null, so no command it runs can read the
    /// session's next input.
    async fn run(&mut self, script: &str) -> (String, i32) {
        self.blocks_run += 1;
        let file = self.dir.join(format!("block-{}.sh", self.blocks_run));
        std::fs::write(&file, script).unwrap();
        let input = format!(
            "source {} </dev/null; echo \"{DONE_MARKER} $?\"\n",
            file.display()
        );
        self.stdin.write_all(input.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
        let mut printed = String::new();
        let reading = async {
            while let Some(line) = self.stdout.next_line().await.unwrap() {
                if let Some(status) = line.strip_prefix(&format!("{DONE_MARKER} ")) {
                    return status.parse().expect("an exit status");
                }
                printed.push_str(&line);
                printed.push('\n');
            }
            panic!("the shell exited: {}", self.stderr());
        };
        let status = tokio::time::timeout(BLOCK_BOUND, reading)
            .await
            .unwrap_or_else(|_| panic!("{script}\nstill running after {BLOCK_BOUND:?}"));
        (printed, status)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("shell.err")).unwrap_or_default()
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

/// A sidecar the page started, and the copy of the service beside it.
#[derive(Debug, Clone)]
struct Sidecar {
    name: String,
    /// The shell variable holding its pid (`sidecar1=$!`).
    pid_variable: String,
    service_port: u16,
    alive: bool,
}

/// What the page has started so far, as the test follows it.
#[derive(Debug, Default)]
struct Expected {
    managers: Vec<String>,
    sidecars: Vec<Sidecar>,
    /// Each shard's owner and epoch when a sidecar was killed, for the moves that follow.
    before_kill: Option<BTreeMap<u32, (Option<String>, u64)>>,
}

impl Expected {
    fn alive(&self) -> Vec<&Sidecar> {
        self.sidecars.iter().filter(|s| s.alive).collect()
    }

    fn sidecar_serving(&self, port: u16) -> &Sidecar {
        self.sidecars
            .iter()
            .find(|s| s.service_port == port)
            .unwrap_or_else(|| panic!("no copy of the service on port {port}: {self:?}"))
    }
}

async fn executors(managers: &[String]) -> Result<Vec<ExecutorView>, String> {
    let run = leaseholdctl(
        managers,
        &["--consistent", "-o", "json", "executor", "list"],
    )
    .await;
    if run.code != Some(0) {
        return Err(format!("{run:?}"));
    }
    serde_json::from_str(&run.stdout).map_err(|e| e.to_string())
}

async fn state(managers: &[String]) -> Result<StateView, String> {
    let run = leaseholdctl(managers, &["--consistent", "-o", "json", "state"]).await;
    if run.code != Some(0) {
        return Err(format!("{run:?}"));
    }
    serde_json::from_str(&run.stdout).map_err(|e| e.to_string())
}

/// The executor ids of the live sidecars and how many shards each holds, by name, once exactly
/// they hold every shard, evenly, with no handoff under way.
async fn split_among_the_living(
    expected: &Expected,
) -> Result<(BTreeMap<String, String>, BTreeMap<String, usize>), String> {
    let executors = executors(&expected.managers).await?;
    let names: BTreeSet<String> = executors.iter().filter_map(|e| e.name.clone()).collect();
    let alive: BTreeSet<String> = expected.alive().iter().map(|s| s.name.clone()).collect();
    if names != alive || executors.len() != alive.len() {
        return Err(format!("executors {names:?}, expected {alive:?}"));
    }
    let counts: Vec<usize> = executors.iter().map(|e| e.shards.len()).collect();
    let (least, most) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    if counts.iter().sum::<usize>() != PAGE_SHARDS || most - least > 1 {
        return Err(format!("shards per executor {counts:?}"));
    }
    let state = state(&expected.managers).await?;
    if let Some(busy) = state.shards.iter().find(|s| s.handoff.is_some()) {
        return Err(format!("shard {} is still being handed over", busy.shard));
    }
    let counts = executors
        .iter()
        .filter_map(|e| Some((e.name.clone()?, e.shards.len())))
        .collect();
    let ids = executors
        .into_iter()
        .filter_map(|e| e.name.map(|name| (name, e.executor_id)))
        .collect();
    Ok((ids, counts))
}

/// Checks one look line's output against what the page says it shows; `Err` to run it again.
async fn check_look(command: &str, printed: &str, expected: &Expected) -> Result<(), String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let rows: Vec<Vec<String>> = printed.lines().map(cells).collect();
    match words.as_slice() {
        ["target/debug/leaseholdctl", "cluster", "status"] => {
            let leaders = rows
                .iter()
                .filter(|row| row.get(3).is_some_and(|r| r == "leader"));
            if rows.len() != 4 || leaders.count() != 1 {
                return Err(format!("three members, one leader: {printed}"));
            }
        }
        ["target/debug/leaseholdctl", "executor", "list"] => {
            let (ids, counts) = split_among_the_living(expected).await?;
            if rows.len() != 1 + ids.len() {
                return Err(format!("a row per live sidecar ({ids:?}): {printed}"));
            }
            let column = |title: &str| {
                rows[0]
                    .iter()
                    .position(|cell| cell == title)
                    .unwrap_or_else(|| panic!("no column {title}: {printed}"))
            };
            let (id_at, name_at, shards_at) =
                (column("EXECUTOR"), column("NAME"), column("SHARDS"));
            for row in &rows[1..] {
                let name = &row[name_at];
                let shown = row[shards_at].parse::<usize>().ok();
                if ids.get(name) != Some(&row[id_at]) || shown != counts.get(name).copied() {
                    return Err(format!(
                        "{name}: {ids:?} holding {counts:?}, yet: {printed}"
                    ));
                }
            }
        }
        ["target/debug/leaseholdctl", "shard", "list"] => {
            let (ids, _) = split_among_the_living(expected).await?;
            let summary = printed.lines().last().unwrap_or_default();
            if rows.len() != 1 + PAGE_SHARDS + 1
                || !summary.starts_with(&format!("total: {PAGE_SHARDS} shards; per owner: "))
                || !summary.ends_with("; unowned: 0; in handoff: 0")
            {
                return Err(format!("a row per shard and a summary: {printed}"));
            }
            if let Some(before) = &expected.before_kill {
                // The dead sidecar's shards now belong to a live one, each at a higher epoch.
                let living: BTreeSet<&String> = ids.values().collect();
                let now = state(&expected.managers).await?;
                let mut moved_count = 0;
                for shard in &now.shards {
                    let (owner_before, epoch_before) = &before[&shard.shard];
                    let moved = owner_before
                        .as_ref()
                        .is_none_or(|owner| !living.contains(owner));
                    if moved && shard.epoch <= *epoch_before {
                        return Err(format!(
                            "shard {} moved from {owner_before:?} at epoch {epoch_before} and \
                             is at epoch {} now",
                            shard.shard, shard.epoch
                        ));
                    }
                    moved_count += usize::from(moved);
                }
                if moved_count == 0 {
                    return Err(format!(
                        "the killed sidecar held no shard to move: {before:?}"
                    ));
                }
            }
        }
        ["curl", "-s", url] => {
            let (address, key) = url
                .split_once("/hello/")
                .unwrap_or_else(|| panic!("curl of something other than the service: {url}"));
            let sidecar = expected.sidecar_serving(port_of(address));
            let answer: Value = serde_json::from_str(printed)
                .map_err(|e| format!("{url} printed no JSON ({e}): {printed}"))?;
            if !sidecar.alive {
                let error = answer["error"].as_str().unwrap_or_default();
                if !error.starts_with("no sidecar") {
                    return Err(format!("{url}: its sidecar is dead, yet: {answer}"));
                }
                return Ok(());
            }
            let (ids, _) = split_among_the_living(expected).await?;
            let route = leaseholdctl(
                &expected.managers,
                &["--consistent", "-o", "json", "route", key],
            )
            .await;
            let route: Value = serde_json::from_str(&route.stdout).map_err(|e| e.to_string())?;
            let owner = route["executor_id"].as_str().unwrap_or_default();
            if ids.get(&sidecar.name).map(String::as_str) == Some(owner) {
                let served = answer["hello"] == *key
                    && answer["shard"] == route["shard"]
                    && answer["epoch"] == route["epoch"]
                    && answer["served_by"] == address;
                if !served {
                    return Err(format!(
                        "{url}: its sidecar owns {key} ({route}), yet: {answer}"
                    ));
                }
            } else if answer["owner_executor_id"] != owner {
                return Err(format!(
                    "{url}: {owner} owns {key}, which the answer names not: {answer}"
                ));
            }
        }
        _ => panic!("QUICKSTART.md's {command:?} has no check here: add one"),
    }
    Ok(())
}

/// Follows what an action block starts and kills, and checks what it leaves behind.
async fn follow_action(block: &str, shell: &mut Shell, expected: &mut Expected) {
    let commands = commands(block);
    let mut started_sidecars = Vec::new();
    for (at, command) in commands.iter().enumerate() {
        if command.contains("target/debug/leasehold-manager ") {
            let initial = flag_value(command, "--initial-cluster").expect("--initial-cluster");
            expected.managers = initial
                .split(',')
                .map(|member| member.split_once('=').expect("ID=URL").1.to_owned())
                .collect();
        } else if command.starts_with("target/debug/leasehold-executor ") {
            let pid_variable = commands
                .get(at + 1)
                .and_then(|next| next.strip_suffix("=$!"))
                .expect("the sidecar's pid kept in a variable")
                .to_owned();
            started_sidecars.push((flag_value(command, "--name").expect("--name"), pid_variable));
        } else if command.starts_with("python3 ") {
            let listen = flag_value(command, "--listen").expect("--listen");
            let (name, pid_variable) = started_sidecars
                .pop()
                .expect("a copy of the service comes after its sidecar");
            expected.sidecars.push(Sidecar {
                name,
                pid_variable,
                service_port: port_of(&listen),
                alive: true,
            });
        } else if let Some(variable) = command.strip_prefix("kill -9 $") {
            let state = state(&expected.managers).await.unwrap();
            expected.before_kill = Some(
                state
                    .shards
                    .iter()
                    .map(|s| (s.shard, (s.owner.clone(), s.epoch)))
                    .collect(),
            );
            let sidecar = expected
                .sidecars
                .iter_mut()
                .find(|s| s.pid_variable == variable)
                .unwrap_or_else(|| panic!("kill -9 ${variable}: no such sidecar"));
            sidecar.alive = false;
        }
    }
    let (printed, status) = shell.run(block).await;
    assert_eq!(
        status,
        0,
        "{block}\nexited {status}: {printed}{}",
        shell.stderr()
    );
    if commands.iter().any(|c| c.starts_with("rm -rf ")) {
        // Every process it started has stopped: no job left, every port closed.
        let (jobs, _) = shell.run("jobs -p").await;
        assert_eq!(jobs.trim(), "", "jobs left after the cleanup");
        for url in &expected.managers {
            let port = port_of(url);
            assert!(
                std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
                "manager port {port} still open after the cleanup"
            );
        }
        for sidecar in &expected.sidecars {
            assert!(
                std::net::TcpStream::connect(("127.0.0.1", sidecar.service_port)).is_err(),
                "{sidecar:?}: the service still listens after the cleanup"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_runs_as_written() {
    let Some(_python) = leasehold_tests::python::python_or_skip("docs/QUICKSTART.md") else {
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let page = read_page(&std::fs::read_to_string(root.join("docs/QUICKSTART.md")).unwrap());
    assert_eq!(
        commands(&page.sh_blocks[0]),
        [PAGE_BUILD],
        "the page builds first, as scripts/test builds"
    );
    let suite_script = std::fs::read_to_string(root.join("scripts/test")).unwrap();
    assert!(
        suite_script.contains(&format!("{PAGE_BUILD} --locked")),
        "scripts/test builds the binaries the way the page does"
    );

    let temp = tempfile::tempdir().unwrap();
    let work = temp.path().join("checkout");
    let dir = temp.path().join("lh-quickstart");
    // The page runs target/debug/... from the repository's root: the same relative path here
    // leads to the binaries this suite built.
    std::fs::create_dir_all(work.join("target")).unwrap();
    std::os::unix::fs::symlink(bin_dir(), work.join("target/debug")).unwrap();
    let port_prefix = free_port_prefix();
    let mut shell = Shell::start(&work);
    let mut expected = Expected::default();
    let mut looked = 0;
    for block in &page.sh_blocks[1..] {
        let block = on_test_setup(block, port_prefix, &dir);
        let lines = commands(&block);
        if !lines.iter().all(|line| is_look(line)) {
            assert!(
                !lines.iter().any(|line| is_look(line)),
                "a block either acts or looks, so each look can be run again: {block}"
            );
            follow_action(&block, &mut shell, &mut expected).await;
            if dir.is_dir() && !dir.join("hello.py").exists() {
                // Step 3: the reader saves the service in the directory step 2 made.
                std::fs::write(dir.join("hello.py"), &page.service_source).unwrap();
            }
            continue;
        }
        for line in lines {
            let deadline = std::time::Instant::now() + SETTLE_BOUND;
            loop {
                let (printed, status) = shell.run(&line).await;
                let verdict = if status == 0 {
                    check_look(&line, &printed, &expected).await
                } else {
                    Err(format!("exited {status}: {printed}"))
                };
                match verdict {
                    Ok(()) => break,
                    Err(why) => assert!(
                        std::time::Instant::now() < deadline,
                        "QUICKSTART.md's {line:?} did not show what the page says within \
                         {SETTLE_BOUND:?}: {why}\n{}",
                        shell.stderr()
                    ),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            looked += 1;
        }
    }
    assert!(!dir.exists(), "the cleanup removes {}", dir.display());
    assert!(
        expected.sidecars.len() == 2 && expected.before_kill.is_some() && looked >= 10,
        "the page starts two copies, kills one and looks at each step: {expected:?}, \
         {looked} looks"
    );
    eprintln!(
        "QUICKSTART.md: {} blocks run, {looked} looks checked",
        page.sh_blocks.len()
    );
}
