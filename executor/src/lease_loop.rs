//! The lease's background work: the loop that registers and renews (P3.5, P4.4), the graceful
//! stop it ends with (P3.7), and the lapse watcher (P3.6).
//!
//! Which call comes next and what its answer does is the pure [`LeaseCalls`] in
//! [`crate::lease_calls`], which the simulator steps too. This module is the tokio shell around
//! it: it makes the calls, logs, counts and sleeps.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::client::ClientError;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{Grant, RegisterRequest, CAPACITY_SCHEMA};
use tokio::time::{sleep_until, timeout_at, Instant};
use tracing::{debug, error, info, warn};

use crate::admission::{AdmissionState, AppliedMark, ForeignGrant, GrantApplied};
use crate::assignment::SetOutcome;
use crate::lease::{CallOutcome, LeaseClock, NextCall};
use crate::lease_calls::{CallKind, GrantTaken, LeaseCalls, LeaseHolder};
use crate::manager::ManagerApi;
use crate::metrics::{count_disowned_push, count_lease_call};
use crate::shared::{DueRenewal, Shared};
use crate::shutdown::ShutdownSignal;
use crate::status::RunState;

/// The lease loop: register, then renew after a third of the remaining lease, back off on
/// failure, re-register after `unknown_executor` (P3.5, P4.4). Ends when `shutdown` fires,
/// after the graceful stop (P3.7), or when registration is hopeless.
pub(crate) async fn run_lease_loop<M: ManagerApi>(
    shared: Arc<Shared>,
    manager: Arc<M>,
    mut shutdown: ShutdownSignal,
    shutdown_grace: Duration,
) -> RunState {
    let state = tokio::select! {
        state = lease_loop(&shared, manager.as_ref()) => state,
        () = shutdown.wait() => RunState::Stopped,
    };
    match state {
        RunState::Stopped | RunState::Running => {
            stop_gracefully(&shared, manager.as_ref(), shutdown_grace).await;
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
            cluster_takes_loads: manager.cluster_version() >= CAPACITY_SCHEMA,
        };
        let call = calls.next_call(&mut holder, Instant::now());
        let (result, name) = match &call.kind {
            CallKind::Register(request) => (manager.register(request).await, "register"),
            CallKind::Renew(due) => (
                manager
                    .renew(&due.executor_id, &due.credential, &due.request)
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
    /// Whether renewals carry the load report (the cluster takes loads, P15.1).
    cluster_takes_loads: bool,
}

impl LeaseHolder for SharedHolder<'_> {
    type Renewal = DueRenewal;

    fn renewal(&mut self) -> Option<DueRenewal> {
        self.shared.renewal(self.cluster_takes_loads)
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
        Ok(SetOutcome::Applied { dropped, gained })
            if !dropped.is_empty() || !gained.is_empty() =>
        {
            info!(
                executor_id = %grant.executor_id,
                revision = grant.revision,
                dropped = dropped.len(),
                gained = gained.len(),
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

/// P3.7: stop admission, then deregister within the grace, so the shards move at once instead
/// of after the lease.
async fn stop_gracefully<M: ManagerApi>(shared: &Shared, manager: &M, grace: Duration) {
    shared.stop_admission();
    let deadline = Instant::now() + grace;
    // As a sidecar, deregistering hands every shard on at once: only once the service stopped
    // admitting them (P16.2). Otherwise they move when the lease runs out, as after a crash.
    if let Some(service) = shared.service() {
        if !service.stopped_by(deadline).await {
            warn!(
                grace_ms = millis(grace),
                "the service did not stop admitting within the grace; not deregistering: the \
                 shards move when the lease lapses (P16.2)"
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
