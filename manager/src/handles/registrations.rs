//! Group commit of registrations (from cluster version 12): every registration that arrives while
//! the previous batch is being committed goes into the next single `RegisterMany` entry, so a
//! fleet starting at once costs a few dozen log appends and flushes, not one per executor. No
//! registration is answered before the entry carrying it is committed and applied, and each is
//! answered as a `Register` of it alone would have been.
//!
//! Below cluster version 12 a replica of an older release could not apply the entry, so the
//! register handler proposes each registration on its own, as earlier releases did.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::handles::clock::LeaderClock;
use crate::handles::proposer::{ProposeError, Proposer};
use crate::lease::answer::RegisteredMany;
use crate::lease::{Answer, Command, RefusalReason, RegisterResult, Registration};

/// Registrations waiting for a batch; a full queue makes register handlers wait
/// (back-pressure).
pub const REGISTRATION_QUEUE_CAPACITY: usize = 4096;
/// Upper bound on registrations in one Raft entry, which bounds the entry's size: a registration
/// is a few hundred bytes, at most about 4 KB with every field at its limit, so an entry stays
/// under about a megabyte.
pub const MAX_REGISTRATIONS_PER_ENTRY: usize = 256;

/// Why a queued registration got no result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegisterError {
    #[error(transparent)]
    Propose(#[from] ProposeError),
    /// The whole entry was refused (not initialised, say); each registration's own refusal is a
    /// [`RegisterResult::Refused`] instead.
    #[error("registration refused: {0:?}")]
    Refused(RefusalReason),
    #[error("unexpected outcome for a registration batch: {0}")]
    Unexpected(String),
    #[error("the registration batcher has stopped")]
    Stopped,
}

#[derive(Debug)]
pub struct PendingRegistration {
    registration: Registration,
    reply: oneshot::Sender<Result<RegisterResult, RegisterError>>,
}

pub type RegistrationQueue = mpsc::Sender<PendingRegistration>;

pub fn queue() -> (RegistrationQueue, mpsc::Receiver<PendingRegistration>) {
    mpsc::channel(REGISTRATION_QUEUE_CAPACITY)
}

/// Queues one registration and waits for the result of the entry that carried it.
pub async fn register(
    queue: &RegistrationQueue,
    registration: Registration,
) -> Result<RegisterResult, RegisterError> {
    let (reply, result) = oneshot::channel();
    queue
        .send(PendingRegistration {
            registration,
            reply,
        })
        .await
        .map_err(|_| RegisterError::Stopped)?;
    result.await.map_err(|_| RegisterError::Stopped)?
}

/// Drains the queue in batches until shutdown: each batch one `RegisterMany` stamped by the
/// leader's clock, holding everything that arrived while the previous one was committed.
pub async fn run_batcher(
    proposer: Proposer,
    clock: Arc<LeaderClock>,
    mut pending: mpsc::Receiver<PendingRegistration>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut batch = Vec::with_capacity(MAX_REGISTRATIONS_PER_ENTRY);
    loop {
        tokio::select! {
            received = pending.recv_many(&mut batch, MAX_REGISTRATIONS_PER_ENTRY) => if received == 0 { return },
            _ = shutdown.changed() => return,
        }
        metrics::histogram!("leasehold_registration_batch_size").record(batch.len() as f64);
        let (registrations, replies): (Vec<Registration>, Vec<_>) = batch
            .drain(..)
            .map(|pending| (pending.registration, pending.reply))
            .unzip();
        let results = commit(&proposer, &clock, registrations).await;
        for (reply, result) in replies.into_iter().zip(results) {
            // The handler may have given up (client gone); the result is simply dropped then.
            let _ = reply.send(result);
        }
    }
}

/// Proposes one batch and answers each registration of it, in order.
async fn commit(
    proposer: &Proposer,
    clock: &LeaderClock,
    registrations: Vec<Registration>,
) -> Vec<Result<RegisterResult, RegisterError>> {
    let count = registrations.len();
    let command = Command::RegisterMany {
        now_ms: clock.now_ms(),
        registrations,
    };
    match proposer.propose_as::<RegisteredMany>(command).await {
        Ok((_, Answer::Done(RegisteredMany { results }))) if results.len() == count => {
            results.into_iter().map(Ok).collect()
        }
        Ok((_, Answer::Done(RegisteredMany { results }))) => {
            let unexpected = format!("{} results for {count} registrations", results.len());
            vec![Err(RegisterError::Unexpected(unexpected)); count]
        }
        Ok((_, Answer::Refused(reason))) => vec![Err(RegisterError::Refused(reason)); count],
        Err(error) => vec![Err(RegisterError::Propose(error)); count],
    }
}
