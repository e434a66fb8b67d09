"""The README's consumer-group example: a publisher and two consumers of one group, in one process.

Every key reaches one consumer, in order; each consumer acknowledges what it processed. The group
is defined in a temporary registry so the example leaves nothing behind in ``~/.local/state``.
"""

import tempfile
import time

import affinity
from affinity.groups import GroupConsumer, GroupPublisher, create_group

keys = [f"account-{n % 10}".encode() for n in range(100)]  # 10 accounts, 10 orders each
payloads = [f"order {n}".encode() for n in range(100)]

with tempfile.TemporaryDirectory(prefix="affinity-example-") as registry, affinity.Client() as client:
    # registry: default $AFFINITY_REGISTRY, else ~/.local/state/affinity
    create_group("orders", hash_prefix="orders", hash_count=64, queue_count=8, queue_size=64 << 20, registry=registry)
    # cycle: a consumer holding a queue for its absent primary hands it back within 1 s (default 30 s)
    consumers = [GroupConsumer(client, "orders", index=i, count=2, registry=registry, cycle=1.0) for i in (0, 1)]
    pub = GroupPublisher(client, "orders", registry=registry)  # reads the definition from the registry

    deadline = time.monotonic() + 10.0
    while [consumer.owned_queues() for consumer in consumers] != [[0, 2, 4, 6], [1, 3, 5, 7]]:  # q % 2 == index
        if time.monotonic() > deadline:
            raise SystemExit("the consumers did not settle on their primary queues within 10 s")
        time.sleep(0.01)  # members find each other and claim their queues in the background
    while pub.publish(b"account-17", b"payload") < 0:  # > 0 sequence; < 0 NOT_CONNECTED / BACK_PRESSURED / CLOSED
        if time.monotonic() > deadline:
            raise SystemExit("the publisher did not learn the owner of account-17's queue within 10 s")
        time.sleep(0.01)  # NOT_CONNECTED: the publisher has not heard the queue's owner yet
    n = pub.publish_batch(keys, payloads)  # lists or pyarrow arrays; how many were taken

    received: dict[int, list[bytes]] = {0: [], 1: []}
    while sum(map(len, received.values())) < 1 + n and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            for m in consumer.poll(1000, timeout=0.05):  # m.key, m.payload, m.queue, m.producer, m.sequence
                received[index].append(m.key)
                consumer.ack(m)  # cumulative per (producer, queue)
    # consumer.poll_batch(...) returns the same as one pyarrow.RecordBatch (key, payload, queue,
    # bucket, producer, sequence, epoch, subject); consumer.ack_record(queue, producer, sequence, epoch)
    print("all acknowledged:", pub.flush(timeout=5.0))  # True once everything sent is acknowledged
    for index, consumer in enumerate(consumers):
        accounts = sorted({key.decode() for key in received[index]})
        print(f"consumer {index}: {len(received[index])} messages, queues {consumer.owned_queues()}, {accounts}")
    pub.close()
    for consumer in consumers:
        consumer.close()  # clean leave: planned handoff of its queues
