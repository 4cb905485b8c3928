"""Rate limits: how many calls (or model tokens) per period a tool or a model may receive,
across every worker of the fleet.

Declared on a tool (``@tool(..., rate_limit="60/min")``) or configured by the platform
(``RUNLEDGER_RATE_LIMITS``, JSON, which wins over a declaration)::

    {"model:claude-haiku-4-5": {"requests": "4000/min", "tokens": "400000/min"},
     "tool:charge": "10/min"}

A rate is ``<count>/<unit>``: ``10/s``, ``60/min``, ``1000/h``, ``50000/day`` (``sec``,
``second``, ``m``, ``minute``, ``hour``, ``d`` alike), or ``<count>/<n><unit>`` (``5/10s``).

The limit is held by PostgreSQL (``ledger.transitions.ratelimits``): one row per limit key
keeps the key's next free slot, and every call takes the next slot with one statement, so the
calls of a key are spaced ``period / count`` apart whichever worker makes them — at most
``count`` in any window of one period, never a burst above it. Calls take slots in the order
they ask (the row lock orders them): first come, first served between runs.

This module imports without Django settings (``ledger.agents`` re-exports ``tool``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from ledger.errors import AgentDefinitionError

#: The longest limit key (the column's width).
MAX_KEY_CHARS = 200

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+?)s?\s*$")


class BadRate(ValueError):
    """A rate that cannot be read, or a limit of 0."""


@dataclass(frozen=True)
class Rate:
    """``count`` per ``seconds``: slots ``interval`` seconds apart."""

    count: int
    seconds: float
    text: str

    @property
    def interval(self) -> float:
        return self.seconds / self.count

    def __str__(self) -> str:
        return self.text


def parse(text: Any) -> Rate:
    """``"60/min"`` as a ``Rate``; ``BadRate`` saying why for anything else (a limit of 0
    included: a limit that lets nothing through is a pause, and pauses are elsewhere)."""
    if not isinstance(text, str):
        raise BadRate(f"a rate is text such as '60/min', not {text!r}")
    match = _RATE.match(text.lower())
    unit = _UNITS.get(match.group(3)) if match else None
    if match is None or unit is None:
        raise BadRate(
            f"rate {text!r} cannot be read: write <count>/<unit>, e.g. '60/min', '10/s', "
            "'1000/hour', '5/10s'"
        )
    count = int(match.group(1))
    span = float(match.group(2) or 1) * unit
    if count <= 0:
        raise BadRate(f"rate {text!r}: a limit of 0 lets nothing through (pause the tool instead)")
    if count > 10**9 or not 0 < span <= 366 * 86400 or not math.isfinite(span):
        raise BadRate(f"rate {text!r}: the count or the period is out of bounds")
    return Rate(count=count, seconds=span, text=text.strip())


def declared(spec: Any, *, tool: str) -> Rate | None:
    """A tool's ``rate_limit=`` declaration (``AgentDefinitionError`` when it cannot parse)."""
    if spec is None:
        return None
    try:
        return parse(spec)
    except BadRate as exc:
        raise AgentDefinitionError(f"tool {tool!r}: rate_limit: {exc}") from None


@dataclass(frozen=True)
class Limits:
    """What RUNLEDGER_RATE_LIMITS configures for one key: requests and (models) tokens."""

    requests: Rate | None = None
    tokens: Rate | None = None


def configured(value: Any) -> dict[str, Limits]:
    """RUNLEDGER_RATE_LIMITS (JSON text, or an already parsed mapping) read and checked;
    ``BadRate`` saying which key is wrong. Empty text: no limits."""
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise BadRate(f"RUNLEDGER_RATE_LIMITS is not JSON ({exc})") from None
    if not isinstance(value, Mapping):
        raise BadRate("RUNLEDGER_RATE_LIMITS is a JSON object of 'tool:NAME'/'model:NAME' keys")
    limits = {}
    for key, spec in value.items():
        limits[check_key(key)] = _limits(key, spec)
    return limits


def check_key(key: Any) -> str:
    kind, _, name = key.partition(":") if isinstance(key, str) else ("", "", "")
    if kind not in ("tool", "model") or not name.strip() or len(key) > MAX_KEY_CHARS:
        raise BadRate(
            f"RUNLEDGER_RATE_LIMITS: key {key!r} is 'tool:<name>' or 'model:<name>' "
            f"(at most {MAX_KEY_CHARS} characters)"
        )
    if not key.isprintable():
        raise BadRate(f"RUNLEDGER_RATE_LIMITS: key {key!r} has control characters")
    return key


def _limits(key: str, spec: Any) -> Limits:
    if isinstance(spec, str):
        spec = {"requests": spec}
    if not isinstance(spec, Mapping) or not spec or set(spec) - {"requests", "tokens"}:
        raise BadRate(
            f"RUNLEDGER_RATE_LIMITS[{key!r}]: a rate ('10/min') or "
            "{'requests': '10/min', 'tokens': '400000/min'}"
        )
    if "tokens" in spec and not key.startswith("model:"):
        raise BadRate(f"RUNLEDGER_RATE_LIMITS[{key!r}]: only a model has a tokens limit")
    try:
        return Limits(
            requests=parse(spec["requests"]) if "requests" in spec else None,
            tokens=parse(spec["tokens"]) if "tokens" in spec else None,
        )
    except BadRate as exc:
        raise BadRate(f"RUNLEDGER_RATE_LIMITS[{key!r}]: {exc}") from None


_cache: dict[str, dict[str, Limits]] = {}


def configured_cached(value: Any) -> dict[str, Limits]:
    """``configured`` of the setting's text, read once per process (the hot path's)."""
    if not isinstance(value, str):
        return configured(value)
    found = _cache.get(value)
    if found is None:
        found = _cache[value] = configured(value)
    return found


@dataclass(frozen=True)
class Take:
    """One limit a call takes a slot of: its key (``tool:charge``), which budget
    (``requests``, or ``tokens`` paid after the call) and its rate."""

    key: str
    budget: str
    rate: Rate

    @property
    def row(self) -> str:
        """The limiter row's key: ``tool:charge`` for requests, ``model:x#tokens``."""
        return self.key if self.budget == "requests" else f"{self.key}#tokens"


def takes(*, tool: str, kind: str, model: str, declared: Rate | None, setting: Any) -> list[Take]:
    """The limits a call of this tool (or model) takes, the setting's before the declaration's."""
    limits = configured_cached(setting)
    found: list[Take] = []
    if kind == "model" and model:
        conf = limits.get(f"model:{model}")
        if conf is not None and conf.requests is not None:
            found.append(Take(f"model:{model}", "requests", conf.requests))
        if conf is not None and conf.tokens is not None:
            found.append(Take(f"model:{model}", "tokens", conf.tokens))
        return found
    conf = limits.get(f"tool:{tool}")
    rate = conf.requests if conf is not None and conf.requests is not None else declared
    if rate is not None:
        found.append(Take(f"tool:{tool}", "requests", rate))
    return found


def waiting_detail(take: Take, seconds: float) -> str:
    """What a held-back run's page says (``waiting: rate limit tool:charge 10/min, next slot
    in 12 s``)."""
    what = take.key if take.budget == "requests" else f"{take.key} tokens"
    return f"waiting: rate limit {what} {take.rate}, next slot in {math.ceil(seconds):d} s"


def tokens_used(answer: Any) -> int:
    """The tokens a model's answer reports (Anthropic's ``input_tokens + output_tokens``,
    OpenAI's ``total_tokens`` or ``prompt_tokens + completion_tokens``); 0 when it says none."""
    usage = answer.get("usage") if isinstance(answer, Mapping) else None
    if not isinstance(usage, Mapping):
        return 0

    def number(name: str) -> int:
        value = usage.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            return 0
        return int(value)

    if number("total_tokens"):
        return number("total_tokens")
    return (
        number("input_tokens")
        + number("output_tokens")
        + number("prompt_tokens")
        + number("completion_tokens")
    )


def provider_wait(exc: BaseException, *, now: datetime | None = None) -> float | None:
    """The seconds a downstream asked everyone to wait: a 429 answer's ``retry-after``
    (``retry-after-ms``; seconds or an HTTP date), or a tool's ``RetryAfter``. None otherwise."""
    value = getattr(exc, "retry_after", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return max(0.0, float(value))
    # The SDKs' errors (``status_code``, ``response.headers``) and urllib's ``HTTPError``
    # (``code``, ``headers``: ``ledger.llm.AnthropicClient``).
    response = getattr(exc, "response", None)
    status = (
        getattr(exc, "status_code", None)
        or getattr(response, "status_code", None)
        or getattr(exc, "code", None)
    )
    headers = getattr(response, "headers", None) or getattr(exc, "headers", None)
    if status != 429 or headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
        text = headers.get("retry-after")
        if text is None:
            return None
        try:
            return max(0.0, float(text))
        except ValueError:
            at = parsedate_to_datetime(str(text))
            return max(0.0, (at - (now or datetime.now(UTC))).total_seconds())
    except (TypeError, ValueError, AttributeError):
        return None
