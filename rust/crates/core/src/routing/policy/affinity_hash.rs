//! The source-affinity algorithm: the versioned hash of the composite picks the member.

use super::{Candidate, Policy, PolicyError, Reason, Request};
use crate::routing::hash::Selection;

/// Places a composite with [`Selection`] over the candidates' labels (see `docs/hash-spec.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AffinityHash {
    /// `modulo` (the seed's algorithm) or `rendezvous`.
    pub selection: Selection,
}

impl AffinityHash {
    /// Index into `candidates` for `composite`; `None` when there is no candidate.
    pub fn place(&self, composite: &str, candidates: &[Candidate<'_>]) -> Option<usize> {
        let labels: Vec<&str> = candidates.iter().map(|c| c.label).collect();
        self.selection.select(composite, &labels)
    }
}

impl Policy for AffinityHash {
    fn name(&self) -> &str {
        self.selection.name()
    }

    fn reason(&self) -> Reason {
        Reason::Hashed
    }

    fn select(&self, request: &Request<'_>) -> Result<usize, PolicyError> {
        self.place(request.key, request.candidates).ok_or_else(|| PolicyError("no candidate".to_owned()))
    }

    fn decides_composites(&self) -> bool {
        true
    }
}
