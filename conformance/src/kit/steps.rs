//! The kit's other steps: foreign pushes, routing, claims, renewal sets, an unknown executor and
//! a forged revision.

use super::*;

impl Run<'_> {
    /// Script step 9: a push naming x1, sent to x0 at the current revision with x1's set, must
    /// be refused `409` (P4.1); one taken shows as I1 against x1 too.
    pub(super) async fn foreign_push_step(&mut self) -> Result<(), RunError> {
        let other = self.executor_id(1).await?;
        let table = self.admin.routing(false).await.map_err(kit_error)?;
        let shards: Vec<serde_json::Value> = table
            .routes
            .iter()
            .filter(|route| route.executor_id.as_deref() == Some(other.as_str()))
            .map(|route| serde_json::json!({"shard": route.shard, "epoch": route.epoch}))
            .collect();
        let body = serde_json::json!({
            "executor_id": other,
            "revision": table.revision,
            "shard_count": table.shard_count,
            "shards": shards,
        });
        let url = format!("{}/v1/assignment", self.process(0).advertise);
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(kit_error)?;
        let name = self.process(0).name.clone();
        let status = match http.put(&url).json(&body).send().await {
            Ok(reply) => reply.status().as_u16().to_string(),
            Err(error) => format!("no answer ({error})"),
        };
        if status != "409" {
            self.findings.push(format!(
                "P4.1 push for another executor: {name} answered {status} to a push naming \
                 {other}, not 409 conflict"
            ));
        }
        // Long enough for a renewal to follow it.
        tokio::time::sleep(KIT_LEASE / 2).await;
        Ok(())
    }

    /// Waits until every shard is routed to one of `holders` (slots), then until `slot`'s
    /// admission log shows every shard routed to it admitted at its epoch. `Ok(Some(detail))`
    /// names the shards it still did not admit [`ROUTED_BOUND`] after they were first seen
    /// routed to it; a routing that never settles fails the run as [`Run::settle`] does.
    pub(super) async fn admits_what_is_routed(
        &mut self,
        holders: &[usize],
        slot: usize,
        what: &str,
    ) -> Result<Option<String>, RunError> {
        let started = Instant::now();
        let addresses: BTreeMap<String, usize> = holders
            .iter()
            .map(|&holder| (self.process(holder).advertise.clone(), self.slots[&holder]))
            .collect();
        let own = self.process(slot).advertise.clone();
        let mut first_seen: BTreeMap<(u32, u64), Instant> = BTreeMap::new();
        let mut last = String::new();
        let bound = self.settle_bound();
        while started.elapsed() < bound {
            if !self.process(slot).is_running() {
                let name = self.process(slot).name.clone();
                return Err(RunError::Executor(format!(
                    "{name} exited on its own ({what})"
                )));
            }
            let routed = self.routed_at(&own).await?;
            for key in &routed {
                first_seen.entry(*key).or_insert_with(Instant::now);
            }
            let admitted = self.open_admissions(slot)?;
            let missing: BTreeSet<(u32, u64)> = routed.difference(&admitted).copied().collect();
            if let Some(finding) =
                self.overdue_admissions(slot, &first_seen, &missing, &routed, &admitted)
            {
                return Ok(Some(finding));
            }
            match self.routed_to(&addresses).await {
                Ok(owners) if missing.is_empty() => {
                    for index in &owners {
                        self.processes[*index].held_shards = true;
                    }
                    self.steps.push((what.to_owned(), started.elapsed()));
                    return Ok(None);
                }
                Ok(_) => last = format!("{} routed shards not admitted yet", missing.len()),
                Err(detail) => last = detail,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(RunError::Executor(format!(
            "{what}: timed out after {bound:?} waiting for every shard to be routed to one \
             of {} ({last})",
            self.names(holders).join(", ")
        )))
    }

    /// The `(shard, epoch)`s the managers' routing table sends to the executor at `address`.
    async fn routed_at(&self, address: &str) -> Result<BTreeSet<(u32, u64)>, RunError> {
        let table = self.admin.routing(false).await.map_err(kit_error)?;
        Ok(table
            .routes
            .iter()
            .filter(|route| route.address.as_deref() == Some(address))
            .map(|route| (route.shard, route.epoch))
            .collect())
    }

    /// The `(shard, epoch)`s `slot`'s admission log shows admitted and not yet stopped.
    fn open_admissions(&mut self, slot: usize) -> Result<BTreeSet<(u32, u64)>, RunError> {
        Ok(self
            .process(slot)
            .intervals()
            .map_err(|detail| {
                RunError::Executor(format!(
                    "an admission log is not in the format of §9: {detail}"
                ))
            })?
            .iter()
            .filter(|interval| interval.end_ns.is_none())
            .map(|interval| (interval.shard, interval.epoch))
            .collect())
    }

    /// The finding when some of the `missing` admissions were first seen routed
    /// [`ROUTED_BOUND`] ago or more.
    fn overdue_admissions(
        &mut self,
        slot: usize,
        first_seen: &BTreeMap<(u32, u64), Instant>,
        missing: &BTreeSet<(u32, u64)>,
        routed: &BTreeSet<(u32, u64)>,
        admitted: &BTreeSet<(u32, u64)>,
    ) -> Option<String> {
        let overdue: BTreeSet<(u32, u64)> = missing
            .iter()
            .filter(|key| first_seen[*key].elapsed() >= ROUTED_BOUND)
            .copied()
            .collect();
        if overdue.is_empty() {
            return None;
        }
        let name = self.process(slot).name.clone();
        Some(format!(
            "{name} was routed {} for {ROUTED_BOUND:?} and more, and its admission log \
             shows none of them admitted at that epoch (routed to it: {}; admitted: {})",
            show_set(&overdue),
            show_set(routed),
            show_set(admitted)
        ))
    }

    /// P4.2, claims: x0's renewals must carry every `(shard, epoch)` it holds. The kit reads
    /// x0's next renewal at its call proxy while the managers' set for x0 stays the same (read
    /// before the renewal and after it) and compares; up to
    /// [`CLAIMS_ATTEMPTS`] renewals, since a push may still be landing when one leaves.
    pub(super) async fn claims_step(&mut self) -> Result<(), RunError> {
        let id = self.executor_id(0).await?;
        let renew_path = format!("/v1/executors/{id}/renew");
        let mut judged = Vec::new();
        for _ in 0..CLAIMS_ATTEMPTS * 2 {
            let before = self.managers_set(&id).await?;
            self.process(0).call_proxy.capture_next("POST", &renew_path);
            let waited_by = Instant::now() + KIT_LEASE * 2;
            let body = loop {
                if let Some(body) = self.process(0).call_proxy.captured_body() {
                    break body;
                }
                if Instant::now() >= waited_by {
                    return Err(RunError::Executor(format!(
                        "x0 sent no renewal within {:?} (P3.5: a renewal once a third of the \
                         lease has passed)",
                        KIT_LEASE * 2
                    )));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            let expected = self.managers_set(&id).await?;
            if expected != before {
                continue;
            }
            let claims = Claims::parse(&body);
            if claims.as_ref().is_some_and(|c| c.shards == expected) {
                self.process(0).call_proxy.stop_capturing();
                return Ok(());
            }
            judged.push(match claims {
                Some(claims) => format!(
                    "claimed {} at revision {}",
                    show_set(&claims.shards),
                    claims.revision
                ),
                None => format!(
                    "sent a body without claims and a revision: {}",
                    String::from_utf8_lossy(&body)
                ),
            });
            judged.push(format!("the managers' set {}", show_set(&expected)));
            if judged.len() >= 2 * CLAIMS_ATTEMPTS as usize {
                break;
            }
        }
        self.process(0).call_proxy.stop_capturing();
        if judged.is_empty() {
            return Err(RunError::Kit(format!(
                "the claims step found no renewal of x0 sent while the managers' set for it stood \
                 still, in {} renewals",
                CLAIMS_ATTEMPTS * 2
            )));
        }
        let name = self.process(0).name.clone();
        let pairs: Vec<String> = judged
            .chunks(2)
            .map(|pair| format!("{} against {}", pair[0], pair[1]))
            .collect();
        self.findings.push(format!(
            "P4.2 claims: {name} ({id}) renewed with claims other than the set it holds, in \
             each of {} renewals sent while the managers' set for it stood still: {}",
            pairs.len(),
            pairs.join("; ")
        ));
        Ok(())
    }

    /// P4.2, a set told by a renewal's reply: x0's pushes and revokes are refused, so it hears
    /// of its set only from its renewals' replies; x1 is drained. x0 must admit the shards it
    /// is routed (adopting the reply's set); then x1 is undrained, and an x0 that keeps shards
    /// its replies left out overlaps x1 (I1).
    pub(super) async fn renewal_set_step(&mut self) -> Result<(), RunError> {
        let x1 = self.executor_id(1).await?;
        let x0 = self.process(0);
        x0.push_proxy
            .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, true);
        x0.push_proxy
            .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, true);
        self.admin.drain(&x1).await.map_err(kit_error)?;
        let missed = self
            .admits_what_is_routed(&[0, 2], 0, "x1 drained: x0 hears only its renewals")
            .await?;
        if let Some(detail) = missed {
            self.findings.push(format!(
                "P4.2 a set told by a renewal's reply: with its pushes refused, {detail}; an \
                 executor adopts the set of its renewal's reply"
            ));
        }
        self.admin.undrain(&x1).await.map_err(kit_error)?;
        self.settle(&[0, 1, 2], "x1 undrained: x0 hears only its renewals")
            .await?;
        let x0 = self.process(0);
        x0.push_proxy
            .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, false);
        x0.push_proxy
            .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, false);
        Ok(())
    }

    /// P4.4: x0's renewals are answered `404 unknown_executor` by its call proxy, as managers
    /// that forgot it would answer. x0 must stop admitting every shard at once (its stop lines
    /// stamped no later than [`FORGET_SLACK`] after the reply was written) and register again,
    /// under a new incarnation and a new credential, within [`REREGISTER_BOUND`]. The managers
    /// still know the old executor: the kit deregisters it once its lease ran out.
    pub(super) async fn unknown_executor_step(&mut self) -> Result<(), RunError> {
        let id = self.executor_id(0).await?;
        let told_at_ns = self.tell_unknown_executor(&id).await?;
        let waited_by = Instant::now() + REREGISTER_BOUND;
        let registered = loop {
            if let Some(body) = self.process(0).call_proxy.captured_body() {
                break Registration::parse(&body);
            }
            if Instant::now() >= waited_by {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Every stop it will stamp for the old executor's shards is written by now.
        let judge_at_ns = told_at_ns + nanos(FORGET_SLACK) + nanos(Duration::from_millis(100));
        let now_ns = monotonic_now_ns();
        if judge_at_ns > now_ns {
            tokio::time::sleep(Duration::from_nanos(judge_at_ns - now_ns)).await;
        }
        self.judge_stops_once_forgotten(&id, told_at_ns)?;
        if self.judge_registration_again(&id, registered.as_ref()) {
            self.replace(0).await?;
        }
        // The managers still hold the old executor until its lease runs out; then it goes.
        let waited_by = Instant::now() + SETTLE_BOUND;
        loop {
            match self.admin.deregister(&id, None).await {
                Ok(()) => return Ok(()),
                Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => return Ok(()),
                Err(error) if Instant::now() >= waited_by => {
                    return Err(RunError::Kit(format!(
                        "the old executor {id} was not removed within {SETTLE_BOUND:?}: {error}"
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// Arms x0's call proxy to answer its renewals `404 unknown_executor` (and to capture its
    /// next registration): when the first such answer was written.
    pub(super) async fn tell_unknown_executor(&mut self, id: &str) -> Result<u64, RunError> {
        let renew_path = format!("/v1/executors/{id}/renew");
        let label = format!("POST {renew_path}");
        let x0 = self.process(0);
        // Earlier steps refused the same path as unavailable: only what this step tells counts.
        let earlier_refusals = x0.call_proxy.stats().refusals.len();
        x0.call_proxy.capture_next("POST", REGISTER_PATH);
        x0.call_proxy.answer_requests(
            "POST",
            &renew_path,
            PathMatch::Exact,
            ErrorCode::UnknownExecutor,
        );
        let waited_by = Instant::now() + KIT_LEASE * 2;
        loop {
            let told = self
                .process(0)
                .call_proxy
                .stats()
                .refusals
                .iter()
                .skip(earlier_refusals)
                .find_map(|refusal| told_at_ns(refusal, &label, ErrorCode::UnknownExecutor));
            if let Some(at_ns) = told {
                return Ok(at_ns);
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "x0 sent no renewal within {:?} (P3.5)",
                    KIT_LEASE * 2
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A finding for every shard x0 admitted as `id` when it was told `unknown_executor` (at
    /// `told_at_ns`) and did not stop within [`FORGET_SLACK`].
    pub(super) fn judge_stops_once_forgotten(
        &mut self,
        id: &str,
        told_at_ns: u64,
    ) -> Result<(), RunError> {
        let intervals = self.process(0).intervals().map_err(|detail| {
            RunError::Executor(format!(
                "an admission log is not in the format of §9: {detail}"
            ))
        })?;
        let late: Vec<String> = intervals
            .iter()
            .filter(|interval| {
                interval.executor_id == id
                    && interval.start_ns <= told_at_ns
                    && interval
                        .end_ns
                        .is_none_or(|end| end > told_at_ns + nanos(FORGET_SLACK))
            })
            .map(|interval| match interval.end_ns {
                Some(end) => format!(
                    "{}@{} stopped {} ms after",
                    interval.shard,
                    interval.epoch,
                    (end - told_at_ns) / 1_000_000
                ),
                None => format!("{}@{} still admitted", interval.shard, interval.epoch),
            })
            .collect();
        if !late.is_empty() {
            let name = self.process(0).name.clone();
            self.findings.push(format!(
                "P4.4 unknown_executor: {name} ({id}) was answered 404 unknown_executor to a \
                 renewal and did not stop admitting at once: {} (an executor the managers no \
                 longer know stops every shard at once)",
                late.join(", ")
            ));
        }
        Ok(())
    }

    /// Findings for x0's registration after it was forgotten (`registered`, if it came): none,
    /// under its old incarnation, or with its old credential. Whether x0 is stranded (it will
    /// not be known again by itself, so the kit replaces it).
    pub(super) fn judge_registration_again(
        &mut self,
        id: &str,
        registered: Option<&Registration>,
    ) -> bool {
        let name = self.process(0).name.clone();
        let before = self.process(0).registered_as.clone();
        match (registered, &before) {
            (None, _) => {
                self.findings.push(format!(
                    "P4.4 unknown_executor: {name} ({id}) was answered 404 unknown_executor to a \
                     renewal and did not register again within {REREGISTER_BOUND:?}"
                ));
                true
            }
            (Some(now), Some(before)) if now.incarnation == before.incarnation => {
                self.findings.push(format!(
                    "P4.4 unknown_executor: {name} registered again under its old incarnation \
                     {} (a new incarnation is due, or the managers answer with the executor \
                     they forgot)",
                    now.incarnation
                ));
                true
            }
            (Some(now), Some(before))
                if now.credential.is_some() && now.credential == before.credential =>
            {
                self.findings.push(format!(
                    "P4.4 unknown_executor: {name} registered again with its old credential (a \
                     new credential is due with the new incarnation, P13.4)"
                ));
                false
            }
            _ => false,
        }
    }

    /// P4.1, disowned sets: x1 is pushed its own set at a revision [`FORGED_AHEAD`] above the
    /// cluster's, which a correct executor applies (a push at or above its applied revision);
    /// every grant after it is below it, and disowns it: the executor adopts the grant's set
    /// and revision. Two renewals later x2 is drained: x1 must admit the shards it is routed.
    /// One that took the grants as stale refuses every push and grant from then on.
    pub(super) async fn forged_revision_step(&mut self) -> Result<(), RunError> {
        let id = self.executor_id(1).await?;
        let (forged, cluster_revision) = self.push_own_set_ahead(&id).await?;
        self.two_renewals_answered(&id).await?;
        let x2 = self.executor_id(2).await?;
        self.admin.drain(&x2).await.map_err(kit_error)?;
        let missed = self
            .admits_what_is_routed(&[0, 1], 1, "x2 drained after a forged revision at x1")
            .await?;
        if let Some(detail) = missed {
            let name = self.process(1).name.clone();
            self.findings.push(format!(
                "P4.1 disowned sets: after a push of its own set at revision {forged}, above the \
                 cluster's {}, and two renewals whose grants disowned it, {detail}; {name} took \
                 the grants as stale where it adopts their set and revision",
                cluster_revision
            ));
            self.replace(1).await?;
        }
        self.undrain_if_registered(&x2).await?;
        Ok(())
    }

    /// Pushes x1 (`id`) its own set at [`FORGED_AHEAD`] above the cluster's revision, which it
    /// must accept; returns the forged revision and the cluster's.
    async fn push_own_set_ahead(&mut self, id: &str) -> Result<(u64, u64), RunError> {
        let view = self.admin.executor(id, true).await.map_err(kit_error)?;
        let table = self.admin.routing(true).await.map_err(kit_error)?;
        let forged = table.revision + FORGED_AHEAD;
        let shards: Vec<serde_json::Value> = view
            .shards
            .iter()
            .map(|held| serde_json::json!({"shard": held.shard, "epoch": held.epoch}))
            .collect();
        let body = serde_json::json!({
            "executor_id": id,
            "revision": forged,
            "shard_count": table.shard_count,
            "shards": shards,
        });
        let url = format!("{}/v1/assignment", self.process(1).advertise);
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(kit_error)?;
        let status = http
            .put(&url)
            .json(&body)
            .send()
            .await
            .map(|reply| reply.status())
            .map_err(|error| {
                RunError::Executor(format!("x1 did not answer a push of its own set: {error}"))
            })?;
        if !status.is_success() {
            return Err(RunError::Executor(format!(
                "x1 answered {status} to a push of its own set at revision {forged}, above its \
                 applied revision (P4.1: a set at or above it applies)"
            )));
        }
        Ok((forged, table.revision))
    }

    /// Waits until x1 (`id`) has two more renewals answered at its call proxy: the second was
    /// answered after the push that left after it was applied.
    async fn two_renewals_answered(&mut self, id: &str) -> Result<(), RunError> {
        let renew_label = format!("POST /v1/executors/{id}/renew");
        let renewed = |run: &mut Self| {
            run.process(1)
                .call_proxy
                .stats()
                .answered
                .get(&renew_label)
                .copied()
                .unwrap_or(0)
        };
        let renewals = renewed(self) + 2;
        let waited_by = Instant::now() + KIT_LEASE * 3;
        while renewed(self) < renewals {
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "x1 had fewer than two renewals answered in {:?} (P3.5)",
                    KIT_LEASE * 3
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}
