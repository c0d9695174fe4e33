//! The lease loop, lapse watcher and graceful stop under a paused clock (P3.2, P3.5, P3.6,
//! P3.7, P4.4, P7.2).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::wire::{
    ShardEpoch, ShardLoad, CAPACITY_SCHEMA, FIRST_RELEASE_SCHEMA, REPLICAS_SCHEMA,
};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant};

use super::{set, Call, FakeManager, Script};
use crate::admission::{AdmissionReason, AdmissionState, AdmitError, Permit, RoleWanted};
use crate::admission_log::AdmissionLog;
use crate::assignment::Secondary;
use crate::lease_loop::{run_lease_loop, watch_lapses};
use crate::shared::{LoadSettings, Shared};
use crate::shutdown::ShutdownSignal;
use crate::sidecar::link::ServiceLink;
use crate::sidecar::service_copy::{Ack, Answered};
use crate::status::{RunState, ShardEvent};

const GRACE: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// When the fake manager's executor (`ex-1`) renews first after registering under a lease of
/// `lease_ttl` (P3.5: between a sixth and a third into it, by its id), rounded up to the paused
/// timer's millisecond.
fn first_renewal(lease_ttl: Duration) -> Duration {
    let after = crate::lease::first_renewal_after(lease_ttl, "ex-1");
    let whole_ms = after.as_millis() as u64;
    if Duration::from_millis(whole_ms) == after {
        after
    } else {
        ms(whole_ms + 1)
    }
}

/// One executor shell (lease loop + lapse watcher) against a fake manager.
struct Harness {
    shared: Arc<Shared>,
    fake: Arc<FakeManager>,
    shutdown_tx: watch::Sender<bool>,
    lease: JoinHandle<RunState>,
    watcher: JoinHandle<()>,
    events: broadcast::Receiver<ShardEvent>,
    /// When the loop started (the first registration is sent at this instant).
    t0: Instant,
    log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn start(script: Script) -> Self {
        Self::start_with(script, LoadSettings::default())
    }

    fn start_with(script: Script, load: LoadSettings) -> Self {
        Self::start_serving(script, load, None)
    }

    /// As the sidecar of a service `service` tracks (PROTOCOL §16).
    fn start_serving(
        script: Script,
        load: LoadSettings,
        service: Option<Arc<ServiceLink>>,
    ) -> Self {
        Self::start_shaped(script, load, |shared| match service {
            Some(service) => shared.serving(service),
            None => shared,
        })
    }

    /// With the shared state `shape` makes of the one reporting `load` (logging to the
    /// harness's log).
    fn start_shaped(
        script: Script,
        load: LoadSettings,
        shape: impl FnOnce(Shared) -> Shared,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("events.jsonl");
        let log = AdmissionLog::open(&log_path).unwrap();
        let shared = Shared::new(
            "http://127.0.0.1:9".into(),
            Some("test".into()),
            Some(log),
            load,
        );
        let shared = Arc::new(shape(shared));
        let events = shared.subscribe_events();
        let fake = FakeManager::new(script);
        fake.observe(&shared);
        let (shutdown_tx, shutdown) = ShutdownSignal::new();
        let t0 = Instant::now();
        let lease = tokio::spawn(run_lease_loop(
            Arc::clone(&shared),
            Arc::clone(&fake),
            shutdown.clone(),
            GRACE,
        ));
        let watcher = tokio::spawn(watch_lapses(Arc::clone(&shared), shutdown));
        Self {
            shared,
            fake,
            shutdown_tx,
            lease,
            watcher,
            events,
            t0,
            log_path,
            _dir: dir,
        }
    }

    /// Lets the spawned tasks run without moving the clock much.
    async fn let_tasks_run(&self) {
        sleep(ms(1)).await;
    }

    async fn stop(self) -> (RunState, Arc<FakeManager>, Vec<serde_json::Value>) {
        self.shutdown_tx.send_replace(true);
        let state = self.lease.await.unwrap();
        self.watcher.await.unwrap();
        let log = std::fs::read_to_string(&self.log_path)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        (state, self.fake, log)
    }

    fn drain_events(&mut self) -> Vec<ShardEvent> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events
    }
}

fn log_summary(log: &[serde_json::Value]) -> Vec<(u64, String, String)> {
    log.iter()
        .map(|line| {
            (
                line["shard"].as_u64().unwrap(),
                line["event"].as_str().unwrap().to_owned(),
                line["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn p3_5_renews_first_by_its_id_then_after_a_third_of_the_remaining_lease() {
    let harness = Harness::start(Script {
        lease_ttl_ms: 30_000,
        shards: set(&[(1, 1)]),
        ..Script::default()
    });
    sleep(secs(61)).await;
    let offsets: Vec<Duration> = harness
        .fake
        .renew_instants()
        .into_iter()
        .map(|at| at - harness.t0)
        .collect();
    let first = first_renewal(secs(30));
    assert!(first >= secs(5) && first <= secs(10), "{first:?}");
    assert_eq!(offsets, [0, 10, 20, 30, 40, 50].map(|k| first + secs(k)));
    // Every renewal claims the held set at the last applied revision (P4.1, P4.2), each attempt
    // bounded by a sixth of the lease (P7.3).
    for call in harness.fake.calls() {
        if let Call::Renew {
            request,
            executor_id,
            attempt_timeout,
            ..
        } = call
        {
            assert_eq!(executor_id, "ex-1");
            assert_eq!(request.claims, set(&[(1, 1)]));
            assert_eq!(request.revision, 1);
            assert_eq!(attempt_timeout, Some(secs(5)));
        }
    }
    harness.stop().await;
}

/// Seed 000: the grant's ttl is read on arrival at the manager and the reply takes 5 s to come
/// back. The executor's lease must end at send + ttl, the manager's expiry, not 5 s later.
#[tokio::test(start_paused = true)]
async fn p3_2_delayed_grant_reply_anchors_at_send_not_receipt() {
    let harness = Harness::start(Script {
        lease_ttl_ms: 30_000,
        reply_delay: secs(5),
        shards: set(&[(3, 2)]),
        ..Script::default()
    });
    sleep(secs(6)).await;
    assert_eq!(
        harness.shared.status().lease_remaining_ms,
        24_000,
        "expiry is t0 + 30 s, seen at t0 + 6 s"
    );
    harness.fake.script(|script| script.fail_renewals = true);
    sleep_until(harness.t0 + secs(30) - ms(1)).await;
    assert_eq!(harness.shared.admit(3), Ok(Permit::primary(3, 2)));
    sleep_until(harness.t0 + secs(30)).await;
    assert_eq!(harness.shared.admit(3), Err(AdmitError::NotReady));
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn p3_2_delayed_renewal_reply_anchors_at_its_own_send() {
    let harness = Harness::start(Script {
        lease_ttl_ms: 30_000,
        shards: set(&[(3, 2)]),
        ..Script::default()
    });
    harness.let_tasks_run().await;
    // The first renewal leaves at t0 + `first` and its reply lands 4 s later.
    let first = first_renewal(secs(30));
    harness.fake.script(|script| script.reply_delay = secs(4));
    sleep_until(harness.t0 + first + secs(4) + ms(1)).await;
    harness.fake.script(|script| script.fail_renewals = true);
    let expiry = harness.shared.subscribe_assignment().borrow().lease_expiry;
    assert_eq!(expiry, Some(harness.t0 + first + secs(30)));
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn p3_5_failed_renewals_back_off_and_each_lands_before_expiry() {
    let harness = Harness::start(Script {
        lease_ttl_ms: 4_000,
        fail_renewals: true,
        shards: set(&[(1, 1)]),
        ..Script::default()
    });
    sleep(secs(20)).await;
    let expiry = harness.t0 + secs(4);
    let attempts = harness.fake.renew_instants();
    assert_eq!(attempts[0], harness.t0 + first_renewal(secs(4)));
    let before: Vec<Duration> = attempts
        .iter()
        .take_while(|&&at| at < expiry)
        .map(|&at| at - harness.t0)
        .collect();
    assert!(before.len() >= 6, "few retries before expiry: {before:?}");
    // Exponential at first: 250 ms, then 500 ms after the first retry.
    assert_eq!(attempts[1] - attempts[0], ms(250));
    assert_eq!(attempts[2] - attempts[1], ms(500));
    for pair in attempts.windows(2) {
        let (sent, next) = (pair[0], pair[1]);
        if sent + crate::lease::RETRY_DELAY_MIN * 2 <= expiry {
            assert!(
                next < expiry,
                "retry after {:?} lands after expiry",
                sent - harness.t0
            );
        }
        // Keeps trying after the lapse, never slower than the cap.
        assert!(next - sent <= crate::lease::RETRY_DELAY_MAX);
    }
    let after = attempts.iter().filter(|&&at| at > expiry).count();
    assert!(after >= 3, "stopped trying after the lapse: {attempts:?}");
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn p3_6_lapse_fences_and_a_later_renewal_resumes_without_reacquire() {
    let mut harness = Harness::start(Script {
        lease_ttl_ms: 4_000,
        shards: set(&[(1, 1), (2, 5)]),
        ..Script::default()
    });
    harness.let_tasks_run().await;
    assert_eq!(
        harness.drain_events(),
        [
            ShardEvent::Gained {
                shard: 1,
                epoch: 1,
                reason: AdmissionReason::Assigned
            },
            ShardEvent::Gained {
                shard: 2,
                epoch: 5,
                reason: AdmissionReason::Assigned
            },
        ]
    );
    harness.fake.script(|script| script.fail_renewals = true);
    let expiry = harness.t0 + secs(4);
    sleep_until(expiry).await;
    harness.let_tasks_run().await;
    // The watcher records the lapse at the expiry, with no other trigger.
    assert_eq!(
        harness.shared.subscribe_assignment().borrow().admission,
        AdmissionState::Fenced
    );
    assert_eq!(harness.shared.admit(1), Err(AdmitError::NotReady));
    assert_eq!(
        harness.drain_events(),
        [
            ShardEvent::Dropped {
                shard: 1,
                epoch: 1,
                reason: AdmissionReason::LeaseLapsed
            },
            ShardEvent::Dropped {
                shard: 2,
                epoch: 5,
                reason: AdmissionReason::LeaseLapsed
            },
        ]
    );
    // The manager still knows the executor; renewals get through again.
    harness.fake.script(|script| script.fail_renewals = false);
    sleep(secs(6)).await;
    assert_eq!(harness.shared.admit(2), Ok(Permit::primary(2, 5)));
    assert_eq!(
        harness.drain_events(),
        [
            ShardEvent::Gained {
                shard: 1,
                epoch: 1,
                reason: AdmissionReason::Resumed
            },
            ShardEvent::Gained {
                shard: 2,
                epoch: 5,
                reason: AdmissionReason::Resumed
            },
        ]
    );
    let registers = harness
        .fake
        .calls()
        .iter()
        .filter(|call| matches!(call, Call::Register { .. }))
        .count();
    assert_eq!(
        registers, 1,
        "resumed without re-registering or re-acquiring"
    );
    let (_, _, log) = harness.stop().await;
    assert_eq!(
        log_summary(&log)[..6],
        [
            (1, "start".into(), "assigned".into()),
            (2, "start".into(), "assigned".into()),
            (1, "stop".into(), "lease_lapsed".into()),
            (2, "stop".into(), "lease_lapsed".into()),
            (1, "start".into(), "resumed".into()),
            (2, "start".into(), "resumed".into()),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_executor_triggers_reregistration_with_a_new_incarnation() {
    let mut harness = Harness::start(Script {
        lease_ttl_ms: 30_000,
        shards: set(&[(4, 1)]),
        ..Script::default()
    });
    harness.let_tasks_run().await;
    let first = harness.shared.health().unwrap();
    assert_eq!(first.executor_id, "ex-1");
    harness.fake.script(|script| {
        script.forget_executor = true;
        script.shards = set(&[(4, 2)]);
    });
    sleep(secs(10)).await;
    harness.let_tasks_run().await;
    let second = harness.shared.health().unwrap();
    assert_eq!(second.executor_id, "ex-2");
    assert_ne!(second.incarnation, first.incarnation, "a fresh incarnation");
    let calls = harness.fake.calls();
    assert!(
        matches!(&calls[0], Call::Register { incarnation, .. } if *incarnation == first.incarnation)
    );
    assert!(matches!(&calls[1], Call::Renew { executor_id, .. } if executor_id == "ex-1"));
    assert!(
        matches!(&calls[2], Call::Register { incarnation, .. } if *incarnation == second.incarnation)
    );
    assert_eq!(
        harness.drain_events(),
        [
            ShardEvent::Gained {
                shard: 4,
                epoch: 1,
                reason: AdmissionReason::Assigned
            },
            ShardEvent::Dropped {
                shard: 4,
                epoch: 1,
                reason: AdmissionReason::UnknownExecutor
            },
            ShardEvent::Gained {
                shard: 4,
                epoch: 2,
                reason: AdmissionReason::Assigned
            },
        ]
    );
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn p3_7_shutdown_stops_admission_then_deregisters() {
    let harness = Harness::start(Script {
        shards: set(&[(1, 1), (2, 1)]),
        ..Script::default()
    });
    sleep(secs(1)).await;
    assert!(harness.shared.admit(1).is_ok());
    let (state, fake, log) = harness.stop().await;
    assert_eq!(state, RunState::Stopped);
    assert!(
        matches!(fake.calls().last(), Some(Call::Deregister { executor_id, .. }) if executor_id == "ex-1")
    );
    // When the deregistration reached the manager, nothing was admitted any more.
    assert_eq!(
        fake.admission_at_deregister(),
        [Err(AdmitError::NotReady), Err(AdmitError::NotReady)]
    );
    assert_eq!(
        log_summary(&log)[2..],
        [
            (1, "stop".into(), "shutdown".into()),
            (2, "stop".into(), "shutdown".into())
        ]
    );
}

/// The acknowledgement of `answer` its poller's next poll carries (P16.1).
fn ack_of(answer: &leasehold_api::wire::LocalPermits) -> Ack {
    Ack {
        answered: Answered {
            revision: answer.revision,
            state: answer.state,
        },
        token: u128::from_str_radix(answer.token.as_deref().unwrap(), 16).unwrap(),
    }
}

/// P16.2: as a sidecar, the graceful stop deregisters (handing every shard on at once) only once
/// the service stopped admitting; a service that never acknowledges `stopping` within the grace
/// leaves the shards to move when the lease runs out.
#[tokio::test(start_paused = true)]
async fn p16_2_a_sidecars_graceful_stop_waits_for_the_service() {
    for acknowledges in [true, false] {
        let service = Arc::new(ServiceLink::new(None));
        let harness = Harness::start_serving(
            Script {
                shards: set(&[(1, 1)]),
                ..Script::default()
            },
            LoadSettings::default(),
            Some(Arc::clone(&service)),
        );
        sleep(secs(1)).await;
        let shared = Arc::clone(&harness.shared);
        let first = service.answer_poll(|now| shared.view_at(now), None, Instant::now());
        harness.shutdown_tx.send_replace(true);
        sleep(ms(100)).await;
        // The service's next poll, acknowledging the first answer, is answered `stopping` at once.
        let chain = service.acknowledge(ack_of(&first)).unwrap();
        let stopping = service.answer_poll(|now| shared.view_at(now), Some(chain), Instant::now());
        assert_eq!(stopping.state, leasehold_api::wire::LocalState::Stopping);
        assert!(
            !harness
                .fake
                .calls()
                .iter()
                .any(|call| matches!(call, Call::Deregister { .. })),
            "deregistered while the service may still admit"
        );
        if acknowledges {
            service.acknowledge(ack_of(&stopping)).unwrap();
        }
        let stopped = Instant::now();
        let (_, fake, _) = harness.stop().await;
        let deregistered = fake
            .calls()
            .iter()
            .any(|call| matches!(call, Call::Deregister { .. }));
        assert_eq!(deregistered, acknowledges, "acknowledged: {acknowledges}");
        if !acknowledges {
            assert!(stopped.elapsed() >= GRACE - ms(200), "waited out the grace");
        }
    }
}

/// P17.2: a stop begins with the executor's own drain, and each shard is admitted until its
/// revoke arrives (the leader's handoff); once it holds nothing it deregisters, well within the
/// grace, and its admission log says each shard stopped for its revoke, not for the shutdown.
#[tokio::test(start_paused = true)]
async fn p17_2_a_stop_drains_first_and_admits_each_shard_until_its_handoff() {
    let harness = Harness::start(Script {
        shards: set(&[(1, 1), (2, 1)]),
        drain_takers: Some(1),
        ..Script::default()
    });
    sleep(secs(1)).await;
    let asked = Instant::now();
    harness.shutdown_tx.send_replace(true);
    sleep(ms(500)).await;
    let calls = harness.fake.calls();
    assert!(
        matches!(calls.last(), Some(Call::Drain { executor_id, .. }) if executor_id == "ex-1"),
        "{calls:?}"
    );
    assert_eq!(harness.shared.admit(1), Ok(Permit::primary(1, 1)));
    assert_eq!(harness.shared.admit(2), Ok(Permit::primary(2, 1)));
    let revoke = |shard: u32, revision: u64| {
        harness
            .shared
            .apply_revoke(&leasehold_api::wire::RevokePush {
                executor_id: "ex-1".into(),
                revision,
                shards: vec![shard],
                generation: 0,
            })
            .unwrap();
    };
    revoke(1, 2);
    sleep(ms(500)).await;
    assert!(harness.shared.admit(1).is_err(), "shard 1 was handed over");
    assert_eq!(
        harness.shared.admit(2),
        Ok(Permit::primary(2, 1)),
        "shard 2 is admitted until its own handoff"
    );
    assert!(
        !harness
            .fake
            .calls()
            .iter()
            .any(|call| matches!(call, Call::Deregister { .. })),
        "deregistered while still holding a shard"
    );
    revoke(2, 3);
    let (state, fake, log) = harness.stop().await;
    assert_eq!(state, RunState::Stopped);
    assert!(
        matches!(fake.calls().last(), Some(Call::Deregister { executor_id, .. }) if executor_id == "ex-1")
    );
    assert!(
        Instant::now() - asked < secs(2),
        "the stop ended once the shards were handed over"
    );
    assert_eq!(
        log_summary(&log)[2..],
        [
            (1, "stop".into(), "revoked".into()),
            (2, "stop".into(), "revoked".into())
        ]
    );
}

/// P17.2, P16.2: a sidecar's shard is handed over only once its service let it go, so its drain
/// does not end when the last revoke is applied: the service is still told `admitting` (without
/// the shard) and nothing is deregistered until it acknowledged that answer; then the stop goes
/// on at once.
#[tokio::test(start_paused = true)]
async fn p17_2_a_sidecars_drain_waits_for_the_service_to_let_go() {
    let service = Arc::new(ServiceLink::new(None));
    let harness = Harness::start_serving(
        Script {
            shards: set(&[(1, 1)]),
            drain_takers: Some(1),
            ..Script::default()
        },
        LoadSettings::default(),
        Some(Arc::clone(&service)),
    );
    sleep(secs(1)).await;
    let shared = Arc::clone(&harness.shared);
    let first = service.answer_poll(|now| shared.view_at(now), None, Instant::now());
    harness.shutdown_tx.send_replace(true);
    sleep(ms(100)).await;
    shared
        .apply_revoke(&leasehold_api::wire::RevokePush {
            executor_id: "ex-1".into(),
            revision: 2,
            shards: vec![1],
            generation: 0,
        })
        .unwrap();
    sleep(crate::self_drain::DRAIN_STALL - ms(200)).await;
    let deregistered = |fake: &FakeManager| {
        fake.calls()
            .iter()
            .any(|call| matches!(call, Call::Deregister { .. }))
    };
    assert!(!deregistered(&harness.fake), "the service may still admit");
    let chain = service.acknowledge(ack_of(&first)).unwrap();
    let dropped = service.answer_poll(|now| shared.view_at(now), Some(chain), Instant::now());
    assert_eq!(
        (dropped.state, dropped.shards.len()),
        (leasehold_api::wire::LocalState::Admitting, 0),
        "the drain goes on until the service acknowledged the answer without the shard"
    );
    service.acknowledge(ack_of(&dropped)).unwrap();
    let let_go = Instant::now();
    let (state, fake, _) = harness.stop().await;
    assert_eq!(state, RunState::Stopped);
    assert!(deregistered(&fake));
    assert!(
        Instant::now() - let_go < ms(100),
        "the stop went on at once"
    );
}

/// P17.2, P3.7: when no other executor can take the shards, or the managers refuse the drain
/// (a release before P17.2), the stop does not wait: admission stops and the executor
/// deregisters at once.
#[tokio::test(start_paused = true)]
async fn p17_2_without_a_taker_or_a_drain_the_stop_is_at_once() {
    for drain_takers in [Some(0), None] {
        let harness = Harness::start(Script {
            shards: set(&[(1, 1)]),
            drain_takers,
            ..Script::default()
        });
        sleep(secs(1)).await;
        let asked = Instant::now();
        let (_, fake, log) = harness.stop().await;
        assert_eq!(Instant::now(), asked, "{drain_takers:?}: no wait");
        let calls = fake.calls();
        assert!(
            matches!(
                &calls[calls.len() - 2..],
                [Call::Drain { .. }, Call::Deregister { .. }]
            ),
            "{drain_takers:?}: {calls:?}"
        );
        assert_eq!(
            log_summary(&log)[1..],
            [(1, "stop".into(), "shutdown".into())]
        );
    }
}

/// P17.2, P3.7: a drain whose handoffs go on but do not finish keeps admitting what is left
/// until the grace less the deregistration's reserve, then stops the rest at once, and the
/// whole stop fits the grace.
#[tokio::test(start_paused = true)]
async fn p17_2_an_unfinished_drain_stops_the_rest_within_the_grace() {
    let harness = Harness::start(Script {
        shards: set(&[(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]),
        drain_takers: Some(2),
        ..Script::default()
    });
    sleep(secs(1)).await;
    let asked = Instant::now();
    harness.shutdown_tx.send_replace(true);
    // One handoff a second, each inside the stall bound.
    for (shard, revision) in [(1, 2), (2, 3), (3, 4)] {
        sleep_until(asked + secs(u64::from(shard))).await;
        harness
            .shared
            .apply_revoke(&leasehold_api::wire::RevokePush {
                executor_id: "ex-1".into(),
                revision,
                shards: vec![shard],
                generation: 0,
            })
            .unwrap();
    }
    let drain_ends = GRACE - crate::self_drain::DEREGISTRATION_RESERVE;
    sleep_until(asked + drain_ends - ms(1)).await;
    assert_eq!(harness.shared.admit(4), Ok(Permit::primary(4, 1)));
    let (state, fake, log) = harness.stop().await;
    assert_eq!(state, RunState::Stopped);
    let deregistered_at = fake.calls().iter().find_map(|call| match call {
        Call::Deregister { at, .. } => Some(*at),
        _ => None,
    });
    assert_eq!(deregistered_at, Some(asked + drain_ends));
    assert!(Instant::now() - asked <= GRACE);
    let stops: Vec<(u64, String, String)> = log_summary(&log)
        .into_iter()
        .filter(|(_, event, _)| event == "stop")
        .collect();
    assert_eq!(
        stops,
        [
            (1, "stop".into(), "revoked".into()),
            (2, "stop".into(), "revoked".into()),
            (3, "stop".into(), "revoked".into()),
            (4, "stop".into(), "shutdown".into()),
            (5, "stop".into(), "shutdown".into()),
        ]
    );
}

/// P17.2: when no shard leaves for the stall bound (every other executor is stopping too, so
/// none takes them), the drain gives up then instead of waiting out the grace.
#[tokio::test(start_paused = true)]
async fn p17_2_a_drain_that_moves_nothing_gives_up_after_the_stall_bound() {
    let harness = Harness::start(Script {
        shards: set(&[(1, 1)]),
        drain_takers: Some(2),
        ..Script::default()
    });
    sleep(secs(1)).await;
    let asked = Instant::now();
    harness.shutdown_tx.send_replace(true);
    sleep_until(asked + crate::self_drain::DRAIN_STALL - ms(1)).await;
    assert_eq!(harness.shared.admit(1), Ok(Permit::primary(1, 1)));
    let (_, fake, log) = harness.stop().await;
    let deregistered_at = fake.calls().iter().find_map(|call| match call {
        Call::Deregister { at, .. } => Some(*at),
        _ => None,
    });
    assert_eq!(
        deregistered_at,
        Some(asked + crate::self_drain::DRAIN_STALL)
    );
    assert_eq!(
        log_summary(&log)[1..],
        [(1, "stop".into(), "shutdown".into())]
    );
}

/// P7.2: the register reply was lost, so the executor never learned its id; the graceful stop
/// registers again under the same incarnation to find it, and deregisters it.
#[tokio::test(start_paused = true)]
async fn p3_7_shutdown_after_a_lost_register_reply_still_deregisters() {
    let harness = Harness::start(Script {
        lose_first_register_reply: true,
        ..Script::default()
    });
    sleep(secs(2)).await;
    assert!(harness.shared.health().is_none());
    let (state, fake, _) = harness.stop().await;
    assert_eq!(state, RunState::Stopped);
    let calls = fake.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    let (
        Call::Register {
            incarnation: first, ..
        },
        Call::Register {
            incarnation: again, ..
        },
    ) = (&calls[0], &calls[1])
    else {
        panic!("expected two registers: {calls:?}");
    };
    assert_eq!(first, again, "same idempotency key");
    assert!(matches!(&calls[2], Call::Deregister { executor_id, .. } if executor_id == "ex-1"));
}

#[tokio::test(start_paused = true)]
async fn p3_7_shutdown_is_bounded_by_the_grace() {
    let harness = Harness::start(Script {
        hang_deregister: true,
        shards: set(&[(1, 1)]),
        ..Script::default()
    });
    sleep(secs(1)).await;
    let asked = Instant::now();
    let (state, _, _) = tokio::time::timeout(GRACE * 2, harness.stop())
        .await
        .expect("the graceful stop overran its grace");
    assert_eq!(state, RunState::Stopped);
    assert_eq!(Instant::now() - asked, GRACE);
}

#[tokio::test(start_paused = true)]
async fn hopeless_registration_fails_the_executor() {
    let harness = Harness::start(Script {
        refuse_register: true,
        ..Script::default()
    });
    harness.let_tasks_run().await;
    assert!(harness.lease.is_finished());
    let (state, fake, _) = harness.stop().await;
    assert!(matches!(state, RunState::Failed(_)), "{state:?}");
    assert_eq!(
        fake.calls().len(),
        1,
        "no retries of a request the manager calls invalid"
    );
}

/// The loads each renewal carried, in order.
fn renewal_loads(fake: &FakeManager) -> Vec<Option<Vec<ShardLoad>>> {
    fake.calls()
        .into_iter()
        .filter_map(|call| match call {
            Call::Renew { request, .. } => Some(request.loads),
            _ => None,
        })
        .collect()
}

fn loads(entries: &[(u32, f64)]) -> Vec<ShardLoad> {
    entries
        .iter()
        .map(|&(shard, load)| ShardLoad { shard, load })
        .collect()
}

const REPORTING: LoadSettings = LoadSettings {
    capacity: 3,
    report_loads: true,
};

/// P15.1: with reporting on, each renewal to a cluster at cluster version 12 carries a load per
/// held shard: the work recorded since the previous granted renewal, per second; and the status
/// shows the capacity and the loads last reported.
#[tokio::test(start_paused = true)]
async fn p15_1_renewals_carry_the_recorded_rate_per_held_shard() {
    let harness = Harness::start_with(
        Script {
            lease_ttl_ms: 30_000,
            shards: set(&[(1, 1), (4, 1)]),
            ..Script::default()
        },
        REPORTING,
    );
    harness.let_tasks_run().await;
    let meter = harness.shared.load_meter().clone();
    for _ in 0..50 {
        meter.record(4, 1.0).unwrap();
    }
    // The first renewal, `first` after the registration the meter's interval started with.
    let first = first_renewal(secs(30));
    sleep_until(harness.t0 + first + ms(1)).await;
    meter.record(1, 30.0).unwrap();
    sleep_until(harness.t0 + first + secs(10) + ms(1)).await;
    assert_eq!(
        renewal_loads(&harness.fake),
        [
            Some(loads(&[(1, 0.0), (4, 50.0 / first.as_secs_f64())])),
            Some(loads(&[(1, 3.0), (4, 0.0)])),
        ]
    );
    let status = harness.shared.status();
    assert_eq!(status.capacity, 3);
    assert_eq!(status.reported_loads, Some(loads(&[(1, 3.0), (4, 0.0)])));
    let registered_with = harness
        .fake
        .calls()
        .into_iter()
        .find_map(|call| match call {
            Call::Register { capacity, .. } => Some(capacity),
            _ => None,
        });
    assert_eq!(registered_with, Some(Some(3)));
    harness.stop().await;
}

/// docs/PROTOCOL.md "Versions": a cluster below cluster version 12 is never sent `loads` (its
/// managers would refuse the field), and neither is any cluster when reporting is off (the
/// manager then counts the executor as not reporting, not as idle).
#[tokio::test(start_paused = true)]
async fn p15_1_loads_go_only_to_clusters_that_take_them_and_only_when_reporting() {
    for (cluster_version, load) in [
        (FIRST_RELEASE_SCHEMA, REPORTING),
        (CAPACITY_SCHEMA, LoadSettings::default()),
    ] {
        let harness = Harness::start_with(
            Script {
                lease_ttl_ms: 30_000,
                shards: set(&[(2, 1)]),
                cluster_version,
                ..Script::default()
            },
            load,
        );
        harness.let_tasks_run().await;
        harness.shared.load_meter().record(2, 10.0).unwrap();
        sleep_until(harness.t0 + secs(20) + ms(1)).await;
        assert_eq!(
            renewal_loads(&harness.fake),
            [None, None],
            "cluster version {cluster_version}, {load:?}"
        );
        assert_eq!(harness.shared.status().reported_loads, None);
        harness.stop().await;
    }
}

/// A renewal that failed reported nothing: the next one counts the work of both intervals.
#[tokio::test(start_paused = true)]
async fn p15_1_a_failed_renewal_loses_no_measured_work() {
    let harness = Harness::start_with(
        Script {
            lease_ttl_ms: 30_000,
            shards: set(&[(0, 1)]),
            ..Script::default()
        },
        REPORTING,
    );
    harness.let_tasks_run().await;
    harness.shared.load_meter().record(0, 40.0).unwrap();
    harness.fake.script(|script| script.fail_renewals = true);
    let first = first_renewal(secs(30));
    sleep_until(harness.t0 + first + ms(1)).await;
    harness.fake.script(|script| script.fail_renewals = false);
    let failed = harness.fake.renew_instants().len();
    assert_eq!(failed, 1);
    // The retry lands within the lease (250 ms on); its report covers t0 .. retry. The renewal
    // after it is a third of the lease later.
    sleep_until(harness.t0 + first + secs(1)).await;
    let instants = harness.fake.renew_instants();
    assert!(instants.len() >= 2, "{instants:?}");
    let retried_at = (instants[1] - harness.t0).as_secs_f64();
    let reported = renewal_loads(&harness.fake);
    assert_eq!(reported[1], Some(loads(&[(0, 40.0 / retried_at)])));
    assert_eq!(
        harness.shared.status().reported_loads,
        Some(loads(&[(0, 40.0 / retried_at)]))
    );
    harness.stop().await;
}

/// P4.1, self-healing (the security review's finding 6), through the lease loop: a push at
/// u64::MAX that emptied the set is disowned by the next renewal's grant (read at revision 1,
/// sent after the push applied): the executor holds and admits the managers' set again, at
/// their revision, and its renewals report that revision.
#[tokio::test(start_paused = true)]
async fn p4_1_the_next_renewal_heals_a_forged_push_at_u64_max() {
    let harness = Harness::start(Script {
        lease_ttl_ms: 30_000,
        shards: set(&[(1, 1), (2, 1)]),
        ..Script::default()
    });
    harness.let_tasks_run().await;
    harness
        .shared
        .apply_push(&leasehold_api::wire::AssignmentPush {
            generation: 0,
            executor_id: "ex-1".into(),
            revision: u64::MAX,
            shard_count: 16,
            shards: vec![],
            secondaries: Vec::new(),
        })
        .unwrap();
    assert_eq!(harness.shared.admit(1), Err(AdmitError::NotOwner));
    // The renewal at t0 + 10 s is sent after the forgery and answered at revision 1.
    sleep_until(harness.t0 + secs(10) + ms(1)).await;
    let status = harness.shared.status();
    assert_eq!(status.revision, 1);
    assert_eq!(status.shards, set(&[(1, 1), (2, 1)]));
    assert_eq!(harness.shared.admit(2), Ok(Permit::primary(2, 1)));
    sleep_until(harness.t0 + secs(20) + ms(1)).await;
    let revisions: Vec<u64> = harness
        .fake
        .calls()
        .into_iter()
        .filter_map(|call| match call {
            Call::Renew { request, .. } => Some(request.revision),
            _ => None,
        })
        .collect();
    assert_eq!(revisions, [u64::MAX, 1]);
    harness.stop().await;
}

/// The ready lists each renewal carried, in order (P19.3).
fn renewal_ready(fake: &FakeManager) -> Vec<Vec<ShardEpoch>> {
    fake.calls()
        .into_iter()
        .filter_map(|call| match call {
            Call::Renew { request, .. } => Some(request.ready),
            _ => None,
        })
        .collect()
}

/// P19.3, docs/PROTOCOL.md "Versions": each renewal to a cluster at cluster version 13 lists
/// the whole list of ready secondaries, at the epochs the set shows (one said not ready is left
/// out, one said ready earlier is listed again); a cluster below 13 is never sent the field,
/// whatever is ready (its managers would refuse it).
#[tokio::test(start_paused = true)]
async fn p19_3_ready_is_sent_whole_and_only_from_cluster_version_13() {
    for cluster_version in [CAPACITY_SCHEMA, REPLICAS_SCHEMA] {
        let harness = Harness::start(Script {
            lease_ttl_ms: 30_000,
            shards: set(&[(1, 1)]),
            secondaries: set(&[(4, 2), (6, 3)]),
            cluster_version,
            ..Script::default()
        });
        harness.let_tasks_run().await;
        harness.shared.set_secondary_ready(4, 2, true).unwrap();
        // Renewals at t0 + 10 s, 20 s and 30 s (a third of the lease left each time, P3.5).
        sleep_until(harness.t0 + secs(10) + ms(1)).await;
        harness.shared.set_secondary_ready(6, 3, true).unwrap();
        sleep_until(harness.t0 + secs(20) + ms(1)).await;
        harness.shared.set_secondary_ready(4, 2, false).unwrap();
        sleep_until(harness.t0 + secs(30) + ms(1)).await;
        let expected = if cluster_version >= REPLICAS_SCHEMA {
            vec![set(&[(4, 2)]), set(&[(4, 2), (6, 3)]), set(&[(6, 3)])]
        } else {
            vec![Vec::new(); 3]
        };
        assert_eq!(
            renewal_ready(&harness.fake),
            expected,
            "cluster version {cluster_version}"
        );
        harness.stop().await;
    }
    // Reporting secondaries ready when held: every one, from the first renewal on.
    let harness = Harness::start_shaped(
        Script {
            lease_ttl_ms: 30_000,
            secondaries: set(&[(4, 2), (6, 3)]),
            cluster_version: REPLICAS_SCHEMA,
            ..Script::default()
        },
        LoadSettings::default(),
        |shared| shared.with_secondaries_ready_when_held(true),
    );
    sleep_until(harness.t0 + secs(10) + ms(1)).await;
    assert_eq!(renewal_ready(&harness.fake), [set(&[(4, 2), (6, 3)])]);
    assert!(harness
        .shared
        .status()
        .secondaries
        .iter()
        .all(|secondary| secondary.ready));
    harness.stop().await;
}

/// P19.1, P19.3 through the shell: a grant's secondaries are held (announced as secondaries,
/// logged with their role, listed by the status), admitted only as secondaries; when the
/// shard's primary moves elsewhere its epoch rises, and the secondary is dropped and gained at
/// the new epoch, still ready.
#[tokio::test(start_paused = true)]
async fn p19_1_a_grants_secondaries_are_held_announced_and_logged_with_their_role() {
    let mut harness = Harness::start(Script {
        lease_ttl_ms: 30_000,
        shards: set(&[(1, 1)]),
        secondaries: set(&[(4, 2)]),
        cluster_version: REPLICAS_SCHEMA,
        ..Script::default()
    });
    harness.let_tasks_run().await;
    assert_eq!(
        harness.drain_events(),
        [
            ShardEvent::Gained {
                shard: 1,
                epoch: 1,
                reason: AdmissionReason::Assigned
            },
            ShardEvent::SecondaryGained {
                shard: 4,
                epoch: 2,
                reason: AdmissionReason::Assigned
            },
        ]
    );
    assert_eq!(harness.shared.admit(4), Err(AdmitError::NotOwner));
    assert_eq!(
        harness.shared.admit_as(4, RoleWanted::Any).map(|p| p.role),
        Ok(leasehold_api::wire::Role::Secondary)
    );
    harness.shared.set_secondary_ready(4, 2, true).unwrap();
    // The primary of shard 4 moves to another executor: its epoch rises to 3.
    harness.fake.script(|script| {
        script.revision = 2;
        script.secondaries = set(&[(4, 3)]);
    });
    sleep_until(harness.t0 + secs(10) + ms(1)).await;
    assert_eq!(
        harness.drain_events(),
        [
            ShardEvent::SecondaryDropped {
                shard: 4,
                epoch: 2,
                reason: AdmissionReason::Unassigned
            },
            ShardEvent::SecondaryGained {
                shard: 4,
                epoch: 3,
                reason: AdmissionReason::Assigned
            },
        ]
    );
    assert_eq!(
        harness.shared.status().secondaries,
        [Secondary {
            shard: 4,
            epoch: 3,
            ready: true
        }]
    );
    sleep_until(harness.t0 + secs(20) + ms(1)).await;
    assert_eq!(
        renewal_ready(&harness.fake),
        [set(&[(4, 2)]), set(&[(4, 3)])]
    );
    let (_, _, log) = harness.stop().await;
    let roles: Vec<(u64, u64, String, Option<String>)> = log
        .iter()
        .map(|line| {
            (
                line["shard"].as_u64().unwrap(),
                line["epoch"].as_u64().unwrap(),
                line["event"].as_str().unwrap().to_owned(),
                line.get("role")
                    .map(|role| role.as_str().unwrap().to_owned()),
            )
        })
        .collect();
    let secondary = Some("secondary".to_owned());
    assert_eq!(
        roles,
        [
            (1, 1, "start".into(), None),
            (4, 2, "start".into(), secondary.clone()),
            (4, 2, "stop".into(), secondary.clone()),
            (4, 3, "start".into(), secondary.clone()),
            (1, 1, "stop".into(), None),
            (4, 3, "stop".into(), secondary),
        ]
    );
}
