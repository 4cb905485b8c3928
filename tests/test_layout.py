"""The dependency direction the layout promises, checked on the source text.

``runs`` imports ``ledger``, never the other way; no production module of ``runs`` imports the
kill-test harness or the fault points of ``harness.faults``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.sqlite_ok


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


def offenders(folder: str, banned: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in sorted(imported_modules(path)):
            if any(module == b or module.startswith(b + ".") for b in banned):
                out.append(f"{path.relative_to(ROOT)} imports {module}")
    return out


def test_the_ledger_never_imports_the_project() -> None:
    assert offenders("ledger", ("runs", "harness")) == []


def test_no_production_module_of_runs_imports_the_harness_or_the_fault_points() -> None:
    assert offenders("runs", ("harness", "harness.faults")) == []


def test_the_dashboard_never_imports_the_examples() -> None:
    assert offenders("runs/dashboard", ("ledger.examples",)) == []


def test_no_dashboard_view_module_imports_another() -> None:
    assert offenders("runs/dashboard/views", ("runs.dashboard.views",)) == []


def test_the_scan_sees_an_import_of_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import runs.operations.tasks\nfrom runs import tasks\nfrom harness import faults\n"
    )
    assert {
        "runs.operations.tasks",
        "runs",
        "harness",
        "harness.faults",
    } <= imported_modules(sample)
