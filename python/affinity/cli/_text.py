"""Help text for the terminal: the subcommand modules' docstrings without their reStructuredText markup."""

from __future__ import annotations

import re

#: ``literal`` -> literal.
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
#: :role:`target` (and :role:`~target`) -> target.
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
#: A paragraph ending in ``::`` (a literal block follows) -> a single colon.
_LITERAL_BLOCK = re.compile(r"::$", re.MULTILINE)


def help_text(doc: str | None) -> str:
    """``doc`` as a terminal shows it: literals unquoted, roles reduced to their target, ``::`` to ``:``."""
    text = _LITERAL.sub(r"\1", doc or "")
    text = _ROLE.sub(r"\1", text)
    return _LITERAL_BLOCK.sub(":", text)
