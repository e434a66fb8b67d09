//! Member plumbing: what every participant of the control plane does the same way, whatever
//! its role — group publishers, consumers and observers, subject subscribers and sources (and
//! nodes of a routed cluster).
//!
//! * [`new_member_id`] — a random, process-unique member id.
//! * [`Timing`] — heartbeat interval and liveness timeout, validated once.
//! * [`resolve_host`] and [`open_inbox`] — the member's inbox: a unicast subscription
//!   `aeron:udp?endpoint=<ip>:<port>` on one or more streams, on a fixed address (`listen`) or a
//!   port the OS picks.
//! * [`seal_into`] and [`offer_to_all`] — a control message encoded once, sealed once by the
//!   member's [`StreamAuth`], offered to every peer's publication.
//! * [`PeerTable`] — publications to peers (asked for, created outside the member's lock,
//!   installed), kept while the peer is live in the [`MemberView`] or still listed by discovery.
//!
//! This is the only module of `control` that touches the client API (and, to find a free port,
//! a socket); the codecs, the view and the authentication stay sans-IO.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::auth::StreamAuth;
use super::codec::{Heartbeat, Role};
use super::error::ControlError;
use super::limits::MAX_MEMBERS;
use super::view::MemberView;
use super::{CONTROL_STREAM_ID, DATA_STREAM_ID};
use crate::client::{ClientApi, PublicationHandle as Publication, SubscriptionHandle as Subscription};
use crate::error::Error;
use crate::time::Instant;

/// Default heartbeat interval.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// Default liveness timeout: a member not heard for this long is gone.
pub const DEFAULT_LIVENESS_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest heartbeat interval.
pub const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(1);
/// Longest heartbeat interval.
pub const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(60);
/// The liveness timeout is at least this many heartbeat intervals.
pub const MIN_LIVENESS_HEARTBEATS: u32 = 3;
/// Longest liveness timeout.
pub const MAX_LIVENESS_TIMEOUT: Duration = Duration::from_secs(3600);
/// Attempts at binding an inbox on a port the OS picks (another process may take the port
/// between the probe and the driver's bind).
pub const INBOX_ATTEMPTS: usize = 16;
/// Term length of control publications to peers (heartbeats up to 512 KiB).
pub const CONTROL_TERM_LENGTH: &str = "4m";

/// Why member plumbing failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum MemberError {
    /// An invalid setting (host, listen address, timing), named with its value.
    Config(String),
    /// The transport refused (driver, closed client).
    Transport(Error),
}

impl fmt::Display for MemberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberError::Config(message) => f.write_str(message),
            MemberError::Transport(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for MemberError {}

impl From<Error> for MemberError {
    fn from(error: Error) -> Self {
        MemberError::Transport(error)
    }
}

/// A new member id: random, never 0, below `i64::MAX` (it crosses into Python as an int), and
/// different for every call in this process.
pub fn new_member_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (hasher.finish() & (i64::MAX as u64)).max(1)
}

/// Timing shared by every member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Heartbeat interval.
    pub heartbeat_interval: Duration,
    /// A member silent this long is gone.
    pub liveness_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL, liveness_timeout: DEFAULT_LIVENESS_TIMEOUT }
    }
}

impl Timing {
    /// Validates: interval between [`MIN_HEARTBEAT_INTERVAL`] and [`MAX_HEARTBEAT_INTERVAL`],
    /// liveness timeout at least [`MIN_LIVENESS_HEARTBEATS`] intervals and at most
    /// [`MAX_LIVENESS_TIMEOUT`].
    pub fn new(heartbeat_interval: Duration, liveness_timeout: Duration) -> Result<Timing, MemberError> {
        if !(MIN_HEARTBEAT_INTERVAL..=MAX_HEARTBEAT_INTERVAL).contains(&heartbeat_interval) {
            return Err(MemberError::Config(format!(
                "heartbeat interval {} ms: must be between {} ms and {} s",
                heartbeat_interval.as_millis(),
                MIN_HEARTBEAT_INTERVAL.as_millis(),
                MAX_HEARTBEAT_INTERVAL.as_secs()
            )));
        }
        let shortest = heartbeat_interval * MIN_LIVENESS_HEARTBEATS;
        if liveness_timeout < shortest || liveness_timeout > MAX_LIVENESS_TIMEOUT {
            return Err(MemberError::Config(format!(
                "liveness timeout {} ms: must be at least three heartbeat intervals ({} ms) and at most 1 h",
                liveness_timeout.as_millis(),
                shortest.as_millis()
            )));
        }
        Ok(Timing { heartbeat_interval, liveness_timeout })
    }

    /// Whether a periodic action last done at `last` (never: `None`) is due again at `now`.
    pub fn heartbeat_due(&self, last: Option<Instant>, now: Instant) -> bool {
        last.is_none_or(|at| now.saturating_since(at) >= self.heartbeat_interval)
    }
}

/// Resolves the address a member advertises: an IP address or a host name (its first
/// address). A wildcard address is refused: peers could not reach it.
pub fn resolve_host(host: &str) -> Result<IpAddr, MemberError> {
    let address = match host.parse::<IpAddr>() {
        Ok(address) => address,
        Err(_) => (host, 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addresses| addresses.next())
            .map(|a| a.ip())
            .ok_or_else(|| MemberError::Config(format!("host {host:?}: cannot resolve it to an address")))?,
    };
    if address.is_unspecified() {
        return Err(MemberError::Config(format!(
            "host {host:?}: a wildcard address cannot be advertised to peers; give this host's address"
        )));
    }
    Ok(address)
}

/// Where a member's inbox listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InboxAddress {
    /// On this address, a port the OS picks (retried [`INBOX_ATTEMPTS`] times).
    Pick(IpAddr),
    /// At a fixed address (`listen="host:port"`).
    Fixed {
        /// Where the inbox binds (may be a wildcard address).
        bind: SocketAddr,
        /// What peers are told (`bind`, or `host` with `bind`'s port when `bind` is a wildcard).
        advertised: SocketAddr,
    },
}

impl InboxAddress {
    /// The inbox address of a member advertising `host` (an IP address or a host name) and
    /// listening at `listen` (`host:port`; absent: a port the OS picks on `host`). A `listen`
    /// on a specific address is advertised as it is; on a wildcard address (`0.0.0.0:port`)
    /// the member advertises `host` with that port. Port 0 lets the OS pick.
    pub fn new(host: &str, listen: Option<&str>) -> Result<InboxAddress, MemberError> {
        let Some(listen) = listen else { return Ok(InboxAddress::Pick(resolve_host(host)?)) };
        let bind = parse_address(listen, "listen", true)?;
        let advertised_ip = if bind.ip().is_unspecified() { resolve_host(host)? } else { bind.ip() };
        if bind.port() == 0 {
            return Ok(InboxAddress::Pick(advertised_ip));
        }
        Ok(InboxAddress::Fixed { bind, advertised: SocketAddr::new(advertised_ip, bind.port()) })
    }
}

/// Parses one `host:port` (IP address or host name), naming `what` and the value when it is
/// not one. A wildcard address is refused unless `wildcard` (an address to bind, not to reach).
pub fn parse_address(text: &str, what: &str, wildcard: bool) -> Result<SocketAddr, MemberError> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        if address.ip().is_unspecified() && !wildcard {
            return Err(MemberError::Config(format!("{what} {text:?}: a wildcard address cannot be reached")));
        }
        return Ok(address);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(MemberError::Config(format!("{what} {text:?}: expected host:port")));
    };
    let port: u16 =
        port.parse().map_err(|_| MemberError::Config(format!("{what} {text:?}: port {port:?} is not 0..=65535")))?;
    let ip = resolve_host(host).map_err(|e| MemberError::Config(format!("{what} {text:?}: {e}")))?;
    Ok(SocketAddr::new(ip, port))
}

/// A member's inbox: one unicast subscription per stream, all at `endpoint`.
pub struct Inbox {
    /// `ip:port`, as peers are told.
    pub endpoint: String,
    /// One subscription per stream asked for, in order.
    pub subscriptions: Vec<Subscription>,
}

/// Opens an inbox at `address` with one subscription per stream of `streams`.
pub fn open_inbox(client: &dyn ClientApi, address: &InboxAddress, streams: &[i32]) -> Result<Inbox, MemberError> {
    let open = |bind: SocketAddr, advertised: SocketAddr| -> Result<Inbox, Error> {
        let channel = format!("aeron:udp?endpoint={bind}");
        let mut subscriptions = Vec::with_capacity(streams.len());
        for stream in streams {
            match client.add_subscription_handle(&channel, *stream) {
                Ok(subscription) => subscriptions.push(subscription),
                Err(error) => {
                    subscriptions.iter().for_each(Subscription::close);
                    return Err(error);
                }
            }
        }
        Ok(Inbox { endpoint: advertised.to_string(), subscriptions })
    };
    let ip = match address {
        InboxAddress::Fixed { bind, advertised } => {
            return open(*bind, *advertised)
                .map_err(|e| MemberError::Config(format!("listen {bind}: cannot open an inbox there: {e}")))
        }
        InboxAddress::Pick(ip) => *ip,
    };
    let mut last = None;
    for _ in 0..INBOX_ATTEMPTS {
        let probe = std::net::UdpSocket::bind(SocketAddr::new(ip, 0))
            .map_err(|e| MemberError::Config(format!("host {ip}: cannot bind an inbox: {e}")))?;
        let endpoint = probe.local_addr().map_err(Error::Io)?;
        drop(probe);
        match open(endpoint, endpoint) {
            Ok(inbox) => return Ok(inbox),
            Err(error @ Error::Driver(_)) => last = Some(error),
            Err(other) => return Err(other.into()),
        }
    }
    Err(last.unwrap_or_else(|| Error::Driver("cannot open an inbox".into())).into())
}

/// A heartbeat that carries no claims nor figures (observers, subject subscribers and sources).
pub fn plain_heartbeat(
    fingerprint: u64,
    member_id: u64,
    role: Role,
    name: &str,
    endpoint: &str,
    leaving: bool,
) -> Heartbeat {
    Heartbeat {
        fingerprint,
        member_id,
        leaving,
        role,
        name: name.to_owned(),
        endpoint: endpoint.to_owned(),
        index: 0,
        count: 0,
        pid: std::process::id(),
        claims: Vec::new(),
        figures: Vec::new(),
    }
}

/// Encodes a message with `emit` into `out` (cleared first) and seals it by `auth` (a no-op
/// without a secret): sealed once, offered to any number of peers.
pub fn seal_into(
    out: &mut Vec<u8>,
    auth: &mut StreamAuth,
    emit: impl FnOnce(&mut Vec<u8>) -> Result<(), ControlError>,
) -> Result<(), ControlError> {
    out.clear();
    emit(out)?;
    auth.seal(out);
    Ok(())
}

/// Offers `bytes` to every publication; returns how many refused (not connected yet,
/// back-pressure).
pub fn offer_to_all<'a>(bytes: &[u8], publications: impl IntoIterator<Item = &'a Publication>) -> u64 {
    publications.into_iter().filter(|publication| publication.try_offer(bytes).is_err()).count() as u64
}

/// Publications to create for a peer.
pub struct PeerRequest {
    /// The peer's member id.
    pub id: u64,
    /// Its inbox `ip:port`.
    pub endpoint: String,
    /// Whether a DATA-stream publication is wanted too.
    pub data: bool,
    /// Whether discovery (a registry file) listed it, rather than a heartbeat.
    pub listed: bool,
    /// When it was asked for.
    pub requested: Instant,
}

/// A peer's inbox, as this member reaches it.
pub struct Peer {
    /// Publication to its CONTROL stream (`None`: it could not be created, counted).
    pub control: Option<Publication>,
    /// Publication to its DATA stream, when wanted.
    pub data: Option<Publication>,
    /// When it was found.
    pub discovered: Instant,
    /// Whether discovery lists it now.
    pub listed: bool,
}

/// A created (or failed) request: the request and its CONTROL and DATA publications.
pub type OpenedPeer = (PeerRequest, Option<Publication>, Option<Publication>);

/// The peers a member sends to: installed publications and requests not created yet, at most
/// [`MAX_MEMBERS`] together.
#[derive(Default)]
pub struct PeerTable {
    peers: HashMap<u64, Peer>,
    wanted: Vec<PeerRequest>,
}

impl PeerTable {
    /// An empty table.
    pub fn new() -> PeerTable {
        PeerTable::default()
    }

    /// Whether `id` is installed or asked for.
    pub fn knows(&self, id: u64) -> bool {
        self.peers.contains_key(&id) || self.wanted.iter().any(|request| request.id == id)
    }

    /// Asks for publications to peer `id` at `endpoint` (nothing when known). `false` when the
    /// table is full and the peer was ignored (the caller counts it).
    pub fn request(&mut self, id: u64, endpoint: &str, data: bool, listed: bool, now: Instant) -> bool {
        if self.knows(id) {
            return true;
        }
        if self.peers.len() + self.wanted.len() >= MAX_MEMBERS {
            return false;
        }
        self.wanted.push(PeerRequest { id, endpoint: endpoint.to_owned(), data, listed, requested: now });
        true
    }

    /// Takes the pending requests (to be created by [`Self::open`] without the member's lock).
    pub fn take_requests(&mut self) -> Vec<PeerRequest> {
        std::mem::take(&mut self.wanted)
    }

    /// Whether requests wait to be created.
    pub fn has_requests(&self) -> bool {
        !self.wanted.is_empty()
    }

    /// Creates the publications of `requests` (a driver round trip each; call it without the
    /// member's lock). A publication that cannot be created is `None`.
    pub fn open(client: &dyn ClientApi, requests: Vec<PeerRequest>) -> Vec<OpenedPeer> {
        requests
            .into_iter()
            .map(|request| {
                let control = client
                    .add_publication_handle(
                        &format!("aeron:udp?endpoint={}|term-length={CONTROL_TERM_LENGTH}", request.endpoint),
                        CONTROL_STREAM_ID,
                    )
                    .ok();
                let data = if request.data {
                    client
                        .add_publication_handle(&format!("aeron:udp?endpoint={}", request.endpoint), DATA_STREAM_ID)
                        .ok()
                } else {
                    None
                };
                (request, control, data)
            })
            .collect()
    }

    /// Installs what [`Self::open`] created.
    pub fn install(&mut self, request: PeerRequest, control: Option<Publication>, data: Option<Publication>) {
        let peer = Peer { control, data, discovered: request.requested, listed: request.listed };
        self.peers.insert(request.id, peer);
    }

    /// The installed peers.
    pub fn peers(&self) -> &HashMap<u64, Peer> {
        &self.peers
    }

    /// One installed peer.
    pub fn get(&self, id: u64) -> Option<&Peer> {
        self.peers.get(&id)
    }

    /// Marks `id` as listed by discovery; `false` when it is not installed.
    pub fn mark_listed(&mut self, id: u64) -> bool {
        self.peers.get_mut(&id).map(|peer| peer.listed = true).is_some()
    }

    /// The CONTROL publications of every installed peer.
    pub fn control_publications(&self) -> impl Iterator<Item = &Publication> {
        self.peers.values().filter_map(|peer| peer.control.as_ref())
    }

    /// Keeps the peers still `listed` by discovery, live in `view`, or found less than a
    /// liveness timeout ago (they have had no time to speak up); the others' publications close.
    pub fn retain(&mut self, listed: &HashSet<u64>, view: &MemberView, liveness: Duration, now: Instant) {
        self.peers.retain(|id, peer| {
            peer.listed = listed.contains(id);
            peer.listed || view.is_live(*id, now) || now.saturating_since(peer.discovered) < liveness
        });
    }

    /// Whether every peer discovery listed has been heard (or has had a liveness timeout to
    /// speak up).
    pub fn discovery_complete(&self, view: &MemberView, liveness: Duration, now: Instant) -> bool {
        let settled = |id: u64, listed: bool, since: Instant| {
            !listed || view.get(id).is_some() || now.saturating_since(since) >= liveness
        };
        self.peers.iter().all(|(id, peer)| settled(*id, peer.listed, peer.discovered))
            && self.wanted.iter().all(|request| settled(request.id, request.listed, request.requested))
    }

    /// Closes every publication (drops the peers and requests).
    pub fn clear(&mut self) {
        self.peers.clear();
        self.wanted.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_distinct_positive_and_fit_an_i64() {
        let ids: HashSet<u64> = (0..1000).map(|_| new_member_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| *id >= 1 && *id <= i64::MAX as u64));
    }

    #[test]
    fn timing_refuses_what_is_out_of_range() {
        assert!(Timing::new(Duration::ZERO, Duration::from_secs(1)).is_err());
        assert!(Timing::new(Duration::from_secs(61), Duration::from_secs(600)).is_err());
        let short = Timing::new(Duration::from_millis(100), Duration::from_millis(299)).unwrap_err();
        assert!(short.to_string().contains("300 ms"), "{short}");
        assert!(Timing::new(Duration::from_millis(100), Duration::from_secs(3601)).is_err());
        assert_eq!(Timing::new(DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_LIVENESS_TIMEOUT).unwrap(), Timing::default());
    }

    #[test]
    fn addresses_are_checked_and_named() {
        assert!(resolve_host("0.0.0.0").unwrap_err().to_string().contains("wildcard"));
        assert_eq!(resolve_host("127.0.0.2").unwrap(), "127.0.0.2".parse::<IpAddr>().unwrap());
        let pick = InboxAddress::new("127.0.0.1", None).unwrap();
        assert_eq!(pick, InboxAddress::Pick("127.0.0.1".parse().unwrap()));
        let fixed = InboxAddress::new("127.0.0.1", Some("127.0.0.3:4100")).unwrap();
        let at = "127.0.0.3:4100".parse().unwrap();
        assert_eq!(fixed, InboxAddress::Fixed { bind: at, advertised: at });
        let wildcard = InboxAddress::new("127.0.0.2", Some("0.0.0.0:4100")).unwrap();
        let advertised = "127.0.0.2:4100".parse().unwrap();
        assert_eq!(wildcard, InboxAddress::Fixed { bind: "0.0.0.0:4100".parse().unwrap(), advertised });
        let error = InboxAddress::new("127.0.0.1", Some("127.0.0.1:http")).unwrap_err().to_string();
        assert!(error.contains("listen") && error.contains("http"), "{error}");
        let error = parse_address("nohostport", "bootstrap", false).unwrap_err().to_string();
        assert!(error.contains("bootstrap") && error.contains("host:port"), "{error}");
        assert!(parse_address("0.0.0.0:1", "bootstrap", false).unwrap_err().to_string().contains("wildcard"));
    }
}
