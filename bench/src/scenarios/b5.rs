//! B5: snapshot build and install at up to a million shards (docs/BENCHMARKS.md).

use super::*;

pub async fn b5(env: &Env, executors: usize, options: ManagerFlags) -> Result<Table> {
    let load = load_average();
    let shards = options.shard_count;
    let heartbeat = options
        .heartbeat
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let security = &env.security;
    let mut cluster = leasehold_cluster(env, security, "b5", options).await?;
    let (_fleet, cadence, _) = renewing_settled_fleet(
        "B5",
        &mut cluster,
        security,
        executors,
        shards,
        Duration::from_secs(1800),
    )
    .await?;
    let snapshot = measure_snapshot(&mut cluster).await?;
    let join = time_join(&mut cluster).await?;
    let counters = cadence.stop().await;
    let per_shard = snapshot.size_bytes as f64 / f64::from(shards);
    let mut table = Table::new(&[
        "B5",
        "executors",
        "shards",
        "heartbeat",
        "snapshot size",
        "bytes per shard",
        "snapshot build (leader, POST /v1/cluster/snapshot)",
        "join: start → caught-up voter (snapshot install)",
        "follower restart → ready and caught up",
        "leader RSS",
        "renewals ok / failed during the run",
        "load avg",
    ]);
    table.row(vec![
        "B5".into(),
        executors.to_string(),
        shards.to_string(),
        heartbeat,
        fmt_bytes(snapshot.size_bytes),
        format!("{per_shard:.1} B"),
        format!("{:.2} s", snapshot.build.as_secs_f64()),
        format!("{:.2} s", join.as_secs_f64()),
        format!("{:.2} s", snapshot.restart.as_secs_f64()),
        fmt_bytes(snapshot.leader_rss_bytes),
        format!(
            "{} / {}",
            counters.ok.load(Ordering::Relaxed),
            counters.errors.load(Ordering::Relaxed)
        ),
        format!("{load} → {}", load_average()),
    ]);
    Ok(table)
}

/// What [`measure_snapshot`] measured.
struct SnapshotFigures {
    /// The leader's resident memory before it builds the snapshot.
    leader_rss_bytes: u64,
    /// The leader's snapshot build, as `POST /v1/cluster/snapshot` answered it.
    build: Duration,
    /// A follower's snapshot on disk.
    size_bytes: u64,
    /// That follower's restart until ready and caught up.
    restart: Duration,
}

/// Measurement: the leader's memory and snapshot build, then a follower's snapshot size and
/// restart.
async fn measure_snapshot(cluster: &mut ManagerCluster) -> Result<SnapshotFigures> {
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let leader_rss_bytes = cluster
        .managers
        .get(&leader)
        .and_then(Manager::pid)
        .and_then(rss_bytes)
        .unwrap_or(0);
    let build = post_snapshot(cluster, leader, false).await?;
    let follower = cluster
        .managers
        .keys()
        .copied()
        .find(|&id| id != leader)
        .ok_or_else(|| anyhow!("no follower"))?;
    let (size_bytes, restart) = snapshot_size_and_restart(cluster, follower).await?;
    Ok(SnapshotFigures {
        leader_rss_bytes,
        build,
        size_bytes,
        restart,
    })
}

/// Measurement: a fourth node joining from the start until it is a caught-up voter.
async fn time_join(cluster: &mut ManagerCluster) -> Result<Duration> {
    // Join: purge the leader's log behind a fresh snapshot, so the new node must install it.
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    post_snapshot(cluster, leader, true).await?;
    let target = committed_index(cluster, leader).await?;
    let joined_at = Instant::now();
    let via = cluster.url(leader)?;
    procs::join_new(cluster, 4, &via)?;
    let cluster = &*cluster;
    poll_every(
        "node 4 a caught-up voter",
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let info = cluster.cluster_info(4).await?;
            let voter = info.voters.iter().any(|m| m.node_id == 4);
            match info.applied_index {
                Some(applied) if voter && applied >= target => Ok(()),
                other => Err(format!("voter {voter}, applied {other:?} of {target}")),
            }
        },
    )
    .await?;
    Ok(joined_at.elapsed())
}
