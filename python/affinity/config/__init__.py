"""Routing configuration: model, parser, checks."""
