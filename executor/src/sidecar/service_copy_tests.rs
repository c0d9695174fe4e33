//! The service copy's rules (PROTOCOL P16.1, P16.2), at injected instants.

use std::time::Duration;

use leasehold_api::wire::{LocalPermits, LocalState, Role, ShardEpoch};
use tokio::time::Instant;

use super::*;
use crate::admission::{AdmissionChange, AdmissionReason, AdmissionState, Assignment};
use crate::assignment::Layout;

const LEASE: Duration = Duration::from_secs(3);

/// The layout of the views below: 8 shards, never resharded.
const L8: Layout = Layout {
    shard_count: 8,
    generation: 0,
};

fn view(revision: u64, shards: &[(u32, u64)], lease_expiry: Instant) -> Assignment {
    Assignment {
        generation: 0,
        executor_id: Some("ex-1".into()),
        shard_count: Some(8),
        revision,
        shards: shards
            .iter()
            .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
            .collect(),
        secondaries: Vec::new(),
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

/// A poller's chain as a test drives it: its next token, and the chain its acknowledgements
/// continue.
#[derive(Debug, Default)]
struct Poller {
    chain: Option<Chain>,
    /// The token and identity of the last answer it received.
    last: Option<(u128, Answered)>,
}

impl Poller {
    /// The poller's next answer; each token is new.
    fn answer(
        &mut self,
        copy: &mut ServiceCopy,
        view: &Assignment,
        now: Instant,
    ) -> (LocalPermits, Vec<AdmissionEvent>) {
        let token = rand::random::<u128>();
        let (permits, _, events) = copy.answer(
            view,
            now,
            Recipient::Poller {
                token,
                chain: self.chain,
                arrived: now,
            },
        );
        assert_eq!(permits.token, Some(format!("{token:032x}")));
        self.last = Some((
            token,
            Answered {
                revision: permits.revision,
                state: permits.state,
            },
        ));
        (permits, events)
    }

    /// Acknowledges the last answer it received, as its next poll does.
    fn acknowledge(&mut self, copy: &mut ServiceCopy, now: Instant) -> Vec<AdmissionEvent> {
        let (token, answered) = self.last.unwrap();
        let (chain, events) = copy.acknowledge(Ack { answered, token }, now).unwrap();
        self.chain = Some(chain);
        events
    }
}

fn answered(revision: u64, state: LocalState) -> Answered {
    Answered { revision, state }
}

#[test]
fn p16_1_an_admitting_answer_gives_the_shards_for_the_lease_left() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    let (permits, events) = service.answer(&mut copy, &view(5, &[(1, 3), (4, 1)], t0 + LEASE), t0);
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
    service.acknowledge(&mut copy, t1);
    let (_, events) = service.answer(&mut copy, &view(5, &[(1, 3), (4, 1)], t1 + LEASE), t1);
    assert!(events.is_empty());
    assert_eq!(copy.copy_end(), Some(t1 + LEASE));
}

#[test]
fn p16_1_states_other_than_admitting_give_nothing() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    let mut lapsed = view(5, &[(1, 3)], t0);
    lapsed.admission = AdmissionState::Fenced;
    let (permits, events) = service.answer(&mut copy, &lapsed, t0);
    assert_eq!(permits.state, LocalState::Fenced);
    assert_eq!((permits.lease_ttl_ms, permits.shards.len()), (0, 0));
    assert!(events.is_empty());
    // A view still marked admitting whose lease has run out is fenced too.
    let expired = view(5, &[(1, 3)], t0);
    assert_eq!(
        service.answer(&mut copy, &expired, t0).0.state,
        LocalState::Fenced
    );
    let mut stopping = view(5, &[(1, 3)], t0 + LEASE);
    stopping.stopping = true;
    assert_eq!(
        service.answer(&mut copy, &stopping, t0).0.state,
        LocalState::Stopping
    );
    let mut unregistered = view(0, &[], t0 + LEASE);
    unregistered.executor_id = None;
    let (permits, _) = service.answer(&mut copy, &unregistered, t0);
    assert_eq!(
        (permits.state, permits.executor_id),
        (LocalState::Registering, None)
    );
}

#[test]
fn p16_2_a_dropped_shard_stays_told_until_the_service_acknowledges_a_later_answer() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3), (4, 1)], t0 + LEASE), t0);
    let (old_token, _) = service.last.unwrap();
    service.acknowledge(&mut copy, t0);
    // The revoke of shard 4 raised the revision to 9.
    let t1 = t0 + Duration::from_millis(100);
    let (permits, events) = service.answer(&mut copy, &view(9, &[(1, 3)], t1 + LEASE), t1);
    assert_eq!(permits.shards, [ShardEpoch { shard: 1, epoch: 3 }]);
    assert!(events.is_empty(), "the service may still admit shard 4");
    assert!(copy.is_told(4, L8));
    // Acknowledging the earlier answer says nothing about the later one.
    let (_, events) = copy
        .acknowledge(
            Ack {
                answered: answered(5, LocalState::Admitting),
                token: old_token,
            },
            t1,
        )
        .unwrap();
    assert!(events.is_empty());
    // The later answer's revision with the earlier answer's token, a token never given, and the
    // later answer's token without its revision acknowledge nothing.
    let (token, later) = service.last.unwrap();
    let refusals = [
        (later, old_token, NotAcknowledged::Mismatched),
        (later, token ^ 1, NotAcknowledged::UnknownToken),
        (
            answered(10, LocalState::Admitting),
            token,
            NotAcknowledged::Mismatched,
        ),
    ];
    for (answered, token, refusal) in refusals {
        assert_eq!(copy.acknowledge(Ack { answered, token }, t1), Err(refusal));
    }
    assert!(copy.is_told(4, L8));
    let t2 = t1 + Duration::from_millis(50);
    let events = service.acknowledge(&mut copy, t2);
    assert_eq!(changes(&events), [(STOP, 4, 1)]);
    assert_eq!(events[0].at, t2);
    assert_eq!(events[0].reason, AdmissionReason::Unassigned);
    assert!(!copy.is_told(4, L8) && copy.is_told(1, L8));
}

#[test]
fn p16_2_an_acknowledgement_must_name_the_state_of_the_answer_that_dropped_the_shards() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    let admitting = service.last.unwrap();
    service.acknowledge(&mut copy, t0);
    let mut stopping = view(5, &[(1, 3)], t0 + LEASE);
    stopping.stopping = true;
    service.answer(&mut copy, &stopping, t0);
    // The service acknowledges the admitting answer at the same revision: it may not have seen
    // `stopping` yet.
    let (_, events) = copy
        .acknowledge(
            Ack {
                answered: admitting.1,
                token: admitting.0,
            },
            t0,
        )
        .unwrap();
    assert!(events.is_empty());
    assert!(!copy.is_empty());
    let events = service.acknowledge(&mut copy, t0);
    assert_eq!(events[0].reason, AdmissionReason::Shutdown);
    assert!(copy.is_empty());
}

#[test]
fn p16_2_without_an_acknowledgement_the_copy_ends_at_its_end() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    service.acknowledge(&mut copy, t0);
    service.answer(&mut copy, &view(9, &[], t0 + LEASE), t0);
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
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    service.acknowledge(&mut copy, t0);
    service.answer(&mut copy, &view(9, &[], t0 + LEASE), t0);
    // A newer set gave it back before the service acknowledged the drop: one interval.
    let (_, events) = service.answer(&mut copy, &view(11, &[(1, 3)], t0 + LEASE), t0);
    assert!(events.is_empty());
    assert!(service.acknowledge(&mut copy, t0).is_empty());
    assert!(copy.is_told(1, L8));
}

#[test]
fn i2_a_new_epoch_ends_the_old_interval_and_starts_another() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    let (_, events) = service.answer(&mut copy, &view(12, &[(1, 4)], t0 + LEASE), t0);
    assert_eq!(changes(&events), [(STOP, 1, 3), (START, 1, 4)]);
}

#[test]
fn p16_1_an_admit_permit_tells_the_shard_for_its_window() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let window = Duration::from_secs(1);
    let events = copy.permit("ex-1", L8, 2, 7, Role::Primary, t0 + window, t0);
    assert_eq!(changes(&events), [(START, 2, 7)]);
    assert!(copy
        .permit("ex-1", L8, 2, 7, Role::Primary, t0 + window, t0)
        .is_empty());
    assert_eq!(copy.next_end(), Some(t0 + window));
    let events = copy.expire(t0 + window);
    assert_eq!(changes(&events), [(STOP, 2, 7)]);
}

/// P19.5, P16.2: a secondary's permit is told apart from the primary's shards: logged with its
/// role, and ended by its window only. Nothing of the primary's handoff waits for it (it is not
/// told as the primary, so neither a revoke nor a renewal claim nor the graceful stop sees it),
/// and an answer that drops the primary's shard does not end it.
#[test]
fn p19_5_a_secondarys_permit_is_held_apart_and_ended_by_its_window() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    let window = Duration::from_secs(1);
    // Shard 1 at epoch 3 as the primary; shard 4 as a secondary.
    let events = copy.permit("ex-1", L8, 4, 3, Role::Secondary, t0 + window, t0);
    let roles: Vec<(AdmissionChange, u32, Role)> = events
        .iter()
        .map(|event| (event.change, event.shard, event.role))
        .collect();
    assert_eq!(roles, [(START, 4, Role::Secondary)]);
    assert_eq!(copy.told(L8), [ShardEpoch { shard: 1, epoch: 3 }]);
    assert!(!copy.is_told(4, L8));
    assert_eq!(copy.told_secondary(L8), [ShardEpoch { shard: 4, epoch: 3 }]);
    // After a demotion (shard 1 revoked, then placed here as a secondary) the service may still
    // hold the primary's copy while it is given a secondary's permit: each role has its own
    // interval.
    assert_eq!(
        copy.permit("ex-1", L8, 1, 3, Role::Secondary, t0 + window, t0)
            .iter()
            .map(|event| event.role)
            .collect::<Vec<_>>(),
        [Role::Secondary],
        "a role of its own, not a second start of the primary"
    );
    // The service acknowledges an answer without shard 1: its primary ends, its secondary
    // permit runs on.
    let t1 = t0 + Duration::from_millis(100);
    service.acknowledge(&mut copy, t0);
    service.answer(&mut copy, &view(6, &[], t1 + LEASE), t1);
    let events = service.acknowledge(&mut copy, t1);
    assert_eq!(changes(&events), [(STOP, 1, 3)]);
    assert!(events.iter().all(|event| event.role == Role::Primary));
    assert!(copy.is_empty(), "nothing told as the primary");
    assert_eq!(copy.next_end(), Some(t0 + window));
    let events = copy.expire(t0 + window);
    assert_eq!(changes(&events), [(STOP, 1, 3), (STOP, 4, 3)]);
    assert!(events.iter().all(|event| event.role == Role::Secondary));
    assert!(copy.told_secondary(L8).is_empty());
}

/// P16.1, I1 (issue 55): another poller, a page's requests or any process that can reach the local
/// API, receives its own answers and tokens; its acknowledgements end its own holds, never the
/// service's, which ends when the service acknowledged a later answer.
#[test]
fn p16_1_an_acknowledgement_counts_only_for_the_poller_that_received_the_answer() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    let mut other = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3), (4, 1)], t0 + LEASE), t0);
    service.acknowledge(&mut copy, t0);
    // Shard 4 is revoked at revision 9; the other poller is answered first, and acknowledges.
    let t1 = t0 + Duration::from_millis(100);
    other.answer(&mut copy, &view(9, &[(1, 3)], t1 + LEASE), t1);
    assert!(other.acknowledge(&mut copy, t1).is_empty());
    assert!(copy.is_told(4, L8), "the service still admits shard 4");
    // An admit permit for a shard still held is no acknowledgement either.
    copy.permit(
        "ex-1",
        L8,
        1,
        3,
        Role::Primary,
        t1 + Duration::from_secs(1),
        t1,
    );
    assert!(copy.is_told(4, L8));
    let t2 = t1 + Duration::from_millis(100);
    service.answer(&mut copy, &view(9, &[(1, 3)], t2 + LEASE), t2);
    let events = service.acknowledge(&mut copy, t2);
    assert_eq!(changes(&events), [(STOP, 4, 1)]);
    assert_eq!(events[0].at, t2);
}

/// P16.1: the tokens of the last RECENT_ANSWERS answers are kept, answers to polls that
/// acknowledged nothing forgotten first. Past that, a poller's token is not an acknowledgement,
/// and what it was given ends when its copy does, never earlier.
#[test]
fn p16_1_a_token_pushed_out_by_other_answers_acknowledges_nothing_and_the_copy_runs_out() {
    let t0 = Instant::now();
    for others_acknowledge in [false, true] {
        let mut copy = ServiceCopy::default();
        let mut service = Poller::default();
        service.answer(&mut copy, &view(5, &[(1, 3), (4, 1)], t0 + LEASE), t0);
        service.acknowledge(&mut copy, t0);
        service.answer(&mut copy, &view(9, &[(1, 3)], t0 + LEASE), t0);
        for _ in 0..10 * RECENT_ANSWERS {
            let mut other = Poller::default();
            other.answer(&mut copy, &view(9, &[(1, 3)], t0 + LEASE), t0);
            if others_acknowledge {
                other.acknowledge(&mut copy, t0);
                other.answer(&mut copy, &view(9, &[(1, 3)], t0 + LEASE), t0);
            }
        }
        if !others_acknowledge {
            // First polls (a new chain each) push out only each other's answers.
            let events = service.acknowledge(&mut copy, t0);
            assert_eq!(changes(&events), [(STOP, 4, 1)]);
            continue;
        }
        let (token, answered) = service.last.unwrap();
        assert_eq!(
            copy.acknowledge(Ack { answered, token }, t0),
            Err(NotAcknowledged::UnknownToken)
        );
        assert!(copy.is_told(4, L8));
        assert!(copy
            .expire(t0 + LEASE - Duration::from_millis(1))
            .is_empty());
        let events = copy.expire(t0 + LEASE);
        assert_eq!(changes(&events), [(STOP, 1, 3), (STOP, 4, 1)]);
    }
}

/// P16.1: a pushed answer (`--app-url`) carries no token; its `2xx` acknowledges it, and ends no
/// poller's hold.
#[test]
fn p16_1_a_push_is_acknowledged_by_its_2xx() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut poller = Poller::default();
    poller.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    poller.acknowledge(&mut copy, t0);
    let (permits, pushed, _) = copy.answer(&view(5, &[(1, 3)], t0 + LEASE), t0, Recipient::Pushed);
    assert_eq!(permits.token, None);
    let (_, dropped, _) = copy.answer(&view(9, &[], t0 + LEASE), t0, Recipient::Pushed);
    assert!(copy.acknowledge_push(pushed, t0).is_empty());
    assert!(
        copy.acknowledge_push(dropped, t0).is_empty(),
        "the poller's hold remains"
    );
    assert!(copy.is_told(1, L8));
    poller.answer(&mut copy, &view(9, &[], t0 + LEASE), t0);
    assert_eq!(changes(&poller.acknowledge(&mut copy, t0)), [(STOP, 1, 3)]);
}

/// P16.1: a poller's long poll is answered by half the time left on its own copy, not on a later
/// one given to another poller.
#[test]
fn p16_1_each_poller_has_its_own_copy_end() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    service.acknowledge(&mut copy, t0);
    service.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    let chain = service.chain.unwrap();
    // A renewal later, another poller is given a longer copy.
    let t1 = t0 + Duration::from_secs(1);
    Poller::default().answer(&mut copy, &view(6, &[(1, 3)], t1 + LEASE), t1);
    assert_eq!(copy.copy_end(), Some(t1 + LEASE));
    assert_eq!(copy.poller_copy_end(Some(chain)), Some(t0 + LEASE));
}

/// P16.1: a poller anchors its copy at its poll's send, so the sidecar counts the copy from the
/// poll's arrival (no earlier than the send), not from its answer: a poll held 1.4 s gets an
/// answer whose copy ends, for its poller, 1.4 s before the answer's instant plus its
/// `lease_ttl_ms`. The hold a revoke waits for still ends at the later instant, the end of
/// `lease_expires_monotonic_ns`, which the poller may keep to instead.
#[test]
fn p16_1_a_pollers_copy_counts_from_its_polls_arrival() {
    let t0 = Instant::now();
    let held = Duration::from_millis(1_400);
    let answered_at = t0 + held;
    let mut copy = ServiceCopy::default();
    let (permits, _, _) = copy.answer(
        &view(5, &[(1, 3)], answered_at + LEASE),
        answered_at,
        Recipient::Poller {
            token: 7,
            chain: None,
            arrived: t0,
        },
    );
    assert_eq!(permits.lease_ttl_ms, 3_000);
    assert_eq!(copy.poller_copy_end(None), Some(t0 + LEASE));
    assert_eq!(copy.copy_end(), Some(answered_at + LEASE));
    assert!(
        copy.expire(t0 + LEASE).is_empty(),
        "a revoke waits for the end counted from the answer"
    );
    assert_eq!(changes(&copy.expire(answered_at + LEASE)), [(STOP, 1, 3)]);
}

/// P16.2: when the sidecar exits, each shard the service may still be admitting stops at the
/// end of the last copy given for it (a poller's, or a permit's window), the latest the service
/// may admit it; a shard dropped by an answer not yet acknowledged is among them.
#[test]
fn p16_2_at_exit_each_shard_told_stops_at_the_end_of_its_last_copy() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(1);
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 3), (2, 4)], t0 + LEASE), t0);
    service.acknowledge(&mut copy, t1);
    service.answer(&mut copy, &view(6, &[(1, 3)], t1 + LEASE), t1);
    let permit_window = Duration::from_millis(800);
    copy.permit("ex-1", L8, 5, 2, Role::Primary, t1 + permit_window, t1);
    let stops: Vec<(u32, u64, AdmissionChange, Instant, AdmissionReason)> = copy
        .end_at_exit()
        .into_iter()
        .map(|event| {
            (
                event.shard,
                event.epoch,
                event.change,
                event.at,
                event.reason,
            )
        })
        .collect();
    let lapsed = AdmissionReason::LeaseLapsed;
    assert_eq!(
        stops,
        [
            (1, 3, STOP, t1 + LEASE, lapsed),
            (2, 4, STOP, t0 + LEASE, lapsed),
            (5, 2, STOP, t1 + permit_window, lapsed),
        ]
    );
    assert!(copy.is_empty());
    assert!(copy.end_at_exit().is_empty(), "each stop is logged once");
}

/// I2 as the service sees it: a shard told anew at another epoch ends the old interval and
/// starts the new one, and a second poller told the old epoch still holds the shard's keys
/// until it too applies an answer without them.
#[test]
fn p16_2_a_new_epoch_keeps_the_other_pollers_holds() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let (mut first, mut second) = (Poller::default(), Poller::default());
    first.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    second.answer(&mut copy, &view(5, &[(1, 3)], t0 + LEASE), t0);
    first.acknowledge(&mut copy, t0);
    let (_, events) = first.answer(&mut copy, &view(12, &[(1, 4)], t0 + LEASE), t0);
    assert_eq!(changes(&events), [(STOP, 1, 3), (START, 1, 4)]);
    // The first poller drops the shard and acknowledges: the second still holds it.
    first.acknowledge(&mut copy, t0);
    first.answer(&mut copy, &view(13, &[], t0 + LEASE), t0);
    first.acknowledge(&mut copy, t0);
    assert!(copy.is_told(1, L8), "the second poller may still admit it");
    second.acknowledge(&mut copy, t0);
    second.answer(&mut copy, &view(13, &[], t0 + LEASE), t0);
    assert_eq!(changes(&second.acknowledge(&mut copy, t0)), [(STOP, 1, 4)]);
    assert!(!copy.is_told(1, L8));
}

/// A view of `generation`'s layout of `shard_count` shards.
fn view_in(
    generation: u64,
    shard_count: u32,
    revision: u64,
    shards: &[(u32, u64)],
    lease_expiry: Instant,
) -> Assignment {
    Assignment {
        generation,
        shard_count: Some(shard_count),
        ..view(revision, shards, lease_expiry)
    }
}

fn layouts(events: &[AdmissionEvent]) -> Vec<(AdmissionChange, u32, u64, u64, u32)> {
    events
        .iter()
        .map(|event| {
            let layout = event.layout;
            let (change, shard, epoch) = (event.change, event.shard, event.epoch);
            (change, shard, epoch, layout.generation, layout.shard_count)
        })
        .collect()
}

const L16: Layout = Layout {
    shard_count: 16,
    generation: 1,
};

/// P20.3 through a sidecar: the service maps keys by the answer it applied, so a parent told
/// before a split holds the keys of both children, a revoke of either and the renewals' claims
/// see it, until the service acknowledges an answer of the new layout; the log numbers each
/// interval in its own layout.
#[test]
fn p20_3_a_parent_told_before_a_split_holds_both_children_until_acknowledged() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    service.answer(&mut copy, &view(5, &[(1, 1), (2, 1)], t0 + LEASE), t0);
    service.acknowledge(&mut copy, t0);
    // The sidecar applied the split's set (shards 1, 2, 9, 10 of 16 at epoch 2); the service
    // has not polled since: it admits shards 1 and 2 of 8, the keys of all four children.
    assert_eq!(
        copy.told(L16),
        [(1, 1), (2, 1), (9, 1), (10, 1)].map(|(shard, epoch)| ShardEpoch { shard, epoch })
    );
    assert!(copy.is_told(9, L16) && copy.is_told(10, L16));
    assert!(!copy.is_told(3, L16) && !copy.is_told(11, L16));
    let split = view_in(1, 16, 20, &[(1, 2), (2, 2), (9, 2), (10, 2)], t0 + LEASE);
    let (permits, events) = service.answer(&mut copy, &split, t0);
    assert_eq!((permits.shard_count, permits.generation), (Some(16), 1));
    assert_eq!(
        layouts(&events),
        [
            (START, 1, 2, 1, 16),
            (START, 2, 2, 1, 16),
            (START, 9, 2, 1, 16),
            (START, 10, 2, 1, 16)
        ],
        "the children start; the parents are still the service's"
    );
    // Child 9 is handed on: the next set drops it. Until the service acknowledges an answer
    // of the new layout without it, the parent (or the child) holds its keys.
    let handed_on = view_in(1, 16, 21, &[(1, 2), (2, 2), (10, 2)], t0 + LEASE);
    assert!(copy.is_told(9, L16), "parent 1 of 8 still told");
    let t1 = t0 + Duration::from_millis(10);
    assert_eq!(
        layouts(&service.acknowledge(&mut copy, t1)),
        [(STOP, 1, 1, 0, 8), (STOP, 2, 1, 0, 8)],
        "the parents stop when the answer of the new layout is acknowledged"
    );
    assert!(copy.is_told(9, L16), "child 9 itself still told");
    service.answer(&mut copy, &handed_on, t1);
    assert_eq!(
        layouts(&service.acknowledge(&mut copy, t1)),
        [(STOP, 9, 2, 1, 16)]
    );
    assert!(!copy.is_told(9, L16));
    assert!(copy.is_told(1, L16) && copy.is_told(10, L16));
}

/// P20.3 through a sidecar, a merge: both shards of a pair told in the finer layout hold the
/// merged shard until the service acknowledges an answer of the merged layout.
#[test]
fn p20_3_a_pair_told_before_a_merge_holds_the_merged_shard_until_acknowledged() {
    let t0 = Instant::now();
    let mut copy = ServiceCopy::default();
    let mut service = Poller::default();
    let fine = view_in(1, 16, 30, &[(1, 2), (9, 3)], t0 + LEASE);
    service.answer(&mut copy, &fine, t0);
    service.acknowledge(&mut copy, t0);
    let merged_layout = Layout {
        shard_count: 8,
        generation: 2,
    };
    assert_eq!(
        copy.told(merged_layout),
        [ShardEpoch { shard: 1, epoch: 3 }],
        "one claim of the merged shard, at the higher epoch"
    );
    let merged = view_in(2, 8, 40, &[(1, 4)], t0 + LEASE);
    let (_, events) = service.answer(&mut copy, &merged, t0);
    assert_eq!(layouts(&events), [(START, 1, 4, 2, 8)]);
    // Handed on before the service applied the merged answer: still told through the pair.
    service.answer(&mut copy, &view_in(2, 8, 41, &[], t0 + LEASE), t0);
    assert!(copy.is_told(1, merged_layout));
    assert_eq!(
        layouts(&service.acknowledge(&mut copy, t0)),
        [(STOP, 1, 2, 1, 16), (STOP, 9, 3, 1, 16), (STOP, 1, 4, 2, 8)]
    );
    assert!(copy.is_empty());
}
