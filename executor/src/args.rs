//! The flags of an executor process (PROTOCOL §10, §13), for the `leasehold-executor` binary
//! and every binary built on the library (the fencing example): one definition of each flag and
//! its `LEASEHOLD_*` variable.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::process::{LogFormat, TlsArgs};

use crate::config::ExecutorConfig;
use crate::hooks::{DelayHooks, Hooks};
use crate::sidecar::LocalListen;
use crate::startup::StartError;

/// Flatten into a binary's `clap::Parser`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExecutorArgs {
    /// Manager base URLs, comma-separated; the executor follows the leader among them.
    #[arg(
        long,
        env = "LEASEHOLD_MANAGERS",
        value_delimiter = ',',
        required = true
    )]
    pub managers: Vec<String>,

    /// HOST:PORT to bind the push listener (and the binary's own routes) to.
    // An `Option` only so a binary whose subcommands need no listener can negate the
    // requirement; `ExecutorArgs::config` refuses its absence.
    #[arg(long, env = "LEASEHOLD_LISTEN", required = true)]
    pub listen: Option<String>,

    /// URL managers push to; defaults to http(s)://<bound address>.
    #[arg(long, env = "LEASEHOLD_ADVERTISE")]
    pub advertise: Option<String>,

    /// A label for operators.
    #[arg(long, env = "LEASEHOLD_NAME")]
    pub name: Option<String>,

    /// Append the admission log (JSON lines, CLOCK_MONOTONIC stamps) to this file.
    #[arg(long, env = "LEASEHOLD_EVENT_LOG")]
    pub event_log: Option<PathBuf>,

    /// Bound on the whole graceful stop after a stop signal, e.g. `5s`: the self-drain
    /// (P17.2: shards handed over one by one while still admitted) gets all of it but the last
    /// second (or half, when shorter), the deregistration the rest.
    #[arg(long, env = "LEASEHOLD_SHUTDOWN_GRACE", default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Bound on one HTTP attempt to a manager, e.g. `5s`.
    #[arg(long, env = "LEASEHOLD_REQUEST_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,

    /// This executor's capacity (PROTOCOL P15.1): a positive weight, at most 1000000; the
    /// planner gives executors shares in proportion to it.
    #[arg(long, env = "LEASEHOLD_CAPACITY", default_value_t = leasehold_api::wire::DEFAULT_CAPACITY)]
    pub capacity: u32,

    /// The application version this executor serves (PROTOCOL P17.3), e.g. `2.4.1` or a build
    /// number: while the executors run more than one, shards move only to the newest and balance
    /// waits. Letters, digits, '.', '-', '+', '_'; ordered as semantic versions.
    #[arg(long, env = "LEASEHOLD_APP_VERSION")]
    pub app_version: Option<String>,

    /// A label of this executor (PROTOCOL P18.3), `key=value`, repeatable (or comma-separated in
    /// LEASEHOLD_LABELS): e.g. `--label zone=eu-west-1a`. `zone` is the failure domain placement
    /// spreads shards over in proportion to capacity. At most 16.
    #[arg(long = "label", env = "LEASEHOLD_LABELS", value_delimiter = ',')]
    pub labels: Vec<String>,

    /// The namespace this executor registers into (PROTOCOL P18.1): a shard space of the
    /// cluster with its own shards, lease and executors, created by an operator (`leaseholdctl
    /// namespace create`). Lowercase letters, digits and '-'.
    #[arg(long, env = "LEASEHOLD_NAMESPACE", default_value = "default")]
    pub namespace: String,

    /// The demo workload's warm-up (PROTOCOL P17.1): preparing for each shard about to be handed
    /// here takes this long, e.g. `200ms` (a stand-in for loading a cache). `0s`: nothing to do.
    #[arg(long, env = "LEASEHOLD_PREPARE_DELAY", default_value = "0s", value_parser = humantime::parse_duration)]
    pub prepare_delay: Duration,

    /// The demo workload's flush (PROTOCOL P17.1): releasing each revoked shard takes this long
    /// before the revoke is answered (at most 1.5 s counts). `0s`: nothing to do.
    #[arg(long, env = "LEASEHOLD_RELEASE_DELAY", default_value = "0s", value_parser = humantime::parse_duration)]
    pub release_delay: Duration,

    /// Be the sidecar of a service on this machine (PROTOCOL §16): serve it the local API on
    /// 127.0.0.1:PORT (loopback only) or unix:/path; the admission log then records what the
    /// service was told.
    #[arg(long, env = "LEASEHOLD_LOCAL_LISTEN")]
    pub local_listen: Option<String>,

    /// Be the sidecar of a service on this machine that takes pushes (PROTOCOL §16): PUT each
    /// permits answer to this http:// URL on loopback; a 2xx within 1 s acknowledges it.
    #[arg(long, env = "LEASEHOLD_APP_URL")]
    pub app_url: Option<String>,

    /// As a sidecar: the service warms up for shards about to arrive (PROTOCOL P17.1) and says
    /// so (`POST /v1/local/prepared`), so the leader's prepares wait for it, from the first one
    /// on, at most the leader's --prepare-timeout.
    #[arg(long, env = "LEASEHOLD_LOCAL_PREPARE")]
    pub local_prepare: bool,

    /// Report every secondary (PROTOCOL §19) ready to be promoted as soon as it is held, for a
    /// service whose secondary needs no warm-up. Off: a secondary is ready once the service says
    /// so (`POST /v1/local/ready` as a sidecar).
    #[arg(long, env = "LEASEHOLD_SECONDARIES_READY_WHEN_HELD")]
    pub secondaries_ready_when_held: bool,

    /// Log output format.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub tls: TlsArgs,
}

impl ExecutorArgs {
    /// The library's configuration from these flags; settings without a flag keep the
    /// library's defaults.
    pub fn config(&self) -> Result<ExecutorConfig, StartError> {
        let listen = self
            .listen
            .clone()
            .ok_or_else(|| StartError::InvalidConfig("--listen is required".to_owned()))?;
        let mut config = ExecutorConfig::new(self.managers.clone(), listen);
        config.advertise = self.advertise.clone();
        config.name = self.name.clone();
        config.event_log = self.event_log.clone();
        config.shutdown_grace = self.shutdown_grace;
        config.request_timeout = self.request_timeout;
        config.tls = self.tls.files();
        config.insecure = self.tls.insecure;
        config.capacity = self.capacity;
        config.app_version = self.app_version.clone();
        leasehold_api::wire::check_namespace_name(&self.namespace).map_err(|error| {
            StartError::InvalidConfig(format!("--namespace is refused: {error}"))
        })?;
        config.namespace = self.namespace.clone();
        config.labels = leasehold_api::wire::parse_labels(self.labels.iter().map(String::as_str))
            .map_err(|error| {
            StartError::InvalidConfig(format!("--label is refused: {error}"))
        })?;
        if !self.prepare_delay.is_zero() || !self.release_delay.is_zero() {
            config.handoff_hooks = Some(Hooks(Arc::new(DelayHooks {
                prepare: self.prepare_delay,
                release: self.release_delay,
            })));
        }
        config.local_listen =
            match &self.local_listen {
                Some(text) => Some(text.parse::<LocalListen>().map_err(|reason| {
                    StartError::InvalidConfig(format!("--local-listen {reason}"))
                })?),
                None => None,
            };
        config.app_url = self.app_url.clone();
        config.local_prepare = self.local_prepare;
        config.secondaries_ready_when_held = self.secondaries_ready_when_held;
        Ok(config)
    }
}
