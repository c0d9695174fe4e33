//! What the kit waits for and reads: settled sets, names, admissions, routes and ids.

use super::*;

impl Run<'_> {
    /// Waits until every shard is routed to a running executor of `holders` (slots) and each
    /// of them holds at least one; marks who held shards.
    pub(super) async fn settle(&mut self, holders: &[usize], what: &str) -> Result<(), RunError> {
        let bound = self.settle_bound();
        let Err(last) = self
            .settle_by(holders, what, Instant::now() + bound)
            .await?
        else {
            return Ok(());
        };
        Err(RunError::Executor(format!(
            "{what}: timed out after {bound:?} waiting for every shard to be routed to one \
             of {} and each of them to admit a shard by its admission log ({last}); see the \
             executors' logs in {}",
            self.names(holders).join(", "),
            self.config.dir.display()
        )))
    }

    /// [`Run::settle`] until `deadline`: `Ok(Err(last))` when it passed unsettled, with what
    /// was last seen.
    pub(super) async fn settle_by(
        &mut self,
        holders: &[usize],
        what: &str,
        deadline: Instant,
    ) -> Result<Result<(), String>, RunError> {
        let started = Instant::now();
        let addresses: BTreeMap<String, usize> = holders
            .iter()
            .map(|&slot| (self.process(slot).advertise.clone(), self.slots[&slot]))
            .collect();
        let mut last = String::new();
        while Instant::now() < deadline {
            for &slot in holders {
                if !self.process(slot).is_running() {
                    let name = self.process(slot).name.clone();
                    return Err(RunError::Executor(format!(
                        "{name} exited on its own ({what})"
                    )));
                }
            }
            match self.routed_to(&addresses).await {
                Ok(owners) => {
                    for index in &owners {
                        self.processes[*index].held_shards = true;
                    }
                    let not_admitting = if owners.len() == holders.len() {
                        self.not_admitting(holders)?
                    } else {
                        Vec::new()
                    };
                    if owners.len() == holders.len() && not_admitting.is_empty() {
                        self.steps.push((what.to_owned(), started.elapsed()));
                        eprintln!(
                            "conformance: {what}: settled in {} ms",
                            started.elapsed().as_millis()
                        );
                        return Ok(Ok(()));
                    }
                    last = if not_admitting.is_empty() {
                        format!(
                            "{} of {} executors are routed shards",
                            owners.len(),
                            holders.len()
                        )
                    } else {
                        format!(
                            "every executor is routed shards, but the admission log of {} shows \
                             none admitted",
                            not_admitting.join(", ")
                        )
                    };
                }
                Err(detail) => last = detail,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Err(last))
    }

    /// [`SETTLE_BOUND`], or [`SETTLE_BOUND_FAILED`] once a step judged a rule broken.
    pub(super) fn settle_bound(&self) -> Duration {
        if self.findings.is_empty() {
            SETTLE_BOUND
        } else {
            SETTLE_BOUND_FAILED
        }
    }

    pub(super) fn names(&mut self, slots: &[usize]) -> Vec<String> {
        slots
            .iter()
            .map(|&slot| self.process(slot).name.clone())
            .collect()
    }

    /// The names of the processes of `slots` whose admission log shows no shard admitted now;
    /// a log not in the format of §9 fails the run.
    pub(super) fn not_admitting(&mut self, slots: &[usize]) -> Result<Vec<String>, RunError> {
        let mut names = Vec::new();
        for &slot in slots {
            let process = self.process(slot);
            let admitting = process.admitting_count().map_err(|detail| {
                RunError::Executor(format!(
                    "an admission log is not in the format of §9: {detail}"
                ))
            })?;
            if admitting == 0 {
                names.push(process.name.clone());
            }
        }
        Ok(names)
    }

    /// The processes (indices) the routing table sends shards to, if every shard is routed to
    /// one of `addresses`.
    pub(super) async fn routed_to(
        &self,
        addresses: &BTreeMap<String, usize>,
    ) -> Result<BTreeSet<usize>, String> {
        let table = self.admin.routing(false).await.map_err(|e| e.to_string())?;
        let mut owners = BTreeSet::new();
        for route in &table.routes {
            let address = route
                .address
                .as_ref()
                .ok_or(format!("shard {} is between owners", route.shard))?;
            let index = addresses.get(address).ok_or(format!(
                "shard {} is routed to {address}, not a running executor",
                route.shard
            ))?;
            owners.insert(*index);
        }
        if table.routes.len() != self.shard_count as usize {
            return Err(format!("{} routes", table.routes.len()));
        }
        Ok(owners)
    }

    /// The executor id the managers know `slot`'s process by (its advertised address); a
    /// process reaped by a step registers anew at its next renewal, so this waits for that.
    pub(super) async fn executor_id(&mut self, slot: usize) -> Result<String, RunError> {
        let advertise = self.process(slot).advertise.clone();
        let bound = self.settle_bound();
        let waited_by = Instant::now() + bound;
        loop {
            let views = self.admin.executors(false).await.map_err(kit_error)?;
            if let Some(view) = views.into_iter().find(|view| view.address == advertise) {
                return Ok(view.executor_id);
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Executor(format!(
                    "no executor registered as {advertise} within {bound:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Requests of `label` the push proxy of `slot` delivered and had answered.
    pub(super) fn answered(&mut self, slot: usize, label: &str) -> usize {
        self.process(slot)
            .push_proxy
            .stats()
            .answered
            .get(label)
            .copied()
            .unwrap_or(0)
    }

    /// The managers' set for executor `id`, `(shard, epoch)`, read from the leader.
    pub(super) async fn managers_set(&self, id: &str) -> Result<BTreeSet<(u32, u64)>, RunError> {
        let view = self.admin.executor(id, true).await.map_err(kit_error)?;
        Ok(view
            .shards
            .iter()
            .map(|held| (held.shard, held.epoch))
            .collect())
    }
}
