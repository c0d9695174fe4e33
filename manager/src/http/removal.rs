//! An operator's deregistration of an executor (`DELETE /v1/executors/{id}` with the admin role
//! and without the executor's credential), PROTOCOL P5.5. Only the executor itself hands its
//! shards over at once (P3.7: it stopped admitting before it deregistered); an operator's removal
//! of a live executor must not, since the executor admits until it hears otherwise. So the
//! executor is drained first (`SetDraining`): from that commit on the planner gives it nothing and
//! moves what it holds through the handoff of P5.2 (a revoke answered, or every lease it was
//! told run out). While it still holds shards the answer is `202 Accepted` with the executor as
//! it is; the operator repeats the request (`leaseholdctl executor remove --wait` does), and once
//! it holds nothing it is deregistered (`204`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::authorize::Actor;
use super::drain::set_draining;
use super::inspect::current_executor_view;
use super::operator::{self, REMOVAL_MARK};
use super::refusals::{refusal, unknown_executor};
use super::{AppState, HttpError};
use crate::lease::answer::{Deregistered, OperatorDone};
use crate::lease::{Command, Executor, ExecutorAnswer, OperatorAction};

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

/// Most steps one request takes: a drain, then a look at what the drain left.
const MAX_REMOVAL_STEPS: usize = 2;

/// Removes `executor_id` for an operator: `204` once deregistered, `202` with the draining
/// executor while its shards are still moving.
pub(super) async fn remove(
    node: &AppState,
    actor: &Actor,
    executor_id: String,
) -> Result<Response, HttpError> {
    for _ in 0..MAX_REMOVAL_STEPS {
        let step = node
            .state
            .read(|applied| removal_step(applied.state.executor(&executor_id)));
        match step {
            RemovalStep::Drain => {
                tracing::info!(%executor_id, "operator removal: draining first (P5.5)");
                // Recorded as the removal it starts, not as an operator's drain (P17.4).
                let removing = Actor(removal_actor(actor));
                let _drained =
                    set_draining(node, Some(&removing), executor_id.clone(), true).await?;
            }
            RemovalStep::AwaitHandoffs { held } => {
                tracing::info!(%executor_id, held, "operator removal: shards still moving (P5.5)");
                return accepted(node, &executor_id);
            }
            RemovalStep::Deregister => {
                return commit_deregistration(node, executor_id, Some(actor)).await
            }
        }
    }
    accepted(node, &executor_id)
}

fn accepted(node: &AppState, executor_id: &str) -> Result<Response, HttpError> {
    let view =
        current_executor_view(node, executor_id).ok_or_else(|| unknown_executor(executor_id))?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

/// Commits the deregistration of `executor_id` and answers it: `204`, also for one already
/// gone (P7.2). `operator`: the operator removing it, whose action the audit log records from
/// cluster version 12 on (P17.4); `None` for the executor's own graceful stop.
pub(super) async fn commit_deregistration(
    node: &AppState,
    executor_id: String,
    operator: Option<&Actor>,
) -> Result<Response, HttpError> {
    let answer = match operator {
        Some(actor) if operator::recorded(node) => {
            let action = OperatorAction::Remove {
                executor_id: executor_id.clone(),
            };
            operator::propose_expecting(node, actor, action, |done| match done {
                OperatorDone::Removed(removed) => Ok(removed),
                other => Err(other),
            })
            .await?
        }
        _ => {
            let command = Command::Deregister {
                now_ms: node.leadership.clock.now_ms(),
                executor_id: executor_id.clone(),
            };
            node.leadership
                .proposer
                .propose_as::<Deregistered>(command)
                .await?
                .1
        }
    };
    match answer {
        ExecutorAnswer::Done(Deregistered { already_gone, .. }) => {
            node.load_reports.remove(&executor_id);
            let by = operator.map_or("itself", |actor| actor.0.as_str());
            tracing::info!(%executor_id, already_gone, by, "deregistered");
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ExecutorAnswer::UnknownExecutor => Err(unknown_executor(&executor_id)),
        ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
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
        let view = operator::audit_view(&record(removing));
        assert_eq!(view.action, "remove_drain");
        assert_eq!(view.executor_id.as_deref(), Some("ex-3"));
        assert_eq!(
            operator::audit_view(&record(admin.0.clone())).action,
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
}
