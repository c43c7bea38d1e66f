"""The layering of docs/architecture.md, checked: each part imports only what it may.

The modules of a part are imported together in a fresh interpreter, and the test looks at which
third-party libraries and which other mmina parts that pulled in: what they pull in together holds
what each pulls in alone, so a clean part is clean module by module (one interpreter per part
instead of one per module). On a finding each module is imported alone, to name the one. (Imports
made inside a function on purpose, e.g. the fixture web started for a recording, do not count.)
"""
from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import mmina

CORE = {"mmina", "mmina.__main__", "mmina.actions.grammar", "mmina.tasks.answers", "mmina.observations.aria_snapshot", "mmina.tasks.budget",
        "mmina.tasks.blocking", "mmina.observations.element_ids", "mmina.models.endpoint_gate", "mmina.errors", "mmina.tasks.harness_context", "mmina.lazy", "mmina.stats", "mmina.models.model_client",
        "mmina.models.model_input",
        "mmina.actions.navigation", "mmina.observations.observation", "mmina.outputs", "mmina.unicode", "mmina.executors.pool", "mmina.redaction.redact", "mmina.store.runs",
        "mmina.redaction.secret_json", "mmina.redaction.secret_names", "mmina.redaction.secret_patterns", "mmina.redaction.secret_rules",
        "mmina.redaction.secret_shapes", "mmina.redaction.secret_transport", "mmina.tasks.taskcheck", "mmina.tasks.task"}
HEAVY = ("playwright", "duckdb", "click", "rich", "pyarrow", "PIL", "openai", "plotly")

# part -> (mmina parts it may import besides core and itself, third-party libraries it must not import)
RULES: dict[str, tuple[set[str], tuple[str, ...]]] = {
    "core": (set(), HEAVY),
    "ray_executor": (set(), HEAVY),
    "store": (set(), ("playwright", "click", "rich", "openai", "plotly")),
    "agents": ({"store"}, ("playwright", "duckdb", "click", "rich")),
    "recorder": ({"store", "agents", "evaluators"}, ("click", "rich", "duckdb")),
    "replayer": ({"store", "agents", "evaluators", "recorder"}, ("click", "rich", "duckdb")),
    "evaluators": ({"store"}, ("playwright", "click", "rich")),
    "analysis": ({"store"}, ("playwright", "click", "rich")),
    "stepeval": ({"store", "agents", "evaluators"}, ("playwright", "click", "rich")),
    "importers": ({"store", "agents", "evaluators"}, ("playwright", "click", "rich")),
    "serve": ({"store", "analysis", "evaluators"}, ("playwright", "click", "rich")),
    "interchange": ({"store", "recorder"}, ("playwright", "duckdb", "click", "rich")),
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
    return [f"mmina.{part}"] + sorted(m.name for m in pkgutil.iter_modules(package.__path__, f"mmina.{part}."))


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
