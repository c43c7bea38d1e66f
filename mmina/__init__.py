"""mmina: record, replay, re-score and analyse web agents on MMInA-style multihop tasks."""

__version__ = "0.1.0"
