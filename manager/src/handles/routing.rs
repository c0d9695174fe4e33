//! The routing table as the applied state has it: whom work for each shard goes to (its owner,
//! unless the shard is between owners, and its ready secondaries, P19.5), one shard's route, and
//! the table as runs, kept from one answer to the next while it cannot have changed. A read
//! model over `LeaseState`, served by `/v1/routing` and `/v1/watch?view=routing`.

use std::sync::Arc;

use leasehold_api::wire::{Route, RoutingRuns, RoutingRunsBuilder, SecondaryRoute};

use leasehold_api::wire::DEFAULT_NAMESPACE;

use crate::lease::{Executor, ExecutorId, LeaseState, Shard, Space};

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
    ready_secondaries(shard, |id| state.executor(id))
        .into_iter()
        .map(|executor| SecondaryRoute {
            executor_id: executor.id.clone(),
            address: executor.address.clone(),
        })
        .collect()
}

/// The executors of `shard`'s ready secondaries (P19.5) that `executor` finds, ready longest
/// first, the placement order among equals: the rule both forms of `/v1/routing` apply. Empty,
/// and nothing allocated, for a shard without secondaries.
fn ready_secondaries<'a>(
    shard: &Shard,
    executor: impl Fn(&str) -> Option<&'a Executor>,
) -> Vec<&'a Executor> {
    shard
        .ready_longest_first()
        .into_iter()
        .filter_map(|secondary| executor(&secondary.executor))
        .collect()
}

/// One namespace's routing table as runs ([`RoutingRuns`]), by [`routed_owner`] and
/// [`ready_secondaries`].
fn routing_runs(state: Space<'_>) -> RoutingRuns {
    let shard_count = state.config().map_or(0, |c| c.shard_count);
    // Consecutive shards mostly have one owner: its address is looked up once per stretch.
    let mut last_owner: Option<(&str, Option<&str>)> = None;
    let mut runs = RoutingRunsBuilder::default();
    for shard in state.shards() {
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
        let secondaries = ready_secondaries(shard, |id| state.executor(id))
            .into_iter()
            .map(|executor| (executor.id.as_str(), executor.address.as_str()));
        runs.push(shard.id, shard.epoch, owner, secondaries);
    }
    runs.finish(state.revision(), shard_count, state.namespace().generation)
}

/// `default`'s routing table as runs, kept from one answer to the next while it cannot have
/// changed; another namespace's is built for each answer.
///
/// The table is a function of the shards' owners, epochs and handoffs, their secondaries and
/// which of those are ready since when (P19.5), and the executors' addresses. Every entry that
/// changes owners, handoffs, secondaries or members moves the namespace's `assignment_revision`
/// (P2.4, P18.1); a renewal that changes readiness (P19.3) moves only its
/// `readiness_revision`, so plans are not made stale by it. The runs are kept for the pair.
/// A routing client follows `/v1/watch?view=routing`, which answers on every new revision, and
/// most revisions are renewals: the runs built for the first of them (a pass over every shard,
/// a million at most) serve the rest, with the revision brought up to date.
#[derive(Debug, Default)]
pub struct RoutingRunsCache {
    /// The runs last built, and what they were built for.
    last: std::sync::Mutex<Option<(BuiltFor, Arc<RoutingRuns>)>>,
}

/// What kept runs were built from: `default`'s `(assignment_revision, readiness_revision)`.
type BuiltFor = (u64, u64);

impl RoutingRunsCache {
    /// The routing table of the namespace `space` of `state` as runs; an empty table for none
    /// (`default` before `Init`).
    pub fn of(&self, state: &LeaseState, space: Option<Space<'_>>) -> RoutingRuns {
        match space {
            Some(space) => self.of_space(space),
            None => RoutingRuns::collect(state.revision(), 0, 0, std::iter::empty()),
        }
    }

    /// The routing table of the namespace `state` as runs.
    fn of_space(&self, state: Space<'_>) -> RoutingRuns {
        if state.name() != DEFAULT_NAMESPACE {
            return routing_runs(state);
        }
        let namespace = state.namespace();
        let built_for = (namespace.assignment_revision, namespace.readiness_revision);
        let kept = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|(kept_for, _)| *kept_for == built_for)
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
                    Some((built_for, Arc::new(runs.clone())));
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
    use crate::lease::{
        plan_rebalance, plan_secondaries, Command, OperatorAction, PlacementOverrides, Renewal,
    };
    use leasehold_api::routing::RouteTable;
    use leasehold_api::wire::{ReplicaSettings, RoutingTable};

    fn apply(state: &mut LeaseState, command: Command) {
        let log_index = state.revision() + 1;
        let outcome = state.apply(log_index, &command);
        assert!(outcome.refusal().is_none(), "{outcome:?}");
    }

    fn register(state: &mut LeaseState, incarnation: &str) {
        apply(
            state,
            Command::Register {
                follows_generations: false,
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

    /// `default` initialised with `shard_count` shards and `replicas` replicas per shard,
    /// `executors` registered (`ex-2`, `ex-3`, ...), its primaries placed and its secondaries
    /// planned until none is missing; none ready yet.
    fn replicated(shard_count: u32, replicas: u32, executors: &[&str]) -> LeaseState {
        let mut state = LeaseState::default();
        apply(
            &mut state,
            Command::Init {
                now_ms: 0,
                shard_count,
                lease_duration_ms: 60_000,
            },
        );
        for executor in executors {
            register(&mut state, executor);
        }
        apply(
            &mut state,
            Command::Operator {
                now_ms: 0,
                actor: "admin CN=alice".into(),
                action: OperatorAction::SetNamespace {
                    name: DEFAULT_NAMESPACE.into(),
                    lease_duration_ms: 60_000,
                    max_executors: None,
                    placement: PlacementOverrides::default(),
                    replication: ReplicaSettings {
                        replicas,
                        ..ReplicaSettings::default()
                    },
                },
            },
        );
        let placed = plan_rebalance(&state, 0).expect("shards to place");
        apply(&mut state, placed);
        for _ in 0..shard_count * replicas {
            let space = state.space(DEFAULT_NAMESPACE).expect("initialised");
            let Some(plan) = plan_secondaries(
                space,
                0,
                &crate::lease::PlacementInputs::by_count(),
                0,
                usize::MAX,
            ) else {
                break;
            };
            apply(&mut state, plan.command);
        }
        state
    }

    /// `executor_id`'s renewal at `now_ms`, in sync with its set, saying `ready` are ready.
    fn renew(state: &mut LeaseState, now_ms: u64, executor_id: &str, ready: Vec<(u32, u64)>) {
        let renewal = Renewal {
            executor_id: executor_id.into(),
            claims: state.delivered_set(executor_id),
            revision: state.revision(),
            ready,
        };
        apply(
            state,
            Command::Renew {
                now_ms,
                renewals: vec![renewal],
            },
        );
    }

    /// `default`'s table of a route per shard, as `GET /v1/routing` answers it.
    fn routing_table(state: &LeaseState) -> RoutingTable {
        let space = state.space(DEFAULT_NAMESPACE).expect("initialised");
        RoutingTable {
            generation: 0,
            revision: state.revision(),
            shard_count: space.config().map_or(0, |c| c.shard_count),
            routes: space.shards().iter().map(|s| route(state, s)).collect(),
        }
    }

    /// P19.5: a namespace of one replica, and one whose secondaries are not ready yet, answer
    /// the runs form with exactly the body it had before secondaries existed: no
    /// `secondaries`, not even `null`.
    #[test]
    fn p19_5_runs_without_ready_secondaries_are_the_body_they_always_were() {
        let cache = RoutingRunsCache::default();
        let mut state = LeaseState::default();
        apply(
            &mut state,
            Command::Init {
                now_ms: 0,
                shard_count: 4,
                lease_duration_ms: 60_000,
            },
        );
        register(&mut state, "a");
        let placed = plan_rebalance(&state, 0).expect("shards to place");
        apply(&mut state, placed);
        let runs = cache.of(&state, state.space(DEFAULT_NAMESPACE));
        assert_eq!(
            serde_json::to_string(&runs).expect("encodes"),
            format!(
                r#"{{"revision":{},"shard_count":4,"owners":[{{"executor_id":"ex-2","address":"http://a:1"}}],"runs":[[0,4,0,1]]}}"#,
                state.revision()
            )
        );

        let waiting = replicated(4, 2, &["a", "b"]);
        let runs = cache.of(&waiting, waiting.space(DEFAULT_NAMESPACE));
        assert!(
            waiting
                .space(DEFAULT_NAMESPACE)
                .expect("initialised")
                .shards()
                .iter()
                .all(|shard| shard.secondaries.len() == 1),
            "every shard has a secondary, not ready"
        );
        assert_eq!(runs.secondaries, None);
        assert!(!serde_json::to_string(&runs)
            .expect("encodes")
            .contains("secondaries"));
    }

    /// P19.5: the runs name each shard's ready secondaries, ready longest first, as the route
    /// per shard does; an executor that holds only secondaries is among the owners; a
    /// secondary not ready, or lost with its executor, is not named.
    #[test]
    fn p19_5_runs_carry_each_shards_ready_secondaries_ready_longest_first() {
        // Seven executors for six shards: one holds secondaries only.
        let mut state = replicated(6, 3, &["a", "b", "c", "d", "e", "f", "g"]);
        let space = state.space(DEFAULT_NAMESPACE).expect("initialised");
        // A shard whose secondaries were placed [x, y]: y says ready first, so it is ready
        // longest and comes first, against the placement order.
        let (shard, placed) = space
            .shards()
            .iter()
            .find_map(|shard| {
                let placed: Vec<String> = shard
                    .secondaries
                    .iter()
                    .map(|s| s.executor.clone())
                    .collect();
                (placed.len() == 2).then_some((shard.id, placed))
            })
            .expect("a shard with two secondaries");
        let (x, y) = (placed[0].clone(), placed[1].clone());
        let ready = state.secondaries_of(&y);
        renew(&mut state, 5, &y, ready);
        let ready = state.secondaries_of(&x);
        renew(&mut state, 9, &x, ready);
        let space = state.space(DEFAULT_NAMESPACE).expect("initialised");
        let only_secondaries = space
            .executors()
            .find(|e| e.owned_shards.is_empty())
            .map(|e| e.id.clone())
            .expect("an executor without primaries");
        let ready = state.secondaries_of(&only_secondaries);
        assert!(!ready.is_empty(), "{only_secondaries} holds secondaries");
        renew(&mut state, 11, &only_secondaries, ready);

        let runs = routing_runs(state.space(DEFAULT_NAMESPACE).expect("initialised"));
        let secondaries = runs.secondaries.clone().expect("ready secondaries");
        let named = |shard: u32| -> Vec<String> {
            let stretch = secondaries
                .stretches
                .iter()
                .find(|s| s.first <= shard && shard - s.first < s.lists_of.len() as u32)
                .expect("a stretch covering the shard");
            let list = stretch.lists_of[(shard - stretch.first) as usize];
            secondaries.lists[list as usize]
                .iter()
                .map(|&owner| runs.owners[owner as usize].executor_id.clone())
                .collect()
        };
        assert_eq!(named(shard), [y.clone(), x.clone()], "ready longest first");
        // The same table as a route per shard, secondaries and all.
        let table = routing_table(&state);
        assert_eq!(
            RouteTable::from_runs(&runs),
            RouteTable::from_routing(&table)
        );
        assert!(table
            .routes
            .iter()
            .any(|route| route.secondaries.len() == 2));
        // An executor named only as a secondary is listed among the owners, and no run routes
        // a primary to it.
        let index = runs
            .owners
            .iter()
            .position(|owner| owner.executor_id == only_secondaries)
            .expect("listed") as u32;
        assert!(runs.runs.iter().all(|run| run.owner != Some(index)));
        assert!(secondaries.lists.iter().any(|list| list.contains(&index)));

        // y's readiness lapses (its renewal names none): only x is named.
        renew(&mut state, 12, &y, Vec::new());
        let runs = routing_runs(state.space(DEFAULT_NAMESPACE).expect("initialised"));
        let table = RouteTable::from_runs(&runs).expect("a usable table");
        assert_eq!(
            table
                .secondaries(shard)
                .iter()
                .map(|owner| owner.executor_id.as_str())
                .collect::<Vec<_>>(),
            [x.as_str()]
        );
        assert_eq!(Ok(table), RouteTable::from_routing(&routing_table(&state)));
    }

    /// P19.5: a renewal that changes which secondaries are ready moves the revision (so a
    /// routing watch wakes) but not the assignment revision (plans stay current): the kept
    /// runs are built again for it, never served without the change.
    #[test]
    fn p19_5_kept_runs_are_built_again_when_readiness_changes() {
        let cache = RoutingRunsCache::default();
        let mut state = replicated(4, 2, &["a", "b"]);
        let fresh =
            |state: &LeaseState| routing_runs(state.space(DEFAULT_NAMESPACE).expect("initialised"));
        let before = cache.of(&state, state.space(DEFAULT_NAMESPACE));
        assert_eq!(before, fresh(&state));
        assert_eq!(before.secondaries, None);

        let assignment_revision = state.assignment_revision();
        let revision = state.revision();
        let ready = state.secondaries_of("ex-3");
        assert!(!ready.is_empty());
        renew(&mut state, 1, "ex-3", ready);
        assert_eq!(
            state.assignment_revision(),
            assignment_revision,
            "readiness leaves plans current"
        );
        assert!(state.revision() > revision, "a routing watch wakes");
        let after = cache.of(&state, state.space(DEFAULT_NAMESPACE));
        assert_eq!(after, fresh(&state));
        assert!(after.secondaries.is_some(), "ex-3's secondaries are ready");

        // A renewal that changes nothing routed: the kept runs, at the new revision.
        let ready = state.secondaries_of("ex-3");
        renew(&mut state, 2, "ex-3", ready);
        let kept = cache.of(&state, state.space(DEFAULT_NAMESPACE));
        assert_eq!(kept.revision, state.revision());
        assert_eq!(kept, fresh(&state));

        // Ready no longer: built again, without them.
        renew(&mut state, 3, "ex-3", Vec::new());
        assert_eq!(state.assignment_revision(), assignment_revision);
        let unready = cache.of(&state, state.space(DEFAULT_NAMESPACE));
        assert_eq!(unready, fresh(&state));
        assert_eq!(unready.secondaries, None);
    }
}
