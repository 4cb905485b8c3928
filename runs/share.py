"""The files runledger ships beside its code for the platform around it: the CHANGELOG (with
its Upgrading notes), the Prometheus alert rules and the Grafana board.

In the wheel they are ``runs/share/<file>`` (setup.py copies them there, from ``SHARED``); in a
source checkout they are read where they are kept. ``runledger share`` lists them,
``runledger share alerts > runledger-alerts.yml`` writes one out, ``--path`` says where it is.

Standard library only: setup.py reads ``SHARED`` from this file without importing ``runs``.
"""

from __future__ import annotations

from pathlib import Path

#: name: (the file in the wheel's runs/share/, where a source checkout keeps it, what it is).
SHARED: dict[str, tuple[str, str, str]] = {
    "changelog": ("CHANGELOG.md", "CHANGELOG.md", "what changed in each release, and upgrading"),
    "alerts": ("alerts.yml", "docs/platform/alerts.yml", "Prometheus alert rules"),
    "grafana": (
        "grafana-runledger.json",
        "docs/grafana-runledger.json",
        "the Grafana board, to import",
    ),
}

INSTALLED = Path(__file__).resolve().parent / "share"
CHECKOUT = Path(__file__).resolve().parent.parent


def path(name: str) -> Path:
    """Where the shared file ``name`` is in this copy of runledger; ``KeyError`` for a name not
    in ``SHARED``, ``FileNotFoundError`` when this copy lacks it."""
    in_wheel, in_checkout, _ = SHARED[name]
    for candidate in (INSTALLED / in_wheel, CHECKOUT / in_checkout):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{in_wheel} is not in this copy of runledger ({INSTALLED})")
