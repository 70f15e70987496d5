"""Shared page helpers: formatting (pure), chart template, small widgets."""
