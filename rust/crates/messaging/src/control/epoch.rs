//! The bounded epoch step: a claim may move a queue's epoch by at most
//! [`MAX_EPOCH_STEP`] over the highest epoch this member
//! accepted for that queue, and never beyond [`MAX_EPOCH`].
//! Sans-IO; one guard per member, applied to every heartbeat before its claims are used.

use super::codec::Claim;
use super::limits::{MAX_EPOCH, MAX_EPOCH_STEP};

/// The highest epoch accepted per queue, and how many claims were refused.
#[derive(Clone, Debug)]
pub struct EpochGuard {
    highest: Vec<Option<u64>>,
    refused: u64,
}

impl EpochGuard {
    /// A guard for `queue_count` queues (no epoch known yet).
    pub fn new(queue_count: usize) -> Self {
        EpochGuard { highest: vec![None; queue_count], refused: 0 }
    }

    /// Whether a claim of `queue` at `epoch` is within the bound (does not record it).
    /// Queues out of range are accepted here: callers count them as bad queues.
    pub fn allows(&self, queue: u32, epoch: u64) -> bool {
        if epoch > MAX_EPOCH {
            return false;
        }
        match self.highest.get(queue as usize) {
            Some(Some(highest)) => epoch <= highest.saturating_add(MAX_EPOCH_STEP),
            _ => true,
        }
    }

    /// Records `epoch` as accepted for `queue` (our own claims, and admitted ones).
    pub fn note(&mut self, queue: u32, epoch: u64) {
        if let Some(slot) = self.highest.get_mut(queue as usize) {
            *slot = Some(slot.map_or(epoch, |highest| highest.max(epoch)));
        }
    }

    /// Removes the claims beyond the bound (counted) and records the others. Returns how many
    /// were removed.
    pub fn admit(&mut self, claims: &mut Vec<Claim>) -> u64 {
        let before = claims.len();
        claims.retain(|claim| self.allows(claim.queue, claim.epoch));
        let removed = (before - claims.len()) as u64;
        self.refused += removed;
        for claim in claims.iter() {
            self.note(claim.queue, claim.epoch);
        }
        removed
    }

    /// Claims refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The highest epoch accepted for `queue`, if any.
    pub fn highest(&self, queue: u32) -> Option<u64> {
        self.highest.get(queue as usize).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ClaimState;

    fn claim(queue: u32, epoch: u64) -> Claim {
        Claim { queue, epoch, state: ClaimState::Active, acks: Vec::new() }
    }

    #[test]
    fn a_claim_beyond_the_step_or_the_ceiling_is_removed_and_counted() {
        let mut guard = EpochGuard::new(2);
        let mut claims = vec![claim(0, 3), claim(1, u64::MAX)];
        assert_eq!(guard.admit(&mut claims), 1, "u64::MAX is above the ceiling even as a first claim");
        assert_eq!(claims, vec![claim(0, 3)]);
        let mut claims = vec![claim(0, 3 + MAX_EPOCH_STEP + 1), claim(0, 3 + MAX_EPOCH_STEP)];
        assert_eq!(guard.admit(&mut claims), 1);
        assert_eq!(guard.highest(0), Some(3 + MAX_EPOCH_STEP));
        assert_eq!(guard.refused(), 2);
    }
}
