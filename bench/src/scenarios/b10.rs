//! B10: the leader's CPU with a large fleet renewing and nothing changing (docs/BENCHMARKS.md).

use super::*;

/// What B10 measures over its window, per shard count.
pub struct B10Options {
    pub executors: usize,
    pub shard_counts: Vec<u32>,
    /// After settling, how long the fleet renews before the window opens, so the last pushes,
    /// revokes and plans are behind it.
    pub quiet: Duration,
    pub window: Duration,
}

/// CPU used by each of `pids` (and by this process, last) over `window`, as a share of one
/// core, with the window's real length.
async fn cpu_shares(pids: &[u32], window: Duration) -> Result<(Vec<f64>, Duration)> {
    let own_pid = std::process::id();
    let cpu_now = || -> Result<Vec<Duration>> {
        pids.iter()
            .copied()
            .chain([own_pid])
            .map(|pid| procs::cpu_time(pid).with_context(|| format!("B10: /proc/{pid}/stat")))
            .collect()
    };
    let before = cpu_now()?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = cpu_now()?;
    let elapsed = started.elapsed();
    let shares = after
        .iter()
        .zip(&before)
        .map(|(after, before)| after.saturating_sub(*before).as_secs_f64() / elapsed.as_secs_f64())
        .collect();
    Ok((shares, elapsed))
}

fn percent(share: f64) -> String {
    format!("{:.1} %", 100.0 * share)
}

/// The shares of every member but the leader, in member order.
fn followers(shares: &[f64], leader_index: usize) -> String {
    shares
        .iter()
        .enumerate()
        .filter(|&(index, _)| index != leader_index)
        .map(|(_, &share)| percent(share))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An idle leader: the fleet renews at the protocol's cadence and nothing else changes. CPU
/// time of every manager over the window, from /proc, as a share of one core; beside it, etcd
/// with one lease per executor kept alive at the same cadence.
pub async fn b10(env: &Env, options: &B10Options) -> Result<Table> {
    let mut table = Table::new(&[
        "B10",
        "system",
        "executors",
        "shards",
        "window",
        "renewals/s in the window",
        "Raft entries/s",
        "leader CPU (share of one core)",
        "followers' CPU",
        "load generator's CPU",
        "owner changes in the window",
        "leader RSS",
        "load avg",
    ]);
    for &shards in &options.shard_counts {
        idle_leasehold(env, options, shards, &mut table).await?;
    }
    if let Some(etcd) = env.etcd_or_skip("B10") {
        idle_etcd(env, options, etcd, &mut table).await?;
    }
    Ok(table)
}

/// What one window measured of a cluster's processes.
struct IdleWindow {
    elapsed: Duration,
    /// Renewals (keepalives, for etcd) the fleet had answered in the window.
    renewals: u64,
    /// Each server process's CPU share, then the load generator's (see [`cpu_shares`]).
    shares: Vec<f64>,
    /// How many of `shares` are the servers'.
    servers: usize,
    leader_index: usize,
    leader_rss_bytes: u64,
}

impl IdleWindow {
    /// `count` over the window, per second.
    fn per_second(&self, count: u64) -> String {
        format!("{:.0}", count as f64 / self.elapsed.as_secs_f64())
    }
}

/// What Leasehold's log and routes did over the window.
struct RaftActivity {
    entries: u64,
    owners_changed: bool,
}

/// One shard count: a Leasehold cluster settled and quiet, its idle leader measured over the
/// window; adds its row to `table` and prints the table so far.
async fn idle_leasehold(
    env: &Env,
    options: &B10Options,
    shards: u32,
    table: &mut Table,
) -> Result<()> {
    let executors = options.executors;
    let security = &env.security;
    let load = load_average();
    let mut cluster = leasehold_cluster(
        env,
        security,
        &format!("b10-{shards}"),
        default_flags(shards),
    )
    .await?;
    let (_fleet, cadence, _) = renewing_settled_fleet(
        "B10",
        &mut cluster,
        security,
        executors,
        shards,
        SETTLE_BOUND,
    )
    .await?;
    eprintln!("B10: quiet for {:?}", options.quiet);
    tokio::time::sleep(options.quiet).await;
    let (window, raft) = leasehold_window(&mut cluster, cadence, options.window).await?;
    table.row(vec![
        "B10".into(),
        security.tagged("leasehold"),
        executors.to_string(),
        shards.to_string(),
        format!("{:.0} s", window.elapsed.as_secs_f64()),
        window.per_second(window.renewals),
        window.per_second(raft.entries),
        percent(window.shares[window.leader_index]),
        followers(&window.shares[..window.servers], window.leader_index),
        percent(window.shares[window.servers]),
        if raft.owners_changed {
            "owners changed".into()
        } else {
            "none".into()
        },
        fmt_bytes(window.leader_rss_bytes),
        format!("{load} → {}", load_average()),
    ]);
    // The cluster is dropped with its managers; deregistering 10 000 executors one by one
    // would only measure something else.
    eprint!("{}", table.render());
    Ok(())
}

/// Measurement: the managers' CPU over `window`, with the renewals, Raft entries and routes
/// around it; then stops `cadence`. Fails if the leader changed or an executor was evicted.
async fn leasehold_window(
    cluster: &mut ManagerCluster,
    cadence: Cadence,
    window: Duration,
) -> Result<(IdleWindow, RaftActivity)> {
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let (ids, pids): (Vec<u64>, Vec<u32>) = cluster
        .managers
        .iter()
        .filter_map(|(&id, manager)| manager.pid().map(|pid| (id, pid)))
        .unzip();
    let leader_index = ids
        .iter()
        .position(|&id| id == leader)
        .context("B10: the leader's process")?;
    let routes_before = cluster_routing_table(cluster).await?;
    let committed_before = committed_index(cluster, leader).await?;
    let ok_before = cadence.counters.ok.load(Ordering::Relaxed);
    eprintln!("B10: measuring for {window:?}");
    let (shares, elapsed) = cpu_shares(&pids, window).await?;
    let ok_after = cadence.counters.ok.load(Ordering::Relaxed);
    let committed_after = committed_index(cluster, leader).await?;
    let routes_after = cluster_routing_table(cluster).await?;
    let still_leader = cluster.wait_for_leader(FORM_BOUND).await?;
    if still_leader != leader {
        bail!("B10: the leader changed during the window ({leader} → {still_leader})");
    }
    let leader_rss_bytes = rss_bytes(pids[leader_index]).unwrap_or(0);
    let counters = cadence.stop().await;
    let evicted = counters.evictions.load(Ordering::Relaxed);
    if evicted > 0 {
        bail!("B10: {evicted} executors were evicted");
    }
    let window = IdleWindow {
        elapsed,
        renewals: ok_after - ok_before,
        shares,
        servers: pids.len(),
        leader_index,
        leader_rss_bytes,
    };
    let raft = RaftActivity {
        entries: committed_after.saturating_sub(committed_before),
        owners_changed: !routes_after.routes().eq(routes_before.routes()),
    };
    Ok((window, raft))
}

/// etcd beside Leasehold: one lease per executor kept alive at the same cadence, its idle leader
/// measured over the window; adds its row to `table`.
async fn idle_etcd(env: &Env, options: &B10Options, etcd: &Path, table: &mut Table) -> Result<()> {
    let executors = options.executors;
    let security = &env.security;
    let load = load_average();
    let mut cluster = etcd_cluster(etcd, env, security, "b10-etcd", Vec::new()).await?;
    let clients = cluster
        .clients(ETCD_B10_CONNECTIONS, Duration::from_secs(5))
        .await?;
    let fleet = Arc::new(EtcdKeepAliveFleet::start(clients, executors, 60).await?);
    let cadence = Cadence::start(fleet.clone(), DEFAULT_LEASE_DURATION);
    // A third of the lease, so every lease has been kept alive once at the cadence.
    tokio::time::sleep(DEFAULT_LEASE_DURATION / 3 + options.quiet).await;
    let window = etcd_window(&mut cluster, cadence, options.window).await?;
    table.row(vec![
        "B10".into(),
        security.tagged("etcd keepalive"),
        executors.to_string(),
        "–".into(),
        format!("{:.0} s", window.elapsed.as_secs_f64()),
        window.per_second(window.renewals),
        "–".into(),
        percent(window.shares[window.leader_index]),
        followers(&window.shares[..window.servers], window.leader_index),
        percent(window.shares[window.servers]),
        "–".into(),
        fmt_bytes(window.leader_rss_bytes),
        format!("{load} → {}", load_average()),
    ]);
    Ok(())
}

/// Measurement: etcd's members' CPU over `window`, with the keepalives around it; then stops
/// `cadence`. Fails if a keepalive failed.
async fn etcd_window(
    cluster: &mut EtcdCluster,
    cadence: Cadence,
    window: Duration,
) -> Result<IdleWindow> {
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    let (indexes, pids): (Vec<usize>, Vec<u32>) = cluster.pids().into_iter().unzip();
    let leader_index = indexes
        .iter()
        .position(|&index| index == leader)
        .context("B10: etcd's leader process")?;
    let ok_before = cadence.counters.ok.load(Ordering::Relaxed);
    let (shares, elapsed) = cpu_shares(&pids, window).await?;
    let ok_after = cadence.counters.ok.load(Ordering::Relaxed);
    let leader_rss_bytes = rss_bytes(pids[leader_index]).unwrap_or(0);
    let counters = cadence.stop().await;
    if let Some(error) = counters.first_error() {
        bail!("B10: an etcd keepalive failed: {error}");
    }
    Ok(IdleWindow {
        elapsed,
        renewals: ok_after - ok_before,
        shares,
        servers: pids.len(),
        leader_index,
        leader_rss_bytes,
    })
}

/// Connections B10's etcd fleet shares among its keepalive streams (B1's default).
const ETCD_B10_CONNECTIONS: usize = 4;
