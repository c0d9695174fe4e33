//! Executor writes (renew, release, deregister, drain) admitted before their body is read,
//! forwarded or proposed (PROTOCOL P13.4, P13.6, P17.2, I6): one layer in front of those routes,
//! on every node.
//!
//! - The credential an executor registered with is checked here, in constant time, from the
//!   headers alone. An executor's credential hash never changes and its id is never reused, so a
//!   follower that knows the executor refuses a wrong credential itself instead of forwarding
//!   the request; one that does not know it yet forwards it, and the leader decides.
//! - An id the leader does not know is answered from the state, with nothing proposed: `404
//!   unknown_executor`, or for a deregistration of an executor already gone its tombstone's
//!   `204` (P7.2). Only a leader in office judges that (its clock anchored for its term, so every
//!   entry of earlier terms is applied, P6.4): an executor learns its id from a reply sent after
//!   its registration was applied, so such a leader knows every id an executor can name.
//! - The body is then read up to the largest the cluster's shard count allows
//!   (`wire::renew_body_bytes`, `wire::shard_list_body_bytes`), not the largest any cluster
//!   could: a stranger's body costs no more than the largest legal one.
//!
//! Handlers take the [`Admitted`] this layer inserts, so none can run without it.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use leasehold_api::http::{limit_body, BodyLimit};
use leasehold_api::problem::ErrorCode;
use leasehold_api::tls::Role;
use leasehold_api::wire::{renew_body_bytes, shard_list_body_bytes};
use subtle::ConstantTimeEq;

use super::authorize::{CallerRole, CallerScope};
use super::credentials::Bearer;
use super::params::ExecutorIdPath;
use super::HttpError;
use crate::handles::leadership::Leadership;
use crate::lease::LeaseState;
use crate::raft::LeaseStateHandle;
use crate::service::refusals::unknown_executor;

/// What admitting an executor's write reads: the applied state and whether this node leads in
/// office.
#[derive(Clone)]
pub struct AdmissionReads {
    pub leadership: Leadership,
    pub state: LeaseStateHandle,
}

/// Who is asking, as the layer established it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The executor itself: its credential checked, or it registered without one (P13.5).
    Executor,
    /// An operator (no credential; the admin role under TLS): a deregistration goes through
    /// the handoff (P5.5, `removal`), a drain is the operator's (P5.4).
    Operator,
}

/// Inserted by the layer for the handler: the request was admitted, and by whom.
#[derive(Debug, Clone, Copy)]
pub struct Admitted(pub Caller);

/// What the state records of the executor a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    /// Registered, with the hash of its credential (none: registered without one, P13.5).
    Present(Option<[u8; 32]>),
    /// Deregistered or reaped recently: its tombstone is kept (P7.2).
    Gone,
    /// Not registered, and no tombstone (never was, or pruned long ago).
    Unknown,
}

impl Recorded {
    pub(super) fn of(state: &LeaseState, executor_id: &str) -> Self {
        match state.executor(executor_id) {
            Some(executor) => Recorded::Present(executor.credential_sha256),
            None if state.tombstone(executor_id).is_some() => Recorded::Gone,
            None => Recorded::Unknown,
        }
    }
}

/// The executor write a route performs: what its body may weigh, and who may ask for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorWrite {
    /// A renewal: claims and loads, each up to every shard.
    Renew,
    /// A release: a list of shards.
    Release,
    /// `DELETE /v1/executors/{id}`: the executor's own, or an operator's removal (P5.5).
    Deregister,
    /// `POST /v1/executors/{id}/drain`: the executor's own with its credential (P17.2), or an
    /// operator's (P5.4).
    Drain,
}

impl ExecutorWrite {
    /// Whether a caller presenting no credential asks as an operator: `admin` is whether its
    /// certificate holds the admin role, `None` on a plaintext listener, where roles are not
    /// checked (P13.5). A renewal or release is only ever the executor's; an operator's
    /// deregistration needs the admin role; a drain without a credential is an operator's
    /// wherever roles are not checked, as it was before executors could drain themselves.
    fn operator_without_credential(self, admin: Option<bool>) -> bool {
        match self {
            ExecutorWrite::Renew | ExecutorWrite::Release => false,
            ExecutorWrite::Deregister => admin == Some(true),
            ExecutorWrite::Drain => admin.unwrap_or(true),
        }
    }

    fn max_body_bytes(self, shard_count: u32) -> usize {
        match self {
            ExecutorWrite::Renew => renew_body_bytes(shard_count),
            ExecutorWrite::Release => shard_list_body_bytes(shard_count),
            ExecutorWrite::Deregister | ExecutorWrite::Drain => super::MAX_API_BODY_BYTES,
        }
    }
}

/// What becomes of the request.
#[derive(Debug)]
pub(super) enum Admission {
    /// On to the body, the forward or the handler.
    Pass(Caller),
    /// Answered here, nothing read, forwarded or proposed.
    Answer(Response),
}

/// The decision, from the headers and what the state records (P13.4, P7.2). `operator`: the
/// caller presents no credential and may ask as an operator
/// ([`ExecutorWrite::operator_without_credential`]); `in_office`: this node is the leader and
/// took office (so an id it does not know is one no executor can name).
pub(super) fn decide(
    executor_id: &str,
    write: ExecutorWrite,
    recorded: Recorded,
    bearer: &Bearer,
    operator: bool,
    in_office: bool,
) -> Admission {
    let deregistration = write == ExecutorWrite::Deregister;
    let caller = if operator {
        Caller::Operator
    } else {
        Caller::Executor
    };
    match recorded {
        Recorded::Present(Some(stored)) if caller == Caller::Executor => match &bearer.0 {
            Some(credential) if bool::from(credential.sha256().ct_eq(&stored)) => {
                Admission::Pass(caller)
            }
            Some(_) => Admission::Answer(unauthenticated(&format!(
                "the credential is not the one executor {executor_id} registered with"
            ))),
            None => Admission::Answer(unauthenticated(&format!(
                "executor {executor_id} registered with a credential: present it as \
                 `Authorization: Bearer <credential>`"
            ))),
        },
        Recorded::Present(_) => Admission::Pass(caller),
        // Someone else decides: the leader this follower forwards to, or, on a leader still
        // taking office, the proposer, which refuses until it has (retryable).
        Recorded::Gone | Recorded::Unknown if !in_office => Admission::Pass(caller),
        Recorded::Gone if deregistration => {
            Admission::Answer(StatusCode::NO_CONTENT.into_response())
        }
        Recorded::Gone | Recorded::Unknown => {
            Admission::Answer(unknown_executor(executor_id).into_response())
        }
    }
}

fn unauthenticated(detail: &str) -> Response {
    HttpError::new(ErrorCode::Unauthenticated, detail.to_owned()).into_response()
}

/// The layer (`from_fn_with_state((admission, write), admit_executor_write)`).
pub async fn admit_executor_write(
    State((admission, write)): State<(AdmissionReads, ExecutorWrite)>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
    bearer: Bearer,
    caller_role: Option<Extension<CallerRole>>,
    Extension(scope): Extension<CallerScope>,
    mut request: Request,
    next: Next,
) -> Response {
    let admin = caller_role.map(|Extension(CallerRole(role))| role == Role::Admin);
    let operator = bearer.0.is_none() && write.operator_without_credential(admin);
    let (recorded, namespace, shard_count) = admission.state.read(|applied| {
        let namespace = applied
            .state
            .executor(&executor_id)
            .map(|executor| executor.namespace.clone());
        // The body lists shards of the executor's namespace (P18.1).
        let shard_count = applied
            .state
            .shard_bound_for_executor(&executor_id)
            .unwrap_or(0);
        (
            Recorded::of(&applied.state, &executor_id),
            namespace,
            shard_count,
        )
    });
    // P18.2: a certificate limited to namespaces acts on their executors only, credential or
    // not. One this replica does not know is checked by the leader, which knows every id.
    if let Some(namespace) = &namespace {
        if let Err(refused) = scope.check(namespace) {
            return refused.into_response();
        }
    }
    let in_office = admission.leadership.in_office();
    let caller = match decide(&executor_id, write, recorded, &bearer, operator, in_office) {
        Admission::Pass(caller) => caller,
        Admission::Answer(response) => return response,
    };
    request.extensions_mut().insert(Admitted(caller));
    let max_bytes = write.max_body_bytes(shard_count);
    limit_body(State(BodyLimit { max_bytes }), request, next).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_api::wire::Credential;

    fn credential() -> Credential {
        Credential::from_random([7; 32])
    }

    fn status(admission: Admission) -> Result<Caller, (StatusCode, Option<ErrorCode>)> {
        match admission {
            Admission::Pass(caller) => Ok(caller),
            Admission::Answer(response) => {
                let status = response.status();
                let code = (status != StatusCode::NO_CONTENT).then(|| {
                    if status == StatusCode::UNAUTHORIZED {
                        ErrorCode::Unauthenticated
                    } else {
                        ErrorCode::UnknownExecutor
                    }
                });
                Err((status, code))
            }
        }
    }

    /// P13.4: a wrong or missing credential is refused from the headers, on any node, before
    /// a body is read or forwarded; the right one, or an operator's deregistration or drain,
    /// passes.
    #[test]
    fn p13_4_the_credential_is_checked_before_anything_else() {
        let stored = Recorded::Present(Some(credential().sha256()));
        let right = Bearer(Some(credential()));
        let wrong = Bearer(Some(Credential::from_random([8; 32])));
        let none = Bearer(None);
        let writes = [
            ExecutorWrite::Renew,
            ExecutorWrite::Release,
            ExecutorWrite::Deregister,
            ExecutorWrite::Drain,
        ];
        for in_office in [false, true] {
            for write in writes {
                let decide = |bearer: &Bearer, operator| {
                    status(decide("ex-3", write, stored, bearer, operator, in_office))
                };
                assert_eq!(decide(&right, false), Ok(Caller::Executor), "{write:?}");
                assert_eq!(
                    decide(&wrong, false),
                    Err((StatusCode::UNAUTHORIZED, Some(ErrorCode::Unauthenticated))),
                    "{write:?}"
                );
                assert_eq!(
                    decide(&none, false),
                    Err((StatusCode::UNAUTHORIZED, Some(ErrorCode::Unauthenticated))),
                    "{write:?}"
                );
                assert_eq!(decide(&none, true), Ok(Caller::Operator), "{write:?}");
            }
        }
        // Registered without a credential (P13.5): nothing to check.
        let legacy = status(decide(
            "ex-3",
            ExecutorWrite::Renew,
            Recorded::Present(None),
            &none,
            false,
            true,
        ));
        assert_eq!(legacy, Ok(Caller::Executor));
    }

    /// P5.5, P13.3, P17.2: who asks as an operator when no credential is presented. Renewals
    /// and releases are only ever the executor's; a deregistration is an operator's only with
    /// the admin role; a drain is an operator's with the admin role, or where roles are not
    /// checked (plaintext, P13.5), and an executor's certificate without its credential is
    /// refused rather than taken for an operator.
    #[test]
    fn p17_2_an_executor_drains_itself_only_with_its_credential() {
        use ExecutorWrite::{Deregister, Drain, Release, Renew};
        for (write, admin, operator) in [
            (Renew, Some(true), false),
            (Release, None, false),
            (Deregister, Some(true), true),
            (Deregister, Some(false), false),
            (Deregister, None, false),
            (Drain, Some(true), true),
            (Drain, Some(false), false),
            (Drain, None, true),
        ] {
            assert_eq!(
                write.operator_without_credential(admin),
                operator,
                "{write:?} admin={admin:?}"
            );
        }
        let stored = Recorded::Present(Some(credential().sha256()));
        let executor_certificate_alone = status(decide(
            "ex-3",
            Drain,
            stored,
            &Bearer(None),
            Drain.operator_without_credential(Some(false)),
            true,
        ));
        assert_eq!(
            executor_certificate_alone,
            Err((StatusCode::UNAUTHORIZED, Some(ErrorCode::Unauthenticated)))
        );
    }

    /// I6, P7.2: an id the leader in office does not know is answered without a write: 404,
    /// or 204 for the deregistration of one whose tombstone is kept. Off office (a follower, a
    /// leader still taking office) the leader decides.
    #[test]
    fn i6_unknown_ids_are_answered_without_a_write_by_a_leader_in_office() {
        let none = Bearer(None);
        let unknown = |write, recorded, in_office| {
            status(decide("ex-9", write, recorded, &none, false, in_office))
        };
        for recorded in [Recorded::Gone, Recorded::Unknown] {
            for write in [ExecutorWrite::Renew, ExecutorWrite::Drain] {
                assert_eq!(
                    unknown(write, recorded, true),
                    Err((StatusCode::NOT_FOUND, Some(ErrorCode::UnknownExecutor)))
                );
                assert_eq!(unknown(write, recorded, false), Ok(Caller::Executor));
            }
        }
        assert_eq!(
            unknown(ExecutorWrite::Deregister, Recorded::Gone, true),
            Err((StatusCode::NO_CONTENT, None)),
            "P7.2: a retried deregistration is told it is done"
        );
        assert_eq!(
            unknown(ExecutorWrite::Deregister, Recorded::Unknown, true),
            Err((StatusCode::NOT_FOUND, Some(ErrorCode::UnknownExecutor)))
        );
    }
}
