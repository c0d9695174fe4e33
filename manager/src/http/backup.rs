//! `GET /v1/backup`: the current lease state as a backup file (`leasehold_api::backup`), like
//! `etcdctl snapshot save`. Any replica serves its applied state; `?consistent=true` (what
//! `leaseholdctl snapshot save` sends) reads through the leader first, so the backup holds every
//! write acknowledged before the request.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use leasehold_api::backup::{encode_backup, BackupSource};

use super::params::ReadQuery;
use super::{ApiQuery, HttpError};
use crate::raft::versions::backup_payload;
use crate::service::members::Members;

/// The applied lease state as a checksummed backup file.
#[utoipa::path(
    get, path = "/v1/backup", tag = "cluster", params(ReadQuery),
    responses(
        (status = 200, description = "The backup file: a magic line, a JSON header line (versions, revision, shard count, payload length, SHA-256, and the seal with --backup-key-file), then the state.", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 403, description = "`forbidden` (TLS): admin only, and not one limited to namespaces (P13.3, P18.2)."),
    ),
)]
pub async fn backup(
    State(members): State<Members>,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Result<Response, HttpError> {
    let (payload, revision, shard_count) = members.state.read(|applied| {
        let state = &applied.state;
        (
            backup_payload(state),
            state.revision(),
            state.config().map_or(0, |c| c.shard_count),
        )
    });
    let (state_schema_version, payload) =
        payload.map_err(|e| HttpError::internal("encoding the backup", e))?;
    let created_at_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let file = encode_backup(
        BackupSource {
            state_schema_version,
            revision,
            shard_count,
            created_at_unix_ms,
            source_node_id: members.leadership.id,
        },
        &payload,
        members.settings.backup_key.as_ref(),
    );
    tracing::info!(revision, bytes = file.len(), "backup served");
    let mut response = file.into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(value) = HeaderValue::from_str(&format!(
        "attachment; filename=\"leasehold-{revision}.backup\""
    )) {
        headers.insert(CONTENT_DISPOSITION, value);
    }
    Ok(response)
}
