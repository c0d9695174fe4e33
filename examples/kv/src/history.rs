//! A history checker for the service: each key is a register, every write writes a value no
//! other write of that key writes, and clients record what they invoked, when, and what they
//! were told. Over that history, per key:
//!
//! - **Linearizability** (Wing & Gong's search, with Lowe's memoisation): some order of the
//!   operations, each placed between its invocation and its completion, explains every read. An
//!   acknowledged write must be placed; one whose outcome is unknown (no complete reply) may be
//!   placed anywhere after its invocation, or nowhere; one certainly not applied (refused) is
//!   left out. A lost acknowledged write shows here: a later read that does not see it, or a
//!   newer one, has no order.
//! - **No stale overwrite** (the fencing property): a read returns the epoch its value was
//!   written at; that epoch is never below the epoch of a write acknowledged before the read
//!   began. Linearizability alone allows a write of a deposed owner that was in flight (invoked
//!   before the handoff, completed after) to land last; the epoch rule forbids it, and this check
//!   sees it.
//! - A read returns only values some write that was not refused wrote.
//!
//! Times are nanoseconds since the history began, on one process's monotonic clock: the clients'
//! clock, which is all a client can know.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use crate::client::KvError;
use crate::wire::{GetReply, PutReply};

/// Bound on the linearizability search per key (states explored). Histories of a few hundred
/// operations per key with little overlap need thousands; hitting this is reported, not hidden.
pub const SEARCH_BOUND: usize = 2_000_000;

/// How a write ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    /// Acknowledged, stored at `epoch`.
    Acknowledged {
        /// The epoch the reply named.
        epoch: u64,
    },
    /// Certainly not applied (refused, or never sent).
    Refused,
    /// May or may not have been applied.
    Unknown,
}

/// One operation of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// `put(key, value)`.
    Write {
        /// The value, unique per key.
        value: String,
        /// How it ended.
        result: WriteResult,
    },
    /// A successful `get(key)`: the value and the epoch it was written at, or none.
    Read {
        /// `(value, written_epoch)`, or `None` for a key never written.
        found: Option<(String, u64)>,
    },
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// When the client invoked it (ns since the history began).
    pub invoked_ns: u64,
    /// When the client had its answer.
    pub completed_ns: u64,
    /// What it was.
    pub operation: Operation,
}

/// A history recorded by concurrent clients.
#[derive(Debug)]
pub struct History {
    start: Instant,
    entries: Mutex<Vec<Entry>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history starting now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// Now, as an invocation stamp.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn push(&self, entry: Entry) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    }

    /// Records `put(key, value)`, invoked at `invoked_ns`, that just ended with `result`.
    pub fn write(
        &self,
        key: &str,
        value: &str,
        invoked_ns: u64,
        result: &Result<PutReply, KvError>,
    ) {
        let result = match result {
            Ok(reply) => WriteResult::Acknowledged { epoch: reply.epoch },
            Err(error) if error.definitely_not_applied() => WriteResult::Refused,
            Err(_) => WriteResult::Unknown,
        };
        self.push(Entry {
            key: key.to_owned(),
            invoked_ns,
            completed_ns: self.now(),
            operation: Operation::Write {
                value: value.to_owned(),
                result,
            },
        });
    }

    /// Records `get(key)`, invoked at `invoked_ns`, that just ended with `result`. A failed read
    /// observed nothing and is not recorded.
    pub fn read(&self, key: &str, invoked_ns: u64, result: &Result<Option<GetReply>, KvError>) {
        let Ok(found) = result else { return };
        self.push(Entry {
            key: key.to_owned(),
            invoked_ns,
            completed_ns: self.now(),
            operation: Operation::Read {
                found: found
                    .as_ref()
                    .map(|reply| (reply.value.clone(), reply.written_epoch)),
            },
        });
    }

    /// Every entry so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// [`check`] over every entry so far.
    pub fn check(&self) -> Report {
        check(&self.entries())
    }
}

/// Which property a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// No order of the key's operations explains its reads.
    NotLinearizable,
    /// A read saw a value written at an epoch below that of a write acknowledged before it.
    StaleOverwrite,
    /// A read returned a value no write that could have been applied wrote.
    UnknownValue,
    /// Two writes of one key wrote the same value: the history cannot be checked.
    DuplicateValue,
    /// The search ran out of its bound ([`SEARCH_BOUND`]) without an answer.
    SearchBound,
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The property.
    pub rule: Rule,
    /// The key.
    pub key: String,
    /// What shows it.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: key {:?}: {}", self.rule, self.key, self.detail)
    }
}

/// What [`check`] saw and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Keys checked.
    pub keys: usize,
    /// Writes acknowledged.
    pub acknowledged: usize,
    /// Writes refused (certainly not applied).
    pub refused: usize,
    /// Writes with an unknown outcome.
    pub unknown: usize,
    /// Reads.
    pub reads: usize,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// `Err` listing every violation, one per line.
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
}

/// Checks every key of `entries` (module docs).
pub fn check(entries: &[Entry]) -> Report {
    let mut by_key: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in entries {
        by_key.entry(entry.key.as_str()).or_default().push(entry);
    }
    let mut report = Report {
        keys: by_key.len(),
        ..Report::default()
    };
    for (key, entries) in by_key {
        for entry in &entries {
            match &entry.operation {
                Operation::Write { result, .. } => match result {
                    WriteResult::Acknowledged { .. } => report.acknowledged += 1,
                    WriteResult::Refused => report.refused += 1,
                    WriteResult::Unknown => report.unknown += 1,
                },
                Operation::Read { .. } => report.reads += 1,
            }
        }
        check_key(key, &entries, &mut report.violations);
    }
    report
}

/// One event of the search: a write of value `i`, or a read of value `i` (or of none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Write(usize),
    Read(Option<usize>),
}

#[derive(Debug, Clone, Copy)]
struct Timed {
    invoked: u64,
    /// `u64::MAX` for a write whose outcome is unknown: it may take effect at any later time.
    completed: u64,
    /// Must be placed (all but unknown writes).
    required: bool,
    event: Event,
}

/// The module docs' rules over one key's entries; a value written twice stops the check.
fn check_key(key: &str, entries: &[&Entry], violations: &mut Vec<Violation>) {
    let writes = match KeyWrites::of(entries) {
        Ok(writes) => writes,
        Err(value) => {
            violations.push(key_violation(
                key,
                Rule::DuplicateValue,
                format!("value {value:?} is written twice; values must be unique per key"),
            ));
            return;
        }
    };
    let Some(mut events) = timed_events(key, entries, &writes, violations) else {
        return;
    };
    match linearizable(&mut events) {
        Ok(true) => {}
        Ok(false) => violations.push(key_violation(
            key,
            Rule::NotLinearizable,
            format!(
                "no order of its {} operations explains its reads: {}",
                events.len(),
                describe(entries)
            ),
        )),
        Err(explored) => violations.push(key_violation(
            key,
            Rule::SearchBound,
            format!(
                "gave up after {explored} states over {} operations",
                events.len()
            ),
        )),
    }
}

/// A violation of `rule` on `key`.
fn key_violation(key: &str, rule: Rule, detail: String) -> Violation {
    Violation {
        rule,
        key: key.to_owned(),
        detail,
    }
}

/// One key's entries as events of the search, with stale overwrites and unknown values pushed
/// to `violations`; `None` once a read saw a value no order can explain, so the search is moot.
fn timed_events(
    key: &str,
    entries: &[&Entry],
    writes: &KeyWrites<'_>,
    violations: &mut Vec<Violation>,
) -> Option<Vec<Timed>> {
    let mut events = Vec::new();
    let mut consistent = true;
    for entry in entries {
        let event = match &entry.operation {
            Operation::Write { value, result } => {
                let Some(&(index, _)) = writes.values.get(value.as_str()) else {
                    continue;
                };
                let unknown = *result == WriteResult::Unknown;
                Timed {
                    invoked: entry.invoked_ns,
                    completed: if unknown {
                        u64::MAX
                    } else {
                        entry.completed_ns
                    },
                    required: !unknown,
                    event: Event::Write(index),
                }
            }
            Operation::Read { found } => {
                let read = match found {
                    None => None,
                    Some((value, written_epoch)) => {
                        match writes.read_of(entry, value, *written_epoch, entries) {
                            Ok((index, stale)) => {
                                violations.extend(stale.into_iter().map(|detail| {
                                    key_violation(key, Rule::StaleOverwrite, detail)
                                }));
                                Some(index)
                            }
                            Err(detail) => {
                                violations.push(key_violation(key, Rule::UnknownValue, detail));
                                consistent = false;
                                continue;
                            }
                        }
                    }
                };
                Timed {
                    invoked: entry.invoked_ns,
                    completed: entry.completed_ns,
                    required: true,
                    event: Event::Read(read),
                }
            }
        };
        events.push(event);
    }
    consistent.then_some(events)
}

/// One key's writes: the values of those that may have been applied (by value: their index
/// and entry), and the values of those refused.
struct KeyWrites<'a> {
    values: HashMap<&'a str, (usize, &'a Entry)>,
    refused: HashSet<&'a str>,
}

impl<'a> KeyWrites<'a> {
    /// The value written twice, if one is (values are unique per key).
    fn of(entries: &[&'a Entry]) -> Result<Self, &'a str> {
        let mut writes = KeyWrites {
            values: HashMap::new(),
            refused: HashSet::new(),
        };
        for entry in entries {
            if let Operation::Write { value, result } = &entry.operation {
                if *result == WriteResult::Refused {
                    writes.refused.insert(value);
                    continue;
                }
                let index = writes.values.len();
                if writes.values.insert(value, (index, entry)).is_some() {
                    return Err(value);
                }
            }
        }
        Ok(writes)
    }

    /// A read (`entry`) of `value` at `written_epoch`: the index of the write it saw and the
    /// stale overwrites it shows; or why no write explains it.
    fn read_of(
        &self,
        entry: &Entry,
        value: &str,
        written_epoch: u64,
        entries: &[&Entry],
    ) -> Result<(usize, Vec<String>), String> {
        let Some(&(index, _)) = self.values.get(value) else {
            let why = if self.refused.contains(value) {
                "whose write was refused"
            } else {
                "that no write wrote"
            };
            return Err(format!(
                "read at {} ns returned {value:?} (epoch {written_epoch}), a value {why}",
                entry.invoked_ns
            ));
        };
        let mut stale = Vec::new();
        stale_overwrites(entry, value, written_epoch, entries, &mut |detail| {
            stale.push(detail)
        });
        Ok((index, stale))
    }
}

/// Reports every write acknowledged at an epoch above `written_epoch` that completed before the
/// read (`entry`) of `value` began.
fn stale_overwrites(
    entry: &Entry,
    value: &str,
    written_epoch: u64,
    entries: &[&Entry],
    report: &mut dyn FnMut(String),
) {
    for earlier in entries {
        if let Operation::Write {
            value: acknowledged,
            result: WriteResult::Acknowledged { epoch },
        } = &earlier.operation
        {
            if *epoch > written_epoch && earlier.completed_ns < entry.invoked_ns {
                report(format!(
                    "read at {} ns returned {value:?} written at epoch {written_epoch}, but \
                     {acknowledged:?} was acknowledged at epoch {epoch} at {} ns, before the read \
                     began: a stale owner overwrote an acknowledged write",
                    entry.invoked_ns, earlier.completed_ns
                ));
            }
        }
    }
}

/// A short listing of a key's history for a failure message (first 40 operations).
fn describe(entries: &[&Entry]) -> String {
    let mut sorted: Vec<&&Entry> = entries.iter().collect();
    sorted.sort_by_key(|entry| entry.invoked_ns);
    let shown: Vec<String> = sorted
        .iter()
        .take(40)
        .map(|entry| {
            let what = match &entry.operation {
                Operation::Write { value, result } => format!("write {value:?} {result:?}"),
                Operation::Read { found } => format!("read {found:?}"),
            };
            format!("[{}..{}] {what}", entry.invoked_ns, entry.completed_ns)
        })
        .collect();
    shown.join("; ")
}

/// Is there an order of `events`, each placed between its invocation and completion, in which
/// every read returns the value of the last write before it (none before any write), with every
/// required event placed? `Err(states)` when the search exceeds [`SEARCH_BOUND`].
fn linearizable(events: &mut [Timed]) -> Result<bool, usize> {
    events.sort_by_key(|event| event.invoked);
    let required = events.iter().filter(|event| event.required).count();
    let mut search = Search {
        events,
        done: vec![0; events.len().div_ceil(64)],
        seen: HashSet::new(),
        explored: 0,
    };
    search.run(None, required)
}

struct Search<'a> {
    events: &'a [Timed],
    /// Bitset of the events placed so far.
    done: Vec<u64>,
    /// (placed set, register value) pairs known to lead nowhere.
    seen: HashSet<(Vec<u64>, Option<usize>)>,
    explored: usize,
}

impl Search<'_> {
    fn is_done(&self, index: usize) -> bool {
        self.done[index / 64] & (1 << (index % 64)) != 0
    }

    fn flip(&mut self, index: usize) {
        self.done[index / 64] ^= 1 << (index % 64);
    }

    fn run(&mut self, value: Option<usize>, remaining: usize) -> Result<bool, usize> {
        if remaining == 0 {
            return Ok(true);
        }
        if !self.seen.insert((self.done.clone(), value)) {
            return Ok(false);
        }
        self.explored += 1;
        if self.explored > SEARCH_BOUND {
            return Err(self.explored);
        }
        // An event can go next only if no unplaced event completed before it was invoked.
        let horizon = (0..self.events.len())
            .filter(|&index| !self.is_done(index))
            .map(|index| self.events[index].completed)
            .min()
            .unwrap_or(u64::MAX);
        for index in 0..self.events.len() {
            let event = self.events[index];
            if event.invoked > horizon {
                break;
            }
            if self.is_done(index) {
                continue;
            }
            let next_value = match event.event {
                Event::Read(read) if read != value => continue,
                Event::Read(_) => value,
                Event::Write(written) => Some(written),
            };
            self.flip(index);
            let placed = self.run(next_value, remaining - usize::from(event.required));
            self.flip(index);
            if placed? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(key: &str, value: &str, span: (u64, u64), result: WriteResult) -> Entry {
        Entry {
            key: key.into(),
            invoked_ns: span.0,
            completed_ns: span.1,
            operation: Operation::Write {
                value: value.into(),
                result,
            },
        }
    }

    fn read(key: &str, found: Option<(&str, u64)>, span: (u64, u64)) -> Entry {
        Entry {
            key: key.into(),
            invoked_ns: span.0,
            completed_ns: span.1,
            operation: Operation::Read {
                found: found.map(|(value, epoch)| (value.into(), epoch)),
            },
        }
    }

    const fn acked(epoch: u64) -> WriteResult {
        WriteResult::Acknowledged { epoch }
    }

    fn rules(entries: &[Entry]) -> Vec<Rule> {
        check(entries)
            .violations
            .into_iter()
            .map(|violation| violation.rule)
            .collect()
    }

    #[test]
    fn sequential_and_concurrent_histories_that_explain_their_reads_pass() {
        let history = [
            read("k", None, (0, 1)),
            write("k", "a", (2, 3), acked(1)),
            read("k", Some(("a", 1)), (4, 5)),
            // Concurrent writes: either order is fine, and the reads pick one.
            write("k", "b", (6, 10), acked(1)),
            write("k", "c", (7, 9), acked(1)),
            read("k", Some(("b", 1)), (11, 12)),
            read("k", Some(("b", 1)), (13, 14)),
            read("other", None, (0, 20)),
        ];
        let report = check(&history);
        assert_eq!(report.violations, []);
        assert_eq!((report.keys, report.acknowledged, report.reads), (2, 3, 5));
    }

    #[test]
    fn a_lost_acknowledged_write_is_not_linearizable() {
        let history = [
            write("k", "a", (0, 1), acked(1)),
            write("k", "b", (2, 3), acked(1)),
            read("k", Some(("a", 1)), (4, 5)),
        ];
        assert_eq!(rules(&history), [Rule::NotLinearizable]);
        let never_seen = [write("k", "a", (0, 1), acked(1)), read("k", None, (2, 3))];
        assert_eq!(rules(&never_seen), [Rule::NotLinearizable]);
    }

    #[test]
    fn reads_must_not_go_back_in_time() {
        let history = [
            write("k", "a", (0, 10), acked(1)),
            write("k", "b", (0, 10), acked(1)),
            read("k", Some(("b", 1)), (11, 12)),
            read("k", Some(("a", 1)), (13, 14)),
        ];
        assert_eq!(rules(&history), [Rule::NotLinearizable]);
    }

    #[test]
    fn an_unknown_write_may_take_effect_late_or_never_and_a_refused_one_never() {
        let late = [
            write("k", "a", (0, 1), acked(1)),
            write("k", "u", (2, 3), WriteResult::Unknown),
            read("k", Some(("a", 1)), (4, 5)),
            read("k", Some(("u", 1)), (6, 7)),
        ];
        assert_eq!(rules(&late), []);
        let never = [
            write("k", "u", (0, 1), WriteResult::Unknown),
            read("k", None, (2, 3)),
        ];
        assert_eq!(rules(&never), []);
        let refused = [
            write("k", "r", (0, 1), WriteResult::Refused),
            read("k", Some(("r", 1)), (2, 3)),
        ];
        assert_eq!(rules(&refused), [Rule::UnknownValue]);
        let invented = [read("k", Some(("x", 1)), (2, 3))];
        assert_eq!(rules(&invented), [Rule::UnknownValue]);
    }

    /// The classic pause, as a history: the deposed owner's write (epoch 1) was in flight across
    /// the handoff and, without the store's epoch rule, lands after the new owner's acknowledged
    /// write (epoch 2). Linearizable (the writes overlap) but a stale overwrite.
    #[test]
    fn a_deposed_owners_late_write_over_an_acknowledged_one_is_a_stale_overwrite() {
        let history = [
            write("k", "stale", (0, 100), acked(1)),
            write("k", "new", (10, 20), acked(2)),
            read("k", Some(("stale", 1)), (110, 120)),
        ];
        assert_eq!(rules(&history), [Rule::StaleOverwrite]);
        // With the epoch rule the late write is refused and the read sees the new owner's.
        let fenced = [
            write("k", "stale", (0, 100), WriteResult::Refused),
            write("k", "new", (10, 20), acked(2)),
            read("k", Some(("new", 2)), (110, 120)),
        ];
        assert_eq!(rules(&fenced), []);
    }

    #[test]
    fn duplicate_values_cannot_be_checked() {
        let history = [
            write("k", "a", (0, 1), acked(1)),
            write("k", "a", (2, 3), acked(1)),
        ];
        assert_eq!(rules(&history), [Rule::DuplicateValue]);
    }

    #[test]
    fn a_long_history_of_overlapping_operations_stays_within_the_bound() {
        // 150 writes in overlapping pairs, each pair followed by a read of one of them.
        let mut history = Vec::new();
        for i in 0..150u64 {
            let base = i * 100;
            history.push(write("k", &format!("a{i}"), (base, base + 50), acked(1)));
            history.push(write(
                "k",
                &format!("b{i}"),
                (base + 1, base + 49),
                WriteResult::Unknown,
            ));
            history.push(read(
                "k",
                Some((&format!("a{i}"), 1)),
                (base + 60, base + 70),
            ));
        }
        assert_eq!(rules(&history), []);
    }
}
