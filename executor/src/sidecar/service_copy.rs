//! What the service beside a sidecar may be admitting (PROTOCOL P16.1, P16.2), as the sidecar
//! knows it: a pure core, with time passed in.
//!
//! The service admits a shard from the moment an answer (or an admit permit) gives it, until it
//! has applied a later answer without it or the copy it was given runs out on its own clock. The
//! sidecar never sees the service apply anything; it sees only acknowledgements (`applied=`,
//! `state=` on the next poll) and its own clock. So a shard stays *told* here from the answer that
//! gave it until the first of:
//! - an acknowledgement of the answer that dropped it, or of a later one; and
//! - the end of the copy last given for it (`until`): the service anchors its copy at its own
//!   send instant, which is no later than the sidecar's answer, so the copy ends no later than
//!   the answer's instant plus the `lease_ttl_ms` it carried.
//!
//! Each start and stop is an [`AdmissionEvent`], the sidecar's admission log (§9) of the
//! service: starts stamped at the answer (no later than the service began), stops at the
//! acknowledgement or at `until` (no earlier than it ended).

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_api::wire::{LocalPermits, LocalState, ShardEpoch};
use tokio::time::Instant;

use crate::admission::{AdmissionChange, AdmissionEvent, AdmissionReason, Assignment};

/// An answer the service was given, which its acknowledgement names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The answer's `revision`.
    pub revision: u64,
    /// The answer's `state`.
    pub state: LocalState,
}

impl Answered {
    /// Whether the service's acknowledgement of `ack` shows it applied this answer: the same
    /// answer, or one given later (revisions never go back between answers).
    fn acknowledged_by(self, ack: Answered) -> bool {
        ack.revision > self.revision || ack == self
    }
}

/// One shard the service may be admitting.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Told {
    executor_id: String,
    epoch: u64,
    /// The copy (or permit) given for it ends no later than this.
    until: Instant,
    /// The answer that dropped it: acknowledging it (or a later one) ends the shard here.
    dropped_by: Option<Answered>,
}

/// What the service beside the sidecar was told, and what it acknowledged.
#[derive(Debug, Clone, Default)]
pub struct ServiceCopy {
    told: BTreeMap<u32, Told>,
    /// The highest revision answered: an acknowledgement naming a higher one was not given by
    /// this sidecar and acknowledges nothing.
    highest_answered: Option<u64>,
}

/// The state the service is told for the sidecar's `view` at `now`.
pub fn local_state(view: &Assignment, now: Instant) -> LocalState {
    if view.stopping {
        LocalState::Stopping
    } else if view.executor_id.is_none() {
        LocalState::Registering
    } else if view.admission == crate::AdmissionState::Admitting
        && !view.lease_remaining(now).is_zero()
    {
        LocalState::Admitting
    } else {
        LocalState::Fenced
    }
}

/// The answer the service is given for `view` at `now`, as its acknowledgement names it.
pub fn answered(view: &Assignment, now: Instant) -> Answered {
    Answered {
        revision: view.revision,
        state: local_state(view, now),
    }
}

/// Whole milliseconds, rounded down: the service's copy must not outlast the sidecar's.
fn floor_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Why a told shard stopped, from the state of the answer that dropped it.
fn stop_reason(state: LocalState) -> AdmissionReason {
    match state {
        LocalState::Admitting => AdmissionReason::Unassigned,
        LocalState::Fenced => AdmissionReason::LeaseLapsed,
        LocalState::Registering => AdmissionReason::UnknownExecutor,
        LocalState::Stopping => AdmissionReason::Shutdown,
    }
}

impl ServiceCopy {
    /// The answer to a permits poll for the sidecar's `view` at `now`, and the admission starts
    /// (and stops, for a shard told at another epoch) it makes.
    pub fn answer(
        &mut self,
        view: &Assignment,
        now: Instant,
    ) -> (LocalPermits, Vec<AdmissionEvent>) {
        let state = local_state(view, now);
        let admitting = state == LocalState::Admitting;
        let lease_ttl_ms = if admitting {
            floor_ms(view.lease_remaining(now))
        } else {
            0
        };
        let shards: Vec<ShardEpoch> = if admitting {
            view.shards.clone()
        } else {
            Vec::new()
        };
        let answered = Answered {
            revision: view.revision,
            state,
        };
        self.highest_answered = Some(
            self.highest_answered
                .map_or(view.revision, |highest| highest.max(view.revision)),
        );
        let until = now + Duration::from_millis(lease_ttl_ms);
        let mut events = Vec::new();
        let executor_id = view.executor_id.clone().unwrap_or_default();
        for held in &shards {
            self.tell(
                &executor_id,
                held.shard,
                held.epoch,
                until,
                now,
                &mut events,
            );
        }
        for (shard, told) in &mut self.told {
            let given = shards
                .binary_search_by_key(shard, |held| held.shard)
                .is_ok();
            if !given && told.dropped_by.is_none() {
                told.dropped_by = Some(answered);
            }
        }
        let permits = LocalPermits {
            revision: view.revision,
            state,
            lease_ttl_ms,
            // The shell converts the copy's end to CLOCK_MONOTONIC (`ServiceLink::answer`).
            lease_expires_monotonic_ns: None,
            shard_count: view.shard_count,
            executor_id: view.executor_id.clone(),
            shards,
            // The shell adds what the service is asked to prepare (`ServiceLink::answer`).
            preparing: Vec::new(),
        };
        (permits, events)
    }

    /// An admit permit for `shard` at `epoch`, valid until `until`: the service may start work
    /// for it until then.
    pub fn permit(
        &mut self,
        executor_id: &str,
        shard: u32,
        epoch: u64,
        until: Instant,
        now: Instant,
    ) -> Vec<AdmissionEvent> {
        let mut events = Vec::new();
        self.tell(executor_id, shard, epoch, until, now, &mut events);
        events
    }

    /// The shard is the service's at `epoch` until at least `until`.
    fn tell(
        &mut self,
        executor_id: &str,
        shard: u32,
        epoch: u64,
        until: Instant,
        now: Instant,
        events: &mut Vec<AdmissionEvent>,
    ) {
        if let Some(told) = self.told.get_mut(&shard) {
            if told.epoch == epoch {
                told.until = told.until.max(until);
                told.dropped_by = None;
                return;
            }
            // Told again at another epoch: the sidecar was given the shard anew (the same
            // executor at a new epoch, or a new registration), so the old interval ends here.
            let old = self.told.remove(&shard);
            if let Some(old) = old {
                events.push(event(
                    shard,
                    &old,
                    AdmissionChange::Stop,
                    now,
                    AdmissionReason::Unassigned,
                ));
            }
        }
        let told = Told {
            executor_id: executor_id.to_owned(),
            epoch,
            until,
            dropped_by: None,
        };
        events.push(event(
            shard,
            &told,
            AdmissionChange::Start,
            now,
            AdmissionReason::Assigned,
        ));
        self.told.insert(shard, told);
    }

    /// The service acknowledged `ack` at `now`: every shard dropped by that answer or an
    /// earlier one stops.
    pub fn acknowledge(&mut self, ack: Answered, now: Instant) -> Vec<AdmissionEvent> {
        if self
            .highest_answered
            .is_none_or(|highest| ack.revision > highest)
        {
            return Vec::new();
        }
        self.close(|told| {
            told.dropped_by
                .filter(|dropped_by| dropped_by.acknowledged_by(ack))
                .map(|dropped_by| (now, stop_reason(dropped_by.state)))
        })
    }

    /// Stops every shard whose copy ran out by `now`, stamped at its end.
    pub fn expire(&mut self, now: Instant) -> Vec<AdmissionEvent> {
        self.close(|told| (told.until <= now).then_some((told.until, AdmissionReason::LeaseLapsed)))
    }

    /// Removes the shards `ends` gives an end to, as stop events.
    fn close(
        &mut self,
        ends: impl Fn(&Told) -> Option<(Instant, AdmissionReason)>,
    ) -> Vec<AdmissionEvent> {
        let mut events = Vec::new();
        self.told.retain(|shard, told| match ends(told) {
            Some((at, reason)) => {
                events.push(event(*shard, told, AdmissionChange::Stop, at, reason));
                false
            }
            None => true,
        });
        events
    }

    /// When the next copy runs out, if anything is told.
    pub fn next_end(&self) -> Option<Instant> {
        self.told.values().map(|told| told.until).min()
    }

    /// When the copy the service holds for its admitted shards runs out (the latest `until` of
    /// the shards still given to it).
    pub fn copy_end(&self) -> Option<Instant> {
        self.told
            .values()
            .filter(|told| told.dropped_by.is_none())
            .map(|told| told.until)
            .max()
    }

    /// The shards the service may still be admitting, with their epochs, ascending.
    pub fn told(&self) -> Vec<ShardEpoch> {
        self.told
            .iter()
            .map(|(&shard, told)| ShardEpoch {
                shard,
                epoch: told.epoch,
            })
            .collect()
    }

    /// Whether the service may still be admitting `shard`.
    pub fn is_told(&self, shard: u32) -> bool {
        self.told.contains_key(&shard)
    }

    /// Whether the service may be admitting anything.
    pub fn is_empty(&self) -> bool {
        self.told.is_empty()
    }
}

fn event(
    shard: u32,
    told: &Told,
    change: AdmissionChange,
    at: Instant,
    reason: AdmissionReason,
) -> AdmissionEvent {
    AdmissionEvent {
        executor_id: told.executor_id.clone(),
        shard,
        epoch: told.epoch,
        change,
        at,
        reason,
    }
}

#[cfg(test)]
#[path = "service_copy_tests.rs"]
mod tests;
