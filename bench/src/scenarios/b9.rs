//! B9: ten thousand executors started at once, until every shard is delivered and spread (docs/BENCHMARKS.md).

use super::*;

/// The routing table as the leader has it now (`GET /v1/routing?consistent=true`).
pub(super) async fn cluster_routing_table(cluster: &ManagerCluster) -> Result<RouteTable> {
    let url = cluster.url(1)?;
    let table: RoutingTable = cluster
        .http
        .get(format!("{url}/v1/routing?consistent=true"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    RouteTable::from_routing(&table).map_err(|e| anyhow!("the cluster's routing table: {e}"))
}

/// `executors` simulated executors start at once (registrations 64 at a time, as fast as the
/// cluster takes them) against a fresh cluster with the production defaults; timed until every
/// shard is delivered and the spread is even. They renew at the protocol's cadence from their
/// registration on, as real executors would. The leader logs say how the handoffs completed: by
/// the old owner's release (the revoke answer or its claims) or on its lease expiry (P5.2).
pub async fn b9(env: &Env, executors: usize, shard_counts: &[u32]) -> Result<Table> {
    let mut table = Table::new(&[
        "B9",
        "executors",
        "shards",
        "all registered after",
        "settled after (from the first registration)",
        "revokes acknowledged (log lines)",
        "handoffs completed on expiry (log lines)",
        "routing client current after settling",
        "routing tables adopted / watch replies",
        "load avg",
    ]);
    for &shards in shard_counts {
        table.row(start_at_once(env, executors, shards).await?);
    }
    Ok(table)
}

/// One shard count: the fleet started at once and settled, with a routing client following the
/// cluster throughout. Returns the table's row.
async fn start_at_once(env: &Env, executors: usize, shards: u32) -> Result<Vec<String>> {
    let load = load_average();
    let security = &env.security;
    let name = format!("b9-{shards}");
    let mut cluster = leasehold_cluster(env, security, &name, default_flags(shards)).await?;
    // A client routing by key throughout, as a service's callers would: it
    // follows `/v1/watch` while the fleet settles; how long after the cluster settled its
    // table shows the final owners is what a caller waits to reach them.
    let routing = RoutingClient::connect_with_tls(
        cluster.urls(),
        RoutingConfig::default(),
        security.executor_tls(),
    )
    .await
    .context("B9: the routing client")?;
    let started = Instant::now();
    let (fleet, cadence, registered) = renewing_settled_fleet(
        "B9",
        &mut cluster,
        security,
        executors,
        shards,
        SETTLE_BOUND,
    )
    .await?;
    let settled = started.elapsed();
    let routed_at = routing_caught_up(&cluster, &routing, started).await?;
    let routing_stats = routing.stats();
    let counters = cadence.stop().await;
    let evicted = counters.evictions.load(Ordering::Relaxed);
    if evicted > 0 {
        bail!("B9: {evicted} executors were evicted while settling");
    }
    let row = vec![
        "B9".into(),
        executors.to_string(),
        shards.to_string(),
        format!("{:.1} s", registered.as_secs_f64()),
        format!("{:.1} s", settled.as_secs_f64()),
        log_lines_containing(&cluster, "revoke acknowledged").to_string(),
        log_lines_containing(&cluster, "handoffs completed on the old owner's expiry").to_string(),
        format!("{:.2} s", routed_at.saturating_sub(settled).as_secs_f64()),
        format!(
            "{} / {}",
            routing_stats.tables_adopted, routing_stats.watch_replies
        ),
        format!("{load} → {}", load_average()),
    ];
    fleet.deregister_all().await?;
    Ok(row)
}

/// Measurement: waits until `routing`'s table shows the owners the leader has now; returns when,
/// from `started`.
async fn routing_caught_up(
    cluster: &ManagerCluster,
    routing: &RoutingClient,
    started: Instant,
) -> Result<Duration> {
    let final_table = cluster_routing_table(cluster).await?;
    let routed_at = poll_until(
        "B9: the routing client's table to show the final owners",
        SETTLE_BOUND,
        || {
            let routing = routing.clone();
            let final_table = final_table.clone();
            async move {
                let table = routing.table();
                if table.revision() >= final_table.revision()
                    && table.routes().eq(final_table.routes())
                {
                    Ok(started.elapsed())
                } else {
                    Err(format!(
                        "client at revision {}, cluster at {}",
                        table.revision(),
                        final_table.revision()
                    ))
                }
            }
        },
    )
    .await?;
    Ok(routed_at)
}
