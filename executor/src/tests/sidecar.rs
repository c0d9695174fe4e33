//! The sidecar (PROTOCOL §16) over its routers, without sockets: the local API's answers and
//! refusals, and revokes held until the service stopped admitting (P16.2).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use leasehold_api::wire::{Grant, FIRST_RELEASE_SCHEMA, REPLICAS_SCHEMA};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::http::{app, assert_problem, call};
use super::set;
use crate::admission_log::AdmissionLog;
use crate::assignment::Layout;
use crate::handle::{ExecutorHandle, Tasks};
use crate::manager::ManagerLink;
use crate::shared::{LoadSettings, Shared};
use crate::shutdown::ShutdownSignal;
use crate::sidecar::link::ServiceLink;
use crate::sidecar::{self, LocalListen};

/// A handle on `shared` whose managers are unreachable: nothing listens on port 9, so a lookup
/// of another shard's owner fails at once.
fn handle_of(shared: &Arc<Shared>) -> ExecutorHandle {
    let (shutdown_tx, _) = ShutdownSignal::new();
    handle_stopped_by(shared, shutdown_tx)
}

/// [`handle_of`], its graceful stop asked for through `shutdown_tx`.
fn handle_stopped_by(shared: &Arc<Shared>, shutdown_tx: watch::Sender<bool>) -> ExecutorHandle {
    let (server_stop_tx, _) = ShutdownSignal::new();
    let manager = ManagerLink::new(
        vec!["http://127.0.0.1:9".into()],
        Duration::from_millis(200),
        None,
    )
    .unwrap();
    ExecutorHandle::new(
        Arc::clone(shared),
        manager,
        "127.0.0.1:9".parse().unwrap(),
        Duration::from_secs(1),
        shutdown_tx,
        server_stop_tx,
    )
}

/// A sidecar registered as ex-1 at revision 10 holding shards 1 and 2 at epoch 1 for
/// `lease_ttl_ms`, its link, and its local router. Copies that run out end as they would in
/// production (the task is left to the runtime).
fn sidecar_with_lease(lease_ttl_ms: u64) -> (Arc<Shared>, Arc<ServiceLink>, Router) {
    sidecar_logging(lease_ttl_ms, None)
}

/// [`sidecar_with_lease`], writing what the service was told to `log` (`--event-log`).
fn sidecar_logging(
    lease_ttl_ms: u64,
    log: Option<AdmissionLog>,
) -> (Arc<Shared>, Arc<ServiceLink>, Router) {
    sidecar_granted(&grant_of_ex_1(lease_ttl_ms), log)
}

/// A sidecar registered by `grant`, logging what the service was told to `log`.
fn sidecar_granted(
    grant: &Grant,
    log: Option<AdmissionLog>,
) -> (Arc<Shared>, Arc<ServiceLink>, Router) {
    let link = Arc::new(ServiceLink::new(log));
    let shared = Arc::new(
        Shared::new(
            "http://127.0.0.1:9".into(),
            None,
            None,
            LoadSettings::default(),
        )
        .serving(Arc::clone(&link)),
    );
    shared.apply_grant(Instant::now(), grant).unwrap();
    let handle = handle_of(&shared);
    let ending = Arc::clone(&link);
    let (keep_running, shutdown) = ShutdownSignal::new();
    tokio::spawn(async move {
        let _keep_running = keep_running;
        ending.end_copies(shutdown).await
    });
    let router = sidecar::router(Arc::clone(&shared), Arc::clone(&link), handle, None);
    (shared, link, router)
}

/// The grant `sidecar_with_lease` registers with, and each renewal of it: ex-1 at revision 10
/// holding shards 1 and 2 at epoch 1 for `lease_ttl_ms`.
fn grant_of_ex_1(lease_ttl_ms: u64) -> Grant {
    Grant {
        generation: 0,
        shard_runs: None,
        executor_id: "ex-1".into(),
        lease_ttl_ms,
        revision: 10,
        shard_count: 8,
        shards: set(&[(1, 1), (2, 1)]),
        unchanged: false,
        secondaries: Vec::new(),
    }
}

async fn get(router: &Router, uri: &str) -> (StatusCode, Option<String>, Value) {
    call(router.clone(), "GET", uri, None).await
}

/// The acknowledgement of `answer` its poller's next poll carries (P16.1): `applied=`, `state=`
/// and `token=`.
fn ack(answer: &(StatusCode, Option<String>, Value)) -> String {
    let body = &answer.2;
    format!(
        "applied={}&state={}&token={}",
        body["revision"],
        body["state"].as_str().unwrap(),
        body["token"].as_str().unwrap()
    )
}

async fn revoke(shared: &Arc<Shared>, shards: &[u32]) -> (StatusCode, Option<String>, Value) {
    call(
        app(shared),
        "POST",
        "/v1/revoke",
        Some(json!({"executor_id": "ex-1", "revision": 12, "shards": shards})),
    )
    .await
}

/// Revokes shard 2 in a task, and returns once the revoke is applied (its answer then waits for
/// the service).
async fn revoke_applied(
    shared: &Arc<Shared>,
) -> tokio::task::JoinHandle<(StatusCode, Option<String>, Value)> {
    let revoking = {
        let shared = Arc::clone(shared);
        tokio::spawn(async move { revoke(&shared, &[2]).await })
    };
    while shared.admit(2).is_ok() {
        tokio::task::yield_now().await;
    }
    revoking
}

#[tokio::test(start_paused = true)]
async fn p16_1_the_first_poll_is_answered_at_once_with_the_shards_and_the_lease_left() {
    let (_, _, router) = sidecar_with_lease(60_000);
    let reply = get(&router, "/v1/local/permits?wait=30s").await;
    assert_eq!(reply.0, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.2["state"], "admitting");
    assert_eq!(reply.2["revision"], 10);
    assert_eq!(reply.2["executor_id"], "ex-1");
    assert_eq!(reply.2["shard_count"], 8);
    assert_eq!(
        reply.2["shards"],
        json!([{"shard": 1, "epoch": 1}, {"shard": 2, "epoch": 1}])
    );
    assert!(reply.2["lease_ttl_ms"].as_u64().unwrap() <= 60_000);
}

#[tokio::test(start_paused = true)]
async fn p16_1_a_poll_naming_the_current_answer_waits_for_wait_or_half_the_copy() {
    let (_, _, router) = sidecar_with_lease(60_000);
    let first = get(&router, "/v1/local/permits").await;
    let sent = Instant::now();
    let second = get(
        &router,
        &format!("/v1/local/permits?{}&wait=5s", ack(&first)),
    )
    .await;
    assert_eq!(
        sent.elapsed(),
        Duration::from_secs(5),
        "nothing changed: held for wait"
    );
    assert_ne!(
        second.2["token"], first.2["token"],
        "each answer has its own"
    );
    // A wait longer than half the copy's time left is cut there, so the copy is refreshed live.
    // The service counts the copy from the send of the poll held 5 s: 50 s of it are left.
    let sent = Instant::now();
    get(
        &router,
        &format!("/v1/local/permits?{}&wait=60s", ack(&second)),
    )
    .await;
    let held = sent.elapsed();
    assert!(
        held <= Duration::from_secs(25) && held >= Duration::from_millis(24_990),
        "held {held:?}"
    );
}

/// P16.1: a service that polls again at once never lets a live copy lapse. At a 3 s lease the
/// sidecar renews every second, so a renewal lengthens the lease left without changing the
/// answer, and the poll is held for half the time left on the service's copy. The service
/// anchors each copy at its poll's send; each answer must reach it well before the copy it holds
/// runs out (counted from the sidecar's answers instead, 9 answers in 21 came after). The clock
/// is tokio's, paused: a poll arrives the instant it is sent.
#[tokio::test(start_paused = true)]
async fn p16_1_a_service_polling_at_once_never_lets_its_copy_lapse_at_a_3s_lease() {
    const LEASE_TTL_MS: u64 = 3_000;
    let (shared, _, router) = sidecar_with_lease(LEASE_TTL_MS);
    let renewals = tokio::spawn({
        let shared = Arc::clone(&shared);
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(LEASE_TTL_MS / 3)).await;
                shared
                    .apply_grant(Instant::now(), &grant_of_ex_1(LEASE_TTL_MS))
                    .unwrap();
            }
        }
    });
    let copy_of = |sent: Instant, answer: &Value| {
        sent + Duration::from_millis(answer["lease_ttl_ms"].as_u64().unwrap())
    };
    let began = Instant::now();
    let mut answer = get(&router, "/v1/local/permits").await.2;
    let mut copy_end = copy_of(began, &answer);
    let mut margins_ms = Vec::new();
    while began.elapsed() < Duration::from_secs(60) {
        let sent = Instant::now();
        let uri = format!(
            "/v1/local/permits?applied={}&state={}&token={}&wait=60s",
            answer["revision"],
            answer["state"].as_str().unwrap(),
            answer["token"].as_str().unwrap()
        );
        answer = get(&router, &uri).await.2;
        assert_eq!(answer["state"], "admitting", "{answer}");
        let received = Instant::now();
        let ms = |duration: Duration| i64::try_from(duration.as_millis()).unwrap();
        margins_ms.push(
            ms(copy_end.saturating_duration_since(received))
                - ms(received.saturating_duration_since(copy_end)),
        );
        copy_end = copy_of(sent, &answer);
    }
    renewals.abort();
    let least_ms = margins_ms.iter().copied().min().unwrap();
    assert!(
        margins_ms.len() >= 40 && least_ms >= i64::try_from(LEASE_TTL_MS / 8).unwrap(),
        "{} answers; each came this many ms before the service's copy ran out: {margins_ms:?}",
        margins_ms.len()
    );
}

/// P16.2: a sidecar that exits while its service may still admit shards (it never
/// acknowledged `stopping`) logs each one's stop at the end of the copy the service holds,
/// before it exits: nothing is logged later, and an interval left open would last for ever.
#[tokio::test(start_paused = true)]
async fn p16_2_an_exiting_sidecar_logs_the_end_of_the_services_copy() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("events.jsonl");
    let log = AdmissionLog::open(&log_path).unwrap();
    let (shared, _, router) = sidecar_logging(3_000, Some(log));
    let answer = get(&router, "/v1/local/permits").await;
    let lease_ttl_ms = answer.2["lease_ttl_ms"].as_u64().unwrap();
    let handle = handle_of(&shared);
    handle
        .hold(Tasks {
            lease: tokio::spawn(async { crate::status::RunState::Stopped }),
            lapse_watcher: tokio::spawn(async {}),
            server: tokio::spawn(async {}),
            sidecar: None,
        })
        .await;
    handle.shutdown().await;
    let lines: Vec<Value> = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let events: Vec<(u64, &str, &str)> = lines
        .iter()
        .map(|line| {
            (
                line["shard"].as_u64().unwrap(),
                line["event"].as_str().unwrap(),
                line["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (1, "start", "assigned"),
            (2, "start", "assigned"),
            (1, "stop", "lease_lapsed"),
            (2, "stop", "lease_lapsed"),
        ]
    );
    let t_ns = |line: &Value| line["t_ns"].as_u64().unwrap();
    let copy_ns = lease_ttl_ms * 1_000_000;
    for (start, stop) in [(&lines[0], &lines[2]), (&lines[1], &lines[3])] {
        let interval_ns = t_ns(stop) - t_ns(start);
        // Not before the copy's end; later only by the real time the test took (the tokio
        // clock is paused, CLOCK_MONOTONIC is not).
        assert!(
            interval_ns >= copy_ns && interval_ns < copy_ns + 1_000_000_000,
            "{interval_ns} ns for a copy of {lease_ttl_ms} ms"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn p16_2_a_revoke_is_held_until_the_service_acknowledges_an_answer_without_the_shard() {
    let (shared, link, router) = sidecar_with_lease(60_000);
    let first = get(&router, "/v1/local/permits").await;
    let revoking = revoke_applied(&shared).await;
    // The poll the service has outstanding names revision 10: the revoke changed it.
    let answer = get(
        &router,
        &format!("/v1/local/permits?{}&wait=30s", ack(&first)),
    )
    .await;
    assert_eq!(answer.2["revision"], 12);
    assert_eq!(answer.2["shards"], json!([{"shard": 1, "epoch": 1}]));
    tokio::task::yield_now().await;
    assert!(
        !revoking.is_finished(),
        "answered before the service acknowledged"
    );
    assert!(link.copy_end().is_some());
    // An acknowledgement of revision 12 without the answer's token, or with another, counts for
    // nothing (P16.1): whoever sends it did not receive the answer.
    for forged in [
        "applied=12&state=admitting".to_owned(),
        "applied=12&state=admitting&token=00000000000000000000000000000000".to_owned(),
        format!(
            "applied=12&state=admitting&token={}",
            first.2["token"].as_str().unwrap()
        ),
        "applied=12&state=admitting&token=not-a-token".to_owned(),
    ] {
        let reply = get(&router, &format!("/v1/local/permits?{forged}")).await;
        assert_eq!(reply.0, StatusCode::OK, "{forged}: {reply:?}");
        assert!(reply.2["token"].is_string(), "{reply:?}");
        tokio::task::yield_now().await;
        assert!(
            !revoking.is_finished(),
            "{forged}: acknowledged for the service"
        );
    }
    // The next poll acknowledges revision 12 with its answer's token: only now is shard 2
    // released.
    let ack = tokio::spawn({
        let router = router.clone();
        let ack = ack(&answer);
        async move { get(&router, &format!("/v1/local/permits?{ack}&wait=10s")).await }
    });
    let reply = revoking.await.unwrap();
    assert_eq!(reply.0, StatusCode::OK, "{reply:?}");
    assert_eq!(
        reply.2,
        json!({"revision": 12, "released": [2], "ignored": false})
    );
    ack.abort();
}

#[tokio::test(start_paused = true)]
async fn p16_2_renewals_claim_what_the_service_may_still_admit() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    let first = get(&router, "/v1/local/permits").await;
    let revoking = revoke_applied(&shared).await;
    let answer = get(&router, &format!("/v1/local/permits?{}", ack(&first))).await;
    assert_eq!(answer.2["shards"], json!([{"shard": 1, "epoch": 1}]));
    // The sidecar no longer holds shard 2, but a renewal omitting it would acknowledge the
    // revoke (P5.2) while the service may still admit it.
    let renewal = shared.renewal(FIRST_RELEASE_SCHEMA).unwrap();
    let claimed: Vec<u32> = renewal.request.claims.iter().map(|c| c.shard).collect();
    assert_eq!(claimed, [1, 2]);
    get(&router, &format!("/v1/local/permits?{}", ack(&answer))).await;
    assert_eq!(revoking.await.unwrap().2["released"], json!([2]));
    let renewal = shared.renewal(FIRST_RELEASE_SCHEMA).unwrap();
    let claimed: Vec<u32> = renewal.request.claims.iter().map(|c| c.shard).collect();
    assert_eq!(claimed, [1]);
}

#[tokio::test(start_paused = true)]
async fn p16_2_without_an_acknowledgement_a_revoke_is_refused_while_the_copy_is_live() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    get(&router, "/v1/local/permits").await;
    let sent = Instant::now();
    let reply = revoke(&shared, &[2]).await;
    assert_problem(&reply, 503, "unavailable");
    assert_eq!(sent.elapsed(), sidecar::REVOKE_HOLD);
    // The sidecar itself no longer admits the shard, whatever the service does.
    assert!(shared.admit(2).is_err());
}

#[tokio::test(start_paused = true)]
async fn p16_2_a_revoke_is_answered_released_once_the_services_copy_ran_out() {
    let (shared, _, router) = sidecar_with_lease(1_000);
    get(&router, "/v1/local/permits").await;
    let sent = Instant::now();
    let reply = revoke(&shared, &[2]).await;
    assert_eq!(reply.0, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.2["released"], json!([2]));
    assert!(
        sent.elapsed() <= Duration::from_secs(1),
        "{:?}",
        sent.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn p16_2_a_service_never_told_the_shard_does_not_hold_the_revoke() {
    let (shared, _, _) = sidecar_with_lease(60_000);
    let sent = Instant::now();
    let reply = revoke(&shared, &[2]).await;
    assert_eq!(reply.2["released"], json!([2]));
    assert_eq!(sent.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn p16_2_an_admit_permit_holds_a_revoke_for_its_window_only() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    let permit = get(&router, "/v1/local/admit?shard=2").await;
    assert_eq!(permit.0, StatusCode::OK, "{permit:?}");
    assert_eq!(
        permit.2,
        json!({"shard": 2, "epoch": 1, "lease_ttl_ms": 1000})
    );
    let sent = Instant::now();
    let reply = revoke(&shared, &[2]).await;
    assert_eq!(reply.2["released"], json!([2]));
    assert_eq!(sent.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn p16_1_admit_answers_by_key_and_refuses_what_it_does_not_hold() {
    let (_, _, router) = sidecar_with_lease(60_000);
    // fnv1a_64("a") % 8 = 4: not held, and the owner cannot be looked up here.
    let reply = get(&router, "/v1/local/admit?key=a").await;
    assert_problem(&reply, 503, "unavailable");
}

#[tokio::test(start_paused = true)]
async fn i6_bad_local_requests_are_400_problems() {
    let (_, _, router) = sidecar_with_lease(60_000);
    for uri in [
        "/v1/local/permits?state=sleeping",
        "/v1/local/permits?applied=-1",
        "/v1/local/permits?wait=soon",
        "/v1/local/permits?wait=61s",
        "/v1/local/permits?color=red",
        "/v1/local/admit",
        "/v1/local/admit?key=a&shard=1",
        "/v1/local/admit?shard=8",
        "/v1/local/admit?shard=x",
    ] {
        let reply = get(&router, uri).await;
        assert_problem(&reply, 400, "invalid_request");
    }
    let reply = call(router.clone(), "GET", "/v1/local/stop", None).await;
    assert_problem(&reply, 405, "method_not_allowed");
    let reply = get(&router, "/v1/local/elsewhere").await;
    assert_problem(&reply, 404, "not_found");
}

/// P13.6 on the local API: a page in a browser on the machine can neither stop the sidecar nor
/// read what it holds.
#[tokio::test(start_paused = true)]
async fn p13_6_a_browser_page_is_kept_out_of_a_loopback_local_api() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    let (shared, link, _) = sidecar_with_lease(60_000);
    let handle = handle_of(&shared);
    let router = sidecar::router(
        shared,
        link,
        handle,
        Some(leasehold_api::origin::HostPolicy::loopback(
            "http://127.0.0.1:7201",
        )),
    );
    let send = |method: &str, uri: &str, headers: &[(&str, &str)]| {
        let mut request = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        router.clone().oneshot(request.body(Body::empty()).unwrap())
    };
    let cross_site = send(
        "POST",
        "/v1/local/stop",
        &[
            ("host", "127.0.0.1:7201"),
            ("origin", "http://evil.example"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    let rebound = send("GET", "/v1/local/permits", &[("host", "evil.example:7201")])
        .await
        .unwrap();
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
    let local = send("GET", "/v1/local/permits", &[("host", "127.0.0.1:7201")])
        .await
        .unwrap();
    assert_eq!(local.status(), StatusCode::OK);
}

/// Sends `method uri` with `headers` to `router`.
async fn send(
    router: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
) -> axum::response::Response {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

/// The local router of a sidecar holding shards 1 and 2 for a minute, on a loopback listener
/// (its Host policy) or on a unix socket (none).
fn guarded_sidecar(loopback: bool) -> (Arc<Shared>, Router) {
    let (shared, link, _) = sidecar_with_lease(60_000);
    let handle = handle_of(&shared);
    let policy =
        loopback.then(|| leasehold_api::origin::HostPolicy::loopback("http://127.0.0.1:7201"));
    let router = sidecar::router(Arc::clone(&shared), link, handle, policy);
    (shared, router)
}

/// P16.1, issue 55: a page in a browser gets nothing from any local route, reads included, on a
/// loopback listener or a unix socket: not by `Sec-Fetch-Site` (an image's GET has no `Origin`),
/// not by a foreign `Origin`. Refused before anything is recorded: the refused permits polls and
/// admits told the service nothing, so a revoke is answered at once.
#[tokio::test(start_paused = true)]
async fn p16_1_a_page_gets_nothing_from_any_local_route() {
    for loopback in [true, false] {
        let (shared, router) = guarded_sidecar(loopback);
        let host = ("host", "127.0.0.1:7201");
        let pages: [&[(&str, &str)]; 5] = [
            &[host, ("sec-fetch-site", "cross-site")],
            &[host, ("sec-fetch-site", "same-site")],
            &[host, ("origin", "http://evil.example")],
            &[host, ("origin", "null")],
            &[
                host,
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://127.0.0.1:7201"),
            ],
        ];
        let routes = [
            ("GET", "/v1/local/permits"),
            (
                "GET",
                "/v1/local/permits?applied=10&state=admitting&wait=30s",
            ),
            ("GET", "/v1/local/admit?shard=2"),
            ("GET", "/v1/local/admit?key=a"),
            ("POST", "/v1/local/prepared?shard=5&epoch=3"),
            ("POST", "/v1/local/stop"),
            ("GET", "/v1/local/elsewhere"),
        ];
        for headers in pages {
            for (method, uri) in routes {
                let reply = send(&router, method, uri, headers).await;
                assert_eq!(
                    reply.status(),
                    StatusCode::FORBIDDEN,
                    "loopback {loopback}: {method} {uri} {headers:?}"
                );
                let body = axum::body::to_bytes(reply.into_body(), 1 << 16)
                    .await
                    .unwrap();
                let problem: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(problem["code"], "forbidden", "{problem}");
            }
        }
        assert!(!shared.view_at(Instant::now()).stopping);
        let sent = Instant::now();
        let reply = revoke(&shared, &[2]).await;
        assert_eq!(reply.2["released"], json!([2]), "{reply:?}");
        assert_eq!(
            sent.elapsed(),
            Duration::ZERO,
            "loopback {loopback}: a refused request told the service a shard"
        );
    }
}

/// P16.1: the service itself (no Fetch Metadata, no Origin), a same-origin request and one the
/// user typed (`Sec-Fetch-Site: none`) are answered.
#[tokio::test(start_paused = true)]
async fn p16_1_the_service_same_origin_and_typed_requests_are_answered() {
    for loopback in [true, false] {
        let (_, router) = guarded_sidecar(loopback);
        let host = ("host", "127.0.0.1:7201");
        let allowed: [&[(&str, &str)]; 4] = [
            &[host],
            &[host, ("sec-fetch-site", "same-origin")],
            &[host, ("sec-fetch-site", "none")],
            &[host, ("origin", "http://127.0.0.1:7201")],
        ];
        for headers in allowed {
            for uri in ["/v1/local/permits", "/v1/local/admit?shard=1"] {
                let reply = send(&router, "GET", uri, headers).await;
                assert_eq!(
                    reply.status(),
                    StatusCode::OK,
                    "loopback {loopback}: {uri} {headers:?}"
                );
            }
        }
    }
}

/// P16.1, I1 (issue 55): an acknowledgement counts only with the token of the answer it names,
/// which only the poller that received it knows. A spray of `applied=` past the current
/// revision, without tokens, with invented ones and with the service's old one, leaves a dropped
/// shard told: the revoke is held.
#[tokio::test(start_paused = true)]
async fn p16_1_an_acknowledgement_without_the_answers_token_does_not_count() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    let first = get(&router, "/v1/local/permits").await;
    let revoking = revoke_applied(&shared).await;
    let answer = get(&router, &format!("/v1/local/permits?{}", ack(&first))).await;
    assert_eq!(answer.2["revision"], 12);
    let old_token = first.2["token"].as_str().unwrap();
    for applied in 10..=40 {
        for token in [
            String::new(),
            "&token=0123456789abcdef0123456789abcdef".to_owned(),
            format!("&token={old_token}"),
        ] {
            for state in ["admitting", "fenced", "stopping"] {
                let uri = format!("/v1/local/permits?applied={applied}&state={state}{token}");
                let reply = get(&router, &uri).await;
                assert_eq!(reply.0, StatusCode::OK, "{uri}: {reply:?}");
            }
        }
    }
    let refused = get(
        &router,
        "/v1/local/permits?token=0123456789abcdef0123456789abcdef",
    )
    .await;
    assert_problem(&refused, 400, "invalid_request");
    let reply = revoking.await.unwrap();
    assert_problem(&reply, 503, "unavailable");
    assert!(shared.service().unwrap().copy_end().is_some());
    // The service's own acknowledgement, with its answer's token, counts at once.
    let sent = Instant::now();
    let acknowledging = tokio::spawn({
        let router = router.clone();
        let ack = ack(&answer);
        async move { get(&router, &format!("/v1/local/permits?{ack}&wait=10s")).await }
    });
    let reply = revoke(&shared, &[2]).await;
    assert_eq!(reply.2["released"], json!([2]), "{reply:?}");
    assert!(sent.elapsed() < Duration::from_millis(10));
    acknowledging.abort();
}

/// P16.2, issue 55: admits repeated as fast as they are answered hold a revoke for one admit
/// window at most: a permit is given only while the sidecar holds the shard, so once the revoke
/// is applied none extends the hold, and none ends another poller's hold either.
#[tokio::test(start_paused = true)]
async fn p16_2_repeated_admits_hold_a_revoke_for_one_window_at_most() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    let admitting = tokio::spawn({
        let router = router.clone();
        async move {
            let mut refused = 0;
            while refused < 50 {
                let reply = get(&router, "/v1/local/admit?shard=2").await;
                if reply.0 != StatusCode::OK {
                    refused += 1;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = Instant::now();
    let reply = revoke(&shared, &[2]).await;
    assert_eq!(reply.0, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.2["released"], json!([2]));
    assert!(
        sent.elapsed() <= Duration::from_millis(leasehold_api::wire::LOCAL_ADMIT_WINDOW_MS),
        "held {:?}",
        sent.elapsed()
    );
    admitting.await.unwrap();
}

#[test]
fn p16_1_the_local_api_listens_on_loopback_or_a_unix_socket_only() {
    assert_eq!(
        "127.0.0.1:7201".parse::<LocalListen>(),
        Ok(LocalListen::Loopback("127.0.0.1:7201".parse().unwrap()))
    );
    assert!("[::1]:7201".parse::<LocalListen>().is_ok());
    assert_eq!(
        "unix:/run/lh.sock".parse::<LocalListen>(),
        Ok(LocalListen::Unix("/run/lh.sock".into()))
    );
    for refused in ["0.0.0.0:7201", "10.0.0.4:7201", "unix:", "localhost", ""] {
        assert!(refused.parse::<LocalListen>().is_err(), "{refused}");
    }
}

/// A service taking `--app-url` pushes on a real socket: every body it received, and the status
/// it answers with.
async fn app_taking_pushes(status: StatusCode) -> (String, Arc<std::sync::Mutex<Vec<Value>>>) {
    let received = Arc::new(std::sync::Mutex::new(Vec::new()));
    let app = Router::new().route(
        "/leasehold",
        axum::routing::put({
            let received = Arc::clone(&received);
            move |axum::Json(body): axum::Json<Value>| {
                let received = Arc::clone(&received);
                async move {
                    received.lock().unwrap().push(body);
                    status
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/leasehold", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// Spawns the push task of a sidecar; the sender stops it.
fn push_to(shared: &Arc<Shared>, link: &Arc<ServiceLink>, url: &str) -> watch::Sender<bool> {
    let (stop_tx, stop) = ShutdownSignal::new();
    tokio::spawn(sidecar::push_to_app(
        Arc::clone(shared),
        Arc::clone(link),
        url.to_owned(),
        stop,
    ));
    stop_tx
}

async fn wait_for_push(received: &std::sync::Mutex<Vec<Value>>, count: usize) -> Value {
    for _ in 0..200 {
        if let Some(body) = received.lock().unwrap().get(count - 1) {
            return body.clone();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no push number {count}");
}

#[tokio::test]
async fn p16_1_app_url_pushes_the_answer_and_a_2xx_acknowledges_it() {
    let (shared, link, _) = sidecar_with_lease(60_000);
    let (url, received) = app_taking_pushes(StatusCode::NO_CONTENT).await;
    let _stop = push_to(&shared, &link, &url);
    let first = wait_for_push(&received, 1).await;
    assert_eq!(first["state"], "admitting");
    assert_eq!(first["revision"], 10);
    let deadline_ns = first["lease_expires_monotonic_ns"].as_u64().unwrap();
    let now_ns = crate::admission_log::MonotonicReading::now()
        .unwrap()
        .monotonic_ns();
    assert!(deadline_ns > now_ns && deadline_ns <= now_ns + 60_000_000_000);
    // The revoke is pushed at once, and the 2xx acknowledges it: released without waiting
    // for the copy (P16.2).
    let reply = revoke(&shared, &[2]).await;
    assert_eq!(reply.2["released"], json!([2]), "{reply:?}");
    let second = wait_for_push(&received, 2).await;
    assert_eq!(second["revision"], 12);
    assert_eq!(second["shards"], json!([{"shard": 1, "epoch": 1}]));
}

#[tokio::test]
async fn p16_2_a_push_the_service_refuses_acknowledges_nothing() {
    let (shared, link, _) = sidecar_with_lease(60_000);
    let (url, received) = app_taking_pushes(StatusCode::INTERNAL_SERVER_ERROR).await;
    let _stop = push_to(&shared, &link, &url);
    wait_for_push(&received, 1).await;
    let reply = revoke(&shared, &[2]).await;
    assert_problem(&reply, 503, "unavailable");
}

#[test]
fn p16_1_app_url_is_http_on_this_machine_only() {
    for accepted in [
        "http://127.0.0.1:7301/leasehold",
        "http://[::1]:7301/",
        "http://localhost:7301/x",
    ] {
        assert_eq!(sidecar::check_app_url(accepted), Ok(()), "{accepted}");
    }
    for refused in [
        "https://127.0.0.1:7301/",
        "http://10.1.2.3:7301/",
        "http://example.com/",
        "127.0.0.1:7301",
        "",
    ] {
        assert!(sidecar::check_app_url(refused).is_err(), "{refused}");
    }
}

async fn prepare(shared: &Arc<Shared>, shards: Value, wait_ms: u64) -> Value {
    let body = json!({"executor_id": "ex-1", "revision": 10, "shards": shards, "wait_ms": wait_ms});
    let (status, _, reply) = call(app(shared), "POST", "/v1/prepare", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    reply
}

async fn post(router: &Router, uri: &str) -> (StatusCode, Option<String>, Value) {
    call(router.clone(), "POST", uri, None).await
}

/// P17.1 through the sidecar: a service that never said it prepares is not waited for.
#[tokio::test(start_paused = true)]
async fn p17_1_a_service_that_does_not_prepare_never_delays_a_handoff() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    get(&router, "/v1/local/permits").await;
    let sent = Instant::now();
    let reply = prepare(&shared, json!([{"shard": 5, "epoch": 3}]), 2_000).await;
    assert_eq!(reply, json!({"prepared": [5]}));
    assert_eq!(sent.elapsed(), Duration::ZERO);
    let answer = get(&router, "/v1/local/permits").await;
    assert!(answer.2.get("preparing").is_none(), "{answer:?}");
}

/// P17.1 through the sidecar: a service polling with `prepare=true` is told at once which shards
/// to prepare for (its outstanding poll wakes), the prepare waits for its
/// `POST /v1/local/prepared`, and nothing is admitted because of it.
#[tokio::test(start_paused = true)]
async fn p17_1_the_service_prepares_through_the_local_api() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    get(&router, "/v1/local/permits?prepare=true").await;
    let polling = tokio::spawn({
        let router = router.clone();
        async move {
            get(
                &router,
                "/v1/local/permits?applied=10&state=admitting&wait=30s&prepare=true",
            )
            .await
        }
    });
    let preparing = tokio::spawn({
        let shared = Arc::clone(&shared);
        async move {
            let sent = Instant::now();
            let reply = prepare(
                &shared,
                json!([{"shard": 5, "epoch": 3}, {"shard": 6, "epoch": 1}]),
                2_000,
            )
            .await;
            (reply, sent.elapsed())
        }
    });
    let answer = polling.await.unwrap();
    assert_eq!(answer.0, StatusCode::OK);
    assert_eq!(answer.2["revision"], 10, "the set did not change");
    assert_eq!(
        answer.2["preparing"],
        json!([{"shard": 5, "epoch": 3}, {"shard": 6, "epoch": 1}])
    );
    assert!(shared.admit(5).is_err(), "preparing admits nothing");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = post(&router, "/v1/local/prepared?shard=5&epoch=2").await;
    assert_problem(&refused, 409, "conflict");
    let bad = post(&router, "/v1/local/prepared?shard=5").await;
    assert_problem(&bad, 400, "invalid_request");
    let done = post(&router, "/v1/local/prepared?shard=5&epoch=3").await;
    assert_eq!(done.0, StatusCode::NO_CONTENT, "{done:?}");
    let next = get(&router, "/v1/local/permits?prepare=true").await;
    assert_eq!(next.2["preparing"], json!([{"shard": 6, "epoch": 1}]));
    let done = post(&router, "/v1/local/prepared?shard=6&epoch=1").await;
    assert_eq!(done.0, StatusCode::NO_CONTENT, "{done:?}");
    let (reply, took) = preparing.await.unwrap();
    assert_eq!(reply, json!({"prepared": [5, 6]}));
    assert_eq!(
        took,
        Duration::from_millis(300),
        "answered once both were prepared"
    );
    let after = get(&router, "/v1/local/permits").await;
    assert!(after.2.get("preparing").is_none(), "{after:?}");
    let late = post(&router, "/v1/local/prepared?shard=6&epoch=1").await;
    assert_problem(&late, 409, "conflict");
}

/// P17.1 through the sidecar: a service slow to prepare delays the handoff by the leader's wait,
/// no longer, and the prepare names only what it prepared.
#[tokio::test(start_paused = true)]
async fn p17_1_a_service_slow_to_prepare_is_waited_for_only_the_wait() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    get(&router, "/v1/local/permits?prepare=true").await;
    let sent = Instant::now();
    let reply = prepare(&shared, json!([{"shard": 5, "epoch": 3}]), 2_000).await;
    assert_eq!(reply, json!({"prepared": []}));
    assert_eq!(sent.elapsed(), Duration::from_secs(2));
    let after = get(&router, "/v1/local/permits").await;
    assert!(
        after.2.get("preparing").is_none(),
        "nothing waits for shard 5 any more: {after:?}"
    );
}

/// P17.1 through `--app-url`: the push lists the shards to prepare, and its `2xx` says the
/// service prepared them.
#[tokio::test]
async fn p17_1_a_pushed_service_prepares_by_answering_the_push() {
    let (shared, link, _) = sidecar_with_lease(60_000);
    let (url, received) = app_taking_pushes(StatusCode::NO_CONTENT).await;
    let _stop = push_to(&shared, &link, &url);
    wait_for_push(&received, 1).await;
    let reply = prepare(&shared, json!([{"shard": 5, "epoch": 3}]), 5_000).await;
    assert_eq!(reply, json!({"prepared": [5]}));
    let second = wait_for_push(&received, 2).await;
    assert_eq!(second["preparing"], json!([{"shard": 5, "epoch": 3}]));
}

/// P3.7: the service's `POST /v1/local/stop` is accepted (`202`) and begins the executor's graceful
/// stop, as SIGTERM would.
#[tokio::test]
async fn p3_7_the_service_asks_for_the_graceful_stop() {
    let (shared, link, _) = sidecar_with_lease(3_000);
    let (shutdown_tx, mut shutdown) = ShutdownSignal::new();
    let handle = handle_stopped_by(&shared, shutdown_tx);
    let router = sidecar::router(Arc::clone(&shared), link, handle, None);
    let (status, _, body) = call(router, "POST", "/v1/local/stop", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    tokio::time::timeout(Duration::from_secs(10), shutdown.wait())
        .await
        .expect("the graceful stop began");
}

/// ex-1's grant with a secondary of shard 5 at epoch 3 (PROTOCOL P19.1), beside its primaries 1
/// and 2 at epoch 1.
fn grant_with_a_secondary() -> Grant {
    Grant {
        secondaries: set(&[(5, 3)]),
        ..grant_of_ex_1(60_000)
    }
}

/// P19.5: `role=` asks for the primary (the default, the body unchanged), a secondary, or
/// either; a secondary's permit says so. A secondary is never given a primary permit, a primary
/// never a secondary's, and a role that is none of the three is a `400`.
#[tokio::test(start_paused = true)]
async fn p19_5_admit_takes_a_role_defaulting_to_the_primary() {
    let (_, _, router) = sidecar_granted(&grant_with_a_secondary(), None);
    let primary = json!({"shard": 1, "epoch": 1, "lease_ttl_ms": 1000});
    for uri in [
        "/v1/local/admit?shard=1",
        "/v1/local/admit?shard=1&role=primary",
        "/v1/local/admit?shard=1&role=any",
    ] {
        let reply = get(&router, uri).await;
        assert_eq!((reply.0, &reply.2), (StatusCode::OK, &primary), "{uri}");
    }
    let secondary = json!({"shard": 5, "epoch": 3, "lease_ttl_ms": 1000, "role": "secondary"});
    for uri in [
        "/v1/local/admit?shard=5&role=secondary",
        "/v1/local/admit?shard=5&role=any",
    ] {
        let reply = get(&router, uri).await;
        assert_eq!((reply.0, &reply.2), (StatusCode::OK, &secondary), "{uri}");
    }
    // Shard 5 as the primary: not held so; the owner cannot be looked up here.
    for uri in [
        "/v1/local/admit?shard=5",
        "/v1/local/admit?shard=5&role=primary",
    ] {
        let reply = get(&router, uri).await;
        assert_problem(&reply, 503, "unavailable");
    }
    let reply = get(&router, "/v1/local/admit?shard=1&role=secondary").await;
    assert_problem(&reply, 409, "conflict");
    for uri in [
        "/v1/local/admit?shard=1&role=leader",
        "/v1/local/admit?shard=1&role=",
        "/v1/local/admit?shard=1&role=Secondary",
        "/v1/local/admit?key=a&role=both",
    ] {
        let reply = get(&router, uri).await;
        assert_problem(&reply, 400, "invalid_request");
    }
}

/// P19.5, P16.2: a secondary's permit is logged with its role, and ends with its window; it is
/// no claim of the renewals and holds no revoke (a revoke is the primary's handoff).
#[tokio::test(start_paused = true)]
async fn p19_5_a_secondarys_permit_is_logged_with_its_role_and_holds_no_handoff() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("events.jsonl");
    let log = AdmissionLog::open(&log_path).unwrap();
    let (shared, link, router) = sidecar_granted(&grant_with_a_secondary(), Some(log));
    let reply = get(&router, "/v1/local/admit?shard=5&role=secondary").await;
    assert_eq!(reply.0, StatusCode::OK, "{reply:?}");
    assert!(
        link.told(Layout::default()).is_empty(),
        "not told as the primary"
    );
    let renewal = shared.renewal(REPLICAS_SCHEMA).unwrap();
    assert_eq!(
        renewal.request.claims,
        set(&[(1, 1), (2, 1)]),
        "no claim of 5"
    );
    let sent = Instant::now();
    let reply = revoke(&shared, &[5]).await;
    assert_eq!(reply.2["released"], json!([5]));
    assert_eq!(
        sent.elapsed(),
        Duration::ZERO,
        "not held by the secondary's permit"
    );
    tokio::time::sleep(Duration::from_millis(1_001)).await;
    let lines: Vec<Value> = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let events: Vec<(u64, u64, &str, &str, &str)> = lines
        .iter()
        .map(|line| {
            (
                line["shard"].as_u64().unwrap(),
                line["epoch"].as_u64().unwrap(),
                line["event"].as_str().unwrap(),
                line["reason"].as_str().unwrap(),
                line["role"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (5, 3, "start", "assigned", "secondary"),
            (5, 3, "stop", "lease_lapsed", "secondary"),
        ]
    );
    // The primary's permit, at the same time as a secondary's of another shard: logged as
    // before, without a role.
    get(&router, "/v1/local/admit?shard=5&role=secondary").await;
    get(&router, "/v1/local/admit?shard=2").await;
    let last = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .last()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .unwrap();
    assert_eq!(last["shard"], 2);
    assert!(last.get("role").is_none(), "{last}");
}

/// P19.3 through the sidecar: the permits answers list the secondaries with their readiness;
/// the service says one ready at the epoch they show (`POST /v1/local/ready`), and the
/// renewals say so from then on; ready at another epoch, or of a shard that is no secondary, is
/// a `409` and changes nothing; not ready is always taken.
#[tokio::test(start_paused = true)]
async fn p19_3_the_service_says_a_secondary_ready_through_the_local_api() {
    let (shared, _, router) = sidecar_granted(&grant_with_a_secondary(), None);
    let answer = get(&router, "/v1/local/permits").await;
    assert_eq!(answer.2["secondaries"], json!([{"shard": 5, "epoch": 3}]));
    assert_eq!(
        answer.2["shards"],
        json!([{"shard": 1, "epoch": 1}, {"shard": 2, "epoch": 1}]),
        "a secondary is no shard to admit"
    );
    let ready = |body: Value| {
        let router = router.clone();
        async move { call(router, "POST", "/v1/local/ready", Some(body)).await }
    };
    for refused in [
        json!({"shard": 5, "epoch": 2, "ready": true}),
        json!({"shard": 1, "epoch": 1, "ready": true}),
        json!({"shard": 6, "epoch": 3, "ready": true}),
    ] {
        let reply = ready(refused.clone()).await;
        assert_problem(&reply, 409, "conflict");
    }
    let renewed_ready = || shared.renewal(REPLICAS_SCHEMA).unwrap().request.ready;
    assert!(renewed_ready().is_empty(), "refusals change nothing");
    let reply = ready(json!({"shard": 5, "epoch": 3, "ready": true})).await;
    assert_eq!(reply.0, StatusCode::NO_CONTENT, "{reply:?}");
    assert_eq!(renewed_ready(), set(&[(5, 3)]));
    let answer = get(&router, "/v1/local/permits").await;
    assert_eq!(
        answer.2["secondaries"],
        json!([{"shard": 5, "epoch": 3, "ready": true}])
    );
    let reply = ready(json!({"shard": 5, "epoch": 2, "ready": false})).await;
    assert_eq!(reply.0, StatusCode::NO_CONTENT, "{reply:?}");
    assert!(renewed_ready().is_empty());
    for malformed in [
        json!({"shard": 8, "epoch": 3, "ready": true}),
        json!({"shard": 5, "epoch": 3}),
        json!({"shard": 5, "epoch": 3, "ready": "yes"}),
        json!({"shard": 5, "epoch": 3, "ready": true, "role": "secondary"}),
        json!([{"shard": 5, "epoch": 3, "ready": true}]),
    ] {
        let reply = ready(malformed.clone()).await;
        assert_problem(&reply, 400, "invalid_request");
    }
    let reply = post(&router, "/v1/local/ready").await;
    assert_eq!(reply.0, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{reply:?}");
}

/// The split of `grant_of_ex_1`'s namespace from 8 shards to 16 (generation 1): shards 1 and 2
/// and their children 9 and 10, all at epoch 2.
fn split_of_ex_1(lease_ttl_ms: u64) -> Grant {
    Grant {
        generation: 1,
        revision: 20,
        shard_count: 16,
        shards: set(&[(1, 2), (2, 2), (9, 2), (10, 2)]),
        ..grant_of_ex_1(lease_ttl_ms)
    }
}

async fn revoke_in(
    shared: &Arc<Shared>,
    revision: u64,
    generation: u64,
    shards: &[u32],
) -> (StatusCode, Option<String>, Value) {
    let body = json!({
        "executor_id": "ex-1", "revision": revision, "generation": generation, "shards": shards
    });
    call(app(shared), "POST", "/v1/revoke", Some(body)).await
}

fn claimed(shared: &Shared) -> Vec<u32> {
    let renewal = shared.renewal(REPLICAS_SCHEMA).unwrap();
    renewal.request.claims.iter().map(|c| c.shard).collect()
}

/// P20.3 through the sidecar: after a split, the service still maps keys by the answer it
/// applied, so a child's revoke is held, and the renewals claim the child, until the service
/// acknowledges an answer of the new layout without it; the answer says the layout.
#[tokio::test(start_paused = true)]
async fn p20_3_a_childs_revoke_waits_for_the_service_to_leave_the_parents_layout() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    let first = get(&router, "/v1/local/permits").await;
    assert_eq!(first.2["shard_count"], 8);
    assert!(first.2.get("generation").is_none(), "{first:?}");
    shared
        .apply_grant(Instant::now(), &split_of_ex_1(60_000))
        .unwrap();
    // Child 9 is handed on at once: the service, which has not polled since, admits parent 1 of
    // 8, whose keys are 9's too.
    let reply = revoke_in(&shared, 21, 1, &[9]).await;
    assert_problem(&reply, 503, "unavailable");
    assert_eq!(
        claimed(&shared),
        [1, 2, 9, 10],
        "9 claimed through its parent"
    );
    let split = get(&router, &format!("/v1/local/permits?{}", ack(&first))).await;
    assert_eq!(
        (&split.2["shard_count"], &split.2["generation"]),
        (&json!(16), &json!(1))
    );
    assert_eq!(
        split.2["shards"],
        json!([{"shard": 1, "epoch": 2}, {"shard": 2, "epoch": 2}, {"shard": 10, "epoch": 2}])
    );
    // The answer of the new layout is not acknowledged yet: parent 1 of 8 is still the service's.
    let reply = revoke_in(&shared, 21, 1, &[9]).await;
    assert_problem(&reply, 503, "unavailable");
    get(&router, &format!("/v1/local/permits?{}", ack(&split))).await;
    let reply = revoke_in(&shared, 21, 1, &[9]).await;
    assert_eq!(reply.0, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.2["released"], json!([9]));
    assert_eq!(claimed(&shared), [1, 2, 10]);
}

/// P20.3 through the sidecar: once the namespace resharded, a permit by shard number names the
/// generation its number belongs to; a number of another layout covers other keys.
#[tokio::test(start_paused = true)]
async fn p20_3_a_permit_by_shard_number_names_its_layout_once_resharded() {
    let (shared, _, router) = sidecar_with_lease(60_000);
    for uri in [
        "/v1/local/admit?shard=1",
        "/v1/local/admit?shard=1&generation=0",
    ] {
        let reply = get(&router, uri).await;
        assert_eq!(reply.0, StatusCode::OK, "{uri}: {reply:?}");
    }
    shared
        .apply_grant(Instant::now(), &split_of_ex_1(60_000))
        .unwrap();
    let reply = get(&router, "/v1/local/admit?shard=9&generation=1").await;
    assert_eq!(reply.0, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.2["epoch"], 2);
    let reply = get(&router, "/v1/local/admit?shard=1").await;
    assert_problem(&reply, 400, "invalid_request");
    let reply = get(&router, "/v1/local/admit?shard=1&generation=0").await;
    assert_problem(&reply, 421, "conflict");
    let detail = reply.2["detail"].as_str().unwrap();
    assert!(detail.contains("generation 1 of 16 shards"), "{detail}");
    for uri in [
        "/v1/local/admit?shard=16&generation=1",
        "/v1/local/admit?key=a&generation=1",
    ] {
        let reply = get(&router, uri).await;
        assert_problem(&reply, 400, "invalid_request");
    }
}
