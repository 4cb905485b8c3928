"""Flow control a run carries from its start: its concurrency key and limit, its priority,
its start time.

A concurrency key names what runs must not crowd (a customer's account, a downstream's
sandbox): at most ``limit`` runs of one key execute at once across every worker of the fleet.
The key comes from the start (``start_run(..., concurrency_key="customer:cus_42")``) or from
the agent's declaration, made from the run's inputs::

    @agent("refund", concurrency={"key": "inputs.customer", "limit": 1})

gives a run with inputs ``{"customer": "cus_42"}`` the key ``customer:cus_42``. The limit is
enforced by PostgreSQL when a worker claims the run (``ledger.transitions.pacing``): a run whose
key is full stays queued, holding no worker, and says why on its page.

This module imports without Django settings (``ledger.agents`` re-exports what it declares).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ledger.errors import AgentDefinitionError, InvalidInput

#: The longest concurrency key (the column's width).
MAX_KEY_CHARS = 200
#: The highest limit a key may have (a sanity bound, not a tuning knob).
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class Concurrency:
    """An agent's declared concurrency: the input path its key is made from, and the limit."""

    path: tuple[str, ...]
    limit: int = 1

    @property
    def name(self) -> str:
        """What the key is called in words (``customer`` for ``inputs.customer``)."""
        return self.path[-1]

    def key_for(self, inputs: Any) -> str:
        """The key of a run with these inputs; ``InvalidInput`` when the inputs lack it."""
        value: Any = inputs
        for part in self.path:
            if not isinstance(value, Mapping) or value.get(part) in (None, ""):
                raise InvalidInput(
                    f"the agent's concurrency key is inputs.{'.'.join(self.path)}, "
                    "which these inputs do not have"
                )
            value = value[part]
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise InvalidInput(
                f"inputs.{'.'.join(self.path)} makes the run's concurrency key: text or a "
                f"whole number, not {type(value).__name__}"
            )
        return check_key(f"{self.name}:{value}")


def declared(spec: Any, *, agent: str) -> Concurrency | None:
    """An agent's ``concurrency=`` declaration, checked (``AgentDefinitionError``)."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or set(spec) - {"key", "limit"} or "key" not in spec:
        raise AgentDefinitionError(
            f"agent {agent!r}: concurrency is {{'key': 'inputs.<name>', 'limit': <n>}}"
        )
    key = spec["key"]
    if not isinstance(key, str) or not key.startswith("inputs.") or key == "inputs.":
        raise AgentDefinitionError(
            f"agent {agent!r}: the concurrency key is a path into the inputs "
            f"('inputs.customer'), not {key!r}"
        )
    path = tuple(key.split(".")[1:])
    if any(not part for part in path):
        raise AgentDefinitionError(f"agent {agent!r}: concurrency key {key!r} has an empty part")
    try:
        limit = check_limit(spec.get("limit", 1))
    except InvalidInput as exc:
        raise AgentDefinitionError(f"agent {agent!r}: {exc}") from None
    return Concurrency(path=path, limit=limit)


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"concurrency_key: 1 to {MAX_KEY_CHARS} printable characters")
    if not key.isprintable():
        raise InvalidInput("concurrency_key: printable text (no control characters)")
    return key


def check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"concurrency_limit: a whole number from 1 to {MAX_LIMIT}")
    return limit


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise InvalidInput("priority: a whole number from 0 (the default) to 9 (first)")
    return priority


def check_start_at(start_at: Any, *, now: datetime, max_days: float) -> datetime:
    """A start time: an aware datetime at most ``max_days`` ahead (one in the past is now)."""
    if not isinstance(start_at, datetime) or start_at.tzinfo is None:
        raise InvalidInput("start_at: a time with its time zone (2026-12-03T14:00:00Z)")
    if start_at - now > timedelta(days=max_days):
        raise InvalidInput(
            f"start_at: at most {max_days:g} days ahead (RUNLEDGER_MAX_START_DELAY_DAYS)"
        )
    return start_at


def check_deadline(deadline: Any, *, now: datetime) -> datetime:
    """A run's deadline: seconds from ``now`` (more than 0) or an aware time after ``now``."""
    if isinstance(deadline, int | float) and not isinstance(deadline, bool):
        if not 0 < deadline <= 366 * 86400:
            raise InvalidInput("deadline: seconds from the start, more than 0 (at most a year)")
        return now + timedelta(seconds=deadline)
    if not isinstance(deadline, datetime) or deadline.tzinfo is None:
        raise InvalidInput("deadline: seconds, or a time with its time zone")
    if deadline <= now:
        raise InvalidInput(f"deadline: {deadline.isoformat()} has passed already")
    return deadline


def waiting_detail(*, key: str, running: int, limit: int) -> str:
    """What a held-back run's page says (``waiting: 1 of 1 running for customer cus_42``)."""
    name, _, value = key.partition(":")
    shown = f"{name} {value}" if value else f"key {name}"
    return f"waiting: {running} of {limit} running for {shown}"
