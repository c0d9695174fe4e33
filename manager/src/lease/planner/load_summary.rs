//! What the reported loads amount to at one instant (PROTOCOL §15): utilisation per executor,
//! the imbalance and the hot shards, for `/v1/executors`, `/v1/shards` and the metrics. Pure:
//! one namespace of the state, the leader clock's `now_ms` and its smoothed loads come in.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::ShardLoad;

use crate::lease::{capacity_of, ExecutorId, ShardId, Space};

/// One executor's load as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExecutorLoad {
    /// Sum of the smoothed loads of its delivered shards.
    pub load: f64,
    /// Load ÷ capacity.
    pub utilisation: f64,
}

/// Loads, utilisation and hot shards at one instant, for inspection and metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadSummary {
    /// Every live executor that takes shards, by id.
    pub executors: BTreeMap<ExecutorId, ExecutorLoad>,
    /// Highest utilisation ÷ mean utilisation over those executors (1 when perfectly even);
    /// `None` when there is no load.
    pub imbalance: Option<f64>,
    /// Shards whose own load exceeds the fair share of the smallest live executor (P15.4).
    pub hot: BTreeSet<ShardId>,
}

impl LoadSummary {
    /// Summarises `loads` (index = shard) over the namespace `space` at `now_ms`: its
    /// executors and its shards (P18.1).
    pub fn of(space: Space<'_>, now_ms: u64, loads: &[f64]) -> Self {
        let executors = loads_by_executor(space, now_ms, loads);
        let total: f64 = loads.iter().take(space.shards().len()).sum();
        let total_capacity: f64 = executors.values().map(|(_, capacity)| capacity).sum();
        let smallest_capacity = executors
            .values()
            .map(|(_, capacity)| *capacity)
            .fold(f64::INFINITY, f64::min);
        let mean = if total_capacity > 0.0 {
            total / total_capacity
        } else {
            0.0
        };
        let executors: BTreeMap<ExecutorId, ExecutorLoad> = executors
            .into_iter()
            .map(|(id, (load, capacity))| {
                (
                    id,
                    ExecutorLoad {
                        load,
                        utilisation: load / capacity,
                    },
                )
            })
            .collect();
        let imbalance = (mean > 0.0).then(|| {
            executors
                .values()
                .map(|e| e.utilisation)
                .fold(0.0, f64::max)
                / mean
        });
        let fair_share_of_smallest = mean * smallest_capacity;
        let hot = if mean > 0.0 {
            loads
                .iter()
                .zip(0..)
                .filter(|(load, _)| **load > fair_share_of_smallest)
                .map(|(_, shard)| shard)
                .collect()
        } else {
            BTreeSet::new()
        };
        Self {
            executors,
            imbalance,
            hot,
        }
    }
}

/// Each live executor's load over its delivered set and its capacity: a releasing shard counts
/// for nobody, and each executor's sum comes from its own set rather than a lookup by owner for
/// every shard in the table. Only a shard with a load is looked up (whether it is releasing): a
/// fleet that reports none, or a table of mostly idle shards, costs no lookup per shard.
fn loads_by_executor(
    space: Space<'_>,
    now_ms: u64,
    loads: &[f64],
) -> BTreeMap<ExecutorId, (f64, f64)> {
    let load_of = |shard: ShardId| {
        usize::try_from(shard)
            .ok()
            .and_then(|index| loads.get(index))
            .copied()
            .unwrap_or(0.0)
    };
    space
        .executors()
        .filter(|executor| !executor.lease_lapsed(now_ms) && !executor.draining)
        .map(|executor| {
            let load = executor
                .owned_shards
                .iter()
                .map(|&shard| (shard, load_of(shard)))
                .filter(|&(shard, load)| {
                    load != 0.0
                        && space
                            .shard(shard)
                            .is_some_and(|entry| entry.handoff.is_none())
                })
                .map(|(_, load)| load)
                // From +0: the empty sum of `f64`s is -0.0, which the views would print.
                .fold(0.0, |total, load| total + load);
            (executor.id.clone(), (load, capacity_of(executor) as f64))
        })
        .collect()
}

/// What an executor's latest renewal said about its load.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportedLoads {
    /// Its renewal carried no `loads`: it does not report (an executor of an earlier release,
    /// or one whose embedder does not measure). Not the same as reporting zeros.
    NotReporting,
    /// Its renewal carried `loads`, checked by `leasehold_api::wire::check_shard_loads`.
    PerShard {
        /// The shards the report speaks for: those the executor claimed when it sent the
        /// renewal and still holds after it. A shard it did not claim was not measured by it (it
        /// was given the shard since), so the report says nothing of it.
        measured: Vec<ShardId>,
        /// Each listed shard's load; a measured shard not listed has load 0.
        loads: Vec<ShardLoad>,
    },
}
