//! The short version CI runs (bench/tests/smoke.rs): seconds per system, small N, a short soak.

use super::*;

/// Executors of each system in the smoke run.
const SMOKE_EXECUTORS: usize = 20;
const SMOKE_SHARDS: u32 = 64;
/// Each system's open loop: renewals offered per second, the warm-up and the measured window.
const SMOKE_RATE_PER_S: f64 = 50.0;
const SMOKE_WARMUP: Duration = Duration::from_millis(500);
const SMOKE_MEASURE: Duration = Duration::from_secs(2);

/// A few seconds of each system at a small N and a short soak: checks that the tool runs end to
/// end and reports numbers, asserts nothing about them.
pub async fn smoke(env: &Env, soak: Duration) -> Result<Vec<Table>> {
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
    let security = &env.security;
    let step = smoke_leasehold(env).await?;
    steps.row(step_row(&security.tagged("leasehold"), &step));
    if let Some(etcd) = env.etcd_or_skip("smoke") {
        let (put, keepalive) = smoke_etcd(env, etcd).await?;
        steps.row(step_row(&security.tagged("etcd-put"), &put));
        steps.row(step_row(&security.tagged("etcd-keepalive"), &keepalive));
    }
    let (series, summary) = b6(
        env,
        &B6 {
            duration: soak,
            sample_every: soak / 4,
            executors: SMOKE_EXECUTORS,
            rate_per_s: SMOKE_RATE_PER_S,
            shards: SMOKE_SHARDS,
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

/// One system's open loop as a row of the steps table.
fn step_row(system: &str, step: &StepResult) -> Vec<String> {
    vec![
        "smoke".to_owned(),
        system.to_owned(),
        SMOKE_EXECUTORS.to_string(),
        fmt_rate(step.offered_per_s),
        fmt_rate(step.achieved_per_s),
        step.ok.to_string(),
        step.errors.to_string(),
        fmt_ms(step.p50_ms),
        fmt_ms(step.p99_ms),
    ]
}

/// Leasehold: a settled fleet whose push listener answers a newcomer's revokes, then its open
/// loop.
async fn smoke_leasehold(env: &Env) -> Result<StepResult> {
    let security = &env.security;
    let mut cluster = leasehold_cluster(
        env,
        security,
        "smoke-leasehold",
        default_flags(SMOKE_SHARDS),
    )
    .await?;
    let fleet = settled_fleet(&mut cluster, security, SMOKE_EXECUTORS, SMOKE_SHARDS).await?;
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
        SMOKE_SHARDS,
        SETTLE_BOUND,
        Renewing::WhileSettling,
    )
    .await?;
    let step = drive::open_loop(fleet.clone(), SMOKE_RATE_PER_S, SMOKE_WARMUP, SMOKE_MEASURE).await;
    fleet.deregister_all().await?;
    Ok(step)
}

/// etcd: the open loop of shape (a), puts with a lease, then of shape (b), keepalives.
async fn smoke_etcd(env: &Env, etcd: &Path) -> Result<(StepResult, StepResult)> {
    let cluster = etcd_cluster(etcd, env, &env.security, "smoke-etcd", Vec::new()).await?;
    let clients = cluster.clients(1, Duration::from_secs(5)).await?;
    let put = Arc::new(
        EtcdPutFleet::start(
            clients.clone(),
            SMOKE_EXECUTORS,
            PUT_LEASE_TTL_S,
            claims_payload(4),
        )
        .await?,
    );
    let put_step = drive::open_loop(put, SMOKE_RATE_PER_S, SMOKE_WARMUP, SMOKE_MEASURE).await;
    let keepalive = Arc::new(EtcdKeepAliveFleet::start(clients, SMOKE_EXECUTORS, 60).await?);
    let keepalive_step =
        drive::open_loop(keepalive, SMOKE_RATE_PER_S, SMOKE_WARMUP, SMOKE_MEASURE).await;
    Ok((put_step, keepalive_step))
}
