"""The cluster blocks of a router configuration: xmlBlaster's pictures parse, strata follow the
upstream chains, and every wrong reference is a file:line:column error (a loop of upstream
references is refused before anything runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from affinity.config.cluster import DEFAULT_PTP_QUEUE
from affinity.config.faucet import analyse_router_text

PICTURE = """\
add-cluster
    cache-expiry 90s
    forward-queue 8M
end-cluster
add-cluster-node
    node-id heron
    address aeron:udp?endpoint=10.9.0.2:40500
    master-of RUGBY_NEWS
    backup-node avalon
end-cluster-node
add-cluster-node
    node-id golan
    address aeron:udp?endpoint=10.9.0.3:40500
    master-of STOCK_EXCHANGE     # repeatable; a node may be master of none
    backup-node avalon
    backup-node heron
end-cluster-node
add-cluster-node
    node-id avalon
    address aeron:udp?endpoint=10.9.0.4:40500
end-cluster-node
add-cluster-node
    node-id bilbo
    address aeron:udp?endpoint=10.9.0.5:40500
    upstream STOCK_EXCHANGE avalon
    upstream RUGBY_NEWS avalon
    accept-default false
end-cluster-node
add-domain
    name STOCK_EXCHANGE
    include-pattern '^/STOCK/'
end-domain
add-domain
    name RUGBY_NEWS
    include-pattern '^/RUGBY/'
    include-pattern '^/SPORT/rugby/'
end-domain
"""


def errors(text: str) -> list[str]:
    return [str(d) for d in analyse_router_text(text, "cluster.conf").errors]


def test_the_xmlblaster_picture_parses_with_strata_parents_and_settings() -> None:
    analysis = analyse_router_text(PICTURE, "cluster.conf")
    assert analysis.errors == ()
    cluster = analysis.config.cluster
    assert cluster is not None
    assert [n.node_id for n in cluster.nodes] == ["heron", "golan", "avalon", "bilbo"]
    assert cluster.masters("STOCK_EXCHANGE") == ("golan",)
    strata = {node: cluster.stratum(node, "STOCK_EXCHANGE") for node in ("golan", "avalon", "bilbo", "heron")}
    assert strata == {"golan": 0, "avalon": 1, "bilbo": 2, "heron": 1}
    assert cluster.parent("bilbo", "STOCK_EXCHANGE") == "avalon"
    assert cluster.parent("avalon", "STOCK_EXCHANGE") == "golan"
    assert cluster.parent("golan", "STOCK_EXCHANGE") is None
    golan = cluster.node("golan")
    assert golan is not None and golan.backup_nodes == ("avalon", "heron")
    bilbo = cluster.node("bilbo")
    assert bilbo is not None and not bilbo.accept_default and not bilbo.accept_other_default
    rugby = cluster.domains[1]
    assert rugby.include_patterns == ("^/RUGBY/", "^/SPORT/rugby/")
    assert cluster.settings.cache_expiry == 90.0
    assert cluster.settings.forward_queue == 8 << 20
    assert cluster.settings.ptp_queue == DEFAULT_PTP_QUEUE
    assert cluster.settings.load_balancer == "round-robin"
    # The data-service parser never saw the cluster blocks.
    assert analysis.config.routing.data_services == ()


def test_an_upstream_loop_is_refused_where_it_closes() -> None:
    text = PICTURE.replace("    node-id avalon\n", "    node-id avalon\n    upstream STOCK_EXCHANGE bilbo\n")
    found = errors(text)
    assert any("upstream loop for STOCK_EXCHANGE: bilbo -> avalon -> bilbo" in e for e in found), found
    assert all(e.startswith("cluster.conf:") for e in found)


def test_wrong_references_are_errors_at_their_line_and_column() -> None:
    text = (
        PICTURE.replace("master-of RUGBY_NEWS", "master-of RUGBY")
        .replace("node-id avalon", "node-id golan")
        .replace("backup-node heron", "backup-node nobody")
        .replace("accept-default false", "accept-default maybe")
    )
    found = errors(text)
    assert "cluster.conf:8:15: error: master-of 'RUGBY': no add-domain names it" in found, found
    assert "cluster.conf:18:1: error: node-id golan defined twice" in found, found
    assert "cluster.conf:16:17: error: backup-node 'nobody': no such cluster node" in found, found
    assert "cluster.conf:27:20: error: accept-default 'maybe': must be true or false" in found, found
    # bilbo's upstream avalon now names no node (avalon became a second golan).
    assert any("upstream STOCK_EXCHANGE 'avalon': no such cluster node" in e for e in found), found


def test_hostile_values_are_named() -> None:
    cases = {
        "    address aeron:udp?endpoint=10.9.0.5:40500\n": "    address http://bilbo\n",
        "    forward-queue 8M\n": "    forward-queue 8X\n",
        "    cache-expiry 90s\n": "    cache-expiry 0s\n",
        "    node-id bilbo\n": "    node-id 'bil bo'\n",
        "    include-pattern '^/STOCK/'\n": "    include-pattern '('\n",
    }
    expected = [
        "expected an Aeron channel",
        "expected a number of bytes",
        "cache-expiry must be more than 0",
        "1..64 letters",
        "include-pattern '('",
    ]
    for (old, new), message in zip(cases.items(), expected, strict=True):
        found = errors(PICTURE.replace(old, new, 1))
        assert any(message in e for e in found), (message, found)
    settings = "    forward-queue 8M\n    load-balancer no-such-balancer\n    master-mapper xpath\n"
    found = errors(PICTURE.replace("    forward-queue 8M\n", settings))
    assert any("load-balancer 'no-such-balancer'" in e for e in found), found
    assert any("master-mapper 'xpath': no plugin named 'xpath'" in e for e in found), found
    valid = settings.replace("no-such-balancer", "least-assigned").replace("xpath", "domain")
    assert errors(PICTURE.replace("    forward-queue 8M\n", valid)) == []
    assert any("without end-cluster-node" in e for e in errors("add-cluster-node\n    node-id x\n"))
    assert any("upstream needs 2 values" in e for e in errors(PICTURE.replace("RUGBY_NEWS avalon", "")))


def test_a_domain_without_a_master_is_a_warning_only() -> None:
    text = PICTURE + "add-domain\n    name RADAR\n    include-pattern '^/RADAR/'\nend-domain\n"
    analysis = analyse_router_text(text, "cluster.conf")
    assert analysis.errors == ()
    assert any("domain RADAR has no master" in str(d) for d in analysis.diagnostics)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affinity.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_affinity_check_and_router_node_checks(tmp_path: Path) -> None:
    good = tmp_path / "cluster.conf"
    good.write_text(PICTURE)
    checked = run_cli("check", str(good))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "4 cluster nodes, 2 domains" in checked.stdout
    looped = tmp_path / "loop.conf"
    looped.write_text(PICTURE.replace("    node-id avalon\n", "    node-id avalon\n    upstream RUGBY_NEWS bilbo\n"))
    checked = run_cli("check", str(looped))
    assert checked.returncode == 1
    assert f"{looped}:20:25: error: upstream loop for RUGBY_NEWS: avalon -> bilbo -> avalon" in checked.stdout
    # An unknown --node, or none with cluster nodes configured: refused before anything starts.
    for extra, message in (
        (["--node", "frodo"], "--node frodo: not a node-id"),
        ([], "--node NODE_ID says which one"),
    ):
        started = run_cli("router", "--config", str(good), "--listen", "aeron:udp?endpoint=127.0.0.1:9", *extra)
        assert started.returncode == 1
        assert message in started.stderr, started.stderr
