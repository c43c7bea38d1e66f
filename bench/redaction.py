"""Redaction on real code nobody here wrote: the npm corpus (``tests/realweb/npm_corpus.py``)
through the redactor in every way the recorder applies it (``tests/realweb/redaction_check.py``).

Figures: the corpus (files, MB), the files redaction changed under any content type or learned a
secret from (target 0), and the redactor's throughput: MB per CPU second of the recorder's two
calls per body (learn, then redact) under each file's own type, in this process.
"""
from __future__ import annotations

from bench.results import Section, Target
from tests.realweb.npm_corpus import PACKAGES, corpus_files, sample_files
from tests.realweb.redaction_check import check_corpus


def redaction_section(quick: bool = False) -> Section:
    """The whole corpus, or with ``quick`` the test suite's default sample."""
    section = Section("redaction")
    result = check_corpus(sample_files() if quick else corpus_files())
    section.add("npm corpus: files", result.files, "", None, f"{len(PACKAGES)} packages, pinned" if not quick
                else "the default test run's sample")
    section.add("npm corpus: size", round(result.bytes / 1e6, 1), "MB")
    changed = sorted({f"{c.path.name} ({c.mime}: {c.what})" for c in result.changes})
    section.add("npm corpus: files changed or learned from", result.files_changed, "", Target(0),
                "; ".join(changed[:3]))
    section.add("redactor throughput (learn + redact)", round(result.mb_per_s, 1), "MB/s",
                None, f"{result.cpu_s:.1f} CPU s over the files' own types")
    return section
