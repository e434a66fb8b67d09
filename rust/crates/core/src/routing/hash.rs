//! The affinity hash, version 1: fixed, documented and identical in every process.
//!
//! Specified in `docs/hash-spec.md`, pinned by `tests/vectors/affinity_hash.json` (checked here
//! and by a pure-Python reference in `tests/test_hash_spec.py`). Never a per-process seeded
//! hash: two processes that see the same composite and the same up members in the same order
//! choose the same member.
//!
//! * `affinity_hash(s) = fmix64(fnv1a64(utf8(s)))`: FNV-1a 64 over the UTF-8 bytes, then
//!   MurmurHash3's 64-bit finaliser so every output bit depends on every input bit (plain FNV-1a
//!   puts the parity of the bytes in bit 0, a poor `mod 2`).
//! * `rendezvous_score(label, composite) = fmix64(fnv1a64(utf8(label) ++ [0xFF] ++
//!   utf8(composite)))`; `0xFF` never occurs in UTF-8, so the pair is encoded unambiguously.

/// Version of the hash and selection functions below; bump it on any change of output.
pub const HASH_VERSION: u32 = 1;

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64-bit, over `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_continue(FNV_OFFSET_BASIS, bytes)
}

fn fnv1a64_continue(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// MurmurHash3's 64-bit finaliser (`fmix64`).
pub fn fmix64(mut value: u64) -> u64 {
    value ^= value >> 33;
    value = value.wrapping_mul(0xff51_afd7_ed55_8ccd);
    value ^= value >> 33;
    value = value.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    value ^= value >> 33;
    value
}

/// The hash of a composite such as `trading-adapters:alice`.
pub fn affinity_hash(composite: &str) -> u64 {
    fmix64(fnv1a64(composite.as_bytes()))
}

/// The rendezvous (highest random weight) score of `label` for `composite`.
pub fn rendezvous_score(label: &str, composite: &str) -> u64 {
    let hash = fnv1a64_continue(fnv1a64(label.as_bytes()), &[0xff]);
    fmix64(fnv1a64_continue(hash, composite.as_bytes()))
}

/// The composite string `affinity_key:captured`.
pub fn composite(affinity_key: &str, captured: &str) -> String {
    let mut text = String::with_capacity(affinity_key.len() + 1 + captured.len());
    text.push_str(affinity_key);
    text.push(':');
    text.push_str(captured);
    text
}

/// How a composite's hash picks one of the up members of a priority group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Selection {
    /// `affinity_hash(composite) mod n` over the `n` up members in label order (the seed's
    /// algorithm). Removing a member re-maps most keys.
    #[default]
    Modulo,
    /// The up member with the highest `rendezvous_score(label, composite)` (first in label
    /// order on a tie). Removing a member re-maps only the keys that were on it.
    Rendezvous,
}

impl Selection {
    /// Parses `modulo` or `rendezvous`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|selection| selection.name() == name)
    }

    /// The configuration spelling.
    /// Every selection function, in documentation order (exported to Python as `SELECTIONS`).
    pub const ALL: [Selection; 2] = [Selection::Modulo, Selection::Rendezvous];

    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            Selection::Modulo => "modulo",
            Selection::Rendezvous => "rendezvous",
        }
    }

    /// Index into `labels` (the up members, in label order) chosen for `composite`, or `None`
    /// when `labels` is empty.
    pub fn select<S: AsRef<str>>(self, composite: &str, labels: &[S]) -> Option<usize> {
        self.select_indexed(composite, labels.len(), |index| labels[index].as_ref())
    }

    /// [`Selection::select_indexed`] for a `composite` that is `prefix ++ rest`, where
    /// `prefix_state` is [`fnv1a64`]`(prefix)`: the modulo selection hashes only `rest` (FNV-1a
    /// is a left fold, so the hash is the same). Same answers.
    pub(crate) fn select_indexed_after<'a>(
        self,
        prefix_state: u64,
        rest: &str,
        composite: &str,
        count: usize,
        label: impl Fn(usize) -> &'a str,
    ) -> Option<usize> {
        match self {
            Selection::Modulo if count > 0 => {
                Some((fmix64(fnv1a64_continue(prefix_state, rest.as_bytes())) % count as u64) as usize)
            }
            _ => self.select_indexed(composite, count, label),
        }
    }

    /// [`Selection::select`] over `count` labels given by position (`label(0)` ..
    /// `label(count - 1)`), so callers need not collect them.
    pub fn select_indexed<'a>(self, composite: &str, count: usize, label: impl Fn(usize) -> &'a str) -> Option<usize> {
        if count == 0 {
            return None;
        }
        match self {
            Selection::Modulo => Some((affinity_hash(composite) % count as u64) as usize),
            Selection::Rendezvous => {
                let mut best = 0;
                let mut best_score = rendezvous_score(label(0), composite);
                for index in 1..count {
                    let score = rendezvous_score(label(index), composite);
                    if score > best_score {
                        best = index;
                        best_score = score;
                    }
                }
                Some(best)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv1a64_matches_published_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        // More rows of the FNV reference test suite (isthe.com/chongo/src/fnv/test_fnv.c, FNV-1a 64).
        assert_eq!(fnv1a64(b"b"), 0xaf63_df4c_8601_f1a5);
        assert_eq!(fnv1a64(b"foo"), 0xdcb2_7518_fed9_d577);
    }

    /// `fmix64` against values computed outside this crate: 0 is the finaliser's fixed point,
    /// `fmix64(1) = 0xb456bcfc34c2cb2c` is the value quoted for MurmurHash3's finaliser, and the
    /// others were computed with Python's arbitrary-precision integers from the MurmurHash3
    /// reference (`smhasher/src/MurmurHash3.cpp`, `fmix64`):
    /// `k ^= k >> 33; k = k * 0xff51afd7ed558ccd mod 2^64; k ^= k >> 33;
    ///  k = k * 0xc4ceb9fe1a85ec53 mod 2^64; k ^= k >> 33`.
    #[test]
    fn fmix64_matches_independently_computed_values() {
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
        assert_eq!(fmix64(2), 0x3abf_2a20_6506_83e7);
        assert_eq!(fmix64(u64::MAX), 0x64b5_720b_4b82_5f21);
        assert_eq!(fmix64(0x0123_4567_89ab_cdef), 0x87cb_fbfe_8902_2cea);
        // fmix64(fnv1a64("")): the affinity hash of the empty composite.
        assert_eq!(affinity_hash(""), 0xefd0_1f60_ba99_2926);
    }

    #[test]
    fn reproduces_the_shared_test_vectors() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/vectors/affinity_hash.json");
        let text = std::fs::read_to_string(path).expect("tests/vectors/affinity_hash.json");
        let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(vectors["version"].as_u64(), Some(u64::from(HASH_VERSION)));
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 20);
        for case in cases {
            let composite = case["composite"].as_str().unwrap();
            let expected = u64::from_str_radix(case["hash"].as_str().unwrap(), 16).unwrap();
            assert_eq!(affinity_hash(composite), expected, "{composite}");
            let members: Vec<&str> = case["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
            let modulo = case["modulo"].as_str().unwrap();
            let rendezvous = case["rendezvous"].as_str().unwrap();
            assert_eq!(members[Selection::Modulo.select(composite, &members).unwrap()], modulo);
            assert_eq!(members[Selection::Rendezvous.select(composite, &members).unwrap()], rendezvous);
            for score in case["scores"].as_array().unwrap() {
                let label = score["label"].as_str().unwrap();
                let expected = u64::from_str_radix(score["score"].as_str().unwrap(), 16).unwrap();
                assert_eq!(rendezvous_score(label, composite), expected);
            }
        }
    }

    fn labels(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("member{i}")).collect()
    }

    proptest! {
        #[test]
        fn selection_is_deterministic(key in ".{0,40}", n in 1usize..12) {
            let members = labels(n);
            for selection in [Selection::Modulo, Selection::Rendezvous] {
                prop_assert_eq!(selection.select(&key, &members), selection.select(&key, &members));
                prop_assert!(selection.select(&key, &members).unwrap() < n);
            }
        }

        #[test]
        fn selecting_after_a_known_prefix_answers_as_over_the_whole_composite(
            prefix in ".{0,24}",
            rest in ".{0,24}",
            n in 0usize..9,
        ) {
            let members = labels(n);
            let composite = format!("{prefix}{rest}");
            let state = fnv1a64(prefix.as_bytes());
            for selection in [Selection::Modulo, Selection::Rendezvous] {
                let label = |i: usize| members[i].as_str();
                prop_assert_eq!(
                    selection.select_indexed_after(state, &rest, &composite, n, label),
                    selection.select(&composite, &members)
                );
            }
        }

        #[test]
        fn rendezvous_moves_only_keys_of_the_removed_member(
            keys in proptest::collection::vec("[a-z]{1,12}", 1..200),
            n in 2usize..10,
            removed in 0usize..10,
        ) {
            let removed = removed % n;
            let members = labels(n);
            let survivors: Vec<&String> =
                members.iter().enumerate().filter(|(i, _)| *i != removed).map(|(_, m)| m).collect();
            for key in &keys {
                let before = &members[Selection::Rendezvous.select(key, &members).unwrap()];
                let after = survivors[Selection::Rendezvous.select(key, &survivors).unwrap()];
                if before != &members[removed] {
                    prop_assert_eq!(before, after);
                }
            }
        }
    }

    #[test]
    fn modulo_moves_many_keys_when_a_member_leaves() {
        let members = labels(5);
        let survivors: Vec<&String> = members.iter().skip(1).collect();
        let keys: Vec<String> = (0..10_000).map(|i| format!("k:user{i}")).collect();
        let moved_off_survivors = |selection: Selection| {
            keys.iter()
                .filter(|key| {
                    let before = &members[selection.select(key, &members).unwrap()];
                    let after = survivors[selection.select(key, &survivors).unwrap()];
                    before != &members[0] && before != after
                })
                .count()
        };
        assert_eq!(moved_off_survivors(Selection::Rendezvous), 0);
        // Modulo re-maps roughly (n-1)/n of the keys that stayed on survivors.
        assert!(moved_off_survivors(Selection::Modulo) > 5_000);
    }

    #[test]
    fn selections_spread_keys_evenly() {
        let members = labels(4);
        for selection in [Selection::Modulo, Selection::Rendezvous] {
            let mut counts = [0usize; 4];
            for i in 0..40_000 {
                counts[selection.select(&format!("k:user{i}"), &members).unwrap()] += 1;
            }
            for count in counts {
                assert!((9_000..11_000).contains(&count), "{selection:?} {counts:?}");
            }
        }
    }
}
