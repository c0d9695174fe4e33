//! The Leasehold executor library: registers with the manager leader, holds a lease and a set
//! of shards with epochs, admits work only while the lease is live, and fences itself when it
//! lapses (PROTOCOL §3, §4, §5.2, §8, §9).
//!
//! Depend on it with `default-features = false`: the default `bin` feature is the
//! `leasehold-executor` binary's (its flags and log setup), and without it the library compiles
//! no CLI crates (no clap, no tracing subscriber).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold_executor::{Executor, ExecutorConfig};
//!
//! let config = ExecutorConfig::new(vec!["http://127.0.0.1:7001".into()], "127.0.0.1:0");
//! let executor = Executor::start(config).await?;
//! match executor.admit_key(b"order-17") {
//!     Ok(permit) => { /* run the work, fenced by permit.epoch */ }
//!     Err(not_admitted) => { /* 503 (fenced) or route elsewhere (not the owner) */ }
//! }
//! // A namespace with replicas (PROTOCOL §19): a read a warm secondary may serve too.
//! use leasehold_executor::RoleWanted;
//! if let Ok(permit) = executor.admit_key_as(b"order-17", RoleWanted::Any) {
//!     /* permit.role says which; secondary work never writes under permit.epoch */
//! }
//! executor.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Layout: pure cores inside thin tokio shells, one noun per file.
//! - [`lease`]: the executor's copy of its lease, anchored at the request's send instant
//!   (P3.2), and the renewal schedule and backoff (P3.5). Pure.
//! - [`assignment`]: the held set and the revision order of deliveries; revokes raise the
//!   applied revision (P4.1). Pure.
//! - [`admission`]: both combined into the admission state machine; outputs admission
//!   start/stop events (P3.6, P4.3, P5.2). Pure.
//! - [`admission_log`]: the JSON-lines admission log on CLOCK_MONOTONIC (§9).
//! - [`load_meter`]: [`LoadMeter`], what an embedder records its work per shard into, and the
//!   pure arithmetic that turns it into the loads renewals report (P15.1).
//! - [`config`]: [`ExecutorConfig`], what an embedder configures.
//! - `manager`: the calls to the manager, behind a seam the shell tests fake.
//! - `members`: the cluster's member set a TLS listener checks pushing managers against
//!   (P13.3), refreshed from the managers at most once a second.
//! - `status`: the public values a running executor reports: [`ExecutorStatus`],
//!   [`ShardEvent`], [`RunState`].
//! - `shared`: the shared state: the admission core and the log under one std mutex, and the
//!   channels that publish its changes.
//! - `shutdown`: the cancellation signal the tasks select on.
//! - [`lease_calls`]: the lease loop's calls (register or renew, what is recorded as a request
//!   leaves, what its answer does) as a pure core the simulator steps too. Pure.
//! - `self_drain`: how a graceful stop first drains the executor, with its own credential, so
//!   each shard is served until its handoff completes (P17.2). Pure.
//! - `lease_loop`: the tokio shell that steps it (calls, logs, counts, sleeps), the graceful
//!   stop (P17.2, P3.7) and the lapse watcher (P3.6).
//! - [`server`]: the HTTP handlers: push endpoints, health and status (§9).
//! - [`openapi`]: the library's OpenAPI document and its handler, `GET /v1/openapi.json`.
//! - `routes`: the one router: every route above, an embedder's, and the request plumbing.
//! - [`metrics`]: Prometheus counters and gauges, and the mountable `GET /metrics`.
//! - `handle`: [`ExecutorHandle`], what an embedder holds; owns the tasks until shutdown.
//! - [`owner`]: the `421` naming a shard's owner, for routes that admit only held shards.
//! - [`sidecar`]: the executor as the sidecar of a service in any language (§16): the local API
//!   on `--local-listen` and the revoke and stop rule through the service (P16.2).
//! - `startup`: [`Executor`]`::start*` (bind, serve, self-probe (P8.1), then the lease loop)
//!   and [`StartError`].
//!
//! The `leasehold-executor` binary (`main.rs`, and `main/` for its own modules) adds the demo
//! `GET /v1/work` workload and `GET /metrics`; neither is part of this library's surface.
//!
//! Assumption (P5.2): the executor's and manager's clocks advance at rates that differ by far
//! less than the lease; anchoring removes every delay term but not rate error.

pub mod admission;
pub mod admission_log;
#[cfg(feature = "bin")]
pub mod args;
pub mod assignment;
pub mod config;
mod handle;
pub mod hooks;
pub mod lease;
pub mod lease_calls;
mod lease_loop;
pub mod load_meter;
mod manager;
mod members;
pub mod metrics;
pub mod openapi;
pub mod owner;
mod routes;
mod self_drain;
pub mod server;
mod shared;
mod shutdown;
pub mod sidecar;
mod startup;
mod status;

#[cfg(test)]
mod tests;

pub use admission::{
    AdmissionReason, AdmissionState, AdmitError, Assignment, Permit, RoleWanted, UnknownRole,
};
#[cfg(feature = "bin")]
pub use args::ExecutorArgs;
pub use assignment::{Layout, NotSecondary, Secondary};
pub use config::ExecutorConfig;
pub use handle::ExecutorHandle;
pub use hooks::{DelayHooks, HandoffHooks, HookFuture, Hooks};
pub use leasehold_api::wire::Role;
pub use leasehold_api::MAX_KEY_BYTES;
pub use load_meter::{LoadMeter, LoadMeterError};
pub use manager::GRANT_CALL_PATIENCE;
pub use shared::EVENT_CHANNEL_CAPACITY;
pub use startup::{Executor, StartError};
pub use status::{ExecutorStatus, RunState, ShardEvent};
