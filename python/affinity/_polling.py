"""The background polling loop the cluster node's threads share (slave links, forwarding, node info)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from affinity.exceptions import AffinityError

#: Fragments read per poll of each link, per loop iteration.
POLL_FRAGMENTS: Final[int] = 256
#: Seconds a polling thread sleeps when an iteration found nothing to do.
IDLE_SLEEP: Final[float] = 0.0005


def poll_until_stopped(
    stop: threading.Event,
    step: Callable[[], int],
    what: str,
    logger: logging.Logger,
    wait: Callable[[float], object] | None = None,
) -> None:
    """Runs ``step`` (it returns how much work it did) until ``stop`` is set, waiting at most
    :data:`IDLE_SLEEP` after an iteration that did nothing: with ``wait`` (a client's
    ``wait_for_data``, which returns as soon as its embedded driver received data), else on
    ``stop``. An ``AffinityError`` (a closed client or link) ends the loop, logged as
    ``"<what> stopped: <error>"`` unless stopping."""
    while not stop.is_set():
        try:
            work = step()
            if work == 0 and wait is not None:
                wait(IDLE_SLEEP)
        except AffinityError as exc:
            if not stop.is_set():
                logger.error("%s stopped: %s", what, exc)
            return
        if work == 0 and wait is None:
            stop.wait(IDLE_SLEEP)
