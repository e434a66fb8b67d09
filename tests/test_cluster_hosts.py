"""The xmlBlaster cluster picture as router processes on separate network-namespace hosts
(``tests/cluster_hosts.py``): heron master of RUGBY_NEWS, golan master of STOCK_EXCHANGE, avalon
a slave of both, bilbo a slave of avalon (stratum 2). A subscriber at bilbo gets the image and
every update in order through two levels; golan's, avalon's and bilbo's node info are followed
at bilbo with the right roles, strata and connection states; frodo, a node golan does not
configure, is refused ``not-allowed`` across hosts and ``affinity router status`` says so."""

from __future__ import annotations

from pathlib import Path

from affinity.subjects import Flags
from cluster_netns import run_hosts

SCRIPT = Path(__file__).parent / "cluster_hosts.py"


def test_the_xmlblaster_picture_across_hosts(tmp_path: Path) -> None:
    result = run_hosts(tmp_path, SCRIPT)
    # The stratum-2 cascade: golan asked once, bilbo gets the image and every update in order, once.
    assert result["requests"] == ["/STOCK/IBM"]
    assert result["images"] == ["image-0"]
    assert result["updates"] == [f"u{i}" for i in range(200)]
    info = result["info"]
    assert info["golan"]["domains"] == [["RUGBY_NEWS", "slave", 1, "heron"], ["STOCK_EXCHANGE", "master", 0, None]]
    assert info["avalon"]["domains"] == [["RUGBY_NEWS", "slave", 1, "heron"], ["STOCK_EXCHANGE", "slave", 1, "golan"]]
    assert info["bilbo"]["domains"] == [["RUGBY_NEWS", "slave", 2, "avalon"], ["STOCK_EXCHANGE", "slave", 2, "avalon"]]
    assert info["bilbo"]["connections"] == {"avalon": "logged-in"}
    assert info["avalon"]["connections"] == {"golan": "logged-in"}
    assert info["golan"]["load"]["subjects"] >= 1 and info["golan"]["load"]["subscribers"] >= 1
    # frodo is refused by golan across hosts; its subscriber gets NODATA unavailable.
    flags, _ = result["frodo_answer"]
    assert flags & Flags.NODATA_UNAVAILABLE, result["frodo_answer"]
    code, out, err = result["frodo_status"]
    assert code == 0, err
    assert "connection golan: not-allowed" in out, out
    assert "domain STOCK_EXCHANGE: slave of golan, stratum 1" in out, out
    assert result["golan_not_allowed"] >= 1
