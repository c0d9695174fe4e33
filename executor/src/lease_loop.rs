//! The lease's background work: the loop that registers and renews (P3.5, P4.4), the graceful
//! stop it ends with (the self-drain of P17.2, then P3.7), and the lapse watcher (P3.6).
//!
//! Which call comes next and what its answer does is the pure [`LeaseCalls`] in
//! [`crate::lease_calls`], which the simulator steps too. This module is the tokio shell around
//! it: it makes the calls, logs, counts and sleeps.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::client::ClientError;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{Grant, RegisterRequest};
use tokio::time::{sleep_until, timeout_at, Instant};
use tracing::{debug, error, info, warn};

use crate::admission::{AdmissionState, AppliedMark, Assignment, ForeignGrant, GrantApplied};
use crate::assignment::SetOutcome;
use crate::lease::{grant_attempt_timeout, CallOutcome, LeaseClock, NextCall};
use crate::lease_calls::{CallKind, GrantTaken, LeaseCalls, LeaseHolder};
use crate::manager::ManagerApi;
use crate::metrics::{count_disowned_push, count_lease_call, count_self_drain};
use crate::self_drain::{
    after_drain, drain_deadline, AfterDrain, DrainProgress, DrainWait, StillHeld, DRAIN_STALL,
};
use crate::shared::{DueRenewal, Shared};
use crate::shutdown::ShutdownSignal;
use crate::status::RunState;

/// The lease loop: register, then renew after a third of the remaining lease, back off on
/// failure, re-register after `unknown_executor` (P3.5, P4.4). Ends when `shutdown` fires,
/// after the graceful stop (the self-drain of P17.2, during which it goes on renewing, then
/// P3.7), or when registration is hopeless.
pub(crate) async fn run_lease_loop<M: ManagerApi>(
    shared: Arc<Shared>,
    manager: Arc<M>,
    mut shutdown: ShutdownSignal,
    shutdown_grace: Duration,
) -> RunState {
    let lease = lease_loop(&shared, manager.as_ref());
    tokio::pin!(lease);
    let state = tokio::select! {
        state = &mut lease => state,
        () = shutdown.wait() => RunState::Stopped,
    };
    match state {
        RunState::Stopped | RunState::Running => {
            let stop_began = Instant::now();
            let deadline = stop_began + shutdown_grace;
            tokio::select! {
                // Registration turned hopeless while draining: nothing more to wait for.
                _ = &mut lease => {}
                () = drain_self(&shared, manager.as_ref(), drain_deadline(stop_began, shutdown_grace)) => {}
            }
            stop_gracefully(&shared, manager.as_ref(), deadline, shutdown_grace).await;
        }
        // No registration stands, so nothing to hand back; just make sure nothing is admitted.
        RunState::Failed(_) => shared.stop_admission(),
    }
    state
}

/// Register and renew forever; returns only when registration is hopeless. Every wait is
/// bounded by the backoff or the renewal schedule, and the whole loop is cancelled by dropping
/// it (the caller selects on shutdown). The order of each call is [`LeaseCalls`]'s.
async fn lease_loop<M: ManagerApi>(shared: &Shared, manager: &M) -> RunState {
    let mut calls = LeaseCalls::default();
    let mut next_call_at = Instant::now();
    loop {
        sleep_until(next_call_at).await;
        let mut holder = SharedHolder {
            shared,
            cluster_version: manager.cluster_version(),
        };
        let call = calls.next_call(&mut holder, Instant::now());
        let (result, name) = match &call.kind {
            CallKind::Register(request) => (manager.register(request).await, "register"),
            CallKind::Renew(due) => (
                manager
                    .renew(
                        &due.executor_id,
                        &due.credential,
                        &due.request,
                        grant_attempt_timeout(shared.lease().last_lease_ttl()),
                    )
                    .await,
                "renew",
            ),
        };
        count_lease_call(
            name,
            match &result {
                Ok(_) => "granted",
                Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => {
                    "unknown_executor"
                }
                Err(_) => "failed",
            },
        );
        let now = Instant::now();
        let next = match (&result, &call.kind) {
            (Ok(grant), kind) => {
                let (taken, next) = calls.granted(&mut holder, &call, grant, now);
                let what = match kind {
                    CallKind::Register(_) => "registered",
                    CallKind::Renew(_) => "renewed",
                };
                log_grant(grant, &taken, what);
                next
            }
            (Err(error), CallKind::Register(_)) => {
                let next = calls.failed(&mut holder, CallOutcome::of_register_error(error), now);
                log_register_failure(error, &next, now);
                next
            }
            (Err(error), CallKind::Renew(due)) => {
                let lease = shared.lease();
                let next = calls.failed(&mut holder, CallOutcome::of_renew_error(error), now);
                log_renew_failure(error, &due.executor_id, &lease, &next, now);
                next
            }
        };
        next_call_at = match next {
            NextCall::CallAt(at) => at,
            NextCall::Reregister => Instant::now(),
            NextCall::GiveUp(reason) => return RunState::Failed(reason),
        };
    }
}

/// The shared state as the lease loop's [`LeaseHolder`].
struct SharedHolder<'a> {
    shared: &'a Shared,
    /// The cluster version the managers stated: which fields renewals carry (the loads of
    /// P15.1, the ready secondaries of P19.3).
    cluster_version: u32,
}

impl LeaseHolder for SharedHolder<'_> {
    type Renewal = DueRenewal;

    fn renewal(&mut self) -> Option<DueRenewal> {
        self.shared.renewal(self.cluster_version)
    }

    fn register_request(&mut self) -> RegisterRequest {
        self.shared.register_request(true)
    }

    fn applied_mark(&self) -> AppliedMark {
        self.shared.applied_mark()
    }

    fn apply_grant_after(
        &mut self,
        sent_at: Instant,
        mark: AppliedMark,
        grant: &Grant,
    ) -> Result<GrantApplied, ForeignGrant> {
        self.shared.apply_grant_after(sent_at, mark, grant)
    }

    fn renewal_granted(&mut self, renewal: &DueRenewal) {
        self.shared.renewal_granted(renewal);
    }

    fn forget_executor(&mut self) {
        self.shared.forget_executor();
    }

    fn lease(&self) -> LeaseClock {
        self.shared.lease()
    }
}

fn log_register_failure(error: &ClientError, next: &NextCall, now: Instant) {
    match next {
        NextCall::GiveUp(_) => {
            error!(%error, "the manager refused the registration; giving up");
        }
        NextCall::CallAt(at) => {
            warn!(%error, retry_in_ms = millis(at.saturating_duration_since(now)), "registration failed; retrying");
        }
        NextCall::Reregister => {}
    }
}

fn log_renew_failure(
    error: &ClientError,
    executor_id: &str,
    lease: &LeaseClock,
    next: &NextCall,
    now: Instant,
) {
    match next {
        NextCall::Reregister => {
            warn!(%executor_id, "the manager no longer knows this executor (reaped or removed): stopping all admission and registering anew");
        }
        NextCall::CallAt(at) => {
            warn!(%error, %executor_id, lease_remaining_ms = millis(lease.remaining(now)), retry_in_ms = millis(at.saturating_duration_since(now)), "renewal failed; retrying before the lease ends (P3.5)");
        }
        NextCall::GiveUp(_) => {}
    }
}

/// Logs what a grant did.
fn log_grant(grant: &Grant, taken: &GrantTaken, what: &str) {
    let applied = match taken {
        GrantTaken::Applied(applied) => applied,
        GrantTaken::Foreign(error) => {
            warn!(%error, "{what}: ignoring a grant for another executor");
            return;
        }
    };
    if what == "registered" {
        info!(executor_id = %grant.executor_id, lease_ttl_ms = grant.lease_ttl_ms, shards = grant.shards.len(), "registered");
    }
    if let Some(disowned) = applied.disowned {
        count_disowned_push();
        error!(
            executor_id = %grant.executor_id,
            applied_revision = disowned.sent_revision,
            grant_revision = disowned.grant_revision,
            gap = disowned.sent_revision.saturating_sub(disowned.grant_revision),
            "{what}: the grant's revision is below the revision applied when the request was \
             sent, which no manager of this cluster can answer: the set applied at that revision \
             came from elsewhere (a push from a node that is not a member?); adopted the grant's \
             set and revision instead (P4.1, P13.3)"
        );
    }
    match &applied.set {
        Ok(SetOutcome::Applied {
            dropped,
            gained,
            secondaries_dropped,
            secondaries_gained,
        }) if !dropped.is_empty()
            || !gained.is_empty()
            || !secondaries_dropped.is_empty()
            || !secondaries_gained.is_empty() =>
        {
            info!(
                executor_id = %grant.executor_id,
                revision = grant.revision,
                dropped = dropped.len(),
                gained = gained.len(),
                secondaries_dropped = secondaries_dropped.len(),
                secondaries_gained = secondaries_gained.len(),
                "{what}: set changed (P4.2)"
            );
        }
        Ok(SetOutcome::Stale {
            revision,
            applied_revision,
        }) => debug!(
            revision,
            applied_revision,
            "{what}: set older than the last delivery; lease moved, set kept (P3.3)"
        ),
        Ok(SetOutcome::Applied { .. }) => {}
        Err(error) => warn!(%error, "{what}: malformed set ignored; lease moved"),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// P17.2: the stop begins with a drain the executor asks for itself, with its credential; it
/// goes on renewing and admitting (the caller keeps the lease loop running) while the leader
/// moves each shard away through the handoff of P5.2, and returns once it holds nothing, by
/// `deadline`, or at once when the drain cannot help (not registered, nothing held, no other
/// executor to take the shards, or managers that refuse it, as releases before P17.2 do).
async fn drain_self<M: ManagerApi>(shared: &Shared, manager: &M, deadline: Instant) {
    let mut assignment = shared.subscribe_assignment();
    let (executor_id, held) = {
        let view = assignment.borrow_and_update();
        (view.executor_id.clone(), view.shards.len())
    };
    let Some(executor_id) = executor_id else {
        return;
    };
    if held == 0 {
        return;
    }
    if !ask_to_drain(shared, manager, &executor_id, held, deadline).await {
        return;
    }
    let ended = await_handoffs(shared, &mut assignment, &executor_id, held, deadline).await;
    let left = StillHeld::of(
        &shared.view_at(Instant::now()).shards,
        &told_by_service(shared),
    );
    report_drain_end(ended, &executor_id, &left);
}

/// Asks the managers to drain this executor (P17.2); whether its shards will be handed over,
/// or (refused, not committed within the grace, or nobody to take them) admission stops at once
/// (P3.7).
async fn ask_to_drain<M: ManagerApi>(
    shared: &Shared,
    manager: &M,
    executor_id: &str,
    held: usize,
    deadline: Instant,
) -> bool {
    let executors = match timeout_at(
        deadline,
        manager.drain_self(executor_id, &shared.credential()),
    )
    .await
    {
        Ok(Ok(executors)) => executors,
        Ok(Err(error)) => {
            count_self_drain("refused");
            warn!(%error, %executor_id, "the managers did not drain this executor; stopping admission at once (P3.7)");
            return false;
        }
        Err(_) => {
            count_self_drain("timed_out");
            warn!(%executor_id, "the drain was not committed within the grace; stopping admission at once (P3.7)");
            return false;
        }
    };
    match after_drain(executor_id, &executors) {
        AfterDrain::NoTaker => {
            count_self_drain("no_taker");
            info!(%executor_id, held, "draining: no other executor can take the shards; stopping admission at once (P3.7)");
            return false;
        }
        AfterDrain::AwaitHandoffs { takers } => {
            info!(%executor_id, held, takers, "draining: each shard is admitted until its handoff completes (P17.2)");
        }
    }
    true
}

/// Waits until every shard held at the drain's start has been handed over, or the drain ends
/// otherwise.
async fn await_handoffs(
    shared: &Shared,
    assignment: &mut tokio::sync::watch::Receiver<Assignment>,
    executor_id: &str,
    held: usize,
    deadline: Instant,
) -> DrainEnd {
    // A revoke drops a shard from the held set once it stopped admitting it (as a sidecar, the
    // service's acknowledgement drops it from what the service was told); a lapse or being
    // forgotten (reaped) empties the set or changes the id, and the stop then goes on too.
    let mut progress = DrainProgress::new(held, Instant::now(), deadline);
    let mut told_changes = shared.service().map(|service| service.changes());
    loop {
        let (held_now, same_executor) = {
            let view = assignment.borrow_and_update();
            (
                view.shards.clone(),
                view.executor_id.as_deref() == Some(executor_id),
            )
        };
        if !same_executor {
            break DrainEnd::Forgotten;
        }
        let still = StillHeld::of(&held_now, &told_by_service(shared));
        match progress.observe(still.total(), Instant::now()) {
            DrainWait::WakeAt(at) => {
                let changed = async {
                    tokio::select! {
                        changed = assignment.changed() => changed.is_ok(),
                        () = service_told_changed(&mut told_changes) => true,
                    }
                };
                if let Ok(false) = timeout_at(at, changed).await {
                    break DrainEnd::ShuttingDown;
                }
            }
            DrainWait::Done => break DrainEnd::HandedOver,
            DrainWait::Stalled => break DrainEnd::Stalled,
            DrainWait::TimedOut => break DrainEnd::TimedOut,
        }
    }
}

/// How the drain ended, in the log and the self-drain counter.
fn report_drain_end(ended: DrainEnd, executor_id: &str, left: &StillHeld) {
    match ended {
        // Nothing held, and (as a sidecar) nothing the service may still be admitting.
        DrainEnd::HandedOver => {
            count_self_drain("handed_over");
            info!(%executor_id, "drained: every shard was handed over (P17.2)");
        }
        DrainEnd::Forgotten => {
            count_self_drain("forgotten");
            warn!(%executor_id, %left, "the managers forgot this executor during its drain (its lease lapsed and it was reaped): its shards moved on the expiry (P3.8)");
        }
        DrainEnd::ShuttingDown => {
            count_self_drain("shut_down");
            info!(%executor_id, %left, "the executor shut down during its drain");
        }
        DrainEnd::Stalled => {
            count_self_drain("stalled");
            warn!(%executor_id, %left, stall_ms = millis(DRAIN_STALL), "the drain gave up, not every shard handed over: none left for the stall bound (no revoke came: are the other executors stopping too? or the service did not acknowledge); stopping admission of the rest at once (P3.7)");
        }
        DrainEnd::TimedOut => {
            count_self_drain("timed_out");
            warn!(%executor_id, %left, "the drain gave up, not every shard handed over: the grace ran short; stopping admission of the rest at once (P3.7)");
        }
    }
}

/// What the service beside a sidecar may still be admitting (P16.2); nothing otherwise.
fn told_by_service(shared: &Shared) -> Vec<leasehold_api::wire::ShardEpoch> {
    shared
        .service()
        .map(|service| service.told(shared.view_at(Instant::now()).layout()))
        .unwrap_or_default()
}

/// Resolves when what the service was told changes; never without a service (or once its link
/// is gone).
async fn service_told_changed(changes: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    let gone = match changes {
        Some(changes) => changes.changed().await.is_err(),
        None => true,
    };
    if gone {
        std::future::pending::<()>().await;
    }
}

/// How a self-drain's wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DrainEnd {
    /// Every shard's handoff completed.
    HandedOver,
    /// The executor's registration is gone (reaped, or registered anew): its shards moved on.
    Forgotten,
    /// The executor itself is shutting down: nothing is left to wait for.
    ShuttingDown,
    /// No shard left for a while: nobody is taking them.
    Stalled,
    /// The grace ran short.
    TimedOut,
}

/// P3.7: stop admission, then deregister by `deadline` (`grace` after the stop began), so the
/// shards still held move at once instead of after the lease.
async fn stop_gracefully<M: ManagerApi>(
    shared: &Shared,
    manager: &M,
    deadline: Instant,
    grace: Duration,
) {
    shared.stop_admission();
    // As a sidecar, deregistering hands every shard on at once: only once the service stopped
    // admitting them (P16.2). Otherwise they move when the lease runs out, as after a crash.
    if let Some(service) = shared.service() {
        if !service.stopped_by(deadline).await {
            warn!(
                grace_ms = millis(grace),
                shards = service.told(shared.view_at(Instant::now()).layout()).len(),
                "the service did not acknowledge `stopping` within the grace, and its copy has \
                 not run out: it may still be admitting these shards, so not deregistering: they \
                 move when the lease lapses (P16.2)"
            );
            return;
        }
    }
    let deregister = async {
        let executor_id = match shared.executor_id() {
            Some(executor_id) => executor_id,
            // A register whose reply never arrived may have created an executor; the same
            // incarnation finds it (P7.2) so it can be deregistered instead of left to lapse.
            None if shared.register_sent() => {
                manager
                    .register(&shared.register_request(false))
                    .await?
                    .executor_id
            }
            None => return Ok(None),
        };
        match manager.deregister(&executor_id, &shared.credential()).await {
            Ok(()) => Ok(Some(executor_id)),
            // Already gone (reaped, or an earlier attempt succeeded): nothing left to hand back.
            Err(error)
                if matches!(
                    error.code(),
                    Some(ErrorCode::UnknownExecutor | ErrorCode::NotFound)
                ) =>
            {
                Ok(Some(executor_id))
            }
            Err(error) => Err(error),
        }
    };
    match timeout_at(deadline, deregister).await {
        Ok(Ok(Some(executor_id))) => {
            info!(%executor_id, "deregistered; shards move at once (P3.7)")
        }
        Ok(Ok(None)) => info!("stopped before registering"),
        Ok(Err(error)) => {
            warn!(%error, "deregistration failed; the shards move when the lease lapses")
        }
        Err(_) => warn!(
            grace_ms = millis(grace),
            "deregistration did not finish within the grace; the shards move when the lease lapses"
        ),
    }
}

/// Records each lapse at its expiry, so the log, the assignment watch and the events stream
/// show it even when nothing else happens (the core already refuses work from the expiry on).
pub(crate) async fn watch_lapses(shared: Arc<Shared>, mut shutdown: ShutdownSignal) {
    let mut assignment = shared.subscribe_assignment();
    loop {
        let wake_at = {
            let view = assignment.borrow_and_update();
            match (view.admission, view.lease_expiry) {
                (AdmissionState::Admitting, Some(expiry)) => Some(expiry),
                _ => None,
            }
        };
        tokio::select! {
            () = sleep_until(wake_at.unwrap_or_else(Instant::now)), if wake_at.is_some() => shared.record_lapse(),
            changed = assignment.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = shutdown.wait() => return,
        }
    }
}
