"""The consumer-group registry: one JSON file per group definition, in a directory on disk.

Where it lives (the first that is set): the ``registry=`` argument, ``$AFFINITY_REGISTRY``,
``$XDG_STATE_HOME/affinity``, ``~/.local/state/affinity``. The directory is created ``0700`` and
definition files ``0600``; a definition is written to a temporary file, flushed, and linked to
``<registry>/groups/<name>.json`` (``link`` fails when the name exists, so of two creators exactly
one wins and nobody ever reads a half-written file). The registry and its ``groups`` folder must
be real directories of this user that no one else may write, and definitions are read as regular
files of at most ``MAX_DEFINITION_BYTES``, without following links or blocking
(``affinity._safe_files``): another user's registry, a FIFO or a link to ``/dev/zero`` is a
``ConfigError`` naming the path. Creation and deletion hold an advisory lock
on ``<registry>/groups/.lock`` so that the hash-prefix check and the write are one step.

Live members' discovery files live under ``<registry>/members/<group>/``; the Rust layer writes
and reads those, this module never does.

File layout::

    {"version": 1, "name": "orders", "HP": "orders", "HC": 64, "QC": 8, "QS": 67108864}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from affinity._arguments import expect_int, expect_path, expect_str
from affinity._safe_files import check_private_dir, read_regular
from affinity.exceptions import ConfigError

__all__ = [
    "MAX_HASH_COUNT",
    "MAX_QUEUE_COUNT",
    "MAX_QUEUE_SIZE",
    "MIN_QUEUE_SIZE",
    "REGISTRY_ENV",
    "REGISTRY_VERSION",
    "GroupDefinition",
    "create_group",
    "delete_group",
    "group_file",
    "list_groups",
    "load_group",
    "members_dir",
    "registry_dir",
    "scan_groups",
]

#: Environment variable naming the registry directory.
REGISTRY_ENV = "AFFINITY_REGISTRY"
#: Version of the definition file layout this module reads and writes.
REGISTRY_VERSION = 1
#: Group names: a letter or digit, then letters, digits, ``_ . -``; at most 64 characters.
#: (The name is a file name, so no ``/`` and no leading dot.)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: Hash prefixes: the first level of every message subject ``HP/bucket/topic``; letters, digits,
#: ``_ . -`` (no ``/``), 1 to 64 characters, as the hashed-delivery experiment's ``__hash1__``.
HASH_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# The numeric limits are the Rust layer's (rust/crates/messaging/src/groups/mod.rs,
# rust/crates/messaging/src/control/limits.rs; docs/groups.md); tests/test_groups_registry.py
# checks that the two agree.
#: Largest hash count (HC).
MAX_HASH_COUNT = 1 << 20
#: Largest queue count (QC): every heartbeat can carry one claim per queue.
MAX_QUEUE_COUNT = 4096
#: Smallest queue size (QS, bytes each publisher retains per queue until acknowledged): 1 KiB.
MIN_QUEUE_SIZE = 1024
#: Largest queue size (QS): 16 GiB (retention is in memory).
MAX_QUEUE_SIZE = 1 << 34
#: File-name suffix of a definition file.
DEFINITION_SUFFIX = ".json"
#: Lock file serialising create and delete within one registry.
LOCK_NAME = ".lock"
#: Largest definition file read, in bytes (a definition is about 100).
MAX_DEFINITION_BYTES = 64 * 1024
#: Deepest nesting of arrays and objects a definition may have (it is one flat object).
MAX_DEFINITION_DEPTH = 2
#: Most digits of an integer in a definition (QS, the largest field, has 11).
MAX_INTEGER_DIGITS = 20


@dataclass(frozen=True)
class GroupDefinition:
    """A consumer group's shared parameters, read by every publisher and consumer by name.

    ``hash_prefix`` (HP) is the subject prefix, ``hash_count`` (HC) the number of buckets a key
    hashes into, ``queue_count`` (QC) the number of queues the buckets are striped over
    (queue = bucket mod QC), ``queue_size`` (QS) the bytes each publisher retains per queue until
    they are acknowledged.
    """

    name: str
    hash_prefix: str
    hash_count: int
    queue_count: int
    queue_size: int

    def __post_init__(self) -> None:
        _check_name("name", expect_str("name", self.name), NAME_PATTERN)
        _check_name("hash prefix (HP)", expect_str("hash_prefix", self.hash_prefix), HASH_PREFIX_PATTERN)
        _check_int("hash count (HC)", expect_int("hash_count", self.hash_count), 1, MAX_HASH_COUNT)
        _check_int("queue count (QC)", expect_int("queue_count", self.queue_count), 1, MAX_QUEUE_COUNT)
        if self.queue_count > self.hash_count:
            raise ConfigError(
                f"group queue count (QC) {self.queue_count} exceeds hash count (HC) {self.hash_count}: "
                "every queue needs at least one bucket (HC >= QC >= 1)"
            )
        _check_int("queue size (QS)", expect_int("queue_size", self.queue_size), MIN_QUEUE_SIZE, MAX_QUEUE_SIZE)

    def to_json(self) -> dict[str, int | str]:
        """The registry file's object (field names as the hashed-delivery experiment's: HP, HC, QC, QS)."""
        return {
            "version": REGISTRY_VERSION,
            "name": self.name,
            "HP": self.hash_prefix,
            "HC": self.hash_count,
            "QC": self.queue_count,
            "QS": self.queue_size,
        }

    @classmethod
    def from_json(cls, data: object, source: str) -> GroupDefinition:
        """Validates a decoded registry file; errors name ``source`` and the bad field."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object, found {type(data).__name__}")
        version = data.get("version")
        if type(version) is not int or version != REGISTRY_VERSION:
            raise ConfigError(f"{source}: unsupported version {version!r} (this reader knows {REGISTRY_VERSION})")
        fields: dict[str, object] = {}
        for key, expected in (("name", str), ("HP", str), ("HC", int), ("QC", int), ("QS", int)):
            value = data.get(key)
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ConfigError(f"{source}: field {key!r} must be a {expected.__name__}, found {value!r}")
            fields[key] = value
        unknown = sorted(set(data) - {"version", "name", "HP", "HC", "QC", "QS"})
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {', '.join(map(repr, unknown))}")
        try:
            return cls(
                name=str(fields["name"]),
                hash_prefix=str(fields["HP"]),
                hash_count=int(str(fields["HC"])),
                queue_count=int(str(fields["QC"])),
                queue_size=int(str(fields["QS"])),
            )
        except ConfigError as error:
            raise ConfigError(f"{source}: {error}") from None


def _check_name(field: str, value: str, pattern: re.Pattern[str]) -> None:
    if pattern.fullmatch(value) is None:
        raise ConfigError(f"group {field} {value!r} is invalid: expected {pattern.pattern}")


def _check_int(field: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ConfigError(f"group {field} {value} is out of range: expected {low} to {high}")


def registry_dir(registry: str | os.PathLike[str] | None = None) -> Path:
    """The registry directory (not created): argument, ``$AFFINITY_REGISTRY``, XDG state, home."""
    if registry is not None:
        return Path(expect_path("registry", registry))
    from_env = os.environ.get(REGISTRY_ENV)
    if from_env:
        return Path(from_env)
    state = os.environ.get("XDG_STATE_HOME")
    if state:
        return Path(state) / "affinity"
    return Path.home() / ".local" / "state" / "affinity"


def _groups_dir(registry: str | os.PathLike[str] | None, *, create: bool) -> Path:
    path = registry_dir(registry) / "groups"
    if create:
        _check_registry(path, create=True)
    return path


def _check_registry(groups: Path, *, create: bool) -> bool:
    """Checks the registry directory and its ``groups`` folder are real directories of this user
    that no one else may write (``create``: making them ``0700`` where missing); whether they
    exist. Another user's registry, or one reached through a symbolic link, is ``ConfigError``
    naming the path and its owner."""
    try:
        for path in (groups.parent, groups):
            check_private_dir(path, create=create)
    except FileNotFoundError:
        return False
    except ConfigError as error:
        raise ConfigError(f"group registry {error}") from None
    return True


def _bounded_int(digits: str) -> int:
    """``json`` integer hook: refuses integers longer than any definition field can be."""
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ConfigError(f"an integer of {len(digits)} digits (at most {MAX_INTEGER_DIGITS} are read)")
    return int(digits)


def _nesting_exceeds(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects deeper than ``limit`` (strings skipped)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def group_file(name: str, registry: str | os.PathLike[str] | None = None) -> Path:
    """The definition file of group ``name`` (which must be a valid group name)."""
    _check_name("name", expect_str("name", name), NAME_PATTERN)
    return _groups_dir(registry, create=False) / f"{name}{DEFINITION_SUFFIX}"


def members_dir(name: str, registry: str | os.PathLike[str] | None = None) -> Path:
    """The folder of the live members' discovery files of group ``name`` (written by Rust)."""
    _check_name("name", expect_str("name", name), NAME_PATTERN)
    return registry_dir(registry) / "members" / name


@contextlib.contextmanager
def _locked(groups: Path) -> Iterator[None]:
    lock_path = groups / LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        raise ConfigError(f"cannot open the registry lock {lock_path}: {error.strerror or error}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> GroupDefinition:
    try:
        text = read_regular(path, MAX_DEFINITION_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise
    except ConfigError as error:
        raise ConfigError(f"cannot read group definition {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"cannot read group definition {path}: {error}") from None
    if _nesting_exceeds(text, MAX_DEFINITION_DEPTH):
        raise ConfigError(f"{path}: corrupt group definition: nested deeper than {MAX_DEFINITION_DEPTH} levels")
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}:{error.lineno}:{error.colno}: corrupt group definition: {error.msg}") from None
    except ConfigError as error:
        raise ConfigError(f"{path}: corrupt group definition: {error}") from None
    except (ValueError, RecursionError) as error:
        raise ConfigError(f"{path}: corrupt group definition: {error}") from None
    definition = GroupDefinition.from_json(data, str(path))
    if definition.name != path.name.removesuffix(DEFINITION_SUFFIX):
        raise ConfigError(f"{path}: field 'name' is {definition.name!r} but the file is named for another group")
    return definition


def load_group(name: str, registry: str | os.PathLike[str] | None = None) -> GroupDefinition:
    """The definition of group ``name``; ``ConfigError`` when it is unknown or its file is corrupt."""
    path = group_file(name, registry)
    try:
        if not _check_registry(path.parent, create=False):
            raise FileNotFoundError(path)
        return _read(path)
    except FileNotFoundError:
        known = ", ".join(definition.name for definition in list_groups(registry)) or "none"
        raise ConfigError(f"unknown group {name!r}: no {path} (known groups: {known})") from None


def list_groups(registry: str | os.PathLike[str] | None = None) -> list[GroupDefinition]:
    """Every group defined in the registry, by name; a corrupt file raises ``ConfigError`` naming it."""
    groups = _groups_dir(registry, create=False)
    if not _check_registry(groups, create=False):
        return []
    definitions = []
    for path in sorted(groups.glob(f"*{DEFINITION_SUFFIX}")):
        if path.name.startswith("."):
            continue
        try:
            definitions.append(_read(path))
        except FileNotFoundError:
            continue  # deleted while listing
    return definitions


def scan_groups(
    registry: str | os.PathLike[str] | None = None,
) -> tuple[list[GroupDefinition], list[ConfigError]]:
    """Every readable group definition of the registry, and what is wrong with each file that is
    not one (a ``ConfigError`` naming it): for tools that show a registry with junk in it and
    keep going (``affinity web``); :func:`list_groups` stops at the first bad file instead."""
    groups = _groups_dir(registry, create=False)
    if not _check_registry(groups, create=False):
        return [], []
    definitions: list[GroupDefinition] = []
    problems: list[ConfigError] = []
    for path in sorted(groups.glob(f"*{DEFINITION_SUFFIX}")):
        if path.name.startswith("."):
            continue
        try:
            definitions.append(_read(path))
        except FileNotFoundError:
            continue  # deleted while listing
        except ConfigError as error:
            problems.append(error)
    return definitions, problems


def create_group(
    name: str,
    hash_prefix: str,
    hash_count: int,
    queue_count: int,
    queue_size: int,
    registry: str | os.PathLike[str] | None = None,
) -> GroupDefinition:
    """Validates and stores a new group; ``ConfigError`` if the name or the hash prefix is in use."""
    definition = GroupDefinition(name, hash_prefix, hash_count, queue_count, queue_size)
    groups = _groups_dir(registry, create=True)
    with _locked(groups):
        for existing in list_groups(registry):
            if existing.name == name:
                raise ConfigError(f"group name {name!r} is already in use ({group_file(name, registry)})")
            if existing.hash_prefix == hash_prefix:
                raise ConfigError(f"group hash prefix (HP) {hash_prefix!r} is already used by group {existing.name!r}")
        target = group_file(name, registry)
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=groups)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(definition.to_json(), out)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, 0o600)
            try:
                os.link(temporary, target)
            except FileExistsError:
                raise ConfigError(f"group name {name!r} is already in use ({target})") from None
            except OSError as error:
                raise ConfigError(f"cannot write group definition {target}: {error.strerror or error}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    return definition


def delete_group(name: str, registry: str | os.PathLike[str] | None = None) -> GroupDefinition:
    """Removes group ``name`` from the registry (its definition, and its secret file when there is
    one) and returns what it was; unknown name: ``ConfigError``."""
    from affinity.groups.secret import remove_secret  # it imports this module

    expect_str("name", name)
    groups = _groups_dir(registry, create=False)
    if not _check_registry(groups, create=False):
        raise ConfigError(f"unknown group {name!r}: the registry {groups} does not exist")
    with _locked(groups):
        definition = load_group(name, registry)
        try:
            group_file(name, registry).unlink()
        except OSError as error:
            raise ConfigError(f"cannot delete group {name!r}: {error.strerror or error}") from None
        # A secret left behind would seal the messages of a later group of the same name.
        remove_secret(name, registry)
    return definition
