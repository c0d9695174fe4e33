//! Executor labels (PROTOCOL P18.3): `key=value` pairs an executor states at registration
//! (`--label`), shown to operators and kept with the executor. One key means something to the
//! planner: [`ZONE_LABEL`], the failure domain whose share of shards it keeps in proportion to
//! capacity.
//!
//! Keys and values are Kubernetes label-shaped, so a pod's labels carry over as they are: a key
//! is 1 to 63 of lowercase letters, digits, `.`, `_` and `-`, starting and ending with a letter
//! or digit; a value is 1 to 63 of letters, digits, `.`, `_` and `-`, starting and ending with a
//! letter or digit. At most [`MAX_LABELS`] per executor.

use std::collections::BTreeMap;

/// The state schema that introduced executor labels (PROTOCOL P18.3, P14.3):
/// `RegisterRequest::labels` is sent only to managers stating this cluster version or later.
pub const LABELS_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;

/// Most labels one executor may state.
pub const MAX_LABELS: usize = 16;

/// Longest label key, and longest label value.
pub const MAX_LABEL_BYTES: usize = 63;

/// The label the planner spreads shards by (P18.3): each zone's share of shards stays in
/// proportion to its executors' capacity.
pub const ZONE_LABEL: &str = "zone";

/// An executor's labels, by key.
pub type Labels = BTreeMap<String, String>;

/// Why labels are refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("more than {MAX_LABELS} labels (PROTOCOL P18.3)")]
    TooMany,
    #[error(
        "label key {0:?} is not 1..={MAX_LABEL_BYTES} of lowercase letters, digits, '.', '_' and \
         '-', starting and ending with a letter or digit (PROTOCOL P18.3)"
    )]
    Key(String),
    #[error(
        "label value {0:?} is not 1..={MAX_LABEL_BYTES} of letters, digits, '.', '_' and '-', \
         starting and ending with a letter or digit (PROTOCOL P18.3)"
    )]
    Value(String),
    #[error("{0:?} is not key=value (PROTOCOL P18.3)")]
    NotAPair(String),
    #[error("label key {0:?} is given twice")]
    Repeated(String),
}

/// A refused piece, cut to the limit so a refusal never echoes a whole body.
fn shown(text: &str) -> String {
    text.chars().take(MAX_LABEL_BYTES + 1).collect()
}

fn label_shaped(text: &str, inner: impl Fn(u8) -> bool) -> bool {
    let bytes = text.as_bytes();
    let ends_ok = |byte: Option<&u8>| byte.is_some_and(|&b| inner(b) && b.is_ascii_alphanumeric());
    !bytes.is_empty()
        && bytes.len() <= MAX_LABEL_BYTES
        && ends_ok(bytes.first())
        && ends_ok(bytes.last())
        && bytes.iter().all(|&b| inner(b))
}

/// Checks one label key.
pub fn check_label_key(key: &str) -> Result<(), LabelError> {
    let allowed =
        |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-');
    if label_shaped(key, allowed) {
        Ok(())
    } else {
        Err(LabelError::Key(shown(key)))
    }
}

/// Checks one label value.
pub fn check_label_value(value: &str) -> Result<(), LabelError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if label_shaped(value, allowed) {
        Ok(())
    } else {
        Err(LabelError::Value(shown(value)))
    }
}

/// Checks an executor's labels (P18.3). The manager's edge, its state machine and the executor's
/// flag parser all apply this one check.
pub fn check_labels(labels: &Labels) -> Result<(), LabelError> {
    if labels.len() > MAX_LABELS {
        return Err(LabelError::TooMany);
    }
    for (key, value) in labels {
        check_label_key(key)?;
        check_label_value(value)?;
    }
    Ok(())
}

/// Parses `key=value` pairs (the `--label` flag) into checked labels; a key given twice is
/// refused rather than one of its values silently kept.
pub fn parse_labels<'a>(pairs: impl IntoIterator<Item = &'a str>) -> Result<Labels, LabelError> {
    let mut labels = Labels::new();
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| LabelError::NotAPair(shown(pair)))?;
        check_label_key(key)?;
        check_label_value(value)?;
        if labels.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(LabelError::Repeated(key.to_owned()));
        }
    }
    check_labels(&labels)?;
    Ok(labels)
}

/// The zone an executor with `labels` is in, if it states one.
pub fn zone_of(labels: &Labels) -> Option<&str> {
    labels.get(ZONE_LABEL).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p18_3_label_keys_and_values_are_kubernetes_shaped() {
        for key in ["zone", "a", "topology.kubernetes.io_zone", "rack-7", "0"] {
            assert_eq!(check_label_key(key), Ok(()), "{key:?}");
        }
        let long = "k".repeat(MAX_LABEL_BYTES + 1);
        for key in [
            "",
            "Zone",
            "-zone",
            "zone-",
            "zo ne",
            "zone=a",
            "z/x",
            long.as_str(),
        ] {
            assert!(check_label_key(key).is_err(), "{key:?}");
        }
        for value in ["eu-west-1a", "A", "rack.7_b", "0"] {
            assert_eq!(check_label_value(value), Ok(()), "{value:?}");
        }
        for value in ["", "-a", "a-", "a b", "é", long.as_str()] {
            assert!(check_label_value(value).is_err(), "{value:?}");
        }
    }

    #[test]
    fn p18_3_labels_parse_from_pairs_and_are_bounded() {
        let labels = parse_labels(["zone=a", "rack=r1"]).unwrap();
        assert_eq!(zone_of(&labels), Some("a"));
        assert_eq!(labels.len(), 2);
        assert_eq!(
            parse_labels(["zone"]),
            Err(LabelError::NotAPair("zone".into()))
        );
        assert_eq!(
            parse_labels(["zone=a", "zone=b"]),
            Err(LabelError::Repeated("zone".into()))
        );
        assert!(parse_labels(["zone="]).is_err());
        let many: Vec<String> = (0..=MAX_LABELS).map(|n| format!("k{n}=v")).collect();
        assert_eq!(
            parse_labels(many.iter().map(String::as_str)),
            Err(LabelError::TooMany)
        );
        let most: Labels = (0..MAX_LABELS)
            .map(|n| (format!("k{n}"), "v".to_owned()))
            .collect();
        assert_eq!(check_labels(&most), Ok(()));
        assert_eq!(zone_of(&most), None);
    }
}
