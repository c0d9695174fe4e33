//! Admission logs (PROTOCOL §9): reading them, and turning them into admission intervals for
//! the invariant checker ([`crate::checker`]).
//!
//! Every executor writes `--event-log` on this machine, each line stamped on CLOCK_MONOTONIC,
//! which every process here shares, so the logs of all executors compare directly.
//!
//! A line may carry a `role` (PROTOCOL P19.5): `secondary` for a secondary's admission, absent
//! (or `primary`) for the primary's. Starts and stops pair within one role, so a secondary
//! promoted on the same executor closes its secondary interval and opens the primary's.
//!
//! A line may carry a `generation` and the `shard_count` of its layout (PROTOCOL §20), both
//! absent at generation 0. Starts and stops pair within one generation: a reshard stops each
//! shard of the old layout and starts those of the new at one instant, and shard numbers repeat
//! across layouts.

use std::collections::BTreeMap;
use std::path::Path;

use leasehold_api::wire::Role;
use serde_json::Value;

/// Start or stop of admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionEdge {
    Start,
    Stop,
}

/// One admission log line (§9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionRecord {
    /// CLOCK_MONOTONIC nanoseconds.
    pub t_ns: u64,
    pub executor_id: String,
    pub shard: u32,
    pub epoch: u64,
    pub event: AdmissionEdge,
    pub reason: String,
    /// The role admitted in (P19.5): the primary when the line carries none.
    pub role: Role,
    /// The namespace's generation the shard belongs to (§20): 0 when the line carries none.
    pub generation: u64,
    /// Its layout's shard count, when the line says it (at every generation above 0).
    pub shard_count: Option<u32>,
}

/// Parses admission log text (JSON lines). A torn last line (a process killed mid-write) is an
/// error: the executor writes each line in one call, so it would be a bug.
pub fn parse_admission_log(text: &str) -> Result<Vec<AdmissionRecord>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            let value: Value = serde_json::from_str(line)
                .map_err(|e| format!("line {}: {e}: {line}", number + 1))?;
            let field = |name: &str| {
                value
                    .get(name)
                    .ok_or_else(|| format!("line {}: no {name}: {line}", number + 1))
            };
            let number_field = |name: &str| {
                field(name)?
                    .as_u64()
                    .ok_or_else(|| format!("line {}: {name} is not a u64: {line}", number + 1))
            };
            let text_field = |name: &str| {
                field(name)?
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("line {}: {name} is not a string: {line}", number + 1))
            };
            let event = match text_field("event")?.as_str() {
                "start" => AdmissionEdge::Start,
                "stop" => AdmissionEdge::Stop,
                other => return Err(format!("line {}: unknown event {other:?}", number + 1)),
            };
            let role = match value.get("role") {
                None => Role::Primary,
                Some(role) => serde_json::from_value(role.clone()).map_err(|_| {
                    format!(
                        "line {}: role {role} is neither primary nor secondary",
                        number + 1
                    )
                })?,
            };
            let generation = match value.get("generation") {
                None => 0,
                Some(_) => number_field("generation")?,
            };
            let shard_count = match value.get("shard_count") {
                None if generation > 0 => {
                    return Err(format!(
                        "line {}: generation {generation} without its shard_count: {line}",
                        number + 1
                    ))
                }
                None => None,
                Some(_) => Some(
                    u32::try_from(number_field("shard_count")?)
                        .ok()
                        .filter(|count| *count > 0)
                        .ok_or_else(|| format!("line {}: shard_count out of range", number + 1))?,
                ),
            };
            Ok(AdmissionRecord {
                generation,
                shard_count,
                t_ns: number_field("t_ns")?,
                executor_id: text_field("executor_id")?,
                shard: u32::try_from(number_field("shard")?)
                    .map_err(|_| format!("line {}: shard out of range", number + 1))?,
                epoch: number_field("epoch")?,
                event,
                reason: text_field("reason")?,
                role,
            })
        })
        .collect()
}

/// Reads an admission log file; a missing file is an empty log (the executor never admitted).
pub fn read_admission_log(path: &Path) -> Result<Vec<AdmissionRecord>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_admission_log(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(format!("{}: {error}", path.display())),
    }
}

/// One executor process's admission log, and when the process is known to have stopped
/// admitting if it did not log it (SIGKILL): an upper bound on its death, e.g. the
/// `monotonic_ns` of another executor's `/v1/status` read after the killed process was reaped.
#[derive(Debug, Clone, Default)]
pub struct ExecutorLog {
    pub records: Vec<AdmissionRecord>,
    /// Open intervals end here; `None` means still running (open intervals last forever).
    pub ended_at_ns: Option<u64>,
}

/// A span during which one executor admitted work for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionInterval {
    pub executor_id: String,
    pub shard: u32,
    pub epoch: u64,
    /// The role admitted in (P19.5): I1 and I2 are the primary's.
    pub role: Role,
    /// The layout the shard is of (§20): its generation, and its shard count when the log said.
    pub generation: u64,
    pub shard_count: Option<u32>,
    pub start_ns: u64,
    /// `None`: still admitting.
    pub end_ns: Option<u64>,
}

/// Pairs starts and stops into intervals, per executor, generation, shard and role. A stop
/// without a start, a second start without a stop, or a stop at another epoch than its start is
/// malformed.
pub fn admission_intervals(logs: &[ExecutorLog]) -> Result<Vec<AdmissionInterval>, String> {
    let mut intervals = Vec::new();
    for log in logs {
        let mut open: BTreeMap<(String, u64, u32, Role), AdmissionInterval> = BTreeMap::new();
        for record in &log.records {
            let key = (
                record.executor_id.clone(),
                record.generation,
                record.shard,
                record.role,
            );
            let what = match record.role {
                Role::Primary => "",
                Role::Secondary => " (as a secondary)",
            };
            match record.event {
                AdmissionEdge::Start => {
                    if let Some(previous) = open.get(&key) {
                        return Err(format!(
                            "{} started shard {}{what} again at {} without stopping the start at {}",
                            record.executor_id, record.shard, record.t_ns, previous.start_ns
                        ));
                    }
                    open.insert(
                        key,
                        AdmissionInterval {
                            executor_id: record.executor_id.clone(),
                            shard: record.shard,
                            epoch: record.epoch,
                            role: record.role,
                            generation: record.generation,
                            shard_count: record.shard_count,
                            start_ns: record.t_ns,
                            end_ns: None,
                        },
                    );
                }
                AdmissionEdge::Stop => {
                    let Some(mut interval) = open.remove(&key) else {
                        return Err(format!(
                            "{} stopped shard {}{what} at {} without a start",
                            record.executor_id, record.shard, record.t_ns
                        ));
                    };
                    if interval.epoch != record.epoch {
                        return Err(format!(
                            "{} stopped shard {} at epoch {} but started it at epoch {}",
                            record.executor_id, record.shard, record.epoch, interval.epoch
                        ));
                    }
                    if record.t_ns < interval.start_ns {
                        return Err(format!(
                            "{} stopped shard {} at {} before its start at {}",
                            record.executor_id, record.shard, record.t_ns, interval.start_ns
                        ));
                    }
                    interval.end_ns = Some(record.t_ns);
                    intervals.push(interval);
                }
            }
        }
        for (_, mut interval) in open {
            interval.end_ns = log.ended_at_ns.map(|end| end.max(interval.start_ns));
            intervals.push(interval);
        }
    }
    Ok(intervals)
}

/// Builders for synthetic admission logs, shared by this module's and the checker's unit tests.
#[cfg(test)]
pub(crate) mod synthetic {
    use super::{AdmissionEdge, AdmissionRecord, ExecutorLog, Role};

    pub(crate) fn record(
        executor: &str,
        shard: u32,
        epoch: u64,
        event: AdmissionEdge,
        t_ns: u64,
    ) -> AdmissionRecord {
        AdmissionRecord {
            t_ns,
            executor_id: executor.to_string(),
            shard,
            epoch,
            event,
            reason: "test".to_string(),
            role: Role::Primary,
            generation: 0,
            shard_count: None,
        }
    }

    /// [`record`] of a shard of the layout of `generation` with `shard_count` shards (§20).
    pub(crate) fn record_in(
        (shard_count, generation): (u32, u64),
        executor: &str,
        shard: u32,
        epoch: u64,
        event: AdmissionEdge,
        t_ns: u64,
    ) -> AdmissionRecord {
        AdmissionRecord {
            generation,
            shard_count: (generation > 0).then_some(shard_count),
            ..record(executor, shard, epoch, event, t_ns)
        }
    }

    pub(crate) fn log(records: Vec<AdmissionRecord>, ended_at_ns: Option<u64>) -> ExecutorLog {
        ExecutorLog {
            records,
            ended_at_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::synthetic::record;
    use super::*;

    use AdmissionEdge::{Start, Stop};

    #[test]
    fn parses_the_documented_line_shape() {
        let text = concat!(
            r#"{"t_ns":10,"executor_id":"ex-1","shard":7,"epoch":3,"event":"start","reason":"assigned"}"#,
            "\n",
            r#"{"t_ns":20,"executor_id":"ex-1","shard":7,"epoch":3,"event":"stop","reason":"revoked"}"#,
            "\n"
        );
        let records = parse_admission_log(text).unwrap();
        assert_eq!(
            records[0],
            AdmissionRecord {
                reason: "assigned".into(),
                ..record("ex-1", 7, 3, Start, 10)
            }
        );
        assert_eq!(records[1].event, Stop);
        assert!(parse_admission_log(
            r#"{"t_ns":1,"executor_id":"e","shard":1,"epoch":1,"event":"pause","reason":"x"}"#
        )
        .is_err());
        assert!(parse_admission_log(r#"{"t_ns":1,"executor_id":"e","shard":1"#).is_err());
    }

    /// P19.5: a line's `role` is read (absent: the primary), and starts and stops pair within
    /// one role: a promotion on one executor closes the secondary's interval and opens the
    /// primary's, in either order of the two lines. A role that is neither is an error.
    #[test]
    fn p19_5_roles_are_read_and_paired_apart() {
        let text = [
            r#"{"t_ns":10,"executor_id":"ex-1","shard":7,"epoch":3,"event":"start","reason":"assigned","role":"secondary"}"#,
            r#"{"t_ns":20,"executor_id":"ex-1","shard":7,"epoch":4,"event":"start","reason":"assigned"}"#,
            r#"{"t_ns":20,"executor_id":"ex-1","shard":7,"epoch":3,"event":"stop","reason":"unassigned","role":"secondary"}"#,
            r#"{"t_ns":30,"executor_id":"ex-1","shard":7,"epoch":4,"event":"stop","reason":"revoked","role":"primary"}"#,
        ]
        .join("\n");
        let records = parse_admission_log(&text).unwrap();
        let roles: Vec<Role> = records.iter().map(|record| record.role).collect();
        assert_eq!(
            roles,
            [
                Role::Secondary,
                Role::Primary,
                Role::Secondary,
                Role::Primary
            ]
        );
        let intervals = admission_intervals(&[ExecutorLog {
            records,
            ended_at_ns: None,
        }])
        .unwrap();
        let spans: Vec<(Role, u64, u64, Option<u64>)> = intervals
            .iter()
            .map(|i| (i.role, i.epoch, i.start_ns, i.end_ns))
            .collect();
        assert_eq!(
            spans,
            [
                (Role::Secondary, 3, 10, Some(20)),
                (Role::Primary, 4, 20, Some(30))
            ]
        );
        assert!(parse_admission_log(
            r#"{"t_ns":1,"executor_id":"e","shard":1,"epoch":1,"event":"start","reason":"x","role":"leader"}"#
        )
        .is_err());
        // A secondary's stop does not close the primary's interval.
        let unpaired = parse_admission_log(concat!(
            r#"{"t_ns":1,"executor_id":"e","shard":1,"epoch":1,"event":"start","reason":"x"}"#,
            "\n",
            r#"{"t_ns":2,"executor_id":"e","shard":1,"epoch":1,"event":"stop","reason":"x","role":"secondary"}"#,
        ))
        .unwrap();
        let refused = admission_intervals(&[ExecutorLog {
            records: unpaired,
            ended_at_ns: None,
        }])
        .unwrap_err();
        assert!(refused.contains("as a secondary"), "{refused}");
    }
}
