//! The one way this crate makes writes durable: a sled flush (an fsync) that is never retried
//! once it failed.
//!
//! After a failed fsync the kernel may already have dropped the dirty pages it could not write,
//! and marked them clean, so a second fsync can report success for data that never reached the
//! disk (PostgreSQL's "fsyncgate", 2018). A replica that acknowledged such an entry would have
//! voted or committed on a promise its disk does not keep. So the first failure is kept for
//! good: every later flush, and every append waiting for one, fails with it, the Raft core stops
//! on that error, and the manager ends the process (PROTOCOL P8.3). Only a restart, which reads
//! back what really is on disk, clears it.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// A fault-injection seam for tests: the `fail_nth_flush`-th flush (1-based) fails as an fsync
/// returning EIO would, without reaching sled; a later one would reach sled again and succeed,
/// as a real disk's next fsync may. `None` in production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushFaults {
    pub fail_nth_flush: Option<u64>,
}

/// Flushes one `sled::Db` and remembers its first failure. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Durability {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: sled::Db,
    faults: FlushFaults,
    flushes_started: AtomicU64,
    first_failure: OnceLock<String>,
}

impl Durability {
    pub(crate) fn new(db: &sled::Db, faults: FlushFaults) -> Self {
        Self {
            inner: Arc::new(Inner {
                db: db.clone(),
                faults,
                flushes_started: AtomicU64::new(0),
                first_failure: OnceLock::new(),
            }),
        }
    }

    /// Makes every write issued so far durable. sled's `flush` is a blocking fsync, so it runs
    /// on tokio's blocking pool.
    pub(crate) async fn flush(&self) -> sled::Result<usize> {
        if let Some(failure) = self.failure() {
            return Err(sled::Error::Io(io::Error::other(failure)));
        }
        let number = self.inner.flushes_started.fetch_add(1, Ordering::Relaxed) + 1;
        let flushed = if self
            .inner
            .faults
            .fail_nth_flush
            .is_some_and(|nth| number == nth)
        {
            Err(sled::Error::Io(io::Error::other(format!(
                "injected fsync failure (flush {number})"
            ))))
        } else {
            let db = self.inner.db.clone();
            match tokio::task::spawn_blocking(move || db.flush()).await {
                Ok(flushed) => flushed,
                Err(join) => Err(sled::Error::Io(io::Error::other(join.to_string()))),
            }
        };
        if let Err(error) = &flushed {
            let kept = self
                .inner
                .first_failure
                .get_or_init(|| format!("a flush of the data directory failed: {error}"));
            tracing::error!(%error, "flush failed; no flush is tried again in this process");
            return Err(sled::Error::Io(io::Error::other(kept.clone())));
        }
        flushed
    }

    /// The first flush failure, once there was one.
    pub(crate) fn failure(&self) -> Option<String> {
        self.inner.first_failure.get().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temporary_db() -> sled::Db {
        sled::Config::new().temporary(true).open().unwrap()
    }

    /// P8.3: a failed flush is never retried; every later one reports the first failure.
    #[tokio::test]
    async fn p8_3_a_failed_flush_is_never_retried() {
        let db = temporary_db();
        let durability = Durability::new(
            &db,
            FlushFaults {
                fail_nth_flush: Some(2),
            },
        );
        durability.flush().await.expect("the first flush succeeds");
        let first = durability.flush().await.expect_err("the second fails");
        assert!(first.to_string().contains("flush 2"), "{first}");
        for _ in 0..3 {
            let later = durability
                .flush()
                .await
                .expect_err("no flush after a failure");
            assert!(later.to_string().contains("flush 2"), "{later}");
        }
        assert_eq!(
            durability.inner.flushes_started.load(Ordering::Relaxed),
            2,
            "nothing reached sled after the failure"
        );
        assert!(durability.failure().is_some());
    }
}
