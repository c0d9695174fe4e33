//! What an embedder (or the `leasehold-executor` binary) configures.

use std::path::PathBuf;
use std::time::Duration;

use leasehold_api::tls::TlsFiles;
use leasehold_api::wire::DEFAULT_CAPACITY;

use crate::hooks::Hooks;
use crate::sidecar::LocalListen;

/// Default bound on a graceful stop: the self-drain and the deregistration (P17.2, P3.7).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Default bound on one HTTP attempt to a manager.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How an executor finds its managers and presents itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Manager base URLs (`http://host:port`); the client follows `X-Leasehold-Leader` and
    /// fails over across them (§9, P7.1).
    pub managers: Vec<String>,
    /// `HOST:PORT` to bind the push listener to; port 0 picks a free one.
    pub listen: String,
    /// The base URL managers push to (P8.1); defaults to `http://<bound address>`. Required
    /// when binding a wildcard address, which is no address others can use.
    pub advertise: Option<String>,
    /// A label for operators; carries no meaning for the protocol.
    pub name: Option<String>,
    /// Where to append the admission log (§9); none when `None`.
    pub event_log: Option<PathBuf>,
    /// Bound on a graceful stop: the self-drain (P17.2) takes all of it but a reserve
    /// (`DEREGISTRATION_RESERVE`, at most half), then admission stops and the executor
    /// deregisters (P3.7). If that does not fit, the shards still held move after the lease.
    pub shutdown_grace: Duration,
    /// Bound on one HTTP attempt to a manager.
    pub request_timeout: Duration,
    /// The executor's certificate, key and the cluster's CA (PROTOCOL P13.2): the push listener
    /// then speaks only TLS and accepts pushes only from manager certificates, and every call to
    /// the managers presents the executor certificate. `None`: plaintext.
    pub tls: Option<TlsFiles>,
    /// Serve plaintext on a non-loopback address anyway (P13.5; logged as a warning).
    pub insecure: bool,
    /// This executor's capacity (PROTOCOL P15.1): a positive weight, at most
    /// `leasehold_api::wire::MAX_CAPACITY`; the planner gives executors shares in proportion to
    /// it. Registered only with clusters at cluster version 12 or later; below, the executor
    /// registers with the default and says so in a warning.
    pub capacity: u32,
    /// The application version this executor runs (PROTOCOL P17.3), checked by
    /// `leasehold_api::wire::check_app_version`: while the executors run more than one, shards
    /// move only to the newest, and balance waits. Registered only with clusters at cluster
    /// version 5 or later; below, the executor registers without one and says so in a warning.
    pub app_version: Option<String>,
    /// The executor's labels (PROTOCOL P18.3), checked by `leasehold_api::wire::check_labels`;
    /// `zone` is the failure domain placement spreads shards over. Registered only with clusters
    /// at cluster version 12 or later; below, the executor registers without them and says so.
    pub labels: leasehold_api::wire::Labels,
    /// The namespace this executor registers into (PROTOCOL P18.1), checked by
    /// `leasehold_api::wire::check_namespace_name`: its shards, lease and plans are that
    /// namespace's. `default` is what every cluster had before namespaces; another needs a
    /// cluster at cluster version 12, which refuses the registration until then (`409`).
    pub namespace: String,
    /// Warm handoffs (PROTOCOL P17.1): run before a shard arrives (prepare) and after one leaves
    /// (release, before the revoke is answered, within 1.5 s). `None`: nothing to run.
    pub handoff_hooks: Option<Hooks>,
    /// Report every secondary (PROTOCOL P19.1) ready to be promoted as soon as it is held
    /// (P19.3), for a service whose secondary needs no warm-up (and for tests). Off: a secondary
    /// is ready once the embedder says so ([`crate::ExecutorHandle::set_secondary_ready`], or the
    /// service through the sidecar's `POST /v1/local/ready`).
    pub secondaries_ready_when_held: bool,
    /// Renewals carry the loads of the held shards, as measured by the
    /// [`crate::ExecutorHandle::load_meter`] (P15.1). Off: the executor does not report (not
    /// the same as reporting zeros), so turn it on only when the embedder records its work.
    pub report_loads: bool,
    /// Serve the local API of PROTOCOL §16 here, as the sidecar of a service on this machine:
    /// the admission log (`event_log`) then records what the service was told (P16.2).
    pub local_listen: Option<LocalListen>,
    /// Push the permits answers of PROTOCOL §16 to this URL of the service (`PUT`, each
    /// acknowledged by a `2xx` within `sidecar::APP_PUSH_TIMEOUT`): http:// on this machine only.
    /// Makes the executor a sidecar, as `local_listen` does.
    pub app_url: Option<String>,
    /// As a sidecar: the service prepares for shards about to arrive (PROTOCOL P17.1), so
    /// prepares wait for it from the start, before its first poll (a service can also say so on
    /// its polls, `prepare=true`, but a sidecar that just registered is asked before that).
    pub local_prepare: bool,
}

impl ExecutorConfig {
    /// A configuration with the defaults for everything but the managers and the listener.
    pub fn new(managers: Vec<String>, listen: impl Into<String>) -> Self {
        Self {
            managers,
            listen: listen.into(),
            advertise: None,
            name: None,
            event_log: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            tls: None,
            insecure: false,
            capacity: DEFAULT_CAPACITY,
            app_version: None,
            labels: leasehold_api::wire::Labels::new(),
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.to_owned(),
            handoff_hooks: None,
            secondaries_ready_when_held: false,
            report_loads: false,
            local_listen: None,
            app_url: None,
            local_prepare: false,
        }
    }
}
