//! The leader's clock (PROTOCOL P2.3): wall time read once at the start of the term, plus
//! monotonic time since. A wall-clock step during a term cannot shorten a lease, and expiries
//! stored as absolute milliseconds on this clock stay readable by the next leader.

use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
struct Anchor {
    term: u64,
    wall_ms: u64,
    at: Instant,
}

#[derive(Debug)]
pub struct LeaderClock {
    anchor: Mutex<Anchor>,
}

fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

impl Default for LeaderClock {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaderClock {
    pub fn new() -> Self {
        Self {
            anchor: Mutex::new(Anchor {
                term: 0,
                wall_ms: wall_now_ms(),
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
        anchor.wall_ms + anchor.at.elapsed().as_millis() as u64
    }

    /// Re-reads the wall clock when this node starts leading a newer term.
    pub fn begin_term(&self, term: u64) {
        let mut anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        if term > anchor.term {
            *anchor = Anchor {
                term,
                wall_ms: wall_now_ms(),
                at: Instant::now(),
            };
        }
    }

    /// The term the clock was last anchored for.
    pub fn term(&self) -> u64 {
        self.anchor().term
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p2_3_clock_is_monotonic_within_a_term_and_reanchors_only_for_newer_terms() {
        let clock = LeaderClock::new();
        clock.begin_term(3);
        let first = clock.now_ms();
        let second = clock.now_ms();
        assert!(second >= first);
        clock.begin_term(2);
        assert_eq!(clock.term(), 3, "an older term never re-anchors");
        clock.begin_term(4);
        assert_eq!(clock.term(), 4);
    }
}
