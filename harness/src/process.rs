//! One child process with its log file, and what it is run under.

use std::ffi::OsStr;
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::HarnessError;

/// How often a process is checked while waiting for it to exit.
const EXIT_POLL: Duration = Duration::from_millis(50);

/// What a program is run under: nothing, or a command that execs it with its arguments (`ip
/// netns exec NS` to place it in a network namespace, a profiler such as valgrind).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launcher {
    prefix: Vec<String>,
}

impl Launcher {
    /// The program itself.
    pub fn direct() -> Self {
        Self::default()
    }

    /// `words` (a program and its arguments) with the program appended; no words: direct.
    pub fn prefixed<I, S>(words: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            prefix: words.into_iter().map(Into::into).collect(),
        }
    }

    /// A command that runs `program` under this launcher; add its arguments to it.
    pub fn command(&self, program: &Path) -> Command {
        match self.prefix.split_first() {
            Some((launcher, args)) => {
                let mut command = Command::new(launcher);
                command.args(args).arg(program);
                command
            }
            None => Command::new(program),
        }
    }
}

/// A spawned process: stdin and stdout null, stderr to a log file; signalled, waited for within
/// a bound, and SIGKILLed when dropped (after a SIGTERM and a grace period, when one is set).
#[derive(Debug, Default)]
pub struct ChildProcess {
    child: Option<Child>,
    drop_grace: Option<Duration>,
}

impl ChildProcess {
    /// Spawns `command` with its stderr in a new file at `log_path`, without `RUST_BACKTRACE`
    /// (a child's log reads the same on every machine).
    pub fn spawn(command: &mut Command, log_path: &Path) -> Result<Self, HarnessError> {
        let log = File::create(log_path).map_err(|source| HarnessError::Io {
            what: "create process log",
            path: log_path.to_path_buf(),
            source,
        })?;
        let child = command
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                command: describe(command),
                source,
            })?;
        Ok(Self {
            child: Some(child),
            drop_grace: None,
        })
    }

    /// When dropped, SIGTERM first and up to `grace` to exit (e.g. so a profiler wrapping the
    /// process can write its output); `None`: SIGKILL at once.
    pub fn set_drop_grace(&mut self, grace: Option<Duration>) {
        self.drop_grace = grace;
    }

    /// The process id, while the process is held (not yet killed or waited for).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends `signal` (e.g. SIGSTOP / SIGCONT to pause and resume it) without waiting.
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// Waits for the process to exit on its own; SIGKILLs it and returns an error naming
    /// `what` after `bound`.
    pub async fn wait_exit(
        &mut self,
        what: &str,
        bound: Duration,
    ) -> Result<ExitStatus, HarnessError> {
        let mut child = self.child.take().ok_or_else(|| HarnessError::NotStarted {
            what: what.to_string(),
        })?;
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Ok(status);
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(HarnessError::DidNotExit {
            what: what.to_string(),
            bound,
        })
    }

    /// SIGTERM, then [`ChildProcess::wait_exit`]: a graceful exit within `bound`, or SIGKILL
    /// and an error.
    pub async fn terminate(
        &mut self,
        what: &str,
        bound: Duration,
    ) -> Result<ExitStatus, HarnessError> {
        self.signal(Signal::SIGTERM);
        self.wait_exit(what, bound).await
    }

    /// SIGKILL; returns once the process is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(grace) = self.drop_grace {
            self.signal(Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while self.is_running() && Instant::now() < deadline {
                std::thread::sleep(EXIT_POLL);
            }
        }
        self.kill();
    }
}

/// `program arg…` of a command, for error messages.
fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_is_signalled_waited_for_and_killed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleep.log");
        let mut process = ChildProcess::spawn(Command::new("sleep").arg("30"), &log).unwrap();
        assert!(process.is_running());
        let pid = process.pid().unwrap();
        let status = process
            .terminate("sleep", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(!status.success(), "killed by SIGTERM: {status:?}");
        assert!(!process.is_running());
        assert!(process.pid().is_none());
        assert!(!Path::new(&format!("/proc/{pid}")).exists());

        let mut process = ChildProcess::spawn(Command::new("sleep").arg("30"), &log).unwrap();
        let error = process
            .wait_exit("sleep 30", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), "sleep 30 did not exit within 200ms");

        let process = ChildProcess::spawn(Command::new("sleep").arg("30"), &log).unwrap();
        let pid = process.pid().unwrap();
        drop(process);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[tokio::test]
    async fn a_failed_spawn_and_a_process_never_started_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("missing.log");
        let error = ChildProcess::spawn(
            Command::new(dir.path().join("no-such-program")).arg("--flag"),
            &log,
        )
        .unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("spawn "), "{message}");
        assert!(message.contains("no-such-program --flag"), "{message}");

        let error = ChildProcess::default()
            .wait_exit("manager 9", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), "manager 9 was not started");
    }

    #[test]
    fn a_launcher_runs_the_program_under_its_prefix() {
        let program = Path::new("/bin/leasehold-manager");
        let direct = Launcher::direct().command(program);
        assert_eq!(describe(&direct), "/bin/leasehold-manager");
        let netns = Launcher::prefixed(["ip", "netns", "exec", "m1"]).command(program);
        assert_eq!(describe(&netns), "ip netns exec m1 /bin/leasehold-manager");
        assert_eq!(Launcher::prefixed(Vec::<String>::new()), Launcher::direct());
    }
}
