"""``affinity demo``: the Spark pipeline demo (the main job); ``affinity demo transport``: the transport demo.

``affinity demo`` runs a Structured Streaming query that writes keyed account events into a
consumer group, three consumer processes (one SIGKILLed midway, a new one joining later) and a
validator, then prints the summary and writes a report and a chart (:mod:`affinity.demo`).
``affinity demo transport`` sends messages between a publisher and a subscriber in two processes
over loopback UDP and prints the rates.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import affinity
from affinity.cli import EXIT_INTERRUPTED
from affinity.cli._text import help_text
from affinity.testing import free_udp_port
from affinity.web.settings import DEFAULT_LISTEN as WEB_LISTEN

STREAM_ID = 1001


#: Modules of the ``demo`` extra.
DEMO_MODULES = ("rich", "matplotlib")
#: Width of the summary when the output is not a terminal.
CONSOLE_WIDTH = 120
#: Prefix of the default output folder (a UTC time stamp follows).
OUT_PREFIX = "affinity-demo-"


def default_out_root() -> Path:
    """Where the demo's report folders go without ``--out``: ``$XDG_DATA_HOME/affinity/demo``
    (``~/.local/share/affinity/demo`` when unset), never the current directory (a clone's root)."""
    data_home = os.environ.get("XDG_DATA_HOME") or ""
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "affinity" / "demo"


def default_out() -> Path:
    """A new report folder under :func:`default_out_root`, named for the UTC time."""
    return default_out_root() / f"{OUT_PREFIX}{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds the ``demo`` subcommand (the pipeline demo) and ``demo transport``."""
    from affinity.demo import settings as defaults

    parser = subparsers.add_parser(
        "demo",
        help="the pipeline demo: Spark -> consumer group -> consumers, one killed, one joining; validated",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=defaults.DEFAULT_DURATION,
        help="seconds of event generation, from t = 0 when events start flowing (default %(default)g)",
    )
    parser.add_argument("--accounts", type=int, default=defaults.DEFAULT_ACCOUNTS, help="keys (default %(default)s)")
    parser.add_argument(
        "--consumers", type=int, default=defaults.DEFAULT_CONSUMERS, help="consumer processes (default %(default)s)"
    )
    parser.add_argument(
        "--rate", type=int, default=defaults.DEFAULT_RATE, help="events per second (default %(default)s)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"output folder (default $XDG_DATA_HOME/affinity/demo/{OUT_PREFIX}<UTC time>, "
        "$XDG_DATA_HOME being ~/.local/share when unset)",
    )
    parser.add_argument(
        "--no-spark", dest="spark", action="store_false", help="generate with a plain Python GroupPublisher, no Spark"
    )
    parser.add_argument(
        "--kill-at", type=float, help="seconds after t = 0 to SIGKILL a consumer (default: a third of --duration)"
    )
    parser.add_argument(
        "--join-at", type=float, help="seconds after t = 0 to start a new consumer (default: 0.6 x --duration)"
    )
    parser.add_argument("--no-live", dest="live", action="store_false", help="plain progress lines, no live view")
    parser.add_argument(
        "--liveness",
        type=float,
        default=defaults.CONSUMER_LIVENESS_TIMEOUT,
        help="the consumers' liveness timeout in seconds: how soon the killed consumer's queues move "
        "(default %(default)g; the library's is 2: shorter declares a consumer stalled that long dead too)",
    )
    parser.add_argument(
        "--web",
        nargs="?",
        const=WEB_LISTEN,
        metavar="HOST:PORT",
        help=f"serve the live page (affinity web) of the run on HOST:PORT (default {WEB_LISTEN})",
    )
    parser.add_argument(
        "--driver",
        action="store_true",
        help="run one standalone `affinity driver` under every process (consumers, validator, Spark's writer "
        "through AFFINITY_DIR and the sink's driverDir) instead of an embedded driver in each",
    )
    parser.set_defaults(run=run_pipeline)
    modes = parser.add_subparsers(dest="demo_mode", metavar="{transport}", help="optional: another demo instead")
    transport = modes.add_parser("transport", help="send messages between two processes and print the rates")
    transport.add_argument("--count", type=int, default=2_000_000, help="messages to send (default 2,000,000)")
    transport.add_argument("--size", type=int, default=32, help="message size in bytes (default 32)")
    transport.add_argument("--port", type=int, default=0, help="UDP port on 127.0.0.1 (default: a free one)")
    transport.add_argument("--role", choices=("both", "pub", "sub"), default="both", help=argparse.SUPPRESS)
    transport.add_argument("--threading", choices=("shared", "invoker"), default="invoker")
    transport.set_defaults(run=run)


#: The package's name on the package index (pyproject.toml's ``[project] name``); the import
#: name and the command stay ``affinity``.
DISTRIBUTION = "affinity-transport"


def install_hint(extra: str) -> str:
    """How to install ``extra``, from the index and from a checkout."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (from a checkout: pip install '.[{extra}]')"


def missing_dependency(spark: bool) -> str | None:
    """What the pipeline demo needs and is not installed, said with the fix; None when all is there."""
    missing = [name for name in DEMO_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        return f"the demo needs the demo extra (missing {', '.join(missing)}): {install_hint('demo')}"
    if spark:
        if importlib.util.find_spec("pyspark") is None:
            return f"the Spark demo needs the spark extra: {install_hint('spark')}; or run with --no-spark"
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            return "the Spark demo needs Java 17 or newer (no java on PATH, JAVA_HOME unset); or run with --no-spark"
    return None


def run_pipeline(args: argparse.Namespace) -> int:
    """Runs the pipeline demo; exit code 0 when the validation passed and both moves were seen."""
    from rich.console import Console

    from affinity.demo.orchestrator import DemoError, run_demo
    from affinity.demo.report import write_report
    from affinity.demo.settings import DemoSettings
    from affinity.exceptions import ConfigError

    problem = missing_dependency(args.spark)
    if problem is not None:
        print(f"affinity demo: {problem}", file=sys.stderr)
        return 2
    out = args.out or default_out()
    try:
        settings = DemoSettings.create(
            duration=args.duration,
            accounts=args.accounts,
            consumers=args.consumers,
            rate=args.rate,
            out=out.resolve(),
            spark=args.spark,
            kill_at=args.kill_at,
            join_at=args.join_at,
            live=args.live,
            driver=args.driver,
            liveness=args.liveness,
        )
    except ConfigError as error:
        print(f"affinity demo: {error}", file=sys.stderr)
        return 2
    console = Console()
    if not console.is_terminal:
        console = Console(width=CONSOLE_WIDTH)  # pipes and logs: wide enough for the tables
    console.print(f"writing the report, chart and logs to {settings.out}/", highlight=False, soft_wrap=True)
    web = LivePage(args.web, console)
    try:
        result = run_demo(settings, console, web.open)
    except DemoError as error:
        print(f"affinity demo: {error}", file=sys.stderr)
        return 1
    finally:
        web.close()
    files = write_report(result, console)
    partial = "partial " if result.interrupted_at is not None else ""
    console.print(
        f"\n{partial}report and chart written to {files.folder}/ "
        f"({files.chart.name}, {files.text.name}, {files.json.name})",
        highlight=False,
        soft_wrap=True,  # a path cut by a line break cannot be copied
    )
    if result.interrupted_at is not None:
        return EXIT_INTERRUPTED
    return 0 if result.passed else 1


class LivePage:
    """``--web``: serves the live page of the demo's registry while the demo runs; without it,
    says how to watch the run live."""

    def __init__(self, listen: str | None, console: Any) -> None:
        self.listen = listen
        self.console = console
        self.server: Any = None

    def open(self, registry: Path) -> None:
        """Called once the demo's group is defined in ``registry``."""
        if self.listen is None:
            self.console.print(
                f"watch it live: affinity demo --web (serves http://{WEB_LISTEN}/), "
                f"or meanwhile: affinity web --registry {registry}",
                highlight=False,
                soft_wrap=True,
            )
            return
        from affinity.cli.web import missing_modules

        missing = missing_modules()
        if missing:
            self.console.print(f"no live page: the web extra is missing ({', '.join(missing)}): {install_hint('web')}")
            return
        from affinity.web.app import WebServer, bind, parse_listen
        from affinity.web.monitor import Monitor, WebOptions

        try:
            sock = bind(*parse_listen(self.listen))
        except (ValueError, OSError) as error:
            self.console.print(f"no live page: cannot listen on {self.listen}: {error}", highlight=False)
            return
        self.server = WebServer(Monitor(WebOptions((), str(registry))), sock)
        self.server.start()
        self.console.print(f"live page: {self.server.url}", highlight=False, soft_wrap=True)

    def close(self) -> None:
        """Stops serving (the demo is over)."""
        if self.server is not None:
            self.server.stop()
            self.server = None


def _subscribe(port: int, count: int, threading: str) -> dict[str, float]:
    with affinity.Client(threading=threading) as client:  # type: ignore[arg-type]
        sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
        print("ready", flush=True)
        received = 0
        received_bytes = 0
        first = 0.0
        deadline = time.monotonic() + 300
        while received < count and time.monotonic() < deadline:
            batch = sub.poll_batch(4096)
            if batch and not first:
                first = time.perf_counter()
            received += len(batch)
            received_bytes += sum(map(len, batch))
        elapsed = max(time.perf_counter() - first, 1e-9)
        return {
            "received": received,
            "seconds": round(elapsed, 3),
            "messages_per_second": round(received / elapsed),
            "megabytes_per_second": round(received_bytes / elapsed / 1e6, 1),
        }


def _publish(port: int, count: int, size: int, threading: str) -> None:
    with affinity.Client(threading=threading) as client:  # type: ignore[arg-type]
        pub = client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
        deadline = time.monotonic() + 30
        while not pub.is_connected:
            client.do_work()
            if time.monotonic() > deadline:
                raise affinity.DriverTimeoutError("the subscriber never connected")
        batch = [bytes([i % 256]) * size for i in range(1024)]
        sent = 0
        while sent < count:
            sent += pub.offer_batch(batch[: min(len(batch), count - sent)])
            client.do_work()
        # Keep serving NAKs and status messages until the subscriber has everything.
        linger_until = time.monotonic() + 2
        while time.monotonic() < linger_until:
            client.do_work()


def run(args: argparse.Namespace) -> int:
    """Runs the transport demo; prints one JSON line with the subscriber's figures."""
    if args.size < 1:
        print("affinity demo: --size must be at least 1", file=sys.stderr)
        return 2
    if args.role == "sub":
        print(json.dumps(_subscribe(args.port, args.count, args.threading)), flush=True)
        return 0
    if args.role == "pub":
        _publish(args.port, args.count, args.size, args.threading)
        return 0
    port = args.port or free_udp_port()
    command = [sys.executable, "-m", "affinity.cli", "demo", "transport", "--role", "sub", "--port", str(port)]
    command += ["--count", str(args.count), "--threading", args.threading]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            print("affinity demo: the subscriber process failed to start", file=sys.stderr)
            return 1
        print(f"sending {args.count:,} messages of {args.size} B over 127.0.0.1:{port} ...", flush=True)
        _publish(port, args.count, args.size, args.threading)
        output, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    figures = json.loads(output.strip().splitlines()[-1])
    print(
        f"received {figures['received']:,} messages in {figures['seconds']} s: "
        f"{figures['messages_per_second']:,} messages/s, {figures['megabytes_per_second']} MB/s"
    )
    return 0 if figures["received"] == args.count else 1
