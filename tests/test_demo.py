"""The pipeline demo: its validator on made-up record streams, then the whole demo in real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rich")
pytest.importorskip("matplotlib")

from affinity.demo.records import RecordError, decode_processed, encode_processed, event_times_ns
from affinity.demo.settings import (
    CHART_PNG,
    REPORT_JSON,
    REPORT_TEXT,
    SPARK_STARTUP_TIMEOUT,
    SPARK_WORK_PREFIX,
    WORK_ROOT,
    DemoSettings,
)
from affinity.demo.validation import RELEASE_INTERVAL_NS, REORDER_WINDOW_NS, MoveCause, Validator
from affinity.exceptions import ConfigError

SECOND = 1_000_000_000
Row = tuple[int, int, int, int, int, int]
#: Seconds a whole demo run may take in a test before it is stopped.
DEMO_TEST_TIMEOUT = 240


def row(account: int, seq: int, consumer: int, queue: int, at: float) -> tuple[int, int, int, int, int, int]:
    """A processed record: processed ``at`` seconds after the start, generated 1 ms before."""
    done = int(at * SECOND)
    return (account, seq, consumer, queue, done - 1_000_000, done)


def feed(validator: Validator, rows: list[tuple[int, int, int, int, int, int]]) -> None:
    validator.add(rows, now_ns=0)
    validator.flush()


# ---- records ------------------------------------------------------------------------------------


def test_processed_records_round_trip_packed_in_one_message() -> None:
    rows = [(7, 3, 1, 2, 100, 200), (2**40, 1, 0, 11, -5, 2**62)]
    assert list(decode_processed(encode_processed(rows))) == rows


def test_event_times_of_a_timestamp_column_are_its_instants_whatever_the_time_zone() -> None:
    pa = pytest.importorskip("pyarrow")
    micros = [1_763_900_000_000_001, 1_763_900_000_250_000]
    for tz in ("UTC", "Europe/Paris", "America/New_York", None):
        column = pa.array(micros, type=pa.timestamp("us", tz=tz))
        assert event_times_ns(column) == [us * 1000 for us in micros], tz
    millis = [us // 1000 for us in micros]
    chunked = pa.chunked_array([pa.array(millis, type=pa.timestamp("ms", tz="Asia/Tokyo"))])
    assert event_times_ns(chunked) == [ms * 1_000_000 for ms in millis]


def test_event_times_of_a_column_that_is_not_a_timestamp_are_refused_by_name() -> None:
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(RecordError, match="column 'event_time_us' is int64, expected a timestamp"):
        event_times_ns(pa.array([1, 2]), "event_time_us")
    with pytest.raises(RecordError, match="null event times"):
        event_times_ns(pa.array([1, None], type=pa.timestamp("us", tz="UTC")))


def test_the_report_names_the_earliest_and_latest_event_time() -> None:
    validator = Validator(accounts=2, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 0, 0.1), row(1, 1, 1, 1, 0.2), row(0, 2, 0, 0, 1.1)])
    report = validator.report(generated=3)
    events = sorted(r[4] for r in [row(0, 1, 0, 0, 0.1), row(1, 1, 1, 1, 0.2), row(0, 2, 0, 0, 1.1)])
    assert (report.first_event_ns, report.last_event_ns) == (events[0], events[-1])


def test_the_latency_line_names_the_spark_batches_that_bound_it(tmp_path: Path) -> None:
    from affinity.demo.orchestrator import DemoResult
    from affinity.demo.report import latency_bound

    validator = Validator(accounts=2, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 0, 0.1)])

    def result(spark: bool, batches: list[int], sink: list[int]) -> DemoResult:
        settings = DemoSettings.create(out=tmp_path, spark=spark)
        return DemoResult(settings, "g", 1, 1.0, validator.report(1), [], [], [], 1.0, None, None, 0, batches, sink)

    line = latency_bound(result(True, [400, 100, 300, 200, 2000], [50, 10, 30, 20, 900]))
    assert "batch start to commit p50 300 ms, p99 2,000 ms over 5 batches" in line
    assert "the tasks (source read, sink write) and commit p50 30 ms" in line
    assert "no batch after the warm-up" in latency_bound(result(True, [], []))
    assert "GroupPublisher sends each event at once" in latency_bound(result(False, [], []))


def test_the_latency_line_names_the_failover_when_its_seconds_make_the_p99(tmp_path: Path) -> None:
    from affinity.demo.orchestrator import DemoResult
    from affinity.demo.report import latency_bound

    def held(account: int, seq: int, consumer: int, queue: int, at: float, latency: float) -> Row:
        done = int(at * SECOND)
        return (account, seq, consumer, queue, done - int(latency * SECOND), done)

    def run(killed_at_ns: int | None, late: float) -> DemoResult:
        validator = Validator(accounts=2, start_ns=0, bin_seconds=1.0)
        # Account 0 on queue 0 (consumer 0, never killed) every 10 ms for 10 s, 1 ms each.
        steady = [row(0, n + 1, 0, 0, 0.01 * n + 0.005) for n in range(1000)]
        # Account 1 on queue 5: consumer 1 until the kill at 3.5 s, then consumer 2 from 4.2 s,
        # its first 50 events held since the kill (`late` s), then 1 ms again.
        before = [row(1, n + 1, 1, 5, 0.1 * n + 0.05) for n in range(35)]
        catch_up = [held(1, 36 + n, 2, 5, 4.2, late) for n in range(50)]
        after = [row(1, 86 + n, 2, 5, 4.3 + 0.1 * n) for n in range(50)]
        feed(validator, steady + before)
        validator.mark_killed(1, killed_at_ns)
        feed(validator, catch_up + after)
        settings = DemoSettings.create(out=tmp_path, spark=True, liveness=0.5)
        report = validator.report(generated=2 * 1000)  # account 1's tail is missing: not checked here
        assert (report.duplicates, report.order_errors, report.failover_replays) == (0, 0, 0), report.errors
        return DemoResult(settings, "g", 1135, 10.0, report, [], [], [], 10.0, None, None, 0, [100, 800], [50, 700])

    failover = run(int(3.5 * SECOND), late=0.7)
    latency = failover.validation.latency
    assert latency.failover_window == pytest.approx((3.5, 5.2))
    assert latency.p99_ms == pytest.approx(700.0)
    assert latency.p99_outside_failover_ms == pytest.approx(1.0)
    line = latency_bound(failover)
    assert line.startswith("the failover after the SIGKILL (t=3.5 s)"), line
    assert "liveness timeout (500 ms, --liveness)" in line, line
    assert "longest batch 800 ms" in line and "Outside t=3.5-5.2 s the p99 is 1.0 ms" in line, line
    assert "Spark's micro-batches" in line, line
    # Held for no longer than the steady state's tail: the micro-batches bound it.
    assert latency_bound(run(int(3.5 * SECOND), late=0.001)).startswith("Spark's micro-batches"), "quick failover"
    # No kill time given: no window, the steady line.
    unknown = run(None, late=0.7)
    assert unknown.validation.latency.failover_window is None
    assert latency_bound(unknown).startswith("Spark's micro-batches")


def test_a_processed_message_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="not a multiple of 36"):
        list(decode_processed(b"\0" * 37))


# ---- validation ---------------------------------------------------------------------------------


def test_in_order_streams_pass_and_count_per_consumer() -> None:
    validator = Validator(accounts=2, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 0, 0.1), row(1, 1, 1, 1, 0.2), row(0, 2, 0, 0, 1.1), row(1, 2, 1, 1, 1.2)])
    report = validator.report(generated=4)
    assert report.passed
    assert (report.lost, report.duplicates, report.order_errors, report.failover_replays) == (0, 0, 0, 0)
    assert report.per_consumer == {0: 2, 1: 2}
    assert report.timeline.per_consumer == {0: [1, 1], 1: [1, 1]}
    assert report.latency.p50_ms == pytest.approx(1.0)


def test_replay_after_a_kill_is_reported_as_replay_not_duplicate() -> None:
    validator = Validator(accounts=1, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 5, 0.1), row(0, 2, 0, 5, 0.2), row(0, 3, 0, 5, 0.3)])
    validator.mark_killed(0)
    # Consumer 1 takes queue 5 over from the last acknowledged position (1): 2 and 3 come again.
    feed(validator, [row(0, 2, 1, 5, 3.0), row(0, 3, 1, 5, 3.1), row(0, 4, 1, 5, 3.2)])
    report = validator.report(generated=4)
    assert report.passed
    assert report.failover_replays == 2
    assert report.duplicates == 0
    [move] = report.moves
    assert (move.queue, move.source, move.target, move.cause) == (5, 0, 1, MoveCause.FAILOVER)
    assert (move.keys, move.replayed) == (1, 2)
    assert move.at == pytest.approx(3.0)


def test_a_repeat_after_a_planned_handoff_is_a_duplicate() -> None:
    validator = Validator(accounts=1, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 5, 0.1), row(0, 2, 0, 5, 0.2), row(0, 2, 1, 5, 3.0), row(0, 3, 1, 5, 3.1)])
    report = validator.report(generated=3)
    assert not report.passed
    assert report.duplicates == 1
    assert report.moves[0].cause == MoveCause.HANDOFF


def test_a_replay_beyond_what_the_killed_consumer_processed_is_a_duplicate() -> None:
    validator = Validator(accounts=1, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 5, 0.1), row(0, 2, 0, 5, 0.2)])
    validator.mark_killed(0)
    feed(validator, [row(0, 2, 1, 5, 3.0), row(0, 3, 1, 5, 3.1), row(0, 3, 1, 5, 3.2)])
    report = validator.report(generated=3)
    assert (report.failover_replays, report.duplicates) == (1, 1)


def test_a_skipped_sequence_number_is_an_order_error_and_lost() -> None:
    validator = Validator(accounts=1, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 0, 0.1), row(0, 3, 0, 0, 0.2)])
    report = validator.report(generated=3)
    assert (report.order_errors, report.lost) == (1, 1)
    assert not report.order_held
    assert "Expected 2 but received 3" in report.errors[0]


def test_a_missing_tail_is_lost() -> None:
    validator = Validator(accounts=3, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 0, 0.1), row(1, 1, 0, 0, 0.1)])
    report = validator.report(generated=6)  # accounts 0, 1, 2 each with seq 1 and 2
    assert report.lost == 4
    assert report.delivered == 2


def test_checks_run_at_most_every_release_interval() -> None:
    validator = Validator(accounts=1, start_ns=0, bin_seconds=1.0)
    late = REORDER_WINDOW_NS + 10 * RELEASE_INTERVAL_NS
    validator.add([row(0, 1, 0, 0, 0.0)], now_ns=late)
    validator.add([row(0, 2, 0, 0, 0.0)], now_ns=late + 1)  # within the interval: only buffered
    assert validator.live().received == 1
    validator.add([], now_ns=late + RELEASE_INTERVAL_NS)
    assert validator.live().received == 2


def test_records_are_checked_in_processing_order_not_arrival_order() -> None:
    validator = Validator(accounts=1, start_ns=0, bin_seconds=1.0)
    # The new owner's record (processed later) is polled before the old owner's last one.
    validator.add([row(0, 1, 0, 2, 0.1), row(0, 3, 1, 2, 0.5)], now_ns=int(0.6 * SECOND))
    validator.add([row(0, 2, 0, 2, 0.2)], now_ns=int(0.6 * SECOND))
    validator.add([], now_ns=int(0.6 * SECOND) + REORDER_WINDOW_NS)
    report = validator.report(generated=3)
    assert report.passed
    assert [(m.source, m.target) for m in report.moves] == [(0, 1)]


def test_records_before_the_clock_starts_wait_and_land_in_the_first_bin() -> None:
    validator = Validator(accounts=1, start_ns=None, bin_seconds=1.0)
    validator.add([row(0, 1, 0, 0, 100.0)], now_ns=int(200 * SECOND))
    assert validator.received_total == 1
    assert validator.live().received == 0  # buffered, not checked
    validator.rebase(int(101 * SECOND))
    validator.add([row(0, 2, 0, 0, 103.5)], now_ns=int(200 * SECOND))
    validator.flush()
    report = validator.report(generated=2)
    assert report.passed
    assert report.timeline.per_consumer == {0: [1, 0, 1]}
    # The early event was due before the clock started: counted, but not in the latency.
    assert (report.latency.count, report.latency.warmup_events) == (1, 1)


def test_records_beyond_what_was_generated_are_unexpected() -> None:
    validator = Validator(accounts=1, start_ns=0, bin_seconds=1.0)
    feed(validator, [row(0, 1, 0, 0, 0.1), row(0, 2, 0, 0, 0.2)])
    report = validator.report(generated=1)
    assert report.unexpected == 1
    assert not report.passed


# ---- chart helpers ------------------------------------------------------------------------------


def test_moving_average_spreads_a_burst_over_its_window() -> None:
    import numpy as np
    from affinity.demo.chart import moving_average

    smoothed = moving_average(np.array([[0.0, 0.0, 9.0, 0.0, 0.0]]), 3)
    assert smoothed.tolist() == [[0.0, 3.0, 3.0, 3.0, 0.0]]
    # The edges average over the bins that exist.
    assert moving_average(np.array([6.0, 0.0]), 3).tolist() == [3.0, 3.0]


def test_generated_rate_comes_from_cumulative_samples() -> None:
    import numpy as np
    from affinity.demo.chart import generated_rate

    samples = [(0.0, 0), (1.0, 100), (2.0, 300)]
    assert generated_rate(samples, np.array([0.0, 1.0, 2.0])).tolist() == [100.0, 200.0]
    assert generated_rate([(0.0, 0)], np.array([0.0, 1.0])).tolist() == [0.0]


# ---- settings and CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"duration": 0.0}, "--duration"),
        ({"consumers": 1}, "--consumers"),
        ({"rate": 0}, "--rate"),
        ({"accounts": 0}, "--accounts"),
        ({"kill_at": 70.0}, "--kill-at"),
        ({"kill_at": 10.0, "join_at": 5.0}, "--join-at"),
        ({"liveness": 0.01}, "--liveness must be between 0.05 and 60 seconds"),
        ({"liveness": float("nan")}, "--liveness"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        DemoSettings.create(out=tmp_path, **options)


def test_default_kill_and_join_fall_inside_the_run(tmp_path: Path) -> None:
    settings = DemoSettings.create(out=tmp_path)
    assert 0 < settings.kill_at < settings.join_at < settings.duration
    assert settings.queue_count >= settings.consumers


def affinity_cli(*args: str, timeout: float = DEMO_TEST_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affinity.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_cli_refuses_a_bad_option_with_exit_code_2(tmp_path: Path) -> None:
    result = affinity_cli("demo", "--no-spark", "--consumers", "1", "--out", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2
    assert "--consumers must be at least 2" in result.stderr


def test_transport_demo_is_still_reachable() -> None:
    result = affinity_cli("demo", "transport", "--count", "20000", "--size", "64", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "received 20,000 messages" in result.stdout


# ---- the whole demo -----------------------------------------------------------------------------


#: The Spark demos here share 2 cores with Spark's JVM and workers: the demo's 0.5 s liveness
#: timeout is chosen for an otherwise idle machine (docs/benchmarks.md), and a consumer stalled
#: that long on a busy one is declared dead; these runs check correctness, not latency.
SPARK_DEMO_LIVENESS = ("--liveness", "2")


def run_demo(out: Path, *extra: str) -> dict[str, Any]:
    result = affinity_cli("demo", "--no-live", "--out", str(out), *extra)
    assert (out / REPORT_JSON).exists(), f"no report (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    report: dict[str, Any] = json.loads((out / REPORT_JSON).read_text())
    assert result.returncode == (0 if report["passed"] else 1)
    assert str(out) in result.stdout
    return report


def check_report(report: dict[str, Any], out: Path) -> None:
    validation = report["validation"]
    assert validation["lost"] == 0, validation["errors"]
    assert validation["duplicates"] == 0, validation["errors"]
    assert validation["order_held"], validation["errors"]
    assert validation["unexpected"] == 0
    assert validation["delivered"] == report["generated"] == report["settings"]["rate"] * report["settings"]["duration"]
    kill = next(e for e in report["events"] if e["kind"] == "kill")
    join = next(e for e in report["events"] if e["kind"] == "join")
    moves = validation["moves"]
    assert any(m["cause"] == "failover" and m["source"] == kill["consumer"] and m["at"] >= kill["at"] for m in moves)
    assert any(m["target"] == join["consumer"] and m["at"] >= join["at"] for m in moves)
    assert report["passed"]
    # Every consumer, the killed one and the replacement included, processed something.
    assert set(validation["per_consumer"]) == {str(c) for c in range(report["settings"]["consumers"] + 1)}
    assert "latency bounded by" in (out / REPORT_TEXT).read_text()
    if report["settings"]["spark"]:
        assert report["spark_batch_ms"] and len(report["spark_sink_ms"]) == len(report["spark_batch_ms"])
    latency = validation["latency"]
    assert latency["count"] + latency["warmup_events"] == validation["received"]
    assert 0 < latency["p50_ms"] <= latency["p99_ms"]
    chart = out / CHART_PNG
    assert chart.stat().st_size > 10_000
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / REPORT_TEXT).read_text()
    assert "per-key order" in text
    assert 0 < validation["first_event_ns"] <= validation["last_event_ns"]
    assert "event times (UTC" in text


def require_spark() -> None:
    """Skip (which the conftest turns into a failure where Spark is required) without pyspark or Java."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed")


@pytest.mark.slow
def test_no_spark_demo_loses_nothing_duplicates_nothing_and_moves_queues(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    report = run_demo(
        out,
        "--no-spark",
        *("--duration", "18", "--rate", "1500", "--accounts", "600"),
        *("--kill-at", "4", "--join-at", "8", "--liveness", "1.5"),
    )
    check_report(report, out)
    # The consumers took --liveness: the killed one's queues moved no sooner than that timeout
    # after its last heartbeat (at most one heartbeat interval before the kill).
    settings = DemoSettings.create(out=out, liveness=1.5)
    assert report["settings"]["liveness"] == 1.5
    kill = next(e for e in report["events"] if e["kind"] == "kill")
    failover = min(m["at"] for m in report["validation"]["moves"] if m["cause"] == "failover")
    assert failover - kill["at"] >= settings.liveness - settings.heartbeat_interval, (kill, failover)
    window = report["validation"]["latency"]["failover_window"]
    assert window[0] == pytest.approx(kill["at"], abs=0.5), (window, kill)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_demo_loses_nothing_duplicates_nothing_and_moves_queues(tmp_path: Path) -> None:
    require_spark()
    out = tmp_path / "demo"
    report = run_demo(
        out,
        *("--duration", "20", "--rate", "1000", "--accounts", "500"),
        *("--kill-at", "5", "--join-at", "9"),
        *SPARK_DEMO_LIVENESS,
    )
    check_report(report, out)
    assert report["settings"]["spark"] is True
    # The event time travelled as a Spark TimestampType column, read back as instants.
    assert "Spark TimestampType column" in (out / REPORT_TEXT).read_text()


@pytest.mark.slow
@pytest.mark.spark
def test_spark_demo_on_one_standalone_driver_under_every_process(tmp_path: Path) -> None:
    require_spark()
    out = tmp_path / "demo"
    report = run_demo(
        out,
        "--driver",
        *("--duration", "16", "--rate", "1000", "--accounts", "500"),
        *("--kill-at", "4", "--join-at", "8"),
        *SPARK_DEMO_LIVENESS,
    )
    check_report(report, out)
    assert report["settings"]["driver"] is True and report["driver_pid"] > 0
    # Attached at once: the three consumers (the killed one goes, the new one comes), the validator
    # and Spark's writer: the executor JVM (JVM writer) or a Python worker (through driverDir and
    # AFFINITY_DIR, no embedded driver).
    assert report["driver_clients_peak"] >= report["settings"]["consumers"] + 2, report["driver_clients_peak"]
    assert f"one standalone affinity driver (pid {report['driver_pid']})" in (out / REPORT_TEXT).read_text()
    assert not Path(f"/proc/{report['driver_pid']}").exists(), "the standalone driver outlived the demo"


@pytest.mark.slow
@pytest.mark.spark
def test_an_interrupted_spark_demo_leaves_no_spark_work_folder(tmp_path: Path) -> None:
    # Interrupted, the orchestrator stops the Spark job's process group (SIGTERM, then SIGKILL);
    # a job killed that way cannot remove anything, so the orchestrator does.
    require_spark()
    temp = tmp_path / "tmp"
    temp.mkdir()
    # The work folder is made in memory (WORK_ROOT) where there is one, else in TMPDIR.
    roots = [WORK_ROOT, temp] if WORK_ROOT.is_dir() else [temp]
    before = {path for root in roots for path in root.glob(f"{SPARK_WORK_PREFIX}*")}

    def work_folders(pattern: str = "") -> list[Path]:
        found = [path for root in roots for path in root.glob(f"{SPARK_WORK_PREFIX}*{pattern}")]
        return [path for path in found if (path.parent if pattern else path) not in before]

    settings = ("--duration", "20", "--rate", "1000", "--accounts", "500")
    command = [sys.executable, "-m", "affinity.cli", "demo", "--no-live", "--out", str(tmp_path / "out"), *settings]
    with (tmp_path / "demo.log").open("wb") as log:
        demo = subprocess.Popen(command, stdout=log, stderr=log, env={**os.environ, "TMPDIR": str(temp)})
        try:
            deadline = time.monotonic() + SPARK_STARTUP_TIMEOUT
            while not work_folders("/checkpoint"):
                assert demo.poll() is None, (tmp_path / "demo.log").read_text()
                assert time.monotonic() < deadline, "the Spark query did not start"
                time.sleep(0.1)
            demo.send_signal(signal.SIGINT)
            demo.wait(DEMO_TEST_TIMEOUT)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    assert not work_folders(), work_folders()
    log = (tmp_path / "demo.log").read_text()
    assert demo.returncode == 130, log
    assert "Traceback" not in log, log
    assert (tmp_path / "out" / "report.json").exists(), "no partial report"
