//! Replies of the inspection, routing, administration, health and watch routes.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::executor::DEFAULT_CAPACITY;
use super::labels::Labels;
use super::namespaces::{is_default_namespace, DEFAULT_NAMESPACE};
use super::shards::ShardEpoch;

// ---- Inspection views (`GET /v1/state`, `/v1/executors`, `/v1/shards`, `/v1/routing`) ----
// Replies, so unknown fields are tolerated: a newer server may add some.

/// One executor as the manager records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ExecutorView {
    pub executor_id: String,
    pub incarnation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub address: String,
    /// Time left on the lease by the answering manager's clock (P3.1: time remaining, never an
    /// absolute time). Zero once lapsed. The leader answers with the lease as it judges it
    /// (P6.7); a follower, which does not see renewals answered from the leader's memory (P6.8),
    /// with the longest it may run (its told expiry or its reservation, P6.6).
    pub lease_remaining_ms: u64,
    /// The log index at which it registered.
    pub registered_revision: u64,
    /// The set the executor is told it holds (owned shards not being released).
    pub shards: Vec<ShardEpoch>,
    /// Marked draining by an operator: it gets no new shards and its shards are being moved to
    /// others through the normal handoff. Absent from older servers, hence the default.
    #[serde(default)]
    pub draining: bool,
    /// Its capacity (PROTOCOL P15.1), the weight the planner gives it. Absent from servers
    /// of 0.1.0, where every executor counts as [`DEFAULT_CAPACITY`].
    #[serde(default = "default_capacity")]
    pub capacity: u32,
    /// The application version it registered with (PROTOCOL P17.3); absent when it stated none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    /// Its labels (PROTOCOL P18.3); absent when it stated none.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    #[cfg_attr(feature = "utoipa", schema(value_type = std::collections::BTreeMap<String, String>))]
    pub labels: Labels,
    /// The load it carries (PROTOCOL P15.1): the sum of the smoothed loads its shards were
    /// reported with. Only the leader knows loads, so only a reply the leader served (or a
    /// `?consistent=true` read) has it; absent while nothing is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// `load ÷ capacity`, what placement balances (P15.2); present with `load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilisation: Option<f64>,
    /// The namespace it registered into (PROTOCOL P18.1). Absent from servers before
    /// namespaces, and for `default`.
    #[serde(
        default = "default_namespace",
        skip_serializing_if = "is_default_namespace"
    )]
    pub namespace: String,
}

fn default_namespace() -> String {
    DEFAULT_NAMESPACE.to_owned()
}

/// Serde's default for a capacity a reply leaves out.
fn default_capacity() -> u32 {
    DEFAULT_CAPACITY
}

/// A shard being handed from its owner to another executor (P5.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HandoffView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Revision of the revoke the old owner must acknowledge.
    pub revoke_revision: u64,
    /// Time until the old owner's last grant that included the shard expires (then the handoff
    /// completes without an acknowledgement).
    pub completes_by_expiry_in_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ShardView {
    pub shard: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffView>,
    /// Its smoothed load as last reported by its holder (PROTOCOL P15.1); only in replies the
    /// leader served, and only once some holder reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// Its own load exceeds the fair share of the smallest executor (P15.4): it is placed where
    /// it fits best and not moved back and forth. Only in replies the leader served.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hot: bool,
    /// The executor an operator pinned it to (PROTOCOL P17.4): the planner keeps it there, or
    /// moves it there, while that executor is live and not draining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_to: Option<String>,
    /// Its secondaries (PROTOCOL P19.1), in the order they were placed; absent in a namespace
    /// of one replica. Its `owner` is its primary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<SecondaryView>,
}

/// One secondary of a shard (PROTOCOL P19.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SecondaryView {
    /// The executor holding it; once lost, the one that held it.
    pub executor_id: String,
    /// Its executor said it is ready to be promoted (P19.3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    /// How long ago its executor left (P19.4): it waits out the namespace's restore delay for an
    /// executor of the same name before it is placed elsewhere. Absent while its executor holds
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_for_ms: Option<u64>,
}

/// `GET /v1/state`: everything, read at one revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct StateView {
    pub revision: u64,
    /// Zero before the cluster's configuration is written.
    pub shard_count: u32,
    /// The namespace's generation (PROTOCOL P20.1); absent (0) until it first reshards.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    pub lease_duration_ms: u64,
    pub executors: Vec<ExecutorView>,
    pub shards: Vec<ShardView>,
    /// Maintenance mode is on (PROTOCOL P17.4): placement frozen but for shards nobody holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maintenance: bool,
    /// A follower answered: each executor's `lease_remaining_ms` is then not its lease but the
    /// longest the lease may run as the log records it (PROTOCOL P6.6): its told expiry or,
    /// when later, the reservation the leader committed for the renewals it answers from
    /// memory (P6.8), up to three leases ahead, about twice the lease. A follower does not see
    /// those renewals; the leader's answer (`?consistent=true`) is the lease as it judges it
    /// (P6.7). Absent from the leader's answers, and from servers before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lease_remaining_is_bound: bool,
}

/// Where to send work for one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Route {
    pub shard: u32,
    /// Absent while the shard is unowned or between owners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub epoch: u64,
    /// Its ready secondaries on live executors (PROTOCOL P19.5), ready longest first: where
    /// secondary work (reads the service allows from a secondary) may go. Absent in a namespace
    /// of one replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<SecondaryRoute>,
}

/// A ready secondary in a [`Route`] (PROTOCOL P19.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SecondaryRoute {
    pub executor_id: String,
    pub address: String,
}

/// `GET /v1/routing`: the whole table; `?key=K` answers with one [`Route`] plus the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RoutingTable {
    pub revision: u64,
    pub shard_count: u32,
    /// The namespace's generation (PROTOCOL P20.3); absent (0) until it first reshards.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    pub routes: Vec<Route>,
}

/// Consecutive shards routed alike: shards `first..first + count`, each at `epoch`, sent to
/// `owners[owner]` of their [`RoutingRuns`], or to nobody (`null`) while unowned or being handed
/// off. Encoded as a JSON array `[first, count, owner, epoch]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "(u32, u32, Option<u32>, u64)",
    into = "(u32, u32, Option<u32>, u64)"
)]
pub struct RouteRun {
    /// The run's lowest shard.
    pub first: u32,
    /// How many consecutive shards it spans; at least 1.
    pub count: u32,
    /// Index of the owner in [`RoutingRuns::owners`]; `None` for no route.
    pub owner: Option<u32>,
    /// The epoch of every shard in it.
    pub epoch: u64,
}

impl From<(u32, u32, Option<u32>, u64)> for RouteRun {
    fn from((first, count, owner, epoch): (u32, u32, Option<u32>, u64)) -> Self {
        Self {
            first,
            count,
            owner,
            epoch,
        }
    }
}

impl From<RouteRun> for (u32, u32, Option<u32>, u64) {
    fn from(run: RouteRun) -> Self {
        (run.first, run.count, run.owner, run.epoch)
    }
}

/// An executor some [`RouteRun`] sends work to, or a secondary of some shard (P19.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteOwner {
    pub executor_id: String,
    pub address: String,
}

/// The routing table as runs (`GET /v1/routing?form=runs`, `GET /v1/watch?view=routing`): the
/// same routes as [`RoutingTable`], each owner named once and each stretch of consecutive shards
/// with one owner and one epoch sent as one [`RouteRun`]. A fleet's shards are placed in blocks,
/// so a million-shard table is a few runs per executor (about a megabyte) instead of a route per
/// shard (about 75 MB). Asked for only of managers stating cluster version
/// [`COMPACT_SHARDS_SCHEMA`] or later (docs/PROTOCOL.md, "Versions").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RoutingRuns {
    pub revision: u64,
    pub shard_count: u32,
    /// The namespace's generation (PROTOCOL P20.3); absent (0) until it first reshards.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    /// Every executor a run or a list of secondaries routes to, once.
    pub owners: Vec<RouteOwner>,
    /// Ascending, disjoint, together covering `0..shard_count`.
    #[cfg_attr(feature = "utoipa", schema(value_type = Vec<Vec<u64>>))]
    pub runs: Vec<RouteRun>,
    /// The shards' ready secondaries on live executors (PROTOCOL P19.5), where secondary work
    /// may go, each an executor of `owners`. Absent when no shard has one, so the table of a
    /// namespace of one replica is the body it always was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondaries: Option<RunSecondaries>,
}

/// The ready secondaries of a [`RoutingRuns`] (PROTOCOL P19.5): each distinct list of them
/// once, and for each stretch of consecutive shards with ready secondaries the list of each
/// shard. A namespace spreads each executor's primaries' secondaries over the others (P19.2),
/// so consecutive shards seldom share a list and runs of one list would cost a run per shard;
/// an index per shard costs a few bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RunSecondaries {
    /// Each distinct list of secondaries, as indexes into [`RoutingRuns::owners`], ready longest
    /// first; one to four executors each (`MAX_REPLICAS - 1`), none twice.
    pub lists: Vec<Vec<u32>>,
    /// Ascending and disjoint, inside `0..shard_count`; a shard no stretch covers has no ready
    /// secondary.
    #[cfg_attr(feature = "utoipa", schema(schema_with = stretches_schema))]
    pub stretches: Vec<SecondaryStretch>,
}

/// [`RunSecondaries::stretches`] in the OpenAPI document: each stretch an array of two items, a
/// shard and a non-empty array of list indexes.
#[cfg(feature = "utoipa")]
fn stretches_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ArrayItems, ObjectBuilder, Schema, Type};
    let index = || {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .maximum(Some(u32::MAX))
    };
    let lists_of = ArrayBuilder::new().items(index()).min_items(Some(1));
    let stretch = ArrayBuilder::new()
        .prefix_items([
            Schema::Object(index().build()),
            Schema::Array(lists_of.build()),
        ])
        .items(ArrayItems::False)
        .min_items(Some(2))
        .max_items(Some(2));
    ArrayBuilder::new()
        .items(stretch)
        .description(Some(
            "Stretches `[first, [l0, l1, ...]]`: shard `first + i` has the secondaries \
             `lists[li]`; ascending and disjoint, inside `0..shard_count`. A shard no stretch \
             covers has no ready secondary.",
        ))
        .build()
}

/// Consecutive shards with ready secondaries: shard `first + i` has the secondaries
/// `lists[lists_of[i]]` of its [`RunSecondaries`]. Encoded as a JSON array
/// `[first, [list, ...]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u32, Vec<u32>)", into = "(u32, Vec<u32>)")]
pub struct SecondaryStretch {
    /// The stretch's lowest shard.
    pub first: u32,
    /// For each shard from `first` on, the index of its list in [`RunSecondaries::lists`]; at
    /// least one.
    pub lists_of: Vec<u32>,
}

impl From<(u32, Vec<u32>)> for SecondaryStretch {
    fn from((first, lists_of): (u32, Vec<u32>)) -> Self {
        Self { first, lists_of }
    }
}

impl From<SecondaryStretch> for (u32, Vec<u32>) {
    fn from(stretch: SecondaryStretch) -> Self {
        (stretch.first, stretch.lists_of)
    }
}

impl RoutingRuns {
    /// The runs of `routes`, given in shard order as `(shard, epoch, owner)` with the owner as
    /// `(executor_id, address)`: each maximal stretch of consecutive shards with one owner and
    /// one epoch becomes one run. No secondaries ([`RoutingRunsBuilder`] takes them).
    pub fn collect<'a>(
        revision: u64,
        shard_count: u32,
        generation: u64,
        routes: impl IntoIterator<Item = (u32, u64, Option<(&'a str, &'a str)>)>,
    ) -> Self {
        let mut builder = RoutingRunsBuilder::default();
        for (shard, epoch, owner) in routes {
            builder.push(shard, epoch, owner, []);
        }
        builder.finish(revision, shard_count, generation)
    }
}

/// Builds a [`RoutingRuns`] from routes given in ascending shard order, each executor named
/// once, in the order first met (a shard's primary before its secondaries): each maximal
/// stretch of consecutive shards with one owner and one epoch becomes one run, each distinct
/// list of secondaries one list, and each maximal stretch of consecutive shards with
/// secondaries one [`SecondaryStretch`]. Two tables routing alike so come out equal.
#[derive(Debug, Default)]
pub struct RoutingRunsBuilder<'a> {
    owner_index: HashMap<&'a str, u32>,
    owners: Vec<RouteOwner>,
    runs: Vec<RouteRun>,
    /// Consecutive shards mostly have one owner: its index is looked up once per stretch.
    last_owner: Option<(&'a str, u32)>,
    list_index: HashMap<Vec<u32>, u32>,
    secondaries: RunSecondaries,
}

impl<'a> RoutingRunsBuilder<'a> {
    /// The route of `shard`, the one after the last pushed: its `epoch`, its `owner` as
    /// `(executor_id, address)` (`None` for no route) and its ready `secondaries`, ready longest
    /// first, each as `(executor_id, address)`.
    pub fn push(
        &mut self,
        shard: u32,
        epoch: u64,
        owner: Option<(&'a str, &'a str)>,
        secondaries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        let owner = owner.map(|(executor_id, address)| match self.last_owner {
            Some((last_id, index)) if last_id == executor_id => index,
            _ => {
                let index = self.owner(executor_id, address);
                self.last_owner = Some((executor_id, index));
                index
            }
        });
        match self.runs.last_mut() {
            Some(run)
                if run.owner == owner
                    && run.epoch == epoch
                    && u64::from(run.first) + u64::from(run.count) == u64::from(shard) =>
            {
                run.count += 1;
            }
            _ => self.runs.push(RouteRun {
                first: shard,
                count: 1,
                owner,
                epoch,
            }),
        }
        let list: Vec<u32> = secondaries
            .into_iter()
            .map(|(executor_id, address)| self.owner(executor_id, address))
            .collect();
        if list.is_empty() {
            return;
        }
        let next = u32::try_from(self.secondaries.lists.len()).unwrap_or(u32::MAX);
        let index = match self.list_index.get(&list) {
            Some(index) => *index,
            None => {
                self.secondaries.lists.push(list.clone());
                self.list_index.insert(list, next);
                next
            }
        };
        match self.secondaries.stretches.last_mut() {
            Some(stretch)
                if u64::from(stretch.first) + stretch.lists_of.len() as u64 == u64::from(shard) =>
            {
                stretch.lists_of.push(index);
            }
            _ => self.secondaries.stretches.push(SecondaryStretch {
                first: shard,
                lists_of: vec![index],
            }),
        }
    }

    /// The index of `executor_id` in the owners, listed now if it is not yet.
    fn owner(&mut self, executor_id: &'a str, address: &'a str) -> u32 {
        *self.owner_index.entry(executor_id).or_insert_with(|| {
            self.owners.push(RouteOwner {
                executor_id: executor_id.to_owned(),
                address: address.to_owned(),
            });
            // At most five replicas per shard, and shards are u32.
            u32::try_from(self.owners.len() - 1).unwrap_or(u32::MAX)
        })
    }

    /// The table at `revision` of `shard_count` shards in the layout of `generation`; its
    /// `secondaries` absent when no shard pushed had one.
    pub fn finish(self, revision: u64, shard_count: u32, generation: u64) -> RoutingRuns {
        RoutingRuns {
            revision,
            shard_count,
            generation,
            owners: self.owners,
            runs: self.runs,
            secondaries: (!self.secondaries.stretches.is_empty()).then_some(self.secondaries),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct KeyRoute {
    pub key: String,
    pub revision: u64,
    /// The namespace's generation (PROTOCOL P20.3), and the shard count the key was mapped
    /// with; both absent until the namespace first reshards.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_count: Option<u32>,
    #[serde(flatten)]
    pub route: Route,
}

/// Reply to `POST /v1/executors/{id}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReleaseReply {
    /// Shards whose handoff this acknowledgement completed.
    pub completed: Vec<u32>,
    /// Shards whose handoff was not current (already done, cancelled, or never revoked): nothing
    /// changed for them.
    pub ignored: Vec<u32>,
}

/// `GET /v1/routing`: the whole table, or with `?key=K` the key's route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum RoutingAnswer {
    /// `?key=K`.
    Key(KeyRoute),
    /// No key.
    Table(RoutingTable),
    /// No key, `?form=runs`.
    Runs(RoutingRuns),
}

/// Reply to `POST /v1/cluster/init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct InitReply {
    /// The cluster is formed.
    pub initialized: bool,
    /// This call formed it (false: it was formed already).
    pub formed_now: bool,
}

/// Reply to `POST /v1/cluster/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SnapshotReply {
    /// Last log index the node's snapshot covers now.
    pub snapshot_index: Option<u64>,
    /// Log purged up to here (inclusive), if ever.
    pub purged_index: Option<u64>,
}

/// `GET /livez`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Liveness {
    /// Always `ok`: the process answers.
    pub status: String,
}

/// `GET /readyz`: `200` when every check passes, `503` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// Every check passed.
    pub ready: bool,
    /// Each check, with `?verbose`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<ReadinessCheck>>,
}

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReadinessCheck {
    /// What is checked (`leader`, `applied`, `running`, `lease_config`).
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was observed.
    pub detail: String,
}

/// Why an executor left the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DepartureReason {
    /// It deregistered (graceful stop, P3.7).
    Deregistered,
    /// Its lease lapsed and the leader reaped it (P3.8).
    Reaped,
}

/// A recently removed executor (the manager keeps a bounded record of them, P7.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DepartedExecutor {
    pub executor_id: String,
    pub incarnation: String,
    pub reason: DepartureReason,
    /// The revision (log index) at which it was removed.
    pub removed_revision: u64,
}

/// Longest `wait` one `GET /v1/watch` may ask for; the manager refuses a longer one (400) rather
/// than shorten it silently.
pub const MAX_WATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// `GET /v1/watch?revision=N&wait=30s`: a blocking query. Answers as soon as the state's revision
/// is above `N`, or with the unchanged state when the wait runs out (then `state.revision <= N`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WatchReply {
    /// The whole state at its current revision.
    pub state: StateView,
    /// Executors removed after revision `N`, ascending by id, so a watcher can tell a deregister
    /// from an expiry.
    pub departed: Vec<DepartedExecutor>,
}

/// What `GET /v1/watch` answers: the state (the default), or with `view=routing` only the
/// routing table, as runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum WatchAnswer {
    State(WatchReply),
    Routing(RoutingRuns),
}

/// `GET /v1/executors/{id}/safe-to-stop` and `GET /v1/cluster/nodes/{id}/safe-to-stop`
/// (PROTOCOL P17.4): whether stopping it now would leave a shard without a place to go (an
/// executor) or the voters without a caught-up majority (a manager), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SafeToStop {
    /// Stopping it now leaves every shard a place to go, or the voters a caught-up majority.
    pub safe: bool,
    /// Why, in one sentence for an operator.
    pub reason: String,
}

/// The executors of `executors` that could take the shards of `executor_id` were it to stop:
/// others that are live and not draining (P5.4 gives shards only to those).
pub fn possible_takers<'a>(
    executor_id: &'a str,
    executors: &'a [ExecutorView],
) -> impl Iterator<Item = &'a ExecutorView> + 'a {
    executors.iter().filter(move |executor| {
        executor.executor_id != executor_id && !executor.draining && executor.lease_remaining_ms > 0
    })
}

/// The application version a rollout among `executors` (one namespace's) goes to, if one is
/// under way (PROTOCOL P17.3): the newest version among those that take shards (live, not
/// draining) when they run more than one. As the answering manager sees leases: the leader's
/// planner judges them itself.
pub fn rollout_among(executors: &[ExecutorView]) -> Option<&str> {
    super::rollout_version(
        executors
            .iter()
            .filter(|executor| !executor.draining && executor.lease_remaining_ms > 0)
            .map(|executor| executor.app_version.as_deref()),
    )
}

/// `GET /v1/plan` (PROTOCOL P17.4): the plan the leader would commit next, made by the same
/// planner on its applied state with what its last step knew of loads, budget and cooling
/// shards, and not committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PlanPreview {
    /// The revision the plan was made on.
    pub revision: u64,
    /// The moves, at most 8 192; empty when nothing would move.
    pub moves: Vec<PlannedMove>,
    /// The plan was cut at 8 192 moves: more follow in the next plans.
    pub capped: bool,
    /// A rollout is under way (PROTOCOL P17.3): the newest application version among the
    /// executors that take shards, which run more than one. Only shards that must move do, and
    /// only onto executors of this version; balance and joiners wait. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_to: Option<String>,
}

/// One move of the next plan (`GET /v1/plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PlannedMove {
    pub shard: u32,
    /// Its owner now; absent for a shard nobody owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The executor it would be handed to (its owner, for `cancel`).
    pub to: String,
    /// Why: `balance`, `expiry`, `drain`, `join`, `departure` (its owner left) or `cancel` (a
    /// handoff called off).
    pub reason: String,
}
