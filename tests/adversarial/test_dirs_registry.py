"""The group registry as another local user could prepare it, through ``affinity group``
processes: a registry (or its ``groups`` folder) of another user, a symbolic link, or open to
others is refused naming the path and owner, and its forged definitions are neither read nor
deleted; definition files that are FIFOs, links to ``/dev/zero``, deeply nested, with huge
integers or a boolean version give a quick, precise ``ConfigError``. Each CLI run is bounded in
time and address space: the old code hung on a FIFO and read ``/dev/zero`` until MemoryError."""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Longest a refused CLI run may take (refused at once; this only bounds a hang).
CLI_TIMEOUT_S = 30.0
#: Address-space cap of a CLI run: reading ``/dev/zero`` stops here, not at the machine's memory.
CLI_ADDRESS_SPACE = 2 << 30
GOOD = {"version": 1, "name": "orders", "HP": "orders", "HC": 64, "QC": 8, "QS": 67108864}


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CLI_ADDRESS_SPACE, CLI_ADDRESS_SPACE))


def group_cli(registry: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "affinity.cli", "group", *args],
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            env={**os.environ, "AFFINITY_REGISTRY": str(registry)},
            preexec_fn=limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"affinity group {' '.join(args)} hung on the registry {registry}")


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    groups = tmp_path / "registry" / "groups"
    groups.mkdir(parents=True, mode=0o700)
    (tmp_path / "registry").chmod(0o700)
    return tmp_path / "registry"


def test_a_fifo_definition_is_refused_at_once(registry: Path) -> None:
    os.mkfifo(registry / "groups" / "orders.json", 0o600)
    result = group_cli(registry, "list")
    assert result.returncode != 0
    assert f"{registry}/groups/orders.json: is not a regular file (a FIFO): refused" in result.stderr, result.stderr


def test_a_definition_linked_to_dev_zero_is_refused_at_once(registry: Path) -> None:
    os.symlink("/dev/zero", registry / "groups" / "orders.json")
    result = group_cli(registry, "list")
    assert result.returncode != 0
    assert "MemoryError" not in result.stderr
    assert f"{registry}/groups/orders.json: is a symbolic link to /dev/zero" in result.stderr, result.stderr


def test_an_oversized_definition_is_refused_naming_the_limit(registry: Path) -> None:
    (registry / "groups" / "orders.json").write_text(json.dumps(GOOD) + " " * (64 * 1024))
    result = group_cli(registry, "list")
    assert result.returncode != 0
    assert "more than the limit of 65536: refused" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 60_000, "nested deeper than 2 levels"),
        (json.dumps({**GOOD, "HC": "@"}).replace('"@"', "1" + "0" * 5000), "an integer of 5001 digits"),
        (json.dumps({**GOOD, "version": True}), "unsupported version True"),
        (json.dumps({**GOOD, "version": 1.0}), "unsupported version 1.0"),
        (json.dumps({**GOOD, "HC": "@"}).replace('"@"', "1e999"), "field 'HC' must be a int, found inf"),
    ],
    ids=["nested", "huge-int", "bool-version", "float-version", "huge-float"],
)
def test_hostile_definition_content_is_a_config_error(registry: Path, content: str, message: str) -> None:
    (registry / "groups" / "orders.json").write_text(content)
    result = group_cli(registry, "list")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert message in result.stderr and "orders.json" in result.stderr, result.stderr


def test_a_registry_open_to_others_is_refused(registry: Path) -> None:
    (registry / "groups" / "orders.json").write_text(json.dumps(GOOD))
    (registry / "groups").chmod(0o777)
    result = group_cli(registry, "list")
    assert result.returncode != 0
    assert f"group registry {registry}/groups: is writable by group or others (mode 0o777" in result.stderr


def test_a_registry_reached_through_a_symbolic_link_is_refused(registry: Path, tmp_path: Path) -> None:
    (registry / "groups" / "orders.json").write_text(json.dumps(GOOD))
    link = tmp_path / "linked-registry"
    link.symlink_to(registry)
    result = group_cli(link, "list")
    assert result.returncode != 0
    assert f"group registry {link}: is a symbolic link to {registry}" in result.stderr, result.stderr
    created = group_cli(
        link,
        "create",
        "payments",
        "--hash-prefix",
        "payments",
        "--hash-count",
        "8",
        "--queue-count",
        "8",
        "--queue-size",
        "1048576",
    )
    assert created.returncode != 0 and not (registry / "groups" / "payments.json").exists()


@pytest.fixture
def shared_parent() -> Iterator[Path]:
    """A sticky folder every user may write in, as ``/tmp``."""
    parent = Path(tempfile.mkdtemp(prefix="affinity-adv-dirs-"))
    parent.chmod(0o1777)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="making files as another user (nobody) needs root")
def test_a_registry_of_another_user_is_refused_and_its_forged_files_are_left(shared_parent: Path) -> None:
    registry = shared_parent / "registry"
    forged_definition = registry / "groups" / "orders.json"
    forged_member = registry / "members" / "orders" / "1.json"
    nobody = pwd.getpwnam("nobody")
    pid = os.fork()
    if pid == 0:  # the other user sets up the registry before its victim first uses it
        status = 1
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            forged_definition.parent.mkdir(parents=True, mode=0o755)
            forged_definition.write_text(json.dumps({**GOOD, "HC": 8, "QC": 8}))
            forged_member.parent.mkdir(parents=True, mode=0o755)
            forged_member.write_text("{}")
            registry.chmod(0o755)
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for args in (
        ("list",),
        ("delete", "orders"),
        (
            "create",
            "payments",
            "--hash-prefix",
            "payments",
            "--hash-count",
            "8",
            "--queue-count",
            "8",
            "--queue-size",
            "1048576",
        ),
    ):
        result = group_cli(registry, *args)
        assert result.returncode != 0, f"group {args[0]} trusted another user's registry"
        expected = f"group registry {registry}: is owned by uid {nobody.pw_uid}, not by this user (uid 0)"
        assert expected in result.stderr, result.stderr
        assert "HC=8" not in result.stdout
    assert forged_definition.exists() and forged_member.exists()
    assert not (registry / "groups" / "payments.json").exists()
    assert not (registry / "groups" / ".lock").exists(), "a lock file was made in another user's registry"
