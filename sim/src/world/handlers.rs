//! The manager's handlers as simulated: what a request delivered to a manager does.

use super::*;

impl World {
    pub(super) fn manager_receives(&mut self, slot: Slot, process: u64, request: Request) {
        let Some(leader) = &self.leader else {
            // No leader: requests fail (503 no_leader); deliveries' answers are lost.
            if let Some(call) = request_call(&request) {
                self.send_to_executor(slot, Message::CallFailed { call });
            }
            return;
        };
        if let Some(until) = leader.stalled_until_us {
            // A stalled leader reads the request when it resumes (it sits in the socket).
            self.schedule(
                until,
                Event::ToManagers {
                    slot,
                    process,
                    request,
                },
            );
            return;
        }
        let term = leader.term;
        let manager = leader.manager;
        let now_ms = self.leader_clock_ms(leader.offset_ms, leader.rate_ppm);
        match request {
            Request::Register { call, request } => {
                self.handle_register(slot, call, request, now_ms)
            }
            Request::Renew {
                call,
                executor_id,
                request,
            } => self.handle_renew(manager, slot, call, executor_id, &request, now_ms),
            Request::Deregister { call, executor_id } => {
                let command = Command::Deregister {
                    now_ms,
                    executor_id,
                };
                self.propose(command, ReplyTo::Deregister { slot, call });
            }
            Request::PushReply { delivery, ok } => self.delivered(term, delivery, Some(ok), None),
            Request::RevokeReply { delivery, reply } => {
                self.delivered(term, delivery, None, Some(reply))
            }
        }
    }

    /// The registration handler: proposes the registration, answered when it commits.
    fn handle_register(&mut self, slot: Slot, call: u64, request: RegisterRequest, now_ms: u64) {
        // As the registration handler: no capacity stated is the default one, and at the
        // cluster version the simulated cluster runs at (this build's newest), the registration
        // goes into a `RegisterMany` entry (one per entry here, as renewals).
        let capacity = request.capacity.unwrap_or(DEFAULT_CAPACITY);
        let command = Command::RegisterMany {
            now_ms,
            registrations: vec![Registration {
                follows_generations: request.follows_generations,
                // P18.1: into the namespace named, `default` when none.
                namespace: request
                    .namespace
                    .unwrap_or_else(|| leasehold_api::wire::DEFAULT_NAMESPACE.to_owned()),
                incarnation: request.incarnation,
                address: request.address,
                name: request.name,
                credential_sha256: None,
                capacity,
                app_version: request.app_version,
                labels: request.labels,
            }],
        };
        self.propose(command, ReplyTo::Register { slot, call });
    }

    /// The renewal handler: the renewal waits for a confirmation round, or goes to the log.
    fn handle_renew(
        &mut self,
        manager: usize,
        slot: Slot,
        call: u64,
        executor_id: String,
        request: &RenewRequest,
        now_ms: u64,
    ) {
        // The renewal handler reads claims and loads against the executor's namespace's shard
        // count (P18.1) and refuses loads it cannot take (I6) before anything is proposed; what
        // the simulated executors report always passes.
        let shard_count = self.replicas[manager]
            .shard_bound_for_executor(&executor_id)
            .unwrap_or(self.scenario.shards);
        if let Some(reported) = &request.loads {
            if let Err(error) = check_shard_loads(reported, shard_count) {
                panic!("a simulated executor reported loads the wire refuses: {error}");
            }
        }
        let loads: Report = request.loads.as_ref().map(|reported| {
            reported
                .iter()
                .map(|report| (report.shard, report.load))
                .collect()
        });
        let renewal = renewal_of(executor_id, request, shard_count);
        let renewer = Renewer { slot, call, loads };
        // P6.8: from cluster version 12 a renewal first waits for a confirmation round.
        if self.replicas[manager].cluster_version() >= LEASE_RESERVATION_SCHEMA {
            self.await_confirmation(renewal, renewer);
            return;
        }
        let command = Command::Renew {
            now_ms,
            renewals: vec![renewal],
        };
        self.propose(command, ReplyTo::Renew(vec![renewer]));
    }

    // ---- executors -------------------------------------------------------------------------
}
