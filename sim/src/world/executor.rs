//! The executor processes: their renewal calls on the real schedule, what they do with answers,
//! pushes and revokes, and deregistration.

use super::*;

impl World {
    pub(super) fn start_process(&mut self, slot: Slot) {
        let id = self.next_process;
        self.next_process += 1;
        let rate_ppm = self.scenario.executor_rate_ppm[slot];
        let capacity = self.load.capacity(slot);
        let labels: Labels = self
            .scenario
            .zone_of_slot(slot)
            .map(|zone| Labels::from([(ZONE_LABEL.to_owned(), zone)]))
            .unwrap_or_default();
        let space = self.scenario.space_of_slot(slot);
        let namespace = self.scenario.space_name(space).to_owned();
        self.processes[slot] = Some(Process {
            id,
            // Secondaries ready as soon as held (P19.3): the simulated services copy nothing.
            core: AdmissionCore::default().with_secondaries_ready_when_held(true),
            calls: LeaseCalls::default(),
            lease_call: None,
            life: Life::Running,
            incarnation: format!("s{slot}-p{id}-i1"),
            incarnations: 1,
            call: None,
            rate_ppm,
            register_sent: false,
            capacity,
            labels,
            namespace,
            space,
        });
        self.note(|| format!("slot {slot}: process {id} starts"));
        self.schedule_timer(self.now_us, Event::Call { slot, process: id });
    }

    pub(super) fn process_mut(&mut self, slot: Slot, process: u64) -> Option<&mut Process> {
        self.processes[slot].as_mut().filter(|p| p.id == process)
    }

    /// The lease loop's next call, as [`LeaseCalls`] makes it: register when not registered,
    /// else renew.
    pub(super) fn call(&mut self, slot: Slot, process: u64) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        let call_id = self.next_call;
        let Some(p) = self.processes[slot].as_mut().filter(|p| p.id == process) else {
            return;
        };
        if let Life::Paused { until_us } = p.life {
            self.schedule_timer(until_us, Event::Call { slot, process });
            return;
        }
        if p.life != Life::Running || p.call.is_some() {
            return;
        }
        // The calls are lifted out while the process itself is lent as their holder.
        let calls = std::mem::take(&mut p.calls);
        let lease_call = calls.next_call(
            &mut ProcessHolder {
                process: p,
                slot,
                now,
                load: &mut self.load,
            },
            now,
        );
        p.calls = calls;
        let (kind, request) = match &lease_call.kind {
            LeaseCallKind::Register(request) => (
                CallKind::Register,
                Request::Register {
                    call: call_id,
                    request: request.clone(),
                },
            ),
            LeaseCallKind::Renew((executor_id, request)) => (
                CallKind::Renew,
                Request::Renew {
                    call: call_id,
                    executor_id: executor_id.clone(),
                    request: request.clone(),
                },
            ),
        };
        p.call = Some(Call { id: call_id, kind });
        p.lease_call = Some(lease_call);
        self.next_call += 1;
        self.send_to_managers(slot, process, request);
        self.schedule(
            self.now_us + CALL_PATIENCE_US,
            Event::CallTimeout {
                slot,
                process,
                call: call_id,
            },
        );
    }

    /// The call in flight was answered: a grant (`Ok`) or anything else, as [`LeaseCalls`]
    /// takes it; then the next call is scheduled.
    pub(super) fn after_call(
        &mut self,
        slot: Slot,
        process: u64,
        answer: Result<&Grant, CallOutcome>,
    ) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        let Some(p) = self.processes[slot].as_mut().filter(|p| p.id == process) else {
            return;
        };
        let Some(lease_call) = p.lease_call.take() else {
            return;
        };
        // The calls are lifted out while the process itself is lent as their holder.
        let mut calls = std::mem::take(&mut p.calls);
        let rate = p.rate_ppm;
        let mut holder = ProcessHolder {
            process: p,
            slot,
            now,
            load: &mut self.load,
        };
        let next = match answer {
            Ok(grant) => calls.granted(&mut holder, &lease_call, grant, now).1,
            Err(outcome) => calls.failed(&mut holder, outcome, now),
        };
        p.calls = calls;
        match next {
            NextCall::CallAt(at) => {
                let at_us = self.true_us_of(at, rate);
                self.schedule_timer(at_us, Event::Call { slot, process });
            }
            NextCall::Reregister => {
                self.schedule_timer(self.now_us, Event::Call { slot, process });
            }
            NextCall::GiveUp(reason) => {
                p.life = Life::Dead;
                self.note(|| format!("slot {slot}: gives up: {reason}"));
            }
        }
    }

    pub(super) fn executor_receives(&mut self, slot: Slot, message: Message) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        let now_us = self.now_us;
        let Some(p) = self.processes[slot].as_mut() else {
            // Connection refused: deliveries fail by timeout, calls were the dead process's.
            return;
        };
        let process = p.id;
        match p.life {
            Life::Dead => return,
            Life::Paused { until_us } => {
                // Read from the socket once the process runs again.
                self.schedule(until_us.max(now_us), Event::ToExecutor { slot, message });
                return;
            }
            Life::Running | Life::Stopping => {}
        }
        match message {
            Message::Granted { call, grant } => {
                let Some(current) = p.call.filter(|c| c.id == call) else {
                    return;
                };
                p.call = None;
                if matches!(current.kind, CallKind::Deregister) {
                    return;
                }
                if grant.revision < p.core.assignment().revision() {
                    self.coverage.stale_grants += 1;
                }
                self.after_call(slot, process, Ok(&grant));
            }
            Message::UnknownExecutor { call } => {
                if p.call.filter(|c| c.id == call).is_none() {
                    return;
                }
                p.call = None;
                self.after_call(slot, process, Err(CallOutcome::UnknownExecutor));
            }
            Message::CallFailed { call } => {
                let Some(current) = p.call.filter(|c| c.id == call) else {
                    return;
                };
                p.call = None;
                if matches!(current.kind, CallKind::Deregister) {
                    self.schedule(now_us + 100_000, Event::StopDeadline { slot, process });
                    return;
                }
                self.after_call(slot, process, Err(CallOutcome::Failed));
            }
            Message::Deregistered { call } => {
                if p.call.filter(|c| c.id == call).is_some() {
                    p.life = Life::Dead;
                    self.note(|| format!("slot {slot}: deregistered and exits (P3.7)"));
                }
            }
            Message::Push { delivery, push } => {
                self.push_delivered(slot, process, delivery, &push, now)
            }
            Message::Revoke { delivery, revoke } => {
                self.revoke_delivered(slot, process, delivery, &revoke, now)
            }
        }
    }

    /// The executor applies a full-set push (P4.3) and answers whether it took it.
    fn push_delivered(
        &mut self,
        slot: Slot,
        process: u64,
        delivery: u64,
        push: &AssignmentPush,
        now: Instant,
    ) {
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        let ok = p.core.apply_push(push, now).is_ok();
        if !ok {
            self.coverage.pushes_refused += 1;
        }
        self.send_to_managers(slot, process, Request::PushReply { delivery, ok });
    }

    /// The executor applies a revoke (P5.2) and answers with what it released.
    fn revoke_delivered(
        &mut self,
        slot: Slot,
        process: u64,
        delivery: u64,
        revoke: &RevokePush,
        now: Instant,
    ) {
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        // Whether a newer set overtook it, as the executor's own delivery order decides.
        let overtaken = matches!(
            p.core
                .assignment()
                .clone()
                .apply_revoke(revoke.revision, &revoke.shards),
            Ok(RevokeOutcome::Overtaken { .. })
        );
        let reply = p
            .core
            .apply_revoke(revoke, now)
            .ok()
            .map(|applied| applied.reply);
        if let Some(reply) = &reply {
            self.coverage.stale_revokes_ignored += u64::from(reply.ignored);
            self.coverage.overtaken_revokes_released +=
                u64::from(overtaken && !reply.released.is_empty());
        }
        self.send_to_managers(slot, process, Request::RevokeReply { delivery, reply });
    }

    pub(super) fn call_timeout(&mut self, slot: Slot, process: u64, call: u64) {
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        if p.call.is_none_or(|c| c.id != call) {
            return;
        }
        if let Life::Paused { until_us } = p.life {
            // The timer fires when the process runs again.
            self.schedule(
                until_us,
                Event::CallTimeout {
                    slot,
                    process,
                    call,
                },
            );
            return;
        }
        let kind = p.call.map(|c| c.kind);
        p.call = None;
        match (kind, p.life) {
            (Some(CallKind::Deregister), _) => self.deregister(slot, process),
            (_, Life::Stopping) => self.deregister(slot, process),
            _ => self.after_call(slot, process, Err(CallOutcome::Failed)),
        }
    }

    /// A graceful stop's deregister call (P3.7), retried until the grace ends.
    pub(super) fn deregister(&mut self, slot: Slot, process: u64) {
        let call_id = self.next_call;
        if self.process_now(slot).is_none() {
            return;
        }
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        if p.life != Life::Stopping || p.call.is_some() {
            return;
        }
        let Some(executor_id) = p.core.executor_id().map(str::to_owned) else {
            // Never registered (or forgotten): nothing to deregister. A register whose reply was
            // lost is left to lapse; the production shell registers again to find it (P7.2).
            p.life = Life::Dead;
            return;
        };
        p.call = Some(Call {
            id: call_id,
            kind: CallKind::Deregister,
        });
        self.next_call += 1;
        self.send_to_managers(
            slot,
            process,
            Request::Deregister {
                call: call_id,
                executor_id,
            },
        );
        self.schedule(
            self.now_us + CALL_PATIENCE_US,
            Event::CallTimeout {
                slot,
                process,
                call: call_id,
            },
        );
    }

    // ---- faults ----------------------------------------------------------------------------
}

/// One simulated process as the lease loop's [`LeaseHolder`]: its admission core and
/// incarnation, and the load model that makes its reports.
struct ProcessHolder<'a> {
    process: &'a mut Process,
    slot: Slot,
    now: Instant,
    load: &'a mut LoadModel,
}

impl LeaseHolder for ProcessHolder<'_> {
    type Renewal = SimRenewal;

    fn renewal(&mut self) -> Option<SimRenewal> {
        let (executor_id, mut request) = self.process.core.renewal()?;
        let claims: Vec<ShardId> = request.claims.iter().map(|claim| claim.shard).collect();
        request.loads = self.load.report(self.slot, &claims).map(|reported| {
            reported
                .into_iter()
                .map(|(shard, load)| ShardLoad { shard, load })
                .collect()
        });
        Some((executor_id, request))
    }

    fn register_request(&mut self) -> RegisterRequest {
        self.process.register_sent = true;
        // Sent only when it is not `default`, as the executor library does (P18.1).
        let namespace = &self.process.namespace;
        RegisterRequest {
            // The simulated processes run the library's admission core, which maps keys by the
            // newest set's layout and switches layouts in one receipt (P20.3).
            follows_generations: true,
            namespace: (!leasehold_api::wire::is_default_namespace(namespace))
                .then(|| namespace.clone()),
            incarnation: self.process.incarnation.clone(),
            address: format!("http://s{}:1", self.slot),
            name: None,
            credential: None,
            capacity: Some(self.process.capacity),
            app_version: None,
            labels: self.process.labels.clone(),
        }
    }

    fn applied_mark(&self) -> AppliedMark {
        self.process.core.applied_mark()
    }

    fn apply_grant_after(
        &mut self,
        sent_at: Instant,
        mark: AppliedMark,
        grant: &Grant,
    ) -> Result<GrantApplied, ForeignGrant> {
        self.process
            .core
            .apply_grant_after(sent_at, mark, grant, self.now)
    }

    /// The load model keeps no interval between reports: nothing to take in.
    fn renewal_granted(&mut self, _: &SimRenewal) {}

    fn forget_executor(&mut self) {
        let p = &mut *self.process;
        p.core.forget_executor(self.now);
        p.incarnations += 1;
        p.incarnation = format!("s{}-p{}-i{}", self.slot, p.id, p.incarnations);
        p.register_sent = false;
    }

    fn lease(&self) -> LeaseClock {
        *self.process.core.lease()
    }
}
