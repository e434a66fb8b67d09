"""The ``--no-spark`` event generator: a process publishing account events with :class:`GroupPublisher`.

Event ``v`` (0, 1, 2, ...) is account ``v % accounts`` with per-account sequence number
``v // accounts + 1``; the key is the account id in decimal. Events are generated at ``--rate``
per second (in ticks of :data:`GENERATOR_TICK`) until ``--total``; the generator then waits until
the group acknowledged everything and prints a final progress line with ``done: true``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence

import affinity
from affinity.demo import protocol
from affinity.demo.records import encode_event
from affinity.demo.settings import FLUSH_TIMEOUT, GENERATOR_TICK, STATUS_INTERVAL

#: Exit code when SIGINT or SIGTERM stopped the generator before its last event (128 + SIGINT).
STOPPED_EXIT_CODE = 130


def account_key(account: int) -> bytes:
    """The group key of an account: its id in decimal."""
    return str(account).encode()


def event_of(value: int, accounts: int) -> tuple[int, int]:
    """``(account, seq)`` of the ``value``-th event."""
    return value % accounts, value // accounts + 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m affinity.demo.generator``."""
    parser = argparse.ArgumentParser(prog="python -m affinity.demo.generator", description=__doc__)
    parser.add_argument("--group", required=True)
    parser.add_argument("--registry", required=True)
    parser.add_argument("--accounts", type=int, required=True)
    parser.add_argument("--rate", type=int, required=True)
    parser.add_argument("--total", type=int, required=True)
    args = parser.parse_args(argv)
    from affinity.groups import GroupPublisher

    keys = [account_key(a) for a in range(args.accounts)]
    stop = threading.Event()
    # Ctrl-C reaches the whole process group; SIGTERM comes from the orchestrator. Either ends the
    # loop so that the publisher and the client close (the client removes its driver's folder).
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    with (
        affinity.Client() as client,
        GroupPublisher(client, args.group, registry=args.registry, name="generator") as pub,
    ):
        start_ns = time.time_ns()
        start = time.monotonic()
        generated = 0  # events created (some may still wait for the publisher to take them)
        taken = 0  # events the publisher accepted
        pending_keys: list[bytes] = []
        pending_payloads: list[bytes] = []
        next_status = 0.0
        while taken < args.total and not stop.is_set():
            now = time.monotonic()
            target = min(args.total, int((now - start) * args.rate))
            if target > generated:
                event_ns = time.time_ns()
                for value in range(generated, target):
                    account, seq = event_of(value, args.accounts)
                    pending_keys.append(keys[account])
                    pending_payloads.append(encode_event(account, seq, event_ns))
                generated = target
            if pending_keys:
                n = pub.publish_batch(pending_keys, pending_payloads)
                del pending_keys[:n]
                del pending_payloads[:n]
                taken += n
            if now >= next_status:
                print(protocol.encode(protocol.GeneratorProgress(start_ns, taken, False)), flush=True)
                next_status = now + STATUS_INTERVAL
            time.sleep(GENERATOR_TICK)
        if stop.is_set():
            print(f"generator: stopped by a signal after {taken:,} events", file=sys.stderr)
            return STOPPED_EXIT_CODE
        acked = pub.flush(timeout=FLUSH_TIMEOUT)
        print(protocol.encode(protocol.GeneratorProgress(start_ns, taken, True)), flush=True)
        if not acked:
            print(f"generator: not everything was acknowledged within {FLUSH_TIMEOUT} s", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
