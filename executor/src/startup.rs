//! Starting an executor ([`Executor`]): check the configuration, bind the push listener, serve
//! it, make sure it answers (P8.1), and only then start the lease loop and the lapse watcher.
//! [`StartError`] says why a start failed; nothing keeps running after one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use leasehold_api::client::{http_client_builder, ClientError};
use leasehold_api::connection_budget::ConnectionBudget;
use leasehold_api::origin::HostPolicy;
use leasehold_api::process::check_plaintext_listener;
use leasehold_api::serve::ListenerLimits;
use leasehold_api::tls::{Role, TlsConfig, TlsFiles};
use leasehold_api::wire::{check_app_version, check_capacity, check_labels};
use tokio::task::JoinHandle;
use tracing::{error, info};

use crate::admission_log::AdmissionLog;
use crate::config::ExecutorConfig;
use crate::handle::{ExecutorHandle, Tasks};
use crate::lease_loop::{run_lease_loop, watch_lapses};
use crate::manager::ManagerLink;
use crate::members::Members;
use crate::openapi;
use crate::routes::{self, PushCheck};
use crate::shared::{LoadSettings, Shared};
use crate::shutdown::ShutdownSignal;
use crate::sidecar::link::ServiceLink;
use crate::sidecar::{self, bind_local, check_app_url, push_to_app, LocalListener};
use crate::status::RunState;

/// Bound on the P8.1 self-check: the push listener must answer within this after binding.
const LISTENER_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why [`Executor::start`] failed. Nothing keeps running after an error.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A configuration value cannot work.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The manager list cannot be used.
    #[error("manager endpoints: {0}")]
    Managers(#[from] ClientError),
    /// The admission log cannot be opened.
    #[error("cannot open the admission log {path}: {source}")]
    EventLog {
        /// The configured path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The push listener cannot be bound.
    #[error("cannot listen on {listen}: {source}")]
    Bind {
        /// The configured listen address.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// The push listener was bound but does not answer (P8.1: the executor registers only
    /// once it does).
    #[error("the push listener on {address} does not answer: {detail}")]
    ListenerNotServing {
        /// The bound address.
        address: SocketAddr,
        /// Why.
        detail: String,
    },
}

impl StartError {
    /// Whether the configuration itself is at fault (a value that can never work, such as a
    /// malformed URL), rather than the environment (a port in use, a file that cannot be opened).
    pub fn is_config_error(&self) -> bool {
        match self {
            StartError::InvalidConfig(_) => true,
            StartError::Managers(error) => matches!(
                error,
                ClientError::InvalidEndpoint(_) | ClientError::InvalidConfig(_)
            ),
            // `--listen` that is no socket address at all, as opposed to one in use.
            StartError::Bind { source, .. } => source.kind() == std::io::ErrorKind::InvalidInput,
            StartError::EventLog { .. } | StartError::ListenerNotServing { .. } => false,
        }
    }
}

/// Entry point: starts an executor.
#[derive(Debug)]
pub struct Executor;

impl Executor {
    /// Binds the push listener, starts serving it, and once it answers (P8.1) starts the lease
    /// loop in the background, which registers with a fresh incarnation and keeps the lease.
    /// Returns without waiting for the registration: watch [`ExecutorHandle::assignment`].
    pub async fn start(config: ExecutorConfig) -> Result<ExecutorHandle, StartError> {
        Self::start_with_routes(config, |_| Router::new()).await
    }

    /// [`Executor::start`], serving `routes(handle)` on the same listener as the push
    /// endpoints. The routes must not reuse the executor's paths (`/v1/assignment`,
    /// `/v1/revoke`, `/v1/health`, `/v1/status`, `/v1/openapi.json`); axum panics at start-up
    /// on an overlap, a programming error. `GET /v1/openapi.json` documents the executor's own
    /// routes only ([`openapi::document`]); to document yours too, use
    /// [`Executor::start_with_documented_routes`].
    pub async fn start_with_routes(
        config: ExecutorConfig,
        routes: impl FnOnce(&ExecutorHandle) -> Router,
    ) -> Result<ExecutorHandle, StartError> {
        Self::serve(config, openapi::document(), routes).await
    }

    /// [`Executor::start_with_routes`], with `paths` documenting the routes: the OpenAPI
    /// operations, tags and schemas of what `routes` serves (a `#[derive(utoipa::OpenApi)]`
    /// document of its handlers, e.g. [`crate::metrics::document`] for
    /// [`crate::metrics::router`]). `GET /v1/openapi.json` then serves
    /// [`openapi::document_with`]`(paths)`. The `leasehold-executor` binary starts this way, with
    /// its demo workload and `GET /metrics`.
    pub async fn start_with_documented_routes(
        config: ExecutorConfig,
        paths: utoipa::openapi::OpenApi,
        routes: impl FnOnce(&ExecutorHandle) -> Router,
    ) -> Result<ExecutorHandle, StartError> {
        Self::serve(config, openapi::document_with(paths), routes).await
    }

    /// Start-up proper, serving `document` at `GET /v1/openapi.json`.
    async fn serve(
        config: ExecutorConfig,
        document: utoipa::openapi::OpenApi,
        routes: impl FnOnce(&ExecutorHandle) -> Router,
    ) -> Result<ExecutorHandle, StartError> {
        check_config(&config)?;
        let tls = match &config.tls {
            Some(files) => Some(load_executor_tls(files, &config.namespace)?),
            None => None,
        };
        let manager = ManagerLink::new(
            config.managers.clone(),
            config.request_timeout,
            tls.as_ref(),
        )?
        .in_namespace(&config.namespace);
        let (local, log, service) = sidecar_parts(&config, open_event_log(&config)?).await?;
        let (listener, local_addr) = bind_push_listener(&config, tls.is_some()).await?;
        let address = advertised_address(&config, local_addr, tls.is_some())?;
        let shared = Arc::new(shared_state(&config, address, log, service.as_ref()));

        let (shutdown_tx, shutdown) = ShutdownSignal::new();
        let (server_stop_tx, server_stop) = ShutdownSignal::new();
        // The local API answers until the push listener stops: the service sees `stopping`.
        let server_stop_for_local = server_stop.clone();
        let handle = ExecutorHandle::new(
            Arc::clone(&shared),
            manager.clone(),
            local_addr,
            config.shutdown_grace,
            shutdown_tx,
            server_stop_tx,
        );
        let app = push_app(
            &shared,
            &document,
            routes(&handle),
            tls.is_some().then_some(&manager),
            local_addr,
        );
        // One budget of connections for the process's listeners, the push listener and the
        // sidecar's local API (P13.6): the descriptors they draw from are the process's.
        let connections = ConnectionBudget::for_this_process(None);
        let limits = ListenerLimits::within(&connections);
        let server =
            start_push_server(listener, local_addr, app, tls.as_ref(), limits, server_stop).await?;
        info!(%local_addr, address = %shared.address(), "push listener serving; registering (P8.1)");
        let lease = spawn_lease_loop(&shared, manager, &shutdown, config.shutdown_grace, &handle);
        let sidecar = service.map(|link| {
            serve_service(
                local,
                config.app_url.clone(),
                link,
                &shared,
                &handle,
                (server_stop_for_local, ListenerLimits::within(&connections)),
            )
        });
        let lapse_watcher = tokio::spawn(watch_lapses(Arc::clone(&shared), shutdown));
        handle
            .hold(Tasks {
                lease,
                lapse_watcher,
                server,
                sidecar,
            })
            .await;
        Ok(handle)
    }
}

/// The push listener's routes: `routes` beside the executor's own, `document` at
/// `GET /v1/openapi.json`. P13.3: under TLS (`members_of` the managers' link), pushes only from
/// managers that are members of the cluster, checked against the member set the managers report
/// (a narrow handle on their client).
fn push_app(
    shared: &Arc<Shared>,
    document: &utoipa::openapi::OpenApi,
    routes: Router,
    members_of: Option<&ManagerLink>,
    local_addr: SocketAddr,
) -> Router {
    let push_check = match members_of {
        Some(manager) => PushCheck::Tls(Arc::new(Members::new(Arc::new(manager.clone())))),
        None => PushCheck::Plaintext,
    };
    let host_policy =
        HostPolicy::for_listener(members_of.is_some(), local_addr.ip(), shared.address());
    routes::app(
        Arc::clone(shared),
        document,
        routes,
        push_check,
        host_policy,
    )
}

/// The lease loop (PROTOCOL §3), which reports to `handle` why it ended if it failed.
fn spawn_lease_loop(
    shared: &Arc<Shared>,
    manager: ManagerLink,
    shutdown: &ShutdownSignal,
    shutdown_grace: Duration,
    handle: &ExecutorHandle,
) -> JoinHandle<RunState> {
    let run = run_lease_loop(
        Arc::clone(shared),
        Arc::new(manager),
        shutdown.clone(),
        shutdown_grace,
    );
    let handle = handle.clone();
    tokio::spawn(async move {
        let state = run.await;
        handle.report_failure(&state);
        state
    })
}

/// The settings checked before anything is opened or bound: each refusal names its flag.
fn check_config(config: &ExecutorConfig) -> Result<(), StartError> {
    let refused = |what: &str, error: &dyn std::fmt::Display| {
        StartError::InvalidConfig(format!("{what} refused: {error}"))
    };
    if config.shutdown_grace.is_zero() {
        return Err(StartError::InvalidConfig(
            "the shutdown grace (--shutdown-grace) must be positive".into(),
        ));
    }
    check_capacity(config.capacity)
        .map_err(|error| refused("the capacity (--capacity) is", &error))?;
    if let Some(app_version) = &config.app_version {
        check_app_version(app_version)
            .map_err(|error| refused("the application version (--app-version) is", &error))?;
    }
    check_labels(&config.labels).map_err(|error| refused("the labels (--label) are", &error))?;
    leasehold_api::wire::check_namespace_name(&config.namespace)
        .map_err(|error| refused("the namespace (--namespace) is", &error))?;
    if config.local_prepare && config.local_listen.is_none() && config.app_url.is_none() {
        return Err(StartError::InvalidConfig(
            "--local-prepare is for a sidecar: give --local-listen or --app-url too".into(),
        ));
    }
    if let Some(url) = &config.app_url {
        check_app_url(url).map_err(StartError::InvalidConfig)?;
    }
    Ok(())
}

/// `--event-log`, opened for appending (PROTOCOL §9).
fn open_event_log(config: &ExecutorConfig) -> Result<Option<AdmissionLog>, StartError> {
    config
        .event_log
        .as_ref()
        .map(|path| {
            AdmissionLog::open(path).map_err(|source| StartError::EventLog {
                path: path.display().to_string(),
                source,
            })
        })
        .transpose()
}

/// The push listener on `--listen`, and the address it bound; plaintext beyond loopback only
/// with `--insecure` (P13.5), which is warned of.
async fn bind_push_listener(
    config: &ExecutorConfig,
    tls: bool,
) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind {
        listen: config.listen.clone(),
        source,
    };
    let listener = leasehold_api::serve::bind(config.listen.as_str())
        .await
        .map_err(bind_error)?;
    let local_addr = listener.local_addr().map_err(bind_error)?;
    let insecure = check_plaintext_listener(local_addr.ip(), tls, config.insecure)
        .map_err(StartError::InvalidConfig)?;
    if insecure {
        tracing::warn!(%local_addr, "serving plaintext on a non-loopback address (--insecure): anyone who can reach it can push assignments (PROTOCOL P13.5)");
    }
    Ok((listener, local_addr))
}

/// What the lease loop, the push routes and the sidecar share: this executor's address, name,
/// event log, load settings, version, labels, namespace, hooks, and the service it serves.
fn shared_state(
    config: &ExecutorConfig,
    address: String,
    log: Option<AdmissionLog>,
    service: Option<&Arc<ServiceLink>>,
) -> Shared {
    let load = LoadSettings {
        capacity: config.capacity,
        report_loads: config.report_loads,
    };
    let shared = Shared::new(address, config.name.clone(), log, load)
        .with_app_version(config.app_version.clone())
        .with_labels(config.labels.clone())
        .with_namespace(&config.namespace)
        .with_hooks(config.handoff_hooks.clone())
        .with_secondaries_ready_when_held(config.secondaries_ready_when_held);
    match service {
        Some(link) => shared.serving(Arc::clone(link)),
        None => shared,
    }
}

/// Serves the push routes until `stop` fires, once a request to the listener is seen answered
/// (P8.1: an executor registers only once it serves its pushes).
async fn start_push_server(
    listener: tokio::net::TcpListener,
    local_addr: SocketAddr,
    app: Router,
    tls: Option<&TlsConfig>,
    limits: ListenerLimits,
    mut stop: ShutdownSignal,
) -> Result<JoinHandle<()>, StartError> {
    let server_tls = tls.map(TlsConfig::server_config);
    let server = tokio::spawn(async move {
        let served = leasehold_api::serve::serve(listener, app, server_tls, limits, async move {
            stop.wait().await
        })
        .await;
        if let Err(error) = served {
            error!(%error, "push listener failed");
        }
    });
    if let Err(detail) = check_listener_serves(local_addr, tls).await {
        server.abort();
        return Err(StartError::ListenerNotServing {
            address: local_addr,
            detail,
        });
    }
    Ok(server)
}

/// As a sidecar (`--local-listen` or `--app-url`): the local API's listener, bound, and the link
/// to the service, which takes the event log, since it then records what the service was told
/// (P16.2), not the sidecar's own admission. Otherwise the event log stays the executor's.
async fn sidecar_parts(
    config: &ExecutorConfig,
    log: Option<AdmissionLog>,
) -> Result<
    (
        Option<LocalListener>,
        Option<AdmissionLog>,
        Option<Arc<ServiceLink>>,
    ),
    StartError,
> {
    let local = match &config.local_listen {
        Some(listen) => Some(
            bind_local(listen)
                .await
                .map_err(|source| StartError::Bind {
                    listen: format!("--local-listen {listen:?}"),
                    source,
                })?,
        ),
        None => None,
    };
    if local.is_none() && config.app_url.is_none() {
        return Ok((None, log, None));
    }
    let link = ServiceLink::new(log);
    if config.local_prepare {
        link.opt_in_prepares();
    }
    Ok((local, None, Some(Arc::new(link))))
}

/// As a sidecar (PROTOCOL §16): serves the local API on `local`, pushes to `app_url`, and ends
/// the service's copies as they run out, until `stop` fires (after the deregistration, so the
/// service is told `stopping`).
fn serve_service(
    local: Option<LocalListener>,
    app_url: Option<String>,
    link: Arc<ServiceLink>,
    shared: &Arc<Shared>,
    handle: &ExecutorHandle,
    (stop, limits): (ShutdownSignal, ListenerLimits),
) -> JoinHandle<()> {
    let serving = local.map(|local| {
        let host_policy = local
            .tcp
            .map(|bound| HostPolicy::for_listener(false, bound.ip(), &format!("http://{bound}")));
        let app = sidecar::router(
            Arc::clone(shared),
            Arc::clone(&link),
            handle.clone(),
            host_policy,
        );
        info!(local_listen = %local.description, "serving the local API to the service (PROTOCOL §16)");
        let description = local.description;
        let mut server_stop = stop.clone();
        async move {
            let served = leasehold_api::serve::serve(
                local.listener,
                app,
                None,
                limits,
                async move { server_stop.wait().await },
            )
            .await;
            if let Err(error) = served {
                error!(%error, local_listen = %description, "the local API's listener failed");
            }
        }
    });
    let pushing = app_url.map(|url| {
        info!(app_url = %url, "pushing the permits to the service (PROTOCOL §16)");
        push_to_app(Arc::clone(shared), Arc::clone(&link), url, stop.clone())
    });
    tokio::spawn(async move {
        let serve = async {
            if let Some(serving) = serving {
                serving.await;
            }
        };
        let push = async {
            if let Some(pushing) = pushing {
                pushing.await;
            }
        };
        tokio::join!(serve, push, link.end_copies(stop));
    })
}

/// P8.1: the push listener answers HTTP before the executor makes itself known. One request to
/// `GET /v1/health` on the bound address; any HTTP status line will do.
async fn check_listener_serves(address: SocketAddr, tls: Option<&TlsConfig>) -> Result<(), String> {
    let probe_address = if address.ip().is_unspecified() {
        let loopback = if address.is_ipv4() {
            std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST)
        } else {
            std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
        };
        SocketAddr::new(loopback, address.port())
    } else {
        address
    };
    // The process's own client, so the probe speaks what the managers will: TLS with this
    // executor's certificate when configured (any role may read `/v1/health`).
    let client = http_client_builder(tls)
        .timeout(LISTENER_CHECK_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    match client
        .get(format!("{scheme}://{probe_address}/v1/health"))
        .send()
        .await
    {
        // Any answer is HTTP from this listener; what the health says is the lease loop's.
        Ok(_) => Ok(()),
        Err(error) if error.is_timeout() => {
            Err(format!("no answer within {LISTENER_CHECK_TIMEOUT:?}"))
        }
        Err(error) => Err(leasehold_api::client::error_chain(&error)),
    }
}

/// Loads the TLS files; the certificate must be an executor's (P13.1), which is what managers
/// accept registrations from, and, if it is limited to namespaces, to `namespace` among them
/// (P18.2): the managers would refuse every registration, so the start is refused instead.
fn load_executor_tls(files: &TlsFiles, namespace: &str) -> Result<TlsConfig, StartError> {
    let tls = TlsConfig::load(files).map_err(|e| StartError::InvalidConfig(e.to_string()))?;
    match tls.role() {
        Role::Executor if !tls.scope().allows(namespace) => {
            Err(StartError::InvalidConfig(format!(
                "--cert-file {}: the certificate is limited to {}, and --namespace is {namespace:?} \
                 (PROTOCOL P18.2)",
                files.cert_file.display(),
                tls.scope()
            )))
        }
        Role::Executor => Ok(tls),
        role => Err(StartError::InvalidConfig(format!(
            "--cert-file {}: the certificate is {role}'s, not an executor's",
            files.cert_file.display()
        ))),
    }
}

/// The advertised address: `--advertise`, else `http(s)://<bound address>` (P8.1).
fn advertised_address(
    config: &ExecutorConfig,
    bound: SocketAddr,
    tls: bool,
) -> Result<String, StartError> {
    let scheme = if tls { "https" } else { "http" };
    match &config.advertise {
        Some(url) => {
            let trimmed = url.trim_end_matches('/');
            leasehold_api::wire::validate_base_url(trimmed)
                .map_err(|reason| StartError::InvalidConfig(format!("--advertise: {reason}")))?;
            if !trimmed.starts_with(&format!("{scheme}://")) {
                return Err(StartError::InvalidConfig(format!(
                    "--advertise {trimmed}: managers push to {scheme}:// here (PROTOCOL P13.2)"
                )));
            }
            Ok(trimmed.to_owned())
        }
        None if bound.ip().is_unspecified() => Err(StartError::InvalidConfig(format!(
            "listening on the wildcard address {bound} needs --advertise: managers cannot push to it"
        ))),
        None => Ok(format!("{scheme}://{bound}")),
    }
}
