"""Diagnostics: what the parser and the checks found, each at a ``file:line:column``."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from affinity.config.model import Location


class Severity(enum.StrEnum):
    """How bad a diagnostic is: an error makes the configuration unusable, a warning does not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Diagnostic:
    """One finding, printed as ``file:line:column: severity: message``."""

    severity: Severity
    location: Location
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.severity}: {self.message}"

    @property
    def is_error(self) -> bool:
        """Whether this diagnostic makes the configuration unusable."""
        return self.severity is Severity.ERROR


def error(location: Location, message: str) -> Diagnostic:
    """An error diagnostic."""
    return Diagnostic(Severity.ERROR, location, message)


def warning(location: Location, message: str) -> Diagnostic:
    """A warning diagnostic."""
    return Diagnostic(Severity.WARNING, location, message)


def sort_key(diagnostic: Diagnostic) -> tuple[str, int, int]:
    """Order diagnostics by file position (stable for equal positions)."""
    location = diagnostic.location
    return (location.file, location.line, location.column)


def sorted_diagnostics(diagnostics: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    """Diagnostics in file order, as a compiler prints them."""
    return tuple(sorted(diagnostics, key=sort_key))


def summary(diagnostics: Iterable[Diagnostic]) -> str:
    """``2 errors, 1 warning`` (or ``no problems``)."""
    items = list(diagnostics)
    errors = sum(1 for item in items if item.is_error)
    warnings = len(items) - errors
    if not items:
        return "no problems"
    return f"{plural(errors, 'error')}, {plural(warnings, 'warning')}"


def plural(count: int, noun: str) -> str:
    """``1 error``, ``2 errors``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
