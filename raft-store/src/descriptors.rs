//! A shortage of file descriptors is not a disk fault (PROTOCOL P8.3, P13.6).
//!
//! A snapshot is written into sled as one large value, which sled keeps in a file of its own:
//! writing it opens a descriptor. When the process has none left (its listeners are full of a
//! stranger's connections, say), that open fails with `EMFILE`, and openraft would stop its core
//! over the error and the manager exit, as for a failed disk. Nothing is wrong with the disk,
//! and nothing was written: so before such a write the store waits until the process has
//! descriptors to spare, and a write refused for want of them is tried again once it has, with
//! an error in the log (the alarm) each time. The waits and retries of one write are bounded
//! together ([`MAX_WAIT`]): past it the error goes to openraft as any other.

use std::time::Duration;

use crate::error::StoreError;

/// Descriptors a snapshot write needs free before it starts: the blob file, and room for sled's
/// own and the process's others meanwhile.
pub(crate) const WRITE_HEADROOM: u64 = 64;

/// Longest the store waits for descriptors for one write (and retries it) before giving the
/// error to openraft.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(120);

/// How often it looks again, and how long it lets a write refused for want of descriptors
/// rest before trying it again.
pub(crate) const RECHECK: Duration = Duration::from_millis(100);

/// How many descriptors this process may still open: its limit less those open; `None` when
/// either is unknown (no `/proc`, no limit), and then nobody waits.
pub(crate) fn headroom() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft == RLIM_INFINITY {
        return None;
    }
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(soft.saturating_sub(open))
}

/// Whether `error` is the process (`EMFILE`) or the system (`ENFILE`) out of descriptors.
pub(crate) fn is_shortage(error: &StoreError) -> bool {
    let io = match error {
        StoreError::Sled(sled::Error::Io(io)) | StoreError::SnapshotFile { source: io, .. } => io,
        _ => return false,
    };
    matches!(
        io.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    )
}

/// Waits until `headroom` reports at least [`WRITE_HEADROOM`] (or cannot tell), at most
/// `max_wait`; logs an error when it has to wait. Returns whether the headroom is there.
pub(crate) async fn wait_for_headroom(
    what: &str,
    max_wait: Duration,
    mut headroom: impl FnMut() -> Option<u64>,
) -> bool {
    let started = tokio::time::Instant::now();
    let mut alarmed = false;
    loop {
        match headroom() {
            None => return true,
            Some(free) if free >= WRITE_HEADROOM => {
                if alarmed {
                    tracing::warn!(
                        what,
                        waited_ms = started.elapsed().as_millis() as u64,
                        free,
                        "descriptors free again: writing"
                    );
                }
                return true;
            }
            Some(free) => {
                if !alarmed {
                    alarmed = true;
                    tracing::error!(
                        what,
                        free,
                        needed = WRITE_HEADROOM,
                        "the process is short of file descriptors: the write waits for them \
                         (not a disk fault; P8.3, P13.6)"
                    );
                }
                if started.elapsed() >= max_wait {
                    return false;
                }
                tokio::time::sleep(RECHECK).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p8_3_out_of_descriptors_is_a_shortage_and_nothing_else_is() {
        let sled_io =
            |code| StoreError::Sled(sled::Error::Io(std::io::Error::from_raw_os_error(code)));
        let file_io = |code| StoreError::SnapshotFile {
            path: "raft-snapshot".into(),
            source: std::io::Error::from_raw_os_error(code),
        };
        let kinds: [fn(i32) -> StoreError; 2] = [sled_io, file_io];
        for io in kinds {
            assert!(is_shortage(&io(nix::libc::EMFILE)));
            assert!(is_shortage(&io(nix::libc::ENFILE)));
            assert!(!is_shortage(&io(nix::libc::EIO)));
            assert!(!is_shortage(&io(nix::libc::ENOSPC)));
        }
        assert!(!is_shortage(&StoreError::Sled(sled::Error::Unsupported(
            "x".into()
        ))));
    }

    #[test]
    fn this_process_has_headroom_to_tell() {
        assert!(headroom().is_none_or(|free| free > 0));
    }

    #[tokio::test(start_paused = true)]
    async fn p8_3_a_write_waits_for_descriptors_then_goes_on() {
        let mut readings = [Some(3), Some(10), Some(WRITE_HEADROOM)].into_iter();
        let started = tokio::time::Instant::now();
        let ready = wait_for_headroom("snapshot", MAX_WAIT, || {
            readings
                .next()
                .expect("asked again after the headroom was there")
        })
        .await;
        assert!(ready);
        assert_eq!(started.elapsed(), RECHECK * 2, "looked again twice");
    }

    #[tokio::test(start_paused = true)]
    async fn p8_3_the_wait_for_descriptors_is_bounded() {
        let started = tokio::time::Instant::now();
        let ready = wait_for_headroom("snapshot", Duration::from_secs(1), || Some(0)).await;
        assert!(!ready);
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(wait_for_headroom("snapshot", Duration::ZERO, || None).await);
    }
}
