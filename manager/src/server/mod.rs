//! Starts and stops one manager replica (PROTOCOL §8, §10). Beside it in this folder: the flags
//! (`config`), forming, joining and rejoining (`bootstrap`), a backup imported on first start
//! (`restore`), the tasks that follow Raft's metrics (`observe`), the metrics catalog
//! (`metrics`), the disk-space alarm and the fatal-failure exit (`disk_space`, `fatal`), and
//! running scans off the async workers (`cpu_bound`).
//!
//! Start: open the data directory, bind the listener (P8.1: before Raft starts, so peers and
//! clients can reach this node as soon as it takes part), start Raft, serve, and form or join
//! the cluster beside the server.
//! Stop (P8.2): keep answering while leadership moves elsewhere (stop heartbeats, refuse new
//! writes as retryable, forward once another leader is known), then stop accepting, drain
//! in-flight requests, shut Raft down and flush.

pub mod config;
pub mod dead_leader;
pub mod observe;
pub mod restore;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::origin::HostPolicy;
use leasehold_api::serve::{ConnectionBudget, ListenerLimits};
use leasehold_api::tls::TlsConfig;
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::{Raft, ServerState};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use self::config::ManagerConfig;
use crate::handles::disk_space::DiskSpace;
use crate::handles::fatal;
use crate::handles::registrations;
use crate::lease::LeaseState;
use crate::node::{ClusterSettings, ManagerNode, NodeParts};
use crate::raft::identity::{Identity, IdentityError};
use crate::raft::network::HttpNetworkFactory;
use crate::raft::{openraft_config, TypeConfig};
use crate::service::bootstrap::{self, BootstrapError};
use crate::{http, leader, renewals};

/// Bound on establishing a connection to a peer.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {listen}: {source}")]
    Bind {
        listen: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving HTTP: {0}")]
    Serve(#[source] std::io::Error),
    #[error("opening the data directory: {0}")]
    Sled(#[from] sled::Error),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("storage: {0}")]
    Store(#[from] leasehold_raft_store::StoreError),
    #[error("raft configuration: {0}")]
    RaftConfig(#[from] Box<openraft::ConfigError>),
    #[error("starting raft: {0}")]
    Raft(String),
    #[error("http client: {0}")]
    HttpClient(#[from] reqwest::Error),
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error("restoring a backup: {0}")]
    Restore(#[from] restore::RestoreError),
    /// P8.3: the storage failed (the Raft core stopped, or the disk is full); the process must
    /// end.
    #[error("{cause}")]
    StorageFailed { cause: String },
}

/// Why the server stopped serving.
enum StopReason {
    /// SIGTERM or SIGINT: a graceful stop (P8.2).
    Requested,
    /// Forming or joining the cluster failed for good.
    Bootstrap(BootstrapError),
    /// The storage failed (P8.3).
    StorageFailed(String),
}

/// One running replica without its HTTP listener: the data directory open, Raft started, the
/// node's tasks running, and forming or joining the cluster under way. [`run`] serves its
/// [`Replica::router`]; tests drive the router in process.
pub struct Replica {
    pub node: Arc<ManagerNode>,
    db: sled::Db,
    disk_space: DiskSpace,
    stop_tasks: watch::Sender<bool>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("node_id", &self.node.leadership.id)
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// Opens the data directory, starts Raft and the node's tasks, and begins forming or joining
    /// the cluster (beside the caller's server: forming needs this node reachable). The receiver
    /// hears of a failure to form or join for good.
    pub async fn start(
        config: &ManagerConfig,
        metrics: Option<PrometheusHandle>,
    ) -> Result<(Self, oneshot::Receiver<BootstrapError>), ServerError> {
        let (db, node, pending, disk_space) = open_node(config, metrics).await?;
        let (stop_tasks, tasks_stopped) = watch::channel(false);
        spawn_tasks(config, &node, pending, &disk_space, &tasks_stopped);
        let bootstrap_failed = spawn_bootstrap(config, &node, tasks_stopped);
        let replica = Replica {
            node,
            db,
            disk_space,
            stop_tasks,
        };
        Ok((replica, bootstrap_failed))
    }

    /// The replica's HTTP API, as [`run`] serves it on `config.listen`.
    pub fn router(&self, config: &ManagerConfig) -> axum::Router {
        http::router(
            &self.node,
            HostPolicy::for_listener(config.tls.is_some(), config.listen.ip(), &config.advertise),
            config.registration,
        )
    }

    /// The router of `--health-listen`: `/livez` and `/readyz` only, for callers without a
    /// certificate.
    pub fn health_router(&self) -> axum::Router {
        http::health_router(&self.node)
    }

    /// Stops the node's background tasks (Raft runs on).
    fn stop_tasks(&self) {
        let _ = self.stop_tasks.send(true);
    }

    /// Stops the node's tasks and Raft, and flushes the data directory.
    pub async fn shut_down(self) -> Result<(), ServerError> {
        self.stop_tasks();
        if let Err(error) = self.node.leadership.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
        self.db.flush_async().await?;
        Ok(())
    }
}

/// Opens the data directory and its stores (importing a prepared backup), starts Raft and builds
/// the node.
async fn open_node(
    config: &ManagerConfig,
    metrics: Option<PrometheusHandle>,
) -> Result<(sled::Db, Arc<ManagerNode>, Pending, DiskSpace), ServerError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| ServerError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    let db = sled::open(&config.data_dir)?;
    let identity = Arc::new(Identity::open(&db, config.id)?);
    let (mut log_store, mut state_machine) = leasehold_raft_store::open::<TypeConfig, LeaseState>(
        &db,
        &config.data_dir,
        config.log_store.clone(),
    )?;
    // A backup prepared by `leaseholdctl snapshot restore` becomes the first snapshot.
    restore::import_if_prepared(config, &mut log_store, &mut state_machine).await?;
    let state = state_machine.handle();
    let log_at_start = log_at_start(&mut log_store).await?;
    let http_client = leasehold_api::client::http_client_builder(config.tls.as_ref())
        .connect_timeout(PEER_CONNECT_TIMEOUT)
        .build()?;
    let raft = Raft::new(
        config.id,
        openraft_config(config.timings, config.snapshots)?,
        HttpNetworkFactory::new(http_client.clone(), identity.clone()),
        log_store,
        state_machine,
    )
    .await
    .map_err(|e| ServerError::Raft(e.to_string()))?;

    let (renewal_queue, pending_renewals) = renewals::queue();
    let (memory_renewals, confirmation_rounds) =
        renewals::from_memory::memory_renewals(config.renewals_from_memory);
    let (registration_queue, pending_registrations) = registrations::queue();
    let disk_space = DiskSpace::new(config.min_free_disk_bytes);
    let node = Arc::new(ManagerNode::new(NodeParts {
        id: config.id,
        advertise: config.advertise.clone(),
        raft,
        state,
        identity,
        http: http_client,
        settings: cluster_settings(config),
        metrics,
        renewals: renewal_queue,
        memory_renewals,
        registrations: registration_queue,
        log_at_start,
        disk_space: disk_space.clone(),
    }));
    Ok((
        db,
        node,
        Pending {
            renewals: pending_renewals,
            confirmation_rounds,
            registrations: pending_registrations,
        },
        disk_space,
    ))
}

/// The last log index and the vote the log held when the replica opened, for the leader's
/// first judgments.
async fn log_at_start(
    log_store: &mut leasehold_raft_store::SledLogStore<TypeConfig>,
) -> Result<(u64, openraft::Vote<u64>), ServerError> {
    use openraft::storage::RaftLogStorage;
    let log_state = log_store
        .get_log_state()
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?;
    let vote = log_store
        .read_vote()
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?
        .unwrap_or_default();
    Ok((log_state.last_log_id.map_or(0, |id| id.index), vote))
}

/// What the node keeps of its configuration for forming and running the cluster.
fn cluster_settings(config: &ManagerConfig) -> ClusterSettings {
    ClusterSettings {
        initial_cluster: config.initial_cluster.clone(),
        shard_count: config.shard_count,
        lease_duration_ms: config.lease_duration_ms,
        timings: config.timings,
        tls: config.tls.clone(),
        backup_key: config.backup_key.clone(),
    }
}

/// The node's background tasks, each stopping when `tasks_stopped` turns true.
fn spawn_tasks(
    config: &ManagerConfig,
    node: &Arc<ManagerNode>,
    pending: Pending,
    disk_space: &DiskSpace,
    tasks_stopped: &watch::Receiver<bool>,
) {
    tokio::spawn(crate::handles::disk_space::watch(
        config.data_dir.clone(),
        disk_space.clone(),
        tasks_stopped.clone(),
    ));
    // Each task gets the handle it needs, cut from the node, not the node.
    let observer = observe::Observer::of(node);
    tokio::spawn(observe::follow_raft(
        observer.clone(),
        tasks_stopped.clone(),
    ));
    tokio::spawn(observe::probe_peer_identities(
        observer,
        tasks_stopped.clone(),
    ));
    tokio::spawn(leader::cluster_version::run(
        leader::cluster_version::VersionProbe::of(node),
        tasks_stopped.clone(),
    ));
    tokio::spawn(dead_leader::watch_leader(
        dead_leader::NodeSurroundings::of(node),
        tasks_stopped.clone(),
    ));
    tokio::spawn(leader::run(
        leader::LeaderHandle::of(node, config.prepare_timeout),
        config.guard,
        config.placement,
        tasks_stopped.clone(),
    ));
    tokio::spawn(renewals::run_batcher(
        node.leadership.proposer.clone(),
        node.leadership.clock.clone(),
        pending.renewals,
        tasks_stopped.clone(),
    ));
    tokio::spawn(renewals::from_memory::run_rounds(
        node.leadership.clone(),
        node.memory_renewals.clone(),
        pending.confirmation_rounds,
        tasks_stopped.clone(),
    ));
    tokio::spawn(renewals::from_memory::run_reservations(
        node.leadership.proposer.clone(),
        node.leadership.clock.clone(),
        node.memory_renewals.clone(),
        tasks_stopped.clone(),
    ));
    tokio::spawn(registrations::run_batcher(
        node.leadership.proposer.clone(),
        node.leadership.clock.clone(),
        pending.registrations,
        tasks_stopped.clone(),
    ));
}

/// The writes the handlers queue for the batchers to group-commit.
struct Pending {
    renewals: mpsc::Receiver<renewals::PendingRenewal>,
    confirmation_rounds: renewals::from_memory::RoundRequests,
    registrations: mpsc::Receiver<registrations::PendingRegistration>,
}

/// Forms, joins or rejoins the cluster in a task of its own; the receiver hears of a failure for
/// good.
fn spawn_bootstrap(
    config: &ManagerConfig,
    node: &Arc<ManagerNode>,
    tasks_stopped: watch::Receiver<bool>,
) -> oneshot::Receiver<BootstrapError> {
    let (fatal_tx, fatal_rx) = oneshot::channel::<BootstrapError>();
    let node = node.clone();
    let join = config.join.clone();
    let rejoin = config.rejoin;
    if rejoin {
        // Before serving: no Raft message reaches it as its old self (bootstrap::rejoin).
        node.hold_raft_while_rejoining();
    }
    tokio::spawn(async move {
        let outcome = match join {
            Some(url) if rejoin => bootstrap::rejoin(&node, &url).await,
            Some(url) => bootstrap::join(&node, &url).await,
            None => bootstrap::form_or_await(&node, tasks_stopped).await,
        };
        match outcome {
            Ok(()) | Err(BootstrapError::Stopped) => {}
            Err(error) => {
                tracing::error!(%error, "cannot become part of the cluster");
                let _ = fatal_tx.send(error);
            }
        }
    });
    fatal_rx
}

/// Runs the replica until `shutdown` resolves (then stops gracefully) or a fatal start-up error.
pub async fn run(
    config: ManagerConfig,
    metrics: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (listener, health_listener) = bind_listeners(&config).await?;
    let found = DataDirAtStart::look(&config.data_dir);
    let (replica, fatal_rx) = Replica::start(&config, metrics).await?;
    // The storage is this start's own: a refusal before the node became part of a cluster may
    // take it away again.
    let storage_is_new = replica.node.identity.is_fresh();
    let router = replica.router(&config);
    // One budget for both listeners, with half the descriptors reserved for storage and peers
    // (P13.6): a stranger holding connections to every port cannot take those.
    let budget = ConnectionBudget::for_this_process(config.max_connections_per_address);
    if let Some(listener) = health_listener {
        serve_health(listener, &replica, &budget);
    }

    let (stop_reason_tx, mut stop_reason_rx) = oneshot::channel::<StopReason>();
    let stop_serving = {
        let stopping = why_stop(
            replica.node.clone(),
            replica.disk_space.clone(),
            shutdown,
            fatal_rx,
        );
        async move {
            let _ = stop_reason_tx.send(stopping.await);
        }
    };
    let serving = leasehold_api::serve::serve(
        listener,
        router,
        config.tls.as_ref().map(TlsConfig::server_config),
        ListenerLimits::within(&budget),
        stop_serving,
    );
    tokio::pin!(serving);
    // The reason arrives before serving ends (serving ends only after `stop_serving` did), except
    // when serving fails on its own; `try_recv` then finds what was sent, if anything.
    let (served, reason) = tokio::select! {
        biased;
        reason = &mut stop_reason_rx => {
            let reason = reason.unwrap_or(StopReason::Requested);
            // After a fatal stop the drain is bounded: nothing in flight can be committed here
            // any more, and the others elect only once this process is gone.
            let served = match &reason {
                StopReason::StorageFailed(_) => {
                    tokio::time::timeout(fatal::DRAIN_AFTER_FATAL, &mut serving)
                        .await
                        .unwrap_or(Ok(()))
                }
                _ => serving.await,
            };
            (served, reason)
        }
        served = &mut serving => (served, stop_reason_rx.try_recv().unwrap_or(StopReason::Requested)),
    };
    replica.stop_tasks();
    finish(replica, served, reason, storage_is_new, found).await
}

/// After serving ended for `reason`: the Raft core shut down and the storage flushed, unless the
/// storage failed; a refused start's data directory put back as it was found.
async fn finish(
    replica: Replica,
    served: std::io::Result<()>,
    reason: StopReason,
    storage_is_new: bool,
    found: DataDirAtStart,
) -> Result<(), ServerError> {
    if let StopReason::StorageFailed(cause) = reason {
        // No Raft shutdown and no flush: the storage cannot take them, and a failed fsync is
        // never retried.
        return Err(ServerError::StorageFailed { cause });
    }
    served.map_err(ServerError::Serve)?;
    let node = replica.node.clone();
    replica.shut_down().await?;
    tracing::info!("stopped");
    match reason {
        StopReason::Bootstrap(error) => {
            if storage_is_new && error.cluster_knows_nothing_of_this_storage() {
                // A refused start leaves the data directory as it found it, so that the start
                // the refusal names (`--join URL --rejoin`, `--join`) finds it new.
                await_last_handle(node).await;
                found.put_back();
            }
            Err(error.into())
        }
        StopReason::Requested | StopReason::StorageFailed(_) => Ok(()),
    }
}

/// The API listener and, with `--health-listen`, the plaintext health listener. P8.1: bound
/// before Raft starts, so peers and clients reach this node as soon as it takes part; nothing is
/// served until the router is.
async fn bind_listeners(
    config: &ManagerConfig,
) -> Result<(TcpListener, Option<TcpListener>), ServerError> {
    let bind = |listen: SocketAddr| async move {
        leasehold_api::serve::bind(listen)
            .await
            .map_err(|source| ServerError::Bind { listen, source })
    };
    let listener = bind(config.listen).await?;
    tracing::info!(node_id = config.id, listen = %config.listen, advertise = %config.advertise, "listening");
    if config.insecure_plaintext {
        tracing::warn!(listen = %config.listen, "serving plaintext on a non-loopback address (--insecure): anyone who can reach it can act as any role (PROTOCOL P13.5)");
    }
    let health_listener = match config.health_listen {
        Some(address) => {
            let listener = bind(address).await?;
            tracing::info!(health_listen = %address, "serving /livez and /readyz in plaintext");
            Some(listener)
        }
        None => None,
    };
    Ok((listener, health_listener))
}

/// Serves `/livez` and `/readyz` on the health listener until the replica's tasks stop.
fn serve_health(listener: TcpListener, replica: &Replica, budget: &ConnectionBudget) {
    let mut stopped = replica.stop_tasks.subscribe();
    let serving = leasehold_api::serve::serve(
        listener,
        replica.health_router(),
        None,
        ListenerLimits::health(budget),
        async move {
            let _ = stopped.wait_for(|stopped| *stopped).await;
        },
    );
    tokio::spawn(async move {
        if let Err(error) = serving.await {
            tracing::error!(%error, "the health listener failed: probes of it will fail");
        }
    });
}

/// Why the replica stops serving, once it must: `shutdown` (after stepping down), a refused
/// start, or its storage failing or full (P8.3), after which it lingers so that callers see it
/// refuse.
async fn why_stop(
    node: Arc<ManagerNode>,
    disk_space: DiskSpace,
    shutdown: impl Future<Output = ()>,
    fatal_rx: oneshot::Receiver<BootstrapError>,
) -> StopReason {
    tokio::select! {
        _ = shutdown => {
            tracing::info!("shutdown requested");
            step_down(&node).await;
            StopReason::Requested
        }
        Ok(error) = fatal_rx => StopReason::Bootstrap(error),
        cause = fatal::raft_core_stopped(&node.leadership.raft) => {
            tracing::error!(%cause, "this replica stops serving and exits (P8.3)");
            tokio::time::sleep(fatal::LINGER_AFTER_FATAL).await;
            StopReason::StorageFailed(cause)
        }
        free_bytes = disk_space.exhausted() => {
            let cause = fatal::disk_full(free_bytes);
            tracing::error!(%cause, "this replica stops serving and exits (P8.3)");
            // Its core still runs: no more writes, no more heartbeats, no candidacy, so
            // nothing it says keeps the others' leader lease alive.
            node.leadership.begin_step_down();
            node.leadership.raft.runtime_config().heartbeat(false);
            node.leadership.raft.runtime_config().elect(false);
            tokio::time::sleep(fatal::LINGER_AFTER_FATAL).await;
            StopReason::StorageFailed(cause)
        }
    }
}

/// Bound on waiting for the node's tasks to let go of it (and of its storage) after a refused
/// start.
const RELEASE_PATIENCE: Duration = Duration::from_secs(2);

/// Waits (bounded) until `node` is the last handle on the node, then drops it: the storage is
/// closed once the stopped tasks have ended.
async fn await_last_handle(node: Arc<ManagerNode>) {
    let deadline = tokio::time::Instant::now() + RELEASE_PATIENCE;
    while Arc::strong_count(&node) > 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the data directory held before this start: whether it existed, and its entries.
#[derive(Debug)]
struct DataDirAtStart {
    path: std::path::PathBuf,
    /// `None`: it did not exist. `Some(entries)`: it did, holding those (a mount point's
    /// `lost+found`, say).
    entries: Option<std::collections::BTreeSet<std::ffi::OsString>>,
    /// A prepared backup waited in it (`leaseholdctl snapshot restore`): the start imports it
    /// and renames it, so the directory cannot be put back as it was.
    held_a_backup: bool,
    /// It could not be read: nothing is put back.
    unreadable: bool,
}

impl DataDirAtStart {
    fn look(path: &std::path::Path) -> Self {
        let mut found = Self {
            path: path.to_path_buf(),
            entries: None,
            held_a_backup: false,
            unreadable: false,
        };
        match std::fs::read_dir(path) {
            Ok(listing) => {
                let mut entries = std::collections::BTreeSet::new();
                for entry in listing {
                    match entry {
                        Ok(entry) => {
                            entries.insert(entry.file_name());
                        }
                        Err(_) => found.unreadable = true,
                    }
                }
                found.held_a_backup = entries.iter().any(|name| {
                    name == leasehold_api::backup::RESTORE_FILE_NAME
                        || name == leasehold_api::backup::RESTORED_FILE_NAME
                });
                found.entries = Some(entries);
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => found.unreadable = true,
        }
        found
    }

    /// Removes what this start created in the directory (the directory itself when it did not
    /// exist), and nothing it found there. Logged; a failure is logged, not raised: the start
    /// was refused already, for its own reason.
    fn put_back(&self) {
        if self.unreadable || self.held_a_backup {
            return;
        }
        let outcome = match &self.entries {
            None => std::fs::remove_dir_all(&self.path),
            Some(found) => std::fs::read_dir(&self.path).and_then(|listing| {
                for entry in listing {
                    let entry = entry?;
                    if found.contains(&entry.file_name()) {
                        continue;
                    }
                    if entry.file_type()?.is_dir() {
                        std::fs::remove_dir_all(entry.path())?;
                    } else {
                        std::fs::remove_file(entry.path())?;
                    }
                }
                Ok(())
            }),
        };
        match outcome {
            Ok(()) => tracing::info!(
                data_dir = %self.path.display(),
                "the start was refused: the data directory is left as it was found"
            ),
            Err(error) => tracing::warn!(
                data_dir = %self.path.display(),
                %error,
                "the start was refused, and what it created in the data directory could not \
                 all be removed: remove the directory's contents before starting again"
            ),
        }
    }
}

/// P8.2: stops taking writes and, when leading, stops heartbeats so the followers elect a new
/// leader while this node still answers (forwarding to the new leader once it is known).
async fn step_down(node: &ManagerNode) {
    node.leadership.begin_step_down();
    let metrics = node.leadership.metrics_snapshot();
    let other_voters = metrics
        .membership_config
        .membership()
        .voter_ids()
        .any(|id| id != node.leadership.id);
    if metrics.state != ServerState::Leader || !other_voters {
        return;
    }
    tracing::info!(
        term = metrics.current_term,
        "handing leadership over before stopping"
    );
    node.leadership.raft.runtime_config().heartbeat(false);
    let handover_bound =
        Duration::from_millis(2 * node.settings.timings.election_timeout_max_ms + 1_000);
    let me = node.leadership.id;
    match node
        .leadership
        .raft
        .wait(Some(handover_bound))
        .metrics(
            |m| m.current_leader.is_some_and(|leader| leader != me),
            "another leader",
        )
        .await
    {
        Ok(metrics) => {
            tracing::info!(new_leader = ?metrics.current_leader, "leadership handed over")
        }
        Err(error) => {
            tracing::warn!(%error, "no new leader before stopping; followers will elect one")
        }
    }
}

#[cfg(test)]
mod tests {
    // A test module: a failed expectation is a failed test.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::DataDirAtStart;
    use std::path::Path;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// What a start creates, as sled does: files and a directory.
    fn create_storage(dir: &Path) {
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        std::fs::write(dir.join("blobs").join("1"), b"x").unwrap();
        std::fs::write(dir.join("conf"), b"x").unwrap();
        std::fs::write(dir.join("db"), b"x").unwrap();
    }

    /// A refused start puts the data directory back as it found it: gone when it was absent,
    /// emptied of what the start made when it held something (a volume's `lost+found`), and
    /// untouched when a prepared backup was in it (the start renamed that).
    #[test]
    fn a_refused_start_leaves_the_data_directory_as_it_found_it() {
        let root = tempfile::tempdir().unwrap();

        let absent = root.path().join("absent");
        let found = DataDirAtStart::look(&absent);
        create_storage(&absent);
        found.put_back();
        assert!(!absent.exists());

        let emptied = root.path().join("emptied");
        std::fs::create_dir_all(&emptied).unwrap();
        let found = DataDirAtStart::look(&emptied);
        create_storage(&emptied);
        found.put_back();
        assert_eq!(names(&emptied), Vec::<String>::new());

        let volume = root.path().join("volume");
        std::fs::create_dir_all(volume.join("lost+found")).unwrap();
        std::fs::write(volume.join("lost+found").join("kept"), b"x").unwrap();
        let found = DataDirAtStart::look(&volume);
        create_storage(&volume);
        found.put_back();
        assert_eq!(names(&volume), ["lost+found"]);
        assert_eq!(names(&volume.join("lost+found")), ["kept"]);

        let restoring = root.path().join("restoring");
        std::fs::create_dir_all(&restoring).unwrap();
        std::fs::write(
            restoring.join(leasehold_api::backup::RESTORE_FILE_NAME),
            b"x",
        )
        .unwrap();
        let found = DataDirAtStart::look(&restoring);
        create_storage(&restoring);
        found.put_back();
        assert_eq!(names(&restoring).len(), 4, "nothing removed");
    }
}
