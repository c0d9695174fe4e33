//! The admission log (`--event-log PATH`, PROTOCOL §9): one JSON line each time admission for a
//! shard starts or stops, appended and handed to the OS per line, so a process killed at any
//! point leaves every line it wrote. The exclusivity checks (I1) read these logs from several
//! executors on one machine and compare them on one clock, CLOCK_MONOTONIC.
//!
//! ```json
//! {"t_ns":123456789,"executor_id":"ex-4","shard":7,"epoch":3,"event":"start","reason":"assigned"}
//! ```
//!
//! A secondary's lines (PROTOCOL §19) carry `"role":"secondary"`; a primary's carry no role, so
//! the log of a namespace of one replica reads exactly as before. The checker applies I1 and I2
//! to the primary's intervals only.
//!
//! Once a namespace has resharded (PROTOCOL §20), each line also carries the `generation` and
//! `shard_count` of the layout its shard belongs to, so a checker maps each interval to the
//! keys it covers; at generation 0 both are absent.
//!
//! Stamps err on the safe side for the checker: a `start` is stamped no later than admission
//! began, a `stop` no earlier than it ended (for a lapse: the lease expiry itself).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use leasehold_api::wire::Role;
use nix::time::{clock_gettime, ClockId};
use serde::Serialize;
use tokio::time::Instant;

use crate::admission::{AdmissionChange, AdmissionEvent, AdmissionReason};

/// A CLOCK_MONOTONIC reading bracketed by two [`Instant`] readings, to convert instants to
/// CLOCK_MONOTONIC nanoseconds.
///
/// On Linux, `Instant` *is* CLOCK_MONOTONIC, but it exposes no raw value; the conversion goes
/// through a fresh reading of both. The true instant of the CLOCK_MONOTONIC reading lies
/// between `before` and `after`, which gives a lower and an upper bound for any instant.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicReading {
    before: Instant,
    monotonic_ns: i128,
    after: Instant,
}

/// Signed nanoseconds from `from` to `to`.
fn signed_ns_between(from: Instant, to: Instant) -> i128 {
    match to.checked_duration_since(from) {
        Some(forward) => i128::try_from(forward.as_nanos()).unwrap_or(i128::MAX),
        None => -i128::try_from(from.duration_since(to).as_nanos()).unwrap_or(i128::MAX),
    }
}

fn clamp_to_u64(ns: i128) -> u64 {
    u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
}

impl MonotonicReading {
    /// Reads CLOCK_MONOTONIC between two `Instant` readings.
    pub fn now() -> io::Result<Self> {
        let before = Instant::now();
        let spec = clock_gettime(ClockId::CLOCK_MONOTONIC).map_err(io::Error::from)?;
        let after = Instant::now();
        let monotonic_ns = i128::from(spec.tv_sec()) * 1_000_000_000 + i128::from(spec.tv_nsec());
        Ok(Self {
            before,
            monotonic_ns,
            after,
        })
    }

    /// CLOCK_MONOTONIC nanoseconds at the reading itself.
    pub fn monotonic_ns(&self) -> u64 {
        clamp_to_u64(self.monotonic_ns)
    }

    /// CLOCK_MONOTONIC nanoseconds of `at`, rounded so the result is not after `at` (for
    /// `start` stamps).
    pub fn ns_no_later_than(&self, at: Instant) -> u64 {
        clamp_to_u64(self.monotonic_ns - signed_ns_between(at, self.after))
    }

    /// CLOCK_MONOTONIC nanoseconds of `at`, rounded so the result is not before `at` (for
    /// `stop` stamps).
    pub fn ns_no_earlier_than(&self, at: Instant) -> u64 {
        clamp_to_u64(self.monotonic_ns - signed_ns_between(at, self.before))
    }

    /// The stamp for an event: starts rounded down, stops rounded up.
    pub fn stamp(&self, event: &AdmissionEvent) -> u64 {
        match event.change {
            AdmissionChange::Start => self.ns_no_later_than(event.at),
            AdmissionChange::Stop => self.ns_no_earlier_than(event.at),
        }
    }
}

/// One line of the log, in the documented shape (§9).
#[derive(Debug, Serialize)]
struct LogLine<'a> {
    t_ns: u64,
    executor_id: &'a str,
    shard: u32,
    epoch: u64,
    event: AdmissionChange,
    reason: AdmissionReason,
    /// Absent for the primary (P19.5).
    #[serde(skip_serializing_if = "Role::is_primary")]
    role: Role,
    /// The namespace's generation and shard count the shard belongs to (§20); both absent at
    /// generation 0, so the log of a namespace that never resharded is unchanged.
    #[serde(skip_serializing_if = "leasehold_api::wire::is_first_generation")]
    generation: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard_count: Option<u32>,
}

/// An open admission log.
#[derive(Debug)]
pub struct AdmissionLog {
    /// Opened for append: lines from earlier runs stay, and each write lands at the end.
    file: File,
    /// For error messages.
    path: PathBuf,
}

impl AdmissionLog {
    /// Opens (creating if needed) the log at `path` for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line per event, each in a single write so a kill cannot leave half a line
    /// followed by another, and flushes (§9: flushed per line).
    pub fn record(&mut self, events: &[AdmissionEvent]) -> io::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let reading = MonotonicReading::now()?;
        for event in events {
            let line = LogLine {
                t_ns: reading.stamp(event),
                executor_id: &event.executor_id,
                shard: event.shard,
                epoch: event.epoch,
                event: event.change,
                reason: event.reason,
                role: event.role,
                generation: event.layout.generation,
                shard_count: (event.layout.generation > 0).then_some(event.layout.shard_count),
            };
            let mut bytes = serde_json::to_vec(&line).map_err(io::Error::other)?;
            bytes.push(b'\n');
            self.file.write_all(&bytes)?;
            self.file.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn event(change: AdmissionChange, at: Instant) -> AdmissionEvent {
        AdmissionEvent {
            executor_id: "ex-3".into(),
            shard: 7,
            epoch: 2,
            role: Role::Primary,
            change,
            at,
            reason: AdmissionReason::Assigned,
            layout: crate::assignment::Layout {
                shard_count: 8,
                generation: 0,
            },
        }
    }

    #[test]
    fn readings_bracket_the_instant() {
        let earlier = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let reading = MonotonicReading::now().unwrap();
        let low = reading.ns_no_later_than(earlier);
        let high = reading.ns_no_earlier_than(earlier);
        assert!(low <= high);
        assert!(
            high < reading.monotonic_ns(),
            "the instant is ~2 ms in the past"
        );
        assert!(reading.monotonic_ns() - low >= 2_000_000);
        // A later CLOCK_MONOTONIC reading is later still.
        let direct = MonotonicReading::now().unwrap().monotonic_ns();
        assert!(direct >= reading.monotonic_ns());
    }

    #[test]
    fn future_instants_convert_too() {
        let reading = MonotonicReading::now().unwrap();
        let later = Instant::now() + Duration::from_secs(5);
        let stamp = reading.ns_no_earlier_than(later);
        assert!(stamp >= reading.monotonic_ns() + 4_900_000_000);
    }

    #[test]
    fn s9_lines_have_the_documented_shape_and_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let at = Instant::now();
        {
            let mut log = AdmissionLog::open(&path).unwrap();
            log.record(&[event(AdmissionChange::Start, at)]).unwrap();
        }
        let mut log = AdmissionLog::open(&path).unwrap();
        log.record(&[AdmissionEvent {
            reason: AdmissionReason::LeaseLapsed,
            ..event(AdmissionChange::Stop, at)
        }])
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        for (line, (change, reason)) in lines
            .iter()
            .zip([("start", "assigned"), ("stop", "lease_lapsed")])
        {
            let object = line.as_object().unwrap();
            let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(
                keys,
                ["epoch", "event", "executor_id", "reason", "shard", "t_ns"]
            );
            assert_eq!(line["executor_id"], "ex-3");
            assert_eq!(line["shard"], 7);
            assert_eq!(line["epoch"], 2);
            assert_eq!(line["event"], change);
            assert_eq!(line["reason"], reason);
        }
        let start = lines[0]["t_ns"].as_u64().unwrap();
        let stop = lines[1]["t_ns"].as_u64().unwrap();
        assert!(
            start <= stop,
            "same instant: start rounds down, stop rounds up"
        );
    }

    /// P19.5: a secondary's lines say so; the primary's carry no role, as before replicas.
    #[test]
    fn p19_5_a_secondarys_lines_carry_its_role() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let at = Instant::now();
        let mut log = AdmissionLog::open(&path).unwrap();
        log.record(&[
            event(AdmissionChange::Start, at),
            AdmissionEvent {
                role: Role::Secondary,
                shard: 4,
                ..event(AdmissionChange::Start, at)
            },
            AdmissionEvent {
                role: Role::Secondary,
                shard: 4,
                reason: AdmissionReason::Unassigned,
                ..event(AdmissionChange::Stop, at)
            },
        ])
        .unwrap();
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].get("role").is_none(), "{}", lines[0]);
        for line in &lines[1..] {
            assert_eq!(line["role"], "secondary", "{line}");
            assert_eq!(line["shard"], 4);
        }
        assert_eq!(lines[2]["event"], "stop");
    }
}
