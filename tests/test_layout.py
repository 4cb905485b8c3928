"""The boundaries the layout promises, checked on the source text.

- the product (``ledger``, ``runs``) never imports the development equipment (``harness``);
- ``ledger`` never imports ``runs``;
- the transitions (the one writer) and the selectors (the reads) never import the processes:
  a transition never runs a process (the dry replay's verdict is handed to it by its caller);
- the dashboard never imports the examples, and no dashboard view module imports another;
- ``ledger.agents`` — what an agent module imports — reaches no model module and no Django
  settings (checked here on the import graph; tests/ledger/test_agent_modules_without_django.py
  imports one in a fresh interpreter).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.sqlite_ok

#: What ``ledger.agents`` may reach at import time: building blocks with no tables.
DJANGO_FREE = {
    "ledger.agents",
    "ledger.canonical",
    "ledger.conf",
    "ledger.engine",
    "ledger.engine.aio",
    "ledger.engine.calls",
    "ledger.engine.context",
    "ledger.engine.decide",
    "ledger.engine.walk",
    "ledger.errors",
    "ledger.live",
    "ledger.llm",
    "ledger.moved",
    "ledger.pacing",
    "ledger.ratelimits",
    "ledger.registry",
    "ledger.retry",
    "ledger.schemas",
    "ledger.states",
    "ledger.teams",
}


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` yields ``a.b`` and ``a.b.c``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it is imported (not inside a function)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def offenders(folder: str, banned: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in sorted(imported_modules(path)):
            if any(module == b or module.startswith(b + ".") for b in banned):
                out.append(f"{path.relative_to(ROOT)} imports {module}")
    return out


def module_path(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def test_the_product_never_imports_the_equipment() -> None:
    assert offenders("ledger", ("harness",)) == []
    assert offenders("runs", ("harness",)) == []


def test_the_ledger_never_imports_the_project() -> None:
    assert offenders("ledger", ("runs",)) == []


def test_transitions_and_selectors_never_import_the_processes() -> None:
    """Processes (execute, sweep, the dry replay ...) call transitions and selectors, never the
    other way round — an import inside a function counts too, it closes the same circle."""
    assert offenders("ledger/transitions", ("ledger.processes",)) == []
    assert offenders("ledger/selectors", ("ledger.processes",)) == []


def test_the_dashboard_never_imports_the_examples() -> None:
    assert offenders("runs/dashboard", ("ledger.examples",)) == []


def test_no_dashboard_view_module_imports_another() -> None:
    assert offenders("runs/dashboard/views", ("runs.dashboard.views",)) == []


def test_what_an_agent_module_imports_reaches_no_table() -> None:
    """The import closure of ``ledger.agents`` (and of each package on the way) stays inside
    ``DJANGO_FREE``: a new import of the models, the transitions or the selectors there would
    make every agent module need a configured Django project again."""
    seen: set[str] = set()
    todo = ["ledger.agents"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        for i in range(1, len(parts)):  # importing a.b.c imports a and a.b first
            todo.append(".".join(parts[:i]))
        path = module_path(name)
        if path is None:
            continue
        todo.extend(m for m in top_level_imports(path) if m.startswith("ledger"))
    reached = {m for m in seen if module_path(m) is not None and m != "ledger"}
    assert reached <= DJANGO_FREE, sorted(reached - DJANGO_FREE)


def test_the_scan_sees_an_import_of_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import runs.operations.tasks\nfrom runs import tasks\nfrom harness import faults\n"
    )
    assert {"runs.operations.tasks", "runs", "runs.tasks", "harness", "harness.faults"} <= (
        imported_modules(sample)
    )


def test_an_import_inside_a_function_is_not_an_import_at_import_time(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import ledger.canonical\n\ndef f():\n    import ledger.models\n")
    assert top_level_imports(sample) == {"ledger.canonical"}
    assert "ledger.models" in imported_modules(sample)
