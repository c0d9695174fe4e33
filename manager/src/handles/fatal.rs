//! A replica whose storage failed ends its process (PROTOCOL P8.3): its Raft core stopped, or
//! its disk is full (`crate::handles::disk_space`).
//!
//! openraft stops its core on any storage error (a failed write, flush or fsync of the log or the
//! state machine) and on a few other faults it cannot continue from; the process would live on
//! with a dead core, answering `/livez` and naming itself leader. Nothing clears that in place:
//! sled keeps its error, and a failed fsync must never be retried (`leasehold-raft-store`'s
//! durability), so the only way back is a restart that reads what really is on disk. From the
//! moment the core stops, or the disk is found full: `/livez` answers 503, the node names no
//! leader (its Raft state is `Shutdown`, or it steps down and stops its heartbeats); it keeps answering so for [`LINGER_AFTER_FATAL`], then stops accepting, drains
//! for at most [`DRAIN_AFTER_FATAL`], and `main` exits with [`EXIT_RAFT_STOPPED`] and one line
//! naming the cause: within a second of the core stopping. Exiting is what makes the others elect
//! at once: a refused connection tells them the leader is gone (`raft::failover`), and the
//! process is gone before their leader lease (the maximum election timeout, 1 s by default) ends.

use std::time::Duration;

use crate::handles::disk_space::DiskSpace;
use crate::raft::ManagerRaft;

/// The exit status of a manager whose storage failed: `EX_IOERR` of sysexits.h (the line on
/// stderr names the cause).
pub const EXIT_RAFT_STOPPED: u8 = 74;

/// How long the stopped replica still answers (`/livez` 503, no leader named) before it stops
/// accepting, so that whoever is watching sees why it goes.
pub const LINGER_AFTER_FATAL: Duration = Duration::from_millis(300);

/// Longest the server drains in-flight requests once the core stopped; a long poll is cut short.
pub const DRAIN_AFTER_FATAL: Duration = Duration::from_millis(500);

/// Why this replica's storage failed, once it did: its core stopped, or its disk is full.
pub fn storage_failure(raft: &ManagerRaft, disk_space: &DiskSpace) -> Option<String> {
    raft_core_failure(raft).or_else(|| disk_space.exhaustion().map(disk_full))
}

/// The cause of a full disk, as the exit line and `/livez` say it.
pub fn disk_full(free_bytes: u64) -> String {
    format!("the data directory's file system is full ({free_bytes} bytes free)")
}

/// Why the core stopped, once it did; `None` while it runs.
pub fn raft_core_failure(raft: &ManagerRaft) -> Option<String> {
    match &raft.metrics().borrow().running_state {
        Ok(()) => None,
        Err(fatal) => Some(fatal.to_string()),
    }
}

/// Resolves with the cause once the Raft core stops.
pub async fn raft_core_stopped(raft: &ManagerRaft) -> String {
    let mut metrics = raft.metrics();
    loop {
        if let Err(fatal) = &metrics.borrow_and_update().running_state {
            return format!("the Raft core stopped: {fatal}");
        }
        if metrics.changed().await.is_err() {
            return "the Raft core ended without reporting why".to_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P8.3: the exit line and `/livez` name the cause an operator acts on, and what was left.
    #[test]
    fn p8_3_a_full_disk_is_named_with_the_bytes_left() {
        let cause = disk_full(4_096);
        assert!(
            cause.contains("file system is full") && cause.contains("4096 bytes free"),
            "{cause}"
        );
    }
}
