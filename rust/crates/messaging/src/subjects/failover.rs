//! A subscriber's or source's watch over its routers, sans-IO: which router of its list is in
//! use, whether it is alive, and what to send again after a move.
//!
//! * The router sends every peer it hears an ALIVE record every heartbeat interval (and every
//!   record it sends carries its id, new at each start). [`RouterWatch::on_record`] takes the
//!   sender of each record received; [`RouterWatch::check`] runs the liveness timeout.
//! * The current router is *lost* when nothing came from it for the liveness timeout: the peer
//!   moves to the next router of its list (round robin: with one router, the same one again).
//!   It has *restarted* when a record comes from a new id at the same router: the peer stays and
//!   restores. It is *stopping* when it says so (ALIVE with [`FLAG_STOPPING`]): the peer moves
//!   to the forward channel it names if that is one of its routers, else to the next.
//! * After each [`Switch`] the peer sends its [`Restore`] (every subscription, every faucet
//!   enlistment) to the router now in use; a subscriber's subjects get a STATUS naming the
//!   move, then a fresh image once the router has routed them again.
//!
//! Records from a router the peer moved away from are delivered but never count as liveness.
//!
//! A restore can be lost: after a router restarts, the peer's publication to it still counts
//! as connected (its receiver's last status is younger than the connection timeout), and what
//! it sends before the new router's receiver has set up that publication's image is gone. So
//! [`RestoreCheck`] compares what the router's ALIVE records say it holds for the peer with
//! what the peer restored, and sends the restore again (it is idempotent: the router counts a
//! repeated SUBSCRIBE as a duplicate) until they match, at most [`MAX_RESTORE_RESENDS`] times.

use std::collections::BTreeSet;
use std::time::Duration;

use super::codec::{RecordKind, FLAG_STOPPING};
use super::faucet::MAX_ENLISTMENTS_PER_SOURCE;
use super::router::MAX_SUBJECTS_PER_SUBSCRIBER;
use crate::time::Instant;

/// Most routers one peer may list.
pub const MAX_ROUTERS: usize = 64;

/// Most times one restore is sent again ([`RestoreCheck`]): a router that keeps refusing part
/// of it is not asked for ever.
pub const MAX_RESTORE_RESENDS: u32 = 8;

/// Why the peer moved (or stayed and restored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchReason {
    /// Nothing came from the router for the liveness timeout.
    Silent,
    /// A record came from a new router id at the same router: it restarted.
    Restarted,
    /// The router said it is stopping.
    Stopping,
}

/// A move from router `from` to router `to` (indexes into the list; equal after a restart, or
/// with one router).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    /// The router left.
    pub from: usize,
    /// The router now in use.
    pub to: usize,
    /// Why.
    pub reason: SwitchReason,
}

impl Switch {
    /// The STATUS text subscribers get for each of their subjects.
    pub fn describe(&self, routers: &[String], liveness_timeout: Duration) -> String {
        let from = routers.get(self.from).map_or("?", String::as_str);
        let to = routers.get(self.to).map_or("?", String::as_str);
        match self.reason {
            SwitchReason::Silent => {
                format!("router {from} lost (silent for {} ms); subscribed again at {to}", liveness_timeout.as_millis())
            }
            SwitchReason::Restarted => format!("router {from} restarted; subscribed again"),
            SwitchReason::Stopping => format!("router {from} stopped; subscribed again at {to}"),
        }
    }
}

/// See the [module documentation](self).
#[derive(Debug)]
pub struct RouterWatch {
    routers: Vec<String>,
    current: usize,
    liveness_timeout: Duration,
    /// When the current router was last heard (or chosen).
    heard: Instant,
    /// Per router: the id last heard from it while it was in use.
    ids: Vec<Option<u64>>,
    switches: u64,
    /// Whether the router in use was heard since the last move.
    live: bool,
}

impl RouterWatch {
    /// Watches `routers` (1..=[`MAX_ROUTERS`] distinct channels; the first is used first),
    /// each lost after `liveness_timeout` of silence, starting at `now`.
    pub fn new(routers: Vec<String>, liveness_timeout: Duration, now: Instant) -> Result<RouterWatch, String> {
        if routers.is_empty() || routers.len() > MAX_ROUTERS {
            return Err(format!("routers: expected 1..={MAX_ROUTERS} channels, got {}", routers.len()));
        }
        for (index, router) in routers.iter().enumerate() {
            if router.is_empty() {
                return Err(format!("routers[{index}]: empty channel"));
            }
            if routers[..index].contains(router) {
                return Err(format!("routers[{index}]: {router:?} is listed twice"));
            }
        }
        let ids = vec![None; routers.len()];
        Ok(RouterWatch { routers, current: 0, liveness_timeout, heard: now, ids, switches: 0, live: false })
    }

    /// The routers, in order.
    pub fn routers(&self) -> &[String] {
        &self.routers
    }

    /// The index of the router in use.
    pub fn current(&self) -> usize {
        self.current
    }

    /// Moves made so far (restarts included).
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// The liveness timeout.
    pub fn liveness_timeout(&self) -> Duration {
        self.liveness_timeout
    }

    /// A record from `sender` arrived at `now`; `Some` when the peer must move (or restore).
    pub fn on_record(
        &mut self,
        sender: u64,
        kind: RecordKind,
        flags: u16,
        payload: &[u8],
        now: Instant,
    ) -> Option<Switch> {
        let current = self.ids[self.current];
        if current != Some(sender)
            && self.ids.iter().enumerate().any(|(i, id)| i != self.current && *id == Some(sender))
        {
            return None; // a router left behind: delivered, not liveness
        }
        self.heard = now;
        self.live = true;
        let mut switch = None;
        match current {
            None => self.ids[self.current] = Some(sender),
            Some(id) if id == sender => {}
            Some(_) => {
                self.ids[self.current] = Some(sender);
                switch = Some(self.switch(self.current, SwitchReason::Restarted, now));
            }
        }
        if kind == RecordKind::Alive && flags & FLAG_STOPPING != 0 {
            let forward = std::str::from_utf8(payload).ok().filter(|f| !f.is_empty());
            let to = forward
                .and_then(|f| self.routers.iter().position(|r| r == f))
                .filter(|&i| i != self.current)
                .unwrap_or((self.current + 1) % self.routers.len());
            return Some(self.switch(to, SwitchReason::Stopping, now));
        }
        switch
    }

    /// Whether `sender` is the id last heard from the router in use.
    pub fn is_current(&self, sender: u64) -> bool {
        self.ids[self.current] == Some(sender)
    }

    /// Whether the router in use was heard since the last move and within the liveness
    /// timeout (a restarted router counts once it was heard again).
    pub fn is_live(&self, now: Instant) -> bool {
        self.live && now.saturating_since(self.heard) < self.liveness_timeout
    }

    /// Runs the liveness timeout; `Some` when the router in use was silent too long.
    pub fn check(&mut self, now: Instant) -> Option<Switch> {
        if now.saturating_since(self.heard) < self.liveness_timeout {
            return None;
        }
        Some(self.switch((self.current + 1) % self.routers.len(), SwitchReason::Silent, now))
    }

    fn switch(&mut self, to: usize, reason: SwitchReason, now: Instant) -> Switch {
        let from = self.current;
        self.current = to;
        self.heard = now;
        self.switches += 1;
        self.live = false;
        Switch { from, to, reason }
    }
}

/// Whether the last [`Restore`] arrived (see the [module documentation](self)): armed when it is
/// sent; each ALIVE from the router in use says how much the router holds for the peer.
#[derive(Debug, Default)]
pub struct RestoreCheck {
    /// When the restore was last sent, while it is not confirmed.
    pending: Option<Instant>,
    resends: u32,
}

impl RestoreCheck {
    /// The restore was sent at `now` (after a [`Switch`]): watch for it.
    pub fn sent(&mut self, now: Instant) {
        self.pending = Some(now);
        self.resends = 0;
    }

    /// Whether a restore is sent and not confirmed yet.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// An ALIVE said the router holds `held` (`None`: a router that does not say, which ends the
    /// watch) while the restore now holds `expected`; `true` when the restore must be sent
    /// again: the router holds less, the last send is at least `resend_after` old (what was in
    /// flight had time to arrive), and fewer than [`MAX_RESTORE_RESENDS`] were made.
    pub fn on_alive(&mut self, held: Option<u32>, expected: u32, now: Instant, resend_after: Duration) -> bool {
        let Some(sent) = self.pending else { return false };
        match held {
            Some(held) if held < expected => {
                if now.saturating_since(sent) < resend_after {
                    return false;
                }
                if self.resends >= MAX_RESTORE_RESENDS {
                    self.pending = None;
                    return false;
                }
                self.resends += 1;
                self.pending = Some(now);
                true
            }
            _ => {
                self.pending = None;
                false
            }
        }
    }
}

/// What a peer sends again after a [`Switch`]: its subscriptions (a subscriber) or its
/// faucet enlistments (a source). Bounded: at most [`MAX_SUBJECTS_PER_SUBSCRIBER`] subjects
/// (the router refuses more anyway) and [`MAX_ENLISTMENTS_PER_SOURCE`] enlistments.
#[derive(Debug, Default)]
pub struct Restore {
    subjects: BTreeSet<String>,
    enlistments: Vec<(String, Option<String>)>,
}

impl Restore {
    /// Remembers a subscription (not past [`MAX_SUBJECTS_PER_SUBSCRIBER`]).
    pub fn subscribed(&mut self, subject: &str) {
        if self.subjects.len() < MAX_SUBJECTS_PER_SUBSCRIBER {
            self.subjects.insert(subject.to_owned());
        }
    }

    /// Forgets a subscription (unsubscribed, or refused by the router).
    pub fn unsubscribed(&mut self, subject: &str) {
        self.subjects.remove(subject);
    }

    /// Remembers an enlistment (not past [`MAX_ENLISTMENTS_PER_SOURCE`]).
    pub fn enlisted(&mut self, control_topic: &str, coverage: Option<&str>) {
        if self.enlistments.len() < MAX_ENLISTMENTS_PER_SOURCE {
            self.enlistments.push((control_topic.to_owned(), coverage.map(str::to_owned)));
        }
    }

    /// Forgets every enlistment on `control_topic`.
    pub fn delisted(&mut self, control_topic: &str) {
        self.enlistments.retain(|(topic, _)| topic != control_topic);
    }

    /// The subscriptions, in subject order.
    pub fn subjects(&self) -> impl Iterator<Item = &str> {
        self.subjects.iter().map(String::as_str)
    }

    /// What the router should hold once the restore arrived: the subscriptions, plus one when
    /// there are enlistments (a router counts an enlisted source once).
    pub fn expected_held(&self) -> u32 {
        u32::try_from(self.subjects.len() + usize::from(!self.enlistments.is_empty())).unwrap_or(u32::MAX)
    }

    /// The enlistments, in order: `(control topic, coverage)`.
    pub fn enlistments(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.enlistments.iter().map(|(topic, coverage)| (topic.as_str(), coverage.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVENESS: Duration = Duration::from_secs(2);

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn routers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("aeron:udp?endpoint=127.0.0.1:{}", 40500 + i)).collect()
    }

    fn alive(watch: &mut RouterWatch, sender: u64, ms: u64) -> Option<Switch> {
        watch.on_record(sender, RecordKind::Alive, 0, b"", at(ms))
    }

    #[test]
    fn a_silent_router_is_left_for_the_next_and_the_list_wraps() {
        let mut watch = RouterWatch::new(routers(2), LIVENESS, at(0)).unwrap();
        assert_eq!(alive(&mut watch, 7, 1000), None);
        assert_eq!(watch.check(at(2999)), None);
        let switch = watch.check(at(3000)).unwrap();
        assert_eq!(switch, Switch { from: 0, to: 1, reason: SwitchReason::Silent });
        assert_eq!(watch.current(), 1);
        // A late record of the router left behind is not liveness of the new one.
        assert_eq!(alive(&mut watch, 7, 4000), None);
        assert_eq!(watch.check(at(5000)).map(|s| s.to), Some(0));
        assert_eq!(watch.switches(), 2);
        assert!(switch.describe(watch.routers(), LIVENESS).contains("silent for 2000 ms"));
    }

    #[test]
    fn a_new_id_at_the_same_router_is_a_restart_and_one_router_is_tried_again() {
        let mut watch = RouterWatch::new(routers(1), LIVENESS, at(0)).unwrap();
        assert_eq!(alive(&mut watch, 7, 10), None);
        assert_eq!(alive(&mut watch, 7, 20), None);
        assert_eq!(alive(&mut watch, 8, 30), Some(Switch { from: 0, to: 0, reason: SwitchReason::Restarted }));
        assert_eq!(alive(&mut watch, 8, 40), None);
        // Silent: the same router again, and its next incarnation is a restart once more.
        assert_eq!(watch.check(at(2040)).map(|s| (s.to, s.reason)), Some((0, SwitchReason::Silent)));
        assert_eq!(alive(&mut watch, 9, 2100).map(|s| s.reason), Some(SwitchReason::Restarted));
    }

    #[test]
    fn a_stopping_router_forwards_its_peers_to_a_listed_router_or_the_next() {
        let list = routers(3);
        let mut watch = RouterWatch::new(list.clone(), LIVENESS, at(0)).unwrap();
        alive(&mut watch, 7, 0);
        let forward = list[2].as_bytes();
        let switch = watch.on_record(7, RecordKind::Alive, FLAG_STOPPING, forward, at(5)).unwrap();
        assert_eq!(switch, Switch { from: 0, to: 2, reason: SwitchReason::Stopping });
        // An unknown forward channel: the next one.
        alive(&mut watch, 9, 6);
        let switch = watch.on_record(9, RecordKind::Alive, FLAG_STOPPING, b"aeron:udp?endpoint=10.0.0.1:1", at(7));
        assert_eq!(switch.map(|s| s.to), Some(0));
    }

    #[test]
    fn a_router_list_is_checked() {
        assert!(RouterWatch::new(Vec::new(), LIVENESS, at(0)).unwrap_err().contains("1..=64"));
        let twice = vec!["a".to_owned(), "a".to_owned()];
        assert!(RouterWatch::new(twice, LIVENESS, at(0)).unwrap_err().contains("routers[1]"));
        assert!(RouterWatch::new(vec![String::new()], LIVENESS, at(0)).unwrap_err().contains("empty"));
    }

    #[test]
    fn the_restore_set_follows_subscriptions_and_enlistments() {
        let mut restore = Restore::default();
        restore.subscribed("/b");
        restore.subscribed("/a");
        restore.subscribed("/a");
        restore.unsubscribed("/b");
        assert_eq!(restore.subjects().collect::<Vec<_>>(), ["/a"]);
        restore.enlisted("*", Some("/x.*"));
        restore.enlisted("ctl", None);
        restore.delisted("*");
        assert_eq!(restore.enlistments().collect::<Vec<_>>(), [("ctl", None)]);
    }

    #[test]
    fn a_restore_the_router_does_not_hold_is_sent_again_until_it_does_and_not_for_ever() {
        let interval = Duration::from_millis(100);
        let mut check = RestoreCheck::default();
        assert!(!check.on_alive(Some(0), 2, at(0), interval), "nothing sent, nothing to check");
        check.sent(at(0));
        // In flight: an ALIVE sent before the restore arrived does not trigger a resend.
        assert!(!check.on_alive(Some(0), 2, at(50), interval));
        assert!(check.on_alive(Some(0), 2, at(100), interval), "lost: sent again");
        assert!(!check.on_alive(Some(1), 2, at(150), interval), "not again before resend_after");
        assert!(check.on_alive(Some(1), 2, at(200), interval), "part of it arrived: sent again");
        assert!(!check.on_alive(Some(2), 2, at(300), interval) && !check.is_pending(), "confirmed");
        assert!(!check.on_alive(Some(0), 2, at(400), interval), "confirmed: the watch ended");
        // A router that says nothing (an older one) ends the watch.
        check.sent(at(500));
        assert!(!check.on_alive(None, 2, at(700), interval) && !check.is_pending());
        // A router that never holds it all: at most MAX_RESTORE_RESENDS sends again.
        check.sent(at(1000));
        let resends = (1..=100).filter(|i| check.on_alive(Some(0), 1, at(1000 + i * 100), interval)).count();
        assert_eq!(resends, MAX_RESTORE_RESENDS as usize);
        assert!(!check.is_pending());
    }

    #[test]
    fn the_restore_expects_each_subscription_and_one_count_for_its_enlistments() {
        let mut restore = Restore::default();
        assert_eq!(restore.expected_held(), 0);
        restore.subscribed("/a");
        restore.subscribed("/b");
        restore.enlisted("*", None);
        restore.enlisted("ctl", None);
        assert_eq!(restore.expected_held(), 3);
    }
}
