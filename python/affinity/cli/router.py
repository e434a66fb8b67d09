"""``affinity router --config FILE [--listen CH] [--control CH] [--backlog-budget BYTES] [--secret-file PATH]``.

Runs a DataSource-like subject router in the foreground: subscribers send subscribe /
unsubscribe requests to ``--listen``; each new subject is routed to a peer by the configuration's
data services (``add-data-service`` blocks, as ``affinity route`` reads them), the request is
forwarded to that peer and its updates relayed to every subscriber. Faucet topics (an
``add-faucet`` block in the same file) are assigned to enlisted publishers. What the router does
is logged on the ``affinity.router`` logger (stderr). Stops on SIGINT / SIGTERM.

``--backlog-budget`` bounds the bytes all records queued for peers that do not keep up hold
together (``256M`` by default; suffixes K, M, G are powers of 1024); past it the subscriber with
the largest backlog is dropped and logged.

``--status CHANNEL``: publish the router's counters, peers, latest moves and faucet assignments
every second on CHANNEL (``affinity.web.router_report``), for ``affinity web --router CHANNEL``.

Subscribers and sources hear from the router every heartbeat interval; when it is silent for
their liveness timeout they move to the next router of their list (or try it again) and send
their subscriptions again by themselves. On a clean stop (SIGINT / SIGTERM) the router tells
them so, and with ``--forward CHANNEL`` where to go.

``--node NODE_ID``: this router is that node of the configuration's cluster blocks
(``docs/cluster.md``): subscriptions to a domain it is a slave of go, once per subject, to the
parent node, whose images and updates it caches and relays; other nodes may subscribe here as
``node:<id>`` only with a configured id (else ``not-allowed``). Publishes at a slave are not
forwarded yet.

SIGHUP (with ``--node``): re-reads the file's cluster blocks and applies them without a restart
(new nodes let in and linked to, a domain's moved master followed, links back at the first node
of their backup order); a file with errors keeps the old configuration and logs each error as
``file:line:column``. A master silent past the liveness timeout has its domains taken over by
the next node of its ``backup-node`` list (``docs/cluster.md``, "Master failover and reload").

Every node publishes its state on ``__sys__cluster.node.info[NODE_ID]`` (``docs/cluster.md``,
"Node info"), which any subscriber at any node can follow.

``affinity router status --config FILE --node NODE_ID [--router CHANNEL] [--host HOST]``: reads that
node's info (at its configured address, or CHANNEL) and prints its domains with role and stratum,
its connection state to each other node (``logged-in`` / ``polling`` / ``not-allowed``; ``-``
before it needed that node), its load and the forged node info it ignored; exit status 2 when
the node does not answer within ``--timeout`` seconds.

``--secret-file PATH`` (else ``$AFFINITY_ROUTER_SECRET`` as hex, else
``$AFFINITY_ROUTER_SECRET_FILE``): the router secret; every message from and to subscribers and
sources is then sealed and verified, and what is not authentic is counted and dropped
(``docs/subjects.md``, "Authentication"). The file holds the secret as hex text, is a regular file
owned by the user, mode 0600. Without a secret the router says at start that it is
UNAUTHENTICATED.

``--bootstrap-listen HOST:PORT`` (with ``--registry DIR``, else the default registry): the router
also answers BOOTSTRAP requests there for every group of that registry, with the group's
definition and the members it hears, so a group member's ``bootstrap=`` list may name the router
(``docs/groups.md``, "Across hosts: bootstrap"; the same options as ``affinity driver``'s).

Exit status: 0 after a clean stop, 1 when the configuration has errors, 2 when the file cannot
be read or the router cannot start.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from affinity import _affinity
from affinity.cli._text import help_text
from affinity.cluster_balance import parents_of
from affinity.cluster_failover import fallback_domains, read_reload
from affinity.cluster_info import NodeInfo, NodeInfoService, node_info_subject, parse_node_info
from affinity.cluster_mirror import other_masters
from affinity.cluster_node import ClusterNode, _endpoint_host, cluster_router_config
from affinity.config.cluster import ClusterConfig
from affinity.config.faucet import RouterAnalysis, analyse_router_text
from affinity.exceptions import AffinityError, ConfigError
from affinity.subjects import DEFAULT_BACKLOG_BUDGET, MIN_BACKLOG_BUDGET, NO_SECRET
from affinity.units import parse_size

#: Exit status: stopped cleanly.
EXIT_OK = 0
#: Exit status: the configuration has errors.
EXIT_ERRORS = 1
#: Exit status: the file cannot be read, or the router cannot start.
EXIT_UNAVAILABLE = 2
#: Default listen channel.
DEFAULT_LISTEN = "aeron:udp?endpoint=127.0.0.1:40500"
#: Default liveness timeout of the router's peers, in seconds (``--liveness-timeout``).
DEFAULT_LIVENESS_TIMEOUT = 2.0
#: How often the log is flushed, in seconds.
LOG_INTERVAL = 0.05
#: Seconds ``affinity router status`` waits for the node's info by default.
DEFAULT_STATUS_TIMEOUT = 5.0
#: What ``affinity router status`` shows for a node this node has not needed yet.
NO_LINK = "-"
#: ``affinity router ACTION``: run the router (the default), or read a node's info.
ACTIONS = ("run", "status")
#: What the router says at start without a secret.
UNAUTHENTICATED_LINE = (
    "UNAUTHENTICATED: no router secret; anyone who can reach the router's channels can forge "
    "subscriptions and data (--secret-file)"
)


def byte_size(text: str) -> int:
    """``--backlog-budget``: bytes, with an optional K / M / G suffix (powers of 1024;
    ``affinity.units``)."""
    try:
        size = parse_size(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of bytes, e.g. 268435456 or 256M") from None
    if size < MIN_BACKLOG_BUDGET:
        raise argparse.ArgumentTypeError(f"{text!r}: at least {MIN_BACKLOG_BUDGET} bytes (4M)")
    return size


def cluster_problem(cluster: ClusterConfig | None, node: str | None, config: str) -> str | None:
    """Why ``--node`` does not fit the configuration's cluster blocks, or ``None``."""
    if cluster is None or not cluster.nodes:
        if node is not None:
            return f"affinity router: --node {node}: {config} has no add-cluster-node block"
        return None
    known = ", ".join(n.node_id for n in cluster.nodes)
    if node is None:
        return f"affinity router: {config} configures cluster nodes ({known}): --node NODE_ID says which one this is"
    if cluster.node(node) is None:
        return f"affinity router: --node {node}: not a node-id of {config} (nodes: {known})"
    return None


def add_router_options(parser: argparse.ArgumentParser) -> None:
    """The options that configure a running router (``affinity router`` and ``affinity driver
    --router`` take the same)."""
    parser.add_argument(
        "--node",
        metavar="NODE_ID",
        help="this router's node-id among the configuration's add-cluster-node blocks",
    )
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="CHANNEL", help="channel to listen on")
    parser.add_argument("--control", metavar="CHANNEL", help="extra channel heartbeats are read from")
    parser.add_argument(
        "--liveness-timeout",
        type=float,
        default=DEFAULT_LIVENESS_TIMEOUT,
        metavar="SECONDS",
        help="peer liveness timeout",
    )
    parser.add_argument(
        "--forward",
        metavar="CHANNEL",
        help="another router's channel: on a clean stop, subscribers and sources are told to move there",
    )
    parser.add_argument(
        "--backlog-budget",
        type=byte_size,
        default=DEFAULT_BACKLOG_BUDGET,
        metavar="BYTES",
        help="bytes all backlogs to slow peers may hold together (default 256M)",
    )
    parser.add_argument(
        "--secret-file",
        type=Path,
        metavar="PATH",
        help="router secret (hex, owner-only); else $AFFINITY_ROUTER_SECRET or $AFFINITY_ROUTER_SECRET_FILE; "
        "none: unauthenticated",
    )


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``router`` subcommand."""
    parser = subparsers.add_parser(
        "router",
        help="run a subject router (routing tables in the data path, faucet)",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "action", nargs="?", choices=ACTIONS, default="run", help="run the router (default) or show a node's status"
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="services configuration")
    add_router_options(parser)
    for name, value, option_help in _affinity.BOOTSTRAP_RESPONDER_OPTIONS:
        parser.add_argument(f"--{name}", metavar=value, help=option_help)
    parser.add_argument(
        "--status",
        metavar="CHANNEL",
        help="publish a status report every second on CHANNEL for `affinity web --router CHANNEL`",
    )
    parser.add_argument("--router", metavar="CHANNEL", help="status: where to ask (default: the node's address)")
    parser.add_argument("--host", default="127.0.0.1", help="status: the address the node answers to")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_STATUS_TIMEOUT, metavar="SECONDS", help="status: how long to wait"
    )
    parser.set_defaults(run=run)


def describe_node(cluster: ClusterConfig, node: str) -> None:
    """Says what this node is in the cluster: master and slave domains with their stratum."""
    mirrored = other_masters(cluster, node)
    for domain in cluster.domains:
        stratum = cluster.stratum(node, domain.name)
        parents = parents_of(cluster, node, domain.name)
        role = "master" if stratum == 0 else f"slave of {', '.join(parents)}" if parents else "no master known"
        if len(parents) > 1:
            role += f", mirrored masters chosen by load-balancer {cluster.settings.load_balancer}"
        if domain.name in mirrored:
            role += f", kept in step with {', '.join(mirrored[domain.name])}"
        print(f"affinity router: node {node}: domain {domain.name}: {role} (stratum {stratum})", file=sys.stderr)
    print(
        f"affinity router: node {node}: slave subscriptions go to the parent nodes; "
        "publishes at a slave are forwarded to every master of their domain (docs/cluster.md)",
        file=sys.stderr,
    )


def format_status(info: NodeInfo, cluster: ClusterConfig) -> list[str]:
    """The lines ``affinity router status`` prints for ``info``."""
    lines = [f"node {info.node} at {info.address} ({info.state}, info #{info.seq})"]
    for name, role, stratum, parent in info.domains:
        of = f" of {parent}" if parent else ""
        lines.append(f"  domain {name}: {role}{of}, stratum {'-' if stratum is None else stratum}")
    for node in cluster.nodes:
        if node.node_id != info.node:
            lines.append(f"  connection {node.node_id}: {info.connections.get(node.node_id, NO_LINK)}")
    for other, state in sorted(info.connections.items()):
        if cluster.node(other) is None:
            lines.append(f"  connection {other}: {state}")
    lines.append("  load: " + ", ".join(f"{key} {value}" for key, value in info.load.items()))
    if info.queues is not None:
        depths = (f"{key} {messages} publishes / {size} bytes" for key, (messages, size) in info.queues.items())
        lines.append("  forward queues: " + (", ".join(depths) or "none"))
    if info.queues_without_master:
        waiting = info.queues_without_master.items()
        depths = (f"{key} {messages} publishes / {size} bytes" for key, (messages, size) in waiting)
        lines.append("  queued without a master: " + ", ".join(depths))
    for master, counts in sorted((info.forwarded or {}).items()):
        stale = " (stale: its queue was dropped)" if master in (info.stale_masters or ()) else ""
        figures = ", ".join(f"{name} {value}" for name, value in counts.items())
        lines.append(f"  forwarded to {master}: {figures}{stale}")
    if info.ptp_queued is not None:
        totals = info.ptp_queued
        lines.append(
            f"  ptp queues: {totals['clients']} clients, {totals['messages']} messages, {totals['bytes']} bytes"
        )
        for address, (messages, size) in (info.ptp_queues or {}).items():
            lines.append(f"    {address}: {messages} messages / {size} bytes")
    lines.append(f"  forged node info ignored: {info.forged_node_info}")
    return lines


def status(args: argparse.Namespace, cluster: ClusterConfig) -> int:
    """``affinity router status``: subscribes to the node's info and prints the first one."""
    from affinity.subjects import Flags, Subscriber

    spec = cluster.node(args.node)
    assert spec is not None  # checked by cluster_problem
    subject = node_info_subject(args.node)
    found: list[tuple[Flags, bytes]] = []
    client = _affinity.Client()
    try:
        subscriber = Subscriber(client, args.router or spec.address, name="status", host=args.host)
        subscriber.subscribe(subject, lambda _, flags, payload: found.append((flags, payload)))
        deadline = time.monotonic() + args.timeout
        while not found and time.monotonic() < deadline:
            if subscriber.poll(64) == 0:
                time.sleep(0.005)
        subscriber.close()
    except AffinityError as exc:
        print(f"affinity router status: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    finally:
        client.close()
    if not found:
        print(f"affinity router status: no answer from {args.node} within {args.timeout:g}s", file=sys.stderr)
        return EXIT_UNAVAILABLE
    flags, payload = found[0]
    if flags & (Flags.REFUSED | Flags.NODATA_NOTFOUND | Flags.NODATA_UNAVAILABLE | Flags.STATUS):
        answer = payload.decode(errors="replace")
        print(f"affinity router status: {args.node}: {Flags(flags)!r} {answer}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        info = parse_node_info(subject, payload, cluster)
    except ValueError as exc:
        print(f"affinity router status: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    print("\n".join(format_status(info, cluster)))
    return EXIT_OK


def load_config(args: argparse.Namespace) -> RouterAnalysis | int:
    """Reads and checks ``args.config`` (and ``args.node`` against its cluster blocks), printing
    every diagnostic; the analysis, or the exit status when it cannot be used."""
    try:
        with open(args.config, encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"affinity router: cannot read {args.config}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    analysis = analyse_router_text(text, args.config)
    for diagnostic in analysis.diagnostics:
        print(diagnostic, file=sys.stderr)
    if analysis.errors:
        return EXIT_ERRORS
    problem = cluster_problem(analysis.config.cluster, args.node, args.config)
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_ERRORS
    return analysis


def run(
    args: argparse.Namespace,
    *,
    client: _affinity.Client | None = None,
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
    analysis: RouterAnalysis | None = None,
) -> int:
    """Run the router until a signal arrives (or, ``status``, show a node's info).

    ``affinity driver --router`` runs it on a thread of the driver's process: ``client`` attached
    to that driver (closed here at the end), ``stop`` set when the driver stops (no signal
    handlers are installed then), ``ready`` set once the router listens, ``analysis`` the
    configuration it checked before starting the driver.
    """
    from affinity.subjects import SubjectRouter

    if analysis is None:
        loaded = load_config(args)
        if isinstance(loaded, int):
            return loaded
        analysis = loaded
    if args.action == "status":
        if analysis.config.cluster is None or args.node is None:
            print(f"affinity router status: {args.config} has no add-cluster-node block", file=sys.stderr)
            return EXIT_ERRORS
        return status(args, analysis.config.cluster)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    if stop is None:
        stop = threading.Event()
        stopping = stop

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    # SIGHUP at a cluster node: re-read the cluster blocks (docs/cluster.md, "Master failover
    # and reload"); a router without --node keeps the default action (signals are the main
    # thread's only).
    reload = threading.Event()
    if args.node is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, lambda signum, frame: reload.set())
    if client is None:
        client = _affinity.Client()
    config, cluster_nodes = analysis.config, None
    if args.node is not None and config.cluster is not None:
        cluster_nodes = [node.node_id for node in config.cluster.nodes if node.node_id != args.node]
        config = cluster_router_config(config, args.node)
    try:
        router = SubjectRouter(
            client,
            config,
            listen=args.listen,
            control=args.control,
            liveness_timeout=args.liveness_timeout,
            backlog_budget=args.backlog_budget,
            secret=args.secret_file,
            forward=args.forward,
            cluster_nodes=cluster_nodes,
        )
    except AffinityError as exc:
        print(f"affinity router: {exc}", file=sys.stderr)
        client.close()
        return EXIT_UNAVAILABLE
    if router.secret_source == NO_SECRET:
        print(f"affinity router: {UNAUTHENTICATED_LINE}", file=sys.stderr)
    else:
        print(f"affinity router: authenticated (secret from {router.secret_source})", file=sys.stderr)
    responder = None
    if args.bootstrap_listen is not None or args.registry is not None:
        try:
            responder = _affinity.BootstrapResponderCore(client, args.bootstrap_listen, args.registry)
        except AffinityError as exc:
            print(f"affinity router: {exc}", file=sys.stderr)
            router.close()
            client.close()
            return EXIT_UNAVAILABLE
        groups = responder.counters()["groups"]
        print(f"affinity router: answering BOOTSTRAP at {responder.endpoint} for {groups} group(s)", file=sys.stderr)
    reporter = None
    if args.status is not None:
        from affinity.web.router_report import RouterReporter

        try:
            reporter = RouterReporter(client, router, args.status, args.listen)
        except AffinityError as exc:
            print(f"affinity router: cannot publish status on {args.status}: {exc}", file=sys.stderr)
            if responder is not None:
                responder.close()
            router.close()
            client.close()
            return EXIT_UNAVAILABLE
    node, info = None, None
    if args.node is not None and config.cluster is not None:
        describe_node(config.cluster, args.node)
        try:
            node = ClusterNode(
                client,
                config.cluster,
                args.node,
                listen=args.listen,
                liveness_timeout=args.liveness_timeout,
                secret=args.secret_file,
                fallbacks=frozenset(fallback_domains(config.routing.data_services)),
            )
            info = NodeInfoService(
                client,
                config.cluster,
                args.node,
                listen=args.listen,
                host=_endpoint_host(args.listen),
                router_status=router.status,
                connections=node.connections,
                queues=node.forwarding.queue_depths,
                queues_without_master=node.forwarding.depths_without_master,
                forwarded=node.forwarding.counters_by_master,
                stale_masters=node.forwarding.stale_masters,
                ptp_queues=node.ptp.queue_depths,
                roles=node.failover.roles,
                liveness_timeout=args.liveness_timeout,
                secret=args.secret_file,
            )
        except AffinityError as exc:
            print(f"affinity router: node {args.node}: {exc}", file=sys.stderr)
            if node is not None:
                node.close()
            if responder is not None:
                responder.close()
            router.close()
            client.close()
            return EXIT_UNAVAILABLE
    print(f"affinity router: listening on {args.listen}", file=sys.stderr, flush=True)
    if ready is not None:
        ready.set()
    try:
        while not stop.wait(LOG_INTERVAL):
            router.flush_log()
            if reload.is_set():
                reload.clear()
                reloaded = None if node is None else read_reload(args.config, args.node)
                if node is not None and reloaded is not None:
                    router.set_cluster_nodes([n.node_id for n in reloaded.nodes if n.node_id != args.node])
                    node.failover.reload(reloaded)
                    if info is not None:
                        info.reconfigure(reloaded)
            if reporter is not None:
                reporter.tick()
    finally:
        if info is not None:
            info.close()
        if node is not None:
            node.close()
        if reporter is not None:
            reporter.close()
        if responder is not None:
            responder.close()
        router.close()
        client.close()
    return EXIT_OK
