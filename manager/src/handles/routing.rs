//! The routing table as the applied state has it: whom work for each shard goes to (its owner,
//! unless the shard is between owners), one shard's route, and the table as runs, kept from one
//! answer to the next while it cannot have changed. A read model over `LeaseState`, served by
//! `/v1/routing` and `/v1/watch?view=routing`.

use std::sync::Arc;

use leasehold_api::wire::{Route, RoutingRuns, SecondaryRoute};

use leasehold_api::wire::DEFAULT_NAMESPACE;

use crate::lease::{ExecutorId, LeaseState, Shard, Space};

/// Whom work for `shard` goes to: its owner, unless it is between owners (releasing), when
/// nobody may be sent work for it yet. `/v1/routing` applies this rule in both forms.
fn routed_owner(shard: &Shard) -> Option<&ExecutorId> {
    shard.owner.as_ref().filter(|_| shard.handoff.is_none())
}

pub fn route(state: &LeaseState, shard: &Shard) -> Route {
    let owner = routed_owner(shard);
    Route {
        shard: shard.id,
        executor_id: owner.cloned(),
        address: owner
            .and_then(|id| state.executor(id))
            .map(|e| e.address.clone()),
        epoch: shard.epoch,
        secondaries: secondary_routes(state, shard),
    }
}

/// Where secondary work for `shard` may go (P19.5): its ready secondaries, ready longest first
/// (the placement order among equals).
fn secondary_routes(state: &LeaseState, shard: &Shard) -> Vec<SecondaryRoute> {
    let mut ready: Vec<(u64, usize, SecondaryRoute)> = shard
        .live_secondaries()
        .enumerate()
        .filter_map(|(order, secondary)| {
            let since_ms = secondary.ready_since_ms?;
            let executor = state.executor(&secondary.executor)?;
            Some((
                since_ms,
                order,
                SecondaryRoute {
                    executor_id: executor.id.clone(),
                    address: executor.address.clone(),
                },
            ))
        })
        .collect();
    ready.sort_by_key(|(since_ms, order, _)| (*since_ms, *order));
    ready.into_iter().map(|(_, _, route)| route).collect()
}

/// One namespace's routing table as runs ([`RoutingRuns`]), by [`routed_owner`].
fn routing_runs(state: Space<'_>) -> RoutingRuns {
    let shard_count = state.config().map_or(0, |c| c.shard_count);
    // Consecutive shards mostly have one owner: its address is looked up once per stretch.
    let mut last_owner: Option<(&str, Option<&str>)> = None;
    RoutingRuns::collect(
        state.revision(),
        shard_count,
        state.shards().iter().map(|shard| {
            let owner = routed_owner(shard).and_then(|id| {
                let address = match last_owner {
                    Some((last_id, address)) if last_id == id => address,
                    _ => {
                        let address = state.executor(id).map(|e| e.address.as_str());
                        last_owner = Some((id.as_str(), address));
                        address
                    }
                };
                address.map(|address| (id.as_str(), address))
            });
            (shard.id, shard.epoch, owner)
        }),
    )
}

/// `default`'s routing table as runs, kept from one answer to the next while it cannot have
/// changed; another namespace's is built for each answer.
///
/// The table is a function of the shards' owners, epochs and handoffs and the owners' addresses,
/// and every entry that changes any of them moves the namespace's `assignment_revision` (P2.4,
/// P18.1). A
/// routing client follows `/v1/watch?view=routing`, which answers on every new revision, and
/// most revisions are renewals: the runs built for the first of them (a pass over every shard,
/// a million at most) serve the rest, with the revision brought up to date.
#[derive(Debug, Default)]
pub struct RoutingRunsCache {
    /// The runs last built, and the `assignment_revision` of the state they were built from.
    last: std::sync::Mutex<Option<(u64, Arc<RoutingRuns>)>>,
}

impl RoutingRunsCache {
    /// The routing table of the namespace `space` of `state` as runs; an empty table for none
    /// (`default` before `Init`).
    pub fn of(&self, state: &LeaseState, space: Option<Space<'_>>) -> RoutingRuns {
        match space {
            Some(space) => self.of_space(space),
            None => RoutingRuns::collect(state.revision(), 0, std::iter::empty()),
        }
    }

    /// The routing table of the namespace `state` as runs.
    fn of_space(&self, state: Space<'_>) -> RoutingRuns {
        if state.name() != DEFAULT_NAMESPACE {
            return routing_runs(state);
        }
        let assignment_revision = state.namespace().assignment_revision;
        let kept = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|(built_at, _)| *built_at == assignment_revision)
            .map(|(_, runs)| runs.clone());
        let mut runs = match kept {
            Some(runs) => RoutingRuns::clone(&runs),
            None => {
                // Built outside the lock: a reader arriving meanwhile builds its own.
                let runs = routing_runs(state);
                *self
                    .last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some((assignment_revision, Arc::new(runs.clone())));
                runs
            }
        };
        runs.revision = state.revision();
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{plan_rebalance, Command};

    fn apply(state: &mut LeaseState, command: Command) {
        let log_index = state.revision() + 1;
        let outcome = state.apply(log_index, &command);
        assert!(outcome.refusal().is_none(), "{outcome:?}");
    }

    fn register(state: &mut LeaseState, incarnation: &str) {
        apply(
            state,
            Command::Register {
                namespace: DEFAULT_NAMESPACE.into(),
                now_ms: 0,
                incarnation: incarnation.into(),
                address: format!("http://{incarnation}:1"),
                name: None,
                credential_sha256: None,
                capacity: 1,
                app_version: None,
                labels: Default::default(),
            },
        );
    }

    /// The kept runs are the table's own at every revision: reused (the revision brought up to
    /// date) while nothing routed changes, built again when an entry changes owners or members.
    #[test]
    fn kept_routing_runs_answer_as_a_fresh_build_at_every_revision() {
        let cache = RoutingRunsCache::default();
        let mut state = LeaseState::default();
        apply(
            &mut state,
            Command::Init {
                now_ms: 0,
                shard_count: 8,
                lease_duration_ms: 60_000,
            },
        );
        register(&mut state, "a");
        assert_eq!(
            cache.of(&state, state.space(DEFAULT_NAMESPACE)),
            routing_runs(state.space(DEFAULT_NAMESPACE).expect("initialised"))
        );
        let placed = plan_rebalance(&state, 0).expect("shards to place");
        apply(&mut state, placed);
        assert_eq!(
            cache.of(&state, state.space(DEFAULT_NAMESPACE)),
            routing_runs(state.space(DEFAULT_NAMESPACE).expect("initialised")),
            "owners changed"
        );
        // A change nothing routed depends on: the kept runs, at the new revision.
        apply(
            &mut state,
            Command::SetLeaseDuration {
                now_ms: 1,
                lease_duration_ms: 30_000,
            },
        );
        let reused = cache.of(&state, state.space(DEFAULT_NAMESPACE));
        assert_eq!(reused.revision, state.revision());
        assert_eq!(
            reused,
            routing_runs(state.space(DEFAULT_NAMESPACE).expect("initialised"))
        );
        register(&mut state, "b");
        let handoffs = plan_rebalance(&state, 1).expect("shards for the joiner");
        apply(&mut state, handoffs);
        assert_eq!(
            cache.of(&state, state.space(DEFAULT_NAMESPACE)),
            routing_runs(state.space(DEFAULT_NAMESPACE).expect("initialised")),
            "handoffs began"
        );
    }
}
