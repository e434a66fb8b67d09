//! `round-robin`: the candidates in turn.

use super::{Policy, PolicyError, Reason, Request};

/// The `n`-th bind goes to candidate `n mod candidates` (the counter advances on binds only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundRobin {
    next: u64,
}

impl Policy for RoundRobin {
    fn name(&self) -> &str {
        "round-robin"
    }

    fn reason(&self) -> Reason {
        Reason::RoundRobin
    }

    fn select(&self, request: &Request<'_>) -> Result<usize, PolicyError> {
        Ok((self.next % request.candidates.len() as u64) as usize)
    }

    fn selected(&mut self, _request: &Request<'_>, _index: usize) {
        self.next = self.next.wrapping_add(1);
    }
}
