"""Directories and files another local user may have prepared: opened without following
symbolic links and without blocking, trusted only when they belong to this user.

The Python half of ``rust/crates/shm/src/safe_fs.rs``. A directory is opened ``O_DIRECTORY | O_NOFOLLOW``
and the open descriptor is checked with ``fstat`` (owned by this user, not writable by group or
others), so what is checked is what was opened; a directory that passes cannot be changed by
another user afterwards (they cannot write in it, nor rename it out of a sticky parent). A file
is opened ``O_NOFOLLOW | O_NONBLOCK``, must be a regular file by ``fstat`` and at most a given
size: a symbolic link to ``/dev/zero`` or a FIFO is an error at once, never an endless read or
a hang. Errors are :class:`~affinity.exceptions.ConfigError` naming the path, the owner's uid
and what is wrong.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from affinity.exceptions import ConfigError

__all__ = ["PRIVATE_DIR_MODE", "UNTRUSTED_MODE_BITS", "check_private_dir", "read_regular"]

#: Permission bits of every private directory the package creates.
PRIVATE_DIR_MODE = 0o700
#: Permission bits that, set on a directory, let another user change what it holds.
UNTRUSTED_MODE_BITS = 0o022

_NOFOLLOW_ERRORS = (errno.ELOOP, errno.ENOTDIR)


def _refused(path: Path, expected: str, error: OSError) -> ConfigError:
    """What ``path`` is, when opening it without following a link failed."""
    try:
        info = os.lstat(path)
    except OSError:
        return ConfigError(f"{path}: cannot open: {error.strerror or error}")
    if stat.S_ISLNK(info.st_mode):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        return ConfigError(f"{path}: is a symbolic link{target} owned by uid {info.st_uid}, not {expected}: refused")
    return ConfigError(f"{path}: is not {expected} (owned by uid {info.st_uid}): refused")


def check_private_dir(path: Path, *, create: bool) -> None:
    """Checks that directory ``path`` is a real directory (its last component is not followed
    if it is a symbolic link) owned by this user and not writable by group or others; with
    ``create``, makes it first (mode ``0700``, missing parents too). ``FileNotFoundError`` when
    it is missing and ``create`` is false; ``ConfigError`` naming the path and owner otherwise."""
    if create:
        try:
            path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
            path.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
        except OSError as error:
            raise ConfigError(f"{path}: cannot create directory: {error.strerror or error}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno in _NOFOLLOW_ERRORS:
            raise _refused(path, "a directory", error) from None
        raise ConfigError(f"{path}: cannot open directory: {error.strerror or error}") from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    uid = os.getuid()
    if info.st_uid != uid:
        raise ConfigError(f"{path}: is owned by uid {info.st_uid}, not by this user (uid {uid}): refused")
    mode = stat.S_IMODE(info.st_mode)
    if mode & UNTRUSTED_MODE_BITS:
        raise ConfigError(f"{path}: is writable by group or others (mode {mode:#o}, owner uid {info.st_uid}): refused")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _check_private_file(path: Path, info: os.stat_result) -> None:
    """A ``ConfigError`` unless the file is this user's and neither group nor others can read it."""
    uid = os.geteuid()
    if info.st_uid != uid:
        raise ConfigError(f"{path}: owned by uid {info.st_uid}, not by this user ({uid}): refused")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise ConfigError(f"{path}: mode {mode:04o} lets group or others read it; expected 0600 (chmod 600)")


def read_regular(path: Path, max_bytes: int, *, private: bool = False) -> bytes:
    """The bytes of regular file ``path`` (at most ``max_bytes``), opened without following a
    symbolic link and without blocking. ``FileNotFoundError`` when it is missing;
    ``ConfigError`` naming the path when it is a link, not a regular file, or too large; with
    ``private`` (a secret), also unless it is this user's and unreadable by group and others."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refused(path, "a regular file", error) from None
        raise ConfigError(f"{path}: cannot open: {error.strerror or error}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: is not a regular file ({_kind(info.st_mode)}): refused")
        if private:
            _check_private_file(path, info)
        if info.st_size > max_bytes:
            raise ConfigError(f"{path}: is {info.st_size} bytes, more than the limit of {max_bytes}: refused")
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: grew past the limit of {max_bytes} bytes while read: refused")
    return data
