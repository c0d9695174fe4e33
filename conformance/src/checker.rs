//! The invariant checker over executors' admission logs (PROTOCOL §9, §12).
//!
//! Every executor started by a test (or by the conformance kit) writes `--event-log` on this machine, each line stamped on
//! CLOCK_MONOTONIC, which every process here shares (network namespaces do not change it), so
//! the logs of all executors merge into one timeline per shard. Over that timeline:
//!
//! - **I1** (P5.2): no two admission intervals of one shard overlap. A stop is stamped no
//!   earlier than admission really ended (for a lapse: the lease expiry itself), a start no later
//!   than it began, so an overlap in the log is an overlap in fact. An executor that fenced
//!   itself while paused (SIGSTOP) logs its stop at the expiry instant when it wakes, so its stop
//!   must still come before the next holder's start.
//! - **I2** (fencing): successive holders of a shard have strictly increasing epochs, one
//!   executor's epochs never go back, and no epoch is held by two executors.
//!
//! Both are the primary's (PROTOCOL P19.1, P19.5): a secondary's intervals (lines with
//! `"role":"secondary"`) are read, paired and counted, but judged by neither, since secondaries
//! of one shard admit side by side with its primary by design. That a secondary admits only while
//! its lease is live (P19.1) is not checked here: no log shows the lease.
//!
//! Once a namespace reshards (PROTOCOL §20) a shard number names other keys in each layout, so
//! both are judged per key instead: every interval covers the keys whose hash modulo its
//! layout's shard count is its shard, and the layouts nest (each count is the largest one
//! divided by a power of two), so the keys fall into the classes of the largest count, and each
//! class is judged over every interval that covers it, whatever its layout. Lines of generation 0
//! carry no shard count; the caller gives it ([`check_in`]).
//!
//! A process killed with SIGKILL cannot log its stops; its open intervals end at an upper bound
//! on its death the test supplies ([`ExecutorLog::ended_at_ns`]). An executor still running has
//! open intervals that last forever: anything after them overlaps.
//!
//! The checker reports every violation it finds, not only the first, so one broken run shows
//! the whole picture.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use crate::admission_log::{
    admission_intervals, read_admission_log, AdmissionInterval, ExecutorLog,
};

/// Which invariant a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// Two admission intervals of one shard overlap.
    I1Overlap,
    /// The next holder's epoch is not above the previous holder's.
    I2EpochNotIncreasing,
    /// One executor's epoch for a shard went back.
    I2EpochWentBack,
    /// One epoch held by two executors.
    I2EpochSharedByTwo,
}

impl Rule {
    /// `I1` or `I2`.
    pub fn invariant(self) -> &'static str {
        match self {
            Rule::I1Overlap => "I1",
            Rule::I2EpochNotIncreasing | Rule::I2EpochWentBack | Rule::I2EpochSharedByTwo => "I2",
        }
    }
}

/// One broken rule, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    /// The shard, or, judged per key (§20), the class of keys whose hash modulo `of` is it.
    pub shard: u32,
    /// The largest shard count of the layouts judged per key; `None` when judged per shard.
    pub of: Option<u32>,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.of {
            None => format!("shard {}", self.shard),
            Some(of) => format!("keys whose hash mod {of} is {}", self.shard),
        };
        write!(
            f,
            "{} ({:?}): {what}: {}",
            self.rule.invariant(),
            self.rule,
            self.detail
        )
    }
}

/// What the checker saw and what it found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// The primary's intervals, which I1 and I2 judge.
    pub intervals: usize,
    /// Secondaries' intervals (P19.5): read and paired, judged by neither I1 nor I2.
    pub secondary_intervals: usize,
    /// Shards judged, or, once a layout changed, classes of keys (§20).
    pub shards: usize,
    /// Successive intervals of one shard (or key class) held by different executors.
    pub handoffs: usize,
    /// The generations the primary's intervals were of: 1 for a namespace that never resharded.
    pub generations: usize,
    pub violations: Vec<Violation>,
}

impl CheckReport {
    /// `Err` listing every violation (each line starts with its invariant, `I1` or `I2`).
    pub fn into_result(self) -> Result<Self, String> {
        if self.violations.is_empty() {
            Ok(self)
        } else {
            Err(self
                .violations
                .iter()
                .map(Violation::to_string)
                .collect::<Vec<_>>()
                .join("\n"))
        }
    }

    /// Violations of one rule.
    pub fn of(&self, rule: Rule) -> usize {
        self.violations.iter().filter(|v| v.rule == rule).count()
    }
}

fn describe(interval: &AdmissionInterval) -> String {
    let end = interval
        .end_ns
        .map_or_else(|| "still admitting".to_string(), |end| end.to_string());
    // Judged per key, an interval names its layout (generation 0's count filled in from the
    // namespace's first); judged per shard, the violation already names its shard.
    let layout = match interval.shard_count {
        Some(count) => format!(
            " shard {} of {count} (generation {})",
            interval.shard, interval.generation
        ),
        None => String::new(),
    };
    format!(
        "{}{layout} (epoch {}) from {} to {end}",
        interval.executor_id, interval.epoch, interval.start_ns
    )
}

fn end_or_forever(interval: &AdmissionInterval) -> u64 {
    interval.end_ns.unwrap_or(u64::MAX)
}

/// I1 and I2 over the merged admission logs of every executor that ran, the primary's intervals
/// only (P19.5), of a namespace that never resharded: [`check_in`] without a first shard count.
pub fn check(logs: &[ExecutorLog]) -> Result<CheckReport, String> {
    check_in(logs, None)
}

/// I1 and I2 over the merged admission logs of every executor that ran, the primary's intervals
/// only (P19.5): per shard while every interval is of generation 0, per key once a layout
/// changed (§20), the generation-0 intervals then being of `first_shard_count` shards. A
/// malformed log (a stop without a start, a second start, a stop at another epoch) is an error,
/// not a violation: the executor wrote something the format does not allow; so are layouts that
/// do not nest, and intervals of generation 0 beside later ones without `first_shard_count`.
pub fn check_in(
    logs: &[ExecutorLog],
    first_shard_count: Option<u32>,
) -> Result<CheckReport, String> {
    let mut primaries = Vec::new();
    let mut secondary_intervals = 0;
    for interval in admission_intervals(logs)? {
        if interval.role.is_primary() {
            primaries.push(interval);
        } else {
            secondary_intervals += 1;
        }
    }
    let generations: BTreeSet<u64> = primaries
        .iter()
        .map(|interval| interval.generation)
        .collect();
    let intervals = primaries.len();
    let (groups, of) = if generations.iter().all(|&generation| generation == 0) {
        (by_shard(primaries), None)
    } else {
        let (classes, finest) = by_key_class(primaries, first_shard_count)?;
        (classes, Some(finest))
    };
    let mut report = CheckReport {
        intervals,
        shards: groups.len(),
        secondary_intervals,
        generations: generations.len(),
        ..CheckReport::default()
    };
    for (shard, mut intervals) in groups {
        intervals.sort_by_key(|interval| (interval.start_ns, end_or_forever(interval)));
        let mut violation = |rule: Rule, detail: String| {
            report.violations.push(Violation {
                rule,
                shard,
                of,
                detail,
            })
        };
        check_epoch_has_one_holder(&intervals, &mut violation);
        let handoffs = check_epochs_rise_between_holders(&intervals, &mut violation);
        check_epochs_never_fall_within_one(&intervals, &mut violation);
        check_no_overlap(&intervals, &mut violation);
        report.handoffs += handoffs;
    }
    Ok(report)
}

/// The intervals by shard.
fn by_shard(intervals: Vec<AdmissionInterval>) -> BTreeMap<u32, Vec<AdmissionInterval>> {
    let mut groups: BTreeMap<u32, Vec<AdmissionInterval>> = BTreeMap::new();
    for interval in intervals {
        groups.entry(interval.shard).or_default().push(interval);
    }
    groups
}

/// The intervals by class of keys (§20): each class is the keys whose hash modulo the largest
/// shard count of any layout is one number, and an interval of shard `s` of `c` shards covers
/// every class `r` with `r mod c = s`. Returns the classes that some interval covers, and that
/// largest count.
fn by_key_class(
    intervals: Vec<AdmissionInterval>,
    first_shard_count: Option<u32>,
) -> Result<(BTreeMap<u32, Vec<AdmissionInterval>>, u32), String> {
    let count_of = |interval: &AdmissionInterval| {
        interval
            .shard_count
            .or(first_shard_count)
            .filter(|count| *count > 0)
            .ok_or_else(|| {
                format!(
                    "{} held shard {} at generation {} without a shard count, beside intervals \
                     of later generations: give the namespace's first shard count",
                    interval.executor_id, interval.shard, interval.generation
                )
            })
    };
    let mut finest = 1;
    for interval in &intervals {
        finest = finest.max(count_of(interval)?);
    }
    let mut by_layout: BTreeMap<(u32, u32), Vec<AdmissionInterval>> = BTreeMap::new();
    for mut interval in intervals {
        let count = count_of(&interval)?;
        interval.shard_count = Some(count);
        if finest % count != 0 || !(finest / count).is_power_of_two() {
            return Err(format!(
                "layouts of {count} and {finest} shards do not nest: a reshard doubles or halves \
                 a count (PROTOCOL P20.1)"
            ));
        }
        if interval.shard >= count {
            return Err(format!(
                "{} held shard {} of a layout of {count} shards",
                interval.executor_id, interval.shard
            ));
        }
        by_layout
            .entry((count, interval.shard))
            .or_default()
            .push(interval);
    }
    let counts: BTreeSet<u32> = by_layout.keys().map(|(count, _)| *count).collect();
    let mut classes: BTreeMap<u32, Vec<AdmissionInterval>> = BTreeMap::new();
    for class in 0..finest {
        let covering: Vec<AdmissionInterval> = counts
            .iter()
            .filter_map(|&count| by_layout.get(&(count, class % count)))
            .flatten()
            .cloned()
            .collect();
        if !covering.is_empty() {
            classes.insert(class, covering);
        }
    }
    Ok((classes, finest))
}

/// I2: one epoch, one executor (over one shard's intervals, sorted by start).
fn check_epoch_has_one_holder(
    intervals: &[AdmissionInterval],
    violation: &mut impl FnMut(Rule, String),
) {
    let mut holder_of_epoch: BTreeMap<u64, &AdmissionInterval> = BTreeMap::new();
    for interval in intervals {
        let first = *holder_of_epoch.entry(interval.epoch).or_insert(interval);
        if first.executor_id != interval.executor_id {
            violation(
                Rule::I2EpochSharedByTwo,
                format!(
                    "epoch {} held by {} and by {}",
                    interval.epoch,
                    describe(first),
                    describe(interval)
                ),
            );
        }
    }
}

/// I2: epochs rise between holders; returns how many handoffs (successive intervals held by
/// different executors) there were.
fn check_epochs_rise_between_holders(
    intervals: &[AdmissionInterval],
    violation: &mut impl FnMut(Rule, String),
) -> usize {
    let mut handoffs = 0;
    for pair in intervals.windows(2) {
        let (previous, next) = (&pair[0], &pair[1]);
        if previous.executor_id != next.executor_id {
            handoffs += 1;
            if next.epoch <= previous.epoch {
                violation(
                    Rule::I2EpochNotIncreasing,
                    format!("held by {}, then by {}", describe(previous), describe(next)),
                );
            }
        }
    }
    handoffs
}

/// I2: an executor's epochs for one shard never fall.
fn check_epochs_never_fall_within_one(
    intervals: &[AdmissionInterval],
    violation: &mut impl FnMut(Rule, String),
) {
    let mut last_of_executor: BTreeMap<&str, &AdmissionInterval> = BTreeMap::new();
    for interval in intervals {
        if let Some(earlier) = last_of_executor.insert(&interval.executor_id, interval) {
            if interval.epoch < earlier.epoch {
                violation(
                    Rule::I2EpochWentBack,
                    format!("{}, then {}", describe(earlier), describe(interval)),
                );
            }
        }
    }
}

/// I1: no two executors' intervals overlap. Sorted by start, an overlap always shows against
/// the latest-ending interval so far of another executor. One executor's own intervals may
/// touch across a change of layout (§20): the stops of the old layout and the starts of the new
/// are one instant, a stop stamped rounded up and a start rounded down, and it is one admitter.
fn check_no_overlap(intervals: &[AdmissionInterval], violation: &mut impl FnMut(Rule, String)) {
    let mut latest_of: BTreeMap<&str, &AdmissionInterval> = BTreeMap::new();
    for interval in intervals {
        let earlier = latest_of
            .iter()
            .filter(|(executor, _)| **executor != interval.executor_id)
            .map(|(_, earlier)| *earlier)
            .max_by_key(|earlier| end_or_forever(earlier));
        if let Some(earlier) = earlier {
            if interval.start_ns < end_or_forever(earlier) {
                violation(
                    Rule::I1Overlap,
                    format!(
                        "{} overlaps {} by {}",
                        describe(earlier),
                        describe(interval),
                        overlap_text(earlier, interval)
                    ),
                );
            }
        }
        let latest = latest_of.entry(&interval.executor_id).or_insert(interval);
        if end_or_forever(interval) > end_or_forever(latest) {
            *latest = interval;
        }
    }
}

fn overlap_text(earlier: &AdmissionInterval, later: &AdmissionInterval) -> String {
    match earlier.end_ns {
        Some(end) => {
            let overlap_ns = end.min(end_or_forever(later)) - later.start_ns;
            format!("{:.3} ms", overlap_ns as f64 / 1e6)
        }
        None => "an open-ended interval".to_string(),
    }
}

/// One executor process's admission log file and, when it was killed without logging its stops,
/// an upper bound on its death (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLogFile {
    pub path: PathBuf,
    pub ended_at_ns: Option<u64>,
}

/// Reads and merges the admission logs of every executor process a test ran, then checks them.
pub fn check_files(files: &[EventLogFile]) -> Result<CheckReport, String> {
    check_files_in(files, None)
}

/// [`check_files`] of a namespace that may have resharded, of `first_shard_count` shards at
/// generation 0 ([`check_in`]).
pub fn check_files_in(
    files: &[EventLogFile],
    first_shard_count: Option<u32>,
) -> Result<CheckReport, String> {
    let logs = files
        .iter()
        .map(|file| {
            Ok(ExecutorLog {
                records: read_admission_log(&file.path)?,
                ended_at_ns: file.ended_at_ns,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    check_in(&logs, first_shard_count)
}

/// CLOCK_MONOTONIC now, in nanoseconds: the admission logs' clock, for bounds the test itself
/// observes (e.g. when a killed process was reaped).
// clock_gettime(2) fails only for a clock the kernel does not have, and every Linux has
// CLOCK_MONOTONIC.
#[allow(clippy::expect_used)]
pub fn monotonic_now_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always readable");
    u64::try_from(now.tv_sec()).unwrap_or(0) * 1_000_000_000
        + u64::try_from(now.tv_nsec()).unwrap_or(0)
}

/// What [`check_admission_exclusivity`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExclusivityReport {
    pub intervals: usize,
    pub shards: usize,
    /// Successive intervals of one shard held by different executors.
    pub handoffs: usize,
}

/// I1 and I2 over the admission logs of every executor that ran (the rules are in
/// this module): `Err` lists every violation.
pub fn check_admission_exclusivity(logs: &[ExecutorLog]) -> Result<ExclusivityReport, String> {
    check_admission_exclusivity_in(logs, None)
}

/// [`check_admission_exclusivity`] per key, for a namespace of `first_shard_count` shards at
/// generation 0 that may have resharded since (§20, [`check_in`]).
pub fn check_admission_exclusivity_in(
    logs: &[ExecutorLog],
    first_shard_count: Option<u32>,
) -> Result<ExclusivityReport, String> {
    let report = check_in(logs, first_shard_count)?.into_result()?;
    Ok(ExclusivityReport {
        intervals: report.intervals,
        shards: report.shards,
        handoffs: report.handoffs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission_log::synthetic::{log, record};
    use crate::admission_log::AdmissionEdge;

    use AdmissionEdge::{Start, Stop};

    /// A realistic valid history: three executors, a join with handoffs, a lapse and resume at
    /// one epoch, a SIGKILL bounded by the reap, re-homing with epoch + 1.
    fn valid_history() -> Vec<ExecutorLog> {
        let a = log(
            vec![
                record("ex-1", 0, 1, Start, 100),
                record("ex-1", 1, 1, Start, 100),
                // handoff of shard 1 to ex-2 (revoke acknowledged)
                record("ex-1", 1, 1, Stop, 200),
                // lapse and resume of shard 0 at the same epoch (P3.6)
                record("ex-1", 0, 1, Stop, 300),
                record("ex-1", 0, 1, Start, 350),
            ],
            // SIGKILLed; reaped by 400
            Some(400),
        );
        let b = log(
            vec![
                record("ex-2", 1, 2, Start, 210),
                record("ex-2", 1, 2, Stop, 500),
            ],
            None,
        );
        let c = log(
            vec![
                record("ex-3", 0, 2, Start, 4_000),
                record("ex-3", 1, 3, Start, 600),
            ],
            None,
        );
        vec![a, b, c]
    }

    #[test]
    fn a_valid_history_has_no_violation() {
        let report = check(&valid_history()).unwrap();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.shards, 2);
        assert_eq!(report.intervals, 6);
        // shard 0: ex-1, ex-1, ex-3 (one handoff); shard 1: ex-1, ex-2, ex-3 (two)
        assert_eq!(report.handoffs, 3);
    }

    #[test]
    fn i1_fires_on_an_overlap_and_reports_its_length() {
        let mut logs = valid_history();
        // ex-2 starts shard 1 10 ns before ex-1 stopped it.
        logs[1].records[0].t_ns = 190;
        let report = check(&logs).unwrap();
        assert_eq!(report.of(Rule::I1Overlap), 1, "{:?}", report.violations);
        assert_eq!(report.violations.len(), 1);
        assert!(report.violations[0].detail.contains("0.000 ms"));
        assert!(report.into_result().unwrap_err().starts_with("I1"));
    }

    #[test]
    fn i1_fires_when_a_paused_executor_logged_its_lapse_after_the_next_start() {
        // ex-1 was paused; it logs its lapse stop at its expiry (1000) only when it wakes, but
        // ex-2 started at 900: a broken fence shows as an overlap.
        let a = log(
            vec![
                record("ex-1", 5, 1, Start, 100),
                record("ex-1", 5, 1, Stop, 1_000),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 5, 2, Start, 900)], None);
        let report = check(&[a.clone(), b]).unwrap();
        assert_eq!(report.of(Rule::I1Overlap), 1);
        // Fenced at 1000, re-homed at 1001: fine.
        let b = log(vec![record("ex-2", 5, 2, Start, 1_001)], None);
        assert!(check(&[a, b]).unwrap().violations.is_empty());
    }

    #[test]
    fn i1_fires_against_a_killed_executor_only_before_its_death_bound() {
        let mut logs = valid_history();
        // ex-3 takes shard 0 at 390, before ex-1 (killed, reaped by 400) is known to be dead.
        logs[2].records[0].t_ns = 390;
        assert_eq!(check(&logs).unwrap().of(Rule::I1Overlap), 1);
        // Without a death bound the killed executor's interval never ends.
        let mut logs = valid_history();
        logs[0].ended_at_ns = None;
        assert_eq!(check(&logs).unwrap().of(Rule::I1Overlap), 1);
    }

    #[test]
    fn i2_fires_when_the_next_holder_reuses_or_lowers_the_epoch() {
        let mut logs = valid_history();
        // ex-3 takes shard 1 at epoch 2, the epoch ex-2 held.
        logs[2].records[1].epoch = 2;
        let report = check(&logs).unwrap();
        assert_eq!(
            report.of(Rule::I2EpochNotIncreasing),
            1,
            "{:?}",
            report.violations
        );
        assert_eq!(report.of(Rule::I2EpochSharedByTwo), 1);
        assert_eq!(report.of(Rule::I1Overlap), 0);
        let mut logs = valid_history();
        logs[2].records[1].epoch = 1;
        let report = check(&logs).unwrap();
        assert_eq!(report.of(Rule::I2EpochNotIncreasing), 1);
        // epoch 1 of shard 1 was ex-1's
        assert_eq!(report.of(Rule::I2EpochSharedByTwo), 1);
    }

    #[test]
    fn i2_fires_when_one_epoch_is_held_by_two_executors_apart_in_time() {
        // ex-1 holds epoch 4, ex-2 epoch 5, then ex-3 epoch 4 again: successive pairs do not
        // both show it, the epoch map does.
        let logs = vec![
            log(
                vec![
                    record("ex-1", 9, 4, Start, 10),
                    record("ex-1", 9, 4, Stop, 20),
                ],
                None,
            ),
            log(
                vec![
                    record("ex-2", 9, 5, Start, 30),
                    record("ex-2", 9, 5, Stop, 40),
                ],
                None,
            ),
            log(vec![record("ex-3", 9, 4, Start, 50)], None),
        ];
        let report = check(&logs).unwrap();
        assert_eq!(
            report.of(Rule::I2EpochSharedByTwo),
            1,
            "{:?}",
            report.violations
        );
    }

    #[test]
    fn i2_fires_when_one_executor_goes_back_to_an_older_epoch() {
        let logs = vec![log(
            vec![
                record("ex-1", 2, 7, Start, 10),
                record("ex-1", 2, 7, Stop, 20),
                record("ex-1", 2, 6, Start, 30),
            ],
            None,
        )];
        let report = check(&logs).unwrap();
        assert_eq!(
            report.of(Rule::I2EpochWentBack),
            1,
            "{:?}",
            report.violations
        );
    }

    #[test]
    fn every_violation_is_reported_not_only_the_first() {
        let logs = vec![
            log(vec![record("ex-1", 1, 1, Start, 10)], None),
            log(vec![record("ex-2", 1, 2, Start, 20)], None),
            log(vec![record("ex-1", 2, 1, Start, 10)], None),
            log(vec![record("ex-2", 2, 1, Start, 20)], None),
        ];
        let report = check(&logs).unwrap();
        assert_eq!(report.of(Rule::I1Overlap), 2);
        assert_eq!(report.of(Rule::I2EpochNotIncreasing), 1);
        assert_eq!(report.of(Rule::I2EpochSharedByTwo), 1);
        let text = report.into_result().unwrap_err();
        assert_eq!(text.lines().count(), 4, "{text}");
    }

    #[test]
    fn files_are_merged_and_a_missing_file_is_an_empty_log() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.events.jsonl");
        let b = dir.path().join("b.events.jsonl");
        std::fs::write(
            &a,
            concat!(
                r#"{"t_ns":10,"executor_id":"ex-1","shard":3,"epoch":1,"event":"start","reason":"assigned"}"#,
                "\n",
                r#"{"t_ns":20,"executor_id":"ex-1","shard":3,"epoch":1,"event":"stop","reason":"revoked"}"#,
                "\n"
            ),
        )
        .unwrap();
        std::fs::write(
            &b,
            r#"{"t_ns":15,"executor_id":"ex-2","shard":3,"epoch":2,"event":"start","reason":"assigned"}"#,
        )
        .unwrap();
        let files = |b_path: PathBuf| {
            vec![
                EventLogFile {
                    path: a.clone(),
                    ended_at_ns: None,
                },
                EventLogFile {
                    path: b_path,
                    ended_at_ns: None,
                },
            ]
        };
        let report = check_files(&files(b.clone())).unwrap();
        assert_eq!(report.of(Rule::I1Overlap), 1);
        let report = check_files(&files(dir.path().join("never-written.jsonl"))).unwrap();
        assert!(report.violations.is_empty());
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let first = monotonic_now_ns();
        let second = monotonic_now_ns();
        assert!(second >= first && first > 0);
    }
}

/// [`check_admission_exclusivity`] over small hand-made logs.
#[cfg(test)]
mod exclusivity_tests {
    use super::*;
    use crate::admission_log::synthetic::{log, record};
    use crate::admission_log::AdmissionEdge::{Start, Stop};
    use crate::admission_log::AdmissionRecord;

    #[test]
    fn i1_handoff_without_overlap_passes() {
        let a = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Stop, 20),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 20)], None);
        let report = check_admission_exclusivity(&[a, b]).unwrap();
        assert_eq!(
            report,
            ExclusivityReport {
                intervals: 2,
                shards: 1,
                handoffs: 1
            }
        );
    }

    #[test]
    fn i1_overlap_is_caught() {
        let a = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Stop, 21),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 20)], None);
        let error = check_admission_exclusivity(&[a, b]).unwrap_err();
        assert!(error.starts_with("I1"), "{error}");
    }

    #[test]
    fn i1_open_interval_of_a_running_executor_overlaps_everything_after() {
        let a = log(vec![record("ex-1", 1, 1, Start, 10)], None);
        let b = log(
            vec![
                record("ex-2", 1, 2, Start, 50),
                record("ex-2", 1, 2, Stop, 60),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[a.clone(), b.clone()]).is_err());
        // Killed at 40: its open interval ends there.
        let killed = ExecutorLog {
            ended_at_ns: Some(40),
            ..a
        };
        assert!(check_admission_exclusivity(&[killed, b]).is_ok());
    }

    #[test]
    fn i1_start_inside_an_earlier_interval_is_caught() {
        // ex-1 holds 10..100; ex-3 starts at 50, inside it.
        let a = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Stop, 100),
            ],
            None,
        );
        let c = log(vec![record("ex-3", 1, 3, Start, 50)], None);
        assert!(check_admission_exclusivity(&[a, c]).is_err());
    }

    #[test]
    fn i2_epochs_must_increase_between_holders() {
        let a = log(
            vec![
                record("ex-1", 1, 2, Start, 10),
                record("ex-1", 1, 2, Stop, 20),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 30)], None);
        let error = check_admission_exclusivity(&[a, b]).unwrap_err();
        assert!(error.starts_with("I2"), "{error}");
        let a = log(
            vec![
                record("ex-1", 1, 3, Start, 10),
                record("ex-1", 1, 3, Stop, 20),
            ],
            None,
        );
        let b = log(vec![record("ex-2", 1, 2, Start, 30)], None);
        assert!(check_admission_exclusivity(&[a, b]).is_err());
    }

    #[test]
    fn i2_one_holder_resuming_after_a_lapse_keeps_its_epoch() {
        let a = log(
            vec![
                record("ex-1", 1, 4, Start, 10),
                record("ex-1", 1, 4, Stop, 20),
                record("ex-1", 1, 4, Start, 30),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[a]).is_ok());
    }

    #[test]
    fn malformed_logs_are_errors() {
        let double_start = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 1, Start, 20),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[double_start]).is_err());
        let orphan_stop = log(vec![record("ex-1", 1, 1, Stop, 10)], None);
        assert!(check_admission_exclusivity(&[orphan_stop]).is_err());
        let epoch_mismatch = log(
            vec![
                record("ex-1", 1, 1, Start, 10),
                record("ex-1", 1, 2, Stop, 20),
            ],
            None,
        );
        assert!(check_admission_exclusivity(&[epoch_mismatch]).is_err());
    }

    /// P19.5: I1 and I2 are the primary's. A secondary admitting a shard beside its primary, at
    /// the primary's epoch, and one promoted at a new epoch on the same executor, break neither;
    /// the same intervals as the primary's would break both. An overlap of primaries is still
    /// found among secondaries.
    #[test]
    fn p19_5_i1_and_i2_judge_the_primarys_intervals_only() {
        use leasehold_api::wire::Role;

        let secondary = |executor, shard, epoch, event, t_ns| AdmissionRecord {
            role: Role::Secondary,
            ..record(executor, shard, epoch, event, t_ns)
        };
        let logs = vec![
            log(
                vec![
                    record("ex-1", 0, 1, Start, 100),
                    // Handed to ex-2's secondary, promoted at epoch 2.
                    record("ex-1", 0, 1, Stop, 300),
                ],
                None,
            ),
            log(
                vec![
                    secondary("ex-2", 0, 1, Start, 150),
                    secondary("ex-2", 0, 1, Stop, 310),
                    record("ex-2", 0, 2, Start, 310),
                ],
                None,
            ),
            log(
                vec![
                    // A second secondary, all along, at the epochs its sets showed.
                    secondary("ex-3", 0, 1, Start, 120),
                    secondary("ex-3", 0, 1, Stop, 310),
                    secondary("ex-3", 0, 2, Start, 310),
                ],
                None,
            ),
        ];
        let report = check(&logs).unwrap();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!((report.intervals, report.secondary_intervals), (2, 3));
        assert_eq!(report.handoffs, 1);
        // The same history with every role the primary's: overlaps, and epoch 1 held by three.
        let as_primaries: Vec<ExecutorLog> = logs
            .iter()
            .map(|executor| ExecutorLog {
                records: executor
                    .records
                    .iter()
                    .map(|r| AdmissionRecord {
                        role: Role::Primary,
                        ..r.clone()
                    })
                    .collect(),
                ended_at_ns: executor.ended_at_ns,
            })
            .collect();
        let report = check(&as_primaries).unwrap();
        assert!(report.of(Rule::I1Overlap) > 0, "{:?}", report.violations);
        assert!(
            report.of(Rule::I2EpochSharedByTwo) > 0,
            "{:?}",
            report.violations
        );
        // A primary of ex-3 overlapping ex-2's is found whatever the secondaries around it.
        let mut overlapping = logs.clone();
        overlapping[2]
            .records
            .push(record("ex-3", 0, 3, Start, 400));
        assert_eq!(check(&overlapping).unwrap().of(Rule::I1Overlap), 1);
    }
}

/// The checks per key over layouts (PROTOCOL §20).
#[cfg(test)]
mod per_key {
    use super::*;
    use crate::admission_log::synthetic::{log, record, record_in};
    use crate::admission_log::AdmissionEdge::{Start, Stop};

    const SPLIT: (u32, u64) = (8, 1);

    /// A split and a spread (P20.2): ex-1 holds shard 1 of 4, then, at the split's instant, 1
    /// and 5 of 8, and hands 5 to ex-2. Every key has one holder at a time, at rising epochs.
    fn split_then_spread() -> Vec<ExecutorLog> {
        let one = log(
            vec![
                record("ex-1", 1, 3, Start, 100),
                record("ex-1", 1, 3, Stop, 200),
                record_in(SPLIT, "ex-1", 1, 4, Start, 200),
                record_in(SPLIT, "ex-1", 5, 4, Start, 200),
                record_in(SPLIT, "ex-1", 5, 4, Stop, 300),
            ],
            None,
        );
        let two = log(vec![record_in(SPLIT, "ex-2", 5, 5, Start, 310)], None);
        vec![one, two]
    }

    #[test]
    fn p20_2_a_split_and_a_spread_keep_one_holder_per_key() {
        let report = check_in(&split_then_spread(), Some(4)).unwrap();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.generations, 2);
        assert_eq!(report.intervals, 4);
        // Keys mod 8 of 1 and 5 are held; one handoff, in the class of 5.
        assert_eq!(report.shards, 2);
        assert_eq!(report.handoffs, 1);
    }

    /// I1 per key: a holder of the parent still admitting its keys while another admits a child
    /// is an overlap, though the shard numbers differ.
    #[test]
    fn i1_a_parent_still_admitted_beside_a_child_elsewhere_is_an_overlap() {
        let mut logs = split_then_spread();
        logs[0] = log(
            vec![
                record("ex-1", 1, 3, Start, 100),
                // Never switched: still admitting shard 1 of 4, which covers 5 of 8.
            ],
            None,
        );
        let report = check_in(&logs, Some(4)).unwrap();
        assert_eq!(report.of(Rule::I1Overlap), 1, "{:?}", report.violations);
        let violation = &report.violations[0];
        assert_eq!((violation.shard, violation.of), (5, Some(8)));
        let shown = violation.to_string();
        assert!(shown.contains("keys whose hash mod 8 is 5"), "{shown}");
        // Both intervals name their layout, the first one's count given to the check.
        assert!(
            shown.contains("ex-1 shard 1 of 4 (generation 0)"),
            "{shown}"
        );
        assert!(
            shown.contains("ex-2 shard 5 of 8 (generation 1)"),
            "{shown}"
        );
    }

    /// I2 per key: a merged shard must be above both parents' epochs.
    #[test]
    fn i2_a_merge_below_a_parents_epoch_is_caught() {
        let merge = (2, 1);
        let logs = vec![log(
            vec![
                record("ex-1", 0, 3, Start, 100),
                record("ex-1", 2, 7, Start, 100),
                record("ex-1", 0, 3, Stop, 200),
                record("ex-1", 2, 7, Stop, 200),
                // Merged at 5: below the epoch 7 the keys of shard 2 were held at.
                record_in(merge, "ex-1", 0, 5, Start, 200),
            ],
            None,
        )];
        let report = check_in(&logs, Some(4)).unwrap();
        assert_eq!(
            report.of(Rule::I2EpochWentBack),
            1,
            "{:?}",
            report.violations
        );
        assert_eq!(report.violations[0].shard, 2);
    }

    #[test]
    fn layouts_that_do_not_nest_or_lack_a_count_are_malformed() {
        let logs = split_then_spread();
        let error = check_in(&logs, None).unwrap_err();
        assert!(error.contains("first shard count"), "{error}");
        let error = check_in(&logs, Some(3)).unwrap_err();
        assert!(error.contains("do not nest"), "{error}");
        let text = r#"{"t_ns":1,"executor_id":"ex-1","shard":1,"epoch":1,"event":"start","reason":"assigned","generation":2}"#;
        let error = crate::admission_log::parse_admission_log(text).unwrap_err();
        assert!(error.contains("without its shard_count"), "{error}");
    }
}

/// One executor's own intervals touching across a change of layout (§20) are not an overlap;
/// another executor's still are.
#[cfg(test)]
mod one_admitter {
    use super::*;
    use crate::admission_log::synthetic::{log, record, record_in};
    use crate::admission_log::AdmissionEdge::{Start, Stop};

    #[test]
    fn i1_one_executors_switch_of_layout_is_no_overlap_and_anothers_start_is() {
        let switch = vec![
            record("ex-1", 1, 3, Start, 100),
            // Stop rounded up, start rounded down: the same instant, a nanosecond apart.
            record("ex-1", 1, 3, Stop, 201),
            record_in((8, 1), "ex-1", 1, 4, Start, 200),
        ];
        let report = check_in(&[log(switch.clone(), None)], Some(4)).unwrap();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        let other = log(vec![record_in((8, 1), "ex-2", 5, 4, Start, 200)], None);
        let report = check_in(&[log(switch, None), other], Some(4)).unwrap();
        assert_eq!(report.of(Rule::I1Overlap), 1, "{:?}", report.violations);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    }
}
