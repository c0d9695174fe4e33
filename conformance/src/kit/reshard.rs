//! Resharding (PROTOCOL §20, script step 14): the kit's namespace split from [`KIT_SHARDS`] to
//! twice as many while x0 is drained (the children stay with their parents' owners), x0
//! undrained so the plans hand children to it, then merged back. An executor must switch
//! admission from a parent to its children, and back, in the one receipt of the set of the new
//! generation (P20.3): one that keeps admitting a parent while a child of it is admitted
//! elsewhere admits keys another executor holds, which the check of the logs per key finds (I1).

use leasehold_api::client::ClientError;
use leasehold_api::wire::{ReshardProgress, DEFAULT_NAMESPACE, RESHARD_SCHEMA};

use super::*;

/// The rule the managers name when they refuse a reshard because an executor did not state
/// `follows_generations` at registration.
const NOT_FOLLOWING_RULE: &str = "P20.3";

/// What the kit's reshard request came to.
enum Asked {
    /// Accepted, or already the count asked.
    Accepted,
    /// Refused because an executor does not follow a change of layout: the managers' detail.
    NotFollowing(String),
}

impl Run<'_> {
    /// Script step 14: a split while x0 is drained (step 13 left it so), the children handed to
    /// x0 once it is undrained, then a merge back to [`KIT_SHARDS`]; after each change the kit
    /// waits until the namespace shows the new generation with no reshard under way, then until
    /// the shards settle as after every step. I1 and I2 are judged per key over every layout at
    /// the end ([`Run::check`]). A refusal naming P20.3 (an executor registered without
    /// `follows_generations`) is the step's finding, and the script goes on without the reshard.
    pub(super) async fn reshard_phase(&mut self, all: &[usize]) -> Result<(), RunError> {
        Self::step("a split");
        self.wait_for_cluster_version(RESHARD_SCHEMA).await?;
        let owners: Vec<usize> = all.iter().copied().filter(|&slot| slot != 0).collect();
        if !self.reshard(KIT_SHARDS * 2, 1, &owners).await? {
            return Ok(());
        }

        Self::step("the split's children handed on");
        let x0 = self.executor_id(0).await?;
        self.admin.undrain(&x0).await.map_err(kit_error)?;
        self.settle(all, "x0 undrained: the split's children spread")
            .await?;

        Self::step("a merge");
        self.reshard(KIT_SHARDS, 2, all).await?;
        Ok(())
    }

    /// Asks for `shard_count`, waits until the namespace is of it at `generation` with no reshard
    /// under way, then until the shards settle on `holders`. `false` when the managers refused it
    /// for an executor that does not follow a change of layout (a finding).
    async fn reshard(
        &mut self,
        shard_count: u32,
        generation: u64,
        holders: &[usize],
    ) -> Result<bool, RunError> {
        let what = format!("resharded to {shard_count} (generation {generation})");
        let started = Instant::now();
        if let Asked::NotFollowing(detail) = self.ask_reshard(shard_count).await? {
            self.findings.push(format!(
                "{NOT_FOLLOWING_RULE} follows_generations: the managers refused to reshard the \
                 kit's namespace to {shard_count} shards because an executor in it does not \
                 follow a change of layout ({detail}); an executor states \
                 \"follows_generations\": true in its registration to managers stating cluster \
                 version {RESHARD_SCHEMA} and switches admission to a set's new layout in its \
                 one receipt"
            ));
            return Ok(false);
        }
        self.resharded(shard_count, generation, &what).await?;
        self.shard_count = shard_count;
        self.steps.push((what.clone(), started.elapsed()));
        self.settle(holders, &format!("{what}: settled")).await?;
        Ok(true)
    }

    /// `POST /v1/namespaces/{name}/reshard`, retried within the settle bound while the
    /// managers refuse it for anything but an executor that does not follow a change of layout
    /// (a leader elected meanwhile may not state the cluster version yet).
    async fn ask_reshard(&self, shard_count: u32) -> Result<Asked, RunError> {
        let waited_by = Instant::now() + self.settle_bound();
        loop {
            let error = match self
                .admin
                .reshard_namespace(DEFAULT_NAMESPACE, shard_count)
                .await
            {
                Ok(_) => return Ok(Asked::Accepted),
                Err(error) => error,
            };
            if let Some(detail) = not_following(&error) {
                return Ok(Asked::NotFollowing(detail));
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Kit(format!(
                    "the managers did not accept a reshard of the kit's namespace to \
                     {shard_count} shards within {:?}: {error}",
                    self.settle_bound()
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until `GET /v1/namespaces/default` shows `shard_count` at `generation` and no
    /// reshard under way (P20.1).
    async fn resharded(
        &self,
        shard_count: u32,
        generation: u64,
        what: &str,
    ) -> Result<(), RunError> {
        let bound = self.settle_bound();
        let waited_by = Instant::now() + bound;
        let mut last = String::new();
        while Instant::now() < waited_by {
            match self.admin.namespace(DEFAULT_NAMESPACE).await {
                Ok(view) => {
                    if view.shard_count == shard_count
                        && view.generation == generation
                        && view.reshard.is_none()
                    {
                        return Ok(());
                    }
                    last = describe_layout(view.shard_count, view.generation, &view.reshard);
                }
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(RunError::Executor(format!(
            "{what}: timed out after {bound:?} waiting for the kit's namespace to show \
             {shard_count} shards at generation {generation} with no reshard under way ({last}); \
             a split waits for no handoff in flight, a merge for each pair on one executor \
             (P20.2), which executors that do not take the shards routed to them hold back"
        )))
    }
}

/// The managers' detail when `error` is their refusal of a reshard for an executor that does not
/// follow a change of layout.
fn not_following(error: &ClientError) -> Option<String> {
    match error {
        ClientError::Problem(problem)
            if problem.code == ErrorCode::Conflict
                && problem.detail.contains(NOT_FOLLOWING_RULE) =>
        {
            Some(problem.detail.clone())
        }
        _ => None,
    }
}

/// A namespace's layout as the kit last read it, for a wait that ran out.
fn describe_layout(shard_count: u32, generation: u64, reshard: &Option<ReshardProgress>) -> String {
    match reshard {
        Some(progress) => format!(
            "{shard_count} shards at generation {generation}, a {} to {} under way waiting on {}",
            progress.kind.as_str(),
            progress.shard_count,
            progress.waiting_on
        ),
        None => format!("{shard_count} shards at generation {generation}, no reshard under way"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_api::problem::Problem;
    use leasehold_api::wire::ReshardKind;

    fn refusal(code: ErrorCode, detail: &str) -> ClientError {
        ClientError::Problem(Problem::new(code, detail))
    }

    #[test]
    fn p20_3_only_a_conflict_naming_the_rule_is_an_executor_not_following() {
        let detail = "1 executor(s) of namespace default do not follow a change of layout \
                      (ex-3): upgrade them, or remove them, before resharding (P20.3)";
        assert_eq!(
            not_following(&refusal(ErrorCode::Conflict, detail)).as_deref(),
            Some(detail)
        );
        // Another reshard under way, or a cluster below the schema: retried, not a finding.
        assert_eq!(
            not_following(&refusal(
                ErrorCode::Conflict,
                "another reshard of default is under way (P20.1)"
            )),
            None
        );
        assert_eq!(
            not_following(&refusal(ErrorCode::Unavailable, "(P20.3)")),
            None
        );
        assert_eq!(
            not_following(&ClientError::Transport("refused".into())),
            None
        );
    }

    #[test]
    fn a_layout_under_way_names_its_kind_target_and_what_it_waits_on() {
        let progress = ReshardProgress {
            kind: ReshardKind::Merge,
            shard_count: 16,
            requested_revision: 90,
            waiting_on: 3,
        };
        assert_eq!(
            describe_layout(32, 1, &Some(progress)),
            "32 shards at generation 1, a merge to 16 under way waiting on 3"
        );
        assert_eq!(
            describe_layout(16, 2, &None),
            "16 shards at generation 2, no reshard under way"
        );
    }
}
