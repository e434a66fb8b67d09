//! `workload` (the default fallback): the member with the fewest current subscriptions.

use super::{minimum_by, Policy, PolicyError, Reason, Request};

/// Fewest current subscriptions; ties go to the first in label order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Workload;

impl Policy for Workload {
    fn name(&self) -> &str {
        "workload"
    }

    fn reason(&self) -> Reason {
        Reason::Workload
    }

    fn select(&self, request: &Request<'_>) -> Result<usize, PolicyError> {
        Ok(minimum_by(request.candidates, |c| c.subscriptions))
    }
}
