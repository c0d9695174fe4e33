//! The shell around [`super::core::memory`]: the leader answers a renewal from its memory once a
//! confirmation round that started after the renewal arrived showed a quorum still follows it
//! (PROTOCOL P6.5), and keeps reservations ahead of the leases it tells (P6.6).
//!
//! Rounds: every renewal waiting when a round starts is answered by it, so a burst costs one
//! heartbeat to every voter, not one each. A round is openraft's read index
//! (`Leadership::linearizable_read`): a heartbeat to every voter sent when the round starts, a
//! quorum of acknowledgements in this term (a voter that voted in a newer term refuses it and
//! deposes this leader), then the state applied up to the commit index the round read, so the
//! answer is read from a state that holds every write committed before the renewal arrived.
//! Which round a renewal needs, and whether the rounds confirmed so far cover it, is decided by
//! [`LeadershipConfirmation`], the core the simulator and the confirmation model check run.

use std::sync::{Arc, Mutex, MutexGuard};

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::core::confirmation::{LeadershipConfirmation, Round};
use super::core::memory::{MemoryLeases, ThroughTheLog};
use super::Gathering;
use crate::handles::clock::LeaderClock;
use crate::handles::leadership::Leadership;
use crate::handles::proposer::Proposer;
use crate::lease::answer::LeasesReserved;
use crate::lease::{Answer, Command, LeaseState, RenewResult, Renewal, ToldFromMemory};
use crate::raft::LeaseStateHandle;

/// Renewals waiting for the next confirmation round; a full queue sends a renewal through the
/// log instead (it is answered correctly either way, only slower).
pub const ROUND_QUEUE_CAPACITY: usize = 16_384;
/// Most executors in one `ReserveLeases` entry (about 16 B each); more wait for the next entry.
pub const MAX_RESERVATIONS_PER_ENTRY: usize = 4096;
/// How long reservations asked for are gathered before they are proposed: a reservation is asked
/// for with two leases left, so waiting costs nothing, and a fleet's reservations share entries
/// instead of taking one each.
pub const RESERVATION_GATHER: Duration = Duration::from_millis(250);

/// A renewal waiting for a round: its executor (for the arrival window), the round it needs
/// and where the round's result goes.
#[derive(Debug)]
struct RoundWaiter {
    executor_id: String,
    needed: Round,
    answer: oneshot::Sender<bool>,
}

fn waiting_executor(waiter: &RoundWaiter) -> &str {
    &waiter.executor_id
}

/// The confirmation rounds of the term this node last led.
#[derive(Debug, Default)]
struct TermRounds {
    term: u64,
    confirmation: Option<LeadershipConfirmation>,
}

impl TermRounds {
    /// `term`'s confirmation core: the one begun in `term` if there is one, else a fresh one whose
    /// followers `followers` names. A core never outlives its term: its rounds and
    /// acknowledgements say nothing of a later one.
    fn for_term(
        &mut self,
        term: u64,
        followers: impl FnOnce() -> Vec<u64>,
    ) -> &mut LeadershipConfirmation {
        if self.term != term {
            *self = TermRounds {
                term,
                confirmation: None,
            };
        }
        self.confirmation
            .get_or_insert_with(|| LeadershipConfirmation::new(followers()))
    }
}

/// The voters whose acknowledgements confirm `this_node`'s leadership: all but itself (it votes
/// for itself in every round).
fn other_voters(voters: impl Iterator<Item = u64>, this_node: u64) -> Vec<u64> {
    voters.filter(|id| *id != this_node).collect()
}

/// Whether renewals go through reservations and memory at all: the flag is on and the cluster
/// version keeps reservations (P6.6), so that no manager of an older schema leads after this one
/// without knowing what it told.
fn keeps_reservations(enabled: bool, cluster_version: u32) -> bool {
    enabled && cluster_version >= leasehold_api::wire::LEASE_RESERVATION_SCHEMA
}

/// Whether a renewal may wait for a confirmation round to be answered from memory: reservations
/// are kept and this node leads (P6.5).
fn may_answer_from_memory(enabled: bool, cluster_version: u32, in_office: bool) -> bool {
    keeps_reservations(enabled, cluster_version) && in_office
}

/// Whether this node still leads in `term`, the term whose round confirmed it: an answer read in
/// a later term (or out of office) was not confirmed by that round.
fn still_leads(in_office: bool, term_now: u64, term: u64) -> bool {
    in_office && term_now == term
}

/// The handle renew handlers and the leader's step share (`--renewals-from-memory`).
#[derive(Debug, Clone)]
pub struct MemoryRenewals {
    enabled: bool,
    leases: Arc<Mutex<MemoryLeases>>,
    term_rounds: Arc<Mutex<TermRounds>>,
    rounds: mpsc::Sender<RoundWaiter>,
    reservations_wanted: Arc<Notify>,
}

/// The receiving end of the confirmation rounds, for [`run_rounds`].
#[derive(Debug)]
pub struct RoundRequests(mpsc::Receiver<RoundWaiter>);

/// What the leader's step reads, together (P6.7): the clock, what this term told from memory,
/// and when it last answered from memory (a renewal, for the guard, P6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryReading {
    pub now_ms: u64,
    pub told_from_memory: ToldFromMemory,
    pub last_answered_ms: Option<u64>,
}

/// The handle and its round queue; `enabled: false` answers every renewal through the log.
pub fn memory_renewals(enabled: bool) -> (MemoryRenewals, RoundRequests) {
    let (rounds, requests) = mpsc::channel(ROUND_QUEUE_CAPACITY);
    (
        MemoryRenewals {
            enabled,
            leases: Arc::default(),
            term_rounds: Arc::default(),
            rounds,
            reservations_wanted: Arc::default(),
        },
        RoundRequests(requests),
    )
}

impl MemoryRenewals {
    fn leases(&self) -> MutexGuard<'_, MemoryLeases> {
        self.leases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `term`'s confirmation core, begun afresh when the term is new, its followers the other
    /// voters now.
    fn confirmation<T>(
        &self,
        leadership: &Leadership,
        term: u64,
        use_it: impl FnOnce(&mut LeadershipConfirmation) -> T,
    ) -> T {
        let mut rounds = self
            .term_rounds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let confirmation = rounds.for_term(term, || {
            let metrics = leadership.metrics_snapshot();
            other_voters(
                metrics.membership_config.membership().voter_ids(),
                metrics.id,
            )
        });
        use_it(confirmation)
    }

    /// Answers `renewal` from memory when P6.5 to P6.7 allow it; `None`: it goes through the log.
    pub async fn try_answer(
        &self,
        leadership: &Leadership,
        state: &LeaseStateHandle,
        renewal: &Renewal,
    ) -> Option<RenewResult> {
        if !self.enabled {
            return None;
        }
        let cluster_version = state.read(|applied| applied.state.cluster_version());
        if !may_answer_from_memory(self.enabled, cluster_version, leadership.in_office()) {
            return None;
        }
        let term = leadership.clock.term();
        let (needed, confirmed_already) = self.confirmation(leadership, term, |confirmation| {
            let needed = confirmation.needs();
            (needed, confirmation.is_confirmed(needed))
        });
        // Only a round started after now covers this renewal (P6.5), so a correct core is never
        // confirmed already; the check is the core's to make.
        if !confirmed_already {
            let (answer, confirmed) = oneshot::channel();
            let waiter = RoundWaiter {
                executor_id: renewal.executor_id.clone(),
                needed,
                answer,
            };
            if self.rounds.try_send(waiter).is_err() {
                through_the_log("unconfirmed");
                return None;
            }
            if !confirmed.await.unwrap_or(false) {
                through_the_log("unconfirmed");
                return None;
            }
        }
        if !still_leads(leadership.in_office(), leadership.clock.term(), term) {
            through_the_log("unconfirmed");
            return None;
        }
        let (answered, wants_reservations) = {
            let mut leases = self.leases();
            leases.begin_term(term);
            // The clock is read under the lock the leader's step reads the memory under (P6.7).
            let now_ms = leadership.clock.now_ms();
            let answered = state.read(|applied| leases.answer(&applied.state, renewal, now_ms));
            (answered, leases.wants_reservations())
        };
        if wants_reservations {
            self.reservations_wanted.notify_one();
        }
        match answered {
            Ok(result) => {
                metrics::counter!("leasehold_renewals_from_memory_total").increment(1);
                Some(result)
            }
            Err(reason) => {
                through_the_log(match reason {
                    ThroughTheLog::NotEnabled => "not_enabled",
                    ThroughTheLog::Unknown => "unknown",
                    ThroughTheLog::Claims => "claims",
                    ThroughTheLog::Releasing => "releasing",
                    ThroughTheLog::Readiness => "readiness",
                    ThroughTheLog::LongerLease => "longer_lease",
                    ThroughTheLog::Unreserved => "unreserved",
                    ThroughTheLog::Lapsed => "lapsed",
                });
                None
            }
        }
    }

    /// What the leader's step judges by (P6.7), read under the lock answers take, with the clock
    /// read inside it: an answer either came before (and is in the table) or reads a later clock
    /// (and refuses an executor this reading finds lapsed). Forgets executors `state` no longer
    /// holds.
    pub fn reading(&self, clock: &LeaderClock, state: &LeaseState) -> MemoryReading {
        let mut leases = self.leases();
        leases.begin_term(clock.term());
        leases.forget_absent(state);
        MemoryReading {
            now_ms: clock.now_ms(),
            told_from_memory: leases.told_from_memory().clone(),
            last_answered_ms: leases.last_answered_ms(),
        }
    }
}

impl MemoryRenewals {
    /// Asks for a reservation for an executor this node registered as leader in `term`
    /// (P6.6, P6.8), once the cluster version keeps reservations; the reservations task writes it
    /// with those gathered beside it.
    pub fn reserve_for_registered(&self, cluster_version: u32, term: u64, executor_id: &str) {
        if !keeps_reservations(self.enabled, cluster_version) {
            return;
        }
        {
            let mut leases = self.leases();
            leases.begin_term(term);
            leases.want_reservation(executor_id.to_owned());
        }
        self.reservations_wanted.notify_one();
    }

    /// What this node told from memory in its current term, if it leads (the views' lease
    /// times, P6.7); `None` on a follower.
    pub fn told_if_leading(&self, leadership: &Leadership) -> Option<ToldFromMemory> {
        if !leadership.in_office() {
            return None;
        }
        let leases = self.leases();
        Some(if leases.term() == leadership.clock.term() {
            leases.told_from_memory().clone()
        } else {
            ToldFromMemory::new()
        })
    }
}

fn through_the_log(reason: &'static str) {
    metrics::counter!("leasehold_renewals_through_log_total", "reason" => reason).increment(1);
}

/// Runs confirmation rounds until shutdown: each answers every renewal that was waiting when it
/// started (P6.5). For a fleet a round is held back a little, as a renewal batch is
/// (`window::ArrivalWindow`): each round is a heartbeat to every voter, and an idle fleet of
/// 10 000 executors would otherwise start one for every renewal or two. A lone executor renewing
/// in a closed loop never waits.
pub async fn run_rounds(
    leadership: Leadership,
    memory: MemoryRenewals,
    RoundRequests(mut requests): RoundRequests,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut waiting: Vec<RoundWaiter> = Vec::with_capacity(1024);
    let mut gathering = Gathering::default();
    loop {
        if !gathering
            .next(
                &mut requests,
                &mut waiting,
                ROUND_QUEUE_CAPACITY,
                waiting_executor,
                &mut shutdown,
            )
            .await
        {
            return;
        }
        // The round starts here, after every renewal it answers arrived: each needs this round
        // or an earlier one.
        let term = leadership.clock.term();
        let round = memory.confirmation(&leadership, term, LeadershipConfirmation::start_round);
        let read = leadership.linearizable_read().await.is_ok();
        // A read that ended in another term confirmed that term, not this round.
        let confirmed = read && leadership.clock.term() == term;
        let result = if confirmed {
            "confirmed"
        } else {
            "not_confirmed"
        };
        metrics::counter!("leasehold_confirmation_rounds_total", "result" => result).increment(1);
        let answers: Vec<bool> = if confirmed {
            memory.confirmation(&leadership, term, |confirmation| {
                confirmation.quorum_acknowledged(round);
                waiting
                    .iter()
                    .map(|waiter| confirmation.is_confirmed(waiter.needed))
                    .collect()
            })
        } else {
            vec![false; waiting.len()]
        };
        for (waiter, confirmed) in waiting.drain(..).zip(answers) {
            // A handler that gave up (client gone) no longer waits.
            let _ = waiter.answer.send(confirmed);
        }
    }
}

/// Proposes the reservations renewals asked for (P6.6) until shutdown, one entry at a time. A
/// reservation that could not be committed (this node no longer leads) is asked for again by the
/// executor's next renewal.
pub async fn run_reservations(
    proposer: Proposer,
    clock: Arc<LeaderClock>,
    memory: MemoryRenewals,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = memory.reservations_wanted.notified() => {}
            _ = shutdown.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(RESERVATION_GATHER) => {}
            _ = shutdown.changed() => return,
        }
        loop {
            let executor_ids = memory
                .leases()
                .take_reservations_wanted(MAX_RESERVATIONS_PER_ENTRY);
            if executor_ids.is_empty() {
                break;
            }
            let count = executor_ids.len();
            let command = Command::ReserveLeases {
                now_ms: clock.now_ms(),
                executor_ids,
            };
            match proposer.propose_as::<LeasesReserved>(command).await {
                Ok((_, Answer::Done(_))) => {}
                Ok((_, Answer::Refused(reason))) => {
                    tracing::debug!(
                        count,
                        ?reason,
                        "lease reservations refused; the next renewals ask again"
                    );
                    break;
                }
                Err(error) => {
                    tracing::debug!(count, %error, "lease reservations not committed; the next renewals ask again");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use leasehold_api::wire::LEASE_RESERVATION_SCHEMA;

    use super::*;

    #[test]
    fn p6_5_a_confirmation_core_lasts_its_term_only() {
        let mut rounds = TermRounds::default();
        let first = rounds.for_term(4, || vec![2, 3]);
        let round = first.start_round();
        first.quorum_acknowledged(round);
        assert!(rounds
            .for_term(4, || unreachable!("kept"))
            .is_confirmed(round));
        // The same term keeps its rounds: the next request needs the next round.
        assert_eq!(rounds.for_term(4, Vec::new).needs(), Round(2));
        // A new term starts from nothing, with the followers it has now.
        let next = rounds.for_term(5, || vec![2, 3, 4, 5]);
        assert!(!next.is_confirmed(round));
        assert_eq!(next.needs(), Round(1));
        assert_eq!(*next, LeadershipConfirmation::new([2, 3, 4, 5]));
    }

    #[test]
    fn p6_5_the_followers_are_the_other_voters() {
        assert_eq!(other_voters([1, 2, 3].into_iter(), 2), vec![1, 3]);
        assert_eq!(other_voters([7].into_iter(), 7), Vec::<u64>::new());
        // One voter alone confirms itself at once; any other needs the quorum.
        let mut alone = LeadershipConfirmation::new(other_voters([7].into_iter(), 7));
        let round = alone.start_round();
        assert!(alone.is_confirmed(round));
    }

    #[test]
    fn p6_6_memory_answers_only_once_every_manager_keeps_reservations() {
        let before = LEASE_RESERVATION_SCHEMA - 1;
        assert!(keeps_reservations(true, LEASE_RESERVATION_SCHEMA));
        assert!(keeps_reservations(true, LEASE_RESERVATION_SCHEMA + 1));
        assert!(!keeps_reservations(true, before));
        assert!(!keeps_reservations(false, LEASE_RESERVATION_SCHEMA));
        assert!(may_answer_from_memory(true, LEASE_RESERVATION_SCHEMA, true));
        assert!(!may_answer_from_memory(
            true,
            LEASE_RESERVATION_SCHEMA,
            false
        ));
        assert!(!may_answer_from_memory(true, before, true));
        assert!(!may_answer_from_memory(
            false,
            LEASE_RESERVATION_SCHEMA,
            true
        ));
    }

    #[test]
    fn p6_5_an_answer_counts_only_in_the_term_that_confirmed_it() {
        assert!(still_leads(true, 3, 3));
        assert!(!still_leads(false, 3, 3));
        assert!(!still_leads(true, 4, 3));
    }

    #[test]
    fn p6_6_a_registration_asks_for_a_reservation_once_they_are_kept() {
        let reserved = |enabled: bool, cluster_version: u32| {
            let (memory, _rounds) = memory_renewals(enabled);
            memory.reserve_for_registered(cluster_version, 2, "ex-1");
            let wanted = memory.leases().take_reservations_wanted(8);
            wanted
        };
        let wanted = vec!["ex-1".to_owned()];
        assert_eq!(reserved(true, LEASE_RESERVATION_SCHEMA), wanted);
        assert_eq!(reserved(true, LEASE_RESERVATION_SCHEMA + 1), wanted);
        assert!(reserved(true, LEASE_RESERVATION_SCHEMA - 1).is_empty());
        assert!(reserved(false, LEASE_RESERVATION_SCHEMA).is_empty());
    }

    #[test]
    fn a_round_waiter_is_gathered_under_its_executor() {
        let (answer, _confirmed) = oneshot::channel();
        let waiter = RoundWaiter {
            executor_id: "ex-9".to_owned(),
            needed: Round(1),
            answer,
        };
        assert_eq!(waiting_executor(&waiter), "ex-9");
    }
}
