"""The benchmarks' figures file (``bench-results.json``): one entry per vendor, merged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.utils import timezone


def merge_json(path: Path, vendor: str, values: dict[str, Any]) -> None:
    existing = json.loads(path.read_text()) if path.exists() else {}
    existing[vendor] = {"measured_at": timezone.now().isoformat(), "figures": values}
    path.write_text(json.dumps(existing, indent=2, default=str) + "\n")
