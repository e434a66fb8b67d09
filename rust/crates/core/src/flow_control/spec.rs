//! The `fc=` publication URI value and the driver-wide flow-control defaults.
//!
//! Grammar (wire-protocol.md §7.8), stricter than Aeron's C driver where it silently ignores
//! input:
//!
//! ```text
//! fc       = name *( "," option )
//! name     = "max" | "min" | "tagged"                  ; exact, case-sensitive
//! option   = "g:" ( tag [ "/" minsize ] | "/" minsize )  ; tag: signed decimal i64
//!          | "t:" duration                               ; minsize: 1..=i32::MAX
//! duration = the one grammar of `crate::units` (500ms, 1.5s; a bare number is nanoseconds)
//! ```
//!
//! Each option may appear once, option values are shorter than 64 characters. Options are
//! parsed for every strategy; `max` ignores them and `min` ignores the tag.

use std::fmt;
use std::time::Duration;

use super::DEFAULT_RECEIVER_TIMEOUT;

/// Longest option value accepted (exclusive), as in Aeron.
const MAX_OPTION_VALUE_LENGTH: usize = 64;

/// A strategy that can be named by `fc=` or chosen as the multicast default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    /// Follow the fastest receiver.
    Max,
    /// Follow the slowest live receiver.
    Min,
    /// Follow the slowest live receiver carrying the group tag.
    Tagged,
}

impl StrategyKind {
    /// The name used in `fc=`.
    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Max => "max",
            StrategyKind::Min => "min",
            StrategyKind::Tagged => "tagged",
        }
    }

    /// The strategy named exactly `name` (case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "max" => Some(StrategyKind::Max),
            "min" => Some(StrategyKind::Min),
            "tagged" => Some(StrategyKind::Tagged),
            _ => None,
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parsed `fc=` value of a publication URI, e.g. `min,g:/3,t:1000ms` or
/// `tagged,g:1001/3,t:1s`. Absent options are filled from [`FlowControlDefaults`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowControlSpec {
    /// The strategy named first.
    pub strategy: StrategyKind,
    /// `g:<tag>`: the group tag (used by `tagged` only).
    pub group_tag: Option<i64>,
    /// `g:.../<n>`: tracked receivers required before the publication is connected.
    pub group_min_size: Option<u32>,
    /// `t:<duration>`: how long a silent receiver stays tracked.
    pub receiver_timeout: Option<Duration>,
}

/// Driver-wide flow-control defaults, settable on the client/driver context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowControlDefaults {
    /// Strategy for multicast publications without `fc=` (default `max`).
    pub multicast_strategy: StrategyKind,
    /// Group tag for `tagged` when `g:` gives none (default none: `fc=tagged` then needs one).
    pub group_tag: Option<i64>,
    /// Group minimum size when `g:` gives none (default 0).
    pub group_min_size: u32,
    /// Receiver timeout when `t:` gives none (default 2 s).
    pub receiver_timeout: Duration,
}

impl Default for FlowControlDefaults {
    fn default() -> Self {
        FlowControlDefaults {
            multicast_strategy: StrategyKind::Max,
            group_tag: None,
            group_min_size: 0,
            receiver_timeout: DEFAULT_RECEIVER_TIMEOUT,
        }
    }
}

/// An invalid `fc=` value. Displays as `fc=<value>: <reason>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowControlError {
    /// The offending `fc=` value (as given, or canonical when checked after parsing).
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for FlowControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fc={}: {}", self.value, self.reason)
    }
}

impl std::error::Error for FlowControlError {}

impl FlowControlSpec {
    /// A spec naming `strategy` with no options.
    pub fn new(strategy: StrategyKind) -> Self {
        FlowControlSpec { strategy, group_tag: None, group_min_size: None, receiver_timeout: None }
    }

    /// Parses an `fc=` value (without the `fc=` key).
    pub fn parse(value: &str) -> Result<Self, FlowControlError> {
        let error = |reason: String| FlowControlError { value: value.to_owned(), reason };
        let mut parts = value.split(',');
        let name = parts.next().unwrap_or_default();
        let strategy = StrategyKind::from_name(name)
            .ok_or_else(|| error(format!("unknown flow control strategy \"{name}\" (expected max, min or tagged)")))?;
        let mut spec = FlowControlSpec::new(strategy);
        let mut seen_group = false;
        for option in parts {
            if option.is_empty() {
                return Err(error("empty option (options are separated by a single ',')".into()));
            }
            if let Some(group) = option.strip_prefix("g:") {
                if seen_group {
                    return Err(error("duplicate option g:".into()));
                }
                seen_group = true;
                check_length("g:", group).map_err(error)?;
                let (tag, min_size) = parse_group(group).map_err(error)?;
                spec.group_tag = tag;
                spec.group_min_size = min_size;
            } else if let Some(timeout) = option.strip_prefix("t:") {
                if spec.receiver_timeout.is_some() {
                    return Err(error("duplicate option t:".into()));
                }
                check_length("t:", timeout).map_err(error)?;
                spec.receiver_timeout = Some(parse_timeout(timeout).map_err(error)?);
            } else {
                return Err(error(format!("unknown option \"{option}\" (expected g:<tag>/<min size> or t:<timeout>)")));
            }
        }
        Ok(spec)
    }

    /// Checks the spec against the driver defaults it will be built with: `tagged` needs a
    /// group tag from `g:` or from the defaults.
    pub fn validate_with(&self, defaults: &FlowControlDefaults) -> Result<(), FlowControlError> {
        if self.strategy == StrategyKind::Tagged && self.group_tag.is_none() && defaults.group_tag.is_none() {
            return Err(FlowControlError {
                value: self.to_string(),
                reason: "tagged flow control needs a group tag (g:<tag>)".into(),
            });
        }
        Ok(())
    }
}

/// Canonical form, parseable again: `tagged,g:1001/3,t:1s`.
impl fmt::Display for FlowControlSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.strategy.name())?;
        if self.group_tag.is_some() || self.group_min_size.is_some() {
            f.write_str(",g:")?;
            if let Some(tag) = self.group_tag {
                write!(f, "{tag}")?;
            }
            if let Some(min_size) = self.group_min_size {
                write!(f, "/{min_size}")?;
            }
        }
        if let Some(timeout) = self.receiver_timeout {
            f.write_str(",t:")?;
            write_duration(f, timeout)?;
        }
        Ok(())
    }
}

fn check_length(option: &str, value: &str) -> Result<(), String> {
    if value.len() >= MAX_OPTION_VALUE_LENGTH {
        return Err(format!(
            "option {option} value is too long ({} characters, limit {})",
            value.len(),
            MAX_OPTION_VALUE_LENGTH - 1
        ));
    }
    Ok(())
}

/// `tag`, `tag/minsize` or `/minsize`.
fn parse_group(group: &str) -> Result<(Option<i64>, Option<u32>), String> {
    if group.is_empty() {
        return Err("empty group option g: (expected g:<tag>, g:<tag>/<min size> or g:/<min size>)".into());
    }
    let (tag_text, min_size_text) = match group.split_once('/') {
        Some((tag, min_size)) => (tag, Some(min_size)),
        None => (group, None),
    };
    let tag = if tag_text.is_empty() {
        None
    } else {
        let tag =
            parse_integer::<i64>(tag_text).ok_or_else(|| format!("group tag \"{tag_text}\" is not an integer"))?;
        Some(tag)
    };
    let min_size = match min_size_text {
        None => None,
        Some(text) => {
            let size =
                parse_integer::<i64>(text).ok_or_else(|| format!("group minimum size \"{text}\" is not an integer"))?;
            if !(1..=i64::from(i32::MAX)).contains(&size) {
                return Err(format!("group minimum size {size} is out of range (must be 1..={})", i32::MAX));
            }
            // The range check above guarantees the conversion.
            Some(size as u32)
        }
    };
    Ok((tag, min_size))
}

/// A decimal integer with an optional sign and nothing else (no spaces, no `0x`).
fn parse_integer<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout =
        parse_duration(text).map_err(|why| format!("receiver timeout \"{text}\" is not a duration: {why}"))?;
    if timeout.is_zero() {
        return Err("receiver timeout must be greater than zero".into());
    }
    Ok(timeout)
}

/// The `t:` duration: [`crate::units::parse_duration`] with a bare number in nanoseconds (as
/// Aeron's C driver reads it).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::units::parse_duration(text, crate::units::BareUnit::Is(crate::units::TimeUnit::Nanoseconds))
}

/// The largest unit that represents `duration` exactly.
fn write_duration(f: &mut fmt::Formatter<'_>, duration: Duration) -> fmt::Result {
    let nanos = duration.as_nanos();
    for (unit, size) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if nanos != 0 && nanos % size == 0 {
            return write!(f, "{}{unit}", nanos / size);
        }
    }
    write!(f, "{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn spec(
        strategy: StrategyKind,
        group_tag: Option<i64>,
        group_min_size: Option<u32>,
        receiver_timeout: Option<Duration>,
    ) -> FlowControlSpec {
        FlowControlSpec { strategy, group_tag, group_min_size, receiver_timeout }
    }

    #[test]
    fn accepts_every_documented_example() {
        use StrategyKind::{Max, Min, Tagged};
        let cases = [
            ("max", spec(Max, None, None, None)),
            ("min", spec(Min, None, None, None)),
            ("tagged,g:1001", spec(Tagged, Some(1001), None, None)),
            ("min,g:/3", spec(Min, None, Some(3), None)),
            ("tagged,g:1001/3", spec(Tagged, Some(1001), Some(3), None)),
            ("min,g:/3,t:1000ms", spec(Min, None, Some(3), Some(ms(1000)))),
            ("tagged,g:1001/3,t:1s", spec(Tagged, Some(1001), Some(3), Some(ms(1000)))),
            ("min,t:2s", spec(Min, None, None, Some(ms(2000)))),
            ("tagged,g:1001/3,t:500ms", spec(Tagged, Some(1001), Some(3), Some(ms(500)))),
            ("tagged,t:1s,g:-5", spec(Tagged, Some(-5), None, Some(ms(1000)))),
            ("min,g:1001/2", spec(Min, Some(1001), Some(2), None)),
            ("max,g:/2,t:1s", spec(Max, None, Some(2), Some(ms(1000)))),
            ("tagged", spec(Tagged, None, None, None)),
        ];
        for (value, expected) in cases {
            let parsed = FlowControlSpec::parse(value).unwrap_or_else(|e| panic!("{value}: {e}"));
            assert_eq!(parsed, expected, "{value}");
        }
    }

    #[test]
    fn rejects_invalid_values_with_a_reason_naming_the_problem() {
        let cases: &[(&str, &str)] = &[
            ("", "unknown flow control strategy \"\" (expected max, min or tagged)"),
            ("fast", "unknown flow control strategy \"fast\" (expected max, min or tagged)"),
            ("MIN", "unknown flow control strategy \"MIN\""),
            ("unicast", "expected max, min or tagged"),
            (" min", "unknown flow control strategy"),
            ("min,t:fast", "receiver timeout \"fast\" is not a duration"),
            ("min,t:", "receiver timeout \"\" is not a duration"),
            ("min,t:1d", "receiver timeout \"1d\" is not a duration: expected a duration"),
            ("min,t:-1s", "receiver timeout \"-1s\" is not a duration"),
            ("min,t:1.5ns", "receiver timeout \"1.5ns\" is not a duration: finer than a nanosecond"),
            ("min,t:0", "receiver timeout must be greater than zero"),
            ("min,t:99999999999999999999s", "is not a duration: duration overflows 64-bit nanoseconds"),
            ("min,g:/0", "group minimum size 0 is out of range"),
            ("tagged,g:1001/0", "group minimum size 0 is out of range"),
            ("min,g:/-1", "group minimum size -1 is out of range"),
            ("min,g:/2147483648", "group minimum size 2147483648 is out of range"),
            ("min,g:/", "group minimum size \"\" is not an integer"),
            ("min,g:/x", "group minimum size \"x\" is not an integer"),
            ("tagged,g:1001/3/4", "group minimum size \"3/4\" is not an integer"),
            ("tagged,g:abc", "group tag \"abc\" is not an integer"),
            ("tagged,g:1001x", "group tag \"1001x\" is not an integer"),
            ("tagged,g:0x10", "group tag \"0x10\" is not an integer"),
            ("tagged,g: 1", "group tag \" 1\" is not an integer"),
            ("tagged,g:-", "group tag \"-\" is not an integer"),
            ("tagged,g:99999999999999999999", "is not an integer"),
            ("tagged,g:", "empty group option g:"),
            ("min,", "empty option"),
            ("min,,t:1s", "empty option"),
            ("min,g:/2,g:/3", "duplicate option g:"),
            ("min,t:1s,t:2s", "duplicate option t:"),
            ("min,x:1", "unknown option \"x:1\""),
            ("min,G:/3", "unknown option \"G:/3\""),
            ("min,g", "unknown option \"g\""),
        ];
        for (value, expected) in cases {
            let error = FlowControlSpec::parse(value).expect_err(value);
            assert_eq!(error.value, *value);
            assert!(error.reason.contains(expected), "{value}: got {:?}", error.reason);
        }
    }

    #[test]
    fn rejects_option_values_of_64_characters_or_more() {
        let long_tag = format!("tagged,g:{}1", "0".repeat(62));
        assert!(FlowControlSpec::parse(&long_tag).is_ok());
        let too_long = format!("tagged,g:{}1", "0".repeat(63));
        let error = FlowControlSpec::parse(&too_long).unwrap_err();
        assert!(error.reason.contains("too long"), "{}", error.reason);
    }

    #[test]
    fn error_display_names_the_option_and_value() {
        let error = FlowControlSpec::parse("tagged,g:abc").unwrap_err();
        assert_eq!(error.to_string(), "fc=tagged,g:abc: group tag \"abc\" is not an integer");
        let error = FlowControlSpec::parse("min,t:fast").unwrap_err();
        assert!(error.to_string().starts_with("fc=min,t:fast: receiver timeout \"fast\""));
    }

    #[test]
    fn tagged_without_tag_parses_but_fails_validation_without_default_tag() {
        let spec = FlowControlSpec::parse("tagged,g:/3").unwrap();
        let error = spec.validate_with(&FlowControlDefaults::default()).unwrap_err();
        assert_eq!(error.value, "tagged,g:/3");
        assert_eq!(error.reason, "tagged flow control needs a group tag (g:<tag>)");
        let with_tag = FlowControlDefaults { group_tag: Some(1), ..Default::default() };
        assert!(spec.validate_with(&with_tag).is_ok());
        assert!(FlowControlSpec::parse("min").unwrap().validate_with(&Default::default()).is_ok());
    }

    #[test]
    fn durations_accept_every_unit_case_insensitively() {
        let cases = [
            ("1000ms", ms(1000)),
            ("1s", ms(1000)),
            ("1S", ms(1000)),
            ("500MS", ms(500)),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            ("7", Duration::from_nanos(7)),
            ("0", Duration::ZERO),
            ("007ms", ms(7)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
        for junk in ["", "s", "ms", "1 s", "1sec", "1d", "+1s", "1e3", "18446744073709551616"] {
            assert!(parse_duration(junk).is_err(), "{junk}");
        }
    }

    #[test]
    fn display_round_trips_through_parse() {
        for value in ["max", "min,g:/3,t:1s", "tagged,g:1001/3,t:500ms", "tagged,g:-1,t:7ns"] {
            let spec = FlowControlSpec::parse(value).unwrap();
            assert_eq!(spec.to_string(), value);
            assert_eq!(FlowControlSpec::parse(&spec.to_string()).unwrap(), spec);
        }
        let spec = FlowControlSpec::parse("min,t:1000ms").unwrap();
        assert_eq!(spec.to_string(), "min,t:1s");
    }

    #[test]
    fn defaults_are_max_no_tag_no_min_size_two_seconds() {
        let defaults = FlowControlDefaults::default();
        assert_eq!(defaults.multicast_strategy, StrategyKind::Max);
        assert_eq!(defaults.group_tag, None);
        assert_eq!(defaults.group_min_size, 0);
        assert_eq!(defaults.receiver_timeout, Duration::from_secs(2));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn parser_never_panics_on_arbitrary_strings(value in "\\PC{0,80}") {
            let _ = FlowControlSpec::parse(&value);
        }

        #[test]
        fn parser_never_panics_on_near_miss_strings(
            value in "(max|min|tagged|mi)(,(g|t|x)?:?[-+/0-9a-zA-Z]{0,24}){0,4}"
        ) {
            if let Ok(spec) = FlowControlSpec::parse(&value) {
                prop_assert_eq!(FlowControlSpec::parse(&spec.to_string()), Ok(spec));
            }
        }
    }
}
