//! The observer's runtime: [`GroupObserver`] joins a group's control plane to watch it.

use std::sync::Arc;
use std::time::Duration;

use super::{Brain, Core, Member, MemberOptions};
use crate::client::ClientApi;
use crate::control::member::{new_member_id, plain_heartbeat};
use crate::control::{ClaimState, Heartbeat, MemberView, Role};
use crate::groups::{GroupConfig, GroupError};
use crate::time::Instant;

struct ObserverBrain {
    view: MemberView,
    fingerprint: u64,
    member_id: u64,
}

impl Brain for ObserverBrain {
    fn role(&self) -> Role {
        Role::Observer
    }
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
    fn view(&self) -> &MemberView {
        &self.view
    }
    fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant) {
        self.view.on_heartbeat(heartbeat, now);
    }
    fn excuse_pause(&mut self, pause: Duration) {
        self.view.excuse_pause(pause);
    }
    fn handle_timeout(&mut self, now: Instant, _discovery_complete: bool) {
        let forget = self.view.liveness_timeout() * 5;
        self.view.expire(now, forget);
    }
    fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        Heartbeat { pid, ..plain_heartbeat(self.fingerprint, self.member_id, Role::Observer, name, endpoint, false) }
    }
}

/// A member as the observer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// Member id.
    pub member_id: u64,
    /// Name.
    pub name: String,
    /// `publisher`, `consumer` or `observer`.
    pub role: String,
    /// Consumer index (0 otherwise).
    pub index: u32,
    /// Consumer count (0 otherwise).
    pub count: u32,
    /// Inbox endpoint.
    pub endpoint: String,
    /// Milliseconds since its last heartbeat.
    pub last_heard_ms: u64,
}

/// A queue as the observer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStatus {
    /// The queue.
    pub queue: u32,
    /// Owner member id (0: none).
    pub owner_id: u64,
    /// Owner name ("" when none).
    pub owner_name: String,
    /// Epoch of the owner's claim (or the highest seen).
    pub epoch: u64,
    /// `claiming`, `active`, `releasing`, or `unowned`.
    pub state: String,
    /// Sum over live publishers of their acknowledged sequence for the queue.
    pub acked_sequence: u64,
    /// Sum over live publishers of their published sequence for the queue.
    pub sent_sequence: u64,
    /// Sum over live publishers of bytes retained for the queue.
    pub retained_bytes: u64,
    /// `sent_sequence - acked_sequence`.
    pub lag: u64,
}

/// The group as the observer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    /// Members heard recently (live, or silent for less than five liveness timeouts), by id.
    pub members: Vec<MemberStatus>,
    /// One entry per queue.
    pub queues: Vec<QueueStatus>,
    /// Whether the observer authenticates its messages (a group secret is configured).
    pub authenticated: bool,
    /// Messages refused by authentication (unauthenticated, bad tag, replayed, unverifiable).
    pub auth_refused: u64,
}

/// Joins a group's control plane to watch it (for `affinity group status`); owns nothing.
pub struct GroupObserver {
    member: Member<ObserverBrain>,
    queue_count: u32,
}

impl GroupObserver {
    /// Joins `group` as an observer.
    pub fn new(
        client: Arc<dyn ClientApi>,
        group: GroupConfig,
        options: &MemberOptions,
    ) -> Result<GroupObserver, GroupError> {
        let member_id = new_member_id();
        let brain = ObserverBrain {
            view: MemberView::new(member_id, group.fingerprint(), options.timing.liveness_timeout),
            fingerprint: group.fingerprint(),
            member_id,
        };
        let name = format!("observer-{}-{:x}", std::process::id(), member_id & 0xffff);
        let queue_count = group.queue_count;
        let core = Core::open(client, &group, options, member_id, name, brain)?;
        Ok(GroupObserver { member: Member::start(core)?, queue_count })
    }

    /// What the observer knows now.
    pub fn status(&self) -> GroupStatus {
        let core = self.member.core();
        let now = core.clock.now();
        let view = &core.brain.view;
        let mut members: Vec<MemberStatus> = view
            .all()
            .map(|entry| MemberStatus {
                member_id: entry.id(),
                name: entry.heartbeat.name.clone(),
                role: entry.heartbeat.role.name().to_owned(),
                index: entry.heartbeat.index,
                count: entry.heartbeat.count,
                endpoint: entry.heartbeat.endpoint.clone(),
                last_heard_ms: now.saturating_since(entry.last_heard).as_millis() as u64,
            })
            .collect();
        members.sort_by_key(|m| m.member_id);
        let queues = (0..self.queue_count)
            .map(|queue| {
                let mut owner: Option<(u64, u64, ClaimState, String)> = None;
                let mut max_epoch = 0;
                for entry in view.live_with_role(Role::Consumer, now) {
                    for claim in entry.heartbeat.claims.iter().filter(|c| c.queue == queue) {
                        max_epoch = max_epoch.max(claim.epoch);
                        if !claim.state.holds() {
                            continue;
                        }
                        let better = owner.as_ref().is_none_or(|(id, epoch, _, _)| {
                            claim.epoch > *epoch || (claim.epoch == *epoch && entry.id() < *id)
                        });
                        if better {
                            owner = Some((entry.id(), claim.epoch, claim.state, entry.heartbeat.name.clone()));
                        }
                    }
                }
                let (mut sent, mut acked, mut retained) = (0u64, 0u64, 0u64);
                for entry in view.live_with_role(Role::Publisher, now) {
                    for figure in entry.heartbeat.figures.iter().filter(|f| f.queue == queue) {
                        sent = sent.saturating_add(figure.sent);
                        acked = acked.saturating_add(figure.acked);
                        retained = retained.saturating_add(figure.retained_bytes);
                    }
                }
                let (owner_id, epoch, state, owner_name) = match owner {
                    Some((id, epoch, state, name)) => (id, epoch, state.name().to_owned(), name),
                    None => (0, max_epoch, "unowned".to_owned(), String::new()),
                };
                QueueStatus {
                    queue,
                    owner_id,
                    owner_name,
                    epoch,
                    state,
                    acked_sequence: acked,
                    sent_sequence: sent,
                    retained_bytes: retained,
                    lag: sent.saturating_sub(acked),
                }
            })
            .collect();
        GroupStatus {
            members,
            queues,
            authenticated: core.authenticated(),
            auth_refused: core.runtime_counters().auth.total(),
        }
    }

    /// Leaves the control plane.
    pub fn close(&self) {
        self.member.stop();
    }
}
