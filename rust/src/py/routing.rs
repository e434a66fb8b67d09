//! Bindings for `crate::routing`: conversion and error mapping only.
//!
//! The Python wrapper `affinity.routing` builds its dataclasses from the records returned here
//! (`LegInfo`, `ExplanationInfo`, `RoutingEventInfo`, declared with `records::record!`).

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use super::args::{
    bool_argument, expected, named, sequence_argument, str_argument, string_argument, strings_argument, usize_argument,
};
use super::errors::{self, invalid_argument, policy_error, regex_error, routing_error};
use super::records::record;
use crate::routing::policy::{builtin, builtin_names, Policy, PolicyError, Request};
use crate::routing::{
    self, Event, Explanation, GroupId, LegDecision, MemberId, NoDataStatus, Reason, RoutingError, RoutingTable,
    Selection, ServiceId, SourceGroupSpec,
};

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyPosixRegex>()?;
    module.add_class::<PyRoutingTable>()?;
    module.add_class::<LegInfo>()?;
    module.add_class::<ExplanationInfo>()?;
    module.add_class::<RoutingEventInfo>()?;
    module.add_function(wrap_pyfunction!(affinity_hash, module)?)?;
    module.add_function(wrap_pyfunction!(select_member, module)?)?;
    module.add("HASH_VERSION", routing::HASH_VERSION)?;
    let py = module.py();
    module.add("BUILTIN_POLICIES", PyTuple::new(py, builtin_names().collect::<Vec<_>>())?)?;
    module.add("SELECTIONS", PyTuple::new(py, Selection::ALL.map(Selection::name))?)?;
    module.add("MAX_PATTERN_POSITIONS", routing::posix_regex::MAX_PATTERN_POSITIONS)?;
    Ok(())
}

fn to_py_error(_py: Python<'_>, error: RoutingError) -> PyErr {
    routing_error(error)
}

fn parse_selection(name: &str) -> PyResult<Selection> {
    Selection::parse(name).ok_or_else(|| {
        let known: Vec<&str> = Selection::ALL.map(Selection::name).to_vec();
        errors::config_error(format!("unknown selection {name:?} ({})", known.join(", ")))
    })
}

/// `affinity_hash(composite)`: the version-1 affinity hash (docs/hash-spec.md).
#[pyfunction]
fn affinity_hash(composite: &Bound<'_, PyAny>) -> PyResult<u64> {
    Ok(routing::affinity_hash(str_argument("composite", composite)?))
}

/// `select_member(composite, members, selection)`: the member `selection` picks.
#[pyfunction]
#[pyo3(signature = (composite, members, selection = "modulo"))]
fn select_member(
    composite: &Bound<'_, PyAny>,
    members: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = named::selection)] selection: &str,
) -> PyResult<String> {
    let composite = str_argument("composite", composite)?;
    let members = strings_argument("members", members)?;
    let index = parse_selection(selection)?
        .select(composite, &members)
        .ok_or_else(|| invalid_argument("no member to select from"))?;
    Ok(members[index].clone())
}

/// A POSIX extended regular expression compiled by glibc (`sed -r` semantics).
#[pyclass(name = "PosixRegex", module = "affinity._affinity", frozen)]
struct PyPosixRegex {
    inner: routing::PosixRegex,
}

#[pymethods]
impl PyPosixRegex {
    #[new]
    fn new(pattern: &Bound<'_, PyAny>) -> PyResult<Self> {
        routing::PosixRegex::new(str_argument("pattern", pattern)?)
            .map(|inner| PyPosixRegex { inner })
            .map_err(regex_error)
    }

    #[getter]
    fn pattern(&self) -> &str {
        self.inner.pattern()
    }

    #[getter]
    fn group_count(&self) -> usize {
        self.inner.group_count()
    }

    fn capture<'s>(&self, subject: &'s Bound<'_, PyAny>) -> PyResult<Option<&'s str>> {
        Ok(self.inner.capture(str_argument("subject", subject)?))
    }

    fn is_match(&self, subject: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.inner.is_match(str_argument("subject", subject)?))
    }

    fn __repr__(&self) -> String {
        format!("PosixRegex({:?})", self.inner.pattern())
    }
}

/// A Python object used as a policy: `object.select(key, candidates) -> label`, or a callable
/// `object(key, candidates) -> label`.
struct PythonPolicy {
    object: Py<PyAny>,
    name: String,
}

impl Policy for PythonPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn reason(&self) -> Reason {
        Reason::Policy
    }

    fn select(&self, request: &Request<'_>) -> Result<usize, PolicyError> {
        Python::attach(|py| {
            let labels: Vec<&str> = request.candidates.iter().map(|c| c.label).collect();
            let object = self.object.bind(py);
            let answer = if object.hasattr("select").unwrap_or(false) {
                object.call_method1("select", (request.key, labels.clone()))
            } else {
                object.call1((request.key, labels.clone()))
            };
            let answer = answer.map_err(|error| PolicyError(format!("raised {error}")))?;
            let label: String =
                answer.extract().map_err(|_| PolicyError(format!("answered {answer} instead of a member label")))?;
            labels
                .iter()
                .position(|candidate| *candidate == label)
                .ok_or_else(|| PolicyError(format!("answered unknown member {label:?}")))
        })
    }

    fn decides_composites(&self) -> bool {
        true
    }
}

/// The routing tables (`crate::routing::RoutingTable`); use `affinity.routing.Router`.
#[pyclass(name = "RoutingTable", module = "affinity._affinity")]
pub(super) struct PyRoutingTable {
    pub(super) inner: RoutingTable,
}

impl PyRoutingTable {
    /// Every member's label as a Python string, by member index (batch answers share them).
    fn labels<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyString>> {
        let table = &self.inner;
        table.member_ids().map(|m| PyString::new(py, table.label(m))).collect()
    }

    fn leg(&self, leg: &LegDecision) -> LegInfo {
        let table = &self.inner;
        let LegDecision { group, member, priority_group, composite, rule, reason, since } = leg;
        LegInfo {
            service: table.service_name(table.group_service(*group)).to_owned(),
            source_group: table.group_name(*group).to_owned(),
            member: member.map(|m| table.label(m).to_owned()),
            peer_index: member.map(|m| m.peer_index()),
            priority_group: *priority_group,
            composite: composite.as_deref().map(str::to_owned),
            rule_index: *rule,
            reason: reason.name(),
            since: *since,
        }
    }

    fn legs(&self, legs: &[LegDecision]) -> Vec<LegInfo> {
        legs.iter().map(|leg| self.leg(leg)).collect()
    }

    fn event(&self, event: &Event) -> RoutingEventInfo {
        let table = &self.inner;
        routing_event(event, |m| Some(table.label(m)))
    }

    fn explanation(&self, explanation: &Explanation) -> ExplanationInfo {
        let table = &self.inner;
        let Explanation { service: _, decision, bound_reason, subscribed, references, moved } = explanation;
        let LegInfo { service, source_group, member, peer_index, priority_group, composite, rule_index, reason, since } =
            self.leg(decision);
        let group: GroupId = decision.group;
        let rule = decision.rule.map(|index| table.rule(group, index));
        ExplanationInfo {
            service,
            source_group,
            member,
            peer_index,
            priority_group,
            composite,
            rule_index,
            reason,
            since,
            affinity_key: rule.map(|r| r.0.to_owned()),
            pattern: rule.map(|r| r.1.to_owned()),
            policy: table.group_policy(group).to_owned(),
            selection: table.group_selection(group).name(),
            bound_reason: bound_reason.map(Reason::name),
            subscribed: *subscribed,
            references: *references,
            moved_from: moved.and_then(|m| m.from).map(|m| table.label(m).to_owned()),
            move_reason: moved.map(|m| m.why.name()),
        }
    }
}

record! {
    /// One source group's answer for a subject (`RoutingTable.subscribe` / `route` /
    /// `report_nodata`).
    #[derive(Clone)]
    pub(super) struct LegInfo {
        /// The data service whose include-pattern matched.
        service: String,
        /// The source group.
        source_group: String,
        /// The member serving, `None` when no member is up.
        member: Option<String>,
        /// The member's peer index.
        peer_index: Option<u32>,
        /// Zero-based priority group of the member.
        priority_group: Option<usize>,
        /// The composite (`key:value`), when an affinity rule matched.
        composite: Option<String>,
        /// Zero-based index of the matching affinity rule.
        rule_index: Option<usize>,
        /// Why this member (`sticky`, `hashed`, `failover`, ...).
        reason: &'static str,
        /// Sequence number of the event that bound it.
        since: Option<u64>,
    }
}

record! {
    /// `RoutingTable.explain`: the primary leg (the fields of `LegInfo`) and why.
    pub(super) struct ExplanationInfo {
        /// The data service whose include-pattern matched.
        service: String,
        /// The source group.
        source_group: String,
        /// The member serving, `None` when no member is up.
        member: Option<String>,
        /// The member's peer index.
        peer_index: Option<u32>,
        /// Zero-based priority group of the member.
        priority_group: Option<usize>,
        /// The composite (`key:value`), when an affinity rule matched.
        composite: Option<String>,
        /// Zero-based index of the matching affinity rule.
        rule_index: Option<usize>,
        /// Why this member.
        reason: &'static str,
        /// Sequence number of the event that bound it.
        since: Option<u64>,
        /// The matching rule's affinity key.
        affinity_key: Option<String>,
        /// The matching rule's pattern.
        pattern: Option<String>,
        /// The source group's fallback policy.
        policy: String,
        /// The source group's hash selection.
        selection: &'static str,
        /// How the member was first chosen, when it is remembered.
        bound_reason: Option<&'static str>,
        /// Whether the subject itself is subscribed.
        subscribed: bool,
        /// Subscriptions holding the composite (or the subject).
        references: u32,
        /// The member it last moved from, when known.
        moved_from: Option<String>,
        /// Why it last moved.
        move_reason: Option<&'static str>,
    }
}

record! {
    /// One thing the routing tables did (`RoutingTable.drain_events`, and the routing entries
    /// of `SubjectRouterCore.drain_log`).
    pub(super) struct RoutingEventInfo {
        /// Strictly increasing per table, starting at 1.
        sequence: u64,
        /// `bound`, `moved`, `forgotten`, `no-member-available`, `member-up`, ...
        kind: &'static str,
        /// The subject concerned, if any.
        subject: Option<String>,
        /// The composite concerned, if any.
        composite: Option<String>,
        /// The member now serving (or the member the event is about).
        member: Option<String>,
        /// Its peer index.
        peer_index: Option<u32>,
        /// For `moved`: the member it moved from.
        previous: Option<String>,
        /// Its peer index.
        previous_peer_index: Option<u32>,
        /// How `member` was chosen, or the NODATA outcome.
        reason: Option<&'static str>,
        /// For `moved`: why.
        move_reason: Option<&'static str>,
        /// For `policy-error` and `nodata`: a human-readable detail.
        message: Option<String>,
    }
}

/// A routing event as its record; `label` names a member (`None` when it is unknown).
pub(super) fn routing_event<'a>(event: &Event, label: impl Fn(MemberId) -> Option<&'a str>) -> RoutingEventInfo {
    let Event { sequence, kind, subject, composite, member, previous, reason, move_reason, message } = event;
    RoutingEventInfo {
        sequence: *sequence,
        kind: kind.name(),
        subject: subject.as_deref().map(str::to_owned),
        composite: composite.as_deref().map(str::to_owned),
        member: member.and_then(&label).map(str::to_owned),
        peer_index: member.map(|m| m.peer_index()),
        previous: previous.and_then(&label).map(str::to_owned),
        previous_peer_index: previous.map(|m| m.peer_index()),
        reason: reason.map(Reason::name),
        move_reason: move_reason.map(|r| r.name()),
        message: message.clone(),
    }
}

#[pymethods]
impl PyRoutingTable {
    #[new]
    fn new() -> Self {
        PyRoutingTable { inner: RoutingTable::new() }
    }

    fn add_service(
        &mut self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        include_patterns: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let name = str_argument("name", name)?;
        let include_patterns = strings_argument("include_patterns", include_patterns)?;
        let patterns: Vec<&str> = include_patterns.iter().map(String::as_str).collect();
        self.inner.add_service(name, &patterns).map(ServiceId::index).map_err(|e| to_py_error(py, e))
    }

    #[pyo3(signature = (service, name, priority_groups, rules, policy, selection = "modulo"))]
    #[allow(clippy::too_many_arguments)] // mirrors the Python signature one-to-one
    fn add_source_group(
        &mut self,
        py: Python<'_>,
        service: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        priority_groups: &Bound<'_, PyAny>,
        rules: &Bound<'_, PyAny>,
        policy: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = named::selection)] selection: &str,
    ) -> PyResult<usize> {
        let service = usize_argument("service", service)?;
        let name = string_argument("name", name)?;
        let priority_groups =
            sequence_argument("priority_groups", priority_groups, "a sequence of sequences of str", |item, group| {
                strings_argument(item, group)
            })?;
        let rules = sequence_argument("rules", rules, "a sequence of (key, pattern) pairs", |item, rule| {
            match sequence_argument(item, rule, "a (key, pattern) pair", |part, value| string_argument(part, value))?
                .as_mut_slice()
            {
                [key, pattern] => Ok((std::mem::take(key), std::mem::take(pattern))),
                other => {
                    Err(invalid_argument(format!("{item}: expected a (key, pattern) pair, got {} items", other.len())))
                }
            }
        })?;
        let selection = parse_selection(selection)?;
        const POLICY: &str = "a built-in policy name, a plugin object with select() or a callable";
        let policy: Box<dyn Policy> = match policy.cast::<PyString>() {
            Ok(_) => {
                let policy_name = str_argument("policy", policy)?;
                builtin(policy_name).ok_or_else(|| {
                    let known: Vec<&str> = builtin_names().collect();
                    policy_error(PolicyError(format!(
                        "unknown policy {policy_name:?} (built in: {}; pass a plugin object for others)",
                        known.join(", ")
                    )))
                })?
            }
            Err(_) if !policy.hasattr("select").unwrap_or(false) && !policy.is_callable() => {
                return Err(expected("policy", POLICY, policy));
            }
            Err(_) => {
                let name = match policy.getattr("name").and_then(|n| n.extract::<String>()) {
                    Ok(name) => name,
                    Err(_) => policy.get_type().name()?.to_string(),
                };
                Box::new(PythonPolicy { object: policy.clone().unbind(), name })
            }
        };
        let spec = SourceGroupSpec { name, priority_groups, rules, selection, policy };
        let services = self.inner.service_count();
        if service >= services {
            return Err(invalid_argument(format!("unknown service index {service}")));
        }
        self.inner
            .add_source_group(ServiceId::from_index(service), spec)
            .map(GroupId::index)
            .map_err(|e| to_py_error(py, e))
    }

    fn members(&self) -> Vec<(String, u32, bool)> {
        let table = &self.inner;
        table.member_ids().map(|m| (table.label(m).to_owned(), m.peer_index(), table.is_up(m))).collect()
    }

    fn set_member_up(&mut self, py: Python<'_>, label: &Bound<'_, PyAny>, up: &Bound<'_, PyAny>) -> PyResult<()> {
        let label = str_argument("label", label)?;
        let up = bool_argument("up", up)?;
        self.inner.set_member_up(label, up).map(|_| ()).map_err(|e| to_py_error(py, e))
    }

    fn subscribe(&mut self, py: Python<'_>, subject: &Bound<'_, PyAny>) -> PyResult<Vec<LegInfo>> {
        let subject = str_argument("subject", subject)?;
        let (_, legs) = self.inner.subscribe(subject).map_err(|e| to_py_error(py, e))?;
        Ok(self.legs(&legs))
    }

    fn route(&mut self, py: Python<'_>, subject: &Bound<'_, PyAny>) -> PyResult<Vec<LegInfo>> {
        let subject = str_argument("subject", subject)?;
        let (_, legs) = self.inner.route(subject).map_err(|e| to_py_error(py, e))?;
        Ok(self.legs(&legs))
    }

    /// Member label (or None) of the primary source group for each subject: batch route.
    fn route_members<'py>(
        &mut self,
        py: Python<'py>,
        subjects: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<Bound<'py, PyString>>>> {
        let subjects = strings_argument("subjects", subjects)?;
        let labels = self.labels(py);
        let mut members = Vec::with_capacity(subjects.len());
        for subject in &subjects {
            let member = self.inner.route_member(subject).map_err(|e| to_py_error(py, e))?;
            members.push(member.map(|m| labels[m.index()].clone()));
        }
        Ok(members)
    }

    /// Subscribes each subject; returns the member label (or None) of each primary leg.
    fn subscribe_members<'py>(
        &mut self,
        py: Python<'py>,
        subjects: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<Bound<'py, PyString>>>> {
        let subjects = strings_argument("subjects", subjects)?;
        let labels = self.labels(py);
        let mut members = Vec::with_capacity(subjects.len());
        self.inner.reserve(subjects.len());
        for subject in &subjects {
            let member = self.inner.subscribe_member(subject).map_err(|e| to_py_error(py, e))?;
            members.push(member.map(|m| labels[m.index()].clone()));
        }
        Ok(members)
    }

    fn unsubscribe(&mut self, py: Python<'_>, subject: &Bound<'_, PyAny>) -> PyResult<()> {
        let subject = str_argument("subject", subject)?;
        self.inner.unsubscribe(subject).map_err(|e| to_py_error(py, e))
    }

    fn report_nodata(
        &mut self,
        py: Python<'_>,
        subject: &Bound<'_, PyAny>,
        status: &Bound<'_, PyAny>,
    ) -> PyResult<LegInfo> {
        let subject = str_argument("subject", subject)?;
        let status = str_argument("status", status)?;
        let status = NoDataStatus::parse(status).ok_or_else(|| {
            invalid_argument(format!("unknown NODATA status {status:?} (unavailable, notfound, other)"))
        })?;
        let leg = self.inner.report_nodata(subject, status).map_err(|e| to_py_error(py, e))?;
        Ok(self.leg(&leg))
    }

    fn explain(&mut self, py: Python<'_>, subject: &Bound<'_, PyAny>) -> PyResult<ExplanationInfo> {
        let subject = str_argument("subject", subject)?;
        let explanation = self.inner.explain(subject).map_err(|e| to_py_error(py, e))?;
        Ok(self.explanation(&explanation))
    }

    fn reset(&mut self) {
        self.inner.reset();
    }

    fn drain_events(&mut self) -> Vec<RoutingEventInfo> {
        let events = self.inner.drain_events();
        events.iter().map(|event| self.event(event)).collect()
    }

    /// Drains the event queue like `drain_events`, converting only the events an observer can
    /// still see: every event whose kind is named in `kinds`, and the last `keep` events (in
    /// queue order). The others are dropped unconverted.
    fn drain_events_tail(
        &mut self,
        keep: &Bound<'_, PyAny>,
        kinds: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<RoutingEventInfo>> {
        let keep = usize_argument("keep", keep)?;
        let kinds = strings_argument("kinds", kinds)?;
        let events = self.inner.drain_events();
        let tail = events.len().saturating_sub(keep);
        Ok(events
            .iter()
            .enumerate()
            .filter(|(index, event)| *index >= tail || kinds.iter().any(|kind| kind == event.kind.name()))
            .map(|(_, event)| self.event(event))
            .collect())
    }

    fn affinity(&self, composite: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let composite = str_argument("composite", composite)?;
        Ok(self.inner.affinity(composite).map(|m| self.inner.label(m).to_owned()))
    }
}
