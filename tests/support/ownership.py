"""Who may write ledger rows: ``ledger.transitions`` only (and the tests, migrations, seeders).

Two checks share the rule. ``static_writers`` reads the source: a queryset write (``update``,
``delete``, ``create``, ``bulk_create`` …) whose chain starts at ``Run`` or ``Step``, a
``.save()`` of a run- or step-named variable in a module that imports those models, or SQL
that writes their tables, outside the owner. ``install_runtime_guard`` watches every SQL
statement the test process sends: a write to ``ledger_run`` or ``ledger_step`` whose innermost
project frame is not the owner fails the test.
"""

from __future__ import annotations

import ast
import re
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OWNER = "ledger/transitions/"
#: Tooling that writes fixtures directly, by design: benchmarks and their seeders.
ALLOWED = {
    "harness/management/commands/bench_engine.py",  # measures the ORM write beside the SQL one
    "harness/management/commands/bench_levers.py",  # variants of the step write, measured
    "harness/management/commands/seed_bulk.py",  # 100,000 runs for the dashboard bench
}
WRITES = {"update", "delete", "create", "bulk_create", "bulk_update", "get_or_create",
          "update_or_create"}  # fmt: skip
MODELS = {"Run", "Step", "StreamEvent", "MailboxEvent"}
_ROWISH = re.compile(r"run|step|row|locked|fork", re.I)  # names that hold a Run or a Step
SQL_WRITE = re.compile(
    r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?ledger_(run|step|streamevent|mailboxevent)\b",
    re.I,
)


def product_sources() -> list[Path]:
    files = [*ROOT.glob("ledger/**/*.py"), *ROOT.glob("runs/**/*.py")]
    return sorted(p for p in files if "migrations" not in p.parts)


def _root_name(node: ast.AST) -> str | None:
    """The name a call chain starts at: ``Run`` for ``Run.objects.filter(...).update``."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def static_writers() -> list[str]:
    found = []
    for path in product_sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(OWNER) or rel in ALLOWED:
            continue
        text = path.read_text()
        tree = ast.parse(text)
        imports_models = any(
            isinstance(n, ast.ImportFrom)
            and n.module == "ledger.models"
            and {a.name for a in n.names} & MODELS
            for n in ast.walk(tree)
        )
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            attr = node.func.attr
            if attr in WRITES and _root_name(node.func.value) in MODELS:
                found.append(f"{rel}:{node.lineno}: {_root_name(node.func.value)}….{attr}()")
            elif attr == "save" and imports_models and _ROWISH.search(_root_name(node) or ""):
                found.append(f"{rel}:{node.lineno}: {_root_name(node)}.save() of a run or step")
        for match in SQL_WRITE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{rel}:{line}: SQL {match.group(0)!r}")
    return found


class OutsideWriter(AssertionError):
    pass


def _guard(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    if isinstance(sql, str) and SQL_WRITE.search(sql):
        frames = [f for f in traceback.extract_stack() if f.filename.startswith(str(ROOT))]
        project = [f for f in frames if "/.venv" not in f.filename and f.filename != __file__]
        inner = Path(project[-1].filename).relative_to(ROOT).as_posix() if project else ""
        allowed = (
            inner.startswith((OWNER, "tests/"))
            or "/migrations/" in inner
            or inner in ALLOWED
            or not inner
        )
        if not allowed:
            raise OutsideWriter(f"{inner} wrote a ledger row outside {OWNER}: {sql[:120]}")
    return execute(sql, params, many, context)


def install_runtime_guard() -> None:
    """Watch every connection this process opens (fan-out threads open their own)."""
    from django.db import connections
    from django.db.backends.signals import connection_created

    def attach(sender: Any, connection: Any, **kwargs: Any) -> None:
        if _guard not in connection.execute_wrappers:
            connection.execute_wrappers.append(_guard)

    connection_created.connect(attach, weak=False, dispatch_uid="ledger-owner-guard")
    for conn in connections.all(initialized_only=True):
        attach(None, conn)


if __name__ == "__main__":  # `python -m tests.support.ownership`: the static check, for make lint
    problems = static_writers()
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)
