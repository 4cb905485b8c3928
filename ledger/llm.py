"""The model client interface: how ``ctx.model(...)`` reaches a language model.

A model call is an external read with a non-deterministic answer: the engine hashes its inputs
(model id, system text, prompt, tool schema), stores the output and never asks again for a
recorded step. Clients only have to answer once.

``ScriptedClient`` is deterministic and needs no key: model ids ``scripted:<name>`` are answered
by a function registered with ``script(name)``. Any other model id goes to the real client in
``RUNLEDGER_MODEL_CLIENT`` (see ``AnthropicClient``).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

from django.utils.module_loading import import_string

from ledger.conf import conf

ModelOutput = dict[str, Any]
Script = Callable[[str, str], ModelOutput]

_scripts: dict[str, Script] = {}


class ModelClient(Protocol):
    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        """Return the model's answer as JSON data, e.g. ``{"text": ..., "tool_calls": [...]}``."""
        ...


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
        name = model.removeprefix("scripted:")
        fn = _scripts.get(name)
        if fn is None:
            raise LookupError(f"no scripted model named {name!r} (register one with script())")
        return fn(prompt, system)


class AnthropicClient:
    """Calls Anthropic's Messages API when ``ANTHROPIC_API_KEY`` is set (stdlib HTTP only)."""

    @property
    def url(self) -> str:
        base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
        return base.rstrip("/") + "/v1/messages"

    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        key = os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise RuntimeError("ANTHROPIC_API_KEY is not set")
        body = {
            "model": model,
            "max_tokens": 1024,
            "system": system,
            "messages": [{"role": "user", "content": prompt}],
        }
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
        text = "".join(part.get("text", "") for part in payload.get("content", []))
        return {"text": text, "model": payload.get("model", model), "usage": payload.get("usage")}


def client_for(model: str) -> ModelClient:
    if model.startswith("scripted:"):
        return ScriptedClient()
    return import_string(conf.RUNLEDGER_MODEL_CLIENT)()  # type: ignore[no-any-return]
