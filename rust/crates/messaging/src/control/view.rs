//! The member view: who is alive, from heartbeats only. Sans-IO: time is an input.

use std::collections::HashMap;
use std::time::Duration;

use super::codec::{Heartbeat, Role};
use super::limits::MAX_MEMBERS;
use crate::time::Instant;

/// What the view did with a heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// A member heard for the first time (or again after it was forgotten).
    Joined,
    /// A known member refreshed.
    Refreshed,
    /// Our own heartbeat (multicast loops it back); ignored.
    Own,
    /// From another group (fingerprint differs); ignored and counted.
    ForeignGroup,
    /// The view is full ([`MAX_MEMBERS`]); ignored and counted.
    Full,
}

/// One member as last heard.
#[derive(Clone, Debug)]
pub struct MemberEntry {
    /// The member's latest heartbeat.
    pub heartbeat: Heartbeat,
    /// When it was heard last.
    pub last_heard: Instant,
    /// When it was heard first.
    pub first_heard: Instant,
}

impl MemberEntry {
    /// The member's id.
    pub fn id(&self) -> u64 {
        self.heartbeat.member_id
    }
}

/// Counters of the view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewCounters {
    /// Heartbeats accepted.
    pub heartbeats: u64,
    /// Heartbeats from another group.
    pub foreign_group: u64,
    /// Heartbeats refused because the view was full.
    pub full: u64,
    /// Members forgotten after silence.
    pub expired: u64,
}

/// The members of one group (namespace) heard recently.
///
/// A member is *live* while its last heartbeat is younger than the liveness timeout. A member
/// whose last heartbeat said "leaving" with nothing claimed is gone at once.
#[derive(Debug)]
pub struct MemberView {
    own_id: u64,
    fingerprint: u64,
    liveness_timeout: Duration,
    members: HashMap<u64, MemberEntry>,
    counters: ViewCounters,
}

impl MemberView {
    /// An empty view for member `own_id` of the group with `fingerprint`.
    pub fn new(own_id: u64, fingerprint: u64, liveness_timeout: Duration) -> Self {
        MemberView { own_id, fingerprint, liveness_timeout, members: HashMap::new(), counters: ViewCounters::default() }
    }

    /// The liveness timeout.
    pub fn liveness_timeout(&self) -> Duration {
        self.liveness_timeout
    }

    /// Records a heartbeat heard at `now`.
    pub fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant) -> HeartbeatOutcome {
        if heartbeat.fingerprint != self.fingerprint {
            self.counters.foreign_group += 1;
            return HeartbeatOutcome::ForeignGroup;
        }
        if heartbeat.member_id == self.own_id {
            return HeartbeatOutcome::Own;
        }
        self.counters.heartbeats += 1;
        match self.members.get_mut(&heartbeat.member_id) {
            Some(entry) => {
                let was_live = now.saturating_since(entry.last_heard) < self.liveness_timeout;
                entry.heartbeat = heartbeat;
                entry.last_heard = now;
                if was_live {
                    HeartbeatOutcome::Refreshed
                } else {
                    entry.first_heard = now;
                    HeartbeatOutcome::Joined
                }
            }
            None => {
                if self.members.len() >= MAX_MEMBERS {
                    self.counters.full += 1;
                    return HeartbeatOutcome::Full;
                }
                self.members.insert(heartbeat.member_id, MemberEntry { heartbeat, last_heard: now, first_heard: now });
                HeartbeatOutcome::Joined
            }
        }
    }

    fn entry_is_live(&self, entry: &MemberEntry, now: Instant) -> bool {
        let gone = entry.heartbeat.leaving && entry.heartbeat.claims.iter().all(|claim| !claim.state.holds());
        !gone && now.saturating_since(entry.last_heard) < self.liveness_timeout
    }

    /// Whether `member_id` is live at `now`.
    pub fn is_live(&self, member_id: u64, now: Instant) -> bool {
        self.members.get(&member_id).is_some_and(|entry| self.entry_is_live(entry, now))
    }

    /// Whether `member_id` is live and not leaving: it may be given new work.
    pub fn is_candidate(&self, member_id: u64, now: Instant) -> bool {
        self.members.get(&member_id).is_some_and(|entry| !entry.heartbeat.leaving && self.entry_is_live(entry, now))
    }

    /// The live members, in no particular order.
    pub fn live(&self, now: Instant) -> impl Iterator<Item = &MemberEntry> + '_ {
        self.members.values().filter(move |entry| self.entry_is_live(entry, now))
    }

    /// The live members with `role`.
    pub fn live_with_role(&self, role: Role, now: Instant) -> impl Iterator<Item = &MemberEntry> + '_ {
        self.live(now).filter(move |entry| entry.heartbeat.role == role)
    }

    /// Every member heard and not yet forgotten (live or not).
    pub fn all(&self) -> impl Iterator<Item = &MemberEntry> + '_ {
        self.members.values()
    }

    /// A member by id (live or not).
    pub fn get(&self, member_id: u64) -> Option<&MemberEntry> {
        self.members.get(&member_id)
    }

    /// Excuses a pause of this member's own (its process stopped or not scheduled for `pause`):
    /// every member's silence is counted without it, so that a member that was not running
    /// does not take its own pause for the others' silence. Their heartbeats sent meanwhile
    /// are still on their way through this member's transport, which was paused too.
    pub fn excuse_pause(&mut self, pause: Duration) {
        for entry in self.members.values_mut() {
            entry.last_heard = entry.last_heard + pause;
        }
    }

    /// Forgets members silent for longer than `forget_after` (or gone by leaving); returns
    /// their ids.
    pub fn expire(&mut self, now: Instant, forget_after: Duration) -> Vec<u64> {
        let expired: Vec<u64> = self
            .members
            .values()
            .filter(|entry| {
                let leaving_done =
                    entry.heartbeat.leaving && entry.heartbeat.claims.iter().all(|claim| !claim.state.holds());
                leaving_done || now.saturating_since(entry.last_heard) >= forget_after
            })
            .map(MemberEntry::id)
            .collect();
        for id in &expired {
            self.members.remove(id);
        }
        self.counters.expired += expired.len() as u64;
        expired
    }

    /// The view's counters.
    pub fn counters(&self) -> ViewCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat(id: u64, fingerprint: u64) -> Heartbeat {
        Heartbeat {
            fingerprint,
            member_id: id,
            leaving: false,
            role: Role::Consumer,
            name: format!("m{id}"),
            endpoint: "127.0.0.1:1".into(),
            index: 0,
            count: 1,
            pid: 1,
            claims: Vec::new(),
            figures: Vec::new(),
        }
    }

    #[test]
    fn member_is_live_until_the_liveness_timeout() {
        let mut view = MemberView::new(1, 7, Duration::from_secs(2));
        let t0 = Instant::from_nanos(1_000);
        assert_eq!(view.on_heartbeat(heartbeat(2, 7), t0), HeartbeatOutcome::Joined);
        assert!(view.is_live(2, t0 + Duration::from_millis(1999)));
        assert!(!view.is_live(2, t0 + Duration::from_secs(2)));
        assert_eq!(view.on_heartbeat(heartbeat(2, 7), t0 + Duration::from_secs(3)), HeartbeatOutcome::Joined);
        assert_eq!(view.on_heartbeat(heartbeat(2, 7), t0 + Duration::from_secs(4)), HeartbeatOutcome::Refreshed);
    }

    #[test]
    fn an_excused_pause_of_its_own_is_not_counted_as_the_others_silence() {
        let mut view = MemberView::new(1, 7, Duration::from_secs(2));
        let t0 = Instant::from_nanos(1_000);
        view.on_heartbeat(heartbeat(2, 7), t0 + Duration::from_millis(900));
        // This member was stopped from 1 s to 4 s: without the excuse its peer, heard 0.1 s
        // before the stop, would be gone at 4 s; with it, it has 1.9 s of running time left.
        view.excuse_pause(Duration::from_secs(3));
        assert!(view.is_live(2, t0 + Duration::from_secs(4)));
        assert!(view.is_live(2, t0 + Duration::from_millis(5_899)));
        assert!(!view.is_live(2, t0 + Duration::from_millis(5_900)), "a silent peer is still found gone");
    }

    #[test]
    fn foreign_and_own_heartbeats_are_ignored() {
        let mut view = MemberView::new(1, 7, Duration::from_secs(2));
        assert_eq!(view.on_heartbeat(heartbeat(2, 8), Instant::ZERO), HeartbeatOutcome::ForeignGroup);
        assert_eq!(view.on_heartbeat(heartbeat(1, 7), Instant::ZERO), HeartbeatOutcome::Own);
        assert_eq!(view.live(Instant::ZERO).count(), 0);
        assert_eq!(view.counters().foreign_group, 1);
    }

    #[test]
    fn leaving_member_with_no_claim_is_gone_at_once() {
        let mut view = MemberView::new(1, 7, Duration::from_secs(2));
        let mut hb = heartbeat(2, 7);
        view.on_heartbeat(hb.clone(), Instant::ZERO);
        assert!(view.is_candidate(2, Instant::ZERO));
        hb.leaving = true;
        view.on_heartbeat(hb, Instant::ZERO);
        assert!(!view.is_live(2, Instant::ZERO));
        assert_eq!(view.expire(Instant::ZERO, Duration::from_secs(10)), vec![2]);
    }

    #[test]
    fn view_is_bounded() {
        let mut view = MemberView::new(0, 7, Duration::from_secs(2));
        for id in 1..=MAX_MEMBERS as u64 {
            view.on_heartbeat(heartbeat(id, 7), Instant::ZERO);
        }
        assert_eq!(view.on_heartbeat(heartbeat(u64::MAX, 7), Instant::ZERO), HeartbeatOutcome::Full);
    }
}
