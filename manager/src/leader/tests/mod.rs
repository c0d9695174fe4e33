//! The leader loop's unit tests too large to sit in their module's file.

mod core;
mod delivery_plan;
mod delivery_round;
mod placement;
mod term;

use std::ops::Range;

use crate::handles::load_reports::ReportedLoads;
use crate::lease::{Command, LeaseState, Move, Outcome, Renewal, ShardId};

/// A renewal's report of `load` on each of `shards` (P15.1).
pub(super) fn uniform_report(shards: Range<ShardId>, load: f64) -> ReportedLoads {
    ReportedLoads::PerShard {
        measured: shards.clone().collect(),
        loads: shards
            .map(|shard| leasehold_api::wire::ShardLoad { shard, load })
            .collect(),
    }
}

/// A lease state driven by commands at consecutive log indexes, as Raft would apply them.
pub(super) struct World {
    pub(super) state: LeaseState,
    next_index: u64,
}

impl World {
    /// An initialised state with `shard_count` shards and a lease of `lease_ms`.
    pub(super) fn new(shard_count: u32, lease_ms: u64) -> Self {
        let mut world = Self {
            state: LeaseState::default(),
            next_index: 1,
        };
        world.apply(Command::Init {
            now_ms: 0,
            shard_count,
            lease_duration_ms: lease_ms,
        });
        world
    }

    pub(super) fn apply(&mut self, command: Command) -> Outcome {
        let outcome = self.state.apply(self.next_index, &command);
        self.next_index += 1;
        outcome
    }

    pub(super) fn register(&mut self, name: &str, now_ms: u64) -> String {
        self.register_with_capacity(name, now_ms, crate::lease::DEFAULT_CAPACITY)
    }

    /// Creates namespace `namespace` with `shard_count` shards (P18.1).
    pub(super) fn create_namespace(&mut self, namespace: &str, shard_count: u32) {
        let outcome = self.apply(crate::lease::tests::create_namespace_command(
            namespace,
            shard_count,
            30_000,
            None,
        ));
        assert!(
            matches!(outcome, Outcome::NamespaceCreated { .. }),
            "{outcome:?}"
        );
    }

    /// Commits a plan of `namespace` at `now_ms` moving each of `shards` to `to` (P18.1).
    pub(super) fn move_in(
        &mut self,
        namespace: &str,
        shards: Range<ShardId>,
        to: &str,
        now_ms: u64,
    ) -> Outcome {
        let plan = Command::Rebalance {
            now_ms,
            planned_at: self.state.revision(),
            namespace: namespace.into(),
            moves: shards
                .map(|shard| Move {
                    shard,
                    to: to.to_owned(),
                })
                .collect(),
        };
        self.apply(plan)
    }

    /// A world (`default`: 4 shards, `lease_ms`) whose namespace `kv` (8 shards) is split 4 and
    /// 4 between its executors `a` and `b`, returned with their ids.
    pub(super) fn kv_split_between_two(lease_ms: u64) -> (Self, String, String) {
        let mut world = Self::new(4, lease_ms);
        world.create_namespace("kv", 8);
        let a = world.register_in("a", "kv", 0);
        let b = world.register_in("b", "kv", 0);
        world.move_in("kv", 0..4, &a, 0);
        world.move_in("kv", 4..8, &b, 0);
        (world, a, b)
    }

    /// Registers an executor into `namespace` (P18.1).
    pub(super) fn register_in(&mut self, name: &str, namespace: &str, now_ms: u64) -> String {
        match self.apply(Command::Register {
            follows_generations: false,
            namespace: namespace.into(),
            now_ms,
            incarnation: name.to_string(),
            address: format!("http://{name}:1"),
            name: None,
            credential_sha256: None,
            capacity: crate::lease::DEFAULT_CAPACITY,
            app_version: None,
            labels: Default::default(),
        }) {
            Outcome::Registered { grant, .. } => grant.executor_id,
            other => panic!("register into {namespace}: {other:?}"),
        }
    }

    /// Registers an executor with a placement capacity (P15.1).
    pub(super) fn register_with_capacity(
        &mut self,
        name: &str,
        now_ms: u64,
        capacity: u32,
    ) -> String {
        match self.apply(Command::Register {
            follows_generations: false,
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            now_ms,
            incarnation: name.to_string(),
            address: format!("http://{name}:1"),
            name: None,
            credential_sha256: None,
            capacity,
            app_version: None,
            labels: Default::default(),
        }) {
            Outcome::Registered { grant, .. } => grant.executor_id,
            other => panic!("register: {other:?}"),
        }
    }

    pub(super) fn renew(&mut self, executor_id: &str, now_ms: u64) {
        let revision = self.state.revision();
        self.apply(Command::Renew {
            now_ms,
            renewals: vec![Renewal {
                executor_id: executor_id.to_string(),
                claims: Vec::new(),
                revision,
                ready: Vec::new(),
            }],
        });
    }
}
