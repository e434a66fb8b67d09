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
pub use table::{RoutingTable, CLASSIFICATION_CACHE_BYTES};
pub use types::{
    Explanation, GroupId, LegDecision, MemberId, Move, NoDataStatus, RoutingError, ServiceId, SourceGroupSpec,
};

/// The tables' private maps (and the subject router's): `rustc-hash`'s fast, unkeyed hasher.
///
/// Not part of the affinity hash contract (that is [`hash`]). Unkeyed, so a client choosing
/// subjects could provoke collisions; acceptable for a control-plane table, noted in the docs.
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;
