//! The executor's own copy of its lease, and when to renew it (PROTOCOL §3). Pure: every
//! function takes the instant it reasons about, nothing here reads a clock or does I/O.
//!
//! The rules it keeps:
//! - P3.1/P3.2: a grant carries the time remaining (`lease_ttl_ms`); the executor anchors it at
//!   the instant read just before the request that earned it was sent, so its expiry is
//!   `sent_at + lease_ttl_ms`. The manager granted after that instant, so transit and the
//!   manager's write time make this copy shorter than the manager's, never longer (a reply sent
//!   at t=20 with 40 s left that lands at t=25 must still expire at t=60).
//! - P3.3: only grants move the clock, and every grant does; pushes carry no lease, so there is
//!   no function here that a push could call.
//! - P3.5: renew after a third of the remaining lease; on failure back off exponentially with
//!   each retry capped so it lands before expiry; keep trying after a lapse.
//!
//! Clocks: [`tokio::time::Instant`] is monotonic (CLOCK_MONOTONIC on Linux) and can be paused
//! in tests. Anchoring removes every delay term from the lease but not clock *rate* error: the
//! design assumes the executor's and the manager's clocks advance at rates that differ by far
//! less than the lease (ntp/chrony discipline keeps it near 500 ppm, about 30 ms on a 60 s
//! lease); P5.2 states the same assumption.

use std::time::Duration;

use leasehold_api::client::ClientError;
use leasehold_api::problem::ErrorCode;
use tokio::time::Instant;

/// Longest lease the executor will hold from one grant. The manager never grants anything
/// near this; a larger `lease_ttl_ms` can only be a corrupt reply, and clamping it keeps the
/// executor's copy shorter than the manager's (safe) while making `sent_at + ttl` impossible to
/// overflow, so decoding a grant is total and never yields a lease that does not expire.
pub const MAX_LEASE_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// First retry delay after a failed grant request; P7.1's retry interval.
pub const RETRY_DELAY_INITIAL: Duration = Duration::from_millis(250);
/// Largest retry delay, also the pace of retries once the lease has lapsed (P3.5: keep trying;
/// a lapsed executor that renews resumes, P3.6).
pub const RETRY_DELAY_MAX: Duration = Duration::from_secs(5);
/// Smallest retry delay: keeps a nearly expired lease (where "half of what is left" tends to
/// zero) from turning the retry loop into a busy loop.
pub const RETRY_DELAY_MIN: Duration = Duration::from_millis(10);

/// A renewal attempt may take at most this share of the lease (P7.3): a manager that holds it
/// (cut off from its quorum, or from this executor) leaves most of what is left of a copy
/// renewed a third into it to reach the others.
pub const GRANT_ATTEMPTS_PER_LEASE: u32 = 6;
/// The shortest bound on one renewal attempt, whatever the lease: a round trip and a commit.
pub const GRANT_ATTEMPT_MIN: Duration = Duration::from_millis(100);

/// The bound on each attempt of a renewal under a lease told as `last_lease_ttl` (P7.3): a
/// [`GRANT_ATTEMPTS_PER_LEASE`]th of it, at least [`GRANT_ATTEMPT_MIN`]; `None` before any grant
/// (the request timeout bounds it then).
pub fn grant_attempt_timeout(last_lease_ttl: Option<Duration>) -> Option<Duration> {
    last_lease_ttl.map(|lease_ttl| (lease_ttl / GRANT_ATTEMPTS_PER_LEASE).max(GRANT_ATTEMPT_MIN))
}

/// The executor's copy of its lease: one per executor, not per shard (§1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseClock {
    /// `sent_at + lease_ttl_ms` of the last grant applied (P3.2); `None` before the first grant
    /// and after the executor was forgotten by the manager (`unknown_executor`).
    expiry: Option<Instant>,
    /// The lease length the manager last told (kept across `clear`): once lapsed, retries are
    /// paced by it, so a short lease is not outwaited by the fixed backoff cap (P6.1 gives a
    /// lapsed executor one lease to come back).
    last_lease_ttl: Option<Duration>,
}

impl LeaseClock {
    /// Applies a grant: `expiry = sent_at + lease_ttl_ms` (P3.2), where `sent_at` was read
    /// just before the request that earned the grant was sent.
    ///
    /// This is a set, not a max (P3.3: every grant moves the clock). A grant anchored earlier
    /// than the one before it (an older reply overtaken by a newer one) can therefore shorten
    /// the copy; that only ever errs on the safe side, since each anchored expiry is at most the
    /// manager's expiry at the moment it granted, and the manager's expiry never decreases
    /// (P3.4).
    pub fn apply_grant(&mut self, sent_at: Instant, lease_ttl_ms: u64) -> Instant {
        let lease_ttl = Duration::from_millis(lease_ttl_ms.min(MAX_LEASE_TTL_MS));
        // `checked_add` can only fail for an instant near the end of the clock's range; then
        // the lease is treated as ending at `sent_at`, i.e. already lapsed (safe).
        let expiry = sent_at.checked_add(lease_ttl).unwrap_or(sent_at);
        self.expiry = Some(expiry);
        self.last_lease_ttl = Some(lease_ttl);
        expiry
    }

    /// Forgets the lease: the manager no longer knows this executor (its reply was
    /// `unknown_executor`), so no grant it made still stands.
    pub fn clear(&mut self) {
        self.expiry = None;
    }

    /// When the lease ends (exclusive: the lease is live strictly before this instant).
    pub fn expiry(&self) -> Option<Instant> {
        self.expiry
    }

    /// Whether the lease is live at `now` (P3.6: a lapsed lease admits nothing).
    pub fn is_live(&self, now: Instant) -> bool {
        self.expiry.is_some_and(|expiry| now < expiry)
    }

    /// The lease length of the last grant, if any grant was applied.
    pub fn last_lease_ttl(&self) -> Option<Duration> {
        self.last_lease_ttl
    }

    /// Time left at `now`; zero once lapsed or before any grant.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.expiry.map_or(Duration::ZERO, |expiry| {
            expiry.saturating_duration_since(now)
        })
    }

    /// When to send the next renewal after a successful one applied at `now`: once a third of
    /// the remaining lease has passed (P3.5, about 20 s on the 60 s default). A lapsed lease
    /// renews at once.
    pub fn next_renewal_at(&self, now: Instant) -> Instant {
        now + self.remaining(now) / 3
    }

    /// When to send the first renewal after the grant that answered the registration of
    /// `executor_id`, applied at `now` (P3.5): [`first_renewal_after`] what is left.
    pub fn first_renewal_at(&self, now: Instant, executor_id: &str) -> Instant {
        now + first_renewal_after(self.remaining(now), executor_id)
    }
}

/// How long after a registration's grant, with `remaining` of its lease left, the executor
/// `executor_id` renews first (P3.5): between a sixth and a third of `remaining`, at a point its
/// id fixes. A fleet registered together (a deploy, a restarted rack, B12's storm) would
/// otherwise renew together a third into the lease, and again every third after it: one burst
/// of a thousand renewals instead of a steady stream. Each renewal after the first comes a third
/// into its own lease, so the spread holds. No random source: the same executor id always
/// waits as long, which the simulator and the tests can predict.
pub fn first_renewal_after(remaining: Duration, executor_id: &str) -> Duration {
    let third = remaining / 3;
    let half_third = third / 2;
    half_third + half_third.mul_f64(spread_fraction(executor_id))
}

/// A fraction in [0, 1) fixed by `id`: the top 53 bits of its 64-bit FNV-1a hash, mixed by
/// MurmurHash3's finalizer. The manager's ids are a counter in a fixed format (`ex-1041`), which
/// FNV alone leaves bunched in its top bits; the finalizer spreads them as evenly as random ones.
fn spread_fraction(id: &str) -> f64 {
    const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = id.bytes().fold(FNV_OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    });
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// Exponential backoff for failed register and renew attempts (P3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBackoff {
    /// Delay the next failure will wait before being capped by the lease.
    next_delay: Duration,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        Self {
            next_delay: RETRY_DELAY_INITIAL,
        }
    }
}

impl RetryBackoff {
    /// The instant to retry after a failure observed at `now`, and doubles the delay for the
    /// failure after it (up to [`RETRY_DELAY_MAX`]).
    ///
    /// While the lease is live the delay is capped at half of what is left, so the retry
    /// lands before expiry (P3.5) and a run of failures keeps probing ever closer to the
    /// deadline instead of sleeping through it. Once less than `2 × RETRY_DELAY_MIN` is left no
    /// request could complete in time anyway, and the retry waits [`RETRY_DELAY_MIN`] (landing
    /// at most that long after the expiry). Once lapsed the executor keeps trying, at most a
    /// third of the last lease length apart: a new leader keeps a lapsed executor for one lease
    /// (P6.1), and a renewal that lands within it resumes admission (P3.6).
    pub fn next_retry_at(&mut self, now: Instant, lease: &LeaseClock) -> Instant {
        let mut delay = self.next_delay;
        self.next_delay = self.next_delay.saturating_mul(2).min(RETRY_DELAY_MAX);
        if lease.is_live(now) {
            delay = delay.min(lease.remaining(now) / 2);
        } else if let Some(lease_ttl) = lease.last_lease_ttl() {
            delay = delay.min(lease_ttl / 3);
        }
        now + delay.max(RETRY_DELAY_MIN)
    }

    /// A request succeeded: the next failure starts again from [`RETRY_DELAY_INITIAL`].
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// What came of one register or renew call: all the next step depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// A grant for this executor, applied: the lease moved.
    Granted,
    /// The grant that answered a registration, applied: the lease moved, and the executor it
    /// registered renews first at the point its id fixes ([`first_renewal_after`]).
    Registered { executor_id: String },
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

impl CallOutcome {
    /// A failed register: hopeless when the request itself is wrong, else retried.
    pub fn of_register_error(error: &ClientError) -> Self {
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
            CallOutcome::Hopeless(error.to_string())
        } else {
            CallOutcome::Failed
        }
    }

    /// A failed renew: `unknown_executor` re-registers; everything else is retried (the
    /// registration stands, so no renewal refusal is hopeless).
    pub fn of_renew_error(error: &ClientError) -> Self {
        if error.code() == Some(ErrorCode::UnknownExecutor) {
            CallOutcome::UnknownExecutor
        } else {
            CallOutcome::Failed
        }
    }
}

/// The lease loop's next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextCall {
    /// Make the next call (register or renew, whichever the state then asks for) at this
    /// instant.
    CallAt(Instant),
    /// Forget the registration (stop all admission, pick a new incarnation) and register again
    /// at once (P4.4).
    Reregister,
    /// Give up: the executor fails with this reason.
    GiveUp(String),
}

/// The lease loop's decisions (P3.5): renew after a third of the remaining lease (the first
/// renewal after a registration between a sixth and a third, by the executor's id), back off
/// exponentially on failure with each retry landing before the expiry, keep trying after a
/// lapse. Pure: the caller passes the lease and the instant.
#[derive(Debug, Clone, Default)]
pub struct LeaseSchedule {
    /// Grows with each failure in a row; a grant or a fresh registration resets it.
    backoff: RetryBackoff,
}

impl LeaseSchedule {
    /// The step after a call that ended in `outcome` at `now`, with `lease` the lease clock
    /// after the call's grant (if any) was applied.
    pub fn after(&mut self, outcome: CallOutcome, lease: &LeaseClock, now: Instant) -> NextCall {
        match outcome {
            CallOutcome::Granted => {
                self.backoff.reset();
                NextCall::CallAt(lease.next_renewal_at(now))
            }
            CallOutcome::Registered { executor_id } => {
                self.backoff.reset();
                NextCall::CallAt(lease.first_renewal_at(now, &executor_id))
            }
            CallOutcome::ForeignGrant | CallOutcome::Failed => {
                NextCall::CallAt(self.backoff.next_retry_at(now, lease))
            }
            CallOutcome::UnknownExecutor => {
                self.backoff.reset();
                NextCall::Reregister
            }
            CallOutcome::Hopeless(reason) => NextCall::GiveUp(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// P7.3: a renewal attempt takes at most a sixth of the lease, never less than the floor;
    /// before any grant the request timeout bounds it.
    #[test]
    fn p7_3_a_renewal_attempt_takes_a_sixth_of_the_lease() {
        assert_eq!(grant_attempt_timeout(None), None);
        assert_eq!(
            grant_attempt_timeout(Some(Duration::from_secs(3))),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            grant_attempt_timeout(Some(Duration::from_secs(60))),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            grant_attempt_timeout(Some(Duration::from_millis(300))),
            Some(GRANT_ATTEMPT_MIN)
        );
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// P3.5: the first renewal after a registration comes between a sixth and a third of what
    /// is left, always at the same point for one id, and a thousand ids registered together
    /// (ids as the manager mints them) spread over that whole window, not a burst at its end.
    #[test]
    fn p3_5_a_fleet_registered_together_spreads_its_first_renewals() {
        let lease = secs(60);
        let delays: Vec<Duration> = (0..1_000)
            .map(|n| first_renewal_after(lease, &format!("ex-{n}")))
            .collect();
        for delay in &delays {
            assert!(*delay >= secs(10) && *delay < secs(20), "{delay:?}");
        }
        assert_eq!(
            first_renewal_after(lease, "ex-7"),
            first_renewal_after(lease, "ex-7")
        );
        // Each second of the ten-second window gets a tenth of the fleet, give or take.
        for second in 10..20 {
            let in_it = delays
                .iter()
                .filter(|delay| delay.as_secs() == second)
                .count();
            assert!((60..=140).contains(&in_it), "{in_it} in second {second}");
        }
        let t0 = Instant::now();
        let mut clock = LeaseClock::default();
        clock.apply_grant(t0, 60_000);
        let mut schedule = LeaseSchedule::default();
        let registered = CallOutcome::Registered {
            executor_id: "ex-7".into(),
        };
        assert_eq!(
            schedule.after(registered, &clock, t0),
            NextCall::CallAt(t0 + first_renewal_after(lease, "ex-7"))
        );
        assert_eq!(
            schedule.after(CallOutcome::Granted, &clock, t0),
            NextCall::CallAt(t0 + secs(20))
        );
    }

    /// The manager's expiry is t=60; the request that earns the
    /// grant leaves at t=20, the manager answers with 40 s left, the reply lands at t=25. The
    /// executor's copy must end at t=60, not t=65.
    #[test]
    fn p3_2_delayed_grant_never_extends_past_send_plus_ttl() {
        let t0 = Instant::now();
        let sent_at = t0 + secs(20);
        let received_at = t0 + secs(25);
        let mut lease = LeaseClock::default();
        let expiry = lease.apply_grant(sent_at, 40_000);
        assert_eq!(expiry, t0 + secs(60));
        assert!(lease.is_live(t0 + secs(60) - Duration::from_nanos(1)));
        assert!(
            !lease.is_live(t0 + secs(60)),
            "still live at the manager's expiry"
        );
        assert_eq!(lease.remaining(received_at), secs(35));
    }

    proptest! {
        /// P3.2 over a grid of transits and manager write times: the executor's hold never
        /// outlives the manager's expiry.
        #[test]
        fn p3_2_executor_expiry_never_exceeds_the_managers(
            transit_to_manager_ms in 0u64..30_000,
            manager_write_ms in 0u64..30_000,
            transit_back_ms in 0u64..30_000,
            lease_duration_ms in 1u64..120_000,
        ) {
            let sent_at = Instant::now();
            // The manager stamps `now` after the request arrived and before it answers.
            let granted_at = sent_at + Duration::from_millis(transit_to_manager_ms);
            let manager_expiry = granted_at + Duration::from_millis(lease_duration_ms);
            // It tells the time remaining when the reply leaves, after its write.
            let reply_leaves = granted_at + Duration::from_millis(manager_write_ms);
            let lease_ttl_ms = u64::try_from(
                manager_expiry.saturating_duration_since(reply_leaves).as_millis(),
            ).unwrap_or(u64::MAX);
            let _received_at = reply_leaves + Duration::from_millis(transit_back_ms);
            let mut lease = LeaseClock::default();
            let expiry = lease.apply_grant(sent_at, lease_ttl_ms);
            prop_assert!(expiry <= manager_expiry);
        }
    }

    #[test]
    fn p3_3_every_grant_sets_the_expiry_even_when_it_shortens_it() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        lease.apply_grant(t0 + secs(10), 60_000);
        // An older reply overtaken by the newer one still moves the clock; it errs short.
        lease.apply_grant(t0 + secs(5), 60_000);
        assert_eq!(lease.expiry(), Some(t0 + secs(65)));
    }

    #[test]
    fn p3_1_absurd_ttl_is_clamped_and_never_overflows() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        let expiry = lease.apply_grant(t0, u64::MAX);
        assert_eq!(expiry, t0 + Duration::from_millis(MAX_LEASE_TTL_MS));
        let zero = lease.apply_grant(t0, 0);
        assert_eq!(zero, t0);
        assert!(!lease.is_live(t0), "a zero ttl is lapsed at once");
    }

    /// The clamp is for corrupt replies only: any lease a manager can be configured with, up to
    /// a day, is held in full (P3.2), or the executor would lapse and renew early.
    #[test]
    fn p3_2_a_lease_of_up_to_a_day_is_held_in_full() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        let day_ms = 24 * 60 * 60 * 1000;
        for ttl_ms in [60_000, 23 * 60 * 60 * 1000, day_ms] {
            let expiry = lease.apply_grant(t0, ttl_ms);
            assert_eq!(expiry, t0 + Duration::from_millis(ttl_ms), "{ttl_ms} ms");
        }
        let expiry = lease.apply_grant(t0, day_ms + 1);
        assert_eq!(expiry, t0 + Duration::from_millis(day_ms));
    }

    /// `unknown_executor`: no grant the manager made still stands, so the cleared lease has no
    /// expiry and is not live, while its length still paces the retries (P4.4, P6.1).
    #[test]
    fn p4_4_a_cleared_lease_has_no_expiry_and_keeps_its_length() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        lease.apply_grant(t0, 60_000);
        lease.clear();
        assert_eq!(lease.expiry(), None);
        assert!(!lease.is_live(t0));
        assert_eq!(lease.remaining(t0), Duration::ZERO);
        assert_eq!(lease.last_lease_ttl(), Some(secs(60)));
    }

    #[test]
    fn p3_5_next_renewal_after_a_third_of_the_remaining_lease() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        lease.apply_grant(t0, 60_000);
        assert_eq!(lease.next_renewal_at(t0), t0 + secs(20));
        // Applied late (the reply took 3 s): a third of what is left, not of the full lease.
        assert_eq!(lease.next_renewal_at(t0 + secs(3)), t0 + secs(3 + 19));
        // Lapsed or never granted: renew at once.
        assert_eq!(lease.next_renewal_at(t0 + secs(61)), t0 + secs(61));
        assert_eq!(LeaseClock::default().next_renewal_at(t0), t0);
    }

    #[test]
    fn p3_5_backoff_doubles_and_each_retry_lands_before_expiry() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        lease.apply_grant(t0, 4_000);
        let mut backoff = RetryBackoff::default();
        let mut now = t0 + Duration::from_millis(1_333);
        let mut delays = Vec::new();
        while lease.is_live(now) && delays.len() < 50 {
            let at = backoff.next_retry_at(now, &lease);
            if lease.remaining(now) >= RETRY_DELAY_MIN * 2 {
                assert!(
                    at < t0 + secs(4),
                    "retry at {:?} lands after expiry",
                    at - t0
                );
            } else {
                assert!(at <= t0 + secs(4) + RETRY_DELAY_MIN);
            }
            delays.push((at - now).as_millis());
            now = at;
        }
        assert!(delays.len() < 50, "converges on the expiry: {delays:?}");
        // 250, 500, then 1000 capped at half of the 1917 ms left, then halving on.
        assert_eq!(&delays[..3], &[250, 500, 958]);
        assert!(delays[3] <= 480, "{delays:?}");
        assert!(delays.iter().all(|&d| d >= 10), "{delays:?}");
    }

    #[test]
    fn p3_5_keeps_trying_after_a_lapse_at_the_capped_pace() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        lease.apply_grant(t0, 60_000);
        let mut backoff = RetryBackoff::default();
        let mut now = t0 + secs(61);
        let mut delays = Vec::new();
        for _ in 0..8 {
            let at = backoff.next_retry_at(now, &lease);
            delays.push(at - now);
            now = at;
        }
        assert_eq!(
            delays,
            [250, 500, 1_000, 2_000, 4_000, 5_000, 5_000, 5_000].map(Duration::from_millis)
        );
        backoff.reset();
        assert_eq!(
            backoff.next_retry_at(now, &lease),
            now + RETRY_DELAY_INITIAL
        );
    }

    /// P6.1 keeps a lapsed executor for one lease: with a lease shorter than the backoff cap,
    /// lapsed retries come at most a third of the lease apart, so at least two land within it
    /// (the fault suite saw executors with 3 s leases reaped while retrying 4-5 s apart). Also
    /// after the manager forgot the executor (`clear`).
    #[test]
    fn p6_1_lapsed_retries_are_paced_by_a_short_lease() {
        let t0 = Instant::now();
        let mut lease = LeaseClock::default();
        lease.apply_grant(t0, 3_000);
        let mut backoff = RetryBackoff::default();
        let mut now = t0 + secs(3);
        let mut delays = Vec::new();
        for _ in 0..6 {
            let at = backoff.next_retry_at(now, &lease);
            delays.push(at - now);
            now = at;
        }
        assert_eq!(
            delays,
            [250, 500, 1_000, 1_000, 1_000, 1_000].map(Duration::from_millis)
        );
        lease.clear();
        assert_eq!(backoff.next_retry_at(now, &lease), now + secs(1));
        // Before any grant there is no lease to pace by: the plain backoff.
        let mut fresh = RetryBackoff::default();
        let never_granted = LeaseClock::default();
        let delays: Vec<_> = (0..6)
            .map(|_| fresh.next_retry_at(now, &never_granted) - now)
            .collect();
        assert_eq!(
            delays,
            [250, 500, 1_000, 2_000, 4_000, 5_000].map(Duration::from_millis)
        );
    }
}

#[cfg(test)]
mod schedule_tests {
    //! The schedule alone, at explicit instants (P3.5, P4.4). The shell around it is tested
    //! against a scripted manager under a paused clock in `crate::tests::lease_loop`.

    use leasehold_api::problem::Problem;

    use super::*;

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
            schedule.after(CallOutcome::Granted, &lease, t0),
            NextCall::CallAt(t0 + secs(10))
        );
        // Applied 3 s after it was sent: a third of the 27 s left.
        assert_eq!(
            schedule.after(CallOutcome::Granted, &lease, t0 + secs(3)),
            NextCall::CallAt(t0 + secs(3 + 9))
        );
    }

    #[test]
    fn p3_5_failures_back_off_and_a_grant_resets_the_backoff() {
        let t0 = Instant::now();
        let lease = lease_from(t0, 30_000);
        let mut schedule = LeaseSchedule::default();
        let mut now = t0 + secs(10);
        let mut delays = Vec::new();
        for outcome in [
            CallOutcome::Failed,
            CallOutcome::ForeignGrant,
            CallOutcome::Failed,
        ] {
            let NextCall::CallAt(at) = schedule.after(outcome, &lease, now) else {
                panic!("a failure is retried");
            };
            delays.push(at - now);
            now = at;
        }
        // A grant for another executor moved nothing, so it backs off like a failure.
        assert_eq!(delays, [ms(250), ms(500), ms(1_000)]);
        assert!(matches!(
            schedule.after(CallOutcome::Granted, &lease, now),
            NextCall::CallAt(_)
        ));
        assert_eq!(
            schedule.after(CallOutcome::Failed, &lease, now),
            NextCall::CallAt(now + RETRY_DELAY_INITIAL),
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
            let NextCall::CallAt(at) = schedule.after(CallOutcome::Failed, &lease, now) else {
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
            schedule.after(CallOutcome::Failed, &lease, t0);
        }
        assert_eq!(
            schedule.after(CallOutcome::UnknownExecutor, &lease, t0),
            NextCall::Reregister
        );
        // The registration that follows fails: it starts from the initial delay.
        assert_eq!(
            schedule.after(CallOutcome::Failed, &LeaseClock::default(), t0),
            NextCall::CallAt(t0 + RETRY_DELAY_INITIAL)
        );
    }

    #[test]
    fn a_hopeless_registration_gives_up_with_its_reason() {
        let mut schedule = LeaseSchedule::default();
        assert_eq!(
            schedule.after(
                CallOutcome::Hopeless("bad address".into()),
                &LeaseClock::default(),
                Instant::now()
            ),
            NextCall::GiveUp("bad address".into())
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
                matches!(
                    CallOutcome::of_register_error(error),
                    CallOutcome::Hopeless(_)
                ),
                "{error}"
            );
            assert_eq!(
                CallOutcome::of_renew_error(error),
                CallOutcome::Failed,
                "{error}"
            );
        }
        // P8.3, P13.6: a manager low on disk, or a caller over its registration rate, refuses
        // for now; the executor registers again later rather than exit.
        let retried = [
            ClientError::Transport("partition".into()),
            problem(ErrorCode::Unavailable),
            problem(ErrorCode::UnknownExecutor),
            problem(ErrorCode::InsufficientStorage),
            problem(ErrorCode::RateLimited),
        ];
        for error in &retried {
            assert_eq!(
                CallOutcome::of_register_error(error),
                CallOutcome::Failed,
                "{error}"
            );
        }
        assert_eq!(
            CallOutcome::of_renew_error(&problem(ErrorCode::UnknownExecutor)),
            CallOutcome::UnknownExecutor
        );
        assert_eq!(
            CallOutcome::of_renew_error(&ClientError::Transport("partition".into())),
            CallOutcome::Failed
        );
    }
}
