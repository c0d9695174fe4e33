//! The Leasehold executor library: registers with the manager leader, holds a lease and a set
//! of shards with epochs, admits work only while the lease is live, and fences itself when it
//! lapses (PROTOCOL §3, §4, §5.2, §8, §9).
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
//! executor.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Layout: pure cores inside thin tokio shells.
//! - [`lease`]: the executor's copy of its lease, anchored at the request's send instant
//!   (P3.2), and the renewal schedule and backoff (P3.5). Pure.
//! - [`assignment`]: the held set and the revision order of deliveries; revokes raise the
//!   applied revision (P4.1). Pure.
//! - [`admission`]: both combined into the admission state machine; outputs admission
//!   start/stop events (P3.6, P4.3, P5.2). Pure.
//! - [`admission_log`]: the JSON-lines admission log on CLOCK_MONOTONIC (§9).
//! - `runtime`: the shell: lease loop, lapse watcher, start-up (P8.1), graceful stop (P3.7),
//!   [`Executor`] and [`ExecutorHandle`].
//! - [`server`]: the push endpoints, health and status (§9).
//! - [`workload`]: the binary's demo `GET /v1/work`.
//! - [`metrics`]: Prometheus counters and gauges, and the binary's `GET /metrics`.
//! - [`openapi`]: the executor's OpenAPI document, `GET /v1/openapi.json`.
//!
//! Assumption (P5.2): the executor's and manager's clocks advance at rates that differ by far
//! less than the lease; anchoring removes every delay term but not rate error.

pub mod admission;
pub mod admission_log;
pub mod assignment;
pub mod config;
pub mod lease;
mod manager;
pub mod metrics;
pub mod openapi;
mod runtime;
pub mod server;
pub mod workload;

#[cfg(test)]
mod tests;

pub use admission::{AdmissionReason, AdmissionState, AdmitError, Assignment, Permit};
pub use config::ExecutorConfig;
pub use manager::{GRANT_CALL_PATIENCE, MAX_KEY_BYTES};
pub use runtime::{
    Executor, ExecutorHandle, ExecutorStatus, RunState, ShardEvent, StartError,
    EVENT_CHANNEL_CAPACITY,
};
