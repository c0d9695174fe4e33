//! Executor-facing endpoints (PROTOCOL §9): register, renew, release, deregister. All are leader
//! writes, committed by `service::executors`; these handlers check the request at the edge (I6)
//! and shape the reply. Renew, release and deregister of an executor that registered with a
//! credential must present it (P13.4, `credentials`, checked by the admission layer).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    check_app_version, check_capacity, check_labels, check_shard_list, check_shard_loads,
    Credential, ExecutorView, Grant, RegisterRequest, ReleaseReply, ReleaseRequest, RenewRequest,
    ShardEpoch, DEFAULT_CAPACITY,
};

use super::admission::{Admitted, Caller};
use super::authorize::CallerScope;
use super::params::{validate_node_address, ExecutorIdPath};
use super::registration_limit::RegistrationSettings;
use super::{ApiJson, HttpError};
use crate::lease::answer::Released;
use crate::lease::{claims_are_exactly, Registration};
use crate::service::executors::{ClaimsAndLoads, Executors, Removal};
use crate::service::operator::Actor;

use leasehold_api::wire::{MAX_INCARNATION_BYTES, MAX_NAME_BYTES};

fn validate_shards<I>(shards: I, shard_count: u32) -> Result<(), HttpError>
where
    I: IntoIterator<Item = u32>,
    I::IntoIter: Clone,
{
    check_shard_list(shards, shard_count).map_err(|error| HttpError::invalid(error.to_string()))
}

/// Registers an executor (idempotent on `incarnation`, P4.4) and answers with its first grant.
#[utoipa::path(
    post, path = "/v1/executors", tag = "executors", request_body = RegisterRequest,
    responses(
        (status = 200, description = "Registered (or already registered under this incarnation): the grant.", body = Grant),
        (status = 400, description = "`invalid_request`: malformed, a capacity above the leader's `--max-capacity` (P15.1), or an application version outside its alphabet or length (P17.3); nothing was registered."),
        (status = 401, description = "`unauthenticated` (TLS): the registration carries no credential (P13.4, P13.5)."),
        (status = 403, description = "`forbidden` (TLS): the client certificate is neither an executor's nor an admin's (P13.3), or is limited to namespaces other than the one named (P18.2)."),
        (status = 404, description = "`not_found`: the namespace named does not exist (P18.1); nothing was registered."),
        (status = 409, description = "`conflict`: this incarnation is registered with another credential (P13.4) or in another namespace, the namespace holds its most executors (P18.1), or the cluster version does not take a credential, a capacity other than 1, an application version or a namespace other than `default`, yet (P14.3, P15.1, P17.3, P18.1)."),
        (status = 429, description = "`rate_limited`: too many registrations from this caller (`--registration-rate`, `--registration-burst`, P13.6); nothing was registered. `Retry-After` says when to try again."),
        (status = 503, description = "`sharding_not_ready`: the shard configuration is not written yet; `no_leader`."),
    ),
)]
pub async fn register(
    State(executors): State<Executors>,
    Extension(settings): Extension<RegistrationSettings>,
    Extension(scope): Extension<CallerScope>,
    State(tls): State<ListenerTls>,
    ApiJson(request): ApiJson<RegisterRequest>,
) -> Result<Json<Grant>, HttpError> {
    scope.check(
        request
            .namespace
            .as_deref()
            .unwrap_or(leasehold_api::wire::DEFAULT_NAMESPACE),
    )?;
    // This runs on the leader only (a follower forwards the request unread): the leader's
    // `--max-capacity` decides.
    let registration = registration(request, tls.0, settings.max_capacity)?;
    let grant = executors
        .register(registration, settings.max_executors_per_namespace)
        .await?;
    Ok(Json(grant.into()))
}

/// The registration a request asks for, checked at the edge (I6): text lengths, the push
/// address, the capacity (P15.1: in range, and at most this manager's `--max-capacity`), the
/// application version (P17.3) and the credential (P13.4; required over TLS, where every executor is new enough to send one, P13.5).
/// A refusal reaches no proposal. The state machine checks the text and the capacity's range
/// again, with the same limits (`--max-capacity` is the proposing leader's alone).
fn registration(
    request: RegisterRequest,
    tls: bool,
    max_capacity: u32,
) -> Result<Registration, HttpError> {
    if request.incarnation.is_empty() || request.incarnation.len() > MAX_INCARNATION_BYTES {
        return Err(HttpError::invalid(format!(
            "incarnation must be 1 to {MAX_INCARNATION_BYTES} bytes"
        )));
    }
    if request
        .name
        .as_ref()
        .is_some_and(|name| name.len() > MAX_NAME_BYTES)
    {
        return Err(HttpError::invalid(format!(
            "name must be at most {MAX_NAME_BYTES} bytes"
        )));
    }
    validate_node_address(&request.address)?;
    let capacity = request.capacity.unwrap_or(DEFAULT_CAPACITY);
    check_capacity(capacity).map_err(|error| HttpError::invalid(error.to_string()))?;
    if capacity > max_capacity {
        return Err(HttpError::invalid(format!(
            "capacity {capacity} is above this cluster's limit of {max_capacity}              (the managers' --max-capacity; PROTOCOL P15.1)"
        )));
    }
    if let Some(app_version) = &request.app_version {
        check_app_version(app_version).map_err(|error| HttpError::invalid(error.to_string()))?;
    }
    check_labels(&request.labels).map_err(|error| HttpError::invalid(error.to_string()))?;
    // P18.1: into the namespace named, `default` when none; a registration into any other is
    // schema 12, refused by the proposal gate below cluster version 12 (P14.3).
    let namespace = request
        .namespace
        .unwrap_or_else(|| leasehold_api::wire::DEFAULT_NAMESPACE.to_owned());
    leasehold_api::wire::check_namespace_name(&namespace)
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    match &request.credential {
        Some(credential) => credential.validate().map_err(HttpError::invalid)?,
        None if tls => {
            return Err(HttpError::new(
                ErrorCode::Unauthenticated,
                "a registration over TLS carries a credential (P13.4, P13.5)".to_owned(),
            ))
        }
        None => {}
    }
    Ok(Registration {
        // Only the hash is replicated (P13.4); the request, and the secret, end here.
        credential_sha256: request.credential.as_ref().map(Credential::sha256),
        incarnation: request.incarnation,
        address: request.address,
        name: request.name,
        // Below cluster version 12 a capacity other than 1, an application version and labels
        // are refused by the proposal gate (P14.3): no replica of 0.1.0 could apply them.
        capacity,
        app_version: request.app_version,
        labels: request.labels,
        namespace,
        // Below cluster version 14 the proposal gate refuses it (P14.3): a replica of schema 13
        // would drop the promise and could let a namespace reshard under the executor.
        follows_generations: request.follows_generations,
    })
}

/// Renews an executor's lease (P3.4) with its claims (P4.2) and answers with a grant. Its loads
/// (P15.1) are checked with the claims, before anything is proposed, and handed to the leader's
/// load reports once the renewal committed; they are never replicated.
#[utoipa::path(
    post, path = "/v1/executors/{executor_id}/renew", tag = "executors", request_body = RenewRequest,
    params(ExecutorIdPath),
    responses(
        (status = 200, description = "Renewed: lease remaining, revision and the full set.", body = Grant),
        (status = 401, description = "`unauthenticated`: the executor registered with a credential and this request does not present it (P13.4)."),
        (status = 403, description = "`forbidden` (TLS): not an executor's certificate (P13.3), or one limited to namespaces other than the executor's (P18.2)."),
        (status = 404, description = "`unknown_executor`: reaped, deregistered or never registered; register again."),
    ),
)]
pub async fn renew(
    State(executors): State<Executors>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
    Extension(Admitted(_)): Extension<Admitted>,
    ApiJson(mut request): ApiJson<RenewRequest>,
) -> Result<Json<Grant>, HttpError> {
    // Shard numbers of an older layout are still read (P20.3): a renewal a set behind claims
    // them, and its claims only ever compare against the set.
    let shard_count = executors.shard_bound(&executor_id)?;
    let loads = request.loads.take();
    let claims = request
        .checked_claims(shard_count)
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    if let Some(loads) = &loads {
        check_shard_loads(loads, shard_count)
            .map_err(|error| HttpError::invalid(error.to_string()))?;
    }
    let ready = request
        .checked_ready(shard_count)
        .map_err(|error| HttpError::invalid(format!("ready: {error}")))?;
    let claimed = ClaimsAndLoads {
        claims: &claims,
        loads,
        ready,
    };
    let grant = executors
        .renew(&executor_id, request.revision, claimed)
        .await?;
    Ok(Json(reply_form(&request, &claims, grant)))
}

/// The grant in the form the renewal asked for (docs/PROTOCOL.md, "Versions"): "unchanged" when
/// it takes that answer and claimed exactly the set; otherwise the set, in the form the claims
/// came in.
fn reply_form(request: &RenewRequest, claims: &[ShardEpoch], grant: crate::lease::Grant) -> Grant {
    let unchanged = request.accept_unchanged
        && claims_are_exactly(
            claims.iter().map(|claim| (claim.shard, claim.epoch)),
            grant.shards.iter().copied(),
        );
    let reply: Grant = grant.into();
    if unchanged {
        reply.into_unchanged()
    } else if request.claim_runs.is_some() {
        reply.into_shard_runs()
    } else {
        reply
    }
}

/// Acknowledges a revoke out of band (P5.2); the revoke reply acknowledges too.
#[utoipa::path(
    post, path = "/v1/executors/{executor_id}/release", tag = "executors", request_body = ReleaseRequest,
    params(ExecutorIdPath),
    responses(
        (status = 200, description = "Which handoffs this completed and which it did not concern.", body = ReleaseReply),
        (status = 401, description = "`unauthenticated`: the executor's credential is missing or wrong (P13.4)."),
        (status = 403, description = "`forbidden` (TLS): not an executor's certificate (P13.3), or one limited to namespaces other than the executor's (P18.2)."),
        (status = 404, description = "`unknown_executor`."),
    ),
)]
pub async fn release(
    State(executors): State<Executors>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
    Extension(Admitted(_)): Extension<Admitted>,
    ApiJson(request): ApiJson<ReleaseRequest>,
) -> Result<Json<ReleaseReply>, HttpError> {
    validate_shards(
        request.shards.iter().copied(),
        executors.shard_bound(&executor_id)?,
    )?;
    let Released {
        completed, ignored, ..
    } = executors
        .release(&executor_id, request.shards, request.revoke_revision)
        .await?;
    Ok(Json(ReleaseReply { completed, ignored }))
}

/// P7.2: deregistering an executor that existed succeeds, also when retried after it is gone;
/// an id that never existed is 404.
#[utoipa::path(
    delete, path = "/v1/executors/{executor_id}", tag = "executors",
    params(ExecutorIdPath),
    responses(
        (status = 204, description = "Deregistered, now or before (a retry, P7.2)."),
        (status = 202, description = "An operator's removal (admin certificate, no credential) of an executor that still holds shards (P5.5): it is draining, and its shards move by handoff (P5.2); repeat the request once it holds none. The executor as it is.", body = ExecutorView),
        (status = 401, description = "`unauthenticated`: the executor's credential is missing or wrong; an admin certificate needs none (P13.4)."),
        (status = 403, description = "`forbidden` (TLS): neither an executor's nor an admin's certificate (P13.3), or one limited to namespaces other than the executor's (P18.2)."),
        (status = 404, description = "`unknown_executor`: the id never existed."),
    ),
)]
pub async fn deregister(
    State(executors): State<Executors>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
    Extension(Admitted(caller)): Extension<Admitted>,
    Extension(actor): Extension<Actor>,
) -> Result<Response, HttpError> {
    // An operator (admin certificate, P13.3) deregisters without the executor's credential, and
    // then only through the handoff (P5.5): the executor may still be admitting.
    match caller {
        Caller::Operator => match executors.remove(&actor, &executor_id).await? {
            Removal::Removed => Ok(StatusCode::NO_CONTENT.into_response()),
            Removal::StillMoving(view) => Ok((StatusCode::ACCEPTED, Json(view)).into_response()),
        },
        Caller::Executor => {
            executors.deregister(&executor_id, None).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
    }
}

/// Whether the listener serves TLS, where every registration carries a credential (P13.4,
/// P13.5); set on the router once.
#[derive(Debug, Clone, Copy)]
pub struct ListenerTls(pub bool);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::registration_limit::DEFAULT_MAX_CAPACITY;
    use crate::lease::{Epoch, ShardId};
    use leasehold_api::wire::MAX_CAPACITY;

    fn request(capacity: Option<u32>) -> RegisterRequest {
        RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: "inc".into(),
            address: "http://127.0.0.1:9".into(),
            name: None,
            credential: None,
            capacity,
            app_version: None,
            labels: Default::default(),
        }
    }

    /// "Versions": a renewal that takes "unchanged" gets it exactly when its claims are the set,
    /// in any order; any other renewal gets the set, in the form its claims came in.
    #[test]
    fn a_renewal_is_answered_unchanged_only_when_it_asked_and_claimed_the_set() {
        let set: Vec<(ShardId, Epoch)> = vec![(0, 2), (1, 2), (5, 3)];
        let grant = crate::lease::Grant {
            generation: 0,
            executor_id: "ex-1".into(),
            lease_ttl_ms: 3_000,
            revision: 9,
            shard_count: 8,
            shards: set.clone(),
            secondaries: Vec::new(),
        };
        let claims = |pairs: &[(u32, u64)]| -> Vec<ShardEpoch> {
            pairs
                .iter()
                .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
                .collect()
        };
        let renewal = |claims: Vec<ShardEpoch>, accept_unchanged: bool| RenewRequest {
            claims,
            claim_runs: None,
            revision: 9,
            loads: None,
            accept_unchanged,
            ready: Vec::new(),
        };
        let listed: Grant = grant.clone().into();
        for held in [set.clone(), vec![(5, 3), (0, 2), (1, 2)]] {
            let asked = renewal(claims(&held), true);
            let reply = reply_form(&asked, &asked.claims, grant.clone());
            assert_eq!(reply, listed.clone().into_unchanged(), "{held:?}");
            let compact = asked.with_claims_as_runs();
            let reply = reply_form(&compact, &asked.claims, grant.clone());
            assert_eq!(reply, listed.clone().into_unchanged(), "{held:?} as runs");
            let not_asked = renewal(claims(&held), false);
            let reply = reply_form(&not_asked, &not_asked.claims, grant.clone());
            assert_eq!(reply, listed, "not asked: the set");
        }
        for other in [
            vec![(0, 2), (1, 2)],
            vec![(0, 2), (1, 2), (5, 4)],
            vec![(0, 2), (1, 2), (5, 3), (6, 1)],
            vec![],
        ] {
            let asked = renewal(claims(&other), true);
            let reply = reply_form(&asked, &asked.claims, grant.clone());
            assert_eq!(reply, listed, "{other:?}: the set, listed");
            let compact = asked.with_claims_as_runs();
            let reply = reply_form(&compact, &asked.claims, grant.clone());
            assert_eq!(
                reply,
                listed.clone().into_shard_runs(),
                "{other:?}: as runs"
            );
        }
    }

    /// P15.1, I6: the edge refuses a capacity of 0 or above `MAX_CAPACITY` before anything is
    /// proposed; an absent one is the default.
    #[test]
    fn p15_1_i6_a_registration_with_a_capacity_out_of_range_is_refused_at_the_edge() {
        for bad in [0, MAX_CAPACITY + 1, u32::MAX] {
            let refused = registration(request(Some(bad)), false, MAX_CAPACITY).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::InvalidRequest, "{bad}");
            assert!(refused.problem().detail.contains("capacity"), "{bad}");
        }
        for (asked, registered) in [
            (None, DEFAULT_CAPACITY),
            (Some(1), 1),
            (Some(MAX_CAPACITY), MAX_CAPACITY),
        ] {
            let Ok(Registration { capacity, .. }) =
                registration(request(asked), false, MAX_CAPACITY)
            else {
                panic!("{asked:?} refused");
            };
            assert_eq!(capacity, registered, "{asked:?}");
        }
    }

    /// P17.3, I6: an application version is checked at the edge, before anything is proposed,
    /// and reaches the command as stated.
    #[test]
    fn p17_3_i6_an_application_version_is_checked_at_the_edge() {
        let with = |app_version: &str| RegisterRequest {
            app_version: Some(app_version.to_owned()),
            ..request(None)
        };
        for bad in ["", "1 2", "1/2", &"9".repeat(65)] {
            let refused = registration(with(bad), false, MAX_CAPACITY).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::InvalidRequest, "{bad:?}");
            assert!(refused.problem().detail.contains("P17.3"), "{bad:?}");
        }
        let Ok(Registration { app_version, .. }) =
            registration(with("2.1.0-rc.1"), false, MAX_CAPACITY)
        else {
            panic!("a good version refused");
        };
        assert_eq!(app_version.as_deref(), Some("2.1.0-rc.1"));
    }

    /// P15.1, P13.6 (the security review's finding 2): a capacity above `--max-capacity` is
    /// refused `400` before anything is proposed, naming the limit and the flag; up to it, and
    /// an absent one, pass.
    #[test]
    fn p15_1_a_capacity_above_max_capacity_is_refused_before_anything_is_proposed() {
        for (max, bad) in [
            (DEFAULT_MAX_CAPACITY, DEFAULT_MAX_CAPACITY + 1),
            (1, 2),
            (8, 1_000_000),
        ] {
            let refused = registration(request(Some(bad)), false, max).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::InvalidRequest, "{bad} > {max}");
            let detail = &refused.problem().detail;
            assert!(
                detail.contains(&format!("limit of {max}")) && detail.contains("--max-capacity"),
                "{detail}"
            );
        }
        for (max, asked) in [
            (DEFAULT_MAX_CAPACITY, Some(DEFAULT_MAX_CAPACITY)),
            (1, Some(1)),
            (1, None),
        ] {
            assert!(
                registration(request(asked), false, max).is_ok(),
                "{asked:?} ≤ {max}"
            );
        }
    }

    /// P13.5: over TLS a registration must carry a credential.
    #[test]
    fn p13_5_a_registration_over_tls_needs_a_credential() {
        let refused = registration(request(None), true, DEFAULT_MAX_CAPACITY).unwrap_err();
        assert_eq!(refused.code(), ErrorCode::Unauthenticated);
        let mut with = request(None);
        with.credential = Some(Credential::from_random([5; 32]));
        assert!(registration(with, true, DEFAULT_MAX_CAPACITY).is_ok());
    }
}
