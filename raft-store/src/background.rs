//! One thread per replica, at a low CPU priority, for encoding snapshots.
//!
//! Encoding a large state is hundreds of milliseconds of CPU (0.1–0.5 s for a million shards on
//! a loaded 2-core machine), and nothing waits on it but the log's purge. At normal priority it
//! takes a core from the replication, confirmation rounds and replies that renewals wait on.
//! At a low priority the kernel gives it what the latency path leaves idle, and a share of the
//! CPU when nothing is left idle: the log's purge waits for the snapshot, so an encoder that could
//! be starved on a saturated machine would let the log grow without bound.
//!
//! Only work that holds no lock another thread waits on belongs here: a slowed low-priority
//! thread holding a sled reservation would stall every append behind it (priority inversion).
//! Encoding reads a private copy of the state and nothing else.

use std::io;

use thread_priority::{
    set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadPriority,
    ThreadPriorityValue, ThreadSchedulePolicy,
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

/// The encoder's nice value, under SCHED_BATCH. The kernel shares a saturated core by weight:
/// nice 0 weighs 1024, nice 10 weighs 110 and nice 19 only 15. At nice 19, under 6 500 renewals/s
/// on two cores, a million shards' snapshot did not finish in a minute (docs/BENCHMARKS.md, B8);
/// at nice 10 it keeps about a tenth of a core against each busy thread, so a build finishes in
/// seconds whatever the load, and still yields to every thread at normal priority that wakes.
pub(crate) const ENCODER_NICE: i32 = 10;

/// SCHED_BATCH (no wakeup preemption of the latency path) at [`ENCODER_NICE`]. The thread may
/// raise its nice value without privilege; if the kernel refuses anyway, it runs at normal
/// priority and says so once.
fn lower_own_priority() {
    let policy = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch);
    let lowered = match priority_for_nice(ENCODER_NICE, policy) {
        Some(priority) => set_thread_priority_and_policy(thread_native_id(), priority, policy),
        None => Err(thread_priority::Error::Priority(
            "no priority maps to the encoder's nice value",
        )),
    };
    if let Err(error) = lowered {
        tracing::warn!(
            ?error,
            "snapshot encoding runs at normal priority: the kernel refused to lower it"
        );
    }
}

/// The crate's portable priority that it maps to `nice` under `policy`: the crate spreads its
/// 0–99 scale over the nice range, so the value is found through its own mapping, not restated.
fn priority_for_nice(nice: i32, policy: ThreadSchedulePolicy) -> Option<ThreadPriority> {
    (u8::from(ThreadPriorityValue::MIN)..=u8::from(ThreadPriorityValue::MAX))
        .filter_map(|value| ThreadPriorityValue::try_from(value).ok())
        .map(ThreadPriority::Crossplatform)
        .find(|priority| priority.to_posix(policy).ok() == Some(nice))
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
    async fn the_background_thread_runs_under_sched_batch_at_the_encoders_nice_value() {
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
        assert_eq!(nice, ENCODER_NICE);
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
