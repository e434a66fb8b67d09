"""A forger of consumer-group control messages, built only from the layouts in ``docs/control-plane.md``.

Run as a process by ``test_groups_forgery.py``::

    python groups_forger.py REGISTRY GROUP --acks --claims --duration 6 --pause-file PATH

It reads the members' discovery files (endpoints and member ids), then for ``--duration`` seconds
sends to every member's inbox, on the CONTROL stream, version-1 (unauthenticated) messages:

* ``--acks``: ACKs to every publisher, impersonating every consumer it found (and a random id),
  for every queue, epochs 1..4, acknowledging a sweep of sequence numbers (what a real owner would
  send after processing them);
* ``--claims``: HEARTBEATs of a consumer with member id 1 (the lowest: it wins equal epochs) whose
  inbox is the forger's own, claiming every queue *active* with a huge epoch (2^64 - 1) and with
  small epochs (2..4), with acks of every sequence in the sweep.

It also opens its own inbox's DATA stream and counts the DATA messages a publisher sent it (a
takeover). It prints one JSON line: messages sent, DATA messages received.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import time
from pathlib import Path

import affinity
from affinity.groups import GROUP_CONTROL_STREAM_ID, GROUP_DATA_STREAM_ID, load_group
from affinity.testing import loopback_channel

MASK = (1 << 64) - 1
KIND_HEARTBEAT, KIND_ACK = 1, 2
ROLE_CONSUMER = 2
STATE_ACTIVE = 2
FORGED_MEMBER_ID = 1
ACK_SWEEP = (1, 5, 10, 25, 50, 100, 200, 400, 800, 1600, 3200, 6400)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x00000100000001B3) & MASK
    return h


def fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & MASK
    k ^= k >> 33
    return k


def fingerprint(name: str, hash_prefix: str, hash_count: int, queue_count: int) -> int:
    """``docs/control-plane.md``: fmix64(fnv1a64(name ‖ 0xFF ‖ HP ‖ 0xFF ‖ HC u32 LE ‖ QC u32 LE))."""
    data = name.encode() + b"\xff" + hash_prefix.encode() + b"\xff" + struct.pack("<II", hash_count, queue_count)
    return fmix64(fnv1a64(data))


def header(kind: int, flags: int, group: int, sender: int) -> bytes:
    """The 24-byte common header, version 1."""
    return struct.pack("<BBHIQQ", 1, kind, flags, 0, group, sender)


def ack(group: int, consumer: int, producer: int, entries: list[tuple[int, int, int, int]]) -> bytes:
    """ACK: producer u64, entry_count u32, reserved u32, entries (queue, flags, epoch, acked, received)."""
    body = struct.pack("<QII", producer, len(entries), 0)
    for queue, epoch, acked, received in entries:
        body += struct.pack("<IIQQQ", queue, 0, epoch, acked, received)
    return header(KIND_ACK, 0, group, consumer) + body


def heartbeat(group: int, endpoint: str, claims: list[tuple[int, int, list[tuple[int, int, int]]]]) -> bytes:
    """A consumer's HEARTBEAT claiming ``(queue, epoch, acks)`` active, ``acks`` = (producer, acked, received)."""
    name, where = b"forger", endpoint.encode()
    body = struct.pack("<BBBBIIIII", ROLE_CONSUMER, len(name), len(where), 0, 0, 1, 4242, len(claims), 0)
    body += name + where
    for queue, epoch, acks in claims:
        body += struct.pack("<IBBHQ", queue, STATE_ACTIVE, 0, len(acks), epoch)
        for producer, acked, received in acks:
            body += struct.pack("<QQQ", producer, acked, received)
    return header(KIND_HEARTBEAT, 0, group, FORGED_MEMBER_ID) + body


def members(registry: Path, group: str) -> list[dict[str, object]]:
    found = []
    for path in sorted((registry / "members" / group).glob("*.json")):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("registry", type=Path)
    parser.add_argument("group")
    parser.add_argument("--acks", action="store_true")
    parser.add_argument("--claims", action="store_true")
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args()
    definition = load_group(args.group, args.registry)
    group = fingerprint(definition.name, definition.hash_prefix, definition.hash_count, definition.queue_count)
    queues = range(definition.queue_count)
    sent = 0
    data_received = 0
    with affinity.Client() as client:
        own_inbox = loopback_channel()
        own_endpoint = own_inbox.split("endpoint=", 1)[1]
        data_sub = client.add_subscription(own_inbox, GROUP_DATA_STREAM_ID)
        publications: dict[str, object] = {}
        print(json.dumps({"started": True, "inbox": own_endpoint}), flush=True)
        deadline = time.monotonic() + args.duration
        while time.monotonic() < deadline:
            found = members(args.registry, args.group)
            producers = [int(m["member_id"]) for m in found if m.get("role") == "publisher"]
            consumers = [int(m["member_id"]) for m in found if m.get("role") == "consumer"]
            for member in found:
                endpoint = str(member["endpoint"])
                if endpoint not in publications:
                    publications[endpoint] = client.add_publication(
                        f"aeron:udp?endpoint={endpoint}", GROUP_CONTROL_STREAM_ID
                    )
            messages: list[tuple[str, bytes]] = []
            for member in found:
                endpoint = str(member["endpoint"])
                if args.acks and member.get("role") == "publisher":
                    producer = int(member["member_id"])
                    for consumer in [*consumers, random.getrandbits(63)]:
                        for epoch in range(1, 5):
                            for acked in ACK_SWEEP:
                                entries = [(queue, epoch, acked, acked) for queue in queues]
                                messages.append((endpoint, ack(group, consumer, producer, entries)))
                if args.claims:
                    for epoch in (MASK, 2, 3, 4):
                        acks = [(producer, ACK_SWEEP[-1], ACK_SWEEP[-1]) for producer in producers]
                        claims = [(queue, epoch, acks) for queue in queues]
                        messages.append((endpoint, heartbeat(group, own_endpoint, claims)))
            for endpoint, message in messages:
                if publications[endpoint].offer(message) > 0:  # type: ignore[attr-defined]
                    sent += 1
            data_received += len(data_sub.poll_batch(100))
            time.sleep(0.02)
        print(json.dumps({"sent": sent, "data_received": data_received}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
