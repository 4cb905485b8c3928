"""The build's one hook: the dashboard's ``templates/`` and ``static/`` (top level in a source
checkout, beside ``manage.py``) ship in the wheel inside the ``runs`` package, as
``runs/templates`` and ``runs/static``, where the settings find them in an installed copy; and
the files for the platform around it (the CHANGELOG, the alert rules, the Grafana board: the
``SHARED`` of ``runs/share.py``) as ``runs/share/<file>``, which ``runledger share`` reads.

Everything else is declared in ``pyproject.toml``.
"""

from __future__ import annotations

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
ASSETS = ("templates", "static")
SHARED = runpy.run_path(str(ROOT / "runs" / "share.py"))["SHARED"]


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout
            return
        for name in ASSETS:
            self.copy_tree(str(ROOT / name), str(Path(self.build_lib) / "runs" / name))
        share = Path(self.build_lib) / "runs" / "share"
        self.mkpath(str(share))
        for in_wheel, in_checkout, _ in SHARED.values():
            self.copy_file(str(ROOT / in_checkout), str(share / in_wheel))


setup(cmdclass={"build_py": BuildPyWithAssets})
