//! Service ClusterIP allocation from the service CIDR (`ServerConfig::service_cidr`, by default
//! `127.96.0.0/16`, on loopback so a node agent's service proxy can bind the addresses without
//! touching interfaces). Addresses are handed out in order from a persisted cursor, skipping
//! those in use; the set in use is whatever stored Services hold, so deleting a Service releases
//! its address. Requested addresses must lie in the range and be free, with the real server's
//! error wording. IPv4 only.

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use crate::status::Cause;

/// An IPv4 CIDR for Service ClusterIPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCidr {
    base: Ipv4Addr,
    prefix: u8,
}

impl ServiceCidr {
    /// `base/prefix`; host bits of `base` are cleared. The prefix must leave room for at least
    /// two addresses besides the network and broadcast ones (at most /30).
    pub fn new(base: Ipv4Addr, prefix: u8) -> Result<Self, String> {
        if !(1..=30).contains(&prefix) {
            return Err(format!(
                "prefix length /{prefix} must be between /1 and /30"
            ));
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        Ok(Self {
            base: Ipv4Addr::from(u32::from(base) & mask),
            prefix,
        })
    }

    fn size(&self) -> u32 {
        1u32 << (32 - u32::from(self.prefix))
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - u32::from(self.prefix));
        u32::from(ip) & mask == u32::from(self.base)
    }

    fn at(&self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + offset)
    }
}

impl Default for ServiceCidr {
    fn default() -> Self {
        Self {
            base: Ipv4Addr::new(127, 96, 0, 0),
            prefix: 16,
        }
    }
}

impl fmt::Display for ServiceCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

impl FromStr for ServiceCidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (ip, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (a.b.c.d/n)"))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{prefix:?} is not a prefix length"))?;
        Self::new(ip, prefix)
    }
}

/// One allocation request: the range, the cursor (an offset into the range, persisted) and the
/// addresses other Services hold.
pub struct Allocator<'a> {
    pub cidr: ServiceCidr,
    pub next: &'a mut u32,
    pub in_use: HashSet<Ipv4Addr>,
}

impl Allocator<'_> {
    /// The next free address after the cursor (network and broadcast addresses skipped).
    pub fn allocate(&mut self) -> Result<Ipv4Addr, Cause> {
        let usable = self.cidr.size() - 2;
        for i in 0..usable {
            let offset = 1 + (self.next.saturating_sub(1).wrapping_add(i)) % usable;
            let ip = self.cidr.at(offset);
            if !self.in_use.contains(&ip) {
                *self.next = offset % usable + 1;
                self.in_use.insert(ip);
                return Ok(ip);
            }
        }
        Err(Cause {
            reason: "FieldValueInvalid",
            field: "spec.clusterIPs".into(),
            message: "Internal error: failed to allocate a serviceIP: range is full".into(),
        })
    }

    /// Checks a requested address (`spec.clusterIP`).
    pub fn claim(&mut self, requested: &str) -> Result<(), Cause> {
        let Ok(ip) = requested.parse::<Ipv4Addr>() else {
            return Err(Cause {
                reason: "FieldValueInvalid",
                field: "spec.clusterIPs[0]".into(),
                message: format!(
                    "Invalid value: {requested:?}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
                ),
            });
        };
        let failed = |why: String| Cause {
            reason: "FieldValueInvalid",
            field: "spec.clusterIPs".into(),
            message: format!(
                "Invalid value: []string{{\"{requested}\"}}: failed to allocate IP {requested}: {why}"
            ),
        };
        if !self.cidr.contains(ip) {
            // The wording of the ServiceCIDR allocator, the default since Kubernetes 1.33.
            return Err(failed(
                "the provided network does not match the current range".into(),
            ));
        }
        if !self.in_use.insert(ip) {
            return Err(failed("provided IP is already allocated".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_allocates_in_order_skipping_used() {
        let cidr: ServiceCidr = "127.96.3.7/16".parse().unwrap();
        assert_eq!(cidr.to_string(), "127.96.0.0/16");
        assert!("127.96.0.0".parse::<ServiceCidr>().is_err());
        assert!("127.96.0.0/31".parse::<ServiceCidr>().is_err());
        let mut next = 10;
        let mut a = Allocator {
            cidr,
            next: &mut next,
            in_use: [Ipv4Addr::new(127, 96, 0, 11)].into(),
        };
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(127, 96, 0, 10));
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(127, 96, 0, 12));
        assert!(
            a.claim("127.96.0.10")
                .unwrap_err()
                .message
                .ends_with("provided IP is already allocated")
        );
        let outside = a.claim("10.0.0.1").unwrap_err();
        assert_eq!(outside.field, "spec.clusterIPs");
        assert_eq!(
            outside.message,
            "Invalid value: []string{\"10.0.0.1\"}: failed to allocate IP 10.0.0.1: the provided network does not match the current range"
        );
        assert_eq!(a.claim("nope").unwrap_err().field, "spec.clusterIPs[0]");
        a.claim("127.96.9.9").unwrap();
        assert_eq!(next, 13);
    }

    #[test]
    fn wraps_around_and_reports_a_full_range() {
        let cidr: ServiceCidr = "10.0.0.0/30".parse().unwrap();
        let mut next = 2;
        let mut a = Allocator {
            cidr,
            next: &mut next,
            in_use: HashSet::new(),
        };
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(10, 0, 0, 1));
        assert!(a.allocate().is_err());
    }
}
