//! `least-assigned`: the member holding the fewest keys.

use super::{minimum_by, Policy, PolicyError, Reason, Request};

/// Fewest assigned keys (affinities plus non-affinity subjects); ties go to the member that
/// first became up earliest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeastAssigned;

impl Policy for LeastAssigned {
    fn name(&self) -> &str {
        "least-assigned"
    }

    fn reason(&self) -> Reason {
        Reason::LeastAssigned
    }

    fn select(&self, request: &Request<'_>) -> Result<usize, PolicyError> {
        Ok(minimum_by(request.candidates, |c| (c.assigned, c.activation)))
    }
}
