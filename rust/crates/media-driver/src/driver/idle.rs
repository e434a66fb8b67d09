//! Idle strategies: what an agent thread does when a duty cycle found no work.

use std::time::Duration;

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
    /// Backoff tuned for a 2-core machine: short spin, some yields, parks of 1 µs..1 ms.
    fn default() -> Self {
        IdleStrategy::Backoff {
            spins: 10,
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
}

impl Idler {
    /// A fresh idler.
    pub fn new(strategy: IdleStrategy) -> Self {
        Idler { strategy, idle_cycles: 0, park: Duration::ZERO }
    }

    /// Call after each duty cycle with the work it did.
    pub fn idle(&mut self, work_count: usize) {
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
                    std::thread::park_timeout(self.park);
                }
            }
        }
    }
}
