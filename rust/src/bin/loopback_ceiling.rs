//! Loopback ceiling: how many datagrams of the transport's sizes a minimal `sendmmsg` /
//! `recvmmsg` pair moves over 127.0.0.1 between two processes, with no protocol at all.
//!
//! ```text
//! loopback-ceiling run --payload 32 --mtu 1408 [--seconds 1] [--batch 64] [--rcvbuf 2097152]
//! ```
//!
//! Datagram size is what the transport's sender produces for a stream of `--payload`-byte
//! messages: each message is one frame of a 32-byte data header plus the payload, padded to the
//! 32-byte frame alignment, and the sender packs as many whole frames into one datagram as fit
//! in `--mtu`. The sender (this process) sends such datagrams with `sendmmsg` in batches of
//! `--batch` for `--seconds`; the receiver (a child process, `recv`) drains them with `recvmmsg`
//! into buffers of `--mtu` bytes, with the transport's default `SO_RCVBUF`, and reports the
//! rate over wall time from its first datagram to its last. Flow control is the least that
//! keeps the kernel from dropping datagrams: after each `recvmmsg` the receiver sends its
//! running count back (8 bytes, a second socket), and the sender keeps at most half the
//! receive buffer in flight, blocking on the count (not spinning) when the window is full.
//! Datagrams still lost (a count not arriving within 10 ms lets the sender go on) are not
//! counted: the JSON line reports `sent_datagrams` and `lost_fraction`. Messages per second =
//! datagrams received per second × frames per datagram.
//!
//! Prints one JSON line: `{"bench":"ceiling","payload":..,"mtu":..,"frame":..,
//! "frames_per_datagram":..,"datagram":..,"datagrams":..,"seconds":..,"datagrams_per_sec":..,
//! "msgs_per_sec":..,"mb_per_sec":..,"sent_datagrams":..,"lost_fraction":..}`.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Aeron data frame header length.
const HEADER: usize = 32;
/// Frames start on 32-byte boundaries.
const ALIGNMENT: usize = 32;
/// First byte of the datagrams that tell the receiver the sender is done.
const END_MARK: u8 = 0xEE;
/// How long the sender waits for the receiver's count before it takes what is in flight as lost.
const ACK_WAIT: Duration = Duration::from_millis(10);
/// The receiver gives up after this long without a datagram (once it had some, or at the start).
const IDLE_LIMIT: Duration = Duration::from_secs(5);

/// Result type of the tool: errors are messages for the user.
type CeilingResult<T> = Result<T, String>;

/// Parsed `--name value` options with defaults.
struct Options {
    payload: usize,
    mtu: usize,
    seconds: f64,
    batch: usize,
    rcvbuf: usize,
    port: u16,
    ack_port: u16,
}

impl Options {
    fn parse(args: &[String]) -> CeilingResult<Options> {
        let mut options =
            Options { payload: 32, mtu: 1408, seconds: 1.0, batch: 64, rcvbuf: 2 * 1024 * 1024, port: 0, ack_port: 0 };
        let mut iter = args.iter();
        while let Some(name) = iter.next() {
            let value = iter.next().ok_or_else(|| format!("option {name} needs a value"))?;
            let number = || value.parse::<usize>().map_err(|e| format!("{name} {value:?}: {e}"));
            match name.as_str() {
                "--payload" => options.payload = number()?,
                "--mtu" => options.mtu = number()?,
                "--batch" => options.batch = number()?.clamp(1, 1024),
                "--rcvbuf" => options.rcvbuf = number()?,
                "--port" => options.port = u16::try_from(number()?).map_err(|e| format!("--port: {e}"))?,
                "--ack-port" => options.ack_port = u16::try_from(number()?).map_err(|e| format!("--ack-port: {e}"))?,
                "--seconds" => options.seconds = value.parse().map_err(|e| format!("--seconds {value:?}: {e}"))?,
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        if options.frame() > options.mtu {
            return Err(format!("a {}-byte payload does not fit one frame in --mtu {}", options.payload, options.mtu));
        }
        Ok(options)
    }

    /// Length of one message's frame: header + payload, aligned.
    fn frame(&self) -> usize {
        (HEADER + self.payload).div_ceil(ALIGNMENT) * ALIGNMENT
    }

    fn frames_per_datagram(&self) -> usize {
        (self.mtu / self.frame()).max(1)
    }

    fn datagram(&self) -> usize {
        self.frames_per_datagram() * self.frame()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => Options::parse(&args[1..]).and_then(|o| run(&o)),
        Some("recv") => Options::parse(&args[1..]).and_then(|o| receive(&o)),
        _ => Err("usage: loopback-ceiling run|recv [--payload B] [--mtu B] [--seconds S] [--batch N]".to_owned()),
    };
    match result {
        Ok(line) => println!("{line}"),
        Err(message) => {
            eprintln!("loopback-ceiling: {message}");
            std::process::exit(1);
        }
    }
}

/// Sends `datagrams` (all the same buffer) with one `sendmmsg` per batch; returns how many the
/// kernel took.
fn send_batch(socket: &UdpSocket, buffer: &[u8], batch: usize) -> CeilingResult<usize> {
    let mut iovecs: Vec<libc::iovec> = (0..batch)
        .map(|_| libc::iovec { iov_base: buffer.as_ptr() as *mut libc::c_void, iov_len: buffer.len() })
        .collect();
    let mut headers: Vec<libc::mmsghdr> = iovecs
        .iter_mut()
        .map(|iov| {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = iov;
            header.msg_hdr.msg_iovlen = 1;
            header
        })
        .collect();
    let count = u32::try_from(headers.len()).map_err(|e| e.to_string())?;
    // SAFETY: `headers` holds `count` initialised headers whose iovecs point into `buffer`,
    // both alive for the call; the socket is connected, so no address is needed.
    let sent = unsafe { libc::sendmmsg(socket.as_raw_fd(), headers.as_mut_ptr(), count, 0) };
    if sent < 0 {
        let error = std::io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ENOBUFS | libc::EAGAIN) => Ok(0),
            _ => Err(format!("sendmmsg: {error}")),
        };
    }
    usize::try_from(sent).map_err(|e| e.to_string())
}

/// Sender here, receiver in a child process; prints the receiver's figures.
fn run(options: &Options) -> CeilingResult<String> {
    let probe = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = probe.local_addr().map_err(|e| e.to_string())?.port();
    drop(probe);
    // The receiver's running count comes back on this socket.
    let acks = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let ack_port = acks.local_addr().map_err(|e| e.to_string())?.port();
    acks.set_read_timeout(Some(ACK_WAIT)).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["recv", "--payload", &options.payload.to_string(), "--mtu", &options.mtu.to_string()])
        .args(["--batch", &options.batch.to_string(), "--rcvbuf", &options.rcvbuf.to_string()])
        .args(["--port", &port.to_string(), "--ack-port", &ack_port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the receiver: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no receiver stdout")?;
    // The receiver prints "ready" once bound.
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(&mut stdout, &mut ready).map_err(|e| format!("receiver did not start: {e}"))?;
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    socket.connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    let buffer = vec![0xA5u8; options.datagram()];
    let window = (options.rcvbuf / 2 / options.datagram()).max(1) as u64;
    let mut sent = 0u64;
    let mut acked = 0u64;
    let mut count = [0u8; 8];
    let start = Instant::now();
    let duration = Duration::from_secs_f64(options.seconds.max(0.01));
    while start.elapsed() < duration {
        let room = window.saturating_sub(sent - acked.min(sent));
        if room == 0 {
            match acks.recv(&mut count) {
                Ok(8) => acked = acked.max(u64::from_le_bytes(count)),
                Ok(_) => {}
                // No count within ACK_WAIT: what is in flight was dropped; go on.
                Err(_) => acked = sent,
            }
            continue;
        }
        let batch = options.batch.min(usize::try_from(room).unwrap_or(options.batch));
        sent += send_batch(&socket, &buffer, batch)? as u64;
    }
    // End marks, repeated: one may be dropped like any datagram.
    let end = [END_MARK; 8];
    for _ in 0..200 {
        let _ = socket.send(&end);
        std::thread::sleep(Duration::from_micros(500));
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).map_err(|e| e.to_string())?;
    let status = child.wait().map_err(|e| e.to_string())?;
    let line = text.lines().last().unwrap_or("").trim().to_owned();
    if !status.success() || !line.starts_with('{') {
        return Err(format!("the receiver failed ({status}): {line}"));
    }
    let received: u64 = json_number(&line, "datagrams").unwrap_or(0.0) as u64;
    let lost = if sent == 0 { 0.0 } else { 1.0 - (received as f64 / sent as f64).min(1.0) };
    Ok(format!("{},\"sent_datagrams\":{sent},\"lost_fraction\":{lost:.4}}}", line.trim_end_matches('}')))
}

/// The number after `"key":` in a flat JSON object.
fn json_number(line: &str, key: &str) -> Option<f64> {
    let start = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// Receives until an end mark (or silence), then prints the rate.
fn receive(options: &Options) -> CeilingResult<String> {
    let socket = UdpSocket::bind(("127.0.0.1", options.port)).map_err(|e| format!("bind: {e}"))?;
    let sock = socket2::SockRef::from(&socket);
    sock.set_recv_buffer_size(options.rcvbuf).map_err(|e| format!("SO_RCVBUF: {e}"))?;
    socket.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
    let acks = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    acks.connect(("127.0.0.1", options.ack_port)).map_err(|e| format!("connect: {e}"))?;
    println!("ready");
    let batch = options.batch;
    let size = options.mtu.max(64);
    let mut buffers = vec![0u8; batch * size];
    let mut datagrams = 0u64;
    let mut bytes = 0u64;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let started = Instant::now();
    'outer: loop {
        let mut iovecs: Vec<libc::iovec> = buffers
            .chunks_mut(size)
            .map(|chunk| libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: chunk.len() })
            .collect();
        let mut headers: Vec<libc::mmsghdr> = iovecs
            .iter_mut()
            .map(|iov| {
                // SAFETY: an all-zero msghdr is valid (no name, no control data).
                let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
                header.msg_hdr.msg_iov = iov;
                header.msg_hdr.msg_iovlen = 1;
                header
            })
            .collect();
        let count = u32::try_from(headers.len()).map_err(|e| e.to_string())?;
        // SAFETY: `count` headers, each pointing at its own `size`-byte chunk of `buffers`, all
        // alive for the call. The socket's read timeout bounds the wait for the first datagram.
        let got = unsafe {
            libc::recvmmsg(socket.as_raw_fd(), headers.as_mut_ptr(), count, libc::MSG_WAITFORONE, std::ptr::null_mut())
        };
        if got < 0 {
            let error = std::io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => {
                    let idle = first.map_or(started, |_| last).elapsed();
                    if idle > IDLE_LIMIT {
                        break;
                    }
                    continue;
                }
                _ => return Err(format!("recvmmsg: {error}")),
            }
        }
        let now = Instant::now();
        for (header, chunk) in headers.iter().zip(buffers.chunks(size)).take(usize::try_from(got).unwrap_or(0)) {
            let length = header.msg_len as usize;
            if length < 64 && chunk.first() == Some(&END_MARK) {
                break 'outer;
            }
            if first.is_none() {
                first = Some(now);
            }
            datagrams += 1;
            bytes += length as u64;
            last = now;
        }
        // Best effort: a lost count only makes the sender wait ACK_WAIT.
        let _ = acks.send(&datagrams.to_le_bytes());
    }
    let seconds = first.map_or(0.0, |first| last.duration_since(first).as_secs_f64()).max(1e-9);
    let per_second = datagrams as f64 / seconds;
    let messages = per_second * options.frames_per_datagram() as f64;
    Ok(format!(
        "{{\"bench\":\"ceiling\",\"payload\":{},\"mtu\":{},\"frame\":{},\"frames_per_datagram\":{},\"datagram\":{},\
         \"datagrams\":{datagrams},\"bytes\":{bytes},\"seconds\":{seconds:.6},\"datagrams_per_sec\":{per_second:.0},\
         \"msgs_per_sec\":{messages:.0},\"mb_per_sec\":{:.2}}}",
        options.payload,
        options.mtu,
        options.frame(),
        options.frames_per_datagram(),
        options.datagram(),
        messages * options.payload as f64 / 1e6,
    ))
}
