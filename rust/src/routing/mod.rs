//! Transport-agnostic affinity routing tables.
//!
//! Members (peers) with labels are arranged in ordered priority groups inside source groups;
//! data services pick their source groups by include-pattern. A subject matching a source
//! group's affinity rule gets a composite `affinity_key:captured` that sticks to one member
//! until that member fails, the table is reset or the last subscription holding the composite
//! is discarded. New composites are placed by a fixed, versioned hash ([`hash`],
//! `docs/hash-spec.md`); other subjects by the source group's fallback [`policy`].
//!
//! Pure data: the tables are fed liveness changes and subscriptions and report [`Event`]s with
//! sequence numbers; they open no socket, start no thread and read no clock.
//!
//! Code map: `types.rs` (identifiers, errors, decisions), `table.rs` (the table, configuration,
//! public operations), `placement.rs` (placing, binding, moving), `subjects.rs` (per-subject
//! entries and interned composites holding the affinities), `posix_regex.rs` (glibc regex) with
//! `ere_subset.rs` (the same answers without glibc for simple patterns).

mod ere_subset;
pub mod events;
pub mod hash;
mod placement;
pub mod policy;
pub mod posix_regex;
mod subjects;
mod table;
mod types;

#[cfg(test)]
mod tests;

pub use events::{Event, EventKind, MoveReason, Reason};
pub use hash::{affinity_hash, Selection, HASH_VERSION};
pub use posix_regex::{PosixRegex, RegexError};
pub use table::RoutingTable;
pub use types::{Explanation, GroupId, LegDecision, MemberId, NoDataStatus, RoutingError, ServiceId, SourceGroupSpec};

use std::hash::{BuildHasherDefault, Hasher};

/// A fast, unkeyed hasher (the rustc "Fx" scheme) for the tables' private maps.
///
/// Not part of the affinity hash contract (that is [`hash`]). Unkeyed, so a client choosing
/// subjects could provoke collisions; acceptable for a control-plane table, noted in the docs.
#[derive(Clone, Copy, Default)]
pub(crate) struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let word = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let len = bytes.len();
        if len >= 8 {
            let mut at = 0;
            while at + 8 <= len {
                self.add(word(at));
                at += 8;
            }
            if at < len {
                // The last 8 bytes, overlapping the previous word: no byte-by-byte tail.
                self.add(word(len - 8));
            }
        } else if len > 0 {
            let mut word = [0u8; 8];
            word[..len].copy_from_slice(bytes);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A hash map with [`FxHasher`] (the tables' maps; also the subject router's).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FxHasher>>;
