//! The narrow handles a replica's tasks, services and handlers share, and the small tasks behind
//! them: who leads and the read barrier (`leadership`), the one way a command is committed
//! (`proposer`), the leader clock (`clock`), what commits tell the leader loop (`signals`), the
//! registration batcher (`registrations`), each member's release (`member_versions`), the loads
//! executors report (`load_reports`), the routing table's runs (`routing`), the metrics catalog
//! (`metrics`), the disk-space alarm and the fatal-failure exit (`disk_space`, `fatal`), and scans
//! run off the async workers (`cpu_bound`).

pub mod clock;
pub mod cpu_bound;
pub mod disk_space;
pub mod fatal;
pub mod leadership;
pub mod load_reports;
pub mod member_versions;
pub mod metrics;
pub mod proposer;
pub mod registrations;
pub mod routing;
pub mod signals;
