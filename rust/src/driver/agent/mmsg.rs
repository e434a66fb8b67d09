//! Batched datagram I/O for the sender and receiver agents: one `sendmmsg(2)` for a duty
//! cycle's datagrams of a publication and one `recvmmsg(2)` for up to a cycle's datagrams of an
//! endpoint, instead of a system call per datagram (on Linux; elsewhere one `send_to` /
//! `recv_from` per datagram, with the same results).
//!
//! Both data buffers are owned by the agent and reused every cycle once they have grown to a
//! cycle's size; each call still builds its small vectors of `iovec`/`mmsghdr` (they hold raw
//! pointers into those buffers, so they are not kept between calls).

use std::io;
use std::net::{SocketAddr, UdpSocket};

use crate::media::udp::is_would_block;

/// The largest UDP payload: every receive slot holds one whole datagram.
pub const MAX_DATAGRAM: usize = 65536;

/// What sending a batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOutcome {
    /// Datagrams the kernel took.
    pub datagrams: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Datagrams refused with an error other than "would block" (each skipped, counted).
    pub errors: usize,
    /// Datagrams not sent because the socket would block (dropped: a NAK repairs them).
    pub would_block: usize,
}

/// Datagrams queued back to back in one buffer, sent with one system call.
#[derive(Debug, Default)]
pub struct SendBatch {
    /// Grows to a cycle's datagrams plus one slot, never shrinks (no zeroing per datagram).
    bytes: Vec<u8>,
    /// Bytes of `bytes` holding queued datagrams.
    used: usize,
    /// End offset of each datagram in `bytes`.
    ends: Vec<usize>,
}

impl SendBatch {
    /// Empties the batch (keeps its buffers).
    pub fn clear(&mut self) {
        self.used = 0;
        self.ends.clear();
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether no datagram is queued.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Lets `fill` write the next datagram into a slot of [`MAX_DATAGRAM`] bytes; `fill`
    /// returns the datagram's length, or `None` when there is nothing to send (then nothing is
    /// queued). Returns whether a datagram was queued.
    pub fn push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        let start = self.used;
        let end = start + MAX_DATAGRAM;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        let written = self.bytes.get_mut(start..end).and_then(fill).filter(|&length| length <= MAX_DATAGRAM);
        match written {
            Some(length) => {
                self.used = start + length;
                self.ends.push(self.used);
                true
            }
            None => false,
        }
    }

    /// The queued datagrams, in order.
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(|(start, end)| self.bytes.get(start..end).unwrap_or(&[]))
    }

    /// Sends every queued datagram on `socket`, to `destination` when given (an unconnected
    /// socket), else to the socket's connected peer. A datagram the socket refuses with an
    /// error is counted and skipped; "would block" drops the rest of the batch.
    pub fn send(&self, socket: &UdpSocket, destination: Option<SocketAddr>) -> SendOutcome {
        #[cfg(target_os = "linux")]
        {
            send_mmsg(self, socket, destination)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut outcome = SendOutcome::default();
            for (index, datagram) in self.datagrams().enumerate() {
                let result = match destination {
                    Some(to) => socket.send_to(datagram, to),
                    None => socket.send(datagram),
                };
                match result {
                    Ok(bytes) => {
                        outcome.datagrams += 1;
                        outcome.bytes += bytes;
                    }
                    Err(error) if is_would_block(&error) => {
                        outcome.would_block = self.len() - index;
                        break;
                    }
                    Err(_) => outcome.errors += 1,
                }
            }
            outcome
        }
    }
}

#[cfg(target_os = "linux")]
fn send_mmsg(batch: &SendBatch, socket: &UdpSocket, destination: Option<SocketAddr>) -> SendOutcome {
    use std::os::fd::AsRawFd;
    let address = destination.map(socket2::SockAddr::from);
    let mut iovecs: Vec<libc::iovec> = batch
        .datagrams()
        .map(|datagram| libc::iovec { iov_base: datagram.as_ptr() as *mut libc::c_void, iov_len: datagram.len() })
        .collect();
    let mut headers: Vec<libc::mmsghdr> = iovecs
        .iter_mut()
        .map(|iov| {
            // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = iov;
            header.msg_hdr.msg_iovlen = 1;
            if let Some(address) = &address {
                header.msg_hdr.msg_name = address.as_ptr() as *mut libc::c_void;
                header.msg_hdr.msg_namelen = address.len();
            }
            header
        })
        .collect();
    let mut outcome = SendOutcome::default();
    let mut next = 0;
    // Each pass sends at least one datagram or skips one: bounded by the batch length.
    while next < headers.len() {
        let Some(rest) = headers.get_mut(next..) else { break };
        let count = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        // SAFETY: `rest` holds `count` initialised headers whose iovecs point into the batch's
        // buffer and whose names (if any) point at `address`; all outlive the call.
        let sent = unsafe { libc::sendmmsg(socket.as_raw_fd(), rest.as_mut_ptr(), count, 0) };
        match usize::try_from(sent) {
            Ok(sent) if sent > 0 => {
                outcome.datagrams += sent;
                outcome.bytes += rest.iter().take(sent).map(|h| h.msg_len as usize).sum::<usize>();
                next += sent;
            }
            _ => {
                let error = io::Error::last_os_error();
                if is_would_block(&error) || sent == 0 {
                    outcome.would_block = headers.len() - next;
                    break;
                }
                outcome.errors += 1;
                next += 1;
            }
        }
    }
    outcome
}

/// Receive slots for up to a cycle's datagrams, filled by one system call.
#[derive(Debug)]
pub struct ReceiveBatch {
    bytes: Vec<u8>,
    /// (length, source) of each datagram of the last [`ReceiveBatch::receive`].
    received: Vec<(usize, SocketAddr)>,
    /// Where the kernel writes each datagram's source (read only as far as it wrote).
    #[cfg(target_os = "linux")]
    names: Vec<libc::sockaddr_storage>,
}

impl ReceiveBatch {
    /// Slots for `slots` datagrams (at least one) of up to [`MAX_DATAGRAM`] bytes each.
    pub fn new(slots: usize) -> Self {
        let slots = slots.max(1);
        ReceiveBatch {
            bytes: vec![0; slots * MAX_DATAGRAM],
            received: Vec::with_capacity(slots),
            // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) address.
            #[cfg(target_os = "linux")]
            names: vec![unsafe { std::mem::zeroed() }; slots],
        }
    }

    /// Reads up to the batch's slots of datagrams waiting on `socket` (non-blocking); returns
    /// how many arrived (0 when none was waiting or on an error).
    pub fn receive(&mut self, socket: &UdpSocket) -> usize {
        self.received.clear();
        #[cfg(target_os = "linux")]
        {
            recv_mmsg(self, socket);
        }
        #[cfg(not(target_os = "linux"))]
        {
            for slot in self.bytes.chunks_mut(MAX_DATAGRAM) {
                match socket.recv_from(slot) {
                    Ok((length, source)) => self.received.push((length, source)),
                    Err(_) => break,
                }
            }
        }
        self.received.len()
    }

    /// The datagrams of the last [`ReceiveBatch::receive`], with their sources.
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], SocketAddr)> {
        self.bytes
            .chunks(MAX_DATAGRAM)
            .zip(&self.received)
            .map(|(slot, &(length, source))| (slot.get(..length).unwrap_or(slot), source))
    }
}

#[cfg(target_os = "linux")]
fn recv_mmsg(batch: &mut ReceiveBatch, socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let mut iovecs: Vec<libc::iovec> = batch
        .bytes
        .chunks_mut(MAX_DATAGRAM)
        .map(|slot| libc::iovec { iov_base: slot.as_mut_ptr().cast(), iov_len: slot.len() })
        .collect();
    let mut headers: Vec<libc::mmsghdr> = iovecs
        .iter_mut()
        .zip(batch.names.iter_mut())
        .map(|(iov, name)| {
            // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = iov;
            header.msg_hdr.msg_iovlen = 1;
            header.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            header.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            header
        })
        .collect();
    let count = u32::try_from(headers.len()).unwrap_or(u32::MAX);
    // SAFETY: `count` headers, each pointing at its own slot of `batch.bytes` and its own
    // entry of `batch.names`, all alive for the call. MSG_DONTWAIT: an empty queue returns at once.
    let got = unsafe {
        libc::recvmmsg(socket.as_raw_fd(), headers.as_mut_ptr(), count, libc::MSG_DONTWAIT, std::ptr::null_mut())
    };
    let Ok(got) = usize::try_from(got) else { return };
    for (header, name) in headers.iter().zip(&batch.names).take(got) {
        // A datagram from an address family other than IPv4/IPv6 cannot be answered: skipped.
        if let Some(source) = socket_address(name) {
            batch.received.push((header.msg_len as usize, source));
        }
    }
}

/// The IPv4 or IPv6 address the kernel wrote into `storage`, `None` for any other family.
#[cfg(target_os = "linux")]
fn socket_address(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is sized and
            // aligned for.
            let address: &libc::sockaddr_in = unsafe { &*(storage as *const libc::sockaddr_storage).cast() };
            let ip = Ipv4Addr::from(u32::from_be(address.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(address.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6, which it is sized and
            // aligned for.
            let address: &libc::sockaddr_in6 = unsafe { &*(storage as *const libc::sockaddr_storage).cast() };
            let ip = Ipv6Addr::from(address.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(address.sin6_port),
                address.sin6_flowinfo,
                address.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        let receiver = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
        receiver.set_nonblocking(true).expect("non-blocking");
        let sender = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
        (sender, receiver)
    }

    fn queue(batch: &mut SendBatch, datagrams: &[&[u8]]) {
        for datagram in datagrams {
            assert!(batch.push_with(|slot| {
                slot[..datagram.len()].copy_from_slice(datagram);
                Some(datagram.len())
            }));
        }
    }

    /// Receives until `expected` datagrams arrived, at most 2 s.
    fn receive_all(batch: &mut ReceiveBatch, socket: &UdpSocket, expected: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        let mut all = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while all.len() < expected && std::time::Instant::now() < deadline {
            batch.receive(socket);
            all.extend(batch.datagrams().map(|(bytes, source)| (bytes.to_vec(), source)));
        }
        all
    }

    #[test]
    fn a_batch_arrives_whole_in_order_with_each_datagrams_length_and_source() {
        let (sender, receiver) = pair();
        let mut batch = SendBatch::default();
        let datagrams: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1 + usize::from(i) * 37]).collect();
        queue(&mut batch, &datagrams.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(batch.len(), 40);
        let outcome = batch.send(&sender, Some(receiver.local_addr().expect("address")));
        let bytes: usize = datagrams.iter().map(Vec::len).sum();
        assert_eq!(outcome, SendOutcome { datagrams: 40, bytes, errors: 0, would_block: 0 });
        let mut slots = ReceiveBatch::new(16);
        let received = receive_all(&mut slots, &receiver, 40);
        let source = sender.local_addr().expect("address");
        assert_eq!(received, datagrams.into_iter().map(|d| (d, source)).collect::<Vec<_>>());
    }

    #[test]
    fn a_connected_socket_sends_without_a_destination() {
        let (sender, receiver) = pair();
        sender.connect(receiver.local_addr().expect("address")).expect("connect");
        let mut batch = SendBatch::default();
        queue(&mut batch, &[b"one", b"two"]);
        assert_eq!(batch.send(&sender, None).datagrams, 2);
        let mut slots = ReceiveBatch::new(4);
        let received: Vec<Vec<u8>> = receive_all(&mut slots, &receiver, 2).into_iter().map(|(d, _)| d).collect();
        assert_eq!(received, vec![b"one".to_vec(), b"two".to_vec()]);
    }

    #[test]
    fn a_fill_with_nothing_to_send_queues_nothing() {
        let mut batch = SendBatch::default();
        assert!(!batch.push_with(|_| None));
        assert!(!batch.push_with(|_| Some(MAX_DATAGRAM + 1)));
        assert!(batch.is_empty());
        queue(&mut batch, &[b"x"]);
        assert_eq!(batch.datagrams().collect::<Vec<_>>(), vec![b"x".as_slice()]);
        batch.clear();
        assert!(batch.is_empty());
    }

    #[test]
    fn an_empty_socket_receives_nothing() {
        let (_, receiver) = pair();
        let mut slots = ReceiveBatch::new(8);
        assert_eq!(slots.receive(&receiver), 0);
        assert_eq!(slots.datagrams().count(), 0);
    }

    #[test]
    fn a_refused_destination_is_counted_as_an_error_not_sent() {
        let (sender, _) = pair();
        let mut batch = SendBatch::default();
        queue(&mut batch, &[b"a", b"b"]);
        // Port 0 is not a valid destination: each datagram is refused and skipped.
        let outcome = batch.send(&sender, Some("127.0.0.1:0".parse().expect("address")));
        assert_eq!((outcome.datagrams, outcome.errors), (0, 2));
    }
}
