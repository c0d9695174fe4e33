//! The pure cores of renewals: no tokio, no clock read, no I/O. Their shells (`renewals` and
//! `renewals::from_memory`) and the simulator step them.

pub mod confirmation;
pub mod memory;
pub mod window;
