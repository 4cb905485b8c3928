"""The system checks say out loud when development equipment or the examples are installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.sqlite_ok


def check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RUNLEDGER_", "DEBUG"))}
    environ.update({"RUNLEDGER_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "runs.settings"})
    environ.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
    )


def test_the_default_settings_pass_the_checks(tmp_path: Path) -> None:
    done = check(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "runledger." not in done.stdout + done.stderr


def test_the_harness_with_debug_off_is_an_error(tmp_path: Path) -> None:
    done = check(tmp_path, RUNLEDGER_HARNESS="1")
    assert done.returncode != 0
    assert "runledger.E001" in done.stderr


def test_the_harness_under_debug_or_silenced_on_purpose_passes(tmp_path: Path) -> None:
    assert "runledger.E001" not in check(tmp_path, RUNLEDGER_HARNESS="1", DEBUG="1").stderr
    silenced = check(
        tmp_path, RUNLEDGER_HARNESS="1", RUNLEDGER_SILENCED_CHECKS="runledger.E001,runledger.W001"
    )
    assert silenced.returncode == 0, silenced.stderr


def test_the_examples_are_a_warning(tmp_path: Path) -> None:
    done = check(tmp_path, RUNLEDGER_AGENT_MODULES="ledger.examples.agents")
    assert done.returncode == 0
    assert "runledger.W001" in done.stderr + done.stdout
