//! A loss-injecting UDP relay for tests: sits between a publication and a subscription on
//! loopback and drops, duplicates and reorders datagrams in both directions with a seeded
//! random generator.
//!
//! The publication sends to the relay's front address; the relay forwards to the subscription
//! endpoint from its back socket; replies (status messages, NAKs) come back to the back socket
//! and are forwarded to whoever last sent to the front.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Impairments applied to each direction.
#[derive(Clone, Copy, Debug)]
pub struct Impairment {
    /// Probability a datagram is dropped.
    pub loss: f64,
    /// Probability a datagram is sent twice.
    pub duplicate: f64,
    /// Probability a datagram is held back and sent after the next one.
    pub reorder: f64,
}

/// Datagram counts of a relay.
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Datagrams received on either side.
    pub received: AtomicU64,
    /// Datagrams dropped.
    pub dropped: AtomicU64,
    /// Datagrams duplicated.
    pub duplicated: AtomicU64,
    /// Datagrams reordered.
    pub reordered: AtomicU64,
}

/// A running relay; stops when dropped.
pub struct LossyRelay {
    front: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<RelayStats>,
    thread: Option<JoinHandle<()>>,
}

struct Direction {
    held: Option<Vec<u8>>,
}

impl LossyRelay {
    /// Starts a relay listening on `front` (port 0 picks one) and forwarding to `target`.
    pub fn start(front: SocketAddr, target: SocketAddr, impairment: Impairment, seed: u64) -> io::Result<Self> {
        let front_socket = UdpSocket::bind(front)?;
        let back_socket = UdpSocket::bind(SocketAddr::new(target.ip(), 0))?;
        back_socket.connect(target)?;
        front_socket.set_nonblocking(true)?;
        back_socket.set_nonblocking(true)?;
        let front = front_socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(RelayStats::default());
        let thread = {
            let stop = stop.clone();
            let stats = stats.clone();
            std::thread::Builder::new().name("affinity-relay".into()).spawn(move || {
                run(front_socket, back_socket, impairment, seed, &stop, &stats);
            })?
        };
        Ok(LossyRelay { front, stop, stats, thread: Some(thread) })
    }

    /// The address publications send to.
    pub fn front_address(&self) -> SocketAddr {
        self.front
    }

    /// Datagram counts so far.
    pub fn stats(&self) -> &RelayStats {
        &self.stats
    }

    /// Stops the relay thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn forward(
    socket: &UdpSocket,
    destination: Option<SocketAddr>,
    datagram: &[u8],
    direction: &mut Direction,
    impairment: &Impairment,
    rng: &mut fastrand::Rng,
    stats: &RelayStats,
) {
    stats.received.fetch_add(1, Ordering::Relaxed);
    let send = |bytes: &[u8]| {
        let _ = match destination {
            Some(address) => socket.send_to(bytes, address),
            None => socket.send(bytes),
        };
    };
    if rng.f64() < impairment.loss {
        stats.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if direction.held.is_none() && rng.f64() < impairment.reorder {
        stats.reordered.fetch_add(1, Ordering::Relaxed);
        direction.held = Some(datagram.to_vec());
        return;
    }
    send(datagram);
    if rng.f64() < impairment.duplicate {
        stats.duplicated.fetch_add(1, Ordering::Relaxed);
        send(datagram);
    }
    if let Some(held) = direction.held.take() {
        send(&held);
    }
}

fn run(front: UdpSocket, back: UdpSocket, impairment: Impairment, seed: u64, stop: &AtomicBool, stats: &RelayStats) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut buffer = vec![0u8; 65536];
    let mut source: Option<SocketAddr> = None;
    let mut forward_direction = Direction { held: None };
    let mut backward_direction = Direction { held: None };
    while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        for _ in 0..64 {
            match front.recv_from(&mut buffer) {
                Ok((length, from)) => {
                    idle = false;
                    source = Some(from);
                    forward(&back, None, &buffer[..length], &mut forward_direction, &impairment, &mut rng, stats);
                }
                Err(_) => break,
            }
        }
        for _ in 0..64 {
            match back.recv(&mut buffer) {
                Ok(length) => {
                    idle = false;
                    if let Some(to) = source {
                        forward(
                            &front,
                            Some(to),
                            &buffer[..length],
                            &mut backward_direction,
                            &impairment,
                            &mut rng,
                            stats,
                        );
                    }
                }
                Err(_) => break,
            }
        }
        if idle {
            wait_readable(&front, &back, Duration::from_millis(1));
            // Release held datagrams so a reordered tail is not stuck forever.
            if let Some(held) = forward_direction.held.take() {
                let _ = back.send(&held);
            }
            if let (Some(held), Some(to)) = (backward_direction.held.take(), source) {
                let _ = front.send_to(&held, to);
            }
        }
    }
}

/// Blocks until either socket is readable or `timeout` passes.
fn wait_readable(front: &UdpSocket, back: &UdpSocket, timeout: Duration) {
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd { fd: front.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: back.as_raw_fd(), events: libc::POLLIN, revents: 0 },
    ];
    // SAFETY: `fds` is a valid array of two pollfd structs for the duration of the call.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.as_millis() as libc::c_int);
    }
}
