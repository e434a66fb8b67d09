"""A restarted master's deferral, a publish naming its domain and a reload giving a domain its
first master, across network-namespace hosts (``tests/cluster_defer_hosts.py``): the publish
naming PINNED reaches heron's subscriber only; golan SIGKILLed and started again defers
STOCK_EXCHANGE to heron, its returning subscriber is served through heron, and after every
image each subscriber gets exactly the next updates, once, in order; publishes for RADAR queued
at avalon while it had no master reach heron's subscriber in order once a reload makes heron
its master."""

from __future__ import annotations

from pathlib import Path

from affinity.subjects import Flags
from cluster_defer_hosts import NEWS, RADAR
from cluster_failover_hosts import SUBJECT
from cluster_netns import run_hosts

SCRIPT = Path(__file__).parent / "cluster_defer_hosts.py"


def feed_updates(records: list[tuple[str, int, str]], name: str) -> list[int]:
    """Every image of the feed's subject is followed by exactly the next updates, in order;
    the update numbers received."""
    due: int | None = None
    seen = []
    for subject, flags, payload in records:
        if subject != SUBJECT:
            continue
        if flags & Flags.IMAGE:
            due = int(payload.split(":")[1]) + 1
        elif flags & Flags.UPDATE:
            assert due is not None, f"{name}: an update before any image: {records}"
            assert int(payload) == due, f"{name}: update {payload} where {due} was due: {records}"
            seen.append(due)
            due += 1
    return seen


def test_a_restarted_master_defers_a_named_domain_is_honoured_and_a_first_master_gets_the_queue(
    tmp_path: Path,
) -> None:
    result = run_hosts(tmp_path, SCRIPT)
    got = result["got"]

    # The publish naming PINNED went to heron only; the plain one through golan to everyone.
    before = result["news_before"]
    assert sorted(before["harry"]) == ["pinned-1", "plain-1"], before
    assert before["alice"] == ["plain-1"] and before["gus"] == ["plain-1"], before

    # golan restarted deferred: its own feed was never asked again, it logged no takeover.
    assert result["golan_feed_asked_after_restart"] == [], result["golan_feed_asked_after_restart"]
    assert result["golan_served_after_restart"] == [], result["golan_served_after_restart"]
    last, sent = result["last"], result["sent"]
    for name in ("alice", "harry", "gus"):
        seen = feed_updates(got[name], name)
        assert len(seen) == len(set(seen)) and seen[-len(sent) :] == list(range(last - len(sent) + 1, last + 1)), name
        news = [p for s, f, p in got[name] if s == NEWS and f & Flags.UPDATE]
        assert news[-len(sent) :] == sent and len(news) == len(sent) + len(before[name]), f"{name}: {news}"
    # gus, back at the restarted golan: a STATUS, then the image (through heron), then updates.
    records = [(f, p) for s, f, p in got["gus"] if s == SUBJECT]
    after_first = records[next(i for i, (f, _) in enumerate(records) if f & Flags.IMAGE) + 1 :]
    status_at = next(i for i, (f, _) in enumerate(after_first) if f & Flags.STATUS)
    image_at = next(i for i, (f, _) in enumerate(after_first) if f & Flags.IMAGE)
    assert status_at < image_at, after_first[:5]

    # RADAR: nothing reached rita while it had no master; then every queued publish, in order.
    assert result["rita_before_reload"] == []
    radar = [p for s, f, p in got["rita"] if s == RADAR and f & Flags.UPDATE]
    assert radar == result["queued"], radar
    assert result["forward_refused"] == 0
    print(f"cluster hosts deferral and first master: {result['elapsed']} s in all")
