//! A namespace as the planner sees it (P18.1).

use super::*;

/// One namespace as the planner sees it (P18.1): its shards, pins and handoffs, and only its
/// executors, with the state-wide revision and maintenance mode. Cheap to copy; every read goes
/// to the state it borrows.
#[derive(Debug, Clone, Copy)]
pub struct Space<'a> {
    pub(super) state: &'a LeaseState,
    pub(super) name: &'a str,
    pub(super) namespace: &'a Namespace,
    /// The label its executors must carry to take shards, once [`Space::placing_at`] found
    /// its preference in force (P18.4); `None` otherwise.
    pub(super) preferred: Option<(&'a str, &'a str)>,
}

impl<'a> Space<'a> {
    /// This namespace as a plan at `now_ms` sees it (P18.4): with its preference (`prefer
    /// key=value`) in force while an executor carrying that label takes shards (live, not
    /// draining), so only such executors take its shards and every other one hands its shards
    /// on as a draining one does; with no such executor, as if it had no preference.
    pub fn placing_at(self, now_ms: u64) -> Self {
        let preferred = self
            .namespace
            .placement
            .prefer
            .as_ref()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .filter(|&label| {
                self.executors().any(|executor| {
                    crate::lease::takes_shards(executor, now_ms) && carries(executor, label)
                })
            });
        Self { preferred, ..self }
    }

    /// Whether `executor` is passed over for the executors its preference names, in force
    /// ([`Space::placing_at`]).
    pub fn passed_over(&self, executor: &Executor) -> bool {
        self.preferred
            .is_some_and(|label| !carries(executor, label))
    }

    /// Whether `executor` takes part in this plan's placement: live and not draining
    /// ([`crate::lease::takes_shards`]), and not passed over (P18.4).
    pub fn takes_shards(&self, executor: &Executor, now_ms: u64) -> bool {
        crate::lease::takes_shards(executor, now_ms) && !self.passed_over(executor)
    }

    /// Whether a live `executor` hands its shards on: it is draining, or passed over (P18.4).
    pub fn hands_on(&self, executor: &Executor, now_ms: u64) -> bool {
        !executor.lease_lapsed(now_ms) && (executor.draining || self.passed_over(executor))
    }

    /// Its name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The namespace itself.
    pub fn namespace(&self) -> &'a Namespace {
        self.namespace
    }

    /// Its configuration (shard count, lease).
    pub fn config(&self) -> Option<&'a ClusterConfig> {
        Some(&self.namespace.config)
    }

    /// Log index of the last entry that changed anything in the state (§1).
    pub fn revision(&self) -> u64 {
        self.state.revision
    }

    /// Maintenance mode, which concerns every namespace (P17.4).
    pub fn maintenance(&self) -> bool {
        self.state.maintenance
    }

    /// Its executors, ascending by id.
    pub fn executors(&self) -> impl Iterator<Item = &'a Executor> + 'a {
        self.state.executors_in(self.name)
    }

    /// One of its executors; `None` for an executor of another namespace.
    pub fn executor(&self, executor_id: &str) -> Option<&'a Executor> {
        self.state
            .executors
            .get(executor_id)
            .filter(|executor| executor.namespace == self.name)
    }

    /// Its shard table, index = shard number.
    pub fn shards(&self) -> &'a Vector<Shard> {
        &self.namespace.shards
    }

    /// One of its shards, if `shard < shard_count`.
    pub fn shard(&self, shard: ShardId) -> Option<&'a Shard> {
        self.namespace.shard(shard)
    }

    /// The executor its `shard` is pinned to, if any.
    pub fn pin(&self, shard: ShardId) -> Option<&'a str> {
        self.namespace.pin(shard)
    }

    /// Its pins, ascending by shard.
    pub fn pins(&self) -> impl Iterator<Item = (ShardId, &'a str)> + 'a {
        self.namespace.pins()
    }

    /// Its shards releasing from their owners (P5.2), ascending, with their handoffs.
    pub fn releasing(&self) -> impl Iterator<Item = (&'a Shard, &'a Handoff)> + 'a {
        self.namespace.releasing()
    }

    /// Whether its executor `executor_id` holds a shard not releasing from it
    /// ([`LeaseState::has_delivered`]); false for an executor of another namespace.
    pub fn has_delivered(&self, executor_id: &str) -> bool {
        self.executor(executor_id).is_some() && self.state.has_delivered(executor_id)
    }
}

/// Whether `executor` states the label `(key, value)` (P18.3).
fn carries(executor: &Executor, (key, value): (&str, &str)) -> bool {
    executor.labels.get(key).map(String::as_str) == Some(value)
}
