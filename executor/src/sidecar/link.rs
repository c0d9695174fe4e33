//! [`ServiceLink`]: what the service beside the sidecar was told (the pure `ServiceCopy` under a
//! lock), the admission log of the service, and the waits the revoke handler, the renewals and
//! the graceful stop make on it (PROTOCOL P16.2), and the warm handoffs the service prepares
//! for (P17.1).
//!
//! Lock order: this link's lock is taken before the shared state's, never after it, so an
//! admission decision and the telling of it are one step for a revoke that follows.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_api::wire::{LocalPermits, LocalState, ShardEpoch};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tracing::error;

use super::service_copy::{Ack, Chain, NotAcknowledged, PushedAnswer, Recipient, ServiceCopy};
use super::service_prepare::{NotAsked, ServicePrepares};
use crate::admission::{AdmissionEvent, Assignment};
use crate::admission_log::{AdmissionLog, MonotonicReading};
use crate::assignment::Layout;
use crate::shutdown::ShutdownSignal;

/// How long a revoke waits for the service to stop admitting its shards before it is answered
/// with those released so far (P16.2): under the managers' 2 s bound on a revoke reply, so the
/// answer arrives and the rest is sent again.
pub const REVOKE_HOLD: Duration = Duration::from_millis(1_500);

/// What the service was told, shared by the local API, the revoke handler, the graceful stop and
/// the task that ends copies that ran out.
#[derive(Debug)]
pub(crate) struct ServiceLink {
    inner: Mutex<Inner>,
    /// Bumped after every change of the copy, for the waits below.
    changed: watch::Sender<u64>,
}

#[derive(Debug)]
struct Inner {
    copy: ServiceCopy,
    /// The sidecar's `--event-log`: the service's admission (P16.2).
    log: Option<AdmissionLog>,
    prepares: ServicePrepares,
    /// The `prepares` generation the last answer carried.
    prepares_told: u64,
}

impl ServiceLink {
    pub(crate) fn new(log: Option<AdmissionLog>) -> Self {
        Self {
            inner: Mutex::new(Inner {
                copy: ServiceCopy::default(),
                log,
                prepares: ServicePrepares::default(),
                prepares_told: 0,
            }),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No section panics midway; a poisoned lock still guards a consistent copy.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `operation` on the copy under the lock, records its events in the log while still
    /// holding it (a start is written before the service can see the answer that makes it), and
    /// wakes the waits.
    pub(crate) fn update<T>(
        &self,
        operation: impl FnOnce(&mut ServiceCopy, Instant) -> (T, Vec<AdmissionEvent>),
    ) -> T {
        let mut inner = self.lock();
        let (value, events) = operation(&mut inner.copy, Instant::now());
        if !events.is_empty() {
            if let Some(log) = inner.log.as_mut() {
                if let Err(error) = log.record(&events) {
                    error!(%error, path = %log.path().display(), "cannot write the admission log");
                }
            }
            drop(inner);
            self.wake();
        }
        value
    }

    fn wake(&self) {
        self.changed
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// Wakes on every change of what the service was told or asked.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The answer to a poll that `arrived` then, for the sidecar's view at the instant of
    /// answering (`view_at`), with a fresh token, continuing `chain` (the chain of the answer the
    /// poll acknowledged, P16.1).
    pub(crate) fn answer_poll(
        &self,
        view_at: impl FnOnce(Instant) -> Assignment,
        chain: Option<Chain>,
        arrived: Instant,
    ) -> LocalPermits {
        let token = rand::random::<u128>();
        let to = Recipient::Poller {
            token,
            chain,
            arrived,
        };
        self.answer(view_at, to).0
    }

    /// The answer pushed to `--app-url` for the sidecar's view at the instant of answering, and
    /// what its `2xx` acknowledges.
    pub(crate) fn answer_push(
        &self,
        view_at: impl FnOnce(Instant) -> Assignment,
    ) -> (LocalPermits, PushedAnswer) {
        self.answer(view_at, Recipient::Pushed)
    }

    fn answer(
        &self,
        view_at: impl FnOnce(Instant) -> Assignment,
        to: Recipient,
    ) -> (LocalPermits, PushedAnswer) {
        let (mut permits, pushed) = self.update(|copy, now| {
            let (mut permits, pushed, events) = copy.answer(&view_at(now), now, to);
            if permits.lease_ttl_ms > 0 {
                let end = now + Duration::from_millis(permits.lease_ttl_ms);
                // Rounded down: the deadline never outlasts the copy. Unreadable (never on
                // Linux): no deadline, which admits nothing.
                permits.lease_expires_monotonic_ns = MonotonicReading::now()
                    .ok()
                    .map(|reading| reading.ns_no_later_than(end));
            }
            ((permits, pushed), events)
        });
        let mut inner = self.lock();
        if permits.state != LocalState::Stopping {
            permits.preparing = inner.prepares.pending();
        }
        inner.prepares_told = inner.prepares.generation();
        (permits, pushed)
    }

    /// The service prepares shards (P17.1): it said so on a poll, or it is pushed to.
    pub(crate) fn opt_in_prepares(&self) {
        self.lock().prepares.opt_in();
    }

    /// Whether the shards the service is asked to prepare changed since the last answer.
    pub(crate) fn prepares_untold(&self) -> bool {
        let inner = self.lock();
        inner.prepares.generation() != inner.prepares_told
    }

    /// The service prepared `shard` for `epoch` (P17.1).
    pub(crate) fn service_prepared(&self, shard: u32, epoch: u64) -> Result<(), NotAsked> {
        self.lock().prepares.prepared(shard, epoch)?;
        self.wake();
        Ok(())
    }

    /// The service applied an answer that asked it to prepare `told` (P17.1).
    pub(crate) fn service_prepared_all(&self, told: &[ShardEpoch]) {
        if told.is_empty() {
            return;
        }
        self.lock().prepares.prepared_all(told);
        self.wake();
    }

    /// Asks the service to prepare `shards` and waits (at most `wait`) until it prepared them
    /// all; answers those it prepared (P17.1). `None` at once when the service does not prepare.
    pub(crate) async fn prepared(&self, shards: &[ShardEpoch], wait: Duration) -> Option<Vec<u32>> {
        if !self.lock().prepares.ask(shards) {
            return None;
        }
        // Finished however this ends, the request dropped midway included, so a shard is not
        // asked for ever.
        let _finish = FinishOnDrop { link: self, shards };
        self.wake();
        let done = self
            .wait_until(Instant::now() + wait, |inner| {
                let done = inner.prepares.done(shards);
                let all = done.len() == shards.len();
                (done, all)
            })
            .await;
        Some(done)
    }

    /// Reads `look` under the lock at once and after every change, until it says it is done or
    /// `deadline` passed; answers the last reading.
    async fn wait_until<T>(&self, deadline: Instant, look: impl Fn(&Inner) -> (T, bool)) -> T {
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            let (reading, done) = look(&self.lock());
            if done || Instant::now() >= deadline {
                return reading;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return reading },
                () = sleep_until(deadline) => {}
            }
        }
    }

    /// A poll acknowledged `ack` (P16.1): counted only when its token is that of an answer this
    /// sidecar gave, with that answer's revision and state. Answers the chain the poll continues.
    pub(crate) fn acknowledge(&self, ack: Ack) -> Result<Chain, NotAcknowledged> {
        self.update(|copy, now| match copy.acknowledge(ack, now) {
            Ok((chain, events)) => (Ok(chain), events),
            Err(refused) => (Err(refused), Vec::new()),
        })
    }

    /// The service pushed to acknowledged `pushed` with a `2xx` (P16.1).
    pub(crate) fn acknowledge_push(&self, pushed: PushedAnswer) {
        self.update(|copy, now| ((), copy.acknowledge_push(pushed, now)));
    }

    /// When the copy the service holds runs out.
    pub(crate) fn copy_end(&self) -> Option<Instant> {
        self.lock().copy.copy_end()
    }

    /// When the copy the poller of `chain` holds runs out, counted from its poll's arrival
    /// (`ServiceCopy::poller_copy_end`).
    pub(crate) fn poller_copy_end(&self, chain: Option<Chain>) -> Option<Instant> {
        self.lock().copy.poller_copy_end(chain)
    }

    /// Adds to a renewal's `claims`, numbered in `layout` (the sidecar's, read with them), every
    /// shard the service may still be admitting a key of (P16.2, §20): a renewal that omits a
    /// revoked shard acknowledges the revoke (P5.2), which must wait for the service as the
    /// revoke's reply does. A claim already there keeps its epoch.
    pub(crate) fn claim_told(&self, claims: &mut Vec<ShardEpoch>, layout: Layout) {
        let told = self.lock().copy.told(layout);
        let missing: Vec<ShardEpoch> = told
            .into_iter()
            .filter(|told| {
                claims
                    .binary_search_by_key(&told.shard, |c| c.shard)
                    .is_err()
            })
            .collect();
        if !missing.is_empty() {
            claims.extend(missing);
            claims.sort_unstable_by_key(|claim| claim.shard);
        }
    }

    /// Waits (at most `hold`) until the service no longer admits any key of `shards` (numbered in
    /// `layout`, the revoke's); answers those it no longer admits (P16.2, §20).
    pub(crate) async fn released(
        &self,
        shards: &[u32],
        layout: Layout,
        hold: Duration,
    ) -> Vec<u32> {
        self.wait_until(Instant::now() + hold, |inner| {
            let released: Vec<u32> = shards
                .iter()
                .copied()
                .filter(|&shard| !inner.copy.is_told(shard, layout))
                .collect();
            let all = released.len() == shards.len();
            (released, all)
        })
        .await
    }

    /// Waits until the service admits nothing, or until `deadline`; whether it does not (P3.7
    /// through the service: deregistering hands every shard on at once).
    pub(crate) async fn stopped_by(&self, deadline: Instant) -> bool {
        self.wait_until(deadline, |inner| {
            let stopped = inner.copy.is_empty();
            (stopped, stopped)
        })
        .await
    }

    /// The sidecar exits (PROTOCOL P16.2): every shard the service may still be admitting is
    /// logged as stopped at the end of the last copy given for it, since nothing will be logged
    /// later. Answers how many, and when the last of those copies runs out.
    pub(crate) fn end_at_exit(&self) -> Option<(usize, Instant)> {
        self.update(|copy, _| {
            let events = copy.end_at_exit();
            let last_end = events.iter().map(|event| event.at).max();
            (last_end.map(|at| (events.len(), at)), events)
        })
    }

    /// The shards of `layout` the service may still be admitting a key of, with their epochs,
    /// ascending.
    pub(crate) fn told(&self, layout: Layout) -> Vec<ShardEpoch> {
        self.lock().copy.told(layout)
    }

    /// Ends each copy at its end, so the log shows the stop and the waits above wake, until
    /// `shutdown` fires.
    pub(crate) async fn end_copies(&self, mut shutdown: ShutdownSignal) {
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            let next_end = self.lock().copy.next_end();
            tokio::select! {
                () = sleep_until(next_end.unwrap_or_else(Instant::now)), if next_end.is_some() => {
                    self.update(|copy, now| ((), copy.expire(now)));
                }
                changed = changes.changed() => if changed.is_err() { return },
                () = shutdown.wait() => return,
            }
        }
    }
}

/// Ends a prepare request's wait in the link (`ServiceLink::prepared`).
struct FinishOnDrop<'a> {
    link: &'a ServiceLink,
    shards: &'a [ShardEpoch],
}

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        self.link.lock().prepares.finish(self.shards);
        self.link.wake();
    }
}
