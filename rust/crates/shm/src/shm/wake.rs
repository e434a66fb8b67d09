//! How one thread of a process wakes another that parks waiting for it, when a client and its
//! driver share the process (an embedded driver): an `eventfd(2)` the parked thread polls and a
//! flag saying it is parked, so the waking side costs one relaxed load while the other works,
//! and one `write(2)` (the first of a park only) while it sleeps: a client's offer wakes the
//! driver's sending thread ([`ParkWake`]). The driver's receiver, having written received data
//! into the logs, wakes every client thread waiting for data (`AttachedClient::wait_for_data`,
//! [`DataWake`]). Across processes nothing wakes: the parks run out.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// The wake-up of a parked thread ([`ParkWake::wake`] by the other side; the parking thread
/// calls [`ParkWake::parking`], polls [`ParkWake::fd`], then [`ParkWake::unparked`]).
#[derive(Debug)]
pub struct ParkWake {
    /// Set while the thread is parked (or about to be): a wake then writes the eventfd.
    parked: AtomicBool,
    /// A non-blocking eventfd: readable once written, drained by the thread when it wakes.
    fd: OwnedFd,
}

impl ParkWake {
    /// A new wake-up (an eventfd, non-blocking, closed on exec).
    pub fn new() -> io::Result<ParkWake> {
        // SAFETY: eventfd takes no pointer; a negative result is an error, checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is open and owned by nothing else.
        Ok(ParkWake { parked: AtomicBool::new(false), fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// The descriptor the parked thread polls for reading.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The thread is about to park: wakes from now on write. Work that came after the
    /// thread's last look but woke before this store is found when the park ends (at most the
    /// park's length later), as without a wake-up.
    pub fn parking(&self) {
        self.parked.store(true, Ordering::SeqCst);
    }

    /// The thread woke: wakes stop writing, and what they wrote is read back.
    pub fn unparked(&self) {
        self.parked.store(false, Ordering::SeqCst);
        let mut count = [0u8; 8];
        // SAFETY: `count` is 8 writable bytes, the size an eventfd read takes; the fd is
        // non-blocking, so an empty eventfd returns EAGAIN, which is ignored.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
    }

    /// Wakes the thread if it is parked (only the first call of a park writes): called after
    /// an offer appended, or after received data was written into the logs.
    pub fn wake(&self) {
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::SeqCst) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: `one` is 8 readable bytes, the size an eventfd write takes. A full
            // counter (EAGAIN) still leaves the eventfd readable, which is all a wake needs.
            let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    /// Whether the thread is parked and nothing has woken it yet (tests).
    pub fn is_parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(wake: &ParkWake) -> bool {
        let mut poll = libc::pollfd { fd: wake.fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd; a zero timeout returns at once.
        unsafe { libc::poll(&mut poll, 1, 0) == 1 }
    }

    #[test]
    fn an_offer_wakes_a_parked_thread_once_and_a_working_one_never() {
        let wake = ParkWake::new().unwrap();
        wake.wake();
        assert!(!readable(&wake), "a thread at work is not woken");
        wake.parking();
        wake.wake();
        assert!(readable(&wake), "the first offer of a park writes");
        assert!(!wake.is_parked(), "the later offers of the park write nothing");
        wake.unparked();
        assert!(!readable(&wake), "what was written is read back on waking");
        wake.parking();
        wake.unparked();
        wake.wake();
        assert!(!readable(&wake), "an offer after the thread woke writes nothing");
    }
}

impl ParkWake {
    /// Parks the calling thread for at most `timeout`, or until [`ParkWake::wake`] (by another
    /// thread, once this one is parked). Several threads may wait on one wake-up: a wake ends
    /// every park in progress.
    pub fn park(&self, timeout: std::time::Duration) {
        let mut poll = libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 };
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        self.parking();
        // SAFETY: one live pollfd that ppoll may write `revents` into; `timeout` outlives the
        // call; no signal mask is passed.
        unsafe { libc::ppoll(&mut poll, 1, &timeout, std::ptr::null()) };
        self.unparked();
    }
}

#[cfg(test)]
mod park_tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_wake_ends_a_park_and_without_one_the_park_runs_its_timeout() {
        let wake = Arc::new(ParkWake::new().unwrap());
        let start = Instant::now();
        wake.park(Duration::from_millis(50));
        assert!(start.elapsed() >= Duration::from_millis(45), "a park nobody woke ended early");
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
        wake.park(Duration::from_secs(1));
        assert!(start.elapsed() < Duration::from_millis(500), "the wake did not end the park");
        waker.join().unwrap();
    }
}

/// The wake-up of every client thread of a process waiting for received data
/// (`AttachedClient::wait_for_data`): the driver's receiver calls [`DataWake::wake`] after a
/// cycle that wrote received data into the logs. Unlike [`ParkWake`] it has many waiters at
/// once (a router's thread, a cluster node's relay and info threads), and a wake ends every wait
/// in progress: a generation number under a mutex and a condition variable notifying all. The
/// receiver pays one relaxed load while nobody waits, and one lock and notification per wait
/// cycle while some do (the first wake after a wait began; later ones find it pending).
#[derive(Debug, Default)]
pub struct DataWake {
    /// Threads waiting now.
    waiters: std::sync::atomic::AtomicU32,
    /// Set by the wake that notified, cleared when a waiter begins a wait: later wakes of the
    /// same round find it set and do nothing.
    notified: AtomicBool,
    /// Bumped by each notifying wake; a waiter waits for it to change.
    generation: std::sync::Mutex<u64>,
    changed: std::sync::Condvar,
}

impl DataWake {
    /// A wake-up nobody waits on yet.
    pub fn new() -> DataWake {
        DataWake::default()
    }

    /// Waits at most `timeout`, or until the next [`DataWake::wake`] after the wait began.
    pub fn wait(&self, timeout: std::time::Duration) {
        let deadline = std::time::Instant::now() + timeout;
        let mut generation = self.generation.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = *generation;
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.notified.store(false, Ordering::SeqCst);
        while *generation == start {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            generation = match self.changed.wait_timeout(generation, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Ends every wait in progress (data was written into the logs).
    pub fn wake(&self) {
        if self.waiters.load(Ordering::Relaxed) == 0 || self.notified.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut generation = self.generation.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *generation = generation.wrapping_add(1);
        drop(generation);
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod data_wake_tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_wake_ends_every_wait_in_progress_and_without_one_a_wait_runs_its_timeout() {
        let wake = Arc::new(DataWake::new());
        let start = Instant::now();
        wake.wait(Duration::from_millis(50));
        assert!(start.elapsed() >= Duration::from_millis(45), "a wait nobody woke ended early");
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let wake = wake.clone();
                std::thread::spawn(move || {
                    let start = Instant::now();
                    wake.wait(Duration::from_secs(10));
                    start.elapsed()
                })
            })
            .collect();
        while wake.waiters.load(Ordering::SeqCst) < 3 {
            std::thread::yield_now();
        }
        wake.wake();
        for waiter in waiters {
            assert!(waiter.join().unwrap() < Duration::from_secs(5), "a waiter slept through the wake");
        }
        // A wake with nobody waiting is not kept for the next wait.
        wake.wake();
        let start = Instant::now();
        wake.wait(Duration::from_millis(50));
        assert!(start.elapsed() >= Duration::from_millis(45));
    }
}
