//! One thread per replica, at the lowest CPU priority, for encoding snapshots.
//!
//! Encoding a large state is hundreds of milliseconds of CPU (0.1–0.5 s for a million shards on
//! a loaded 2-core machine), and nothing waits on it but the log's purge. At normal priority it
//! takes a core from the appends, replication and replies that renewals wait on. At the lowest
//! priority the kernel gives it the CPU the latency path leaves idle.
//!
//! Only work that holds no lock another thread waits on belongs here: a starved low-priority
//! thread holding a sled reservation would stall every append behind it (priority inversion).
//! Encoding reads a private copy of the state and nothing else.

use std::io;

use thread_priority::{
    set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadPriority,
    ThreadSchedulePolicy,
};
use tokio::sync::{mpsc, oneshot};

/// Jobs waiting for the thread. openraft builds one snapshot at a time, so one is the most
/// ever queued; a full queue makes the sender wait.
const QUEUED_JOBS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

/// The sending side of the background thread; the thread ends when every clone is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Background {
    jobs: mpsc::Sender<Job>,
}

/// The background thread stopped (a job panicked), so the work was not done.
#[derive(Debug, thiserror::Error)]
#[error("the replica's background thread stopped")]
pub(crate) struct Stopped;

impl Background {
    /// Starts the thread. If the kernel refuses to lower its priority, it runs at normal
    /// priority and says so once.
    pub(crate) fn start() -> io::Result<Self> {
        let (jobs, mut queued) = mpsc::channel::<Job>(QUEUED_JOBS);
        std::thread::Builder::new()
            .name("snapshot-encoder".to_owned())
            .spawn(move || {
                lower_own_priority();
                while let Some(job) = queued.blocking_recv() {
                    job();
                }
            })?;
        Ok(Self { jobs })
    }

    /// Runs `work` on the background thread and returns its result.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, Stopped> {
        let (done, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(work());
        });
        self.jobs.send(job).await.map_err(|_| Stopped)?;
        result.await.map_err(|_| Stopped)
    }
}

/// The lowest priority a thread can have and still run when the machine is busy: SCHED_BATCH at
/// nice 19 (SCHED_IDLE could starve it outright on a saturated machine, and the log's purge
/// waits for the snapshot).
fn lower_own_priority() {
    let lowered = set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch),
    );
    if let Err(error) = lowered {
        tracing::warn!(
            ?error,
            "snapshot encoding runs at normal priority: the kernel refused to lower it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_the_background_thread_and_returns_its_result() {
        let background = Background::start().expect("thread");
        let here = std::thread::current().id();
        let (answer, there) = background
            .run(|| (6 * 7, std::thread::current().id()))
            .await
            .expect("result");
        assert_eq!(answer, 42);
        assert_ne!(there, here);
    }

    /// The calling thread's nice value, from procfs (field 19 of its stat line).
    #[cfg(target_os = "linux")]
    fn own_nice() -> i32 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("procfs");
        let after_name = &stat[stat.rfind(')').expect("stat line") + 1..];
        // The fields after the name start at field 3 (the state).
        let nice = after_name.split_whitespace().nth(19 - 3).expect("nice");
        nice.parse().expect("a number")
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_background_thread_runs_at_the_lowest_priority() {
        let background = Background::start().expect("thread");
        let (policy, nice) = background
            .run(|| {
                (
                    thread_priority::thread_schedule_policy().expect("policy"),
                    own_nice(),
                )
            })
            .await
            .expect("result");
        assert_eq!(
            policy,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch)
        );
        assert_eq!(nice, 19);
    }

    #[tokio::test]
    async fn a_panicking_job_stops_the_thread_and_later_work_is_refused() {
        let background = Background::start().expect("thread");
        let panicked = background.run(|| panic!("encoding failed")).await;
        assert!(panicked.is_err());
        // The thread is gone; a later job is refused rather than left waiting.
        let later = background.run(|| 1).await;
        assert!(later.is_err());
    }
}
