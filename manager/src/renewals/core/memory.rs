//! Renewals answered from the leader's memory (PROTOCOL P6.5, P6.6, P6.7): the pure core that
//! decides, for a renewal that arrived before a confirmation round a quorum acknowledged, whether
//! the leader answers it without a log entry, and that keeps what those answers told.
//!
//! A renewal is answered from memory only when a log entry would change nothing but the lease:
//! the executor is known, claims exactly its delivered set at a revision the state has reached,
//! has no shard releasing from it (its claims would acknowledge the revoke, P5.2), is told no
//! longer a lease than the state records as told (P6.1), and has a full lease reserved ahead
//! (P6.6). Anything else goes through the log as before, which also answers it correctly.
//!
//! What an answer told is soft state of this leader's term: the latest end of every copy it told
//! each executor. The leader judges a lease by that and by the expiry the log recorded (P6.7);
//! once the judged expiry has lapsed the executor is never answered from memory again in the term,
//! since the clock only moves forward, so a reap judged on it cannot race an answer.
//!
//! No clock, no network: the shell stamps `now_ms` under the same lock the leader's step reads
//! the table under.

use std::collections::BTreeSet;

use crate::lease::{
    claims_are_exactly, lapsed, Executor, ExecutorId, LeaseState, RenewResult, Renewal,
    ToldFromMemory,
};
use leasehold_api::wire::LEASE_RESERVATION_SCHEMA;

/// A reservation is refreshed once less than this many leases of it remain (P6.6): renewals
/// come every third of a lease, so one of the next several asks in time, and a renewal is
/// answered from memory only while a full lease remains.
pub const RESERVATION_REFRESH_LEASES: u64 = 2;

/// Why a renewal went through the log rather than being answered from memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThroughTheLog {
    /// The cluster version is below 12, or the state is not initialised.
    NotEnabled,
    /// Not registered (the log answers `unknown_executor`).
    Unknown,
    /// Its claims differ from its delivered set, or name a revision the state has not reached
    /// (the log corrects them, P4.2).
    Claims,
    /// A shard is releasing from it: its claims may acknowledge the revoke (P5.2).
    Releasing,
    /// The configured lease is longer than the longest the state records as told (P6.1).
    LongerLease,
    /// Less than a full lease is reserved ahead (P6.6).
    Unreserved,
    /// Its judged expiry has lapsed (P6.7): the log orders the renewal against the reap.
    Lapsed,
    /// It says a secondary is ready that the state does not record as ready, or no longer says
    /// so of one it does (P19.3): the log records readiness, which promotion orders by.
    Readiness,
}

/// One term's memory of the leases it told without a log entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryLeases {
    /// The term this memory belongs to; a new term starts empty (its grace, P6.1, covers the
    /// copies an earlier term told).
    term: u64,
    /// The latest end, on the leader clock, of the copies this term told each executor from
    /// memory.
    told_until_ms: ToldFromMemory,
    /// Executors whose reservation should be refreshed (P6.6), each at most once.
    reservations_wanted: BTreeSet<ExecutorId>,
    /// When this term last answered a renewal from memory: a renewal applied, for the
    /// mass-expiry guard (P6.3).
    last_answered_ms: Option<u64>,
}

impl MemoryLeases {
    /// Starts `term` afresh if this memory is of another.
    pub fn begin_term(&mut self, term: u64) {
        if self.term != term {
            *self = Self {
                term,
                ..Self::default()
            };
        }
    }

    /// The term this memory belongs to.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Answers `renewal` from memory at `now_ms` on `state` (read after a confirmation round
    /// started after it arrived, P6.5), or says why it goes through the log. An answer records
    /// the copy it tells; either way a reservation running low is asked for.
    pub fn answer(
        &mut self,
        state: &LeaseState,
        renewal: &Renewal,
        now_ms: u64,
    ) -> Result<RenewResult, ThroughTheLog> {
        if state.config().is_none() || state.cluster_version() < LEASE_RESERVATION_SCHEMA {
            return Err(ThroughTheLog::NotEnabled);
        }
        let Some(executor) = state.executor(&renewal.executor_id) else {
            return Err(ThroughTheLog::Unknown);
        };
        // The lease of the executor's namespace (P18.1), which its reservation is made of.
        let Some(lease_ms) = state
            .space(&executor.namespace)
            .and_then(|space| space.config())
            .map(|config| config.lease_duration_ms)
        else {
            return Err(ThroughTheLog::Unknown);
        };
        if lapsed(self.judged_expiry_ms(executor), now_ms) {
            return Err(ThroughTheLog::Lapsed);
        }
        if lease_ms > state.longest_lease_told_ms() {
            return Err(ThroughTheLog::LongerLease);
        }
        let Some(mut grant) = state.grant_for(&executor.id, now_ms) else {
            return Err(ThroughTheLog::Unknown);
        };
        if renewal.revision > state.revision()
            || !claims_are_exactly(renewal.claims.iter().copied(), grant.shards.iter().copied())
        {
            return Err(ThroughTheLog::Claims);
        }
        if executor.owned_shards.len() != grant.shards.len() {
            return Err(ThroughTheLog::Releasing);
        }
        if !state.readiness_after(renewal, now_ms).is_empty() {
            return Err(ThroughTheLog::Readiness);
        }
        let reserved_ms = executor.lease_reserved_until_ms.saturating_sub(now_ms);
        if reserved_ms < lease_ms.saturating_mul(RESERVATION_REFRESH_LEASES) {
            self.reservations_wanted.insert(executor.id.clone());
        }
        if reserved_ms < lease_ms {
            return Err(ThroughTheLog::Unreserved);
        }
        let told_until_ms = now_ms.saturating_add(lease_ms);
        let told = self
            .told_until_ms
            .entry(executor.id.clone())
            .or_insert(told_until_ms);
        *told = (*told).max(told_until_ms);
        self.last_answered_ms = Some(self.last_answered_ms.map_or(now_ms, |at| at.max(now_ms)));
        grant.lease_ttl_ms = lease_ms;
        Ok(RenewResult::Renewed {
            grant,
            claims_mismatch: false,
            acknowledged: Vec::new(),
        })
    }

    /// The latest end of every copy of `executor`'s lease this term told, from memory or through
    /// the log (its told expiry); earlier terms' copies end within this term's grace (P6.1), which
    /// the leader waits out before it reaps anything.
    pub fn judged_expiry_ms(&self, executor: &Executor) -> u64 {
        executor.judged_expiry_ms(self.told_until_ms.get(&executor.id).copied())
    }

    /// What this term told from memory, as the leader's step reads it (P6.7).
    pub fn told_from_memory(&self) -> &ToldFromMemory {
        &self.told_until_ms
    }

    /// When this term last answered a renewal from memory.
    pub fn last_answered_ms(&self) -> Option<u64> {
        self.last_answered_ms
    }

    /// Asks for a reservation for `executor_id`, which this leader just registered (P6.6): it
    /// is written before the executor's first renewal, a third of a lease later, so that renewal
    /// is answered from memory too. Without it a fleet registered at once would renew through the
    /// log together, one entry per batch, and every renewal answered from memory meanwhile would
    /// wait for those entries to be applied (P6.8, step 1).
    pub fn want_reservation(&mut self, executor_id: ExecutorId) {
        self.reservations_wanted.insert(executor_id);
    }

    /// Takes up to `max` executors whose reservation should be refreshed, ascending.
    pub fn take_reservations_wanted(&mut self, max: usize) -> Vec<ExecutorId> {
        let taken: Vec<ExecutorId> = self.reservations_wanted.iter().take(max).cloned().collect();
        for id in &taken {
            self.reservations_wanted.remove(id);
        }
        taken
    }

    /// Whether any reservation is waiting to be asked for.
    pub fn wants_reservations(&self) -> bool {
        !self.reservations_wanted.is_empty()
    }

    /// Forgets executors `state` no longer holds (reaped or deregistered), so the memory stays
    /// bounded by the executors registered.
    pub fn forget_absent(&mut self, state: &LeaseState) {
        self.told_until_ms
            .retain(|id, _| state.executor(id).is_some());
        self.reservations_wanted
            .retain(|id| state.executor(id).is_some());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::tests::register_command;
    use crate::lease::{plan_rebalance, Command, Outcome, LEASE_RESERVATION_LEASES};
    use leasehold_api::wire::FIRST_RELEASE_SCHEMA;

    const LEASE_MS: u64 = 30_000;
    const RESERVED_AT_MS: u64 = 1_000;

    /// A state at `cluster_version` with executor `ex-3` holding every shard of 4, registered at
    /// 0, and its reservation made at `RESERVED_AT_MS` when `reserve`.
    fn state(cluster_version: u32, reserve: bool) -> (LeaseState, u64) {
        let mut state = LeaseState::default();
        let mut index = 0;
        let mut apply = |state: &mut LeaseState, command: Command| {
            index += 1;
            state.apply(index, &command)
        };
        apply(
            &mut state,
            Command::Init {
                now_ms: 0,
                shard_count: 4,
                lease_duration_ms: LEASE_MS,
            },
        );
        apply(
            &mut state,
            Command::SetClusterVersion {
                now_ms: 0,
                cluster_version,
            },
        );
        let Outcome::Registered { grant, .. } = apply(&mut state, register_command(0, "a")) else {
            panic!("registered");
        };
        assert_eq!(grant.executor_id, "ex-3");
        let plan = plan_rebalance(&state, 0).expect("a plan");
        apply(&mut state, plan);
        if reserve {
            apply(
                &mut state,
                Command::ReserveLeases {
                    now_ms: RESERVED_AT_MS,
                    executor_ids: vec!["ex-3".to_owned()],
                },
            );
        }
        let revision = state.revision();
        (state, revision)
    }

    fn in_sync(state: &LeaseState) -> Renewal {
        Renewal {
            executor_id: "ex-3".to_owned(),
            claims: state.delivered_set("ex-3"),
            revision: state.revision(),
            ready: Vec::new(),
        }
    }

    /// P6.5, P6.6: a renewal claiming its set, with a full lease reserved, is answered from memory
    /// with a full lease and the set, and what it told is remembered.
    #[test]
    fn p6_6_a_renewal_in_sync_with_a_reservation_is_answered_from_memory() {
        let (state, revision) = state(LEASE_RESERVATION_SCHEMA, true);
        let mut memory = MemoryLeases::default();
        let now_ms = 20_000;
        let answer = memory.answer(&state, &in_sync(&state), now_ms);
        let Ok(RenewResult::Renewed {
            grant,
            claims_mismatch: false,
            acknowledged,
        }) = answer
        else {
            panic!("{answer:?}");
        };
        assert!(acknowledged.is_empty());
        assert_eq!(grant.lease_ttl_ms, LEASE_MS);
        assert_eq!(grant.revision, revision);
        assert_eq!(grant.shards, state.delivered_set("ex-3"));
        assert_eq!(
            memory.told_from_memory().get("ex-3"),
            Some(&(now_ms + LEASE_MS))
        );
        assert_eq!(memory.last_answered_ms(), Some(now_ms));
        let executor = state.executor("ex-3").expect("ex-3");
        assert_eq!(memory.judged_expiry_ms(executor), now_ms + LEASE_MS);
    }

    /// P18.1 with P6.6: an executor of a namespace is told its namespace's lease from memory, as
    /// through the log, whatever `default`'s is: a longer one would outlive what the namespace's
    /// plans wait for, a shorter one would make it renew for nothing.
    #[test]
    fn p18_1_a_renewal_from_memory_tells_the_namespace_s_lease() {
        use crate::lease::tests::{create_namespace_command, register_in_command};
        use crate::lease::Move;
        use leasehold_api::wire::NAMESPACES_SCHEMA;

        const KV_LEASE_MS: u64 = 6_000;
        let (mut state, _) = state(NAMESPACES_SCHEMA, false);
        let mut index = state.revision();
        let mut apply = |state: &mut LeaseState, command: Command| {
            index += 1;
            state.apply(index, &command)
        };
        apply(
            &mut state,
            create_namespace_command("kv", 2, KV_LEASE_MS, None),
        );
        let Outcome::Registered { grant, .. } =
            apply(&mut state, register_in_command(0, "k", "kv"))
        else {
            panic!("registered into kv");
        };
        let k = grant.executor_id;
        assert_eq!(grant.lease_ttl_ms, KV_LEASE_MS, "through the log");
        let planned_at = state.revision();
        apply(
            &mut state,
            Command::Rebalance {
                now_ms: 0,
                planned_at,
                namespace: "kv".into(),
                moves: (0..2)
                    .map(|shard| Move {
                        shard,
                        to: k.clone(),
                    })
                    .collect(),
            },
        );
        apply(
            &mut state,
            Command::ReserveLeases {
                now_ms: RESERVED_AT_MS,
                executor_ids: vec![k.clone()],
            },
        );
        let mut memory = MemoryLeases::default();
        let now_ms = 2_000;
        let renewal = Renewal {
            executor_id: k.clone(),
            claims: state.delivered_set(&k),
            revision: state.revision(),
            ready: Vec::new(),
        };
        let answer = memory.answer(&state, &renewal, now_ms);
        let Ok(RenewResult::Renewed { grant, .. }) = answer else {
            panic!("{answer:?}");
        };
        assert_eq!(grant.lease_ttl_ms, KV_LEASE_MS, "kv's lease, not default's");
        assert_eq!(
            memory.told_from_memory().get(&k),
            Some(&(now_ms + KV_LEASE_MS))
        );
    }

    /// P6.5 to P6.7: whatever a log entry would do more than extend the lease goes through the log.
    #[test]
    fn p6_5_what_the_log_must_carry_is_not_answered_from_memory() {
        let now_ms = 20_000;
        let (below, _) = state(FIRST_RELEASE_SCHEMA, false);
        let mut memory = MemoryLeases::default();
        assert_eq!(
            memory.answer(&below, &in_sync(&below), now_ms),
            Err(ThroughTheLog::NotEnabled)
        );

        let (state, _) = state(LEASE_RESERVATION_SCHEMA, true);
        let unknown = Renewal {
            executor_id: "ex-9".to_owned(),
            ..in_sync(&state)
        };
        assert_eq!(
            memory.answer(&state, &unknown, now_ms),
            Err(ThroughTheLog::Unknown)
        );
        let mut fewer = in_sync(&state);
        fewer.claims.pop();
        assert_eq!(
            memory.answer(&state, &fewer, now_ms),
            Err(ThroughTheLog::Claims)
        );
        let mut ahead = in_sync(&state);
        ahead.revision += 1;
        assert_eq!(
            memory.answer(&state, &ahead, now_ms),
            Err(ThroughTheLog::Claims)
        );

        let mut longer = state.clone();
        let _ = longer.apply(
            state.revision() + 1,
            &Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms: LEASE_MS * 2,
            },
        );
        assert_eq!(
            memory.answer(&longer, &in_sync(&longer), now_ms),
            Err(ThroughTheLog::LongerLease)
        );
        assert!(memory.told_from_memory().is_empty(), "nothing told");
        assert_eq!(memory.last_answered_ms(), None);
    }

    /// P5.2: an executor with a shard releasing from it goes through the log, where its claims
    /// may acknowledge the revoke.
    #[test]
    fn p5_2_an_executor_with_a_shard_releasing_goes_through_the_log() {
        let (mut state, _) = state(LEASE_RESERVATION_SCHEMA, true);
        let mut index = state.revision() + 10;
        let Outcome::Registered { grant, .. } = state.apply(index, &register_command(2_000, "b"))
        else {
            panic!("registered");
        };
        index += 1;
        let planned_at = state.revision();
        let outcome = state.apply(
            index,
            &Command::Rebalance {
                namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                now_ms: 2_000,
                planned_at,
                moves: vec![crate::lease::Move {
                    shard: 0,
                    to: grant.executor_id,
                }],
            },
        );
        assert!(matches!(outcome, Outcome::Rebalanced { .. }), "{outcome:?}");
        let mut memory = MemoryLeases::default();
        assert_eq!(
            memory.answer(&state, &in_sync(&state), 3_000),
            Err(ThroughTheLog::Releasing)
        );
    }

    /// P6.6: without a full lease reserved the renewal goes through the log and asks for a
    /// reservation; with less than two leases left it is answered and asks for a refresh.
    #[test]
    fn p6_6_a_reservation_running_low_is_asked_for() {
        let (unreserved, _) = state(LEASE_RESERVATION_SCHEMA, false);
        let mut memory = MemoryLeases::default();
        assert_eq!(
            memory.answer(&unreserved, &in_sync(&unreserved), 5_000),
            Err(ThroughTheLog::Unreserved)
        );
        assert!(memory.wants_reservations());
        assert_eq!(memory.take_reservations_wanted(10), vec!["ex-3".to_owned()]);
        assert!(!memory.wants_reservations());

        let (state, _) = state(LEASE_RESERVATION_SCHEMA, true);
        let reserved_until_ms = RESERVED_AT_MS + LEASE_RESERVATION_LEASES * LEASE_MS;
        assert!(memory.answer(&state, &in_sync(&state), 20_000).is_ok());
        assert!(!memory.wants_reservations(), "three leases left");
        // Two leases left exactly: no refresh yet.
        let two_left = reserved_until_ms - RESERVATION_REFRESH_LEASES * LEASE_MS;
        assert!(memory.answer(&state, &in_sync(&state), two_left).is_ok());
        assert!(!memory.wants_reservations());
        let later = two_left + 1;
        assert!(memory.answer(&state, &in_sync(&state), later).is_ok());
        assert!(memory.wants_reservations());
        // A copy may not outlast the reservation.
        let one_left = reserved_until_ms - LEASE_MS;
        assert!(memory.answer(&state, &in_sync(&state), one_left).is_ok());
        assert_eq!(
            memory.answer(&state, &in_sync(&state), one_left + 1),
            Err(ThroughTheLog::Unreserved)
        );
    }

    /// P6.7: once the judged expiry has lapsed, the executor is never answered from memory again
    /// in the term, reservation or not: a reap judged on it cannot race an answer.
    #[test]
    fn p6_7_an_executor_judged_lapsed_is_not_answered_from_memory_again() {
        let (state, _) = state(LEASE_RESERVATION_SCHEMA, true);
        let mut memory = MemoryLeases::default();
        let answered_at = 20_000;
        assert!(memory.answer(&state, &in_sync(&state), answered_at).is_ok());
        let judged = answered_at + LEASE_MS;
        assert!(
            memory.answer(&state, &in_sync(&state), judged).is_ok(),
            "its own millisecond"
        );
        let judged = judged + LEASE_MS;
        assert_eq!(
            memory.answer(&state, &in_sync(&state), judged + 1),
            Err(ThroughTheLog::Lapsed)
        );
        // Nor an executor whose told expiry lapsed with nothing told from memory (a new term).
        let mut fresh = MemoryLeases::default();
        fresh.begin_term(2);
        let told_expiry_ms = state.executor("ex-3").expect("ex-3").lease_expiry_ms;
        assert_eq!(
            fresh.answer(&state, &in_sync(&state), told_expiry_ms + 1),
            Err(ThroughTheLog::Lapsed)
        );
    }

    /// A new term starts with nothing told; executors that left are forgotten.
    #[test]
    fn a_new_term_starts_empty_and_executors_that_left_are_forgotten() {
        let (state, _) = state(LEASE_RESERVATION_SCHEMA, true);
        let mut memory = MemoryLeases::default();
        memory.begin_term(1);
        assert!(memory.answer(&state, &in_sync(&state), 20_000).is_ok());
        memory.begin_term(1);
        assert_eq!(memory.told_from_memory().len(), 1, "same term");
        memory.forget_absent(&state);
        assert_eq!(memory.told_from_memory().len(), 1, "still registered");
        memory.forget_absent(&LeaseState::default());
        assert!(memory.told_from_memory().is_empty());
        assert!(memory.answer(&state, &in_sync(&state), 20_000).is_ok());
        memory.begin_term(2);
        assert_eq!(memory.term(), 2);
        assert!(memory.told_from_memory().is_empty());
        assert_eq!(memory.last_answered_ms(), None);
    }
}
