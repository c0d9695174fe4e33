//! Renewals: answered from the leader's memory after a confirmation round where the protocol
//! allows it (from cluster version 9, [`from_memory`], PROTOCOL P6.5 to P6.7), otherwise group
//! committed: every renewal that arrives while the previous batch is being committed goes into
//! the next single `Renew` entry, held open a few milliseconds more for a fleet ([`window`]). No
//! renewal through the log is answered before the entry carrying it is committed and applied.

pub mod confirmation;
pub mod from_memory;
pub mod memory;
mod window;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use window::{ArrivalWindow, TARGET_BATCH};

use crate::clock::LeaderClock;
use crate::lease::answer::Renewed;
use crate::lease::{Answer, Command, RefusalReason, RenewResult, Renewal};
use crate::proposer::{ProposeError, Proposer};

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
    let started = Instant::now();
    let elapsed_us = || u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    let mut arrivals = ArrivalWindow::default();
    loop {
        tokio::select! {
            received = pending.recv_many(&mut batch, MAX_RENEWALS_PER_ENTRY) => if received == 0 { return },
            _ = shutdown.changed() => return,
        }
        let now_us = elapsed_us();
        for queued in &batch {
            arrivals.arrived(now_us, &queued.renewal.executor_id);
        }
        if let Some(hold_us) = arrivals.hold_us(now_us, batch.len()) {
            let deadline = Instant::now() + Duration::from_micros(hold_us);
            while batch.len() < TARGET_BATCH {
                let before = batch.len();
                tokio::select! {
                    // A closed queue still gets its batch proposed.
                    received = pending.recv_many(&mut batch, MAX_RENEWALS_PER_ENTRY - before) => if received == 0 { break },
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = shutdown.changed() => return,
                }
                let now_us = elapsed_us();
                for queued in &batch[before..] {
                    arrivals.arrived(now_us, &queued.renewal.executor_id);
                }
            }
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
