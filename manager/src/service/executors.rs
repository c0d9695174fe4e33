//! An executor's life as the leader commits it (PROTOCOL §9): registration, renewal, release,
//! deregistration, drains (an operator's, P5.4, or its own before it stops, P17.2) and the
//! operator's removal (P5.5). Each is answered only after the command carrying it is committed
//! (P4.4), or, for a renewal that changes nothing but the lease, from the leader's memory (P6.5).

use leasehold_api::http::HttpError;
use leasehold_api::wire::{ExecutorView, ShardEpoch, ShardLoad, GROUP_REGISTRATION_SCHEMA};

use super::operator::{Actor, Operator, REMOVAL_MARK};
use super::refusals::{refusal, unknown_executor};
use super::views::Views;
use super::Writer;
use crate::handles::leadership::Leadership;
use crate::handles::load_reports::LoadReports;
use crate::handles::registrations::{self, RegisterError, RegistrationQueue};
use crate::lease::answer::{Deregistered, DrainingSet, OperatorDone, Registered, Released};
use crate::lease::{
    Answer, Command, Executor, ExecutorAnswer, Grant, LeaseState, OperatorAction, RefusalReason,
    RegisterResult, Registration, RenewResult, Renewal,
};
use crate::raft::LeaseStateHandle;
use crate::renewals::from_memory::MemoryRenewals;
use crate::renewals::{self, RenewError, RenewalQueue};

/// The handles an executor's writes use.
#[derive(Clone)]
pub struct Executors {
    pub(super) writer: Writer,
    pub(super) operator: Operator,
    pub(super) views: Views,
    /// Whose leadership a renewal from memory is confirmed under (P6.5).
    pub(super) leadership: Leadership,
    pub(super) state: LeaseStateHandle,
    pub(super) registrations: RegistrationQueue,
    pub(super) renewals: RenewalQueue,
    pub(super) memory_renewals: MemoryRenewals,
    /// The loads renewals report (P15.1), soft state the leader plans by.
    pub(super) load_reports: LoadReports,
}

/// What a renewal claimed (P4.2) and reported of its shards' loads (P15.1). The claims are
/// borrowed: the handler shapes its reply from them too.
#[derive(Debug)]
pub struct ClaimsAndLoads<'a> {
    pub claims: &'a [ShardEpoch],
    /// `None`: the executor reports no loads.
    pub loads: Option<Vec<ShardLoad>>,
    /// The secondaries it says are ready (P19.3).
    pub ready: &'a [ShardEpoch],
}

/// Where an operator's removal stands after a request (P5.5).
#[derive(Debug)]
pub enum Removal {
    /// Deregistered, now or before.
    Removed,
    /// Draining, and its shards still moving: the executor as it is.
    StillMoving(Box<ExecutorView>),
}

/// The next step of an operator's removal, decided from the executor as the leader has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RemovalStep {
    /// Not draining yet: drain it, so no plan gives it shards from then on (a plan made before
    /// the drain is refused as stale, since the drain changes the assignment revision).
    Drain,
    /// Draining, and still the owner of `held` shards (releasing ones included): their
    /// handoffs are under way.
    AwaitHandoffs { held: usize },
    /// Draining and holding nothing, or not registered (a retry after it was removed gets its
    /// tombstone's answer, P7.2): deregister it.
    Deregister,
}

pub(super) fn removal_step(executor: Option<&Executor>) -> RemovalStep {
    match executor {
        Some(executor) if !executor.draining => RemovalStep::Drain,
        Some(executor) if !executor.owned_shards.is_empty() => RemovalStep::AwaitHandoffs {
            held: executor.owned_shards.len(),
        },
        _ => RemovalStep::Deregister,
    }
}

/// `actor`, as the removal's first step records it.
fn removal_actor(actor: &Actor) -> String {
    let mark_at = leasehold_api::wire::MAX_ACTOR_BYTES - REMOVAL_MARK.len();
    let mut end = actor.0.len().min(mark_at);
    while !actor.0.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{REMOVAL_MARK}", &actor.0[..end])
}

/// Most steps one removal request takes: a drain, then a look at what the drain left.
const MAX_REMOVAL_STEPS: usize = 2;

/// A namespace that sets no executor bound of its own holds at most the leader's
/// `--max-executors-per-namespace` (P18.1): a new registration past it is refused here, before
/// anything is proposed; a retry of a registration the namespace holds already is not. Checked
/// where registrations arrive at the leader, so registrations in flight together may pass it by
/// at most one group commit.
pub(super) fn room_by_default(
    state: &LeaseState,
    registration: &Registration,
    max_executors_per_namespace: u32,
) -> Option<HttpError> {
    let space = state.namespace(&registration.namespace)?;
    let count = space.executor_count();
    let full = space.max_executors.is_none()
        && count >= max_executors_per_namespace as usize
        && state
            .executor_by_incarnation(&registration.incarnation)
            .is_none();
    full.then(|| {
        HttpError::conflict(format!(
            "namespace {} holds {count} executors, the most a namespace without a bound of its \
             own may hold (the managers' --max-executors-per-namespace): deregister one, or give \
             the namespace a bound of its own (PROTOCOL P18.1)",
            registration.namespace
        ))
    })
}

impl Executors {
    /// The bound `executor_id`'s claims and releases are read against: its namespace's shard
    /// count, or the most shards any of its layouts had (P18.1, P20.3).
    pub fn shard_bound(&self, executor_id: &str) -> Result<u32, HttpError> {
        self.state
            .read(|applied| applied.state.shard_bound_for_executor(executor_id))
            .ok_or_else(|| refusal(RefusalReason::NotInitialised))
    }

    /// Registers an executor (idempotent on its incarnation, P4.4) and answers its first grant:
    /// from cluster version 12 through the registration batcher (one `RegisterMany` for all that
    /// arrive together), below it as one `Register` entry a 0.1.0 replica applies (P14.3).
    pub async fn register(
        &self,
        registration: Registration,
        max_executors_per_namespace: u32,
    ) -> Result<Grant, HttpError> {
        if let Some(full) = self.state.read(|applied| {
            room_by_default(&applied.state, &registration, max_executors_per_namespace)
        }) {
            return Err(full);
        }
        let cluster_version = self.state.read(|applied| applied.state.cluster_version());
        let result = if cluster_version >= GROUP_REGISTRATION_SCHEMA {
            registrations::register(&self.registrations, registration)
                .await
                .map_err(|error| match error {
                    RegisterError::Propose(error) => error.into(),
                    RegisterError::Refused(reason) => refusal(reason),
                    error => HttpError::internal("registration failed", error),
                })?
        } else {
            let command = registration.into_command(self.writer.now_ms());
            match self.writer.propose_as::<Registered>(command).await?.1 {
                Answer::Done(Registered {
                    grant,
                    already_registered,
                }) => RegisterResult::Registered {
                    grant,
                    already_registered,
                },
                Answer::Refused(reason) => RegisterResult::Refused { reason },
            }
        };
        match result {
            RegisterResult::Registered {
                grant,
                already_registered,
            } => {
                tracing::info!(executor_id = %grant.executor_id, already_registered, "registered");
                self.memory_renewals.reserve_for_registered(
                    cluster_version,
                    self.writer.term(),
                    &grant.executor_id,
                );
                Ok(grant)
            }
            RegisterResult::Refused { reason } => Err(refusal(reason)),
        }
    }

    /// Renews `executor_id`'s lease (P3.4) with its claims (P4.2) and answers the grant. The path
    /// is chosen here: from the leader's memory when it can answer (P6.5 to P6.7), otherwise
    /// through the log (the renewal batcher's next `Renew` entry). The loads reported with the
    /// claims go to the leader's load reports once the renewal is answered; they are never
    /// replicated.
    pub async fn renew(
        &self,
        executor_id: &str,
        revision: u64,
        claimed: ClaimsAndLoads<'_>,
    ) -> Result<Grant, HttpError> {
        let renewal = Renewal::from_claims(executor_id.to_owned(), claimed.claims, revision)
            .with_ready(claimed.ready);
        let started = std::time::Instant::now();
        let result = match self
            .memory_renewals
            .try_answer(&self.leadership, &self.state, &renewal)
            .await
        {
            Some(answered) => Ok(answered),
            None => renewals::renew(&self.renewals, renewal).await,
        };
        count_renewal(&result, started);
        match result {
            Ok(RenewResult::Renewed {
                grant,
                claims_mismatch,
                acknowledged,
            }) => {
                if claims_mismatch {
                    // P4.2: the executor held another set than recorded; pushes are not landing.
                    tracing::warn!(%executor_id, revision = grant.revision, "renewal claims differ from the recorded set; corrected in the reply");
                    metrics::counter!("leasehold_renewal_claims_mismatch_total").increment(1);
                }
                if !acknowledged.is_empty() {
                    tracing::info!(%executor_id, ?acknowledged, "renewal acknowledged revokes");
                }
                self.record_loads(executor_id, &grant, claimed);
                Ok(grant)
            }
            Ok(RenewResult::UnknownExecutor { .. }) => {
                self.load_reports.remove(executor_id);
                Err(unknown_executor(executor_id))
            }
            Err(RenewError::Propose(error)) => Err(error.into()),
            Err(RenewError::Refused(reason)) => Err(refusal(reason)),
            Err(error) => Err(HttpError::internal("renewal failed", error)),
        }
    }

    /// What a renewal reported of its shards' loads (P15.1), for the shards it both claimed and
    /// holds after the renewal; or that it reports none.
    fn record_loads(&self, executor_id: &str, grant: &Grant, claimed: ClaimsAndLoads<'_>) {
        match claimed.loads {
            Some(loads) => {
                let claimed: std::collections::BTreeSet<u32> =
                    claimed.claims.iter().map(|claim| claim.shard).collect();
                let measured = grant
                    .shards
                    .iter()
                    .map(|&(shard, _)| shard)
                    .filter(|shard| claimed.contains(shard))
                    .collect();
                self.load_reports.record(executor_id, measured, loads);
            }
            None => self.load_reports.record_not_reporting(executor_id),
        }
    }

    /// Acknowledges a revoke out of band (P5.2): which handoffs this completed and which it did
    /// not concern.
    pub async fn release(
        &self,
        executor_id: &str,
        shards: Vec<u32>,
        revoke_revision: u64,
    ) -> Result<Released, HttpError> {
        let command = Command::Release {
            now_ms: self.writer.now_ms(),
            executor_id: executor_id.to_owned(),
            shards,
            revoke_revision,
        };
        match self.writer.propose_as::<Released>(command).await?.1 {
            ExecutorAnswer::Done(released) => Ok(released),
            ExecutorAnswer::UnknownExecutor => Err(unknown_executor(executor_id)),
            ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
        }
    }

    /// Commits the deregistration of `executor_id`, also of one already gone (P7.2).
    /// `operator`: the operator removing it, whose action the audit log records from cluster
    /// version 12 on (P17.4); `None` for the executor's own graceful stop.
    pub async fn deregister(
        &self,
        executor_id: &str,
        operator: Option<&Actor>,
    ) -> Result<(), HttpError> {
        let answer = match operator {
            Some(actor) if self.operator.recorded() => {
                let action = OperatorAction::Remove {
                    executor_id: executor_id.to_owned(),
                };
                self.operator
                    .propose_expecting(actor, action, |done| match done {
                        OperatorDone::Removed(removed) => Ok(removed),
                        other => Err(other),
                    })
                    .await?
            }
            _ => {
                let command = Command::Deregister {
                    now_ms: self.writer.now_ms(),
                    executor_id: executor_id.to_owned(),
                };
                self.writer.propose_as::<Deregistered>(command).await?.1
            }
        };
        match answer {
            ExecutorAnswer::Done(Deregistered { already_gone, .. }) => {
                self.load_reports.remove(executor_id);
                let by = operator.map_or("itself", |actor| actor.0.as_str());
                tracing::info!(%executor_id, already_gone, by, "deregistered");
                Ok(())
            }
            ExecutorAnswer::UnknownExecutor => Err(unknown_executor(executor_id)),
            ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
        }
    }

    /// Sets the drain flag and answers the executor as committed: an operator's (`Some`) action
    /// is recorded in the audit log from cluster version 12 on (P17.4); the executor's own
    /// (`None`, P17.2), and anyone's before, is a plain `SetDraining`.
    pub async fn set_draining(
        &self,
        operator: Option<&Actor>,
        executor_id: &str,
        draining: bool,
    ) -> Result<ExecutorView, HttpError> {
        let recorded_as = operator.filter(|_| self.operator.recorded());
        let answer = if let Some(actor) = recorded_as {
            let action = OperatorAction::SetDraining {
                executor_id: executor_id.to_owned(),
                draining,
            };
            self.operator
                .propose_expecting(actor, action, |done| match done {
                    OperatorDone::Draining(set) => Ok(set),
                    other => Err(other),
                })
                .await?
        } else {
            let command = Command::SetDraining {
                now_ms: self.writer.now_ms(),
                executor_id: executor_id.to_owned(),
                draining,
            };
            self.writer.propose_as::<DrainingSet>(command).await?.1
        };
        match answer {
            ExecutorAnswer::Done(DrainingSet { changed, .. }) => {
                tracing::info!(%executor_id, draining, changed, "drain flag set");
                // Removed between the commit and this read (reaped or deregistered): 404.
                self.views
                    .executor(executor_id)
                    .ok_or_else(|| unknown_executor(executor_id))
            }
            ExecutorAnswer::UnknownExecutor => Err(unknown_executor(executor_id)),
            ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
        }
    }

    /// An operator's removal (P5.5). Only the executor itself hands its shards over at once
    /// (P3.7: it stopped admitting before it deregistered); an operator's removal of a live
    /// executor must not, since the executor admits until it hears otherwise. So it is drained
    /// first: from that commit on the planner gives it nothing and moves what it holds through
    /// the handoff of P5.2. While it still holds shards the removal is [`Removal::StillMoving`]
    /// and the operator repeats it; once it holds nothing it is deregistered.
    pub async fn remove(&self, actor: &Actor, executor_id: &str) -> Result<Removal, HttpError> {
        for _ in 0..MAX_REMOVAL_STEPS {
            let step = self
                .state
                .read(|applied| removal_step(applied.state.executor(executor_id)));
            match step {
                RemovalStep::Drain => {
                    tracing::info!(%executor_id, "operator removal: draining first (P5.5)");
                    // Recorded as the removal it starts, not as an operator's drain (P17.4).
                    let removing = Actor(removal_actor(actor));
                    let _drained = self
                        .set_draining(Some(&removing), executor_id, true)
                        .await?;
                }
                RemovalStep::AwaitHandoffs { held } => {
                    tracing::info!(%executor_id, held, "operator removal: shards still moving (P5.5)");
                    return self.still_moving(executor_id);
                }
                RemovalStep::Deregister => {
                    self.deregister(executor_id, Some(actor)).await?;
                    return Ok(Removal::Removed);
                }
            }
        }
        self.still_moving(executor_id)
    }

    fn still_moving(&self, executor_id: &str) -> Result<Removal, HttpError> {
        self.views
            .executor(executor_id)
            .map(|view| Removal::StillMoving(Box::new(view)))
            .ok_or_else(|| unknown_executor(executor_id))
    }
}

/// Each renewal's result and time, counted once whichever path answered it.
fn count_renewal(result: &Result<RenewResult, RenewError>, started: std::time::Instant) {
    let counted = match result {
        Ok(RenewResult::Renewed { .. }) => "renewed",
        Ok(RenewResult::UnknownExecutor { .. }) => "unknown_executor",
        Err(RenewError::Refused(_)) => "refused",
        Err(_) => "failed",
    };
    metrics::counter!("leasehold_renewals_total", "result" => counted).increment(1);
    metrics::histogram!("leasehold_renewal_duration_seconds")
        .record(started.elapsed().as_secs_f64());
}

impl std::fmt::Debug for Executors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executors").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{Command, LeaseState, Outcome};

    /// P17.4 (issue 55, finding 7): an operator's removal of a live executor is recorded as the
    /// removal it starts (`remove_drain`), not as an operator's drain; the actor keeps its bound.
    #[test]
    fn p17_4_a_removal_s_drain_is_recorded_as_a_removal() {
        use crate::lease::{AuditRecord, OperatorAction};
        let record = |actor: String| AuditRecord {
            revision: 7,
            at_ms: 1,
            actor,
            action: OperatorAction::SetDraining {
                executor_id: "ex-3".into(),
                draining: true,
            },
        };
        let admin = Actor("admin CN=alice".into());
        let removing = removal_actor(&admin);
        assert!(removing.starts_with("admin CN=alice"));
        let view = super::super::views::audit_view(&record(removing));
        assert_eq!(view.action, "remove_drain");
        assert_eq!(view.executor_id.as_deref(), Some("ex-3"));
        assert_eq!(
            super::super::views::audit_view(&record(admin.0.clone())).action,
            "drain"
        );
        let long = removal_actor(&Actor(format!("admin CN={}", "é".repeat(300))));
        assert!(long.len() <= leasehold_api::wire::MAX_ACTOR_BYTES);
        assert!(long.ends_with(REMOVAL_MARK));
    }

    /// An initialised state of 4 shards with one registered executor, placed when `placed`.
    fn state_with_one_executor(placed: bool) -> (LeaseState, String) {
        let mut state = crate::lease::tests::initialised_state(4, 3_000);
        let Outcome::Registered { grant, .. } = state.apply(
            2,
            &Command::Register {
                follows_generations: false,
                namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                now_ms: 0,
                incarnation: "a".into(),
                address: "http://a:1".into(),
                name: None,
                credential_sha256: None,
                capacity: 1,
                app_version: None,
                labels: Default::default(),
            },
        ) else {
            panic!("registered");
        };
        if placed {
            let plan = crate::lease::plan_rebalance(&state, 0).expect("a plan");
            let _ = state.apply(3, &plan);
        }
        (state, grant.executor_id)
    }

    fn drain(state: &mut LeaseState, executor_id: &str) {
        let drained = state.apply(
            10,
            &Command::SetDraining {
                now_ms: 1,
                executor_id: executor_id.to_owned(),
                draining: true,
            },
        );
        assert!(matches!(
            drained,
            Outcome::DrainingSet { changed: true, .. }
        ));
    }

    /// P5.5: an operator's removal of an executor that holds shards drains it and waits for
    /// the handoffs; it deregisters only once the executor holds nothing.
    #[test]
    fn p5_5_an_operator_removes_an_executor_only_once_its_shards_have_moved() {
        let (mut state, id) = state_with_one_executor(true);
        assert_eq!(removal_step(state.executor(&id)), RemovalStep::Drain);
        drain(&mut state, &id);
        assert_eq!(
            removal_step(state.executor(&id)),
            RemovalStep::AwaitHandoffs { held: 4 },
            "draining, but every shard still its own"
        );
    }

    /// A draining executor that holds nothing, or one not registered, is deregistered at once
    /// (an unknown id then gets the deregistration's own answer: its tombstone or 404).
    #[test]
    fn p5_5_a_drained_empty_executor_or_an_unknown_id_is_deregistered_at_once() {
        let (mut state, id) = state_with_one_executor(false);
        assert_eq!(
            removal_step(state.executor(&id)),
            RemovalStep::Drain,
            "even an executor that holds nothing is drained first, so no plan in flight gives it shards"
        );
        drain(&mut state, &id);
        assert_eq!(removal_step(state.executor(&id)), RemovalStep::Deregister);
        assert_eq!(removal_step(None), RemovalStep::Deregister);
    }

    /// P18.1 (issue 55, finding 9): a namespace without a bound of its own holds at most the
    /// leader's `--max-executors-per-namespace`; a retry of a registration it holds is let
    /// through, and a namespace's own bound replaces the default.
    #[test]
    fn p18_1_a_namespace_without_a_bound_holds_the_default_at_most() {
        use crate::lease::tests::{
            initialised_state, register_in_command, registration_in, set_namespace_command,
        };
        let mut state = initialised_state(4, 3_000);
        for (index, incarnation) in [(2, "a"), (3, "b")] {
            let _ = state.apply(index, &register_in_command(0, incarnation, "default"));
        }
        assert!(room_by_default(&state, &registration_in("c", "default"), 2).is_some());
        assert!(
            room_by_default(&state, &registration_in("a", "default"), 2).is_none(),
            "a retry of one it holds"
        );
        assert!(room_by_default(&state, &registration_in("c", "default"), 3).is_none());
        let _ = state.apply(
            4,
            &set_namespace_command("default", 3_000, Some(10), Default::default()),
        );
        assert!(
            room_by_default(&state, &registration_in("c", "default"), 2).is_none(),
            "its own bound replaces the default"
        );
        assert!(
            room_by_default(&state, &registration_in("c", "nowhere"), 0).is_none(),
            "an unknown namespace is the state machine's refusal"
        );
    }
}
