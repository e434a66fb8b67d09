"""End-to-end tests of the transport through the Python API, each run twice: with an embedded
driver and with clients attached to a standalone driver process (conftest.py, ``driver_kind``)."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import affinity
import pyarrow as pa
import pytest
from affinity.testing import LossyRelay, free_udp_port, loopback_channel
from conftest import ClientFactory
from workload import make_message, mixed_sizes, pump

pytestmark = pytest.mark.both_drivers


def wait_connected(pub: affinity.Publication, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pub.is_connected:
        assert time.monotonic() < deadline, "publication never connected"
        time.sleep(0.001)


def test_offer_before_any_subscriber_reports_not_connected(client: affinity.Client, channel: str) -> None:
    pub = client.add_publication(channel, 10)
    assert not pub.is_connected
    assert pub.offer(b"x") == affinity.NOT_CONNECTED
    pub.close()


def test_round_trip_with_headers(client: affinity.Client, channel: str) -> None:
    sub = client.add_subscription(channel, 10)
    pub = client.add_publication(channel, 10)
    wait_connected(pub)
    position = pub.offer(b"hello")
    assert position == 64  # 32-byte header + 5 bytes, aligned to 32
    seen: list[tuple[bytes, affinity.Header]] = []
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        sub.poll(lambda data, header: seen.append((data, header)), 10)
    data, header = seen[0]
    assert data == b"hello"
    assert header.session_id == pub.session_id
    assert header.stream_id == 10
    assert header.position == position
    pub.close()
    sub.close()


def test_offer_batch_accepts_lists_and_arrow_arrays(client: affinity.Client, channel: str) -> None:
    sub = client.add_subscription(channel, 7)
    pub = client.add_publication(channel, 7)
    wait_connected(pub)
    assert pub.offer_batch([b"a", bytearray(b"bb"), memoryview(b"ccc")]) == 3
    assert pub.offer_batch(pa.array([b"d", b"", b"eeee"], type=pa.binary())) == 3
    large = pa.array([b"x" * 10, b"y" * 20, b"z"], type=pa.large_binary())
    assert pub.offer_batch(large.slice(1, 2)) == 2
    expected = [b"a", b"bb", b"ccc", b"d", b"", b"eeee", b"y" * 20, b"z"]
    received: list[bytes] = []
    deadline = time.monotonic() + 5
    while len(received) < len(expected) and time.monotonic() < deadline:
        received.extend(sub.poll_batch(100))
    assert received == expected
    pub.close()
    sub.close()


def test_poll_batch_returns_an_arrow_array(client: affinity.Client, channel: str) -> None:
    sub = client.add_subscription(channel, 7)
    pub = client.add_publication(channel, 7)
    wait_connected(pub)
    assert pub.offer_batch([b"one", b"two", b"three"]) == 3
    chunks: list[pa.Array] = []
    total = 0
    deadline = time.monotonic() + 5
    while total < 3 and time.monotonic() < deadline:
        array = sub.poll_batch(100, as_arrow=True)
        assert array.type == pa.large_binary()
        chunks.append(array)
        total += len(array)
    assert [v for chunk in chunks for v in chunk.to_pylist()] == [b"one", b"two", b"three"]
    pub.close()
    sub.close()


def test_arrow_arrays_with_nulls_are_refused(client: affinity.Client, channel: str) -> None:
    pub = client.add_publication(channel, 7)
    with pytest.raises(ValueError, match="nulls"):
        pub.offer_batch(pa.array([b"a", None], type=pa.binary()))
    with pytest.raises(TypeError, match="binary"):
        pub.offer_batch(pa.array([1, 2]))
    pub.close()


def test_too_long_message_raises(client: affinity.Client) -> None:
    channel = loopback_channel() + "|term-length=65536"
    sub = client.add_subscription(channel, 1)
    pub = client.add_publication(channel, 1)
    wait_connected(pub)
    assert pub.max_message_length == 8192
    with pytest.raises(affinity.MessageTooLongError, match="8193 bytes"):
        pub.offer(b"x" * 8193)
    assert pub.offer(b"x" * 8192) > 0
    pub.close()
    sub.close()


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("aeron:udp?endpoint=127.0.0.1:40123|term-length=100000", "term-length=100000"),
        ("aeron:udp?endpoint=127.0.0.1:40123|mtu=1000", "mtu=1000"),
        ("aeron:udp?endpoint=127.0.0.1:40123|colour=blue", "colour"),
        ("aeron:udp?endpoint=nowhere", "endpoint"),
        ("udp://127.0.0.1:1", "aeron:"),
        ("aeron:udp?endpoint=224.20.30.39:24326|fc=tagged", "tag"),
        ("aeron:udp?endpoint=224.20.30.39:24326|fc=min,g:/0", "g:/0"),
        ("aeron:udp?endpoint=224.20.30.39:24326|fc=min,t:fast", "fast"),
        ("aeron:udp?endpoint=224.20.30.39:24326|fc=fastest", "fastest"),
        ("aeron:udp?endpoint=127.0.0.1:40123|cc=cubic", "cc=cubic"),
        ("aeron:udp?endpoint=127.0.0.1:40123|control-mode=dynamic", "control-mode"),
        ("aeron:udp?endpoint=127.0.0.1:40123|tags=1,2", "tags"),
        ("aeron-spy:aeron:udp?endpoint=127.0.0.1:40123", "spy"),
        ("aeron:ipc?session-id=5", "session-id"),
        # A start position (init-term-id|term-id|term-offset) that does not fit.
        ("aeron:udp?endpoint=127.0.0.1:40123|init-term-id=100|term-id=99|term-offset=0", "term-id=99"),
        ("aeron:udp?endpoint=127.0.0.1:40123|init-term-id=1|term-id=1|term-offset=33", "term-offset=33"),
        ("aeron:ipc?term-length=64k|init-term-id=1|term-id=1|term-offset=65568", "term-offset=65568"),
        ("aeron:ipc?init-term-id=1|term-id=1", "term-offset"),
    ],
)
def test_bad_channel_uris_name_the_key_and_value(client: affinity.Client, uri: str, fragment: str) -> None:
    with pytest.raises(affinity.ChannelUriError, match=fragment.replace("|", r"\|")) as raised:
        client.add_publication(uri, 1)
    assert isinstance(raised.value, ValueError)


# unicast_rollover.json's start (Aeron's keys): 2048 bytes before the end of term 102 of a stream
# whose initial term is 100, so the first messages roll into term 103.
ROLLOVER_START = "term-length=64k|init-term-id=100|term-id=102|term-offset=63488"
ROLLOVER_POSITION = (102 - 100) * 65536 + 63488


@pytest.mark.parametrize("media", ["udp", "ipc"])
def test_a_publication_starts_at_init_term_id_term_id_and_term_offset(client: affinity.Client, media: str) -> None:
    base = loopback_channel() if media == "udp" else "aeron:ipc"
    sub = client.add_subscription(base, 21)
    pub = client.add_publication(f"{base}{'|' if media == 'udp' else '?'}{ROLLOVER_START}", 21)
    assert pub.position == ROLLOVER_POSITION
    wait_connected(pub)
    deadline = time.monotonic() + 10
    while not sub.images():
        assert time.monotonic() < deadline, "no image"
        time.sleep(0.001)
    [image] = sub.images()
    assert image.position == ROLLOVER_POSITION, image
    messages = [make_message(i, 8 + i % 1500) for i in range(2000)]
    assert pump(pub, sub, messages, timeout=60) == messages
    assert pub.position > ROLLOVER_POSITION + 3 * 65536, "rolled through every partition"
    pub.close()
    sub.close()


def test_a_udp_publication_holds_its_counters_at_the_start_until_connected(client: affinity.Client) -> None:
    pub = client.add_publication(f"{loopback_channel()}|{ROLLOVER_START}", 22)
    counters = pub.counters()
    assert (counters.position, counters.sender_position, counters.publisher_limit) == (
        ROLLOVER_POSITION,
        ROLLOVER_POSITION,
        ROLLOVER_POSITION,
    )
    assert pub.offer(b"x") == affinity.NOT_CONNECTED
    pub.close()


def test_a_start_position_is_refused_on_a_subscription_and_against_another_open_ipc_log(
    client: affinity.Client,
) -> None:
    with pytest.raises(affinity.ChannelUriError, match="apply to publications only"):
        client.add_subscription(f"{loopback_channel()}|{ROLLOVER_START}", 23)
    with pytest.raises(affinity.ChannelUriError, match="apply to publications only"):
        client.add_subscription(f"aeron:ipc?{ROLLOVER_START}", 23)
    first = client.add_publication(f"aeron:ipc?{ROLLOVER_START}", 23)
    same = client.add_publication(f"aeron:ipc?{ROLLOVER_START}", 23)
    assert same.session_id == first.session_id, "the same start is the same log"
    other = "aeron:ipc?term-length=64k|init-term-id=100|term-id=103|term-offset=0"
    with pytest.raises(affinity.ChannelUriError, match=rf"start position 196608\).*position {ROLLOVER_POSITION}"):
        client.add_publication(other, 23)
    same.close()
    first.close()


def test_an_unreliable_subscription_skips_loss_instead_of_repairing_it(new_client: ClientFactory) -> None:
    port = free_udp_port()
    relay = LossyRelay(f"127.0.0.1:{port}", loss=0.1, seed=3)
    try:
        with new_client() as client:
            sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}|reliable=false", 6)
            pub = client.add_publication(f"aeron:udp?endpoint={relay.address}", 6)
            wait_connected(pub)
            messages = [make_message(i, 200) for i in range(5000)]
            received: list[bytes] = []
            sent = 0
            deadline = time.monotonic() + 30

            def pending() -> bool:
                return sent < len(messages) or pub.counters().sender_position < pub.position

            while time.monotonic() < deadline and pending():
                if sent < len(messages):
                    sent += pub.offer_batch(messages[sent : sent + 50])
                received.extend(sub.poll_batch(1000))
            time.sleep(0.3)
            received.extend(sub.poll_batch(10_000))
            image = sub.images()[0]
        indexes = [struct.unpack_from("<Q", m)[0] for m in received]
        assert indexes == sorted(set(indexes)), "in order, no duplicates"
        assert all(m == messages[i] for i, m in zip(indexes, received, strict=True))
        assert image.naks_sent == 0 and image.unrecoverable_gaps > 0
        assert len(received) < len(messages)
    finally:
        relay.close()


def test_closed_objects_refuse_use(new_client: ClientFactory, channel: str) -> None:
    client = new_client()
    sub = client.add_subscription(channel, 3)
    pub = client.add_publication(channel, 3)
    client.close()
    assert client.is_closed and pub.is_closed and sub.is_closed
    assert pub.offer(b"x") == affinity.CLOSED
    with pytest.raises(affinity.ClosedError):
        sub.poll_batch(10)
    with pytest.raises(affinity.ClosedError):
        client.add_publication(channel, 3)


def test_closing_a_publication_ends_the_stream_for_the_subscriber(client: affinity.Client, channel: str) -> None:
    sub = client.add_subscription(channel, 3)
    pub = client.add_publication(channel, 3)
    wait_connected(pub)
    assert pub.offer_batch([b"last words"]) == 1
    pub.close()
    assert pub.offer(b"more") == affinity.CLOSED
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        got.extend(sub.poll_batch(10))
    assert got == [b"last words"]
    sub.close()


@pytest.mark.slow
def test_two_hundred_thousand_mixed_messages_survive_loss_duplication_and_reordering(
    new_client: ClientFactory,
) -> None:
    port = free_udp_port()
    relay = LossyRelay(f"127.0.0.1:{port}", loss=0.05, duplicate=0.01, reorder=0.02, seed=11)
    try:
        with new_client() as client:
            sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 5)
            pub = client.add_publication(f"aeron:udp?endpoint={relay.address}", 5)
            messages = [make_message(i, size) for i, size in enumerate(mixed_sizes(200_000, seed=5))]
            received = pump(pub, sub, messages, timeout=240)
            assert len(received) == len(messages)
            for index, (got, want) in enumerate(zip(received, messages, strict=True)):
                assert got == want, f"message {index} differs"
            images = sub.images()
            counters = pub.counters()
        stats = relay.stats()
        assert stats.dropped > 1000 and stats.duplicated > 100 and stats.reordered > 100
        assert counters.naks_received > 0 and counters.retransmits_sent > 0
        assert images[0].naks_sent > 0 and images[0].loss_gaps > 0
    finally:
        relay.close()


def test_a_million_small_messages_arrive_in_order(client: affinity.Client, channel: str) -> None:
    sub = client.add_subscription(channel, 9)
    pub = client.add_publication(channel, 9)
    wait_connected(pub)
    total = 1_000_000
    payloads = [struct.pack("<Q", i) for i in range(total)]
    expected_next = 0
    sent = 0
    deadline = time.monotonic() + 120
    while expected_next < total:
        assert time.monotonic() < deadline, f"stalled at {expected_next}"
        if sent < total:
            sent += pub.offer_batch(payloads[sent : sent + 4096])
        for data in sub.poll_batch(8192):
            assert struct.unpack("<Q", data)[0] == expected_next
            expected_next += 1
    pub.close()
    sub.close()


def test_slow_subscriber_back_pressures_the_publisher_without_loss(client: affinity.Client) -> None:
    channel = loopback_channel() + "|term-length=65536"
    sub = client.add_subscription(channel, 4)
    pub = client.add_publication(channel, 4)
    wait_connected(pub)
    payload = b"p" * 1000
    back_pressured = 0
    sent = 0
    received = 0
    deadline = time.monotonic() + 60
    while received < 3000:
        assert time.monotonic() < deadline
        while sent < 3000:
            result = pub.offer(payload)
            if result == affinity.BACK_PRESSURED:
                back_pressured += 1
                break
            assert result > 0
            sent += 1
        got = sub.poll_batch(5)  # a slow consumer: a few messages per pass
        received += len(got)
        assert all(m == payload for m in got)
        time.sleep(0.0005)
    assert back_pressured > 0
    assert received == sent == 3000
    pub.close()
    sub.close()


def test_publisher_and_subscriber_in_two_processes(
    driver_kind: str, new_client: ClientFactory, client_env: dict[str, str], tmp_path: Path
) -> None:
    # Standalone: the child attaches to the same driver ($AFFINITY_DIR), the stream still goes
    # through UDP between the driver's sender and receiver.
    port = free_udp_port()
    script = tmp_path / "subscriber.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import struct, sys, time
            import affinity
            with affinity.Client() as client:
                sub = client.add_subscription("aeron:udp?endpoint=127.0.0.1:{port}", 21)
                print("ready", client.threading, flush=True)
                expected = 0
                deadline = time.monotonic() + 60
                while expected < 50_000 and time.monotonic() < deadline:
                    for data in sub.poll_batch(1000):
                        index, = struct.unpack_from("<Q", data)
                        assert index == expected, (index, expected)
                        assert len(data) == 8 + index % 300
                        expected += 1
                print("received", expected, flush=True)
            """
        )
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=client_env)
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().split()
        assert ready[0] == "ready"
        assert (ready[1] == "standalone") == (driver_kind == "standalone"), ready
        with new_client() as client:
            pub = client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", 21)
            wait_connected(pub, timeout=20)
            messages = [struct.pack("<Q", i) + b"m" * (i % 300) for i in range(50_000)]
            sent = 0
            deadline = time.monotonic() + 60
            while sent < len(messages):
                assert time.monotonic() < deadline
                sent += pub.offer_batch(messages[sent : sent + 1000])
            output, _ = child.communicate(timeout=60)
        assert output.strip() == "received 50000"
        assert child.returncode == 0
    finally:
        child.kill()


@pytest.mark.embedded_only(
    "threading='invoker' configures the in-process driver; a client attached with dir= has no driver "
    "duty cycle to run (Client(dir=..., threading=...) raises ConfigError, test_standalone_client.py)"
)
def test_invoker_mode_needs_no_driver_thread(driver_kind: str, channel: str) -> None:
    with affinity.Client(threading="invoker") as client:
        assert client.threading == "invoker"
        sub = client.add_subscription(channel, 2)
        pub = client.add_publication(channel, 2)
        deadline = time.monotonic() + 5
        while not pub.is_connected:
            client.do_work()
            assert time.monotonic() < deadline
        messages = [make_message(i, 100) for i in range(10_000)]
        assert pump(pub, sub, messages, timeout=30) == messages


def test_client_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="threading"):
        affinity.Client(threading="many")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="term_length=1000"):
        affinity.Client(term_length=1000)
    with pytest.raises(ValueError, match="flow_control"):
        affinity.Client(flow_control="tagged,g:")


def test_ipc_delivers_to_every_subscriber_and_the_slowest_paces(client: affinity.Client) -> None:
    fast = client.add_subscription("aeron:ipc", 30)
    slow = client.add_subscription("aeron:ipc", 30)
    pub = client.add_publication("aeron:ipc?term-length=65536", 30)
    wait_connected(pub)
    messages = [make_message(i, 100 + i % 900) for i in range(3000)]
    got_fast: list[bytes] = []
    got_slow: list[bytes] = []
    sent = 0
    back_pressured = 0
    deadline = time.monotonic() + 60
    while len(got_slow) < len(messages) or len(got_fast) < len(messages):
        assert time.monotonic() < deadline, (sent, len(got_fast), len(got_slow))
        if sent < len(messages):
            taken = pub.offer_batch(messages[sent : sent + 64])
            back_pressured += taken == 0
            sent += taken
        got_fast.extend(fast.poll_batch(1000))
        got_slow.extend(slow.poll_batch(3))
    assert got_fast == messages and got_slow == messages
    assert back_pressured > 0, "the slow IPC subscriber should have held the publisher back"
    pub.close()
    fast.close()
    slow.close()


def test_ipc_subscription_images_name_each_publication_log_and_the_read_position(client: affinity.Client) -> None:
    sub = client.add_subscription("aeron:ipc", 31)
    assert sub.images() == []
    pub = client.add_publication("aeron:ipc", 31)
    wait_connected(pub)
    assert pub.offer_batch([b"i" * 100] * 10) == 10
    received: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(received) < 10 and time.monotonic() < deadline:
        received.extend(sub.poll_batch(100))
    assert received == [b"i" * 100] * 10
    (image,) = sub.images()
    assert image.source == "ipc" and image.session_id == pub.session_id and image.active
    assert image.position == image.rebuild_position == image.hwm_position == pub.position
    assert image.datagrams_received == image.loss_gaps == image.naks_sent == 0
    pub.close()
    sub.close()


def test_ipc_publication_counters_show_the_tail_the_limit_and_each_subscriber(client: affinity.Client) -> None:
    pub = client.add_publication("aeron:ipc?term-length=65536", 32)
    alone = pub.counters()
    assert not alone.connected and not alone.closed and alone.receivers == []
    sub = client.add_subscription("aeron:ipc", 32)
    wait_connected(pub)
    # 40 frames of 128 B: more than the limit's trip gain (window / 8 = 4 KiB), so reading them
    # all moves the limit (it moves by trips, as Aeron's, or at once for a publisher near it).
    count = 40
    assert pub.offer_batch([b"c" * 96] * count) == count
    counters = pub.counters()
    assert counters.session_id == pub.session_id and counters.stream_id == 32
    assert counters.position == counters.sender_position == pub.position == count * 128
    assert counters.strategy == "min" and counters.connected
    (receiver,) = counters.receivers
    assert counters.live_receivers == counters.receivers
    # Nothing read yet: the subscriber is at 0 and the publisher may run a window (half a term) ahead.
    assert receiver.position == 0 and counters.publisher_limit == 32768 == receiver.window
    received: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(received) < count and time.monotonic() < deadline:
        received.extend(sub.poll_batch(100))
    assert received == [b"c" * 96] * count
    deadline = time.monotonic() + 10
    while pub.counters().publisher_limit != count * 128 + 32768:
        assert time.monotonic() < deadline, pub.counters()
        time.sleep(0.001)
    assert pub.counters().receivers[0].position == count * 128
    sub.close()
    pub.close()


def test_a_second_ipc_publisher_asking_for_another_term_length_or_mtu_is_refused(client: affinity.Client) -> None:
    with client.add_publication("aeron:ipc?term-length=65536|mtu=4096", 33) as first:
        for setting in ("term-length=131072", "mtu=8192"):
            with pytest.raises(affinity.ChannelUriError, match=f"{setting} differs from the") as raised:
                client.add_publication(f"aeron:ipc?{setting}", 33)
            assert "stream 33" in str(raised.value)
        # The same settings, or none, share the first publisher's log.
        with client.add_publication("aeron:ipc?term-length=65536", 33) as second:
            assert second.session_id == first.session_id
        with client.add_publication("aeron:ipc", 33) as third:
            assert third.session_id == first.session_id and third.max_message_length == first.max_message_length


def test_wait_for_data_returns_when_the_embedded_driver_receives_and_sleeps_otherwise(
    new_client: ClientFactory, driver_kind: str
) -> None:
    receiver, sender = new_client(), new_client()
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    sub = receiver.add_subscription(channel, 7)
    pub = sender.add_publication(channel, 7)
    try:
        wait_connected(pub)
        with pytest.raises(affinity.ConfigError, match="timeout"):
            receiver.wait_for_data(-1.0)
        if driver_kind == "standalone":
            # No driver thread in this process to wake it: it sleeps the timeout.
            started = time.monotonic()
            receiver.wait_for_data(0.2)
            assert time.monotonic() - started >= 0.2
            return
        # Embedded: woken whenever its driver's receiver wrote datagrams (the message, or the
        # stream's heartbeats), never left to sleep out the 30 s.
        sub.poll_batch(64)
        timer = threading.Timer(0.3, lambda: pub.offer(b"wake"))
        timer.start()
        started, received = time.monotonic(), []
        try:
            while not received and time.monotonic() - started < 10.0:
                receiver.wait_for_data(30.0)
                received = [bytes(m) for m in sub.poll_batch(64)]
            waited = time.monotonic() - started
        finally:
            timer.join()
        assert received == [b"wake"], f"nothing after {waited:.1f} s"
        assert waited < 10.0
    finally:
        pub.close()
        sub.close()
