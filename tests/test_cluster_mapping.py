"""The cluster's ``master-mapper`` plugin (``docs/cluster.md``, "Master mapper"): loaded by name
through the routing policies' plugin mechanism, checked by ``affinity check``, guarded at the
node, and seen end to end with router processes on loopback.

golan and heron are both master of STOCK_EXCHANGE (mirrored: the default mapping alternates the
subjects between them and sends a publish at the slave to both); heron alone is master of
PINNED. A mapper plugin registered as an entry point of a distribution the test makes maps the
``/STOCK/pinned-*`` subjects to PINNED: at avalon every one of them is subscribed at heron, and
a publish of one reaches heron's subscriber only, while the other ``/STOCK/`` subjects still
alternate.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import affinity
import cluster_conf as conf
import pytest
from affinity.cluster_mapping import (
    MAPPER_ENTRY_POINT_GROUP,
    MAX_UNKNOWN_DOMAINS,
    DomainMapper,
    FunctionMapper,
    Mapping,
    MasterMapper,
    load_mapper,
)
from affinity.config.cluster import ClusterConfig
from affinity.config.faucet import analyse_router_text
from affinity.exceptions import PolicyError
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port
from test_cluster_forward import Pollable, listen, pump, settle
from test_cluster_nodes import start_node
from test_subjects_processes import LIVENESS, Inbox, Process

#: The label of the feed at each master of STOCK_EXCHANGE.
STOCK_FEED = "stock-feed"
#: The mapper plugin's module and its entry point name.
PLUGIN_MODULE = "pin_mapper"
PLUGIN_NAME = "pin-to-heron"
PLUGIN = """\
import json
import os


class PinToHeron:
    def map_message(self, subject, domain):
        with open(os.environ["MAPPER_LOG"], "a") as log:
            log.write(json.dumps([subject, domain]) + "\\n")
        if subject == "/STOCK/raise":
            raise RuntimeError("no mapping for this one")
        return "PINNED" if subject.startswith("/STOCK/pinned-") else domain


def by_prefix(subject, domain):
    return "PINNED" if subject.startswith("/STOCK/pinned-") else domain


def not_a_mapper(subject):
    return None
"""


def install_plugin(root: Path) -> Path:
    """Writes the plugin module and a distribution registering it under
    :data:`MAPPER_ENTRY_POINT_GROUP`; returns the directory to put on the path."""
    plugins = root / "plugins"
    plugins.mkdir()
    (plugins / f"{PLUGIN_MODULE}.py").write_text(PLUGIN)
    info = plugins / f"{PLUGIN_MODULE}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_MODULE}\nVersion: 1.0\n")
    entry = f"[{MAPPER_ENTRY_POINT_GROUP}]\n{PLUGIN_NAME} = {PLUGIN_MODULE}:PinToHeron\n"
    (info / "entry_points.txt").write_text(entry)
    return plugins


def mapping_conf(ports: dict[str, int], mapper: str | None) -> str:
    return (
        conf.settings(master_mapper=mapper)
        + conf.data_service("stock", "^/STOCK/", STOCK_FEED)
        + conf.node("golan", conf.loopback(ports["golan"]), "master-of STOCK_EXCHANGE")
        + conf.node("heron", conf.loopback(ports["heron"]), "master-of STOCK_EXCHANGE", "master-of PINNED")
        + conf.node("avalon", conf.loopback(ports["avalon"]))
        + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
        + conf.domain("PINNED", "^/PINNED/")
    )


def cluster_of(text: str) -> ClusterConfig:
    analysis = analyse_router_text(text, "cluster.conf")
    assert not analysis.errors, [str(d) for d in analysis.diagnostics]
    assert analysis.config.cluster is not None
    return analysis.config.cluster


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The plugin installed, importable here and in the processes the test starts."""
    plugins = install_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    monkeypatch.setenv("MAPPER_LOG", str(tmp_path / "mapper.log"))
    return plugins


def test_a_mapper_loads_by_entry_point_path_or_function_and_the_default_is_the_pattern_domain(
    plugin_path: Path,
) -> None:
    assert isinstance(load_mapper("domain"), DomainMapper)
    for spec in (PLUGIN_NAME, f"{PLUGIN_MODULE}:PinToHeron"):
        mapper = load_mapper(spec)
        assert isinstance(mapper, MasterMapper)
        assert mapper.map_message("/STOCK/pinned-1", "STOCK_EXCHANGE") == "PINNED"
        assert mapper.map_message("/STOCK/IBM", "STOCK_EXCHANGE") == "STOCK_EXCHANGE"
    function = load_mapper(f"{PLUGIN_MODULE}:by_prefix")
    assert isinstance(function, FunctionMapper)
    assert function.map_message("/STOCK/pinned-2", "STOCK_EXCHANGE") == "PINNED"
    with pytest.raises(PolicyError, match=f"no plugin named 'nope' in entry point group '{MAPPER_ENTRY_POINT_GROUP}'"):
        load_mapper("nope")
    with pytest.raises(PolicyError, match="module 'no_such_module' not found"):
        load_mapper("no_such_module:Mapper")
    with pytest.raises(PolicyError, match=f"master mapper '{PLUGIN_MODULE}:not_a_mapper' is a function"):
        load_mapper(f"{PLUGIN_MODULE}:not_a_mapper")


def test_a_mapping_the_node_cannot_act_on_is_logged_with_the_subject_and_handled_as_the_default(
    plugin_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ports = {"golan": 1, "heron": 2, "avalon": 3}
    cluster = cluster_of(mapping_conf(ports, PLUGIN_NAME))
    at_avalon = Mapping(cluster, "avalon")
    assert at_avalon.domain_for("/STOCK/pinned-1", "STOCK_EXCHANGE") == "PINNED"
    assert at_avalon.domain_for("/STOCK/IBM", "STOCK_EXCHANGE") == "STOCK_EXCHANGE"
    with caplog.at_level(logging.ERROR, logger="affinity.cluster"):
        assert at_avalon.domain_for("/STOCK/raise", "STOCK_EXCHANGE") == "STOCK_EXCHANGE"
        assert at_avalon.domain_for("/STOCK/raise", "STOCK_EXCHANGE") == "STOCK_EXCHANGE"
    raised = [r.getMessage() for r in caplog.records if "/STOCK/raise" in r.getMessage()]
    assert raised == [
        f"Cluster node avalon: master-mapper {PLUGIN_NAME} on /STOCK/raise: it raised RuntimeError: "
        "no mapping for this one; handled as domain STOCK_EXCHANGE (the default mapping)"
    ], "logged once per subject, with the subject and the reason"
    assert at_avalon.failures == 2

    answers: dict[str, object] = {"/a": None, "/b": 7, "/c": "PINNED", "/d": "NO_SUCH_DOMAIN"}
    at_heron = Mapping(cluster, "heron", FunctionMapper(lambda subject, domain: answers[subject]))
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="affinity.cluster"):
        for subject in ("/a", "/b", "/c"):
            assert at_heron.domain_for(subject, "STOCK_EXCHANGE") == "STOCK_EXCHANGE", subject
    reasons = [r.getMessage().split(": ", 2)[2] for r in caplog.records]
    assert reasons == [
        "it answered no domain, but the router sent the subject here; handled as domain STOCK_EXCHANGE "
        "(the default mapping)",
        "it answered 7, not a domain name; handled as domain STOCK_EXCHANGE (the default mapping)",
        "it answered PINNED, which this node serves from its own sources only; handled as domain "
        "STOCK_EXCHANGE (the default mapping)",
    ]
    # A name no add-domain defines: its master is unknown (publishes queue under it).
    assert at_heron.domain_for("/d", "STOCK_EXCHANGE") == "NO_SUCH_DOMAIN"
    # ... for a bounded number of such names: each would get a forward queue of its own.
    names = Mapping(cluster, "avalon", FunctionMapper(lambda subject, domain: subject))
    for index in range(MAX_UNKNOWN_DOMAINS):
        assert names.domain_for(f"D{index}", "STOCK_EXCHANGE") == f"D{index}"
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="affinity.cluster"):
        assert names.domain_for("ONE_MORE", "STOCK_EXCHANGE") == "STOCK_EXCHANGE"
        assert names.domain_for("D0", "STOCK_EXCHANGE") == "D0", "a name already answered still is"
    assert [r.getMessage().split(": ", 2)[2] for r in caplog.records] == [
        f"it answered 'ONE_MORE', past {MAX_UNKNOWN_DOMAINS} domains no add-domain defines; handled as domain "
        "STOCK_EXCHANGE (the default mapping)"
    ]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affinity.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_affinity_check_refuses_an_unknown_mapper_at_its_place_and_accepts_a_registered_one(
    plugin_path: Path, tmp_path: Path
) -> None:
    ports = {"golan": 40501, "heron": 40502, "avalon": 40503}
    unknown = tmp_path / "unknown.conf"
    unknown.write_text(mapping_conf(ports, "no-such-mapper"))
    checked = run_cli("check", str(unknown))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    # add-cluster is the first block: master-mapper on line 2, its value at column 19.
    expected = (
        f"{unknown}:2:19: error: master-mapper 'no-such-mapper': no plugin named 'no-such-mapper' in entry "
        f"point group '{MAPPER_ENTRY_POINT_GROUP}' (plugins: {PLUGIN_NAME})"
    )
    assert expected in checked.stdout, checked.stdout
    registered = tmp_path / "registered.conf"
    registered.write_text(mapping_conf(ports, PLUGIN_NAME))
    checked = run_cli("check", str(registered))
    assert checked.returncode == 0, checked.stdout + checked.stderr


class Feed:
    """A master's stock feed: answers each request with the image ``<master>:<subject>``."""

    def __init__(self, client: affinity.Client, master: str, router: str) -> None:
        self.master = master
        self.source = Source(client, router, STOCK_FEED, liveness_timeout=LIVENESS)
        self.requests: list[str] = []
        self.source.on_request(self._request)

    def _request(self, subject: str) -> None:
        self.requests.append(subject)
        self.source.publish(subject, f"{self.master}:{subject}".encode(), image=True)


def test_a_mapper_plugin_sends_subjects_to_another_domains_master_end_to_end(
    client: affinity.Client, processes: list[Process], tmp_path: Path, plugin_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "heron", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(mapping_conf(ports, PLUGIN_NAME))
    listens = {node: listen(port) for node, port in ports.items()}
    for node in ("golan", "heron", "avalon"):
        processes.append(start_node(config, node, listens[node]))
    feeds = {master: Feed(client, master, listens[master]) for master in ("golan", "heron")}
    alice_sub = Subscriber(client, listens["avalon"], name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(alice_sub)
    members: list[Pollable] = [*(lambda f=f: f.source.poll(64) for f in feeds.values()), lambda: alice_sub.poll(256)]

    def asked(subject: str) -> list[str]:
        return [master for master, feed in feeds.items() if subject in feed.requests]

    pinned = [f"/STOCK/pinned-{i}" for i in range(4)]
    free = [f"/STOCK/free-{i}" for i in range(4)]
    for subject in [s for pair in zip(pinned, free, strict=True) for s in pair]:
        alice_sub.subscribe(subject, alice)
        pump(
            members,
            lambda subject=subject: any(s == subject and f & Flags.IMAGE for s, f, _ in alice.items),
            f"the image of {subject} at avalon",
        )
        image = next(p for s, f, p in alice.items if s == subject and f & Flags.IMAGE)
        assert len(asked(subject)) == 1 and image == f"{asked(subject)[0]}:{subject}", (subject, asked(subject))
    assert [asked(s)[0] for s in pinned] == ["heron"] * len(pinned), "the mapper pins them to PINNED's master"
    assert sorted(asked(s)[0] for s in free) == ["golan", "golan", "heron", "heron"], "the others still alternate"
    calls = [json.loads(line) for line in (tmp_path / "mapper.log").read_text().splitlines()]
    for subject in pinned + free:
        assert [subject, "STOCK_EXCHANGE"] in calls, f"the plugin was asked for {subject} with its pattern domain"

    # A publish at avalon of a pinned subject goes to PINNED's master only (the default would
    # send it to both masters of STOCK_EXCHANGE); a free one to both, and so does one the
    # plugin raises on (handled as the default, logged with the subject: nothing lost).
    watchers = {}
    for master in ("golan", "heron"):
        subscriber = Subscriber(client, listens[master], name=f"at-{master}", liveness_timeout=LIVENESS)
        watchers[master] = (subscriber, Inbox(subscriber))
        members.append(lambda subscriber=subscriber: subscriber.poll(256))
    for subject in ("/STOCK/pinned-news", "/STOCK/free-news", "/STOCK/raise"):
        for master, (subscriber, inbox) in watchers.items():
            subscriber.subscribe(subject, inbox)
            pump(
                members,
                lambda subject=subject, inbox=inbox: any(s == subject and f & Flags.IMAGE for s, f, _ in inbox.items),
                f"the image of {subject} at {master}",
            )
    source = Source(client, listens["avalon"], "publisher", liveness_timeout=LIVENESS)
    members.append(lambda: source.poll(64))
    pump(members, lambda: source.router_live, "avalon heard the publisher")
    for subject in ("/STOCK/pinned-news", "/STOCK/free-news", "/STOCK/raise"):
        for i in range(10):
            pump(members, lambda subject=subject, i=i: source.publish(subject, f"u{i}".encode()), f"publish {i}")

    def got(master: str, subject: str) -> list[str]:
        return [p for s, f, p in watchers[master][1].items if s == subject and f & Flags.UPDATE]

    expected = [f"u{i}" for i in range(10)]
    for master in ("golan", "heron"):
        for subject in ("/STOCK/free-news", "/STOCK/raise"):
            pump(
                members,
                lambda master=master, subject=subject: got(master, subject) == expected,
                f"{subject} at {master}",
            )
    pump(members, lambda: got("heron", "/STOCK/pinned-news") == expected, "pinned news at heron")
    settle(members, 0.5)
    assert got("golan", "/STOCK/pinned-news") == [], "a pinned publish does not reach the other master"
    assert got("heron", "/STOCK/pinned-news") == expected, "once each, in order"
    avalon = processes[-1]
    said = f"master-mapper {PLUGIN_NAME} on /STOCK/raise: it raised RuntimeError: no mapping for this one"
    logged = [line for line in avalon.snapshot() if said in line]
    assert len(logged) == 1, "logged once, with the subject"
    assert logged[0].endswith("handled as domain STOCK_EXCHANGE (the default mapping)"), logged
    source.close()
    alice_sub.close()
    for subscriber, _ in watchers.values():
        subscriber.close()
