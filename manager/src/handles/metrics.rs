//! The manager's protocol metrics (docs/OPERATIONS.md, "Metrics reference"). Names start with
//! `leasehold_` and carry their unit (`_seconds`, `_total`).
//!
//! Three sources, so each number is counted exactly once:
//! - [`CommitMetrics`]: counted from the outcomes this node commits as leader (every committed
//!   write passes [`crate::handles::signals::LeaderSignals::after_commit`]), so a rebalance or a
//!   handoff is counted once in the cluster, by the leader that committed it.
//! - [`record_state_gauges`]: gauges read from this replica's applied state when `/metrics` is
//!   scraped (executors, shards by state), so they are exact at scrape time on every replica.
//! - Counters at the place the event happens: renewals and their latency in the renew handler,
//!   deliveries in `leader/deliver.rs`, the mass-expiry guard in `leader/mod.rs`, Raft gauges in
//!   `observe.rs`, the dead-leader check in `raft/failover.rs`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use leasehold_api::metric_catalog::{AtStart, MetricKind, MetricSpec};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use crate::lease::{Command, MoveReason, Outcome, Plan, RenewResult, ShardId};
use crate::raft::LeaseStateHandle;
use leasehold_api::wire::DEFAULT_NAMESPACE;

/// Every metric the manager exports, each series from start-up (`export_from_start` in `main`):
/// docs/OPERATIONS.md's "Metrics reference" documents each, and the tests below hold the list
/// to the sources and to that table.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: "leasehold_executors",
        kind: MetricKind::Gauge,
        help: "Registered executors in the applied state, by namespace.",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_executors_lapsed",
        kind: MetricKind::Gauge,
        help: "Registered executors whose lease ran out and who are not reaped yet, by namespace.",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_shards",
        kind: MetricKind::Gauge,
        help: "Shards by namespace and state: owned, releasing (being handed off), unowned.",
        labels: &[
            ("namespace", &[DEFAULT_NAMESPACE]),
            ("state", &["owned", "releasing", "unowned"]),
        ],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_resharding",
        kind: MetricKind::Gauge,
        help: "1 while a reshard is under way in the namespace, 0 otherwise (P20.2).",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_reshard_waiting_on",
        kind: MetricKind::Gauge,
        help: "What the namespace's reshard under way waits on: handoffs in flight for a split, \
               pairs of shards not yet on one executor for a merge; 0 when none is (P20.2).",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_namespace_generation",
        kind: MetricKind::Gauge,
        help: "Each namespace's generation: raised by each split or merge (P20.1).",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_reshards_total",
        kind: MetricKind::Counter,
        help: "Reshards this leader carried out, by kind (leader; P20.2).",
        labels: &[("kind", &["split", "merge"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_state_revision",
        kind: MetricKind::Gauge,
        help: "Revision of the applied state.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_registrations_total",
        kind: MetricKind::Counter,
        help: "Registrations that created an executor (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_deregistrations_total",
        kind: MetricKind::Counter,
        help: "Deregistrations that removed an executor (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_reaped_total",
        kind: MetricKind::Counter,
        help: "Executors removed because their lease lapsed (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_renewals_total",
        kind: MetricKind::Counter,
        help: "Renew requests that reached this node as leader, by outcome.",
        labels: &[(
            "result",
            &["renewed", "unknown_executor", "refused", "failed"],
        )],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_renewal_duration_seconds",
        kind: MetricKind::Histogram,
        help: "Time from a renew request's arrival to its answer (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_renewals_through_log_total",
        kind: MetricKind::Counter,
        help: "Renewals that went through the Raft log although answering from memory was on, by why (leader, PROTOCOL P6.5).",
        labels: &[(
            "reason",
            &["unconfirmed", "unknown", "claims", "releasing", "longer_lease", "unreserved", "lapsed", "readiness", "not_enabled"],
        )],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_renewals_from_memory_total",
        kind: MetricKind::Counter,
        help: "Renewals the leader answered from its memory after a confirmation round (PROTOCOL P6.5).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_confirmation_rounds_total",
        kind: MetricKind::Counter,
        help: "Leadership confirmation rounds (a heartbeat to every voter) the leader ran for renewals waiting to be answered from memory, by result (PROTOCOL P6.5).",
        labels: &[("result", &["confirmed", "not_confirmed"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_renewal_batch_size",
        kind: MetricKind::Histogram,
        help: "Renewals carried by one Renew Raft entry (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_registration_batch_size",
        kind: MetricKind::Histogram,
        help:
            "Registrations carried by one RegisterMany Raft entry (leader, from cluster version 12).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_audit_records_dropped_total",
        kind: MetricKind::Counter,
        help: "Audit records dropped at the audit log's bound to make room for a new one (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_renewal_claims_mismatch_total",
        kind: MetricKind::Counter,
        help: "Renewals whose claims differed from the recorded set (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_rebalances_total",
        kind: MetricKind::Counter,
        help: "Committed rebalance plans (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_shard_moves_total",
        kind: MetricKind::Counter,
        help: "Shards a rebalance granted at once or began handing off (leader).",
        labels: &[("kind", &["grant", "handoff"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_shard_moves_by_reason_total",
        kind: MetricKind::Counter,
        help: "Shards a committed plan moved, by why (leader).",
        labels: &[(
            "reason",
            &[
                "balance",
                "expiry",
                "drain",
                "join",
                "deregister",
                "pin",
                "reshard",
            ],
        )],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_secondary_changes_total",
        kind: MetricKind::Counter,
        help: "Shards whose secondaries a committed plan changed, by why (leader; P19.2).",
        labels: &[("reason", &["replica", "join", "departure", "balance"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_load_imbalance_ratio",
        kind: MetricKind::Gauge,
        help: "Highest utilisation over mean utilisation of live executors, by namespace (leader).",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_hot_shards",
        kind: MetricKind::Gauge,
        help: "Shards whose own load exceeds the smallest executor's fair share, by namespace (leader).",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_balance_moves_available",
        kind: MetricKind::Gauge,
        help: "Moves for balance the per-minute budget still allows, by namespace (leader).",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_placement_by_load",
        kind: MetricKind::Gauge,
        help: "1 while the leader places by reported loads, else 0, by namespace.",
        labels: &[("namespace", &[DEFAULT_NAMESPACE])],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_handoffs_completed_total",
        kind: MetricKind::Counter,
        help: "Handoffs completed, by acknowledgement or expiry (leader).",
        labels: &[("via", &["acknowledged", "expiry"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_handoffs_cancelled_total",
        kind: MetricKind::Counter,
        help: "Handoffs a later plan cancelled (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_handoff_duration_seconds",
        kind: MetricKind::Histogram,
        help: "Leader-clock time from a handoff's start to its completion.",
        labels: &[("via", &["acknowledged", "expiry"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_delivery_failures_total",
        kind: MetricKind::Counter,
        help: "Pushes and revokes that did not reach the executor or were refused (leader).",
        labels: &[("kind", &["assignment", "revoke"])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_revokes_ignored_total",
        kind: MetricKind::Counter,
        help: "Revokes answered ignored while the handoff was still current (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_build_info",
        kind: MetricKind::Gauge,
        help: "This binary's release; always 1.",
        labels: &[("release", &[leasehold_api::RELEASE])],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_cluster_version",
        kind: MetricKind::Gauge,
        help: "The committed cluster version as this replica applied it.",
        labels: &[],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_delivery_repairs_total",
        kind: MetricKind::Counter,
        help: "Executors whose set was delivered after failed pushes (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_mass_expiry_episodes_total",
        kind: MetricKind::Counter,
        help: "Mass-expiry guard episodes begun (leader).",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_leader_clock_raised_ms",
        kind: MetricKind::Gauge,
        help: "How far above its wall clock this leader's clock took office (leader).",
        labels: &[],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_expiries_deferred_total",
        kind: MetricKind::Counter,
        help: "Leader steps in which the mass-expiry guard held reaping back.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_term",
        kind: MetricKind::Gauge,
        help: "Current Raft term.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_is_leader",
        kind: MetricKind::Gauge,
        help: "1 on the leader, 0 elsewhere.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_leader_id",
        kind: MetricKind::Gauge,
        help: "Node id of the known leader, -1 when none.",
        labels: &[],
        at_start: AtStart::Value(-1.0),
    },
    MetricSpec {
        name: "leasehold_raft_last_log_index",
        kind: MetricKind::Gauge,
        help: "Last log index on this replica.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_applied_index",
        kind: MetricKind::Gauge,
        help: "Last applied log index.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_snapshot_index",
        kind: MetricKind::Gauge,
        help: "Last log index the latest snapshot covers.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_purged_index",
        kind: MetricKind::Gauge,
        help: "Log purged up to here.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_replication_lag_entries",
        kind: MetricKind::Gauge,
        help: "Entries a follower is behind the leader's last log index (leader).",
        labels: &[("follower", &[])],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_raft_leader_silence_seconds",
        kind: MetricKind::Gauge,
        help: "On a follower, time since it last heard from its leader.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_raft_dead_leader_elections_total",
        kind: MetricKind::Counter,
        help: "Elections stood because the leader's address refused connections after its lease.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_disk_free_bytes",
        kind: MetricKind::Gauge,
        help: "Bytes free on the data directory's file system.",
        labels: &[],
        at_start: AtStart::WhenKnown,
    },
    MetricSpec {
        name: "leasehold_disk_space_alarm",
        kind: MetricKind::Gauge,
        help: "1 while free space is below --min-free-disk.",
        labels: &[],
        at_start: AtStart::Zero,
    },
    MetricSpec {
        name: "leasehold_registrations_rate_limited_total",
        kind: MetricKind::Counter,
        help: "Registrations refused 429 where they arrived, by why.",
        labels: &[("reason", &["rate", "callers", "certificate"])],
        at_start: AtStart::Zero,
    },
];

/// Buckets of `leasehold_renewal_duration_seconds`: a group commit on a healthy cluster takes a
/// few ms; anything near the lease is trouble.
const RENEWAL_SECONDS_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];
/// Buckets of `leasehold_handoff_duration_seconds`: an acknowledged handoff takes a round trip
/// and a commit; one completed on expiry takes up to a lease.
const HANDOFF_SECONDS_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Buckets of `leasehold_renewal_batch_size` (renewals per Raft entry, at most 2048) and of
/// `leasehold_registration_batch_size` (registrations per entry, at most 256).
const BATCH_SIZE_BUCKETS: [f64; 12] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
];

/// The Prometheus exporter with real histograms (not summaries) for the protocol's distributions.
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in [
        (
            "leasehold_renewal_duration_seconds",
            &RENEWAL_SECONDS_BUCKETS[..],
        ),
        (
            "leasehold_handoff_duration_seconds",
            &HANDOFF_SECONDS_BUCKETS[..],
        ),
        ("leasehold_renewal_batch_size", &BATCH_SIZE_BUCKETS[..]),
        ("leasehold_registration_batch_size", &BATCH_SIZE_BUCKETS[..]),
    ] {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)?;
    }
    Ok(builder)
}

/// Sets the gauges that describe this replica's applied state, leases judged at `now_ms`: on
/// the leader with what it told from memory (`told_from_memory`, P6.7), on a follower by the
/// longest each lease may run (P6.6).
pub fn record_state_gauges(
    state: &LeaseStateHandle,
    now_ms: u64,
    told_from_memory: Option<&crate::lease::ToldFromMemory>,
) {
    let gone = state.read(|applied| {
        let state = &applied.state;
        let mut by_namespace: BTreeMap<&str, NamespaceGauges> = state
            .namespaces()
            .map(|(name, namespace)| {
                let gauges = NamespaceGauges {
                    shards: namespace.shards().len(),
                    releasing: namespace.releasing_count(),
                    generation: namespace.generation,
                    resharding: namespace.reshard.is_some(),
                    reshard_waiting_on: namespace.reshard_waiting_on(),
                    ..NamespaceGauges::default()
                };
                (name, gauges)
            })
            .collect();
        // From the indexes, not a scan of the shard tables: a scrape costs the same at a
        // million shards as at ten. A releasing shard keeps its owner until the handoff ends.
        for executor in state.executors() {
            let Some(gauges) = by_namespace.get_mut(executor.namespace.as_str()) else {
                continue;
            };
            gauges.executors += 1;
            gauges.with_owner += executor.owned_shards.len();
            if executor.lease_ends_ms(told_from_memory) <= now_ms {
                gauges.lapsed += 1;
            }
        }
        for (namespace, gauges) in &by_namespace {
            gauges.record(namespace);
        }
        metrics::gauge!("leasehold_state_revision").set(state.revision() as f64);
        STATE_GAUGES_SET_FOR.replace(by_namespace.keys().copied())
    });
    // A deleted namespace's series read empty once, rather than as it last was.
    for namespace in gone {
        NamespaceGauges::default().record(&namespace);
    }
}

/// One namespace's state gauges (P18.1).
#[derive(Debug, Clone, Copy, Default)]
struct NamespaceGauges {
    executors: usize,
    lapsed: usize,
    shards: usize,
    with_owner: usize,
    releasing: usize,
    generation: u64,
    /// Whether a reshard is under way, and what it waits on (P20.2).
    resharding: bool,
    reshard_waiting_on: u64,
}

impl NamespaceGauges {
    fn record(&self, namespace: &str) {
        let namespace = namespace.to_owned();
        let owned = self.with_owner.saturating_sub(self.releasing);
        let unowned = self.shards.saturating_sub(self.with_owner);
        metrics::gauge!("leasehold_executors", "namespace" => namespace.clone())
            .set(self.executors as f64);
        metrics::gauge!("leasehold_executors_lapsed", "namespace" => namespace.clone())
            .set(self.lapsed as f64);
        for (state, count) in [
            ("owned", owned),
            ("releasing", self.releasing),
            ("unowned", unowned),
        ] {
            metrics::gauge!("leasehold_shards", "namespace" => namespace.clone(), "state" => state)
                .set(count as f64);
        }
        metrics::gauge!("leasehold_namespace_generation", "namespace" => namespace.clone())
            .set(self.generation as f64);
        metrics::gauge!("leasehold_resharding", "namespace" => namespace.clone())
            .set(u8::from(self.resharding));
        metrics::gauge!("leasehold_reshard_waiting_on", "namespace" => namespace.clone())
            .set(self.reshard_waiting_on as f64);
    }
}

/// The namespaces a family of per-namespace series was last set for: at most every namespace a
/// state holds ([`leasehold_api::wire::MAX_NAMESPACES`]).
struct SetFor(Mutex<std::collections::BTreeSet<String>>);

impl SetFor {
    const fn new() -> Self {
        Self(Mutex::new(std::collections::BTreeSet::new()))
    }

    /// Remembers `present` as the namespaces the series are set for now, and returns those
    /// they were set for before and are not now (deleted since), whose series the caller sets
    /// empty once.
    fn replace<'a>(&self, present: impl Iterator<Item = &'a str>) -> Vec<String> {
        let present: std::collections::BTreeSet<String> = present.map(str::to_owned).collect();
        let mut set_for = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let before = std::mem::replace(&mut *set_for, present);
        before
            .into_iter()
            .filter(|name| !set_for.contains(name))
            .collect()
    }
}

/// The namespaces the state gauges ([`record_state_gauges`]) were last set for.
static STATE_GAUGES_SET_FOR: SetFor = SetFor::new();
/// The namespaces the leader's placement gauges ([`PlacementGauges`]) were last set for.
static PLACEMENT_GAUGES_SET_FOR: SetFor = SetFor::new();

/// One namespace's placement gauges, as the leader's last step saw them (§15, P18.1).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PlacementGauges {
    pub by_load: bool,
    pub imbalance: f64,
    pub hot_shards: usize,
    pub balance_moves_available: usize,
}

impl PlacementGauges {
    /// Sets `namespace`'s series.
    pub fn record(&self, namespace: &str) {
        let label = namespace.to_owned();
        metrics::gauge!("leasehold_placement_by_load", "namespace" => label.clone())
            .set(if self.by_load { 1.0 } else { 0.0 });
        metrics::gauge!("leasehold_load_imbalance_ratio", "namespace" => label.clone())
            .set(self.imbalance);
        metrics::gauge!("leasehold_hot_shards", "namespace" => label.clone())
            .set(self.hot_shards as f64);
        metrics::gauge!("leasehold_balance_moves_available", "namespace" => label)
            .set(self.balance_moves_available as f64);
    }

    /// The placement gauges were just set for the namespaces `present`: a deleted namespace's
    /// series read empty once, rather than as they last were.
    pub fn set_for<'a>(present: impl Iterator<Item = &'a str>) {
        for namespace in PLACEMENT_GAUGES_SET_FOR.replace(present) {
            Self::default().record(&namespace);
        }
    }
}

/// Counters and the handoff-duration histogram, from the outcomes this node commits as leader.
#[derive(Debug, Default)]
pub struct CommitMetrics {
    /// Shards a deregistration left unowned, until a plan places them: their moves are counted
    /// as made for the deregistration. Bounded by the shard count.
    freed_by_deregistration: Mutex<std::collections::BTreeSet<ShardId>>,
    /// Leader-clock ms at which each shard's current handoff was committed by this leader. Keyed
    /// by shard, so bounded by the shard count; a handoff begun under an earlier leader has no
    /// entry and its duration is not recorded (that leader's clock is not this one's, P2.3).
    handoff_started_ms: Mutex<BTreeMap<ShardId, u64>>,
}

impl CommitMetrics {
    /// A new term starts with no handoff start times.
    pub fn reset_for_new_term(&self) {
        self.started().clear();
        self.freed().clear();
    }

    fn freed(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<ShardId>> {
        self.freed_by_deregistration
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts the moves of a plan this node committed and applied as leader, by reason
    /// (`leasehold_shard_moves_by_reason_total`, §15). A cancelled handoff moves nothing.
    pub fn count_plan(&self, plan: &Plan) {
        if let Command::PlaceSecondaries { .. } = &plan.command {
            for reason in &plan.reasons {
                metrics::counter!("leasehold_secondary_changes_total", "reason" => reason.as_str())
                    .increment(1);
            }
            return;
        }
        let Command::Rebalance { moves, .. } = &plan.command else {
            return;
        };
        let mut freed = self.freed();
        for (step, reason) in moves.iter().zip(&plan.reasons) {
            let label = match reason {
                MoveReason::Departure if freed.remove(&step.shard) => "deregister",
                MoveReason::Departure => "expiry",
                MoveReason::Cancel => continue,
                other => other.as_str(),
            };
            metrics::counter!("leasehold_shard_moves_by_reason_total", "reason" => label)
                .increment(1);
        }
    }

    fn started(&self) -> std::sync::MutexGuard<'_, BTreeMap<ShardId, u64>> {
        self.handoff_started_ms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn handoffs_completed(&self, now_ms: u64, shards: &[ShardId], via: &'static str) {
        if shards.is_empty() {
            return;
        }
        metrics::counter!("leasehold_handoffs_completed_total", "via" => via)
            .increment(shards.len() as u64);
        let mut started = self.started();
        for shard in shards {
            if let Some(started_ms) = started.remove(shard) {
                metrics::histogram!("leasehold_handoff_duration_seconds", "via" => via)
                    .record(now_ms.saturating_sub(started_ms) as f64 / 1000.0);
            }
        }
    }

    /// Counts what `outcome`, committed by this node as leader at leader-clock `now_ms`, did.
    pub fn observe(&self, now_ms: u64, outcome: &Outcome) {
        match outcome {
            Outcome::Registered {
                already_registered: false,
                ..
            } => metrics::counter!("leasehold_registrations_total").increment(1),
            Outcome::RegisteredMany { results } => {
                let registered = results.iter().filter(|result| result.is_new()).count();
                metrics::counter!("leasehold_registrations_total").increment(registered as u64);
            }
            Outcome::Deregistered {
                already_gone: false,
                freed,
                ..
            } => {
                metrics::counter!("leasehold_deregistrations_total").increment(1);
                self.freed().extend(freed.iter().copied());
            }
            Outcome::Reaped { reaped, .. } if !reaped.is_empty() => {
                metrics::counter!("leasehold_reaped_total").increment(reaped.len() as u64)
            }
            Outcome::Rebalanced {
                granted,
                releasing,
                cancelled,
                ..
            } => {
                metrics::counter!("leasehold_rebalances_total").increment(1);
                metrics::counter!("leasehold_shard_moves_total", "kind" => "grant")
                    .increment(granted.len() as u64);
                metrics::counter!("leasehold_shard_moves_total", "kind" => "handoff")
                    .increment(releasing.len() as u64);
                metrics::counter!("leasehold_handoffs_cancelled_total")
                    .increment(cancelled.len() as u64);
                let mut started = self.started();
                for shard in releasing {
                    started.insert(*shard, now_ms);
                }
                for shard in cancelled {
                    started.remove(shard);
                }
            }
            Outcome::Released { completed, .. } => {
                self.handoffs_completed(now_ms, completed, "acknowledged")
            }
            Outcome::Renewed { results, .. } => {
                let acknowledged: Vec<ShardId> = results
                    .iter()
                    .filter_map(|result| match result {
                        RenewResult::Renewed { acknowledged, .. } => Some(acknowledged),
                        RenewResult::UnknownExecutor { .. } => None,
                    })
                    .flatten()
                    .copied()
                    .collect();
                self.handoffs_completed(now_ms, &acknowledged, "acknowledged");
            }
            Outcome::HandoffsCompleted { completed, .. } => {
                self.handoffs_completed(now_ms, completed, "expiry")
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use leasehold_api::metric_catalog::{
        documented_metrics, export_from_start, metric_names_in_source,
    };

    use super::*;

    /// The metrics this process writes from code outside this crate (`leasehold_api::process`).
    const WRITTEN_ELSEWHERE: &[&str] = &["leasehold_build_info"];

    fn sources(dir: &Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.extend(metric_names_in_source(
                    &std::fs::read_to_string(&path).unwrap(),
                ));
            }
        }
    }

    /// Every metric the manager's sources write is listed, and nothing else is.
    #[test]
    fn the_list_is_what_the_sources_write() {
        let mut written = BTreeSet::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut written,
        );
        written.extend(WRITTEN_ELSEWHERE.iter().map(|name| (*name).to_owned()));
        let listed: BTreeSet<String> = METRICS.iter().map(|m| m.name.to_owned()).collect();
        assert_eq!(listed, written);
    }

    /// docs/OPERATIONS.md's table documents each metric of the list with its kind, its labels
    /// and, where it lists them, their values.
    #[test]
    fn the_list_is_the_metrics_reference() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/OPERATIONS.md");
        let documented = documented_metrics(&std::fs::read_to_string(path).unwrap(), "### Manager");
        let documented_names: BTreeSet<&str> = documented.iter().map(|d| d.name.as_str()).collect();
        let listed_names: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
        assert_eq!(documented_names, listed_names);
        for doc in &documented {
            let spec = METRICS.iter().find(|m| m.name == doc.name).unwrap();
            assert_eq!(doc.kind, spec.kind.as_str(), "{}", doc.name);
            let labels: Vec<&str> = spec.labels.iter().map(|(label, _)| *label).collect();
            let documented_labels: Vec<&str> = doc.labels.iter().map(|(l, _)| l.as_str()).collect();
            assert_eq!(documented_labels, labels, "{}", doc.name);
            for ((_, values), (label, spec_values)) in doc.labels.iter().zip(spec.labels) {
                if !values.is_empty() {
                    assert_eq!(values, spec_values, "{} {label}", doc.name);
                }
            }
        }
    }

    /// From start-up, a scrape shows every metric of the list at its start value, each labelled
    /// series too, but those known only later, which it does not show at all.
    #[test]
    fn every_metric_is_exported_from_start_up() {
        let recorder = prometheus_builder().unwrap().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || export_from_start(METRICS));
        let scrape = handle.render();
        for spec in METRICS {
            let value = match spec.at_start {
                AtStart::Zero => "0".to_owned(),
                AtStart::Value(value) => value.to_string(),
                AtStart::WhenKnown => {
                    let shown = scrape
                        .lines()
                        .any(|l| l.starts_with(spec.name) && !l.starts_with('#'));
                    assert!(!shown, "{} is shown before it is known", spec.name);
                    continue;
                }
            };
            for series in spec.series() {
                let labels: Vec<String> = series
                    .iter()
                    .map(|(label, value)| format!("{label}=\"{value}\""))
                    .collect();
                let name = match spec.kind {
                    MetricKind::Histogram => format!("{}_count", spec.name),
                    _ => spec.name.to_owned(),
                };
                let line = if labels.is_empty() {
                    format!("{name} {value}")
                } else {
                    format!("{name}{{{}}} {value}", labels.join(","))
                };
                assert!(
                    scrape.lines().any(|l| l == line),
                    "{line} missing from:\n{scrape}"
                );
            }
            let help = format!("# HELP {} ", spec.name);
            assert!(scrape.contains(&help), "{}", spec.name);
        }
    }
}
