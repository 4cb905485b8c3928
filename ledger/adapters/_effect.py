"""The effect step running now in a framework adapter: its key and fencing token, for the tool
the author wrote (``effect_key()`` / ``fencing_token()`` of each adapter module)."""

from __future__ import annotations

import contextvars

from ledger.errors import AgentDefinitionError

#: (effect key, fencing token), or None outside an effect step (a key of None: not an effect).
Held = tuple[str | None, int | None] | None


class CurrentEffect:
    """A context variable holding (effect key, fencing token) while a framework tool runs as
    its effect step; ``where`` completes the error a call outside one raises ("call it inside
    <where>, while it runs")."""

    def __init__(self, name: str, where: str) -> None:
        self._var: contextvars.ContextVar[Held] = contextvars.ContextVar(name, default=None)
        self._where = where

    def get(self) -> Held:
        return self._var.get()

    def set(self, value: tuple[str | None, int | None]) -> contextvars.Token[Held]:
        return self._var.set(value)

    def reset(self, token: contextvars.Token[Held]) -> None:
        self._var.reset(token)

    def key(self) -> str:
        current = self._var.get()
        if current is None or current[0] is None:
            raise AgentDefinitionError(
                f"effect_key() is asked outside an effect: call it inside {self._where}, while "
                "it runs"
            )
        return current[0]

    def token(self) -> int | None:
        current = self._var.get()
        if current is None:
            raise AgentDefinitionError(
                "fencing_token() is asked outside an effect (see effect_key)"
            )
        return current[1]
