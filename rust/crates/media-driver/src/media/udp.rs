//! UDP sockets for channel endpoints: non-blocking, with buffer sizes from the channel URI.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

/// Socket options for an endpoint.
#[derive(Clone, Copy, Debug, Default)]
pub struct SocketOptions {
    /// `SO_RCVBUF` in bytes (the OS may cap it at `net.core.rmem_max`).
    pub receive_buffer: Option<usize>,
    /// `SO_SNDBUF` in bytes.
    pub send_buffer: Option<usize>,
    /// Multicast TTL.
    pub multicast_ttl: Option<u32>,
    /// Local interface address used for multicast.
    pub interface: Option<IpAddr>,
}

fn new_socket(address: &SocketAddr, options: &SocketOptions) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(*address), Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(size) = options.receive_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    if let Some(size) = options.send_buffer {
        socket.set_send_buffer_size(size)?;
    }
    Ok(socket)
}

fn unspecified_like(address: &SocketAddr) -> IpAddr {
    match address {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Outgoing multicast settings: TTL (only when configured, as Aeron), interface, loopback.
fn set_multicast_send_options(socket: &Socket, options: &SocketOptions) -> io::Result<()> {
    if let Some(ttl) = options.multicast_ttl.filter(|ttl| *ttl > 0) {
        socket.set_multicast_ttl_v4(ttl)?;
    }
    if let Some(IpAddr::V4(interface)) = options.interface {
        if !interface.is_unspecified() {
            socket.set_multicast_if_v4(&interface)?;
        }
    }
    socket.set_multicast_loop_v4(true)
}

/// The socket of a receiving endpoint: bound to `endpoint` (unicast) or to the port of the
/// group, joined to it (multicast). A multicast socket also sends the endpoint's status
/// messages and NAKs to the control group, so it gets the outgoing multicast options too.
pub fn bind_receiver(endpoint: SocketAddr, options: &SocketOptions) -> io::Result<UdpSocket> {
    let socket = new_socket(&endpoint, options)?;
    if endpoint.ip().is_multicast() {
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&SocketAddr::new(unspecified_like(&endpoint), endpoint.port()).into())?;
        join_group(&socket, endpoint.ip(), options.interface)?;
        if endpoint.is_ipv4() {
            // Only the joined group, not every group some other socket of the host joined on
            // this port (data and control groups share the port).
            #[cfg(target_os = "linux")]
            socket.set_multicast_all_v4(false)?;
            set_multicast_send_options(&socket, options)?;
        }
    } else {
        socket.bind(&endpoint.into())?;
    }
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The socket of a sending endpoint: an ephemeral port (or `interface`), connected to a
/// unicast endpoint; for multicast, it also listens for control frames on the control group.
pub fn bind_sender(endpoint: SocketAddr, local: Option<SocketAddr>, options: &SocketOptions) -> io::Result<UdpSocket> {
    let socket = new_socket(&endpoint, options)?;
    let local = local.unwrap_or_else(|| SocketAddr::new(unspecified_like(&endpoint), 0));
    socket.bind(&local.into())?;
    if endpoint.ip().is_multicast() {
        if endpoint.is_ipv4() {
            set_multicast_send_options(&socket, options)?;
        }
    } else {
        socket.connect(&endpoint.into())?;
    }
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A socket listening for control frames sent to a multicast control group.
pub fn bind_control_listener(control: SocketAddr, options: &SocketOptions) -> io::Result<UdpSocket> {
    bind_receiver(control, options)
}

fn join_group(socket: &Socket, group: IpAddr, interface: Option<IpAddr>) -> io::Result<()> {
    match group {
        IpAddr::V4(group) => {
            let interface = match interface {
                Some(IpAddr::V4(address)) => address,
                _ => Ipv4Addr::UNSPECIFIED,
            };
            socket.join_multicast_v4(&group, &interface)
        }
        IpAddr::V6(group) => socket.join_multicast_v6(&group, 0),
    }
}

/// Whether an I/O error only means "nothing to do now".
pub fn is_would_block(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
}

/// The local address selected by `interface=address[/prefix]`: the address itself without a
/// prefix, else the first local interface address inside `address/prefix`.
pub fn resolve_interface(address: IpAddr, prefix_length: Option<u8>) -> io::Result<IpAddr> {
    let Some(prefix_length) = prefix_length else { return Ok(address) };
    local_addresses()?.into_iter().find(|candidate| in_network(*candidate, address, prefix_length)).ok_or_else(|| {
        io::Error::new(io::ErrorKind::AddrNotAvailable, format!("no local interface in {address}/{prefix_length}"))
    })
}

/// Whether `candidate` lies in `network/prefix_length` (same address family only).
pub fn in_network(candidate: IpAddr, network: IpAddr, prefix_length: u8) -> bool {
    match (candidate, network) {
        (IpAddr::V4(candidate), IpAddr::V4(network)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix_length.min(32))).unwrap_or(0);
            u32::from(candidate) & mask == u32::from(network) & mask
        }
        (IpAddr::V6(candidate), IpAddr::V6(network)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix_length.min(128))).unwrap_or(0);
            u128::from(candidate) & mask == u128::from(network) & mask
        }
        _ => false,
    }
}

/// Addresses of the host's interfaces (IPv4 and IPv6), from `getifaddrs`.
#[cfg(unix)]
fn local_addresses() -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut addresses = Vec::new();
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: `cursor` is a node of the list getifaddrs returned, not yet freed.
        let entry = unsafe { &*cursor };
        if !entry.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family says which struct it is.
            let family = i32::from(unsafe { (*entry.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: family AF_INET means the sockaddr is a sockaddr_in.
                let v4 = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
                addresses.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))));
            } else if family == libc::AF_INET6 {
                // SAFETY: family AF_INET6 means the sockaddr is a sockaddr_in6.
                let v6 = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in6) };
                addresses.push(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)));
            }
        }
        cursor = entry.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(addresses)
}

#[cfg(not(unix))]
fn local_addresses() -> io::Result<Vec<IpAddr>> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "interface=address/prefix needs getifaddrs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_addresses_inside_a_prefix() {
        let network: IpAddr = "10.7.0.0".parse().unwrap();
        assert!(in_network("10.7.0.3".parse().unwrap(), network, 24));
        assert!(!in_network("10.7.1.3".parse().unwrap(), network, 24));
        assert!(in_network("192.168.1.1".parse().unwrap(), network, 0));
        assert!(!in_network("::1".parse().unwrap(), network, 0));
    }

    #[test]
    fn resolves_loopback_from_its_network() {
        let resolved = resolve_interface("127.0.0.0".parse().unwrap(), Some(8)).unwrap();
        assert_eq!(resolved, "127.0.0.1".parse::<IpAddr>().unwrap());
        let exact: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(resolve_interface(exact, None).unwrap(), exact);
    }
}
