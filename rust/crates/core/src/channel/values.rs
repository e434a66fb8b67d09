//! Value grammars shared by channel URI parameters: integers, booleans and addresses; sizes
//! and durations are [`crate::units`]'.
//!
//! Every function here returns the *reason* on failure; the caller attaches the key and the
//! value (see [`super::ChannelError`]). None of them panics on any input: slicing only happens at
//! ASCII positions found by searching the same string.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::InterfaceSpec;
use crate::units::{BareUnit, TimeUnit};

pub use crate::units::{format_duration, parse_size};

/// Parses a duration parameter of a URI (`linger`, `nak-delay`, flow control's `t:`) with the
/// one grammar of [`crate::units`]; a bare number is nanoseconds, as Aeron's
/// `aeron_parse_duration_ns` reads it.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::units::parse_duration(s, BareUnit::Is(TimeUnit::Nanoseconds))
}

/// Parses plain decimal digits (no sign, no whitespace) into a `u64`.
pub(crate) fn parse_unsigned(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected decimal digits".to_string());
    }
    s.parse::<u64>().map_err(|_| "number overflows 64 bits".to_string())
}

/// Parses an optionally negative decimal integer into an `i32`.
pub(crate) fn parse_i32(s: &str) -> Result<i32, String> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected a decimal 32-bit signed integer".to_string());
    }
    // `i32::from_str` accepts the sign we already checked, and reports overflow.
    let text = if negative { s } else { digits };
    text.parse::<i32>().map_err(|_| "outside the 32-bit signed integer range".to_string())
}

/// Parses a group tag: an `i64` in decimal or `0x` hexadecimal, optionally negative.
///
/// The C driver parses `gtag` with `strtoll(.., 0)`, where a leading `0` means octal; a
/// multi-digit decimal with a leading zero is rejected so that no URI means different tags to
/// this crate and to Aeron.
pub(crate) fn parse_group_tag(s: &str) -> Result<i64, String> {
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let magnitude: u64 = if let Some(hex) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("expected hexadecimal digits after 0x".to_string());
        }
        u64::from_str_radix(hex, 16).map_err(|_| "outside the 64-bit signed range".to_string())?
    } else {
        if body.len() > 1 && body.starts_with('0') {
            return Err("leading zero is ambiguous (octal in the C driver); write decimal or 0x hex".to_string());
        }
        parse_unsigned(body).map_err(|_| "expected a 64-bit signed integer, decimal or 0x hex".to_string())?
    };
    const MIN_MAGNITUDE: u64 = 1 << 63;
    match (negative, magnitude) {
        (false, m) if m <= i64::MAX as u64 => Ok(m as i64),
        // `m as i64` wraps 2^63 to i64::MIN, whose negation is itself.
        (true, m) if m <= MIN_MAGNITUDE => Ok((m as i64).wrapping_neg()),
        _ => Err("outside the 64-bit signed range".to_string()),
    }
}

/// Parses `true` or `false` (ASCII case-insensitive).
pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    if s.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if s.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err("expected true or false".to_string())
    }
}

/// Parses a host: dotted IPv4, `[IPv6]` or `localhost` (127.0.0.1). Host names are not
/// resolved: parsing does no I/O.
fn parse_host(s: &str) -> Result<IpAddr, String> {
    if s.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
        return inner
            .parse::<Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| "expected an IPv6 address inside [ ]".to_string());
    }
    if let Ok(v4) = s.parse::<Ipv4Addr>() {
        return Ok(IpAddr::V4(v4));
    }
    if s.parse::<Ipv6Addr>().is_ok() {
        return Err("IPv6 addresses must be written in brackets: [addr]".to_string());
    }
    Err("expected an IPv4 address, [IPv6 address] or localhost (host names are not resolved)".to_string())
}

/// Splits `host:port` where host may be `[v6]`; returns the host and the port text, if any.
fn split_host_port(s: &str) -> Result<(&str, Option<&str>), String> {
    if s.starts_with('[') {
        let close = s.find(']').ok_or_else(|| "unterminated [ in IPv6 address".to_string())?;
        let (host, rest) = s.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err("expected :port after ]".to_string()),
            },
        };
    }
    // A bare IPv6 address has several colons; report it as such rather than as a bad port.
    if s.matches(':').count() > 1 {
        return Ok((s, None));
    }
    Ok(match s.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (s, None),
    })
}

fn parse_port(s: &str) -> Result<u16, String> {
    parse_unsigned(s)
        .ok()
        .and_then(|port| u16::try_from(port).ok())
        .ok_or_else(|| "port must be a decimal number in 0..65535".to_string())
}

/// Parses `host:port` (see [`parse_host`]); port 0 is refused unless `allow_port_zero`.
pub(crate) fn parse_socket_address(s: &str, allow_port_zero: bool) -> Result<SocketAddr, String> {
    let (host, port) = split_host_port(s)?;
    let address = parse_host(host)?;
    let port = port.ok_or_else(|| "expected host:port".to_string())?;
    let port = parse_port(port)?;
    if port == 0 && !allow_port_zero {
        return Err("port must be in 1..65535".to_string());
    }
    Ok(SocketAddr::new(address, port))
}

/// Parses `addr[:port][/prefixlen]` where addr is IPv4, `[IPv6]` (a bare IPv6 address is
/// accepted when there is no port) or `localhost`.
pub(crate) fn parse_interface(s: &str) -> Result<InterfaceSpec, String> {
    let (address_port, prefix) = match s.split_once('/') {
        Some((head, prefix)) => (head, Some(prefix)),
        None => (s, None),
    };
    let (address, port) = match address_port.parse::<Ipv6Addr>() {
        Ok(v6) => (IpAddr::V6(v6), None),
        Err(_) => {
            let (host, port) = split_host_port(address_port)?;
            (parse_host(host)?, port.map(parse_port).transpose()?)
        }
    };
    let max_prefix = if address.is_ipv4() { 32 } else { 128 };
    let prefix_length = match prefix {
        None => None,
        Some(text) => {
            let length = parse_unsigned(text)
                .ok()
                .filter(|length| *length <= max_prefix)
                .ok_or_else(|| format!("prefix length must be a decimal number in 0..{max_prefix}"))?;
            // Bounded by 128 just above.
            Some(length as u8)
        }
    };
    Ok(InterfaceSpec { address, port, prefix_length })
}

/// Writes an IP address the way the URI grammar wants it: IPv6 in brackets.
pub(crate) fn format_host(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// Writes `host:port` with IPv6 in brackets and without scope or flow information.
pub(crate) fn format_socket_address(address: SocketAddr) -> String {
    format!("{}:{}", format_host(address.ip()), address.port())
}
