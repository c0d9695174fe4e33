//! The faults a seed injects (kills, pauses, partitions, clock steps, restarts) and the end of chaos.

use super::*;

impl World {
    pub(super) fn fault(&mut self, fault: Fault) {
        if !self.chaos {
            return;
        }
        self.note(|| format!("fault: {fault:?}"));
        match fault {
            Fault::Kill { slot } => {
                if let Some(p) = self.processes[slot].as_mut() {
                    p.life = Life::Dead;
                }
            }
            Fault::Restart { slot } => self.restart(slot),
            Fault::Pause { slot, for_ms } => self.pause(slot, for_ms),
            Fault::GracefulStop { slot } => self.stop_gracefully(slot),
            Fault::Partition {
                slot,
                to_managers,
                from_managers,
                for_ms,
            } => {
                if to_managers {
                    self.cut_to_managers[slot] += 1;
                }
                if from_managers {
                    self.cut_from_managers[slot] += 1;
                }
                self.schedule(
                    self.now_us + for_ms * 1_000,
                    Event::PartitionHealed {
                        slot,
                        to_managers,
                        from_managers,
                    },
                );
            }
            Fault::LeaderChange {
                keep_tail,
                deposed_pushes_ms,
                election_ms,
            } => self.change_leader(keep_tail, deposed_pushes_ms, election_ms, None),
            Fault::LeaderStall { for_ms } => self.stall_leader(for_ms),
            Fault::ManagerRestart => {
                let leader = self.leader.as_ref().map(|l| l.manager);
                let Some(manager) = (0..MANAGERS).find(|m| Some(*m) != leader) else {
                    return;
                };
                self.restart_from_snapshot(manager);
            }
            Fault::SetLease { lease_ms } => self.set_lease(lease_ms),
            Fault::NamespaceLease { space, lease_ms } => {
                let namespace = self.scenario.space_name(space).to_owned();
                self.set_lease_in(&namespace, lease_ms);
            }
            Fault::Drain { slot, draining } => self.set_draining(slot, draining),
            Fault::Lie { slot, lie } => self.load.start_lying(slot, lie),
            Fault::Operator {
                slot,
                shard,
                control,
            } => self.operator_control(slot, shard, control),
            Fault::Reshard { space, split } => self.request_reshard(space, split),
            Fault::RestartWithCapacity { slot, capacity } => {
                self.coverage.capacity_restarts += 1;
                self.load.set_capacity(slot, capacity);
                self.restart(slot);
            }
        }
    }

    /// The network heals, every slot gets a running process, and a leader is in office.
    pub(super) fn end_chaos(&mut self) {
        self.chaos = false;
        self.note(|| "chaos ends: the network heals".to_owned());
        self.cut_to_managers.iter_mut().for_each(|c| *c = 0);
        self.cut_from_managers.iter_mut().for_each(|c| *c = 0);
        while !self.deposed.is_empty() {
            self.deposed_learns(0);
        }
        for slot in 0..self.scenario.slots {
            let alive = self.processes[slot]
                .as_ref()
                .is_some_and(|p| p.life != Life::Dead && p.life != Life::Stopping);
            if !alive {
                self.start_process(slot);
            }
        }
        if self.leader.is_none()
            && !self
                .queue
                .iter()
                .any(|s| matches!(s.0.event, Event::Elected { .. }))
        {
            self.take_office(0, 0);
        }
        self.undrain_all();
    }
}
