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

/// The socket of a receiving endpoint: bound to `endpoint` (unicast) or to the port of the
/// group, joined to it (multicast).
pub fn bind_receiver(endpoint: SocketAddr, options: &SocketOptions) -> io::Result<UdpSocket> {
    let socket = new_socket(&endpoint, options)?;
    if endpoint.ip().is_multicast() {
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&SocketAddr::new(unspecified_like(&endpoint), endpoint.port()).into())?;
        join_group(&socket, endpoint.ip(), options.interface)?;
        socket.set_multicast_loop_v4(true)?;
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
        if let Some(ttl) = options.multicast_ttl {
            socket.set_multicast_ttl_v4(ttl)?;
        }
        if let Some(IpAddr::V4(interface)) = options.interface {
            socket.set_multicast_if_v4(&interface)?;
        }
        socket.set_multicast_loop_v4(true)?;
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
