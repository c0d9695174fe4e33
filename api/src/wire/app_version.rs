//! Application versions (PROTOCOL P17.3): what an executor states at registration
//! (`--app-version`), and the one order every side compares them by.
//!
//! The order is semantic versioning's precedence, made total for any string the check accepts:
//! - build metadata (from the first `+`) is ignored: `1.4.0+abc` and `1.4.0+def` are one version;
//! - the rest splits at its first `-` into a release and a pre-release; releases compare first,
//!   dot-separated part by part, a missing part counting as `0` (`1.4` = `1.4.0`);
//! - a part of digits compares as a number (`10` > `9`, leading zeros ignored), any other part
//!   as bytes, and a number is older than text (`1.x` > `1.9`);
//! - with equal releases, one with a pre-release is older than one without
//!   (`2.0.0-rc.1` < `2.0.0`), and two pre-releases compare part by part, the one with fewer
//!   parts older when the shared ones are equal (`2.0.0-rc` < `2.0.0-rc.1`).
//!
//! So a plain number (`42`), a date (`2026.12.04`) and a semantic version all order as their
//! writers expect. An executor that states no version is older than any that does.

use std::cmp::Ordering;

/// The state schema that introduced application versions (PROTOCOL P17.3, P14.3):
/// `RegisterRequest::app_version` is sent only to managers stating this cluster version or later.
pub const APP_VERSION_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;

/// Longest application version.
pub const MAX_APP_VERSION_BYTES: usize = 64;

/// Why an application version is refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "app version {shown:?} is not 1..={MAX_APP_VERSION_BYTES} characters of letters, digits, \
     '.', '-', '+' and '_' (PROTOCOL P17.3)"
)]
pub struct AppVersionError {
    /// The refused version, cut to the limit so a refusal never echoes a whole body.
    pub shown: String,
}

/// Checks an application version (P17.3): 1 to [`MAX_APP_VERSION_BYTES`] ASCII letters, digits,
/// `.`, `-`, `+` or `_`. The manager's edge, its state machine and the executor's flag parser
/// all apply this one check.
pub fn check_app_version(version: &str) -> Result<(), AppVersionError> {
    let allowed =
        |byte: u8| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'+' | b'_');
    if version.is_empty() || version.len() > MAX_APP_VERSION_BYTES || !version.bytes().all(allowed)
    {
        return Err(AppVersionError {
            shown: version.chars().take(MAX_APP_VERSION_BYTES).collect(),
        });
    }
    Ok(())
}

/// The P17.3 order of two stated versions (module documentation). `Equal` means the same
/// version, whatever the spelling (`1.4` and `1.4.0+build7`).
pub fn compare_app_versions(a: &str, b: &str) -> Ordering {
    let (release_a, pre_a) = split_version(a);
    let (release_b, pre_b) = split_version(b);
    compare_release(release_a, release_b).then_with(|| match (pre_a, pre_b) {
        (None, None) => Ordering::Equal,
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (Some(pre_a), Some(pre_b)) => compare_pre_release(pre_a, pre_b),
    })
}

/// [`compare_app_versions`] of what two executors stated, one that stated none being older than
/// any that did.
pub fn compare_stated_app_versions(a: Option<&str>, b: Option<&str>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => compare_app_versions(a, b),
    }
}

/// The newest of `versions` (what the executors that take shards stated, `None` for one that
/// stated none) when they are not all one version: the version a rollout goes to (P17.3).
/// `None` when they agree, or when there are none. The planner and the CLI both go by it.
pub fn rollout_version<'a>(versions: impl IntoIterator<Item = Option<&'a str>>) -> Option<&'a str> {
    let mut versions = versions.into_iter();
    let mut newest = versions.next()?;
    let mut mixed = false;
    for version in versions {
        match compare_stated_app_versions(version, newest) {
            Ordering::Equal => {}
            Ordering::Greater => {
                newest = version;
                mixed = true;
            }
            Ordering::Less => mixed = true,
        }
    }
    // Mixed versions have a newest that was stated: only an executor without one is older
    // than every other.
    if mixed {
        newest
    } else {
        None
    }
}

/// The release and the pre-release of a version, its build metadata dropped.
fn split_version(version: &str) -> (&str, Option<&str>) {
    let without_build = version.split_once('+').map_or(version, |(kept, _)| kept);
    match without_build.split_once('-') {
        Some((release, pre_release)) => (release, Some(pre_release)),
        None => (without_build, None),
    }
}

fn compare_release(a: &str, b: &str) -> Ordering {
    let mut parts_a = a.split('.');
    let mut parts_b = b.split('.');
    loop {
        match (parts_a.next(), parts_b.next()) {
            (None, None) => return Ordering::Equal,
            (part_a, part_b) => {
                let order = compare_part(part_a.unwrap_or("0"), part_b.unwrap_or("0"));
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

fn compare_pre_release(a: &str, b: &str) -> Ordering {
    let mut parts_a = a.split('.');
    let mut parts_b = b.split('.');
    loop {
        match (parts_a.next(), parts_b.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(part_a), Some(part_b)) => {
                let order = compare_part(part_a, part_b);
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// One dot-separated part: numbers by value (any length: no overflow), text by bytes, a number
/// before text.
fn compare_part(a: &str, b: &str) -> Ordering {
    let numeric = |part: &str| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit());
    match (numeric(a), numeric(b)) {
        (true, true) => {
            let a = a.trim_start_matches('0');
            let b = b.trim_start_matches('0');
            a.len().cmp(&b.len()).then_with(|| a.cmp(b))
        }
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P17.3: the documented order, oldest first; each is older than every later one.
    #[test]
    fn p17_3_versions_order_as_their_writers_expect() {
        let ascending = [
            "0.9",
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.2",
            "1.10",
            "1.x",
            "2",
            "10",
            "2026.12.4",
            "123456789012345678901234567890",
        ];
        for (i, older) in ascending.iter().enumerate() {
            for newer in &ascending[i + 1..] {
                assert_eq!(
                    compare_app_versions(older, newer),
                    Ordering::Less,
                    "{older} < {newer}"
                );
                assert_eq!(
                    compare_app_versions(newer, older),
                    Ordering::Greater,
                    "{newer} > {older}"
                );
            }
            assert_eq!(compare_app_versions(older, older), Ordering::Equal);
        }
    }

    #[test]
    fn p17_3_one_version_whatever_the_spelling() {
        for (a, b) in [
            ("1.4", "1.4.0"),
            ("1.4.0+abc", "1.4.0+def"),
            ("007", "7"),
            ("1.4+x", "1.4.0"),
        ] {
            assert_eq!(compare_app_versions(a, b), Ordering::Equal, "{a} = {b}");
        }
    }

    #[test]
    fn p17_3_no_version_is_older_than_any() {
        assert_eq!(compare_stated_app_versions(None, Some("0")), Ordering::Less);
        assert_eq!(
            compare_stated_app_versions(Some("0"), None),
            Ordering::Greater
        );
        assert_eq!(compare_stated_app_versions(None, None), Ordering::Equal);
    }

    /// I6: the check refuses what the order was not written for, and names the rule.
    #[test]
    fn p17_3_i6_a_version_outside_the_alphabet_or_too_long_is_refused() {
        for good in [
            "1",
            "1.2.3-rc.1+build.5",
            "v2_final",
            &"9".repeat(MAX_APP_VERSION_BYTES),
        ] {
            assert_eq!(check_app_version(good), Ok(()), "{good}");
        }
        let long = "9".repeat(MAX_APP_VERSION_BYTES + 1);
        for bad in ["", "1 2", "1/2", "é", "1\n", long.as_str()] {
            let error = check_app_version(bad).unwrap_err();
            assert!(error.to_string().contains("P17.3"), "{bad}");
            assert!(error.shown.len() <= MAX_APP_VERSION_BYTES);
        }
    }
}
