"""Tokens and cost of a model step, read from the answer the step stores.

Every way a model call reaches the ledger stores the provider's answer as the step's result, and
every provider's answer says how many tokens it used; this module reads them in the shapes the
ledger records (it imports no SDK):

- Anthropic's Messages API (``ctx.model``'s ``AnthropicClient``, the ``messages`` loop):
  ``usage.input_tokens`` / ``usage.output_tokens`` (cache reads and writes count as input);
- OpenAI's Chat Completions (the ``chat`` loop): ``usage.prompt_tokens`` /
  ``usage.completion_tokens``;
- the OpenAI Agents SDK adapter and OpenAI's Responses API: ``usage.input_tokens`` /
  ``usage.output_tokens``;
- the PydanticAI adapter: ``response.usage`` (``input_tokens``/``output_tokens``, or the older
  ``request_tokens``/``response_tokens``);
- the Claude Agent SDK adapter: ``message.usage``, or a stream's ``message_start`` and last
  ``message_delta`` events.

The cost comes from a price table in US dollars per million tokens: the shipped
``DEFAULT_PRICES`` with ``RUNLEDGER_MODEL_PRICES`` (JSON) laid over it. A model id matches an
entry exactly, or an entry ending in ``*`` by prefix (the longest wins), so a dated model id
(``claude-sonnet-4-20250514``) takes its family's price. A model the table does not know keeps
its tokens and has no cost (``None``), never an error. The cost is worked out when the step is
recorded and stored with it: a later change of prices does not rewrite what past runs cost.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

#: US dollars per million tokens, (input, output), as the providers publish them (2025). A
#: deployment corrects or extends them with RUNLEDGER_MODEL_PRICES.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4-5*": (5.0, 25.0),
    "claude-opus-4*": (15.0, 75.0),
    "claude-sonnet-4*": (3.0, 15.0),
    "claude-3-7-sonnet*": (3.0, 15.0),
    "claude-3-5-sonnet*": (3.0, 15.0),
    "claude-haiku-4-5*": (1.0, 5.0),
    "claude-3-5-haiku*": (0.8, 4.0),
    "gpt-5*": (1.25, 10.0),
    "gpt-5-mini*": (0.25, 2.0),
    "gpt-4.1*": (2.0, 8.0),
    "gpt-4.1-mini*": (0.4, 1.6),
    "gpt-4.1-nano*": (0.1, 0.4),
    "gpt-4o*": (2.5, 10.0),
    "gpt-4o-mini*": (0.15, 0.6),
    "o3*": (2.0, 8.0),
    "o4-mini*": (1.1, 4.4),
}

Prices = Mapping[str, tuple[float, float]]


def parse_prices(text: str) -> dict[str, tuple[float, float] | None]:
    """RUNLEDGER_MODEL_PRICES: a JSON object of model id (or ``prefix*``) to ``[input, output]``
    or ``{"input": …, "output": …}`` in USD per million tokens, or ``null`` to take a shipped
    entry away. Raises ``ValueError`` saying which entry is wrong."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"RUNLEDGER_MODEL_PRICES is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("RUNLEDGER_MODEL_PRICES must be a JSON object of model id to prices")
    prices: dict[str, tuple[float, float] | None] = {}
    for model, price in data.items():
        if price is None:
            prices[str(model)] = None
            continue
        if isinstance(price, dict):
            price = [price.get("input"), price.get("output")]
        if (
            not isinstance(price, list)
            or len(price) != 2
            or not all(isinstance(p, int | float) and not isinstance(p, bool) for p in price)
            or min(price) < 0
        ):
            raise ValueError(
                f"RUNLEDGER_MODEL_PRICES[{model!r}] must be [input, output] USD per million "
                f"tokens (two numbers, not negative), not {price!r}"
            )
        prices[str(model)] = (float(price[0]), float(price[1]))
    return prices


@functools.lru_cache(maxsize=8)
def price_table(text: str) -> dict[str, tuple[float, float]]:
    """The shipped table with the setting's entries laid over it (``null`` ones taken away)."""
    merged = {**DEFAULT_PRICES, **parse_prices(text)}
    return {model: price for model, price in merged.items() if price is not None}


def price_of(model: str, prices: Prices) -> tuple[float, float] | None:
    """(input, output) USD per million tokens of ``model``, or ``None`` for an unknown model."""
    if model in prices:
        return prices[model]
    matches = [
        (len(p), price)
        for p, price in prices.items()
        if p.endswith("*") and model.startswith(p[:-1])
    ]
    return max(matches)[1] if matches else None


def cost_of(
    model: str, tokens_in: int | None, tokens_out: int | None, prices: Prices
) -> Decimal | None:
    """The step's cost in USD (6 decimals), ``None`` when the model or its tokens are unknown."""
    price = price_of(model, prices)
    if price is None or (tokens_in is None and tokens_out is None):
        return None
    usd = (tokens_in or 0) * price[0] + (tokens_out or 0) * price[1]
    return (Decimal(repr(usd)) / 1_000_000).quantize(Decimal("0.000001"))


def tokens_of(result: Any) -> tuple[int | None, int | None]:
    """(input tokens, output tokens) a stored model answer reports; ``None`` for what it does
    not say. Never raises, whatever the answer holds."""
    try:
        return _tokens(result)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None, None


def _tokens(result: Any) -> tuple[int | None, int | None]:
    if not isinstance(result, dict):
        return None, None
    if isinstance(result.get("usage"), dict):
        return _from_usage(result["usage"])
    for wrapper in ("response", "message"):  # PydanticAI's adapter; Claude's, not streamed
        if isinstance(result.get(wrapper), dict):
            return _tokens(result[wrapper])
    if isinstance(result.get("events"), list):  # Claude's adapter, streamed
        tokens_in = tokens_out = None
        for name, data in (e for e in result["events"] if isinstance(e, list | tuple)):
            if name == "message_start" and isinstance(data.get("message"), dict):
                tokens_in, tokens_out = _from_usage(data["message"].get("usage") or {})
            elif name == "message_delta" and isinstance(data.get("usage"), dict):
                usage = data["usage"]
                tokens_out = _int(usage.get("output_tokens"), tokens_out)
                if usage.get("input_tokens") is not None:
                    tokens_in = _from_usage(usage)[0]
        return tokens_in, tokens_out
    return None, None


def _from_usage(usage: Mapping[str, Any]) -> tuple[int | None, int | None]:
    tokens_in = _int(_first(usage, "input_tokens", "prompt_tokens", "request_tokens"), None)
    if tokens_in is not None:  # Anthropic counts cached input apart from input_tokens
        tokens_in += _int(usage.get("cache_creation_input_tokens"), 0) or 0
        tokens_in += _int(usage.get("cache_read_input_tokens"), 0) or 0
    tokens_out = _int(_first(usage, "output_tokens", "completion_tokens", "response_tokens"), None)
    return tokens_in, tokens_out


def _first(usage: Mapping[str, Any], *names: str) -> Any:
    return next((usage[n] for n in names if usage.get(n) is not None), None)


def _int(value: Any, default: int | None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return default
    return int(value)
