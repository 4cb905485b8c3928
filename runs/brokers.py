"""Broker options shared by the settings and by tools that talk to a given broker directory."""

from __future__ import annotations

from pathlib import Path


def filesystem_options(broker_dir: Path, *, polling_interval: float = 0.2) -> dict[str, object]:
    """kombu's filesystem transport rooted at ``broker_dir`` (created if missing).

    Every process that uses the same directory shares the queues: a producer writes one file
    per message and a consumer takes it by renaming it away (atomic, so one consumer wins).
    """
    for sub in ("out", "processed", "control"):
        (broker_dir / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(broker_dir / "out"),
        "data_folder_out": str(broker_dir / "out"),
        "processed_folder": str(broker_dir / "processed"),
        "control_folder": str(broker_dir / "control"),  # kombu's default is ./control
        "store_processed": False,
        # How often an idle worker looks for new files (kombu's default is 1 s).
        "polling_interval": polling_interval,
    }
