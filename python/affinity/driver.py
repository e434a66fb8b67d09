"""The standalone media driver from Python: run one in the foreground, find its directory, and
read a read-only snapshot of its counters and error log.

>>> import affinity
>>> stat = affinity.driver_stat()                 # doctest: +SKIP
>>> stat.counter("Clients")                       # doctest: +SKIP
0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from affinity import _affinity

#: The environment variable naming the standalone driver's directory: ``affinity.Client()`` attaches
#: to the driver there when it is set and not empty (``shm::directory::ENV_DIR`` in Rust).
DRIVER_DIR_ENV = "AFFINITY_DIR"

#: Usage text of ``affinity driver`` (the options are parsed by the driver itself).
DRIVER_USAGE: str = _affinity.DRIVER_USAGE


@dataclass(frozen=True)
class CounterValue:
    """One allocated counter of the driver's counters file."""

    id: int
    type_id: int
    label: str
    value: int
    registration_id: int
    owner_id: int
    #: What is wrong with the counter's record and where, when it is corrupt (``label`` is then empty).
    problem: str | None = None


@dataclass(frozen=True)
class DriverErrorRecord:
    """One distinct error of the driver's error log."""

    count: int
    first_ms: int
    last_ms: int
    message: str
    #: What is wrong with a corrupt record and where (the other fields are then 0 and empty).
    problem: str | None = None


@dataclass(frozen=True)
class DriverStat:
    """A snapshot of a driver directory (cnc header, counters, errors)."""

    dir: str
    pid: int
    start_ms: int
    heartbeat_age_ms: int
    version: int
    counters: tuple[CounterValue, ...]
    errors: tuple[DriverErrorRecord, ...]
    #: Why the driver is dead (its pid is gone, or its heartbeat is too old); None while it is alive.
    dead: str | None = None

    def counter(self, label: str) -> int | None:
        """Value of the first counter labelled ``label``, if there is one."""
        return next((c.value for c in self.counters if c.label == label), None)


def default_driver_dir() -> str:
    """``$AFFINITY_DIR``, else a per-user folder under ``/dev/shm`` (or the temp dir)."""
    return _affinity.default_driver_dir()


def run_driver(argv: Sequence[str] = (), companion: Callable[[str], object] | None = None) -> None:
    """Run the standalone driver in this process until SIGINT/SIGTERM (``argv``: the options of
    ``affinity driver``). Raises ConfigError for a bad option, DriverError when it cannot start
    (for example: a live driver holds the directory; the message names its pid).

    ``companion``: called with the driver's directory once the driver is ready (``affinity driver
    --router`` starts the subject router there); the object it returns is closed (``close()``)
    before the driver closes; an exception it raises stops the driver (DriverError)."""
    _affinity.run_driver(argv, companion)


def driver_stat(directory: str | None = None) -> DriverStat:
    """Read-only snapshot of ``directory`` (default :func:`default_driver_dir`); never disturbs
    the driver. Raises DriverError when there is no readable ``cnc.dat``; a corrupt counter or
    error record is returned with its ``problem`` set, the others as they are."""
    path = directory if directory is not None else default_driver_dir()
    info = _affinity.driver_stat(path)
    return DriverStat(
        dir=info.dir,
        pid=info.pid,
        start_ms=info.start_ms,
        heartbeat_age_ms=info.heartbeat_age_ms,
        version=info.version,
        counters=tuple(
            CounterValue(
                id=c.id,
                type_id=c.type_id,
                label=c.label,
                value=c.value,
                registration_id=c.registration_id,
                owner_id=c.owner_id,
                problem=c.problem,
            )
            for c in info.counters
        ),
        errors=tuple(
            DriverErrorRecord(
                count=e.count, first_ms=e.first_ms, last_ms=e.last_ms, message=e.message, problem=e.problem
            )
            for e in info.errors
        ),
        dead=info.dead,
    )
