"""A tool's retry policy as declared (``ledger.retry``): the waits it computes, and a policy that
makes no sense refused at declaration with a clear error and nothing registered."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from ledger import registry
from ledger.agents import tool
from ledger.errors import AgentDefinitionError, LedgerError, NotJSON, RetryAfter
from ledger.retry import RetryPolicy, reported_wait


def test_each_wait_lies_between_its_jittered_floor_and_its_ceiling() -> None:
    policy = RetryPolicy(retries=8, backoff=0.5, backoff_factor=3.0, backoff_max=20.0, jitter=0.4)
    draw = random.Random(7).random
    for retry in range(1, 9):
        ceiling = min(20.0, 0.5 * 3.0 ** (retry - 1))
        for _ in range(200):
            assert ceiling * 0.6 <= policy.wait(retry, draw) <= ceiling
    assert policy.wait(10_000, lambda: 0.0) == 20.0  # no overflow: the ceiling holds


def test_no_jitter_waits_exactly_the_exponential_back_off() -> None:
    policy = RetryPolicy(retries=3, backoff=1.0, backoff_max=100.0, jitter=0.0)
    assert [policy.wait(n, lambda: 0.99) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]


def test_the_tool_decorator_keeps_the_declared_policy_and_the_old_defaults() -> None:
    @tool(kind="read", name="rp-declared", retries=4, backoff=2, backoff_max=9, jitter=0.1)
    def read() -> None: ...

    @tool(kind="effect", name="rp-effect-default")
    def pay(*, idempotency_key: str) -> None: ...

    assert read.policy == RetryPolicy(retries=4, backoff=2.0, backoff_max=9.0, jitter=0.1)
    assert (read.retries, pay.retries, pay.policy.retries) == (4, 0, 0)


def test_engine_errors_and_declared_types_are_never_retryable() -> None:
    policy = RetryPolicy(retries=3, non_retryable=(KeyError,))
    assert policy.retryable(ConnectionError(), bad_arguments=False)
    assert not policy.retryable(KeyError("x"), bad_arguments=False)
    assert not policy.retryable(NotJSON("s", "$", "not JSON"), bad_arguments=False)
    assert not policy.retryable(LedgerError("engine"), bad_arguments=False)
    assert not policy.retryable(TypeError("unexpected keyword"), bad_arguments=True)


def test_a_reported_retry_after_is_read_from_the_exception() -> None:
    class Http429(Exception):
        retry_after = 12

    assert reported_wait(RetryAfter(3.5)) == 3.5
    assert reported_wait(Http429()) == 12.0
    assert reported_wait(ValueError()) is None
    assert reported_wait(type("Odd", (Exception,), {"retry_after": math.nan})()) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retries": -1}, "retries must be an integer >= 0"),
        ({"retries": 1.5}, "retries must be an integer >= 0"),
        ({"backoff": -0.1}, "backoff must be a finite number >= 0"),
        ({"backoff": math.inf}, "backoff must be a finite number >= 0"),
        ({"backoff": 5, "backoff_max": 2}, r"backoff_max \(2s\) is below backoff \(5s\)"),
        ({"backoff_factor": 0.5}, "backoff_factor must be a finite number >= 1"),
        ({"jitter": 1.5}, "jitter must be between 0 and 1"),
        ({"jitter": -0.5}, "jitter must be a finite number >= 0"),
        ({"non_retryable": ("ValueError",)}, "non_retryable must be a tuple of exception types"),
        ({"non_retryable": 3}, "non_retryable must be a tuple of exception types"),
    ],
)
def test_a_policy_that_makes_no_sense_is_refused_and_nothing_registered(
    options: dict[str, Any], message: str
) -> None:
    before = registry.tools()
    with pytest.raises(AgentDefinitionError, match=message):

        @tool(kind="read", name="rp-bad", **options)
        def read() -> None: ...

    assert registry.tools() == before
    assert registry.get_tool("rp-bad") is None
