//! Bindings for the subject router: `SubjectRouterCore`, `SubjectSubscriberCore`,
//! `SubjectSourceCore`, their records (declared with `records::record!`) and the record flags.
//!
//! Conversion, GIL release and error mapping only: every decision is made in
//! `crate::subjects`. The Python wrappers are `affinity.subjects` and `affinity.cli.router`.

use super::settings::{GROUP_HEARTBEAT_INTERVAL_MS, GROUP_LIVENESS_TIMEOUT_MS};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::args::{
    expected, instance_argument, named, optional_str, sequence_argument, str_argument, string_argument,
    strings_argument, usize_argument,
};
use super::errors::{config_error, invalid_argument, subjects_error};
use super::records::record;
use super::routing::{routing_event, PyRoutingTable};
use super::transport::Client;
use crate::control::Timing;
use crate::control::{AuthCounters, GroupSecret};
use crate::routing::NoDataStatus;
use crate::subjects::backlog::{DEFAULT_BACKLOG_BUDGET, MIN_BACKLOG_BUDGET};
use crate::subjects::cluster::{
    CacheAction, ForwardCounters, ForwardQueues, Forwarded, Notice, QueueEvent, QueueKey, SlaveCache,
};
use crate::subjects::codec::{
    with_domain, SubjectRecord, FLAG_DOMAIN, FLAG_ERASE, FLAG_IMAGE, FLAG_NODATA_NOTFOUND, FLAG_NODATA_UNAVAILABLE,
    FLAG_PUBLISH, FLAG_REFUSED, FLAG_STATUS, FLAG_UPDATE, FORWARD_CLEARED, FORWARD_RESYNC, FORWARD_WARNING,
    ORIGIN_LENGTH,
};
use crate::subjects::faucet::connection_name;
use crate::subjects::runtime::{
    Delivery, PeerCounters, PeerOptions, RouterOptions, RouterRuntime, RouterRuntimeCounters, RouterStatus,
    SubjectPeer, SubjectSource, SubjectSubscriber,
};
use crate::subjects::{Announcements, Faucet, FaucetConfig, FaucetEvent, LogEntry, RecordKind, RouterCounters};
use crate::time::MonotonicClock;

/// The Python spelling of a [`Forwarded`].
fn forwarded_name(outcome: Forwarded) -> &'static str {
    match outcome {
        Forwarded::Sent => "sent",
        Forwarded::Queued => "queued",
        Forwarded::Full => "full",
        Forwarded::Dropped => "dropped",
    }
}

/// The names of a forward queue's counters, in the order Python sees them.
fn forward_counters(c: ForwardCounters) -> std::collections::BTreeMap<&'static str, u64> {
    [("sent", c.sent), ("queued", c.queued), ("flushed", c.flushed), ("refused", c.refused), ("dropped", c.dropped)]
        .into_iter()
        .collect()
}

/// A cluster node's slave cache (`crate::subjects::cluster::SlaveCache`, wrapped by
/// `affinity.cluster_expiry`): per subject the parent it is subscribed at, its last image, and
/// since when no local subscriber holds it; entries idle past the expiry are unsubscribed.
/// Parents are node ids; times come from one monotonic clock per cache.
#[pyclass(module = "affinity._affinity", frozen)]
pub struct ClusterSlaveCache {
    inner: std::sync::Mutex<(SlaveCache, Vec<String>)>,
    clock: MonotonicClock,
}

impl ClusterSlaveCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, (SlaveCache, Vec<String>)> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The index of node `name` (interned in `names`).
fn node_index(names: &mut Vec<String>, name: &str) -> usize {
    names.iter().position(|n| n == name).unwrap_or_else(|| {
        names.push(name.to_owned());
        names.len() - 1
    })
}

#[pymethods]
impl ClusterSlaveCache {
    /// A cache whose unused entries live `expiry` seconds.
    #[new]
    fn new(expiry: &Bound<'_, PyAny>) -> PyResult<Self> {
        let expiry = super::args::seconds("expiry", super::args::float_argument("expiry", expiry)?)?;
        Ok(ClusterSlaveCache {
            inner: std::sync::Mutex::new((SlaveCache::new(expiry), Vec::new())),
            clock: MonotonicClock::new(),
        })
    }

    /// The router requested `subject`, to be asked of `parent` (this node's stratum `stratum`):
    /// `("subscribe", parent)` (subscribe upstream now), `("image", flags, payload)` (answer from
    /// the cache), `("refused",)` (the cache is full) or `None` (subscribed, no image yet).
    fn subscribe<'py>(
        &self,
        py: Python<'py>,
        subject: &Bound<'_, PyAny>,
        parent: &Bound<'_, PyAny>,
        stratum: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let subject = str_argument("subject", subject)?;
        let parent = str_argument("parent", parent)?;
        let stratum = super::args::int_in("stratum", stratum, 0u32, u32::MAX)?;
        let mut guard = self.lock();
        let (cache, names) = &mut *guard;
        let index = node_index(names, parent);
        let Some(action) = cache.subscribe(subject, index, stratum) else { return Ok(None) };
        let answer = match action {
            CacheAction::SubscribeAt { node, .. } => ("subscribe", names[node].clone()).into_pyobject(py)?,
            CacheAction::Image { flags, payload } => ("image", flags, PyBytes::new(py, &payload)).into_pyobject(py)?,
            CacheAction::Refused => ("refused",).into_pyobject(py)?,
            CacheAction::UnsubscribeAt { .. } => return Ok(None),
        };
        Ok(Some(answer))
    }

    /// DATA for `subject` from node `parent`: True when it is to be relayed to the router (a
    /// local subscriber holds the subject; it came from the subject's parent).
    fn on_data(
        &self,
        parent: &Bound<'_, PyAny>,
        subject: &Bound<'_, PyAny>,
        flags: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let parent = str_argument("parent", parent)?;
        let subject = str_argument("subject", subject)?;
        let flags = super::args::int_in("flags", flags, 0u16, u16::MAX)?;
        let payload = payload.cast::<PyBytes>().map_err(|_| expected("payload", "bytes", payload))?;
        let mut guard = self.lock();
        let (cache, names) = &mut *guard;
        let index = node_index(names, parent);
        Ok(cache.on_data(index, subject, flags, payload.as_bytes()))
    }

    /// The router discarded `subject` (its last local subscriber left): it idles from now.
    fn unsubscribe(&self, subject: &Bound<'_, PyAny>) -> PyResult<()> {
        let subject = str_argument("subject", subject)?;
        let now = self.clock.now();
        self.lock().0.unsubscribe(subject, now);
        Ok(())
    }

    /// Entries idle past the expiry, dropped: `(parent, subject)` to unsubscribe upstream.
    fn expire(&self) -> Vec<(String, String)> {
        let now = self.clock.now();
        let mut guard = self.lock();
        let (cache, names) = &mut *guard;
        cache
            .tick(now)
            .into_iter()
            .filter_map(|action| match action {
                CacheAction::UnsubscribeAt { node, subject } => Some((names[node].clone(), subject)),
                _ => None,
            })
            .collect()
    }

    /// Forgets `subject` without unsubscribing (the parent refused it); returns its parent.
    fn forget(&self, subject: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let subject = str_argument("subject", subject)?;
        let mut guard = self.lock();
        let (cache, names) = &mut *guard;
        Ok(cache.forget(subject).map(|node| names[node].clone()))
    }

    /// The parent `subject` is subscribed at (`None`: not cached).
    fn parent(&self, subject: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let subject = str_argument("subject", subject)?;
        let guard = self.lock();
        let (cache, names) = &*guard;
        Ok(cache.parent(subject).map(|node| names[node].clone()))
    }

    /// `(subjects cached, of which idle)`.
    fn sizes(&self) -> (usize, usize) {
        let guard = self.lock();
        (guard.0.len(), guard.0.idle())
    }
}

/// The payload of a publish naming its message `domain` (`SUBJECT_FLAG_DOMAIN`): the domain
/// before `payload`; `ConfigError` saying why when `domain` is not a domain name.
#[pyfunction]
fn subject_with_domain<'py>(
    py: Python<'py>,
    domain: &Bound<'py, PyAny>,
    payload: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let domain = str_argument("domain", domain)?;
    let payload = payload.cast::<PyBytes>().map_err(|_| expected("payload", "bytes", payload))?;
    let bytes = with_domain(domain, payload.as_bytes()).map_err(config_error)?;
    Ok(PyBytes::new(py, &bytes))
}

/// The domain a publish's payload names (`SUBJECT_FLAG_DOMAIN`, [`subject_with_domain`]) and
/// the payload after it; `None` when it does not start with a well-formed domain.
#[pyfunction]
fn subject_domain<'py>(
    py: Python<'py>,
    payload: &Bound<'py, PyAny>,
) -> PyResult<Option<(String, Bound<'py, PyBytes>)>> {
    let payload = payload.cast::<PyBytes>().map_err(|_| expected("payload", "bytes", payload))?;
    Ok(crate::subjects::codec::split_domain(payload.as_bytes())
        .map(|(domain, body)| (domain.to_owned(), PyBytes::new(py, body))))
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<SubjectRouterCore>()?;
    module.add_class::<SubjectSubscriberCore>()?;
    module.add_class::<SubjectSourceCore>()?;
    module.add_class::<RouterStatusInfo>()?;
    module.add_class::<FaucetLogInfo>()?;
    module.add_class::<SubscriberEvictedInfo>()?;
    module.add_class::<SourceStateInfo>()?;
    module.add_class::<SubjectDelivery>()?;
    module.add_class::<SubjectPeerCounters>()?;
    module.add_class::<ClusterForwardQueues>()?;
    module.add_class::<ClusterSlaveCache>()?;
    module.add("SUBJECT_FLAG_IMAGE", FLAG_IMAGE)?;
    module.add("SUBJECT_FLAG_UPDATE", FLAG_UPDATE)?;
    module.add("SUBJECT_FLAG_NODATA_UNAVAILABLE", FLAG_NODATA_UNAVAILABLE)?;
    module.add("SUBJECT_FLAG_NODATA_NOTFOUND", FLAG_NODATA_NOTFOUND)?;
    module.add("SUBJECT_FLAG_STATUS", FLAG_STATUS)?;
    module.add("SUBJECT_FLAG_REFUSED", FLAG_REFUSED)?;
    module.add("SUBJECT_FLAG_PUBLISH", FLAG_PUBLISH)?;
    module.add("SUBJECT_FLAG_ERASE", FLAG_ERASE)?;
    module.add("SUBJECT_FLAG_DOMAIN", FLAG_DOMAIN)?;
    module.add_function(wrap_pyfunction!(subject_with_domain, module)?)?;
    module.add_function(wrap_pyfunction!(subject_domain, module)?)?;
    module.add("SUBJECT_ORIGIN_LENGTH", ORIGIN_LENGTH)?;
    module.add("FORWARD_WARNING", FORWARD_WARNING)?;
    module.add("FORWARD_CLEARED", FORWARD_CLEARED)?;
    module.add("FORWARD_RESYNC", FORWARD_RESYNC)?;
    module.add("CLUSTER_SOURCE_PREFIX", crate::subjects::cluster::CLUSTER_SOURCE_PREFIX)?;
    module.add("CLUSTER_MIRROR_SOURCE_LABEL", crate::subjects::cluster::MIRROR_SOURCE_LABEL)?;
    module.add("ROUTER_BACKLOG_BUDGET", DEFAULT_BACKLOG_BUDGET)?;
    module.add("CLUSTER_NODE_NAME_PREFIX", crate::subjects::cluster::NODE_NAME_PREFIX)?;
    module.add("CLUSTER_PTP_LINK_PREFIX", crate::subjects::cluster::PTP_LINK_PREFIX)?;
    module.add("CLUSTER_NODE_WATCH_PREFIX", crate::subjects::cluster::NODE_WATCH_PREFIX)?;
    module.add("CLUSTER_NODE_INFO_SUBJECT_PREFIX", crate::subjects::cluster::NODE_INFO_SUBJECT_PREFIX)?;
    module.add("CLUSTER_NODE_INFO_SUBJECT_SUFFIX", crate::subjects::cluster::NODE_INFO_SUBJECT_SUFFIX)?;
    let states: Vec<&str> = crate::subjects::cluster::ConnectionState::ALL.iter().map(|s| s.name()).collect();
    module.add("CLUSTER_CONNECTION_STATES", states)?;
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

record! {
    /// A router's counters (hostile input is counted and ignored) and its members
    /// (`SubjectRouterCore.status`).
    pub struct RouterStatusInfo {
        /// Transport messages holding a malformed record.
        malformed: u64,
        /// Well-formed records of a kind the router never accepts, or from the wrong party.
        refused: u64,
        /// DATA for a subject nobody subscribes to, or from a source that does not serve it.
        stale_data: u64,
        /// UNSUBSCRIBEs for a subscription the subscriber does not hold.
        unknown_unsubscribes: u64,
        /// SUBSCRIBEs for subjects no data service covers (answered NODATA notfound).
        no_service: u64,
        /// Heartbeats from another namespace.
        foreign: u64,
        /// Log entries dropped because nobody drained them.
        log_dropped: u64,
        /// Updates relayed (one per subscriber delivery).
        relayed: u64,
        /// New subjects routed.
        routed: u64,
        /// SUBSCRIBEs refused by a bound (each reported to its subscriber).
        refused_subscribes: u64,
        /// SUBSCRIBEs for a subject the subscriber already holds (ignored).
        duplicate_subscribes: u64,
        /// Subscribers dropped because the backlogs were over their budget.
        evicted_subscribers: u64,
        /// SUBSCRIBEs refused from a cluster node id that is not configured (`not-allowed`).
        not_allowed: u64,
        /// Control-stream messages that did not decode (or were not heartbeats).
        control_malformed: u64,
        /// Records for a destination whose endpoint is unknown or whose publication failed.
        unroutable: u64,
        /// Records dropped by the backlogs (backlog or budget full, destination gone, refused).
        dropped_records: u64,
        /// Transport messages sent.
        messages_sent: u64,
        /// Bytes all backlogs hold now (at most the budget).
        backlog_bytes: usize,
        /// Version-1 messages while a secret is configured.
        auth_unauthenticated: u64,
        /// Version-2 messages while no secret is configured.
        auth_unverifiable: u64,
        /// Bad tags and truncated trailers.
        auth_bad_tag: u64,
        /// Replays.
        auth_replayed: u64,
        /// Whether the router holds a secret.
        authenticated: bool,
        /// Subscribed subjects.
        subjects: usize,
        /// Registered subscribers.
        subscribers: usize,
        /// Remembered affinities.
        affinities: usize,
        /// Per table member: (label, up).
        members: Vec<(String, bool)>,
    }
}

record! {
    /// A `SubjectRouterCore.drain_log` entry: a faucet announcement (also published on the
    /// control topic as `json`).
    pub struct FaucetLogInfo {
        /// `AMPS_AFFINITY_ACTION` (`enlist`, `assign`, `unassign`, `no_handlers`).
        action: &'static str,
        /// `AMPS_TOPIC`.
        topic: String,
        /// The publisher's client name (`None` for `no_handlers`).
        client_name: Option<String>,
        /// The publisher's connection name.
        connection_name: Option<String>,
        /// The subscriber's client name (announcements `all` only).
        subscriber_client_name: Option<String>,
        /// The subscriber's connection name.
        subscriber_connection_name: Option<String>,
        /// The announcement as published.
        json: String,
    }
}

record! {
    /// A `SubjectRouterCore.drain_log` entry: a subscriber dropped because the router's
    /// backlogs reached their budget and its backlog was the largest.
    pub struct SubscriberEvictedInfo {
        /// The subscriber's name.
        name: String,
        /// Its connection name.
        connection_name: String,
        /// The bytes its backlog held.
        backlog_bytes: usize,
    }
}

record! {
    /// A `SubjectRouterCore.drain_log` entry: a source joined (`up`), was lost or left, or was
    /// not let in (`refused`).
    pub struct SourceStateInfo {
        /// The source's label.
        label: String,
        /// Its connection name.
        connection_name: String,
        /// Whether it joined.
        up: bool,
        /// Why it was not let in (its label claims a cluster node that is not configured:
        /// `not-allowed`), or `None`.
        refused: Option<String>,
    }
}

record! {
    /// A record a subscriber or source received (`poll`).
    pub struct SubjectDelivery {
        /// `SUBJECT_KIND_DATA`, `SUBJECT_KIND_REQUEST` or `SUBJECT_KIND_DISCARD`.
        kind: u8,
        /// DATA flags (`SUBJECT_FLAG_*`).
        flags: u16,
        /// The subject.
        subject: String,
        /// The payload.
        payload: Py<PyBytes>,
    }
}

record! {
    /// A subscriber's or source's counters (`counters()`).
    pub struct SubjectPeerCounters {
        /// Inbox messages holding a malformed record.
        malformed: u64,
        /// Records received.
        received: u64,
        /// Records dropped because the router's publication never accepted them.
        dropped_records: u64,
        /// Moves to another router, or restores at a restarted one.
        router_switches: u64,
        /// Version-1 messages while a secret is configured.
        auth_unauthenticated: u64,
        /// Version-2 messages while no secret is configured.
        auth_unverifiable: u64,
        /// Bad tags and truncated trailers.
        auth_bad_tag: u64,
        /// Replays.
        auth_replayed: u64,
    }
}

#[pymethods]
impl SubjectRouterCore {
    /// Starts a router: takes the routing tables out of `table` (left empty), optional faucet
    /// `(control_topic, subscription_topic, announcements, coverage_option)`; `backlog_budget`:
    /// bytes all backlogs together may hold; `secret`: the router secret (bytes) or `None`;
    /// `cluster_nodes`: as a cluster node, the other nodes' ids that may subscribe here.
    #[new]
    #[pyo3(signature = (client, table, listen, *, faucet=None, control=None, liveness_timeout_ms=GROUP_LIVENESS_TIMEOUT_MS, heartbeat_interval_ms=GROUP_HEARTBEAT_INTERVAL_MS, backlog_budget=DEFAULT_BACKLOG_BUDGET, secret=None, forward=None, cluster_nodes=None))]
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
        cluster_nodes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let client = Client::argument(client)?;
        let cluster_nodes = cluster_nodes.map(|nodes| strings_argument("cluster_nodes", nodes)).transpose()?;
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
        let inner = py
            .detach(|| RouterRuntime::start_node(client, table, faucet, &options, cluster_nodes))
            .map_err(subjects_error)?;
        Ok(SubjectRouterCore { inner })
    }

    /// The router's member id.
    #[getter]
    fn id(&self) -> u64 {
        self.inner.id()
    }

    /// Replaces the node ids other cluster nodes may subscribe as (a reloaded cluster
    /// configuration); from the router's next tick, 10 ms at most.
    fn set_cluster_nodes(&self, nodes: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set_cluster_nodes(strings_argument("cluster_nodes", nodes)?);
        Ok(())
    }

    /// Takes the log entries made since the last call, as records: `RoutingEventInfo`,
    /// `FaucetLogInfo`, `SubscriberEvictedInfo` or `SourceStateInfo`.
    fn drain_log(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let labels = self.inner.labels();
        let label = |m: crate::routing::MemberId| labels.get(m.index()).map(String::as_str);
        let mut entries = Vec::new();
        for entry in self.inner.drain_log() {
            let entry = match entry {
                LogEntry::Routing(event) => Bound::new(py, routing_event(&event, label))?.into_any(),
                LogEntry::Faucet(event) => {
                    let json = event.to_json();
                    let FaucetEvent { action, topic, publisher, subscriber } = event;
                    let record = FaucetLogInfo {
                        action: action.name(),
                        topic: topic.to_string(),
                        client_name: publisher.as_ref().map(|p| p.name.to_string()),
                        connection_name: publisher.as_ref().map(|p| connection_name(p.id)),
                        subscriber_client_name: subscriber.as_ref().map(|p| p.name.to_string()),
                        subscriber_connection_name: subscriber.as_ref().map(|p| connection_name(p.id)),
                        json,
                    };
                    Bound::new(py, record)?.into_any()
                }
                LogEntry::SubscriberEvicted(name, id, backlog_bytes) => {
                    let record = SubscriberEvictedInfo {
                        name: name.to_string(),
                        connection_name: connection_name(id),
                        backlog_bytes,
                    };
                    Bound::new(py, record)?.into_any()
                }
                LogEntry::SourceUp(label, id) => {
                    let record = SourceStateInfo {
                        label: label.to_string(),
                        connection_name: connection_name(id),
                        up: true,
                        refused: None,
                    };
                    Bound::new(py, record)?.into_any()
                }
                LogEntry::SourceDown(label, id) => {
                    let record = SourceStateInfo {
                        label: label.to_string(),
                        connection_name: connection_name(id),
                        up: false,
                        refused: None,
                    };
                    Bound::new(py, record)?.into_any()
                }
                LogEntry::SourceRefused(label, id, reason) => {
                    let record = SourceStateInfo {
                        label: label.to_string(),
                        connection_name: connection_name(id),
                        up: false,
                        refused: Some(reason.to_string()),
                    };
                    Bound::new(py, record)?.into_any()
                }
            };
            entries.push(entry.unbind());
        }
        Ok(entries)
    }

    /// The latest counters and member states.
    fn status(&self) -> RouterStatusInfo {
        let RouterStatus { counters, runtime, subjects, subscribers, affinities, members, authenticated } =
            self.inner.status();
        let RouterCounters {
            malformed,
            refused,
            stale_data,
            unknown_unsubscribes,
            no_service,
            foreign,
            log_dropped,
            relayed,
            routed,
            refused_subscribes,
            duplicate_subscribes,
            evicted_subscribers,
            not_allowed,
        } = counters;
        let RouterRuntimeCounters {
            control_malformed,
            unroutable,
            dropped_records,
            messages_sent,
            backlog_bytes,
            auth,
        } = runtime;
        let AuthCounters { unauthenticated, unverifiable, bad_tag, replayed } = auth;
        RouterStatusInfo {
            malformed,
            refused,
            stale_data,
            unknown_unsubscribes,
            no_service,
            foreign,
            log_dropped,
            relayed,
            routed,
            refused_subscribes,
            duplicate_subscribes,
            evicted_subscribers,
            not_allowed,
            control_malformed,
            unroutable,
            dropped_records,
            messages_sent,
            backlog_bytes,
            auth_unauthenticated: unauthenticated,
            auth_unverifiable: unverifiable,
            auth_bad_tag: bad_tag,
            auth_replayed: replayed,
            authenticated,
            subjects,
            subscribers,
            affinities,
            members,
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

/// A peer's counters.
fn peer_counters(peer: &SubjectPeer) -> SubjectPeerCounters {
    let PeerCounters { malformed, received, dropped_records, router_switches, auth } = peer.counters();
    let AuthCounters { unauthenticated, unverifiable, bad_tag, replayed } = auth;
    SubjectPeerCounters {
        malformed,
        received,
        dropped_records,
        router_switches,
        auth_unauthenticated: unauthenticated,
        auth_unverifiable: unverifiable,
        auth_bad_tag: bad_tag,
        auth_replayed: replayed,
    }
}

fn poll(py: Python<'_>, peer: &SubjectPeer, limit: usize) -> PyResult<Vec<SubjectDelivery>> {
    let deliveries = py.detach(|| peer.poll(limit)).map_err(subjects_error)?;
    Ok(deliveries
        .into_iter()
        .map(|Delivery { kind, flags, subject, payload }| SubjectDelivery {
            kind: kind as u8,
            flags,
            subject,
            payload: PyBytes::new(py, &payload).unbind(),
        })
        .collect())
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
    #[pyo3(signature = (client, routers, *, name, host="127.0.0.1", heartbeat_interval_ms=GROUP_HEARTBEAT_INTERVAL_MS, liveness_timeout_ms=GROUP_LIVENESS_TIMEOUT_MS, secret=None))]
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

    /// The records received.
    fn poll(&self, py: Python<'_>, limit: &Bound<'_, PyAny>) -> PyResult<Vec<SubjectDelivery>> {
        poll(py, self.inner.peer(), usize_argument("limit", limit)?)
    }

    /// The counters.
    fn counters(&self) -> SubjectPeerCounters {
        peer_counters(self.inner.peer())
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
    #[pyo3(signature = (client, routers, *, label, host="127.0.0.1", heartbeat_interval_ms=GROUP_HEARTBEAT_INTERVAL_MS, liveness_timeout_ms=GROUP_LIVENESS_TIMEOUT_MS, secret=None))]
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

    /// Sends DATA with `flags` (`SUBJECT_FLAG_*`); False when the link to the router is full.
    fn send_data(
        &self,
        subject: &Bound<'_, PyAny>,
        flags: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let subject = str_argument("subject", subject)?;
        let flags = super::args::int_in("flags", flags, 0u16, u16::MAX)?;
        let payload = payload.cast::<PyBytes>().map_err(|_| expected("payload", "bytes", payload))?;
        self.inner.send_data(subject, flags, payload.as_bytes()).map_err(subjects_error)
    }

    /// Whether the router in use was heard since the last move, within the liveness timeout.
    #[getter]
    fn router_live(&self) -> bool {
        self.inner.peer().is_router_live()
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

    /// The records received (REQUEST 3, DISCARD 4, DATA 5).
    fn poll(&self, py: Python<'_>, limit: &Bound<'_, PyAny>) -> PyResult<Vec<SubjectDelivery>> {
        poll(py, self.inner.peer(), usize_argument("limit", limit)?)
    }

    /// The counters.
    fn counters(&self) -> SubjectPeerCounters {
        peer_counters(self.inner.peer())
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

/// A cluster node's forward queues (`crate::subjects::cluster::ForwardQueues`, wrapped by
/// `affinity.cluster_node`): publishes per master, queued while it is unreachable, bounded in
/// bytes, flushed in order. Queued publishes are subject records (the subject codec).
#[pyclass(module = "affinity._affinity", frozen)]
pub struct ClusterForwardQueues {
    inner: std::sync::Mutex<(ForwardQueues, Vec<String>)>,
}

impl ClusterForwardQueues {
    fn lock(&self) -> std::sync::MutexGuard<'_, (ForwardQueues, Vec<String>)> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Hands a record to a link's `send(subject, flags, payload)` (a source core's `send_data`):
/// whether the link took it. An exception is kept in `failure`, and nothing is sent after one.
fn send_to_link(
    send: &Bound<'_, PyAny>,
    subject: &str,
    flags: u16,
    payload: &Bound<'_, PyBytes>,
    failure: &mut Option<PyErr>,
) -> bool {
    if failure.is_some() {
        return false;
    }
    match send.call1((subject, flags, payload)).and_then(|taken| taken.is_truthy()) {
        Ok(taken) => taken,
        Err(error) => {
            *failure = Some(error);
            false
        }
    }
}

/// The queue key of `master` (interned in `names`), or of `domain` without a master.
fn queue_key(names: &mut Vec<String>, master: Option<&str>, domain: &str) -> QueueKey {
    match master {
        Some(master) => QueueKey::Node(node_index(names, master)),
        None => QueueKey::Domain(domain.to_owned()),
    }
}

#[pymethods]
impl ClusterForwardQueues {
    /// Queues of at most `bound` bytes each.
    #[new]
    fn new(bound: &Bound<'_, PyAny>) -> PyResult<Self> {
        let bound = usize_argument("bound", bound)?;
        Ok(ClusterForwardQueues { inner: std::sync::Mutex::new((ForwardQueues::new(bound), Vec::new())) })
    }

    /// A publish of `origin` for `master` (`None`: the domain has no master yet): `"sent"`
    /// (`send(subject, flags, payload)`, the master's link, took it: it returns False when the
    /// link is full), `"queued"` or `"full"` (refused: back-pressure). Without `send` nothing is
    /// sent (queued even when `reachable`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (master, domain, origin, subject, flags, payload, reachable, send=None))]
    fn publish(
        &self,
        master: Option<&Bound<'_, PyAny>>,
        domain: &Bound<'_, PyAny>,
        origin: &Bound<'_, PyAny>,
        subject: &Bound<'_, PyAny>,
        flags: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        reachable: &Bound<'_, PyAny>,
        send: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<&'static str> {
        let master = optional_str("master", master)?;
        let domain = str_argument("domain", domain)?;
        let origin = super::args::int_in("origin", origin, 0u64, u64::MAX)?;
        let subject = str_argument("subject", subject)?;
        let flags = super::args::int_in("flags", flags, 0u16, u16::MAX)?;
        let payload = payload.cast::<PyBytes>().map_err(|_| expected("payload", "bytes", payload))?;
        let reachable = super::args::bool_argument("reachable", reachable)?;
        if let Some(send) = send {
            super::args::callable_argument("send", send)?;
        }
        let record =
            SubjectRecord { kind: RecordKind::Data, flags, sender: origin, subject, payload: payload.as_bytes() };
        let mut bytes = Vec::with_capacity(record.encoded_length());
        record.emit(&mut bytes).map_err(|e| config_error(e.to_string()))?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let key = queue_key(names, master, domain);
        let mut failure = None;
        let outcome = queues.publish(key, origin, &bytes, reachable, |_| {
            send.is_some_and(|send| send_to_link(send, subject, flags, payload, &mut failure))
        });
        match failure {
            Some(error) => Err(error),
            None => Ok(forwarded_name(outcome)),
        }
    }

    /// A publish of `origin` for every master of a domain (mirrored masters): `targets` are
    /// `(master, reachable, send)` triples, `send(subject, flags, payload)` the master's link
    /// (False when it is full); one answer per target, `"sent"` (its link took it), `"queued"`
    /// or `"dropped"` (a stale mirror), or `"full"` for every one (refused for all:
    /// back-pressure). `taken_here`: this node is a master of the domain too and relayed the
    /// publish itself.
    #[pyo3(signature = (targets, origin, subject, flags, payload, taken_here=None))]
    fn publish_all(
        &self,
        targets: &Bound<'_, PyAny>,
        origin: &Bound<'_, PyAny>,
        subject: &Bound<'_, PyAny>,
        flags: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        taken_here: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<&'static str>> {
        let triples: Vec<(String, bool, Bound<'_, PyAny>)> = targets
            .extract()
            .map_err(|_| expected("targets", "a list of (master, reachable, send) triples", targets))?;
        for (_, _, send) in &triples {
            super::args::callable_argument("send", send)?;
        }
        let origin = super::args::int_in("origin", origin, 0u64, u64::MAX)?;
        let subject = str_argument("subject", subject)?;
        let flags = super::args::int_in("flags", flags, 0u16, u16::MAX)?;
        let payload = payload.cast::<PyBytes>().map_err(|_| expected("payload", "bytes", payload))?;
        let taken_here = match taken_here {
            Some(value) => super::args::bool_argument("taken_here", value)?,
            None => false,
        };
        let record =
            SubjectRecord { kind: RecordKind::Data, flags, sender: origin, subject, payload: payload.as_bytes() };
        let mut bytes = Vec::with_capacity(record.encoded_length());
        record.emit(&mut bytes).map_err(|e| config_error(e.to_string()))?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let keys: Vec<(QueueKey, bool)> =
            triples.iter().map(|(master, reachable, _)| (queue_key(names, Some(master), ""), *reachable)).collect();
        let mut failure = None;
        let outcomes = queues.publish_all(&keys, origin, &bytes, taken_here, |index, _| {
            send_to_link(&triples[index].2, subject, flags, payload, &mut failure)
        });
        match failure {
            Some(error) => Err(error),
            None => Ok(outcomes.into_iter().map(forwarded_name).collect()),
        }
    }

    /// Hands `master`'s queued publishes to `send(subject, flags, payload)`, in order, while it
    /// returns True; returns how many went.
    fn flush(&self, master: &Bound<'_, PyAny>, send: &Bound<'_, PyAny>) -> PyResult<usize> {
        let master = str_argument("master", master)?;
        super::args::callable_argument("send", send)?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let key = queue_key(names, Some(master), "");
        let mut failure = None;
        let sent = queues.flush(&key, |bytes| {
            let Ok((record, _)) = SubjectRecord::parse(bytes) else { return false };
            let payload = PyBytes::new(send.py(), record.payload);
            send_to_link(send, record.subject, record.flags, &payload, &mut failure)
        });
        match failure {
            Some(error) => Err(error),
            None => Ok(sent),
        }
    }

    /// What origins must be told since the last call, in order: `(origin, "warning" | "cleared")`.
    fn notices(&self) -> Vec<(u64, &'static str)> {
        let notices = self.lock().0.take_notices();
        notices
            .into_iter()
            .map(|(origin, notice)| {
                (
                    origin,
                    match notice {
                        Notice::Warning => "warning",
                        Notice::Cleared => "cleared",
                    },
                )
            })
            .collect()
    }

    /// `(publishes, bytes)` queued for `master`.
    fn queued(&self, master: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
        let master = str_argument("master", master)?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let key = queue_key(names, Some(master), "");
        Ok((queues.queued_count(&key), queues.queued_bytes(&key)))
    }

    /// `(publishes, bytes)` queued under `domain`, which has no master yet.
    fn queued_without_master(&self, domain: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
        let domain = str_argument("domain", domain)?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let key = queue_key(names, None, domain);
        Ok((queues.queued_count(&key), queues.queued_bytes(&key)))
    }

    /// Counters since start: `sent`, `queued`, `flushed`, `refused`, `dropped`.
    fn counters(&self) -> std::collections::BTreeMap<&'static str, u64> {
        forward_counters(self.lock().0.counters())
    }

    /// The counters of `master`'s queue since start (as [`Self::counters`]).
    fn counters_for(&self, master: &Bound<'_, PyAny>) -> PyResult<std::collections::BTreeMap<&'static str, u64>> {
        let master = str_argument("master", master)?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let key = queue_key(names, Some(master), "");
        Ok(forward_counters(queues.counters_for(&key)))
    }

    /// Whether `master` is a stale mirrored master (its queue dropped, not reachable since).
    fn is_stale(&self, master: &Bound<'_, PyAny>) -> PyResult<bool> {
        let master = str_argument("master", master)?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let key = queue_key(names, Some(master), "");
        Ok(queues.is_stale(&key))
    }

    /// Queues dropped and stale masters back since the last call, in order:
    /// `("dropped", master, publishes, [], 0)` or `("back", master, missed, resync, unlisted)`
    /// (`resync`: the `(origin, subject)` pairs it missed publishes of, bounded; `unlisted`:
    /// pairs past the bound).
    #[allow(clippy::type_complexity)]
    fn events(&self) -> Vec<(&'static str, String, u64, Vec<(u64, String)>, u64)> {
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let name = |key: &QueueKey| match key {
            QueueKey::Node(index) => names.get(*index).cloned().unwrap_or_default(),
            QueueKey::Domain(domain) => domain.clone(),
        };
        queues
            .take_events()
            .iter()
            .map(|event| match event {
                QueueEvent::Dropped { key, publishes } => ("dropped", name(key), *publishes, Vec::new(), 0),
                QueueEvent::Back { key, missed, resync, unlisted } => {
                    ("back", name(key), *missed, resync.clone(), *unlisted)
                }
            })
            .collect()
    }

    /// `domain`, which had no master, got `masters`: its queue moves to each one's, to flush in
    /// order when that master is reachable; returns how many publishes moved.
    fn assign(&self, domain: &Bound<'_, PyAny>, masters: &Bound<'_, PyAny>) -> PyResult<usize> {
        let domain = str_argument("domain", domain)?;
        let masters: Vec<String> = masters.extract().map_err(|_| expected("masters", "a list of node ids", masters))?;
        let mut guard = self.lock();
        let (queues, names) = &mut *guard;
        let keys: Vec<usize> = masters.iter().map(|master| node_index(names, master)).collect();
        Ok(queues.assign(domain, &keys))
    }
}
