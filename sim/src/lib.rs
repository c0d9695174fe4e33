//! Deterministic simulation of Leasehold on its real protocol cores.
//!
//! One seed draws a fleet, its capacities and loads, a network and a list of faults
//! ([`scenario`]); the [`world`] runs managers, the leader and executors on one simulated clock,
//! driving the production cores; [`checks`] holds the invariants checked after every event;
//! [`run`] is one seed's run with its liveness probes and its run on steady loads; [`script`]
//! drives the same world by a hand-written schedule instead of a seed. `handoff_model` is an
//! exhaustive model check of the handoff, `confirmation_model` of leadership confirmation,
//! `promotion_model` of the promotion order among replicas, `reshard_model` of a split and a
//! merge racing a handoff.
//!
//! | module | role |
//! |---|---|
//! | `scenario` | everything a seed draws, namespaces beside `default` included (P18.1) |
//! | `world` | the simulated cluster and its event loop |
//! | `loads` | what the shards really carry, and what each executor reports of it (P15.1) |
//! | `checks` | I1, I2 and the state's consistency, after every event and commit, per `(namespace, shard)` and per key across layouts (§20); placement (§15) on every plan, commit and renewal of the leader, per namespace; plans and admissions kept in their namespace (P18.1) |
//! | `run` | one seed: chaos, every reshard ended and undone (§20), settle, with loads off the I4 / P18.3 zone / P18.1 namespace-loss / P5.4 / I5 probes, then the leader on steady loads (P15.2-P15.4) |
//! | `script` | a hand-written schedule of steps on the same world, checks and convergence |
//! | `handoff_model` | exhaustive model check of P5.2 and P3.2 with stateright on a tiny fleet |
//! | `confirmation_model` | exhaustive model check of P6.5 (leadership confirmed by a quorum before answering from memory) on its core |
//! | `promotion_model` | exhaustive model check of the promotion order (P19.3, P19.4) on the state machine and planners |
//! | `reshard_model` | exhaustive model check of a split and a merge racing a handoff (P20.2, P20.3): I1 and I2 per key on the state machine, planner and executor assignment core |

pub mod checks;
pub mod confirmation_model;
pub mod handoff_model;
pub mod loads;
pub mod model_check;
pub mod promotion_model;
pub mod reshard_model;
pub mod run;
pub mod scenario;
pub mod script;
pub mod world;

pub use run::{simulate, RunReport};
