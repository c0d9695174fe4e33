//! The Leasehold manager replica. Each folder is one part of it; `docs/ARCHITECTURE.md`'s map
//! names every folder and file, and a test holds the map to the tree.
//!
//! | module | role |
//! |---|---|
//! | `lease` | the pure lease state machine, its planner and its schemas (PROTOCOL §2–§6, §14): no I/O, no clock |
//! | `leader` | the leader loop: its pure cores in `leader/core/` (time rules, the term, delivery rounds, placement soft state, warm handoffs, configuration writes), the tokio tasks that step them beside |
//! | `renewals` | renewals: group commit into one Raft entry, and answers from the leader's memory (P6.5–P6.8); pure cores in `renewals/core/` |
//! | `service` | what the HTTP handlers call: executors' lifecycle, operator actions, reads, members, safe-to-stop, the registration batcher |
//! | `http` | the axum server: routes, layers (roles, admission, forwarding) and thin handlers |
//! | `node` | one replica's shared handles: the node, who leads, the proposer, the leader clock, the leader signals, member versions, loads, routing runs |
//! | `raft` | openraft types, the state machine on `leasehold-raft-store`, HTTP transport, storage identity, the dead-leader decision and its task |
//! | `server` | the process: flags, start-up and graceful stop (§8), forming and joining (§10), restore, metrics, the disk and fatal-failure guards |

pub mod http;
pub mod leader;
pub mod lease;
pub mod node;
pub mod raft;
pub mod renewals;
pub mod server;
pub mod service;
