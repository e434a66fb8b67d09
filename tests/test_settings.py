"""Driver settings are defined once (``DriverContext::apply`` in the Rust core): the same names
and values are taken, and the same bad values refused with the same message, by
``affinity.Client(...)``, ``affinity driver`` and the ``affinity-driver`` binary. Settings that
would make the client useless are refused with a ConfigError naming the setting and its range;
no setting raises a bare ValueError or OverflowError."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import affinity
import affinity._affinity
import affinity.defaults
import affinity.units
import pytest

RANGES = {
    "receiver_window": "must be between 64 and 536870912",
    "socket_receive_buffer": "must be between 64 and 2147483647",
    "command_timeout_ms": "must be between 1 and 3600000",
    "receiver_timeout_ms": "must be between 1 and 3600000",
    "client_timeout_ms": "must be between 1 and 3600000",
    "term_length": "must be a power of two between 65536 and 1073741824",
    "mtu": "must be a multiple of 32 between 64 and 65504",
    "max_clients": "must be between 1 and 1048576",
}

#: The CPUs this process may run on: the CPU settings name the first and the last.
CPUS = sorted(os.sched_getaffinity(0))

#: Good values of every setting but ``dir``, written as ``affinity driver`` takes them.
GOOD = {
    "threading": "shared-network",
    "idle": "yield",
    "conductor_cpu_affinity": str(CPUS[0]),
    "sender_cpu_affinity": str(CPUS[-1]),
    "receiver_cpu_affinity": "none",
    "term_length": "1m",
    "mtu": "8k",
    "receiver_window": "256k",
    "socket_receive_buffer": "1m",
    "flow_control": "min,t:3s",
    "receiver_timeout": "3s",
    "client_timeout_ms": "4000",
    "linger": "1.5s",
    "command_timeout": "2s",
    "udp_offload": "off",
    "max_clients": "64",
    "publications_per_client": "32",
    "subscriptions_per_client": "32",
    "counters_per_client": "256",
    "commands_per_cycle_per_client": "8",
    "queued_commands_per_client": "64",
}

#: Bad values and the one message every front end gives for them.
BAD = [
    ("threading", "both", "threading=both: expected one of shared, shared-network, dedicated, invoker"),
    ("idle", "nap", "idle=nap: expected one of busy-spin, yield, backoff"),
    ("term_length", "1000", "term_length=1000: must be a power of two between 65536 and 1073741824"),
    (
        "term_length",
        "64kb",
        "term_length=64kb: expected a size: digits with an optional k, m or g suffix (64k, 16m, 1g)",
    ),
    ("mtu", "33", "mtu=33: must be a multiple of 32 between 64 and 65504"),
    ("receiver_window", "1k", "receiver_window=1024: must be between the mtu (1408) and 536870912"),
    ("flow_control", "most", 'flow_control=most: unknown flow control strategy "most" (expected max, min or tagged)'),
    ("receiver_timeout", "0s", "receiver_timeout=0s: must be between 1ms and 3600s"),
    (
        "client_timeout",
        "5",
        "client_timeout=5: a bare number is ambiguous here: give a unit ns, us, ms, s, m or h (e.g. 5s)",
    ),
    ("command_timeout_ms", "0", "command_timeout_ms=0: must be between 1 and 3600000"),
    ("linger", "2h", "linger=2h: must be between 0 and 3600s"),
    ("udp_offload", "yes", "udp_offload=yes: expected on or off"),
    ("sender_cpu_affinity", "-1", "sender_cpu_affinity=-1: expected a CPU number between 0 and 1023, or none"),
    (
        "receiver_cpu_affinity",
        "0",
        "receiver_cpu_affinity=0: threading shared runs every agent on one thread: set conductor_cpu_affinity",
    ),
    ("counters_per_client", "0", "counters_per_client=0: must be between 1 and 1048576"),
]

REPOSITORY = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "affinity.cli", "driver"]
#: How long a driver process may take to start or stop on a loaded machine.
PROCESS_TIMEOUT_S = 60


#: How long cargo may take to bring the binary up to date (seconds; nothing to do in CI, where
#: `cargo test` built it from the same sources just before).
CARGO_BUILD_TIMEOUT_S = 900


@functools.cache
def driver_binary() -> Path:
    """The ``affinity-driver`` of these sources: cargo builds it when it is stale (a binary left
    from older sources would answer with older settings)."""
    build = ["cargo", "build", "-q", "--no-default-features", "--bin", "affinity-driver"]
    try:
        subprocess.run(build, cwd=REPOSITORY, check=True, timeout=CARGO_BUILD_TIMEOUT_S, capture_output=True)
    except FileNotFoundError:
        pytest.fail("cargo is needed to build affinity-driver for this test")
    except subprocess.CalledProcessError as error:
        pytest.fail(f"cargo build of affinity-driver failed: {error.stderr.decode(errors='replace')[-2000:]}")
    return REPOSITORY / "target" / "debug" / "affinity-driver"


def options(settings: dict[str, str]) -> list[str]:
    return [f"--{name.replace('_', '-')}={value}" for name, value in settings.items()]


@pytest.mark.parametrize("setting", sorted(RANGES))
@pytest.mark.parametrize("value", [0, -1, 2**64, 10**40, -(10**40)])
def test_out_of_range_setting_raises_config_error_naming_it_and_its_range(setting: str, value: int) -> None:
    with pytest.raises(affinity.ConfigError) as raised:
        affinity.Client(**{setting: value})  # type: ignore[arg-type]
    assert str(raised.value) == f"{setting}={value}: {RANGES[setting]}"


@pytest.mark.parametrize("setting", ["receiver_window", "socket_receive_buffer"])
def test_window_and_buffer_smaller_than_the_mtu_are_refused(setting: str) -> None:
    with pytest.raises(affinity.ConfigError, match=rf"{setting}=1024: must be between the mtu \(1408\) and"):
        affinity.Client(**{setting: 1024})  # type: ignore[arg-type]


@pytest.mark.parametrize("setting", sorted(RANGES))
def test_setting_of_the_wrong_type_raises_argument_type_error(setting: str) -> None:
    with pytest.raises(affinity.ArgumentTypeError, match=f"{setting}: expected an int or a str, got float") as raised:
        affinity.Client(**{setting: 1.5})  # type: ignore[arg-type]
    assert isinstance(raised.value, TypeError)


def test_an_unknown_setting_is_a_type_error_listing_the_settings() -> None:
    with pytest.raises(
        affinity.ArgumentTypeError, match='unexpected keyword argument "mtu_ms" \\(settings: dir, threading'
    ):
        affinity.Client(mtu_ms=5)  # type: ignore[call-arg]


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


def test_every_setting_is_a_client_keyword_and_an_option_of_the_usage() -> None:
    assert {name.removesuffix("_ms") for name in GOOD} | {"dir"} == set(affinity.defaults.DRIVER_SETTINGS)
    for name in affinity.defaults.DRIVER_SETTINGS:
        assert f"--{name.replace('_', '-')} " in affinity.DRIVER_USAGE, name
    with affinity.Client(**GOOD) as client:  # type: ignore[arg-type]
        assert client.threading == "shared-network"


def test_cli_binary_and_client_take_the_same_settings(tmp_path: Path) -> None:
    for name, command in (("cli", CLI), ("binary", [str(driver_binary())])):
        directory = tmp_path / name
        process = subprocess.Popen(
            [*command, f"--dir={directory}", *options(GOOD)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert process.stdout is not None
            ready = process.stdout.readline()
            assert "ready in" in ready, f"{name}: {ready!r} {process.stderr.read() if process.stderr else ''}"
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
        assert process.returncode == 0, f"{name}: {out} {err}"


@pytest.mark.parametrize(("setting", "value", "message"), BAD, ids=[f"{s}={v}" for s, v, _ in BAD])
def test_cli_binary_and_client_refuse_a_bad_value_with_the_same_message(
    tmp_path: Path, setting: str, value: str, message: str
) -> None:
    with pytest.raises(affinity.ConfigError) as raised:
        affinity.Client(**{setting: value})  # type: ignore[arg-type]
    assert str(raised.value) == message
    arguments = [f"--dir={tmp_path / 'never'}", *options({setting: value})]
    cli = subprocess.run([*CLI, *arguments], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, check=False)
    assert (cli.returncode, cli.stderr) == (2, f"affinity driver: {message}\n")
    binary = subprocess.run(
        [str(driver_binary()), *arguments], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, check=False
    )
    assert (binary.returncode, binary.stderr) == (2, f"{message}\n")
    assert not (tmp_path / "never").exists(), "a refused setting starts no driver"


def test_the_standalone_driver_refuses_invoker_threading_which_a_client_takes() -> None:
    cli = subprocess.run([*CLI, "--threading=invoker"], capture_output=True, text=True, timeout=60, check=False)
    assert cli.returncode == 2 and "threading=invoker: a standalone driver runs its own threads" in cli.stderr
    with affinity.Client(threading="invoker") as client:
        assert client.threading == "invoker"


def test_defaults_are_exported_once_and_shown_by_the_usage() -> None:
    defaults = affinity.defaults
    assert defaults.TERM_LENGTH_IPC == affinity._affinity.DEFAULT_TERM_LENGTH_IPC
    assert f"(default {defaults.MTU})" in affinity.DRIVER_USAGE
    assert f"(default {defaults.RECEIVER_TIMEOUT_MS // 1000}s)" in affinity.DRIVER_USAGE
    assert f"(default {defaults.CLIENT_TIMEOUT_MS // 1000}s)" in affinity.DRIVER_USAGE
    assert f"(default {defaults.COMMAND_TIMEOUT_MS // 1000}s)" in affinity.DRIVER_USAGE
    assert defaults.COMMAND_TIMEOUT_MS == defaults.DRIVER_TIMEOUT_MS, "one client-side default (Aeron's)"
    for name in defaults.__all__:
        value = getattr(defaults, name)
        assert isinstance(value, tuple if name == "DRIVER_SETTINGS" else int) and value, name


@pytest.mark.parametrize(
    ("text", "bare_unit", "seconds"),
    [
        ("500ms", None, 0.5),
        ("1.5s", None, 1.5),
        ("2m", None, 120.0),
        ("30", "s", 30.0),
        ("250", "ms", 0.25),
        ("0", None, 0.0),
    ],
)
def test_the_one_duration_grammar_from_python(
    text: str, bare_unit: affinity.units.TimeUnit | None, seconds: float
) -> None:
    assert affinity.units.parse_duration(text, bare_unit) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("30", '"30": a bare number is ambiguous here: give a unit ns, us, ms, s, m or h (e.g. 30s)'),
        ("1 s", '"1 s": expected a duration: a number with a unit ns, us, ms, s, m or h (500ms, 1.5s, 2m)'),
        ("-1s", '"-1s": expected a duration: a number with a unit ns, us, ms, s, m or h (500ms, 1.5s, 2m)'),
    ],
)
def test_a_bad_duration_from_python_names_the_text(text: str, message: str) -> None:
    with pytest.raises(affinity.ConfigError) as raised:
        affinity.units.parse_duration(text)
    assert str(raised.value) == message


def test_the_one_size_grammar_from_python() -> None:
    assert [affinity.units.parse_size(text) for text in ("65536", "64k", "16M", "1g")] == [
        65536,
        65536,
        16 << 20,
        1 << 30,
    ]
    with pytest.raises(affinity.ConfigError, match='"1kb": expected a size'):
        affinity.units.parse_size("1kb")
