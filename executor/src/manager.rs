//! The executor's calls to the manager, behind a seam so the lease loop can be tested against
//! a fake manager under a paused clock.
//!
//! The real implementation uses two [`Client`]s over the same managers:
//! - grants (register, renew) with a short patience. The lease is anchored at the instant read
//!   just before the call (P3.2); the client's retries inside one call (failover to another
//!   replica, following a named leader) all start after that instant, so the anchor still
//!   precedes the attempt that earned the grant, and it errs short by at most the patience. The
//!   lease loop owns the longer backoff (P3.5).
//! - everything else (deregister, routing lookups) with the protocol's default patience (P7.1),
//!   bounded by the caller.

use std::future::Future;
use std::time::Duration;

use leasehold_api::client::{percent_encode, Client, ClientConfig, ClientError};
use leasehold_api::tls::TlsConfig;
use leasehold_api::wire::{
    Credential, Grant, KeyRoute, RegisterRequest, RenewRequest, CREDENTIALS_SCHEMA,
};

/// Patience of one register or renew call: how stale the lease anchor can get before the
/// attempt that earns the grant is sent.
pub const GRANT_CALL_PATIENCE: Duration = Duration::from_secs(1);

/// Longest routing key the manager accepts in `GET /v1/routing?key=K`.
pub const MAX_KEY_BYTES: usize = 1024;

/// The manager calls the lease loop makes.
pub(crate) trait ManagerApi: Send + Sync + 'static {
    /// `POST /v1/executors` (P4.4): idempotent per incarnation (P7.2).
    fn register(
        &self,
        request: &RegisterRequest,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send;

    /// `POST /v1/executors/{id}/renew`, presenting the executor's credential (P13.4).
    fn renew(
        &self,
        executor_id: &str,
        credential: &Credential,
        request: &RenewRequest,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send;

    /// `DELETE /v1/executors/{id}` (P3.7); a retry after a lost reply succeeds (P7.2).
    fn deregister(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
}

/// The real manager connection.
#[derive(Debug, Clone)]
pub(crate) struct ManagerLink {
    /// Register and renew: short patience (see the module docs).
    grants: Client,
    /// Deregister and lookups: P7.1 patience.
    patient: Client,
}

impl ManagerLink {
    pub(crate) fn new(
        managers: Vec<String>,
        request_timeout: Duration,
        tls: Option<&TlsConfig>,
    ) -> Result<Self, ClientError> {
        let patient_config = ClientConfig {
            request_timeout,
            ..ClientConfig::default()
        };
        let grants_config = ClientConfig {
            patience: GRANT_CALL_PATIENCE,
            ..patient_config
        };
        Ok(Self {
            grants: Client::with_tls(managers.clone(), grants_config, tls)?,
            patient: Client::with_tls(managers, patient_config, tls)?,
        })
    }

    /// A client with the default patience, for embedders' own lookups.
    pub(crate) fn client(&self) -> &Client {
        &self.patient
    }

    /// `GET /v1/routing?key=K` with the short patience: the answer is for a request waiting on
    /// it.
    pub(crate) async fn route_for_key(&self, key: &str) -> Result<KeyRoute, ClientError> {
        let path = format!("/v1/routing?key={}", percent_encode(key));
        let value = self.grants.get_json(&path).await?;
        serde_json::from_value(value).map_err(|e| ClientError::Decode(e.to_string()))
    }
}

impl ManagerApi for ManagerLink {
    /// The credential goes only to managers whose cluster takes it (docs/PROTOCOL.md,
    /// "Versions"): a manager of 0.1.0, or a cluster still at its schema, would refuse the
    /// field. The cluster version is asked first if no manager has stated one yet.
    fn register(
        &self,
        request: &RegisterRequest,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send {
        let mut request = request.clone();
        async move {
            if request.credential.is_some() && self.grants.cluster_version() < CREDENTIALS_SCHEMA {
                // Any reply states it; a failure here leaves the older assumption in place.
                let _ = self.grants.cluster_info().await;
            }
            if self.grants.cluster_version() < CREDENTIALS_SCHEMA {
                request.credential = None;
            }
            self.grants.register(&request).await
        }
    }

    fn renew(
        &self,
        executor_id: &str,
        credential: &Credential,
        request: &RenewRequest,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send {
        self.grants.renew(executor_id, Some(credential), request)
    }

    fn deregister(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<(), ClientError>> + Send {
        self.patient.deregister(executor_id, Some(credential))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_rejects_bad_endpoints() {
        assert!(ManagerLink::new(vec![], Duration::from_secs(1), None).is_err());
        assert!(ManagerLink::new(vec!["ftp://x".into()], Duration::from_secs(1), None).is_err());
        assert!(ManagerLink::new(
            vec!["http://127.0.0.1:1".into()],
            Duration::from_secs(1),
            None
        )
        .is_ok());
    }
}
