//! An operator's removal of a live executor (PROTOCOL P5.5, I1) over the real binaries, under
//! mutual TLS (the operator is the `admin` certificate, P13.3). Only the executor itself hands
//! its shards over at once; an operator's deregistration drains it, and its shards move by the
//! handoff of P5.2 while it keeps admitting them, so no admission log overlaps another. Before
//! P5.5 the managers handed its shards on at the `DELETE` while the executor admitted until its
//! next renewal (a security review measured 3.1 s of overlap at a 15 s lease).

use std::time::Instant;

use leasehold_api::client::Removal;
use leasehold_tests::ctl::leaseholdctl;
use leasehold_tests::executor::wait_for_even_split;
use leasehold_tests::faults::{
    fault_cluster_options, report_figure, use_fault_timing, wait_registered, Fleet, FAULT_SHARDS,
    LEADER_BOUND, SETTLE_BOUND,
};
use leasehold_tests::{one_cluster_at_a_time, poll_until, tls_files, Cluster, ClusterOptions};
use nix::sys::signal::Signal;

/// P5.5, I1: `DELETE /v1/executors/{id}` by an admin on an executor that holds shards answers
/// `202` with it draining; asked again until `204`, the executor is removed only once its
/// shards have moved by handoff; then another through `leaseholdctl executor remove --wait`;
/// then a third stops on SIGTERM and drains itself with its executor certificate and its own
/// credential, no admin certificate (P17.2), each shard stopped by its revoke; every admission
/// log together shows no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_5_an_operator_removes_a_live_executor_only_through_the_handoff() {
    const SCENARIO: &str = "p5_5_an_operator_removes_a_live_executor_only_through_the_handoff";
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::new(ClusterOptions {
        make_certificates: true,
        ..fault_cluster_options()
    });
    use_fault_timing(&mut cluster);
    cluster.start_all();
    cluster.wait_for_leader(LEADER_BOUND).await;
    let mut fleet = Fleet::new(cluster.dir.path().to_path_buf());
    let executors: Vec<usize> = ["a", "b", "c", "d"]
        .iter()
        .map(|name| fleet.start_local(&cluster, name))
        .collect();
    wait_for_even_split(&fleet.refs(&executors), FAULT_SHARDS, SETTLE_BOUND).await;
    let victim = executors[0];
    let survivors = &executors[1..];
    let victim_id = wait_registered(fleet.get(victim)).await;

    let admin = cluster.client_as("admin");
    let asked_at = Instant::now();
    match admin.remove_executor(&victim_id).await.expect("remove") {
        Removal::Draining(executor) => assert!(
            executor.draining,
            "P5.5: a live executor holding shards is drained first: {executor:?}"
        ),
        Removal::Removed => panic!("P5.5: a live executor holding shards was removed at once"),
    }
    poll_until(
        "the operator's removal to complete",
        SETTLE_BOUND,
        || async {
            match admin.remove_executor(&victim_id).await {
                Ok(Removal::Removed) => Ok(()),
                Ok(Removal::Draining(executor)) => Err(format!("still draining: {executor:?}")),
                Err(error) => Err(error.to_string()),
            }
        },
    )
    .await;
    report_figure(SCENARIO, "removal asked -> removed", asked_at.elapsed());
    // Removed, it would register again on its next renewal's 404: stop it, as an operator
    // removing an executor does.
    fleet.kill(victim);
    wait_for_even_split(&fleet.refs(survivors), FAULT_SHARDS, SETTLE_BOUND).await;

    // The same through `leaseholdctl executor remove --wait`, with the admin certificate.
    let second = survivors[0];
    let second_id = wait_registered(fleet.get(second)).await;
    let certs = cluster.options.tls_dir.clone().expect("a TLS cluster");
    let admin_files = tls_files(&certs, "admin");
    let path = |file: &std::path::Path| file.display().to_string();
    let (cacert, cert, key) = (
        path(&admin_files.trusted_ca_file),
        path(&admin_files.cert_file),
        path(&admin_files.key_file),
    );
    let run = leaseholdctl(
        &cluster.urls(),
        &[
            "--cacert",
            &cacert,
            "--cert",
            &cert,
            "--key",
            &key,
            "executor",
            "remove",
            &second_id,
            "--wait",
            "--wait-timeout",
            "60s",
        ],
    )
    .await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("executor {second_id} removed")),
        "{run:?}"
    );
    fleet.kill(second);
    wait_for_even_split(&fleet.refs(&survivors[1..]), FAULT_SHARDS, SETTLE_BOUND).await;

    // P17.2 under TLS: SIGTERM, and the executor drains itself onto the last one.
    let (stopping, last) = (survivors[1], survivors[2]);
    let terminated_at = Instant::now();
    fleet.signal(stopping, Signal::SIGTERM);
    poll_until(
        "the stopping executor to drain itself",
        SETTLE_BOUND,
        || async {
            let log = fleet.get(stopping).log();
            if log.contains("drained: every shard was handed over") {
                Ok(())
            } else {
                Err(log)
            }
        },
    )
    .await;
    wait_for_even_split(&fleet.refs(&[last]), FAULT_SHARDS, SETTLE_BOUND).await;
    report_figure(
        SCENARIO,
        "SIGTERM -> drained onto the last executor",
        terminated_at.elapsed(),
    );
    let reasons = fleet.reasons(stopping);
    assert!(
        reasons.get("revoked").copied().unwrap_or(0) > 0 && !reasons.contains_key("shutdown"),
        "P17.2: every shard handed over by its revoke, none cut off by the stop: {reasons:?}"
    );

    let report = fleet.check(SCENARIO);
    assert!(
        report.handoffs >= (2 * FAULT_SHARDS / 3) as usize,
        "both removed executors' shards moved: {report:?}"
    );
}
