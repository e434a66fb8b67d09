"""The ``add-faucet`` block of a router configuration, beside the ``add-data-service`` blocks.

::

    add-faucet
        control-topic symbol_faucet_control
        subscription-topic "/symbols/.*"
        announcements all              # default | all
        coverage-option udo_coverage   # optional
    end-faucet

:func:`analyse_router_text` takes the faucet block out (blanking it, so every other line keeps
its number), parses it with file:line:column diagnostics, and hands the rest to the data-service
parser (:func:`affinity.config.parser.analyse_text`). The cluster blocks (``add-cluster``,
``add-cluster-node``, ``add-domain``: :mod:`affinity.config.cluster`) are taken out the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from affinity import _affinity
from affinity.config.cluster import ClusterConfig, analyse_cluster
from affinity.config.diagnostics import Diagnostic, error, sorted_diagnostics
from affinity.config.model import Location, RoutingConfig
from affinity.config.parser import analyse_file, analyse_text
from affinity.config.tokenizer import Token, tokenize
from affinity.exceptions import ConfigError

__all__ = [
    "ANNOUNCEMENTS",
    "FAUCET_END",
    "FAUCET_OPTIONS",
    "FAUCET_START",
    "FaucetConfig",
    "RouterAnalysis",
    "RouterConfig",
    "analyse_router_file",
    "analyse_router_text",
    "parse_router_file",
]

#: Opens a faucet block.
FAUCET_START = "add-faucet"
#: Closes a faucet block.
FAUCET_END = "end-faucet"
#: Options of a faucet block, each taking one value.
FAUCET_OPTIONS = ("control-topic", "subscription-topic", "announcements", "coverage-option")
#: Values of ``announcements`` (the AMPS-style faucet's ``Announcements``).
ANNOUNCEMENTS = ("default", "all")


@dataclass(frozen=True)
class FaucetConfig:
    """One ``add-faucet`` block."""

    control_topic: str
    subscription_topic: str
    announcements: str
    coverage_option: str | None
    location: Location


@dataclass(frozen=True)
class RouterConfig:
    """A router configuration: the data services, an optional faucet and optional cluster."""

    routing: RoutingConfig
    faucet: FaucetConfig | None
    cluster: ClusterConfig | None = None


@dataclass(frozen=True)
class RouterAnalysis:
    """A parsed router configuration (best effort) and every diagnostic, in file order."""

    config: RouterConfig
    diagnostics: tuple[Diagnostic, ...]

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The error diagnostics."""
        return tuple(item for item in self.diagnostics if item.is_error)


def _blank(text: str, start: Location, end: Location, end_length: int) -> str:
    """``text`` with everything from ``start`` to ``end`` + ``end_length`` replaced by spaces."""
    lines = text.split("\n")
    for number in range(start.line, end.line + 1):
        line = lines[number - 1]
        first = start.column - 1 if number == start.line else 0
        last = end.column - 1 + end_length if number == end.line else len(line)
        lines[number - 1] = line[:first] + " " * (last - first) + line[last:]
    return "\n".join(lines)


def _faucet_block(tokens: list[Token], index: int, diagnostics: list[Diagnostic]) -> tuple[FaucetConfig | None, int]:
    """Parses the block opened at ``tokens[index]``; returns it and the index of its end."""
    opening = tokens[index]
    values: dict[str, Token] = {}
    position = index + 1
    while position < len(tokens) and not tokens[position].is_keyword(FAUCET_END):
        token = tokens[position]
        if not token.is_keyword(*FAUCET_OPTIONS):
            expected = ", ".join(FAUCET_OPTIONS)
            diagnostics.append(
                error(token.location, f"unexpected {token.value!r} in {FAUCET_START} (expected {expected})")
            )
            position += 1
            continue
        if position + 1 >= len(tokens) or tokens[position + 1].is_keyword(FAUCET_END, *FAUCET_OPTIONS):
            diagnostics.append(error(token.location, f"{token.value} needs a value"))
            position += 1
            continue
        if token.value in values:
            diagnostics.append(error(token.location, f"{token.value} given twice in {FAUCET_START}"))
        values[token.value] = tokens[position + 1]
        position += 2
    if position >= len(tokens):
        diagnostics.append(error(opening.location, f"{FAUCET_START} without {FAUCET_END}"))
        return None, len(tokens) - 1
    valid = True
    for required in ("control-topic", "subscription-topic"):
        if required not in values:
            diagnostics.append(error(opening.location, f"{FAUCET_START}: {required} is required"))
            valid = False
    announcements = values.get("announcements")
    if announcements is not None and announcements.value not in ANNOUNCEMENTS:
        diagnostics.append(
            error(
                announcements.value_location,
                f"announcements {announcements.value!r}: must be one of {', '.join(ANNOUNCEMENTS)}",
            )
        )
        valid = False
    pattern = values.get("subscription-topic")
    if pattern is not None:
        try:
            _affinity.PosixRegex(pattern.value)
        except ValueError as exc:
            diagnostics.append(error(pattern.value_location, f"subscription-topic {pattern.value!r}: {exc}"))
            valid = False
    if not valid:
        return None, position
    coverage = values.get("coverage-option")
    return (
        FaucetConfig(
            control_topic=values["control-topic"].value,
            subscription_topic=values["subscription-topic"].value,
            announcements=announcements.value if announcements is not None else "default",
            coverage_option=coverage.value if coverage is not None else None,
            location=opening.location,
        ),
        position,
    )


def analyse_router_text(text: str, file: str = "<string>", *, load_plugins: bool = False) -> RouterAnalysis:
    """Parse a router configuration; never raises on bad input. ``load_plugins``: import the
    policy plugins the data services name (as ``affinity check`` does)."""
    tokens, diagnostics = tokenize(text, file)
    faucet: FaucetConfig | None = None
    seen = False
    remaining = text
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.is_keyword(FAUCET_END):
            diagnostics.append(error(token.location, f"{FAUCET_END} without {FAUCET_START}"))
            remaining = _blank(remaining, token.location, token.location, len(FAUCET_END))
        elif token.is_keyword(FAUCET_START):
            block, end = _faucet_block(tokens, index, diagnostics)
            if seen:
                diagnostics.append(error(token.location, f"only one {FAUCET_START} block is allowed"))
            elif block is not None:
                faucet = block
            seen = True
            last = tokens[end]
            remaining = _blank(remaining, token.location, last.location, len(last.value) + 2 * last.quoted)
            index = end
        index += 1
    tokenizer_problems = len(diagnostics)
    cluster, spans = analyse_cluster(tokens, diagnostics)
    for start, end in spans:
        last = tokens[end]
        remaining = _blank(remaining, tokens[start].location, last.location, len(last.value) + 2 * last.quoted)
    analysis = analyse_text(remaining, file, load_plugins=load_plugins)
    # The tokenizer's own findings (quotes) were reported once already.
    routing_diagnostics = [d for d in analysis.diagnostics if not _is_duplicate(d, diagnostics[:tokenizer_problems])]
    ordered = sorted_diagnostics([*diagnostics, *routing_diagnostics])
    return RouterAnalysis(RouterConfig(analysis.config, faucet, cluster), tuple(ordered))


def _is_duplicate(diagnostic: Diagnostic, earlier: list[Diagnostic]) -> bool:
    return any(d.location == diagnostic.location and d.message == diagnostic.message for d in earlier)


def analyse_router_file(path: str | os.PathLike[str], *, load_plugins: bool = False) -> RouterAnalysis:
    """:func:`analyse_router_text` on a file (text that is not UTF-8 is one diagnostic);
    :class:`OSError` if it cannot be read."""
    name = os.fspath(path)
    with open(name, "rb") as stream:
        data = stream.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        routing = analyse_file(name)  # reports where the text stops being UTF-8
        return RouterAnalysis(RouterConfig(routing.config, None), routing.diagnostics)
    return analyse_router_text(text, name, load_plugins=load_plugins)


def parse_router_file(path: str | os.PathLike[str]) -> RouterConfig:
    """Parse a router configuration file; :class:`ConfigError` listing every error
    (``file:line:column: error: message``), :class:`OSError` if unreadable."""
    name = os.fspath(path)
    with open(name, encoding="utf-8") as stream:
        text = stream.read()
    analysis = analyse_router_text(text, name)
    if analysis.errors:
        raise ConfigError("\n".join(str(item) for item in analysis.errors))
    return analysis.config
