"""JSON schemas of tool parameters, derived from the tool function's signature.

The schema is what a model sees of a tool (the ``input_schema`` of Anthropic's Messages API, the
``parameters`` of OpenAI's function tools) and part of the agent's tool-schema hash: changing a
parameter's name, type or default changes the hash, as the model would see another tool.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``None``, ``list[X]``,
``tuple[X, ...]``, ``dict[str, X]``, ``Literal[...]``, ``X | None`` and ``Any`` (no constraint).
An annotation it cannot read (a forward reference it cannot resolve) gives no constraint.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

#: The effect key is the engine's to give, never the model's.
HIDDEN_PARAMS = frozenset({"idempotency_key"})

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    dict: {"type": "object"},
    list: {"type": "array"},
}


def parameters_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema (an ``object``) of ``fn``'s keyword parameters, in signature order."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an unresolvable forward reference: no constraint for any parameter
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if name in HIDDEN_PARAMS or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        prop = annotation_schema(hints.get(name, Any))
        if param.default is inspect.Parameter.empty:
            required.append(name)
        elif _is_json_scalar(param.default):
            prop = {**prop, "default": param.default}
        properties[name] = prop
    return {"type": "object", "properties": properties, "required": required}


def annotation_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema of one type annotation (``{}`` when anything goes)."""
    if annotation in _SCALARS:
        return dict(_SCALARS[annotation])
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [annotation_schema(a) for a in args]
        return {} if {} in options else {"anyOf": options}
    if origin in (list, tuple) and args:
        return {"type": "array", "items": annotation_schema(args[0])}
    if origin is dict:
        value = annotation_schema(args[1]) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    if origin in _SCALARS:
        return dict(_SCALARS[origin])
    return {}


def _is_json_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
