"""The blocks of the cluster tests' router configurations, each block's syntax written once
(``docs/cluster.md``, "Configuration")."""

from __future__ import annotations


def loopback(port: int) -> str:
    """A node's address on loopback."""
    return f"aeron:udp?endpoint=127.0.0.1:{port}"


def _lines(lines: tuple[str, ...]) -> str:
    return "".join(f"    {line}\n" for line in lines)


def settings(**values: str | None) -> str:
    """An ``add-cluster`` block of the settings given (``forward_queue="64K"`` is
    ``forward-queue 64K``); empty when none is given."""
    given = tuple(f"{name.replace('_', '-')} {value}" for name, value in values.items() if value is not None)
    return f"add-cluster\n{_lines(given)}end-cluster\n" if given else ""


def data_service(name: str, pattern: str, label: str) -> str:
    """An ``add-data-service`` whose one source group is the source ``label``."""
    return f"""\
add-data-service
    service-name {name}
    include-pattern {pattern}
    add-source-group
        add-priority
            remote-label {label}
        end-priority
    end-source-group
end-data-service
"""


def node(node_id: str, address: str, *lines: str) -> str:
    """An ``add-cluster-node`` block with ``lines`` (``master-of X``, ``backup-node Y``, ...)."""
    return f"add-cluster-node\n    node-id {node_id}\n    address {address}\n{_lines(lines)}end-cluster-node\n"


def domain(name: str, pattern: str) -> str:
    """An ``add-domain`` block with one include pattern."""
    return f"add-domain\n    name {name}\n    include-pattern '{pattern}'\nend-domain\n"
