//! [`ExecutorHandle`]: what an embedder holds once [`crate::Executor::start`] returned. It reads
//! the shared state (admission, assignment, status) and owns the executor's tasks until the
//! graceful stop (P3.7).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::client::ClientError;
use leasehold_api::wire::ExecutorHealth;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::admission::{AdmitError, Assignment, Permit, RoleWanted};
use crate::assignment::NotSecondary;
use crate::load_meter::LoadMeter;
use crate::manager::ManagerLink;
use crate::shared::Shared;
use crate::status::{ExecutorStatus, RunState, ShardEvent};

/// Bound on draining the push server after deregistration (in-flight pushes and revokes).
const SERVER_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Slack on top of the shutdown grace before a stuck lease task is abandoned.
const SHUTDOWN_MARGIN: Duration = Duration::from_millis(500);

/// Background tasks owned by the handle until shutdown.
#[derive(Debug)]
pub(crate) struct Tasks {
    /// The lease loop, ending with the graceful stop.
    pub(crate) lease: JoinHandle<RunState>,
    pub(crate) lapse_watcher: JoinHandle<()>,
    /// The push listener; stopped last, after the deregistration.
    pub(crate) server: JoinHandle<()>,
    /// As a sidecar: the local API (PROTOCOL §16), stopped with the push listener.
    pub(crate) sidecar: Option<JoinHandle<()>>,
}

/// Everything about the running executor that is not the shared state.
#[derive(Debug)]
struct Control {
    local_addr: SocketAddr,
    shutdown_grace: Duration,
    /// Stops the lease loop (which then stops admission and deregisters) and the watcher.
    shutdown_tx: watch::Sender<bool>,
    /// Stops the push server, after deregistration.
    server_stop_tx: watch::Sender<bool>,
    /// Taken by the first shutdown.
    tasks: tokio::sync::Mutex<Option<Tasks>>,
    run_state_tx: watch::Sender<RunState>,
    /// For embedders' own manager calls.
    manager: ManagerLink,
}

/// A running executor. Cheap to clone; every clone controls the same executor.
///
/// Dropping the handles does not stop the executor (its tasks run until the runtime ends);
/// call [`ExecutorHandle::shutdown`] for the graceful stop of P3.7.
#[derive(Debug, Clone)]
pub struct ExecutorHandle {
    shared: Arc<Shared>,
    control: Arc<Control>,
}

impl ExecutorHandle {
    /// A handle for an executor whose tasks are not started yet ([`ExecutorHandle::hold`] takes
    /// them). `shutdown_tx` and `server_stop_tx` fire the signals those tasks select on.
    pub(crate) fn new(
        shared: Arc<Shared>,
        manager: ManagerLink,
        local_addr: SocketAddr,
        shutdown_grace: Duration,
        shutdown_tx: watch::Sender<bool>,
        server_stop_tx: watch::Sender<bool>,
    ) -> Self {
        let (run_state_tx, _) = watch::channel(RunState::Running);
        Self {
            shared,
            control: Arc::new(Control {
                local_addr,
                shutdown_grace,
                shutdown_tx,
                server_stop_tx,
                tasks: tokio::sync::Mutex::new(None),
                run_state_tx,
                manager,
            }),
        }
    }

    /// Takes the started tasks, for [`ExecutorHandle::shutdown`] to stop.
    pub(crate) async fn hold(&self, tasks: Tasks) {
        *self.control.tasks.lock().await = Some(tasks);
    }

    /// Reports a failed lease loop at once (a stop is reported by `shutdown`, once the listener
    /// has drained too).
    pub(crate) fn report_failure(&self, state: &RunState) {
        if matches!(state, RunState::Failed(_)) {
            self.control.run_state_tx.send_replace(state.clone());
        }
    }

    /// The executor's view, republished on every change: held shards with epochs, secondaries
    /// and their readiness, revision, admitting or fenced. A lapse shows here at the expiry (the lapse watcher); for the
    /// decision itself use [`ExecutorHandle::admit`], which is exact.
    pub fn assignment(&self) -> watch::Receiver<Assignment> {
        self.shared.subscribe_assignment()
    }

    /// May primary work for `shard` start now? A [`Permit`] with its epoch, or `NotReady` when
    /// fenced (P3.6: answer `503 sharding_not_ready`), or `NotOwner`, also when the shard is held
    /// only as a secondary (P19.1). A permit is never withdrawn: running work is not
    /// interrupted.
    pub fn admit(&self, shard: u32) -> Result<Permit, AdmitError> {
        self.shared.admit(shard)
    }

    /// [`ExecutorHandle::admit`] for the shard of `key` (`leasehold_api::shard_for_key`).
    pub fn admit_key(&self, key: &[u8]) -> Result<Permit, AdmitError> {
        self.shared.admit_key(key)
    }

    /// May work for `shard` wanting `role` start now (PROTOCOL P19.5)? `RoleWanted::Secondary`
    /// (or `Role::Secondary`) admits only where the shard is held as a secondary,
    /// `RoleWanted::Any` in whichever role it is held; the permit's `role` says which. Every
    /// role is admitted only while the lease is live (P19.1), and a secondary never gets a primary
    /// permit.
    pub fn admit_as(&self, shard: u32, role: impl Into<RoleWanted>) -> Result<Permit, AdmitError> {
        self.shared.admit_as(shard, role.into())
    }

    /// [`ExecutorHandle::admit_as`] for the shard of `key`.
    pub fn admit_key_as(
        &self,
        key: &[u8],
        role: impl Into<RoleWanted>,
    ) -> Result<Permit, AdmitError> {
        self.shared.admit_key_as(key, role.into())
    }

    /// Says that this executor's secondary of `shard`, at the `epoch` its set shows, is (or is
    /// no longer) ready to be promoted (PROTOCOL P19.3): every renewal then lists it among the
    /// ready ones, until the service says otherwise or the secondary is dropped. Ready is
    /// refused ([`NotSecondary`]) unless the shard is held as a secondary at that epoch (see
    /// [`Assignment::secondaries`]); not ready is always taken. Readiness survives a change of
    /// the shard's epoch while it stays a secondary (its primary moved elsewhere), and goes with
    /// the secondary: one placed here again is not ready until said so.
    pub fn set_secondary_ready(
        &self,
        shard: u32,
        epoch: u64,
        ready: bool,
    ) -> Result<(), NotSecondary> {
        self.shared
            .set_secondary_ready(shard, epoch, ready)
            .map(drop)
    }

    /// Admission changes as they happen (bounded: see [`crate::EVENT_CHANNEL_CAPACITY`]).
    pub fn events(&self) -> broadcast::Receiver<ShardEvent> {
        self.shared.subscribe_events()
    }

    /// The meter whose loads this executor's renewals report (PROTOCOL P15.1) when
    /// [`crate::ExecutorConfig::report_loads`] is on: record work per shard, or set a gauge.
    pub fn load_meter(&self) -> LoadMeter {
        self.shared.load_meter().clone()
    }

    /// The executor's own view, as `GET /v1/status` shows it.
    pub fn status(&self) -> ExecutorStatus {
        self.shared.status()
    }

    /// The registration's id and incarnation, once registered.
    pub fn health(&self) -> Option<ExecutorHealth> {
        self.shared.health()
    }

    /// The bound push listener address.
    pub fn local_addr(&self) -> SocketAddr {
        self.control.local_addr
    }

    /// The address managers push to (P8.1).
    pub fn advertised_address(&self) -> &str {
        self.shared.address()
    }

    /// A manager client with the protocol's patience (P7.1), for the embedder's own lookups.
    pub fn manager_client(&self) -> &leasehold_api::Client {
        self.control.manager.client()
    }

    /// The owner of `key` according to the manager (`GET /v1/routing?key=K`), asked with a
    /// short patience.
    pub async fn route_for_key(
        &self,
        key: &str,
    ) -> Result<leasehold_api::wire::KeyRoute, ClientError> {
        self.control.manager.route_for_key(key).await
    }

    /// Resolves when the executor has ended: stopped by [`ExecutorHandle::shutdown`] (once it
    /// completed), or failed on its own (registration hopeless). The binary exits on the latter.
    pub async fn terminated(&self) -> RunState {
        let mut run_state = self.control.run_state_tx.subscribe();
        let result = run_state
            .wait_for(|state| *state != RunState::Running)
            .await
            .map(|state| state.clone());
        result.unwrap_or(RunState::Stopped)
    }

    /// Runs until `stop` resolves (a stop signal, for a binary), then stops gracefully
    /// ([`ExecutorHandle::shutdown`]); or until the executor ends on its own, which is then
    /// shut down too. The final state either way.
    pub async fn run_until(&self, stop: impl std::future::Future<Output = ()>) -> RunState {
        tokio::select! {
            () = stop => {
                tracing::info!("stop signal: stopping admission, then deregistering (P3.7)");
                self.shutdown().await
            }
            state = self.terminated() => {
                self.shutdown().await;
                state
            }
        }
    }

    /// Graceful stop (P3.7): stop admission, deregister within the grace, then close the push
    /// listener. Bounded by the grace plus a small margin; safe to call more than once and from
    /// several clones (later calls wait for the first).
    pub async fn shutdown(&self) -> RunState {
        self.control.shutdown_tx.send_replace(true);
        let tasks = self.control.tasks.lock().await.take();
        let Some(tasks) = tasks else {
            return self.terminated().await;
        };
        let bound = self.control.shutdown_grace + SHUTDOWN_MARGIN;
        let mut lease = tasks.lease;
        let state = match timeout(bound, &mut lease).await {
            Ok(Ok(state)) => state,
            Ok(Err(error)) => RunState::Failed(format!("lease task ended abnormally: {error}")),
            Err(_) => {
                lease.abort();
                // Admission must end even if the task is stuck.
                self.shared.stop_admission();
                RunState::Failed("the graceful stop overran its grace".into())
            }
        };
        let _ = tasks.lapse_watcher.await;
        self.control.server_stop_tx.send_replace(true);
        let mut server = tasks.server;
        if timeout(SERVER_DRAIN_TIMEOUT, &mut server).await.is_err() {
            server.abort();
        }
        if let Some(mut sidecar) = tasks.sidecar {
            // A long poll still open is cut here: the service was already told `stopping`.
            if timeout(SERVER_DRAIN_TIMEOUT, &mut sidecar).await.is_err() {
                sidecar.abort();
            }
        }
        // As a sidecar, the service is told nothing more: what it may still be admitting (it
        // never acknowledged `stopping`, or the stop was cut short) ends when its copy runs out,
        // and is logged so now, before the process exits (P16.2).
        if let Some(service) = self.shared.service() {
            if let Some((shards, copy_ends_at)) = service.end_at_exit() {
                let copy_left_ms = copy_ends_at
                    .saturating_duration_since(tokio::time::Instant::now())
                    .as_millis();
                tracing::warn!(
                    shards,
                    copy_left_ms,
                    "exiting while the service may still admit shards it never acknowledged \
                     dropping, until its copy runs out: their stops are logged at that end (P16.2)"
                );
            }
        }
        let final_state = match state {
            RunState::Running => RunState::Stopped,
            other => other,
        };
        self.control.run_state_tx.send_replace(final_state.clone());
        final_state
    }
}
