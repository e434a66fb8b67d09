//! Bindings for the subject router: `SubjectRouterCore`, `SubjectSubscriberCore`,
//! `SubjectSourceCore`, `RouterStatusInfo` and the record flags.
//!
//! Conversion, GIL release and error mapping only: every decision is made in
//! `crate::subjects`. The Python wrappers are `affinity.subjects` and `affinity.cli.router`.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::args::{
    expected, instance_argument, named, optional_str, sequence_argument, str_argument, string_argument,
    strings_argument, usize_argument,
};
use super::errors::{config_error, invalid_argument, subjects_error};
use super::routing::PyRoutingTable;
use super::transport::Client;
use crate::control::GroupSecret;
use crate::groups::Timing;
use crate::routing::{NoDataStatus, Reason};
use crate::subjects::backlog::{DEFAULT_BACKLOG_BUDGET, MIN_BACKLOG_BUDGET};
use crate::subjects::codec::{
    FLAG_IMAGE, FLAG_NODATA_NOTFOUND, FLAG_NODATA_UNAVAILABLE, FLAG_REFUSED, FLAG_STATUS, FLAG_UPDATE,
};
use crate::subjects::faucet::connection_name;
use crate::subjects::runtime::{
    PeerOptions, RouterOptions, RouterRuntime, SubjectPeer, SubjectSource, SubjectSubscriber,
};
use crate::subjects::{Announcements, Faucet, FaucetConfig, LogEntry, RecordKind};

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<SubjectRouterCore>()?;
    module.add_class::<SubjectSubscriberCore>()?;
    module.add_class::<SubjectSourceCore>()?;
    module.add_class::<RouterStatusInfo>()?;
    module.add("SUBJECT_FLAG_IMAGE", FLAG_IMAGE)?;
    module.add("SUBJECT_FLAG_UPDATE", FLAG_UPDATE)?;
    module.add("SUBJECT_FLAG_NODATA_UNAVAILABLE", FLAG_NODATA_UNAVAILABLE)?;
    module.add("SUBJECT_FLAG_NODATA_NOTFOUND", FLAG_NODATA_NOTFOUND)?;
    module.add("SUBJECT_FLAG_STATUS", FLAG_STATUS)?;
    module.add("SUBJECT_FLAG_REFUSED", FLAG_REFUSED)?;
    module.add("ROUTER_BACKLOG_BUDGET", DEFAULT_BACKLOG_BUDGET)?;
    module.add("ROUTER_MIN_BACKLOG_BUDGET", MIN_BACKLOG_BUDGET)?;
    module.add("SUBJECT_KIND_REQUEST", RecordKind::Request as u8)?;
    module.add("SUBJECT_KIND_DISCARD", RecordKind::Discard as u8)?;
    module.add("SUBJECT_KIND_DATA", RecordKind::Data as u8)?;
    Ok(())
}

/// The router secret argument: `None` or the secret's bytes (`affinity.subjects` resolves
/// paths and environment variables first).
fn secret_argument(secret: Option<&Bound<'_, PyAny>>) -> PyResult<Option<GroupSecret>> {
    let Some(object) = secret.filter(|s| !s.is_none()) else { return Ok(None) };
    let bytes = object.cast::<PyBytes>().map_err(|_| expected("secret", "bytes (the router secret)", object))?;
    GroupSecret::new(bytes.as_bytes()).map(Some).map_err(|e| config_error(format!("secret: {e}")))
}

fn timing(heartbeat_interval_ms: u64, liveness_timeout_ms: u64) -> PyResult<Timing> {
    Timing::new(Duration::from_millis(heartbeat_interval_ms), Duration::from_millis(liveness_timeout_ms))
        .map_err(|e| config_error(e.to_string()))
}

/// A running router (wrapped by `affinity.cli.router` and `affinity.subjects.RouterHandle`).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct SubjectRouterCore {
    inner: RouterRuntime,
}

/// A router's counters and members.
#[pyclass(module = "affinity._affinity", frozen, get_all)]
pub struct RouterStatusInfo {
    malformed: u64,
    refused: u64,
    stale_data: u64,
    unknown_unsubscribes: u64,
    no_service: u64,
    foreign: u64,
    log_dropped: u64,
    relayed: u64,
    routed: u64,
    refused_subscribes: u64,
    duplicate_subscribes: u64,
    evicted_subscribers: u64,
    control_malformed: u64,
    unroutable: u64,
    dropped_records: u64,
    messages_sent: u64,
    backlog_bytes: usize,
    auth_unauthenticated: u64,
    auth_unverifiable: u64,
    auth_bad_tag: u64,
    auth_replayed: u64,
    authenticated: bool,
    subjects: usize,
    affinities: usize,
    members: Vec<(String, bool)>,
}

#[pymethods]
impl SubjectRouterCore {
    /// Starts a router: takes the routing tables out of `table` (left empty), optional faucet
    /// `(control_topic, subscription_topic, announcements, coverage_option)`; `backlog_budget`:
    /// bytes all backlogs together may hold; `secret`: the router secret (bytes) or `None`.
    #[new]
    #[pyo3(signature = (client, table, listen, *, faucet=None, control=None, liveness_timeout_ms=2000, heartbeat_interval_ms=100, backlog_budget=DEFAULT_BACKLOG_BUDGET, secret=None, forward=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        table: &Bound<'_, PyAny>,
        listen: &Bound<'_, PyAny>,
        faucet: Option<&Bound<'_, PyAny>>,
        control: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = named::liveness_timeout_ms)] liveness_timeout_ms: u64,
        #[pyo3(from_py_with = named::heartbeat_interval_ms)] heartbeat_interval_ms: u64,
        #[pyo3(from_py_with = named::backlog_budget)] backlog_budget: usize,
        secret: Option<&Bound<'_, PyAny>>,
        forward: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let secret = secret_argument(secret)?;
        let forward = optional_str("forward", forward)?.map(str::to_owned);
        let table = instance_argument::<PyRoutingTable>("table", table, "an affinity routing table")?;
        let listen = string_argument("listen", listen)?;
        let faucet = faucet.map(faucet_argument).transpose()?;
        let control = optional_str("control", control)?.map(str::to_owned);
        let timing = timing(heartbeat_interval_ms, liveness_timeout_ms)?;
        let faucet = match faucet {
            Some((control_topic, subscription_topic, announcements, coverage_option)) => {
                let announcements = Announcements::parse(&announcements)
                    .ok_or_else(|| config_error(format!("announcements {announcements:?}: must be default or all")))?;
                let config = FaucetConfig { control_topic, subscription_topic, announcements, coverage_option };
                Some(Faucet::new(config).map_err(|e| config_error(e.to_string()))?)
            }
            None => None,
        };
        let table = std::mem::take(&mut table.borrow_mut().inner);
        let client = client.get().shared()?;
        let options = RouterOptions { listen, control, timing, backlog_budget, secret, forward };
        let inner = py.detach(|| RouterRuntime::start(client, table, faucet, &options)).map_err(subjects_error)?;
        Ok(SubjectRouterCore { inner })
    }

    /// The router's member id.
    #[getter]
    fn id(&self) -> u64 {
        self.inner.id()
    }

    /// Takes the log entries made since the last call, as dicts (`kind` first).
    fn drain_log<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let labels = self.inner.labels();
        let label = |m: crate::routing::MemberId| labels.get(m.index()).map(String::as_str);
        let list = PyList::empty(py);
        for entry in self.inner.drain_log() {
            let dict = PyDict::new(py);
            match &entry {
                LogEntry::Routing(event) => {
                    dict.set_item("sequence", event.sequence)?;
                    dict.set_item("kind", event.kind.name())?;
                    dict.set_item("subject", event.subject.as_deref())?;
                    dict.set_item("composite", event.composite.as_deref())?;
                    dict.set_item("member", event.member.and_then(label))?;
                    dict.set_item("peer_index", event.member.map(|m| m.peer_index()))?;
                    dict.set_item("previous", event.previous.and_then(label))?;
                    dict.set_item("previous_peer_index", event.previous.map(|m| m.peer_index()))?;
                    dict.set_item("reason", event.reason.map(Reason::name))?;
                    dict.set_item("move_reason", event.move_reason.map(|r| r.name()))?;
                    dict.set_item("message", event.message.as_deref())?;
                }
                LogEntry::Faucet(event) => {
                    dict.set_item("kind", "faucet")?;
                    dict.set_item("action", event.action.name())?;
                    dict.set_item("topic", &*event.topic)?;
                    dict.set_item("client_name", event.publisher.as_ref().map(|p| &*p.name))?;
                    dict.set_item("connection_name", event.publisher.as_ref().map(|p| connection_name(p.id)))?;
                    dict.set_item("subscriber_client_name", event.subscriber.as_ref().map(|p| &*p.name))?;
                    dict.set_item(
                        "subscriber_connection_name",
                        event.subscriber.as_ref().map(|p| connection_name(p.id)),
                    )?;
                    dict.set_item("json", event.to_json())?;
                }
                LogEntry::SubscriberEvicted(name, id, bytes) => {
                    dict.set_item("kind", "subscriber-evicted")?;
                    dict.set_item("name", &**name)?;
                    dict.set_item("connection_name", connection_name(*id))?;
                    dict.set_item("backlog_bytes", *bytes)?;
                }
                LogEntry::SourceUp(name, id) | LogEntry::SourceDown(name, id) => {
                    let up = matches!(entry, LogEntry::SourceUp(..));
                    dict.set_item("kind", if up { "source-up" } else { "source-down" })?;
                    dict.set_item("label", &**name)?;
                    dict.set_item("connection_name", connection_name(*id))?;
                }
            }
            list.append(dict)?;
        }
        Ok(list)
    }

    /// The latest counters and member states.
    fn status(&self) -> RouterStatusInfo {
        let status = self.inner.status();
        let (c, r) = (status.counters, status.runtime);
        RouterStatusInfo {
            malformed: c.malformed,
            refused: c.refused,
            stale_data: c.stale_data,
            unknown_unsubscribes: c.unknown_unsubscribes,
            no_service: c.no_service,
            foreign: c.foreign,
            log_dropped: c.log_dropped,
            relayed: c.relayed,
            routed: c.routed,
            refused_subscribes: c.refused_subscribes,
            duplicate_subscribes: c.duplicate_subscribes,
            evicted_subscribers: c.evicted_subscribers,
            control_malformed: r.control_malformed,
            unroutable: r.unroutable,
            dropped_records: r.dropped_records,
            messages_sent: r.messages_sent,
            backlog_bytes: r.backlog_bytes,
            auth_unauthenticated: r.auth.unauthenticated,
            auth_unverifiable: r.auth.unverifiable,
            auth_bad_tag: r.auth.bad_tag,
            auth_replayed: r.auth.replayed,
            authenticated: status.authenticated,
            subjects: status.subjects,
            affinities: status.affinities,
            members: status.members,
        }
    }

    /// Stops the router thread.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }
}

/// The faucet `(control_topic, subscription_topic, announcements, coverage_option)`.
fn faucet_argument(value: &Bound<'_, PyAny>) -> PyResult<(String, String, String, Option<String>)> {
    let parts = sequence_argument(
        "faucet",
        value,
        "a (control_topic, subscription_topic, announcements, coverage_option) tuple",
        |item, part| if part.is_none() { Ok(None) } else { string_argument(item, part).map(Some) },
    )?;
    match <[Option<String>; 4]>::try_from(parts) {
        Ok([Some(control), Some(subscription), Some(announcements), coverage]) => {
            Ok((control, subscription, announcements, coverage))
        }
        _ => Err(invalid_argument(
            "faucet: expected (control_topic, subscription_topic, announcements, coverage_option), only the last may be None",
        )),
    }
}

/// The options of a subscriber or source: `routers` (a list of channels), `name` (or
/// `label`), `host`, the timing and the router secret.
fn peer_options(
    routers: &Bound<'_, PyAny>,
    (name_argument, name): (&str, &Bound<'_, PyAny>),
    host: &str,
    (heartbeat_interval_ms, liveness_timeout_ms): (u64, u64),
    secret: Option<&Bound<'_, PyAny>>,
) -> PyResult<PeerOptions> {
    let routers = strings_argument("routers", routers)?;
    let name = string_argument(name_argument, name)?;
    let host = host.to_owned();
    let secret = secret_argument(secret)?;
    Ok(PeerOptions { routers, name, host, timing: timing(heartbeat_interval_ms, liveness_timeout_ms)?, secret })
}

/// A peer's counters as a dict: `malformed`, `received`, `dropped_records` and the
/// refusals `auth_unauthenticated`, `auth_unverifiable`, `auth_bad_tag`, `auth_replayed`.
fn peer_counters<'py>(py: Python<'py>, peer: &SubjectPeer) -> PyResult<Bound<'py, PyDict>> {
    let c = peer.counters();
    let dict = PyDict::new(py);
    dict.set_item("malformed", c.malformed)?;
    dict.set_item("received", c.received)?;
    dict.set_item("dropped_records", c.dropped_records)?;
    dict.set_item("router_switches", c.router_switches)?;
    dict.set_item("auth_unauthenticated", c.auth.unauthenticated)?;
    dict.set_item("auth_unverifiable", c.auth.unverifiable)?;
    dict.set_item("auth_bad_tag", c.auth.bad_tag)?;
    dict.set_item("auth_replayed", c.auth.replayed)?;
    Ok(dict)
}

fn poll<'py>(py: Python<'py>, peer: &SubjectPeer, limit: usize) -> PyResult<Bound<'py, PyList>> {
    let deliveries = py.detach(|| peer.poll(limit)).map_err(subjects_error)?;
    let list = PyList::empty(py);
    for d in deliveries {
        list.append((d.kind as u8, d.flags, d.subject, PyBytes::new(py, &d.payload)))?;
    }
    Ok(list)
}

/// A subscriber (wrapped by `affinity.subjects.Subscriber`).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct SubjectSubscriberCore {
    inner: SubjectSubscriber,
}

#[pymethods]
impl SubjectSubscriberCore {
    /// Opens an inbox and starts heartbeating to the first of `routers` (a list of channels).
    #[new]
    #[pyo3(signature = (client, routers, *, name, host="127.0.0.1", heartbeat_interval_ms=100, liveness_timeout_ms=2000, secret=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        routers: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = named::host)] host: &str,
        #[pyo3(from_py_with = named::heartbeat_interval_ms)] heartbeat_interval_ms: u64,
        #[pyo3(from_py_with = named::liveness_timeout_ms)] liveness_timeout_ms: u64,
        secret: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let timing = (heartbeat_interval_ms, liveness_timeout_ms);
        let options = peer_options(routers, ("name", name), host, timing, secret)?;
        let client = client.get().shared()?;
        let inner = py.detach(|| SubjectSubscriber::new(&client, &options)).map_err(subjects_error)?;
        Ok(SubjectSubscriberCore { inner })
    }

    /// The connection id.
    #[getter]
    fn id(&self) -> u64 {
        self.inner.peer().id()
    }

    /// Sends SUBSCRIBE; `False` when the link to the router is full and it was dropped.
    fn subscribe(&self, subject: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.inner.subscribe(str_argument("subject", subject)?).map_err(subjects_error)
    }

    /// Sends UNSUBSCRIBE.
    fn unsubscribe(&self, subject: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.unsubscribe(str_argument("subject", subject)?).map_err(subjects_error)
    }

    /// `[(kind, flags, subject, payload)]` received.
    fn poll<'py>(&self, py: Python<'py>, limit: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyList>> {
        poll(py, self.inner.peer(), usize_argument("limit", limit)?)
    }

    /// The counters (`peer_counters`).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        peer_counters(py, self.inner.peer())
    }

    /// Whether it holds a router secret.
    #[getter]
    fn authenticated(&self) -> bool {
        self.inner.peer().is_authenticated()
    }

    /// The inbox endpoint (`host:port`) the router sends to.
    #[getter]
    fn endpoint(&self) -> String {
        self.inner.peer().endpoint().to_owned()
    }

    /// The channel of the router in use (it changes when the router is lost).
    #[getter]
    fn router(&self) -> String {
        self.inner.peer().router()
    }

    /// Says "leaving" and stops the heartbeat thread.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.peer().close());
    }
}

/// A source (wrapped by `affinity.subjects.Source`).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct SubjectSourceCore {
    inner: SubjectSource,
}

#[pymethods]
impl SubjectSourceCore {
    /// Opens an inbox and starts heartbeating to the first of `routers` with `label`.
    #[new]
    #[pyo3(signature = (client, routers, *, label, host="127.0.0.1", heartbeat_interval_ms=100, liveness_timeout_ms=2000, secret=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &Bound<'_, PyAny>,
        routers: &Bound<'_, PyAny>,
        label: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = named::host)] host: &str,
        #[pyo3(from_py_with = named::heartbeat_interval_ms)] heartbeat_interval_ms: u64,
        #[pyo3(from_py_with = named::liveness_timeout_ms)] liveness_timeout_ms: u64,
        secret: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let timing = (heartbeat_interval_ms, liveness_timeout_ms);
        let options = peer_options(routers, ("label", label), host, timing, secret)?;
        let client = client.get().shared()?;
        let inner = py.detach(|| SubjectSource::new(&client, &options)).map_err(subjects_error)?;
        Ok(SubjectSourceCore { inner })
    }

    /// The connection id.
    #[getter]
    fn id(&self) -> u64 {
        self.inner.peer().id()
    }

    /// Sends ENLIST (one enlistment; `coverage` optional).
    #[pyo3(signature = (control_topic, coverage=None))]
    fn enlist(&self, control_topic: &Bound<'_, PyAny>, coverage: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let control_topic = str_argument("control_topic", control_topic)?;
        let coverage = optional_str("coverage", coverage)?;
        self.inner.enlist(control_topic, coverage).map_err(subjects_error)
    }

    /// Sends DELIST.
    fn delist(&self, control_topic: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.delist(str_argument("control_topic", control_topic)?).map_err(subjects_error)
    }

    /// Publishes an image or an update.
    #[pyo3(signature = (subject, payload, image=false))]
    fn publish(
        &self,
        subject: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = named::image)] image: bool,
    ) -> PyResult<()> {
        let subject = str_argument("subject", subject)?;
        let payload = payload.cast::<PyBytes>().map_err(|_| expected("payload", "bytes", payload))?;
        self.inner.publish(subject, payload.as_bytes(), image).map_err(subjects_error)
    }

    /// Answers NODATA (`unavailable` or `notfound`).
    fn nodata(&self, subject: &Bound<'_, PyAny>, status: &Bound<'_, PyAny>) -> PyResult<()> {
        let subject = str_argument("subject", subject)?;
        let status = str_argument("status", status)?;
        let status = match NoDataStatus::parse(status) {
            Some(status @ (NoDataStatus::Unavailable | NoDataStatus::NotFound)) => status,
            _ => return Err(config_error(format!("nodata status {status:?}: unavailable or notfound"))),
        };
        self.inner.nodata(subject, status).map_err(subjects_error)
    }

    /// `[(kind, flags, subject, payload)]` received (REQUEST 3, DISCARD 4, DATA 5).
    fn poll<'py>(&self, py: Python<'py>, limit: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyList>> {
        poll(py, self.inner.peer(), usize_argument("limit", limit)?)
    }

    /// The counters (`peer_counters`).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        peer_counters(py, self.inner.peer())
    }

    /// Whether it holds a router secret.
    #[getter]
    fn authenticated(&self) -> bool {
        self.inner.peer().is_authenticated()
    }

    /// The inbox endpoint (`host:port`) the router sends to.
    #[getter]
    fn endpoint(&self) -> String {
        self.inner.peer().endpoint().to_owned()
    }

    /// The channel of the router in use (it changes when the router is lost).
    #[getter]
    fn router(&self) -> String {
        self.inner.peer().router()
    }

    /// Says "leaving" and stops the heartbeat thread.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.peer().close());
    }
}
