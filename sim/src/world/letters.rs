//! What travels and what is scheduled: requests, replies, pushes and the events of the queue.

use super::*;

/// What a manager receives from an executor.
#[derive(Debug, Clone)]
pub(super) enum Request {
    Register {
        call: u64,
        request: RegisterRequest,
    },
    Renew {
        call: u64,
        executor_id: String,
        request: RenewRequest,
    },
    Deregister {
        call: u64,
        executor_id: String,
    },
    PushReply {
        delivery: u64,
        ok: bool,
    },
    RevokeReply {
        delivery: u64,
        reply: Option<RevokeReply>,
    },
}

impl Request {
    pub(super) fn kind(&self) -> LetterKind {
        match self {
            Request::Register { .. } | Request::Renew { .. } | Request::Deregister { .. } => {
                LetterKind::Call
            }
            Request::PushReply { .. } | Request::RevokeReply { .. } => LetterKind::Ack,
        }
    }
}

/// What an executor receives from a manager.
#[derive(Debug, Clone)]
pub(super) enum Message {
    Granted { call: u64, grant: Grant },
    UnknownExecutor { call: u64 },
    CallFailed { call: u64 },
    Deregistered { call: u64 },
    Push { delivery: u64, push: AssignmentPush },
    Revoke { delivery: u64, revoke: RevokePush },
}

impl Message {
    pub(super) fn kind(&self) -> LetterKind {
        match self {
            Message::Push { .. } => LetterKind::Push,
            Message::Revoke { .. } => LetterKind::Revoke,
            Message::Granted { .. }
            | Message::UnknownExecutor { .. }
            | Message::CallFailed { .. }
            | Message::Deregistered { .. } => LetterKind::Reply,
        }
    }
}

/// What a message in a script's network is, as a script names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetterKind {
    /// Manager to executor: a full-set push (P4.3).
    Push,
    /// Manager to executor: a revoke (P5.2).
    Revoke,
    /// Manager to executor: the answer to a register, renew or deregister call.
    Reply,
    /// Executor to managers: a register, renew or deregister call.
    Call,
    /// Executor to managers: the answer to a push or a revoke (a revoke's is its
    /// acknowledgement, P5.2).
    Ack,
}

/// A message a script's network holds until the script delivers or drops it.
#[derive(Debug, Clone)]
pub struct Letter {
    pub id: u64,
    /// The executor slot it comes from or goes to.
    pub slot: Slot,
    pub kind: LetterKind,
    pub(super) arrival: Event,
}

impl std::fmt::Display for Letter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, direction) = match self.kind {
            LetterKind::Push => ("push", "to"),
            LetterKind::Revoke => ("revoke", "to"),
            LetterKind::Reply => ("reply", "to"),
            LetterKind::Call => ("call", "from"),
            LetterKind::Ack => ("answer", "from"),
        };
        write!(f, "{kind} {direction} slot {}", self.slot)
    }
}

/// Who decides when things happen.
#[derive(Debug)]
pub(super) enum Driver {
    /// The seed: every loop runs on its own timers and a random network carries the messages.
    Seed,
    /// A script ([`crate::script`]): the loops' timers wait for the script to fire them, the
    /// network holds every message until the script delivers or drops it, and the leader's
    /// proposals commit at once unless the script holds them (Raft replication stalled).
    Script {
        mailbox: Vec<Letter>,
        next_letter: u64,
        commits_held: bool,
    },
}

/// One of the loops' own timers, which a script fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// The leader loop's tick (P3.8): a step of its core and the step's writes.
    LeaderStep,
    /// The lease loop of the executor in the slot: its next call, a renewal, or a registration
    /// (same incarnation, P7.2) when none stands.
    ExecutorCall(Slot),
}

#[derive(Debug, Clone)]
pub(super) enum Event {
    /// The executor's lease loop wakes for its next call.
    Call {
        slot: Slot,
        process: u64,
    },
    CallTimeout {
        slot: Slot,
        process: u64,
        call: u64,
    },
    /// A message reaches the managers (whoever leads when it arrives).
    ToManagers {
        slot: Slot,
        process: u64,
        request: Request,
    },
    ToExecutor {
        slot: Slot,
        message: Message,
    },
    Commit {
        term: u64,
    },
    /// The leader loop wakes for a step at once: a commit asked for one, or a step ended with
    /// more to do (the loop's notification, P3.8).
    LeaderStep {
        term: u64,
    },
    /// The leader loop's sleep of a tick ends: a step, unless the loop woke for one since
    /// (`tick` is no longer the leader's [`Leader::tick`]), as production's loop drops its sleep
    /// when notified.
    LeaderTick {
        term: u64,
        tick: u64,
    },
    DeliveryRound {
        term: u64,
    },
    DeliveryTimeout {
        term: u64,
        delivery: u64,
    },
    /// The deposed leader of `term` sends another round from its stale state.
    DeposedRound {
        term: u64,
    },
    FollowerApply,
    Elected {
        manager: usize,
        /// The new leader's clock offset; drawn when `None`.
        offset_ms: Option<i64>,
    },
    StallOver {
        term: u64,
    },
    /// A follower's acknowledgement of a confirmation round of `term`'s leader (P6.5).
    ConfirmationAck {
        term: u64,
        follower: u64,
        round: Round,
    },
    /// A request from a slot stranded with the deposed leader of `term` reaches it.
    ToDeposed {
        term: u64,
        slot: Slot,
        request: Request,
    },
    Resume {
        slot: Slot,
        process: u64,
    },
    StopDeadline {
        slot: Slot,
        process: u64,
    },
    PartitionHealed {
        slot: Slot,
        to_managers: bool,
        from_managers: bool,
    },
    /// The true loads are re-permuted over the shards.
    HotSetShift,
    Fault(Fault),
    EndChaos,
}

impl Event {
    /// Whether handling it may change what an executor process admits: a message or timer of
    /// an executor, a fault, the end of the chaos. Every other event is the managers' (their
    /// messages to executors are events of their own), so it leaves every admission core as it
    /// was; and what a core admits only shrinks as time passes (a lease runs out), while the
    /// epochs minted only grow. So I1 and I2 over the admission cores, which found nothing
    /// after the event before, find nothing after such an event either, and are not re-read
    /// ([`crate::checks::Checker::after_event`]); a violation a commit found is still reported
    /// after it.
    pub(super) fn may_change_admission(&self) -> bool {
        matches!(
            self,
            Event::Call { .. }
                | Event::CallTimeout { .. }
                | Event::ToExecutor { .. }
                | Event::Resume { .. }
                | Event::StopDeadline { .. }
                | Event::Fault(_)
                | Event::EndChaos
        )
    }
}

#[derive(Debug)]
pub(super) struct Scheduled {
    pub(super) at_us: u64,
    pub(super) seq: u64,
    pub(super) event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.seq) == (other.at_us, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_us, self.seq).cmp(&(other.at_us, other.seq))
    }
}
