//! Registration limits (PROTOCOL P13.6, P15.1; the security review's finding 2): how large a
//! capacity a registration may ask for, and how often one caller may register.
//!
//! - `--max-capacity` bounds the weight a registration asks for (default 1 000: capacities are
//!   relative to the other executors'). It is checked in `executors::registration`, on the node
//!   that proposes (the leader; a follower forwards the request unread), so the leader's value
//!   decides. Executors already registered keep their capacity.
//! - A token bucket per caller bounds registrations (`--registration-rate` per second,
//!   `--registration-burst`). It runs on the node the caller connected to, before the body is
//!   read or the request forwarded. Under TLS a request a manager forwarded (its certificate
//!   proved it, `authorize`) was limited where it arrived and is not limited again; without TLS
//!   nothing proves who forwarded, so the leader limits it again, under the forwarding
//!   manager's address.
//!
//! The caller is the TLS peer's leaf certificate together with its address, or without TLS the
//! address alone; an IPv6 address counts by its /64, which one host can fill. (All executors may
//! share one certificate, docs/SECURITY.md: the certificate alone would make the whole fleet one
//! caller.) Under TLS a certificate's registrations from all its addresses together have a
//! bucket of their own besides, [`CERTIFICATE_FACTOR`] times a caller's, so a holder of the
//! certificate does not multiply the limit by the addresses it controls.
//!
//! At most [`MAX_CALLERS`] buckets are kept. A bucket that has refilled completely is the same as
//! none, so it is dropped when room is needed and forgetting it grants nothing. When every kept
//! bucket is still refilling, a new caller is refused (`429`) until one has refilled, so the
//! table never grows past its bound and nobody is let through unlimited.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::RETRY_AFTER;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasehold_api::problem::ErrorCode;
use leasehold_api::serve::PeerRole;
use leasehold_api::tls::Role;

use super::HttpError;

/// Most callers whose buckets are kept at once (about 100 bytes each).
pub const MAX_CALLERS: usize = 4_096;
/// Default `--max-capacity`.
pub const DEFAULT_MAX_CAPACITY: u32 = 1_000;
/// Default `--registration-rate` (registrations per second, per caller).
pub const DEFAULT_REGISTRATION_RATE: u32 = 32;
/// Default `--registration-burst` (registrations at once, per caller).
pub const DEFAULT_REGISTRATION_BURST: u32 = 256;
/// A certificate's registrations from every address together may be this many times one
/// caller's rate and burst: a fleet on a few hosts sharing one certificate starts together, a
/// holder of the certificate with many addresses does not multiply the limit by them.
pub const CERTIFICATE_FACTOR: u32 = 4;
/// Largest `--registration-rate` and `--registration-burst`.
pub const MAX_REGISTRATION_LIMIT: u32 = 1_000_000;
/// Default `--max-executors-per-namespace`: the executors a namespace without a bound of its own
/// may hold (P18.1), above what one manager serves connections to (half its descriptors,
/// at most 16 384) and below what would make its state a burden.
pub const DEFAULT_MAX_EXECUTORS_PER_NAMESPACE: u32 = 16_384;

/// The registration flags, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrationSettings {
    /// `--max-capacity`: the largest capacity a registration may ask for (P15.1).
    pub max_capacity: u32,
    /// `--registration-rate` and `--registration-burst`.
    pub limits: RateLimits,
    /// `--max-executors-per-namespace`: the bound of a namespace that sets none (P18.1).
    pub max_executors_per_namespace: u32,
}

impl Default for RegistrationSettings {
    fn default() -> Self {
        Self {
            max_capacity: DEFAULT_MAX_CAPACITY,
            limits: RateLimits {
                per_second: DEFAULT_REGISTRATION_RATE,
                burst: DEFAULT_REGISTRATION_BURST,
            },
            max_executors_per_namespace: DEFAULT_MAX_EXECUTORS_PER_NAMESPACE,
        }
    }
}

/// A token bucket's parameters: `burst` tokens at most, refilled at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    pub per_second: u32,
    pub burst: u32,
}

impl RateLimits {
    /// The limits of one certificate's registrations from all its addresses together.
    pub fn of_a_certificate(self) -> Self {
        Self {
            per_second: self.per_second.saturating_mul(CERTIFICATE_FACTOR),
            burst: self.burst.saturating_mul(CERTIFICATE_FACTOR),
        }
    }

    fn burst(self) -> f64 {
        f64::from(self.burst.max(1))
    }

    fn rate(self) -> f64 {
        f64::from(self.per_second.max(1))
    }
}

/// One caller's bucket. Pure: every method takes the time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A bucket with every token, as a caller not seen before has.
    pub fn full(limits: RateLimits, now: Instant) -> Self {
        Self {
            tokens: limits.burst(),
            at: now,
        }
    }

    /// Tokens at `now` (a time before the last one counts as the last one).
    fn tokens_at(&self, limits: RateLimits, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * limits.rate()).min(limits.burst())
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, limits: RateLimits, now: Instant) -> Result<(), Duration> {
        let tokens = self.tokens_at(limits, now);
        self.at = self.at.max(now);
        if tokens >= 1.0 {
            self.tokens = tokens - 1.0;
            Ok(())
        } else {
            self.tokens = tokens;
            Err(Duration::from_secs_f64((1.0 - tokens) / limits.rate()))
        }
    }

    /// How long until the bucket is full again (zero when it is): then it is the same as none.
    pub fn full_in(&self, limits: RateLimits, now: Instant) -> Duration {
        let missing = limits.burst() - self.tokens_at(limits, now);
        Duration::from_secs_f64(missing.max(0.0) / limits.rate())
    }
}

/// Who a registration counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallerKey {
    /// Under TLS: the SHA-256 of the leaf certificate, and the address it came from.
    Certificate {
        sha256: [u8; 32],
        address: Option<IpAddr>,
    },
    /// Without TLS: the address (an IPv6 address by its /64). `None`: no address is known (a
    /// router served without a listener, in tests).
    Address(Option<IpAddr>),
}

impl CallerKey {
    pub fn new(certificate_sha256: Option<[u8; 32]>, address: Option<IpAddr>) -> Self {
        let address = address.map(leasehold_api::connection_budget::source_host);
        match certificate_sha256 {
            Some(sha256) => CallerKey::Certificate { sha256, address },
            None => CallerKey::Address(address),
        }
    }
}

/// Why a registration was refused here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This caller's bucket is empty: a token is there in `retry_after`.
    Rate { retry_after: Duration },
    /// [`MAX_CALLERS`] other callers' buckets are all refilling: the first is full in
    /// `retry_after`.
    Callers { retry_after: Duration },
    /// The certificate's registrations from all its addresses together are at their limit.
    Certificate { retry_after: Duration },
}

impl Refusal {
    pub fn retry_after(self) -> Duration {
        match self {
            Refusal::Rate { retry_after }
            | Refusal::Callers { retry_after }
            | Refusal::Certificate { retry_after } => retry_after,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Refusal::Rate { .. } => "rate",
            Refusal::Callers { .. } => "callers",
            Refusal::Certificate { .. } => "certificate",
        }
    }
}

/// The buckets of every caller seen recently, at most `max_callers` of them. Pure.
#[derive(Debug)]
pub struct RateLimiter {
    limits: RateLimits,
    max_callers: usize,
    buckets: HashMap<CallerKey, TokenBucket>,
}

impl RateLimiter {
    pub fn new(limits: RateLimits, max_callers: usize) -> Self {
        Self {
            limits,
            max_callers: max_callers.max(1),
            buckets: HashMap::new(),
        }
    }

    /// Callers whose buckets are kept.
    pub fn callers(&self) -> usize {
        self.buckets.len()
    }

    /// Takes a token of `key`'s at `now`.
    pub fn check(&mut self, key: CallerKey, now: Instant) -> Result<(), Refusal> {
        let limits = self.limits;
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.max_callers {
            // Full buckets are the same as none: dropping them forgets nothing.
            self.buckets
                .retain(|_, bucket| bucket.full_in(limits, now) > Duration::ZERO);
            if self.buckets.len() >= self.max_callers {
                let retry_after = self
                    .buckets
                    .values()
                    .map(|bucket| bucket.full_in(limits, now))
                    .min()
                    .unwrap_or(Duration::ZERO);
                return Err(Refusal::Callers { retry_after });
            }
        }
        self.buckets
            .entry(key)
            .or_insert_with(|| TokenBucket::full(limits, now))
            .take(limits, now)
            .map_err(|retry_after| Refusal::Rate { retry_after })
    }
}

/// Both limits a registration passes: its caller's, and under TLS its certificate's from all
/// its addresses together. Pure.
#[derive(Debug)]
pub struct RegistrationLimiter {
    per_caller: RateLimiter,
    per_certificate: RateLimiter,
}

impl RegistrationLimiter {
    pub fn new(limits: RateLimits, max_callers: usize) -> Self {
        Self {
            per_caller: RateLimiter::new(limits, max_callers),
            per_certificate: RateLimiter::new(limits.of_a_certificate(), max_callers),
        }
    }

    /// Takes a token of `key`'s, and under TLS one of its certificate's, at `now`.
    pub fn check(&mut self, key: CallerKey, now: Instant) -> Result<(), Refusal> {
        self.per_caller.check(key, now)?;
        if let CallerKey::Certificate { sha256, .. } = key {
            let every_address = CallerKey::Certificate {
                sha256,
                address: None,
            };
            self.per_certificate
                .check(every_address, now)
                .map_err(|refusal| match refusal {
                    Refusal::Rate { retry_after } => Refusal::Certificate { retry_after },
                    other => other,
                })?;
        }
        Ok(())
    }
}

/// The layer's state: the limiter, shared by every connection of this listener.
#[derive(Debug, Clone)]
pub struct RegistrationGate(Arc<Mutex<RegistrationLimiter>>);

impl RegistrationGate {
    pub fn new(limits: RateLimits) -> Self {
        Self(Arc::new(Mutex::new(RegistrationLimiter::new(
            limits,
            MAX_CALLERS,
        ))))
    }

    fn check(&self, key: CallerKey, now: Instant) -> Result<(), Refusal> {
        let mut limiter = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        limiter.check(key, now)
    }
}

/// Whole seconds for `Retry-After` (RFC 9110 §10.2.3): rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// `429 rate_limited` with `Retry-After` the seconds until the caller may register again.
pub fn rate_limited(refusal: Refusal) -> Response {
    let secs = retry_after_secs(refusal.retry_after());
    let detail = match refusal {
        Refusal::Rate { .. } => format!(
            "too many registrations from this caller (--registration-rate, \
             --registration-burst); retry in {secs} s (PROTOCOL P13.6)"
        ),
        Refusal::Callers { .. } => format!(
            "too many callers are registering at once (at most {MAX_CALLERS} are tracked); \
             retry in {secs} s (PROTOCOL P13.6)"
        ),
        Refusal::Certificate { .. } => format!(
            "too many registrations with this certificate from all its addresses together \
             ({CERTIFICATE_FACTOR} times --registration-rate and --registration-burst); retry \
             in {secs} s (PROTOCOL P13.6)"
        ),
    };
    let mut response = HttpError::new(ErrorCode::RateLimited, detail).into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// The layer in front of `POST /v1/executors` (`from_fn_with_state(gate, limit_registrations)`),
/// inside `authorize` and outside the forwarding and the body: a refused registration is neither
/// read, forwarded nor proposed.
pub async fn limit_registrations(
    State(gate): State<RegistrationGate>,
    request: Request,
    next: Next,
) -> Response {
    let peer = request.extensions().get::<PeerRole>();
    // Only a manager's certificate gets past `authorize` on this route with a manager's role, and
    // only forwarding a caller's request it limited itself (P13.3, `effective_role`).
    if peer.is_some_and(|peer| matches!(peer.role(), Ok(Role::Manager { .. }))) {
        return next.run(request).await;
    }
    let address = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip());
    let key = CallerKey::new(peer.map(PeerRole::certificate_sha256), address);
    match gate.check(key, Instant::now()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            metrics::counter!("leasehold_registrations_rate_limited_total", "reason" => refusal.label())
                .increment(1);
            tracing::debug!(?address, ?refusal, "registration rate-limited");
            rate_limited(refusal)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RateLimits = RateLimits {
        per_second: 2,
        burst: 4,
    };

    fn key(last: u8) -> CallerKey {
        CallerKey::new(None, Some(IpAddr::from([10, 0, 0, last])))
    }

    /// P13.6: a caller registers `burst` times at once, then is refused with the time until
    /// its next token; tokens come back at the rate, never above the burst.
    #[test]
    fn p13_6_a_bucket_takes_its_burst_then_refuses_until_it_refills() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(LIMITS, start);
        for _ in 0..4 {
            assert_eq!(bucket.take(LIMITS, start), Ok(()));
        }
        assert_eq!(
            bucket.take(LIMITS, start),
            Err(Duration::from_millis(500)),
            "one token every 1/rate s"
        );
        assert_eq!(bucket.full_in(LIMITS, start), Duration::from_secs(2));
        let later = start + Duration::from_millis(250);
        let wait = bucket.take(LIMITS, later).unwrap_err();
        assert_eq!(wait, Duration::from_millis(250));
        // 500 ms: one token.
        let one = start + Duration::from_millis(500);
        assert_eq!(bucket.take(LIMITS, one), Ok(()));
        assert!(bucket.take(LIMITS, one).is_err());
        // An hour later: the burst, not 7 200 tokens.
        let much_later = one + Duration::from_secs(3_600);
        assert_eq!(bucket.full_in(LIMITS, much_later), Duration::ZERO);
        for _ in 0..4 {
            assert_eq!(bucket.take(LIMITS, much_later), Ok(()));
        }
        assert!(bucket.take(LIMITS, much_later).is_err());
        // A time before the bucket's own (clocks are not compared backwards): nothing refills.
        assert!(bucket.take(LIMITS, start).is_err());
    }

    /// P13.6: each caller has its own bucket; an IPv6 host counts by its /64.
    #[test]
    fn p13_6_registrations_are_limited_per_caller() {
        let now = Instant::now();
        let mut limiter = RateLimiter::new(LIMITS, 16);
        for _ in 0..4 {
            assert_eq!(limiter.check(key(1), now), Ok(()));
        }
        assert!(matches!(
            limiter.check(key(1), now),
            Err(Refusal::Rate { .. })
        ));
        assert_eq!(limiter.check(key(2), now), Ok(()), "another caller");
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::ffff:2".parse().unwrap();
        assert_eq!(CallerKey::new(None, Some(a)), CallerKey::new(None, Some(b)));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(CallerKey::new(None, Some(mapped)), key(1));
        let certificate = CallerKey::new(Some([1; 32]), Some(IpAddr::from([10, 0, 0, 1])));
        assert_ne!(certificate, key(1));
        assert_ne!(
            certificate,
            CallerKey::new(Some([2; 32]), Some(IpAddr::from([10, 0, 0, 1])))
        );
        assert_eq!(limiter.check(certificate, now), Ok(()));
    }

    /// P13.6: the table holds at most `max_callers` buckets. Full ones make room (forgetting
    /// them grants nothing); while every kept bucket is refilling a new caller is refused, with
    /// the time until one is full, and let in once one is.
    #[test]
    fn p13_6_the_bucket_table_is_bounded_and_never_forgets_a_refilling_caller() {
        let start = Instant::now();
        let mut limiter = RateLimiter::new(LIMITS, 3);
        for last in 1..=3 {
            assert_eq!(limiter.check(key(last), start), Ok(()));
        }
        assert_eq!(limiter.callers(), 3);
        // Each of the three has used one token: full again in 1/rate = 500 ms.
        assert_eq!(
            limiter.check(key(4), start),
            Err(Refusal::Callers {
                retry_after: Duration::from_millis(500)
            })
        );
        assert_eq!(limiter.callers(), 3);
        // A known caller is still served from its own bucket.
        assert_eq!(limiter.check(key(1), start), Ok(()));
        // 500 ms on, callers 2 and 3 are full (1 is not): they make room.
        let later = start + Duration::from_millis(500);
        assert_eq!(limiter.check(key(4), later), Ok(()));
        assert_eq!(limiter.callers(), 2, "1 and 4");
        for _ in 0..3 {
            assert_eq!(limiter.check(key(4), later), Ok(()));
        }
        assert!(
            limiter.check(key(4), later).is_err(),
            "caller 4 started with a burst, not more"
        );
        // Caller 1 was kept with what it had used: 2 of 4 tokens, 1 back by now.
        assert_eq!(limiter.check(key(1), later), Ok(()));
        assert_eq!(limiter.check(key(1), later), Ok(()));
        assert_eq!(limiter.check(key(1), later), Ok(()));
        assert!(limiter.check(key(1), later).is_err());
        // Never above the bound, however many callers come.
        for last in 10..200 {
            let _ = limiter.check(key(last), later);
            assert!(limiter.callers() <= 3);
        }
    }

    /// P13.6 (issue 55, finding 9): one certificate's registrations from many addresses are
    /// limited together, at `CERTIFICATE_FACTOR` times a caller's burst; another certificate,
    /// and plaintext callers (no certificate to count), are not held up by it.
    #[test]
    fn p13_6_a_certificate_does_not_multiply_the_limit_by_its_addresses() {
        let now = Instant::now();
        let mut limiter = RegistrationLimiter::new(LIMITS, 64);
        let from = |sha: u8, last: u8| {
            CallerKey::new(Some([sha; 32]), Some(IpAddr::from([127, 0, 0, last])))
        };
        let per_certificate = (LIMITS.burst * CERTIFICATE_FACTOR) as usize;
        let mut granted = 0;
        for last in 1..=20 {
            for _ in 0..LIMITS.burst {
                if limiter.check(from(1, last), now).is_ok() {
                    granted += 1;
                }
            }
        }
        assert_eq!(
            granted, per_certificate,
            "20 addresses, one certificate's burst"
        );
        assert!(matches!(
            limiter.check(from(1, 30), now),
            Err(Refusal::Certificate { .. })
        ));
        assert_eq!(
            limiter.check(from(2, 1), now),
            Ok(()),
            "another certificate"
        );
        for last in 1..=20 {
            assert_eq!(
                limiter.check(key(last), now),
                Ok(()),
                "plaintext counts by address"
            );
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        let response = rate_limited(Refusal::Rate {
            retry_after: Duration::from_millis(2_500),
        });
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()[RETRY_AFTER], "3");
    }

    /// The `reason` label of `leasehold_registrations_rate_limited_total` takes the values
    /// docs/OPERATIONS.md lists, one per refusal.
    #[test]
    fn each_refusal_is_counted_under_its_documented_reason() {
        let retry_after = Duration::from_secs(1);
        assert_eq!(Refusal::Rate { retry_after }.label(), "rate");
        assert_eq!(Refusal::Callers { retry_after }.label(), "callers");
        assert_eq!(Refusal::Certificate { retry_after }.label(), "certificate");
    }
}
