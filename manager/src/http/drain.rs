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
use super::authorize::CallerScope;
use super::params::ExecutorIdPath;
use super::HttpError;
use crate::service::executors::Executors;
use crate::service::operator::Actor;
use crate::service::views::Views;

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
    State(executors): State<Executors>,
    Extension(Admitted(caller)): Extension<Admitted>,
    Extension(actor): Extension<Actor>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
) -> Result<Json<ExecutorView>, HttpError> {
    tracing::info!(%executor_id, ?caller, "drain asked");
    match caller {
        // Proved by its credential, whatever certificate it presents (P17.2): the executor's own
        // lifecycle, as its deregistration is, and not an operator's action, so the audit log
        // is not where it goes (P17.4: callers who are not operators cannot fill it).
        Caller::Executor => executors.set_draining(None, &executor_id, true).await,
        Caller::Operator => {
            executors
                .set_draining(Some(&actor), &executor_id, true)
                .await
        }
    }
    .map(Json)
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
    State(executors): State<Executors>,
    State(views): State<Views>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
) -> Result<Json<ExecutorView>, HttpError> {
    // An executor the state does not hold is `set_draining`'s 404, whoever asks.
    let namespace = views.state().read(|applied| {
        applied
            .state
            .executor(&executor_id)
            .map(|executor| executor.namespace.clone())
    });
    if let Some(namespace) = namespace {
        scope.check(&namespace)?;
    }
    executors
        .set_draining(Some(&actor), &executor_id, false)
        .await
        .map(Json)
}
