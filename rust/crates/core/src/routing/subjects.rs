//! What the tables remember per subject and per composite.
//!
//! * [`Subjects`]: one map from subject to its cached classification (data service, source
//!   groups, matching rule and interned composite) and, when subscribed, the index of its
//!   subscription in a slab. A lookup of a subject seen before is a single probe.
//! * [`Composites`]: composites interned into slots addressed by [`CompositeId`]; the slot holds
//!   the composite's affinity, so a classified subject reaches its affinity by index, without
//!   hashing the composite again.
//!
//! Architecture Invariant: a slot stays allocated while a cached classification names it or it
//! holds an affinity (every subscription leg with a composite holds a reference on the
//! affinity). Slots are reclaimed only by [`Composites::collect`], run after classifications
//! were dropped in bulk, so an id held by a live classification never dangles. A subscription
//! [`Leg`] keeps its composite as a [`CompositeId`] and reads the name from the slot when a
//! [`LegDecision`] or an event needs it: the reference it holds on the affinity keeps the slot.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::events::{MoveReason, Reason};
use super::types::{GroupId, LegDecision, MemberId, Move, ServiceId};

/// An interned composite: index of its slot in [`Composites`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct CompositeId(u32);

impl CompositeId {
    fn index(self) -> usize {
        self.0 as usize
    }
}

/// The member a composite sticks to, while a subscription holds the composite.
pub(super) struct Affinity {
    pub member: Option<MemberId>,
    pub owner: GroupId,
    pub references: u32,
    pub since: u64,
    pub reason: Reason,
    /// `u32` rather than `usize`: keeps a slot within one cache line.
    pub priority_group: Option<u32>,
    /// The last move to `member` (a member went down), for `explain`.
    pub moved: Option<Move>,
}

struct Slot {
    name: Arc<str>,
    affinity: Option<Affinity>,
    in_use: bool,
}

/// An entry of the composites' index: the slot and the hash of its name (kept so growing the
/// index does not read every slot's name again).
#[derive(Clone, Copy)]
struct Indexed {
    id: CompositeId,
    hash: u64,
}

/// Interned composites and their affinities.
pub(super) struct Composites {
    /// Name → slot, by the names the slots hold: a composite's name is allocated once and
    /// interning a new one clones no `Arc` (an atomic increment), and an index entry is 16 bytes
    /// instead of a 24-byte (`Arc<str>`, id) pair.
    index: HashTable<Indexed>,
    hasher: FxBuildHasher,
    slots: Vec<Slot>,
    /// Per slot, the affinity's member ([`NO_MEMBER`] without one): all a sticky lookup reads,
    /// 4 bytes instead of a 64-byte slot, so it stays cached. Kept equal to
    /// `slots[i].affinity.member` by every method that changes an affinity ([`AffinityMut`]).
    members: Vec<u32>,
    free: Vec<CompositeId>,
    affinities: usize,
    empty: Arc<str>,
}

impl Default for Composites {
    fn default() -> Self {
        Composites {
            index: HashTable::new(),
            hasher: FxBuildHasher,
            slots: Vec::new(),
            members: Vec::new(),
            free: Vec::new(),
            affinities: 0,
            empty: Arc::from(""),
        }
    }
}

impl Composites {
    /// The slot of `name`, allocated if new.
    pub fn intern(&mut self, name: &str) -> CompositeId {
        // One hash for the lookup and the insertion.
        let hash = self.hasher.hash_one(name);
        let slots = &self.slots;
        // The stored hash first: a new composite is compared with no other slot's name (a
        // cache miss each) unless their hashes are equal.
        if let Some(found) = self.index.find(hash, |entry| entry.hash == hash && *slots[entry.id.index()].name == *name)
        {
            return found.id;
        }
        let slot = Slot { name: Arc::from(name), affinity: None, in_use: true };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id.index()] = slot;
                self.members[id.index()] = NO_MEMBER;
                id
            }
            None => {
                self.slots.push(slot);
                self.members.push(NO_MEMBER);
                CompositeId(self.slots.len() as u32 - 1)
            }
        };
        self.index.insert_unique(hash, Indexed { id, hash }, |entry| entry.hash);
        id
    }

    /// The slot of `name`, if interned.
    pub fn find(&self, name: &str) -> Option<CompositeId> {
        let hash = self.hasher.hash_one(name);
        self.index
            .find(hash, |entry| entry.hash == hash && *self.slots[entry.id.index()].name == *name)
            .map(|entry| entry.id)
    }

    #[inline]
    pub fn name(&self, id: CompositeId) -> &Arc<str> {
        &self.slots[id.index()].name
    }

    #[inline]
    pub fn affinity(&self, id: CompositeId) -> Option<&Affinity> {
        self.slots[id.index()].affinity.as_ref()
    }

    /// The member of `id`'s affinity, if it has one with a member: the sticky path's only read.
    #[inline]
    pub fn member(&self, id: CompositeId) -> Option<MemberId> {
        let member = self.members[id.index()];
        debug_assert_eq!(member, encode(self.affinity(id).and_then(|a| a.member)));
        (member != NO_MEMBER).then_some(MemberId(member))
    }

    /// `id`'s affinity, writable; the member cache is brought up to date when the guard drops.
    pub fn affinity_mut(&mut self, id: CompositeId) -> Option<AffinityMut<'_>> {
        let member = &mut self.members[id.index()];
        self.slots[id.index()].affinity.as_mut().map(|affinity| AffinityMut { affinity, member })
    }

    /// Gives `id` an affinity (it had none).
    pub fn insert_affinity(&mut self, id: CompositeId, affinity: Affinity) {
        let slot = &mut self.slots[id.index()];
        debug_assert!(slot.in_use && slot.affinity.is_none());
        self.members[id.index()] = encode(affinity.member);
        slot.affinity = Some(affinity);
        self.affinities += 1;
    }

    pub fn remove_affinity(&mut self, id: CompositeId) -> Option<Affinity> {
        self.members[id.index()] = NO_MEMBER;
        let removed = self.slots[id.index()].affinity.take();
        if removed.is_some() {
            self.affinities -= 1;
        }
        removed
    }

    /// Number of composites with an affinity.
    pub fn affinity_count(&self) -> usize {
        self.affinities
    }

    /// Every composite with an affinity, in no particular order.
    pub fn affinities(&self) -> impl Iterator<Item = (CompositeId, &Affinity)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| slot.affinity.as_ref().map(|a| (CompositeId(index as u32), a)))
    }

    /// Room for `additional` more composites.
    pub fn reserve(&mut self, additional: usize) {
        self.index.reserve(additional, |entry| entry.hash);
        self.slots.reserve(additional.saturating_sub(self.free.len()));
        self.members.reserve(additional.saturating_sub(self.free.len()));
    }

    /// Forgets every composite and affinity.
    pub fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.members.clear();
        self.free.clear();
        self.affinities = 0;
    }

    /// Frees the slots without an affinity that `referenced` does not name.
    pub fn collect(&mut self, referenced: impl Iterator<Item = CompositeId>) {
        let mut keep: Vec<bool> = self.slots.iter().map(|slot| slot.affinity.is_some()).collect();
        for id in referenced {
            keep[id.index()] = true;
        }
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.in_use && !keep[index] {
                let id = CompositeId(index as u32);
                if let Ok(entry) = self.index.find_entry(self.hasher.hash_one(&*slot.name), |entry| entry.id == id) {
                    entry.remove();
                }
                slot.name = self.empty.clone();
                slot.in_use = false;
                self.free.push(id);
            }
        }
    }
}

const NO_MEMBER: u32 = u32::MAX;

fn encode(member: Option<MemberId>) -> u32 {
    member.map_or(NO_MEMBER, |m| m.0)
}

/// A writable affinity ([`Composites::affinity_mut`]); on drop it copies the affinity's member
/// into the composites' member cache, so no caller can leave the two apart.
pub(super) struct AffinityMut<'a> {
    affinity: &'a mut Affinity,
    member: &'a mut u32,
}

impl std::ops::Deref for AffinityMut<'_> {
    type Target = Affinity;

    fn deref(&self) -> &Affinity {
        self.affinity
    }
}

impl std::ops::DerefMut for AffinityMut<'_> {
    fn deref_mut(&mut self) -> &mut Affinity {
        self.affinity
    }
}

impl Drop for AffinityMut<'_> {
    fn drop(&mut self) {
        *self.member = encode(self.affinity.member);
    }
}

/// How one source group of a subject's data service classifies it.
///
/// Packed into 12 bytes (no `Option` padding): the subject map's entries stay small, which
/// keeps lookups of subjects seen before in the CPU cache.
#[derive(Clone, Copy, Debug)]
pub(super) struct ClassifiedLeg {
    pub group: GroupId,
    /// Index of the first matching affinity rule, [`NO_RULE`] when none matched.
    rule: u32,
    /// The composite that rule produced (meaningless without a rule).
    composite: CompositeId,
}

const NO_RULE: u32 = u32::MAX;

impl ClassifiedLeg {
    pub const fn new(group: GroupId, rule: Option<(u32, CompositeId)>) -> Self {
        match rule {
            Some((rule, composite)) => ClassifiedLeg { group, rule, composite },
            None => ClassifiedLeg { group, rule: NO_RULE, composite: CompositeId(0) },
        }
    }

    /// The first matching affinity rule and the composite it produced.
    #[inline]
    pub fn rule(self) -> Option<(u32, CompositeId)> {
        (self.rule != NO_RULE).then_some((self.rule, self.composite))
    }
}

/// A subject's data service and its legs, one per source group (the first is the primary).
#[derive(Clone, Debug)]
pub(super) struct Classified {
    pub service: ServiceId,
    pub primary: ClassifiedLeg,
    /// Legs of further source groups; `None` (no allocation) for single-group services. A thin
    /// pointer, again for small entries.
    #[allow(clippy::box_collection)] // the extra allocation only for multi-group services
    pub others: Option<Box<Vec<ClassifiedLeg>>>,
}

impl Classified {
    pub fn legs(&self) -> impl Iterator<Item = ClassifiedLeg> + '_ {
        std::iter::once(self.primary).chain(self.others.iter().flat_map(|others| others.iter().copied()))
    }

    pub fn leg_count(&self) -> usize {
        1 + self.others.as_ref().map_or(0, |others| others.len())
    }
}

/// One bound leg of a subscription: the [`LegDecision`] it reports ([`Leg::decision`]), compact.
///
/// The composite is kept as its slot, not as a cloned `Arc<str>`: a leg holds a reference on
/// the composite's affinity, so the slot keeps its name while the leg lives (the module's
/// invariant), and binding a new subject clones no `Arc` for the leg.
pub(super) struct Leg {
    /// The source group, the matching rule and its composite, as classified.
    pub classified: ClassifiedLeg,
    /// The member serving, `None` while no member is up.
    pub member: Option<MemberId>,
    /// Zero-based priority group of `member` (`u32`: small subscriptions).
    pub priority_group: Option<u32>,
    /// Why `member` (as bound; `route` reports a remembered leg as sticky).
    pub reason: Reason,
    /// Sequence number of the event that bound it (the affinity's, when it was sticky).
    pub since: u64,
    /// Why the leg last moved to `member`, for `explain` (the member it left is kept by the
    /// affinity, for a leg with a composite: one byte here keeps subscriptions small).
    pub moved: Option<MoveReason>,
    /// The members a NODATA answer ruled out ([`Leg::tried`]); boxed, and `None` when empty
    /// (almost always): 8 bytes of every subscription rather than 24.
    #[allow(clippy::box_collection)] // a thin pointer, for small subscriptions
    tried: Option<Box<Vec<MemberId>>>,
}

impl Leg {
    /// A leg of `classified` that no member serves yet and no NODATA answer ruled out.
    pub fn new(classified: ClassifiedLeg) -> Self {
        Leg {
            classified,
            member: None,
            priority_group: None,
            reason: Reason::Unavailable,
            since: 0,
            moved: None,
            tried: None,
        }
    }

    /// The members a NODATA answer ruled out since the leg was last bound.
    pub fn tried(&self) -> &[MemberId] {
        self.tried.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Replaces [`Leg::tried`] (empty: nothing ruled out, nothing allocated).
    pub fn set_tried(&mut self, tried: Vec<MemberId>) {
        self.tried = (!tried.is_empty()).then(|| Box::new(tried));
    }

    /// The leg's source group.
    #[inline]
    pub fn group(&self) -> GroupId {
        self.classified.group
    }

    /// The leg's composite, when an affinity rule matched.
    #[inline]
    pub fn composite(&self) -> Option<CompositeId> {
        self.classified.rule().map(|(_, id)| id)
    }

    /// The decision this leg stands for.
    pub fn decision(&self, composites: &Composites) -> LegDecision {
        let rule = self.classified.rule();
        LegDecision {
            group: self.classified.group,
            member: self.member,
            priority_group: self.priority_group.map(|p| p as usize),
            composite: rule.map(|(_, id)| composites.name(id).clone()),
            rule: rule.map(|(rule, _)| rule as usize),
            reason: self.reason,
            since: Some(self.since),
        }
    }
}

pub(super) struct Subscription {
    pub order: u64,
    pub references: u32,
    pub service: ServiceId,
    /// The primary source group's leg, inline: a single-group service (the usual case)
    /// allocates no list of legs.
    pub primary: Leg,
    /// The legs of further source groups, in order; `None` (a thin pointer, no allocation) for
    /// a single-group service.
    #[allow(clippy::box_collection)] // a thin pointer, for small subscriptions
    pub others: Option<Box<Vec<Leg>>>,
}

impl Subscription {
    /// Every leg, the primary first.
    pub fn legs(&self) -> impl Iterator<Item = &Leg> + '_ {
        std::iter::once(&self.primary).chain(self.others.iter().flat_map(|others| others.iter()))
    }

    /// Number of legs (one per source group of the subject's data service).
    pub fn leg_count(&self) -> usize {
        1 + self.others.as_ref().map_or(0, |others| others.len())
    }

    /// Leg `index` (0 is the primary).
    pub fn leg(&self, index: usize) -> Option<&Leg> {
        match index {
            0 => Some(&self.primary),
            _ => self.others.as_ref()?.get(index - 1),
        }
    }

    /// Leg `index` (0 is the primary), writable.
    pub fn leg_mut(&mut self, index: usize) -> Option<&mut Leg> {
        match index {
            0 => Some(&mut self.primary),
            _ => self.others.as_mut()?.get_mut(index - 1),
        }
    }
}

/// Everything remembered about one subject.
pub(super) struct SubjectEntry {
    /// The cached classification; [`UNCLASSIFIED`] (not an `Option`, which would cost 8 bytes
    /// per entry) only for a subscribed subject whose classification a configuration change
    /// dropped. Read through [`SubjectEntry::classified`].
    classified: Classified,
    /// Index of the subscription in [`Subjects`]' slab, [`NO_SUBSCRIPTION`] when not subscribed:
    /// most cached subjects are not subscribed, and small entries keep lookups in cache.
    subscription: u32,
    /// Bits of the subject's hash ([`tag`]), compared before the subject itself: a probe that
    /// meets another subject's control byte reads no other key (a cache miss each). In the
    /// entry's padding, so free.
    tag: u32,
}

/// The bits of a subject's hash kept in its entry: the high half, which the hash table's
/// bucket index (the low bits) does not already make equal within a probe.
#[inline]
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// A subject and what is remembered about it: one bucket of [`Subjects`]' table.
struct Keyed {
    subject: Arc<str>,
    entry: SubjectEntry,
}

/// [`SubjectEntry::subscription`] of a subject that is not subscribed.
const NO_SUBSCRIPTION: u32 = u32::MAX;

const UNCLASSIFIED: Classified =
    Classified { service: ServiceId(u32::MAX), primary: ClassifiedLeg::new(GroupId(u32::MAX), None), others: None };

impl SubjectEntry {
    #[inline]
    pub fn classified(&self) -> Option<&Classified> {
        (self.classified.service != UNCLASSIFIED.service).then_some(&self.classified)
    }

    fn is_classified(&self) -> bool {
        self.classified().is_some()
    }

    #[inline]
    fn is_subscribed(&self) -> bool {
        self.subscription != NO_SUBSCRIPTION
    }
}

/// Subject → [`SubjectEntry`], and the subscriptions.
#[derive(Default)]
pub(super) struct Subjects {
    entries: HashTable<Keyed>,
    hasher: FxBuildHasher,
    /// The subscriptions, by [`SubjectEntry::subscription`]; `None` in a slot that `free`
    /// lists. A slab rather than a box per subscription: a new subject allocates no
    /// subscription of its own (`reserve` makes room for a batch at once).
    slab: Vec<Option<Subscription>>,
    free: Vec<u32>,
    subscribed: usize,
    cached_only: usize,
    /// Bytes the cached-only classifications hold ([`cached_bytes`] of each), bounded by the
    /// table (`CLASSIFICATION_CACHE_BYTES`).
    cached_bytes: usize,
}

/// What [`Subjects::find`] knows of a subject: its subscription and its cached classification.
pub(super) type Found<'a> = (Option<&'a Subscription>, Option<&'a Classified>);

/// What [`Subjects::lookup`] found for a subject.
pub(super) enum Lookup<'a> {
    /// Subscribed: its subscription.
    Subscribed(&'a mut Subscription),
    /// Classified but not subscribed: the map's copy of the name and the classification.
    Cached(Arc<str>, Classified),
    /// Neither.
    Unknown,
}

impl Subjects {
    /// The hash of `subject` in this map, for [`Subjects::lookup`] and [`Subjects::subscribe`].
    #[inline]
    pub fn hash(&self, subject: &str) -> u64 {
        self.hasher.hash_one(subject)
    }

    /// The bucket of `subject`, whose hash is `hash`.
    #[inline]
    fn get(&self, hash: u64, subject: &str) -> Option<&Keyed> {
        let tag = tag(hash);
        self.entries.find(hash, |keyed| keyed.entry.tag == tag && *keyed.subject == *subject)
    }

    /// What the map holds for `subject` (whose [`Subjects::hash`] is `hash`): one probe.
    #[inline]
    pub fn lookup(&mut self, hash: u64, subject: &str) -> Lookup<'_> {
        let Some(keyed) = find_mut(&mut self.entries, hash, subject) else {
            return Lookup::Unknown;
        };
        if let Some(subscription) = slot_mut(&mut self.slab, keyed.entry.subscription) {
            return Lookup::Subscribed(subscription);
        }
        match keyed.entry.classified() {
            Some(classified) => Lookup::Cached(keyed.subject.clone(), classified.clone()),
            None => Lookup::Unknown,
        }
    }

    /// The subscription and the cached classification of a subject the map holds.
    #[inline]
    pub fn find(&self, subject: &str) -> Option<Found<'_>> {
        let entry = &self.get(self.hash(subject), subject)?.entry;
        Some((slot(&self.slab, entry.subscription), entry.classified()))
    }

    /// The cached classification of a subject, if any.
    pub fn classified(&self, subject: &str) -> Option<&Classified> {
        self.get(self.hash(subject), subject).and_then(|keyed| keyed.entry.classified())
    }

    pub fn subscription(&self, subject: &str) -> Option<&Subscription> {
        self.get(self.hash(subject), subject).and_then(|keyed| slot(&self.slab, keyed.entry.subscription))
    }

    pub fn subscription_mut(&mut self, subject: &str) -> Option<&mut Subscription> {
        let index = self.get(self.hash(subject), subject)?.entry.subscription;
        slot_mut(&mut self.slab, index)
    }

    /// Every subscription, in no particular order.
    pub fn subscriptions(&self) -> impl Iterator<Item = (&Arc<str>, &Subscription)> + '_ {
        self.entries.iter().filter_map(|keyed| slot(&self.slab, keyed.entry.subscription).map(|s| (&keyed.subject, s)))
    }

    /// Subjects cached without a subscription (the tests' independent measure of the cache).
    #[cfg(test)]
    pub fn cached_only(&self) -> usize {
        self.cached_only
    }

    /// Bytes held by the subjects cached without a subscription ([`cached_bytes`] of each).
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    /// A subscribed subject became cached-only ([`Subjects::unsubscribe`]), holding `bytes`.
    pub fn note_cached(&mut self, bytes: usize) {
        self.cached_bytes += bytes;
    }

    /// Number of subscribed subjects.
    pub fn subscribed(&self) -> usize {
        self.subscribed
    }

    /// Remembers the classification of an unsubscribed subject, which holds `bytes`
    /// ([`cached_bytes`]).
    pub fn cache(&mut self, subject: &str, classified: Classified, bytes: usize) {
        let hash = self.hash(subject);
        match find_mut(&mut self.entries, hash, subject) {
            Some(Keyed { entry, .. }) => {
                if !entry.is_subscribed() && !entry.is_classified() {
                    self.cached_only += 1;
                    self.cached_bytes += bytes;
                }
                entry.classified = classified;
            }
            None => {
                let entry = SubjectEntry { classified, subscription: NO_SUBSCRIPTION, tag: tag(hash) };
                self.insert(hash, Keyed { subject: Arc::from(subject), entry });
                self.cached_only += 1;
                self.cached_bytes += bytes;
            }
        }
    }

    /// Adds a subject the map does not hold.
    fn insert(&mut self, hash: u64, keyed: Keyed) {
        let hasher = self.hasher;
        self.entries.insert_unique(hash, keyed, |keyed| hasher.hash_one(&*keyed.subject));
    }

    /// Records the subscription of an unsubscribed subject (whose [`Subjects::hash`] is
    /// `hash`), with its classification (one probe, whether or not the subject was cached);
    /// `cached` is what its cached classification held ([`cached_bytes`]; 0 when not cached).
    pub fn subscribe(
        &mut self,
        hash: u64,
        subject: Arc<str>,
        classified: Classified,
        subscription: Subscription,
        cached: usize,
    ) {
        let index = match self.free.pop() {
            Some(index) => {
                self.slab[index as usize] = Some(subscription);
                index
            }
            None => {
                self.slab.push(Some(subscription));
                // Fewer than `NO_SUBSCRIPTION` subscriptions: each holds a subject the map keys.
                (self.slab.len() - 1) as u32
            }
        };
        match find_mut(&mut self.entries, hash, &subject) {
            Some(Keyed { entry, .. }) => {
                debug_assert!(!entry.is_subscribed());
                if entry.is_classified() {
                    self.cached_only -= 1;
                    self.cached_bytes = self.cached_bytes.saturating_sub(cached);
                }
                entry.classified = classified;
                entry.subscription = index;
            }
            None => {
                let entry = SubjectEntry { classified, subscription: index, tag: tag(hash) };
                self.insert(hash, Keyed { subject, entry });
            }
        }
        self.subscribed += 1;
    }

    /// Takes a subject's subscription; its classification stays cached when it has one.
    pub fn unsubscribe(&mut self, subject: &str) -> Option<Subscription> {
        let hash = self.hash(subject);
        let tag = tag(hash);
        let Ok(mut occupied) =
            self.entries.find_entry(hash, |keyed| keyed.entry.tag == tag && *keyed.subject == *subject)
        else {
            return None;
        };
        let entry = &mut occupied.get_mut().entry;
        let index = entry.subscription;
        let subscription = self.slab.get_mut(index as usize)?.take()?;
        entry.subscription = NO_SUBSCRIPTION;
        self.free.push(index);
        self.subscribed -= 1;
        if entry.is_classified() {
            self.cached_only += 1;
        } else {
            occupied.remove();
        }
        Some(subscription)
    }

    /// Drops every cached classification (subscriptions stay): after a configuration change.
    pub fn forget_classifications(&mut self) {
        self.entries.retain(|keyed| {
            keyed.entry.classified = UNCLASSIFIED;
            keyed.entry.is_subscribed()
        });
        self.cached_only = 0;
        self.cached_bytes = 0;
    }

    /// Drops the unsubscribed subjects (bounds memory).
    pub fn evict_unsubscribed(&mut self) {
        self.entries.retain(|keyed| keyed.entry.is_subscribed());
        self.cached_only = 0;
        self.cached_bytes = 0;
    }

    /// Room for `additional` more subjects.
    pub fn reserve(&mut self, additional: usize) {
        let hasher = self.hasher;
        self.entries.reserve(additional, |keyed| hasher.hash_one(&*keyed.subject));
        self.slab.reserve(additional.saturating_sub(self.free.len()));
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.slab.clear();
        self.free.clear();
        self.subscribed = 0;
        self.cached_only = 0;
        self.cached_bytes = 0;
    }

    /// Every composite a cached classification names.
    pub fn referenced_composites(&self) -> impl Iterator<Item = CompositeId> + '_ {
        self.entries
            .iter()
            .filter_map(|keyed| keyed.entry.classified())
            .flat_map(|classified| classified.legs().filter_map(|leg| leg.rule().map(|(_, id)| id)))
    }
}

/// Bytes of an `Arc<str>`'s header (its two reference counts) before the characters.
const ARC_HEADER: usize = 2 * std::mem::size_of::<usize>();

/// The bytes a cached classification of `subject` holds: its map bucket and its name, the list
/// of further legs, and for each leg with a composite the composite's slot, index entry and
/// name. A composite shared by several subjects is counted for each: an upper bound, so the
/// cache's bound in bytes holds whatever the subjects share.
pub(super) fn cached_bytes(subject: &str, classified: &Classified, composites: &Composites) -> usize {
    let composite = |leg: ClassifiedLeg| {
        leg.rule().map_or(0, |(_, id)| {
            std::mem::size_of::<Slot>()
                + std::mem::size_of::<Indexed>()
                + std::mem::size_of::<u32>()
                + ARC_HEADER
                + composites.name(id).len()
        })
    };
    let others = classified.others.as_ref().map_or(0, |others| {
        std::mem::size_of::<Vec<ClassifiedLeg>>() + others.len() * std::mem::size_of::<ClassifiedLeg>()
    });
    std::mem::size_of::<Keyed>() + ARC_HEADER + subject.len() + others + classified.legs().map(composite).sum::<usize>()
}

// Small entries are the point of the packed layout: a subject map bucket (key + entry) of 48
// bytes keeps ~20 000 subjects within a core's L2 cache.
const _: () = assert!(std::mem::size_of::<SubjectEntry>() <= 32);
const _: () = assert!(std::mem::size_of::<Keyed>() <= 48);
// A subscription of a single-group service (every slab slot pays for one) in 72 bytes.
const _: () = assert!(std::mem::size_of::<Option<Subscription>>() <= 72);

/// The subscription in slot `index` of the slab (none for [`NO_SUBSCRIPTION`]).
#[inline]
fn slot(slab: &[Option<Subscription>], index: u32) -> Option<&Subscription> {
    slab.get(index as usize).and_then(Option::as_ref)
}

#[inline]
fn slot_mut(slab: &mut [Option<Subscription>], index: u32) -> Option<&mut Subscription> {
    slab.get_mut(index as usize).and_then(Option::as_mut)
}

/// The bucket of `subject`, whose hash is `hash`, writable (a function of the table, not a
/// method, so the other fields of [`Subjects`] stay usable).
#[inline]
fn find_mut<'a>(entries: &'a mut HashTable<Keyed>, hash: u64, subject: &str) -> Option<&'a mut Keyed> {
    let tag = tag(hash);
    entries.find_mut(hash, |keyed| keyed.entry.tag == tag && *keyed.subject == *subject)
}
