//! The stale-grant step (P3.3): a renewal reply held back past a newer set must not give the
//! executor back shards it was told to release.

use super::*;

impl Run<'_> {
    /// The stale-grant step (script step 8), tried until a grant did arrive stale.
    pub(super) async fn stale_grant_step(&mut self) -> Result<(), RunError> {
        let mut why = String::new();
        for attempt in 1..=STALE_GRANT_ATTEMPTS {
            // The id the attempt refused renewals under: x0 may be reaped during it (a refused
            // renewal past its lease) and register anew under another.
            let id = self.executor_id(0).await?;
            let outcome = self.stale_grant_attempt(&id).await;
            let x0 = self.process(0);
            x0.push_proxy
                .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, false);
            x0.call_proxy.refuse_requests(
                "POST",
                &format!("/v1/executors/{id}/renew"),
                PathMatch::Exact,
                false,
            );
            x0.call_proxy.release_held_reply();
            match outcome? {
                StepAttempt::Judged => return Ok(()),
                StepAttempt::Inconclusive(detail) => {
                    eprintln!("conformance: stale grant, attempt {attempt}: {detail}");
                    why = detail;
                    // Whatever the attempt left drained or refused settles before the next.
                    self.undrain_if_registered(&id).await?;
                    self.settle(&[0, 1, 2], "x0 back before another attempt")
                        .await?;
                }
            }
        }
        Err(RunError::Executor(format!(
            "the kit could not make a grant arrive stale at x0 in {STALE_GRANT_ATTEMPTS} \
             attempts, so P4.1's stale-grant rule went unchecked: {why}"
        )))
    }

    /// One attempt: x0's revokes refused, x0 drained, the reply to its next renewal held while
    /// it is undrained and pushed its set again, then delivered (stale), x0's renewals refused
    /// until the lease it held before that grant ran out; then its admission log is judged.
    pub(super) async fn stale_grant_attempt(&mut self, id: &str) -> Result<StepAttempt, RunError> {
        use StepAttempt::Inconclusive;
        let renew_path = format!("/v1/executors/{id}/renew");
        let held = self.hold_renewal_after_drain(id, &renew_path).await?;
        let Some(grant) = held.reply_body.as_deref().and_then(GrantSet::parse) else {
            return Ok(Inconclusive(format!(
                "the held reply to x0's renewal is not a grant ({:?})",
                held.outcome
            )));
        };
        let pushes_before = self.answered(0, STALE_GRANT_PUSH);
        self.undrain_if_registered(id).await?;
        if let Some(why) = self.newer_push_missing(&grant, pushes_before).await {
            return Ok(Inconclusive(why));
        }
        // x0 keeps the lease the stale grant gives it: no renewal gets through until the lease
        // it held before has run out.
        self.process(0)
            .call_proxy
            .refuse_requests("POST", &renew_path, PathMatch::Exact, true);
        self.process(0).call_proxy.release_held_reply();
        let delivered_at_ns = match self.held_reply_delivered().await {
            Ok(at_ns) => at_ns,
            Err(why) => return Ok(Inconclusive(why)),
        };
        let Some(previous_ns) = held.previous_arrival_ns else {
            return Ok(Inconclusive(
                "x0 had not renewed before the held renewal".into(),
            ));
        };
        // The lease x0 held before the stale grant was earned by a request that left no later
        // than the previous renewal arrived, and told at most the managers' lease.
        let earlier_lease_end_ns = previous_ns + nanos(KIT_LEASE);
        let judge_at_ns = earlier_lease_end_ns + nanos(STALE_GRANT_MARGIN);
        let now_ns = monotonic_now_ns();
        if judge_at_ns > now_ns {
            tokio::time::sleep(Duration::from_nanos(judge_at_ns - now_ns)).await;
        }
        let stale = StaleGrant {
            grant,
            held_arrival_ns: held.request_arrival_ns,
            delivered_at_ns,
            earlier_lease_end_ns,
        };
        self.judge_stale_grant(id, &stale)
    }

    /// x0's revokes refused and x0 drained, then the reply to its next renewal held: that reply,
    /// once upstream answered it (or the caller left).
    pub(super) async fn hold_renewal_after_drain(
        &mut self,
        id: &str,
        renew_path: &str,
    ) -> Result<HeldReply, RunError> {
        self.process(0)
            .push_proxy
            .refuse_requests("POST", "/v1/revoke", PathMatch::Exact, true);
        self.admin.drain(id).await.map_err(kit_error)?;
        // Armed after the drain committed: the renewal it holds is answered at a revision
        // whose set for x0 lists none of the shards x0 still admits.
        self.process(0)
            .call_proxy
            .hold_next_reply("POST", renew_path, PathMatch::Exact);
        let waited_by = Instant::now() + STALE_GRANT_WAIT;
        loop {
            let held = self.process(0).call_proxy.held_reply();
            if let Some(held) = held.filter(|h| h.reply_body.is_some() || h.outcome.is_some()) {
                return Ok(held);
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "timed out after {STALE_GRANT_WAIT:?} waiting for x0 to renew its lease \
                     (P3.5: a renewal once a third of the lease has passed)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until x0 was pushed a set newer than `grant` (more pushes answered than
    /// `pushes_before`); why the attempt cannot go on, if it cannot.
    pub(super) async fn newer_push_missing(
        &mut self,
        grant: &GrantSet,
        pushes_before: usize,
    ) -> Option<String> {
        let waited_by = Instant::now() + STALE_GRANT_WAIT;
        loop {
            let held = self.process(0).call_proxy.held_reply().unwrap_or_default();
            if let Some(HoldOutcome::CallerLeft { at_ns }) = held.outcome {
                return Some(format!(
                    "x0 closed its renewal {} ms after sending it, before the newer push \
                     reached it: the step needs an executor that waits at least 2 s for a reply",
                    at_ns.saturating_sub(held.request_arrival_ns) / 1_000_000
                ));
            }
            let stats = self.process(0).push_proxy.stats();
            let newer_push = stats.answered.get(STALE_GRANT_PUSH).copied().unwrap_or(0)
                > pushes_before
                && stats
                    .last_answered_body
                    .get(STALE_GRANT_PUSH)
                    .and_then(|body| GrantSet::parse(body))
                    .is_some_and(|push| push.revision > grant.revision);
            if newer_push {
                return None;
            }
            if Instant::now() >= waited_by {
                return Some(format!(
                    "no push above revision {} reached x0 within {STALE_GRANT_WAIT:?} of its \
                     undrain",
                    grant.revision
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// When the released reply reached x0, or why it did not.
    pub(super) async fn held_reply_delivered(&mut self) -> Result<u64, String> {
        let waited_by = Instant::now() + Duration::from_secs(2);
        loop {
            let held = self.process(0).call_proxy.held_reply().unwrap_or_default();
            match held.outcome {
                Some(HoldOutcome::Delivered { at_ns }) => return Ok(at_ns),
                Some(other) => return Err(format!("the stale grant did not reach x0: {other:?}")),
                None if Instant::now() >= waited_by => {
                    return Err("the held reply was not released".into())
                }
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// x0's admission log against the stale grant: a finding for each shard it admitted from
    /// before the held renewal left until the grant arrived, at an epoch the grant does not
    /// list (gained by a delivery at or below its revision), and kept past the end of the lease
    /// it held before that grant.
    fn judge_stale_grant(&mut self, id: &str, stale: &StaleGrant) -> Result<StepAttempt, RunError> {
        let intervals = self.process(0).intervals().map_err(|detail| {
            RunError::Executor(format!(
                "an admission log is not in the format of §9: {detail}"
            ))
        })?;
        let to_drop: Vec<&AdmissionInterval> = intervals
            .iter()
            .filter(|interval| {
                interval.executor_id == id
                    && interval.start_ns <= stale.held_arrival_ns
                    && interval
                        .end_ns
                        .is_none_or(|end| end > stale.delivered_at_ns)
                    && !stale
                        .grant
                        .shards
                        .contains(&(interval.shard, interval.epoch))
            })
            .collect();
        if to_drop.is_empty() {
            return Ok(StepAttempt::Inconclusive(
                "x0 admitted no shard the stale grant left out when it arrived".into(),
            ));
        }
        let name = self.process(0).name.clone();
        let lease_end_ns = stale.earlier_lease_end_ns;
        for interval in to_drop {
            if interval.end_ns.is_none_or(|end| end > lease_end_ns) {
                let end = interval.end_ns.map_or_else(
                    || {
                        format!(
                            "was still admitting it {} ms after",
                            (monotonic_now_ns() - lease_end_ns) / 1_000_000
                        )
                    },
                    |end| format!("stopped it {} ms after", (end - lease_end_ns) / 1_000_000),
                );
                self.findings.push(format!(
                    "P4.1 stale grant: {name} ({id}) admitted shard {} (epoch {}) since before a \
                     renewal whose grant, at revision {}, did not list it and arrived after a \
                     push of a newer revision; it {end} the end of the lease it held before that \
                     grant (an executor must drop such shards before the stale grant moves its \
                     lease)",
                    interval.shard, interval.epoch, stale.grant.revision
                ));
            }
        }
        Ok(StepAttempt::Judged)
    }

    /// Undrains `id` unless the managers no longer know it (reaped: its process registers
    /// again, undrained).
    pub(super) async fn undrain_if_registered(&self, id: &str) -> Result<(), RunError> {
        match self.admin.undrain(id).await {
            Ok(_) => Ok(()),
            Err(error) if error.code() == Some(ErrorCode::UnknownExecutor) => {
                eprintln!("conformance: {id} was reaped before its undrain");
                Ok(())
            }
            Err(error) => Err(kit_error(error)),
        }
    }
}

/// A stale grant as x0 got it, for judging x0's admissions.
struct StaleGrant {
    pub(super) grant: GrantSet,
    /// When the renewal it answers arrived.
    pub(super) held_arrival_ns: u64,
    /// When it reached x0.
    pub(super) delivered_at_ns: u64,
    /// When the lease x0 held before it ended at the latest.
    pub(super) earlier_lease_end_ns: u64,
}
