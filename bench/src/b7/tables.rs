//! What B7 prints: the samples as CSV, the series, the shifts and the summary.

use super::*;

/// Every sample as CSV: time, window, bound, and per cluster max ÷ mean, moves, the leader's
/// estimate and each executor's utilisation ÷ mean.
pub(super) fn samples_csv(samples: &[Sample]) -> String {
    let mut text = String::from(
        "t_s,window,lower_bound,load_avg,by_load_max,by_load_moves,by_load_leader_estimate,by_load_utilisations,by_count_max,by_count_moves,by_count_utilisations\n",
    );
    let joined = |values: &[f64]| {
        values
            .iter()
            .map(|v| format!("{v:.4}"))
            .collect::<Vec<_>>()
            .join(";")
    };
    for sample in samples {
        let [by_load, by_count] = &sample.clusters;
        let _ = writeln!(
            text,
            "{:.1},{},{:.4},{},{:.4},{},{},{},{:.4},{},{}",
            sample.at.as_secs_f64(),
            sample.window,
            sample.lower_bound,
            sample.load_average,
            by_load.max_over_mean,
            by_load.moves,
            by_load
                .leader_imbalance
                .map_or(String::new(), |v| format!("{v:.4}")),
            joined(&by_load.utilisations),
            by_count.max_over_mean,
            by_count.moves,
            joined(&by_count.utilisations),
        );
    }
    text
}

// ---------------------------------------------------------------------------------------------
// The tables

/// The samples whose time falls in `[from, to)`.
pub(super) fn between(
    samples: &[Sample],
    from: Duration,
    to: Duration,
) -> impl Iterator<Item = &Sample> {
    samples.iter().filter(move |s| s.at >= from && s.at < to)
}

/// The windows the run covered: (start, end) of each, the last cut at the run's end.
pub(super) fn windows(args: &B7) -> Vec<(Duration, Duration)> {
    let mut windows = Vec::new();
    let mut start = Duration::ZERO;
    while start < args.duration {
        let end = (start + args.shift_every).min(args.duration);
        windows.push((start, end));
        start = end;
    }
    windows
}

/// Each window's steady slice: its last `steady` (all of it when shorter).
pub(super) fn steady_slices(args: &B7) -> Vec<(Duration, Duration)> {
    windows(args)
        .into_iter()
        .map(|(start, end)| (end.saturating_sub(args.steady).max(start), end))
        .collect()
}

/// From the start of `window` to the first sample of it at or under the criterion.
pub(super) fn recovery(
    samples: &[Sample],
    side: usize,
    window: (Duration, Duration),
) -> Option<Duration> {
    let (start, end) = window;
    between(samples, start, end)
        .find(|s| s.clusters[side].max_over_mean <= recovery_criterion(s.lower_bound).0)
        .map(|s| s.at.saturating_sub(start))
}

pub(super) fn fmt_duration(value: Duration) -> String {
    let seconds = value.as_secs_f64().round() as u64;
    if seconds >= 60 {
        format!("{} min {:02} s", seconds / 60, seconds % 60)
    } else {
        format!("{seconds} s")
    }
}

pub(super) fn fmt_minutes(value: Duration) -> String {
    let minutes = value.as_secs_f64() / 60.0;
    if (minutes - minutes.round()).abs() < 1e-6 {
        format!("{minutes:.0} min")
    } else {
        format!("{minutes:.2} min")
    }
}

/// How the leader's counters moved between two samples, as "12 balance, 3 join".
pub(super) fn reasons_between(before: &Observation, after: &Observation) -> String {
    let parts: Vec<String> = after
        .reasons
        .iter()
        .filter_map(|(reason, &count)| {
            let delta = count.saturating_sub(before.reasons.get(reason).copied().unwrap_or(0));
            (delta > 0).then(|| format!("{delta} {reason}"))
        })
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// The time series: one row per `row_every`, each at the sample that ends it, with the moves
/// since the previous row.
pub fn series_table(args: &B7, samples: &[Sample]) -> Table {
    let mut table = Table::new(&[
        "B7",
        "t",
        "hot set",
        "lower bound",
        "by load: max ÷ mean",
        "by load: moves (leader's reasons)",
        "by load: leader's estimate",
        "by count: max ÷ mean",
        "by count: moves",
        "load avg",
    ]);
    let mut previous: Option<&Sample> = None;
    let mut moves = [0usize; 2];
    let mut next_row = Duration::ZERO;
    for sample in samples {
        for (side, total) in moves.iter_mut().enumerate() {
            *total += sample.clusters[side].moves;
        }
        // Samples land a few milliseconds after they are due.
        if sample.at + args.sample_every / 2 < next_row {
            continue;
        }
        let [by_load, by_count] = &sample.clusters;
        let reasons = match previous {
            Some(before) => reasons_between(&before.clusters[0], by_load),
            None => "-".to_owned(),
        };
        table.row(vec![
            "B7".into(),
            fmt_minutes(next_row),
            sample.window.to_string(),
            format!("{:.3}", sample.lower_bound),
            format!("{:.3}", by_load.max_over_mean),
            format!("{} ({reasons})", moves[0]),
            by_load
                .leader_imbalance
                .map_or("-".to_owned(), |v| format!("{v:.3}")),
            format!("{:.3}", by_count.max_over_mean),
            moves[1].to_string(),
            sample.load_average.clone(),
        ]);
        moves = [0; 2];
        previous = Some(sample);
        next_row += args.row_every;
    }
    table
}

/// Per window: when the hot set shifted, the criterion, how long each placement took to meet
/// it, its steady state and its moves.
pub fn shifts_table(args: &B7, samples: &[Sample]) -> Table {
    let mut table = Table::new(&[
        "B7 shift",
        "at",
        "lower bound",
        "recovered when max ÷ mean",
        "by load: recovered after",
        "by count: recovered after",
        "by load: steady max ÷ mean (mean / worst)",
        "by count: steady max ÷ mean (mean / worst)",
        "by load: moves in the window (steady part)",
        "by count: moves in the window",
    ]);
    for ((start, end), (steady_from, _)) in windows(args).into_iter().zip(steady_slices(args)) {
        let Some(first) = between(samples, start, end).next() else {
            continue;
        };
        let (_, criterion) = recovery_criterion(first.lower_bound);
        let recovered = |side: usize| match recovery(samples, side, (start, end)) {
            Some(after) => fmt_duration(after),
            None => "not in the window".to_owned(),
        };
        let steady = |side: usize| {
            let values: Vec<f64> = between(samples, steady_from, end)
                .map(|s| s.clusters[side].max_over_mean)
                .collect();
            fmt_mean_worst(&values)
        };
        let moves = |side: usize, from: Duration| -> usize {
            between(samples, from, end)
                .map(|s| s.clusters[side].moves)
                .sum()
        };
        table.row(vec![
            "B7 shift".into(),
            if start.is_zero() {
                "start (from count placement)".to_owned()
            } else {
                fmt_minutes(start)
            },
            format!("{:.3}", first.lower_bound),
            criterion,
            recovered(0),
            recovered(1),
            steady(0),
            steady(1),
            format!("{} ({})", moves(0, start), moves(0, steady_from)),
            moves(1, start).to_string(),
        ]);
    }
    table
}

pub(super) fn fmt_mean_worst(values: &[f64]) -> String {
    if values.is_empty() {
        return "-".to_owned();
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let worst = values.iter().copied().fold(0.0, f64::max);
    format!("{mean:.3} / {worst:.3}")
}

/// The summary: per placement and for the lower bound, the steady state, the moves per hour
/// (all, and in the steady slices), the leader's reasons and the recoveries.
pub fn summary_table(args: &B7, samples: &[Sample], load: &str) -> Table {
    let mut table = Table::new(&[
        "B7 summary",
        "placement",
        "steady max ÷ mean (mean / worst)",
        "÷ lower bound (mean)",
        "moves per hour (% of shards)",
        "steady moves per hour (% of shards)",
        "moves by the leader's reasons",
        "shifts recovered within 2 min",
        "load avg",
    ]);
    let summary = Summary {
        args,
        samples,
        slices: steady_slices(args),
        load,
    };
    let mean_bound = summary.mean_lower_bound();
    for (side, placement) in PLACEMENTS.iter().enumerate() {
        table.row(summary.placement_row(side, placement, mean_bound));
    }
    table.row(vec![
        "B7 summary".into(),
        "offline optimum's lower bound".into(),
        format!("{mean_bound:.3}"),
        "1.00×".into(),
        "-".into(),
        "-".into(),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
    table
}

/// What the summary's rows are made from: the run's settings and samples, and its steady
/// slices.
struct Summary<'a> {
    args: &'a B7,
    samples: &'a [Sample],
    slices: Vec<(Duration, Duration)>,
    load: &'a str,
}

impl Summary<'_> {
    /// `moves` over `over` as moves per hour, and as a share of the shards.
    fn per_hour(&self, moves: usize, over: Duration) -> String {
        let hours = over.as_secs_f64() / 3600.0;
        if hours <= 0.0 {
            return "-".to_owned();
        }
        let rate = moves as f64 / hours;
        format!(
            "{rate:.0} ({:.1} %)",
            100.0 * rate / f64::from(self.args.shards)
        )
    }

    /// The offline optimum's lower bound, averaged over the samples of the steady slices.
    fn mean_lower_bound(&self) -> f64 {
        let bounds: Vec<f64> = self
            .slices
            .iter()
            .flat_map(|&(from, to)| between(self.samples, from, to).map(|s| s.lower_bound))
            .collect();
        bounds.iter().sum::<f64>() / bounds.len().max(1) as f64
    }

    /// The row of placement `side`, named `placement`, against the lower bound's mean.
    fn placement_row(&self, side: usize, placement: &str, mean_bound: f64) -> Vec<String> {
        let (args, samples) = (self.args, self.samples);
        let steady_time: Duration = self.slices.iter().map(|(from, to)| *to - *from).sum();
        let steady: Vec<f64> = self
            .slices
            .iter()
            .flat_map(|&(from, to)| {
                between(samples, from, to).map(move |s| s.clusters[side].max_over_mean)
            })
            .collect();
        let steady_mean = steady.iter().sum::<f64>() / steady.len().max(1) as f64;
        let all_moves: usize = samples.iter().map(|s| s.clusters[side].moves).sum();
        let steady_moves: usize = self
            .slices
            .iter()
            .flat_map(|&(from, to)| between(samples, from, to).map(move |s| s.clusters[side].moves))
            .sum();
        let reasons = match (samples.first(), samples.last()) {
            (Some(first), Some(last)) => {
                reasons_between(&first.clusters[side], &last.clusters[side])
            }
            _ => "-".to_owned(),
        };
        let shifts: Vec<(Duration, Duration)> = windows(args).into_iter().skip(1).collect();
        let recovered = shifts
            .iter()
            .filter(|&&window| {
                recovery(samples, side, window)
                    .is_some_and(|after| after <= Duration::from_secs(120))
            })
            .count();
        vec![
            "B7 summary".into(),
            format!("Leasehold, {placement}"),
            fmt_mean_worst(&steady),
            format!("{:.2}×", steady_mean / mean_bound.max(f64::MIN_POSITIVE)),
            self.per_hour(all_moves, args.duration),
            self.per_hour(steady_moves, steady_time),
            reasons,
            format!("{recovered} of {}", shifts.len()),
            self.load.to_owned(),
        ]
    }
}
