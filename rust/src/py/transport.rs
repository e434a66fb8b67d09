//! Bindings for the transport: `Client`, `Publication`, `Subscription`, `Header`, `LossyRelay`.
//!
//! Conversion and GIL release only: every decision is made in `crate::client`.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::Ordering;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::client::{self, MessageBatch, MessageHeader};
use crate::driver::events::DriverEventKind;
use crate::driver::{DriverContext, IdleStrategy, ThreadingMode};
use crate::error::Error;
use crate::flow_control::FlowControlSpec;
use crate::media::relay::{Impairment, LossyRelay as RustRelay};
use crate::protocol::OfferError;

/// Offer outcome: no receiver connected.
pub const NOT_CONNECTED: i64 = -1;
/// Offer outcome: the publication window is full.
pub const BACK_PRESSURED: i64 = -2;
/// Offer outcome: an administrative action (term rotation) happened; retry.
pub const ADMIN_ACTION: i64 = -3;
/// Offer outcome: the publication is closed.
pub const CLOSED: i64 = -4;
/// Offer outcome: the stream reached its maximum position.
pub const MAX_POSITION_EXCEEDED: i64 = -5;

pub(crate) fn exception(py: Python<'_>, name: &str, message: String) -> PyErr {
    match py.import("affinity.exceptions").and_then(|module| module.getattr(name)) {
        Ok(class) => {
            PyErr::from_value(class.call1((message,)).unwrap_or_else(|e| e.into_value(py).into_bound(py).into_any()))
        }
        Err(error) => error,
    }
}

/// Maps a crate error to the matching `affinity.exceptions` class.
pub(crate) fn to_py_error(py: Python<'_>, error: Error) -> PyErr {
    let name = match &error {
        Error::Config(_) => "ChannelUriError",
        Error::Closed(_) => "ClosedError",
        Error::Timeout(_) => "DriverTimeoutError",
        _ => "DriverError",
    };
    exception(py, name, error.to_string())
}

fn offer_code(py: Python<'_>, result: Result<i64, OfferError>) -> PyResult<i64> {
    match result {
        Ok(position) => Ok(position),
        Err(OfferError::MessageTooLong { length, max }) => Err(exception(
            py,
            "MessageTooLongError",
            format!("message of {length} bytes exceeds the maximum of {max} bytes for this term length"),
        )),
        Err(error) => Ok(error.code()),
    }
}

fn parse_setting<T: FromStr<Err = String>>(value: &str) -> PyResult<T> {
    value.parse().map_err(PyValueError::new_err)
}

/// A connection to an (embedded) media driver.
#[pyclass(module = "affinity._affinity", frozen)]
pub struct Client {
    inner: std::sync::Arc<client::Client>,
}

impl Client {
    /// The Rust client, shared with group members created from it.
    pub(crate) fn shared(&self) -> std::sync::Arc<client::Client> {
        self.inner.clone()
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (*, threading="shared", idle="backoff", term_length=None, mtu=None, receiver_window=None, socket_receive_buffer=None, flow_control=None, receiver_timeout_ms=None, command_timeout_ms=None, yield_when_idle=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        threading: &str,
        idle: &str,
        term_length: Option<u32>,
        mtu: Option<u32>,
        receiver_window: Option<u32>,
        socket_receive_buffer: Option<usize>,
        flow_control: Option<&str>,
        receiver_timeout_ms: Option<u64>,
        command_timeout_ms: Option<u64>,
        yield_when_idle: bool,
    ) -> PyResult<Self> {
        let mut context =
            DriverContext { threading_mode: parse_setting::<ThreadingMode>(threading)?, ..DriverContext::default() };
        context.idle_strategy = parse_setting::<IdleStrategy>(idle)?;
        if let Some(value) = term_length {
            if !value.is_power_of_two() || !(65536..=1 << 30).contains(&value) {
                return Err(PyValueError::new_err(format!(
                    "term_length={value}: must be a power of two between 65536 and 1073741824"
                )));
            }
            context.term_length = value;
        }
        if let Some(value) = mtu {
            if value <= 32 || value > 65504 || value % 32 != 0 {
                return Err(PyValueError::new_err(format!("mtu={value}: must be a multiple of 32 in (32, 65504]")));
            }
            context.mtu = value;
        }
        if let Some(value) = receiver_window {
            context.receiver_window = value;
        }
        if let Some(value) = socket_receive_buffer {
            context.socket_receive_buffer = value;
        }
        if let Some(value) = flow_control {
            let spec =
                FlowControlSpec::parse(value).map_err(|e| PyValueError::new_err(format!("flow_control: {e}")))?;
            context.flow_control.multicast_strategy = spec.strategy;
            context.flow_control.group_tag = spec.group_tag.or(context.flow_control.group_tag);
            context.flow_control.group_min_size = spec.group_min_size.unwrap_or(context.flow_control.group_min_size);
            if let Some(timeout) = spec.receiver_timeout {
                context.flow_control.receiver_timeout = timeout;
            }
        }
        if let Some(ms) = receiver_timeout_ms {
            context.flow_control.receiver_timeout = std::time::Duration::from_millis(ms);
        }
        context.client_yields_when_idle = yield_when_idle;
        if let Some(ms) = command_timeout_ms {
            context.client_command_timeout = std::time::Duration::from_millis(ms);
        }
        let inner = py.detach(|| client::Client::new(context)).map_err(|e| to_py_error(py, e))?;
        Ok(Client { inner: std::sync::Arc::new(inner) })
    }

    /// Creates a publication.
    fn add_publication(&self, py: Python<'_>, channel: &str, stream_id: i32) -> PyResult<Publication> {
        let inner = py.detach(|| self.inner.add_publication(channel, stream_id)).map_err(|e| to_py_error(py, e))?;
        Ok(Publication { inner })
    }

    /// Creates a subscription.
    fn add_subscription(&self, py: Python<'_>, channel: &str, stream_id: i32) -> PyResult<Subscription> {
        let inner = py.detach(|| self.inner.add_subscription(channel, stream_id)).map_err(|e| to_py_error(py, e))?;
        Ok(Subscription { inner })
    }

    /// Driver events since the last call (receivers joining or leaving a flow-control group,
    /// connection changes, error frames), oldest first. Each is also logged on the Python
    /// logger `affinity.driver` (INFO, WARNING for error frames).
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let events = py.detach(|| self.inner.drain_events());
        let logger = py.import("logging")?.call_method1("getLogger", ("affinity.driver",))?;
        let list = PyList::empty(py);
        for event in events {
            let line = event.to_string();
            let entry = PyDict::new(py);
            let seconds = event.time.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
            entry.set_item("time", seconds)?;
            entry.set_item("level", event.level())?;
            entry.set_item("channel", &event.channel)?;
            entry.set_item("stream_id", event.stream_id)?;
            entry.set_item("session_id", event.session_id)?;
            match &event.kind {
                DriverEventKind::ReceiverJoined { receiver_id, group_tag } => {
                    entry.set_item("kind", "receiver_joined")?;
                    entry.set_item("receiver_id", receiver_id)?;
                    entry.set_item("group_tag", group_tag)?;
                }
                DriverEventKind::ReceiverRemoved { receiver_id, group_tag, reason } => {
                    entry.set_item("kind", "receiver_removed")?;
                    entry.set_item("receiver_id", receiver_id)?;
                    entry.set_item("group_tag", group_tag)?;
                    entry.set_item("reason", crate::driver::events::reason_name(*reason))?;
                }
                DriverEventKind::ConnectionChanged { connected } => {
                    entry.set_item("kind", "connection_changed")?;
                    entry.set_item("connected", connected)?;
                }
                DriverEventKind::ReceiverError { receiver_id, code, message } => {
                    entry.set_item("kind", "receiver_error")?;
                    entry.set_item("receiver_id", receiver_id)?;
                    entry.set_item("code", code)?;
                    entry.set_item("error", message)?;
                }
            }
            let level = if event.level() == "WARN" { 30 } else { 20 };
            logger.call_method1("log", (level, line.split_once(' ').map(|(_, rest)| rest).unwrap_or(&line)))?;
            entry.set_item("message", line)?;
            list.append(entry)?;
        }
        Ok(list)
    }

    /// Driver-wide counters: malformed datagrams dropped, send errors, events lost.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let driver = self.inner.driver();
        let dict = PyDict::new(py);
        dict.set_item("invalid_data_frames", driver.invalid_data_frames())?;
        dict.set_item("invalid_control_frames", driver.invalid_control_frames())?;
        dict.set_item("send_errors", driver.send_errors())?;
        dict.set_item("dropped_events", driver.dropped_events())?;
        Ok(dict)
    }

    /// One driver duty cycle (invoker threading); returns the work done.
    fn do_work(&self, py: Python<'_>) -> usize {
        py.detach(|| self.inner.do_work())
    }

    /// The threading mode: "shared" or "invoker".
    #[getter]
    fn threading(&self) -> &'static str {
        match self.inner.context().threading_mode {
            ThreadingMode::Shared => "shared",
            ThreadingMode::Invoker => "invoker",
        }
    }

    /// Whether the client was closed.
    #[getter]
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Closes every publication and subscription and stops the embedded driver.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// `[{receiver_id, group_tag, position, window}, ...]` for `Publication.counters()`.
fn receiver_list<'py>(
    py: Python<'py>,
    receivers: impl Iterator<Item = (i64, Option<i64>, i64, i32)>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for (receiver_id, group_tag, position, window) in receivers {
        let entry = PyDict::new(py);
        entry.set_item("receiver_id", receiver_id)?;
        entry.set_item("group_tag", group_tag)?;
        entry.set_item("position", position)?;
        entry.set_item("window", window)?;
        list.append(entry)?;
    }
    Ok(list)
}

/// Sends messages on one channel and stream.
#[pyclass(module = "affinity._affinity", frozen)]
pub struct Publication {
    inner: client::Publication,
}

fn with_bytes<R>(object: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(bytes) = object.cast::<PyBytes>() {
        return Ok(f(bytes.as_bytes()));
    }
    let type_error = || {
        PyTypeError::new_err(format!(
            "expected a bytes-like object, got {}",
            object.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    };
    // pyarrow buffers export signed bytes ("b"); bytes, bytearray and memoryview unsigned ("B").
    let unsigned = PyBuffer::<u8>::get(object).ok();
    let signed = if unsigned.is_none() { Some(PyBuffer::<i8>::get(object).map_err(|_| type_error())?) } else { None };
    let (pointer, length, contiguous) = match (&unsigned, &signed) {
        (Some(buffer), _) => (buffer.buf_ptr() as *const u8, buffer.len_bytes(), buffer.is_c_contiguous()),
        (None, Some(buffer)) => (buffer.buf_ptr() as *const u8, buffer.len_bytes(), buffer.is_c_contiguous()),
        (None, None) => return Err(type_error()),
    };
    if !contiguous {
        return Err(PyValueError::new_err("the buffer must be C-contiguous"));
    }
    // SAFETY: the buffer is contiguous, and the view held in `unsigned`/`signed` keeps the
    // exporter from freeing or resizing the memory until after `f` returns.
    let slice = unsafe { std::slice::from_raw_parts(pointer, length) };
    Ok(f(slice))
}

fn arrow_offsets(buffer: &Bound<'_, PyAny>, large: bool, count: usize, first: usize) -> PyResult<Vec<usize>> {
    with_bytes(buffer, |bytes| {
        let width = if large { 8 } else { 4 };
        let mut offsets = Vec::with_capacity(count + 1);
        for index in first..=first + count {
            let at = index * width;
            let chunk = bytes.get(at..at + width);
            let value = match chunk {
                Some(chunk) if large => i64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])) as usize,
                Some(chunk) => i32::from_le_bytes(chunk.try_into().unwrap_or([0; 4])) as usize,
                None => return Err(PyValueError::new_err("arrow offsets buffer is shorter than the array")),
            };
            offsets.push(value);
        }
        Ok(offsets)
    })?
}

#[pymethods]
impl Publication {
    /// Appends one message; returns the new position (> 0) or a negative outcome code.
    fn offer(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<i64> {
        let result = with_bytes(data, |bytes| self.inner.offer(bytes))?;
        offer_code(py, result)
    }

    /// Appends messages (a sequence of bytes-like objects, or a pyarrow binary/large_binary
    /// array) until one is refused; returns how many were taken.
    fn offer_batch(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<usize> {
        if messages.hasattr("buffers")? && messages.hasattr("type")? {
            return self.offer_arrow(py, messages);
        }
        let (taken, refusal) = if let Ok(list) = messages.cast::<PyList>() {
            let mut slices: Vec<&[u8]> = Vec::with_capacity(list.len());
            let items: Vec<Bound<'_, PyAny>> = list.iter().collect();
            for item in &items {
                if let Ok(bytes) = item.cast::<PyBytes>() {
                    slices.push(bytes.as_bytes());
                } else {
                    return self.offer_each(py, messages);
                }
            }
            self.inner.offer_batch(slices)
        } else {
            return self.offer_each(py, messages);
        };
        if let Some(error @ OfferError::MessageTooLong { .. }) = refusal {
            offer_code(py, Err(error))?;
        }
        Ok(taken)
    }

    /// Whether enough receivers are connected.
    #[getter]
    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }

    /// Whether the publication (or its client) was closed.
    #[getter]
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The end of the last appended message.
    #[getter]
    fn position(&self) -> i64 {
        self.inner.shared().state().tail_position()
    }

    /// The publication's session id.
    #[getter]
    fn session_id(&self) -> i32 {
        self.inner.shared().state().identity().session_id
    }

    /// The stream id.
    #[getter]
    fn stream_id(&self) -> i32 {
        self.inner.shared().state().identity().stream_id
    }

    /// The channel URI.
    #[getter]
    fn channel(&self) -> String {
        self.inner.shared().channel.clone()
    }

    /// The largest message `offer` accepts.
    #[getter]
    fn max_message_length(&self) -> usize {
        self.inner.shared().state().max_message_length()
    }

    /// Counters: positions, limit, strategy, receivers, connected flag, traffic counts.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let status = self.inner.shared().state().status();
        let dict = PyDict::new(py);
        dict.set_item("session_id", status.session_id)?;
        dict.set_item("stream_id", status.stream_id)?;
        dict.set_item("position", status.tail_position)?;
        dict.set_item("sender_position", status.sender_position)?;
        dict.set_item("sender_limit", status.sender_limit)?;
        dict.set_item("publisher_limit", status.publisher_limit)?;
        dict.set_item("connected", status.connected)?;
        dict.set_item("closed", status.closed)?;
        dict.set_item("strategy", status.strategy)?;
        dict.set_item("group_tag", status.group_tag)?;
        dict.set_item("group_min_size", status.group_min_size)?;
        dict.set_item("receiver_timeout_ms", status.receiver_timeout.as_millis() as u64)?;
        let group = status.group_receivers.iter().map(|r| (r.receiver_id, r.group_tag, r.position, r.window));
        dict.set_item("receivers", receiver_list(py, group)?)?;
        let live = status.live_receivers.iter().map(|r| (r.receiver_id, r.group_tag, r.position, r.window));
        dict.set_item("live_receivers", receiver_list(py, live)?)?;
        let counters = status.counters;
        dict.set_item("status_messages", counters.status_messages)?;
        dict.set_item("naks_received", counters.naks_received)?;
        dict.set_item("naks_ignored", counters.naks_ignored)?;
        dict.set_item("retransmits_sent", counters.retransmits_sent)?;
        dict.set_item("retransmitted_bytes", counters.retransmitted_bytes)?;
        dict.set_item("datagrams_sent", counters.datagrams_sent)?;
        dict.set_item("bytes_sent", counters.bytes_sent)?;
        dict.set_item("heartbeats_sent", counters.heartbeats_sent)?;
        dict.set_item("setups_sent", counters.setups_sent)?;
        dict.set_item("errors_received", counters.errors_received)?;
        dict.set_item("invalid_control_frames", counters.invalid_control_frames)?;
        Ok(dict)
    }

    /// Closes the publication; appended data is still delivered.
    fn close(&self) {
        self.inner.close();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }
}

impl Publication {
    fn offer_each(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<usize> {
        let mut taken = 0;
        for item in messages.try_iter()? {
            let code = offer_code(py, with_bytes(&item?, |bytes| self.inner.offer(bytes))?)?;
            if code < 0 {
                break;
            }
            taken += 1;
        }
        Ok(taken)
    }

    fn offer_arrow(&self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<usize> {
        let type_name = array.getattr("type")?.str()?.to_string();
        let large = match type_name.as_str() {
            "binary" | "string" => false,
            "large_binary" | "large_string" => true,
            other => {
                return Err(PyTypeError::new_err(format!(
                    "offer_batch takes a pyarrow binary or large_binary array, got type {other}"
                )))
            }
        };
        if array.getattr("null_count")?.extract::<usize>()? > 0 {
            return Err(PyValueError::new_err("offer_batch: the arrow array contains nulls"));
        }
        let count: usize = array.len()?;
        let first: usize = array.getattr("offset")?.extract()?;
        let buffers = array.call_method0("buffers")?;
        let offsets_buffer = buffers.get_item(1)?;
        let data_buffer = buffers.get_item(2)?;
        let offsets = arrow_offsets(&offsets_buffer, large, count, first)?;
        let empty = PyBytes::new(py, b"");
        let data_object = if data_buffer.is_none() { empty.into_any() } else { data_buffer };
        let (taken, refusal) = with_bytes(&data_object, |data| {
            if offsets.last().copied().unwrap_or(0) > data.len() {
                return Err(PyValueError::new_err("arrow data buffer is shorter than the offsets say"));
            }
            Ok(self.inner.offer_batch(offsets.windows(2).map(|w| &data[w[0]..w[1]])))
        })??;
        if let Some(error @ OfferError::MessageTooLong { .. }) = refusal {
            offer_code(py, Err(error))?;
        }
        Ok(taken)
    }
}

/// Where a message came from (passed to `Subscription.poll` handlers).
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct Header {
    session_id: i32,
    stream_id: i32,
    position: i64,
    term_id: i32,
    term_offset: i32,
    flags: u8,
    reserved_value: i64,
}

impl From<&MessageHeader> for Header {
    fn from(header: &MessageHeader) -> Self {
        Header {
            session_id: header.session_id,
            stream_id: header.stream_id,
            position: header.position,
            term_id: header.term_id,
            term_offset: header.term_offset,
            flags: header.flags,
            reserved_value: header.reserved_value,
        }
    }
}

#[pymethods]
impl Header {
    fn __repr__(&self) -> String {
        format!(
            "Header(session_id={}, stream_id={}, position={}, term_id={}, term_offset={})",
            self.session_id, self.stream_id, self.position, self.term_id, self.term_offset
        )
    }
}

/// Receives messages on one channel and stream.
#[pyclass(module = "affinity._affinity", frozen)]
pub struct Subscription {
    inner: client::Subscription,
}

impl Subscription {
    fn poll_messages(&self, py: Python<'_>, fragment_limit: usize) -> PyResult<(MessageBatch, usize)> {
        let mut batch = MessageBatch::default();
        let fragments =
            py.detach(|| self.inner.poll_into(&mut batch, fragment_limit)).map_err(|e| to_py_error(py, e))?;
        Ok((batch, fragments))
    }
}

#[pymethods]
impl Subscription {
    /// Calls `handler(data, header)` for each whole message within `fragment_limit` fragments;
    /// returns the number of fragments consumed.
    #[pyo3(signature = (handler, fragment_limit=10))]
    fn poll(&self, py: Python<'_>, handler: &Bound<'_, PyAny>, fragment_limit: usize) -> PyResult<usize> {
        let (batch, fragments) = self.poll_messages(py, fragment_limit)?;
        for index in 0..batch.len() {
            let header = Bound::new(py, Header::from(&batch.headers[index]))?;
            handler.call1((PyBytes::new(py, batch.message(index)), header))?;
        }
        Ok(fragments)
    }

    /// Whole messages within `fragment_limit` fragments, as `list[bytes]`, or as a
    /// `pyarrow.LargeBinaryArray` with `as_arrow=True`.
    #[pyo3(signature = (fragment_limit=1000, *, as_arrow=false))]
    fn poll_batch<'py>(&self, py: Python<'py>, fragment_limit: usize, as_arrow: bool) -> PyResult<Bound<'py, PyAny>> {
        let (batch, _) = self.poll_messages(py, fragment_limit)?;
        if as_arrow {
            let pyarrow = py.import("pyarrow")?;
            let offsets: Vec<u8> = batch.offsets.iter().flat_map(|&o| (o as i64).to_le_bytes()).collect();
            let buffers = PyList::new(
                py,
                [
                    py.None().into_bound(py),
                    pyarrow.call_method1("py_buffer", (PyBytes::new(py, &offsets),))?,
                    pyarrow.call_method1("py_buffer", (PyBytes::new(py, &batch.data),))?,
                ],
            )?;
            let array_type = pyarrow.call_method0("large_binary")?;
            return pyarrow.getattr("Array")?.call_method1("from_buffers", (array_type, batch.len(), buffers));
        }
        let list = PyList::empty(py);
        for index in 0..batch.len() {
            list.append(PyBytes::new(py, batch.message(index)))?;
        }
        Ok(list.into_any())
    }

    /// Whether at least one publication is connected.
    #[getter]
    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }

    /// Whether the subscription (or its client) was closed.
    #[getter]
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The channel URI.
    #[getter]
    fn channel(&self) -> String {
        self.inner.shared().channel.clone()
    }

    /// The stream id.
    #[getter]
    fn stream_id(&self) -> i32 {
        self.inner.shared().stream_id
    }

    /// One dict per image: positions, loss and NAK counters.
    fn images<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for status in self.inner.images() {
            let entry = PyDict::new(py);
            entry.set_item("session_id", status.session_id)?;
            entry.set_item("source", status.source)?;
            entry.set_item("position", status.position)?;
            entry.set_item("rebuild_position", status.rebuild_position)?;
            entry.set_item("hwm_position", status.hwm_position)?;
            entry.set_item("active", status.active)?;
            let c = status.counters;
            entry.set_item("datagrams_received", c.datagrams_received)?;
            entry.set_item("bytes_received", c.bytes_received)?;
            entry.set_item("heartbeats_received", c.heartbeats_received)?;
            entry.set_item("duplicates", c.duplicates)?;
            entry.set_item("overruns", c.overruns)?;
            entry.set_item("malformed", c.malformed)?;
            entry.set_item("loss_gaps", c.loss_gaps)?;
            entry.set_item("loss_bytes", c.loss_bytes)?;
            entry.set_item("unrecoverable_gaps", c.unrecoverable_gaps)?;
            entry.set_item("unrecoverable_bytes", c.unrecoverable_bytes)?;
            entry.set_item("naks_sent", c.naks_sent)?;
            entry.set_item("retransmits_received", c.retransmits_received)?;
            entry.set_item("status_messages_sent", c.status_messages_sent)?;
            list.append(entry)?;
        }
        Ok(list)
    }

    /// Stops receiving.
    fn close(&self) {
        self.inner.close();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }
}

/// A loss-injecting UDP relay on loopback, for tests.
#[pyclass(module = "affinity._affinity", frozen)]
pub struct LossyRelay {
    inner: std::sync::Mutex<RustRelay>,
    address: String,
}

#[pymethods]
impl LossyRelay {
    #[new]
    #[pyo3(signature = (target, *, loss=0.0, duplicate=0.0, reorder=0.0, seed=1))]
    fn new(py: Python<'_>, target: &str, loss: f64, duplicate: f64, reorder: f64, seed: u64) -> PyResult<Self> {
        let target: SocketAddr =
            target.parse().map_err(|e| PyValueError::new_err(format!("target {target:?}: {e}")))?;
        for (name, value) in [("loss", loss), ("duplicate", duplicate), ("reorder", reorder)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(PyValueError::new_err(format!("{name}={value}: must be a probability in [0, 1]")));
            }
        }
        let front = SocketAddr::new(target.ip(), 0);
        let relay = RustRelay::start(front, target, Impairment { loss, duplicate, reorder }, seed)
            .map_err(|e| to_py_error(py, Error::Io(e)))?;
        let address = relay.front_address().to_string();
        Ok(LossyRelay { inner: std::sync::Mutex::new(relay), address })
    }

    /// The address publications should send to (`host:port`).
    #[getter]
    fn address(&self) -> String {
        self.address.clone()
    }

    /// Datagram counts: received, dropped, duplicated, reordered.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let relay = crate::driver::lock(&self.inner);
        let stats = relay.stats();
        let dict = PyDict::new(py);
        dict.set_item("received", stats.received.load(Ordering::Relaxed))?;
        dict.set_item("dropped", stats.dropped.load(Ordering::Relaxed))?;
        dict.set_item("duplicated", stats.duplicated.load(Ordering::Relaxed))?;
        dict.set_item("reordered", stats.reordered.load(Ordering::Relaxed))?;
        Ok(dict)
    }

    /// Stops the relay.
    fn close(&self, py: Python<'_>) {
        py.detach(|| crate::driver::lock(&self.inner).stop());
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Client>()?;
    module.add_class::<Publication>()?;
    module.add_class::<Subscription>()?;
    module.add_class::<Header>()?;
    module.add_class::<LossyRelay>()?;
    module.add("NOT_CONNECTED", NOT_CONNECTED)?;
    module.add("BACK_PRESSURED", BACK_PRESSURED)?;
    module.add("ADMIN_ACTION", ADMIN_ACTION)?;
    module.add("CLOSED", CLOSED)?;
    module.add("MAX_POSITION_EXCEEDED", MAX_POSITION_EXCEEDED)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
