"""Routing throughput from Python, in batches: ``python benches/bench_routing.py``.

Reports medians of 5 runs of ``Router.route_members`` (sticky: subjects seen before, composite
bound) and ``Router.subscribe_members`` (100,000 distinct new subjects, the headline; and
100,000 over 50,000 subjects, half of them re-subscribes), plus single-call ``Router.route``.
``--json`` prints one JSON line per measurement instead (benches/harness.py records them).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from affinity.routing import Router

USERS = 10_000
RUNS = 5


def make_router() -> Router:
    router = Router(max_events=1024)
    router.add_data_service("trades", ["^/PRIVATE/[^/]+/FXTRADE"])
    router.add_source_group(
        "adapters",
        [[f"TradeAdapter{i}" for i in range(1, 5)]],
        [("trading-adapters", "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE")],
    )
    return router


def rate(count: int, seconds: float) -> float:
    return count / seconds / 1e6


def main() -> None:
    router = make_router()
    router.subscribe_members([f"/PRIVATE/user{u}-0/FXTRADE" for u in range(USERS)])
    seen = [f"/PRIVATE/user{u}-1/FXTRADE" for u in range(USERS)]
    router.route_members(seen)
    batch = seen * 20
    sticky, single, fresh, distinct = [], [], [], []
    for run in range(RUNS):
        start = time.perf_counter()
        router.route_members(batch)
        sticky.append(rate(len(batch), time.perf_counter() - start))
        start = time.perf_counter()
        for subject in seen:
            router.route(subject)
        single.append(rate(len(seen), time.perf_counter() - start))
        subjects = [f"/PRIVATE/user{i % 50_000}-{run + 2}/FXTRADE" for i in range(100_000)]
        other = make_router()
        start = time.perf_counter()
        other.subscribe_members(subjects)
        fresh.append(rate(len(subjects), time.perf_counter() - start))
        subjects = [f"/PRIVATE/user{i}-{run + 2}/FXTRADE" for i in range(100_000)]
        other = make_router()
        start = time.perf_counter()
        other.subscribe_members(subjects)
        distinct.append(rate(len(subjects), time.perf_counter() - start))
    for name, values in [
        ("sticky lookups, batch route_members", sticky),
        ("sticky lookups, one route() per call", single),
        ("distinct new subjects, batch subscribe_members", distinct),
        ("mixed (half re-subscribes), batch subscribe_members", fresh),
    ]:
        if "--json" in sys.argv[1:]:
            record = {"measurement": name, "median_mps": round(statistics.median(values), 3)}
            print(json.dumps({**record, "inner_runs_mps": [round(v, 3) for v in values]}), flush=True)
            continue
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:<40} median {statistics.median(values):6.2f} M/s   runs [{runs}]")


if __name__ == "__main__":
    main()
