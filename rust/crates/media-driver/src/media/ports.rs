//! Free UDP ports for tests and demos, each handed out at most once per process.
//!
//! The one allocator of the repository: the Rust unit and integration tests call it, and Python's
//! `affinity.testing.free_udp_port` is this function through the binding. Rust and Python test
//! processes run at once on one host and share its ports, so they must pick them the same way.
//!
//! The ports lie outside the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), where
//! the kernel never puts a socket bound to port 0 (a driver's sending socket, a test's
//! attacker or probe): a port handed out here cannot be taken by one of those between the
//! probe and the bind of whatever uses it. A cursor through the range hands every port out
//! once; it starts at a point picked from the pid, which keeps processes running at once (a
//! test and the children it starts) apart. A forked child (same memory, new pid) starts a
//! cursor of its own.

use std::fmt;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::{Mutex, PoisonError};

/// Where the kernel says which ports it picks for a bind to port 0.
pub const EPHEMERAL_RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
/// Linux's default ephemeral range, used when [`EPHEMERAL_RANGE_FILE`] cannot be read.
pub const DEFAULT_EPHEMERAL_RANGE: (u16, u16) = (32768, 60999);
/// The lowest port handed out (registered services cluster below).
pub const LOWEST_PORT: u16 = 10000;
/// The fewest ports a range outside the ephemeral one must hold to be used.
pub const MIN_RANGE: u16 = 1024;

/// 2^64 / golden ratio: multiplying by it (wrapping) spreads consecutive pids evenly.
const FIBONACCI_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// Every port of the range was handed out or found in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortsExhausted {
    /// The first port of the range.
    pub first: u16,
    /// The ports in the range.
    pub count: usize,
}

impl fmt::Display for PortsExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "all {} UDP ports from {} were handed out or in use", self.count, self.first)
    }
}

impl std::error::Error for PortsExhausted {}

/// The ports of one process: `count` from `first`, handed out from `start` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortCursor {
    pid: u32,
    first: u16,
    count: usize,
    start: usize,
    taken: usize,
}

impl PortCursor {
    /// The cursor of process `pid` over `count` ports from `first`.
    pub fn new(pid: u32, first: u16, count: usize) -> Self {
        PortCursor { pid, first, count, start: start_for(pid, count), taken: 0 }
    }

    /// The next port `unused` accepts; each port of the range is tried once.
    pub fn next_port(&mut self, mut unused: impl FnMut(u16) -> bool) -> Result<u16, PortsExhausted> {
        while self.taken < self.count {
            // `(start + taken) % count < count <= 65536 - first`: the sum stays a port number.
            let port = self.first + ((self.start + self.taken) % self.count) as u16;
            self.taken += 1;
            if unused(port) {
                return Ok(port);
            }
        }
        Err(PortsExhausted { first: self.first, count: self.count })
    }
}

/// This process's cursor (replaced when the pid changes: a forked child).
static CURSOR: Mutex<Option<PortCursor>> = Mutex::new(None);

/// A UDP port that no socket of this host used (on any address) when probed and that this
/// process has not handed out before.
pub fn free_udp_port() -> Result<u16, PortsExhausted> {
    let pid = std::process::id();
    // The cursor is plain data, whole after any panic: a poisoned lock is taken back.
    let mut cursor = CURSOR.lock().unwrap_or_else(PoisonError::into_inner);
    let cursor = match &mut *cursor {
        Some(cursor) if cursor.pid == pid => cursor,
        slot => {
            let (first, count) = candidates(ephemeral_range());
            slot.insert(PortCursor::new(pid, first, count))
        }
    };
    // Bound on the wildcard address, the probe fails if any socket holds the port.
    cursor.next_port(|port| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok())
}

/// Where `pid` starts in a range of `count` ports: the pid's Fibonacci hash scaled to the range,
/// so pids close together, as a test's and its children's are, start far apart.
pub fn start_for(pid: u32, count: usize) -> usize {
    let fraction = u64::from(pid).wrapping_mul(FIBONACCI_MULTIPLIER);
    ((u128::from(fraction) * count as u128) >> 64) as usize
}

/// The kernel's ephemeral range, or [`DEFAULT_EPHEMERAL_RANGE`] when it cannot be read.
pub fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string(EPHEMERAL_RANGE_FILE)
        .ok()
        .and_then(|text| {
            let mut ports = text.split_whitespace().map(|port| port.parse::<u16>().ok());
            Some((ports.next()??, ports.next()??))
        })
        .unwrap_or(DEFAULT_EPHEMERAL_RANGE)
}

/// The first port and the number of ports to hand out given the ephemeral range `(low, high)`:
/// below it, else above it, else (it covers nearly everything) the ephemeral range itself.
pub fn candidates((low, high): (u16, u16)) -> (u16, usize) {
    if low >= LOWEST_PORT + MIN_RANGE {
        (LOWEST_PORT, usize::from(low - LOWEST_PORT))
    } else if high <= u16::MAX - MIN_RANGE {
        (high + 1, usize::from(u16::MAX - high))
    } else {
        (low, usize::from(high.saturating_sub(low)) + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_lie_outside_the_ephemeral_range() {
        assert_eq!(candidates((32768, 60999)), (10000, 22768));
        assert_eq!(candidates((1024, 60999)), (61000, 4536));
        assert_eq!(candidates((1024, 65535)), (1024, 64512));
        let (low, high) = ephemeral_range();
        for _ in 0..50 {
            let port = free_udp_port().unwrap();
            assert!(!(low..=high).contains(&port) || candidates((low, high)).0 == low, "{port}");
        }
    }

    #[test]
    fn a_cursor_hands_each_port_out_once_skips_held_ones_and_then_names_the_range() {
        let mut cursor = PortCursor::new(4242, 20000, 3);
        let mut seen = vec![cursor.next_port(|_| true).unwrap()];
        let held = cursor.next_port(|_| false);
        assert_eq!(held, Err(PortsExhausted { first: 20000, count: 3 }));
        let mut cursor = PortCursor::new(4242, 20000, 3);
        seen.push(cursor.next_port(|_| true).unwrap());
        seen.push(cursor.next_port(|_| true).unwrap());
        seen.push(cursor.next_port(|_| true).unwrap());
        assert_eq!(seen[0], seen[1], "the same pid starts at the same port");
        let mut distinct = seen[1..].to_vec();
        distinct.sort_unstable();
        assert_eq!(distinct, [20000, 20001, 20002]);
        let error = cursor.next_port(|_| true).unwrap_err();
        assert_eq!(error.to_string(), "all 3 UDP ports from 20000 were handed out or in use");
    }

    #[test]
    fn neighbouring_pids_start_far_apart() {
        let count = 22_768;
        let starts: Vec<usize> = (5000..5100).map(|pid| start_for(pid, count)).collect();
        for (i, a) in starts.iter().enumerate() {
            for b in &starts[i + 1..] {
                let gap = a.abs_diff(*b);
                assert!(gap.min(count - gap) > 100, "{a} {b}");
            }
        }
    }
}
