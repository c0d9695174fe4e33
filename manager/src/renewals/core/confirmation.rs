//! Leadership confirmed by a quorum (PROTOCOL P6.5): the pure core that decides when a leader
//! may answer a request from what it holds in memory, without a log entry.
//!
//! A leader that answers from memory must know it was still the leader at some instant after the
//! request arrived: a leader deposed by an election it has not heard of yet would otherwise
//! extend a lease it no longer owns. It knows it when a majority of the voters (itself among
//! them) acknowledged, in its term, a heartbeat sent after the request arrived. Any later leader
//! needs the votes of a majority, which shares a voter with that one; that voter acknowledged
//! the heartbeat before it voted (a voter that has voted in a newer term refuses the old term's
//! heartbeats), so the later leader took office after the heartbeat was sent, after the request
//! arrived, after the executor sent it. Its grace of a full lease from taking office (P6.1)
//! therefore outlasts every lease copy the answer gave (anchored at the send instant, P3.2).
//!
//! Heartbeats go out in numbered rounds, one broadcast each, and every request that arrives
//! while none is under way waits for the same next round, so a burst of requests costs one
//! round trip to a quorum, not one each. A follower's acknowledgement of round `n` vouches for
//! every round up to `n` (it followed this term when round `n` reached it, after those were
//! sent).
//!
//! No clock, no network: the shell stamps heartbeats with [`LeadershipConfirmation::start_round`]
//! and feeds acknowledgements back; the simulator and the model check drive the same core.

use std::collections::BTreeMap;

/// A heartbeat round of one leader term, numbered from 1 in the order they were sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Round(pub u64);

/// One leader term's confirmation rounds and what its followers acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeadershipConfirmation {
    /// The newest round each other voter acknowledged in this term (0: none yet).
    acknowledged: BTreeMap<u64, u64>,
    /// Rounds started in this term.
    started: u64,
    /// The newest round the shell's Raft library reported a majority acknowledged (openraft's
    /// read index counts the quorum itself and says only that it was reached).
    quorum_acknowledged: u64,
    /// A voter answered from a newer term: this leader is deposed and confirms nothing again.
    superseded: bool,
}

impl LeadershipConfirmation {
    /// A new term's confirmation, the other voters being `followers` (this leader votes too).
    pub fn new(followers: impl IntoIterator<Item = u64>) -> Self {
        Self {
            acknowledged: followers.into_iter().map(|id| (id, 0)).collect(),
            started: 0,
            quorum_acknowledged: 0,
            superseded: false,
        }
    }

    /// The round a request arriving now must wait for: the next one, since only a heartbeat
    /// sent after the arrival shows leadership after it.
    pub fn needs(&self) -> Round {
        Round(self.started.saturating_add(1))
    }

    /// Whether a round must start for a request waiting for `needed`: none has since it arrived.
    pub fn round_due(&self, needed: Round) -> bool {
        needed.0 > self.started
    }

    /// Starts the next round; its number goes on every heartbeat of the broadcast.
    pub fn start_round(&mut self) -> Round {
        self.started = self.started.saturating_add(1);
        Round(self.started)
    }

    /// Whether a round started is not confirmed yet: requests arriving now wait for the next
    /// round, which starts once this one is confirmed, so one round at a time serves a burst.
    pub fn round_under_way(&self) -> bool {
        self.confirmed().map_or(0, |round| round.0) < self.started
    }

    /// `follower` acknowledged `round` in this term. Acknowledgements of rounds never started
    /// and of voters outside the configuration are ignored.
    pub fn acknowledged(&mut self, follower: u64, round: Round) {
        if round.0 > self.started {
            return;
        }
        if let Some(newest) = self.acknowledged.get_mut(&follower) {
            *newest = (*newest).max(round.0);
        }
    }

    /// A majority of the voters acknowledged `round` in this term, as the shell's Raft library
    /// counted them. A round never started counts for nothing.
    pub fn quorum_acknowledged(&mut self, round: Round) {
        if round.0 <= self.started {
            self.quorum_acknowledged = self.quorum_acknowledged.max(round.0);
        }
    }

    /// A voter answered from a newer term.
    pub fn superseded(&mut self) {
        self.superseded = true;
    }

    /// Whether this leader learned it was deposed.
    pub fn is_superseded(&self) -> bool {
        self.superseded
    }

    /// The newest round a majority of the voters acknowledged, this leader counting for every
    /// round it started; `None` before any, or once superseded.
    pub fn confirmed(&self) -> Option<Round> {
        if self.superseded {
            return None;
        }
        let mut rounds: Vec<u64> = self.acknowledged.values().copied().collect();
        rounds.push(self.started);
        rounds.sort_unstable_by(|a, b| b.cmp(a));
        let majority = rounds.len() / 2 + 1;
        let round = rounds
            .get(majority - 1)
            .copied()
            .unwrap_or(0)
            .max(self.quorum_acknowledged);
        (round > 0).then_some(Round(round))
    }

    /// Whether a request waiting for `needed` may be answered.
    pub fn is_confirmed(&self, needed: Round) -> bool {
        self.confirmed().is_some_and(|round| round >= needed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P6.5: a request is answered only once a majority acknowledged a round started after it
    /// arrived; one round serves every request that waited for it.
    #[test]
    fn p6_5_a_request_waits_for_a_round_started_after_it_arrived() {
        let mut confirmation = LeadershipConfirmation::new([2, 3]);
        let first = confirmation.start_round();
        confirmation.acknowledged(2, first);
        assert_eq!(confirmation.confirmed(), Some(first));

        // Arrives after round 1 was acknowledged: round 1 shows nothing about it.
        let needed = confirmation.needs();
        assert_eq!(needed, Round(2));
        assert!(!confirmation.is_confirmed(needed));
        assert!(confirmation.round_due(needed));
        let second = confirmation.start_round();
        assert!(
            !confirmation.round_due(needed),
            "one round serves the waiting"
        );
        let also_waiting = Round(2);
        assert!(
            !confirmation.is_confirmed(needed),
            "only this leader so far"
        );
        confirmation.acknowledged(3, second);
        assert!(confirmation.is_confirmed(needed));
        assert!(confirmation.is_confirmed(also_waiting));
    }

    /// P6.5: acknowledgements of later rounds vouch for earlier ones; unknown voters and rounds
    /// never started count for nothing; a deposed leader confirms nothing.
    #[test]
    fn p6_5_quorum_counting() {
        let mut confirmation = LeadershipConfirmation::new([2, 3, 4, 5]);
        for _ in 0..3 {
            confirmation.start_round();
        }
        confirmation.acknowledged(2, Round(3));
        confirmation.acknowledged(9, Round(3));
        confirmation.acknowledged(3, Round(7));
        assert_eq!(confirmation.confirmed(), None, "2 of 5 voters");
        confirmation.acknowledged(4, Round(1));
        assert_eq!(
            confirmation.confirmed(),
            Some(Round(1)),
            "3 of 5 at round 1"
        );
        confirmation.acknowledged(4, Round(2));
        assert_eq!(confirmation.confirmed(), Some(Round(2)));
        confirmation.superseded();
        assert!(confirmation.is_superseded());
        assert_eq!(confirmation.confirmed(), None);

        let mut counted_elsewhere = LeadershipConfirmation::new([2, 3]);
        counted_elsewhere.quorum_acknowledged(Round(1));
        assert_eq!(counted_elsewhere.confirmed(), None, "round 1 never started");
        let first = counted_elsewhere.start_round();
        let needed = counted_elsewhere.needs();
        counted_elsewhere.start_round();
        counted_elsewhere.quorum_acknowledged(first);
        assert!(
            !counted_elsewhere.is_confirmed(needed),
            "round 1 went before"
        );
        counted_elsewhere.quorum_acknowledged(needed);
        assert!(counted_elsewhere.is_confirmed(needed));

        let alone = LeadershipConfirmation::new([]);
        assert_eq!(alone.confirmed(), None, "nothing started");
        let mut alone = alone;
        let round = alone.start_round();
        assert!(
            alone.is_confirmed(round),
            "a single voter is its own majority"
        );
    }
}
