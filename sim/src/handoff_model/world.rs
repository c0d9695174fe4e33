//! The world's moves: what the leader's handlers and its step do with a delivered request, what each
//! executor's admission core does with a delivered grant, push or revoke, the clock, the network and
//! the checks of the properties. Every decision is a production core's; this file only routes.

use super::*;

impl HandoffModel {
    pub(super) fn process_of(&self, executor_id: &str) -> Option<usize> {
        self.executor_ids.iter().position(|id| id == executor_id)
    }

    pub(super) fn executor_id(&self, process: usize) -> ExecutorId {
        self.executor_ids.get(process).cloned().unwrap_or_default()
    }

    /// The term's leader core's decision at the current tick (P6.1 through the real rule).
    pub(super) fn decision(&self, state: &HandoffState) -> StepDecision {
        let now_ms = state.leader.clock_ms(state.tick);
        LeaderCore::new(state.leader.took_office_ms, NO_MASS_EXPIRY_GUARD).step(
            now_ms,
            &state.lease,
            None,
        )
    }

    /// Puts a message in flight, unless the network is full (then it is lost).
    pub(super) fn send(&self, state: &mut HandoffState, message: Message) {
        if state.network.len() < self.bounds.max_in_flight {
            state.network.insert(message);
        }
    }

    /// Pushes `executor_id` its full set, read from the state now (P4.1, P4.3).
    pub(super) fn push(&self, state: &mut HandoffState, executor_id: &str) {
        let Some(to) = self.process_of(executor_id) else {
            return;
        };
        let message = Message::Push {
            to,
            sent_tick: state.tick,
            revision: state.lease.revision(),
            shards: wire_set(&state.lease.delivered_set(executor_id)),
        };
        self.send(state, message);
    }

    /// Sends the pushes and revokes an applied command calls for (after it committed, P5.1).
    pub(super) fn fan_out(&self, state: &mut HandoffState, effects: &Effects) {
        for revoke in &effects.revokes {
            if let Some(to) = self.process_of(&revoke.executor_id) {
                let message = Message::Revoke {
                    to,
                    sent_tick: state.tick,
                    revision: revoke.revision,
                    shards: revoke.shards.clone(),
                };
                self.send(state, message);
            }
        }
        for executor_id in &effects.assignments {
            self.push(state, executor_id);
        }
    }

    pub(super) fn manager_renew(
        &self,
        state: &mut HandoffState,
        from: usize,
        request_sent_tick: u64,
        request: &RenewRequest,
    ) {
        let before = state.handoffs();
        let command = Command::Renew {
            now_ms: state.leader.clock_ms(state.tick),
            renewals: vec![Renewal::from_claims(
                self.executor_id(from),
                &request.claims,
                request.revision,
            )],
        };
        match state.apply(&command) {
            Outcome::Renewed { results, effects } => {
                for result in results {
                    match result {
                        RenewResult::Renewed {
                            grant,
                            acknowledged,
                            ..
                        } => {
                            for shard in acknowledged {
                                state.end(&before, shard, Ending::Claims);
                            }
                            let grant = wire::Grant::from(grant);
                            let reply = Message::Grant {
                                to: from,
                                sent_tick: state.tick,
                                request_sent_tick,
                                term: state.leader.term,
                                lease_ttl_ms: grant.lease_ttl_ms,
                                revision: grant.revision,
                                shards: grant.shards,
                            };
                            self.send(state, reply);
                        }
                        // `404 unknown_executor`: no grant; see the module docs.
                        RenewResult::UnknownExecutor { .. } => {}
                    }
                }
                self.fan_out(state, &effects);
            }
            other => state.fault(format!("a renewal answered {other:?}")),
        }
    }

    pub(super) fn manager_release(
        &self,
        state: &mut HandoffState,
        from: usize,
        revision: u64,
        requested: &[ShardId],
        released: &[ShardId],
        ignored: bool,
    ) {
        // As the delivery task reads a revoke reply: an ignored answer is never an
        // acknowledgement, and only shards that were asked for count (P5.2).
        let released: Vec<ShardId> = released
            .iter()
            .copied()
            .filter(|shard| requested.contains(shard))
            .collect();
        if ignored || released.is_empty() {
            return;
        }
        let before = state.handoffs();
        let command = Command::Release {
            now_ms: state.leader.clock_ms(state.tick),
            executor_id: self.executor_id(from),
            shards: released,
            revoke_revision: revision,
        };
        match state.apply(&command) {
            Outcome::Released {
                completed,
                ignored,
                effects,
            } => {
                for shard in completed {
                    state.end(&before, shard, Ending::Release);
                }
                for shard in ignored {
                    match state.ended.get(&(shard, revision)) {
                        Some((Ending::Release, _)) => state.seen.duplicate_acknowledgement = true,
                        _ => state.seen.late_acknowledgement = true,
                    }
                }
                self.fan_out(state, &effects);
            }
            // The executor was reaped meanwhile, which completed its handoffs (P3.8).
            Outcome::NotFound => {}
            other => state.fault(format!("a release answered {other:?}")),
        }
    }

    pub(super) fn executor_grant(&self, state: &mut HandoffState, message: &Message) {
        let Message::Grant {
            to,
            request_sent_tick,
            term,
            lease_ttl_ms,
            revision,
            shards,
            ..
        } = message
        else {
            return;
        };
        let grant = wire::Grant {
            generation: 0,
            shard_runs: None,
            executor_id: self.executor_id(*to),
            lease_ttl_ms: *lease_ttl_ms,
            revision: *revision,
            shard_count: SHARD_COUNT,
            shards: shards.clone(),
            unchanged: false,
            secondaries: Vec::new(),
        };
        let now = instant(state.tick);
        let Some(process) = state.processes.get_mut(*to) else {
            return;
        };
        // P3.2: anchored at the instant the request was sent, not at arrival.
        match process
            .core
            .apply_grant(instant(*request_sent_tick), &grant, now)
        {
            Ok(_) => process.grant_term = *term,
            Err(error) => state.fault(format!("a grant was refused: {error}")),
        }
    }

    pub(super) fn executor_push(
        &self,
        state: &mut HandoffState,
        to: usize,
        revision: u64,
        shards: &[ShardEpoch],
    ) {
        let push = AssignmentPush {
            generation: 0,
            executor_id: self.executor_id(to),
            revision,
            shard_count: SHARD_COUNT,
            shards: shards.to_vec(),
            secondaries: Vec::new(),
        };
        let now = instant(state.tick);
        let Some(process) = state.processes.get_mut(to) else {
            return;
        };
        if let Err(error) = process.core.apply_push(&push, now) {
            state.fault(format!("a push was refused: {error}"));
        }
    }

    pub(super) fn executor_revoke(
        &self,
        state: &mut HandoffState,
        to: usize,
        revision: u64,
        shards: &[ShardId],
    ) {
        let revoke = RevokePush {
            executor_id: self.executor_id(to),
            revision,
            shards: shards.to_vec(),
            generation: 0,
        };
        let now = instant(state.tick);
        let Some(process) = state.processes.get_mut(to) else {
            return;
        };
        match process.core.apply_revoke(&revoke, now) {
            Ok(applied) => {
                let reply = Message::RevokeReply {
                    from: to,
                    sent_tick: state.tick,
                    revision: applied.reply.revision,
                    requested: shards.to_vec(),
                    released: applied.reply.released,
                    ignored: applied.reply.ignored,
                };
                self.send(state, reply);
            }
            Err(error) => state.fault(format!("a revoke was refused: {error}")),
        }
    }

    pub(super) fn deliver(&self, state: &mut HandoffState, message: &Message) {
        match message {
            Message::Renew {
                from,
                sent_tick,
                claims,
                revision,
            } => {
                let request = RenewRequest {
                    claim_runs: None,
                    claims: claims.clone(),
                    revision: *revision,
                    loads: None,
                    accept_unchanged: false,
                    ready: Vec::new(),
                };
                self.manager_renew(state, *from, *sent_tick, &request);
            }
            Message::Grant { .. } => self.executor_grant(state, message),
            Message::Push {
                to,
                revision,
                shards,
                ..
            } => self.executor_push(state, *to, *revision, shards),
            Message::Revoke {
                to,
                revision,
                shards,
                ..
            } => self.executor_revoke(state, *to, *revision, shards),
            Message::RevokeReply {
                from,
                revision,
                requested,
                released,
                ignored,
                ..
            } => self.manager_release(state, *from, *revision, requested, released, *ignored),
        }
    }

    pub(super) fn plan(&self, state: &mut HandoffState) {
        let now_ms = state.leader.clock_ms(state.tick);
        let Some(command) = plan_rebalance(&state.lease, now_ms) else {
            return;
        };
        let before = state.handoffs();
        match state.apply(&command) {
            Outcome::Rebalanced {
                releasing,
                cancelled,
                effects,
                ..
            } => {
                for shard in releasing {
                    let target_now = state
                        .lease
                        .shard(shard)
                        .and_then(|entry| entry.handoff.as_ref())
                        .and_then(|handoff| handoff.to.clone());
                    if before
                        .get(&shard)
                        .is_some_and(|(_, handoff)| handoff.to != target_now)
                    {
                        state.seen.retarget = true;
                    }
                }
                for shard in cancelled {
                    state.end(&before, shard, Ending::Cancelled);
                }
                self.fan_out(state, &effects);
            }
            other => state.fault(format!("a fresh plan answered {other:?}")),
        }
    }

    pub(super) fn reap(&self, state: &mut HandoffState) {
        let decision = self.decision(state);
        if decision.reap.is_empty() {
            return;
        }
        let before = state.handoffs();
        let command = Command::Reap {
            now_ms: state.leader.clock_ms(state.tick),
            executor_ids: decision.reap,
        };
        match state.apply(&command) {
            Outcome::Reaped {
                reaped, effects, ..
            } => {
                let from_reaped: Vec<ShardId> = before
                    .iter()
                    .filter(|(_, (owner, _))| reaped.contains(owner))
                    .map(|(&shard, _)| shard)
                    .collect();
                for shard in from_reaped {
                    state.end(&before, shard, Ending::Reaped);
                }
                self.fan_out(state, &effects);
            }
            other => state.fault(format!("a reap answered {other:?}")),
        }
    }

    pub(super) fn drain_first(&self, state: &mut HandoffState) {
        let command = Command::SetDraining {
            now_ms: state.leader.clock_ms(state.tick),
            executor_id: self.executor_id(0),
            draining: true,
        };
        match state.apply(&command) {
            Outcome::DrainingSet { .. } => {}
            other => state.fault(format!("draining answered {other:?}")),
        }
    }

    pub(super) fn complete_handoffs(&self, state: &mut HandoffState) {
        let before = state.handoffs();
        let command = Command::CompleteHandoffs {
            now_ms: state.leader.clock_ms(state.tick),
        };
        match state.apply(&command) {
            Outcome::HandoffsCompleted { completed, effects } => {
                for shard in completed {
                    state.end(&before, shard, Ending::Expiry);
                }
                self.fan_out(state, &effects);
            }
            other => state.fault(format!("completing handoffs answered {other:?}")),
        }
    }

    /// The revokes the delivery task would send for handoffs still current: one per old owner
    /// and revoke revision, for owners still registered (P6.2).
    pub(super) fn current_revokes(
        state: &HandoffState,
    ) -> BTreeMap<(ExecutorId, u64), Vec<ShardId>> {
        let mut revokes: BTreeMap<(ExecutorId, u64), Vec<ShardId>> = BTreeMap::new();
        for shard in state.lease.shards() {
            if let (Some(owner), Some(handoff)) = (&shard.owner, &shard.handoff) {
                revokes
                    .entry((owner.clone(), handoff.revoke_revision))
                    .or_default()
                    .push(shard.id);
            }
        }
        revokes
    }

    /// Whether a renewal of `process`, or the grant answering it, is still in flight: an
    /// executor waits for the answer to one renewal, or for its timeout (here: the message
    /// being lost), before it sends the next.
    pub(super) fn renewal_in_flight(state: &HandoffState, process: usize) -> bool {
        state.network.iter().any(|message| match message {
            Message::Renew { from, .. } => *from == process,
            Message::Grant { to, .. } => *to == process,
            _ => false,
        })
    }

    /// Whether the revoke of (`to`, `revision`), or its reply, is in flight: the delivery task
    /// sends a revoke again only once it stopped waiting for the last one.
    pub(super) fn revoke_in_flight(state: &HandoffState, to: usize, revision: u64) -> bool {
        state.network.iter().any(|message| match message {
            Message::Revoke {
                to: t, revision: r, ..
            } => *t == to && *r == revision,
            Message::RevokeReply {
                from, revision: r, ..
            } => *from == to && *r == revision,
            _ => false,
        })
    }

    pub(super) fn change_leader(&self, state: &mut HandoffState, offset_ticks: i8) {
        let mut leader = Leader {
            term: state.leader.term + 1,
            offset_ticks,
            took_office_ms: 0,
        };
        leader.took_office_ms = leader.clock_ms(state.tick);
        state.leader = leader;
        // P6.2: the new leader pushes every executor its full set once.
        let executor_ids: Vec<ExecutorId> = state
            .lease
            .executors()
            .map(|executor| executor.id.clone())
            .collect();
        for executor_id in executor_ids {
            self.push(state, &executor_id);
        }
    }

    /// The state at the start of `tick`: messages older than their longest transit are lost.
    pub(super) fn expire(&self, state: &HandoffState, tick: u64) -> HandoffState {
        let mut next = state.clone();
        next.tick = tick;
        let bounds = self.bounds;
        next.network
            .retain(|message| tick - message.sent_tick() <= bounds.transit_of(message));
        next
    }

    /// The executors whose renewal is due (P3.5) and that are not waiting for the answer to an
    /// earlier one, ascending.
    pub(super) fn renewals_due(&self, state: &HandoffState) -> Vec<usize> {
        state
            .processes
            .iter()
            .enumerate()
            .filter(|(index, process)| {
                renewal_due(&process.core, state.tick, self.bounds.lease_ms())
                    && process.core.renewal().is_some()
                    && !Self::renewal_in_flight(state, *index)
            })
            .map(|(index, _)| index)
            .collect()
    }

    /// Sends a renewal from `process` with the claims its core makes (P4.2); applied at once when
    /// requests have no transit.
    pub(super) fn renew(&self, state: &mut HandoffState, process: usize) {
        if state.network.len() >= self.bounds.max_in_flight {
            return;
        }
        let tick = state.tick;
        let Some(entry) = state.processes.get_mut(process) else {
            return;
        };
        let Some((_, request)) = entry.core.renewal() else {
            return;
        };
        if self.bounds.request_transit_ticks == 0 {
            self.manager_renew(state, process, tick, &request);
        } else {
            let message = Message::Renew {
                from: process,
                sent_tick: tick,
                claims: request.claims,
                revision: request.revision,
            };
            self.send(state, message);
        }
    }

    /// I1: at the current instant, no shard is admitted by two executors.
    pub(super) fn exclusive(&self, state: &HandoffState) -> bool {
        let now = instant(state.tick);
        (0..SHARD_COUNT).all(|shard| {
            state
                .processes
                .iter()
                .filter(|process| process.core.admit(shard, now).is_ok())
                .count()
                <= 1
        })
    }

    /// I2: whatever is admitted is admitted at an epoch minted for the admitter, and no epoch was
    /// minted twice or out of order.
    pub(super) fn fenced(&self, state: &HandoffState) -> bool {
        if state.i2_fault.is_some() {
            return false;
        }
        let now = instant(state.tick);
        state.processes.iter().enumerate().all(|(index, process)| {
            (0..SHARD_COUNT).all(|shard| match process.core.admit(shard, now) {
                Ok(permit) => state
                    .minted
                    .get(&(shard, permit.epoch))
                    .is_some_and(|minted_for| *minted_for == self.executor_id(index)),
                Err(_) => true,
            })
        })
    }

    /// P3.2: an executor's copy of its lease ends no later than the manager's recorded expiry, on
    /// the clock of the leader whose grant set it. (Against another leader's clock it may not:
    /// a new leader whose clock is ahead reads an old leader's expiry as earlier than the
    /// executor's copy ends, which is why it waits a full lease before acting on it, P6.1.)
    pub(super) fn anchored(&self, state: &HandoffState) -> bool {
        state.processes.iter().enumerate().all(|(index, process)| {
            let Some(expiry) = process.core.lease().expiry() else {
                return true;
            };
            let Some(recorded) = state.lease.executor(&self.executor_id(index)) else {
                return true;
            };
            let granted_by = if process.grant_term == state.leader.term {
                state.leader
            } else {
                FIRST_LEADER
            };
            true_ms(expiry).is_some_and(|ms| granted_by.clock_at(ms) <= recorded.lease_expiry_ms)
        })
    }
}

/// Every order of `items` (at most three here, so at most six orders).
pub(super) fn orders(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for (index, &first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(index);
        for mut order in orders(&rest) {
            order.insert(0, first);
            all.push(order);
        }
    }
    all
}

pub(super) fn wire_set(shards: &[(ShardId, Epoch)]) -> Vec<ShardEpoch> {
    shards
        .iter()
        .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
        .collect()
}

/// The fleet at tick 0, built with the real cores: the cluster initialised, the first executor
/// registered and given every shard by the first plan (its register reply and the push applied),
/// then the others registered (their register replies applied). Nothing is in flight. A step
/// that does not answer as expected leaves a model fault in the state, which the checker reports
/// at once.
pub(super) fn prelude(bounds: &Bounds) -> (HandoffState, Vec<ExecutorId>) {
    let leader = FIRST_LEADER;
    let mut state = HandoffState {
        tick: 0,
        leader,
        lease: LeaseState::default(),
        processes: Vec::new(),
        network: BTreeSet::new(),
        duplicates_left: bounds.duplicates,
        minted: BTreeMap::new(),
        ended: BTreeMap::new(),
        seen: Seen::default(),
        i2_fault: None,
        model_fault: None,
    };
    let now_ms = leader.clock_ms(0);
    let now = instant(0);
    let mut executor_ids = Vec::new();
    let init = Command::Init {
        now_ms,
        shard_count: SHARD_COUNT,
        lease_duration_ms: bounds.lease_ms(),
    };
    let outcome = state.apply(&init);
    if !matches!(outcome, Outcome::Initialised { .. }) {
        state.fault(format!("Init answered {outcome:?}"));
    }
    for index in 0..bounds.executors {
        let mut core = register_executor(&mut state, index, now_ms, now, &mut executor_ids);
        if index == 0 && !give_every_shard(&mut state, &mut core, &executor_ids, now_ms, now) {
            continue;
        }
        state.processes.push(Process {
            core,
            grant_term: leader.term,
        });
    }
    (state, executor_ids)
}

/// Registers executor `index` and applies its register reply to a new admission core.
fn register_executor(
    state: &mut HandoffState,
    index: usize,
    now_ms: u64,
    now: Instant,
    executor_ids: &mut Vec<ExecutorId>,
) -> AdmissionCore {
    let incarnation = format!("executor-{index}");
    let register = Command::Register {
        follows_generations: false,
        namespace: wire::DEFAULT_NAMESPACE.into(),
        now_ms,
        address: format!("http://{incarnation}.test"),
        incarnation,
        name: None,
        credential_sha256: None,
        capacity: leasehold_manager::lease::DEFAULT_CAPACITY,
        app_version: None,
        labels: Default::default(),
    };
    let mut core = AdmissionCore::default();
    match state.apply(&register) {
        Outcome::Registered { grant, .. } => {
            let reply = wire::Grant::from(grant);
            if let Err(error) = core.apply_grant(now, &reply, now) {
                state.fault(format!("a register reply was refused: {error}"));
            }
            executor_ids.push(reply.executor_id);
        }
        other => state.fault(format!("Register answered {other:?}")),
    }
    core
}

/// Commits the first plan, which gives the first executor every shard, and applies its push to
/// `core`; false when there was nothing to plan (the first executor then has no process).
fn give_every_shard(
    state: &mut HandoffState,
    core: &mut AdmissionCore,
    executor_ids: &[ExecutorId],
    now_ms: u64,
    now: Instant,
) -> bool {
    let Some(plan) = plan_rebalance(&state.lease, now_ms) else {
        state.fault("nothing to plan for the first executor".to_owned());
        return false;
    };
    match state.apply(&plan) {
        Outcome::Rebalanced { .. } => {
            let executor_id = executor_ids.first().cloned().unwrap_or_default();
            let push = AssignmentPush {
                generation: 0,
                revision: state.lease.revision(),
                shard_count: SHARD_COUNT,
                shards: wire_set(&state.lease.delivered_set(&executor_id)),
                executor_id,
                secondaries: Vec::new(),
            };
            if let Err(error) = core.apply_push(&push, now) {
                state.fault(format!("the first push was refused: {error}"));
            }
        }
        other => state.fault(format!("the first plan answered {other:?}")),
    }
    true
}
