//! Idle strategies: what an agent thread does when a duty cycle found no work.
//!
//! A parking agent that owns sockets (the sender's and the receiver's) parks in `ppoll(2)` on
//! them ([`Idler::idle_or_readable`]): a datagram ends the park at once, so the first datagram
//! after a quiet spell waits for no timer (it waited half the longest park on average before),
//! while the park's length, and so the idle CPU, stays what the strategy says. The thread that
//! sends also parks on a [`ParkWake`], which clients in its process write after an offer.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use crate::shm::wake::ParkWake;

/// How a thread waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleStrategy {
    /// Spin on the CPU: lowest latency, burns a core.
    BusySpin,
    /// `sched_yield` between cycles.
    Yield,
    /// Spin, then yield, then park with exponential backoff up to `max_park`.
    Backoff {
        /// Spins before yielding.
        spins: u32,
        /// Yields before parking.
        yields: u32,
        /// Shortest park.
        min_park: Duration,
        /// Longest park.
        max_park: Duration,
    },
}

impl Default for IdleStrategy {
    /// Backoff tuned for a 2-core machine: no spin, some yields, parks of 1 µs..1 ms (a
    /// parking sender or receiver also wakes on a datagram, [`Idler::idle_or_readable`]).
    /// No spin because an idle cycle of a thread with sockets is two `recv` syscalls: spinning
    /// through them kept the core from the application thread that shares it, which had the
    /// data just received to read or a message to offer (a shared-thread round trip's p50
    /// halved without the spins).
    fn default() -> Self {
        IdleStrategy::Backoff {
            spins: 0,
            yields: 20,
            min_park: Duration::from_micros(1),
            max_park: Duration::from_millis(1),
        }
    }
}

impl IdleStrategy {
    /// The strategy's name as `idle=` takes it (`busy-spin`, `yield`, `backoff`).
    pub fn name(&self) -> &'static str {
        match self {
            IdleStrategy::BusySpin => "busy-spin",
            IdleStrategy::Yield => "yield",
            IdleStrategy::Backoff { .. } => "backoff",
        }
    }
}

impl std::str::FromStr for IdleStrategy {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "spin" | "busy-spin" => Ok(IdleStrategy::BusySpin),
            "yield" => Ok(IdleStrategy::Yield),
            "backoff" | "backoff-park" => Ok(IdleStrategy::default()),
            other => Err(format!("idle strategy {other:?} is not one of: busy-spin, yield, backoff")),
        }
    }
}

/// The per-thread state of an idle strategy.
#[derive(Debug)]
pub struct Idler {
    strategy: IdleStrategy,
    idle_cycles: u32,
    park: Duration,
    /// The descriptors of the park in progress ([`Idler::idle_or_readable`]).
    fds: Vec<RawFd>,
    polls: Vec<libc::pollfd>,
    /// Whether the last park was ended by a readable descriptor: if the next cycle then found
    /// no work (a socket whose readiness no cycle consumes), the next park is a plain one, so
    /// such a socket can never turn the backoff into a spin.
    woken_by_readable: bool,
    /// Written by in-process clients after an offer ([`Idler::with_wake`]).
    wake: Option<Arc<ParkWake>>,
}

impl Idler {
    /// A fresh idler.
    pub fn new(strategy: IdleStrategy) -> Self {
        Idler {
            strategy,
            idle_cycles: 0,
            park: Duration::ZERO,
            fds: Vec::new(),
            polls: Vec::new(),
            woken_by_readable: false,
            wake: None,
        }
    }

    /// Parks also end when a client in this process offers ([`ParkWake::wake`]).
    pub fn with_wake(mut self, wake: Option<Arc<ParkWake>>) -> Self {
        self.wake = wake;
        self
    }

    /// Call after each duty cycle with the work it did.
    pub fn idle(&mut self, work_count: usize) {
        self.idle_or_readable(work_count, |_| {});
    }

    /// [`Idler::idle`], except that a park waits on the descriptors `readable` lists (the
    /// agent's sockets) and ends as soon as one of them can be read. `readable` is called
    /// only when the thread is about to park.
    pub fn idle_or_readable(&mut self, work_count: usize, readable: impl FnOnce(&mut Vec<RawFd>)) {
        let woken_by_readable = std::mem::take(&mut self.woken_by_readable);
        if work_count > 0 {
            self.idle_cycles = 0;
            self.park = Duration::ZERO;
            return;
        }
        self.idle_cycles = self.idle_cycles.saturating_add(1);
        match self.strategy {
            IdleStrategy::BusySpin => std::hint::spin_loop(),
            IdleStrategy::Yield => std::thread::yield_now(),
            IdleStrategy::Backoff { spins, yields, min_park, max_park } => {
                if self.idle_cycles <= spins {
                    std::hint::spin_loop();
                } else if self.idle_cycles <= spins + yields {
                    std::thread::yield_now();
                } else {
                    self.park = if self.park.is_zero() { min_park } else { (self.park * 2).min(max_park) };
                    self.fds.clear();
                    if !woken_by_readable {
                        readable(&mut self.fds);
                    }
                    if woken_by_readable || (self.fds.is_empty() && self.wake.is_none()) {
                        std::thread::park_timeout(self.park);
                    } else {
                        self.woken_by_readable = self.park_until_readable();
                    }
                }
            }
        }
    }

    /// Waits up to the current park for one of `self.fds` to be readable (or in error) or for
    /// an offer's wake-up; `true` when a socket (not the wake-up) ended it.
    fn park_until_readable(&mut self) -> bool {
        self.polls.clear();
        self.polls.extend(self.fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }));
        if let Some(wake) = &self.wake {
            self.polls.push(libc::pollfd { fd: wake.fd(), events: libc::POLLIN, revents: 0 });
            wake.parking();
        }
        let timeout = libc::timespec {
            tv_sec: self.park.as_secs() as libc::time_t,
            tv_nsec: self.park.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `polls` is a live, initialised array of `polls.len()` pollfd entries that
        // ppoll may write `revents` into; `timeout` outlives the call; no signal mask is passed.
        let ready = unsafe {
            libc::ppoll(self.polls.as_mut_ptr(), self.polls.len() as libc::nfds_t, &timeout, std::ptr::null())
        };
        if let Some(wake) = &self.wake {
            wake.unparked();
        }
        ready > 0 && self.polls[..self.fds.len()].iter().any(|p| p.revents != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Instant;

    /// Parks of one second only: a park that ends within half of it was ended by a socket or
    /// a wake-up, not by its timer.
    const LONG_PARK: IdleStrategy = IdleStrategy::Backoff {
        spins: 0,
        yields: 0,
        min_park: Duration::from_secs(1),
        max_park: Duration::from_secs(1),
    };

    #[test]
    fn a_datagram_ends_a_park_on_its_socket_and_an_unread_one_never_makes_the_park_spin() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut idler = Idler::new(LONG_PARK);
        let fd = socket.as_raw_fd();
        let address = socket.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            peer.send_to(b"x", address).unwrap();
        });
        let start = Instant::now();
        idler.idle_or_readable(0, |fds| fds.push(fd));
        assert!(start.elapsed() < Duration::from_millis(500), "the datagram did not end the park");
        sender.join().unwrap();
        // The datagram stays unread: the next park is a plain one (its full second), not a
        // ppoll that returns at once for ever.
        let start = Instant::now();
        idler.idle_or_readable(0, |fds| fds.push(fd));
        assert!(start.elapsed() >= Duration::from_millis(900), "an unread datagram made the park return early");
    }

    #[test]
    fn an_offers_wake_up_ends_a_park_and_a_park_without_one_runs_its_length() {
        let wake = Arc::new(ParkWake::new().unwrap());
        let mut idler = Idler::new(LONG_PARK).with_wake(Some(wake.clone()));
        let waker = {
            let wake = wake.clone();
            std::thread::spawn(move || {
                while !wake.is_parked() {
                    std::thread::yield_now();
                }
                wake.wake();
            })
        };
        let start = Instant::now();
        idler.idle(0);
        assert!(start.elapsed() < Duration::from_millis(500), "the wake-up did not end the park");
        waker.join().unwrap();
        assert!(!wake.is_parked(), "a woken thread is not parked");
        // Nobody offers: the park lasts its length (then the flag is down again).
        let mut quiet = Idler::new(IdleStrategy::Backoff {
            spins: 0,
            yields: 0,
            min_park: Duration::from_millis(50),
            max_park: Duration::from_millis(50),
        })
        .with_wake(Some(wake.clone()));
        let start = Instant::now();
        quiet.idle(0);
        assert!(start.elapsed() >= Duration::from_millis(45), "a park without a wake-up ended early");
        assert!(!wake.is_parked());
    }
}
