"""The cluster blocks of a router configuration: nodes, message domains, cluster settings.

::

    add-cluster                         # optional, at most one: settings of every node
        load-balancer round-robin       # I_LoadBalancer: a routing policy or plugin (affinity.policies)
        master-mapper domain            # I_MapMsgToMasterId plugin (affinity.cluster_master_mappers)
        cache-expiry 300s               # a slave forgets a cached image unused this long (s, ms, m, h)
        forward-queue 64M               # bytes queued per unreachable master (K, M, G)
        ptp-queue 16M                   # bytes queued per client that is not logged in
    end-cluster

    add-cluster-node                    # one block per node, this one included
        node-id golan
        address aeron:udp?endpoint=10.9.0.3:40500
        master-of STOCK_EXCHANGE        # repeatable; a node may be master of none
        upstream STOCK_EXCHANGE avalon  # repeatable: for this domain, ask avalon (not the master)
        backup-node heron               # repeatable: who takes over its domains, in this order
        accept-default true             # handle messages without a domain here (default true)
        accept-other-default false      # accept other nodes' messages without a domain (default false)
    end-cluster-node

    add-domain
        name STOCK_EXCHANGE
        include-pattern '^/STOCK/'      # repeatable, POSIX ERE
    end-domain

A node is master (stratum 0) of its ``master-of`` domains and a slave of every other domain:
it asks the domain's master directly (stratum 1), or the node its ``upstream`` names (one more
than that node's stratum). :func:`analyse_cluster` checks every reference and refuses a loop of
``upstream`` (A asks B asks A for one domain) with ``file:line:column`` diagnostics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from affinity import _affinity
from affinity.config.diagnostics import Diagnostic, error, warning
from affinity.config.model import Location
from affinity.config.tokenizer import Token
from affinity.exceptions import PolicyError
from affinity.rules import validate_spec

__all__ = [
    "BLOCKS",
    "DEFAULT_CACHE_EXPIRY",
    "DEFAULT_FORWARD_QUEUE",
    "DEFAULT_LOAD_BALANCER",
    "DEFAULT_MASTER_MAPPER",
    "DEFAULT_PTP_QUEUE",
    "MAPPER_ENTRY_POINT_GROUP",
    "NODE_ID_PATTERN",
    "ClusterConfig",
    "ClusterNode",
    "ClusterSettings",
    "Domain",
    "analyse_cluster",
]

#: Opening and closing keyword of each cluster block.
BLOCKS = {"add-cluster": "end-cluster", "add-cluster-node": "end-cluster-node", "add-domain": "end-domain"}
#: Options of each block: name → (values it takes, repeatable).
OPTIONS: dict[str, dict[str, tuple[int, bool]]] = {
    "add-cluster": {
        "load-balancer": (1, False),
        "master-mapper": (1, False),
        "cache-expiry": (1, False),
        "forward-queue": (1, False),
        "ptp-queue": (1, False),
    },
    "add-cluster-node": {
        "node-id": (1, False),
        "address": (1, False),
        "master-of": (1, True),
        "upstream": (2, True),
        "backup-node": (1, True),
        "accept-default": (1, False),
        "accept-other-default": (1, False),
    },
    "add-domain": {"name": (1, False), "include-pattern": (1, True)},
}
#: A node id or domain name: letters, digits, ``_``, ``.``, ``-``; at most 64 characters.
NODE_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: Default ``load-balancer``: xmlBlaster's RoundRobin.
DEFAULT_LOAD_BALANCER = "round-robin"
#: Default ``master-mapper``: xmlBlaster's DomainToMaster.
DEFAULT_MASTER_MAPPER = "domain"
#: Entry point group of ``master-mapper`` plugins (loaded as the routing policies' plugins are:
#: :func:`affinity.rules.resolve_plugin`; the interface is :class:`affinity.cluster_mapping.MasterMapper`).
MAPPER_ENTRY_POINT_GROUP = "affinity.cluster_master_mappers"
#: Default ``cache-expiry``, seconds.
DEFAULT_CACHE_EXPIRY = 300.0
#: Default ``forward-queue``, bytes per unreachable master.
DEFAULT_FORWARD_QUEUE = 64 << 20
#: Default ``ptp-queue``, bytes per client that is not logged in.
DEFAULT_PTP_QUEUE = 16 << 20
#: Least and most bytes of ``forward-queue`` and ``ptp-queue``.
QUEUE_RANGE = (64 << 10, 1 << 40)
#: Suffixes of durations, in seconds.
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
#: Suffixes of byte sizes (powers of 1024).
SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
#: Words of a boolean option.
BOOLEANS = {"true": True, "false": False}
#: An address is an Aeron channel.
ADDRESS_PREFIXES = ("aeron:udp?", "aeron:ipc")


@dataclass(frozen=True)
class ClusterSettings:
    """The ``add-cluster`` block (or the defaults)."""

    load_balancer: str = DEFAULT_LOAD_BALANCER
    master_mapper: str = DEFAULT_MASTER_MAPPER
    cache_expiry: float = DEFAULT_CACHE_EXPIRY
    forward_queue: int = DEFAULT_FORWARD_QUEUE
    ptp_queue: int = DEFAULT_PTP_QUEUE


@dataclass(frozen=True)
class ClusterNode:
    """One ``add-cluster-node`` block."""

    node_id: str
    address: str
    master_of: tuple[str, ...]
    #: Per domain: the node asked instead of the master.
    upstream: dict[str, str]
    backup_nodes: tuple[str, ...]
    accept_default: bool
    accept_other_default: bool
    location: Location


@dataclass(frozen=True)
class Domain:
    """One ``add-domain`` block."""

    name: str
    include_patterns: tuple[str, ...]
    location: Location


@dataclass(frozen=True)
class ClusterConfig:
    """Every cluster block of a configuration, checked."""

    nodes: tuple[ClusterNode, ...]
    domains: tuple[Domain, ...]
    settings: ClusterSettings = field(default_factory=ClusterSettings)

    def node(self, node_id: str) -> ClusterNode | None:
        """The node with ``node_id``, if configured."""
        return next((node for node in self.nodes if node.node_id == node_id), None)

    def masters(self, domain: str) -> tuple[str, ...]:
        """The nodes master of ``domain``, in configuration order (mirrored masters)."""
        return tuple(node.node_id for node in self.nodes if domain in node.master_of)

    def stratum(self, node_id: str, domain: str) -> int | None:
        """Distance of ``node_id`` from the master of ``domain`` (0: a master); ``None`` when
        the domain has no master."""
        node, seen = self.node(node_id), set()
        depth = 0
        while node is not None and node.node_id not in seen:
            if domain in node.master_of:
                return depth
            seen.add(node.node_id)
            parent = node.upstream.get(domain)
            if parent is None:
                return depth + 1 if self.masters(domain) else None
            node, depth = self.node(parent), depth + 1
        return None

    def parent(self, node_id: str, domain: str) -> str | None:
        """The node ``node_id`` asks for ``domain``: its upstream, else the first master;
        ``None`` for a master (or a domain without one)."""
        node = self.node(node_id)
        if node is None or domain in node.master_of:
            return None
        if domain in node.upstream:
            return node.upstream[domain]
        masters = self.masters(domain)
        return masters[0] if masters else None


@dataclass
class _Block:
    kind: str
    opening: Token
    values: dict[str, list[list[Token]]]


def _blocks(tokens: list[Token], diagnostics: list[Diagnostic]) -> tuple[list[_Block], list[tuple[int, int]]]:
    """The cluster blocks of ``tokens`` and the token index spans they cover."""
    blocks: list[_Block] = []
    spans: list[tuple[int, int]] = []
    ends = set(BLOCKS.values())
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.is_keyword(*ends):
            diagnostics.append(error(token.location, f"{token.value} without its opening block"))
            spans.append((index, index))
        elif token.is_keyword(*BLOCKS):
            block, end = _block(tokens, index, diagnostics)
            if block is not None:
                blocks.append(block)
            spans.append((index, end))
            index = end
        index += 1
    return blocks, spans


def _block(tokens: list[Token], index: int, diagnostics: list[Diagnostic]) -> tuple[_Block | None, int]:
    opening = tokens[index]
    kind, closing = opening.value, BLOCKS[opening.value]
    options = OPTIONS[kind]
    values: dict[str, list[list[Token]]] = {}
    stop = (closing, *BLOCKS, *BLOCKS.values(), "add-data-service", "add-faucet")
    position = index + 1
    while position < len(tokens) and not tokens[position].is_keyword(*stop):
        token = tokens[position]
        if not token.is_keyword(*options):
            expected = ", ".join(options)
            diagnostics.append(error(token.location, f"unexpected {token.value!r} in {kind} (expected {expected})"))
            position += 1
            continue
        count, repeatable = options[token.value]
        arguments = tokens[position + 1 : position + 1 + count]
        if len(arguments) < count or any(a.is_keyword(*options, *stop) for a in arguments):
            diagnostics.append(error(token.location, f"{token.value} needs {count} value{'s' * (count > 1)}"))
            position += 1
            continue
        if token.value in values and not repeatable:
            diagnostics.append(error(token.location, f"{token.value} given twice in {kind}"))
        else:
            values.setdefault(token.value, []).append(arguments)
        position += 1 + count
    if position >= len(tokens) or not tokens[position].is_keyword(closing):
        diagnostics.append(error(opening.location, f"{kind} without {closing}"))
        return None, max(position - 1, index)
    return _Block(kind, opening, values), position


def _one(block: _Block, name: str) -> Token | None:
    found = block.values.get(name)
    return found[0][0] if found else None


def _parse_number(
    token: Token, units: dict[str, float] | dict[str, int], what: str, diagnostics: list[Diagnostic]
) -> float | None:
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", token.value)
    if match is None or match.group(2) not in units:
        names = ", ".join(u for u in units if u) or "none"
        diagnostics.append(error(token.value_location, f"{token.value!r}: expected {what} (units {names})"))
        return None
    return float(match.group(1)) * units[match.group(2)]


def _settings(block: _Block | None, diagnostics: list[Diagnostic]) -> ClusterSettings:
    if block is None:
        return ClusterSettings()
    found: dict[str, object] = {}
    balancer = _one(block, "load-balancer")
    if balancer is not None:
        try:  # a routing policy: a built-in name or a plugin, as `policy` takes (docs/policies.md)
            validate_spec(balancer.value)
            found["load_balancer"] = balancer.value
        except PolicyError as exc:
            diagnostics.append(error(balancer.value_location, f"load-balancer {balancer.value!r}: {exc}"))
    mapper = _one(block, "master-mapper")
    if mapper is not None:
        try:  # the default, or a plugin found as the routing policies' plugins are (docs/policies.md)
            if mapper.value != DEFAULT_MASTER_MAPPER:
                validate_spec(mapper.value, MAPPER_ENTRY_POINT_GROUP)
            found["master_mapper"] = mapper.value
        except PolicyError as exc:
            diagnostics.append(
                error(
                    mapper.value_location, f"master-mapper {mapper.value!r}: {exc} (built-in: {DEFAULT_MASTER_MAPPER})"
                )
            )
    expiry = _one(block, "cache-expiry")
    if expiry is not None:
        seconds = _parse_number(expiry, DURATION_UNITS, "a duration such as 300s", diagnostics)
        if seconds is not None and seconds <= 0:
            diagnostics.append(error(expiry.value_location, "cache-expiry must be more than 0"))
        elif seconds is not None:
            found["cache_expiry"] = seconds
    for name in ("forward-queue", "ptp-queue"):
        token = _one(block, name)
        if token is None:
            continue
        size = _parse_number(token, SIZE_UNITS, "a number of bytes such as 64M", diagnostics)
        if size is None:
            continue
        low, high = QUEUE_RANGE
        if not low <= size <= high or size != int(size):
            diagnostics.append(error(token.value_location, f"{name} {token.value}: must be {low}..={high} bytes"))
            continue
        found[name.replace("-", "_")] = int(size)
    return ClusterSettings(**found)  # type: ignore[arg-type]


def _name(token: Token | None, what: str, opening: Token, diagnostics: list[Diagnostic]) -> str | None:
    if token is None:
        diagnostics.append(error(opening.location, f"{opening.value}: {what} is required"))
        return None
    if not NODE_ID_PATTERN.fullmatch(token.value):
        diagnostics.append(
            error(token.value_location, f"{what} {token.value!r}: 1..64 letters, digits, '_', '.' or '-'")
        )
        return None
    return token.value


def _boolean(block: _Block, name: str, default: bool, diagnostics: list[Diagnostic]) -> bool:
    token = _one(block, name)
    if token is None:
        return default
    if token.value not in BOOLEANS:
        diagnostics.append(error(token.value_location, f"{name} {token.value!r}: must be true or false"))
        return default
    return BOOLEANS[token.value]


def _domain(block: _Block, diagnostics: list[Diagnostic]) -> Domain | None:
    name = _name(_one(block, "name"), "name", block.opening, diagnostics)
    patterns = [arguments[0] for arguments in block.values.get("include-pattern", [])]
    if not patterns:
        diagnostics.append(error(block.opening.location, "add-domain: include-pattern is required"))
    valid = True
    for pattern in patterns:
        try:
            _affinity.PosixRegex(pattern.value)
        except ValueError as exc:
            diagnostics.append(error(pattern.value_location, f"include-pattern {pattern.value!r}: {exc}"))
            valid = False
    if name is None or not patterns or not valid:
        return None
    return Domain(name, tuple(p.value for p in patterns), block.opening.location)


def _node(block: _Block, diagnostics: list[Diagnostic]) -> tuple[ClusterNode | None, dict[str, Token]]:
    """The node and the tokens of its references (for diagnostics of the cross checks)."""
    node_id = _name(_one(block, "node-id"), "node-id", block.opening, diagnostics)
    address = _one(block, "address")
    if address is None:
        diagnostics.append(error(block.opening.location, "add-cluster-node: address is required"))
    elif not address.value.startswith(ADDRESS_PREFIXES):
        diagnostics.append(
            error(address.value_location, f"address {address.value!r}: expected an Aeron channel (aeron:udp?...)")
        )
        address = None
    references: dict[str, Token] = {}
    master_of: list[str] = []
    for (token,) in block.values.get("master-of", []):
        if token.value in master_of:
            diagnostics.append(error(token.value_location, f"master-of {token.value!r} given twice"))
        else:
            master_of.append(token.value)
            references[f"master-of {token.value}"] = token
    upstream: dict[str, str] = {}
    for domain, parent in block.values.get("upstream", []):
        if domain.value in upstream:
            diagnostics.append(error(domain.value_location, f"upstream for {domain.value!r} given twice"))
            continue
        upstream[domain.value] = parent.value
        references[f"upstream-domain {domain.value}"] = domain
        references[f"upstream {domain.value}"] = parent
    backups: list[str] = []
    for (token,) in block.values.get("backup-node", []):
        if token.value in backups:
            diagnostics.append(error(token.value_location, f"backup-node {token.value!r} given twice"))
        else:
            backups.append(token.value)
            references[f"backup-node {token.value}"] = token
    accept_default = _boolean(block, "accept-default", True, diagnostics)
    accept_other = _boolean(block, "accept-other-default", False, diagnostics)
    if node_id is None or address is None:
        return None, references
    node = ClusterNode(
        node_id,
        address.value,
        tuple(master_of),
        upstream,
        tuple(backups),
        accept_default,
        accept_other,
        block.opening.location,
    )
    return node, references


def _cross_checks(
    nodes: list[tuple[ClusterNode, dict[str, Token]]], domains: list[Domain], diagnostics: list[Diagnostic]
) -> None:
    known_domains = {domain.name for domain in domains}
    known_nodes = {node.node_id for node, _ in nodes}
    by_id = {node.node_id: node for node, _ in nodes}
    for node, references in nodes:
        for domain in node.master_of:
            if domain not in known_domains:
                token = references[f"master-of {domain}"]
                diagnostics.append(error(token.value_location, f"master-of {domain!r}: no add-domain names it"))
        for domain, parent in node.upstream.items():
            if domain not in known_domains:
                token = references[f"upstream-domain {domain}"]
                diagnostics.append(error(token.value_location, f"upstream {domain!r}: no add-domain names it"))
            token = references[f"upstream {domain}"]
            if parent == node.node_id:
                diagnostics.append(error(token.value_location, f"upstream {domain} {parent}: a node cannot ask itself"))
            elif parent not in known_nodes:
                diagnostics.append(error(token.value_location, f"upstream {domain} {parent!r}: no such cluster node"))
            if domain in node.master_of:
                diagnostics.append(
                    error(token.value_location, f"upstream {domain}: {node.node_id} is master of {domain} itself")
                )
        for backup in node.backup_nodes:
            token = references[f"backup-node {backup}"]
            if backup == node.node_id:
                diagnostics.append(error(token.value_location, "backup-node: a node cannot back itself up"))
            elif backup not in known_nodes:
                diagnostics.append(error(token.value_location, f"backup-node {backup!r}: no such cluster node"))
    # A loop of upstream references for one domain never reaches a master: refused.
    for node, references in nodes:
        for name in node.upstream:
            path, current = [node.node_id], by_id.get(node.upstream[name])
            while current is not None and name not in current.master_of and name in current.upstream:
                if current.node_id in path:
                    break
                path.append(current.node_id)
                current = by_id.get(current.upstream[name])
            if current is not None and current.node_id in path:
                cycle = " -> ".join([*path[path.index(current.node_id) :], current.node_id])
                token = references[f"upstream {name}"]
                diagnostics.append(error(token.value_location, f"upstream loop for {name}: {cycle}"))
    for defined in domains:
        if not any(defined.name in node.master_of for node, _ in nodes):
            diagnostics.append(
                warning(
                    defined.location,
                    f"domain {defined.name} has no master: its publishes are queued until one is configured",
                )
            )


def analyse_cluster(
    tokens: list[Token], diagnostics: list[Diagnostic]
) -> tuple[ClusterConfig | None, list[tuple[int, int]]]:
    """The cluster blocks of ``tokens`` (``None`` without any), with every problem appended to
    ``diagnostics``; and the token spans of the blocks (the caller blanks them for the
    data-service parser)."""
    blocks, spans = _blocks(tokens, diagnostics)
    if not blocks:
        return None, spans
    settings_blocks = [block for block in blocks if block.kind == "add-cluster"]
    for extra in settings_blocks[1:]:
        diagnostics.append(error(extra.opening.location, "only one add-cluster block is allowed"))
    settings = _settings(settings_blocks[0] if settings_blocks else None, diagnostics)
    domains: list[Domain] = []
    nodes: list[tuple[ClusterNode, dict[str, Token]]] = []
    for block in blocks:
        if block.kind == "add-domain":
            domain = _domain(block, diagnostics)
            if domain is None:
                continue
            if any(d.name == domain.name for d in domains):
                diagnostics.append(error(block.opening.location, f"domain {domain.name} defined twice"))
                continue
            domains.append(domain)
        elif block.kind == "add-cluster-node":
            node, references = _node(block, diagnostics)
            if node is None:
                continue
            if any(n.node_id == node.node_id for n, _ in nodes):
                diagnostics.append(error(block.opening.location, f"node-id {node.node_id} defined twice"))
                continue
            nodes.append((node, references))
    _cross_checks(nodes, domains, diagnostics)
    return ClusterConfig(tuple(n for n, _ in nodes), tuple(domains), settings), spans
