"""The layering of docs/architecture.md, checked: each part imports only what it may.

The modules of a part are imported together in a fresh interpreter, and the test looks at which
third-party libraries and which other mmina parts that pulled in: what they pull in together holds
what each pulls in alone, so a clean part is clean module by module (one interpreter per part
instead of one per module). On a finding each module is imported alone, to name the one. (Imports
made inside a function on purpose, e.g. the fixture web started for a recording, do not count.)

And no module imports itself back: every ``import`` of every module, read from its source with
``ast`` (those inside functions and under ``if TYPE_CHECKING`` included), makes a graph of
modules with no circle in it.
"""

from __future__ import annotations

import ast
import functools
import json
import pkgutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

import mmina

CORE = {
    "mmina",
    "mmina.__main__",
    "mmina.errors",
    "mmina.lazy",
    "mmina.outputs",
    "mmina.stats",
    "mmina.unicode",
}
"""The modules left at the top of ``mmina/``: cross-cutting, standard library only."""
CORE_PARTS = {"actions", "executors", "models", "observations", "redaction", "tasks"}
"""With the top-level modules, the core: pure data and rules, which every other part may import."""
HEAVY = ("playwright", "duckdb", "click", "rich", "pyarrow", "PIL", "openai", "plotly")


def outer(*parts: str) -> set[str]:
    """What a part outside the core may import: the core and ``parts``."""
    return CORE_PARTS | set(parts)


# part -> (mmina parts it may import besides core and itself, third-party libraries it must not import)
RULES: dict[str, tuple[set[str], tuple[str, ...]]] = {
    "core": (set(), HEAVY),
    "redaction": (set(), HEAVY),
    "actions": (set(), HEAVY),
    "observations": (set(), HEAVY),
    "executors": (set(), HEAVY),  # the Ray executor imports ray (an optional extra) when asked for
    "tasks": ({"actions", "redaction"}, HEAVY),
    "models": ({"actions", "redaction"}, HEAVY),  # the client imports openai on first use
    "store": (outer(), ("playwright", "click", "rich", "openai", "plotly")),
    "agents": (outer("store"), ("playwright", "duckdb", "click", "rich")),
    "recorder": (outer("store", "agents", "evaluators"), ("click", "rich", "duckdb")),
    "replayer": (outer("store", "agents", "evaluators", "recorder"), ("click", "rich", "duckdb")),
    "evaluators": (outer("store"), ("playwright", "click", "rich")),
    "analysis": (outer("store"), ("playwright", "click", "rich")),
    "stepeval": (outer("store", "agents", "evaluators"), ("playwright", "click", "rich")),
    "importers": (outer("store", "agents", "evaluators"), ("playwright", "click", "rich")),
    "serve": (outer("store", "analysis", "evaluators"), ("playwright", "click", "rich")),
    "interchange": (outer("store", "recorder"), ("playwright", "duckdb", "click", "rich")),
}


def part_of(module: str) -> str | None:
    """``mmina.recorder.browser`` → ``recorder``; core modules → ``core``; not mmina → None."""
    if module in CORE:
        return "core"
    if not module.startswith("mmina."):
        return None
    return module.split(".")[1]


def modules_of(part: str) -> list[str]:
    if part == "core":
        return sorted(CORE - {"mmina.__main__"})
    package = __import__(f"mmina.{part}", fromlist=["_"])
    if not hasattr(package, "__path__"):  # a part that is one module
        return [f"mmina.{part}"]
    return [f"mmina.{part}"] + sorted(
        m.name for m in pkgutil.iter_modules(package.__path__, f"mmina.{part}.")
    )


def imported_by(*modules: str) -> list[str]:
    code = f"import sys, json, {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def violations(part: str, loaded: list[str]) -> list[str]:
    """What ``loaded`` (modules in ``sys.modules``) breaks of ``part``'s rule."""
    allowed, forbidden = RULES[part]
    heavy = sorted({name.split(".")[0] for name in loaded} & set(forbidden))
    parts = sorted({part_of(name) for name in loaded} - {None, "core", part} - allowed)
    return [f"imports {heavy}"] * bool(heavy) + [f"imports mmina parts {parts}"] * bool(parts)


def test_every_module_belongs_to_a_part() -> None:
    found = {m.name for m in pkgutil.walk_packages(mmina.__path__, "mmina.")}
    parts = {part_of(m) for m in found}
    assert parts <= set(RULES) | {"cli", "fixtures"}, parts - set(RULES)


@pytest.mark.parametrize("part", sorted(RULES))
def test_part_imports_only_what_it_may(part: str) -> None:
    modules = modules_of(part)
    together = violations(part, imported_by(*modules))
    if together:
        alone = {module: violations(part, imported_by(module)) for module in modules}
        assert {module: found for module, found in alone.items() if found} == {}
    assert together == [], f"{part}'s modules imported together: {together}"


def source_modules() -> dict[str, Path]:
    """Every module of ``mmina/`` by name (a package by its ``__init__.py``), read from the tree."""
    root = Path(mmina.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The mmina modules ``name`` imports anywhere in its source: at the top, inside functions,
    under ``if TYPE_CHECKING``. ``from package import name`` is the submodule ``name`` when there
    is one, else the package (whose ``__init__`` says where its names come from); importing a
    submodule is not counted as importing its parent packages."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {nearest(alias.name, modules) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found |= {nearest(f"{base}.{alias.name}", modules) for alias in node.names}
    return {module for module in found if module is not None and module != name}


def nearest(dotted: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``dotted`` that is an mmina module (None outside mmina)."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One circle through each group of modules that import each other (Tarjan's strongly
    connected components), as ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [circle_in(group, graph) for group in groups]


def circle_in(group: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest way from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for target in sorted(graph[node] & group):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                frontier.append(target)
    raise AssertionError(f"no circle in {group}")  # a strongly connected group always has one


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert sorted(circles(graph)) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_import_graph_reads_every_kind_of_import() -> None:
    graph = import_graph()
    assert len(graph) > 150
    assert "mmina.executors.ray_executor" in graph["mmina.executors.spread"]  # inside a function
    assert "mmina.evaluators.loading" in graph["mmina.evaluators.trace_evaluator"]  # under TYPE_CHECKING
    assert "mmina.recorder.acting" in graph["mmina.recorder.episode_browser"]  # from package import module
    assert "mmina.store" in graph["mmina.evaluators.loading"]  # from package import name


def test_no_module_imports_itself_back() -> None:
    found = circles(import_graph())
    assert found == [], "import circles (a -> b: a imports b):\n" + "\n".join(" -> ".join(c) for c in found)
