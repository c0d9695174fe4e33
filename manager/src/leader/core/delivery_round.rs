//! One delivery round as a pure core: the deliveries a round planned are sent at most
//! `max_in_flight` at a time, each answer is turned into what the leader does about it, and the
//! round ends when every delivery was answered (or timed out). The tokio shell
//! ([`super::deliver`]) and the simulator (`sim/`) both step a [`DeliveryRound`], so the
//! simulator's seeds exercise production's order of events.
//!
//! What an answer does (PROTOCOL §5):
//! - a push's outcome goes through the planner's backoff; a failed push queues its executor
//!   again for a full push (P5.3);
//! - a revoke reply that releases shards it asked for is an acknowledgement, committed as a
//!   `Release` (P5.2); an undelivered revoke, or one answered ignored, is resent by later rounds
//!   until the handoff completes.

use std::collections::VecDeque;

use leasehold_api::wire::RevokeReply;

use super::delivery_plan::{acknowledgement, Delivery, DeliveryPlanner, PushRecord};
use crate::lease::{Command, ExecutorId, ShardId};

/// The answer to one delivery, as the shell heard it.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivered {
    Pushed {
        executor_id: ExecutorId,
        ok: bool,
    },
    Revoked {
        executor_id: ExecutorId,
        requested: Vec<ShardId>,
        revision: u64,
        /// `None`: not delivered (refused, timed out, unreadable).
        reply: Option<RevokeReply>,
    },
}

/// What the leader does about one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterDelivery {
    /// A push's outcome, recorded; on `PushRecord::Failed` the executor is queued again.
    Pushed {
        executor_id: ExecutorId,
        record: PushRecord,
    },
    /// Commit this `Release` of `executor_id`'s shards (P5.2).
    Acknowledge {
        executor_id: ExecutorId,
        command: Command,
    },
    /// The revoke was not delivered: later rounds resend it.
    RevokeNotDelivered {
        executor_id: ExecutorId,
        revision: u64,
    },
    /// The revoke was answered without acknowledging anything it asked for.
    NothingAcknowledged {
        executor_id: ExecutorId,
        requested: Vec<ShardId>,
        revision: u64,
    },
}

/// The sending of one round's deliveries.
#[derive(Debug, Clone, Default)]
pub struct DeliveryRound {
    waiting: VecDeque<Delivery>,
    in_flight: usize,
    max_in_flight: usize,
}

impl DeliveryRound {
    /// A round sending `deliveries` in their order, at most `max_in_flight` at once. The bound
    /// is on what is in flight, not on what the round delivers: every planned delivery is sent.
    pub fn new(deliveries: Vec<Delivery>, max_in_flight: usize) -> Self {
        Self {
            waiting: deliveries.into(),
            in_flight: 0,
            max_in_flight: max_in_flight.max(1),
        }
    }

    /// The next delivery to send now, when the bound allows and one waits.
    pub fn next_to_send(&mut self) -> Option<Delivery> {
        if self.in_flight >= self.max_in_flight {
            return None;
        }
        let delivery = self.waiting.pop_front()?;
        self.in_flight += 1;
        Some(delivery)
    }

    /// One delivery in flight was answered (or timed out) at `now_ms`: what the leader does.
    pub fn answered(
        &mut self,
        planner: &mut DeliveryPlanner,
        delivered: Delivered,
        now_ms: u64,
    ) -> AfterDelivery {
        self.in_flight = self.in_flight.saturating_sub(1);
        match delivered {
            Delivered::Pushed { executor_id, ok } => {
                let record = planner.push_outcome(&executor_id, ok, now_ms);
                AfterDelivery::Pushed {
                    executor_id,
                    record,
                }
            }
            Delivered::Revoked {
                executor_id,
                revision,
                reply: None,
                ..
            } => AfterDelivery::RevokeNotDelivered {
                executor_id,
                revision,
            },
            Delivered::Revoked {
                executor_id,
                requested,
                revision,
                reply: Some(reply),
            } => match acknowledgement(&executor_id, &requested, revision, &reply, now_ms) {
                Some(command) => AfterDelivery::Acknowledge {
                    executor_id,
                    command,
                },
                None => AfterDelivery::NothingAcknowledged {
                    executor_id,
                    requested,
                    revision,
                },
            },
        }
    }

    /// Deliveries sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Every delivery of the round was sent and answered.
    pub fn is_over(&self) -> bool {
        self.waiting.is_empty() && self.in_flight == 0
    }
}
