//! The Leasehold manager replica.
//!
//! This crate will hold the pure lease state machine (PROTOCOL §2–§6), the openraft node that
//! hosts it on `leasehold-raft-store`, the leader loop and the HTTP server. Its dependencies on
//! the wire types (`leasehold-api`) and the storage layer (`leasehold-raft-store`) are declared
//! here so the workspace builds them together from the start.
