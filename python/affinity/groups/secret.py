"""A consumer group's shared secret: every member seals every message with it (``docs/control-plane.md``).

``affinity group create`` writes a random secret of :data:`GENERATED_SECRET_LENGTH` bytes next to the
definition, ``<registry>/groups/<name>.secret``, as hex text, owner-only (``0600``), created with
``O_EXCL | O_NOFOLLOW`` (never through a link, never over an existing file). Members find their
secret, the first that is set:

1. the ``secret=`` argument of ``GroupPublisher``/``GroupConsumer``/``GroupObserver``: the secret's
   bytes, or a path (``os.PathLike``) to a secret file;
2. ``$AFFINITY_GROUP_SECRET``: the secret as hex text (every group of the process);
3. ``$AFFINITY_GROUP_SECRET_FILE``: the path of a secret file;
4. the registry's ``<name>.secret``, if it exists.

None of them: the group is *unauthenticated* (fine on one host among trusted users; anyone who can
reach a member's inbox can then forge control messages). A secret file is read without following
links or blocking, must be a regular file owned by the user and not readable by group or others,
and at most :data:`MAX_SECRET_FILE_SIZE` bytes (:mod:`affinity.secret`, shared with the subject router).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from affinity import secret as _shared
from affinity.exceptions import ConfigError
from affinity.groups.registry import NAME_PATTERN, registry_dir
from affinity.secret import GENERATED_SECRET_LENGTH, MAX_SECRET_FILE_SIZE, MAX_SECRET_LENGTH, MIN_SECRET_LENGTH

__all__ = [
    "GENERATED_SECRET_LENGTH",
    "MAX_SECRET_FILE_SIZE",
    "MAX_SECRET_LENGTH",
    "MIN_SECRET_LENGTH",
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "SECRET_SUFFIX",
    "create_secret",
    "read_secret_file",
    "remove_secret",
    "resolve_secret",
    "secret_file",
]

#: Environment variable holding a group secret as hex text.
SECRET_ENV = "AFFINITY_GROUP_SECRET"
#: Environment variable naming a secret file.
SECRET_FILE_ENV = "AFFINITY_GROUP_SECRET_FILE"
#: File-name suffix of a secret file in the registry's ``groups/`` folder.
SECRET_SUFFIX = ".secret"
#: What the error messages call it.
_WHAT = "group secret"


def secret_file(name: str, registry: str | os.PathLike[str] | None = None) -> Path:
    """The registry's secret file of group ``name``."""
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise ConfigError(f"group name {name!r}: not a valid group name")
    return registry_dir(registry) / "groups" / f"{name}{SECRET_SUFFIX}"


def create_secret(name: str, registry: str | os.PathLike[str] | None = None) -> Path:
    """Writes a new random secret for group ``name`` (``0600``, never through a link) and returns its path.

    A file left by a deleted group of the same name is replaced; anything else in the way is an error.
    """
    path = secret_file(name, registry)
    secret = secrets.token_bytes(GENERATED_SECRET_LENGTH)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        remove_secret(name, registry)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as error:
            raise ConfigError(f"cannot create the group secret {path}: {error.strerror or error}") from None
    except OSError as error:
        raise ConfigError(f"cannot create the group secret {path}: {error.strerror or error}") from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, secret.hex().encode("ascii") + b"\n")
        os.fsync(fd)
    except OSError as error:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise ConfigError(f"cannot write the group secret {path}: {error.strerror or error}") from None
    os.close(fd)
    return path


def remove_secret(name: str, registry: str | os.PathLike[str] | None = None) -> bool:
    """Removes group ``name``'s secret file (a link is removed, never followed); whether one existed."""
    path = secret_file(name, registry)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as error:
        raise ConfigError(f"cannot remove the group secret {path}: {error.strerror or error}") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"cannot remove the group secret {path}: it is a directory")
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as error:
        raise ConfigError(f"cannot remove the group secret {path}: {error.strerror or error}") from None
    return True


def read_secret_file(path: str | os.PathLike[str]) -> bytes:
    """The secret in the file at ``path`` (hex text); a precise ``ConfigError`` for anything unsafe or wrong."""
    return _shared.read_secret_file(path, _WHAT)


def resolve_secret(
    name: str,
    registry: str | os.PathLike[str] | None = None,
    secret: bytes | os.PathLike[str] | None = None,
) -> tuple[bytes | None, str]:
    """The secret of group ``name`` and where it came from (module docstring); ``(None, "none")`` if unset."""
    found = _shared.resolve(secret, SECRET_ENV, SECRET_FILE_ENV, _WHAT)
    if found is not None:
        return found
    path = secret_file(name, registry)
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None, "none"
    except OSError as error:
        raise ConfigError(f"cannot read the group secret {path}: {error.strerror or error}") from None
    return read_secret_file(path), f"file {path}"
