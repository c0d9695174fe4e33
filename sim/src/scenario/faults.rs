//! The faults a seed draws: crashes, pauses, partitions, clock steps and the rest.

use super::*;

/// Most zones a fleet is spread over.
pub const MAX_ZONES: usize = 3;

/// How many kinds [`draw_fault`] chooses from.
pub(super) const FAULT_KINDS: usize = 13;

pub(super) fn draw_fault(
    rng: &mut ChaCha8Rng,
    weights: &[u32; FAULT_KINDS],
    slots: usize,
    shards: u32,
    lease_ms: u64,
    load: &LoadScenario,
) -> Fault {
    let total: u32 = weights.iter().sum();
    let mut pick = rng.random_range(0..total);
    let kind = weights
        .iter()
        .position(|&weight| {
            if pick < weight {
                true
            } else {
                pick -= weight;
                false
            }
        })
        .unwrap_or(0);
    let slot = rng.random_range(0..slots);
    draw_fault_of_kind(rng, kind, slot, shards, lease_ms, load)
}

/// A fault of `kind` on `slot` (one of `shards` shards in its namespace, whose lease is
/// `lease_ms`), its parameters drawn from `rng`.
pub(super) fn draw_fault_of_kind(
    rng: &mut ChaCha8Rng,
    kind: usize,
    slot: usize,
    shards: u32,
    lease_ms: u64,
    load: &LoadScenario,
) -> Fault {
    match kind {
        0 => Fault::Kill { slot },
        1 => Fault::Restart { slot },
        2 => Fault::Pause {
            slot,
            for_ms: rng.random_range(lease_ms / 4..=lease_ms * 3),
        },
        3 => Fault::GracefulStop { slot },
        4 => draw_partition(rng, slot, lease_ms),
        5 => draw_leader_change(rng, lease_ms),
        6 => Fault::LeaderStall {
            for_ms: rng.random_range(lease_ms / 2..=lease_ms * 3),
        },
        7 => Fault::ManagerRestart,
        8 => Fault::SetLease {
            lease_ms: LEASE_CHOICES_MS[rng.random_range(0..LEASE_CHOICES_MS.len())],
        },
        9 => Fault::Drain {
            slot,
            draining: rng.random_bool(0.7),
        },
        10 => Fault::Lie {
            slot: load.liar.0,
            lie: load.liar.1,
        },
        12 => draw_operator_control(rng, slot, shards),
        _ => draw_capacity_restart(rng, slot, load),
    }
}

/// A partition of `slot` from the managers one way or both, for a quarter lease to three leases.
fn draw_partition(rng: &mut ChaCha8Rng, slot: usize, lease_ms: u64) -> Fault {
    let direction = rng.random_range(0..3);
    Fault::Partition {
        slot,
        to_managers: direction != 1,
        from_managers: direction != 0,
        for_ms: rng.random_range(lease_ms / 4..=lease_ms * 3),
    }
}

/// An election, the deposed leader pushing for a while in half of them.
fn draw_leader_change(rng: &mut ChaCha8Rng, lease_ms: u64) -> Fault {
    Fault::LeaderChange {
        keep_tail: rng.random_bool(0.5),
        deposed_pushes_ms: if rng.random_bool(0.5) {
            rng.random_range(0..=lease_ms * 2)
        } else {
            0
        },
        election_ms: rng.random_range(50..=1_500),
    }
}

/// An operator's control (P17.4) of the executor in `slot` and one of `shards` shards.
fn draw_operator_control(rng: &mut ChaCha8Rng, slot: usize, shards: u32) -> Fault {
    Fault::Operator {
        slot,
        shard: rng.random_range(0..shards),
        control: [
            Control::MaintenanceOn,
            Control::MaintenanceOff,
            Control::Pin,
            Control::Unpin,
            Control::Move,
        ][rng.random_range(0..5)],
    }
}

/// A restart of `slot` with another capacity than the one it started with.
fn draw_capacity_restart(rng: &mut ChaCha8Rng, slot: usize, load: &LoadScenario) -> Fault {
    let other = rng.random_range(1..MAX_SIM_CAPACITY);
    let first = load.capacities[slot];
    Fault::RestartWithCapacity {
        slot,
        capacity: if other >= first { other + 1 } else { other },
    }
}
