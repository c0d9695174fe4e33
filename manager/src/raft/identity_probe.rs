//! The one client of `GET /raft/identity`: ask the node at an address who it is, within a bound,
//! and whether it answered as the node expected there. Forming, joining, rejoining, pinning
//! storage ids, the cluster version and the dead-leader check all ask through it.

use std::time::Duration;

use leasehold_api::tls::Role;
use rustls_pki_types::CertificateDer;

use super::identity::IdentityReport;
use super::NodeId;

/// How long one question to one peer may take where nothing else bounds it.
pub const PEER_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the node at an address said of itself.
#[derive(Debug, Clone)]
pub struct Identified {
    pub report: IdentityReport,
    /// The role of the certificate that answered (under TLS; `None` in plaintext or for a
    /// certificate without one role).
    pub role: Option<Role>,
}

/// Why the node expected at an address was not heard there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotIdentified {
    /// Nothing answered within the bound (or not with a report).
    Silent,
    /// Another node answers at that address.
    AnsweredAs(NodeId),
}

/// Asks the node at `address` who it is, within `timeout`; `Ok` only if it answered as
/// `expected`.
pub async fn identify(
    http: &reqwest::Client,
    expected: NodeId,
    address: &str,
    timeout: Duration,
) -> Result<Identified, NotIdentified> {
    let answer = ask(http, address, timeout)
        .await
        .ok_or(NotIdentified::Silent)?;
    if answer.report.node_id == expected {
        Ok(answer)
    } else {
        Err(NotIdentified::AnsweredAs(answer.report.node_id))
    }
}

async fn ask(http: &reqwest::Client, address: &str, timeout: Duration) -> Option<Identified> {
    let url = format!("{}/raft/identity", address.trim_end_matches('/'));
    let reply = http.get(url).timeout(timeout).send().await.ok()?;
    let role = reply
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .and_then(|der| Role::of_certificate(&CertificateDer::from(der.to_vec())).ok());
    let report = reply.error_for_status().ok()?.json().await.ok()?;
    Some(Identified { report, role })
}
