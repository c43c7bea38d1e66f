"""Replay from the archive and re-scoring (built in a later issue)."""
