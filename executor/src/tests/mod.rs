//! Shell tests: the lease loop, the lapse watcher and the graceful stop against a scripted fake
//! manager, under a paused clock (so timings are exact), plus the HTTP surface and start-up
//! over real sockets. The end-to-end run with the demo workload is the binary's
//! (`main/end_to_end.rs`), since the workload is.

mod http;
mod lease_loop;
mod sidecar;
mod startup;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_api::client::ClientError;
use leasehold_api::problem::{ErrorCode, Problem};
use leasehold_api::wire::{
    Credential, ExecutorView, Grant, RegisterRequest, RenewRequest, ShardEpoch, CAPACITY_SCHEMA,
};
use tokio::time::Instant;

use crate::admission::{AdmitError, Permit};
use crate::manager::ManagerApi;
use crate::shared::Shared;

/// One call the fake saw, with the (paused) instant it arrived.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    Register {
        incarnation: String,
        capacity: Option<u32>,
        at: Instant,
    },
    Renew {
        executor_id: String,
        request: RenewRequest,
        at: Instant,
        /// The bound the lease loop put on each attempt (P7.3).
        attempt_timeout: Option<Duration>,
    },
    Deregister {
        executor_id: String,
        at: Instant,
    },
    /// The executor's own drain (P17.2).
    Drain {
        executor_id: String,
        at: Instant,
    },
}

/// How the fake answers the next calls.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    pub lease_ttl_ms: u64,
    pub shard_count: u32,
    /// The set the fake records for the executor, and the revision it was read at.
    pub shards: Vec<ShardEpoch>,
    /// The executor's secondaries (PROTOCOL P19.1), in every grant.
    pub secondaries: Vec<ShardEpoch>,
    pub revision: u64,
    /// Renewals fail with a transport error while set.
    pub fail_renewals: bool,
    /// Return transit of a grant: the ttl is computed on arrival, the reply lands this later.
    pub reply_delay: Duration,
    /// The next renewal answers `unknown_executor` (the executor was reaped).
    pub forget_executor: bool,
    /// The first register is applied but its reply never arrives.
    pub lose_first_register_reply: bool,
    /// Deregister never answers.
    pub hang_deregister: bool,
    /// Register answers `400 invalid_request`.
    pub refuse_register: bool,
    /// The cluster version the fake's replies state (P14.3).
    pub cluster_version: u32,
    /// How many other live executors the fake lists after the executor's own drain (P17.2);
    /// `None`: the drain is refused `403`, as managers before P17.2 refuse it under TLS.
    pub drain_takers: Option<usize>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            lease_ttl_ms: 30_000,
            shard_count: 16,
            shards: Vec::new(),
            secondaries: Vec::new(),
            revision: 1,
            fail_renewals: false,
            reply_delay: Duration::ZERO,
            forget_executor: false,
            lose_first_register_reply: false,
            hang_deregister: false,
            refuse_register: false,
            cluster_version: CAPACITY_SCHEMA,
            drain_takers: Some(0),
        }
    }
}

#[derive(Debug, Default)]
struct FakeState {
    script: Script,
    calls: Vec<Call>,
    /// incarnation → executor id (P4.4: idempotent per incarnation).
    executors: BTreeMap<String, String>,
    /// executor id → the credential it registered with; renew and deregister must present it,
    /// as the real manager checks (P13.4).
    credentials: BTreeMap<String, Credential>,
    next_id: u64,
    registers_seen: u32,
    /// What `admit` said for every held shard when deregister arrived (P3.7 ordering).
    admission_at_deregister: Vec<Result<Permit, AdmitError>>,
}

/// A scripted manager for the lease loop.
#[derive(Debug, Default)]
pub(crate) struct FakeManager {
    state: Mutex<FakeState>,
    /// The executor under test, to observe its admission when deregister arrives.
    probe: Mutex<Option<Arc<Shared>>>,
}

impl FakeManager {
    pub(crate) fn new(script: Script) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(FakeState {
                script,
                next_id: 1,
                ..FakeState::default()
            }),
            probe: Mutex::new(None),
        })
    }

    pub(crate) fn observe(&self, shared: &Arc<Shared>) {
        *self.probe.lock().unwrap() = Some(Arc::clone(shared));
    }

    pub(crate) fn script(&self, change: impl FnOnce(&mut Script)) {
        change(&mut self.state.lock().unwrap().script);
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    pub(crate) fn renew_instants(&self) -> Vec<Instant> {
        self.calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::Renew { at, .. } => Some(at),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn admission_at_deregister(&self) -> Vec<Result<Permit, AdmitError>> {
        self.state.lock().unwrap().admission_at_deregister.clone()
    }

    fn grant(script: &Script, executor_id: &str) -> Grant {
        Grant {
            generation: 0,
            shard_runs: None,
            executor_id: executor_id.to_owned(),
            lease_ttl_ms: script.lease_ttl_ms,
            revision: script.revision,
            shard_count: script.shard_count,
            shards: script.shards.clone(),
            unchanged: false,
            secondaries: script.secondaries.clone(),
        }
    }
}

fn problem(code: ErrorCode) -> ClientError {
    ClientError::Problem(Problem::new(code, "scripted"))
}

impl ManagerApi for FakeManager {
    fn register(
        &self,
        request: &RegisterRequest,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send {
        let incarnation = request.incarnation.clone();
        let credential = request.credential.clone();
        let capacity = request.capacity;
        async move {
            let (reply, delay, lose) = {
                let mut state = self.state.lock().unwrap();
                state.calls.push(Call::Register {
                    incarnation: incarnation.clone(),
                    capacity,
                    at: Instant::now(),
                });
                state.registers_seen += 1;
                if state.script.refuse_register {
                    return Err(problem(ErrorCode::InvalidRequest));
                }
                let next_id = state.next_id;
                let executor_id = state
                    .executors
                    .entry(incarnation)
                    .or_insert_with(|| format!("ex-{next_id}"))
                    .clone();
                if executor_id == format!("ex-{next_id}") {
                    state.next_id += 1;
                }
                if let Some(credential) = credential {
                    state.credentials.insert(executor_id.clone(), credential);
                }
                let lose = state.script.lose_first_register_reply && state.registers_seen == 1;
                (
                    Self::grant(&state.script, &executor_id),
                    state.script.reply_delay,
                    lose,
                )
            };
            if lose {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(delay).await;
            Ok(reply)
        }
    }

    fn renew(
        &self,
        executor_id: &str,
        credential: &Credential,
        request: &RenewRequest,
        attempt_timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Grant, ClientError>> + Send {
        let executor_id = executor_id.to_owned();
        let credential = credential.clone();
        let request = request.clone();
        async move {
            let (reply, delay) = {
                let mut state = self.state.lock().unwrap();
                if state
                    .credentials
                    .get(&executor_id)
                    .is_some_and(|stored| *stored != credential)
                {
                    return Err(problem(ErrorCode::Unauthenticated));
                }
                state.calls.push(Call::Renew {
                    executor_id: executor_id.clone(),
                    request,
                    at: Instant::now(),
                    attempt_timeout,
                });
                if state.script.forget_executor {
                    state.script.forget_executor = false;
                    state.executors.retain(|_, id| *id != executor_id);
                    return Err(problem(ErrorCode::UnknownExecutor));
                }
                if !state.executors.values().any(|id| *id == executor_id) {
                    return Err(problem(ErrorCode::UnknownExecutor));
                }
                if state.script.fail_renewals {
                    return Err(ClientError::Transport("scripted partition".into()));
                }
                (
                    Self::grant(&state.script, &executor_id),
                    state.script.reply_delay,
                )
            };
            tokio::time::sleep(delay).await;
            Ok(reply)
        }
    }

    fn deregister(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<(), ClientError>> + Send {
        let executor_id = executor_id.to_owned();
        let credential = credential.clone();
        async move {
            let stored = self
                .state
                .lock()
                .unwrap()
                .credentials
                .get(&executor_id)
                .cloned();
            if stored.is_some_and(|stored| stored != credential) {
                return Err(problem(ErrorCode::Unauthenticated));
            }
            let probe = self.probe.lock().unwrap().clone();
            let hang = {
                let mut state = self.state.lock().unwrap();
                state.calls.push(Call::Deregister {
                    executor_id: executor_id.clone(),
                    at: Instant::now(),
                });
                if let Some(shared) = probe {
                    let shards: Vec<u32> = state.script.shards.iter().map(|s| s.shard).collect();
                    state.admission_at_deregister = shards
                        .into_iter()
                        .map(|shard| shared.admit(shard))
                        .collect();
                }
                state.executors.retain(|_, id| *id != executor_id);
                state.script.hang_deregister
            };
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }

    fn drain_self(
        &self,
        executor_id: &str,
        credential: &Credential,
    ) -> impl Future<Output = Result<Vec<ExecutorView>, ClientError>> + Send {
        let executor_id = executor_id.to_owned();
        let credential = credential.clone();
        async move {
            let mut state = self.state.lock().unwrap();
            if state
                .credentials
                .get(&executor_id)
                .is_some_and(|stored| *stored != credential)
            {
                return Err(problem(ErrorCode::Unauthenticated));
            }
            state.calls.push(Call::Drain {
                executor_id: executor_id.clone(),
                at: Instant::now(),
            });
            let Some(takers) = state.script.drain_takers else {
                return Err(problem(ErrorCode::Forbidden));
            };
            let listed = |id: String, draining: bool| ExecutorView {
                namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
                executor_id: id.clone(),
                incarnation: id,
                name: None,
                address: "http://127.0.0.1:9".into(),
                lease_remaining_ms: state.script.lease_ttl_ms,
                registered_revision: 1,
                shards: Vec::new(),
                draining,
                capacity: 1,
                load: None,
                utilisation: None,
                app_version: None,
                labels: Default::default(),
            };
            let mut executors = vec![listed(executor_id, true)];
            executors.extend((0..takers).map(|n| listed(format!("peer-{n}"), false)));
            Ok(executors)
        }
    }

    fn cluster_version(&self) -> u32 {
        self.state.lock().unwrap().script.cluster_version
    }
}

pub(crate) fn set(pairs: &[(u32, u64)]) -> Vec<ShardEpoch> {
    pairs
        .iter()
        .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
        .collect()
}
