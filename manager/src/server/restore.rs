//! Importing a backup on a manager's first start (the second half of `leaseholdctl snapshot
//! restore`, like `etcdutl snapshot restore`).
//!
//! The operator restores the same backup file into every member's empty data directory; each
//! member, on its first start with the usual `--initial-cluster`, finds the prepared file, checks
//! it again in full (envelope, checksum, schema, that the payload decodes into a consistent lease
//! state, shard count against `--shard-count`), and installs it as its first snapshot, with the
//! membership taken from `--initial-cluster`. Every member derives the same snapshot log id from
//! the backup (term 0, node 0, index = the state's revision), so they agree on the log's start;
//! formation then sees a node with a log and does not initialise again, and an election among the
//! members begins the new cluster's history at the next index. Nothing is written unless every
//! check passes; any failure stops the manager with the reason.
//!
//! The restored leases are absolute times on the old leader's clock. A new leader reaps nothing
//! for one full lease after taking office (P6.1) and the mass-expiry guard (P6.3) holds reaping
//! while no executor renews, so executors that reconnect keep their shards.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::{Path, PathBuf};

use leasehold_api::backup::{parse_backup, BackupError, RESTORED_FILE_NAME, RESTORE_FILE_NAME};
use leasehold_raft_store::{encode_snapshot_data, Applied};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership};

use crate::lease::LeaseState;
use crate::raft::versions::{state_from_backup, BackupSchemaError};
use crate::raft::{LogStore, NodeId, StateMachineStore, TypeConfig};
use crate::server::config::ManagerConfig;

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("reading the prepared backup {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the prepared backup {path} is unusable: {reason}")]
    Backup { path: PathBuf, reason: BackupError },
    #[error("the prepared backup cannot be read: {0}")]
    Schema(#[from] BackupSchemaError),
    #[error("the prepared backup's state is invalid: {0}")]
    InvalidState(String),
    #[error(
        "the prepared backup has {backup} shards but --shard-count is {flag}: start the restored \
         cluster with --shard-count {backup}"
    )]
    ShardCount { backup: u32, flag: u32 },
    #[error(
        "a restored member must start with --initial-cluster (the new cluster's members), not \
         --join"
    )]
    Join,
    #[error(
        "{path} holds a prepared backup but the data directory already has Raft state; restore \
         only into an empty directory (remove the directory and restore again)"
    )]
    NotFresh { path: PathBuf },
    #[error("storage: {0}")]
    Store(String),
}

/// The snapshot log id every member derives from a backup at `revision`.
fn restored_log_id(revision: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(0, 0), revision)
}

/// Checks everything about the prepared file that does not need the store: envelope and checksum,
/// schema, decodability, structural consistency, shard count against the flags.
fn validate(path: &Path, config: &ManagerConfig) -> Result<LeaseState, RestoreError> {
    let file = std::fs::read(path).map_err(|source| RestoreError::Read {
        path: path.to_owned(),
        source,
    })?;
    let (header, payload) = parse_backup(&file).map_err(|reason| RestoreError::Backup {
        path: path.to_owned(),
        reason,
    })?;
    if let Some(key) = &config.backup_key {
        key.check(&header, payload)
            .map_err(|reason| RestoreError::Backup {
                path: path.to_owned(),
                reason,
            })?;
    }
    let state = state_from_backup(header.state_schema_version, payload)?;
    let violations = state.consistency_violations();
    if !violations.is_empty() {
        return Err(RestoreError::InvalidState(violations.join("; ")));
    }
    let shard_count = state.config().map_or(0, |c| c.shard_count);
    if state.revision() != header.revision || shard_count != header.shard_count {
        return Err(RestoreError::InvalidState(format!(
            "the payload (revision {}, {shard_count} shards) does not match its header (revision {}, {} shards)",
            state.revision(),
            header.revision,
            header.shard_count
        )));
    }
    if state.config().is_none() || state.revision() == 0 {
        return Err(RestoreError::InvalidState(
            "the backup holds an uninitialised cluster: there is nothing to restore".to_string(),
        ));
    }
    if shard_count != config.shard_count {
        return Err(RestoreError::ShardCount {
            backup: shard_count,
            flag: config.shard_count,
        });
    }
    if config.join.is_some() {
        return Err(RestoreError::Join);
    }
    Ok(state)
}

fn store_error(error: impl std::fmt::Display) -> RestoreError {
    RestoreError::Store(error.to_string())
}

/// Imports `<data dir>/leasehold-restore.backup` if present (see the module docs); returns the
/// restored revision. Must run before the Raft node is created on these stores.
pub async fn import_if_prepared(
    config: &ManagerConfig,
    log_store: &mut LogStore,
    state_machine: &mut StateMachineStore,
) -> Result<Option<u64>, RestoreError> {
    let path = config.data_dir.join(RESTORE_FILE_NAME);
    if !path.exists() {
        return Ok(None);
    }
    let state = validate(&path, config)?;
    let revision = state.revision();
    let log_id = restored_log_id(revision);

    let (last_applied, _) = state_machine.applied_state().await.map_err(store_error)?;
    let log_state = log_store.get_log_state().await.map_err(store_error)?;
    let vote = log_store.read_vote().await.map_err(store_error)?;
    if last_applied == Some(log_id) && log_state.last_log_id.is_none() && vote.is_none() {
        // Installed before a crash that came before the rename below.
        tracing::info!(revision, "backup already imported; finishing up");
    } else if last_applied.is_some() || log_state.last_log_id.is_some() || vote.is_some() {
        return Err(RestoreError::NotFresh { path });
    } else {
        let voters: BTreeSet<NodeId> = config.initial_cluster.keys().copied().collect();
        let nodes: BTreeMap<NodeId, BasicNode> = config
            .initial_cluster
            .iter()
            .map(|(&id, address)| (id, BasicNode::new(address)))
            .collect();
        let membership = StoredMembership::new(Some(log_id), Membership::new(vec![voters], nodes));
        let meta = SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: membership.clone(),
            snapshot_id: format!("restored-{revision}"),
        };
        let data = encode_snapshot_data::<TypeConfig, LeaseState>(&Applied {
            last_applied: Some(log_id),
            last_membership: membership,
            state,
        })
        .map_err(store_error)?;
        state_machine
            .install_snapshot(&meta, Box::new(Cursor::new(data)))
            .await
            .map_err(store_error)?;
        tracing::info!(
            revision,
            members = ?config.initial_cluster.keys().collect::<Vec<_>>(),
            "restored the backup as this member's first snapshot"
        );
    }
    let imported = config.data_dir.join(RESTORED_FILE_NAME);
    std::fs::rename(&path, &imported).map_err(|source| RestoreError::Read {
        path: path.clone(),
        source,
    })?;
    Ok(Some(revision))
}
