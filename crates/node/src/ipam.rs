//! Pod IP allocation (on loopback or the routed range, `podnet`): counting upwards from the
//! configured base to the range's last address,
//! skipping `.0` and `.255` last octets and every address in use. An address in use is a
//! [`Lease`] and returns to the pool when its last holder drops it: `pods::addresses` holds it
//! while the Pod object exists, the pod's worker while its processes run, so the address of a
//! live, finished or terminating Pod is never handed out twice before the object is gone. Each
//! address in use is also held as an exclusive `flock` on a file in a host-wide lock directory,
//! so agents sharing the machine (parallel test processes, a second `steward dev`) never hand
//! out the same address; a dead agent's locks vanish with it.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::fcntl::{Flock, FlockArg};

/// The pool of pod addresses; cloning shares it.
#[derive(Clone, Debug)]
pub struct Ipam {
    pool: Arc<Mutex<Pool>>,
}

#[derive(Debug)]
struct Pool {
    base: u32,
    limit: u32,
    next: u32,
    lock_dir: PathBuf,
    in_use: BTreeMap<u32, Option<Flock<File>>>,
    /// Set when the node is powered off (tests of node loss): its addresses stay taken, host
    /// wide, until the agent is dropped — a lost machine's Pods keep their addresses, which no
    /// other node may hand out while their Pod objects still name them.
    frozen: bool,
}

/// An address taken from the pool; it goes back (and its host-wide lock is dropped) when the
/// lease is dropped. Whoever must keep the address in use holds a clone of an `Arc<Lease>`.
#[derive(Debug)]
pub struct Lease {
    ip: Ipv4Addr,
    pool: Arc<Mutex<Pool>>,
}

impl Lease {
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut pool) = self.pool.lock()
            && !pool.frozen
        {
            pool.in_use.remove(&u32::from(self.ip));
        }
    }
}

/// The default host-wide lock directory.
pub fn default_lock_dir() -> PathBuf {
    std::env::temp_dir().join("steward-node-pod-ips")
}

impl Ipam {
    /// A pool from `base` to `last` (inclusive).
    pub fn new(base: Ipv4Addr, last: Ipv4Addr, lock_dir: &Path) -> Self {
        let base = u32::from(base);
        let _ = std::fs::create_dir_all(lock_dir);
        Self {
            pool: Arc::new(Mutex::new(Pool {
                base,
                limit: u32::from(last),
                next: base,
                lock_dir: lock_dir.to_path_buf(),
                in_use: BTreeMap::new(),
                frozen: false,
            })),
        }
    }

    /// Keeps every address now in use taken until the pool itself goes (the agent is dropped),
    /// whatever leases are dropped meanwhile: a powered-off node's addresses.
    pub fn freeze(&self) {
        if let Ok(mut pool) = self.pool.lock() {
            pool.frozen = true;
        }
    }

    fn lease(&self, n: u32) -> Lease {
        Lease {
            ip: Ipv4Addr::from(n),
            pool: self.pool.clone(),
        }
    }

    /// Reserves `ip` (a Pod that already had it) when it is free and inside the pool.
    pub fn claim(&self, ip: Ipv4Addr) -> Option<Lease> {
        let n = u32::from(ip);
        let mut pool = self.pool.lock().ok()?;
        (n >= pool.base && n <= pool.limit && pool.take(n)).then(|| self.lease(n))
    }

    /// The next free address, or `None` when the pool is exhausted.
    pub fn allocate(&self) -> Option<Lease> {
        let mut pool = self.pool.lock().ok()?;
        let span = pool.limit.saturating_sub(pool.base) + 1;
        for _ in 0..span {
            let n = pool.next;
            pool.next = if n >= pool.limit { pool.base } else { n + 1 };
            if pool.take(n) {
                return Some(self.lease(n));
            }
        }
        None
    }
}

impl Pool {
    /// Takes the host-wide lock of `n`: `Ok(Some)` locked, `Ok(None)` no lock directory
    /// (allocation proceeds unguarded), `Err` another agent holds it.
    fn lock(&self, n: u32) -> Result<Option<Flock<File>>, ()> {
        let path = self.lock_dir.join(Ipv4Addr::from(n).to_string());
        let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        else {
            return Ok(None);
        };
        Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map(Some)
            .map_err(|_| ())
    }

    fn take(&mut self, n: u32) -> bool {
        if !usable(n) || self.in_use.contains_key(&n) {
            return false;
        }
        match self.lock(n) {
            Ok(lock) => {
                self.in_use.insert(n, lock);
                true
            }
            Err(()) => false,
        }
    }
}

fn usable(n: u32) -> bool {
    let last = n & 0xff;
    last != 0 && last != 255
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAST: Ipv4Addr = Ipv4Addr::new(127, 255, 255, 254);

    fn ip(a: u8, b: u8, c: u8, d: u8) -> Ipv4Addr {
        Ipv4Addr::new(a, b, c, d)
    }

    /// A powered-off node keeps its addresses host-wide until its agent goes, so no other
    /// node hands one out while a Pod on the lost Node still names it.
    #[test]
    fn a_frozen_pool_keeps_its_addresses_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let lost = Ipam::new(ip(127, 1, 0, 1), LAST, dir.path());
        let other = Ipam::new(ip(127, 1, 0, 1), LAST, dir.path());
        let lease = lost.allocate().unwrap();
        let taken = lease.ip();
        lost.freeze();
        drop(lease);
        assert_ne!(other.allocate().unwrap().ip(), taken, "still taken");
        assert!(other.claim(taken).is_none());
        drop(lost);
        assert!(other.claim(taken).is_some(), "free once the agent is gone");
    }

    #[test]
    fn allocates_upwards_and_never_reuses_live_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(ip(127, 1, 0, 254), LAST, dir.path());
        let first = ipam.allocate().unwrap();
        assert_eq!(first.ip(), ip(127, 1, 0, 254));
        let second = ipam.allocate().unwrap();
        assert_eq!(second.ip(), ip(127, 1, 1, 1));
        drop(first);
        assert_eq!(ipam.allocate().unwrap().ip(), ip(127, 1, 1, 2));
        assert!(ipam.claim(ip(127, 1, 0, 254)).is_some());
        assert!(ipam.claim(ip(127, 1, 1, 1)).is_none());
        assert!(ipam.claim(ip(127, 0, 0, 9)).is_none());
    }

    #[test]
    fn wraps_and_skips_addresses_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(ip(127, 255, 255, 253), LAST, dir.path());
        let a = ipam.allocate().unwrap();
        let b = ipam.allocate().unwrap();
        assert_eq!(
            (a.ip(), b.ip()),
            (ip(127, 255, 255, 253), ip(127, 255, 255, 254))
        );
        assert!(ipam.allocate().is_none());
        drop(a);
        assert_eq!(ipam.allocate().unwrap().ip(), ip(127, 255, 255, 253));
    }

    #[test]
    fn a_shared_lease_frees_its_address_only_when_the_last_holder_drops_it() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(ip(127, 255, 255, 253), LAST, dir.path());
        let object = Arc::new(ipam.allocate().unwrap());
        let worker = object.clone();
        drop(worker);
        assert!(
            ipam.claim(object.ip()).is_none(),
            "still held by the other holder"
        );
        let other = ipam.allocate().unwrap();
        assert!(
            ipam.allocate().is_none(),
            "the wrap-around skips the held address"
        );
        drop(object);
        assert_eq!(ipam.allocate().unwrap().ip(), ip(127, 255, 255, 253));
        drop(other);
    }

    #[test]
    fn agents_sharing_a_host_never_share_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let base = ip(127, 1, 0, 1);
        let a = Ipam::new(base, LAST, dir.path());
        let b = Ipam::new(base, LAST, dir.path());
        let held = a.allocate().unwrap();
        assert_eq!(held.ip(), base);
        assert_eq!(b.allocate().unwrap().ip(), ip(127, 1, 0, 2));
        assert!(b.claim(base).is_none());
        drop(held);
        assert!(b.claim(base).is_some());
    }
}
