"""The keywords of the configuration: which block each belongs to and what it takes."""

from __future__ import annotations

from dataclasses import dataclass

from affinity import _affinity

#: Top level (outside every block), as named in messages.
TOP_LEVEL = "the top level"
DATA_SERVICE = "add-data-service"
SOURCE_GROUP = "add-source-group"
PRIORITY = "add-priority"

#: Block opener → its closing keyword.
BLOCK_END = {
    DATA_SERVICE: "end-data-service",
    SOURCE_GROUP: "end-source-group",
    PRIORITY: "end-priority",
}
#: Closing keyword → its block opener.
BLOCK_START = {end: start for start, end in BLOCK_END.items()}


@dataclass(frozen=True)
class Option:
    """A keyword written inside a block, followed by fixed arguments."""

    #: The block the option belongs in (``add-...``), or :data:`TOP_LEVEL`.
    home: str
    #: What each argument is, for messages (``"a peer label"``).
    arguments: tuple[str, ...]


#: Every option keyword. Block openers take no argument and are options of their parent block.
OPTIONS = {
    DATA_SERVICE: Option(TOP_LEVEL, ()),
    "service-name": Option(DATA_SERVICE, ("a service name",)),
    "include-pattern": Option(DATA_SERVICE, ("a subject pattern",)),
    SOURCE_GROUP: Option(DATA_SERVICE, ()),
    "affinity": Option(SOURCE_GROUP, ("an affinity key", "a regular expression")),
    "policy": Option(SOURCE_GROUP, ("a policy name or package.module:attribute",)),
    "selection": Option(SOURCE_GROUP, ("modulo or rendezvous",)),
    PRIORITY: Option(SOURCE_GROUP, ()),
    "label": Option(PRIORITY, ("a peer label",)),
    "remote-label": Option(PRIORITY, ("a peer label",)),
}

#: Every word that is a keyword when unquoted.
KEYWORDS = frozenset(OPTIONS) | frozenset(BLOCK_START)

#: Values of ``selection`` (the Rust registry).
SELECTIONS: tuple[str, ...] = _affinity.SELECTIONS
