"""The consumer-group registry: where it lives, what it accepts, and how it fails."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any

import affinity
import pyarrow as pa
import pytest
from affinity import AffinityError, ArgumentTypeError, ConfigError
from affinity._affinity import GroupObserverCore
from affinity.groups import (
    GroupDefinition,
    create_group,
    delete_group,
    group_bucket,
    group_queue,
    group_queues,
    list_groups,
    load_group,
    registry_dir,
)
from affinity.groups.registry import (
    MAX_HASH_COUNT,
    MAX_QUEUE_COUNT,
    MAX_QUEUE_SIZE,
    MIN_QUEUE_SIZE,
    REGISTRY_ENV,
    group_file,
)
from test_hash_spec import fmix64, fnv1a64

QS = 1 << 20


def test_registry_directory_prefers_argument_then_env_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "env"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert registry_dir(tmp_path / "arg") == tmp_path / "arg"
    assert registry_dir() == tmp_path / "env"
    monkeypatch.delenv(REGISTRY_ENV)
    assert registry_dir() == tmp_path / "xdg" / "affinity"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert registry_dir() == tmp_path / "home" / ".local" / "state" / "affinity"


def test_created_group_round_trips_with_private_permissions(tmp_path: Path) -> None:
    created = create_group("orders", "orders", 64, 8, QS, registry=tmp_path)
    assert load_group("orders", tmp_path) == created == GroupDefinition("orders", "orders", 64, 8, QS)
    path = group_file("orders", tmp_path)
    assert json.loads(path.read_text()) == {"version": 1, "name": "orders", "HP": "orders", "HC": 64, "QC": 8, "QS": QS}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "groups").stat().st_mode) == 0o700
    assert [p.name for p in (tmp_path / "groups").iterdir() if not p.name.startswith(".")] == ["orders.json"]


def test_list_returns_every_group_sorted_and_delete_removes_one(tmp_path: Path) -> None:
    assert list_groups(tmp_path) == []
    create_group("b", "hp-b", 4, 2, QS, tmp_path)
    create_group("a", "hp-a", 4, 4, QS, tmp_path)
    assert [d.name for d in list_groups(tmp_path)] == ["a", "b"]
    assert delete_group("b", tmp_path).hash_prefix == "hp-b"
    assert [d.name for d in list_groups(tmp_path)] == ["a"]
    with pytest.raises(ConfigError, match="unknown group 'b'"):
        delete_group("b", tmp_path)


def test_delete_removes_the_group_secret_too(tmp_path: Path) -> None:
    from affinity.groups.secret import create_secret, secret_file

    create_group("sealed", "hp-sealed", 4, 2, QS, tmp_path)
    create_secret("sealed", tmp_path)
    assert secret_file("sealed", tmp_path).is_file()
    delete_group("sealed", tmp_path)
    # A later group of the same name must not inherit the old secret.
    assert not secret_file("sealed", tmp_path).exists()
    create_group("sealed", "hp-sealed", 4, 2, QS, tmp_path)
    assert not secret_file("sealed", tmp_path).exists()


def test_environment_variable_selects_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "reg"))
    create_group("env", "env", 2, 1, QS)
    assert (tmp_path / "reg" / "groups" / "env.json").is_file()
    assert load_group("env").queue_count == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("g", "hp", 4, 8, QS), r"queue count \(QC\) 8 exceeds hash count \(HC\) 4"),
        (("g", "hp", 4, 0, QS), r"queue count \(QC\) 0 is out of range"),
        (("g", "hp", 0, 0, QS), r"hash count \(HC\) 0 is out of range"),
        (("g", "hp", MAX_HASH_COUNT + 1, 1, QS), rf"hash count \(HC\) {MAX_HASH_COUNT + 1} is out of range"),
        (("g", "hp", 4, 2, MIN_QUEUE_SIZE - 1), rf"queue size \(QS\) {MIN_QUEUE_SIZE - 1} is out of range"),
        (("g/x", "hp", 4, 2, QS), r"name 'g/x' is invalid"),
        ((".hidden", "hp", 4, 2, QS), r"name '.hidden' is invalid"),
        (("", "hp", 4, 2, QS), r"name '' is invalid"),
        (("g", "a/b", 4, 2, QS), r"hash prefix \(HP\) 'a/b' is invalid"),
    ],
)
def test_bad_definitions_are_refused_naming_field_and_value(
    tmp_path: Path, args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        create_group(*args, registry=tmp_path)  # type: ignore[arg-type]
    assert isinstance(caught.value, AffinityError) and isinstance(caught.value, ValueError)
    assert list_groups(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("g", "hp", "4", 2, QS), "hash_count: expected an integer, got str"),
        (("g", "hp", True, 1, QS), "hash_count: expected an integer, got bool"),
        ((None, "hp", 4, 2, QS), "name: expected a str, got NoneType"),
        (("g", b"hp", 4, 2, QS), "hash_prefix: expected a str, got bytes"),
    ],
)
def test_definition_arguments_of_the_wrong_type_are_refused_naming_them(
    tmp_path: Path, args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(ArgumentTypeError, match=message) as caught:
        create_group(*args, registry=tmp_path)  # type: ignore[arg-type]
    assert isinstance(caught.value, AffinityError) and isinstance(caught.value, TypeError)
    assert list_groups(tmp_path) == []


def test_name_and_hash_prefix_already_in_use_are_refused(tmp_path: Path) -> None:
    create_group("orders", "ord", 8, 4, QS, tmp_path)
    with pytest.raises(ConfigError, match="group name 'orders' is already in use"):
        create_group("orders", "other", 8, 4, QS, tmp_path)
    with pytest.raises(ConfigError, match=r"hash prefix \(HP\) 'ord' is already used by group 'orders'"):
        create_group("trades", "ord", 8, 4, QS, tmp_path)
    assert load_group("orders", tmp_path).hash_prefix == "ord"


def _create_racing(registry: str, index: int, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        create_group("race", f"hp{index}", 8, 4, QS, registry)
        results.put("won")
    except ConfigError as error:
        results.put(str(error))


def test_of_concurrent_creators_of_one_name_exactly_one_wins(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = context.Queue()  # type: ignore[type-arg]
    processes = [context.Process(target=_create_racing, args=(str(tmp_path), i, results)) for i in range(4)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert outcomes.count("won") == 1, outcomes
    assert all("already in use" in outcome for outcome in outcomes if outcome != "won")
    assert len(list_groups(tmp_path)) == 1


def test_unknown_group_error_names_it_and_lists_known_ones(tmp_path: Path) -> None:
    create_group("orders", "orders", 8, 4, QS, tmp_path)
    with pytest.raises(ConfigError, match=r"unknown group 'trades'.*known groups: orders"):
        load_group("trades", tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"orders\.json:1:2: corrupt group definition"),
        ("[1, 2]", r"orders\.json: expected a JSON object, found list"),
        ('{"version": 2}', r"orders\.json: unsupported version 2"),
        ('{"version": 1, "name": "orders", "HP": "o", "HC": "8", "QC": 4, "QS": 1048576}', r"field 'HC' must be a int"),
        (
            '{"version": 1, "name": "orders", "HP": "o", "HC": 2, "QC": 4, "QS": 1048576}',
            r"orders\.json: .*QC\) 4 exceeds",
        ),
        ('{"version": 1, "name": "other", "HP": "o", "HC": 8, "QC": 4, "QS": 1048576}', r"field 'name' is 'other'"),
        (
            '{"version": 1, "name": "orders", "HP": "o", "HC": 8, "QC": 4, "QS": 1048576, "X": 1}',
            r"unknown field\(s\) 'X'",
        ),
    ],
)
def test_corrupt_registry_file_error_names_the_file(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "groups").mkdir(mode=0o700)
    path = tmp_path / "groups" / "orders.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_group("orders", tmp_path)
    with pytest.raises(ConfigError, match=str(path).replace(".", r"\.")):
        list_groups(tmp_path)


def test_registry_survives_its_creating_process(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=create_group, args=("kept", "kept", 16, 4, QS, str(tmp_path)))
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0
    assert load_group("kept", tmp_path) == GroupDefinition("kept", "kept", 16, 4, QS)
    assert sorted(os.listdir(tmp_path / "groups")) == [".lock", "kept.json"]  # no temporary file left


# ---- cross-language hash vectors --------------------------------------------------------------

GROUP_VECTORS = Path(__file__).parent / "vectors" / "group_hash.json"


def _vector_key(case: dict[str, Any]) -> bytes:
    if "key_repeat" in case:
        repeat = case["key_repeat"]
        return str(repeat["text"]).encode("utf-8") * int(repeat["count"])
    if "key" in case:
        key = str(case["key"]).encode("utf-8")
        assert "key_hex" not in case or bytes.fromhex(case["key_hex"]) == key
        return key
    return bytes.fromhex(case["key_hex"])


def reference_bucket(key: bytes, hash_count: int) -> int:
    """docs/groups.md, from the spec alone: ``fmix64(fnv1a64(key)) % HC``."""
    return fmix64(fnv1a64(key)) % hash_count


def test_pure_python_reference_reproduces_the_group_hash_vectors() -> None:
    cases = json.loads(GROUP_VECTORS.read_text())["cases"]
    checked = 0
    for case in cases:
        key = _vector_key(case)
        assert f"{fnv1a64(key):016x}" == case["fnv1a64"], case
        assert f"{fmix64(fnv1a64(key)):016x}" == case["hash"], case
        for bucket in case["buckets"]:
            assert reference_bucket(key, bucket["hash_count"]) == bucket["bucket"], (case, bucket)
            for queue in bucket["queues"]:
                assert bucket["bucket"] % queue["queue_count"] == queue["queue"]
                checked += 1
    assert len(cases) >= 10 and checked >= 20


def test_compiled_group_hash_agrees_with_the_vectors_and_the_reference() -> None:
    cases = json.loads(GROUP_VECTORS.read_text())["cases"]
    for case in cases:
        key = _vector_key(case)
        text_key: bytes | str = key.decode("utf-8") if "key" in case else key
        for bucket in case["buckets"]:
            assert group_bucket(text_key, bucket["hash_count"]) == bucket["bucket"]
            for queue in bucket["queues"]:
                assert group_queue(key, bucket["hash_count"], queue["queue_count"]) == queue["queue"]
    keys = [f"key-{i}".encode() for i in range(2000)] + [b"", b"\xff\x00"]
    expected = [reference_bucket(key, 100) % 12 for key in keys]
    assert group_queues(keys, 100, 12) == expected
    assert group_queues(pa.array(keys, type=pa.binary()), 100, 12) == expected
    assert group_queues([key.decode("utf-8", "replace") for key in keys[:2000]], 100, 12) == expected[:2000]


@pytest.mark.parametrize(
    ("hash_count", "queue_count", "queue_size", "valid"),
    [
        (MAX_HASH_COUNT, MAX_QUEUE_COUNT, MIN_QUEUE_SIZE, True),
        (MAX_HASH_COUNT + 1, 1, MIN_QUEUE_SIZE, False),
        (MAX_QUEUE_COUNT + 1, MAX_QUEUE_COUNT + 1, MIN_QUEUE_SIZE, False),
        (8, 4, MIN_QUEUE_SIZE - 1, False),
        (8, 4, MAX_QUEUE_SIZE, True),
        (8, 4, MAX_QUEUE_SIZE + 1, False),
    ],
)
def test_registry_limits_are_the_rust_layers(
    tmp_path: Path, hash_count: int, queue_count: int, queue_size: int, valid: bool
) -> None:
    """A definition the registry accepts is one the Rust layer accepts, and the reverse."""
    try:
        GroupDefinition("limits", "limits", hash_count, queue_count, queue_size)
        registry_ok = True
    except ConfigError:
        registry_ok = False
    with affinity.Client() as client:
        try:
            observer = GroupObserverCore(
                client, "limits", "limits", hash_count, queue_count, queue_size, registry_dir=str(tmp_path)
            )
            observer.close()
            core_ok = True
        except ConfigError:
            core_ok = False
    assert registry_ok == core_ok == valid
