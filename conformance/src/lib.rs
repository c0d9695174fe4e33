//! The conformance kit's library (PROTOCOL P16.3): what `leasehold-conformance` and the
//! multi-process tests share.
//!
//! - [`admission_log`]: reading admission logs (§9) into admission intervals.
//! - [`checker`]: I1 and I2 over those intervals, every violation reported.
//! - [`template`]: the executor command template and its placeholders.
//! - [`deploy`]: what a rolling deploy did to the shards (B11 and its test).
//! - [`kit`]: one run: the cluster, the executors behind proxies, the script of faults, the check.
//! - [`proxy`]: the HTTP fault proxy: delays (which reorder pushes and revokes), duplicates and
//!   dropped replies between executors and managers.

pub mod admission_log;
pub mod checker;
pub mod deploy;
pub mod kit;
pub mod proxy;
pub mod template;
