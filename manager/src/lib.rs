//! The Leasehold manager replica.
//!
//! | module | role |
//! |---|---|
//! | `lease` | the pure lease state machine and planner (PROTOCOL §2–§6): no I/O, no clock |
//! | `leader` | the leader loop: reap, handoffs, rebalance, deliveries; the term, its time rules and its delivery rounds are pure cores |
//! | `raft` | openraft types, the state machine hosted on `leasehold-raft-store`, HTTP transport, storage identity, the dead-leader decision |
//! | `clock` | the leader's clock (P2.3) |
//! | `leadership` | who leads as this node sees it, the read barrier, with the Raft handle, proposer and clock |
//! | `node` | one replica: the handles its tasks and handlers are cut from |
//! | `proposer` | the one way a command is committed; the narrow handle writing tasks share |
//! | `bootstrap` | forming, rejoining and joining a cluster (§10) |
//! | `renewals` | group commit of renewals into one Raft entry |
//! | `load_summary` | what the reported loads amount to: utilisation, imbalance, hot shards (pure) |
//! | `load_reports` | the loads executors report in renewals (P15.1), soft state for the leader |
//! | `signals` | what committed outcomes tell the leader loop (pushes owed, replan, renewals seen) |
//! | `observe` | background duties that follow Raft metrics |
//! | `dead_leader` | the task that stands for election once a dead leader's lease is over (`raft::failover` decides) |
//! | `fatal` | a stopped Raft core (a storage failure) ends the process (P8.3) |
//! | `disk_space` | the free-space alarm: writes that grow the state wait for space (P8.3) |
//! | `routing` | the routing table as the applied state has it, and its runs kept between answers |
//! | `safe_to_stop` | whether stopping an executor or a manager now is safe, and why (pure, P17.4) |
//! | `cluster_version` | probing each member's release and schemas, and raising the cluster version (P14.3) |
//! | `member_versions` | what each member said of its release and schemas, and when the version may rise (pure) |
//! | `metrics` | the protocol metrics: from committed outcomes, from the applied state, at the event |
//! | `cpu_bound` | running scans and plans over the whole state inside async tasks |
//! | `http` | the axum server: public API, Raft RPC, health, metrics |
//! | `restore` | importing a backup prepared by `leaseholdctl snapshot restore` on first start |
//! | `server` | start-up and graceful stop (§8) |
//! | `config` | flags and their validation |

pub mod bootstrap;
pub mod clock;
pub mod cluster_version;
pub mod config;
pub mod cpu_bound;
pub mod dead_leader;
pub mod disk_space;
pub mod fatal;
pub mod http;
pub mod leader;
pub mod leadership;
pub mod lease;
pub mod load_reports;
pub mod load_summary;
pub mod member_versions;
pub mod metrics;
pub mod node;
pub mod observe;
pub mod proposer;
pub mod raft;
pub mod registrations;
pub mod renewals;
pub mod restore;
pub mod routing;
pub mod safe_to_stop;
pub mod server;
pub mod service;
pub mod signals;
