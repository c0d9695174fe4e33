//! What the in-process manager tests share: free ports, a member's configuration, a member
//! started in this process and stopped as SIGTERM would stop it, and the calls every test makes.
//! Each test crate uses part of it.
#![allow(dead_code)]

pub mod router;

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use leasehold_manager::server;
use leasehold_manager::server::config::{Args, ManagerConfig};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Value};

/// How long anything a test waits for may take on a loaded machine.
pub const BOUND: Duration = Duration::from_secs(30);

/// A port for a member to listen on, below the ephemeral range (`leasehold_harness::PORTS`): a
/// member restarted on its port must find it free, and a port the OS picked for some outgoing
/// connection meanwhile would not be (a restored leader that could not listen failed
/// `leadership.rs` once in CI).
pub fn free_port() -> u16 {
    leasehold_harness::free_port().unwrap()
}

/// Where the members of a plaintext loopback cluster keep their data and listen.
pub struct Layout {
    pub dirs: Vec<tempfile::TempDir>,
    pub ports: Vec<u16>,
    /// Each member's base URL, in id order.
    pub bases: Vec<String>,
}

impl Layout {
    pub fn new(members: usize) -> Self {
        let dirs = (0..members).map(|_| tempfile::tempdir().unwrap()).collect();
        let ports: Vec<u16> = (0..members).map(|_| free_port()).collect();
        let bases = ports
            .iter()
            .map(|port| format!("http://127.0.0.1:{port}"))
            .collect();
        Self { dirs, ports, bases }
    }

    /// Member `id`'s configuration, with `extra` flags.
    pub fn config(&self, id: usize, extra: &[&str]) -> ManagerConfig {
        member_config(self.dirs[id - 1].path(), id, &self.ports, extra)
    }
}

/// The flags of member `id` (from 1) of a cluster whose members listen at `listens`, in id
/// order, with 16 shards.
pub fn member_args(id: usize, listens: &[String], scheme: &str, data_dir: &Path) -> Vec<String> {
    let initial_cluster = listens
        .iter()
        .enumerate()
        .map(|(index, listen)| format!("{}={scheme}://{listen}", index + 1))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        "leasehold-manager".to_owned(),
        format!("--id={id}"),
        format!("--listen={}", listens[id - 1]),
        format!("--data-dir={}", data_dir.display()),
        format!("--initial-cluster={initial_cluster}"),
        "--shard-count=16".to_owned(),
    ]
}

/// The configuration of member `id` of a plaintext cluster on loopback `ports`, with `extra`
/// flags after the common ones.
pub fn member_config(data_dir: &Path, id: usize, ports: &[u16], extra: &[&str]) -> ManagerConfig {
    let listens: Vec<String> = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let mut args = member_args(id, &listens, "http", data_dir);
    args.extend(extra.iter().map(|flag| (*flag).to_owned()));
    config_of(args)
}

pub fn config_of(args: Vec<String>) -> ManagerConfig {
    ManagerConfig::try_from(Args::try_parse_from(args).unwrap()).unwrap()
}

/// A member running in this process, and how to stop it as SIGTERM would.
pub struct Member {
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub running: tokio::task::JoinHandle<Result<(), server::ServerError>>,
}

pub fn start(config: ManagerConfig) -> Member {
    start_with_metrics(config, None)
}

/// Waits until no one holds the storage lock of `data_dir`. In one process the lock outlives a
/// stopped server by a moment, and a member started on the directory meanwhile fails to open it
/// and stops at once (a restored leader that never answered failed `leadership.rs` in CI).
pub async fn wait_until_released(data_dir: &Path) {
    let deadline = Instant::now() + BOUND;
    loop {
        match leasehold_harness::storage_unlocked(data_dir) {
            Ok(true) => return,
            Ok(false) => assert!(
                Instant::now() < deadline,
                "{} stayed locked for {BOUND:?}",
                data_dir.display()
            ),
            Err(error) => panic!("{}: {error}", data_dir.display()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Panics with how `member`'s server ended when it has (a server that cannot open its storage
/// or listen stops at once, and a test waiting on its answers would blame something else).
pub async fn assert_running(member: &mut Member, name: &str) {
    if member.running.is_finished() {
        let ended = (&mut member.running).await;
        panic!("{name}'s server stopped on its own: {ended:?}");
    }
}

pub fn start_with_metrics(config: ManagerConfig, metrics: Option<PrometheusHandle>) -> Member {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server::run(config, metrics, async move {
        let _ = stopped.await;
    }));
    Member {
        stop: Some(stop),
        running,
    }
}

impl Member {
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(BOUND, self.running)
            .await
            .expect("a member stops within the bound")
            .unwrap()
            .unwrap();
    }
}

pub fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder().timeout(timeout).build().unwrap()
}

/// The JSON `url` answers with a success, or `None`.
pub async fn get(http: &reqwest::Client, url: &str) -> Option<Value> {
    answer(http, url).await.ok()
}

/// The JSON `url` answers with a success, or what came instead (the error, or the status and
/// body), for a failure message.
pub async fn answer(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let reply = http
        .get(url)
        .send()
        .await
        .map_err(|error| format!("{error:?}"))?;
    let status = reply.status();
    if !status.is_success() {
        let body = reply.text().await.unwrap_or_default();
        return Err(format!("{status}: {body}"));
    }
    reply.json().await.map_err(|error| format!("{error:?}"))
}

/// What each member says of the cluster (`/v1/cluster`, asked with a short timeout) and whether
/// its server still runs: for the message of a test that waited in vain.
pub async fn members_view(bases: &[String], members: &[Member]) -> String {
    let http = http_client(Duration::from_secs(2));
    let mut view = String::new();
    for (base, member) in bases.iter().zip(members) {
        let running = if member.running.is_finished() {
            "its server has stopped"
        } else {
            "its server runs"
        };
        let cluster = answer(&http, &format!("{base}/v1/cluster")).await;
        view.push_str(&format!("\n  {base} ({running}): {cluster:?}"));
    }
    view
}

/// The base address of the member every replica in `bases` names leader in `/v1/cluster`.
pub async fn await_leader(http: &reqwest::Client, bases: &[String]) -> String {
    let deadline = Instant::now() + BOUND;
    loop {
        let mut named = Vec::new();
        for base in bases {
            let cluster = get(http, &format!("{base}/v1/cluster")).await;
            named.push(cluster.and_then(|cluster| cluster["leader_id"].as_u64()));
        }
        if let Some(Some(leader)) = named.first() {
            if named.iter().all(|id| *id == Some(*leader)) {
                return bases[usize::try_from(*leader).unwrap() - 1].clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader all replicas name within {BOUND:?}: {named:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Registers executor `n` and returns its id; a leader answers 503 until it has taken office,
/// retried like any.
pub async fn register(http: &reqwest::Client, base: &str, n: usize) -> String {
    let deadline = Instant::now() + BOUND;
    loop {
        let reply = http
            .post(format!("{base}/v1/executors"))
            .json(&json!({
                "incarnation": format!("incarnation-{n}"),
                "address": format!("http://127.0.0.1:{}", 9 + n),
            }))
            .send()
            .await
            .unwrap();
        if reply.status().is_success() {
            let grant: Value = reply.json().await.unwrap();
            return grant["executor_id"].as_str().unwrap().to_owned();
        }
        assert!(
            reply.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE && Instant::now() < deadline,
            "registration {n}: {}",
            reply.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
