//! The Leasehold executor library: registers with the manager leader, holds a lease and a set of
//! shards with epochs, and fences itself when the lease lapses (PROTOCOL §3, §4, §8).
