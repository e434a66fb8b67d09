"""A data-source process for the subject-router tests (not a test module).

``python tests/subject_peer.py LABEL ROUTER [ROUTER...] [--faucet] [--coverage PATTERN] [--failover]``

One source per router, or with ``--failover`` one source with the list (``routers=[...]``) that
moves to the next router when the one in use is lost.

Serves every subject a router requests: an image ``LABEL:subject:image`` at once, then an
update ``LABEL:subject:N`` every 50 ms. Subjects whose user starts with ``ghost`` are answered
NODATA notfound. Prints one line per request / discard / faucet event on stdout (flushed):
``REQUEST <router-index> <subject>``, ``DISCARD ...``, ``EVENT <json fields>``, and ``READY``
once its sources are open. Runs until killed (bounded to 120 s).
"""

from __future__ import annotations

import argparse
import sys
import time

import affinity
from affinity.subjects import Source

RUN_LIMIT = 120.0
UPDATE_INTERVAL = 0.05


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("label")
    parser.add_argument("routers", nargs="+")
    parser.add_argument("--faucet", action="store_true")
    parser.add_argument("--coverage", action="append")
    parser.add_argument("--liveness", type=float, default=1.0)
    parser.add_argument("--failover", action="store_true")
    args = parser.parse_args()
    client = affinity.Client()
    served: list[dict[str, int]] = []
    sources: list[Source] = []
    lists = [args.routers] if args.failover else [[router] for router in args.routers]
    for index, routers in enumerate(lists):
        source = Source(
            client,
            routers=routers,
            label=args.label,
            coverage=args.coverage,
            faucet="*" if args.faucet and not args.coverage else None,
            heartbeat_interval=0.05,
            liveness_timeout=args.liveness,
        )
        subjects: dict[str, int] = {}
        served.append(subjects)

        def requested(
            subject: str, source: Source = source, subjects: dict[str, int] = subjects, index: int = index
        ) -> None:
            print(f"REQUEST {index} {subject}", flush=True)
            if "/ghost" in subject:
                source.nodata(subject, "notfound")
                return
            subjects[subject] = 0
            source.publish(subject, f"{args.label}:{subject}:image".encode(), image=True)

        def discarded(subject: str, subjects: dict[str, int] = subjects, index: int = index) -> None:
            print(f"DISCARD {index} {subject}", flush=True)
            subjects.pop(subject, None)

        source.on_request(requested)
        source.on_discard(discarded)
        sources.append(source)
    print("READY", flush=True)
    start = time.monotonic()
    last_update = start
    while time.monotonic() - start < RUN_LIMIT:
        for source in sources:
            for event in source.poll(100):
                print(
                    f"EVENT {event.event} {event.topic} {event.client_name} {event.subscriber_client_name}", flush=True
                )
        now = time.monotonic()
        if now - last_update >= UPDATE_INTERVAL:
            last_update = now
            for source, subjects in zip(sources, served, strict=True):
                for subject in subjects:
                    subjects[subject] += 1
                    source.publish(subject, f"{args.label}:{subject}:{subjects[subject]}".encode())
        time.sleep(0.002)
    return 0


if __name__ == "__main__":
    sys.exit(main())
