//! Warm handoffs (PROTOCOL P17.1): what an embedder does before a shard arrives and after one
//! leaves, each bounded, so a slow hook delays a handoff but never holds one up for good.
//!
//! - **prepare**: the leader is about to hand `shard` to this executor at `epoch` (`POST
//!   /v1/prepare`, before it revokes the shard from its holder). Warm up: load a cache, replay a
//!   log. Nothing may be admitted because of it: the shard is this executor's only once a set
//!   grants it (P3.3), and a plan that changed meanwhile may give it elsewhere after all.
//! - **release**: this executor stopped admitting `shard` (a revoke). Flush what it holds; the
//!   revoke is answered released once every release finished, or after `release_timeout`.
//!   Admission stopped before, so the lease still bounds safety whatever a hook does (P5.2).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// What a hook returns: it is awaited, within its bound.
pub type HookFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// An embedder's handoff hooks (P17.1). Both default to nothing.
pub trait HandoffHooks: Send + Sync + fmt::Debug + 'static {
    /// `shard` is about to be handed to this executor at `epoch`: warm up for it.
    fn prepare(&self, shard: u32, epoch: u64) -> HookFuture {
        let _ = (shard, epoch);
        Box::pin(std::future::ready(()))
    }

    /// This executor stopped admitting `shard`: flush its work before the revoke is answered.
    fn release(&self, shard: u32) -> HookFuture {
        let _ = shard;
        Box::pin(std::future::ready(()))
    }
}

/// The hooks an executor runs ([`crate::ExecutorConfig::handoff_hooks`]). Compared by identity.
#[derive(Clone)]
pub struct Hooks(pub Arc<dyn HandoffHooks>);

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for Hooks {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Hooks {}

/// Hooks that only take time: the binary's stand-in for a service's warm-up and flush
/// (`--prepare-delay`, `--release-delay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayHooks {
    pub prepare: Duration,
    pub release: Duration,
}

impl HandoffHooks for DelayHooks {
    fn prepare(&self, _shard: u32, _epoch: u64) -> HookFuture {
        Box::pin(tokio::time::sleep(self.prepare))
    }

    fn release(&self, _shard: u32) -> HookFuture {
        Box::pin(tokio::time::sleep(self.release))
    }
}

/// One call of a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HookCall {
    Prepare { shard: u32, epoch: u64 },
    Release { shard: u32 },
}

impl HookCall {
    fn shard(self) -> u32 {
        match self {
            HookCall::Prepare { shard, .. } | HookCall::Release { shard } => shard,
        }
    }
}

/// The embedder's hooks and the calls of them still running. A call made again while its hook
/// runs (a new leader's prepare, a resent revoke) waits for that run instead of starting another,
/// so a hook that never finishes runs once, not once per resend: what runs is bounded by the
/// shards, not by the requests.
#[derive(Debug, Clone)]
pub(crate) struct HookRunner {
    hooks: Hooks,
    running: Arc<RunningCalls>,
}

/// Each running call, and what says it finished (`true`).
type RunningCalls = Mutex<HashMap<HookCall, watch::Receiver<bool>>>;

fn lock(running: &RunningCalls) -> MutexGuard<'_, HashMap<HookCall, watch::Receiver<bool>>> {
    // No section panics midway; a poisoned lock still guards a consistent map.
    running.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HookRunner {
    pub(crate) fn new(hooks: Hooks) -> Self {
        Self {
            hooks,
            running: Arc::default(),
        }
    }

    fn running(&self) -> MutexGuard<'_, HashMap<HookCall, watch::Receiver<bool>>> {
        lock(&self.running)
    }

    /// Runs `calls` at once (joining those already running) and answers the shards whose call
    /// finished within `bound`, ascending. What did not finish goes on in the background: a hook
    /// is the embedder's to end.
    pub(crate) async fn finished_within(&self, calls: &[HookCall], bound: Duration) -> Vec<u32> {
        let deadline = tokio::time::Instant::now() + bound;
        let waits: Vec<(u32, watch::Receiver<bool>)> = calls
            .iter()
            .map(|&call| (call.shard(), self.start_or_join(call)))
            .collect();
        let mut finished = Vec::new();
        for (shard, mut done) in waits {
            let waited = tokio::time::timeout_at(deadline, done.wait_for(|done| *done)).await;
            if matches!(waited, Ok(Ok(_))) {
                finished.push(shard);
            }
        }
        finished.sort_unstable();
        finished
    }

    fn start_or_join(&self, call: HookCall) -> watch::Receiver<bool> {
        let (finished_tx, finished) = {
            let mut running = self.running();
            if let Some(done) = running.get(&call) {
                return done.clone();
            }
            let (finished_tx, finished) = watch::channel(false);
            running.insert(call, finished.clone());
            (finished_tx, finished)
        };
        // Made outside the lock: the embedder's code.
        let hook = match call {
            HookCall::Prepare { shard, epoch } => self.hooks.0.prepare(shard, epoch),
            HookCall::Release { shard } => self.hooks.0.release(shard),
        };
        let ended = Ended {
            running: Arc::clone(&self.running),
            call,
        };
        tokio::spawn(async move {
            hook.await;
            // Forgotten first, so a call made after this sees it finished or starts anew.
            drop(ended);
            let _ = finished_tx.send(true);
        });
        finished
    }
}

/// Forgets a call once its hook ended, or its task did (a panicking hook included).
struct Ended {
    running: Arc<RunningCalls>,
    call: HookCall,
}

impl Drop for Ended {
    fn drop(&mut self) {
        lock(&self.running).remove(&self.call);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Prepares that sleep: shard 2's never ends within a test. Counts the hooks started.
    #[derive(Debug, Default)]
    struct Sleepy {
        started: AtomicU32,
    }

    impl HandoffHooks for Sleepy {
        fn prepare(&self, shard: u32, _epoch: u64) -> HookFuture {
            self.started.fetch_add(1, Ordering::SeqCst);
            let took = match shard {
                3 => Duration::from_millis(200),
                1 => Duration::from_millis(300),
                5 => Duration::from_millis(50),
                _ => Duration::from_secs(3_600),
            };
            Box::pin(tokio::time::sleep(took))
        }
    }

    fn prepares(shards: &[u32]) -> Vec<HookCall> {
        shards
            .iter()
            .map(|&shard| HookCall::Prepare { shard, epoch: 1 })
            .collect()
    }

    /// P17.1: hooks run at once, and only those done within the bound are answered.
    #[tokio::test(start_paused = true)]
    async fn p17_1_hooks_run_together_within_their_bound() {
        let runner = HookRunner::new(Hooks(Arc::new(Sleepy::default())));
        let started = tokio::time::Instant::now();
        let finished = runner
            .finished_within(&prepares(&[3, 1, 2]), Duration::from_secs(1))
            .await;
        assert_eq!(finished, vec![1, 3]);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "waited for the bound"
        );
        let started = tokio::time::Instant::now();
        assert_eq!(
            runner
                .finished_within(&prepares(&[5]), Duration::from_secs(1))
                .await,
            vec![5]
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(50),
            "no longer than the hooks"
        );
    }

    /// P17.1: a call made again while its hook runs joins that run, so a hook that never ends is
    /// started once however often it is asked for; a finished one runs again when asked again.
    #[tokio::test(start_paused = true)]
    async fn p17_1_a_call_made_again_joins_the_running_hook() {
        let hooks = Arc::new(Sleepy::default());
        let runner = HookRunner::new(Hooks(Arc::clone(&hooks) as Arc<dyn HandoffHooks>));
        for _ in 0..5 {
            let finished = runner
                .finished_within(&prepares(&[2]), Duration::from_millis(100))
                .await;
            assert!(finished.is_empty());
        }
        assert_eq!(hooks.started.load(Ordering::SeqCst), 1, "one run, joined");
        assert_eq!(runner.running().len(), 1);
        let twice = runner
            .finished_within(&prepares(&[5, 5]), Duration::from_secs(1))
            .await;
        assert_eq!(twice, vec![5, 5]);
        assert_eq!(hooks.started.load(Ordering::SeqCst), 2, "5 ran once");
        runner
            .finished_within(&prepares(&[5]), Duration::from_secs(1))
            .await;
        assert_eq!(
            hooks.started.load(Ordering::SeqCst),
            3,
            "finished: runs again"
        );
        assert_eq!(runner.running().len(), 1, "only shard 2's still runs");
    }
}
