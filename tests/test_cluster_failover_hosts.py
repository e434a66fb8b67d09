"""Mirrored masters and failover across network-namespace hosts
(``tests/cluster_failover_hosts.py``): subscriptions at a slave alternate between two masters of
RUGBY_NEWS; a subscriber with ``routers=[avalon, bilbo]`` moves to bilbo when avalon is
SIGKILLed and keeps receiving; golan SIGKILLed, heron takes STOCK_EXCHANGE over and the
subscriber follows: after every image exactly the next updates, once, in order; hobbit, one of
the two masters of RUGBY_NEWS, SIGKILLed: the subscriptions it served move to heron."""

from __future__ import annotations

import itertools
from pathlib import Path

from affinity.subjects import Flags
from cluster_netns import run_hosts

SCRIPT = Path(__file__).parent / "cluster_failover_hosts.py"


def test_mirrored_masters_alternate_and_subscribers_survive_a_killed_node_and_a_killed_master(tmp_path: Path) -> None:
    result = run_hosts(tmp_path, SCRIPT)
    masters = [image.split(":", 1)[0] for image in result["rugby_images"]]
    assert all(a != b for a, b in itertools.pairwise(masters)), f"round-robin alternates: {masters}"
    assert sorted(masters) == ["heron", "heron", "hobbit", "hobbit"], masters
    for master in ("heron", "hobbit"):
        expected = [
            s
            for s, m in zip(
                ["/RUGBY/match-0", "/RUGBY/match-1", "/RUGBY/match-2", "/RUGBY/match-3"], masters, strict=True
            )
            if m == master
        ]
        assert result["rugby_requests"][master] == expected, f"{master}'s feed asked once per subject it serves"

    assert result["erin_router_after_avalon"].endswith("10.9.0.5:40500"), "erin moved to bilbo"
    records = [(Flags(f), p) for f, p in result["erin"]]
    images = [p for f, p in records if f & Flags.IMAGE]
    assert len(images) == 3, f"golan's image, then one after each move: {images}"
    # Each move: a STATUS before its image.
    image_at = [i for i, (f, _) in enumerate(records) if f & Flags.IMAGE]
    for start, end in itertools.pairwise(image_at):
        assert any(f & Flags.STATUS for f, _ in records[start:end]), "a STATUS before the next image"
    # After each image the updates run on without a gap or a repeat. A router answers a new
    # subscription of a subject it serves already from its cached image, the feed's last IMAGE,
    # not a merge of the updates since (docs/cluster.md, "Cache expiry"): golan may answer
    # bilbo's link after avalon's death with the feed's first image, so only the first image and
    # the last (heron's feed's own, fresh after the takeover) say exactly which update is next.
    segments: list[tuple[int, list[int]]] = []
    for flags, payload in records:
        if flags & Flags.IMAGE:
            segments.append((int(payload.split(":")[1]), []))
        elif flags & Flags.UPDATE:
            assert segments, "an update before any image"
            segments[-1][1].append(int(payload))
    for image, updates in segments:
        assert updates, f"updates after image:{image}"
        assert updates == list(range(updates[0], updates[0] + len(updates))), f"a gap or a repeat: {updates}"
        assert updates[0] > image, f"updates older than image:{image}"
    assert segments[0][1][0] == segments[0][0] + 1 and segments[-1][1][0] == segments[-1][0] + 1, segments
    seen = [u for _, updates in segments for u in updates]
    assert seen[-1] == result["last"] and len(seen) == len(set(seen)), "every update after each image, once"
    assert result["stock_requests"]["heron"] == ["/STOCK/IBM"], "heron's own feed serves it after the takeover"
    # hobbit, a mirrored master, SIGKILLed: each subject it served at avalon moved to heron, the
    # live master: a STATUS before heron's fresh image, and heron's feed asked for it.
    doomed = result["hobbit_subjects"]
    served = sorted(image.split(":", 1)[1] for image in result["rugby_images"] if image.startswith("hobbit:"))
    assert sorted(doomed) == served and doomed, (doomed, result["rugby_images"])
    after = [(s, Flags(f), p) for s, f, p in result["carol_after_hobbit"]]
    for subject in doomed:
        mine = [(f, p) for s, f, p in after if s == subject]
        images = [p for f, p in mine if f & Flags.IMAGE]
        assert images == [f"heron:{subject}"], f"{subject}: one fresh image from heron, not {images}"
        first_image = next(i for i, (f, _) in enumerate(mine) if f & Flags.IMAGE)
        assert any(f & Flags.STATUS for f, _ in mine[:first_image]), f"{subject}: a STATUS before the image: {mine}"
        assert subject in result["rugby_requests_after_hobbit"]["heron"], f"heron's feed asked for {subject}"
    assert not [s for s, _, _ in after if s not in doomed], "the subjects heron served did not move"
    moves = f"avalon killed: moved {result['avalon_move_s']} s later; golan killed: {result['golan_move_s']} s"
    moves += f"; hobbit killed: {result['hobbit_move_s']} s"
    print(f"cluster hosts failover ({result['elapsed']} s in all): {moves}")
