//! Replan probes: how long a namespace's plan takes to reach its executors while another storms.

use super::*;

/// Deregisters `victim` (after taking it out of the renewal schedule) and times from the
/// deregistration's reply until the leader's gauges show every shard of its namespace owned
/// again, with `executors_left` executors. Read every [`PROBE_POLL`]; the figure is taken at the
/// reply of the first read that shows it, so it is high by at most a poll and a read.
pub(super) async fn replan_probe(
    cluster: &ManagerCluster,
    leader: u64,
    recorded: &Recorded,
    victim: Victim,
    executors_left: u64,
    bound: Duration,
) -> Result<Duration> {
    let name = namespace_name(victim.namespace);
    let url = cluster.url(leader)?;
    recorded.retire(victim.index).await?;
    recorded
        .fleet
        .deregister(victim.index)
        .await
        .with_context(|| format!("B12: deregistering an executor of {name}"))?;
    let replied = Instant::now();
    let deadline = replied + bound;
    let mut last = String::from("never read");
    while Instant::now() < deadline {
        match space_gauges(cluster, &url).await {
            Ok(gauges) => {
                let have = gauges.get(&name).copied().unwrap_or_default();
                if have.executors == executors_left && have.unowned == 0 {
                    return Ok(replied.elapsed());
                }
                last = format!(
                    "{} executors, {} shards unowned",
                    have.executors, have.unowned
                );
            }
            Err(error) => last = error,
        }
        tokio::time::sleep(PROBE_POLL).await;
    }
    bail!("B12: {name}'s shards not all owned {bound:?} after a deregistration ({last})")
}

/// One probe's figure, with when it started relative to the storm (`None` before it).
#[derive(Debug, Clone)]
pub(super) struct Probe {
    pub(super) namespace: usize,
    /// Deregistration sent, from the storm's start.
    pub(super) at: Option<Duration>,
    pub(super) took: Duration,
    /// `ns-000` had not settled yet when it ended.
    pub(super) in_storm: bool,
}

/// Probes `victims` one after another, [`PROBE_GAP`] apart; during the storm (`storm_start`
/// given) stops once `storm_settled` is set, after at least one probe. `left` counts each
/// namespace's executors.
#[allow(clippy::too_many_arguments)]
pub(super) async fn probe_all(
    cluster: &ManagerCluster,
    leader: u64,
    recorded: &Recorded,
    victims: &[Victim],
    left: &Mutex<Vec<u64>>,
    bound: Duration,
    storm_start: Option<Instant>,
    storm_settled: &AtomicBool,
) -> Result<Vec<Probe>> {
    let mut probes = Vec::new();
    for &victim in victims {
        if storm_start.is_some() && !probes.is_empty() && storm_settled.load(AtomicOrdering::SeqCst)
        {
            break;
        }
        let executors_left = {
            let mut left = left.lock().unwrap_or_else(PoisonError::into_inner);
            left[victim.namespace] -= 1;
            left[victim.namespace]
        };
        let at = storm_start.map(|start| start.elapsed());
        let took = replan_probe(cluster, leader, recorded, victim, executors_left, bound).await?;
        let in_storm = storm_start.is_some() && !storm_settled.load(AtomicOrdering::SeqCst);
        eprintln!(
            "  B12: {} → every shard owned {:.1} ms after the deregistration{}",
            namespace_name(victim.namespace),
            took.as_secs_f64() * 1000.0,
            match at {
                Some(at) => format!(
                    " (sent {:.2} s into the storm{})",
                    at.as_secs_f64(),
                    if in_storm {
                        ""
                    } else {
                        ", ended after ns-000 settled"
                    }
                ),
                None => " (before the storm)".to_owned(),
            }
        );
        probes.push(Probe {
            namespace: victim.namespace,
            at,
            took,
            in_storm,
        });
        if storm_start.is_some() && !in_storm {
            break;
        }
        tokio::time::sleep(PROBE_GAP).await;
    }
    Ok(probes)
}

// ---------------------------------------------------------------------------------------------
// The run
