//! An executor's calls: register, renew, release, deregister and drain itself (§9, P3, P4, P7).

use super::*;

impl Client {
    /// `POST /v1/executors`: register (P4.4). Retried on unknown outcome: the incarnation is the
    /// idempotency key, so a retry returns the same executor (P7.2).
    pub async fn register(&self, request: &RegisterRequest) -> Result<Grant, ClientError> {
        let body = encode(request)?;
        self.send_decoded(Method::POST, "/v1/executors", Some(body), Idempotency::Safe)
            .await
    }

    /// `POST /v1/executors/{id}/renew`. A renewal is a `max` on the manager (P3.4), so a repeat is
    /// harmless.
    /// `credential` is the one the executor registered with, if it did (P13.4).
    /// Claims go as runs to a manager that stated cluster version [`COMPACT_SHARDS_SCHEMA`] or
    /// later, as a list otherwise, and the renewal takes "unchanged" for an answer from one that
    /// stated [`UNCHANGED_SET_SCHEMA`] (docs/PROTOCOL.md, "Versions"); whatever the form, the
    /// grant returned lists its set in `shards`.
    pub async fn renew(
        &self,
        executor_id: &str,
        credential: Option<&Credential>,
        request: &RenewRequest,
    ) -> Result<Grant, ClientError> {
        self.renew_within(executor_id, credential, request, None)
            .await
    }

    /// [`Client::renew`] with each attempt bounded by `attempt_timeout` (else the request
    /// timeout): an executor bounds each by a fraction of its lease, so one replica that holds
    /// the request cannot use up the time the lease leaves to reach the others (P7.3).
    pub async fn renew_within(
        &self,
        executor_id: &str,
        credential: Option<&Credential>,
        request: &RenewRequest,
        attempt_timeout: Option<Duration>,
    ) -> Result<Grant, ClientError> {
        let path = format!("/v1/executors/{}/renew", path_segment(executor_id)?);
        let cluster_version = self.cluster_version();
        let mut sent = if request.claim_runs.is_none() && cluster_version >= COMPACT_SHARDS_SCHEMA {
            std::borrow::Cow::Owned(request.with_claims_as_runs())
        } else {
            std::borrow::Cow::Borrowed(request)
        };
        if cluster_version >= UNCHANGED_SET_SCHEMA && !request.accept_unchanged {
            sent.to_mut().accept_unchanged = true;
        }
        let body = encode(sent.as_ref())?;
        let reply = self
            .send_bounded(
                Method::POST,
                &path,
                Some(body),
                Idempotency::Safe,
                credential,
                attempt_timeout,
            )
            .await?;
        decode::<Grant>(&reply)?
            .expand_shard_runs()
            .map_err(|error| ClientError::Decode(format!("the grant's shard runs: {error}")))?
            .expand_unchanged(&sent)
            .map_err(|error| ClientError::Decode(format!("the unchanged grant: {error}")))
    }

    /// `POST /v1/executors/{id}/release`: acknowledge a revoke. Names its handoff (P5.2), so a
    /// repeat for a handoff already settled is ignored by the manager.
    pub async fn release(
        &self,
        executor_id: &str,
        credential: Option<&Credential>,
        request: &ReleaseRequest,
    ) -> Result<(), ClientError> {
        let path = format!("/v1/executors/{}/release", path_segment(executor_id)?);
        let body = encode(request)?;
        self.send_as(
            Method::POST,
            &path,
            Some(body),
            Idempotency::Safe,
            credential,
        )
        .await?;
        Ok(())
    }

    /// `DELETE /v1/executors/{id}` (P3.7). A repeat after a lost reply still succeeds through the
    /// manager's tombstone (P7.2); an id that never existed is `404 not_found`/`unknown_executor`.
    pub async fn deregister(
        &self,
        executor_id: &str,
        credential: Option<&Credential>,
    ) -> Result<(), ClientError> {
        let path = format!("/v1/executors/{}", path_segment(executor_id)?);
        let reply = self
            .send_as(Method::DELETE, &path, None, Idempotency::Safe, credential)
            .await?;
        expect_status(&reply, StatusCode::NO_CONTENT)
    }

    /// `POST /v1/executors/{id}/drain` by the executor itself, presenting its credential
    /// (PROTOCOL P17.2): it keeps admitting each shard until that shard's handoff completes.
    pub async fn drain_self(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> Result<ExecutorView, ClientError> {
        let path = format!("/v1/executors/{}/drain", path_segment(executor_id)?);
        let reply = self
            .send_as(
                Method::POST,
                &path,
                None,
                Idempotency::Safe,
                Some(credential),
            )
            .await?;
        decode(&reply)
    }
}
