"""Consumer groups found through ``bootstrap`` instead of a shared registry, as real processes.

Two network-namespace hosts that share no registry (``groups_two_hosts.py bootstrap``), and the
bad inputs: an unreachable bootstrap list (a clear error after the bounded wait, naming every
address) and a bootstrap member holding another definition of the group (refused at once, naming
both fingerprints).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import affinity
import pytest
from affinity.defaults import GROUP_LIVENESS_TIMEOUT_MS
from affinity.exceptions import ConfigError
from affinity.groups import GroupConsumer, GroupDefinition, GroupPublisher, learn_definition
from affinity.testing import free_udp_port
from groups_harness import run_two_hosts

AFFINITY = [sys.executable, "-m", "affinity.cli", "group"]
TIMINGS = ["--liveness", "1s", "--heartbeat", "100ms"]
#: Seconds a failing member may take beyond its bootstrap timeout (interpreter start, the driver).
EXIT_SLACK = 20.0


def group(registry: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AFFINITY_REGISTRY=str(registry), PYTHONUNBUFFERED="1")
    env.pop("AFFINITY_GROUP_SECRET", None)
    env.pop("AFFINITY_GROUP_SECRET_FILE", None)
    return subprocess.run([*AFFINITY, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def create(registry: Path, name: str, qc: int, *, secret: bool = False) -> None:
    registry.mkdir(mode=0o700, exist_ok=True)
    result = group(
        registry,
        "create",
        name,
        "--hash-prefix",
        f"__{name}__",
        "--hash-count",
        "16",
        "--queue-count",
        str(qc),
        "--queue-size",
        str(1 << 20),
        *([] if secret else ["--no-secret"]),
    )
    assert result.returncode == 0, result.stderr


def test_members_on_two_hosts_without_a_shared_registry_find_each_other_through_bootstrap(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    create(registry, "twohosts", qc=4, secret=True)
    _published, report, members = run_two_hosts(tmp_path, registry, "bootstrap")
    assert report["duplicates"] == 0, report
    # Nobody wrote a member file: the members found each other through the list alone, and the
    # publisher's own registry never held the group.
    assert members == []
    assert not (tmp_path / "publisher-registry" / "groups" / "twohosts.json").exists()


def test_an_unreachable_bootstrap_list_fails_after_the_timeout_naming_every_address(tmp_path: Path) -> None:
    registry = tmp_path / "empty"
    registry.mkdir(mode=0o700)
    seeds = [f"127.0.0.1:{free_udp_port()}", f"127.0.0.1:{free_udp_port()}"]
    started = time.monotonic()
    result = group(
        registry,
        "publish",
        "orders",
        "--count",
        "1",
        "--bootstrap",
        ",".join(seeds),
        "--bootstrap-timeout",
        "2s",
        *TIMINGS,
    )
    took = time.monotonic() - started
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert 2.0 <= took < 2.0 + EXIT_SLACK, took
    assert "no bootstrap member answered within 2.0 s" in result.stderr, result.stderr
    for seed in seeds:
        assert seed in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_a_bootstrap_member_holding_another_definition_is_refused_naming_both_fingerprints(tmp_path: Path) -> None:
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    create(theirs, "orders", qc=4)
    create(ours, "orders", qc=2)
    inbox = f"127.0.0.1:{free_udp_port()}"
    env = dict(os.environ, AFFINITY_REGISTRY=str(theirs), PYTHONUNBUFFERED="1")
    consume = [*AFFINITY, "consume", "orders", "--index", "0", "--count", "1", "--listen", inbox, *TIMINGS]
    consumer = subprocess.Popen(consume, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The consumer answers once it runs: ask until the answer (not the timeout) decides.
        deadline = time.monotonic() + 60
        while True:
            result = group(ours, "publish", "orders", "--count", "1", "--bootstrap", inbox, *TIMINGS)
            if "no bootstrap member answered" not in result.stderr or time.monotonic() > deadline:
                break
            assert consumer.poll() is None, consumer.communicate()[0]
        assert result.returncode == 1, (result.returncode, result.stderr)
        assert "holds another definition" in result.stderr and inbox in result.stderr, result.stderr
        fingerprints = set(re.findall(r"fingerprint ([0-9a-f]{16})", result.stderr))
        assert len(fingerprints) == 2, result.stderr
        assert "QC=4" in result.stderr and "QC=2" in result.stderr, result.stderr
        assert consumer.poll() is None, "the answering consumer keeps running"
    finally:
        consumer.terminate()
        consumer.communicate(timeout=30)  # reaps it and closes its pipe


def test_status_with_an_empty_registry_sees_the_group_through_bootstrap(tmp_path: Path) -> None:
    theirs, empty = tmp_path / "theirs", tmp_path / "empty"
    create(theirs, "orders", qc=2)
    empty.mkdir(mode=0o700)
    inbox = f"127.0.0.1:{free_udp_port()}"
    env = dict(os.environ, AFFINITY_REGISTRY=str(theirs), PYTHONUNBUFFERED="1")
    consume = [*AFFINITY, "consume", "orders", "--index", "0", "--count", "1", "--listen", inbox, *TIMINGS]
    consumer = subprocess.Popen(consume, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        report: dict[str, object] = {}
        found = False
        while not found and time.monotonic() < deadline:
            result = group(empty, "status", "orders", "--bootstrap", inbox, "--json", "--settle", "1.5", *TIMINGS)
            if result.returncode == 0:
                report = json.loads(result.stdout.strip().splitlines()[-1])
                members = report["members"]
                assert isinstance(members, list)
                found = any(member["endpoint"] == inbox and member["role"] == "consumer" for member in members)
            else:
                assert "no bootstrap member answered" in result.stderr, result.stderr
            assert consumer.poll() is None, consumer.communicate()[0]
        assert found, report
        queues = report.get("queues")
        assert isinstance(queues, list) and len(queues) == 2, report  # QC learned from the consumer
        assert all(queue["state"] == "active" for queue in queues), report
        assert not (empty / "groups" / "orders.json").exists()
    finally:
        consumer.terminate()
        consumer.communicate(timeout=30)


def start_answering_consumer(registry: Path, inbox: str) -> subprocess.Popen[str]:
    """``affinity group consume orders`` (QC of ``registry``) with its inbox at ``inbox``: it answers
    BOOTSTRAP requests about the group once it runs."""
    env = dict(os.environ, AFFINITY_REGISTRY=str(registry), PYTHONUNBUFFERED="1")
    env.pop("AFFINITY_GROUP_SECRET", None)
    env.pop("AFFINITY_GROUP_SECRET_FILE", None)
    consume = [*AFFINITY, "consume", "orders", "--index", "0", "--count", "1", "--listen", inbox, *TIMINGS]
    return subprocess.Popen(consume, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_until_answering(client: Any, consumer: subprocess.Popen[str], inbox: str, empty: Path) -> GroupDefinition:
    """The definition ``inbox`` answers with, asked (with an empty registry) until it answers."""
    deadline = time.monotonic() + 60
    while True:
        assert consumer.poll() is None, consumer.communicate()[0]
        try:
            return learn_definition(client, "orders", bootstrap=inbox, registry=empty, bootstrap_timeout=1.0)
        except ConfigError as error:
            assert "no bootstrap member answered" in str(error), error
            assert time.monotonic() < deadline, "the consumer never answered"


def test_a_registry_holding_another_definition_than_the_bootstrap_member_is_refused_at_construction(
    tmp_path: Path,
) -> None:
    """A member (and ``learn_definition``, which the Spark sink runs when a write is planned) whose
    registry holds the group is refused on the first answer holding another definition, naming both
    fingerprints: not after a timeout (``bootstrap_timeout`` is far longer than the test), and the
    answering consumer keeps running."""
    theirs, ours, same, empty = tmp_path / "theirs", tmp_path / "ours", tmp_path / "same", tmp_path / "empty"
    create(theirs, "orders", qc=4)
    create(ours, "orders", qc=2)
    create(same, "orders", qc=4)
    empty.mkdir(mode=0o700)
    inbox = f"127.0.0.1:{free_udp_port()}"
    consumer = start_answering_consumer(theirs, inbox)
    try:
        with affinity.Client() as client:
            learned = wait_until_answering(client, consumer, inbox, empty)
            assert learned.queue_count == 4
            # Without bootstrap the registry's definition is taken as it is (nobody is asked).
            assert learn_definition(client, "orders", registry=ours).queue_count == 2
            for build in (
                lambda: learn_definition(client, "orders", bootstrap=inbox, registry=ours, bootstrap_timeout=600),
                lambda: GroupPublisher(client, "orders", registry=ours, bootstrap=inbox, bootstrap_timeout=600),
                lambda: GroupConsumer(client, "orders", 0, 1, registry=ours, bootstrap=inbox, bootstrap_timeout=600),
            ):
                with pytest.raises(ConfigError) as raised:
                    build()
                text = str(raised.value)
                assert "holds another definition" in text and inbox in text, text
                assert len(set(re.findall(r"fingerprint ([0-9a-f]{16})", text))) == 2, text
                assert "QC=4" in text and "QC=2" in text, text
            # The same definition in the registry: accepted.
            assert learn_definition(client, "orders", bootstrap=inbox, registry=same) == learned
        assert consumer.poll() is None, "the answering consumer keeps running"
    finally:
        consumer.terminate()
        consumer.communicate(timeout=30)


def test_a_registry_entry_stands_when_no_bootstrap_member_answers(tmp_path: Path) -> None:
    """Nobody at the listed address: ``learn_definition`` with a registry entry returns it after at
    most the liveness timeout (this member would be the group's first), not an error."""
    ours = tmp_path / "ours"
    create(ours, "orders", qc=2)
    nobody = f"127.0.0.1:{free_udp_port()}"
    with affinity.Client() as client:
        started = time.monotonic()
        definition = learn_definition(client, "orders", bootstrap=nobody, registry=ours, bootstrap_timeout=600)
        took = time.monotonic() - started
    assert definition.queue_count == 2
    assert took < GROUP_LIVENESS_TIMEOUT_MS / 1000 + EXIT_SLACK, took
