use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use proptest::prelude::*;

use super::*;

fn parse(uri: &str) -> ChannelUri {
    match ChannelUri::parse(uri) {
        Ok(channel) => channel,
        Err(error) => panic!("{uri} should parse: {error}"),
    }
}

fn error(uri: &str) -> ChannelError {
    match ChannelUri::parse(uri) {
        Ok(channel) => panic!("{uri} should be refused, parsed as {channel:?}"),
        Err(error) => error,
    }
}

/// A UDP URI with one extra parameter (plus whatever address the key needs to be valid).
fn udp_with(key: &str, value: &str) -> String {
    if key == "endpoint" {
        format!("aeron:udp?control=127.0.0.1:40457|{key}={value}")
    } else {
        format!("aeron:udp?endpoint=127.0.0.1:40456|{key}={value}")
    }
}

fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), port)
}

#[test]
fn every_key_accepts_a_good_value() {
    let channel = |key: &str, value: &str| parse(&udp_with(key, value));
    assert_eq!(channel("endpoint", "10.0.0.1:40456").endpoint, Some(v4(10, 0, 0, 1, 40456)));
    assert_eq!(
        channel("interface", "192.168.1.0:5000/24").interface,
        Some(InterfaceSpec {
            address: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 0)),
            port: Some(5000),
            prefix_length: Some(24),
        })
    );
    assert_eq!(channel("control", "127.0.0.1:0").control, Some(v4(127, 0, 0, 1, 0)));
    assert_eq!(channel("control-mode", "dynamic").control_mode, Some(ControlMode::Dynamic));
    assert_eq!(channel("ttl", "255").ttl, Some(255));
    assert_eq!(channel("mtu", "8192").mtu, Some(8192));
    assert_eq!(channel("mtu", "8k").mtu, Some(8192));
    assert_eq!(channel("term-length", "64k").term_length, Some(65536));
    assert_eq!(channel("term-length", "1g").term_length, Some(1 << 30));
    assert_eq!(channel("session-id", "-7").session_id, Some(-7));
    assert_eq!(channel("linger", "250ms").linger, Some(Duration::from_millis(250)));
    assert_eq!(channel("eos", "false").eos, Some(false));
    assert_eq!(channel("sparse", "true").sparse, Some(true));
    assert_eq!(channel("pub-wnd", "1m").publication_window, Some(1 << 20));
    assert_eq!(channel("max-resend", "256").max_resend, Some(256));
    assert_eq!(channel("fc", "tagged,g:1001/3,t:500ms").flow_control.as_deref(), Some("tagged,g:1001/3,t:500ms"));
    assert_eq!(channel("ssc", "TRUE").spies_simulate_connection, Some(true));
    assert_eq!(channel("gtag", "-42").group_tag, Some(-42));
    assert_eq!(channel("gtag", "0x10").group_tag, Some(16));
    assert_eq!(channel("rcv-wnd", "64k").rcv_wnd, Some(65536));
    assert_eq!(channel("so-sndbuf", "2m").so_sndbuf, Some(2 << 20));
    assert_eq!(channel("so-rcvbuf", "0").so_rcvbuf, Some(0));
    assert_eq!(channel("reliable", "false").reliable, Some(false));
    assert_eq!(channel("cc", "cubic").congestion_control, Some(CongestionControl::Cubic));
    assert_eq!(channel("nak-delay", "1MS").nak_delay, Some(Duration::from_millis(1)));
    assert_eq!(channel("group", "true").group, Some(true));
    assert_eq!(channel("group", "infer").group, None);
    assert_eq!(channel("tether", "false").tether, Some(false));
    assert_eq!(channel("rejoin", "false").rejoin, Some(false));
    assert_eq!(channel("tags", "1,2").tags.as_deref(), Some("1,2"));
    assert_eq!(channel("alias", "a=b:c").alias.as_deref(), Some("a=b:c"));
    let position =
        parse("aeron:udp?endpoint=127.0.0.1:40456|term-length=64k|init-term-id=100|term-id=102|term-offset=63488");
    assert_eq!(
        position.initial_position,
        Some(InitialPosition { initial_term_id: 100, term_id: 102, term_offset: 63488 })
    );
}

#[test]
fn every_key_refuses_a_bad_value_naming_key_and_value() {
    let cases: &[(&str, &[&str])] = &[
        (
            "endpoint",
            &[
                "127.0.0.1",
                "127.0.0.1:0",
                "127.0.0.1:65536",
                "127.0.0.1:+80",
                "127.0.0.1:",
                "example.com:80",
                "::1:80",
                "[::1:80",
                "[::1]80",
                "1.2.3:80",
                "224.0.1.2:40456",
                "[ff02::2]:40456",
            ],
        ),
        ("interface", &["1.2.3.4/33", "[::1]/129", "1.2.3.4:70000", "1.2.3", "eth0", "1.2.3.4/", "1.2.3.4/-1"]),
        ("control", &["127.0.0.1", "x:1", "127.0.0.1:99999"]),
        ("control-mode", &["auto", "Dynamic"]),
        ("ttl", &["256", "-1", "x"]),
        ("mtu", &["32", "0", "1400", "65536", "abc", "1.5k"]),
        ("term-length", &["100000", "32768", "2g", "1k", "16mb", "-64k"]),
        ("session-id", &["2147483648", "x", "tag:1", "+1", "1 "]),
        ("linger", &["5 s", "5d", "-1", "s", "99999999999s"]),
        ("eos", &["yes", "1"]),
        ("sparse", &["no"]),
        ("pub-wnd", &["0", "100", "16m", "x"]),
        ("max-resend", &["0", "257", "x"]),
        ("ssc", &["maybe"]),
        ("gtag", &["x", "0x", "010", "9223372036854775808", "0x8000000000000000", "1.0"]),
        ("rcv-wnd", &["0", "5g", "x"]),
        ("so-sndbuf", &["2g", "x"]),
        ("so-rcvbuf", &["-1", "4g"]),
        ("reliable", &["0"]),
        ("cc", &["reno", "CUBIC"]),
        ("nak-delay", &["1d", "fast"]),
        ("group", &["maybe"]),
        ("tether", &["on"]),
        ("rejoin", &["off"]),
        // Stored raw, so only emptiness is refused.
        ("fc", &[""]),
        ("tags", &[""]),
        ("alias", &[""]),
    ];
    for (key, bad_values) in cases {
        for value in *bad_values {
            let uri = udp_with(key, value);
            let error = error(&uri);
            assert_eq!(error.key.as_deref(), Some(*key), "{uri}: {error}");
            assert_eq!(error.value.as_deref(), Some(*value), "{uri}: {error}");
            assert!(error.to_string().contains(&format!("{key}={value}: ")), "{error}");
        }
    }
}

#[test]
fn start_position_keys_refuse_bad_values() {
    let base = "aeron:udp?endpoint=127.0.0.1:40456|term-length=64k";
    for (key, value, rest) in [
        ("init-term-id", "x", "term-id=1|term-offset=0"),
        ("term-id", "2147483648", "init-term-id=1|term-offset=0"),
        ("term-offset", "33", "init-term-id=1|term-id=1"),
        ("term-offset", "-32", "init-term-id=1|term-id=1"),
        ("term-offset", "65568", "init-term-id=1|term-id=1"),
        ("term-id", "-1", "init-term-id=0|term-offset=0"),
    ] {
        let uri = format!("{base}|{key}={value}|{rest}");
        let error = error(&uri);
        assert_eq!(error.key.as_deref(), Some(key), "{uri}: {error}");
        assert_eq!(error.value.as_deref(), Some(value), "{uri}: {error}");
    }
}

#[test]
fn start_position_needs_all_three_keys() {
    for (given, missing) in [
        ("init-term-id=1|term-id=1", "term-offset"),
        ("term-id=1|term-offset=0", "init-term-id"),
        ("init-term-id=1|term-offset=0", "term-id"),
        ("term-offset=0", "init-term-id"),
    ] {
        let error = error(&format!("aeron:udp?endpoint=127.0.0.1:1|{given}"));
        assert_eq!(error.key.as_deref(), Some(missing), "{error}");
        assert!(error.reason.contains("together"), "{error}");
    }
}

#[test]
fn term_offset_may_equal_the_term_length_and_defaults_to_media_term_length() {
    let at_end = parse("aeron:udp?endpoint=127.0.0.1:1|term-length=65536|init-term-id=0|term-id=0|term-offset=65536");
    assert_eq!(at_end.initial_position.map(|p| p.term_offset), Some(65536));
    // Without term-length, the 16 MiB UDP default bounds the offset.
    parse("aeron:udp?endpoint=127.0.0.1:1|init-term-id=0|term-id=0|term-offset=16777216");
    let error = error("aeron:udp?endpoint=127.0.0.1:1|init-term-id=0|term-id=0|term-offset=16777248");
    assert_eq!(error.key.as_deref(), Some("term-offset"));
    // Term ids wrap: a term id just past i32::MAX is after an initial id near it.
    parse("aeron:udp?endpoint=127.0.0.1:1|init-term-id=2147483647|term-id=-2147483648|term-offset=0");
}

#[test]
fn key_table_is_in_declaration_order_with_unique_names() {
    for (index, key) in Key::ALL.into_iter().enumerate() {
        assert_eq!(key.index(), index);
        assert_eq!(Key::from_name(key.name()), Some(key));
    }
}

#[test]
fn defaults_follow_the_wire_protocol_document() {
    let udp = parse("aeron:udp?endpoint=127.0.0.1:40456");
    assert_eq!(udp.media, Media::Udp);
    assert!(!udp.spy);
    assert_eq!(udp.mtu_or_default(), 1408);
    assert_eq!(udp.term_length_or_default(), 16 * 1024 * 1024);
    assert_eq!(udp.receiver_window_or_default(16 * 1024 * 1024), 1024 * 1024);
    assert_eq!(udp.receiver_window_or_default(65536), 32768);
    assert_eq!(udp.linger_or_default(), Duration::from_secs(5));
    assert_eq!(udp.nak_delay_or_default(), Duration::from_micros(100));
    assert_eq!(udp.max_resend_or_default(), 16);
    assert_eq!(udp.publication_window_or_default(65536), 32768);
    assert_eq!(udp.control_address(), None);
    assert_eq!(udp, ChannelUri { endpoint: Some(v4(127, 0, 0, 1, 40456)), ..ChannelUri::new(Media::Udp) });

    let ipc = parse("aeron:ipc");
    assert_eq!(ipc, ChannelUri::new(Media::Ipc));
    assert_eq!(ipc.term_length_or_default(), 64 * 1024 * 1024);
    assert_eq!(ipc.mtu_or_default(), 1408);
    assert_eq!(parse("aeron:ipc?"), ipc);

    let windowed = parse("aeron:udp?endpoint=127.0.0.1:1|rcv-wnd=1m");
    assert_eq!(windowed.receiver_window_or_default(16 << 20), 1 << 20);
    assert_eq!(windowed.receiver_window_or_default(1 << 20), 1 << 19);
}

#[test]
fn ipc_accepts_log_parameters_and_refuses_socket_parameters() {
    let ipc = parse("aeron:ipc?term-length=128k|mtu=4096|session-id=5|alias=x|init-term-id=3|term-id=4|term-offset=32");
    assert_eq!(ipc.term_length, Some(128 * 1024));
    assert_eq!(ipc.session_id, Some(5));
    for parameter in
        ["endpoint=127.0.0.1:1", "interface=127.0.0.1", "control=127.0.0.1:1", "ttl=1", "control-mode=manual"]
    {
        let error = error(&format!("aeron:ipc?{parameter}"));
        assert!(error.reason.contains("only valid for aeron:udp"), "{error}");
    }
}

#[test]
fn multicast_endpoint_is_detected_and_controls_via_the_next_group() {
    let channel = parse("aeron:udp?endpoint=224.20.30.39:24326|interface=127.0.0.1");
    assert!(channel.is_multicast());
    assert_eq!(channel.control_address(), Some(v4(224, 20, 30, 40, 24326)));

    let wrapping = parse("aeron:udp?endpoint=239.1.2.255:5000");
    assert_eq!(wrapping.control_address(), Some(v4(239, 1, 2, 0, 5000)));

    let v6 = parse("aeron:udp?endpoint=[ff02::1:3]:40456");
    assert!(v6.is_multicast());
    let control_v6 = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 4);
    assert_eq!(v6.control_address(), Some(SocketAddr::new(IpAddr::V6(control_v6), 40456)));

    let unicast = parse("aeron:udp?endpoint=127.0.0.1:40456|control=127.0.0.1:40457");
    assert!(!unicast.is_multicast());
    assert_eq!(unicast.control_address(), Some(v4(127, 0, 0, 1, 40457)));

    let error = error("aeron:udp?endpoint=224.20.30.40:24326");
    assert!(error.reason.contains("odd"), "{error}");
}

#[test]
fn hosts_are_ipv4_bracketed_ipv6_or_localhost() {
    assert_eq!(parse("aeron:udp?endpoint=localhost:40456").endpoint, Some(v4(127, 0, 0, 1, 40456)));
    assert_eq!(
        parse("aeron:udp?endpoint=[::1]:40456").endpoint,
        Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 40456))
    );
    let interface = |text: &str| parse(&udp_with("interface", text)).interface;
    assert_eq!(
        interface("::1"),
        Some(InterfaceSpec { address: IpAddr::V6(Ipv6Addr::LOCALHOST), port: None, prefix_length: None })
    );
    assert_eq!(interface("fe80::/64").and_then(|i| i.prefix_length), Some(64));
    assert_eq!(interface("[::1]:0").and_then(|i| i.port), Some(0));
    assert_eq!(interface("localhost").map(|i| i.address), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
}

#[test]
fn structural_errors_are_refused() {
    let cases = [
        ("udp?endpoint=127.0.0.1:1", "aeron:"),
        ("aeron:tcp?endpoint=127.0.0.1:1", "unknown media"),
        ("aeron:UDP?endpoint=127.0.0.1:1", "unknown media"),
        ("aeron:udp", "needs endpoint"),
        ("aeron:udp?", "needs endpoint"),
        ("aeron:udp?mtu=1408", "needs endpoint"),
        ("aeron:udp?endpoint=127.0.0.1:1|", "key=value"),
        ("aeron:udp?endpoint=127.0.0.1:1||mtu=1408", "key=value"),
        ("aeron:udp?endpoint=127.0.0.1:1|=5", "empty key"),
        ("aeron:udp?endpoint=127.0.0.1:1|mtu", "key=value"),
        ("aeron:udp?endpoint=127.0.0.1:1|mtu=", "empty value"),
        ("aeron:udp?endpoint=127.0.0.1:1|endpoint=127.0.0.1:2", "more than once"),
        ("aeron:udp?endpoint=127.0.0.1:1|bogus=1", "unknown parameter"),
        ("aeron:udp?endpoint=127.0.0.1:1|Mtu=1408", "unknown parameter"),
        ("aeron:udp?endpoint=127.0.0.1:1|ats=true", "not supported"),
        ("aeron-spy:aeron:ipc", "udp"),
        ("aeron-spy:udp?endpoint=127.0.0.1:1", "aeron:"),
    ];
    for (uri, reason) in cases {
        let error = error(uri);
        assert!(error.reason.contains(reason), "{uri}: {error}");
        assert_eq!(error.uri, uri);
    }
    let duplicate = error("aeron:udp?endpoint=127.0.0.1:1|mtu=1408|mtu=4096");
    assert_eq!(duplicate.key.as_deref(), Some("mtu"));
    assert_eq!(duplicate.value.as_deref(), Some("4096"));
}

#[test]
fn uri_length_is_limited_to_4095_bytes() {
    let base = "aeron:udp?endpoint=127.0.0.1:1|alias=";
    let longest = format!("{base}{}", "a".repeat(MAX_URI_LENGTH - base.len()));
    assert_eq!(parse(&longest).alias.map(|a| a.len()), Some(4095 - base.len()));
    let error = error(&format!("{longest}a"));
    assert!(error.reason.contains("4095"), "{error}");
    // The message stays short even though the URI is long.
    assert!(error.to_string().len() < 400);
}

#[test]
fn udp_without_endpoint_is_allowed_with_control_tags_or_manual_mode() {
    parse("aeron:udp?control=127.0.0.1:40457|control-mode=dynamic");
    parse("aeron:udp?tags=1001");
    parse("aeron:udp?control-mode=manual");
    parse("aeron:udp?control-mode=response");
    error("aeron:udp?control-mode=dynamic");
}

#[test]
fn spy_prefix_is_flagged() {
    let spy = parse("aeron-spy:aeron:udp?endpoint=127.0.0.1:40456");
    assert!(spy.spy);
    assert_eq!(spy.to_string(), "aeron-spy:aeron:udp?endpoint=127.0.0.1:40456");
}

#[test]
fn publication_window_is_bounded_by_mtu_and_half_term() {
    let uri = |rest: &str| format!("aeron:udp?endpoint=127.0.0.1:1|{rest}");
    parse(&uri("term-length=64k|pub-wnd=32k"));
    parse(&uri("mtu=8k|pub-wnd=8k"));
    let too_big = error(&uri("term-length=64k|pub-wnd=32800"));
    assert_eq!(too_big.key.as_deref(), Some("pub-wnd"));
    let below_mtu = error(&uri("mtu=8k|pub-wnd=4k"));
    assert_eq!(below_mtu.key.as_deref(), Some("pub-wnd"));
}

#[test]
fn error_message_names_uri_key_value_and_reason() {
    let error = error("aeron:udp?endpoint=127.0.0.1:1|term-length=100000");
    assert_eq!(
        error.to_string(),
        "invalid channel URI \"aeron:udp?endpoint=127.0.0.1:1|term-length=100000\": \
         term-length=100000: must be a power of two between 65536 and 1073741824"
    );
    let crate_error: crate::error::Error = error.into();
    assert!(crate_error.to_string().contains("term-length=100000"));
}

#[test]
fn display_is_canonical_and_round_trips() {
    let channel = parse(
        "aeron:udp?alias=x|linger=5000ms|term-length=64k|interface=[::1]:9/64|endpoint=224.1.1.1:4000|\
         gtag=0x10|nak-delay=1000|so-rcvbuf=1k|group=infer|init-term-id=-1|term-id=-1|term-offset=32",
    );
    let text = channel.to_string();
    assert_eq!(
        text,
        "aeron:udp?endpoint=224.1.1.1:4000|interface=[::1]:9/64|term-length=65536|\
         init-term-id=-1|term-id=-1|term-offset=32|linger=5s|gtag=16|so-rcvbuf=1024|\
         nak-delay=1us|alias=x"
    );
    assert_eq!(parse(&text), channel);
    assert_eq!(parse("aeron:ipc").to_string(), "aeron:ipc");
}

#[test]
fn sizes_and_durations_parse_with_suffixes() {
    assert_eq!(parse_size("0"), Ok(0));
    assert_eq!(parse_size("64k"), Ok(65536));
    assert_eq!(parse_size("64K"), Ok(65536));
    assert_eq!(parse_size("2m"), Ok(2 << 20));
    assert_eq!(parse_size("3G"), Ok(3 << 30));
    assert!(parse_size("").is_err());
    assert!(parse_size("k").is_err());
    assert!(parse_size("1kb").is_err());
    assert!(parse_size("-1").is_err());
    assert!(parse_size("18446744073709551615k").is_err());
    assert_eq!(parse_duration("7"), Ok(Duration::from_nanos(7)));
    assert_eq!(parse_duration("7NS"), Ok(Duration::from_nanos(7)));
    assert_eq!(parse_duration("7us"), Ok(Duration::from_micros(7)));
    assert_eq!(parse_duration("7Ms"), Ok(Duration::from_millis(7)));
    assert_eq!(parse_duration("7s"), Ok(Duration::from_secs(7)));
    assert!(parse_duration("").is_err());
    assert!(parse_duration("ms").is_err());
    // The one grammar of `units`: a fraction that is a whole number of nanoseconds is taken.
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert!(parse_duration("1 s").is_err());
    assert!(parse_duration("18446744074s").is_err());
}

// --- property tests -------------------------------------------------------------------------

const CASES: u32 = 500;

fn boolean() -> BoxedStrategy<String> {
    prop_oneof![Just("true"), Just("false"), Just("TRUE"), Just("False")].prop_map(str::to_string).boxed()
}

fn duration_text() -> BoxedStrategy<String> {
    (any::<u32>(), prop_oneof![Just(""), Just("ns"), Just("us"), Just("ms"), Just("s"), Just("MS")])
        .prop_map(|(n, unit)| format!("{n}{unit}"))
        .boxed()
}

fn ipv4_unicast() -> impl Strategy<Value = Ipv4Addr> {
    any::<[u8; 4]>().prop_map(Ipv4Addr::from).prop_filter("unicast", |a| !a.is_multicast())
}

fn endpoint_text() -> BoxedStrategy<String> {
    prop_oneof![
        (ipv4_unicast(), 1..=u16::MAX).prop_map(|(a, p)| format!("{a}:{p}")),
        (224u8..=239, any::<[u8; 2]>(), 0u8..128, 1..=u16::MAX)
            .prop_map(|(a, [b, c], d, p)| format!("{a}.{b}.{c}.{}:{p}", d * 2 + 1)),
        (any::<u128>(), 1..=u16::MAX).prop_map(|(a, p)| {
            // A multicast group (ff00::/8) must be odd in its last byte.
            let a = if a >> 120 == 0xff { a | 1 } else { a };
            format!("[{}]:{p}", Ipv6Addr::from(a))
        }),
        (1..=u16::MAX).prop_map(|p| format!("localhost:{p}")),
    ]
    .boxed()
}

fn interface_text() -> BoxedStrategy<String> {
    prop_oneof![
        (ipv4_unicast(), proptest::option::of(any::<u16>()), proptest::option::of(0u8..=32)).prop_map(
            |(a, port, prefix)| {
                let port = port.map(|p| format!(":{p}")).unwrap_or_default();
                let prefix = prefix.map(|p| format!("/{p}")).unwrap_or_default();
                format!("{a}{port}{prefix}")
            }
        ),
        (any::<u128>(), 0u8..=128).prop_map(|(a, prefix)| format!("{}/{prefix}", Ipv6Addr::from(a))),
    ]
    .boxed()
}

fn group_tag_text() -> BoxedStrategy<String> {
    prop_oneof![
        any::<i64>().prop_map(|tag| tag.to_string()),
        any::<i64>().prop_map(|tag| {
            let sign = if tag < 0 { "-" } else { "" };
            format!("{sign}0x{:x}", tag.unsigned_abs())
        }),
    ]
    .boxed()
}

/// One optional `key=value` per known key, all valid on their own. Cross-key rules are met by
/// construction (start position) or by dropping `pub-wnd` when it does not fit.
fn valid_parameters() -> impl Strategy<Value = Vec<(String, String)>> {
    let one = |key: &'static str, value: BoxedStrategy<String>| {
        proptest::option::of(value.prop_map(move |value| (key.to_string(), value))).boxed()
    };
    let start_position = proptest::option::of((any::<i32>(), 0..=i32::MAX, 0i32..=2048))
        .prop_map(|position| match position {
            None => vec![],
            Some((initial, delta, offset)) => vec![
                ("init-term-id".to_string(), initial.to_string()),
                ("term-id".to_string(), initial.wrapping_add(delta).to_string()),
                ("term-offset".to_string(), (offset * 32).to_string()),
            ],
        })
        .boxed();
    let singles: Vec<BoxedStrategy<Option<(String, String)>>> = vec![
        one("interface", interface_text()),
        one("control", (ipv4_unicast(), any::<u16>()).prop_map(|(a, p)| format!("{a}:{p}")).boxed()),
        one(
            "control-mode",
            prop_oneof![Just("dynamic"), Just("manual"), Just("response")].prop_map(str::to_string).boxed(),
        ),
        one("ttl", any::<u8>().prop_map(|t| t.to_string()).boxed()),
        one(
            "mtu",
            prop_oneof![(2u32..=2047).prop_map(|n| (n * 32).to_string()), (1u32..=63).prop_map(|n| format!("{n}k")),]
                .boxed(),
        ),
        one(
            "term-length",
            prop_oneof![
                (16u32..=30).prop_map(|bits| (1u64 << bits).to_string()),
                (6u32..=20).prop_map(|bits| format!("{}k", 1u64 << bits)),
                (0u32..=10).prop_map(|bits| format!("{}M", 1u64 << bits)),
            ]
            .boxed(),
        ),
        one("session-id", any::<i32>().prop_map(|s| s.to_string()).boxed()),
        one("linger", duration_text()),
        one("eos", boolean()),
        one("sparse", boolean()),
        one("pub-wnd", (1u32..=1 << 29).prop_map(|w| w.to_string()).boxed()),
        one("max-resend", (1u32..=256).prop_map(|m| m.to_string()).boxed()),
        one("fc", "[a-z0-9:,/]{1,12}".boxed()),
        one("ssc", boolean()),
        one("gtag", group_tag_text()),
        one("rcv-wnd", (1..=u32::MAX).prop_map(|w| w.to_string()).boxed()),
        one("so-sndbuf", (0..=i32::MAX as u32).prop_map(|s| s.to_string()).boxed()),
        one("so-rcvbuf", (0u32..=1024).prop_map(|s| format!("{s}k")).boxed()),
        one("reliable", boolean()),
        one("cc", prop_oneof![Just("static"), Just("cubic")].prop_map(str::to_string).boxed()),
        one("nak-delay", duration_text()),
        one("group", prop_oneof![boolean(), Just("infer".to_string())].boxed()),
        one("tether", boolean()),
        one("rejoin", boolean()),
        one("tags", "[0-9]{1,5}(,[0-9]{1,5})?".boxed()),
        one("alias", "[a-zA-Z0-9_.:=,-]{1,12}".boxed()),
    ];
    (endpoint_text(), singles, start_position).prop_map(|(endpoint, singles, position)| {
        let mut parameters = vec![("endpoint".to_string(), endpoint)];
        parameters.extend(singles.into_iter().flatten());
        parameters.extend(position);
        // Keep pub-wnd only where it fits between the mtu and half the term length.
        let value_of = |key: &str| parameters.iter().find(|(k, _)| k == key).and_then(|(_, v)| parse_size(v).ok());
        let mtu = value_of("mtu").unwrap_or(u64::from(DEFAULT_MTU));
        let term_length = value_of("term-length").unwrap_or(u64::from(DEFAULT_TERM_LENGTH_UDP));
        let fits = !matches!(value_of("pub-wnd"), Some(w) if w < mtu || w > term_length / 2);
        if !fits {
            parameters.retain(|(k, _)| k != "pub-wnd");
        }
        parameters
    })
}

fn join(spy: bool, parameters: &[(String, String)]) -> String {
    let query: Vec<String> = parameters.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let prefix = if spy { "aeron-spy:" } else { "" };
    format!("{prefix}aeron:udp?{}", query.join("|"))
}

fn uri_like() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        proptest::sample::select(Key::ALL.map(Key::name).to_vec()).prop_map(str::to_string),
        "[a-z-]{0,8}",
    ];
    let parameter = (key, "[ -~]{0,24}").prop_map(|(k, v)| format!("{k}={v}"));
    (
        prop_oneof![Just("aeron:udp?"), Just("aeron:ipc?"), Just("aeron-spy:aeron:udp?"), Just("aeron:"), Just(""),],
        proptest::collection::vec(parameter, 0..6),
    )
        .prop_map(|(prefix, parameters)| format!("{prefix}{}", parameters.join("|")))
}

#[test]
fn what_the_driver_does_not_do_in_a_udp_channel_is_named_and_ipc_is_left_alone() {
    let refused = |uri: &str| ChannelUri::parse(uri).unwrap().unsupported_udp();
    assert!(refused("aeron:udp?control=127.0.0.1:40124").unwrap().starts_with("control / control-mode"));
    assert!(refused("aeron-spy:aeron:udp?endpoint=127.0.0.1:40123").unwrap().starts_with("aeron-spy:"));
    assert!(refused("aeron:udp?endpoint=127.0.0.1:40123|cc=cubic")
        .unwrap()
        .contains("is not supported by this driver"));
    assert_eq!(refused("aeron:udp?endpoint=127.0.0.1:40123|fc=min"), None);
    assert_eq!(refused("aeron:ipc"), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>(), uri in uri_like()) {
        let _ = ChannelUri::parse(&text);
        if let Err(error) = ChannelUri::parse(&uri) {
            let _ = error.to_string();
        }
    }

    #[test]
    fn generated_valid_uris_round_trip_through_display(
        spy in any::<bool>(),
        parameters in valid_parameters(),
    ) {
        let uri = join(spy, &parameters);
        let channel = ChannelUri::parse(&uri).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let text = channel.to_string();
        let again = ChannelUri::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&again, &channel);
        prop_assert_eq!(again.to_string(), text);
    }

    #[test]
    fn parameter_order_is_irrelevant(
        (parameters, shuffled) in valid_parameters()
            .prop_flat_map(|p| (Just(p.clone()), Just(p).prop_shuffle())),
    ) {
        let original = ChannelUri::parse(&join(false, &parameters));
        let reordered = ChannelUri::parse(&join(false, &shuffled));
        prop_assert!(original.is_ok(), "{:?}", original);
        prop_assert_eq!(original, reordered);
    }

    #[test]
    fn durations_and_sizes_round_trip(nanos in any::<u64>(), size in 0u64..1 << 40) {
        let duration = Duration::from_nanos(nanos);
        prop_assert_eq!(parse_duration(&values::format_duration(duration)), Ok(duration));
        prop_assert_eq!(parse_size(&size.to_string()), Ok(size));
    }
}
