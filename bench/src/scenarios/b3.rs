//! B3: failover, the leader killed under renewals, at each system's shipped defaults (docs/BENCHMARKS.md).

use super::*;

/// Lease for the failover and re-homing scenarios: the shortest the manager accepts with etcd's
/// timing (3 × the 2 s maximum election timeout), so an eviction would show within the run.
pub(super) const SHORT_LEASE: &str = "6s";
pub(super) const SHORT_LEASE_DURATION: Duration = Duration::from_secs(6);
/// How often the failover probes of both systems start an attempt.
const PROBE_RETRY: Duration = Duration::from_millis(20);
/// Longest one probe attempt is waited for. Attempts overlap, so this bounds only how many are
/// in flight, not the figure.
const PROBE_ATTEMPT_BOUND: Duration = Duration::from_secs(2);
/// Longest a failover may take before the scenario gives up.
const FAILOVER_BOUND: Duration = Duration::from_secs(60);
/// Quiet time before each kill, so every holder has renewed under the current leader.
const BEFORE_KILL: Duration = Duration::from_secs(3);

pub(super) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn fmt_runs(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Seconds from `killed_at` to the first renewal `probe` served. A new attempt starts every
/// [`PROBE_RETRY`] and earlier ones are left running rather than abandoned, so an attempt stuck
/// on a connection to the dead member (etcd's client balances over every member) does not hide a
/// failover that completed meanwhile; each attempt is a single try (no client-side patience).
async fn first_success<R: Renewer>(probe: &Arc<R>, killed_at: Instant, what: &str) -> Result<f64> {
    let mut attempts = tokio::task::JoinSet::new();
    let mut every = tokio::time::interval(PROBE_RETRY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                if killed_at.elapsed() > FAILOVER_BOUND {
                    bail!("{what} served no renewal within {FAILOVER_BOUND:?} of the leader kill");
                }
                let probe = probe.clone();
                attempts.spawn(async move {
                    let attempt = tokio::time::timeout(PROBE_ATTEMPT_BOUND, probe.renew(0)).await;
                    matches!(attempt, Ok(Ok(_))).then(Instant::now)
                });
            }
            Some(done) = attempts.join_next() => {
                if let Ok(Some(served_at)) = done {
                    return Ok(served_at.duration_since(killed_at).as_secs_f64());
                }
            }
        }
    }
}

/// Retries `attempt` every 100 ms for up to 10 s: the "before the kill" probes, which may meet a
/// member restarted a moment ago that is still catching up.
async fn before_kill<F, Fut>(what: &str, mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, crate::fleet::RenewFailure>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match attempt().await {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() > deadline => bail!("{what} before the kill: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// How B3 runs: the systems' timing, and how many leader kills each cluster takes.
#[derive(Debug, Clone)]
pub struct B3 {
    /// Fresh clusters per system.
    pub runs: usize,
    /// Leader kills in a row per cluster, the killed member restarted after each. The first
    /// comes after a quiet [`BEFORE_KILL`]; the next ones as soon as every member, the restarted
    /// one included, names the new leader, as a user repeating the kill would: a restarted member
    /// may not have caught up yet.
    pub kills: usize,
    /// Lease holders renewing at the protocol's cadence throughout (checked for eviction).
    pub executors: usize,
    /// Leasehold's minimum election timeouts, one row each (heartbeat 100 ms, as etcd's); empty
    /// with `shipped`.
    pub election_timeouts: Vec<String>,
    /// Both systems at the defaults they ship with: Leasehold without a lease or Raft timing
    /// flag, etcd without timing flags, holders on the 60 s default lease.
    pub shipped: bool,
}

impl B3 {
    /// The lease the holders renew at the cadence of (etcd: their TTL).
    fn lease(&self) -> Duration {
        if self.shipped {
            DEFAULT_LEASE_DURATION
        } else {
            SHORT_LEASE_DURATION
        }
    }
}

/// One system's B3 figures: `times[run][kill]`, seconds from SIGKILL to the probe's success.
struct Failovers {
    times: Vec<Vec<f64>>,
    evicted: u64,
}

/// B3 for Leasehold with `options`: `args.runs` fresh clusters, each taking `args.kills` leader
/// kills, each timed from SIGKILL to the probe's first successful renewal.
async fn b3_leasehold(
    env: &Env,
    args: &B3,
    options: &ManagerFlags,
    label: &str,
) -> Result<Failovers> {
    let security = &env.security;
    let mut times = Vec::new();
    let mut evicted = 0;
    for run in 0..args.runs {
        let name = format!("b3-leasehold-{label}-{}", run + 1);
        let mut cluster = leasehold_cluster(env, security, &name, options.clone()).await?;
        let fleet =
            Arc::new(leasehold_fleet(&cluster, security, args.executors, executor_client()).await?);
        let cadence = Cadence::start(fleet.clone(), args.lease());
        // One try per attempt (it still moves on at once to the leader a refusal names, or
        // past a member that refuses connections); [`first_success`] starts one every 20 ms
        // instead of the protocol's 250 ms retries, so the figure resolves the failover itself.
        let probe = Arc::new(
            leasehold_fleet(
                &cluster,
                security,
                1,
                ClientConfig {
                    request_timeout: PROBE_ATTEMPT_BOUND,
                    patience: Duration::ZERO,
                    retry_interval: PROBE_RETRY,
                },
            )
            .await?,
        );
        let mut run_times = Vec::new();
        for kill in 0..args.kills {
            let leader = cluster.wait_for_leader(FORM_BOUND).await?;
            if kill == 0 {
                for id in cluster.managers.keys().copied().collect::<Vec<_>>() {
                    cluster.wait_ready(id, FORM_BOUND).await?;
                }
                tokio::time::sleep(BEFORE_KILL).await;
            }
            before_kill("probe", || probe.renew(0)).await?;
            let killed_at = Instant::now();
            cluster.manager(leader)?.kill();
            let took = first_success(&probe, killed_at, "Leasehold").await?;
            eprintln!(
                "B3 leasehold ({label}) run {} kill {}: killed leader {leader}, renewed after {took:.2} s",
                run + 1,
                kill + 1
            );
            run_times.push(took);
            cluster.manager(leader)?.start()?;
            cluster.wait_for_leader(FORM_BOUND).await?;
        }
        times.push(run_times);
        let counters = cadence.stop().await;
        let leader = cluster.wait_for_leader(FORM_BOUND).await?;
        let registered = executors_view(&cluster, leader)
            .await
            .map_err(|e| anyhow!(e))?;
        let missing = (args.executors + 1).saturating_sub(registered.len());
        evicted += counters
            .evictions
            .load(Ordering::Relaxed)
            .max(missing as u64);
    }
    Ok(Failovers { times, evicted })
}

/// B3 for etcd at its defaults: as [`b3_leasehold`], the probe a put.
async fn b3_etcd(env: &Env, etcd: &Path, args: &B3) -> Result<Failovers> {
    let mut times = Vec::new();
    let mut evicted = 0;
    for run in 0..args.runs {
        let name = format!("b3-etcd-{}", run + 1);
        let mut cluster = etcd_cluster(etcd, env, &env.security, &name, Vec::new()).await?;
        let clients = cluster.clients(2, Duration::from_secs(2)).await?;
        let ttl_s = i64::try_from(args.lease().as_secs())?;
        let fleet = Arc::new(EtcdKeepAliveFleet::start(clients, args.executors, ttl_s).await?);
        let cadence = Cadence::start(fleet.clone(), args.lease());
        let probe_client = cluster.clients(1, PROBE_ATTEMPT_BOUND).await?;
        let probe = Arc::new(
            EtcdPutFleet::start(probe_client, 1, PUT_LEASE_TTL_S, claims_payload(1)).await?,
        );
        let mut run_times = Vec::new();
        for kill in 0..args.kills {
            let leader = cluster.wait_for_leader(FORM_BOUND).await?;
            if kill == 0 {
                tokio::time::sleep(BEFORE_KILL).await;
            }
            before_kill("etcd probe", || probe.renew(0)).await?;
            let killed_at = Instant::now();
            cluster.kill(leader);
            let took = first_success(&probe, killed_at, "etcd").await?;
            eprintln!(
                "B3 etcd run {} kill {}: killed member {leader}, put after {took:.2} s",
                run + 1,
                kill + 1
            );
            run_times.push(took);
            cluster.restart(leader)?;
            cluster.wait_for_leader(FORM_BOUND).await?;
        }
        times.push(run_times);
        let counters = cadence.stop().await;
        let expired = fleet.expired_leases().await?;
        evicted += counters
            .evictions
            .load(Ordering::Relaxed)
            .max(expired as u64);
    }
    Ok(Failovers { times, evicted })
}

/// One row per kill position when each cluster takes several kills (the third kill meets two
/// survivors that were both restarted), then one over every kill.
fn b3_rows(table: &mut Table, system: &str, failovers: &Failovers, kills: usize, load: String) {
    let mut row = |which: String, mut values: Vec<f64>| {
        table.row(vec![
            "B3".into(),
            system.to_owned(),
            which,
            fmt_runs(&values),
            format!("{:.2} s", median(&mut values)),
            failovers.evicted.to_string(),
            load.clone(),
        ]);
    };
    if kills > 1 {
        for kill in 0..kills {
            let values = failovers
                .times
                .iter()
                .filter_map(|run| run.get(kill).copied())
                .collect();
            row(format!("kill {} of {kills}", kill + 1), values);
        }
    }
    let every = failovers.times.iter().flatten().copied().collect();
    row("every kill".to_owned(), every);
}

pub async fn b3(env: &Env, args: &B3) -> Result<Table> {
    let mut table = Table::new(&[
        "B3",
        "system",
        "kills",
        "leader SIGKILL → first successful renewal (s), run by run",
        "median",
        "holders evicted",
        "load avg",
    ]);
    let mut leasehold = Vec::new();
    if args.shipped {
        leasehold.push((
            ManagerFlags::shipped(64),
            "shipped".to_owned(),
            format!(
                "Leasehold ({} executors, shipped defaults: no lease or timing flag)",
                args.executors
            ),
        ));
    }
    for election_timeout in &args.election_timeouts {
        let mut options = etcd_timing(64, SHORT_LEASE);
        options.election_timeout = Some(election_timeout.clone());
        let min_ms = humantime::parse_duration(election_timeout)?.as_millis();
        leasehold.push((
            options,
            election_timeout.clone(),
            format!(
                "Leasehold ({} executors, heartbeat 100 ms, election timeout {min_ms}–{} ms, lease 6 s)",
                args.executors,
                2 * min_ms
            ),
        ));
    }
    for (options, label, system) in leasehold {
        let load = load_average();
        let failovers = b3_leasehold(env, args, &options, &label).await?;
        let load = format!("{load} → {}", load_average());
        b3_rows(
            &mut table,
            &env.security.tagged(&system),
            &failovers,
            args.kills,
            load,
        );
    }

    if let Some(etcd) = env.etcd_or_skip("B3") {
        let load = load_average();
        let failovers = b3_etcd(env, etcd, args).await?;
        let load = format!("{load} → {}", load_average());
        let system = format!(
            "etcd 3.4 ({} keepalive leases, defaults: heartbeat 100 ms, election 1 s; TTL {} s; probe: put)",
            args.executors,
            args.lease().as_secs()
        );
        b3_rows(
            &mut table,
            &env.security.tagged(&system),
            &failovers,
            args.kills,
            load,
        );
    }
    Ok(table)
}
