"""The model client interface: how ``ctx.model(...)`` reaches a language model.

A model call is an external read with a non-deterministic answer: the engine hashes its inputs
(model id, system text, prompt, tool schema), stores the output and never asks again for a
recorded step. Clients only have to answer once.

``ScriptedClient`` is deterministic and needs no key: model ids ``scripted:<name>`` are answered
by a function registered with ``script(name)``. Any other model id goes to the real client in
``RUNLEDGER_MODEL_CLIENT`` (see ``AnthropicClient``).

An async agent's ``await ctx.model(...)`` awaits the client's ``acomplete`` (same arguments, same
answer) on the event loop where the client has one — ``AnthropicClient`` does, on the official
SDK's ``AsyncAnthropic`` — and otherwise runs its ``complete`` on a thread.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import urllib.request
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from django.utils.module_loading import import_string

from ledger.conf import conf

ModelOutput = dict[str, Any]
#: ``fn(prompt, system) -> dict``; an ``async def`` answers async agents only.
Script = Callable[[str, str], Any]

_scripts: dict[str, Script] = {}


class ModelClient(Protocol):
    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        """Return the model's answer as JSON data, e.g. ``{"text": ..., "tool_calls": [...]}``."""
        ...


class AsyncModelClient(ModelClient, Protocol):
    """A client that async agents await: ``acomplete`` answers as ``complete`` does."""

    async def acomplete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput: ...


def script(name: str) -> Callable[[Script], Script]:
    """Register ``fn(prompt, system) -> dict`` as the answer of model id ``scripted:<name>``."""

    def register(fn: Script) -> Script:
        _scripts[name] = fn
        return fn

    return register


class ScriptedClient:
    """Deterministic answers for tests and the demo."""

    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        answer = _script(model)(prompt, system)
        if inspect.isawaitable(answer):
            if inspect.iscoroutine(answer):
                answer.close()
            raise TypeError(f"scripted model {model!r} is an async def: only async agents ask it")
        return answer  # type: ignore[no-any-return]

    async def acomplete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        answer = _script(model)(prompt, system)
        return await answer if inspect.isawaitable(answer) else answer  # type: ignore[no-any-return]


def _script(model: str) -> Script:
    name = model.removeprefix("scripted:")
    fn = _scripts.get(name)
    if fn is None:
        raise LookupError(f"no scripted model named {name!r} (register one with script())")
    return fn


class AnthropicClient:
    """Calls Anthropic's Messages API when ``ANTHROPIC_API_KEY`` is set (stdlib HTTP only)."""

    @property
    def url(self) -> str:
        base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
        return base.rstrip("/") + "/v1/messages"

    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        key = _api_key()
        body = _body(model, prompt, system)
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={
                "x-api-key": key,
                "anthropic-version": "2023-06-01",
                "content-type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            payload = json.loads(response.read())
        return _answer(payload, model)

    async def acomplete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        """The same request on the official SDK's ``AsyncAnthropic`` (the ``anthropic`` extra),
        awaited on the loop; the same answer, from the response's own JSON. The engine retries
        a failed model step itself, so the SDK does not."""
        try:
            from anthropic import AsyncAnthropic
        except ImportError as exc:  # pragma: no cover - the extra is in the dev environment
            raise RuntimeError(
                "async model calls need the anthropic SDK: pip install 'runledger[anthropic]'"
            ) from exc
        base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
        key = _api_key()
        # One SDK client per event loop (and base URL and key), kept: making one builds an
        # HTTP client and its TLS context, tens of milliseconds of CPU on the loop itself,
        # which at hundreds of runs in flight held every other run's step behind it.
        clients = _ASYNC_CLIENTS.setdefault(asyncio.get_running_loop(), {})
        client = clients.get((base, key))
        if client is None:
            client = clients[base, key] = AsyncAnthropic(
                api_key=key,
                base_url=base,
                max_retries=0,
                timeout=120,
                default_headers={"x-api-key": key},  # the Messages API's header, as complete sends
            )
        raw = await client.messages.with_raw_response.create(**_body(model, prompt, system))
        payload = json.loads(raw.http_response.content)
        return _answer(payload, model)


#: The async SDK clients, per event loop (forgotten with their loop).
_ASYNC_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary()
)


def _api_key() -> str:
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise RuntimeError("ANTHROPIC_API_KEY is not set")
    return key


def _body(model: str, prompt: str, system: str) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 1024,
        "system": system,
        "messages": [{"role": "user", "content": prompt}],
    }


def _answer(payload: dict[str, Any], model: str) -> ModelOutput:
    text = "".join(part.get("text", "") for part in payload.get("content", []))
    return {"text": text, "model": payload.get("model", model), "usage": payload.get("usage")}


def client_for(model: str) -> ModelClient:
    if model.startswith("scripted:"):
        return ScriptedClient()
    return import_string(conf.RUNLEDGER_MODEL_CLIENT)()  # type: ignore[no-any-return]
