//! The routing table at one revision, the pure part of the client: no I/O.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use super::{ReadFrom, RoutingError, TableError, Target};
use crate::shard_for_key;
use crate::wire::{
    Role, RoutingRuns, RoutingTable, RunSecondaries, StateView, MAX_REPLICAS, MAX_SHARD_COUNT,
};

/// The executor a shard's work goes to: its primary, or one of its ready secondaries (P19.5).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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
    /// Its ready secondaries on live executors (PROTOCOL P19.5), ready longest first: where
    /// secondary work may go. Empty in a namespace of one replica.
    pub secondaries: Vec<Owner>,
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
    /// The namespace's generation the shard count is of (PROTOCOL §20).
    generation: u64,
    /// Maximal stretches of consecutive shards with one owner and one epoch, ascending, covering
    /// `0..shard_count` once (maximal, so two tables routing alike are equal).
    pub(super) runs: Vec<TableRun>,
    /// The shards' ready secondaries (P19.5), kept as the managers send them: each distinct
    /// list once, and an index per shard that has one.
    secondaries: TableSecondaries,
}

/// The ready secondaries of a table (P19.5): consecutive shards seldom share a list (P19.2
/// spreads each executor's primaries' secondaries over the others), so a shard costs an index
/// into a few distinct lists, not a list of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TableSecondaries {
    /// Each distinct list, in the order the shards first use them (so two tables with the same
    /// secondaries are equal whatever order they arrived in).
    lists: Vec<Arc<[Owner]>>,
    /// Maximal stretches of consecutive shards with secondaries, ascending and disjoint.
    stretches: Vec<Stretch>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Stretch {
    first: u32,
    /// For each shard from `first` on, its list's index in [`TableSecondaries::lists`].
    lists_of: Vec<u32>,
}

impl TableSecondaries {
    /// The ready secondaries of `shard`, ready longest first; empty when it has none.
    fn of(&self, shard: u32) -> &[Owner] {
        let after = self.stretches.partition_point(|s| s.first <= shard);
        after
            .checked_sub(1)
            .and_then(|at| self.stretches.get(at))
            .and_then(|stretch| {
                let offset = usize::try_from(shard - stretch.first).ok()?;
                stretch.lists_of.get(offset)
            })
            .and_then(|list| self.lists.get(usize::try_from(*list).ok()?))
            .map_or(&[], |list| list)
    }
}

/// Builds [`TableSecondaries`] from shards given in ascending order.
#[derive(Debug, Default)]
struct SecondariesBuilder {
    index: HashMap<Arc<[Owner]>, u32>,
    built: TableSecondaries,
}

impl SecondariesBuilder {
    /// The index of `list`, listed now if it is new.
    fn intern(&mut self, list: Arc<[Owner]>) -> u32 {
        if let Some(index) = self.index.get(&list) {
            return *index;
        }
        // At most one list per shard, and shards are u32.
        let index = u32::try_from(self.built.lists.len()).unwrap_or(u32::MAX);
        self.built.lists.push(Arc::clone(&list));
        self.index.insert(list, index);
        index
    }

    /// `shard`, above every shard pushed before, has the secondaries of list `index`.
    fn push(&mut self, shard: u32, index: u32) {
        match self.built.stretches.last_mut() {
            Some(stretch)
                if u64::from(stretch.first) + stretch.lists_of.len() as u64 == u64::from(shard) =>
            {
                stretch.lists_of.push(index);
            }
            _ => self.built.stretches.push(Stretch {
                first: shard,
                lists_of: vec![index],
            }),
        }
    }
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
            let secondaries = route
                .secondaries
                .iter()
                .map(|secondary| (secondary.executor_id.clone(), secondary.address.clone()))
                .collect();
            (route.shard, route.epoch, owner, secondaries)
        });
        Self::build(table.revision, (table.shard_count, table.generation), rows)
    }

    /// The table a `GET /v1/watch` state implies, by the rule `/v1/routing` uses: a shard's owner
    /// is routed to unless the shard is being handed off, and its ready secondaries on live
    /// executors. A state does not say which secondary has been ready longest: they are taken in
    /// the order they were placed. Only managers before the runs (0.1.0, which keep no
    /// secondaries) are followed by their state.
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
            let secondaries = shard
                .secondaries
                .iter()
                .filter(|secondary| secondary.ready && secondary.lost_for_ms.is_none())
                .filter_map(|secondary| {
                    let address = addresses.get(secondary.executor_id.as_str())?;
                    Some((secondary.executor_id.clone(), (*address).to_owned()))
                })
                .collect();
            (shard.shard, shard.epoch, owner, secondaries)
        });
        Self::build(state.revision, (state.shard_count, state.generation), rows)
    }

    /// The table `GET /v1/routing?form=runs` (or a routing watch) answered, checked as
    /// [`RouteTable::from_routing`] checks a table of routes (every shard once, inside the
    /// count, usable addresses), and every run non-empty and naming an owner the table lists;
    /// its secondaries (P19.5) as [`table_secondaries`] says. Each owner's address is checked
    /// once, and no route per shard is made.
    pub fn from_runs(table: &RoutingRuns) -> Result<Self, TableError> {
        if table.shard_count > MAX_SHARD_COUNT {
            return Err(TableError::TooManyShards(table.shard_count));
        }
        let mut owners = OwnerSlots::new(table);
        let mut runs = table_runs(table, &mut owners)?;
        runs.sort_by_key(|run| run.first);
        check_coverage(&runs, table.shard_count)?;
        let secondaries = match &table.secondaries {
            None => TableSecondaries::default(),
            Some(secondaries) => table_secondaries(secondaries, table.shard_count, &mut owners)?,
        };
        Ok(Self {
            revision: table.revision,
            shard_count: table.shard_count,
            generation: table.generation,
            runs: merged(runs),
            secondaries,
        })
    }

    fn build(
        revision: u64,
        (shard_count, generation): (u32, u64),
        rows: impl Iterator<Item = (u32, u64, Option<(String, String)>, Vec<(String, String)>)>,
    ) -> Result<Self, TableError> {
        if shard_count > MAX_SHARD_COUNT {
            return Err(TableError::TooManyShards(shard_count));
        }
        let mut slots: Vec<Option<Slot>> = vec![None; shard_count as usize];
        for (shard, epoch, owner, secondaries) in rows {
            let owner = match owner {
                Some((executor_id, address)) => Some(Owner {
                    executor_id,
                    address: normalize_address(shard, &address)?,
                }),
                None => None,
            };
            let secondaries = secondaries
                .into_iter()
                .map(|(executor_id, address)| {
                    Ok(Owner {
                        executor_id,
                        address: normalize_address(shard, &address)?,
                    })
                })
                .collect::<Result<Vec<Owner>, TableError>>()?;
            let slot = slots
                .get_mut(shard as usize)
                .ok_or(TableError::OutOfRange { shard, shard_count })?;
            if slot.is_some() {
                return Err(TableError::Duplicate(shard));
            }
            *slot = Some((epoch, owner, secondaries));
        }
        let mut runs: Vec<TableRun> = Vec::new();
        let mut secondaries = SecondariesBuilder::default();
        for (shard, slot) in (0..shard_count).zip(slots) {
            let (epoch, owner, listed) = slot.ok_or(TableError::Missing(shard))?;
            if !listed.is_empty() {
                let index = secondaries.intern(listed.into());
                secondaries.push(shard, index);
            }
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
            generation,
            runs,
            secondaries: secondaries.built,
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

    /// The namespace's generation the shard count is of (PROTOCOL §20): 0 until it reshards.
    /// Keys map by this table's count; an executor of a newer layout answers work routed under
    /// an older generation with `421` (P20.3), and the client reads the table again.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every shard's row, ascending (made as it is read: the table keeps runs).
    pub fn routes(&self) -> impl Iterator<Item = ShardRoute> + '_ {
        self.runs.iter().flat_map(move |run| {
            (run.first..=run.first.saturating_add(run.count - 1)).map(move |shard| ShardRoute {
                shard,
                epoch: run.epoch,
                owner: run.owner.as_deref().cloned(),
                secondaries: self.secondaries.of(shard).to_vec(),
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
            secondaries: self.secondaries(shard).to_vec(),
        })
    }

    /// The ready secondaries of `shard` (PROTOCOL P19.5), ready longest first; empty when it
    /// has none or is outside the table.
    pub fn secondaries(&self, shard: u32) -> &[Owner] {
        self.secondaries.of(shard)
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

    /// Where work for `key` goes, by this table: its primary.
    pub fn target(&self, key: &[u8]) -> Result<Target, RoutingError> {
        // `targets` answers at least one target or an error.
        self.targets(key, ReadFrom::Primary)?
            .into_iter()
            .next()
            .ok_or(RoutingError::NotReady)
    }

    /// Where work for `key` may go when read from `read_from` (PROTOCOL P19.5), in the order
    /// to try them: the primary and the ready secondaries, ready longest first, as
    /// [`ReadFrom`] orders them. Never empty: a key with none of the replicas asked for is
    /// [`RoutingError::NoSecondary`] for [`ReadFrom::Secondary`] and [`RoutingError::NoOwner`]
    /// otherwise.
    pub fn targets(&self, key: &[u8], read_from: ReadFrom) -> Result<Vec<Target>, RoutingError> {
        let shard = self.shard_of(key).ok_or(RoutingError::NotReady)?;
        let run = self.run_of(shard).ok_or(RoutingError::NotReady)?;
        let target = |owner: &Owner, role: Role| Target {
            shard,
            epoch: run.epoch,
            executor_id: owner.executor_id.clone(),
            address: owner.address.clone(),
            revision: self.revision,
            generation: self.generation,
            role,
        };
        let primary = run
            .owner
            .as_deref()
            .map(|owner| target(owner, Role::Primary));
        let secondaries = self
            .secondaries(shard)
            .iter()
            .map(|owner| target(owner, Role::Secondary));
        let targets: Vec<Target> = match read_from {
            ReadFrom::Primary => primary.into_iter().collect(),
            ReadFrom::PrimaryPreferred => primary.into_iter().chain(secondaries).collect(),
            ReadFrom::Secondary => secondaries.collect(),
            ReadFrom::SecondaryPreferred => secondaries.chain(primary).collect(),
        };
        if !targets.is_empty() {
            return Ok(targets);
        }
        Err(match read_from {
            ReadFrom::Secondary => RoutingError::NoSecondary {
                shard,
                revision: self.revision,
            },
            _ => RoutingError::NoOwner {
                shard,
                revision: self.revision,
            },
        })
    }
}

/// The target to send to of `targets` (in the order to try them): the first not on the
/// executor `failed` (where the send before the refresh failed), else the first; `NotReady` for
/// none, which [`RouteTable::targets`] never answers.
pub(super) fn choose(targets: Vec<Target>, failed: Option<&str>) -> Result<Target, RoutingError> {
    let elsewhere = targets
        .iter()
        .position(|target| Some(target.executor_id.as_str()) != failed)
        .unwrap_or(0);
    targets
        .into_iter()
        .nth(elsewhere)
        .ok_or(RoutingError::NotReady)
}

/// A shard's row while a table of routes is built: its epoch, owner and secondaries.
type Slot = (u64, Option<Owner>, Vec<Owner>);

/// The owners a table of runs lists, each made (its address checked) when a run or a list of
/// secondaries first names it.
struct OwnerSlots<'a> {
    listed: &'a [crate::wire::RouteOwner],
    made: Vec<Option<Arc<Owner>>>,
}

impl<'a> OwnerSlots<'a> {
    fn new(table: &'a RoutingRuns) -> Self {
        Self {
            listed: &table.owners,
            made: vec![None; table.owners.len()],
        }
    }

    /// Owner `index`, named at `shard`; `None` when the table lists no such owner.
    fn get(&mut self, index: u32, shard: u32) -> Result<Option<Arc<Owner>>, TableError> {
        let Ok(position) = usize::try_from(index) else {
            return Ok(None);
        };
        let Some((slot, listed)) = self.made.get_mut(position).zip(self.listed.get(position))
        else {
            return Ok(None);
        };
        if slot.is_none() {
            *slot = Some(Arc::new(Owner {
                executor_id: listed.executor_id.clone(),
                address: normalize_address(shard, &listed.address)?,
            }));
        }
        Ok(slot.clone())
    }
}

/// `table`'s runs as sent, each non-empty and its owner one the table lists.
fn table_runs(
    table: &RoutingRuns,
    owners: &mut OwnerSlots<'_>,
) -> Result<Vec<TableRun>, TableError> {
    let mut runs = Vec::with_capacity(table.runs.len());
    for run in &table.runs {
        if run.count == 0 {
            return Err(TableError::EmptyRun(run.first));
        }
        let owner =
            match run.owner {
                None => None,
                Some(index) => Some(owners.get(index, run.first)?.ok_or(
                    TableError::UnknownOwner {
                        shard: run.first,
                        owner: index,
                    },
                )?),
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

/// The secondaries of a table of runs (P19.5), checked: each list of one to
/// `MAX_REPLICAS - 1` owners the table lists, none twice; each stretch non-empty, inside
/// `0..shard_count`, naming lists the table has, and no shard in two stretches.
fn table_secondaries(
    secondaries: &RunSecondaries,
    shard_count: u32,
    owners: &mut OwnerSlots<'_>,
) -> Result<TableSecondaries, TableError> {
    let bad = |why: String| Err(TableError::BadSecondaries(why));
    let most = usize::try_from(MAX_REPLICAS - 1).unwrap_or(usize::MAX);
    let mut stretches: Vec<&crate::wire::SecondaryStretch> = secondaries.stretches.iter().collect();
    stretches.sort_by_key(|stretch| stretch.first);
    // Each list sent, made when a shard first uses it: its index among the table's lists.
    let mut made: Vec<Option<u32>> = vec![None; secondaries.lists.len()];
    let mut builder = SecondariesBuilder::default();
    let mut covered_to = 0u64;
    for stretch in stretches {
        let first = u64::from(stretch.first);
        let end = first + stretch.lists_of.len() as u64;
        if stretch.lists_of.is_empty() {
            return bad(format!("an empty stretch at shard {}", stretch.first));
        }
        if first < covered_to {
            return bad(format!("shard {} is in two stretches", stretch.first));
        }
        if end > u64::from(shard_count) {
            return bad(format!(
                "the stretch at shard {} ends past the shard count {shard_count}",
                stretch.first
            ));
        }
        covered_to = end;
        for (shard, &list) in (stretch.first..).zip(&stretch.lists_of) {
            let Some(slot) = usize::try_from(list).ok().and_then(|at| made.get_mut(at)) else {
                return bad(format!(
                    "shard {shard} names list {list}, which the table lacks"
                ));
            };
            let index = match *slot {
                Some(index) => index,
                None => {
                    let listed = secondaries
                        .lists
                        .get(usize::try_from(list).unwrap_or(usize::MAX))
                        .map_or(&[][..], Vec::as_slice);
                    if listed.is_empty() || listed.len() > most {
                        return bad(format!(
                            "list {list} has {} secondaries, not 1 to {most}",
                            listed.len()
                        ));
                    }
                    let mut resolved: Vec<Owner> = Vec::with_capacity(listed.len());
                    for &owner in listed {
                        let Some(made) = owners.get(owner, shard)? else {
                            return bad(format!(
                                "list {list} names owner {owner}, which the table does not list"
                            ));
                        };
                        if resolved.contains(&made) {
                            return bad(format!("list {list} names owner {owner} twice"));
                        }
                        resolved.push(Owner::clone(&made));
                    }
                    let index = builder.intern(resolved.into());
                    *slot = Some(index);
                    index
                }
            };
            builder.push(shard, index);
        }
    }
    Ok(builder.built)
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
