//! What a rolling deploy did to the shards (PROTOCOL P17.2, P17.3; docs/BENCHMARKS.md B11), read
//! from the admission logs of every executor process: how often each shard changed hands, how
//! many handoffs gave a shard to an executor the deploy replaced later, and each handoff's
//! no-owner window. `leasehold-loadgen b11` and the rolling-deploy test share it.

use std::collections::BTreeMap;

use leasehold_api::wire::Role;

use crate::admission_log::AdmissionInterval;

/// What one deploy did to the shards, from the admission logs.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployFigures {
    /// Times each shard changed owner during the deploy, over every shard.
    pub moves_mean: f64,
    pub moves_max: usize,
    /// Handoffs during the deploy.
    pub handoffs: usize,
    /// Handoffs whose new owner was itself replaced later in the deploy.
    pub onto_replaced_later: usize,
    /// Each handoff's window with no owner admitting: the old owner's stop to the new owner's
    /// start, in milliseconds (negative would be an overlap, which I1 forbids).
    pub no_owner_ms: Vec<f64>,
}

/// The figures of a deploy from each process's admission intervals (`by_process`: its name and
/// intervals; those of secondaries are left out), the deploy's window on CLOCK_MONOTONIC, and the names of the executors it
/// replaced, in the order it replaced them.
pub fn deploy_figures(
    by_process: &[(String, Vec<AdmissionInterval>)],
    window_ns: (u64, u64),
    replaced_in_order: &[String],
    shards: u32,
) -> DeployFigures {
    let mut per_shard: BTreeMap<u32, Vec<(&str, &AdmissionInterval)>> = BTreeMap::new();
    for (name, intervals) in by_process {
        // A secondary's intervals are warm copies, not ownership (P19.1): a shard changes hands
        // when its primary does.
        for interval in intervals.iter().filter(|i| i.role == Role::Primary) {
            per_shard
                .entry(interval.shard)
                .or_default()
                .push((name.as_str(), interval));
        }
    }
    let replaced_at: BTreeMap<&str, usize> = replaced_in_order
        .iter()
        .enumerate()
        .map(|(turn, name)| (name.as_str(), turn))
        .collect();
    let mut moves = vec![0usize; shards as usize];
    let mut handoffs = 0;
    let mut onto_replaced_later = 0;
    let mut no_owner_ms = Vec::new();
    for (shard, mut held) in per_shard {
        held.sort_by_key(|(_, interval)| interval.start_ns);
        for pair in held.windows(2) {
            let ((from, before), (to, after)) = (pair[0], pair[1]);
            let in_window = after.start_ns >= window_ns.0 && after.start_ns <= window_ns.1;
            if !in_window || from == to {
                continue;
            }
            handoffs += 1;
            if let Some(slot) = moves.get_mut(shard as usize) {
                *slot += 1;
            }
            // The receiver is replaced later if its turn comes after the giver's (or the giver
            // is not one the deploy replaced, and the receiver is).
            let giver_turn = replaced_at.get(from).copied();
            if let Some(receiver_turn) = replaced_at.get(to) {
                if giver_turn.is_none_or(|giver| *receiver_turn > giver) {
                    onto_replaced_later += 1;
                }
            }
            if let Some(stopped_ns) = before.end_ns {
                no_owner_ms.push((after.start_ns as f64 - stopped_ns as f64) / 1e6);
            }
        }
    }
    let moves_max = moves.iter().copied().max().unwrap_or(0);
    let moves_mean = if moves.is_empty() {
        0.0
    } else {
        moves.iter().sum::<usize>() as f64 / moves.len() as f64
    };
    DeployFigures {
        moves_mean,
        moves_max,
        handoffs,
        onto_replaced_later,
        no_owner_ms,
    }
}

/// The `fraction` percentile (nearest rank) of ascending `sorted`; NaN when it is empty.
pub fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(executor: &str, shard: u32, start_ns: u64, end_ns: Option<u64>) -> AdmissionInterval {
        AdmissionInterval {
            generation: 0,
            shard_count: None,
            executor_id: executor.to_owned(),
            shard,
            epoch: 1,
            role: Role::Primary,
            start_ns,
            end_ns,
        }
    }

    /// B11's figures: a shard that goes old-0 → old-1 → new-0 during the deploy moved twice,
    /// once onto an executor replaced later; a shard that stayed put moved never; the windows
    /// are each new owner's start less the old owner's stop.
    #[test]
    fn deploy_figures_count_moves_handoffs_and_windows() {
        let by_process = vec![
            (
                "old-0".to_owned(),
                vec![held("a", 0, 10, Some(1_000_000)), held("a", 1, 10, None)],
            ),
            (
                "old-1".to_owned(),
                vec![held("b", 0, 3_000_000, Some(5_000_000))],
            ),
            ("new-0".to_owned(), vec![held("c", 0, 7_000_000, None)]),
        ];
        let replaced = ["old-0".to_owned(), "old-1".to_owned()];
        let figures = deploy_figures(&by_process, (100, 10_000_000), &replaced, 2);
        assert_eq!(figures.handoffs, 2);
        assert_eq!(figures.moves_max, 2);
        assert!((figures.moves_mean - 1.0).abs() < 1e-9, "{figures:?}");
        assert_eq!(figures.onto_replaced_later, 1, "old-0 → old-1");
        assert_eq!(figures.no_owner_ms, vec![2.0, 2.0]);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
    }

    /// P19.1: a secondary's interval is a warm copy, not a move: a shard whose primary stayed
    /// put while a secondary came and went moved never, and a primary handed to the executor
    /// that held its secondary moved once, its window from the old primary's stop.
    #[test]
    fn deploy_figures_count_primaries_only() {
        let secondary = |executor: &str, shard, start_ns, end_ns| AdmissionInterval {
            role: Role::Secondary,
            ..held(executor, shard, start_ns, end_ns)
        };
        let by_process = vec![
            (
                "r-0".to_owned(),
                vec![
                    held("a", 0, 10, None),
                    held("a", 1, 10, Some(4_000_000)),
                    secondary("a", 1, 4_000_000, None),
                ],
            ),
            (
                "r-1".to_owned(),
                vec![
                    secondary("b", 0, 20, Some(2_000_000)),
                    secondary("b", 1, 20, Some(5_000_000)),
                    held("b", 1, 5_000_000, None),
                ],
            ),
        ];
        let figures = deploy_figures(&by_process, (100, 10_000_000), &[], 2);
        assert_eq!(figures.handoffs, 1, "{figures:?}");
        assert_eq!(figures.moves_max, 1);
        assert_eq!(figures.no_owner_ms, vec![1.0]);
    }
}
