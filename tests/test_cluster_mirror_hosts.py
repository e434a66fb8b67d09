"""A dead mirrored master across network-namespace hosts (``tests/cluster_mirror_hosts.py``):
past hobbit's forward-queue bound its queue at avalon is dropped while heron takes every
publish (the source never refused); hobbit restarted gets the publishes made after its return;
a source at heron then reaches hobbit's subscriber too (mirrored masters kept in step)."""

from __future__ import annotations

from pathlib import Path

from cluster_netns import run_hosts

SCRIPT = Path(__file__).parent / "cluster_mirror_hosts.py"


def test_a_dead_mirror_does_not_block_the_live_master_across_hosts(tmp_path: Path) -> None:
    result = run_hosts(tmp_path, SCRIPT)
    during = [f"u{i}:" for i in range(100)]
    later = [f"v{i}" for i in range(20)]
    assert result["refused_at"] is None, "no publish refused while heron was live"
    warning, back_pressured, refused, _ = result["status_after_kill"]
    assert (warning, back_pressured, refused) == (False, False, 0), result["status_after_kill"]
    assert [p[: len(e)] for p, e in zip(result["heron_during"], during, strict=True)] == during
    assert [p[: len(e)] for p, e in zip(result["heron"], during + later, strict=True)] == during + later
    assert result["hobbit"] == later, "hobbit: the publishes after its return, once, in order"
    from_heron = [f"w{i}" for i in range(20)]
    assert result["hobbit_from_heron"] == from_heron, "a publish at heron reaches hobbit, once, in order"
    assert result["heron_from_heron"] == from_heron, "and heron's own subscriber, once, in order"
    lines = result["avalon_lines"]
    assert sum("its queue of" in line for line in lines) == 1, lines
    assert sum("reachable again" in line for line in lines) == 1, lines
    print(f"cluster mirror hosts: {result['elapsed']} s")
