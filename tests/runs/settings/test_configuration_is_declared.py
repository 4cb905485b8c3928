"""Every setting is declared once, with a meaning, and the reference is generated from the
declarations: a setting read anywhere in the product without a declaration fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import global_settings
from django.test import override_settings

from ledger import conf as ledger_conf
from runs.settings import env

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = [p for d in ("ledger", "runs") for p in (ROOT / d).rglob("*.py")]

pytestmark = pytest.mark.sqlite_ok

SETTING_READ = re.compile(r"\b(?:settings|conf)\.([A-Z][A-Z0-9_]+)\b")
ENV_READ = re.compile(
    r"""(?:os\.environ(?:\.get)?[\[(]|os\.getenv\()\s*["']([A-Z][A-Z0-9_]*)["']"""
)
#: Read by Django, Celery or Python themselves, not settings of ours.
NOT_OURS = {"DJANGO_SETTINGS_MODULE"}


def project_names() -> set[str]:
    import runs.settings as project

    return {name for name in dir(project) if name.isupper()}


def test_every_setting_the_product_reads_is_declared_or_djangos() -> None:
    known = env.declared_names() | project_names() | set(dir(global_settings))
    unknown = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in PRODUCT
        if "migrations" not in path.parts
        for name in SETTING_READ.findall(path.read_text())
        if name not in known
    }
    assert unknown == set()


def test_every_environment_variable_the_product_reads_is_declared() -> None:
    declared = env.declared_names() | NOT_OURS
    undeclared = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in PRODUCT
        if path.parent.name != "settings"  # the settings read through runs.settings.env
        for name in ENV_READ.findall(path.read_text())
        if name not in declared
    }
    assert undeclared == set()


def test_the_settings_modules_read_the_environment_only_through_env() -> None:
    folder = ROOT / "runs" / "settings"
    direct = [
        p.name for p in folder.glob("*.py") if p.name != "env.py" and ENV_READ.search(p.read_text())
    ]
    assert direct == []


def test_every_declaration_says_what_it_means_and_is_in_the_reference() -> None:
    rows = env.reference()
    names = [r.name for r in rows]
    assert len(names) == len(set(names))  # declared once
    assert set(names) == env.declared_names()
    assert all(r.doc.strip() and r.section and r.kind and r.default for r in rows)
    assert set(ledger_conf.DECLARED) <= set(names)


def test_a_name_declared_twice_differently_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        env.declare("DEBUG", section="Web and security", kind="bool", default="on", doc="other")
    with pytest.raises(ValueError, match="ledger setting"):
        env.declare("RUNLEDGER_LEASE_SECONDS", section="x", kind="float", default="1", doc="x")


def test_the_accessor_reads_the_projects_setting_else_the_declared_default() -> None:
    assert ledger_conf.conf.RUNLEDGER_PREVIEW_SECONDS == 5.0
    with override_settings(RUNLEDGER_PREVIEW_SECONDS=1.5):
        assert ledger_conf.conf.RUNLEDGER_PREVIEW_SECONDS == 1.5
    with pytest.raises(AttributeError, match="not a declared runledger setting"):
        ledger_conf.conf.RUNLEDGER_NO_SUCH_THING  # noqa: B018


def test_a_derived_default_follows_the_setting_it_derives_from() -> None:
    values = ledger_conf.from_environ({"RUNLEDGER_LEASE_SECONDS": "8"})
    assert values["RUNLEDGER_EFFECT_MARGIN_SECONDS"] == 2.0
    assert ledger_conf.from_environ({})["RUNLEDGER_EFFECT_MARGIN_SECONDS"] == 5.0


@pytest.mark.parametrize(
    ("variable", "text", "says"),
    [
        ("RUNLEDGER_LEASE_SECONDS", "soon", "RUNLEDGER_LEASE_SECONDS='soon' is not a valid float"),
        ("RUNLEDGER_RUNS_PER_PAGE", "many", "RUNLEDGER_RUNS_PER_PAGE='many' is not a valid int"),
        ("RUNLEDGER_EFFECT_MARGIN_SECONDS", "20", "below half of RUNLEDGER_LEASE_SECONDS"),
    ],
)
def test_a_bad_value_stops_the_process_naming_the_variable(tmp_path, variable, text, says) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
    environ.update({"RUNLEDGER_VAR_DIR": str(tmp_path), variable: text})
    environ["DJANGO_SETTINGS_MODULE"] = "runs.settings"
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env=environ, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode != 0
    assert says in done.stderr
