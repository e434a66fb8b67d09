"""A lexical scan of a POSIX extended regular expression, for the checks.

It does not match anything (``affinity._affinity.PosixRegex`` does, with glibc); it finds where the
capture groups, ``|`` operators and escaped slashes are, so a diagnostic can point at the
character at fault and the checks can compare the sub-patterns that capture values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: ``/.../`` with optional Perl/JavaScript flags after the closing slash.
_DELIMITED = re.compile(r"\A/(?P<body>.*)/[a-z]*\Z", re.DOTALL)


@dataclass
class EreScan:
    """Positions (0-based indices into the pattern) of the interesting parts of an ERE."""

    #: ``(start, end)`` of each capture group in opening order: ``start`` indexes the ``(``,
    #: ``end`` the matching ``)`` (``-1`` when unbalanced).
    groups: list[tuple[int, int]] = field(default_factory=list)
    #: Each ``|`` alternation operator (outside bracket expressions, not escaped).
    alternations: list[int] = field(default_factory=list)
    #: Each ``\\/`` (an escaped slash; undefined in POSIX ERE).
    escaped_slashes: list[int] = field(default_factory=list)
    #: Each ``/`` outside bracket expressions and not escaped.
    slashes: list[int] = field(default_factory=list)

    def group_body(self, pattern: str, index: int) -> str:
        """The text between the parentheses of capture group ``index`` (0-based)."""
        start, end = self.groups[index]
        return pattern[start + 1 : end if end >= 0 else len(pattern)]


def scan(pattern: str) -> EreScan:
    """Scan ``pattern``; never raises, whatever the text."""
    result = EreScan()
    open_groups: list[int] = []
    index = 0
    length = len(pattern)
    while index < length:
        char = pattern[index]
        if char == "\\":
            if index + 1 < length and pattern[index + 1] == "/":
                result.escaped_slashes.append(index)
            index += 2
            continue
        if char == "[":
            index = _skip_bracket(pattern, index)
            continue
        if char == "(":
            open_groups.append(len(result.groups))
            result.groups.append((index, -1))
        elif char == ")" and open_groups:
            group = open_groups.pop()
            result.groups[group] = (result.groups[group][0], index)
        elif char == "|":
            result.alternations.append(index)
        elif char == "/":
            result.slashes.append(index)
        index += 1
    return result


def _skip_bracket(pattern: str, index: int) -> int:
    """Index just past the bracket expression opening at ``index`` (or the end of the text)."""
    length = len(pattern)
    index += 1
    if index < length and pattern[index] == "^":
        index += 1
    if index < length and pattern[index] == "]":
        index += 1  # a leading ] is literal
    while index < length:
        char = pattern[index]
        if char == "]":
            return index + 1
        if char == "[" and index + 1 < length and pattern[index + 1] in ".:=":
            terminator = pattern[index + 1] + "]"
            close = pattern.find(terminator, index + 2)
            index = length if close < 0 else close + 2
            continue
        index += 1
    return length


def delimited(pattern: str) -> bool:
    """Whether ``pattern`` looks wrapped in Perl-style ``/.../`` delimiters.

    ``/PRIVATE/([^/]+)/`` is a valid ERE starting and ending with a slash, so the test is
    stricter: the body between the outer slashes must hold no bare ``/`` (inside delimiters a
    slash has to be escaped, so a delimited regex only has escaped ones).
    """
    match = _DELIMITED.match(pattern)
    if match is None or len(pattern) < 2:
        return False
    return not scan(match.group("body")).slashes
