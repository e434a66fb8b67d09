"""``affinity driver`` and ``affinity router`` answering BOOTSTRAP (``--bootstrap-listen``,
``--registry``), as real processes.

Every member here has an empty registry of its own: the group's definition is only in the
registry the driver (or the router) answers for, so the members can only learn it through the
bootstrap list naming the driver (the router). The cases: records exchanged through a group found
so; the driver SIGKILLed once the members joined (the group keeps delivering: heartbeats go
member to member); a definition that differs from the asker's (refused, naming both
fingerprints); a list that nobody answers for the group (the timeout and every address named); an
asker without the group secret (never answered: the responder counts the refusal); and two
network-namespace hosts where the bootstrap address is a driver on the other host.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import affinity
import pytest
from affinity import _affinity
from affinity.exceptions import ConfigError
from affinity.groups import GroupPublisher
from affinity.testing import free_udp_port
from groups_harness import Role, Roles, roles_fixture, run_group, run_two_hosts

TIMINGS = ["--liveness", "1s", "--heartbeat", "100ms"]
#: The router's configuration (any valid one: the router's subjects play no part here).
ROUTER_CONFIG = Path(__file__).parent / "data" / "standard_example.conf"
#: How long a driver or router may take to say it answers (interpreter start on a loaded machine).
START_TIMEOUT = 60.0
#: Seconds a failing member may take beyond its bootstrap timeout (interpreter start, the driver).
EXIT_SLACK = 20.0


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    yield from roles_fixture(tmp_path)


def create(registry: Path, name: str, qc: int, *, secret: bool = True) -> Path | None:
    """Defines group ``name`` in ``registry``; returns its secret file (``None``: no secret)."""
    registry.mkdir(mode=0o700, exist_ok=True)
    args = ["create", name, "--hash-prefix", f"__{name}__", "--hash-count", "16", "--queue-count", str(qc)]
    result = run_group(registry, *args, "--queue-size", str(1 << 20), *([] if secret else ["--no-secret"]))
    assert result.returncode == 0, result.stderr
    path = registry / "groups" / f"{name}.secret"
    return path if secret else None


def start_driver(roles: Roles, tmp_path: Path, listen: str, registry: Path) -> Role:
    command = [sys.executable, "-m", "affinity.cli", "driver", "--dir", str(tmp_path / "driver")]
    command += ["--bootstrap-listen", listen, "--registry", str(registry)]
    driver = roles.start("driver", command=command)
    driver.wait_line(rf"answering BOOTSTRAP at {re.escape(listen)} for the 1 group\(s\)", START_TIMEOUT)
    return driver


def start_router(roles: Roles, listen: str, registry: Path) -> Role:
    command = [sys.executable, "-m", "affinity.cli", "router", "--config", str(ROUTER_CONFIG)]
    command += ["--listen", f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"]
    command += ["--bootstrap-listen", listen, "--registry", str(registry)]
    # The router logs on stderr: merged into stdout, where the harness reads lines.
    router = roles.start("router", command=["bash", "-c", 'exec "$@" 2>&1', "router", *command])
    router.wait_line(rf"answering BOOTSTRAP at {re.escape(listen)} for 1 group\(s\)", START_TIMEOUT)
    return router


def exchange(
    roles: Roles,
    seed: str,
    secret: Path | None,
    *,
    count: int,
    rate: int,
    on_joined: Callable[[Role], None] | None = None,
) -> dict[str, Any]:
    """A consumer and a publisher that know only ``seed``: the publisher's summary once every
    record is acknowledged, after the consumer reported what it delivered. ``on_joined`` runs
    with the publisher once it has joined (before it publishes)."""
    secret_args = [] if secret is None else ["--secret-file", str(secret)]
    consume = ["consume", "orders", "--index", "0", "--count", "1", "--bootstrap", seed, *secret_args, *TIMINGS]
    consumer = roles.start("consumer", *consume)
    consumer.wait_owned({0, 1}, START_TIMEOUT)
    publish = ["publish", "orders", "--keys", "50", "--count", str(count), "--rate", str(rate), "--json"]
    publisher = roles.start("publisher", *publish, "--bootstrap", seed, *secret_args, *TIMINGS)
    publisher.wait_line(r"^\S+ publisher \d+ of group orders", START_TIMEOUT)
    if on_joined is not None:
        on_joined(publisher)
    summary: dict[str, Any] = publisher.json_result(timeout=120)
    assert publisher.process.returncode == 0, publisher.describe()
    assert consumer.stop() == 0, consumer.describe()
    _, left = consumer.wait_line(r"consumer 0 left: delivered (\d+), duplicates (\d+)", 30)
    assert int(left[1]) == count, consumer.describe()
    return summary


def test_members_that_know_only_the_driver_learn_the_group_and_exchange_records(tmp_path: Path, roles: Roles) -> None:
    registry = tmp_path / "driver-registry"
    secret = create(registry, "orders", qc=2)
    roles.registry.mkdir(mode=0o700)
    seed = f"127.0.0.1:{free_udp_port()}"
    start_driver(roles, tmp_path, seed, registry)
    summary = exchange(roles, seed, secret, count=500, rate=0)
    assert summary["acknowledged"] and summary["sent"] == 500, summary
    assert summary["authenticated"], summary
    assert not (roles.registry / "groups" / "orders.json").exists()


def test_a_sigkilled_driver_does_not_stop_a_group_that_joined_through_it(tmp_path: Path, roles: Roles) -> None:
    registry = tmp_path / "driver-registry"
    secret = create(registry, "orders", qc=2)
    roles.registry.mkdir(mode=0o700)
    seed = f"127.0.0.1:{free_udp_port()}"
    driver = start_driver(roles, tmp_path, seed, registry)
    killed: list[bool] = []

    def kill_driver(publisher: Role) -> None:
        driver.kill()
        # Killed before the publisher publishes its first record (it logs before it starts).
        killed.append(publisher.process.poll() is None)

    # 3000 records at 1000/s, every one published after the kill; the consumer delivers them all.
    summary = exchange(roles, seed, secret, count=3000, rate=1000, on_joined=kill_driver)
    assert killed == [True] and driver.process.returncode == -9
    assert summary["acknowledged"] and summary["sent"] == 3000, summary
    assert summary["seconds"] >= 2.0, summary  # 3000 at 1000/s: published while the driver was dead


def test_members_that_know_only_the_router_learn_the_group_and_exchange_records(tmp_path: Path, roles: Roles) -> None:
    registry = tmp_path / "router-registry"
    secret = create(registry, "orders", qc=2)
    roles.registry.mkdir(mode=0o700)
    seed = f"127.0.0.1:{free_udp_port()}"
    router = start_router(roles, seed, registry)
    summary = exchange(roles, seed, secret, count=500, rate=0)
    assert summary["acknowledged"] and summary["sent"] == 500, summary
    assert router.process.poll() is None, router.describe()
    assert router.stop() == 0, router.describe()


def test_a_driver_holding_another_definition_is_refused_naming_both_fingerprints(tmp_path: Path, roles: Roles) -> None:
    theirs = tmp_path / "driver-registry"
    create(theirs, "orders", qc=4, secret=False)
    create(roles.registry, "orders", qc=2, secret=False)  # the asker's own definition
    seed = f"127.0.0.1:{free_udp_port()}"
    start_driver(roles, tmp_path, seed, theirs)
    result = run_group(roles.registry, "publish", "orders", "--count", "1", "--bootstrap", seed, *TIMINGS)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "holds another definition" in result.stderr and seed in result.stderr, result.stderr
    assert len(set(re.findall(r"fingerprint ([0-9a-f]{16})", result.stderr))) == 2, result.stderr
    assert "QC=4" in result.stderr and "QC=2" in result.stderr, result.stderr


def test_a_list_nobody_answers_for_the_group_fails_naming_the_addresses_and_the_timeout(
    tmp_path: Path, roles: Roles
) -> None:
    # The driver answers, but for another group; the second address has nobody at all.
    registry = tmp_path / "driver-registry"
    create(registry, "payments", qc=2, secret=False)
    broken = registry / "groups" / "broken.json"
    broken.write_text("{not json")  # named once on the driver's stderr, not answered for
    roles.registry.mkdir(mode=0o700)
    seed, nobody = f"127.0.0.1:{free_udp_port()}", f"127.0.0.1:{free_udp_port()}"
    driver = start_driver(roles, tmp_path, seed, registry)
    started = time.monotonic()
    args = ["publish", "orders", "--count", "1", "--bootstrap", f"{seed},{nobody}", "--bootstrap-timeout", "2s"]
    result = run_group(roles.registry, *args, *TIMINGS)
    took = time.monotonic() - started
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert 2.0 <= took < 2.0 + EXIT_SLACK, took
    assert "no bootstrap member answered within 2.0 s" in result.stderr, result.stderr
    assert seed in result.stderr and nobody in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert driver.stop() == 0
    stderr = driver.process.stderr.read() if driver.process.stderr is not None else ""
    problem = f'bootstrap responder: group "broken" not answered for: {broken}: not valid JSON'
    assert stderr.count(problem) == 1, stderr


def test_an_asker_without_the_group_secret_is_never_answered(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    secret = create(registry, "orders", qc=2)
    assert secret is not None
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    seed = f"127.0.0.1:{free_udp_port()}"
    # The router's responder, in this process, so its counters can be read.
    with affinity.Client() as client:
        responder = _affinity.BootstrapResponderCore(client, seed, str(registry))
        try:
            assert responder.endpoint == seed and responder.counters()["groups"] == 1
            with pytest.raises(ConfigError, match="no bootstrap member answered"):
                GroupPublisher(client, "orders", registry=empty, bootstrap=seed, bootstrap_timeout=1.0)
            counters = responder.counters()
            assert counters["answered"] == 0 and counters["auth_refused"] >= 1, counters
            publisher = GroupPublisher(
                client, "orders", registry=empty, bootstrap=seed, bootstrap_timeout=10.0, secret=secret
            )
            publisher.close()
            assert responder.counters()["answered"] >= 1, responder.counters()
        finally:
            responder.close()


def test_bad_responder_options_are_named() -> None:
    with affinity.Client() as client:
        for listen, registry, expected in [
            ("0.0.0.0:4000", None, "wildcard"),
            ("127.0.0.1:0", None, "port 0"),
            ("127.0.0.1:4000", "/nonexistent/registry", "not a directory"),
            (None, "/tmp", "--registry needs --bootstrap-listen"),
            (None, None, "--bootstrap-listen is needed"),
        ]:
            with pytest.raises(ConfigError, match=expected):
                _affinity.BootstrapResponderCore(client, listen, registry)
    for command in (["driver"], ["router", "--config", str(ROUTER_CONFIG)]):
        result = subprocess.run(
            [sys.executable, "-m", "affinity.cli", *command, "--registry", "/tmp"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2 and "--registry needs --bootstrap-listen" in result.stderr, result.stderr
    names = [name for name, _, _ in _affinity.BOOTSTRAP_RESPONDER_OPTIONS]
    assert names == ["bootstrap-listen", "registry"]
    for name in names:
        assert f"--{name} " in _affinity.DRIVER_USAGE


def test_members_on_another_host_find_the_group_through_a_driver_there(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    create(registry, "twohosts", qc=4)
    _published, report, members = run_two_hosts(tmp_path, registry, "driver")
    assert report["duplicates"] == 0, report
    assert members == []  # nobody wrote a member file
    log = (tmp_path / "driver.log").read_text()
    assert "answering BOOTSTRAP at 10.9.0.3:41000 for the 1 group(s)" in log, log
