//! B8: renewal latency while the leader builds a large snapshot (docs/BENCHMARKS.md).

use super::*;

/// B8: renewals at a fixed open-loop rate while the leader builds snapshots of a large state.
#[derive(Debug, Clone)]
pub struct B8 {
    pub executors: usize,
    pub shards: u32,
    /// Offered renewals/s over the whole fleet.
    pub rate_per_s: f64,
    pub warmup: Duration,
    pub measure: Duration,
    /// Between one forced build's reply and the next request, so the window also holds
    /// renewals that no build overlaps: the baseline beside the builds.
    pub build_gap: Duration,
    pub p99_bound_ms: f64,
    /// Also run a second cluster at the shipped snapshot policy with no forced builds.
    pub shipped_policy: bool,
}

/// `--snapshot-every` for B8's forced-build cluster: no snapshot by policy within a run, so
/// every build in the window is one B8 forced and timed, on the leader only.
const B8_NO_POLICY_SNAPSHOTS: &str = "1000000000";

/// How often B8 asks the leader which snapshot it holds, to count the builds of a window.
const B8_SNAPSHOT_POLL: Duration = Duration::from_millis(250);

/// How often the leader is asked whether its log moved past its snapshot.
const B8_APPLIED_POLL: Duration = Duration::from_millis(20);

/// One snapshot build forced on the leader, as `POST /v1/cluster/snapshot` saw it: it replies
/// once a snapshot covers the log the leader had applied, so a build is timed from the request
/// to its end only when the leader's log had moved past its last snapshot (`forced_builds`).
#[derive(Debug, Clone, Copy)]
struct Build {
    started: Instant,
    finished: Instant,
}

impl Build {
    fn seconds(&self) -> f64 {
        (self.finished - self.started).as_secs_f64()
    }
}

/// Forces snapshot builds on manager `leader` from `from` until `until`, one at a time with
/// `gap` between a reply and the next request.
async fn forced_builds(
    cluster: &ManagerCluster,
    leader: u64,
    from: Instant,
    until: Instant,
    gap: Duration,
) -> Result<Vec<Build>> {
    tokio::time::sleep_until(from).await;
    let mut builds = Vec::new();
    while Instant::now() < until {
        // openraft builds on every request, but the reply waits only for a snapshot covering the
        // applied log: forced at a position the last snapshot covers, the reply would come at
        // once while the build runs on, and the renewals it slows would count as between builds.
        if !log_moved_past_snapshot(cluster, leader, until).await? {
            break;
        }
        let started = Instant::now();
        post_snapshot(cluster, leader, false).await?;
        builds.push(Build {
            started,
            finished: Instant::now(),
        });
        tokio::time::sleep_until((Instant::now() + gap).min(until)).await;
    }
    Ok(builds)
}

/// Waits until manager `leader` has applied an entry its snapshot does not cover; false when
/// `until` came first.
async fn log_moved_past_snapshot(
    cluster: &ManagerCluster,
    leader: u64,
    until: Instant,
) -> Result<bool> {
    while Instant::now() < until {
        let info = cluster.cluster_info(leader).await.map_err(|e| anyhow!(e))?;
        let covered = info.snapshot.and_then(|snapshot| snapshot.last_log_index);
        if info.applied_index > covered {
            return Ok(true);
        }
        tokio::time::sleep(B8_APPLIED_POLL).await;
    }
    Ok(false)
}

/// The distinct snapshots manager `leader` reported holding from `from` until `until`, one
/// look every [`B8_SNAPSHOT_POLL`]: how many it built in that time (a snapshot's id names its log
/// position, and a build shorter than the poll between two others could be missed, so this is
/// at least the count).
async fn snapshots_seen(
    cluster: &ManagerCluster,
    leader: u64,
    from: Instant,
    until: Instant,
) -> Result<usize> {
    tokio::time::sleep_until(from).await;
    let mut seen = std::collections::HashSet::new();
    while Instant::now() < until {
        let info = cluster.cluster_info(leader).await.map_err(|e| anyhow!(e))?;
        seen.insert(info.snapshot.map(|snapshot| snapshot.snapshot_id));
        tokio::time::sleep(B8_SNAPSHOT_POLL).await;
    }
    // The snapshot held when the window opened was built before it.
    Ok(seen.len().saturating_sub(1))
}

/// `n, p50, p99, max` of `samples`, with its failures when there are any.
fn fmt_latencies(samples: &mut drive::Samples) -> String {
    let failed = if samples.errors > 0 {
        format!(
            ", {} failed (first: {})",
            samples.errors,
            samples.first_error.as_deref().unwrap_or("-")
        )
    } else {
        String::new()
    };
    format!(
        "{}: p50 {}, p99 {}, max {}{failed}",
        samples.ok(),
        fmt_ms(samples.quantile_ms(0.50)),
        fmt_ms(samples.quantile_ms(0.99)),
        fmt_ms(samples.quantile_ms(1.0))
    )
}

/// p50 and largest of the builds' durations.
fn fmt_builds(builds: &[Build]) -> String {
    let mut seconds: Vec<f64> = builds.iter().map(Build::seconds).collect();
    if seconds.is_empty() {
        return "none".to_owned();
    }
    let largest = seconds.iter().copied().fold(0.0, f64::max);
    format!(
        "{}: p50 {:.2} s, max {:.2} s",
        seconds.len(),
        median(&mut seconds),
        largest
    )
}

/// Where one B8 cluster's snapshots come from: forced back to back on the leader, or the
/// shipped policy alone.
#[derive(Debug, Clone, Copy)]
struct Policy {
    forced: bool,
    cluster_name: &'static str,
    /// As the table's "snapshots" column says it.
    label: &'static str,
}

impl Policy {
    fn new(forced: bool) -> Self {
        if forced {
            Self {
                forced,
                cluster_name: "b8-forced",
                label: "leader builds back to back (no policy snapshots)",
            }
        } else {
            Self {
                forced,
                cluster_name: "b8-shipped",
                label: "shipped policy (every 5 000 entries, each member)",
            }
        }
    }

    /// The managers' flags: with forced builds, no snapshot by policy.
    fn flags(&self, shards: u32) -> ManagerFlags {
        let mut flags = default_flags(shards);
        if self.forced {
            flags.extra_args = vec![
                "--snapshot-every".to_owned(),
                B8_NO_POLICY_SNAPSHOTS.to_owned(),
            ];
        }
        flags
    }
}

/// What one B8 window saw: every renewal offered, and the builds forced in it (none by policy)
/// or the snapshots the leader was seen to hold.
struct B8Window {
    run: drive::OpenLoopRun,
    start: Instant,
    builds: Vec<Build>,
    seen: usize,
}

/// One B8 cluster: settles the fleet, then offers `args.rate_per_s` for the window while the
/// leader builds snapshots, forced back to back (`forced`) or by the shipped policy alone.
/// Returns the table row.
async fn b8_run(env: &Env, args: &B8, forced: bool) -> Result<Vec<String>> {
    let load = load_average();
    let security = &env.security;
    let policy = Policy::new(forced);
    eprintln!(
        "B8 {}: {} executors, {} shards, {:.0} renewals/s",
        policy.label, args.executors, args.shards, args.rate_per_s
    );
    let flags = policy.flags(args.shards);
    let mut cluster = leasehold_cluster(env, security, policy.cluster_name, flags).await?;
    let fleet = settled_fleet(&mut cluster, security, args.executors, args.shards).await?;
    let window = b8_window(&mut cluster, &fleet, args, forced).await?;
    Ok(b8_row(security, args, policy, window, &load))
}

/// The load: the open loop's window, with the leader's builds forced or watched beside it.
/// Fails if the leader changed meanwhile.
async fn b8_window(
    cluster: &mut ManagerCluster,
    fleet: &Arc<LeaseholdFleet>,
    args: &B8,
    forced: bool,
) -> Result<B8Window> {
    let leader = cluster.wait_for_leader(FORM_BOUND).await?;
    // The open loop's window opens 100 ms after it starts, then the warmup.
    let window_start = Instant::now() + Duration::from_millis(100) + args.warmup;
    let window_end = window_start + args.measure;
    let renewals =
        drive::open_loop_renewals(fleet.clone(), args.rate_per_s, args.warmup, args.measure);
    let (run, builds, seen) = if forced {
        let builds = forced_builds(cluster, leader, window_start, window_end, args.build_gap);
        let (run, builds) = tokio::join!(renewals, builds);
        let builds = builds?;
        let count = builds.len();
        (run, builds, count)
    } else {
        let seen = snapshots_seen(cluster, leader, window_start, window_end);
        let (run, seen) = tokio::join!(renewals, seen);
        (run, Vec::new(), seen?)
    };
    let still_leader = cluster.wait_for_leader(FORM_BOUND).await?;
    if still_leader != leader {
        bail!("B8: the leader changed during the window ({leader} → {still_leader})");
    }
    Ok(B8Window {
        run,
        start: window_start,
        builds,
        seen,
    })
}

/// Measurement: the window's renewals split by whether a build overlapped them, against the
/// bound, as the table's row; `load` is the load average at the run's start.
fn b8_row(
    security: &Security,
    args: &B8,
    policy: Policy,
    window: B8Window,
    load: &str,
) -> Vec<String> {
    let forced = policy.forced;
    let B8Window {
        run,
        start: window_start,
        builds,
        seen,
    } = window;
    let step = run.step();
    report_slow_slots(&run, window_start, args.p99_bound_ms);
    let during_build = |renewal: &drive::Renewal| {
        builds
            .iter()
            .any(|build| renewal.overlaps(build.started, build.finished))
    };
    let (mut during, mut between) = if forced {
        (
            run.samples(during_build),
            run.samples(|renewal| !during_build(renewal)),
        )
    } else {
        (run.samples(|_| true), drive::Samples::default())
    };
    let within = if forced {
        during.quantile_ms(0.99) <= args.p99_bound_ms && during.errors == 0
    } else {
        step.p99_ms <= args.p99_bound_ms && step.errors == 0
    };
    vec![
        "B8".into(),
        security.tagged(policy.label),
        args.executors.to_string(),
        args.shards.to_string(),
        format!(
            "{} / {}",
            fmt_rate(args.rate_per_s),
            fmt_rate(step.achieved_per_s)
        ),
        if forced {
            fmt_builds(&builds)
        } else {
            format!("{seen} (at least)")
        },
        fmt_latencies(&mut during),
        if forced {
            fmt_latencies(&mut between)
        } else {
            "-".to_owned()
        },
        if within { "yes" } else { "**no**" }.to_owned(),
        format!("{load} → {}", load_average()),
    ]
}

/// Where in the window the renewals slower than the bound were scheduled, on stderr: the 100 ms
/// slots holding the most of them, as offsets from the window's start. Periodic work shows as a
/// period between slots.
fn report_slow_slots(run: &drive::OpenLoopRun, window_start: Instant, bound_ms: f64) {
    let bound = Duration::from_secs_f64(bound_ms / 1000.0);
    let mut slots: std::collections::BTreeMap<u128, usize> = std::collections::BTreeMap::new();
    for renewal in &run.renewals {
        if renewal
            .result
            .as_ref()
            .map_or(true, |latency| *latency > bound)
        {
            let offset = renewal.scheduled.saturating_duration_since(window_start);
            *slots.entry(offset.as_millis() / 100).or_default() += 1;
        }
    }
    let mut busiest: Vec<(u128, usize)> = slots.into_iter().collect();
    busiest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    busiest.truncate(20);
    busiest.sort();
    let listed: Vec<String> = busiest
        .iter()
        .map(|(slot, count)| format!("{:.1} s: {count}", *slot as f64 / 10.0))
        .collect();
    eprintln!(
        "  renewals over {bound_ms} ms, by 100 ms slot of their schedule (the 20 busiest): {}",
        listed.join(", ")
    );
}

/// Renewals at a fixed rate (half of B1's) while the leader builds snapshots of a large state:
/// the p99 of the renewals a build overlaps, beside those no build overlaps.
pub async fn b8(env: &Env, args: &B8) -> Result<Table> {
    let bound = format!("p99 ≤ {} ms while building?", args.p99_bound_ms);
    let mut table = Table::new(&[
        "B8",
        "snapshots",
        "executors",
        "shards",
        "renewals/s offered / done",
        "leader's snapshot builds in the window",
        "renewals a build overlaps (all, by policy): n, p50, p99, max",
        "renewals no build overlaps: n, p50, p99, max",
        &bound,
        "load avg",
    ]);
    table.row(b8_run(env, args, true).await?);
    eprint!("{}", table.render());
    if args.shipped_policy {
        table.row(b8_run(env, args, false).await?);
    }
    Ok(table)
}
