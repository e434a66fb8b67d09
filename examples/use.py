"""The README's first example: one publication and one subscription on a loopback UDP channel.

Prints the first message with its stream id, then the next two as a batch.
"""

import os
import time

import affinity

# examples are run by tests/test_examples.py, which may choose another free port.
CHANNEL = os.environ.get("AFFINITY_EXAMPLE_CHANNEL", "aeron:udp?endpoint=127.0.0.1:40123")

with affinity.Client() as client:  # embedded driver on its own thread
    sub = client.add_subscription(CHANNEL, 10)
    pub = client.add_publication(CHANNEL, 10)
    if not pub.wait_connected(timeout=5.0):  # sleeps (no busy loop) until the subscriber answers
        raise SystemExit("no subscriber connected within 5 s")
    pos = pub.offer(b"payload")  # > 0: new position; < 0: affinity.BACK_PRESSURED, ...
    n = pub.offer_batch([b"a", b"b"])  # or a pyarrow binary / large_binary array
    sub.wait_image(timeout=5.0)  # True once the publication's image is connected

    deadline = time.monotonic() + 5.0
    while sub.poll(lambda data, header: print(data, header.stream_id), 1) == 0:  # prints b'payload' 10
        if time.monotonic() > deadline:
            raise SystemExit("nothing received within 5 s")
        time.sleep(0.001)  # the data is still on its way
    msgs: list[bytes] = []
    while len(msgs) < n and time.monotonic() < deadline:
        batch = sub.poll_batch(1000)  # list[bytes]; poll_batch(1000, as_arrow=True) for Arrow
        msgs += batch
        if not batch:
            time.sleep(0.001)
    print(msgs)
