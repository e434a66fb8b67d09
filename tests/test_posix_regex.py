"""The ctypes glibc ERE binding captures exactly what ``sed -r`` captures (leftmost-longest)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from affinity.config.posix import PosixRegex, compile_ere

# (pattern, subject, group): the group sed prints as \N for the match.
CASES = [
    # The seed's examples.
    ("/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/alice-0/FXTRADE", 1),
    ("^/PRIVATE/([^/]+)/BLOTTER/TRADE", "/PRIVATE/alice/BLOTTER/TRADE", 1),
    ("^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/alice-bob-12/FXTRADE", 1),
    ("^/FILTER/PRIVATE/([^/]+)/BLOTTER/TRADE", "/FILTER/PRIVATE/bob/BLOTTER/TRADE", 1),
    # Leftmost-longest: POSIX prefers the longest overall match, then longest subexpressions.
    ("x(a*)(ab)?", "xaab", 1),
    ("x(a*)(ab)?", "xaab", 2),
    ("x*(xy)?", "xxy", 1),
    ("(a|ab)", "ab", 1),
    # The textbook case: strict POSIX says (ab)(c)(d); glibc and sed say (a)(bcd)() — we follow
    # glibc, which is what the DataSource and sed run.
    ("(a|ab)(c|bcd)(d*)", "abcd", 1),
    ("(a|ab)(c|bcd)(d*)", "abcd", 2),
    ("(a|ab)(c|bcd)(d*)", "abcd", 3),
    ("(ab)?(abcd)?", "abcd", 1),
    ("(ab)?(abcd)?", "abcd", 2),
    ("(a+)(a*)", "aaaa", 1),
    ("(a*)*", "b", 1),
    # Leftmost match, group not taking part, bracket expressions, intervals, classes.
    ("(a+)", "baaa", 1),
    ("(x)?y", "zy", 1),
    ("([]a]+)", "x]a]ay", 1),
    ("([[:digit:]]{2,3})", "ab12345", 1),
    ("([^/]+)$", "/a/b/last", 1),
    ("\\.([a-z]+)", "file.tar.gz", 1),
    ("(é+)", "caféé!", 1),
]

# Cases where Python's re (backtracking, first alternative wins) captures something else.
DIFFERS_FROM_PYTHON = [
    ("x(a*)(ab)?", "xaab", 1),
    ("x*(xy)?", "xxy", 1),
    ("(a|ab)", "ab", 1),
    ("(ab)?(abcd)?", "abcd", 2),
]

NO_MATCH = [
    ("^/PRIVATE/([^/]+)/BLOTTER/TRADE", "/PUBLIC/alice/BLOTTER/TRADE"),
    ("^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/alice/FXTRADE"),
]

SED = shutil.which("sed")
needs_sed = pytest.mark.skipif(SED is None, reason="sed is not installed")


def sed_substitute(pattern: str, subject: str, group: int) -> str | None:
    """``sed -r -n 's<SOH>PATTERN<SOH><STX>\\N<ETX><SOH>p'``: the line with the match marked."""
    assert SED is not None
    script = f"s\x01{pattern}\x01\x02\\{group}\x03\x01p"
    result = subprocess.run(
        [SED, "-r", "-n", script],
        input=subject + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout[:-1] if result.stdout else None


def engine_substitute(pattern: str, subject: str, group: int) -> str | None:
    """What :func:`sed_substitute` should print, from the engine's spans."""
    spans = PosixRegex(pattern).match(subject)
    if spans is None:
        return None
    start, end = spans[0]
    captured = PosixRegex(pattern).group(subject, group)
    return f"{subject[:start]}\x02{captured}\x03{subject[end:]}"


@needs_sed
@pytest.mark.parametrize(("pattern", "subject", "group"), CASES)
def test_match_and_group_equal_sed_r(pattern: str, subject: str, group: int) -> None:
    assert engine_substitute(pattern, subject, group) == sed_substitute(pattern, subject, group)


@needs_sed
@pytest.mark.parametrize(("pattern", "subject"), NO_MATCH)
def test_no_match_is_none_like_sed_printing_nothing(pattern: str, subject: str) -> None:
    assert sed_substitute(pattern, subject, 1) is None
    assert PosixRegex(pattern).capture(subject) is None


@pytest.mark.parametrize(("pattern", "subject", "group"), DIFFERS_FROM_PYTHON)
def test_leftmost_longest_differs_from_python_re(pattern: str, subject: str, group: int) -> None:
    python_match = re.search(pattern, subject)
    assert python_match is not None
    assert PosixRegex(pattern).group(subject, group) != (python_match.group(group) or "")


def test_seed_example_captures_username_from_session_name() -> None:
    regex = PosixRegex("/PRIVATE/([^/]+)-[0-9]+/FXTRADE")
    assert regex.capture("/PRIVATE/alice-0/FXTRADE") == "alice"


def test_group_count_is_number_of_capture_groups() -> None:
    assert PosixRegex("^/A/B").group_count == 0
    assert PosixRegex("^/([^/]+)/B").group_count == 1
    assert PosixRegex("(a)(b(c))").group_count == 3
    assert PosixRegex("\\(a\\)[(]").group_count == 0


def test_group_that_did_not_take_part_captures_empty_string() -> None:
    assert PosixRegex("(x)?y").capture("y") == ""


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("a(", "Unmatched ( or \\("), ("[a", "Unmatched ["), ("a{2,1}", "Invalid content")],
)
def test_invalid_pattern_raises_value_error_with_glibc_message(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        PosixRegex(pattern)


def test_nul_character_is_rejected() -> None:
    with pytest.raises(ValueError, match="NUL"):
        PosixRegex("a\0b")
    with pytest.raises(ValueError, match="NUL"):
        PosixRegex("(a)").capture("a\0")


def test_compile_ere_returns_an_engine_with_group_count_and_capture() -> None:
    compiled = compile_ere("^/PRIVATE/([^/]+)/")
    assert compiled.group_count == 1
    assert compiled.capture("/PRIVATE/bob/X") == "bob"
