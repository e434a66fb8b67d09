"""Every default, limit and name of the pipeline demo, defined once, and the validated settings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from affinity.exceptions import ConfigError

#: Seconds of event generation by default (kill and join happen inside this window).
DEFAULT_DURATION = 60.0
#: Accounts (keys) by default.
DEFAULT_ACCOUNTS = 10_000
#: Group consumer processes started at the beginning.
DEFAULT_CONSUMERS = 3
#: Events per second the generator aims for.
DEFAULT_RATE = 4_000
#: Fraction of the duration at which one consumer is SIGKILLed (when --kill-at is not given).
DEFAULT_KILL_FRACTION = 1 / 3
#: Fraction of the duration at which a replacement consumer joins (when --join-at is not given).
DEFAULT_JOIN_FRACTION = 0.6

#: Queues per consumer group created by the demo (at least the number of consumers).
MIN_QUEUE_COUNT = 12
#: Hash buckets per queue (HC = QC * this).
BUCKETS_PER_QUEUE = 8
#: Bytes each queue may retain at the publisher before back-pressure (QS).
QUEUE_SIZE = 16 * 1024 * 1024
#: Hash prefix (HP) of the demo's group.
HASH_PREFIX = "accounts"
#: Prefix of the demo group's name (the process id is appended).
GROUP_NAME_PREFIX = "demo-accounts"
#: Seconds between a consumer's backup cycles in the demo (the library default is 30 s; the demo
#: shortens it so the replacement consumer gets its primary queues back within the run).
CONSUMER_CYCLE_SECONDS = 5.0

#: Stream id of the plain publication on which consumers republish what they processed.
VALIDATION_STREAM_ID = 4242
#: Records per group poll in a consumer.
CONSUMER_POLL_MAX = 2_000
#: Seconds a consumer's poll may wait for messages.
CONSUMER_POLL_TIMEOUT = 0.02
#: Liveness timeout of the demo's consumers by default (``--liveness``), in seconds; the library's
#: default is 2 s. It is how long the SIGKILLed consumer keeps its queues before a survivor claims
#: them. Until then the Spark micro-batch that wrote rows to those queues waits for their
#: acknowledgements, and every event due meanwhile waits for that batch, so this bounds the demo's
#: worst latency. The trade-off: a consumer that is merely stalled this long (a heavily loaded
#: machine, a stopped process) is declared dead too; its queues move (and move back at the next
#: cycle), and what it processed but had not yet acknowledged is delivered again, which the
#: validation counts as duplicates. On a busy machine ``--liveness 2`` is the safer choice.
CONSUMER_LIVENESS_TIMEOUT = 0.5
#: Shortest and longest ``--liveness`` in seconds.
MIN_LIVENESS_TIMEOUT = 0.05
MAX_LIVENESS_TIMEOUT = 60.0
#: Heartbeats per liveness timeout (the heartbeat interval is ``--liveness`` divided by this): a
#: few late heartbeats do not declare a live consumer dead.
HEARTBEATS_PER_LIVENESS = 10
#: Seconds between a consumer's status lines to the orchestrator.
STATUS_INTERVAL = 0.25
#: Seconds between the generator's progress lines.
GENERATOR_TICK = 0.01

#: Width of one time bin of the timelines (chart and live rates), in seconds.
TIMELINE_BIN_SECONDS = 1.0
#: Refreshes of the live display per second.
DISPLAY_REFRESH_PER_SECOND = 4

#: Seconds to wait for a child process to say it is ready.
STARTUP_TIMEOUT = 60.0
#: Seconds to wait for the Spark query to start (JVM start, session, first batch planning).
SPARK_STARTUP_TIMEOUT = 180.0
#: Seconds the generator may take to have everything acknowledged after generation stops.
FLUSH_TIMEOUT = 60.0
#: Seconds the validator waits, after the generator finished, for the last records.
DRAIN_TIMEOUT = 30.0
#: Seconds given to consumers to close cleanly (planned handoff) at the end.
CLOSE_TIMEOUT = 10.0

#: Partitions of the Spark generator (local[2]: one per core).
SPARK_PARTITIONS = 2
#: Spark master of the demo query.
SPARK_MASTER = "local[2]"
#: Name under which the demo's event generator is registered as a Spark streaming source.
SPARK_SOURCE_NAME = "affinity_demo_events"
#: Prefix of the Spark query's work folder (checkpoint, start file), made in :data:`WORK_ROOT`
#: when it exists (else the temp dir): Spark writes the checkpoint's offset and commit files on
#: every micro-batch (``walCommit`` + ``commitOffsets`` were ~100 ms of a ~220 ms batch with them
#: on disk, idle), and the demo's checkpoint needs no disk.
SPARK_WORK_PREFIX = "affinity-demo-spark-"
#: Memory-backed folder for the demo's work folders (the Spark checkpoint, the standalone driver).
WORK_ROOT = Path("/dev/shm")

#: Prefix of the folder (under /dev/shm, else the temp dir) holding the standalone driver's
#: directory with ``--driver``.
DRIVER_WORK_PREFIX = "affinity-demo-driver-"

#: File names written to the output folder.
REPORT_JSON = "report.json"
REPORT_TEXT = "report.txt"
CHART_PNG = "pipeline.png"


@dataclass(frozen=True)
class DemoSettings:
    """What one run of the pipeline demo does; built by :meth:`create`, which validates."""

    duration: float
    accounts: int
    consumers: int
    rate: int
    out: Path
    spark: bool
    kill_at: float
    join_at: float
    live: bool
    #: One standalone ``affinity driver`` under every process (else an embedded driver in each).
    driver: bool = False
    #: The consumers' liveness timeout in seconds (``--liveness``).
    liveness: float = CONSUMER_LIVENESS_TIMEOUT

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between the consumers' heartbeats."""
        return self.liveness / HEARTBEATS_PER_LIVENESS

    @property
    def queue_count(self) -> int:
        """QC of the demo group."""
        return max(MIN_QUEUE_COUNT, self.consumers)

    @property
    def hash_count(self) -> int:
        """HC of the demo group."""
        return self.queue_count * BUCKETS_PER_QUEUE

    @property
    def total_events(self) -> int:
        """Events generated over the whole run."""
        return math.floor(self.rate * self.duration)

    @property
    def victim_index(self) -> int:
        """Index of the consumer that is killed (and of its replacement)."""
        return 1 % self.consumers

    @classmethod
    def create(
        cls,
        *,
        duration: float = DEFAULT_DURATION,
        accounts: int = DEFAULT_ACCOUNTS,
        consumers: int = DEFAULT_CONSUMERS,
        rate: int = DEFAULT_RATE,
        out: Path,
        spark: bool = True,
        kill_at: float | None = None,
        join_at: float | None = None,
        live: bool = True,
        driver: bool = False,
        liveness: float = CONSUMER_LIVENESS_TIMEOUT,
    ) -> DemoSettings:
        """Validated settings; raises :class:`affinity.ConfigError` naming the bad option and value."""
        if not (math.isfinite(duration) and duration > 0):
            raise ConfigError(f"--duration must be a positive number of seconds, got {duration!r}")
        if accounts < 1:
            raise ConfigError(f"--accounts must be at least 1, got {accounts}")
        if consumers < 2:
            raise ConfigError(f"--consumers must be at least 2 (one is killed midway), got {consumers}")
        if rate < 1:
            raise ConfigError(f"--rate must be at least 1 event per second, got {rate}")
        kill = duration * DEFAULT_KILL_FRACTION if kill_at is None else kill_at
        join = duration * DEFAULT_JOIN_FRACTION if join_at is None else join_at
        if not (math.isfinite(kill) and 0 < kill < duration):
            raise ConfigError(f"--kill-at must be inside (0, --duration={duration:g}) seconds, got {kill!r}")
        if not (math.isfinite(join) and kill < join < duration):
            raise ConfigError(
                f"--join-at must be after --kill-at={kill:g} and before --duration={duration:g} seconds, got {join!r}"
            )
        if not (math.isfinite(liveness) and MIN_LIVENESS_TIMEOUT <= liveness <= MAX_LIVENESS_TIMEOUT):
            raise ConfigError(
                f"--liveness must be between {MIN_LIVENESS_TIMEOUT:g} and {MAX_LIVENESS_TIMEOUT:g} seconds, "
                f"got {liveness!r}"
            )
        if rate * duration < 1:
            raise ConfigError(f"--rate {rate} over --duration {duration:g} s generates no event")
        return cls(
            duration=float(duration),
            accounts=accounts,
            consumers=consumers,
            rate=rate,
            out=out,
            spark=spark,
            kill_at=float(kill),
            join_at=float(join),
            live=live,
            driver=driver,
            liveness=float(liveness),
        )
