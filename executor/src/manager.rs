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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::client::{Client, ClientConfig, ClientError};

use crate::members::{MemberSource, MembersFuture};
use leasehold_api::tls::TlsConfig;
use leasehold_api::wire::{
    Credential, ExecutorView, Grant, KeyRoute, Labels, RegisterRequest, RenewRequest,
    APP_VERSION_SCHEMA, CAPACITY_SCHEMA, CREDENTIALS_SCHEMA, LABELS_SCHEMA, RESHARD_SCHEMA,
};

/// Patience of one register or renew call: how stale the lease anchor can get before the
/// attempt that earns the grant is sent.
pub const GRANT_CALL_PATIENCE: Duration = Duration::from_secs(1);

/// The manager calls the lease loop makes.
pub(crate) trait ManagerApi: Send + Sync + 'static {
    /// `POST /v1/executors` (P4.4): idempotent per incarnation (P7.2).
    fn register(
        &self,
        request: &RegisterRequest,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send;

    /// `POST /v1/executors/{id}/renew`, presenting the executor's credential (P13.4), each
    /// attempt bounded by `attempt_timeout` when given, and never past the request timeout
    /// (P7.3).
    fn renew(
        &self,
        executor_id: &str,
        credential: &Credential,
        request: &RenewRequest,
        attempt_timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send;

    /// `POST /v1/executors/{id}/drain` with the executor's own credential (P17.2), then the
    /// executors the managers list, for whether any can take the shards.
    fn drain_self(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<Vec<ExecutorView>, ClientError>> + Send;

    /// `DELETE /v1/executors/{id}` (P3.7); a retry after a lost reply succeeds (P7.2).
    fn deregister(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;

    /// The cluster version the managers' last reply stated (P14.3; schema 2 before any did):
    /// which request fields they take (docs/PROTOCOL.md, "Versions").
    fn cluster_version(&self) -> u32;
}

/// The real manager connection.
#[derive(Debug, Clone)]
pub(crate) struct ManagerLink {
    /// Register and renew: short patience (see the module docs).
    grants: Client,
    /// Deregister and lookups: P7.1 patience.
    patient: Client,
    /// The warning that a cluster below [`CAPACITY_SCHEMA`] ignores the capacity was logged;
    /// it is said once, not at every re-registration.
    capacity_ignored_warned: Arc<AtomicBool>,
    /// The same for an application version below [`APP_VERSION_SCHEMA`].
    app_version_ignored_warned: Arc<AtomicBool>,
    /// The same for labels below [`LABELS_SCHEMA`].
    labels_ignored_warned: Arc<AtomicBool>,
    /// The namespace it routes keys in (P18.1).
    namespace: String,
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
            capacity_ignored_warned: Arc::new(AtomicBool::new(false)),
            app_version_ignored_warned: Arc::new(AtomicBool::new(false)),
            labels_ignored_warned: Arc::new(AtomicBool::new(false)),
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.to_owned(),
        })
    }

    /// Routes keys in `namespace` (P18.1), the one its executor registers into.
    pub(crate) fn in_namespace(mut self, namespace: &str) -> Self {
        namespace.clone_into(&mut self.namespace);
        self
    }

    /// A client with the default patience, for embedders' own lookups.
    pub(crate) fn client(&self) -> &Client {
        &self.patient
    }

    /// `GET /v1/routing?key=K` with the short patience: the answer is for a request waiting on
    /// it.
    pub(crate) async fn route_for_key(&self, key: &str) -> Result<KeyRoute, ClientError> {
        if leasehold_api::wire::is_default_namespace(&self.namespace) {
            self.grants.route_key(key, false).await
        } else {
            self.grants.route_key_in(&self.namespace, key, false).await
        }
    }
}

/// Leaves out of `request` the fields a cluster at `cluster_version` does not take
/// (docs/PROTOCOL.md, "Versions"): a manager of an earlier release refuses an unknown field, and
/// the leader of a cluster still below the field's schema refuses its value (the proposal gate,
/// P14.3). Returns what it left out that the executor stated.
fn fields_for_cluster_version(request: &mut RegisterRequest, cluster_version: u32) -> LeftOut {
    if cluster_version < CREDENTIALS_SCHEMA {
        request.credential = None;
    }
    // Said again at the next registration: an executor registered without it holds a
    // namespace back from resharding until it re-registers (P20.3).
    if cluster_version < RESHARD_SCHEMA {
        request.follows_generations = false;
    }
    LeftOut {
        capacity: if cluster_version < CAPACITY_SCHEMA {
            request.capacity.take()
        } else {
            None
        },
        app_version: if cluster_version < APP_VERSION_SCHEMA {
            request.app_version.take()
        } else {
            None
        },
        labels: if cluster_version < LABELS_SCHEMA {
            std::mem::take(&mut request.labels)
        } else {
            Labels::new()
        },
    }
}

/// What [`fields_for_cluster_version`] left out of a registration, which is said once.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct LeftOut {
    /// A capacity other than the default (P15.1).
    capacity: Option<u32>,
    /// An application version (P17.3).
    app_version: Option<String>,
    /// Labels (P18.3).
    labels: Labels,
}

impl ManagerApi for ManagerLink {
    /// The credential and the capacity go only to managers whose cluster takes them
    /// ([`fields_for_cluster_version`]). The cluster version is asked first if no manager has
    /// stated one new enough yet.
    fn register(
        &self,
        request: &RegisterRequest,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send {
        let mut request = request.clone();
        async move {
            let newest_field_schema = if request.follows_generations {
                RESHARD_SCHEMA
            } else if !request.labels.is_empty() {
                LABELS_SCHEMA
            } else if request.app_version.is_some() {
                APP_VERSION_SCHEMA
            } else if request.capacity.is_some() {
                CAPACITY_SCHEMA
            } else if request.credential.is_some() {
                CREDENTIALS_SCHEMA
            } else {
                0
            };
            if self.grants.cluster_version() < newest_field_schema {
                // Any reply states it; a failure here leaves the older assumption in place.
                let _ = self.grants.cluster_info().await;
            }
            let cluster_version = self.grants.cluster_version();
            let left_out = fields_for_cluster_version(&mut request, cluster_version);
            if !left_out.labels.is_empty()
                && !self.labels_ignored_warned.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    labels = ?left_out.labels,
                    cluster_version,
                    needed = LABELS_SCHEMA,
                    "the cluster does not take labels until its upgrade finishes (PROTOCOL P14.3, \
                     P18.3): registering without them, so placement does not know this \
                     executor's zone; restart it after the upgrade"
                );
            }
            if let Some(app_version) = left_out.app_version {
                if !self
                    .app_version_ignored_warned
                    .swap(true, Ordering::Relaxed)
                {
                    tracing::warn!(
                        app_version,
                        cluster_version,
                        needed = APP_VERSION_SCHEMA,
                        "the cluster does not take an application version until its upgrade \
                         finishes (PROTOCOL P14.3, P17.3): registering without one, so placement \
                         treats this executor as older than any that states one"
                    );
                }
            }
            if let Some(capacity) = left_out.capacity {
                if !self.capacity_ignored_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        capacity,
                        cluster_version,
                        needed = CAPACITY_SCHEMA,
                        "the cluster does not take a capacity until its upgrade finishes \
                         (PROTOCOL P14.3, P15.1): registering with capacity 1; restart this \
                         executor after the upgrade to register with its own"
                    );
                }
            }
            self.grants.register(&request).await
        }
    }

    fn renew(
        &self,
        executor_id: &str,
        credential: &Credential,
        request: &RenewRequest,
        attempt_timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send {
        let request_timeout = self.grants.config().request_timeout;
        let attempt_timeout = attempt_timeout.map(|bound| bound.min(request_timeout));
        self.grants
            .renew_within(executor_id, Some(credential), request, attempt_timeout)
    }

    fn drain_self(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<Vec<ExecutorView>, ClientError>> + Send {
        let executor_id = executor_id.to_owned();
        let credential = credential.clone();
        async move {
            self.patient.drain_self(&executor_id, &credential).await?;
            self.patient.executors(false).await
        }
    }

    fn deregister(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<(), ClientError>> + Send {
        self.patient.deregister(executor_id, Some(credential))
    }

    fn cluster_version(&self) -> u32 {
        self.grants.cluster_version()
    }
}

/// The voters of `GET /v1/cluster`, asked with the short patience (a push waits on it) of the
/// replica the grants go to, the leader when one is known.
impl MemberSource for ManagerLink {
    fn voters(&self) -> MembersFuture<'_> {
        Box::pin(async move {
            let info = self
                .grants
                .cluster_info()
                .await
                .map_err(|error| error.to_string())?;
            Ok(info.voters.iter().map(|member| member.node_id).collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(capacity: Option<u32>) -> RegisterRequest {
        RegisterRequest {
            follows_generations: false,
            namespace: None,
            incarnation: "inc".into(),
            address: "http://127.0.0.1:9".into(),
            name: None,
            credential: Some(Credential::from_random([1; 32])),
            capacity,
            app_version: None,
            labels: Labels::new(),
        }
    }

    /// docs/PROTOCOL.md "Versions", P15.1: the capacity goes only to a cluster at cluster
    /// version 12 or later (an older manager would refuse the field, an older cluster the value),
    /// and the credential only from 12; what is left out is said.
    #[test]
    fn p15_1_the_capacity_is_sent_only_to_clusters_that_take_it() {
        for (cluster_version, credential, capacity, left_out) in [
            (2, false, None, Some(5)),
            (11, false, None, Some(5)),
            (12, true, Some(5), None),
            (13, true, Some(5), None),
        ] {
            let mut sent = request(Some(5));
            let dropped = fields_for_cluster_version(&mut sent, cluster_version);
            assert_eq!(
                dropped.capacity, left_out,
                "cluster version {cluster_version}"
            );
            assert_eq!(sent.capacity, capacity, "cluster version {cluster_version}");
            assert_eq!(
                sent.credential.is_some(),
                credential,
                "cluster version {cluster_version}"
            );
        }
        let mut default = request(None);
        assert_eq!(
            fields_for_cluster_version(&mut default, 12),
            LeftOut::default()
        );
    }

    /// docs/PROTOCOL.md "Versions", P17.3: the application version goes only to a cluster at
    /// cluster version 12 or later, and what is left out is said.
    #[test]
    fn p17_3_the_app_version_is_sent_only_to_clusters_that_take_it() {
        for (cluster_version, sent_version, left_out) in [
            (2, None, Some("2.0")),
            (11, None, Some("2.0")),
            (12, Some("2.0"), None),
            (13, Some("2.0"), None),
        ] {
            let mut sent = RegisterRequest {
                app_version: Some("2.0".into()),
                ..request(None)
            };
            let dropped = fields_for_cluster_version(&mut sent, cluster_version);
            assert_eq!(
                dropped.app_version.as_deref(),
                left_out,
                "{cluster_version}"
            );
            assert_eq!(
                sent.app_version.as_deref(),
                sent_version,
                "{cluster_version}"
            );
        }
    }

    /// docs/PROTOCOL.md "Versions", P18.3: labels go only to a cluster at cluster version 12 or
    /// later, and what is left out is said.
    #[test]
    fn p18_3_labels_are_sent_only_to_clusters_that_take_them() {
        let labels: Labels = [("zone".to_owned(), "a".to_owned())].into();
        for (cluster_version, sent_labels, left_out) in [
            (2, Labels::new(), labels.clone()),
            (11, Labels::new(), labels.clone()),
            (12, labels.clone(), Labels::new()),
        ] {
            let mut sent = RegisterRequest {
                labels: labels.clone(),
                ..request(None)
            };
            let dropped = fields_for_cluster_version(&mut sent, cluster_version);
            assert_eq!(dropped.labels, left_out, "{cluster_version}");
            assert_eq!(sent.labels, sent_labels, "{cluster_version}");
        }
    }

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
