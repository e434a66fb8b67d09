//! Channel URI parsing: `aeron:udp?endpoint=...|...`, `aeron:ipc` and the `aeron-spy:` prefix
//! into a typed [`ChannelUri`] (wire-protocol document §8).
//!
//! Every parameter key is defined once (a private `Key` table), parsed and validated once in
//! [`ChannelUri::parse`], and written back once by the [`fmt::Display`] implementation, which
//! is canonical: `ChannelUri::parse(&uri.to_string()) == Ok(uri)` for every parsed `uri`.
//!
//! Most parameters are optional and stay `None` when absent; the `*_or_default` methods apply
//! the defaults of the wire-protocol document. Some values are only *stored*, not interpreted
//! here: `fc` (grammar checked by [`crate::flow_control`]), `tags` and `alias`.
//!
//! Deliberate differences from the C driver, all in the direction of refusing instead of
//! guessing: host names other than `localhost` are not resolved (parsing does no I/O); keys are
//! matched exactly (the C driver matches by prefix); known Aeron parameters that affinity does
//! not implement (`ats`, `response-correlation-id`, timestamps, untethered timeouts,
//! `session-id=tag:<n>`) are errors rather than being ignored.

mod error;
mod key;
mod values;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub use error::ChannelError;
pub use values::{parse_duration, parse_size};

use key::{Key, UNSUPPORTED_KEYS};

use crate::limits::{self, FRAME_ALIGNMENT, MAX_TERM_LENGTH};
use crate::protocol::defaults;

/// Longest accepted URI in bytes (`AERON_URI_MAX_LENGTH` minus the C string terminator).
pub const MAX_URI_LENGTH: usize = 4095;
/// Default MTU for UDP and IPC: `AERON_MTU_LENGTH`.
pub const DEFAULT_MTU: u32 = defaults::MTU;
/// Default term length for UDP channels: `AERON_TERM_BUFFER_LENGTH` (16 MiB).
pub const DEFAULT_TERM_LENGTH_UDP: u32 = defaults::TERM_LENGTH_UDP;
/// Default term length for IPC channels: `AERON_IPC_TERM_BUFFER_LENGTH` (64 MiB).
pub const DEFAULT_TERM_LENGTH_IPC: u32 = defaults::TERM_LENGTH_IPC;
/// Default receiver window cap: `AERON_RCV_INITIAL_WINDOW_LENGTH` (128 KiB).
pub const DEFAULT_RECEIVER_WINDOW: u32 = defaults::RECEIVER_WINDOW;
/// Default linger after a publication closes: `AERON_PUBLICATION_LINGER_TIMEOUT` (5 s).
pub const DEFAULT_LINGER: Duration = defaults::PUBLICATION_LINGER;
/// Default unicast NAK delay: `AERON_NAK_UNICAST_DELAY` (100 µs).
pub const DEFAULT_NAK_DELAY: Duration = defaults::NAK_UNICAST_DELAY;
/// Default concurrent retransmit actions: `AERON_MAX_RESEND` (16).
pub const DEFAULT_MAX_RESEND: u32 = defaults::MAX_RESEND;
/// Largest `max-resend`.
pub const MAX_MAX_RESEND: u32 = 256;

/// The transport a channel uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Media {
    /// `aeron:udp` — unicast, multicast or multi-destination UDP.
    Udp,
    /// `aeron:ipc` — shared memory between clients of one driver.
    Ipc,
}

impl Media {
    /// The URI spelling: `udp` or `ipc`.
    pub fn as_str(self) -> &'static str {
        match self {
            Media::Udp => "udp",
            Media::Ipc => "ipc",
        }
    }
}

/// `interface=addr[:port][/prefixlen]`: the local interface to bind, send or join from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InterfaceSpec {
    /// The interface address (or network address when a prefix is given).
    pub address: IpAddr,
    /// Local port to bind, if given (0 is allowed and means ephemeral).
    pub port: Option<u16>,
    /// CIDR prefix length (0..=32 for IPv4, 0..=128 for IPv6): match any local interface in
    /// that network.
    pub prefix_length: Option<u8>,
}

impl fmt::Display for InterfaceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&values::format_host(self.address))?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        if let Some(prefix_length) = self.prefix_length {
            write!(f, "/{prefix_length}")?;
        }
        Ok(())
    }
}

/// An explicit start position: `init-term-id`, `term-id` and `term-offset` (given together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InitialPosition {
    /// `init-term-id`: the term id at position 0.
    pub initial_term_id: i32,
    /// `term-id`: the term to start in; never behind `initial_term_id` (32-bit wrapping).
    pub term_id: i32,
    /// `term-offset`: offset in that term; a multiple of 32, at most the term length.
    pub term_offset: i32,
}

impl InitialPosition {
    /// The stream position this start names in a stream of `term_length`-byte terms, or the key
    /// at fault and why (the rules: `logbuffer::position::start_position`).
    fn position(&self, term_length: u32) -> Result<i64, (Key, String)> {
        use crate::logbuffer::position::{max_position, start_position, StartError};
        let InitialPosition { initial_term_id, term_id, term_offset } = *self;
        start_position(initial_term_id, term_id, term_offset, term_length).map_err(|error| match error {
            StartError::TermIdBehind => (
                Key::TermId,
                format!(
                    "more than 2^31 - 1 terms after init-term-id={initial_term_id} \
                     (32-bit wrapping difference is negative)"
                ),
            ),
            StartError::UnalignedOffset => (Key::TermOffset, term_offset_rule()),
            StartError::OffsetPastTerm => (Key::TermOffset, format!("must not exceed the term length {term_length}")),
            StartError::PastMaxPosition => (
                Key::TermId,
                format!(
                    "the start position passes the largest position {} of a stream of term length {term_length}",
                    max_position(term_length)
                ),
            ),
        })
    }
}

/// Why a `term-offset` is refused (without the key).
fn term_offset_rule() -> String {
    format!("must be a non-negative multiple of {FRAME_ALIGNMENT}")
}

/// `cc=`: the receiver's congestion control.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CongestionControl {
    /// `static`: window = min(rcv-wnd, term_length / 2). The default.
    Static,
    /// `cubic`: CUBIC window in MTUs, capped by the static window.
    Cubic,
}

impl CongestionControl {
    /// The URI spelling: `static` or `cubic`.
    pub fn as_str(self) -> &'static str {
        match self {
            CongestionControl::Static => "static",
            CongestionControl::Cubic => "cubic",
        }
    }
}

/// `control-mode=`: how a multi-destination (or response) channel learns its destinations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControlMode {
    /// `dynamic`: the sender learns destinations from status messages to `control`.
    Dynamic,
    /// `manual`: destinations are added and removed by the application.
    Manual,
    /// `response`: response channel (experimental in Aeron, §6.11).
    Response,
}

impl ControlMode {
    /// The URI spelling: `dynamic`, `manual` or `response`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlMode::Dynamic => "dynamic",
            ControlMode::Manual => "manual",
            ControlMode::Response => "response",
        }
    }
}

/// Why an `aeron:udp` channel without `endpoint=` is refused: publications send to it and
/// subscriptions bind (or join) it.
pub const MISSING_ENDPOINT: &str = "endpoint is required (endpoint=host:port)";

/// A parsed channel URI. Absent parameters are `None`; see the `*_or_default` methods.
///
/// Build one with [`ChannelUri::parse`] (validated) or [`ChannelUri::new`] plus field
/// assignments (not validated: the canonical [`fmt::Display`] of a hand-built value with, say,
/// a `|` inside `alias` does not parse back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelUri {
    /// `udp` or `ipc`.
    pub media: Media,
    /// `aeron-spy:` prefix: a spy subscription on a local network publication (UDP only).
    pub spy: bool,
    /// `endpoint`: publication destination / subscription bind address. Port is never 0; a
    /// multicast group has an odd last byte.
    pub endpoint: Option<SocketAddr>,
    /// `interface`: local interface to bind / join / send from.
    pub interface: Option<InterfaceSpec>,
    /// `control`: explicit control address (MDC, response channels); port 0 allowed.
    pub control: Option<SocketAddr>,
    /// `control-mode`: `dynamic`, `manual` or `response`.
    pub control_mode: Option<ControlMode>,
    /// `mtu`: maximum datagram payload incl. the 32-byte header; a multiple of 32 in 64..=65504.
    pub mtu: Option<u32>,
    /// `term-length`: a power of two in 64 KiB..=1 GiB.
    pub term_length: Option<u32>,
    /// `init-term-id` + `term-id` + `term-offset`.
    pub initial_position: Option<InitialPosition>,
    /// `session-id`: the publication's session id, or the only session a subscription accepts.
    pub session_id: Option<i32>,
    /// `linger`: how long a closed publication lingers.
    pub linger: Option<Duration>,
    /// `so-sndbuf`: SO_SNDBUF in bytes (0..=i32::MAX; 0 = OS default).
    pub so_sndbuf: Option<usize>,
    /// `so-rcvbuf`: SO_RCVBUF in bytes (0..=i32::MAX; 0 = OS default).
    pub so_rcvbuf: Option<usize>,
    /// `rcv-wnd`: receiver window cap in bytes (> 0).
    pub rcv_wnd: Option<u32>,
    /// `ttl`: multicast TTL.
    pub ttl: Option<u8>,
    /// `fc`: flow-control strategy, stored raw; its grammar (§7.8) is checked by
    /// [`crate::flow_control`]. Only guaranteed non-empty here.
    pub flow_control: Option<String>,
    /// `gtag`: group tag a subscription appends to its status messages.
    pub group_tag: Option<i64>,
    /// `nak-delay`: unicast NAK delay.
    pub nak_delay: Option<Duration>,
    /// `reliable`: `false` gap-fills losses instead of NAKing.
    pub reliable: Option<bool>,
    /// `eos`: send end-of-stream when the publication closes.
    pub eos: Option<bool>,
    /// `group`: treat the image as a group (multicast) image; `None` (also `group=infer`) means
    /// infer from the channel and the SETUP flags.
    pub group: Option<bool>,
    /// `sparse`: sparse log files (local only).
    pub sparse: Option<bool>,
    /// `pub-wnd`: publisher window in bytes; at least the MTU, at most half the term length.
    pub publication_window: Option<u32>,
    /// `max-resend`: concurrent retransmit actions for group channels, 1..=256.
    pub max_resend: Option<u32>,
    /// `tether`: a slow consumer holds the publisher back.
    pub tether: Option<bool>,
    /// `rejoin`: re-join the stream after the image is lost.
    pub rejoin: Option<bool>,
    /// `cc`: congestion control.
    pub congestion_control: Option<CongestionControl>,
    /// `ssc`: spies simulate a connection.
    pub spies_simulate_connection: Option<bool>,
    /// `tags`: `channelTag[,entityTag]`, stored raw (non-empty) and not interpreted here.
    pub tags: Option<String>,
    /// `alias`: display name, stored raw (non-empty).
    pub alias: Option<String>,
}

/// The three start-position keys, collected before they are checked together.
#[derive(Default)]
struct PositionParts {
    initial_term_id: Option<i32>,
    term_id: Option<i32>,
    term_offset: Option<i32>,
}

fn size_in(value: &str, min: u64, max: u64) -> Result<u64, String> {
    let size = parse_size(value)?;
    if size < min || size > max {
        return Err(format!("must be between {min} and {max}"));
    }
    Ok(size)
}

/// Narrows a size already checked against a `u32`-sized maximum.
fn to_u32(size: u64) -> u32 {
    u32::try_from(size).unwrap_or(u32::MAX)
}

impl ChannelUri {
    /// A URI of the given media with no parameters (not valid for UDP until an endpoint or
    /// control address is set).
    pub fn new(media: Media) -> Self {
        ChannelUri {
            media,
            spy: false,
            endpoint: None,
            interface: None,
            control: None,
            control_mode: None,
            mtu: None,
            term_length: None,
            initial_position: None,
            session_id: None,
            linger: None,
            so_sndbuf: None,
            so_rcvbuf: None,
            rcv_wnd: None,
            ttl: None,
            flow_control: None,
            group_tag: None,
            nak_delay: None,
            reliable: None,
            eos: None,
            group: None,
            sparse: None,
            publication_window: None,
            max_resend: None,
            tether: None,
            rejoin: None,
            congestion_control: None,
            spies_simulate_connection: None,
            tags: None,
            alias: None,
        }
    }

    /// Parses and validates a channel URI. Parameter order does not matter; unknown, duplicate,
    /// empty or malformed parameters are errors naming the key and value.
    pub fn parse(uri: &str) -> Result<Self, ChannelError> {
        let fail = |key: Option<&str>, value: Option<&str>, reason: String| ChannelError::new(uri, key, value, reason);
        if uri.len() > MAX_URI_LENGTH {
            return Err(fail(None, None, format!("longer than {MAX_URI_LENGTH} bytes ({})", uri.len())));
        }
        let (spy, rest) = match uri.strip_prefix("aeron-spy:") {
            Some(rest) => (true, rest),
            None => (false, uri),
        };
        let rest = rest
            .strip_prefix("aeron:")
            .ok_or_else(|| fail(None, None, "must start with aeron: (or aeron-spy:aeron:)".to_string()))?;
        let (media_text, query) = match rest.split_once('?') {
            Some((media, query)) => (media, Some(query)),
            None => (rest, None),
        };
        let media = match media_text {
            "udp" => Media::Udp,
            "ipc" => Media::Ipc,
            other => return Err(fail(None, None, format!("unknown media {other:?}: expected udp or ipc"))),
        };
        if spy && media != Media::Udp {
            return Err(fail(None, None, "aeron-spy: needs a udp channel".to_string()));
        }

        let mut channel = ChannelUri::new(media);
        channel.spy = spy;
        let mut position = PositionParts::default();
        // The text given for each key, to name it in errors about combinations.
        let mut given: [Option<&str>; Key::ALL.len()] = [None; Key::ALL.len()];
        // `aeron:ipc?` with nothing after the `?` has no parameters.
        let parameters = query.filter(|query| !query.is_empty());
        for parameter in parameters.into_iter().flat_map(|query| query.split('|')) {
            let (key_text, value) = parameter.split_once('=').ok_or_else(|| {
                let key = (!parameter.is_empty()).then_some(parameter);
                fail(key, None, "expected key=value".to_string())
            })?;
            if key_text.is_empty() {
                return Err(fail(None, Some(value), "empty key".to_string()));
            }
            let key = match Key::from_name(key_text) {
                Some(key) => key,
                None if UNSUPPORTED_KEYS.contains(&key_text) => {
                    return Err(fail(
                        Some(key_text),
                        Some(value),
                        "Aeron parameter not supported by affinity".to_string(),
                    ))
                }
                None => return Err(fail(Some(key_text), Some(value), "unknown parameter".to_string())),
            };
            if value.is_empty() {
                return Err(fail(Some(key_text), Some(value), "empty value".to_string()));
            }
            if given[key.index()].is_some() {
                return Err(fail(Some(key_text), Some(value), "parameter given more than once".to_string()));
            }
            given[key.index()] = Some(value);
            if media == Media::Ipc && key.is_udp_only() {
                return Err(fail(Some(key_text), Some(value), "only valid for aeron:udp".to_string()));
            }
            channel.apply(key, value, &mut position).map_err(|reason| fail(Some(key_text), Some(value), reason))?;
        }
        let given_text = |key: Key| given[key.index()];
        channel.check_combinations(position, uri, given_text)?;
        Ok(channel)
    }

    /// Parses and stores one parameter; returns the reason on failure.
    fn apply(&mut self, key: Key, value: &str, position: &mut PositionParts) -> Result<(), String> {
        use values::{parse_bool, parse_group_tag, parse_i32, parse_interface, parse_socket_address};
        match key {
            Key::Endpoint => {
                let address = parse_socket_address(value, false)?;
                if address.ip().is_multicast() && last_byte(address.ip()) % 2 == 0 {
                    return Err("multicast group address must be odd in its last byte".to_string());
                }
                self.endpoint = Some(address);
            }
            Key::Interface => self.interface = Some(parse_interface(value)?),
            Key::Control => self.control = Some(parse_socket_address(value, true)?),
            Key::ControlMode => {
                self.control_mode = Some(match value {
                    "dynamic" => ControlMode::Dynamic,
                    "manual" => ControlMode::Manual,
                    "response" => ControlMode::Response,
                    _ => return Err("expected dynamic, manual or response".to_string()),
                })
            }
            Key::Ttl => {
                let ttl = values::parse_unsigned(value)
                    .ok()
                    .and_then(|ttl| u8::try_from(ttl).ok())
                    .ok_or_else(|| "must be a decimal number in 0..255".to_string())?;
                self.ttl = Some(ttl);
            }
            Key::Mtu => {
                self.mtu = Some(limits::mtu(i128::from(parse_size(value)?))?);
            }
            Key::TermLength => {
                self.term_length = Some(limits::term_length(i128::from(parse_size(value)?))?);
            }
            Key::InitTermId => position.initial_term_id = Some(parse_i32(value)?),
            Key::TermId => position.term_id = Some(parse_i32(value)?),
            Key::TermOffset => {
                let offset = parse_i32(value)?;
                if offset < 0 || offset % FRAME_ALIGNMENT as i32 != 0 {
                    return Err(term_offset_rule());
                }
                position.term_offset = Some(offset);
            }
            Key::SessionId => {
                if value.starts_with("tag:") {
                    return Err("tagged session ids (tag:<n>) are not supported".to_string());
                }
                self.session_id = Some(parse_i32(value)?);
            }
            Key::Linger => self.linger = Some(parse_duration(value)?),
            Key::Eos => self.eos = Some(parse_bool(value)?),
            Key::Sparse => self.sparse = Some(parse_bool(value)?),
            Key::PublicationWindow => {
                let window = size_in(value, 1, u64::from(MAX_TERM_LENGTH / 2))?;
                self.publication_window = Some(to_u32(window));
            }
            Key::MaxResend => {
                let resend = values::parse_unsigned(value)
                    .ok()
                    .filter(|resend| (1..=u64::from(MAX_MAX_RESEND)).contains(resend))
                    .ok_or_else(|| format!("must be a decimal number in 1..{MAX_MAX_RESEND}"))?;
                self.max_resend = Some(to_u32(resend));
            }
            Key::FlowControl => self.flow_control = Some(value.to_string()),
            Key::SpiesSimulateConnection => self.spies_simulate_connection = Some(parse_bool(value)?),
            Key::GroupTag => self.group_tag = Some(parse_group_tag(value)?),
            Key::ReceiverWindow => {
                self.rcv_wnd = Some(to_u32(size_in(value, 1, u64::from(u32::MAX))?));
            }
            Key::SoSndbuf => {
                let size = size_in(value, 0, i32::MAX as u64)?;
                self.so_sndbuf = Some(usize::try_from(size).map_err(|_| "too large".to_string())?);
            }
            Key::SoRcvbuf => {
                let size = size_in(value, 0, i32::MAX as u64)?;
                self.so_rcvbuf = Some(usize::try_from(size).map_err(|_| "too large".to_string())?);
            }
            Key::Reliable => self.reliable = Some(parse_bool(value)?),
            Key::CongestionControl => {
                self.congestion_control = Some(match value {
                    "static" => CongestionControl::Static,
                    "cubic" => CongestionControl::Cubic,
                    _ => return Err("expected static or cubic".to_string()),
                })
            }
            Key::NakDelay => self.nak_delay = Some(parse_duration(value)?),
            Key::Group => {
                self.group = if value.eq_ignore_ascii_case("infer") {
                    None
                } else {
                    Some(parse_bool(value).map_err(|_| "expected true, false or infer")?)
                }
            }
            Key::Tether => self.tether = Some(parse_bool(value)?),
            Key::Rejoin => self.rejoin = Some(parse_bool(value)?),
            Key::Tags => self.tags = Some(value.to_string()),
            Key::Alias => self.alias = Some(value.to_string()),
        }
        Ok(())
    }

    /// Checks rules that involve more than one parameter.
    fn check_combinations<'a>(
        &mut self,
        position: PositionParts,
        uri: &str,
        given: impl Fn(Key) -> Option<&'a str>,
    ) -> Result<(), ChannelError> {
        let named = |key: Key, reason: String| ChannelError::new(uri, Some(key.name()), given(key), reason);
        let term_length = self.term_length_or_default();
        match (position.initial_term_id, position.term_id, position.term_offset) {
            (None, None, None) => {}
            (Some(initial_term_id), Some(term_id), Some(term_offset)) => {
                let start = InitialPosition { initial_term_id, term_id, term_offset };
                // Checked against the URI's term length (or the media default) here; the driver
                // checks again against the term length it actually uses (`start_position`).
                start.position(term_length).map_err(|(key, reason)| named(key, reason))?;
                self.initial_position = Some(start);
            }
            (initial_term_id, term_id, _) => {
                let missing = if initial_term_id.is_none() {
                    Key::InitTermId
                } else if term_id.is_none() {
                    Key::TermId
                } else {
                    Key::TermOffset
                };
                return Err(named(
                    missing,
                    "missing: init-term-id, term-id and term-offset must be given together".to_string(),
                ));
            }
        }
        if let Some(window) = self.publication_window {
            let mtu = self.mtu_or_default();
            if window < mtu || window > term_length / 2 {
                return Err(named(
                    Key::PublicationWindow,
                    format!("must be at least the mtu {mtu} and at most half the term length {}", term_length / 2),
                ));
            }
        }
        if self.media == Media::Udp
            && self.endpoint.is_none()
            && self.control.is_none()
            && self.tags.is_none()
            && !matches!(self.control_mode, Some(ControlMode::Manual | ControlMode::Response))
        {
            return Err(ChannelError::new(
                uri,
                None,
                None,
                "aeron:udp needs endpoint or control (or tags, or control-mode=manual|response)",
            ));
        }
        Ok(())
    }

    /// The position a publication of this channel starts at in a log of `term_length`-byte
    /// terms (the driver's own term length when the URI names none): 0 without
    /// `init-term-id|term-id|term-offset`, otherwise that start checked against `term_length`.
    /// `uri` is the text this was parsed from; a start that does not fit is the same
    /// [`ChannelError`] (key and value named) as parsing gives.
    pub fn start_position(&self, uri: &str, term_length: u32) -> Result<i64, ChannelError> {
        let Some(start) = self.initial_position else { return Ok(0) };
        start
            .position(term_length)
            .map_err(|(key, reason)| ChannelError::new(uri, Some(key.name()), self.value_text(key).as_deref(), reason))
    }

    /// What this crate's media driver refuses in an `aeron:udp` channel that parses, rather than
    /// ignoring it (the feature named, ending "is not supported by this driver"), or `None`.
    /// The driver refuses with it, and clients (the Spark data source at plan time included)
    /// check a channel with it before any driver sees it.
    pub fn unsupported_udp(&self) -> Option<String> {
        if self.media != Media::Udp {
            return None;
        }
        let what = if self.spy {
            "aeron-spy: (spy subscriptions)"
        } else if self.control.is_some() || self.control_mode.is_some() {
            "control / control-mode (multi-destination and response channels)"
        } else if self.tags.is_some() {
            "tags (shared channel endpoints)"
        } else if self.congestion_control == Some(CongestionControl::Cubic) {
            "cc=cubic (the receiver window is static)"
        } else if self.tether == Some(false)
            || self.rejoin == Some(false)
            || self.spies_simulate_connection == Some(true)
        {
            "tether=false, rejoin=false or ssc=true"
        } else if self.endpoint.is_none() {
            return Some(MISSING_ENDPOINT.to_string());
        } else {
            return None;
        };
        Some(format!("{what} is not supported by this driver"))
    }

    /// Whether the endpoint is a multicast group.
    pub fn is_multicast(&self) -> bool {
        self.endpoint.is_some_and(|endpoint| endpoint.ip().is_multicast())
    }

    /// The MTU: `mtu` or [`DEFAULT_MTU`] (1408, for UDP and IPC).
    pub fn mtu_or_default(&self) -> u32 {
        self.mtu.unwrap_or(DEFAULT_MTU)
    }

    /// The term length: `term-length`, or 16 MiB for UDP and 64 MiB for IPC.
    pub fn term_length_or_default(&self) -> u32 {
        self.term_length.unwrap_or(match self.media {
            Media::Udp => DEFAULT_TERM_LENGTH_UDP,
            Media::Ipc => DEFAULT_TERM_LENGTH_IPC,
        })
    }

    /// The static receiver window for images of `term_length`: `min(rcv-wnd or 128 KiB,
    /// term_length / 2)` (§6.4).
    pub fn receiver_window_or_default(&self, term_length: u32) -> u32 {
        self.rcv_wnd.unwrap_or(DEFAULT_RECEIVER_WINDOW).min(term_length / 2)
    }

    /// The publisher window for `term_length`: `pub-wnd` or `term_length / 2`.
    pub fn publication_window_or_default(&self, term_length: u32) -> u32 {
        self.publication_window.unwrap_or(term_length / 2)
    }

    /// How long a closed publication lingers: `linger` or 5 s.
    pub fn linger_or_default(&self) -> Duration {
        self.linger.unwrap_or(DEFAULT_LINGER)
    }

    /// The unicast NAK delay: `nak-delay` or 100 µs.
    pub fn nak_delay_or_default(&self) -> Duration {
        self.nak_delay.unwrap_or(DEFAULT_NAK_DELAY)
    }

    /// Concurrent retransmit actions: `max-resend` or 16.
    pub fn max_resend_or_default(&self) -> u32 {
        self.max_resend.unwrap_or(DEFAULT_MAX_RESEND)
    }

    /// Where receivers send control frames (SM, NAK, ERR): for a multicast endpoint the control
    /// group, i.e. the group with its last byte + 1 (wrapping, as Aeron does) on the same port;
    /// otherwise the explicit `control` address, if any.
    pub fn control_address(&self) -> Option<SocketAddr> {
        match self.endpoint {
            Some(endpoint) if endpoint.ip().is_multicast() => {
                Some(SocketAddr::new(next_in_last_byte(endpoint.ip()), endpoint.port()))
            }
            _ => self.control,
        }
    }

    /// The canonical text of one parameter, if present.
    fn value_text(&self, key: Key) -> Option<String> {
        use values::{format_duration, format_socket_address};
        match key {
            Key::Endpoint => self.endpoint.map(format_socket_address),
            Key::Interface => show(self.interface),
            Key::Control => self.control.map(format_socket_address),
            Key::ControlMode => self.control_mode.map(|mode| mode.as_str().to_string()),
            Key::Ttl => show(self.ttl),
            Key::Mtu => show(self.mtu),
            Key::TermLength => show(self.term_length),
            Key::InitTermId => self.initial_position.map(|p| p.initial_term_id.to_string()),
            Key::TermId => self.initial_position.map(|p| p.term_id.to_string()),
            Key::TermOffset => self.initial_position.map(|p| p.term_offset.to_string()),
            Key::SessionId => show(self.session_id),
            Key::Linger => self.linger.map(format_duration),
            Key::Eos => show(self.eos),
            Key::Sparse => show(self.sparse),
            Key::PublicationWindow => show(self.publication_window),
            Key::MaxResend => show(self.max_resend),
            Key::FlowControl => self.flow_control.clone(),
            Key::SpiesSimulateConnection => show(self.spies_simulate_connection),
            Key::GroupTag => show(self.group_tag),
            Key::ReceiverWindow => show(self.rcv_wnd),
            Key::SoSndbuf => show(self.so_sndbuf),
            Key::SoRcvbuf => show(self.so_rcvbuf),
            Key::Reliable => show(self.reliable),
            Key::CongestionControl => self.congestion_control.map(|cc| cc.as_str().to_string()),
            Key::NakDelay => self.nak_delay.map(format_duration),
            Key::Group => show(self.group),
            Key::Tether => show(self.tether),
            Key::Rejoin => show(self.rejoin),
            Key::Tags => self.tags.clone(),
            Key::Alias => self.alias.clone(),
        }
    }
}

/// Canonical re-encoding: `aeron-spy:` if a spy, then `aeron:<media>`, then the present
/// parameters in a fixed order, sizes in bytes, durations in their largest exact unit.
impl fmt::Display for ChannelUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.spy {
            f.write_str("aeron-spy:")?;
        }
        write!(f, "aeron:{}", self.media.as_str())?;
        let mut separator = '?';
        for key in Key::ALL {
            if let Some(value) = self.value_text(key) {
                write!(f, "{separator}{}={value}", key.name())?;
                separator = '|';
            }
        }
        Ok(())
    }
}

fn show<T: fmt::Display>(value: Option<T>) -> Option<String> {
    value.map(|value| value.to_string())
}

fn last_byte(address: IpAddr) -> u8 {
    match address {
        IpAddr::V4(v4) => v4.octets()[3],
        IpAddr::V6(v6) => v6.octets()[15],
    }
}

/// The address with its last byte incremented (wrapping, without carry), as Aeron derives the
/// multicast control group.
fn next_in_last_byte(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mut octets = v4.octets();
            octets[3] = octets[3].wrapping_add(1);
            IpAddr::from(octets)
        }
        IpAddr::V6(v6) => {
            let mut octets = v6.octets();
            octets[15] = octets[15].wrapping_add(1);
            IpAddr::from(octets)
        }
    }
}
