//! The executors' processes and the leader's soft state as the world keeps them.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    Running,
    Paused {
        until_us: u64,
    },
    /// A graceful stop is under way (admission already off).
    Stopping,
    Dead,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum CallKind {
    Register,
    Renew,
    Deregister,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Call {
    pub(super) id: u64,
    pub(super) kind: CallKind,
}

/// A renewal as a simulated process sends it: its executor id and request.
pub(super) type SimRenewal = (String, RenewRequest);

/// One executor process: the real admission core and schedule, and what the shell keeps.
#[derive(Debug)]
pub struct Process {
    pub id: u64,
    pub core: AdmissionCore,
    /// The lease loop's calls, as production's shell steps them.
    pub(super) calls: LeaseCalls,
    /// The register or renew call in flight, as it left.
    pub(super) lease_call: Option<LeaseCall<SimRenewal>>,
    pub life: Life,
    pub(super) incarnation: String,
    pub(super) incarnations: u64,
    pub(super) call: Option<Call>,
    pub(super) rate_ppm: i64,
    /// A register was sent under the current incarnation (P7.2): a stop deregisters it.
    pub(super) register_sent: bool,
    /// The capacity it states when it registers (P15.1).
    pub(super) capacity: u32,
    /// The labels it states when it registers: its zone, if the fleet has zones (P18.3).
    pub(super) labels: Labels,
    /// The namespace it registers into (P18.1), and its space in the scenario (0: `default`).
    pub namespace: String,
    pub space: usize,
}

impl Process {
    pub fn admits(&self) -> bool {
        self.life != Life::Dead
    }
}

/// A proposal waiting in the leader's uncommitted tail, and whom its outcome answers.
#[derive(Debug, Clone)]
pub(super) enum ReplyTo {
    Nobody,
    Register { slot: Slot, call: u64 },
    Renew(Vec<Renewer>),
    Deregister { slot: Slot, call: u64 },
    StepWrite,
}

/// One renewal of a batch: whom its outcome answers and what it said of loads.
#[derive(Debug, Clone)]
pub(super) struct Renewer {
    pub(super) slot: Slot,
    pub(super) call: u64,
    pub(super) loads: Report,
}

#[derive(Debug, Clone)]
pub(super) struct Proposal {
    pub(super) command: Command,
    pub(super) reply_to: ReplyTo,
}

#[derive(Debug)]
pub(super) struct Inflight {
    pub(super) kind: InflightKind,
}

#[derive(Debug)]
pub(super) enum InflightKind {
    Push {
        executor_id: String,
    },
    Revoke {
        executor_id: String,
        requested: Vec<u32>,
        revision: u64,
    },
}

/// The leader of one term: its clock, its loop's core, its delivery shell.
#[derive(Debug)]
pub(super) struct Leader {
    pub(super) term: u64,
    pub(super) manager: usize,
    /// Leader clock = true clock × (1 + rate) + offset (P2.3: the wall clock read on taking office,
    /// then monotonic time).
    pub(super) offset_ms: i64,
    pub(super) rate_ppm: i64,
    /// The term's steps, as production's leader loop steps them.
    pub(super) steps: TermSteps,
    /// The loop's sleeps so far: the one under way ends with the [`Event::LeaderTick`] that
    /// carries this number, and a step begun meanwhile ends it (production's loop sleeps a tick
    /// or until notified, one step at a time).
    pub(super) tick: u64,
    pub(super) planner: DeliveryPlanner,
    pub(super) pending_pushes: BTreeSet<String>,
    pub(super) last_renewal_applied_ms: Option<u64>,
    pub(super) tail: Vec<Proposal>,
    pub(super) commit_scheduled: bool,
    /// The delivery round under way, as production's shell steps it.
    pub(super) round: Option<DeliveryRound>,
    /// What each delivery in flight was, by its id, to tell its answer.
    pub(super) round_in_flight: BTreeMap<u64, Inflight>,
    pub(super) round_again: bool,
    pub(super) stalled_until_us: Option<u64>,
    /// What the step under way places each namespace by (the term's steps hold it; the checks
    /// need the loads).
    pub(super) step_loads: BTreeMap<String, Loads>,
    /// P6.8: what this term told from memory (production's core).
    pub(super) memory: MemoryLeases,
    /// P6.5: this term's confirmation rounds and its followers' acknowledgements (the core the
    /// confirmation model checks).
    pub(super) confirmation: LeadershipConfirmation,
    /// Renewals waiting for a round started after they arrived, with the round each needs.
    pub(super) awaiting_confirmation: Vec<(Round, Renewal, Renewer)>,
}

/// A deposed leader that has not noticed yet, cut off from the other managers: it pushes from
/// its frozen state, and the executors stranded with it (cut off from the others) send it their
/// calls. It cannot commit, and its confirmation rounds reach no follower (P6.5), so a correct
/// build answers none of them; it fails them when it learns of the newer term.
#[derive(Debug)]
pub(super) struct Deposed {
    pub(super) term: u64,
    pub(super) state: LeaseState,
    pub(super) planner: DeliveryPlanner,
    pub(super) offset_ms: i64,
    pub(super) rate_ppm: i64,
    pub(super) until_us: u64,
    /// From here it has heard no quorum for a Raft lease: it answers every call at once as
    /// leading nothing, and fails those it held (P8.4).
    pub(super) leads_nothing_from_us: u64,
    pub(super) memory: MemoryLeases,
    pub(super) confirmation: LeadershipConfirmation,
    /// Slots that reach this leader and no other manager until `until_us`.
    pub(super) stranded: BTreeSet<Slot>,
    pub(super) awaiting_confirmation: Vec<(Round, Renewal, Renewer)>,
    /// Calls that would need a commit: they wait until it learns of the newer term.
    pub(super) held_calls: Vec<(Slot, u64)>,
}
