//! The leader's term as simulated around the real cores: what a commit asks of placement, the
//! answers to callers, the step's writes in production's order and the delivery rounds.

use super::*;

impl World {
    /// What the leader's placement soft state takes from one of its commits, as the leader loop
    /// does: every renewal applied feeds the load tracker what it reported and the set it holds
    /// after the renewal (P15.1); a committed plan of its step charges the budget and starts the
    /// cooldown of its balance moves (P15.3, P15.4).
    pub(super) fn placement_after_commit(
        &mut self,
        manager: usize,
        proposal: &Proposal,
        outcome: &Outcome,
        leaving: Vec<Option<String>>,
    ) {
        if self.leader.as_ref().is_none_or(|l| l.manager != manager) {
            return;
        }
        match (&proposal.command, &proposal.reply_to, outcome) {
            (
                Command::Renew { renewals, .. },
                ReplyTo::Renew(renewers),
                Outcome::Renewed { results, .. },
            ) => self.feed_load_trackers(renewals, renewers, results),
            (
                Command::Rebalance {
                    namespace, moves, ..
                },
                ReplyTo::StepWrite,
                Outcome::Rebalanced { .. },
            ) => self.charge_committed_plan(namespace, moves, leaving),
            _ => {}
        }
    }

    /// Feeds each renewal applied to its namespace's load tracker (P15.1), and checks the record.
    fn feed_load_trackers(
        &mut self,
        renewals: &[Renewal],
        renewers: &[Renewer],
        results: &[RenewResult],
    ) {
        let now_us = self.now_us;
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let state = &self.replicas[leader.manager];
        let liar = self.load.liar().and_then(|(slot, _)| {
            self.processes[slot]
                .as_ref()
                .and_then(|p| p.core.executor_id().map(str::to_owned))
        });
        for ((renewal, renewer), result) in renewals.iter().zip(renewers).zip(results) {
            if !matches!(result, RenewResult::Renewed { .. }) {
                continue;
            }
            // The report names the shards of the executor's own namespace, and goes to that
            // namespace's tracker (P18.1).
            let Some(space) = state
                .executor(&renewal.executor_id)
                .and_then(|executor| state.space(&executor.namespace))
            else {
                continue;
            };
            let namespace = space.name();
            let shard_count = space.config().map_or(0, |c| c.shard_count);
            let held: Vec<ShardId> = state
                .delivered_set(&renewal.executor_id)
                .into_iter()
                .map(|(shard, _)| shard)
                .collect();
            let loads = renewer.loads.as_deref();
            leader
                .steps
                .placement_mut()
                .space_mut(namespace)
                .tracker
                .record(
                    &renewal.executor_id,
                    shard_count,
                    &held,
                    loads,
                    MAX_SHARD_LOAD,
                );
            if let Some(recorded) = leader.steps.placement().space(namespace) {
                self.checker.after_record(
                    namespace,
                    &renewal.executor_id,
                    &held,
                    loads,
                    &recorded.tracker,
                    MAX_SHARD_LOAD,
                    now_us,
                );
            }
            if loads.is_some() && liar.as_deref() == Some(renewal.executor_id.as_str()) {
                self.coverage.lying_reports += 1;
            }
        }
    }

    /// Records the balance moves of a committed plan of this term's step, and checks the budget
    /// its balance shards charge and the cooldown they start (P15.3, P15.4).
    fn charge_committed_plan(
        &mut self,
        namespace: &str,
        moves: &[Move],
        leaving: Vec<Option<String>>,
    ) {
        let now_us = self.now_us;
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        let state = &self.replicas[leader.manager];
        // The term's steps charge the budget when the step hears of the commit.
        let Some(plan) = leader.steps.plan() else {
            return;
        };
        let other_namespace = !leasehold_api::wire::is_default_namespace(namespace);
        self.coverage.namespace_plans += u64::from(other_namespace);
        let balance = plan.balance_shards();
        let by_load = matches!(leader.step_loads.get(namespace), Some(Loads::Reported(_)));
        for ((step, reason), from) in moves.iter().zip(&plan.reasons).zip(leaving) {
            match reason {
                MoveReason::Balance => {
                    self.coverage.balance_moves += 1;
                    self.coverage.namespace_balance_moves += u64::from(other_namespace);
                    self.balance_moves.push(BalanceMove {
                        term: leader.term,
                        namespace: namespace.to_owned(),
                        at_us: now_us,
                        shard: step.shard,
                        from: from.unwrap_or_default(),
                        to: step.to.clone(),
                    });
                }
                MoveReason::Join if by_load => self.coverage.joins_under_load += 1,
                _ => {}
            }
        }
        if !balance.is_empty() {
            // Each namespace's budget is its own, a share of its own shard count (P18.1).
            let shard_count = state
                .space(namespace)
                .and_then(|space| space.config())
                .map_or(0, |c| c.shard_count);
            let budget = self.scenario.load.budget_per_minute(shard_count);
            self.checker
                .after_balance_commit(namespace, now_ms, &balance, budget, now_us);
        }
    }

    /// How the leader is configured to place (`--balance-tolerance`, `--max-balance-moves`).
    pub(super) fn placement_settings(&self) -> PlacementSettings {
        PlacementSettings {
            by_load: true,
            tolerance: self.scenario.load.tolerance,
            max_balance_moves_per_minute: self.scenario.load.max_balance_moves_per_minute,
        }
    }

    pub(super) fn observe_commit(
        &mut self,
        before: &LeaseState,
        manager: usize,
        command: &Command,
        outcome: &Outcome,
    ) {
        let after = &self.replicas[manager];
        self.coverage.record(command, outcome, self.chaos);
        self.coverage.count_promotions(before, after);
        let views = process_views(&self.processes, self.base, self.now_us);
        self.checker
            .after_commit(before, after, command, outcome, &views, self.now_us);
    }

    /// As the register handler does on the leader (P6.8): the executor's reservation is asked for
    /// at once, so its first renewal is answered from memory too.
    fn reserve_for_registered(&mut self, manager: usize, executor_id: &str) {
        let Some(leader) = &self.leader else {
            return;
        };
        if leader.manager != manager
            || self.replicas[manager].cluster_version() < LEASE_RESERVATION_SCHEMA
        {
            return;
        }
        let now_ms = self.leader_clock_ms(leader.offset_ms, leader.rate_ppm);
        let command = Command::ReserveLeases {
            now_ms,
            executor_ids: vec![executor_id.to_owned()],
        };
        self.propose(command, ReplyTo::Nobody);
    }

    /// Sends the outcome of a committed proposal to whoever asked.
    pub(super) fn answer(&mut self, manager: usize, reply_to: ReplyTo, outcome: &Outcome) {
        match reply_to {
            ReplyTo::Nobody => {}
            ReplyTo::StepWrite => self.continue_step(manager, outcome),
            ReplyTo::Register { slot, call, .. } => {
                let message = match outcome {
                    Outcome::RegisteredMany { results } => match results.as_slice() {
                        [RegisterResult::Registered { grant, .. }] => {
                            self.reserve_for_registered(manager, &grant.executor_id);
                            Message::Granted {
                                call,
                                grant: grant.clone().into(),
                            }
                        }
                        _ => Message::CallFailed { call },
                    },
                    _ => Message::CallFailed { call },
                };
                self.send_to_executor(slot, message);
            }
            ReplyTo::Renew(replies) => {
                let results = match outcome {
                    Outcome::Renewed { results, .. } => results.clone(),
                    _ => Vec::new(),
                };
                for (index, Renewer { slot, call, .. }) in replies.into_iter().enumerate() {
                    let message = match results.get(index) {
                        Some(RenewResult::Renewed { grant, .. }) => Message::Granted {
                            call,
                            grant: grant.clone().into(),
                        },
                        Some(RenewResult::UnknownExecutor { .. }) => {
                            Message::UnknownExecutor { call }
                        }
                        None => Message::CallFailed { call },
                    };
                    self.send_to_executor(slot, message);
                }
            }
            ReplyTo::Deregister { slot, call, .. } => {
                let message = match outcome {
                    Outcome::Deregistered { .. } | Outcome::NotFound => {
                        Message::Deregistered { call }
                    }
                    _ => Message::CallFailed { call },
                };
                self.send_to_executor(slot, message);
            }
        }
    }

    /// A renewal waits for a confirmation round started after it arrived (P6.5), as the core
    /// says; one round at a time, so a burst shares the next.
    pub(super) fn await_confirmation(&mut self, renewal: Renewal, renewer: Renewer) {
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let needed = leader.confirmation.needs();
        leader
            .awaiting_confirmation
            .push((needed, renewal, renewer));
        let term = leader.term;
        self.answer_confirmed(term);
    }

    /// Sends round `n` of heartbeats to every follower; each acknowledges after a commit's
    /// latency (a round trip, without the disk). An acknowledgement in flight when the leader
    /// is deposed is lost with the partition that deposed it.
    fn start_confirmation_round(&mut self) {
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let round = leader.confirmation.start_round();
        let term = leader.term;
        let manager = leader.manager;
        let at = self.now_us + self.scenario.commit_latency_us;
        for follower in (0..MANAGERS).filter(|m| *m != manager) {
            self.schedule(
                at,
                Event::ConfirmationAck {
                    term,
                    follower: follower as u64,
                    round,
                },
            );
        }
    }

    /// A follower acknowledged `round` of `term`'s leader.
    pub(super) fn confirmation_acknowledged(&mut self, term: u64, follower: u64, round: Round) {
        let Some(leader) = self.leader.as_mut().filter(|l| l.term == term) else {
            return;
        };
        if let Some(until) = leader.stalled_until_us {
            self.schedule(
                until,
                Event::ConfirmationAck {
                    term,
                    follower,
                    round,
                },
            );
            return;
        }
        leader.confirmation.acknowledged(follower, round);
        self.answer_confirmed(term);
    }

    /// Every waiting renewal the core counts as confirmed is answered from memory where P6.8
    /// allows it (production's core), otherwise proposed through the log; reservations running
    /// low are proposed; a round starts for those still waiting if none is under way.
    fn answer_confirmed(&mut self, term: u64) {
        let Some(leader) = self.leader.as_mut().filter(|l| l.term == term) else {
            return;
        };
        let manager = leader.manager;
        let now_ms = clock_ms(self.now_us, leader.offset_ms, leader.rate_ppm);
        let (round, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut leader.awaiting_confirmation)
            .into_iter()
            .partition(|(needed, _, _)| leader.confirmation.is_confirmed(*needed));
        leader.awaiting_confirmation = waiting;
        let mut answered = Vec::new();
        let mut through_the_log = Vec::new();
        for (_, renewal, renewer) in round {
            match leader
                .memory
                .answer(&self.replicas[manager], &renewal, now_ms)
            {
                Ok(result) => answered.push((renewal, renewer, result)),
                Err(_) => through_the_log.push((renewal, renewer)),
            }
        }
        let reservations = leader
            .memory
            .take_reservations_wanted(MAX_RESERVATIONS_PER_ENTRY);
        // Whoever still waits needs a round not yet confirmed: the next, once none is under way.
        let next_round =
            !leader.awaiting_confirmation.is_empty() && !leader.confirmation.round_under_way();
        for (renewal, renewer, result) in answered {
            self.coverage.renewals_from_memory += 1;
            let message = answer_message(renewer.call, &result);
            let slot = renewer.slot;
            // The loads it reported feed placement as a renewal through the log does (P15.1).
            let proposal = Proposal {
                command: Command::Renew {
                    now_ms,
                    renewals: vec![renewal],
                },
                reply_to: ReplyTo::Renew(vec![renewer]),
            };
            let outcome = Outcome::Renewed {
                results: vec![result],
                effects: Default::default(),
            };
            self.placement_after_commit(manager, &proposal, &outcome, Vec::new());
            self.send_to_executor(slot, message);
        }
        for (renewal, renewer) in through_the_log {
            let command = Command::Renew {
                now_ms,
                renewals: vec![renewal],
            };
            self.propose(command, ReplyTo::Renew(vec![renewer]));
        }
        if !reservations.is_empty() {
            let command = Command::ReserveLeases {
                now_ms,
                executor_ids: reservations,
            };
            self.propose(command, ReplyTo::Nobody);
        }
        if next_round {
            self.start_confirmation_round();
        }
    }

    pub(super) fn leader_step(&mut self, term: u64) {
        let now_ms = match self.leader.as_ref() {
            Some(l) if l.term == term && l.stalled_until_us.is_none() => {
                self.leader_clock_ms(l.offset_ms, l.rate_ppm)
            }
            _ => return,
        };
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let manager = leader.manager;
        let state = &self.replicas[manager];
        // A step asked for while one waits for its write is taken when that one is over.
        // The step judges leases by what this term told from memory (P6.7), as production's does.
        leader.memory.forget_absent(state);
        let last_renewal_ms = leader
            .last_renewal_applied_ms
            .max(leader.memory.last_answered_ms());
        let Some(writes) = leader.steps.begin_step(
            now_ms,
            state,
            last_renewal_ms,
            leader.memory.told_from_memory(),
        ) else {
            return;
        };
        // The loop woke: its sleep, if one was under way, is over.
        leader.tick += 1;
        match writes.decision().deferral {
            Some(Deferral::MassExpiryGuard { reason, .. }) => {
                self.coverage.reaps_deferred_by_guard += 1;
                if let Some(trace) = &mut self.trace {
                    trace.push(format!(
                        "{:>9.3} ms  the mass-expiry guard defers reaps: {reason:?}",
                        self.now_us as f64 / 1_000.0
                    ));
                }
            }
            Some(Deferral::NewLeader { .. }) => {
                let views = process_views(&self.processes, self.base, self.now_us);
                self.coverage
                    .count_new_leader_deferral(state, now_ms, &views);
            }
            None => {}
        }
        // What this step places each namespace by: the loads this term's renewals reported,
        // the budget left, the shards cooling (P15.1-P15.4), as the leader loop reads them at
        // each step, per namespace (P18.1).
        let step_loads: BTreeMap<String, Loads> = writes
            .placements()
            .iter()
            .map(|(namespace, inputs)| (namespace.clone(), inputs.loads.clone()))
            .collect();
        self.coverage
            .count_step_loads(state, now_ms, leader.term, &step_loads);
        leader.step_loads = step_loads;
        self.next_step_write(manager);
    }

    /// Proposes the step's next write, or ends the step and schedules the next one.
    pub(super) fn next_step_write(&mut self, manager: usize) {
        let now_us = self.now_us;
        let Some(leader) = self.leader.as_mut().filter(|l| l.manager == manager) else {
            return;
        };
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        let term = leader.term;
        match leader.steps.next_write(&self.replicas[manager], now_ms) {
            Some((write, command)) => {
                if let Some(plan) = leader
                    .steps
                    .plan()
                    .filter(|_| write == StepWrite::Rebalance)
                {
                    let namespace = match &plan.command {
                        Command::Rebalance { namespace, .. } => namespace.as_str(),
                        _ => leasehold_api::wire::DEFAULT_NAMESPACE,
                    };
                    // What the plan was made by: the step's inputs, as a reshard carried out in
                    // this step left them (P20.2: placed as while learning until the next step).
                    let loads = leader
                        .steps
                        .placement_inputs(namespace)
                        .map_or(&Loads::Counts, |inputs| &inputs.loads);
                    if let Some(trace) = &mut self.trace {
                        let by = match loads {
                            Loads::Counts => "count".to_owned(),
                            Loads::Learning => "learning".to_owned(),
                            Loads::Reported(loads) => format!("load {loads:.1?}"),
                        };
                        trace.push(format!(
                            "{:>9.3} ms  plan of {namespace} by {by}: {:?}",
                            now_us as f64 / 1_000.0,
                            plan.counts_by_reason()
                        ));
                    }
                    self.checker.after_plan(
                        &self.replicas[manager],
                        now_ms,
                        plan,
                        loads,
                        self.scenario.load.tolerance,
                        now_us,
                    );
                }
                self.propose(command, ReplyTo::StepWrite);
            }
            None => {
                // A third of the shortest lease of any namespace, as the leader loop (P3.8,
                // P18.1).
                let lease_ms = self.replicas[manager].shortest_lease_duration_ms();
                match leader.steps.next_step(lease_ms) {
                    NextStep::Now => self.schedule(self.now_us, Event::LeaderStep { term }),
                    NextStep::After { tick_ms } => {
                        leader.tick += 1;
                        let tick = leader.tick;
                        let at = self.now_us + tick_ms * 1_000;
                        self.schedule_timer(at, Event::LeaderTick { term, tick });
                    }
                }
            }
        }
    }

    /// A step's write was committed: the term's steps hear what became of it, and the step goes
    /// on.
    pub(super) fn continue_step(&mut self, manager: usize, outcome: &Outcome) {
        let written = match outcome {
            Outcome::Refused { reason } => Written::Refused {
                stale_plan: matches!(reason, RefusalReason::StalePlan { .. }),
            },
            _ => Written::Applied,
        };
        let now_us = self.now_us;
        if let Some(leader) = self.leader.as_mut().filter(|l| l.manager == manager) {
            let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
            leader.steps.written(written, now_ms);
        }
        self.next_step_write(manager);
    }

    // ---- manager request handling ---------------------------------------------------------

    /// The instant a stalled leader of `term` runs again, if it is stalled: its timers and its
    /// commits wait until then.
    pub(super) fn stalled_term_until(&self, term: u64) -> Option<u64> {
        self.leader
            .as_ref()
            .filter(|l| l.term == term)
            .and_then(|l| l.stalled_until_us)
    }
}

/// What an executor hears for a renewal answered from memory.
pub(super) fn answer_message(call: u64, result: &RenewResult) -> Message {
    match result {
        RenewResult::Renewed { grant, .. } => Message::Granted {
            call,
            grant: grant.clone().into(),
        },
        RenewResult::UnknownExecutor { .. } => Message::UnknownExecutor { call },
    }
}
