"""PtP addresses (``docs/cluster.md``, "PtP addresses"), with router processes on loopback:
heron master of the domain DESK (``^client/``), avalon its slave.

A client at avalon sends to ``/node/heron/client/joe``: avalon forwards it over its PtP link to
heron, which queues it while joe is not logged in and delivers the queue in order when he logs
in, then every later message at once. Past ``ptp-queue`` the sender is told of every message
refused (across the link), and what was accepted arrives in order. An address naming a node the
cluster does not configure is refused with a status naming it; a relative ``client/joe`` routes
like a publish of the domain (avalon forwards it to heron, the master).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import affinity
import cluster_conf as conf
import pytest
from affinity.cluster_info import node_info_subject
from affinity.cluster_ptp import MAX_PTP_MAILBOXES, PTP_REFUSED, PtpClient, parse_ptp_address
from affinity.exceptions import ConfigError
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port
from test_cluster_forward import listen, pump, settle, status_of
from test_cluster_nodes import start_node
from test_subjects_processes import LIVENESS, TIMEOUT, Process

#: Messages sent before joe logs in, and after.
BEFORE, AFTER = 50, 100
#: The bound tests with one use (``ptp-queue 64K``), the size of their messages, how many it holds.
QUEUE, MESSAGE = 64 * 1024, 4096
HELD = QUEUE // MESSAGE


def ptp_conf(heron: int, avalon: int, queue: str | None = None, bilbo: int | None = None) -> str:
    third = "" if bilbo is None else conf.node("bilbo", conf.loopback(bilbo), "upstream DESK avalon")
    return (
        conf.settings(ptp_queue=queue)
        + third
        + conf.node("heron", conf.loopback(heron), "master-of DESK")
        + conf.node("avalon", conf.loopback(avalon))
        + conf.domain("DESK", "^client/")
    )


def start_pair(
    tmp_path: Path, processes: list[Process], queue: str | None = None, *, bilbo: bool = False
) -> tuple[dict[str, int], Path]:
    """heron and avalon (and bilbo, a slave of avalon) as router processes, in that order."""
    ports = {node: free_udp_port() for node in ("heron", "avalon", *(("bilbo",) if bilbo else ()))}
    config = tmp_path / "cluster.conf"
    config.write_text(ptp_conf(ports["heron"], ports["avalon"], queue, ports.get("bilbo")))
    for node, port in ports.items():
        processes.append(start_node(config, node, listen(port)))
    return ports, config


def client_at(client: affinity.Client, port: int, login: str, node: str) -> PtpClient:
    return PtpClient(client, listen(port), login=login, node=node, liveness_timeout=LIVENESS)


class Received:
    """What a PtP client received, in order: (address, payload)."""

    def __init__(self, ptp: PtpClient) -> None:
        self.items: list[tuple[str, str]] = []
        ptp.on_message(lambda address, payload: self.items.append((address, payload.decode())))

    def at(self, address: str) -> list[str]:
        return [payload for to, payload in self.items if to == address]

    def has(self, address: str, count: int) -> Callable[[], bool]:
        return lambda: len(self.at(address)) >= count


def sent_by(sender: PtpClient | Source, to: str, payload: bytes) -> None:
    """Sends until it is accepted: False means "not now" (the router's liveness not heard lately,
    on a loaded machine), never a refusal; an assertion error after TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    while not (sender.send(to, payload) if isinstance(sender, PtpClient) else sender.publish(to, payload)):
        assert time.monotonic() < deadline, f"a message to {to}: not accepted within {TIMEOUT} s"
        sender.poll(16)
        time.sleep(0.005)


def counted(process: Process) -> dict[str, int]:
    """A node's PtP counters, logged when it stops."""
    lines = [line for line in process.snapshot() if "PtP messages:" in line]
    assert lines, process.snapshot()[-10:]
    parts = lines[-1].split("PtP messages: ")[1].split(", ")
    return {name: int(value) for name, value in (part.rsplit(" ", 1) for part in parts)}


def test_addresses_parse_or_say_what_is_wrong() -> None:
    assert parse_ptp_address("/node/heron/client/joe").node == "heron"
    assert parse_ptp_address("client/joe").node is None
    assert str(parse_ptp_address("/node/heron/client/joe")) == "/node/heron/client/joe"
    for bad, says in (
        ("/node/heron/joe", "expected /node/<node-id>/client/<login>"),
        ("/node//client/joe", "node '' is not"),
        ("client/jo e", "login 'jo e' is not"),
        ("client/", "login '' is not"),
        ("joe", "expected"),
    ):
        with pytest.raises(ConfigError, match=says):
            parse_ptp_address(bad)


def test_ptp_to_a_client_at_a_neighbour_is_queued_until_login_then_delivered_once_in_order(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports, config = start_pair(tmp_path, processes)
    heron = processes[-2]
    alice = client_at(client, ports["avalon"], "alice", "avalon")
    joe_address = "/node/heron/client/joe"
    pump([alice.poll], lambda: alice.ready and alice.logged_in, "alice logged in at avalon")

    # heron's node info shows its PtP queue per client not logged in.
    watcher = Subscriber(client, listen(ports["heron"]), name="watcher", liveness_timeout=LIVENESS)
    infos: list[dict[str, Any]] = []
    watcher.subscribe(node_info_subject("heron"), lambda _s, _f, payload: infos.append(json.loads(payload)))

    # joe is not logged in: heron queues what avalon forwards for him.
    sent = [f"m{i}" for i in range(BEFORE)]
    for payload in sent:
        sent_by(alice, joe_address, payload.encode())
    settle([alice.poll], 1.0)
    queued = {"messages": BEFORE, "bytes": sum(len(payload) for payload in sent)}
    pump(
        [alice.poll, lambda: watcher.poll(64)],
        lambda: bool(infos) and infos[-1]["ptp_queues"].get(joe_address) == queued,
        "heron's node info showing joe's queue",
    )
    assert infos[-1]["ptp_queued"] == {"clients": 1, **queued}
    shown = status_of(config, "heron", [alice.poll, lambda: watcher.poll(64)])
    assert f"ptp queues: 1 clients, {BEFORE} messages, {queued['bytes']} bytes" in shown, shown
    assert f"    {joe_address}: {BEFORE} messages / {queued['bytes']} bytes" in shown, shown

    joe = client_at(client, ports["heron"], "joe", "heron")
    got = Received(joe)
    members = [alice.poll, joe.poll, lambda: watcher.poll(64)]
    pump(members, got.has(joe_address, BEFORE), "the queued messages at joe's login")
    assert joe.logged_in
    pump(members, lambda: infos[-1]["ptp_queued"]["clients"] == 0, "heron's node info: joe's queue gone")
    assert infos[-1]["ptp_queues"] == {} and infos[-1]["ptp_queued"] == {"clients": 0, "messages": 0, "bytes": 0}
    later = [f"m{i}" for i in range(BEFORE, BEFORE + AFTER)]
    for payload in later:
        sent_by(alice, joe_address, payload.encode())
        alice.poll(16)
    sent += later
    pump(members, got.has(joe_address, len(sent)), "every message")
    settle(members, 0.3)
    assert got.at(joe_address) == sent, "every message once, in order, the queued ones first"
    assert alice.refusals == []

    # An unknown node in the address: a clear refusal, told to the sender.
    sent_by(alice, "/node/frodo/client/joe", b"lost?")
    pump(members, lambda: bool(alice.refusals), "the refusal of /node/frodo")
    refusal = alice.refusals[0]
    assert refusal.address == "/node/frodo/client/joe"
    assert "node 'frodo' is not a node of this cluster (nodes: heron, avalon)" in refusal.reason
    # A malformed address is refused before it is sent; a raw publish of one is refused by the node.
    with pytest.raises(ConfigError, match="expected /node/<node-id>/client/<login>"):
        alice.send("/node/heron/joe", b"x")
    raw = Source(client, listen(ports["avalon"]), "raw-publisher", liveness_timeout=LIVENESS)
    statuses: list[tuple[str, Flags, str]] = []
    raw.on_ptp_status(lambda address, flags, text: statuses.append((address, flags, text)))
    pump([raw.poll], lambda: raw.router_live, "avalon heard the raw publisher")
    sent_by(raw, "/node/heron/joe", b"x")
    pump([raw.poll], lambda: bool(statuses), "the refusal of a malformed address")
    address, flags, text = statuses[0]
    assert address == "/node/heron/joe" and flags & Flags.REFUSED
    assert text.startswith(f"{PTP_REFUSED} #1: PtP address '/node/heron/joe': expected"), text
    assert not raw.status().back_pressured, "a PtP refusal does not back-pressure the source"
    assert len(got.items) == len(sent), "nothing else reached joe"

    for closing in (raw, alice, joe, watcher):
        closing.close()
    heron.stop()
    figures = counted(heron)
    assert figures["queued"] == figures["flushed"] == BEFORE, figures
    assert figures["delivered"] == AFTER and figures["refused"] == 0, figures


def test_past_the_ptp_queue_the_sender_is_told_of_each_refusal_and_nothing_is_dropped(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports, _ = start_pair(tmp_path, processes, queue=f"{QUEUE // 1024}K")
    alice = client_at(client, ports["avalon"], "alice", "avalon")
    joe_address = "/node/heron/client/joe"
    pump([alice.poll], lambda: alice.ready and alice.logged_in, "alice logged in at avalon")
    # avalon's link to heron is live once kim, logged in at heron, has a message from alice
    # (before that, avalon keeps messages for heron within its own ptp-queue).
    kim = client_at(client, ports["heron"], "kim", "heron")
    kim_got = Received(kim)
    sent_by(alice, kim.address, b"hello")
    pump([alice.poll, kim.poll], kim_got.has(kim.address, 1), "avalon's link to heron")
    # 4 KiB messages: 64 KiB hold 16 (the rest are refused, each one told).
    total = 40
    payloads = [f"m{i}:".encode() + bytes(MESSAGE - 8) for i in range(total)]
    for payload in payloads:
        sent_by(alice, joe_address, payload)
        settle([alice.poll], 0.01)
    pump([alice.poll], lambda: len(alice.refusals) >= total - HELD, "the refusals")
    settle([alice.poll], 0.5)
    refusals = alice.refusals
    accepted = total - len(refusals)
    assert 1 <= accepted <= HELD, (accepted, refusals[:1])
    assert all(r.address == joe_address for r in refusals)
    assert all("the queue for /node/heron/client/joe at node heron is full" in r.reason for r in refusals), refusals[0]

    joe = client_at(client, ports["heron"], "joe", "heron")
    got = Received(joe)
    members = [alice.poll, joe.poll]
    pump(members, got.has(joe_address, accepted), "the accepted messages at joe's login")
    settle(members, 0.3)
    expected = [p.decode() for p in payloads[:accepted]]
    assert got.at(joe_address) == expected, "exactly what was accepted, in order: the refused ones are the tail"
    # Logged in, the refused tail sent again arrives in order.
    for payload in payloads[accepted:]:
        sent_by(alice, joe_address, payload)
    pump(members, got.has(joe_address, total), "the refused tail sent again")
    settle(members, 0.3)
    assert got.at(joe_address) == [p.decode() for p in payloads]
    assert len(alice.refusals) == len(refusals), "no more refusals once joe is logged in"
    # A relative address of heron's domain (nobody logged in): refused at heron, told across
    # avalon's link all the same.
    for payload in payloads:
        sent_by(alice, "client/nobody", payload)
        settle(members, 0.01)
    pump(members, lambda: len(alice.refusals) >= len(refusals) + total - HELD, "the relative refusals")
    settle(members, 0.5)
    relative = alice.refusals[len(refusals) :]
    assert 1 <= total - len(relative) <= HELD and all(r.address == "client/nobody" for r in relative), relative[:1]
    assert "the queue for client/nobody at node heron is full" in relative[0].reason, relative[0]
    for closing in (alice, joe, kim):
        closing.close()


def test_a_relative_address_routes_like_a_publish_of_its_domain(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports, _ = start_pair(tmp_path, processes)
    avalon = processes[-1]
    alice = client_at(client, ports["avalon"], "alice", "avalon")
    joe = client_at(client, ports["heron"], "joe", "heron")
    got = Received(joe)
    members = [alice.poll, joe.poll]
    # alice's relative login answered by heron: avalon's node serves DESK (a publish of it made
    # before that would route to no member at avalon).
    answered = {alice.address, alice.relative_address}
    pump(members, lambda: alice.ready and alice.answered == answered and joe.logged_in, "alice and joe logged in")
    # client/joe is of DESK, whose master is heron: avalon forwards it there.
    sent = [f"r{i}" for i in range(AFTER)]
    for payload in sent:
        sent_by(alice, "client/joe", payload.encode())
        alice.poll(16)
    pump(members, got.has("client/joe", len(sent)), "the relative messages at heron")
    settle(members, 0.3)
    assert got.at("client/joe") == sent, "once, in order"
    assert got.at(joe.address) == [], "the relative address is its own mailbox"
    # joe back to alice: client/alice is heron's too (the master); alice's login there was
    # passed on by avalon, whose subscription at heron relays the messages to her.
    alice_got = Received(alice)
    replies = [f"back{i}" for i in range(AFTER)]
    for payload in replies:
        sent_by(joe, "client/alice", payload.encode())
        joe.poll(16)
    pump(members, alice_got.has("client/alice", len(replies)), "the replies at avalon")
    settle(members, 0.3)
    assert alice_got.at("client/alice") == replies, "once, in order, through avalon's login at heron"

    # A login at another node's address is refused (NODATA notfound).
    impostor = client_at(client, ports["avalon"], "joe", "heron")
    pump([impostor.poll], lambda: impostor.login_refused is not None, "the refused login")
    assert not impostor.logged_in

    # Hostile: messages for ever more clients that are not logged in are bounded in number.
    raw = Source(client, listen(ports["heron"]), "raw-publisher", liveness_timeout=LIVENESS)
    statuses: list[str] = []
    raw.on_ptp_status(lambda address, flags, text: statuses.append(f"{address} {text}"))
    pump([raw.poll], lambda: raw.router_live, "heron heard the raw publisher")
    for i in range(MAX_PTP_MAILBOXES + 1):
        sent_by(raw, f"/node/heron/client/u{i}", b"x")
        if i % 256 == 0:
            raw.poll(64)
    pump([raw.poll], lambda: bool(statuses), "the refusal past MAX_PTP_MAILBOXES")
    settle([raw.poll], 0.3)
    assert statuses == [
        f"/node/heron/client/u{MAX_PTP_MAILBOXES} {PTP_REFUSED} #{MAX_PTP_MAILBOXES + 1}: "
        f"node heron queues messages for {MAX_PTP_MAILBOXES} clients already"
    ]
    for closing in (alice, joe, impostor, raw):
        closing.close()
    avalon.stop()
    figures = counted(avalon)
    assert figures["forwarded"] == len(sent) and figures["delivered"] == figures["queued"] == 0, figures


def test_ptp_through_a_middle_node_arrives_in_order_and_refusals_come_back_across_both_links(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    # bilbo -> heron goes through avalon (bilbo's parent towards heron), two PtP links.
    ports, _ = start_pair(tmp_path, processes, queue=f"{QUEUE // 1024}K", bilbo=True)
    avalon = processes[-2]
    carol = client_at(client, ports["bilbo"], "carol", "bilbo")
    kim = client_at(client, ports["heron"], "kim", "heron")
    kim_got = Received(kim)
    members = [carol.poll, kim.poll]
    pump(members, lambda: carol.ready and carol.logged_in, "carol logged in at bilbo")
    sent = [f"k{i}" for i in range(AFTER)]
    for payload in sent:
        sent_by(carol, kim.address, payload.encode())
        carol.poll(16)
    pump(members, kim_got.has(kim.address, len(sent)), "bilbo -> avalon -> heron")
    settle(members, 0.3)
    assert kim_got.at(kim.address) == sent, "once, in order, across two links"

    # joe is not logged in: past heron's 64 KiB carol is told of each refusal, through avalon.
    joe_address = "/node/heron/client/joe"
    total = 40
    payloads = [f"m{i}:".encode() + bytes(MESSAGE - 8) for i in range(total)]
    for payload in payloads:
        sent_by(carol, joe_address, payload)
        settle(members, 0.01)
    pump(members, lambda: len(carol.refusals) >= total - HELD, "the refusals at bilbo")
    settle(members, 0.5)
    accepted = total - len(carol.refusals)
    assert all("at node heron is full" in r.reason for r in carol.refusals), carol.refusals[0]
    joe = client_at(client, ports["heron"], "joe", "heron")
    got = Received(joe)
    pump([*members, joe.poll], got.has(joe_address, accepted), "the accepted messages at joe's login")
    settle([*members, joe.poll], 0.3)
    assert got.at(joe_address) == [p.decode() for p in payloads[:accepted]]
    for closing in (carol, kim, joe):
        closing.close()
    avalon.stop()
    figures = counted(avalon)
    assert figures["forwarded"] == len(sent) + total and figures["queued"] == 0, figures
    assert figures["relayed_refusals"] == total - accepted and figures["unmatched_statuses"] == 0, figures


def test_messages_for_a_neighbour_that_was_killed_wait_at_the_sender_node_and_arrive_in_order(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports, config = start_pair(tmp_path, processes)
    heron = processes[-2]
    alice = client_at(client, ports["avalon"], "alice", "avalon")
    joe = client_at(client, ports["heron"], "joe", "heron")
    got = Received(joe)
    members = [alice.poll, joe.poll]
    pump(members, lambda: alice.ready and alice.logged_in and joe.logged_in, "alice and joe logged in")
    sent = [f"m{i}" for i in range(BEFORE)]
    for payload in sent:
        sent_by(alice, joe.address, payload.encode())
        alice.poll(16)
    pump(members, got.has(joe.address, BEFORE), "the messages before the kill")

    # SIGKILL heron; once avalon's link to it is silent past the liveness timeout, messages for
    # heron wait at avalon (within ptp-queue) until heron is back.
    heron.kill()
    settle(members, 2 * LIVENESS)
    during = [f"m{i}" for i in range(BEFORE, BEFORE + BEFORE)]
    for payload in during:
        sent_by(alice, joe.address, payload.encode())
        alice.poll(16)
    settle(members, 0.5)
    assert len(got.items) == BEFORE, "nothing reached joe while heron is down"
    processes.append(start_node(config, "heron", listen(ports["heron"])))
    sent += during
    # joe's client logs in again at the restarted heron by itself; avalon's link sends on.
    pump(members, got.has(joe.address, len(sent)), "the messages held at avalon")
    settle(members, 0.3)
    assert got.at(joe.address) == sent, "once, in order, across heron's restart"
    assert alice.refusals == []
    for closing in (alice, joe):
        closing.close()
