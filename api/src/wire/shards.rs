//! Shards with their epochs, and the compact form of a shard list as runs.

use serde::{Deserialize, Serialize};

use super::limits::{ShardListError, ShardRunError};

/// One shard together with its ownership generation (P2.1), the fencing token downstream storage
/// can compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
// Part of request bodies (renew claims, assignment pushes), so it is as strict as they are.
#[serde(deny_unknown_fields)]
pub struct ShardEpoch {
    /// Shard number, `0..shard_count`.
    pub shard: u32,
    /// Advanced when and only when the shard gets a new owner.
    pub epoch: u64,
}

/// Consecutive shards sharing one epoch: shards `first..first + count`, each at `epoch`. The
/// compact form of a shard list on the wire (`RenewRequest::claim_runs`, `Grant::shard_runs`):
/// an executor's set is a few blocks of shards, mostly minted in the same rebalance, so its runs
/// are far fewer than its shards. Encoded as a JSON array `[first, count, epoch]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u32, u32, u64)", into = "(u32, u32, u64)")]
pub struct ShardRun {
    /// The run's lowest shard.
    pub first: u32,
    /// How many consecutive shards it spans; at least 1.
    pub count: u32,
    /// The epoch of every shard in it.
    pub epoch: u64,
}

impl From<(u32, u32, u64)> for ShardRun {
    fn from((first, count, epoch): (u32, u32, u64)) -> Self {
        Self {
            first,
            count,
            epoch,
        }
    }
}

impl From<ShardRun> for (u32, u32, u64) {
    fn from(run: ShardRun) -> Self {
        (run.first, run.count, run.epoch)
    }
}

/// `shards` as runs ([`ShardRun`]): each maximal stretch of consecutive shards at one epoch is
/// one run. Sets are listed ascending (grants, pushes and an executor's claims are); a list in
/// another order is sorted first, since the runs of a set are ascending by rule.
pub fn shard_runs(shards: &[ShardEpoch]) -> Vec<ShardRun> {
    let sorted;
    let shards = if shards.is_sorted_by_key(|entry| entry.shard) {
        shards
    } else {
        let mut copy = shards.to_vec();
        copy.sort_unstable();
        sorted = copy;
        &sorted
    };
    let mut runs: Vec<ShardRun> = Vec::new();
    for entry in shards {
        match runs.last_mut() {
            Some(run)
                if run.epoch == entry.epoch
                    && u64::from(run.first) + u64::from(run.count) == u64::from(entry.shard) =>
            {
                run.count += 1;
            }
            _ => runs.push(ShardRun {
                first: entry.shard,
                count: 1,
                epoch: entry.epoch,
            }),
        }
    }
    runs
}

/// The shard list `runs` stand for, ascending, after checking them (I6): every run non-empty,
/// inside `0..shard_count`, after the one before it and not overlapping it. Nothing is allocated
/// before the runs are known to fit, so the list is at most `shard_count` long whatever they say.
pub fn expand_shard_runs(
    runs: &[ShardRun],
    shard_count: u32,
) -> Result<Vec<ShardEpoch>, ShardRunError> {
    let mut lowest_free: u64 = 0;
    for run in runs {
        if run.count == 0 {
            return Err(ShardRunError::EmptyRun { first: run.first });
        }
        if u64::from(run.first) < lowest_free {
            return Err(ShardRunError::RunOutOfOrder { first: run.first });
        }
        let end = u64::from(run.first) + u64::from(run.count);
        if end > u64::from(shard_count) {
            let shard = u32::try_from(end - 1).unwrap_or(u32::MAX).max(shard_count);
            return Err(ShardListError::OutOfRange { shard, shard_count }.into());
        }
        lowest_free = end;
    }
    // Disjoint and inside `0..shard_count`, so the total is at most `shard_count`.
    let total: u64 = runs.iter().map(|run| u64::from(run.count)).sum();
    let mut shards = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for run in runs {
        shards.extend((run.first..run.first + run.count).map(|shard| ShardEpoch {
            shard,
            epoch: run.epoch,
        }));
    }
    Ok(shards)
}
