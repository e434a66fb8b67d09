//! 64-bit counters shared between the driver and its clients (Aeron's `CountersManager` /
//! `CountersReader` layout).
//!
//! Two buffers. The values buffer holds one [`COUNTER_LENGTH`]-byte slot per counter (a cache-line
//! pair, so two counters never share a line):
//!
//! ```text
//! 0   value            i64   written by exactly one side (the counter's owner)
//! 8   registration id  i64   the publication / subscription / image it belongs to
//! 16  owner id         i64   the client that owns it (0 = driver)
//! 24  reference id     i64
//! 32  padding to 128
//! ```
//!
//! The metadata buffer holds one [`METADATA_LENGTH`]-byte record per counter:
//!
//! ```text
//! 0   state            i32   0 unused, 1 allocated, -1 reclaimed (written last, Release)
//! 4   type id          i32   see `type_id`
//! 8   free-for-reuse deadline (epoch ms) i64
//! 16  key              112 bytes (type-specific: session id, stream id...)
//! 128 label length     i32
//! 132 label            380 bytes UTF-8
//! ```
//!
//! Only the driver allocates and frees. A freed counter is reused only after a deadline, so a
//! reader that still holds its id does not see another counter's value.

use std::collections::VecDeque;

use super::buffer::Region;
use super::error::ShmError;

/// Bytes per value slot.
pub const COUNTER_LENGTH: usize = 128;
/// Bytes per metadata record.
pub const METADATA_LENGTH: usize = 512;
/// Largest key.
pub const MAX_KEY_LENGTH: usize = 112;
/// Largest label in bytes.
pub const MAX_LABEL_LENGTH: usize = 380;

/// Record states.
pub mod state {
    /// Never used.
    pub const UNUSED: i32 = 0;
    /// Live.
    pub const ALLOCATED: i32 = 1;
    /// Freed; reusable after its deadline.
    pub const RECLAIMED: i32 = -1;
}

mod value_field {
    pub const VALUE: usize = 0;
    pub const REGISTRATION_ID: usize = 8;
    pub const OWNER_ID: usize = 16;
    pub const REFERENCE_ID: usize = 24;
}

mod meta_field {
    pub const STATE: usize = 0;
    pub const TYPE_ID: usize = 4;
    pub const FREE_FOR_REUSE_DEADLINE: usize = 8;
    pub const KEY: usize = 16;
    pub const LABEL_LENGTH: usize = 128;
    pub const LABEL: usize = 132;
}

/// Counter type ids (Aeron's numbering where Aeron has one).
pub mod type_id {
    /// A driver-wide system counter (key: none).
    pub const SYSTEM: i32 = 0;
    /// Publisher limit (key: session id, stream id).
    pub const PUBLISHER_LIMIT: i32 = 1;
    /// Sender position.
    pub const SENDER_POSITION: i32 = 2;
    /// Receiver high-water mark.
    pub const RECEIVER_HWM: i32 = 3;
    /// Subscriber position.
    pub const SUBSCRIBER_POSITION: i32 = 4;
    /// Receiver position.
    pub const RECEIVER_POSITION: i32 = 5;
    /// Sender limit (flow control).
    pub const SENDER_LIMIT: i32 = 9;
    /// Client heartbeat timestamp (key: client id).
    pub const CLIENT_HEARTBEAT: i32 = 11;
    /// Publisher position.
    pub const PUBLISHER_POSITION: i32 = 12;
    /// Receivers currently counted by flow control.
    pub const FLOW_CONTROL_RECEIVERS: i32 = 17;
}

/// Layout of the two buffers: `values` holds `capacity` slots, `metadata` as many records.
fn capacity_of(metadata: &Region, values: &Region) -> Result<usize, ShmError> {
    let count = values.capacity() / COUNTER_LENGTH;
    if values.capacity() % COUNTER_LENGTH != 0 || metadata.capacity() != count * METADATA_LENGTH {
        return Err(ShmError::invalid(
            "counters",
            None,
            format!(
                "values {} bytes and metadata {} bytes: expected a multiple of {COUNTER_LENGTH} and {} times as much metadata",
                values.capacity(),
                metadata.capacity(),
                METADATA_LENGTH / COUNTER_LENGTH
            ),
        ));
    }
    Ok(count)
}

/// One counter as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterInfo {
    /// Counter id (slot index).
    pub id: usize,
    /// Current value.
    pub value: i64,
    /// Type id (see [`type_id`]).
    pub type_id: i32,
    /// Registration id of the resource it belongs to.
    pub registration_id: i64,
    /// Owning client (0 = the driver).
    pub owner_id: i64,
    /// Key bytes.
    pub key: Vec<u8>,
    /// Label.
    pub label: String,
}

/// Reads counters without writing anything (for clients and `affinity stat`).
#[derive(Clone, Debug)]
pub struct CountersReader {
    metadata: Region,
    values: Region,
    capacity: usize,
}

impl CountersReader {
    /// Wraps the metadata and values buffers after checking their lengths agree.
    pub fn new(metadata: Region, values: Region) -> Result<Self, ShmError> {
        let capacity = capacity_of(&metadata, &values)?;
        Ok(Self { metadata, values, capacity })
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// State of counter `id` (see [`state`]).
    pub fn state(&self, id: usize) -> Result<i32, ShmError> {
        self.metadata.get_i32_acquire(self.meta_offset(id)? + meta_field::STATE)
    }

    /// Current value of counter `id`.
    pub fn value(&self, id: usize) -> Result<i64, ShmError> {
        self.values.get_i64_acquire(self.value_offset(id)? + value_field::VALUE)
    }

    fn meta_offset(&self, id: usize) -> Result<usize, ShmError> {
        if id >= self.capacity {
            return Err(ShmError::Parameter(format!("counter id {id} is beyond the {} counters", self.capacity)));
        }
        Ok(id * METADATA_LENGTH)
    }

    fn value_offset(&self, id: usize) -> Result<usize, ShmError> {
        self.meta_offset(id)?;
        Ok(id * COUNTER_LENGTH)
    }

    /// Full description of counter `id` if it is allocated.
    pub fn info(&self, id: usize) -> Result<Option<CounterInfo>, ShmError> {
        match self.inspect(id)? {
            Some((_, Some(problem))) => Err(problem),
            Some((info, None)) => Ok(Some(info)),
            None => Ok(None),
        }
    }

    /// Counter `id`, if allocated, read as far as it can be: a corrupt label is left empty and
    /// the error saying what is wrong and where comes with it (for `affinity stat`, which shows
    /// the other counters and marks this one).
    pub fn inspect(&self, id: usize) -> Result<Option<(CounterInfo, Option<ShmError>)>, ShmError> {
        if self.state(id)? != state::ALLOCATED {
            return Ok(None);
        }
        let meta = self.meta_offset(id)?;
        let value = self.value_offset(id)?;
        let mut key = Vec::new();
        self.metadata.read_into(meta + meta_field::KEY, MAX_KEY_LENGTH, &mut key)?;
        let mut info = CounterInfo {
            id,
            value: self.values.get_i64_acquire(value + value_field::VALUE)?,
            type_id: self.metadata.get_i32(meta + meta_field::TYPE_ID)?,
            registration_id: self.values.get_i64(value + value_field::REGISTRATION_ID)?,
            owner_id: self.values.get_i64(value + value_field::OWNER_ID)?,
            key,
            label: String::new(),
        };
        let label_length = self.metadata.get_i32(meta + meta_field::LABEL_LENGTH)?;
        let Some(label_length) = usize::try_from(label_length).ok().filter(|&l| l <= MAX_LABEL_LENGTH) else {
            let detail = format!("counter {id}: label length {label_length} (at most {MAX_LABEL_LENGTH})");
            return Ok(Some((
                info,
                Some(ShmError::corrupt("counters metadata", meta + meta_field::LABEL_LENGTH, detail)),
            )));
        };
        let mut label = Vec::new();
        self.metadata.read_into(meta + meta_field::LABEL, label_length, &mut label)?;
        info.label = String::from_utf8_lossy(&label).into_owned();
        Ok(Some((info, None)))
    }

    /// Every allocated counter in id order, each with what is wrong with it if it is corrupt
    /// (see [`CountersReader::inspect`]); stops at the first never-used slot.
    pub fn inspect_allocated(&self) -> Result<Vec<(CounterInfo, Option<ShmError>)>, ShmError> {
        let mut out = Vec::new();
        for id in 0..self.capacity {
            match self.state(id)? {
                state::UNUSED => break,
                state::ALLOCATED => out.extend(self.inspect(id)?),
                _ => {}
            }
        }
        Ok(out)
    }

    /// Every allocated counter, in id order; stops at the first never-used slot.
    pub fn allocated(&self) -> Result<Vec<CounterInfo>, ShmError> {
        let mut out = Vec::new();
        for id in 0..self.capacity {
            match self.state(id)? {
                state::UNUSED => break,
                state::ALLOCATED => out.extend(self.info(id)?),
                _ => {}
            }
        }
        Ok(out)
    }

    /// A handle on counter `id`'s value slot (for the side that owns it).
    pub fn counter(&self, id: usize) -> Result<Counter, ShmError> {
        let offset = self.value_offset(id)?;
        Ok(Counter { id, region: self.values.slice(offset, 8)? })
    }
}

/// One counter value; written by exactly one side.
#[derive(Clone, Debug)]
pub struct Counter {
    id: usize,
    region: Region,
}

impl Counter {
    /// Counter id.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Reads the value (`Acquire`).
    pub fn get(&self) -> Result<i64, ShmError> {
        self.region.get_i64_acquire(0)
    }

    /// Publishes a new value (`Release`); only the counter's one writer calls it.
    pub fn set(&self, value: i64) -> Result<(), ShmError> {
        self.region.put_i64_release(0, value)
    }

    /// Adds `delta` (single writer: a load and a store, no atomic read-modify-write needed).
    pub fn add(&self, delta: i64) -> Result<(), ShmError> {
        let value = self.region.get_i64(0)?;
        self.region.put_i64_release(0, value.saturating_add(delta))
    }

    /// Raises the value to `value` if larger; `true` when it did.
    pub fn propose_max(&self, value: i64) -> Result<bool, ShmError> {
        if value > self.region.get_i64(0)? {
            self.region.put_i64_release(0, value)?;
            return Ok(true);
        }
        Ok(false)
    }
}

/// Allocates and frees counters: the driver's side, one instance per counters file.
#[derive(Debug)]
pub struct CountersManager {
    reader: CountersReader,
    high_water: usize,
    free: VecDeque<usize>,
    reuse_timeout_ms: i64,
    /// Owner id → counters allocated with it (for per-client quotas); owners with none are
    /// removed, so the map is bounded by the counters.
    owned: std::collections::HashMap<i64, usize>,
}

impl CountersManager {
    /// Manages freshly zeroed buffers; freed ids wait `reuse_timeout_ms` before reuse.
    pub fn new(metadata: Region, values: Region, reuse_timeout_ms: i64) -> Result<Self, ShmError> {
        Ok(Self {
            reader: CountersReader::new(metadata, values)?,
            high_water: 0,
            free: VecDeque::new(),
            reuse_timeout_ms,
            owned: std::collections::HashMap::new(),
        })
    }

    /// How many allocated counters have `owner_id` as their owner.
    pub fn owned_by(&self, owner_id: i64) -> usize {
        self.owned.get(&owner_id).copied().unwrap_or(0)
    }

    /// The read side of the same buffers.
    pub fn reader(&self) -> &CountersReader {
        &self.reader
    }

    /// Allocates a counter; `label` is cut at [`MAX_LABEL_LENGTH`] bytes (on a char boundary).
    pub fn allocate(
        &mut self,
        type_id: i32,
        key: &[u8],
        label: &str,
        registration_id: i64,
        owner_id: i64,
        now_ms: i64,
    ) -> Result<Counter, ShmError> {
        if key.len() > MAX_KEY_LENGTH {
            return Err(ShmError::Parameter(format!("counter key of {} bytes exceeds {MAX_KEY_LENGTH}", key.len())));
        }
        let id = self.next_id(now_ms)?;
        let meta = id * METADATA_LENGTH;
        let value = id * COUNTER_LENGTH;
        let metadata = &self.reader.metadata;
        let values = &self.reader.values;
        values.put_i64(value + value_field::REGISTRATION_ID, registration_id)?;
        values.put_i64(value + value_field::OWNER_ID, owner_id)?;
        values.put_i64(value + value_field::REFERENCE_ID, 0)?;
        values.put_i64_release(value + value_field::VALUE, 0)?;
        metadata.put_i32(meta + meta_field::TYPE_ID, type_id)?;
        metadata.put_i64(meta + meta_field::FREE_FOR_REUSE_DEADLINE, 0)?;
        metadata.set_memory(meta + meta_field::KEY, MAX_KEY_LENGTH, 0)?;
        metadata.put_bytes(meta + meta_field::KEY, key)?;
        let label = truncate_utf8(label, MAX_LABEL_LENGTH);
        metadata.put_bytes(meta + meta_field::LABEL, label.as_bytes())?;
        metadata.put_i32(meta + meta_field::LABEL_LENGTH, label.len() as i32)?;
        metadata.put_i32_release(meta + meta_field::STATE, state::ALLOCATED)?;
        *self.owned.entry(owner_id).or_insert(0) += 1;
        self.reader.counter(id)
    }

    fn next_id(&mut self, now_ms: i64) -> Result<usize, ShmError> {
        if let Some(&id) = self.free.front() {
            let deadline = self.reader.metadata.get_i64(id * METADATA_LENGTH + meta_field::FREE_FOR_REUSE_DEADLINE)?;
            if now_ms >= deadline {
                self.free.pop_front();
                return Ok(id);
            }
        }
        if self.high_water >= self.reader.capacity {
            return Err(ShmError::Parameter(format!("all {} counters are in use", self.reader.capacity)));
        }
        self.high_water += 1;
        Ok(self.high_water - 1)
    }

    /// Frees counter `id`; it becomes reusable `reuse_timeout_ms` after `now_ms`.
    pub fn free(&mut self, id: usize, now_ms: i64) -> Result<(), ShmError> {
        if self.reader.state(id)? != state::ALLOCATED {
            return Err(ShmError::Parameter(format!("counter {id} is not allocated")));
        }
        let meta = id * METADATA_LENGTH;
        let owner_id = self.reader.values.get_i64(id * COUNTER_LENGTH + value_field::OWNER_ID)?;
        if let std::collections::hash_map::Entry::Occupied(mut owned) = self.owned.entry(owner_id) {
            *owned.get_mut() -= 1;
            if *owned.get() == 0 {
                owned.remove();
            }
        }
        self.reader
            .metadata
            .put_i64(meta + meta_field::FREE_FOR_REUSE_DEADLINE, now_ms.saturating_add(self.reuse_timeout_ms))?;
        self.reader.metadata.put_i32_release(meta + meta_field::STATE, state::RECLAIMED)?;
        self.free.push_back(id);
        Ok(())
    }
}

fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::file::anonymous;

    fn manager(count: usize) -> CountersManager {
        CountersManager::new(
            anonymous(count * METADATA_LENGTH).unwrap(),
            anonymous(count * COUNTER_LENGTH).unwrap(),
            1_000,
        )
        .unwrap()
    }

    #[test]
    fn allocated_counters_are_listed_with_label_key_and_value() {
        let mut counters = manager(8);
        let sent = counters.allocate(type_id::SYSTEM, &[], "bytes sent", 0, 0, 0).unwrap();
        let limit = counters.allocate(type_id::PUBLISHER_LIMIT, &[1, 2], "pub-lmt: 7 1001", 42, 9, 0).unwrap();
        sent.add(100).unwrap();
        sent.add(23).unwrap();
        limit.set(65536).unwrap();
        assert!(limit.propose_max(70_000).unwrap());
        assert!(!limit.propose_max(10).unwrap());
        let listed = counters.reader().allocated().unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!((listed[0].label.as_str(), listed[0].value), ("bytes sent", 123));
        assert_eq!(listed[1].type_id, type_id::PUBLISHER_LIMIT);
        assert_eq!((listed[1].registration_id, listed[1].owner_id, listed[1].value), (42, 9, 70_000));
        assert_eq!(&listed[1].key[..3], &[1, 2, 0]);
    }

    #[test]
    fn counters_are_counted_per_owner_until_freed() {
        let mut counters = manager(4);
        let a = counters.allocate(type_id::SYSTEM, &[], "a", 0, 7, 0).unwrap();
        counters.allocate(type_id::SYSTEM, &[], "b", 0, 7, 0).unwrap();
        counters.allocate(type_id::SYSTEM, &[], "c", 0, 8, 0).unwrap();
        assert_eq!((counters.owned_by(7), counters.owned_by(8), counters.owned_by(9)), (2, 1, 0));
        counters.free(a.id(), 0).unwrap();
        assert!(counters.free(a.id(), 0).is_err());
        assert_eq!(counters.owned_by(7), 1, "a refused double free counts nothing");
    }

    #[test]
    fn freed_counters_are_reused_only_after_the_deadline() {
        let mut counters = manager(2);
        let a = counters.allocate(type_id::SYSTEM, &[], "a", 0, 0, 0).unwrap();
        counters.allocate(type_id::SYSTEM, &[], "b", 0, 0, 0).unwrap();
        assert!(counters.allocate(type_id::SYSTEM, &[], "c", 0, 0, 0).unwrap_err().to_string().contains("in use"));
        counters.free(a.id(), 100).unwrap();
        assert!(counters.free(a.id(), 100).is_err(), "double free is refused");
        assert!(counters.allocate(type_id::SYSTEM, &[], "c", 0, 0, 500).is_err(), "before the deadline");
        let c = counters.allocate(type_id::SYSTEM, &[], "c", 0, 0, 1_100).unwrap();
        assert_eq!(c.id(), a.id());
        assert_eq!(c.get().unwrap(), 0);
        assert_eq!(counters.reader().allocated().unwrap().len(), 2);
    }

    #[test]
    fn long_labels_are_cut_and_corrupt_label_lengths_are_errors() {
        let mut counters = manager(2);
        let label = "é".repeat(300);
        let c = counters.allocate(type_id::SYSTEM, &[], &label, 0, 0, 0).unwrap();
        let info = counters.reader().info(c.id()).unwrap().unwrap();
        assert!(info.label.len() <= MAX_LABEL_LENGTH && info.label.chars().all(|ch| ch == 'é'));
        counters.reader().metadata.put_i32(meta_field::LABEL_LENGTH, 10_000).unwrap();
        assert!(matches!(counters.reader().info(0), Err(ShmError::Corrupt { .. })));
        let (partial, problem) = counters.reader().inspect(0).unwrap().unwrap();
        assert_eq!((partial.id, partial.label.as_str()), (0, ""));
        let problem = problem.expect("the corrupt label is reported").to_string();
        assert!(problem.contains("label length 10000") && problem.contains("128"), "{problem}");
        assert!(counters.reader().value(2).is_err());
        assert!(counters.allocate(0, &[0; 113], "k", 0, 0, 0).is_err());
    }

    #[test]
    fn one_corrupt_label_leaves_the_other_counters_readable() {
        let mut counters = manager(4);
        for label in ["first", "second", "third"] {
            counters.allocate(type_id::SYSTEM, &[], label, 0, 0, 0).unwrap().set(7).unwrap();
        }
        let reader = counters.reader();
        reader.metadata.put_i32(METADATA_LENGTH + meta_field::LABEL_LENGTH, -3).unwrap();
        assert!(reader.allocated().is_err(), "the strict reader refuses the whole list");
        let listed = reader.inspect_allocated().unwrap();
        let labels: Vec<&str> = listed.iter().map(|(info, _)| info.label.as_str()).collect();
        assert_eq!(labels, ["first", "", "third"]);
        assert_eq!(listed[1].0.value, 7, "the value of the corrupt counter is still shown");
        let problem = listed[1].1.as_ref().expect("marked").to_string();
        assert!(problem.contains("counter 1: label length -3"), "{problem}");
        assert!(listed[0].1.is_none() && listed[2].1.is_none());
    }

    #[test]
    fn mismatched_buffer_lengths_are_refused() {
        assert!(CountersReader::new(anonymous(4096).unwrap(), anonymous(4096).unwrap()).is_err());
    }
}
