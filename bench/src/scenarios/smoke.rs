//! The short version CI runs (bench/tests/smoke.rs): seconds per system, small N, a short soak.

use super::*;

/// A few seconds of each system at a small N and a short soak: checks that the tool runs end to
/// end and reports numbers, asserts nothing about them.
pub async fn smoke(env: &Env, soak: Duration) -> Result<Vec<Table>> {
    let executors = 20;
    let shards = 64;
    let mut steps = Table::new(&[
        "smoke",
        "system",
        "executors",
        "offered/s",
        "achieved/s",
        "ok",
        "errors",
        "p50",
        "p99",
    ]);
    let step_row = |system: &str, step: &StepResult| {
        vec![
            "smoke".to_owned(),
            system.to_owned(),
            executors.to_string(),
            fmt_rate(step.offered_per_s),
            fmt_rate(step.achieved_per_s),
            step.ok.to_string(),
            step.errors.to_string(),
            fmt_ms(step.p50_ms),
            fmt_ms(step.p99_ms),
        ]
    };
    let warmup = Duration::from_millis(500);
    let measure = Duration::from_secs(2);
    let rate = 50.0;
    let security = &env.security;
    {
        let mut cluster =
            leasehold_cluster(env, security, "smoke-leasehold", default_flags(shards)).await?;
        let fleet = settled_fleet(&mut cluster, security, executors, shards).await?;
        // The fleet registers at once and may be placed in one registration entry, which tells
        // every executor its set in the reply: no push. A newcomer after it has settled takes
        // shards from it, so its push listener must answer revokes (P5.2), and the newcomer's
        // departure gives them back by assignment pushes (P4.1).
        let newcomer = leasehold_fleet(&cluster, security, 1, executor_client()).await?;
        poll_until(
            "a revoke answered by the fleet for the newcomer",
            Duration::from_secs(60),
            || {
                let answered = fleet.pushes_answered();
                async move {
                    if answered > 0 {
                        Ok(())
                    } else {
                        Err("no assignment push or revoke reached the fleet's push listener".into())
                    }
                }
            },
        )
        .await?;
        newcomer.deregister_all().await?;
        settle(
            &mut cluster,
            &fleet,
            shards,
            SETTLE_BOUND,
            Renewing::WhileSettling,
        )
        .await?;
        let step = drive::open_loop(fleet.clone(), rate, warmup, measure).await;
        steps.row(step_row(&security.tagged("leasehold"), &step));
        fleet.deregister_all().await?;
    }
    if let Some(etcd) = env.etcd_or_skip("smoke") {
        let cluster = etcd_cluster(etcd, env, security, "smoke-etcd", Vec::new()).await?;
        let clients = cluster.clients(1, Duration::from_secs(5)).await?;
        let put = Arc::new(
            EtcdPutFleet::start(
                clients.clone(),
                executors,
                PUT_LEASE_TTL_S,
                claims_payload(4),
            )
            .await?,
        );
        let step = drive::open_loop(put, rate, warmup, measure).await;
        steps.row(step_row(&security.tagged("etcd-put"), &step));
        let keepalive = Arc::new(EtcdKeepAliveFleet::start(clients, executors, 60).await?);
        let step = drive::open_loop(keepalive, rate, warmup, measure).await;
        steps.row(step_row(&security.tagged("etcd-keepalive"), &step));
    }
    let (series, summary) = b6(
        env,
        &B6 {
            duration: soak,
            sample_every: soak / 4,
            executors,
            rate_per_s: rate,
            shards,
            manager_args: vec![
                "--snapshot-every".into(),
                "100".into(),
                "--snapshot-keep".into(),
                "20".into(),
            ],
        },
    )
    .await?;
    Ok(vec![steps, series, summary])
}
