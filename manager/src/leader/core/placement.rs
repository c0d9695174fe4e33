//! The leader's soft state for placement by load (PROTOCOL §15), as pure cores: time comes in as
//! the leader clock's `now_ms`. Each namespace (P18.1) has its own: its executors' loads name its
//! own shards, and its budget and cooldown count its own moves ([`TermPlacement`]).
//!
//! - [`LoadTracker`]: the loads executors report in their renewals (P15.1), clamped and smoothed
//!   per shard, and whether every live executor has been heard from. It is never replicated: a
//!   new leader starts empty and relearns every load within one renewal period, planning
//!   meanwhile as [`Loads::Learning`] (nothing that has a live holder moves).
//! - [`BalanceLedger`]: the moves made for balance, for the churn budget (P15.3: at most
//!   `--max-balance-moves` a minute, each charged until a minute after its handoff completed)
//!   and the cooldown that keeps a shard from moving back and forth (P15.4).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use leasehold_api::wire::{DEFAULT_NAMESPACE, MAX_SHARD_LOAD};

use crate::lease::{
    Command, ExecutorId, LeaseState, Loads, PlacementInputs, PlacementOverrides, Plan, ShardId,
    Space,
};

/// Weight of a new report in a shard's smoothed load. Small, so that noise in the reports (a
/// rate measured over one renewal interval) is averaged over about twenty renewals and an
/// executor inside the band is not carried out of it by noise alone; a real change of load is
/// taken at once instead ([`SUSTAINED_CHANGE_FACTOR`]).
pub const NEW_REPORT_WEIGHT: f64 = 0.05;

/// Two reports in a row at more than this factor above the smoothed load (or below it by the
/// same factor) are a real change, not noise: the shard's load becomes the latest report. A load
/// flapping between two values every renewal never qualifies, so it is seen near its mean.
pub const SUSTAINED_CHANGE_FACTOR: f64 = 2.0;

/// A smoothed load below this is zero: the remains of a load that stopped, which would
/// otherwise decay for hours without ever reaching zero.
pub const NEGLIGIBLE_LOAD: f64 = 1e-9;

/// Moves for balance are counted over this window for `--max-balance-moves` (per minute).
pub const BUDGET_WINDOW_MS: u64 = 60_000;

/// While a balance move's handoff is under way the leader looks this often whether it completed
/// ([`BalanceLedger::settle`]): its charge runs for a minute from when the leader saw it
/// complete, so a later look only holds the budget back longer.
pub const SETTLE_LOOK_INTERVAL_MS: u64 = 250;

/// A shard moved for balance is not moved for balance again for this long (P15.4): longer than
/// the smoothing needs to settle after its move (a few renewals at the default 20 s), so a plan
/// never reacts to the dip and spike the move itself causes in the reports.
pub const BALANCE_COOLDOWN_MS: u64 = 5 * 60_000;

/// How placement is configured (`--load-placement`, `--balance-tolerance`,
/// `--max-balance-moves`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacementSettings {
    /// Place by load when loads are reported (P15.2); off places by count only.
    pub by_load: bool,
    /// The band around the mean utilisation, as a fraction.
    pub tolerance: f64,
    /// Moves for balance per minute; `None`: 1 % of the shard count, at least 1 (P15.3).
    pub max_balance_moves_per_minute: Option<usize>,
}

impl Default for PlacementSettings {
    fn default() -> Self {
        Self {
            by_load: true,
            tolerance: crate::lease::DEFAULT_BALANCE_TOLERANCE,
            max_balance_moves_per_minute: None,
        }
    }
}

impl PlacementSettings {
    /// The settings a namespace's plans go by (P18.4): its own where it has them, these flags
    /// for the rest.
    pub fn for_namespace(&self, own: &PlacementOverrides) -> Self {
        Self {
            by_load: own.load_placement.unwrap_or(self.by_load),
            tolerance: own
                .balance_tolerance_percent
                .map_or(self.tolerance, |percent| f64::from(percent) / 100.0),
            max_balance_moves_per_minute: own
                .max_balance_moves_per_minute
                .and_then(|moves| usize::try_from(moves).ok())
                .or(self.max_balance_moves_per_minute),
        }
    }

    /// The budget for a namespace of `shard_count` shards.
    pub fn balance_moves_per_minute(&self, shard_count: u32) -> usize {
        self.max_balance_moves_per_minute.unwrap_or_else(|| {
            usize::try_from(shard_count / 100)
                .unwrap_or(usize::MAX)
                .max(1)
        })
    }
}

/// What an executor said about loads in its last renewal this term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reporting {
    Loads,
    NoLoads,
}

/// One shard's load as the tracker keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ShardLoad {
    /// Who reported it last (a number from `reporters`).
    reporter: u64,
    smoothed: f64,
    /// Whether the last report was a jump ([`SUSTAINED_CHANGE_FACTOR`]) and which way: up
    /// (`Some(true)`) or down.
    last_jump_up: Option<bool>,
}

impl ShardLoad {
    fn first(reporter: u64, value: f64) -> Self {
        Self {
            reporter,
            smoothed: value,
            last_jump_up: None,
        }
    }

    /// Takes one more report from the same holder.
    fn update(&mut self, value: f64) {
        let jump_up = if value > self.smoothed * SUSTAINED_CHANGE_FACTOR {
            Some(true)
        } else if value * SUSTAINED_CHANGE_FACTOR < self.smoothed {
            Some(false)
        } else {
            None
        };
        if jump_up.is_some() && jump_up == self.last_jump_up {
            self.smoothed = value;
            self.last_jump_up = None;
            return;
        }
        self.smoothed += NEW_REPORT_WEIGHT * (value - self.smoothed);
        self.last_jump_up = jump_up;
    }
}

/// The loads reported this term, smoothed per shard (P15.1).
#[derive(Debug, Clone, Default)]
pub struct LoadTracker {
    /// Per shard (index = shard number): its smoothed load and who reported it last; `None`
    /// until some holder reported it. A report from a new holder starts the shard afresh, so
    /// what one executor said of a shard (a bug, or a lie) is forgotten as soon as the shard
    /// leaves it.
    smoothed: Vec<Option<ShardLoad>>,
    /// A small number for each executor heard from, so `smoothed` need not hold ids.
    reporters: BTreeMap<ExecutorId, u64>,
    next_reporter: u64,
    /// Whether each executor heard from this term reports loads. At most one entry per
    /// registered executor: departed ones are forgotten ([`LoadTracker::retain_executors`]).
    reporting: BTreeMap<ExecutorId, Reporting>,
}

impl LoadTracker {
    /// A tracker for a new term: nothing known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one renewal: the executor holds `held` (its delivered set after the renewal)
    /// and reported `loads` (`None`: it does not report loads; a held shard missing from the
    /// list has load 0). Loads for shards it does not hold are ignored: ownership may have
    /// moved under the report. Each value is clamped to `0..=max_shard_load` (a value that is
    /// not a number counts as 0) before smoothing.
    pub fn record(
        &mut self,
        executor_id: &str,
        shard_count: u32,
        held: &[ShardId],
        loads: Option<&[(ShardId, f64)]>,
        max_shard_load: f64,
    ) {
        let Some(loads) = loads else {
            self.reporting
                .insert(executor_id.to_owned(), Reporting::NoLoads);
            return;
        };
        self.reporting
            .insert(executor_id.to_owned(), Reporting::Loads);
        let reporter = match self.reporters.get(executor_id) {
            Some(&number) => number,
            None => {
                let number = self.next_reporter;
                self.next_reporter += 1;
                self.reporters.insert(executor_id.to_owned(), number);
                number
            }
        };
        let size = usize::try_from(shard_count).unwrap_or(0);
        if self.smoothed.len() != size {
            self.smoothed = vec![None; size];
        }
        let reported: BTreeMap<ShardId, f64> = loads.iter().copied().collect();
        for &shard in held {
            let Some(slot) = usize::try_from(shard)
                .ok()
                .and_then(|index| self.smoothed.get_mut(index))
            else {
                continue;
            };
            let value = reported.get(&shard).copied().unwrap_or(0.0);
            let value = if value.is_nan() {
                0.0
            } else {
                value.clamp(0.0, max_shard_load)
            };
            let mut load = match *slot {
                Some(mut load) if load.reporter == reporter => {
                    load.update(value);
                    load
                }
                _ => ShardLoad::first(reporter, value),
            };
            if load.smoothed < NEGLIGIBLE_LOAD {
                load.smoothed = 0.0;
            }
            *slot = Some(load);
        }
    }

    /// Forgets executors that are no longer registered, so the tracker stays bounded by the
    /// executors the state holds.
    pub fn retain_executors(&mut self, state: &LeaseState) {
        self.reporting
            .retain(|executor_id, _| state.executor(executor_id).is_some());
        self.reporters
            .retain(|executor_id, _| state.executor(executor_id).is_some());
    }

    /// The smoothed load of `shard`, if any holder reported it this term.
    pub fn shard_load(&self, shard: ShardId) -> Option<f64> {
        usize::try_from(shard)
            .ok()
            .and_then(|index| self.smoothed.get(index))
            .copied()
            .flatten()
            .map(|load| load.smoothed)
    }

    /// Every shard's smoothed load, index = shard (0 when never reported), sized to the
    /// namespace.
    pub fn shard_loads(&self, space: Space<'_>) -> Vec<f64> {
        let size = space.shards().len();
        (0..size)
            .map(|index| {
                self.smoothed
                    .get(index)
                    .copied()
                    .flatten()
                    .map_or(0.0, |load| load.smoothed)
            })
            .collect()
    }

    /// What placement may go by at `now_ms`:
    /// - [`Loads::Learning`] while some live executor that holds shards has not renewed this
    ///   term (its loads are unknown, so a balanced fleet cannot be told from an unbalanced one);
    /// - [`Loads::Counts`] when some live executor does not report loads, or no load is positive;
    /// - [`Loads::Reported`] otherwise.
    ///
    /// An executor that holds nothing and has not renewed yet (one that just registered)
    /// carries no load, so it does not hold placement back.
    pub fn loads(&self, space: Space<'_>, now_ms: u64) -> Loads {
        // A shard's holder is the target of its handoff while it is releasing, else its owner.
        // Found from the releasing index and each executor's own set, not a scan of the shard
        // table: this runs every leader step, at a million shards too.
        let targets: BTreeSet<&str> = space
            .releasing()
            .filter_map(|(_, handoff)| handoff.to.as_deref())
            .collect();
        let holds =
            |executor_id: &str| targets.contains(executor_id) || space.has_delivered(executor_id);
        for executor in space
            .executors()
            .filter(|executor| !executor.lease_lapsed(now_ms) && !executor.draining)
        {
            match self.reporting.get(&executor.id) {
                Some(Reporting::NoLoads) => return Loads::Counts,
                Some(Reporting::Loads) => {}
                None if holds(&executor.id) => return Loads::Learning,
                None => {}
            }
        }
        let loads = self.shard_loads(space);
        if loads.iter().any(|load| *load > 0.0) {
            Loads::Reported(loads)
        } else {
            Loads::Counts
        }
    }
}

/// Moves made for balance, for the budget and the cooldown (P15.3, P15.4). Bounded: a move
/// leaves it once it has cooled and its charge has run out, and no more than the budget enters
/// while the charges of the last minute are outstanding.
///
/// A move changes ownership when its handoff completes, not when its plan is applied: the old
/// owner's acknowledgement may take a round trip or a release hook's 1.5 s, or never come, and
/// then the handoff completes on expiry. Charged only for the minute after its plan, a move that
/// completed late and the next minute's moves that completed at once would change ownership
/// within one minute more often than the budget allows (13 against 11 under steady load). So a
/// move stays charged while its handoff is under way, and for a minute after the leader saw it
/// complete ([`BalanceLedger::settle`]).
#[derive(Debug, Clone, Default)]
pub struct BalanceLedger {
    /// Each committed balance move, oldest first.
    moves: VecDeque<Charge>,
}

/// One committed balance move in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Charge {
    /// Leader-clock ms at which its plan was applied.
    at_ms: u64,
    shard: ShardId,
    /// Leader-clock ms at which the leader first saw its handoff over (the shard releasing no
    /// more); `None` while it is under way, or not looked at since.
    settled_ms: Option<u64>,
}

impl Charge {
    /// Whether it still counts against the budget at `now_ms`: its handoff is under way, or
    /// was seen over less than [`BUDGET_WINDOW_MS`] ago (it was applied no later than that).
    fn counts_at(&self, now_ms: u64) -> bool {
        let window_start = now_ms.saturating_sub(BUDGET_WINDOW_MS);
        self.settled_ms
            .is_none_or(|settled_ms| settled_ms.max(self.at_ms) > window_start)
    }
}

impl BalanceLedger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves for balance still allowed at `now_ms` under a budget of `per_minute`.
    pub fn allowed(&self, now_ms: u64, per_minute: usize) -> usize {
        let used = self
            .moves
            .iter()
            .filter(|charge| charge.counts_at(now_ms))
            .count();
        per_minute.saturating_sub(used)
    }

    /// Shards moved for balance within the cooldown before `now_ms`.
    pub fn cooling(&self, now_ms: u64) -> BTreeSet<ShardId> {
        let cooldown_start = now_ms.saturating_sub(BALANCE_COOLDOWN_MS);
        self.moves
            .iter()
            .filter(|charge| charge.at_ms > cooldown_start)
            .map(|charge| charge.shard)
            .collect()
    }

    /// Records the balance moves of a plan committed at `now_ms`, and forgets the moves that
    /// have cooled and no longer count.
    pub fn record(&mut self, now_ms: u64, shards: &[ShardId]) {
        let cooldown_start = now_ms.saturating_sub(BALANCE_COOLDOWN_MS);
        self.moves
            .retain(|charge| charge.at_ms > cooldown_start || charge.counts_at(now_ms));
        self.moves.extend(shards.iter().map(|&shard| Charge {
            at_ms: now_ms,
            shard,
            settled_ms: None,
        }));
    }

    /// Whether a move's handoff was under way when last looked at ([`BalanceLedger::settle`]).
    pub fn in_flight(&self) -> bool {
        self.moves.iter().any(|charge| charge.settled_ms.is_none())
    }

    /// Looks at `space` at `now_ms`: a move whose shard is no longer releasing has completed
    /// its handoff (or had it cancelled) by now, and is charged for a minute from now. The
    /// leader looks at every step and, while a move is in flight, every
    /// [`SETTLE_LOOK_INTERVAL_MS`] between steps, so a move stays charged at most that much
    /// longer than it must.
    pub fn settle(&mut self, space: Space<'_>, now_ms: u64) {
        for charge in self.moves.iter_mut().filter(|c| c.settled_ms.is_none()) {
            let releasing = space
                .shard(charge.shard)
                .is_some_and(|shard| shard.handoff.is_some());
            if !releasing {
                charge.settled_ms = Some(now_ms);
            }
        }
    }
}

/// The inputs of one plan of `space` at `now_ms`: what its tracker knows, its budget left, its
/// cooling shards. With load placement off, primaries go by count alone, which no budget
/// limits; the budget is still there for the secondaries' moves for balance (P19.2, P19.3).
pub fn placement_inputs(
    settings: &PlacementSettings,
    tracker: &LoadTracker,
    ledger: &BalanceLedger,
    space: Space<'_>,
    now_ms: u64,
) -> PlacementInputs {
    let shard_count = space.config().map_or(0, |config| config.shard_count);
    if !settings.by_load {
        return PlacementInputs {
            balance_moves_allowed: ledger
                .allowed(now_ms, settings.balance_moves_per_minute(shard_count)),
            cooling: ledger.cooling(now_ms),
            ..PlacementInputs::by_count()
        };
    }
    PlacementInputs {
        loads: tracker.loads(space, now_ms),
        tolerance: settings.tolerance,
        balance_moves_allowed: ledger
            .allowed(now_ms, settings.balance_moves_per_minute(shard_count)),
        cooling: ledger.cooling(now_ms),
    }
}

/// One namespace's placement soft state this term: its loads and its balance moves.
#[derive(Debug, Clone, Default)]
pub struct SpacePlacement {
    pub tracker: LoadTracker,
    pub ledger: BalanceLedger,
}

/// One leader term's placement soft state: what the leader loop (and the simulator's leader)
/// keeps between steps, per namespace. A new term starts with a new one (P15.1: loads are
/// relearned). Bounded by the namespaces the state holds ([`TermPlacement::retain`]).
#[derive(Debug, Clone)]
pub struct TermPlacement {
    pub settings: PlacementSettings,
    spaces: BTreeMap<String, SpacePlacement>,
}

impl TermPlacement {
    pub fn new(settings: PlacementSettings) -> Self {
        Self {
            settings,
            spaces: BTreeMap::new(),
        }
    }

    /// What this term knows of `namespace`'s loads and moves; `None` before any report or move
    /// of it.
    pub fn space(&self, namespace: &str) -> Option<&SpacePlacement> {
        self.spaces.get(namespace)
    }

    /// `namespace`'s soft state, made empty if it has none yet.
    pub fn space_mut(&mut self, namespace: &str) -> &mut SpacePlacement {
        self.spaces.entry(namespace.to_owned()).or_default()
    }

    /// `default`'s tracker (what the single-namespace views and tests read).
    pub fn tracker(&self) -> Option<&LoadTracker> {
        self.space(DEFAULT_NAMESPACE).map(|space| &space.tracker)
    }

    /// Takes in one executor's load report, read with `state`, into its namespace's tracker:
    /// its loads name that namespace's shards (P18.1).
    pub fn take_report(
        &mut self,
        state: &LeaseState,
        executor_id: &str,
        report: &crate::lease::load_summary::ReportedLoads,
    ) {
        use crate::lease::load_summary::ReportedLoads;
        let Some(space) = state
            .executor(executor_id)
            .and_then(|executor| state.space(&executor.namespace))
        else {
            return;
        };
        let shard_count = space.config().map_or(0, |config| config.shard_count);
        let tracker = &mut self.space_mut(space.name()).tracker;
        match report {
            ReportedLoads::NotReporting => {
                tracker.record(executor_id, shard_count, &[], None, MAX_SHARD_LOAD)
            }
            ReportedLoads::PerShard { measured, loads } => {
                let loads: Vec<(ShardId, f64)> = loads
                    .iter()
                    .map(|entry| (entry.shard, entry.load))
                    .collect();
                tracker.record(
                    executor_id,
                    shard_count,
                    measured,
                    Some(&loads),
                    MAX_SHARD_LOAD,
                );
            }
        }
    }

    /// Forgets namespaces the state no longer holds and executors no longer registered, so the
    /// soft state stays bounded by the state.
    pub fn retain(&mut self, state: &LeaseState) {
        self.spaces
            .retain(|namespace, _| state.namespace(namespace).is_some());
        for space in self.spaces.values_mut() {
            space.tracker.retain_executors(state);
        }
    }

    /// Looks at every namespace's balance moves in `state` at `now_ms` (the start of a step):
    /// those whose handoffs are over are charged for a minute from now (P15.3,
    /// [`BalanceLedger::settle`]).
    pub fn settle(&mut self, state: &LeaseState, now_ms: u64) {
        for (namespace, placement) in &mut self.spaces {
            if let Some(space) = state.space(namespace) {
                placement.ledger.settle(space, now_ms);
            }
        }
    }

    /// Whether some namespace's balance move was in flight when last looked at.
    pub fn balance_in_flight(&self) -> bool {
        self.spaces.values().any(|space| space.ledger.in_flight())
    }

    /// The settings `space`'s plans go by: its own over the flags (P18.4).
    pub fn settings_for(&self, space: Space<'_>) -> PlacementSettings {
        self.settings.for_namespace(&space.namespace().placement)
    }

    /// What the next plan of `space` at `now_ms` goes by.
    pub fn inputs(&self, space: Space<'_>, now_ms: u64) -> PlacementInputs {
        let empty = SpacePlacement::default();
        let known = self.space(space.name()).unwrap_or(&empty);
        placement_inputs(
            &self.settings_for(space),
            &known.tracker,
            &known.ledger,
            space,
            now_ms,
        )
    }

    /// What the next plan of every namespace of `state` at `now_ms` goes by, by namespace.
    pub fn inputs_by_namespace(
        &self,
        state: &LeaseState,
        now_ms: u64,
    ) -> BTreeMap<String, PlacementInputs> {
        state
            .spaces()
            .map(|space| (space.name().to_owned(), self.inputs(space, now_ms)))
            .collect()
    }

    /// A plan was committed at `now_ms`: its balance moves are charged to its namespace's
    /// budget and cool there.
    pub fn committed(&mut self, now_ms: u64, plan: &Plan) {
        let (Command::Rebalance { namespace, .. } | Command::PlaceSecondaries { namespace, .. }) =
            &plan.command
        else {
            return;
        };
        let balance = plan.balance_shards();
        if balance.is_empty() {
            return;
        }
        self.space_mut(namespace).ledger.record(now_ms, &balance);
    }
}
