"""Multicast through the Python API, inside a private network namespace (never the real network).

Each scenario runs twice (``driver_kind``): the publisher's client embedded, or attached to a
standalone ``affinity driver`` process. That driver must live in the scenario's network
namespace, so the scenario starts it (``publisher_client``) and stops it with SIGTERM, failing
unless it exits cleanly (``stop_driver``): the module-scoped driver of conftest.py is in the
host's namespace and cannot carry this multicast. Subscribers are embedded clients of their own
(each its own driver, so each is a receiver of its own for flow control)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.both_drivers]

# The repository's helper: a fresh network namespace, loopback only, multicast routed to lo.
NETNS_RUN = Path(__file__).resolve().parent.parent / "rust" / "tests" / "support" / "netns-run"


# Prepended to each scenario: the publisher's client of the scenario's driver kind.
PRELUDE = """
import signal, subprocess, sys, tempfile
import affinity

_driver = None


def publisher_client(driver_options=(), **embedded_settings):
    \"\"\"Embedded: Client(**embedded_settings). Standalone: a client attached to an
    `affinity driver *driver_options` started here, in this network namespace.\"\"\"
    global _driver
    if DRIVER_KIND == "embedded":
        return affinity.Client(**embedded_settings)
    directory = tempfile.mkdtemp(dir=WORK_DIR) + "/driver"
    command = [sys.executable, "-m", "affinity.cli", "driver", "--dir", directory, *driver_options]
    _driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = _driver.stdout.readline()
    if "ready in" not in line:
        _driver.kill()
        raise SystemExit(f"the standalone driver did not start: {line!r} {_driver.communicate()[1]}")
    client = affinity.Client(dir=directory)
    assert client.threading == "standalone", client.threading
    return client


def stop_driver():
    \"\"\"SIGTERM to the standalone driver (if any); fails unless it exits with status 0.\"\"\"
    if _driver is not None:
        _driver.send_signal(signal.SIGTERM)
        _, err = _driver.communicate(timeout=30)
        assert _driver.returncode == 0, f"driver exit status {_driver.returncode}: {err}"
"""


def run_in_private_netns(script: str, tmp_path: Path, driver_kind: str = "embedded") -> str:
    """Runs a Python script in a fresh network namespace whose only interface is loopback, after
    ``PRELUDE`` for ``driver_kind`` (standalone drivers' directories under ``tmp_path``)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("multicast tests need util-linux (unshare) and iproute2 (ip)")
    path = tmp_path / "scenario.py"
    header = f"DRIVER_KIND = {driver_kind!r}\nWORK_DIR = {str(tmp_path)!r}\n"
    path.write_text(header + PRELUDE + textwrap.dedent(script))
    command = [str(NETNS_RUN), sys.executable, str(path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def test_driver_default_flow_control_gates_connection_on_group_size(driver_kind: str, tmp_path: Path) -> None:
    output = run_in_private_netns(
        """
        import time
        import affinity

        CHANNEL = "aeron:udp?endpoint=224.20.30.41:24400|interface=127.0.0.1"

        def wait(predicate, seconds=10.0):
            deadline = time.monotonic() + seconds
            while not predicate():
                assert time.monotonic() < deadline
                time.sleep(0.01)

        # Driver-wide default: min flow control, at least two receivers, 500 ms receiver timeout.
        SPEC = "min,g:/2,t:500ms"
        with publisher_client(("--flow-control", SPEC), flow_control=SPEC) as publisher_side:
            pub = publisher_side.add_publication(CHANNEL, 7)
            first = affinity.Client()
            sub1 = first.add_subscription(CHANNEL, 7)
            wait(lambda: pub.counters().live_receivers)
            time.sleep(0.3)
            assert not pub.is_connected and pub.offer(b"x") == affinity.NOT_CONNECTED
            second = affinity.Client()
            sub2 = second.add_subscription(CHANNEL, 7)
            wait(lambda: pub.is_connected)
            counters = pub.counters()
            assert counters.strategy == "min" and len(counters.receivers) == 2
            messages = [b"m%d" % i for i in range(2000)]
            sent, got1, got2 = 0, [], []
            deadline = time.monotonic() + 30
            while len(got1) < 2000 or len(got2) < 2000:
                assert time.monotonic() < deadline
                if sent < 2000:
                    sent += pub.offer_batch(messages[sent:sent + 100])
                got1 += sub1.poll_batch(500)
                got2 += sub2.poll_batch(500)
            assert got1 == messages and got2 == messages
            second.close()
            wait(lambda: not pub.is_connected)
            kinds = [event.kind for event in publisher_side.events()]
            assert kinds.count("receiver_joined") == 2 and "receiver_removed" in kinds
            first.close()
        stop_driver()
        print("ok")
        """,
        tmp_path,
        driver_kind,
    )
    assert output.strip() == "ok"


def test_tagged_receivers_pace_and_untagged_ones_do_not(driver_kind: str, tmp_path: Path) -> None:
    output = run_in_private_netns(
        """
        import time
        import affinity

        BASE = "aeron:udp?endpoint=224.20.30.43:24402|interface=127.0.0.1"

        with publisher_client() as pub_side, affinity.Client() as tagged_side, affinity.Client() as plain_side:
            pub = pub_side.add_publication(BASE + "|fc=tagged,g:1001/1", 3)
            tagged = tagged_side.add_subscription(BASE + "|gtag=1001", 3)
            untagged = plain_side.add_subscription(BASE, 3)
            deadline = time.monotonic() + 10
            while not pub.is_connected or len(pub.counters().live_receivers) < 2:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            counters = pub.counters()
            assert [r.group_tag for r in counters.receivers] == [1001]
            assert sorted(str(r.group_tag) for r in counters.live_receivers) == ["1001", "None"]
            # The untagged subscriber never polls; the tagged one keeps up: nothing holds the publisher.
            got = []
            sent = 0
            deadline = time.monotonic() + 30
            while len(got) < 20000:
                assert time.monotonic() < deadline, (sent, len(got))
                if sent < 20000:
                    sent += pub.offer_batch([b"p" * 100] * 200)
                got += tagged.poll_batch(1000)
            del untagged
        stop_driver()
        print("ok")
        """,
        tmp_path,
        driver_kind,
    )
    assert output.strip() == "ok"
