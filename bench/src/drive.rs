//! Load shapes over any [`Renewer`]: an open-loop rate step (and a ramp of them), a closed loop
//! of one holder, and the protocol's own cadence (renew a third into the lease).
//!
//! Open loop: every holder renews on its own fixed schedule (period = holders / rate, phases
//! spread evenly), whether or not the system keeps up. Latency is measured from the scheduled
//! instant, not from when the request finally went out, so a system that falls behind shows it in
//! its latency instead of silently lowering the offered load (no coordinated omission). Each
//! holder has at most one renewal in flight, as a real executor does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use leasehold_executor::lease::{
    first_renewal_after, CallOutcome, LeaseClock, LeaseSchedule, NextCall,
};

use crate::fleet::{RenewFailure, Renewer};

/// Latencies of successful renewals plus the failures, of one measured window.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub latencies_us: Vec<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Samples {
    /// The latencies and failures of the renewals `keep` selects.
    pub fn of(renewals: &[Renewal], keep: impl Fn(&Renewal) -> bool) -> Self {
        let mut samples = Samples::default();
        for renewal in renewals.iter().filter(|renewal| keep(renewal)) {
            samples.record(renewal.result.clone());
        }
        samples
    }

    pub(crate) fn record(&mut self, result: Result<Duration, String>) {
        match result {
            Ok(latency) => self
                .latencies_us
                .push(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)),
            Err(failure) => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(failure);
                }
            }
        }
    }

    pub fn ok(&self) -> u64 {
        self.latencies_us.len() as u64
    }

    /// The `q` quantile (0..=1) in milliseconds, nearest rank; 0 without samples.
    pub fn quantile_ms(&mut self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        self.latencies_us.sort_unstable();
        let rank = ((q * self.latencies_us.len() as f64).ceil() as usize)
            .clamp(1, self.latencies_us.len());
        self.latencies_us[rank - 1] as f64 / 1000.0
    }
}

/// One open-loop step.
#[derive(Debug, Clone)]
pub struct StepResult {
    pub offered_per_s: f64,
    pub achieved_per_s: f64,
    pub ok: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub first_error: Option<String>,
}

impl StepResult {
    /// Whether the system kept up: no errors, and at least 95 % of the offered renewals done.
    pub fn keeps_up(&self) -> bool {
        self.errors == 0 && self.achieved_per_s >= 0.95 * self.offered_per_s
    }
}

/// How long after the window a straggling renewal may still finish before it counts as failed.
const STRAGGLER_GRACE: Duration = Duration::from_secs(5);

/// One renewal of an open-loop run that was scheduled inside the measured window.
#[derive(Debug, Clone)]
pub struct Renewal {
    pub scheduled: Instant,
    /// Scheduled instant → reply, or why it failed.
    pub result: Result<Duration, String>,
}

impl Renewal {
    /// Whether this renewal was waiting on the system at some moment in `[from, to]`: from its
    /// scheduled instant to its reply (a failure: to its scheduled instant only).
    pub fn overlaps(&self, from: Instant, to: Instant) -> bool {
        let done = self.scheduled + *self.result.as_ref().unwrap_or(&Duration::ZERO);
        self.scheduled <= to && done >= from
    }
}

/// What an open-loop run did: every renewal scheduled inside its measured window, and how many
/// renewals (whenever scheduled) completed inside it.
///
/// The completed count is the throughput. Counting the renewals scheduled in the window instead
/// would credit a system that falls behind with work it finishes after the window.
#[derive(Debug, Clone)]
pub struct OpenLoopRun {
    pub offered_per_s: f64,
    pub measure: Duration,
    pub renewals: Vec<Renewal>,
    pub completed_in_window: u64,
}

impl OpenLoopRun {
    /// The latencies and failures of the renewals `keep` selects.
    pub fn samples(&self, keep: impl Fn(&Renewal) -> bool) -> Samples {
        Samples::of(&self.renewals, keep)
    }

    /// The whole run as one step.
    pub fn step(&self) -> StepResult {
        let mut all = self.samples(|_| true);
        StepResult {
            offered_per_s: self.offered_per_s,
            achieved_per_s: self.completed_in_window as f64 / self.measure.as_secs_f64(),
            ok: all.ok(),
            errors: all.errors,
            p50_ms: all.quantile_ms(0.50),
            p99_ms: all.quantile_ms(0.99),
            max_ms: all.quantile_ms(1.0),
            first_error: all.first_error,
        }
    }
}

/// Offers `rate_per_s` renewals per second spread over every holder for `warmup + measure`.
/// Latency and errors are those of the renewals scheduled inside the measured window; the
/// achieved rate counts the renewals that completed inside it.
pub async fn open_loop<R: Renewer>(
    fleet: Arc<R>,
    rate_per_s: f64,
    warmup: Duration,
    measure: Duration,
) -> StepResult {
    open_loop_renewals(fleet, rate_per_s, warmup, measure)
        .await
        .step()
}

/// [`open_loop`], keeping every renewal of the measured window with its scheduled instant, for
/// scenarios that split the window by what else was happening (B8: snapshot builds).
pub async fn open_loop_renewals<R: Renewer>(
    fleet: Arc<R>,
    rate_per_s: f64,
    warmup: Duration,
    measure: Duration,
) -> OpenLoopRun {
    let holders = fleet.size().max(1);
    let period = Duration::from_secs_f64(holders as f64 / rate_per_s.max(0.001));
    let start = Instant::now() + Duration::from_millis(100);
    let window_start = start + warmup;
    let window_end = window_start + measure;
    let hard_end = window_end + STRAGGLER_GRACE;
    let mut tasks = JoinSet::new();
    for index in 0..holders {
        let fleet = fleet.clone();
        let phase = Duration::from_secs_f64(index as f64 / rate_per_s.max(0.001));
        tasks.spawn(async move {
            let mut renewals = Vec::new();
            let mut completed_in_window = 0;
            let mut scheduled = start + phase;
            while scheduled < window_end {
                tokio::time::sleep_until(scheduled).await;
                let result = match tokio::time::timeout_at(hard_end, fleet.renew(index)).await {
                    Ok(Ok(_)) => Ok(Instant::now() - scheduled),
                    Ok(Err(failure)) => Err(failure.to_string()),
                    Err(_) => Err("not done by the end".to_owned()),
                };
                let done = Instant::now();
                if result.is_ok() && done >= window_start && done <= window_end {
                    completed_in_window += 1;
                }
                if scheduled >= window_start {
                    renewals.push(Renewal { scheduled, result });
                }
                scheduled += period;
            }
            (renewals, completed_in_window)
        });
    }
    let mut run = OpenLoopRun {
        offered_per_s: rate_per_s,
        measure,
        renewals: Vec::new(),
        completed_in_window: 0,
    };
    while let Some(joined) = tasks.join_next().await {
        if let Ok((renewals, completed)) = joined {
            run.renewals.extend(renewals);
            run.completed_in_window += completed;
        }
    }
    run
}

/// Ramp settings for the highest rate that keeps p99 within a bound.
#[derive(Debug, Clone, Copy)]
pub struct Ramp {
    pub start_per_s: f64,
    pub factor: f64,
    pub max_steps: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub p99_bound_ms: f64,
}

/// What a ramp found.
#[derive(Debug, Clone, Default)]
pub struct RampResult {
    /// The highest step that kept up with its p99 within the bound (the B1 figure).
    pub within_bound: Option<StepResult>,
    /// The highest step that kept up at all (achieved ≥ 95 % of offered, no errors), whatever
    /// its latency: the capacity, which a loaded machine disturbs less than the p99.
    pub kept_up: Option<StepResult>,
}

/// Steps the offered rate up by `factor` while the system keeps up (at most `max_steps` steps).
pub async fn ramp<R: Renewer>(fleet: Arc<R>, ramp: Ramp, label: &str) -> RampResult {
    let mut result = RampResult::default();
    let mut rate = ramp.start_per_s;
    for _ in 0..ramp.max_steps {
        let step = open_loop(fleet.clone(), rate, ramp.warmup, ramp.measure).await;
        report_step(label, &step);
        if !step.keeps_up() {
            break;
        }
        if step.p99_ms <= ramp.p99_bound_ms {
            result.within_bound = Some(step.clone());
        }
        result.kept_up = Some(step);
        rate *= ramp.factor;
    }
    result
}

fn report_step(label: &str, step: &StepResult) {
    eprintln!(
        "  {label}: offered {:.0}/s achieved {:.0}/s p50 {:.2} ms p99 {:.2} ms max {:.1} ms errors {}{}",
        step.offered_per_s,
        step.achieved_per_s,
        step.p50_ms,
        step.p99_ms,
        step.max_ms,
        step.errors,
        step.first_error
            .as_ref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
}

/// Holder `index` renews back to back for `duration` (one executor, one request at a time).
pub async fn closed_loop<R: Renewer>(fleet: &R, index: usize, duration: Duration) -> Samples {
    let mut samples = Samples::default();
    let end = Instant::now() + duration;
    while Instant::now() < end {
        let sent = Instant::now();
        let result = fleet.renew(index).await.map(|_| sent.elapsed());
        samples.record(result.map_err(|failure| failure.to_string()));
    }
    samples
}

/// Counters of a [`Cadence`] run.
#[derive(Debug, Default)]
pub struct CadenceCounters {
    pub ok: AtomicU64,
    pub errors: AtomicU64,
    pub evictions: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl CadenceCounters {
    pub fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Every holder renews as the protocol schedules it, on the executor library's own schedule
/// (`LeaseSchedule`, P3.5): a third into what is left of the lease it was just told, backing off
/// while failing so a retry lands before the expiry, until stopped. `fallback_ttl` is the lease of
/// a system whose renewal tells none (etcd puts).
#[derive(Debug)]
pub struct Cadence {
    pub counters: Arc<CadenceCounters>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Cadence {
    pub fn start<R: Renewer>(fleet: Arc<R>, fallback_ttl: Duration) -> Self {
        Self::start_spread(fleet, fallback_ttl, true)
    }

    /// [`Cadence::start`] for holders that have just registered together (B12's storm): each
    /// renews first when the executor library would after a registration told `fallback_ttl`
    /// (P3.5: between a sixth and a third into it, by its executor id; a third for a holder
    /// without one), then a third into each lease it is told, as the library does.
    pub fn start_together<R: Renewer>(fleet: Arc<R>, fallback_ttl: Duration) -> Self {
        Self::start_spread(fleet, fallback_ttl, false)
    }

    fn start_spread<R: Renewer>(fleet: Arc<R>, fallback_ttl: Duration, spread: bool) -> Self {
        let counters = Arc::new(CadenceCounters::default());
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let holders = fleet.size();
        let third = fallback_ttl / 3;
        let fallback_ttl_ms = u64::try_from(fallback_ttl.as_millis()).unwrap_or(u64::MAX);
        for index in 0..holders {
            let fleet = fleet.clone();
            let counters = counters.clone();
            let mut stopped = stopped.clone();
            // Spread the first renewals over a third of the lease, as executors started at
            // different times would be.
            let offset = if spread {
                third.mul_f64(index as f64 / holders.max(1) as f64)
            } else {
                fleet
                    .executor_id(index)
                    .map_or(third, |id| first_renewal_after(fallback_ttl, id))
            };
            let mut next_at = Instant::now() + offset;
            tasks.spawn(async move {
                let mut lease = LeaseClock::default();
                let mut schedule = LeaseSchedule::default();
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep_until(next_at) => {}
                        _ = stopped.changed() => return,
                    }
                    let sent_at = Instant::now();
                    let outcome = match fleet.renew(index).await {
                        Ok(ttl_ms) => {
                            counters.ok.fetch_add(1, Ordering::Relaxed);
                            let ttl_ms = if ttl_ms == 0 { fallback_ttl_ms } else { ttl_ms };
                            lease.apply_grant(sent_at, ttl_ms);
                            CallOutcome::Granted
                        }
                        Err(failure) => {
                            counters.errors.fetch_add(1, Ordering::Relaxed);
                            if failure == RenewFailure::Evicted {
                                counters.evictions.fetch_add(1, Ordering::Relaxed);
                            }
                            counters
                                .first_error
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get_or_insert_with(|| failure.to_string());
                            CallOutcome::Failed
                        }
                    };
                    // A granted or failed renewal is always answered with a time to call again;
                    // a benchmark holder never re-registers or gives up.
                    match schedule.after(outcome, &lease, Instant::now()) {
                        NextCall::CallAt(at) => next_at = at,
                        NextCall::Reregister | NextCall::GiveUp(_) => return,
                    }
                }
            });
        }
        Self {
            counters,
            stop,
            tasks,
        }
    }

    pub async fn stop(mut self) -> Arc<CadenceCounters> {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        self.counters
    }
}
