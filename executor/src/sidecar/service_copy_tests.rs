//! The service copy's rules (PROTOCOL P16.1, P16.2), at injected instants.

use std::time::Duration;

use leasehold_api::wire::{LocalState, ShardEpoch};
use tokio::time::Instant;

use super::*;
use crate::admission::{AdmissionChange, AdmissionReason, AdmissionState, Assignment};

const LEASE: Duration = Duration::from_secs(3);

fn view(revision: u64, shards: &[(u32, u64)], lease_expiry: Instant) -> Assignment {
    Assignment {
        executor_id: Some("ex-1".into()),
        shard_count: Some(8),
        revision,
        shards: shards
            .iter()
            .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
            .collect(),
        admission: AdmissionState::Admitting,
        lease_expiry: Some(lease_expiry),
        stopping: false,
    }
}

fn changes(events: &[AdmissionEvent]) -> Vec<(AdmissionChange, u32, u64)> {
    events
        .iter()
        .map(|event| (event.change, event.shard, event.epoch))
        .collect()
}

const START: AdmissionChange = AdmissionChange::Start;
const STOP: AdmissionChange = AdmissionChange::Stop;

#[test]
fn p16_1_an_admitting_answer_gives_the_shards_for_the_lease_left() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let (permits, events) = copy.answer(&view(5, &[(1, 3), (4, 1)], t0 + LEASE), t0);
    assert_eq!(permits.state, LocalState::Admitting);
    assert_eq!(permits.revision, 5);
    assert_eq!(permits.lease_ttl_ms, 3_000);
    assert_eq!(permits.shard_count, Some(8));
    assert_eq!(permits.shards.len(), 2);
    assert_eq!(changes(&events), [(START, 1, 3), (START, 4, 1)]);
    assert!(events.iter().all(|event| event.at == t0));
    assert_eq!(copy.copy_end(), Some(t0 + LEASE));
    // Told again at the same epochs: nothing new in the log, the copy is extended.
    let t1 = t0 + Duration::from_secs(1);
    let (_, events) = copy.answer(&view(5, &[(1, 3), (4, 1)], t1 + LEASE), t1);
    assert!(events.is_empty());
    assert_eq!(copy.copy_end(), Some(t1 + LEASE));
}

#[test]
fn p16_1_states_other_than_admitting_give_nothing() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut lapsed = view(5, &[(1, 3)], t0);
    lapsed.admission = AdmissionState::Fenced;
    let (permits, events) = copy.answer(&lapsed, t0);
    assert_eq!(permits.state, LocalState::Fenced);
    assert_eq!((permits.lease_ttl_ms, permits.shards.len()), (0, 0));
    assert!(events.is_empty());
    // A view still marked admitting whose lease has run out is fenced too.
    let expired = view(5, &[(1, 3)], t0);
    assert_eq!(copy.answer(&expired, t0).0.state, LocalState::Fenced);
    let mut stopping = view(5, &[(1, 3)], t0 + LEASE);
    stopping.stopping = true;
    assert_eq!(copy.answer(&stopping, t0).0.state, LocalState::Stopping);
    let mut unregistered = view(0, &[], t0 + LEASE);
    unregistered.executor_id = None;
    let (permits, _) = copy.answer(&unregistered, t0);
    assert_eq!(
        (permits.state, permits.executor_id),
        (LocalState::Registering, None)
    );
}

#[test]
fn p16_2_a_dropped_shard_stays_told_until_the_service_acknowledges_a_later_answer() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    copy.answer(&view(5, &[(1, 3), (4, 1)], t0 + LEASE), t0);
    // The revoke of shard 4 raised the revision to 9.
    let t1 = t0 + Duration::from_millis(100);
    let (permits, events) = copy.answer(&view(9, &[(1, 3)], t1 + LEASE), t1);
    assert_eq!(permits.shards, [ShardEpoch { shard: 1, epoch: 3 }]);
    assert!(events.is_empty(), "the service may still admit shard 4");
    assert!(copy.is_told(4));
    // Acknowledging the earlier answer says nothing about the later one.
    let old = Answered {
        revision: 5,
        state: LocalState::Admitting,
    };
    assert!(copy.acknowledge(old, t1).is_empty());
    // An acknowledgement naming a revision never answered acknowledges nothing.
    let invented = Answered {
        revision: 10,
        state: LocalState::Admitting,
    };
    assert!(copy.acknowledge(invented, t1).is_empty());
    assert!(copy.is_told(4));
    let t2 = t1 + Duration::from_millis(50);
    let ack = Answered {
        revision: 9,
        state: LocalState::Admitting,
    };
    let events = copy.acknowledge(ack, t2);
    assert_eq!(changes(&events), [(STOP, 4, 1)]);
    assert_eq!(events[0].at, t2);
    assert_eq!(events[0].reason, AdmissionReason::Unassigned);
    assert!(!copy.is_told(4) && copy.is_told(1));
}

#[test]
fn p16_2_an_acknowledgement_must_name_the_state_of_the_answer_that_dropped_the_shards() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    copy.answer(&view(5, &[(1, 3)], t0 + LEASE), t0);
    let mut stopping = view(5, &[(1, 3)], t0 + LEASE);
    stopping.stopping = true;
    copy.answer(&stopping, t0);
    // The service acknowledges the admitting answer at the same revision: it may not have seen
    // `stopping` yet.
    let admitting = Answered {
        revision: 5,
        state: LocalState::Admitting,
    };
    assert!(copy.acknowledge(admitting, t0).is_empty());
    assert!(!copy.is_empty());
    let stopped = Answered {
        revision: 5,
        state: LocalState::Stopping,
    };
    let events = copy.acknowledge(stopped, t0);
    assert_eq!(events[0].reason, AdmissionReason::Shutdown);
    assert!(copy.is_empty());
}

#[test]
fn p16_2_without_an_acknowledgement_the_copy_ends_at_its_end() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    copy.answer(&view(5, &[(1, 3)], t0 + LEASE), t0);
    copy.answer(&view(9, &[], t0 + LEASE), t0);
    assert_eq!(copy.next_end(), Some(t0 + LEASE));
    assert!(copy
        .expire(t0 + LEASE - Duration::from_millis(1))
        .is_empty());
    let events = copy.expire(t0 + LEASE + Duration::from_millis(40));
    assert_eq!(changes(&events), [(STOP, 1, 3)]);
    assert_eq!(events[0].at, t0 + LEASE, "stamped at the copy's end");
    assert_eq!(events[0].reason, AdmissionReason::LeaseLapsed);
    assert!(copy.is_empty());
    assert_eq!(copy.next_end(), None);
}

#[test]
fn p16_1_told_again_after_a_drop_the_shard_is_the_services_again() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    copy.answer(&view(5, &[(1, 3)], t0 + LEASE), t0);
    copy.answer(&view(9, &[], t0 + LEASE), t0);
    // A newer set gave it back before the service acknowledged the drop: one interval.
    let (_, events) = copy.answer(&view(11, &[(1, 3)], t0 + LEASE), t0);
    assert!(events.is_empty());
    let ack = Answered {
        revision: 11,
        state: LocalState::Admitting,
    };
    assert!(copy.acknowledge(ack, t0).is_empty());
    assert!(copy.is_told(1));
}

#[test]
fn i2_a_new_epoch_ends_the_old_interval_and_starts_another() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    copy.answer(&view(5, &[(1, 3)], t0 + LEASE), t0);
    let (_, events) = copy.answer(&view(12, &[(1, 4)], t0 + LEASE), t0);
    assert_eq!(changes(&events), [(STOP, 1, 3), (START, 1, 4)]);
}

#[test]
fn p16_1_an_admit_permit_tells_the_shard_for_its_window() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let window = Duration::from_secs(1);
    let events = copy.permit("ex-1", 2, 7, t0 + window, t0);
    assert_eq!(changes(&events), [(START, 2, 7)]);
    assert!(copy.permit("ex-1", 2, 7, t0 + window, t0).is_empty());
    assert_eq!(copy.next_end(), Some(t0 + window));
    let events = copy.expire(t0 + window);
    assert_eq!(changes(&events), [(STOP, 2, 7)]);
}
