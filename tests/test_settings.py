"""Settings that would make the client useless are refused with a ConfigError naming the setting
and its allowed range; no setting raises a bare ValueError or OverflowError."""

from __future__ import annotations

import affinity
import pytest

RANGES = {
    "receiver_window": "must be between 64 and 536870912",
    "socket_receive_buffer": "must be between 64 and 2147483647",
    "command_timeout_ms": "must be between 1 and 3600000",
    "receiver_timeout_ms": "must be between 1 and 3600000",
    "term_length": "must be a power of two between 65536 and 1073741824",
    "mtu": "must be a multiple of 32 between 64 and 65504",
}


@pytest.mark.parametrize("setting", sorted(RANGES))
@pytest.mark.parametrize("value", [0, -1, 2**64, 10**40, -(10**40)])
def test_out_of_range_setting_raises_config_error_naming_it_and_its_range(setting: str, value: int) -> None:
    with pytest.raises(affinity.ConfigError) as raised:
        affinity.Client(**{setting: value})
    assert str(raised.value) == f"{setting}={value}: {RANGES[setting]}"


@pytest.mark.parametrize("setting", ["receiver_window", "socket_receive_buffer"])
def test_window_and_buffer_smaller_than_the_mtu_are_refused(setting: str) -> None:
    with pytest.raises(affinity.ConfigError, match=rf"{setting}=1024: must be between the mtu \(1408\) and"):
        affinity.Client(**{setting: 1024})


@pytest.mark.parametrize("setting", sorted(RANGES))
def test_setting_of_the_wrong_type_raises_argument_type_error(setting: str) -> None:
    with pytest.raises(affinity.ArgumentTypeError, match=f"{setting}: expected an integer, got str") as raised:
        affinity.Client(**{setting: "1"})
    assert isinstance(raised.value, TypeError)


def test_unknown_threading_mode_raises_config_error() -> None:
    with pytest.raises(affinity.ConfigError, match='threading: threading mode "both" is not one of'):
        affinity.Client(threading="both")  # type: ignore[arg-type]


def test_values_at_the_edges_of_the_ranges_are_accepted() -> None:
    with affinity.Client(
        threading="invoker",
        term_length=65536,
        mtu=64,
        receiver_window=64,
        socket_receive_buffer=64,
        command_timeout_ms=1,
        receiver_timeout_ms=3_600_000,
    ) as client:
        assert client.threading == "invoker"
