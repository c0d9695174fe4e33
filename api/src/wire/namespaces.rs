//! Namespaces (PROTOCOL P18.1): one cluster serves many shard spaces, each with its own name,
//! shard count and lease duration. Shards, epochs and handoffs are per `(namespace, shard)`; an
//! executor belongs to the one namespace it registered into. The space a cluster had before
//! namespaces is [`DEFAULT_NAMESPACE`], so executors and clients that name none keep working.
//!
//! A name is DNS-label shaped, like a Kubernetes namespace: 1 to [`MAX_NAMESPACE_BYTES`] of
//! lowercase letters, digits and `-`, starting and ending with a letter or digit. The manager's
//! edge, its state machine and the executor's flag parser all apply [`check_namespace_name`].

use serde::{Deserialize, Serialize};

/// The state schema that introduced namespaces (PROTOCOL P18.1, P14.3): the replicated
/// namespaces, each executor's namespace, and the commands that create, change and delete a
/// namespace. A registration into a namespace other than [`DEFAULT_NAMESPACE`] is sent only to
/// managers stating this cluster version or later.
pub const NAMESPACES_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;

/// The state schema that gave each namespace its own placement settings (PROTOCOL P18.4, P14.3):
/// load placement, balance tolerance, balance budget and a label preference, each overriding
/// the managers' flag for that namespace's plans.
pub const NAMESPACE_PLACEMENT_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;

/// The namespace of everything that names none: the shard space created by the cluster's
/// initialisation. It always exists and cannot be deleted.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Longest namespace name (a DNS label's limit).
pub const MAX_NAMESPACE_BYTES: usize = 63;

/// Most namespaces one cluster holds, `default` included. Each is planned in every plan round,
/// so the bound keeps a round's work, and a snapshot, proportional to what was measured
/// (docs/BENCHMARKS.md, B12: 100 namespaces).
pub const MAX_NAMESPACES: usize = 1024;

/// Most shards one cluster holds over all its namespaces, `default` included: the largest shard
/// space measured (docs/BENCHMARKS.md, B5), since every shard is in every snapshot whichever
/// namespace holds it.
pub const MAX_TOTAL_SHARDS: u64 = super::MAX_SHARD_COUNT as u64;

/// `POST /v1/namespaces` (PROTOCOL P18.1, admin role): create a namespace. A repeat with the
/// same settings succeeds and changes nothing; other settings for a name in use are `409`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateNamespaceRequest {
    /// DNS-label shaped: 1 to 63 of lowercase letters, digits and `-`, starting and ending with
    /// a letter or digit; not `default`, which always exists.
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 63,
            pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
        )
    )]
    pub name: String,
    /// Its shards are `0..shard_count`, `1..=1048576`; a reshard doubles or halves it later
    /// (P20.1).
    pub shard_count: u32,
    /// The lease its executors' grants carry, `1..=86400000` ms; absent: the managers'
    /// `--lease-duration` (`default`'s lease) at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_ms: Option<u64>,
    /// Most executors registered in it at once; absent: no bound but the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_executors: Option<u32>,
    /// Its own placement settings (P18.4); absent ones follow the managers' flags.
    #[serde(default, skip_serializing_if = "NamespacePlacement::is_empty")]
    pub placement: NamespacePlacement,
    /// Replicas of each shard, a primary and `replicas - 1` secondaries (P19.1), `1..=5`;
    /// absent: 1. More than 1 needs cluster version 13.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 5))]
    pub replicas: Option<u32>,
    /// What a secondary counts for in placement next to a primary's 1 (P19.2), `0..=1` in
    /// thousandths; absent: 0.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<f64>))]
    pub secondary_weight: Option<super::SecondaryWeight>,
    /// How long a lost replica waits before it is placed again elsewhere (P19.4),
    /// `0..=86400000` ms; absent: twice the namespace's lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_restore_delay_ms: Option<u64>,
    /// Fewer live replicas of a shard than this and a lost one is placed again at once (P19.4),
    /// `1..=replicas`; absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_active: Option<u32>,
}

impl CreateNamespaceRequest {
    /// Its replica fields (P19.1).
    pub fn replica_fields(&self) -> super::ReplicaFields {
        super::ReplicaFields {
            replicas: self.replicas,
            secondary_weight: self.secondary_weight,
            replica_restore_delay_ms: self.replica_restore_delay_ms,
            min_active: self.min_active,
        }
    }

    /// This request with `fields` as its replica fields.
    pub fn with_replica_fields(self, fields: super::ReplicaFields) -> Self {
        Self {
            replicas: fields.replicas,
            secondary_weight: fields.secondary_weight,
            replica_restore_delay_ms: fields.replica_restore_delay_ms,
            min_active: fields.min_active,
            ..self
        }
    }
}

/// A namespace's own placement settings (PROTOCOL P18.4). Each one set overrides the managers'
/// flag for this namespace's plans; an absent one follows the flag of whichever manager leads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NamespacePlacement {
    /// Place by the loads executors report (P15.2), or by count alone: `--load-placement`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_placement: Option<bool>,
    /// How far an executor's load ÷ capacity may stray from the namespace's mean before shards
    /// move for balance, in percent, `1..=100`: `--balance-tolerance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 100))]
    pub balance_tolerance_percent: Option<u32>,
    /// Most shards moved for balance per minute (P15.3), `1..=1048576`: `--max-balance-moves`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 1048576))]
    pub max_balance_moves_per_minute: Option<u32>,
    /// `key=value`: the namespace's shards go to executors with this label while any of them
    /// takes shards, to the others only while none does (P18.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(example = "zone=a"))]
    pub prefer: Option<String>,
}

impl NamespacePlacement {
    /// Whether every setting follows the managers' flags.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A change of a namespace's placement settings (`PATCH /v1/namespaces/{name}`, P18.4): an
/// absent field keeps its value, `null` returns it to the managers' flag.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NamespacePlacementChange {
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<bool>, nullable = true))]
    pub load_placement: Option<Option<bool>>,
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<u32>, nullable = true, minimum = 1, maximum = 100))]
    pub balance_tolerance_percent: Option<Option<u32>>,
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<u32>, nullable = true, minimum = 1, maximum = 1048576))]
    pub max_balance_moves_per_minute: Option<Option<u32>>,
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<String>, nullable = true, example = "zone=a"))]
    pub prefer: Option<Option<String>>,
}

impl NamespacePlacementChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `current` with this change made.
    pub fn applied_to(&self, current: &NamespacePlacement) -> NamespacePlacement {
        fn pick<T: Clone>(change: &Option<Option<T>>, current: &Option<T>) -> Option<T> {
            match change {
                Some(value) => value.clone(),
                None => current.clone(),
            }
        }
        NamespacePlacement {
            load_placement: pick(&self.load_placement, &current.load_placement),
            balance_tolerance_percent: pick(
                &self.balance_tolerance_percent,
                &current.balance_tolerance_percent,
            ),
            max_balance_moves_per_minute: pick(
                &self.max_balance_moves_per_minute,
                &current.max_balance_moves_per_minute,
            ),
            prefer: pick(&self.prefer, &current.prefer),
        }
    }
}

/// Why a namespace's placement settings are refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespacePlacementError {
    #[error("balance_tolerance_percent {0} is outside 1..=100 (PROTOCOL P18.4)")]
    Tolerance(u32),
    #[error(
        "max_balance_moves_per_minute {0} is outside 1..={max} (PROTOCOL P18.4)",
        max = super::MAX_SHARD_COUNT
    )]
    BalanceMoves(u32),
    #[error("prefer must be one label, key=value (PROTOCOL P18.4): {0}")]
    Prefer(super::LabelError),
}

/// The label a `prefer` setting names, `(key, value)`, checked as an executor's label is.
pub fn parse_preference(prefer: &str) -> Result<(String, String), NamespacePlacementError> {
    let labels = super::parse_labels([prefer]).map_err(NamespacePlacementError::Prefer)?;
    labels
        .into_iter()
        .next()
        .ok_or(NamespacePlacementError::Prefer(
            super::LabelError::NotAPair(String::new()),
        ))
}

/// Checks a namespace's placement settings (P18.4). The managers' edge, their state machine and
/// `leaseholdctl` all apply this one check.
pub fn check_namespace_placement(
    placement: &NamespacePlacement,
) -> Result<(), NamespacePlacementError> {
    if let Some(percent) = placement.balance_tolerance_percent {
        if !(1..=100).contains(&percent) {
            return Err(NamespacePlacementError::Tolerance(percent));
        }
    }
    if let Some(moves) = placement.max_balance_moves_per_minute {
        if moves == 0 || moves > super::MAX_SHARD_COUNT {
            return Err(NamespacePlacementError::BalanceMoves(moves));
        }
    }
    if let Some(prefer) = &placement.prefer {
        parse_preference(prefer)?;
    }
    Ok(())
}

/// `PATCH /v1/namespaces/{name}` (PROTOCOL P18.1, admin role): change a namespace's settings in
/// place; an absent field keeps its value. Its shard count never changes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetNamespaceRequest {
    /// The lease for grants from now on (P3.4); not for `default`, whose lease is the managers'
    /// `--lease-duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_ms: Option<u64>,
    /// A new executor bound; `null` removes the bound. A lower bound removes no one.
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<u32>, nullable = true))]
    pub max_executors: Option<Option<u32>>,
    /// Changes to its placement settings (P18.4).
    #[serde(default, skip_serializing_if = "NamespacePlacementChange::is_empty")]
    pub placement: NamespacePlacementChange,
    /// A new replica count (P19.1), `1..=5`: more secondaries are placed, or the surplus ones
    /// dropped, by the next plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 5))]
    pub replicas: Option<u32>,
    /// A new weight for secondaries in placement (P19.2), `0..=1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<f64>))]
    pub secondary_weight: Option<super::SecondaryWeight>,
    /// A new restore delay (P19.4); `null` returns it to twice the lease.
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<u64>, nullable = true))]
    pub replica_restore_delay_ms: Option<Option<u64>>,
    /// A new `min_active` (P19.4), `1..=replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_active: Option<u32>,
}

impl SetNamespaceRequest {
    /// Its change of the replica settings (P19.1).
    pub fn replica_change(&self) -> super::ReplicaChange {
        super::ReplicaChange {
            replicas: self.replicas,
            secondary_weight: self.secondary_weight,
            replica_restore_delay_ms: self.replica_restore_delay_ms,
            min_active: self.min_active,
        }
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A field that is absent (`None`, through `#[serde(default)]`), `null` (`Some(None)`) or a
/// value (`Some(Some(v))`).
fn present_or_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// One namespace (`GET /v1/namespaces`, `GET /v1/namespaces/{name}`; PROTOCOL P18.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct NamespaceView {
    pub name: String,
    pub shard_count: u32,
    /// The lease its executors' grants carry.
    pub lease_duration_ms: u64,
    /// Its executor bound, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_executors: Option<u32>,
    /// Executors registered in it now.
    pub executors: u64,
    /// Its shards with an owner (releasing ones included).
    pub owned_shards: u64,
    /// The log index of the entry that created it; 0 for `default`.
    pub created_revision: u64,
    /// Its own placement settings (P18.4); absent ones follow the managers' flags.
    #[serde(default, skip_serializing_if = "NamespacePlacement::is_empty")]
    pub placement: NamespacePlacement,
    /// Replicas of each shard (P19.1); absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// What a secondary counts for in placement (P19.2); absent: 0.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<f64>))]
    pub secondary_weight: Option<super::SecondaryWeight>,
    /// The restore delay it set (P19.4); absent: twice its lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_restore_delay_ms: Option<u64>,
    /// Its `min_active` (P19.4); absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_active: Option<u32>,
    /// Its generation (P20.1), raised by each split or merge; absent (0) until it reshards.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    /// The reshard under way in it (P20.2); absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reshard: Option<super::ReshardProgress>,
}

impl NamespaceView {
    /// This view with `fields` as its replica fields.
    pub fn with_replica_fields(self, fields: super::ReplicaFields) -> Self {
        Self {
            replicas: fields.replicas,
            secondary_weight: fields.secondary_weight,
            replica_restore_delay_ms: fields.replica_restore_delay_ms,
            min_active: fields.min_active,
            ..self
        }
    }

    /// Its replica settings (P19.1), the absent fields at their defaults.
    pub fn replica_settings(&self) -> super::ReplicaSettings {
        let defaults = super::ReplicaSettings::default();
        super::ReplicaSettings {
            replicas: self.replicas.unwrap_or(defaults.replicas),
            secondary_weight: self.secondary_weight.unwrap_or(defaults.secondary_weight),
            replica_restore_delay_ms: self.replica_restore_delay_ms,
            min_active: self.min_active.unwrap_or(defaults.min_active),
        }
    }
}

/// `DELETE /v1/namespaces/{name}` (PROTOCOL P18.1, admin role): what the deletion did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct NamespaceDeleted {
    pub name: String,
    /// True for a repeat: the name was deleted already.
    #[serde(default)]
    pub already_gone: bool,
    /// The executors still registered in it, holding nothing, removed with it.
    #[serde(default)]
    pub removed_executors: Vec<String>,
}

/// Why a namespace's lease or executor bound is refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceSettingsError {
    #[error(
        "lease_duration_ms {0} is outside 1..={max} (PROTOCOL P18.1)",
        max = super::MAX_LEASE_DURATION_MS
    )]
    Lease(u64),
    #[error("max_executors must be at least 1 (PROTOCOL P18.1)")]
    NoExecutors,
}

/// Checks a namespace's lease duration and executor bound (P18.1). The managers' edge, their
/// state machine and `leaseholdctl` all apply this one check.
pub fn check_namespace_settings(
    lease_duration_ms: u64,
    max_executors: Option<u32>,
) -> Result<(), NamespaceSettingsError> {
    if lease_duration_ms == 0 || lease_duration_ms > super::MAX_LEASE_DURATION_MS {
        return Err(NamespaceSettingsError::Lease(lease_duration_ms));
    }
    if max_executors == Some(0) {
        return Err(NamespaceSettingsError::NoExecutors);
    }
    Ok(())
}

/// Why a namespace name is refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "namespace {0:?} is not 1..={MAX_NAMESPACE_BYTES} of lowercase letters, digits and '-', \
     starting and ending with a letter or digit (PROTOCOL P18.1)"
)]
pub struct NamespaceNameError(pub String);

/// Checks a namespace name (P18.1).
pub fn check_namespace_name(name: &str) -> Result<(), NamespaceNameError> {
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let end = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !bytes.is_empty()
        && bytes.len() <= MAX_NAMESPACE_BYTES
        && bytes.iter().all(inner)
        && end(bytes.first())
        && end(bytes.last())
    {
        Ok(())
    } else {
        Err(NamespaceNameError(
            name.chars().take(MAX_NAMESPACE_BYTES + 1).collect(),
        ))
    }
}

/// Whether `name` is the default namespace.
pub fn is_default_namespace(name: &str) -> bool {
    name == DEFAULT_NAMESPACE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p18_1_namespace_names_are_dns_labels() {
        for good in ["default", "a", "kv", "orders-eu-1", "0", &"a".repeat(63)] {
            assert_eq!(check_namespace_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "kv.store",
            "kv_store",
            "k v",
            "ß",
            &"a".repeat(64),
        ] {
            assert!(check_namespace_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn p18_1_a_namespace_lease_is_1_ms_to_a_day_and_its_bound_at_least_1() {
        let day_ms = 24 * 60 * 60 * 1000;
        for (lease, bound) in [(1, None), (day_ms, Some(1)), (60_000, Some(u32::MAX))] {
            assert_eq!(
                check_namespace_settings(lease, bound),
                Ok(()),
                "{lease} {bound:?}"
            );
        }
        assert_eq!(
            check_namespace_settings(0, None),
            Err(NamespaceSettingsError::Lease(0))
        );
        assert_eq!(
            check_namespace_settings(day_ms + 1, None),
            Err(NamespaceSettingsError::Lease(day_ms + 1))
        );
        assert_eq!(
            check_namespace_settings(1, Some(0)),
            Err(NamespaceSettingsError::NoExecutors)
        );
    }

    #[test]
    fn p18_1_a_namespace_change_tells_absent_from_null() {
        let parse = |json: &str| serde_json::from_str::<SetNamespaceRequest>(json).unwrap();
        assert_eq!(parse("{}").max_executors, None);
        assert_eq!(parse(r#"{"max_executors":null}"#).max_executors, Some(None));
        assert_eq!(parse(r#"{"max_executors":3}"#).max_executors, Some(Some(3)));
        assert!(serde_json::from_str::<SetNamespaceRequest>(r#"{"shard_count":3}"#).is_err());
        let cleared = SetNamespaceRequest {
            max_executors: Some(None),
            ..SetNamespaceRequest::default()
        };
        // `None` fields are skipped: the null that clears a bound has to be sent by hand.
        assert_eq!(
            serde_json::to_string(&cleared).unwrap(),
            r#"{"max_executors":null}"#
        );
    }

    #[test]
    fn p18_1_a_refusal_never_echoes_a_whole_body() {
        let long = "x".repeat(10_000) + "_";
        let NamespaceNameError(shown) = check_namespace_name(&long).unwrap_err();
        assert_eq!(shown.len(), MAX_NAMESPACE_BYTES + 1);
    }
}
