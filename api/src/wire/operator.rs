//! Operator controls (PROTOCOL P17.4): maintenance mode, moving and pinning a shard, and the audit
//! log that records every operator action with who did it and when.

use serde::{Deserialize, Serialize};

/// The state schema that introduced maintenance mode, pins and the audit log (PROTOCOL P17.4,
/// P14.3): the routes that change them answer `409` below this cluster version.
pub const OPERATOR_CONTROLS_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;

/// Most records the audit log keeps. Past it the oldest record not of an operator of the whole
/// cluster goes first ([`is_cluster_operator`]), and only when there is none the oldest of all:
/// what namespace admins do cannot push the cluster operators' records out.
pub const MAX_AUDIT_RECORDS: usize = 1024;

/// Longest actor the audit log keeps for a record (a certificate subject, cut at this many bytes
/// on a character boundary).
pub const MAX_ACTOR_BYTES: usize = 256;

/// `PUT /v1/cluster/maintenance`: turn maintenance mode on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MaintenanceRequest {
    /// On: placement is frozen for balance, joiners and drains; shards nobody holds are still
    /// placed, expired leases still reaped.
    pub on: bool,
}

/// `GET`/`PUT /v1/cluster/maintenance`: whether maintenance mode is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct MaintenanceView {
    pub on: bool,
    /// For a `PUT`: whether it changed anything (a repeat changes nothing and is not recorded).
    #[serde(default)]
    pub changed: bool,
}

/// `POST /v1/shards/{shard}/move`: hand a shard to an executor now (a P5.2 handoff).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MoveShardRequest {
    /// A live executor that is not draining.
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 64))]
    pub to: String,
}

/// `PUT /v1/shards/{shard}/pin`: keep a shard on an executor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PinShardRequest {
    /// A registered executor.
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 64))]
    pub executor_id: String,
}

/// One record of `GET /v1/audit`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AuditRecordView {
    /// The log index of the entry that did it.
    pub revision: u64,
    /// When, on the leader's clock (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// Who: the caller's certificate role, the namespaces it is limited to, and its subject
    /// under TLS (`admin CN=alice`, `admin of namespaces kv CN=kv-ops`), or `anonymous
    /// (plaintext)`.
    pub actor: String,
    /// What: `drain`, `undrain`, `remove_drain` (an operator's removal that drains a live
    /// executor first), `remove`, `maintenance_on`, `maintenance_off`, `move`, `pin`, `unpin`,
    /// `member_add`, `member_remove`, `namespace_create`, `namespace_set`, `namespace_delete`,
    /// `namespace_reshard`.
    pub action: String,
    /// The namespace acted on (PROTOCOL P18.1): a namespace change's, or a move's or pin's
    /// when it is not `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<u64>,
    /// The member's address, for a member change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The shard count asked for, for a reshard (PROTOCOL P20.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_count: Option<u32>,
}

/// The actor of a caller in plaintext, where nobody is proved (P13.5): an operator of the whole
/// cluster, as anyone who can reach a plaintext listener may act as one.
pub const ANONYMOUS_ACTOR: &str = "anonymous (plaintext)";

/// Who acted, as the audit log records it (P17.4): the certificate's role, the namespaces it is
/// limited to if it is (P18.2), and its subject: `admin CN=alice`, `admin of namespaces kv
/// CN=kv-ops`. `role` and `limit` are as `leasehold_api::tls` prints them (`admin`,
/// `namespaces kv, orders`); cut to [`MAX_ACTOR_BYTES`].
pub fn actor_of(role: &str, limit: Option<&str>, subject: &str) -> String {
    match limit {
        Some(limit) => bounded_actor(&format!("{role} of {limit} {subject}")),
        None => bounded_actor(&format!("{role} {subject}")),
    }
}

/// Whether `actor` ([`actor_of`]) is an operator of the whole cluster: an admin certificate
/// limited to no namespace, or anyone on a plaintext listener. Their records are the last the
/// audit log drops ([`MAX_AUDIT_RECORDS`]).
pub fn is_cluster_operator(actor: &str) -> bool {
    actor == ANONYMOUS_ACTOR || (actor.starts_with("admin ") && !actor.starts_with("admin of "))
}

/// The actor string of a caller (P17.4), cut to [`MAX_ACTOR_BYTES`] on a character boundary.
pub fn bounded_actor(actor: &str) -> String {
    if actor.len() <= MAX_ACTOR_BYTES {
        return actor.to_owned();
    }
    let mut end = MAX_ACTOR_BYTES;
    while !actor.is_char_boundary(end) {
        end -= 1;
    }
    actor[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P17.4, P18.2: the audit log tells a limited admin from an unlimited one, and only the
    /// unlimited one (or plaintext's anonymous) is an operator of the whole cluster.
    #[test]
    fn p17_4_an_actor_says_its_role_limit_and_subject() {
        let unlimited = actor_of("admin", None, "CN=alice");
        let limited = actor_of("admin", Some("namespaces kv"), "CN=alice");
        assert_eq!(unlimited, "admin CN=alice");
        assert_eq!(limited, "admin of namespaces kv CN=alice");
        assert!(is_cluster_operator(&unlimited));
        assert!(!is_cluster_operator(&limited));
        assert!(is_cluster_operator(ANONYMOUS_ACTOR));
        assert!(!is_cluster_operator("executor ex-3 (its own credential)"));
        assert!(!is_cluster_operator(&actor_of("executor", None, "CN=x")));
        assert!(actor_of("admin", None, &"x".repeat(400)).len() <= MAX_ACTOR_BYTES);
    }

    #[test]
    fn p17_4_an_actor_is_cut_on_a_character_boundary() {
        assert_eq!(bounded_actor("admin CN=alice"), "admin CN=alice");
        let long = "é".repeat(MAX_ACTOR_BYTES);
        let cut = bounded_actor(&long);
        assert!(cut.len() <= MAX_ACTOR_BYTES && cut.len() >= MAX_ACTOR_BYTES - 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
