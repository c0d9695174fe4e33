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

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

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

/// Runs `hooks`, one per shard, at once, and answers the shards whose hook finished within
/// `bound`, in the order given.
pub(crate) async fn finished_within(hooks: Vec<(u32, HookFuture)>, bound: Duration) -> Vec<u32> {
    let mut running = tokio::task::JoinSet::new();
    for (shard, hook) in hooks {
        running.spawn(async move {
            hook.await;
            shard
        });
    }
    let mut finished = Vec::new();
    let deadline = tokio::time::Instant::now() + bound;
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, running.join_next()).await {
        if let Ok(shard) = joined {
            finished.push(shard);
        }
    }
    // What did not finish goes on in the background: a hook is the embedder's to end.
    running.detach_all();
    finished.sort_unstable();
    finished
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P17.1: hooks run at once, and only those done within the bound are answered.
    #[tokio::test(start_paused = true)]
    async fn p17_1_hooks_run_together_within_their_bound() {
        let started = tokio::time::Instant::now();
        let hooks: Vec<(u32, HookFuture)> = vec![
            (3, Box::pin(tokio::time::sleep(Duration::from_millis(200)))),
            (1, Box::pin(tokio::time::sleep(Duration::from_millis(300)))),
            (2, Box::pin(tokio::time::sleep(Duration::from_secs(10)))),
        ];
        let finished = finished_within(hooks, Duration::from_secs(1)).await;
        assert_eq!(finished, vec![1, 3]);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "waited for the bound"
        );
        let quick: Vec<(u32, HookFuture)> =
            vec![(5, Box::pin(tokio::time::sleep(Duration::from_millis(50))))];
        let started = tokio::time::Instant::now();
        assert_eq!(
            finished_within(quick, Duration::from_secs(1)).await,
            vec![5]
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(50),
            "no longer than the hooks"
        );
    }
}
