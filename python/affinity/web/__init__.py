"""``affinity web``: a live page of consumer groups, drivers and routers, and Prometheus metrics.

:class:`~affinity.web.monitor.Monitor` samples what is watched; :mod:`affinity.web.app` serves
the page (server-sent events), ``/api/snapshot`` and ``/metrics`` (OpenMetrics,
:mod:`affinity.web.metrics`); :mod:`affinity.web.router_report` is what a router publishes for
the page (``affinity router --status CHANNEL``). The server needs the ``web`` extra
(``starlette``, ``uvicorn``, ``sse-starlette``, ``prometheus-client``); the monitor and the
router reports do not.
"""

from __future__ import annotations

from affinity.web.monitor import Monitor, Snapshot, WebOptions
from affinity.web.settings import DEFAULT_LISTEN

__all__ = ["DEFAULT_LISTEN", "Monitor", "Snapshot", "WebOptions"]
