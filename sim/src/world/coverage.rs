//! What a run reached: counts of the protocol paths the checks want exercised.

use super::*;
use leasehold_api::wire::ReshardKind;
use leasehold_manager::lease::OperatorAction;

/// Counts of what a run reached, summed over seeds by the caller: a simulator that silently
/// stopped reaching a situation shows up as a zero.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub commits: u64,
    /// Renewals the leader answered from memory after a confirmation round (P6.8).
    pub renewals_from_memory: u64,
    /// Renewals from executors stranded with a deposed leader that reached it (P6.5: a correct
    /// build answers none of them).
    pub renewals_at_a_deposed_leader: u64,
    /// Shards a plan marked releasing from a live owner (P5.2).
    pub handoffs_started: u64,
    /// Releasing shards a plan gave back to their owner (P5.4).
    pub handoffs_cancelled: u64,
    pub handoffs_completed_by_release: u64,
    pub handoffs_completed_by_claims: u64,
    pub handoffs_completed_by_expiry: u64,
    /// Shards an acknowledgement named whose handoff was no longer current (P5.2).
    pub acknowledgements_ignored: u64,
    /// Renewals whose claims differed from the recorded set (P4.2).
    pub claims_mismatches: u64,
    /// Plans refused because the assignment changed since they were read (P2.4).
    pub stale_plans_refused: u64,
    pub executors_reaped: u64,
    /// Reap candidates that had renewed by the time the reap applied (P2.4).
    pub reap_candidates_skipped: u64,
    /// Registrations answered as already registered (P4.4, P7.2).
    pub registrations_retried: u64,
    /// Executors an operator marked draining (a change, not a repeat).
    pub drains_started: u64,
    pub reaps_deferred_by_guard: u64,
    /// Steps of a leader in its first lease in office that found overdue executors and reaped
    /// none (P6.1).
    pub reaps_deferred_by_new_leader: u64,
    /// ... of which one of those overdue executors' processes still admitted a shard: the
    /// grace was all that stood between the leader's clock and an I1 violation.
    pub deferred_reaps_of_admitting_executors: u64,
    /// Steps of a leader in its first lease in office that found a handoff due on its clock and
    /// completed none (P6.1).
    pub expired_handoffs_deferred_by_new_leader: u64,
    pub leader_changes: u64,
    pub snapshot_restarts: u64,
    pub stale_grants: u64,
    pub pushes_refused: u64,
    /// Revokes an executor answered as ignored: a newer set gave back every shard (P5.2).
    pub stale_revokes_ignored: u64,
    /// Revokes a newer set overtook that still released shards it had taken away (P4.1).
    pub overtaken_revokes_released: u64,
    pub i4_probes: u64,
    pub join_probes: u64,
    /// Whole zones killed at once (P18.3): every executor stating one zone.
    pub zone_crashes: u64,
    /// Preference probes run (P18.4).
    pub preference_probes: u64,
    /// Of those, zones whose executors were reaped in different entries (their leases lapsed at
    /// different steps), where survivors' shards may move.
    pub zone_crashes_staggered: u64,
    /// Shards moved for balance in committed plans (P15.2, P15.3).
    pub balance_moves: u64,
    /// Shards moved to a joiner in committed plans made on reported loads (P5.4 under load).
    pub joins_under_load: u64,
    /// Leader steps that planned on reported loads with a hot shard among them (P15.4).
    pub hot_shard_steps: u64,
    /// Steps of a leader after a leader change that placed while still learning the loads
    /// (P15.1).
    pub learning_after_leader_change: u64,
    /// Renewals the leader recorded from a lying executor.
    pub lying_reports: u64,
    /// Executors restarted with another capacity (P15.1).
    pub capacity_restarts: u64,
    /// Operator controls that changed something (P17.4): maintenance, pins, moves.
    pub operator_controls: u64,
    /// Shifts of the hot set.
    pub hot_set_shifts: u64,
    /// Runs of the leader on steady reported loads after convergence (`run::load_phase`).
    pub load_phases: u64,
    /// ... of which the lower bound allowed the band, and the band was checked at the end.
    pub band_checks: u64,
    /// ... of which a liar was lying, and the starvation and count checks ran.
    pub liar_checks: u64,
    /// Runs with namespaces beside `default` (P18.1), each with executors of its own.
    pub namespace_runs: u64,
    /// Leader steps that planned several namespaces (P18.1: each step plans every one).
    pub namespace_steps: u64,
    /// Plans committed in a namespace other than `default`.
    pub namespace_plans: u64,
    /// Shards moved for balance in a namespace other than `default`, by its own loads and
    /// budget (P15, P18.1).
    pub namespace_balance_moves: u64,
    /// Whole zones killed at once in a namespace other than `default` (P18.3 there).
    pub namespace_zone_crashes: u64,
    /// Every executor of one namespace killed at once while another's kept theirs (P18.1).
    pub namespace_losses: u64,
    /// Probes that checked, with several namespaces, that what they did in one namespace moved
    /// nothing of another (P18.1).
    pub isolation_checks: u64,
    /// Runs with a namespace of more than one replica per shard (P19.1).
    pub replicated_runs: u64,
    /// Shards whose secondaries a committed plan changed (P19.2).
    pub secondaries_placed: u64,
    /// Primaries that went to one of the shard's secondaries (P19.3, P19.4).
    pub promotions: u64,
    /// Splits carried out (`Reshard` applied, P20.2), during the chaos or after it.
    pub splits: u64,
    /// Merges carried out (P20.2).
    pub merges: u64,
    /// Reshard requests refused (P20.1): by the state machine, or a merge of an odd count.
    pub reshards_refused: u64,
    /// Splits and merges carried out while faults were still injected.
    pub reshards_under_faults: u64,
}

impl Coverage {
    pub(super) fn counts(&self) -> [(&'static str, u64); 55] {
        [
            ("commits", self.commits),
            ("renewals answered from memory", self.renewals_from_memory),
            (
                "renewals at a deposed leader",
                self.renewals_at_a_deposed_leader,
            ),
            ("handoffs_started", self.handoffs_started),
            ("handoffs_cancelled", self.handoffs_cancelled),
            (
                "handoffs_completed_by_release",
                self.handoffs_completed_by_release,
            ),
            (
                "handoffs_completed_by_claims",
                self.handoffs_completed_by_claims,
            ),
            (
                "handoffs_completed_by_expiry",
                self.handoffs_completed_by_expiry,
            ),
            ("acknowledgements_ignored", self.acknowledgements_ignored),
            ("claims_mismatches", self.claims_mismatches),
            ("stale_plans_refused", self.stale_plans_refused),
            ("executors_reaped", self.executors_reaped),
            ("reap_candidates_skipped", self.reap_candidates_skipped),
            ("registrations_retried", self.registrations_retried),
            ("drains_started", self.drains_started),
            ("reaps_deferred_by_guard", self.reaps_deferred_by_guard),
            (
                "reaps_deferred_by_new_leader",
                self.reaps_deferred_by_new_leader,
            ),
            (
                "deferred_reaps_of_admitting_executors",
                self.deferred_reaps_of_admitting_executors,
            ),
            (
                "expired_handoffs_deferred_by_new_leader",
                self.expired_handoffs_deferred_by_new_leader,
            ),
            ("leader_changes", self.leader_changes),
            ("snapshot_restarts", self.snapshot_restarts),
            ("stale_grants", self.stale_grants),
            ("pushes_refused", self.pushes_refused),
            ("stale_revokes_ignored", self.stale_revokes_ignored),
            (
                "overtaken_revokes_released",
                self.overtaken_revokes_released,
            ),
            ("i4_probes", self.i4_probes),
            ("join_probes", self.join_probes),
            ("zone_crashes", self.zone_crashes),
            ("preference_probes", self.preference_probes),
            ("zone_crashes_staggered", self.zone_crashes_staggered),
            ("balance_moves", self.balance_moves),
            ("joins_under_load", self.joins_under_load),
            ("hot_shard_steps", self.hot_shard_steps),
            (
                "learning_after_leader_change",
                self.learning_after_leader_change,
            ),
            ("lying_reports", self.lying_reports),
            ("capacity_restarts", self.capacity_restarts),
            ("operator_controls", self.operator_controls),
            ("hot_set_shifts", self.hot_set_shifts),
            ("load_phases", self.load_phases),
            ("band_checks", self.band_checks),
            ("liar_checks", self.liar_checks),
            ("namespace_runs", self.namespace_runs),
            ("namespace_steps", self.namespace_steps),
            ("namespace_plans", self.namespace_plans),
            ("namespace_balance_moves", self.namespace_balance_moves),
            ("namespace_zone_crashes", self.namespace_zone_crashes),
            ("namespace_losses", self.namespace_losses),
            ("isolation_checks", self.isolation_checks),
            ("replicated_runs", self.replicated_runs),
            ("secondaries_placed", self.secondaries_placed),
            ("promotions", self.promotions),
            ("splits", self.splits),
            ("merges", self.merges),
            ("reshards_refused", self.reshards_refused),
            ("reshards_under_faults", self.reshards_under_faults),
        ]
    }

    pub fn add(&mut self, other: &Coverage) {
        self.commits += other.commits;
        self.renewals_from_memory += other.renewals_from_memory;
        self.renewals_at_a_deposed_leader += other.renewals_at_a_deposed_leader;
        self.handoffs_started += other.handoffs_started;
        self.handoffs_cancelled += other.handoffs_cancelled;
        self.handoffs_completed_by_release += other.handoffs_completed_by_release;
        self.handoffs_completed_by_claims += other.handoffs_completed_by_claims;
        self.handoffs_completed_by_expiry += other.handoffs_completed_by_expiry;
        self.acknowledgements_ignored += other.acknowledgements_ignored;
        self.claims_mismatches += other.claims_mismatches;
        self.stale_plans_refused += other.stale_plans_refused;
        self.executors_reaped += other.executors_reaped;
        self.reap_candidates_skipped += other.reap_candidates_skipped;
        self.registrations_retried += other.registrations_retried;
        self.drains_started += other.drains_started;
        self.reaps_deferred_by_guard += other.reaps_deferred_by_guard;
        self.reaps_deferred_by_new_leader += other.reaps_deferred_by_new_leader;
        self.deferred_reaps_of_admitting_executors += other.deferred_reaps_of_admitting_executors;
        self.expired_handoffs_deferred_by_new_leader +=
            other.expired_handoffs_deferred_by_new_leader;
        self.leader_changes += other.leader_changes;
        self.snapshot_restarts += other.snapshot_restarts;
        self.stale_grants += other.stale_grants;
        self.pushes_refused += other.pushes_refused;
        self.stale_revokes_ignored += other.stale_revokes_ignored;
        self.overtaken_revokes_released += other.overtaken_revokes_released;
        self.i4_probes += other.i4_probes;
        self.join_probes += other.join_probes;
        self.zone_crashes += other.zone_crashes;
        self.preference_probes += other.preference_probes;
        self.zone_crashes_staggered += other.zone_crashes_staggered;
        self.balance_moves += other.balance_moves;
        self.joins_under_load += other.joins_under_load;
        self.hot_shard_steps += other.hot_shard_steps;
        self.learning_after_leader_change += other.learning_after_leader_change;
        self.lying_reports += other.lying_reports;
        self.capacity_restarts += other.capacity_restarts;
        self.operator_controls += other.operator_controls;
        self.hot_set_shifts += other.hot_set_shifts;
        self.load_phases += other.load_phases;
        self.band_checks += other.band_checks;
        self.liar_checks += other.liar_checks;
        self.namespace_runs += other.namespace_runs;
        self.namespace_steps += other.namespace_steps;
        self.namespace_plans += other.namespace_plans;
        self.namespace_balance_moves += other.namespace_balance_moves;
        self.namespace_zone_crashes += other.namespace_zone_crashes;
        self.namespace_losses += other.namespace_losses;
        self.isolation_checks += other.isolation_checks;
        self.replicated_runs += other.replicated_runs;
        self.secondaries_placed += other.secondaries_placed;
        self.promotions += other.promotions;
        self.splits += other.splits;
        self.merges += other.merges;
        self.reshards_refused += other.reshards_refused;
        self.reshards_under_faults += other.reshards_under_faults;
    }

    /// Counts the primaries a commit gave to one of their shard's secondaries (P19.3, P19.4),
    /// in the namespaces with replicas.
    pub(super) fn count_promotions(&mut self, before: &LeaseState, after: &LeaseState) {
        for space in after.spaces() {
            if space.namespace().replication.replicas <= 1 {
                continue;
            }
            let Some(earlier) = before.space(space.name()) else {
                continue;
            };
            for shard in space.shards() {
                let Some(owner) = shard.owner.as_deref() else {
                    continue;
                };
                let was = earlier.shard(shard.id);
                let promoted = was.is_some_and(|was| {
                    was.owner.as_deref() != Some(owner) && was.secondary_on(owner).is_some()
                });
                self.promotions += u64::from(promoted);
            }
        }
    }

    pub fn unreached(&self) -> Vec<&'static str> {
        self.counts()
            .into_iter()
            .filter(|(_, n)| *n == 0)
            .map(|(name, _)| name)
            .collect()
    }

    /// Counts what P6.1's grace held back in a leader's step at `now_ms` on `state`: overdue
    /// executors not reaped (and whether a process of one still admits a shard), due handoffs
    /// not completed.
    pub(super) fn count_new_leader_deferral(
        &mut self,
        state: &LeaseState,
        now_ms: u64,
        processes: &[Option<ProcessView<'_>>],
    ) {
        let overdue = state.overdue_executors(now_ms);
        if !overdue.is_empty() {
            self.reaps_deferred_by_new_leader += 1;
            let admitting = processes.iter().flatten().any(|view| {
                view.core
                    .executor_id()
                    .is_some_and(|id| overdue.iter().any(|o| o == id))
                    && view
                        .core
                        .assignment()
                        .held()
                        .iter()
                        .any(|held| view.core.admit(held.shard, view.now).is_ok())
            });
            self.deferred_reaps_of_admitting_executors += u64::from(admitting);
        }
        self.expired_handoffs_deferred_by_new_leader += u64::from(state.handoffs_due(now_ms));
    }

    /// Counts what a leader's step at `now_ms` on `state`, in `term`, places by: several
    /// namespaces, loads still learning after a leader change, a hot shard reported.
    pub(super) fn count_step_loads(
        &mut self,
        state: &LeaseState,
        now_ms: u64,
        term: u64,
        step_loads: &BTreeMap<String, Loads>,
    ) {
        let hot = |namespace: &str, loads: &[f64]| {
            state
                .space(namespace)
                .is_some_and(|space| !LoadSummary::of(space, now_ms, loads).hot.is_empty())
        };
        if step_loads.len() > 1 {
            self.namespace_steps += 1;
        }
        if term > 1 && step_loads.values().any(|loads| *loads == Loads::Learning) {
            self.learning_after_leader_change += 1;
        }
        if step_loads.iter().any(
            |(namespace, loads)| matches!(loads, Loads::Reported(loads) if hot(namespace, loads)),
        ) {
            self.hot_shard_steps += 1;
        }
    }

    /// Counts what one committed outcome did; `chaos`: faults are still being injected.
    pub(super) fn record(&mut self, command: &Command, outcome: &Outcome, chaos: bool) {
        let len = |shards: &[u32]| shards.len() as u64;
        match outcome {
            Outcome::Resharded { kind, .. } => {
                match kind {
                    ReshardKind::Split => self.splits += 1,
                    ReshardKind::Merge => self.merges += 1,
                }
                self.reshards_under_faults += u64::from(chaos);
            }
            Outcome::Refused { .. }
                if matches!(
                    command,
                    Command::Operator {
                        action: OperatorAction::Reshard { .. },
                        ..
                    }
                ) =>
            {
                self.reshards_refused += 1
            }
            Outcome::Rebalanced {
                releasing,
                cancelled,
                ..
            } => {
                self.handoffs_started += len(releasing);
                self.handoffs_cancelled += len(cancelled);
            }
            Outcome::Released {
                completed, ignored, ..
            } => {
                self.handoffs_completed_by_release += u64::from(!completed.is_empty());
                self.acknowledgements_ignored += len(ignored);
            }
            Outcome::Renewed { results, .. } => self.count_renewed(results),
            Outcome::Refused {
                reason: RefusalReason::StalePlan { .. },
            } => self.stale_plans_refused += 1,
            Outcome::Reaped {
                reaped, skipped, ..
            } => {
                self.executors_reaped += reaped.len() as u64;
                self.reap_candidates_skipped += skipped.len() as u64;
            }
            Outcome::RegisteredMany { results } => self.count_retried_registrations(results),
            Outcome::SecondariesPlaced { changed, .. } => self.secondaries_placed += len(changed),
            Outcome::DrainingSet {
                draining: true,
                changed: true,
                ..
            } => self.drains_started += 1,
            _ => {}
        }
        if matches!(command, Command::CompleteHandoffs { .. }) {
            self.handoffs_completed_by_expiry += 1;
        }
        if matches!(command, Command::Operator { .. })
            && matches!(
                outcome,
                Outcome::MaintenanceSet { changed: true, .. }
                    | Outcome::PinSet { changed: true, .. }
                    | Outcome::Rebalanced { .. }
            )
        {
            self.operator_controls += 1;
        }
    }

    /// Counts the claims mismatches and the claims-completed handoffs of a `Renew`'s results.
    fn count_renewed(&mut self, results: &[RenewResult]) {
        for result in results {
            if let RenewResult::Renewed {
                claims_mismatch,
                acknowledged,
                ..
            } = result
            {
                self.claims_mismatches += u64::from(*claims_mismatch);
                self.handoffs_completed_by_claims += u64::from(!acknowledged.is_empty());
            }
        }
    }

    /// Counts the registrations of a `RegisterMany` that found their executor already there.
    fn count_retried_registrations(&mut self, results: &[RegisterResult]) {
        self.registrations_retried += results
            .iter()
            .filter(|result| {
                matches!(
                    result,
                    RegisterResult::Registered {
                        already_registered: true,
                        ..
                    }
                )
            })
            .count() as u64;
    }
}
