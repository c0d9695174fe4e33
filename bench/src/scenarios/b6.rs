//! B6: the renewal soak, data directory size over time against the snapshot size (docs/BENCHMARKS.md).

use super::*;

#[derive(Debug, Clone)]
pub struct B6 {
    pub duration: Duration,
    pub sample_every: Duration,
    pub executors: usize,
    pub rate_per_s: f64,
    pub shards: u32,
    /// Extra manager flags (the CI run snapshots more often so a short soak sees compaction).
    pub manager_args: Vec<String>,
}

/// etcd's flags in the soak: revisions compacted every five minutes, as Kubernetes' API server
/// does. Without compaction etcd keeps every put's revision and its database only grows.
const ETCD_SOAK_ARGS: [&str; 4] = [
    "--auto-compaction-mode",
    "periodic",
    "--auto-compaction-retention",
    "5m",
];

/// Both systems side by side for the whole soak: a Leasehold fleet renewing and an etcd (a)
/// fleet putting the same claims at the same rate, on the same two cores at the same time.
pub async fn b6(env: &Env, args: &B6) -> Result<(Table, Table)> {
    let load = load_average();
    let mut options = default_flags(args.shards);
    options.extra_args = args.manager_args.clone();
    let security = &env.security;
    let mut cluster = leasehold_cluster(env, security, "b6", options).await?;
    let fleet = settled_fleet(&mut cluster, security, args.executors, args.shards).await?;
    let etcd = match env.etcd_or_skip("B6") {
        Some(binary) => {
            let soak_args = ETCD_SOAK_ARGS.map(String::from).to_vec();
            let etcd = etcd_cluster(binary, env, security, "b6-etcd", soak_args).await?;
            let clients = etcd.clients(4, Duration::from_secs(5)).await?;
            let value = claims_payload(per_holder_shards(args.shards, args.executors));
            let holders = Arc::new(
                EtcdPutFleet::start(clients, args.executors, PUT_LEASE_TTL_S, value).await?,
            );
            Some((etcd, holders))
        }
        None => None,
    };
    let load_task = tokio::spawn(drive::open_loop(
        fleet.clone(),
        args.rate_per_s,
        Duration::ZERO,
        args.duration,
    ));
    let etcd_task = etcd.as_ref().map(|(_, holders)| {
        tokio::spawn(drive::open_loop(
            holders.clone(),
            args.rate_per_s,
            Duration::ZERO,
            args.duration,
        ))
    });
    let ids: Vec<u64> = cluster.managers.keys().copied().collect();
    let mut series = Table::new(&[
        "B6",
        "elapsed",
        "Leasehold data dir per manager",
        "Leasehold last log index",
        "etcd data dir per member",
        "etcd raft index",
    ]);
    let sizes_of = |dirs: &[PathBuf]| -> Vec<u64> { dirs.iter().map(|d| dir_bytes(d)).collect() };
    let joined = |sizes: &[u64]| {
        sizes
            .iter()
            .map(|&b| fmt_bytes(b))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let started = Instant::now();
    let mut largest = 0u64;
    let mut etcd_largest = 0u64;
    let mut index_at_start = None;
    let mut etcd_index_at_start = None;
    let mut etcd_index = 0;
    loop {
        let elapsed = started.elapsed();
        let dirs: Vec<PathBuf> = ids
            .iter()
            .filter_map(|&id| cluster.managers.get(&id).map(|m| m.data_dir.clone()))
            .collect();
        let sizes = sizes_of(&dirs);
        largest = largest.max(sizes.iter().copied().max().unwrap_or(0));
        let last_log = cluster
            .cluster_info(ids[0])
            .await
            .ok()
            .and_then(|i| i.last_log_index)
            .unwrap_or(0);
        index_at_start.get_or_insert(last_log);
        let (etcd_sizes, etcd_index_cell) = match &etcd {
            Some((etcd, _)) => {
                let sizes = sizes_of(&etcd.data_dirs());
                etcd_largest = etcd_largest.max(sizes.iter().copied().max().unwrap_or(0));
                etcd_index = etcd.raft_index(0).await.unwrap_or(etcd_index);
                etcd_index_at_start.get_or_insert(etcd_index);
                (joined(&sizes), etcd_index.to_string())
            }
            None => ("-".to_owned(), "-".to_owned()),
        };
        series.row(vec![
            "B6".into(),
            format!("{:.0} s", elapsed.as_secs_f64()),
            joined(&sizes),
            last_log.to_string(),
            etcd_sizes,
            etcd_index_cell,
        ]);
        if elapsed >= args.duration {
            break;
        }
        tokio::time::sleep(args.sample_every.min(args.duration.saturating_sub(elapsed))).await;
    }
    let step = load_task.await?;
    let etcd_step = match etcd_task {
        Some(task) => Some(task.await?),
        None => None,
    };
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let follower = ids
        .iter()
        .copied()
        .find(|&id| id != leader)
        .ok_or_else(|| anyhow!("no follower"))?;
    let entries = cluster
        .cluster_info(leader)
        .await
        .ok()
        .and_then(|i| i.last_log_index)
        .unwrap_or(0)
        .saturating_sub(index_at_start.unwrap_or(0));
    let (snapshot, _) = snapshot_size_and_restart(&mut cluster, follower).await?;
    let mut summary = Table::new(&[
        "B6",
        "system",
        "duration",
        "executors",
        "renewals/s offered / done",
        "renewals ok / failed",
        "p50 / p99",
        "log entries written",
        "largest data dir",
        "snapshot size",
        "largest ÷ snapshot",
        "load avg",
    ]);
    let load = format!("{load} → {}", load_average());
    let row = |system: &str, step: &StepResult, entries: u64, largest: u64, snapshot: u64| {
        vec![
            "B6".into(),
            system.to_owned(),
            humantime::format_duration(args.duration).to_string(),
            args.executors.to_string(),
            format!(
                "{} / {}",
                fmt_rate(step.offered_per_s),
                fmt_rate(step.achieved_per_s)
            ),
            format!("{} / {}", step.ok, step.errors),
            format!("{} / {}", fmt_ms(step.p50_ms), fmt_ms(step.p99_ms)),
            entries.to_string(),
            fmt_bytes(largest),
            fmt_bytes(snapshot),
            format!("{:.1}×", largest as f64 / snapshot.max(1) as f64),
            load.clone(),
        ]
    };
    summary.row(row(
        &security.tagged("Leasehold"),
        &step,
        entries,
        largest,
        snapshot,
    ));
    if let (Some((etcd, _)), Some(etcd_step)) = (&etcd, etcd_step) {
        let etcd_snapshot = etcd.snapshot_bytes(0).await?;
        let etcd_entries = etcd_index.saturating_sub(etcd_index_at_start.unwrap_or(etcd_index));
        summary.row(row(
            &security.tagged("etcd (a) put with lease, compacted every 5 min"),
            &etcd_step,
            etcd_entries,
            etcd_largest,
            etcd_snapshot,
        ));
    }
    Ok((series, summary))
}
