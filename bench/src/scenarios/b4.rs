//! B4: re-homing, an executor killed and its shards delivered elsewhere (docs/BENCHMARKS.md).

use super::*;

pub(crate) async fn executors_view(
    cluster: &ManagerCluster,
    id: u64,
) -> Result<Vec<ExecutorView>, String> {
    let url = cluster.url(id).map_err(|e| e.to_string())?;
    let reply = cluster
        .http
        .get(format!("{url}/v1/executors"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    reply.json().await.map_err(|e| e.to_string())
}

pub async fn b4(env: &Env, shard_counts: &[u32]) -> Result<Table> {
    let mut table = Table::new(&[
        "B4",
        "shards",
        "shards on the killed executor",
        "executor SIGKILL → all its shards owned elsewhere",
        "target lease + tick + 1 s",
        "load avg",
    ]);
    let executor_bin =
        binary_in(&env.bin_dir, "leasehold-executor").context(procs::BIN_DIR_HINT)?;
    for &shards in shard_counts {
        table.row(rehome(env, &executor_bin, shards).await?);
    }
    Ok(table)
}

/// One shard count: three simulated executors and a real one, settled; the real one killed and
/// timed until its shards are owned elsewhere. Returns the table's row.
async fn rehome(env: &Env, executor_bin: &Path, shards: u32) -> Result<Vec<String>> {
    let load = load_average();
    eprintln!("B4: {shards} shards");
    let security = &env.security;
    let mut cluster = leasehold_cluster(
        env,
        security,
        &format!("b4-{shards}"),
        etcd_timing(shards, SHORT_LEASE),
    )
    .await?;
    let formed = Instant::now();
    let fleet = Arc::new(leasehold_fleet(&cluster, security, 3, executor_client()).await?);
    let cadence = Cadence::start(fleet.clone(), SHORT_LEASE_DURATION);
    let (mut command, address) = executor_command(executor_bin, &cluster, security, free_port()?);
    let mut victim = ChildProcess::spawn(
        &mut command,
        &env.dir(&format!("b4-{shards}-executor"))?
            .join("executor.log"),
    )?;
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let (victim_id, victim_shards) =
        wait_for_victim_placed(&cluster, leader, &address, shards).await?;
    // P6.1: a leader reaps nothing in its first lease; start the clock only after it.
    let in_office = SHORT_LEASE_DURATION + Duration::from_secs(1);
    if formed.elapsed() < in_office {
        tokio::time::sleep(in_office - formed.elapsed()).await;
    }
    let killed_at = Instant::now();
    victim.kill();
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    wait_for_rehomed(&cluster, leader, &victim_id, shards).await?;
    let took = killed_at.elapsed().as_secs_f64();
    let counters = cadence.stop().await;
    if counters.evictions.load(Ordering::Relaxed) > 0 {
        bail!(
            "a live simulated executor was evicted during B4: {}",
            counters.first_error().unwrap_or_default()
        );
    }
    let target = SHORT_LEASE_DURATION.as_secs_f64() * (1.0 + 1.0 / 3.0) + 1.0;
    let row = vec![
        "B4".into(),
        shards.to_string(),
        victim_shards.to_string(),
        format!("{took:.2} s"),
        format!("{target:.0} s (lease 6 s, tick 2 s)"),
        format!("{load} → {}", load_average()),
    ];
    drop(fleet);
    cluster.kill_all();
    Ok(row)
}

/// Waits until four executors hold every shard, evenly, the one at `address` among them;
/// returns its id and how many shards it holds.
async fn wait_for_victim_placed(
    cluster: &ManagerCluster,
    leader: u64,
    address: &str,
    shards: u32,
) -> Result<(String, usize)> {
    let placed = poll_every(
        "four executors holding every shard, evenly",
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let view = executors_view(cluster, leader).await?;
            let total: usize = view.iter().map(|e| e.shards.len()).sum();
            let victim = view.iter().find(|e| e.address == address);
            match victim {
                Some(v)
                    if view.len() == 4
                        && total == shards as usize
                        && v.shards.len() + 1 >= shards as usize / 4 =>
                {
                    Ok((v.executor_id.clone(), v.shards.len()))
                }
                _ => Err(format!(
                    "{} executors, {total} shards delivered",
                    view.len()
                )),
            }
        },
    )
    .await?;
    Ok(placed)
}

/// Waits until executor `victim_id` is gone and every shard is delivered to the others.
async fn wait_for_rehomed(
    cluster: &ManagerCluster,
    leader: u64,
    victim_id: &str,
    shards: u32,
) -> Result<()> {
    poll_every(
        "the killed executor's shards owned elsewhere",
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let view = executors_view(cluster, leader).await?;
            let total: usize = view.iter().map(|e| e.shards.len()).sum();
            if view.iter().all(|e| e.executor_id != victim_id) && total == shards as usize {
                Ok(())
            } else {
                Err(format!(
                    "{} executors, {total} shards delivered",
                    view.len()
                ))
            }
        },
    )
    .await?;
    Ok(())
}
