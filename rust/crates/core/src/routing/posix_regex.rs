//! POSIX extended regular expressions through glibc's `regcomp`/`regexec`.
//!
//! Affinity rules are documented as POSIX EREs whose capture must equal what `sed -r` captures
//! (leftmost-longest, POSIX sub-match rules). Rust regex engines are leftmost-first, so the
//! C library's engine is used directly, wrapped here so nothing else touches `unsafe`.

use std::ffi::{CStr, CString};
use std::fmt;

use super::ere_subset::SimplePattern;

/// Mirror of glibc's `regex_t` (`<regex.h>`, `struct re_pattern_buffer`).
///
/// `libc::regex_t` keeps `re_nsub` private, and the number of sub-expressions is part of this
/// type's contract, so the same layout is declared here with public fields; its size is
/// checked against `libc::regex_t` at compile time below.
#[repr(C)]
struct GlibcRegex {
    buffer: *mut libc::c_void,
    allocated: libc::size_t,
    used: libc::size_t,
    syntax: libc::c_ulong,
    fastmap: *mut libc::c_char,
    translate: *mut libc::c_char,
    re_nsub: libc::size_t,
    bitfield: u8,
}

const _: () = assert!(std::mem::size_of::<GlibcRegex>() == std::mem::size_of::<libc::regex_t>());
const _: () = assert!(std::mem::align_of::<GlibcRegex>() == std::mem::align_of::<libc::regex_t>());

/// Most positions a pattern may have once its interval repetitions are unrolled.
///
/// glibc compiles `x{m,n}` by copying `x` `n` times, so nested intervals multiply:
/// `a{1,1000}{1,1000}` is a million positions (seconds and gigabytes to compile, and
/// `a{1,32767}{1,32767}` never finishes), and compile time grows faster than linearly even below
/// that (`a{1,10000}`: 0.6 s and 800 MB; `(.*){1,500}` at this limit: under 0.1 s and 50 MB).
/// Routing rules need a few dozen.
pub const MAX_PATTERN_POSITIONS: u64 = 1_000;

/// A pattern that glibc refused (the message is glibc's own, from `regerror`) or that is
/// larger than [`MAX_PATTERN_POSITIONS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegexError {
    /// The pattern as given.
    pub pattern: String,
    /// glibc's message, for example `Unmatched ( or \(`.
    pub message: String,
}

impl fmt::Display for RegexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid POSIX extended regular expression {:?}: {}", self.pattern, self.message)
    }
}

impl std::error::Error for RegexError {}

/// A compiled POSIX ERE (`REG_EXTENDED`), freed with `regfree` on drop.
///
/// Patterns in a simple subset (`ere_subset.rs`) are also compiled to an automaton and matched without
/// glibc for plain-ASCII subjects (same answers: see `ere_subset.rs`).
pub struct PosixRegex {
    // Boxed so the compiled buffer never moves after `regcomp` filled it in.
    compiled: Box<GlibcRegex>,
    pattern: String,
    simple: Option<SimplePattern>,
}

// SAFETY: the compiled `regex_t` owns heap buffers only reachable through this value, so moving
// it to another thread is sound. glibc's `regexec` takes `const regex_t *` and serialises its
// internal DFA state with the lock embedded in the pattern buffer (`dfa->lock`), so shared
// `&PosixRegex` use from several threads is sound too.
unsafe impl Send for PosixRegex {}
// SAFETY: see the `Send` justification above: `regexec` is thread-safe on a shared pattern.
unsafe impl Sync for PosixRegex {}

/// The ASCII bytes (1 to 127) a single-atom ERE such as `[^/]` or `.` matches according to glibc,
/// as the bits `1 << byte`; `None` when glibc refuses the atom. What the [`SimplePattern`]
/// automaton asks, so that locale-dependent ranges agree with glibc.
pub(super) fn ascii_bytes_of_atom(atom: &str) -> Option<u128> {
    let regex = PosixRegex::glibc_only(&format!("^{atom}$")).ok()?;
    let mut bits = 0u128;
    for byte in 1u8..128 {
        let text = [byte];
        // Every byte below 128 is a one-character UTF-8 string.
        let text = std::str::from_utf8(&text).ok()?;
        if regex.is_match(text) {
            bits |= 1u128 << byte;
        }
    }
    Some(bits)
}

impl PosixRegex {
    /// Compiles `pattern` as a POSIX extended regular expression.
    pub fn new(pattern: &str) -> Result<Self, RegexError> {
        let mut regex = Self::glibc_only(pattern)?;
        regex.simple = SimplePattern::parse(pattern, &ascii_bytes_of_atom)
            .filter(|simple| simple.group_count() == regex.group_count());
        Ok(regex)
    }

    /// Compiles `pattern` for glibc only (no [`SimplePattern`] fast path).
    pub(super) fn glibc_only(pattern: &str) -> Result<Self, RegexError> {
        let positions = unrolled_positions(pattern.as_bytes());
        if positions > MAX_PATTERN_POSITIONS {
            return Err(RegexError {
                pattern: pattern.to_owned(),
                message: format!(
                    "its repetitions unroll to {} positions, more than the limit of {MAX_PATTERN_POSITIONS}: \
                     use smaller or fewer {{m,n}} intervals (nested ones multiply)",
                    if positions == u64::MAX { "too many".to_owned() } else { positions.to_string() }
                ),
            });
        }
        let c_pattern = CString::new(pattern).map_err(|_| RegexError {
            pattern: pattern.to_owned(),
            message: "pattern contains a NUL byte".to_owned(),
        })?;
        // SAFETY: an all-zero `regex_t` is the state `regcomp` expects to fill in.
        let mut compiled: Box<GlibcRegex> = Box::new(unsafe { std::mem::zeroed() });
        let raw = (&mut *compiled as *mut GlibcRegex).cast::<libc::regex_t>();
        // SAFETY: `raw` points to a zeroed, correctly sized and aligned `regex_t`; the pattern is
        // a valid NUL-terminated string that outlives the call.
        let status = unsafe { libc::regcomp(raw, c_pattern.as_ptr(), libc::REG_EXTENDED) };
        if status != 0 {
            let message = error_message(status, raw);
            // glibc frees partial state itself when regcomp fails; calling regfree on it is
            // still allowed and makes sure nothing leaks.
            // SAFETY: `raw` was passed to `regcomp`.
            unsafe { libc::regfree(raw) };
            return Err(RegexError { pattern: pattern.to_owned(), message });
        }
        Ok(PosixRegex { compiled, pattern: pattern.to_owned(), simple: None })
    }

    /// The pattern as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Number of parenthesised sub-expressions (capture groups).
    pub fn group_count(&self) -> usize {
        self.compiled.re_nsub
    }

    fn raw(&self) -> *const libc::regex_t {
        (&*self.compiled as *const GlibcRegex).cast::<libc::regex_t>()
    }

    /// Whether the pattern matches anywhere in `subject`.
    pub fn is_match(&self, subject: &str) -> bool {
        if let Some(simple) = self.simple.as_ref().filter(|_| SimplePattern::accepts(subject)) {
            return simple.is_match(subject.as_bytes());
        }
        // No registers asked for: glibc may stop at the first accepting state instead of
        // searching for the longest match and its sub-matches.
        self.execute(subject, 0).is_some()
    }

    /// The text captured by group 1 when the pattern matches `subject`, as `sed -r` captures it.
    ///
    /// `None` when there is no match. A match in which group 1 did not take part (or a pattern
    /// without groups) captures the empty string, as `sed -r 's/.../\1/'` would substitute.
    pub fn capture<'s>(&self, subject: &'s str) -> Option<&'s str> {
        if let Some(simple) = self.simple.as_ref().filter(|_| SimplePattern::accepts(subject)) {
            let span = simple.capture(subject.as_bytes())?;
            return Some(span.and_then(|(from, to)| subject.get(from..to)).unwrap_or(""));
        }
        let matches = self.execute(subject, 2)?;
        let group = matches[1];
        if group.rm_so < 0 || group.rm_eo < group.rm_so {
            return Some("");
        }
        // glibc reports byte offsets into the subject; they lie on character boundaries for
        // UTF-8 input in a UTF-8 locale and always in the default "C" locale where every byte is
        // a character, but check rather than trust.
        subject.get(group.rm_so as usize..group.rm_eo as usize).or(Some(""))
    }

    fn execute(&self, subject: &str, groups: usize) -> Option<[libc::regmatch_t; 2]> {
        let length = libc::regoff_t::try_from(subject.len()).ok()?;
        let mut matches = [libc::regmatch_t { rm_so: 0, rm_eo: length }; 2];
        // REG_STARTEND: the subject is delimited by matches[0] instead of a NUL terminator, so
        // no C string is allocated per call and embedded NULs cannot truncate the subject.
        // SAFETY: the pattern is compiled; the subject pointer is valid for `length` bytes;
        // `matches` has room for `groups` (<= 2) entries; with REG_STARTEND glibc reads
        // `matches[0]` even when `groups` is 0.
        let status = unsafe {
            libc::regexec(
                self.raw(),
                subject.as_ptr().cast::<libc::c_char>(),
                groups,
                matches.as_mut_ptr(),
                libc::REG_STARTEND,
            )
        };
        if status != 0 {
            return None;
        }
        if groups < 2 {
            matches[1] = libc::regmatch_t { rm_so: -1, rm_eo: -1 };
        }
        Some(matches)
    }
}

impl Drop for PosixRegex {
    fn drop(&mut self) {
        let raw = (&mut *self.compiled as *mut GlibcRegex).cast::<libc::regex_t>();
        // SAFETY: the pattern was compiled successfully by `regcomp` and is freed exactly once.
        unsafe { libc::regfree(raw) };
    }
}

impl fmt::Debug for PosixRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PosixRegex").field("pattern", &self.pattern).finish()
    }
}

/// An upper bound of the positions glibc allocates for `pattern`: every atom counts one, a
/// bracket expression one, a `*`, `+` or `?` one more (its loop node), and an interval `{m,n}`
/// (or `{m,}`, `{m}`) multiplies the atom or group before it by its largest count. Saturates at `u64::MAX`. Lexical only: a malformed
/// pattern gets some bound and glibc then reports what is wrong with it.
fn unrolled_positions(pattern: &[u8]) -> u64 {
    // Per open group: the total before the group.
    let mut outer: Vec<u64> = Vec::new();
    let mut total: u64 = 0;
    // Size of the last atom or group, which a following interval repeats.
    let mut last: u64 = 0;
    let mut index = 0;
    while index < pattern.len() {
        match pattern[index] {
            b'\\' => {
                index += 2;
                last = 1;
                total = total.saturating_add(1);
                continue;
            }
            b'[' => {
                index = bracket_end(pattern, index);
                last = 1;
                total = total.saturating_add(1);
                continue;
            }
            b'(' => {
                outer.push(total);
                total = 0;
                last = 0;
            }
            b')' => {
                let group = total;
                total = outer.pop().unwrap_or(0).saturating_add(group);
                last = group;
            }
            b'{' => {
                if let Some((count, end)) = interval(pattern, index) {
                    let repeated = last.saturating_mul(count);
                    total = total.saturating_sub(last).saturating_add(repeated);
                    last = repeated;
                    index = end;
                    continue;
                }
                last = 1;
                total = total.saturating_add(1);
            }
            b'|' | b'^' | b'$' => last = 0,
            b'*' | b'+' | b'?' => {
                last = last.saturating_add(1);
                total = total.saturating_add(1);
            }
            _ => {
                last = 1;
                total = total.saturating_add(1);
            }
        }
        index += 1;
    }
    outer.into_iter().fold(total, u64::saturating_add)
}

/// The largest count of the interval `{m}`, `{m,}` or `{m,n}` at `start`, and the index just
/// past it; `None` if there is no well-formed interval there.
fn interval(pattern: &[u8], start: usize) -> Option<(u64, usize)> {
    let close = start + 1 + pattern.get(start + 1..)?.iter().position(|&byte| byte == b'}')?;
    let body = std::str::from_utf8(pattern.get(start + 1..close)?).ok()?;
    let number = |text: &str| -> Option<u64> {
        if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        // More digits than u64 holds is still a (huge) count.
        Some(text.parse().unwrap_or(u64::MAX))
    };
    let count = match body.split_once(',') {
        None => number(body)?,
        Some((min, "")) => number(min)?.saturating_add(1),
        Some((min, max)) => number(min)?.max(number(max)?),
    };
    Some((count.max(1), close + 1))
}

/// The index just past the bracket expression opening at `start` (or the end of the pattern).
fn bracket_end(pattern: &[u8], start: usize) -> usize {
    let mut index = start + 1;
    if pattern.get(index) == Some(&b'^') {
        index += 1;
    }
    if pattern.get(index) == Some(&b']') {
        index += 1; // a leading ] is literal
    }
    while index < pattern.len() {
        match pattern[index] {
            b']' => return index + 1,
            b'[' if matches!(pattern.get(index + 1), Some(b'.' | b':' | b'=')) => {
                let terminator = [pattern[index + 1], b']'];
                let rest = &pattern[index + 2..];
                index = match rest.windows(2).position(|pair| pair == terminator) {
                    Some(at) => index + 2 + at + 2,
                    None => pattern.len(),
                };
            }
            _ => index += 1,
        }
    }
    pattern.len()
}

fn error_message(status: libc::c_int, raw: *const libc::regex_t) -> String {
    let mut buffer = [0 as libc::c_char; 256];
    // SAFETY: `raw` is the pattern `regcomp` reported on; the buffer length is passed.
    unsafe { libc::regerror(status, raw, buffer.as_mut_ptr(), buffer.len()) };
    // SAFETY: `regerror` always NUL-terminates within the given size.
    unsafe { CStr::from_ptr(buffer.as_ptr()) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_leftmost_longest_like_sed() {
        let regex = PosixRegex::new("^/PRIVATE/([^/]+)-[0-9]+/FXTRADE").unwrap();
        assert_eq!(regex.capture("/PRIVATE/alice-0/FXTRADE"), Some("alice"));
        assert_eq!(regex.capture("/PRIVATE/al-ice-12/FXTRADE"), Some("al-ice"));
        assert_eq!(regex.capture("/PUBLIC/alice-0/FXTRADE"), None);
        // POSIX leftmost-longest: the alternation takes the longer branch, unlike Perl.
        let alternation = PosixRegex::new("(a|ab)(c|bcd)").unwrap();
        assert_eq!(alternation.capture("abcd"), Some("a"));
        let longest = PosixRegex::new("x(a|ab)").unwrap();
        assert_eq!(longest.capture("xab"), Some("ab"));
    }

    #[test]
    fn reports_group_count_and_glibc_errors() {
        assert_eq!(PosixRegex::new("^/A/([^/]+)/(B)").unwrap().group_count(), 2);
        assert_eq!(PosixRegex::new("^/A").unwrap().group_count(), 0);
        let error = PosixRegex::new("^/A/(").unwrap_err();
        assert!(error.message.contains("Unmatched"), "{}", error.message);
    }

    #[test]
    fn nested_intervals_beyond_the_budget_are_refused_quickly() {
        for pattern in [
            "a{1,1000}{1,1000}",
            "a{1,32767}{1,32767}",
            "(ab{1,200}){1,200}",
            "x{99999999999999999999}",
            "(.*){1,1000}",
        ] {
            let started = std::time::Instant::now();
            let error = PosixRegex::new(pattern).unwrap_err();
            assert!(error.message.contains("limit of 1000:"), "{pattern}: {}", error.message);
            assert!(started.elapsed() < std::time::Duration::from_secs(1), "{pattern} took {:?}", started.elapsed());
        }
    }

    #[test]
    fn realistic_patterns_fit_the_budget() {
        for pattern in ["^/PRIVATE/([^/]+)-[0-9]{1,10}/FXTRADE", "^/A/([a-z]{2,8})/[[:digit:]]{4}", "a{1,30}{1,30}"] {
            PosixRegex::new(pattern).unwrap();
        }
        assert_eq!(unrolled_positions(b"a{1,30}{1,30}"), 900);
        assert_eq!(unrolled_positions(b"^/PRIVATE/([^/]+)-[0-9]+/FXTRADE"), 22);
        assert_eq!(unrolled_positions(b"(.*){1,500}"), 1000);
        assert_eq!(unrolled_positions(b"(ab){3}c"), 7);
        assert_eq!(unrolled_positions(b"[{]{2}"), 2);
        assert_eq!(unrolled_positions(b"a{,5}"), 5, "not an interval: five literal atoms");
    }

    #[test]
    fn group_not_taking_part_captures_empty() {
        let regex = PosixRegex::new("^a(b)?c").unwrap();
        assert_eq!(regex.capture("ac"), Some(""));
        assert_eq!(regex.capture("abc"), Some("b"));
        assert!(!regex.is_match("xx"));
    }
}
