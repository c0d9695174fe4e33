//! One process's connection budget, shared by all of its listeners (PROTOCOL P13.6).
//!
//! Every accepted connection holds a descriptor. A stranger who only opens connections and holds
//! them (to the health port, or to the API port without ever starting TLS) must not be able to
//! take the descriptors the process needs for itself: its data directory's files, Raft
//! connections to its peers, pushes and forwards. So:
//! - all listeners of a process draw on one budget, half the descriptor limit at most
//!   ([`connection_bound`]): the other half is reserved for what the process opens itself, and no
//!   accepted connection can take it;
//! - each listener has its own cap within the budget besides (the health listener a small one),
//!   so one port cannot take what another serves;
//! - one source address holds at most [`ConnectionBudget::per_address`] of the budget (IPv6 by
//!   its /64), so one host cannot shut every other caller out. A connection past it is closed as
//!   soon as it is accepted, and counted and logged, never dropped silently.
//!
//! Past the budget or a listener's cap the listener stops accepting, and the kernel's backlog
//! holds the rest until a slot frees.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most connections a process serves at once, whatever the descriptor limit allows: far above
/// what a manager serves (executors keep one connection each per client).
pub const MAX_CONNECTIONS: usize = 16_384;

/// How often a refusal past the per-address cap is logged at most (each is counted).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The connection budget for a process allowed `open_files` descriptors (`RLIMIT_NOFILE`;
/// `None`: unknown or unlimited): half of them, at most [`MAX_CONNECTIONS`], for every listener
/// together. The other half stays for what the process opens itself.
pub fn connection_bound(open_files: Option<u64>) -> usize {
    match open_files {
        Some(limit) => usize::try_from(limit / 2)
            .unwrap_or(usize::MAX)
            .clamp(1, MAX_CONNECTIONS),
        None => MAX_CONNECTIONS,
    }
}

/// The default share of the budget one source address may hold: half, so a single host can
/// never shut out the rest, while a fleet behind one address (a NAT, a load generator) still has
/// room. Operators raise or lower it (`--max-connections-per-address`).
pub fn default_per_address(total: usize) -> usize {
    (total / 2).max(1)
}

/// This process's descriptor limit; `None` when unknown or unlimited.
pub fn open_files_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft != RLIM_INFINITY).then_some(soft)
}

/// The budget every listener of one process shares; clones share it.
#[derive(Debug, Clone)]
pub struct ConnectionBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    total: usize,
    per_address: usize,
    slots: Arc<Semaphore>,
    by_address: Mutex<HashMap<IpAddr, usize>>,
    refused_per_address: AtomicU64,
    last_logged: Mutex<Option<Instant>>,
}

/// A connection refused because its source address holds its share already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverAddressShare;

/// One source address's hold on one slot; released when dropped.
#[derive(Debug)]
pub struct AddressSlot {
    inner: Arc<Inner>,
    key: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut by_address = self.inner.lock_addresses();
        if let Some(held) = by_address.get_mut(&self.key) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                by_address.remove(&self.key);
            }
        }
    }
}

impl ConnectionBudget {
    /// A budget of `total` connections (at least 1), at most `per_address` (at least 1) from one
    /// source address.
    pub fn new(total: usize, per_address: usize) -> Self {
        let total = total.max(1);
        Self {
            inner: Arc::new(Inner {
                total,
                per_address: per_address.clamp(1, total),
                slots: Arc::new(Semaphore::new(total)),
                by_address: Mutex::new(HashMap::new()),
                refused_per_address: AtomicU64::new(0),
                last_logged: Mutex::new(None),
            }),
        }
    }

    /// The budget fitted to this process's descriptor limit ([`connection_bound`]), with
    /// `per_address` or else [`default_per_address`]. Made once per process and handed to each
    /// of its listeners.
    pub fn for_this_process(per_address: Option<usize>) -> Self {
        let open_files = open_files_limit();
        let total = connection_bound(open_files);
        let per_address = per_address.unwrap_or_else(|| default_per_address(total));
        tracing::info!(
            open_files,
            max_connections = total,
            max_connections_per_address = per_address,
            "connection budget fitted to the descriptor limit, shared by every listener (P13.6)"
        );
        Self::new(total, per_address)
    }

    pub fn total(&self) -> usize {
        self.inner.total
    }

    pub fn per_address(&self) -> usize {
        self.inner.per_address
    }

    /// Connections refused so far because their address held its share.
    pub fn refused_per_address(&self) -> u64 {
        self.inner.refused_per_address.load(Ordering::Relaxed)
    }

    /// One slot of the budget, waited for; `None` once the budget is closed (never, in practice).
    pub(crate) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.inner.slots.clone().acquire_owned().await.ok()
    }

    /// Counts a connection from `peer` against its address's share, or refuses it (counted, and
    /// logged at most every [`REFUSAL_LOG_INTERVAL`]).
    pub fn admit(&self, peer: IpAddr) -> Result<AddressSlot, OverAddressShare> {
        let key = source_host(peer);
        {
            let mut by_address = self.inner.lock_addresses();
            let held = by_address.entry(key).or_insert(0);
            if *held < self.inner.per_address {
                *held += 1;
                return Ok(AddressSlot {
                    inner: Arc::clone(&self.inner),
                    key,
                });
            }
        }
        let refused = self
            .inner
            .refused_per_address
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        let mut last = self
            .inner
            .last_logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_INTERVAL) {
            *last = Some(Instant::now());
            tracing::warn!(
                address = %key,
                per_address = self.inner.per_address,
                refused_so_far = refused,
                "a source address holds its share of the connection budget: closing its new \
                 connection (P13.6, --max-connections-per-address)"
            );
        }
        Err(OverAddressShare)
    }
}

impl Inner {
    fn lock_addresses(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // Each critical section is one counter update: a panic cannot leave it half done.
        self.by_address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Who a source address is, for every limit kept per address (this share, the managers'
/// registration buckets): an IPv4 address itself, an IPv6 address by its /64 (one host usually
/// holds a whole /64); an IPv4-mapped IPv6 address as its IPv4 address.
pub fn source_host(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P13.6: the budget leaves half the descriptors to the process, however few it may open.
    #[test]
    fn p13_6_the_budget_follows_the_descriptor_limit() {
        assert_eq!(connection_bound(Some(256)), 128);
        assert_eq!(connection_bound(Some(1_024)), 512);
        assert_eq!(connection_bound(Some(1 << 20)), MAX_CONNECTIONS);
        assert_eq!(connection_bound(Some(1)), 1);
        assert_eq!(connection_bound(None), MAX_CONNECTIONS);
        assert_eq!(default_per_address(512), 256);
        assert_eq!(default_per_address(1), 1);
    }

    /// P13.6: one source address holds at most its share; another address, and the same one
    /// once a connection closes, is admitted.
    #[test]
    fn p13_6_one_address_holds_at_most_its_share() {
        let budget = ConnectionBudget::new(8, 2);
        let stranger: IpAddr = "127.0.0.2".parse().unwrap();
        let first = budget.admit(stranger).unwrap();
        let _second = budget.admit(stranger).unwrap();
        assert_eq!(budget.admit(stranger).unwrap_err(), OverAddressShare);
        assert_eq!(budget.refused_per_address(), 1);
        assert!(budget.admit("127.0.0.1".parse().unwrap()).is_ok());
        drop(first);
        assert!(
            budget.admit(stranger).is_ok(),
            "a closed connection frees its share"
        );
    }

    /// An IPv6 host is its /64; an IPv4-mapped address is its IPv4 address.
    #[test]
    fn p13_6_an_ipv6_host_is_its_slash_64() {
        let budget = ConnectionBudget::new(8, 1);
        let _held = budget.admit("2001:db8::1".parse().unwrap()).unwrap();
        assert!(budget.admit("2001:db8::ffff:2".parse().unwrap()).is_err());
        assert!(budget.admit("2001:db8:0:1::1".parse().unwrap()).is_ok());
        let _v4 = budget.admit("10.0.0.1".parse().unwrap()).unwrap();
        assert!(budget.admit("::ffff:10.0.0.1".parse().unwrap()).is_err());
    }

    /// The budget's slots are shared: what one listener holds, another cannot take.
    #[tokio::test]
    async fn p13_6_listeners_share_one_budget() {
        let budget = ConnectionBudget::new(2, 2);
        let other_listener = budget.clone();
        let _a = budget.slot().await.unwrap();
        let _b = other_listener.slot().await.unwrap();
        let third = tokio::time::timeout(Duration::from_millis(100), budget.slot()).await;
        assert!(third.is_err(), "a third slot past a budget of two");
    }
}
