//! The driver's clock as its duty cycles read it: once per cycle, shared by the agents the
//! cycle runs (Aeron's cached clock). Reading a clock costs a vDSO call; the conductor, sender
//! and receiver each read their own before, several times per idle cycle of a shared or
//! invoker driver. The wall clock (the cnc's heartbeats and the counters' times, in
//! milliseconds) is read again only once the monotonic one has moved by [`EPOCH_REFRESH`].

use std::time::Duration;

use crate::shm::directory::epoch_ms;
use crate::time::{Instant, MonotonicClock};

/// How stale the cycle's wall-clock time may get: it is read again once the monotonic clock
/// moved this far (the wall-clock users count in milliseconds).
pub const EPOCH_REFRESH: Duration = Duration::from_millis(1);

/// A duty cycle's time: what every agent the cycle runs works with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycleTime {
    /// The monotonic time (protocol timers, the sender's and receiver's work).
    pub now: Instant,
    /// Wall-clock milliseconds since the Unix epoch, at most [`EPOCH_REFRESH`] old.
    pub epoch_ms: i64,
}

/// The clock a duty-cycle runner (or an agent run on its own) reads once per cycle.
#[derive(Clone, Copy, Debug)]
pub struct DutyClock {
    monotonic: MonotonicClock,
    /// The last wall-clock reading and the monotonic time it was taken at.
    epoch: (Instant, i64),
}

impl DutyClock {
    /// A clock on the process's monotonic epoch, its wall clock read now.
    pub fn new() -> Self {
        let monotonic = MonotonicClock::new();
        DutyClock { monotonic, epoch: (monotonic.now(), epoch_ms()) }
    }

    /// The time of a cycle starting now: one monotonic reading, and a wall-clock one when the
    /// last is [`EPOCH_REFRESH`] old.
    pub fn tick(&mut self) -> CycleTime {
        let now = self.monotonic.now();
        if now.saturating_since(self.epoch.0) >= EPOCH_REFRESH {
            self.epoch = (now, epoch_ms());
        }
        CycleTime { now, epoch_ms: self.epoch.1 }
    }

    /// The monotonic time now, without touching the cached wall clock (the end of a cycle).
    pub fn now(&self) -> Instant {
        self.monotonic.now()
    }
}

impl Default for DutyClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_is_read_again_only_after_the_refresh_interval() {
        let mut clock = DutyClock::new();
        let first = clock.tick();
        // A cached reading of an odd value, taken "later" than now: not refreshed yet.
        clock.epoch = (first.now + Duration::from_secs(3600), 7);
        assert_eq!(clock.tick().epoch_ms, 7, "within the interval the cached value is used");
        // The same value read at the first tick: refreshed once the interval passed.
        clock.epoch = (first.now, 7);
        std::thread::sleep(EPOCH_REFRESH * 2);
        let later = clock.tick();
        assert!(later.epoch_ms >= first.epoch_ms, "refreshed: {later:?} after {first:?}");
        assert!(later.now.saturating_since(first.now) >= EPOCH_REFRESH * 2);
    }
}
