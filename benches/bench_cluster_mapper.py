"""What the cluster's ``master-mapper`` costs a publish at a slave: updates per second forwarded
from a source at the slave avalon to a subscriber at its master golan, two router processes on
loopback, side by side in interleaved rounds::

    python benches/bench_cluster_mapper.py WORKDIR [--rounds 5] [--updates 20000] [--baseline COMMIT]

Variants, each round in this order (fresh router processes for every run):

* ``baseline`` (with ``--baseline COMMIT``): the routers run that commit's ``python/affinity``
  (``git archive``) over this build's compiled extension: the forwarding path before the mapper;
* ``domain``: this build, the default mapper;
* ``plugin``: this build, a Python plugin mapper that answers the pattern domain (a function call
  per publish: what any plugin adds).

Per run: the time from the first publish to the last update received at golan (every update
received once, in order, or the run fails). Prints one JSON line per run and one per variant
(median, min, max of the rounds; ``os.getloadavg()`` at the start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import affinity
import cluster_conf as conf
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port
from test_cluster_nodes import FEED, cluster_conf, start_node
from test_subjects_processes import LIVENESS, Process

#: The subject published at the slave.
SUBJECT = "/STOCK/BENCH"
#: Seconds a run may take before it fails.
RUN_TIMEOUT = 120.0
#: The plugin module the ``plugin`` variant loads (written into WORKDIR).
PLUGIN = "def same_domain(subject, domain):\n    return domain\n"


def run_once(client: affinity.Client, workdir: Path, mapper: str | None, updates: int, env: dict[str, str]) -> float:
    """One run: updates per second from avalon's source to golan's subscriber."""
    ports = {node: free_udp_port() for node in ("golan", "avalon")}
    config = workdir / "cluster.conf"
    config.write_text(conf.settings(master_mapper=mapper) + cluster_conf(ports["golan"], ports["avalon"]))
    saved = dict(os.environ)
    os.environ.update(env)
    processes: list[Process] = []
    try:
        for node in ("golan", "avalon"):
            processes.append(start_node(config, node, conf.loopback(ports[node])))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    feed = Source(client, conf.loopback(ports["golan"]), FEED, liveness_timeout=LIVENESS)
    feed.on_request(lambda subject: feed.publish(subject, b"image", image=True))
    subscriber = Subscriber(client, conf.loopback(ports["golan"]), name="bench", liveness_timeout=LIVENESS)
    received: list[int] = []

    def on_data(subject: str, flags: Flags, payload: bytes) -> None:
        if flags & Flags.UPDATE:
            received.append(int(payload))

    subscriber.subscribe(SUBJECT, on_data)
    source = Source(client, conf.loopback(ports["avalon"]), "bench-publisher", liveness_timeout=LIVENESS)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        # Warm the link: one update through before timing (the first publish opens it).
        while not source.router_live or not source.publish(SUBJECT, b"-1"):
            feed.poll(64)
            subscriber.poll(256)
            source.poll(64)
            assert time.monotonic() < deadline, "the source was never heard"
        while not received:
            feed.poll(64)
            subscriber.poll(256)
            source.poll(64)
            assert time.monotonic() < deadline, "the warm-up update never arrived"
        received.clear()
        started = time.perf_counter()
        sent = 0
        while len(received) < updates:
            while sent < updates and source.publish(SUBJECT, str(sent).encode()):
                sent += 1
                if sent % 64 == 0:
                    break
            source.poll(64)
            subscriber.poll(1024)
            feed.poll(16)
            assert time.monotonic() < deadline, f"{len(received)} of {updates} updates within {RUN_TIMEOUT} s"
        elapsed = time.perf_counter() - started
        assert received == list(range(updates)), "every update once, in order"
        return updates / elapsed
    finally:
        for closing in (source, subscriber, feed):
            closing.close()
        for process in processes:
            process.stop()


def baseline_tree(workdir: Path, commit: str) -> Path:
    """``commit``'s ``python/affinity`` with this build's compiled extension; its ``python`` dir."""
    root = workdir / f"baseline-{commit}"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", commit, "python/affinity"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    installed = Path(affinity.__file__).parent
    for extension in installed.glob("_affinity*.so"):
        shutil.copy2(extension, root / "python" / "affinity" / extension.name)
    return root / "python"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=20000)
    parser.add_argument("--baseline", metavar="COMMIT", help="also run the routers of this commit's Python tree")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    (args.workdir / "bench_mapper_plugin.py").write_text(PLUGIN)
    variants: dict[str, tuple[str | None, dict[str, str]]] = {}
    if args.baseline:
        variants["baseline"] = (None, {"PYTHONPATH": str(baseline_tree(args.workdir, args.baseline))})
    variants["domain"] = ("domain", {})
    variants["plugin"] = ("bench_mapper_plugin:same_domain", {"PYTHONPATH": str(args.workdir)})
    load_start = os.getloadavg()
    results: dict[str, list[float]] = {name: [] for name in variants}
    client = affinity.Client()
    try:
        for round_ in range(args.rounds):
            for name, (mapper, env) in variants.items():
                rate = run_once(client, args.workdir, mapper, args.updates, env)
                results[name].append(rate)
                line = {"round": round_, "variant": name, "updates_per_s": round(rate), "load": os.getloadavg()}
                print(json.dumps(line), flush=True)
    finally:
        client.close()
    load_end = os.getloadavg()
    for name, rates in results.items():
        measurement = f"publish at a slave forwarded to the master, master-mapper variant {name}"
        print_summary(measurement, rates, args.updates, (load_start, load_end))
    return 0


def print_summary(
    measurement: str, rates: list[float], updates: int, loads: tuple[tuple[float, ...], tuple[float, ...]]
) -> None:
    """One JSON line: the median, min and max of ``rates`` (updates/s) and the load averages at
    the start and end of the rounds."""
    summary = {
        "measurement": measurement,
        "median": round(statistics.median(rates)),
        "min": round(min(rates)),
        "max": round(max(rates)),
        "unit": "updates/s",
        "rounds": len(rates),
        "updates": updates,
        "load_start": loads[0],
        "load_end": loads[1],
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    sys.exit(main())
