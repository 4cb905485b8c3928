"""Error signatures: the part of an error that says *what* went wrong, without the numbers, ids
and hashes that say *to whom* — so that 300 runs stopped by "timeout after 30.2s for cus_123",
"timeout after 29.8s for cus_456" … share one signature, ``timeout after <n>s for cus_<id>``.

``signature_of`` keeps the first non-empty line (a traceback's later lines name files and line
numbers, not the cause), then replaces, in this order: UUIDs, ``0x…`` and long hex runs (hashes,
object addresses) with ``<hex>``; an id's tail after a ``prefix_`` or ``prefix-`` (``cus_123``,
``ch_3Nk9…``, ``req-8812``) with ``<id>``; every other number (``30.2``, ``-1``, ``1e3``) with
``<n>``; runs of white space with one space. It caps the result at ``MAX_CHARS``. The rules
are plain regular expressions, applied once when the run stops (``ledger.transitions``, into
``Run.signature``), so the incidents page groups on a stored column instead of rewriting text
per row per request. Imports nothing of Django.
"""

from __future__ import annotations

import re

__all__ = ["MAX_CHARS", "signature_of"]

MAX_CHARS = 200

_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_HEX = re.compile(
    r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"
)
# cus_123, ch_3Nk9xY, req-8812, run_20260101_ab12: a word prefix, then a tail holding a digit.
_PREFIXED_ID = re.compile(r"\b([A-Za-z]{1,12}[_-])(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]+")
_NUMBER = re.compile(r"(?<![A-Za-z<])[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_SPACES = re.compile(r"\s+")


def signature_of(text: str) -> str:
    """The error's signature (``""`` for no error): see the module's docstring."""
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    line = line[: MAX_CHARS * 4]
    line = _UUID.sub("<hex>", line)
    line = _HEX.sub("<hex>", line)
    line = _PREFIXED_ID.sub(lambda m: m.group(1) + "<id>", line)
    line = _NUMBER.sub("<n>", line)
    line = _SPACES.sub(" ", line).strip()
    return line[:MAX_CHARS]
