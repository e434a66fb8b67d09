"""The watcher behind ``affinity web``: one background thread looks at the drivers, the groups
of the registry and the router channels every :data:`~affinity.web.settings.SAMPLE_INTERVAL`
and publishes an immutable :class:`Snapshot` by replacing one reference.

Readers (the page's event streams, ``/metrics``) take the reference and never wait: no lock is
shared with the sampler, and nothing here takes a lock of a driver or a member (driver
snapshots map ``cnc.dat`` read-only; a group is watched by this process's own observer, as
``affinity group status`` does, which writes its discovery file like any member and owns
nothing).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from affinity.exceptions import AffinityError
from affinity.groups import GroupDefinition, GroupObserver, GroupStatus, registry_dir
from affinity.groups.registry import scan_groups
from affinity.web.drivers import RATE_COUNTERS, DriverView, read_driver
from affinity.web.groups import GroupWatch, Move
from affinity.web.rates import CounterRates
from affinity.web.router_report import REPORT_STREAM_ID, RouterReport
from affinity.web.routers import RouterWatch
from affinity.web.settings import GROUP_RETRY_SECONDS, MAX_GROUPS, SAMPLE_INTERVAL

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebOptions:
    """What ``affinity web`` watches."""

    #: Driver directories (``--dir``, repeatable).
    driver_dirs: tuple[str, ...]
    #: The group registry (``--registry``; None: the default registry).
    registry: str | None = None
    #: Router report channels (``--router``, repeatable).
    routers: tuple[str, ...] = ()


@dataclass(frozen=True)
class DriverSnapshot:
    """A driver as last seen, its rate history and its per-stream rates (bytes/s by counter id)."""

    view: DriverView
    rates: dict[str, object]
    stream_rates: dict[int, float]


@dataclass(frozen=True)
class GroupSnapshot:
    """A group as last seen."""

    definition: GroupDefinition
    status: GroupStatus | None
    problem: str | None
    moves: tuple[Move, ...]
    move_totals: dict[str, int]
    rates: dict[str, object]
    secret_source: str
    observer: GroupObserver | None


@dataclass(frozen=True)
class NodeSnapshot:
    """One router node's last report, when it arrived, and its rate history."""

    report: RouterReport
    received_at: float
    rates: dict[str, object]


@dataclass(frozen=True)
class RouterSnapshot:
    """One report channel."""

    channel: str
    problem: str | None
    nodes: tuple[NodeSnapshot, ...]
    bad_reports: int
    last_error: str | None


@dataclass(frozen=True)
class Snapshot:
    """Everything the page shows, as of ``time``; ``sequence`` counts the samples."""

    time: float
    sequence: int
    registry: str
    registry_problems: tuple[str, ...]
    drivers: tuple[DriverSnapshot, ...]
    groups: tuple[GroupSnapshot, ...]
    routers: tuple[RouterSnapshot, ...]


@dataclass
class _DriverWatch:
    dir: str
    rates: CounterRates = field(default_factory=lambda: CounterRates(tuple(name for name, _ in RATE_COUNTERS)))
    positions: dict[int, tuple[float, int]] = field(default_factory=dict)


class Monitor:
    """Samples everything in a background thread (:meth:`start`); :attr:`snapshot` is the latest."""

    def __init__(self, options: WebOptions, client: Any = None) -> None:
        self.options = options
        self._client = client
        self._own_client = client is None
        self._drivers = [_DriverWatch(d) for d in options.driver_dirs]
        self._groups: dict[str, GroupWatch] = {}
        self._routers = [RouterWatch(channel) for channel in options.routers]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sequence = 0
        try:
            self._registry = str(registry_dir(options.registry))
        except AffinityError as error:
            self._registry = str(options.registry)
            self._registry_error: str | None = str(error)
        else:
            self._registry_error = None
        #: The latest snapshot (replaced whole by the sampler, never changed in place).
        self.snapshot = Snapshot(time.time(), 0, self._registry, (), (), (), ())

    def _ensure_client(self) -> Any:
        if self._client is None:
            import affinity

            self._client = affinity.Client()
        return self._client

    def start(self) -> None:
        """Opens the router subscriptions, takes a first sample, and starts the sampler thread."""
        for watch in self._routers:
            try:
                watch.subscription = self._ensure_client().add_subscription(watch.channel, REPORT_STREAM_ID)
            except AffinityError as error:
                watch.problem = f"cannot subscribe to {watch.channel}: {error}"
        self.sample()
        self._thread = threading.Thread(target=self._run, name="affinity-web-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            try:
                self.sample()
            except Exception:  # a bug must not freeze the page: logged, the next sample is taken
                logger.exception("affinity web: a sample failed")

    def sample(self) -> Snapshot:
        """One look at everything; publishes and returns the new snapshot."""
        now = time.time()
        drivers = tuple(self._sample_driver(watch, now) for watch in self._drivers)
        problems = self._sample_registry()
        groups = []
        for name in sorted(self._groups):
            watch = self._groups[name]
            try:
                watch.sample(now)
            except AffinityError as error:
                watch.problem = f"cannot read the group's status: {error}"
            groups.append(
                GroupSnapshot(
                    watch.definition,
                    watch.status,
                    watch.problem,
                    tuple(watch.moves.moves),
                    dict(watch.moves.totals),
                    watch.rates.series(),
                    watch.secret_source,
                    watch.observer,
                )
            )
        routers = []
        for router in self._routers:
            try:
                router.sample(now)
            except AffinityError as error:
                router.problem = f"cannot read {router.channel}: {error}"
            except Exception as error:  # reports are untrusted: a report the checks missed stops only itself
                logger.exception("affinity web: reading the router reports on %s failed", router.channel)
                router.bad_reports += 1
                router.last_error = f"a report could not be taken: {type(error).__name__}: {error}"
            routers.append(
                RouterSnapshot(
                    router.channel,
                    router.silence(now),
                    tuple(NodeSnapshot(s.report, s.received_at, s.rates.series()) for s in router.nodes.values()),
                    router.bad_reports,
                    router.last_error,
                )
            )
        self._sequence += 1
        snapshot = Snapshot(now, self._sequence, self._registry, problems, drivers, tuple(groups), tuple(routers))
        self.snapshot = snapshot
        return snapshot

    def _sample_driver(self, watch: _DriverWatch, now: float) -> DriverSnapshot:
        view = read_driver(watch.dir)
        if view.stat is not None:
            values = tuple(view.system_value(label) or 0 for _, label in RATE_COUNTERS)
            watch.rates.add(now, values)
        stream_rates: dict[int, float] = {}
        positions: dict[int, tuple[float, int]] = {}
        for counter in view.streams:
            positions[counter.id] = (now, counter.value)
            previous = watch.positions.get(counter.id)
            if previous is not None and now > previous[0]:
                stream_rates[counter.id] = max(0, counter.value - previous[1]) / (now - previous[0])
        watch.positions = positions
        return DriverSnapshot(view, watch.rates.series(), stream_rates)

    def _sample_registry(self) -> tuple[str, ...]:
        """Follows the registry: observers for new groups, closed for removed ones; returns the problems."""
        if self._registry_error is not None:
            return (self._registry_error,)
        try:
            definitions, errors = scan_groups(self.options.registry)
        except AffinityError as error:
            return (f"cannot read the registry {self._registry}: {error}",)
        problems = [str(error) for error in errors]
        if len(definitions) > MAX_GROUPS:
            problems.append(f"{len(definitions)} groups in the registry: only the first {MAX_GROUPS} are watched")
            definitions = definitions[:MAX_GROUPS]
        current = {d.name: d for d in definitions}
        for name in [n for n, w in self._groups.items() if current.get(n) != w.definition]:
            self._groups.pop(name).close()
        now = time.monotonic()
        for name, definition in current.items():
            watch = self._groups.get(name)
            if watch is None or (watch.observer is None and now >= watch.retry_at):
                self._groups[name] = self._watch_group(definition)
        return tuple(problems)

    def _watch_group(self, definition: GroupDefinition) -> GroupWatch:
        watch = GroupWatch(definition)
        try:
            watch.observer = GroupObserver(self._ensure_client(), definition.name, registry=self.options.registry)
            watch.secret_source = watch.observer.secret_source
        except AffinityError as error:
            watch.problem = f"cannot watch the group (tried again every {GROUP_RETRY_SECONDS:g} s): {error}"
            watch.retry_at = time.monotonic() + GROUP_RETRY_SECONDS
        return watch

    def close(self) -> None:
        """Stops the sampler and leaves everything (observers, subscriptions, the client)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for watch in self._groups.values():
            watch.close()
        self._groups.clear()
        for router in self._routers:
            router.close()
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None
