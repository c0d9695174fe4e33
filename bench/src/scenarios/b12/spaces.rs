//! The namespaces B12 runs in: their gauges, their placement and when they have settled.

use super::*;

/// What the leader's `/metrics` says of one namespace (PROTOCOL P18.1's `namespace` label).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SpaceGauges {
    pub(super) executors: u64,
    pub(super) owned: u64,
    pub(super) releasing: u64,
    pub(super) unowned: u64,
}

/// The value of label `key` in a series' labels (`a="x",b="y"}`).
pub(super) fn label_value<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// `leasehold_executors` and `leasehold_shards` by namespace, from a Prometheus text page.
pub(super) fn parse_space_gauges(text: &str) -> BTreeMap<String, SpaceGauges> {
    let mut spaces: BTreeMap<String, SpaceGauges> = BTreeMap::new();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        if name != "leasehold_executors" && name != "leasehold_shards" {
            continue;
        }
        let (Some(namespace), Ok(value)) = (label_value(labels, "namespace"), value.parse::<f64>())
        else {
            continue;
        };
        let gauges = spaces.entry(namespace.to_owned()).or_default();
        let slot = match (name, label_value(labels, "state")) {
            ("leasehold_executors", _) => &mut gauges.executors,
            (_, Some("owned")) => &mut gauges.owned,
            (_, Some("releasing")) => &mut gauges.releasing,
            (_, Some("unowned")) => &mut gauges.unowned,
            _ => continue,
        };
        *slot = value as u64;
    }
    spaces
}

pub(super) async fn space_gauges(
    cluster: &ManagerCluster,
    url: &str,
) -> Result<BTreeMap<String, SpaceGauges>, String> {
    let text = metrics_page(cluster, url)
        .await
        .map_err(|e| e.to_string())?;
    Ok(parse_space_gauges(&text))
}

/// What a namespace should look like once settled: its executors and shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expected {
    pub(super) executors: u64,
    pub(super) shards: u64,
}

/// Whether `gauges` show every expected namespace with its executors and every shard owned, none
/// releasing; otherwise what is still missing, for the progress lines.
pub(super) fn placed(
    gauges: &BTreeMap<String, SpaceGauges>,
    expected: &BTreeMap<String, Expected>,
) -> Result<(), String> {
    let mut waiting = 0;
    let mut example = None;
    for (name, want) in expected {
        let have = gauges.get(name).copied().unwrap_or_default();
        if have.executors != want.executors || have.owned != want.shards || have.releasing != 0 {
            waiting += 1;
            example.get_or_insert_with(|| {
                format!(
                    "{name}: {} of {} executors, {} of {} shards owned, {} releasing",
                    have.executors, want.executors, have.owned, want.shards, have.releasing
                )
            });
        }
    }
    match example {
        None => Ok(()),
        Some(example) => Err(format!(
            "{waiting} of {} namespaces not placed yet (e.g. {example})",
            expected.len()
        )),
    }
}

/// Fewest and most shards per executor, and their total.
pub(super) fn spread(counts: impl IntoIterator<Item = usize>) -> (usize, usize, usize) {
    let counts: Vec<usize> = counts.into_iter().collect();
    (
        counts.iter().sum(),
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    )
}

/// One namespace's executors as `url` has them.
pub(super) async fn executors_in(
    cluster: &ManagerCluster,
    url: &str,
    namespace: &str,
) -> Result<Vec<ExecutorView>, String> {
    let reply = cluster
        .http
        .get(format!("{url}/v1/executors?namespace={namespace}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    reply.json().await.map_err(|e| e.to_string())
}

/// Waits until the leader shows every namespace of `expected` with its executors, every shard
/// owned, none releasing and the shards spread evenly over its executors (its gauges every
/// [`GAUGE_INTERVAL`], then each namespace's executors at most every
/// [`SPREAD_CHECK_INTERVAL`]). Returns how long it waited.
pub(super) async fn settle_namespaces(
    cluster: &ManagerCluster,
    leader: u64,
    expected: &BTreeMap<String, Expected>,
    bound: Duration,
    label: &str,
) -> Result<Duration> {
    let url = cluster.url(leader)?;
    let started = Instant::now();
    let last_report = Mutex::new(Instant::now());
    let last_spread = Mutex::new(None::<Instant>);
    poll_every(
        &format!("{label}: every namespace's shards delivered, evenly"),
        bound,
        GAUGE_INTERVAL,
        || {
            let (url, last_report, last_spread) = (&url, &last_report, &last_spread);
            async move {
                let observed = async {
                    let gauges = space_gauges(cluster, url).await?;
                    placed(&gauges, expected)?;
                    let due = last_spread
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_none_or(|at| at.elapsed() >= SPREAD_CHECK_INTERVAL);
                    if !due {
                        return Err("placed; the spread is read next".to_owned());
                    }
                    *last_spread.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(Instant::now());
                    for (name, want) in expected {
                        let view = executors_in(cluster, url, name).await?;
                        let (total, fewest, most) = spread(view.iter().map(|e| e.shards.len()));
                        if view.len() as u64 != want.executors
                            || total as u64 != want.shards
                            || most - fewest > 1
                        {
                            return Err(format!(
                                "{name}: {} executors, {total} shards delivered, spread {fewest}..{most}",
                                view.len()
                            ));
                        }
                    }
                    Ok(())
                }
                .await;
                if let Err(observation) = &observed {
                    let mut last = last_report.lock().unwrap_or_else(PoisonError::into_inner);
                    if last.elapsed() >= Duration::from_secs(10) {
                        *last = Instant::now();
                        eprintln!(
                            "  {label}: settling for {:.0} s: {observation}",
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
                observed
            }
        },
    )
    .await?;
    Ok(started.elapsed())
}

// ---------------------------------------------------------------------------------------------
// Renewal latency per namespace
