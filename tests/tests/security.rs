//! Who may say what (PROTOCOL §13, I7) where it takes real processes: a three-manager cluster
//! serving TLS with real certificates made by `leaseholdctl certs init` in the test (P13.1,
//! P13.2), executors over TLS, the listeners themselves. The role and credential table that one
//! replica answers (every role's refusals, P13.3, and P13.4 under TLS, the state unchanged after
//! each) is `manager/tests/roles.rs`, in process.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use leasehold_api::client::http_client_builder;
use leasehold_api::tls::TlsConfig;
use leasehold_api::wire::Credential;
use leasehold_tests::executor::{wait_for_even_split, ExecutorProcess};
use leasehold_tests::{
    one_cluster_at_a_time, poll_until, tls_certificates, tls_files, until_still, Cluster,
    ClusterOptions,
};
use reqwest::Method;
use serde_json::{json, Value};

const LEADER_BOUND: Duration = Duration::from_secs(60);

/// A client presenting `name`'s certificate from `dir` (`admin`, `executor`, `manager-2`).
fn client_as(dir: &Path, name: &str) -> reqwest::Client {
    let tls = TlsConfig::load(&tls_files(dir, name)).expect("TLS files");
    http_client_builder(Some(&tls))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The one registered executor's id.
async fn registered_id(cluster: &Cluster) -> String {
    let state = state(cluster).await;
    state["executors"][0]["executor_id"]
        .as_str()
        .unwrap_or_else(|| panic!("one executor: {state}"))
        .to_string()
}

/// The replicated state as the leader has it, revision included: a refused request changes
/// nothing at all.
async fn state(cluster: &Cluster) -> Value {
    let admin = cluster.http.clone();
    let reply = admin
        .get(format!("{}/v1/state?consistent=true", cluster.url(1)))
        .send()
        .await
        .unwrap();
    let mut state: Value = reply.json().await.unwrap();
    for executor in state["executors"].as_array_mut().unwrap() {
        executor
            .as_object_mut()
            .unwrap()
            .remove("lease_remaining_ms");
    }
    state
}

struct Row {
    caller: &'static str,
    method: Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Value>,
    status: u16,
    code: &'static str,
}

fn row(caller: &'static str, method: Method, path: &str, status: u16) -> Row {
    Row {
        caller,
        method,
        path: path.to_owned(),
        headers: Vec::new(),
        body: None,
        status,
        code: "forbidden",
    }
}

/// P13.2, P13.3 among real members over TLS: the cluster forms with the managers' certificates;
/// a member's forwarded role is believed only for a request that member vouches it forwarded;
/// a follower forwards an executor's renewal with its credential and an admin's deregistration
/// with its role; a caller without a certificate of the CA, or in plaintext, gets no answer.
/// Needs processes: a second member to ask for its vouchers, a follower, real TLS handshakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_3_members_forward_only_what_they_vouched_for_and_strangers_fail_the_handshake() {
    let _serial = one_cluster_at_a_time().await;
    let certs = tls_certificates(3);
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: 8,
        // Long enough that nothing lapses while the table runs: every change is the table's.
        lease: "60s".into(),
        tls_dir: Some(certs.path().to_owned()),
        ..ClusterOptions::default()
    });
    // The cluster forms over TLS: Raft between managers presents their certificates.
    cluster.wait_for_leader(LEADER_BOUND).await;
    assert!(cluster.url(1).starts_with("https://"));

    let executor = client_as(certs.path(), "executor");
    let credential = Credential::from_random([0x5a; 32]);
    let registered = executor
        .post(format!("{}/v1/executors", cluster.url(1)))
        .json(&json!({
            "incarnation": "tls-test",
            "address": "https://127.0.0.1:9",
            "credential": credential.expose(),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 200, "{:?}", registered.text().await);
    // The planner gives it every shard; from then on only the table's requests could change
    // anything.
    poll_until(
        "the registered executor to hold every shard",
        LEADER_BOUND,
        || async {
            let state = state(&cluster).await;
            let held = state["executors"][0]["shards"]
                .as_array()
                .map_or(0, Vec::len);
            if held == 8 {
                Ok(())
            } else {
                Err(format!("{state}"))
            }
        },
    )
    .await;
    // Its lease reservation (P6.8) is written a moment after the registration: the refused
    // requests below start once the state has been still for a second.
    until_still("the state still for a second", LEADER_BOUND, || {
        state(&cluster)
    })
    .await;
    let executor_id = registered_id(&cluster).await;

    // A member's certificate makes no forwarded role true by itself (P13.3): manager 2 is a
    // member, but these requests it did not forward, and it vouches for none of them, whether
    // they carry no voucher or one it never issued. Each asks for what only an admin may do:
    // remove a voter, read the backup and the audit log, switch maintenance on.
    let admin_only = [
        (Method::DELETE, "/v1/cluster/nodes/3", None),
        (Method::GET, "/v1/backup", None),
        (Method::GET, "/v1/audit", None),
        (
            Method::PUT,
            "/v1/cluster/maintenance",
            Some(json!({"on": true})),
        ),
    ];
    let never_issued = "0123456789abcdef0123456789abcdef".to_owned();
    let mut table = Vec::new();
    for (method, path, body) in admin_only {
        for voucher in [None, Some(never_issued.clone())] {
            let mut headers = vec![
                ("x-leasehold-forwarded-by", "2".to_owned()),
                (
                    "x-leasehold-forwarded-role",
                    "urn:leasehold:admin".to_owned(),
                ),
                ("x-leasehold-forwarded-subject", "CN=chosen".to_owned()),
            ];
            if let Some(voucher) = voucher {
                headers.push(("x-leasehold-forwarded-voucher", voucher));
            }
            table.push(Row {
                headers,
                body: body.clone(),
                ..row("manager-2", method.clone(), path, 403)
            });
        }
    }
    for row in table.drain(..) {
        let before = state(&cluster).await;
        let client = client_as(certs.path(), row.caller);
        let mut request = client.request(
            row.method.clone(),
            format!("{}{}", cluster.url(1), row.path),
        );
        for (name, value) in &row.headers {
            request = request.header(*name, value);
        }
        if let Some(body) = &row.body {
            request = request.json(body);
        }
        let reply = request.send().await.unwrap();
        let status = reply.status().as_u16();
        let problem: Value = reply.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, problem["code"].as_str()),
            (row.status, Some(row.code)),
            "P13.3: {} {} as {}: {problem}",
            row.method,
            row.path,
            row.caller
        );
        assert_eq!(
            state(&cluster).await,
            before,
            "P13.3: the refused {} {} changed nothing",
            row.method,
            row.path
        );
    }

    // Through a follower: it forwards as itself, naming the caller's role, and the leader
    // decides with that role and the executor's credential, which travels with the request.
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let renewed = executor
        .post(format!(
            "{}/v1/executors/{executor_id}/renew",
            cluster.url(follower)
        ))
        .bearer_auth(credential.expose())
        .json(&json!({"claims": [], "revision": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        renewed.status(),
        200,
        "P13.3: an executor's renewal forwarded by follower {follower}: {:?}",
        renewed.text().await
    );
    let before = state(&cluster).await;
    let refused = executor
        .post(format!(
            "{}/v1/executors/{executor_id}/renew",
            cluster.url(follower)
        ))
        .json(&json!({"claims": [], "revision": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status(),
        401,
        "P13.4: forwarded without the credential"
    );
    assert_eq!(state(&cluster).await, before);
    let deregistered = client_as(certs.path(), "admin")
        .delete(format!(
            "{}/v1/executors/{executor_id}",
            cluster.url(follower)
        ))
        .send()
        .await
        .unwrap();
    // The leader took it as an operator's (the forwarded admin role, no credential): an
    // executor that holds shards is drained first (P5.5), and nobody else can take them here.
    let status = deregistered.status();
    let answer: Value = deregistered.json().await.unwrap_or(Value::Null);
    assert_eq!(
        (status.as_u16(), answer["draining"].as_bool()),
        (202, Some(true)),
        "P13.3, P5.5: an operator's deregistration forwarded by follower {follower}: {answer}"
    );

    // Below HTTP: no certificate, a certificate of another CA, plaintext: no answer at all.
    let other_ca = tls_certificates(3);
    let strangers = [
        (
            "no client certificate",
            reqwest::Client::builder()
                .tls_certs_only([reqwest::Certificate::from_pem(
                    &std::fs::read(certs.path().join("ca.pem")).unwrap(),
                )
                .unwrap()])
                .build()
                .unwrap(),
            cluster.url(1),
        ),
        (
            "a certificate of another CA",
            client_as(other_ca.path(), "admin"),
            cluster.url(1),
        ),
        (
            "plaintext",
            reqwest::Client::new(),
            cluster.url(1).replace("https://", "http://"),
        ),
    ];
    for (who, client, url) in strangers {
        let before = state(&cluster).await;
        let reply = client
            .post(format!("{url}/v1/executors"))
            .json(&json!({"incarnation": "stranger", "address": "https://127.0.0.1:9"}))
            .send()
            .await;
        assert!(
            reply.is_err() || reply.as_ref().is_ok_and(|r| !r.status().is_success()),
            "P13.2: {who} is refused: {reply:?}"
        );
        assert_eq!(state(&cluster).await, before, "{who} changed nothing");
    }
}

/// P13.2, P13.3 for executors: a real executor over TLS registers with its `executor`
/// certificate, the managers push to it with theirs, and a push from any other certificate is
/// refused (403) without touching what it holds.
/// Needs processes: the executor binary's own TLS listener and the managers' pushes to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_3_an_executor_over_tls_takes_pushes_from_managers_only() {
    let _serial = one_cluster_at_a_time().await;
    let certs = tls_certificates(3);
    let mut cluster = Cluster::start(ClusterOptions {
        shard_count: 8,
        lease: "60s".into(),
        tls_dir: Some(certs.path().to_owned()),
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let executor = ExecutorProcess::start(&cluster, "tls-executor");
    assert!(executor.url().starts_with("https://"));
    let held = wait_for_even_split(&[&executor], 8, LEADER_BOUND).await;

    for caller in ["admin", "executor"] {
        let reply = client_as(certs.path(), caller)
            .put(format!("{}/v1/assignment", executor.url()))
            .json(&json!({"revision": 1u64 << 62, "shards": [{"shard": 0, "epoch": 99}]}))
            .send()
            .await
            .unwrap();
        let status = reply.status().as_u16();
        let problem: Value = reply.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, problem["code"].as_str()),
            (403, Some("forbidden")),
            "P13.3: a push from an {caller} certificate: {problem}"
        );
        let revoke = client_as(certs.path(), caller)
            .post(format!("{}/v1/revoke", executor.url()))
            .json(&json!({"revision": 1u64 << 62, "shards": [0, 1, 2]}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            revoke.status().as_u16(),
            403,
            "P13.3: a revoke from {caller}"
        );
        assert_eq!(
            executor.admitted_shards().await.unwrap(),
            held[0],
            "the refused push from {caller} changed nothing the executor holds"
        );
    }
}

/// P13.2: `--health-listen` serves `/livez` and `/readyz` in plaintext to a caller with no
/// certificate (Kubernetes' kubelet), and nothing else; the API listener still speaks only TLS.
/// Needs processes: two real listeners, one plaintext and one TLS, in one manager process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_2_the_health_listener_answers_probes_without_a_certificate_and_nothing_else() {
    let _serial = one_cluster_at_a_time().await;
    let certs = tls_certificates(3);
    let mut cluster = Cluster::new(ClusterOptions {
        shard_count: 8,
        tls_dir: Some(certs.path().to_owned()),
        ..ClusterOptions::default()
    });
    let health = format!("127.0.0.1:{}", leasehold_tests::free_port());
    cluster
        .managers
        .get_mut(&1)
        .expect("manager 1")
        .set_flag("--health-listen", &health);
    cluster.start_all();
    cluster.wait_for_leader(LEADER_BOUND).await;
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let status_of = |path: &str| {
        let request = plain.get(format!("http://{health}{path}"));
        async move { request.send().await.map(|reply| reply.status().as_u16()) }
    };
    poll_until("the health listener to say ready", LEADER_BOUND, || async {
        match status_of("/readyz").await {
            Ok(200) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(status_of("/livez").await.unwrap(), 200);
    // Alive and ready, nothing more: no leader, term, index, shard count, lease or free disk
    // in plaintext, not even with `?verbose` (issue 55, finding 8).
    let body_of = |client: &reqwest::Client, url: String| {
        let request = client.get(url);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    for path in ["/readyz?verbose", "/readyz?verbose=true", "/livez"] {
        let body = body_of(&plain, format!("http://{health}{path}")).await;
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert!(
            keys == ["ready"] || (keys == ["status"] && body["status"] == "ok"),
            "P13.2: the health listener's {path} says only alive or ready: {body}"
        );
    }
    let verbose_over_tls =
        body_of(&cluster.http, format!("{}/readyz?verbose", cluster.url(1))).await;
    assert!(
        verbose_over_tls["checks"].is_array(),
        "the detail stays behind TLS: {verbose_over_tls}"
    );
    for other in [
        "/v1/state",
        "/metrics",
        "/v1/executors",
        "/raft/identity",
        "/ui",
    ] {
        assert_eq!(
            status_of(other).await.unwrap(),
            404,
            "the health listener serves {other}"
        );
    }
    let api_in_plaintext = plain
        .get(format!(
            "{}/livez",
            cluster.url(1).replacen("https://", "http://", 1)
        ))
        .send()
        .await;
    assert!(
        api_in_plaintext
            .as_ref()
            .map_or(true, |reply| !reply.status().is_success()),
        "the API listener answered plaintext: {api_in_plaintext:?}"
    );
}

/// P13.6: with `--backup-key-file` a manager seals every backup, and a manager with the key
/// restores only what it sealed: an unsealed backup, or one sealed by another key, stops it at
/// start with the reason, before anything is written.
/// Needs processes: a manager that refuses to start, and its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_6_a_manager_with_a_backup_key_restores_only_backups_it_sealed() {
    let _serial = one_cluster_at_a_time().await;
    let keys = tempfile::TempDir::new().unwrap();
    let write_key = |name: &str, byte: u8| {
        let path = keys.path().join(name);
        std::fs::write(&path, [byte; 48]).unwrap();
        path.display().to_string()
    };
    let key = write_key("key", 1);
    let other_key = write_key("other", 2);
    let options = |key: Option<&str>| ClusterOptions {
        size: 1,
        shard_count: 8,
        extra_args: key
            .map(|key| vec!["--backup-key-file".to_string(), key.to_string()])
            .unwrap_or_default(),
        ..ClusterOptions::default()
    };
    let backup_of = |cluster: &Cluster| {
        let http = cluster.http.clone();
        let url = cluster.url(1);
        async move {
            let reply = http.get(format!("{url}/v1/backup")).send().await.unwrap();
            assert_eq!(reply.status(), 200);
            reply.bytes().await.unwrap().to_vec()
        }
    };
    let mut source = Cluster::start(options(Some(&key)));
    source.wait_for_leader(LEADER_BOUND).await;
    source
        .client()
        .register(&leasehold_api::RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: "sealed".into(),
            address: "http://127.0.0.1:9".into(),
            name: None,
            credential: None,
            capacity: None,
            app_version: None,
            labels: Default::default(),
        })
        .await
        .unwrap();
    let sealed = backup_of(&source).await;
    let header = String::from_utf8_lossy(&sealed[..sealed.len().min(600)]).to_string();
    assert!(header.contains("\"seal\":\"hmac-sha256:"), "{header}");
    let mut plain_source = Cluster::start(options(None));
    plain_source.wait_for_leader(LEADER_BOUND).await;
    let unsealed = backup_of(&plain_source).await;

    for (what, file, restorer_key, accepted) in [
        ("its own sealed backup", &sealed, &key, true),
        ("an unsealed backup", &unsealed, &key, false),
        ("a backup sealed by another key", &sealed, &other_key, false),
    ] {
        let mut target = Cluster::new(options(Some(restorer_key)));
        let path = target.dir.path().join("restore.backup");
        std::fs::write(&path, file).unwrap();
        let data_dir = target.manager(1).data_dir.display().to_string();
        let run = leasehold_tests::ctl::leaseholdctl(
            &[],
            &[
                "snapshot",
                "restore",
                &path.display().to_string(),
                "--data-dir",
                &data_dir,
            ],
        )
        .await
        .ok();
        assert!(run.stdout.contains("Prepared"), "{}", run.stdout);
        target.start_all();
        if accepted {
            target.wait_for_leader(LEADER_BOUND).await;
            let state = state(&target).await;
            assert_eq!(
                state["executors"][0]["incarnation"], "sealed",
                "{what}: {state}"
            );
        } else {
            let status = target.manager(1).wait_exit(LEADER_BOUND).await;
            let log = target.manager(1).log();
            assert!(
                !status.success() && log.contains("P13.6"),
                "P13.6: {what} is refused at start: {status}\n{log}"
            );
        }
    }
}

/// P13.6: a body that stops arriving is cut, on the public API (`408 request_timeout` at
/// `api::http::BODY_READ_TIMEOUT`) and on `/raft/*` (at the Raft message bound), so a slow
/// client cannot hold a manager's connection or a handler.
/// Needs processes: a real listener's connection, a body trickled over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_6_a_body_that_stops_arriving_is_cut() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let address = cluster
        .url(leader)
        .trim_start_matches("http://")
        .to_string();
    let trickle = |path: &'static str| {
        let address = address.clone();
        async move {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\nx-leasehold-node-id: 2\r\n\
                 x-leasehold-storage-id: s\r\n\r\n{{\"incarnation\""
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            let started = std::time::Instant::now();
            let mut reply = Vec::new();
            // Bounded well above the server's bounds, so a missing bound fails here.
            let read =
                tokio::time::timeout(Duration::from_secs(90), stream.read_to_end(&mut reply)).await;
            (
                read.is_ok(),
                String::from_utf8_lossy(&reply).into_owned(),
                started.elapsed(),
            )
        }
    };
    let (public, raft) = tokio::join!(trickle("/v1/executors"), trickle("/raft/append"));
    assert!(
        public.0,
        "P13.6: the public API kept a stalled body open for {:?}",
        public.2
    );
    assert!(
        public.1.starts_with("HTTP/1.1 408") && public.1.contains("request_timeout"),
        "{}",
        public.1
    );
    assert!(
        raft.0,
        "P13.6: /raft/append kept a stalled body open for {:?}",
        raft.2
    );
    assert!(raft.1.starts_with("HTTP/1.1 504"), "{}", raft.1);
}
