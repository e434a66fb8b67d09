"""A consumer group and the subjects router whose members are clients of a standalone driver
(``Client(dir=...)``): the driver and the members are separate processes, the inboxes are
``aeron:udp`` channels carried by the driver. Every wait is bounded by time."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import affinity
import pytest
from affinity.groups import GroupPublisher, create_group

CLI = [sys.executable, "-m", "affinity.cli"]
MESSAGES = 300
KEYS = 10
TIMEOUT_S = 60.0


@pytest.fixture
def driver_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "driver"
    process = subprocess.Popen(
        [*CLI, "driver", "--dir", str(directory), "--term-length", "1m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "ready in" in line, f"driver did not start: {line!r}"
    yield directory
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    process.communicate(timeout=20)


CONSUMER = textwrap.dedent(
    f"""
    import sys, time
    import affinity
    from affinity.groups import GroupConsumer
    DIR, REGISTRY = sys.argv[1], sys.argv[2]
    deadline = time.monotonic() + {TIMEOUT_S}
    seen = {{}}
    count = 0
    with affinity.Client(dir=DIR) as client:
        with GroupConsumer(client, "orders", 0, 1, auto_ack=True, registry=REGISTRY) as consumer:
            print("ready", flush=True)
            while count < {MESSAGES} and time.monotonic() < deadline:
                for message in consumer.poll(1000, timeout=0.05):
                    seen.setdefault(message.key, []).append(int(message.payload))
                    count += 1
    ordered = all(values == sorted(values) for values in seen.values())
    print(f"received {{count}} ordered {{ordered}} keys {{len(seen)}}", flush=True)
    """
)


def test_a_consumer_group_runs_through_a_standalone_driver_with_members_in_other_processes(
    driver_dir: Path, tmp_path: Path
) -> None:
    registry = tmp_path / "registry"
    create_group("orders", "orders", 16, 4, 1 << 20, registry)
    consumer = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, str(driver_dir), str(registry)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == "ready"
        with affinity.Client(dir=str(driver_dir)) as client, GroupPublisher(client, "orders", registry=registry) as pub:
            deadline = time.monotonic() + TIMEOUT_S
            sent = 0
            while sent < MESSAGES:
                assert time.monotonic() < deadline, f"only {sent} of {MESSAGES} published"
                if pub.publish(f"key-{sent % KEYS}", str(sent).encode()) > 0:
                    sent += 1
                else:
                    time.sleep(0.01)
            assert pub.flush(timeout=TIMEOUT_S), "not every message was acknowledged"
        output, errors = consumer.communicate(timeout=TIMEOUT_S + 30)
        assert consumer.returncode == 0, errors
        assert output.strip() == f"received {MESSAGES} ordered True keys {KEYS}"
    finally:
        consumer.kill()


ROUTER = textwrap.dedent(
    """
    import sys, time
    import affinity
    from affinity.subjects import SubjectRouter
    DIR, CONFIG, LISTEN = sys.argv[1], sys.argv[2], sys.argv[3]
    with affinity.Client(dir=DIR) as client:
        with SubjectRouter(client, CONFIG, listen=LISTEN, liveness_timeout=1.0):
            print("ready", flush=True)
            sys.stdin.read()  # until the test closes our stdin
    """
)


def test_the_subjects_router_runs_through_a_standalone_driver_in_its_own_process(driver_dir: Path) -> None:
    from affinity.subjects import Flags, Source, Subscriber
    from affinity.testing import loopback_channel

    listen = loopback_channel()
    config = Path(__file__).parent / "data" / "worked_example_transformer.conf"
    router = subprocess.Popen(
        [sys.executable, "-c", ROUTER, str(driver_dir), str(config), listen],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert router.stdout is not None
        assert router.stdout.readline().strip() == "ready"
        with affinity.Client(dir=str(driver_dir)) as client:
            source = Source(client, listen, "TradeAdapterA", heartbeat_interval=0.05, liveness_timeout=1.0)
            requested: list[str] = []
            source.on_request(requested.append)
            subscriber = Subscriber(client, listen, name="alice", heartbeat_interval=0.05, liveness_timeout=1.0)
            got: list[tuple[str, Flags, bytes]] = []
            deadline = time.monotonic() + TIMEOUT_S
            subject = "/PRIVATE/alice-0/FXTRADE"
            # The router learns of the source from its heartbeats: subscribe until it is routed.
            subscriber.subscribe(subject, lambda s, f, p: got.append((s, f, p)))
            while not requested:
                assert time.monotonic() < deadline, "the router never requested the subject"
                source.poll()
                subscriber.poll()
                time.sleep(0.005)
            source.publish(requested[0], b"image", image=True)
            source.publish(requested[0], b"update")
            # A subscribe the router saw before it heard the source is answered with a STATUS
            # ("no peer available") and re-requested once the source is up: data follows.
            data = [entry for entry in got if entry[1] != Flags.STATUS]
            while len(data) < 2:
                assert time.monotonic() < deadline, f"subscriber got {got}"
                subscriber.poll()
                time.sleep(0.005)
                data = [entry for entry in got if entry[1] != Flags.STATUS]
            assert data == [(subject, Flags.IMAGE, b"image"), (subject, Flags.UPDATE, b"update")]
            source.close()
            subscriber.close()
        _, errors = router.communicate(input="", timeout=30)
        assert router.returncode == 0, errors
    finally:
        router.kill()
