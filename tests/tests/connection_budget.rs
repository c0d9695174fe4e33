//! P13.6, P8.3 over the real binaries: a stranger who opens connections to every listener of the
//! leader and holds them (plaintext ones to the health port that send nothing, TCP ones to the
//! API port that never start TLS) takes no descriptor the manager needs for itself. The managers
//! run with 1 024 descriptors (`prlimit`), so without one budget for both listeners the stranger
//! would hold all of them, and the next snapshot would fail with `Too many open files` and stop
//! the manager. With it the leader keeps leading, its executor keeps renewing, and a snapshot is
//! written while the listeners are held full.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leasehold_harness::Launcher;
use leasehold_tests::executor::{wait_for_even_split, ExecutorProcess};
use leasehold_tests::{
    free_port, one_cluster_at_a_time, poll_until, tls_certificates, Cluster, ClusterOptions,
};
use serde_json::Value;
use tokio::net::{TcpSocket, TcpStream};

const LEADER_BOUND: Duration = Duration::from_secs(60);
/// The managers' descriptor limit, soft and hard.
const OPEN_FILES: u64 = 1_024;
/// Connections the stranger opens to each listener: more than the descriptor limit.
const PER_LISTENER: usize = 1_100;
/// How long the stranger keeps opening connections.
const ATTACK: Duration = Duration::from_secs(15);
/// The stranger's address: its own, not the executors' or the test's.
const STRANGER: &str = "127.0.0.2";

/// Opens connections from [`STRANGER`] to `target` until [`ATTACK`] is over, holding every one
/// it opened (the manager closes what it will); returns how many it opened.
async fn hold_connections(target: SocketAddr) -> usize {
    let mut held: Vec<TcpStream> = Vec::new();
    let started = Instant::now();
    let mut opened = 0;
    while started.elapsed() < ATTACK {
        // In rounds, so connections the manager closed at its bounds are made again.
        for _ in 0..PER_LISTENER / 10 {
            let socket = TcpSocket::new_v4().unwrap();
            socket
                .bind(SocketAddr::new(STRANGER.parse().unwrap(), 0))
                .unwrap();
            if let Ok(Ok(stream)) =
                tokio::time::timeout(Duration::from_millis(200), socket.connect(target)).await
            {
                held.push(stream);
                opened += 1;
            }
        }
        if held.len() > 4 * PER_LISTENER {
            // The oldest were closed by the manager long ago; the stranger's own limit is finite.
            held.drain(..PER_LISTENER);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    opened
}

async fn cluster_info(admin: &reqwest::Client, url: &str) -> Value {
    admin
        .get(format!("{url}/v1/cluster"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_6_every_listener_held_full_takes_nothing_the_leader_needs() {
    let _serial = one_cluster_at_a_time().await;
    let certs = tls_certificates(3);
    let mut cluster = Cluster::new(ClusterOptions {
        shard_count: 8,
        lease: "4s".into(),
        tls_dir: Some(certs.path().to_owned()),
        ..ClusterOptions::default()
    });
    let mut health = std::collections::BTreeMap::new();
    for id in 1..=3 {
        let address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        health.insert(id, address);
        let mut manager = cluster.manager(id);
        manager.set_flag("--health-listen", &address.to_string());
        manager.set_launcher(Launcher::prefixed([
            "prlimit".to_owned(),
            format!("--nofile={OPEN_FILES}:{OPEN_FILES}"),
            "--".to_owned(),
        ]));
    }
    cluster.start_all();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let executor = ExecutorProcess::start(&cluster, "budget-executor");
    wait_for_even_split(&[&executor], 8, LEADER_BOUND).await;
    let admin = cluster.http.clone();
    let leader_url = cluster.url(leader);
    let term_before = cluster_info(&admin, &leader_url).await["term"].clone();

    let api: SocketAddr = leader_url
        .trim_start_matches("https://")
        .parse()
        .expect("the leader's API address");
    let stranger = tokio::spawn(async move {
        let (to_api, to_health) =
            tokio::join!(hold_connections(api), hold_connections(health[&leader]));
        to_api + to_health
    });
    // While the stranger holds both listeners: a snapshot is written and the leader stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let snapshot = admin
        .post(format!("{leader_url}/v1/cluster/snapshot"))
        .send()
        .await
        .expect("the admin reaches the leader while the stranger holds its listeners");
    assert!(
        snapshot.status().is_success(),
        "P8.3: a snapshot while every listener is held: {} {:?}",
        snapshot.status(),
        snapshot.text().await
    );
    let opened = stranger.await.unwrap();
    assert!(
        opened > 2 * PER_LISTENER,
        "the stranger opened {opened} connections"
    );

    let info = cluster_info(&admin, &leader_url).await;
    assert_eq!(
        (info["leader_id"].as_u64(), &info["term"]),
        (Some(leader), &term_before),
        "P13.6: the leader kept leading, in the same term: {info}"
    );
    assert!(
        !info["snapshot"].is_null(),
        "P8.3: the snapshot was written: {info}"
    );
    assert!(
        cluster.manager(leader).is_running(),
        "P8.3: the leader did not exit"
    );
    // The executor renewed throughout: it never lapsed, and still holds every shard.
    poll_until("the executor to hold its shards", LEADER_BOUND, || async {
        match executor.admitted_shards().await {
            Ok(held) if held.len() == 8 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let log = executor.log();
    assert!(
        !log.contains("lapsed"),
        "P13.6: the executor's lease never lapsed while the stranger held the listeners"
    );
    let manager_log = std::fs::read_to_string(cluster.manager(leader).log_path()).unwrap();
    assert!(
        !manager_log.contains("Too many open files"),
        "P13.6: the leader never ran out of descriptors"
    );
    assert!(
        manager_log.contains("holds its share of the connection budget"),
        "P13.6: the stranger's connections past its share were refused and said so"
    );
}
