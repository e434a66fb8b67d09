"""PtP addresses across network-namespace hosts (``tests/cluster_ptp_hosts.py``): alice at
avalon sends to ``/node/heron/client/joe`` before and after joe logs in at heron; carol at bilbo
(a slave of avalon) sends to joe through avalon; an address of an unknown node is refused."""

from __future__ import annotations

from pathlib import Path

from cluster_netns import run_hosts

SCRIPT = Path(__file__).parent / "cluster_ptp_hosts.py"


def test_ptp_across_hosts_arrives_once_in_order_and_an_unknown_node_is_refused(tmp_path: Path) -> None:
    result = run_hosts(tmp_path, SCRIPT)
    assert result["from_alice"] == [f"a{i}" for i in range(150)], "queued before the login, then at once: in order"
    assert result["from_carol"] == [f"c{i}" for i in range(50)], "bilbo -> avalon -> heron, in order"
    assert result["received"] == 200, "each message once"
    assert result["refusals"] == [
        [
            "/node/frodo/client/joe",
            "node 'frodo' is not a node of this cluster (nodes: heron, golan, avalon, bilbo)",
        ]
    ]
