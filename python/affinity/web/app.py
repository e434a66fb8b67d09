"""The ASGI application of ``affinity web`` (Starlette), and how to serve it (uvicorn).

Routes, all read-only (``GET`` only)::

    /               the page (static/index.html)
    /static/...     its script, style and the vendored chart library
    /events         server-sent events: one ``update`` event per sample, the page's data as JSON
    /api/snapshot   the same data once (for scripts and tests)
    /metrics        Prometheus, OpenMetrics text format

``/events`` and ``/api/snapshot`` take ``pages`` (JSON: which page of each queue and stream table).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from affinity.web.metrics import metrics_registry
from affinity.web.monitor import Monitor
from affinity.web.settings import MAX_CONNECTIONS, SAMPLE_INTERVAL
from affinity.web.view import Pages, page_data

#: The page's files, shipped in the package.
STATIC_DIR = Path(__file__).parent / "static"
#: Seconds between two keep-alive comments on an idle event stream.
PING_SECONDS = 15
#: Seconds open event streams get to end when the server stops, before they are cancelled.
SHUTDOWN_SECONDS = 2
#: Headers of every response: the page loads nothing from elsewhere and is never framed.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False)


def create_app(monitor: Monitor) -> Starlette:
    """The application over ``monitor`` (started and closed by the caller)."""
    registry = metrics_registry(monitor)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers=SECURITY_HEADERS)

    async def snapshot(request: Request) -> Response:
        data = page_data(monitor.snapshot, Pages.parse(request.query_params.get("pages")))
        return JSONResponse(data, headers=SECURITY_HEADERS)

    async def events(request: Request) -> Response:
        pages = Pages.parse(request.query_params.get("pages"))
        stopping = anyio.Event()

        async def stream() -> AsyncIterator[dict[str, str]]:
            sent = -1
            while not stopping.is_set():
                current = monitor.snapshot
                if current.sequence != sent:
                    sent = current.sequence
                    yield {"event": "update", "data": _dumps(page_data(current, pages))}
                await asyncio.sleep(SAMPLE_INTERVAL / 2)

        return EventSourceResponse(
            stream(),
            ping=PING_SECONDS,
            headers=SECURITY_HEADERS,
            shutdown_event=stopping,
            shutdown_grace_period=SAMPLE_INTERVAL,
        )

    async def metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/", index),
        Route("/api/snapshot", snapshot),
        Route("/events", events),
        Route("/metrics", metrics),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    return Starlette(routes=routes)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6); ``ValueError`` naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdecimal() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT (for example 127.0.0.1:8080)")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def address(sock: socket.socket) -> str:
    """The page's URL for a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _config(monitor: Monitor) -> Any:
    """uvicorn's settings: quiet, no lifespan events, at most :data:`MAX_CONNECTIONS` at once, open
    event streams cancelled :data:`SHUTDOWN_SECONDS` after a stop."""
    import uvicorn

    return uvicorn.Config(
        create_app(monitor),
        log_level="warning",
        lifespan="off",
        limit_concurrency=MAX_CONNECTIONS,
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
    )


class WebServer:
    """The page served in a background thread (``affinity demo --web``): :meth:`start`, :meth:`stop`."""

    def __init__(self, monitor: Monitor, sock: socket.socket) -> None:
        import uvicorn

        self.monitor = monitor
        self.socket = sock
        self.url = address(sock)
        config = _config(monitor)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="affinity-web", daemon=True)

    def _run(self) -> None:
        self._server.run(sockets=[self.socket])

    def start(self) -> None:
        """Starts watching and serving."""
        self.monitor.start()
        self._thread.start()

    def stop(self) -> None:
        """Stops serving (open event streams are closed) and watching."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.monitor.close()
        self.socket.close()


def serve_forever(monitor: Monitor, sock: socket.socket) -> None:
    """Serves in this thread until SIGTERM (then returns) or SIGINT (then raises KeyboardInterrupt)."""
    import uvicorn

    config = _config(monitor)
    server = uvicorn.Server(config)
    # uvicorn stops on SIGTERM, then raises it again under the handler found before it started:
    # with this one the process then ends normally (exit status 0) rather than by the signal.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    monitor.start()
    try:
        print(f"affinity web: serving {address(sock)} (metrics at {address(sock)}metrics)", flush=True)
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        monitor.close()
        sock.close()
        sys.stdout.flush()
