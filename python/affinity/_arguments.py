"""Argument checks of the Python wrappers, for the values they keep or use themselves (callbacks,
paths, durations in seconds) before anything reaches the compiled module, which checks the rest
(``rust/src/py/args.rs``). Same behaviour and messages as there: a wrong type raises
:class:`ArgumentTypeError` (``"{name}: expected {what}, got {type}"``), an unusable value of the
right type :class:`ConfigError` naming the argument.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from typing import Any

from affinity.exceptions import ArgumentTypeError, ConfigError

__all__ = ["expect_callable", "expect_int", "expect_path", "expect_str", "expect_strs", "milliseconds", "wrong_type"]


def wrong_type(name: str, what: str, value: object) -> ArgumentTypeError:
    """``ArgumentTypeError("{name}: expected {what}, got {type}")``."""
    return ArgumentTypeError(f"{name}: expected {what}, got {type(value).__name__}")


def expect_str(name: str, value: object) -> str:
    """``value`` when it is a ``str``."""
    if not isinstance(value, str):
        raise wrong_type(name, "a str", value)
    return value


def expect_int(name: str, value: object) -> int:
    """``value`` when it is an ``int`` (not a ``bool``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(name, "an integer", value)
    return value


def expect_bool(name: str, value: object) -> bool:
    """``value`` when it is a ``bool``."""
    if not isinstance(value, bool):
        raise wrong_type(name, "a bool", value)
    return value


def expect_bytes(name: str, value: object) -> bytes | bytearray | memoryview:
    """``value`` when it is bytes-like (``bytes``, ``bytearray`` or ``memoryview``)."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise wrong_type(name, "bytes", value)
    return value


def expect_strs(name: str, value: object) -> list[str]:
    """The items of ``value``, an iterable of ``str`` (but not one ``str``), as a list."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise wrong_type(name, "a sequence of str", value)
    items = list(value)
    for index, item in enumerate(items):
        expect_str(f"{name}[{index}]", item)
    return items


def expect_path(name: str, value: object) -> str | os.PathLike[str]:
    """``value`` when it is a ``str`` or an ``os.PathLike``."""
    if not isinstance(value, str | os.PathLike):
        raise wrong_type(name, "a str or os.PathLike path", value)
    return value


def expect_callable(name: str, value: object) -> Callable[..., Any]:
    """``value`` when it is callable."""
    if not callable(value):
        raise wrong_type(name, "a callable", value)
    return value


def milliseconds(name: str, seconds: object) -> int:
    """A positive, finite number of ``seconds`` as whole milliseconds (at least 1)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise wrong_type(name, "a number of seconds", seconds)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{name} must be a positive number of seconds, found {seconds!r}")
    return max(1, round(seconds * 1000))
