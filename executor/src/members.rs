//! Which managers may push (PROTOCOL P13.3): under TLS a push's certificate must be a manager's
//! (`routes::managers_only`) whose node id is a voter of the cluster as the executor last learned
//! it from the managers (`GET /v1/cluster`). A certificate of the cluster's CA outlives the
//! node's membership: a node removed from the cluster (or one that never joined) keeps a valid
//! manager certificate, and one push from it with a forged revision could strand the executor.
//!
//! Only voters count: pushes come from the leader alone, and only a voter can lead.
//!
//! The member set is learned lazily, when a push needs it, and refreshed:
//! - when a push comes from a node id not in the known set (a member added since);
//! - when the known set is older than [`MEMBERS_MAX_AGE`] (a member removed since).
//!
//! At most one refresh per [`REFRESH_INTERVAL`], each bounded by [`REFRESH_TIMEOUT`] (below the
//! managers' own bound on a delivery), so a stranger pushing in a loop costs the managers at
//! most one `GET /v1/cluster` a second from this executor, and waits at most the timeout for
//! its refusal. Pushes arriving together share one refresh.
//!
//! Before any member set is known, a push is refused (503 `unavailable`, retryable) unless the
//! one refresh it triggers succeeds: an executor accepts no push it could not check. That costs
//! nothing it needs: the first push comes after its registration, from the leader that just
//! answered it, and a refused push only waits for the manager's retry or the next grant, which
//! carries the same set (P5.3). When a refresh fails later (the managers unreachable), the
//! last known set decides.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::{timeout, Instant};
use tracing::{debug, warn};

/// At most one refresh of the member set per this interval.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Bound on one refresh, and so on what a push waits for it: under the managers' 2 s bound on a
/// delivery, so a member's push that needed a refresh is still answered in time.
pub(crate) const REFRESH_TIMEOUT: Duration = Duration::from_millis(1_000);
/// A known member set older than this is refreshed before it decides (a removed member stops
/// being accepted within about this long, while the managers answer).
pub(crate) const MEMBERS_MAX_AGE: Duration = Duration::from_secs(60);

/// The future a [`MemberSource`] answers with.
pub(crate) type MembersFuture<'a> =
    Pin<Box<dyn Future<Output = Result<BTreeSet<u64>, String>> + Send + 'a>>;

/// Where the member set comes from: the managers' `GET /v1/cluster` (`crate::manager`), or a
/// test's fake.
pub(crate) trait MemberSource: Send + Sync + 'static {
    /// The node ids of the cluster's voters, or why they could not be learned.
    fn voters(&self) -> MembersFuture<'_>;
}

/// What the member set says of a pushing manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A voter of the cluster as last learned.
    Member,
    /// Not a voter of the cluster as last learned (after the refresh it was allowed).
    NotMember,
    /// No member set is known yet and none could be learned.
    Unverified,
}

#[derive(Debug, Default)]
struct Known {
    /// The voters, and when they were learned.
    voters: Option<(BTreeSet<u64>, Instant)>,
    /// When the last refresh started (successful or not): the rate limit.
    last_attempt: Option<Instant>,
}

impl Known {
    fn verdict(&self, node_id: u64) -> Verdict {
        match &self.voters {
            Some((voters, _)) if voters.contains(&node_id) => Verdict::Member,
            Some(_) => Verdict::NotMember,
            None => Verdict::Unverified,
        }
    }

    /// Whether the set decides for `node_id` without a refresh: known, fresh and listing it.
    fn settles(&self, node_id: u64, now: Instant) -> bool {
        self.voters.as_ref().is_some_and(|(voters, learned_at)| {
            voters.contains(&node_id)
                && now.saturating_duration_since(*learned_at) < MEMBERS_MAX_AGE
        })
    }

    fn may_refresh(&self, now: Instant) -> bool {
        self.last_attempt
            .is_none_or(|at| now.saturating_duration_since(at) >= REFRESH_INTERVAL)
    }
}

/// The member set a TLS push listener checks pushes against: nothing else of the executor.
pub(crate) struct Members {
    known: Mutex<Known>,
    /// Held while refreshing: pushes arriving meanwhile wait for that refresh instead of
    /// starting their own.
    refreshing: tokio::sync::Mutex<()>,
    source: Arc<dyn MemberSource>,
}

impl fmt::Debug for Members {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Members")
            .field("known", &self.known)
            .finish_non_exhaustive()
    }
}

impl Members {
    pub(crate) fn new(source: Arc<dyn MemberSource>) -> Self {
        Self {
            known: Mutex::new(Known::default()),
            refreshing: tokio::sync::Mutex::new(()),
            source,
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        // Every section leaves `Known` whole; a poisoned lock still guards a valid value.
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the manager `node_id` may push: refreshes the member set first if it does not
    /// list `node_id`, is stale or is unknown, rate-limited and bounded (see the module docs).
    pub(crate) async fn check(&self, node_id: u64) -> Verdict {
        if self.known().settles(node_id, Instant::now()) {
            return Verdict::Member;
        }
        // Bounded: a refresh under way ends within REFRESH_TIMEOUT.
        if let Ok(_refreshing) = timeout(REFRESH_TIMEOUT, self.refreshing.lock()).await {
            self.refresh_if_allowed(node_id).await;
        }
        self.known().verdict(node_id)
    }

    /// Refreshes unless the set now settles `node_id` (a refresh finished while this waited) or
    /// a refresh started less than [`REFRESH_INTERVAL`] ago.
    async fn refresh_if_allowed(&self, node_id: u64) {
        {
            let mut known = self.known();
            let now = Instant::now();
            if known.settles(node_id, now) || !known.may_refresh(now) {
                return;
            }
            known.last_attempt = Some(now);
        }
        match timeout(REFRESH_TIMEOUT, self.source.voters()).await {
            Ok(Ok(voters)) => {
                debug!(?voters, "learned the cluster's members (P13.3)");
                self.known().voters = Some((voters, Instant::now()));
            }
            Ok(Err(error)) => {
                warn!(%error, "cannot learn the cluster's members to check a push (P13.3)");
            }
            Err(_) => warn!(
                timeout_ms = REFRESH_TIMEOUT.as_millis(),
                "the cluster's members did not arrive in time to check a push (P13.3)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Answers with `voters` (or fails while it is `None`), counting the calls.
    #[derive(Debug, Default)]
    struct FakeSource {
        voters: Mutex<Option<BTreeSet<u64>>>,
        calls: AtomicUsize,
        delay: Duration,
    }

    impl FakeSource {
        fn set(&self, voters: Option<&[u64]>) {
            *self.voters.lock().unwrap() = voters.map(|v| v.iter().copied().collect());
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl MemberSource for FakeSource {
        fn voters(&self) -> MembersFuture<'_> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(self.delay).await;
                self.voters
                    .lock()
                    .unwrap()
                    .clone()
                    .ok_or_else(|| "scripted failure".to_owned())
            })
        }
    }

    fn members(source: &Arc<FakeSource>) -> Members {
        Members::new(Arc::clone(source) as Arc<dyn MemberSource>)
    }

    /// P13.3: the set is learned at the first push; a stranger's push refreshes it once a
    /// second at most, however often it pushes; a member added since is learned at its first
    /// push.
    #[tokio::test(start_paused = true)]
    async fn p13_3_a_stranger_makes_at_most_one_refresh_a_second() {
        let source = Arc::new(FakeSource::default());
        source.set(Some(&[1, 2, 3]));
        let members = members(&source);
        assert_eq!(members.check(1).await, Verdict::Member);
        assert_eq!(source.calls(), 1);
        assert_eq!(members.check(2).await, Verdict::Member);
        assert_eq!(source.calls(), 1, "a fresh set that lists the node decides");
        for _ in 0..50 {
            assert_eq!(members.check(9).await, Verdict::NotMember);
        }
        assert_eq!(source.calls(), 1, "within a second of the last refresh");
        tokio::time::advance(REFRESH_INTERVAL).await;
        for _ in 0..50 {
            assert_eq!(members.check(9).await, Verdict::NotMember);
        }
        assert_eq!(source.calls(), 2);
        // Node 4 joins; its first push (a second later) is accepted after a refresh.
        source.set(Some(&[1, 2, 3, 4]));
        tokio::time::advance(REFRESH_INTERVAL).await;
        assert_eq!(members.check(4).await, Verdict::Member);
        assert_eq!(source.calls(), 3);
    }

    /// P13.3: a member removed stops being accepted once the set it was in is older than
    /// MEMBERS_MAX_AGE; a failed refresh leaves the last known set deciding.
    #[tokio::test(start_paused = true)]
    async fn p13_3_a_removed_member_is_refused_once_the_set_is_refreshed() {
        let source = Arc::new(FakeSource::default());
        source.set(Some(&[1, 2, 3]));
        let members = members(&source);
        assert_eq!(members.check(3).await, Verdict::Member);
        source.set(Some(&[1, 2]));
        tokio::time::advance(MEMBERS_MAX_AGE / 2).await;
        assert_eq!(members.check(3).await, Verdict::Member, "still fresh");
        tokio::time::advance(MEMBERS_MAX_AGE / 2).await;
        assert_eq!(members.check(3).await, Verdict::NotMember);
        source.set(None);
        tokio::time::advance(MEMBERS_MAX_AGE).await;
        assert_eq!(
            members.check(1).await,
            Verdict::Member,
            "the last known set"
        );
        assert_eq!(members.check(3).await, Verdict::NotMember);
    }

    /// Before any set is known, a push is checked only if the refresh it triggers succeeds, and
    /// waits at most REFRESH_TIMEOUT for it.
    #[tokio::test(start_paused = true)]
    async fn p13_3_without_a_known_set_nothing_is_accepted_and_the_wait_is_bounded() {
        let source = Arc::new(FakeSource {
            delay: REFRESH_TIMEOUT * 10,
            ..FakeSource::default()
        });
        source.set(Some(&[1]));
        let members = members(&source);
        let started = Instant::now();
        assert_eq!(members.check(1).await, Verdict::Unverified);
        assert!(
            started.elapsed() <= REFRESH_TIMEOUT * 2,
            "{:?}",
            started.elapsed()
        );
        let source = Arc::new(FakeSource::default());
        let members = Members::new(Arc::clone(&source) as Arc<dyn MemberSource>);
        assert_eq!(members.check(1).await, Verdict::Unverified);
    }
}
