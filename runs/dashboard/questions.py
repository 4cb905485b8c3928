"""The answer form of a run's question (``ctx.ask``): its fields made from the question's JSON
Schema, and the posted form read back into the answer. A schema this form cannot show field by
field (anything but an object of strings, numbers, integers, booleans and text choices) is
answered as JSON in one text box; either way ``transitions.question_answer`` validates the
answer against the schema itself."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from ledger.errors import InvalidInput

SIMPLE = ("string", "integer", "number", "boolean")


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # string | integer | number | boolean | choice
    title: str
    required: bool
    description: str = ""
    choices: list[str] = field(default_factory=list)


def answer_fields(schema: Any) -> list[Field] | None:
    """The form's fields, or None: answer as JSON."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return None
    required = schema.get("required") or []
    fields = []
    for name, prop in props.items():
        if not isinstance(prop, dict):
            return None
        enum = prop.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            kind = "choice"
        elif prop.get("type") in SIMPLE:
            kind = str(prop["type"])
        else:
            return None
        fields.append(
            Field(
                name=str(name),
                kind=kind,
                title=str(prop.get("title") or name),
                required=name in required,
                description=str(prop.get("description") or ""),
                choices=[str(v) for v in enum] if kind == "choice" and enum else [],
            )
        )
    # The required fields first: the stored schema's properties are in canonical (sorted) order,
    # not the author's, and what must be answered reads best at the top.
    return sorted(fields, key=lambda f: not f.required)


def read_answer(post: QueryDict, schema: Any) -> Any:
    """The answer the form posted (``InvalidInput`` when a value is not what its field takes)."""
    fields = answer_fields(schema)
    if fields is None:
        try:
            return json.loads(post.get("answer_json", ""))
        except ValueError as exc:
            raise InvalidInput(f"the answer is not JSON: {exc}") from None
    answer: dict[str, Any] = {}
    for f in fields:
        key = f"field_{f.name}"
        if f.kind == "boolean":
            answer[f.name] = post.get(key) == "on"
            continue
        text = post.get(key, "").strip()
        if not text:
            continue  # left empty: absent (the schema says whether it may be)
        if f.kind in ("integer", "number"):
            try:
                answer[f.name] = int(text) if f.kind == "integer" else float(text)
            except ValueError:
                raise InvalidInput(f"{f.title}: {text[:40]!r} is not a {f.kind}") from None
        else:
            answer[f.name] = text
    return answer
