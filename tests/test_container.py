"""The container image and the compose file (deploy/), built and started: podman builds the
image from the wheel (with a wheelhouse beside it, as no package index is reachable), compose
starts web, worker, beat, PostgreSQL and Redis, ``/readyz`` turns green through the published
port, the sign-in page renders, the web container runs as uid 999, and a run started inside the
web container is executed by the worker container.

No registry is reachable here, so the base image is a Debian 12 root file system made with
``debootstrap`` from Debian's packages and imported (kept between runs as
``localhost/runledger-debian:bookworm``), and PostgreSQL and Redis come from Debian's packages
too (tests/support/containers/: a stand-in keeping the official postgres image's contract).
Needs podman, podman-compose and debootstrap (Debian's packages) and root; skipped without them.
Slow: the first run makes the root file system (a few minutes), every run builds two images.

This machine's own limits, set in a containers.conf the test writes, not in the shipped files:
podman may not set the container's rlimits here (``default_ulimits = []``), and crun does not
run on this host's hybrid cgroup layout, so runc (Debian's package) is the runtime when present.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.servers import free_port
from tests.support.packaging import ROOT, build_wheel

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_ok]
BASE = "localhost/runledger-debian:bookworm"
NEEDED = ("podman", "podman-compose", "debootstrap")
STAND_IN = ROOT / "tests" / "support" / "containers"


def _sh(*args: str, timeout: float = 900, **kwargs: object) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return str(done.stdout)


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"needs root and {', '.join(NEEDED)} (missing: {missing})")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    runtime = '\n[engine]\nruntime = "runc"\n' if shutil.which("runc") else ""
    conf.write_text(f"[containers]\ndefault_ulimits = []\n{runtime}")
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


@pytest.fixture(scope="module")
def base_image(podman_env: dict[str, str]) -> str:
    exists = subprocess.run(["podman", "image", "exists", BASE], env=podman_env, check=False)
    if exists.returncode != 0:
        root = Path(tempfile.mkdtemp(prefix="debootstrap-"))
        try:
            mirror = "http://deb.debian.org/debian"
            minimal = ["--variant=minbase", "--include=python3,python3-venv"]
            _sh("debootstrap", *minimal, "bookworm", str(root / "fs"), mirror, timeout=1800)
            tar = subprocess.Popen(
                ["tar", "-C", str(root / "fs"), "-c", "."], stdout=subprocess.PIPE
            )
            _sh("podman", "import", "-", BASE, stdin=tar.stdout, env=podman_env)
            assert tar.wait() == 0
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return BASE


@pytest.fixture(scope="module")
def images(
    base_image: str, podman_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(the runledger image, the services stand-in), built as the install page says: the
    context is the wheel alone, here with every dependency downloaded beside it and
    ``PIP_OPTIONS=--no-index`` because the build has no package index."""
    wheels = tmp_path_factory.mktemp("wheels")
    wheel = build_wheel(tmp_path_factory.mktemp("source") / "runledger", wheels)
    # The stand-in base's Python is Debian's 3.11.2, whose redis needs async-timeout (< 3.11.3).
    _sh(sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), f"{wheel}[s3]",
        "async-timeout>=4.0.3")  # fmt: skip
    tag = f"localhost/runledger-test:{os.getpid()}"
    services = f"localhost/runledger-services-test:{os.getpid()}"
    build = ["podman", "build", "--network=host", "--build-arg", f"BASE={base_image}"]
    containerfile = str(ROOT / "deploy" / "Containerfile")
    _sh(*build, "--build-arg", "PIP_OPTIONS=--no-index", "-f", containerfile, "-t", tag,
        str(wheels), env=podman_env)  # fmt: skip
    _sh(*build, "-f", str(STAND_IN / "Containerfile.services"), "-t", services, str(STAND_IN),
        env=podman_env)  # fmt: skip
    yield tag, services
    for image in (tag, services):
        subprocess.run(["podman", "rmi", "-f", image], env=podman_env, capture_output=True)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _wait(check: object, *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(1)
    return False


def test_compose_starts_the_stack_and_a_run_succeeds(
    images: tuple[str, str], podman_env: dict[str, str]
) -> None:
    tag, services = images
    project, port = f"rl{os.getpid()}", free_port()
    env = {
        **podman_env,
        "RUNLEDGER_IMAGE": tag,
        "RUNLEDGER_POSTGRES_IMAGE": services,
        "RUNLEDGER_REDIS_IMAGE": services,
        "RUNLEDGER_WEB_PORT": str(port),
        "SECRET_KEY": "a-container-test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "POSTGRES_PASSWORD": "a-container-test-password",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "RUNLEDGER_PLAIN_HTTP": "1",
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",
        "RUNLEDGER_SILENCED_CHECKS": "runledger.W001",
    }
    compose = ["podman-compose", "-p", project, "-f", str(ROOT / "deploy" / "compose.yaml")]
    web = f"{project}_web_1"
    try:
        _sh(*compose, "up", "-d", env=env, timeout=600)
        ready = f"http://127.0.0.1:{port}/readyz"
        assert _wait(lambda: _get(ready)[0] == 200, timeout=300), _logs(project, env)
        checks = json.loads(_get(ready)[1])["checks"]
        assert all(check["ok"] for check in checks.values()), checks
        status, page = _get(f"http://127.0.0.1:{port}/accounts/login/")
        assert status == 200 and 'name="password"' in page
        assert _sh("podman", "exec", web, "id", "-u", env=env).strip() == "999"

        started = _sh("podman", "exec", web, "runledger", "start_run", "refund", "--inputs",
                      '{"invoice_id": "inv_1001"}', env=env)  # fmt: skip
        run_id = started.split()[1].rstrip(":")

        def succeeded() -> bool:
            shown = _sh("podman", "exec", web, "runledger", "list_runs", env=env)
            return any(run_id in line and "succeeded" in line for line in shown.splitlines())

        assert _wait(succeeded, timeout=180), _logs(project, env)
    finally:
        subprocess.run([*compose, "down", "-v"], env=env, capture_output=True, timeout=300)


def _logs(project: str, env: dict[str, str]) -> str:
    out = []
    for part in ("postgres", "web", "worker", "beat"):
        done = subprocess.run(["podman", "logs", "--tail", "15", f"{project}_{part}_1"],
                              env=env, capture_output=True, text=True)  # fmt: skip
        out.append(f"== {part}\n{done.stdout}{done.stderr}")
    return "\n".join(out)
