"""JSON read from the network: the one rule for what counts as malformed.

``json.loads`` refuses bad bytes with ``ValueError`` (``UnicodeDecodeError``, ``JSONDecodeError``)
but refuses input nested past the interpreter's recursion limit with ``RecursionError`` (a
``RuntimeError``): ``b"[" * 5000`` fits any of our message caps. A reader that catches only the
first escapes the second and kills the thread that polled the message. :func:`loads` turns both
into ``ValueError``; each reader turns that into its own refusal (``ForgedNodeInfo``,
``ConfigError``, ...).
"""

from __future__ import annotations

import json
from typing import Any


def loads(payload: bytes | str) -> Any:
    """``payload`` decoded as JSON (bytes as ``json.loads`` reads them); ``ValueError`` saying why
    when it is not JSON or is nested too deeply to decode."""
    try:
        return json.loads(payload)
    except RecursionError:
        raise ValueError("nested too deeply to decode") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError included
        raise ValueError(str(error)) from None
