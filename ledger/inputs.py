"""Values people type — in the dashboard, the admin, the commands — checked before use.

Every parser here turns hostile input into ``InvalidInput`` with a sentence a person can act
on, before anything is queried or written: JSON nested too deep (Python's parser would raise
RecursionError), integers too long (``int()`` refuses more than 4,300 digits) or out of range,
NUL bytes and lone surrogates (PostgreSQL refuses both in text), NaN and Infinity.

Run ids: ``RUN_ID_PATTERN`` — 1 to 64 characters from ``A-Z a-z 0-9 _ . : -``, the first a
letter, a digit or ``_`` (so an id is never ``.`` or ``..``, which browsers rewrite in a URL).
It is checked where a run is created (``transitions.run_start``: the API, ``start_run``, fork,
continue-as-new). Runs stored before the check keep their ids; the dashboard's URLs escape
whatever an id holds (``runs.dashboard.urls.RunIdConverter``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ledger import canonical
from ledger.errors import InvalidInput, NotJSON

RUN_ID_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}"
_RUN_ID = re.compile(RUN_ID_PATTERN)
MAX_RUN_ID_CHARS = 64
#: Whole numbers people type (budgets, versions, pages) are at most this many digits: far past
#: any real value, far below Python's 4,300-digit limit and within a 64-bit integer.
MAX_INT_DIGITS = 18


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a valid new run id, else ``InvalidInput`` saying why."""
    if not isinstance(run_id, str) or _RUN_ID.fullmatch(run_id) is None:
        shown = run_id[:80] if isinstance(run_id, str) else run_id
        raise InvalidInput(
            f"the run id {shown!r} is not allowed: use 1 to {MAX_RUN_ID_CHARS} characters from "
            "A-Z a-z 0-9 _ . : - starting with a letter, a digit or _"
        )
    return run_id


def queryable(text: str) -> bool:
    """True when the database can take ``text`` as a parameter: no NUL, no lone surrogate."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_whole_number(text: str, *, what: str, lo: int = 0, hi: int = 10**MAX_INT_DIGITS) -> int:
    """A whole number typed as text, in [lo, hi]; ``InvalidInput`` otherwise (never ValueError
    from a 5,000-digit string, never an int the database cannot hold)."""
    text = (text or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > MAX_INT_DIGITS:
        raise InvalidInput(f"{what} must be a whole number from {lo} to {hi}")
    value = int(text)
    if not lo <= value <= hi:
        raise InvalidInput(f"{what} must be a whole number from {lo} to {hi}")
    return value


class _Constant(ValueError):
    pass


def _no_constants(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON (and PostgreSQL's jsonb) do not.
    raise _Constant(f"{name} is not a JSON value")


def parse_json_text(text: str, *, what: str) -> Any:
    """JSON typed as text, in canonical form, or ``InvalidInput`` naming what is wrong: bad
    syntax (with line and column), NaN/Infinity, nesting deeper than
    ``canonical.MAX_DEPTH``, an integer of more than 4,300 digits, a NUL byte or a lone
    surrogate in a string."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what} is not text")
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except _Constant as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput(
            f"{what} is nested too deeply (at most {canonical.MAX_DEPTH} levels)"
        ) from None
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string"
        raise InvalidInput(f"{what} is not usable JSON: {exc}") from None
    try:
        return canonical.normalize(value)
    except NotJSON as exc:
        raise InvalidInput(f"{what} is not storable JSON: {exc}") from None
