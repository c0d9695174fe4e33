//! What each member said about its release and the schemas it can apply (PROTOCOL P14.3), as
//! the last probe round of `cluster_version` heard it, and the pure rule for when the cluster
//! version may rise.

use std::collections::BTreeMap;
use std::sync::Mutex;

use leasehold_api::wire::{FIRST_RELEASE, FIRST_RELEASE_SCHEMA};

use crate::lease::schema::NEWEST_SCHEMA;
use crate::raft::identity::IdentityReport;
use crate::raft::NodeId;

/// What a member said about itself in the last probe round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberVersion {
    pub release: String,
    pub newest_schema: u32,
}

impl MemberVersion {
    /// This process.
    pub fn own() -> Self {
        Self {
            release: leasehold_api::RELEASE.to_owned(),
            newest_schema: NEWEST_SCHEMA,
        }
    }

    /// From a member's identity report: a report without them is from 0.1.0.
    pub fn of(report: &IdentityReport) -> Self {
        Self {
            release: report
                .release
                .clone()
                .unwrap_or_else(|| FIRST_RELEASE.to_owned()),
            newest_schema: report
                .schemas
                .map_or(FIRST_RELEASE_SCHEMA, |schemas| schemas.newest),
        }
    }
}

/// The answers of the last probe round; a member that did not answer in it is absent, so a
/// member replaced by an older binary is never counted at its old version.
#[derive(Debug, Default)]
pub struct MemberVersions {
    last_round: Mutex<BTreeMap<NodeId, MemberVersion>>,
}

impl MemberVersions {
    pub fn get(&self, node_id: NodeId) -> Option<MemberVersion> {
        self.lock().get(&node_id).cloned()
    }

    pub(crate) fn replace(&self, round: BTreeMap<NodeId, MemberVersion>) {
        *self.lock() = round;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, MemberVersion>> {
        self.last_round
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The cluster version to propose, given the committed one and the newest schema each member
/// (every voter and learner) can apply, `None` for a member that did not answer: the lowest of
/// them, if every member answered and it is above the committed version. Never lowers it.
pub fn cluster_version_to_propose(
    committed: u32,
    members: impl IntoIterator<Item = Option<u32>>,
) -> Option<u32> {
    let mut lowest: Option<u32> = None;
    for member in members {
        let newest = member?;
        lowest = Some(lowest.map_or(newest, |lowest| lowest.min(newest)));
    }
    lowest.filter(|&lowest| lowest > committed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raised_to_the_lowest_member_only_when_every_member_answered() {
        // P14.3: one member of 0.1.0 (schema 2) holds the cluster at 2.
        assert_eq!(
            cluster_version_to_propose(2, [Some(3), Some(2), Some(3)]),
            None
        );
        // The last one upgraded: raised.
        assert_eq!(
            cluster_version_to_propose(2, [Some(3), Some(3), Some(3)]),
            Some(3)
        );
        // A member not heard from (down, partitioned, mid-restart) might be older: wait.
        assert_eq!(
            cluster_version_to_propose(2, [Some(3), None, Some(3)]),
            None
        );
        // Members of different newer releases: the lowest, never past what one can apply.
        assert_eq!(
            cluster_version_to_propose(2, [Some(4), Some(3), Some(5)]),
            Some(3)
        );
        // Never lowered, never repeated.
        assert_eq!(cluster_version_to_propose(3, [Some(3), Some(3)]), None);
        assert_eq!(cluster_version_to_propose(4, [Some(3), Some(3)]), None);
        // No members known yet: nothing to raise to.
        assert_eq!(cluster_version_to_propose(2, []), None);
    }

    #[test]
    fn a_member_that_reports_no_version_is_0_1_0() {
        let report = IdentityReport {
            node_id: 2,
            storage_id: "s".into(),
            initialized: true,
            pins: BTreeMap::new(),
            release: None,
            schemas: None,
            last_log: None,
            lease_silence_ms: None,
        };
        assert_eq!(
            MemberVersion::of(&report),
            MemberVersion {
                release: "0.1.0".into(),
                newest_schema: 2
            }
        );
    }
}
