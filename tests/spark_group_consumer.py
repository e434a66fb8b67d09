"""A consumer process for the Spark tests: ``affinity.spark.consume`` written to a JSON Lines file.

Usage: ``python spark_group_consumer.py REGISTRY GROUP INDEX COUNT OUT [LIVENESS_SECONDS [LISTEN HOST]]``
(``LISTEN``: the inbox's fixed ``host:port``, which others name in ``bootstrap``; ``HOST``: the
address it advertises).
One line per item, flushed before the next poll acknowledges it, so a SIGKILL loses no line of an
acknowledged message: ``{"t": "data", "q": queue, "batch": b, "part": p, "seq": s, "rows": [[k, n], ...]}``
(with ``"hosts": [h, ...]`` when the rows have a column ``h``),
``{"t": "commit", "q": queue, "batch": b, "query": id, "complete": bool}`` or ``{"t": "abort", ...}``;
each line also has ``"poll"``, the number of the poll that returned it (from 1). A poll that
returns nothing after one that returned items writes ``{"t": "poll", "poll": p}`` (it acknowledged
them); ``{"t": "stats", "poll": p, "duplicates_discarded": d, "replays_discarded": r}`` follows every
poll that discarded a duplicate, and ends the file when SIGTERM closes the consumer cleanly
(planned handoff). Prints ``ready`` once it owns its primary queues.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

from affinity.spark import AbortItem, CommitItem, DataItem, Item, SinkConsumer


def main() -> None:
    registry, group, index, count, out = sys.argv[1:6]
    liveness = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
    placement = dict(zip(("listen", "host"), sys.argv[7:9], strict=False))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = SinkConsumer(
        group,
        int(index),
        int(count),
        registry=registry,
        name=f"spark-test-{index}",
        liveness_timeout=liveness,
        cycle=1.0,
        **placement,
    )
    deadline = time.monotonic() + 30
    while len(consumer.owned_queues()) < 2 and time.monotonic() < deadline:  # its primaries (QC 6, count 3)
        consumer.poll(100, 0.05)
    print("ready", flush=True)
    polls, delivered, discarded = 0, False, -1
    with open(out, "a", encoding="utf-8") as sink:
        while not stop.is_set():
            polls += 1
            items = consumer.poll(1000, 0.05)
            for item in items:
                sink.write(json.dumps(_line(item) | {"ts": round(time.time(), 3), "poll": polls}) + "\n")
            if delivered and not items:  # this poll began by acknowledging the previous one's items
                sink.write(json.dumps({"t": "poll", "poll": polls}) + "\n")
            delivered = bool(items)
            if consumer.stats.duplicates_discarded != discarded:
                discarded = consumer.stats.duplicates_discarded
                sink.write(json.dumps(_stats(consumer, polls)) + "\n")
            sink.flush()
        consumer.close()
        sink.write(json.dumps(_stats(consumer, polls)) + "\n")


def _line(item: Item) -> dict[str, Any]:
    if isinstance(item, DataItem):
        batch = item.batch()
        rows = list(zip(batch.column("k").to_pylist(), batch.column("n").to_pylist(), strict=True))
        line = {"t": "data", "q": item.queue, "batch": item.batch_id, "part": item.partition, "seq": item.sequence}
        line["rows"] = rows
        if "h" in batch.schema.names:
            line["hosts"] = batch.column("h").to_pylist()
        return line
    if isinstance(item, CommitItem):
        return {
            "t": "commit",
            "q": item.queue,
            "batch": item.batch_id,
            "query": str(item.query_id),
            "complete": item.complete,
        }
    assert isinstance(item, AbortItem)
    return {"t": "abort", "q": item.queue, "batch": item.batch_id}


def _stats(consumer: SinkConsumer, polls: int) -> dict[str, Any]:
    stats = consumer.stats
    return {
        "t": "stats",
        "poll": polls,
        "ts": round(time.time(), 3),
        "duplicates_discarded": stats.duplicates_discarded,
        "replays_discarded": stats.replays_discarded,
    }


if __name__ == "__main__":
    main()
