//! I3 across a restart, the read floor of `Leadership::linearizable_read`: a leader restored in
//! office (its vote was committed for itself, so openraft restores it without an election and
//! without a blank entry of its own) takes its stored committed id as the read index. That id is
//! not flushed on every commit, so after a crash it can be older than entries the leader had
//! committed and acknowledged. A consistent read must still show them: it waits until this node
//! has applied everything it had logged when it started.
//!
//! Three managers in this process, stopped followers first so the leader keeps its vote; the
//! leader's stored committed id is then set back two entries, as a crash can leave it, and every
//! replica restarts with its applies delayed (the storage seam `ApplyFaults`), so that the entries
//! past the stored committed id are applied a second after the rest.
//!
//! The same cluster pins two more shell guards of `Leadership` (manager/src/handles/leadership.rs): every
//! replica names the leader, and only the leader names itself (P7.1, `leader`, `leader_address`);
//! and a leader restored but not yet in office never answers a renewal `unknown_executor` from a
//! state it has not caught up (P4.4, `in_office`): the executor would forget itself; `/v1/cluster`
//! reports a committed index at or past the applied one (`committed_index`); and a leader told
//! to stop names nobody while it hands over (P8.2, `begin_step_down`, `is_stepping_down`).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{get, register, start, Layout, Member, BOUND};
use leasehold_manager::lease::LeaseState;
use leasehold_manager::raft::TypeConfig;
use leasehold_manager::server::config::ManagerConfig;
use leasehold_raft_store::{ApplyFaults, LogStoreConfig};
use openraft::storage::RaftLogStorage;
use openraft::RaftLogReader;
use serde_json::{json, Value};

const MEMBERS: usize = 3;
const REGISTRATIONS: usize = 5;
const APPLY_DELAY: Duration = Duration::from_millis(1_000);
/// How long after its stop was sent the stopping leader may still name itself (it had not heard
/// the stop yet): generous for a loaded machine, and half the Raft lease (2 s at a 1 s election
/// timeout), after which a leader no quorum acknowledges names nobody anyway (P8.4).
const STOP_HEARD_WITHIN: Duration = Duration::from_millis(1_000);
/// Restarts tried before the test gives up on seeing the leader restored in office.
const ATTEMPTS: u32 = 3;

/// The configuration of member `id`: long leases, so nothing expires while the replicas are
/// down; slow elections, so the restarted followers hear the restored leader long before they
/// would stand, even on a loaded machine.
fn member_config(data_dir: &Path, id: usize, ports: &[u16]) -> ManagerConfig {
    common::member_config(
        data_dir,
        id,
        ports,
        &["--lease-duration=60s", "--election-timeout=1s"],
    )
}

/// Sets the stored committed id in `data_dir` back to the first entry of the leader's term (the
/// blank entry openraft takes as the read index's floor), as a crash that lost every unflushed
/// write of it can leave it; returns the index it was set to.
async fn lose_committed_since_the_terms_first_entry(data_dir: &Path) -> u64 {
    common::wait_until_released(data_dir).await;
    let db = sled::open(data_dir).unwrap();
    let (mut log, state_machine) = leasehold_raft_store::open::<TypeConfig, LeaseState>(
        &db,
        data_dir,
        LogStoreConfig::default(),
    )
    .unwrap();
    let state = log.get_log_state().await.unwrap();
    let last = state.last_log_id.unwrap();
    let first = state
        .last_purged_log_id
        .map_or(0, |purged| purged.index + 1);
    let entries = log.try_get_log_entries(first..=last.index).await.unwrap();
    let terms_first = entries
        .iter()
        .find(|entry| entry.log_id.leader_id == last.leader_id)
        .unwrap()
        .log_id;
    let committed = log.read_committed().await.unwrap().unwrap();
    assert!(
        committed.index > terms_first.index + REGISTRATIONS as u64,
        "the stored committed id {committed} covers the registrations after {terms_first}"
    );
    log.save_committed(Some(terms_first)).await.unwrap();
    drop((log, state_machine));
    db.flush().unwrap();
    terms_first.index
}

/// What one attempt came to.
enum Attempt {
    /// The restored leader answered its first consistent read in the term it led before the
    /// stop: the case this test is about.
    Restored {
        before: Value,
        after: Value,
        set_back_to: u64,
        /// What the renewal sent at once was answered before it was granted.
        refused_first: Vec<u16>,
    },
    /// An election ended the term first (a loaded machine), so the new term's blank entry was
    /// the read floor and nothing was judged.
    Reelected { term_before: u64, term_after: u64 },
}

/// I3: the registrations acknowledged before the stop are in the first consistent read the
/// restored leader answers, though its stored committed id had lost every entry of its term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i3_a_leader_restored_in_office_reads_only_after_applying_what_it_had_logged() {
    for attempt in 1..=ATTEMPTS {
        match restart_in_office().await {
            Attempt::Restored {
                before,
                after,
                set_back_to,
                refused_first,
            } => {
                assert!(
                    !refused_first.contains(&404),
                    "P4.4: a renewal of an executor registered before the stop was answered \
                     404 by the restored leader before it had applied its log: {refused_first:?}"
                );
                assert!(
                    after["revision"].as_u64() >= before["revision"].as_u64()
                        && after["executors"].as_array().unwrap().len() == REGISTRATIONS,
                    "I3: the first consistent read after the restart shows revision {} and {} \
                     executors; before the stop it showed revision {} and {REGISTRATIONS} (the \
                     stored committed id had been set back to index {set_back_to})",
                    after["revision"],
                    after["executors"].as_array().unwrap().len(),
                    before["revision"],
                );
                return;
            }
            Attempt::Reelected {
                term_before,
                term_after,
            } => eprintln!(
                "attempt {attempt}: an election (term {term_before} -> {term_after}) came \
                 before the first read; nothing judged"
            ),
        }
    }
    panic!("in {ATTEMPTS} attempts the leader was never restored in office for its first read");
}

async fn restart_in_office() -> Attempt {
    let Layout { dirs, ports, bases } = Layout::new(MEMBERS);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut members: Vec<Option<Member>> = (1..=MEMBERS)
        .map(|id| Some(start(member_config(dirs[id - 1].path(), id, &ports))))
        .collect();

    let deadline = Instant::now() + BOUND;
    let leader = loop {
        let cluster = get(&http, &format!("{}/v1/cluster", bases[0])).await;
        if let Some(id) = cluster.and_then(|c| c["leader_id"].as_u64()) {
            break id as usize;
        }
        assert!(Instant::now() < deadline, "no leader within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let leader_base = &bases[leader - 1];
    let mut ids = Vec::new();
    for n in 0..REGISTRATIONS {
        ids.push(register(&http, leader_base, n).await);
    }
    // Every replica names the leader in each reply's X-Leasehold-Leader (P7.1), the leader
    // itself included, and none names another; one that has not heard it yet names nobody.
    for base in &bases {
        let deadline = Instant::now() + BOUND;
        loop {
            let reply = http.get(format!("{base}/v1/cluster")).send().await.unwrap();
            let named = reply
                .headers()
                .get("x-leasehold-leader")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            match named {
                Some(named) => {
                    assert_eq!(&named, leader_base, "{base} names the leader");
                    break;
                }
                None => assert!(
                    Instant::now() < deadline,
                    "{base} named no leader within {BOUND:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let consistent = format!("{leader_base}/v1/state?consistent=true");
    let before = get(&http, &consistent).await.unwrap();
    assert_eq!(before["executors"].as_array().unwrap().len(), REGISTRATIONS);
    let term_before = term_of(&http, leader_base).await;

    // Followers first: the leader, stopping last, finds nobody to hand over to and keeps its
    // vote, so it is restored in office.
    for id in (1..=MEMBERS).filter(|&id| id != leader).chain([leader]) {
        members[id - 1].take().unwrap().stop().await;
    }
    let set_back_to = lose_committed_since_the_terms_first_entry(dirs[leader - 1].path()).await;

    // Every storage released first, then all started together.
    for dir in &dirs {
        common::wait_until_released(dir.path()).await;
    }
    let mut members: Vec<Member> = (1..=MEMBERS)
        .map(|id| {
            let mut config = member_config(dirs[id - 1].path(), id, &ports);
            config.log_store.apply_faults = ApplyFaults {
                delay_each_batch: Some(APPLY_DELAY),
            };
            start(config)
        })
        .collect();
    // Beside the first read: an executor registered before the stop renews at the restored
    // leader while its state is still being applied. It must never be told it is unknown
    // (P4.4: it would forget itself): a leader not yet in office lets the log decide.
    let renewal = {
        let http = http.clone();
        let base = leader_base.clone();
        let id = ids[0].clone();
        tokio::spawn(async move { renew_until_granted(&http, &base, &id).await })
    };
    let deadline = Instant::now() + BOUND;
    let after = loop {
        let last = match common::answer(&http, &consistent).await {
            Ok(state) => break state,
            Err(last) => last,
        };
        common::assert_running(&mut members[leader - 1], "the restored leader").await;
        if Instant::now() >= deadline {
            panic!(
                "the restored leader answered no consistent read within {BOUND:?}; the last \
                 answer: {last}; the members:{}",
                common::members_view(&bases, &members).await
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let term_after = term_of(&http, leader_base).await;
    let refused_first = renewal.await.unwrap();
    let cluster = get(&http, &format!("{leader_base}/v1/cluster"))
        .await
        .unwrap();
    let (committed, applied) = (
        cluster["committed_index"].as_u64(),
        cluster["applied_index"].as_u64(),
    );
    assert!(
        committed.is_some() && committed >= applied && applied > Some(REGISTRATIONS as u64),
        "/v1/cluster reports committed index {committed:?} beside applied index {applied:?}"
    );

    // P8.2: a leader told to stop hands over, and while it waits for the next leader it serves
    // on but names nobody (no writes are taken, none forwarded to itself).
    let stopped_at = Instant::now();
    let _ = members[leader - 1].stop.take().unwrap().send(());
    let named_while_handing_over = names_while_handing_over(&http, leader_base).await;
    let named_itself_late: Vec<Duration> = named_while_handing_over
        .iter()
        .filter(|(_, named)| named.as_deref() == Some(leader_base.as_str()))
        .map(|(at, _)| at.duration_since(stopped_at))
        .filter(|after| *after > STOP_HEARD_WITHIN)
        .collect();
    assert!(
        named_itself_late.is_empty(),
        "the stopping leader named itself {} times more than {STOP_HEARD_WITHIN:?} after its \
         stop, the last {:?} after, while it handed over ({} replies)",
        named_itself_late.len(),
        named_itself_late.last(),
        named_while_handing_over.len()
    );
    for member in &mut members {
        if let Some(stop) = member.stop.take() {
            let _ = stop.send(());
        }
    }
    for member in members {
        let _ = tokio::time::timeout(BOUND, member.running).await;
    }
    if term_after == term_before {
        Attempt::Restored {
            before,
            after,
            set_back_to,
            refused_first,
        }
    } else {
        Attempt::Reelected {
            term_before,
            term_after,
        }
    }
}

/// Renewals of `executor_id` sent to `base` until one is answered 200 (each a new connection:
/// the first as soon as the restarted node listens); the statuses answered before it, in order.
async fn renew_until_granted(http: &reqwest::Client, base: &str, executor_id: &str) -> Vec<u16> {
    let deadline = Instant::now() + BOUND;
    let mut answered = Vec::new();
    loop {
        if let Ok(reply) = http
            .post(format!("{base}/v1/executors/{executor_id}/renew"))
            .json(&json!({"claims": [], "revision": 0}))
            .send()
            .await
        {
            let status = reply.status().as_u16();
            if status == 200 {
                return answered;
            }
            answered.push(status);
        }
        assert!(
            Instant::now() < deadline,
            "{executor_id} was not renewed within {BOUND:?}: {answered:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whom `base` names in X-Leasehold-Leader, and when each reply came, until it names another
/// replica (a new leader) or stops answering.
async fn names_while_handing_over(
    http: &reqwest::Client,
    base: &str,
) -> Vec<(Instant, Option<String>)> {
    let deadline = Instant::now() + BOUND;
    let mut named = Vec::new();
    while Instant::now() < deadline {
        let Ok(reply) = http.get(format!("{base}/v1/cluster")).send().await else {
            break;
        };
        let leader = reply
            .headers()
            .get("x-leasehold-leader")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let another = leader.as_deref().is_some_and(|leader| leader != base);
        named.push((Instant::now(), leader));
        if another {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    named
}

/// The Raft term `base` reports.
async fn term_of(http: &reqwest::Client, base: &str) -> u64 {
    get(http, &format!("{base}/v1/cluster")).await.unwrap()["term"]
        .as_u64()
        .unwrap()
}
