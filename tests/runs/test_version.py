"""runledger says its own version in one voice: ``runledger --version`` (and ``manage.py``), the
API's root and the dashboard's footer all give ``ledger.__version__``, which is the installed
distribution's."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import django
import pytest

import ledger
from tests.support.dashboard_runs import restore_roles, signed_in

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_the_installed_distributions() -> None:
    assert ledger.__version__ == metadata.version("runledger")


@pytest.mark.sqlite_ok
@pytest.mark.parametrize("command", [["-m", "runs.cli"], [str(ROOT / "manage.py")]])
@pytest.mark.parametrize("flag", ["--version", "version"])
def test_the_command_prints_runledgers_version_not_djangos(
    command: list[str], flag: str, tmp_path: Path
) -> None:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "RUNLEDGER_VAR_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, *command, flag], cwd=tmp_path, env=environ,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"runledger {ledger.__version__} ("), done.stdout
    assert f"Django {django.get_version()}" in done.stdout


@pytest.mark.django_db
def test_the_dashboards_footer_shows_the_version(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    page = signed_in("viewer").get("/", follow=True)
    assert page.status_code == 200
    assert f'<footer class="site-footer small muted">runledger {ledger.__version__}</footer>' in (
        page.content.decode()
    )
