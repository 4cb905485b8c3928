"""A tool's retry policy: how many retries, how long to wait before each, what never retries.

The wait before retry ``n`` (1 for the first retry) is

    ceiling_n = min(backoff_max, backoff * backoff_factor ** (n - 1))
    wait_n    = ceiling_n * (1 - jitter * r)          r uniform in [0, 1)

so it lies in ``[(1 - jitter) * ceiling_n, ceiling_n]`` and never above ``backoff_max``. A tool
that reports when to come back — it raises ``ledger.errors.RetryAfter(seconds)``, or any
exception with a numeric ``retry_after`` attribute — is waited for that long instead (no jitter,
not shortened; at most RUNLEDGER_RETRY_AFTER_MAX_SECONDS). Both still count as retries.

Never retried, whatever the policy: an exception of a type in ``non_retryable``; and the
engine's own deterministic errors — a result that is not JSON (``NotJSON``), arguments that do
not fit the tool's signature (the ``TypeError`` of binding them), any ``LedgerError`` raised
inside the call. The same call would fail the same way.

Pure Python, no Django: an agent module declares a policy at import time, and a policy that makes
no sense is refused there (``AgentDefinitionError``), before any run uses it. The randomness of
the jitter is passed in (``rand``), never read here.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ledger.errors import AgentDefinitionError, LedgerError, NotJSON


def _number(name: str, value: Any, *, minimum: float = 0.0) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum:
        raise AgentDefinitionError(f"{name} must be a finite number >= {minimum:g}, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class RetryPolicy:
    """How a tool's failed call is retried (see the module docstring for the exact waits)."""

    retries: int = 0
    backoff: float = 0.5  # seconds before the first retry (before jitter)
    backoff_factor: float = 2.0
    backoff_max: float = 30.0  # the ceiling of any computed wait
    jitter: float = 0.5  # the fraction of a wait that jitter may take off, 0 to 1
    non_retryable: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or self.retries < 0:
            raise AgentDefinitionError(f"retries must be an integer >= 0, not {self.retries!r}")
        _number("backoff", self.backoff)
        _number("backoff_factor", self.backoff_factor, minimum=1.0)
        _number("backoff_max", self.backoff_max)
        if self.backoff_max < self.backoff:
            raise AgentDefinitionError(
                f"backoff_max ({self.backoff_max:g}s) is below backoff ({self.backoff:g}s): "
                "the ceiling must be at least the first wait"
            )
        if not 0 <= _number("jitter", self.jitter) <= 1:
            raise AgentDefinitionError(f"jitter must be between 0 and 1, not {self.jitter!r}")
        types = self.non_retryable
        if not isinstance(types, tuple) or not all(
            inspect.isclass(t) and issubclass(t, BaseException) for t in types
        ):
            raise AgentDefinitionError(
                f"non_retryable must be a tuple of exception types, not {types!r}"
            )

    @classmethod
    def declared(
        cls,
        *,
        retries: int,
        backoff: float | None = None,
        backoff_factor: float | None = None,
        backoff_max: float | None = None,
        jitter: float | None = None,
        non_retryable: Iterable[type[BaseException]] | type[BaseException] = (),
    ) -> RetryPolicy:
        """A policy from ``@tool``'s keywords; None keeps the default."""
        given = {
            "backoff": backoff,
            "backoff_factor": backoff_factor,
            "backoff_max": backoff_max,
            "jitter": jitter,
        }
        types = (non_retryable,) if inspect.isclass(non_retryable) else non_retryable
        try:
            types = tuple(types)  # type: ignore[arg-type]
        except TypeError:
            raise AgentDefinitionError(
                f"non_retryable must be a tuple of exception types, not {non_retryable!r}"
            ) from None
        return cls(
            retries=retries,
            non_retryable=types,
            **{k: v for k, v in given.items() if v is not None},  # type: ignore[arg-type]
        )

    def wait(self, retry: int, rand: Callable[[], float]) -> float:
        """Seconds to wait before retry number ``retry`` (1 = the first retry)."""
        exponent = min(retry - 1, 1000)  # a huge exponent overflows; the ceiling holds anyway
        try:
            ceiling = min(self.backoff_max, self.backoff * self.backoff_factor**exponent)
        except OverflowError:
            ceiling = self.backoff_max
        return ceiling * (1.0 - self.jitter * rand())

    def retryable(self, exc: BaseException, *, bad_arguments: bool) -> bool:
        """Whether a call that raised ``exc`` may be tried again under this policy."""
        if bad_arguments or isinstance(exc, NotJSON | LedgerError):
            return False
        return not isinstance(exc, self.non_retryable)


def reported_wait(exc: BaseException) -> float | None:
    """The seconds a tool asked to wait (``retry_after`` on its exception), or None."""
    value = getattr(exc, "retry_after", None)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return max(0.0, float(value))


def arguments_misfit(fn: Callable[..., Any], inputs: dict[str, Any], **hidden: Any) -> bool:
    """After a ``TypeError``: whether it is that ``inputs`` do not fit ``fn``'s signature (the
    engine's deterministic error, never retried) rather than one raised inside the tool."""
    try:
        inspect.signature(fn).bind(**inputs, **hidden)
    except TypeError:
        return True
    except ValueError:  # no signature to read (a builtin)
        return False
    return False
