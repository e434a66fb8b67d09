"""``/metrics``: the Prometheus exposition of ``affinity web``, in the OpenMetrics text format,
through the official client library (``prometheus_client``).

A custom collector reads at scrape time: each driver's ``cnc.dat`` afresh (read-only), each
group's status from the server's observer, the last report of each router. Every metric name,
type and label is defined once here (:data:`METRICS`) and documented in
``docs/observability.md`` (a test checks that the two agree). Labels: ``driver`` (directory),
``counter``, ``session``, ``stream``, ``channel``, ``client``, ``group``, ``queue``, ``member``,
``role``, ``state``, ``cause``, ``node`` (a router, named by its listen channel), ``peer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from affinity.exceptions import AffinityError
from affinity.web.drivers import DUTY_CYCLE_LABEL, read_driver
from affinity.web.groups import FAILOVER, HANDOFF, LIVENESS_TIMEOUT_MS
from affinity.web.monitor import Monitor
from affinity.web.routers import STALE_AFTER

#: Units of the metrics (each one the last word of its metrics' names).
UNITS = ("seconds", "bytes")
#: How the collector adds one sample: family name, label values, value.
_Add = Callable[[str, list[str], float], None]


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: name (without the ``_total`` of a counter), type, labels, help."""

    name: str
    kind: str  # "gauge" or "counter"
    labels: tuple[str, ...]
    help: str

    @property
    def unit(self) -> str:
        """The OpenMetrics unit, read from the name's suffix (``_seconds``, ``_bytes``) or empty."""
        return next((unit for unit in UNITS if self.name.endswith(f"_{unit}")), "")


def _g(name: str, labels: tuple[str, ...], text: str) -> MetricSpec:
    return MetricSpec(name, "gauge", labels, text)


def _c(name: str, labels: tuple[str, ...], text: str) -> MetricSpec:
    return MetricSpec(name, "counter", labels, text)


D = ("driver",)
#: The driver's system counters (by their label in ``cnc.dat``) and the metric each one is.
SYSTEM_COUNTERS: dict[str, MetricSpec] = {
    "Commands received": _c("affinity_driver_commands", D, "Client commands read from the ring."),
    "Invalid commands": _c(
        "affinity_driver_invalid_commands", D, "Commands that could not be decoded or were refused."
    ),
    "Client keepalives": _c("affinity_driver_client_keepalives", D, "Client keepalives received."),
    "Client timeouts": _c("affinity_driver_client_timeouts", D, "Clients timed out (died without closing)."),
    "Errors": _c("affinity_driver_errors", D, "Errors recorded in the error log."),
    "Errors dropped (error log full)": _c(
        "affinity_driver_errors_dropped", D, "Distinct errors dropped because the error log was full."
    ),
    DUTY_CYCLE_LABEL: _g("affinity_driver_duty_cycle_max_seconds", D, "Longest conductor duty cycle since start."),
    "IPC publications": _g("affinity_driver_ipc_publications", D, "IPC publications open (lingering ones included)."),
    "Subscriptions": _g("affinity_driver_subscriptions", D, "Subscriptions open."),
    "Clients": _g("affinity_driver_clients", D, "Clients attached."),
    "Invalid data frames": _c("affinity_driver_invalid_data_frames", D, "Malformed data datagrams dropped."),
    "Invalid control frames": _c("affinity_driver_invalid_control_frames", D, "Malformed control frames dropped."),
    "Send errors": _c("affinity_driver_send_errors", D, "Datagrams the socket refused to send."),
    "Dropped driver events": _c("affinity_driver_dropped_events", D, "Driver events dropped (log full)."),
    "Duplicate data frames": _c(
        "affinity_driver_duplicate_data_frames", D, "Data datagrams below the rebuild position."
    ),
    "Overrun data frames": _c("affinity_driver_overrun_data_frames", D, "Data datagrams beyond the receiver window."),
    "Inactive image frames": _c("affinity_driver_inactive_image_frames", D, "Data for an image no longer receiving."),
    "SETUPs refused": _c("affinity_driver_setups_refused", D, "SETUP frames refused."),
    "Images refused": _c("affinity_driver_images_refused", D, "Images refused (subscription full)."),
    "Images ended with data missing": _c(
        "affinity_driver_images_ended_incomplete", D, "Images that ended with data missing."
    ),
    "Network publications": _g("affinity_driver_network_publications", D, "UDP publications open."),
    "Network images": _g("affinity_driver_network_images", D, "Network images open."),
    "Bytes sent": _c("affinity_driver_sent_bytes", D, "Bytes sent on every UDP socket."),
    "Bytes received": _c("affinity_driver_received_bytes", D, "Bytes received on every UDP socket."),
    "NAKs sent": _c("affinity_driver_naks_sent", D, "NAKs sent by images."),
    "NAKs received": _c("affinity_driver_naks_received", D, "NAKs received by publications."),
    "Retransmits sent": _c("affinity_driver_retransmits", D, "Datagrams retransmitted."),
    "Status messages sent": _c("affinity_driver_status_messages_sent", D, "Status messages sent by images."),
    "Status messages received": _c(
        "affinity_driver_status_messages_received", D, "Status messages received by publications."
    ),
    "Heartbeats sent": _c("affinity_driver_heartbeats_sent", D, "Heartbeats sent by publications."),
    "Datagrams sent": _c("affinity_driver_datagrams_sent", D, "Datagrams handed to the kernel."),
    "Datagrams received": _c("affinity_driver_datagrams_received", D, "Datagrams read from receive endpoints."),
    "Heartbeats received": _c("affinity_driver_heartbeats_received", D, "Heartbeats received by images."),
    "Unblocked publications": _c(
        "affinity_driver_unblocked_publications", D, "Claims no client committed, padded over after a timeout."
    ),
}
#: Scale of a system counter's value into its metric's unit (ns to seconds).
SYSTEM_SCALE = {DUTY_CYCLE_LABEL: 1e-9}

STREAM = ("driver", "counter", "session", "stream", "channel")
G = ("group",)
Q = ("group", "queue")
N = ("node",)
#: Every metric family that is not a system counter.
OTHER_METRICS: tuple[MetricSpec, ...] = (
    _g("affinity_driver_up", D, "1 when the driver's cnc.dat is readable and the driver alive, else 0."),
    _g("affinity_driver_heartbeat_age_seconds", D, "Time since the driver's last heartbeat."),
    _g("affinity_driver_stream_position_bytes", STREAM, "A per-stream position or limit (pub-pos, rcv-hwm, ...)."),
    _g("affinity_driver_stream_receivers", STREAM, "Receivers a publication's flow control tracks (fc-receivers)."),
    _g("affinity_driver_client_heartbeat_age_seconds", ("driver", "client"), "Time since a client's keepalive."),
    _g("affinity_driver_distinct_errors", D, "Distinct errors in the driver's error log."),
    _g("affinity_driver_corrupt_records", D, "Counter and error records found corrupt."),
    _g("affinity_group_up", G, "1 while the group is watched (its observer runs), else 0."),
    _g("affinity_group_members", ("group", "role"), "Members heard within the liveness timeout, by role."),
    _g("affinity_group_member_last_heard_seconds", ("group", "member", "role"), "Time since a member's heartbeat."),
    _g("affinity_group_queue_owner", ("group", "queue", "member", "state"), "1 for the owner of each owned queue."),
    _g("affinity_group_queue_epoch", Q, "Epoch of the queue's claim."),
    _g("affinity_group_queue_acked_sequence", Q, "Sum over live publishers of the acknowledged sequence."),
    _g("affinity_group_queue_sent_sequence", Q, "Sum over live publishers of the published sequence."),
    _g("affinity_group_queue_retained_bytes", Q, "Bytes the live publishers retain until acknowledged."),
    _g("affinity_group_queue_lag_messages", Q, "Published but not yet acknowledged messages."),
    _c("affinity_group_moves", ("group", "cause"), "Queue moves seen by this server (failover or handoff)."),
    _c("affinity_group_auth_refused", G, "Messages the observer refused as not authentic."),
    _g("affinity_router_up", N, "1 while the router's reports arrive, else 0."),
    _g("affinity_router_report_age_seconds", N, "Time since the router's last report."),
    _g("affinity_router_subjects", N, "Subjects the router routes."),
    _g("affinity_router_affinities", N, "Affinities the router holds."),
    _g("affinity_router_subscribers", N, "Subscribers the router tracks."),
    _g("affinity_router_backlog_bytes", N, "Bytes queued for peers that do not keep up."),
    _g("affinity_router_peer_up", ("node", "peer"), "1 for a peer up, 0 for a peer down."),
    _g("affinity_router_faucet_topics", N, "Faucet topics with an assignment action reported."),
    _c("affinity_router_relayed", N, "Messages relayed to subscribers."),
    _c("affinity_router_routed", N, "Subjects routed to a peer."),
    _c("affinity_router_messages_sent", N, "Messages the router sent."),
    _c("affinity_router_moves", N, "Subjects moved between peers (with a reason in the router's log)."),
    _c("affinity_router_auth_refused", N, "Messages refused as not authentic."),
    _c("affinity_router_refused_subscribes", N, "SUBSCRIBEs refused at the router's bounds."),
    _c("affinity_router_evicted_subscribers", N, "Subscribers dropped when the backlogs reached their budget."),
)
#: Every metric family ``/metrics`` exposes, by name.
METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in (*SYSTEM_COUNTERS.values(), *OTHER_METRICS)}
#: Per-stream counter names whose value is a number of receivers, not a position.
RECEIVER_COUNTERS = ("fc-receivers",)
#: Router status fields exposed as counters, by metric name.
ROUTER_COUNTER_FIELDS = {
    "affinity_router_relayed": "relayed",
    "affinity_router_routed": "routed",
    "affinity_router_messages_sent": "messages_sent",
    "affinity_router_refused_subscribes": "refused_subscribes",
    "affinity_router_evicted_subscribers": "evicted_subscribers",
}
#: Router status fields exposed as gauges, by metric name.
ROUTER_GAUGE_FIELDS = {
    "affinity_router_subjects": "subjects",
    "affinity_router_affinities": "affinities",
    "affinity_router_subscribers": "subscribers",
    "affinity_router_backlog_bytes": "backlog_bytes",
}
#: The router status fields summed into ``affinity_router_auth_refused``.
ROUTER_AUTH_FIELDS = ("auth_unauthenticated", "auth_unverifiable", "auth_bad_tag", "auth_replayed")


def _family(spec: MetricSpec) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=spec.labels, unit=spec.unit)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels, unit=spec.unit)


class AffinityCollector(Collector):
    """Reads drivers, groups and routers when Prometheus scrapes."""

    def __init__(self, monitor: Monitor) -> None:
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        """Every family of :data:`METRICS` (a family with no sample is still described)."""
        families = {name: _family(spec) for name, spec in METRICS.items()}

        def add(name: str, labels: list[str], value: float) -> None:
            families[name].add_metric(labels, value)

        self._drivers(add)
        self._groups(add)
        self._routers(add)
        yield from families.values()

    def _drivers(self, add: _Add) -> None:
        for directory in self._monitor.options.driver_dirs:
            view = read_driver(directory)
            add("affinity_driver_up", [directory], 1 if view.up else 0)
            stat = view.stat
            if stat is None:
                continue
            add("affinity_driver_heartbeat_age_seconds", [directory], stat.heartbeat_age_ms / 1000)
            for counter in view.system:
                spec = SYSTEM_COUNTERS.get(counter.label)
                if spec is not None:
                    add(spec.name, [directory], counter.value * SYSTEM_SCALE.get(counter.label, 1))
            for row in view.streams:
                labels = [
                    directory,
                    row.name,
                    "" if row.session is None else str(row.session),
                    "" if row.stream is None else str(row.stream),
                    row.channel,
                ]
                name = (
                    "affinity_driver_stream_receivers"
                    if row.name in RECEIVER_COUNTERS
                    else "affinity_driver_stream_position_bytes"
                )
                add(name, labels, row.value)
            for client in view.clients:
                add(
                    "affinity_driver_client_heartbeat_age_seconds",
                    [directory, str(client.client_id)],
                    client.heartbeat_age_ms / 1000,
                )
            add("affinity_driver_distinct_errors", [directory], sum(e.problem is None for e in stat.errors))
            corrupt = sum(c.problem is not None for c in stat.counters) + sum(
                e.problem is not None for e in stat.errors
            )
            add("affinity_driver_corrupt_records", [directory], corrupt)

    def _groups(self, add: _Add) -> None:
        for group in self._monitor.snapshot.groups:
            name = group.definition.name
            observer = group.observer
            status = group.status
            if observer is not None:
                try:
                    status = observer.status()  # fresh, as of this scrape
                except AffinityError:
                    observer = None
            add("affinity_group_up", [name], 0 if observer is None or group.problem else 1)
            for cause in (FAILOVER, HANDOFF):
                add("affinity_group_moves", [name, cause], group.move_totals.get(cause, 0))
            if status is None:
                continue
            add("affinity_group_auth_refused", [name], status.auth_refused)
            live: dict[str, int] = {}
            for member in status.members:
                add(
                    "affinity_group_member_last_heard_seconds",
                    [name, member.name, member.role],
                    member.last_heard_ms / 1000,
                )
                if member.last_heard_ms < LIVENESS_TIMEOUT_MS:
                    live[member.role] = live.get(member.role, 0) + 1
            for role in ("publisher", "consumer", "observer"):
                add("affinity_group_members", [name, role], live.get(role, 0))
            for queue in status.queues:
                q = [name, str(queue.queue)]
                if queue.owner_id:
                    add("affinity_group_queue_owner", [*q, queue.owner_name, queue.state], 1)
                add("affinity_group_queue_epoch", q, queue.epoch)
                add("affinity_group_queue_acked_sequence", q, queue.acked_sequence)
                add("affinity_group_queue_sent_sequence", q, queue.sent_sequence)
                add("affinity_group_queue_retained_bytes", q, queue.retained_bytes)
                add("affinity_group_queue_lag_messages", q, queue.lag)

    def _routers(self, add: _Add) -> None:
        snapshot = self._monitor.snapshot
        for router in snapshot.routers:
            for node in router.nodes:
                report = node.report
                labels = [report.node]
                age = max(0.0, snapshot.time - node.received_at)
                add("affinity_router_up", labels, 1 if age < STALE_AFTER else 0)
                add("affinity_router_report_age_seconds", labels, age)
                for metric, field in {**ROUTER_GAUGE_FIELDS, **ROUTER_COUNTER_FIELDS}.items():
                    add(metric, labels, int(report.status.get(field, 0)))
                add(
                    "affinity_router_auth_refused",
                    labels,
                    sum(int(report.status.get(f, 0)) for f in ROUTER_AUTH_FIELDS),
                )
                add("affinity_router_moves", labels, report.moves)
                add("affinity_router_faucet_topics", labels, len(report.faucet))
                for peer, up in report.peers:
                    add("affinity_router_peer_up", [report.node, peer], 1 if up else 0)


def metrics_registry(monitor: Monitor) -> CollectorRegistry:
    """A registry holding only this server's collector (not the process's default metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AffinityCollector(monitor))
    return registry
