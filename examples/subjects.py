"""The README's subject-router example: a router, two trade adapters and a subscriber, in one process.

The router uses examples/services.conf; the adapter the tables pick for alice answers her
subscription with an image, which the subscriber prints.
"""

import os
import time
from pathlib import Path

import affinity
from affinity.subjects import Source, SubjectRouter, Subscriber

CONFIG = Path(__file__).with_name("services.conf")  # examples/services.conf
# examples are run by tests/test_examples.py, which may choose another free port.
ROUTER = os.environ.get("AFFINITY_EXAMPLE_CHANNEL", "aeron:udp?endpoint=127.0.0.1:40500")

with affinity.Client() as client, SubjectRouter(client, CONFIG, listen=ROUTER) as router:  # `affinity router`
    a = Source(client, router=ROUTER, label="TradeAdapterA")  # labels of examples/services.conf
    b = Source(client, router=ROUTER, label="TradeAdapterB")
    a.on_request(lambda subject: a.publish(subject, b"TradeAdapterA", image=True))  # answer with an image
    b.on_request(lambda subject: b.publish(subject, b"TradeAdapterB", image=True))
    sources = [a, b]
    deadline = time.monotonic() + 10.0
    while not all(up for _label, up in router.status().members):  # the router hears both adapters
        if time.monotonic() > deadline:
            raise SystemExit("the router did not hear both adapters within 10 s")
        time.sleep(0.01)
    sub = Subscriber(client, router=ROUTER)
    got: list[tuple[str, bytes]] = []
    sub.subscribe("/PRIVATE/alice/FXTRADE", lambda subject, flags, payload: got.append((subject, payload)))

    while not got and time.monotonic() < deadline:
        for src in sources:
            src.poll(100)  # runs on_request: the adapter picked for alice publishes the image
        sub.poll(100)  # runs the subscription's callback
        time.sleep(0.01)
    if not got:
        raise SystemExit("no image within 10 s")
    subject, payload = got[0]
    print(subject, "served by", payload.decode())
    sub.close()
    for src in sources:
        src.close()
