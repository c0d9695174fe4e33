//! Resharding (PROTOCOL §20): a running namespace's shard count doubles (a split) or halves (a
//! merge), and each change raises the namespace's `generation`. The key→shard hash never
//! changes: under `2N` shards a key's shard is its shard under `N`, or that plus `N`, so every
//! shard of one layout covers exactly the keys of one shard of the other, or half of them.

use serde::{Deserialize, Serialize};

/// The state schema that brought resharding (PROTOCOL P20.1, P14.3): each namespace's
/// `generation` and a reshard under way, the entry that applies it, and each executor's promise
/// to follow a set's layout. Reshard requests are refused below this cluster version, and an
/// executor states [`RegisterRequest::follows_generations`](super::RegisterRequest) only to
/// managers stating it.
pub const RESHARD_SCHEMA: u32 = 14;

/// `POST /v1/namespaces/{name}/reshard` (PROTOCOL P20.1, admin of the namespace): change its
/// shard count to `shard_count`, twice (a split) or half (a merge) the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReshardRequest {
    /// The shard count wanted: twice or half the namespace's current one.
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 1048576))]
    pub shard_count: u32,
}

/// Which way a reshard goes (P20.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReshardKind {
    /// `N` shards become `2N`: shard `s` keeps the keys whose hash mod `2N` is `s`, and shard
    /// `s + N` takes those whose hash mod `2N` is `s + N`.
    Split,
    /// `N` shards become `N / 2`: shards `s` and `s + N / 2` become shard `s`.
    Merge,
}

impl ReshardKind {
    /// Its name on the wire, in metrics and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ReshardKind::Split => "split",
            ReshardKind::Merge => "merge",
        }
    }
}

/// Why a reshard is refused before anything is written (I6); its message is a `400` detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReshardError {
    /// Neither twice nor half the current count.
    #[error("{}", not_double_or_half(*current, *wanted))]
    NotDoubleOrHalf { current: u32, wanted: u32 },
    /// A merge of an odd count, whose shards do not pair.
    #[error("a namespace of {current} shards cannot merge: its count is odd (PROTOCOL P20.1)")]
    OddCount { current: u32 },
    /// The split would pass the most shards a namespace may have.
    #[error(
        "{wanted} shards is more than the {max} a namespace may have (PROTOCOL P20.1)",
        max = super::MAX_SHARD_COUNT
    )]
    TooManyShards { wanted: u32 },
}

fn not_double_or_half(current: u32, wanted: u32) -> String {
    let double = u64::from(current) * 2;
    if current.is_multiple_of(2) {
        format!(
            "a namespace of {current} shards reshards to {double} (a split) or {} (a merge), not \
             {wanted} (PROTOCOL P20.1)",
            current / 2
        )
    } else {
        format!(
            "a namespace of {current} shards reshards only to {double} (a split: an odd count \
             cannot merge), not {wanted} (PROTOCOL P20.1)"
        )
    }
}

/// Which way a namespace of `current` shards reshards to `wanted` (P20.1): a split to twice the
/// count (at most [`super::MAX_SHARD_COUNT`]) or a merge to half of an even count. The manager's
/// edge and its state machine both refuse with it; the cluster-wide shard quota is the state
/// machine's, which sees every namespace.
pub fn check_reshard(current: u32, wanted: u32) -> Result<ReshardKind, ReshardError> {
    if current == 0 || wanted == 0 {
        return Err(ReshardError::NotDoubleOrHalf { current, wanted });
    }
    if u64::from(wanted) == u64::from(current) * 2 {
        if wanted > super::MAX_SHARD_COUNT {
            return Err(ReshardError::TooManyShards { wanted });
        }
        return Ok(ReshardKind::Split);
    }
    if wanted.checked_mul(2) == Some(current) {
        return Ok(ReshardKind::Merge);
    }
    if !current.is_multiple_of(2) && wanted < current {
        return Err(ReshardError::OddCount { current });
    }
    Err(ReshardError::NotDoubleOrHalf { current, wanted })
}

/// A reshard under way in a namespace (P20.2), as `GET /v1/namespaces/{name}` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReshardProgress {
    pub kind: ReshardKind,
    /// The shard count it goes to.
    pub shard_count: u32,
    /// The log index of the entry that asked for it.
    pub requested_revision: u64,
    /// What it waits for: for a split, the handoffs in flight in the namespace; for a merge, the
    /// pairs of shards not yet on one executor with no handoff (P20.2).
    pub waiting_on: u64,
}

/// `POST /v1/namespaces/{name}/reshard`'s answer: the namespace's layout now and the reshard
/// under way, if it is not done already. A repeat of a reshard under way, or of one done (the
/// count is already the one asked), answers the same way and changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReshardReply {
    pub name: String,
    /// Its shard count now.
    pub shard_count: u32,
    /// Its generation now (P20.1).
    pub generation: u64,
    /// The reshard under way; absent once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reshard: Option<ReshardProgress>,
}

/// Whether `generation` is 0, the generation of every namespace never resharded: bodies leave it
/// out then, so a namespace that never reshards reads and writes as before.
pub fn is_first_generation(generation: &u64) -> bool {
    *generation == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reshard_doubles_or_halves_and_nothing_else() {
        assert_eq!(check_reshard(8, 16), Ok(ReshardKind::Split));
        assert_eq!(check_reshard(8, 4), Ok(ReshardKind::Merge));
        assert_eq!(check_reshard(1, 2), Ok(ReshardKind::Split));
        assert_eq!(check_reshard(2, 1), Ok(ReshardKind::Merge));
        assert_eq!(check_reshard(12, 6), Ok(ReshardKind::Merge));
        for (current, wanted) in [(8, 8), (8, 12), (8, 32), (8, 2), (8, 0), (1, 0), (0, 0)] {
            let refused = check_reshard(current, wanted).unwrap_err();
            assert!(
                matches!(refused, ReshardError::NotDoubleOrHalf { .. }),
                "{current} -> {wanted}: {refused}"
            );
        }
        assert_eq!(
            check_reshard(7, 3),
            Err(ReshardError::OddCount { current: 7 })
        );
        let max = super::super::MAX_SHARD_COUNT;
        assert_eq!(
            check_reshard(max, max * 2),
            Err(ReshardError::TooManyShards { wanted: max * 2 })
        );
        assert_eq!(check_reshard(max / 2, max), Ok(ReshardKind::Split));
    }

    #[test]
    fn the_refusal_names_both_ways_out() {
        let refused = check_reshard(8, 12).unwrap_err().to_string();
        assert!(refused.contains("16") && refused.contains('4'), "{refused}");
        assert!(refused.contains("P20.1"), "{refused}");
    }

    /// The layouts nest (P20.1): under `2N` a key's shard is its shard under `N`, or that plus
    /// `N`; so a split's children cover exactly their parent's keys.
    #[test]
    fn a_keys_shard_under_twice_the_count_is_its_shard_or_that_plus_the_count() {
        for n in [1_u32, 3, 8, 1024] {
            let count = std::num::NonZeroU32::new(n).unwrap();
            let doubled = std::num::NonZeroU32::new(2 * n).unwrap();
            for key in 0..2000_u32 {
                let key = format!("key-{key}");
                let parent = crate::shard_for_key(key.as_bytes(), count);
                let child = crate::shard_for_key(key.as_bytes(), doubled);
                assert!(
                    child == parent || child == parent + n,
                    "{key}: {parent} {child}"
                );
            }
        }
    }
}
