//! Exhaustive model check of leadership confirmation (PROTOCOL P6.5): a leader answering
//! renewals from memory, across a deposition it has not heard of.
//!
//! A [stateright] model of three managers and one executor, explored breadth first to its last
//! state. The leaders' decision to answer is the production core,
//! [`LeadershipConfirmation`]: a renewal arriving at a leader waits for the round the core says
//! it needs, the leader starts rounds (heartbeat broadcasts) and counts the acknowledgements
//! through it, and answers once the core says the round is confirmed. Around it the model has
//! only what the argument of P6.5 rests on:
//!
//! - **Votes as Raft casts them.** The second manager may be elected once (the model's one
//!   election; the third is its mirror image), with the vote of the first or the third, which
//!   adopts the new term. The vote and the new leader taking office are one step: taking office
//!   later only makes its grace end later, so this is the worst case. A manager adopts any newer
//!   term it hears of (a leader hearing one steps down) and acknowledges a heartbeat only from a
//!   term at least its own. The log plays no part: the question is only who may still believe
//!   it leads.
//! - **The executor** holds one shard. It was granted a lease of [`Bounds::lease_ticks`] at tick
//!   0, and renews by sending to the first leader, whether it still leads or not (a renewal to
//!   the new leader is answered by the same rule, and it is not the one in question); an
//!   answer extends its copy to the send tick plus the lease (P3.2: anchored at the send
//!   instant; delivered as it is sent, the worst case). It admits the shard while the tick is
//!   below its copy's end.
//! - **Each leader's table** holds the executor's expiry: the lease from tick 0 for the first
//!   leader, `took_office + lease` for one elected later (P6.1: the longest lease told), and at
//!   each answer `now + lease`. Once the tick is past it, that leader may give the shard to
//!   another executor, which admits it from then on; an answer after that leaves the shard out
//!   of the executor's set (as a grant after a reap or a completed handoff does), and the
//!   executor stops admitting it.
//! - **The network** delivers any message in any order within [`Bounds::transit_ticks`] of its
//!   sending, or never (loss).
//!
//! The property: the executor and the shard's next holder never admit it at the same tick (I1).
//! Examples (`sometimes`) show the space holds what the check is about: an election, a renewal
//! answered by the deposed leader before it learned of it, the shard taken by a new leader.

use std::collections::BTreeSet;

use leasehold_manager::renewals::core::confirmation::{LeadershipConfirmation, Round};
use stateright::{Model, Property};

/// Managers in the model; a majority is two.
const MANAGERS: u8 = 3;
/// The leader at tick 0, of term 1.
const FIRST_LEADER: u8 = 0;
/// The manager that may campaign.
const CANDIDATE: u8 = 1;

/// The model's limits: they make the space finite.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The lease, in ticks.
    pub lease_ticks: u8,
    /// The last tick.
    pub horizon_ticks: u8,
    /// Renewals the executor may send.
    pub renewals: u8,
    /// Heartbeat rounds the first leader may start.
    pub rounds_per_term: u8,
    /// A message not delivered within this many ticks of its sending is lost.
    pub transit_ticks: u8,
}

/// A message in flight; `sent` is the tick it was sent at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Message {
    /// The executor's renewal to the first leader, sent at `sent` (its send instant).
    Renew { sent: u8 },
    Heartbeat {
        from: u8,
        to: u8,
        term: u8,
        round: u64,
        sent: u8,
    },
    /// An acknowledgement of a heartbeat; `term` is the acknowledging manager's term, newer
    /// than the heartbeat's when it refuses it.
    Acknowledgement {
        from: u8,
        to: u8,
        term: u8,
        round: u64,
        accepted: bool,
        sent: u8,
    },
}

impl Message {
    fn sent(&self) -> u8 {
        match self {
            Message::Renew { sent, .. }
            | Message::Heartbeat { sent, .. }
            | Message::Acknowledgement { sent, .. } => *sent,
        }
    }
}

/// What a leader holds in memory for this term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Leading {
    confirmation: LeadershipConfirmation,
    /// Renewals waiting for confirmation: the executor's send tick and the round needed.
    waiting: Vec<(u8, Round)>,
    /// The executor's expiry on this leader's table: lapsed once the tick is past it.
    expiry: u8,
    rounds_left: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    Follower,
    Leader(Leading),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Manager {
    term: u8,
    voted_for: Option<u8>,
    role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfirmationState {
    tick: u8,
    managers: Vec<Manager>,
    /// The executor's lease copy ends at this tick.
    lease_until: u8,
    /// The tick the shard was given to another executor.
    taken_at: Option<u8>,
    network: BTreeSet<Message>,
    renewals_left: u8,
    election_held: bool,
    /// A renewal was answered by a leader whose term had already been superseded by a vote.
    answered_after_deposition: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    Renew,
    Deliver(Message),
    /// The candidate is elected with `voter`'s vote.
    Elect {
        voter: u8,
    },
    StartRound {
        node: u8,
    },
    Answer {
        node: u8,
    },
    TakeShard {
        node: u8,
    },
}

/// The model: its bounds.
#[derive(Debug, Clone)]
pub struct ConfirmationModel {
    bounds: Bounds,
}

impl ConfirmationModel {
    /// A lease of two ticks, four ticks, two renewals, two rounds, messages in transit up to a
    /// tick.
    pub fn standard() -> Self {
        Self {
            bounds: Bounds {
                lease_ticks: 2,
                horizon_ticks: 4,
                renewals: 2,
                rounds_per_term: 2,
                transit_ticks: 1,
            },
        }
    }

    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn others(node: u8) -> impl Iterator<Item = u8> {
        (0..MANAGERS).filter(move |&other| other != node)
    }

    fn leading(state: &ConfirmationState, node: u8) -> Option<&Leading> {
        match &state.managers[usize::from(node)].role {
            Role::Leader(leading) => Some(leading),
            _ => None,
        }
    }

    fn leading_mut(state: &mut ConfirmationState, node: u8) -> Option<&mut Leading> {
        match &mut state.managers[usize::from(node)].role {
            Role::Leader(leading) => Some(leading),
            _ => None,
        }
    }

    /// A newer term heard of: adopted, and whatever role the manager had is over.
    fn adopt(manager: &mut Manager, term: u8) {
        if term > manager.term {
            manager.term = term;
            manager.voted_for = None;
            manager.role = Role::Follower;
        }
    }

    fn executor_admits(state: &ConfirmationState) -> bool {
        state.tick < state.lease_until
    }

    fn deliver(&self, state: &mut ConfirmationState, message: Message) {
        let tick = state.tick;
        match message {
            Message::Renew { sent } => {
                if let Some(leading) = Self::leading_mut(state, FIRST_LEADER) {
                    let needed = leading.confirmation.needs();
                    leading.waiting.push((sent, needed));
                }
            }
            Message::Heartbeat {
                from,
                to,
                term,
                round,
                ..
            } => {
                let manager = &mut state.managers[usize::from(to)];
                Self::adopt(manager, term);
                let accepted = term == manager.term;
                let answer = Message::Acknowledgement {
                    from: to,
                    to: from,
                    term: manager.term,
                    round,
                    accepted,
                    sent: tick,
                };
                state.network.insert(answer);
            }
            Message::Acknowledgement {
                from,
                to,
                term,
                round,
                accepted,
                ..
            } => {
                let manager = &mut state.managers[usize::from(to)];
                if accepted && term == manager.term {
                    if let Role::Leader(leading) = &mut manager.role {
                        leading
                            .confirmation
                            .acknowledged(u64::from(from), Round(round));
                    }
                } else if term > manager.term {
                    if let Role::Leader(leading) = &mut manager.role {
                        leading.confirmation.superseded();
                    }
                    Self::adopt(manager, term);
                }
            }
        }
    }

    /// The candidate takes office in the next term with `voter`'s vote.
    fn elect(&self, state: &mut ConfirmationState, voter: u8) {
        let tick = state.tick;
        state.election_held = true;
        let term = state.managers[usize::from(CANDIDATE)].term + 1;
        let voter = &mut state.managers[usize::from(voter)];
        Self::adopt(voter, term);
        voter.voted_for = Some(CANDIDATE);
        let candidate = &mut state.managers[usize::from(CANDIDATE)];
        candidate.term = term;
        candidate.voted_for = Some(CANDIDATE);
        // P6.1: every lease an earlier leader told may run until a full lease (the longest
        // told) from taking office. It is sent no renewal, so it needs no round.
        candidate.role = Role::Leader(Leading {
            confirmation: LeadershipConfirmation::new(Self::others(CANDIDATE).map(u64::from)),
            waiting: Vec::new(),
            expiry: tick.saturating_add(self.bounds.lease_ticks),
            rounds_left: 0,
        });
    }

    /// The leader `node` starts a confirmation round: a heartbeat to every other manager.
    fn start_round(state: &mut ConfirmationState, node: u8) -> Option<()> {
        let tick = state.tick;
        let term = state.managers[usize::from(node)].term;
        let leading = Self::leading_mut(state, node)?;
        leading.rounds_left -= 1;
        let Round(round) = leading.confirmation.start_round();
        for to in Self::others(node) {
            state.network.insert(Message::Heartbeat {
                from: node,
                to,
                term,
                round,
                sent: tick,
            });
        }
        Some(())
    }

    /// The leader `node` answers every renewal whose round is confirmed.
    fn answer(&self, state: &mut ConfirmationState, node: u8) -> Option<()> {
        let tick = state.tick;
        let deposed = Self::deposed(state, node);
        let lease = self.bounds.lease_ticks;
        let leading = Self::leading_mut(state, node)?;
        let (ready, waiting): (Vec<_>, Vec<_>) = leading
            .waiting
            .iter()
            .partition(|(_, needed)| leading.confirmation.is_confirmed(*needed));
        leading.waiting = waiting;
        // The leader's record is anchored later than the executor's copy (P3.2).
        leading.expiry = leading.expiry.max(tick.saturating_add(lease));
        for (renewal_sent, _) in ready {
            if state.taken_at.is_none() {
                let until = renewal_sent.saturating_add(lease);
                state.lease_until = state.lease_until.max(until);
            } else {
                // A set without the shard (as a grant after a reap or a completed handoff
                // has): the executor stops admitting it.
                state.lease_until = 0;
            }
        }
        state.answered_after_deposition |= deposed;
        Some(())
    }

    /// Whether `node` leads a term some manager has since voted past.
    fn deposed(state: &ConfirmationState, node: u8) -> bool {
        let term = state.managers[usize::from(node)].term;
        state.managers.iter().any(|manager| manager.term > term)
    }
}

impl Model for ConfirmationModel {
    type State = ConfirmationState;
    type Action = Action;

    fn init_states(&self) -> Vec<ConfirmationState> {
        let lease = self.bounds.lease_ticks;
        let leader = Manager {
            term: 1,
            voted_for: Some(0),
            role: Role::Leader(Leading {
                confirmation: LeadershipConfirmation::new(Self::others(0).map(u64::from)),
                waiting: Vec::new(),
                expiry: lease,
                rounds_left: self.bounds.rounds_per_term,
            }),
        };
        let follower = Manager {
            term: 1,
            voted_for: Some(0),
            role: Role::Follower,
        };
        vec![ConfirmationState {
            tick: 0,
            managers: vec![leader, follower.clone(), follower],
            lease_until: lease,
            taken_at: None,
            network: BTreeSet::new(),
            renewals_left: self.bounds.renewals,
            election_held: false,
            answered_after_deposition: false,
        }]
    }

    fn actions(&self, state: &ConfirmationState, actions: &mut Vec<Action>) {
        if state.tick < self.bounds.horizon_ticks {
            actions.push(Action::Tick);
        }
        if state.renewals_left > 0 {
            actions.push(Action::Renew);
        }
        for message in &state.network {
            actions.push(Action::Deliver(message.clone()));
        }
        if !state.election_held {
            for voter in Self::others(CANDIDATE) {
                actions.push(Action::Elect { voter });
            }
        }
        for node in 0..MANAGERS {
            match &state.managers[usize::from(node)].role {
                Role::Leader(leading) => {
                    if leading.rounds_left > 0 && !leading.confirmation.is_superseded() {
                        actions.push(Action::StartRound { node });
                    }
                    if leading
                        .waiting
                        .iter()
                        .any(|(_, needed)| leading.confirmation.is_confirmed(*needed))
                    {
                        actions.push(Action::Answer { node });
                    }
                    if state.taken_at.is_none() && state.tick > leading.expiry {
                        actions.push(Action::TakeShard { node });
                    }
                }
                Role::Follower => {}
            }
        }
    }

    fn next_state(&self, last: &ConfirmationState, action: Action) -> Option<ConfirmationState> {
        let mut state = last.clone();
        let tick = state.tick;
        match action {
            Action::Tick => {
                state.tick += 1;
                let oldest = state.tick.saturating_sub(self.bounds.transit_ticks);
                state.network.retain(|message| message.sent() >= oldest);
            }
            Action::Renew => {
                state.renewals_left -= 1;
                state.network.insert(Message::Renew { sent: tick });
            }
            Action::Deliver(message) => {
                state.network.remove(&message);
                self.deliver(&mut state, message);
            }
            Action::Elect { voter } => self.elect(&mut state, voter),
            Action::StartRound { node } => Self::start_round(&mut state, node)?,
            Action::Answer { node } => self.answer(&mut state, node)?,
            Action::TakeShard { .. } => state.taken_at = Some(tick),
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "I1: the executor and the shard's next holder never admit it at one tick (P6.5)",
                |_: &ConfirmationModel, state: &ConfirmationState| {
                    !(Self::executor_admits(state) && state.taken_at.is_some())
                },
            ),
            Property::sometimes(
                "a new leader takes office",
                |_: &ConfirmationModel, state: &ConfirmationState| {
                    (1..MANAGERS).any(|node| Self::leading(state, node).is_some())
                },
            ),
            Property::sometimes(
                "a deposed leader answers a renewal before it learns of the election",
                |_: &ConfirmationModel, state: &ConfirmationState| state.answered_after_deposition,
            ),
            Property::sometimes(
                "a new leader gives the shard to another executor",
                |_: &ConfirmationModel, state: &ConfirmationState| {
                    state.taken_at.is_some() && state.managers[0].term > 1
                },
            ),
        ]
    }
}
