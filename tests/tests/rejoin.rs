//! Joining and rejoining a TLS cluster with a manager's own certificate (PROTOCOL §10 `--join`,
//! P13.3), over the real binaries. A manager certificate may ask the cluster to add only its
//! own node, at its own address, as a new member (a learner the cluster promotes once caught
//! up), and may remove only its own node: what `--join` and `--join URL --rejoin` need. Before
//! this, `--join` under TLS was refused `403` (the join was admin-only) and a joiner refused the
//! leader's Raft messages (it knew no member), and a manager whose data directory was lost could
//! come back only through an admin's removal and a restart.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{AddNodeRequest, ClusterInfo, Credential, RegisterRequest};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};

const LEADER_BOUND: Duration = Duration::from_secs(30);
const CATCH_UP_BOUND: Duration = Duration::from_secs(60);
const STOP_BOUND: Duration = Duration::from_secs(20);
const REFUSAL_BOUND: Duration = Duration::from_secs(60);

fn voter_ids(info: &ClusterInfo) -> BTreeSet<u64> {
    info.voters.iter().map(|m| m.node_id).collect()
}

/// Registers an executor (with a credential: TLS, P13.4) and returns the revision.
async fn write(cluster: &Cluster, name: &str) -> u64 {
    cluster
        .client()
        .register(&RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: format!("incarnation-{name}"),
            address: "https://127.0.0.1:1".to_string(),
            name: Some(name.to_string()),
            credential: Some(Credential::from_random(rand::random())),
            capacity: None,
            app_version: None,
            labels: Default::default(),
        })
        .await
        .unwrap_or_else(|e| panic!("register {name}: {e}"))
        .revision
}

/// Snapshots and purges the log on every running member (the admin's `POST
/// /v1/cluster/snapshot?purge=true`), so a newcomer is brought up by snapshot install.
async fn snapshot_everywhere(cluster: &Cluster, ids: &[u64]) {
    for &id in ids {
        let reply = cluster
            .http
            .post(format!(
                "{}/v1/cluster/snapshot?purge=true",
                cluster.url(id)
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200, "snapshot on node {id}");
    }
}

/// Waits until `id` is a voter in the leader's view and has applied what the leader has.
async fn wait_voter_caught_up(cluster: &mut Cluster, id: u64) -> ClusterInfo {
    let this = &*cluster;
    poll_until(
        &format!("node {id} to be a voter that applied the leader's log"),
        CATCH_UP_BOUND,
        || async move {
            let leader_id = this.cluster_info(1).await?.leader_id.ok_or("no leader")?;
            let leader = this.cluster_info(leader_id).await?;
            if !voter_ids(&leader).contains(&id) {
                return Err(format!("voters {:?}", voter_ids(&leader)));
            }
            let member = this.cluster_info(id).await?;
            (member.applied_index >= leader.applied_index)
                .then_some(member.clone())
                .ok_or(format!(
                    "node {id} applied {:?}, the leader {:?}",
                    member.applied_index, leader.applied_index
                ))
        },
    )
    .await
}

/// The names in directory `dir`, sorted.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn assert_forbidden<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, leasehold_api::client::ClientError>,
) {
    let error = result.expect_err(what);
    assert_eq!(error.code(), Some(ErrorCode::Forbidden), "{what}: {error}");
}

/// §10 `--join`, P13.3: a fourth manager joins a TLS cluster with only its own certificate,
/// is brought up by snapshot install and promoted like every joiner; its certificate may not
/// add another node, change its own address or remove another member; asking again changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_3_a_manager_joins_a_tls_cluster_with_its_own_certificate() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::new(ClusterOptions {
        make_certificates: true,
        ..ClusterOptions::default()
    });
    cluster.start_all();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let mut last = 0;
    for n in 0..5 {
        last = write(&cluster, &format!("before-join-{n}")).await;
    }
    for id in [1, 2, 3] {
        cluster.wait_applied(id, last, CATCH_UP_BOUND).await;
    }
    snapshot_everywhere(&cluster, &[1, 2, 3]).await;

    let joiner_url = cluster.add_joiner(4).url();
    let as_4 = cluster.client_as("manager-4");
    assert_forbidden(
        "manager 4 adds node 5",
        as_4.add_node(&AddNodeRequest {
            node_id: 5,
            address: joiner_url.clone(),
        })
        .await,
    );
    assert_forbidden("manager 4 removes voter 1", as_4.remove_node(1).await);

    let leader_url = cluster.url(leader);
    cluster.manager(4).start_joining(&leader_url);
    let joined = wait_voter_caught_up(&mut cluster, 4).await;
    let snapshot = joined
        .snapshot
        .expect("node 4 was brought up by a snapshot install");
    assert!(snapshot.last_log_index.unwrap() >= last, "{snapshot:?}");
    // The joiner logs its welcome after the leader's add_node reply, which may come after the
    // leader already counts it caught up.
    let joiner = &cluster.managers[&4];
    poll_until(
        "the joiner logs that it joined as a voter",
        Duration::from_secs(30),
        || {
            let log = joiner.log();
            async move {
                if log.contains("joined the cluster as a voter") {
                    Ok(())
                } else {
                    Err(log)
                }
            }
        },
    )
    .await;

    // Asking again, as itself at the same address: answered, nothing changes.
    let again = as_4
        .add_node(&AddNodeRequest {
            node_id: 4,
            address: joiner_url.clone(),
        })
        .await
        .expect("asking again to join is answered");
    assert_eq!(voter_ids(&again), BTreeSet::from([1, 2, 3, 4]));
    assert!(again.learners.is_empty(), "{again:?}");
    // As itself at another address: a change of voter, refused.
    assert_forbidden(
        "manager 4 moves voter 4",
        as_4.add_node(&AddNodeRequest {
            node_id: 4,
            address: "https://127.0.0.1:9".to_string(),
        })
        .await,
    );
    assert!(write(&cluster, "after-join").await > last);
    let info = cluster.cluster_info(leader).await.unwrap();
    assert_eq!(voter_ids(&info), BTreeSet::from([1, 2, 3, 4]));
}

/// §10 `--join URL --rejoin`, P13.3: a manager whose data directory was lost comes back with
/// only its own certificate: it removes its old membership and joins afresh, catches up by
/// snapshot, and the cluster has one leader and three voters again. `--rejoin` on a directory
/// that is not new is refused; a wiped manager started without `--rejoin` is still refused,
/// both with `--initial-cluster` and with `--join` alone, and each refusal leaves the emptied
/// directory as it found it, so that the `--join URL --rejoin` it names then works on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p13_3_a_manager_whose_data_directory_was_lost_rejoins_with_its_own_certificate() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::new(ClusterOptions {
        make_certificates: true,
        ..ClusterOptions::default()
    });
    cluster.start_all();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let lost = *cluster.managers.keys().find(|&&id| id != leader).unwrap();
    let lost_url = cluster.url(lost);
    let leader_url = cluster.url(leader);
    let mut last = 0;
    for n in 0..5 {
        last = write(&cluster, &format!("before-loss-{n}")).await;
    }
    for id in [1, 2, 3] {
        cluster.wait_applied(id, last, CATCH_UP_BOUND).await;
    }
    // Every member pins every other's storage within a few seconds of forming (asked with a
    // manager's certificate: `/raft/identity` is the managers').
    let as_manager = {
        let tls = cluster.tls_as("manager-1").unwrap();
        leasehold_api::client::http_client_builder(Some(&tls))
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let this = &cluster;
    let as_manager = &as_manager;
    poll_until(
        "all storage identities pinned",
        CATCH_UP_BOUND,
        || async move {
            for id in [1u64, 2, 3] {
                let report: serde_json::Value = as_manager
                    .get(format!("{}/raft/identity", this.url(id)))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?
                    .json()
                    .await
                    .map_err(|e| e.to_string())?;
                let pins = report["pins"].as_object().map_or(0, |p| p.len());
                if pins < 2 {
                    return Err(format!("node {id} pins {pins}"));
                }
            }
            Ok(())
        },
    )
    .await;

    // `--rejoin` is only for a lost data directory: on its own it is refused (configuration).
    cluster.manager(lost).terminate(STOP_BOUND).await;
    cluster.manager(lost).set_env("LEASEHOLD_REJOIN", "true");
    cluster.manager(lost).start_joining(&leader_url);
    let status = cluster.manager(lost).wait_exit(REFUSAL_BOUND).await;
    assert_eq!(status.code(), Some(2), "--rejoin on a kept data directory");
    let log = cluster.managers[&lost].log();
    assert!(
        log.contains("--rejoin is only for a lost data directory"),
        "{log}"
    );
    cluster.manager(lost).set_env("LEASEHOLD_REJOIN", "false");

    // The data directory is emptied (it stays, as an operator's `rm -rf dir/*` leaves it).
    cluster.manager(lost).wipe_data_dir();
    let data_dir = cluster.managers[&lost].data_dir.clone();
    std::fs::create_dir_all(&data_dir).unwrap();
    let as_found = || entries(&data_dir);
    assert_eq!(as_found(), Vec::<String>::new());
    // Without --rejoin the wiped manager is still refused: with --initial-cluster ...
    cluster.manager(lost).start();
    let status = cluster.manager(lost).wait_exit(REFUSAL_BOUND).await;
    assert!(
        !status.success(),
        "a wiped manager must not start as its old self"
    );
    let log = cluster.managers[&lost].log();
    assert!(log.contains("data directory is new"), "{log}");
    // A refused start leaves the directory as it found it, so the start the refusal names
    // finds it new (it left `blobs/ conf db` behind, which --rejoin then refused).
    assert_eq!(as_found(), Vec::<String>::new(), "{log}");
    // ... and with --join alone (the cluster knows node `lost` with other storage).
    cluster.manager(lost).start_joining(&leader_url);
    let status = cluster.manager(lost).wait_exit(REFUSAL_BOUND).await;
    assert!(
        !status.success(),
        "a wiped manager must not join as its old self"
    );
    let log = cluster.managers[&lost].log();
    assert!(
        log.contains("--rejoin"),
        "the refusal says what to do:\n{log}"
    );
    assert_eq!(as_found(), Vec::<String>::new(), "{log}");
    let info = cluster.cluster_info(leader).await.unwrap();
    assert_eq!(
        voter_ids(&info),
        BTreeSet::from([1, 2, 3]),
        "nothing changed"
    );

    let after = write(&cluster, "while-lost").await;
    snapshot_everywhere(
        &cluster,
        &[1, 2, 3]
            .into_iter()
            .filter(|&id| id != lost)
            .collect::<Vec<_>>(),
    )
    .await;
    // The command the refusals named, on the directory as they left it.
    cluster.manager(lost).set_env("LEASEHOLD_REJOIN", "true");
    cluster.manager(lost).start_joining(&leader_url);
    let rejoined = wait_voter_caught_up(&mut cluster, lost).await;
    assert!(rejoined.applied_index >= Some(after), "{rejoined:?}");
    assert!(
        rejoined.snapshot.is_some(),
        "brought up by snapshot install: {rejoined:?}"
    );
    let log = cluster.managers[&lost].log();
    let warned: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("--rejoin"))
        .collect();
    assert!(
        warned
            .iter()
            .any(|line| line.contains(&lost_url) && line.contains(&format!("node_id={lost}"))),
        "the rejoin is logged at warn with the node id and the old address:\n{log}"
    );

    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let info = cluster.cluster_info(leader).await.unwrap();
    assert_eq!(voter_ids(&info), BTreeSet::from([1, 2, 3]), "{info:?}");
    assert!(info.learners.is_empty(), "{info:?}");
    let last = write(&cluster, "after-rejoin").await;
    for id in [1, 2, 3] {
        cluster.wait_applied(id, last, CATCH_UP_BOUND).await;
    }
}
