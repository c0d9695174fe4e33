//! The lease loop's calls as a pure core: which call comes next, what is recorded as it leaves,
//! and what an answer does to the executor's state and to the schedule (P3.2, P3.5, P4.1, P4.4).
//! The tokio shell (`lease_loop`) and the simulator (`sim/`) both step a [`LeaseCalls`],
//! so the simulator's seeds exercise the production order of events, not a copy of it.
//!
//! The order, per call:
//! 1. Renew when registered, else register under the current incarnation (P4.4, P7.2).
//! 2. As the request is made: the instant it is sent (the lease is anchored there, P3.2)
//!    and the mark of what is applied (a grant below it tells a disowned set, P4.1).
//! 3. A grant is applied against both. A grant naming another executor moves nothing.
//! 4. A granted renewal's load report is taken in (P15.1), and only a granted one.
//! 5. [`LeaseSchedule::after`] says when the next call is due; `unknown_executor` forgets the
//!    registration (admission stops at once, P4.4) and the next call registers anew.

use leasehold_api::wire::{Grant, RegisterRequest};
use tokio::time::Instant;

use crate::admission::{AppliedMark, ForeignGrant, GrantApplied};
use crate::lease::{CallOutcome, LeaseClock, LeaseSchedule, NextCall};

/// The executor state a lease loop calls for: the production shell's shared state, or one of
/// the simulator's processes.
pub trait LeaseHolder {
    /// A renewal due, as the holder sends it (its request, credential and load report).
    type Renewal;

    /// The renewal due now, or `None` when not registered.
    fn renewal(&mut self) -> Option<Self::Renewal>;
    /// The register request of the current incarnation; records that it may reach a manager.
    fn register_request(&mut self) -> RegisterRequest;
    /// What is applied now (P4.1).
    fn applied_mark(&self) -> AppliedMark;
    /// Applies a grant answering a request sent at `sent_at` when `mark` was applied.
    fn apply_grant_after(
        &mut self,
        sent_at: Instant,
        mark: AppliedMark,
        grant: &Grant,
    ) -> Result<GrantApplied, ForeignGrant>;
    /// A renewal was granted: its load report is taken in (P15.1).
    fn renewal_granted(&mut self, renewal: &Self::Renewal);
    /// `unknown_executor`: stop admitting everything, forget the registration, and take a new
    /// incarnation (and credential) for the next one.
    fn forget_executor(&mut self);
    fn lease(&self) -> LeaseClock;
}

/// The call to make, and what was recorded as it left.
#[derive(Debug, Clone)]
pub struct LeaseCall<R> {
    pub kind: CallKind<R>,
    /// When the request left: the lease a grant tells runs from here (P3.2).
    pub sent_at: Instant,
    /// What was applied when it left (P4.1).
    pub mark: AppliedMark,
}

#[derive(Debug, Clone)]
pub enum CallKind<R> {
    Register(RegisterRequest),
    Renew(R),
}

impl<R> LeaseCall<R> {
    pub fn is_register(&self) -> bool {
        matches!(self.kind, CallKind::Register(_))
    }
}

/// What a grant did, for the shell's logs and the simulator's checks.
#[derive(Debug)]
pub enum GrantTaken {
    Applied(GrantApplied),
    Foreign(ForeignGrant),
}

/// The lease loop of one executor process.
#[derive(Debug, Clone, Default)]
pub struct LeaseCalls {
    schedule: LeaseSchedule,
}

impl LeaseCalls {
    /// The call due at `now`: renew when registered, else register (steps 1 and 2).
    pub fn next_call<H: LeaseHolder>(&self, holder: &mut H, now: Instant) -> LeaseCall<H::Renewal> {
        // Marked before the request is made: a lower bound of what is applied when it leaves.
        let mark = holder.applied_mark();
        let kind = match holder.renewal() {
            Some(renewal) => CallKind::Renew(renewal),
            None => CallKind::Register(holder.register_request()),
        };
        LeaseCall {
            kind,
            sent_at: now,
            mark,
        }
    }

    /// `call` was answered with `grant`, at `now` (steps 3 to 5).
    pub fn granted<H: LeaseHolder>(
        &mut self,
        holder: &mut H,
        call: &LeaseCall<H::Renewal>,
        grant: &Grant,
        now: Instant,
    ) -> (GrantTaken, NextCall) {
        let (taken, outcome) = match holder.apply_grant_after(call.sent_at, call.mark, grant) {
            Ok(applied) => {
                let outcome = match &call.kind {
                    CallKind::Renew(renewal) => {
                        holder.renewal_granted(renewal);
                        CallOutcome::Granted
                    }
                    CallKind::Register(_) => CallOutcome::Registered {
                        executor_id: grant.executor_id.clone(),
                    },
                };
                (GrantTaken::Applied(applied), outcome)
            }
            Err(foreign) => (GrantTaken::Foreign(foreign), CallOutcome::ForeignGrant),
        };
        (taken, self.after(holder, outcome, now))
    }

    /// The call failed with `outcome` (anything but a grant), at `now` (step 5).
    pub fn failed<H: LeaseHolder>(
        &mut self,
        holder: &mut H,
        outcome: CallOutcome,
        now: Instant,
    ) -> NextCall {
        self.after(holder, outcome, now)
    }

    fn after<H: LeaseHolder>(
        &mut self,
        holder: &mut H,
        outcome: CallOutcome,
        now: Instant,
    ) -> NextCall {
        let next = self.schedule.after(outcome, &holder.lease(), now);
        if next == NextCall::Reregister {
            holder.forget_executor();
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold_api::wire::{AssignmentPush, RenewRequest, ShardEpoch};

    use super::*;
    use crate::admission::AdmissionCore;

    const EXECUTOR: &str = "ex-1";

    /// An executor's state as the simulator holds it: the admission core, an incarnation, and
    /// counts of what the loop asked of it.
    struct Holder {
        core: AdmissionCore,
        incarnation: u32,
        now: Instant,
        reports_taken: u32,
    }

    impl Holder {
        fn new(now: Instant) -> Self {
            Self {
                core: AdmissionCore::default(),
                incarnation: 1,
                now,
                reports_taken: 0,
            }
        }
    }

    impl LeaseHolder for Holder {
        type Renewal = (String, RenewRequest);

        fn renewal(&mut self) -> Option<Self::Renewal> {
            self.core.renewal()
        }

        fn register_request(&mut self) -> RegisterRequest {
            RegisterRequest {
                follows_generations: false,
                namespace: None,
                incarnation: format!("i{}", self.incarnation),
                address: "http://127.0.0.1:1".into(),
                name: None,
                credential: None,
                capacity: None,
                app_version: None,
                labels: Default::default(),
            }
        }

        fn applied_mark(&self) -> AppliedMark {
            self.core.applied_mark()
        }

        fn apply_grant_after(
            &mut self,
            sent_at: Instant,
            mark: AppliedMark,
            grant: &Grant,
        ) -> Result<GrantApplied, ForeignGrant> {
            self.core.apply_grant_after(sent_at, mark, grant, self.now)
        }

        fn renewal_granted(&mut self, _: &Self::Renewal) {
            self.reports_taken += 1;
        }

        fn forget_executor(&mut self) {
            self.core.forget_executor(self.now);
            self.incarnation += 1;
        }

        fn lease(&self) -> LeaseClock {
            *self.core.lease()
        }
    }

    fn grant(executor_id: &str, revision: u64, shards: &[u32]) -> Grant {
        Grant {
            generation: 0,
            shard_runs: None,
            executor_id: executor_id.into(),
            lease_ttl_ms: 9_000,
            revision,
            shard_count: 8,
            shards: shards
                .iter()
                .map(|&shard| ShardEpoch { shard, epoch: 1 })
                .collect(),
            unchanged: false,
            secondaries: Vec::new(),
        }
    }

    /// P4.4: unregistered, the loop registers; granted, it renews first at the point of the
    /// lease its id fixes (P3.5), and the lease runs from when the request left, not when the
    /// answer came (P3.2).
    #[test]
    fn p3_2_p4_4_register_then_renew_from_the_send_instant() {
        let t0 = Instant::now();
        let mut holder = Holder::new(t0);
        let mut calls = LeaseCalls::default();
        let call = calls.next_call(&mut holder, t0);
        assert!(call.is_register());
        let answered_at = t0 + Duration::from_secs(1);
        holder.now = answered_at;
        let (taken, next) = calls.granted(
            &mut holder,
            &call,
            &grant(EXECUTOR, 3, &[0, 1]),
            answered_at,
        );
        let GrantTaken::Applied(applied) = taken else {
            panic!("applied: {taken:?}");
        };
        assert_eq!(applied.lease_expiry, t0 + Duration::from_secs(9));
        assert_eq!(
            next,
            NextCall::CallAt(
                answered_at + crate::lease::first_renewal_after(Duration::from_secs(8), EXECUTOR)
            )
        );
        assert_eq!(
            holder.reports_taken, 0,
            "a registration carries no load report"
        );
        let renew = calls.next_call(&mut holder, answered_at);
        assert!(matches!(&renew.kind, CallKind::Renew((id, _)) if id == EXECUTOR));
    }

    /// P15.1: a granted renewal's load report is taken in; a failed one's is not, nor one
    /// answered with another executor's grant (which moves nothing).
    #[test]
    fn p15_1_only_a_granted_renewal_takes_its_report_in() {
        let t0 = Instant::now();
        let mut holder = Holder::new(t0);
        let mut calls = LeaseCalls::default();
        let register = calls.next_call(&mut holder, t0);
        calls.granted(&mut holder, &register, &grant(EXECUTOR, 3, &[0]), t0);
        let renew = calls.next_call(&mut holder, t0);
        calls.failed(&mut holder, CallOutcome::Failed, t0);
        assert_eq!(holder.reports_taken, 0);
        let (taken, _) = calls.granted(&mut holder, &renew, &grant("ex-2", 4, &[5]), t0);
        assert!(matches!(taken, GrantTaken::Foreign(_)));
        assert_eq!(holder.reports_taken, 0);
        assert_eq!(
            holder.core.assignment().revision(),
            3,
            "a foreign grant moves nothing"
        );
        calls.granted(&mut holder, &renew, &grant(EXECUTOR, 4, &[0]), t0);
        assert_eq!(holder.reports_taken, 1);
    }

    /// P4.4: `unknown_executor` forgets the registration (a new incarnation) and the next call
    /// registers anew.
    #[test]
    fn p4_4_unknown_executor_forgets_and_registers_anew() {
        let t0 = Instant::now();
        let mut holder = Holder::new(t0);
        let mut calls = LeaseCalls::default();
        let register = calls.next_call(&mut holder, t0);
        calls.granted(&mut holder, &register, &grant(EXECUTOR, 3, &[0]), t0);
        let next = calls.failed(&mut holder, CallOutcome::UnknownExecutor, t0);
        assert_eq!(next, NextCall::Reregister);
        assert_eq!(holder.incarnation, 2);
        assert!(holder.core.executor_id().is_none());
        let call = calls.next_call(&mut holder, t0);
        assert!(matches!(&call.kind, CallKind::Register(request) if request.incarnation == "i2"));
    }

    /// P4.1: the mark is what was applied as the request was made, so a grant below a set that
    /// arrived from elsewhere before the request left is told as disowning it.
    #[test]
    fn p4_1_the_mark_is_taken_as_the_request_is_made() {
        let t0 = Instant::now();
        let mut holder = Holder::new(t0);
        let mut calls = LeaseCalls::default();
        let register = calls.next_call(&mut holder, t0);
        calls.granted(&mut holder, &register, &grant(EXECUTOR, 3, &[0]), t0);
        let push = AssignmentPush {
            generation: 0,
            executor_id: EXECUTOR.into(),
            revision: 9,
            shard_count: 8,
            shards: vec![ShardEpoch { shard: 1, epoch: 1 }],
            secondaries: Vec::new(),
        };
        holder.core.apply_push(&push, t0).expect("push applied");
        let renew = calls.next_call(&mut holder, t0);
        assert_eq!(renew.mark.revision(), 9);
        let (taken, _) = calls.granted(&mut holder, &renew, &grant(EXECUTOR, 5, &[0]), t0);
        let GrantTaken::Applied(applied) = taken else {
            panic!("applied: {taken:?}");
        };
        assert!(applied.disowned.is_some(), "{applied:?}");
    }
}
