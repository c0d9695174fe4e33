//! The routing table at one revision, the pure part of the client: no I/O.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use super::{RoutingError, TableError, Target};
use crate::shard_for_key;
use crate::wire::{RoutingRuns, RoutingTable, StateView, MAX_SHARD_COUNT};

/// The executor a shard's work goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its id (`ex-<log index>`).
    pub executor_id: String,
    /// Its base URL, without a trailing slash.
    pub address: String,
}

/// One shard's row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRoute {
    /// The shard.
    pub shard: u32,
    /// Its epoch: the owner's fencing token.
    pub epoch: u64,
    /// `None` while unowned or being handed off (P5.2).
    pub owner: Option<Owner>,
}

/// A routing table at one revision: the pure part of the client, with no I/O.
///
/// Kept as runs, as the managers send it: a settled million-shard table is about one run per
/// executor, so adopting a table costs its runs, not a route per shard, and a lookup is a binary
/// search over the runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTable {
    revision: u64,
    shard_count: u32,
    /// Maximal stretches of consecutive shards with one owner and one epoch, ascending, covering
    /// `0..shard_count` once (maximal, so two tables routing alike are equal).
    pub(super) runs: Vec<TableRun>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TableRun {
    first: u32,
    count: u32,
    epoch: u64,
    owner: Option<Arc<Owner>>,
}

impl TableRun {
    /// One past its last shard.
    fn end(&self) -> u64 {
        u64::from(self.first) + u64::from(self.count)
    }
}

impl RouteTable {
    /// The table `GET /v1/routing` answered, checked: one route per shard in `0..shard_count`,
    /// usable addresses.
    pub fn from_routing(table: &RoutingTable) -> Result<Self, TableError> {
        let rows = table.routes.iter().map(|route| {
            let owner = match (&route.executor_id, &route.address) {
                (Some(id), Some(address)) => Some((id.clone(), address.clone())),
                _ => None,
            };
            (route.shard, route.epoch, owner)
        });
        Self::build(table.revision, table.shard_count, rows)
    }

    /// The table a `GET /v1/watch` state implies, by the rule `/v1/routing` uses: a shard's owner
    /// is routed to unless the shard is being handed off.
    pub fn from_state(state: &StateView) -> Result<Self, TableError> {
        let addresses: BTreeMap<&str, &str> = state
            .executors
            .iter()
            .map(|executor| (executor.executor_id.as_str(), executor.address.as_str()))
            .collect();
        let rows = state.shards.iter().map(|shard| {
            let owner = shard
                .owner
                .as_deref()
                .filter(|_| shard.handoff.is_none())
                .and_then(|id| {
                    addresses
                        .get(id)
                        .map(|address| (id.to_owned(), (*address).to_owned()))
                });
            (shard.shard, shard.epoch, owner)
        });
        Self::build(state.revision, state.shard_count, rows)
    }

    /// The table `GET /v1/routing?form=runs` (or a routing watch) answered, checked as
    /// [`RouteTable::from_routing`] checks a table of routes (every shard once, inside the
    /// count, usable addresses), and every run non-empty and naming an owner the table lists.
    /// Each owner's address is checked once, and no route per shard is made.
    pub fn from_runs(table: &RoutingRuns) -> Result<Self, TableError> {
        if table.shard_count > MAX_SHARD_COUNT {
            return Err(TableError::TooManyShards(table.shard_count));
        }
        let mut runs = table_runs(table)?;
        runs.sort_by_key(|run| run.first);
        check_coverage(&runs, table.shard_count)?;
        Ok(Self {
            revision: table.revision,
            shard_count: table.shard_count,
            runs: merged(runs),
        })
    }

    fn build(
        revision: u64,
        shard_count: u32,
        rows: impl Iterator<Item = (u32, u64, Option<(String, String)>)>,
    ) -> Result<Self, TableError> {
        if shard_count > MAX_SHARD_COUNT {
            return Err(TableError::TooManyShards(shard_count));
        }
        let mut slots: Vec<Option<(u64, Option<Owner>)>> = vec![None; shard_count as usize];
        for (shard, epoch, owner) in rows {
            let owner = match owner {
                Some((executor_id, address)) => Some(Owner {
                    executor_id,
                    address: normalize_address(shard, &address)?,
                }),
                None => None,
            };
            let slot = slots
                .get_mut(shard as usize)
                .ok_or(TableError::OutOfRange { shard, shard_count })?;
            if slot.is_some() {
                return Err(TableError::Duplicate(shard));
            }
            *slot = Some((epoch, owner));
        }
        let mut runs: Vec<TableRun> = Vec::new();
        for (shard, slot) in (0..shard_count).zip(slots) {
            let (epoch, owner) = slot.ok_or(TableError::Missing(shard))?;
            match runs.last_mut() {
                Some(run) if run.epoch == epoch && run.owner.as_deref() == owner.as_ref() => {
                    run.count += 1;
                }
                _ => runs.push(TableRun {
                    first: shard,
                    count: 1,
                    epoch,
                    owner: owner.map(Arc::new),
                }),
            }
        }
        Ok(Self {
            revision,
            shard_count,
            runs,
        })
    }

    /// The revision (Raft log index) of the state the table was read from.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The cluster's shard count (0 before it is configured).
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// Every shard's row, ascending (made as it is read: the table keeps runs).
    pub fn routes(&self) -> impl Iterator<Item = ShardRoute> + '_ {
        self.runs.iter().flat_map(|run| {
            (run.first..=run.first.saturating_add(run.count - 1)).map(move |shard| ShardRoute {
                shard,
                epoch: run.epoch,
                owner: run.owner.as_deref().cloned(),
            })
        })
    }

    /// The row of `shard`, if it is inside the table.
    pub fn route(&self, shard: u32) -> Option<ShardRoute> {
        let run = self.run_of(shard)?;
        Some(ShardRoute {
            shard,
            epoch: run.epoch,
            owner: run.owner.as_deref().cloned(),
        })
    }

    fn run_of(&self, shard: u32) -> Option<&TableRun> {
        let after = self.runs.partition_point(|run| run.first <= shard);
        let run = self.runs.get(after.checked_sub(1)?)?;
        (u64::from(shard) < run.end()).then_some(run)
    }

    /// The shard of `key`, once the shard count is known.
    pub fn shard_of(&self, key: &[u8]) -> Option<u32> {
        NonZeroU32::new(self.shard_count()).map(|count| shard_for_key(key, count))
    }

    /// Where work for `key` goes, by this table.
    pub fn target(&self, key: &[u8]) -> Result<Target, RoutingError> {
        let shard = self.shard_of(key).ok_or(RoutingError::NotReady)?;
        let run = self.run_of(shard).ok_or(RoutingError::NotReady)?;
        let owner = run.owner.as_ref().ok_or(RoutingError::NoOwner {
            shard,
            revision: self.revision,
        })?;
        Ok(Target {
            shard,
            epoch: run.epoch,
            executor_id: owner.executor_id.clone(),
            address: owner.address.clone(),
            revision: self.revision,
        })
    }
}

/// `table`'s runs as sent, each non-empty and its owner one the table lists (made once per
/// owner, its address checked then).
fn table_runs(table: &RoutingRuns) -> Result<Vec<TableRun>, TableError> {
    let mut owners: Vec<Option<Arc<Owner>>> = vec![None; table.owners.len()];
    let mut runs = Vec::with_capacity(table.runs.len());
    for run in &table.runs {
        if run.count == 0 {
            return Err(TableError::EmptyRun(run.first));
        }
        let owner = match run.owner {
            None => None,
            Some(index) => {
                let unknown = TableError::UnknownOwner {
                    shard: run.first,
                    owner: index,
                };
                let position = usize::try_from(index).map_err(|_| unknown.clone())?;
                let (slot, listed) = owners
                    .get_mut(position)
                    .zip(table.owners.get(position))
                    .ok_or(unknown)?;
                if slot.is_none() {
                    *slot = Some(Arc::new(Owner {
                        executor_id: listed.executor_id.clone(),
                        address: normalize_address(run.first, &listed.address)?,
                    }));
                }
                slot.clone()
            }
        };
        runs.push(TableRun {
            first: run.first,
            count: run.count,
            epoch: run.epoch,
            owner,
        });
    }
    Ok(runs)
}

/// Checks that `runs`, sorted by first shard, cover `0..shard_count` with every shard once. A gap is
/// reported only when nothing worse is found after it, as a table of routes reports a missing
/// shard last.
fn check_coverage(runs: &[TableRun], shard_count: u32) -> Result<(), TableError> {
    let count = u64::from(shard_count);
    let mut covered_to = 0u64;
    let mut first_missing = None;
    for run in runs {
        let first = u64::from(run.first);
        if first < covered_to {
            return Err(TableError::Duplicate(run.first));
        }
        if first > covered_to && first_missing.is_none() {
            first_missing = Some(covered_to);
        }
        if run.end() > count {
            return Err(TableError::OutOfRange {
                shard: u32::try_from(first.max(count)).unwrap_or(u32::MAX),
                shard_count,
            });
        }
        covered_to = run.end();
    }
    if covered_to < count && first_missing.is_none() {
        first_missing = Some(covered_to);
    }
    if let Some(missing) = first_missing {
        return Err(TableError::Missing(
            u32::try_from(missing).unwrap_or(u32::MAX),
        ));
    }
    Ok(())
}

/// `runs` (ascending, each shard once) with neighbours of one owner and one epoch joined.
fn merged(runs: Vec<TableRun>) -> Vec<TableRun> {
    let mut joined: Vec<TableRun> = Vec::with_capacity(runs.len());
    for run in runs {
        match joined.last_mut() {
            Some(last) if last.epoch == run.epoch && last.owner == run.owner => {
                last.count += run.count;
            }
            _ => joined.push(run),
        }
    }
    joined
}

/// An owner's address by the base-URL rule ([`crate::wire::normalize_base_url`]; the manager
/// accepted it at registration by `wire::validate_base_url`), without a trailing slash.
fn normalize_address(shard: u32, raw: &str) -> Result<String, TableError> {
    crate::wire::normalize_base_url(raw).map_err(|reason| TableError::BadAddress {
        shard,
        address: raw.to_owned(),
        reason,
    })
}
