"""The shape of the pyarrow arrays the compiled module takes and returns (pyarrow ships no type
information): what ``affinity._affinity`` recognises as an Arrow array (``type``, ``offset`` and
``buffers()``), the ``large_binary`` array ``Subscription.poll_batch(as_arrow=True)`` returns and
the record batch ``GroupConsumer.poll_batch`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["ArrowBinaryArray", "ArrowRecordBatch", "LargeBinaryArray"]


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


class ArrowRecordBatch(Protocol):
    """A ``pyarrow.RecordBatch``: named columns of equal length."""

    @property
    def num_rows(self) -> int: ...
    @property
    def schema(self) -> object: ...
    def column(self, i: int | str) -> object: ...
    def to_pylist(self) -> list[dict[str, object]]: ...
    def __len__(self) -> int: ...
