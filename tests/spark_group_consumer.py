"""A consumer process for the Spark tests: ``affinity.spark.consume`` written to a JSON Lines file.

Usage: ``python spark_group_consumer.py REGISTRY GROUP INDEX COUNT OUT [LIVENESS_SECONDS]``.
One line per item, flushed before the next poll acknowledges it, so a SIGKILL loses no line of an
acknowledged message: ``{"t": "data", "q": queue, "batch": b, "part": p, "seq": s, "rows": [[k, n], ...]}``,
``{"t": "commit", "q": queue, "batch": b, "complete": bool}`` or ``{"t": "abort", ...}``.
Prints ``ready`` once it owns a queue; SIGTERM closes it cleanly (planned handoff).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time

from affinity.spark import AbortItem, CommitItem, DataItem, SinkConsumer


def main() -> None:
    registry, group, index, count, out = sys.argv[1:6]
    liveness = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
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
    )
    deadline = time.monotonic() + 30
    while len(consumer.owned_queues()) < 2 and time.monotonic() < deadline:  # its primaries (QC 6, count 3)
        consumer.poll(100, 0.05)
    print("ready", flush=True)
    with open(out, "a", encoding="utf-8") as sink:
        while not stop.is_set():
            for item in consumer.poll(1000, 0.05):
                if isinstance(item, DataItem):
                    batch = item.batch()
                    rows = list(zip(batch.column("k").to_pylist(), batch.column("n").to_pylist(), strict=True))
                    line = {
                        "t": "data",
                        "q": item.queue,
                        "batch": item.batch_id,
                        "part": item.partition,
                        "seq": item.sequence,
                        "rows": rows,
                    }
                elif isinstance(item, CommitItem):
                    line = {"t": "commit", "q": item.queue, "batch": item.batch_id, "complete": item.complete}
                else:
                    assert isinstance(item, AbortItem)
                    line = {"t": "abort", "q": item.queue, "batch": item.batch_id}
                line["ts"] = round(time.time(), 3)
                sink.write(json.dumps(line) + "\n")
            sink.flush()
    consumer.close()


if __name__ == "__main__":
    main()
