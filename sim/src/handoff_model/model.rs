//! The model as stateright explores it: the initial state, the actions each state allows, their
//! outcome and the properties (the module above documents them).

use super::*;

impl Model for HandoffModel {
    type State = HandoffState;
    type Action = Action;

    fn init_states(&self) -> Vec<HandoffState> {
        vec![self.initial.clone()]
    }

    fn actions(&self, state: &HandoffState, actions: &mut Vec<Action>) {
        // A state the cores did not answer as expected is reported, not explored further.
        if state.model_fault.is_some() {
            return;
        }
        if state.tick < self.bounds.horizon_ticks {
            let due = self.renewals_due(&self.expire(state, state.tick + 1));
            let new_leaders: &[Option<i8>] = if self.bounds.leader_change && state.leader.term == 1
            {
                &[None, Some(-1), Some(0), Some(1)]
            } else {
                &[None]
            };
            // Every subset of the due renewals (the rest are lost), in every order of arrival.
            for subset in 0..(1_u32 << due.len()) {
                let sent: Vec<usize> = due
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| subset & (1 << bit) != 0)
                    .map(|(_, &process)| process)
                    .collect();
                for renewals in orders(&sent) {
                    for &new_leader in new_leaders {
                        actions.push(Action::Tick {
                            renewals: renewals.clone(),
                            new_leader,
                        });
                    }
                }
            }
        }
        for message in &state.network {
            actions.push(Action::Deliver(message.clone()));
            if state.duplicates_left > 0 {
                actions.push(Action::Duplicate(message.clone()));
            }
        }
        let now_ms = state.leader.clock_ms(state.tick);
        if plan_rebalance(&state.lease, now_ms).is_some() {
            actions.push(Action::Plan);
        }
        let decision = self.decision(state);
        if !decision.reap.is_empty() {
            actions.push(Action::Reap);
        }
        if decision.complete_expired_handoffs && state.lease.handoffs_due(now_ms) {
            actions.push(Action::CompleteHandoffs);
        }
        for (owner, revision) in Self::current_revokes(state).into_keys() {
            if let Some(to) = self.process_of(&owner) {
                if !Self::revoke_in_flight(state, to, revision) {
                    actions.push(Action::ResendRevoke { to, revision });
                }
            }
        }
        if self.bounds.drain
            && state
                .lease
                .executor(&self.executor_id(0))
                .is_some_and(|executor| !executor.draining)
        {
            actions.push(Action::Drain);
        }
    }

    fn next_state(&self, last_state: &HandoffState, action: Action) -> Option<HandoffState> {
        let mut state = last_state.clone();
        match action {
            Action::Tick {
                renewals,
                new_leader,
            } => {
                state = self.expire(&state, state.tick + 1);
                if let Some(offset_ticks) = new_leader {
                    self.change_leader(&mut state, offset_ticks);
                }
                for process in renewals {
                    self.renew(&mut state, process);
                }
            }
            Action::Deliver(message) => {
                state.network.remove(&message);
                self.deliver(&mut state, &message);
            }
            Action::Duplicate(message) => {
                state.duplicates_left = state.duplicates_left.saturating_sub(1);
                self.deliver(&mut state, &message);
            }
            Action::Plan => self.plan(&mut state),
            Action::Reap => self.reap(&mut state),
            Action::CompleteHandoffs => self.complete_handoffs(&mut state),
            Action::Drain => self.drain_first(&mut state),
            Action::ResendRevoke { to, revision } => {
                let executor_id = self.executor_id(to);
                if let Some(shards) = Self::current_revokes(&state).remove(&(executor_id, revision))
                {
                    let message = Message::Revoke {
                        to,
                        sent_tick: state.tick,
                        revision,
                        shards,
                    };
                    self.send(&mut state, message);
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "I1: no two executors admit one shard at one instant (P5.2)",
                |model: &HandoffModel, state: &HandoffState| model.exclusive(state),
            ),
            Property::always(
                "I2: admitted epochs were minted for the admitter, once each, increasing",
                |model: &HandoffModel, state: &HandoffState| model.fenced(state),
            ),
            Property::always(
                "P3.2: an executor's lease copy ends no later than the manager's record",
                |model: &HandoffModel, state: &HandoffState| model.anchored(state),
            ),
            Property::always(
                "the lease state passes its own consistency checks",
                |_: &HandoffModel, state: &HandoffState| {
                    state.lease.consistency_violations().is_empty()
                },
            ),
            Property::always(
                "the cores answer as the model expects",
                |_: &HandoffModel, state: &HandoffState| state.model_fault.is_none(),
            ),
        ];
        properties.extend(self.examples.iter().map(|example| example.property()));
        properties
    }
}
