//! The Leasehold manager replica. Each folder is one part of it; `docs/ARCHITECTURE.md`'s map
//! names every folder and file, and a test holds the map to the tree.
//!
//! | module | role |
//! |---|---|
//! | `server` | the process: flags, start-up and graceful stop (§8), restore, the tasks that follow Raft |
//! | `http` | the axum server: routes, layers (roles, admission, forwarding) and thin handlers |
//! | `service` | what the handlers call: executors' lifecycle, operator actions, reads, members and forming a cluster (§10), safe-to-stop |
//! | `leader` | the leader loop: its pure cores in `leader/core/`, the tasks that step them beside |
//! | `node` | one replica: what its tasks, services and router are cut from |
//! | `renewals` | renewals: group commit into one Raft entry, and answers from the leader's memory (P6.5–P6.8); pure cores in `renewals/core/` |
//! | `handles` | the narrow handles everything above shares: who leads, the proposer, the leader clock, signals, loads, metrics, the disk and fatal guards |
//! | `raft` | openraft types, the state machine on `leasehold-raft-store`, HTTP transport, storage identity, the dead-leader decision |
//! | `lease` | the pure lease state machine, its planner and its schemas (PROTOCOL §2–§6, §14, §15): no I/O, no clock |

pub mod handles;
pub mod http;
pub mod leader;
pub mod lease;
pub mod node;
pub mod raft;
pub mod renewals;
pub mod server;
pub mod service;
