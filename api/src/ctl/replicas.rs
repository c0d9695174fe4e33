//! `namespace create|set`'s replica flags (PROTOCOL P19.1, P19.2, P19.4): how many replicas each
//! shard keeps, what a secondary weighs in placement, and how lost replicas are restored.

use std::time::Duration;

use crate::wire::{
    ReplicaChange, ReplicaFields, ReplicaSettings, SecondaryWeight, MAX_REPLICAS,
    MAX_REPLICA_RESTORE_DELAY_MS,
};

/// The word that returns the restore delay to twice the namespace's lease.
const TWICE_THE_LEASE: &str = "default";

/// A weight as a number from 0 to 1 (`0.5`), in thousandths.
fn secondary_weight(text: &str) -> Result<SecondaryWeight, String> {
    let weight: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number from 0 to 1"))?;
    SecondaryWeight::try_from(weight).map_err(|error| error.to_string())
}

/// A delay (`30s`, `2m`, whole milliseconds up to a day), or `default` for twice the lease.
fn restore_delay(text: &str) -> Result<Option<u64>, String> {
    if text == TWICE_THE_LEASE {
        return Ok(None);
    }
    let delay = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    let whole_ms = delay.subsec_nanos() % 1_000_000 == 0;
    match u64::try_from(delay.as_millis()) {
        Ok(ms) if whole_ms && ms <= MAX_REPLICA_RESTORE_DELAY_MS => Ok(Some(ms)),
        _ => Err(format!(
            "a restore delay is whole milliseconds from 0ms to {} (PROTOCOL P19.4)",
            humantime::format_duration(Duration::from_millis(MAX_REPLICA_RESTORE_DELAY_MS))
        )),
    }
}

/// The replica flags of `namespace create` and `namespace set`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ReplicaArgs {
    /// Replicas of each shard: a primary and R-1 warm secondaries on other executors (1 to 5;
    /// a new namespace has 1). More than 1 needs cluster version 13.
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REPLICAS)))]
    pub replicas: Option<u32>,
    /// What a secondary counts for in placement next to a primary's 1 (0 to 1; a new namespace
    /// has 0.5).
    #[arg(long, value_name = "W", value_parser = secondary_weight)]
    pub secondary_weight: Option<SecondaryWeight>,
    /// How long a lost replica waits for its executor to come back under the same name before
    /// it is placed elsewhere (e.g. `30s`); `default`: twice the namespace's lease.
    #[arg(long, value_name = "DURATION|default", value_parser = restore_delay)]
    pub replica_restore_delay: Option<Option<u64>>,
    /// Fewer live replicas of a shard than this and a lost one is placed again at once, without
    /// waiting (1 to R; a new namespace has 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REPLICAS)))]
    pub min_active: Option<u32>,
}

impl ReplicaArgs {
    /// The change these flags ask for; absent flags keep their values.
    pub fn change(&self) -> ReplicaChange {
        ReplicaChange {
            replicas: self.replicas,
            secondary_weight: self.secondary_weight,
            replica_restore_delay_ms: self.replica_restore_delay,
            min_active: self.min_active,
        }
    }

    /// The fields of a new namespace, checked (I6): what was given, the rest at their defaults.
    pub fn fields(&self) -> Result<ReplicaFields, String> {
        let settings = self
            .change()
            .applied_to(&ReplicaSettings::default())
            .map_err(|error| error.to_string())?;
        Ok(settings.as_request())
    }
}

/// How `namespace show` prints a namespace's replicas.
pub fn render_replicas(settings: &ReplicaSettings) -> String {
    if settings.replicas == 1 {
        return "1 (no secondaries)".to_owned();
    }
    let delay = match settings.replica_restore_delay_ms {
        Some(ms) => humantime::format_duration(Duration::from_millis(ms)).to_string(),
        None => "twice the lease".to_owned(),
    };
    format!(
        "{} (secondary weight {}, restore delay {delay}, min active {})",
        settings.replicas, settings.secondary_weight, settings.min_active
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p19_4_a_restore_delay_is_a_duration_or_twice_the_lease() {
        assert_eq!(restore_delay("30s"), Ok(Some(30_000)));
        assert_eq!(restore_delay("0ms"), Ok(Some(0)));
        assert_eq!(restore_delay("default"), Ok(None));
        assert!(restore_delay("25h").is_err());
        assert!(restore_delay("1.5ms").is_err());
        assert!(restore_delay("soon").is_err());
    }

    #[test]
    fn p19_1_a_new_namespace_sends_only_the_fields_given_and_checks_them() {
        assert_eq!(
            ReplicaArgs::default().fields(),
            Ok(ReplicaFields::default())
        );
        let two = ReplicaArgs {
            replicas: Some(2),
            ..ReplicaArgs::default()
        };
        assert_eq!(two.fields().unwrap().replicas, Some(2));
        let more_active_than_replicas = ReplicaArgs {
            min_active: Some(2),
            ..ReplicaArgs::default()
        };
        assert!(more_active_than_replicas.fields().is_err());
        assert!(secondary_weight("0.25").is_ok());
        assert!(secondary_weight("2").is_err());
    }
}
