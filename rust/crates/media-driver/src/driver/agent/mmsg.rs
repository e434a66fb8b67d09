//! Batched datagram I/O for the sender and receiver agents: one `sendmmsg(2)` for a duty
//! cycle's datagrams of a publication and one `recvmmsg(2)` for up to a cycle's datagrams of an
//! endpoint, instead of a system call per datagram (on Linux; elsewhere one `send_to` /
//! `recv_from` per datagram, with the same results).
//!
//! Both data buffers are owned by the agent and reused every cycle once they have grown to a
//! cycle's size; the sender's data frames are not copied into its buffer at all but sent from
//! the publication's mapped log ([`SendBatch::push_or_map`]). Each call still builds its small
//! vectors of `iovec`/`mmsghdr` (they hold raw pointers into those buffers and logs, so they
//! are not kept between calls).

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
    /// The OS error number of an offloaded send the socket refused, after which this batch and
    /// the socket's later ones went out a datagram at a time ([`SegmentOffload`]).
    pub offload_refused: Option<i32>,
}

/// Where a queued datagram's bytes lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// In the batch's own buffer, from this offset.
    Own(usize),
    /// At this address outside the batch (a publication's mapped log), sent from there.
    Mapped(usize),
}

/// One queued datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Queued {
    source: Source,
    length: usize,
}

/// What a fill of [`SendBatch::push_or_map`] queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filled {
    /// This many bytes written into the slot.
    Written(usize),
    /// This many bytes at this address, sent from there without a copy.
    Mapped(*const u8, usize),
}

/// A cycle's datagrams, sent with one system call: each either written into the batch's own
/// buffer (back to back) or named where it already lies (a publication's log frames, which
/// the kernel reads straight from the mapping: no copy in the driver).
#[derive(Debug, Default)]
pub struct SendBatch {
    /// Grows to a cycle's written datagrams plus one slot, never shrinks (no zeroing per
    /// datagram).
    bytes: Vec<u8>,
    /// Bytes of `bytes` holding queued datagrams.
    used: usize,
    /// The queued datagrams, in order.
    queued: Vec<Queued>,
    /// What a send builds around the datagrams, kept so a send allocates nothing.
    #[cfg(target_os = "linux")]
    scratch: KernelBuffers<SendScratch>,
}

/// System-call buffers (`iovec`s, `mmsghdr`s) holding raw pointers into memory their owner
/// keeps: they make the owner neither `Send` nor `Debug` by themselves.
#[cfg(target_os = "linux")]
#[derive(Default)]
struct KernelBuffers<T>(T);

// SAFETY: the pointers name only memory of the same owner (a `SendBatch` or `ReceiveBatch`),
// which moves between threads as one value and uses them only inside its own `&mut self` calls
// (a send writes them before the call; a receive's point at the batch's own never-resized
// buffers).
#[cfg(target_os = "linux")]
unsafe impl<T> Send for KernelBuffers<T> {}

#[cfg(target_os = "linux")]
impl<T> std::fmt::Debug for KernelBuffers<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelBuffers")
    }
}

/// The buffers one [`SendBatch::send`] fills besides the datagrams (runs, `iovec`s, control
/// messages, `mmsghdr`s), kept between sends. Their pointers mean something only during a send.
#[cfg(target_os = "linux")]
#[derive(Default)]
struct SendScratch {
    runs: Vec<Run>,
    iovecs: Vec<libc::iovec>,
    /// Each run's first `iovec` and count.
    spans: Vec<(usize, usize)>,
    controls: Vec<SegmentControl>,
    headers: Vec<libc::mmsghdr>,
}

impl SendBatch {
    /// Empties the batch (keeps its buffers).
    pub fn clear(&mut self) {
        self.used = 0;
        self.queued.clear();
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Whether no datagram is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Lets `fill` write the next datagram into a slot of [`MAX_DATAGRAM`] bytes; `fill`
    /// returns the datagram's length, or `None` when there is nothing to send (then nothing is
    /// queued). Returns whether a datagram was queued.
    pub fn push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        // SAFETY: `fill` only ever writes into the slot: nothing is mapped.
        unsafe { self.push_or_map(|slot| fill(slot).map(Filled::Written)) }
    }

    /// As [`Self::push_with`], except that `fill` may instead name bytes that already lie
    /// elsewhere ([`Filled::Mapped`]): they are queued where they are and sent from there.
    ///
    /// # Safety
    /// Bytes that `fill` names must stay mapped, readable and unchanged until the batch is sent
    /// or cleared.
    pub unsafe fn push_or_map(&mut self, fill: impl FnOnce(&mut [u8]) -> Option<Filled>) -> bool {
        let start = self.used;
        let end = start + MAX_DATAGRAM;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        let queued = match self.bytes.get_mut(start..end).and_then(fill) {
            Some(Filled::Written(length)) => Some(Queued { source: Source::Own(start), length }),
            Some(Filled::Mapped(address, length)) => Some(Queued { source: Source::Mapped(address as usize), length }),
            None => None,
        };
        match queued.filter(|queued| queued.length <= MAX_DATAGRAM) {
            Some(queued) => {
                if let Source::Own(start) = queued.source {
                    self.used = start + queued.length;
                }
                self.queued.push(queued);
                true
            }
            None => false,
        }
    }

    /// The address of a queued datagram's first byte.
    fn address(&self, queued: &Queued) -> *const u8 {
        match queued.source {
            Source::Own(start) => self.bytes.as_ptr().wrapping_add(start),
            Source::Mapped(address) => address as *const u8,
        }
    }

    /// The queued datagrams, in order.
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        self.queued.iter().map(|queued| {
            // SAFETY: own bytes lie in `self.bytes` (`start + length <= used`); mapped ones stay
            // readable and unchanged while queued (the contract of `push_or_map`).
            unsafe { std::slice::from_raw_parts(self.address(queued), queued.length) }
        })
    }

    /// Sends every queued datagram on `socket`, to `destination` when given (an unconnected
    /// socket), else to the socket's connected peer; runs of equal-sized datagrams leave as one
    /// offloaded send while `offload` (the socket's) is on. A datagram the socket refuses with
    /// an error is counted and skipped; "would block" drops the rest of the batch.
    pub fn send(
        &mut self,
        socket: &UdpSocket,
        destination: Option<SocketAddr>,
        offload: &mut SegmentOffload,
    ) -> SendOutcome {
        #[cfg(target_os = "linux")]
        {
            send_mmsg(self, socket, destination, offload)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = offload;
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

/// The most datagrams one offloaded send may carry (the kernel's `UDP_MAX_SEGMENTS` before
/// Linux 6.2 raised it to 128).
pub const MAX_OFFLOAD_SEGMENTS: usize = 64;

/// The most bytes one offloaded send may carry: an IPv6 packet's 65,535-byte payload less its
/// UDP header and the IPv6 header that IPv4 does not have, so one bound serves both families.
pub const MAX_OFFLOAD_BYTES: usize = u16::MAX as usize - 40 - 8;

/// Whether a sending socket still uses UDP segmentation offload (`UDP_SEGMENT`, Linux ≥ 4.18):
/// equal-sized datagrams queued back to back leave in one send that the kernel cuts into the
/// same datagrams, so the stack is walked once per run instead of once per datagram (on
/// loopback the run is delivered whole to a receiver with [`enable_receive_offload`]). A
/// socket whose offloaded send fails for any reason but "would block" (no checksum offload on
/// the route's device, a segment larger than its MTU, an older kernel) sends each datagram
/// alone from then on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentOffload {
    enabled: bool,
}

impl Default for SegmentOffload {
    /// On, where the platform has it.
    fn default() -> Self {
        SegmentOffload { enabled: cfg!(target_os = "linux") }
    }
}

impl SegmentOffload {
    /// Never offload (every datagram its own send).
    pub fn disabled() -> Self {
        SegmentOffload { enabled: false }
    }

    /// Whether sends are still offloaded.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }
}

/// One message of a `sendmmsg` call: datagrams `first..first + segments` of a batch, `bytes`
/// in all; all but the last are `segment` bytes long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    first: usize,
    segments: usize,
    bytes: usize,
    segment: usize,
}

/// Splits the batch's datagrams from `from` on into runs one send each: with `offload`, each run
/// is as many datagrams of its first one's length as fit, then at most one shorter one (the
/// kernel cuts a run only so); without, a datagram per run.
fn plan_runs(batch: &SendBatch, from: usize, offload: bool, runs: &mut Vec<Run>) {
    runs.clear();
    let mut open = false;
    for (index, queued) in batch.queued.iter().enumerate().skip(from) {
        let length = queued.length;
        match runs.last_mut() {
            Some(run)
                if offload
                    && open
                    && length <= run.segment
                    && run.segments < MAX_OFFLOAD_SEGMENTS
                    && run.bytes + length <= MAX_OFFLOAD_BYTES =>
            {
                run.segments += 1;
                run.bytes += length;
                // A shorter datagram ends the run.
                open = length == run.segment;
            }
            _ => {
                runs.push(Run { first: index, segments: 1, bytes: length, segment: length });
                open = length > 0;
            }
        }
    }
}

/// Fills `iovecs` with those of `runs` (one per datagram, neighbours that lie back to back
/// merged into one) and `spans` with where each run's start in them: `(first iovec, count)`.
#[cfg(target_os = "linux")]
fn run_iovecs(batch: &SendBatch, runs: &[Run], iovecs: &mut Vec<libc::iovec>, spans: &mut Vec<(usize, usize)>) {
    iovecs.clear();
    spans.clear();
    for run in runs {
        let first = iovecs.len();
        for queued in batch.queued.iter().skip(run.first).take(run.segments) {
            let address = batch.address(queued);
            let follows = iovecs.len() > first
                && iovecs.last().is_some_and(|last| (last.iov_base as *const u8).wrapping_add(last.iov_len) == address);
            match iovecs.last_mut() {
                Some(last) if follows => last.iov_len += queued.length,
                _ => iovecs.push(libc::iovec { iov_base: address as *mut libc::c_void, iov_len: queued.length }),
            }
        }
        spans.push((first, iovecs.len() - first));
    }
}

/// Room for one control message carrying a `u16` (the segment size), 8-byte aligned.
type SegmentControl = [u64; 4];

#[cfg(target_os = "linux")]
fn send_mmsg(
    batch: &mut SendBatch,
    socket: &UdpSocket,
    destination: Option<SocketAddr>,
    offload: &mut SegmentOffload,
) -> SendOutcome {
    let mut scratch = std::mem::take(&mut batch.scratch);
    let outcome = send_with(batch, &mut scratch.0, socket, destination, offload);
    batch.scratch = scratch;
    outcome
}

#[cfg(target_os = "linux")]
fn send_with(
    batch: &SendBatch,
    scratch: &mut SendScratch,
    socket: &UdpSocket,
    destination: Option<SocketAddr>,
    offload: &mut SegmentOffload,
) -> SendOutcome {
    let mut outcome = SendOutcome::default();
    let mut next = 0;
    // Each pass sends or skips at least one datagram, or turns offload off (once): bounded.
    while next < batch.len() {
        plan_runs(batch, next, offload.enabled, &mut scratch.runs);
        let sent = send_runs(batch, socket, destination, scratch, &mut outcome);
        let runs = &scratch.runs;
        match sent {
            RunsSent::All => break,
            RunsSent::WouldBlock(sent) => {
                outcome.would_block = batch.len() - runs.get(sent).map_or(batch.len(), |run| run.first);
                break;
            }
            RunsSent::Failed(sent, error) => {
                let Some(failed) = runs.get(sent) else { break };
                if failed.segments > 1 {
                    // Offload itself may be what failed: resend these datagrams one by one.
                    offload.enabled = false;
                    outcome.offload_refused = error;
                    next = failed.first;
                } else {
                    outcome.errors += 1;
                    next = failed.first + 1;
                }
            }
        }
    }
    outcome
}

/// How a [`send_runs`] call ended: every run sent, or stopped at run `n` (the count sent before
/// it) because the socket would block or refused that run (with the OS error number).
enum RunsSent {
    All,
    WouldBlock(usize),
    Failed(usize, Option<i32>),
}

#[cfg(target_os = "linux")]
fn send_runs(
    batch: &SendBatch,
    socket: &UdpSocket,
    destination: Option<SocketAddr>,
    scratch: &mut SendScratch,
    outcome: &mut SendOutcome,
) -> RunsSent {
    use std::os::fd::AsRawFd;
    let SendScratch { runs, iovecs, spans, controls, headers } = scratch;
    let address = destination.map(socket2::SockAddr::from);
    run_iovecs(batch, runs, iovecs, spans);
    controls.clear();
    controls.resize(runs.len(), [0; 4]);
    let iovecs_base = iovecs.as_mut_ptr();
    headers.clear();
    headers.extend(spans.iter().zip(controls.iter_mut()).zip(runs.iter()).map(|((&(first, count), control), run)| {
        // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
        let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
        // In bounds: `first + count <= iovecs.len()`, which is not resized from here on.
        header.msg_hdr.msg_iov = iovecs_base.wrapping_add(first);
        header.msg_hdr.msg_iovlen = count as _;
        if let Some(address) = &address {
            header.msg_hdr.msg_name = address.as_ptr() as *mut libc::c_void;
            header.msg_hdr.msg_namelen = address.len();
        }
        if run.segments > 1 {
            // Runs are at most MAX_OFFLOAD_BYTES long, so a segment fits a u16.
            let segment = u16::try_from(run.segment).unwrap_or(u16::MAX);
            set_segment_control(&mut header.msg_hdr, control, segment);
        }
        header
    }));
    let mut next = 0;
    while next < headers.len() {
        let Some(rest) = headers.get_mut(next..) else { break };
        let count = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        // SAFETY: `rest` holds `count` initialised headers whose iovecs point into the batch's
        // buffer or at mapped bytes kept readable while queued (`push_or_map`), whose names (if any) point at `address` and whose control data (if any) at
        // `controls`; all outlive the call.
        let sent = unsafe { libc::sendmmsg(socket.as_raw_fd(), rest.as_mut_ptr(), count, 0) };
        match usize::try_from(sent) {
            Ok(sent) if sent > 0 => {
                for (header, run) in rest.iter().zip(runs.iter().skip(next)).take(sent) {
                    outcome.datagrams += run.segments;
                    outcome.bytes += header.msg_len as usize;
                }
                next += sent;
            }
            _ => {
                let error = io::Error::last_os_error();
                return if is_would_block(&error) || sent == 0 {
                    RunsSent::WouldBlock(next)
                } else {
                    RunsSent::Failed(next, error.raw_os_error())
                };
            }
        }
    }
    RunsSent::All
}

/// Points `header` at `control`, filled with one `UDP_SEGMENT` message of `segment` bytes.
#[cfg(target_os = "linux")]
fn set_segment_control(header: &mut libc::msghdr, control: &mut SegmentControl, segment: u16) {
    // SAFETY: CMSG_SPACE of a u16 (24 bytes on 64-bit Linux) fits the 32 bytes of `control`,
    // which is 8-byte aligned as a cmsghdr needs; CMSG_FIRSTHDR of a header whose control
    // length is that space is the start of `control`, and its data lies inside it.
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<u16>() as libc::c_uint) as usize;
        debug_assert!(space <= std::mem::size_of::<SegmentControl>());
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = space as _;
        let message = libc::CMSG_FIRSTHDR(header);
        (*message).cmsg_level = libc::SOL_UDP;
        (*message).cmsg_type = libc::UDP_SEGMENT;
        (*message).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as libc::c_uint) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(message).cast::<u16>(), segment);
    }
}

/// Asks the kernel to deliver runs of equal-sized datagrams from one sender whole (`UDP_GRO`,
/// Linux ≥ 5.0) to `socket`, which must then be read only through a [`ReceiveBatch`]: it cuts
/// each delivery back into the datagrams that were sent. Returns whether the kernel agreed
/// (elsewhere, or on an older kernel, datagrams keep arriving one by one; nothing else changes).
pub fn enable_receive_offload(socket: &UdpSocket) -> bool {
    #[cfg(target_os = "linux")]
    {
        set_int_option(socket, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket;
        false
    }
}

/// Sets an integer socket option (`setsockopt(2)`).
#[cfg(target_os = "linux")]
fn set_int_option(socket: &UdpSocket, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket, and an int option value that outlives the call.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One delivery of a [`ReceiveBatch::receive`]: `length` bytes in its slot from `source`, cut
/// into datagrams of `segment` bytes (the last may be shorter).
#[derive(Clone, Copy, Debug)]
struct Delivery {
    /// The receive slot (of [`MAX_DATAGRAM`] bytes) the kernel wrote it into.
    slot: usize,
    length: usize,
    source: SocketAddr,
    segment: usize,
}

/// Receive slots for up to a cycle's deliveries, filled by one system call. A delivery is one
/// datagram, or a run of them the kernel kept together (see [`enable_receive_offload`]);
/// [`ReceiveBatch::datagrams`] yields the datagrams either way.
#[derive(Debug)]
pub struct ReceiveBatch {
    bytes: Vec<u8>,
    /// The deliveries of the last [`ReceiveBatch::receive`].
    received: Vec<Delivery>,
    /// Where the kernel writes each delivery's source (read only as far as it wrote).
    #[cfg(target_os = "linux")]
    names: Vec<libc::sockaddr_storage>,
    /// Where the kernel writes each delivery's segment size, if it kept a run together (read
    /// through the headers).
    #[cfg(target_os = "linux")]
    _controls: Vec<SegmentControl>,
    /// The `recvmmsg` headers over the slots, built once: a receive that finds nothing (every
    /// idle duty cycle) allocates and writes nothing.
    #[cfg(target_os = "linux")]
    headers: KernelBuffers<ReceiveHeaders>,
}

/// One `mmsghdr` and its `iovec` per slot of a [`ReceiveBatch`], pointing into the batch's own
/// buffers (heap allocations that never grow, so they stay put when the batch moves).
#[cfg(target_os = "linux")]
struct ReceiveHeaders {
    headers: Vec<libc::mmsghdr>,
    /// What the headers' `msg_iov` point at.
    _iovecs: Vec<libc::iovec>,
}

#[cfg(target_os = "linux")]
impl ReceiveHeaders {
    /// Headers over `bytes` (cut into [`MAX_DATAGRAM`] slots), `names` and `controls`.
    fn new(bytes: &mut [u8], names: &mut [libc::sockaddr_storage], controls: &mut [SegmentControl]) -> Self {
        let mut iovecs: Vec<libc::iovec> = bytes
            .chunks_mut(MAX_DATAGRAM)
            .map(|slot| libc::iovec { iov_base: slot.as_mut_ptr().cast(), iov_len: slot.len() })
            .collect();
        let headers = iovecs
            .iter_mut()
            .zip(names.iter_mut())
            .zip(controls.iter_mut())
            .map(|((iov, name), control)| {
                // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
                let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
                header.msg_hdr.msg_iov = iov;
                header.msg_hdr.msg_iovlen = 1;
                header.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
                header.msg_hdr.msg_control = control.as_mut_ptr().cast();
                Self::reset(&mut header);
                header
            })
            .collect();
        ReceiveHeaders { headers, _iovecs: iovecs }
    }

    /// Gives a header its buffers' full lengths back (the kernel shortens them to what it
    /// wrote).
    fn reset(header: &mut libc::mmsghdr) {
        header.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        header.msg_hdr.msg_controllen = std::mem::size_of::<SegmentControl>() as _;
        header.msg_hdr.msg_flags = 0;
        header.msg_len = 0;
    }
}

impl ReceiveBatch {
    /// Slots for `slots` deliveries (at least one) of up to [`MAX_DATAGRAM`] bytes each.
    pub fn new(slots: usize) -> Self {
        let slots = slots.max(1);
        let mut bytes = vec![0; slots * MAX_DATAGRAM];
        // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) address.
        #[cfg(target_os = "linux")]
        let mut names: Vec<libc::sockaddr_storage> = vec![unsafe { std::mem::zeroed() }; slots];
        #[cfg(target_os = "linux")]
        let mut controls: Vec<SegmentControl> = vec![[0; 4]; slots];
        #[cfg(target_os = "linux")]
        let headers = KernelBuffers(ReceiveHeaders::new(&mut bytes, &mut names, &mut controls));
        ReceiveBatch {
            bytes,
            received: Vec::with_capacity(slots),
            #[cfg(target_os = "linux")]
            names,
            #[cfg(target_os = "linux")]
            _controls: controls,
            #[cfg(target_os = "linux")]
            headers,
        }
    }

    /// Reads up to the batch's slots of deliveries waiting on `socket` (non-blocking); returns
    /// how many datagrams arrived (0 when none was waiting or on an error).
    pub fn receive(&mut self, socket: &UdpSocket) -> usize {
        self.received.clear();
        #[cfg(target_os = "linux")]
        {
            recv_mmsg(self, socket);
        }
        #[cfg(not(target_os = "linux"))]
        {
            for (slot, bytes) in self.bytes.chunks_mut(MAX_DATAGRAM).enumerate() {
                match socket.recv_from(bytes) {
                    Ok((length, source)) => self.received.push(Delivery { slot, length, source, segment: length }),
                    Err(_) => break,
                }
            }
        }
        self.received.iter().map(|d| d.length.div_ceil(d.segment.max(1)).max(1)).sum()
    }

    /// The datagrams of the last [`ReceiveBatch::receive`], in order, with their sources.
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], SocketAddr)> {
        self.received.iter().flat_map(|delivery| {
            let slot = self.bytes.chunks(MAX_DATAGRAM).nth(delivery.slot).unwrap_or_default();
            let bytes = slot.get(..delivery.length).unwrap_or(slot);
            // An empty datagram is still one datagram; `chunks` would yield none.
            let segment = delivery.segment.clamp(1, bytes.len().max(1));
            let empty = bytes.is_empty().then_some(bytes);
            bytes.chunks(segment).chain(empty).map(move |datagram| (datagram, delivery.source))
        })
    }
}

#[cfg(target_os = "linux")]
fn recv_mmsg(batch: &mut ReceiveBatch, socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let headers = &mut batch.headers.0.headers;
    let count = u32::try_from(headers.len()).unwrap_or(u32::MAX);
    // SAFETY: `count` headers, each pointing at its own slot of `batch.bytes`, its own entry of
    // `batch.names` and its own control buffer, all owned by `batch` and alive for the call,
    // with their full lengths (reset after each use below). MSG_DONTWAIT: an empty queue
    // returns at once.
    let got = unsafe {
        libc::recvmmsg(socket.as_raw_fd(), headers.as_mut_ptr(), count, libc::MSG_DONTWAIT, std::ptr::null_mut())
    };
    let Ok(got) = usize::try_from(got) else { return };
    for (slot, (header, name)) in headers.iter_mut().zip(&batch.names).take(got).enumerate() {
        let length = header.msg_len as usize;
        // A datagram from an address family other than IPv4/IPv6 cannot be answered: skipped
        // (the deliveries after it keep their own slots).
        if let Some(source) = socket_address(name) {
            let segment = received_segment(&header.msg_hdr).unwrap_or(length);
            batch.received.push(Delivery { slot, length, source, segment });
        }
        ReceiveHeaders::reset(header);
    }
}

/// The segment size of a delivery the kernel kept together (its `UDP_GRO` control message).
#[cfg(target_os = "linux")]
fn received_segment(header: &libc::msghdr) -> Option<usize> {
    // SAFETY: the kernel set `msg_controllen` to what it wrote into the header's control
    // buffer, which CMSG_FIRSTHDR / CMSG_NXTHDR walk without leaving; a UDP_GRO message's
    // data is an int.
    unsafe {
        let mut message = libc::CMSG_FIRSTHDR(header);
        while !message.is_null() {
            if (*message).cmsg_level == libc::SOL_UDP && (*message).cmsg_type == libc::UDP_GRO {
                let segment = std::ptr::read_unaligned(libc::CMSG_DATA(message).cast::<libc::c_int>());
                return usize::try_from(segment).ok().filter(|&segment| segment > 0);
            }
            message = libc::CMSG_NXTHDR(header, message);
        }
    }
    None
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

    fn planned(batch: &SendBatch, from: usize, offload: bool) -> Vec<Run> {
        let mut runs = Vec::new();
        plan_runs(batch, from, offload, &mut runs);
        runs
    }

    #[cfg(target_os = "linux")]
    fn iovecs_of(batch: &SendBatch, runs: &[Run]) -> (Vec<libc::iovec>, Vec<(usize, usize)>) {
        let (mut iovecs, mut spans) = (Vec::new(), Vec::new());
        run_iovecs(batch, runs, &mut iovecs, &mut spans);
        (iovecs, spans)
    }

    /// A sender and a non-blocking receiver that takes runs whole (`UDP_GRO`).
    #[cfg(target_os = "linux")]
    fn offload_pair() -> (UdpSocket, UdpSocket) {
        let (sender, receiver) = pair();
        assert!(enable_receive_offload(&receiver), "UDP_GRO refused by this kernel");
        (sender, receiver)
    }

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
        let outcome =
            batch.send(&sender, Some(receiver.local_addr().expect("address")), &mut SegmentOffload::default());
        let bytes: usize = datagrams.iter().map(Vec::len).sum();
        assert_eq!(outcome, SendOutcome { datagrams: 40, bytes, ..SendOutcome::default() });
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
        assert_eq!(batch.send(&sender, None, &mut SegmentOffload::default()).datagrams, 2);
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
        let outcome =
            batch.send(&sender, Some("127.0.0.1:0".parse().expect("address")), &mut SegmentOffload::default());
        assert_eq!((outcome.datagrams, outcome.errors), (0, 2));
    }

    /// A batch of `lengths`, each datagram filled with its index (wrapping) so order shows.
    fn batch_of(lengths: &[usize]) -> (SendBatch, Vec<Vec<u8>>) {
        let datagrams: Vec<Vec<u8>> = lengths.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
        let mut batch = SendBatch::default();
        queue(&mut batch, &datagrams.iter().map(Vec::as_slice).collect::<Vec<_>>());
        (batch, datagrams)
    }

    fn shape(runs: &[Run]) -> Vec<(usize, usize, usize)> {
        runs.iter().map(|run| (run.first, run.segments, run.segment)).collect()
    }

    #[test]
    fn runs_are_equal_datagrams_then_at_most_one_shorter_within_the_kernel_bounds() {
        let (batch, _) = batch_of(&[1408, 1408, 1408, 100, 1408, 2000, 1408, 1408]);
        // A shorter datagram ends a run; a longer one starts the next.
        assert_eq!(shape(&planned(&batch, 0, true)), vec![(0, 4, 1408), (4, 1, 1408), (5, 2, 2000), (7, 1, 1408)]);
        // Resuming part-way starts at that datagram's bytes.
        let runs = planned(&batch, 2, true);
        assert_eq!(shape(&runs), vec![(2, 2, 1408), (4, 1, 1408), (5, 2, 2000), (7, 1, 1408)]);
        assert_eq!(runs[0].bytes, 1408 + 100);
        // Without offload, a datagram a run.
        let plain = planned(&batch, 0, false);
        assert_eq!(plain.len(), 8);
        assert!(plain.iter().all(|run| run.segments == 1 && run.bytes == run.segment));
        // At most MAX_OFFLOAD_BYTES per run, and at most MAX_OFFLOAD_SEGMENTS.
        let (big, _) = batch_of(&[1408; 100]);
        let runs = planned(&big, 0, true);
        assert_eq!(shape(&runs), vec![(0, 46, 1408), (46, 46, 1408), (92, 8, 1408)]);
        assert!(runs.iter().all(|run| run.bytes <= MAX_OFFLOAD_BYTES));
        let (small, _) = batch_of(&[64; 150]);
        assert_eq!(shape(&planned(&small, 0, true)), vec![(0, 64, 64), (64, 64, 64), (128, 22, 64)]);
        // An empty datagram never takes others with it.
        let (empty, _) = batch_of(&[0, 0, 5]);
        assert_eq!(shape(&planned(&empty, 0, true)), vec![(0, 1, 0), (1, 1, 0), (2, 1, 5)]);
    }

    /// Sends `lengths` from a fresh socket to `receiver` with offload on; returns what arrived.
    fn send_and_receive(receiver: &UdpSocket, lengths: &[usize]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, SendOutcome) {
        let sender = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
        let (mut batch, sent) = batch_of(lengths);
        let mut offload = SegmentOffload::default();
        let outcome = batch.send(&sender, Some(receiver.local_addr().expect("address")), &mut offload);
        let mut slots = ReceiveBatch::new(4);
        let received = receive_all(&mut slots, receiver, lengths.len()).into_iter().map(|(d, _)| d).collect();
        (sent, received, outcome)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn offloaded_runs_arrive_as_the_same_datagrams_with_and_without_receive_offload() {
        let lengths: Vec<usize> =
            [vec![1408; 100], vec![700], vec![1056; 70], vec![64; 130], vec![1], vec![65000]].concat();
        let bytes: usize = lengths.iter().sum();
        for receive_offload in [true, false] {
            let (_, receiver) = pair();
            socket2::SockRef::from(&receiver).set_recv_buffer_size(8 << 20).expect("buffer");
            // Without receive offload the kernel cuts every run apart before the receiver.
            if receive_offload {
                assert!(enable_receive_offload(&receiver), "UDP_GRO refused by this kernel");
            }
            let (sent, received, outcome) = send_and_receive(&receiver, &lengths);
            assert_eq!(outcome, SendOutcome { datagrams: lengths.len(), bytes, ..SendOutcome::default() });
            assert_eq!(received, sent, "receive offload {receive_offload}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_receiver_with_offload_gets_a_run_in_one_delivery_and_cuts_it_back() {
        let (sender, receiver) = offload_pair();
        let (mut batch, sent) = batch_of(&[1408, 1408, 1408, 300]);
        let outcome =
            batch.send(&sender, Some(receiver.local_addr().expect("address")), &mut SegmentOffload::default());
        assert_eq!(outcome.datagrams, 4);
        let mut slots = ReceiveBatch::new(4);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut got = 0;
        while got == 0 && std::time::Instant::now() < deadline {
            got = slots.receive(&receiver);
        }
        // Four datagrams from one delivery, each as it was sent.
        assert_eq!((got, slots.received.len()), (4, 1));
        let source = sender.local_addr().expect("address");
        let received: Vec<(Vec<u8>, SocketAddr)> = slots.datagrams().map(|(d, s)| (d.to_vec(), s)).collect();
        assert_eq!(received, sent.into_iter().map(|d| (d, source)).collect::<Vec<_>>());
    }

    /// The receive headers are built once and reused: a slot whose last delivery came without a
    /// segment size (the kernel shortened its control length to nothing) still takes the next
    /// run's.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_slot_reused_after_a_single_datagram_still_cuts_a_run_back() {
        let (sender, receiver) = offload_pair();
        let destination = Some(receiver.local_addr().expect("address"));
        let mut slots = ReceiveBatch::new(1);
        for lengths in [&[700][..], &[1408, 1408, 1408, 1408], &[1], &[1000, 1000, 1000]] {
            let (mut batch, sent) = batch_of(lengths);
            assert_eq!(batch.send(&sender, destination, &mut SegmentOffload::default()).datagrams, lengths.len());
            let received: Vec<Vec<u8>> =
                receive_all(&mut slots, &receiver, lengths.len()).into_iter().map(|(d, _)| d).collect();
            let got: Vec<usize> = received.iter().map(Vec::len).collect();
            assert!(received == sent, "sent {lengths:?}, received datagrams of {got:?} bytes");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_socket_that_refuses_offload_falls_back_to_single_datagrams_and_loses_none() {
        let (sender, receiver) = pair();
        // The kernel refuses UDP_SEGMENT on a socket that sends without checksums (EINVAL).
        set_int_option(&sender, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).expect("SO_NO_CHECK");
        let (mut batch, sent) = batch_of(&[1408, 1408, 1408, 64, 64, 9]);
        let mut offload = SegmentOffload::default();
        let outcome = batch.send(&sender, Some(receiver.local_addr().expect("address")), &mut offload);
        assert_eq!((outcome.datagrams, outcome.errors, outcome.would_block), (6, 0, 0));
        assert_eq!(outcome.offload_refused, Some(libc::EINVAL));
        assert!(!offload.is_enabled(), "a refused offloaded send turns offload off for the socket");
        let mut slots = ReceiveBatch::new(8);
        let received: Vec<Vec<u8>> = receive_all(&mut slots, &receiver, 6).into_iter().map(|(d, _)| d).collect();
        assert_eq!(received, sent);
    }

    /// Queues `lengths` as mapped datagrams lying back to back in `log` (from offset 0), with a
    /// written datagram of `written` bytes before the one at index `written_at`.
    fn mapped_batch(log: &[u8], lengths: &[usize], written_at: usize, written: &[u8]) -> (SendBatch, Vec<Vec<u8>>) {
        let mut batch = SendBatch::default();
        let mut expected = Vec::new();
        let mut offset = 0;
        for (index, &length) in lengths.iter().enumerate() {
            if index == written_at {
                queue(&mut batch, &[written]);
                expected.push(written.to_vec());
            }
            let bytes = &log[offset..offset + length];
            // SAFETY: `log` outlives the batch and is not written while it is queued.
            assert!(unsafe { batch.push_or_map(|_| Some(Filled::Mapped(bytes.as_ptr(), length))) });
            expected.push(bytes.to_vec());
            offset += length;
        }
        (batch, expected)
    }

    #[test]
    fn mapped_datagrams_are_sent_from_where_they_lie_mixed_with_written_ones() {
        let log: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let lengths: Vec<usize> = [vec![1056; 80], vec![320], vec![1408; 30], vec![64; 3]].concat();
        let (mut batch, expected) = mapped_batch(&log, &lengths, 50, b"a heartbeat between them");
        // Nothing was copied into the batch's own buffer but the written datagram.
        assert_eq!(batch.used, 24);
        assert_eq!(batch.datagrams().map(<[u8]>::to_vec).collect::<Vec<_>>(), expected);
        let offloads: &[bool] = if cfg!(target_os = "linux") { &[true, false] } else { &[false] };
        for &offload in offloads {
            let (sender, receiver) = pair();
            socket2::SockRef::from(&receiver).set_recv_buffer_size(8 << 20).expect("buffer");
            let mut state = if offload { SegmentOffload::default() } else { SegmentOffload::disabled() };
            let outcome = batch.send(&sender, Some(receiver.local_addr().expect("address")), &mut state);
            let bytes: usize = expected.iter().map(Vec::len).sum();
            assert_eq!(outcome, SendOutcome { datagrams: expected.len(), bytes, ..SendOutcome::default() });
            let mut slots = ReceiveBatch::new(8);
            let received: Vec<Vec<u8>> =
                receive_all(&mut slots, &receiver, expected.len()).into_iter().map(|(d, _)| d).collect();
            assert_eq!(received, expected, "offload {offload}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_run_of_datagrams_lying_back_to_back_is_one_iovec() {
        let log = vec![7u8; 100_000];
        // Mapped 1056-byte datagrams back to back, a written one at index 3, then a gap in the
        // mapped bytes (the next datagram starts further on).
        let (mut batch, _) = mapped_batch(&log, &[1056; 6], 3, &[1; 1056]);
        let far = &log[50_000..51_056];
        // SAFETY: `log` outlives the batch and is not written while it is queued.
        assert!(unsafe { batch.push_or_map(|_| Some(Filled::Mapped(far.as_ptr(), far.len()))) });
        let runs = planned(&batch, 0, true);
        assert_eq!(shape(&runs), vec![(0, 8, 1056)]);
        let (iovecs, spans) = iovecs_of(&batch, &runs);
        // Three mapped, the written one, three mapped (back to back with the first three), the far one.
        let lengths: Vec<usize> = iovecs.iter().map(|iov| iov.iov_len).collect();
        assert_eq!(lengths, vec![3 * 1056, 1056, 3 * 1056, 1056]);
        assert_eq!(spans, vec![(0, 4)]);
        // Without offload, one datagram per run, one iovec each.
        let single = planned(&batch, 0, false);
        let (iovecs, spans) = iovecs_of(&batch, &single);
        assert_eq!(iovecs.len(), 8);
        assert_eq!(spans, (0..8).map(|i| (i, 1)).collect::<Vec<_>>());
    }

    #[test]
    fn an_empty_datagram_is_received_as_one() {
        let (sender, receiver) = pair();
        enable_receive_offload(&receiver);
        let (mut batch, _) = batch_of(&[0, 3]);
        let outcome =
            batch.send(&sender, Some(receiver.local_addr().expect("address")), &mut SegmentOffload::default());
        assert_eq!(outcome.datagrams, 2);
        let mut slots = ReceiveBatch::new(4);
        let received: Vec<Vec<u8>> = receive_all(&mut slots, &receiver, 2).into_iter().map(|(d, _)| d).collect();
        assert_eq!(received, vec![vec![], vec![1u8; 3]]);
    }
}
