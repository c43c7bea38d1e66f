"""What the bench's figures depend on besides the code: the machine's Python, kernel and cores,
and its transparent huge pages.

Chromium's CPU per step moves with the huge pages: much of the kernel's share of a step is page
faults on the fresh 10 MB buffers of each screenshot, and 64 kB huge pages fault a sixteenth as
often (``docs/performance.md``, "Tuning the machine"). So two runs' figures compare only when
these settings are the same; ``results.json`` keeps them beside the figures.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

HUGE_PAGES = Path("/sys/kernel/mm/transparent_hugepage")


def chosen(path: Path) -> str | None:
    """The value selected in a sysfs choice file (``always [madvise] never`` → ``madvise``);
    None where the file is absent or unreadable."""
    try:
        found = re.search(r"\[([^\]]+)\]", path.read_text())
    except OSError:
        return None
    return found.group(1) if found else None


def huge_pages(root: Path = HUGE_PAGES) -> dict[str, Any]:
    """The transparent huge pages of anonymous memory and of shared memory, and the sizes of
    multi-size huge pages used without being asked for (``always``, or ``inherit`` of an
    ``always`` parent). Empty where the kernel has none (not Linux, or no THP)."""
    anon = chosen(root / "enabled")
    if anon is None:
        return {}
    found: dict[str, Any] = {"anon": anon, "shmem": chosen(root / "shmem_enabled")}
    sizes = sorted(
        (_size_kb(folder.name), chosen(folder / "enabled")) for folder in root.glob("hugepages-*kB")
    )
    used = {"always"} | ({"inherit"} if anon == "always" else set())
    found["sizes always (kB)"] = [kb for kb, value in sizes if value in used]
    return found


def _size_kb(name: str) -> int:
    return int(name.removeprefix("hugepages-").removesuffix("kB"))


def machine() -> dict[str, Any]:
    """The machine as ``results.json`` records it."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "transparent huge pages": huge_pages(),
    }


def described(found: dict[str, Any]) -> str:
    """:func:`machine`'s record in one line (printed under the bench's table)."""
    pages = found["transparent huge pages"]
    if not pages:
        return (
            f"{found['cpus']} cores, {found['platform']}, Python {found['python']}; no transparent huge pages"
        )
    sizes = ", ".join(f"{kb} kB" for kb in pages["sizes always (kB)"]) or "none"
    return (
        f"{found['cpus']} cores, {found['platform']}, Python {found['python']}; transparent huge pages: "
        f"anonymous {pages['anon']}, shared {pages['shmem']}, sizes always {sizes}"
    )
