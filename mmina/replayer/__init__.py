"""Deterministic replay of stored episodes from the archived network traffic, and fidelity reports."""
