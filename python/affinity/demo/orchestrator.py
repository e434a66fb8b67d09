"""Runs the pipeline demo: group, validator, consumers, generator, the kill and the join, then the report."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from affinity.demo import protocol
from affinity.demo.children import (
    Child,
    ConsumerState,
    GeneratorState,
    child_environment,
    python_module_command,
    stop_all,
)
from affinity.demo.collector import Collector
from affinity.demo.progress import Display
from affinity.demo.settings import (
    CLOSE_TIMEOUT,
    CONSUMER_CYCLE_SECONDS,
    DRAIN_TIMEOUT,
    DRIVER_WORK_PREFIX,
    FLUSH_TIMEOUT,
    GROUP_NAME_PREFIX,
    HASH_PREFIX,
    QUEUE_SIZE,
    SPARK_STARTUP_TIMEOUT,
    SPARK_WORK_PREFIX,
    STARTUP_TIMEOUT,
    TIMELINE_BIN_SECONDS,
    WORK_ROOT,
    DemoSettings,
)
from affinity.demo.validation import MoveCause, ValidationReport, Validator
from affinity.driver import DRIVER_DIR_ENV
from affinity.exceptions import AffinityError
from affinity.testing import free_udp_port

#: Seconds to wait, once every queue is owned, for every consumer to own its primary queues.
PRIMARIES_TIMEOUT = 2 * CONSUMER_CYCLE_SECONDS + 2.0
#: Seconds between two looks at the children in the main loop.
TICK = 0.05
#: Seconds without a new record after which the validator is drained once it has every event.
QUIET_PERIOD = 0.5
#: Seconds without a new record after which the validator is drained even if events are missing
#: (the generator had every event acknowledged, and consumers republish before they acknowledge,
#: so whatever is still missing will not come).
GIVE_UP_QUIET_PERIOD = 3.0


class DemoError(AffinityError, RuntimeError):
    """A demo process failed or did not do its part in time; the message names it and quotes its log."""


@dataclass(frozen=True)
class TimelineEvent:
    """The kill or the join, for the report and the chart."""

    at: float
    kind: str  # "kill" or "join"
    consumer: int
    index: int


@dataclass(frozen=True)
class DemoResult:
    """Everything the demo measured."""

    settings: DemoSettings
    group: str
    generated: int
    generation_seconds: float
    validation: ValidationReport
    consumers: list[ConsumerState]
    events: list[TimelineEvent]
    generated_samples: list[tuple[float, int]]
    wall_seconds: float
    #: Seconds since generation start (0 when it had not started) at which Ctrl-C stopped the run;
    #: None when the run went to its end. An interrupted run's report is partial and never passes.
    interrupted_at: float | None = None
    #: The standalone driver's process id with ``--driver`` (every process attached to it).
    driver_pid: int | None = None
    #: With ``--driver``: the most clients attached to it at once, sampled while events flowed.
    driver_clients_peak: int = 0
    #: Spark: each micro-batch's duration after the warm-up, start to commit, in ms.
    spark_batch_ms: list[int] = field(default_factory=list)
    #: Spark: the part of each that its tasks (source read, sink write) and the commit took (``addBatch``), in ms.
    spark_sink_ms: list[int] = field(default_factory=list)

    @property
    def failover_seen(self) -> bool:
        """A queue moved away from the killed consumer after the kill."""
        kill = next((e for e in self.events if e.kind == "kill"), None)
        return kill is not None and any(
            m.source == kill.consumer and m.at >= kill.at
            for m in self.validation.moves
            if m.cause == MoveCause.FAILOVER
        )

    @property
    def rejoin_seen(self) -> bool:
        """A queue moved to the replacement consumer after it joined."""
        join = next((e for e in self.events if e.kind == "join"), None)
        return join is not None and any(m.target == join.consumer and m.at >= join.at for m in self.validation.moves)

    @property
    def passed(self) -> bool:
        """The run went to its end, the validation passed and both ownership changes were observed."""
        return self.interrupted_at is None and self.validation.passed and self.failover_seen and self.rejoin_seen


@dataclass
class _Run:
    settings: DemoSettings
    registry: Path
    group: str
    collector: Collector
    display: Display
    log_dir: Path
    env: dict[str, str]
    consumers: dict[int, ConsumerState] = field(default_factory=dict)
    processes: dict[int, Child] = field(default_factory=dict)
    generator: GeneratorState = field(default_factory=GeneratorState)
    events: list[TimelineEvent] = field(default_factory=list)

    def start_consumer(self, ordinal: int, index: int, at: float) -> None:
        command = python_module_command(
            "affinity.demo.consumer",
            "--group",
            self.group,
            "--registry",
            str(self.registry),
            "--index",
            str(index),
            "--count",
            str(self.settings.consumers),
            "--ordinal",
            str(ordinal),
            "--validator",
            self.collector.channel,
            "--liveness",
            repr(self.settings.liveness),
            *(["--spark"] if self.settings.spark else []),
        )
        self.consumers[ordinal] = ConsumerState(ordinal, index, at)
        self.processes[ordinal] = Child(f"consumer-{ordinal}", command, self.log_dir, self.env)

    def poll_consumers(self) -> None:
        for ordinal, child in self.processes.items():
            for update in child.updates():
                if isinstance(update, protocol.ConsumerStatus):
                    self.consumers[ordinal].status = update
            state = self.consumers[ordinal]
            if not child.alive and state.killed_at is None:
                raise DemoError(
                    f"consumer {state.label} exited with status {child.process.returncode}; "
                    f"its log ({child.log_path}):\n{child.log_tail()}"
                )

    def primaries_owned(self) -> bool:
        """Every live consumer owns its primary queues (``q % count == index``)."""
        count = self.settings.consumers
        for state in self.consumers.values():
            if state.killed_at is not None:
                continue
            if state.status is None:
                return False
            primaries = {q for q in range(self.settings.queue_count) if q % count == state.index}
            if not primaries <= set(state.status.owned):
                return False
        return True

    def owned_queues(self) -> set[int]:
        owned: set[int] = set()
        for state in self.consumers.values():
            if state.killed_at is None and state.status is not None:
                owned.update(state.status.owned)
        return owned


def _generator_command(
    settings: DemoSettings, group: str, registry: Path, spark_work: Path | None, driver_dir: Path | None
) -> list[str]:
    """The generator's command line; the Spark job keeps its files in ``spark_work`` and, with
    ``driver_dir``, names the standalone driver in the sink's ``driverDir`` option too."""
    module = "affinity.demo.spark_job" if settings.spark else "affinity.demo.generator"
    work = ["--work-dir", str(spark_work)] if spark_work is not None else []
    if settings.spark and driver_dir is not None:
        work += ["--driver-dir", str(driver_dir)]
    return python_module_command(
        module,
        *work,
        "--group",
        group,
        "--registry",
        str(registry),
        "--accounts",
        str(settings.accounts),
        "--rate",
        str(settings.rate),
        "--total",
        str(settings.total_events),
    )


def _wait(what: str, done: object, timeout: float, run: _Run, child: Child | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not callable(done) or not done():
        if time.monotonic() > deadline:
            log = f"; its log ({child.log_path}):\n{child.log_tail()}" if child is not None else ""
            raise DemoError(f"{what} did not happen within {timeout:g} s{log}")
        run.poll_consumers()
        run.display.refresh_idle(run.consumers)
        time.sleep(TICK)


def work_folder(prefix: str) -> Path:
    """A private new folder named ``prefix...`` in :data:`WORK_ROOT` (memory), else in the temp dir."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=WORK_ROOT if WORK_ROOT.is_dir() else None))


def _driver_root() -> Path:
    """A private folder for the standalone driver's directory (in memory when there is /dev/shm)."""
    return work_folder(DRIVER_WORK_PREFIX)


def start_driver(directory: Path, log_dir: Path, env: dict[str, str]) -> Child:
    """Starts ``affinity driver --dir directory`` and waits (bounded) until it is live."""
    import affinity

    child = Child("driver", python_module_command("affinity.cli", "driver", "--dir", str(directory)), log_dir, env)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if not child.alive:
            raise DemoError(
                f"the standalone driver exited with status {child.process.returncode}; "
                f"its log ({child.log_path}):\n{child.log_tail()}"
            )
        try:
            if affinity.driver_stat(str(directory)).dead is None:
                return child
        except AffinityError:
            pass  # not there yet
        if time.monotonic() > deadline:
            child.kill()
            raise DemoError(f"the standalone driver in {directory} was not ready within {STARTUP_TIMEOUT:g} s")
        time.sleep(TICK)


def _driver_clients(directory: Path) -> int:
    """Clients attached to the standalone driver now (0 when it cannot be read)."""
    import affinity

    try:
        return affinity.driver_stat(str(directory)).counter("Clients") or 0
    except AffinityError:
        return 0


def run_demo(
    settings: DemoSettings, console: Console | None = None, on_registry: Callable[[Path], None] | None = None
) -> DemoResult:
    """Runs the whole demo and returns what it measured (raises :class:`DemoError` when a part fails).

    ``on_registry`` is called with the demo's registry once its group is defined (``--web``
    serves the live page of it from there)."""
    from affinity.groups import create_group

    wall_start = time.monotonic()
    settings.out.mkdir(parents=True, exist_ok=True)
    log_dir = settings.out / "logs"
    log_dir.mkdir(exist_ok=True)
    registry = Path(tempfile.mkdtemp(prefix="affinity-demo-registry-"))
    spark_work: Path | None = None
    generator: Child | None = None
    group = f"{GROUP_NAME_PREFIX}-{os.getpid()}"
    display = Display(settings, console)
    children: list[Child] = []
    collector: Collector | None = None
    run: _Run | None = None
    start_ns = 0
    driver: Child | None = None
    driver_root = _driver_root() if settings.driver else None
    driver_dir = driver_root / "driver" if driver_root is not None else None
    env = child_environment(registry)
    try:
        if driver_dir is not None:
            env[DRIVER_DIR_ENV] = str(driver_dir)
            driver = start_driver(driver_dir, log_dir, env)
            display.note(f"standalone driver (pid {driver.process.pid}) in {driver_dir}: every process attaches to it")
        create_group(group, HASH_PREFIX, settings.hash_count, settings.queue_count, QUEUE_SIZE, registry=registry)
        display.note(
            f"group {group!r}: {settings.queue_count} queues, {settings.hash_count} hash buckets, registry {registry}"
        )
        if on_registry is not None:
            on_registry(registry)
        # The validator buffers what arrives until it knows the generator's start (rebase below).
        collector = Collector(free_udp_port(), settings.accounts, TIMELINE_BIN_SECONDS, driver_dir)
        collector.start(STARTUP_TIMEOUT)
        run = _Run(settings, registry, group, collector, display, log_dir, env)
        for ordinal in range(settings.consumers):
            run.start_consumer(ordinal, ordinal, 0.0)
            children.append(run.processes[ordinal])
        all_queues = set(range(settings.queue_count))
        started = run
        _wait("every queue owned by a consumer", lambda: started.owned_queues() == all_queues, STARTUP_TIMEOUT, run)
        # A consumer that started late gets its primary queues back within a cycle; start from
        # the steady state so that every move in the report comes from the kill or the join.
        try:
            _wait("every consumer owning its primary queues", run.primaries_owned, PRIMARIES_TIMEOUT, run)
            display.note(f"{settings.consumers} consumers own all {settings.queue_count} queues, each its primaries")
        except DemoError:
            display.note(
                f"{settings.consumers} consumers own all {settings.queue_count} queues (not all primaries yet)"
            )
        # Made and removed here, not by the job: a job that is SIGKILLed cannot remove anything.
        spark_work = work_folder(SPARK_WORK_PREFIX) if settings.spark else None
        command = _generator_command(settings, group, registry, spark_work, driver_dir)
        generator = Child("generator", command, log_dir, run.env, own_group=settings.spark)
        children.append(generator)
        display.note("starting the Spark query (local[2]) ..." if settings.spark else "starting the generator ...")
        starting = generator

        def generator_started() -> bool:
            for update in starting.updates():
                if isinstance(update, protocol.GeneratorProgress):
                    started.generator.progress = update
            if not starting.alive and started.generator.progress is None:
                raise DemoError(f"the generator exited early; its log ({starting.log_path}):\n{starting.log_tail()}")
            return started.generator.progress is not None

        _wait(
            "the generator's start",
            generator_started,
            SPARK_STARTUP_TIMEOUT if settings.spark else STARTUP_TIMEOUT,
            run,
            generator,
        )
        progress = run.generator.progress
        assert progress is not None
        start_ns = progress.start_ns
        collector.rebase(start_ns)
        display.note(f"generating events ({time.monotonic() - wall_start:.1f} s after the start of the demo)")
        deadline = time.monotonic() + settings.duration + FLUSH_TIMEOUT + SPARK_STARTUP_TIMEOUT
        victim = settings.victim_index
        joiner = settings.consumers
        display.start()
        clients_peak = 0
        while True:
            if driver_dir is not None:
                clients_peak = max(clients_peak, _driver_clients(driver_dir))
            now = (time.time_ns() - start_ns) / 1e9
            for update in generator.updates():
                if isinstance(update, protocol.GeneratorProgress):
                    run.generator.progress = update
                    run.generator.samples.append((now, update.generated))
            run.poll_consumers()
            if now >= settings.kill_at and not any(e.kind == "kill" for e in run.events):
                # Marked first, so no record the survivors replay is checked before the mark; the
                # process is reaped at the end (waiting here could stall the loop on a loaded machine).
                collector.mark_killed(victim)
                run.consumers[victim].killed_at = now
                run.processes[victim].kill()
                run.events.append(TimelineEvent(now, "kill", victim, run.consumers[victim].index))
                display.note(f"t={now:5.1f}s  SIGKILL consumer c{victim} (index {run.consumers[victim].index})")
            if now >= settings.join_at and not any(e.kind == "join" for e in run.events):
                index = run.consumers[victim].index
                run.start_consumer(joiner, index, now)
                children.append(run.processes[joiner])
                run.events.append(TimelineEvent(now, "join", joiner, index))
                display.note(f"t={now:5.1f}s  new consumer c{joiner} joins with index {index}")
            display.update(now, run.consumers, run.generator, collector.live())
            current = run.generator.progress
            if current is not None and current.done:
                break
            if not generator.alive:
                for update in generator.updates():
                    if isinstance(update, protocol.GeneratorProgress):
                        run.generator.progress = update
                if run.generator.progress is not None and run.generator.progress.done:
                    break
                raise DemoError(
                    f"the generator exited with status {generator.process.returncode}; "
                    f"its log ({generator.log_path}):\n{generator.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise DemoError(
                    f"the generator did not finish; its log ({generator.log_path}):\n{generator.log_tail()}"
                )
            time.sleep(TICK)
        final = run.generator.progress
        assert final is not None
        generation_seconds = (time.time_ns() - start_ns) / 1e9
        generated = final.generated
        display.note(f"generator done: {generated:,} events in {generation_seconds:.1f} s; draining the validator")
        drain_deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < drain_deadline:
            quiet = collector.idle_for()
            if quiet >= GIVE_UP_QUIET_PERIOD or (collector.received() >= generated and quiet >= QUIET_PERIOD):
                break
            display.update((time.time_ns() - start_ns) / 1e9, run.consumers, run.generator, collector.live())
            time.sleep(TICK)
        display.stop()
        generator.terminate(CLOSE_TIMEOUT)
        for ordinal, child in run.processes.items():
            if run.consumers[ordinal].killed_at is None:
                child.terminate(CLOSE_TIMEOUT)
        report = collector.stop(generated)
        return DemoResult(
            settings=settings,
            group=group,
            generated=generated,
            generation_seconds=generation_seconds,
            validation=report,
            consumers=list(run.consumers.values()),
            events=run.events,
            generated_samples=run.generator.samples,
            wall_seconds=time.monotonic() - wall_start,
            driver_pid=driver.process.pid if driver is not None else None,
            driver_clients_peak=clients_peak,
            spark_batch_ms=final.batch_ms,
            spark_sink_ms=final.sink_ms,
        )
    except KeyboardInterrupt:
        # Ctrl-C, to this process or to its whole process group (the consumers and the plain
        # generator stop on SIGINT by themselves): stop every child cleanly so that each closes its
        # client and removes its driver's folder, then report what was seen so far.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the stop below is bounded; let it finish
        display.stop()
        interrupted_at = (time.time_ns() - start_ns) / 1e9 if start_ns else 0.0
        display.note(
            f"interrupted at t={interrupted_at:.1f}s: stopping every process (at most {CLOSE_TIMEOUT:g} s), "
            "then writing a partial report"
        )
        stop_all(children, CLOSE_TIMEOUT)
        progress = run.generator.progress if run is not None else None
        generated = progress.generated if progress is not None else 0
        if collector is not None and collector.started:
            collector.close()
            report = collector.stop(generated)
        else:
            report = Validator(settings.accounts, None, TIMELINE_BIN_SECONDS).report(0)
        return DemoResult(
            settings=settings,
            group=group,
            generated=generated,
            generation_seconds=interrupted_at,
            validation=report,
            consumers=list(run.consumers.values()) if run is not None else [],
            events=run.events if run is not None else [],
            generated_samples=run.generator.samples if run is not None else [],
            wall_seconds=time.monotonic() - wall_start,
            interrupted_at=interrupted_at,
            driver_pid=driver.process.pid if driver is not None else None,
        )
    finally:
        display.stop()
        for child in children:
            if child.alive:
                child.kill()
                child.process.wait()
        if collector is not None:
            collector.close()
        if driver is not None:
            driver.terminate(CLOSE_TIMEOUT)  # last: every client of it is gone
        if driver_root is not None:
            shutil.rmtree(driver_root, ignore_errors=True)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
        shutil.rmtree(registry, ignore_errors=True)
        if spark_work is not None:
            # The job's JVM exits once the job is gone; until then it may still write a checkpoint.
            if generator is not None:
                generator.wait_group(CLOSE_TIMEOUT)
            shutil.rmtree(spark_work, ignore_errors=True)
        sweep_stale_driver_folders()


def sweep_stale_driver_folders() -> None:
    """Removes the embedded-driver folders of this user's dead processes (the SIGKILLed consumer's,
    Spark workers killed with their job): starting an embedded client sweeps them (only folders
    carrying the embedded marker, whose process is gone), and closing it removes its own."""
    import affinity

    try:
        with affinity.Client():
            pass
    except AffinityError:
        pass  # best effort: the next client of this user sweeps them too
