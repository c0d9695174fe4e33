//! The free-space alarm (PROTOCOL P8.3), as etcd's NOSPACE: below `--min-free-disk` on the data
//! directory's file system, a manager refuses the writes that grow the state (registrations,
//! plans: [`crate::lease::Command::grows_state`]) with `507 insufficient_storage`, and keeps the
//! rest working (renewals, releases, deregistrations, reaping, reads), so the executors it serves
//! keep their leases while an operator frees space. The alarm clears by itself when space
//! returns. The writes that still run grow the log only until the next snapshot, which replaces
//! it (P2.5); the floor is there so that they, and that snapshot, still fit.
//!
//! Below [`EXHAUSTED_BELOW_BYTES`] the disk is full whatever the floor: the next write fails, and
//! sled may already have failed one it reports later. The replica then ends as on a failed write
//! (P8.3, `crate::handles::fatal`) rather than wait for one: a leader that cannot write must make way at
//! once, and only its exit tells the others to elect without waiting out a second timeout.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How often the free space is measured: one `statvfs`, nothing more. Short, because a full
/// disk ends the replica and the others elect only once it is gone.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Less than one sled segment (512 KiB) free: the disk is full.
pub const EXHAUSTED_BELOW_BYTES: u64 = 512 * 1024;

/// Free space before the first measurement: none is known to be missing.
const NOT_MEASURED: u64 = u64::MAX;

/// The alarm, shared by the task that measures and the proposer that refuses growth.
#[derive(Debug, Clone)]
pub struct DiskSpace {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    min_free_bytes: u64,
    free_bytes: AtomicU64,
    /// The free bytes of the first measurement below [`EXHAUSTED_BELOW_BYTES`].
    exhausted: watch::Sender<Option<u64>>,
}

/// The alarm is raised: free space is below the floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the manager's data directory has {free_bytes} bytes free, below --min-free-disk \
     ({min_free_bytes} bytes): writes that grow the state wait until space is freed"
)]
pub struct LowDisk {
    pub free_bytes: u64,
    pub min_free_bytes: u64,
}

/// What one measurement changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Raised,
    Cleared,
    Unchanged,
}

impl DiskSpace {
    /// An alarm at `min_free_bytes`; 0 never raises it.
    pub fn new(min_free_bytes: u64) -> Self {
        Self {
            inner: Arc::new(Inner {
                min_free_bytes,
                free_bytes: AtomicU64::new(NOT_MEASURED),
                exhausted: watch::Sender::new(None),
            }),
        }
    }

    pub fn min_free_bytes(&self) -> u64 {
        self.inner.min_free_bytes
    }

    /// The last measurement; `None` before the first.
    pub fn free_bytes(&self) -> Option<u64> {
        let free = self.inner.free_bytes.load(Ordering::Acquire);
        (free != NOT_MEASURED).then_some(free)
    }

    /// Takes a measurement and says whether it raised or cleared the alarm.
    pub fn record(&self, free_bytes: u64) -> Transition {
        let before = self.inner.free_bytes.swap(free_bytes, Ordering::AcqRel);
        if free_bytes < EXHAUSTED_BELOW_BYTES {
            self.inner.exhausted.send_if_modified(|first| {
                first.is_none() && {
                    *first = Some(free_bytes);
                    true
                }
            });
        }
        let min = self.inner.min_free_bytes;
        match (before < min, free_bytes < min) {
            (false, true) => Transition::Raised,
            (true, false) => Transition::Cleared,
            _ => Transition::Unchanged,
        }
    }

    /// Whether a measurement found the disk full (below [`EXHAUSTED_BELOW_BYTES`]); the replica
    /// is ending then.
    pub fn is_exhausted(&self) -> bool {
        self.exhaustion().is_some()
    }

    /// The free bytes of the measurement that found the disk full, once one did.
    pub fn exhaustion(&self) -> Option<u64> {
        *self.inner.exhausted.borrow()
    }

    /// Resolves with the free bytes measured once the disk is found full.
    pub async fn exhausted(&self) -> u64 {
        let mut exhausted = self.inner.exhausted.subscribe();
        let free_bytes = match exhausted.wait_for(Option::is_some).await {
            Ok(free) => *free,
            // The sender lives in `self`, so it cannot be gone while this waits.
            Err(_) => None,
        };
        free_bytes.unwrap_or(0)
    }

    /// `Err` while the alarm is raised.
    pub fn check_growth(&self) -> Result<(), LowDisk> {
        let free_bytes = self.inner.free_bytes.load(Ordering::Acquire);
        if free_bytes < self.inner.min_free_bytes {
            Err(LowDisk {
                free_bytes,
                min_free_bytes: self.inner.min_free_bytes,
            })
        } else {
            Ok(())
        }
    }
}

/// Bytes an unprivileged process may still write on the file system holding `path`.
pub fn measure_free_bytes(path: &Path) -> std::io::Result<u64> {
    let stats = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    Ok(stats
        .blocks_available()
        .saturating_mul(stats.fragment_size()))
}

/// Failures to measure are logged once per run of them: a data directory that cannot be
/// measured would otherwise log a warning every [`CHECK_INTERVAL`].
#[derive(Debug, Default)]
struct FailuresLogged {
    logged: bool,
}

impl FailuresLogged {
    /// Whether this failure is the first of its run, the one to log.
    fn first_of_run(&mut self) -> bool {
        !std::mem::replace(&mut self.logged, true)
    }

    /// A measurement succeeded: the next failure begins a new run.
    fn measured(&mut self) {
        self.logged = false;
    }
}

/// Measures the data directory's free space every [`CHECK_INTERVAL`] until `shutdown`: sets
/// `leasehold_disk_free_bytes` and `leasehold_disk_space_alarm`, and logs each raise and clear.
pub async fn watch(data_dir: PathBuf, space: DiskSpace, mut shutdown: watch::Receiver<bool>) {
    let mut failures = FailuresLogged::default();
    loop {
        let measured = {
            let data_dir = data_dir.clone();
            tokio::task::spawn_blocking(move || measure_free_bytes(&data_dir)).await
        };
        match measured {
            Ok(Ok(free_bytes)) => {
                failures.measured();
                metrics::gauge!("leasehold_disk_free_bytes").set(free_bytes as f64);
                match space.record(free_bytes) {
                    Transition::Raised => tracing::error!(
                        free_bytes,
                        min_free_bytes = space.min_free_bytes(),
                        "disk space alarm raised: registrations and plans are refused (507) until space is freed"
                    ),
                    Transition::Cleared => tracing::info!(
                        free_bytes,
                        min_free_bytes = space.min_free_bytes(),
                        "disk space alarm cleared"
                    ),
                    Transition::Unchanged => {}
                }
                metrics::gauge!("leasehold_disk_space_alarm")
                    .set(f64::from(u8::from(space.check_growth().is_err())));
            }
            Ok(Err(error)) if failures.first_of_run() => {
                tracing::warn!(%error, path = %data_dir.display(), "cannot measure the data directory's free space");
            }
            Ok(Err(_)) => {}
            Err(join) => tracing::warn!(error = %join, "measuring free space"),
        }
        tokio::select! {
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P8.3: the alarm raises below the floor, refuses growth while raised, and clears by itself.
    #[test]
    fn p8_3_the_alarm_raises_below_the_floor_and_clears_when_space_returns() {
        let space = DiskSpace::new(100);
        assert_eq!(space.check_growth(), Ok(()), "nothing measured yet");
        assert_eq!(space.record(150), Transition::Unchanged);
        assert_eq!(space.check_growth(), Ok(()));
        assert_eq!(space.record(99), Transition::Raised);
        assert_eq!(
            space.check_growth(),
            Err(LowDisk {
                free_bytes: 99,
                min_free_bytes: 100
            })
        );
        assert_eq!(space.record(10), Transition::Unchanged);
        assert!(space.check_growth().is_err());
        assert_eq!(space.record(100), Transition::Cleared);
        assert_eq!(space.check_growth(), Ok(()));
        // At the floor is above it: falling from there raises the alarm.
        assert_eq!(space.record(99), Transition::Raised);
    }

    /// A data directory that cannot be measured is warned of once per run of failures.
    #[test]
    fn measurement_failures_are_logged_once_a_run() {
        let mut failures = FailuresLogged::default();
        assert!(failures.first_of_run());
        assert!(!failures.first_of_run());
        assert!(!failures.first_of_run());
        failures.measured();
        assert!(failures.first_of_run());
    }

    /// P8.3: a full disk is reported once, whatever the floor, and stays reported.
    #[tokio::test]
    async fn p8_3_a_full_disk_is_reported_even_with_the_alarm_off() {
        let space = DiskSpace::new(0);
        space.record(EXHAUSTED_BELOW_BYTES);
        assert!(!space.is_exhausted());
        space.record(EXHAUSTED_BELOW_BYTES - 1);
        space.record(0);
        assert!(space.is_exhausted());
        assert_eq!(space.exhausted().await, EXHAUSTED_BELOW_BYTES - 1);
        space.record(u64::MAX - 1);
        assert!(
            space.is_exhausted(),
            "the replica is ending; space returning changes nothing"
        );
    }

    /// A disk with less than one sled segment (512 KiB) free is full.
    #[test]
    fn p8_3_full_means_less_than_one_sled_segment_free() {
        let space = DiskSpace::new(0);
        space.record(512 * 1024);
        assert!(!space.is_exhausted());
        space.record(511 * 1024);
        assert_eq!(space.exhaustion(), Some(511 * 1024));
    }

    #[test]
    fn a_floor_of_zero_never_raises() {
        let space = DiskSpace::new(0);
        assert_eq!(space.record(0), Transition::Unchanged);
        assert_eq!(space.check_growth(), Ok(()));
    }

    #[test]
    fn the_data_directorys_file_system_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        assert!(measure_free_bytes(dir.path()).unwrap() > 0);
        assert!(measure_free_bytes(&dir.path().join("missing")).is_err());
    }
}
