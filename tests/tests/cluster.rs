//! Manager cluster over real processes (PROTOCOL §8–§10): formation, forwarding, failover,
//! restart, membership changes, a wiped data directory, and a boot that logs no warnings.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_api::problem::{ErrorCode, LEADER_HEADER};
use leasehold_api::wire::RegisterRequest;
use leasehold_tests::http_checks::summed;
use leasehold_tests::{
    one_cluster_at_a_time, poll_until, replicated_view, Cluster, ClusterOptions,
};
use nix::sys::signal::Signal;

const LEADER_BOUND: Duration = Duration::from_secs(20);
const CATCH_UP_BOUND: Duration = Duration::from_secs(30);
const STOP_BOUND: Duration = Duration::from_secs(20);

fn register_request(name: &str) -> RegisterRequest {
    RegisterRequest {
        follows_generations: false,
        namespace: None,
        incarnation: format!("incarnation-{name}"),
        address: "http://127.0.0.1:1".to_string(),
        name: Some(name.to_string()),
        credential: None,
        capacity: None,
        app_version: None,
        labels: Default::default(),
    }
}

/// Registers through the typed client (which retries with patience) and returns the revision.
async fn write(cluster: &Cluster, name: &str) -> u64 {
    cluster
        .client()
        .register(&register_request(name))
        .await
        .unwrap_or_else(|e| panic!("register {name}: {e}"))
        .revision
}

/// `/v1/state` of one node without what moves with time (remaining lease times) or with the
/// revision of later writes (I3: acknowledged writes survive a full restart).
async fn durable_view(cluster: &Cluster, id: u64) -> serde_json::Value {
    // Lease clocks and the leader's load picture are soft state (P6.1, P15.2): a restarted
    // leader relearns them, so only what is replicated is compared.
    let state: serde_json::Value = cluster
        .http
        .get(format!("{}/v1/state", cluster.url(id)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    replicated_view(state)
}

fn voter_ids(info: &leasehold_api::wire::ClusterInfo) -> BTreeSet<u64> {
    info.voters.iter().map(|m| m.node_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_one_cluster_and_a_write_sent_to_a_follower_is_applied_on_all() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let follower = *cluster.managers.keys().find(|&&id| id != leader).unwrap();

    // Straight to the follower, no client-side failover: the follower forwards in one hop.
    let reply = cluster
        .http
        .post(format!("{}/v1/executors", cluster.url(follower)))
        .json(&register_request("via-follower"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let named_leader = reply
        .headers()
        .get(LEADER_HEADER)
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        named_leader,
        cluster.url(leader),
        "the reply names the serving leader"
    );
    let body: serde_json::Value = reply.json().await.unwrap();
    let revision = body["revision"].as_u64().expect("revision in reply");

    for id in [1, 2, 3] {
        cluster.wait_applied(id, revision, CATCH_UP_BOUND).await;
        let info = cluster.cluster_info(id).await.unwrap();
        assert_eq!(info.leader_id, Some(leader));
        assert_eq!(voter_ids(&info), BTreeSet::from([1, 2, 3]));
    }
}

/// A normal boot logs nothing an operator should look into: no manager of a new one-manager or
/// three-manager cluster writes a WARN or ERROR line while it forms, elects a leader and takes
/// a registration. Each boot of a three-manager cluster logged openraft's notices about stale
/// vote answers on every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_boot_logs_no_warnings() {
    let _serial = one_cluster_at_a_time().await;
    for size in [1, 3] {
        let mut cluster = Cluster::start(ClusterOptions {
            size,
            ..ClusterOptions::default()
        });
        cluster.wait_for_leader(LEADER_BOUND).await;
        let revision = write(&cluster, "boot").await;
        for id in 1..=size {
            cluster.wait_applied(id, revision, CATCH_UP_BOUND).await;
        }
        // Room for a late notice of the formation (a stale answer arrives after the election).
        tokio::time::sleep(Duration::from_secs(1)).await;
        for id in 1..=size {
            let log = cluster.managers[&id].log();
            let loud: Vec<&str> = log
                .lines()
                .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
                .collect();
            assert!(
                loud.is_empty(),
                "manager {id} of {size} logged at boot:\n{}",
                loud.join("\n")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_without_a_leader_are_refused_503_no_leader_with_retry_after() {
    let _serial = one_cluster_at_a_time().await;
    // Only one of three founding members runs: the cluster cannot form, no leader exists.
    let mut cluster = Cluster::new(ClusterOptions::default());
    cluster.manager(1).start();
    let url = cluster.url(1);
    let http = cluster.http.clone();
    let reply = poll_until("node 1 to answer", LEADER_BOUND, || {
        let request = http
            .post(format!("{url}/v1/executors"))
            .json(&register_request("no-leader"));
        async move { request.send().await.map_err(|e| e.to_string()) }
    })
    .await;
    assert_eq!(reply.status(), 503);
    assert!(reply.headers().contains_key("retry-after"));
    assert_eq!(reply.headers()["content-type"], "application/problem+json");
    let problem: leasehold_api::problem::Problem = reply.json().await.unwrap();
    assert_eq!(problem.code, ErrorCode::NoLeader);
    assert!(problem.retryable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_the_leader_five_times_writes_resume_and_the_killed_node_catches_up() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions::default());
    let mut leader = cluster.wait_for_leader(LEADER_BOUND).await;
    for round in 0..5 {
        let before = write(&cluster, &format!("before-{round}")).await;
        cluster.manager(leader).kill();
        let new_leader = cluster.wait_for_leader(LEADER_BOUND).await;
        assert_ne!(
            new_leader, leader,
            "round {round}: a killed node cannot lead"
        );
        let after = write(&cluster, &format!("after-{round}")).await;
        assert!(after > before);

        cluster.manager(leader).start();
        cluster.wait_applied(leader, after, CATCH_UP_BOUND).await;
        leader = cluster.wait_for_leader(LEADER_BOUND).await;
    }
}

/// The dead-leader check (manager/src/raft/failover.rs) runs with an election timeout of 1 s:
/// the leader lease is then 2 s, and openraft's own timer stands a follower only after 3–4 s of
/// silence, so which of the two replaced the leader shows in the check's counter.
const SLOW_TIMER_ELECTION_TIMEOUT: &str = "1s";
/// At least 3 × the 2 s longest election timeout, as the manager requires.
const SLOW_TIMER_LEASE: &str = "6s";
const DEAD_LEADER_ELECTIONS: &str = "leasehold_raft_dead_leader_elections_total";
const LEADER_SILENCE: &str = "leasehold_raft_leader_silence_seconds";

fn slow_timer_cluster() -> Cluster {
    let mut cluster = Cluster::new(ClusterOptions {
        lease: SLOW_TIMER_LEASE.to_string(),
        ..ClusterOptions::default()
    });
    for id in 1..=3 {
        cluster
            .manager(id)
            .set_flag("--election-timeout", SLOW_TIMER_ELECTION_TIMEOUT);
    }
    cluster.start_all();
    cluster
}

async fn scrape(cluster: &Cluster, id: u64) -> std::collections::BTreeMap<String, f64> {
    leasehold_tests::http_checks::scrape(&cluster.http, &cluster.url(id))
        .await
        .unwrap_or_else(|e| panic!("manager {id}: {e}"))
}

/// `GET /raft/identity` of manager `id` (roles are not checked in plaintext, P13.5).
async fn raft_identity(cluster: &Cluster, id: u64) -> serde_json::Value {
    cluster
        .http
        .get(format!("{}/raft/identity", cluster.url(id)))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET /raft/identity of manager {id}: {e}"))
        .json()
        .await
        .unwrap()
}

/// `series` summed over `ids` (absent counts as zero).
async fn summed_over(cluster: &Cluster, ids: &[u64], series: &str) -> f64 {
    let mut scrapes = Vec::new();
    for id in ids {
        scrapes.push(scrape(cluster, *id).await);
    }
    summed(&scrapes, series)
}

/// Waits until the managers `ids` name one leader that is not `old` (the old one may not answer).
async fn wait_for_leader_other_than(cluster: &Cluster, ids: &[u64], old: u64) -> u64 {
    poll_until(
        &format!("managers {ids:?} to agree on a leader other than {old}"),
        LEADER_BOUND,
        || async {
            let mut leaders = BTreeSet::new();
            for id in ids {
                let info = cluster.cluster_info(*id).await?;
                leaders.insert(info.leader_id);
            }
            match leaders.into_iter().collect::<Vec<_>>()[..] {
                [Some(leader)] if leader != old => Ok(leader),
                ref seen => Err(format!("leaders named: {seen:?}")),
            }
        },
    )
    .await
}

/// I4: a follower that finds the dead leader's port closed stands once the leader lease has
/// passed instead of waiting its election timer too; until then it hears the leader (the silence
/// it counts stays far below the time the cluster has run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_by_a_follower_that_finds_its_port_closed() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = slow_timer_cluster();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let before = write(&cluster, "before").await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &followers {
        cluster.wait_applied(*id, before, CATCH_UP_BOUND).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    for id in &followers {
        let silence = scrape(&cluster, *id).await.get(LEADER_SILENCE).copied();
        let silence = silence.expect("the dead-leader check runs and exports the silence");
        assert!(
            silence < 5.0,
            "manager {id} counts {silence} s without its leader after 10 s of a healthy cluster"
        );
        // What the other follower reads before it stands: this one's log and lease.
        let identity = raft_identity(&cluster, *id).await;
        assert!(
            identity["last_log"]["index"].as_u64() >= Some(before),
            "{identity}"
        );
        let lease_silence = identity["lease_silence_ms"].as_u64();
        assert!(lease_silence.is_some_and(|ms| ms < 5_000), "{identity}");
    }
    let identity = raft_identity(&cluster, leader).await;
    assert!(
        identity.get("lease_silence_ms").is_none(),
        "a leader follows no lease: {identity}"
    );
    assert_eq!(
        summed_over(&cluster, &followers, DEAD_LEADER_ELECTIONS).await,
        0.0
    );

    cluster.manager(leader).kill();
    let new_leader = wait_for_leader_other_than(&cluster, &followers, leader).await;
    assert!(
        summed_over(&cluster, &followers, DEAD_LEADER_ELECTIONS).await >= 1.0,
        "the new leader ({new_leader}) was elected by openraft's timer alone"
    );
    let after = write(&cluster, "after").await;
    assert!(after > before);
}

/// A stopped (SIGSTOP) leader still has its connections accepted by the kernel: it may be alive,
/// so the dead-leader check does not stand, and openraft's timer replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_replaced_by_the_election_timer_not_by_the_port_check() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = slow_timer_cluster();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    cluster.manager(leader).signal(Signal::SIGSTOP);
    let new_leader = wait_for_leader_other_than(&cluster, &followers, leader).await;
    let stood = summed_over(&cluster, &followers, DEAD_LEADER_ELECTIONS).await;
    cluster.manager(leader).signal(Signal::SIGCONT);
    assert_eq!(
        stood, 0.0,
        "a follower stood against a paused leader (new leader {new_leader})"
    );
    write(&cluster, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_cluster_stop_and_restart_keeps_the_log_and_state() {
    let _serial = one_cluster_at_a_time().await;
    // A lease far longer than the test: the registered executors never renew, and one that
    // lapsed would be planned around differently by the leader before the stop (which sees it
    // lapse) and the one after (which may not act on lapses for a lease, P6.1), which is no
    // difference in what was stored.
    let mut cluster = Cluster::start(ClusterOptions {
        lease: "60s".into(),
        ..ClusterOptions::default()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let mut last = 0;
    for n in 0..5 {
        last = write(&cluster, &format!("durable-{n}")).await;
    }
    for id in [1, 2, 3] {
        cluster.wait_applied(id, last, CATCH_UP_BOUND).await;
    }
    // The leader goes on planning after the last write (the registrations' handoffs are
    // retargeted as more executors join): the state compared is the one it settles at, held
    // for 2 s, everywhere.
    let before = poll_until("the state to settle", CATCH_UP_BOUND, || async {
        let first = durable_view(&cluster, 1).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let second = durable_view(&cluster, 1).await;
        if first == second {
            Ok(second)
        } else {
            Err(format!(
                "moved from revision {} to {}",
                first["revision"], second["revision"]
            ))
        }
    })
    .await;
    let settled_at = before["revision"].as_u64().unwrap();
    for id in [1, 2, 3] {
        cluster.wait_applied(id, settled_at, CATCH_UP_BOUND).await;
    }
    assert_eq!(
        before["executors"].as_array().map(Vec::len),
        Some(5),
        "{before}"
    );
    for id in [1, 2, 3] {
        let status = cluster.manager(id).terminate(STOP_BOUND).await;
        assert!(status.success(), "manager {id} stopped with {status}");
    }
    for id in [1, 2, 3] {
        cluster.manager(id).start();
    }
    cluster.wait_for_leader(LEADER_BOUND).await;
    for id in [1, 2, 3] {
        cluster.wait_applied(id, last, CATCH_UP_BOUND).await;
        let info = cluster.cluster_info(id).await.unwrap();
        assert_eq!(voter_ids(&info), BTreeSet::from([1, 2, 3]));
        assert_eq!(
            durable_view(&cluster, id).await,
            before,
            "node {id}: state after the restart"
        );
    }
    // Writes go on after the restart, at higher revisions.
    assert!(write(&cluster, "after-restart").await > last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_joins_by_snapshot_install_and_then_a_node_is_removed() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let mut last = 0;
    for n in 0..10 {
        last = write(&cluster, &format!("before-join-{n}")).await;
    }
    // Snapshot and purge everywhere, so the newcomer cannot be sent the log from its start.
    for id in [1, 2, 3] {
        cluster.wait_applied(id, last, CATCH_UP_BOUND).await;
        let reply = cluster
            .http
            .post(format!(
                "{}/v1/cluster/snapshot?purge=true",
                cluster.url(id)
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(
            reply.status(),
            200,
            "snapshot on node {id}: {}",
            reply.text().await.unwrap()
        );
    }
    let leader_url = cluster.url(leader);
    cluster.add_joiner(4).start_joining(&leader_url);
    let this = &cluster;
    poll_until(
        "node 4 to become a voter",
        Duration::from_secs(60),
        || async move {
            let info = this.cluster_info(leader).await?;
            let voters = voter_ids(&info);
            voters
                .contains(&4)
                .then_some(())
                .ok_or(format!("voters {voters:?}"))
        },
    )
    .await;
    cluster.wait_applied(4, last, CATCH_UP_BOUND).await;
    let joined = cluster.cluster_info(4).await.unwrap();
    let snapshot = joined
        .snapshot
        .expect("node 4 was brought up by a snapshot install");
    assert!(snapshot.last_log_index.unwrap() >= last);
    assert!(write(&cluster, "after-join").await > last);

    let removed = cluster
        .client()
        .remove_node(4)
        .await
        .expect("remove node 4");
    assert_eq!(removed.voters.len(), 3, "{removed:?}");
    let info = cluster.cluster_info(leader).await.unwrap();
    assert_eq!(voter_ids(&info), BTreeSet::from([1, 2, 3]));
    assert!(info.learners.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_data_dir_was_wiped_cannot_rejoin_as_its_old_self() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let wiped = *cluster.managers.keys().find(|&&id| id != leader).unwrap();
    let mut last = 0;
    for n in 0..3 {
        last = write(&cluster, &format!("before-wipe-{n}")).await;
    }
    for id in [1, 2, 3] {
        cluster.wait_applied(id, last, CATCH_UP_BOUND).await;
    }
    // Every node pins every other node's storage identity within a few seconds of forming.
    let this = &cluster;
    poll_until(
        "all storage identities pinned",
        CATCH_UP_BOUND,
        || async move {
            let mut missing = Vec::new();
            for id in [1u64, 2, 3] {
                let report: serde_json::Value = this
                    .http
                    .get(format!("{}/raft/identity", this.url(id)))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?
                    .json()
                    .await
                    .map_err(|e| e.to_string())?;
                let pins = report["pins"].as_object().map(|p| p.len()).unwrap_or(0);
                if pins < 2 {
                    missing.push(id);
                }
            }
            missing
                .is_empty()
                .then_some(())
                .ok_or(format!("nodes with fewer than 2 pins: {missing:?}"))
        },
    )
    .await;

    cluster.manager(wiped).terminate(STOP_BOUND).await;
    cluster.manager(wiped).wipe_data_dir();
    cluster.manager(wiped).start();
    let status = cluster
        .manager(wiped)
        .wait_exit(Duration::from_secs(30))
        .await;
    assert!(
        !status.success(),
        "a wiped node must refuse to start as its old self"
    );
    let log = cluster.managers[&wiped].log();
    assert!(
        log.contains("data directory is new"),
        "the refusal says why:\n{log}"
    );

    // The two others still hold a quorum and every committed entry.
    let after = write(&cluster, "while-wiped-node-is-out").await;
    assert!(after > last);

    // The documented way back: remove the member, then join with the new directory.
    cluster
        .client()
        .remove_node(wiped)
        .await
        .expect("remove the wiped node");
    cluster.manager(wiped).wipe_data_dir();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let leader_url = cluster.url(leader);
    cluster.manager(wiped).start_joining(&leader_url);
    let this = &cluster;
    poll_until(
        "the re-added node to be a voter again",
        Duration::from_secs(60),
        || async move {
            let info = this.cluster_info(leader).await?;
            let voters = voter_ids(&info);
            (voters.len() == 3 && voters.contains(&wiped))
                .then_some(())
                .ok_or(format!("voters {voters:?}"))
        },
    )
    .await;
    cluster.wait_applied(wiped, after, CATCH_UP_BOUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p8_2_sigterm_on_the_leader_hands_over_while_writes_keep_succeeding() {
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions::default());
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let client = cluster.client();
    let (stop_writing, mut writing_stopped) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(async move {
        let mut revisions = Vec::new();
        for n in 0.. {
            if *writing_stopped.borrow_and_update() {
                break;
            }
            let grant = client
                .register(&register_request(&format!("during-handover-{n}")))
                .await
                .unwrap_or_else(|e| panic!("write {n} failed during the handover: {e}"));
            revisions.push(grant.revision);
        }
        revisions
    });
    let status = cluster.manager(leader).terminate(STOP_BOUND).await;
    assert!(status.success(), "the leader stopped with {status}");
    let log = cluster.managers[&leader].log();
    assert!(
        log.contains("leadership handed over"),
        "the leader handed over before stopping:\n{log}"
    );
    let new_leader = cluster.wait_for_leader(LEADER_BOUND).await;
    assert_ne!(new_leader, leader);
    write(&cluster, "after-handover").await;
    stop_writing.send(true).unwrap();
    // The writer panics on any failed write: writes refused during the handover are refused as
    // retryable (no_leader) and the client's patience carries them to the new leader (P7.1).
    let revisions = writer.await.expect("no write failed during the handover");
    assert!(
        !revisions.is_empty(),
        "the writer wrote across the handover"
    );
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "acknowledged writes are ordered: {revisions:?}"
    );
}
