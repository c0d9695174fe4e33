//! `POST /v1/executors/{id}/drain` and `DELETE /v1/executors/{id}/drain`: an operator takes an
//! executor out of the spread (or puts it back), or an executor takes itself out with its own
//! credential before it stops (P17.2; the admission layer checked who asks). Leader writes: the
//! flag is committed through `Command::SetDraining`, after which the leader's next plan moves
//! the executor's shards through the normal release handoff (P5.2, P5.4), each admitted by it
//! until its revoke is answered. Answered with the executor as it is after the commit.

use axum::extract::State;
use axum::{Extension, Json};
use leasehold_api::wire::ExecutorView;

use super::admission::{Admitted, Caller};
use super::authorize::{Actor, CallerScope};
use super::inspect::current_executor_view;
use super::operator;
use super::params::ExecutorIdPath;
use super::refusals::{refusal, unknown_executor};
use super::{AppState, HttpError};
use crate::lease::answer::{DrainingSet, OperatorDone};
use crate::lease::{Command, ExecutorAnswer, OperatorAction};

/// Marks an executor draining: it gets no new shards and its shards move away (P5.2). An
/// operator's (P5.4), or the executor's own before it stops (P17.2).
#[utoipa::path(
    post, path = "/v1/executors/{executor_id}/drain", tag = "executors",
    params(ExecutorIdPath),
    responses(
        (status = 200, description = "Draining (now or already): the executor as committed.", body = ExecutorView),
        (status = 401, description = "`unauthenticated`: a credential other than the one the executor registered with, or an executor's certificate without its credential (P13.4, P17.2)."),
        (status = 403, description = "`forbidden` (TLS): the admin role, or the executor itself with its credential (P13.3, P17.2); a certificate limited to namespaces other than the executor's (P18.2)."),
        (status = 404, description = "`unknown_executor`: reaped, deregistered or never registered."),
    ),
)]
pub async fn drain(
    State(node): State<AppState>,
    Extension(Admitted(caller)): Extension<Admitted>,
    Extension(actor): Extension<Actor>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
) -> Result<Json<ExecutorView>, HttpError> {
    tracing::info!(%executor_id, ?caller, "drain asked");
    match caller {
        // Proved by its credential, whatever certificate it presents (P17.2): the executor's own
        // lifecycle, as its deregistration is, and not an operator's action, so the audit log
        // is not where it goes (P17.4: callers who are not operators cannot fill it).
        Caller::Executor => set_draining(&node, None, executor_id, true).await,
        Caller::Operator => set_draining(&node, Some(&actor), executor_id, true).await,
    }
}

/// Puts a draining executor back into the spread.
#[utoipa::path(
    delete, path = "/v1/executors/{executor_id}/drain", tag = "executors",
    params(ExecutorIdPath),
    responses(
        (status = 200, description = "Not draining (now or already): the executor as committed.", body = ExecutorView),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), limited to the executor's namespace if its certificate is (P18.2)."),
        (status = 404, description = "`unknown_executor`: reaped, deregistered or never registered."),
    ),
)]
pub async fn undrain(
    State(node): State<AppState>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
) -> Result<Json<ExecutorView>, HttpError> {
    // An executor the state does not hold is `set_draining`'s 404, whoever asks.
    let namespace = node.state.read(|applied| {
        applied
            .state
            .executor(&executor_id)
            .map(|executor| executor.namespace.clone())
    });
    if let Some(namespace) = namespace {
        scope.check(&namespace)?;
    }
    set_draining(&node, Some(&actor), executor_id, false).await
}

/// Sets the flag: an operator's (`Some`) action is recorded in the audit log from cluster
/// version 6 on (P17.4); the executor's own (`None`), and anyone's before, is a plain
/// `SetDraining`.
pub(super) async fn set_draining(
    node: &AppState,
    operator: Option<&Actor>,
    executor_id: String,
    draining: bool,
) -> Result<Json<ExecutorView>, HttpError> {
    let recorded_as = operator.filter(|_| operator::recorded(node));
    let answer = if let Some(actor) = recorded_as {
        let action = OperatorAction::SetDraining {
            executor_id: executor_id.clone(),
            draining,
        };
        operator::propose_expecting(node, actor, action, |done| match done {
            OperatorDone::Draining(set) => Ok(set),
            other => Err(other),
        })
        .await?
    } else {
        let command = Command::SetDraining {
            now_ms: node.leadership.clock.now_ms(),
            executor_id: executor_id.clone(),
            draining,
        };
        node.leadership
            .proposer
            .propose_as::<DrainingSet>(command)
            .await?
            .1
    };
    match answer {
        ExecutorAnswer::Done(DrainingSet { changed, .. }) => {
            tracing::info!(%executor_id, draining, changed, "drain flag set");
            current_executor_view(node, &executor_id)
                .map(Json)
                // Removed between the commit and this read (reaped or deregistered).
                .ok_or_else(|| unknown_executor(&executor_id))
        }
        ExecutorAnswer::UnknownExecutor => Err(unknown_executor(&executor_id)),
        ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
    }
}
