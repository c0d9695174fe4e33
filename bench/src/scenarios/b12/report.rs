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

/// The admin's client: under TLS, with the admin certificate (namespaces are created by an
/// operator, P18.1).
pub(super) fn admin_client(cluster: &ManagerCluster, security: &Security) -> Result<Client> {
    let tls = match security.certs() {
        Some(certs) => Some(TlsConfig::load(&certs.files("admin"))?),
        None => None,
    };
    Ok(Client::with_tls(
        cluster.urls(),
        ClientConfig::default(),
        tls.as_ref(),
    )?)
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
