//! What B12 prints: the commit, the probes, the leader's renewal counters and the slowest renewals.

use super::*;

/// The commit of the tree the load generator was built in, as the run starts, with the top
/// directories holding uncommitted changes (the binaries were built from the tree, which may have
/// changed since).
pub(super) fn commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "?".to_owned();
    };
    let status = git(&["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    commit_label(head.trim(), &status)
}

/// `head`, and the top directories `git status --porcelain` names, if any.
pub(super) fn commit_label(head: &str, porcelain: &str) -> String {
    let dirs: std::collections::BTreeSet<&str> = porcelain
        .lines()
        .filter_map(|line| line.get(3..))
        .map(|path| path.rsplit(" -> ").next().unwrap_or(path))
        .map(|path| path.split('/').next().unwrap_or(path))
        .filter(|dir| !dir.is_empty())
        .collect();
    if dirs.is_empty() {
        head.to_owned()
    } else {
        format!(
            "{head} (uncommitted: {})",
            dirs.into_iter().collect::<Vec<_>>().join(", ")
        )
    }
}

pub(super) fn fmt_probes(probes: &[Probe]) -> String {
    if probes.is_empty() {
        return "none".to_owned();
    }
    probes
        .iter()
        .map(|p| {
            let took = fmt_ms(p.took.as_secs_f64() * 1000.0);
            match p.at {
                Some(at) if p.in_storm => format!(
                    "{took} ({}, at +{:.1} s)",
                    namespace_name(p.namespace),
                    at.as_secs_f64()
                ),
                Some(at) => format!(
                    "{took} ({}, at +{:.1} s, after the storm settled)",
                    namespace_name(p.namespace),
                    at.as_secs_f64()
                ),
                None => format!("{took} ({})", namespace_name(p.namespace)),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The leader's metrics B12 prints around the storm's renewal burst: how long it took to answer
/// renewals, and how it answered them (PROTOCOL P6.5, P6.8).
pub(super) const LEADER_RENEWAL_METRICS: &[&str] = &[
    "leasehold_renewal_duration_seconds_bucket",
    "leasehold_renewal_duration_seconds_count",
    "leasehold_renewals_from_memory_total",
    "leasehold_renewals_through_log_total",
    "leasehold_renewal_batch_size_count",
    "leasehold_confirmation_rounds_total",
];

/// How much every series of the metrics `names` grew from the page `before` to the page `after`
/// (series absent before count from 0); those that did not grow are left out. In `after`'s order.
pub(super) fn metric_deltas(before: &str, after: &str, names: &[&str]) -> Vec<(String, f64)> {
    let series = |page: &str| -> Vec<(String, f64)> {
        page.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(series, _)| {
                let name = series.split_once('{').map_or(*series, |(name, _)| name);
                names.contains(&name)
            })
            .filter_map(|(series, value)| Some((series.to_owned(), value.parse::<f64>().ok()?)))
            .collect()
    };
    let before: BTreeMap<String, f64> = series(before).into_iter().collect();
    series(after)
        .into_iter()
        .map(|(series, value)| {
            let delta = value - before.get(&series).copied().unwrap_or(0.0);
            (series, delta)
        })
        .filter(|&(_, delta)| delta > 0.0)
        .collect()
}

/// The slow renewals of a window, the first few with when they were sent.
pub(super) fn fmt_slow(figures: &Figures) -> String {
    const SHOWN: usize = 4;
    if figures.over_bound == 0 {
        return "none".to_owned();
    }
    let shown: Vec<String> = figures
        .slow
        .iter()
        .take(SHOWN)
        .map(|slow| {
            format!(
                "{} +{:.1} s {}",
                namespace_name(slow.namespace),
                slow.at.as_secs_f64(),
                fmt_ms(slow.took.as_secs_f64() * 1000.0)
            )
        })
        .collect();
    let more = figures.over_bound.saturating_sub(shown.len() as u64);
    format!(
        "{}: {}{}",
        figures.over_bound,
        shown.join("; "),
        if more > 0 {
            format!("; {more} more")
        } else {
            String::new()
        }
    )
}

pub(super) fn longest(probes: &[Probe], in_storm_only: bool) -> Option<Duration> {
    probes
        .iter()
        .filter(|p| !in_storm_only || p.in_storm)
        .map(|p| p.took)
        .max()
}

/// Whether a window's renewals met the target: none failed, and the p99 overall and the worst
/// namespace's within `--p99-ms`.
fn within(figures: &Figures, p99_bound_ms: f64) -> String {
    let worst = figures.worst.map_or(0.0, |(_, p99, _)| p99);
    if figures.errors == 0 && figures.p99_ms <= p99_bound_ms && worst <= p99_bound_ms {
        "yes".to_owned()
    } else {
        "**no**".to_owned()
    }
}

/// The first table: the renewals of the steady window, of the storm until its namespace settled,
/// and of the storm's renewal round.
pub(super) fn renewals_table(
    args: &B12,
    [steady, storm, round]: [&WindowFigures; 3],
    commit: &str,
) -> Table {
    let bound_header = format!("p99 and worst within {}", fmt_ms(args.p99_bound_ms));
    let mut renewals = Table::new(&[
        "B12",
        "namespaces × shards × executors",
        "window",
        "renewals (namespaces)",
        "errors",
        "p50",
        "p99",
        "max",
        "worst namespace: p99 (renewals)",
        "namespaces with p99 over the bound",
        "renewals over the bound: namespace, sent at (from the window's start), took",
        &bound_header,
        "commit (tree at the run's start)",
        "load avg",
    ]);
    let storm_name = namespace_name(STORM_NAMESPACE);
    for (label, window, namespaces) in [
        ("steady".to_owned(), steady, args.namespaces),
        (
            format!(
                "storm: {} executors into {storm_name}, until it settled",
                args.storm
            ),
            storm,
            args.namespaces - 1,
        ),
        (
            "the storm's renewal round (a third of the lease and 5 s)".to_owned(),
            round,
            args.namespaces - 1,
        ),
    ] {
        renewals.row(renewals_row(args, &label, window, namespaces, commit));
    }
    renewals
}

/// One window's row of [`renewals_table`]; `namespaces` is how many namespaces its figures cover.
fn renewals_row(
    args: &B12,
    label: &str,
    window: &WindowFigures,
    namespaces: usize,
    commit: &str,
) -> Vec<String> {
    let figures = &window.figures;
    vec![
        "B12".into(),
        format!("{} × {} × {}", args.namespaces, args.shards, args.executors),
        format!("{label}, {:.1} s", window.length.as_secs_f64()),
        format!("{} ({namespaces})", figures.renewals),
        match &figures.first_error {
            Some(error) => format!("{} ({error})", figures.errors),
            None => figures.errors.to_string(),
        },
        fmt_ms(figures.p50_ms),
        fmt_ms(figures.p99_ms),
        fmt_ms(figures.max_ms),
        match figures.worst {
            Some((namespace, p99, n)) => {
                format!("{}: {} ({n})", namespace_name(namespace), fmt_ms(p99))
            }
            None => "-".to_owned(),
        },
        figures.namespaces_over.to_string(),
        fmt_slow(figures),
        within(figures, args.p99_bound_ms),
        commit.to_owned(),
        window.load.clone(),
    ]
}

/// Whether the longest replan during the storm came later than the longest before it by more
/// than one plan interval (`tick`).
fn fmt_delayed(baseline: &[Probe], storm_probes: &[Probe], tick: Duration) -> String {
    match (longest(baseline, false), longest(storm_probes, true)) {
        (_, None) => "no probe ended before the storm settled".to_owned(),
        (None, Some(_)) => "no baseline".to_owned(),
        (Some(before), Some(during)) => {
            let by = during.saturating_sub(before);
            format!(
                "{} (longest during − longest before: {})",
                if by > tick { "**yes**" } else { "no" },
                fmt_ms(by.as_secs_f64() * 1000.0)
            )
        }
    }
}

/// The second table: the storm's registrations and settling, and the replans before and during
/// it; `load_before` is the load average at the run's start.
pub(super) fn replans_table(
    run: &B12Run<'_>,
    storm: &Storm,
    baseline: &[Probe],
    storm_renewals: String,
    commit: String,
    load_before: &str,
) -> Table {
    let args = run.args;
    let mut replans = Table::new(&[
        "B12",
        "storm",
        "registered after",
        "storm namespace settled after",
        "storm executors' renewals (failed); in the round",
        "deregistration → every shard owned: before the storm",
        "during the storm",
        "plan interval (tick)",
        "delayed by more than one interval",
        "commit (tree at the run's start)",
        "load avg",
    ]);
    let delayed = fmt_delayed(baseline, &storm.probes, run.tick);
    replans.row(vec![
        "B12".into(),
        format!(
            "{} executors into {}, renewing {}",
            args.storm,
            namespace_name(STORM_NAMESPACE),
            if args.storm_spread {
                "spread over a third of the lease"
            } else {
                "as registered together (first between a sixth and a third, by id)"
            }
        ),
        format!("{:.2} s", storm.own.registered.as_secs_f64()),
        format!("{:.2} s", storm.settled.as_secs_f64()),
        storm_renewals,
        fmt_probes(baseline),
        fmt_probes(&storm.probes),
        format!(
            "{} (a third of the shortest lease)",
            humantime::format_duration(run.tick)
        ),
        delayed,
        commit,
        format!("{load_before} → {}", load_average()),
    ]);
    replans
}
