"""Shared secrets of the control plane: reading them safely, one place for every member kind.

The control plane authenticates every message with one mechanism (``rust/crates/messaging/src/control/auth.rs``,
``docs/control-plane.md``): a consumer group's members with the group secret
(:mod:`affinity.groups.secret`), a subject router and its subscribers and sources with the router
secret (:mod:`affinity.subjects`). This module holds what they share:

* a secret is :data:`MIN_SECRET_LENGTH`..:data:`MAX_SECRET_LENGTH` bytes, handed in as bytes, or
  written as hex text in an environment variable or a file;
* a secret file is read without following links or blocking, must be a regular file owned by the
  user and not readable by group or others, and at most :data:`MAX_SECRET_FILE_SIZE` bytes
  (:func:`read_secret_file`);
* :func:`resolve` takes the first source that is set: the ``secret=`` argument (bytes, or an
  ``os.PathLike`` secret file), the hex environment variable, the secret-file environment variable.
"""

from __future__ import annotations

import os
from pathlib import Path

from affinity._safe_files import read_regular
from affinity.exceptions import ConfigError

__all__ = [
    "GENERATED_SECRET_LENGTH",
    "MAX_SECRET_FILE_SIZE",
    "MAX_SECRET_LENGTH",
    "MIN_SECRET_LENGTH",
    "SecretArgument",
    "check_secret_length",
    "decode_secret",
    "read_secret_file",
    "resolve",
]

#: Length of the secrets the package generates, in bytes (``control::auth::GENERATED_SECRET_LENGTH``).
GENERATED_SECRET_LENGTH = 32
#: Shortest secret accepted, in bytes (``control::auth::MIN_SECRET_LENGTH``).
MIN_SECRET_LENGTH = 16
#: Longest secret accepted, in bytes (``control::auth::MAX_SECRET_LENGTH``).
MAX_SECRET_LENGTH = 1024
#: Largest secret file read, in bytes (hex text of the longest secret and a newline).
MAX_SECRET_FILE_SIZE = 2 * MAX_SECRET_LENGTH + 1

#: What a ``secret=`` argument may be: the secret's bytes, a path to a secret file, or nothing.
SecretArgument = bytes | os.PathLike[str] | None


def check_secret_length(secret: bytes, where: str, what: str = "secret") -> None:
    """A ``ConfigError`` naming ``where`` unless ``secret`` has an accepted length."""
    if not MIN_SECRET_LENGTH <= len(secret) <= MAX_SECRET_LENGTH:
        raise ConfigError(
            f"{where}: the {what} has {len(secret)} bytes, expected {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH}"
        )


def decode_secret(text: bytes, where: str, what: str = "secret") -> bytes:
    """The secret written as hex ``text`` (surrounding white space ignored), checked."""
    try:
        secret = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(f"{where}: the {what} must be hex text") from None
    check_secret_length(secret, where, what)
    return secret


def read_secret_file(path: str | os.PathLike[str], what: str = "secret") -> bytes:
    """The secret in the file at ``path`` (hex text); a precise ``ConfigError`` for anything unsafe or wrong."""
    where = os.fspath(path)
    try:
        text = read_regular(Path(where), MAX_SECRET_FILE_SIZE, private=True)
    except FileNotFoundError:
        raise ConfigError(f"cannot read the {what} {where}: no such file") from None
    except ConfigError as error:
        raise ConfigError(f"{what} {error}") from None
    return decode_secret(text, f"{what} {where}", what)


def resolve(secret: SecretArgument, env: str, file_env: str, what: str = "secret") -> tuple[bytes, str] | None:
    """The secret and where it came from: ``secret``, then ``$env`` (hex), then ``$file_env`` (a file).

    ``None`` if none of them is set (the caller may look further, e.g. in the group registry).
    """
    if isinstance(secret, bytes | bytearray):
        check_secret_length(bytes(secret), "secret=", what)
        return bytes(secret), "argument"
    if isinstance(secret, os.PathLike):
        return read_secret_file(secret, what), f"file {os.fspath(secret)}"
    if secret is not None:
        raise ConfigError(f"secret=: expected bytes or a path (os.PathLike), got {type(secret).__name__}")
    from_env = os.environ.get(env)
    if from_env:
        return decode_secret(from_env.encode("ascii", "replace"), f"${env}", what), f"${env}"
    file_env_value = os.environ.get(file_env)
    if file_env_value:
        return read_secret_file(file_env_value, what), f"file {file_env_value} (${file_env})"
    return None
