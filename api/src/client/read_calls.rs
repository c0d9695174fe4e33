//! Reads: the state, executors, shards, routing, namespaces, plans and watches (§9, P18.1).

use super::*;

impl Client {
    /// Generic inspection `GET` (e.g. `/v1/state`, `/v1/routing?key=k`); `path` starts with `/`
    /// and may carry a query string.
    pub async fn get_json(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        validate_path(path)?;
        let reply = self
            .send(Method::GET, path, None, Idempotency::Safe)
            .await?;
        decode_optional_json(&reply)
    }

    /// `GET /v1/state`: executors, leases and shards at one revision. `consistent` reads through
    /// the leader (linearizable); otherwise the answering replica's applied state.
    pub async fn state(&self, consistent: bool) -> Result<StateView, ClientError> {
        self.get_typed(&with_consistency("/v1/state", consistent))
            .await
    }

    /// `GET /v1/state?namespace=NAME` (PROTOCOL P18.1): one namespace's state.
    pub async fn state_in(
        &self,
        namespace: &str,
        consistent: bool,
    ) -> Result<StateView, ClientError> {
        let path = in_namespace("/v1/state", namespace);
        self.get_typed(&with_consistency(&path, consistent)).await
    }

    /// `GET /v1/executors`.
    pub async fn executors(&self, consistent: bool) -> Result<Vec<ExecutorView>, ClientError> {
        self.get_typed(&with_consistency("/v1/executors", consistent))
            .await
    }

    /// `GET /v1/executors/{id}`; an unknown id is `404 unknown_executor`.
    pub async fn executor(
        &self,
        executor_id: &str,
        consistent: bool,
    ) -> Result<ExecutorView, ClientError> {
        let path = format!("/v1/executors/{}", path_segment(executor_id)?);
        self.get_typed(&with_consistency(&path, consistent)).await
    }

    /// `GET /v1/shards`.
    pub async fn shards(&self, consistent: bool) -> Result<Vec<ShardView>, ClientError> {
        self.get_typed(&with_consistency("/v1/shards", consistent))
            .await
    }

    /// `GET /v1/shards?namespace=NAME` (PROTOCOL P18.1): one namespace's shards.
    pub async fn shards_in(
        &self,
        namespace: &str,
        consistent: bool,
    ) -> Result<Vec<ShardView>, ClientError> {
        let path = in_namespace("/v1/shards", namespace);
        self.get_typed(&with_consistency(&path, consistent)).await
    }

    /// `GET /v1/executors?namespace=NAME` (PROTOCOL P18.1): one namespace's executors.
    pub async fn executors_in(
        &self,
        namespace: &str,
        consistent: bool,
    ) -> Result<Vec<ExecutorView>, ClientError> {
        let path = in_namespace("/v1/executors", namespace);
        self.get_typed(&with_consistency(&path, consistent)).await
    }

    /// `GET /v1/routing?namespace=NAME` (PROTOCOL P18.1): one namespace's routing table.
    pub async fn routing_in(
        &self,
        namespace: &str,
        consistent: bool,
    ) -> Result<RoutingTable, ClientError> {
        let path = in_namespace("/v1/routing", namespace);
        self.get_typed(&with_consistency(&path, consistent)).await
    }

    /// `GET /v1/routing?namespace=NAME&key=K` (PROTOCOL P18.1): where to send work for one key
    /// of one namespace.
    pub async fn route_key_in(
        &self,
        namespace: &str,
        key: &str,
        consistent: bool,
    ) -> Result<KeyRoute, ClientError> {
        let path = format!(
            "{}&key={}",
            in_namespace("/v1/routing", namespace),
            percent_encode(key)
        );
        self.get_typed(&with_consistency(&path, consistent)).await
    }

    /// `GET /v1/namespaces` (PROTOCOL P18.1): every namespace, ascending by name.
    pub async fn namespaces(&self) -> Result<Vec<NamespaceView>, ClientError> {
        self.get_typed("/v1/namespaces").await
    }

    /// `GET /v1/namespaces/{name}`; an unknown name is `404 not_found`.
    pub async fn namespace(&self, name: &str) -> Result<NamespaceView, ClientError> {
        let path = format!("/v1/namespaces/{}", path_segment(name)?);
        self.get_typed(&path).await
    }

    /// `GET /v1/routing`: the whole routing table.
    pub async fn routing(&self, consistent: bool) -> Result<RoutingTable, ClientError> {
        self.get_typed(&with_consistency("/v1/routing", consistent))
            .await
    }

    /// `GET /v1/routing?form=runs`: the whole routing table as runs. Only managers stating
    /// cluster version [`COMPACT_SHARDS_SCHEMA`] or later serve this form.
    pub async fn routing_runs(&self, consistent: bool) -> Result<RoutingRuns, ClientError> {
        let reply: RoutingAnswer = self
            .get_typed(&with_consistency("/v1/routing?form=runs", consistent))
            .await?;
        match reply {
            RoutingAnswer::Runs(runs) => Ok(runs),
            _ => Err(ClientError::Decode(
                "asked for the routing table as runs, got another form".to_owned(),
            )),
        }
    }

    /// `GET /v1/routing?namespace=NAME&form=runs` (PROTOCOL P18.1): one namespace's routing
    /// table as runs. Only managers stating cluster version [`crate::wire::NAMESPACES_SCHEMA`] or later serve
    /// it; earlier ones refuse the parameter (`400`).
    pub async fn routing_runs_in(
        &self,
        namespace: &str,
        consistent: bool,
    ) -> Result<RoutingRuns, ClientError> {
        let path = format!("{}&form=runs", in_namespace("/v1/routing", namespace));
        let reply: RoutingAnswer = self.get_typed(&with_consistency(&path, consistent)).await?;
        match reply {
            RoutingAnswer::Runs(runs) => Ok(runs),
            _ => Err(ClientError::Decode(
                "asked for the routing table as runs, got another form".to_owned(),
            )),
        }
    }

    /// `GET /v1/routing?key=K`: where to send work for one key.
    pub async fn route_key(&self, key: &str, consistent: bool) -> Result<KeyRoute, ClientError> {
        let path = format!("/v1/routing?key={}", percent_encode(key));
        self.get_typed(&with_consistency(&path, consistent)).await
    }

    /// `GET /v1/plan` (PROTOCOL P17.4): the plan the leader would commit next, not committed.
    pub async fn plan(&self) -> Result<PlanPreview, ClientError> {
        self.get_typed("/v1/plan").await
    }

    /// `GET /v1/plan?namespace=NAME` (PROTOCOL P17.4, P18.1): one namespace's next plan.
    pub async fn plan_in(&self, namespace: &str) -> Result<PlanPreview, ClientError> {
        self.get_typed(&in_namespace("/v1/plan", namespace)).await
    }

    /// `GET /v1/executors/{id}/safe-to-stop` (PROTOCOL P17.4): whether stopping it now leaves
    /// its shards a place to go, and why.
    pub async fn executor_safe_to_stop(
        &self,
        executor_id: &str,
    ) -> Result<SafeToStop, ClientError> {
        let path = format!("/v1/executors/{}/safe-to-stop", path_segment(executor_id)?);
        self.get_typed(&path).await
    }

    /// `GET /v1/cluster/nodes/{id}/safe-to-stop` (PROTOCOL P17.4): whether stopping manager
    /// `node_id` now leaves the other voters a caught-up majority, and why.
    pub async fn member_safe_to_stop(&self, node_id: u64) -> Result<SafeToStop, ClientError> {
        self.get_typed(&format!("/v1/cluster/nodes/{node_id}/safe-to-stop"))
            .await
    }

    /// `GET /v1/cluster/maintenance` (PROTOCOL P17.4): whether maintenance mode is on.
    pub async fn maintenance(&self) -> Result<MaintenanceView, ClientError> {
        self.get_typed("/v1/cluster/maintenance").await
    }

    /// `GET /v1/audit` (PROTOCOL P17.4, admin role): the operator actions recorded, oldest first,
    /// at most [`crate::wire::MAX_AUDIT_RECORDS`].
    pub async fn audit(&self) -> Result<Vec<AuditRecordView>, ClientError> {
        self.get_typed("/v1/audit").await
    }

    /// `GET /v1/watch?revision=N&wait=W`: returns once the state's revision is above `revision`,
    /// or when `wait` has passed. The request timeout must be longer than `wait`.
    pub async fn watch(&self, revision: u64, wait: Duration) -> Result<WatchReply, ClientError> {
        let path = format!("/v1/watch?revision={revision}&wait={}ms", wait.as_millis());
        self.get_typed(&path).await
    }

    /// [`Client::watch`] of one namespace (PROTOCOL P18.1): answered with that namespace's state
    /// once the state's revision is above `revision`.
    pub async fn watch_in(
        &self,
        namespace: &str,
        revision: u64,
        wait: Duration,
    ) -> Result<WatchReply, ClientError> {
        let path = format!(
            "{}&revision={revision}&wait={}ms",
            in_namespace("/v1/watch", namespace),
            wait.as_millis()
        );
        self.get_typed(&path).await
    }

    /// `GET /v1/watch?revision=N&wait=W&view=routing`: [`Client::watch`], answered with the
    /// routing table as runs instead of the state. Only managers stating cluster version
    /// [`COMPACT_SHARDS_SCHEMA`] or later serve this view.
    pub async fn watch_routing(
        &self,
        revision: u64,
        wait: Duration,
    ) -> Result<RoutingRuns, ClientError> {
        let path = format!(
            "/v1/watch?revision={revision}&wait={}ms&view=routing",
            wait.as_millis()
        );
        self.get_typed(&path).await
    }

    /// [`Client::watch_routing`] of one namespace (PROTOCOL P18.1): answered with that
    /// namespace's routing table as runs once the state's revision is above `revision`. Only
    /// managers stating cluster version [`crate::wire::NAMESPACES_SCHEMA`] or later serve it.
    pub async fn watch_routing_in(
        &self,
        namespace: &str,
        revision: u64,
        wait: Duration,
    ) -> Result<RoutingRuns, ClientError> {
        let path = format!(
            "{}&revision={revision}&wait={}ms&view=routing",
            in_namespace("/v1/watch", namespace),
            wait.as_millis()
        );
        self.get_typed(&path).await
    }
}
