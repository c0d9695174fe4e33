//! One round's sending ([`DeliveryRound`]), which the delivery task and the simulator both step.

use leasehold_api::wire::{AssignmentPush, RevokeReply};

use crate::leader::core::delivery_plan::{
    Delivery, DeliveryPlanner, PushRecord, PUSH_RETRY_FIRST_MS,
};
use crate::leader::core::delivery_round::{AfterDelivery, Delivered, DeliveryRound};
use crate::lease::Command;

fn push(executor_id: &str) -> Delivery {
    Delivery::Push {
        executor_id: executor_id.to_owned(),
        address: format!("http://{executor_id}:1"),
        body: AssignmentPush {
            generation: 0,
            executor_id: executor_id.to_owned(),
            revision: 1,
            shard_count: 4,
            shards: Vec::new(),
            secondaries: Vec::new(),
        },
    }
}

fn pushed(executor_id: &str, ok: bool) -> Delivered {
    Delivered::Pushed {
        executor_id: executor_id.to_owned(),
        ok,
    }
}

/// Every planned delivery is sent, never more than the bound at once, and the round is over only
/// when every one was answered.
#[test]
fn a_round_sends_everything_at_most_the_bound_at_once() {
    let mut planner = DeliveryPlanner::default();
    let mut round = DeliveryRound::new(vec![push("a"), push("b"), push("c")], 2);
    assert_eq!(round.next_to_send(), Some(push("a")));
    assert_eq!(round.next_to_send(), Some(push("b")));
    assert_eq!(round.next_to_send(), None, "two in flight: the bound");
    round.answered(&mut planner, pushed("a", true), 0);
    assert_eq!(round.next_to_send(), Some(push("c")));
    round.answered(&mut planner, pushed("b", true), 0);
    assert!(!round.is_over(), "c is in flight");
    round.answered(&mut planner, pushed("c", true), 0);
    assert!(round.is_over());
    assert_eq!(round.next_to_send(), None);
}

/// P5.3: a failed push goes through the planner's backoff and is queued again; a success after
/// it is a repair.
#[test]
fn p5_3_a_failed_push_is_queued_again_and_its_success_repairs() {
    let mut planner = DeliveryPlanner::default();
    let mut round = DeliveryRound::new(vec![push("a"), push("a")], 4);
    round.next_to_send();
    round.next_to_send();
    assert_eq!(
        round.answered(&mut planner, pushed("a", false), 10),
        AfterDelivery::Pushed {
            executor_id: "a".to_owned(),
            record: PushRecord::Failed {
                retry_in_ms: PUSH_RETRY_FIRST_MS
            }
        }
    );
    assert_eq!(
        round.answered(&mut planner, pushed("a", true), 20),
        AfterDelivery::Pushed {
            executor_id: "a".to_owned(),
            record: PushRecord::Repaired
        }
    );
}

/// P5.2: a revoke reply that released shards it asked for is an acknowledgement, committed as a
/// `Release` of those shards only; an undelivered revoke and an ignored answer acknowledge
/// nothing.
#[test]
fn p5_2_only_a_reply_releasing_what_was_asked_is_an_acknowledgement() {
    let mut planner = DeliveryPlanner::default();
    let mut round = DeliveryRound::new(Vec::new(), 4);
    let revoked = |reply: Option<RevokeReply>| Delivered::Revoked {
        executor_id: "a".to_owned(),
        requested: vec![1, 2],
        revision: 7,
        reply,
    };
    let after = round.answered(
        &mut planner,
        revoked(Some(RevokeReply {
            revision: 7,
            released: vec![2, 3],
            ignored: false,
        })),
        50,
    );
    assert_eq!(
        after,
        AfterDelivery::Acknowledge {
            executor_id: "a".to_owned(),
            command: Command::Release {
                now_ms: 50,
                executor_id: "a".to_owned(),
                shards: vec![2],
                revoke_revision: 7,
            }
        }
    );
    assert_eq!(
        round.answered(&mut planner, revoked(None), 50),
        AfterDelivery::RevokeNotDelivered {
            executor_id: "a".to_owned(),
            revision: 7
        }
    );
    assert!(matches!(
        round.answered(
            &mut planner,
            revoked(Some(RevokeReply {
                revision: 7,
                released: vec![1],
                ignored: true,
            })),
            50,
        ),
        AfterDelivery::NothingAcknowledged { .. }
    ));
}
