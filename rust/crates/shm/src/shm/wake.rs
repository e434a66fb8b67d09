//! How a client in the driver's own process wakes the parked driver thread that sends its
//! publications: an `eventfd(2)` the thread parks on (with its sockets) and a flag saying it
//! is parked, so an offer costs one relaxed load while the thread works, and one `write(2)`
//! (the first offer of a park only) while it sleeps. A client in another process never wakes
//! the driver: its offers wait for the park to end, as before.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// The wake-up of one parked driver thread ([`DriverWake::wake`] by clients; the thread calls
/// [`DriverWake::parking`], polls [`DriverWake::fd`], then [`DriverWake::unparked`]).
#[derive(Debug)]
pub struct DriverWake {
    /// Set while the thread is parked (or about to be): an offer then writes the eventfd.
    parked: AtomicBool,
    /// A non-blocking eventfd: readable once written, drained by the thread when it wakes.
    fd: OwnedFd,
}

impl DriverWake {
    /// A new wake-up (an eventfd, non-blocking, closed on exec).
    pub fn new() -> io::Result<DriverWake> {
        // SAFETY: eventfd takes no pointer; a negative result is an error, checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is open and owned by nothing else.
        Ok(DriverWake { parked: AtomicBool::new(false), fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// The descriptor the parked thread polls for reading.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The thread is about to park: offers from now on wake it. An offer appended after the
    /// thread's last scan but seen before this store is found when the park ends (at most the
    /// idle strategy's longest park later), as without a wake-up.
    pub fn parking(&self) {
        self.parked.store(true, Ordering::SeqCst);
    }

    /// The thread woke: offers stop writing, and what they wrote is read back.
    pub fn unparked(&self) {
        self.parked.store(false, Ordering::SeqCst);
        let mut count = [0u8; 8];
        // SAFETY: `count` is 8 writable bytes, the size an eventfd read takes; the fd is
        // non-blocking, so an empty eventfd returns EAGAIN, which is ignored.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
    }

    /// Called after an offer appended: wakes the thread if it is parked (only the first offer
    /// of a park writes).
    pub fn wake(&self) {
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::SeqCst) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: `one` is 8 readable bytes, the size an eventfd write takes. A full
            // counter (EAGAIN) still leaves the eventfd readable, which is all a wake needs.
            let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    /// Whether the thread is parked and no offer has woken it yet (tests).
    pub fn is_parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(wake: &DriverWake) -> bool {
        let mut poll = libc::pollfd { fd: wake.fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd; a zero timeout returns at once.
        unsafe { libc::poll(&mut poll, 1, 0) == 1 }
    }

    #[test]
    fn an_offer_wakes_a_parked_thread_once_and_a_working_one_never() {
        let wake = DriverWake::new().unwrap();
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
