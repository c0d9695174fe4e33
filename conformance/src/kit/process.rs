//! The executor processes the kit starts, watches and stops.

use super::*;

/// One executor process the kit started.
pub(super) struct ExecutorProcess {
    pub(super) name: String,
    pub(super) event_log: PathBuf,
    /// Its stdout and stderr.
    pub(super) log_path: PathBuf,
    /// `host:port` its push listener binds (`{listen}`).
    pub(super) listen: String,
    pub(super) advertise: String,
    /// The `incarnation` and `credential` of its first registration, as its call proxy saw it.
    pub(super) registered_as: Option<Registration>,
    pub(super) push_proxy: ProxySet,
    pub(super) call_proxy: ProxySet,
    pub(super) child: Option<Child>,
    /// An upper bound on when it stopped admitting, when it was killed (its stops unlogged).
    pub(super) ended_at_ns: Option<u64>,
    /// The managers routed shards to it: it must have logged them.
    pub(super) held_shards: bool,
}

impl ExecutorProcess {
    pub(super) fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok()) {
            let _ = killpg(Pid::from_raw(pid), signal);
        }
    }

    pub(super) fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    pub(super) fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
            self.ended_at_ns = Some(monotonic_now_ns());
        }
    }

    /// SIGTERM to the group, the replies to its calls lagging [`STOP_REPLY_LAG`], and a bounded
    /// wait; killed past it (its stop is still judged by the logs) and the run fails.
    pub(super) async fn stop(&mut self) -> Result<(), RunError> {
        self.call_proxy.lag_replies(STOP_REPLY_LAG);
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + STOP_BOUND;
        while Instant::now() < deadline {
            if !self.is_running() {
                self.child = None;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill();
        Err(RunError::Executor(format!(
            "{} did not stop within {STOP_BOUND:?} of SIGTERM (P3.7: a graceful stop is \
             bounded); killed. The end of its log ({}):\n{}",
            self.name,
            self.log_path.display(),
            log_tail(&self.log_path, STOP_LOG_LINES)
        )))
    }

    /// Its admission intervals so far, every one still open left open.
    pub(super) fn intervals(&self) -> Result<Vec<AdmissionInterval>, String> {
        let records = read_admission_log(&self.event_log)?;
        admission_intervals(&[ExecutorLog {
            records,
            ended_at_ns: None,
        }])
    }

    /// How many shards its admission log shows it admitting now, as the primary.
    pub(super) fn admitting_count(&self) -> Result<usize, String> {
        Ok(self
            .intervals()?
            .iter()
            .filter(|interval| interval.end_ns.is_none() && interval.role.is_primary())
            .count())
    }
}

impl Drop for ExecutorProcess {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.kill();
        }
    }
}

/// How many of its last log lines an executor that did not stop is shown with.
const STOP_LOG_LINES: usize = 20;

/// The last `lines` lines of the file at `path`, or why it could not be read.
fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("(unreadable: {error})"),
    }
}
