//! Time as plain numbers: the protocol core never reads a clock, callers pass `now` in.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time in nanoseconds since an arbitrary, caller-chosen epoch.
///
/// The driver uses a monotonic clock; tests use a fake one starting at zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch itself.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero if `earlier` is in the future.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs.as_nanos().min(u64::MAX as u128) as u64))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(rhs.as_nanos().min(u64::MAX as u128) as u64))
    }
}

/// The epoch every [`MonotonicClock`] of the process counts from: the first clock's creation.
static PROCESS_EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// A monotonic clock for the driver: nanoseconds since the process created its first one, so
/// every clock of the process (each agent's, the duty cycle's) agrees on every reading.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: std::time::Instant,
}

impl MonotonicClock {
    /// A clock on the process's epoch (set by the first call).
    pub fn new() -> Self {
        MonotonicClock { origin: *PROCESS_EPOCH.get_or_init(std::time::Instant::now) }
    }

    /// The current time.
    pub fn now(&self) -> Instant {
        Instant(self.origin.elapsed().as_nanos() as u64)
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_nanos(10);
        assert_eq!((t - Duration::from_nanos(20)).as_nanos(), 0);
        assert_eq!((t + Duration::from_nanos(5)).as_nanos(), 15);
        assert_eq!(t.saturating_since(Instant::from_nanos(20)), Duration::ZERO);
    }

    #[test]
    fn clocks_created_apart_agree() {
        let first = MonotonicClock::new();
        std::thread::sleep(Duration::from_millis(5));
        let second = MonotonicClock::new();
        let (a, b) = (first.now(), second.now());
        // Clocks with their own epochs would read the later one's about 5 ms behind.
        assert!(b >= a && b.saturating_since(a) < Duration::from_secs(1), "{a:?} {b:?}");
    }
}
