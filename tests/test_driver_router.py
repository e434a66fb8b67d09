"""``affinity driver --router FILE``: the subject router inside the standalone driver's process,
with real processes: a source attached to that driver and a subscriber of another driver get
images and updates through it; SIGKILL of the driver process is a router failure to the
subscriber (``docs/subjects.md``, "Router failure"), which moves to the next router of its list;
SIGTERM makes the router tell its members it stops before the driver closes; the configuration
is checked as ``affinity router --config`` checks it, before any driver starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import affinity
from affinity.subjects import Flags, Subscriber
from affinity.testing import loopback_channel
from test_router_failover import CONFIG, SUBJECTS, restored, start_router, subscribe_all
from test_subjects_processes import LIVENESS, PEER, TIMEOUT, Process, image_from, peer, source_up


def start_driver_router(directory: Path, listen: str) -> Process:
    """``affinity driver --dir DIRECTORY --router CONFIG --listen LISTEN``, waited for (bounded)
    until its router listens."""
    process = Process(
        [
            sys.executable,
            "-m",
            "affinity.cli",
            "driver",
            "--dir",
            str(directory),
            "--router",
            str(CONFIG),
            "--listen",
            listen,
            "--liveness-timeout",
            str(LIVENESS),
        ]
    )
    process.wait_for(lambda lines: any("listening on" in line for line in lines), "router in the driver")
    return process


def attached_peer(label: str, directory: Path, listen: str) -> Process:
    """A source process whose client attaches to the driver in ``directory``."""
    process = Process(
        ["env", f"AFFINITY_DIR={directory}", sys.executable, str(PEER), label, listen, "--liveness", str(LIVENESS)]
    )
    process.wait_for(lambda lines: "READY" in lines, f"{label} ready")
    return process


def test_a_source_attached_to_the_driver_serves_through_its_router_and_a_sigkill_moves_the_subscriber(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    directory = tmp_path / "driver"
    listens = [loopback_channel(), loopback_channel()]
    driver = start_driver_router(directory, listens[0])
    processes.append(driver)
    # The driver serving the directory is that process (the router runs in it).
    assert affinity.driver_stat(str(directory)).pid == driver.popen.pid
    source = attached_peer("TradeAdapterA", directory, listens[0])
    processes.append(source)
    driver.wait_for(source_up("TradeAdapterA"), "source up at the driver's router")
    # Two clients of that driver: its router's and the source's.
    assert affinity.driver_stat(str(directory)).counter("Clients") == 2
    second = start_router(listens[1])
    processes.append(second)
    other_source = peer("TradeAdapterA", listens[1])
    processes.append(other_source)
    second.wait_for(source_up("TradeAdapterA"), "source up at the second router")

    subscriber = Subscriber(client, routers=listens, name="alice", heartbeat_interval=0.05, liveness_timeout=LIVENESS)
    inbox = subscribe_all(subscriber)
    for subject in SUBJECTS:
        inbox.wait_for(
            lambda items, subject=subject: (
                image_from("TradeAdapterA", subject)(items)
                and any(s == subject and f & Flags.UPDATE for s, f, _ in items)
            ),
            f"{subject} image and update through the driver's router",
        )
    assert subscriber.router == listens[0]

    driver.kill()
    mark = len(inbox.items)
    restored(inbox, mark)
    assert subscriber.router == listens[1]
    statuses = [p for _, f, p in inbox.items[mark:] if f & Flags.STATUS]
    assert any(f"router {listens[0]} lost" in p and listens[1] in p for p in statuses), statuses
    subscriber.close()


def test_sigterm_makes_the_router_tell_its_members_before_the_driver_closes(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    directory = tmp_path / "driver"
    listen = loopback_channel()
    driver = start_driver_router(directory, listen)
    processes.append(driver)
    source = attached_peer("TradeAdapterA", directory, listen)
    processes.append(source)
    driver.wait_for(source_up("TradeAdapterA"), "source up")
    # A liveness timeout no test waits for: only the router's own word can tell the subscriber.
    subscriber = Subscriber(client, routers=[listen], name="alice", heartbeat_interval=0.05, liveness_timeout=60.0)
    inbox = subscribe_all(subscriber)
    inbox.wait_for(image_from("TradeAdapterA", SUBJECTS[0]), "image")
    mark = len(inbox.items)
    driver.stop()
    assert driver.popen.returncode == 0, driver.snapshot()[-20:]
    inbox.wait_for(
        lambda items: any(f & Flags.STATUS and f"router {listen} stopped" in p for _, f, p in items[mark:]),
        "the router's stop, told before the driver closed",
    )
    assert any("stopped" in line and "cleaned up" in line for line in driver.snapshot()), driver.snapshot()[-20:]
    subscriber.close()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affinity.cli", *args], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def test_a_configuration_with_errors_is_refused_with_its_location_before_a_driver_starts(tmp_path: Path) -> None:
    config = tmp_path / "bad.conf"
    config.write_text(CONFIG.read_text(encoding="utf-8") + "\nadd-data-service\n    nonsense-keyword 1\n")
    directory = tmp_path / "driver"
    result = run_cli("driver", "--dir", str(directory), "--router", str(config), "--listen", loopback_channel())
    assert result.returncode == 1, result
    assert f"{config}:" in result.stderr and "error" in result.stderr.lower(), result.stderr
    # The same diagnostics as `affinity router --config`.
    router = run_cli("router", "--config", str(config), "--listen", loopback_channel())
    assert router.returncode == 1
    assert [line for line in router.stderr.splitlines() if str(config) in line] == [
        line for line in result.stderr.splitlines() if str(config) in line
    ]
    assert not (directory / "cnc.dat").exists(), "no driver may start on a bad configuration"
    missing = run_cli("driver", "--dir", str(directory), "--router", str(tmp_path / "missing.conf"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr, missing
