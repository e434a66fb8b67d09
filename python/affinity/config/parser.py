"""The parser: configuration text to a :class:`~affinity.config.model.RoutingConfig`.

The syntax is that of Caplin DataSource ``add-data-service`` blocks (source affinity)::

    add-data-service
        service-name trade-messaging-channel
        include-pattern "^/PRIVATE/([^/]+)/FXTRADE"
        add-source-group
            affinity trading-adapters "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE"
            policy workload            # extension: fallback policy or plugin
            selection modulo           # extension: modulo | rendezvous
            add-priority
                remote-label TradeAdapterA
                remote-label TradeAdapterB
            end-priority
        end-source-group
    end-data-service

Blocks may also be written on one line; see :mod:`affinity.config.tokenizer` for words, quotes
and comments. Parsing never stops at the first problem: every diagnostic is collected.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from affinity.config import checks
from affinity.config.diagnostics import Diagnostic, error, sorted_diagnostics
from affinity.config.model import (
    AffinityRule,
    DataService,
    Location,
    PeerLabel,
    PriorityGroup,
    RoutingConfig,
    SourceGroup,
)
from affinity.config.syntax import (
    BLOCK_END,
    BLOCK_START,
    DATA_SERVICE,
    KEYWORDS,
    OPTIONS,
    PRIORITY,
    SOURCE_GROUP,
    TOP_LEVEL,
)
from affinity.config.tokenizer import Token, tokenize
from affinity.exceptions import ConfigError

__all__ = [
    "Analysis",
    "analyse_file",
    "analyse_text",
    "parse_file",
    "parse_syntax",
    "parse_text",
]


@dataclass(frozen=True)
class Analysis:
    """A parsed configuration (best effort when there are errors) and every diagnostic."""

    config: RoutingConfig
    diagnostics: tuple[Diagnostic, ...]

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The error diagnostics, in file order."""
        return tuple(item for item in self.diagnostics if item.is_error)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        """The warning diagnostics, in file order."""
        return tuple(item for item in self.diagnostics if not item.is_error)

    @property
    def ok(self) -> bool:
        """Whether the configuration is usable (warnings allowed)."""
        return not self.errors


def parse_syntax(text: str, file: str = "<string>") -> tuple[RoutingConfig, list[Diagnostic]]:
    """Tokenize and parse ``text`` without the checklist checks; never raises."""
    tokens, diagnostics = tokenize(text, file)
    parser = _Parser(tokens, file, diagnostics)
    services = parser.parse()
    return RoutingConfig(data_services=tuple(services), source_file=file), diagnostics


def analyse_text(text: str, file: str = "<string>", *, load_plugins: bool = False) -> Analysis:
    """Parse ``text`` and run every check; never raises on bad input.

    With ``load_plugins``, policy plugins named by ``policy`` are imported to check them.
    """
    config, diagnostics = parse_syntax(text, file)
    diagnostics.extend(checks.check(config, load_plugins=load_plugins))
    ordered = sorted_diagnostics(diagnostics)
    warnings = tuple(str(item) for item in ordered if not item.is_error)
    return Analysis(dataclasses.replace(config, warnings=warnings), ordered)


def analyse_file(path: str | os.PathLike[str], *, load_plugins: bool = False) -> Analysis:
    """:func:`analyse_text` on a file; :class:`OSError` if it cannot be read."""
    name = os.fspath(path)
    with open(name, "rb") as stream:
        data = stream.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        location = Location(name, line, column)
        diagnostic = error(location, f"not UTF-8 text (byte 0x{data[exc.start]:02x})")
        return Analysis(RoutingConfig((), name), (diagnostic,))
    return analyse_text(text, name, load_plugins=load_plugins)


def parse_text(text: str, file: str = "<string>") -> RoutingConfig:
    """Parse and check ``text``; raise :class:`ConfigError` listing every error.

    Warnings do not raise; they are kept in :attr:`RoutingConfig.warnings`.
    """
    return _config_or_raise(analyse_text(text, file))


def parse_file(path: str | os.PathLike[str]) -> RoutingConfig:
    """Parse and check a file (see :func:`parse_text`); :class:`OSError` if unreadable."""
    return _config_or_raise(analyse_file(path))


def _config_or_raise(analysis: Analysis) -> RoutingConfig:
    if analysis.errors:
        raise ConfigError("\n".join(str(item) for item in analysis.errors))
    return analysis.config


@dataclass
class _ServiceDraft:
    name: str = ""
    name_location: Location | None = None
    patterns: list[Token] = field(default_factory=list)
    groups: list[SourceGroup] = field(default_factory=list)


@dataclass
class _GroupDraft:
    rules: list[AffinityRule] = field(default_factory=list)
    priorities: list[PriorityGroup] = field(default_factory=list)
    policy: Token | None = None
    selection: Token | None = None


class _Parser:
    """Recursive descent over tokens, one method per block, recovering after each problem."""

    def __init__(self, tokens: list[Token], file: str, diagnostics: list[Diagnostic]) -> None:
        self.tokens = tokens
        self.file = file
        self.position = 0
        self.diagnostics = diagnostics

    def parse(self) -> list[DataService]:
        services: list[DataService] = []
        while (token := self._next()) is not None:
            if token.is_keyword(DATA_SERVICE):
                services.append(self._data_service(token))
            else:
                self._misplaced(token, TOP_LEVEL)
        return services

    # -- blocks ---------------------------------------------------------------------------

    def _data_service(self, opening: Token) -> DataService:
        draft = _ServiceDraft()
        while self._open(opening, DATA_SERVICE):
            token = self._take()
            if token.is_keyword("service-name"):
                value = self._argument(token, "a service name")
                if value is None:
                    continue
                if draft.name_location is not None:
                    self._error(token.location, f"service-name given twice (first at {draft.name_location})")
                    continue
                draft.name, draft.name_location = value.value, value.value_location
            elif token.is_keyword("include-pattern"):
                value = self._argument(token, "a subject pattern")
                if value is not None:
                    draft.patterns.append(value)
            elif token.is_keyword(SOURCE_GROUP):
                draft.groups.append(self._source_group(token))
            else:
                self._misplaced(token, DATA_SERVICE)
        return DataService(
            name=draft.name,
            include_patterns=tuple(token.value for token in draft.patterns),
            source_groups=tuple(draft.groups),
            location=opening.location,
            name_location=draft.name_location,
            include_pattern_locations=tuple(token.value_location for token in draft.patterns),
        )

    def _source_group(self, opening: Token) -> SourceGroup:
        draft = _GroupDraft()
        while self._open(opening, SOURCE_GROUP):
            token = self._take()
            if token.is_keyword("affinity"):
                key = self._argument(token, "an affinity key")
                pattern = None if key is None else self._argument(token, "a regular expression")
                if key is not None and pattern is not None:
                    draft.rules.append(
                        AffinityRule(
                            key=key.value,
                            pattern=pattern.value,
                            location=token.location,
                            pattern_location=pattern.value_location,
                        )
                    )
            elif token.is_keyword("policy", "selection"):
                self._single_valued(token, draft)
            elif token.is_keyword(PRIORITY):
                draft.priorities.append(self._priority(token))
            else:
                self._misplaced(token, SOURCE_GROUP)
        group = SourceGroup(
            priority_groups=tuple(draft.priorities),
            affinity_rules=tuple(draft.rules),
            location=opening.location,
        )
        if draft.policy is not None:
            group = dataclasses.replace(group, policy=draft.policy.value, policy_location=draft.policy.value_location)
        if draft.selection is not None:
            group = dataclasses.replace(
                group,
                selection=draft.selection.value,
                selection_location=draft.selection.value_location,
            )
        return group

    def _single_valued(self, token: Token, draft: _GroupDraft) -> None:
        value = self._argument(token, OPTIONS[token.value].arguments[0])
        if value is None:
            return
        previous = draft.policy if token.value == "policy" else draft.selection
        if previous is not None:
            self._error(token.location, f"{token.value} given twice (first at {previous.value_location})")
        elif token.value == "policy":
            draft.policy = value
        else:
            draft.selection = value

    def _priority(self, opening: Token) -> PriorityGroup:
        labels: list[PeerLabel] = []
        while self._open(opening, PRIORITY):
            token = self._take()
            if token.is_keyword("label", "remote-label"):
                value = self._argument(token, "a peer label")
                if value is not None:
                    labels.append(
                        PeerLabel(
                            name=value.value,
                            remote=token.value == "remote-label",
                            location=value.value_location,
                        )
                    )
            else:
                self._misplaced(token, PRIORITY)
        return PriorityGroup(labels=tuple(labels), location=opening.location)

    # -- helpers ----------------------------------------------------------------------------

    def _open(self, opening: Token, block: str) -> bool:
        """Whether the block goes on; consumes its closing keyword, reports it unclosed."""
        token = self._peek()
        end = BLOCK_END[block]
        if token is None:
            self._error(
                opening.location,
                f"{block} is not closed: expected {end} before the end of the file",
            )
            return False
        if token.is_keyword(end):
            self.position += 1
            return False
        if not token.quoted and _closes(block, token.value):
            self._error(
                opening.location,
                f"{block} is not closed: expected {end} before {token.value} at {token.location}",
            )
            return False
        return True

    def _argument(self, keyword: Token, what: str) -> Token | None:
        """The argument after ``keyword``, or ``None`` (reported) when a keyword or EOF follows."""
        token = self._peek()
        if token is None:
            self._error(keyword.location, f"{keyword.value} expects {what}, found the end of the file")
            return None
        if not token.quoted and token.value in KEYWORDS:
            self._error(
                keyword.location,
                f"{keyword.value} expects {what}, found keyword {token.value} "
                f"(quote the value if it is meant literally)",
            )
            return None
        self.position += 1
        return token

    def _misplaced(self, token: Token, block: str) -> None:
        """Report a word that has no place in ``block``; skip what it would have taken."""
        if token.quoted:
            self._error(token.location, f"expected a keyword in {block}, found quoted text")
            return
        word = token.value
        if word in BLOCK_START:
            self._error(token.location, f"{word} without a matching {BLOCK_START[word]}")
            return
        option = OPTIONS.get(word)
        if option is None:
            self._error(token.location, f"unknown keyword {word!r} in {block}")
            self._skip_arguments_of(token)
            return
        where = "at the top level" if option.home == TOP_LEVEL else f"inside {option.home}"
        self._error(token.location, f"{word} is not allowed in {block}; it belongs {where}")
        if word in BLOCK_END:
            # Parse the misplaced block so its contents do not cascade into more errors.
            {DATA_SERVICE: self._data_service, SOURCE_GROUP: self._source_group}.get(word, self._priority)(token)
            return
        for what in option.arguments:
            if self._argument(token, what) is None:
                return

    def _skip_arguments_of(self, unknown: Token) -> None:
        """Skip the non-keyword words on the line of an unknown keyword (its arguments)."""
        while (token := self._peek()) is not None and token.location.line == unknown.location.line:
            if not token.quoted and token.value in KEYWORDS:
                return
            self.position += 1

    def _peek(self) -> Token | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _next(self) -> Token | None:
        token = self._peek()
        if token is not None:
            self.position += 1
        return token

    def _take(self) -> Token:
        token = self.tokens[self.position]
        self.position += 1
        return token

    def _error(self, location: Location, message: str) -> None:
        self.diagnostics.append(error(location, message))


#: For each block, the words that end it implicitly (an enclosing block's opener or closer).
_IMPLICIT_CLOSERS = {
    DATA_SERVICE: frozenset({DATA_SERVICE}),
    SOURCE_GROUP: frozenset({DATA_SERVICE, "end-data-service", SOURCE_GROUP}),
    PRIORITY: frozenset({DATA_SERVICE, "end-data-service", SOURCE_GROUP, "end-source-group", PRIORITY}),
}


def _closes(block: str, word: str) -> bool:
    return word in _IMPLICIT_CLOSERS[block]
