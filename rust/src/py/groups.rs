//! Bindings for consumer groups: `GroupPublisherCore`, `GroupConsumerCore`,
//! `GroupObserverCore`, `GroupMessage`, the status classes and the hash helpers.
//!
//! Conversion, GIL release and error mapping only: every decision is made in
//! `crate::groups`. Keys and payloads come as lists (bytes, str for keys, or any contiguous
//! buffer) or pyarrow binary/large_binary/string/large_string arrays whose offsets are checked
//! in full (non-negative, monotonic, within the data buffer) before any slice is taken.

use super::settings::{
    GROUP_BOOTSTRAP_TIMEOUT_MS, GROUP_CYCLE_MS, GROUP_HEARTBEAT_INTERVAL_MS, GROUP_LIVENESS_TIMEOUT_MS,
    GROUP_RESEND_TIMEOUT_MS,
};
use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use super::args::{expected, instance_argument, int_in, named, optional_str, seconds, str_argument};
use super::buffers::{arrow_binary, is_arrow, ArrowBinary, BufferView};
use super::errors::{config_error, group_error, invalid_argument, wrong_type};
use super::transport::Client;
use crate::control::GroupSecret;
use crate::control::Timing;
use crate::groups::bootstrap::parse_bootstrap_list;
use crate::groups::consumer::{DeliveryBatch, DeliveryRef};
use crate::groups::runtime::{self, MemberOptions};
use crate::groups::{self as core_groups, GroupConfig};

/// The longest a single GIL-free wait lasts before signals (Ctrl-C) are checked.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// A count argument (`hash_count`, `queue_count`, `index`, `count`, `queue`).
fn count_argument(name: &str, value: &Bound<'_, PyAny>) -> PyResult<u32> {
    int_in(name, value, 0, u32::MAX)
}

fn duration_ms(name: &str, value: u64) -> PyResult<Duration> {
    if value == 0 {
        return Err(config_error(format!("{name}={value}: must be positive")));
    }
    Ok(Duration::from_millis(value))
}

/// One Python object whose bytes are borrowed.
enum Held<'py> {
    Bytes(Bound<'py, PyBytes>),
    Str(Bound<'py, PyString>),
    Buffer(BufferView),
}

impl<'py> Held<'py> {
    fn new(object: Bound<'py, PyAny>, allow_str: bool, what: &str) -> PyResult<Held<'py>> {
        if let Ok(bytes) = object.cast::<PyBytes>() {
            return Ok(Held::Bytes(bytes.clone()));
        }
        if let Ok(text) = object.cast::<PyString>() {
            if allow_str {
                text.to_str().map_err(|error| invalid_argument(format!("{what}: {error}")))?;
                return Ok(Held::Str(text.clone()));
            }
            return Err(expected(what, "bytes", &object));
        }
        Ok(Held::Buffer(BufferView::new(&object, what)?))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Held::Bytes(bytes) => bytes.as_bytes(),
            Held::Str(text) => text.to_str().map(str::as_bytes).unwrap_or(b""),
            Held::Buffer(view) => view.as_slice(),
        }
    }
}

/// A column of byte strings: Python items, or a checked pyarrow array.
enum Column<'py> {
    Items(Vec<Held<'py>>),
    Arrow(ArrowBinary),
}

impl Column<'_> {
    fn len(&self) -> usize {
        match self {
            Column::Items(items) => items.len(),
            Column::Arrow(array) => array.len(),
        }
    }

    fn slices(&self) -> Vec<&[u8]> {
        match self {
            Column::Items(items) => items.iter().map(Held::bytes).collect(),
            Column::Arrow(array) => array.slices().collect(),
        }
    }
}

fn column<'py>(object: &Bound<'py, PyAny>, allow_str: bool, what: &str) -> PyResult<Column<'py>> {
    if is_arrow(object)? {
        return arrow_binary(object, allow_str, what).map(Column::Arrow);
    }
    if object.cast::<PyBytes>().is_ok() || object.cast::<PyString>().is_ok() {
        return Err(wrong_type(format!("{what}: expected a sequence of items, got a single bytes/str")));
    }
    let mut items = Vec::new();
    if let Ok(list) = object.cast::<PyList>() {
        items.reserve(list.len());
        for item in list.iter() {
            items.push(Held::new(item, allow_str, what)?);
        }
    } else {
        let iterator =
            object.try_iter().map_err(|_| expected(what, "a sequence of items or a pyarrow binary array", object))?;
        for item in iterator {
            items.push(Held::new(item?, allow_str, what)?);
        }
    }
    Ok(Column::Items(items))
}

fn key_held<'py>(key: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
    Held::new(key.clone(), true, "key")
}

/// `hash_count` and `queue_count`, converted and checked.
fn counts(hash_count: &Bound<'_, PyAny>, queue_count: &Bound<'_, PyAny>) -> PyResult<(u32, u32)> {
    let hash_count = count_argument("hash_count", hash_count)?;
    let queue_count = count_argument("queue_count", queue_count)?;
    core_groups::check_counts(hash_count, queue_count).map_err(group_error)?;
    Ok((hash_count, queue_count))
}

/// `affinity_hash(key) % hash_count`.
#[pyfunction]
fn group_bucket(key: &Bound<'_, PyAny>, hash_count: &Bound<'_, PyAny>) -> PyResult<u32> {
    let hash_count = count_argument("hash_count", hash_count)?;
    if hash_count < 1 {
        return Err(config_error(format!("hash_count={hash_count}: must be at least 1")));
    }
    let held = key_held(key)?;
    Ok(core_groups::bucket_of(held.bytes(), hash_count))
}

/// `group_bucket(key, hash_count) % queue_count`.
#[pyfunction]
fn group_queue(key: &Bound<'_, PyAny>, hash_count: &Bound<'_, PyAny>, queue_count: &Bound<'_, PyAny>) -> PyResult<u32> {
    let (hash_count, queue_count) = counts(hash_count, queue_count)?;
    let held = key_held(key)?;
    Ok(core_groups::queue_of(held.bytes(), hash_count, queue_count))
}

/// The queue of every key (a sequence of bytes/str or a pyarrow array).
#[pyfunction]
fn group_queues(
    py: Python<'_>,
    keys: &Bound<'_, PyAny>,
    hash_count: &Bound<'_, PyAny>,
    queue_count: &Bound<'_, PyAny>,
) -> PyResult<Vec<u32>> {
    let (hash_count, queue_count) = counts(hash_count, queue_count)?;
    let column = column(keys, true, "keys")?;
    let slices = column.slices();
    Ok(py.detach(|| slices.iter().map(|key| core_groups::queue_of(key, hash_count, queue_count)).collect()))
}

/// The group definition arguments every member constructor takes, converted and checked.
fn definition(
    group: &Bound<'_, PyAny>,
    hash_prefix: &Bound<'_, PyAny>,
    hash_count: &Bound<'_, PyAny>,
    queue_count: &Bound<'_, PyAny>,
    queue_size: &Bound<'_, PyAny>,
) -> PyResult<GroupConfig> {
    let group = str_argument("group", group)?;
    let hash_prefix = str_argument("hash_prefix", hash_prefix)?;
    let hash_count = count_argument("hash_count", hash_count)?;
    let queue_count = count_argument("queue_count", queue_count)?;
    let queue_size = int_in("queue_size", queue_size, 0, u64::MAX)?;
    GroupConfig::new(group, hash_prefix, hash_count, queue_count, queue_size).map_err(group_error)
}

/// The member options every member constructor takes, converted and checked.
#[allow(clippy::too_many_arguments)]
fn options(
    registry_dir: &Bound<'_, PyAny>,
    name: Option<&Bound<'_, PyAny>>,
    host: &str,
    control: Option<&Bound<'_, PyAny>>,
    secret: Option<&Bound<'_, PyAny>>,
    liveness_timeout_ms: u64,
    heartbeat_interval_ms: u64,
    found: &Discovery<'_, '_>,
) -> PyResult<MemberOptions> {
    let registry_dir = str_argument("registry_dir", registry_dir)?;
    if registry_dir.is_empty() {
        return Err(config_error("registry_dir: must not be empty"));
    }
    let name = optional_str("name", name)?.map(str::to_owned);
    let control = optional_str("control", control)?.map(str::to_owned);
    let timing = Timing::new(
        duration_ms("heartbeat_interval_ms", heartbeat_interval_ms)?,
        duration_ms("liveness_timeout_ms", liveness_timeout_ms)?,
    )
    .map_err(|e| group_error(e.into()))?;
    let secret = secret_option(secret)?;
    let mut options = MemberOptions::new(PathBuf::from(registry_dir));
    options.name = name;
    options.host = host.to_owned();
    options.control = control;
    options.timing = timing;
    options.secret = secret;
    options.listen = optional_str("listen", found.listen)?.map(str::to_owned);
    options.bootstrap = bootstrap_list(found.bootstrap)?;
    options.bootstrap_timeout = duration_ms("bootstrap_timeout_ms", found.bootstrap_timeout_ms)?;
    Ok(options)
}

/// The `secret` argument: `None` or the group secret's bytes.
fn secret_option(secret: Option<&Bound<'_, PyAny>>) -> PyResult<Option<GroupSecret>> {
    match secret.filter(|s| !s.is_none()) {
        None => Ok(None),
        Some(object) => {
            let bytes =
                object.cast::<PyBytes>().map_err(|_| wrong_type("secret: expected bytes (the group secret)"))?;
            Ok(Some(GroupSecret::new(bytes.as_bytes()).map_err(|e| config_error(format!("secret: {e}")))?))
        }
    }
}

/// How a member finds its group across hosts: `listen`, `bootstrap` and its timeout.
struct Discovery<'a, 'py> {
    listen: Option<&'a Bound<'py, PyAny>>,
    bootstrap: Option<&'a Bound<'py, PyAny>>,
    bootstrap_timeout_ms: u64,
}

/// The `bootstrap` argument: `None`, or `"host:port,host:port"`.
fn bootstrap_list(bootstrap: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<std::net::SocketAddr>> {
    match optional_str("bootstrap", bootstrap)? {
        None => Ok(Vec::new()),
        Some(text) => parse_bootstrap_list(text).map_err(group_error),
    }
}

/// Asks the members at `bootstrap` (`"host:port,..."`) for group `group`'s definition: the
/// first answer's `(name, hash_prefix, hash_count, queue_count, queue_size)`. Fails after
/// `timeout_ms` naming every address asked, or at once when the answer is invalid.
///
/// `held`: the definition the caller holds already (its registry's, as the same tuple). An
/// answer holding another definition is refused at once, naming both fingerprints; no answer
/// within `timeout_ms` returns `None` (the caller is the group's first member, as a member
/// holding a definition starts so).
#[pyfunction]
#[pyo3(signature = (client, group, bootstrap, *, host="127.0.0.1", secret=None, timeout_ms=GROUP_BOOTSTRAP_TIMEOUT_MS, held=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn group_bootstrap(
    py: Python<'_>,
    client: &Bound<'_, PyAny>,
    group: &Bound<'_, PyAny>,
    bootstrap: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = named::host)] host: &str,
    secret: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = named::timeout_ms)] timeout_ms: u64,
    held: Option<(String, String, u32, u32, u64)>,
) -> PyResult<Option<(String, String, u32, u32, u64)>> {
    let client = Client::argument(client)?;
    let group = str_argument("group", group)?.to_owned();
    let addresses = bootstrap_list(Some(bootstrap))?;
    if addresses.is_empty() {
        return Err(config_error("bootstrap: expected host:port,host:port,..."));
    }
    let held = match held {
        None => None,
        Some((name, hash_prefix, hash_count, queue_count, queue_size)) => {
            if name != group {
                return Err(config_error(format!("held: a definition of group {name:?}, not of {group:?}")));
            }
            Some(
                GroupConfig::new(&name, &hash_prefix, hash_count, queue_count, queue_size)
                    .map_err(|e| config_error(format!("held: {e}")))?,
            )
        }
    };
    // No registry: the answer is the definition.
    let mut options = MemberOptions::new(PathBuf::new());
    options.host = host.to_owned();
    options.secret = secret_option(secret)?;
    let timeout = duration_ms("timeout_ms", timeout_ms)?;
    let client = client.get().shared()?;
    let learned =
        py.detach(|| runtime::bootstrap::fetch(&*client, &group, held.as_ref(), &addresses, &options, timeout));
    let config = match learned {
        Ok(learned) => learned.config,
        Err(core_groups::GroupError::Definition(message))
            if held.is_some() && message.contains(runtime::bootstrap::NO_ANSWER) =>
        {
            return Ok(None)
        }
        Err(error) => return Err(group_error(error)),
    };
    Ok(Some((config.name, config.hash_prefix, config.hash_count, config.queue_count, config.queue_size)))
}

/// Runs `wait(limit)` without the GIL in slices of at most [`SIGNAL_CHECK_INTERVAL`],
/// checking for signals between slices, until it returns `Some` or `total` has passed.
fn wait_interruptibly<T: Send>(
    py: Python<'_>,
    total: Duration,
    mut wait: impl FnMut(Duration) -> Option<T> + Send,
) -> PyResult<Option<T>> {
    let deadline = std::time::Instant::now() + total;
    loop {
        let remaining = deadline.saturating_duration_since(std::time::Instant::now());
        let slice = remaining.min(SIGNAL_CHECK_INTERVAL);
        if let Some(value) = py.detach(|| wait(slice)) {
            return Ok(Some(value));
        }
        if remaining <= slice {
            return Ok(None);
        }
        py.check_signals()?;
    }
}

/// The columns of `GroupConsumerCore.poll_batch`, in order: name and pyarrow type.
pub(crate) const BATCH_COLUMNS: [(&str, &str); 8] = [
    ("key", "large_binary"),
    ("payload", "large_binary"),
    ("queue", "uint32"),
    ("bucket", "uint32"),
    ("producer", "uint64"),
    ("sequence", "uint64"),
    ("epoch", "uint64"),
    ("subject", "large_string"),
];

/// A `pyarrow.Buffer` over a new Python `bytes` of `length` bytes written by `fill`: the
/// column is written once, in place, with no intermediate buffer.
fn filled_buffer<'py>(
    pyarrow: &Bound<'py, PyModule>,
    length: usize,
    fill: impl FnOnce(&mut [u8]),
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = PyBytes::new_with(pyarrow.py(), length, |buffer| {
        fill(buffer);
        Ok(())
    })?;
    pyarrow.call_method1("py_buffer", (bytes,))
}

/// The offsets (little-endian `i64`, from 0) and the data of a variable-length column whose
/// value for each record is `part`.
fn binary_buffers<'py, 'a>(
    pyarrow: &Bound<'py, PyModule>,
    records: &[DeliveryRef<'a>],
    part: impl Fn(&DeliveryRef<'a>) -> &'a [u8],
) -> PyResult<[Option<Bound<'py, PyAny>>; 2]> {
    let total: usize = records.iter().map(|record| part(record).len()).sum();
    let offsets = filled_buffer(pyarrow, (records.len() + 1) * 8, |out| {
        let mut end = 0i64;
        for (slot, record) in out[8..].chunks_exact_mut(8).zip(records) {
            end += part(record).len() as i64;
            slot.copy_from_slice(&end.to_le_bytes());
        }
    })?;
    let data = filled_buffer(pyarrow, total, |out| {
        let mut at = 0;
        for record in records {
            let bytes = part(record);
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
    })?;
    Ok([Some(offsets), Some(data)])
}

/// The data buffer of a fixed-width column whose value for each record is `value`.
fn number_buffer<'py, const WIDTH: usize>(
    pyarrow: &Bound<'py, PyModule>,
    records: &[DeliveryRef<'_>],
    value: impl Fn(&DeliveryRef<'_>) -> [u8; WIDTH],
) -> PyResult<Bound<'py, PyAny>> {
    filled_buffer(pyarrow, records.len() * WIDTH, |out| {
        for (slot, record) in out.chunks_exact_mut(WIDTH).zip(records) {
            slot.copy_from_slice(&value(record));
        }
    })
}

/// A pyarrow array of `arrow_type` from its buffers (`None` where absent).
fn arrow_array<'py>(
    pyarrow: &Bound<'py, PyModule>,
    arrow_type: &str,
    length: usize,
    null_count: usize,
    buffers: Vec<Option<Bound<'py, PyAny>>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = pyarrow.py();
    let objects = buffers.into_iter().map(|buffer| buffer.unwrap_or_else(|| py.None().into_bound(py)));
    let data_type = pyarrow.call_method0(arrow_type)?;
    pyarrow.getattr("Array")?.call_method1("from_buffers", (data_type, length, PyList::new(py, objects)?, null_count))
}

/// The records of `batch` as a `pyarrow.RecordBatch` with the columns [`BATCH_COLUMNS`]; each
/// column is written once, straight into the Python buffer pyarrow takes.
fn record_batch<'py>(pyarrow: &Bound<'py, PyModule>, batch: &DeliveryBatch) -> PyResult<Bound<'py, PyAny>> {
    let records: Vec<DeliveryRef<'_>> = batch.iter().collect();
    let length = records.len();
    let mut columns = Vec::with_capacity(BATCH_COLUMNS.len());
    let [offsets, data] = binary_buffers(pyarrow, &records, |record| record.key)?;
    columns.push(arrow_array(pyarrow, "large_binary", length, 0, vec![None, offsets, data])?);
    let [offsets, data] = binary_buffers(pyarrow, &records, |record| record.payload)?;
    columns.push(arrow_array(pyarrow, "large_binary", length, 0, vec![None, offsets, data])?);
    let numbers = [
        number_buffer(pyarrow, &records, |r| r.queue.to_le_bytes())?,
        number_buffer(pyarrow, &records, |r| r.bucket.to_le_bytes())?,
        number_buffer(pyarrow, &records, |r| r.producer.to_le_bytes())?,
        number_buffer(pyarrow, &records, |r| r.sequence.to_le_bytes())?,
        number_buffer(pyarrow, &records, |r| r.epoch.to_le_bytes())?,
    ];
    for (number, (_, arrow_type)) in numbers.into_iter().zip(&BATCH_COLUMNS[2..7]) {
        columns.push(arrow_array(pyarrow, arrow_type, length, 0, vec![None, Some(number)])?);
    }
    let missing = records.iter().filter(|record| record.subject.is_none()).count();
    let validity = if missing > 0 {
        Some(filled_buffer(pyarrow, length.div_ceil(8), |out| {
            for (index, record) in records.iter().enumerate() {
                if record.subject.is_some() {
                    out[index / 8] |= 1 << (index % 8);
                }
            }
        })?)
    } else {
        None
    };
    let [offsets, data] = binary_buffers(pyarrow, &records, |record| record.subject.map_or(&[][..], str::as_bytes))?;
    columns.push(arrow_array(pyarrow, "large_string", length, missing, vec![validity, offsets, data])?);
    let names: Vec<&str> = BATCH_COLUMNS.iter().map(|(name, _)| *name).collect();
    let kwargs = pyo3::types::PyDict::new(pyarrow.py());
    kwargs.set_item("names", names)?;
    pyarrow.getattr("RecordBatch")?.call_method("from_arrays", (columns,), Some(&kwargs))
}

impl GroupConsumerCore {
    /// Polls (without the GIL, interruptibly) into one batch: no allocation per record.
    fn poll_into_batch(
        &self,
        py: Python<'_>,
        max_messages: usize,
        timeout: f64,
        mut batch: DeliveryBatch,
    ) -> PyResult<DeliveryBatch> {
        let total = seconds("timeout", timeout)?;
        let inner = &self.inner;
        let mut failure = None;
        wait_interruptibly(py, total, |slice| match inner.poll_batch(max_messages, slice, &mut batch) {
            Ok(0) if max_messages > 0 => None,
            Ok(_) => Some(()),
            Err(error) => {
                failure = Some(error);
                Some(())
            }
        })?;
        match failure {
            Some(error) => Err(group_error(error)),
            None => Ok(batch),
        }
    }

    /// Polls into the spare batch (a new one while another poll has it) and hands it to
    /// `use_batch`; the batch is kept for the next poll.
    fn with_polled<R>(
        &self,
        py: Python<'_>,
        max_messages: usize,
        timeout: f64,
        use_batch: impl FnOnce(&DeliveryBatch) -> PyResult<R>,
    ) -> PyResult<R> {
        let spare = self.spare.lock().map(|mut spare| std::mem::take(&mut *spare)).unwrap_or_default();
        let batch = self.poll_into_batch(py, max_messages, timeout, spare)?;
        let result = use_batch(&batch);
        if let Ok(mut spare) = self.spare.lock() {
            *spare = batch;
        }
        result
    }
}

/// A message of a group, as delivered by `GroupConsumerCore.poll`.
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct GroupMessage {
    key: Py<PyBytes>,
    payload: Py<PyBytes>,
    queue: u32,
    bucket: u32,
    producer: u64,
    sequence: u64,
    epoch: u64,
    subject: Option<String>,
}

#[pymethods]
impl GroupMessage {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "GroupMessage(queue={}, bucket={}, producer={}, sequence={}, epoch={}, key={} bytes, payload={} bytes)",
            self.queue,
            self.bucket,
            self.producer,
            self.sequence,
            self.epoch,
            self.key.bind(py).as_bytes().len(),
            self.payload.bind(py).as_bytes().len()
        )
    }
}

/// One queue's send figures (`PublisherStatus.queues`).
#[pyclass(module = "affinity._affinity", frozen, get_all)]
#[derive(Clone)]
pub struct QueueSendStatus {
    queue: u32,
    owner_id: u64,
    owner_name: String,
    epoch: u64,
    sent_sequence: u64,
    acked_sequence: u64,
    retained_bytes: u64,
    retained_messages: u64,
}

/// A publisher's status.
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct PublisherStatus {
    producer_id: u64,
    name: String,
    queues: Vec<QueueSendStatus>,
    authenticated: bool,
    auth_refused: u64,
}

/// A consumer's status.
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct ConsumerStatus {
    member_id: u64,
    name: String,
    index: u32,
    count: u32,
    owned: Vec<u32>,
    delivered: u64,
    duplicates_dropped: u64,
    authenticated: bool,
    auth_refused: u64,
}

/// A member as an observer sees it.
#[pyclass(module = "affinity._affinity", frozen, get_all)]
#[derive(Clone)]
pub struct MemberStatus {
    member_id: u64,
    name: String,
    role: String,
    index: u32,
    count: u32,
    endpoint: String,
    last_heard_ms: u64,
}

/// A queue as an observer sees it.
#[pyclass(module = "affinity._affinity", frozen, get_all)]
#[derive(Clone)]
pub struct QueueStatus {
    queue: u32,
    owner_id: u64,
    owner_name: String,
    epoch: u64,
    state: String,
    acked_sequence: u64,
    sent_sequence: u64,
    retained_bytes: u64,
    lag: u64,
}

/// The group as an observer sees it.
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct GroupStatus {
    members: Vec<MemberStatus>,
    queues: Vec<QueueStatus>,
    authenticated: bool,
    auth_refused: u64,
}

/// What a publisher ignored or repeated (hostile or stale input is counted, never fatal).
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct PublisherCounters {
    acks_bad_queue: u64,
    acks_beyond_sent: u64,
    acks_misaddressed: u64,
    acks_not_owner: u64,
    epochs_refused: u64,
    claims_bad_queue: u64,
    records_resent: u64,
    owner_changes: u64,
    control_malformed: u64,
    foreign_group: u64,
    files_invalid: u64,
    files_removed: u64,
    peer_errors: u64,
    control_send_refused: u64,
    auth_unauthenticated: u64,
    auth_bad_tag: u64,
    auth_replayed: u64,
    auth_unverifiable: u64,
}

/// What a consumer dropped or ignored (hostile or stale input is counted, never fatal).
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct ConsumerCounters {
    delivered: u64,
    duplicates_dropped: u64,
    not_owned_dropped: u64,
    data_malformed: u64,
    bad_queue: u64,
    bad_floor: u64,
    gaps: u64,
    stale_acks: u64,
    ownership_lost: u64,
    claims: u64,
    releases: u64,
    epochs_refused: u64,
    control_malformed: u64,
    foreign_group: u64,
    files_invalid: u64,
    files_removed: u64,
    peer_errors: u64,
    control_send_refused: u64,
    auth_unauthenticated: u64,
    auth_bad_tag: u64,
    auth_replayed: u64,
    auth_unverifiable: u64,
}

/// Publishes keyed records to a group (wrapped by `affinity.groups.GroupPublisher`).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct GroupPublisherCore {
    inner: runtime::GroupPublisher,
}

#[pymethods]
impl GroupPublisherCore {
    #[new]
    #[pyo3(signature = (client, group, hash_prefix, hash_count, queue_count, queue_size, *, registry_dir, name=None, host="127.0.0.1", control=None, secret=None, liveness_timeout_ms=GROUP_LIVENESS_TIMEOUT_MS, heartbeat_interval_ms=GROUP_HEARTBEAT_INTERVAL_MS, resend_timeout_ms=GROUP_RESEND_TIMEOUT_MS, listen=None, bootstrap=None, bootstrap_timeout_ms=GROUP_BOOTSTRAP_TIMEOUT_MS))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        group: &Bound<'_, PyAny>,
        hash_prefix: &Bound<'_, PyAny>,
        hash_count: &Bound<'_, PyAny>,
        queue_count: &Bound<'_, PyAny>,
        queue_size: &Bound<'_, PyAny>,
        registry_dir: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::host)] host: &str,
        control: Option<&Bound<'_, PyAny>>,
        secret: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::liveness_timeout_ms)] liveness_timeout_ms: u64,
        #[pyo3(from_py_with = named::heartbeat_interval_ms)] heartbeat_interval_ms: u64,
        #[pyo3(from_py_with = named::resend_timeout_ms)] resend_timeout_ms: u64,
        listen: Option<&Bound<'_, PyAny>>,
        bootstrap: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::bootstrap_timeout_ms)] bootstrap_timeout_ms: u64,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let config = definition(group, hash_prefix, hash_count, queue_count, queue_size)?;
        let found = Discovery { listen, bootstrap, bootstrap_timeout_ms };
        let options =
            options(registry_dir, name, host, control, secret, liveness_timeout_ms, heartbeat_interval_ms, &found)?;
        let resend = duration_ms("resend_timeout_ms", resend_timeout_ms)?;
        let client = client.get().shared()?;
        let inner =
            py.detach(|| runtime::GroupPublisher::new(client, config, &options, resend)).map_err(group_error)?;
        Ok(GroupPublisherCore { inner })
    }

    /// This producer's id.
    #[getter]
    fn producer_id(&self) -> u64 {
        self.inner.producer_id()
    }

    /// Publishes one keyed record: its sequence number (> 0), or NOT_CONNECTED (-1),
    /// BACK_PRESSURED (-2), CLOSED (-4). `subject` travels as `HP/bucket/subject`.
    #[pyo3(signature = (key, payload, subject=None))]
    fn publish(
        &self,
        key: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        subject: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<i64> {
        let subject = subject.map(|value| str_argument("subject", value)).transpose()?;
        let key = key_held(key)?;
        let payload = Held::new(payload.clone(), false, "payload")?;
        self.inner.publish(key.bytes(), payload.bytes(), subject).map_err(group_error)
    }

    /// Publishes keyed records in order until one is refused; returns how many were taken.
    fn publish_batch(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, payloads: &Bound<'_, PyAny>) -> PyResult<usize> {
        let keys = column(keys, true, "keys")?;
        let payloads = column(payloads, false, "payloads")?;
        if keys.len() != payloads.len() {
            return Err(invalid_argument(format!(
                "publish_batch: {} keys but {} payloads",
                keys.len(),
                payloads.len()
            )));
        }
        let key_slices = keys.slices();
        let payload_slices = payloads.slices();
        let inner = &self.inner;
        py.detach(|| inner.publish_batch(key_slices.iter().copied().zip(payload_slices.iter().copied())))
            .map_err(group_error)
    }

    /// Publishes one record to `queue` (same return codes as `publish`).
    #[pyo3(signature = (queue, payload, key=None))]
    fn publish_to_queue(
        &self,
        queue: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<i64> {
        let queue = count_argument("queue", queue)?;
        let key = key.map(|k| key_held(k)).transpose()?;
        let payload = Held::new(payload.clone(), false, "payload")?;
        let key_bytes = key.as_ref().map(Held::bytes).unwrap_or(b"");
        self.inner.publish_to_queue(queue, payload.bytes(), key_bytes).map_err(group_error)
    }

    /// True once everything published is acknowledged; False after `timeout` seconds.
    #[pyo3(signature = (timeout=5.0))]
    fn flush(&self, py: Python<'_>, #[pyo3(from_py_with = named::timeout)] timeout: f64) -> PyResult<bool> {
        let total = seconds("timeout", timeout)?;
        let inner = &self.inner;
        Ok(wait_interruptibly(py, total, |slice| inner.flush(slice).then_some(()))?.is_some())
    }

    /// Per-queue send figures.
    fn status(&self, py: Python<'_>) -> PublisherStatus {
        let status = py.detach(|| self.inner.status());
        PublisherStatus {
            producer_id: status.producer_id,
            name: status.name,
            queues: status
                .queues
                .into_iter()
                .map(|q| QueueSendStatus {
                    queue: q.queue,
                    owner_id: q.owner_id,
                    owner_name: q.owner_name,
                    epoch: q.epoch,
                    sent_sequence: q.sent_sequence,
                    acked_sequence: q.acked_sequence,
                    retained_bytes: q.retained_bytes,
                    retained_messages: q.retained_messages,
                })
                .collect(),
            authenticated: status.authenticated,
            auth_refused: status.auth_refused,
        }
    }

    /// Counters of ignored, hostile or repeated input.
    fn counters(&self) -> PublisherCounters {
        let (state, runtime) = self.inner.counters();
        PublisherCounters {
            acks_bad_queue: state.acks_bad_queue,
            acks_beyond_sent: state.acks_beyond_sent,
            acks_misaddressed: state.acks_misaddressed,
            acks_not_owner: state.acks_not_owner,
            epochs_refused: state.epochs_refused,
            claims_bad_queue: state.claims_bad_queue,
            records_resent: state.records_resent,
            owner_changes: state.owner_changes,
            control_malformed: runtime.control_malformed,
            foreign_group: runtime.foreign_group,
            files_invalid: runtime.files_invalid,
            files_removed: runtime.files_removed,
            peer_errors: runtime.peer_errors,
            control_send_refused: runtime.control_send_refused,
            auth_unauthenticated: runtime.auth.unauthenticated,
            auth_bad_tag: runtime.auth.bad_tag,
            auth_replayed: runtime.auth.replayed,
            auth_unverifiable: runtime.auth.unverifiable,
        }
    }

    /// Leaves the group (does not wait for acknowledgements: call `flush` first).
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

/// Consumes the queues this member owns (wrapped by `affinity.groups.GroupConsumer`).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct GroupConsumerCore {
    inner: runtime::GroupConsumer,
    /// The batch `poll_batch` fills, kept between polls so its buffers are not grown again
    /// (and their pages not faulted in again) every poll; taken out while in use.
    spare: std::sync::Mutex<DeliveryBatch>,
}

#[pymethods]
impl GroupConsumerCore {
    #[new]
    #[pyo3(signature = (client, group, hash_prefix, hash_count, queue_count, queue_size, index, count, *, registry_dir, auto_ack=false, name=None, host="127.0.0.1", control=None, secret=None, cycle_ms=GROUP_CYCLE_MS, liveness_timeout_ms=GROUP_LIVENESS_TIMEOUT_MS, heartbeat_interval_ms=GROUP_HEARTBEAT_INTERVAL_MS, listen=None, bootstrap=None, bootstrap_timeout_ms=GROUP_BOOTSTRAP_TIMEOUT_MS))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        group: &Bound<'_, PyAny>,
        hash_prefix: &Bound<'_, PyAny>,
        hash_count: &Bound<'_, PyAny>,
        queue_count: &Bound<'_, PyAny>,
        queue_size: &Bound<'_, PyAny>,
        index: &Bound<'_, PyAny>,
        count: &Bound<'_, PyAny>,
        registry_dir: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = named::auto_ack)] auto_ack: bool,
        name: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::host)] host: &str,
        control: Option<&Bound<'_, PyAny>>,
        secret: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::cycle_ms)] cycle_ms: u64,
        #[pyo3(from_py_with = named::liveness_timeout_ms)] liveness_timeout_ms: u64,
        #[pyo3(from_py_with = named::heartbeat_interval_ms)] heartbeat_interval_ms: u64,
        listen: Option<&Bound<'_, PyAny>>,
        bootstrap: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::bootstrap_timeout_ms)] bootstrap_timeout_ms: u64,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let config = definition(group, hash_prefix, hash_count, queue_count, queue_size)?;
        let index = count_argument("index", index)?;
        let count = count_argument("count", count)?;
        let found = Discovery { listen, bootstrap, bootstrap_timeout_ms };
        let options =
            options(registry_dir, name, host, control, secret, liveness_timeout_ms, heartbeat_interval_ms, &found)?;
        let cycle = duration_ms("cycle_ms", cycle_ms)?;
        let client = client.get().shared()?;
        let inner = py
            .detach(|| runtime::GroupConsumer::new(client, config, index, count, &options, auto_ack, cycle))
            .map_err(group_error)?;
        Ok(GroupConsumerCore { inner, spare: std::sync::Mutex::default() })
    }

    /// This consumer's member id.
    #[getter]
    fn member_id(&self) -> u64 {
        self.inner.member_id()
    }

    /// Up to `max_messages` messages, waiting up to `timeout` seconds for the first.
    #[pyo3(signature = (max_messages=1000, timeout=0.0))]
    fn poll(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = named::max_messages)] max_messages: usize,
        #[pyo3(from_py_with = named::timeout)] timeout: f64,
    ) -> PyResult<Vec<GroupMessage>> {
        self.with_polled(py, max_messages, timeout, |batch| {
            Ok(batch
                .iter()
                .map(|d| GroupMessage {
                    key: PyBytes::new(py, d.key).unbind(),
                    payload: PyBytes::new(py, d.payload).unbind(),
                    queue: d.queue,
                    bucket: d.bucket,
                    producer: d.producer,
                    sequence: d.sequence,
                    epoch: d.epoch,
                    subject: d.subject.map(str::to_owned),
                })
                .collect())
        })
    }

    /// The records `poll` would return, as one `pyarrow.RecordBatch`: columns `key`, `payload`
    /// (large_binary), `queue`, `bucket` (uint32), `producer`, `sequence`, `epoch` (uint64),
    /// `subject` (large_string, null without one). No Python object per record.
    #[pyo3(signature = (max_messages=1000, timeout=0.0))]
    fn poll_batch<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = named::max_messages)] max_messages: usize,
        #[pyo3(from_py_with = named::timeout)] timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let pyarrow = py.import("pyarrow")?;
        self.with_polled(py, max_messages, timeout, |batch| record_batch(&pyarrow, batch))
    }

    /// Acknowledges the record (`queue`, `producer`, `sequence`) received in `epoch` (a row of
    /// `poll_batch`) and everything delivered before it from the same producer and queue.
    /// A record of a queue this consumer no longer holds in that epoch is ignored (counted).
    fn ack_record(
        &self,
        queue: &Bound<'_, PyAny>,
        producer: &Bound<'_, PyAny>,
        sequence: &Bound<'_, PyAny>,
        epoch: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let queue = count_argument("queue", queue)?;
        let producer = int_in("producer", producer, 0, u64::MAX)?;
        let sequence = int_in("sequence", sequence, 0, u64::MAX)?;
        let epoch = int_in("epoch", epoch, 0, u64::MAX)?;
        self.inner.ack(queue, producer, sequence, epoch);
        Ok(())
    }

    /// Acknowledges `message` and everything delivered before it from the same producer and
    /// queue. A message of a queue this consumer no longer owns is ignored (counted).
    fn ack(&self, message: &Bound<'_, PyAny>) -> PyResult<()> {
        let message = instance_argument::<GroupMessage>("message", message, "an affinity.GroupMessage")?.get();
        self.inner.ack(message.queue, message.producer, message.sequence, message.epoch);
        Ok(())
    }

    /// Queues this consumer delivers now.
    fn owned_queues(&self) -> Vec<u32> {
        self.inner.owned_queues()
    }

    /// Counters and owned queues.
    fn status(&self, py: Python<'_>) -> ConsumerStatus {
        let status = py.detach(|| self.inner.status());
        ConsumerStatus {
            member_id: status.member_id,
            name: status.name,
            index: status.index,
            count: status.count,
            owned: status.owned,
            delivered: status.delivered,
            duplicates_dropped: status.duplicates_dropped,
            authenticated: status.authenticated,
            auth_refused: status.auth_refused,
        }
    }

    /// Counters of dropped, hostile or stale input.
    fn counters(&self) -> ConsumerCounters {
        let (state, runtime) = self.inner.counters();
        ConsumerCounters {
            delivered: state.delivered,
            duplicates_dropped: state.duplicates_dropped,
            not_owned_dropped: state.not_owned_dropped,
            data_malformed: state.malformed,
            bad_queue: state.bad_queue,
            bad_floor: state.bad_floor,
            gaps: state.gaps,
            stale_acks: state.stale_acks,
            ownership_lost: state.ownership_lost,
            claims: state.claims,
            releases: state.releases,
            epochs_refused: state.epochs_refused,
            control_malformed: runtime.control_malformed,
            foreign_group: runtime.foreign_group,
            files_invalid: runtime.files_invalid,
            files_removed: runtime.files_removed,
            peer_errors: runtime.peer_errors,
            control_send_refused: runtime.control_send_refused,
            auth_unauthenticated: runtime.auth.unauthenticated,
            auth_bad_tag: runtime.auth.bad_tag,
            auth_replayed: runtime.auth.replayed,
            auth_unverifiable: runtime.auth.unverifiable,
        }
    }

    /// Clean leave: planned handoff of every owned queue, then leave (bounded by `timeout`).
    #[pyo3(signature = (timeout=5.0))]
    fn close(&self, py: Python<'_>, #[pyo3(from_py_with = named::timeout)] timeout: f64) -> PyResult<()> {
        let total = seconds("timeout", timeout)?;
        py.detach(|| self.inner.close(total));
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py, 5.0)?;
        Ok(false)
    }
}

/// Watches a group's control plane (for `affinity group status`); owns nothing.
#[pyclass(module = "affinity._affinity", frozen)]
pub struct GroupObserverCore {
    inner: runtime::GroupObserver,
}

#[pymethods]
impl GroupObserverCore {
    #[new]
    #[pyo3(signature = (client, group, hash_prefix, hash_count, queue_count, queue_size, *, registry_dir, host="127.0.0.1", control=None, secret=None, liveness_timeout_ms=GROUP_LIVENESS_TIMEOUT_MS, heartbeat_interval_ms=GROUP_HEARTBEAT_INTERVAL_MS, listen=None, bootstrap=None, bootstrap_timeout_ms=GROUP_BOOTSTRAP_TIMEOUT_MS))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        group: &Bound<'_, PyAny>,
        hash_prefix: &Bound<'_, PyAny>,
        hash_count: &Bound<'_, PyAny>,
        queue_count: &Bound<'_, PyAny>,
        queue_size: &Bound<'_, PyAny>,
        registry_dir: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = named::host)] host: &str,
        control: Option<&Bound<'_, PyAny>>,
        secret: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::liveness_timeout_ms)] liveness_timeout_ms: u64,
        #[pyo3(from_py_with = named::heartbeat_interval_ms)] heartbeat_interval_ms: u64,
        listen: Option<&Bound<'_, PyAny>>,
        bootstrap: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::bootstrap_timeout_ms)] bootstrap_timeout_ms: u64,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let config = definition(group, hash_prefix, hash_count, queue_count, queue_size)?;
        let found = Discovery { listen, bootstrap, bootstrap_timeout_ms };
        let options =
            options(registry_dir, None, host, control, secret, liveness_timeout_ms, heartbeat_interval_ms, &found)?;
        let client = client.get().shared()?;
        let inner = py.detach(|| runtime::GroupObserver::new(client, config, &options)).map_err(group_error)?;
        Ok(GroupObserverCore { inner })
    }

    /// Members and queues as heard on the control plane.
    fn status(&self, py: Python<'_>) -> GroupStatus {
        let status = py.detach(|| self.inner.status());
        GroupStatus {
            members: status
                .members
                .into_iter()
                .map(|m| MemberStatus {
                    member_id: m.member_id,
                    name: m.name,
                    role: m.role,
                    index: m.index,
                    count: m.count,
                    endpoint: m.endpoint,
                    last_heard_ms: m.last_heard_ms,
                })
                .collect(),
            queues: status
                .queues
                .into_iter()
                .map(|q| QueueStatus {
                    queue: q.queue,
                    owner_id: q.owner_id,
                    owner_name: q.owner_name,
                    epoch: q.epoch,
                    state: q.state,
                    acked_sequence: q.acked_sequence,
                    sent_sequence: q.sent_sequence,
                    retained_bytes: q.retained_bytes,
                    lag: q.lag,
                })
                .collect(),
            authenticated: status.authenticated,
            auth_refused: status.auth_refused,
        }
    }

    /// Leaves the control plane.
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

/// A bootstrap responder that is no member (`affinity router --bootstrap-listen`): answers
/// BOOTSTRAP for the groups of a registry on its own thread over `client`. `listen` and
/// `registry` are the values of the two options (`None`: not given).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct BootstrapResponderCore {
    inner: std::sync::Mutex<runtime::responder::BootstrapResponder>,
}

#[pymethods]
impl BootstrapResponderCore {
    #[new]
    #[pyo3(signature = (client, listen, registry=None))]
    fn new(
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        listen: Option<&Bound<'_, PyAny>>,
        registry: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let listen = optional_str("listen", listen)?;
        let registry = optional_str("registry", registry)?;
        // The command lines' own check: `--registry` alone is refused with their message.
        let options = runtime::responder::ResponderOptions::from_values(listen, registry)
            .map_err(config_error)?
            .ok_or_else(|| config_error(format!("{} is needed", runtime::responder::BOOTSTRAP_LISTEN.flag())))?;
        let client = client.get().shared()?;
        let inner =
            py.detach(|| runtime::responder::BootstrapResponder::start(client, &options)).map_err(group_error)?;
        Ok(BootstrapResponderCore { inner: std::sync::Mutex::new(inner) })
    }

    /// The address it answers at (`ip:port`).
    #[getter]
    fn endpoint(&self) -> String {
        affinity_client::sync::lock(&self.inner).endpoint().to_string()
    }

    /// What it did so far, by name (groups, answered, heartbeats, unknown_group, malformed,
    /// auth_refused, dropped).
    fn counters(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let runtime::responder::ResponderCounters {
            groups,
            answered,
            heartbeats,
            unknown_group,
            malformed,
            auth_refused,
            dropped,
        } = affinity_client::sync::lock(&self.inner).counters();
        [
            ("groups", groups),
            ("answered", answered),
            ("heartbeats", heartbeats),
            ("unknown_group", unknown_group),
            ("malformed", malformed),
            ("auth_refused", auth_refused),
            ("dropped", dropped),
        ]
        .into_iter()
        .collect()
    }

    /// Stops answering (idempotent).
    fn close(&self, py: Python<'_>) {
        py.detach(|| affinity_client::sync::lock(&self.inner).close());
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(group_bucket, module)?)?;
    module.add_function(wrap_pyfunction!(group_queue, module)?)?;
    module.add_function(wrap_pyfunction!(group_queues, module)?)?;
    module.add_function(wrap_pyfunction!(group_bootstrap, module)?)?;
    module.add_class::<GroupPublisherCore>()?;
    module.add_class::<GroupConsumerCore>()?;
    module.add_class::<GroupObserverCore>()?;
    module.add_class::<BootstrapResponderCore>()?;
    let options: Vec<(&str, &str, &str)> =
        runtime::responder::RESPONDER_OPTIONS.iter().map(|option| (option.name, option.value, option.help)).collect();
    module.add("BOOTSTRAP_RESPONDER_OPTIONS", options)?;
    module.add_class::<GroupMessage>()?;
    module.add_class::<PublisherStatus>()?;
    module.add_class::<QueueSendStatus>()?;
    module.add_class::<ConsumerStatus>()?;
    module.add_class::<GroupStatus>()?;
    module.add_class::<MemberStatus>()?;
    module.add_class::<QueueStatus>()?;
    module.add("GROUP_CONTROL_STREAM_ID", crate::control::CONTROL_STREAM_ID)?;
    module.add("GROUP_DATA_STREAM_ID", crate::control::DATA_STREAM_ID)?;
    module.add_class::<PublisherCounters>()?;
    module.add_class::<ConsumerCounters>()?;
    Ok(())
}
