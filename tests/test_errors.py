"""Every exception the package raises derives from AffinityError; I/O failures are OSErrors;
no input reachable from Python panics (malformed Arrow arrays included). Tests with a client run
with an embedded and with a standalone driver (conftest.py, ``driver_kind``)."""

from __future__ import annotations

import errno
import re
import struct
from pathlib import Path

import affinity
import affinity.exceptions
import pyarrow as pa
import pytest
from affinity.routing import PosixRegex
from conftest import StandaloneDriver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.both_drivers

ERRORS_RS = Path(__file__).parent.parent / "rust" / "src" / "py" / "errors.rs"


def test_every_exception_class_derives_from_affinity_error() -> None:
    for name in affinity.exceptions.__all__:
        if name.endswith("Warning"):  # warnings have their own root, a UserWarning
            assert issubclass(getattr(affinity.exceptions, name), affinity.AffinityWarning), name
            assert issubclass(affinity.AffinityWarning, UserWarning)
            continue
        assert issubclass(getattr(affinity.exceptions, name), affinity.AffinityError), name


def test_the_rust_mapping_raises_only_classes_that_exist() -> None:
    imported = re.findall(r"import_exception!\(affinity\.exceptions, (\w+)\)", ERRORS_RS.read_text())
    assert "ConfigError" in imported and "AffinityOSError" in imported
    assert set(imported) <= set(affinity.exceptions.__all__)


@pytest.mark.parametrize(("setting", "value"), [("term_length", 1000), ("mtu", 33)])
def test_bad_term_length_and_mtu_raise_config_error(setting: str, value: int) -> None:
    with pytest.raises(affinity.ConfigError, match=f"{setting}={value}: must be") as raised:
        affinity.Client(**{setting: value})
    assert isinstance(raised.value, ValueError)


def test_invalid_regex_raises_config_error() -> None:
    with pytest.raises(affinity.ConfigError, match="Unmatched"):
        PosixRegex("(")


def test_offer_of_a_str_raises_argument_type_error(client: affinity.Client, channel: str) -> None:
    with client.add_publication(channel, 1) as pub, pytest.raises(affinity.ArgumentTypeError) as raised:
        pub.offer("text")  # type: ignore[arg-type]
    assert isinstance(raised.value, TypeError)


def test_socket_failure_is_an_os_error_with_errno(client: affinity.Client) -> None:
    # 192.0.2.0/24 (TEST-NET-1) is never a local address: bind fails with EADDRNOTAVAIL.
    with pytest.raises(
        affinity.AffinityOSError, match=re.escape("cannot bind receiving socket 192.0.2.1:40000")
    ) as raised:
        client.add_subscription("aeron:udp?endpoint=192.0.2.1:40000", 1)
    assert isinstance(raised.value, OSError)
    assert raised.value.errno == errno.EADDRNOTAVAIL


def pack(offsets: list[int], large: bool) -> bytes:
    return b"".join(struct.pack("<q" if large else "<i", value) for value in offsets)


class HostileArray:
    """Quacks like a pyarrow binary array (``type``, ``offset``, ``null_count``, ``buffers()``,
    ``len()``) but holds whatever buffers it is given: pyarrow itself refuses to build some of
    these, a foreign Arrow producer need not."""

    def __init__(self, offsets: list[int], data: bytes, *, large: bool = False, offset: int = 0, length: int = -1):
        self.type = "large_binary" if large else "binary"
        self.offset = offset
        self.null_count = 0
        self._length = max(len(offsets) - 1 - offset, 0) if length < 0 else length
        self._buffers = [None, pa.py_buffer(pack(offsets, large)), pa.py_buffer(data)]

    def __len__(self) -> int:
        return self._length

    def buffers(self) -> list[pa.Buffer | None]:
        return self._buffers


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ([0, 5, 2, 8], "offsets are not monotonic: offset 2 is 2, after 5"),
        ([0, 3, 100], "offset 2 is 100, beyond the data buffer of 8 bytes"),
        ([-4, 3], "offset 0 is negative"),
    ],
)
def test_malformed_arrow_offsets_raise_invalid_argument(
    client: affinity.Client, channel: str, offsets: list[int], message: str
) -> None:
    with client.add_publication(channel, 1) as pub, pytest.raises(affinity.InvalidArgumentError, match=message):
        pub.offer_batch(HostileArray(offsets, b"abcdefgh"))


def test_pyarrow_array_with_non_monotonic_offsets_is_refused(client: affinity.Client, channel: str) -> None:
    # pyarrow's cheap validation (run by from_buffers) checks only the last offset.
    offsets = pa.py_buffer(pack([0, 5, 2, 8], large=False))
    array = pa.Array.from_buffers(pa.binary(), 3, [None, offsets, pa.py_buffer(b"abcdefgh")])
    with client.add_publication(channel, 1) as pub, pytest.raises(affinity.InvalidArgumentError, match="monotonic"):
        pub.offer_batch(array)


def test_arrow_array_longer_than_its_offsets_buffer_is_refused(client: affinity.Client, channel: str) -> None:
    array = HostileArray([0, 1], b"x", length=5)
    with (
        client.add_publication(channel, 1) as pub,
        pytest.raises(affinity.InvalidArgumentError, match="offsets buffer"),
    ):
        pub.offer_batch(array)


def test_arrow_object_with_broken_attributes_raises_invalid_argument(client: affinity.Client, channel: str) -> None:
    array = HostileArray([0, 1], b"x")
    array._buffers = [None]  # a binary array has three buffers
    with client.add_publication(channel, 1) as pub, pytest.raises(affinity.InvalidArgumentError, match="3 buffers"):
        pub.offer_batch(array)


# driver_kind is a constant parameter (a string), not state to reset between examples; the
# standalone driver is module-scoped.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    offsets=st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), min_size=1, max_size=12),
    data=st.binary(max_size=64),
    large=st.booleans(),
    offset=st.integers(min_value=0, max_value=4),
)
def test_offer_batch_never_panics_on_hostile_arrow_buffers(
    driver_kind: str, standalone_driver: StandaloneDriver, offsets: list[int], data: bytes, large: bool, offset: int
) -> None:
    array = HostileArray(offsets, data, large=large, offset=offset)
    opened = standalone_driver.client() if driver_kind == "standalone" else affinity.Client(threading="invoker")
    with opened as client, client.add_publication("aeron:ipc", 1) as pub:
        try:
            taken = pub.offer_batch(array)
        except affinity.InvalidArgumentError:
            monotonic = all(a <= b for a, b in zip(offsets[offset:], offsets[offset + 1 :], strict=False))
            within = all(0 <= value <= len(data) for value in offsets[offset:])
            assert not (monotonic and within), "a well-formed array was refused"
        else:
            assert 0 <= taken <= len(array)
            # An empty array reads no offsets; any other accepted array was well formed.
            assert len(array) == 0 or all(0 <= value <= len(data) for value in offsets[offset:])


@pytest.mark.parametrize("stream_id", [2**31, -(2**31) - 1, 10**40])
def test_stream_id_out_of_range_is_an_invalid_argument_not_overflow(client: affinity.Client, stream_id: int) -> None:
    with pytest.raises(affinity.InvalidArgumentError, match=f"stream_id={stream_id}: must be between"):
        client.add_publication("aeron:ipc", stream_id)
    with pytest.raises(affinity.InvalidArgumentError, match=f"stream_id={stream_id}: must be between"):
        client.add_subscription("aeron:ipc", stream_id)


@pytest.mark.parametrize("limit", [0, -1, 2**64, 10**40])
def test_fragment_limit_out_of_range_is_an_invalid_argument(client: affinity.Client, limit: int) -> None:
    with client.add_subscription("aeron:ipc", 1) as sub:
        with pytest.raises(affinity.InvalidArgumentError, match=f"fragment_limit={limit}: must be between 1 and"):
            sub.poll(lambda data, header: None, limit)
        with pytest.raises(affinity.InvalidArgumentError, match=f"fragment_limit={limit}: must be between 1 and"):
            sub.poll_batch(limit)
