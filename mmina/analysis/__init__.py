"""Metrics and reports over the store (built in a later issue)."""
