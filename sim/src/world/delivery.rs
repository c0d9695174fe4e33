//! The leader's delivery rounds as simulated: sets pushed and revokes resent (P5.3), and what a
//! deposed leader still holds and sends (P6.4).

use super::leader::answer_message;
use super::*;

impl World {
    // ---- deliveries ------------------------------------------------------------------------

    pub(super) fn delivery_round(&mut self, term: u64) {
        let now_us = self.now_us;
        let Some(leader) = active(&mut self.leader, term) else {
            return;
        };
        if leader.round.is_some() {
            // Production's wake-up arrives while the round runs, and the next round follows it
            // at once.
            leader.round_again = true;
            return;
        }
        let manager = leader.manager;
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        let queued = std::mem::take(&mut leader.pending_pushes);
        let round = leader
            .planner
            .plan_round(&self.replicas[manager], queued, now_ms);
        leader.pending_pushes.extend(round.deferred_pushes);
        leader.round = Some(DeliveryRound::new(
            round.deliveries,
            self.scenario.max_deliveries_in_flight,
        ));
        self.fill_round(term);
    }

    /// Sends what the round lets go now; when the round is over, schedules the next one.
    pub(super) fn fill_round(&mut self, term: u64) {
        loop {
            let Some(leader) = active(&mut self.leader, term) else {
                return;
            };
            let Some(delivery) = leader.round.as_mut().and_then(DeliveryRound::next_to_send) else {
                break;
            };
            self.send_delivery(term, delivery);
        }
        let now_us = self.now_us;
        let Some(leader) = active(&mut self.leader, term) else {
            return;
        };
        if leader.round.as_ref().is_some_and(DeliveryRound::is_over) {
            leader.round = None;
            if std::mem::take(&mut leader.round_again) {
                self.schedule(now_us, Event::DeliveryRound { term });
            } else {
                let at = now_us + ROUND_INTERVAL_MS * 1_000;
                self.schedule_timer(at, Event::DeliveryRound { term });
            }
        }
    }

    pub(super) fn send_delivery(&mut self, term: u64, delivery: Delivery) {
        let id = self.next_delivery;
        self.next_delivery += 1;
        let (address, kind, message) = match delivery {
            Delivery::Push {
                executor_id,
                address,
                body,
            } => (
                address,
                InflightKind::Push { executor_id },
                Message::Push {
                    delivery: id,
                    push: body,
                },
            ),
            Delivery::Revoke {
                executor_id,
                address,
                body,
            } => (
                address,
                InflightKind::Revoke {
                    executor_id,
                    requested: body.shards.clone(),
                    revision: body.revision,
                },
                Message::Revoke {
                    delivery: id,
                    revoke: body,
                },
            ),
        };
        if let Some(leader) = self.leader.as_mut().filter(|l| l.term == term) {
            leader.round_in_flight.insert(id, Inflight { kind });
        }
        // An address that names no executor is answered by the timeout, as a refused
        // connection is.
        if let Some(slot) = Self::slot_of(&address) {
            self.send_to_executor(slot, message);
        }
        self.schedule(
            self.now_us + DELIVERY_TIMEOUT_US,
            Event::DeliveryTimeout { term, delivery: id },
        );
    }

    /// A delivery's answer (or its timeout, `None` for both fields).
    pub(super) fn delivered(
        &mut self,
        term: u64,
        delivery: u64,
        push_ok: Option<bool>,
        revoke: Option<Option<RevokeReply>>,
    ) {
        let now_us = self.now_us;
        let Some(leader) = active(&mut self.leader, term) else {
            return;
        };
        let Some(inflight) = leader.round_in_flight.remove(&delivery) else {
            return;
        };
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        let delivered = match inflight.kind {
            InflightKind::Push { executor_id } => Delivered::Pushed {
                executor_id,
                ok: push_ok.unwrap_or(false),
            },
            InflightKind::Revoke {
                executor_id,
                requested,
                revision,
            } => Delivered::Revoked {
                executor_id,
                requested,
                revision,
                reply: revoke.flatten(),
            },
        };
        let Some(round) = leader.round.as_mut() else {
            return;
        };
        match round.answered(&mut leader.planner, delivered, now_ms) {
            AfterDelivery::Pushed {
                executor_id,
                record: PushRecord::Failed { .. },
            } => {
                leader.pending_pushes.insert(executor_id);
            }
            AfterDelivery::Acknowledge { command, .. } => self.propose(command, ReplyTo::Nobody),
            _ => {}
        }
        self.fill_round(term);
    }

    pub(super) fn deposed_round(&mut self, term: u64) {
        let now_us = self.now_us;
        let Some(position) = self.deposed.iter().position(|d| d.term == term) else {
            return;
        };
        if self.deposed[position].until_us <= now_us {
            self.deposed_learns(position);
            return;
        }
        if self.deposed[position].leads_nothing_from_us <= now_us {
            self.deposed_fails_what_it_holds(position);
        }
        let (offset_ms, rate_ppm) = (
            self.deposed[position].offset_ms,
            self.deposed[position].rate_ppm,
        );
        let now_ms = self.leader_clock_ms(offset_ms, rate_ppm);
        let deposed = &mut self.deposed[position];
        let everyone: Vec<String> = deposed.state.executors().map(|e| e.id.clone()).collect();
        let round = deposed.planner.plan_round(&deposed.state, everyone, now_ms);
        for delivery in round.deliveries {
            // Its answers go nowhere: the deposed leader can no longer commit anything.
            let id = self.next_delivery;
            self.next_delivery += 1;
            let (address, message) = match delivery {
                Delivery::Push { address, body, .. } => (
                    address,
                    Message::Push {
                        delivery: id,
                        push: body,
                    },
                ),
                Delivery::Revoke { address, body, .. } => (
                    address,
                    Message::Revoke {
                        delivery: id,
                        revoke: body,
                    },
                ),
            };
            if let Some(slot) = Self::slot_of(&address) {
                self.send_from_deposed(slot, message);
            }
        }
        self.schedule_timer(
            now_us + ROUND_INTERVAL_MS * 1_000,
            Event::DeposedRound { term },
        );
    }

    /// A request from a stranded slot reaches the deposed leader of `term`. A renewal waits
    /// for a round started after it arrived, as the core says (P6.5); no follower hears those
    /// rounds, so a correct build answers none. What would need a commit waits too, until no
    /// quorum has been heard for a Raft lease: from then on it leads nothing and fails every
    /// call at once (P8.4). Answers to its pushes go nowhere.
    pub(super) fn deposed_receives(&mut self, term: u64, slot: Slot, request: Request) {
        let position = self
            .deposed
            .iter()
            .position(|d| d.term == term && d.leads_nothing_from_us > self.now_us);
        let Some(position) = position else {
            // It learned of the newer term meanwhile, or heard no quorum for a lease: no
            // leader here.
            if let Some(call) = request_call(&request) {
                self.send_from_deposed(slot, Message::CallFailed { call });
            }
            return;
        };
        let now_ms = {
            let deposed = &self.deposed[position];
            self.leader_clock_ms(deposed.offset_ms, deposed.rate_ppm)
        };
        let deposed = &mut self.deposed[position];
        let from_memory = deposed.state.cluster_version() >= LEASE_RESERVATION_SCHEMA;
        match request {
            Request::Renew {
                call,
                executor_id,
                request,
            } if from_memory => {
                let shard_count = deposed
                    .state
                    .shard_bound_for_executor(&executor_id)
                    .unwrap_or(self.scenario.shards);
                let renewal = renewal_of(executor_id, &request, shard_count);
                let needed = deposed.confirmation.needs();
                self.coverage.renewals_at_a_deposed_leader += 1;
                if !deposed.confirmation.is_confirmed(needed) {
                    if !deposed.confirmation.round_under_way() {
                        // Its heartbeats reach no follower across the partition.
                        deposed.confirmation.start_round();
                    }
                    let renewer = Renewer {
                        slot,
                        call,
                        loads: None,
                    };
                    deposed
                        .awaiting_confirmation
                        .push((needed, renewal, renewer));
                    return;
                }
                // Only a build that breaks P6.5 gets here.
                match deposed.memory.answer(&deposed.state, &renewal, now_ms) {
                    Ok(result) => self.send_from_deposed(slot, answer_message(call, &result)),
                    Err(_) => deposed.held_calls.push((slot, call)),
                }
            }
            request => {
                if let Some(call) = request_call(&request) {
                    deposed.held_calls.push((slot, call));
                }
            }
        }
    }

    /// The deposed leader at `position` hears of the newer term (its partition heals): it
    /// fails every call it held, and its stranded executors reach the new leader again.
    pub(super) fn deposed_learns(&mut self, position: usize) {
        self.deposed_fails_what_it_holds(position);
        let mut deposed = self.deposed.remove(position);
        deposed.confirmation.superseded();
    }

    /// The deposed leader at `position` fails every call it holds: it learned of the newer
    /// term, or heard no quorum for a Raft lease (P8.4).
    pub(super) fn deposed_fails_what_it_holds(&mut self, position: usize) {
        let deposed = &mut self.deposed[position];
        let calls: Vec<(Slot, u64)> = std::mem::take(&mut deposed.held_calls)
            .into_iter()
            .chain(
                std::mem::take(&mut deposed.awaiting_confirmation)
                    .into_iter()
                    .map(|(_, _, renewer)| (renewer.slot, renewer.call)),
            )
            .collect();
        for (slot, call) in calls {
            self.send_from_deposed(slot, Message::CallFailed { call });
        }
    }
}
