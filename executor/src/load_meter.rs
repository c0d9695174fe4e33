//! Load reporting (PROTOCOL P15.1): what an embedder measures per shard, turned into the `loads`
//! its renewals carry.
//!
//! An embedder gets a [`LoadMeter`] from [`crate::ExecutorHandle::load_meter`] and either
//! records work as it is done ([`LoadMeter::record`], reported as a rate: the amount per second
//! over the interval since the previous report) or sets a gauge it computes itself
//! ([`LoadMeter::set`], reported instead of the rate while set). With
//! [`crate::ExecutorConfig::report_loads`] on, each renewal to a cluster at cluster version
//! [`leasehold_api::wire::CAPACITY_SCHEMA`] or later carries a load for every held shard; with
//! it off, renewals carry none and the manager counts the executor as not reporting.
//!
//! [`MeterCore`] is the pure part: amounts, gauges and instants in, loads out, so its arithmetic
//! is tested with explicit instants. It is bounded: at most one amount and one gauge per shard
//! below the shard count, and a report drops the entries of shards no longer held.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_api::wire::{ShardLoad, MAX_SHARD_LOAD};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::admission::Assignment;

/// Shortest interval a rate is computed over. Renewals are seconds apart, so this only guards
/// the division when two reports land at one instant (a paused clock, a retry with no backoff
/// left); the rate is then clamped to [`MAX_SHARD_LOAD`] like any other.
pub const MIN_RATE_INTERVAL: Duration = Duration::from_millis(1);

/// Why a measurement was refused; nothing is recorded then.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum LoadMeterError {
    /// The shard is not below the shard count, or no delivery has told the shard count yet (the
    /// executor holds nothing before that).
    #[error("shard {shard} is out of range (shard count {shard_count:?})")]
    ShardOutOfRange {
        /// The shard measured.
        shard: u32,
        /// The cluster's shard count, once known.
        shard_count: Option<u32>,
    },
    /// An amount or a gauge must be a finite, non-negative number; a gauge at most
    /// [`MAX_SHARD_LOAD`], the most the manager accepts.
    #[error("{value} is not a load: finite, non-negative, a gauge at most {MAX_SHARD_LOAD}")]
    NotALoad {
        /// The refused value.
        value: f64,
    },
}

/// What one report takes from the meter: the loads to send, and what to subtract once its
/// renewal is granted.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingReport {
    /// One load per held shard, ascending by shard.
    pub loads: Vec<ShardLoad>,
    /// The recorded amounts the rates were computed from, per shard.
    amounts: BTreeMap<u32, f64>,
    /// The shards held when the report was made; entries of every other shard are dropped.
    held: BTreeSet<u32>,
    /// The report's instant: the next interval starts here.
    at: Instant,
}

/// The meter's arithmetic, pure: no clock, no lock.
#[derive(Debug, Clone, PartialEq)]
pub struct MeterCore {
    /// Work recorded per shard since the last granted report.
    amounts: BTreeMap<u32, f64>,
    /// Gauges the embedder set, reported instead of rates.
    gauges: BTreeMap<u32, f64>,
    /// Where the current interval started: the last granted report, or the meter's creation.
    interval_start: Instant,
    /// The loads the last granted renewal carried, for `GET /v1/status`.
    last_reported: Option<Vec<ShardLoad>>,
}

fn check_shard(shard: u32, shard_count: Option<u32>) -> Result<(), LoadMeterError> {
    match shard_count {
        Some(count) if shard < count => Ok(()),
        _ => Err(LoadMeterError::ShardOutOfRange { shard, shard_count }),
    }
}

impl MeterCore {
    /// An empty meter whose first interval starts at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            amounts: BTreeMap::new(),
            gauges: BTreeMap::new(),
            interval_start: now,
            last_reported: None,
        }
    }

    /// Adds `amount` of work done for `shard`. Sums saturate at `f64::MAX` (and the rate at
    /// [`MAX_SHARD_LOAD`]) instead of becoming infinite.
    pub fn record(
        &mut self,
        shard: u32,
        amount: f64,
        shard_count: Option<u32>,
    ) -> Result<(), LoadMeterError> {
        check_shard(shard, shard_count)?;
        if !amount.is_finite() || amount < 0.0 {
            return Err(LoadMeterError::NotALoad { value: amount });
        }
        let sum = self.amounts.entry(shard).or_insert(0.0);
        *sum = (*sum + amount).min(f64::MAX);
        Ok(())
    }

    /// Sets `shard`'s gauge: reported as its load, instead of the rate, until unset or the shard
    /// is no longer held.
    pub fn set(
        &mut self,
        shard: u32,
        load: f64,
        shard_count: Option<u32>,
    ) -> Result<(), LoadMeterError> {
        check_shard(shard, shard_count)?;
        if !(0.0..=MAX_SHARD_LOAD).contains(&load) {
            return Err(LoadMeterError::NotALoad { value: load });
        }
        self.gauges.insert(shard, load);
        Ok(())
    }

    /// Removes `shard`'s gauge: its recorded work is reported as a rate again.
    pub fn unset(&mut self, shard: u32) {
        self.gauges.remove(&shard);
    }

    /// The report for a renewal sent at `now` claiming `held`: each held shard's gauge if set,
    /// else its recorded amount per second since the interval started (0 without any), within
    /// `0..=MAX_SHARD_LOAD`. Changes nothing: [`MeterCore::commit`] does once it is granted, so
    /// a renewal that fails loses no measurement.
    pub fn report(&self, held: impl IntoIterator<Item = u32>, now: Instant) -> PendingReport {
        let held: BTreeSet<u32> = held.into_iter().collect();
        let seconds = now
            .saturating_duration_since(self.interval_start)
            .max(MIN_RATE_INTERVAL)
            .as_secs_f64();
        let amounts: BTreeMap<u32, f64> = self
            .amounts
            .iter()
            .filter(|(shard, _)| held.contains(shard))
            .map(|(&shard, &amount)| (shard, amount))
            .collect();
        let loads = held
            .iter()
            .map(|&shard| {
                let load = match self.gauges.get(&shard) {
                    Some(&gauge) => gauge,
                    None => amounts.get(&shard).map_or(0.0, |amount| amount / seconds),
                };
                ShardLoad {
                    shard,
                    load: load.min(MAX_SHARD_LOAD),
                }
            })
            .collect();
        PendingReport {
            loads,
            amounts,
            held,
            at: now,
        }
    }

    /// Takes in a report whose renewal was granted: the work it counted is subtracted (work
    /// recorded since stays for the next one), the next interval starts at its instant, and
    /// every entry of a shard it did not hold is dropped. `sent` says whether the renewal carried
    /// the loads (the cluster takes them and reporting is on), for [`MeterCore::last_reported`].
    pub fn commit(&mut self, report: &PendingReport, sent: bool) {
        for (shard, counted) in &report.amounts {
            if let Some(amount) = self.amounts.get_mut(shard) {
                *amount = (*amount - counted).max(0.0);
            }
        }
        self.amounts
            .retain(|shard, amount| report.held.contains(shard) && *amount > 0.0);
        self.gauges.retain(|shard, _| report.held.contains(shard));
        self.interval_start = self.interval_start.max(report.at);
        if sent {
            self.last_reported = Some(report.loads.clone());
        }
    }

    /// The loads the last granted renewal carried; `None` until one did.
    pub fn last_reported(&self) -> Option<&[ShardLoad]> {
        self.last_reported.as_deref()
    }

    /// Shards with a recorded amount or a gauge: never more than the shard count.
    pub fn entries(&self) -> usize {
        self.amounts.len() + self.gauges.len()
    }
}

/// Measures the load of this executor's shards for its renewals (see the module docs). Cheap to
/// clone; every clone measures into the same meter.
#[derive(Debug, Clone)]
pub struct LoadMeter {
    core: Arc<Mutex<MeterCore>>,
    /// The executor's view, for the shard count measurements are bounded by.
    assignment: watch::Receiver<Assignment>,
}

impl LoadMeter {
    pub(crate) fn new(assignment: watch::Receiver<Assignment>) -> Self {
        Self {
            core: Arc::new(Mutex::new(MeterCore::new(Instant::now()))),
            assignment,
        }
    }

    fn lock(&self) -> MutexGuard<'_, MeterCore> {
        // Every section leaves the core whole before anything can panic (map inserts and
        // arithmetic), so a poisoned lock still guards a valid meter.
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn shard_count(&self) -> Option<u32> {
        self.assignment.borrow().shard_count
    }

    /// Adds `amount` of work done for `shard` (a request served, bytes written): reported as
    /// the amount per second over the interval between two renewals.
    pub fn record(&self, shard: u32, amount: f64) -> Result<(), LoadMeterError> {
        let shard_count = self.shard_count();
        self.lock().record(shard, amount, shard_count)
    }

    /// Sets `shard`'s load to a value the embedder computes itself (a queue length, a smoothed
    /// rate); reported instead of the recorded rate until [`LoadMeter::unset`].
    pub fn set(&self, shard: u32, load: f64) -> Result<(), LoadMeterError> {
        let shard_count = self.shard_count();
        self.lock().set(shard, load, shard_count)
    }

    /// Removes `shard`'s gauge.
    pub fn unset(&self, shard: u32) {
        self.lock().unset(shard);
    }

    /// The loads the last granted renewal carried (`GET /v1/status`).
    pub fn last_reported(&self) -> Option<Vec<ShardLoad>> {
        self.lock().last_reported().map(<[ShardLoad]>::to_vec)
    }

    pub(crate) fn report(
        &self,
        held: impl IntoIterator<Item = u32>,
        now: Instant,
    ) -> PendingReport {
        self.lock().report(held, now)
    }

    pub(crate) fn commit(&self, report: &PendingReport, sent: bool) {
        self.lock().commit(report, sent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARDS: Option<u32> = Some(8);

    fn loads(entries: &[(u32, f64)]) -> Vec<ShardLoad> {
        entries
            .iter()
            .map(|&(shard, load)| ShardLoad { shard, load })
            .collect()
    }

    /// P15.1: recorded work is reported as a rate over the interval since the previous granted
    /// report, one load per held shard (0 for a held shard with no work), ascending.
    #[test]
    fn p15_1_recorded_work_is_reported_as_a_rate_per_held_shard() {
        let t0 = Instant::now();
        let mut meter = MeterCore::new(t0);
        for _ in 0..30 {
            meter.record(2, 1.0, SHARDS).unwrap();
        }
        meter.record(5, 4.5, SHARDS).unwrap();
        let report = meter.report([5, 2, 7], t0 + Duration::from_secs(10));
        assert_eq!(report.loads, loads(&[(2, 3.0), (5, 0.45), (7, 0.0)]));

        meter.commit(&report, true);
        for _ in 0..8 {
            meter.record(2, 1.0, SHARDS).unwrap();
        }
        let next = meter.report([2, 5, 7], t0 + Duration::from_secs(14));
        assert_eq!(
            next.loads,
            loads(&[(2, 2.0), (5, 0.0), (7, 0.0)]),
            "the next interval starts at the granted report and counts only new work"
        );
    }

    /// A renewal that fails is not committed: its work is counted by the next report, over the
    /// whole interval, and work recorded while a renewal was in flight is not lost either.
    #[test]
    fn p15_1_a_report_changes_nothing_until_its_renewal_is_granted() {
        let t0 = Instant::now();
        let mut meter = MeterCore::new(t0);
        meter.record(1, 20.0, SHARDS).unwrap();
        let failed = meter.report([1], t0 + Duration::from_secs(10));
        assert_eq!(failed.loads, loads(&[(1, 2.0)]));
        meter.record(1, 10.0, SHARDS).unwrap();
        let retried = meter.report([1], t0 + Duration::from_secs(15));
        assert_eq!(retried.loads, loads(&[(1, 2.0)]), "30 over 15 s");
        meter.record(1, 6.0, SHARDS).unwrap();
        meter.commit(&retried, true);
        let next = meter.report([1], t0 + Duration::from_secs(18));
        assert_eq!(
            next.loads,
            loads(&[(1, 2.0)]),
            "the 6 recorded in flight, over 3 s"
        );
    }

    /// A gauge is reported instead of the rate while set; unset, the rate again.
    #[test]
    fn p15_1_a_gauge_is_reported_instead_of_the_rate() {
        let t0 = Instant::now();
        let mut meter = MeterCore::new(t0);
        meter.record(3, 100.0, SHARDS).unwrap();
        meter.set(3, 42.0, SHARDS).unwrap();
        meter.set(4, 7.0, SHARDS).unwrap();
        let at = t0 + Duration::from_secs(10);
        assert_eq!(
            meter.report([3, 4], at).loads,
            loads(&[(3, 42.0), (4, 7.0)])
        );
        meter.unset(3);
        assert_eq!(
            meter.report([3, 4], at).loads,
            loads(&[(3, 10.0), (4, 7.0)])
        );
    }

    /// Bounded (P15.1): only shards below the shard count are measured, and a granted report
    /// drops the amounts and gauges of shards no longer held.
    #[test]
    fn p15_1_the_meter_holds_at_most_the_held_shards_after_a_report() {
        let t0 = Instant::now();
        let mut meter = MeterCore::new(t0);
        for shard in 0..8 {
            meter.record(shard, 1.0, SHARDS).unwrap();
            meter.set(shard, 1.0, SHARDS).unwrap();
        }
        assert_eq!(
            meter.record(8, 1.0, SHARDS),
            Err(LoadMeterError::ShardOutOfRange {
                shard: 8,
                shard_count: SHARDS
            })
        );
        assert!(matches!(
            meter.set(0, 1.0, None),
            Err(LoadMeterError::ShardOutOfRange {
                shard_count: None,
                ..
            })
        ));
        assert_eq!(meter.entries(), 16);
        let report = meter.report([1, 6], t0 + Duration::from_secs(1));
        assert_eq!(report.loads.len(), 2);
        meter.commit(&report, true);
        assert_eq!(
            meter.entries(),
            2,
            "the gauges of 1 and 6; their amounts were all reported"
        );
        meter.unset(1);
        meter.unset(6);
        meter.record(6, 1.0, SHARDS).unwrap();
        let report = meter.report([6], t0 + Duration::from_secs(2));
        meter.commit(&report, true);
        assert_eq!(meter.entries(), 0);
    }

    /// What the manager refuses is never sent: amounts must be finite and non-negative, gauges
    /// within `0..=MAX_SHARD_LOAD`, and rates are clamped to it however fast the work came.
    #[test]
    fn p15_1_i6_loads_stay_within_what_the_manager_accepts() {
        let t0 = Instant::now();
        let mut meter = MeterCore::new(t0);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(meter.record(0, bad, SHARDS).is_err(), "{bad}");
            assert!(meter.set(0, bad, SHARDS).is_err(), "{bad}");
        }
        assert!(meter.set(0, MAX_SHARD_LOAD * 2.0, SHARDS).is_err());
        assert_eq!(meter.entries(), 0, "a refused value records nothing");
        meter.record(0, f64::MAX, SHARDS).unwrap();
        meter.record(0, f64::MAX, SHARDS).unwrap();
        meter.record(1, 5.0, SHARDS).unwrap();
        // The same instant as the meter's start: the interval is floored, not zero.
        let report = meter.report([0, 1], t0);
        assert_eq!(report.loads, loads(&[(0, MAX_SHARD_LOAD), (1, 5_000.0)]));
        assert!(report
            .loads
            .iter()
            .all(|entry| (0.0..=MAX_SHARD_LOAD).contains(&entry.load)));
    }

    /// The status shows the loads of the last renewal that carried them, not of one that did
    /// not (reporting off, or a cluster below schema 12).
    #[test]
    fn the_last_reported_loads_are_those_a_granted_renewal_carried() {
        let t0 = Instant::now();
        let mut meter = MeterCore::new(t0);
        meter.record(0, 2.0, SHARDS).unwrap();
        let not_sent = meter.report([0], t0 + Duration::from_secs(1));
        meter.commit(&not_sent, false);
        assert_eq!(meter.last_reported(), None);
        meter.record(0, 4.0, SHARDS).unwrap();
        let sent = meter.report([0], t0 + Duration::from_secs(3));
        meter.commit(&sent, true);
        assert_eq!(meter.last_reported(), Some(&loads(&[(0, 2.0)])[..]));
    }
}
