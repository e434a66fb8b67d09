"""Routing configuration: model, parser, checks."""

from __future__ import annotations

from affinity.config.checks import check
from affinity.config.diagnostics import Diagnostic, Severity
from affinity.config.model import (
    AffinityRule,
    DataService,
    Location,
    PeerLabel,
    PriorityGroup,
    RoutingConfig,
    SourceGroup,
)
from affinity.config.parser import (
    Analysis,
    analyse_file,
    analyse_text,
    parse_file,
    parse_syntax,
    parse_text,
)

__all__ = [
    "AffinityRule",
    "Analysis",
    "DataService",
    "Diagnostic",
    "Location",
    "PeerLabel",
    "PriorityGroup",
    "RoutingConfig",
    "Severity",
    "SourceGroup",
    "analyse_file",
    "analyse_text",
    "check",
    "parse_file",
    "parse_syntax",
    "parse_text",
]
