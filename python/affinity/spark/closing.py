"""Closing what the stream sources open, when their Spark worker ends.

Spark runs a stream reader in a Python worker of its own (``python_streaming_source_runner``)
and, when the query stops, ends that worker with SIGTERM (``PythonStreamingSourceRunner.stop``
in pyspark 4.x): no ``finally``, no ``atexit``, and no ``stop()`` either, since the wrapper around
a simple reader does not forward it. A client left open there leaves its embedded driver's
directory (``/dev/shm/affinity-<user>-embedded/<pid>-<n>``, term buffers included) behind until
another embedded driver starts and sweeps it.

So a source hands what it opened to :func:`hold`, and it is closed by whichever comes first: the
source's ``stop()``, SIGTERM (the handler closes, then lets SIGTERM end the process as before),
or interpreter exit (the worker exits by itself when the JVM closes its socket). Closing loses
nothing: a channel keeps no log, and a group redelivers what was not acknowledged.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Final

__all__ = ["CLOSE_DEADLINE_SECONDS", "Release", "close_all", "hold"]

#: A SIGTERM'd process closes for at most this long, then SIGALRM ends it: a close that hangs
#: must not keep the worker alive.
CLOSE_DEADLINE_SECONDS: Final = 10

_log = logging.getLogger(__name__)
#: What is held, oldest first. Only atomic dict operations touch it: the SIGTERM handler may run
#: in the middle of :func:`hold` or a release on the same thread, where a lock would deadlock.
_held: dict[int, Callable[[], None]] = {}
_tokens = itertools.count()
_terminating = False


class Release:
    """Closes one held thing now (once) and forgets it; later calls do nothing."""

    def __init__(self, token: int) -> None:
        self._token = token

    def __call__(self) -> None:
        close = _held.pop(self._token, None)
        if close is not None:
            _run(close)
        _restore_sigterm()


def hold(close: Callable[[], None]) -> Release:
    """Keeps ``close`` until the returned :class:`Release`, SIGTERM or interpreter exit runs it."""
    token = next(_tokens)
    _held[token] = close
    _catch_sigterm()
    return Release(token)


def close_all() -> None:
    """Closes everything held, newest first."""
    while _held:
        try:
            _, close = _held.popitem()
        except KeyError:  # emptied meanwhile by another thread
            break
        _run(close)


def _run(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:
        _log.warning("closing a stream source's transport failed", exc_info=True)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _terminating
    if _terminating:
        return
    _terminating = True
    # Spark sends a second SIGTERM right after the first (stopWorker, then the factory's stop).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(CLOSE_DEADLINE_SECONDS)
    close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(128 + signum)  # only if SIGTERM is blocked in this thread


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _catch_sigterm() -> None:
    """Only where SIGTERM would kill outright (nobody else handles it), and only on the main
    thread, the one place Python lets a handler be set."""
    if _on_main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _restore_sigterm() -> None:
    if not _held and _on_main_thread() and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


atexit.register(close_all)
