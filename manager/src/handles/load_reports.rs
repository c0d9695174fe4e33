//! The loads executors report in their renewals (PROTOCOL P15.1), as this node received them:
//! soft state, never replicated. The renew handler records each executor's latest report after
//! its renewal committed (only the leader serves renewals, so only the leader's is current); the
//! leader's load tracker reads them. A new leader starts empty and relearns every executor's
//! report within one renewal period.
//!
//! Bounded: one entry per executor, replaced by its next report and removed when it leaves.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold_api::wire::ShardLoad;

pub use crate::lease::load_summary::ReportedLoads;
use crate::lease::{ExecutorId, ShardId};

/// One executor's latest report.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// Counts reports received by this node, across executors, from 1: a reader that keeps the
    /// last number it took in can tell a new report from one it already counted (smoothing
    /// takes each report once).
    pub sequence: u64,
    /// What the report said.
    pub loads: ReportedLoads,
}

/// The latest report of every executor that renewed here. Cheap to clone; every clone shares
/// the same reports.
#[derive(Debug, Clone, Default)]
pub struct LoadReports {
    inner: Arc<Mutex<Reports>>,
}

#[derive(Debug, Default)]
struct Reports {
    latest: BTreeMap<ExecutorId, LoadReport>,
    /// The sequence number of the last report recorded.
    last_sequence: u64,
}

impl LoadReports {
    fn lock(&self) -> MutexGuard<'_, Reports> {
        // Every section leaves the map whole before anything can panic (it only inserts and
        // removes), so a poisoned lock still guards valid reports.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn store(&self, executor_id: &str, loads: ReportedLoads) {
        let mut reports = self.lock();
        reports.last_sequence += 1;
        let report = LoadReport {
            sequence: reports.last_sequence,
            loads,
        };
        reports.latest.insert(executor_id.to_owned(), report);
    }

    /// Records `executor_id`'s renewal that carried `loads` for the `measured` shards,
    /// replacing its previous report.
    pub fn record(&self, executor_id: &str, measured: Vec<ShardId>, loads: Vec<ShardLoad>) {
        self.store(executor_id, ReportedLoads::PerShard { measured, loads });
    }

    /// Records `executor_id`'s renewal that carried no loads, replacing its previous report.
    pub fn record_not_reporting(&self, executor_id: &str) {
        self.store(executor_id, ReportedLoads::NotReporting);
    }

    /// Forgets `executor_id` (it deregistered or is no longer known).
    pub fn remove(&self, executor_id: &str) {
        self.lock().latest.remove(executor_id);
    }

    /// Keeps only the executors `keep` says yes to, e.g. those still in the applied state after
    /// a reap.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.lock()
            .latest
            .retain(|executor_id, _| keep(executor_id));
    }

    /// Forgets every report: what a node does when it leaves office, since a renewal's report
    /// reaches only the leader of the moment.
    pub fn clear(&self) {
        self.lock().latest.clear();
    }

    /// A copy of every executor's latest report, by executor id.
    pub fn latest(&self) -> BTreeMap<ExecutorId, LoadReport> {
        self.lock().latest.clone()
    }

    /// The reports newer than `sequence` (each executor's latest), so a reader that remembers
    /// the last sequence it took copies each report once.
    pub fn since(&self, sequence: u64) -> Vec<(ExecutorId, LoadReport)> {
        self.lock()
            .latest
            .iter()
            .filter(|(_, report)| report.sequence > sequence)
            .map(|(executor_id, report)| (executor_id.clone(), report.clone()))
            .collect()
    }
}

/// What the leader concluded from the reports at its last step: every shard's smoothed load and
/// the summary (utilisation per executor, imbalance, hot shards), for `/v1/executors`,
/// `/v1/shards` and the metrics. Empty on a node that is not leading: loads reach only the
/// leader, so a follower has nothing to show (a `?consistent=true` read is answered by the
/// leader).
#[derive(Debug, Clone, Default)]
pub struct PublishedLoads {
    inner: Arc<std::sync::RwLock<Option<Arc<LoadPicture>>>>,
}

/// One step's conclusions (see [`PublishedLoads`]), per namespace (P18.1).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadPicture {
    pub spaces: BTreeMap<String, SpaceLoads>,
}

impl LoadPicture {
    /// What the step concluded of `namespace`.
    pub fn space(&self, namespace: &str) -> Option<&SpaceLoads> {
        self.spaces.get(namespace)
    }
}

/// One namespace's conclusions of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceLoads {
    /// Smoothed load per shard, index = shard number.
    pub shard_loads: Vec<f64>,
    pub summary: crate::lease::load_summary::LoadSummary,
    /// What the step's plan went by (loads, budget, cooling shards), for the plan preview
    /// (`GET /v1/plan`, P17.4).
    pub placement_inputs: Arc<crate::lease::PlacementInputs>,
}

impl PublishedLoads {
    /// Replaces the picture (the leader, every step).
    pub fn publish(&self, picture: LoadPicture) {
        *self.inner.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(picture));
    }

    /// Forgets the picture (a node leaving office).
    pub fn withdraw(&self) {
        *self.inner.write().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The latest picture, if this node is leading.
    pub fn latest(&self) -> Option<Arc<LoadPicture>> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(entries: &[(u32, f64)]) -> Vec<ShardId> {
        entries.iter().map(|&(shard, _)| shard).collect()
    }

    fn loads(entries: &[(u32, f64)]) -> Vec<ShardLoad> {
        entries
            .iter()
            .map(|&(shard, load)| ShardLoad { shard, load })
            .collect()
    }

    /// P15.1: the latest report per executor, one entry each however often it reports, and
    /// "reports nothing" kept apart from "reports zeros".
    #[test]
    fn p15_1_the_latest_report_replaces_the_previous_one() {
        let reports = LoadReports::default();
        reports.record(
            "ex-1",
            shards(&[(0, 5.0), (3, 1.5)]),
            loads(&[(0, 5.0), (3, 1.5)]),
        );
        reports.record_not_reporting("ex-2");
        reports.record("ex-3", shards(&[(1, 0.0)]), loads(&[(1, 0.0)]));
        reports.record("ex-1", shards(&[(3, 2.0)]), loads(&[(3, 2.0)]));

        let latest = reports.latest();
        assert_eq!(latest.len(), 3, "one entry per executor: {latest:?}");
        assert_eq!(
            latest["ex-1"],
            LoadReport {
                sequence: 4,
                loads: ReportedLoads::PerShard {
                    measured: vec![3],
                    loads: loads(&[(3, 2.0)]),
                },
            }
        );
        assert_eq!(latest["ex-2"].loads, ReportedLoads::NotReporting);
        assert_eq!(
            latest["ex-3"].loads,
            ReportedLoads::PerShard {
                measured: vec![1],
                loads: loads(&[(1, 0.0)]),
            },
            "a report of zeros is a report"
        );

        reports.record_not_reporting("ex-1");
        let latest = reports.latest();
        assert_eq!(latest.len(), 3);
        assert_eq!(
            latest["ex-1"],
            LoadReport {
                sequence: 5,
                loads: ReportedLoads::NotReporting,
            },
            "an executor that stops reporting is shown as not reporting"
        );
    }

    /// Each report gets a new number, so a reader tells a new report from one it has seen even
    /// when the loads are the same.
    #[test]
    fn a_repeated_report_is_a_new_report() {
        let reports = LoadReports::default();
        reports.record("ex-1", shards(&[(0, 1.0)]), loads(&[(0, 1.0)]));
        let first = reports.latest()["ex-1"].sequence;
        reports.record("ex-1", shards(&[(0, 1.0)]), loads(&[(0, 1.0)]));
        let second = reports.latest()["ex-1"].sequence;
        assert!(second > first, "{first} then {second}");
    }

    #[test]
    fn departed_executors_are_forgotten() {
        let reports = LoadReports::default();
        for executor_id in ["ex-1", "ex-2", "ex-3", "ex-4"] {
            reports.record(executor_id, shards(&[(0, 1.0)]), loads(&[(0, 1.0)]));
        }
        reports.remove("ex-2");
        reports.remove("ex-unknown");
        reports.retain(|executor_id| executor_id != "ex-3");
        let ids: Vec<ExecutorId> = reports.latest().into_keys().collect();
        assert_eq!(ids, ["ex-1", "ex-4"]);
        reports.clear();
        assert!(reports.latest().is_empty());
    }

    /// Every clone is the same reports: the handler records into the node's, the tracker reads
    /// them.
    #[test]
    fn clones_share_the_reports() {
        let reports = LoadReports::default();
        let handler = reports.clone();
        handler.record("ex-1", shards(&[(2, 3.0)]), loads(&[(2, 3.0)]));
        assert_eq!(reports.latest().len(), 1);
    }
}
