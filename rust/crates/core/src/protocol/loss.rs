//! Loss detection timing: when to NAK a gap the image found.
//!
//! Unicast: the first NAK after `nak_delay` (100 µs), retries every `100 × nak_delay` (10 ms).
//! Multicast: a random delay `d = (T/λ)·ln(1 + U·(e^λ − 1))`, `λ = ln(10) + 1`, `T` = backoff,
//! fresh for every retry, so many receivers seldom NAK the same gap at once.

use std::time::Duration;

use crate::time::Instant;

/// Unicast retries wait this many NAK delays.
pub const UNICAST_RETRY_RATIO: u32 = 100;
/// The multicast group size the random NAK delay is tuned for.
pub const MULTICAST_GROUP_SIZE: f64 = 10.0;

/// What the detector decided for the current gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NakDecision {
    /// Start of the gap.
    pub position: i64,
    /// Bytes in the gap.
    pub length: usize,
    /// This gap was seen for the first time now.
    pub is_new_gap: bool,
    /// A NAK should be sent now.
    pub send: bool,
}

/// Timer state for the one gap the image is NAKing.
#[derive(Debug)]
pub struct LossDetector {
    nak_delay: Duration,
    is_group: bool,
    multicast_backoff: Duration,
    /// Explicitly seeded, so delays are reproducible per seed (sans-IO, deterministic in tests).
    rng: fastrand::Rng,
    active: Option<(i64, usize, Instant)>,
}

impl LossDetector {
    /// A detector with unicast or multicast timing.
    pub fn new(nak_delay: Duration, is_group: bool, multicast_backoff: Duration, seed: u64) -> Self {
        LossDetector { nak_delay, is_group, multicast_backoff, rng: fastrand::Rng::with_seed(seed), active: None }
    }

    fn first_delay(&mut self) -> Duration {
        if self.is_group {
            self.random_delay()
        } else {
            self.nak_delay
        }
    }

    fn retry_delay(&mut self) -> Duration {
        if self.is_group {
            self.random_delay()
        } else {
            self.nak_delay * UNICAST_RETRY_RATIO
        }
    }

    fn random_delay(&mut self) -> Duration {
        let lambda = MULTICAST_GROUP_SIZE.ln() + 1.0;
        let u = self.rng.f64();
        let factor = (1.0 + u * (lambda.exp() - 1.0)).ln() / lambda;
        self.multicast_backoff.mul_f64(factor.clamp(0.0, 1.0))
    }

    /// Feeds the gap the scanner found now (or `None`); says whether to NAK.
    pub fn poll(&mut self, gap: Option<(i64, usize)>, now: Instant) -> Option<NakDecision> {
        let Some((position, length)) = gap else {
            self.active = None;
            return None;
        };
        match self.active {
            Some((active_position, active_length, deadline))
                if active_position == position && active_length == length =>
            {
                if now >= deadline {
                    let retry = self.retry_delay();
                    self.active = Some((position, length, now + retry));
                    Some(NakDecision { position, length, is_new_gap: false, send: true })
                } else {
                    None
                }
            }
            _ => {
                let delay = self.first_delay();
                let send = delay.is_zero();
                let deadline = if send { now + self.retry_delay() } else { now + delay };
                self.active = Some((position, length, deadline));
                Some(NakDecision { position, length, is_new_gap: true, send })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(value: u64) -> Instant {
        Instant::from_nanos(value * 1000)
    }

    #[test]
    fn unicast_naks_after_delay_then_retries_every_ten_ms() {
        let mut detector = LossDetector::new(Duration::from_micros(100), false, Duration::from_millis(10), 1);
        let gap = Some((64, 128));
        assert_eq!(detector.poll(gap, us(0)).map(|d| (d.is_new_gap, d.send)), Some((true, false)));
        assert!(detector.poll(gap, us(50)).is_none());
        assert_eq!(detector.poll(gap, us(100)).map(|d| d.send), Some(true));
        assert!(detector.poll(gap, us(5_000)).is_none());
        assert_eq!(detector.poll(gap, us(10_100)).map(|d| d.send), Some(true));
    }

    #[test]
    fn a_changed_gap_restarts_the_timer() {
        let mut detector = LossDetector::new(Duration::from_micros(100), false, Duration::from_millis(10), 1);
        detector.poll(Some((64, 128)), us(0));
        let decision = detector.poll(Some((64, 64)), us(100)).unwrap();
        assert!(decision.is_new_gap && !decision.send);
        assert!(detector.poll(None, us(200)).is_none());
    }

    #[test]
    fn multicast_delays_are_random_and_below_the_backoff() {
        let mut detector = LossDetector::new(Duration::from_micros(100), true, Duration::from_millis(10), 42);
        let delays: Vec<Duration> = (0..200).map(|_| detector.random_delay()).collect();
        assert!(delays.iter().all(|d| *d < Duration::from_millis(10)));
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 150);
    }

    #[test]
    fn multicast_delays_are_reproducible_per_seed() {
        let delays = |seed| {
            let mut detector = LossDetector::new(Duration::from_micros(100), true, Duration::from_millis(10), seed);
            (0..20).map(|_| detector.random_delay()).collect::<Vec<_>>()
        };
        assert_eq!(delays(7), delays(7));
        assert_ne!(delays(7), delays(8));
    }
}
