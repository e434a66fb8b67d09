"""The validation consumer: a thread that receives what consumers republish and feeds a :class:`Validator`."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import affinity
from affinity.demo.records import decode_processed
from affinity.demo.settings import VALIDATION_STREAM_ID
from affinity.demo.validation import LiveStats, ValidationReport, Validator

#: Fragments taken per poll of the validation subscription.
POLL_FRAGMENTS = 4096
#: Seconds the collector sleeps when a poll found nothing.
IDLE_SLEEP = 0.002


class Collector:
    """Runs the validation subscription on its own thread; snapshots and the report are thread-safe."""

    def __init__(self, port: int, accounts: int, bin_seconds: float, driver_dir: Path | None = None) -> None:
        self.channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
        self._validator = Validator(accounts, None, bin_seconds)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._last_receive_ns = 0
        self._thread = threading.Thread(target=self._run, name="affinity-demo-validator", daemon=True)
        #: The standalone driver to attach to (None: an embedded driver).
        self._driver_dir = driver_dir

    def start(self, timeout: float) -> None:
        """Starts the thread and waits until the subscription is open."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise affinity.DriverTimeoutError(
                f"the validation subscription on {self.channel} did not open in {timeout} s"
            )
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        try:
            client = affinity.Client(dir=self._driver_dir) if self._driver_dir is not None else affinity.Client()
            with client:
                subscription = client.add_subscription(self.channel, VALIDATION_STREAM_ID)
                self._ready.set()
                while not self._stop.is_set():
                    messages = subscription.poll_batch(POLL_FRAGMENTS)
                    now = time.time_ns()
                    rows = [row for message in messages for row in decode_processed(message)]
                    with self._lock:
                        if rows:
                            self._last_receive_ns = now
                        self._validator.add(rows, now)
                    if not messages:
                        time.sleep(IDLE_SLEEP)
                subscription.close()
        except BaseException as error:  # surfaced to the orchestrator by start() / report()
            self._failure = error
            self._ready.set()

    def rebase(self, start_ns: int) -> None:
        """Sets the time origin of the timeline (the generator's start); checks begin then."""
        with self._lock:
            self._validator.rebase(start_ns)

    def mark_killed(self, consumer: int) -> None:
        """Tells the validator that ``consumer`` was SIGKILLed now."""
        with self._lock:
            self._validator.mark_killed(consumer, time.time_ns())

    def live(self) -> LiveStats:
        """A snapshot for the live display."""
        with self._lock:
            return self._validator.live()

    def idle_for(self) -> float:
        """Seconds since the last record arrived."""
        with self._lock:
            last = self._last_receive_ns
        return (time.time_ns() - last) / 1e9 if last else float("inf")

    def received(self) -> int:
        """Records received so far (checked or still in the reorder window)."""
        with self._lock:
            return self._validator.received_total

    @property
    def started(self) -> bool:
        """The thread was started (it may have ended)."""
        return self._thread.ident is not None

    def close(self) -> None:
        """Stops the thread, which closes its client (and so removes its driver's folder); idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def stop(self, generated: int) -> ValidationReport:
        """Stops the thread, checks what is buffered and returns the report."""
        self.close()
        if self._failure is not None:
            raise self._failure
        with self._lock:
            self._validator.flush()
            return self._validator.report(generated)
