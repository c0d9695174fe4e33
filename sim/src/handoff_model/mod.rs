//! Exhaustive model check of the handoff (P5.2) and lease anchoring (P3.2).
//!
//! A [stateright] model of a tiny fleet, explored breadth first to the last reachable state
//! within its [`Bounds`]. It drives the real protocol cores, not copies of their rules:
//! - the replicated state is the manager's [`LeaseState`], changed only by
//!   [`LeaseState::apply`] of the commands the leader would propose, with plans from the real
//!   [`plan_rebalance`];
//! - the leader's decisions about time (whom to reap, whether expired handoffs may complete)
//!   come from the real [`LeaderCore::step`] of the current term, so P6.1's new-leader grace is
//!   the production rule;
//! - each executor is the executor library's [`AdmissionCore`]: it anchors grants (P3.2),
//!   orders deliveries (P4.1), answers revokes (P5.2) and decides admission (P3.6).
//!
//! What the model adds around them is only the world: a true clock in ticks, the leaders' clocks
//! (each the true clock plus an offset fixed for its term), and the network.
//!
//! # The world
//!
//! - Time is a tick counter (1 tick = [`TICK_MS`] ms) advanced by [`Action::Tick`] up to a
//!   horizon, which makes the space finite. Every executor reads the true clock (the docs assume
//!   clock rates agree far better than the lease, P5.2); the leader of term 1 reads it too, and
//!   the leader of term 2 reads it shifted by −1, 0 or +1 tick, the error of the wall clock it
//!   read when it took office (P2.3). The lease is two or three ticks less a millisecond
//!   ([`Bounds::lease_ticks`], [`Bounds::lease_ms`]).
//! - The fleet starts registered: the first executor holds every shard at epoch 1 and the others
//!   hold nothing, so the leader's first plan starts a handoff from a live owner.
//! - The network is a set of messages, each stamped with the tick it was sent. Any message may be
//!   delivered, in any order, while it is no older than its longest transit
//!   ([`Bounds::request_transit_ticks`], [`Bounds::transit_ticks`]); once older it is lost.
//!   Never delivering a message is how loss is modelled, so there is no separate drop action. A
//!   run may also deliver up to [`Bounds::duplicates`] messages twice (deliver and keep). At
//!   most [`Bounds::max_in_flight`] messages are in flight; a send beyond that is lost.
//! - Executors renew on their timer (P3.5): at the start of a tick, each executor whose renewal
//!   is due and that is not waiting for the answer to the last one sends it, or loses it. That
//!   is once a tick on these leases. One that stops renewing is one whose renewals are all lost,
//!   the worst case for exclusivity, since it keeps admitting until its own copy lapses; a
//!   renewal answered `unknown_executor` gets no reply for the same reason (the real executor
//!   would forget its registration at once, admitting less).
//! - The leader applies a request when it is delivered, stamping the command with its clock, and
//!   sends the reply and the pushes and revokes the outcome calls for at once (P5.1: committed
//!   first). Each write is applied whole when proposed: Raft applies entries in one order, and a
//!   plan refused as stale changes nothing (P5.1), so interleaving proposals adds no behaviour.
//!   It may plan, reap or complete expired handoffs at any moment its core allows, and resend
//!   the revoke of any handoff still current once neither it nor its reply is in flight (as the
//!   delivery task does, P6.2).
//! - One leader change may happen at the start of any tick (in the models that allow it). The
//!   new leader pushes every executor its full set (P6.2); the old leader's messages already in
//!   flight may still arrive, and anything it had not sent is simply never sent.
//! - An operator may drain the first executor once (in the model that allows it).
//!
//! # The models
//!
//! The whole combination does not fit in a space that is explored in seconds, so five models
//! each take a part of it, each exhaustive within its bounds:
//! - [`HandoffModel::handoff`]: completion by revoke reply, claims and expiry, late and
//!   duplicate acknowledgements (one duplicated delivery);
//! - [`HandoffModel::leader_change`]: one leader change at any tick to a skewed clock (P6.1,
//!   P6.2);
//! - [`HandoffModel::retarget`]: three executors, so a releasing shard can change target;
//! - [`HandoffModel::drain`]: two handoffs from one owner at different revisions (P3.3's stale
//!   grant, P4.1);
//! - [`HandoffModel::anchoring`]: two ticks of transit each way (P3.2).
//!
//! # The properties
//!
//! Always: I1 (no two executors admit one shard at one instant), I2 (every admitted
//! (shard, epoch) was minted for its admitter, and per shard epochs are minted once each, in
//! increasing order), P3.2 (an executor's copy of its lease ends no later than the manager's
//! record, on the clock of the leader that granted it), the lease state's own structural checks,
//! and that the cores answered as the model expects. Sometimes: the paths of P5.2 the model is
//! meant to reach (see [`Example`]); stateright fails a `sometimes` that no state satisfies, so
//! a model that silently stopped reaching a path cannot pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::sync::LazyLock;
use std::time::Duration;

use leasehold_api::wire::{self, AssignmentPush, RenewRequest, RevokePush, ShardEpoch};
use leasehold_executor::admission::AdmissionCore;
use leasehold_manager::leader::core::{GuardConfig, LeaderCore, StepDecision};
use leasehold_manager::lease::{
    plan_rebalance, Command, Effects, Epoch, ExecutorId, Handoff, LeaseState, Outcome, RenewResult,
    Renewal, ShardId,
};
use stateright::{Model, Property};
use tokio::time::Instant;

mod identity;
mod model;
mod world;

use world::{orders, prelude};

/// One tick of true time, in milliseconds of every clock.
pub const TICK_MS: u64 = 100;

/// Two shards: one to hand over and one the old owner keeps, so an executor's set is never just
/// "everything or nothing".
pub const SHARD_COUNT: u32 = 2;

/// What every leader clock reads at true tick 0, before its term's offset: far enough from zero
/// that an offset never takes a clock below it, and far enough after the first leader took
/// office (at 0) that its P6.1 grace is long over when the model starts.
const CLOCK_START_TICKS: u64 = 10;

/// The mass-expiry guard (P6.3) is off: it only ever defers a reap, so without it the leader
/// reaps at the earliest instant its core allows, the worst case for I1. With it off the core's
/// decision depends only on when the term began, the state and `now` (its memory of earlier
/// steps feeds only the guard), which is why the model keeps just `took_office_ms` and builds
/// the term's core afresh for each decision.
const NO_MASS_EXPIRY_GUARD: GuardConfig = GuardConfig {
    enabled: false,
    grace_ms: 0,
};

/// The instant true tick 0 maps to. [`AdmissionCore`] takes `tokio::time::Instant`s; every one
/// the model makes is this base plus a whole number of ticks, so the arithmetic is exact and the
/// same on every path, and equal ticks give equal instants.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The executors' instant for a true tick.
fn instant(tick: u64) -> Instant {
    *BASE + Duration::from_millis(tick * TICK_MS)
}

/// Milliseconds of true time from tick 0 to `at`, or `None` for an instant before it.
fn true_ms(at: Instant) -> Option<u64> {
    u64::try_from(at.checked_duration_since(*BASE)?.as_millis()).ok()
}

/// The limits that make one model finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Executor processes, all registered at tick 0; the first holds every shard.
    pub executors: usize,
    /// The lease, in ticks. Either way an executor renews every tick (a third of the lease has
    /// passed, P3.5); with three it stays live through one lost renewal, with two it lapses, and
    /// every path that waits a lease (expiry, P6.1's grace) ends a tick sooner.
    pub lease_ticks: u64,
    /// The last tick explored.
    pub horizon_ticks: u64,
    /// Longest transit of a renewal request, in ticks. 0: the leader applies a renewal the
    /// instant it is sent, which gives the executor the longest copy it can ever hold, the worst
    /// case for exclusivity; more lets a renewal read before a revoke land after it.
    pub request_transit_ticks: u64,
    /// Longest transit of every other message (grants, pushes, revokes, revoke replies), in
    /// ticks. An older message is lost.
    pub transit_ticks: u64,
    /// Whether one leader change may happen, at the start of any tick, to a clock −1, 0 or +1
    /// tick off the first leader's.
    pub leader_change: bool,
    /// Whether an operator may drain the first executor (`SetDraining`, once, at any moment): its
    /// remaining shards then leave it in a handoff of their own, so one owner has revokes of two
    /// revisions out at once, and a grant read between them can arrive after the later one.
    pub drain: bool,
    /// Deliveries that may repeat a message, in a whole run.
    pub duplicates: u8,
    /// Messages in flight at most; a send beyond it is lost.
    pub max_in_flight: usize,
}

/// A situation a model must reach (a `sometimes` property), so that a property that always
/// holds cannot hold only because the model never got anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Example {
    /// P5.2: a handoff completed on the old owner's revoke reply (`Release`).
    CompletedByRelease,
    /// P5.2: a handoff completed on a renewal whose claims omit the shard.
    CompletedByClaims,
    /// P5.2: a handoff completed because the old owner's last grant including it expired.
    CompletedByExpiry,
    /// P5.2, P6.1: as above, by a new leader whose clock runs a tick ahead of the old one's,
    /// after waiting out its grace.
    CompletedByExpiryUnderFastNewLeader,
    /// P5.2: an acknowledgement of a handoff that another path completed, or a plan cancelled,
    /// arrived and was ignored.
    LateAcknowledgement,
    /// P5.2: a second acknowledgement of a handoff already completed by the first was ignored.
    DuplicateAcknowledgement,
    /// P5.4: a releasing shard was given another target.
    Retarget,
    /// An executor other than the first holder admits a shard: the handoffs really hand over.
    NewOwnerAdmits,
    /// P5.2: the drained first executor handed on every shard it held.
    DrainedOwnerHoldsNothing,
    /// P3.2: a renewal was applied after the longest request transit (its grant is in flight).
    SlowestRequest,
    /// P3.2: a grant is about to arrive after the longest transit back.
    SlowestReply,
}

impl Example {
    fn property(self) -> Property<HandoffModel> {
        match self {
            Example::CompletedByRelease => Property::sometimes(
                "P5.2: a handoff completes on the revoke reply",
                |_: &HandoffModel, state: &HandoffState| state.ended_by(Ending::Release),
            ),
            Example::CompletedByClaims => Property::sometimes(
                "P5.2: a handoff completes on renewal claims",
                |_: &HandoffModel, state: &HandoffState| state.ended_by(Ending::Claims),
            ),
            Example::CompletedByExpiry => Property::sometimes(
                "P5.2: a handoff completes on the old grant's expiry",
                |_: &HandoffModel, state: &HandoffState| state.ended_by(Ending::Expiry),
            ),
            Example::CompletedByExpiryUnderFastNewLeader => Property::sometimes(
                "P6.1: a new leader whose clock is ahead completes a handoff on expiry",
                |_: &HandoffModel, state: &HandoffState| state.fast_leader_ended_by_expiry(),
            ),
            Example::LateAcknowledgement => Property::sometimes(
                "P5.2: a late acknowledgement is ignored",
                |_: &HandoffModel, state: &HandoffState| state.seen.late_acknowledgement,
            ),
            Example::DuplicateAcknowledgement => Property::sometimes(
                "P5.2: a duplicate acknowledgement is ignored",
                |_: &HandoffModel, state: &HandoffState| state.seen.duplicate_acknowledgement,
            ),
            Example::Retarget => Property::sometimes(
                "P5.4: a releasing shard is retargeted",
                |_: &HandoffModel, state: &HandoffState| state.seen.retarget,
            ),
            Example::NewOwnerAdmits => Property::sometimes(
                "P5.2: an executor admits a shard handed to it",
                |_: &HandoffModel, state: &HandoffState| state.new_owner_admits(),
            ),
            Example::DrainedOwnerHoldsNothing => Property::sometimes(
                "P5.2: a drained executor hands on every shard it held",
                |model: &HandoffModel, state: &HandoffState| {
                    state
                        .lease
                        .executor(&model.executor_id(0))
                        .is_some_and(|executor| {
                            executor.draining && executor.owned_shards.is_empty()
                        })
                },
            ),
            Example::SlowestRequest => Property::sometimes(
                "P3.2: a renewal is applied after the longest request transit",
                |model: &HandoffModel, state: &HandoffState| {
                    state.granted_after_slowest_request(model.bounds.request_transit_ticks)
                },
            ),
            Example::SlowestReply => Property::sometimes(
                "P3.2: a grant arrives after the longest transit back",
                |model: &HandoffModel, state: &HandoffState| {
                    state.grant_arrives_after_slowest_reply(model.bounds.transit_ticks)
                },
            ),
        }
    }
}

/// A model of one tiny fleet: its bounds, the situations it must reach, and the state it starts
/// from.
#[derive(Debug, Clone)]
pub struct HandoffModel {
    name: &'static str,
    bounds: Bounds,
    examples: Vec<Example>,
    /// The executor id each process registered under (its index is the process).
    executor_ids: Vec<ExecutorId>,
    initial: HandoffState,
}

impl HandoffModel {
    /// The handoff paths of P5.2: two executors, one tick of transit from the leader, one
    /// duplicated delivery. Completion by revoke reply, by renewal claims and by expiry; late
    /// and duplicate acknowledgements ignored.
    pub fn handoff() -> Self {
        Self::new(
            "handoff",
            Bounds {
                executors: 2,
                lease_ticks: 3,
                horizon_ticks: 3,
                request_transit_ticks: 0,
                transit_ticks: 1,
                leader_change: false,
                drain: false,
                duplicates: 1,
                max_in_flight: 4,
            },
            vec![
                Example::CompletedByRelease,
                Example::CompletedByClaims,
                Example::CompletedByExpiry,
                Example::LateAcknowledgement,
                Example::DuplicateAcknowledgement,
                Example::NewOwnerAdmits,
            ],
        )
    }

    /// One leader change (P6.1, P6.2) at the start of any tick, to a clock a tick behind, equal
    /// or a tick ahead, with the old leader's messages still in flight. The shortest lease
    /// (two ticks) lets a new leader's grace run out within the horizon.
    pub fn leader_change() -> Self {
        Self::new(
            "leader change",
            Bounds {
                executors: 2,
                lease_ticks: 2,
                horizon_ticks: 3,
                request_transit_ticks: 0,
                transit_ticks: 1,
                leader_change: true,
                drain: false,
                duplicates: 0,
                max_in_flight: 3,
            },
            vec![
                Example::CompletedByExpiryUnderFastNewLeader,
                Example::CompletedByRelease,
                Example::CompletedByClaims,
                Example::NewOwnerAdmits,
            ],
        )
    }

    /// A retarget (P5.4): three executors, so a shard releasing to one that lapses can be given
    /// to another while its old owner still holds it.
    pub fn retarget() -> Self {
        Self::new(
            "retarget",
            Bounds {
                executors: 3,
                lease_ticks: 2,
                horizon_ticks: 2,
                request_transit_ticks: 0,
                transit_ticks: 1,
                leader_change: false,
                drain: false,
                duplicates: 0,
                max_in_flight: 4,
            },
            vec![
                Example::Retarget,
                Example::CompletedByRelease,
                Example::NewOwnerAdmits,
            ],
        )
    }

    /// A drain (P5.2, P4.1, P3.3): the first executor gives up one shard to the plan, then the
    /// other when an operator drains it, so it holds two revokes of different revisions while
    /// grants read in between are in flight.
    pub fn drain() -> Self {
        Self::new(
            "drain",
            Bounds {
                executors: 2,
                lease_ticks: 2,
                horizon_ticks: 2,
                request_transit_ticks: 0,
                transit_ticks: 1,
                leader_change: false,
                drain: true,
                duplicates: 0,
                max_in_flight: 4,
            },
            vec![
                Example::DrainedOwnerHoldsNothing,
                Example::CompletedByRelease,
                Example::CompletedByExpiry,
                Example::NewOwnerAdmits,
            ],
        )
    }

    /// Anchoring (P3.2): renewal requests and every reply and push each in transit for up to
    /// two ticks, so a renewal read before a revoke can land after it, and a grant can arrive
    /// two ticks after it was made.
    pub fn anchoring() -> Self {
        Self::new(
            "anchoring",
            Bounds {
                executors: 2,
                lease_ticks: 3,
                horizon_ticks: 3,
                request_transit_ticks: 2,
                transit_ticks: 2,
                leader_change: false,
                drain: false,
                duplicates: 0,
                max_in_flight: 4,
            },
            vec![
                Example::SlowestRequest,
                Example::SlowestReply,
                Example::CompletedByRelease,
                Example::CompletedByClaims,
                Example::NewOwnerAdmits,
            ],
        )
    }

    /// A model with these bounds, required to reach `examples`.
    pub fn new(name: &'static str, bounds: Bounds, examples: Vec<Example>) -> Self {
        let (initial, executor_ids) = prelude(&bounds);
        Self {
            name,
            bounds,
            examples,
            executor_ids,
            initial,
        }
    }

    /// The model's name, for reports.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The model's bounds.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }
}

/// What the model can do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// True time advances one tick: messages older than their longest transit are lost, a new
    /// leader may take office, and executors whose renewal is due (P3.5) send it.
    Tick {
        /// The executors whose due renewal is sent, in the order the leader receives them (when
        /// requests have no transit); the others' is lost. Executors renew on a timer, so a
        /// renewal is sent at the start of a tick and what happens in the tick interleaves with
        /// its delivery, not with its sending.
        renewals: Vec<usize>,
        /// A new leader takes office at the start of the tick with a clock this many ticks off
        /// the old one's (−1, 0 or +1), before any renewal reaches it (P6.1, P6.2).
        new_leader: Option<i8>,
    },
    /// A message arrives and is handled (the leader applies a request, an executor a delivery).
    Deliver(Message),
    /// As [`Action::Deliver`], and a copy stays in flight to arrive again.
    Duplicate(Message),
    /// The leader commits the plan of [`plan_rebalance`] and sends its revokes and pushes.
    Plan,
    /// The leader reaps the executors its core says are due (P3.8, P6.1).
    Reap,
    /// The leader completes the handoffs whose old grant expired, when its core allows (P6.1).
    CompleteHandoffs,
    /// An operator drains the first executor (`SetDraining`): the planner moves its shards away.
    Drain,
    /// The leader sends again the revoke of a handoff still current (P5.2, P6.2).
    ResendRevoke {
        /// The old owner's process.
        to: usize,
        /// The handoff's revoke revision.
        revision: u64,
    },
}

/// A message in flight. Executors are named by process index; the wire types are built from
/// these when the message arrives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Message {
    /// A renewal request (P4.2).
    Renew {
        from: usize,
        sent_tick: u64,
        claims: Vec<ShardEpoch>,
        revision: u64,
    },
    /// The leader's reply to a renewal (§9): what moves the executor's lease clock (P3.3).
    Grant {
        to: usize,
        sent_tick: u64,
        /// When the request it answers was sent: the executor anchors the lease there (P3.2).
        request_sent_tick: u64,
        /// The term of the leader that granted it, whose clock the lease was measured on.
        term: u8,
        lease_ttl_ms: u64,
        revision: u64,
        shards: Vec<ShardEpoch>,
    },
    /// A full-set push (P4.3), read at `revision`.
    Push {
        to: usize,
        sent_tick: u64,
        revision: u64,
        shards: Vec<ShardEpoch>,
    },
    /// A revoke (P5.2), committed at `revision`.
    Revoke {
        to: usize,
        sent_tick: u64,
        revision: u64,
        shards: Vec<ShardId>,
    },
    /// The executor's answer to a revoke: an acknowledgement for the shards it released.
    RevokeReply {
        from: usize,
        sent_tick: u64,
        revision: u64,
        /// The shards the revoke asked for (only those may be acknowledged).
        requested: Vec<ShardId>,
        released: Vec<ShardId>,
        ignored: bool,
    },
}

impl Bounds {
    /// A millisecond short of whole ticks: the manager counts a lease as lapsed only once its
    /// expiry's millisecond has passed (P3.2, `lease::state::lapsed`), so a lease granted at a
    /// tick lapses at the tick its length in ticks names, as the horizons assume.
    fn lease_ms(&self) -> u64 {
        self.lease_ticks * TICK_MS - 1
    }

    /// How long `message` may be in transit.
    fn transit_of(&self, message: &Message) -> u64 {
        match message {
            Message::Renew { .. } => self.request_transit_ticks,
            _ => self.transit_ticks,
        }
    }
}

/// Whether an executor renews at `tick` (P3.5): once a third of its lease has passed since the
/// instant its copy was anchored at, or when it holds none. Read from the core's own copy, so
/// a renewal whose answer was lost is retried on the same schedule. It is asked only at the
/// start of a tick, so an executor renews at most once a tick, which bounds the log.
fn renewal_due(core: &AdmissionCore, tick: u64, lease_ms: u64) -> bool {
    let renew_when_left = Duration::from_millis(lease_ms - lease_ms / 3);
    core.lease().expiry().is_none() || core.lease().remaining(instant(tick)) <= renew_when_left
}

impl Message {
    fn sent_tick(&self) -> u64 {
        match self {
            Message::Renew { sent_tick, .. }
            | Message::Grant { sent_tick, .. }
            | Message::Push { sent_tick, .. }
            | Message::Revoke { sent_tick, .. }
            | Message::RevokeReply { sent_tick, .. } => *sent_tick,
        }
    }
}

/// How a handoff ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Ending {
    /// On the old owner's revoke reply.
    Release,
    /// On a renewal whose claims omit the shard.
    Claims,
    /// On the old owner's last grant including it expiring.
    Expiry,
    /// The old owner was reaped.
    Reaped,
    /// A plan gave the shard back to its old owner.
    Cancelled,
}

/// Events that leave no trace in the lease state, remembered for the `sometimes` properties.
/// Monotone: once seen, seen for the rest of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
struct Seen {
    late_acknowledgement: bool,
    duplicate_acknowledgement: bool,
    retarget: bool,
}

/// The leader of the current term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Leader {
    /// 1, then 2 after the leader change.
    term: u8,
    /// This leader's clock against the true clock, in ticks; 0 for the first leader.
    offset_ticks: i8,
    /// Its clock when it took office: P6.1's grace runs a full lease from there.
    took_office_ms: u64,
}

/// The leader of term 1: its clock is the true clock, and it took office long before tick 0.
const FIRST_LEADER: Leader = Leader {
    term: 1,
    offset_ticks: 0,
    took_office_ms: 0,
};

impl Leader {
    /// The leader clock (P2.3) at a true tick.
    fn clock_ms(&self, tick: u64) -> u64 {
        self.clock_at(tick * TICK_MS)
    }

    /// The leader clock's reading when the true clock has run `true_ms` since tick 0.
    fn clock_at(&self, true_ms: u64) -> u64 {
        let offset_ticks = (CLOCK_START_TICKS as i64) + i64::from(self.offset_ticks);
        true_ms.saturating_add_signed(offset_ticks * TICK_MS as i64)
    }
}

/// One executor process.
#[derive(Debug, Clone)]
pub struct Process {
    /// The executor library's admission core, the whole of the executor's protocol state.
    core: AdmissionCore,
    /// The term whose leader answered the last grant it applied ([`HandoffModel::anchored`]).
    grant_term: u8,
}

/// The state of the world: time, the leader, the replicated state, the executors, the network,
/// and what the properties need to remember.
#[derive(Debug, Clone)]
pub struct HandoffState {
    tick: u64,
    leader: Leader,
    /// The replicated state every leader reads and writes.
    lease: LeaseState,
    processes: Vec<Process>,
    network: BTreeSet<Message>,
    duplicates_left: u8,
    /// Every (shard, epoch) an owner ever had, and whose it was (I2).
    minted: BTreeMap<(ShardId, Epoch), ExecutorId>,
    /// How each handoff, named by (shard, revoke revision), ended, and in which term.
    ended: BTreeMap<(ShardId, u64), (Ending, u8)>,
    seen: Seen,
    /// An I2 violation at its source: an epoch minted twice or out of order.
    i2_fault: Option<String>,
    /// A core answered something the model does not expect: a bug in the model or the core.
    model_fault: Option<String>,
}

impl HandoffState {
    /// The handoffs in progress: shard → (old owner, handoff), read before a command applies to
    /// tell how the command ended them.
    fn handoffs(&self) -> BTreeMap<ShardId, (ExecutorId, Handoff)> {
        self.lease
            .shards()
            .iter()
            .filter_map(|shard| {
                let owner = shard.owner.clone()?;
                let handoff = shard.handoff.clone()?;
                Some((shard.id, (owner, handoff)))
            })
            .collect()
    }

    /// Applies `command` as the next log entry and records the epochs it minted (I2).
    ///
    /// The entry is numbered right after the state's revision. Raft numbers every entry, and
    /// entries that change nothing (a renewal of nobody, a plan refused) leave the revision
    /// behind, but the state machine and the executors only ever compare revisions and indexes
    /// with each other, never count them, so a log without such gaps behaves the same and
    /// keeps paths that differ only by a skipped number from being told apart.
    fn apply(&mut self, command: &Command) -> Outcome {
        let log_index = self.lease.revision() + 1;
        let outcome = self.lease.apply(log_index, command);
        self.record_minted();
        outcome
    }

    /// Records that the handoff of `shard` in progress `before` ended `how`.
    fn end(
        &mut self,
        before: &BTreeMap<ShardId, (ExecutorId, Handoff)>,
        shard: ShardId,
        how: Ending,
    ) {
        if let Some((_, handoff)) = before.get(&shard) {
            self.ended
                .insert((shard, handoff.revoke_revision), (how, self.leader.term));
        }
    }

    fn ended_by(&self, how: Ending) -> bool {
        self.ended.values().any(|&(ending, _)| ending == how)
    }

    /// Whether the leader, its clock ahead, completed a handoff on expiry in its own term (P6.1).
    fn fast_leader_ended_by_expiry(&self) -> bool {
        self.leader.offset_ticks > 0
            && self
                .ended
                .values()
                .any(|&(how, term)| how == Ending::Expiry && term == self.leader.term)
    }

    /// Whether an executor other than the first holder admits a shard now.
    fn new_owner_admits(&self) -> bool {
        let now = instant(self.tick);
        self.processes
            .iter()
            .skip(1)
            .any(|process| (0..SHARD_COUNT).any(|shard| process.core.admit(shard, now).is_ok()))
    }

    /// Whether a grant in flight answers a renewal applied after the longest request transit.
    fn granted_after_slowest_request(&self, transit: u64) -> bool {
        self.network.iter().any(|message| {
            matches!(message, Message::Grant { sent_tick, request_sent_tick, .. }
                if *sent_tick == request_sent_tick + transit)
        })
    }

    /// Whether a grant in flight arrives now, after the longest transit back.
    fn grant_arrives_after_slowest_reply(&self, transit: u64) -> bool {
        self.network.iter().any(|message| {
            matches!(message, Message::Grant { sent_tick, .. }
                if self.tick == sent_tick + transit)
        })
    }

    fn fault(&mut self, fault: String) {
        self.model_fault.get_or_insert(fault);
    }

    /// Records the owners' epochs after a command applied (I2): a (shard, epoch) belongs to one
    /// executor for ever, and a shard's new epoch is above every epoch it had before.
    fn record_minted(&mut self) {
        let owned: Vec<(ShardId, Epoch, ExecutorId)> = self
            .lease
            .shards()
            .iter()
            .filter_map(|shard| Some((shard.id, shard.epoch, shard.owner.clone()?)))
            .collect();
        for (shard, epoch, owner) in owned {
            match self.minted.get(&(shard, epoch)) {
                Some(minted_for) if *minted_for != owner => {
                    self.i2_fault.get_or_insert(format!(
                        "epoch {epoch} of shard {shard} went to {minted_for}, then to {owner}"
                    ));
                }
                Some(_) => {}
                None => {
                    let newest = self
                        .minted
                        .range((shard, 0)..=(shard, Epoch::MAX))
                        .next_back()
                        .map(|(&(_, newest), _)| newest);
                    if newest.is_some_and(|newest| newest > epoch) {
                        self.i2_fault.get_or_insert(format!(
                            "shard {shard} went to {owner} at epoch {epoch}, below {newest:?}"
                        ));
                    }
                    self.minted.insert((shard, epoch), owner);
                }
            }
        }
    }
}
