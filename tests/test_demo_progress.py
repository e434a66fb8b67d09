"""The demo's plain progress line (pipes, CI logs): its rate, what "generated" means, the owner of every queue."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("rich")

from affinity.demo import protocol
from affinity.demo.children import ConsumerState, GeneratorState
from affinity.demo.progress import Display
from affinity.demo.settings import DemoSettings
from affinity.demo.validation import LiveStats


def stats(received: int) -> LiveStats:
    return LiveStats(received, {0: received // 2, 1: received - received // 2}, {}, [], 0, 0, 0, 0.0)


def consumers() -> dict[int, ConsumerState]:
    first, second, killed = ConsumerState(0, 0, 0.0), ConsumerState(1, 1, 0.0), ConsumerState(2, 2, 0.0)
    first.status = protocol.ConsumerStatus(0, [0, 2], 10)
    second.status = protocol.ConsumerStatus(1, [1], 10)
    killed.status = protocol.ConsumerStatus(2, [3], 10)
    killed.killed_at = 1.0
    return {0: first, 1: second, 2: killed}


@pytest.mark.parametrize(("spark", "label"), [(True, "committed by Spark"), (False, "published")])
def test_the_plain_line_rates_what_was_validated_since_the_last_line_and_names_every_owner(
    tmp_path: Path, spark: bool, label: str
) -> None:
    display = Display(DemoSettings.create(out=tmp_path, spark=spark, consumers=3), None)
    generator = GeneratorState(protocol.GeneratorProgress(0, 15_000, False))
    display.plain_line(0.0, consumers(), generator, stats(0))
    # Spark validates a batch's rows before it commits: more validated than committed is normal.
    line = display.plain_line(5.0, consumers(), generator, stats(21_000))
    assert f"{label} 15,000 validated 21,000 (4,200/s)" in line
    assert "owners [q0=c0 q1=c1 q2=c0]" in line  # the killed consumer's claim is not shown
