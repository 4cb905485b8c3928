"""Building the wheel as a release would, for the tests that install it (test_packaging.py,
test_container.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
LEFT_OUT = (".git", ".venv*", "build", "var", "site", "*.egg-info", "__pycache__", ".*_cache")


def build_wheel(source_copy: Path, out: Path) -> Path:
    """The runledger wheel, built from a copy of the tree at ``source_copy`` (so that no build/
    folder of an earlier build, whose stale files a wheel would pick up, is read, and none is
    left in the checkout), written to ``out``."""
    shutil.copytree(ROOT, source_copy, ignore=shutil.ignore_patterns(*LEFT_OUT))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source_copy), "--no-deps", "-q", "-w", str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    [path] = out.glob("runledger-*.whl")
    return path


def build_client_wheel(source_copy: Path, out: Path) -> Path:
    """The runledger-client wheel, built from a copy of ``client/`` (as ``build_wheel``)."""
    shutil.copytree(ROOT / "client", source_copy, ignore=shutil.ignore_patterns(*LEFT_OUT))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source_copy), "--no-deps", "-q", "-w", str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    [path] = out.glob("runledger_client-*.whl")
    return path
