//! Namespaces (PROTOCOL P18.1): one cluster serves many shard spaces, each with its own name,
//! shard count and lease duration. Shards, epochs and handoffs are per `(namespace, shard)`; an
//! executor belongs to the one namespace it registered into. The space a cluster had before
//! namespaces is [`DEFAULT_NAMESPACE`], so executors and clients that name none keep working.
//!
//! A name is DNS-label shaped, like a Kubernetes namespace: 1 to [`MAX_NAMESPACE_BYTES`] of
//! lowercase letters, digits and `-`, starting and ending with a letter or digit. The manager's
//! edge, its state machine and the executor's flag parser all apply [`check_namespace_name`].

/// The state schema that introduced namespaces (PROTOCOL P18.1, P14.3): the replicated
/// namespaces, each executor's namespace, and the commands that create, change and delete a
/// namespace. A registration into a namespace other than [`DEFAULT_NAMESPACE`] is sent only to
/// managers stating this cluster version or later.
pub const NAMESPACES_SCHEMA: u32 = 10;

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
    fn p18_1_a_refusal_never_echoes_a_whole_body() {
        let long = "x".repeat(10_000) + "_";
        let NamespaceNameError(shown) = check_namespace_name(&long).unwrap_err();
        assert_eq!(shown.len(), MAX_NAMESPACE_BYTES + 1);
    }
}
