//! Pod IP allocation on loopback: `127.x.y.z` counting upwards from the configured base,
//! skipping `.0` and `.255` last octets and every address in use. Addresses are released when
//! the Pod object is gone, so the address of a live (or finished but not deleted) Pod is never
//! handed out twice. Each address in use is also held as an exclusive `flock` on a file in a
//! host-wide lock directory, so agents sharing the machine (parallel test processes, a second
//! `steward dev`) never hand out the same address; a dead agent's locks vanish with it.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

#[derive(Debug)]
pub struct Ipam {
    base: u32,
    next: u32,
    lock_dir: PathBuf,
    in_use: BTreeMap<u32, Option<Flock<File>>>,
}

const LIMIT: u32 = 0x7fff_fffe; // 127.255.255.254

/// The default host-wide lock directory.
pub fn default_lock_dir() -> PathBuf {
    std::env::temp_dir().join("steward-node-pod-ips")
}

impl Ipam {
    pub fn new(base: Ipv4Addr, lock_dir: &Path) -> Self {
        let base = u32::from(base);
        let _ = std::fs::create_dir_all(lock_dir);
        Self {
            base,
            next: base,
            lock_dir: lock_dir.to_path_buf(),
            in_use: BTreeMap::new(),
        }
    }

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

    /// Reserves `ip` (a Pod that already had it) when it is free and inside the pool.
    pub fn claim(&mut self, ip: Ipv4Addr) -> bool {
        let n = u32::from(ip);
        n >= self.base && n <= LIMIT && self.take(n)
    }

    /// The next free address, or `None` when the pool is exhausted.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let span = LIMIT.saturating_sub(self.base) + 1;
        for _ in 0..span {
            let n = self.next;
            self.next = if n >= LIMIT { self.base } else { n + 1 };
            if self.take(n) {
                return Some(Ipv4Addr::from(n));
            }
        }
        None
    }

    /// Frees `ip` (dropping its lock).
    pub fn release(&mut self, ip: Ipv4Addr) {
        self.in_use.remove(&u32::from(ip));
    }
}

fn usable(n: u32) -> bool {
    let last = n & 0xff;
    last != 0 && last != 255
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_upwards_and_never_reuses_live_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let mut ipam = Ipam::new(Ipv4Addr::new(127, 1, 0, 254), dir.path());
        assert_eq!(ipam.allocate(), Some(Ipv4Addr::new(127, 1, 0, 254)));
        assert_eq!(ipam.allocate(), Some(Ipv4Addr::new(127, 1, 1, 1)));
        ipam.release(Ipv4Addr::new(127, 1, 0, 254));
        assert_eq!(ipam.allocate(), Some(Ipv4Addr::new(127, 1, 1, 2)));
        assert!(ipam.claim(Ipv4Addr::new(127, 1, 0, 254)));
        assert!(!ipam.claim(Ipv4Addr::new(127, 1, 1, 1)));
        assert!(!ipam.claim(Ipv4Addr::new(127, 0, 0, 9)));
    }

    #[test]
    fn wraps_and_skips_addresses_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let mut ipam = Ipam::new(Ipv4Addr::new(127, 255, 255, 253), dir.path());
        assert_eq!(ipam.allocate(), Some(Ipv4Addr::new(127, 255, 255, 253)));
        assert_eq!(ipam.allocate(), Some(Ipv4Addr::new(127, 255, 255, 254)));
        assert_eq!(ipam.allocate(), None);
        ipam.release(Ipv4Addr::new(127, 255, 255, 253));
        assert_eq!(ipam.allocate(), Some(Ipv4Addr::new(127, 255, 255, 253)));
    }

    #[test]
    fn agents_sharing_a_host_never_share_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let base = Ipv4Addr::new(127, 1, 0, 1);
        let mut a = Ipam::new(base, dir.path());
        let mut b = Ipam::new(base, dir.path());
        assert_eq!(a.allocate(), Some(base));
        assert_eq!(b.allocate(), Some(Ipv4Addr::new(127, 1, 0, 2)));
        assert!(!b.claim(base));
        a.release(base);
        assert!(b.claim(base));
    }
}
