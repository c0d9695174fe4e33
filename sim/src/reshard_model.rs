//! Exhaustive model check of resharding racing a handoff (P20.2, P20.3) on the real state
//! machine, planner and executor assignment core.
//!
//! A [stateright] model of one namespace of 2 shards over two executors, explored breadth first
//! to a bounded number of steps. The replicated state is the manager's [`LeaseState`], changed
//! only by [`LeaseState::apply`] of what the leader or an operator would propose: a split or a
//! merge asked for ([`OperatorAction::Reshard`]), the leader's `Reshard` entry, plans by count
//! ([`plan_placement`], which bring a merge's pairs together), an operator's move (a handoff)
//! and the releases the executors answer. Each executor is the library's real
//! [`AssignmentState`], receiving pushes of its full set (in the namespace's layout) and revokes
//! (numbered in the layout they were made in) as letters that arrive in any order, or are lost
//! once; the leader sends a revoke again while its handoff is open, and a set again.
//!
//! In every state:
//! - no key is admitted by both executors, each admitting in the layout of the newest set it
//!   applied (I1 per key: shard `s` of `c` shards covers the keys whose hash modulo `c` is `s`,
//!   judged over the key classes modulo the widest count, 4);
//! - a key's epoch in the state never goes back, and rises whenever its owner changes (I2 per
//!   key), across the entries that change the layout too.
//!
//! And it is reachable that a split and a merge are carried out, and that an executor refuses a
//! revoke made in a layout whose set it has not applied yet.

use std::fmt;
use std::hash::{Hash, Hasher};

use stateright::{Model, Property};

use leasehold_api::wire::{ShardEpoch, DEFAULT_NAMESPACE};
use leasehold_executor::assignment::{AssignmentState, Layout};
use leasehold_manager::lease::{
    plan_placement, Command, LeaseState, OperatorAction, Outcome, PlacementInputs,
    MAX_MOVES_PER_PLAN,
};

/// The executors.
const EXECUTORS: usize = 2;
/// The namespace's shard count at the start.
const FIRST_SHARD_COUNT: u32 = 2;
/// The widest layout the model can reach (one split of [`FIRST_SHARD_COUNT`]): every key class
/// is judged modulo it.
const KEY_CLASSES: u32 = 4;
/// Letters in flight at most: a step that would send more waits (the leader's delivery bound).
const MAX_IN_FLIGHT: usize = 3;
/// The lease; time advances a millisecond a step, so no lease lapses.
const LEASE_MS: u64 = 60_000;

/// A message on its way.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Letter {
    /// A full set for executor `to`, read at `revision` in `layout` (count, generation).
    Push {
        to: usize,
        revision: u64,
        layout: (u32, u64),
        shards: Vec<(u32, u64)>,
    },
    /// A revoke of `shards` from executor `to`, made at `revision` in generation `generation`.
    Revoke {
        to: usize,
        revision: u64,
        generation: u64,
        shards: Vec<u32>,
    },
    /// Executor `from` answers that it released `shards` for the revoke of `revision`.
    Released {
        from: usize,
        revision: u64,
        shards: Vec<u32>,
    },
}

/// What may happen next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The letter at this index of the (sorted) letters in flight arrives.
    Deliver(usize),
    /// The letter at this index is lost.
    Lose(usize),
    /// An operator asks for a split (twice the count now) or a merge (half of it).
    AskReshard { split: bool },
    /// The leader's step carries out the reshard under way (refused unless ready, P20.2).
    CarryOut,
    /// The leader plans by count.
    Plan,
    /// An operator moves a shard to the executor that does not own it (a handoff, P17.4).
    Move { shard: u32 },
    /// The leader sends every open handoff's revoke again.
    ResendRevokes,
    /// The leader pushes executor `to` its set again.
    ResendSet { to: usize },
}

/// The model's state.
#[derive(Clone)]
pub struct ReshardState {
    lease: LeaseState,
    now_ms: u64,
    ids: [String; EXECUTORS],
    held: [AssignmentState; EXECUTORS],
    /// Kept sorted, so two orders of sending are one state.
    in_flight: Vec<Letter>,
    steps_left: u8,
    asks_left: u8,
    moves_left: u8,
    losses_left: u8,
    /// Per key class: its owner and epoch in the state after the last step.
    keys: [(Option<String>, u64); KEY_CLASSES as usize],
    fault: Option<String>,
    seen: Seen,
}

/// Events the `sometimes` properties look for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
struct Seen {
    split: bool,
    merge: bool,
    revoke_refused_for_its_layout: bool,
}

impl ReshardState {
    fn identity(&self) -> String {
        let table = self.lease.namespace(DEFAULT_NAMESPACE).map(|ns| {
            let shards: Vec<_> = ns
                .shards()
                .iter()
                .map(|s| {
                    (
                        s.owner.clone(),
                        s.epoch,
                        s.handoff
                            .as_ref()
                            .map(|h| (h.to.clone(), h.revoke_revision)),
                    )
                })
                .collect();
            (ns.config.shard_count, ns.generation, ns.reshard, shards)
        });
        format!(
            "{table:?}|{}|{:?}|{:?}|{} {} {} {}|{:?}|{:?}|{:?}",
            self.lease.revision(),
            self.held,
            self.in_flight,
            self.steps_left,
            self.asks_left,
            self.moves_left,
            self.losses_left,
            self.keys,
            self.fault,
            self.seen
        )
    }

    fn apply(&mut self, command: Command) -> Outcome {
        let index = self.lease.revision() + 1;
        let outcome = self.lease.apply(index, &command);
        if let Some(effects) = outcome.effects() {
            let effects = effects.clone();
            for revoke in effects.revokes {
                if let Some(to) = self.executor_of(&revoke.executor_id) {
                    self.send(Letter::Revoke {
                        to,
                        revision: revoke.revision,
                        generation: self.generation(),
                        shards: revoke.shards,
                    });
                }
            }
            for executor_id in effects.assignments {
                if let Some(to) = self.executor_of(&executor_id) {
                    self.push_set(to);
                }
            }
        }
        outcome
    }

    fn generation(&self) -> u64 {
        self.lease
            .namespace(DEFAULT_NAMESPACE)
            .map_or(0, |ns| ns.generation)
    }

    fn shard_count(&self) -> u32 {
        self.lease
            .namespace(DEFAULT_NAMESPACE)
            .map_or(0, |ns| ns.config.shard_count)
    }

    fn executor_of(&self, executor_id: &str) -> Option<usize> {
        self.ids.iter().position(|id| id == executor_id)
    }

    fn send(&mut self, letter: Letter) {
        if self.in_flight.len() < MAX_IN_FLIGHT && !self.in_flight.contains(&letter) {
            self.in_flight.push(letter);
            self.in_flight.sort();
        }
    }

    fn push_set(&mut self, to: usize) {
        let shards = self.lease.delivered_set(&self.ids[to]);
        self.send(Letter::Push {
            to,
            revision: self.lease.revision(),
            layout: (self.shard_count(), self.generation()),
            shards,
        });
    }

    /// Every open handoff's revoke, as the leader's delivery round resends it.
    fn open_revokes(&self) -> Vec<Letter> {
        let Some(ns) = self.lease.namespace(DEFAULT_NAMESPACE) else {
            return Vec::new();
        };
        let mut letters: Vec<Letter> = Vec::new();
        for shard in ns.shards() {
            let (Some(owner), Some(handoff)) = (&shard.owner, &shard.handoff) else {
                continue;
            };
            let Some(to) = self.executor_of(owner) else {
                continue;
            };
            match letters.iter_mut().find(|letter| {
                matches!(letter, Letter::Revoke { to: t, revision, .. }
                    if *t == to && *revision == handoff.revoke_revision)
            }) {
                Some(Letter::Revoke { shards, .. }) => shards.push(shard.id),
                _ => letters.push(Letter::Revoke {
                    to,
                    revision: handoff.revoke_revision,
                    generation: ns.generation,
                    shards: vec![shard.id],
                }),
            }
        }
        letters
    }

    /// An executor receives a letter, as the library's admission core applies it.
    fn receive(&mut self, letter: Letter) {
        match letter {
            Letter::Push {
                to,
                revision,
                layout: (shard_count, generation),
                shards,
            } => {
                let shards: Vec<ShardEpoch> = shards
                    .into_iter()
                    .map(|(shard, epoch)| ShardEpoch { shard, epoch })
                    .collect();
                let layout = Layout {
                    shard_count,
                    generation,
                };
                // A refused set changes nothing, as in the library.
                let _ = self.held[to].apply_set_in(revision, layout, &shards, &[]);
            }
            Letter::Revoke {
                to,
                revision,
                generation,
                shards,
            } => {
                if self.held[to]
                    .validate_revoke_in(revision, generation, &shards)
                    .is_err()
                {
                    self.seen.revoke_refused_for_its_layout |=
                        generation != self.held[to].layout().generation;
                    return;
                }
                if let Ok(outcome) = self.held[to].apply_revoke(revision, &shards) {
                    let reply = outcome.reply(revision);
                    if !reply.released.is_empty() {
                        self.send(Letter::Released {
                            from: to,
                            revision,
                            shards: reply.released,
                        });
                    }
                }
            }
            Letter::Released {
                from,
                revision,
                shards,
            } => {
                let executor_id = self.ids[from].clone();
                self.apply(Command::Release {
                    now_ms: self.now_ms,
                    executor_id,
                    shards,
                    revoke_revision: revision,
                });
            }
        }
    }

    /// Per key class, the owner and epoch the state gives it now.
    fn key_table(&self) -> [(Option<String>, u64); KEY_CLASSES as usize] {
        let count = self.shard_count().max(1);
        std::array::from_fn(|class| {
            self.lease
                .namespace(DEFAULT_NAMESPACE)
                .and_then(|ns| ns.shard(class as u32 % count))
                .map_or((None, 0), |shard| (shard.owner.clone(), shard.epoch))
        })
    }

    /// I2 per key across the step just taken.
    fn check_key_epochs(&mut self) {
        let now = self.key_table();
        for (class, ((old_owner, old_epoch), (owner, epoch))) in
            self.keys.iter().zip(now.iter()).enumerate()
        {
            if epoch < old_epoch {
                self.fault
                    .get_or_insert(format!("key class {class}: epoch {old_epoch} -> {epoch}"));
            }
            if owner.is_some() && owner != old_owner && epoch <= old_epoch {
                self.fault.get_or_insert(format!(
                    "key class {class}: {old_owner:?} -> {owner:?} at epoch {old_epoch} -> {epoch}"
                ));
            }
        }
        self.keys = now;
    }

    /// The first key class two executors admit, if any.
    fn doubly_admitted(&self) -> Option<u32> {
        let mut admitted_by = [None; KEY_CLASSES as usize];
        for (executor, held) in self.held.iter().enumerate() {
            let count = held.layout().shard_count;
            if count == 0 {
                continue;
            }
            for shard in held.held() {
                for class in (shard.shard..KEY_CLASSES).step_by(count as usize) {
                    match admitted_by[class as usize] {
                        Some(other) if other != executor => return Some(class),
                        _ => admitted_by[class as usize] = Some(executor),
                    }
                }
            }
        }
        None
    }
}

impl fmt::Debug for ReshardState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.identity())
    }
}

impl Hash for ReshardState {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        self.identity().hash(hasher);
    }
}

impl PartialEq for ReshardState {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

/// The model's bounds.
#[derive(Debug, Clone, Copy)]
pub struct ReshardModel {
    /// Steps explored from the settled start.
    pub steps: u8,
    /// Reshards the operator may ask for.
    pub asks: u8,
    /// Moves (handoffs) the operator may make.
    pub moves: u8,
    /// Letters that may be lost.
    pub losses: u8,
}

impl ReshardModel {
    /// The settled start: each executor owns one shard and has applied its set.
    fn initial(&self) -> ReshardState {
        let mut state = ReshardState {
            lease: LeaseState::default(),
            now_ms: 0,
            ids: [String::new(), String::new()],
            held: [AssignmentState::default(), AssignmentState::default()],
            in_flight: Vec::new(),
            steps_left: self.steps,
            asks_left: self.asks,
            moves_left: self.moves,
            losses_left: self.losses,
            keys: Default::default(),
            fault: None,
            seen: Seen::default(),
        };
        state.apply(Command::Init {
            now_ms: 0,
            shard_count: FIRST_SHARD_COUNT,
            lease_duration_ms: LEASE_MS,
        });
        for (index, name) in ["a", "b"].into_iter().enumerate() {
            if let Outcome::Registered { grant, .. } = state.apply(Command::Register {
                follows_generations: true,
                now_ms: 0,
                incarnation: name.to_owned(),
                address: format!("http://{name}"),
                name: Some(name.to_owned()),
                credential_sha256: None,
                capacity: 1,
                app_version: None,
                labels: Default::default(),
                namespace: DEFAULT_NAMESPACE.into(),
            }) {
                state.ids[index] = grant.executor_id;
            }
        }
        // Settle: plans until none, every letter delivered.
        for _ in 0..8 {
            if let Some(plan) = state.plan() {
                state.apply(plan);
            }
            while let Some(letter) = state.in_flight.first().cloned() {
                state.in_flight.remove(0);
                state.receive(letter);
            }
        }
        state.keys = state.key_table();
        state
    }
}

impl ReshardState {
    fn plan(&self) -> Option<Command> {
        let space = self.lease.space(DEFAULT_NAMESPACE)?;
        plan_placement(
            space,
            self.now_ms,
            &PlacementInputs::by_count(),
            MAX_MOVES_PER_PLAN,
        )
        .map(|plan| plan.command)
    }
}

impl Model for ReshardModel {
    type State = ReshardState;
    type Action = Action;

    fn init_states(&self) -> Vec<ReshardState> {
        vec![self.initial()]
    }

    fn actions(&self, state: &ReshardState, actions: &mut Vec<Action>) {
        if state.steps_left == 0 || state.fault.is_some() || state.doubly_admitted().is_some() {
            return;
        }
        for index in 0..state.in_flight.len() {
            actions.push(Action::Deliver(index));
            if state.losses_left > 0 {
                actions.push(Action::Lose(index));
            }
        }
        let reshard_under_way = state
            .lease
            .namespace(DEFAULT_NAMESPACE)
            .is_some_and(|ns| ns.reshard.is_some());
        if reshard_under_way {
            actions.push(Action::CarryOut);
        } else if state.asks_left > 0 {
            if state.shard_count() < KEY_CLASSES {
                actions.push(Action::AskReshard { split: true });
            }
            if state.shard_count() > 1 {
                actions.push(Action::AskReshard { split: false });
            }
        }
        if state.plan().is_some() {
            actions.push(Action::Plan);
        }
        if state.moves_left > 0 {
            for shard in 0..state.shard_count() {
                actions.push(Action::Move { shard });
            }
        }
        let open = state.open_revokes();
        if open.iter().any(|letter| !state.in_flight.contains(letter)) {
            actions.push(Action::ResendRevokes);
        }
        for to in 0..EXECUTORS {
            if state.held[to].revision() < state.lease.revision() {
                actions.push(Action::ResendSet { to });
            }
        }
    }

    fn next_state(&self, last: &ReshardState, action: Action) -> Option<ReshardState> {
        let mut state = last.clone();
        state.steps_left -= 1;
        state.now_ms += 1;
        let now_ms = state.now_ms;
        match action {
            Action::Deliver(index) => {
                let letter = state.in_flight.remove(index);
                state.receive(letter);
            }
            Action::Lose(index) => {
                state.in_flight.remove(index);
                state.losses_left -= 1;
            }
            Action::AskReshard { split } => {
                state.asks_left -= 1;
                let count = state.shard_count();
                let shard_count = if split { count * 2 } else { count / 2 };
                state.apply(Command::Operator {
                    now_ms,
                    actor: "admin".into(),
                    action: OperatorAction::Reshard {
                        name: DEFAULT_NAMESPACE.into(),
                        shard_count,
                    },
                });
            }
            Action::CarryOut => {
                if let Outcome::Resharded { kind, .. } = state.apply(Command::Reshard {
                    now_ms,
                    namespace: DEFAULT_NAMESPACE.into(),
                }) {
                    match kind {
                        leasehold_api::wire::ReshardKind::Split => state.seen.split = true,
                        leasehold_api::wire::ReshardKind::Merge => state.seen.merge = true,
                    }
                }
            }
            Action::Plan => {
                let plan = state.plan()?;
                state.apply(plan);
            }
            Action::Move { shard } => {
                state.moves_left -= 1;
                let owner = state
                    .lease
                    .namespace(DEFAULT_NAMESPACE)
                    .and_then(|ns| ns.shard(shard))
                    .and_then(|s| s.owner.clone());
                let to = state
                    .ids
                    .iter()
                    .find(|id| Some(*id) != owner.as_ref())?
                    .clone();
                state.apply(Command::Operator {
                    now_ms,
                    actor: "admin".into(),
                    action: OperatorAction::MoveShard {
                        namespace: DEFAULT_NAMESPACE.into(),
                        shard,
                        to,
                    },
                });
            }
            Action::ResendRevokes => {
                for letter in state.open_revokes() {
                    state.send(letter);
                }
            }
            Action::ResendSet { to } => state.push_set(to),
        }
        state.check_key_epochs();
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "no key admitted by two executors (I1 per key)",
                |_, s: &ReshardState| s.doubly_admitted().is_none(),
            ),
            Property::always(
                "a key's epoch never goes back and rises with its owner (I2 per key)",
                |_, s: &ReshardState| s.fault.is_none(),
            ),
            Property::sometimes("a split carried out", |_, s: &ReshardState| s.seen.split),
            Property::sometimes("a merge carried out", |_, s: &ReshardState| s.seen.merge),
            Property::sometimes("a revoke refused for its layout", |_, s: &ReshardState| {
                s.seen.revoke_refused_for_its_layout
            }),
        ]
    }
}
