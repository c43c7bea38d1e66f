"""Real code nobody here wrote: distribution bundles of widely used npm packages, for redaction.

The redactor must leave every byte of code and data that is not a secret as it was (a changed
bundle is a page that no longer runs in a replay). The test and ``bench --only redaction``
pass these files through it in every way the recorder does (see ``tests/redaction_check.py``).

The packages are installed once from npm into the real-web cache (``installs.npm_packages``,
folder ``npm-corpus``), pinned, so the corpus is the same on every machine; from each, the files
it ships for browsers are taken: its entry points, its largest files, and an even spread of the
rest (``.js .mjs .cjs .css .json .map .html``), at most :data:`PER_PACKAGE` of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.realweb.installs import npm_packages

PACKAGES = (
    "react@18.3.1",
    "react-dom@18.3.1",
    "vue@3.5.45",
    "@angular/core@17.3.12",
    "@angular/common@17.3.12",
    "zone.js@0.14.10",
    "swagger-ui-dist@5.35.0",
    "monaco-editor@0.45.0",
    "plotly.js-dist@2.35.3",
    "@bokeh/bokehjs@3.10.0",
    "quasar@2.27.0",
    "jquery@3.8.0",
    "lodash@4.18.1",
    "d3@7.9.2",
    "three@0.160.1",
    "chart.js@4.6.1",
    "moment@2.31.0",
    "axios@1.21.1",
    "rxjs@7.8.2",
    "bootstrap@5.3.9",
    "highlight.js@11.12.0",
    "codemirror@5.65.21",
    "katex@0.16.47",
    "mathjax@3.2.2",
    "echarts@5.6.0",
    "leaflet@1.9.4",
    "handlebars@4.7.10",
    "marked@12.0.2",
    "@popperjs/core@2.11.8",
    "socket.io-client@4.8.4",
    "preact@10.29.8",
    "alpinejs@3.17.5",
    "htmx.org@1.9.12",
    "@fortawesome/fontawesome-free@6.7.2",
    "bulma@0.9.4",
    "vega@5.33.1",
    "ace-builds@1.45.2",
)
"""Pinned: a new release must not change what the test checks without a commit saying so."""
FOLDER = "npm-corpus"
SAMPLE_PACKAGES = (
    "swagger-ui-dist@5.35.0",
    "@bokeh/bokehjs@3.10.0",
    "vue@3.5.45",
    "react-dom@18.3.1",
    "jquery@3.8.0",
    "socket.io-client@4.8.4",
    "bootstrap@5.3.9",
    "katex@0.16.47",
    "marked@12.0.2",
    "axios@1.21.1",
)
"""The default test run's packages (installed on their own: a few MB): the API explorer whose
bundle redaction once broke, Bokeh's bundle with its default token, and kinds of the rest."""
SAMPLE_FOLDER = "npm-corpus-sample"
SAMPLE_SIZE = 36
SAMPLE_MAX_BYTES = 400_000
"""A sampled file is at most this big (the default run takes seconds), but for the one bundle
that must be in it: the API explorer's."""
MUST_SAMPLE = "swagger-ui-dist/swagger-ui-bundle.js"
PER_PACKAGE = 12
LARGEST = 4
"""Of each package's files: its entry points, then its largest, then an even spread by name."""
ENTRY_FIELDS = ("main", "module", "browser", "unpkg", "jsdelivr", "style")
MIME_TYPES = {
    ".js": "application/javascript",
    ".mjs": "text/javascript",
    ".cjs": "application/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".map": "application/json",
    ".html": "text/html",
}
"""The content type a server sends for each kind of file (the recorder reads the HAR's)."""


def package_name(spec: str) -> str:
    return spec.rpartition("@")[0]


def corpus_files() -> list[Path]:
    """Every file of the corpus (installed first if need be), in a fixed order."""
    modules = npm_packages(PACKAGES, FOLDER)
    return [path for spec in PACKAGES for path in _chosen(modules / package_name(spec))]


def sample_files() -> list[Path]:
    """The default run's sample: an even spread of the sample packages' files, small ones."""
    modules = npm_packages(SAMPLE_PACKAGES, SAMPLE_FOLDER)
    files = [path for spec in SAMPLE_PACKAGES for path in _chosen(modules / package_name(spec))]
    must = [p for p in files if p.as_posix().endswith(MUST_SAMPLE)]
    small = [p for p in files if p.stat().st_size <= SAMPLE_MAX_BYTES and p not in must]
    step = max(1, len(small) // (SAMPLE_SIZE - len(must)))
    return must + small[::step][: SAMPLE_SIZE - len(must)]


def _chosen(package: Path) -> list[Path]:
    candidates = sorted(
        p
        for p in package.rglob("*")
        if p.suffix in MIME_TYPES and p.is_file() and "node_modules" not in p.relative_to(package).parts
    )
    chosen = [p for p in _entries(package) if p in candidates]
    chosen += [p for p in sorted(candidates, key=lambda p: -p.stat().st_size) if p not in chosen][:LARGEST]
    rest = [p for p in candidates if p not in chosen]
    room = PER_PACKAGE - len(chosen)
    if room > 0 and rest:
        chosen += rest[:: max(1, len(rest) // room)][:room]
    return sorted(chosen[:PER_PACKAGE])


def _entries(package: Path) -> list[Path]:
    """The files the package's manifest names for bundlers and CDNs."""
    manifest = json.loads((package / "package.json").read_text())
    named = [manifest.get(key) for key in ENTRY_FIELDS]
    return [(package / value).resolve() for value in named if isinstance(value, str)]


def mime_of(path: Path) -> str:
    return MIME_TYPES[path.suffix]
