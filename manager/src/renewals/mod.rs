//! Renewals: answered from the leader's memory after a confirmation round where the protocol
//! allows it (from cluster version 12, [`from_memory`], PROTOCOL P6.5 to P6.7), otherwise group
//! committed: every renewal that arrives while the previous batch is being committed goes into
//! the next single `Renew` entry, held open a few milliseconds more for a fleet ([`core::window`]). No
//! renewal through the log is answered before the entry carrying it is committed and applied.

pub mod core;
pub mod from_memory;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use self::core::window::{ArrivalWindow, TARGET_BATCH};

use crate::handles::clock::LeaderClock;
use crate::handles::proposer::{ProposeError, Proposer};
use crate::lease::answer::Renewed;
use crate::lease::{Answer, Command, RefusalReason, RenewResult, Renewal};

/// Renewals waiting for a batch; a full queue makes renew handlers wait (back-pressure).
pub const RENEWAL_QUEUE_CAPACITY: usize = 8192;
/// Upper bound on renewals in one Raft entry, which bounds entry size (~100 B per renewal plus
/// its claims).
pub const MAX_RENEWALS_PER_ENTRY: usize = 2048;

/// Why a queued renewal got no result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RenewError {
    #[error(transparent)]
    Propose(#[from] ProposeError),
    #[error("renewal refused: {0:?}")]
    Refused(RefusalReason),
    #[error("unexpected outcome for a renewal batch: {0}")]
    Unexpected(String),
    #[error("the renewal batcher has stopped")]
    Stopped,
}

#[derive(Debug)]
pub struct PendingRenewal {
    renewal: Renewal,
    reply: oneshot::Sender<Result<RenewResult, RenewError>>,
}

pub type RenewalQueue = mpsc::Sender<PendingRenewal>;

fn renewing_executor(queued: &PendingRenewal) -> &str {
    &queued.renewal.executor_id
}

pub fn queue() -> (RenewalQueue, mpsc::Receiver<PendingRenewal>) {
    mpsc::channel(RENEWAL_QUEUE_CAPACITY)
}

/// Queues one renewal and waits for the result of the entry that carried it.
pub async fn renew(queue: &RenewalQueue, renewal: Renewal) -> Result<RenewResult, RenewError> {
    let (reply, result) = oneshot::channel();
    queue
        .send(PendingRenewal { renewal, reply })
        .await
        .map_err(|_| RenewError::Stopped)?;
    result.await.map_err(|_| RenewError::Stopped)?
}

/// Drains the queue in batches until shutdown: each batch one `Renew` command stamped by the
/// leader's clock.
pub async fn run_batcher(
    proposer: Proposer,
    clock: Arc<LeaderClock>,
    mut pending: mpsc::Receiver<PendingRenewal>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut batch = Vec::with_capacity(MAX_RENEWALS_PER_ENTRY);
    let mut gathering = Gathering::default();
    loop {
        if !gathering
            .next(
                &mut pending,
                &mut batch,
                MAX_RENEWALS_PER_ENTRY,
                renewing_executor,
                &mut shutdown,
            )
            .await
        {
            return;
        }
        metrics::histogram!("leasehold_renewal_batch_size").record(batch.len() as f64);
        let (renewals, replies): (Vec<Renewal>, Vec<_>) = batch
            .drain(..)
            .map(|pending| (pending.renewal, pending.reply))
            .unzip();
        let count = renewals.len();
        let command = Command::Renew {
            now_ms: clock.now_ms(),
            renewals,
        };
        let results: Vec<Result<RenewResult, RenewError>> =
            match proposer.propose_as::<Renewed>(command).await {
                Ok((_, Answer::Done(Renewed { results, .. }))) if results.len() == count => {
                    results.into_iter().map(Ok).collect()
                }
                Ok((_, Answer::Done(Renewed { results, .. }))) => {
                    let unexpected = format!("{} results for {count} renewals", results.len());
                    vec![Err(RenewError::Unexpected(unexpected)); count]
                }
                Ok((_, Answer::Refused(reason))) => vec![Err(RenewError::Refused(reason)); count],
                Err(error) => vec![Err(RenewError::Propose(error)); count],
            };
        for (reply, result) in replies.into_iter().zip(results) {
            // The handler may have given up (client gone); the result is simply dropped then.
            let _ = reply.send(result);
        }
    }
}

/// Gathers the next batch from a queue of renewals (or of renewals waiting for a confirmation
/// round), held open for a fleet by the arrival window: everything queued now, then, while
/// renewals from several executors arrive fast enough, more until [`window::TARGET_BATCH`] are
/// in or the window closes.
pub(crate) struct Gathering {
    started: Instant,
    arrivals: ArrivalWindow,
}

impl Default for Gathering {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            arrivals: ArrivalWindow::default(),
        }
    }
}

impl Gathering {
    fn elapsed_us(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Fills `batch` (at most `max`) from `queue`; `false` at shutdown, or when the queue closed
    /// with nothing gathered. A queue that closes while a batch is held open still yields it.
    pub(crate) async fn next<T>(
        &mut self,
        queue: &mut mpsc::Receiver<T>,
        batch: &mut Vec<T>,
        max: usize,
        executor_of: fn(&T) -> &str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        tokio::select! {
            received = queue.recv_many(batch, max) => if received == 0 { return false },
            _ = shutdown.changed() => return false,
        }
        let now_us = self.elapsed_us();
        for queued in batch.iter() {
            self.arrivals.arrived(now_us, executor_of(queued));
        }
        let Some(hold_us) = self.arrivals.hold_us(now_us, batch.len()) else {
            return true;
        };
        let deadline = Instant::now() + Duration::from_micros(hold_us);
        while batch.len() < TARGET_BATCH {
            let before = batch.len();
            tokio::select! {
                received = queue.recv_many(batch, max - before) => if received == 0 { break },
                _ = tokio::time::sleep_until(deadline) => break,
                _ = shutdown.changed() => return false,
            }
            let now_us = self.elapsed_us();
            for queued in &batch[before..] {
                self.arrivals.arrived(now_us, executor_of(queued));
            }
        }
        true
    }
}
