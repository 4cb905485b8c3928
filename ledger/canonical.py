"""Canonical JSON and the input hash.

One byte form per value: sorted keys, no insignificant whitespace, UTF-8, and one form per
number (an integral float is written as the integer, -0.0 as 0). Anything that is not JSON, or
that PostgreSQL's jsonb would reject, is refused with the offending path before anything runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ledger.errors import NotJSON

_MAX_SAFE_INT = 2**53
#: Deepest nesting of lists and objects a value may have: deeper ones are refused as not JSON
#: here, before Python's recursion limit is met anywhere (parsing, hashing, the database).
MAX_DEPTH = 100


def normalize(value: Any, *, step_id: str = "", path: str = "$", depth: int = 0) -> Any:
    """Return ``value`` as plain JSON data in its canonical form, or raise ``NotJSON``."""
    if depth > MAX_DEPTH:
        raise NotJSON(step_id, path, f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSON(step_id, path, f"{value!r} is not a JSON number")
        if value.is_integer() and abs(value) < _MAX_SAFE_INT:
            return int(value)
        return value
    if isinstance(value, str):
        return _check_string(value, step_id, path)
    if isinstance(value, list | tuple):
        return [
            normalize(item, step_id=step_id, path=f"{path}[{i}]", depth=depth + 1)
            for i, item in enumerate(value)
        ]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJSON(step_id, f"{path}", f"key {key!r} is not a string")
            _check_string(key, step_id, f"{path}.{key}")
            out[key] = normalize(item, step_id=step_id, path=f"{path}.{key}", depth=depth + 1)
        return out
    if isinstance(value, bytes | bytearray | memoryview):
        raise NotJSON(step_id, path, "bytes are not JSON; decode or base64-encode them")
    raise NotJSON(step_id, path, f"a {type(value).__name__} is not JSON")


def _check_string(value: str, step_id: str, path: str) -> str:
    if "\x00" in value:
        raise NotJSON(step_id, path, "contains \\u0000, which PostgreSQL's jsonb rejects")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise NotJSON(
            step_id, path, "contains a lone surrogate, which is not valid Unicode"
        ) from None
    return value


def dumps(value: Any) -> str:
    """The canonical text of already-normalized data."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def canonical(value: Any, *, step_id: str = "") -> tuple[Any, str]:
    """Normalize ``value`` and return it with its canonical text."""
    data = normalize(value, step_id=step_id)
    return data, dumps(data)


def hash_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def input_hash(value: Any, *, step_id: str = "") -> str:
    """sha256 of the canonical JSON form of ``value``."""
    return hash_text(canonical(value, step_id=step_id)[1])
