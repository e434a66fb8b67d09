//! The one grammar of sizes and durations, shared by channel URIs, the driver's settings
//! (`affinity::driver::DriverContext::apply`), the `affinity driver` command line and the Python
//! package (`affinity.units`). Text in, a number or the reason it is refused out; no I/O.
//!
//! * A **size** is decimal digits with an optional `k`, `m` or `g` suffix (case-insensitive,
//!   each step ×1024, as Aeron's `aeron_parse_size64`): `65536`, `64k`, `16m`, `1g`. A bare
//!   number is bytes.
//! * A **duration** is a decimal number (`2`, `1.5`, `.5`) with a unit `ns`, `us`, `ms`, `s`,
//!   `m` (minutes) or `h` (case-insensitive): `500ms`, `1.5s`, `2m`. A bare number takes the
//!   unit its setting names ([`BareUnit`]): `command_timeout_ms=2000` is two seconds; the
//!   parameters of a channel URI (`linger=`, `nak-delay=`, `fc=...,t:`) take nanoseconds, as
//!   Aeron's `aeron_parse_duration_ns` does; a setting whose name gives no unit refuses a bare
//!   number other than `0` (`--client-timeout 5` is ambiguous; write `5s`). The value must be a
//!   whole number of nanoseconds below 2^64.

use std::time::Duration;

/// A unit of time a duration may be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// `ns`.
    Nanoseconds,
    /// `us`.
    Microseconds,
    /// `ms`.
    Milliseconds,
    /// `s`.
    Seconds,
    /// `m`.
    Minutes,
    /// `h`.
    Hours,
}

impl TimeUnit {
    /// Every unit, smallest first.
    pub const ALL: [TimeUnit; 6] = [
        TimeUnit::Nanoseconds,
        TimeUnit::Microseconds,
        TimeUnit::Milliseconds,
        TimeUnit::Seconds,
        TimeUnit::Minutes,
        TimeUnit::Hours,
    ];

    /// Its suffix (`ms`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            TimeUnit::Nanoseconds => "ns",
            TimeUnit::Microseconds => "us",
            TimeUnit::Milliseconds => "ms",
            TimeUnit::Seconds => "s",
            TimeUnit::Minutes => "m",
            TimeUnit::Hours => "h",
        }
    }

    /// Nanoseconds in one of it.
    pub fn nanos(self) -> u128 {
        match self {
            TimeUnit::Nanoseconds => 1,
            TimeUnit::Microseconds => 1_000,
            TimeUnit::Milliseconds => 1_000_000,
            TimeUnit::Seconds => 1_000_000_000,
            TimeUnit::Minutes => 60_000_000_000,
            TimeUnit::Hours => 3_600_000_000_000,
        }
    }

    /// The unit a suffix names (case-insensitive), if any.
    pub fn from_suffix(suffix: &str) -> Option<TimeUnit> {
        TimeUnit::ALL.into_iter().find(|unit| unit.suffix().eq_ignore_ascii_case(suffix))
    }
}

/// What a bare number (no unit) means for one setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BareUnit {
    /// The setting names its unit (`_ms`, or Aeron's nanoseconds in a URI): a bare number is in it.
    Is(TimeUnit),
    /// The setting names no unit: a bare number other than `0` is refused.
    Refused,
}

/// Units listed in a duration error.
const UNITS: &str = "ns, us, ms, s, m or h";
/// Digits a number may have at most (before and after the point together): more cannot fit
/// 2^64 nanoseconds, and the bound keeps the arithmetic below in `u128`.
const MAX_DIGITS: usize = 30;

/// Parses a size (see the module documentation). The error is the reason only; the caller
/// names the setting and the value.
pub fn parse_size(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected a size: digits with an optional k, m or g suffix (64k, 16m, 1g)";
    let (digits, multiplier) = match text.as_bytes().last() {
        Some(b'k' | b'K') => (&text[..text.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&text[..text.len() - 1], 1u64 << 20),
        Some(b'g' | b'G') => (&text[..text.len() - 1], 1u64 << 30),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(EXPECTED.to_string());
    }
    let number: u64 = digits.parse().map_err(|_| "size overflows 64 bits".to_string())?;
    number.checked_mul(multiplier).ok_or_else(|| "size overflows 64 bits".to_string())
}

/// Parses a duration (see the module documentation); `bare` says what a number without a unit
/// means. The error is the reason only; the caller names the setting and the value.
pub fn parse_duration(text: &str, bare: BareUnit) -> Result<Duration, String> {
    let expected = || format!("expected a duration: a number with a unit {UNITS} (500ms, 1.5s, 2m)");
    let number_end = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (number, None),
    };
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    let well_formed = match fraction {
        None => !whole.is_empty(),
        Some(fraction) => !fraction.is_empty() && digits(fraction),
    } && digits(whole)
        && whole.len() + fraction.map_or(0, str::len) <= MAX_DIGITS;
    if !well_formed {
        return Err(expected());
    }
    let fraction = fraction.unwrap_or("");
    let unit = if suffix.is_empty() {
        let zero = number.bytes().all(|b| b == b'0' || b == b'.');
        match bare {
            BareUnit::Is(unit) => unit,
            BareUnit::Refused if zero => TimeUnit::Nanoseconds,
            BareUnit::Refused => {
                return Err(format!("a bare number is ambiguous here: give a unit {UNITS} (e.g. {number}s)"))
            }
        }
    } else {
        TimeUnit::from_suffix(suffix).ok_or_else(expected)?
    };
    // Digits only and at most MAX_DIGITS of them: the parses and products fit u128.
    let parse = |digits: &str| if digits.is_empty() { Ok(0) } else { digits.parse::<u128>() };
    let whole = parse(whole).map_err(|_| expected())?;
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction_value = parse(fraction).map_err(|_| expected())?;
    let fraction_nanos = fraction_value * unit.nanos();
    if fraction_nanos % scale != 0 {
        return Err("finer than a nanosecond (the smallest step of a duration)".to_string());
    }
    let nanos = whole
        .checked_mul(unit.nanos())
        .and_then(|nanos| nanos.checked_add(fraction_nanos / scale))
        .filter(|nanos| *nanos <= u128::from(u64::MAX))
        .ok_or_else(|| "duration overflows 64-bit nanoseconds".to_string())?;
    Ok(Duration::from_nanos(nanos as u64))
}

/// Writes a duration in the largest unit up to seconds that represents it exactly, so that
/// `parse_duration(&format_duration(d), _) == Ok(d)` for every `d` below 2^64 ns.
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0".to_string();
    }
    for unit in [TimeUnit::Seconds, TimeUnit::Milliseconds, TimeUnit::Microseconds] {
        if nanos % unit.nanos() == 0 {
            return format!("{}{}", nanos / unit.nanos(), unit.suffix());
        }
    }
    format!("{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NS: BareUnit = BareUnit::Is(TimeUnit::Nanoseconds);
    const MS: BareUnit = BareUnit::Is(TimeUnit::Milliseconds);

    #[test]
    fn sizes_take_binary_suffixes_in_any_case() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("3G"), Ok(3 << 30));
    }

    #[test]
    fn a_bad_size_says_what_a_size_is() {
        for junk in ["", "k", "1kb", "-1", "1.5k", " 1k", "0x10"] {
            assert_eq!(
                parse_size(junk),
                Err("expected a size: digits with an optional k, m or g suffix (64k, 16m, 1g)".into()),
                "{junk:?}"
            );
        }
        assert_eq!(parse_size("18446744073709551615k"), Err("size overflows 64 bits".into()));
        assert_eq!(parse_size("99999999999999999999"), Err("size overflows 64 bits".into()));
    }

    #[test]
    fn durations_take_every_unit_in_any_case_and_fractions() {
        let ms = Duration::from_millis;
        let cases = [
            ("7ns", Duration::from_nanos(7)),
            ("7NS", Duration::from_nanos(7)),
            ("250us", Duration::from_micros(250)),
            ("500MS", ms(500)),
            ("1s", ms(1000)),
            ("1.5s", ms(1500)),
            (".5s", ms(500)),
            ("2m", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("007ms", ms(7)),
            ("0.000000001s", Duration::from_nanos(1)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text, BareUnit::Refused), Ok(expected), "{text}");
        }
    }

    #[test]
    fn a_bare_number_takes_the_unit_the_setting_names_or_is_refused() {
        assert_eq!(parse_duration("7", NS), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("2000", MS), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5", BareUnit::Is(TimeUnit::Seconds)), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0", BareUnit::Refused), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0.0", BareUnit::Refused), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration("5", BareUnit::Refused),
            Err("a bare number is ambiguous here: give a unit ns, us, ms, s, m or h (e.g. 5s)".into())
        );
    }

    #[test]
    fn a_bad_duration_says_what_a_duration_is() {
        let expected = Err("expected a duration: a number with a unit ns, us, ms, s, m or h (500ms, 1.5s, 2m)".into());
        for junk in ["", "s", "ms", ".", "1 s", " 1s", "1sec", "+1s", "-1s", "1e3s", "1..5s", "1.2.3s", "1.s", "1d"] {
            assert_eq!(parse_duration(junk, MS), expected, "{junk:?}");
        }
        assert_eq!(parse_duration("18446744074s", NS), Err("duration overflows 64-bit nanoseconds".into()));
        assert_eq!(parse_duration(&"9".repeat(31), NS), expected);
        assert_eq!(
            parse_duration("1.0000000001s", NS),
            Err("finer than a nanosecond (the smallest step of a duration)".into())
        );
    }

    proptest! {
        #[test]
        fn formatted_durations_parse_back(nanos in any::<u64>()) {
            let duration = Duration::from_nanos(nanos);
            prop_assert_eq!(parse_duration(&format_duration(duration), NS), Ok(duration));
        }

        #[test]
        fn no_text_panics(text in "[0-9.a-zA-Z -]{0,40}") {
            let _ = parse_duration(&text, BareUnit::Refused);
            let _ = parse_size(&text);
        }
    }
}
