//! The leader's clock (PROTOCOL P2.3, P6.4): a reading fixed when the term starts, plus monotonic
//! time since. The reading is the wall clock, raised to what the state already holds
//! (`leader::core::took_office_ms`), so a wall-clock step during a term cannot shorten a lease,
//! expiries stored as absolute milliseconds on this clock stay readable by the next leader, and
//! an earlier leader whose wall clock ran ahead cannot leave deadlines past this one's grace.
//!
//! Commands are stamped with this clock only once it is anchored for the Raft term this node
//! leads ([`LeaderClock::check_stamp`]): a stamp read before the term's anchor could lie below
//! the deadlines the state holds and tell an executor a lease as long as the gap.

use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
struct Anchor {
    term: u64,
    took_office_ms: u64,
    at: Instant,
}

#[derive(Debug)]
pub struct LeaderClock {
    anchor: Mutex<Anchor>,
}

/// The wall clock in milliseconds since the Unix epoch (0 if it reads before it).
pub fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Why a command's stamp may not be proposed in the current term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StaleStamp {
    /// The clock is not yet anchored for the term this node leads: it is still taking office.
    #[error("the leader of term {term} is still taking office (its clock is anchored for term {anchored_term})")]
    TakingOffice { term: u64, anchored_term: u64 },
    /// The stamp was read before this term's anchor.
    #[error("stamp {now_ms} is from before term {term} took office at {took_office_ms}")]
    BeforeOffice {
        term: u64,
        now_ms: u64,
        took_office_ms: u64,
    },
}

impl Default for LeaderClock {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaderClock {
    /// A clock anchored for no term yet (term 0) at the wall clock.
    pub fn new() -> Self {
        Self {
            anchor: Mutex::new(Anchor {
                term: 0,
                took_office_ms: wall_now_ms(),
                at: Instant::now(),
            }),
        }
    }

    fn anchor(&self) -> Anchor {
        *self.anchor.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Milliseconds on this term's clock; never goes backwards within a term.
    pub fn now_ms(&self) -> u64 {
        let anchor = self.anchor();
        anchor.took_office_ms + anchor.at.elapsed().as_millis() as u64
    }

    /// Anchors the clock for a newer term at `took_office_ms`, read now; an older or equal term
    /// changes nothing. Returns whether it anchored.
    pub fn begin_term(&self, term: u64, took_office_ms: u64) -> bool {
        let mut anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        if term <= anchor.term {
            return false;
        }
        *anchor = Anchor {
            term,
            took_office_ms,
            at: Instant::now(),
        };
        true
    }

    /// The term the clock was last anchored for.
    pub fn term(&self) -> u64 {
        self.anchor().term
    }

    /// Whether a command stamped `now_ms` may be proposed while this node leads `term`: only a
    /// stamp of this term's clock, read at or after it took office.
    pub fn check_stamp(&self, term: u64, now_ms: u64) -> Result<(), StaleStamp> {
        let anchor = self.anchor();
        if anchor.term != term {
            return Err(StaleStamp::TakingOffice {
                term,
                anchored_term: anchor.term,
            });
        }
        if now_ms < anchor.took_office_ms {
            return Err(StaleStamp::BeforeOffice {
                term,
                now_ms,
                took_office_ms: anchor.took_office_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p2_3_clock_is_monotonic_within_a_term_and_reanchors_only_for_newer_terms() {
        let clock = LeaderClock::new();
        assert!(clock.begin_term(3, wall_now_ms()));
        let first = clock.now_ms();
        let second = clock.now_ms();
        assert!(second >= first);
        assert!(
            !clock.begin_term(2, u64::MAX / 2),
            "an older term never re-anchors"
        );
        assert!(!clock.begin_term(3, u64::MAX / 2), "nor does the same term");
        assert_eq!(clock.term(), 3);
        assert!(clock.now_ms() < u64::MAX / 2);
        assert!(clock.begin_term(4, wall_now_ms()));
        assert_eq!(clock.term(), 4);
    }

    #[test]
    fn p6_4_a_term_anchored_above_the_wall_clock_reads_from_there() {
        let clock = LeaderClock::new();
        let hour_ahead_ms = wall_now_ms() + 3_600_000;
        clock.begin_term(7, hour_ahead_ms);
        let now_ms = clock.now_ms();
        assert!(
            (hour_ahead_ms..hour_ahead_ms + 60_000).contains(&now_ms),
            "{now_ms} should read from the anchor {hour_ahead_ms}"
        );
    }

    #[test]
    fn p6_4_stamps_of_another_term_or_from_before_office_are_refused() {
        let clock = LeaderClock::new();
        let stale_ms = clock.now_ms();
        let took_office_ms = stale_ms + 3_600_000;
        assert_eq!(
            clock.check_stamp(5, stale_ms),
            Err(StaleStamp::TakingOffice {
                term: 5,
                anchored_term: 0
            }),
            "not anchored for the term it leads yet"
        );
        clock.begin_term(5, took_office_ms);
        assert_eq!(
            clock.check_stamp(5, stale_ms),
            Err(StaleStamp::BeforeOffice {
                term: 5,
                now_ms: stale_ms,
                took_office_ms
            }),
            "read before the anchor, below the deadlines the state holds"
        );
        assert_eq!(clock.check_stamp(5, clock.now_ms()), Ok(()));
        assert!(
            matches!(
                clock.check_stamp(6, clock.now_ms()),
                Err(StaleStamp::TakingOffice { .. })
            ),
            "a newer term needs its own anchor"
        );
    }
}
