//! A matcher for a small subset of POSIX EREs that gives glibc's answers without calling it.
//!
//! glibc's `regexec` is exact but slow when asked for sub-matches (it walks its state log
//! backwards to place them), and every new subject needs an affinity-rule capture. Rules are
//! usually a chain of literals and bracket expressions with `*`, `+` or `?` and one capture
//! group, such as `^/PRIVATE/([^/]+)-[0-9]+/FXTRADE`. Each item is one position of a Glushkov
//! automaton whose state set fits a `u64`, so matching is bit-parallel, one step per byte:
//!
//! 1. the leftmost start from which the items can match, and the longest end from there;
//! 2. backwards, the states that still lead to that end; then forwards, each byte taken by the
//!    earliest viable item, so earlier sub-patterns take the longest runs (POSIX sub-match
//!    rules, as glibc applies them).
//!
//! Supported: optional `^`, then items, then optional `$`; an item is an ordinary ASCII
//! character, `\` followed by punctuation, `.` or a bracket expression (no `[:class:]`,
//! `[.x.]`, `[=x=]`), optionally followed by one of `*`, `+`, `?`; at most one unquantified,
//! non-empty, non-nested group; no `|`, no intervals, no back-references. Which bytes `.` and
//! each bracket expression accept is asked of glibc itself when the pattern is compiled (so
//! locale-dependent ranges agree: the caller passes that question in as an [`AtomBytes`], so this
//! module does not depend on `posix_regex`, which depends on it). Any other pattern, and any subject containing a NUL or a
//! non-ASCII byte or longer than [`MAX_SUBJECT`] bytes, goes to glibc. A differential property
//! test against glibc pins the equivalence.

/// The ASCII bytes a single-atom ERE (`.` or a bracket expression such as `[^/]`) matches, as
/// the bits `1 << byte` (bytes 1 to 127), or `None` when it cannot tell: the regex engine the
/// automaton must agree with answers it (glibc, `posix_regex::ascii_bytes_of_atom`).
pub(super) type AtomBytes<'a> = &'a dyn Fn(&str) -> Option<u128>;

/// Longest subject handled here.
pub(super) const MAX_SUBJECT: usize = 256;
/// Subjects shorter than this are matched with short state logs ([`SimplePattern::capture`]).
const SHORT_SUBJECT: usize = 64;
/// Items are automaton positions `0..count`; bit `count` is the start state.
const MAX_ITEMS: usize = 63;
const UNBOUNDED: usize = usize::MAX;

/// Set of ASCII bytes 1..=127.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ByteSet(u128);

impl ByteSet {
    fn contains(self, byte: u8) -> bool {
        byte < 128 && self.0 & (1u128 << byte) != 0
    }

    fn single(byte: u8) -> Self {
        ByteSet(1u128 << byte)
    }

    /// The ASCII bytes a single-atom ERE such as `[^/]` or `.` matches, as `atom_bytes` says.
    fn of_atom(atom: &str, atom_bytes: AtomBytes<'_>) -> Option<Self> {
        atom_bytes(atom).map(ByteSet)
    }
}

#[derive(Clone, Copy, Debug)]
struct Item {
    set: ByteSet,
    min: usize,
    max: usize,
}

/// A compiled pattern of the supported subset.
#[derive(Clone, Debug)]
pub(super) struct SimplePattern {
    anchored_start: bool,
    anchored_end: bool,
    /// Items `start..end` form capture group 1.
    group: Option<(usize, usize)>,
    /// The start state's bit.
    start: u64,
    /// `follow[i]`: positions that may consume the next byte after position `i` consumed one
    /// (`follow[count]`: the first byte).
    follow: Vec<u64>,
    /// States from which the rest of the pattern may match nothing (accepting states).
    last: u64,
    /// `accepting[b]`: positions whose item accepts byte `b`.
    accepting: Box<[u64; 128]>,
    /// When every item must consume at least one byte (a chain, as most rules are): the
    /// positions that may repeat. `follow` is then a shift: position `i` leads to `i + 1`, and to
    /// itself when it repeats, so a step is a few word operations instead of a loop over the
    /// states ([`SimplePattern::advance`]).
    chain_repeat: Option<u64>,
}

impl SimplePattern {
    /// The pattern, when it lies in the supported subset; `atom_bytes` says which bytes each
    /// `.` and bracket expression matches.
    pub fn parse(pattern: &str, atom_bytes: AtomBytes<'_>) -> Option<Self> {
        let bytes = pattern.as_bytes();
        let mut index = 0;
        let anchored_start = bytes.first() == Some(&b'^');
        if anchored_start {
            index = 1;
        }
        let mut anchored_end = false;
        let mut items = Vec::new();
        let mut group = None;
        let mut group_start = None;
        while index < bytes.len() {
            let byte = bytes[index];
            let set = match byte {
                b'(' => {
                    if group.is_some() || group_start.is_some() {
                        return None;
                    }
                    group_start = Some(items.len());
                    index += 1;
                    continue;
                }
                b')' => {
                    let start = group_start.take()?;
                    if start == items.len() || bytes.get(index + 1).is_some_and(|b| b"*+?{".contains(b)) {
                        return None;
                    }
                    group = Some((start, items.len()));
                    index += 1;
                    continue;
                }
                b'$' if index + 1 == bytes.len() && group_start.is_none() => {
                    anchored_end = true;
                    index += 1;
                    continue;
                }
                b'\\' => {
                    let escaped = *bytes.get(index + 1)?;
                    if !b".[]\\()*+?{}|^$/".contains(&escaped) {
                        return None;
                    }
                    index += 2;
                    ByteSet::single(escaped)
                }
                b'.' => {
                    index += 1;
                    ByteSet::of_atom(".", atom_bytes)?
                }
                b'[' => {
                    let end = bracket_end(bytes, index)?;
                    let set = ByteSet::of_atom(&pattern[index..=end], atom_bytes)?;
                    index = end + 1;
                    set
                }
                b'|' | b'^' | b'$' | b'{' | b'}' | b'*' | b'+' | b'?' => return None,
                byte if byte.is_ascii() && byte != 0 => {
                    index += 1;
                    ByteSet::single(byte)
                }
                _ => return None,
            };
            let (min, max) = match bytes.get(index) {
                Some(b'*') => (0, UNBOUNDED),
                Some(b'+') => (1, UNBOUNDED),
                Some(b'?') => (0, 1),
                Some(b'{') => return None,
                _ => (1, 1),
            };
            if (min, max) != (1, 1) {
                index += 1;
                if bytes.get(index).is_some_and(|b| b"*+?{".contains(b)) {
                    return None;
                }
            }
            items.push(Item { set, min, max });
            if items.len() > MAX_ITEMS {
                return None;
            }
        }
        if group_start.is_some() {
            return None;
        }
        Some(Self::automaton(anchored_start, anchored_end, group, &items))
    }

    fn automaton(anchored_start: bool, anchored_end: bool, group: Option<(usize, usize)>, items: &[Item]) -> Self {
        let count = items.len();
        // Positions `from..` up to and including the first item that must consume a byte.
        let reachable_from = |from: usize| {
            let mut mask = 0u64;
            for (index, item) in items.iter().enumerate().skip(from) {
                mask |= 1 << index;
                if item.min > 0 {
                    break;
                }
            }
            mask
        };
        let mut follow: Vec<u64> = items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let repeat = if item.max > 1 { 1 << index } else { 0 };
                repeat | reachable_from(index + 1)
            })
            .collect();
        follow.push(reachable_from(0));
        // Accepting: positions after which every item may match nothing, and the start state
        // when every item may.
        let mut last = 0u64;
        for index in (0..count).rev() {
            last |= 1 << index;
            if items[index].min > 0 {
                break;
            }
        }
        if items.iter().all(|item| item.min == 0) {
            last |= 1 << count;
        }
        let mut accepting = Box::new([0u64; 128]);
        for (byte, mask) in (0u8..).zip(accepting.iter_mut()) {
            *mask = items
                .iter()
                .enumerate()
                .filter(|(_, item)| item.set.contains(byte))
                .fold(0, |mask, (index, _)| mask | 1 << index);
        }
        let chain_repeat = items.iter().all(|item| item.min > 0).then(|| {
            items.iter().enumerate().filter(|(_, item)| item.max > 1).fold(0, |mask, (index, _)| mask | 1 << index)
        });
        SimplePattern { anchored_start, anchored_end, group, start: 1 << count, follow, last, accepting, chain_repeat }
    }

    /// Number of capture groups (0 or 1).
    pub fn group_count(&self) -> usize {
        usize::from(self.group.is_some())
    }

    /// Whether `subject` is handled here (ASCII without NUL, at most [`MAX_SUBJECT`] bytes).
    pub fn accepts(subject: &str) -> bool {
        // Whole-word checks (`is_ascii`, memchr) rather than a branch per byte.
        subject.len() <= MAX_SUBJECT && subject.is_ascii() && !subject.as_bytes().contains(&0)
    }

    /// The states after consuming `byte` (ASCII, as [`SimplePattern::accepts`] checks) in
    /// `states`.
    #[inline]
    fn advance(&self, states: u64, byte: u8) -> u64 {
        self.successors(states) & self.accepting[usize::from(byte & 0x7f)]
    }

    /// The positions that may consume the next byte after any of `states` (whatever the byte).
    #[inline]
    fn successors(&self, states: u64) -> u64 {
        if let Some(repeat) = self.chain_repeat {
            // Position `i` leads to `i + 1` (the last one into the start bit, which no byte
            // accepts) and, when it repeats, to itself; the start state leads to position 0.
            let items = states & !self.start;
            let from_start = u64::from(states & self.start != 0);
            return (items << 1) | (items & repeat) | from_start;
        }
        let mut next = 0;
        let mut bits = states;
        while bits != 0 {
            next |= self.follow[bits.trailing_zeros() as usize];
            bits &= bits - 1;
        }
        next
    }

    /// The states of `states` from which some position of `viable` (the next step's viable
    /// states) follows.
    #[inline]
    fn leading_to(&self, states: u64, viable: u64) -> u64 {
        if let Some(repeat) = self.chain_repeat {
            // The inverse of the shift in `advance`: `i` leads to `i + 1` and, repeating, to
            // itself; the start state leads to position 0.
            let start = if viable & 1 != 0 { self.start } else { 0 };
            return states & ((viable >> 1) | (viable & repeat) | start);
        }
        let mut leading = 0;
        let mut bits = states;
        while bits != 0 {
            let state = bits.trailing_zeros() as usize;
            if self.follow[state] & viable != 0 {
                leading |= 1 << state;
            }
            bits &= bits - 1;
        }
        leading
    }

    /// Whether the pattern matches anywhere in `subject` (which [`SimplePattern::accepts`]).
    pub fn is_match(&self, subject: &[u8]) -> bool {
        let mut states = self.start;
        if !self.anchored_end && states & self.last != 0 {
            return true;
        }
        for &byte in subject {
            states = self.advance(states, byte);
            if !self.anchored_start {
                states |= self.start;
            } else if states == 0 {
                return false;
            }
            if !self.anchored_end && states & self.last != 0 {
                return true;
            }
        }
        states & self.last != 0
    }

    /// The leftmost-longest match's span of group 1 (`None` if the pattern has no group), or
    /// `None` outside when there is no match.
    pub fn capture(&self, subject: &[u8]) -> Option<Option<(usize, usize)>> {
        // Short subjects (the usual case) use short state logs: less stack to clear per call.
        if subject.len() < SHORT_SUBJECT {
            self.capture_in::<SHORT_SUBJECT>(subject)
        } else {
            self.capture_in::<{ MAX_SUBJECT + 1 }>(subject)
        }
    }

    /// [`SimplePattern::capture`] with state logs of `N` entries (`N > subject.len()`).
    fn capture_in<const N: usize>(&self, subject: &[u8]) -> Option<Option<(usize, usize)>> {
        let length = subject.len();
        if length >= N {
            return None;
        }
        let starts = if self.anchored_start { 0..=0 } else { 0..=length };
        let mut states = [0u64; N];
        for start in starts {
            // Forwards from `start`: states after each byte; the last accepting time is the end.
            let mut end = self.forward(subject, start, &mut states);
            if self.anchored_end && end != Some(length) {
                end = None;
            }
            let Some(end) = end else {
                continue;
            };
            let Some((group_start, group_end)) = self.group else {
                return Some(None);
            };
            if let Some(repeat) = self.chain_repeat {
                return Some(Some(self.chain_group_span(repeat, &states, start, end, group_start, group_end)));
            }
            // Backwards: the states that still lead to acceptance at `end`.
            let mut viable = [0u64; N];
            viable[end] = states[end] & self.last;
            for time in (start..end).rev() {
                viable[time] = self.leading_to(states[time], viable[time + 1]);
            }
            // Forwards: each byte goes to the earliest viable item. States are one-hot words here,
            // so "position < p" is "word < 1 << p" (`p <= MAX_ITEMS`).
            let (group_start, group_end) = (1u64 << group_start, 1u64 << group_end);
            let (mut before_group, mut before_end) = (start, start);
            let mut state = self.start;
            for time in start..end {
                let next = self.successors(state) & viable[time + 1];
                // The lowest set bit (`viable` guarantees one).
                state = next & next.wrapping_neg();
                before_group += usize::from(state < group_start);
                before_end += usize::from(state < group_end);
            }
            return Some(Some((before_group, before_end)));
        }
        None
    }
}

impl SimplePattern {
    /// The span of the group (items `group_start..group_end`) in the match of a chain pattern
    /// from `start` to `end`, whose forward states are `states[start..=end]`: one backward pass,
    /// where the general automaton needs a backward pass and another forward one.
    ///
    /// Why one pass suffices: in a chain, a position only leads to itself (when it repeats) or to
    /// the next one, so along any path positions never decrease. The POSIX sub-match path takes
    /// each byte with the earliest viable item ([`SimplePattern::capture_in`]'s general forward
    /// pass); for a chain that item is simply the lowest viable position at each time. (Let `v`
    /// be the lowest viable position at time `t` and `w` the lowest at `t + 1`. `w` has a
    /// viable predecessor `u >= v`, so `w >= v`; `v` has a viable successor `<= v + 1`, so
    /// `w <= v + 1`; and `w == v` only if `v` repeats, or `w`'s predecessor would be `v - 1`,
    /// below `v`. So `w` follows `v`, and being the lowest viable it is the earliest.) The
    /// differential tests compare this with the general automaton and with glibc.
    fn chain_group_span(
        &self,
        repeat: u64,
        states: &[u64],
        start: usize,
        end: usize,
        group_start: usize,
        group_end: usize,
    ) -> (usize, usize) {
        let (group_start, group_end) = (1u64 << group_start, 1u64 << group_end);
        let (mut before_group, mut before_end) = (start, start);
        let mut viable = states[end] & self.last;
        for time in (start..end).rev() {
            // The position that took byte `time`: the lowest viable one after it.
            let taken = viable & viable.wrapping_neg();
            before_group += usize::from(taken < group_start);
            before_end += usize::from(taken < group_end);
            // `leading_to` for a chain, without the start state: only `states[start]` holds it,
            // and the states before `start + 1` take no byte of the span.
            viable = states[time] & ((viable >> 1) | (viable & repeat));
        }
        (before_group, before_end)
    }

    /// Fills `states[start..]` with the states after each byte of `subject` from `start` (up to
    /// the first empty set) and answers the last accepting time.
    #[inline]
    fn forward(&self, subject: &[u8], start: usize, states: &mut [u64]) -> Option<usize> {
        let mut state = self.start;
        states[start] = state;
        let mut end = (state & self.last != 0).then_some(start);
        let mut time = start;
        if let Some(repeat) = self.chain_repeat {
            // The first byte leaves the start state; after it the start state is never set
            // again (no byte leads to it), so each further step is the bare shift of
            // `successors`, carried in a register.
            if let Some(&byte) = subject.get(time) {
                state = self.advance(state, byte);
                time += 1;
                states[time] = state;
                if state & self.last != 0 {
                    end = Some(time);
                }
            }
            while state != 0 {
                let Some(&byte) = subject.get(time) else {
                    break;
                };
                state = ((state << 1) | (state & repeat)) & self.accepting[usize::from(byte & 0x7f)];
                time += 1;
                states[time] = state;
                if state & self.last != 0 {
                    end = Some(time);
                }
            }
            return end;
        }
        while let Some(&byte) = subject.get(time) {
            state = self.advance(state, byte);
            time += 1;
            states[time] = state;
            if state == 0 {
                break;
            }
            if state & self.last != 0 {
                end = Some(time);
            }
        }
        end
    }
}

/// Index of the `]` closing the bracket expression opening at `open`; `None` for the forms
/// left to glibc (`[:class:]`, `[.x.]`, `[=x=]`) or when unclosed.
fn bracket_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut index = open + 1;
    if bytes.get(index) == Some(&b'^') {
        index += 1;
    }
    if bytes.get(index) == Some(&b']') {
        index += 1;
    }
    while let Some(&byte) = bytes.get(index) {
        match byte {
            b']' => return Some(index),
            b'[' if bytes.get(index + 1).is_some_and(|b| b":.=".contains(b)) => return None,
            byte if !byte.is_ascii() || byte == 0 => return None,
            _ => index += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    // The differential tests compare the automaton with glibc: only they need `posix_regex`.
    use crate::routing::posix_regex::{ascii_bytes_of_atom, PosixRegex};
    use proptest::prelude::*;

    fn parse(pattern: &str) -> Option<SimplePattern> {
        SimplePattern::parse(pattern, &ascii_bytes_of_atom)
    }

    #[test]
    fn parses_the_usual_rule_shapes() {
        for pattern in ["^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "^/PRIVATE/[^/]+/FXTRADE", "^/A/(.*)$", "x(a?b)c"] {
            assert!(parse(pattern).is_some(), "{pattern}");
        }
        for pattern in ["(a|b)", "(a)(b)", "((a))", "(a)*", "a{2}", "\\w", "[[:alpha:]]", "a^", "^*", "()"] {
            assert!(parse(pattern).is_none(), "{pattern}");
        }
    }

    /// Atoms and, for each, bytes it matches (to build subjects that match) .
    const ATOMS: &[(&str, &str)] = &[
        ("a", "a"),
        ("b", "b"),
        ("/", "/"),
        ("-", "-"),
        (".", "ab/x-P9"),
        ("[^/]", "abx-.P9"),
        ("[0-9]", "0123456789"),
        ("[ab]", "ab"),
        ("[^a]", "b/x-"),
        ("\\.", "."),
        ("[]a]", "]a"),
        ("[a-c]", "abc"),
        ("x", "x"),
        // The seed's rules: literal words and upper-case ranges.
        ("P", "P"),
        ("R", "R"),
        ("I", "I"),
        ("V", "V"),
        ("A", "A"),
        ("T", "T"),
        ("E", "E"),
        ("[A-Z]", "PRIVATEFX"),
        ("[^/-]", "abPR9"),
    ];
    const QUANTIFIERS: &[&str] = &["", "", "*", "+", "?"];
    const NOISE: &[u8] = b"ab/x.-09]cPRIVATEFX";

    /// Indices into [`QUANTIFIERS`] of the quantifiers that keep a pattern a chain (every item
    /// consumes a byte: the shift automaton).
    const CHAIN_QUANTIFIERS: &[usize] = &[0, 3];

    /// Patterns of up to [`MAX_ITEMS`] items, as the production rules are (items, anchors, the
    /// capture group's first and last item); with `chain`, only quantifiers that keep every item
    /// consuming (no `*`, `?`).
    fn pattern(chain: bool) -> impl Strategy<Value = (String, Vec<(usize, usize)>)> {
        let quantifier =
            (0..QUANTIFIERS.len())
                .prop_map(move |q| if chain { CHAIN_QUANTIFIERS[q % CHAIN_QUANTIFIERS.len()] } else { q });
        (
            proptest::collection::vec((0..ATOMS.len(), quantifier), 0..=MAX_ITEMS),
            any::<bool>(),
            any::<bool>(),
            proptest::option::of((0usize..MAX_ITEMS, 1usize..MAX_ITEMS)),
        )
            .prop_map(|(items, start, end, group)| {
                let mut text = String::new();
                if start {
                    text.push('^');
                }
                let group = group.filter(|_| !items.is_empty()).map(|(from, len)| {
                    let from = from % items.len();
                    (from, (from + len).min(items.len()) - 1)
                });
                for (index, (atom, quantifier)) in items.iter().enumerate() {
                    if group.is_some_and(|(first, _)| first == index) {
                        text.push('(');
                    }
                    text.push_str(ATOMS[*atom].0);
                    text.push_str(QUANTIFIERS[*quantifier]);
                    if group.is_some_and(|(_, last)| last == index) {
                        text.push(')');
                    }
                }
                if end {
                    text.push('$');
                }
                (text, items)
            })
    }

    /// A subject of at most [`MAX_SUBJECT`] bytes built to match `items` (repetitions of each
    /// item's bytes between noise), then maybe mutated: most match, many nearly do.
    fn subject(items: &[(usize, usize)], seed: u64) -> String {
        let mut rng = fastrand::Rng::with_seed(seed);
        let noise = |rng: &mut fastrand::Rng, out: &mut Vec<u8>, most: usize| {
            for _ in 0..rng.usize(..=most) {
                out.push(NOISE[rng.usize(..NOISE.len())]);
            }
        };
        let mut bytes = Vec::new();
        noise(&mut rng, &mut bytes, 8);
        for &(atom, quantifier) in items {
            let count = match QUANTIFIERS[quantifier] {
                "*" => rng.usize(0..=6),
                "+" => rng.usize(1..=6),
                "?" => rng.usize(0..=1),
                _ => 1,
            };
            let sample = ATOMS[atom].1.as_bytes();
            for _ in 0..count {
                bytes.push(sample[rng.usize(..sample.len())]);
            }
        }
        noise(&mut rng, &mut bytes, 8);
        if !bytes.is_empty() && rng.u8(..4) == 0 {
            let at = rng.usize(..bytes.len());
            bytes[at] = NOISE[rng.usize(..NOISE.len())];
        }
        bytes.truncate(MAX_SUBJECT);
        String::from_utf8(bytes).unwrap_or_default()
    }

    fn assert_agrees(pattern: &str, subject: &str) -> Result<(), TestCaseError> {
        let glibc = PosixRegex::glibc_only(pattern).unwrap();
        let simple = parse(pattern).unwrap();
        prop_assert_eq!(simple.group_count(), glibc.group_count());
        // The shift automaton of chains must answer as the general one does.
        let mut general = simple.clone();
        general.chain_repeat = None;
        prop_assert_eq!(simple.is_match(subject.as_bytes()), general.is_match(subject.as_bytes()));
        prop_assert_eq!(simple.capture(subject.as_bytes()), general.capture(subject.as_bytes()));
        prop_assert!(SimplePattern::accepts(subject), "{} is not a subject the automaton takes", subject);
        prop_assert_eq!(simple.is_match(subject.as_bytes()), glibc.is_match(subject), "{} {}", pattern, subject);
        let captured = simple.capture(subject.as_bytes()).map(|span| span.map_or("", |(from, to)| &subject[from..to]));
        prop_assert_eq!(captured, glibc.capture(subject), "{} {}", pattern, subject);
        Ok(())
    }

    #[test]
    fn seed_rules_are_chains() {
        for rule in ["^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "^/PRIVATE/[^/]+/FXTRADE", "^/PRIVATE/([^/]+)/BLOTTER/TRADE"] {
            assert!(parse(rule).is_some_and(|p| p.chain_repeat.is_some()), "{rule}");
        }
        assert!(parse("/FILTER/([^/]*)/").is_some_and(|p| p.chain_repeat.is_none()));
    }

    #[test]
    fn seed_rules_agree_with_glibc_on_long_subjects() {
        let rules = ["^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "^/PRIVATE/([^/]+)/BLOTTER/TRADE", "/FILTER/([^/]*)/"];
        let names = ["alice", "al-ice", "a-b-c-d-e-f", "", "x"];
        for rule in rules {
            for name in names {
                for filler in [0usize, 40, 120, 240] {
                    let long = format!("{}{name}", "q-".repeat(filler / 2));
                    for subject in [
                        format!("/PRIVATE/{long}-12/FXTRADE"),
                        format!("/PRIVATE/{long}/BLOTTER/TRADE"),
                        format!("/FILTER/{long}/PRIVATE/{name}/BLOTTER/TRADE"),
                        format!("{long}/PRIVATE/{name}-/FXTRADE"),
                    ] {
                        let subject = &subject[..subject.len().min(MAX_SUBJECT)];
                        assert_agrees(rule, subject).unwrap();
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]

        #[test]
        fn agrees_with_glibc(
            (pattern, items) in pattern(false),
            seeds in proptest::collection::vec(any::<u64>(), 1..12),
            random in proptest::collection::vec("[ab/x.0-9\\-c\\]PRIVATE]{0,40}", 0..6),
        ) {
            let built = seeds.iter().map(|&seed| subject(&items, seed));
            for subject in built.chain(random) {
                assert_agrees(&pattern, &subject)?;
            }
        }

        #[test]
        fn chains_agree_with_glibc(
            (pattern, items) in pattern(true),
            seeds in proptest::collection::vec(any::<u64>(), 1..12),
            random in proptest::collection::vec("[ab/x.0-9\\-c\\]PRIVATE]{0,40}", 0..6),
        ) {
            prop_assert!(parse(&pattern).is_some_and(|p| p.chain_repeat.is_some()), "{}", pattern);
            let built = seeds.iter().map(|&seed| subject(&items, seed));
            for subject in built.chain(random) {
                assert_agrees(&pattern, &subject)?;
            }
        }
    }
}
