"""Redaction on real code and real traffic nobody here wrote.

* The npm corpus (``tests/realweb/npm_corpus.py``) through the redactor in every way the recorder
  applies it (``tests/realweb/redaction_check.py``): the files redaction changed under any content
  type or learned a secret from (target 0), and the redactor's throughput: MB per CPU second of
  the recorder's two calls per body (learn, then redact) under each file's own type.
* The real-traffic corpus (``tests/realweb/traffic_corpus.py``): the real applications' raw
  traffic (URLs, request and response bodies, socket messages), GitHub's API traffic as its
  client library recorded it, and JSON shipped in packages,
  as is and with credentials planted in every structured place (``tests/realweb/traffic_check.py``):
  bytes checked, values changed that are not credentials (target 0 in the applications' and the
  API's traffic), and planted credentials found over planted.
"""

from __future__ import annotations

from collections import Counter

from bench.results import AT_LEAST, Section, Target
from tests.realweb.npm_corpus import PACKAGES, corpus_files, sample_files
from tests.realweb.redaction_check import check_corpus
from tests.realweb.traffic_check import check_traffic
from tests.realweb.traffic_corpus import (
    API,
    APPLICATION,
    PACKAGE,
    SAMPLE_APPS,
    Item,
    api_items,
    app_items,
    kind_of,
    package_items,
    sample_items,
)


def redaction_section(quick: bool = False) -> Section:
    """The whole corpora, or with ``quick`` the test suite's default samples."""
    section = Section("redaction")
    result = check_corpus(sample_files() if quick else corpus_files())
    section.add(
        "npm corpus: files",
        result.files,
        "",
        None,
        f"{len(PACKAGES)} packages, pinned" if not quick else "the default test run's sample",
    )
    section.add("npm corpus: size", round(result.bytes / 1e6, 1), "MB")
    changed = sorted({f"{c.path.name} ({c.mime}: {c.what})" for c in result.changes})
    section.add(
        "npm corpus: files changed or learned from",
        result.files_changed,
        "",
        Target(0),
        "; ".join(changed[:3]),
    )
    section.add(
        "redactor throughput (learn + redact)",
        round(result.mb_per_s, 1),
        "MB/s",
        None,
        f"{result.cpu_s:.1f} CPU s over the files' own types",
    )
    _traffic(section, quick)
    return section


def _traffic(section: Section, quick: bool) -> None:
    items = sample_items() if quick else app_items() + api_items() + package_items()
    for kind in (APPLICATION, API, PACKAGE):
        part = [i for i in items if kind_of(i.source) == kind]
        result = check_traffic(part)
        section.add(f"{kind}: bytes checked", result.bytes, "B", None, _describe(part, kind, quick))
        changed = result.changed_non_secrets
        names = Counter(r.name for r in changed)
        section.add(
            f"{kind}: changed non-secrets",
            len(changed),
            "",
            Target(0) if kind != PACKAGE else None,
            ", ".join(f"{n} ×{c}" for n, c in names.most_common(6)),
        )
        section.add(
            f"{kind}: credentials changed",
            len(result.replaced) - len(changed),
            "",
            None,
            ", ".join(sorted({r.name for r in result.replaced if r.credential})[:8]),
        )
        section.add(
            f"{kind}: planted credentials found",
            result.found,
            "",
            Target(result.planted, AT_LEAST),
            f"of {result.planted} planted; {len(result.changed_around)} items where something else moved",
        )


def _describe(items: list[Item], kind: str, quick: bool) -> str:
    places = Counter(i.place for i in items)
    sources = {i.source.split(":")[0] if kind == PACKAGE else i.source for i in items}
    sample = f"sample ({', '.join(SAMPLE_APPS)}): " if quick and kind == APPLICATION else ""
    return (
        f"{sample}{len(items)} items of {len(sources)} {'packages' if kind == PACKAGE else 'sources'}: "
        + ", ".join(f"{n} {p}" for p, n in sorted(places.items()))
    )
