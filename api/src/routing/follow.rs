//! The watcher that keeps a following client's table current.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{debug, warn};

use super::{RouteTable, RoutingConfig, RoutingError, Shared};
use crate::client::Client;
use crate::wire::COMPACT_SHARDS_SCHEMA;

/// The watcher: one `GET /v1/watch` at a time, from the table's revision; a failure pauses by
/// [`Backoff`]. Runs until the client is dropped (the task is aborted).
pub(super) async fn follow(shared: Arc<Shared>, watch: Client, config: RoutingConfig) {
    let mut backoff = Backoff::new(config.retry_initial, config.retry_max);
    loop {
        let revision = shared.current().table.revision();
        shared
            .counters
            .watch_started
            .fetch_add(1, Ordering::Relaxed);
        // The routing view is far smaller than the state; clusters that serve it say so.
        let cluster_version = watch
            .cluster_version()
            .max(shared.managers.cluster_version());
        let followed = if let Some(namespace) = &shared.namespace {
            // The load checked that the cluster serves namespaces; its version never falls.
            watch
                .watch_routing_in(namespace, revision, config.watch_wait)
                .await
                .map(|runs| RouteTable::from_runs(&runs))
        } else if cluster_version >= COMPACT_SHARDS_SCHEMA {
            watch
                .watch_routing(revision, config.watch_wait)
                .await
                .map(|runs| RouteTable::from_runs(&runs))
        } else {
            watch
                .watch(revision, config.watch_wait)
                .await
                .map(|reply| RouteTable::from_state(&reply.state))
        };
        let failure = match followed {
            Ok(table) => match table {
                Ok(table) => {
                    shared
                        .counters
                        .watch_replies
                        .fetch_add(1, Ordering::Relaxed);
                    let adopted_revision = table.revision();
                    if shared.offer(table) {
                        debug!(
                            revision = adopted_revision,
                            "routing table followed a change"
                        );
                    }
                    backoff.reset();
                    None
                }
                // A malformed state would come back at once on the next request: back off.
                Err(error) => Some(RoutingError::Table(error)),
            },
            Err(error) => Some(RoutingError::Managers(error)),
        };
        if let Some(error) = failure {
            shared
                .counters
                .watch_failures
                .fetch_add(1, Ordering::Relaxed);
            metrics::counter!("leasehold_routing_events_total", "event" => "watch_failures")
                .increment(1);
            let pause = jittered(backoff.next(), entropy());
            warn!(
                revision,
                code = error.label(),
                %error,
                pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                "routing watch failed; retrying after a pause"
            );
            tokio::time::sleep(pause).await;
        }
    }
}

/// Exponential backoff: `initial`, doubled per failure, capped at `max`; reset on success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(super) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
        }
    }

    pub(super) fn next(&mut self) -> Duration {
        let pause = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        pause
    }

    pub(super) fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// `pause` scaled into `[pause/2, pause)` by `entropy`, so clients that failed together (a
/// manager outage) do not retry in lockstep.
pub(super) fn jittered(pause: Duration, entropy: u32) -> Duration {
    let half = pause / 2;
    let spread = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    if spread == 0 {
        return pause;
    }
    half + Duration::from_nanos(u64::from(entropy) % spread)
}

/// Entropy for [`jittered`] without a random source: the clock's nanoseconds differ between
/// processes and between calls.
fn entropy() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.subsec_nanos())
        .unwrap_or(0)
}
