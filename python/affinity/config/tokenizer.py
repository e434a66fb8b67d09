"""The tokenizer: configuration text to words with their ``line:column``.

Rules (those of Caplin-style DataSource configuration files):

* words are separated by blanks (space, tab, carriage return, form feed) and newlines; a block
  may sit on one line or span many, so newlines carry no meaning beyond counting lines;
* ``#`` at the start of a word starts a comment that runs to the end of the line (a ``#``
  inside a word, as in ``[#]``, is part of the word);
* a word may be quoted with ``'`` or ``"``; the quotes are removed and nothing inside is
  interpreted (no escapes: a regular expression keeps its backslashes). A quoted word ends on
  the line it starts on, and must be followed by a blank, a newline or the end of the text.

The tokenizer never raises: problems become :class:`~affinity.config.diagnostics.Diagnostic`
values and tokenizing goes on, so one run reports every problem.
"""

from __future__ import annotations

from dataclasses import dataclass

from affinity.config.diagnostics import Diagnostic, error
from affinity.config.model import Location

#: Characters that separate words on a line.
BLANKS = frozenset(" \t\r\f\v")
#: Characters that open (and close) a quoted word.
QUOTES = frozenset("'\"")


@dataclass(frozen=True)
class Token:
    """One word of the configuration."""

    #: The word, without its quotes.
    value: str
    #: Where the word starts (its opening quote, if quoted).
    location: Location
    #: Whether the word was quoted; a quoted word is never a keyword.
    quoted: bool = False

    @property
    def value_location(self) -> Location:
        """Where the first character of :attr:`value` is (just after the quote, if quoted)."""
        if not self.quoted:
            return self.location
        return Location(self.location.file, self.location.line, self.location.column + 1)

    def is_keyword(self, *keywords: str) -> bool:
        """Whether this is an unquoted word equal to one of ``keywords``."""
        return not self.quoted and self.value in keywords


def tokenize(text: str, file: str = "<string>") -> tuple[list[Token], list[Diagnostic]]:
    """Split ``text`` into tokens; return them with the problems found (unterminated quotes...)."""
    tokens: list[Token] = []
    diagnostics: list[Diagnostic] = []
    for line_index, line in enumerate(text.split("\n")):
        _tokenize_line(line, file, line_index + 1, tokens, diagnostics)
    return tokens, diagnostics


def _tokenize_line(line: str, file: str, line_number: int, tokens: list[Token], diagnostics: list[Diagnostic]) -> None:
    index = 0
    length = len(line)
    while index < length:
        char = line[index]
        if char in BLANKS:
            index += 1
            continue
        if char == "#":
            return  # comment to end of line
        location = Location(file, line_number, index + 1)
        if char in QUOTES:
            close = line.find(char, index + 1)
            if close < 0:
                diagnostics.append(error(location, f"unterminated quote: {char} is not closed on this line"))
                tokens.append(Token(line[index + 1 :], location, quoted=True))
                return
            tokens.append(Token(line[index + 1 : close], location, quoted=True))
            index = close + 1
            if index < length and line[index] not in BLANKS:
                diagnostics.append(
                    error(
                        Location(file, line_number, index + 1),
                        f"expected a blank after the closing quote {char}",
                    )
                )
            continue
        end = index
        while end < length and line[end] not in BLANKS:
            end += 1
        tokens.append(Token(line[index:end], location))
        index = end
