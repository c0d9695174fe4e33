//! The revoke-replay step (P4.1): a push held back and delivered again after the set moved on
//! must not bring back a shard the executor gave up.

use super::*;

impl Run<'_> {
    /// The revoke-replay step (script step 3), tried until the copy reached x0 while the lease
    /// it held was certainly live.
    pub(super) async fn revoke_replay_step(&mut self) -> Result<(), RunError> {
        let all: Vec<usize> = (0..EXECUTORS).collect();
        let mut why = String::new();
        for attempt in 1..=REVOKE_REPLAY_ATTEMPTS {
            let (x0, x1) = (self.executor_id(0).await?, self.executor_id(1).await?);
            let outcome = self.revoke_replay_attempt(&x0, &x1).await;
            let x0_process = self.process(0);
            x0_process.push_proxy.stop_capturing();
            x0_process.call_proxy.refuse_requests(
                "POST",
                &format!("/v1/executors/{x0}/renew"),
                PathMatch::Exact,
                false,
            );
            x0_process
                .push_proxy
                .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, false);
            let outcome = outcome?;
            // Long enough for a renewal to follow the stale push.
            tokio::time::sleep(KIT_LEASE / 2).await;
            // x0 may have been reaped while its renewals were refused; it then registers anew,
            // undrained.
            self.undrain_if_registered(&x0).await?;
            self.undrain_if_registered(&x1).await?;
            self.settle(&all, "both undrained").await?;
            match outcome {
                StepAttempt::Judged => return Ok(()),
                StepAttempt::Inconclusive(detail) => {
                    eprintln!("conformance: push delivered again, attempt {attempt}: {detail}");
                    why = detail;
                }
            }
        }
        Err(RunError::Executor(format!(
            "the kit could not deliver a push again to x0 while its lease was live in \
             {REVOKE_REPLAY_ATTEMPTS} attempts, so P4.1's rule that an applied revoke raises the \
             applied revision went unchecked: {why}"
        )))
    }

    /// One attempt: x0 gains some of x1's shards by a push, of which the proxy keeps a copy; x0
    /// is then drained and its shards go to x2; the copy is delivered again. It is stale (P4.1):
    /// applying it admits shards another executor holds, which the check finds (I1).
    ///
    /// x0's renewals are refused from the first push kept until after the copy is delivered
    /// again, so no grant's set is applied in between: only the revoke that drained it makes the
    /// copy stale (P4.1: an applied revoke raises the applied revision). The copy judges nothing
    /// unless it arrives while the lease x0 earned before the refusals is live (an executor
    /// without a lease admits nothing, stale copy or not) and after x0 answered its revoke.
    pub(super) async fn revoke_replay_attempt(
        &mut self,
        x0: &str,
        x1: &str,
    ) -> Result<StepAttempt, RunError> {
        use StepAttempt::Inconclusive;
        let x0_renew = format!("/v1/executors/{x0}/renew");
        let renew_label = format!("POST {x0_renew}");
        let revoke_label = "POST /v1/revoke";
        // Refused before anything is pushed, so that a renewal in flight is answered before
        // the push whose copy is kept rather than after it.
        self.process(0)
            .call_proxy
            .refuse_requests("POST", &x0_renew, PathMatch::Exact, true);
        // The proxy records an arrival and decides on a refusal under one lock: the last
        // renewal that arrived before this was let through, and the lease it earned began no
        // later than its arrival.
        let Some(last_renewal_ns) = self
            .process(0)
            .call_proxy
            .stats()
            .last_arrival_ns
            .get(&renew_label)
            .copied()
        else {
            return Ok(Inconclusive("x0 had not renewed before the step".into()));
        };
        // Everything up to the copy's delivery must be done while that lease certainly holds.
        let lease_left = (nanos(KIT_LEASE) + last_renewal_ns)
            .saturating_sub(monotonic_now_ns() + nanos(REVOKE_REPLAY_MARGIN));
        let deadline = Instant::now() + Duration::from_nanos(lease_left);
        let out_of_lease = |what: &str| {
            Ok(Inconclusive(format!(
                "{what} before the lease x0 earned by its last renewal let through might have \
                 run out"
            )))
        };
        if let Some(what) = self.drain_x1_keeping_a_push(x1, deadline).await? {
            return out_of_lease(&what);
        }
        let revokes_before = self.answered(0, revoke_label);
        if let Some(what) = self.drain_x0_until_x2_admits(x0, deadline).await? {
            return out_of_lease(&what);
        }
        let revoked = self.answered(0, revoke_label) > revokes_before;
        let (copy_revision, last_grant_revision, replayed_ns) =
            self.deliver_the_kept_push_again(&renew_label).await?;
        let race = ReplayRace {
            last_renewal_ns,
            last_grant_revision,
            copy_revision,
            revoked,
            replayed_ns,
        };
        Ok(race.unjudged().map_or(StepAttempt::Judged, Inconclusive))
    }

    /// x1 drained while every push to x0 is kept, until x0 gains shards; then later pushes to
    /// x0 refused, so the copy kept is of the last push before the drain. What did not happen
    /// by `deadline`, if anything.
    pub(super) async fn drain_x1_keeping_a_push(
        &mut self,
        x1: &str,
        deadline: Instant,
    ) -> Result<Option<String>, RunError> {
        self.process(0)
            .push_proxy
            .capture_each("PUT", "/v1/assignment");
        self.admin.drain(x1).await.map_err(kit_error)?;
        while !self.process(0).push_proxy.has_captured() {
            if Instant::now() >= deadline {
                return Ok(Some("x1 drained: no push reached x0".into()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let gained = self
            .settle_by(&[0, 2], "x1 drained: x0 gains shards", deadline)
            .await?;
        if let Err(last) = gained {
            return Ok(Some(format!("x1 drained: x0 gained no shards ({last})")));
        }
        // Later pushes to x0 are refused until the copy is delivered again: a set applied after
        // the drain would make the copy stale by itself, where only the revoke must (the copy's
        // delivery bypasses refusals).
        self.process(0).push_proxy.stop_capturing();
        self.process(0)
            .push_proxy
            .refuse_requests("PUT", "/v1/assignment", PathMatch::Exact, true);
        Ok(None)
    }

    /// x0 drained, until x2 admits every shard by its log, not only once the routing table
    /// names it (a copy applied before x2 admits x0's shards overlaps nothing). What did not
    /// happen by `deadline`, if anything.
    pub(super) async fn drain_x0_until_x2_admits(
        &mut self,
        x0: &str,
        deadline: Instant,
    ) -> Result<Option<String>, RunError> {
        self.admin.drain(x0).await.map_err(kit_error)?;
        loop {
            let x2_admits = self.process(2).admitting_count().map_err(|detail| {
                RunError::Executor(format!(
                    "an admission log is not in the format of §9: {detail}"
                ))
            })?;
            if x2_admits == KIT_SHARDS as usize {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Ok(Some(format!(
                    "x0 drained too: x2 admitted {x2_admits} of {KIT_SHARDS} shards"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Delivers the kept push to x0 again: its revision, the revision of the last grant x0 was
    /// answered (`renew_label`), and when the copy was answered (applied or refused).
    pub(super) async fn deliver_the_kept_push_again(
        &mut self,
        renew_label: &str,
    ) -> Result<(u64, Option<u64>, u64), RunError> {
        let copy_revision = self
            .process(0)
            .push_proxy
            .captured_body()
            .as_deref()
            .and_then(body_revision)
            .ok_or_else(|| RunError::Kit("the kept push to x0 has no revision".into()))?;
        let last_grant_revision = self
            .process(0)
            .call_proxy
            .stats()
            .last_reply_body
            .get(renew_label)
            .and_then(|body| body_revision(body));
        let replayed = self
            .process(0)
            .push_proxy
            .replay_captured()
            .await
            .map_err(|detail| RunError::Kit(format!("delivering a push again: {detail}")))?;
        let replayed_ns = monotonic_now_ns();
        if !replayed {
            return Err(RunError::Kit("the kept push to x0 was lost".into()));
        }
        Ok((copy_revision, last_grant_revision, replayed_ns))
    }
}

/// Whether anything answers HTTP at `listen` (`host:port`): any status will do.
/// What the revoke-replay step saw of x0 around the copy it delivered again.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReplayRace {
    /// When the last renewal let through before the refusals arrived (CLOCK_MONOTONIC ns).
    pub(super) last_renewal_ns: u64,
    /// The revision of the last grant a renewal of x0 was answered with, if any.
    pub(super) last_grant_revision: Option<u64>,
    /// The revision of the push kept and delivered again.
    pub(super) copy_revision: u64,
    /// Whether x0 answered the revoke of its drain.
    pub(super) revoked: bool,
    /// When the copy was answered.
    pub(super) replayed_ns: u64,
}

impl ReplayRace {
    /// Why the copy judges nothing (`None`: it judges). Only the revoke may make it stale:
    /// x0 answered that revoke, and no grant at a newer revision than the copy's reached x0
    /// (its set raises the applied revision by itself). And the lease x0 earned by its last
    /// renewal was still live, by [`REVOKE_REPLAY_MARGIN`], when the copy was answered: an
    /// executor without a lease admits nothing, stale copy or not.
    pub(super) fn unjudged(&self) -> Option<String> {
        if !self.revoked {
            return Some(
                "x0 answered no revoke for its drain before the copy (its lease ran out at the \
                 managers first)"
                    .into(),
            );
        }
        if let Some(grant) = self.last_grant_revision.filter(|&r| r > self.copy_revision) {
            return Some(format!(
                "x0's last renewal was answered at revision {grant}, above the copy's {}",
                self.copy_revision
            ));
        }
        let lease_live_until_ns = self.last_renewal_ns + nanos(KIT_LEASE);
        if self.replayed_ns + nanos(REVOKE_REPLAY_MARGIN) > lease_live_until_ns {
            return Some(format!(
                "the copy was answered {} ms after x0's last renewal let through, too late \
                 for the lease it earned ({} ms) to be certainly live",
                self.replayed_ns.saturating_sub(self.last_renewal_ns) / 1_000_000,
                KIT_LEASE.as_millis()
            ));
        }
        None
    }
}

/// The `revision` of a push's or a grant's body.
fn body_revision(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("revision")?
        .as_u64()
}
