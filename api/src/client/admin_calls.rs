//! An operator's calls: membership, snapshots and backups, namespaces, drains and removals,
//! maintenance, shard moves and pins (P5.5, P17.4, P18.1).

use super::*;

impl Client {
    /// `GET /v1/cluster` from whichever replica answers, following the leader.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, ClientError> {
        self.send_decoded(Method::GET, "/v1/cluster", None, Idempotency::Safe)
            .await
    }

    /// `GET /v1/cluster` from exactly `endpoint`: one attempt, no failover, no retry, so tests
    /// and operators can see each replica's own view.
    pub async fn cluster_info_from(&self, endpoint: &str) -> Result<ClusterInfo, ClientError> {
        let base = normalize_endpoint(endpoint)?;
        let request_id = self.next_request_id();
        let reply = self
            .attempt(
                &base,
                &Method::GET,
                "/v1/cluster",
                None,
                &request_id,
                None,
                None,
            )
            .await
            .map_err(Failure::into_error)?;
        decode(&reply)
    }

    /// `POST /v1/cluster/init`. Initialisation is safe to repeat (§10).
    pub async fn init_cluster(&self) -> Result<InitReply, ClientError> {
        self.send_decoded(Method::POST, "/v1/cluster/init", None, Idempotency::Safe)
            .await
    }

    /// `POST /v1/cluster/nodes`: add a learner and promote it. Not repeated on unknown outcome:
    /// a membership change is not known to be idempotent.
    /// Answers with the membership as it stands once the node was promoted.
    pub async fn add_node(&self, request: &AddNodeRequest) -> Result<ClusterInfo, ClientError> {
        let body = encode(request)?;
        self.send_decoded(
            Method::POST,
            "/v1/cluster/nodes",
            Some(body),
            Idempotency::Unsafe,
        )
        .await
    }

    /// `DELETE /v1/cluster/nodes/{id}`: answers with the membership without it.
    pub async fn remove_node(&self, node_id: u64) -> Result<ClusterInfo, ClientError> {
        let path = format!("/v1/cluster/nodes/{node_id}");
        self.send_decoded(Method::DELETE, &path, None, Idempotency::Unsafe)
            .await
    }

    /// `POST /v1/cluster/snapshot`: ask the serving replica to snapshot now (P2.5).
    pub async fn trigger_snapshot(&self) -> Result<SnapshotReply, ClientError> {
        self.send_decoded(
            Method::POST,
            "/v1/cluster/snapshot",
            None,
            Idempotency::Unsafe,
        )
        .await
    }

    /// `POST /v1/namespaces` (PROTOCOL P18.1, admin role): create a namespace. A repeat with
    /// the same settings succeeds, so a retry after an unknown outcome is harmless.
    pub async fn create_namespace(
        &self,
        request: &CreateNamespaceRequest,
    ) -> Result<NamespaceView, ClientError> {
        let body = encode(request)?;
        self.send_decoded(
            Method::POST,
            "/v1/namespaces",
            Some(body),
            Idempotency::Safe,
        )
        .await
    }

    /// `PATCH /v1/namespaces/{name}` (PROTOCOL P18.1, admin role): change its lease or executor
    /// bound in place. Setting values is idempotent, so a repeat is harmless.
    pub async fn set_namespace(
        &self,
        name: &str,
        request: &SetNamespaceRequest,
    ) -> Result<NamespaceView, ClientError> {
        let body = encode(request)?;
        let path = format!("/v1/namespaces/{}", path_segment(name)?);
        self.send_decoded(Method::PATCH, &path, Some(body), Idempotency::Safe)
            .await
    }

    /// `POST /v1/namespaces/{name}/reshard` (PROTOCOL P20.1, admin of the namespace): double
    /// or halve its shard count online. A repeat of the reshard under way, or of one done,
    /// changes nothing, so a retry after an unknown outcome is harmless.
    pub async fn reshard_namespace(
        &self,
        name: &str,
        shard_count: u32,
    ) -> Result<ReshardReply, ClientError> {
        let body = encode(&ReshardRequest { shard_count })?;
        let path = format!("/v1/namespaces/{}/reshard", path_segment(name)?);
        self.send_decoded(Method::POST, &path, Some(body), Idempotency::Safe)
            .await
    }

    /// `DELETE /v1/namespaces/{name}` (PROTOCOL P18.1, admin role): delete a drained namespace
    /// (`409` while any of its shards has an owner). A repeat succeeds with `already_gone`.
    pub async fn delete_namespace(&self, name: &str) -> Result<NamespaceDeleted, ClientError> {
        let path = format!("/v1/namespaces/{}", path_segment(name)?);
        self.send_decoded(Method::DELETE, &path, None, Idempotency::Safe)
            .await
    }

    /// `POST /v1/executors/{id}/drain`: no new shards for it, and its shards move to others
    /// through the normal handoff. Setting a flag is idempotent, so a repeat is harmless.
    pub async fn drain(&self, executor_id: &str) -> Result<ExecutorView, ClientError> {
        let path = format!("/v1/executors/{}/drain", path_segment(executor_id)?);
        self.send_decoded(Method::POST, &path, None, Idempotency::Safe)
            .await
    }

    /// `PUT /v1/cluster/maintenance` (PROTOCOL P17.4, admin role): turn maintenance mode on or
    /// off; `changed` says whether it did anything. Setting a flag is idempotent, so a repeat is
    /// harmless (and not recorded twice). `409 conflict` below cluster version
    /// [`crate::wire::OPERATOR_CONTROLS_SCHEMA`].
    pub async fn set_maintenance(&self, on: bool) -> Result<MaintenanceView, ClientError> {
        let body = encode(&MaintenanceRequest { on })?;
        self.send_decoded(
            Method::PUT,
            "/v1/cluster/maintenance",
            Some(body),
            Idempotency::Safe,
        )
        .await
    }

    /// `POST /v1/shards/{shard}/move` (PROTOCOL P17.4, admin role): hand `shard` to executor `to`
    /// now (a P5.2 handoff); answers with the shard once the move committed. Not repeated on
    /// unknown outcome: a move that did commit would be refused (`409`, it owns it already) or,
    /// once the planner moved the shard on, made again.
    pub async fn move_shard(&self, shard: u32, to: &str) -> Result<ShardView, ClientError> {
        let body = encode(&MoveShardRequest { to: to.to_owned() })?;
        self.send_decoded(
            Method::POST,
            &format!("/v1/shards/{shard}/move"),
            Some(body),
            Idempotency::Unsafe,
        )
        .await
    }

    /// `PUT /v1/shards/{shard}/pin` (PROTOCOL P17.4, admin role): keep `shard` on executor
    /// `executor_id`. Setting a pin is idempotent, so a repeat is harmless.
    pub async fn pin_shard(&self, shard: u32, executor_id: &str) -> Result<ShardView, ClientError> {
        let body = encode(&PinShardRequest {
            executor_id: executor_id.to_owned(),
        })?;
        self.send_decoded(
            Method::PUT,
            &format!("/v1/shards/{shard}/pin"),
            Some(body),
            Idempotency::Safe,
        )
        .await
    }

    /// `DELETE /v1/shards/{shard}/pin` (PROTOCOL P17.4, admin role): let the planner place
    /// `shard` freely again. Idempotent.
    pub async fn unpin_shard(&self, shard: u32) -> Result<ShardView, ClientError> {
        self.send_decoded(
            Method::DELETE,
            &format!("/v1/shards/{shard}/pin"),
            None,
            Idempotency::Safe,
        )
        .await
    }

    /// An operator's `DELETE /v1/executors/{id}` (admin role, no credential), PROTOCOL P5.5: an
    /// executor that still holds shards is drained and its shards move by handoff first
    /// ([`Removal::Draining`]: ask again); one that holds none is deregistered
    /// ([`Removal::Removed`], also when it was gone already, P7.2).
    pub async fn remove_executor(&self, executor_id: &str) -> Result<Removal, ClientError> {
        let path = format!("/v1/executors/{}", path_segment(executor_id)?);
        let reply = self
            .send(Method::DELETE, &path, None, Idempotency::Safe)
            .await?;
        match reply.status {
            StatusCode::NO_CONTENT => Ok(Removal::Removed),
            StatusCode::ACCEPTED => Ok(Removal::Draining(Box::new(decode(&reply)?))),
            other => Err(unexpected(other, &reply.body)),
        }
    }

    /// `DELETE /v1/executors/{id}/drain`: cancel a drain.
    pub async fn undrain(&self, executor_id: &str) -> Result<ExecutorView, ClientError> {
        let path = format!("/v1/executors/{}/drain", path_segment(executor_id)?);
        self.send_decoded(Method::DELETE, &path, None, Idempotency::Safe)
            .await
    }

    /// `GET /v1/backup?consistent=true`: the leader's current state as a backup file
    /// ([`crate::backup`]), checked before it is returned.
    pub async fn backup(&self) -> Result<Vec<u8>, ClientError> {
        let reply = self
            .send(
                Method::GET,
                "/v1/backup?consistent=true",
                None,
                Idempotency::Safe,
            )
            .await?;
        crate::backup::parse_backup(&reply.body)
            .map_err(|e| ClientError::Decode(format!("backup from the server: {e}")))?;
        Ok(reply.body)
    }
}
