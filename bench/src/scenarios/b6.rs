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
    let etcd = start_etcd_soak(env, args).await?;
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
    let etcd_members = etcd.as_ref().map(|(etcd, _)| etcd);
    let (series, growth) = soak_series(&cluster, &ids, etcd_members, args).await?;
    let step = load_task.await?;
    let etcd_step = match etcd_task {
        Some(task) => Some(task.await?),
        None => None,
    };
    let disk = leasehold_disk(&mut cluster, &ids, &growth).await?;
    let etcd_soaked = match (etcd_members, etcd_step) {
        (Some(etcd), Some(etcd_step)) => Some((etcd, etcd_step)),
        _ => None,
    };
    let summary = summary_table(args, security, &load, (&step, disk), etcd_soaked, &growth).await?;
    Ok((series, summary))
}

/// Set-up of the etcd half, unless skipped: three members compacting as Kubernetes' API server
/// does, and a fleet putting the claims.
async fn start_etcd_soak(env: &Env, args: &B6) -> Result<Option<(EtcdCluster, Arc<EtcdPutFleet>)>> {
    let Some(binary) = env.etcd_or_skip("B6") else {
        return Ok(None);
    };
    let soak_args = ETCD_SOAK_ARGS.map(String::from).to_vec();
    let etcd = etcd_cluster(binary, env, &env.security, "b6-etcd", soak_args).await?;
    let clients = etcd.clients(4, Duration::from_secs(5)).await?;
    let value = claims_payload(per_holder_shards(args.shards, args.executors));
    let holders =
        Arc::new(EtcdPutFleet::start(clients, args.executors, PUT_LEASE_TTL_S, value).await?);
    Ok(Some((etcd, holders)))
}

/// What the soak's samples saw: the largest data directory of each system, and the log indexes
/// at the first sample and the last.
#[derive(Debug, Default)]
struct SoakGrowth {
    largest_dir_bytes: u64,
    etcd_largest_dir_bytes: u64,
    index_at_start: Option<u64>,
    etcd_index_at_start: Option<u64>,
    etcd_index: u64,
}

/// Each directory's size in bytes.
fn dir_sizes(dirs: &[PathBuf]) -> Vec<u64> {
    dirs.iter().map(|d| dir_bytes(d)).collect()
}

/// Sizes as the series table shows them: `1.0 MB / 1.1 MB / …`.
fn fmt_sizes(sizes: &[u64]) -> String {
    sizes
        .iter()
        .map(|&b| fmt_bytes(b))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The load: the data directories and log indexes of both systems every `--sample-every`
/// while the fleets renew and put, as a table, and what the samples saw.
async fn soak_series(
    cluster: &ManagerCluster,
    ids: &[u64],
    etcd: Option<&EtcdCluster>,
    args: &B6,
) -> Result<(Table, SoakGrowth)> {
    let mut series = Table::new(&[
        "B6",
        "elapsed",
        "Leasehold data dir per manager",
        "Leasehold last log index",
        "etcd data dir per member",
        "etcd raft index",
    ]);
    let started = Instant::now();
    let mut growth = SoakGrowth::default();
    loop {
        let elapsed = started.elapsed();
        series.row(growth.sample(cluster, ids, etcd, elapsed).await);
        if elapsed >= args.duration {
            break;
        }
        tokio::time::sleep(args.sample_every.min(args.duration.saturating_sub(elapsed))).await;
    }
    Ok((series, growth))
}

impl SoakGrowth {
    /// One sample of both systems, `elapsed` into the soak: its row of the series table.
    async fn sample(
        &mut self,
        cluster: &ManagerCluster,
        ids: &[u64],
        etcd: Option<&EtcdCluster>,
        elapsed: Duration,
    ) -> Vec<String> {
        let dirs: Vec<PathBuf> = ids
            .iter()
            .filter_map(|&id| cluster.managers.get(&id).map(|m| m.data_dir.clone()))
            .collect();
        let sizes = dir_sizes(&dirs);
        self.largest_dir_bytes = self
            .largest_dir_bytes
            .max(sizes.iter().copied().max().unwrap_or(0));
        let last_log = cluster
            .cluster_info(ids[0])
            .await
            .ok()
            .and_then(|i| i.last_log_index)
            .unwrap_or(0);
        self.index_at_start.get_or_insert(last_log);
        let (etcd_sizes, etcd_index_cell) = match etcd {
            Some(etcd) => {
                let sizes = dir_sizes(&etcd.data_dirs());
                self.etcd_largest_dir_bytes = self
                    .etcd_largest_dir_bytes
                    .max(sizes.iter().copied().max().unwrap_or(0));
                self.etcd_index = etcd.raft_index(0).await.unwrap_or(self.etcd_index);
                self.etcd_index_at_start.get_or_insert(self.etcd_index);
                (fmt_sizes(&sizes), self.etcd_index.to_string())
            }
            None => ("-".to_owned(), "-".to_owned()),
        };
        vec![
            "B6".into(),
            format!("{:.0} s", elapsed.as_secs_f64()),
            fmt_sizes(&sizes),
            last_log.to_string(),
            etcd_sizes,
            etcd_index_cell,
        ]
    }
}

/// One system's disk use over the soak, for the summary table.
#[derive(Debug, Clone, Copy)]
struct DiskUse {
    log_entries: u64,
    largest_dir_bytes: u64,
    snapshot_bytes: u64,
}

/// Measurement: the log entries Leasehold's leader wrote over the soak, and the size of a
/// follower's snapshot (taken, then the follower restarted from it).
async fn leasehold_disk(
    cluster: &mut ManagerCluster,
    ids: &[u64],
    growth: &SoakGrowth,
) -> Result<DiskUse> {
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let follower = ids
        .iter()
        .copied()
        .find(|&id| id != leader)
        .ok_or_else(|| anyhow!("no follower"))?;
    let log_entries = cluster
        .cluster_info(leader)
        .await
        .ok()
        .and_then(|i| i.last_log_index)
        .unwrap_or(0)
        .saturating_sub(growth.index_at_start.unwrap_or(0));
    let (snapshot_bytes, _) = snapshot_size_and_restart(cluster, follower).await?;
    Ok(DiskUse {
        log_entries,
        largest_dir_bytes: growth.largest_dir_bytes,
        snapshot_bytes,
    })
}

/// Report: one row per system, Leasehold's from `leasehold` and etcd's (if it ran) measured
/// here; `load` is the load average at the start.
async fn summary_table(
    args: &B6,
    security: &Security,
    load: &str,
    leasehold: (&StepResult, DiskUse),
    etcd: Option<(&EtcdCluster, StepResult)>,
    growth: &SoakGrowth,
) -> Result<Table> {
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
    let (step, disk) = leasehold;
    summary.row(summary_row(
        args,
        &security.tagged("Leasehold"),
        step,
        disk,
        &load,
    ));
    if let Some((etcd, etcd_step)) = etcd {
        let disk = DiskUse {
            log_entries: growth
                .etcd_index
                .saturating_sub(growth.etcd_index_at_start.unwrap_or(growth.etcd_index)),
            largest_dir_bytes: growth.etcd_largest_dir_bytes,
            snapshot_bytes: etcd.snapshot_bytes(0).await?,
        };
        summary.row(summary_row(
            args,
            &security.tagged("etcd (a) put with lease, compacted every 5 min"),
            &etcd_step,
            disk,
            &load,
        ));
    }
    Ok(summary)
}

/// One system's row of the summary table.
fn summary_row(
    args: &B6,
    system: &str,
    step: &StepResult,
    disk: DiskUse,
    load: &str,
) -> Vec<String> {
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
        disk.log_entries.to_string(),
        fmt_bytes(disk.largest_dir_bytes),
        fmt_bytes(disk.snapshot_bytes),
        format!(
            "{:.1}×",
            disk.largest_dir_bytes as f64 / disk.snapshot_bytes.max(1) as f64
        ),
        load.to_owned(),
    ]
}
