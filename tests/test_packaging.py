"""What the wheel ships: the product (``ledger``, ``runs``) and the ``runledger`` command —
never the development equipment (the kill-test harness, the soak, fault points, benchmarks,
bulk seeding, the demo's staged crashes) and never the tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

from harness.servers import free_port, wait_for_port
from runs.share import SHARED
from tests.support.packaging import ROOT, build_client_wheel, build_wheel

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.slow]

EQUIPMENT_WORDS = ("killtest", "soak", "bench", "seed_bulk", "faults", "demo_scenarios")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source") / "runledger"
    return zipfile.ZipFile(build_wheel(source, tmp_path_factory.mktemp("wheel")))


def test_the_wheel_holds_the_product_and_no_equipment(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    packages = {n.split("/")[0] for n in names if not n.startswith("runledger-")}
    assert packages == {"ledger", "runs"}, packages
    assert "ledger/agents.py" in names and "runs/operations/tasks.py" in names
    assert "ledger/faultpoints.py" in names  # the no-op hook, nothing behind it
    equipment = [n for n in names if any(word in n for word in EQUIPMENT_WORDS)]
    assert equipment == [], equipment


def test_the_wheel_holds_the_dashboards_templates_and_static_files(
    wheel: zipfile.ZipFile,
) -> None:
    names = set(wheel.namelist())
    for folder in ("templates", "static"):
        files = {str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*") if p.is_file()}
        assert files and {f"runs/{f}" for f in files} <= names, folder


def test_the_wheel_holds_the_changelog_the_alert_rules_and_the_grafana_board(
    wheel: zipfile.ZipFile,
) -> None:
    for in_wheel, in_checkout, _ in SHARED.values():
        assert wheel.read(f"runs/share/{in_wheel}") == (ROOT / in_checkout).read_bytes(), in_wheel


def test_the_wheels_version_is_the_projects(wheel: zipfile.ZipFile) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert Path(str(wheel.filename)).name.startswith(f"runledger-{declared}-")


def test_the_wheel_installs_the_runledger_command(wheel: zipfile.ZipFile) -> None:
    [entry_points] = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "runledger = runs.cli:main" in text


DEV_TOOLS = ("pytest", "mypy", "ruff", "playwright", "django-stubs", "hypothesis", "pyinstrument")


@pytest.fixture(scope="module")
def installed(wheel: zipfile.ZipFile, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its s3 and client extras installed (``pip install
    'runledger[s3,client]'``, from the built files: the client extra is the runledger-client
    distribution, found beside), as production installs it: its bin/ folder."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    assert wheel.filename is not None
    beside = tmp_path_factory.mktemp("client-wheel")
    build_client_wheel(tmp_path_factory.mktemp("client-source") / "client", beside)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--find-links", str(beside),
         f"{wheel.filename}[s3,client]"],
        check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return venv / "bin"


def _outside(tmp_path: Path, **env: str) -> dict[str, str]:
    """An environment with nothing of the checkout or of the test run in it."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNLEDGER_", "DJANGO_", "PYTHON", "VIRTUAL_ENV", "AWS_"))
        and k not in ("DATABASE_URL", "CELERY_BROKER_URL")
    }
    environ.update(
        RUNLEDGER_VAR_DIR=str(tmp_path / "var"),
        SECRET_KEY="a-production-secret-key-that-is-long-and-random-enough-0123456789",
        ALLOWED_HOSTS="127.0.0.1",
        **env,
    )
    return environ


def _in(bin_dir: Path, tmp_path: Path, *args: str, **env: str) -> str:
    done = subprocess.run(
        [str(bin_dir / args[0]), *args[1:]], cwd=tmp_path, env=_outside(tmp_path, **env),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_production_installs_no_development_tool(installed: Path, tmp_path: Path) -> None:
    listed = json.loads(_in(installed, tmp_path, "pip", "list", "--format", "json"))
    names = {p["name"].lower() for p in listed}
    assert "runledger" in names and "django" in names and "django-storages" in names
    assert "runledger-client" in names  # runledger[client]
    assert [tool for tool in DEV_TOOLS if tool in names] == []


def test_the_installed_package_checks_migrates_and_serves_the_dashboard(
    installed: Path, tmp_path: Path
) -> None:
    where = _in(installed, tmp_path, "python", "-c", "import runs; print(runs.__file__)")
    assert where.startswith(str(installed.parent)), where  # the wheel's copy, not the checkout
    assert "no issues" in _in(installed, tmp_path, "runledger", "check", "--deploy")
    _in(installed, tmp_path, "runledger", "migrate", "-v0")
    _in(installed, tmp_path, "runledger", "collectstatic", "--noinput", "-v0")
    port = free_port()
    web = subprocess.Popen(
        [str(installed / "python"), "-m", "gunicorn", "-c", "python:runs.gunicorn_conf",
         "--bind", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=_outside(tmp_path, RUNLEDGER_PLAIN_HTTP="1", RUNLEDGER_ALLOW_EMBEDDED="1"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, timeout=120)
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=30)
        html = page.read().decode()
        assert page.status == 200 and 'name="password"' in html
        [css] = re.findall(r'href="(/static/[^"]+\.css)"', html)
        style = urllib.request.urlopen(f"http://127.0.0.1:{port}{css}", timeout=30)
        assert style.status == 200 and style.headers["Content-Type"].startswith("text/css")
    finally:
        web.terminate()
        web.wait(timeout=60)


def test_the_installed_command_says_its_version_and_shares_its_files(
    installed: Path, tmp_path: Path
) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _in(installed, tmp_path, "runledger", "--version").startswith(f"runledger {declared} (")
    for name, (_, in_checkout, _) in SHARED.items():
        where = _in(installed, tmp_path, "runledger", "share", name, "--path").strip()
        assert where.startswith(str(installed.parent)), where  # the installed copy's file
        shared = _in(installed, tmp_path, "runledger", "share", name)
        assert shared == (ROOT / in_checkout).read_text(), name
    assert "alerts" in _in(installed, tmp_path, "runledger", "share")


def test_the_installed_package_writes_nothing_inside_itself(
    installed: Path, tmp_path: Path
) -> None:
    """Without RUNLEDGER_VAR_DIR, the generated secret key goes to the user's data directory,
    not into site-packages (``runledger help`` used to write ``site-packages/var/secret_key``)."""
    env = _outside(tmp_path, HOME=str(tmp_path / "home"))
    del env["RUNLEDGER_VAR_DIR"], env["SECRET_KEY"]  # the defaults: a key is made and kept
    done = subprocess.run(
        [str(installed / "runledger"), "help"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "home" / ".local" / "share" / "runledger" / "secret_key").is_file()
    written = [p for p in (installed.parent / "lib").rglob("secret_key")]
    assert written == []


def test_the_client_extra_gives_ledger_client(installed: Path, tmp_path: Path) -> None:
    code = (
        "import sys; from ledger.client import AsyncClient, Client; import runledger_client; "
        "assert Client is runledger_client.Client and AsyncClient is runledger_client.AsyncClient; "
        "print(sorted(m for m in sys.modules if m.startswith('django')))"
    )
    assert _in(installed, tmp_path, "python", "-c", code).strip() == "[]"


def test_the_s3_extra_makes_the_bucket_the_archive_store(installed: Path, tmp_path: Path) -> None:
    code = (
        "import django; django.setup(); from ledger.processes import retention; "
        "print(retention.describe(retention.archive_store()))"
    )
    bucket = {"DJANGO_SETTINGS_MODULE": "runs.settings", "RUNLEDGER_ARCHIVE_S3_BUCKET": "ledger-bk"}
    shown = _in(installed, tmp_path, "python", "-c", code, **bucket)
    assert shown.strip() == "s3://ledger-bk/runledger/archive"
