"""A hostile client of a shared ``affinity driver``: writes raw records into the to-driver ring
of ``cnc.dat``, built from the layout in ``docs/driver-protocol.md`` (nothing imported from
``affinity``), the way a buggy or malicious process of the same user could.

Run as ``python ring_hostile_client.py DIR ACTION [ARG...]``; it prints one line saying what it
did (``claimed <position>``, ``malformed <position>``, ``forged <client id>``, ``flooded <client
id> <publications> <invented ids>``). Actions:

- ``claim-and-die``: claims room for an ADD_PUBLICATION, writes its header with the negative
  (uncommitted) length, and kills itself with SIGKILL before the commit;
- ``malformed``: commits a record whose length (3) is shorter than a record header;
- ``forge-close CLIENT_ID``: CLIENT_CLOSE for another client's id, without its token;
- ``corrupt-positions``: moves the tail more than a buffer past the head (producers would find
  the ring full for ever);
- ``flood PUBLICATIONS INVENTED``: as one client, ADD_PUBLICATION on PUBLICATIONS streams, then
  keepalives from INVENTED client ids it reserves from the correlation counter.

Producers claim with a compare-and-set on the tail, as the ring requires; Python has no atomics,
so they come from ``libatomic`` (``__atomic_compare_exchange_8``, ``__atomic_fetch_add_8``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import signal
import struct
import sys
import time
from pathlib import Path

CNC_HEADER_LENGTH = 128
TO_DRIVER_LENGTH_OFFSET = 4
RING_TRAILER_LENGTH = 768
TAIL_POSITION = 128
HEAD_POSITION = 384
CORRELATION_COUNTER = 512
RECORD_HEADER_LENGTH = 8
RECORD_ALIGNMENT = 8
PADDING_TYPE = -1
ADD_PUBLICATION = 0x01
CLIENT_KEEPALIVE = 0x06
CLIENT_CLOSE = 0x0B
SEQ_CST = 5
FULL_RING_WAIT_S = 10.0


def atomics() -> ctypes.CDLL | None:
    """libatomic, or None where it is not installed."""
    name = ctypes.util.find_library("atomic")
    try:
        return ctypes.CDLL(name or "libatomic.so.1")
    except OSError:
        return None


def align(length: int) -> int:
    return (length + RECORD_ALIGNMENT - 1) & ~(RECORD_ALIGNMENT - 1)


def string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<i", len(data)) + data


class Ring:
    """The to-driver ring of ``DIR/cnc.dat``, producer side."""

    def __init__(self, directory: Path) -> None:
        fd = os.open(directory / "cnc.dat", os.O_RDWR)
        try:
            self.map = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        (length,) = struct.unpack_from("<i", self.map, TO_DRIVER_LENGTH_OFFSET)
        self.capacity = length - RING_TRAILER_LENGTH
        self.trailer = CNC_HEADER_LENGTH + self.capacity
        lib = atomics()
        if lib is None:
            raise SystemExit("no libatomic")
        # getattr: a double-underscore name written in a class body would be mangled.
        self._cas = getattr(lib, "__atomic_compare_exchange_8")
        self._cas.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int]
        self._cas.restype = ctypes.c_bool
        self._add = getattr(lib, "__atomic_fetch_add_8")
        self._add.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
        self._add.restype = ctypes.c_int64
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))

    def i64(self, offset: int) -> int:
        return int(struct.unpack_from("<q", self.map, offset)[0])

    def next_id(self, count: int = 1) -> int:
        """Reserves ``count`` correlation ids (client ids are among them); the first one."""
        return int(self._add(self._base + self.trailer + CORRELATION_COUNTER, count, SEQ_CST)) + 1

    def claim(self, length: int) -> int:
        """Claims a record of ``length`` bytes (header included); its offset in the file."""
        required = align(length)
        mask = self.capacity - 1
        deadline = time.monotonic() + FULL_RING_WAIT_S
        while True:
            head = self.i64(self.trailer + HEAD_POSITION)
            tail = self.i64(self.trailer + TAIL_POSITION)
            index = tail & mask
            to_end = self.capacity - index
            padding = to_end if required > to_end else 0
            if tail - head + required + padding > self.capacity:
                if time.monotonic() > deadline:
                    raise SystemExit("the ring stayed full")
                time.sleep(0.001)
                continue
            expected = ctypes.c_int64(tail)
            if self._cas(
                self._base + self.trailer + TAIL_POSITION,
                ctypes.addressof(expected),
                tail + required + padding,
                SEQ_CST,
                SEQ_CST,
            ):
                if padding:
                    struct.pack_into("<ii", self.map, CNC_HEADER_LENGTH + index, padding, PADDING_TYPE)
                    return CNC_HEADER_LENGTH
                return CNC_HEADER_LENGTH + index

    def write(self, type_id: int, payload: bytes) -> int:
        """Claims, writes and commits one record; its offset in the file."""
        length = RECORD_HEADER_LENGTH + len(payload)
        at = self.claim(length)
        struct.pack_into("<ii", self.map, at, -length, type_id)
        self.map[at + RECORD_HEADER_LENGTH : at + length] = payload
        struct.pack_into("<i", self.map, at, length)
        return at


def add_publication(client_id: int, correlation_id: int, stream_id: int) -> bytes:
    return struct.pack("<qqi", client_id, correlation_id, stream_id) + string("aeron:ipc")


def main(argv: list[str]) -> None:
    directory, action, *args = argv
    ring = Ring(Path(directory))
    if action == "claim-and-die":
        payload = add_publication(ring.next_id(), ring.next_id(), 9)
        length = RECORD_HEADER_LENGTH + len(payload)
        at = ring.claim(length)
        struct.pack_into("<ii", ring.map, at, -length, ADD_PUBLICATION)
        print(f"claimed {at - CNC_HEADER_LENGTH}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "malformed":
        at = ring.claim(48)
        struct.pack_into("<ii", ring.map, at, 3, ADD_PUBLICATION)
        print(f"malformed {at - CNC_HEADER_LENGTH}", flush=True)
    elif action == "corrupt-positions":
        tail = ring.i64(ring.trailer + HEAD_POSITION) + 4 * ring.capacity
        struct.pack_into("<q", ring.map, ring.trailer + TAIL_POSITION, tail)
        print(f"tail {tail}", flush=True)
    elif action == "forge-close":
        victim = int(args[0])
        ring.write(CLIENT_CLOSE, struct.pack("<qq", victim, 0))
        ring.write(CLIENT_CLOSE, struct.pack("<qq", victim, 0x0BAD))
        print(f"forged {victim}", flush=True)
    elif action == "flood":
        publications, invented = int(args[0]), int(args[1])
        client_id = ring.next_id()
        for i in range(publications):
            ring.write(ADD_PUBLICATION, add_publication(client_id, ring.next_id(), 1000 + i))
        first = ring.next_id(invented)
        for invented_id in range(first, first + invented):
            ring.write(CLIENT_KEEPALIVE, struct.pack("<qq", invented_id, 1))
        print(f"flooded {client_id} {publications} {invented}", flush=True)
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
