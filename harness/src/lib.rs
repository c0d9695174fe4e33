//! The process harness the multi-process tests (`tests/`) and the load generator (`bench/`)
//! share: child processes with a log file each ([`ChildProcess`]), ports for them
//! ([`free_port`]), bounded polling ([`poll_until`]), the workspace's binaries ([`binary`]) and
//! clusters of `leasehold-manager` processes ([`ManagerCluster`]).
//!
//! Nothing here panics: every failure is a [`HarnessError`] naming what was awaited or started.
//! The tests turn them into panics, the load generator into its errors.

mod cluster;
mod process;

use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fs2::FileExt;

pub use cluster::{
    is_loopback, tls_files, ClusterConfig, Manager, ManagerCluster, ManagerFlags, Placement,
};
pub use process::{ChildProcess, Launcher};

/// What went wrong starting, stopping or waiting for a process.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("timed out after {bound:?} waiting for {what}; last observation: {last}")]
    TimedOut {
        what: String,
        bound: Duration,
        last: String,
    },
    #[error("{what} did not exit within {bound:?}")]
    DidNotExit { what: String, bound: Duration },
    #[error("{what} was not started")]
    NotStarted { what: String },
    #[error("{what} already running")]
    AlreadyRunning { what: String },
    #[error("stop {what} before wiping its data")]
    StillRunning { what: String },
    #[error("no manager {0}")]
    NoSuchManager(u64),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("spawn {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no free port in {ports:?} after {PORT_TRIES} tries")]
    NoFreePort { ports: std::ops::Range<u16> },
    #[error("{PORT_SHARE_ENV}={value:?}: {reason}")]
    BadPortShare { value: String, reason: &'static str },
    #[error(
        "{} not found. The multi-process tests and the load generator run the real binaries: \
         build them first with `cargo build --workspace --bins` (scripts/test does), or point \
         {BIN_DIR_ENV} at them",
        path.display()
    )]
    MissingBinary { path: PathBuf },
    #[error("cannot tell where the binaries are ({reason}): set {BIN_DIR_ENV}")]
    NoBinDir { reason: String },
    #[error("HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("building release {release} from {commit}: {detail}")]
    ReleaseBuild {
        release: String,
        commit: String,
        detail: String,
    },
}

/// How often [`poll_until`] checks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Polls `check` every [`POLL_INTERVAL`] until it yields a value or `bound` passes; the error
/// names `what` and the last observation (`check`'s last `Err`).
pub async fn poll_until<T, F, Fut>(what: &str, bound: Duration, check: F) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    poll_every(what, bound, POLL_INTERVAL, check).await
}

/// [`poll_until`] with its own interval (e.g. longer, for checks that are expensive to answer).
pub async fn poll_every<T, F, Fut>(
    what: &str,
    bound: Duration,
    interval: Duration,
    mut check: F,
) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + bound;
    let mut last = String::from("never checked");
    while Instant::now() < deadline {
        match check().await {
            Ok(value) => return Ok(value),
            Err(observation) => last = observation,
        }
        tokio::time::sleep(interval).await;
    }
    Err(HarnessError::TimedOut {
        what: what.to_string(),
        bound,
        last,
    })
}

/// Ports handed to the processes started here come from below Linux's ephemeral range
/// (32768-60999), so a port the OS picks later for an outgoing connection or a `:0` listener
/// (the tests' fault proxy) can never be one a manager is about to bind (a soak run lost a
/// manager that way, seed 9008006).
pub const PORTS: std::ops::Range<u16> = 20_000..32_000;

const PORT_TRIES: u32 = 10_000;

/// Environment variable giving this process a share of [`PORTS`] of its own, `K/N`: the K-th of
/// N equal slices. Test processes that run at the same time each take a different share, so one
/// can never hand out a port another picked and has not bound yet (scripts/test runs two).
pub const PORT_SHARE_ENV: &str = "LEASEHOLD_PORT_SHARE";

/// The ports a process with `share` ([`PORT_SHARE_ENV`]'s value, if set) hands out.
pub fn ports_for_share(share: Option<&str>) -> Result<std::ops::Range<u16>, HarnessError> {
    let Some(value) = share else {
        return Ok(PORTS);
    };
    let bad = |reason| HarnessError::BadPortShare {
        value: value.to_owned(),
        reason,
    };
    let (k, n) = value.split_once('/').ok_or_else(|| bad("expected K/N"))?;
    let (k, n): (u16, u16) = match (k.trim().parse(), n.trim().parse()) {
        (Ok(k), Ok(n)) => (k, n),
        _ => return Err(bad("K and N must be whole numbers")),
    };
    if n == 0 || k == 0 || k > n {
        return Err(bad("K must be from 1 to N"));
    }
    let width = (PORTS.end - PORTS.start) / n;
    if width == 0 {
        return Err(bad("N leaves no port to a share"));
    }
    let start = PORTS.start + (k - 1) * width;
    Ok(start..start + width)
}

/// A port in this process's share of [`PORTS`] ([`PORT_SHARE_ENV`]) that was free on 127.0.0.1 a
/// moment ago, not handed out before by this process.
pub fn free_port() -> Result<u16, HarnessError> {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let ports = ports_for_share(std::env::var(PORT_SHARE_ENV).ok().as_deref())?;
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..PORT_TRIES {
        let port = rand::random_range(ports.clone());
        if handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return Ok(port);
        }
    }
    Err(HarnessError::NoFreePort { ports })
}

/// Environment variable naming the directory of the workspace's binaries.
pub const BIN_DIR_ENV: &str = "LEASEHOLD_BIN_DIR";

/// Where the workspace's binaries are: [`BIN_DIR_ENV`], else the directory of the running
/// executable (for a test executable in `target/<profile>/deps`, `target/<profile>`).
pub fn bin_dir() -> Result<PathBuf, HarnessError> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().map_err(|e| HarnessError::NoBinDir {
        reason: format!("current_exe: {e}"),
    })?;
    let dir = exe.parent().ok_or_else(|| HarnessError::NoBinDir {
        reason: format!("{} has no directory", exe.display()),
    })?;
    let dir = match dir.parent() {
        Some(profile) if dir.file_name().is_some_and(|name| name == "deps") => profile,
        _ => dir,
    };
    Ok(dir.to_path_buf())
}

/// The repository this build is of: the harness crate's parent directory when it still exists,
/// else the one holding the target directory the running binary is in. The second covers a test
/// binary rebuilt from a temporary clone into the same target directory (the README test builds
/// a fresh clone there, and the clone is gone by the time later tests run).
fn repository_root() -> Result<PathBuf, HarnessError> {
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).parent();
    if let Some(root) = built_from.filter(|root| root.join("Cargo.toml").is_file()) {
        return Ok(root.to_path_buf());
    }
    let bin = bin_dir()?;
    bin.parent()
        .and_then(Path::parent)
        .filter(|root| root.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| HarnessError::NoBinDir {
            reason: format!(
                "no repository holds {} (and the one this was built from is gone)",
                bin.display()
            ),
        })
}

/// The binaries an earlier release was cut as (its commit, CHANGELOG.md), for the tests that
/// run it beside this one (PROTOCOL §14). Built once from that commit in a git worktree under
/// `target/releases/<release>/` and cached there: the manager, the executor and `leaseholdctl`.
/// Blocks while it builds (a few minutes the first time), in this process or another.
pub fn release_bin_dir(release: &str, commit: &str) -> Result<PathBuf, HarnessError> {
    let failed = |detail: String| HarnessError::ReleaseBuild {
        release: release.to_owned(),
        commit: commit.to_owned(),
        detail,
    };
    let root = repository_root().map_err(|e| failed(e.to_string()))?;
    let releases = root.join("target").join("releases");
    std::fs::create_dir_all(&releases)
        .map_err(|e| failed(format!("{}: {e}", releases.display())))?;
    // One build across the test processes that want it at once (each test binary is its own
    // process, and two lanes of them run together): the others wait, then find it built.
    let lock_path = releases.join(format!("{release}.lock"));
    holding_lock(&lock_path, || {
        build_release(&root, &releases.join(release), commit).map_err(failed)
    })
    .map_err(|e| failed(format!("locking {}: {e}", lock_path.display())))?
}

/// Release `commit`'s binaries in `cache`, built there unless they already are.
fn build_release(root: &Path, cache: &Path, commit: &str) -> Result<PathBuf, String> {
    let bin = cache.join("target").join("debug");
    let names = ["leasehold-manager", "leasehold-executor", "leaseholdctl"];
    if names.iter().all(|name| bin.join(name).is_file()) {
        return Ok(bin);
    }
    let source = cache.join("src");
    if !source.join("Cargo.toml").is_file() {
        run_to_end(
            Command::new("git")
                .arg("-C")
                .arg(root)
                .args(["worktree", "add", "--force", "--detach"])
                .arg(&source)
                .arg(commit),
        )?;
    }
    // Below the tests' priority: it builds while the other lane's tests run, and their timing
    // must not suffer from it.
    run_to_end(
        Command::new("nice")
            .args(["-n", "10", "cargo"])
            .current_dir(&source)
            .args(["build", "--locked", "--bins"])
            .args([
                "-p",
                "leasehold-manager",
                "-p",
                "leasehold-executor",
                "-p",
                "leasehold-api",
            ])
            .env("CARGO_TARGET_DIR", cache.join("target"))
            // Binaries to run, never to debug: without debug information their build takes a
            // tenth less (98 s against 109 s on the 2-core CI machine; docs/TESTING.md's budget).
            .env("CARGO_PROFILE_DEV_DEBUG", "0"),
    )?;
    Ok(bin)
}

/// Runs `work` holding the exclusive advisory lock of `lock_path` (created when missing), which
/// every process and every open of the file contends for; waits for it first.
fn holding_lock<T>(lock_path: &Path, work: impl FnOnce() -> T) -> std::io::Result<T> {
    let lock = std::fs::File::create(lock_path)?;
    lock.lock_exclusive()?;
    let done = work();
    // Closing the file releases the lock.
    drop(lock);
    Ok(done)
}

/// Runs `command` to its end; its stderr's tail when it fails.
fn run_to_end(command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
    Err(format!(
        "{command:?} exited with {}: {}",
        output.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// The workspace binary `name` in [`bin_dir`]; an error with instructions when it is missing.
pub fn binary(name: &str) -> Result<PathBuf, HarnessError> {
    binary_in(&bin_dir()?, name)
}

/// The binary `name` in `dir`; an error with instructions when it is missing.
pub fn binary_in(dir: &Path, name: &str) -> Result<PathBuf, HarnessError> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary { path })
    }
}

/// Whether no one holds the storage lock of the data directory `data_dir` (the advisory lock
/// sled takes on its `db` file), without holding it past the check. In one process the lock
/// outlives a closed database by a moment (sled's background writer still holds the file), so a
/// test that reopens a directory waits for this first; a new process never needs to.
pub fn storage_unlocked(data_dir: &Path) -> std::io::Result<bool> {
    let file = std::fs::File::open(data_dir.join("db"))?;
    // Dropping the file releases the lock at once.
    Ok(file.try_lock_exclusive().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_of_a_lock_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let lock_path = dir.path().join("build.lock");
        let (inside, most_inside) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    holding_lock(&lock_path, || {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most_inside.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .unwrap();
                });
            }
        });
        assert_eq!(most_inside.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        assert!(ports.iter().all(|port| PORTS.contains(port)), "{ports:?}");
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
    }

    #[test]
    fn a_port_share_is_its_own_slice_of_the_ports() {
        assert_eq!(ports_for_share(None).unwrap(), PORTS);
        let first = ports_for_share(Some("1/2")).unwrap();
        let second = ports_for_share(Some("2/2")).unwrap();
        assert_eq!(first, 20_000..26_000);
        assert_eq!(second, 26_000..32_000);
        assert_eq!(ports_for_share(Some("1/1")).unwrap(), PORTS);
        for bad in ["", "2", "0/2", "3/2", "1/0", "a/2", "1/-2", "1/20000"] {
            assert!(
                matches!(
                    ports_for_share(Some(bad)),
                    Err(HarnessError::BadPortShare { .. })
                ),
                "{bad:?} accepted"
            );
        }
    }

    #[tokio::test]
    async fn poll_until_returns_the_value_or_names_what_it_waited_for() {
        let mut calls = 0;
        let value = poll_until("the third call", Duration::from_secs(5), || {
            calls += 1;
            let calls = calls;
            async move {
                if calls >= 3 {
                    Ok(calls)
                } else {
                    Err(format!("call {calls}"))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);

        let error = poll_every(
            "never",
            Duration::from_millis(50),
            Duration::from_millis(10),
            || async { Err::<(), _>("still no".to_string()) },
        )
        .await
        .unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("timed out after 50ms waiting for never"),
            "{message}"
        );
        assert!(message.ends_with("last observation: still no"), "{message}");
    }

    #[test]
    fn a_missing_binary_names_the_path_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let message = binary_in(dir.path(), "leasehold-nothing")
            .unwrap_err()
            .to_string();
        assert!(message.contains("leasehold-nothing not found"), "{message}");
        assert!(
            message.contains("cargo build --workspace --bins"),
            "{message}"
        );
        assert!(message.contains(BIN_DIR_ENV), "{message}");
    }
}
