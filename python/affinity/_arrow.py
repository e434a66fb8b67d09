"""The shape of the pyarrow arrays the compiled module takes and returns (pyarrow ships no type
information): what ``affinity._affinity`` recognises as an Arrow array (``type``, ``offset`` and
``buffers()``), and the ``large_binary`` array ``Subscription.poll_batch(as_arrow=True)`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["ArrowBinaryArray", "LargeBinaryArray"]


class ArrowBinaryArray(Protocol):
    """A pyarrow ``binary``, ``large_binary``, ``string`` or ``large_string`` array."""

    @property
    def type(self) -> object: ...
    @property
    def offset(self) -> int: ...
    def buffers(self) -> Sequence[object]: ...
    def __len__(self) -> int: ...


class LargeBinaryArray(ArrowBinaryArray, Protocol):
    """A pyarrow ``large_binary`` array of whole messages."""

    def to_pylist(self) -> list[bytes]: ...
