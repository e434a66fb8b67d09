"""The engine production uses (``affinity._affinity.PosixRegex``: glibc, with the in-crate
automaton for simple patterns) captures exactly what ``sed -r`` captures (leftmost-longest)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from affinity import ConfigError
from affinity.routing import MAX_PATTERN_POSITIONS, PosixRegex

# (pattern, subject): group 1 as sed prints \1 for the match.
CASES = [
    # The seed's examples.
    ("/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/alice-0/FXTRADE"),
    ("^/PRIVATE/([^/]+)/BLOTTER/TRADE", "/PRIVATE/alice/BLOTTER/TRADE"),
    ("^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/alice-bob-12/FXTRADE"),
    ("^/FILTER/PRIVATE/([^/]+)/BLOTTER/TRADE", "/FILTER/PRIVATE/bob/BLOTTER/TRADE"),
    # Long subjects (the automaton handles up to 256 bytes, glibc beyond).
    ("^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/" + "a-" * 120 + "7/FXTRADE"),
    ("^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/" + "a-" * 200 + "7/FXTRADE"),
    ("/([^/]*)/", "x" * 250 + "/abc/"),
    # Leftmost-longest: POSIX prefers the longest overall match, then longest subexpressions.
    ("x(a*)(ab)?", "xaab"),
    ("x*(xy)?", "xxy"),
    ("(a|ab)", "ab"),
    # The textbook case: strict POSIX says (ab)(c)(d); glibc and sed say (a)(bcd)() — we follow
    # glibc, which is what the DataSource and sed run.
    ("(a|ab)(c|bcd)(d*)", "abcd"),
    ("(ab)?(abcd)?", "abcd"),
    ("(a+)(a*)", "aaaa"),
    ("(a*)*", "b"),
    ("x(a?b)c", "xbc"),
    ("^a(b*)b", "abbb"),
    # Leftmost match, group not taking part, bracket expressions, intervals, classes.
    ("(a+)", "baaa"),
    ("(x)?y", "zy"),
    ("([]a]+)", "x]a]ay"),
    ("([[:digit:]]{2,3})", "ab12345"),
    ("([^/]+)$", "/a/b/last"),
    ("\\.([a-z]+)", "file.tar.gz"),
    ("(é+)", "caféé!"),
]

# Cases where Python's re (backtracking, first alternative wins) captures something else.
DIFFERS_FROM_PYTHON = [
    ("x(a*)(ab)?", "xaab"),
    ("x*(xy)?", "xxy"),
    ("(a|ab)", "ab"),
]

NO_MATCH = [
    ("^/PRIVATE/([^/]+)/BLOTTER/TRADE", "/PUBLIC/alice/BLOTTER/TRADE"),
    ("^/PRIVATE/([^/]+)-[0-9]+/FXTRADE", "/PRIVATE/alice/FXTRADE"),
]

SED = shutil.which("sed")
needs_sed = pytest.mark.skipif(SED is None, reason="sed is not installed")


def sed_capture(pattern: str, subject: str) -> str | None:
    """``sed -r -n 's<SOH>PATTERN<SOH><STX>\\1<ETX><SOH>p'``: group 1, or None if no match."""
    assert SED is not None
    script = f"s\x01{pattern}\x01\x02\\1\x03\x01p"
    result = subprocess.run(
        [SED, "-r", "-n", script],
        input=subject + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    if not result.stdout:
        return None
    start = result.stdout.index("\x02") + 1
    return result.stdout[start : result.stdout.index("\x03", start)]


@needs_sed
@pytest.mark.parametrize(("pattern", "subject"), CASES)
def test_capture_equals_sed_r(pattern: str, subject: str) -> None:
    expected = sed_capture(pattern, subject)
    assert expected is not None
    assert PosixRegex(pattern).capture(subject) == expected
    assert PosixRegex(pattern).is_match(subject)


@needs_sed
@pytest.mark.parametrize(("pattern", "subject"), NO_MATCH)
def test_no_match_is_none_like_sed_printing_nothing(pattern: str, subject: str) -> None:
    assert sed_capture(pattern, subject) is None
    assert PosixRegex(pattern).capture(subject) is None
    assert not PosixRegex(pattern).is_match(subject)


@pytest.mark.parametrize(("pattern", "subject"), DIFFERS_FROM_PYTHON)
def test_leftmost_longest_differs_from_python_re(pattern: str, subject: str) -> None:
    python_match = re.search(pattern, subject)
    assert python_match is not None
    assert PosixRegex(pattern).capture(subject) != (python_match.group(1) or "")


def test_group_count_is_number_of_capture_groups() -> None:
    assert PosixRegex("^/A/B").group_count == 0
    assert PosixRegex("^/([^/]+)/B").group_count == 1
    assert PosixRegex("(a)(b(c))").group_count == 3
    assert PosixRegex("\\(a\\)[(]").group_count == 0


def test_group_that_did_not_take_part_captures_empty_string() -> None:
    assert PosixRegex("(x)?y").capture("y") == ""


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("a(", "Unmatched ( or \\("), ("[a", "Unmatched ["), ("a{2,1}", "Invalid content"), ("a\0b", "NUL")],
)
def test_invalid_pattern_raises_config_error_with_glibc_message(pattern: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        PosixRegex(pattern)


def test_embedded_nul_in_a_subject_is_matched_not_truncated() -> None:
    assert PosixRegex("(a)$").capture("b\0a") == "a"


@pytest.mark.parametrize("pattern", ["a{1,1000}{1,1000}", "a{1,32767}{1,32767}", "(x[0-9]{1,500}){1,500}"])
def test_patterns_unrolling_beyond_the_budget_are_refused(pattern: str) -> None:
    with pytest.raises(ConfigError, match=f"limit of {MAX_PATTERN_POSITIONS}"):
        PosixRegex(pattern)
