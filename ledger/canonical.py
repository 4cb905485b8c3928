"""Canonical JSON and the input hash.

One byte form per value: sorted keys, no insignificant whitespace, UTF-8, and one form per
number (an integral float is written as the integer, -0.0 as 0). Anything that is not JSON, or
that PostgreSQL's jsonb would reject, is refused with the offending path before anything runs.

One decoded form too: ``normalize`` builds every object with its keys in sorted order (code
point order, as the canonical text), and ``loads``/``ordered`` give stored JSON back in that
same order. PostgreSQL's jsonb keeps objects in its own order (by key length, then bytes) and
turns an integral float into an integer; SQLite keeps the text. So the agent receives the same
value — same keys in the same order, same types — on the first execution (``normalize``) and on
every replay (``loads``), whichever database stored it.

The text of plain data (the engine's hot path: every step's inputs and result) is written by
orjson, a C encoder, where it gives the same bytes as the standard library's encoder: exact
dicts, lists, strings, ints within 64 bits, booleans, None, and floats whose ``repr`` has no
exponent (non-integral, at least 1e-4 in magnitude: orjson writes 1e-05 as 0.00001). Anything
else takes ``json``'s encoder, as before. ``tests/ledger/test_canonical.py`` proves the two
equal over arbitrary JSON values (Hypothesis) and ``bench_levers`` measures the difference.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from operator import itemgetter
from typing import Any

import orjson

from ledger.errors import NotAwaited, NotJSON

#: Deepest nesting of lists and objects a value may have: deeper ones are refused as not JSON
#: here, before Python's recursion limit is met anywhere (parsing, hashing, the database).
MAX_DEPTH = 100


def normalize(value: Any, *, step_id: str = "", path: str = "$", depth: int = 0) -> Any:
    """Return ``value`` as plain JSON data in its canonical form, or raise ``NotJSON``."""
    try:
        return _plain(value, depth)
    except _Unusual:
        return _normalize(value, step_id=step_id, path=path, depth=depth)


#: Whether ``canonical`` writes plain data with orjson (``bench_levers`` turns it off to
#: measure the standard encoder beside it; the bytes are the same either way).
USE_ORJSON = True
#: Below this magnitude Python's ``repr`` of a float has an exponent (``1e-05``) and orjson's
#: text does not (``0.00001``): such a float is not plain (``_plain``).
_FLOAT_EXPONENT_BELOW = 1e-4


class _Unusual(Exception):
    """Raised by ``_plain`` at anything but plain JSON: the full walk decides (and names it)."""


def _plain(value: Any, depth: int) -> Any:
    """``_normalize`` for plain data (exact dict, list, tuple, str, int, float, bool, None),
    without building the path of every value on the way (it is only needed in an error).
    Anything else, valid (a subclass) or not, raises ``_Unusual``: the full walk handles it.
    Called once per step on its inputs and its result: the engine's hot path. Its result is
    data orjson writes as the standard encoder does (ints beyond 64 bits aside: orjson refuses
    them, and ``_text`` falls back); so a tiny float, which it writes differently, is unusual."""
    if depth > MAX_DEPTH:
        raise _Unusual
    kind = type(value)
    if kind is str:
        if "\x00" in value or not (value.isascii() or _encodable(value)):
            raise _Unusual
        return value
    if kind is dict:
        try:
            keys = sorted(value)
        except TypeError:  # keys that do not compare (an int beside a str): the full walk
            raise _Unusual from None
        out = {}
        for key in keys:
            if type(key) is not str or "\x00" in key or not (key.isascii() or _encodable(key)):
                raise _Unusual
            item = value[key]
            # The commonest leaves inline (a call a leaf was a third of the walk).
            leaf = type(item)
            out[key] = (
                item if leaf is int or leaf is bool or item is None else _plain(item, depth + 1)
            )
        return out
    if kind is list or kind is tuple:
        return [_plain(item, depth + 1) for item in value]
    if kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _Unusual
        if value.is_integer():
            return int(value)
        if -_FLOAT_EXPONENT_BELOW < value < _FLOAT_EXPONENT_BELOW:
            raise _Unusual
        return value
    raise _Unusual


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _normalize(value: Any, *, step_id: str, path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise NotJSON(step_id, path, f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSON(step_id, path, f"{value!r} is not a JSON number")
        if value.is_integer():
            # jsonb gives every integral number back as an integer (1e20 too): so does this.
            return int(value)
        return value
    if isinstance(value, str):
        return _check_string(value, step_id, path)
    if isinstance(value, list | tuple):
        return [
            _normalize(item, step_id=step_id, path=f"{path}[{i}]", depth=depth + 1)
            for i, item in enumerate(value)
        ]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise NotJSON(step_id, f"{path}", f"key {key!r} is not a string")
            _check_string(key, step_id, f"{path}.{key}")
        return {
            key: _normalize(value[key], step_id=step_id, path=f"{path}.{key}", depth=depth + 1)
            for key in sorted(value)
        }
    if isinstance(value, bytes | bytearray | memoryview):
        raise NotJSON(step_id, path, "bytes are not JSON; decode or base64-encode them")
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # it never runs: no "never awaited" warning later
        raise NotAwaited(
            f"step {step_id!r}: {path} is a {type(value).__name__}, not a value: an async "
            "function was called without await (write `await ...`)"
        )
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
    return _ENCODER.encode(value)


#: Built once: ``json.dumps`` with any non-default option builds an encoder per call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical(value: Any, *, step_id: str = "") -> tuple[Any, str]:
    """Normalize ``value`` and return it with its canonical text."""
    data, raw = _canonical(value, step_id)
    return data, raw if isinstance(raw, str) else raw.decode("utf-8")


def canonical_hashed(value: Any, *, step_id: str = "") -> tuple[Any, str, str]:
    """``canonical`` and the sha256 of the text (``hash_text``), hashed from the encoder's
    bytes where orjson wrote them (no second encoding): a step's inputs."""
    data, raw = _canonical(value, step_id)
    if isinstance(raw, str):
        return data, raw, hash_text(raw)
    return data, raw.decode("utf-8"), hashlib.sha256(raw).hexdigest()


def _canonical(value: Any, step_id: str) -> tuple[Any, str | bytes]:
    """The normalized data and its canonical text: UTF-8 bytes when orjson wrote it."""
    try:
        data = _plain(value, 0)
    except _Unusual:
        data = _normalize(value, step_id=step_id, path="$", depth=0)
        return data, _ENCODER.encode(data)
    if not USE_ORJSON:
        return data, _ENCODER.encode(data)
    try:
        return data, orjson.dumps(data)  # its dicts are built in key order (_plain)
    except orjson.JSONEncodeError:  # an int beyond 64 bits
        return data, _ENCODER.encode(data)


def _sorted_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(pairs) < 2:
        return dict(pairs)
    return dict(sorted(pairs, key=_first))


_first = itemgetter(0)
#: Built once: ``json.loads(text, object_pairs_hook=...)`` would build a decoder per call.
_DECODER = json.JSONDecoder(object_pairs_hook=_sorted_object)


#: A number orjson might read as a float (it turns an integer beyond 64 bits into one): text
#: with 19 digits in a row takes the standard decoder.
_LONG_DIGITS = re.compile(r"\d{19}")


def loads(text: str | bytes) -> Any:
    """Stored JSON text decoded in the canonical order (every object's keys sorted).

    Decoded by orjson where it gives the value the standard decoder gives (the resume and the
    dry replay decode every stored result: ~2 µs a row instead of ~5), else by ``json``: text
    with a long run of digits (orjson reads a big integer as a float) or that orjson refuses
    (a lone surrogate, a number past a double). ``tests/ledger/test_canonical.py`` proves the
    two equal, key order included.
    """
    if text == "[]":
        return []
    if USE_ORJSON and not _LONG_DIGITS.search(text if isinstance(text, str) else text.decode()):
        try:
            return _in_key_order(orjson.loads(text))
        except orjson.JSONDecodeError:
            pass
    return _DECODER.decode(text.decode("utf-8") if isinstance(text, bytes) else text)


def _in_key_order(value: Any) -> Any:
    """Freshly decoded data with every object's keys sorted; an object already in order is
    kept (most are: the canonical text is written in that order)."""
    kind = type(value)
    if kind is dict:
        keys = list(value)
        if len(keys) > 1:
            ordered_keys = sorted(keys)
            if ordered_keys != keys:
                value = {key: value[key] for key in ordered_keys}
        for key, item in value.items():
            if type(item) is dict or type(item) is list:
                value[key] = _in_key_order(item)
        return value
    if kind is list:
        for i, item in enumerate(value):
            if type(item) is dict or type(item) is list:
                value[i] = _in_key_order(item)
    return value


def ordered(value: Any) -> Any:
    """Already-decoded JSON data (e.g. a ``JSONField`` read from jsonb) in the canonical order."""
    if isinstance(value, dict):
        return {key: ordered(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [ordered(item) for item in value]
    return value


def hash_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def input_hash(value: Any, *, step_id: str = "") -> str:
    """sha256 of the canonical JSON form of ``value``."""
    return hash_text(canonical(value, step_id=step_id)[1])
