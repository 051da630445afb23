//! Where Pod addresses live. Two ranges, chosen by the configured first Pod IP:
//!
//! - **loopback** (`127.0.0.0/8`, the default): every address is local without any set-up.
//!   The embedded API server accepts them; a real one does not — its EndpointSlice and Endpoints
//!   controllers refuse loopback endpoint addresses ("may not be in the loopback range"), so
//!   Services of Pods on such a Node get no endpoints there and Warning Events repeat.
//! - **routed on `lo`** (`198.18.0.0/15`, RFC 2544's benchmarking range: not routed on the
//!   internet and rarely on a LAN, and an address Kubernetes accepts for an endpoint): the agent
//!   makes the whole range local with one route, `local 198.18.0.0/15 dev lo src 127.0.0.1` (the
//!   "AnyIP" route; it needs `CAP_NET_ADMIN`, which the agent has as root). A Pod binds its own
//!   address as on loopback, and connections between Pods keep `127.0.0.1` as their source, as
//!   between loopback addresses. The route is machine-wide and stays: every agent sharing the
//!   machine uses the same one (`replace` is idempotent), and nothing else uses the range.

use std::net::Ipv4Addr;
use std::process::Command;

use crate::error::NodeError;

/// The routed range: its first address and prefix length.
pub const ROUTED: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);

/// The kind of range a first Pod IP belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    Loopback,
    Routed,
}

impl Range {
    /// The range of `base`, or why it cannot be a first Pod IP.
    pub fn of(base: Ipv4Addr) -> Result<Self, NodeError> {
        if base.is_loopback() {
            return Ok(Range::Loopback);
        }
        if in_routed(base) {
            return Ok(Range::Routed);
        }
        Err(NodeError::Config(format!(
            "pod IP base {base} is neither in 127.0.0.0/8 (loopback) nor in {}/{} (routed on lo)",
            ROUTED.0, ROUTED.1
        )))
    }

    /// The last address the pool may hand out.
    pub fn last(self) -> Ipv4Addr {
        match self {
            Range::Loopback => Ipv4Addr::new(127, 255, 255, 254),
            Range::Routed => {
                let size = 1u32 << (32 - ROUTED.1);
                Ipv4Addr::from(u32::from(ROUTED.0) + size - 2)
            }
        }
    }
}

fn in_routed(ip: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - ROUTED.1);
    u32::from(ip) & mask == u32::from(ROUTED.0)
}

/// The `ip` arguments that make the routed range local.
pub fn route_args() -> Vec<String> {
    [
        "-4",
        "route",
        "replace",
        "local",
        &format!("{}/{}", ROUTED.0, ROUTED.1),
        "dev",
        "lo",
        "src",
        "127.0.0.1",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Makes `base`'s range usable: nothing for loopback, the route for the routed range (with
/// iproute2's `ip`). Fails naming the command and its answer.
pub fn prepare(base: Ipv4Addr) -> Result<Range, NodeError> {
    let range = Range::of(base)?;
    if range == Range::Routed {
        let args = route_args();
        let out = Command::new("ip")
            .args(&args)
            .output()
            .map_err(|e| NodeError::Config(format!("running `ip {}`: {e}", args.join(" "))))?;
        if !out.status.success() {
            return Err(NodeError::Config(format!(
                "`ip {}` failed (the routed Pod range needs CAP_NET_ADMIN; a pod IP base in \
                 127.0.0.0/8 needs nothing): {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_their_last_addresses() {
        assert_eq!(
            Range::of(Ipv4Addr::new(127, 1, 0, 1)).unwrap(),
            Range::Loopback
        );
        assert_eq!(
            Range::of(Ipv4Addr::new(198, 19, 4, 1)).unwrap(),
            Range::Routed
        );
        let refused = Range::of(Ipv4Addr::new(10, 0, 0, 1))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("198.18.0.0/15"), "{refused}");
        assert_eq!(Range::Routed.last(), Ipv4Addr::new(198, 19, 255, 254));
        assert_eq!(Range::Loopback.last(), Ipv4Addr::new(127, 255, 255, 254));
        assert_eq!(
            route_args().join(" "),
            "-4 route replace local 198.18.0.0/15 dev lo src 127.0.0.1"
        );
    }
}
