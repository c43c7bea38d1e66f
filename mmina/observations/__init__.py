"""Observations: what an agent sees at a step, read from Playwright's aria snapshot, with element ids
derived from the elements."""
