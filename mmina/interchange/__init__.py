"""The neighbours' formats: WARC in and out (WebSockets as IIPC #115 proposes), WACZ out, HAR
out, Inspect logs out (see docs/interchange.md).

One module per format; ``stored.py`` is what every export shares (which episodes, read one
file at a time, with what provenance and which parts redacted). Nothing here imports the
other side's software: the files are written and read by mmina alone, and the tests check
them with warcio, pywb, ReplayWeb.page, py-wacz, Playwright and inspect-ai.
"""
