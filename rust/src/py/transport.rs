//! Bindings for the transport: `Client`, `Publication`, `Subscription`, `Header`, `LossyRelay`.
//!
//! Conversion and GIL release only: every decision is made in `crate::client`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyResourceWarning;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString};

use super::args::{
    callable_argument, expected, float_argument, instance_argument, int_argument, int_in, named, path_argument,
    seconds, str_argument, Item,
};
use super::buffers::{arrow_binary, is_arrow, with_bytes};
use super::errors::{self, invalid_argument, transport_error, wrong_type};
use super::records::{DriverCounters, DriverEventInfo, ImageInfo, PublicationCounters, RelayStats};
use crate::client::{
    check_channel as check_channel_uri, ClientApi, ClientHandle, MessageBatch, MessageHeader, PublicationHandle,
    SubscriptionHandle,
};
use crate::driver::context::{setting_kind, setting_names, SettingKind};
use crate::embedded::{self, EmbeddedConfig};
use crate::error::Error;
use crate::media::relay::{Impairment, LossyRelay as RustRelay};
use crate::protocol::OfferError;
use crate::shm::directory;
use crate::shm::log_buffer::Unsent;

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

/// Messages `offer_batch` appends between checks for Ctrl-C when it takes them one by one.
const SIGNAL_CHECK_INTERVAL: usize = 1024;

/// How long `wait_connected` / `wait_image` sleep (without the GIL) between two looks at the
/// driver's state: short next to a connection's setup, long enough not to spin a core.
const WAIT_CHECK_INTERVAL: Duration = Duration::from_millis(1);

/// How often `wait_connected` / `wait_image` take the GIL back to check for Ctrl-C.
const WAIT_SIGNAL_INTERVAL: Duration = Duration::from_millis(50);

/// Waits until `ready()` is true (returns `True`) or `timeout` has passed (returns `False`),
/// without the GIL, checking for Ctrl-C every [`WAIT_SIGNAL_INTERVAL`]. `ready` runs at least
/// once, so a zero timeout is a plain check; an error it returns is raised.
fn wait_until(
    py: Python<'_>,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<bool, Error> + Send,
) -> PyResult<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let slice_end = deadline.min(Instant::now() + WAIT_SIGNAL_INTERVAL);
        let outcome = py.detach(|| loop {
            if ready()? {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= slice_end {
                return Ok(false);
            }
            std::thread::sleep(WAIT_CHECK_INTERVAL.min(slice_end - now));
        });
        if outcome.map_err(transport_error)? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        py.check_signals()?;
    }
}

fn offer_code(result: Result<i64, OfferError>) -> PyResult<i64> {
    match result {
        Ok(position) => Ok(position),
        Err(error) => match errors::offer_error(error) {
            Some(exception) => Err(exception),
            None => Ok(error.code()),
        },
    }
}

fn setting_error(message: String) -> PyErr {
    transport_error(Error::Setting(message))
}

/// A driver setting's value as the text [`DriverContext::apply`] reads: a `str` as it is, an
/// `int` in decimal (any size: the range check names it), a `bool` for an on/off setting. Any
/// other type raises `ArgumentTypeError` naming the setting; an unknown name too, as Python
/// does for an unexpected keyword.
fn setting_value(name: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    let Some(kind) = setting_kind(name) else {
        return Err(wrong_type(format!(
            "Client() got an unexpected keyword argument {name:?} (settings: {})",
            setting_names().join(", ")
        )));
    };
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_string_lossy().into_owned());
    }
    let numeric = matches!(kind, SettingKind::Size | SettingKind::Duration | SettingKind::Count | SettingKind::Cpu);
    if value.is_instance_of::<PyBool>() {
        if kind == SettingKind::Switch {
            return Ok(if value.is_truthy()? { "on" } else { "off" }.to_owned());
        }
    } else if numeric && value.is_instance_of::<PyInt>() {
        return Ok(value.to_string());
    }
    let wanted = match kind {
        SettingKind::Switch => "a bool or a str",
        _ if numeric => "an int or a str",
        _ => "a str",
    };
    Err(expected(name, wanted, value))
}

fn stream_id_argument(value: &Bound<'_, PyAny>) -> PyResult<i32> {
    int_in("stream_id", value, i32::MIN, i32::MAX)
}

/// Most fragments one poll may take (bounds the memory a poll allocates).
const MAX_FRAGMENT_LIMIT: i128 = 1 << 24;

fn fragment_limit_argument(value: Option<&Bound<'_, PyAny>>, default: usize) -> PyResult<usize> {
    match value {
        Some(value) => {
            let limit = int_argument("fragment_limit", value, 1, MAX_FRAGMENT_LIMIT)?;
            usize::try_from(limit).map_err(|_| invalid_argument(format!("fragment_limit={limit}: out of range")))
        }
        None => Ok(default),
    }
}

/// Warns with `ResourceWarning` that a handle is being collected without `close()`.
fn warn_unclosed(py: Python<'_>, message: &std::ffi::CStr) {
    let category = py.get_type::<PyResourceWarning>();
    if let Err(error) = PyErr::warn(py, &category, message, 1) {
        // `filterwarnings = error` turns the warning into an exception, which a destructor
        // cannot raise: report it the way Python reports errors in `__del__`.
        error.write_unraisable(py, None);
    }
}

/// A connection to a media driver: embedded (the default) or standalone (`dir=`).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct Client {
    inner: std::sync::Arc<ClientHandle>,
}

impl Client {
    /// The `client` argument of a group member, subject peer or router.
    pub(crate) fn argument<'a, 'py>(value: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, Client>> {
        instance_argument("client", value, "an affinity.Client")
    }

    /// The client, shared with the group members and subject peers created from it (either
    /// driver: they use only [`ClientApi`]).
    pub(crate) fn shared(&self) -> PyResult<std::sync::Arc<dyn ClientApi>> {
        if self.inner.is_closed() {
            return Err(transport_error(Error::Closed("client")));
        }
        Ok(self.inner.clone())
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (*, dir=None, driver_timeout_ms=None, yield_when_idle=true, **settings))]
    fn new(
        py: Python<'_>,
        dir: Option<&Bound<'_, PyAny>>,
        driver_timeout_ms: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::yield_when_idle)] yield_when_idle: bool,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let dir = dir.map(|value| path_argument("dir", value)).transpose()?;
        let driver_timeout_ms =
            driver_timeout_ms.map(|value| int_in::<u32>("driver_timeout_ms", value, 1, u32::MAX)).transpose()?;
        // Every setting as text (a wrong type is reported as such first, whichever driver it is
        // for); `None` leaves a setting at its default.
        let mut texts = Vec::new();
        for (key, value) in settings.into_iter().flat_map(|settings| settings.iter()) {
            let name = key.str()?.to_string_lossy().into_owned();
            if value.is_none() && setting_kind(&name).is_some() {
                continue;
            }
            texts.push((name.clone(), setting_value(&name, &value)?));
        }
        let dir = dir.or_else(|| std::env::var_os(directory::ENV_DIR).filter(|v| !v.is_empty()).map(Into::into));
        if let Some(dir) = dir {
            if let Some((name, _)) = texts.first() {
                return Err(setting_error(format!(
                    "{name} configures the embedded driver; a client attached to the standalone driver in {} \
                     uses that driver's settings (affinity driver --help)",
                    dir.display()
                )));
            }
            let timeout_ms = driver_timeout_ms.map_or(directory::DRIVER_TIMEOUT_MS as u64, u64::from);
            let timeout = std::time::Duration::from_millis(timeout_ms);
            let inner = py.detach(|| ClientHandle::attach(&dir, timeout)).map_err(transport_error)?;
            return Ok(Client { inner: std::sync::Arc::new(inner) });
        }
        if driver_timeout_ms.is_some() {
            return Err(setting_error(
                "driver_timeout_ms applies to a client attached to a standalone driver (dir= or $AFFINITY_DIR)".into(),
            ));
        }
        let mut config = EmbeddedConfig { yields_when_idle: yield_when_idle, ..EmbeddedConfig::default() };
        for (name, text) in &texts {
            config.driver.apply(name, text).map_err(transport_error)?;
        }
        config.driver.validate().map_err(transport_error)?;
        let inner = py.detach(|| embedded::start(config)).map_err(transport_error)?;
        Ok(Client { inner: std::sync::Arc::new(ClientHandle::from(inner)) })
    }

    /// Creates a publication.
    fn add_publication(
        &self,
        py: Python<'_>,
        channel: &Bound<'_, PyAny>,
        stream_id: &Bound<'_, PyAny>,
    ) -> PyResult<Publication> {
        let channel = str_argument("channel", channel)?;
        let stream_id = stream_id_argument(stream_id)?;
        let interrupt = || Python::attach(|py| py.check_signals());
        let inner =
            py.detach(|| self.inner.add_publication_with(channel, stream_id, interrupt))?.map_err(transport_error)?;
        Ok(Publication { inner })
    }

    /// Creates a subscription.
    fn add_subscription(
        &self,
        py: Python<'_>,
        channel: &Bound<'_, PyAny>,
        stream_id: &Bound<'_, PyAny>,
    ) -> PyResult<Subscription> {
        let channel = str_argument("channel", channel)?;
        let stream_id = stream_id_argument(stream_id)?;
        let interrupt = || Python::attach(|py| py.check_signals());
        let inner =
            py.detach(|| self.inner.add_subscription_with(channel, stream_id, interrupt))?.map_err(transport_error)?;
        Ok(Subscription { inner })
    }

    /// Driver events since the last call (receivers joining or leaving a flow-control group,
    /// connection changes, error frames), oldest first. Each is also logged on the Python
    /// logger `affinity.driver` (INFO, WARNING for error frames).
    fn events(&self, py: Python<'_>) -> PyResult<Vec<DriverEventInfo>> {
        let client = self.inner.client();
        let events = py.detach(|| client.drain_events()).map_err(transport_error)?;
        let logger = py.import("logging")?.call_method1("getLogger", ("affinity.driver",))?;
        let mut records = Vec::with_capacity(events.len());
        for event in events {
            let level = if event.level == "WARN" { 30 } else { 20 };
            let line = event.message.split_once(' ').map(|(_, rest)| rest).unwrap_or(&event.message);
            logger.call_method1("log", (level, line))?;
            records.push(DriverEventInfo::from(event));
        }
        Ok(records)
    }

    /// Driver-wide counters: malformed datagrams dropped (and only those), duplicate, overrun
    /// and inactive-image datagrams, refused SETUPs and images, images that ended with data
    /// missing, send errors, events lost.
    fn counters(&self, py: Python<'_>) -> PyResult<DriverCounters> {
        let client = self.inner.client();
        py.detach(|| client.system_counters()).map(DriverCounters::from).map_err(transport_error)
    }

    /// One driver duty cycle (invoker threading) unless another thread is running one;
    /// returns the work done.
    fn do_work(&self, py: Python<'_>) -> PyResult<usize> {
        let client = self.inner.client();
        py.detach(|| client.do_work()).map_err(transport_error)
    }

    /// Waits at most `timeout` seconds for received data: with an embedded threaded driver,
    /// until its receiver has written datagrams into any subscription's log (poll to see whether
    /// some are yours); otherwise it sleeps `timeout`. What an idle polling thread calls instead
    /// of sleeping. The GIL is released meanwhile.
    fn wait_for_data(&self, py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<()> {
        let timeout = seconds("timeout", float_argument("timeout", timeout)?)?;
        let client = self.inner.client();
        py.detach(|| client.wait_for_data(timeout));
        Ok(())
    }

    /// The threading mode of the embedded driver (`shared`, `shared-network`, `dedicated`,
    /// `invoker`), or `standalone` for a client attached to a standalone driver.
    #[getter]
    fn threading(&self) -> &'static str {
        self.inner.client().threading()
    }

    /// Whether the client was closed.
    #[getter]
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Closes every publication and subscription and stops the embedded driver, which first
    /// sends what its publications hold for at most `timeout` seconds (default: the driver's
    /// 2 s). Returns whether everything was sent; when not, warns with `DataLossWarning`
    /// giving the messages and bytes dropped. A standalone driver keeps serving the
    /// publications after the client has gone: `True`.
    #[pyo3(signature = (timeout=None))]
    fn close(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let drain = timeout.map(|value| seconds("timeout", float_argument("timeout", value)?)).transpose()?;
        let unsent = py.detach(|| self.inner.close_within(drain));
        warn_data_loss(py, unsent)?;
        Ok(unsent.is_empty())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py, None)?;
        Ok(false)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.inner.is_closed() {
            return;
        }
        Python::attach(|py| {
            warn_unclosed(py, c"affinity.Client collected without close(): use `with Client() as client:`");
            // Stopping the driver drains publications (up to 2 s): never with the GIL held.
            let unsent = py.detach(|| self.inner.close_within(None));
            if let Err(error) = warn_data_loss(py, unsent) {
                error.write_unraisable(py, None);
            }
        });
    }
}

/// Warns with `DataLossWarning` when closing left data unsent (dropped with the driver).
fn warn_data_loss(py: Python<'_>, unsent: Unsent) -> PyResult<()> {
    if unsent.is_empty() {
        return Ok(());
    }
    let message = format!(
        "affinity.Client.close(): the embedded driver stopped with {} messages ({} bytes) not sent; they are \
         dropped (a receiver held the publication back; give close() a longer timeout to wait for it)",
        unsent.messages, unsent.bytes
    );
    let message = std::ffi::CString::new(message).map_err(|e| invalid_argument(e.to_string()))?;
    PyErr::warn(py, &py.get_type::<errors::DataLossWarning>(), &message, 1)
}

/// Sends messages on one channel and stream.
#[pyclass(module = "affinity._affinity", frozen)]
pub struct Publication {
    inner: PublicationHandle,
}

#[pymethods]
impl Publication {
    /// Appends one message; returns the new position (> 0) or a negative outcome code.
    fn offer(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<i64> {
        let result =
            with_bytes(data, "data", |bytes| py.detach(|| self.inner.offer(bytes)))?.map_err(transport_error)?;
        offer_code(result)
    }

    /// Appends messages (a sequence of bytes-like objects, or a pyarrow binary/large_binary
    /// array) until one is refused; returns how many were taken.
    fn offer_batch(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<usize> {
        if is_arrow(messages)? {
            return self.offer_arrow(py, messages).map_err(|error| {
                if errors::is_affinity_error(py, &error) {
                    error
                } else {
                    invalid_argument(format!("offer_batch: unusable pyarrow array: {error}"))
                }
            });
        }
        let (taken, refusal) = if let Ok(list) = messages.cast::<PyList>() {
            let items: Vec<Bound<'_, PyAny>> = list.iter().collect();
            let mut slices: Vec<&[u8]> = Vec::with_capacity(items.len());
            for item in &items {
                if let Ok(bytes) = item.cast::<PyBytes>() {
                    slices.push(bytes.as_bytes());
                } else {
                    return self.offer_each(py, messages);
                }
            }
            py.detach(|| self.inner.offer_batch(slices)).map_err(transport_error)?
        } else {
            return self.offer_each(py, messages);
        };
        refused(refusal)?;
        Ok(taken)
    }

    /// Whether enough receivers are connected.
    #[getter]
    fn is_connected(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| self.inner.is_connected()).map_err(transport_error)
    }

    /// Waits up to `timeout` seconds (default 5) for enough receivers to connect; returns
    /// whether they did. Sleeps without the GIL between checks; Ctrl-C interrupts the wait.
    /// A closed publication raises `ClosedError`.
    #[pyo3(signature = (timeout=5.0))]
    fn wait_connected(&self, py: Python<'_>, #[pyo3(from_py_with = named::timeout)] timeout: f64) -> PyResult<bool> {
        let timeout = seconds("timeout", timeout)?;
        let inner = &self.inner;
        wait_until(py, timeout, || {
            if inner.is_closed() {
                return Err(Error::Closed("publication"));
            }
            inner.is_connected()
        })
    }

    /// Whether the publication (or its client) was closed.
    #[getter]
    fn is_closed(&self, py: Python<'_>) -> bool {
        py.detach(|| self.inner.is_closed())
    }

    /// The end of the last appended message.
    #[getter]
    fn position(&self, py: Python<'_>) -> PyResult<i64> {
        py.detach(|| self.inner.position()).map_err(transport_error)
    }

    /// The publication's session id.
    #[getter]
    fn session_id(&self, py: Python<'_>) -> PyResult<i32> {
        py.detach(|| self.inner.session_id()).map_err(transport_error)
    }

    /// The stream id.
    #[getter]
    fn stream_id(&self, py: Python<'_>) -> i32 {
        py.detach(|| self.inner.stream_id())
    }

    /// The channel URI.
    #[getter]
    fn channel(&self) -> String {
        self.inner.channel()
    }

    /// The largest message `offer` accepts.
    #[getter]
    fn max_message_length(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.inner.max_message_length()).map_err(transport_error)
    }

    /// Counters: positions, limit, strategy, receivers, connected flag, traffic counts.
    fn counters(&self, py: Python<'_>) -> PyResult<PublicationCounters> {
        py.detach(|| self.inner.status()).map(PublicationCounters::from).map_err(transport_error)
    }

    /// Closes the publication; appended data is still delivered.
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

impl Drop for Publication {
    fn drop(&mut self) {
        if self.inner.is_closed() {
            return;
        }
        Python::attach(|py| {
            warn_unclosed(py, c"affinity.Publication collected without close(): its data still drains, then it ends");
            py.detach(|| self.inner.close());
        });
    }
}

/// Raises for a refusal that is misuse (a message too long); other refusals end the batch.
fn refused(refusal: Option<OfferError>) -> PyResult<()> {
    match refusal.and_then(errors::offer_error) {
        Some(exception) => Err(exception),
        None => Ok(()),
    }
}

impl Publication {
    fn offer_each(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<usize> {
        const WHAT: &str = "a sequence of bytes-like objects or a pyarrow binary array";
        if messages.is_instance_of::<PyString>() || messages.is_instance_of::<PyBytes>() {
            return Err(expected("messages", WHAT, messages));
        }
        let mut taken = 0;
        for (index, item) in messages.try_iter().map_err(|_| expected("messages", WHAT, messages))?.enumerate() {
            let name = Item::new(&"messages", index);
            let result =
                with_bytes(&item?, name, |bytes| py.detach(|| self.inner.offer(bytes)))?.map_err(transport_error)?;
            let code = offer_code(result)?;
            if code < 0 {
                break;
            }
            taken += 1;
            if taken % SIGNAL_CHECK_INTERVAL == 0 {
                py.check_signals()?;
            }
        }
        Ok(taken)
    }

    fn offer_arrow(&self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<usize> {
        let array = arrow_binary(array, true, "offer_batch")?;
        let (taken, refusal) = py.detach(|| self.inner.offer_batch(array.slices())).map_err(transport_error)?;
        refused(refusal)?;
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
    inner: SubscriptionHandle,
}

impl Subscription {
    fn poll_messages(&self, py: Python<'_>, fragment_limit: usize) -> PyResult<(MessageBatch, usize)> {
        let mut batch = MessageBatch::default();
        let fragments = py.detach(|| self.inner.poll_into(&mut batch, fragment_limit)).map_err(transport_error)?;
        Ok((batch, fragments))
    }
}

#[pymethods]
impl Subscription {
    /// Calls `handler(data, header)` for each whole message within `fragment_limit` fragments;
    /// returns the number of fragments consumed.
    #[pyo3(signature = (handler, fragment_limit=None))]
    fn poll(
        &self,
        py: Python<'_>,
        handler: &Bound<'_, PyAny>,
        fragment_limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        callable_argument("handler", handler)?;
        let fragment_limit = fragment_limit_argument(fragment_limit, 10)?;
        let (batch, fragments) = self.poll_messages(py, fragment_limit)?;
        for index in 0..batch.len() {
            let header = Bound::new(py, Header::from(&batch.headers[index]))?;
            handler.call1((PyBytes::new(py, batch.message(index)), header))?;
        }
        Ok(fragments)
    }

    /// Whole messages within `fragment_limit` fragments, as `list[bytes]`, or as a
    /// `pyarrow.LargeBinaryArray` with `as_arrow=True`.
    #[pyo3(signature = (fragment_limit=None, *, as_arrow=false))]
    fn poll_batch<'py>(
        &self,
        py: Python<'py>,
        fragment_limit: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::as_arrow)] as_arrow: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let fragment_limit = fragment_limit_argument(fragment_limit, 1000)?;
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
    fn is_connected(&self, py: Python<'_>) -> PyResult<bool> {
        py.detach(|| self.inner.is_connected()).map_err(transport_error)
    }

    /// Waits up to `timeout` seconds (default 5) until a publication's image is connected;
    /// returns whether one is. Sleeps without the GIL between checks; Ctrl-C interrupts the
    /// wait. A closed subscription raises `ClosedError`.
    #[pyo3(signature = (timeout=5.0))]
    fn wait_image(&self, py: Python<'_>, #[pyo3(from_py_with = named::timeout)] timeout: f64) -> PyResult<bool> {
        let timeout = seconds("timeout", timeout)?;
        let inner = &self.inner;
        wait_until(py, timeout, || {
            if inner.is_closed() {
                return Err(Error::Closed("subscription"));
            }
            inner.is_connected()
        })
    }

    /// Whether the subscription (or its client) was closed.
    #[getter]
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The channel URI.
    #[getter]
    fn channel(&self) -> String {
        self.inner.channel()
    }

    /// The stream id.
    #[getter]
    fn stream_id(&self) -> i32 {
        self.inner.stream_id()
    }

    /// One record per image: positions, loss and NAK counters.
    fn images(&self, py: Python<'_>) -> PyResult<Vec<ImageInfo>> {
        let images = py.detach(|| self.inner.images()).map_err(transport_error)?;
        Ok(images.into_iter().map(ImageInfo::from).collect())
    }

    /// Stops receiving.
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

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.inner.is_closed() {
            return;
        }
        Python::attach(|py| {
            warn_unclosed(py, c"affinity.Subscription collected without close(): it stopped receiving");
            py.detach(|| self.inner.close());
        });
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
    fn new(
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = named::loss)] loss: f64,
        #[pyo3(from_py_with = named::duplicate)] duplicate: f64,
        #[pyo3(from_py_with = named::reorder)] reorder: f64,
        #[pyo3(from_py_with = named::seed)] seed: u64,
    ) -> PyResult<Self> {
        let target = str_argument("target", target)?;
        let target: SocketAddr = target.parse().map_err(|e| invalid_argument(format!("target {target:?}: {e}")))?;
        for (name, value) in [("loss", loss), ("duplicate", duplicate), ("reorder", reorder)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(invalid_argument(format!("{name}={value}: must be a probability in [0, 1]")));
            }
        }
        let front = SocketAddr::new(target.ip(), 0);
        let relay = py
            .detach(|| RustRelay::start(front, target, Impairment { loss, duplicate, reorder }, seed))
            .map_err(|source| transport_error(Error::Os { context: format!("relay to {target}"), source }))?;
        let address = relay.front_address().to_string();
        Ok(LossyRelay { inner: std::sync::Mutex::new(relay), address })
    }

    /// The address publications should send to (`host:port`).
    #[getter]
    fn address(&self) -> String {
        self.address.clone()
    }

    /// Datagram counts: received, dropped, duplicated, reordered.
    fn stats(&self) -> PyResult<RelayStats> {
        Ok(RelayStats::from(self.relay()?.stats()))
    }

    /// Stops the relay.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.relay().map(|mut relay| relay.stop()))
    }
}

impl LossyRelay {
    /// The relay; a poisoned lock (a thread panicked holding it: a bug) is an error, not hidden.
    fn relay(&self) -> PyResult<std::sync::MutexGuard<'_, RustRelay>> {
        self.inner.lock().map_err(|_| transport_error(Error::Driver("a thread panicked holding the relay lock".into())))
    }
}

/// Checks that `channel` is a well-formed channel URI without a driver (`ChannelUriError`
/// naming the key and value otherwise): the Spark data source checks its options with it on the
/// driver, before any task runs.
#[pyfunction]
fn check_channel(channel: &Bound<'_, PyAny>) -> PyResult<()> {
    check_channel_uri(str_argument("channel", channel)?).map_err(transport_error)
}

/// A UDP port no socket of this host used when probed and that this process has not handed out
/// before (`crate::media::ports`, the allocator the Rust tests use too); `AffinityOSError`
/// (`EADDRINUSE`) once the range is used up.
#[pyfunction]
fn free_udp_port() -> PyResult<u16> {
    crate::media::ports::free_udp_port().map_err(|exhausted| {
        let source = std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        transport_error(Error::Os { context: exhausted.to_string(), source })
    })
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(check_channel, module)?)?;
    module.add_function(wrap_pyfunction!(free_udp_port, module)?)?;
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
