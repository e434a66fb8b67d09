"""Publish at a slave across network-namespace hosts (``tests/cluster_forward_hosts.py``): a source
at avalon publishing stock reaches golan and every subscriber (at golan, at avalon, and at bilbo
two levels down); golan SIGKILLed mid-stream: the source is told FORWARD_WARNING and its
publishes queue at avalon; golan restarted: the queue flushes, and every subscriber has every
update in order, once."""

from __future__ import annotations

from pathlib import Path

from cluster_netns import run_hosts

SCRIPT = Path(__file__).parent / "cluster_forward_hosts.py"


def test_publishes_at_a_slave_queue_while_the_master_is_killed_and_flush_in_order_across_hosts(
    tmp_path: Path,
) -> None:
    result = run_hosts(tmp_path, SCRIPT)
    assert result["warning_before"] is False, "nothing queued while golan is up"
    assert result["accepted_during"] is True, "queued at avalon, not back-pressured"
    assert result["warning_status"].startswith("FORWARD_WARNING"), result["warning_status"]
    before = len(result["sent"]) - 50
    assert result["while_down"] == {"gina": before, "alice": before, "bob": before}, "nothing passed golan"
    for name, updates in result["updates"].items():
        assert updates == result["sent"], f"{name}: every update once, in order, across the master's restart"
    for name, images in result["images"].items():
        # The feed's image, the source's, and after the restart the feed's fresh one (golan
        # restarted holds no image), each once.
        assert images == ["feed-0", "image-1", "feed-1"], f"{name}: {images}"
    assert result["forward_refused"] == 0
