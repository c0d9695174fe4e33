//! CPU-bound work inside async tasks: scans and plans over the whole state, which take tens to
//! hundreds of milliseconds at a million shards.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `work` without holding up the async workers. On a multi-threaded runtime the worker
/// first hands the tasks queued on it to another thread (`block_in_place`), so the renewals,
/// log appends and heartbeats that were queued behind the scan run while it does (a worker
/// busy in a long poll keeps the task it woke last to itself until the poll ends). On a
/// current-thread runtime (unit tests) there is no other worker, and `work` runs inline.
pub fn run<R>(work: impl FnOnce() -> R) -> R {
    match Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_scan_on_the_only_worker_leaves_the_tasks_queued_on_it_running() {
        // The scan runs in a task on the runtime's only worker and waits for a task queued on
        // that same worker, which can run only if the scan handed the worker's queue on.
        let scan = tokio::spawn(async {
            let (queued_ran, ran) = std::sync::mpsc::channel();
            let queued = tokio::spawn(async move {
                let _ = queued_ran.send(());
            });
            let answered = run(|| ran.recv_timeout(std::time::Duration::from_secs(5)));
            queued.await.expect("the queued task");
            answered
        });
        let answered = scan.await.expect("the scanning task");
        assert!(
            answered.is_ok(),
            "the task queued on the scanning worker did not run during the scan"
        );
    }

    #[tokio::test]
    async fn on_a_current_thread_runtime_work_runs_inline() {
        assert_eq!(run(|| 7), 7);
    }
}
