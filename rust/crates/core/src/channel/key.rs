//! The parameter keys: each defined once, with its URI spelling, in canonical display order.

/// Every parameter key the parser knows, in canonical (display) order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Key {
    Endpoint,
    Interface,
    Control,
    ControlMode,
    Ttl,
    Mtu,
    TermLength,
    InitTermId,
    TermId,
    TermOffset,
    SessionId,
    Linger,
    Eos,
    Sparse,
    PublicationWindow,
    MaxResend,
    FlowControl,
    SpiesSimulateConnection,
    GroupTag,
    ReceiverWindow,
    SoSndbuf,
    SoRcvbuf,
    Reliable,
    CongestionControl,
    NakDelay,
    Group,
    Tether,
    Rejoin,
    Tags,
    Alias,
}

impl Key {
    pub(super) const ALL: [Key; 30] = [
        Key::Endpoint,
        Key::Interface,
        Key::Control,
        Key::ControlMode,
        Key::Ttl,
        Key::Mtu,
        Key::TermLength,
        Key::InitTermId,
        Key::TermId,
        Key::TermOffset,
        Key::SessionId,
        Key::Linger,
        Key::Eos,
        Key::Sparse,
        Key::PublicationWindow,
        Key::MaxResend,
        Key::FlowControl,
        Key::SpiesSimulateConnection,
        Key::GroupTag,
        Key::ReceiverWindow,
        Key::SoSndbuf,
        Key::SoRcvbuf,
        Key::Reliable,
        Key::CongestionControl,
        Key::NakDelay,
        Key::Group,
        Key::Tether,
        Key::Rejoin,
        Key::Tags,
        Key::Alias,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Key::Endpoint => "endpoint",
            Key::Interface => "interface",
            Key::Control => "control",
            Key::ControlMode => "control-mode",
            Key::Ttl => "ttl",
            Key::Mtu => "mtu",
            Key::TermLength => "term-length",
            Key::InitTermId => "init-term-id",
            Key::TermId => "term-id",
            Key::TermOffset => "term-offset",
            Key::SessionId => "session-id",
            Key::Linger => "linger",
            Key::Eos => "eos",
            Key::Sparse => "sparse",
            Key::PublicationWindow => "pub-wnd",
            Key::MaxResend => "max-resend",
            Key::FlowControl => "fc",
            Key::SpiesSimulateConnection => "ssc",
            Key::GroupTag => "gtag",
            Key::ReceiverWindow => "rcv-wnd",
            Key::SoSndbuf => "so-sndbuf",
            Key::SoRcvbuf => "so-rcvbuf",
            Key::Reliable => "reliable",
            Key::CongestionControl => "cc",
            Key::NakDelay => "nak-delay",
            Key::Group => "group",
            Key::Tether => "tether",
            Key::Rejoin => "rejoin",
            Key::Tags => "tags",
            Key::Alias => "alias",
        }
    }

    /// Position in [`Key::ALL`]: the declaration order is the canonical order.
    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub(super) fn from_name(name: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|key| key.name() == name)
    }

    /// Keys that only make sense with sockets.
    pub(super) fn is_udp_only(self) -> bool {
        matches!(self, Key::Endpoint | Key::Interface | Key::Control | Key::ControlMode | Key::Ttl)
    }
}

/// Aeron parameters affinity knows of but does not implement: refused with a clear reason.
pub(super) const UNSUPPORTED_KEYS: [&str; 8] = [
    "response-correlation-id",
    "untethered-window-limit-timeout",
    "untethered-resting-timeout",
    "media-rcv-ts-offset",
    "channel-rcv-ts-offset",
    "channel-snd-ts-offset",
    "ats",
    "stream-id",
];
