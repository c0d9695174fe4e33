//! Storage identity: who a replica's data directory is.
//!
//! Every data directory gets a random storage id when it is created. Raft RPCs carry the
//! sender's node id and storage id, replies carry the responder's, and every node pins the
//! storage id it first sees for each peer (persisted). A node whose data directory was wiped comes
//! back with a new storage id: its votes and appends are refused by every peer that knew it, so it
//! cannot rejoin as its old self and help elect a leader that lacks committed entries. On start
//! with a fresh directory a node asks its peers whether they have pinned its id, and refuses to
//! start if so (see docs/OPERATIONS.md: remove the node, then add it back with `--join`).

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::SchemaRange;
use serde::{Deserialize, Serialize};

use super::NodeId;

pub const NODE_ID_HEADER: &str = "x-leasehold-node-id";
pub const STORAGE_ID_HEADER: &str = "x-leasehold-storage-id";
/// The node a Raft RPC is meant for: a node that is not it refuses the message, so an address
/// that reaches the wrong manager (a duplicated URL in `--initial-cluster`, a stale DNS entry, a
/// port taken over by another process) never feeds one node's Raft with another's messages.
pub const TARGET_NODE_ID_HEADER: &str = "x-leasehold-target-node-id";

const IDENTITY_TREE: &str = "node_identity";
const PINS_TREE: &str = "peer_storage_ids";
const KEY_STORAGE_ID: &[u8] = b"storage_id";
const KEY_NODE_ID: &[u8] = b"node_id";

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The message is a reply body (409), so it names no storage id: they are kept for wipe
    /// detection only (PROTOCOL P13.3) and go to this node's log instead ([`Self::log_ids`]).
    #[error(
        "node {peer} presented another storage id than the one this node pinned for it: its data \
         directory was replaced. Remove node {peer} (DELETE /v1/cluster/nodes/{peer}) and add it \
         back with --join"
    )]
    Replaced {
        peer: NodeId,
        pinned: String,
        presented: String,
    },
    #[error("this data directory belongs to node {stored}, but the process was started as --id {requested}")]
    WrongNode { stored: NodeId, requested: NodeId },
    #[error("stored identity is unreadable: {0}")]
    Unreadable(String),
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
}

impl IdentityError {
    /// Logs the refusal with both storage ids, for the operator comparing data directories.
    pub fn log_ids(&self) {
        match self {
            IdentityError::Replaced {
                peer,
                pinned,
                presented,
            } => tracing::error!(
                peer,
                pinned_storage_id = %pinned,
                presented_storage_id = %presented,
                "refusing raft message: {self}"
            ),
            other => tracing::error!(error = %other, "refusing raft message"),
        }
    }
}

/// What `GET /raft/identity` reports, for peers deciding whether a fresh node is really new.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityReport {
    pub node_id: NodeId,
    pub storage_id: String,
    /// Whether this node's Raft log holds a membership (the cluster was formed).
    pub initialized: bool,
    pub pins: BTreeMap<NodeId, String>,
    /// This node's release (PROTOCOL P14.3); absent from 0.1.0, which did not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The state schemas it reads and the newest it can apply; absent from 0.1.0 (schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemas: Option<SchemaRange>,
    /// Its log's last entry, so that a dead leader's followers know which of them can win the
    /// election ([`super::failover`]); absent for an empty log and from releases before 0.2.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_log: Option<super::failover::LogTip>,
    /// How long ago it last renewed a leader's lease, while it follows a leader: it refuses
    /// other candidates until that is the lease ([`super::failover`]). Absent otherwise and from
    /// releases before 0.2.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_silence_ms: Option<u64>,
}

#[derive(Debug)]
pub struct Identity {
    node_id: NodeId,
    storage_id: String,
    /// True when the storage id was minted by this process: the data directory is new.
    fresh: bool,
    db: sled::Db,
    pins: sled::Tree,
}

impl Identity {
    pub fn open(db: &sled::Db, node_id: NodeId) -> Result<Self, IdentityError> {
        let tree = db.open_tree(IDENTITY_TREE)?;
        let pins = db.open_tree(PINS_TREE)?;
        let (storage_id, fresh) = match tree.get(KEY_STORAGE_ID)? {
            Some(stored) => {
                let stored_node = tree
                    .get(KEY_NODE_ID)?
                    .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_ref()).ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| IdentityError::Unreadable("node id missing".into()))?;
                if stored_node != node_id {
                    return Err(IdentityError::WrongNode {
                        stored: stored_node,
                        requested: node_id,
                    });
                }
                let id = String::from_utf8(stored.to_vec())
                    .map_err(|e| IdentityError::Unreadable(e.to_string()))?;
                (id, false)
            }
            None => {
                let id = format!("{:032x}", rand::random::<u128>());
                tree.insert(KEY_NODE_ID, &node_id.to_be_bytes())?;
                tree.insert(KEY_STORAGE_ID, id.as_bytes())?;
                db.flush()?;
                (id, true)
            }
        };
        Ok(Self {
            node_id,
            storage_id,
            fresh,
            db: db.clone(),
            pins,
        })
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    pub fn storage_id(&self) -> &str {
        &self.storage_id
    }

    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// Accepts `presented` as `peer`'s storage id if it matches the pin, pinning it on first
    /// sight. The pin is flushed before the peer's message is acted upon.
    pub fn verify_peer(&self, peer: NodeId, presented: &str) -> Result<(), IdentityError> {
        if peer == self.node_id {
            return Ok(());
        }
        let key = peer.to_be_bytes();
        match self.pins.get(key)? {
            Some(pinned) if pinned.as_ref() == presented.as_bytes() => Ok(()),
            Some(pinned) => Err(IdentityError::Replaced {
                peer,
                pinned: String::from_utf8_lossy(&pinned).into_owned(),
                presented: presented.to_string(),
            }),
            None => {
                self.pins.insert(key, presented.as_bytes())?;
                self.db.flush()?;
                tracing::info!(peer, storage_id = presented, "pinned peer storage id");
                Ok(())
            }
        }
    }

    /// Drops pins of nodes that left the membership, so a removed node can be added back with a
    /// new data directory.
    pub fn retain_members(&self, members: &BTreeSet<NodeId>) -> Result<(), IdentityError> {
        let mut dropped = false;
        for entry in self.pins.iter() {
            let (key, _) = entry?;
            let peer = <[u8; 8]>::try_from(key.as_ref())
                .map(u64::from_be_bytes)
                .ok();
            if peer.is_none_or(|peer| !members.contains(&peer)) {
                self.pins.remove(key)?;
                tracing::info!(
                    ?peer,
                    "dropped storage pin of a node no longer in the membership"
                );
                dropped = true;
            }
        }
        if dropped {
            self.db.flush()?;
        }
        Ok(())
    }

    pub fn pins(&self) -> BTreeMap<NodeId, String> {
        self.pins
            .iter()
            .filter_map(Result::ok)
            .filter_map(|(key, value)| {
                let peer = <[u8; 8]>::try_from(key.as_ref())
                    .ok()
                    .map(u64::from_be_bytes)?;
                Some((peer, String::from_utf8_lossy(&value).into_owned()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_peer_is_refused_and_a_removed_one_can_come_back() {
        let dir = tempfile::TempDir::new().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let identity = Identity::open(&db, 1).unwrap();
        assert!(identity.is_fresh());
        identity.verify_peer(2, "aaaa").unwrap();
        identity.verify_peer(2, "aaaa").unwrap();
        let err = identity.verify_peer(2, "bbbb").unwrap_err();
        assert!(
            matches!(err, IdentityError::Replaced { peer: 2, .. }),
            "{err}"
        );
        // The message is a 409 body: it publishes neither storage id (P13.3).
        let message = err.to_string();
        assert!(
            !message.contains("aaaa") && !message.contains("bbbb"),
            "{message}"
        );
        identity.retain_members(&BTreeSet::from([1, 3])).unwrap();
        identity.verify_peer(2, "bbbb").unwrap();
    }

    #[test]
    fn identity_survives_reopen_and_refuses_another_node_id() {
        let dir = tempfile::TempDir::new().unwrap();
        let storage_id = {
            let db = sled::open(dir.path()).unwrap();
            let identity = Identity::open(&db, 7).unwrap();
            identity.verify_peer(8, "peer").unwrap();
            identity.storage_id().to_string()
        };
        // sled's background writer holds the directory's lock a moment past the close.
        let released_by = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !leasehold_harness::storage_unlocked(dir.path()).unwrap() {
            assert!(
                std::time::Instant::now() < released_by,
                "the lock stayed held"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let db = sled::open(dir.path()).unwrap();
        let identity = Identity::open(&db, 7).unwrap();
        assert!(!identity.is_fresh());
        assert_eq!(identity.storage_id(), storage_id);
        assert_eq!(identity.pins(), BTreeMap::from([(8, "peer".to_string())]));
        assert!(matches!(
            Identity::open(&db, 9),
            Err(IdentityError::WrongNode {
                stored: 7,
                requested: 9
            })
        ));
    }
}
