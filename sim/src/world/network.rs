//! The simulated network: transit times, duplicated copies, partitions, and letters a script holds.

use super::*;

impl World {
    pub(super) fn transit_us(&mut self) -> u64 {
        let typical = self.scenario.typical_delay_us;
        // The heavy tail (up to 30× typical, as long as a short lease) is a fault: a healed
        // network's transit stays within the typical delay.
        let extra = if typical == 0 {
            0
        } else if self.chaos && self.rng.random_ratio(1, 20) {
            self.rng.random_range(0..=typical * 30)
        } else {
            self.rng.random_range(0..=typical)
        };
        MIN_TRANSIT_US + extra
    }

    /// How many copies of a message the network delivers (0: lost).
    pub(super) fn copies(&mut self) -> usize {
        if !self.chaos {
            return 1;
        }
        if self.rng.random_ratio(self.scenario.drop_per_mille, 1_000) {
            return 0;
        }
        if self
            .rng
            .random_ratio(self.scenario.duplicate_per_mille, 1_000)
        {
            return 2;
        }
        1
    }

    /// The deposed leader `slot` is stranded with, if any: it reaches that one and no other
    /// manager.
    fn stranded_with(&self, slot: Slot) -> Option<u64> {
        self.deposed
            .iter()
            .find(|d| d.until_us > self.now_us && d.stranded.contains(&slot))
            .map(|d| d.term)
    }

    pub(super) fn send_to_managers(&mut self, slot: Slot, process: u64, request: Request) {
        let cut = self.cut_to_managers[slot] > 0;
        let kind = request.kind();
        if let Some(term) = self.stranded_with(slot) {
            self.send(cut, slot, kind, || Event::ToDeposed {
                term,
                slot,
                request: request.clone(),
            });
            return;
        }
        self.send(cut, slot, kind, || Event::ToManagers {
            slot,
            process,
            request: request.clone(),
        });
    }

    /// From the managers that still follow the newest term (or from a leader that does).
    pub(super) fn send_to_executor(&mut self, slot: Slot, message: Message) {
        let cut = self.cut_from_managers[slot] > 0 || self.stranded_with(slot).is_some();
        let kind = message.kind();
        self.send(cut, slot, kind, || Event::ToExecutor {
            slot,
            message: message.clone(),
        });
    }

    /// From a deposed leader, which reaches every executor not cut off from the managers.
    pub(super) fn send_from_deposed(&mut self, slot: Slot, message: Message) {
        let cut = self.cut_from_managers[slot] > 0;
        let kind = message.kind();
        self.send(cut, slot, kind, || Event::ToExecutor {
            slot,
            message: message.clone(),
        });
    }

    /// One message over a link that is `cut` or not: lost, delivered once or twice, each copy
    /// after its own transit; under a script, held in its mailbox.
    pub(super) fn send(
        &mut self,
        cut: bool,
        slot: Slot,
        kind: LetterKind,
        arrival: impl Fn() -> Event,
    ) {
        if cut {
            return;
        }
        if let Driver::Script {
            mailbox,
            next_letter,
            ..
        } = &mut self.driver
        {
            mailbox.push(Letter {
                id: *next_letter,
                slot,
                kind,
                arrival: arrival(),
            });
            *next_letter += 1;
            return;
        }
        for _ in 0..self.copies() {
            let at = self.now_us + self.transit_us();
            self.schedule(at, arrival());
        }
    }

    /// The slot an executor address names (`http://sN:1`, the same across restarts).
    pub(super) fn slot_of(address: &str) -> Option<Slot> {
        address
            .strip_prefix("http://s")?
            .split(':')
            .next()?
            .parse()
            .ok()
    }

    // ---- Raft ------------------------------------------------------------------------------
}
