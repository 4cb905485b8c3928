"""What the wheel ships: the product (``ledger``, ``runs``) and the ``runledger`` command —
never the development equipment (the kill-test harness, the soak, fault points, benchmarks,
bulk seeding, the demo's staged crashes) and never the tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.slow]

LEFT_OUT = (".git", ".venv*", "build", "var", "site", "*.egg-info", "__pycache__", ".*_cache")
EQUIPMENT_WORDS = ("killtest", "soak", "bench", "seed_bulk", "faults", "demo_scenarios")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # A copy of the tree, so that no build/ folder of an earlier build (whose stale files a
    # wheel would pick up) is read, and none is left in the checkout.
    source = tmp_path_factory.mktemp("source") / "runledger"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_OUT))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    [path] = out.glob("runledger-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_holds_the_product_and_no_equipment(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    packages = {n.split("/")[0] for n in names if not n.startswith("runledger-")}
    assert packages == {"ledger", "runs"}, packages
    assert "ledger/agents.py" in names and "runs/operations/tasks.py" in names
    assert "ledger/faultpoints.py" in names  # the no-op hook, nothing behind it
    equipment = [n for n in names if any(word in n for word in EQUIPMENT_WORDS)]
    assert equipment == [], equipment


def test_the_wheel_installs_the_runledger_command(wheel: zipfile.ZipFile) -> None:
    [entry_points] = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "runledger = runs.cli:main" in text
