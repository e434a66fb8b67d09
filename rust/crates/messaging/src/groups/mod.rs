//! Hashed consumer groups: keyed, ordered, sticky delivery with no-loss failover, no broker.
//!
//! * [`GroupConfig`] — a validated group definition (HP, HC, QC, QS) and the key → bucket →
//!   queue mapping (`bucket = affinity_hash(key) % HC`, `queue = bucket % QC`, the versioned
//!   hash of `docs/hash-spec.md`).
//! * [`publisher`] — sans-IO publisher state: per-queue retention (QS bytes), sequence numbers,
//!   acked floor, owner tracking and resend.
//! * [`consumer`] — sans-IO consumer state: queue ownership (claiming → active → releasing →
//!   released, epochs, settle period, primary/backup cycle, failover) and per-(producer, queue)
//!   deduplication.
//! * [`runtime`] — runs both over [`crate::client`]: one inbox per member, discovery files,
//!   a background thread for heartbeats and timers.
//!
//! The design is in `docs/groups.md`; message layouts in `docs/control-plane.md`.

pub mod bootstrap;
pub mod consumer;
pub mod discovery;
pub mod publisher;
pub mod registry;
pub mod runtime;

#[cfg(test)]
mod chaos_tests;

use std::fmt;
use std::time::Duration;

use crate::control::limits::{MAX_NAME_LENGTH, MAX_QUEUE_COUNT};
use crate::control::member::MemberError;
use crate::control::Timing;
use crate::routing::hash::{fmix64, fnv1a64};

/// Smallest queue size (QS) a definition may have, in bytes.
pub const MIN_QUEUE_SIZE: u64 = 1024;
/// Largest queue size (QS), in bytes (retention is in memory).
pub const MAX_QUEUE_SIZE: u64 = 1 << 34;
/// Largest hash count (HC).
pub const MAX_HASH_COUNT: u32 = 1 << 20;
/// Default primary/backup cycle.
pub const DEFAULT_CYCLE: Duration = Duration::from_secs(30);
/// Default publisher resend timeout.
pub const DEFAULT_RESEND_TIMEOUT: Duration = Duration::from_secs(1);
/// Settle period of a claim that another live candidate could contend, in heartbeat intervals:
/// claims are announced at once, so a contending claim made before ours or at the same time is
/// heard well within one interval. A claim nobody else could contend does not settle
/// (`docs/groups.md`, "Ownership and epochs").
pub const SETTLE_HEARTBEATS: u32 = 1;
/// Settle period of a claim made while the group starts up (epoch 1), in heartbeat intervals:
/// consumers started together may come up a few intervals apart, and a later starter must
/// still win its primaries, so the first claims wait longer than failover claims.
pub const STARTUP_SETTLE_HEARTBEATS: u32 = 3;
/// Target size of one DATA message: records are packed up to this many bytes.
pub const DATA_MESSAGE_TARGET: usize = 16 * 1024;

/// Why a group operation failed.
#[derive(Debug)]
pub enum GroupError {
    /// The group definition or a member argument is invalid (Python: `ConfigError`).
    Definition(String),
    /// A record is larger than the group can carry (Python: `MessageTooLongError`).
    RecordTooLong {
        /// Encoded record length.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// The member was closed.
    Closed,
    /// The transport failed.
    Transport(crate::error::Error),
    /// A registry file operation failed.
    Registry(String),
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupError::Definition(message) => write!(f, "{message}"),
            GroupError::RecordTooLong { length, max } => {
                write!(f, "record of {length} bytes exceeds the maximum of {max} bytes")
            }
            GroupError::Closed => write!(f, "group member is closed"),
            GroupError::Transport(error) => write!(f, "{error}"),
            GroupError::Registry(message) => write!(f, "registry: {message}"),
        }
    }
}

impl std::error::Error for GroupError {}

impl From<MemberError> for GroupError {
    fn from(error: MemberError) -> Self {
        match error {
            MemberError::Config(message) => GroupError::Definition(message),
            MemberError::Transport(error) => GroupError::Transport(error),
        }
    }
}

impl From<crate::error::Error> for GroupError {
    fn from(error: crate::error::Error) -> Self {
        GroupError::Transport(error)
    }
}

/// The bucket of `key`: `affinity_hash(key) % hash_count` (`hash_count` ≥ 1).
pub fn bucket_of(key: &[u8], hash_count: u32) -> u32 {
    (fmix64(fnv1a64(key)) % u64::from(hash_count.max(1))) as u32
}

/// The queue of `bucket`: `bucket % queue_count` (`queue_count` ≥ 1).
pub fn queue_of_bucket(bucket: u32, queue_count: u32) -> u32 {
    bucket % queue_count.max(1)
}

/// The queue of `key`.
pub fn queue_of(key: &[u8], hash_count: u32, queue_count: u32) -> u32 {
    queue_of_bucket(bucket_of(key, hash_count), queue_count)
}

/// Checks HC and QC as a definition must have them (QC ≥ 1, HC ≥ QC, both bounded).
pub fn check_counts(hash_count: u32, queue_count: u32) -> Result<(), GroupError> {
    if queue_count < 1 {
        return Err(GroupError::Definition(format!("queue count QC={queue_count}: must be at least 1")));
    }
    if queue_count as usize > MAX_QUEUE_COUNT {
        return Err(GroupError::Definition(format!("queue count QC={queue_count}: must be at most {MAX_QUEUE_COUNT}")));
    }
    if hash_count < queue_count {
        return Err(GroupError::Definition(format!(
            "hash count HC={hash_count} is smaller than queue count QC={queue_count}: HC >= QC is required"
        )));
    }
    if hash_count > MAX_HASH_COUNT {
        return Err(GroupError::Definition(format!("hash count HC={hash_count}: must be at most {MAX_HASH_COUNT}")));
    }
    Ok(())
}

/// A validated group definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// Group name (also the discovery folder name).
    pub name: String,
    /// Hash prefix HP (subjects travel as `HP/bucket/topic`).
    pub hash_prefix: String,
    /// Hash count HC.
    pub hash_count: u32,
    /// Queue count QC.
    pub queue_count: u32,
    /// Queue size QS: bytes a publisher retains per queue.
    pub queue_size: u64,
}

impl GroupConfig {
    /// Validates a definition: a non-empty name of `[A-Za-z0-9._-]`, HC ≥ QC ≥ 1, QS bounded.
    pub fn new(
        name: &str,
        hash_prefix: &str,
        hash_count: u32,
        queue_count: u32,
        queue_size: u64,
    ) -> Result<GroupConfig, GroupError> {
        let name_ok = !name.is_empty()
            && name.len() <= MAX_NAME_LENGTH
            && !name.starts_with('.')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !name_ok {
            return Err(GroupError::Definition(format!(
                "group name {name:?}: must be 1..={MAX_NAME_LENGTH} characters of [A-Za-z0-9._-], not starting with '.'"
            )));
        }
        if hash_prefix.is_empty() || hash_prefix.len() > MAX_NAME_LENGTH {
            return Err(GroupError::Definition(format!(
                "hash prefix {hash_prefix:?}: must be 1..={MAX_NAME_LENGTH} bytes"
            )));
        }
        check_counts(hash_count, queue_count)?;
        if !(MIN_QUEUE_SIZE..=MAX_QUEUE_SIZE).contains(&queue_size) {
            return Err(GroupError::Definition(format!(
                "queue size QS={queue_size}: must be between {MIN_QUEUE_SIZE} and {MAX_QUEUE_SIZE} bytes"
            )));
        }
        Ok(GroupConfig {
            name: name.to_owned(),
            hash_prefix: hash_prefix.to_owned(),
            hash_count,
            queue_count,
            queue_size,
        })
    }

    /// The fingerprint members compare: name, HP, HC and QC (not QS, which is per publisher).
    pub fn fingerprint(&self) -> u64 {
        let mut bytes = Vec::with_capacity(self.name.len() + self.hash_prefix.len() + 10);
        bytes.extend_from_slice(self.name.as_bytes());
        bytes.push(0xff);
        bytes.extend_from_slice(self.hash_prefix.as_bytes());
        bytes.push(0xff);
        bytes.extend_from_slice(&self.hash_count.to_le_bytes());
        bytes.extend_from_slice(&self.queue_count.to_le_bytes());
        fmix64(fnv1a64(&bytes))
    }

    /// The bucket of `key`.
    pub fn bucket(&self, key: &[u8]) -> u32 {
        bucket_of(key, self.hash_count)
    }

    /// The queue of `bucket`.
    pub fn queue_of_bucket(&self, bucket: u32) -> u32 {
        queue_of_bucket(bucket, self.queue_count)
    }

    /// The subject a record carries: `HP/bucket/topic`.
    pub fn subject(&self, bucket: u32, topic: &str) -> String {
        format!("{}/{bucket}/{topic}", self.hash_prefix)
    }
}

/// Checks a consumer's `index` / `count` against QC.
pub fn check_consumer(index: u32, count: u32, queue_count: u32) -> Result<(), GroupError> {
    if count < 1 {
        return Err(GroupError::Definition(format!("consumer count={count}: must be at least 1")));
    }
    if count > queue_count {
        return Err(GroupError::Definition(format!(
            "consumer count={count} exceeds the queue count QC={queue_count}: count <= QC is required"
        )));
    }
    if index >= count {
        return Err(GroupError::Definition(format!("consumer index={index}: must be less than count={count}")));
    }
    Ok(())
}

/// The settle period of a claim another live candidate could contend.
pub fn settle(timing: &Timing) -> Duration {
    timing.heartbeat_interval * SETTLE_HEARTBEATS
}

/// The settle period of a claim made while the group starts up (epoch 1).
pub fn startup_settle(timing: &Timing) -> Duration {
    timing.heartbeat_interval * STARTUP_SETTLE_HEARTBEATS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_refuse_bad_counts() {
        assert!(GroupConfig::new("orders", "hp", 8, 16, 1 << 20).is_err());
        assert!(GroupConfig::new("orders", "hp", 8, 0, 1 << 20).is_err());
        assert!(GroupConfig::new("orders", "hp", 8, 4, 10).is_err());
        assert!(GroupConfig::new("../x", "hp", 8, 4, 1 << 20).is_err());
        assert!(GroupConfig::new("orders", "hp", 8, 4, 1 << 20).is_ok());
        assert!(check_consumer(2, 2, 4).is_err());
        assert!(check_consumer(0, 5, 4).is_err());
        assert!(check_consumer(1, 2, 4).is_ok());
    }

    #[test]
    fn queue_is_bucket_mod_queue_count() {
        for key in [&b""[..], b"a", b"order-17", "é".as_bytes()] {
            let bucket = bucket_of(key, 64);
            assert!(bucket < 64);
            assert_eq!(queue_of(key, 64, 8), bucket % 8);
            assert_eq!(u64::from(bucket), crate::routing::hash::fmix64(fnv1a64(key)) % 64);
        }
    }

    #[test]
    fn fingerprint_depends_on_name_prefix_and_counts() {
        let a = GroupConfig::new("orders", "hp", 8, 4, 1 << 20).unwrap();
        let b = GroupConfig::new("orders", "hp", 8, 2, 1 << 20).unwrap();
        let c = GroupConfig::new("orders", "hp", 8, 4, 1 << 21).unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint(), c.fingerprint());
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod state_tests;

#[cfg(test)]
mod vector_tests {
    use super::*;

    fn key_of(case: &serde_json::Value) -> Vec<u8> {
        if let Some(repeat) = case.get("key_repeat") {
            let text = repeat["text"].as_str().unwrap();
            return text.repeat(repeat["count"].as_u64().unwrap() as usize).into_bytes();
        }
        let hex = case["key_hex"].as_str().unwrap();
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        if let Some(text) = case.get("key").and_then(|k| k.as_str()) {
            assert_eq!(text.as_bytes(), bytes.as_slice(), "key and key_hex agree");
        }
        bytes
    }

    #[test]
    fn reproduces_the_group_hash_vectors() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/vectors/group_hash.json");
        let text = std::fs::read_to_string(path).expect("tests/vectors/group_hash.json");
        let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(vectors["version"].as_u64(), Some(u64::from(crate::routing::hash::HASH_VERSION)));
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        let mut checked = 0;
        for case in cases {
            let key = key_of(case);
            let fnv = u64::from_str_radix(case["fnv1a64"].as_str().unwrap(), 16).unwrap();
            let hash = u64::from_str_radix(case["hash"].as_str().unwrap(), 16).unwrap();
            assert_eq!(fnv1a64(&key), fnv);
            assert_eq!(fmix64(fnv1a64(&key)), hash);
            for bucket in case["buckets"].as_array().unwrap() {
                let hash_count = bucket["hash_count"].as_u64().unwrap() as u32;
                assert_eq!(u64::from(bucket_of(&key, hash_count)), bucket["bucket"].as_u64().unwrap());
                for queue in bucket["queues"].as_array().unwrap() {
                    let queue_count = queue["queue_count"].as_u64().unwrap() as u32;
                    assert_eq!(u64::from(queue_of(&key, hash_count, queue_count)), queue["queue"].as_u64().unwrap());
                    checked += 1;
                }
            }
        }
        assert!(checked >= 100, "{checked}");
    }
}
