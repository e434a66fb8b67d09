//! A slave's subscriptions at its parent node: the first local subscriber makes the node
//! subscribe once upstream; the image is cached and answers later local subscribers; an entry
//! nobody subscribes to any more is kept for the cache expiry, then unsubscribed upstream.

use std::collections::HashMap;
use std::time::Duration;

use super::super::codec::{FLAG_ERASE, FLAG_IMAGE, FLAG_NODATA_NOTFOUND, FLAG_NODATA_UNAVAILABLE};
use crate::time::Instant;

/// Most subjects one node caches from its parents (a subscribe past it is refused upstream:
/// the caller answers it as the router refuses subscriptions past its bounds).
pub const MAX_CACHED_SUBJECTS: usize = 1 << 20;

/// What the cache asks the runtime to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheAction {
    /// Subscribe to `subject` at node `node` (the first local subscriber, or after a move).
    SubscribeAt {
        /// The parent node.
        node: usize,
        /// The subject.
        subject: String,
    },
    /// Drop the subscription to `subject` at node `node` (expired).
    UnsubscribeAt {
        /// The parent node.
        node: usize,
        /// The subject.
        subject: String,
    },
    /// Answer the new local subscriber from the cache: `(flags, payload)` of the last image.
    Image {
        /// DATA flags of the cached record.
        flags: u16,
        /// Its payload.
        payload: Vec<u8>,
    },
    /// Refused: the cache holds [`MAX_CACHED_SUBJECTS`] already.
    Refused,
}

struct Entry {
    parent: usize,
    stratum: u32,
    image: Option<(u16, Vec<u8>)>,
    local: usize,
    idle_since: Option<Instant>,
}

/// See the [module documentation](self).
pub struct SlaveCache {
    entries: HashMap<String, Entry>,
    expiry: Duration,
}

impl SlaveCache {
    /// A cache whose unused entries live `expiry`.
    pub fn new(expiry: Duration) -> SlaveCache {
        SlaveCache { entries: HashMap::new(), expiry }
    }

    /// A local subscriber wants `subject`, whose parent is `parent` and this node's stratum
    /// `stratum` (the parent's + 1). `None`: subscribed upstream already, no image yet.
    pub fn subscribe(&mut self, subject: &str, parent: usize, stratum: u32) -> Option<CacheAction> {
        if let Some(entry) = self.entries.get_mut(subject) {
            entry.local += 1;
            entry.idle_since = None;
            return entry
                .image
                .as_ref()
                .map(|(flags, payload)| CacheAction::Image { flags: *flags, payload: payload.clone() });
        }
        if self.entries.len() >= MAX_CACHED_SUBJECTS {
            return Some(CacheAction::Refused);
        }
        let entry = Entry { parent, stratum, image: None, local: 1, idle_since: None };
        self.entries.insert(subject.to_owned(), entry);
        Some(CacheAction::SubscribeAt { node: parent, subject: subject.to_owned() })
    }

    /// DATA for `subject` from node `from`: cached when it is an image (or NODATA) from the
    /// subject's parent, the cached image forgotten on an ERASE; `true` when it is to be
    /// relayed to the local subscribers (there are some: an idle entry keeps its image current
    /// and relays nothing).
    pub fn on_data(&mut self, from: usize, subject: &str, flags: u16, payload: &[u8]) -> bool {
        let Some(entry) = self.entries.get_mut(subject) else { return false };
        if entry.parent != from {
            return false;
        }
        if flags & FLAG_ERASE != 0 {
            entry.image = None;
        } else if flags & (FLAG_IMAGE | FLAG_NODATA_NOTFOUND | FLAG_NODATA_UNAVAILABLE) != 0 {
            entry.image = Some((flags, payload.to_vec()));
        }
        entry.local > 0
    }

    /// Forgets `subject` without unsubscribing upstream (the parent refused or dropped it);
    /// returns the parent it had. The next local subscriber subscribes upstream again.
    pub fn forget(&mut self, subject: &str) -> Option<usize> {
        self.entries.remove(subject).map(|entry| entry.parent)
    }

    /// The parent `subject` is subscribed at (`None`: not cached).
    pub fn parent(&self, subject: &str) -> Option<usize> {
        self.entries.get(subject).map(|e| e.parent)
    }

    /// Subjects cached that no local subscriber holds now (kept until they expire).
    pub fn idle(&self) -> usize {
        self.entries.values().filter(|e| e.local == 0).count()
    }

    /// A local subscriber dropped `subject`; the entry idles from `now` when it was the last.
    pub fn unsubscribe(&mut self, subject: &str, now: Instant) {
        if let Some(entry) = self.entries.get_mut(subject) {
            entry.local = entry.local.saturating_sub(1);
            if entry.local == 0 {
                entry.idle_since = Some(now);
            }
        }
    }

    /// Entries idle past the expiry are dropped and unsubscribed upstream.
    pub fn tick(&mut self, now: Instant) -> Vec<CacheAction> {
        let expiry = self.expiry;
        let expired: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.idle_since.is_some_and(|at| now.saturating_since(at) >= expiry))
            .map(|(s, _)| s.clone())
            .collect();
        let mut actions = Vec::new();
        for subject in expired {
            if let Some(entry) = self.entries.remove(&subject) {
                actions.push(CacheAction::UnsubscribeAt { node: entry.parent, subject });
            }
        }
        actions
    }

    /// Node `lost` failed: every subject it was the parent of moves to `replacement(subject)`
    /// (the next master in the configured order), its image forgotten (a fresh one follows);
    /// returns the new subscriptions to make, in subject order.
    pub fn parent_lost(
        &mut self,
        lost: usize,
        mut replacement: impl FnMut(&str) -> Option<(usize, u32)>,
    ) -> Vec<CacheAction> {
        let mut moved: Vec<&String> = self.entries.iter().filter(|(_, e)| e.parent == lost).map(|(s, _)| s).collect();
        moved.sort();
        let moved: Vec<String> = moved.into_iter().cloned().collect();
        let mut actions = Vec::new();
        for subject in moved {
            let Some((parent, stratum)) = replacement(&subject) else { continue };
            if let Some(entry) = self.entries.get_mut(&subject) {
                entry.parent = parent;
                entry.stratum = stratum;
                entry.image = None;
                actions.push(CacheAction::SubscribeAt { node: parent, subject });
            }
        }
        actions
    }

    /// This node's stratum for `subject` (`None`: not cached).
    pub fn stratum(&self, subject: &str) -> Option<u32> {
        self.entries.get(subject).map(|e| e.stratum)
    }

    /// Subjects cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
