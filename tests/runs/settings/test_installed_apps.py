"""Which optional apps a process installs, decided by its environment (runs/settings/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SHOW = (
    "import json, django; django.setup(); from django.conf import settings; "
    "print(json.dumps(settings.INSTALLED_APPS))"
)

#: A deployment's own agent module, not an example one.
PROBE = "tests.support.probe_agents"

pytestmark = pytest.mark.sqlite_ok


def installed(tmp_path: Path, **env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
    full = {
        **base,
        "DJANGO_SETTINGS_MODULE": "runs.settings",
        "RUNLEDGER_VAR_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        **env,
    }
    out = subprocess.run(
        [sys.executable, "-c", SHOW], cwd=ROOT, env=full, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_default_settings_install_no_example_app_and_no_harness(tmp_path: Path) -> None:
    apps = installed(tmp_path)
    assert "ledger.examples" not in apps
    assert "harness" not in apps


def test_naming_the_example_agents_brings_their_tables(tmp_path: Path) -> None:
    apps = installed(tmp_path, RUNLEDGER_AGENT_MODULES="ledger.examples.agents")
    assert "ledger.examples" in apps
    assert "harness" not in apps


def test_a_deployment_naming_its_own_agents_gets_no_example_tables(tmp_path: Path) -> None:
    apps = installed(tmp_path, RUNLEDGER_AGENT_MODULES=PROBE)
    assert "ledger.examples" not in apps
    assert "harness" not in apps


def test_the_examples_come_when_asked_for(tmp_path: Path) -> None:
    apps = installed(tmp_path, RUNLEDGER_AGENT_MODULES=PROBE, RUNLEDGER_EXAMPLES="1")
    assert "ledger.examples" in apps


def test_the_harness_comes_only_when_asked_for_and_brings_the_examples(tmp_path: Path) -> None:
    apps = installed(tmp_path, RUNLEDGER_AGENT_MODULES=PROBE, RUNLEDGER_HARNESS="1")
    assert {"harness", "ledger.examples"} <= set(apps)
