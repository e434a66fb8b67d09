"""POSIX extended regular expressions through glibc ``regcomp``/``regexec`` (ctypes).

The affinity value must be exactly what ``sed -r`` captures, and POSIX matching is
leftmost-longest, unlike Python's :mod:`re` (leftmost, first alternative that works): for
``x(a*)(ab)?`` on ``xaab``, POSIX captures ``a`` and Python ``aa``. So the checks match with the
C library itself, as the routing tables do.

:class:`PosixRegex` mirrors ``affinity._affinity.PosixRegex`` (the compiled binding of the
routing tables); :func:`compile_ere` prefers the compiled one when it is importable and falls
back to this ctypes binding, so the configuration checks work without the compiled module.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import weakref
from typing import Protocol

__all__ = ["REG_EXTENDED", "CompiledEre", "PosixRegex", "compile_ere"]

#: ``regcomp`` flag: POSIX extended syntax.
REG_EXTENDED = 1
#: ``regexec`` result: no match.
REG_NOMATCH = 1


class CompiledEre(Protocol):
    """What the checks need of a compiled ERE (satisfied by both bindings)."""

    @property
    def group_count(self) -> int:
        """Number of capture groups."""
        ...

    def capture(self, subject: str) -> str | None:
        """The first capture group of the leftmost-longest match, or ``None``."""
        ...


class _RegexT(ctypes.Structure):
    """glibc's ``regex_t`` (``struct re_pattern_buffer``), with room to spare."""

    _fields_ = [
        ("buffer", ctypes.c_void_p),
        ("allocated", ctypes.c_size_t),
        ("used", ctypes.c_size_t),
        ("syntax", ctypes.c_ulong),
        ("fastmap", ctypes.c_void_p),
        ("translate", ctypes.c_void_p),
        ("re_nsub", ctypes.c_size_t),
        ("flags", ctypes.c_uint),
        ("_spare", ctypes.c_char * 64),
    ]


class _RegmatchT(ctypes.Structure):
    """glibc's ``regmatch_t``: ``regoff_t`` is ``int`` (glibc is built without large offsets)."""

    _fields_ = [
        ("rm_so", ctypes.c_int),
        ("rm_eo", ctypes.c_int),
    ]


def _load_libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not hasattr(libc, "gnu_get_libc_version"):
        raise OSError("the POSIX regex binding needs glibc (its regex_t layout)")
    libc.regcomp.argtypes = [ctypes.POINTER(_RegexT), ctypes.c_char_p, ctypes.c_int]
    libc.regcomp.restype = ctypes.c_int
    libc.regexec.argtypes = [
        ctypes.POINTER(_RegexT),
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.POINTER(_RegmatchT),
        ctypes.c_int,
    ]
    libc.regexec.restype = ctypes.c_int
    libc.regerror.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_RegexT),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    libc.regerror.restype = ctypes.c_size_t
    libc.regfree.argtypes = [ctypes.POINTER(_RegexT)]
    libc.regfree.restype = None
    return libc


_LIBC = _load_libc()


def _encode(text: str, what: str) -> bytes:
    if "\0" in text:
        raise ValueError(f"{what} contains a NUL character")
    return text.encode("utf-8", "surrogateescape")


class PosixRegex:
    """A POSIX ERE compiled by glibc ``regcomp(REG_EXTENDED)``.

    Raises :class:`ValueError` with glibc's message when the pattern does not compile.
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._regex = _RegexT()
        code = _LIBC.regcomp(ctypes.byref(self._regex), _encode(pattern, "pattern"), REG_EXTENDED)
        if code != 0:
            message = _error_message(code, self._regex)
            raise ValueError(f"invalid POSIX extended regular expression: {message}")
        self._finalizer = weakref.finalize(self, _LIBC.regfree, ctypes.byref(self._regex))

    @property
    def group_count(self) -> int:
        """Number of capture groups (``re_nsub``)."""
        return int(self._regex.re_nsub)

    def match(self, subject: str) -> list[tuple[int, int]] | None:
        """Spans (character offsets) of the match and of each group, ``(-1, -1)`` if unset."""
        data = _encode(subject, "subject")
        count = self.group_count + 1
        spans = (_RegmatchT * count)()
        code = _LIBC.regexec(ctypes.byref(self._regex), data, count, spans, 0)
        if code == REG_NOMATCH:
            return None
        if code != 0:
            raise ValueError(f"regexec failed: {_error_message(code, self._regex)}")
        return [_char_span(data, span.rm_so, span.rm_eo) for span in spans]

    def capture(self, subject: str) -> str | None:
        """What ``sed -r 's/PATTERN/\\1/'`` puts for ``\\1``: ``None`` if no match.

        A group that did not take part in the match captures ``""``, as in ``sed``.
        """
        return self.group(subject, 1)

    def group(self, subject: str, index: int) -> str | None:
        """Group ``index`` (0 = whole match) of the leftmost-longest match, or ``None``."""
        spans = self.match(subject)
        if spans is None:
            return None
        start, end = spans[index]
        return "" if start < 0 else subject[start:end]

    def __repr__(self) -> str:
        return f"PosixRegex({self.pattern!r})"


def _char_span(data: bytes, start: int, end: int) -> tuple[int, int]:
    """Byte offsets to character offsets."""
    if start < 0:
        return (-1, -1)
    prefix = len(data[:start].decode("utf-8", "surrogateescape"))
    return (prefix, prefix + len(data[start:end].decode("utf-8", "surrogateescape")))


def _error_message(code: int, regex: _RegexT) -> str:
    size = _LIBC.regerror(code, ctypes.byref(regex), None, 0)
    buffer = ctypes.create_string_buffer(size)
    _LIBC.regerror(code, ctypes.byref(regex), buffer, size)
    return buffer.value.decode("utf-8", "replace")


def compile_ere(pattern: str) -> CompiledEre:
    """Compile ``pattern`` with the routing tables' binding if built, else with ctypes.

    Raises :class:`ValueError` when the pattern is not a valid POSIX ERE.
    """
    try:
        from affinity._affinity import PosixRegex as CompiledPosixRegex  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return PosixRegex(pattern)
    compiled: CompiledEre = CompiledPosixRegex(pattern)
    return compiled
