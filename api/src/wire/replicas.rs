//! Replicas and roles (PROTOCOL §19): a namespace may keep R replicas of each shard, one
//! **primary** (the owner of I1 and I2) and up to R − 1 warm **secondaries** on other executors.
//! A namespace that sets nothing keeps one replica, today's behaviour, and every body of it reads
//! and writes exactly as before.

use serde::{Deserialize, Serialize};

/// The state schema that gave namespaces replicas (PROTOCOL P19.1, P14.3): the settings below in
/// the replicated namespace and each shard's secondaries. A namespace change that sets them
/// other than to their defaults is proposed only once the cluster version reaches it.
pub const REPLICAS_SCHEMA: u32 = 13;

/// Most replicas of one shard (P19.1): a primary and four secondaries.
pub const MAX_REPLICAS: u32 = 5;

/// The weight a secondary counts at in placement (P19.2) unless the namespace sets another, in
/// thousandths: half a primary.
pub const DEFAULT_SECONDARY_WEIGHT_PERMILLE: u16 = 500;

/// Longest `replica_restore_delay_ms` a namespace may set: a day, the longest lease.
pub const MAX_REPLICA_RESTORE_DELAY_MS: u64 = super::MAX_LEASE_DURATION_MS;

/// What a secondary counts for in placement, next to a primary's 1 (P19.2): `0` to `1` in steps
/// of a thousandth. JSON carries it as a number (`0.5`); it is kept in thousandths so that every
/// replica computes the same plan from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "utoipa", schema(value_type = f64, example = 0.5))]
pub struct SecondaryWeight(u16);

impl SecondaryWeight {
    /// The weight of `permille` thousandths of a primary, if it is at most 1000.
    pub fn from_permille(permille: u16) -> Option<Self> {
        (permille <= 1000).then_some(Self(permille))
    }

    /// In thousandths of a primary.
    pub fn permille(self) -> u16 {
        self.0
    }
}

impl Default for SecondaryWeight {
    fn default() -> Self {
        Self(DEFAULT_SECONDARY_WEIGHT_PERMILLE)
    }
}

impl TryFrom<f64> for SecondaryWeight {
    type Error = ReplicaSettingsError;

    fn try_from(weight: f64) -> Result<Self, Self::Error> {
        if !(0.0..=1.0).contains(&weight) {
            return Err(ReplicaSettingsError::Weight(weight.to_string()));
        }
        let permille = (weight * 1000.0).round();
        if (permille / 1000.0 - weight).abs() > 1e-9 {
            return Err(ReplicaSettingsError::Weight(weight.to_string()));
        }
        // In 0..=1000 by the range check, so the cast is exact.
        Ok(Self(permille as u16))
    }
}

impl From<SecondaryWeight> for f64 {
    fn from(weight: SecondaryWeight) -> Self {
        f64::from(weight.0) / 1000.0
    }
}

impl std::fmt::Display for SecondaryWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", f64::from(*self))
    }
}

/// A shard's replica as a set, a claim or a view names it (P19.5): `primary` when absent, so a
/// namespace of one replica reads and writes as before.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Admits the shard's work; exclusive and fenced by the epoch (I1, I2).
    #[default]
    Primary,
    /// Keeps a warm copy and admits only secondary work (reads the service allows from it).
    Secondary,
}

impl Role {
    /// Whether it is the primary: the default, left out of every body.
    pub fn is_primary(&self) -> bool {
        *self == Role::Primary
    }

    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Secondary => "secondary",
        }
    }
}

/// A namespace's replica settings (P19.1, P19.2, P19.4), as the replicated state keeps them and
/// the namespace API shows them. The default is one replica, today's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSettings {
    /// R: a primary and `replicas - 1` secondaries per shard, `1..=5`.
    pub replicas: u32,
    /// What a secondary counts for in placement, next to a primary's 1.
    pub secondary_weight: SecondaryWeight,
    /// How long a lost replica waits before it is placed again elsewhere; `None`: twice the
    /// namespace's lease.
    pub replica_restore_delay_ms: Option<u64>,
    /// A shard with fewer live replicas than this has a lost one placed again at once, before
    /// the delay; `1..=replicas`.
    pub min_active: u32,
}

impl Default for ReplicaSettings {
    fn default() -> Self {
        Self {
            replicas: 1,
            secondary_weight: SecondaryWeight::default(),
            replica_restore_delay_ms: None,
            min_active: 1,
        }
    }
}

impl ReplicaSettings {
    /// Whether it is the default: one replica, nothing else set.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// How many secondaries each shard keeps.
    pub fn secondaries(&self) -> usize {
        usize::try_from(self.replicas.saturating_sub(1)).unwrap_or(0)
    }

    /// The delay before a lost replica is placed again, for a namespace whose lease is
    /// `lease_duration_ms` (P19.4).
    pub fn restore_delay_ms(&self, lease_duration_ms: u64) -> u64 {
        self.replica_restore_delay_ms
            .unwrap_or_else(|| lease_duration_ms.saturating_mul(2))
    }

    /// These settings as a request to create a namespace states them: each field present only
    /// when it differs from its default, so a namespace of one replica sends none.
    pub fn as_request(&self) -> ReplicaFields {
        let defaults = Self::default();
        ReplicaFields {
            replicas: (self.replicas != defaults.replicas).then_some(self.replicas),
            secondary_weight: (self.secondary_weight != defaults.secondary_weight)
                .then_some(self.secondary_weight),
            replica_restore_delay_ms: self.replica_restore_delay_ms,
            min_active: (self.min_active != defaults.min_active).then_some(self.min_active),
        }
    }
}

/// The replica fields of a namespace request or view, each absent for its default (P19.1):
/// `replicas`, `secondary_weight`, `replica_restore_delay_ms`, `min_active`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaFields {
    pub replicas: Option<u32>,
    pub secondary_weight: Option<SecondaryWeight>,
    pub replica_restore_delay_ms: Option<u64>,
    pub min_active: Option<u32>,
}

impl ReplicaFields {
    /// The settings these fields state, the absent ones at their defaults, checked (I6).
    pub fn settings(&self) -> Result<ReplicaSettings, ReplicaSettingsError> {
        let defaults = ReplicaSettings::default();
        let settings = ReplicaSettings {
            replicas: self.replicas.unwrap_or(defaults.replicas),
            secondary_weight: self.secondary_weight.unwrap_or(defaults.secondary_weight),
            replica_restore_delay_ms: self.replica_restore_delay_ms,
            min_active: self.min_active.unwrap_or(defaults.min_active),
        };
        check_replica_settings(&settings)?;
        Ok(settings)
    }
}

/// A change of a namespace's replica settings (`PATCH /v1/namespaces/{name}`): an absent field
/// keeps its value; `replica_restore_delay_ms: null` returns the delay to twice the lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaChange {
    pub replicas: Option<u32>,
    pub secondary_weight: Option<SecondaryWeight>,
    pub replica_restore_delay_ms: Option<Option<u64>>,
    pub min_active: Option<u32>,
}

impl ReplicaChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `current` with this change made, checked (I6).
    pub fn applied_to(
        &self,
        current: &ReplicaSettings,
    ) -> Result<ReplicaSettings, ReplicaSettingsError> {
        let settings = ReplicaSettings {
            replicas: self.replicas.unwrap_or(current.replicas),
            secondary_weight: self.secondary_weight.unwrap_or(current.secondary_weight),
            replica_restore_delay_ms: self
                .replica_restore_delay_ms
                .unwrap_or(current.replica_restore_delay_ms),
            min_active: self.min_active.unwrap_or(current.min_active),
        };
        check_replica_settings(&settings)?;
        Ok(settings)
    }
}

/// Why a namespace's replica settings are refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaSettingsError {
    #[error("replicas {0} is outside 1..={MAX_REPLICAS} (PROTOCOL P19.1)")]
    Replicas(u32),
    #[error("secondary_weight {0} is not a number from 0 to 1 in thousandths (PROTOCOL P19.2)")]
    Weight(String),
    #[error(
        "replica_restore_delay_ms {0} is outside 0..={MAX_REPLICA_RESTORE_DELAY_MS} \
         (PROTOCOL P19.4)"
    )]
    RestoreDelay(u64),
    #[error("min_active {min_active} is outside 1..={replicas}, the namespace's replicas (PROTOCOL P19.4)")]
    MinActive { min_active: u32, replicas: u32 },
}

/// Checks a namespace's replica settings (P19.1, P19.4). The managers' edge, their state machine
/// and `leaseholdctl` all apply this one check.
pub fn check_replica_settings(settings: &ReplicaSettings) -> Result<(), ReplicaSettingsError> {
    if !(1..=MAX_REPLICAS).contains(&settings.replicas) {
        return Err(ReplicaSettingsError::Replicas(settings.replicas));
    }
    if let Some(delay_ms) = settings.replica_restore_delay_ms {
        if delay_ms > MAX_REPLICA_RESTORE_DELAY_MS {
            return Err(ReplicaSettingsError::RestoreDelay(delay_ms));
        }
    }
    if !(1..=settings.replicas).contains(&settings.min_active) {
        return Err(ReplicaSettingsError::MinActive {
            min_active: settings.min_active,
            replicas: settings.replicas,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p19_1_replicas_are_1_to_5_and_min_active_at_most_replicas() {
        for replicas in 1..=MAX_REPLICAS {
            for min_active in 1..=replicas {
                let settings = ReplicaSettings {
                    replicas,
                    min_active,
                    ..ReplicaSettings::default()
                };
                assert_eq!(check_replica_settings(&settings), Ok(()));
            }
        }
        let of = |replicas, min_active| ReplicaSettings {
            replicas,
            min_active,
            ..ReplicaSettings::default()
        };
        assert_eq!(
            check_replica_settings(&of(0, 1)),
            Err(ReplicaSettingsError::Replicas(0))
        );
        assert_eq!(
            check_replica_settings(&of(6, 1)),
            Err(ReplicaSettingsError::Replicas(6))
        );
        assert!(check_replica_settings(&of(2, 3)).is_err());
        assert!(check_replica_settings(&of(2, 0)).is_err());
        let long_delay = ReplicaSettings {
            replica_restore_delay_ms: Some(MAX_REPLICA_RESTORE_DELAY_MS + 1),
            ..ReplicaSettings::default()
        };
        assert!(check_replica_settings(&long_delay).is_err());
    }

    #[test]
    fn p19_2_a_weight_is_a_number_from_0_to_1_in_thousandths() {
        let parse = |json: &str| serde_json::from_str::<SecondaryWeight>(json);
        assert_eq!(parse("0.5").unwrap().permille(), 500);
        assert_eq!(parse("0").unwrap().permille(), 0);
        assert_eq!(parse("1").unwrap().permille(), 1000);
        assert_eq!(parse("0.125").unwrap().permille(), 125);
        for bad in ["-0.1", "1.001", "0.0001", "\"0.5\"", "null", "1e300"] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(
            serde_json::to_string(&SecondaryWeight::default()).unwrap(),
            "0.5"
        );
        assert_eq!(SecondaryWeight::from_permille(1001), None);
    }

    #[test]
    fn p19_5_the_primary_role_is_the_one_left_out() {
        assert!(Role::default().is_primary());
        assert_eq!(
            serde_json::to_string(&Role::Secondary).unwrap(),
            "\"secondary\""
        );
        assert!(serde_json::from_str::<Role>("\"leader\"").is_err());
    }

    #[test]
    fn p19_1_one_replica_states_no_field_and_a_change_keeps_what_it_does_not_name() {
        assert_eq!(
            ReplicaSettings::default().as_request(),
            ReplicaFields::default()
        );
        let current = ReplicaFields {
            replicas: Some(3),
            min_active: Some(2),
            ..ReplicaFields::default()
        }
        .settings()
        .unwrap();
        let lowered = ReplicaChange {
            replicas: Some(2),
            ..ReplicaChange::default()
        };
        assert_eq!(lowered.applied_to(&current).unwrap().min_active, 2);
        let too_low = ReplicaChange {
            replicas: Some(1),
            ..ReplicaChange::default()
        };
        assert!(
            too_low.applied_to(&current).is_err(),
            "min_active 2 with one replica"
        );
        assert_eq!(current.restore_delay_ms(10_000), 20_000);
    }
}
