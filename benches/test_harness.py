"""Tests of the benchmark harness and renderer: ``python -m pytest -q benches/test_harness.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness
import transport_table

HARNESS = str(Path(__file__).parent / "harness.py")


def run_harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BENCH_RESULTS": str(tmp_path)}
    command = [sys.executable, HARNESS, "run", "--table", "t", "--label", "x", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def records(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]


def test_routing_text_lines_become_records() -> None:
    line = "sticky lookups (modulo)          median   22.01 M/s   runs [23.46, 17.61, 22.01]"
    (record,) = harness.parse_output(f"noise\n{line}\n", "routing-text")
    assert record["measurement"] == "sticky lookups (modulo)"
    assert record["median_mps"] == 22.01 and record["inner_runs_mps"] == [23.46, 17.61, 22.01]


def test_json_objects_are_taken_and_other_lines_ignored() -> None:
    text = 'ready\n{"bench": "ceiling", "msgs_per_sec": 5}\n[1, 2]\n{broken\n'
    assert list(harness.parse_output(text, "json")) == [{"bench": "ceiling", "msgs_per_sec": 5}]


def test_a_run_records_its_result_with_load_fields(tmp_path: Path) -> None:
    done = run_harness(tmp_path, "--", sys.executable, "-c", "print('{\"value\": 3}')")
    assert done.returncode == 0, done.stderr
    (record,) = records(tmp_path)
    assert record["value"] == 3 and record["label"] == "x"
    for key in ("load1_before", "load1_during_max", "other_cores_during", "steal_cores_during", "commit"):
        assert key in record


def test_a_failing_command_is_recorded_as_failed(tmp_path: Path) -> None:
    done = run_harness(tmp_path, "--", sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)")
    assert done.returncode == 1
    (record,) = records(tmp_path)
    assert record["failed"] is True and record["status"] == 3 and "boom" in str(record["error"])


def test_a_timeout_ends_the_commands_children_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    done = run_harness(tmp_path, "--timeout", "1", "--", "sh", "-c", script)
    assert done.returncode == 1
    (record,) = records(tmp_path)
    assert str(record["status"]).startswith("timeout")
    child = int(pid_file.read_text())
    for _ in range(50):  # bounded: the kill is asynchronous
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the command's child {child} survived the timeout")


def test_elf_sections_are_read_from_the_section_table() -> None:
    names = harness.elf_section_names(Path(sys.executable).resolve().read_bytes())
    assert ".text" in names
    assert harness.elf_section_names(b"not an elf file at all") == set()


def test_spread_is_median_with_min_and_max() -> None:
    assert transport_table.spread([3e6, 1e6, 2e6], 2, 1e6) == "2.00 [1.00-3.00]"
    assert transport_table.spread([5.0], 1) == "5.0"


def test_transport_cells_show_the_ratio_to_the_ceiling_of_the_same_size_and_mtu() -> None:
    load = {"load1_before": 1.0, "load1_during_max": 1.0, "runnable_during_mean": 2.0, "other_cores_during": 0.1}
    rows: list[dict[str, object]] = [
        {**load, "bench": "ceiling", "payload": 32, "mtu": 1408, "msgs_per_sec": 8e6, "datagrams_per_sec": 1,
         "mb_per_sec": 1, "lost_fraction": 0.0, "frames_per_datagram": 22, "datagram": 1408},
        {**load, "bench": "throughput", "lang": "rust", "pub_batch": 1, "size": 32, "label": "invoker",
         "msgs_per_sec": 4e6, "params": ""},
        {**load, "bench": "throughput", "lang": "rust", "pub_batch": 1, "size": 32, "label": "invoker",
         "msgs_per_sec": 2e6, "params": "mtu=65504"},
    ]  # fmt: skip
    text = "\n".join(transport_table.transport(transport_table.Raw({}, rows)))
    assert "| Rust offer | 32 B | 1408 | 4.00 (n=1) (0.50 c) |" in text
    assert "| Rust offer | 32 B | 65504 | 2.00 (n=1) |" in text  # no ceiling measured at that MTU


def test_udp_share_divides_each_round_by_its_own_ceiling(tmp_path: Path) -> None:
    def row(driver: str, round_: int, result: dict[str, float]) -> str:
        return json.dumps({"driver": driver, "size": 32, "round": round_, "load": 1.5, "result": result})

    lines = [
        row("ceiling-offload", 1, {"msgs_per_sec": 100e6}),
        row("standalone-shared", 1, {"rate": 20e6}),
        row("standalone-shared-base", 1, {"rate": 10e6}),
        row("ceiling-offload", 2, {"msgs_per_sec": 50e6}),
        row("standalone-shared", 2, {"rate": 20e6}),
        row("standalone-shared-base", 2, {"rate": 20e6}),
        row("standalone-shared-pinned", 1, {"rate": 30e6}),
        row("standalone-shared-pinned", 2, {"rate": 25e6}),
    ]
    raw = tmp_path / "udp.jsonl"
    raw.write_text("\n".join(lines) + "\n")
    table = transport_table.render("udp-share", raw)
    # Shares per round: 0.2 and 0.4 (not 20 / 75, the medians divided).
    assert "| standalone-shared | 32 | 20.000 [20.000-20.000] | 640 [640-640] | 0.300 [0.200-0.400] | 2 |" in table
    # Head over base per round: 2.0 and 1.0.
    assert "| standalone-shared ÷ standalone-shared-base | 32 | 1.500 [1.000-2.000] | 2 |" in table
    # Pinned over unpinned per round: 1.5 and 1.25.
    assert "| standalone-shared-pinned ÷ standalone-shared | 32 | 1.375 [1.250-1.500] | 2 |" in table


def test_udp_runs_kept_in_one_file_get_a_table_per_set(tmp_path: Path) -> None:
    # Two runs of media_driver_udp.sh both number their rounds from 1: kept apart by "set".
    def row(set_: str, driver: str, result: dict[str, float]) -> str:
        return json.dumps({"set": set_, "driver": driver, "size": 32, "round": 1, "load": 1.0, "result": result})

    lines = [
        row("first", "ceiling-offload", {"msgs_per_sec": 100e6}),
        row("first", "standalone-shared", {"rate": 10e6}),
        row("second", "ceiling-offload", {"msgs_per_sec": 100e6}),
        row("second", "standalone-shared", {"rate": 30e6}),
    ]
    raw = tmp_path / "udp.jsonl"
    raw.write_text("\n".join(lines) + "\n")
    table = transport_table.render("udp-share", raw)
    first, second = table.split("set second:")
    assert first.startswith("set first:")
    assert "| standalone-shared | 32 | 10.000 | 320 | 0.100 | 1 |" in first
    assert "| standalone-shared | 32 | 30.000 | 960 | 0.300 | 1 |" in second


def test_udp_rows_recorded_by_the_harness_are_keyed_by_its_run(tmp_path: Path) -> None:
    # run_all.sh runs media_driver_udp.sh once per run (its own "round" is always 1).
    def row(driver: str, run: int, result: dict[str, float]) -> str:
        return json.dumps({"run": run, "driver": driver, "size": 1024, "round": 1, "load": 2.0, "result": result})

    lines = [
        row("ceiling-offload", 1, {"msgs_per_sec": 4e6}),
        row("standalone-shared", 1, {"rate": 1e6}),
        row("ceiling-offload", 2, {"msgs_per_sec": 2e6}),
        row("standalone-shared", 2, {"rate": 1e6}),
    ]
    raw = tmp_path / "udp.jsonl"
    raw.write_text("\n".join(lines) + "\n")
    table = transport_table.render("udp-share", raw)
    assert "| standalone-shared | 1024 | 1.000 [1.000-1.000] | 1024 [1024-1024] | 0.375 [0.250-0.500] | 2 |" in table


def test_udp_cpu_gives_each_thread_per_gb_against_half_the_ceiling_of_its_round(tmp_path: Path) -> None:
    def row(driver: str, round_: int, **fields: object) -> str:
        return json.dumps({"driver": driver, "size": 1000, "round": round_, "load": 1.0, **fields})

    def standalone(round_: int, sender_user: float) -> str:
        threads = {
            "affinity-sender": {"user": sender_user, "system": 0.5},
            "affinity-conduc": {"user": 0.0, "system": 0.0},
        }
        return row(
            "standalone-dedicated",
            round_,
            cpus=2,
            driver_threads=threads,
            publisher={"role": "publish", "cpu_seconds": 0.25},
            result={"role": "subscribe", "messages": 1_000_000, "rate": 1e6, "cpu_seconds": 0.25},
        )

    lines = [
        row("ceiling-offload", 1, result={"msgs_per_sec": 4e6}),
        standalone(1, 1.0),
        row("ceiling-offload", 2, result={"msgs_per_sec": 2e6}),
        standalone(2, 2.0),
    ]
    raw = tmp_path / "udp.jsonl"
    raw.write_text("\n".join(lines) + "\n")
    table = transport_table.render("udp-cpu", raw)
    # 1 GB delivered per run: seconds are CPU-s per GB.
    assert "| standalone-dedicated | 1000 | driver affinity-sender, user | 1.500 [1.000-2.000] | 2 |" in table
    assert "| standalone-dedicated | 1000 | driver affinity-sender, system | 0.500 [0.500-0.500] | 2 |" in table
    assert "| standalone-dedicated | 1000 | publisher (its hot thread) | 0.250 [0.250-0.250] | 2 |" in table
    # Half of 4 and 2 GB/s on 2 CPUs: 1 and 2 CPU-s per GB, each round against its own ceiling.
    assert "| half the ceiling allows (cpus ÷ half its bytes/s) | 1.500 [1.000-2.000] | 2 |" in table
    # Less the system time and the clients (1.0): 0 and 1.
    assert "| left for the driver threads' user time | 0.500 [0.000-1.000] | 2 |" in table
    # An idle thread is left out.
    assert "affinity-conduc" not in table


def test_ipc_summary_gives_ratios_to_aeron_of_medians_and_counts_failures() -> None:
    import bench_standalone_ipc as ipc

    def run(label: str, case: str, offered: float, cpu: float, received: float | None) -> dict[str, object]:
        return {
            "label": label,
            "case": case,
            "size": 32,
            "offered_per_s": offered * 1e6,
            "received_per_s": None if received is None else received * 1e6,
            "publisher_cpu_rate": cpu * 1e6,
            "load_before": 2.0,
            "load_after": 3.0,
        }

    lines = [run("aeron", ipc.AERON_CASE, rate, 2 * rate, None) for rate in (8.0, 10.0, 30.0)]
    lines += [run("aeron", ipc.AERON_EXCLUSIVE_CASE, rate, 2 * rate, None) for rate in (12.0, 15.0, 40.0)]
    lines += [run("head", "rust-offer", rate, rate, rate - 1) for rate in (5.0, 15.0, 20.0)]
    lines.append({"label": "head", "case": "rust-offer", "size": 32, "failed": True, "round": 2, "load": 9.0})
    rows = ipc.summarize(lines).splitlines()
    aeron = next(row for row in rows if row.startswith("aeron") and ipc.AERON_CASE in row)
    head = next(row for row in rows if row.startswith("head"))
    assert "10.00 [8.00-30.00]" in aeron and "1.00x / 1.00x" in aeron
    # 15 / 10 by wall clock, 15 / 20 per CPU-second; the failed run is counted, not averaged.
    assert "   32  3  " in head and "15.00 [5.00-20.00]" in head and "14.00 [4.00-19.00]" in head
    # Against Aeron's exclusive publication too: 15 / 15 and 15 / 30.
    assert head.endswith("1.50x / 0.75x  1.00x / 0.50x (1 failed)")


def test_aeron_ipc_skips_with_a_reason_without_a_build_and_refuses_a_wrong_one(tmp_path: Path) -> None:
    script = Path(__file__).parent / "aeron_ipc.sh"
    env = {key: value for key, value in os.environ.items() if key != "AERON_BUILD"}
    skipped = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert skipped.returncode == 0 and "skipped: AERON_BUILD is not set" in skipped.stderr
    bench = Path(__file__).parent / "bench_standalone_ipc.py"
    command = [sys.executable, str(bench), "--cases", "aeron-offer", "--sizes", "32", "--runs", "1"]
    wrong = subprocess.run(
        [*command, "--aeron-build", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert wrong.returncode != 0 and f"no executable {tmp_path}/binaries/aeronmd" in wrong.stderr
