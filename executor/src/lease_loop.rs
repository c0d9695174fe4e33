//! The lease's background work: the loop that registers and renews (P3.5, P4.4), the graceful
//! stop it ends with (P3.7), and the lapse watcher (P3.6).
//!
//! What to do after each register or renew call is a pure decision, [`LeaseSchedule::after`]:
//! the call's [`Outcome`], the lease clock and the instant go in, the [`Next`] step comes out.
//! It holds the backoff and reads no clock, so it is table-tested with explicit instants; the
//! renewal and retry instants themselves come from [`crate::lease`]. The tokio shell around it
//! makes the calls, applies the grants to the shared state, logs, counts and sleeps.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::client::ClientError;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{Credential, Grant, RenewRequest};
use tokio::time::{sleep_until, timeout_at, Instant};
use tracing::{debug, error, info, warn};

use crate::admission::{AdmissionState, ForeignGrant};
use crate::assignment::SetOutcome;
use crate::lease::{LeaseClock, RetryBackoff};
use crate::manager::ManagerApi;
use crate::metrics::count_lease_call;
use crate::shared::Shared;
use crate::shutdown::ShutdownSignal;
use crate::status::RunState;

/// What came of one register or renew call: all the next step depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A grant for this executor, applied: the lease moved.
    Granted,
    /// A grant for another executor, ignored: nothing moved.
    ForeignGrant,
    /// A renewal answered `unknown_executor`: the manager no longer knows this executor (reaped
    /// or removed), so no grant it made still stands (P4.4).
    UnknownExecutor,
    /// A registration refused in a way retrying cannot fix; carries why.
    Hopeless(String),
    /// Anything else (transport, timeout, no leader, a refusal worth retrying): retried.
    Failed,
}

impl Outcome {
    /// A failed register: hopeless when the request itself is wrong, else retried.
    pub(crate) fn of_register_error(error: &ClientError) -> Self {
        let hopeless = match error {
            ClientError::InvalidEndpoint(_)
            | ClientError::InvalidConfig(_)
            | ClientError::InvalidRequest(_) => true,
            other => matches!(
                other.code(),
                Some(
                    ErrorCode::InvalidRequest
                        | ErrorCode::PayloadTooLarge
                        | ErrorCode::UnsupportedMediaType
                        | ErrorCode::NotFound
                        | ErrorCode::MethodNotAllowed
                )
            ),
        };
        if hopeless {
            Outcome::Hopeless(error.to_string())
        } else {
            Outcome::Failed
        }
    }

    /// A failed renew: `unknown_executor` re-registers; everything else is retried (the
    /// registration stands, so no renewal refusal is hopeless).
    pub(crate) fn of_renew_error(error: &ClientError) -> Self {
        if error.code() == Some(ErrorCode::UnknownExecutor) {
            Outcome::UnknownExecutor
        } else {
            Outcome::Failed
        }
    }
}

/// The lease loop's next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Make the next call (register or renew, whichever the state then asks for) at this
    /// instant.
    CallAt(Instant),
    /// Forget the registration (stop all admission, pick a new incarnation) and register again
    /// at once (P4.4).
    Reregister,
    /// Give up: the executor fails with this reason.
    GiveUp(String),
}

/// The lease loop's decisions (P3.5): renew after a third of the remaining lease, back off
/// exponentially on failure with each retry landing before the expiry, keep trying after a
/// lapse. Pure: the caller passes the lease and the instant.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseSchedule {
    /// Grows with each failure in a row; a grant or a fresh registration resets it.
    backoff: RetryBackoff,
}

impl LeaseSchedule {
    /// The step after a call that ended in `outcome` at `now`, with `lease` the lease clock
    /// after the call's grant (if any) was applied.
    pub(crate) fn after(&mut self, outcome: Outcome, lease: &LeaseClock, now: Instant) -> Next {
        match outcome {
            Outcome::Granted => {
                self.backoff.reset();
                Next::CallAt(lease.next_renewal_at(now))
            }
            Outcome::ForeignGrant | Outcome::Failed => {
                Next::CallAt(self.backoff.next_retry_at(now, lease))
            }
            Outcome::UnknownExecutor => {
                self.backoff.reset();
                Next::Reregister
            }
            Outcome::Hopeless(reason) => Next::GiveUp(reason),
        }
    }
}

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
/// it (the caller selects on shutdown).
async fn lease_loop<M: ManagerApi>(shared: &Shared, manager: &M) -> RunState {
    let mut schedule = LeaseSchedule::default();
    let mut next_call_at = Instant::now();
    loop {
        sleep_until(next_call_at).await;
        let next = match shared.renewal() {
            None => register(shared, manager, &mut schedule).await,
            Some((executor_id, credential, request)) => {
                let call = RenewCall {
                    executor_id: &executor_id,
                    credential: &credential,
                    request: &request,
                };
                renew(shared, manager, &mut schedule, call).await
            }
        };
        next_call_at = match next {
            Next::CallAt(at) => at,
            Next::Reregister => {
                shared.forget_executor();
                Instant::now()
            }
            Next::GiveUp(reason) => return RunState::Failed(reason),
        };
    }
}

/// One register call under the current incarnation (P4.4, P7.2), and the step after it.
async fn register<M: ManagerApi>(
    shared: &Shared,
    manager: &M,
    schedule: &mut LeaseSchedule,
) -> Next {
    let request = shared.register_request(true);
    // P3.2: read just before the request leaves.
    let sent_at = Instant::now();
    let result = manager.register(&request).await;
    count_lease_call(
        "register",
        if result.is_ok() { "granted" } else { "failed" },
    );
    let outcome = match &result {
        Ok(grant) => match take_grant(shared, sent_at, grant, "registered") {
            Ok(()) => {
                info!(executor_id = %grant.executor_id, lease_ttl_ms = grant.lease_ttl_ms, shards = grant.shards.len(), "registered");
                Outcome::Granted
            }
            Err(error) => {
                warn!(%error, "ignoring a registration reply for another executor");
                Outcome::ForeignGrant
            }
        },
        Err(error) => Outcome::of_register_error(error),
    };
    let now = Instant::now();
    let next = schedule.after(outcome, &shared.lease(), now);
    match (&result, &next) {
        (Err(error), Next::GiveUp(_)) => {
            error!(%error, "the manager refused the registration; giving up");
        }
        (Err(error), Next::CallAt(at)) => {
            warn!(%error, retry_in_ms = millis(at.saturating_duration_since(now)), "registration failed; retrying");
        }
        _ => {}
    }
    next
}

/// What one renewal sends.
struct RenewCall<'a> {
    executor_id: &'a str,
    credential: &'a Credential,
    request: &'a RenewRequest,
}

/// One renew call, and the step after it.
async fn renew<M: ManagerApi>(
    shared: &Shared,
    manager: &M,
    schedule: &mut LeaseSchedule,
    call: RenewCall<'_>,
) -> Next {
    let RenewCall {
        executor_id,
        credential,
        request,
    } = call;
    let sent_at = Instant::now();
    let result = manager.renew(executor_id, credential, request).await;
    count_lease_call(
        "renew",
        match &result {
            Ok(_) => "granted",
            Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => "unknown_executor",
            Err(_) => "failed",
        },
    );
    let outcome = match &result {
        Ok(grant) => match take_grant(shared, sent_at, grant, "renewed") {
            Ok(()) => Outcome::Granted,
            Err(error) => {
                warn!(%error, "ignoring a renewal reply for another executor");
                Outcome::ForeignGrant
            }
        },
        Err(error) => Outcome::of_renew_error(error),
    };
    let now = Instant::now();
    let lease = shared.lease();
    let next = schedule.after(outcome, &lease, now);
    match (&result, &next) {
        (Err(_), Next::Reregister) => {
            warn!(%executor_id, "the manager no longer knows this executor (reaped or removed): stopping all admission and registering anew");
        }
        (Err(error), Next::CallAt(at)) => {
            warn!(%error, %executor_id, lease_remaining_ms = millis(lease.remaining(now)), retry_in_ms = millis(*at - now), "renewal failed; retrying before the lease ends (P3.5)");
        }
        _ => {}
    }
    next
}

/// Applies a grant and logs what it did; `Ok(())` when it moved the lease.
fn take_grant(
    shared: &Shared,
    sent_at: Instant,
    grant: &Grant,
    what: &str,
) -> Result<(), ForeignGrant> {
    let applied = shared.apply_grant(sent_at, grant)?;
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
    Ok(())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// P3.7: stop admission, then deregister within the grace, so the shards move at once instead
/// of after the lease.
async fn stop_gracefully<M: ManagerApi>(shared: &Shared, manager: &M, grace: Duration) {
    shared.stop_admission();
    let deadline = Instant::now() + grace;
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

#[cfg(test)]
mod tests {
    //! The schedule alone, at explicit instants (P3.5, P4.4). The shell around it is tested
    //! against a scripted manager under a paused clock in `crate::tests::lease_loop`.

    use leasehold_api::problem::Problem;

    use super::*;
    use crate::lease::{RETRY_DELAY_INITIAL, RETRY_DELAY_MAX, RETRY_DELAY_MIN};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn problem(code: ErrorCode) -> ClientError {
        ClientError::Problem(Problem::new(code, "scripted"))
    }

    /// A lease granted at `t0` for `ttl_ms`.
    fn lease_from(t0: Instant, ttl_ms: u64) -> LeaseClock {
        let mut lease = LeaseClock::default();
        lease.apply_grant(t0, ttl_ms);
        lease
    }

    #[test]
    fn p3_5_a_grant_renews_after_a_third_of_what_is_left() {
        let t0 = Instant::now();
        let lease = lease_from(t0, 30_000);
        let mut schedule = LeaseSchedule::default();
        assert_eq!(
            schedule.after(Outcome::Granted, &lease, t0),
            Next::CallAt(t0 + secs(10))
        );
        // Applied 3 s after it was sent: a third of the 27 s left.
        assert_eq!(
            schedule.after(Outcome::Granted, &lease, t0 + secs(3)),
            Next::CallAt(t0 + secs(3 + 9))
        );
    }

    #[test]
    fn p3_5_failures_back_off_and_a_grant_resets_the_backoff() {
        let t0 = Instant::now();
        let lease = lease_from(t0, 30_000);
        let mut schedule = LeaseSchedule::default();
        let mut now = t0 + secs(10);
        let mut delays = Vec::new();
        for outcome in [Outcome::Failed, Outcome::ForeignGrant, Outcome::Failed] {
            let Next::CallAt(at) = schedule.after(outcome, &lease, now) else {
                panic!("a failure is retried");
            };
            delays.push(at - now);
            now = at;
        }
        // A grant for another executor moved nothing, so it backs off like a failure.
        assert_eq!(delays, [ms(250), ms(500), ms(1_000)]);
        assert!(matches!(
            schedule.after(Outcome::Granted, &lease, now),
            Next::CallAt(_)
        ));
        assert_eq!(
            schedule.after(Outcome::Failed, &lease, now),
            Next::CallAt(now + RETRY_DELAY_INITIAL),
            "the first failure after a grant starts again from the initial delay"
        );
    }

    #[test]
    fn p3_5_retries_land_before_expiry_and_go_on_after_a_lapse() {
        let t0 = Instant::now();
        let lease = lease_from(t0, 4_000);
        let expiry = t0 + secs(4);
        let mut schedule = LeaseSchedule::default();
        let mut now = t0 + ms(1_334);
        let mut after_lapse = 0;
        for _ in 0..40 {
            let Next::CallAt(at) = schedule.after(Outcome::Failed, &lease, now) else {
                panic!("a failure is retried");
            };
            if now + RETRY_DELAY_MIN * 2 <= expiry {
                assert!(at < expiry, "retry after {:?} lands after expiry", now - t0);
            }
            assert!(at - now <= RETRY_DELAY_MAX);
            assert!(at - now >= RETRY_DELAY_MIN);
            if now >= expiry {
                after_lapse += 1;
            }
            now = at;
        }
        assert!(after_lapse >= 3, "stopped trying after the lapse");
    }

    #[test]
    fn p4_4_unknown_executor_reregisters_at_once_with_a_fresh_backoff() {
        let t0 = Instant::now();
        let lease = lease_from(t0, 30_000);
        let mut schedule = LeaseSchedule::default();
        for _ in 0..3 {
            schedule.after(Outcome::Failed, &lease, t0);
        }
        assert_eq!(
            schedule.after(Outcome::UnknownExecutor, &lease, t0),
            Next::Reregister
        );
        // The registration that follows fails: it starts from the initial delay.
        assert_eq!(
            schedule.after(Outcome::Failed, &LeaseClock::default(), t0),
            Next::CallAt(t0 + RETRY_DELAY_INITIAL)
        );
    }

    #[test]
    fn a_hopeless_registration_gives_up_with_its_reason() {
        let mut schedule = LeaseSchedule::default();
        assert_eq!(
            schedule.after(
                Outcome::Hopeless("bad address".into()),
                &LeaseClock::default(),
                Instant::now()
            ),
            Next::GiveUp("bad address".into())
        );
    }

    /// Which refusals end the executor: only a register the manager calls malformed. A renewal
    /// is never hopeless (its registration stands), and `unknown_executor` means re-register.
    #[test]
    fn errors_are_classified_by_call() {
        let hopeless = [
            problem(ErrorCode::InvalidRequest),
            problem(ErrorCode::PayloadTooLarge),
            problem(ErrorCode::UnsupportedMediaType),
            problem(ErrorCode::NotFound),
            problem(ErrorCode::MethodNotAllowed),
            ClientError::InvalidRequest("x".into()),
        ];
        for error in &hopeless {
            assert!(
                matches!(Outcome::of_register_error(error), Outcome::Hopeless(_)),
                "{error}"
            );
            assert_eq!(Outcome::of_renew_error(error), Outcome::Failed, "{error}");
        }
        let retried = [
            ClientError::Transport("partition".into()),
            problem(ErrorCode::Unavailable),
            problem(ErrorCode::UnknownExecutor),
        ];
        for error in &retried {
            assert_eq!(
                Outcome::of_register_error(error),
                Outcome::Failed,
                "{error}"
            );
        }
        assert_eq!(
            Outcome::of_renew_error(&problem(ErrorCode::UnknownExecutor)),
            Outcome::UnknownExecutor
        );
        assert_eq!(
            Outcome::of_renew_error(&ClientError::Transport("partition".into())),
            Outcome::Failed
        );
    }
}
