//! The leader loop (PROTOCOL §3.8, §5, §6): runs only on the leader, in a term of its own.
//!
//! Each step, at least every tick (a third of the lease) and at once when something changed the
//! membership: reap (its own write, P3.8) → complete handoffs whose old grant expired → plan and
//! commit a rebalance (P5.1, committed before any of it is sent; a plan cut at
//! `MAX_MOVES_PER_PLAN` is followed by another step at once). Deliveries (revokes and full-set
//! pushes) are fanned out by [`deliver`], repaired forwards when they fail (P5.3).
//! Time decisions live in the pure [`core`]; the order of a step's writes, and when the next
//! step is due, in the pure [`term`] ([`TermSteps`]), which the simulator (`sim/`) steps too. Placement by load (PROTOCOL §15) keeps one
//! [`placement::TermPlacement`] per term: each step takes in the loads reported since the last
//! one, plans with what it knows, and charges a committed plan's balance moves to the budget.

pub mod cluster_version;
pub mod config_writes;
pub mod core;
pub mod deliver;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use self::config_writes::ConfigWrites;
use self::core::placement::{
    PlacementSettings, SpacePlacement, TermPlacement, SETTLE_LOOK_INTERVAL_MS,
};
use self::core::prepare::Prepared;
use self::core::term::{NextStep, Office, TermSteps, Written};
use self::core::{Deferral, GuardConfig, GuardEvent, StepDecision, StepWrite};
use crate::handles::cpu_bound;
use crate::handles::leadership::Leadership;
use crate::handles::leadership::{Leader, ReadBarrierError};
use crate::handles::load_reports::{LoadPicture, SpaceLoads};
use crate::handles::load_reports::{LoadReports, PublishedLoads};
use crate::handles::signals::LeaderSignals;
use crate::lease::answer::{
    CommandAnswer, HandoffsCompleted, Reaped, Rebalanced, Resharded, SecondariesPlaced,
};
use crate::lease::load_summary::LoadSummary;
use crate::lease::{
    Answer, Command, LeaseState, Loads, PlacementInputs, RefusalReason, MAX_MOVES_PER_PLAN,
};
use crate::node::ManagerNode;
use crate::raft::LeaseStateHandle;
use crate::renewals::from_memory::MemoryRenewals;

/// How often the loop checks for leadership while not leading.
const NOT_LEADER_POLL: Duration = Duration::from_millis(200);

/// What the leader loop reads and writes, and nothing else of the node: who leads (with the
/// proposer and the clock), the applied state, the signals commits leave it, the one HTTP client
/// (for deliveries), the loads reported and published, and the configuration writes it makes on
/// taking office.
#[derive(Debug, Clone)]
pub struct LeaderHandle {
    pub leadership: Leadership,
    pub state: LeaseStateHandle,
    pub signals: Arc<LeaderSignals>,
    pub http: reqwest::Client,
    pub load_reports: LoadReports,
    pub published_loads: PublishedLoads,
    pub config_writes: ConfigWrites,
    /// `--prepare-timeout` (P17.1): how long a plan waits for receivers to prepare; zero: not.
    pub prepare_timeout: Duration,
    /// What renewals answered from memory told, which the step judges leases by (P6.7).
    pub memory_renewals: MemoryRenewals,
}

impl LeaderHandle {
    pub fn of(node: &ManagerNode, prepare_timeout: Duration) -> Self {
        Self {
            prepare_timeout,
            leadership: node.leadership.clone(),
            state: node.state.clone(),
            signals: node.signals.clone(),
            http: node.http.clone(),
            load_reports: node.load_reports.clone(),
            published_loads: node.published_loads.clone(),
            config_writes: ConfigWrites::of(node),
            memory_renewals: node.memory_renewals.clone(),
        }
    }
}

/// Runs for the life of the process: leads while this node is leader, idles otherwise. `guard`
/// is the mass-expiry guard's configuration (P6.3) every term's core starts with, `placement`
/// how every term places shards (§15).
pub async fn run(
    node: LeaderHandle,
    guard: GuardConfig,
    placement: PlacementSettings,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut metrics = node.leadership.raft.metrics();
    loop {
        let (state, term) = {
            let m = metrics.borrow_and_update();
            (m.state, m.current_term)
        };
        if state == ServerState::Leader && node.leadership.leader() == Leader::Local {
            lead_term(&node, guard, placement, term, &mut shutdown).await;
        }
        if *shutdown.borrow() {
            return;
        }
        tokio::select! {
            _ = metrics.changed() => {}
            _ = tokio::time::sleep(NOT_LEADER_POLL) => {}
            _ = shutdown.changed() => return,
        }
    }
}

fn still_leading(node: &LeaderHandle, term: u64) -> bool {
    let metrics = node.leadership.raft.metrics();
    let m = metrics.borrow();
    m.state == ServerState::Leader && m.current_term == term && !node.leadership.is_stepping_down()
}

async fn lead_term(
    node: &LeaderHandle,
    guard: GuardConfig,
    placement_settings: PlacementSettings,
    term: u64,
    shutdown: &mut watch::Receiver<bool>,
) {
    let Some(office) = take_office(node, term).await else {
        return;
    };
    // The configuration writes wait for the anchored clock; a new cluster's `Init` is due now,
    // not at the next change of the Raft metrics.
    config_writes::ensure_lease_config(&node.config_writes).await;
    let mut term_steps = TermSteps::new(
        office.took_office_ms,
        guard,
        placement_settings,
        MAX_MOVES_PER_PLAN,
    );
    let mut reports_taken = 0;
    let mut prepared = Prepared::default();
    node.signals.reset_for_new_term();
    // Loads reach only the leader of the moment (P15.1): what this node heard in an earlier term
    // is stale, and every executor reports again within a renewal period.
    node.load_reports.clear();
    let owed = node
        .state
        .read(|applied| core::term::owed_pushes(&applied.state));
    node.signals.mark_for_push(owed);
    let (stop_delivery, delivery_stopped) = watch::channel(false);
    let handle = deliver::DeliveryHandle {
        state: node.state.clone(),
        signals: node.signals.clone(),
        http: node.http.clone(),
        clock: node.leadership.clock.clone(),
        proposer: node.leadership.proposer.clone(),
    };
    let delivery = tokio::spawn(deliver::run(handle, term, delivery_stopped));

    while still_leading(node, term) && !*shutdown.borrow() {
        step(node, &mut term_steps, &mut reports_taken, &mut prepared).await;
        let lease_ms = node.state.read(|a| a.state.shortest_lease_duration_ms());
        let NextStep::After { tick_ms } = term_steps.next_step(lease_ms) else {
            continue;
        };
        let next_step = tokio::time::sleep(Duration::from_millis(tick_ms));
        tokio::pin!(next_step);
        loop {
            // While a balance move's handoff is under way, look often whether it completed: its
            // charge runs for a minute from then (P15.3), not from the next step.
            let look = term_steps.placement().balance_in_flight();
            tokio::select! {
                _ = &mut next_step => break,
                _ = node.signals.replan.notified() => break,
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(Duration::from_millis(SETTLE_LOOK_INTERVAL_MS)), if look => {
                    let now_ms = node.leadership.clock.now_ms();
                    node.state
                        .read(|applied| term_steps.placement_mut().settle(&applied.state, now_ms));
                }
            }
        }
    }
    let _ = stop_delivery.send(true);
    let _ = delivery.await;
    node.published_loads.withdraw();
    tracing::info!(term, "no longer leading");
}

/// Anchors the leader clock for `term` (P2.3, P6.4) once every entry of earlier terms is applied
/// (the linearizable-read barrier: the term's first entry and anything this node logged before
/// a restart applied, leadership confirmed by a quorum),
/// at the wall clock raised to what the state holds. Until then the proposer refuses every
/// stamp, so nothing this term writes was stamped below the deadlines of earlier leaders.
/// `None` when this node stopped leading `term` meanwhile.
async fn take_office(node: &LeaderHandle, term: u64) -> Option<Office> {
    loop {
        if !still_leading(node, term) {
            return None;
        }
        match tokio::time::timeout(OFFICE_BARRIER_PATIENCE, node.leadership.linearizable_read())
            .await
        {
            Ok(Ok(())) => break,
            Ok(Err(error @ ReadBarrierError::NotLeader(_))) => {
                tracing::info!(term, %error, "not taking office");
                return None;
            }
            Ok(Err(error @ ReadBarrierError::RestartedLogNotApplied { .. })) => {
                tracing::warn!(term, %error, "taking office: waiting")
            }
            Err(_) => tracing::warn!(
                term,
                patience_ms = OFFICE_BARRIER_PATIENCE.as_millis() as u64,
                "taking office: earlier terms' entries not yet applied; waiting"
            ),
        }
    }
    let wall_ms = crate::handles::clock::wall_now_ms();
    let office = core::term::take_office(wall_ms, &node.state.current());
    let (took_office, raised_ms) = (office.took_office_ms, office.raised_ms);
    if !node.leadership.clock.begin_term(term, took_office) {
        tracing::warn!(
            term,
            anchored_term = node.leadership.clock.term(),
            "the clock is anchored for a newer term; not leading this one"
        );
        return None;
    }
    metrics::gauge!("leasehold_leader_clock_raised_ms").set(raised_ms as f64);
    if raised_ms > 0 {
        tracing::warn!(
            term,
            took_office_ms = took_office,
            wall_ms,
            raised_ms,
            "leading on a clock raised above this manager's wall clock: an earlier leader's wall \
             clock ran ahead of this one's, and the state holds its deadlines (P6.4)"
        );
    }
    tracing::info!(
        term,
        took_office_ms = took_office,
        "leading: reaping waits one lease (P6.1)"
    );
    Some(office)
}

/// How long one try of the read barrier before taking office may take before it is logged and
/// tried again (a leader whose followers are slow to acknowledge its first entry).
const OFFICE_BARRIER_PATIENCE: Duration = Duration::from_secs(5);

/// One step of [`TermSteps`]: its writes in its order (reap, complete expired handoffs, plan),
/// each its own committed write on the state the previous one left. The plan goes by the loads
/// reported up to now (P15.1).
async fn step(
    node: &LeaderHandle,
    term_steps: &mut TermSteps,
    reports_taken: &mut u64,
    prepared: &mut Prepared,
) {
    // Reads that scan the state take a clone, not the lock `apply` waits on. A clone is dropped
    // before anything is awaited: while one lives, every `apply` copies what it changes.
    let began = cpu_bound::run(|| {
        let state = node.state.current();
        // The clock is read with what renewals answered from memory told (P6.7).
        let reading = node.memory_renewals.reading(&node.leadership.clock, &state);
        let now_ms = reading.now_ms;
        let last_renewal_ms = node
            .signals
            .last_renewal_applied_ms()
            .max(reading.last_answered_ms);
        take_reports(node, term_steps.placement_mut(), &state, reports_taken);
        let began = term_steps
            .begin_step(now_ms, &state, last_renewal_ms, &reading.told_from_memory)
            .is_some();
        // What the step places by is what the views and `GET /v1/plan` show; a step already under
        // way began on older inputs, so they are made afresh for the views then.
        let inputs = match term_steps.step_placement_inputs().filter(|_| began) {
            Some(inputs) => inputs.clone(),
            None => term_steps.placement().inputs_by_namespace(&state, now_ms),
        };
        publish_loads(node, term_steps.placement(), &state, now_ms, inputs);
        began
    });
    if let Some(decision) = term_steps.decision().filter(|_| began) {
        log_decision(decision);
    }
    loop {
        let now_ms = node.leadership.clock.now_ms();
        let next = cpu_bound::run(|| term_steps.next_write(&node.state.current(), now_ms));
        let Some((write, command)) = next else {
            return;
        };
        let written = match write {
            StepWrite::Reap => reap(node, command).await,
            StepWrite::CompleteHandoffs => complete_handoffs(node, command).await,
            StepWrite::Rebalance => {
                prepare_receivers(node, prepared, &command).await;
                rebalance(node, command).await
            }
            StepWrite::PlaceSecondaries => place_secondaries(node, command).await,
            StepWrite::Reshard => reshard(node, command).await,
        };
        if let Some(plan) = term_steps.written(written, node.leadership.clock.now_ms()) {
            node.signals.metrics.count_plan(plan);
        }
    }
}

fn log_decision(decision: &StepDecision) {
    for event in &decision.events {
        match event {
            GuardEvent::EpisodeStarted { reason, overdue } => {
                metrics::counter!("leasehold_mass_expiry_episodes_total").increment(1);
                tracing::warn!(
                    ?reason,
                    overdue,
                    "mass-expiry guard: deferring reaping (P6.3)"
                );
            }
            GuardEvent::GraceExhausted { overdue, grace_ms } => {
                tracing::error!(
                    overdue,
                    grace_ms,
                    "mass-expiry guard: grace ran out, reaping (P6.3)"
                );
            }
            GuardEvent::RenewalsResumed {
                overdue,
                renewing_since_ms,
            } => {
                tracing::warn!(
                    overdue,
                    renewing_since_ms,
                    "mass-expiry guard: renewals are applied again and these stayed silent, \
                     reaping (P6.3)"
                );
            }
            GuardEvent::EpisodeEnded => {
                tracing::info!("mass-expiry guard: episode over, nobody reaped")
            }
        }
    }
    if let Some(Deferral::MassExpiryGuard { .. }) = &decision.deferral {
        metrics::counter!("leasehold_expiries_deferred_total").increment(1);
    }
}

/// Commits one of a step's writes, `what` naming it in the logs, and says what became of it;
/// `done` logs what an applied one did.
async fn commit_write<T>(
    node: &LeaderHandle,
    command: Command,
    what: &str,
    done: impl FnOnce(T),
) -> Written
where
    T: CommandAnswer<Answer = Answer<T>>,
{
    match node.leadership.proposer.propose_as::<T>(command).await {
        Ok((_, Answer::Done(answer))) => {
            done(answer);
            Written::Applied
        }
        Ok((_, Answer::Refused(reason @ RefusalReason::StalePlan { .. }))) => {
            // Another change to the assignment (a registration, a release completing a
            // handoff) was committed while this plan was in flight; [`TermSteps`] plans again
            // on the state it left, at once.
            tracing::debug!(?reason, "{what}: refused as stale; replanning at once");
            Written::Refused { stale_plan: true }
        }
        Ok((_, Answer::Refused(reason))) => {
            tracing::warn!(?reason, "{what}: refused");
            Written::Refused { stale_plan: false }
        }
        Err(error) => {
            tracing::info!(%error, "{what}: not committed");
            Written::NotCommitted
        }
    }
}

async fn reap(node: &LeaderHandle, command: Command) -> Written {
    commit_write(node, command, "reap", |reaped: Reaped| {
        tracing::info!(reaped = ?reaped.reaped, skipped = ?reaped.skipped, "reaped lapsed executors");
    })
    .await
}

async fn complete_handoffs(node: &LeaderHandle, command: Command) -> Written {
    commit_write(node, command, "handoff completion", |done: HandoffsCompleted| {
        tracing::info!(completed = ?done.completed, "handoffs completed on the old owner's expiry (P5.2)");
    })
    .await
}

/// P17.1: asks the receivers of `plan`'s handoffs from live holders to prepare, and waits for
/// them (at most `--prepare-timeout`) before the plan is committed.
async fn prepare_receivers(node: &LeaderHandle, prepared: &mut Prepared, plan: &Command) {
    if node.prepare_timeout.is_zero() {
        return;
    }
    let now_ms = node.leadership.clock.now_ms();
    let requests = cpu_bound::run(|| {
        prepared.needed(&node.state.current(), plan, now_ms, node.prepare_timeout)
    });
    if requests.is_empty() {
        return;
    }
    let started = tokio::time::Instant::now();
    let (asked, ready) = deliver::ask_to_prepare(&node.http, &requests, node.prepare_timeout).await;
    prepared.asked(&requests);
    tracing::info!(
        receivers = requests.len(),
        asked,
        prepared = ready,
        waited_ms = started.elapsed().as_millis() as u64,
        "receivers prepared before their handoffs (P17.1)"
    );
}

async fn rebalance(node: &LeaderHandle, plan: Command) -> Written {
    commit_write(node, plan, "plan", |done: Rebalanced| {
        tracing::info!(
            granted = done.granted.len(),
            releasing = done.releasing.len(),
            cancelled = done.cancelled.len(),
            "rebalanced"
        );
    })
    .await
}

async fn reshard(node: &LeaderHandle, command: Command) -> Written {
    commit_write(node, command, "reshard", |done: Resharded| {
        metrics::counter!("leasehold_reshards_total", "kind" => done.kind.as_str()).increment(1);
        tracing::info!(
            namespace = done.name,
            kind = done.kind.as_str(),
            shard_count = done.shard_count,
            generation = done.generation,
            "namespace resharded (P20.2)"
        );
    })
    .await
}

async fn place_secondaries(node: &LeaderHandle, plan: Command) -> Written {
    commit_write(node, plan, "secondaries plan", |done: SecondariesPlaced| {
        tracing::info!(shards = done.changed.len(), "secondaries placed (P19.2)");
    })
    .await
}

/// Takes in the loads reported since the last step (each report once, P15.1) and forgets
/// executors that left, in the tracker and in the reports.
fn take_reports(
    node: &LeaderHandle,
    placement: &mut TermPlacement,
    state: &LeaseState,
    reports_taken: &mut u64,
) {
    for (executor_id, report) in node.load_reports.since(*reports_taken) {
        *reports_taken = (*reports_taken).max(report.sequence);
        placement.take_report(state, &executor_id, &report.loads);
    }
    placement.retain(state);
    node.load_reports
        .retain(|executor_id| state.executor(executor_id).is_some());
}

/// Publishes what the trackers know of each namespace for the inspection views, and sets each
/// namespace's placement gauges (P18.1).
fn publish_loads(
    node: &LeaderHandle,
    placement: &TermPlacement,
    state: &LeaseState,
    now_ms: u64,
    mut inputs: BTreeMap<String, PlacementInputs>,
) {
    let empty = SpacePlacement::default();
    let mut picture = LoadPicture::default();
    for space in state.spaces() {
        let known = placement.space(space.name()).unwrap_or(&empty);
        let shard_loads = known.tracker.shard_loads(space);
        let summary = LoadSummary::of(space, now_ms, &shard_loads);
        let placement_inputs = inputs
            .remove(space.name())
            .unwrap_or_else(|| placement.inputs(space, now_ms));
        let shard_count = space.config().map_or(0, |config| config.shard_count);
        crate::handles::metrics::PlacementGauges {
            by_load: matches!(placement_inputs.loads, Loads::Reported(_)),
            imbalance: summary.imbalance.unwrap_or(0.0),
            hot_shards: summary.hot.len(),
            balance_moves_available: known.ledger.allowed(
                now_ms,
                placement
                    .settings_for(space)
                    .balance_moves_per_minute(shard_count),
            ),
        }
        .record(space.name());
        picture.spaces.insert(
            space.name().to_owned(),
            SpaceLoads {
                shard_loads,
                summary,
                placement_inputs: Arc::new(placement_inputs),
            },
        );
    }
    crate::handles::metrics::PlacementGauges::set_for(picture.spaces.keys().map(String::as_str));
    node.published_loads.publish(picture);
}
