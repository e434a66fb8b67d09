//! Free UDP ports for tests, each handed out at most once per process.
//!
//! One definition for the crate's unit tests (`src/lib.rs` includes this file as `test_ports`)
//! and the integration tests (`#[path = "support/ports.rs"]`).
//!
//! The ports lie outside the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), where
//! the kernel never puts a socket bound to port 0 (a driver's sending socket, a test's
//! attacker or probe): a port handed out here cannot be taken by one of those between the
//! probe and the bind of the driver that uses it. A cursor through the range hands every port
//! out once; it starts at a point picked from the pid, which keeps two test processes running
//! at once apart.
#![allow(dead_code)]

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Linux's default ephemeral range, used when `/proc` cannot be read.
const DEFAULT_EPHEMERAL_RANGE: (u16, u16) = (32768, 60999);
/// The lowest port handed out (registered services cluster below).
const LOWEST_PORT: u16 = 10000;
/// The fewest ports a range outside the ephemeral one must hold to be used.
const MIN_RANGE: u16 = 1024;

/// A UDP port that no socket of this host used (on any address) when probed and that this
/// process has not handed out before.
pub fn free_udp_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    static RANGE: OnceLock<(u16, usize, usize)> = OnceLock::new();
    let &(first, count, start) = RANGE.get_or_init(|| {
        let (first, count) = candidates();
        (first, count, start_for(std::process::id(), count))
    });
    loop {
        let taken = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(taken < count, "all {count} test UDP ports from {first} were handed out");
        let port = first + ((start + taken) % count) as u16;
        // Bound on the wildcard address, the probe fails if any socket holds the port.
        if UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok() {
            return port;
        }
    }
}

/// 2^64 / golden ratio: multiplying by it (wrapping) spreads consecutive pids evenly.
const FIBONACCI_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// Where `pid` starts in a range of `count` ports: the pid's Fibonacci hash scaled to the range
/// (as `affinity.testing.free_udp_port`), so pids close together, as a test's and its
/// children's are, start far apart.
fn start_for(pid: u32, count: usize) -> usize {
    let fraction = u64::from(pid).wrapping_mul(FIBONACCI_MULTIPLIER);
    ((u128::from(fraction) * count as u128) >> 64) as usize
}

/// The first port and the number of ports to hand out: below the ephemeral range, else above
/// it, else (the ephemeral range covers nearly everything) the ephemeral range itself.
fn candidates() -> (u16, usize) {
    let (low, high) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut ports = text.split_whitespace().map(|port| port.parse::<u16>().ok());
            Some((ports.next()??, ports.next()??))
        })
        .unwrap_or(DEFAULT_EPHEMERAL_RANGE);
    if low >= LOWEST_PORT + MIN_RANGE {
        (LOWEST_PORT, usize::from(low - LOWEST_PORT))
    } else if high <= u16::MAX - MIN_RANGE {
        (high + 1, usize::from(u16::MAX - high))
    } else {
        (low, usize::from(high - low) + 1)
    }
}
