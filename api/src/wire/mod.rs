//! JSON bodies of the HTTP surface (PROTOCOL §9).
//!
//! Request types (bodies a peer sends *to* us) reject unknown fields so a misspelt field is a
//! `400 invalid_request` instead of a silently ignored claim (I6). Reply types accept unknown
//! fields so a newer server can add information without breaking older clients.
//!
//! Beside the types stand the checks every side applies alike, one definition each: the text
//! and size limits, the base-URL rule, shard lists against a shard count, capacities and loads,
//! application versions, labels and namespace names.
//! A check that needs what only the receiver knows (the cluster's shard count) takes it as an
//! argument.

mod app_version;
mod cluster;
mod executor;
mod labels;
mod limits;
mod local;
mod namespaces;
mod operator;
mod replicas;
mod reshard;
mod shards;
mod views;

pub use app_version::*;
pub use cluster::*;
pub use executor::*;
pub use labels::*;
pub use limits::*;
pub use local::*;
pub use namespaces::*;
pub use operator::*;
pub use replicas::*;
pub use reshard::*;
pub use shards::*;
pub use views::*;

#[cfg(test)]
mod tests;
