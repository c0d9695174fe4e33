//! `--app-url` (PROTOCOL P16.1): the sidecar pushes the permits answers to the service instead
//! of waiting for its polls. Each `PUT <app-url>` carries the body of a permits answer; the
//! service's `2xx` within [`APP_PUSH_TIMEOUT`] acknowledges it, as `applied=` and `state=` do on
//! a poll. One push is in flight at a time: the next is sent when the answer would change, or
//! when half the time left on the copy the service holds has passed, or when the shards it is
//! asked to prepare for change (P17.1: a `2xx` to a push that lists them says it prepared them).
//!
//! The service did not send these requests, so it cannot anchor `lease_ttl_ms` at a send instant
//! of its own; it holds the copy until `lease_expires_monotonic_ns`, a deadline on this machine's
//! CLOCK_MONOTONIC (the sidecar and the service share the machine, P16.1), which a pause or a late
//! read cannot stretch.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::wire::{LocalPermits, LocalState};
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};
use tracing::{debug, info, warn};

use super::link::ServiceLink;
use super::service_copy::{answered, Answered, PushedAnswer};
use crate::admission::Assignment;
use crate::shared::Shared;
use crate::shutdown::ShutdownSignal;

/// The stated bound on a push: a `2xx` later than this acknowledges nothing, and the push is
/// sent again.
pub const APP_PUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// Backoff after a push that was not acknowledged: doubling from the first to the last.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_LAST: Duration = Duration::from_secs(1);

/// Why an `--app-url` is refused.
pub fn check_app_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("--app-url {url:?}: {e}"))?;
    if parsed.scheme() != "http" {
        return Err(format!(
            "--app-url {url}: only http:// to this machine (the service is beside the sidecar, \
             PROTOCOL P16.1)"
        ));
    }
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name == "localhost",
        None => false,
    };
    if !loopback {
        return Err(format!(
            "--app-url {url}: not a loopback address: the bodies carry what the service may \
             admit, and go only to this machine (PROTOCOL P16.1)"
        ));
    }
    Ok(())
}

/// Pushes the permits answers to `app_url` until `shutdown` fires.
pub(crate) async fn push_to_app(
    shared: Arc<Shared>,
    link: Arc<ServiceLink>,
    app_url: String,
    mut shutdown: ShutdownSignal,
) {
    let client = match leasehold_api::client::http_client_builder(None)
        .timeout(APP_PUSH_TIMEOUT)
        .build()
    {
        Ok(client) => client,
        Err(error) => {
            warn!(%error, "cannot build the client for --app-url; the service is told nothing");
            return;
        }
    };
    // A pushed service prepares (P17.1): its `2xx` to a push that lists shards to prepare says
    // it prepared them; one that ignores the list answers at once, and nothing waits longer.
    link.opt_in_prepares();
    let mut acknowledged: Option<Answered> = None;
    let mut retry = RETRY_FIRST;
    let mut views = shared.subscribe_assignment();
    let mut asked = link.changes();
    loop {
        let due = until_push_due(&link, &mut views, &mut asked, acknowledged, &mut shutdown);
        if !due.await {
            return;
        }
        let (permits, given) = link.answer_push(|now| shared.view_at(now));
        let answered = Answered {
            revision: permits.revision,
            state: permits.state,
        };
        tokio::select! {
            pushed = push(&client, &app_url, &permits) => match pushed {
                Ok(()) => {
                    note_acknowledged(&link, given, &permits, acknowledged, answered);
                    acknowledged = Some(answered);
                    retry = RETRY_FIRST;
                }
                Err(detail) => {
                    acknowledged = None;
                    if !back_off(&detail, &app_url, &mut retry, &mut shutdown).await {
                        return;
                    }
                }
            },
            () = shutdown.wait() => return,
        }
        // A stopped sidecar has nothing more to say once the service acknowledged it.
        if acknowledged.is_some_and(|a| a.state == LocalState::Stopping) {
            let _ = shutdown.wait().await;
            return;
        }
    }
}

/// Waits until the answer would change, the copy needs refreshing or shards to prepare are
/// untold; `false` when shutdown fired or a watched channel closed.
async fn until_push_due(
    link: &ServiceLink,
    views: &mut watch::Receiver<Assignment>,
    asked: &mut watch::Receiver<u64>,
    acknowledged: Option<Answered>,
    shutdown: &mut ShutdownSignal,
) -> bool {
    let refresh_at = link.copy_end().map(|end| {
        let now = Instant::now();
        now + end.saturating_duration_since(now) / 2
    });
    loop {
        let now = Instant::now();
        let current = answered(&views.borrow_and_update(), now);
        asked.borrow_and_update();
        if acknowledged != Some(current)
            || refresh_at.is_some_and(|at| now >= at)
            || link.prepares_untold()
        {
            return true;
        }
        tokio::select! {
            changed = views.changed() => if changed.is_err() { return false },
            changed = asked.changed() => if changed.is_err() { return false },
            () = sleep_until(refresh_at.unwrap_or(now + Duration::from_secs(3600))) => {}
            () = shutdown.wait() => return false,
        }
    }
}

/// Records the service's `2xx` to push `given`: its holds end, the shards it listed are
/// prepared, and a change of state is logged.
fn note_acknowledged(
    link: &ServiceLink,
    given: PushedAnswer,
    permits: &LocalPermits,
    previous: Option<Answered>,
    answered: Answered,
) {
    link.acknowledge_push(given);
    link.service_prepared_all(&permits.preparing);
    if previous.map(|a| a.state) != Some(answered.state) {
        info!(
            state = answered.state.as_str(),
            revision = answered.revision,
            "the service acknowledged a push (--app-url)"
        );
    }
}

/// Logs a push that was not acknowledged and sleeps `retry`, doubling it up to
/// [`RETRY_LAST`]; `false` when shutdown fired first.
async fn back_off(
    detail: &str,
    app_url: &str,
    retry: &mut Duration,
    shutdown: &mut ShutdownSignal,
) -> bool {
    debug!(%detail, "push to the service not acknowledged; sent again");
    if *retry == RETRY_FIRST {
        warn!(%detail, app_url = %app_url, "the service did not acknowledge a push (--app-url); retrying");
    }
    tokio::select! {
        () = sleep(*retry) => {}
        () = shutdown.wait() => return false,
    }
    *retry = (*retry * 2).min(RETRY_LAST);
    true
}

/// One push: `Ok` on a `2xx` within the bound.
async fn push(
    client: &reqwest::Client,
    app_url: &str,
    permits: &LocalPermits,
) -> Result<(), String> {
    let reply = client
        .put(app_url)
        .json(permits)
        .send()
        .await
        .map_err(|error| leasehold_api::client::error_chain(&error))?;
    if reply.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", reply.status()))
    }
}
