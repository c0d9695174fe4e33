//! A process's metrics as one list: each one's name, kind, help line and labels with the values
//! they take. A process exports every series of its list from start-up ([`export_from_start`]),
//! so a dashboard or an alert finds each metric at zero before its first event rather than
//! missing, and Prometheus's `HELP` lines come from the list. The manager's and the executor's
//! lists are checked against the metrics their sources write and against docs/OPERATIONS.md's
//! "Metrics reference" ([`metric_names_in_source`], [`documented_metrics`]).

use std::collections::BTreeSet;

/// What kind of metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    /// As docs/OPERATIONS.md's "type" column starts.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// What a metric reads before its first event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AtStart {
    /// Zero: a count of what has not happened yet, or a gauge whose zero is true at start.
    Zero,
    /// This value (a gauge whose "none yet" is not zero, such as a leader id of -1).
    Value(f64),
    /// Nothing until the process knows it: a gauge only the leader sets, or a reading a probe
    /// takes. Exporting zero would state something false (a ratio of 0, no budget, no space).
    WhenKnown,
}

/// One metric of a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricSpec {
    pub name: &'static str,
    pub kind: MetricKind,
    /// Prometheus's `HELP` line.
    pub help: &'static str,
    /// Each label and the values it takes. A label whose values are only known at run time
    /// (a follower's id) lists none: its series appear once they are known.
    pub labels: &'static [(&'static str, &'static [&'static str])],
    pub at_start: AtStart,
}

impl MetricSpec {
    /// Every series exported from start-up: one per combination of the labels' values (one
    /// unlabeled series when there are no labels, none when a label's values are only known at
    /// run time).
    pub fn series(&self) -> Vec<Vec<(&'static str, &'static str)>> {
        self.labels
            .iter()
            .fold(vec![Vec::new()], |series, (label, values)| {
                series
                    .iter()
                    .flat_map(|prefix| {
                        values.iter().map(move |value| {
                            let mut labels = prefix.clone();
                            labels.push((*label, *value));
                            labels
                        })
                    })
                    .collect()
            })
    }
}

/// Describes every metric of `catalog` to the installed `metrics` recorder and registers each of
/// its series but those known only later ([`AtStart`]), so the exporter renders them from now
/// on. Without a recorder it does nothing.
pub fn export_from_start(catalog: &[MetricSpec]) {
    for spec in catalog {
        match spec.kind {
            MetricKind::Counter => metrics::describe_counter!(spec.name, spec.help),
            MetricKind::Gauge => metrics::describe_gauge!(spec.name, spec.help),
            MetricKind::Histogram => metrics::describe_histogram!(spec.name, spec.help),
        }
        if spec.at_start == AtStart::WhenKnown {
            continue;
        }
        for series in spec.series() {
            let labels: Vec<metrics::Label> = series
                .iter()
                .map(|(label, value)| metrics::Label::new(*label, *value))
                .collect();
            // Naming a series registers it with the recorder, at zero.
            match (spec.kind, spec.at_start) {
                (MetricKind::Gauge, AtStart::Value(value)) => {
                    metrics::gauge!(spec.name, labels).set(value)
                }
                (MetricKind::Counter, _) => drop(metrics::counter!(spec.name, labels)),
                (MetricKind::Gauge, _) => drop(metrics::gauge!(spec.name, labels)),
                (MetricKind::Histogram, _) => drop(metrics::histogram!(spec.name, labels)),
            }
        }
    }
}

/// The metric names `source` (Rust) writes through the `metrics` macros with a literal name.
pub fn metric_names_in_source(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for macro_call in ["counter!(", "gauge!(", "histogram!("] {
        for (at, _) in source.match_indices(macro_call) {
            let rest = source[at + macro_call.len()..].trim_start();
            if let Some(literal) = rest.strip_prefix('"') {
                if let Some(end) = literal.find('"') {
                    names.insert(literal[..end].to_owned());
                }
            }
        }
    }
    names
}

/// A row of a "Metrics reference" table: the name, the type column's first word and each label
/// with the values the row lists for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentedMetric {
    pub name: String,
    pub kind: String,
    pub labels: Vec<(String, Vec<String>)>,
}

/// The rows of the first table after the heading line `heading` in `markdown` (columns: metric,
/// type, labels, meaning; labels written as `` `label` = `value`, `value` `` or `` `label` ``).
pub fn documented_metrics(markdown: &str, heading: &str) -> Vec<DocumentedMetric> {
    let mut rows = Vec::new();
    let mut in_section = false;
    let mut in_table = false;
    for line in markdown.lines() {
        if line.trim() == heading {
            in_section = true;
            continue;
        }
        if !in_section {
            continue;
        }
        if !line.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        in_table = true;
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(name), Some(kind), Some(labels)) = (cells.get(1), cells.get(2), cells.get(3))
        else {
            continue;
        };
        let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else {
            continue;
        };
        rows.push(DocumentedMetric {
            name: name.to_owned(),
            kind: kind
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned(),
            labels: parse_labels(labels),
        });
    }
    rows
}

/// `` `a` = `x`, `y`; `b` `` → `[(a, [x, y]), (b, [])]`.
fn parse_labels(cell: &str) -> Vec<(String, Vec<String>)> {
    cell.split(';')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (label, values) = part.split_once('=').unwrap_or((part, ""));
            let unquote = |text: &str| text.trim().trim_matches('`').to_owned();
            let values = values
                .split(',')
                .map(unquote)
                .filter(|value| !value.is_empty())
                .collect();
            (unquote(label), values)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: MetricSpec = MetricSpec {
        name: "leasehold_things_total",
        kind: MetricKind::Counter,
        help: "Things.",
        labels: &[("kind", &["a", "b"]), ("outcome", &["ok", "failed"])],
        at_start: AtStart::Zero,
    };

    #[test]
    fn every_combination_of_label_values_is_a_series() {
        assert_eq!(
            SPEC.series(),
            vec![
                vec![("kind", "a"), ("outcome", "ok")],
                vec![("kind", "a"), ("outcome", "failed")],
                vec![("kind", "b"), ("outcome", "ok")],
                vec![("kind", "b"), ("outcome", "failed")],
            ]
        );
        let unlabeled = MetricSpec {
            labels: &[],
            ..SPEC
        };
        assert_eq!(unlabeled.series(), vec![Vec::new()]);
        let known_later = MetricSpec {
            labels: &[("follower", &[])],
            ..SPEC
        };
        assert!(known_later.series().is_empty());
    }

    #[test]
    fn literal_metric_names_are_found_in_source() {
        let source = r#"
            metrics::counter!("leasehold_a_total", "kind" => kind).increment(1);
            metrics::gauge!(
                "leasehold_b"
            )
            .set(1.0);
            metrics::histogram!(spec.name, labels);
        "#;
        let names: Vec<String> = metric_names_in_source(source).into_iter().collect();
        assert_eq!(names, ["leasehold_a_total", "leasehold_b"]);
    }

    #[test]
    fn a_reference_table_is_read_with_its_labels() {
        let markdown = "\
## Metrics reference

### Manager

| metric | type | labels | meaning |
|---|---|---|---|
| `leasehold_a_total` | counter (leader) | `kind` = `grant`, `handoff` | what |
| `leasehold_b` | gauge | | what |
| `leasehold_c` | gauge (leader) | `follower` | what |

### Executor

| `leasehold_d` | gauge | | not this table |
";
        assert_eq!(
            documented_metrics(markdown, "### Manager"),
            vec![
                DocumentedMetric {
                    name: "leasehold_a_total".into(),
                    kind: "counter".into(),
                    labels: vec![("kind".into(), vec!["grant".into(), "handoff".into()])],
                },
                DocumentedMetric {
                    name: "leasehold_b".into(),
                    kind: "gauge".into(),
                    labels: vec![],
                },
                DocumentedMetric {
                    name: "leasehold_c".into(),
                    kind: "gauge".into(),
                    labels: vec![("follower".into(), vec![])],
                },
            ]
        );
    }
}
