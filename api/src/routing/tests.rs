//! The routing table and client against in-process fake managers and executors.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};

use super::follow::{jittered, Backoff};
use super::*;
use crate::problem::{ErrorCode, CLUSTER_VERSION_HEADER};
use crate::shard_for_key;
use crate::wire::{
    ExecutorView, HandoffView, Route, RouteOwner, RouteRun, RoutingAnswer, RoutingRuns,
    RoutingRunsBuilder, RoutingTable, RunSecondaries, SecondaryRoute, SecondaryStretch,
    SecondaryView, ShardView, StateView, WatchReply,
};

const SHARDS: u32 = 8;

fn executor(id: &str, address: &str) -> ExecutorView {
    ExecutorView {
        namespace: DEFAULT_NAMESPACE.into(),
        executor_id: id.into(),
        incarnation: format!("inc-{id}"),
        name: None,
        address: address.into(),
        lease_remaining_ms: 3000,
        registered_revision: 1,
        shards: Vec::new(),
        draining: false,
        capacity: crate::wire::DEFAULT_CAPACITY,
        load: None,
        utilisation: None,
        app_version: None,
        labels: Default::default(),
    }
}

/// A state at `revision` where shard `s` is owned by `owners[s]` (an index into
/// `executors`, or none), with no handoffs.
fn state(revision: u64, executors: &[(&str, &str)], owners: &[Option<usize>]) -> StateView {
    StateView {
        generation: 0,
        revision,
        shard_count: u32::try_from(owners.len()).unwrap(),
        lease_duration_ms: 3000,
        executors: executors
            .iter()
            .map(|(id, address)| executor(id, address))
            .collect(),
        shards: owners
            .iter()
            .enumerate()
            .map(|(shard, owner)| ShardView {
                shard: u32::try_from(shard).unwrap(),
                owner: owner.map(|index| executors[index].0.to_owned()),
                epoch: 1 + u64::from(owner.is_some()),
                handoff: None,
                load: None,
                hot: false,
                pinned_to: None,
                secondaries: Vec::new(),
            })
            .collect(),
        maintenance: false,
        lease_remaining_is_bound: false,
    }
}

/// `state` with every shard's ready secondaries on `executors` (indexes into the state's
/// executors), ready longest first in the order given (P19.5).
fn with_secondaries(mut state: StateView, executors: &[usize]) -> StateView {
    let ids: Vec<String> = state
        .executors
        .iter()
        .map(|e| e.executor_id.clone())
        .collect();
    for shard in &mut state.shards {
        shard.secondaries = executors
            .iter()
            .map(|&index| SecondaryView {
                executor_id: ids[index].clone(),
                ready: true,
                lost_for_ms: None,
            })
            .collect();
    }
    state
}

/// What `/v1/routing` answers for `state` (written out, not through `from_state`): its ready
/// secondaries on live executors in the order the state lists them.
fn routing_of(state: &StateView) -> RoutingTable {
    RoutingTable {
        generation: 0,
        revision: state.revision,
        shard_count: state.shard_count,
        routes: state
            .shards
            .iter()
            .map(|shard| {
                let owner = shard.owner.clone().filter(|_| shard.handoff.is_none());
                let address = owner.as_ref().and_then(|id| {
                    state
                        .executors
                        .iter()
                        .find(|e| &e.executor_id == id)
                        .map(|e| e.address.clone())
                });
                let secondaries = shard
                    .secondaries
                    .iter()
                    .filter(|s| s.ready && s.lost_for_ms.is_none())
                    .filter_map(|s| {
                        let executor = state
                            .executors
                            .iter()
                            .find(|e| e.executor_id == s.executor_id)?;
                        Some(SecondaryRoute {
                            executor_id: executor.executor_id.clone(),
                            address: executor.address.clone(),
                        })
                    })
                    .collect();
                Route {
                    shard: shard.shard,
                    executor_id: owner,
                    address,
                    epoch: shard.epoch,
                    secondaries,
                }
            })
            .collect(),
    }
}

#[test]
fn routing_table_from_state_routes_owners_but_not_shards_being_handed_off() {
    let mut view = state(
        7,
        &[
            ("ex-1", "http://127.0.0.1:1/"),
            ("ex-2", "http://127.0.0.1:2"),
        ],
        &[Some(0), Some(1), None, Some(1)],
    );
    view.shards[3].handoff = Some(HandoffView {
        to: Some("ex-1".into()),
        revoke_revision: 6,
        completes_by_expiry_in_ms: 100,
    });
    let table = RouteTable::from_state(&view).unwrap();
    assert_eq!(table.revision(), 7);
    assert_eq!(table.shard_count(), 4);
    let owners: Vec<Option<String>> = table
        .routes()
        .map(|route| route.owner.map(|o| o.address))
        .collect();
    assert_eq!(
        owners,
        [
            Some("http://127.0.0.1:1".to_owned()),
            Some("http://127.0.0.1:2".to_owned()),
            None,
            None
        ]
    );
    // The same rule as `/v1/routing`.
    assert_eq!(RouteTable::from_routing(&routing_of(&view)).unwrap(), table);
}

#[test]
fn routing_table_needs_one_route_per_shard_and_usable_addresses() {
    let view = state(3, &[("ex-1", "http://127.0.0.1:1")], &[Some(0), Some(0)]);
    let good = routing_of(&view);
    let mut missing = good.clone();
    missing.routes.pop();
    assert_eq!(
        RouteTable::from_routing(&missing),
        Err(TableError::Missing(1))
    );
    let mut duplicate = good.clone();
    duplicate.routes[1].shard = 0;
    assert_eq!(
        RouteTable::from_routing(&duplicate),
        Err(TableError::Duplicate(0))
    );
    let mut beyond = good.clone();
    beyond.routes[1].shard = 2;
    assert_eq!(
        RouteTable::from_routing(&beyond),
        Err(TableError::OutOfRange {
            shard: 2,
            shard_count: 2
        })
    );
    let mut bad = good;
    bad.routes[0].address = Some("ftp://h:1".into());
    assert!(matches!(
        RouteTable::from_routing(&bad),
        Err(TableError::BadAddress { shard: 0, .. })
    ));
}

#[test]
fn a_table_is_kept_as_maximal_runs_whatever_pieces_and_order_it_arrives_in() {
    let owners = vec![
        RouteOwner {
            executor_id: "ex-1".into(),
            address: "http://a:1/".into(),
        },
        RouteOwner {
            executor_id: "ex-2".into(),
            address: "http://b:2".into(),
        },
    ];
    let table = |runs: &[(u32, u32, Option<u32>, u64)]| RoutingRuns {
        generation: 0,
        revision: 5,
        shard_count: 10,
        owners: owners.clone(),
        runs: runs.iter().copied().map(RouteRun::from).collect(),
        secondaries: None,
    };
    let whole = RouteTable::from_runs(&table(&[
        (0, 4, Some(0), 2),
        (4, 1, None, 1),
        (5, 5, Some(1), 3),
    ]))
    .unwrap();
    // The same table in pieces, out of order: one table.
    let pieces = RouteTable::from_runs(&table(&[
        (7, 3, Some(1), 3),
        (2, 2, Some(0), 2),
        (4, 1, None, 1),
        (0, 2, Some(0), 2),
        (5, 2, Some(1), 3),
    ]))
    .unwrap();
    assert_eq!(pieces, whole);
    assert_eq!(
        pieces.runs.len(),
        3,
        "neighbours of one owner and epoch are joined"
    );
    // A route per shard, looked up across every run boundary.
    let routes: Vec<ShardRoute> = whole.routes().collect();
    assert_eq!(routes.len(), 10);
    for (shard, route) in (0u32..).zip(&routes) {
        assert_eq!(route.shard, shard);
        assert_eq!(whole.route(shard).as_ref(), Some(route), "shard {shard}");
        let (epoch, owner) = match shard {
            0..=3 => (2, Some("http://a:1")),
            4 => (1, None),
            _ => (3, Some("http://b:2")),
        };
        assert_eq!(route.epoch, epoch, "shard {shard}");
        assert_eq!(
            route.owner.as_ref().map(|o| o.address.as_str()),
            owner,
            "shard {shard}"
        );
    }
    assert_eq!(whole.route(10), None);
    for key in ["a", "b", "c", "d", "e", "f"] {
        let shard = whole.shard_of(key.as_bytes()).unwrap();
        match (whole.target(key.as_bytes()), &routes[shard as usize].owner) {
            (Ok(target), Some(owner)) => {
                assert_eq!((target.shard, &target.address), (shard, &owner.address));
            }
            (Err(RoutingError::NoOwner { shard: at, .. }), None) => assert_eq!(at, shard),
            (other, owner) => panic!("key {key}: {other:?} against {owner:?}"),
        }
    }
    // A gap is reported after what is worse beyond it, as a table of routes reports it.
    assert_eq!(
        RouteTable::from_runs(&table(&[(0, 2, None, 0), (3, 8, None, 0)])),
        Err(TableError::OutOfRange {
            shard: 10,
            shard_count: 10
        })
    );
    assert_eq!(
        RouteTable::from_runs(&table(&[(0, 2, None, 0), (3, 7, None, 0)])),
        Err(TableError::Missing(2))
    );
}

#[test]
fn routing_runs_stand_for_the_same_table_and_malformed_runs_are_refused() {
    // Two blocks of two owners, an unowned shard, a shard being handed off, one epoch apart.
    let owners = [Some(0), Some(0), Some(0), None, Some(1), Some(1), Some(0)];
    let mut view = state(
        9,
        &[("ex-1", "http://a:1"), ("ex-2", "http://b:2")],
        &owners,
    );
    view.shards[5].handoff = Some(HandoffView {
        to: Some("ex-1".into()),
        revoke_revision: 8,
        completes_by_expiry_in_ms: 100,
    });
    view.shards[1].epoch = 7;
    let runs = runs_of(&view);
    assert_eq!(
        runs.runs,
        vec![
            RouteRun::from((0, 1, Some(0), 2)),
            RouteRun::from((1, 1, Some(0), 7)),
            RouteRun::from((2, 1, Some(0), 2)),
            RouteRun::from((3, 1, None, 1)),
            RouteRun::from((4, 1, Some(1), 2)),
            RouteRun::from((5, 1, None, 2)),
            RouteRun::from((6, 1, Some(0), 2)),
        ]
    );
    assert_eq!(runs.owners.len(), 2, "each owner is listed once");
    assert_eq!(
        RouteTable::from_runs(&runs),
        RouteTable::from_routing(&routing_of(&view))
    );
    // A block of one owner at one epoch is one run, however many shards it spans.
    let block = runs_of(&all_on(3, &[("ex-1", "http://a:1")], 0));
    assert_eq!(block.runs, vec![RouteRun::from((0, SHARDS, Some(0), 2))]);
    assert_eq!(
        serde_json::to_string(&block.runs).unwrap(),
        format!("[[0,{SHARDS},0,2]]")
    );

    let owner = || {
        vec![RouteOwner {
            executor_id: "ex-1".into(),
            address: "http://a:1".into(),
        }]
    };
    let table = |shard_count: u32, runs: &[(u32, u32, Option<u32>, u64)]| RoutingRuns {
        generation: 0,
        revision: 3,
        shard_count,
        owners: owner(),
        runs: runs.iter().copied().map(RouteRun::from).collect(),
        secondaries: None,
    };
    let cases = [
        (table(4, &[(0, 2, Some(0), 1), (2, 2, None, 0)]), None),
        (
            table(4, &[(0, 2, Some(0), 1)]),
            Some(TableError::Missing(2)),
        ),
        (
            table(4, &[(0, 3, Some(0), 1), (2, 2, None, 0)]),
            Some(TableError::Duplicate(2)),
        ),
        (
            table(4, &[(0, u32::MAX, Some(0), 1)]),
            Some(TableError::OutOfRange {
                shard: 4,
                shard_count: 4,
            }),
        ),
        (
            table(4, &[(0, 0, Some(0), 1), (0, 4, None, 0)]),
            Some(TableError::EmptyRun(0)),
        ),
        (
            table(4, &[(0, 4, Some(1), 1)]),
            Some(TableError::UnknownOwner { shard: 0, owner: 1 }),
        ),
        (
            table(MAX_SHARD_COUNT + 1, &[(0, 4, None, 0)]),
            Some(TableError::TooManyShards(MAX_SHARD_COUNT + 1)),
        ),
    ];
    for (runs, refused) in cases {
        let result = RouteTable::from_runs(&runs);
        match refused {
            None => assert!(result.is_ok(), "{runs:?}: {result:?}"),
            Some(error) => assert_eq!(result, Err(error), "{runs:?}"),
        }
    }
    let mut bad_address = table(4, &[(0, 4, Some(0), 1)]);
    bad_address.owners[0].address = "ftp://a:1".into();
    assert!(matches!(
        RouteTable::from_runs(&bad_address),
        Err(TableError::BadAddress { shard: 0, .. })
    ));
}

#[test]
fn routing_targets_follow_shard_for_key() {
    let owners: Vec<Option<usize>> = (0..SHARDS as usize)
        .map(|s| if s == 5 { None } else { Some(s % 2) })
        .collect();
    let table = RouteTable::from_state(&state(
        9,
        &[("ex-1", "http://a:1"), ("ex-2", "http://b:2")],
        &owners,
    ))
    .unwrap();
    let count = NonZeroU32::new(SHARDS).unwrap();
    for i in 0..64 {
        let key = format!("key-{i}");
        let shard = shard_for_key(key.as_bytes(), count);
        match table.target(key.as_bytes()) {
            Ok(target) => {
                assert_eq!(target.shard, shard);
                assert_eq!(target.revision, 9);
                assert_eq!(target.epoch, 2);
                let expected = ["http://a:1", "http://b:2"][owners[shard as usize].unwrap()];
                assert_eq!(target.address, expected, "{key}");
            }
            Err(RoutingError::NoOwner {
                shard: 5,
                revision: 9,
            }) => assert_eq!(shard, 5),
            Err(other) => panic!("{key}: {other}"),
        }
    }
    assert!(matches!(
        RouteTable::default().target(b"k"),
        Err(RoutingError::NotReady)
    ));
}

/// The executors of `owners`, by id, for comparing lists of them.
fn ids(owners: &[Owner]) -> Vec<&str> {
    owners.iter().map(|o| o.executor_id.as_str()).collect()
}

/// P19.5: a table keeps each shard's ready secondaries as the runs send them (lists once,
/// an index per shard), the same table as the routes and the state imply, whatever order the
/// stretches arrive in; a key's targets are ordered by [`ReadFrom`], each with its role.
#[test]
fn p19_5_a_table_keeps_each_shards_secondaries_and_orders_targets_by_read_from() {
    let executors = [
        ("ex-1", "http://a:1"),
        ("ex-2", "http://b:2"),
        ("ex-3", "http://c:3"),
    ];
    // Shards 0..4 on ex-1 with ex-2 then ex-3 as secondaries, 4..6 on ex-2 with ex-3, 6 on
    // ex-2 with none, 7 being handed off, with ex-3.
    let mut view = state(
        9,
        &executors,
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    );
    let both = with_secondaries(view.clone(), &[1, 2]).shards[0]
        .secondaries
        .clone();
    let third = with_secondaries(view.clone(), &[2]).shards[0]
        .secondaries
        .clone();
    for shard in &mut view.shards {
        shard.secondaries = match shard.shard {
            0..=3 => both.clone(),
            6 => Vec::new(),
            _ => third.clone(),
        };
    }
    view.shards[7].handoff = Some(HandoffView {
        to: Some("ex-1".into()),
        revoke_revision: 8,
        completes_by_expiry_in_ms: 100,
    });
    let runs = runs_of(&view);
    let sent = runs.secondaries.clone().expect("secondaries");
    assert_eq!(sent.lists, vec![vec![1, 2], vec![2]], "each list once");
    assert_eq!(
        serde_json::to_value(&sent.stretches).unwrap(),
        serde_json::json!([[0, [0, 0, 0, 0, 1, 1]], [7, [1]]])
    );
    let table = RouteTable::from_runs(&runs).unwrap();
    assert_eq!(
        RouteTable::from_routing(&routing_of(&view)),
        Ok(table.clone())
    );
    assert_eq!(RouteTable::from_state(&view), Ok(table.clone()));
    // The stretches in pieces and out of order, a list sent twice: one table.
    let mut pieces = runs.clone();
    pieces.secondaries = Some(RunSecondaries {
        lists: vec![vec![2], vec![1, 2], vec![1, 2]],
        stretches: vec![
            SecondaryStretch::from((7, vec![0])),
            SecondaryStretch::from((2, vec![2, 1, 0, 0])),
            SecondaryStretch::from((0, vec![1, 2])),
        ],
    });
    assert_eq!(RouteTable::from_runs(&pieces), Ok(table.clone()));

    let rows: Vec<ShardRoute> = table.routes().collect();
    for (shard, row) in (0u32..).zip(&rows) {
        let expected: &[&str] = match shard {
            0..=3 => &["ex-2", "ex-3"],
            6 => &[],
            _ => &["ex-3"],
        };
        assert_eq!(ids(&row.secondaries), expected, "shard {shard}");
        assert_eq!(ids(table.secondaries(shard)), expected, "shard {shard}");
        assert_eq!(table.route(shard).as_ref(), Some(row));
    }
    assert!(table.secondaries(8).is_empty(), "outside the table");

    let key_of = |wanted: u32| {
        (0..)
            .map(|i| format!("key-{i}"))
            .find(|key| table.shard_of(key.as_bytes()) == Some(wanted))
            .unwrap()
    };
    let order = |key: &str, read_from| {
        table.targets(key.as_bytes(), read_from).map(|targets| {
            targets
                .into_iter()
                .map(|t| (t.executor_id, t.role))
                .collect::<Vec<_>>()
        })
    };
    let (p, s) = (Role::Primary, Role::Secondary);
    let key = key_of(0);
    let owned = |list: &[(&str, Role)]| {
        Some(
            list.iter()
                .map(|(id, role)| ((*id).to_owned(), *role))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(order(&key, ReadFrom::Primary).ok(), owned(&[("ex-1", p)]));
    assert_eq!(
        order(&key, ReadFrom::PrimaryPreferred).ok(),
        owned(&[("ex-1", p), ("ex-2", s), ("ex-3", s)])
    );
    assert_eq!(
        order(&key, ReadFrom::Secondary).ok(),
        owned(&[("ex-2", s), ("ex-3", s)])
    );
    assert_eq!(
        order(&key, ReadFrom::SecondaryPreferred).ok(),
        owned(&[("ex-2", s), ("ex-3", s), ("ex-1", p)])
    );
    assert_eq!(table.target(key.as_bytes()).unwrap().role, p);
    // A shard without a ready secondary, and one between owners.
    let lone = key_of(6);
    assert!(matches!(
        order(&lone, ReadFrom::Secondary),
        Err(RoutingError::NoSecondary {
            shard: 6,
            revision: 9
        })
    ));
    assert_eq!(
        order(&lone, ReadFrom::SecondaryPreferred).ok(),
        owned(&[("ex-2", p)])
    );
    let moving = key_of(7);
    assert!(matches!(
        order(&moving, ReadFrom::Primary),
        Err(RoutingError::NoOwner { shard: 7, .. })
    ));
    assert_eq!(
        order(&moving, ReadFrom::PrimaryPreferred).ok(),
        owned(&[("ex-3", s)])
    );
}

/// P19.5: a table of one replica is the body it always was, and a retry goes to a replica
/// other than the one that failed when there is one.
#[test]
fn p19_5_runs_without_secondaries_are_unchanged_and_a_retry_goes_elsewhere() {
    let runs = runs_of(&all_on(3, &[("ex-1", "http://a:1")], 0));
    assert_eq!(runs.secondaries, None);
    assert_eq!(
        serde_json::to_string(&runs).unwrap(),
        format!(
            r#"{{"revision":3,"shard_count":{SHARDS},"owners":[{{"executor_id":"ex-1","address":"http://a:1"}}],"runs":[[0,{SHARDS},0,2]]}}"#
        )
    );
    let parsed: RoutingRuns = serde_json::from_str(&serde_json::to_string(&runs).unwrap()).unwrap();
    assert_eq!(parsed, runs);

    let target = |id: &str, role| Target {
        generation: 0,
        shard: 0,
        epoch: 1,
        executor_id: id.into(),
        address: format!("http://{id}:1"),
        revision: 1,
        role,
    };
    let targets = vec![target("s", Role::Secondary), target("p", Role::Primary)];
    let chosen = |failed| table::choose(targets.clone(), failed).unwrap().executor_id;
    assert_eq!(chosen(None), "s");
    assert_eq!(chosen(Some("s")), "p");
    assert_eq!(chosen(Some("p")), "s");
    assert_eq!(
        table::choose(vec![target("s", Role::Secondary)], Some("s"))
            .unwrap()
            .executor_id,
        "s",
        "the one replica there is, again"
    );
}

/// I6, P19.5: secondaries that are malformed are refused whole, as malformed runs are.
#[test]
fn p19_5_malformed_secondaries_are_refused() {
    let owners = vec![
        RouteOwner {
            executor_id: "ex-1".into(),
            address: "http://a:1".into(),
        },
        RouteOwner {
            executor_id: "ex-2".into(),
            address: "http://b:2".into(),
        },
    ];
    let table = |lists: Vec<Vec<u32>>, stretches: &[(u32, &[u32])]| RoutingRuns {
        generation: 0,
        revision: 3,
        shard_count: 4,
        owners: owners.clone(),
        runs: vec![RouteRun::from((0, 4, Some(0), 1))],
        secondaries: Some(RunSecondaries {
            lists,
            stretches: stretches
                .iter()
                .map(|(first, lists_of)| SecondaryStretch::from((*first, lists_of.to_vec())))
                .collect(),
        }),
    };
    assert!(RouteTable::from_runs(&table(vec![vec![1]], &[(0, &[0, 0]), (3, &[0])])).is_ok());
    let cases = [
        (table(vec![vec![1]], &[(0, &[])]), "an empty stretch"),
        (
            table(vec![vec![1]], &[(0, &[0, 0]), (1, &[0])]),
            "in two stretches",
        ),
        (
            table(vec![vec![1]], &[(3, &[0, 0])]),
            "past the shard count",
        ),
        (
            table(vec![vec![1]], &[(u32::MAX, &[0])]),
            "past the shard count",
        ),
        (table(vec![vec![1]], &[(0, &[1])]), "which the table lacks"),
        (table(vec![vec![]], &[(0, &[0])]), "not 1 to 4"),
        (table(vec![vec![1; 5]], &[(0, &[0])]), "not 1 to 4"),
        (table(vec![vec![2]], &[(0, &[0])]), "does not list"),
        (table(vec![vec![1, 1]], &[(0, &[0])]), "twice"),
    ];
    for (runs, why) in cases {
        match RouteTable::from_runs(&runs) {
            Err(TableError::BadSecondaries(detail)) => {
                assert!(detail.contains(why), "{detail:?} for {why:?}")
            }
            other => panic!("{:?}: {other:?}", runs.secondaries),
        }
    }
    let mut bad_address = table(vec![vec![1]], &[(0, &[0])]);
    bad_address.owners[1].address = "ftp://b:2".into();
    assert!(matches!(
        RouteTable::from_runs(&bad_address),
        Err(TableError::BadAddress { shard: 0, .. })
    ));
}

fn shared() -> Shared {
    Shared {
        managers: Client::new(vec!["http://127.0.0.1:1".into()]).unwrap(),
        namespace: None,
        current: RwLock::new(Current::default()),
        refresh: tokio::sync::Mutex::new(()),
        counters: Counters::default(),
    }
}

#[test]
fn routing_tables_move_only_forwards_and_an_older_reply_confirms_nothing() {
    let shared = shared();
    let executors = [("ex-1", "http://a:1"), ("ex-2", "http://b:2")];
    let at = |revision, owner| {
        RouteTable::from_state(&state(revision, &executors, &[Some(owner)])).unwrap()
    };
    assert!(shared.offer(at(5, 0)));
    let confirmed = shared.current().confirmed_at;
    assert!(confirmed.is_some());
    assert!(!shared.offer(at(4, 1)), "an older table is ignored");
    assert_eq!(shared.current().confirmed_at, confirmed);
    assert_eq!(shared.table().revision(), 5);
    assert!(
        !shared.offer(at(5, 0)),
        "the same revision is the same table"
    );
    assert!(shared.offer(at(6, 1)));
    assert_eq!(
        shared.table().route(0).unwrap().owner.unwrap().executor_id,
        "ex-2"
    );
    assert_eq!(shared.counters.tables_adopted.load(Ordering::Relaxed), 2);
}

#[test]
fn routing_watch_backoff_doubles_to_its_cap_and_resets() {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(700));
    let pauses: Vec<u128> = (0..6).map(|_| backoff.next().as_millis()).collect();
    assert_eq!(pauses, [100, 200, 400, 700, 700, 700]);
    backoff.reset();
    assert_eq!(backoff.next(), Duration::from_millis(100));
    let mut huge = Backoff::new(Duration::from_secs(1), Duration::MAX);
    for _ in 0..80 {
        huge.next();
    }
    for entropy in [0, 1, 999_999_999, u32::MAX] {
        let pause = jittered(Duration::from_millis(400), entropy);
        assert!(
            pause >= Duration::from_millis(200) && pause < Duration::from_millis(400),
            "{pause:?}"
        );
    }
    assert_eq!(jittered(Duration::ZERO, 7), Duration::ZERO);
}

#[test]
fn routing_config_refuses_unbounded_or_busy_settings() {
    let base = RoutingConfig::default();
    assert!(base.validate().is_ok());
    for bad in [
        RoutingConfig {
            watch_wait: Duration::ZERO,
            ..base.clone()
        },
        RoutingConfig {
            watch_wait: MAX_WATCH_WAIT + Duration::from_secs(1),
            ..base.clone()
        },
        RoutingConfig {
            retry_initial: Duration::ZERO,
            ..base.clone()
        },
        RoutingConfig {
            retry_max: Duration::from_millis(1),
            ..base.clone()
        },
        RoutingConfig {
            executor_timeout: Duration::ZERO,
            ..base.clone()
        },
        RoutingConfig {
            namespace: "Orders".into(),
            ..base.clone()
        },
        RoutingConfig {
            namespace: String::new(),
            ..base.clone()
        },
    ] {
        assert!(
            matches!(bad.validate(), Err(RoutingError::InvalidConfig(_))),
            "{bad:?}"
        );
    }
}

// ---- Against in-process HTTP servers: a fake manager and fake executors ----

/// A manager that serves `/v1/cluster`, `/v1/routing` and `/v1/watch` from one state the
/// test replaces. At cluster version `Some(v)` it states `v` on every reply and serves the
/// forms as runs; at `None` it is a manager of 0.1.0 (no version stated, no runs). From
/// [`NAMESPACES_SCHEMA`] it serves [`NAMESPACE`]'s table too; before it, it refuses the
/// `namespace` parameter as such managers do (`400`).
#[derive(Clone)]
struct FakeManager {
    state: Arc<Mutex<StateView>>,
    /// [`NAMESPACE`]'s state, on the same revisions as `state`.
    namespaced: Arc<Mutex<StateView>>,
    changed: Arc<tokio::sync::watch::Sender<u64>>,
    routing_calls: Arc<AtomicU64>,
    cluster_version: Option<u32>,
    /// Requests for the table or a watch in the state's form, and in runs.
    listed_replies: Arc<AtomicU64>,
    run_replies: Arc<AtomicU64>,
}

impl FakeManager {
    fn set(&self, state: StateView) {
        let revision = state.revision;
        *self.state.lock().unwrap() = state;
        self.changed.send_replace(revision);
    }

    fn set_namespaced(&self, state: StateView) {
        let revision = state.revision;
        *self.namespaced.lock().unwrap() = state;
        self.changed.send_replace(revision);
    }

    /// The state a request's `namespace` parameter names, or the refusal a manager of this
    /// version gives it.
    fn state_for(&self, query: &HashMap<String, String>) -> Result<StateView, StatusCode> {
        match query.get("namespace").map(String::as_str) {
            None | Some(DEFAULT_NAMESPACE) if self.cluster_version < Some(NAMESPACES_SCHEMA) => {
                if query.contains_key("namespace") {
                    return Err(StatusCode::BAD_REQUEST);
                }
                Ok(self.state.lock().unwrap().clone())
            }
            None | Some(DEFAULT_NAMESPACE) => Ok(self.state.lock().unwrap().clone()),
            Some(_) if self.cluster_version < Some(NAMESPACES_SCHEMA) => {
                Err(StatusCode::BAD_REQUEST)
            }
            Some(NAMESPACE) => Ok(self.namespaced.lock().unwrap().clone()),
            Some(_) => Err(StatusCode::NOT_FOUND),
        }
    }

    fn routing_calls(&self) -> u64 {
        self.routing_calls.load(Ordering::Relaxed)
    }
}

fn runs_of(state: &StateView) -> RoutingRuns {
    let table = routing_of(state);
    let mut builder = RoutingRunsBuilder::default();
    for route in &table.routes {
        let owner = match (&route.executor_id, &route.address) {
            (Some(id), Some(address)) => Some((id.as_str(), address.as_str())),
            _ => None,
        };
        let secondaries = route
            .secondaries
            .iter()
            .map(|s| (s.executor_id.as_str(), s.address.as_str()));
        builder.push(route.shard, route.epoch, owner, secondaries);
    }
    builder.finish(table.revision, table.shard_count, table.generation)
}

async fn fake_routing(
    State(manager): State<FakeManager>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    manager.routing_calls.fetch_add(1, Ordering::Relaxed);
    let state = match manager.state_for(&query) {
        Ok(state) => state,
        Err(status) => return manager.stating_version(status.into_response()),
    };
    let reply = match query.get("form").map(String::as_str) {
        None => {
            manager.listed_replies.fetch_add(1, Ordering::Relaxed);
            Json(routing_of(&state)).into_response()
        }
        Some("runs") if manager.cluster_version.is_some() => {
            manager.run_replies.fetch_add(1, Ordering::Relaxed);
            Json(RoutingAnswer::Runs(runs_of(&state))).into_response()
        }
        Some(_) => StatusCode::BAD_REQUEST.into_response(),
    };
    manager.stating_version(reply)
}

async fn fake_cluster(State(manager): State<FakeManager>) -> Response {
    let info = serde_json::json!({"node_id": 1, "term": 1, "voters": [], "learners": []});
    manager.stating_version(Json(info).into_response())
}

impl FakeManager {
    fn stating_version(&self, mut reply: Response) -> Response {
        if let Some(version) = self.cluster_version {
            reply
                .headers_mut()
                .insert(CLUSTER_VERSION_HEADER, version.to_string().parse().unwrap());
        }
        reply
    }
}

async fn fake_watch(
    State(manager): State<FakeManager>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let after: u64 = query["revision"].parse().unwrap();
    let wait_ms: u64 = query["wait"].strip_suffix("ms").unwrap().parse().unwrap();
    let mut changed = manager.changed.subscribe();
    let _ = tokio::time::timeout(
        Duration::from_millis(wait_ms),
        changed.wait_for(|&revision| revision > after),
    )
    .await;
    let state = match manager.state_for(&query) {
        Ok(state) => state,
        Err(status) => return manager.stating_version(status.into_response()),
    };
    let reply = match query.get("view").map(String::as_str) {
        None => {
            manager.listed_replies.fetch_add(1, Ordering::Relaxed);
            Json(WatchReply {
                state,
                departed: Vec::new(),
            })
            .into_response()
        }
        Some("routing") if manager.cluster_version.is_some() => {
            manager.run_replies.fetch_add(1, Ordering::Relaxed);
            Json(runs_of(&state)).into_response()
        }
        Some(_) => StatusCode::BAD_REQUEST.into_response(),
    };
    manager.stating_version(reply)
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

/// A manager of this release (cluster version [`COMPACT_SHARDS_SCHEMA`]).
async fn fake_manager(initial: StateView) -> (FakeManager, String) {
    fake_manager_at(initial, Some(COMPACT_SHARDS_SCHEMA)).await
}

async fn fake_manager_at(
    initial: StateView,
    cluster_version: Option<u32>,
) -> (FakeManager, String) {
    let (changed, _) = tokio::sync::watch::channel(initial.revision);
    let manager = FakeManager {
        namespaced: Arc::new(Mutex::new(state(initial.revision, &[], &[None; 3]))),
        state: Arc::new(Mutex::new(initial)),
        changed: Arc::new(changed),
        routing_calls: Arc::new(AtomicU64::new(0)),
        cluster_version,
        listed_replies: Arc::new(AtomicU64::new(0)),
        run_replies: Arc::new(AtomicU64::new(0)),
    };
    let url = serve(
        Router::new()
            .route("/v1/cluster", get(fake_cluster))
            .route("/v1/routing", get(fake_routing))
            .route("/v1/watch", get(fake_watch))
            .with_state(manager.clone()),
    )
    .await;
    (manager, url)
}

/// An executor that answers `PUT /work` with `status`, counting requests.
async fn fake_executor(status: StatusCode) -> (Arc<AtomicU64>, String) {
    let hits = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&hits);
    let url = serve(Router::new().route(
        "/work",
        put(move || {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                let mut problem = Problem::new(ErrorCode::Conflict, "not the owner");
                problem.status = status.as_u16();
                (status, Json(problem)).into_response()
            }
        }),
    ))
    .await;
    (hits, url)
}

fn test_config(follow: bool) -> RoutingConfig {
    RoutingConfig {
        follow,
        watch_wait: Duration::from_secs(5),
        executor_timeout: Duration::from_secs(2),
        managers: ClientConfig {
            request_timeout: Duration::from_secs(2),
            patience: Duration::from_secs(2),
            retry_interval: Duration::from_millis(50),
        },
        ..RoutingConfig::default()
    }
}

const WORK: RoutedRequest<'static> = RoutedRequest {
    method: &Method::PUT,
    path: "/work",
    body: Some(b"{}"),
};

/// Every shard on one executor.
fn all_on(revision: u64, executors: &[(&str, &str)], owner: usize) -> StateView {
    state(revision, executors, &vec![Some(owner); SHARDS as usize])
}

#[tokio::test]
async fn routing_a_421_refreshes_once_and_retries_at_the_new_owner() {
    let (old_hits, old) = fake_executor(StatusCode::MISDIRECTED_REQUEST).await;
    let (new_hits, new) = fake_executor(StatusCode::OK).await;
    let executors = [("ex-1", old.as_str()), ("ex-2", new.as_str())];
    let (manager, url) = fake_manager(all_on(10, &executors, 0)).await;
    let client = RoutingClient::connect(vec![url], test_config(false))
        .await
        .unwrap();
    assert_eq!(manager.routing_calls(), 1, "the initial load");
    // The shards move; the client does not follow, so its table is stale.
    manager.set(all_on(12, &executors, 1));

    let reply = client.send(b"k", WORK).await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.attempts, 2);
    assert_eq!(reply.target.executor_id, "ex-2");
    assert_eq!(reply.target.revision, 12);
    assert_eq!(old_hits.load(Ordering::Relaxed), 1);
    assert_eq!(new_hits.load(Ordering::Relaxed), 1);
    assert_eq!(manager.routing_calls(), 2, "exactly one refresh");
    let stats = client.stats();
    assert_eq!(
        (
            stats.misrouted,
            stats.refreshes,
            stats.retries,
            stats.revision
        ),
        (1, 1, 1, 12)
    );

    // The refreshed table now routes straight to the owner.
    let reply = client.send(b"k", WORK).await.unwrap();
    assert_eq!(reply.attempts, 1);
    assert_eq!(client.stats().misrouted, 1);
}

#[tokio::test]
async fn routing_a_second_421_goes_back_to_the_caller_after_one_refresh() {
    let (hits, refusing) = fake_executor(StatusCode::MISDIRECTED_REQUEST).await;
    let (manager, url) = fake_manager(all_on(10, &[("ex-1", refusing.as_str())], 0)).await;
    let client = RoutingClient::connect(vec![url], test_config(false))
        .await
        .unwrap();
    let error = client.send(b"k", WORK).await.unwrap_err();
    assert!(
        matches!(&error, RoutingError::Misdirected { problem: Some(p), .. } if p.detail == "not the owner"),
        "{error}"
    );
    assert!(error.definitely_not_applied());
    assert_eq!(hits.load(Ordering::Relaxed), 2, "two sends, no more");
    assert_eq!(manager.routing_calls(), 2, "one load, one refresh");
    let stats = client.stats();
    assert_eq!((stats.misrouted, stats.refreshes, stats.retries), (2, 1, 1));
}

#[tokio::test]
async fn routing_a_shard_without_owner_and_an_unreachable_owner_are_refreshed_once() {
    let (hits, live) = fake_executor(StatusCode::OK).await;
    // A port nobody listens on: connections are refused, nothing is sent.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let executors = [("ex-1", dead.as_str()), ("ex-2", live.as_str())];
    let (manager, url) = fake_manager(state(10, &executors, &vec![None; SHARDS as usize])).await;
    let client = RoutingClient::connect(vec![url], test_config(false))
        .await
        .unwrap();
    manager.set(all_on(11, &executors, 1));
    let reply = client.send(b"k", WORK).await.unwrap();
    assert_eq!((reply.status, reply.attempts), (200, 1));
    assert_eq!(manager.routing_calls(), 2);

    manager.set(all_on(12, &executors, 0));
    client.refresh().await.unwrap();
    manager.set(all_on(13, &executors, 1));
    let reply = client.send(b"k", WORK).await.unwrap();
    assert_eq!((reply.status, reply.attempts), (200, 2));
    assert_eq!(hits.load(Ordering::Relaxed), 2);
    assert_eq!(
        client.stats().misrouted,
        0,
        "refused connections are no misroutes"
    );
}

#[tokio::test]
async fn routing_an_outcome_unknown_is_not_retried() {
    let hits = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&hits);
    let slow = serve(Router::new().route(
        "/work",
        put(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                StatusCode::OK
            }
        }),
    ))
    .await;
    let (manager, url) = fake_manager(all_on(10, &[("ex-1", slow.as_str())], 0)).await;
    let config = RoutingConfig {
        executor_timeout: Duration::from_millis(300),
        ..test_config(false)
    };
    let client = RoutingClient::connect(vec![url], config).await.unwrap();
    let error = client.send(b"k", WORK).await.unwrap_err();
    assert!(
        matches!(error, RoutingError::OutcomeUnknown { .. }),
        "{error}"
    );
    assert!(!error.definitely_not_applied());
    assert_eq!(hits.load(Ordering::Relaxed), 1);
    assert_eq!(manager.routing_calls(), 1, "no refresh");
}

#[tokio::test]
async fn routing_follows_the_watch_to_each_new_table() {
    let (_, a) = fake_executor(StatusCode::OK).await;
    let (_, b) = fake_executor(StatusCode::OK).await;
    let executors = [("ex-1", a.as_str()), ("ex-2", b.as_str())];
    let (manager, url) = fake_manager(all_on(10, &executors, 0)).await;
    let client = RoutingClient::connect(vec![url], test_config(true))
        .await
        .unwrap();
    for (revision, owner) in [(11, 1), (14, 0), (15, 1)] {
        let started = client.stats().watch_started;
        manager.set(all_on(revision, &executors, owner));
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.revision() < revision {
            assert!(
                Instant::now() < deadline,
                "the table did not follow {revision}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let target = client.route(b"k").unwrap();
        assert_eq!(target.executor_id, executors[owner].0);
        // The watch outstanding when the change came, or the next one, brought it.
        assert!(client.stats().watch_replies <= started + 1);
    }
    let stats = client.stats();
    assert_eq!(stats.watch_failures, 0);
    assert_eq!(stats.refreshes, 0, "the watch alone kept the table current");
    assert_eq!(manager.routing_calls(), 1);
    assert!(stats.table_age.is_some());
}

/// The table is read and followed as runs from managers that serve them, and as routes and
/// states from managers of 0.1.0, which do not (docs/PROTOCOL.md, "Versions").
#[tokio::test]
async fn routing_reads_runs_from_clusters_that_serve_them_and_routes_from_older_ones() {
    let (_, a) = fake_executor(StatusCode::OK).await;
    let (_, b) = fake_executor(StatusCode::OK).await;
    let executors = [("ex-1", a.as_str()), ("ex-2", b.as_str())];
    for cluster_version in [None, Some(COMPACT_SHARDS_SCHEMA)] {
        let (manager, url) = fake_manager_at(all_on(10, &executors, 0), cluster_version).await;
        let client = RoutingClient::connect(vec![url], test_config(true))
            .await
            .unwrap();
        manager.set(all_on(11, &executors, 1));
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.revision() < 11 {
            assert!(
                Instant::now() < deadline,
                "{cluster_version:?}: not followed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(client.route(b"k").unwrap().executor_id, "ex-2");
        let listed = manager.listed_replies.load(Ordering::Relaxed);
        let runs = manager.run_replies.load(Ordering::Relaxed);
        match cluster_version {
            None => assert_eq!((listed >= 2, runs), (true, 0), "0.1.0"),
            Some(_) => assert_eq!((listed, runs >= 2), (0, true), "this release"),
        }
        assert_eq!(client.stats().watch_failures, 0);
    }
}

/// The namespace the fake manager serves besides `default`.
const NAMESPACE: &str = "orders";

/// A client of a namespace loads and follows that namespace's table, routing keys by its shard
/// count to its executors (PROTOCOL P18.1); a cluster that does not serve namespaces is told at
/// connect rather than answered with `default`'s table.
#[tokio::test]
async fn routing_in_a_namespace_loads_and_follows_that_namespace_only() {
    let (_, a) = fake_executor(StatusCode::OK).await;
    let (_, b) = fake_executor(StatusCode::OK).await;
    let executors = [("ex-1", a.as_str()), ("ex-2", b.as_str())];
    let (manager, url) = fake_manager_at(all_on(10, &executors, 0), Some(NAMESPACES_SCHEMA)).await;
    manager.set_namespaced(state(10, &executors, &[Some(1); 3]));
    let config = RoutingConfig {
        namespace: NAMESPACE.into(),
        ..test_config(true)
    };
    let client = RoutingClient::connect(vec![url.clone()], config.clone())
        .await
        .unwrap();
    assert_eq!(client.stats().shard_count, 3, "the namespace's shard count");
    for key in [&b"k"[..], b"a", b"user-17"] {
        let target = client.route(key).unwrap();
        assert_eq!(
            target.shard,
            shard_for_key(key, NonZeroU32::new(3).unwrap())
        );
        assert_eq!(target.executor_id, "ex-2", "the namespace's owner");
    }
    let reply = client.send(b"k", WORK).await.unwrap();
    assert_eq!(
        (reply.status, reply.target.executor_id.as_str()),
        (200, "ex-2")
    );

    // A change in the namespace is followed; `default`'s state never reaches this client.
    manager.set_namespaced(state(11, &executors, &[Some(0); 3]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.revision() < 11 {
        assert!(
            Instant::now() < deadline,
            "the namespace's table was not followed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(client.route(b"k").unwrap().executor_id, "ex-1");
    assert_eq!(client.stats().shard_count, 3);
    assert_eq!(client.stats().watch_failures, 0);

    // A namespace the cluster does not hold is the managers' 404, at connect.
    let missing = RoutingConfig {
        namespace: "billing".into(),
        ..test_config(false)
    };
    let error = RoutingClient::connect(vec![url], missing)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            RoutingError::Managers(ClientError::Unexpected { status: 404, .. })
        ),
        "{error}"
    );

    // A cluster before namespaces (0.1.0's) is never asked for a namespace's table.
    let (older, url) = fake_manager_at(all_on(10, &executors, 0), None).await;
    let error = RoutingClient::connect(vec![url], config).await.unwrap_err();
    assert!(
        matches!(&error, RoutingError::InvalidConfig(why) if why.contains("namespaces need")),
        "{error}"
    );
    assert_eq!(older.routing_calls(), 0);
}

/// A port nobody listens on: connections are refused, nothing is sent.
fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

/// P19.5: a read sent to a secondary reaches the one ready longest; a secondary that answers
/// `421` (it holds the shard no more) is handled as the primary is: one refresh, one retry,
/// at the secondary the refreshed table names.
#[tokio::test]
async fn p19_5_send_to_a_secondary_and_a_421_there_refreshes_once() {
    let (primary_hits, primary) = fake_executor(StatusCode::OK).await;
    let (gone_hits, gone) = fake_executor(StatusCode::MISDIRECTED_REQUEST).await;
    let (warm_hits, warm) = fake_executor(StatusCode::OK).await;
    let executors = [
        ("ex-1", primary.as_str()),
        ("ex-2", gone.as_str()),
        ("ex-3", warm.as_str()),
    ];
    let (manager, url) = fake_manager(with_secondaries(all_on(10, &executors, 0), &[1, 2])).await;
    let client = RoutingClient::connect(vec![url], test_config(false))
        .await
        .unwrap();
    let secondaries: Vec<String> = client
        .targets(b"k", ReadFrom::Secondary)
        .unwrap()
        .into_iter()
        .map(|t| t.executor_id)
        .collect();
    assert_eq!(secondaries, ["ex-2", "ex-3"], "ready longest first");
    // ex-2's secondary moved on; the client does not follow, so its table is stale.
    manager.set(with_secondaries(all_on(12, &executors, 0), &[2]));

    let reply = client
        .send_to(b"k", ReadFrom::Secondary, WORK)
        .await
        .unwrap();
    assert_eq!((reply.status, reply.attempts), (200, 2));
    assert_eq!(
        (reply.target.executor_id.as_str(), reply.target.role),
        ("ex-3", Role::Secondary)
    );
    assert_eq!(reply.target.revision, 12);
    let hits = |counter: &Arc<AtomicU64>| counter.load(Ordering::Relaxed);
    assert_eq!(
        (hits(&primary_hits), hits(&gone_hits), hits(&warm_hits)),
        (0, 1, 1)
    );
    assert_eq!(manager.routing_calls(), 2, "exactly one refresh");
    let stats = client.stats();
    assert_eq!((stats.misrouted, stats.refreshes, stats.retries), (1, 1, 1));

    // The primary path is unchanged beside it.
    let reply = client.send(b"k", WORK).await.unwrap();
    assert_eq!(
        (
            reply.target.executor_id.as_str(),
            reply.target.role,
            reply.attempts
        ),
        ("ex-1", Role::Primary, 1)
    );
}

/// P19.5: a secondary that refuses the connection is refreshed once; a secondary-preferred
/// read then falls back to the primary, while a secondary-only read tries the one secondary
/// there is again and goes back to the caller.
#[tokio::test]
async fn p19_5_a_dead_secondary_falls_back_to_the_primary_only_when_preferred() {
    let (primary_hits, primary) = fake_executor(StatusCode::OK).await;
    let dead = dead_address();
    let executors = [("ex-1", primary.as_str()), ("ex-2", dead.as_str())];
    // Its lease has not lapsed yet: the managers still route reads to it.
    let (manager, url) = fake_manager(with_secondaries(all_on(10, &executors, 0), &[1])).await;
    let client = RoutingClient::connect(vec![url], test_config(false))
        .await
        .unwrap();

    let reply = client
        .send_to(b"k", ReadFrom::SecondaryPreferred, WORK)
        .await
        .unwrap();
    assert_eq!((reply.status, reply.attempts), (200, 2));
    assert_eq!(
        (reply.target.executor_id.as_str(), reply.target.role),
        ("ex-1", Role::Primary)
    );
    assert_eq!(primary_hits.load(Ordering::Relaxed), 1);
    assert_eq!(manager.routing_calls(), 2, "one refresh");

    let error = client
        .send_to(b"k", ReadFrom::Secondary, WORK)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RoutingError::Unreachable { address, .. } if *address == dead),
        "{error}"
    );
    assert!(error.definitely_not_applied());
    assert_eq!(manager.routing_calls(), 3, "one refresh more");
    assert_eq!(primary_hits.load(Ordering::Relaxed), 1, "never the primary");
    assert_eq!(
        client.stats().misrouted,
        0,
        "refused connections are no misroutes"
    );
}

/// P19.5: a key without a ready secondary is refreshed once, then is `NoSecondary` for a
/// secondary-only read (nothing sent) and goes to the primary for a secondary-preferred one; a
/// secondary ready since is found by that refresh, and the watch brings the next.
#[tokio::test]
async fn p19_5_a_key_without_ready_secondaries_is_refreshed_once() {
    let (primary_hits, primary) = fake_executor(StatusCode::OK).await;
    let (secondary_hits, secondary) = fake_executor(StatusCode::OK).await;
    let (_, other) = fake_executor(StatusCode::OK).await;
    let executors = [
        ("ex-1", primary.as_str()),
        ("ex-2", secondary.as_str()),
        ("ex-3", other.as_str()),
    ];
    let (manager, url) = fake_manager(all_on(10, &executors, 0)).await;
    let client = RoutingClient::connect(vec![url.clone()], test_config(false))
        .await
        .unwrap();
    let error = client
        .send_to(b"k", ReadFrom::Secondary, WORK)
        .await
        .unwrap_err();
    assert!(
        matches!(error, RoutingError::NoSecondary { revision: 10, .. }),
        "{error}"
    );
    assert_eq!(manager.routing_calls(), 2, "one load, one refresh");
    let reply = client
        .send_to(b"k", ReadFrom::SecondaryPreferred, WORK)
        .await
        .unwrap();
    assert_eq!(
        (reply.target.executor_id.as_str(), reply.attempts),
        ("ex-1", 1)
    );
    assert_eq!(
        manager.routing_calls(),
        2,
        "a primary was there: no refresh"
    );

    manager.set(with_secondaries(all_on(11, &executors, 0), &[1]));
    let reply = client
        .send_to(b"k", ReadFrom::Secondary, WORK)
        .await
        .unwrap();
    assert_eq!(
        (reply.target.executor_id.as_str(), reply.attempts),
        ("ex-2", 1)
    );
    assert_eq!(manager.routing_calls(), 3);
    assert_eq!(primary_hits.load(Ordering::Relaxed), 1);
    assert_eq!(secondary_hits.load(Ordering::Relaxed), 1);

    // A following client: the watch's runs bring the secondaries as they change.
    let following = RoutingClient::connect(vec![url], test_config(true))
        .await
        .unwrap();
    manager.set(with_secondaries(all_on(12, &executors, 0), &[2, 1]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while following.revision() < 12 {
        assert!(Instant::now() < deadline, "the watch did not bring 12");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ids: Vec<String> = following
        .targets(b"k", ReadFrom::Secondary)
        .unwrap()
        .into_iter()
        .map(|t| t.executor_id)
        .collect();
    assert_eq!(ids, ["ex-3", "ex-2"]);
    assert_eq!(following.stats().watch_failures, 0);
}
