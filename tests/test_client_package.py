"""The ``runledger-client`` distribution on its own: built from ``client/``, installed into a
fresh virtualenv that has no Django, it imports, and both clients talk to a live runledger."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from runs.api import tokens
from tests.support.packaging import ROOT, build_client_wheel

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def client_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("client-source") / "client"
    return build_client_wheel(source, tmp_path_factory.mktemp("client-wheel"))


@pytest.fixture(scope="module")
def client_venv(client_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with only the client's wheel (and its dependencies): its python."""
    venv = tmp_path_factory.mktemp("client-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(client_wheel)],
        check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return venv / "bin" / "python"


def _run(python: Path, code: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", code], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_client_wheel_holds_the_client_alone_at_runledgers_version(
    client_wheel: Path,
) -> None:
    names = zipfile.ZipFile(client_wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.startswith("runledger_client-")} == {
        "runledger_client"
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert client["version"] == project["version"], "released together, at one version"
    assert project["optional-dependencies"]["client"] == [f"runledger-client=={client['version']}"]
    assert client_wheel.name.startswith(f"runledger_client-{client['version']}-")


@pytest.mark.django_db(transaction=True)
def test_the_installed_client_has_no_django_and_talks_to_a_live_runledger(
    client_venv: Path, live_server: Any, tmp_path: Path
) -> None:
    secret = tokens.token_create(name="app", role="viewer").secret
    code = f"""
import asyncio, importlib.util, runledger_client
assert importlib.util.find_spec("django") is None, "django is installed"
assert runledger_client.__file__.startswith({str(client_venv.parent.parent)!r})
url, token = {live_server.url!r}, {secret!r}
with runledger_client.Client(url, token) as sync:
    print("sync", "refund" in [a.name for a in sync.agents()])

async def main():
    async with runledger_client.AsyncClient(url, token) as aio:
        print("async", "refund" in [a.name for a in await aio.agents()])
        try:
            await aio.start("refund", {{}})
        except runledger_client.Forbidden as refused:
            print("refused", refused.status)

asyncio.run(main())
print("version", runledger_client.__version__)
"""
    out = _run(client_venv, code, tmp_path).splitlines()
    version = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]["version"]
    # (which agents the server lists beside refund depends on the test modules imported before)
    assert out == ["sync True", "async True", "refused 403",
                   f"version {version}"]  # fmt: skip
