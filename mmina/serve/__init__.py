"""``mmina serve``: a local web application over a store (a folder or an object-store URL).

It reads the store lazily through DuckDB and never writes to it: a runs page that follows
runs as they are recorded, the report's analysis for any run and evaluator, a paged and
filtered table of every episode, the trajectory viewer with each step's network requests,
runs side by side, and read-only SQL. See docs/architecture.md for where it sits.
"""
