"""Redaction: what never reaches the store, or the terminal, in clear (see docs/redaction.md)."""
