//! `leasehold-example-kv`: a small sharded key-value service built on the Leasehold executor
//! library, showing how to use a shard's epoch as a fencing token end to end
//! (docs/FENCING.md walks through it).
//!
//! Each process embeds the executor library ([`leasehold_executor::Executor`]): it registers
//! with the managers, holds a lease and a set of shards with epochs, and serves `PUT`/`GET
//! /kv/{key}` on the executor's listener for the shards it holds. Each shard's data is one
//! SQLite file in a directory every process shares (standing in for shared storage), and every
//! write is conditional on the shard's epoch in the same transaction as the write.
//!
//! Layout, one noun per file:
//! - [`store`]: the shard files and the epoch rule (raise, conditional write, fenced read).
//!   Synchronous, no tokio.
//! - [`service`]: the HTTP routes and the three gates a request passes (admission, the raise on
//!   arrival, the epoch rule), the raise-on-arrival task, the counters, the reads a secondary
//!   serves.
//! - [`copies`]: the warm copy of each shard held as a secondary (PROTOCOL §19), kept current by
//!   the store's change positions, and the readiness it says once complete.
//! - [`wire`]: the JSON bodies both sides share, and the refusal reasons.
//! - [`client`]: [`client::KvClient`], `put`/`get` through the routing client
//!   ([`leasehold_api::routing`]), which sends each key straight to its owner, or a read to a
//!   secondary ([`client::KvClient::get_from`]).
//! - [`history`]: a checker over what clients were told (per-key linearizability, and no
//!   acknowledged write overwritten by a stale owner), used by the tests.
//!
//! The binary (`main.rs`, `leasehold-kv`) serves with the executor's flags plus `--store-dir`,
//! and has `put` and `get` subcommands that use the client.

pub mod client;
pub mod copies;
pub mod history;
pub mod service;
pub mod store;
pub mod wire;

pub use client::{KvClient, KvError};
pub use copies::CopyConfig;
pub use service::{KvService, Ownership, WriteDelay};
pub use store::{ShardStore, StoreError};
