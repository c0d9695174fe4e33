//! What scenarios and scripts ask of the world: inspection, and the controls a script drives it by.

use super::*;
use crate::scenario::Control;
use leasehold_manager::lease::OperatorAction;

/// Who the audit log says did what the simulated operator does.
const OPERATOR: &str = "admin CN=simulated operator";

impl World {
    /// The operator undoes every drain, maintenance mode and every pin (after the chaos, so the
    /// end state is comparable); repeated until it sticks, as an operator would.
    pub fn undrain_all(&mut self) {
        let Some(now_ms) = self.leader_now_ms() else {
            return;
        };
        let (maintenance, pinned): (bool, Vec<(String, u32)>) = self.leader_state().map_or_else(
            || (false, Vec::new()),
            |s| {
                let pinned = s
                    .spaces()
                    .flat_map(|space| {
                        space
                            .pins()
                            .map(move |(shard, _)| (space.name().to_owned(), shard))
                    })
                    .collect();
                (s.maintenance(), pinned)
            },
        );
        let mut undo: Vec<OperatorAction> = pinned
            .into_iter()
            .map(|(namespace, shard)| OperatorAction::Pin {
                namespace,
                shard,
                executor_id: None,
            })
            .collect();
        if maintenance {
            undo.push(OperatorAction::SetMaintenance { on: false });
        }
        for action in undo {
            self.propose(
                Command::Operator {
                    now_ms,
                    actor: OPERATOR.to_owned(),
                    action,
                },
                ReplyTo::Nobody,
            );
        }
        let drained: Vec<String> = self.leader_state().map_or_else(Vec::new, |s| {
            s.executors()
                .filter(|e| e.draining)
                .map(|e| e.id.clone())
                .collect()
        });
        for executor_id in drained {
            self.propose(
                Command::SetDraining {
                    now_ms,
                    executor_id,
                    draining: false,
                },
                ReplyTo::Nobody,
            );
        }
    }

    pub fn leader_state(&self) -> Option<&LeaseState> {
        self.leader.as_ref().map(|l| &self.replicas[l.manager])
    }

    /// The term of the leader in office.
    pub fn leader_term(&self) -> Option<u64> {
        self.leader.as_ref().map(|l| l.term)
    }

    /// What the leader would place `default` by if it stepped now (its term's loads, budget
    /// and cooling).
    pub fn leader_inputs(&self) -> Option<PlacementInputs> {
        self.leader_inputs_in(leasehold_api::wire::DEFAULT_NAMESPACE)
    }

    /// What the leader would place `namespace` by if it stepped now: that namespace's loads,
    /// budget and cooling shards (P18.1).
    pub fn leader_inputs_in(&self, namespace: &str) -> Option<PlacementInputs> {
        let leader = self.leader.as_ref()?;
        let now_ms = self.leader_now_ms()?;
        let space = self.replicas[leader.manager].space(namespace)?;
        Some(leader.steps.placement().inputs(space, now_ms))
    }

    /// The whole plan the leader would make of `default` if it stepped now, uncapped, if
    /// anything is to move.
    pub fn leader_plan(&self) -> Option<Plan> {
        self.leader_plan_in(leasehold_api::wire::DEFAULT_NAMESPACE)
    }

    /// The whole plan the leader would make of `namespace` if it stepped now, uncapped, if
    /// anything is to move in it.
    pub fn leader_plan_in(&self, namespace: &str) -> Option<Plan> {
        let inputs = self.leader_inputs_in(namespace)?;
        let now_ms = self.leader_now_ms()?;
        let space = self.leader_state()?.space(namespace)?;
        plan_placement(space, now_ms, &inputs, usize::MAX)
    }

    /// The namespaces the leader's state holds, ascending by name.
    pub fn leader_namespaces(&self) -> Vec<String> {
        self.leader_state().map_or_else(Vec::new, |state| {
            state
                .namespaces()
                .map(|(name, _)| name.to_owned())
                .collect()
        })
    }

    /// The liar's slot and the executor its process registered as, once the lie started.
    pub fn liar(&self) -> Option<(Slot, String, Lie)> {
        let (slot, lie) = self.load.liar()?;
        Some((slot, self.executor_id_of(slot)?, lie))
    }

    /// Executors stop reporting loads, so the leader places by count (P15.2): the probes that
    /// count moves against P5.4 run so. With `off` false, they report again.
    pub fn turn_loads_off(&mut self, off: bool) {
        self.note(|| format!("loads {}", if off { "off" } else { "on again" }));
        self.load.set_off(off);
    }

    /// The current leader's clock offset (P2.3), if a leader is in office.
    pub fn leader_offset_ms(&self) -> Option<i64> {
        self.leader.as_ref().map(|l| l.offset_ms)
    }

    /// Whether the leader has proposals not yet committed or a step under way.
    pub fn leader_is_busy(&self) -> bool {
        self.leader
            .as_ref()
            .is_some_and(|l| !l.tail.is_empty() || l.steps.stepping())
    }

    pub fn leader_is_stalled(&self) -> bool {
        self.leader
            .as_ref()
            .is_some_and(|l| l.stalled_until_us.is_some())
    }

    /// When the next queued event is due, if any is.
    pub fn next_event_at(&self) -> Option<u64> {
        self.queue.peek().map(|next| next.0.at_us)
    }

    /// The messages a script's network holds, oldest first (none under a seed).
    pub fn letters(&self) -> &[Letter] {
        match &self.driver {
            Driver::Script { mailbox, .. } => mailbox,
            Driver::Seed => &[],
        }
    }

    /// Takes a held message out of the network: to deliver it, or to lose it.
    pub(super) fn take_letter(&mut self, id: u64) -> Option<Letter> {
        let Driver::Script { mailbox, .. } = &mut self.driver else {
            return None;
        };
        let position = mailbox.iter().position(|letter| letter.id == id)?;
        Some(mailbox.remove(position))
    }

    /// The held message arrives now (handled by the next [`World::run_until`]).
    pub fn deliver_letter(&mut self, id: u64) {
        if let Some(letter) = self.take_letter(id) {
            self.note(|| format!("{letter} arrives"));
            self.schedule(self.now_us, letter.arrival);
        }
    }

    /// The held message is lost; its sender finds out by its own timeout.
    pub fn drop_letter(&mut self, id: u64) {
        if let Some(letter) = self.take_letter(id) {
            self.note(|| format!("{letter} is lost"));
        }
    }

    /// Whether a script holds the leader's proposals uncommitted.
    pub fn commits_held(&self) -> bool {
        matches!(
            self.driver,
            Driver::Script {
                commits_held: true,
                ..
            }
        )
    }

    /// Holds the leader's proposals uncommitted in its tail (Raft replication stalls; reads
    /// still see the applied state), or commits the tail now and every proposal at once again.
    pub fn hold_commits(&mut self, held: bool) {
        if let Driver::Script { commits_held, .. } = &mut self.driver {
            *commits_held = held;
        }
        if held {
            return;
        }
        let now_us = self.now_us;
        if let Some(leader) = self
            .leader
            .as_mut()
            .filter(|l| !l.tail.is_empty() && !l.commit_scheduled)
        {
            leader.commit_scheduled = true;
            let term = leader.term;
            self.schedule(now_us, Event::Commit { term });
        }
    }

    /// Fires one of the loops' timers now.
    pub fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::LeaderStep => {
                if let Some(term) = self.leader.as_ref().map(|l| l.term) {
                    self.schedule(self.now_us, Event::LeaderStep { term });
                }
            }
            Timer::ExecutorCall(slot) => {
                if let Some(process) = self.processes[slot].as_ref().map(|p| p.id) {
                    self.schedule(self.now_us, Event::Call { slot, process });
                }
            }
        }
    }

    /// The script is over and the seed's rules take over: the network delivers what it held,
    /// every loop runs on its own timers again, and nothing is lost or delayed past the typical
    /// transit (no chaos).
    pub fn go_live(&mut self) {
        let Driver::Script { mailbox, .. } = std::mem::replace(&mut self.driver, Driver::Seed)
        else {
            return;
        };
        self.note(|| format!("the script ends: {} held messages arrive", mailbox.len()));
        for letter in mailbox {
            self.schedule(self.now_us, letter.arrival);
        }
        self.schedule(self.now_us, Event::FollowerApply);
        self.hold_commits(false);
        if let Some(term) = self.leader.as_ref().map(|l| l.term) {
            self.schedule(self.now_us, Event::LeaderStep { term });
            self.schedule(self.now_us, Event::DeliveryRound { term });
        }
        for slot in 0..self.processes.len() {
            if let Some(process) = self.processes[slot].as_ref().filter(|p| p.admits()) {
                let process = process.id;
                self.schedule(self.now_us, Event::Call { slot, process });
            }
        }
    }

    /// SIGSTOP for `for_ms`, then it carries on; only a running process pauses.
    pub fn pause(&mut self, slot: Slot, for_ms: u64) {
        let until_us = self.now_us + for_ms * 1_000;
        if let Some(p) = self.processes[slot]
            .as_mut()
            .filter(|p| p.life == Life::Running)
        {
            p.life = Life::Paused { until_us };
            let process = p.id;
            self.note(|| format!("slot {slot}: paused for {for_ms} ms"));
            self.schedule(until_us, Event::Resume { slot, process });
        }
    }

    /// SIGTERM: stop admitting, deregister within the grace, exit (P3.7).
    pub fn stop_gracefully(&mut self, slot: Slot) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        if let Some(p) = self.processes[slot]
            .as_mut()
            .filter(|p| p.life == Life::Running)
        {
            p.core.stop_admission(now);
            p.life = Life::Stopping;
            let process = p.id;
            // As production's shell: the lease loop is dropped with its call in flight (an
            // answer to it is read by nobody), and the deregistration starts at once.
            p.call = None;
            p.lease_call = None;
            self.schedule(
                self.now_us + STOP_GRACE_US,
                Event::StopDeadline { slot, process },
            );
            self.deregister(slot, process);
        }
    }

    /// The leader loses office and another replica takes it after `election_ms`, its wall clock
    /// `offset_ms` from the true one (its own offset and a step when `None`).
    pub fn change_leader(
        &mut self,
        keep_tail: bool,
        deposed_pushes_ms: u64,
        election_ms: u64,
        offset_ms: Option<i64>,
    ) {
        let Some(old) = self.leader.as_ref().map(|l| l.manager) else {
            return;
        };
        self.lose_office(keep_tail, deposed_pushes_ms);
        let next = (old + 1 + self.rng.random_range(0..MANAGERS - 1)) % MANAGERS;
        self.elect_after(next, election_ms, offset_ms);
    }

    /// Replica `next` takes office after `election_ms`, its wall clock `offset_ms` from the true
    /// one (its own offset and a step when `None`).
    fn elect_after(&mut self, next: usize, election_ms: u64, offset_ms: Option<i64>) {
        self.schedule(
            self.now_us + election_ms * 1_000,
            Event::Elected {
                manager: next,
                offset_ms,
            },
        );
    }

    /// The leader and the executors in `stranded` are cut off from the other managers and
    /// executors for `for_ms`; the others elect a leader after `election_ms` (issue 56's
    /// partition: the deposed leader pushes from its stale state and fails what it holds once it
    /// has heard no quorum for a Raft lease, P8.4).
    pub fn cut_off_leader_with(&mut self, stranded: BTreeSet<Slot>, for_ms: u64, election_ms: u64) {
        let Some(old) = self.leader.as_ref().map(|l| l.manager) else {
            return;
        };
        self.lose_office_stranding(false, for_ms, Some(stranded));
        self.elect_after((old + 1) % MANAGERS, election_ms, None);
    }

    /// An operator sets the lease duration (P3.4).
    pub fn set_lease(&mut self, lease_ms: u64) {
        if let Some(now_ms) = self.leader_now_ms() {
            self.propose(
                Command::SetLeaseDuration {
                    now_ms,
                    lease_duration_ms: lease_ms,
                },
                ReplyTo::Nobody,
            );
        }
    }

    /// An operator sets `namespace`'s lease duration (P3.4, P18.1): `default`'s as
    /// [`World::set_lease`], another's as `leaseholdctl namespace set` does, its executor
    /// bound kept.
    pub fn set_lease_in(&mut self, namespace: &str, lease_ms: u64) {
        if leasehold_api::wire::is_default_namespace(namespace) {
            self.set_lease(lease_ms);
            return;
        }
        self.set_namespace(namespace, |settings| settings.lease_duration_ms = lease_ms);
    }

    /// An operator sets `namespace`'s placement preference (P18.4), or removes it (`None`), as
    /// `leaseholdctl namespace set NAME --prefer key=value|default` does: its lease, bound and
    /// other placement settings kept.
    pub fn set_preference(&mut self, namespace: &str, prefer: Option<(String, String)>) {
        self.note(|| format!("namespace {namespace} prefers {prefer:?}"));
        self.set_namespace(namespace, |settings| settings.placement.prefer = prefer);
    }

    /// An operator's `leaseholdctl namespace set` of `namespace`: its settings as the leader
    /// holds them, changed by `change`, the rest kept. Nothing without a leader or the namespace.
    fn set_namespace(&mut self, namespace: &str, change: impl FnOnce(&mut NamespaceSettings)) {
        let Some(now_ms) = self.leader_now_ms() else {
            return;
        };
        let Some(mut settings) = self
            .leader_state()
            .and_then(|state| state.namespace(namespace))
            .map(|ns| NamespaceSettings {
                lease_duration_ms: ns.config.lease_duration_ms,
                max_executors: ns.max_executors,
                placement: ns.placement.clone(),
                replication: ns.replication,
            })
        else {
            return;
        };
        change(&mut settings);
        self.propose(
            Command::Operator {
                now_ms,
                actor: OPERATOR.to_owned(),
                action: OperatorAction::SetNamespace {
                    name: namespace.to_owned(),
                    lease_duration_ms: settings.lease_duration_ms,
                    max_executors: settings.max_executors,
                    placement: settings.placement,
                    replication: settings.replication,
                },
            },
            ReplyTo::Nobody,
        );
    }

    /// An operator creates a namespace (P18.1) of `replicas` per shard (P19.1), as
    /// `leaseholdctl namespace create` does.
    pub fn create_namespace(&mut self, name: &str, shard_count: u32, lease_ms: u64, replicas: u32) {
        let Some(now_ms) = self.leader_now_ms() else {
            return;
        };
        self.note(|| {
            format!(
                "namespace {name} created: {shard_count} shards, lease {lease_ms} ms, {replicas} \
                 replicas"
            )
        });
        self.propose(
            Command::Operator {
                now_ms,
                actor: OPERATOR.to_owned(),
                action: OperatorAction::CreateNamespace {
                    name: name.to_owned(),
                    shard_count,
                    lease_duration_ms: lease_ms,
                    max_executors: None,
                    placement: Default::default(),
                    replication: leasehold_api::wire::ReplicaSettings {
                        replicas,
                        ..Default::default()
                    },
                },
            },
            ReplyTo::Nobody,
        );
    }

    /// An operator drains (or undrains) the executor in `slot`.
    pub fn set_draining(&mut self, slot: Slot, draining: bool) {
        let executor_id = self.executor_id_of(slot);
        if let (Some(now_ms), Some(executor_id)) = (self.leader_now_ms(), executor_id) {
            self.propose(
                Command::SetDraining {
                    now_ms,
                    executor_id,
                    draining,
                },
                ReplyTo::Nobody,
            );
        }
    }

    /// An operator's control (P17.4), as the leader's HTTP handler proposes it; a pin or a move
    /// names the executor in `slot` (none running: nothing happens) and a shard of its
    /// namespace (P18.1).
    pub fn operator_control(&mut self, slot: Slot, shard: u32, control: Control) {
        let Some(now_ms) = self.leader_now_ms() else {
            return;
        };
        let executor_id = self.executor_id_of(slot);
        let namespace = self.scenario.namespace_of_slot(slot).to_owned();
        let action = match (control, executor_id) {
            (Control::MaintenanceOn, _) => OperatorAction::SetMaintenance { on: true },
            (Control::MaintenanceOff, _) => OperatorAction::SetMaintenance { on: false },
            (Control::Unpin, _) => OperatorAction::Pin {
                namespace,
                shard,
                executor_id: None,
            },
            (Control::Pin, Some(executor_id)) => OperatorAction::Pin {
                namespace,
                shard,
                executor_id: Some(executor_id),
            },
            (Control::Move, Some(to)) => OperatorAction::MoveShard {
                namespace,
                shard,
                to,
            },
            (Control::Pin | Control::Move, None) => return,
        };
        self.propose(
            Command::Operator {
                now_ms,
                actor: OPERATOR.to_owned(),
                action,
            },
            ReplyTo::Nobody,
        );
    }

    /// An operator asks for a reshard of space `space` (P20.1) to twice its shard count as the
    /// leader holds it (`split`) or half of it; a merge of an odd count is refused at the edge
    /// (`400`), and counted with the refusals.
    pub fn request_reshard(&mut self, space: usize, split: bool) {
        let namespace = self.scenario.space_name(space).to_owned();
        let Some(shard_count) = self
            .leader_state()
            .and_then(|state| state.namespace(&namespace))
            .map(|ns| ns.config.shard_count)
        else {
            return;
        };
        match reshard_target(shard_count, split) {
            Some(target) => self.reshard_to(&namespace, target),
            None => self.coverage.reshards_refused += 1,
        }
    }

    /// An operator asks for `namespace` to be resharded to `shard_count` (P20.1), as the HTTP
    /// edge proposes `POST /v1/namespaces/{name}/reshard`.
    pub fn reshard_to(&mut self, namespace: &str, shard_count: u32) {
        let Some(now_ms) = self.leader_now_ms() else {
            return;
        };
        self.note(|| format!("reshard of {namespace} to {shard_count} shards asked for"));
        self.propose(
            Command::Operator {
                now_ms,
                actor: OPERATOR.to_owned(),
                action: OperatorAction::Reshard {
                    name: namespace.to_owned(),
                    shard_count,
                },
            },
            ReplyTo::Nobody,
        );
    }

    pub fn executor_id_of(&self, slot: Slot) -> Option<String> {
        self.processes[slot]
            .as_ref()
            .and_then(|p| p.core.executor_id().map(str::to_owned))
    }

    /// A new process with a new incarnation at the slot's address; the old one is killed.
    pub fn restart(&mut self, slot: Slot) {
        if let Some(p) = self.processes[slot].as_mut() {
            p.life = Life::Dead;
        }
        self.start_process(slot);
    }

    /// The leader process stalls for `for_ms` while the followers still hear from it: nothing
    /// it would do happens until then (P6.3).
    pub fn stall_leader(&mut self, for_ms: u64) {
        let until = self.now_us + for_ms * 1_000;
        if let Some(leader) = self
            .leader
            .as_mut()
            .filter(|l| l.stalled_until_us.is_none())
        {
            leader.stalled_until_us = Some(until);
            let term = leader.term;
            self.note(|| format!("term {term}: the leader stalls for {for_ms} ms"));
            self.schedule(until, Event::StallOver { term });
        }
    }

    /// Kills the process in `slot` at once (the I4 probe).
    pub fn kill(&mut self, slot: Slot) {
        self.note(|| format!("probe: kill slot {slot}"));
        if let Some(p) = self.processes[slot].as_mut() {
            p.life = Life::Dead;
        }
    }

    /// Adds a slot with a fresh process: a new executor joins `default` (the join probes, a
    /// script's spawn).
    pub fn add_slot(&mut self) -> Slot {
        self.add_slot_in(0)
    }

    /// Adds a slot with a fresh process whose executor joins space `space` (0: `default`, `i +
    /// 1`: the scenario's `namespaces[i]`).
    pub fn add_slot_in(&mut self, space: usize) -> Slot {
        let slot = self.processes.len();
        self.processes.push(None);
        self.cut_to_managers.push(0);
        self.cut_from_managers.push(0);
        self.scenario.executor_rate_ppm.push(0);
        while self.scenario.slot_spaces.len() < slot {
            self.scenario.slot_spaces.push(0);
        }
        self.scenario.slot_spaces.push(space);
        self.load.add_slot(space);
        self.start_process(slot);
        slot
    }

    /// The slots whose processes are of `namespace` (P18.1), live or not.
    pub fn slots_in(&self, namespace: &str) -> Vec<Slot> {
        (0..self.processes.len())
            .filter(|&slot| self.scenario.namespace_of_slot(slot) == namespace)
            .collect()
    }

    pub fn dump(&self) -> String {
        let mut out = String::new();
        if let Some(state) = self.leader_state() {
            for e in state.executors() {
                let _ = writeln!(
                    out,
                    "  {} {} {} expiry {} owns {:?}{}",
                    e.id,
                    e.namespace,
                    e.incarnation,
                    e.lease_expiry_ms,
                    e.owned_shards,
                    if e.draining { " draining" } else { "" }
                );
            }
            for space in state.spaces() {
                for s in space.shards() {
                    if s.handoff.is_some() || s.owner.is_none() {
                        let _ = writeln!(
                            out,
                            "  {} owner {:?} epoch {} handoff {:?}",
                            crate::checks::shard_name(space.name(), s.id),
                            s.owner,
                            s.epoch,
                            s.handoff
                        );
                    }
                }
            }
        }
        for (slot, p) in self.processes.iter().enumerate() {
            if let Some(p) = p {
                let now = self.local_instant(p.rate_ppm);
                let _ = writeln!(
                    out,
                    "  slot {slot}: process {} {:?} {:?} held {:?}",
                    p.id,
                    p.life,
                    p.core.executor_id(),
                    p.core
                        .view(now)
                        .shards
                        .iter()
                        .map(|s| s.shard)
                        .collect::<Vec<_>>()
                );
            }
        }
        out
    }
}

/// What `leaseholdctl namespace set` changes of a namespace.
struct NamespaceSettings {
    lease_duration_ms: u64,
    max_executors: Option<u32>,
    placement: leasehold_manager::lease::PlacementOverrides,
    replication: leasehold_api::wire::ReplicaSettings,
}

/// The count a split (`split`) or a merge of `shard_count` shards asks for; none for a merge of
/// an odd count, which the HTTP edge refuses (P20.1).
fn reshard_target(shard_count: u32, split: bool) -> Option<u32> {
    if split {
        shard_count.checked_mul(2)
    } else {
        shard_count.is_multiple_of(2).then_some(shard_count / 2)
    }
}
